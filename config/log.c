// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The log's destinations. Each message is formatted into one buffer and
 * written with one write(2), so that lines of concurrent threads, and of
 * several daemons sharing a file opened O_APPEND, never interleave.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "config/log.h"

enum tfs_log_level tfs_log_max = TFS_LOG_NOTICE;

static tfs_log_sink_fn log_sink;
static _Atomic enum tfs_log_dest log_dest = TFS_LOG_STDERR;
/* The log file; replaced by dup2() so that writers never see it closed. */
static int log_fd = -1;
static bool syslog_open;
/* "MOUNTPOINT: ", or "": what starts a line in a log daemons share. */
static char log_tag[512];

void tfs_log_set_sink(tfs_log_sink_fn sink)
{
	log_sink = sink;
}

/*
 * systemd sets JOURNAL_STREAM to "DEV:INO" of the stream it connected to
 * journald; it is inherited by children whose stderr may go elsewhere, so
 * it only counts when it names our stderr.
 */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st))
		return false;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

static bool have_syslog(void)
{
	struct stat st;

	return !stat("/dev/log", &st) && S_ISSOCK(st.st_mode);
}

enum tfs_log_dest tfs_log_pick(bool daemon, bool have_file)
{
	if (have_file)
		return TFS_LOG_FILE;
	if (stderr_is_journal())
		return TFS_LOG_JOURNAL;
	if (getenv("INVOCATION_ID") || !daemon)
		return TFS_LOG_STDERR;
	if (have_syslog())
		return TFS_LOG_SYSLOG;
	return TFS_LOG_FILE;
}

/* say() for @why, which may be NULL. */
static void why_say(char *why, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void why_say(char *why, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (!why || !len)
		return;
	va_start(ap, fmt);
	vsnprintf(why, len, fmt, ap);
	va_end(ap);
}

int tfs_log_file_open(const char *path, char *why, size_t len)
{
	const char *dir = ".", *base = path, *slash = strrchr(path, '/');
	char *copy = NULL;
	struct stat st;
	int dfd, fd, rc = 0, e;

	why_say(why, len, "%s", "");
	if (slash) {
		copy = strndup(path, slash > path ? (size_t)(slash - path) : 1);
		if (!copy)
			return -ENOMEM;
		dir = copy;
		base = slash + 1;
	}
	if (!*base) {
		why_say(why, len, "'%s' names a directory", path);
		free(copy);
		return -EISDIR;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		e = errno;
		why_say(why, len, "cannot open '%s': %s", path, strerror(e));
		free(copy);
		return -e;
	}
	/*
	 * Whoever may rename the directory's entries may swap the log for a
	 * link to any file between two opens: logrotate refuses such a
	 * directory too. Sticky is fine, where only an entry's owner (or
	 * the directory's) may rename it.
	 */
	if (fstat(dfd, &st)) {
		rc = -errno;
		why_say(why, len, "cannot open '%s': %s", path, strerror(-rc));
	} else if (st.st_uid && st.st_uid != geteuid()) {
		why_say(why, len, "refusing '%s': its directory '%s' belongs "
			"to uid %u, who could replace the log with a link",
			path, dir, (unsigned int)st.st_uid);
		rc = -EPERM;
	} else if (((st.st_mode & S_IWOTH) ||
		    ((st.st_mode & S_IWGRP) && st.st_gid)) &&
		   !(st.st_mode & S_ISVTX)) {
		why_say(why, len, "refusing '%s': other users may write its "
			"directory '%s', which is not sticky, and could "
			"replace the log with a link", path, dir);
		rc = -EPERM;
	}
	free(copy);
	if (rc) {
		close(dfd);
		return rc;
	}
	/* No symlink, and no FIFO to stall on: a regular file of ours. */
	if (!fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) &&
	    !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
		why_say(why, len, "refusing '%s': not a regular file", path);
		close(dfd);
		return -EINVAL;
	}
	fd = openat(dfd, base, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW |
				       O_NONBLOCK | O_CLOEXEC | O_NOCTTY,
		    0640);
	e = errno;
	close(dfd);
	if (fd < 0) {
		if (e == ELOOP)
			why_say(why, len, "refusing '%s': it is a symlink",
				path);
		else
			why_say(why, len, "cannot open '%s': %s", path,
				strerror(e));
		return -e;
	}
	if (fstat(fd, &st)) {
		e = errno;
	} else if (!S_ISREG(st.st_mode)) {
		why_say(why, len, "refusing '%s': not a regular file", path);
		e = EINVAL;
	} else if (st.st_uid && st.st_uid != geteuid()) {
		why_say(why, len, "refusing '%s': it belongs to uid %u", path,
			(unsigned int)st.st_uid);
		e = EPERM;
	} else if (st.st_nlink > 1) {
		why_say(why, len, "refusing '%s': it has other names (hard "
			"links)", path);
		e = EPERM;
	} else if (fcntl(fd, F_SETFL, O_APPEND) < 0) {
		e = errno;
	} else {
		return fd;
	}
	if (why && !why[0])
		why_say(why, len, "cannot open '%s': %s", path, strerror(e));
	close(fd);
	return -e;
}

int tfs_log_open(const char *path, char *why, size_t len)
{
	int fd, rc = 0;

	fd = tfs_log_file_open(path, why, len);
	if (fd < 0)
		return fd;
	if (log_fd < 0) {
		log_fd = fd;
		return 0;
	}
	if (dup3(fd, log_fd, O_CLOEXEC) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

void tfs_log_set_tag(const char *tag)
{
	if (!tag || !*tag)
		log_tag[0] = '\0';
	else
		snprintf(log_tag, sizeof(log_tag), "%s: ", tag);
}

void tfs_log_use(enum tfs_log_dest dest)
{
	if (dest == TFS_LOG_SYSLOG && !syslog_open) {
		openlog("tierfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		syslog_open = true;
	}
	atomic_store(&log_dest, dest);
}

enum tfs_log_dest tfs_log_dest(void)
{
	return atomic_load(&log_dest);
}

static const char *level_word(enum tfs_log_level level)
{
	switch (level) {
	case TFS_LOG_ERR:
		return "error: ";
	case TFS_LOG_WARNING:
		return "warning: ";
	default:
		return "";
	}
}

static void write_all(int fd, const char *buf, size_t len)
{
	ssize_t n;

	while (len) {
		n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

void tfs_log_vemit(enum tfs_log_level level, const char *fmt, va_list ap)
{
	enum tfs_log_dest dest = atomic_load(&log_dest);
	char msg[2048], line[2800], stamp[40];
	struct timespec ts;
	struct tm tm;
	size_t n;
	int len;

	if (log_sink) {
		log_sink(level, fmt, ap);
		return;
	}
	if (dest == TFS_LOG_NONE)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* libfuse ends its messages with a newline, tierfs does not. */
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	switch (dest) {
	case TFS_LOG_SYSLOG:
		syslog((int)level, "%s%s", log_tag, msg);
		return;
	case TFS_LOG_JOURNAL:
		len = snprintf(line, sizeof(line), "<%d>%s\n", (int)level,
			       msg);
		break;
	case TFS_LOG_FILE:
		clock_gettime(CLOCK_REALTIME, &ts);
		localtime_r(&ts.tv_sec, &tm);
		strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S%z", &tm);
		len = snprintf(line, sizeof(line), "%s tierfs[%ld]: %s%s%s\n",
			       stamp, (long)getpid(), log_tag,
			       level_word(level), msg);
		break;
	default:
		len = snprintf(line, sizeof(line), "tierfs: %s\n", msg);
		break;
	}
	if (len < 0)
		return;
	if ((size_t)len >= sizeof(line)) {
		len = sizeof(line) - 1;
		line[len - 1] = '\n';
	}
	write_all(dest == TFS_LOG_FILE ? log_fd : STDERR_FILENO, line,
		  (size_t)len);
}

void tfs_log_emit(enum tfs_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	tfs_log_vemit(level, fmt, ap);
	va_end(ap);
}

static tfs_tell_fn tell_fn;

void tfs_log_set_tell(tfs_tell_fn fn)
{
	tell_fn = fn;
}

void tfs_tell(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tfs_log(TFS_LOG_NOTICE, "%s", msg);
	if (tell_fn)
		tell_fn(msg);
}
