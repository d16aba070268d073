// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The per-user shares ([device] and [host] user_share): what each user
 * holds beyond eviction's reach, as store_lease.c describes. Accounting,
 * below eviction: st_charge() calls st_share_follow() and st_reserve()
 * st_share_pinned(), and nothing here calls a file above.
 */
#include <errno.h>
#include <stdlib.h>

#include "tiers/store_i.h"

/* s->lock held throughout. */

/* Root and the daemon's own user are never counted. */
bool st_user_exempt(const struct tier_store *s, uid_t uid)
{
	return !uid || uid == s->self_uid;
}

struct user_use **st_user_find(struct tier_store *s, uid_t uid)
{
	struct user_use **pp;

	for (pp = &s->users; *pp; pp = &(*pp)->next)
		if ((*pp)->uid == uid)
			break;
	return pp;
}

/* What @uid's exports hold in the backends that account for them
 * (export_held): snapshots and blocks kept after a lease. s->lock held. */
static uint64_t exp_user_held(struct tier_store *s, uid_t uid)
{
	uint64_t n = 0;

	for (unsigned int g = 0; g < s->ngpus; g++) {
		struct tier_dev *dev = s->gpus[g].dev;

		if (dev->ops->export_held)
			n += dev->ops->export_held(dev, uid);
	}
	return n;
}

/* @uid's entry, made when it has none; NULL when out of memory. */
struct user_use *st_user_get(struct tier_store *s, uid_t uid)
{
	struct user_use **pp = st_user_find(s, uid);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (*pp)
			(*pp)->uid = uid;
	}
	return *pp;
}

/* Free @uid's entry once it holds nothing. */
void st_user_trim(struct tier_store *s, uid_t uid)
{
	struct user_use **pp = st_user_find(s, uid), *u = *pp;

	if (u && !u->bytes[TFS_TIER_DEVICE] && !u->bytes[TFS_TIER_HOST] &&
	    !u->exports && !u->pins) {
		*pp = u->next;
		free(u);
	}
}

int st_share_check(struct tier_store *s, int t, uid_t uid, uint64_t bytes)
{
	struct user_use *u;

	if (st_user_exempt(s, uid) || !s->user_share[t])
		return 0;
	u = *st_user_find(s, uid);
	/* On the device, what the backends keep of @uid's exports too. */
	return (u ? u->bytes[t] : 0) +
			       (t == TFS_TIER_DEVICE ? exp_user_held(s, uid) :
						       0) +
			       bytes >
		       s->user_share[t] ?
		       -EDQUOT :
		       0;
}

int st_share_charge(struct tier_store *s, int t, uid_t uid, uint64_t bytes,
		    bool force)
{
	struct user_use *u;
	int rc;

	if (st_user_exempt(s, uid) || !bytes)
		return 0;
	rc = force ? 0 : st_share_check(s, t, uid, bytes);
	if (rc)
		return rc;
	u = st_user_get(s, uid);
	if (!u)
		return -ENOMEM;
	u->bytes[t] += bytes;
	return 0;
}

void st_share_uncharge(struct tier_store *s, int t, uid_t uid,
		       uint64_t bytes)
{
	struct user_use *u;

	if (st_user_exempt(s, uid) || !bytes)
		return;
	u = *st_user_find(s, uid);
	if (!u)
		return;
	u->bytes[t] -= bytes < u->bytes[t] ? bytes : u->bytes[t];
	st_user_trim(s, uid);
}

void st_share_follow(struct tier_store *s, struct tier_buf *b, int t,
		     int64_t delta)
{
	struct user_use *u;

	if (!st_pin_charged(b) || t == TFS_TIER_DISK || !delta)
		return;
	/* The entry lives while the pin does (u->pins). */
	u = *st_user_find(s, b->pin_uid);
	if (!u)
		return;
	if (delta > 0)
		u->bytes[t] += (uint64_t)delta;
	else
		u->bytes[t] -= (uint64_t)-delta < u->bytes[t] ?
				       (uint64_t)-delta :
				       u->bytes[t];
}

int st_share_pinned(struct tier_store *s, struct tier_buf *b, int t,
		    uint64_t bytes)
{
	if (!st_pin_charged(b) || t == TFS_TIER_DISK)
		return 0;
	return st_share_check(s, t, b->pin_uid, bytes);
}
