/* xattr.c: extended attributes, inline and in their own node */
#ifndef F2FUSE_CORE_XATTR_H
#define F2FUSE_CORE_XATTR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/pcache.h"

struct f2fuse;
struct inode_info;

ssize_t xattr_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                  const char *name, void *value, size_t size);
ssize_t xattr_list(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, char *list,
                   size_t size);
#define XATTR_CREATE_FLAG  1 /* = XATTR_CREATE */
#define XATTR_REPLACE_FLAG 2 /* = XATTR_REPLACE */
/* Sets (value != NULL) or removes an attribute; flags as setxattr(2). */
int xattr_set(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, const char *name,
              const void *value, size_t size, int flags);
/* The same for an attribute by its on-disk index and name, hidden ones too (fs-verity's
 * descriptor location, index 11 "v"; the encryption context, 9 "c"): -ENODATA when absent,
 * -ERANGE when over size. */
ssize_t xattr_get_internal(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           uint8_t index, const char *name, void *value, size_t size);
int xattr_set_internal(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint8_t index,
                       const char *name, const void *value, size_t size, int flags);
/* Removes security.capability (a write, truncate or chown does, as the VFS's killpriv):
 * 1 when there was one, 0 when not, or -errno.  Cheap when the inode has no xattrs. */
int xattr_drop_capability(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);

/* setxattr (value != NULL) or removexattr on inode ino: space, locks, the change, ctime. */
int xattr_change(struct f2fuse *fs, uint32_t ino, const char *name, const void *value, size_t size,
                 int flags);

#endif
