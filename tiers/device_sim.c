// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The sim device: host memory with a fixed capacity standing in for a GPU,
 * so that the whole system, the export protocol included, runs and is
 * tested on machines without one. It says "sim" in every status output.
 *
 * An allocation is private anonymous memory until it is exported. Export
 * moves it into a POSIX shared-memory object with an unguessable name,
 * created 0600 for the requesting user, which the client maps; the name is
 * unlinked when the last lease ends, and the daemon keeps its mapping.
 * Names carry the daemon's pid ("/tierfs.PID.RANDOM") so that a daemon that
 * starts removes the objects a killed one left in /dev/shm.
 *
 * Test hook: with TFS_SIM_CLAIM=FILE in the daemon's environment, FILE holds
 * how much of the simulated device other processes hold (a size such as
 * "300M"; missing or empty: nothing). It is read at each meminfo(), which
 * the store's reserve watcher calls on its timer, and the claimed bytes
 * count as allocated by someone else: alloc() refuses what does not fit
 * beside them, as cudaMalloc would. With TFS_SIM_GPUS=N the machine has N
 * simulated GPUs (for [device] gpus); without it, the ordinals named.
 */
#include <ctype.h>
#include <dirent.h>
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
#include <unistd.h>

#include "config/config.h"
#include "config/log.h"
#include "tiers/device.h"

#define SIM_DEFAULT_CAPACITY (1ull << 30)

struct sim_dev {
	struct tier_dev base;
	pthread_mutex_t lock; /* protects used and claimed */
	uint64_t capacity;
	uint64_t used;
	uint64_t claimed; /* by "other processes": TFS_SIM_CLAIM */
	char *claim_path; /* TFS_SIM_CLAIM, or NULL */
};

struct sim_mem {
	struct tier_dmem base;
	void *ptr;
	size_t maplen;
	char name[64]; /* shm name while exported, else "" */
};

static size_t page_round(size_t len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);

	return len ? (len + pg - 1) / pg * pg : pg;
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

static void sim_unexport(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (m->name[0] && shm_unlink(m->name) && errno != ENOENT)
		tfs_warn("sim: cannot unlink '%s': %m", m->name);
	m->name[0] = '\0';
}

static void sim_free(struct tier_dev *dev, struct tier_dmem *dm)
{
	struct sim_dev *d = (struct sim_dev *)dev;
	struct sim_mem *m = (struct sim_mem *)dm;

	if (!m)
		return;
	sim_unexport(dev, dm);
	munmap(m->ptr, m->maplen);
	pthread_mutex_lock(&d->lock);
	d->used -= m->maplen;
	pthread_mutex_unlock(&d->lock);
	free(m);
}

static int sim_read(struct tier_dev *dev, struct tier_dmem *dm, void *dst,
		    size_t len, uint64_t off)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (off + len > m->maplen)
		return -EINVAL;
	memcpy(dst, (char *)m->ptr + off, len);
	return 0;
}

static int sim_write(struct tier_dev *dev, struct tier_dmem *dm,
		     const void *src, size_t len, uint64_t off)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (off + len > m->maplen)
		return -EINVAL;
	memcpy((char *)m->ptr + off, src, len);
	return 0;
}

static int sim_zero(struct tier_dev *dev, struct tier_dmem *dm, size_t len,
		    uint64_t off)
{
	struct sim_mem *m = (struct sim_mem *)dm;

	if (off + len > m->maplen)
		return -EINVAL;
	memset((char *)m->ptr + off, 0, len);
	return 0;
}

/* Move the allocation into a fresh shared-memory object the client maps. */
static int sim_export(struct tier_dev *dev, struct tier_dmem *dm, uid_t uid,
		      gid_t gid, struct tfs_ioc_export *out)
{
	struct sim_mem *m = (struct sim_mem *)dm;
	unsigned char rnd[16];
	void *shared;
	int fd, rc;

	if (!m->name[0]) {
		if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
			return -EIO;
		int n = snprintf(m->name, sizeof(m->name), "/tierfs.%ld.",
				 (long)getpid());
		for (size_t i = 0; i < sizeof(rnd); i++)
			n += snprintf(m->name + n, sizeof(m->name) - n, "%02x",
				      rnd[i]);
		fd = shm_open(m->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
			      0600);
		if (fd < 0) {
			rc = -errno;
			goto out_noname;
		}
		if (fchown(fd, uid, gid) && !(errno == EPERM &&
					      uid == geteuid())) {
			rc = -errno;
			goto out_unlink;
		}
		if (ftruncate(fd, (off_t)m->maplen)) {
			rc = -errno;
			goto out_unlink;
		}
		shared = mmap(NULL, m->maplen, PROT_READ | PROT_WRITE,
			      MAP_SHARED, fd, 0);
		if (shared == MAP_FAILED) {
			rc = -errno;
			goto out_unlink;
		}
		close(fd);
		memcpy(shared, m->ptr, m->maplen);
		munmap(m->ptr, m->maplen);
		m->ptr = shared;
	}
	out->handle_type = TFS_HANDLE_SHM;
	memset(out->handle, 0, sizeof(out->handle));
	memcpy(out->handle, m->name, strlen(m->name) + 1);
	out->offset = 0;
	memset(out->uuid, 0, sizeof(out->uuid));
	return 0;

out_unlink:
	close(fd);
	shm_unlink(m->name);
out_noname:
	tfs_err("sim: cannot export into '%s': %s", m->name, strerror(-rc));
	m->name[0] = '\0';
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

static void *sim_host_ptr(struct tier_dev *dev, struct tier_dmem *dm)
{
	return ((struct sim_mem *)dm)->ptr;
}

static void sim_info(struct tier_dev *dev, struct tier_dev_info *out)
{
	struct sim_dev *d = (struct sim_dev *)dev;

	memset(out, 0, sizeof(*out));
	out->name = "sim";
	snprintf(out->model, sizeof(out->model), "simulated device");
	out->capacity = d->capacity;
	out->granule = page_round(1);
	pthread_mutex_lock(&d->lock);
	out->free = d->capacity - d->used;
	pthread_mutex_unlock(&d->lock);
}

const struct tier_dev_ops tier_dev_sim_ops = {
	.name = "sim",
	.init = sim_init,
	.count = sim_count,
	.destroy = sim_destroy,
	.alloc = sim_alloc,
	.free = sim_free,
	.read = sim_read,
	.write = sim_write,
	.zero = sim_zero,
	.export = sim_export,
	.unexport = sim_unexport,
	.info = sim_info,
	.host_ptr = sim_host_ptr,
	.meminfo = sim_meminfo,
};
