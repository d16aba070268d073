// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The POSIX ACL rules of fs/acl.c on any bytes: the values a caller sets
 * as system.posix_acl_access or _default.
 *
 * Contract checked, against a reference written from acl(5) and the
 * kernel's posix_acl_valid(): an ACL is the version word 2 and whole
 * 8-byte entries, ranked user::, user:ID..., group::, group:ID...,
 * mask::, other:: with exactly one of each unnamed one but mask::, the
 * named ones in ascending id order without repeats, a mask:: exactly when
 * some are named (it may also stand alone), no permission bit above rwx;
 * anything else is EINVAL. On a valid ACL: the mode after
 * tfs_acl_update_mode() differs from the one given in its rwx bits alone,
 * tfs_acl_create() only takes bits away (from the mode and every entry's
 * permissions) and leaves a valid ACL, tfs_acl_chmod() leaves a valid ACL
 * whose owner and other entries are the new mode's.
 */
#include <endian.h>
#include <errno.h>
#include <sys/stat.h>
#include <linux/posix_acl.h>

#include "fs/acl.h"
#include "fuzz.h"

static unsigned int rank(uint16_t tag)
{
	switch (tag) {
	case ACL_USER_OBJ:
		return 0;
	case ACL_USER:
		return 1;
	case ACL_GROUP_OBJ:
		return 2;
	case ACL_GROUP:
		return 3;
	case ACL_MASK:
		return 4;
	case ACL_OTHER:
		return 5;
	default:
		return 99;
	}
}

static void entry(const uint8_t *v, size_t k, uint16_t *tag, uint16_t *perm,
		  uint32_t *id)
{
	const uint8_t *e = v + 4 + 8 * k;

	*tag = (uint16_t)(e[0] | e[1] << 8);
	*perm = (uint16_t)(e[2] | e[3] << 8);
	*id = (uint32_t)e[4] | (uint32_t)e[5] << 8 | (uint32_t)e[6] << 16 |
	      (uint32_t)e[7] << 24;
}

static int ref_check(const uint8_t *v, size_t n)
{
	unsigned int seen[6] = { 0 }, last = 0;
	uint32_t last_id = 0;
	size_t count;

	if (n < 4 || (n - 4) % 8)
		return -EINVAL;
	if (v[0] != 2 || v[1] || v[2] || v[3])
		return -EINVAL;
	count = (n - 4) / 8;
	for (size_t k = 0; k < count; k++) {
		uint16_t tag, perm;
		uint32_t id;
		unsigned int r;

		entry(v, k, &tag, &perm, &id);
		r = rank(tag);
		if (r == 99 || perm > 7 || r < last)
			return -EINVAL;
		if (r == 1 || r == 3) {
			if (seen[r] && id <= last_id)
				return -EINVAL;
			last_id = id;
		} else if (seen[r]) {
			return -EINVAL;
		}
		seen[r]++;
		last = r;
	}
	if (seen[0] != 1 || seen[2] != 1 || seen[5] != 1)
		return -EINVAL;
	if ((seen[1] || seen[3]) && !seen[4])
		return -EINVAL;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t mode, m;
	uint8_t *v, *w;
	int rc, want;

	if (size < 2)
		return 0;
	/* The first two bytes are the mode to apply. */
	mode = (uint32_t)(data[0] | data[1] << 8) & 07777;
	mode |= S_IFREG;
	data += 2;
	size -= 2;
	v = malloc(size ? size : 1);
	w = malloc(size ? size : 1);
	if (!v || !w)
		goto out;
	memcpy(v, data, size);
	rc = tfs_acl_check(v, size);
	want = ref_check(data, size);
	FUZZ_CHECK(rc == want, "ACL of %zu bytes: got %d, want %d", size, rc,
		   want);
	FUZZ_CHECK(!memcmp(v, data, size), "the check changed the ACL");
	if (rc)
		goto out;

	m = mode;
	tfs_acl_update_mode(v, size, &m);
	FUZZ_CHECK((m & ~0777u) == (mode & ~0777u), "mode %o from %o", m,
		   mode);

	memcpy(w, v, size);
	m = mode;
	tfs_acl_create(w, size, &m);
	FUZZ_CHECK((m & ~mode) == 0, "create gave mode %o from %o", m, mode);
	FUZZ_CHECK(tfs_acl_check(w, size) == 0, "create broke the ACL");
	for (size_t k = 0; k < (size - 4) / 8; k++) {
		uint16_t t0, p0, t1, p1;
		uint32_t i0, i1;

		entry(v, k, &t0, &p0, &i0);
		entry(w, k, &t1, &p1, &i1);
		FUZZ_CHECK(t0 == t1 && i0 == i1 && (p1 & ~p0) == 0,
			   "create changed entry %zu", k);
	}

	tfs_acl_chmod(v, size, mode);
	FUZZ_CHECK(tfs_acl_check(v, size) == 0, "chmod broke the ACL");
	for (size_t k = 0; k < (size - 4) / 8; k++) {
		uint16_t tag, perm;
		uint32_t id;

		entry(v, k, &tag, &perm, &id);
		if (tag == ACL_USER_OBJ)
			FUZZ_CHECK(perm == ((mode >> 6) & 7), "user:: %o", perm);
		if (tag == ACL_OTHER)
			FUZZ_CHECK(perm == (mode & 7), "other:: %o", perm);
	}
out:
	free(v);
	free(w);
	return 0;
}
