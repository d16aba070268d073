// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * scalebench: one metadata operation over N files of one directory, timed
 * in slices, so that a cost that grows with the directory shows as a
 * later slice slower than the first.
 *
 *	scalebench OP DIR N [FROM]
 *
 * OP is one of
 *	create	open O_CREAT|O_EXCL + close of DIR/fNNNNNNN, FROM..N-1
 *	stat	stat of each
 *	readdir	getdents64 of DIR until its end, counting the entries
 *	unlink	unlink of each, FROM..N-1
 *
 * FROM (default 0) lets a caller grow a directory in steps. Prints one
 * line:
 *	op=OP files=K s=S us_per=U first_us=A last_us=B
 * where first_us and last_us are the cost per entry of the first and the
 * last tenth of the run (readdir: of the whole, twice).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int fail(const char *what, const char *path)
{
	fprintf(stderr, "scalebench: cannot %s '%s': %s\n", what, path,
		strerror(errno));
	return 1;
}

static int one(const char *op, const char *dir, long k)
{
	char path[4096];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/f%07ld", dir, k);
	if (!strcmp(op, "create")) {
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return fail("create", path);
		if (close(fd))
			return fail("close", path);
	} else if (!strcmp(op, "stat")) {
		if (stat(path, &st))
			return fail("stat", path);
	} else if (unlink(path)) {
		return fail("unlink", path);
	}
	return 0;
}

static long read_all(const char *dir)
{
	static char buf[64 * 1024];
	long count = 0;
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -fail("open", dir);
	for (;;) {
		long got = syscall(SYS_getdents64, fd, buf, sizeof(buf));

		if (got < 0) {
			close(fd);
			return -fail("read", dir);
		}
		if (!got)
			break;
		for (long off = 0; off < got;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);

			count++;
			off += d->d_reclen;
		}
	}
	close(fd);
	return count;
}

int main(int argc, char **argv)
{
	const char *op, *dir;
	double t0, t1, tb = 0, te = 0, tenth_a = 0, tenth_b = 0;
	long n, from = 0, slice;

	if (argc != 4 && argc != 5)
		goto usage;
	op = argv[1];
	dir = argv[2];
	n = strtol(argv[3], NULL, 0);
	if (argc == 5)
		from = strtol(argv[4], NULL, 0);
	if (n < 1 || from < 0 || from >= n)
		goto usage;
	if (!strcmp(op, "readdir")) {
		long c;

		t0 = now();
		c = read_all(dir);
		t1 = now();
		if (c < 0)
			return 1;
		printf("op=readdir files=%ld s=%.6f us_per=%.3f first_us=%.3f "
		       "last_us=%.3f\n", c, t1 - t0,
		       (t1 - t0) * 1e6 / (double)(c ? c : 1),
		       (t1 - t0) * 1e6 / (double)(c ? c : 1),
		       (t1 - t0) * 1e6 / (double)(c ? c : 1));
		return 0;
	}
	if (strcmp(op, "create") && strcmp(op, "stat") && strcmp(op, "unlink"))
		goto usage;
	slice = (n - from) / 10 > 0 ? (n - from) / 10 : 1;
	t0 = now();
	for (long k = from; k < n; k++) {
		if (k == from + slice)
			tenth_a = now() - t0;
		if (k == n - slice)
			tb = now();
		if (one(op, dir, k))
			return 1;
	}
	t1 = now();
	te = t1;
	tenth_b = te - tb;
	if (!tenth_a)
		tenth_a = t1 - t0;
	printf("op=%s files=%ld s=%.6f us_per=%.3f first_us=%.3f "
	       "last_us=%.3f\n", op, n - from, t1 - t0,
	       (t1 - t0) * 1e6 / (double)(n - from),
	       tenth_a * 1e6 / (double)slice, tenth_b * 1e6 / (double)slice);
	return 0;
usage:
	fprintf(stderr, "usage: scalebench create|stat|readdir|unlink DIR N "
		"[FROM]\n");
	return 2;
}
