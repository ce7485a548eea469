/* The reading operations: attributes, names, listings, file data, symlink targets and
 * extended attributes.  Each one runs inside read_inode's shell: cp_lock and the inode's
 * stripe shared (op_read_begin), the inode read and decoded, then the step itself. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
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
    return inode_fill_attr(fs, ipage, ii, attr);
}

/* Counts one lookup or getattr, and whether it read the device (loads_before: what this
 * thread had loaded into the page cache when it began). */
static void count_metadata_op(atomic_uint_fast64_t *ops, atomic_uint_fast64_t *device_reads,
                              uint64_t loads_before)
{
    atomic_fetch_add_explicit(ops, 1, memory_order_relaxed);
    if (pcache_thread_loads() != loads_before)
        atomic_fetch_add_explicit(device_reads, 1, memory_order_relaxed);
}

int f2fuse_getattr(struct f2fuse *fs, uint32_t ino, struct f2fuse_attr *attr)
{
    uint64_t loads = pcache_thread_loads();
    int err = (int)read_inode(fs, ino, attr_step, attr);
    count_metadata_op(&fs->getattrs, &fs->getattr_device_reads, loads);
    return err;
}

/* Directories only: ENOTDIR for anything else.  An encrypted directory's names are its
 * entries' no-key names (dir.c); its context must at least parse (*ctx gets it). */
static int dir_check(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                     struct fscrypt_context *ctx)
{
    if (!S_ISDIR(ii->mode))
        return -ENOTDIR;
    return fscrypt_encrypted(ii) ? fscrypt_inode_context(fs, ii, ipage, ctx) : 0;
}

struct lookup_args {
    const char *name;
    size_t len;
    uint32_t ino;
    bool encrypted_dir;
    struct fscrypt_context dir_ctx;
    struct f2fuse_attr *attr;
};

static ssize_t lookup_step(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                           void *arg)
{
    struct lookup_args *a = arg;
    int err = dir_check(fs, dir, dpage, &a->dir_ctx);
    a->encrypted_dir = fscrypt_encrypted(dir);
    if (!err)
        err = dir_lookup(fs, dir, dpage, a->name, a->len, &a->ino);
    /* The caller's reference is taken while the name is held: an unlink can't slip in. */
    return err ? err : inode_lookup_ref(fs, a->ino);
}

/* In an encrypted directory, a directory or symlink must share its policy, or the kernel
 * refuses the lookup (f2fs_lookup, fscrypt_has_permitted_context): a tree put together
 * offline from pieces of two keys is not one tree. */
static ssize_t found_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                          void *arg)
{
    struct lookup_args *a = arg;
    bool dots = a->name[0] == '.' && (a->len == 1 || (a->len == 2 && a->name[1] == '.'));
    if (a->encrypted_dir && !dots && (S_ISDIR(ii->mode) || S_ISLNK(ii->mode))) {
        struct fscrypt_context ctx;
        int err = fscrypt_encrypted(ii) ? fscrypt_inode_context(fs, ii, ipage, &ctx) : 0;
        if (err)
            return err;
        if (!fscrypt_encrypted(ii) || !fscrypt_same_policy(&a->dir_ctx, &ctx)) {
            log_warn("inode %u: encryption policy differs from its directory's; refused, as "
                     "the kernel does",
                     ii->ino);
            return -EPERM;
        }
    }
    return inode_fill_attr(fs, ipage, ii, a->attr);
}

int f2fuse_lookup(struct f2fuse *fs, uint32_t dir_ino, const char *name, size_t namelen,
                  struct f2fuse_attr *attr)
{
    struct lookup_args a = {.name = name, .len = namelen, .attr = attr};
    uint64_t loads = pcache_thread_loads();
    int err = (int)read_inode(fs, dir_ino, lookup_step, &a);
    if (!err) {
        err = (int)read_inode(fs, a.ino, found_step, &a);
        if (err)
            f2fuse_forget(fs, a.ino, 1);
    }
    count_metadata_op(&fs->lookups, &fs->lookup_device_reads, loads);
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
    struct fscrypt_context ctx;
    int err = dir_check(fs, dir, dpage, &ctx);
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
    /* fscrypt_keys.c: an encrypted file is read through its key (ENOKEY without it) */
    struct inode_info with = *ii;
    struct fscrypt_ikey *key = NULL;
    if (fscrypt_encrypted(ii) && a->size && a->off < ii->size) {
        int err = fscrypt_ikey_get(fs, ii, ipage, &key);
        if (err)
            return err;
        with.contents_key = key;
    }
    ssize_t n = verity_file(ii) /* verity.c: every block checked against the Merkle tree */
                    ? verity_read(fs, &with, ipage, a->buf, a->size, a->off)
                    : data_read(fs, &with, ipage, a->buf, a->size, a->off);
    fscrypt_ikey_put(fs, key);
    return n;
}

ssize_t f2fuse_read(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off)
{
    struct buf_args a = {.buf = buf, .size = size, .off = off};
    return read_inode(fs, ino, read_step, &a);
}

/* A read that goes on after its shell: its one device request, pinned (read_pin) until done. */
struct async_read {
    struct f2fuse *fs;
    struct blk_req req;
    size_t size; /* the bytes it returns */
    f2fuse_read_done_fn done;
    void *arg;
};

struct start_args {
    void *buf;
    size_t size;
    uint64_t off;
    struct async_read *ar; /* its request set when one is left to do */
    bool sync;             /* not a read for the async way: f2fuse_read does it */
};

static ssize_t read_start_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                               void *arg)
{
    struct start_args *a = arg;
    if (!S_ISREG(ii->mode) || verity_file(ii)) {
        a->sync = true;
        return 0;
    }
    if (a->off >= ii->size || a->size == 0)
        return 0;
    size_t size = a->size < ii->size - a->off ? a->size : (size_t)(ii->size - a->off);
    int r = data_read_start(fs, ii, ipage, a->buf, size, a->off, &a->ar->req);
    if (r == -EAGAIN) {
        a->sync = true;
        return 0;
    }
    if (r < 0)
        return r;
    if (r == 1) {
        read_pin(fs); /* before the shell ends: a checkpoint now waits for this read */
        a->ar->size = size;
    }
    return r == 1 ? -EINPROGRESS : (ssize_t)size;
}

static void async_read_done(struct blk_req *req)
{
    struct async_read *ar = req->private;
    ssize_t result = req->result < 0                     ? (ssize_t)req->result
                     : (uint64_t)req->result != req->len ? -EIO /* past the device's end */
                                                         : (ssize_t)ar->size;
    struct f2fuse *fs = ar->fs;
    ar->done(ar->arg, result);
    free(ar);
    read_unpin(fs); /* after done: f2fuse_close may not come before it */
}

ssize_t f2fuse_read_async(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off,
                          f2fuse_read_done_fn done, void *arg)
{
    struct async_read *ar = malloc(sizeof(*ar));
    if (!ar)
        return f2fuse_read(fs, ino, buf, size, off);
    *ar = (struct async_read){.fs = fs, .done = done, .arg = arg};
    struct start_args a = {.buf = buf, .size = size, .off = off, .ar = ar};
    ssize_t n = read_inode(fs, ino, read_start_step, &a);
    if (n != -EINPROGRESS) {
        free(ar);
        return a.sync ? f2fuse_read(fs, ino, buf, size, off) : n;
    }
    ar->req.done = async_read_done;
    ar->req.private = ar;
    struct blk_req *rp = &ar->req;
    int err = blk_submit(fs->dev, &rp, 1);
    if (err) { /* nothing queued: no done() comes */
        free(ar);
        read_unpin(fs);
        return err;
    }
    return -EINPROGRESS;
}

void f2fuse_read_drain(struct f2fuse *fs)
{
    read_pins_drain(fs);
}

static ssize_t readlink_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                             void *arg)
{
    struct buf_args *a = arg;
    if (!S_ISLNK(ii->mode))
        return -EINVAL;
    if (fscrypt_encrypted(ii)) {
        char target[FSCRYPT_SYMLINK_TARGET_MAX];
        ssize_t n = fscrypt_symlink_target(fs, ii, ipage, target);
        if (n < 0)
            return n;
        size_t copy = a->size < (size_t)n ? a->size : (size_t)n;
        memcpy(a->buf, target, copy);
        return (ssize_t)copy;
    }
    if (ii->size == 0)
        return fs_corrupt(fs, "symlink %u has an empty target", ii->ino);
    return data_read(fs, ii, ipage, a->buf, a->size < ii->size ? a->size : ii->size, 0);
}

ssize_t f2fuse_readlink(struct f2fuse *fs, uint32_t ino, char *buf, size_t size)
{
    struct buf_args a = {.buf = buf, .size = size};
    return read_inode(fs, ino, readlink_step, &a);
}

static ssize_t open_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                         void *arg)
{
    return fscrypt_check_open(fs, ii, ipage);
}

int f2fuse_open_check(struct f2fuse *fs, uint32_t ino)
{
    return (int)read_inode(fs, ino, open_step, NULL);
}

static ssize_t nonce_step(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                          void *nonce)
{
    struct fscrypt_context ctx;
    int err = fscrypt_encrypted(ii) ? fscrypt_inode_context(fs, ii, ipage, &ctx) : -ENODATA;
    if (!err)
        memcpy(nonce, ctx.nonce, sizeof(ctx.nonce));
    return err;
}

int f2fuse_encryption_nonce(struct f2fuse *fs, uint32_t ino, uint8_t nonce[16])
{
    return (int)read_inode(fs, ino, nonce_step, nonce);
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
