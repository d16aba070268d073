// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The config file parser (config/config.c: cfg_load_file, the line reader
 * in front of inih, every value parser) on arbitrary file contents.
 *
 * Contract checked: cfg_load_file() returns 0, -EINVAL or -ENOMEM, never
 * crashes or leaks; on 0 the config is one the daemon can trust
 * (cfg_check_valid); on error the message starts with the file's name.
 * cfg_validate() then never crashes either.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cfg_common.h"
#include "config/log.h"

static int memfd = -1;
static char path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	memfd = memfd_create("tierfs-fuzz.conf", MFD_CLOEXEC);
	if (memfd < 0) {
		perror("memfd_create");
		exit(1);
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	tfs_log_max = 0;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tfs_config cfg;
	char err[1024], prefix[80];
	int rc;

	if (ftruncate(memfd, 0) ||
	    (size && pwrite(memfd, data, size, 0) != (ssize_t)size))
		abort();
	cfg_defaults(&cfg);
	err[0] = '\0';
	rc = cfg_load_file(&cfg, path, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM, "rc %d", rc);
	FUZZ_CHECK(cfg.config_file && !strcmp(cfg.config_file, path),
		   "config_file not set");
	if (rc) {
		snprintf(prefix, sizeof(prefix), "%s:", path);
		cfg_check_msg(err, sizeof(err), prefix);
	} else {
		cfg_check_valid(&cfg);
		rc = cfg_validate(&cfg, NULL, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -ENOMEM,
			   "validate rc %d", rc);
		if (rc)
			FUZZ_CHECK(strnlen(err, sizeof(err)) < sizeof(err) &&
					   err[0],
				   "validate gave no message");
	}
	cfg_free(&cfg);
	return 0;
}
