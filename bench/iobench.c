// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * iobench: the data-path measurements of bench/run, one process, no fork
 * per file, so the figure is the filesystem's and not the shell's.
 *
 *	iobench [-b BS] [-i SRC] [-n OPS] [-S] JOB...
 *
 * A JOB is one of
 *	r:PATH		read PATH sequentially in BS blocks, fresh open
 *	w:PATH:SIZE	create PATH and write SIZE bytes (K/M/G) in BS
 *			blocks, from SRC's bytes (repeated), then close
 *	rr:PATH		OPS random BS-aligned preads of BS bytes
 *
 * Jobs run in parallel, one thread each, or one after another with -S.
 * Buffers are faulted in before the clock starts. Prints one line:
 *
 *	bytes=B ops=N secs=S mbps=M iops=I
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum job_kind { JOB_READ, JOB_WRITE, JOB_RANDREAD };

struct job {
	enum job_kind kind;
	const char *path;
	uint64_t size; /* bytes to write */
	uint64_t bytes; /* result: bytes moved */
	uint64_t ops; /* result: requests issued */
	int err; /* result: 0 or errno */
	pthread_t thread;
};

static size_t bs = 1 << 20;
static uint64_t nops = 10000;
static const unsigned char *src;
static size_t src_len;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	switch (*end) {
	case 'G': case 'g':
		v <<= 10;
		/* fall through */
	case 'M': case 'm':
		v <<= 10;
		/* fall through */
	case 'K': case 'k':
		v <<= 10;
		break;
	default:
		break;
	}
	return v;
}

/* Populated up front: first touch costs far more than a copy here. */
static void *fresh_buf(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static int do_read(struct job *j)
{
	unsigned char *buf = fresh_buf(bs);
	int fd, rc = 0;

	if (!buf)
		return ENOMEM;
	fd = open(j->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno;
		goto out;
	}
	for (;;) {
		ssize_t n = read(fd, buf, bs);

		if (n < 0) {
			rc = errno;
			break;
		}
		if (!n)
			break;
		j->bytes += (uint64_t)n;
		j->ops++;
	}
	close(fd);
out:
	munmap(buf, bs);
	return rc;
}

static int do_write(struct job *j)
{
	int fd, rc = 0;
	uint64_t off = 0;

	fd = open(j->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return errno;
	while (off < j->size) {
		size_t len = bs, at = (size_t)(off % src_len);
		ssize_t n;

		if (len > j->size - off)
			len = (size_t)(j->size - off);
		if (len > src_len - at)
			len = src_len - at;
		n = write(fd, src + at, len);
		if (n <= 0) {
			rc = n < 0 ? errno : EIO;
			break;
		}
		off += (uint64_t)n;
		j->ops++;
	}
	j->bytes = off;
	/* close waits for FUSE flush, where tierfs places the buffer. */
	if (close(fd) && !rc)
		rc = errno;
	return rc;
}

static uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static int do_randread(struct job *j)
{
	unsigned char *buf = fresh_buf(bs);
	uint64_t seed = 0x9e3779b97f4a7c15ULL, blocks;
	struct stat st;
	int fd, rc = 0;

	if (!buf)
		return ENOMEM;
	fd = open(j->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = errno;
		goto out;
	}
	if (fstat(fd, &st) || st.st_size < (off_t)bs) {
		rc = st.st_size < (off_t)bs ? EINVAL : errno;
		goto out_close;
	}
	/* Random access: keep the kernel from reading ahead for us. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	blocks = (uint64_t)st.st_size / bs;
	for (uint64_t k = 0; k < nops; k++) {
		off_t off = (off_t)((xorshift(&seed) % blocks) * bs);
		ssize_t n = pread(fd, buf, bs, off);

		if (n < 0) {
			rc = errno;
			break;
		}
		j->bytes += (uint64_t)n;
		j->ops++;
	}
out_close:
	close(fd);
out:
	munmap(buf, bs);
	return rc;
}

static void *run_job(void *arg)
{
	struct job *j = arg;

	switch (j->kind) {
	case JOB_READ:
		j->err = do_read(j);
		break;
	case JOB_WRITE:
		j->err = do_write(j);
		break;
	case JOB_RANDREAD:
		j->err = do_randread(j);
		break;
	}
	return NULL;
}

static int parse_job(char *arg, struct job *j)
{
	char *colon = strchr(arg, ':');
	char *last;

	if (!colon)
		return -EINVAL;
	*colon = '\0';
	j->path = colon + 1;
	if (!strcmp(arg, "r")) {
		j->kind = JOB_READ;
	} else if (!strcmp(arg, "rr")) {
		j->kind = JOB_RANDREAD;
	} else if (!strcmp(arg, "w")) {
		j->kind = JOB_WRITE;
		last = strrchr(j->path, ':');
		if (!last)
			return -EINVAL;
		*last = '\0';
		j->size = parse_size(last + 1);
	} else {
		return -EINVAL;
	}
	return 0;
}

static int load_src(const char *path)
{
	unsigned char *buf;
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	size_t got = 0;

	if (fd < 0 || fstat(fd, &st) || st.st_size <= 0) {
		fprintf(stderr, "iobench: cannot open '%s': %s\n", path,
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	buf = fresh_buf((size_t)st.st_size);
	while (buf && got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (!buf || got != (size_t)st.st_size) {
		fprintf(stderr, "iobench: cannot read '%s'\n", path);
		return -1;
	}
	src = buf;
	src_len = got;
	return 0;
}

int main(int argc, char **argv)
{
	const char *src_path = NULL;
	bool serial = false, writes = false;
	struct job *jobs;
	uint64_t bytes = 0, ops = 0;
	int opt, njobs, rc = 0;
	double t0, secs;

	while ((opt = getopt(argc, argv, "b:i:n:S")) != -1) {
		switch (opt) {
		case 'b':
			bs = (size_t)parse_size(optarg);
			break;
		case 'i':
			src_path = optarg;
			break;
		case 'n':
			nops = strtoull(optarg, NULL, 0);
			break;
		case 'S':
			serial = true;
			break;
		default:
			goto usage;
		}
	}
	njobs = argc - optind;
	if (njobs < 1 || !bs)
		goto usage;
	jobs = calloc((size_t)njobs, sizeof(*jobs));
	if (!jobs)
		return 1;
	for (int k = 0; k < njobs; k++) {
		if (parse_job(argv[optind + k], &jobs[k]))
			goto usage;
		writes |= jobs[k].kind == JOB_WRITE;
	}
	if (writes) {
		if (src_path) {
			if (load_src(src_path))
				return 1;
		} else {
			src_len = 1 << 24;
			src = fresh_buf(src_len);
			if (!src)
				return 1;
			memset((void *)src, 'x', src_len);
		}
	}
	t0 = now();
	for (int k = 0; k < njobs; k++) {
		if (serial) {
			run_job(&jobs[k]);
		} else if (pthread_create(&jobs[k].thread, NULL, run_job,
					  &jobs[k])) {
			fprintf(stderr, "iobench: cannot start a thread\n");
			return 1;
		}
	}
	if (!serial)
		for (int k = 0; k < njobs; k++)
			pthread_join(jobs[k].thread, NULL);
	secs = now() - t0;
	for (int k = 0; k < njobs; k++) {
		if (jobs[k].err) {
			fprintf(stderr, "iobench: '%s': %s\n", jobs[k].path,
				strerror(jobs[k].err));
			rc = 1;
		}
		bytes += jobs[k].bytes;
		ops += jobs[k].ops;
	}
	printf("bytes=%" PRIu64 " ops=%" PRIu64 " secs=%.6f mbps=%.1f "
	       "iops=%.0f\n", bytes, ops, secs, (double)bytes / 1e6 / secs,
	       (double)ops / secs);
	free(jobs);
	return rc;
usage:
	fprintf(stderr, "usage: iobench [-b BS] [-i SRC] [-n OPS] [-S] "
			"r:PATH | w:PATH:SIZE | rr:PATH ...\n");
	return 2;
}
