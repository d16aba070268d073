// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: the user.tierfs.* attributes: the stats of a mount, the tier
 * and sizes of a file.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/xattr.h>

#include "client/ctl/ctl.h"

void ctl_stats_free(struct ctl_stats *s)
{
	free(s->raw);
	free(s->kv);
	memset(s, 0, sizeof(*s));
}

/*
 * Split "key=value\n" lines. Lines without '=' or with an empty key are
 * skipped, a repeated key keeps its last value, and nothing is assumed
 * about which keys are there: the format grows by adding keys.
 */
static void stats_parse(struct ctl_stats *s, char *raw)
{
	char *save = NULL;

	s->raw = raw;
	s->kv = NULL;
	s->n = 0;
	for (char *line = strtok_r(raw, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		size_t len = strlen(line);
		size_t i;

		if (len && line[len - 1] == '\r')
			line[len - 1] = 0;
		if (!eq || eq == line)
			continue;
		*eq = 0;
		for (i = 0; i < s->n; i++)
			if (!strcmp(s->kv[i].key, line))
				break;
		if (i == s->n) {
			s->kv = ctl_xrealloc(s->kv,
					     (s->n + 1) * sizeof(*s->kv));
			s->n++;
		}
		s->kv[i].key = line;
		s->kv[i].val = eq + 1;
	}
}

/* The stats of @root, or with @root NULL of the descriptor @fd. */
static ssize_t get_stats(const char *root, int fd, char *buf, size_t len)
{
	return root ? getxattr(root, TFS_XATTR_STATS, buf, len) :
		      fgetxattr(fd, TFS_XATTR_STATS, buf, len);
}

static int stats_read(const char *root, int fd, struct ctl_stats *s)
{
	ssize_t n = get_stats(root, fd, NULL, 0);
	char *buf;
	int err;

	for (int tries = 0; n >= 0 && tries < 8; tries++) {
		buf = ctl_xmalloc(n + 1);
		n = get_stats(root, fd, buf, n + 1);
		if (n >= 0) {
			buf[n] = 0;
			stats_parse(s, buf);
			s->at = ctl_now_s();
			return 0;
		}
		err = errno;
		free(buf);
		/* grew between the two calls */
		if (err != ERANGE)
			return -err;
		n = get_stats(root, fd, NULL, 0);
	}
	return n < 0 ? -errno : -ERANGE;
}

int ctl_stats_read(const char *root, struct ctl_stats *s)
{
	return stats_read(root, -1, s);
}

int ctl_stats_read_fd(int fd, struct ctl_stats *s)
{
	return stats_read(NULL, fd, s);
}

bool ctl_stats_read_msg(const char *root, struct ctl_stats *s)
{
	int rc = ctl_stats_read(root, s);

	if (rc)
		ctl_error("'%s': cannot read %s: %s", root, TFS_XATTR_STATS,
			  strerror(-rc));
	return !rc;
}

const char *ctl_stats_get(const struct ctl_stats *s, const char *key)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->kv[i].key, key))
			return s->kv[i].val;
	return NULL;
}

bool ctl_stats_u64(const struct ctl_stats *s, const char *key, uint64_t *v)
{
	return ctl_parse_u64(ctl_stats_get(s, key), v);
}

/* Reads one virtual xattr as a string; returns its length or -errno. */
static ssize_t get_xattr_str(const char *path, const char *name, char *buf,
			     size_t len)
{
	ssize_t n = getxattr(path, name, buf, len - 1);

	if (n < 0)
		return -errno;
	buf[n] = 0;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = 0;
	return n;
}

bool ctl_get_xattr_u64(const char *path, const char *name, uint64_t *v)
{
	char buf[64];

	return get_xattr_str(path, name, buf, sizeof(buf)) >= 0 &&
	       ctl_parse_u64(buf, v);
}

int ctl_get_tier(const char *path, const struct ctl_tiers *tiers, char *name,
		 size_t len)
{
	char buf[32];
	ssize_t n = get_xattr_str(path, TFS_XATTR_TIER, buf, sizeof(buf));
	int t;

	if (n < 0) {
		errno = (int)-n;
		return -1;
	}
	snprintf(name, len, "%s", buf);
	t = ctl_tiers_index(tiers, buf, n);
	if (t < 0)
		errno = EPROTO;
	return t;
}
