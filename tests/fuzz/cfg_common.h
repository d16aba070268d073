/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What every struct tfs_config that config/ accepted must satisfy, whatever
 * the input: the rest of the daemon trusts it without checking again.
 */
#ifndef TFS_FUZZ_CFG_COMMON_H
#define TFS_FUZZ_CFG_COMMON_H

#include <errno.h>
#include <string.h>

#include "config/config.h"
#include "fuzz.h"

static inline void cfg_check_size(const struct cfg_size *sz, bool zero_ok,
				  const char *what)
{
	if (sz->is_percent)
		FUZZ_CHECK(sz->percent > 0.0 && sz->percent <= 100.0,
			   "%s: percent %g", what, sz->percent);
	else
		FUZZ_CHECK(zero_ok || sz->bytes, "%s: zero bytes", what);
}

static inline void cfg_check_valid(const struct tfs_config *c)
{
	static const char *const backends[] = { "auto", "cuda", "sim",
						"none" };
	bool ok = false;

	FUZZ_CHECK(memchr(c->device.backend, 0, sizeof(c->device.backend)),
		   "backend not terminated");
	for (size_t i = 0; i < 4; i++)
		ok |= !strcmp(c->device.backend, backends[i]);
	FUZZ_CHECK(ok, "backend '%s'", c->device.backend);
	FUZZ_CHECK(!strcmp(c->policy.eviction, "lru"), "eviction '%.16s'",
		   c->policy.eviction);
	FUZZ_CHECK(c->device.gpu >= 0, "gpu %d", c->device.gpu);
	/* gpus: "all" alone, or up to CFG_MAX_GPUS ordinals, each once */
	FUZZ_CHECK(!c->device.gpus.all || !c->device.gpus.n, "gpus all and %u",
		   c->device.gpus.n);
	FUZZ_CHECK(c->device.gpus.n <= CFG_MAX_GPUS, "gpus n %u",
		   c->device.gpus.n);
	for (unsigned int i = 0; i < c->device.gpus.n; i++) {
		FUZZ_CHECK(c->device.gpus.ord[i] >= 0 &&
				   c->device.gpus.ord[i] <= 255,
			   "gpus ord %d", c->device.gpus.ord[i]);
		for (unsigned int j = 0; j < i; j++)
			FUZZ_CHECK(c->device.gpus.ord[i] !=
					   c->device.gpus.ord[j],
				   "gpu %d listed twice", c->device.gpus.ord[i]);
	}
	cfg_check_size(&c->device.limit, true, "device.limit");
	/* bytes 0 is "derive from the machine"; a written 0 is refused */
	cfg_check_size(&c->host.limit, true, "host.limit");
	cfg_check_size(&c->disk.limit, true, "disk.limit");
	FUZZ_CHECK(c->disk.path && c->disk.path[0] == '/', "disk.path '%s'",
		   c->disk.path ? c->disk.path : "(null)");
	FUZZ_CHECK(c->disk.compression == CFG_COMPRESS_LZ4 ||
			   c->disk.compression == CFG_COMPRESS_NONE,
		   "compression %d", (int)c->disk.compression);
	FUZZ_CHECK(c->disk.chunk_size >= 64 * 1024 &&
			   c->disk.chunk_size <= 64 * 1024 * 1024 &&
			   !(c->disk.chunk_size & (c->disk.chunk_size - 1)),
		   "chunk_size %u", c->disk.chunk_size);
	FUZZ_CHECK(c->policy.unspill >= CFG_UNSPILL_DEVICE &&
			   c->policy.unspill <= CFG_UNSPILL_NONE,
		   "unspill %d", (int)c->policy.unspill);
	FUZZ_CHECK(c->policy.high_watermark > 0 && c->policy.high_watermark <= 1,
		   "high_watermark %g", c->policy.high_watermark);
	FUZZ_CHECK(c->policy.target > 0 && c->policy.target <= 1, "target %g",
		   c->policy.target);
	FUZZ_CHECK(c->fs.threads <= 256, "threads %u", c->fs.threads);
	FUZZ_CHECK(c->fs.read_ahead_kb <= 65536, "read_ahead_kb %u",
		   c->fs.read_ahead_kb);
}

/*
 * An error message is there, terminated inside the buffer, and starts with
 * @prefix (the file, or "-o "), so that the operator knows where to look.
 * Its case is not checked: after the prefix comes the key as typed.
 */
static inline void cfg_check_msg(const char *err, size_t cap,
				 const char *prefix)
{
	size_t n = strnlen(err, cap), pl = strlen(prefix);

	FUZZ_CHECK(n < cap, "message not terminated");
	FUZZ_CHECK(n > pl, "empty message '%s'", err);
	FUZZ_CHECK(!strncmp(err, prefix, pl), "'%s' does not start with '%s'",
		   err, prefix);
}

#endif
