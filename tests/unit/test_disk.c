// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Unit tests of the disk tier (tiers/disk.c) and CRC32C, plus throughput
 * figures printed as TAP comments next to the lz4 CLI on the same bytes.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/log.h"
#include "tap.h"
#include "tiers/disk.h"

#define HDR 32
#define CS (64u * 1024)
/* Slots start on a block (4 KiB on the file systems the tests run on) and
 * a chunk costs whole blocks. */
#define BLK 4096u
#define SLOT (CS + BLK)
#define COST(n) (((uint64_t)(n) + BLK - 1) / BLK * BLK)

static char tmpdir[64];

/* --- helpers --- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static void fill_random(void *buf, size_t len)
{
	unsigned char *p = buf;

	while (len >= 8) {
		uint64_t v = rnd();

		memcpy(p, &v, 8);
		p += 8;
		len -= 8;
	}
	while (len--)
		*p++ = (unsigned char)rnd();
}

/* Words, numbers and punctuation: compresses with lz4 about like logs or
 * source text do. */
static void fill_text(void *buf, size_t len)
{
	static const char *const words[] = {
		"the", "buffer", "spill", "tier", "device", "host", "disk",
		"chunk", "lz4", "compress", "error", "read", "write", "file",
		"of", "and", "to", "in", "is", "a", "for", "with", "on",
		"memory", "limit", "policy", "eviction", "request", "reply",
		"worker", "thread", "lock", "generation", "checksum", "offset",
		"length", "mount", "kernel", "page", "cache", "latency",
	};
	char *p = buf, *end = p + len;

	while (p < end) {
		char tok[32];
		uint64_t r = rnd();
		int n;

		if (r % 7 == 0)
			n = snprintf(tok, sizeof(tok), "%" PRIu64 " ",
				     (r >> 8) % 100000);
		else
			n = snprintf(tok, sizeof(tok), "%s%s",
				     words[(r >> 8) % (sizeof(words) /
						       sizeof(words[0]))],
				     (r >> 32) % 11 == 0 ? ".\n" : " ");
		if (n > end - p)
			n = (int)(end - p);
		memcpy(p, tok, (size_t)n);
		p += n;
	}
}

static struct tier_disk *disk_new(uint32_t cs, enum cfg_compression c)
{
	struct tier_disk *d = NULL;
	char err[256] = "";
	int rc = tier_disk_init(&d, tmpdir, "test", cs, c, err, sizeof(err));

	if (rc)
		printf("# tier_disk_init: %d %s\n", rc, err);
	CHECK_EQ(rc, 0);
	return d;
}

/* Log capture: count lines, keep the last one. */
static int log_lines;
static char log_last[512];

__attribute__((format(printf, 2, 0))) static void
capture_sink(enum tfs_log_level level, const char *fmt, va_list ap)
{
	log_lines++;
	vsnprintf(log_last, sizeof(log_last), fmt, ap);
}

static void log_capture(void)
{
	log_lines = 0;
	log_last[0] = 0;
	tfs_log_set_sink(capture_sink);
}

/* --- crc32c --- */

static void test_crc32c_vectors(void)
{
	static const struct {
		const char *name;
		uint32_t (*fn)(uint32_t, const void *, size_t);
	} impls[] = {
		{ "sw", tfs_crc32c_sw },
		{ "hw", tfs_crc32c_hw },
		{ "dispatch", tfs_crc32c },
	};
	unsigned char z[32], ff[32], inc[32];

	memset(z, 0, sizeof(z));
	memset(ff, 0xff, sizeof(ff));
	for (int i = 0; i < 32; i++)
		inc[i] = (unsigned char)i;
	if (!tfs_crc32c_hw_supported())
		printf("# no SSE4.2: the hw entry runs the table code\n");
	for (size_t k = 0; k < sizeof(impls) / sizeof(impls[0]); k++) {
		uint32_t (*f)(uint32_t, const void *, size_t) = impls[k].fn;

		printf("# crc32c %s\n", impls[k].name);
		CHECK_EQ(f(0, "123456789", 9), 0xE3069283u);
		CHECK_EQ(f(0, "", 0), 0);
		/* RFC 3720 B.4 */
		CHECK_EQ(f(0, z, 32), 0x8A9136AAu);
		CHECK_EQ(f(0, ff, 32), 0x62A8AB43u);
		CHECK_EQ(f(0, inc, 32), 0x46DD794Eu);
		CHECK_EQ(f(f(0, "1234", 4), "56789", 5), 0xE3069283u);
	}
}

static void test_crc32c_hw_matches_sw(void)
{
	size_t max = 3 * 4096 * 4 + 100;
	unsigned char *buf = malloc(max + 8);
	int bad = 0;

	fill_random(buf, max + 8);
	for (int t = 0; t < 400; t++) {
		size_t len = t < 100 ? (size_t)t : rnd() % max;
		size_t shift = rnd() % 8;
		uint32_t seed = t & 1 ? (uint32_t)rnd() : 0;

		if (tfs_crc32c_hw(seed, buf + shift, len) !=
		    tfs_crc32c_sw(seed, buf + shift, len))
			bad++;
	}
	/* Split points across the three-way blocks. */
	for (size_t cut = 0; cut < max; cut += 997) {
		uint32_t a = tfs_crc32c_hw(tfs_crc32c_hw(0, buf, cut),
					   buf + cut, max - cut);

		if (a != tfs_crc32c_sw(0, buf, max))
			bad++;
	}
	CHECK_EQ(bad, 0);
	free(buf);
}

/* --- round trips --- */

static void check_read(struct tier_disk *d, struct tier_dobj *o,
		       const unsigned char *ref, size_t len, uint64_t off)
{
	unsigned char *got = malloc(len ? len : 1);
	int rc;

	memset(got, 0xA5, len);
	rc = tier_dobj_read(d, o, got, len, off);
	CHECK_EQ(rc, 0);
	if (memcmp(got, ref + off, len)) {
		size_t i = 0;

		while (got[i] == ref[off + i])
			i++;
		printf("#   read %zu at %" PRIu64 " differs at %zu\n", len,
		       off, i);
		CHECK(0);
	}
	free(got);
}

/* Chunks: text, random, zero, text, short random; then whole, per chunk
 * and random range reads against the image. */
static void test_round_trip(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	size_t last = 1000, size = 4 * CS + last;
	unsigned char *img = calloc(1, 6 * CS);
	struct tier_dobj *o;
	uint64_t stored;

	if (!d)
		return;
	fill_text(img, CS);
	fill_random(img + CS, CS);
	fill_text(img + 3 * CS, CS);
	fill_random(img + 4 * CS, last);
	CHECK_EQ(tier_dobj_create(d, 1, &o), 0);
	for (int i = 0; i < 5; i++)
		CHECK_EQ(tier_dobj_write_chunk(d, o, (uint64_t)i,
					       img + (size_t)i * CS,
					       i == 4 ? last : CS),
			 0);
	stored = tier_dobj_stored(o);
	printf("# stored %" PRIu64 " for %zu bytes\n", stored, size);
	CHECK(stored < size);
	CHECK(stored >= 5 * HDR + CS + last);

	check_read(d, o, img, size, 0);
	check_read(d, o, img, 6 * CS, 0); /* past the end: zeroes */
	for (int i = 0; i < 6; i++)
		check_read(d, o, img, CS, (uint64_t)i * CS);
	for (int t = 0; t < 500; t++) {
		uint64_t off = rnd() % (6 * CS);
		size_t len = (size_t)(rnd() % (6 * CS - off + 1));

		if (t % 3 == 0)
			len %= 3000;
		check_read(d, o, img, len, off);
	}
	/* Straddling each boundary. */
	for (int i = 1; i < 6; i++)
		check_read(d, o, img, 200, (uint64_t)i * CS - 100);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
}

/* Chunks into separate buffers, in parallel: the host tier's unspill. */
static void test_read_chunks(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	unsigned char *img = calloc(1, 8 * CS), *out[8];
	size_t lens[8];
	struct tier_dobj *o;

	if (!d)
		return;
	for (int i = 0; i < 8; i++) {
		if (i % 2)
			fill_random(img + (size_t)i * CS, CS);
		else
			fill_text(img + (size_t)i * CS, CS);
	}
	CHECK_EQ(tier_dobj_create(d, 7, &o), 0);
	for (int i = 0; i < 8; i++)
		if (i != 5) /* a hole */
			CHECK_EQ(tier_dobj_write_chunk(d, o, (uint64_t)i,
						       img + (size_t)i * CS,
						       CS), 0);
	memset(img + 5 * (size_t)CS, 0, CS);
	for (int i = 0; i < 8; i++) {
		out[i] = malloc(CS);
		memset(out[i], 0xee, CS);
		lens[i] = i == 7 ? 1234 : CS;
	}
	CHECK_EQ(tier_dobj_read_chunks(d, o, 0, (void *const *)out, lens, 8),
		 0);
	for (int i = 0; i < 8; i++)
		CHECK(!memcmp(out[i], img + (size_t)i * CS, lens[i]));
	CHECK_EQ(out[7][1234], 0xee); /* nothing past the asked length */
	CHECK_EQ(tier_dobj_read_chunks(d, o, 2, (void *const *)out, lens, 3),
		 0);
	CHECK(!memcmp(out[0], img + 2 * (size_t)CS, CS));
	for (int i = 0; i < 8; i++)
		free(out[i]);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
}

static void test_stored_sizes(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	unsigned char *buf = malloc(CS);
	struct tier_dobj *o;
	struct stat st;

	if (!d)
		return;
	CHECK_EQ(tier_dobj_create(d, 2, &o), 0);
	CHECK_EQ(tier_dobj_stored(o), 0);

	fill_text(buf, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
	CHECK(tier_dobj_stored(o) < CS * 3 / 4);
	printf("# text chunk stored in %" PRIu64 " of %u\n",
	       tier_dobj_stored(o), CS);

	/* Rewrites change the count to the new encoding. */
	fill_random(buf, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
	CHECK_EQ(tier_dobj_stored(o), COST(CS + HDR));
	check_read(d, o, buf, CS, 0);

	memset(buf, 0, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
	CHECK_EQ(tier_dobj_stored(o), COST(HDR));
	check_read(d, o, buf, CS, 0);

	fill_text(buf, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
	CHECK(tier_dobj_stored(o) < CS * 3 / 4);
	check_read(d, o, buf, CS, 0);

	/* The rewrite to text punched out the old raw tail. */
	fill_random(buf, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 1, buf, CS), 0);
	fill_text(buf, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 1, buf, CS), 0);
	CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
	printf("# file: st_size %lld, %lld bytes allocated, %" PRIu64
	       " stored\n",
	       (long long)st.st_size, (long long)st.st_blocks * 512,
	       tier_dobj_stored(o));
	CHECK((uint64_t)st.st_blocks * 512 <= tier_dobj_stored(o) + 4 * 4096);

	/* Random data: at most raw plus a header per chunk. */
	for (int i = 0; i < 8; i++) {
		fill_random(buf, CS);
		CHECK_EQ(tier_dobj_write_chunk(d, o, (uint64_t)i, buf, CS), 0);
	}
	CHECK(tier_dobj_stored(o) <= 8ull * COST(CS + HDR));
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(buf);
}

static void test_no_compression(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_NONE);
	unsigned char *buf = malloc(CS);
	struct tier_dobj *o;

	if (!d)
		return;
	CHECK_EQ(tier_dobj_create(d, 3, &o), 0);
	fill_text(buf, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
	CHECK_EQ(tier_dobj_stored(o), COST(CS + HDR));
	check_read(d, o, buf, CS, 0);
	check_read(d, o, buf, 100, 50);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(buf);
}

static void test_holes(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	unsigned char *img = calloc(1, 8 * CS);
	struct tier_dobj *o;
	struct stat st;

	if (!d)
		return;
	CHECK_EQ(tier_dobj_create(d, 4, &o), 0);
	fill_text(img, CS);
	fill_random(img + 5 * CS, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, img, CS), 0);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 5, img + 5 * CS, CS), 0);
	check_read(d, o, img, 8 * CS, 0);
	check_read(d, o, img, 3 * CS, CS / 2);
	/* Far beyond anything written. */
	{
		unsigned char b[64];

		memset(b, 1, sizeof(b));
		CHECK_EQ(tier_dobj_read(d, o, b, sizeof(b), 1ull << 40), 0);
		CHECK(b[0] == 0 && b[63] == 0);
	}
	CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
	CHECK((uint64_t)st.st_blocks * 512 < 3 * CS);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
}

/*
 * Chunks with holes: only the pages of the map are stored, the others
 * read as zeroes and take no block; the payload reads back packed; a raw
 * chunk of zeroes keeps its blocks; a dropped chunk frees them.
 */
static void test_page_maps(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	unsigned char *img = calloc(1, 4 * CS), *pay = malloc(CS);
	unsigned char *got = malloc(CS);
	uint64_t map[1] = { 0 }, before;
	const unsigned int pages = CS / TIER_PAGE;
	struct tier_chunk_desc desc = { .map = map };
	struct tier_dobj *o;
	size_t paylen = 0;
	struct stat st;

	if (!d)
		return;
	CHECK_EQ(tier_dobj_create(d, 9, &o), 0);
	/* Pages 1, 2 and 9 of chunk 0, the last one short. */
	for (unsigned int p = 0; p < pages; p++) {
		if (p != 1 && p != 2 && p != 9)
			continue;
		size_t n = p == 9 ? 100 : TIER_PAGE;

		map[0] |= 1ull << p;
		fill_random(img + (size_t)p * TIER_PAGE, n);
		memcpy(pay + paylen, img + (size_t)p * TIER_PAGE, n);
		paylen += n;
	}
	{
		const void *src = pay;

		CHECK_EQ(tier_dobj_write_chunks_desc(d, o, 0, &src, &paylen,
						     &desc, 1), 0);
	}
	check_read(d, o, img, CS, 0);
	check_read(d, o, img, 3 * TIER_PAGE, TIER_PAGE / 2);
	check_read(d, o, img, 50, 9 * TIER_PAGE + 80);
	/* header, map and three pages of random bytes: one block each */
	CHECK_EQ(tier_dobj_stored(o), COST(HDR + 8 + paylen));
	CHECK(tier_dobj_stored(o) <= tier_disk_chunk_bound(d, paylen, true));
	CHECK_EQ(tier_dobj_chunk_cost(d, o, 0), tier_dobj_stored(o));
	memset(got, 0xee, CS);
	{
		void *dst = got;
		size_t all = CS;

		/* the chunk as it reads, holes and all */
		CHECK_EQ(tier_dobj_read_chunks(d, o, 0, &dst, &all, 1), 0);
	}
	CHECK(!memcmp(got, img, CS));

	/* Compressible pages with a map: lz4, still only those pages. */
	fill_text(img + CS + 4 * TIER_PAGE, 2 * TIER_PAGE);
	{
		const void *src = img + CS + 4 * TIER_PAGE;
		size_t len = 2 * TIER_PAGE;
		uint64_t m2[1] = { 3ull << 4 };
		struct tier_chunk_desc d2 = { .map = m2 };

		CHECK_EQ(tier_dobj_write_chunks_desc(d, o, 1, &src, &len, &d2,
						     1), 0);
		CHECK(tier_dobj_chunk_cost(d, o, 1) < COST(HDR + 8 + len));
	}
	check_read(d, o, img, 2 * CS, 0);

	/* Raw: zeroes that keep their room. */
	memset(pay, 0, CS);
	{
		const void *src = pay;
		size_t len = CS;
		struct tier_chunk_desc raw = { .raw = true };

		CHECK_EQ(tier_dobj_write_chunks_desc(d, o, 2, &src, &len, &raw,
						     1), 0);
		CHECK_EQ(tier_dobj_chunk_cost(d, o, 2), COST(HDR + CS));
	}
	check_read(d, o, img, 4 * CS, 0);
	CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
	CHECK_EQ((uint64_t)st.st_blocks * 512, tier_dobj_stored(o));

	/* Dropping a chunk gives its blocks back and reads zeroes. */
	before = tier_dobj_stored(o);
	CHECK_EQ(tier_dobj_drop_chunk(d, o, 2), 0);
	CHECK_EQ(tier_dobj_stored(o), before - COST(HDR + CS));
	CHECK_EQ(tier_dobj_drop_chunk(d, o, 3), 0);
	CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
	CHECK_EQ((uint64_t)st.st_blocks * 512, tier_dobj_stored(o));
	check_read(d, o, img, 4 * CS, 0);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
	free(pay);
	free(got);
}

static void test_truncate(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	unsigned char *img = calloc(1, 8 * CS);
	struct tier_dobj *o;
	uint64_t before;
	struct stat st;

	if (!d)
		return;
	CHECK_EQ(tier_dobj_create(d, 5, &o), 0);
	for (int i = 0; i < 6; i++) {
		if (i & 1)
			fill_random(img + (size_t)i * CS, CS);
		else
			fill_text(img + (size_t)i * CS, CS);
		CHECK_EQ(tier_dobj_write_chunk(d, o, (uint64_t)i,
					       img + (size_t)i * CS, CS),
			 0);
	}
	before = tier_dobj_stored(o);
	CHECK_EQ(tier_dobj_truncate(d, o, 8), 0);
	CHECK_EQ(tier_dobj_stored(o), before);
	CHECK_EQ(tier_dobj_truncate(d, o, 3), 0);
	CHECK(tier_dobj_stored(o) < before);
	memset(img + 3 * CS, 0, 3 * CS);
	check_read(d, o, img, 8 * CS, 0);
	CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
	CHECK(st.st_size <= 3 * SLOT);

	CHECK_EQ(tier_dobj_truncate(d, o, 1), 0);
	memset(img + CS, 0, 2 * CS);
	check_read(d, o, img, 8 * CS, 0);
	/* Grows again after shrinking back to the inline array. */
	fill_random(img + 4 * CS, CS);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 4, img + 4 * CS, CS), 0);
	check_read(d, o, img, 8 * CS, 0);

	CHECK_EQ(tier_dobj_truncate(d, o, 0), 0);
	CHECK_EQ(tier_dobj_stored(o), 0);
	memset(img, 0, 8 * CS);
	check_read(d, o, img, 8 * CS, 0);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
}

/* Flip one byte at @pos of the spill file. */
static void corrupt_at(const char *path, off_t pos)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	unsigned char b;

	CHECK(fd >= 0);
	CHECK_EQ(pread(fd, &b, 1, pos), 1);
	b ^= 0x40;
	CHECK_EQ(pwrite(fd, &b, 1, pos), 1);
	close(fd);
}

static void test_corruption(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	unsigned char *img = calloc(1, 4 * CS), *got = malloc(4 * CS);
	char want[64];
	struct tier_dobj *o;

	if (!d)
		return;
	CHECK_EQ(tier_dobj_create(d, 6, &o), 0);
	fill_text(img, CS);
	fill_text(img + CS, CS);
	fill_random(img + 2 * CS, CS);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(tier_dobj_write_chunk(d, o, (uint64_t)i,
					       img + (size_t)i * CS, CS),
			 0);

	/* Chunk 1 (lz4): a byte of its stored data. */
	corrupt_at(tier_dobj_path(o), SLOT + HDR + 100);
	log_capture();
	CHECK_EQ(tier_dobj_read(d, o, got, CS, CS), -EIO);
	CHECK_EQ(log_lines, 1);
	printf("# logged: %s\n", log_last);
	CHECK(strstr(log_last, tier_dobj_path(o)) != NULL);
	CHECK(strstr(log_last, "chunk 1 ") != NULL);
	/* Part of the chunk, and through the parallel path. */
	CHECK_EQ(tier_dobj_read(d, o, got, 10, CS + 5), -EIO);
	CHECK_EQ(tier_dobj_read(d, o, got, 4 * CS, 0), -EIO);
	/* Other chunks still read. */
	check_read(d, o, img, CS, 0);

	/* Chunk 2 (raw, read straight into the caller's buffer). */
	corrupt_at(tier_dobj_path(o), 2 * SLOT + HDR + CS - 1);
	log_capture();
	CHECK_EQ(tier_dobj_read(d, o, got, CS, 2 * CS), -EIO);
	CHECK_EQ(log_lines, 1);
	CHECK(strstr(log_last, "chunk 2 ") != NULL);
	CHECK_EQ(tier_dobj_read(d, o, got, 1, 2 * CS + 7), -EIO);

	/* Chunk 3 (zero): its header. */
	corrupt_at(tier_dobj_path(o), 3 * SLOT + 17);
	log_capture();
	CHECK_EQ(tier_dobj_read(d, o, got, CS, 3 * CS), -EIO);
	CHECK_EQ(log_lines, 1);
	snprintf(want, sizeof(want), "chunk 3 ");
	CHECK(strstr(log_last, want) != NULL);

	/* Chunk 0 moved elsewhere: an index mismatch. */
	{
		int fd = open(tier_dobj_path(o), O_RDWR | O_CLOEXEC);
		unsigned char *tmp = malloc(CS + HDR);
		ssize_t n = pread(fd, tmp, CS + HDR, 0);

		CHECK(n > HDR);
		CHECK_EQ(pwrite(fd, tmp, (size_t)n, SLOT), n);
		close(fd);
		free(tmp);
	}
	log_capture();
	CHECK_EQ(tier_dobj_read(d, o, got, CS, CS), -EIO);
	CHECK_EQ(log_lines, 1);

	/* A rewrite heals the chunk. */
	CHECK_EQ(tier_dobj_write_chunk(d, o, 1, img + CS, CS), 0);
	check_read(d, o, img, CS, CS);

	/* A file cut short is corruption too, not a file system error. */
	{
		int fd = open(tier_dobj_path(o), O_RDWR | O_CLOEXEC);

		CHECK_EQ(ftruncate(fd, SLOT + 100), 0);
		close(fd);
	}
	log_capture();
	CHECK_EQ(tier_dobj_read(d, o, got, CS, CS), -EIO);
	CHECK_EQ(log_lines, 1);
	CHECK(strstr(log_last, "chunk 1 ") && strstr(log_last, "too short"));
	tfs_log_set_sink(NULL);

	/* Each failed check counted once: chunk 1 three times, chunk 2
	 * twice, chunk 3, the moved chunk 0 and the short file once. */
	{
		struct tier_disk_stats ds;

		tier_disk_stats(d, &ds);
		CHECK_EQ(ds.corrupt_chunks, 8);
		CHECK_EQ(ds.read_errors, 0);
		CHECK_EQ(ds.write_errors, 0);
	}
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
	free(got);
}

/* Make @dir (mode @mode) holding a "lock" file and a spill file "42";
 * with @lockfd, return a descriptor of the lock file holding its flock. */
static void plant(const char *dir, mode_t mode, bool lock_file, int *lockfd)
{
	char path[256];
	int fd;

	CHECK_EQ(mkdir(dir, 0700), 0);
	CHECK_EQ(chmod(dir, mode), 0);
	snprintf(path, sizeof(path), "%s/42", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	close(fd);
	if (!lock_file)
		return;
	snprintf(path, sizeof(path), "%s/lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	if (lockfd) {
		CHECK_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);
		*lockfd = fd;
	} else {
		close(fd);
	}
}

static bool exists(const char *dir, const char *name)
{
	char path[256];

	snprintf(path, sizeof(path), "%s%s%s", dir, name ? "/" : "",
		 name ? name : "");
	return !access(path, F_OK);
}

static void rm_planted(const char *dir)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
}

static void test_init_and_modes(void)
{
	char dir[128], path[192], stale[128], live[128], open_[128];
	char nolock[128], victim[128], link[128];
	struct tier_disk *d, *d2;
	struct tier_dobj *o;
	struct stat st;
	int fd, held = -1;

	/* What earlier runs left: only a dead daemon's private directory
	 * goes. */
	snprintf(stale, sizeof(stale), "%s/tierfs.old.1", tmpdir);
	plant(stale, 0700, true, NULL);
	snprintf(live, sizeof(live), "%s/tierfs.live.1", tmpdir);
	plant(live, 0700, true, &held);
	snprintf(open_, sizeof(open_), "%s/tierfs.open.1", tmpdir);
	plant(open_, 0755, true, NULL);
	snprintf(nolock, sizeof(nolock), "%s/tierfs.nolock.1", tmpdir);
	plant(nolock, 0700, false, NULL);
	snprintf(victim, sizeof(victim), "%s/victim", tmpdir);
	plant(victim, 0700, true, NULL);
	snprintf(link, sizeof(link), "%s/tierfs.link", tmpdir);
	CHECK_EQ(symlink("victim", link), 0);

	umask(0);
	d = disk_new(CS, CFG_COMPRESS_LZ4);
	umask(022);
	if (!d)
		return;
	CHECK(!exists(stale, NULL));
	CHECK(exists(live, "42") && exists(live, "lock"));
	CHECK(exists(open_, "42") && exists(open_, "lock"));
	CHECK(exists(nolock, "42"));
	CHECK(exists(victim, "42") && exists(victim, "lock"));
	CHECK_EQ(lstat(link, &st), 0);
	CHECK(S_ISLNK(st.st_mode));

	/* Its own directory: an unpredictable name, 0700, locked. */
	snprintf(dir, sizeof(dir), "%s", tier_disk_path(d));
	snprintf(path, sizeof(path), "%s/tierfs.test.", tmpdir);
	CHECK(!strncmp(dir, path, strlen(path)));
	CHECK_EQ(strlen(dir), strlen(path) + 16);
	CHECK_EQ(stat(dir, &st), 0);
	CHECK_EQ(st.st_mode & 07777, 0700);
	CHECK(S_ISDIR(st.st_mode));
	snprintf(path, sizeof(path), "%s/lock", dir);
	fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(flock(fd, LOCK_EX | LOCK_NB) && errno == EWOULDBLOCK);
	close(fd);

	/* A second daemon on the same disk path leaves the first alone. */
	d2 = disk_new(CS, CFG_COMPRESS_LZ4);
	CHECK(exists(dir, "lock"));
	CHECK(strcmp(tier_disk_path(d2), dir) != 0);
	tier_disk_destroy(d2);

	CHECK_EQ(tier_dobj_create(d, 42, &o), 0);
	snprintf(path, sizeof(path), "%s/42", dir);
	CHECK(strcmp(tier_dobj_path(o), path) == 0);
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_mode & 07777, 0600);
	CHECK_EQ(st.st_size, 0);
	CHECK_EQ(tier_disk_chunk_size(d), CS);
	tier_dobj_destroy(d, o);
	CHECK(access(path, F_OK) && errno == ENOENT);
	tier_disk_destroy(d);
	CHECK(access(dir, F_OK) && errno == ENOENT);

	/* Once its daemon is gone, the live one is stale too. */
	close(held);
	d = disk_new(CS, CFG_COMPRESS_LZ4);
	CHECK(!exists(live, NULL));
	tier_disk_destroy(d);

	unlink(link);
	rm_planted(victim);
	rm_planted(open_);
	rm_planted(nolock);

	{
		char err[128] = "";

		CHECK_EQ(tier_disk_init(&d, "/nonexistent/dir", "t", CS,
					CFG_COMPRESS_LZ4, err, sizeof(err)),
			 -ENOENT);
		printf("# init error: %s\n", err);
		CHECK(err[0] != 0);
		CHECK_EQ(tier_disk_init(&d, tmpdir, "t", 0, CFG_COMPRESS_LZ4,
					err, sizeof(err)),
			 -EINVAL);
	}
}

/* A disk path others can write to: refused unless sticky, and then only
 * used through a private subdirectory that planting cannot subvert. */
static void test_shared_disk_path(void)
{
	char shared[128], sub[192], path[256], err[256] = "";
	struct tier_disk *d = NULL;
	struct stat st;
	unsigned int uid = (unsigned int)geteuid();

	snprintf(shared, sizeof(shared), "%s/shared", tmpdir);
	CHECK_EQ(mkdir(shared, 0700), 0);
	CHECK_EQ(chmod(shared, 0777), 0);
	CHECK_EQ(tier_disk_init(&d, shared, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 -EPERM);
	printf("# %s\n", err);
	CHECK(strstr(err, "writable by other users and not sticky"));
	CHECK_EQ(chmod(shared, 0775), 0);
	CHECK_EQ(tier_disk_init(&d, shared, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 -EPERM);

	CHECK_EQ(chmod(shared, 01777), 0);
	CHECK_EQ(tier_disk_init(&d, shared, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 0);
	snprintf(sub, sizeof(sub), "%s/tierfs-%u", shared, uid);
	snprintf(path, sizeof(path), "%s/tierfs.t.", sub);
	if (d)
		CHECK(!strncmp(tier_disk_path(d), path, strlen(path)));
	CHECK_EQ(lstat(sub, &st), 0);
	CHECK(S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700);
	tier_disk_destroy(d);
	CHECK(exists(sub, NULL));
	rm_planted(sub);

	if (uid != 0) {
		rm_planted(shared);
		return;
	}
	/* Another user took the name first: a directory of theirs, then a
	 * symlink. Neither is touched, and tierfs still starts. */
	plant(sub, 0700, true, NULL);
	CHECK_EQ(chown(sub, 65534, 65534), 0);
	CHECK_EQ(tier_disk_init(&d, shared, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 0);
	snprintf(path, sizeof(path), "%s.", sub);
	if (d)
		CHECK(!strncmp(tier_disk_path(d), path, strlen(path)));
	CHECK(exists(sub, "42") && exists(sub, "lock"));
	tier_disk_destroy(d);
	rm_planted(sub);
	snprintf(path, sizeof(path), "%s/victim", tmpdir);
	plant(path, 0700, true, NULL);
	CHECK_EQ(symlink(path, sub), 0);
	CHECK_EQ(tier_disk_init(&d, shared, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 0);
	CHECK(exists(path, "42") && exists(path, "lock"));
	CHECK_EQ(lstat(sub, &st), 0);
	CHECK(S_ISLNK(st.st_mode));
	tier_disk_destroy(d);
	rm_planted(path);
	rm_planted(shared);

	/* A disk path that belongs to another user. */
	snprintf(path, sizeof(path), "%s/theirs", tmpdir);
	CHECK_EQ(mkdir(path, 0755), 0);
	CHECK_EQ(chown(path, 65534, 65534), 0);
	CHECK_EQ(tier_disk_init(&d, path, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 -EPERM);
	printf("# %s\n", err);
	CHECK(strstr(err, "belongs to uid 65534"));
	rmdir(path);
}

struct reader_arg {
	struct tier_disk *d;
	struct tier_dobj *o;
	const unsigned char *img;
	size_t size;
	int bad;
};

static void *reader(void *p)
{
	struct reader_arg *a = p;
	unsigned char *got = malloc(a->size);
	uint64_t seed = (uint64_t)(uintptr_t)p;

	for (int t = 0; t < 200; t++) {
		uint64_t off, len;

		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		off = (seed >> 20) % a->size;
		len = (seed >> 40) % (a->size - off + 1);
		if (tier_dobj_read(a->d, a->o, got, len, off) ||
		    memcmp(got, a->img + off, len))
			a->bad++;
	}
	free(got);
	return NULL;
}

static void test_write_chunks_parallel(void)
{
	struct tier_disk *d = disk_new(CS, CFG_COMPRESS_LZ4);
	size_t n = 37, size = n * CS;
	unsigned char *img = malloc(size);
	const void *srcs[37];
	size_t lens[37];
	struct reader_arg ra[4];
	pthread_t th[4];
	struct tier_dobj *o;
	uint64_t sum = 0;

	if (!d)
		return;
	for (size_t i = 0; i < n; i++) {
		unsigned char *c = img + i * CS;

		switch (i % 4) {
		case 0:
			fill_text(c, CS);
			break;
		case 1:
			fill_random(c, CS);
			break;
		case 2:
			memset(c, 0, CS);
			break;
		default:
			fill_text(c, CS / 2);
			fill_random(c + CS / 2, CS / 2);
		}
		srcs[i] = c;
		lens[i] = CS;
	}
	lens[n - 1] = 777;
	memset(img + (n - 1) * CS + 777, 0, CS - 777);
	CHECK_EQ(tier_dobj_create(d, 7, &o), 0);
	CHECK_EQ(tier_dobj_write_chunks(d, o, 0, srcs, lens, n), 0);
	check_read(d, o, img, size, 0);

	/* Same bytes one at a time: same accounting. */
	{
		struct tier_dobj *o2;

		CHECK_EQ(tier_dobj_create(d, 8, &o2), 0);
		for (size_t i = 0; i < n; i++)
			CHECK_EQ(tier_dobj_write_chunk(d, o2, i, srcs[i],
						       lens[i]),
				 0);
		sum = tier_dobj_stored(o2);
		tier_dobj_destroy(d, o2);
	}
	CHECK_EQ(tier_dobj_stored(o), sum);

	/* Rewrite a middle run with other data. */
	for (size_t i = 10; i < 20; i++)
		fill_random(img + i * CS, CS);
	CHECK_EQ(tier_dobj_write_chunks(d, o, 10, srcs + 10, lens + 10, 10),
		 0);
	check_read(d, o, img, size, 0);

	for (int i = 0; i < 4; i++) {
		ra[i] = (struct reader_arg){ d, o, img, size, 0 };
		CHECK_EQ(pthread_create(&th[i], NULL, reader, &ra[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ(ra[i].bad, 0);
	}

	lens[0] = CS + 1;
	CHECK_EQ(tier_dobj_write_chunks(d, o, 0, srcs, lens, 2), -EINVAL);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);
	free(img);
}

/* Past the descriptor budget, objects open their file for each call. */
static void test_many_objects(void)
{
	struct rlimit old, rl;
	struct tier_disk *d;
	struct tier_dobj *o[100];
	unsigned char buf[3000], got[3000];
	int bad = 0;

	CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
	rl = old;
	rl.rlim_cur = 64;
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
	d = disk_new(CS, CFG_COMPRESS_LZ4);
	if (d) {
		for (int i = 0; i < 100; i++) {
			CHECK_EQ(tier_dobj_create(d, 1000 + (uint64_t)i, &o[i]),
				 0);
			fill_text(buf, sizeof(buf));
			buf[0] = (unsigned char)i;
			CHECK_EQ(tier_dobj_write_chunk(d, o[i], 0, buf,
						       sizeof(buf)),
				 0);
		}
		for (int i = 0; i < 100; i++) {
			CHECK_EQ(tier_dobj_read(d, o[i], got, sizeof(got), 0),
				 0);
			if (got[0] != (unsigned char)i)
				bad++;
			CHECK_EQ(tier_dobj_truncate(d, o[i], 0), 0);
			tier_dobj_destroy(d, o[i]);
		}
		tier_disk_destroy(d);
	}
	CHECK_EQ(bad, 0);
	setrlimit(RLIMIT_NOFILE, &old);
}

static char small_mnt[128];

/* Mount the 1M tmpfs test_enospc() fills; 0 or errno. */
static int small_mount(void)
{
	snprintf(small_mnt, sizeof(small_mnt), "%s/small", tmpdir);
	mkdir(small_mnt, 0700);
	if (mount("tmpfs", small_mnt, "tmpfs", 0, "size=1M")) {
		int err = errno;

		rmdir(small_mnt);
		return err;
	}
	return 0;
}

static void test_enospc(void)
{
	const char *mnt = small_mnt;
	char err[128];
	struct tier_disk *d = NULL;
	struct tier_dobj *o = NULL;
	unsigned char *img = malloc(40 * CS);
	int rc = 0, i, n_ok;

	CHECK_EQ(tier_disk_init(&d, mnt, "t", CS, CFG_COMPRESS_LZ4, err,
				sizeof(err)),
		 0);
	if (d)
		CHECK_EQ(tier_dobj_create(d, 1, &o), 0);
	if (o) {
		fill_random(img, 40 * CS);
		log_capture();
		for (i = 0; i < 40; i++) {
			rc = tier_dobj_write_chunk(d, o, (uint64_t)i,
						   img + (size_t)i * CS, CS);
			if (rc)
				break;
		}
		printf("# %d chunks of 64K fit, then %d\n", i, rc);
		CHECK_EQ(rc, -ENOSPC);
		{
			struct tier_disk_stats ds;

			tier_disk_stats(d, &ds);
			CHECK_EQ(ds.write_errors, 1);
			CHECK_EQ(log_lines, 1);
			CHECK(strstr(log_last, "cannot write chunk") &&
			      strstr(log_last, "No space left"));
		}
		CHECK(i > 5 && i < 40);
		n_ok = i;
		/* Everything stored before still reads back. */
		check_read(d, o, img, (size_t)n_ok * CS, 0);
		/* The failed chunk reads as something, not an error. */
		{
			unsigned char *got = malloc(CS);

			CHECK_EQ(tier_dobj_read(d, o, got, CS,
						(uint64_t)n_ok * CS),
				 0);
			free(got);
		}
		CHECK(tier_dobj_stored(o) <= (uint64_t)n_ok * COST(CS + HDR));
		/* Parallel writes fail the same way. */
		{
			const void *srcs[8];
			size_t lens[8];

			for (int k = 0; k < 8; k++) {
				srcs[k] = img + (size_t)k * CS;
				lens[k] = CS;
			}
			CHECK_EQ(tier_dobj_write_chunks(d, o, 50, srcs, lens,
							8),
				 -ENOSPC);
		}
		tfs_log_set_sink(NULL);
		check_read(d, o, img, (size_t)n_ok * CS, 0);
		tier_dobj_destroy(d, o);
	}
	tier_disk_destroy(d);
	CHECK_EQ(umount(mnt), 0);
	rmdir(mnt);
	free(img);
}

/* --- throughput --- */

/* 64 MiB through 1 MiB chunks, in batches of 8 and one at a time, read
 * back whole; and the CRC32C of all of it, hardware against the table.
 * How fast is bench's business (bench/disk_bench.c, bench/run). */
static void round_trip_large(const char *name, const unsigned char *data,
			     size_t size, uint32_t cs)
{
	struct tier_disk *d = disk_new(cs, CFG_COMPRESS_LZ4);
	size_t n = size / cs, batch = 8;
	unsigned char *got = malloc(size);
	const void **srcs = malloc(n * sizeof(*srcs));
	size_t *lens = malloc(n * sizeof(*lens));
	struct tier_dobj *o;

	if (!d)
		goto out;
	for (size_t i = 0; i < n; i++) {
		srcs[i] = data + i * cs;
		lens[i] = cs;
	}
	CHECK_EQ(tier_dobj_create(d, 100, &o), 0);
	for (size_t i = 0; i < n; i += batch)
		CHECK_EQ(tier_dobj_write_chunks(d, o, i, srcs + i, lens + i,
						n - i < batch ? n - i : batch),
			 0);
	memset(got, 0, size);
	CHECK_EQ(tier_dobj_read(d, o, got, size, 0), 0);
	CHECK(memcmp(got, data, size) == 0);
	printf("# %s %zu MiB: stored %.1f%%\n", name, size >> 20,
	       100.0 * (double)tier_dobj_stored(o) / (double)size);
	tier_dobj_destroy(d, o);

	CHECK_EQ(tier_dobj_create(d, 200, &o), 0);
	for (size_t i = 0; i < n; i++)
		CHECK_EQ(tier_dobj_write_chunk(d, o, i, srcs[i], cs), 0);
	memset(got, 0, size);
	CHECK_EQ(tier_dobj_read(d, o, got, size, 0), 0);
	CHECK(memcmp(got, data, size) == 0);
	tier_dobj_destroy(d, o);
	tier_disk_destroy(d);

	CHECK_EQ(tfs_crc32c(0, data, size), tfs_crc32c_sw(0, data, size));
	CHECK_EQ(tfs_crc32c_hw(0, data, size), tfs_crc32c_sw(0, data, size));
out:
	free(got);
	free(srcs);
	free(lens);
}

static void test_round_trip_large(void)
{
	size_t size = 64u << 20;
	unsigned char *data = malloc(size);

	fill_text(data, size);
	round_trip_large("text", data, size, 1u << 20);
	fill_random(data, size);
	round_trip_large("random", data, size, 1u << 20);
	free(data);
}

/* The persistent directory: a fixed name, private, locked against a
 * second daemon, kept at destroy, never taken for a stale one. */
static void test_persistent_dir(void)
{
	char err[256], path[256], pid[32];
	struct tier_disk *d, *d2;
	struct tier_dobj *o;
	struct stat st;
	int rc, fd;

	d = NULL;
	rc = tier_disk_init_persistent(&d, tmpdir, "../x", CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err));
	CHECK_EQ(rc, -EINVAL);
	CHECK(!tier_disk_name_valid(".hidden") && !tier_disk_name_valid("") &&
	      !tier_disk_name_valid("a/b") && tier_disk_name_valid("job-1.a_B"));

	rc = tier_disk_init_persistent(&d, tmpdir, "job1", CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (rc)
		return;
	snprintf(path, sizeof(path), "%s/tierfs-persist.job1", tmpdir);
	CHECK(!strcmp(tier_disk_path(d), path));
	CHECK(tier_disk_persistent(d));
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ(st.st_mode & 07777, 0700);
	snprintf(path, sizeof(path), "%s/tierfs-persist.job1/lock", tmpdir);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK(read(fd, pid, sizeof(pid)) > 0);
	close(fd);
	CHECK_EQ(atol(pid), getpid());

	/* A second daemon on it is refused, naming the first. */
	d2 = NULL;
	rc = tier_disk_init_persistent(&d2, tmpdir, "job1", CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err));
	CHECK_EQ(rc, -EBUSY);
	CHECK(!d2);
	snprintf(pid, sizeof(pid), "(pid %d)", (int)getpid());
	CHECK(strstr(err, "in use by another tierfs") && strstr(err, pid));

	/* Another (non-persistent) daemon's sweep leaves it alone, even
	 * unlocked. */
	CHECK_EQ(tier_dobj_create(d, 7, &o), 0);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, "abc", 3), 0);
	tier_dobj_close(d, o);
	tier_disk_destroy(d);
	d2 = disk_new(CS, CFG_COMPRESS_LZ4);
	tier_disk_destroy(d2);
	snprintf(path, sizeof(path), "%s/tierfs-persist.job1/7", tmpdir);
	CHECK_EQ(stat(path, &st), 0);

	/* Reopened: the file is there, listed, removable. */
	rc = tier_disk_init_persistent(&d, tmpdir, "job1", CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (!rc) {
		uint64_t *ids;
		size_t n;

		CHECK_EQ(tier_disk_list(d, &ids, &n), 0);
		CHECK(n == 1 && ids[0] == 7);
		free(ids);
		tier_disk_remove(d, 7);
		CHECK_EQ(tier_disk_list(d, &ids, &n), 0);
		CHECK_EQ(n, 0);
		free(ids);
		tier_disk_destroy(d);
	}

	/* Not private: another mode, or a symlink in its place. */
	snprintf(path, sizeof(path), "%s/tierfs-persist.job1", tmpdir);
	CHECK_EQ(chmod(path, 0755), 0);
	rc = tier_disk_init_persistent(&d, tmpdir, "job1", CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err));
	CHECK_EQ(rc, -EPERM);
	CHECK(strstr(err, "not a private directory") != NULL);
	CHECK_EQ(chmod(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/tierfs-persist.job2", tmpdir);
	CHECK_EQ(symlink("tierfs-persist.job1", path), 0);
	rc = tier_disk_init_persistent(&d, tmpdir, "job2", CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err));
	CHECK_EQ(rc, -EPERM);
	unlink(path);
	snprintf(path, sizeof(path), "rm -rf %s/tierfs-persist.job1", tmpdir);
	CHECK_EQ(system(path), 0);
}

static bool all_zero_buf(const char *buf, size_t len)
{
	for (size_t k = 0; k < len; k++)
		if (buf[k])
			return false;
	return true;
}

static void fill_chunk(char *buf, int version, uint64_t idx)
{
	for (uint32_t k = 0; k < CS; k += 8) {
		uint64_t v = (uint64_t)version << 48 | idx << 32 | k;

		memcpy(buf + k, &v, 8);
	}
}

static bool chunk_is(struct tier_disk *d, struct tier_dobj *o, int version,
		     uint64_t idx)
{
	static char want[CS], got[CS];

	fill_chunk(want, version, idx);
	return !tier_dobj_read(d, o, got, CS, idx * CS) &&
	       !memcmp(want, got, CS);
}

/* What a crash leaves: an object adopted from a committed table reads
 * the committed bytes whatever was written since. */
static struct tier_dobj *adopt(struct tier_disk *d, uint64_t id,
			       uint64_t size, struct tier_dobj *from)
{
	size_t len = tier_dobj_map(from, NULL, 0);
	struct tier_dobj *o = NULL;
	void *map = malloc(len);

	CHECK_EQ(tier_dobj_map(from, map, len), len);
	CHECK_EQ(tier_dobj_adopt(d, id, map, len, NULL, NULL, &o), 0);
	free(map);
	return o;
}

/* Copy-on-write per chunk slot. */
static void test_committed_versions(void)
{
	static char buf[CS];
	struct tier_dobj *o, *c1, *c2;
	struct tier_disk *d;
	char err[256];
	void *map1;
	size_t len1;
	uint64_t stored;

	CHECK_EQ(tier_disk_init_persistent(&d, tmpdir, "cow", CS,
					   CFG_COMPRESS_NONE, err,
					   sizeof(err)), 0);
	CHECK_EQ(tier_dobj_create(d, 9, &o), 0);
	for (uint64_t i = 0; i < 4; i++) {
		fill_chunk(buf, 1, i);
		CHECK_EQ(tier_dobj_write_chunk(d, o, i, buf, CS), 0);
	}
	CHECK(!tier_dobj_committed(o));
	CHECK_EQ(tier_dobj_sync(d, o), 0);
	CHECK_EQ(tier_dobj_commit(d, o), 0);
	CHECK(tier_dobj_committed(o));
	len1 = tier_dobj_map(o, NULL, 0);
	CHECK_EQ(len1, 4 + 4 * 12);
	map1 = malloc(len1);
	tier_dobj_map(o, map1, len1);
	stored = tier_dobj_stored(o);
	CHECK_EQ(stored, 4 * COST(CS + HDR));

	/* Version 2: chunk 1 rewritten twice (the second time in place),
	 * chunk 3 cut off. */
	fill_chunk(buf, 2, 1);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 1, buf, CS), 0);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 1, buf, CS), 0);
	CHECK_EQ(tier_dobj_truncate(d, o, 3), 0);
	CHECK(chunk_is(d, o, 2, 1) && chunk_is(d, o, 1, 0));
	/* Both versions take room: 3 current chunks, plus 1 and 3 of v1. */
	CHECK_EQ(tier_dobj_stored(o), 5 * COST(CS + HDR));
	c1 = NULL;
	CHECK_EQ(tier_dobj_adopt(d, 9, map1, len1, NULL, NULL, &c1), 0);
	if (c1) {
		for (uint64_t i = 0; i < 4; i++)
			CHECK(chunk_is(d, c1, 1, i));
		tier_dobj_close(d, c1);
	}

	/* Committing version 2 frees version 1's chunks 1 and 3. */
	CHECK_EQ(tier_dobj_sync(d, o), 0);
	CHECK_EQ(tier_dobj_commit(d, o), 0);
	CHECK_EQ(tier_dobj_stored(o), 3 * COST(CS + HDR));
	c2 = adopt(d, 9, 3 * CS, o);
	if (c2) {
		CHECK(chunk_is(d, c2, 1, 0) && chunk_is(d, c2, 2, 1) &&
		      chunk_is(d, c2, 1, 2));
		tier_dobj_close(d, c2);
	}
	{
		struct stat st;

		CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
		/* 3 chunks and headers, where 4 were before the commit */
		CHECK((uint64_t)st.st_blocks * 512 < 4 * (uint64_t)CS);
	}

	/* Revert: chunks written since the commit go, the committed ones
	 * read again. */
	fill_chunk(buf, 3, 0);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
	CHECK_EQ(tier_dobj_write_chunk(d, o, 5, buf, CS), 0);
	CHECK(chunk_is(d, o, 3, 0));
	tier_dobj_revert(d, o);
	CHECK(chunk_is(d, o, 1, 0) && chunk_is(d, o, 2, 1));
	CHECK_EQ(tier_dobj_stored(o), 3 * COST(CS + HDR));
	memset(buf, 1, CS);
	CHECK_EQ(tier_dobj_read(d, o, buf, CS, 5 * (uint64_t)CS), 0);
	CHECK(all_zero_buf(buf, CS));

	/* Truncate to nothing and rewrite (a re-spill): the committed
	 * version stays readable until the next commit. */
	CHECK_EQ(tier_dobj_truncate(d, o, 0), 0);
	CHECK_EQ(tier_dobj_stored(o), 3 * COST(CS + HDR));
	for (uint64_t i = 0; i < 2; i++) {
		fill_chunk(buf, 4, i);
		CHECK_EQ(tier_dobj_write_chunks(d, o, i,
						(const void *const[]){ buf },
						(const size_t[]){ CS }, 1), 0);
	}
	c2 = NULL;
	{
		size_t len = tier_dobj_map(o, NULL, 0);

		CHECK_EQ(len, 4 + 2 * 12);
	}
	tier_dobj_commit(d, o);
	c2 = adopt(d, 9, 2 * CS, o);
	if (c2) {
		CHECK(chunk_is(d, c2, 4, 0) && chunk_is(d, c2, 4, 1));
		tier_dobj_close(d, c2);
	}
	/* A chunk rewritten and committed over and over (an O_SYNC writer)
	 * alternates between two slots: neither the file nor its tables
	 * grow. */
	struct stat before;

	CHECK_EQ(stat(tier_dobj_path(o), &before), 0);
	for (int k = 0; k < 300; k++) {
		fill_chunk(buf, 5 + k, 0);
		CHECK_EQ(tier_dobj_truncate(d, o, 0), 0);
		CHECK_EQ(tier_dobj_write_chunk(d, o, 0, buf, CS), 0);
		CHECK_EQ(tier_dobj_commit(d, o), 0);
	}
	CHECK(chunk_is(d, o, 304, 0));
	CHECK_EQ(tier_dobj_stored(o), COST(CS + HDR));
	{
		struct stat st;

		CHECK_EQ(stat(tier_dobj_path(o), &st), 0);
		CHECK(st.st_size <= before.st_size);
		CHECK((uint64_t)st.st_blocks * 512 <= 2 * (uint64_t)CS);
	}
	tier_dobj_destroy(d, o);
	free(map1);
	tier_disk_destroy(d);
	snprintf(err, sizeof(err), "rm -rf %s/tierfs-persist.cow", tmpdir);
	CHECK_EQ(system(err), 0);
}

/* Tables that do not describe a version of this disk tier. */

/*
 * A shared tier: two "mounts" on one directory. A file spilled by one is
 * handed to the other by name and adopted by a hard link: same inode, no
 * byte copied, every byte read back; it outlives the first mount's copy.
 * Paths that are no hand-off names, or lead elsewhere, are refused.
 */
static void test_shared_handoff(void)
{
	struct tier_disk *a = NULL, *b = NULL, *c = NULL;
	size_t size = 3 * CS + 777;
	unsigned char *img = calloc(1, 4 * CS);
	char err[256], path[4096], bad[4096], *slash;
	struct tier_dobj *o = NULL, *got = NULL;
	uint64_t token = 0, sz = 0;
	struct stat sa, sb;
	char dir[128];

	snprintf(dir, sizeof(dir), "%s/shared-tier", tmpdir);
	mkdir(dir, 0700);
	CHECK_EQ(tier_disk_init_shared(&a, dir, "one", CS, CFG_COMPRESS_LZ4,
				       err, sizeof(err)), 0);
	CHECK_EQ(tier_disk_init_shared(&b, dir, "two", CS, CFG_COMPRESS_LZ4,
				       err, sizeof(err)), 0);
	if (!a || !b)
		goto out;
	CHECK(tier_disk_shared(a));
	CHECK(strstr(tier_disk_path(a), "/tierfs-shared."));
	fill_text(img, CS);
	fill_random(img + CS, CS);
	/* chunk 2 a hole */
	fill_text(img + 3 * CS, 777);
	CHECK_EQ(tier_dobj_create(a, 7, &o), 0);
	CHECK_EQ(tier_dobj_write_chunk(a, o, 0, img, CS), 0);
	CHECK_EQ(tier_dobj_write_chunk(a, o, 1, img + CS, CS), 0);
	CHECK_EQ(tier_dobj_write_chunk(a, o, 3, img + 3 * CS, 777), 0);
	CHECK_EQ(tier_dobj_handoff(a, o, 7, size, &token, path, sizeof(path)),
		 0);
	CHECK(token != 0);
	CHECK(strstr(path, "/h.7."));
	/* Asked again: the same name. */
	{
		char again[4096];
		uint64_t t2 = token;

		CHECK_EQ(tier_dobj_handoff(a, o, 7, size, &t2, again,
					   sizeof(again)), 0);
		CHECK(!strcmp(again, path));
	}

	/* Refused: not a hand-off name, another place, a guessed token. */
	CHECK_EQ(tier_dobj_adopt_link(b, "relative", 8, 1, &sz, &got),
		 -EINVAL);
	CHECK_EQ(tier_dobj_adopt_link(b, "/etc/passwd", 11, 1, &sz, &got),
		 -EXDEV);
	snprintf(bad, sizeof(bad), "%s", path);
	slash = strrchr(bad, '/');
	strcpy(slash + 1, "7");
	CHECK_EQ(tier_dobj_adopt_link(b, bad, strlen(bad), 1, &sz, &got),
		 -EINVAL);
	snprintf(bad, sizeof(bad), "%s", path);
	bad[strlen(bad) - 1] = bad[strlen(bad) - 1] == '0' ? '1' : '0';
	CHECK_EQ(tier_dobj_adopt_link(b, bad, strlen(bad), 1, &sz, &got),
		 -ENOENT);
	CHECK(!got);

	/* Adopted with a trailing newline, as getfattr/setfattr pass it. */
	snprintf(bad, sizeof(bad), "%.4000s\n", path);
	CHECK_EQ(tier_dobj_adopt_link(b, bad, strlen(bad), 42, &sz, &got), 0);
	CHECK_EQ(sz, size);
	if (!got)
		goto out;
	CHECK_EQ(tier_dobj_stored(got), tier_dobj_stored(o));
	CHECK_EQ(stat(tier_dobj_path(o), &sa), 0);
	CHECK_EQ(stat(tier_dobj_path(got), &sb), 0);
	CHECK_EQ(sa.st_ino, sb.st_ino);
	CHECK_EQ(sa.st_nlink, 3); /* its name, the hand-off, the adopter's */
	check_read(b, got, img, size, 0);
	check_read(b, got, img, 200, 2 * CS - 100);
	/* The first mount's copy goes; the adopter's stays. */
	tier_dobj_handoff_drop(a, 7, size, token);
	tier_dobj_destroy(a, o);
	o = NULL;
	check_read(b, got, img, size, 0);

	/* Another chunk size cannot read the file. */
	CHECK_EQ(tier_disk_init_shared(&c, dir, "three", 2 * CS,
				       CFG_COMPRESS_LZ4, err, sizeof(err)), 0);
	{
		struct tier_dobj *o2 = NULL, *g2 = NULL;
		uint64_t t3 = 0;

		CHECK_EQ(tier_dobj_create(b, 9, &o2), 0);
		CHECK_EQ(tier_dobj_write_chunk(b, o2, 0, img, CS), 0);
		CHECK_EQ(tier_dobj_handoff(b, o2, 9, CS, &t3, path,
					   sizeof(path)), 0);
		if (c)
			CHECK_EQ(tier_dobj_adopt_link(c, path, strlen(path), 1,
						      &sz, &g2),
				 -EPROTO);
		tier_dobj_destroy(b, o2);
	}
	/* A private tier neither hands off nor adopts. */
	{
		struct tier_disk *p = disk_new(CS, CFG_COMPRESS_LZ4);
		struct tier_dobj *po = NULL, *pg = NULL;
		uint64_t t4 = 0;

		if (p && !tier_dobj_create(p, 3, &po)) {
			CHECK_EQ(tier_dobj_handoff(p, po, 3, 0, &t4, bad,
						   sizeof(bad)),
				 -EOPNOTSUPP);
			CHECK_EQ(tier_dobj_adopt_link(p, path, strlen(path), 4,
						      &sz, &pg),
				 -EOPNOTSUPP);
			tier_dobj_destroy(p, po);
		}
		tier_disk_destroy(p);
	}
out:
	tier_dobj_destroy(a, o);
	tier_dobj_destroy(b, got);
	tier_disk_destroy(a);
	tier_disk_destroy(b);
	tier_disk_destroy(c);
	rmdir(dir);
	free(img);
}

static void test_adopt_refuses(void)
{
	struct tier_disk *d;
	struct tier_dobj *o;
	char err[256];
	uint32_t m[1 + 3 * 2];
	uint32_t raw = (HDR + 10) | 2u << 30;

	CHECK_EQ(tier_disk_init_persistent(&d, tmpdir, "bad", CS,
					   CFG_COMPRESS_LZ4, err,
					   sizeof(err)), 0);
#define TRY(n, i0, s0, m0, i1, s1, m1, size, want)                          \
	do {                                                               \
		uint32_t v[] = { htole32(n), htole32(i0), htole32(s0),      \
				 htole32(m0), htole32(i1), htole32(s1),     \
				 htole32(m1) };                             \
		memcpy(m, v, sizeof(v));                                   \
		o = NULL;                                                  \
		CHECK_EQ(tier_dobj_adopt(d, 1, m, 4 + (size_t)(n) * 12,    \
					 NULL, NULL, &o), want);           \
		tier_dobj_close(d, o);                                     \
	} while (0)
	TRY(2, 0, 0, raw, 1, 5, raw, 2 * CS, 0);
	TRY(2, 1, 0, raw, 0, 5, raw, 2 * CS, -EINVAL); /* out of order */
	TRY(2, 0, 3, raw, 1, 3, raw, 2 * CS, -EINVAL); /* a slot twice */
	/* past the size: pages fallocate kept there (issue 31) */
	TRY(2, 0, 0, raw, 2, 1, raw, 2 * CS, 0);
	TRY(1, 5, 0, raw, 0, 0, 0, 0, 0); /* an empty file's */
	TRY(1, 0, 0, HDR + 1, 0, 0, 0, CS, -EINVAL); /* no encoding */
	TRY(1, 0, 0, (HDR + CS + 1) | 2u << 30, 0, 0, 0, CS, -EINVAL);
	TRY(1, 0, 0, (HDR + 1) | 1u << 30, 0, 0, 0, CS, -EINVAL);
	TRY(1, 0, UINT32_MAX, raw, 0, 0, 0, CS, -EINVAL);
#undef TRY
	o = NULL;
	CHECK_EQ(tier_dobj_adopt(d, 1, m, 3, NULL, NULL, &o), -EINVAL);
	tier_disk_destroy(d);
	snprintf(err, sizeof(err), "rm -rf %s/tierfs-persist.bad", tmpdir);
	CHECK_EQ(system(err), 0);
}

int main(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/tfs-disk-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	TAP_RUN(test_crc32c_vectors);
	TAP_RUN(test_crc32c_hw_matches_sw);
	TAP_RUN(test_round_trip);
	TAP_RUN(test_read_chunks);
	TAP_RUN(test_stored_sizes);
	TAP_RUN(test_no_compression);
	TAP_RUN(test_holes);
	TAP_RUN(test_page_maps);
	TAP_RUN(test_truncate);
	TAP_RUN(test_corruption);
	TAP_RUN(test_init_and_modes);
	TAP_RUN(test_shared_disk_path);
	TAP_RUN(test_write_chunks_parallel);
	TAP_RUN(test_many_objects);
	TAP_RUN(test_persistent_dir);
	TAP_RUN(test_committed_versions);
	TAP_RUN(test_adopt_refuses);
	TAP_RUN(test_shared_handoff);
	{
		int err = small_mount();
		char why[160];

		snprintf(why, sizeof(why), "cannot mount a 1M tmpfs: %s",
			 strerror(err));
		if (err)
			tap_skip("test_enospc", why);
		else
			TAP_RUN(test_enospc);
	}
	TAP_RUN(test_round_trip_large);
	rmdir(tmpdir);
	return tap_done();
}
