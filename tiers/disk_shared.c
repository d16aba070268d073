// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * What a shared tier adds to the disk tier: a directory several mounts or
 * nodes share, in which each mount has its own directory with a MANIFEST
 * saying how its spill files are laid out, and hand-off names by which
 * another tierfs adopts a spilled file without copying a byte: a hard
 * link, as dask-cuda's shared_filesystem spilling does with os.link().
 *
 * A hand-off is safe because a shared tier's spill files are never
 * rewritten: the store writes one whole when a buffer moves down to the
 * tier and removes it when the copy goes (store_disk.c writes in place only
 * on the first disk tier). An adopter's link keeps the inode, and the bytes
 * it had, whatever the first mount does next.
 *
 *   <path>/tierfs-shared.<node>.<tag>.<random>/     0700, the daemon's user
 *       MANIFEST          "tierfs-shared 1", chunk_size, block, node, pid
 *       lock              flock'd while the mount lives
 *       <id>              spill files, the format of disk.c
 *       h.<id>.<size>.<token>   hand-off names: hard links to <id>
 */
#include <unistd.h>

#include "tiers/disk_i.h"

#define MANIFEST "MANIFEST"
#define MANIFEST_MAGIC "tierfs-shared 1"
#define HANDOFF_PREFIX "h."

void tier_shared_node(char *buf, size_t len)
{
	char host[256] = "";
	size_t n = 0;

	if (gethostname(host, sizeof(host) - 1))
		host[0] = '\0';
	for (size_t i = 0; host[i] && n + 1 < len && n < SHARED_NODE_MAX;
	     i++) {
		char c = host[i];

		buf[n++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
					   (c >= '0' && c <= '9') || c == '-' ?
				   c :
				   '-';
	}
	if (!n && len > 4)
		n = (size_t)snprintf(buf, len, "node");
	buf[n] = '\0';
}

int tier_shared_manifest(struct tier_disk *d)
{
	char node[SHARED_NODE_MAX + 1], text[256];
	int fd, n, rc = 0;

	tier_shared_node(node, sizeof(node));
	n = snprintf(text, sizeof(text),
		     MANIFEST_MAGIC "\nchunk_size %" PRIu32 "\nblock %" PRIu32
				    "\nnode %s\npid %ld\n",
		     d->chunk_size, d->blk, node, (long)getpid());
	fd = openat(d->dirfd, MANIFEST ".tmp",
		    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, text, (size_t)n) != n)
		rc = errno ? -errno : -EIO;
	close(fd);
	/* Whole or not at all: a reader never sees half a manifest. */
	if (!rc && renameat(d->dirfd, MANIFEST ".tmp", d->dirfd, MANIFEST))
		rc = -errno;
	if (rc)
		unlinkat(d->dirfd, MANIFEST ".tmp", 0);
	return rc;
}

bool tier_disk_shared(const struct tier_disk *d)
{
	return d->shared;
}

/* The value after "@key " on a line of @text, or 0. */
static uint64_t manifest_num(const char *text, const char *key)
{
	size_t kl = strlen(key);

	for (const char *p = text; p && *p; p = strchr(p, '\n')) {
		if (*p == '\n')
			p++;
		if (!strncmp(p, key, kl) && p[kl] == ' ')
			return strtoull(p + kl + 1, NULL, 10);
	}
	return 0;
}

/* Whether the directory @dfd is a shared tier's of @d's format: 0,
 * -EPERM when it is no tierfs directory, -EPROTO for another format. */
static int manifest_check(const struct tier_disk *d, int dfd)
{
	char text[512];
	struct stat st;
	ssize_t n;
	int fd, rc = 0;

	fd = openat(dfd, MANIFEST, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -EPERM : -errno;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		close(fd);
		return -EPERM;
	}
	n = pread(fd, text, sizeof(text) - 1, 0);
	close(fd);
	if (n < 0)
		return -errno;
	text[n] = '\0';
	if (strncmp(text, MANIFEST_MAGIC "\n", strlen(MANIFEST_MAGIC) + 1))
		rc = -EPERM;
	else if (manifest_num(text, "chunk_size") != d->chunk_size ||
		 manifest_num(text, "block") != d->blk)
		rc = -EPROTO;
	return rc;
}

static int handoff_name(char *buf, size_t len, uint64_t id, uint64_t size,
			uint64_t token)
{
	int n = snprintf(buf, len, HANDOFF_PREFIX "%" PRIu64 ".%" PRIu64
						  ".%016" PRIx64,
			 id, size, token);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int tier_dobj_handoff(struct tier_disk *d, struct tier_dobj *o, uint64_t id,
		      uint64_t size, uint64_t *token, char *buf, size_t len)
{
	char name[96];
	int rc;

	if (!d->shared)
		return -EOPNOTSUPP;
	while (!*token) {
		if (getrandom(token, sizeof(*token), 0) != sizeof(*token))
			return -EIO;
	}
	rc = handoff_name(name, sizeof(name), id, size, *token);
	if (rc)
		return rc;
	if (linkat(d->dirfd, o->path + d->dirlen + 1, d->dirfd, name, 0) &&
	    errno != EEXIST) {
		rc = -errno;
		tfs_err("cannot make a hand-off name for spill file '%s': %s",
			o->path, strerror(-rc));
		return rc;
	}
	if (snprintf(buf, len, "%s/%s", d->dir, name) >= (int)len)
		return -ERANGE;
	return 0;
}

void tier_dobj_handoff_drop(struct tier_disk *d, uint64_t id, uint64_t size,
			    uint64_t token)
{
	char name[96];

	if (!token || handoff_name(name, sizeof(name), id, size, token))
		return;
	if (unlinkat(d->dirfd, name, 0) && errno != ENOENT)
		tfs_warn("cannot remove hand-off name '%s/%s': %s", d->dir, name,
			 strerror(errno));
}

/* Parse "h.<id>.<size>.<16 hex>" into *@size. */
static bool parse_handoff(const char *name, uint64_t *size)
{
	const char *p = name + strlen(HANDOFF_PREFIX);
	char *end;

	if (strncmp(name, HANDOFF_PREFIX, strlen(HANDOFF_PREFIX)) ||
	    *p < '0' || *p > '9')
		return false;
	errno = 0;
	strtoull(p, &end, 10);
	if (errno || *end != '.' || end[1] < '0' || end[1] > '9')
		return false;
	*size = strtoull(end + 1, &end, 10);
	if (errno || *end != '.' || strlen(end + 1) != 16 ||
	    strspn(end + 1, "0123456789abcdef") != 16)
		return false;
	return true;
}

/*
 * The meta word of chunk @idx from its header as the file holds it: 0
 * when the slot is a hole (never written), and for a header that does not
 * check out one that makes every read of the chunk fail its checks (EIO,
 * and a log line naming the file), never one that reads wrong bytes.
 */
static uint32_t scan_chunk(const struct tier_disk *d, int fd, uint64_t idx)
{
	const uint32_t bad = HDR | ((uint32_t)ENC_LZ4 << META_ENC_SHIFT);
	struct chunk_codec c = codec_of(d);
	struct chunk_hdr h;
	uint32_t mlen, stored, m;
	off_t off = chunk_off(d, idx);
	ssize_t n;

	if (off < 0)
		return bad;
	n = pread(fd, &h, sizeof(h), off);
	if (n <= 0 || (n == sizeof(h) && all_zero(&h, sizeof(h))))
		return 0;
	if (n != sizeof(h))
		return bad;
	mlen = (le16toh(h.flags) & HDR_F_MAP) ? map_len(d) : 0;
	stored = le32toh(h.stored_len);
	if (h.encoding < ENC_ZERO || h.encoding > ENC_LZ4 ||
	    stored > (uint32_t)LZ4_compressBound((int)d->chunk_size))
		return bad;
	m = (HDR + mlen + stored) | (mlen ? META_MAP : 0) |
	    ((uint32_t)h.encoding << META_ENC_SHIFT);
	return chunk_check_hdr(&c, &h, idx, m) ? bad : m;
}

int tier_dobj_adopt_link(struct tier_disk *d, const char *path, size_t len,
			 uint64_t id, uint64_t *size, struct tier_dobj **out)
{
	char buf[PATH_MAX], dname[NAME_MAX + 1], *slash;
	const char *rest;
	struct tier_dobj *o = NULL;
	struct stat a, b;
	uint64_t nchunks, sz = 0;
	int dfd = -1, fd = -1, rc;

	while (len && (path[len - 1] == '\n' || path[len - 1] == '\0'))
		len--;
	if (!d->shared)
		return -EOPNOTSUPP;
	if (!len || len >= sizeof(buf) || memchr(path, '\0', len))
		return -EINVAL;
	memcpy(buf, path, len);
	buf[len] = '\0';
	/* <d's parent>/tierfs-shared.*\/h.* and nothing else. */
	if (strncmp(buf, d->dir, d->baselen) || buf[d->baselen] != '/')
		return buf[0] == '/' ? -EXDEV : -EINVAL;
	rest = buf + d->baselen + 1;
	slash = strchr(rest, '/');
	if (!slash || strchr(slash + 1, '/') ||
	    (size_t)(slash - rest) >= sizeof(dname) ||
	    strncmp(rest, "tierfs-shared.", 14))
		return -EINVAL;
	memcpy(dname, rest, (size_t)(slash - rest));
	dname[slash - rest] = '\0';
	if (!parse_handoff(slash + 1, &sz))
		return -EINVAL;
	nchunks = (sz + d->chunk_size - 1) / d->chunk_size;
	if (nchunks > UINT32_MAX)
		return -EINVAL;
	dfd = tier_private_dir_open(d->basefd, dname, TIER_PDIR_OPEN);
	if (dfd < 0)
		return dfd == -ENOENT ? -ENOENT : -EPERM;
	rc = manifest_check(d, dfd);
	if (rc)
		goto out;
	fd = openat(dfd, slash + 1, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		rc = errno == ELOOP ? -EPERM : -errno;
		goto out;
	}
	if (fstat(fd, &a) || !S_ISREG(a.st_mode) || a.st_uid != geteuid()) {
		rc = -EPERM;
		goto out;
	}
	o = calloc(1, sizeof(*o) + d->dirlen + 22);
	if (!o) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(o->path, d->dirlen + 22, "%s/%" PRIu64, d->dir, id);
	o->fd = -1;
	o->cap = 2;
	rc = meta_grow(o, nchunks);
	if (rc)
		goto out;
	for (uint64_t i = 0; i < nchunks; i++) {
		uint32_t m = scan_chunk(d, fd, i);

		meta_of(o)[i] = m;
		o->stored += meta_cost(d, m);
	}
	/* The name adopted is the file opened: nobody but this user can
	 * write the directories, and the inodes are compared. */
	if (linkat(dfd, slash + 1, d->dirfd, o->path + d->dirlen + 1, 0)) {
		rc = -errno;
		goto out;
	}
	if (fstatat(d->dirfd, o->path + d->dirlen + 1, &b,
		    AT_SYMLINK_NOFOLLOW) ||
	    b.st_ino != a.st_ino || b.st_dev != a.st_dev) {
		unlinkat(d->dirfd, o->path + d->dirlen + 1, 0);
		rc = -EPERM;
		goto out;
	}
	*size = sz;
	*out = o;
	o = NULL;
out:
	if (o)
		tier_dobj_close(d, o);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	return rc;
}
