// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl cleanup: remove directory trees on a mount.
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
	bool ok = true;
	DIR *d;

	if (fd < 0) {
		ctl_op_error("'%s': %s", path, strerror(errno));
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

static int cleanup_one(const char *dir, bool quiet)
{
	struct rm_count c = { 0 };
	char *root, *real;
	struct stat st;
	bool ok;

	if (lstat(dir, &st)) {
		ctl_error("'%s': %s", dir, strerror(errno));
		return EXIT_FAIL;
	}
	if (!S_ISDIR(st.st_mode)) {
		ctl_error("'%s': %s", dir, strerror(ENOTDIR));
		return EXIT_FAIL;
	}
	if (!ctl_resolve_mount_msg(dir, &root))
		return EXIT_FAIL;
	real = realpath(dir, NULL);
	if (!real || !strcmp(real, root)) {
		ctl_error("'%s': %s", dir,
			  real ? "refusing to remove the mount root" :
				 strerror(errno));
		free(real);
		free(root);
		return EXIT_FAIL;
	}
	ok = rm_tree(AT_FDCWD, dir, dir, st.st_dev, &c);
	if (!quiet)
		printf("cleanup: '%s': removed %" PRIu64 " file%s and %" PRIu64
		       " director%s\n",
		       dir, c.files, c.files == 1 ? "" : "s", c.dirs,
		       c.dirs == 1 ? "y" : "ies");
	free(real);
	free(root);
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
