// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * config/log.c: where the log goes for each environment, and what a line
 * looks like in each destination.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/log.h"
#include "tap.h"

static char tmpdir[] = "/tmp/tfs-test-log.XXXXXX";

static char *path(const char *name)
{
	static char buf[4][512];
	static int next;
	char *p = buf[next++ % 4];

	snprintf(p, sizeof(buf[0]), "%s/%s", tmpdir, name);
	return p;
}

static char *slurp(const char *file)
{
	static char buf[8192];
	FILE *f = fopen(file, "r");
	size_t n = 0;

	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

/* Point stderr at @file; returns the old stderr to restore. */
static int stderr_to(const char *file)
{
	int old = dup(2), fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	dup2(fd, 2);
	close(fd);
	return old;
}

static void stderr_back(int old)
{
	dup2(old, 2);
	close(old);
}

static void test_pick(void)
{
	struct stat st;
	char js[64];
	int old = stderr_to(path("err"));

	unsetenv("JOURNAL_STREAM");
	unsetenv("INVOCATION_ID");
	CHECK_EQ(tfs_log_pick(false, false), TFS_LOG_STDERR);
	CHECK_EQ(tfs_log_pick(true, true), TFS_LOG_FILE);
	CHECK_EQ(tfs_log_pick(false, true), TFS_LOG_FILE);
	/* A daemon: syslog when its socket is there, else the file. */
	if (!stat("/dev/log", &st) && S_ISSOCK(st.st_mode))
		CHECK_EQ(tfs_log_pick(true, false), TFS_LOG_SYSLOG);
	else
		CHECK_EQ(tfs_log_pick(true, false), TFS_LOG_FILE);

	setenv("INVOCATION_ID", "0123", 1);
	CHECK_EQ(tfs_log_pick(true, false), TFS_LOG_STDERR);
	CHECK_EQ(tfs_log_pick(true, true), TFS_LOG_FILE);

	/* The journal only when the variable names our stderr. */
	fstat(2, &st);
	snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", js, 1);
	CHECK_EQ(tfs_log_pick(true, false), TFS_LOG_JOURNAL);
	CHECK_EQ(tfs_log_pick(false, false), TFS_LOG_JOURNAL);
	CHECK_EQ(tfs_log_pick(false, true), TFS_LOG_FILE);
	snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino + 1);
	setenv("JOURNAL_STREAM", js, 1);
	CHECK_EQ(tfs_log_pick(true, false), TFS_LOG_STDERR);
	setenv("JOURNAL_STREAM", "garbage", 1);
	CHECK_EQ(tfs_log_pick(false, false), TFS_LOG_STDERR);
	unsetenv("JOURNAL_STREAM");
	unsetenv("INVOCATION_ID");
	stderr_back(old);
}

static void test_stderr_and_journal(void)
{
	int old = stderr_to(path("err"));

	tfs_log_use(TFS_LOG_STDERR);
	tfs_notice("plain %d", 1);
	tfs_log_use(TFS_LOG_JOURNAL);
	tfs_err("bad '%s'", "x");
	tfs_notice("fine\n\n");
	tfs_debug("not shown");
	tfs_log_use(TFS_LOG_NONE);
	tfs_err("nowhere");
	tfs_log_use(TFS_LOG_STDERR);
	stderr_back(old);
	CHECK(!strcmp(slurp(path("err")),
		      "tierfs: plain 1\n<3>bad 'x'\n<5>fine\n"));
}

static void test_file(void)
{
	char *text;

	CHECK_EQ(tfs_log_open(path("no/such/dir"), NULL, 0), -ENOENT);
	CHECK_EQ(tfs_log_open(path("a.log"), NULL, 0), 0);
	tfs_log_use(TFS_LOG_FILE);
	tfs_notice("first");
	tfs_warn("second");
	/* logrotate moves the file; the next open starts a new one. */
	CHECK(!rename(path("a.log"), path("a.log.1")));
	tfs_err("third");
	CHECK_EQ(tfs_log_open(path("a.log"), NULL, 0), 0);
	tfs_err("fourth");
	/* A failed reopen keeps the file open before. */
	CHECK_EQ(tfs_log_open(path("no/such/dir"), NULL, 0), -ENOENT);
	tfs_notice("fifth");
	tfs_log_use(TFS_LOG_STDERR);

	text = slurp(path("a.log.1"));
	CHECK(strstr(text, " tierfs[") && strstr(text, "]: first\n"));
	CHECK(strstr(text, "]: warning: second\n"));
	CHECK(strstr(text, "]: error: third\n"));
	CHECK(!strstr(text, "fourth"));
	/* "2026-11-30T17:22:35+0000 tierfs[PID]: " */
	CHECK(text[4] == '-' && text[10] == 'T' &&
	      (text[19] == '+' || text[19] == '-'));
	text = slurp(path("a.log"));
	CHECK(strstr(text, "]: error: fourth\n") && strstr(text, "]: fifth\n"));
	CHECK(!strstr(text, "third"));
}

/* Several daemons share a log file or syslog: each line names its mount;
 * stderr and the journal, one daemon's own, do not. */
static void test_tag(void)
{
	int old = stderr_to(path("err"));
	char *text;

	CHECK_EQ(tfs_log_open(path("t.log"), NULL, 0), 0);
	tfs_log_set_tag("/mnt/a b");
	tfs_log_use(TFS_LOG_FILE);
	tfs_warn("spilling");
	tfs_log_use(TFS_LOG_STDERR);
	tfs_notice("plain");
	tfs_log_use(TFS_LOG_JOURNAL);
	tfs_notice("journal");
	tfs_log_set_tag(NULL);
	tfs_log_use(TFS_LOG_FILE);
	tfs_notice("untagged");
	tfs_log_use(TFS_LOG_STDERR);
	stderr_back(old);
	text = slurp(path("t.log"));
	CHECK(strstr(text, "]: /mnt/a b: warning: spilling\n") != NULL);
	CHECK(strstr(text, "]: untagged\n") != NULL);
	CHECK(!strcmp(slurp(path("err")), "tierfs: plain\n<5>journal\n"));
}

/*
 * What root must not be led to append to: a symlink (planted before a
 * reopen), a FIFO, another user's file, a file with other names, or any
 * file in a directory others may write that is not sticky. Each is
 * refused with a sentence saying why, and the log open before stays.
 */
static void test_file_refused(void)
{
	char why[512], *text;
	int fd;

	CHECK(!mkdir(path("d"), 0755));
	CHECK(!mkdir(path("d/open"), 0777));
	CHECK(!chmod(path("d/open"), 0777));
	CHECK(!mkdir(path("d/sticky"), 0777));
	CHECK(!chmod(path("d/sticky"), 01777));
	CHECK_EQ(tfs_log_open(path("d/b.log"), why, sizeof(why)), 0);
	CHECK(!why[0]);
	tfs_log_use(TFS_LOG_FILE);
	tfs_notice("kept");
	/* Moved away, and a symlink to a file of root's put in its place. */
	CHECK(!rename(path("d/b.log"), path("d/b.log.1")));
	fd = open(path("secret"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, "secret\n", 7) == 7);
	close(fd);
	CHECK(!symlink(path("secret"), path("d/b.log")));
	CHECK_EQ(tfs_log_open(path("d/b.log"), why, sizeof(why)), -ELOOP);
	CHECK(strstr(why, "b.log': it is a symlink") != NULL);
	tfs_notice("still here");
	CHECK(!strcmp(slurp(path("secret")), "secret\n"));
	text = slurp(path("d/b.log.1"));
	CHECK(strstr(text, "]: kept\n") && strstr(text, "]: still here\n"));
	/* A FIFO would stall the daemon: refused at once. */
	CHECK(!mkfifo(path("d/f.log"), 0600));
	CHECK_EQ(tfs_log_file_open(path("d/f.log"), why, sizeof(why)),
		 -EINVAL);
	CHECK(strstr(why, "not a regular file") != NULL);
	/* Another user's file, and a second name of a file. */
	fd = open(path("d/u.log"), O_WRONLY | O_CREAT, 0600);
	CHECK(fd >= 0 && !fchown(fd, geteuid() + 1000, 0));
	close(fd);
	CHECK_EQ(tfs_log_file_open(path("d/u.log"), why, sizeof(why)), -EPERM);
	CHECK(strstr(why, "it belongs to uid") != NULL);
	CHECK(!link(path("secret"), path("d/h.log")));
	CHECK_EQ(tfs_log_file_open(path("d/h.log"), why, sizeof(why)), -EPERM);
	CHECK(strstr(why, "other names (hard links)") != NULL);
	/* The directory: others may write it and it is not sticky. */
	CHECK_EQ(tfs_log_file_open(path("d/open/o.log"), why, sizeof(why)),
		 -EPERM);
	CHECK(strstr(why, "is not sticky") != NULL);
	CHECK(access(path("d/open/o.log"), F_OK));
	CHECK(!chown(path("d/open"), geteuid() + 1000, 0));
	CHECK(!chmod(path("d/open"), 0755));
	CHECK_EQ(tfs_log_file_open(path("d/open/o.log"), why, sizeof(why)),
		 -EPERM);
	CHECK(strstr(why, "belongs to uid") != NULL);
	fd = tfs_log_file_open(path("d/sticky/s.log"), why, sizeof(why));
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK(!strcmp(slurp(path("secret")), "secret\n"));
	tfs_log_use(TFS_LOG_STDERR);
}

static void test_long_line(void)
{
	static char big[4000];
	int old = stderr_to(path("err"));
	char *text;

	memset(big, 'x', sizeof(big) - 1);
	tfs_notice("%s", big);
	stderr_back(old);
	text = slurp(path("err"));
	/* Cut, but still one line. */
	CHECK(!strncmp(text, "tierfs: xxx", 11));
	CHECK(strchr(text, '\n') == text + strlen(text) - 1);
}

int main(void)
{
	char cmd[256];

	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	TAP_RUN(test_pick);
	TAP_RUN(test_stderr_and_journal);
	TAP_RUN(test_file);
	TAP_RUN(test_tag);
	if (!geteuid())
		TAP_RUN(test_file_refused);
	else
		tap_skip("test_file_refused", "giving a file to another user "
					      "needs root");
	TAP_RUN(test_long_line);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return tap_done();
}
