// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Process plumbing: one log sink for tierfs and libfuse, daemonizing with a
 * status pipe, the bdi read-ahead, and the SIGHUP thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs_i.h"

static void fuse_sink(enum fuse_log_level level, const char *fmt, va_list ap)
{
	if ((int)level > (int)tfs_log_max)
		return;
	tfs_log_vemit((enum tfs_log_level)level, fmt, ap);
}

void tfs_log_setup(void)
{
	fuse_set_log_func(fuse_sink);
}

static int ready_fd = -1;

/*
 * What the child says before it is ready (tfs_tell(): a wait at start-up)
 * reaches the terminal the parent still holds: "2MESSAGE\n" on the status
 * pipe, ahead of the final status. A log on stderr has it already.
 */
static void tell_parent(const char *msg)
{
	char buf[2048];
	int len;

	if (ready_fd < 0 || tfs_log_dest() == TFS_LOG_STDERR ||
	    tfs_log_dest() == TFS_LOG_JOURNAL)
		return;
	len = snprintf(buf, sizeof(buf), "2%s", msg);
	if (len >= (int)sizeof(buf))
		len = sizeof(buf) - 1;
	for (int k = 1; k < len; k++)
		if (buf[k] == '\n')
			buf[k] = ' ';
	buf[len++] = '\n';
	if (write(ready_fd, buf, (size_t)len) < 0)
		tfs_debug("cannot tell the parent: %s", strerror(errno));
}

/*
 * The parent stays until the child has mounted, so that "tierfs MNT" in a
 * script or unit returns only once the mount is usable, and fails with the
 * child's reason when it is not.
 */
int tfs_daemonize(void)
{
	char msg[2048], *nl;
	ssize_t n, got = 0;
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int rc = -errno;

		close(p[0]);
		close(p[1]);
		return rc;
	}
	if (pid > 0) {
		close(p[1]);
		while ((size_t)got < sizeof(msg) - 1) {
			n = read(p[0], msg + got, sizeof(msg) - 1 - (size_t)got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			got += n;
			msg[got] = '\0';
			/* Notes first, each a line; the status ends it all. */
			while (msg[0] == '2' && (nl = memchr(msg, '\n',
							      (size_t)got))) {
				fprintf(stderr, "tierfs: %.*s\n",
					(int)(nl - msg - 1), msg + 1);
				got -= nl + 1 - msg;
				memmove(msg, nl + 1, (size_t)got);
			}
		}
		msg[got] = '\0';
		if (got > 0 && msg[0] == '0')
			_exit(0);
		if (got > 1)
			fprintf(stderr, "tierfs: %s\n", msg + 1);
		else if (got == 0)
			fprintf(stderr, "tierfs: daemon exited before mounting\n");
		/* A failed child exits by itself; do not leave a zombie. */
		waitpid(pid, NULL, WNOHANG);
		_exit(1);
	}
	close(p[0]);
	ready_fd = p[1];
	tfs_log_set_tell(tell_parent);
	if (setsid() < 0)
		tfs_warn("setsid failed: %s", strerror(errno));
	return 0;
}

void tfs_daemon_ready(int status, const char *msg)
{
	char buf[2048];
	int fd, len;

	if (ready_fd < 0) {
		if (status && msg)
			fprintf(stderr, "tierfs: %s\n", msg);
		return;
	}
	len = snprintf(buf, sizeof(buf), "%c%s", status ? '1' : '0',
		       msg ? msg : "");
	if (len >= (int)sizeof(buf))
		len = sizeof(buf) - 1;
	if (write(ready_fd, buf, (size_t)len) < 0)
		tfs_warn("cannot report to the parent: %s", strerror(errno));
	tfs_log_set_tell(NULL);
	close(ready_fd);
	ready_fd = -1;
	if (status)
		return;
	if (chdir("/"))
		tfs_warn("cannot chdir to '/': %s", strerror(errno));
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		/* Under systemd, stderr is the log. */
		if (tfs_log_dest() != TFS_LOG_STDERR &&
		    tfs_log_dest() != TFS_LOG_JOURNAL)
			dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
}

void tfs_notify(const char *fmt, ...)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char msg[512];
	size_t plen;
	va_list ap;
	int fd, len;

	if (!path || (path[0] != '/' && path[0] != '@'))
		return;
	plen = strlen(path);
	if (plen >= sizeof(sa.sun_path))
		return;
	memcpy(sa.sun_path, path, plen);
	/* "@name": an abstract socket, whose name starts with a NUL. */
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	va_start(ap, fmt);
	len = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (len < 0 || len >= (int)sizeof(msg))
		return;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (sendto(fd, msg, (size_t)len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen)) <
	    0)
		tfs_debug("cannot notify '%s': %s", path, strerror(errno));
	close(fd);
}

/* What the kernel has yet to write back, Dirty + Writeback, in KiB. */
static unsigned long long dirty_kb(void)
{
	unsigned long long v, sum = 0;
	char line[128];
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Dirty: %llu", &v) == 1 ||
		    sscanf(line, "Writeback: %llu", &v) == 1)
			sum += v;
	fclose(f);
	return sum;
}

void tfs_save_progress(size_t done, size_t total)
{
	static struct timespec last;
	unsigned long long secs = 60;
	struct timespec now;
	char what[48];

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (done && done < total && now.tv_sec == last.tv_sec)
		return;
	last = now;
	/*
	 * A save takes what its bytes take to compress and write: minutes
	 * for a host tier of many GiB on a slow disk, more than any fixed
	 * TimeoutStopSec. Each second of progress buys the next 60 s; a
	 * save that stalls is killed once they run out. The syncfs() at the
	 * end writes back what is dirty, at 16 MiB/s on a slow disk.
	 */
	if (done >= total) {
		secs += dirty_kb() / 16384;
		if (secs > 3600)
			secs = 3600;
	}
	tfs_notify("EXTEND_TIMEOUT_USEC=%llu\nSTATUS=saving files: %zu of %zu",
		   secs * 1000 * 1000, done, total);
	snprintf(what, sizeof(what), "%zu/%zu", done, total);
	if (tfs.store)
		tier_store_set_state(tfs.store, "saving", what);
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *w = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 4;
		} else {
			*w++ = *s++;
		}
	}
	*w = '\0';
}

/*
 * One line of mountinfo: "36 35 98:0 /root /mnt/point rw,noatime shared:1 -
 * fuse.tierfs tierfs rw,...". Fills what struct tfs_mountinfo holds and
 * points @point at the unescaped mount point, inside @line.
 */
static bool parse_mountinfo(char *line, struct tfs_mountinfo *mi,
			    char **point)
{
	char *save, *tok, *fields[6];
	int n = 0;

	for (tok = strtok_r(line, " \n", &save); tok;
	     tok = n < 6 ? strtok_r(NULL, " \n", &save) : NULL)
		fields[n++] = tok;
	if (n < 6)
		return false;
	/* Optional fields run up to a lone "-". */
	while ((tok = strtok_r(NULL, " \n", &save)) && strcmp(tok, "-"))
		;
	tok = tok ? strtok_r(NULL, " \n", &save) : NULL;
	if (!tok)
		return false;
	if (sscanf(fields[0], "%d", &mi->id) != 1 ||
	    sscanf(fields[2], "%u:%u", &mi->major, &mi->minor) != 2)
		return false;
	snprintf(mi->fstype, sizeof(mi->fstype), "%s", tok);
	snprintf(mi->mnt_opts, sizeof(mi->mnt_opts), "%s", fields[5]);
	/* fstype, source, super options */
	tok = strtok_r(NULL, " \n", &save);
	tok = tok ? strtok_r(NULL, " \n", &save) : NULL;
	snprintf(mi->sb_opts, sizeof(mi->sb_opts), "%s", tok ? tok : "");
	unescape(fields[4]);
	*point = fields[4];
	return true;
}

int tfs_mountinfo_find(const char *path, int id, struct tfs_mountinfo *out)
{
	struct tfs_mountinfo mi;
	char *line = NULL, *point;
	size_t cap = 0;
	int rc = -ENOENT;
	FILE *f;

	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		if (!parse_mountinfo(line, &mi, &point))
			continue;
		if (id > 0 ? mi.id == id : !strcmp(point, path)) {
			*out = mi;
			rc = 0;
			/* The last one for a path is the mount on top. */
			if (id > 0)
				break;
		}
	}
	free(line);
	fclose(f);
	return rc;
}

/*
 * The mount's bdi is named after its st_dev. stat() of the mount point
 * would be a FUSE request that this thread may be the one to answer, so the
 * number comes from mountinfo.
 */
void tfs_set_read_ahead(const char *mountpoint, unsigned int kb)
{
	struct tfs_mountinfo mi;
	char path[128];
	int fd, rc;

	if (!kb)
		return;
	rc = tfs_mountinfo_find(mountpoint, 0, &mi);
	if (rc == -ENOENT) {
		tfs_warn("cannot find '%s' in mountinfo: read-ahead left as is",
			 mountpoint);
		return;
	}
	if (rc) {
		tfs_warn("cannot read '/proc/self/mountinfo': %s",
			 strerror(-rc));
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb",
		 mi.major, mi.minor);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || dprintf(fd, "%u\n", kb) < 0)
		tfs_warn("cannot set read-ahead in '%s': %s", path,
			 strerror(errno));
	else
		tfs_debug("read-ahead of '%s' set to %u KiB", mountpoint, kb);
	if (fd >= 0)
		close(fd);
}

static pthread_mutex_t reload_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t reloads; /* reload_lock */
static char reload_error[512]; /* reload_lock; "" when the last one worked */

void tfs_reload_done(const char *err)
{
	size_t k;

	pthread_mutex_lock(&reload_lock);
	reloads++;
	snprintf(reload_error, sizeof(reload_error), "%s", err ? err : "");
	/* One stats line, whatever the config file held. */
	for (k = 0; reload_error[k]; k++) {
		if ((unsigned char)reload_error[k] < ' ')
			reload_error[k] = ' ';
	}
	pthread_mutex_unlock(&reload_lock);
}

size_t tfs_daemon_stats(char *buf, size_t len)
{
	int n;

	pthread_mutex_lock(&reload_lock);
	n = snprintf(buf, len,
		     "pid=%ld\nreloads=%" PRIu64 "\nreload_error=%s\n"
		     "read_only=%d\n",
		     (long)getpid(), reloads, reload_error, tfs_readonly());
	pthread_mutex_unlock(&reload_lock);
	if (n < 0)
		n = 0;
	return (size_t)n + tfs_pj_stats(buf + ((size_t)n < len ? (size_t)n : len),
					(size_t)n < len ? len - (size_t)n : 0);
}

static pthread_t hup_thread;
static bool hup_running;
static atomic_bool hup_stop;
static tfs_reload_fn hup_fn, idle_fn;

/*
 * SIGHUP is blocked in every thread (main blocks it before any thread
 * exists, libfuse's workers block everything), so sigtimedwait() here is
 * the only place it is ever taken, and a reload runs in a plain thread that
 * may take locks and log, unlike a signal handler. The timeout makes the
 * same thread the daemon's once-a-second idle timer.
 */
static void *hup_main(void *arg)
{
	const struct timespec second = { .tv_sec = 1 };
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	for (;;) {
		sig = sigtimedwait(&set, NULL, &second);
		if (atomic_load(&hup_stop))
			break;
		if (sig == SIGHUP)
			hup_fn();
		else if (sig < 0 && errno == EAGAIN)
			idle_fn();
	}
	return NULL;
}

int tfs_sighup_start(tfs_reload_fn reload, tfs_reload_fn idle)
{
	int rc;

	hup_fn = reload;
	idle_fn = idle;
	rc = pthread_create(&hup_thread, NULL, hup_main, NULL);
	if (rc)
		return -rc;
	hup_running = true;
	return 0;
}

void tfs_sighup_stop(void)
{
	if (!hup_running)
		return;
	atomic_store(&hup_stop, true);
	pthread_kill(hup_thread, SIGHUP);
	pthread_join(hup_thread, NULL);
	hup_running = false;
}
