// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: messages, allocation that cannot fail, numbers, the tier names.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ctl/ctl.h"

const char *const ctl_tier_names[TFS_TIER_COUNT] = {
	[TFS_TIER_DEVICE] = "device",
	[TFS_TIER_HOST] = "host",
	[TFS_TIER_DISK] = "disk",
};

void ctl_error(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("tierfsctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void ctl_op_error(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "tierfsctl: %s: ", ctl_cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void *ctl_xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		ctl_error("out of memory");
		exit(EXIT_FAIL);
	}
	return p;
}

void *ctl_xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p) {
		ctl_error("out of memory");
		exit(EXIT_FAIL);
	}
	return p;
}

char *ctl_xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(ctl_xmalloc(n), s, n);
}

char *ctl_xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0) {
		ctl_error("out of memory");
		exit(EXIT_FAIL);
	}
	return s;
}

bool ctl_parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

double ctl_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void ctl_stats_tiers(const struct ctl_stats *s, struct ctl_tiers *out)
{
	const char *v = ctl_stats_get(s, "tiers");

	out->n = 0;
	while (v && *v && out->n < TFS_TIER_MAX) {
		size_t len = strcspn(v, ",");

		if (len && len < sizeof(out->name[0]))
			snprintf(out->name[out->n++], sizeof(out->name[0]),
				 "%.*s", (int)len, v);
		v += len + (v[len] == ',');
	}
	if (out->n)
		return;
	for (int t = 0; t < TFS_TIER_COUNT; t++)
		snprintf(out->name[out->n++], sizeof(out->name[0]), "%s",
			 ctl_tier_names[t]);
}

int ctl_tiers_index(const struct ctl_tiers *t, const char *name, size_t len)
{
	for (unsigned int i = 0; i < t->n; i++)
		if (strlen(t->name[i]) == len && !memcmp(t->name[i], name, len))
			return (int)i;
	return -1;
}
