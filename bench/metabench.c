// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * metabench: metadata cost of a filesystem, without a process per file.
 *
 *	metabench [-k] [-s BYTES] DIR N
 *
 * Creates N files in DIR (open O_CREAT, write BYTES, close), stats each,
 * unlinks each; -k keeps them (stops after create, for the daemon's memory
 * per file). Prints one line:
 *
 *	files=N create_s=S stat_s=S unlink_s=S total_s=S ops_per_s=R
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
	double t0, t1, t2, t3;
	char path[4096];
	struct stat st;
	long n;
	int opt;

	while ((opt = getopt(argc, argv, "ks:")) != -1) {
		switch (opt) {
		case 'k':
			keep = true;
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
	for (long k = 0; k < n; k++) {
		snprintf(path, sizeof(path), "%s/f%07ld", argv[optind], k);
		if (unlink(path))
			return fail("unlink", path);
	}
	t3 = now();
	printf("files=%ld create_s=%.6f stat_s=%.6f unlink_s=%.6f "
	       "total_s=%.6f ops_per_s=%.0f\n", n, t1 - t0, t2 - t1, t3 - t2,
	       t3 - t0, 3.0 * (double)n / (t3 - t0));
	return 0;
usage:
	fprintf(stderr, "usage: metabench [-k] [-s BYTES] DIR N\n");
	return 2;
}
