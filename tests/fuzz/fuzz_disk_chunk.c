// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The disk tier's chunk header check and decompression (tiers/disk.c) on
 * corrupted spill files. Each input builds a spill object (chunks of zeroes,
 * text, random bytes or bytes from the input, rewritten and truncated),
 * checks that it reads back, then corrupts the file behind the tier's back
 * (flipped bits, overwritten bytes, truncation, holes, one chunk's slot
 * copied over another's) and reads it again in several ways.
 *
 * Contract checked: every read returns 0 with the right bytes, or -EIO with
 * an error logged that names the spill file; never a crash, never wrong
 * bytes. "Right" is decided by an independent reader of the documented
 * format (doc/design.md, "The disk tier"): a chunk whose header and CRCs
 * still check out is read as what it now says, since a CRC cannot tell a
 * corruption that happens to rebuild a valid chunk from a real one; every
 * other chunk must give -EIO.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <lz4.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/log.h"
#include "fuzz.h"
#include "tiers/disk.h"

#define MAXCH 5
#define HDR 32u
/* Slots start on a block: 4 KiB where the fuzzer runs. */
#define BLK 4096u
#define MAGIC 0x43534654u

enum { ENC_ZERO = 1, ENC_RAW = 2, ENC_LZ4 = 3 };

struct disk_cfg {
	struct tier_disk *d;
	uint32_t cs;
};

static struct disk_cfg disks[4];
static char dir[4096];
static uint64_t next_id;

/* The last error the tier logged, and how many it logged. */
static char last_log[1024];
static unsigned long nlogs;

static void capture(enum tfs_log_level level, const char *fmt, va_list ap)
{
	vsnprintf(last_log, sizeof(last_log), fmt, ap);
	nlogs++;
}

static void cleanup(void)
{
	for (int i = 0; i < 4; i++)
		tier_disk_destroy(disks[i].d);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *tmp = getenv("TMPDIR");
	char err[256];

	snprintf(dir, sizeof(dir), "%s/tierfs-fuzz.XXXXXX",
		 tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(1);
	}
	for (int i = 0; i < 4; i++) {
		char tag[8];

		disks[i].cs = i & 1 ? 64 * 1024 : 4096;
		snprintf(tag, sizeof(tag), "%d", i);
		if (tier_disk_init(&disks[i].d, dir, tag, disks[i].cs,
				   i & 2 ? CFG_COMPRESS_NONE : CFG_COMPRESS_LZ4,
				   err, sizeof(err))) {
			fprintf(stderr, "tier_disk_init: %s\n", err);
			exit(1);
		}
	}
	atexit(cleanup);
	tfs_log_set_sink(capture);
	tfs_log_max = TFS_LOG_ERR;
	return 0;
}

static uint64_t xs(uint64_t *st)
{
	uint64_t x = *st;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *st = x;
}

/* Fill @len bytes with pattern @kind: zeroes, text-like, random, or the
 * input's next bytes repeated. */
static void fill(struct fuzz_in *in, uint8_t kind, char *p, size_t len)
{
	static const char *const words[] = { "spill ", "tier ", "chunk ",
					     "lz4 ", "00000 ", "\n" };
	uint64_t st = fuzz_u32(in) | 1;
	uint8_t pat[64];
	size_t n, k;

	switch (kind & 3) {
	case 0:
		memset(p, 0, len);
		break;
	case 1:
		for (k = 0; k < len; k += n) {
			const char *w = words[xs(&st) % 6];

			n = strlen(w) < len - k ? strlen(w) : len - k;
			memcpy(p + k, w, n);
		}
		break;
	case 2:
		for (k = 0; k < len; k++)
			p[k] = (char)xs(&st);
		break;
	default:
		n = fuzz_bytes(in, pat, 1 + fuzz_u8(in) % sizeof(pat));
		for (k = 0; k < len; k++)
			p[k] = n ? (char)pat[k % n] : 0;
		break;
	}
}

struct ref_chunk {
	bool present; /* the tier has it (its meta word is not 0) */
	uint8_t enc; /* as written, what the tier's meta word holds */
	uint32_t stored;
	enum { REF_OK, REF_BAD, REF_LZ4_BAD } state;
};

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static uint32_t crc(const void *p, size_t n)
{
	return tfs_crc32c(0, p, n);
}

/*
 * Decide what chunk @i of the file now reads as, as the format defines it,
 * into @out (cs bytes): REF_OK with the bytes, REF_BAD when the header or a
 * CRC does not check out, REF_LZ4_BAD when both CRCs match but the lz4
 * block does not decode to the length the header gives.
 */
static void ref_chunk(int fd, uint32_t cs, uint64_t i, struct ref_chunk *r,
		      char *out, char *tmp)
{
	uint8_t h[HDR];
	uint32_t raw, stored;
	off_t off = (off_t)(i * (cs + BLK));

	memset(out, 0, cs);
	r->state = REF_OK;
	if (!r->present)
		return;
	r->state = REF_BAD;
	if (pread(fd, h, HDR, off) != HDR)
		return;
	uint32_t magic = get32(h);

	raw = get32(h + 8);
	stored = get32(h + 12);
	/* h[6..7]: flags, none for chunks written without a page map */
	if (magic != MAGIC ||
	    get32(h + 28) != crc(h, 28) || h[4] != 1 || h[6] || h[7] ||
	    get64(h + 16) != i || h[5] != r->enc ||
	    stored != r->stored || raw > cs ||
	    (r->enc == ENC_RAW && raw != stored))
		return;
	if (stored && pread(fd, tmp, stored, off + HDR) != (ssize_t)stored)
		return;
	if (crc(tmp, stored) != get32(h + 24))
		return;
	r->state = REF_OK;
	if (r->enc == ENC_RAW)
		memcpy(out, tmp, stored);
	else if (r->enc == ENC_LZ4 &&
		 LZ4_decompress_safe(tmp, out, (int)stored, (int)raw) !=
			 (int)raw)
		r->state = REF_LZ4_BAD;
}

/* Check one read of [off, off+len) that returned @rc into @got. */
static void check_read(const char *what, int rc, const char *got,
		       uint64_t off, size_t len, const char *expect,
		       const struct ref_chunk *ref, uint32_t cs,
		       unsigned long logs_before, const char *path)
{
	bool bad = false, lz4_bad = false;

	for (uint64_t i = off / cs; i <= (off + len - 1) / cs; i++) {
		bad |= ref[i].state == REF_BAD;
		lz4_bad |= ref[i].state == REF_LZ4_BAD;
	}
	FUZZ_CHECK(rc == 0 || rc == -EIO, "%s: rc %d", what, rc);
	if (rc == -EIO) {
		FUZZ_CHECK(bad || lz4_bad, "%s [%lu, +%zu): -EIO on a good file",
			   what, (unsigned long)off, len);
		FUZZ_CHECK(nlogs > logs_before && strstr(last_log, path),
			   "%s: -EIO without a log line naming '%s' (last: %s)",
			   what, path, last_log);
		return;
	}
	FUZZ_CHECK(!bad, "%s [%lu, +%zu): read a corrupted chunk as good",
		   what, (unsigned long)off, len);
	/* A block whose CRC was rebuilt may decode partly; no bytes to
	 * expect then, only no crash. */
	if (!lz4_bad)
		FUZZ_CHECK(!memcmp(got, expect + off, len),
			   "%s [%lu, +%zu): wrong bytes", what,
			   (unsigned long)off, len);
}

static void corrupt(struct fuzz_in *in, int fd, uint32_t cs)
{
	unsigned int n = fuzz_u8(in) % 8;
	struct stat st;
	uint8_t b[32];

	while (n--) {
		uint8_t op = fuzz_u8(in);
		uint32_t a = fuzz_u32(in);
		off_t size, off;
		size_t len;

		if (fstat(fd, &st))
			abort();
		size = st.st_size;
		off = (off_t)(a % (uint64_t)(size + 16));
		switch (op % 5) {
		case 0: /* flip the bits of up to 4 bytes */
			len = 1 + fuzz_u8(in) % 4;
			memset(b, 0, sizeof(b));
			if (pread(fd, b, len, off) < 0)
				abort();
			for (size_t k = 0; k < len; k++)
				b[k] ^= fuzz_u8(in) | 1;
			if (pwrite(fd, b, len, off) != (ssize_t)len)
				abort();
			break;
		case 1: /* overwrite with the input's bytes */
			len = fuzz_bytes(in, b, 1 + fuzz_u8(in) % sizeof(b));
			if (len && pwrite(fd, b, len, off) != (ssize_t)len)
				abort();
			break;
		case 2:
			if (ftruncate(fd, off))
				abort();
			break;
		case 3:
			len = 1 + fuzz_u32(in) % (2 * (cs + BLK));
			fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				  off, (off_t)len);
			break;
		default: { /* one slot copied over another */
			uint64_t from = a % MAXCH, to = fuzz_u8(in) % MAXCH;
			char *slot = malloc(cs + BLK);
			ssize_t got;

			if (!slot)
				abort();
			got = pread(fd, slot, cs + BLK, (off_t)(from * (cs + BLK)));
			if (got > 0 && pwrite(fd, slot, (size_t)got,
					      (off_t)(to * (cs + BLK))) != got)
				abort();
			free(slot);
			break;
		}
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_in in = { data, size };
	uint8_t sel = fuzz_u8(&in);
	struct tier_disk *d = disks[sel & 3].d;
	uint32_t cs = disks[sel & 3].cs;
	size_t total = (size_t)MAXCH * cs;
	struct ref_chunk ref[MAXCH] = { 0 };
	char *model = calloc(1, total), *got = malloc(total);
	char *tmp = malloc(cs + HDR), *refbuf = malloc(total);
	struct tier_dobj *o = NULL;
	const char *path;
	int fd = -1, rc;

	if (!model || !got || !tmp || !refbuf)
		abort();
	if (tier_dobj_create(d, next_id++, &o))
		goto out;
	path = tier_dobj_path(o);

	/* Build it, keeping a model of what each chunk holds. */
	for (unsigned int w = 1 + fuzz_u8(&in) % 6; w--;) {
		uint8_t op = fuzz_u8(&in), l = fuzz_u8(&in);
		uint64_t idx = fuzz_u8(&in) % MAXCH;
		size_t len = l >= 128 ? cs : 1 + (size_t)fuzz_u32(&in) % cs;
		unsigned int n = op % 8 == 4 ? 2 + (op >> 3) % 2 : 1;

		if (op % 8 == 5) {
			uint64_t keep = fuzz_u8(&in) % (MAXCH + 1);

			if (tier_dobj_truncate(d, o, keep))
				goto out;
			memset(model + keep * cs, 0, (MAXCH - keep) * cs);
			for (uint64_t i = keep; i < MAXCH; i++)
				ref[i].present = false;
			continue;
		}
		if (idx + n > MAXCH)
			idx = MAXCH - n;
		const void *srcs[3];
		size_t lens[3];

		for (unsigned int k = 0; k < n; k++) {
			char *c = model + (idx + k) * cs;

			memset(c, 0, cs);
			fill(&in, op >> 4, c, len);
			srcs[k] = c;
			lens[k] = len;
			ref[idx + k].present = true;
		}
		rc = n == 1 ? tier_dobj_write_chunk(d, o, idx, srcs[0], len) :
			      tier_dobj_write_chunks(d, o, idx, srcs, lens, n);
		if (rc)
			goto out; /* the host ran out of room: not a finding */
	}
	rc = tier_dobj_read(d, o, got, total, 0);
	FUZZ_CHECK(rc == 0, "clean read: %d (%s)", rc, last_log);
	FUZZ_CHECK(!memcmp(got, model, total), "clean read: wrong bytes");

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		abort();
	/* What the tier's meta words hold: the encoding and length of what
	 * it wrote, which the independent reader must agree with. */
	for (uint64_t i = 0; i < MAXCH; i++) {
		uint8_t h[HDR];

		if (!ref[i].present)
			continue;
		FUZZ_CHECK(pread(fd, h, HDR, (off_t)(i * (cs + BLK))) == HDR,
			   "chunk %lu: no header", (unsigned long)i);
		ref[i].enc = h[5];
		ref[i].stored = get32(h + 12);
		ref_chunk(fd, cs, i, &ref[i], refbuf + i * cs, tmp);
		FUZZ_CHECK(ref[i].state == REF_OK &&
				   !memcmp(refbuf + i * cs, model + i * cs, cs),
			   "chunk %lu as written does not read back by the "
			   "format", (unsigned long)i);
	}

	corrupt(&in, fd, cs);
	for (uint64_t i = 0; i < MAXCH; i++)
		ref_chunk(fd, cs, i, &ref[i], refbuf + i * cs, tmp);

	unsigned long before = nlogs;

	rc = tier_dobj_read(d, o, got, total, 0);
	check_read("whole", rc, got, 0, total, refbuf, ref, cs, before, path);

	void *dsts[MAXCH];
	size_t lens[MAXCH];

	for (int i = 0; i < MAXCH; i++) {
		dsts[i] = got + (size_t)i * cs;
		lens[i] = cs;
	}
	before = nlogs;
	rc = tier_dobj_read_chunks(d, o, 0, dsts, lens, MAXCH);
	check_read("chunks", rc, got, 0, total, refbuf, ref, cs, before, path);

	for (int r = 0; r < 3; r++) {
		uint64_t off = fuzz_u32(&in) % total;
		size_t len = 1 + fuzz_u32(&in) % (total - off);

		before = nlogs;
		rc = tier_dobj_read(d, o, got, len, off);
		check_read("range", rc, got, off, len, refbuf, ref, cs, before,
			   path);
	}
out:
	if (fd >= 0)
		close(fd);
	tier_dobj_destroy(d, o);
	free(model);
	free(got);
	free(tmp);
	free(refbuf);
	return 0;
}
