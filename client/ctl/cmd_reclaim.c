// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl reclaim: ask a mount to give GPU memory back (TFS_IOC_RECLAIM),
 * for a GPU job about to start on a GPU tierfs shares. The ioctl is made on
 * the mount's root directory: opening a directory registers no buffer, so
 * this still moves nothing but what the reclaim itself spills.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

/* "1G", "512M", "1.5GiB", "4096": bytes, with K/M/G/T as powers of 1024,
 * as the daemon's sizes are written. False for anything else. */
static bool parse_size(const char *s, uint64_t *out)
{
	unsigned long long whole;
	double frac = 0, v;
	char *end;
	int shift = 0;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	whole = strtoull(s, &end, 10);
	if (errno)
		return false;
	if (*end == '.') {
		char *fend;

		frac = strtod(end, &fend);
		if (fend == end + 1)
			return false;
		end = fend;
	}
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (shift && end[0] == 'i' && end[1] == 'B')
		end += 2;
	else if (shift && (end[0] == 'B' || end[0] == 'b'))
		end++;
	else if (!shift && (end[0] == 'B' || end[0] == 'b'))
		end++;
	if (*end)
		return false;
	v = ((double)whole + frac) * (double)(1ull << shift);
	if (v >= 18446744073709551616.0 || (!shift && frac))
		return false;
	*out = (uint64_t)v;
	return true;
}

int cmd_reclaim(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "gpu", required_argument, NULL, 'g' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	struct tfs_ioc_reclaim r;
	char want[32], got[32];
	uint64_t bytes, gpu;
	bool quiet = false;
	char *root, *arg;
	int c, fd, rc = EXIT_FAIL;
	dev_t dev;

	memset(&r, 0, sizeof(r));
	r.version = TFS_ABI_VERSION;
	r.gpu = -1;
	while ((c = ctl_next_opt(argc, argv, "g:q", opts)) != -1) {
		switch (c) {
		case 'g':
			if (!ctl_parse_u64(optarg, &gpu) || gpu > INT_MAX)
				return ctl_bad_usage("--gpu '%s': not a GPU "
						     "number", optarg);
			r.gpu = (int32_t)gpu;
			break;
		case 'q':
			quiet = true;
			break;
		}
	}
	if (argc - optind != 2)
		return ctl_bad_usage("needs a mount and a size");
	if (!parse_size(argv[optind + 1], &bytes) || !bytes)
		return ctl_bad_usage("'%s': not a size (such as 512M or 2G)",
				     argv[optind + 1]);
	r.bytes = bytes;
	arg = ctl_pick_mount(argv[optind]);
	if (!arg)
		return EXIT_FAIL;
	/* Root's ioctl goes to the mount's root, not whatever a user may
	 * have put at a path on the way to it. */
	fd = ctl_open_mount_root(arg, &root, &dev);
	free(arg);
	if (fd < 0)
		return EXIT_FAIL;
	if (ioctl(fd, TFS_IOC_RECLAIM, &r) < 0) {
		int e = errno;

		if (e == ENODEV)
			ctl_op_error("'%s' has no device tier", root);
		else if (e == ENXIO)
			ctl_op_error("'%s' does not use gpu %d", root, r.gpu);
		else if (e == ENOTTY)
			ctl_op_error("'%s': the daemon does not know reclaim "
				     "(older than this tierfsctl)", root);
		else
			ctl_op_error("'%s': %s", root, strerror(e));
		close(fd);
		goto out;
	}
	close(fd);
	ctl_fmt_bytes(want, sizeof(want), (double)bytes);
	ctl_fmt_bytes(got, sizeof(got), (double)r.freed);
	if (r.freed < bytes) {
		ctl_op_error("gpu %d: gave back %s of %s: tierfs holds no "
			     "more there that can move", r.gpu, got, want);
		goto out;
	}
	if (!quiet)
		printf("gpu %d: gave back %s (%llu bytes)\n", r.gpu, got,
		       (unsigned long long)r.freed);
	rc = 0;
out:
	free(root);
	return rc;
}
