// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * File handles for handles.bats:
 *
 *   handle save PATH OUT     name_to_handle_at(PATH), the handle to OUT
 *   handle open MOUNT IN     open_by_handle_at() of the handle in IN,
 *                            through MOUNT; the file's bytes to stdout
 *
 * Errors print "handle: WHAT: ERRNO_NAME" (ESTALE, ...) and exit 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HANDLE_MAX 128

static const char *errname(int e)
{
	switch (e) {
	case ESTALE: return "ESTALE";
	case ENOENT: return "ENOENT";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EPERM: return "EPERM";
	case EINVAL: return "EINVAL";
	default: return strerror(e);
	}
}

static int fail(const char *what)
{
	int e = errno;

	fprintf(stderr, "handle: %s: %s\n", what, errname(e));
	printf("%s\n", errname(e));
	return 1;
}

static int save(const char *path, const char *out)
{
	struct file_handle *fh = calloc(1, sizeof(*fh) + HANDLE_MAX);
	int mount_id, fd;

	if (!fh)
		return fail("calloc");
	fh->handle_bytes = HANDLE_MAX;
	if (name_to_handle_at(AT_FDCWD, path, fh, &mount_id, 0))
		return fail("name_to_handle_at");
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		return fail("open");
	if (write(fd, fh, sizeof(*fh) + fh->handle_bytes) < 0)
		return fail("write");
	close(fd);
	free(fh);
	return 0;
}

static int open_handle(const char *mnt, const char *in)
{
	struct file_handle *fh = calloc(1, sizeof(*fh) + HANDLE_MAX);
	char buf[65536];
	int mfd, fd, hfd;
	ssize_t n;

	if (!fh)
		return fail("calloc");
	hfd = open(in, O_RDONLY);
	if (hfd < 0)
		return fail("open");
	if (read(hfd, fh, sizeof(*fh) + HANDLE_MAX) < (ssize_t)sizeof(*fh))
		return fail("read");
	close(hfd);
	mfd = open(mnt, O_RDONLY | O_DIRECTORY);
	if (mfd < 0)
		return fail("open mount");
	fd = open_by_handle_at(mfd, fh, O_RDONLY);
	if (fd < 0)
		return fail("open_by_handle_at");
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if (write(STDOUT_FILENO, buf, (size_t)n) != n)
			return fail("write");
	}
	if (n < 0)
		return fail("read");
	close(fd);
	close(mfd);
	free(fh);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "save"))
		return save(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "open"))
		return open_handle(argv[2], argv[3]);
	fprintf(stderr, "usage: handle save PATH OUT | handle open MOUNT IN\n");
	return 2;
}
