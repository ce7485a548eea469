/* FUSE hands these ioctls over with the sizes encoded in the command; the kernel's fileattr
 * code sends the flags as a 4-byte int whatever the command's declared long. */
#include <errno.h>
#include <linux/fs.h>
#include <linux/fscrypt.h>
#include <string.h>

#include "f2fuse.h"
#include "fuse/fileattr_ioctl.h"

static int get_flags(struct f2fuse *fs, uint32_t ino, void *out, size_t out_size, size_t *reply_len)
{
    struct f2fuse_fileattr fa;
    if (out_size < sizeof(int))
        return -EINVAL;
    int err = f2fuse_fileattr_get(fs, ino, &fa);
    if (err)
        return err;
    int flags = (int)fa.flags;
    memcpy(out, &flags, sizeof(flags));
    *reply_len = sizeof(flags);
    return 0;
}

static int get_xattr(struct f2fuse *fs, uint32_t ino, void *out, size_t out_size, size_t *reply_len)
{
    struct f2fuse_fileattr fa;
    struct fsxattr x = {0};
    if (out_size < sizeof(x))
        return -EINVAL;
    int err = f2fuse_fileattr_get(fs, ino, &fa);
    if (err)
        return err;
    x.fsx_xflags = fa.xflags;
    x.fsx_projid = fa.projid;
    memcpy(out, &x, sizeof(x));
    *reply_len = sizeof(x);
    return 0;
}

static int set_flags(struct f2fuse *fs, uint32_t ino, uint32_t uid, const void *in, size_t in_size)
{
    int flags;
    if (!in || in_size < sizeof(flags))
        return -EINVAL;
    memcpy(&flags, in, sizeof(flags));
    struct f2fuse_fileattr fa = {.flags = (uint32_t)flags};
    return f2fuse_fileattr_set(fs, ino, &fa, uid);
}

static int set_xattr(struct f2fuse *fs, uint32_t ino, uint32_t uid, const void *in, size_t in_size)
{
    struct fsxattr x;
    if (!in || in_size < sizeof(x))
        return -EINVAL;
    memcpy(&x, in, sizeof(x));
    /* Extent size hints and DAX are XFS notions f2fs does not keep (the kernel refuses). */
    if (x.fsx_extsize || x.fsx_cowextsize || (x.fsx_xflags & FS_XFLAG_DAX))
        return -EOPNOTSUPP;
    struct f2fuse_fileattr fa = {
        .xflags = x.fsx_xflags, .projid = x.fsx_projid, .from_xflags = true};
    return f2fuse_fileattr_set(fs, ino, &fa, uid);
}

/* FS_IOC_GET_ENCRYPTION_NONCE (_IOR, 16 bytes: FUSE carries it; the policy ioctls declare
 * sizes that cannot carry a policy back, _IOW and 9 bytes). */
static int get_nonce(struct f2fuse *fs, uint32_t ino, void *out, size_t out_size, size_t *reply_len)
{
    uint8_t nonce[16];
    if (out_size < sizeof(nonce))
        return -EINVAL;
    int err = f2fuse_encryption_nonce(fs, ino, nonce);
    if (err)
        return err;
    memcpy(out, nonce, sizeof(nonce));
    *reply_len = sizeof(nonce);
    return 0;
}

int fileattr_ioctl(struct f2fuse *fs, uint32_t ino, unsigned int cmd, uint32_t caller_uid,
                   const void *in, size_t in_size, void *out, size_t out_size, size_t *reply_len)
{
    *reply_len = 0;
    switch (cmd) {
    case (unsigned int)FS_IOC_GETFLAGS:
    case (unsigned int)FS_IOC32_GETFLAGS: return get_flags(fs, ino, out, out_size, reply_len);
    case (unsigned int)FS_IOC_SETFLAGS:
    case (unsigned int)FS_IOC32_SETFLAGS: return set_flags(fs, ino, caller_uid, in, in_size);
    case (unsigned int)FS_IOC_FSGETXATTR: return get_xattr(fs, ino, out, out_size, reply_len);
    case (unsigned int)FS_IOC_FSSETXATTR: return set_xattr(fs, ino, caller_uid, in, in_size);
    case (unsigned int)FS_IOC_GET_ENCRYPTION_NONCE:
        return get_nonce(fs, ino, out, out_size, reply_len);
    default: return -ENOTTY;
    }
}
