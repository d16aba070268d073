// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The value parsers behind the key table in config.c: sizes, numbers,
 * fractions, booleans and paths, each with its own error message.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_int.h"

/* Size parsing */

static const struct {
	char c;
	unsigned int shift;
} suffixes[] = { { 'k', 10 }, { 'm', 20 }, { 'g', 30 }, { 't', 40 } };

/*
 * "what is wrong" goes to @why, starting with the value in quotes. The
 * number is read by hand rather than with strtoull/strtod, which accept
 * signs, hexadecimal, exponents and "inf".
 */
int parse_size(const char *s, bool allow_percent, struct cfg_size *out,
		      char *why, size_t whylen)
{
	const char *p = s;
	uint64_t whole = 0, frac = 0, frac_div = 1, bytes;
	unsigned int shift = 0, i;
	unsigned __int128 total;
	bool has_frac = false;

	while (isspace((unsigned char)*p))
		p++;
	if (!*p) {
		say(why, whylen, "empty value, expected a size such as 4096, "
				 "64K or 1.5G");
		return -EINVAL;
	}
	if (*p == '-') {
		say(why, whylen, "'%s' is negative", s);
		return -EINVAL;
	}
	if (*p == '+') {
		say(why, whylen, "'%s' is not a size: no sign allowed", s);
		return -EINVAL;
	}
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		say(why, whylen, "'%s' is not a size: hexadecimal is not "
				 "accepted", s);
		return -EINVAL;
	}
	if (!isdigit((unsigned char)*p)) {
		say(why, whylen, "'%s' is not a size: expected a number such as "
				 "4096, 64K or 1.5G", s);
		return -EINVAL;
	}
	for (; isdigit((unsigned char)*p); p++) {
		if (whole > UINT64_MAX / 10 ||
		    (whole == UINT64_MAX / 10 &&
		     (uint64_t)(*p - '0') > UINT64_MAX % 10)) {
			say(why, whylen, "'%s' is too large", s);
			return -EINVAL;
		}
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		p++;
		if (!isdigit((unsigned char)*p)) {
			say(why, whylen, "'%s' is not a size: expected a digit "
					 "after '.'", s);
			return -EINVAL;
		}
		has_frac = true;
		/* Digits past the 12th are worth less than a byte even in T. */
		for (i = 0; isdigit((unsigned char)*p); p++, i++) {
			if (i < 12) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				frac_div *= 10;
			}
		}
	}
	while (*p == ' ' || *p == '\t')
		p++;

	if (*p == '%') {
		double pct;

		if (!allow_percent) {
			say(why, whylen, "'%s': a percentage is only allowed for "
					 "limits", s);
			return -EINVAL;
		}
		for (p++; isspace((unsigned char)*p); p++)
			;
		if (*p) {
			say(why, whylen, "'%s' is not a size: unexpected text "
					 "after '%%'", s);
			return -EINVAL;
		}
		pct = (double)whole + (double)frac / (double)frac_div;
		if (!(pct > 0.0) || pct > 100.0) {
			say(why, whylen, "'%s': a percentage must be above 0 and "
					 "at most 100", s);
			return -EINVAL;
		}
		out->bytes = 0;
		out->percent = pct;
		out->is_percent = true;
		return 0;
	}

	if (*p && *p != 'b' && *p != 'B') {
		for (i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++)
			if (tolower((unsigned char)*p) == suffixes[i].c)
				break;
		if (i == sizeof(suffixes) / sizeof(suffixes[0])) {
			say(why, whylen, "'%s' is not a size: unknown suffix "
					 "'%s' (use K, M, G or T)", s, p);
			return -EINVAL;
		}
		shift = suffixes[i].shift;
		p++;
		if (*p == 'i' || *p == 'I') {
			p++;
			if (*p != 'b' && *p != 'B') {
				say(why, whylen, "'%s' is not a size: expected "
						 "'B' after 'i'", s);
				return -EINVAL;
			}
		}
	}
	if (*p == 'b' || *p == 'B')
		p++;
	while (isspace((unsigned char)*p))
		p++;
	if (*p) {
		say(why, whylen, "'%s' is not a size: unexpected '%s' at the "
				 "end", s, p);
		return -EINVAL;
	}

	total = ((unsigned __int128)whole << shift) +
		(((unsigned __int128)frac << shift) / frac_div);
	if (total > UINT64_MAX) {
		say(why, whylen, "'%s' is too large", s);
		return -EINVAL;
	}
	bytes = (uint64_t)total;
	if (has_frac && !shift && frac) {
		say(why, whylen, "'%s' is not a whole number of bytes", s);
		return -EINVAL;
	}
	out->bytes = bytes;
	out->percent = 0.0;
	out->is_percent = false;
	return 0;
}

int cfg_parse_size(const char *s, bool allow_percent, struct cfg_size *out)
{
	struct cfg_size sz;
	int rc;

	if (!s)
		return -EINVAL;
	rc = parse_size(s, allow_percent, &sz, NULL, 0);
	if (!rc)
		*out = sz;
	return rc;
}

uint64_t cfg_size_resolve(const struct cfg_size *sz, uint64_t capacity)
{
	long double v;

	if (!sz->is_percent)
		return sz->bytes;
	v = (long double)capacity * (long double)sz->percent / 100.0L;
	if (v >= (long double)capacity)
		return capacity;
	return (uint64_t)v;
}

/* Other value types */

int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out,
		      char *why, size_t whylen)
{
	const char *p = s;
	uint64_t v = 0;

	while (isspace((unsigned char)*p))
		p++;
	if (*p == '-') {
		say(why, whylen, "'%s' is negative, must be %llu to %llu", s,
		    (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	if (!isdigit((unsigned char)*p)) {
		say(why, whylen, "'%s' is not a whole number", s);
		return -EINVAL;
	}
	/* Saturate: anything this large is out of range anyway. */
	for (; isdigit((unsigned char)*p); p++)
		v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX
					      : v * 10 + (uint64_t)(*p - '0');
	while (isspace((unsigned char)*p))
		p++;
	if (*p) {
		say(why, whylen, "'%s' is not a whole number", s);
		return -EINVAL;
	}
	if (v < min || v > max) {
		say(why, whylen, "'%s' is out of range, must be %llu to %llu", s,
		    (unsigned long long)min, (unsigned long long)max);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int parse_fraction(const char *s, double *out, char *why, size_t whylen)
{
	const char *p;
	char *end;
	bool dot = false, digit = false;
	double v;

	for (p = s; *p; p++) {
		if (isdigit((unsigned char)*p)) {
			digit = true;
		} else if (*p == '.' && !dot) {
			dot = true;
		} else if (!isspace((unsigned char)*p)) {
			digit = false;
			break;
		}
	}
	if (!digit) {
		say(why, whylen, "'%s' is not a fraction such as 0.9", s);
		return -EINVAL;
	}
	errno = 0;
	v = strtod(s, &end);
	while (isspace((unsigned char)*end))
		end++;
	if (errno || *end || !isfinite(v)) {
		say(why, whylen, "'%s' is not a fraction such as 0.9", s);
		return -EINVAL;
	}
	if (!(v > 0.0) || v > 1.0) {
		say(why, whylen, "'%s' is out of range, must be above 0 and at "
				 "most 1", s);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

int parse_bool(const char *s, bool *out, char *why, size_t whylen)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return 0;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return 0;
		}
	}
	say(why, whylen, "'%s' is not a boolean, use yes or no", s);
	return -EINVAL;
}
/*
 * A relative path is taken from the directory tierfs started in: the
 * daemon changes to / when it forks, so keep it absolute from here on.
 */
int parse_path(const char *s, char **out, char *why, size_t whylen)
{
	char *cwd, *p;

	if (!*s) {
		say(why, whylen, "empty path");
		return -EINVAL;
	}
	if (strlen(s) >= PATH_MAX) {
		say(why, whylen, "path is longer than %d bytes", PATH_MAX - 1);
		return -EINVAL;
	}
	if (s[0] == '/') {
		p = strdup(s);
	} else {
		cwd = getcwd(NULL, 0);
		if (!cwd) {
			int e = errno;

			say(why, whylen, "'%s' is relative and the current "
					 "directory is unknown: %s", s,
			    strerror(e));
			return -e;
		}
		if (asprintf(&p, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "",
			     s) < 0)
			p = NULL;
		free(cwd);
	}
	if (!p) {
		say(why, whylen, "out of memory");
		return -ENOMEM;
	}
	*out = p;
	return 0;
}

/* "all", or ordinals separated by ',' or ':' (spaces allowed), each
 * once. */
int parse_gpus(const char *s, struct cfg_gpus *out, char *why,
		      size_t whylen)
{
	struct cfg_gpus g = { 0 };
	const char *p = s;

	if (!strcasecmp(s, "all")) {
		g.all = true;
		*out = g;
		return 0;
	}
	for (;;) {
		char *end;
		long v;

		while (isspace((unsigned char)*p))
			p++;
		if (*p < '0' || *p > '9') {
			say(why, whylen, "'%s' is not 'all' or a list of GPU "
					 "ordinals such as 0,1 (0:1 in -o)", s);
			return -EINVAL;
		}
		errno = 0;
		v = strtol(p, &end, 10);
		if (errno || v > CFG_GPU_ORD_MAX) {
			say(why, whylen, "'%s': GPU ordinal out of range, must "
					 "be 0 to %d", s, CFG_GPU_ORD_MAX);
			return -EINVAL;
		}
		for (unsigned int i = 0; i < g.n; i++) {
			if (g.ord[i] == (int)v) {
				say(why, whylen, "'%s': GPU %ld is listed twice",
				    s, v);
				return -EINVAL;
			}
		}
		if (g.n == CFG_MAX_GPUS) {
			say(why, whylen, "'%s': more than %d GPUs", s,
			    CFG_MAX_GPUS);
			return -EINVAL;
		}
		g.ord[g.n++] = (int)v;
		while (isspace((unsigned char)*end))
			end++;
		if (!*end)
			break;
		if (*end != ',' && *end != ':') {
			say(why, whylen, "'%s' is not 'all' or a list of GPU "
					 "ordinals such as 0,1 (0:1 in -o)", s);
			return -EINVAL;
		}
		p = end + 1;
	}
	*out = g;
	return 0;
}
