/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Private to persist/: the on-disk layouts that the writer (journal.c) and
 * the reader (image.c) share.
 */
#ifndef TFS_PERSIST_PJ_I_H
#define TFS_PERSIST_PJ_I_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "persist/persist.h"

#define PJ_MAGIC_JOURNAL "tfsjrnl"
#define PJ_MAGIC_SNAP "tfssnap"
#define PJ_SNAP_PREFIX "snap."
#define PJ_JOURNAL_PREFIX "journal."
#define PJ_TMP_SUFFIX ".tmp"

/* Both kinds of file start with this. */
struct pj_file_hdr {
	char magic[8]; /* NUL-padded */
	uint32_t version;
	uint32_t chunk_size;
	uint64_t generation;
	uint64_t seq; /* snapshot: the last record it holds; journal: the
		       * sequence number before its first record */
	int64_t time; /* written, seconds since the epoch */
	uint64_t body_bytes; /* snapshot: bytes after the header; journal: 0 */
	uint32_t reserved;
	uint32_t crc; /* of everything before it */
};
_Static_assert(sizeof(struct pj_file_hdr) == 56, "file header layout");

struct pj_rec_hdr {
	uint32_t len; /* bytes of items after this header */
	uint32_t crc; /* CRC32C of the items, continued over seq */
	uint64_t seq;
};
_Static_assert(sizeof(struct pj_rec_hdr) == 16, "record header layout");

struct pj_item_hdr {
	uint16_t type;
	uint16_t zero;
	uint32_t len;
};
_Static_assert(sizeof(struct pj_item_hdr) == 8, "item header layout");

/* No record may claim more: it bounds what a corrupted length can make
 * the reader believe. A chunk table of 12 bytes per chunk fits a dense
 * 40 GiB file at 1 MiB chunks per 480 KiB. */
#define PJ_REC_MAX (1u << 30)

/* Fixed part of each item's payload. */
#define PJ_ATTR_FIXED 104
#define PJ_DATA_FIXED 64
#define PJ_DSET_FIXED 24
#define PJ_DDEL_FIXED 16
#define PJ_META_FIXED 24

uint32_t pj_crc(uint32_t crc, const void *buf, size_t len);
/* The record CRC: of the items, then of the sequence number. */
uint32_t pj_rec_crc(const void *items, size_t len, uint64_t seq);
uint32_t pj_hdr_crc(const struct pj_file_hdr *h);

static inline void pj_put16(char *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static inline void pj_put32(char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void pj_put64(char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static inline uint16_t pj_get16(const char *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static inline uint32_t pj_get32(const char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t pj_get64(const char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

/* Header fields in and out of their little-endian layout. */
void pj_hdr_encode(struct pj_file_hdr *h);
void pj_hdr_decode(struct pj_file_hdr *h);

#endif
