// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: paths and directory walks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "client/ctl/ctl.h"

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
