/* The operations that change one inode: write, setattr, fallocate, extended attributes,
 * open and release.  An operation that fails part-way turns the mount read-only
 * (fs_op_result). */
#include <fcntl.h>

#include "api/api.h"

int f2fuse_setxattr(struct f2fuse *fs, uint32_t ino, const char *name, const void *value,
                    size_t size, int flags)
{
    static const char empty;
    return fs_op_result(fs, "setxattr",
                        xattr_change(fs, ino, name, value ? value : &empty, size, flags));
}

int f2fuse_removexattr(struct f2fuse *fs, uint32_t ino, const char *name)
{
    return fs_op_result(fs, "removexattr", xattr_change(fs, ino, name, NULL, 0, 0));
}

int f2fuse_open_inode(struct f2fuse *fs, uint32_t ino)
{
    int err = f2fuse_open_check(fs, ino);
    return err ? err : inode_open(fs, ino);
}

static bool writable_flags(int flags)
{
    return (flags & O_ACCMODE) != O_RDONLY;
}

/* What an open with these flags must pass: the key, verity, immutable and append-only. */
static int open_checks(struct f2fuse *fs, uint32_t ino, int flags)
{
    op_read_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    int err = inode_get(fs, ino, &ipage, &ii);
    if (!err) {
        err = fscrypt_check_open(fs, &ii, ipage); /* fscrypt.c: no key, no contents */
        if (!err)
            err = verity_open_check(fs, &ii, ipage, flags); /* verity.c */
        if (!err)
            err = fileattr_may_open(&ii, flags); /* fileattr.c: immutable, append-only */
        pcache_put(fs->cache, ipage);
    }
    op_read_end(fs, ino);
    return err;
}

int f2fuse_open_file(struct f2fuse *fs, uint32_t ino, int flags)
{
    int err = open_checks(fs, ino, flags);
    if (!err)
        err = inode_open(fs, ino);
    if (err || !writable_flags(flags))
        return err;
    /* Counted as a writer, the flags are read again: chattr +i, which refuses while there
     * are writers, either saw this one or set the flag before this second look. */
    inode_writer_change(fs, ino, 1);
    err = open_checks(fs, ino, flags);
    if (err)
        f2fuse_release_file(fs, ino, flags);
    return err;
}

int f2fuse_release_file(struct f2fuse *fs, uint32_t ino, int flags)
{
    if (writable_flags(flags))
        inode_writer_change(fs, ino, -1);
    return f2fuse_release(fs, ino);
}

int f2fuse_verity_enable(struct f2fuse *fs, uint32_t ino, const struct f2fuse_verity_enable *arg)
{
    return fs_op_result(fs, "enable verity", verity_enable(fs, ino, arg));
}

/* The public entry points: an operation that fails part-way turns the mount read-only
 * (fault.c). */
ssize_t f2fuse_write(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off)
{
    return f2fuse_write_ex(fs, ino, buf, size, off, 0, NULL);
}

ssize_t f2fuse_write_ex(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off,
                        unsigned flags, bool *mode_changed)
{
    if (mode_changed)
        *mode_changed = false;
    ssize_t ret = file_write(fs, ino, buf, size, off, flags, mode_changed);
    return ret < 0 ? fs_op_result(fs, "write", (int)ret) : ret;
}

int f2fuse_setattr(struct f2fuse *fs, uint32_t ino, const struct f2fuse_setattr *sa,
                   struct f2fuse_attr *attr)
{
    return fs_op_result(fs, "setattr", file_setattr(fs, ino, sa, attr));
}

int f2fuse_fallocate(struct f2fuse *fs, uint32_t ino, int mode, uint64_t off, uint64_t len)
{
    return fs_op_result(fs, "fallocate", file_fallocate(fs, ino, mode, off, len));
}

int f2fuse_release(struct f2fuse *fs, uint32_t ino)
{
    int err = fs_op_result(fs, "release", file_release(fs, ino));
    fscrypt_ikey_closed(fs, ino); /* a key kept after its removal for this open goes now */
    return err;
}

int f2fuse_fileattr_get(struct f2fuse *fs, uint32_t ino, struct f2fuse_fileattr *fa)
{
    return fs_op_result(fs, "getflags", fileattr_get(fs, ino, fa));
}

int f2fuse_fileattr_set(struct f2fuse *fs, uint32_t ino, const struct f2fuse_fileattr *fa,
                        uint32_t caller_uid)
{
    return fs_op_result(fs, "setflags", fileattr_set(fs, ino, fa, caller_uid));
}
