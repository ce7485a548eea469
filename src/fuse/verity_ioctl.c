/* The fs-verity ioctls as the kernel's FUSE hands them over (fs/fuse/ioctl.c): MEASURE with
 * struct fsverity_digest in and out, its size set from the caller's digest_size; ENABLE
 * with struct fsverity_enable_arg followed by the salt and the signature the caller's
 * pointers named.  The checks are fsverity_ioctl_enable's and fsverity_ioctl_measure's, in
 * their order; the file system's own ones are the library's. */
#include <errno.h>
#include <linux/fsverity.h>
#include <string.h>

#include "f2fuse.h"
#include "fuse/verity_ioctl.h"

bool verity_ioctl_cmd(unsigned int cmd)
{
    return cmd == (unsigned int)FS_IOC_MEASURE_VERITY || cmd == (unsigned int)FS_IOC_ENABLE_VERITY;
}

static int measure(struct f2fuse *fs, uint32_t ino, const void *in, size_t in_size, void *out,
                   size_t out_size, size_t *reply_len)
{
    struct fsverity_digest head;
    if (!in || in_size < sizeof(head))
        return -EFAULT;
    memcpy(&head, in, sizeof(head));
    struct f2fuse_verity_digest d;
    int err = f2fuse_verity_measure(fs, ino, &d);
    if (err)
        return err;
    if (head.digest_size < d.size)
        return -EOVERFLOW;
    if (out_size < sizeof(head) + d.size)
        return -EFAULT;
    head.digest_algorithm = d.algorithm;
    head.digest_size = d.size;
    memcpy(out, &head, sizeof(head));
    memcpy((uint8_t *)out + sizeof(head), d.digest, d.size);
    *reply_len = sizeof(head) + d.size;
    return 0;
}

static int enable(struct f2fuse *fs, uint32_t ino, const struct verity_caller *who, const void *in,
                  size_t in_size)
{
    struct fsverity_enable_arg arg;
    if (!in || in_size < sizeof(arg))
        return -EFAULT;
    memcpy(&arg, in, sizeof(arg));
    if (arg.version != 1)
        return -EINVAL;
    static const uint64_t zeros[11];
    if (arg.__reserved1 || memcmp(arg.__reserved2, zeros, sizeof(zeros)))
        return -EINVAL;
    if (arg.block_size == 0 || (arg.block_size & (arg.block_size - 1)))
        return -EINVAL;
    if (arg.salt_size > 32 || arg.sig_size > 16384 - 256)
        return -EMSGSIZE;
    /* The salt and the signature follow the argument, as fuse_setup_enable_verity lays them. */
    if ((uint64_t)sizeof(arg) + arg.salt_size + arg.sig_size > in_size)
        return -EFAULT;
    if (!who->may_write)
        return -EACCES;
    if (!who->fd_readable)
        return -EBADF;
    const uint8_t *salt = (const uint8_t *)in + sizeof(arg);
    struct f2fuse_verity_enable e = {.hash_algorithm = arg.hash_algorithm,
                                     .block_size = arg.block_size,
                                     .salt = salt,
                                     .salt_size = arg.salt_size,
                                     .signature = salt + arg.salt_size,
                                     .sig_size = arg.sig_size};
    return f2fuse_verity_enable(fs, ino, &e);
}

int verity_ioctl(struct f2fuse *fs, uint32_t ino, unsigned int cmd, const struct verity_caller *who,
                 const void *in, size_t in_size, void *out, size_t out_size, size_t *reply_len)
{
    *reply_len = 0;
    if (cmd == (unsigned int)FS_IOC_MEASURE_VERITY)
        return measure(fs, ino, in, in_size, out, out_size, reply_len);
    if (cmd == (unsigned int)FS_IOC_ENABLE_VERITY)
        return enable(fs, ino, who, in, in_size);
    return -ENOTTY;
}
