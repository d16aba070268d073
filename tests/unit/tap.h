/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A tiny TAP producer for the unit tests. Each test is a function; CHECK()
 * records a failure with its line and keeps going, so one run shows every
 * broken expectation.
 *
 *	static void test_thing(void) { CHECK(1 + 1 == 2); }
 *	int main(void) { TAP_RUN(test_thing); return tap_done(); }
 */
#ifndef TFS_TAP_H
#define TFS_TAP_H

#include <stdbool.h>

extern int tap_failed_checks;

void tap_check_fail(const char *file, int line, const char *expr);
void tap_run(const char *name, void (*fn)(void));
void tap_skip(const char *name, const char *why);
/* Print the plan and return the exit status. */
int tap_done(void);

#define CHECK(expr)                                                  \
	do {                                                         \
		if (!(expr))                                         \
			tap_check_fail(__FILE__, __LINE__, #expr);   \
	} while (0)

#define CHECK_EQ(a, b)                                                       \
	do {                                                                 \
		long long _a = (long long)(a), _b = (long long)(b);          \
		if (_a != _b) {                                              \
			char _m[256];                                        \
			snprintf(_m, sizeof(_m), "%s == %s (%lld != %lld)",  \
				 #a, #b, _a, _b);                            \
			tap_check_fail(__FILE__, __LINE__, _m);              \
		}                                                            \
	} while (0)

#define TAP_RUN(fn) tap_run(#fn, fn)

#endif
