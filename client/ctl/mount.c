// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: which tierfs mount a path is on, and every tierfs mount there is.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

#define FUSE_SUPER_MAGIC 0x65735546
#define TIERFS_FSTYPE "fuse.tierfs"

/* resolve_mount() result for a path that exists but is not on tierfs */
#define NOT_TIERFS 1

struct mount_ent {
	char *point;
	char *root; /* the mounted subtree; "/" unless a bind mount */
	char *fstype;
	char *source;
	dev_t dev;
};

struct mount_tab {
	struct mount_ent *e;
	size_t n;
};

/* mountinfo escapes space, tab, newline and backslash as \ooo */
static void unescape_octal(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 |
				      (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = 0;
}

static void mount_tab_free(struct mount_tab *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->e[i].point);
		free(t->e[i].root);
		free(t->e[i].fstype);
		free(t->e[i].source);
	}
	free(t->e);
	t->e = NULL;
	t->n = 0;
}

/* Returns 0 or -errno. */
static int mount_tab_read(struct mount_tab *t)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0;

	t->e = NULL;
	t->n = 0;
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *field[64];
		int nf = 0, dash = -1;
		unsigned int maj, min;
		char *save = NULL;
		struct mount_ent *e;

		for (char *tok = strtok_r(line, " \n", &save); tok && nf < 64;
		     tok = strtok_r(NULL, " \n", &save)) {
			if (dash < 0 && nf >= 6 && !strcmp(tok, "-"))
				dash = nf;
			field[nf++] = tok;
		}
		if (dash < 0 || nf < dash + 3 ||
		    sscanf(field[2], "%u:%u", &maj, &min) != 2)
			continue;
		t->e = ctl_xrealloc(t->e, (t->n + 1) * sizeof(*t->e));
		e = &t->e[t->n++];
		unescape_octal(field[3]);
		unescape_octal(field[4]);
		unescape_octal(field[dash + 2]);
		e->root = ctl_xstrdup(field[3]);
		e->point = ctl_xstrdup(field[4]);
		e->fstype = ctl_xstrdup(field[dash + 1]);
		e->source = ctl_xstrdup(field[dash + 2]);
		e->dev = makedev(maj, min);
	}
	free(line);
	fclose(f);
	return 0;
}

static bool path_under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return path[0] == '/';
	return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

static bool is_fuse_fstype(const char *fstype)
{
	return !strcmp(fstype, "fuse") || !strncmp(fstype, "fuse.", 5);
}

static bool answers_stats(const char *root)
{
	return getxattr(root, TFS_XATTR_STATS, NULL, 0) >= 0;
}

/*
 * Find the root of the tierfs mount holding @path. Returns 0 with a
 * malloc'd *root, NOT_TIERFS, or -errno when @path cannot be looked at.
 *
 * The mount is the mountinfo entry with the file's st_dev whose mount point
 * is the longest prefix of its real path (several entries share a device
 * when the mount is bound elsewhere). Its type is fuse.tierfs when the
 * daemon sets its subtype; a FUSE mount of another type still counts when
 * its root answers user.tierfs.stats, so a daemon started under another
 * name or through mount.fuse3 without a subtype is not turned away.
 */
static int resolve_mount_at(const char *path, char **root, dev_t *dev,
			    bool *whole)
{
	struct mount_tab tab;
	struct mount_ent *best = NULL;
	struct statfs sfs;
	struct stat st;
	char *real;
	int rc;

	if (stat(path, &st) || statfs(path, &sfs))
		return -errno;
	if ((unsigned long)sfs.f_type != FUSE_SUPER_MAGIC)
		return NOT_TIERFS;
	real = realpath(path, NULL);
	if (!real)
		return -errno;
	rc = mount_tab_read(&tab);
	if (rc) {
		free(real);
		return rc;
	}
	for (size_t i = 0; i < tab.n; i++) {
		struct mount_ent *e = &tab.e[i];

		if (e->dev != st.st_dev || !path_under(real, e->point))
			continue;
		if (!best || strlen(e->point) >= strlen(best->point))
			best = e;
	}
	rc = NOT_TIERFS;
	if (best && (!strcmp(best->fstype, TIERFS_FSTYPE) ||
		     (is_fuse_fstype(best->fstype) &&
		      answers_stats(best->point)))) {
		*root = ctl_xstrdup(best->point);
		if (dev)
			*dev = best->dev;
		if (whole)
			*whole = !strcmp(best->root, "/");
		rc = 0;
	}
	mount_tab_free(&tab);
	free(real);
	return rc;
}

static int resolve_mount(const char *path, char **root)
{
	return resolve_mount_at(path, root, NULL, NULL);
}

/* FUSE's root inode: what the root of a whole tierfs mount is. */
#define FUSE_ROOT_INO 1

int ctl_open_mount_root(const char *path, char **root, dev_t *dev)
{
	struct statfs sfs;
	struct stat st;
	bool whole;
	int fd, rc;

	rc = resolve_mount_at(path, root, dev, &whole);
	if (rc == NOT_TIERFS)
		ctl_error("'%s': not on a tierfs mount", path);
	else if (rc)
		ctl_error("'%s': %s", path, strerror(-rc));
	if (rc)
		return -1;
	fd = open(*root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		ctl_error("'%s': %s", *root, strerror(errno));
		goto out_free;
	}
	if (fstat(fd, &st) || fstatfs(fd, &sfs)) {
		ctl_error("'%s': %s", *root, strerror(errno));
		goto out_close;
	}
	if (st.st_dev != *dev || (unsigned long)sfs.f_type != FUSE_SUPER_MAGIC ||
	    (whole && st.st_ino != FUSE_ROOT_INO)) {
		ctl_error("'%s' is not the root of its tierfs mount any more "
			  "(was a directory on the way to it renamed?)", *root);
		goto out_close;
	}
	return fd;

out_close:
	close(fd);
out_free:
	free(*root);
	*root = NULL;
	return -1;
}

bool ctl_resolve_mount_msg(const char *path, char **root)
{
	int rc = resolve_mount(path, root);

	if (rc == NOT_TIERFS)
		ctl_error("'%s': not on a tierfs mount", path);
	else if (rc)
		ctl_error("'%s': %s", path, strerror(-rc));
	return !rc;
}

int ctl_all_mounts(char ***out)
{
	struct mount_tab tab;
	char **v = NULL;
	int n = 0, rc;

	rc = mount_tab_read(&tab);
	if (rc) {
		ctl_error("/proc/self/mountinfo: %s", strerror(-rc));
		return -1;
	}
	for (size_t i = 0; i < tab.n; i++) {
		bool dup = false;

		if (strcmp(tab.e[i].fstype, TIERFS_FSTYPE))
			continue;
		for (int j = 0; j < n; j++)
			dup |= !strcmp(v[j], tab.e[i].point);
		if (dup)
			continue;
		v = ctl_xrealloc(v, (n + 1) * sizeof(*v));
		v[n++] = ctl_xstrdup(tab.e[i].point);
	}
	mount_tab_free(&tab);
	*out = v;
	return n;
}

void ctl_free_strv(char **v, int n)
{
	for (int i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

char *ctl_pick_mount(const char *arg)
{
	char **v, *root = NULL;
	int n;

	if (arg)
		return ctl_resolve_mount_msg(arg, &root) ? root : NULL;
	/* Run inside a mount, that one, as git finds its repository. */
	if (!resolve_mount(".", &root))
		return root;
	n = ctl_all_mounts(&v);
	if (n < 0)
		return NULL;
	if (n == 0) {
		ctl_error("no tierfs mount found; name one");
	} else if (n > 1) {
		fflush(stdout);
		fprintf(stderr, "tierfsctl: %d tierfs mounts; name one, or "
				"run this inside it:\n", n);
		for (int i = 0; i < n; i++)
			fprintf(stderr, "  %s\n", v[i]);
	} else {
		root = v[0];
		v[0] = NULL;
	}
	ctl_free_strv(v, n);
	return root;
}

/* The mount has a device tier unless its stats say otherwise; its chain
 * is what they list. */
static bool mount_read(const char *root, struct ctl_tiers *tiers)
{
	static const struct ctl_stats none;
	struct ctl_stats st;
	uint64_t limit;
	bool yes;

	if (ctl_stats_read(root, &st)) {
		ctl_stats_tiers(&none, tiers);
		return true;
	}
	yes = !ctl_stats_u64(&st, "device.limit", &limit) || limit;
	ctl_stats_tiers(&st, tiers);
	ctl_stats_free(&st);
	return yes;
}

bool ctl_on_tierfs(struct ctl_dev_cache *c, const char *path, dev_t dev,
		   bool *has_device, const struct ctl_tiers **tiers)
{
	char *root;
	int i;

	for (i = 0; i < c->n; i++)
		if (c->e[i].dev == dev)
			goto out;
	if (!ctl_resolve_mount_msg(path, &root))
		return false;
	/* A full cache lends its last entry to each further mount. */
	i = c->n < 8 ? c->n++ : 7;
	c->e[i].dev = dev;
	c->e[i].has_device = mount_read(root, &c->e[i].tiers);
	free(root);
out:
	if (has_device)
		*has_device = c->e[i].has_device;
	if (tiers)
		*tiers = &c->e[i].tiers;
	return true;
}
