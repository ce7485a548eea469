/* The ioctls behind lsattr, chattr and the project-id tools (FS_IOC_GETFLAGS/SETFLAGS,
 * FS_IOC_FSGETXATTR/FSSETXATTR) and FS_IOC_GET_ENCRYPTION_NONCE, decoded from the buffers
 * FUSE passes. */
#ifndef F2FUSE_FUSE_FILEATTR_IOCTL_H
#define F2FUSE_FUSE_FILEATTR_IOCTL_H

#include <stddef.h>
#include <stdint.h>

struct f2fuse;

/* Fills out (out_size bytes) and sets *reply_len for a read; -ENOTTY for a command that is
 * not one of the five, -EINVAL for a buffer of the wrong size. */
int fileattr_ioctl(struct f2fuse *fs, uint32_t ino, unsigned int cmd, uint32_t caller_uid,
                   const void *in, size_t in_size, void *out, size_t out_size, size_t *reply_len);

#endif
