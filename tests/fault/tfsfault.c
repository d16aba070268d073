// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A fault injector for tests, preloaded into tierfs (LD_PRELOAD); never
 * built into or installed with the daemon. It makes the disk tier's calls on
 * files under one directory fail, and the host tier's chunk allocations,
 * on a schedule read from a control file that a test may rewrite at any
 * moment.
 *
 * Environment:
 *   TFS_FAULT_DIR  only descriptors of files under this directory are hit
 *   TFS_FAULT_CTL  the control file; missing or empty means no faults
 *   TFS_FAULT_LOG  each injected fault appends a line here
 *
 * The control file is one line of words:
 *   ops=write,read,fsync,fallocate,chunk   which calls (default write)
 *       write: pwrite, pwritev, pwritev2   read: pread, preadv, preadv2
 *       fsync: fsync, fdatasync            fallocate: fallocate
 *       backing: the FUSE_DEV_IOC_BACKING_OPEN ioctl on /dev/fuse, by
 *              which passthrough registers a file (fs/passthrough.h);
 *              any descriptor, whatever TFS_FAULT_DIR says
 *       lease: fcntl(F_SETLEASE), by which passthrough asks whether a
 *              writer's file is left on a replica; any descriptor
 *       chunk: an anonymous MAP_POPULATE mmap of a power of two from
 *              64 KiB up, which is how tiers/host.c maps a host chunk
 *              (fs/ops.c's reply buffers are 1 MiB + 64 KiB)
 *   err=EIO|ENOSPC|ENOMEM|EPERM|short|delay  the errno, or a short count
 *       (half the bytes, at least one) from a read or write that then goes
 *       ahead, or a read or write that goes ahead whole after ms=N
 *       milliseconds (default 100): a slow disk
 *   every=N     hit every Nth matching call (default 1: every one)
 *   after=N     let the first N matching calls through, hit the rest
 *   prob=P      hit each matching call with probability P...
 *   seed=S      ...drawn from a generator seeded with S (default 1)
 *   count=N     stop after N faults
 * Counting starts again whenever the file changes. "off" or an empty file
 * stops all faults.
 *
 * Log lines: "fault N OP PATH ERR".
 */
/* Built with -U_FILE_OFFSET_BITS: the shim defines the plain and the 64
 * names itself. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum op {
	OP_WRITE = 1,
	OP_READ = 2,
	OP_FSYNC = 4,
	OP_FALLOCATE = 8,
	OP_CHUNK = 16,
	OP_BACKING = 32,
	OP_LEASE = 64,
};

/* FUSE_DEV_IOC_BACKING_OPEN: _IOW(229, 1, struct fuse_backing_map). */
#define BACKING_OPEN _IOW(229, 1, struct { int32_t a; uint32_t b; uint64_t c; })

#define ERR_SHORT (-1)
#define ERR_DELAY (-2)
#define CHUNK_MIN (64 * 1024)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct timespec mtime; /* of the control file as last read */
	ino_t ino;
	off_t size;
	bool loaded;
	unsigned int ops;
	int err;
	uint64_t every, after, count;
	unsigned int delay_ms;
	double prob;
	uint64_t rng;
	uint64_t calls; /* matching calls since the file changed */
	uint64_t hits; /* faults since the file changed */
	uint64_t total; /* faults ever, for the log */
} st;

static const char *op_name(unsigned int op)
{
	switch (op) {
	case OP_WRITE: return "write";
	case OP_READ: return "read";
	case OP_FSYNC: return "fsync";
	case OP_FALLOCATE: return "fallocate";
	case OP_BACKING: return "backing";
	case OP_LEASE: return "lease";
	default: return "chunk";
	}
}

static void parse(char *line)
{
	char *w, *save;

	st.ops = 0;
	st.err = EIO;
	st.every = 1;
	st.delay_ms = 100;
	st.after = 0;
	st.count = UINT64_MAX;
	st.prob = 0;
	st.rng = 1;
	st.calls = 0;
	st.hits = 0;
	for (w = strtok_r(line, " \t\n", &save); w;
	     w = strtok_r(NULL, " \t\n", &save)) {
		char *v = strchr(w, '=');

		if (!strcmp(w, "off")) {
			st.ops = 0;
			return;
		}
		if (!v)
			continue;
		*v++ = '\0';
		if (!strcmp(w, "ops")) {
			char *o, *s2;

			for (o = strtok_r(v, ",", &s2); o;
			     o = strtok_r(NULL, ",", &s2)) {
				st.ops |= !strcmp(o, "write") ? OP_WRITE :
					  !strcmp(o, "read") ? OP_READ :
					  !strcmp(o, "fsync") ? OP_FSYNC :
					  !strcmp(o, "fallocate") ?
								OP_FALLOCATE :
					  !strcmp(o, "chunk") ? OP_CHUNK :
					  !strcmp(o, "backing") ? OP_BACKING :
					  !strcmp(o, "lease") ? OP_LEASE :
								  0;
			}
		} else if (!strcmp(w, "err")) {
			st.err = !strcmp(v, "ENOSPC") ? ENOSPC :
				 !strcmp(v, "ENOMEM") ? ENOMEM :
				 !strcmp(v, "EPERM") ? EPERM :
				 !strcmp(v, "short") ? ERR_SHORT :
				 !strcmp(v, "delay") ? ERR_DELAY : EIO;
		} else if (!strcmp(w, "ms")) {
			st.delay_ms = (unsigned int)strtoul(v, NULL, 0);
		} else if (!strcmp(w, "every")) {
			st.every = strtoull(v, NULL, 0);
			if (!st.every)
				st.every = 1;
		} else if (!strcmp(w, "after")) {
			st.after = strtoull(v, NULL, 0);
		} else if (!strcmp(w, "count")) {
			st.count = strtoull(v, NULL, 0);
		} else if (!strcmp(w, "prob")) {
			st.prob = strtod(v, NULL);
		} else if (!strcmp(w, "seed")) {
			st.rng = strtoull(v, NULL, 0) | 1;
		}
	}
	if (!st.ops && st.err)
		st.ops = OP_WRITE;
}

/* Read the control file again if it changed. Called with lock held. */
static void reload(void)
{
	const char *ctl = getenv("TFS_FAULT_CTL");
	char line[512];
	struct stat sb;
	ssize_t n;
	int fd;

	if (!ctl || stat(ctl, &sb)) {
		st.ops = 0;
		st.loaded = false;
		return;
	}
	if (st.loaded && sb.st_ino == st.ino && sb.st_size == st.size &&
	    sb.st_mtim.tv_sec == st.mtime.tv_sec &&
	    sb.st_mtim.tv_nsec == st.mtime.tv_nsec)
		return;
	st.loaded = true;
	st.ino = sb.st_ino;
	st.size = sb.st_size;
	st.mtime = sb.st_mtim;
	st.ops = 0;
	fd = open(ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		return;
	line[n] = '\0';
	parse(line);
}

static uint64_t rnd(void)
{
	uint64_t x = st.rng;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return st.rng = x;
}

/* Whether descriptor @fd is a file under TFS_FAULT_DIR; its path in @path. */
static bool fd_in_dir(int fd, char *path, size_t len)
{
	const char *dir = getenv("TFS_FAULT_DIR");
	char link[64];
	ssize_t n;
	size_t dl;

	if (!dir || !*dir || fd < 0)
		return false;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, len - 1);
	if (n <= 0)
		return false;
	path[n] = '\0';
	dl = strlen(dir);
	while (dl > 1 && dir[dl - 1] == '/')
		dl--;
	return !strncmp(path, dir, dl) && path[dl] == '/';
}

static void log_fault(unsigned int op, const char *path, int err)
{
	const char *log = getenv("TFS_FAULT_LOG");
	char line[PATH_MAX + 96];
	int fd, n;

	if (!log)
		return;
	n = snprintf(line, sizeof(line), "fault %llu %s %s %s\n",
		     (unsigned long long)st.total, op_name(op), path,
		     err == ERR_SHORT ? "short" :
		     err == ERR_DELAY ? "delay" : strerrorname_np(err));
	fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) < 0) {
		/* Nothing to report it to. */
	}
	close(fd);
}

/*
 * Decide whether this call of kind @op on @path fails: 0 to let it
 * through, else the errno to fail with or ERR_SHORT.
 */
static int decide(unsigned int op, const char *path)
{
	int err = 0;

	pthread_mutex_lock(&lock);
	reload();
	if (!(st.ops & op) || st.hits >= st.count)
		goto out;
	st.calls++;
	if (st.calls <= st.after)
		goto out;
	if (st.prob > 0) {
		if ((double)(rnd() >> 11) / (double)(1ull << 53) >= st.prob)
			goto out;
	} else if ((st.calls - st.after) % st.every) {
		goto out;
	}
	err = st.err;
	if ((err == ERR_SHORT || err == ERR_DELAY) &&
	    (op == OP_FSYNC || op == OP_FALLOCATE || op == OP_CHUNK ||
	     op == OP_BACKING || op == OP_LEASE))
		err = EIO;
	st.hits++;
	st.total++;
	log_fault(op, path, err);
out:
	pthread_mutex_unlock(&lock);
	return err;
}

/* Slept here, outside the lock, so that other calls are not held up. */
static int check_fd(unsigned int op, int fd)
{
	char path[PATH_MAX];
	struct timespec ts;
	unsigned int ms;
	int err;

	if (!fd_in_dir(fd, path, sizeof(path)))
		return 0;
	err = decide(op, path);
	if (err != ERR_DELAY)
		return err;
	pthread_mutex_lock(&lock);
	ms = st.delay_ms;
	pthread_mutex_unlock(&lock);
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (long)(ms % 1000) * 1000000;
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	return 0;
}

#define REAL(name)                                                   \
	static __typeof__(name) *real_##name;                        \
	if (!real_##name)                                            \
		real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

static size_t half(size_t n)
{
	return n > 1 ? n / 2 : n;
}

/* An iovec array cut to about half its bytes, in @out (at most @max). */
static int cut_iov(const struct iovec *iov, int cnt, struct iovec *out,
		   int max)
{
	size_t total = 0, want, k = 0;
	int i;

	for (i = 0; i < cnt; i++)
		total += iov[i].iov_len;
	want = half(total);
	for (i = 0; i < cnt && i < max && k < want; i++) {
		out[i] = iov[i];
		if (out[i].iov_len > want - k)
			out[i].iov_len = want - k;
		k += out[i].iov_len;
	}
	return i;
}

#define FAIL_OR(op, fd, short_expr)          \
	do {                                 \
		int e_ = check_fd(op, fd);   \
		if (e_ > 0) {                \
			errno = e_;          \
			return -1;           \
		}                            \
		if (e_ == ERR_SHORT)         \
			short_expr;          \
	} while (0)

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
	REAL(pwrite);
	FAIL_OR(OP_WRITE, fd, n = half(n));
	return real_pwrite(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
	REAL(pwrite64);
	FAIL_OR(OP_WRITE, fd, n = half(n));
	return real_pwrite64(fd, buf, n, off);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	REAL(pread);
	FAIL_OR(OP_READ, fd, n = half(n));
	return real_pread(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
	REAL(pread64);
	FAIL_OR(OP_READ, fd, n = half(n));
	return real_pread64(fd, buf, n, off);
}

#define IOV_FN(name, op, offt)                                         \
	ssize_t name(int fd, const struct iovec *iov, int cnt, offt off) \
	{                                                              \
		struct iovec cut[64];                                  \
		REAL(name);                                            \
		FAIL_OR(op, fd,                                        \
			(cnt = cut_iov(iov, cnt, cut, 64), iov = cut)); \
		return real_##name(fd, iov, cnt, off);                 \
	}

#define IOV2_FN(name, op, offt)                                        \
	ssize_t name(int fd, const struct iovec *iov, int cnt, offt off, \
		     int flags)                                        \
	{                                                              \
		struct iovec cut[64];                                  \
		REAL(name);                                            \
		FAIL_OR(op, fd,                                        \
			(cnt = cut_iov(iov, cnt, cut, 64), iov = cut)); \
		return real_##name(fd, iov, cnt, off, flags);          \
	}

IOV_FN(pwritev, OP_WRITE, off_t)
IOV_FN(pwritev64, OP_WRITE, off64_t)
IOV_FN(preadv, OP_READ, off_t)
IOV_FN(preadv64, OP_READ, off64_t)
IOV2_FN(pwritev2, OP_WRITE, off_t)
IOV2_FN(pwritev64v2, OP_WRITE, off64_t)
IOV2_FN(preadv2, OP_READ, off_t)
IOV2_FN(preadv64v2, OP_READ, off64_t)

int fsync(int fd)
{
	REAL(fsync);
	FAIL_OR(OP_FSYNC, fd, (void)0);
	return real_fsync(fd);
}

int fdatasync(int fd)
{
	REAL(fdatasync);
	FAIL_OR(OP_FSYNC, fd, (void)0);
	return real_fdatasync(fd);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	REAL(fallocate);
	FAIL_OR(OP_FALLOCATE, fd, (void)0);
	return real_fallocate(fd, mode, off, len);
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	REAL(fallocate64);
	FAIL_OR(OP_FALLOCATE, fd, (void)0);
	return real_fallocate64(fd, mode, off, len);
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	REAL(ioctl);
	if (req == (unsigned long)BACKING_OPEN && getenv("TFS_FAULT_CTL")) {
		int e = decide(OP_BACKING, "(backing file)");

		if (e > 0) {
			errno = e;
			return -1;
		}
	}
	return real_ioctl(fd, req, arg);
}

/* fcntl and fcntl64 (what glibc calls with 64-bit offsets): F_SETLEASE
 * only; every other command goes through untouched. */
static int lease_fault(int cmd)
{
	int e;

	if (cmd != F_SETLEASE || !getenv("TFS_FAULT_CTL"))
		return 0;
	e = decide(OP_LEASE, "(lease)");
	if (e > 0)
		errno = e;
	return e > 0;
}

int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	REAL(fcntl);
	if (lease_fault(cmd))
		return -1;
	return real_fcntl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	REAL(fcntl64);
	if (lease_fault(cmd))
		return -1;
	return real_fcntl64(fd, cmd, arg);
}

/*
 * mmap goes straight to the system call: dlsym() may itself map memory,
 * and the loader maps before any constructor could have run.
 */
static void *chunk_mmap(void *addr, size_t len, int prot, int flags, int fd,
			off64_t off)
{
	if (fd == -1 && (flags & MAP_ANONYMOUS) && (flags & MAP_POPULATE) &&
	    len >= CHUNK_MIN && !(len & (len - 1)) && getenv("TFS_FAULT_CTL")) {
		int e = decide(OP_CHUNK, "(host chunk)");

		if (e > 0) {
			errno = e;
			return MAP_FAILED;
		}
	}
	long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);

	return r == -1 ? MAP_FAILED : (void *)r;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return chunk_mmap(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	return chunk_mmap(addr, len, prot, flags, fd, off);
}
