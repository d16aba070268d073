/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * One logging macro for the whole daemon. The level is checked before the
 * arguments are evaluated; messages go to a sink that fs/ points at
 * fuse_log() so that libfuse and tierfs share stderr or syslog.
 *
 * Messages follow git's guidelines: lowercase, what failed first, the object
 * in quotes, no full stop.
 */
#ifndef TFS_LOG_H
#define TFS_LOG_H

#include <stdarg.h>

enum tfs_log_level {
	TFS_LOG_ERR = 3,
	TFS_LOG_WARNING = 4,
	TFS_LOG_NOTICE = 5,
	TFS_LOG_INFO = 6,
	TFS_LOG_DEBUG = 7,
};

typedef void (*tfs_log_sink_fn)(enum tfs_log_level level, const char *fmt,
				va_list ap);

extern enum tfs_log_level tfs_log_max;

/* Route messages to @sink (NULL restores the stderr default). */
void tfs_log_set_sink(tfs_log_sink_fn sink);

void tfs_log_emit(enum tfs_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define tfs_log(level, ...)                                   \
	do {                                                  \
		if ((level) <= tfs_log_max)                   \
			tfs_log_emit((level), __VA_ARGS__);   \
	} while (0)

#define tfs_err(...) tfs_log(TFS_LOG_ERR, __VA_ARGS__)
#define tfs_warn(...) tfs_log(TFS_LOG_WARNING, __VA_ARGS__)
#define tfs_notice(...) tfs_log(TFS_LOG_NOTICE, __VA_ARGS__)
#define tfs_info(...) tfs_log(TFS_LOG_INFO, __VA_ARGS__)
#define tfs_debug(...) tfs_log(TFS_LOG_DEBUG, __VA_ARGS__)

#endif
