// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * metabench: metadata cost of a filesystem, without a process per file.
 *
 *	metabench [-k] [-s BYTES] [-r PASSES] DIR N
 *
 * Creates N files in DIR (open O_CREAT, write BYTES, close), stats each,
 * unlinks each; -k keeps them (stops after create, for the daemon's memory
 * per file). -r adds PASSES of open O_RDONLY + read + close over every file
 * between the stats and the unlinks, timed apart and left out of total_s
 * and ops_per_s. Prints one line:
 *
 *	files=N create_s=S stat_s=S unlink_s=S total_s=S ops_per_s=R
 *	[reopen_s=S reopen_per_s=R]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
	fprintf(stderr, "metabench: cannot %s '%s': %s\n", what, path,
		strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	static const char payload[4096];
	bool keep = false;
	size_t bytes = 0;
	double t0, t1, t2, t3, r1, total;
	char path[4096], buf[4096];
	long n, passes = 0;
	struct stat st;
	int opt;

	while ((opt = getopt(argc, argv, "kr:s:")) != -1) {
		switch (opt) {
		case 'k':
			keep = true;
			break;
		case 'r':
			passes = strtol(optarg, NULL, 0);
			if (passes < 1)
				goto usage;
			break;
		case 's':
			bytes = strtoul(optarg, NULL, 0);
			if (bytes > sizeof(payload))
				goto usage;
			break;
		default:
			goto usage;
		}
	}
	if (argc - optind != 2)
		goto usage;
	n = strtol(argv[optind + 1], NULL, 0);
	if (n < 1)
		goto usage;

	t0 = now();
	for (long k = 0; k < n; k++) {
		int fd;

		snprintf(path, sizeof(path), "%s/f%07ld", argv[optind], k);
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			return fail("create", path);
		if (bytes && write(fd, payload, bytes) != (ssize_t)bytes)
			return fail("write", path);
		if (close(fd))
			return fail("close", path);
	}
	t1 = now();
	if (keep) {
		printf("files=%ld create_s=%.6f\n", n, t1 - t0);
		return 0;
	}
	for (long k = 0; k < n; k++) {
		snprintf(path, sizeof(path), "%s/f%07ld", argv[optind], k);
		if (stat(path, &st))
			return fail("stat", path);
	}
	t2 = now();
	for (long p = 0; p < passes; p++) {
		for (long k = 0; k < n; k++) {
			int fd;

			snprintf(path, sizeof(path), "%s/f%07ld", argv[optind],
				 k);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				return fail("open", path);
			if (read(fd, buf, sizeof(buf)) < 0)
				return fail("read", path);
			if (close(fd))
				return fail("close", path);
		}
	}
	r1 = now();
	for (long k = 0; k < n; k++) {
		snprintf(path, sizeof(path), "%s/f%07ld", argv[optind], k);
		if (unlink(path))
			return fail("unlink", path);
	}
	t3 = now();
	total = t3 - t0 - (r1 - t2);
	printf("files=%ld create_s=%.6f stat_s=%.6f unlink_s=%.6f "
	       "total_s=%.6f ops_per_s=%.0f", n, t1 - t0, t2 - t1, t3 - r1,
	       total, 3.0 * (double)n / total);
	if (passes)
		printf(" reopen_s=%.6f reopen_per_s=%.0f", r1 - t2,
		       (double)(passes * n) / (r1 - t2));
	printf("\n");
	return 0;
usage:
	fprintf(stderr, "usage: metabench [-k] [-s BYTES] [-r PASSES] DIR N\n");
	return 2;
}
