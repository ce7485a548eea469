/* FS_IOC_MEASURE_VERITY and FS_IOC_ENABLE_VERITY (`fsverity measure`, `fsverity enable`),
 * decoded from the buffers FUSE passes for them. */
#ifndef F2FUSE_FUSE_VERITY_IOCTL_H
#define F2FUSE_FUSE_VERITY_IOCTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct f2fuse;

/* What the kernel's checks of the caller need: the open file's access mode and whether the
 * caller may write the inode (inode_permission(MAY_WRITE)). */
struct verity_caller {
    bool fd_readable;
    bool may_write;
};

/* True for the two commands. */
bool verity_ioctl_cmd(unsigned int cmd);

/* Runs cmd: out (out_size bytes) gets the reply and *reply_len its length. */
int verity_ioctl(struct f2fuse *fs, uint32_t ino, unsigned int cmd, const struct verity_caller *who,
                 const void *in, size_t in_size, void *out, size_t out_size, size_t *reply_len);

#endif
