// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: watch and steer a tierfs mount from the shell.
 *
 * It talks to a mount only through what any process can use: stat, statfs,
 * /proc/self/mountinfo and the user.tierfs.* extended attributes. It links
 * neither FUSE nor the store, so it works against any daemon version that
 * speaks the xattr protocol, and it never opens a file on the mount: a
 * release on the last close may register (and so move) a buffer, which a
 * tool that only looks must not do. The one ioctl it makes, reclaim's, goes
 * to the mount's root directory.
 */
#include <getopt.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl/ctl.h"

#ifndef TFS_VERSION
#define TFS_VERSION "0.1.0"
#endif

const char *ctl_cmd_name;

static const char usage_text[] =
	"usage: tierfsctl COMMAND [OPTION...] [ARG...]\n"
	"\n"
	"commands:\n"
	"  status [MOUNT]            tier usage, buffer counts, spill totals\n"
	"      --json                one JSON object\n"
	"      --ascii, --unicode    how to draw the bars (default: unicode on a\n"
	"                            UTF-8 terminal, else ASCII)\n"
	"      -i, --interval SEC    sample twice, SEC apart, and show rates\n"
	"      -w, --watch           redraw every interval (1 s unless -i)\n"
	"      -n, --count N         with --watch, stop after N samples\n"
	"  ls [-R] [-h] [-s COL] [-r] [--json] [PATH...]\n"
	"                            files with tier, size, stored size, last\n"
	"                            access and pins; COL: name, tier, size,\n"
	"                            stored, atime, pins\n"
	"  spill [--to host|disk] [-R] PATH...      move down (default: disk)\n"
	"  prefetch [--tier device|host] [--wait] PATH...\n"
	"                            queue files (a directory: its tree) to\n"
	"                            move up (default: device); --wait: until\n"
	"                            they are there\n"
	"  pin [-R] PATH...          keep files where they are\n"
	"  unpin [-R] PATH...        let them move again\n"
	"      -q, --quiet           no summary line and no progress bar\n"
	"      --progress, --no-progress\n"
	"  metrics [-o FILE] [MOUNT...]\n"
	"                            Prometheus text format (all tierfs mounts\n"
	"                            when none is named)\n"
	"  cleanup [-q] DIR...       remove directory trees on a mount\n"
	"  reclaim [--gpu N] [-q] MOUNT SIZE\n"
	"                            spill GPU buffers until SIZE bytes of the\n"
	"                            GPU's memory are given back (default: the\n"
	"                            mount's default GPU)\n"
	"  recover --list [--json] [MOUNT]\n"
	"                            what the last start of a persistent mount\n"
	"                            dropped or rolled back\n"
	"\n"
	"MOUNT defaults to the only tierfs mount. See tierfsctl(1).\n";

static void usage(FILE *f)
{
	fputs(usage_text, f);
}

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *synopsis;
} commands[] = {
	{ "status", cmd_status,
	  "status [--json] [--ascii|--unicode] [-i SEC] [-w [-n N]] [MOUNT]" },
	{ "ls", cmd_ls, "ls [-R] [-h] [-s COLUMN] [-r] [--json] [PATH...]" },
	{ "spill", cmd_spill, "spill [--to host|disk] [-R] [-q] PATH..." },
	{ "prefetch", cmd_prefetch,
	  "prefetch [--tier device|host] [--wait] [-q] PATH..." },
	{ "pin", cmd_pin, "pin [-R] [-q] PATH..." },
	{ "unpin", cmd_unpin, "unpin [-R] [-q] PATH..." },
	{ "metrics", cmd_metrics, "metrics [-o FILE] [MOUNT...]" },
	{ "cleanup", cmd_cleanup, "cleanup [-q] DIR..." },
	{ "reclaim", cmd_reclaim, "reclaim [--gpu N] [-q] MOUNT SIZE" },
	{ "recover", cmd_recover, "recover --list [--json] [MOUNT]" },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		if (!strcmp(name, commands[i].name))
			return &commands[i];
	return NULL;
}

/* The synopsis of the command at hand, or the whole usage. */
static void short_usage(FILE *f)
{
	const struct command *c = ctl_cmd_name ? find_command(ctl_cmd_name) :
						 NULL;

	if (!c) {
		usage(f);
		return;
	}
	fprintf(f,
		"usage: tierfsctl %s\n"
		"Try 'tierfsctl --help' for more.\n",
		c->synopsis);
}

int ctl_bad_usage(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("tierfsctl: ", stderr);
	if (ctl_cmd_name)
		fprintf(stderr, "%s: ", ctl_cmd_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	short_usage(stderr);
	return EXIT_USAGE;
}

int ctl_next_opt(int argc, char **argv, const char *shortopts,
		 const struct option *longopts)
{
	int c;

	opterr = 0;
	c = getopt_long(argc, argv, shortopts, longopts, NULL);
	if (c == OPT_HELP) {
		usage(stdout);
		exit(0);
	}
	if (c == '?') {
		if (optopt)
			ctl_bad_usage("unknown option '-%c'", optopt);
		else
			ctl_bad_usage("unknown option '%s'", argv[optind - 1]);
		exit(EXIT_USAGE);
	}
	if (c == ':') {
		if (optopt)
			ctl_bad_usage("option '-%c' needs a value", optopt);
		else
			ctl_bad_usage("option '%s' needs a value",
				      argv[optind - 1]);
		exit(EXIT_USAGE);
	}
	return c;
}

int main(int argc, char **argv)
{
	const struct command *c;
	const char *cmd;

	setlocale(LC_ALL, "");
	/* numbers in JSON and the exposition format need a '.' */
	setlocale(LC_NUMERIC, "C");

	if (argc < 2)
		return ctl_bad_usage("no command given");
	cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") ||
	    !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		printf("tierfsctl (tierfs) %s\n", TFS_VERSION);
		return 0;
	}
	if (cmd[0] == '-')
		return ctl_bad_usage("unknown option '%s'", cmd);

	ctl_cmd_name = cmd;
	/* each subcommand parses argv[1..]: its name stands in for argv[0] */
	argc--;
	argv++;
	optind = 1;
	c = find_command(cmd);
	if (c)
		return c->run(argc, argv);
	ctl_cmd_name = NULL;
	return ctl_bad_usage("unknown command '%s'", cmd);
}
