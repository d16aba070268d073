// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: paths and directory walks.
 *
 * tierfsctl runs as root on mounts where users own directories, and a user
 * can swap any name of theirs for a symlink (renameat2 RENAME_EXCHANGE) at
 * any moment: a path checked and then opened again by name may be opened
 * somewhere else. What removes or writes as root therefore opens from a
 * descriptor of the mount's root, refusing symlinks and other mounts at
 * every step, and works below the descriptor it got.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "client/ctl/ctl.h"

/* One openat2() with every step beneath @dirfd, on its mount, no
 * symlinks; -ENOSYS (or what an older kernel says) when there is none. */
static int open_beneath2(int dirfd, const char *rel, int flags)
{
#ifdef SYS_openat2
	struct open_how how = {
		.flags = (uint64_t)(flags | O_NOFOLLOW | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
			   RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dirfd, rel, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
#else
	return -ENOSYS;
#endif
}

/* The same one component at a time, for kernels before 5.6. */
static int open_stepwise(int dirfd, const char *rel, int flags, dev_t dev)
{
	char *copy = ctl_xstrdup(rel), *save = NULL, *next;
	int fd = dup(dirfd), rc = 0;
	struct stat st;

	if (fd < 0) {
		free(copy);
		return -errno;
	}
	for (char *c = strtok_r(copy, "/", &save); c; c = next) {
		next = strtok_r(NULL, "/", &save);
		if (!strcmp(c, "."))
			continue;
		if (!strcmp(c, "..")) {
			rc = -EXDEV;
			break;
		}
		int nfd = openat(fd, c, (next ? O_RDONLY | O_DIRECTORY : flags) |
					       O_NOFOLLOW | O_CLOEXEC);

		rc = nfd < 0 ? -errno : 0;
		close(fd);
		fd = nfd;
		if (rc)
			break;
		if (fstat(fd, &st)) {
			rc = -errno;
			break;
		}
		if (st.st_dev != dev) {
			rc = -EXDEV;
			break;
		}
	}
	free(copy);
	if (rc) {
		if (fd >= 0)
			close(fd);
		return rc;
	}
	return fd;
}

int ctl_open_beneath(int dirfd, const char *rel, int flags)
{
	struct stat st;
	int fd;

	if (fstat(dirfd, &st))
		return -errno;
	while (*rel == '/')
		rel++;
	if (!*rel)
		rel = ".";
	fd = open_beneath2(dirfd, rel, flags);
	if (fd == -ENOSYS || fd == -E2BIG)
		fd = open_stepwise(dirfd, rel, flags, st.st_dev);
	if (fd < 0)
		return fd;
	/* And still there: the same device as the directory it started
	 * from. */
	struct stat got;

	if (fstat(fd, &got) || got.st_dev != st.st_dev) {
		close(fd);
		return -EXDEV;
	}
	return fd;
}

char *ctl_join_path(const char *dir, const char *name)
{
	size_t n = strlen(dir);

	if (n && dir[n - 1] == '/')
		return ctl_xasprintf("%s%s", dir, name);
	return ctl_xasprintf("%s/%s", dir, name);
}

bool ctl_walk_dir(const char *dir,
		  bool (*fn)(void *ctx, char *path, const struct stat *st),
		  void *ctx)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool ok = true;

	if (!d) {
		ctl_op_error("'%s': %s", dir, strerror(errno));
		return false;
	}
	while ((errno = 0, de = readdir(d))) {
		struct stat st;
		char *path;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		path = ctl_join_path(dir, de->d_name);
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			ctl_op_error("'%s': %s", path, strerror(errno));
			free(path);
			ok = false;
			continue;
		}
		ok &= fn(ctx, path, &st);
	}
	if (errno) {
		ctl_op_error("'%s': %s", dir, strerror(errno));
		ok = false;
	}
	closedir(d);
	return ok;
}
