/* Whole-mount operations: statfs, trim, info, statistics and live tuning. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "api/options.h"

int f2fuse_statfs(struct f2fuse *fs, struct statvfs *st)
{
    const struct f2fs_checkpoint *cp = fs->cp;
    memset(st, 0, sizeof(*st));
    uint64_t user = le64(cp->user_block_count), valid = le64(cp->valid_block_count);
    if (fs->seg) {
        valid = space_statfs_used(fs);
        if (valid > user)
            valid = user;
    }
    uint64_t nodes = fs->max_nid - F2FS_RESERVED_NODE_NUM;
    st->f_bsize = st->f_frsize = F2FS_BLKSIZE;
    st->f_blocks = user;
    st->f_bfree = st->f_bavail = user - valid;
    if (fs->seg) /* what data may still take: the metadata reserve is not for it */
        st->f_bavail = st->f_bfree > space_metadata_reserve(fs)
                           ? st->f_bfree - space_metadata_reserve(fs)
                           : 0;
    st->f_files = nodes;
    uint64_t free_nodes = nodes - (fs->nat ? nat_valid_nodes(fs->nat) : le32(cp->valid_node_count));
    st->f_ffree = st->f_favail = free_nodes < st->f_bavail ? free_nodes : st->f_bavail;
    uint64_t fsid;
    memcpy(&fsid, fs->sb.uuid, sizeof(fsid));
    st->f_fsid = (unsigned long)(fsid ^ (fsid >> 32));
    st->f_namemax = F2FS_NAME_LEN;
    if (fs->opts.read_only)
        st->f_flag |= ST_RDONLY;
    return 0;
}

/* The live options are validated on a copy of the mount's options, then applied to the
 * mechanisms and stored back under tune_lock, which also guards their reading for stats:
 * nothing else reads those fields after open. */
int f2fuse_tune(struct f2fuse *fs, const char *name, const char *value)
{
    const struct optspec *s = optspec_find(&library_options, name, NULL);
    if (!s)
        return -ENOENT;
    if (!(s->flags & (OPTSPEC_LIVE | OPTSPEC_LIVE_RO)))
        return -EPERM;
    pthread_mutex_lock(&fs->tune_lock);
    struct f2fuse_options next = fs->opts;
    int err = optspec_set(&library_options, &next, name, value);
    if (!err && !fs->wb && !(s->flags & OPTSPEC_LIVE_RO))
        err = -EROFS; /* the writeback options mean nothing without writeback */
    if (!err && !next.cache_size && next.cache_max && next.cache_max < next.cache_min)
        err = -EINVAL; /* cache_max below cache_min */
    if (!err) {
        if (fs->wb)
            writeback_retune(fs, &next); /* writeback.c */
        blk_set_bw_limit(fs->dev, next.dev_bw);
        optspec_copy(&library_options, s, &fs->opts, &next);
    }
    pthread_mutex_unlock(&fs->tune_lock);
    if (!err)
        cachesize_retune(fs); /* cachesize.c: cache_size, cache_min, cache_max */
    return err;
}

/* "wb.tune.NAME": every option f2fuse_tune may change, as the mount runs with it. */
static void emit_tunables(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg)
{
    char key[96];
    pthread_mutex_lock(&fs->tune_lock);
    for (size_t i = 0; i < library_options.count; i++) {
        const struct optspec *s = &library_options.specs[i];
        if (!(s->flags & (OPTSPEC_LIVE | OPTSPEC_LIVE_RO)))
            continue;
        snprintf(key, sizeof(key), "wb.tune.%s", s->name);
        fn(arg, key, optspec_number(s, &fs->opts));
    }
    pthread_mutex_unlock(&fs->tune_lock);
}

void f2fuse_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg)
{
    blk_emit_stats(fs->dev, fn, arg);
    pcache_emit_stats(fs->cache, fn, arg);
    cachesize_emit_stats(fs, fn, arg); /* cachesize.c */
    if (fs->seg)
        seg_emit_stats(fs->seg, fn, arg);
    if (fs->nat)
        nat_emit_stats(fs->nat, fn, arg);
    checkpoint_merge_stats(fs, fn, arg);
    discard_emit_stats(fs, fn, arg); /* discard.c */
    emit_tunables(fs, fn, arg);
    writeback_emit_stats(fs, fn, arg);    /* writeback.c */
    gc_emit_stats(fs, fn, arg);           /* gc.c */
    quota_emit_stats(fs, fn, arg);        /* quota.c */
    verity_emit_stats(fs, fn, arg);       /* verity.c */
    fscrypt_keys_emit_stats(fs, fn, arg); /* fscrypt_keys.c */
    cluster_emit_stats(fs, fn, arg);      /* cluster.c */
    dir_index_emit_stats(fs, fn, arg);    /* dir_index.c */
    fn(arg, "fs.inode_reads", atomic_load(&fs->inode_reads));
    fn(arg, "fs.lookups", atomic_load(&fs->lookups));
    fn(arg, "fs.lookup_device_reads", atomic_load(&fs->lookup_device_reads));
    fn(arg, "fs.getattrs", atomic_load(&fs->getattrs));
    fn(arg, "fs.getattr_device_reads", atomic_load(&fs->getattr_device_reads));
    fn(arg, "fsync.fast", atomic_load(&fs->fsync.fast));
    fn(arg, "fsync.flush_requests", atomic_load(&fs->flushes.requests));
    fn(arg, "fsync.flushes", atomic_load(&fs->flushes.issued));
    fn(arg, "fsync.checkpoint", atomic_load(&fs->fsync.checkpoints));
    fn(arg, "fsync.no_room", atomic_load(&fs->fsync.no_room));
    fn(arg, "recovery.inodes", atomic_load(&fs->recovered_inodes));
    fn(arg, "recovery.names", atomic_load(&fs->recovered_names));
    fn(arg, "fs.stale_tails_zeroed", atomic_load(&fs->stale_tails_zeroed));
    fn(arg, "fs.pinned_inplace_writes", atomic_load(&fs->pinned_inplace_writes));
    fn(arg, "read.extent_hits", atomic_load(&fs->extent_hits));
    fn(arg, "read.extent_misses", atomic_load(&fs->extent_misses));
    fn(arg, "read.extent_rejected", atomic_load(&fs->extent_rejected));
    fn(arg, "fs.data_pages_written", atomic_load(&fs->data_pages_written));
    fn(arg, "fs.node_pages_written", atomic_load(&fs->node_pages_written));
    fn(arg, "fs.corrupt_hits", atomic_load(&fs->corrupt_hits));
    /* the checkpoint writer replaces these under cp_lock */
    pthread_rwlock_rdlock(&fs->cp_lock);
    uint64_t ver = fs->cp_ver, valid = le64(fs->cp->valid_block_count);
    uint32_t nodes = le32(fs->cp->valid_node_count), inodes = le32(fs->cp->valid_inode_count);
    pthread_rwlock_unlock(&fs->cp_lock);
    fn(arg, "fs.checkpoint_version", ver);
    fn(arg, "fs.valid_blocks", valid);
    fn(arg, "fs.valid_nodes", nodes);
    fn(arg, "fs.valid_inodes", inodes);
}
int f2fuse_trim(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen, uint64_t *trimmed)
{
    return discard_trim(fs, start, len, minlen, trimmed, NULL, NULL);
}

int f2fuse_trim_progress(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen,
                         uint64_t *trimmed, f2fuse_progress_fn fn, void *arg)
{
    return discard_trim(fs, start, len, minlen, trimmed, fn, arg);
}

int f2fuse_info(struct f2fuse *fs, struct f2fuse_info *info)
{
    return info_fill(fs, info);
}

int f2fuse_quota_list(struct f2fuse *fs, f2fuse_quota_fn fn, void *arg)
{
    return quota_list(fs, fn, arg);
}

void f2fuse_set_caller_uid(uint32_t uid)
{
    quota_set_caller(uid);
}
