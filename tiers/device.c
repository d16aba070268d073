// SPDX-License-Identifier: GPL-2.0-or-later
#include <string.h>

#include "tiers/device.h"

static const struct tier_dev_ops *const backends[] = {
#ifdef TFS_HAVE_CUDA
	&tier_dev_cuda_ops,
#endif
	&tier_dev_sim_ops,
};

const struct tier_dev_ops *tier_dev_lookup(const char *name)
{
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}
