// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The [tiers] section: the disk-kind tiers a chain has below the [disk]
 * tier, one line each, "NAME = KIND:PATH[:LIMIT]", in chain order; the
 * same as -o tiers_NAME=KIND:PATH[:LIMIT], or all of them at once as
 * -o tiers=NAME=SPEC+NAME=SPEC (commas separate mount options). Every
 * check of one entry is here; the checks against the machine and across
 * tiers (the paths exist, no two tiers share one) are cfg_validate()'s.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/config.h"
#include "config/config_int.h"

static const char *const kind_names[] = {
	[CFG_TIER_DISK] = "disk",
	[CFG_TIER_SHARED] = "shared",
};

const char *cfg_tier_kind_name(enum cfg_tier_kind kind)
{
	return (unsigned int)kind < sizeof(kind_names) / sizeof(kind_names[0]) ?
		       kind_names[kind] :
		       "?";
}

static bool name_valid(const char *n)
{
	size_t len = strlen(n);

	return len && len < CFG_TIER_NAME_MAX &&
	       strspn(n, "abcdefghijklmnopqrstuvwxyz"
			 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == len;
}

/*
 * Parse @spec into @t (its name set by the caller). On error @t is
 * unchanged and @why says what is wrong.
 */
static int parse_spec(const char *spec, struct cfg_tier *t, char *why,
		      size_t whylen)
{
	const char *colon = strchr(spec, ':'), *path, *lim;
	struct cfg_tier n = *t;
	char kind[32], pbuf[4096];
	size_t klen;
	int rc;

	if (!colon) {
		say(why, whylen, "'%s': expected KIND:PATH[:LIMIT], such as "
				 "disk:/mnt/nvme:200G", spec);
		return -EINVAL;
	}
	klen = (size_t)(colon - spec);
	if (klen >= sizeof(kind))
		klen = sizeof(kind) - 1;
	memcpy(kind, spec, klen);
	kind[klen] = '\0';
	if (!strcasecmp(kind, "disk")) {
		n.kind = CFG_TIER_DISK;
	} else if (!strcasecmp(kind, "shared")) {
		n.kind = CFG_TIER_SHARED;
	} else if (!strcasecmp(kind, "device") || !strcasecmp(kind, "host")) {
		/*
		 * A memory tier below a disk-kind one could serve no read:
		 * reads are served from memory, which the tiers above hold
		 * whenever anything does, and a copy pushed out of the disk
		 * tier into memory would take room the faster tiers gave up.
		 */
		say(why, whylen, "kind '%s' cannot come after a disk-kind "
				 "tier: the device and host tiers are first in "
				 "every chain; [tiers] lists disk or shared "
				 "tiers", kind);
		return -EINVAL;
	} else {
		say(why, whylen, "unknown kind '%s' (known: disk, shared)",
		    kind);
		return -EINVAL;
	}
	path = colon + 1;
	lim = strrchr(path, ':');
	if ((size_t)(lim ? lim - path : (ptrdiff_t)strlen(path)) >=
	    sizeof(pbuf)) {
		say(why, whylen, "path is longer than %zu bytes",
		    sizeof(pbuf) - 1);
		return -EINVAL;
	}
	snprintf(pbuf, sizeof(pbuf), "%.*s",
		 (int)(lim ? lim - path : (ptrdiff_t)strlen(path)), path);
	memset(&n.limit, 0, sizeof(n.limit));
	if (lim) {
		rc = parse_size(lim + 1, true, &n.limit, why, whylen);
		if (rc)
			return rc;
		if (!n.limit.is_percent && !n.limit.bytes) {
			say(why, whylen, "'%s': a limit of zero is not allowed",
			    lim + 1);
			return -EINVAL;
		}
	}
	if (strchr(pbuf, '+')) {
		/* It would split a -o tiers= list where no one meant it. */
		say(why, whylen, "'%s': a tier's path cannot hold '+'", pbuf);
		return -EINVAL;
	}
	n.path = NULL;
	rc = parse_path(pbuf, &n.path, why, whylen);
	if (rc)
		return rc;
	free(t->path);
	*t = n;
	return 0;
}

/* The entry of @name in @ts, or NULL. */
static struct cfg_tier *find(struct cfg_tiers *ts, const char *name)
{
	for (unsigned int i = 0; i < ts->n; i++)
		if (!strcasecmp(ts->t[i].name, name))
			return &ts->t[i];
	return NULL;
}

/* Set @name to @spec in @ts, remembering @origin. */
static int tier_set(struct cfg_tiers *ts, const char *name, const char *spec,
		    uint32_t origin, char *why, size_t whylen)
{
	struct cfg_tier *t, fresh = { 0 };
	int rc;

	if (!name_valid(name)) {
		say(why, whylen, "'%s' is not a tier name: 1 to %d letters, "
				 "digits, '_' or '-'", name,
		    CFG_TIER_NAME_MAX - 1);
		return -EINVAL;
	}
	if (!strcasecmp(name, "device") || !strcasecmp(name, "host") ||
	    !strcasecmp(name, "disk")) {
		say(why, whylen, "'%s' names a tier every chain has; give this "
				 "one a name of its own", name);
		return -EINVAL;
	}
	if (!spec) {
		say(why, whylen, "missing value");
		return -EINVAL;
	}
	t = find(ts, name);
	if (!t) {
		if (ts->n == CFG_MAX_TIERS) {
			say(why, whylen, "at most %d tiers below [disk]",
			    CFG_MAX_TIERS);
			return -EINVAL;
		}
		snprintf(fresh.name, sizeof(fresh.name), "%s", name);
		rc = parse_spec(spec, &fresh, why, whylen);
		if (rc)
			return rc;
		fresh.origin = origin;
		ts->t[ts->n++] = fresh;
		return 0;
	}
	rc = parse_spec(spec, t, why, whylen);
	if (!rc)
		t->origin = origin;
	return rc;
}

static void tiers_free(struct cfg_tiers *ts)
{
	for (unsigned int i = 0; i < ts->n; i++)
		free(ts->t[i].path);
	ts->n = 0;
}

void tiers_clear(struct tfs_config *cfg)
{
	tiers_free(&cfg->tiers);
}

int tiers_set_at(struct tfs_config *cfg, const char *name, const char *spec,
		 uint32_t origin, char *why, size_t whylen)
{
	return tier_set(&cfg->tiers, name, spec, origin, why, whylen);
}

int cfg_tier_set(struct tfs_config *cfg, const char *name, const char *spec,
		 char *err, size_t errlen)
{
	char why[1024];
	int rc = tier_set(&cfg->tiers, name, spec, ORIGIN_SET, why,
			  sizeof(why));

	if (rc)
		say(err, errlen, "%s: %s", name, why);
	return rc;
}

int cfg_tiers_set_list(struct tfs_config *cfg, const char *list, char *err,
		       size_t errlen)
{
	struct cfg_tiers ts = { 0 };
	char *copy = strdup(list ? list : ""), *save = NULL, *item;
	char why[1024];
	int rc = 0;

	if (!copy) {
		say(err, errlen, "-o tiers: out of memory");
		return -ENOMEM;
	}
	for (item = strtok_r(copy, "+", &save); item;
	     item = strtok_r(NULL, "+", &save)) {
		char *eq = strchr(item, '=');

		while (isspace((unsigned char)*item))
			item++;
		if (!eq) {
			say(err, errlen, "-o tiers: '%s': expected "
					 "NAME=KIND:PATH[:LIMIT]", item);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		if (find(&ts, item)) {
			say(err, errlen, "-o tiers: '%s' is listed twice",
			    item);
			rc = -EINVAL;
			break;
		}
		rc = tier_set(&ts, item, eq + 1, ORIGIN_OPTION, why,
			      sizeof(why));
		if (rc) {
			say(err, errlen, "-o tiers: %s: %s", item, why);
			break;
		}
	}
	free(copy);
	if (rc) {
		tiers_free(&ts);
		return rc;
	}
	tiers_free(&cfg->tiers);
	cfg->tiers = ts;
	return 0;
}

void tier_where(const struct tfs_config *cfg, const struct cfg_tier *t,
		char *buf, size_t len)
{
	if (t->origin == ORIGIN_OPTION)
		snprintf(buf, len, "-o tiers_%s", t->name);
	else if (t->origin == ORIGIN_DEFAULT || t->origin == ORIGIN_SET ||
		 !cfg->config_file)
		snprintf(buf, len, "tiers_%s", t->name);
	else
		snprintf(buf, len, "%s:%u: %s", cfg->config_file, t->origin,
			 t->name);
}
