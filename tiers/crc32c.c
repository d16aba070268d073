// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78) for the disk tier's
 * chunk checksums.
 *
 * The SSE4.2 crc32 instruction has a latency of three cycles and a
 * throughput of one, so a single dependency chain runs at a third of what
 * the unit can do. Large buffers are therefore cut into three interleaved
 * streams whose CRCs are merged with a precomputed "append n zero bytes"
 * operator (a linear map on the 32-bit register, applied through four byte
 * tables). The portable fallback is slicing-by-8.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tiers/disk.h"

#define CRC32C_POLY 0x82F63B78u

/* Bytes per stream in one round of the three-way loop. */
#define STREAM_LEN 4096u

static uint32_t sw_table[8][256];
/* shift_l[k][b]: the register b << 8k advanced over STREAM_LEN zero bytes. */
static uint32_t shift_l[4][256];
static uint32_t shift_2l[4][256];
static bool hw_ok;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static uint32_t load32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t load64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Register update without the pre/post inversion. */
static uint32_t sw_update(uint32_t c, const uint8_t *p, size_t n)
{
	while (n && ((uintptr_t)p & 7)) {
		c = sw_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
		n--;
	}
	while (n >= 8) {
		uint32_t lo = load32(p) ^ c, hi = load32(p + 4);

		c = sw_table[7][lo & 0xff] ^ sw_table[6][(lo >> 8) & 0xff] ^
		    sw_table[5][(lo >> 16) & 0xff] ^ sw_table[4][lo >> 24] ^
		    sw_table[3][hi & 0xff] ^ sw_table[2][(hi >> 8) & 0xff] ^
		    sw_table[1][(hi >> 16) & 0xff] ^ sw_table[0][hi >> 24];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = sw_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
	return c;
}

static uint32_t shift_apply(uint32_t t[4][256], uint32_t v)
{
	return t[0][v & 0xff] ^ t[1][(v >> 8) & 0xff] ^
	       t[2][(v >> 16) & 0xff] ^ t[3][v >> 24];
}

/* Fill @t from the images of the 32 unit vectors (the map is linear). */
static void shift_fill(uint32_t t[4][256], const uint32_t basis[32])
{
	for (int k = 0; k < 4; k++) {
		for (int b = 0; b < 256; b++) {
			uint32_t v = 0;

			for (int i = 0; i < 8; i++)
				if (b & (1 << i))
					v ^= basis[8 * k + i];
			t[k][b] = v;
		}
	}
}

static void crc_init(void)
{
	static const uint8_t zeros[STREAM_LEN];
	uint32_t basis[32];

	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1)));
		sw_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			sw_table[t][i] = (sw_table[t - 1][i] >> 8) ^
					 sw_table[0][sw_table[t - 1][i] & 0xff];

	for (int i = 0; i < 32; i++)
		basis[i] = sw_update(1u << i, zeros, sizeof(zeros));
	shift_fill(shift_l, basis);
	for (int i = 0; i < 32; i++)
		basis[i] = shift_apply(shift_l, basis[i]);
	shift_fill(shift_2l, basis);

#if defined(__x86_64__)
	__builtin_cpu_init();
	hw_ok = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t
hw_update(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c0 = c;

	while (n && ((uintptr_t)p & 7)) {
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
		n--;
	}
	while (n >= 3 * STREAM_LEN) {
		const uint8_t *a = p, *b = p + STREAM_LEN, *e = b + STREAM_LEN;
		uint64_t c1 = 0, c2 = 0;

		for (size_t i = 0; i < STREAM_LEN; i += 8) {
			c0 = __builtin_ia32_crc32di(c0, load64(a + i));
			c1 = __builtin_ia32_crc32di(c1, load64(b + i));
			c2 = __builtin_ia32_crc32di(c2, load64(e + i));
		}
		c0 = shift_apply(shift_2l, (uint32_t)c0) ^
		     shift_apply(shift_l, (uint32_t)c1) ^ (uint32_t)c2;
		p += 3 * STREAM_LEN;
		n -= 3 * STREAM_LEN;
	}
	while (n >= 8) {
		c0 = __builtin_ia32_crc32di(c0, load64(p));
		p += 8;
		n -= 8;
	}
	while (n--)
		c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
	return (uint32_t)c0;
}
#endif

uint32_t tfs_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
	return ~sw_update(~crc, buf, len);
}

bool tfs_crc32c_hw_supported(void)
{
	pthread_once(&crc_once, crc_init);
	return hw_ok;
}

uint32_t tfs_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
	if (hw_ok)
		return ~hw_update(~crc, buf, len);
#endif
	return ~sw_update(~crc, buf, len);
}

uint32_t tfs_crc32c(uint32_t crc, const void *buf, size_t len)
{
	pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
	if (hw_ok)
		return ~hw_update(~crc, buf, len);
#endif
	return ~sw_update(~crc, buf, len);
}
