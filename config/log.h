/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * One logging macro for the whole daemon. The level is checked before the
 * arguments are evaluated; messages go to one destination, which fs/ also
 * points fuse_log() at, so that libfuse and tierfs share it: standard
 * error, the systemd journal, a file or syslog (tfs_log_pick()).
 *
 * Messages follow git's guidelines: lowercase, what failed first, the object
 * in quotes, no full stop.
 */
#ifndef TFS_LOG_H
#define TFS_LOG_H

#include <stdarg.h>
#include <stdbool.h>

/* Where a daemon without syslog or a log file writes. */
#define TFS_DEFAULT_LOG "/var/log/tierfs.log"

enum tfs_log_level {
	TFS_LOG_ERR = 3,
	TFS_LOG_WARNING = 4,
	TFS_LOG_NOTICE = 5,
	TFS_LOG_INFO = 6,
	TFS_LOG_DEBUG = 7,
};

enum tfs_log_dest {
	TFS_LOG_STDERR, /* "tierfs: MSG" (the default) */
	TFS_LOG_JOURNAL, /* "<LEVEL>MSG": stderr is a journald stream */
	TFS_LOG_FILE, /* "TIME tierfs[PID]: TAG: MSG", see tfs_log_open() */
	TFS_LOG_SYSLOG, /* syslog(3) "TAG: MSG", ident "tierfs", facility
			 * daemon */
	TFS_LOG_NONE, /* nowhere: a daemon that has nowhere to write */
};

typedef void (*tfs_log_sink_fn)(enum tfs_log_level level, const char *fmt,
				va_list ap);

extern enum tfs_log_level tfs_log_max;

/*
 * Route messages to @sink instead of the destination (NULL restores it);
 * for tests that capture what is logged.
 */
void tfs_log_set_sink(tfs_log_sink_fn sink);

/*
 * Where a process should log, from its environment:
 *   a log file when @have_file (the operator asked for one);
 *   the journal when $JOURNAL_STREAM names the file standard error is
 *   (systemd connected it to journald);
 *   standard error when $INVOCATION_ID is set (a systemd service whose
 *   output goes elsewhere) or when not @daemon;
 *   syslog when a daemon finds a syslog socket at /dev/log;
 *   else TFS_LOG_FILE too, meaning TFS_DEFAULT_LOG.
 */
enum tfs_log_dest tfs_log_pick(bool daemon, bool have_file);

/*
 * Open @path for appending (created 0640) as root may: never through a
 * symlink (O_NOFOLLOW, on every reopen too), a regular file of the
 * daemon's user (or root) with one name only, in a directory that no
 * other user may write unless it is sticky (as logrotate asks; -EPERM
 * otherwise). Returns the descriptor or -errno, with why in @why (may be
 * NULL; a sentence naming the file, "" on success).
 */
int tfs_log_file_open(const char *path, char *why, size_t len);

/*
 * Open @path as tfs_log_file_open() does, as the log file. When one is
 * open already it is replaced in place, atomically for writers, so that
 * SIGHUP can reopen a file that logrotate moved away. Returns 0 or -errno
 * with why in @why; on error the file open before stays.
 */
int tfs_log_open(const char *path, char *why, size_t len);

/*
 * Start every line that goes to a log file or to syslog with "@tag: " (the
 * mount point: several daemons of a node share those; NULL or "" for
 * none). Standard error and the journal, one daemon's own, get no tag.
 * Call before any thread logs.
 */
void tfs_log_set_tag(const char *tag);

/* Send messages to @dest from now on (TFS_LOG_FILE needs tfs_log_open()). */
void tfs_log_use(enum tfs_log_dest dest);

enum tfs_log_dest tfs_log_dest(void);

/* One message at @level to the destination; trailing newlines dropped. */
void tfs_log_vemit(enum tfs_log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

void tfs_log_emit(enum tfs_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define tfs_log(level, ...)                                   \
	do {                                                  \
		if ((level) <= tfs_log_max)                   \
			tfs_log_emit((level), __VA_ARGS__);   \
	} while (0)

/*
 * A notice the person who started tierfs should see now, not only in the
 * log: a wait at start-up, say. It goes to the log, and to @fn when one is
 * set (fs/ sends it to the terminal a daemon has not detached from yet).
 */
typedef void (*tfs_tell_fn)(const char *msg);
void tfs_log_set_tell(tfs_tell_fn fn);
void tfs_tell(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define tfs_err(...) tfs_log(TFS_LOG_ERR, __VA_ARGS__)
#define tfs_warn(...) tfs_log(TFS_LOG_WARNING, __VA_ARGS__)
#define tfs_notice(...) tfs_log(TFS_LOG_NOTICE, __VA_ARGS__)
#define tfs_info(...) tfs_log(TFS_LOG_INFO, __VA_ARGS__)
#define tfs_debug(...) tfs_log(TFS_LOG_DEBUG, __VA_ARGS__)

#endif
