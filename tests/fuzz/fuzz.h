/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Shared by the libFuzzer targets in tests/fuzz: a check that turns a broken
 * contract into a crash libFuzzer keeps the input of, and a reader that
 * takes typed values off the front of the input (zeroes once it runs out,
 * so every input is a valid one).
 */
#ifndef TFS_FUZZ_H
#define TFS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A contract the code under test broke: say which, then crash. */
#define FUZZ_CHECK(expr, ...)                                              \
	do {                                                               \
		if (!(expr)) {                                             \
			fprintf(stderr, "%s:%d: check failed: %s: ",       \
				__FILE__, __LINE__, #expr);                \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			abort();                                           \
		}                                                          \
	} while (0)

struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	if (!in->left)
		return 0;
	in->left--;
	return *in->p++;
}

static inline uint32_t fuzz_u32(struct fuzz_in *in)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)fuzz_u8(in) << (8 * i);
	return v;
}

/* Up to @max bytes, as many as are left. */
static inline size_t fuzz_bytes(struct fuzz_in *in, void *dst, size_t max)
{
	size_t n = max < in->left ? max : in->left;

	memcpy(dst, in->p, n);
	in->p += n;
	in->left -= n;
	return n;
}

#endif
