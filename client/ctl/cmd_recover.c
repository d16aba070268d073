// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl recover --list: what the last start of a persistent mount
 * dropped, rolled back, repaired or put in lost+found, from the root's
 * user.tierfs.recovery, with how that start went from the stats. Both are
 * read from a descriptor of the mount's root, checked to be that root
 * (ctl_open_mount_root()): root runs this, and a path on the way to the
 * mount may be a user's.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "client/ctl/ctl.h"

/* The attribute's value, malloc'd and NUL-terminated, or NULL with errno
 * set. */
static char *read_notes(int fd)
{
	ssize_t n = fgetxattr(fd, TFS_XATTR_RECOVERY, NULL, 0);
	char *buf;

	for (int tries = 0; n >= 0 && tries < 4; tries++) {
		buf = ctl_xmalloc((size_t)n + 1);
		ssize_t got = fgetxattr(fd, TFS_XATTR_RECOVERY, buf, (size_t)n);

		if (got >= 0) {
			buf[got] = '\0';
			return buf;
		}
		free(buf);
		if (errno != ERANGE)
			return NULL;
		/* It changed in between; ask for its size again. */
		n = fgetxattr(fd, TFS_XATTR_RECOVERY, NULL, 0);
	}
	return NULL;
}

static void print_json(const char *mount, const struct ctl_stats *s,
		       char *notes)
{
	static const char *const keys[] = { "recovery", "recovery_ms",
					    "recovered_files",
					    "recovery_dropped",
					    "recovery_rolled_back",
					    "recovery_lost_found" };
	bool first = true;

	printf("{\"mount\":");
	ctl_json_str(stdout, mount);
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		const char *v = ctl_stats_get(s, keys[k]);
		uint64_t u;

		if (!v)
			continue;
		printf(",\"%s\":", keys[k]);
		if (ctl_parse_u64(v, &u))
			printf("%" PRIu64, u);
		else
			ctl_json_str(stdout, v);
	}
	printf(",\"entries\":[");
	for (char *line = strtok(notes, "\n"); line;
	     line = strtok(NULL, "\n")) {
		char *path = strchr(line, '\t'), *why;

		if (!path || !(why = strchr(path + 1, '\t')))
			continue;
		*path++ = '\0';
		*why++ = '\0';
		printf("%s{\"kind\":", first ? "" : ",");
		ctl_json_str(stdout, line);
		printf(",\"path\":");
		ctl_json_str(stdout, path);
		printf(",\"why\":");
		ctl_json_str(stdout, why);
		printf("}");
		first = false;
	}
	printf("]}\n");
}

static void print_human(const char *mount, const struct ctl_stats *s,
			char *notes)
{
	const char *how = ctl_stats_get(s, "recovery");
	uint64_t files = 0, dropped = 0, rolled = 0, found = 0, ms = 0;
	bool any = false;

	ctl_stats_u64(s, "recovered_files", &files);
	ctl_stats_u64(s, "recovery_dropped", &dropped);
	ctl_stats_u64(s, "recovery_rolled_back", &rolled);
	ctl_stats_u64(s, "recovery_lost_found", &found);
	ctl_stats_u64(s, "recovery_ms", &ms);
	if (how && !strcmp(how, "fresh"))
		printf("%s: a new persistent mount, nothing to recover\n",
		       mount);
	else
		printf("%s: started after a %s stop in %" PRIu64 " ms: %" PRIu64
		       " files back, %" PRIu64 " dropped, %" PRIu64
		       " rolled back, %" PRIu64 " in lost+found\n",
		       mount, how && !strcmp(how, "clean") ? "clean" : "crash or unclean",
		       ms, files, dropped, rolled, found);
	for (char *line = strtok(notes, "\n"); line;
	     line = strtok(NULL, "\n")) {
		char *path = strchr(line, '\t'), *why;

		if (!path || !(why = strchr(path + 1, '\t')))
			continue;
		*path++ = '\0';
		*why++ = '\0';
		if (!any)
			printf("%-12s %-32s %s\n", "WHAT", "PATH", "WHY");
		any = true;
		/* Files by their path on the mount; journals and snapshots
		 * by their name in the spill directory. */
		if (path[0] == '/') {
			char *full = ctl_xasprintf("%s%s", strcmp(mount, "/") ?
							   mount : "", path);

			printf("%-12s %-32s %s\n", line, full, why);
			free(full);
		} else {
			printf("%-12s %-32s %s\n", line, path, why);
		}
	}
	if (!any && (!how || strcmp(how, "fresh")))
		printf("nothing was dropped\n");
}

int cmd_recover(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "list", no_argument, NULL, 'l' },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};
	struct ctl_stats s = { 0 };
	bool list = false, json = false;
	char *mount, *notes, *arg;
	int c, fd, rc = 0;
	dev_t dev;

	while ((c = ctl_next_opt(argc, argv, "l", longopts)) != -1) {
		if (c == 'l')
			list = true;
		else if (c == OPT_JSON)
			json = true;
	}
	if (!list)
		return ctl_bad_usage("say what to do: --list");
	if (argc - optind > 1)
		return ctl_bad_usage("one mount at a time");
	arg = ctl_pick_mount(optind < argc ? argv[optind] : NULL);
	if (!arg)
		return EXIT_FAIL;
	fd = ctl_open_mount_root(arg, &mount, &dev);
	free(arg);
	if (fd < 0)
		return EXIT_FAIL;
	c = ctl_stats_read_fd(fd, &s);
	if (c) {
		ctl_error("'%s': cannot read %s: %s", mount, TFS_XATTR_STATS,
			  strerror(-c));
		close(fd);
		free(mount);
		return EXIT_FAIL;
	}
	notes = read_notes(fd);
	if (!notes) {
		if (errno == ENODATA)
			ctl_op_error("'%s' is not a persistent mount "
				     "(disk_persist=no)", mount);
		else if (errno == EACCES)
			ctl_op_error("what recovery dropped on '%s' is for "
				     "root and the daemon's user: it names "
				     "files in directories others may not "
				     "read", mount);
		else
			ctl_op_error("cannot read '%s' of '%s': %s",
				     TFS_XATTR_RECOVERY, mount,
				     strerror(errno));
		rc = EXIT_FAIL;
	} else if (json) {
		print_json(mount, &s, notes);
	} else {
		print_human(mount, &s, notes);
	}
	free(notes);
	ctl_stats_free(&s);
	close(fd);
	free(mount);
	return rc;
}
