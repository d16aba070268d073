// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The parsers of the values written to the virtual xattrs (fs/args.c:
 * tfs_xattr_parse_tier, tfs_xattr_parse_pin) on any bytes.
 *
 * Contract checked, against a reference written from tierfs(8) and
 * fs/args.h: user.tierfs.tier takes device, host or disk in any case, or
 * device:N with N 1 to 3 digits up to 255 (the GPU, -1 for a plain name),
 * with any newlines and NULs after it; user.tierfs.pin takes 0 or 1 with
 * one newline after it at most; everything else is EINVAL, and a refused
 * value leaves the output alone.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum tfs_tier t = (enum tfs_tier)77, rt = (enum tfs_tier)77;
	int gpu = 77, rgpu = 77;
	bool pin = false, rpin = false;
	char *v;
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
	free(v);
	return 0;
}
