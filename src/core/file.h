/* file.c: the operations on one file's contents and attributes.  Each takes cp_lock shared
 * and the inode's stripe, reserves its space first and returns 0 (a byte count) or -errno. */
#ifndef F2FUSE_CORE_FILE_H
#define F2FUSE_CORE_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "f2fuse.h"

/* flags: F2FUSE_WRITE_*; *mode_changed says whether the set-id bits went. */
ssize_t file_write(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off,
                   unsigned flags, bool *mode_changed);
int file_setattr(struct f2fuse *fs, uint32_t ino, const struct f2fuse_setattr *sa,
                 struct f2fuse_attr *attr);
int file_fallocate(struct f2fuse *fs, uint32_t ino, int mode, uint64_t off, uint64_t len);
/* The caller closed the inode: an unlinked one is freed with its last reference. */
int file_release(struct f2fuse *fs, uint32_t ino);

#endif
