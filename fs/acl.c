// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The kernel's POSIX ACL rules on the xattr form of an ACL (see acl.h).
 * Entries are read and written in place, little-endian, unaligned.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>

#include "fs/acl.h"

#define HDR sizeof(struct posix_acl_xattr_header)
#define ENT sizeof(struct posix_acl_xattr_entry)
#define PERM_BITS (ACL_READ | ACL_WRITE | ACL_EXECUTE)

bool tfs_acl_name(const char *name)
{
	return !strcmp(name, TFS_ACL_ACCESS) || !strcmp(name, TFS_ACL_DEFAULT);
}

static size_t count(size_t len)
{
	return (len - HDR) / ENT;
}

static void get(const void *v, size_t k, uint16_t *tag, uint16_t *perm,
		uint32_t *id)
{
	struct posix_acl_xattr_entry e;

	memcpy(&e, (const char *)v + HDR + k * ENT, sizeof(e));
	*tag = le16toh(e.e_tag);
	*perm = le16toh(e.e_perm);
	*id = le32toh(e.e_id);
}

static void set_perm(void *v, size_t k, uint16_t perm)
{
	uint16_t p = htole16(perm);

	memcpy((char *)v + HDR + k * ENT +
		       offsetof(struct posix_acl_xattr_entry, e_perm),
	       &p, sizeof(p));
}

int tfs_acl_check(const void *v, size_t len)
{
	struct posix_acl_xattr_header h;
	enum { S_USER_OBJ, S_USER, S_GROUP, S_OTHER, S_DONE } state = S_USER_OBJ;
	bool needs_mask = false, have_id = false;
	uint32_t last_id = 0;

	if (len < HDR || (len - HDR) % ENT)
		return -EINVAL;
	memcpy(&h, v, sizeof(h));
	if (le32toh(h.a_version) != POSIX_ACL_XATTR_VERSION)
		return -EINVAL;
	for (size_t k = 0; k < count(len); k++) {
		uint16_t tag, perm;
		uint32_t id;

		get(v, k, &tag, &perm, &id);
		if (perm & ~PERM_BITS)
			return -EINVAL;
		switch (tag) {
		case ACL_USER_OBJ:
			if (state != S_USER_OBJ)
				return -EINVAL;
			state = S_USER;
			break;
		case ACL_USER:
		case ACL_GROUP:
			if (state != (tag == ACL_USER ? S_USER : S_GROUP))
				return -EINVAL;
			/* Sorted by id, each once. */
			if (have_id && id <= last_id)
				return -EINVAL;
			have_id = true;
			last_id = id;
			needs_mask = true;
			break;
		case ACL_GROUP_OBJ:
			if (state != S_USER)
				return -EINVAL;
			state = S_GROUP;
			have_id = false;
			break;
		case ACL_MASK:
			if (state != S_GROUP)
				return -EINVAL;
			state = S_OTHER;
			break;
		case ACL_OTHER:
			if (state != S_OTHER && (state != S_GROUP || needs_mask))
				return -EINVAL;
			state = S_DONE;
			break;
		default:
			return -EINVAL;
		}
	}
	return state == S_DONE ? 0 : -EINVAL;
}

int tfs_acl_update_mode(const void *v, size_t len, uint32_t *mode)
{
	uint32_t m = *mode & ~(uint32_t)(S_IRWXU | S_IRWXG | S_IRWXO);
	uint16_t group = 0, mask = 0;
	bool has_mask = false;
	int not_equiv = 0;

	for (size_t k = 0; k < count(len); k++) {
		uint16_t tag, perm;
		uint32_t id;

		get(v, k, &tag, &perm, &id);
		switch (tag) {
		case ACL_USER_OBJ:
			m |= (uint32_t)perm << 6;
			break;
		case ACL_GROUP_OBJ:
			group = perm;
			break;
		case ACL_OTHER:
			m |= perm;
			break;
		case ACL_MASK:
			mask = perm;
			has_mask = true;
			not_equiv = 1;
			break;
		default: /* named users and groups */
			not_equiv = 1;
			break;
		}
	}
	m |= (uint32_t)(has_mask ? mask : group) << 3;
	*mode = m;
	return not_equiv;
}

int tfs_acl_create(void *v, size_t len, uint32_t *mode)
{
	uint32_t m = *mode;
	size_t group = SIZE_MAX, mask = SIZE_MAX;
	int not_equiv = 0;

	for (size_t k = 0; k < count(len); k++) {
		uint16_t tag, perm;
		uint32_t id;

		get(v, k, &tag, &perm, &id);
		switch (tag) {
		case ACL_USER_OBJ:
			perm &= (m >> 6) & PERM_BITS;
			set_perm(v, k, perm);
			m &= ((uint32_t)perm << 6) | ~(uint32_t)S_IRWXU;
			break;
		case ACL_GROUP_OBJ:
			group = k;
			break;
		case ACL_OTHER:
			perm &= m & PERM_BITS;
			set_perm(v, k, perm);
			m &= perm | ~(uint32_t)S_IRWXO;
			break;
		case ACL_MASK:
			mask = k;
			not_equiv = 1;
			break;
		default:
			not_equiv = 1;
			break;
		}
	}
	/* The group class is the mask's when there is one. */
	if (mask != SIZE_MAX || group != SIZE_MAX) {
		size_t k = mask != SIZE_MAX ? mask : group;
		uint16_t tag, perm;
		uint32_t id;

		get(v, k, &tag, &perm, &id);
		perm &= (m >> 3) & PERM_BITS;
		set_perm(v, k, perm);
		m &= ((uint32_t)perm << 3) | ~(uint32_t)S_IRWXG;
	}
	*mode = m;
	return not_equiv;
}

void tfs_acl_chmod(void *v, size_t len, uint32_t mode)
{
	size_t group = SIZE_MAX, mask = SIZE_MAX;

	for (size_t k = 0; k < count(len); k++) {
		uint16_t tag, perm;
		uint32_t id;

		get(v, k, &tag, &perm, &id);
		if (tag == ACL_USER_OBJ)
			set_perm(v, k, (mode & S_IRWXU) >> 6);
		else if (tag == ACL_OTHER)
			set_perm(v, k, mode & S_IRWXO);
		else if (tag == ACL_GROUP_OBJ)
			group = k;
		else if (tag == ACL_MASK)
			mask = k;
	}
	if (mask != SIZE_MAX)
		set_perm(v, mask, (mode & S_IRWXG) >> 3);
	else if (group != SIZE_MAX)
		set_perm(v, group, (mode & S_IRWXG) >> 3);
}
