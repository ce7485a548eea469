/* Opening and closing a mount: the order mechanisms start and stop in, the refusals of
 * a read-write mount, and the last checkpoint. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "api/api.h"
#include "api/keys.h"
#include "f2fuse_test.h"

/* Why this image cannot be written, or NULL.  What f2fuse does not write is refused rather
 * than damaged (docs/FORMAT.md, "Features"). */
static const char *rw_refusal(struct f2fuse *fs)
{
    uint32_t f = fs->features, flags = le32(fs->cp->ckpt_flags);
    if (f & (F2FS_FEATURE_RO | F2FS_FEATURE_BLKZONED))
        return "the image layout is read-only or zoned";
    if (le32(fs->sb.cp_payload) || (flags & CP_LARGE_NAT_BITMAP_FLAG))
        return "the checkpoint has a payload (very large image)";
    if (flags & (CP_ERROR_FLAG | CP_FSCK_FLAG | CP_QUOTA_NEED_FSCK_FLAG))
        return "the image is marked as needing fsck.f2fs";
    if (flags & (CP_DISABLED_FLAG | CP_DISABLED_QUICK_FLAG | CP_RESIZEFS_FLAG))
        return "checkpointing is disabled or a resize is unfinished";
    return NULL;
}

/* A mount without a readable root directory is no mount at all. */
static int root_check(struct f2fuse *fs)
{
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, fs->root_ino, &page, &ii);
    if (err == -ENOENT)
        err = fs_corrupt(fs, "the root inode %u is not in use", fs->root_ino);
    if (!err) {
        if (!S_ISDIR(ii.mode))
            err = fs_corrupt(fs, "the root inode %u is not a directory (mode 0%o)", fs->root_ino,
                             ii.mode);
        pcache_put(fs->cache, page);
    }
    if (err)
        log_err("cannot mount: the root directory is unreadable");
    return err == -EIO ? -EUCLEAN : err;
}

/* Sets up the write side: segment and NAT managers, orphans left by a crash, and the
 * checkpoint thread. */
static int open_rw(struct f2fuse *fs)
{
    const char *why = rw_refusal(fs);
    if (why) {
        log_err("cannot mount read-write: %s; mount with -o ro", why);
        return -EROFS;
    }
    int err = fsync_init(fs);
    if (err)
        return err;
    atomic_store(&fs->next_generation, (uint32_t)time(NULL));
    err = seg_load(fs, &fs->seg);
    if (!err)
        err = nat_load(fs, &fs->nat);
    if (err)
        return err;
    /* Data may not take the segments a checkpoint needs for its nodes. */
    seg_set_data_reserve(fs->seg, 3);
    err = quota_load(fs); /* quota.c: before the orphans, whose frees it counts */
    if (err == -EUCLEAN)
        log_err("cannot mount read-write: a quota file is damaged; mount with -o ro, or let "
                "fsck.f2fs -f rebuild it");
    if (err)
        return err;
    err = discard_init(fs); /* discard.c: before recovery, whose checkpoint frees blocks */
    if (!err)
        err = gc_init(fs); /* gc.c: its thread starts after recovery */
    if (err)
        return err;
    /* Orphans first: they are listed in the checkpoint that recovery is about to replace. */
    uint32_t *orphans, norphans;
    err = checkpoint_read_orphans(fs, &orphans, &norphans);
    if (err)
        return err;
    for (uint32_t i = 0; i < norphans && !err; i++)
        err = inode_free(fs, orphans[i]);
    if (!err)
        err = recovery_run(fs, orphans, norphans);
    free(orphans);
    if (!err && norphans) {
        log_info("freed %u orphan inode(s) left by an unclean unmount", norphans);
        err = checkpoint_write(fs, false, CP_ALL_DATA, NULL, 0);
    }
    if (!err)
        err = checkpoint_merge_start(fs);
    if (!err)
        err = gc_start(fs);
    return err;
}

int f2fuse_open(const char *image, const struct f2fuse_options *opts, struct f2fuse **out)
{
    return f2fuse_open_test(image, opts, NULL, out);
}

int f2fuse_open_test(const char *image, const struct f2fuse_options *opts,
                     const struct f2fuse_test_options *test, struct f2fuse **out)
{
    struct f2fuse_options defaults;
    if (!opts) {
        f2fuse_options_init(&defaults);
        opts = &defaults;
    }
    struct f2fuse *fs = context_create(opts);
    if (!fs)
        return -ENOMEM;
    struct blk_options bo = {.backend = opts->backend,
                             .queue_depth = opts->queue_depth,
                             .read_only = opts->read_only,
                             .bw_limit = opts->dev_bw,
                             .offset = opts->offset,
                             .partition = opts->partition,
                             .net_timeout = opts->net_timeout,
                             .connections = opts->connections,
                             .ceph_id = opts->ceph_id,
                             .ceph_conf = opts->ceph_conf,
                             .ceph_keyring = opts->ceph_keyring};
    int err = blk_open(image, &bo, &fs->dev);
    if (err) {
        log_err("cannot open %s: %s", image, strerror(-err));
        context_free(fs);
        return err;
    }
    /* imagelock.c: one writer per image file; an RBD image has its exclusive lock
     * (blk_rbd.c), an NBD export no lock at all */
    if (!blk_is_network(fs->dev))
        err = image_lock(fs, image);
    uint64_t budget = 0;
    if (!err)
        err = cachesize_init(fs, &budget); /* cachesize.c: the first size */
    if (!err)
        err = pcache_create(fs->dev, budget, &fs->cache);
    if (!err)
        err = fscrypt_keys_init(fs); /* fscrypt_keys.c: keys in locked memory */
    if (err == -EOPNOTSUPP && !opts->fscrypt_keys[0])
        err = 0; /* without libcrypto's algorithms encrypted trees stay locked */
    if (!err)
        err = keys_load_options(fs); /* keys.c: fscrypt_key= */
    if (!err)
        err = verity_init(fs); /* verity.c: before orphans are freed */
    if (!err)
        err = fault_arm(fs, test); /* fault.c: tests only */
    if (!err)
        err = super_load(fs);
    if (!err)
        err = casefold_init(fs); /* casefold.c: the encoding of casefolded directories */
    if (!err)
        err = checkpoint_load(fs);
    if (!err)
        err = root_check(fs);
    if (!err && !opts->read_only)
        err = open_rw(fs);
    if (!err && !opts->read_only)
        err = writeback_init(fs); /* writeback.c: the flusher */
    if (!err && !opts->read_only) /* after the flusher, whose writeback_sync the timer calls */
        err = checkpoint_timer_start(fs);
    if (!err)
        err = cachesize_start(fs); /* cachesize.c: follows memory from now on */
    if (err) {
        __atomic_store_n(&fs->write_error, err, __ATOMIC_RELEASE); /* no final checkpoint */
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
    read_pins_drain(fs); /* f2fuse_read_async's reads still on the device */
    cachesize_stop(fs);  /* cachesize.c: first, it asks for checkpoints */
    checkpoint_timer_stop(fs);
    gc_stop(fs);        /* gc.c: before the checkpoint daemon it sends requests to */
    writeback_stop(fs); /* the final checkpoint writes back what is dirty */
    checkpoint_merge_stop(fs);
    if (fs->seg && fs->nat && !fs_write_error(fs)) {
        /* The caller is gone: unlinked inodes it still held are freed now. */
        uint32_t n;
        uint32_t *orphans = inode_orphans(fs, &n);
        for (uint32_t i = 0; orphans && i < n; i++)
            inode_free(fs, orphans[i]);
        bool listed = orphans != NULL;
        free(orphans);
        int err = -ENOMEM; /* without the orphan list a checkpoint would leak its inodes */
        if (listed) {
            inode_refs_destroy(fs);
            /* The last checkpoint, marked as a clean unmount. */
            orphans = inode_orphans(fs, &n);
            pthread_rwlock_wrlock(&fs->cp_lock);
            err = orphans ? checkpoint_write(fs, true, CP_ALL_DATA, orphans, n) : -ENOMEM;
            pthread_rwlock_unlock(&fs->cp_lock);
            free(orphans);
        }
        if (err)
            log_err("final checkpoint failed: %s; the image keeps its previous checkpoint",
                    strerror(-err));
    }
    uint64_t damaged = fs->seg ? atomic_load(&fs->corrupt_hits) : 0;
    if (damaged)
        log_err("this read-write mount met %llu damaged structure(s); %s: run fsck.f2fs -f "
                "on the image",
                (unsigned long long)damaged,
                fs_write_error(fs) ? "the image keeps its last checkpoint, which does not say so"
                                   : "the checkpoint is marked as needing fsck (CP_FSCK)");
    writeback_destroy(fs);
    discard_destroy(fs); /* discard.c: issues what is queued (5 s at most), then stops */
    gc_destroy(fs);
    cluster_destroy(fs); /* cluster.c: the reads' helper thread */
    casefold_destroy(fs);
    quota_destroy(fs);
    nat_destroy(fs->nat);
    seg_destroy(fs->seg);
    verity_destroy(fs);       /* verity.c: descriptors parsed */
    fscrypt_keys_destroy(fs); /* fscrypt_keys.c: every key wiped */
    pcache_destroy(fs->cache);
    cachesize_destroy(fs);
    if (fs->dev)
        blk_close(fs->dev);
    image_unlock(fs); /* imagelock.c: last, once everything is on the image */
    free(fs->cp_block);
    inode_refs_destroy(fs);
    dir_index_destroy(fs);
    fsync_destroy(fs);
    context_free(fs);
}

uint32_t f2fuse_root_ino(const struct f2fuse *fs)
{
    return fs->root_ino;
}

uint32_t f2fuse_features(const struct f2fuse *fs)
{
    return fs->features;
}
