// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * Access times as the mount's flags ask: noatime, relatime (the default),
 * strictatime, and nodiratime on top of the first two.
 *
 * FUSE marks every inode S_NOATIME, so the kernel never updates an atime
 * itself and the daemon must. But the kernel keeps the flags: they are
 * per-mount (MNT_NOATIME...) and FUSE does not tell the daemon about them.
 * libfuse passes only noatime on to mount(2), and ignores relatime,
 * strictatime and nodiratime. So:
 *   - the -o options set what the daemon does from the start;
 *   - after mounting, mount_setattr() makes the kernel's flags say the
 *     same, so that findmnt and /proc/mounts show the truth;
 *   - a thread polls /proc/self/mountinfo, which the kernel marks on every
 *     change to the mount table, and follows a remount that changes the
 *     flags of this mount ("mount -o remount,bind,noatime", or
 *     "mount -o remount,noatime" through mount.fuse3 and tierfs_remount()).
 * A bind mount of the same filesystem elsewhere with other flags is not
 * seen: requests do not say which mount they came through.
 *
 * Read-only is the exception: "mount -o remount,ro" makes the superblock
 * read-only (tfs_remount() reconfigures it with fspick/fsconfig, as
 * mount(2) with MS_REMOUNT would, then sets the mount's own flag), so the
 * kernel refuses every write through any mount of it with EROFS, and the
 * watcher takes the superblock's "ro" from mountinfo into the stats. The
 * ioctls that rewrite bytes need a descriptor open for writing, which a
 * read-only filesystem neither gives nor lets stay open across the
 * remount (EBUSY).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fs/fs_i.h"

/*
 * The new mount API through syscall(2), not glibc's wrappers: those came
 * in glibc 2.36 and would make the daemon refuse to start on an older C
 * library (Ubuntu 22.04 has 2.35, EL9 2.34), such as the GPU machine's
 * image may have. The structures and flags are <sys/mount.h>'s.
 */
static int sys_mount_setattr(const char *path, struct mount_attr *attr)
{
	return (int)syscall(SYS_mount_setattr, AT_FDCWD, path, 0, attr,
			    sizeof(*attr));
}

static int sys_fspick(const char *path)
{
	return (int)syscall(SYS_fspick, AT_FDCWD, path, FSPICK_CLOEXEC);
}

static int sys_fsconfig(int fd, unsigned int cmd, const char *key)
{
	return (int)syscall(SYS_fsconfig, fd, cmd, key, NULL, 0);
}

enum { ATIME_RELATIME, ATIME_NOATIME, ATIME_STRICT };

/* What the daemon does now: read without a lock on every access. */
static atomic_int atime_mode = ATIME_RELATIME;
static atomic_bool atime_nodir;
static atomic_bool sb_readonly;

bool tfs_readonly(void)
{
	return atomic_load(&sb_readonly);
}

/*
 * The options, in order, as changes to the mount's flags for
 * mount_setattr(): the atime mode when one was given, nodiratime when
 * given, and for a remount the other per-mount flags.
 */
static struct mount_attr want = { .attr_set = MOUNT_ATTR_RELATIME };

/* fuse: libfuse takes the option too (and passes it to mount(2)). */
static const struct {
	const char *name;
	uint64_t set, clr;
	bool fuse;
} flag_opts[] = {
	{ "noatime", MOUNT_ATTR_NOATIME, MOUNT_ATTR__ATIME, true },
	{ "relatime", MOUNT_ATTR_RELATIME, MOUNT_ATTR__ATIME, false },
	{ "strictatime", MOUNT_ATTR_STRICTATIME, MOUNT_ATTR__ATIME, false },
	{ "nodiratime", MOUNT_ATTR_NODIRATIME, MOUNT_ATTR_NODIRATIME, false },
	{ "diratime", 0, MOUNT_ATTR_NODIRATIME, false },
	{ "ro", MOUNT_ATTR_RDONLY, MOUNT_ATTR_RDONLY, true },
	{ "rw", 0, MOUNT_ATTR_RDONLY, true },
	{ "nosuid", MOUNT_ATTR_NOSUID, MOUNT_ATTR_NOSUID, true },
	{ "suid", 0, MOUNT_ATTR_NOSUID, true },
	{ "nodev", MOUNT_ATTR_NODEV, MOUNT_ATTR_NODEV, true },
	{ "dev", 0, MOUNT_ATTR_NODEV, true },
	{ "noexec", MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOEXEC, true },
	{ "exec", 0, MOUNT_ATTR_NOEXEC, true },
};

static void want_flag(uint64_t set, uint64_t clr)
{
	want.attr_set = (want.attr_set & ~clr) | set;
	want.attr_clr |= clr;
}

int tfs_mount_flag_option(const char *name)
{
	size_t k;

	/* "atime" only undoes noatime: the kernel's default is relatime. */
	if (!strcmp(name, "atime")) {
		if ((want.attr_set & MOUNT_ATTR__ATIME) == MOUNT_ATTR_NOATIME)
			want_flag(MOUNT_ATTR_RELATIME, MOUNT_ATTR__ATIME);
		return 2;
	}
	for (k = 0; k < sizeof(flag_opts) / sizeof(flag_opts[0]); k++) {
		if (!strcmp(name, flag_opts[k].name)) {
			want_flag(flag_opts[k].set, flag_opts[k].clr);
			return flag_opts[k].fuse ? 2 : 1;
		}
	}
	return 0;
}

/* Take the daemon's behaviour from per-mount flags. */
static void adopt(uint64_t attr)
{
	switch (attr & MOUNT_ATTR__ATIME) {
	case MOUNT_ATTR_NOATIME:
		atomic_store(&atime_mode, ATIME_NOATIME);
		break;
	case MOUNT_ATTR_STRICTATIME:
		atomic_store(&atime_mode, ATIME_STRICT);
		break;
	default:
		atomic_store(&atime_mode, ATIME_RELATIME);
		break;
	}
	atomic_store(&atime_nodir, !!(attr & MOUNT_ATTR_NODIRATIME));
}

/* Whether the comma-separated @opts hold @name. */
static bool opts_have(const char *opts, const char *name)
{
	size_t n = strlen(name);

	for (;;) {
		if (!strncmp(opts, name, n) && (opts[n] == ',' || !opts[n]))
			return true;
		opts = strchr(opts, ',');
		if (!opts)
			return false;
		opts++;
	}
}

static void adopt_readonly(bool ro)
{
	if (atomic_exchange(&sb_readonly, ro) != ro)
		tfs_notice("the filesystem is now %s",
			   ro ? "read-only" : "read-write");
}

/* mountinfo's per-mount options as MOUNT_ATTR_ bits (atime ones only). */
static uint64_t parse_flags(const char *opts)
{
	char buf[sizeof(((struct tfs_mountinfo *)0)->mnt_opts)];
	char *save, *tok;
	uint64_t attr = MOUNT_ATTR_STRICTATIME;

	snprintf(buf, sizeof(buf), "%s", opts);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "noatime"))
			attr = (attr & ~MOUNT_ATTR__ATIME) | MOUNT_ATTR_NOATIME;
		else if (!strcmp(tok, "relatime") &&
			 (attr & MOUNT_ATTR__ATIME) != MOUNT_ATTR_NOATIME)
			attr = (attr & ~MOUNT_ATTR__ATIME) | MOUNT_ATTR_RELATIME;
		else if (!strcmp(tok, "nodiratime"))
			attr |= MOUNT_ATTR_NODIRATIME;
	}
	return attr;
}

static char *watch_path;
static int watch_stop[2] = { -1, -1 };
static pthread_t watch_thread;
static bool watching;

static const char *mode_name(uint64_t attr)
{
	switch (attr & MOUNT_ATTR__ATIME) {
	case MOUNT_ATTR_NOATIME:
		return "noatime";
	case MOUNT_ATTR_STRICTATIME:
		return "strictatime";
	default:
		return "relatime";
	}
}

/*
 * Whether mountinfo's mount @id is still ours: the same device (our
 * superblock's, which no other can have while it lives) and filesystem
 * type. Mount ids are reused, the lowest free one first: once this mount
 * is gone from the namespace (unmounted, or only a bind mount of it left,
 * or only copies in other namespaces, all of which the daemon still
 * serves), the next mount made anywhere may take its id, and reading
 * that one's flags as ours made the daemon of a -o noatime mount log
 * "the mount is now relatime" and update atimes.
 */
static int find_ours(int id, const struct tfs_mountinfo *ours,
		     struct tfs_mountinfo *mi)
{
	int rc = tfs_mountinfo_find(NULL, id, mi);

	if (rc)
		return rc;
	if (mi->major != ours->major || mi->minor != ours->minor ||
	    strcmp(mi->fstype, ours->fstype))
		return -ENOENT;
	return 0;
}

/* What the watcher found of our mount, for tfs_readonly_now(): @watch_ours
 * is written once, before @watch_id says it is there (0: not yet). */
static struct tfs_mountinfo watch_ours;
static atomic_int watch_id;

bool tfs_readonly_now(void)
{
	int id = atomic_load(&watch_id);
	struct tfs_mountinfo mi;

	if (id && !find_ours(id, &watch_ours, &mi))
		adopt_readonly(opts_have(mi.sb_opts, "ro"));
	return tfs_readonly();
}

static void *watch_main(void *arg)
{
	struct mount_attr set = {
		.attr_set = want.attr_set & (MOUNT_ATTR__ATIME |
					     MOUNT_ATTR_NODIRATIME),
		.attr_clr = MOUNT_ATTR__ATIME | MOUNT_ATTR_NODIRATIME,
	};
	struct tfs_mountinfo ours, mi;
	struct pollfd pfd[2];
	uint64_t seen;
	int id, rc;

	/* Before the first read: a change after it must wake the loop. */
	pfd[0].fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
	if (pfd[0].fd < 0) {
		tfs_warn("atime: cannot open '/proc/self/mountinfo': %s",
			 strerror(errno));
		return NULL;
	}
	rc = tfs_mountinfo_find(watch_path, 0, &ours);
	if (rc) {
		tfs_warn("atime: cannot find '%s' in mountinfo: %s; a remount "
			 "will not change the atime flags", watch_path,
			 strerror(-rc));
		goto out;
	}
	id = ours.id;
	watch_ours = ours;
	atomic_store(&watch_id, id);
	/* Outside the main thread: should the path walk ever need this
	 * mount to answer, the session loop is there to do it. */
	if (sys_mount_setattr(watch_path, &set))
		tfs_info("atime: cannot set the mount's flags to %s: %s",
			 mode_name(set.attr_set), strerror(errno));
	if (find_ours(id, &ours, &mi))
		goto out;
	seen = parse_flags(mi.mnt_opts);
	adopt_readonly(opts_have(mi.sb_opts, "ro"));

	pfd[0].events = POLLPRI;
	pfd[1].fd = watch_stop[0];
	pfd[1].events = POLLIN;
	for (;;) {
		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			tfs_warn("atime: cannot poll mountinfo: %s",
				 strerror(errno));
			break;
		}
		if (pfd[1].revents)
			break;
		if (!(pfd[0].revents & (POLLPRI | POLLERR)))
			continue;
		rc = find_ours(id, &ours, &mi);
		if (rc == -ENOENT) {
			/* It never comes back: what it said last holds. */
			tfs_info("atime: '%s' is no longer mounted here; the "
				 "atime mode stays %s", watch_path,
				 mode_name(seen));
			break;
		}
		if (rc)
			continue;
		adopt_readonly(opts_have(mi.sb_opts, "ro"));
		if (parse_flags(mi.mnt_opts) == seen)
			continue;
		seen = parse_flags(mi.mnt_opts);
		adopt(seen);
		tfs_notice("atime: the mount is now %s%s", mode_name(seen),
			   seen & MOUNT_ATTR_NODIRATIME ? ",nodiratime" : "");
	}
out:
	close(pfd[0].fd);
	return NULL;
}

int tfs_atime_start(const char *mountpoint)
{
	int rc;

	adopt(want.attr_set);
	/* libfuse passed -o ro on to mount(2). */
	atomic_store(&sb_readonly, !!(want.attr_set & MOUNT_ATTR_RDONLY));
	watch_path = strdup(mountpoint);
	if (!watch_path)
		return -ENOMEM;
	if (pipe2(watch_stop, O_CLOEXEC)) {
		rc = -errno;
		goto out_path;
	}
	rc = pthread_create(&watch_thread, NULL, watch_main, NULL);
	if (rc) {
		rc = -rc;
		goto out_pipe;
	}
	watching = true;
	return 0;
out_pipe:
	close(watch_stop[0]);
	close(watch_stop[1]);
	watch_stop[0] = watch_stop[1] = -1;
out_path:
	free(watch_path);
	watch_path = NULL;
	return rc;
}

void tfs_atime_stop(void)
{
	if (!watching)
		return;
	if (write(watch_stop[1], "", 1) < 0)
		tfs_warn("atime: cannot stop the watcher: %s", strerror(errno));
	pthread_join(watch_thread, NULL);
	watching = false;
	close(watch_stop[0]);
	close(watch_stop[1]);
	watch_stop[0] = watch_stop[1] = -1;
	free(watch_path);
	watch_path = NULL;
}

static int ts_cmp(const struct timespec *a, const struct timespec *b)
{
	if (a->tv_sec != b->tv_sec)
		return a->tv_sec < b->tv_sec ? -1 : 1;
	if (a->tv_nsec != b->tv_nsec)
		return a->tv_nsec < b->tv_nsec ? -1 : 1;
	return 0;
}

/* Whether a read of @i now changes its atime, and the time it would be. */
static bool atime_due(const struct tfs_inode *i, struct timespec *now)
{
	int mode = atomic_load(&atime_mode);

	if (mode == ATIME_NOATIME || (tfs_fsflags(i) & TFS_FL_NOATIME))
		return false;
	if (S_ISDIR(i->mode) && atomic_load(&atime_nodir))
		return false;
	tfs_now(now);
	/* The kernel's relatime_need_update(). */
	if (mode == ATIME_RELATIME && ts_cmp(&i->mtime, &i->atime) < 0 &&
	    ts_cmp(&i->ctime, &i->atime) < 0 &&
	    now->tv_sec - i->atime.tv_sec < 24 * 3600)
		return false;
	return true;
}

bool tfs_atime_due_locked(const struct tfs_inode *i)
{
	struct timespec now;

	return atime_due(i, &now);
}

void tfs_atime_note_locked(struct tfs_inode *i)
{
	struct timespec now;

	if (atime_due(i, &now))
		i->atime = now;
}

/*
 * The superblock's read-only flag, alone: reconfigure_super() refuses to
 * make it read-only (EBUSY) while a file is open for writing through any
 * mount of it, and fuse_reconfigure() takes no other change.
 */
static int set_sb_readonly(const char *mountpoint, bool ro)
{
	int fd, rc = 0;

	fd = sys_fspick(mountpoint);
	if (fd < 0)
		return -errno;
	if (sys_fsconfig(fd, FSCONFIG_SET_FLAG, ro ? "ro" : "rw") ||
	    sys_fsconfig(fd, FSCONFIG_CMD_RECONFIGURE, NULL))
		rc = -errno;
	close(fd);
	return rc;
}

int tfs_remount(const char *mountpoint)
{
	struct tfs_mountinfo mi;
	bool ro = want.attr_set & MOUNT_ATTR_RDONLY;
	int rc;

	rc = tfs_mountinfo_find(mountpoint, 0, &mi);
	if (rc || strcmp(mi.fstype, "fuse.tierfs")) {
		fprintf(stderr, "tierfs: %s: not a tierfs mount, nothing to "
				"remount\n", mountpoint);
		return -EINVAL;
	}
	if (!want.attr_clr)
		return 0;
	if (want.attr_clr & MOUNT_ATTR_RDONLY) {
		rc = set_sb_readonly(mountpoint, ro);
		if (rc == -EBUSY && ro) {
			fprintf(stderr, "tierfs: %s: cannot remount read-only: "
					"files are open for writing\n",
				mountpoint);
			return rc;
		}
		if (rc) {
			fprintf(stderr, "tierfs: %s: cannot remount %s: %s\n",
				mountpoint, ro ? "read-only" : "read-write",
				strerror(-rc));
			return rc;
		}
	}
	if (sys_mount_setattr(mountpoint, &want)) {
		rc = -errno;
		fprintf(stderr, "tierfs: %s: cannot remount: %s\n", mountpoint,
			strerror(-rc));
		return rc;
	}
	return 0;
}
