// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * See args.h. No FUSE header here: what the kernel's ioctl request says
 * arrives as plain fields of struct tfs_ioc_req.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fs/args.h"
#include "tiers/store.h"

static bool all_zero(const void *p, size_t len)
{
	const unsigned char *c = p;

	for (size_t k = 0; k < len; k++) {
		if (c[k])
			return false;
	}
	return true;
}

static int check_head(uint32_t version, uint32_t flags, uint32_t allowed)
{
	if (version != TFS_ABI_VERSION || (flags & ~allowed))
		return -EINVAL;
	return 0;
}

/*
 * One check per command, of the struct tfs_ioc_check() copied into @a: 0,
 * -EINVAL or -EBADF as args.h says.
 */
static int check_exp(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->exp.version, a->exp.flags, TFS_EXPORT_WRITE);

	if (rc)
		return rc;
	/* caller_uuid is any 16 bytes: ones of no GPU get the default GPU,
	 * as zero does. */
	if (a->exp.cuda_runtime || a->exp.caller_pid || a->exp.reserved0 ||
	    !all_zero(a->exp.reserved, sizeof(a->exp.reserved)))
		return -EINVAL;
	if (!req->readable ||
	    ((a->exp.flags & TFS_EXPORT_WRITE) && !req->writable))
		return -EBADF;
	return 0;
}

static int check_rel(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->rel.version, a->rel.flags, TFS_RELEASE_UNMAPPED);

	if (rc)
		return rc;
	return all_zero(a->rel.reserved, sizeof(a->rel.reserved)) ? 0 : -EINVAL;
}

static int check_commit(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->commit.version, a->commit.flags, 0);

	if (rc)
		return rc;
	if (a->commit.waited > TFS_COMMIT_WAITED_EVENT || a->commit.reserved0)
		return -EINVAL;
	return all_zero(a->commit.reserved, sizeof(a->commit.reserved)) ?
		       0 :
		       -EINVAL;
}

static int check_alloc(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->alloc.version, a->alloc.flags, 0);

	if (rc)
		return rc;
	if (!all_zero(a->alloc.reserved, sizeof(a->alloc.reserved)) ||
	    !a->alloc.size)
		return -EINVAL;
	return req->writable ? 0 : -EBADF;
}

static int check_move(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->move.version, a->move.flags, TFS_MOVE_CHAIN);

	if (rc)
		return rc;
	/* With the flag, a tier of the chain by its place in the stats'
	 * "tiers" list: the store says whether this mount has it. */
	if (a->move.reserved0 ||
	    !all_zero(a->move.reserved, sizeof(a->move.reserved)) ||
	    a->move.tier >= ((a->move.flags & TFS_MOVE_CHAIN) ? TFS_TIER_MAX :
								 TFS_TIER_COUNT))
		return -EINVAL;
	return 0;
}

static int check_stat(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->stat.version, a->stat.flags, TFS_STAT_CHAIN);

	if (rc)
		return rc;
	if (a->stat.reserved0 ||
	    !all_zero(a->stat.reserved, sizeof(a->stat.reserved)))
		return -EINVAL;
	return 0;
}

static int check_rec(const struct tfs_ioc_req *req, union tfs_ioc_args *a)
{
	int rc = check_head(a->rec.version, a->rec.flags, TFS_RECLAIM_UUID);

	if (rc)
		return rc;
	if (a->rec.reserved0 || a->rec.freed ||
	    !all_zero(a->rec.reserved, sizeof(a->rec.reserved)))
		return -EINVAL;
	/* Without the flag, the UUID is a reserved field. */
	if (!(a->rec.flags & TFS_RECLAIM_UUID) &&
	    (a->rec.gpu < -1 || !all_zero(a->rec.uuid, sizeof(a->rec.uuid))))
		return -EINVAL;
	return 0;
}

static int check_prefetch(const struct tfs_ioc_req *req,
			  union tfs_ioc_args *a)
{
	const struct tfs_ioc_prefetch *p = &a->prefetch;
	int rc = check_head(p->version, p->flags, TFS_PREFETCH_WAIT);

	if (rc)
		return rc;
	if (p->state || p->pending || p->reserved0 ||
	    !all_zero(p->reserved, sizeof(p->reserved)) ||
	    p->tier >= TFS_TIER_COUNT || p->offset > INT64_MAX ||
	    p->length > INT64_MAX - p->offset)
		return -EINVAL;
	/* It brings the bytes up as a read does: a read's descriptor. */
	if (!req->readable)
		return -EBADF;
	return 0;
}

static const struct {
	unsigned int cmd;
	enum tfs_ioc_where where;
	int (*check)(const struct tfs_ioc_req *req, union tfs_ioc_args *a);
} commands[] = {
#define ROW(N, m, w) { TFS_IOC_##N, w, check_##m },
	TFS_IOC_LIST(ROW)
#undef ROW
};

#define NCMDS (sizeof(commands) / sizeof(commands[0]))

const unsigned int tfs_ioc_cmds[] = {
#define CMD(N, m, w) TFS_IOC_##N,
	TFS_IOC_LIST(CMD)
#undef CMD
};
const char *const tfs_ioc_names[] = {
#define NAME(N, m, w) #N,
	TFS_IOC_LIST(NAME)
#undef NAME
};
const unsigned int tfs_ioc_ncmds = NCMDS;

/* Each union member holds its command's struct exactly: the copy below
 * writes _IOC_SIZE(cmd) bytes. */
#define SIZE_OK(N, m, w)                                                   \
	_Static_assert(_IOC_SIZE(TFS_IOC_##N) ==                           \
			       sizeof(((union tfs_ioc_args *)0)->m),       \
		       "TFS_IOC_" #N " and union tfs_ioc_args." #m " differ");
TFS_IOC_LIST(SIZE_OK)
#undef SIZE_OK

int tfs_ioc_check(const struct tfs_ioc_req *req, union tfs_ioc_args *out)
{
	unsigned int cmd = req->cmd, dir = _IOC_DIR(cmd);
	size_t size = _IOC_SIZE(cmd), i;

	for (i = 0; i < NCMDS && commands[i].cmd != cmd; i++)
		;
	if (i == NCMDS || req->compat)
		return -ENOTTY;
	/* A reclaim is about the mount: any descriptor of it will do. */
	if (commands[i].where == TFS_IOC_FILE && (req->dir || !req->has_file))
		return -ENOTTY;
	/* The kernel copies _IOC_SIZE bytes each way the command says. */
	if (((dir & _IOC_WRITE) && req->in_len != size) ||
	    (!(dir & _IOC_WRITE) && req->in_len) ||
	    ((dir & _IOC_READ) && req->out_len != size) ||
	    (!(dir & _IOC_READ) && req->out_len))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	/* Every command writes its struct in; size == sizeof that struct. */
	memcpy(out, req->in, size);
	return commands[i].check(req, out);
}

/* A value as written by setfattr -v or echo: one trailing newline allowed. */
static size_t trim_value(const char *value, size_t size)
{
	if (size && value[size - 1] == '\n')
		size--;
	return size;
}

int tfs_xattr_parse_tier(const char *value, size_t size, enum tfs_tier *out,
			 int *gpu)
{
	/* The names are the store's, the ones its stats' "tiers" key lists;
	 * "NAME:N" for the device tier's NAME. */
	const char *dev = tier_name(TFS_TIER_DEVICE);
	const size_t dl = strlen(dev) + 1;
	size_t len = size;
	int g = 0;

	while (len && (value[len - 1] == '\n' || value[len - 1] == '\0'))
		len--;
	if (len <= dl || strncasecmp(value, dev, dl - 1) ||
	    value[dl - 1] != ':') {
		int rc = tier_parse(value, len, out);

		if (!rc)
			*gpu = -1;
		return rc;
	}
	/* "device:N", N a GPU ordinal of 1 to 3 digits, 0 to 255. */
	if (len - dl > 3)
		return -EINVAL;
	for (size_t i = dl; i < len; i++) {
		if (value[i] < '0' || value[i] > '9')
			return -EINVAL;
		g = g * 10 + (value[i] - '0');
	}
	if (g > TFS_XATTR_GPU_MAX)
		return -EINVAL;
	*out = TFS_TIER_DEVICE;
	*gpu = g;
	return 0;
}

_Static_assert(TFS_PIN_PRIO_MAX == TIER_SOFT_PIN_MAX &&
		       TFS_PIN_TTL_MAX == TIER_SOFT_TTL_MAX,
	       "the xattr's soft pin is the store's");

/* "N", "Ns", "Nm", "Nh", "Nd": 1 s to TFS_PIN_TTL_MAX. */
static int parse_ttl(const char *s, size_t len, uint32_t *out)
{
	uint64_t n = 0, unit = 1;
	size_t i = 0;

	for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
		n = n * 10 + (uint64_t)(s[i] - '0');
		if (n > TFS_PIN_TTL_MAX)
			return -EINVAL;
	}
	if (!i || len - i > 1)
		return -EINVAL;
	if (i < len) {
		switch (s[i]) {
		case 's':
			break;
		case 'm':
			unit = 60;
			break;
		case 'h':
			unit = 3600;
			break;
		case 'd':
			unit = 86400;
			break;
		default:
			return -EINVAL;
		}
	}
	n *= unit;
	if (!n || n > TFS_PIN_TTL_MAX)
		return -EINVAL;
	*out = (uint32_t)n;
	return 0;
}

int tfs_xattr_parse_pin_value(const char *value, size_t size,
			      struct tfs_pin_value *out)
{
	struct tfs_pin_value v = { 0 };
	size_t len = trim_value(value, size);
	bool seen_prio = false, seen_ttl = false;
	const char *p = value, *end = value + len;

	if (len == 1 && (value[0] == '0' || value[0] == '1')) {
		v.hard = value[0] == '1';
		*out = v;
		return 0;
	}
	if (!len)
		return -EINVAL;
	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		const char *stop = comma ? comma : end;
		size_t n = (size_t)(stop - p);

		if (n > 5 && !memcmp(p, "prio=", 5) && !seen_prio) {
			if (n != 6 || p[5] < '1' || p[5] > '0' + TFS_PIN_PRIO_MAX)
				return -EINVAL;
			v.prio = (uint8_t)(p[5] - '0');
			seen_prio = true;
		} else if (n > 4 && !memcmp(p, "ttl=", 4) && !seen_ttl) {
			if (parse_ttl(p + 4, n - 4, &v.ttl))
				return -EINVAL;
			seen_ttl = true;
		} else {
			return -EINVAL;
		}
		/* A trailing comma is no empty item to accept. */
		if (comma && comma + 1 == end)
			return -EINVAL;
		p = comma ? comma + 1 : end;
	}
	if (!v.prio)
		v.prio = 1;
	*out = v;
	return 0;
}

int tfs_xattr_format_pin(const struct tfs_pin_value *v, char *buf, size_t cap)
{
	if (!v->prio)
		return snprintf(buf, cap, "%d", v->hard);
	if (!v->ttl)
		return snprintf(buf, cap, "prio=%u", v->prio);
	return snprintf(buf, cap, "prio=%u,ttl=%us", v->prio, v->ttl);
}

int tfs_xattr_parse_write(const char *value, size_t size, int *out)
{
	static const char *const names[] = { "default", "write_back",
					      "write_through" };
	size_t len = trim_value(value, size);

	for (int i = 0; i < 3; i++) {
		if (len == strlen(names[i]) && !memcmp(value, names[i], len)) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

int tfs_xattr_parse_pin(const char *value, size_t size, bool *pin)
{
	size_t len = trim_value(value, size);

	if (len != 1 || (value[0] != '0' && value[0] != '1'))
		return -EINVAL;
	*pin = value[0] == '1';
	return 0;
}
