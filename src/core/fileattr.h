/* fileattr.c: the inode flags of lsattr/chattr and the FS_IOC_FSGETXATTR view, with the
 * kernel's rules for which flags a caller may change and which a new inode inherits. */
#ifndef F2FUSE_CORE_FILEATTR_H
#define F2FUSE_CORE_FILEATTR_H

#include <stddef.h>
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
/* A new inode's compression (the kernel's set_compress_new_inode), once its mode, flags,
 * inline flags and extra attributes are set: a regular file named for a hot extension
 * or a nocompress_extension stays plain, one named for a compress_extension is
 * compressed; otherwise a regular file or directory takes its directory's NOCOMP_FL or
 * compression.  Compression means the mount's algorithm, level, cluster size and
 * checksum choice, and no inline data. */
void fileattr_new_compression(const struct f2fuse *fs, const struct inode_info *parent,
                              struct f2fs_inode *ri, const char *name, size_t len);
uint32_t fileattr_projid(const struct f2fuse *fs, const struct f2fs_inode *ri);

#endif
