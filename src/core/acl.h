/* acl.c: POSIX ACL semantics (POSIX.1e, as the kernel's fs/f2fs/acl.c applies them) over the
 * ACLs xattr.c stores: inheritance of a default ACL on creation, chmod moving the mask */
#ifndef F2FUSE_CORE_ACL_H
#define F2FUSE_CORE_ACL_H

#include <stddef.h>
#include <stdint.h>

#include "cache/pcache.h"

struct f2fuse;
struct inode_info;

/* The kernel's posix_acl xattr form (what getxattr shows, what xattr.c converts from). */
#define ACL_XATTR_VERSION 2u
#define ACL_UNDEFINED_ID  0xFFFFFFFFu
enum {
    ACL_USER_OBJ = 0x01,
    ACL_USER = 0x02,
    ACL_GROUP_OBJ = 0x04,
    ACL_GROUP = 0x08,
    ACL_MASK = 0x10,
    ACL_OTHER = 0x20
};

/* What a new inode takes from its parent (xattr form, malloc'ed; NULL: nothing). */
struct acl_inherited {
    uint8_t *access, *dflt;
    size_t access_len, dflt_len;
};

/* Before the inode exists: *mode (the mode asked for, type bits included) becomes the mode
 * it gets.  With a default ACL on dir, that ACL masks it (the umask is not used) and becomes
 * the new access ACL unless the result says no more than the mode, and a new directory's
 * default ACL; without one, the umask masks it.  Symlinks take neither. */
int acl_create(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage, uint32_t *mode,
               uint32_t umask, struct acl_inherited *out);
/* After: stores them on the new inode. */
int acl_init(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
             const struct acl_inherited *acls);
void acl_inherited_free(struct acl_inherited *acls);

/* After a chmod set i_mode: an access ACL's owner, mask (or owning group) and other entries
 * take the new permission bits (posix_acl_chmod). */
int acl_chmod(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);

#endif
