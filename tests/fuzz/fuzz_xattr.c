// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The parsers of the values written to the virtual xattrs (fs/args.c:
 * tfs_xattr_parse_tier, tfs_xattr_parse_pin, tfs_xattr_parse_pin_value)
 * on any bytes.
 *
 * Contract checked, against a reference written from tierfs(8) and
 * fs/args.h: user.tierfs.tier takes device, host or disk in any case, or
 * device:N with N 1 to 3 digits up to 255 (the GPU, -1 for a plain name),
 * with any newlines and NULs after it; user.tierfs.pin takes 0 or 1 with
 * one newline after it at most; the full user.tierfs.pin value also takes
 * a soft pin, "prio=N" (N 1 to 7), "ttl=D" (decimal seconds, or with one
 * s, m, h or d after them, 1 s to 7 d; priority 1) or both, comma
 * separated, each once, in either order, again with one newline after it
 * at most; everything else is EINVAL, and a refused value leaves the
 * output alone. An accepted pin, formatted (tfs_xattr_format_pin), reads
 * back as itself.
 */
#include <ctype.h>
#include <errno.h>
#include <strings.h>

#include "fs/args.h"
#include "fuzz.h"

static int ref_tier(const uint8_t *v, size_t n, enum tfs_tier *t, int *gpu)
{
	static const char *const names[] = { "device", "host", "disk" };

	while (n && (v[n - 1] == '\n' || v[n - 1] == '\0'))
		n--;
	if (n >= 8 && n <= 10 && !strncasecmp((const char *)v, "device:", 7)) {
		int g = 0;

		for (size_t i = 7; i < n; i++) {
			if (!isdigit(v[i]))
				return -EINVAL;
			g = g * 10 + (v[i] - '0');
		}
		if (g > 255)
			return -EINVAL;
		*t = TFS_TIER_DEVICE;
		*gpu = g;
		return 0;
	}
	for (int k = 0; k < 3; k++) {
		size_t l = strlen(names[k]), i;

		if (n != l)
			continue;
		for (i = 0; i < l && tolower(v[i]) == names[k][i]; i++)
			;
		if (i == l) {
			*t = (enum tfs_tier)k;
			*gpu = -1;
			return 0;
		}
	}
	return -EINVAL;
}

static int ref_pin(const uint8_t *v, size_t n, bool *pin)
{
	if ((n == 1 || (n == 2 && v[1] == '\n')) &&
	    (v[0] == '0' || v[0] == '1')) {
		*pin = v[0] == '1';
		return 0;
	}
	return -EINVAL;
}

static bool has_prefix(const uint8_t *v, size_t n, const char *p)
{
	size_t l = strlen(p);

	return n >= l && !memcmp(v, p, l);
}

/* D of "ttl=D": digits, then at most one unit letter. */
static int ref_ttl(const uint8_t *v, size_t n, uint32_t *ttl)
{
	uint64_t secs = 0, unit = 1;
	size_t i;

	for (i = 0; i < n && isdigit(v[i]); i++) {
		secs = secs * 10 + (uint64_t)(v[i] - '0');
		if (secs > TFS_PIN_TTL_MAX) /* too long with any unit */
			return -EINVAL;
	}
	if (!i || n - i > 1)
		return -EINVAL;
	if (i < n) {
		const char *u = memchr("smhd", v[i], 4);
		static const uint64_t units[] = { 1, 60, 3600, 86400 };

		if (!u)
			return -EINVAL;
		unit = units[u - "smhd"];
	}
	secs *= unit;
	if (secs < 1 || secs > TFS_PIN_TTL_MAX)
		return -EINVAL;
	*ttl = (uint32_t)secs;
	return 0;
}

static int ref_pin_value(const uint8_t *v, size_t n, struct tfs_pin_value *out)
{
	struct tfs_pin_value r = { 0 };
	bool seen_ttl = false;
	size_t at = 0;

	if (n && v[n - 1] == '\n')
		n--;
	if (n == 1 && (v[0] == '0' || v[0] == '1')) {
		r.hard = v[0] == '1';
		*out = r;
		return 0;
	}
	if (!n)
		return -EINVAL;
	/* Items between commas; an empty one (a leading, doubled or
	 * trailing comma) names nothing. */
	for (;;) {
		const uint8_t *item = v + at, *c = memchr(item, ',', n - at);
		size_t len = c ? (size_t)(c - item) : n - at;

		if (has_prefix(item, len, "prio=") && !r.prio) {
			if (len != 6 || item[5] < '1' ||
			    item[5] > '0' + TFS_PIN_PRIO_MAX)
				return -EINVAL;
			r.prio = (uint8_t)(item[5] - '0');
		} else if (has_prefix(item, len, "ttl=") && !seen_ttl) {
			if (ref_ttl(item + 4, len - 4, &r.ttl))
				return -EINVAL;
			seen_ttl = true;
		} else {
			return -EINVAL;
		}
		if (!c)
			break;
		at += len + 1;
	}
	if (!r.prio)
		r.prio = 1;
	*out = r;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum tfs_tier t = (enum tfs_tier)77, rt = (enum tfs_tier)77;
	int gpu = 77, rgpu = 77;
	bool pin = false, rpin = false;
	const struct tfs_pin_value unset = { true, 99, 99 };
	struct tfs_pin_value pv = unset, rpv = unset, back = unset;
	char buf[64], *v;
	int rc, want;

	/* The kernel hands the value as bytes of a given length, in a
	 * buffer of exactly that length. */
	v = malloc(size ? size : 1);
	if (!v)
		return 0;
	memcpy(v, data, size);

	rc = tfs_xattr_parse_tier(v, size, &t, &gpu);
	want = ref_tier(data, size, &rt, &rgpu);
	FUZZ_CHECK(rc == want, "tier value of %zu bytes: got %d, want %d",
		   size, rc, want);
	FUZZ_CHECK(rc ? t == (enum tfs_tier)77 : t == rt,
		   "tier %d, want %d", (int)t, (int)rt);
	FUZZ_CHECK(rc ? gpu == 77 : gpu == rgpu, "gpu %d, want %d", gpu, rgpu);

	rc = tfs_xattr_parse_pin(v, size, &pin);
	want = ref_pin(data, size, &rpin);
	FUZZ_CHECK(rc == want, "pin value of %zu bytes: got %d, want %d",
		   size, rc, want);
	FUZZ_CHECK(rc ? !pin : pin == rpin, "pin %d, want %d", pin, rpin);

	rc = tfs_xattr_parse_pin_value(v, size, &pv);
	want = ref_pin_value(data, size, &rpv);
	FUZZ_CHECK(rc == want, "pin value of %zu bytes: got %d, want %d",
		   size, rc, want);
	FUZZ_CHECK(pv.hard == rpv.hard && pv.prio == rpv.prio &&
			   pv.ttl == rpv.ttl,
		   "pin hard %d prio %u ttl %u, want %d %u %u", pv.hard,
		   pv.prio, pv.ttl, rpv.hard, rpv.prio, rpv.ttl);
	if (!rc) {
		int n = tfs_xattr_format_pin(&pv, buf, sizeof(buf));

		FUZZ_CHECK(n > 0 && (size_t)n < sizeof(buf),
			   "formatted pin of %d bytes", n);
		rc = tfs_xattr_parse_pin_value(buf, (size_t)n, &back);
		FUZZ_CHECK(!rc && back.hard == pv.hard &&
				   back.prio == pv.prio && back.ttl == pv.ttl,
			   "\"%.*s\" reads back as %d: hard %d prio %u ttl %u",
			   n, buf, rc, back.hard, back.prio, back.ttl);
	}
	free(v);
	return 0;
}
