/* POSIX ACL semantics.  The FUSE kernel checks permissions against the ACLs (FUSE's POSIX ACL
 * capability) but leaves to the file system what the kernel's f2fs does in f2fs_init_acl and
 * posix_acl_chmod: a new inode takes its parent's default ACL, masked by the mode asked for
 * (the umask is then not applied), and chmod rewrites the access ACL.  ACLs are handled in
 * the kernel's xattr form; xattr.c converts to and from f2fs's on-disk form, updates the mode
 * on a set access ACL and drops one that says no more than the mode. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/acl.h"
#include "core/context.h"
#include "core/format.h"
#include "core/fsync.h"
#include "core/inode.h"
#include "core/node.h"
#include "core/xattr.h"

static const char acl_access[] = "system.posix_acl_access";
static const char acl_default[] = "system.posix_acl_default";

/* An ACL of an inode in xattr form: 0 with *out NULL when it has none (or an empty one,
 * which the kernel reads as none). */
static int acl_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                    const char *name, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    ssize_t n = xattr_get(fs, ii, ipage, name, NULL, 0);
    if (n == -ENODATA)
        return 0;
    if (n < 0)
        return (int)n;
    if ((size_t)n <= sizeof(uint32_t))
        return 0;
    uint8_t *v = fs_malloc(fs, (size_t)n);
    if (!v)
        return -ENOMEM;
    ssize_t got = xattr_get(fs, ii, ipage, name, v, (size_t)n);
    if (got < 0 || got != n) {
        free(v);
        return got < 0 ? (int)got : -EIO;
    }
    *out = v;
    *len = (size_t)n;
    return 0;
}

static struct f2fs_acl_entry *acl_entry(uint8_t *v, size_t i)
{
    return (struct f2fs_acl_entry *)(v + sizeof(uint32_t) + i * sizeof(struct f2fs_acl_entry));
}

static size_t acl_count(size_t len)
{
    return (len - sizeof(uint32_t)) / sizeof(struct f2fs_acl_entry);
}

/* posix_acl_create_masq: the ACL and *mode masked by each other, owner by owner, group class
 * by the mask (or the owning group), other by other.  1 when the ACL holds more than a mode
 * can (named entries, a mask), 0 when it is the mode's equivalent, or -EIO. */
static int acl_masq(uint8_t *v, size_t len, uint32_t *mode)
{
    uint32_t m = *mode;
    struct f2fs_acl_entry *group = NULL, *mask = NULL;
    int extended = 0;
    for (size_t i = 0; i < acl_count(len); i++) {
        struct f2fs_acl_entry *e = acl_entry(v, i);
        uint16_t perm = le16(e->e_perm);
        switch (le16(e->e_tag)) {
        case ACL_USER_OBJ:
            perm &= (uint16_t)((m >> 6) | ~7u);
            m &= (uint32_t)perm << 6 | ~0700u;
            e->e_perm = htole16(perm);
            break;
        case ACL_USER:
        case ACL_GROUP: extended = 1; break;
        case ACL_GROUP_OBJ: group = e; break;
        case ACL_MASK:
            mask = e;
            extended = 1;
            break;
        case ACL_OTHER:
            perm &= (uint16_t)(m | ~7u);
            m &= perm | ~7u;
            e->e_perm = htole16(perm);
            break;
        default: return -EIO;
        }
    }
    struct f2fs_acl_entry *g = mask ? mask : group;
    if (!g)
        return -EIO;
    uint16_t perm = le16(g->e_perm) & (uint16_t)((m >> 3) | ~7u);
    m &= (uint32_t)perm << 3 | ~070u;
    g->e_perm = htole16(perm);
    *mode = (*mode & ~0777u) | (m & 0777u);
    return extended;
}

int acl_create(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage, uint32_t *mode,
               uint32_t umask, struct acl_inherited *out)
{
    memset(out, 0, sizeof(*out));
    if (S_ISLNK(*mode))
        return 0;
    uint8_t *dflt;
    size_t len;
    int err = acl_read(fs, dir, dpage, acl_default, &dflt, &len);
    if (err)
        return err;
    if (!dflt) {
        *mode &= ~(umask & 0777u);
        return 0;
    }
    uint8_t *access = fs_malloc(fs, len);
    if (!access) {
        free(dflt);
        return -ENOMEM;
    }
    memcpy(access, dflt, len);
    int extended = acl_masq(access, len, mode);
    if (extended < 0) {
        free(access);
        free(dflt);
        return fs_corrupt(fs, "inode %u: default ACL without owning group", dir->ino);
    }
    if (extended) {
        out->access = access;
        out->access_len = len;
    } else {
        free(access); /* the mode says it all: not stored, as f2fs */
    }
    if (S_ISDIR(*mode)) {
        out->dflt = dflt;
        out->dflt_len = len;
    } else {
        free(dflt);
    }
    return 0;
}

int acl_init(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
             const struct acl_inherited *acls)
{
    int err = 0;
    if (acls->dflt)
        err = xattr_set(fs, ii, ipage, acl_default, acls->dflt, acls->dflt_len, 0);
    if (!err && acls->access)
        err = xattr_set(fs, ii, ipage, acl_access, acls->access, acls->access_len, 0);
    if (!err && (acls->dflt || acls->access))
        fsync_needs_checkpoint(fs, ii->ino); /* roll-forward replays no xattrs */
    return err;
}

void acl_inherited_free(struct acl_inherited *acls)
{
    free(acls->access);
    free(acls->dflt);
    memset(acls, 0, sizeof(*acls));
}

int acl_chmod(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    uint8_t *v;
    size_t len;
    int err = acl_read(fs, ii, ipage, acl_access, &v, &len);
    if (err || !v)
        return err;
    uint32_t mode = le16(page_node(ipage)->i.i_mode);
    struct f2fs_acl_entry *group = NULL, *mask = NULL;
    for (size_t i = 0; i < acl_count(len); i++) {
        struct f2fs_acl_entry *e = acl_entry(v, i);
        switch (le16(e->e_tag)) {
        case ACL_USER_OBJ: e->e_perm = htole16((uint16_t)(mode >> 6 & 7)); break;
        case ACL_GROUP_OBJ: group = e; break;
        case ACL_MASK: mask = e; break;
        case ACL_OTHER: e->e_perm = htole16((uint16_t)(mode & 7)); break;
        default: break;
        }
    }
    struct f2fs_acl_entry *g = mask ? mask : group;
    if (g) {
        g->e_perm = htole16((uint16_t)(mode >> 3 & 7));
        ii->mode = (uint16_t)mode;
        /* xattr.c takes the bits back from it (the same) and drops it if now plain */
        err = xattr_set(fs, ii, ipage, acl_access, v, len, 0);
        if (!err)
            fsync_needs_checkpoint(fs, ii->ino);
    } else {
        err = fs_corrupt(fs, "inode %u: access ACL without owning group", ii->ino);
    }
    free(v);
    return err;
}
