/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * POSIX ACLs as the kernel hands them to a FUSE daemon: the values of
 * system.posix_acl_access and system.posix_acl_default, in the xattr
 * format of <linux/posix_acl_xattr.h> (a little-endian version word, then
 * {tag, perm, id} entries sorted by tag and id). With FUSE_POSIX_ACL the
 * kernel checks permissions against them itself, but leaves the rest to
 * the daemon: keeping the mode in step with the access ACL, the mask in
 * step with chmod, and giving new files their directory's default ACL.
 * These are the kernel's posix_acl_* rules on those bytes, FUSE-free, so
 * that tests/unit/test_args.c runs them without a mount.
 */
#ifndef TFS_FS_ACL_H
#define TFS_FS_ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFS_ACL_ACCESS "system.posix_acl_access"
#define TFS_ACL_DEFAULT "system.posix_acl_default"

/* Whether @name is one of the two. */
bool tfs_acl_name(const char *name);

/*
 * Whether @v (@len bytes) is a well-formed ACL, as the kernel's
 * posix_acl_valid() has it: the version, whole entries, one each of
 * user::, group:: and other::, a mask:: when there are named entries, no
 * permission bit beyond rwx, entries sorted by tag and named ones by id
 * without repeats. 0 or -EINVAL.
 */
int tfs_acl_check(const void *v, size_t len);

/*
 * Setting the access ACL @v (checked) on an inode of mode *@mode: the
 * permission bits follow it (owner from user::, group from mask:: when
 * there is one, else group::, other from other::). Returns 1 when the ACL
 * says more than the mode can and must be kept, 0 when the mode says it
 * all and the ACL is not stored (posix_acl_update_mode()).
 */
int tfs_acl_update_mode(const void *v, size_t len, uint32_t *mode);

/*
 * A new inode of mode *@mode in a directory whose default ACL is @v
 * (checked), rewritten in place into the new inode's access ACL: every
 * class is cut to what the mode allows and the mode to what the ACL
 * allows, the umask left out (posix_acl_create()). Returns 1 when the
 * result must be kept as the access ACL, 0 when the mode says it all.
 */
int tfs_acl_create(void *v, size_t len, uint32_t *mode);

/* chmod to @mode: the access ACL @v (checked) follows it in place, the
 * mask standing for the group class when there is one
 * (posix_acl_chmod()). */
void tfs_acl_chmod(void *v, size_t len, uint32_t mode);

#endif
