/* The reading operations: attributes, names, listings, file data, symlink targets and
 * extended attributes.  Each one runs inside read_inode's shell: cp_lock and the inode's
 * stripe shared (op_read_begin), the inode read and decoded, then the step itself. */
#include <errno.h>
#include <sys/stat.h>

#include "api/api.h"

/* One reading step on a decoded inode; returns a byte count or -errno. */
typedef ssize_t (*inode_step)(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                              void *arg);

/* Locks ino for reading, reads it and runs step on it. */
static ssize_t read_inode(struct f2fuse *fs, uint32_t ino, inode_step step, void *arg)
{
    op_read_begin(fs, ino);
    struct page *page;
    struct inode_info ii;
    ssize_t ret = inode_get(fs, ino, &page, &ii);
    if (!ret) {
        ret = step(fs, &ii, page, arg);
        pcache_put(fs->cache, page);
    }
    op_read_end(fs, ino);
    return ret;
}

static ssize_t attr_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                         void *attr)
{
    return inode_fill_attr(fs, &page_node(ipage)->i, ii, attr);
}

int f2fuse_getattr(struct f2fuse *fs, uint32_t ino, struct f2fuse_attr *attr)
{
    return (int)read_inode(fs, ino, attr_step, attr);
}

/* Directories only: ENOTDIR for anything else, and no names of an encrypted directory
 * (they are ciphertext that may hold '/' or NUL: without the key, none). */
static int dir_check(const struct inode_info *ii)
{
    if (!S_ISDIR(ii->mode))
        return -ENOTDIR;
    return ii->advise & FADVISE_ENCRYPT_BIT ? -ENOKEY : 0;
}

struct lookup_args {
    const char *name;
    size_t len;
    uint32_t ino;
};

static ssize_t lookup_step(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                           void *arg)
{
    struct lookup_args *a = arg;
    int err = dir_check(dir);
    if (!err)
        err = dir_lookup(fs, dir, dpage, a->name, a->len, &a->ino);
    /* The caller's reference is taken while the name is held: an unlink can't slip in. */
    return err ? err : inode_lookup_ref(fs, a->ino);
}

int f2fuse_lookup(struct f2fuse *fs, uint32_t dir_ino, const char *name, size_t namelen,
                  struct f2fuse_attr *attr)
{
    struct lookup_args a = {.name = name, .len = namelen};
    int err = (int)read_inode(fs, dir_ino, lookup_step, &a);
    if (!err) {
        err = f2fuse_getattr(fs, a.ino, attr);
        if (err)
            f2fuse_forget(fs, a.ino, 1);
    }
    return err;
}

struct readdir_args {
    uint64_t cookie;
    f2fuse_dirent_fn fn;
    void *arg;
};

static ssize_t readdir_step(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                            void *arg)
{
    struct readdir_args *a = arg;
    int err = dir_check(dir);
    return err ? err : dir_iterate(fs, dir, dpage, a->cookie, a->fn, a->arg);
}

int f2fuse_readdir(struct f2fuse *fs, uint32_t dir_ino, uint64_t cookie, f2fuse_dirent_fn fn,
                   void *arg)
{
    struct readdir_args a = {.cookie = cookie, .fn = fn, .arg = arg};
    return (int)read_inode(fs, dir_ino, readdir_step, &a);
}

struct buf_args {
    void *buf;
    size_t size;
    uint64_t off;
    const char *name; /* xattrs */
};

static ssize_t read_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                         void *arg)
{
    struct buf_args *a = arg;
    if (S_ISDIR(ii->mode))
        return -EISDIR;
    if (!S_ISREG(ii->mode))
        return -EINVAL;
    if (verity_file(ii)) /* verity.c: every block checked against the Merkle tree */
        return verity_read(fs, ii, ipage, a->buf, a->size, a->off);
    return data_read(fs, ii, ipage, a->buf, a->size, a->off);
}

ssize_t f2fuse_read(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off)
{
    struct buf_args a = {.buf = buf, .size = size, .off = off};
    return read_inode(fs, ino, read_step, &a);
}

static ssize_t readlink_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                             void *arg)
{
    struct buf_args *a = arg;
    if (!S_ISLNK(ii->mode))
        return -EINVAL;
    if (ii->advise & FADVISE_ENCRYPT_BIT)
        return -ENOKEY;
    if (ii->size == 0)
        return fs_corrupt(fs, "symlink %u has an empty target", ii->ino);
    return data_read(fs, ii, ipage, a->buf, a->size < ii->size ? a->size : ii->size, 0);
}

ssize_t f2fuse_readlink(struct f2fuse *fs, uint32_t ino, char *buf, size_t size)
{
    struct buf_args a = {.buf = buf, .size = size};
    return read_inode(fs, ino, readlink_step, &a);
}

static ssize_t getxattr_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                             void *arg)
{
    struct buf_args *a = arg;
    return xattr_get(fs, ii, ipage, a->name, a->buf, a->size);
}

ssize_t f2fuse_getxattr(struct f2fuse *fs, uint32_t ino, const char *name, void *value, size_t size)
{
    struct buf_args a = {.buf = value, .size = size, .name = name};
    return read_inode(fs, ino, getxattr_step, &a);
}

static ssize_t listxattr_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                              void *arg)
{
    struct buf_args *a = arg;
    return xattr_list(fs, ii, ipage, a->buf, a->size);
}

static ssize_t measure_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                            void *digest)
{
    return verity_measure(fs, ii, ipage, digest);
}

int f2fuse_verity_measure(struct f2fuse *fs, uint32_t ino, struct f2fuse_verity_digest *d)
{
    return (int)read_inode(fs, ino, measure_step, d);
}

ssize_t f2fuse_listxattr(struct f2fuse *fs, uint32_t ino, char *list, size_t size)
{
    struct buf_args a = {.buf = list, .size = size};
    return read_inode(fs, ino, listxattr_step, &a);
}
