/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What config.c (the key table, file and options), parse.c (the value
 * parsers) and validate.c (cross-key checks) share; not for other code.
 */
#ifndef TFS_CONFIG_INT_H
#define TFS_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

enum cfg_type {
	CFG_CHOICE_STR, /* one of choices[], copied into a char array */
	CFG_CHOICE_ENUM, /* one of choices[], stored as its index (an enum) */
	CFG_BOOL,
	CFG_INT, /* int, min..max */
	CFG_UINT, /* unsigned int, min..max */
	CFG_SIZE, /* struct cfg_size */
	CFG_SIZE32, /* uint32_t bytes, min..max */
	CFG_FRACTION, /* double, 0 < x <= 1 */
	CFG_PATH, /* char *, owned by the config */
	CFG_GPUS, /* struct cfg_gpus */
	CFG_NAME, /* a char array: 1 to size - 1 of [A-Za-z0-9._-], no
		   * leading dot (it becomes part of a file name) */
};

#define CFG_F_PERCENT 0x1u /* a size may be a percentage */
#define CFG_F_NONZERO 0x2u /* a size of zero makes no sense */
#define CFG_F_POW2 0x4u /* a size must be a power of two */
/* A size that a bare number of bytes this small is surely a slip for
 * ("host_limit=50" meant 50G): refused with the suffix it lacks. */
#define CFG_F_AMOUNT 0x8u

struct cfg_key {
	const char *section;
	const char *name;
	enum cfg_type type;
	unsigned int flags;
	size_t offset;
	size_t size; /* of the field, for CFG_CHOICE_STR */
	const char *const *choices; /* NULL-terminated */
	uint64_t min, max;
	const char *def; /* parsed by cfg_defaults(); NULL leaves zero */
	const char *arg; /* what --help shows after '=' */
	const char *help;
};

#define FIELD(s, m)                             \
	.offset = offsetof(struct tfs_config, s.m), \
	.size = sizeof(((struct tfs_config *)0)->s.m)


/* Values of tfs_config.origin besides a line of the config file. */
#define ORIGIN_DEFAULT 0u
#define ORIGIN_SET (UINT32_MAX - 1) /* cfg_set() outside a file */
#define ORIGIN_OPTION UINT32_MAX

/* Format into @buf (nothing when it is NULL or empty). */
__attribute__((format(printf, 3, 4))) void say(char *buf, size_t len,
					       const char *fmt, ...);
/* The key table's row for @section / @name, case-insensitive; NULL if none. */
const struct cfg_key *find_key(const char *section, const char *name);
/* @k's index in the key table, and so in tfs_config.origin[]. */
size_t key_index(const struct cfg_key *k);
/* "FILE:LINE: key", "-o section_key" or "section_key" for @k's origin. */
void key_where(const struct tfs_config *cfg, const struct cfg_key *k,
	       char *buf, size_t len);

/*
 * The value parsers: 0, or -EINVAL with "what is wrong" in @why, starting
 * with the value in quotes; @out is untouched on error.
 */
int parse_size(const char *s, bool allow_percent, struct cfg_size *out,
	       char *why, size_t whylen);
int parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out,
	       char *why, size_t whylen);
int parse_fraction(const char *s, double *out, char *why, size_t whylen);
int parse_bool(const char *s, bool *out, char *why, size_t whylen);
int parse_path(const char *s, char **out, char *why, size_t whylen);
int parse_gpus(const char *s, struct cfg_gpus *out, char *why, size_t whylen);

/* tiers.c: the [tiers] entries. tiers_set_at() sets one as cfg_tier_set()
 * does, remembering @origin, with "what is wrong" alone in @why;
 * tiers_clear() frees them all; tier_where() is key_where() for one. */
int tiers_set_at(struct tfs_config *cfg, const char *name, const char *spec,
		 uint32_t origin, char *why, size_t whylen);
void tiers_clear(struct tfs_config *cfg);
void tier_where(const struct tfs_config *cfg, const struct cfg_tier *t,
		char *buf, size_t len);

/* The highest GPU ordinal [device] gpus takes. */
#define CFG_GPU_ORD_MAX 255

#endif
