// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The sim device: host memory with a fixed capacity standing in for a GPU,
 * so that the whole system, the export protocol included, runs and is
 * tested on machines without one. It says "sim" in every status output.
 *
 * An allocation is the daemon's own private anonymous memory. Exports are
 * POSIX shared-memory objects with unguessable names ("/tierfs.PID.RANDOM"),
 * which the client maps by name:
 *
 *  - A read export is a snapshot: a fresh object holding a copy of the
 *    bytes, so nothing its holder does reaches the buffer, and the buffer
 *    may be written, moved or freed while it is held. Its room counts
 *    against the device's capacity until it is unexported.
 *  - A write export copies the allocation into its object, which becomes
 *    the live storage; when it ends, the bytes are copied back into the
 *    daemon's own memory (the range it kept reserved) and the object is
 *    unlinked and closed, so the holder's old mapping is detached.
 *
 * The daemon never maps an object. Whoever may write one may also resize
 * it, and a mapping past an object's end faults (SIGBUS): one client
 * truncating its object would kill the daemon for every user. So every
 * byte moves with pread and pwrite on the object's descriptor, which
 * return short on a shrunk object instead of faulting; what a shrunk
 * object no longer holds reads as zeroes, and an object grown past the
 * allocation is read only as far as the allocation goes.
 *
 * Every object belongs to the daemon's user, mode 0600, and a POSIX ACL
 * entry gives the caller read (or read and write) access; where /dev/shm
 * has no ACLs, the object is given to the caller instead (0400 for a
 * snapshot). Names carry the daemon's pid so that a daemon that starts
 * removes the objects a killed one left in /dev/shm: only its own user's.
 *
 * Test hook: with TFS_SIM_CLAIM=FILE in the daemon's environment, FILE holds
 * how much of the simulated device other processes hold (a size such as
 * "300M"; missing or empty: nothing). It is read at each meminfo(), which
 * the store's reserve watcher calls on its timer, and the claimed bytes
 * count as allocated by someone else: alloc() refuses what does not fit
 * beside them, as cudaMalloc would. With TFS_SIM_GPUS=N the machine has N
 * simulated GPUs (for [device] gpus); without it, the ordinals named.
 *
 * Each instance is one GPU, device.gpu at init, with a UUID clients can
 * compute (tier_dev_sim_uuid()); exports report it. Copies between two
 * instances are memcpy: peer to peer, always.
 *
 * Sparse allocations (alloc_sparse) map the whole range but count against
 * the capacity only the pages populated, a bitmap per allocation saying
 * which: anonymous memory takes a page only once written, and a page
 * never written reads as zero, so holes cost nothing, as they would on a
 * GPU whose driver maps physical memory where the store populates
 * (doc/design.md). Copies into a page not populated are refused, which
 * keeps the store's accounting honest in the tests.
 */
#include <ctype.h>
#include <dirent.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <linux/posix_acl.h>
#include <linux/posix_acl_xattr.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/device.h"

#define SIM_DEFAULT_CAPACITY (1ull << 30)

struct sim_dev {
	struct tier_dev base;
	pthread_mutex_t lock; /* protects used and claimed */
	int gpu; /* the ordinal: device.gpu at init */
	uint64_t capacity;
	uint64_t used;
	uint64_t claimed; /* by "other processes": TFS_SIM_CLAIM */
	char *claim_path; /* TFS_SIM_CLAIM, or NULL */
};

struct sim_exp;

struct sim_mem {
	struct tier_dmem base;
	/* The daemon's own memory. While write-exported the live bytes are
	 * the writer's object's, and this range keeps no pages: it is
	 * where they go back when the export ends. */
	void *ptr;
	size_t maplen;
	/* A sparse allocation's populated pages, a bit each; NULL: all of
	 * them, from the start (alloc). */
	uint64_t *pop;
	struct sim_exp *writer; /* the write export, or NULL */
};

struct sim_exp {
	struct tier_dexp base;
	struct sim_mem *m; /* a write export's allocation; NULL: snapshot */
	int fd; /* a write export's object, never mapped; -1 for a snapshot */
	size_t maplen; /* a snapshot's size, counted in used */
	char name[64];
};

static size_t page_round(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return len ? (len + pg - 1) / pg * pg : pg;
}

/*
 * Read @len bytes at @off of the object @fd into @dst. A client may have
 * shrunk it: what it no longer holds reads as zeroes. 0 or -EIO.
 */
static int obj_read(int fd, void *dst, size_t len, uint64_t off)
{
	char *p = dst;

	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			tfs_err("sim: cannot read an export object: %s",
				strerror(errno));
			return -EIO;
		}
		if (!n) {
			memset(p, 0, len);
			return 0;
		}
		p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* Write @len bytes of @src (NULL: zeroes) at @off of the object @fd,
 * growing it back should a client have shrunk it. 0 or -errno. */
static int obj_write(int fd, const void *src, size_t len, uint64_t off)
{
	static const char zero[4096];
	const char *p = src;

	while (len) {
		size_t want = p ? len : (len < sizeof(zero) ? len : sizeof(zero));
		ssize_t n = pwrite(fd, p ? p : zero, want, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		if (p)
			p += n;
		off += (uint64_t)n;
		len -= (size_t)n;
	}
	return 0;
}

/* The name of an export object: "tierfs.<pid>.<32 hex digits>", as
 * sim_export() makes them; its pid in @pid. */
static bool export_name(const char *name, long *pid)
{
	const char *p;
	char *end;

	if (strncmp(name, "tierfs.", 7))
		return false;
	errno = 0;
	*pid = strtol(name + 7, &end, 10);
	if (errno || end == name + 7 || *pid <= 0 || *end != '.')
		return false;
	for (p = end + 1; *p; p++)
		if (!isxdigit((unsigned char)*p) || isupper((unsigned char)*p))
			return false;
	return p - (end + 1) == 32;
}

/*
 * Unlink the shared-memory objects of sim daemons that are gone. Only what
 * is provably such an object: a name sim_export() would make, carrying the
 * pid of no live process, for a regular file (never a symlink) owned by
 * this daemon's user, checked and unlinked relative to one descriptor of
 * /dev/shm. In that sticky directory nobody else can swap an entry of ours
 * between the check and the unlink; objects other users made are theirs.
 */
static void remove_stale_exports(void)
{
	struct dirent *e;
	struct stat st;
	DIR *d;
	int dfd;

	dfd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return;
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return;
	}
	while ((e = readdir(d))) {
		long pid;

		if (!export_name(e->d_name, &pid) || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode) || st.st_uid != geteuid())
			continue;
		if (!unlinkat(dfd, e->d_name, 0))
			tfs_notice("sim: removed '/%s' left by a dead daemon",
				   e->d_name);
	}
	closedir(d);
}

/*
 * As many devices as TFS_SIM_GPUS says, so that [device] gpus = all is
 * tested; without it, as many as the ordinals @cfg names need.
 */
static int sim_count(const struct tfs_config *cfg)
{
	const char *env = getenv("TFS_SIM_GPUS");
	int n = cfg->device.gpu;
	char *end;
	long v;

	if (env && *env) {
		errno = 0;
		v = strtol(env, &end, 10);
		if (errno || *end || v < 0 || v > 256) {
			tfs_warn("sim: TFS_SIM_GPUS='%s' is not a count of "
				 "GPUs, 0 to 256", env);
			return -EINVAL;
		}
		return (int)v;
	}
	for (unsigned int i = 0; i < cfg->device.gpus.n; i++)
		if (cfg->device.gpus.ord[i] > n)
			n = cfg->device.gpus.ord[i];
	return n + 1;
}

static int sim_init(struct tier_dev **out, const struct tfs_config *cfg,
		    char *err, size_t errlen)
{
	struct sim_dev *d = calloc(1, sizeof(*d));

	if (!d) {
		snprintf(err, errlen, "sim: out of memory");
		return -ENOMEM;
	}
	d->base.ops = &tier_dev_sim_ops;
	d->gpu = cfg->device.gpu;
	pthread_mutex_init(&d->lock, NULL);
	d->capacity = SIM_DEFAULT_CAPACITY;
	if (!cfg->device.limit.is_percent && cfg->device.limit.bytes)
		d->capacity = cfg->device.limit.bytes;
	if (getenv("TFS_SIM_CLAIM") && *getenv("TFS_SIM_CLAIM") &&
	    !(d->claim_path = strdup(getenv("TFS_SIM_CLAIM")))) {
		free(d);
		snprintf(err, errlen, "sim: out of memory");
		return -ENOMEM;
	}
	remove_stale_exports();
	*out = &d->base;
	return 0;
}

static void sim_destroy(struct tier_dev *dev)
{
	struct sim_dev *d = (struct sim_dev *)dev;

	pthread_mutex_destroy(&d->lock);
	free(d->claim_path);
	free(d);
}

static int sim_alloc(struct tier_dev *dev, size_t len, struct tier_dmem **out)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	size_t maplen = page_round(len);
	struct sim_mem *m;

	pthread_mutex_lock(&d->lock);
	if (d->used + d->claimed + maplen > d->capacity) {
		pthread_mutex_unlock(&d->lock);
		return -ENOMEM;
	}
	d->used += maplen;
	pthread_mutex_unlock(&d->lock);

	m = calloc(1, sizeof(*m));
	if (!m)
		goto out_unaccount;
	m->ptr = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m->ptr == MAP_FAILED)
		goto out_free;
	m->base.len = len;
	m->base.granted = maplen;
	m->maplen = maplen;
	*out = &m->base;
	return 0;

out_free:
	free(m);
out_unaccount:
	pthread_mutex_lock(&d->lock);
	d->used -= maplen;
	pthread_mutex_unlock(&d->lock);
	return -ENOMEM;
}

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

static bool pop_bit(const struct sim_mem *m, size_t p)
{
	return m->pop[p / 64] >> (p % 64) & 1;
}

/* Whether every page of [off, off + len) holds memory. */
static bool populated(const struct sim_mem *m, uint64_t off, size_t len)
{
	size_t pg = page_size();

	if (!m->pop || !len)
		return true;
	for (size_t p = off / pg; p <= (off + len - 1) / pg; p++)
		if (!pop_bit(m, p))
			return false;
	return true;
}

static int sim_alloc_sparse(struct tier_dev *dev, size_t len,
			    struct tier_dmem **out)
{
	size_t maplen = page_round(len), pages = maplen / page_size();
	struct sim_mem *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	m->pop = calloc((pages + 63) / 64, sizeof(*m->pop));
	if (!m->pop)
		goto out_free;
	/* Address space only: a page is taken when it is first written. */
	m->ptr = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m->ptr == MAP_FAILED)
		goto out_free;
	m->base.len = len;
	m->base.granted = 0;
	m->maplen = maplen;
	*out = &m->base;
	return 0;

out_free:
	free(m->pop);
	free(m);
	return -ENOMEM;
}

static int sim_populate(struct tier_dev *dev, struct tier_dmem *dm,
			uint64_t off, size_t len)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	struct sim_mem *m = (struct sim_mem *)dm;
	size_t pg = page_size(), first, last, need = 0;

	if (off > m->maplen || len > m->maplen - off)
		return -EINVAL;
	if (!m->pop || !len)
		return 0;
	first = off / pg;
	last = (off + len - 1) / pg;
	for (size_t p = first; p <= last; p++)
		need += pop_bit(m, p) ? 0 : pg;
	pthread_mutex_lock(&d->lock);
	if (d->used + d->claimed + need > d->capacity) {
		pthread_mutex_unlock(&d->lock);
		return -ENOMEM;
	}
	d->used += need;
	pthread_mutex_unlock(&d->lock);
	for (size_t p = first; p <= last; p++)
		m->pop[p / 64] |= 1ull << (p % 64);
	m->base.granted += need;
	return 0;
}

static void sim_free(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	struct sim_mem *m = (struct sim_mem *)dm;

	if (!m)
		return;
	/* The store unexports first; should it not, unlink the name at
	 * least, and keep the holder's object apart from anything else. */
	if (m->writer) {
		tfs_err("sim: freeing an allocation still exported as '%s'",
			m->writer->name);
		shm_unlink(m->writer->name);
		close(m->writer->fd);
		m->writer->fd = -1;
		m->writer->m = NULL;
	}
	munmap(m->ptr, m->maplen);
	pthread_mutex_lock(&d->lock);
	d->used -= m->base.granted;
	pthread_mutex_unlock(&d->lock);
	free(m->pop);
	free(m);
}

static int sim_read(struct tier_dev *dev, struct tier_dmem *dm, void *dst,
		    size_t len, uint64_t off)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (off + len > m->maplen)
		return -EINVAL;
	if (m->writer)
		return obj_read(m->writer->fd, dst, len, off);
	memcpy(dst, (char *)m->ptr + off, len);
	return 0;
}

static int sim_write(struct tier_dev *dev, struct tier_dmem *dm,
		     const void *src, size_t len, uint64_t off)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (off + len > m->maplen || !populated(m, off, len))
		return -EINVAL;
	if (m->writer)
		return obj_write(m->writer->fd, src, len, off);
	memcpy((char *)m->ptr + off, src, len);
	return 0;
}

static int sim_zero(struct tier_dev *dev, struct tier_dmem *dm, size_t len,
		    uint64_t off)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (off + len > m->maplen || !populated(m, off, len))
		return -EINVAL;
	if (m->writer)
		return obj_write(m->writer->fd, NULL, len, off);
	memset((char *)m->ptr + off, 0, len);
	return 0;
}

/*
 * Let @uid (group @gid) open the object @fd for reading, and for writing
 * when @writable: a POSIX ACL entry on the daemon's own object, or, where
 * /dev/shm has no ACLs, the object itself.
 */
static int grant(int fd, uid_t uid, gid_t gid, bool writable)
{
	const uint16_t perm = ACL_READ | (writable ? ACL_WRITE : 0);
	struct {
		struct posix_acl_xattr_header h;
		struct posix_acl_xattr_entry e[5];
	} acl = {
		.h = { .a_version = htole32(POSIX_ACL_XATTR_VERSION) },
		.e = {
			{ htole16(ACL_USER_OBJ), htole16(ACL_READ | ACL_WRITE),
			  htole32(ACL_UNDEFINED_ID) },
			{ htole16(ACL_USER), htole16(perm), htole32(uid) },
			{ htole16(ACL_GROUP_OBJ), 0,
			  htole32(ACL_UNDEFINED_ID) },
			{ htole16(ACL_MASK), htole16(perm),
			  htole32(ACL_UNDEFINED_ID) },
			{ htole16(ACL_OTHER), 0, htole32(ACL_UNDEFINED_ID) },
		},
	};

	if (uid == geteuid())
		return 0;
	if (!fsetxattr(fd, "system.posix_acl_access", &acl, sizeof(acl), 0))
		return 0;
	if (errno != EOPNOTSUPP && errno != ENOTSUP)
		return -errno;
	if (fchown(fd, uid, gid))
		return -errno;
	/* Its owner could chmod it back: harmless for a snapshot, which is
	 * nobody's but the holder's. */
	if (!writable && fchmod(fd, 0400))
		return -errno;
	return 0;
}

/*
 * Copy @m's bytes into the object @fd: from the daemon's own memory, or
 * from the writer's object when @m is write-exported (a snapshot of a
 * buffer being written). 0 or -errno.
 */
static int fill_object(int fd, struct sim_mem *m)
{
	size_t step = m->maplen < (1u << 20) ? m->maplen : (1u << 20);
	char *bounce;
	int rc = 0;

	if (!m->writer)
		return obj_write(fd, m->ptr, m->maplen, 0);
	bounce = malloc(step);
	if (!bounce)
		return -ENOMEM;
	for (size_t at = 0; !rc && at < m->maplen; at += step) {
		size_t n = m->maplen - at < step ? m->maplen - at : step;

		rc = obj_read(m->writer->fd, bounce, n, at);
		if (!rc)
			rc = obj_write(fd, bounce, n, at);
	}
	free(bounce);
	return rc;
}

/*
 * A fresh object for @uid holding @m's bytes; its descriptor (never
 * mapped: see the top of the file) in *@fdp. The caller's access is
 * granted before the object has a size, and the caller may open it as
 * soon as it has a name: everything after that is pwrite.
 */
static int make_object(struct sim_exp *e, struct sim_mem *m, uid_t uid,
		       gid_t gid, bool writable, int *fdp)
{
	unsigned char rnd[16];
	int fd, rc, n;

	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return -EIO;
	n = snprintf(e->name, sizeof(e->name), "/tierfs.%ld.", (long)getpid());
	for (size_t i = 0; i < sizeof(rnd); i++)
		n += snprintf(e->name + n, sizeof(e->name) - (size_t)n, "%02x",
			      rnd[i]);
	fd = shm_open(e->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	rc = grant(fd, uid, gid, writable);
	if (!rc && ftruncate(fd, (off_t)m->maplen))
		rc = -errno;
	if (!rc)
		rc = fill_object(fd, m);
	if (rc) {
		close(fd);
		shm_unlink(e->name);
		return rc;
	}
	*fdp = fd;
	return 0;
}

static int sim_export(struct tier_dev *dev, struct tier_dmem *dm,
		      bool writable, uid_t uid, gid_t gid,
		      struct tfs_ioc_export *out, struct tier_dexp **exp)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	struct sim_mem *m = (struct sim_mem *)dm;
	struct sim_exp *e;
	int fd = -1, rc;

	if (writable && m->writer)
		return -EBUSY;
	if (!populated(m, 0, m->maplen))
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->fd = -1;
	e->base.writable = writable;
	if (!writable) {
		pthread_mutex_lock(&d->lock);
		rc = d->used + d->claimed + m->maplen > d->capacity ?
		     -ENOSPC : 0;
		if (!rc)
			d->used += m->maplen;
		pthread_mutex_unlock(&d->lock);
		if (rc)
			goto out_free;
		e->maplen = m->maplen;
	}
	rc = make_object(e, m, uid, gid, writable, &fd);
	if (rc) {
		tfs_err("sim: cannot export into '%s': %s", e->name,
			strerror(-rc));
		goto out_unaccount;
	}
	if (writable) {
		/* Keep the range, not its pages: going back must not fail. */
		madvise(m->ptr, m->maplen, MADV_DONTNEED);
		e->fd = fd;
		m->writer = e;
		e->m = m;
	} else {
		close(fd);
	}
	out->handle_type = TFS_HANDLE_SHM;
	memset(out->handle, 0, sizeof(out->handle));
	memcpy(out->handle, e->name, strlen(e->name) + 1);
	out->offset = 0;
	tier_dev_sim_uuid(d->gpu, out->uuid);
	*exp = &e->base;
	return 0;

out_unaccount:
	pthread_mutex_lock(&d->lock);
	d->used -= e->maplen;
	pthread_mutex_unlock(&d->lock);
out_free:
	free(e);
	return rc;
}

/* What TFS_SIM_CLAIM's file says other processes hold; 0 when it is
 * missing, empty or not a size. */
static uint64_t read_claim(const char *path)
{
	struct cfg_size sz;
	char buf[64];
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	buf[strcspn(buf, " \t\n")] = '\0';
	if (cfg_parse_size(buf, false, &sz))
		return 0;
	return sz.bytes;
}

static int sim_meminfo(struct tier_dev *dev, uint64_t *free_b,
		       uint64_t *total, uint64_t *held)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	uint64_t claim = d->claim_path ? read_claim(d->claim_path) : 0;

	pthread_mutex_lock(&d->lock);
	d->claimed = claim < d->capacity ? claim : d->capacity;
	*total = d->capacity;
	/*
	 * A real process could only take what is free; a claim may be
	 * more, and then counts in full as the others' (total - free -
	 * held): the pressure the test asked for, at once.
	 */
	if (d->used + d->claimed <= d->capacity) {
		*held = d->used;
		*free_b = d->capacity - d->claimed - d->used;
	} else {
		*held = d->capacity - d->claimed;
		*free_b = 0;
	}
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void sim_unexport(struct tier_dev *dev, struct tier_dexp *exp)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	struct sim_exp *e = (struct sim_exp *)exp;
	struct sim_mem *m = e->m;

	if (shm_unlink(e->name) && errno != ENOENT)
		tfs_warn("sim: cannot unlink '%s': %s", e->name,
			 strerror(errno));
	if (m) {
		/* Detach the holder: the bytes go back to our own range and
		 * the object is closed. A read that fails leaves zeroes,
		 * never a fault. */
		if (obj_read(e->fd, m->ptr, m->maplen, 0))
			memset(m->ptr, 0, m->maplen);
		m->writer = NULL;
	} else if (e->maplen) {
		pthread_mutex_lock(&d->lock);
		d->used -= e->maplen;
		pthread_mutex_unlock(&d->lock);
	}
	if (e->fd >= 0)
		close(e->fd);
	free(e);
}

/* Nothing while write-exported: the live bytes are the object's, which
 * the daemon never maps. */
static void *sim_host_ptr(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	return m->writer ? NULL : m->ptr;
}

static void sim_info(struct tier_dev *dev, struct tier_dev_info *out)
{
	struct sim_dev *d = (struct sim_dev *)dev;

	memset(out, 0, sizeof(*out));
	out->name = "sim";
	snprintf(out->model, sizeof(out->model), "simulated device");
	out->capacity = d->capacity;
	out->granule = page_round(1);
	out->sparse = true;
	tier_dev_sim_uuid(d->gpu, out->uuid);
	pthread_mutex_lock(&d->lock);
	out->free = d->capacity - d->used;
	pthread_mutex_unlock(&d->lock);
}

void tier_dev_sim_uuid(int ordinal, uint8_t out[16])
{
	memcpy(out, "tierfs-sim-gpu", 14);
	out[14] = (uint8_t)((unsigned int)ordinal >> 8);
	out[15] = (uint8_t)ordinal;
}

/* Every sim device is host memory: a copy between two is a memcpy. */
static bool sim_can_peer(struct tier_dev *src, struct tier_dev *dst)
{
	return true;
}

static int sim_copy_peer(struct tier_dev *src, struct tier_dmem *sdm,
			 struct tier_dev *dst, struct tier_dmem *ddm,
			 size_t len, uint64_t off)
{
	struct sim_mem *sm = (struct sim_mem *)sdm;
	struct sim_mem *dm = (struct sim_mem *)ddm;

	if (off > sm->base.len || len > sm->base.len - off ||
	    off > dm->base.len || len > dm->base.len - off ||
	    !populated(dm, off, len))
		return -EINVAL;
	if (dm->writer)
		return sm->writer ? -EBUSY :
				    obj_write(dm->writer->fd,
					      (char *)sm->ptr + off, len, off);
	if (sm->writer)
		return obj_read(sm->writer->fd, (char *)dm->ptr + off, len,
				off);
	memcpy((char *)dm->ptr + off, (char *)sm->ptr + off, len);
	return 0;
}

const struct tier_dev_ops tier_dev_sim_ops = {
	.name = "sim",
	.init = sim_init,
	.count = sim_count,
	.destroy = sim_destroy,
	.alloc = sim_alloc,
	.alloc_sparse = sim_alloc_sparse,
	.populate = sim_populate,
	.free = sim_free,
	.read = sim_read,
	.write = sim_write,
	.zero = sim_zero,
	.export = sim_export,
	.unexport = sim_unexport,
	.read_snapshots = true,
	.info = sim_info,
	.host_ptr = sim_host_ptr,
	.meminfo = sim_meminfo,
	.can_peer = sim_can_peer,
	.copy_peer = sim_copy_peer,
};
