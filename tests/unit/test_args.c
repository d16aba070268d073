// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The ioctl and xattr argument checks of fs/args.c without a mount: one
 * case per documented answer (tests/fuzz/fuzz_ioctl.c and fuzz_xattr.c
 * try everything else against the same contract).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <endian.h>
#include <sys/stat.h>
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>

#include <sys/sysmacros.h>
#include <linux/fs.h>

#include "fs/acl.h"
#include "fs/args.h"
#include "fs/passthrough.h"
#include "tiers/store.h"
#include "fs/statx.h"
#include "tap.h"

static int check(unsigned int cmd, const void *in, size_t in_len,
		 size_t out_len, bool readable, bool writable)
{
	struct tfs_ioc_req r = {
		.cmd = cmd,
		.has_file = true,
		.readable = readable,
		.writable = writable,
		.in = in,
		.in_len = in_len,
		.out_len = out_len,
	};
	union tfs_ioc_args a;

	return tfs_ioc_check(&r, &a);
}

static void test_ioctl_answers(void)
{
	struct tfs_ioc_export e = { .version = TFS_ABI_VERSION };
	struct tfs_ioc_alloc al = { .version = TFS_ABI_VERSION, .size = 1 };
	struct tfs_ioc_move m = { .version = TFS_ABI_VERSION, .tier = 2 };
	struct tfs_ioc_req r = { .cmd = TFS_IOC_EXPORT, .has_file = true,
				 .readable = true, .in = &e,
				 .in_len = sizeof(e), .out_len = sizeof(e) };
	union tfs_ioc_args a;

	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, false),
		 0);
	/* Unknown command, 32-bit caller, directory, no open file. */
	CHECK_EQ(check(_IOW(TFS_IOC_MAGIC, 9, struct tfs_ioc_move), &m,
		       sizeof(m), 0, true, true),
		 -ENOTTY);
	r.compat = true;
	CHECK_EQ(tfs_ioc_check(&r, &a), -ENOTTY);
	r.compat = false;
	r.dir = true;
	CHECK_EQ(tfs_ioc_check(&r, &a), -ENOTTY);
	r.dir = false;
	r.has_file = false;
	CHECK_EQ(tfs_ioc_check(&r, &a), -ENOTTY);
	/* Sizes, version, flags, reserved words, tier, size 0. */
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), 0, true, true), -EINVAL);
	e.version = 2;
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, true),
		 -EINVAL);
	e.version = TFS_ABI_VERSION;
	e.flags = 2;
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, true),
		 -EINVAL);
	e.flags = 0;
	e.reserved[0] = 1;
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, true),
		 -EINVAL);
	e.reserved[0] = 0;
	/* caller_pid is an answer: a caller sends 0 there. */
	e.caller_pid = 1;
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, true),
		 -EINVAL);
	e.caller_pid = 0;
	/* The caller's GPU may be any 16 bytes: no GPU is the default. */
	memset(e.caller_uuid, 0xa5, sizeof(e.caller_uuid));
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, true),
		 0);
	memset(e.caller_uuid, 0, sizeof(e.caller_uuid));
	m.tier = TFS_TIER_COUNT;
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), -EINVAL);
	m.tier = TFS_TIER_DISK;
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, false, false), 0);
	al.size = 0;
	CHECK_EQ(check(TFS_IOC_ALLOC, &al, sizeof(al), 0, true, true), -EINVAL);
	al.size = 1;
	/* The descriptor: exports read, write exports read and write,
	 * allocs write. */
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), false, true),
		 -EBADF);
	e.flags = TFS_EXPORT_WRITE;
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, false),
		 -EBADF);
	CHECK_EQ(check(TFS_IOC_EXPORT, &e, sizeof(e), sizeof(e), true, true),
		 0);
	CHECK_EQ(check(TFS_IOC_ALLOC, &al, sizeof(al), 0, true, false), -EBADF);
	/* A bad argument is EINVAL even through the wrong descriptor. */
	al.size = 0;
	CHECK_EQ(check(TFS_IOC_ALLOC, &al, sizeof(al), 0, true, false),
		 -EINVAL);
	/* What was checked comes back as it came in. */
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), 0);
	r = (struct tfs_ioc_req){ .cmd = TFS_IOC_MOVE, .has_file = true,
				  .in = &m, .in_len = sizeof(m) };
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	CHECK(!memcmp(&a.move, &m, sizeof(m)));
}

/* TFS_RELEASE_UNMAPPED is the one flag a release takes. */

/*
 * The table of commands (TFS_IOC_LIST in fs/args.h): numbers 1 to N, each
 * once, of tierfs's type; every one known to the check (a well-formed
 * argument passes); nothing else is.
 */
static void test_ioctl_table(void)
{
	bool seen[64] = { false };
	unsigned char buf[512];

	CHECK(tfs_ioc_ncmds > 0 && tfs_ioc_ncmds < 64);
	for (unsigned int i = 0; i < tfs_ioc_ncmds; i++) {
		unsigned int cmd = tfs_ioc_cmds[i], nr = _IOC_NR(cmd);
		size_t size = _IOC_SIZE(cmd);
		uint32_t one = TFS_ABI_VERSION;
		int rc;

		CHECK_EQ(_IOC_TYPE(cmd), TFS_IOC_MAGIC);
		CHECK(nr >= 1 && nr <= tfs_ioc_ncmds);
		if (nr < 64) {
			CHECK(!seen[nr] || !printf("#   %s: number %u twice\n",
						   tfs_ioc_names[i], nr));
			seen[nr] = true;
		}
		CHECK(size <= sizeof(buf));
		memset(buf, 0, sizeof(buf));
		memcpy(buf, &one, sizeof(one));
		/* The fields a zeroed struct would get refused for. */
		if (cmd == TFS_IOC_ALLOC)
			memcpy(buf + 8, &(uint64_t){ 1 }, 8);
		rc = check(cmd, buf, (_IOC_DIR(cmd) & _IOC_WRITE) ? size : 0,
			   (_IOC_DIR(cmd) & _IOC_READ) ? size : 0, true, true);
		CHECK(rc == 0 || !printf("#   %s: %d\n", tfs_ioc_names[i], rc));
	}
	for (unsigned int nr = 1; nr <= tfs_ioc_ncmds && nr < 64; nr++)
		CHECK(seen[nr] || !printf("#   no command %u\n", nr));
	CHECK_EQ(check(_IOW(TFS_IOC_MAGIC, tfs_ioc_ncmds + 1,
			    struct tfs_ioc_move),
		       buf, sizeof(struct tfs_ioc_move), 0, true, true),
		 -ENOTTY);
}

/* A move to a tier of [tiers] needs TFS_MOVE_CHAIN; a stat reports one
 * as such with TFS_STAT_CHAIN. */
static void test_ioctl_chain_flags(void)
{
	struct tfs_ioc_move m = { .version = TFS_ABI_VERSION, .tier = 3 };
	struct tfs_ioc_stat st = { .version = TFS_ABI_VERSION };

	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), -EINVAL);
	m.flags = TFS_MOVE_CHAIN;
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), 0);
	m.tier = TFS_TIER_MAX - 1;
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), 0);
	m.tier = TFS_TIER_MAX;
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), -EINVAL);
	m.flags = 0x2;
	m.tier = 1;
	CHECK_EQ(check(TFS_IOC_MOVE, &m, sizeof(m), 0, true, true), -EINVAL);
	st.flags = TFS_STAT_CHAIN;
	CHECK_EQ(check(TFS_IOC_STAT, &st, sizeof(st), sizeof(st), true, false),
		 0);
	st.flags = 0x2;
	CHECK_EQ(check(TFS_IOC_STAT, &st, sizeof(st), sizeof(st), true, false),
		 -EINVAL);
}

static void test_release_flags(void)
{
	struct tfs_ioc_release rel = { .version = TFS_ABI_VERSION };

	CHECK_EQ(check(TFS_IOC_RELEASE, &rel, sizeof(rel), 0, true, false), 0);
	rel.flags = TFS_RELEASE_UNMAPPED;
	CHECK_EQ(check(TFS_IOC_RELEASE, &rel, sizeof(rel), 0, true, false), 0);
	rel.flags = 0x2;
	CHECK_EQ(check(TFS_IOC_RELEASE, &rel, sizeof(rel), 0, true, false),
		 -EINVAL);
}

/* A commit says what it waited for, or nothing (0): old callers. */
static void test_commit_waited(void)
{
	struct tfs_ioc_commit c = { .version = TFS_ABI_VERSION };

	for (uint32_t w = 0; w <= TFS_COMMIT_WAITED_EVENT; w++) {
		c.waited = w;
		CHECK_EQ(check(TFS_IOC_COMMIT, &c, sizeof(c), 0, true, true),
			 0);
	}
	c.waited = TFS_COMMIT_WAITED_EVENT + 1;
	CHECK_EQ(check(TFS_IOC_COMMIT, &c, sizeof(c), 0, true, true), -EINVAL);
	c.waited = TFS_COMMIT_WAITED_STREAM;
	c.reserved0 = 1;
	CHECK_EQ(check(TFS_IOC_COMMIT, &c, sizeof(c), 0, true, true), -EINVAL);
	c.reserved0 = 0;
	c.reserved[1] = 1;
	CHECK_EQ(check(TFS_IOC_COMMIT, &c, sizeof(c), 0, true, true), -EINVAL);
}

static void test_prefetch_answers(void)
{
	struct tfs_ioc_prefetch p = { .version = TFS_ABI_VERSION,
				      .tier = TFS_TIER_HOST };
	struct tfs_ioc_req r = { .cmd = TFS_IOC_PREFETCH, .in = &p,
				 .in_len = sizeof(p), .out_len = sizeof(p),
				 .has_file = true, .readable = true };
	union tfs_ioc_args a;

	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	p.flags = TFS_PREFETCH_WAIT;
	p.offset = 4096;
	p.length = 1 << 20;
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	CHECK(!memcmp(&a.prefetch, &p, sizeof(p)));
	/* A file's only, read as a read would. */
	r.readable = false;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EBADF);
	r.readable = true;
	r.dir = true;
	CHECK_EQ(tfs_ioc_check(&r, &a), -ENOTTY);
	r.dir = false;
	p.flags = 2;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.flags = 0;
	p.tier = TFS_TIER_COUNT;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.tier = TFS_TIER_DEVICE;
	p.state = TFS_PREFETCH_DONE;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.state = 0;
	p.pending = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.pending = 0;
	p.offset = INT64_MAX;
	p.length = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.offset = (uint64_t)INT64_MAX + 1;
	p.length = 0;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.offset = 0;
	p.reserved[2] = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	p.reserved[2] = 0;
	p.reserved0 = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
}

static void test_reclaim_answers(void)
{
	struct tfs_ioc_reclaim rc = { .version = TFS_ABI_VERSION, .gpu = -1,
				      .bytes = 1 };
	struct tfs_ioc_req r = { .cmd = TFS_IOC_RECLAIM, .in = &rc,
				 .in_len = sizeof(rc), .out_len = sizeof(rc) };
	union tfs_ioc_args a;

	/* Any descriptor: a directory's, one opened for nothing much. */
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	r.dir = true;
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	r.compat = true;
	CHECK_EQ(tfs_ioc_check(&r, &a), -ENOTTY);
	r.compat = false;
	r.out_len = 0;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	r.out_len = sizeof(rc);
	rc.gpu = -2;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	rc.gpu = 3;
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	rc.uuid[15] = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	rc.flags = TFS_RECLAIM_UUID;
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	/* With a UUID the ordinal is not looked at. */
	rc.gpu = -7;
	CHECK_EQ(tfs_ioc_check(&r, &a), 0);
	CHECK(!memcmp(&a.rec, &rc, sizeof(rc)));
	rc.flags = 2;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	rc.flags = 0;
	rc.uuid[15] = 0;
	rc.gpu = -1;
	rc.freed = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	rc.freed = 0;
	rc.reserved0 = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
	rc.reserved0 = 0;
	rc.reserved[0] = 1;
	CHECK_EQ(tfs_ioc_check(&r, &a), -EINVAL);
}

static void test_xattr_values(void)
{
	enum tfs_tier t;
	bool pin;
	int g;

	CHECK_EQ(tfs_xattr_parse_tier("disk", 4, &t, &g), 0);
	CHECK_EQ(t, TFS_TIER_DISK);
	CHECK_EQ(tfs_xattr_parse_tier("Device\n", 7, &t, &g), 0);
	CHECK_EQ(t, TFS_TIER_DEVICE);
	CHECK_EQ(tfs_xattr_parse_tier("host\0", 5, &t, &g), 0);
	CHECK_EQ(t, TFS_TIER_HOST);
	CHECK_EQ(tfs_xattr_parse_tier("dis", 3, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("disk ", 5, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("", 0, &t, &g), -EINVAL);
	/* device:N names a GPU; a plain name names none. */
	CHECK_EQ(tfs_xattr_parse_tier("host", 4, &t, &g), 0);
	CHECK_EQ(g, -1);
	CHECK_EQ(tfs_xattr_parse_tier("device:1\n", 9, &t, &g), 0);
	CHECK(t == TFS_TIER_DEVICE && g == 1);
	CHECK_EQ(tfs_xattr_parse_tier("DEVICE:255", 10, &t, &g), 0);
	CHECK(t == TFS_TIER_DEVICE && g == 255);
	t = TFS_TIER_DISK;
	g = 7;
	CHECK_EQ(tfs_xattr_parse_tier("device:256", 10, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("device:", 7, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("device:-1", 9, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("device: 1", 9, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("device:0001", 11, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("host:1", 6, &t, &g), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_tier("device:1x", 9, &t, &g), -EINVAL);
	CHECK(t == TFS_TIER_DISK && g == 7);
	CHECK_EQ(tfs_xattr_parse_pin("1", 1, &pin), 0);
	CHECK(pin);
	CHECK_EQ(tfs_xattr_parse_pin("0\n", 2, &pin), 0);
	CHECK(!pin);
	CHECK_EQ(tfs_xattr_parse_pin("1\n\n", 3, &pin), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_pin("yes", 3, &pin), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_pin("", 0, &pin), -EINVAL);
}

/* user.tierfs.pin's soft forms and user.tierfs.write_policy. */
static void test_xattr_pin_value(void)
{
	static const char *const bad[] = {
		"", "2", "soft", "prio=", "prio=0", "prio=8", "prio=12",
		"ttl=", "ttl=0", "ttl=8d", "ttl=604801", "ttl=5x", "ttl=5ss",
		"prio=1,", ",prio=1", "prio=1,prio=2", "ttl=1,ttl=2",
		"prio=1;ttl=2", "PRIO=1", "prio=1\n\n", "ttl=-1",
		"ttl=99999999999999999999",
	};
	struct tfs_pin_value v = { .prio = 99 };
	char buf[64];
	int w = 7;

	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		CHECK_EQ(tfs_xattr_parse_pin_value(bad[k], strlen(bad[k]), &v),
			 -EINVAL);
		CHECK_EQ(v.prio, 99);
	}
	CHECK_EQ(tfs_xattr_parse_pin_value("1\n", 2, &v), 0);
	CHECK(v.hard && !v.prio && !v.ttl);
	CHECK_EQ(tfs_xattr_parse_pin_value("0", 1, &v), 0);
	CHECK(!v.hard && !v.prio);
	CHECK_EQ(tfs_xattr_parse_pin_value("prio=3", 6, &v), 0);
	CHECK(!v.hard && v.prio == 3 && !v.ttl);
	CHECK_EQ(tfs_xattr_parse_pin_value("ttl=5m", 6, &v), 0);
	CHECK(v.prio == 1 && v.ttl == 300);
	CHECK_EQ(tfs_xattr_parse_pin_value("ttl=7d,prio=7\n", 14, &v), 0);
	CHECK(v.prio == 7 && v.ttl == 7 * 86400);
	CHECK_EQ(tfs_xattr_parse_pin_value("prio=2,ttl=90", 13, &v), 0);
	CHECK_EQ(tfs_xattr_format_pin(&v, buf, sizeof(buf)), 14);
	CHECK(!strcmp(buf, "prio=2,ttl=90s"));
	/* What it shows, it takes back. */
	struct tfs_pin_value again;

	CHECK_EQ(tfs_xattr_parse_pin_value(buf, strlen(buf), &again), 0);
	CHECK(again.prio == 2 && again.ttl == 90 && !again.hard);
	v = (struct tfs_pin_value){ .hard = true };
	tfs_xattr_format_pin(&v, buf, sizeof(buf));
	CHECK(!strcmp(buf, "1"));
	v = (struct tfs_pin_value){ .prio = 4 };
	tfs_xattr_format_pin(&v, buf, sizeof(buf));
	CHECK(!strcmp(buf, "prio=4"));
	CHECK_EQ(tfs_xattr_parse_write("write_through\n", 14, &w), 0);
	CHECK_EQ(w, 2);
	CHECK_EQ(tfs_xattr_parse_write("write_back", 10, &w), 0);
	CHECK_EQ(w, 1);
	CHECK_EQ(tfs_xattr_parse_write("default", 7, &w), 0);
	CHECK_EQ(w, 0);
	w = 7;
	CHECK_EQ(tfs_xattr_parse_write("through", 7, &w), -EINVAL);
	CHECK_EQ(tfs_xattr_parse_write("", 0, &w), -EINVAL);
	CHECK_EQ(w, 7);
}

/* The names it takes are the store's (tier_name(), what the stats' "tiers"
 * key lists), not a list of its own. */
static void test_xattr_tier_names(void)
{
	char v[40];
	enum tfs_tier t;
	int g;

	for (int i = 0; i < TFS_TIER_COUNT; i++) {
		const char *nm = tier_name((enum tfs_tier)i);

		CHECK_EQ(tfs_xattr_parse_tier(nm, strlen(nm), &t, &g), 0);
		CHECK(t == (enum tfs_tier)i && g == -1);
		snprintf(v, sizeof(v), "%s:%d", nm, 3);
		CHECK_EQ(tfs_xattr_parse_tier(v, strlen(v), &t, &g),
			 i == TFS_TIER_DEVICE ? 0 : -EINVAL);
		CHECK(t == (enum tfs_tier)i && g == (i ? -1 : 3));
	}
}

/* An ACL in xattr form from {tag, perm, id} triples; its length. */
static size_t acl_make(char *buf, const unsigned int (*e)[3], size_t n)
{
	uint32_t ver = htole32(POSIX_ACL_XATTR_VERSION);

	memcpy(buf, &ver, 4);
	for (size_t k = 0; k < n; k++) {
		struct posix_acl_xattr_entry x = {
			.e_tag = htole16((uint16_t)e[k][0]),
			.e_perm = htole16((uint16_t)e[k][1]),
			.e_id = htole32(e[k][2]),
		};

		memcpy(buf + 4 + k * sizeof(x), &x, sizeof(x));
	}
	return 4 + n * sizeof(struct posix_acl_xattr_entry);
}

static unsigned int acl_perm(const char *buf, size_t k)
{
	struct posix_acl_xattr_entry x;

	memcpy(&x, buf + 4 + k * sizeof(x), sizeof(x));
	return le16toh(x.e_perm);
}

#define U ACL_UNDEFINED_ID

/* The kernel's posix_acl_valid(), posix_acl_update_mode(),
 * posix_acl_create() and posix_acl_chmod() on the xattr bytes. */
static void test_acl_rules(void)
{
	static const unsigned int base[][3] = {
		{ ACL_USER_OBJ, 6, U }, { ACL_GROUP_OBJ, 4, U },
		{ ACL_OTHER, 0, U },
	};
	static const unsigned int named[][3] = {
		{ ACL_USER_OBJ, 7, U }, { ACL_USER, 5, 1000 },
		{ ACL_USER, 7, 1001 },	{ ACL_GROUP_OBJ, 5, U },
		{ ACL_GROUP, 6, 50 },	{ ACL_MASK, 7, U },
		{ ACL_OTHER, 0, U },
	};
	static const unsigned int unsorted[][3] = {
		{ ACL_USER_OBJ, 7, U }, { ACL_USER, 5, 1001 },
		{ ACL_USER, 7, 1000 },	{ ACL_GROUP_OBJ, 5, U },
		{ ACL_MASK, 7, U },	{ ACL_OTHER, 0, U },
	};
	static const unsigned int no_mask[][3] = {
		{ ACL_USER_OBJ, 7, U }, { ACL_USER, 5, 1000 },
		{ ACL_GROUP_OBJ, 5, U }, { ACL_OTHER, 0, U },
	};
	static const unsigned int bad_perm[][3] = {
		{ ACL_USER_OBJ, 8, U }, { ACL_GROUP_OBJ, 4, U },
		{ ACL_OTHER, 0, U },
	};
	static const unsigned int no_other[][3] = {
		{ ACL_USER_OBJ, 6, U }, { ACL_GROUP_OBJ, 4, U },
	};
	char a[256];
	uint32_t mode;
	size_t n;

	n = acl_make(a, base, 3);
	CHECK_EQ(tfs_acl_check(a, n), 0);
	CHECK_EQ(tfs_acl_check(a, n - 1), -EINVAL);
	CHECK_EQ(tfs_acl_check(a, 3), -EINVAL);
	a[0] = 1;
	CHECK_EQ(tfs_acl_check(a, n), -EINVAL);
	n = acl_make(a, named, 7);
	CHECK_EQ(tfs_acl_check(a, n), 0);
	CHECK_EQ(tfs_acl_check(a, acl_make(a, unsorted, 6)), -EINVAL);
	CHECK_EQ(tfs_acl_check(a, acl_make(a, no_mask, 4)), -EINVAL);
	CHECK_EQ(tfs_acl_check(a, acl_make(a, bad_perm, 3)), -EINVAL);
	CHECK_EQ(tfs_acl_check(a, acl_make(a, no_other, 2)), -EINVAL);

	/* The mode says all of a base ACL: not kept, the bits set. */
	n = acl_make(a, base, 3);
	mode = S_IFREG | S_ISGID | 0777;
	CHECK_EQ(tfs_acl_update_mode(a, n, &mode), 0);
	CHECK_EQ(mode, S_IFREG | S_ISGID | 0640);
	/* Named entries: kept, the group class is the mask's. */
	n = acl_make(a, named, 7);
	mode = S_IFREG | 0600;
	CHECK_EQ(tfs_acl_update_mode(a, n, &mode), 1);
	CHECK_EQ(mode, S_IFREG | 0770);

	/* A default ACL on a new file of mode 0644 (umask left out). */
	mode = S_IFREG | 0644;
	CHECK_EQ(tfs_acl_create(a, n, &mode), 1);
	CHECK_EQ(mode, S_IFREG | 0640);
	CHECK_EQ(acl_perm(a, 0), 6); /* user:: 7 & 6 */
	CHECK_EQ(acl_perm(a, 1), 5); /* named entries as they were */
	CHECK_EQ(acl_perm(a, 2), 7);
	CHECK_EQ(acl_perm(a, 3), 5); /* group:: as it was: the mask rules */
	CHECK_EQ(acl_perm(a, 5), 4); /* mask:: 7 & 4 */
	CHECK_EQ(acl_perm(a, 6), 0);
	/* A base default ACL: the result is the mode alone. */
	n = acl_make(a, base, 3);
	mode = S_IFDIR | 0777;
	CHECK_EQ(tfs_acl_create(a, n, &mode), 0);
	CHECK_EQ(mode, S_IFDIR | 0640);

	/* chmod: user::, the mask (not group::) and other:: follow. */
	n = acl_make(a, named, 7);
	tfs_acl_chmod(a, n, S_IFREG | 0604);
	CHECK_EQ(acl_perm(a, 0), 6);
	CHECK_EQ(acl_perm(a, 3), 5);
	CHECK_EQ(acl_perm(a, 5), 0);
	CHECK_EQ(acl_perm(a, 6), 4);
	n = acl_make(a, base, 3);
	tfs_acl_chmod(a, n, S_IFREG | 0751);
	CHECK_EQ(acl_perm(a, 0), 7);
	CHECK_EQ(acl_perm(a, 1), 5);
	CHECK_EQ(acl_perm(a, 2), 1);
	CHECK(tfs_acl_name(TFS_ACL_ACCESS) && tfs_acl_name(TFS_ACL_DEFAULT));
	CHECK(!tfs_acl_name("system.posix_acl_accessx"));
}

/* The FUSE_STATX reply: getattr's fields, the birth time, and the chattr
 * flags as tmpfs reports them. */
static void test_statx_reply(void)
{
	struct stat st = {
		.st_ino = 42, .st_mode = S_IFREG | 0640, .st_nlink = 2,
		.st_uid = 7, .st_gid = 8, .st_size = 12345, .st_blocks = 32,
		.st_blksize = 4096, .st_rdev = makedev(3, 4),
		.st_atim = { 100, 1 }, .st_mtim = { 200, 2 },
		.st_ctim = { 300, 3 },
	};
	struct timespec born = { 50, 999999999 };
	struct tfs_fuse_statx sx;

	tfs_statx_fill(&sx, &st, &born, FS_APPEND_FL | FS_NODUMP_FL |
					   FS_NOATIME_FL);
	CHECK_EQ(sx.mask, STATX_BASIC_STATS | STATX_BTIME);
	CHECK_EQ(sx.attributes, STATX_ATTR_APPEND | STATX_ATTR_NODUMP);
	CHECK_EQ(sx.attributes_mask, STATX_ATTR_IMMUTABLE |
					     STATX_ATTR_APPEND |
					     STATX_ATTR_NODUMP);
	CHECK_EQ(sx.ino, 42);
	CHECK_EQ(sx.mode, S_IFREG | 0640);
	CHECK_EQ(sx.nlink, 2);
	CHECK(sx.uid == 7 && sx.gid == 8);
	CHECK(sx.size == 12345 && sx.blocks == 32 && sx.blksize == 4096);
	CHECK(sx.rdev_major == 3 && sx.rdev_minor == 4);
	CHECK(sx.atime.tv_sec == 100 && sx.atime.tv_nsec == 1);
	CHECK(sx.mtime.tv_sec == 200 && sx.mtime.tv_nsec == 2);
	CHECK(sx.ctime.tv_sec == 300 && sx.ctime.tv_nsec == 3);
	CHECK(sx.btime.tv_sec == 50 && sx.btime.tv_nsec == 999999999);
	tfs_statx_fill(&sx, &st, NULL, FS_IMMUTABLE_FL);
	CHECK_EQ(sx.mask, STATX_BASIC_STATS);
	CHECK_EQ(sx.attributes, STATX_ATTR_IMMUTABLE);
	CHECK(sx.btime.tv_sec == 0 && sx.btime.tv_nsec == 0);
}

/* The INIT and OPEN reply edits of passthrough, on the kernel's layout. */
static void test_passthrough_replies(void)
{
	struct tfs_fuse_init_out o, before;
	struct tfs_fuse_open_out op;
	unsigned char raw[64];

	memset(&o, 0, sizeof(o));
	o.major = 7;
	o.minor = 38;
	o.flags = 1u << 0 | TFS_FUSE_INIT_EXT;
	before = o;
	/* no FUSE_PASSTHROUGH offered, or no flags2 at all: untouched */
	CHECK_EQ(tfs_pt_patch_init(&o, sizeof(o), TFS_FUSE_INIT_EXT, 0),
		 TFS_PT_NO_KERNEL);
	CHECK_EQ(tfs_pt_patch_init(&o, sizeof(o), 0, TFS_FUSE_PASSTHROUGH2),
		 TFS_PT_NO_KERNEL);
	CHECK(!memcmp(&o, &before, sizeof(o)));
	/* too short for max_stack_depth */
	CHECK_EQ(tfs_pt_patch_init(&o, 24, TFS_FUSE_INIT_EXT,
				   TFS_FUSE_PASSTHROUGH2),
		 TFS_PT_SHORT);
	/* the writeback cache excludes it */
	o.flags |= TFS_FUSE_WRITEBACK_CACHE;
	CHECK_EQ(tfs_pt_patch_init(&o, sizeof(o), TFS_FUSE_INIT_EXT,
				   TFS_FUSE_PASSTHROUGH2),
		 TFS_PT_WRITEBACK);
	o.flags &= ~TFS_FUSE_WRITEBACK_CACHE;
	o.flags2 = 1u << 1;
	CHECK_EQ(tfs_pt_patch_init(&o, sizeof(o), TFS_FUSE_INIT_EXT,
				   TFS_FUSE_PASSTHROUGH2 | 1u << 1),
		 TFS_PT_ASKED);
	memcpy(raw, &o, sizeof(raw));
	/* FUSE_PASSTHROUGH is 1ULL << 37: byte 32 + 4, bit 5; max_stack_depth
	 * right after flags2, at byte 36 */
	CHECK_EQ(raw[32], (1u << 5) | (1u << 1));
	CHECK_EQ(raw[36], TFS_PT_STACK_DEPTH);
	CHECK(o.flags & TFS_FUSE_INIT_EXT);
	CHECK_EQ(o.minor, 38u);

	memset(&op, 0, sizeof(op));
	op.fh = 0x1234;
	op.open_flags = TFS_FOPEN_KEEP_CACHE | TFS_FOPEN_NOFLUSH;
	CHECK(!tfs_pt_patch_open(&op, sizeof(op), 0x999, 3));
	CHECK(!tfs_pt_patch_open(&op, sizeof(op), 0x1234, 0));
	CHECK(!tfs_pt_patch_open(&op, 8, 0x1234, 3));
	CHECK_EQ(op.open_flags, TFS_FOPEN_KEEP_CACHE | TFS_FOPEN_NOFLUSH);
	CHECK(tfs_pt_patch_open(&op, sizeof(op), 0x1234, 3));
	/* keep_cache is refused beside passthrough (EIO at open) */
	CHECK_EQ(op.open_flags, TFS_FOPEN_PASSTHROUGH | TFS_FOPEN_NOFLUSH);
	CHECK_EQ(op.backing_id, 3);
	op.open_flags = TFS_FOPEN_DIRECT_IO;
	CHECK(tfs_pt_patch_open(&op, sizeof(op), 0x1234, 4));
	CHECK_EQ(op.open_flags, TFS_FOPEN_PASSTHROUGH | TFS_FOPEN_DIRECT_IO);
	CHECK_EQ(op.backing_id, 4);
}

int main(void)
{
	TAP_RUN(test_acl_rules);
	TAP_RUN(test_statx_reply);
	TAP_RUN(test_passthrough_replies);
	TAP_RUN(test_ioctl_answers);
	TAP_RUN(test_ioctl_table);
	TAP_RUN(test_ioctl_chain_flags);
	TAP_RUN(test_release_flags);
	TAP_RUN(test_commit_waited);
	TAP_RUN(test_reclaim_answers);
	TAP_RUN(test_prefetch_answers);
	TAP_RUN(test_xattr_values);
	TAP_RUN(test_xattr_pin_value);
	TAP_RUN(test_xattr_tier_names);
	return tap_done();
}
