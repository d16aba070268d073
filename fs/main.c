// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfs MOUNTPOINT [-o opt,...] [-f] [-d] [-s]
 *
 * Options are sorted once: config=FILE and every config key go to config/,
 * the rest to libfuse. The configuration is complete and valid before
 * anything forks or mounts, so a typo never leaves a mount behind.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/fs_i.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#ifndef TFS_VERSION
#define TFS_VERSION "0.1.0"
#endif

struct override {
	char *key;
	char *value;
};

struct cmdline {
	char *config; /* -o config=FILE */
	struct override *ov; /* -o section_key=value, in order */
	size_t nov;
	char *nonopt[2]; /* [SOURCE] MOUNTPOINT */
	int nnonopt;
	bool nonempty; /* -o nonempty: mount over a directory's entries */
	bool remount; /* -o remount: change the flags of a mount */
	char *bad_msg; /* the first unknown option's message */
	bool bad;
};

static struct cmdline cl;
static char *mountpoint;
static struct tfs_config cfg;
/* The log file in use, when the log goes to one (reopened on SIGHUP). */
static char *log_path;

/* mount(8) and fstab pass these; they mean nothing to tierfs or FUSE. */
static const char *const fstab_words[] = {
	"defaults", "auto", "noauto", "user", "users", "nouser",
	"_netdev", "nofail", "owner", "group", "comment",
};

static bool fstab_noise(const char *key)
{
	size_t k;

	if (!strncmp(key, "x-", 2))
		return true;
	for (k = 0; k < ARRAY_SIZE(fstab_words); k++) {
		if (!strcmp(key, fstab_words[k]))
			return true;
	}
	return false;
}

/*
 * The -o options libfuse 3 takes (lib/helper.c, lib/fuse_lowlevel.c,
 * lib/mount.c); a trailing '=' means it needs a value. Anything else would
 * reach fuse_session_new(), which refuses it only after the store has
 * started, with a message spread over three lines. max_read= is left out:
 * libfuse ends the session when init() does not ask for the same size.
 */
static const char *const fuse_opts[] = {
	"allow_other", "allow_root", "auto_unmount", "blkdev", "blksize=",
	"default_permissions", "fsname=", "subtype=",
	"context=", "fscontext=", "defcontext=", "rootcontext=", "user=",
	"ro", "rw", "suid", "nosuid", "dev", "nodev", "exec", "noexec",
	"async", "sync", "dirsync", "atime", "noatime", "debug", "clone_fd",
	"max_idle_threads=", "max_threads=",
};

/* The dash options of libfuse's command line parser and of mount(8). */
static const char *const dash_opts[] = {
	"-h", "--help", "-V", "--version", "-d", "--debug", "-f", "-s",
	"-r", "-n",
};

/* -1: not a FUSE option; 0: it is, without a value; 1: with one. */
static int fuse_opt_kind(const char *name)
{
	size_t k, n;

	for (k = 0; k < ARRAY_SIZE(fuse_opts); k++) {
		n = strcspn(fuse_opts[k], "=");
		if (!strncmp(name, fuse_opts[k], n) && !name[n])
			return fuse_opts[k][n] == '=';
	}
	return -1;
}

/*
 * One line for an option nobody takes, with the likely one it was meant
 * to be: "-o hots_limit: unknown option, did you mean 'host_limit'?".
 */
static void unknown_option(const char *arg, char *msg, size_t len)
{
	const char *extra[ARRAY_SIZE(fuse_opts) + ARRAY_SIZE(dash_opts) + 8];
	static const char *const own[] = { "config=", "nonempty", "relatime",
					   "strictatime", "nodiratime",
					   "diratime", "remount" };
	const char *word = arg, *hint;
	char buf[80], name[80];
	size_t n = 0, k;
	bool dash = arg[0] == '-';

	for (k = 0; k < ARRAY_SIZE(fuse_opts); k++)
		extra[n++] = fuse_opts[k];
	for (k = 0; k < ARRAY_SIZE(own); k++)
		extra[n++] = own[k];
	/* "--hepl" is compared as "hepl" with "help", "-x" as "x". */
	for (k = 0; dash && k < ARRAY_SIZE(dash_opts); k++)
		extra[n++] = dash_opts[k] + strspn(dash_opts[k], "-");
	word += strspn(word, "-");
	hint = cfg_suggest(word, extra, n, buf, sizeof(buf));
	snprintf(name, sizeof(name), "%s%.*s", dash ? "" : "-o ",
		 (int)strcspn(arg, "="), arg);
	if (!hint) {
		snprintf(msg, len, "%s: unknown option, see tierfs --help",
			 name);
		return;
	}
	for (k = 0; k < ARRAY_SIZE(dash_opts); k++) {
		if (!strcmp(hint, dash_opts[k] + strspn(dash_opts[k], "-"))) {
			snprintf(msg, len, "%s: unknown option, did you mean "
					   "'%s'?", name, dash_opts[k]);
			return;
		}
	}
	snprintf(msg, len, "%s: unknown option, did you mean '%s%s'?", name,
		 dash ? "-o " : "", hint);
}

/* A FUSE option as libfuse will take it, or in @msg why not. */
static int check_fuse_opt(const char *arg, const char *name, const char *eq,
			  char *msg, size_t len)
{
	size_t k;
	int kind;

	if (arg[0] == '-') {
		for (k = 0; k < ARRAY_SIZE(dash_opts); k++) {
			if (!strcmp(arg, dash_opts[k]))
				return 0;
		}
		unknown_option(arg, msg, len);
		return -EINVAL;
	}
	kind = fuse_opt_kind(name);
	if (kind < 0) {
		unknown_option(arg, msg, len);
		return -EINVAL;
	}
	if (kind && (!eq || !eq[1])) {
		snprintf(msg, len, "-o %s: needs a value", name);
		return -EINVAL;
	}
	if (!kind && eq) {
		snprintf(msg, len, "-o %s: takes no value", name);
		return -EINVAL;
	}
	return 0;
}

/*
 * An option nobody takes, kept for after parsing: mount.fuse3 hands a
 * remount every option of the mount, the kernel's user_id= among them,
 * and a remount only looks at the per-mount flags.
 */
static int bad_option(struct cmdline *c, const char *msg)
{
	if (!c->bad_msg)
		c->bad_msg = strdup(msg);
	return 0;
}

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct cmdline *c = data;
	const char *eq;
	char *name, msg[256];
	int kind, rc;

	if (key == FUSE_OPT_KEY_NONOPT) {
		if (c->nnonopt == 2) {
			fprintf(stderr, "tierfs: too many arguments: '%s'\n",
				arg);
			c->bad = true;
			return -1;
		}
		c->nonopt[c->nnonopt] = strdup(arg);
		if (!c->nonopt[c->nnonopt])
			return -1;
		c->nnonopt++;
		return 0;
	}
	if (key != FUSE_OPT_KEY_OPT)
		return 1;
	eq = strchr(arg, '=');
	name = strndup(arg, eq ? (size_t)(eq - arg) : strlen(arg));
	if (!name)
		return -1;
	if (arg[0] == '-') {
		free(name);
		if (check_fuse_opt(arg, NULL, NULL, msg, sizeof(msg)))
			return bad_option(c, msg);
		return 1;
	}
	if (!strcmp(name, "config")) {
		free(name);
		if (!eq || !eq[1]) {
			fprintf(stderr, "tierfs: -o config: needs a file\n");
			c->bad = true;
			return -1;
		}
		free(c->config);
		c->config = strdup(eq + 1);
		return c->config ? 0 : -1;
	}
	if (cfg_owns_option(name)) {
		struct override *ov;

		if (!eq) {
			fprintf(stderr, "tierfs: -o %s: needs a value\n", name);
			free(name);
			c->bad = true;
			return -1;
		}
		ov = realloc(c->ov, (c->nov + 1) * sizeof(*ov));
		if (!ov) {
			free(name);
			return -1;
		}
		c->ov = ov;
		ov[c->nov].key = name;
		ov[c->nov].value = strdup(eq + 1);
		if (!ov[c->nov].value)
			return -1;
		c->nov++;
		return 0;
	}
	if (fstab_noise(name)) {
		free(name);
		return 0;
	}
	/* libfuse 3 mounts over anything; tierfs asks first. */
	if (!strcmp(arg, "nonempty")) {
		free(name);
		c->nonempty = true;
		return 0;
	}
	if (!strcmp(arg, "remount")) {
		free(name);
		c->remount = true;
		return 0;
	}
	kind = eq ? 0 : tfs_mount_flag_option(arg);
	if (kind) {
		free(name);
		return kind == 2;
	}
	rc = check_fuse_opt(arg, name, eq, msg, sizeof(msg));
	free(name);
	if (rc)
		return bad_option(c, msg);
	return 1;
}

static void cmdline_free(struct cmdline *c)
{
	size_t k;

	for (k = 0; k < c->nov; k++) {
		free(c->ov[k].key);
		free(c->ov[k].value);
	}
	free(c->ov);
	free(c->config);
	free(c->bad_msg);
	free(c->nonopt[0]);
	free(c->nonopt[1]);
}

/*
 * Defaults, then the file, then -o: used at start and again on SIGHUP, so
 * that a reload keeps what the command line forced.
 */
static int load_config(struct tfs_config *c, const char *mnt, char *err,
		       size_t errlen)
{
	const char *file = cl.config;
	size_t k;
	int rc;

	cfg_defaults(c);
	if (!file && !access(TFS_DEFAULT_CONFIG, F_OK))
		file = TFS_DEFAULT_CONFIG;
	if (file) {
		rc = cfg_load_file(c, file, err, errlen);
		if (rc)
			return rc;
	}
	for (k = 0; k < cl.nov; k++) {
		rc = cfg_set_option(c, cl.ov[k].key, cl.ov[k].value, err,
				    errlen);
		if (rc)
			return rc;
	}
	/* A kind the store does not serve is refused, by name, when it
	 * opens the tiers. */
	return cfg_validate(c, mnt, err, errlen);
}

/* [fs] metadata_limit, whose percentage is of the host tier's limit. */
static void set_metadata_limit(const struct tfs_config *c)
{
	struct tier_store_stats st;

	tier_store_stats(tfs.store, &st);
	tfs_meta_set_limit(&c->fs.metadata_limit, &c->fs.metadata_user_share,
			   st.tier[TFS_TIER_HOST].limit);
}

/*
 * Runs in the SIGHUP thread. The mount point is not resolved again (that
 * would be a request to this very mount), and what cannot change live is
 * ignored by tier_store_reconfigure().
 */
static void reload(void)
{
	struct tfs_config nc;
	const char *file;
	char err[1024], why[PATH_MAX + 256];
	char *path;
	int rc;

	err[0] = '\0';
	rc = load_config(&nc, NULL, err, sizeof(err));
	if (rc) {
		if (!err[0])
			snprintf(err, sizeof(err), "%s", strerror(-rc));
		tfs_err("reload failed, keeping the running configuration: %s",
			err);
		tfs_reload_done(err);
		cfg_free(&nc);
		return;
	}
	rc = tier_store_reconfigure(tfs.store, &nc, err, sizeof(err));
	if (rc == -ENOSPC) {
		/* Applied: only the spilling down to a limit waits. */
		tfs_warn("reload: %s", err);
		rc = 0;
	}
	if (rc) {
		if (!err[0])
			snprintf(err, sizeof(err),
				 "cannot apply the configuration: %s",
				 strerror(-rc));
		tfs_err("reload failed: %s", err);
		tfs_reload_done(err);
		cfg_free(&nc);
		return;
	}
	/* Reopened, so that logrotate can move the file away. */
	if (tfs_log_dest() == TFS_LOG_FILE) {
		file = nc.log.file ? nc.log.file : log_path;
		rc = tfs_log_open(file, why, sizeof(why));
		path = rc ? NULL : strdup(file);
		if (rc)
			tfs_warn("cannot reopen the log file: %s", why);
		if (path) {
			free(log_path);
			log_path = path;
		}
	}
	set_metadata_limit(&nc);
	tfs_prefetch_set_max(nc.policy.prefetch_queue);
	tfs_notice("configuration reloaded%s%s%s",
		   nc.config_file ? " from '" : "",
		   nc.config_file ? nc.config_file : "",
		   nc.config_file ? "'" : "");
	tfs_reload_done(NULL);
	/* Only this thread replaces cfg after start-up. */
	cfg_free(&cfg);
	cfg = nc;
}

/*
 * Choose where the log goes and open its file before forking, so that a
 * file that cannot be opened is said on the terminal. A daemon with no
 * syslog and no file to write would lose every message: say that too.
 */
static int log_prepare(bool daemon, enum tfs_log_dest *dest)
{
	const char *file = cfg.log.file;
	char why[PATH_MAX + 256];
	int rc;

	*dest = tfs_log_pick(daemon, file != NULL);
	if (*dest != TFS_LOG_FILE)
		return 0;
	if (!file)
		file = TFS_DEFAULT_LOG;
	rc = tfs_log_open(file, why, sizeof(why));
	if (rc && cfg.log.file) {
		fprintf(stderr, "tierfs: log_file: %s\n", why);
		return rc;
	}
	if (rc) {
		fprintf(stderr, "tierfs: no syslog at /dev/log and cannot open "
				"'%s': %s; the daemon's messages will be lost "
				"(-o log_file=FILE keeps them)\n",
			file, strerror(-rc));
		*dest = TFS_LOG_NONE;
		return 0;
	}
	log_path = strdup(file);
	return log_path ? 0 : -ENOMEM;
}

/* The pid that the user.tierfs.stats of the mount at @mnt names, 0 when
 * it does not say, -1 when its daemon is gone (ENOTCONN). */
static long mount_pid(const char *mnt)
{
	char buf[16384], *p;
	ssize_t n;
	long pid;

	n = getxattr(mnt, TFS_XATTR_STATS, buf, sizeof(buf) - 1);
	if (n < 0 && (errno == ENOTCONN || errno == ECONNABORTED))
		return -1;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	for (p = buf; p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (sscanf(p, "pid=%ld", &pid) == 1)
			return pid;
	}
	return 0;
}

/*
 * A tierfs mount whose daemon is gone (kill -9, a crash): the kernel keeps
 * it, answering ENOTCONN, until it is unmounted. Say so, with the pid the
 * mount's record names (@mi, when the caller found the mount), and what to
 * run.
 */
static void dead_mount(const char *mnt, const struct tfs_mountinfo *mi)
{
	struct tfs_record r;
	struct tfs_mountinfo here;

	if (!mi && !tfs_mountinfo_find(mnt, 0, &here))
		mi = &here;
	if (mi && !tfs_record_read(mnt, &r) && tfs_record_names(&r, mi))
		fprintf(stderr, "tierfs: %s: the tierfs mounted here is dead "
				"(its daemon, pid %ld, is gone); unmount it "
				"first: fusermount3 -u %s\n", mnt, r.pid, mnt);
	else
		fprintf(stderr, "tierfs: %s: the FUSE mount here is dead (its "
				"daemon is gone); unmount it first: "
				"fusermount3 -u %s\n", mnt, mnt);
}

/*
 * libfuse mounts over anything: a second tierfs on top of a first hides
 * the first one's files, a regular file becomes a path that answers EIO,
 * and a directory's entries vanish until the unmount. Refuse each with
 * one line, before anything starts. A race with another mount between
 * this and the mount itself is not closed: this is for operators'
 * mistakes, not for a hostile caller (who would need root anyway).
 */
static int check_mountpoint(const char *mnt, bool nonempty)
{
	struct tfs_mountinfo mi;
	struct dirent *de;
	struct stat st;
	long pid;
	DIR *d;

	if (!tfs_mountinfo_find(mnt, 0, &mi) &&
	    !strcmp(mi.fstype, "fuse.tierfs")) {
		pid = mount_pid(mnt);
		if (pid < 0) {
			dead_mount(mnt, &mi);
			return -ENOTCONN;
		}
		if (pid > 0)
			fprintf(stderr, "tierfs: %s: already a tierfs mount "
					"(pid %ld); unmount it first\n",
				mnt, pid);
		else
			fprintf(stderr, "tierfs: %s: already a tierfs mount; "
					"unmount it first\n", mnt);
		return -EBUSY;
	}
	if (stat(mnt, &st)) {
		fprintf(stderr, "tierfs: %s: %s\n", mnt, strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "tierfs: %s: not a directory\n", mnt);
		return -ENOTDIR;
	}
	if (nonempty)
		return 0;
	d = opendir(mnt);
	if (!d) {
		fprintf(stderr, "tierfs: %s: %s\n", mnt, strerror(errno));
		return -errno;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			break;
	}
	closedir(d);
	if (de) {
		fprintf(stderr, "tierfs: %s: directory not empty; mounting "
				"would hide its files (-o nonempty to do it "
				"anyway)\n", mnt);
		return -ENOTEMPTY;
	}
	return 0;
}

/* Cut @word off the end of the comma-separated @opts, if it ends it. */
static bool cut_last(char *opts, const char *word)
{
	size_t n = strlen(opts), w = strlen(word);

	if (n < w || strcmp(opts + n - w, word) ||
	    (n > w && opts[n - w - 1] != ','))
		return false;
	opts[n > w ? n - w - 1 : 0] = '\0';
	return true;
}

/*
 * mount(8) means dev,suid unless told nodev,nosuid, and mount.fuse3 says
 * so: it appends "dev" and "suid" to the options of every mount that does
 * not negate them, and runs "tierfs SOURCE MOUNTPOINT -o OPTIONS". A
 * direct mount is nosuid,nodev (libfuse's default), which on a shared node
 * with allow_other is the one to have: a file a user made setuid or a
 * device node he made must not work through the mount. So in the SOURCE
 * MOUNTPOINT form, the two words mount.fuse3 appended are dropped; a dev or
 * suid the operator wrote comes before them and stays.
 */
static void drop_helper_defaults(int argc, char **argv)
{
	char *opts = NULL;
	int plain = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-o") && i + 1 < argc)
			opts = argv[++i];
		else if (!strncmp(argv[i], "-o", 2))
			opts = argv[i] + 2;
		else if (argv[i][0] != '-')
			plain++;
	}
	if (plain != 2 || !opts)
		return;
	cut_last(opts, "suid");
	cut_last(opts, "dev");
}

static void usage(const char *prog)
{
	printf("usage: %s MOUNTPOINT [-o opt,...] [-f] [-d] [-s]\n"
	       "       %s SOURCE MOUNTPOINT -o opt,...   (mount.fuse3, fstab)\n"
	       "       %s --unmount-dead MOUNTPOINT      (tierfs.service)\n"
	       "\n"
	       "Present tiered GPU/host/disk buffers as files.\n"
	       "\n"
	       "tierfs options:\n"
	       "    -h, --help             print this help\n"
	       "    -V, --version          print the version\n"
	       "    -f                     stay in the foreground, log to stderr\n"
	       "    -d                     FUSE debug output (implies -f)\n"
	       "    -s                     single-threaded\n"
	       "    -o config=FILE         read FILE instead of %s\n"
	       "    -o nonempty            mount over a directory that is not empty\n"
	       "    -o noatime|relatime|strictatime, -o nodiratime\n"
	       "                           when reads update access times\n"
	       "                           (default: relatime)\n"
	       "\n"
	       "    --unmount-dead MNT     unmount MNT if it is the dead mount of\n"
	       "                           a daemon of this systemd unit's run\n"
	       "\n"
	       "Configuration (also [section] key in the config file):\n",
	       prog, prog, prog, TFS_DEFAULT_CONFIG);
	cfg_print_help(stdout, 4);
	printf("\nFUSE options:\n");
	fflush(stdout);
	fuse_lowlevel_help();
}

/*
 * One worker per CPU, at least two. libfuse's default of ten lost a quarter
 * of sequential read throughput on a 2-core machine to workers contending
 * for the cores (bench/README.md); a second worker keeps a slow disk-tier
 * read from stalling everything behind it.
 */
static unsigned int default_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 2 ? 2 : n > 256 ? 256 : (unsigned int)n;
}

/* FNV-1a: a stable short name for a mount point. */
static uint64_t path_hash(const char *p)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	return h;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* The terminal gets it either way; a log of its own keeps it too. */
	if (tfs_log_dest() == TFS_LOG_FILE || tfs_log_dest() == TFS_LOG_SYSLOG)
		tfs_err("%s", msg);
	tfs_daemon_ready(1, msg);
}

/* The invalidation thread, told which fusectl connection is ours (from
 * mountinfo: a stat of the mount would wait for the loop not yet
 * running). */
static int start_inval(const char *mnt)
{
	struct tfs_mountinfo mi;

	if (tfs_mountinfo_find(mnt, 0, &mi))
		mi.minor = 0;
	return tfs_inval_start(mi.minor);
}

/*
 * Every live export holds a descriptor of its object (device_sim.c), up to
 * [device] user_exports of them per user: at the soft limit a root shell
 * leaves (1024), one user's exports would take every descriptor the daemon
 * has, and with them every other user's opens of the spill files and
 * exports. The hard limit is the daemon's to take.
 */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		tfs_warn("cannot raise the limit on open files to %llu: %s",
			 (unsigned long long)rl.rlim_max, strerror(errno));
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts opts = { 0 };
	struct fuse_loop_config *lc = NULL;
	char err[1024], tag[32];
	enum tfs_log_dest dest;
	sigset_t hup;
	int rc, ret = 1;
	bool mounted = false, handlers = false;

	/*
	 * No fastbins: a freed small block then coalesces at once, so that
	 * when a million inodes go, each thread's heap shrinks as they are
	 * freed (measured: 50 MB resident after 100,000 files were created
	 * and removed, 5 MB with this). tcache still serves the hot path; the
	 * idle timer's malloc_trim() returns what fragmentation keeps.
	 */
	mallopt(M_MXFAST, 0);
	/* Before any thread exists, so that every thread inherits it. */
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &hup, NULL);
	tfs_log_setup();
	if (argc > 1 && !strcmp(argv[1], "--unmount-dead")) {
		if (argc == 3)
			return tfs_unmount_dead(argv[2]);
		fprintf(stderr, "usage: %s --unmount-dead MOUNTPOINT\n",
			argv[0]);
		return 2;
	}
	drop_helper_defaults(argc, argv);
	/* Before anything sizes itself by it (the disk tier's descriptors). */
	raise_nofile();

	if (fuse_opt_parse(&args, &cl, NULL, opt_proc) || cl.bad)
		goto out_args;
	if (cl.bad_msg && !cl.remount) {
		fprintf(stderr, "tierfs: %s\n", cl.bad_msg);
		goto out_args;
	}
	if (fuse_parse_cmdline(&args, &opts))
		goto out_args;
	if (opts.show_help) {
		usage(argv[0]);
		ret = 0;
		goto out_opts;
	}
	if (opts.show_version) {
		printf("tierfs version %s\n", TFS_VERSION);
		printf("FUSE library version %s\n", fuse_pkgversion());
		/* It runs fusermount3, whose output must come after ours. */
		fflush(stdout);
		fuse_lowlevel_version();
		ret = 0;
		goto out_opts;
	}
	if (!cl.nnonopt) {
		fprintf(stderr, "usage: %s MOUNTPOINT [-o opt,...] [-f] [-d]\n"
			"       %s --help for more\n", argv[0], argv[0]);
		goto out_opts;
	}
	mountpoint = realpath(cl.nonopt[cl.nnonopt - 1], NULL);
	if (!mountpoint && errno == ENOTCONN) {
		dead_mount(cl.nonopt[cl.nnonopt - 1], NULL);
		goto out_opts;
	}
	if (!mountpoint) {
		fprintf(stderr, "tierfs: bad mount point '%s': %s\n",
			cl.nonopt[cl.nnonopt - 1], strerror(errno));
		goto out_opts;
	}
	if (cl.remount) {
		ret = tfs_remount(mountpoint) ? 1 : 0;
		goto out_cfg;
	}
	/* Several daemons of a node share a log file or syslog. */
	tfs_log_set_tag(mountpoint);
	err[0] = '\0';
	rc = load_config(&cfg, mountpoint, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "tierfs: %s\n", err[0] ? err : strerror(-rc));
		goto out_cfg;
	}
	if (check_mountpoint(mountpoint, cl.nonempty))
		goto out_cfg;
	if (opts.debug)
		tfs_log_max = TFS_LOG_DEBUG;
	if (log_prepare(!opts.foreground, &dest))
		goto out_cfg;
	if (opts.foreground)
		tfs_log_use(dest);
	/*
	 * default_permissions always: without it the kernel would let anyone
	 * read any file. First, so that a user's fsname= comes later and wins.
	 */
	if (fuse_opt_insert_arg(&args, 1,
				"-odefault_permissions,fsname=tierfs,subtype=tierfs"))
		goto out_cfg;

	if (!opts.foreground) {
		rc = tfs_daemonize();
		if (rc) {
			fprintf(stderr, "tierfs: cannot fork: %s\n",
				strerror(-rc));
			goto out_cfg;
		}
		/* From here on only a failure reaches the terminal: a mount
		 * helper is silent on success. */
		tfs_log_use(dest);
	}
	/* CUDA must start in the process that serves the mount. The tag
	 * starts the spill directory's name, which a random part completes;
	 * what a crashed run left behind is found by its lock, not its name. */
	snprintf(tag, sizeof(tag), "%016llx",
		 (unsigned long long)path_hash(mountpoint));
	rc = tfs_ns_init();
	if (rc) {
		fail("cannot set up the namespace: %s", strerror(-rc));
		goto out_cfg;
	}
	err[0] = '\0';
	rc = tier_store_init(&tfs.store, &cfg, tag, err, sizeof(err));
	if (rc) {
		fail("cannot start the store: %s",
		     err[0] ? err : strerror(-rc));
		goto out_ns;
	}
	set_metadata_limit(&cfg);
	/*
	 * Every change of a name or an attribute comes through this kernel,
	 * which updates or drops what it cached as it goes; the store's own
	 * (st_blocks after a move, a GPU commit) are notified (inval.c). So
	 * the kernel may keep entries, misses and attributes for as long as
	 * it likes: a stat or a create then costs no round trip. A day, not
	 * forever, bounds the damage of a change nobody notified.
	 */
	tfs.entry_timeout = 86400.0;
	tfs.attr_timeout = 86400.0;
	tier_store_set_inval(tfs.store, tfs_inval_queue, NULL);
	/* After the budget is known: restored files count against it. */
	err[0] = '\0';
	rc = tfs_pj_start(cfg.disk.persist, err, sizeof(err));
	if (rc) {
		fail("cannot start the persistent mount: %s",
		     err[0] ? err : strerror(-rc));
		goto out_store;
	}
	tfs_ops_set_read_ahead(cfg.fs.read_ahead_kb);
	tfs.writeback = cfg.fs.writeback_cache;
	tfs_pt_configure(cfg.fs.passthrough, TFS_PT_MIN_SIZE);

	tfs.se = fuse_session_new(&args, &tfs_ops, sizeof(tfs_ops), NULL);
	if (!tfs.se) {
		fail("cannot create the FUSE session (bad -o option?)");
		goto out_store;
	}
	if (fuse_set_signal_handlers(tfs.se)) {
		fail("cannot set signal handlers");
		goto out_session;
	}
	handlers = true;
	if (fuse_session_mount(tfs.se, mountpoint)) {
		fail("cannot mount on '%s'", mountpoint);
		goto out_session;
	}
	mounted = true;
	/* The tree of a persistent mount comes back behind the mount. */
	rc = tfs_pj_load_start();
	if (rc) {
		fail("cannot start the loader thread: %s", strerror(-rc));
		goto out_session;
	}
	rc = tfs_tmpfile_attach(tfs.se);
	if (rc) {
		fail("cannot take over the FUSE session's reads: %s",
		     strerror(-rc));
		goto out_session;
	}
	tfs_set_read_ahead(mountpoint, cfg.fs.read_ahead_kb);
	rc = start_inval(mountpoint);
	if (rc) {
		fail("cannot start the invalidation thread: %s", strerror(-rc));
		goto out_session;
	}
	rc = tfs_atime_start(mountpoint);
	if (rc) {
		fail("cannot start the atime thread: %s", strerror(-rc));
		goto out_session;
	}
	rc = tfs_prefetch_start(cfg.policy.prefetch_queue);
	if (rc) {
		fail("cannot start the prefetch thread: %s", strerror(-rc));
		goto out_session;
	}
	rc = tfs_sighup_start(reload, tfs_meta_idle);
	if (rc) {
		fail("cannot start the reload thread: %s", strerror(-rc));
		goto out_session;
	}
	rc = tfs_record_write(mountpoint);
	if (rc && rc != -EPERM)
		tfs_warn("cannot record the mount in /run/tierfs: %s",
			 strerror(-rc));
	tier_store_set_state(tfs.store, "serving", mountpoint);
	tfs_notice("mounted on '%s'", mountpoint);
	tfs_daemon_ready(0, NULL);
	tfs_notify("READY=1\nSTATUS=mounted on %s", mountpoint);

	if (opts.singlethread) {
		rc = fuse_session_loop(tfs.se);
	} else {
		unsigned int threads = cfg.fs.threads ? cfg.fs.threads :
							 default_threads();

		tfs.multithreaded = threads > 1;
		lc = fuse_loop_cfg_create();
		if (!lc) {
			tfs_err("cannot allocate the loop configuration");
			goto out_hup;
		}
		fuse_loop_cfg_set_clone_fd(lc, 1);
		fuse_loop_cfg_set_max_threads(lc, threads);
		/* Idle workers stay: each owns a faulted-in reply buffer. */
		fuse_loop_cfg_set_idle_threads(lc,
			opts.max_idle_threads == UINT_MAX ?
			threads : opts.max_idle_threads);
		rc = fuse_session_loop_mt(tfs.se, lc);
	}
	/* A signal ends the loop with its number; that is a clean exit. */
	ret = rc < 0 ? 1 : 0;
	if (rc < 0)
		tfs_err("session loop failed: %s", strerror(-rc));
	else
		tfs_notice("unmounting '%s'", mountpoint);
	tfs_notify("STOPPING=1\nSTATUS=unmounting %s", mountpoint);
	/* A daemon starting on the persistent directory now waits. */
	tier_store_set_state(tfs.store, "saving", NULL);
out_hup:
	tfs_sighup_stop();
out_session:
	tfs_prefetch_stop();
	tfs_inval_stop();
	tfs_atime_stop();
	/* After the threads that copy into replicas, before the session
	 * their backing ids belong to. */
	tfs_pt_stop();
	if (mounted) {
		fuse_session_unmount(tfs.se);
		tfs_record_drop(mountpoint);
	}
	if (handlers)
		fuse_remove_signal_handlers(tfs.se);
	fuse_session_destroy(tfs.se);
	tfs.se = NULL;
out_store:
	/* A persistent mount saves everything, now that nothing can change
	 * it; whatever happened, its files stay. */
	tfs_pj_stop();
	if (tfs.store)
		tier_store_keep_files(tfs.store);
	/* Buffers first: the store refuses to go while any is alive. */
	tfs_ns_destroy();
	tfs_pj_destroy();
	tier_store_destroy(tfs.store);
	tfs.store = NULL;
out_ns:
	tfs_ns_destroy();
out_cfg:
	cfg_free(&cfg);
	free(mountpoint);
	free(log_path);
out_opts:
	free(opts.mountpoint);
out_args:
	if (lc)
		fuse_loop_cfg_destroy(lc);
	fuse_opt_free_args(&args);
	cmdline_free(&cl);
	return ret;
}
