/* The public API (include/f2fuse.h): options, open/close, and the operations, each a thin
 * shell that reads the inode and hands over to the mechanism's own file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"

#define DEFAULT_CACHE_SIZE (64ull << 20)

int fs_corrupt(struct f2fuse *fs, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    atomic_fetch_add(&fs->corrupt_hits, 1);
    log_err("corrupt image: %s", msg);
    return -EIO;
}

void f2fuse_options_init(struct f2fuse_options *o)
{
    memset(o, 0, sizeof(*o));
    o->backend = "uring";
    o->queue_depth = 64;
    o->cache_size = DEFAULT_CACHE_SIZE;
    o->read_only = true;
}

const char *f2fuse_option_names(void)
{
    return "ro, rw, backend=uring|psync, queue_depth=N, cache_size=BYTES[K|M|G]";
}

static int parse_size(const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || v[0] == '-')
        return -EINVAL;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end || n > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t)n << shift;
    return 0;
}

int f2fuse_option_set(struct f2fuse_options *o, const char *name, const char *value)
{
    if (strcmp(name, "ro") == 0 || strcmp(name, "rw") == 0) {
        if (value)
            return -EINVAL;
        o->read_only = name[1] == 'o';
        return 0;
    }
    if (!value)
        return strcmp(name, "backend") && strcmp(name, "queue_depth") && strcmp(name, "cache_size")
                   ? -ENOENT
                   : -EINVAL;
    if (strcmp(name, "backend") == 0) {
        if (strcmp(value, "uring") == 0)
            o->backend = "uring";
        else if (strcmp(value, "psync") == 0)
            o->backend = "psync";
        else
            return -EINVAL;
        return 0;
    }
    if (strcmp(name, "queue_depth") == 0) {
        uint64_t n;
        if (parse_size(value, &n) || n < 1 || n > 4096)
            return -EINVAL;
        o->queue_depth = (unsigned)n;
        return 0;
    }
    if (strcmp(name, "cache_size") == 0) {
        uint64_t n;
        if (parse_size(value, &n) || n < (1u << 20))
            return -EINVAL;
        o->cache_size = n;
        return 0;
    }
    return -ENOENT;
}

int f2fuse_open(const char *image, const struct f2fuse_options *opts, struct f2fuse **out)
{
    struct f2fuse_options defaults;
    if (!opts) {
        f2fuse_options_init(&defaults);
        opts = &defaults;
    }
    if (!opts->read_only) {
        log_err("read-write mounting is not implemented yet; mount with -o ro");
        return -EROFS;
    }
    struct f2fuse *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    fs->opts = *opts;
    struct blk_options bo = {.backend = opts->backend, .queue_depth = opts->queue_depth,
                             .read_only = opts->read_only};
    int err = blk_open(image, &bo, &fs->dev);
    if (err) {
        log_err("cannot open %s: %s", image, strerror(-err));
        free(fs);
        return err;
    }
    err = pcache_create(fs->dev, opts->cache_size, &fs->cache);
    if (!err)
        err = super_load(fs);
    if (!err)
        err = checkpoint_load(fs);
    if (err) {
        f2fuse_close(fs);
        return err;
    }
    *out = fs;
    return 0;
}

void f2fuse_close(struct f2fuse *fs)
{
    if (!fs)
        return;
    pcache_destroy(fs->cache);
    if (fs->dev)
        blk_close(fs->dev);
    free(fs->cp_block);
    free(fs);
}

uint32_t f2fuse_root_ino(const struct f2fuse *fs)
{
    return fs->root_ino;
}

int f2fuse_getattr(struct f2fuse *fs, uint32_t ino, struct f2fuse_attr *attr)
{
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, ino, &page, &ii);
    if (err)
        return err;
    err = inode_fill_attr(fs, &page_node(page)->i, &ii, attr);
    pcache_put(fs->cache, page);
    return err;
}

/* Reads a directory inode, failing with ENOTDIR for anything else. */
static int dir_get(struct f2fuse *fs, uint32_t ino, struct page **page, struct inode_info *ii)
{
    int err = inode_get(fs, ino, page, ii);
    if (err)
        return err;
    if (!S_ISDIR(ii->mode)) {
        pcache_put(fs->cache, *page);
        return -ENOTDIR;
    }
    return 0;
}

int f2fuse_lookup(struct f2fuse *fs, uint32_t dir_ino, const char *name, size_t namelen,
                  struct f2fuse_attr *attr)
{
    struct page *page;
    struct inode_info dir;
    int err = dir_get(fs, dir_ino, &page, &dir);
    if (err)
        return err;
    uint32_t ino;
    err = dir_lookup(fs, &dir, page, name, namelen, &ino);
    pcache_put(fs->cache, page);
    if (err)
        return err;
    return f2fuse_getattr(fs, ino, attr);
}

int f2fuse_readdir(struct f2fuse *fs, uint32_t dir_ino, uint64_t cookie, f2fuse_dirent_fn fn,
                   void *arg)
{
    struct page *page;
    struct inode_info dir;
    int err = dir_get(fs, dir_ino, &page, &dir);
    if (err)
        return err;
    err = dir_iterate(fs, &dir, page, cookie, fn, arg);
    pcache_put(fs->cache, page);
    return err;
}

ssize_t f2fuse_read(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off)
{
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, ino, &page, &ii);
    if (err)
        return err;
    ssize_t ret;
    if (S_ISDIR(ii.mode))
        ret = -EISDIR;
    else if (!S_ISREG(ii.mode))
        ret = -EINVAL;
    else
        ret = data_read(fs, &ii, page, buf, size, off);
    pcache_put(fs->cache, page);
    return ret;
}

ssize_t f2fuse_readlink(struct f2fuse *fs, uint32_t ino, char *buf, size_t size)
{
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, ino, &page, &ii);
    if (err)
        return err;
    ssize_t ret;
    if (!S_ISLNK(ii.mode))
        ret = -EINVAL;
    else if (ii.advise & FADVISE_ENCRYPT_BIT)
        ret = -ENOKEY;
    else if (ii.size == 0)
        ret = fs_corrupt(fs, "symlink %u has an empty target", ino);
    else
        ret = data_read(fs, &ii, page, buf, size < ii.size ? size : ii.size, 0);
    pcache_put(fs->cache, page);
    return ret;
}

ssize_t f2fuse_getxattr(struct f2fuse *fs, uint32_t ino, const char *name, void *value,
                        size_t size)
{
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, ino, &page, &ii);
    if (err)
        return err;
    ssize_t ret = xattr_get(fs, &ii, page, name, value, size);
    pcache_put(fs->cache, page);
    return ret;
}

ssize_t f2fuse_listxattr(struct f2fuse *fs, uint32_t ino, char *list, size_t size)
{
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, ino, &page, &ii);
    if (err)
        return err;
    ssize_t ret = xattr_list(fs, &ii, page, list, size);
    pcache_put(fs->cache, page);
    return ret;
}

int f2fuse_statfs(struct f2fuse *fs, struct statvfs *st)
{
    const struct f2fs_checkpoint *cp = fs->cp;
    memset(st, 0, sizeof(*st));
    uint64_t user = le64(cp->user_block_count), valid = le64(cp->valid_block_count);
    uint64_t nodes = fs->max_nid - F2FS_RESERVED_NODE_NUM;
    st->f_bsize = st->f_frsize = F2FS_BLKSIZE;
    st->f_blocks = user;
    st->f_bfree = st->f_bavail = user - valid;
    st->f_files = nodes;
    uint64_t free_nodes = nodes - le32(cp->valid_node_count);
    st->f_ffree = st->f_favail = free_nodes < st->f_bavail ? free_nodes : st->f_bavail;
    uint64_t fsid;
    memcpy(&fsid, fs->sb.uuid, sizeof(fsid));
    st->f_fsid = (unsigned long)(fsid ^ (fsid >> 32));
    st->f_namemax = F2FS_NAME_LEN;
    if (fs->opts.read_only)
        st->f_flag |= ST_RDONLY;
    return 0;
}

void f2fuse_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg)
{
    blk_emit_stats(fs->dev, fn, arg);
    pcache_emit_stats(fs->cache, fn, arg);
    fn(arg, "fs.inode_reads", atomic_load(&fs->inode_reads));
    fn(arg, "fs.corrupt_hits", atomic_load(&fs->corrupt_hits));
    fn(arg, "fs.checkpoint_version", fs->cp_ver);
    fn(arg, "fs.valid_blocks", le64(fs->cp->valid_block_count));
    fn(arg, "fs.valid_nodes", le32(fs->cp->valid_node_count));
    fn(arg, "fs.valid_inodes", le32(fs->cp->valid_inode_count));
}
