/* The namespace operations.  An operation that fails part-way turns the mount read-only
 * (fs_op_result). */
#include <errno.h>
#include <sys/stat.h>

#include "api/api.h"

int f2fuse_mknod(struct f2fuse *fs, uint32_t parent, const char *name, size_t len, uint32_t mode,
                 uint64_t rdev, uint32_t uid, uint32_t gid, struct f2fuse_attr *out)
{
    switch (mode & S_IFMT) {
    case 0: mode |= S_IFREG; break;
    case S_IFREG:
    case S_IFCHR:
    case S_IFBLK:
    case S_IFIFO:
    case S_IFSOCK: break;
    default: return -EINVAL;
    }
    return fs_op_result(fs, "mknod",
                        namei_create(fs, parent, name, len, mode, rdev, uid, gid, NULL, out));
}

int f2fuse_mkdir(struct f2fuse *fs, uint32_t parent, const char *name, size_t len, uint32_t mode,
                 uint32_t uid, uint32_t gid, struct f2fuse_attr *out)
{
    mode = S_IFDIR | (mode & (07777 | F2FUSE_UMASK(0777)));
    return fs_op_result(fs, "mkdir",
                        namei_create(fs, parent, name, len, mode, 0, uid, gid, NULL, out));
}

int f2fuse_symlink(struct f2fuse *fs, uint32_t parent, const char *name, size_t len,
                   const char *target, uint32_t uid, uint32_t gid, struct f2fuse_attr *out)
{
    return fs_op_result(fs, "symlink",
                        namei_create(fs, parent, name, len, S_IFLNK | 0777, 0, uid, gid, target,
                                     out));
}

int f2fuse_forget(struct f2fuse *fs, uint32_t ino, uint64_t n)
{
    if (!fs->opts.track_lookups || ino == fs->root_ino)
        return 0;
    pthread_rwlock_rdlock(&fs->cp_lock);
    int err = inode_forget(fs, ino, n);
    pthread_rwlock_unlock(&fs->cp_lock);
    return fs_op_result(fs, "forget", err);
}

int f2fuse_unlink(struct f2fuse *fs, uint32_t parent, const char *name, size_t len)
{
    return fs_op_result(fs, "unlink", namei_remove(fs, parent, name, len, false));
}

int f2fuse_rmdir(struct f2fuse *fs, uint32_t parent, const char *name, size_t len)
{
    if ((len == 1 && name[0] == '.'))
        return -EINVAL;
    if (len == 2 && name[0] == '.' && name[1] == '.')
        return -ENOTEMPTY;
    return fs_op_result(fs, "rmdir", namei_remove(fs, parent, name, len, true));
}

/* The public entry points: an operation that fails part-way turns the mount read-only
 * (fault.c). */
int f2fuse_link(struct f2fuse *fs, uint32_t ino, uint32_t parent, const char *name, size_t len,
                struct f2fuse_attr *out)
{
    return fs_op_result(fs, "link", namei_link(fs, ino, parent, name, len, out));
}

int f2fuse_rename(struct f2fuse *fs, uint32_t old_parent, const char *old_name, size_t old_len,
                  uint32_t new_parent, const char *new_name, size_t new_len, unsigned flags)
{
    return fs_op_result(fs, "rename",
                        namei_rename(fs, old_parent, old_name, old_len, new_parent, new_name,
                                     new_len, flags));
}
