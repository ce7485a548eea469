/* fileattr.c: the inode flags of lsattr/chattr and the FS_IOC_FSGETXATTR view, with the
 * kernel's rules for which flags a caller may change and which a new inode inherits. */
#ifndef F2FUSE_CORE_FILEATTR_H
#define F2FUSE_CORE_FILEATTR_H

#include <stdint.h>

#include "core/inode.h"
#include "f2fuse.h"

struct f2fuse;
struct page;

int fileattr_get(struct f2fuse *fs, uint32_t ino, struct f2fuse_fileattr *fa);
int fileattr_set(struct f2fuse *fs, uint32_t ino, const struct f2fuse_fileattr *fa,
                 uint32_t caller_uid);
/* The i_flags and i_projid a new inode of this mode takes from its parent directory. */
uint32_t fileattr_inherited_flags(const struct inode_info *parent, uint16_t mode);
uint32_t fileattr_projid(const struct f2fuse *fs, const struct f2fs_inode *ri);

#endif
