/* fileattr.c: the inode flags of lsattr/chattr and the FS_IOC_FSGETXATTR view, with the
 * kernel's rules for which flags a caller may change and which a new inode inherits. */
#ifndef F2FUSE_CORE_FILEATTR_H
#define F2FUSE_CORE_FILEATTR_H

#include <stdbool.h>
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

/* The kernel's rules for immutable and append-only inodes (IS_IMMUTABLE, IS_APPEND: fs/namei.c,
 * fs/open.c, fs/attr.c, fs/xattr.c, fs/open.c's vfs_fallocate); each is 0 or -EPERM.
 * Images a kernel or Android wrote carry these flags, and they are kept as the kernel keeps
 * them. */
/* An open with these flags: no write access to an immutable inode; an append-only one only
 * for appending, never truncated. */
int fileattr_may_open(const struct inode_info *ii, int open_flags);
/* A caller's write at off (not the kernel's writeback of its cache): none to an immutable
 * file (f2fs_file_write_iter), only at the end of an append-only one. */
int fileattr_may_write(const struct inode_info *ii, uint64_t off);
/* A change of mode, owner, size (F2FUSE_SET_*), or of the times of an immutable inode.  The
 * kernel also refuses explicit times on an append-only one, but FUSE sends the times that
 * writeback_cache kept the same way as utimes(2) does: those of an append-only file
 * are let through, so that its appends' mtime is not lost. */
int fileattr_may_setattr(const struct inode_info *ii, unsigned valid);
/* A change of an extended attribute (ACLs too), or a new hard link to the inode. */
int fileattr_may_change(const struct inode_info *ii);
/* fallocate: none on an immutable inode; on an append-only one only FALLOC_FL_KEEP_SIZE's. */
int fileattr_may_fallocate(const struct inode_info *ii, int mode);
/* A new name in dir (create, link, rename's target). */
int fileattr_may_add_name(const struct inode_info *dir);
/* Removing victim's name from dir (unlink, rmdir, either side of a rename). */
int fileattr_may_drop_name(const struct inode_info *dir, const struct inode_info *victim);

#endif
