// SPDX-License-Identifier: GPL-2.0-or-later
#include <stdio.h>

#include "tap.h"

int tap_failed_checks;
static int n_tests, n_failed;

void tap_check_fail(const char *file, int line, const char *expr)
{
	printf("#   %s:%d: check failed: %s\n", file, line, expr);
	fflush(stdout);
	tap_failed_checks++;
}

void tap_run(const char *name, void (*fn)(void))
{
	int before = tap_failed_checks;

	fn();
	n_tests++;
	if (tap_failed_checks != before) {
		n_failed++;
		printf("not ok %d - %s\n", n_tests, name);
	} else {
		printf("ok %d - %s\n", n_tests, name);
	}
	fflush(stdout);
}

void tap_skip(const char *name, const char *why)
{
	n_tests++;
	printf("ok %d - %s # SKIP %s\n", n_tests, name, why);
}

int tap_done(void)
{
	printf("1..%d\n", n_tests);
	return n_failed ? 1 : 0;
}
