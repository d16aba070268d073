// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl metrics: the stats of tierfs mounts in the Prometheus text format.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

struct metric {
	const char *name;
	const char *type;
	const char *help;
	/* "T.field" for per-tier ones, "deviceG.field" per GPU, else the key */
	const char *field;
	bool per_tier;
	bool per_gpu;
};

static const struct metric metrics[] = {
	{ "tierfs_tier_used_bytes", "gauge",
	  "Bytes held by buffer copies in the tier.", "used", true },
	{ "tierfs_tier_limit_bytes", "gauge",
	  "Configured size of the tier in bytes (0: no limit, or no such tier).",
	  "limit", true },
	{ "tierfs_tier_buffers", "gauge", "Buffers with a copy in the tier.",
	  "buffers", true },
	{ "tierfs_files", "gauge", "Buffers (regular files) alive.", "files",
	  false },
	{ "tierfs_logical_bytes", "gauge", "Sum of the sizes of all files.",
	  "logical_bytes", false },
	{ "tierfs_tier_spill_bytes_total", "counter",
	  "Bytes moved out of the tier to a lower one.", "spill_bytes", true },
	{ "tierfs_tier_unspill_bytes_total", "counter",
	  "Bytes moved into the tier from a lower one.", "unspill_bytes",
	  true },
	{ "tierfs_tier_written_bytes_total", "counter",
	  "Bytes copied into the tier to make copies (spills, unspills, "
	  "placements).", "written_bytes", true },
	{ "tierfs_tier_enospc_total", "counter",
	  "Writes refused with ENOSPC because the tier, the last that could "
	  "take them, had no room.", "enospc", true },
	{ "tierfs_tier_spills_total", "counter",
	  "Buffers moved out of the tier to a lower one.", "spills", true },
	{ "tierfs_tier_unspills_total", "counter",
	  "Buffers moved into the tier from a lower one.", "unspills", true },
	{ "tierfs_tier_promote_bytes_total", "counter",
	  "Bytes promotion brought up into the tier when it had room again.",
	  "promote_bytes", true },
	{ "tierfs_tier_promotes_total", "counter",
	  "Buffers promotion brought up into the tier when it had room again.",
	  "promotes", true },
	{ "tierfs_evict_nothing_movable_total", "counter",
	  "Scans for room that found every buffer in use (contention).",
	  "evict_nothing_movable", false },
	{ "tierfs_evict_move_errors_total", "counter",
	  "Moves to a lower tier that were tried and failed (trouble).",
	  "evict_move_errors", false },
	{ "tierfs_checksum_errors_total", "counter",
	  "Spill chunks that failed their checks.", "checksum_errors",
	  false },
	{ "tierfs_spill_read_errors_total", "counter",
	  "Reads of spill files the file system failed.",
	  "spill_read_errors", false },
	{ "tierfs_spill_write_errors_total", "counter",
	  "Writes of spill files the file system failed.",
	  "spill_write_errors", false },
	{ "tierfs_host_alloc_failures_total", "counter",
	  "Host chunks the system had no memory for.", "host_alloc_failures",
	  false },
	{ "tierfs_host_pool_bytes", "gauge",
	  "Free host chunks the daemon keeps for the next writes.",
	  "host.pool", false },
	{ "tierfs_disk_full", "gauge",
	  "1 while the disk tier is full and spilling pauses.", "disk.full",
	  false },
	{ "tierfs_disk_full_total", "counter",
	  "Times the disk tier became full.", "disk.full_count", false },
	{ "tierfs_device_reserve_bytes", "gauge",
	  "Device memory kept free for other processes.", "device.reserve",
	  false },
	{ "tierfs_device_free_bytes", "gauge",
	  "Device memory free at the last check.", "device.free", false },
	{ "tierfs_device_others_bytes", "gauge",
	  "Device memory other processes used at the last check.",
	  "device.others", false },
	{ "tierfs_device_room_bytes", "gauge",
	  "What the device tier may hold now: its limit, less while other "
	  "processes leave it less.", "device.room", false },
	{ "tierfs_device_yields_total", "counter",
	  "Spills to give other processes the device memory they need.",
	  "device.yields", false },
	{ "tierfs_device_yield_bytes_total", "counter",
	  "Bytes of device memory given back to other processes' pressure.",
	  "device.yield_bytes", false },
	{ "tierfs_device_reclaims_total", "counter",
	  "Reclaims of device memory asked for (TFS_IOC_RECLAIM).",
	  "device.reclaims", false },
	{ "tierfs_device_reclaimed_bytes_total", "counter",
	  "Bytes of device memory reclaims gave back.",
	  "device.reclaimed_bytes", false },
	{ "tierfs_gpu_used_bytes", "gauge",
	  "Bytes held by buffer copies in the GPU's device tier.", "used",
	  .per_gpu = true },
	{ "tierfs_gpu_limit_bytes", "gauge",
	  "Configured size of the GPU's device tier in bytes.", "limit",
	  .per_gpu = true },
	{ "tierfs_gpu_buffers", "gauge",
	  "Buffers with a copy in the GPU's device tier.", "buffers",
	  .per_gpu = true },
	{ "tierfs_gpu_room_bytes", "gauge",
	  "What the GPU's device tier may hold now: its limit, less while "
	  "other processes leave it less.", "room", .per_gpu = true },
	{ "tierfs_tier_reads_total", "counter",
	  "Reads the daemon served from the tier's copy (the kernel's page "
	  "cache answers the others).", "reads", true },
	{ "tierfs_tier_read_bytes_total", "counter",
	  "Bytes of reads the daemon served from the tier's copy.",
	  "read_bytes", true },
	{ "tierfs_gpu_reads_total", "counter",
	  "Reads the daemon served from the GPU's device copy.", "reads",
	  .per_gpu = true },
	{ "tierfs_gpu_read_bytes_total", "counter",
	  "Bytes of reads the daemon served from the GPU's device copy.",
	  "read_bytes", .per_gpu = true },
	{ "tierfs_prefetches_queued_total", "counter",
	  "Prefetches queued (TFS_IOC_PREFETCH; joining one queued already "
	  "is not counted).", "prefetch.queued", false },
	{ "tierfs_prefetches_done_total", "counter",
	  "Queued prefetches whose buffer reached its tier.", "prefetch.done",
	  false },
	{ "tierfs_prefetches_failed_total", "counter",
	  "Queued prefetches whose move failed.", "prefetch.failed", false },
	{ "tierfs_prefetches_skipped_total", "counter",
	  "Prefetches of buffers in the tier already: nothing queued.",
	  "prefetch.skipped", false },
	{ "tierfs_prefetches_cancelled_total", "counter",
	  "Queued prefetches dropped because their file was deleted first.",
	  "prefetch.cancelled", false },
	{ "tierfs_prefetch_pending", "gauge",
	  "Prefetches queued and not yet started.", "prefetch.pending",
	  false },
	{ "tierfs_prefetch_queue_max", "gauge",
	  "Prefetches the queue holds at most.", "prefetch.max", false },
	{ "tierfs_write_through_copies_total", "counter",
	  "Clean copies written down at close by the write_through policy.",
	  "write_through.copies", false },
	{ "tierfs_write_through_bytes_total", "counter",
	  "Bytes the write_through policy copied down.",
	  "write_through.bytes", false },
	{ "tierfs_write_through_pending", "gauge",
	  "Write-through copies queued and not yet written.",
	  "write_through.pending", false },
	{ "tierfs_write_through_errors_total", "counter",
	  "Write-through copies that failed; such a file is written at its "
	  "eviction, as under write_back.",
	  "write_through.errors", false },
	{ "tierfs_admission_rejects_total", "counter",
	  "Reads that admission kept off a full device tier.",
	  "admission.rejects", false },
};

/* Stats keys PREFIX.REASON, as one family labelled reason="REASON". */
static const struct {
	const char *name, *help, *prefix;
} reasons[] = {
	{ "tierfs_spills_skipped_total",
	  "Scans for room that found nothing movable: every buffer pinned, "
	  "leased or in use.", "spill_skipped." },
	{ "tierfs_spills_dropped_total",
	  "Buffers a scan for room did not move for want of room below: the "
	  "tier below refused them (no_room_below), or they were passed over "
	  "while the disk tier is full (disk_full).", "spill_dropped." },
	{ "tierfs_spills_failed_total",
	  "Moves down that failed with an error, by errno.", "spill_failed." },
};

/* Label values escape backslash, double quote and newline. */
static void prom_label(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

/* @mt for each GPU the mount's "gpus" key lists, labelled gpu="N". */
static void gpu_samples(FILE *f, const struct metric *mt, const char *mount,
			const struct ctl_stats *st)
{
	const char *p = ctl_stats_get(st, "gpus");

	while (p && *p) {
		size_t len = strcspn(p, ",");
		char key[64];
		uint64_t v;
		int g;

		if (len == 0 || len > 3 || sscanf(p, "%d", &g) != 1)
			return;
		snprintf(key, sizeof(key), "device%d.%s", g, mt->field);
		if (ctl_stats_u64(st, key, &v)) {
			fprintf(f, "%s{gpu=\"%d\",mount=", mt->name, g);
			prom_label(f, mount);
			fprintf(f, "} %" PRIu64 "\n", v);
		}
		p += len;
		if (*p == ',')
			p++;
	}
}

static void reason_samples(FILE *f, const char *name, const char *prefix,
			   const char *mount, const struct ctl_stats *st)
{
	size_t pl = strlen(prefix);

	for (size_t i = 0; i < st->n; i++) {
		const char *k = st->kv[i].key;
		uint64_t v;

		if (strncmp(k, prefix, pl) || !k[pl] ||
		    !ctl_stats_u64(st, k, &v))
			continue;
		fprintf(f, "%s{reason=", name);
		prom_label(f, k + pl);
		fputs(",mount=", f);
		prom_label(f, mount);
		fprintf(f, "} %" PRIu64 "\n", v);
	}
}

/* The "move_buckets" bounds of a mount: their count, up to @max. */
static int hist_bounds(const struct ctl_stats *st, char bounds[][24], int max)
{
	const char *p = ctl_stats_get(st, "move_buckets");
	int n = 0;

	while (p && *p && n < max) {
		size_t len = strcspn(p, ",");

		if (len == 0 || len >= 24)
			return n;
		snprintf(bounds[n++], 24, "%.*s", (int)len, p);
		p += len;
		if (*p == ',')
			p++;
	}
	return n;
}

/* The samples of one direction's histogram, from "move.F.T.*". */
static void hist_samples(FILE *f, const char *name, const char *from,
			 const char *to, const char *mount,
			 const struct ctl_stats *st)
{
	char key[96], bounds[32][24];
	const char *b;
	uint64_t count, sum_ns;
	int nb = hist_bounds(st, bounds, 32);

	snprintf(key, sizeof(key), "move.%s.%s.count", from, to);
	if (!ctl_stats_u64(st, key, &count))
		return;
	snprintf(key, sizeof(key), "move.%s.%s.sum_ns", from, to);
	if (!ctl_stats_u64(st, key, &sum_ns))
		sum_ns = 0;
	snprintf(key, sizeof(key), "move.%s.%s.buckets", from, to);
	b = ctl_stats_get(st, key);
	for (int i = 0; i < nb && b && *b; i++) {
		unsigned long long c = strtoull(b, NULL, 10);

		fprintf(f, "%s_bucket{from=\"%s\",to=\"%s\",le=\"%s\",mount=",
			name, from, to, bounds[i]);
		prom_label(f, mount);
		fprintf(f, "} %llu\n", c);
		b += strcspn(b, ",");
		if (*b == ',')
			b++;
	}
	fprintf(f, "%s_bucket{from=\"%s\",to=\"%s\",le=\"+Inf\",mount=",
		name, from, to);
	prom_label(f, mount);
	fprintf(f, "} %" PRIu64 "\n", count);
	fprintf(f, "%s_sum{from=\"%s\",to=\"%s\",mount=", name, from, to);
	prom_label(f, mount);
	fprintf(f, "} %.9f\n", (double)sum_ns / 1e9);
	fprintf(f, "%s_count{from=\"%s\",to=\"%s\",mount=", name, from, to);
	prom_label(f, mount);
	fprintf(f, "} %" PRIu64 "\n", count);
}

/* The bytes of one direction, from "move.F.T.bytes". */
static void dir_bytes_sample(FILE *f, const char *name, const char *from,
			     const char *to, const char *mount,
			     const struct ctl_stats *st)
{
	char key[96];
	uint64_t v;

	snprintf(key, sizeof(key), "move.%s.%s.bytes", from, to);
	if (!ctl_stats_u64(st, key, &v))
		return;
	fprintf(f, "%s{from=\"%s\",to=\"%s\",mount=", name, from, to);
	prom_label(f, mount);
	fprintf(f, "} %" PRIu64 "\n", v);
}

/*
 * Moves between tiers, per direction: spills (to a lower tier) and
 * unspills (to a higher one) as a histogram family each, and their bytes.
 */
static void moves_write(FILE *f, char **mounts, struct ctl_stats *st, int n)
{
	static const struct {
		const char *name, *type, *help;
		bool down, hist;
	} fam[] = {
		{ "tierfs_spill_duration_seconds", "histogram",
		  "Time a buffer took to move down, by direction.", true,
		  true },
		{ "tierfs_unspill_duration_seconds", "histogram",
		  "Time a buffer took to move up, by direction.", false,
		  true },
		{ "tierfs_spill_direction_bytes_total", "counter",
		  "Bytes of buffers moved down, by direction.", true, false },
		{ "tierfs_unspill_direction_bytes_total", "counter",
		  "Bytes of buffers moved up, by direction.", false, false },
	};

	for (size_t k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam[k].name,
			fam[k].help, fam[k].name, fam[k].type);
		for (int m = 0; m < n; m++) {
			struct ctl_tiers tl;

			ctl_stats_tiers(&st[m], &tl);
			for (unsigned int a = 0; a < tl.n; a++) {
				for (unsigned int b = 0; b < tl.n; b++) {
					if (a == b || (a < b) != fam[k].down)
						continue;
					if (fam[k].hist)
						hist_samples(f, fam[k].name,
							     tl.name[a],
							     tl.name[b],
							     mounts[m], &st[m]);
					else
						dir_bytes_sample(
							f, fam[k].name,
							tl.name[a], tl.name[b],
							mounts[m], &st[m]);
				}
			}
		}
	}
}

/*
 * The exposition format wants all samples of a family together after its
 * HELP and TYPE lines, so with several mounts the loop runs over families
 * first and mounts second.
 */
static void metrics_write(FILE *f, char **mounts, struct ctl_stats *st,
			  int n)
{
	fputs("# HELP tierfs_info Device tier backend of the mount (always 1).\n"
	      "# TYPE tierfs_info gauge\n",
	      f);
	for (int m = 0; m < n; m++) {
		const char *backend = ctl_stats_get(&st[m], "backend");
		const char *model = ctl_stats_get(&st[m], "device_model");

		fputs("tierfs_info{mount=", f);
		prom_label(f, mounts[m]);
		fputs(",backend=", f);
		prom_label(f, backend ? backend : "");
		fputs(",device_model=", f);
		prom_label(f, model ? model : "");
		fputs("} 1\n", f);
	}
	for (size_t i = 0; i < sizeof(metrics) / sizeof(metrics[0]); i++) {
		const struct metric *mt = &metrics[i];

		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", mt->name, mt->help,
			mt->name, mt->type);
		for (int m = 0; m < n; m++) {
			uint64_t v;

			if (mt->per_gpu) {
				gpu_samples(f, mt, mounts[m], &st[m]);
				continue;
			}
			if (!mt->per_tier) {
				if (!ctl_stats_u64(&st[m], mt->field, &v))
					continue;
				fprintf(f, "%s{mount=", mt->name);
				prom_label(f, mounts[m]);
				fprintf(f, "} %" PRIu64 "\n", v);
				continue;
			}
			struct ctl_tiers tl;

			/* The daemon's chain, not a list of our own. */
			ctl_stats_tiers(&st[m], &tl);
			for (unsigned int t = 0; t < tl.n; t++) {
				char key[64];

				snprintf(key, sizeof(key), "%s.%s",
					 tl.name[t], mt->field);
				if (!ctl_stats_u64(&st[m], key, &v))
					continue;
				fprintf(f, "%s{tier=\"%s\",mount=", mt->name,
					tl.name[t]);
				prom_label(f, mounts[m]);
				fprintf(f, "} %" PRIu64 "\n", v);
			}
		}
	}
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n",
			reasons[i].name, reasons[i].help, reasons[i].name);
		for (int m = 0; m < n; m++)
			reason_samples(f, reasons[i].name, reasons[i].prefix,
				       mounts[m], &st[m]);
	}
	moves_write(f, mounts, st, n);
}

/*
 * The directory @out is to be written in, opened, and its last component
 * in *@base (malloc'd); -1 with a message. Root runs this from cron, often
 * into a directory a node exporter shares: one that another user owns, or
 * may write without the sticky bit, could have its entries swapped between
 * two of our steps, and is refused as logrotate refuses such a directory.
 */
static int open_out_dir(const char *out, char **base)
{
	const char *slash = strrchr(out, '/');
	char *dir = slash ? ctl_xasprintf("%.*s",
					  slash > out ? (int)(slash - out) : 1,
					  out) :
			    ctl_xstrdup(".");
	struct stat st;
	int dfd;

	*base = ctl_xstrdup(slash ? slash + 1 : out);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st)) {
		ctl_error("cannot write '%s': %s", out, strerror(errno));
	} else if (!**base) {
		ctl_error("cannot write '%s': %s", out, strerror(EISDIR));
	} else if (st.st_uid && st.st_uid != geteuid()) {
		ctl_error("refusing to write '%s': its directory '%s' belongs "
			  "to uid %u, who could swap what is in it",
			  out, dir, (unsigned int)st.st_uid);
	} else if (((st.st_mode & S_IWOTH) ||
		    ((st.st_mode & S_IWGRP) && st.st_gid)) &&
		   !(st.st_mode & S_ISVTX)) {
		ctl_error("refusing to write '%s': other users may write its "
			  "directory '%s', which is not sticky, and could swap "
			  "what is in it", out, dir);
	} else {
		free(dir);
		return dfd;
	}
	if (dfd >= 0)
		close(dfd);
	free(dir);
	free(*base);
	return -1;
}

/*
 * A new temporary file beside @base in @dfd, under a name nobody can
 * guess and created exclusively (so never through a link planted in
 * advance), in *@tmp (malloc'd). The name does not end in .prom, so that
 * the textfile collector skips it. The descriptor, or -errno.
 */
static int open_tmp(int dfd, const char *base, char **tmp)
{
	uint64_t rnd;

	for (int tries = 0; tries < 16; tries++) {
		if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
			return -EIO;
		*tmp = ctl_xasprintf("%s.%016" PRIx64 ".tmp", base, rnd);
		int fd = openat(dfd, *tmp, O_WRONLY | O_CREAT | O_EXCL |
						   O_NOFOLLOW | O_CLOEXEC,
				0644);

		if (fd >= 0)
			return fd;
		free(*tmp);
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

/*
 * Write the metrics to @out: into a temporary file in its directory, then
 * renamed over it, so that a reader never sees half a file and a symlink
 * at @out is replaced, not followed. 0 or EXIT_FAIL with a message, which
 * names the file the user gave, not the temporary.
 */
static int write_out(const char *out, char **mounts, struct ctl_stats *st,
		     int n)
{
	char *base, *tmp;
	int dfd, fd, rc = 0;
	FILE *f;

	dfd = open_out_dir(out, &base);
	if (dfd < 0)
		return EXIT_FAIL;
	fd = open_tmp(dfd, base, &tmp);
	if (fd < 0) {
		ctl_error("cannot write '%s': %s", out, strerror(-fd));
		rc = EXIT_FAIL;
		goto out_dir;
	}
	f = fdopen(fd, "w");
	if (!f) {
		ctl_error("cannot write '%s': %s", out, strerror(errno));
		close(fd);
		rc = EXIT_FAIL;
		goto out_tmp;
	}
	metrics_write(f, mounts, st, n);
	if (fflush(f) || ferror(f) || fsync(fileno(f))) {
		ctl_error("cannot write '%s': %s", out, strerror(errno));
		rc = EXIT_FAIL;
	}
	if (fclose(f) && !rc) {
		ctl_error("cannot write '%s': %s", out, strerror(errno));
		rc = EXIT_FAIL;
	}
	if (!rc && renameat(dfd, tmp, dfd, base)) {
		ctl_error("cannot write '%s': %s", out, strerror(errno));
		rc = EXIT_FAIL;
	}
out_tmp:
	if (rc)
		unlinkat(dfd, tmp, 0);
	free(tmp);
out_dir:
	free(base);
	close(dfd);
	return rc;
}

int cmd_metrics(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, OPT_HELP },
		{ 0 },
	};
	const char *out = NULL;
	struct ctl_stats *st;
	char **mounts;
	int c, n, m = 0, rc = 0;

	while ((c = ctl_next_opt(argc, argv, ":o:", lo)) != -1) {
		switch (c) {
		case 'o':
			out = optarg;
			break;
		}
	}
	if (optind < argc) {
		n = argc - optind;
		mounts = ctl_xmalloc(n * sizeof(*mounts));
		for (int i = 0; i < n; i++)
			if (!ctl_resolve_mount_msg(argv[optind + i],
						   &mounts[m]))
				rc = EXIT_FAIL;
			else
				m++;
		n = m;
	} else {
		n = ctl_all_mounts(&mounts);
		if (n < 0)
			return EXIT_FAIL;
		if (!n) {
			ctl_error("no tierfs mount found");
			free(mounts);
			return EXIT_FAIL;
		}
	}
	st = ctl_xmalloc(n * sizeof(*st));
	for (int i = m = 0; i < n; i++) {
		if (!ctl_stats_read_msg(mounts[i], &st[m])) {
			free(mounts[i]);
			rc = EXIT_FAIL;
			continue;
		}
		mounts[m++] = mounts[i];
	}
	n = m;

	if (!out) {
		metrics_write(stdout, mounts, st, n);
		if (fflush(stdout) || ferror(stdout))
			rc = EXIT_FAIL;
	} else if (write_out(out, mounts, st, n)) {
		rc = EXIT_FAIL;
	}
	for (int i = 0; i < n; i++)
		ctl_stats_free(&st[i]);
	free(st);
	ctl_free_strv(mounts, n);
	return rc;
}
