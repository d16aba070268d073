// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl cleanup: remove directory trees on a mount.
 *
 * Root runs it on directories users own, who may swap any of their names
 * for a symlink while it runs: the directory is reached from a descriptor
 * of the mount's root with no symlink and no other mount on the way
 * (ctl_open_beneath()), and everything below it is opened from its
 * parent's descriptor with O_NOFOLLOW and checked to be on the mount's
 * device before anything in it is removed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

struct rm_count {
	uint64_t files, dirs;
};

/*
 * Removes @name in @dfd and everything below it, without following
 * symlinks or crossing into another mount. @path is for messages.
 */
static bool rm_tree(int dfd, const char *name, const char *path, dev_t dev,
		    struct rm_count *c)
{
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					   O_CLOEXEC);
	struct dirent *de;
	struct stat top;
	bool ok = true;
	DIR *d;

	if (fd < 0) {
		ctl_op_error("'%s': %s", path, strerror(errno));
		return false;
	}
	/* What was checked by name may have been swapped since. */
	if (fstat(fd, &top) || top.st_dev != dev) {
		ctl_op_error("'%s': not on the mount any more, left alone",
			     path);
		close(fd);
		return false;
	}
	d = fdopendir(fd);
	if (!d) {
		ctl_op_error("'%s': %s", path, strerror(errno));
		close(fd);
		return false;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		char *sub;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		sub = ctl_join_path(path, de->d_name);
		if (fstatat(fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			ctl_op_error("'%s': %s", sub, strerror(errno));
			ok = false;
		} else if (S_ISDIR(st.st_mode) && st.st_dev != dev) {
			ctl_op_error("'%s': another mount, left alone", sub);
			ok = false;
		} else if (S_ISDIR(st.st_mode)) {
			ok &= rm_tree(fd, de->d_name, sub, dev, c);
		} else if (unlinkat(fd, de->d_name, 0)) {
			ctl_op_error("'%s': %s", sub, strerror(errno));
			ok = false;
		} else {
			c->files++;
		}
		free(sub);
	}
	if (errno) {
		ctl_op_error("'%s': %s", path, strerror(errno));
		ok = false;
	}
	closedir(d);
	if (!ok)
		return false;
	if (unlinkat(dfd, name, AT_REMOVEDIR)) {
		ctl_op_error("'%s': %s", path, strerror(errno));
		return false;
	}
	c->dirs++;
	return true;
}

/*
 * The descriptor of the directory holding @dir's last component, opened
 * from the mount's root as ctl_open_beneath() does, with that component in
 * *@last (malloc'd) and the mount's device in *@dev; -1 with a message.
 */
static int open_parent(const char *dir, char **last, dev_t *dev)
{
	char *root, *real, *rel, *slash;
	int rootfd, fd = -1;
	size_t n;

	rootfd = ctl_open_mount_root(dir, &root, dev);
	if (rootfd < 0)
		return -1;
	real = realpath(dir, NULL);
	n = strlen(root);
	if (!real) {
		ctl_error("'%s': %s", dir, strerror(errno));
		goto out;
	}
	if (!strcmp(real, root)) {
		ctl_error("'%s': refusing to remove the mount root", dir);
		goto out;
	}
	/* Where the path led a moment ago, if that is on the mount still;
	 * each step is checked again below. */
	if (strcmp(root, "/") &&
	    (strncmp(real, root, n) || real[n] != '/')) {
		ctl_error("'%s': not on the tierfs mount '%s'", dir, root);
		goto out;
	}
	rel = real + (strcmp(root, "/") ? n : 0);
	slash = strrchr(rel, '/');
	*slash = '\0';
	*last = ctl_xstrdup(slash + 1);
	fd = ctl_open_beneath(rootfd, rel, O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		ctl_error("'%s': %s", dir,
			  fd == -ELOOP ? "a symlink on the way, left alone" :
			  fd == -EXDEV ? "not on the mount any more, left alone" :
					 strerror(-fd));
		free(*last);
		fd = -1;
	}
out:
	free(real);
	free(root);
	close(rootfd);
	return fd;
}

static int cleanup_one(const char *dir, bool quiet)
{
	struct rm_count c = { 0 };
	struct stat st;
	char *last;
	dev_t dev;
	int pfd;
	bool ok;

	if (lstat(dir, &st)) {
		ctl_error("'%s': %s", dir, strerror(errno));
		return EXIT_FAIL;
	}
	if (!S_ISDIR(st.st_mode)) {
		ctl_error("'%s': %s", dir, strerror(ENOTDIR));
		return EXIT_FAIL;
	}
	pfd = open_parent(dir, &last, &dev);
	if (pfd < 0)
		return EXIT_FAIL;
	ok = rm_tree(pfd, last, dir, dev, &c);
	if (!quiet)
		printf("cleanup: '%s': removed %" PRIu64 " file%s and %" PRIu64
		       " director%s\n",
		       dir, c.files, c.files == 1 ? "" : "s", c.dirs,
		       c.dirs == 1 ? "y" : "ies");
	free(last);
	close(pfd);
	return ok ? 0 : EXIT_FAIL;
}

int cmd_cleanup(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	bool quiet = false;
	int c, rc = 0;

	while ((c = ctl_next_opt(argc, argv, ":q", lo)) != -1) {
		switch (c) {
		case 'q':
			quiet = true;
			break;
		}
	}
	if (optind == argc)
		return ctl_bad_usage("no DIR given");
	for (int i = optind; i < argc; i++)
		if (cleanup_one(argv[i], quiet))
			rc = EXIT_FAIL;
	return rc;
}
