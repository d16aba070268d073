// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The client tests/integration/export.bats drives: libtierfs maps on the sim
 * backend, and raw ioctls, good and malformed.
 *
 *   export_client cat PATH             map read-only, bytes to stdout
 *   export_client fill PATH SEED       map for writing, write pattern(SEED)
 *                                      over the whole buffer, commit, close
 *   export_client pattern LEN SEED     pattern(SEED) of LEN bytes to stdout
 *   export_client hold PATH [rw]       map, print "ready TYPE LENGTH SUM",
 *                                      keep the map until SIGTERM, close,
 *                                      print "closed"; on SIGUSR1 print
 *                                      "sum SUM" of what the map shows
 *   export_client keep PATH [rw]       what an attacker would do: export
 *                                      with raw ioctls, map the object,
 *                                      release the lease and close the
 *                                      file but keep the mapping; print
 *                                      "ready SUM"; on SIGUSR1 print "sum
 *                                      SUM", on SIGUSR2 write 0xab over
 *                                      the mapping (rw) and print "wrote",
 *                                      on SIGTERM exit
 *   export_client probe PATH           export for reading through a read-
 *                                      only descriptor and try to get
 *                                      write access to the object: print
 *                                      "name=..", "mode=.. uid=..", then
 *                                      "rdwr=..", "mmap-write=..",
 *                                      "chmod=..", "rdonly=.." (ok or the
 *                                      errno name), and whether the name
 *                                      is gone after release
 *   export_client sum PATH             the SUM of PATH's bytes, read(2)
 *   export_client shm PATH             export, print the shm object's mode
 *                                      and owner, release, say if it is gone
 *   export_client alloc PATH SIZE      tfs_alloc: SIZE zeroed device bytes
 *   export_client attack PATH r|rw ACTION
 *                                      what a client may do to the object
 *                                      it was given: export (raw), open the
 *                                      object read-write (else read-only),
 *                                      then ACTION: truncate (to 0), grow
 *                                      (to 1 GiB), unmap (map, write 0xcd
 *                                      over it (rw), unmap), or late (keep
 *                                      it open, write 0xcd after the
 *                                      release); then read the file with
 *                                      O_DIRECT, commit (rw) and release.
 *                                      Prints "open=", "ACTION=", "read=N",
 *                                      "commit=", "release=" (ok or the
 *                                      errno name) and "done"
 *   export_client writer PATH          a GPU program's write export: export
 *                                      (raw) for writing, map the object,
 *                                      print "ready"; on SIGUSR2 write 0xcd
 *                                      over the map and commit, printing
 *                                      "commit=" (ok or the errno name);
 *                                      on SIGTERM release ("release=..."),
 *                                      close and exit
 *   export_client flood DIR N [rw]     export DIR/f0 .. DIR/fN-1 (one open
 *                                      file each, kept), print "ready OK
 *                                      EDQUOT OTHER" (how many exports got
 *                                      each answer), hold until SIGTERM
 *   export_client ioctl PATH CASE [r|w|rw]
 *                                      one malformed or plain ioctl on PATH
 *                                      opened read-only (default), write-
 *                                      only or read-write; prints "ok" or
 *                                      "errno=NAME"
 *
 * cat, fill and hold touch the mapped bytes from the CPU, which only a shm
 * (sim) mapping allows, or a CUDA one under tests/gpu/cuda_mock.c (set
 * EXPORT_CLIENT_MOCK_CUDA=1 then).
 *
 * Exit status: 0 when the command ran (whatever errno an ioctl case got),
 * 1 on a failure, with the reason on stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fill_pattern.h"
#include "libtierfs.h"

static void die(const char *what, int rc)
{
	fprintf(stderr, "export_client: %s: %s\n", what, tfs_strerror(rc));
	exit(1);
}

/* FNV-1a: enough to tell two byte streams apart in a test. */
static uint64_t sum_bytes(uint64_t h, const unsigned char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

#define SUM_INIT 0xcbf29ce484222325ull

/* Map @path and make sure the CPU may touch the bytes. */
static void map_host(const char *path, int flags, struct tfs_map *m)
{
	int rc = tfs_map_open(path, flags, m);

	if (rc)
		die("tfs_map_open", rc);
	if (m->handle_type != TFS_HANDLE_SHM &&
	    !(m->handle_type == TFS_HANDLE_CUDA_IPC &&
	      getenv("EXPORT_CLIENT_MOCK_CUDA")))
		die("the mapping is not host memory", -ENOTSUP);
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			die("write", -errno);
		}
		c += w;
		n -= (size_t)w;
	}
}

static int cmd_cat(const char *path)
{
	struct tfs_map m;
	int rc;

	map_host(path, TFS_MAP_READ, &m);
	fprintf(stderr, "handle_type=%d length=%zu generation=%llu\n",
		m.handle_type, m.length, (unsigned long long)m.generation);
	write_all(1, m.ptr, m.length);
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

static int cmd_fill(const char *path, unsigned int seed)
{
	struct tfs_map m;
	unsigned char *p;
	size_t i;
	int rc;

	map_host(path, TFS_MAP_WRITE, &m);
	p = m.ptr;
	for (i = 0; i < m.length; i++)
		p[i] = tfs_fill_byte(i, seed);
	rc = tfs_map_commit(&m);
	if (rc)
		die("tfs_map_commit", rc);
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	return 0;
}

static int cmd_pattern(uint64_t len, unsigned int seed)
{
	unsigned char buf[65536];
	uint64_t at = 0;

	while (at < len) {
		size_t n = len - at < sizeof(buf) ? len - at : sizeof(buf);
		size_t i;

		for (i = 0; i < n; i++)
			buf[i] = tfs_fill_byte(at + i, seed);
		write_all(1, buf, n);
		at += n;
	}
	return 0;
}

static int cmd_sum(const char *path)
{
	unsigned char buf[65536];
	uint64_t h = SUM_INIT;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path, -errno);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		h = sum_bytes(h, buf, (size_t)n);
	if (n < 0)
		die("read", -errno);
	close(fd);
	printf("%016llx\n", (unsigned long long)h);
	return 0;
}

static int cmd_hold(const char *path, int flags)
{
	struct tfs_map m;
	sigset_t set;
	int rc, sig;

	/* Block first: a SIGTERM sent right after "ready" must not kill us
	 * with the lease held and "closed" unprinted. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	sigprocmask(SIG_BLOCK, &set, NULL);

	map_host(path, flags, &m);
	printf("ready %d %zu %016llx\n", m.handle_type, m.length,
	       (unsigned long long)sum_bytes(SUM_INIT, m.ptr, m.length));
	fflush(stdout);
	while (!sigwait(&set, &sig) && sig == SIGUSR1) {
		printf("sum %016llx\n",
		       (unsigned long long)sum_bytes(SUM_INIT, m.ptr,
						     m.length));
		fflush(stdout);
	}
	rc = tfs_map_close(&m);
	if (rc)
		die("tfs_map_close", rc);
	printf("closed\n");
	return 0;
}

static const char *errno_name(int e);

static int raw_export(const char *path, int oflags, uint32_t flags,
		      struct tfs_ioc_export *ex)
{
	int fd = open(path, oflags);

	if (fd < 0)
		die(path, -errno);
	memset(ex, 0, sizeof(*ex));
	ex->version = TFS_ABI_VERSION;
	ex->flags = flags;
	if (ioctl(fd, TFS_IOC_EXPORT, ex) < 0)
		die("TFS_IOC_EXPORT", -errno);
	if (ex->handle_type != TFS_HANDLE_SHM ||
	    !memchr(ex->handle, 0, sizeof(ex->handle)) || ex->handle[0] != '/')
		die("export: not a shm handle", -EPROTO);
	return fd;
}

static void raw_release(int fd)
{
	struct tfs_ioc_release rel;

	memset(&rel, 0, sizeof(rel));
	rel.version = TFS_ABI_VERSION;
	if (ioctl(fd, TFS_IOC_RELEASE, &rel) < 0)
		die("TFS_IOC_RELEASE", -errno);
}

static const char *try_errno(int rc)
{
	return rc < 0 ? errno_name(errno) : "ok";
}

static int cmd_probe(const char *path)
{
	struct tfs_ioc_export ex;
	const char *name;
	char dev_path[128];
	struct stat st;
	size_t len;
	void *p;
	int fd, sfd;

	fd = raw_export(path, O_RDONLY, 0, &ex);
	name = (const char *)ex.handle;
	len = ex.length ? ex.length : 1;
	snprintf(dev_path, sizeof(dev_path), "/dev/shm%s", name);
	printf("name=%s\n", name);
	if (stat(dev_path, &st) < 0)
		die(dev_path, -errno);
	printf("mode=%04o uid=%u\n", (unsigned int)(st.st_mode & 07777),
	       (unsigned int)st.st_uid);
	sfd = shm_open(name, O_RDWR, 0);
	printf("rdwr=%s\n", try_errno(sfd));
	if (sfd >= 0)
		close(sfd);
	sfd = shm_open(name, O_RDONLY, 0);
	if (sfd < 0)
		die("shm_open O_RDONLY", -errno);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	printf("mmap-write=%s\n", try_errno(p == MAP_FAILED ? -1 : 0));
	if (p != MAP_FAILED)
		munmap(p, len);
	printf("chmod=%s\n", try_errno(fchmod(sfd, 0666)));
	p = mmap(NULL, len, PROT_READ, MAP_SHARED, sfd, 0);
	printf("rdonly=%s\n", try_errno(p == MAP_FAILED ? -1 : 0));
	if (p != MAP_FAILED)
		munmap(p, len);
	close(sfd);
	raw_release(fd);
	printf("after release: %s\n",
	       stat(dev_path, &st) < 0 && errno == ENOENT ? "gone" : "present");
	close(fd);
	return 0;
}

/*
 * keep PATH [r|rw [close]]: export, map, end the lease (TFS_IOC_RELEASE
 * then close, or with "close" the close alone) and keep the mapping;
 * SIGUSR1 prints its sum, SIGUSR2 writes 0xab over it (rw), SIGTERM ends.
 */
static int cmd_keep(const char *path, bool wr, bool release)
{
	struct tfs_ioc_export ex;
	unsigned char *p;
	sigset_t set;
	size_t len;
	int fd, sfd, sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);

	fd = raw_export(path, wr ? O_RDWR : O_RDONLY,
			wr ? TFS_EXPORT_WRITE : 0, &ex);
	len = ex.length;
	sfd = shm_open((const char *)ex.handle, wr ? O_RDWR : O_RDONLY, 0);
	if (sfd < 0)
		die("shm_open", -errno);
	p = mmap(NULL, len ? len : 1, PROT_READ | (wr ? PROT_WRITE : 0),
		 MAP_SHARED, sfd, 0);
	if (p == MAP_FAILED)
		die("mmap", -errno);
	close(sfd);
	if (release)
		raw_release(fd);
	close(fd);
	printf("ready %016llx\n",
	       (unsigned long long)sum_bytes(SUM_INIT, p, len));
	fflush(stdout);
	while (!sigwait(&set, &sig) && sig != SIGTERM) {
		if (sig == SIGUSR2 && wr) {
			memset(p, 0xab, len);
			printf("wrote\n");
		} else {
			printf("sum %016llx\n",
			       (unsigned long long)sum_bytes(SUM_INIT, p, len));
		}
		fflush(stdout);
	}
	return 0;
}

static int cmd_shm(const char *path)
{
	struct tfs_ioc_export ex;
	struct tfs_ioc_release rel;
	char dev_path[128];
	struct stat st;
	int fd;

	fd = open(path, O_RDONLY);
	if (fd < 0)
		die(path, -errno);
	memset(&ex, 0, sizeof(ex));
	ex.version = TFS_ABI_VERSION;
	if (ioctl(fd, TFS_IOC_EXPORT, &ex) < 0)
		die("TFS_IOC_EXPORT", -errno);
	if (ex.handle_type != TFS_HANDLE_SHM ||
	    !memchr(ex.handle, 0, sizeof(ex.handle)) || ex.handle[0] != '/')
		die("export: not a shm handle", -EPROTO);
	/* glibc's shm_open puts "/name" at /dev/shm/name. */
	snprintf(dev_path, sizeof(dev_path), "/dev/shm%s",
		 (const char *)ex.handle);
	printf("name=%s\n", (const char *)ex.handle);
	if (stat(dev_path, &st) < 0)
		die(dev_path, -errno);
	printf("mode=%04o uid=%u\n", (unsigned int)(st.st_mode & 07777),
	       (unsigned int)st.st_uid);

	memset(&rel, 0, sizeof(rel));
	rel.version = TFS_ABI_VERSION;
	rel.generation = ex.generation;
	if (ioctl(fd, TFS_IOC_RELEASE, &rel) < 0)
		die("TFS_IOC_RELEASE", -errno);
	printf("after release: %s\n",
	       stat(dev_path, &st) < 0 && errno == ENOENT ? "gone" : "present");
	close(fd);
	return 0;
}

static int cmd_attack(const char *path, bool wr, const char *action)
{
	struct tfs_ioc_export ex;
	struct tfs_ioc_release rel;
	struct tfs_ioc_commit cm;
	unsigned char *p;
	size_t len, got = 0;
	void *buf;
	int fd, sfd, dfd, rc;
	ssize_t n;

	fd = raw_export(path, wr ? O_RDWR : O_RDONLY,
			wr ? TFS_EXPORT_WRITE : 0, &ex);
	len = ex.length ? ex.length : 1;
	sfd = shm_open((const char *)ex.handle, O_RDWR, 0);
	if (sfd >= 0) {
		printf("open=rdwr\n");
	} else {
		sfd = shm_open((const char *)ex.handle, O_RDONLY, 0);
		printf("open=%s\n", sfd < 0 ? errno_name(errno) : "rdonly");
	}
	if (!strcmp(action, "truncate")) {
		printf("truncate=%s\n", try_errno(ftruncate(sfd, 0)));
	} else if (!strcmp(action, "grow")) {
		printf("grow=%s\n", try_errno(ftruncate(sfd, 1ll << 30)));
	} else if (!strcmp(action, "unmap") || !strcmp(action, "late")) {
		p = mmap(NULL, len, PROT_READ | (wr ? PROT_WRITE : 0),
			 MAP_SHARED, sfd, 0);
		if (p == MAP_FAILED)
			die("mmap", -errno);
		if (wr)
			memset(p, 0xcd, len);
		printf("%s=%s\n", action, try_errno(munmap(p, len)));
	} else {
		fprintf(stderr, "export_client: unknown action \"%s\"\n",
			action);
		return 1;
	}
	fflush(stdout);
	/* The daemon serves this read from the object it handed out. */
	dfd = open(path, O_RDONLY | O_DIRECT);
	if (dfd < 0)
		die(path, -errno);
	if (posix_memalign(&buf, 4096, 1 << 20))
		die("posix_memalign", -ENOMEM);
	while ((n = read(dfd, buf, 1 << 20)) > 0)
		got += (size_t)n;
	printf("read=%s\n", n < 0 ? errno_name(errno) : "ok");
	printf("bytes=%zu\n", got);
	free(buf);
	close(dfd);
	if (wr) {
		memset(&cm, 0, sizeof(cm));
		cm.version = TFS_ABI_VERSION;
		printf("commit=%s\n", try_errno(ioctl(fd, TFS_IOC_COMMIT, &cm)));
	}
	memset(&rel, 0, sizeof(rel));
	rel.version = TFS_ABI_VERSION;
	rc = ioctl(fd, TFS_IOC_RELEASE, &rel);
	printf("release=%s\n", try_errno(rc));
	close(fd);
	if (!strcmp(action, "late") && sfd >= 0 && wr) {
		/* Written after the lease ended: reaches nothing. */
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
		if (p != MAP_FAILED) {
			memset(p, 0xef, len);
			munmap(p, len);
		}
		printf("late-write=%s\n", try_errno(p == MAP_FAILED ? -1 : 0));
	}
	if (sfd >= 0)
		close(sfd);
	printf("done\n");
	return 0;
}

static int cmd_writer(const char *path)
{
	struct tfs_ioc_export ex;
	struct tfs_ioc_release rel;
	struct tfs_ioc_commit cm;
	unsigned char *p;
	sigset_t set;
	size_t len;
	int fd, sfd, sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	fd = raw_export(path, O_RDWR, TFS_EXPORT_WRITE, &ex);
	len = ex.length ? ex.length : 1;
	sfd = shm_open((const char *)ex.handle, O_RDWR, 0);
	if (sfd < 0)
		die("shm_open", -errno);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	if (p == MAP_FAILED)
		die("mmap", -errno);
	close(sfd);
	printf("ready\n");
	fflush(stdout);
	while (!sigwait(&set, &sig) && sig == SIGUSR2) {
		memset(p, 0xcd, len);
		memset(&cm, 0, sizeof(cm));
		cm.version = TFS_ABI_VERSION;
		printf("commit=%s\n", try_errno(ioctl(fd, TFS_IOC_COMMIT, &cm)));
		fflush(stdout);
	}
	memset(&rel, 0, sizeof(rel));
	rel.version = TFS_ABI_VERSION;
	printf("release=%s\n", try_errno(ioctl(fd, TFS_IOC_RELEASE, &rel)));
	close(fd);
	return 0;
}

static int cmd_flood(const char *dir, long n, bool wr)
{
	long ok = 0, edquot = 0, other = 0;
	struct tfs_ioc_export ex;
	char path[4096];
	sigset_t set;
	int sig;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, NULL);
	for (long i = 0; i < n; i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/f%ld", dir, i);
		fd = open(path, wr ? O_RDWR : O_RDONLY);
		if (fd < 0)
			die(path, -errno);
		memset(&ex, 0, sizeof(ex));
		ex.version = TFS_ABI_VERSION;
		ex.flags = wr ? TFS_EXPORT_WRITE : 0;
		if (!ioctl(fd, TFS_IOC_EXPORT, &ex)) {
			ok++; /* the descriptor stays open: the lease too */
			continue;
		}
		if (errno == EDQUOT)
			edquot++;
		else
			other++;
		close(fd);
	}
	printf("ready %ld %ld %ld\n", ok, edquot, other);
	fflush(stdout);
	sigwait(&set, &sig);
	return 0;
}

static const char *errno_name(int e)
{
	switch (e) {
	case EINVAL: return "EINVAL";
	case ENOTTY: return "ENOTTY";
	case EBADF: return "EBADF";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case EBUSY: return "EBUSY";
	case ENOSYS: return "ENOSYS";
	case ENODEV: return "ENODEV";
	case ENOENT: return "ENOENT";
	case EFAULT: return "EFAULT";
	case EIO: return "EIO";
	case ENOSPC: return "ENOSPC";
	case EDQUOT: return "EDQUOT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ESTALE: return "ESTALE";
	case EROFS: return "EROFS";
	default: return "other";
	}
}

/* An ioctl number the daemon does not know, and EXPORT's number with the
 * wrong size. */
#define BAD_IOC_CMD _IOWR(TFS_IOC_MAGIC, 99, struct tfs_ioc_stat)
#define BAD_IOC_SIZE _IOWR(TFS_IOC_MAGIC, 1, struct tfs_ioc_stat)

static int cmd_ioctl(const char *path, const char *c, const char *mode)
{
	union {
		struct tfs_ioc_export ex;
		struct tfs_ioc_move mv;
		struct tfs_ioc_stat st;
		struct tfs_ioc_commit cm;
		struct tfs_ioc_release rel;
		struct tfs_ioc_alloc al;
	} u;
	bool then_commit = false;
	unsigned long cmd;
	int fd, rc;

	memset(&u, 0, sizeof(u));
	u.ex.version = TFS_ABI_VERSION;
	if (!strcmp(c, "export")) {
		cmd = TFS_IOC_EXPORT;
	} else if (!strcmp(c, "export-version")) {
		cmd = TFS_IOC_EXPORT;
		u.ex.version = TFS_ABI_VERSION + 1;
	} else if (!strcmp(c, "export-reserved")) {
		cmd = TFS_IOC_EXPORT;
		u.ex.reserved[0] = 1;
	} else if (!strcmp(c, "export-flags")) {
		cmd = TFS_IOC_EXPORT;
		u.ex.flags = 0x80;
	} else if (!strcmp(c, "export-write")) {
		cmd = TFS_IOC_EXPORT;
		u.ex.flags = TFS_EXPORT_WRITE;
	} else if (!strcmp(c, "stat-version")) {
		cmd = TFS_IOC_STAT;
		u.st.version = 0;
	} else if (!strcmp(c, "move-tier")) {
		cmd = TFS_IOC_MOVE;
		u.mv.tier = 7;
	} else if (!strcmp(c, "move-disk")) {
		cmd = TFS_IOC_MOVE;
		u.mv.tier = TFS_TIER_DISK;
	} else if (!strcmp(c, "move-host")) {
		cmd = TFS_IOC_MOVE;
		u.mv.tier = TFS_TIER_HOST;
	} else if (!strcmp(c, "move-device")) {
		cmd = TFS_IOC_MOVE;
		u.mv.tier = TFS_TIER_DEVICE;
	} else if (!strcmp(c, "move-reserved")) {
		cmd = TFS_IOC_MOVE;
		u.mv.tier = TFS_TIER_HOST;
		u.mv.reserved0 = 1;
	} else if (!strcmp(c, "commit")) {
		cmd = TFS_IOC_COMMIT;
	} else if (!strcmp(c, "export-commit")) {
		/* A read export, then a commit through the same descriptor:
		 * the commit's answer is printed. */
		cmd = TFS_IOC_EXPORT;
		then_commit = true;
	} else if (!strcmp(c, "alloc")) {
		cmd = TFS_IOC_ALLOC;
		u.al.size = 4096;
	} else if (!strcmp(c, "unknown-cmd")) {
		cmd = BAD_IOC_CMD;
	} else if (!strcmp(c, "wrong-size")) {
		cmd = BAD_IOC_SIZE;
	} else {
		fprintf(stderr, "export_client: unknown ioctl case \"%s\"\n",
			c);
		return 1;
	}

	fd = open(path, !strcmp(mode, "rw") ? O_RDWR :
			!strcmp(mode, "w") ? O_WRONLY : O_RDONLY);
	if (fd < 0)
		die(path, -errno);
	rc = ioctl(fd, cmd, &u);
	if (!rc && then_commit) {
		memset(&u, 0, sizeof(u));
		u.cm.version = TFS_ABI_VERSION;
		rc = ioctl(fd, TFS_IOC_COMMIT, &u);
	}
	if (rc < 0)
		printf("errno=%s\n", errno_name(errno));
	else
		printf("ok\n");
	close(fd);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: export_client cat|fill|pattern|hold|sum|shm|"
			"alloc|attack|writer|flood|ioctl ARGS (see the source)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		usage();
	if (!strcmp(argv[1], "cat"))
		return cmd_cat(argv[2]);
	if (!strcmp(argv[1], "fill") && argc == 4)
		return cmd_fill(argv[2], (unsigned int)atoi(argv[3]));
	if (!strcmp(argv[1], "pattern") && argc == 4)
		return cmd_pattern(strtoull(argv[2], NULL, 0),
				   (unsigned int)atoi(argv[3]));
	if (!strcmp(argv[1], "hold"))
		return cmd_hold(argv[2], argc > 3 && !strcmp(argv[3], "rw") ?
						 TFS_MAP_WRITE :
						 TFS_MAP_READ);
	if (!strcmp(argv[1], "sum"))
		return cmd_sum(argv[2]);
	if (!strcmp(argv[1], "probe"))
		return cmd_probe(argv[2]);
	if (!strcmp(argv[1], "keep"))
		return cmd_keep(argv[2], argc > 3 && !strcmp(argv[3], "rw"),
				!(argc > 4 && !strcmp(argv[4], "close")));
	if (!strcmp(argv[1], "shm"))
		return cmd_shm(argv[2]);
	if (!strcmp(argv[1], "attack") && argc == 5)
		return cmd_attack(argv[2], !strcmp(argv[3], "rw"), argv[4]);
	if (!strcmp(argv[1], "writer"))
		return cmd_writer(argv[2]);
	if (!strcmp(argv[1], "flood") && (argc == 4 || argc == 5))
		return cmd_flood(argv[2], strtol(argv[3], NULL, 10),
				 argc == 5 && !strcmp(argv[4], "rw"));
	if (!strcmp(argv[1], "alloc") && argc == 4) {
		int rc = tfs_alloc(argv[2], strtoull(argv[3], NULL, 0));

		if (rc)
			die("tfs_alloc", rc);
		return 0;
	}
	if (!strcmp(argv[1], "ioctl") && (argc == 4 || argc == 5))
		return cmd_ioctl(argv[2], argv[3], argc == 5 ? argv[4] : "r");
	usage();
	return 2;
}
