// SPDX-License-Identifier: GPL-2.0-or-later
#include <stdio.h>

#include "config/log.h"

enum tfs_log_level tfs_log_max = TFS_LOG_NOTICE;

static void stderr_sink(enum tfs_log_level level, const char *fmt, va_list ap)
{
	fputs("tierfs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static tfs_log_sink_fn log_sink = stderr_sink;

void tfs_log_set_sink(tfs_log_sink_fn sink)
{
	log_sink = sink ? sink : stderr_sink;
}

void tfs_log_emit(enum tfs_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_sink(level, fmt, ap);
	va_end(ap);
}
