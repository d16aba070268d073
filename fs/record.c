// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The mount's record under /run/tierfs, and what it is for: telling whose a
 * dead mount was. A FUSE mount outlives a daemon killed with -9 ("Transport
 * endpoint is not connected"), and nothing in the kernel says which process
 * served it. The daemon writes, once mounted, which mount it made (its id
 * and device in mountinfo), its pid and the systemd unit run it belongs to
 * ($INVOCATION_ID), and removes the record at a clean exit. Then
 *   - a new tierfs on a dead mount names the pid that is gone;
 *   - the unit's ExecStopPost (tierfs --unmount-dead MNT) unmounts the dead
 *     mount of its own run, and nothing else: not a live mount from fstab
 *     whose daemon refused to start a second time, not another unit's.
 * /run is root's and a tmpfs: a record never outlives a boot, and a daemon
 * that is not root keeps none.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs_i.h"

#define RUN_DIR "/run/tierfs"

/* FNV-1a of the mount point: the record's name. */
static uint64_t name_hash(const char *p)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	return h;
}

static void record_name(const char *mnt, char *buf, size_t len)
{
	snprintf(buf, len, "mount.%016llx",
		 (unsigned long long)name_hash(mnt));
}

/* RUN_DIR, made when missing: root's, a directory, no symlink. */
static int run_dir(bool create)
{
	struct stat st;
	int fd;

	if (geteuid() != 0)
		return -EPERM;
	if (create && mkdir(RUN_DIR, 0755) && errno != EEXIST)
		return -errno;
	fd = open(RUN_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_uid != 0 || (st.st_mode & 022)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* The mount point on one line: newlines and backslashes escaped. */
static void one_line(const char *in, char *out, size_t len)
{
	size_t n = 0;

	for (; *in && n + 5 < len; in++) {
		if (*in == '\n' || *in == '\\')
			n += (size_t)snprintf(out + n, len - n, "\\%03o",
					      (unsigned char)*in);
		else
			out[n++] = *in;
	}
	out[n] = '\0';
}

int tfs_record_write(const char *mnt)
{
	char name[32], tmp[64], esc[4 * 4096], buf[sizeof(esc) + 256];
	const char *inv = getenv("INVOCATION_ID");
	struct tfs_mountinfo mi;
	int dfd, fd, n, rc;

	rc = tfs_mountinfo_find(mnt, 0, &mi);
	if (rc)
		return rc;
	dfd = run_dir(true);
	if (dfd < 0)
		return dfd;
	record_name(mnt, name, sizeof(name));
	snprintf(tmp, sizeof(tmp), ".%s.%ld", name, (long)getpid());
	one_line(mnt, esc, sizeof(esc));
	n = snprintf(buf, sizeof(buf),
		     "pid=%ld\nmount_id=%d\ndev=%u:%u\ninvocation=%s\n"
		     "mount=%s\n",
		     (long)getpid(), mi.id, mi.major, mi.minor,
		     inv ? inv : "", esc);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW |
				      O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = -errno;
		goto out_dir;
	}
	rc = write(fd, buf, (size_t)n) == n ? 0 : -EIO;
	close(fd);
	if (!rc && renameat(dfd, tmp, dfd, name))
		rc = -errno;
	if (rc)
		unlinkat(dfd, tmp, 0);
out_dir:
	close(dfd);
	return rc;
}

int tfs_record_read(const char *mnt, struct tfs_record *r)
{
	char name[32], buf[4 * 4096 + 256], *line, *save;
	ssize_t n;
	int dfd, fd, rc = 0;

	memset(r, 0, sizeof(*r));
	dfd = run_dir(false);
	if (dfd < 0)
		return dfd;
	record_name(mnt, name, sizeof(name));
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -ENOENT;
	buf[n] = '\0';
	for (line = strtok_r(buf, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (sscanf(line, "pid=%ld", &r->pid) == 1 ||
		    sscanf(line, "mount_id=%d", &r->mount_id) == 1 ||
		    sscanf(line, "dev=%u:%u", &r->major, &r->minor) == 2)
			continue;
		if (!strncmp(line, "invocation=", 11))
			snprintf(r->invocation, sizeof(r->invocation), "%s",
				 line + 11);
		else if (!strncmp(line, "mount=", 6))
			snprintf(r->mount, sizeof(r->mount), "%s", line + 6);
	}
	/* Another mount point with the same hash, or a damaged file. */
	char esc[sizeof(r->mount)];

	one_line(mnt, esc, sizeof(esc));
	if (!r->pid || strcmp(r->mount, esc))
		rc = -ENOENT;
	return rc;
}

bool tfs_record_names(const struct tfs_record *r,
		      const struct tfs_mountinfo *mi)
{
	return r->pid && r->mount_id == mi->id && r->major == mi->major &&
	       r->minor == mi->minor;
}

void tfs_record_drop(const char *mnt)
{
	struct tfs_record r;
	char name[32];
	int dfd;

	/* Only our own: another daemon may have mounted there since. */
	if (tfs_record_read(mnt, &r) || r.pid != (long)getpid())
		return;
	dfd = run_dir(false);
	if (dfd < 0)
		return;
	record_name(mnt, name, sizeof(name));
	unlinkat(dfd, name, 0);
	close(dfd);
}

/* A process @pid exists (one we may not signal counts). */
static bool alive(long pid)
{
	return pid > 0 && (!kill((pid_t)pid, 0) || errno == EPERM);
}

int tfs_unmount_dead(const char *arg)
{
	const char *inv = getenv("INVOCATION_ID");
	struct tfs_mountinfo mi;
	struct tfs_record r;
	char *mnt;
	bool known, ours;
	int rc = 0;

	mnt = realpath(arg, NULL);
	if (!mnt && errno == ENOTCONN && arg[0] == '/')
		mnt = strdup(arg);
	if (!mnt) {
		/* Nothing there to unmount, whatever it is. */
		return 0;
	}
	if (tfs_mountinfo_find(mnt, 0, &mi)) {
		/* Not mounted: the daemon unmounted it as it stopped. */
		goto out;
	}
	if (strcmp(mi.fstype, "fuse.tierfs")) {
		fprintf(stderr, "tierfs: %s: left as it is: a %s mount, not "
				"tierfs\n", mnt, mi.fstype);
		rc = 1;
		goto out;
	}
	known = !tfs_record_read(mnt, &r) && tfs_record_names(&r, &mi);
	ours = known && inv && *inv && !strcmp(r.invocation, inv);
	if (!ours) {
		if (known && alive(r.pid))
			fprintf(stderr, "tierfs: %s: left mounted: tierfs pid "
					"%ld serves it, and this unit did not "
					"start it\n", mnt, r.pid);
		else if (known)
			fprintf(stderr, "tierfs: %s: left mounted: a dead "
					"tierfs mount (pid %ld is gone) that "
					"this unit did not make; unmount it "
					"with fusermount3 -u %s\n",
				mnt, r.pid, mnt);
		else
			fprintf(stderr, "tierfs: %s: left mounted: a tierfs "
					"mount this unit did not make\n", mnt);
		rc = 1;
		goto out;
	}
	if (alive(r.pid)) {
		fprintf(stderr, "tierfs: %s: left mounted: its daemon, pid "
				"%ld, still runs\n", mnt, r.pid);
		rc = 1;
		goto out;
	}
	/* Lazily: a process may still sit in the dead mount. */
	if (umount2(mnt, MNT_DETACH)) {
		fprintf(stderr, "tierfs: %s: cannot unmount the mount of "
				"tierfs pid %ld, which died: %s\n", mnt,
			r.pid, strerror(errno));
		rc = 1;
		goto out;
	}
	fprintf(stderr, "tierfs: %s: unmounted the mount of tierfs pid %ld, "
			"which died\n", mnt, r.pid);
	{
		int dfd = run_dir(false);
		char name[32];

		if (dfd >= 0) {
			record_name(mnt, name, sizeof(name));
			unlinkat(dfd, name, 0);
			close(dfd);
		}
	}
out:
	free(mnt);
	return rc;
}
