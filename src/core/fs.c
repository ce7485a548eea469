/* The public API (include/f2fuse.h): options, open/close, and the operations, each a thin
 * shell that reads the inode and hands over to the mechanism's own file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fs.h"
#include "f2fuse_test.h"

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
    o->checkpoint_interval = 5;
    o->checkpoint_merge = true;
    o->checkpoint_batch_us = 15000;
    o->fsync_fast = true;
    o->flush_merge = true;
    o->extent_cache = true;
    discard_options_init(o); /* discard.c */
    writeback_options_init(o); /* writeback.c */
    gc_options_init(o);      /* gc.c */
}

const char *f2fuse_option_names(void)
{
    return "ro, rw, offset=BYTES, partition=N|NAME, backend=uring|psync, queue_depth=N, cache_size=BYTES[K|M|G], "
           "checkpoint_interval=SECONDS, checkpoint_merge, nocheckpoint_merge, checkpoint_batch_us=N, "
           "fsync=fast|checkpoint, flush_merge, noflush_merge, extent_cache, noextent_cache, checkpoint_data=metadata|all, discard, nodiscard, discard_mode=block|serial|parallel, "
           "discard_max=BYTES[K|M|G], discard_qd=N, discard_idle_ms=MS, "
           "dirty_bytes=BYTES, dirty_ratio=PCT, dirty_background_bytes=BYTES, "
           "dirty_background_ratio=PCT, dirty_expire_ms=MS, writeback_interval_ms=MS, "
           "dirty_background_time=MS, dev_bw=BYTES_PER_S, "
           "background_gc=on|off|sync, gc_idle_ms=N, ssr, nossr, "
                      "(tests) powercut=N, powercut_torn, powercut_seed=N, "
           "fault=read|write|flush|discard|alloc:N[:ERRNO|short][:sticky]";
}

int f2fuse_option_set(struct f2fuse_options *o, const char *name, const char *value)
{
    int derr = discard_option_set(o, name, value); /* discard.c */
    if (derr != -ENOENT)
        return derr;
    derr = checkpoint_merge_option_set(o, name, value); /* checkpoint_merge.c */
    if (derr != -ENOENT)
        return derr;
    derr = writeback_option_set(o, name, value); /* writeback.c */
    if (derr != -ENOENT)
        return derr;
    int gerr = gc_option_set(o, name, value); /* gc.c */
    if (gerr != -ENOENT)
        return gerr;
    if (strcmp(name, "ro") == 0 || strcmp(name, "rw") == 0) {
        if (value)
            return -EINVAL;
        o->read_only = name[1] == 'o';
        return 0;
    }
    if (strcmp(name, "checkpoint_merge") == 0 || strcmp(name, "nocheckpoint_merge") == 0) {
        if (value)
            return -EINVAL;
        o->checkpoint_merge = name[0] == 'c';
        return 0;
    }
    if (strcmp(name, "flush_merge") == 0 || strcmp(name, "noflush_merge") == 0) {
        if (value)
            return -EINVAL;
        o->flush_merge = name[0] == 'f';
        return 0;
    }
    if (strcmp(name, "extent_cache") == 0 || strcmp(name, "noextent_cache") == 0) {
        if (value)
            return -EINVAL;
        o->extent_cache = name[0] == 'e';
        return 0;
    }
    if (!value)
        return strcmp(name, "backend") && strcmp(name, "queue_depth") &&
                       strcmp(name, "cache_size") && strcmp(name, "checkpoint_interval") &&
                       strcmp(name, "fsync") && strcmp(name, "checkpoint_data") &&
                       strcmp(name, "offset") && strcmp(name, "partition")
                   ? -ENOENT
                   : -EINVAL;
    if (strcmp(name, "fsync") == 0) {
        if (strcmp(value, "fast") == 0)
            o->fsync_fast = true;
        else if (strcmp(value, "checkpoint") == 0)
            o->fsync_fast = false;
        else
            return -EINVAL;
        return 0;
    }
    if (strcmp(name, "checkpoint_data") == 0) {
        if (strcmp(value, "metadata") == 0)
            o->checkpoint_all_data = false;
        else if (strcmp(value, "all") == 0)
            o->checkpoint_all_data = true;
        else
            return -EINVAL;
        return 0;
    }
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
    if (strcmp(name, "offset") == 0) { /* checked against the image at open */
        uint64_t n;
        if (parse_size(value, &n))
            return -EINVAL;
        o->offset = n;
        return 0;
    }
    if (strcmp(name, "partition") == 0) {
        if (!value[0] || strlen(value) >= sizeof(o->partition))
            return -EINVAL;
        snprintf(o->partition, sizeof(o->partition), "%s", value);
        return 0;
    }
    if (strcmp(name, "checkpoint_interval") == 0) {
        uint64_t n;
        if (parse_size(value, &n) || n > 86400)
            return -EINVAL;
        o->checkpoint_interval = (unsigned)n;
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

/* Why this image cannot be written, or NULL.  What f2fuse does not write is refused rather
 * than damaged (docs/FORMAT.md, "Features"). */
static const char *rw_refusal(struct f2fuse *fs)
{
    uint32_t f = fs->features, flags = le32(fs->cp->ckpt_flags);
    if (f & F2FS_FEATURE_ENCRYPT)
        return "the image uses encryption";
    if (f & F2FS_FEATURE_COMPRESSION)
        return "the image uses compression";
    if (f & F2FS_FEATURE_CASEFOLD)
        return "the image uses casefolding";
    if (f & F2FS_FEATURE_VERITY)
        return "the image uses fs-verity";
    if (f & (F2FS_FEATURE_QUOTA_INO | F2FS_FEATURE_PRJQUOTA))
        return "the image keeps quota files";
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

static void *checkpoint_thread(void *arg);

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
            err = fs_corrupt(fs, "the root inode %u is not a directory (mode 0%o)",
                             fs->root_ino, ii.mode);
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
    fs->fsync_needs_cp = calloc(2 * (fs->max_nid / 8 + 1), 1);
    if (!fs->fsync_needs_cp)
        return -ENOMEM;
    fs->fsync_new_name = fs->fsync_needs_cp + fs->max_nid / 8 + 1;
    int err;
    atomic_store(&fs->next_generation, (uint32_t)time(NULL));
    err = seg_load(fs, &fs->seg);
    if (!err)
        err = nat_load(fs, &fs->nat);
    if (err)
        return err;
    /* Data may not take the segments a checkpoint needs for its nodes. */
    seg_set_data_reserve(fs->seg, 3);
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
    if (err)
        return err;
    if (fs->opts.checkpoint_interval) {
        err = -pthread_create(&fs->cp_thread, NULL, checkpoint_thread, fs);
        fs->cp_thread_running = !err;
    }
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
    struct f2fuse *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return -ENOMEM;
    fs->lock_fd = -1;
    fs->opts = *opts;
    /* A checkpoint must not starve behind a stream of operations: writers go first (no
     * operation takes cp_lock twice, so this cannot deadlock). */
    pthread_rwlockattr_t rwattr;
    pthread_rwlockattr_init(&rwattr);
    pthread_rwlockattr_setkind_np(&rwattr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fs->cp_lock, &rwattr);
    pthread_rwlockattr_destroy(&rwattr);
    pthread_mutex_init(&fs->ns_lock, NULL);
    pthread_mutex_init(&fs->ref_lock, NULL);
    pthread_mutex_init(&fs->cp_thread_lock, NULL);
    pthread_cond_init(&fs->cp_thread_wake, NULL);
    pthread_mutex_init(&fs->fsync_lock, NULL);
    flush_merge_init(&fs->flushes);
    pthread_mutex_init(&fs->cpc.lock, NULL);
    pthread_condattr_t mono; /* the merging daemon's batch wait has a monotonic deadline */
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
    pthread_cond_init(&fs->cpc.wake, &mono);
    pthread_condattr_destroy(&mono);
    pthread_cond_init(&fs->cpc.done, NULL);
    pthread_rwlockattr_t prefer_writers;
    pthread_rwlockattr_init(&prefer_writers);
    pthread_rwlockattr_setkind_np(&prefer_writers, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    for (int i = 0; i < INODE_LOCK_STRIPES; i++)
        pthread_rwlock_init(&fs->inode_locks[i], &prefer_writers);
    pthread_rwlockattr_destroy(&prefer_writers);
    struct blk_options bo = {.backend = opts->backend, .queue_depth = opts->queue_depth,
                             .read_only = opts->read_only,
                             .bw_limit = opts->dev_bw, .offset = opts->offset,
                             .partition = opts->partition};
    int err = blk_open(image, &bo, &fs->dev);
    if (err) {
        log_err("cannot open %s: %s", image, strerror(-err));
        free(fs);
        return err;
    }
    err = image_lock(fs, image); /* imagelock.c: one writer per image */
    if (!err)
        err = pcache_create(fs->dev, opts->cache_size, &fs->cache);
    if (!err)
        err = fault_arm(fs, test); /* fault.c: tests only */
    if (!err)
        err = super_load(fs);
    if (!err)
        err = checkpoint_load(fs);
    if (!err)
        err = root_check(fs);
    if (!err && !opts->read_only)
        err = open_rw(fs);
    if (!err && !opts->read_only)
        err = writeback_init(fs); /* writeback.c: the flusher */
    if (err) {
        fs->write_error = err; /* no final checkpoint on the way out */
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
    if (fs->cp_thread_running) {
        pthread_mutex_lock(&fs->cp_thread_lock);
        fs->stopping = true;
        pthread_cond_signal(&fs->cp_thread_wake);
        pthread_mutex_unlock(&fs->cp_thread_lock);
        pthread_join(fs->cp_thread, NULL);
    }
    gc_stop(fs); /* gc.c: before the checkpoint daemon it sends requests to */
    writeback_stop(fs); /* the final checkpoint writes back what is dirty */
    checkpoint_merge_stop(fs);
    if (fs->seg && fs->nat && !fs->write_error) {
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
                "on the image", (unsigned long long)damaged,
                fs->write_error ? "the image keeps its last checkpoint, which does not say so"
                                : "the checkpoint is marked as needing fsck (CP_FSCK)");
    writeback_destroy(fs);
    discard_destroy(fs); /* discard.c: issues what is queued (5 s at most), then stops */
    gc_destroy(fs);
    nat_destroy(fs->nat);
    seg_destroy(fs->seg);
    pcache_destroy(fs->cache);
    if (fs->dev)
        blk_close(fs->dev);
    image_unlock(fs); /* imagelock.c: last, once everything is on the image */
    free(fs->cp_block);
    pthread_rwlock_destroy(&fs->cp_lock);
    pthread_mutex_destroy(&fs->ns_lock);
    pthread_mutex_destroy(&fs->ref_lock);
    inode_refs_destroy(fs);
    pthread_mutex_destroy(&fs->cp_thread_lock);
    pthread_cond_destroy(&fs->cp_thread_wake);
    pthread_mutex_destroy(&fs->fsync_lock);
    flush_merge_destroy(&fs->flushes);
    free(fs->fsync_needs_cp);
    pthread_mutex_destroy(&fs->cpc.lock);
    pthread_cond_destroy(&fs->cpc.wake);
    pthread_cond_destroy(&fs->cpc.done);
    for (int i = 0; i < INODE_LOCK_STRIPES; i++)
        pthread_rwlock_destroy(&fs->inode_locks[i]);
    free(fs);
}

/* ---- locks and the shared steps of write operations ---- */

static int stripe_order(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The distinct stripes of inos, ascending: the one order every thread locks them in. */
static int stripes_of(const uint32_t *inos, int n, int *out)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!inos[i])
            continue;
        int s = (int)(inos[i] % INODE_LOCK_STRIPES);
        bool seen = false;
        for (int j = 0; j < m; j++)
            seen |= out[j] == s;
        if (!seen)
            out[m++] = s;
    }
    qsort(out, (size_t)m, sizeof(*out), stripe_order);
    return m;
}

void inode_lock_many(struct f2fuse *fs, const uint32_t *inos, int n)
{
    int stripes[8];
    int m = stripes_of(inos, n, stripes);
    for (int i = 0; i < m; i++)
        pthread_rwlock_wrlock(&fs->inode_locks[stripes[i]]);
}

void inode_unlock_many(struct f2fuse *fs, const uint32_t *inos, int n)
{
    int stripes[8];
    int m = stripes_of(inos, n, stripes);
    for (int i = m - 1; i >= 0; i--)
        pthread_rwlock_unlock(&fs->inode_locks[stripes[i]]);
}

void inode_lock_shared(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->inode_locks[ino % INODE_LOCK_STRIPES]);
}

void inode_unlock_shared(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_unlock(&fs->inode_locks[ino % INODE_LOCK_STRIPES]);
}

int fs_writable(struct f2fuse *fs)
{
    if (!fs->seg)
        return -EROFS;
    return __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE) ? -EIO : 0;
}

/* Blocks that writing back what is dirty now could take, with room for the nodes that
 * writeback itself dirties. */
uint64_t fs_pending_blocks(struct f2fuse *fs)
{
    uint64_t data = pcache_dirty_count(fs->cache, PAGE_DATA);
    uint64_t nodes = pcache_dirty_count(fs->cache, PAGE_NODE);
    return data + nodes + data / ADDRS_PER_BLOCK + 16;
}

/* The user-visible space in use: an overwrite of a written block takes none (its old block
 * is freed by the writeback that allocates the new one); a reserved (NEW_ADDR) block does.
 * segment.c counts both under one lock: read apart, a flusher turning reservations into
 * valid blocks in between made a near-full file system report a false ENOSPC. */
uint64_t fs_used_blocks(struct f2fuse *fs)
{
    return seg_used_blocks(fs->seg);
}

/* Segments kept back from the space check: the three node logs and the hot data log may
 * each need a fresh segment during one checkpoint (FS_LOG_RESERVED_SEGMENTS), and GC needs
 * free segments to move valid blocks into (gc_reserved_segments). */
bool fs_room_for(struct f2fuse *fs, uint64_t blocks, bool *logical)
{
    uint64_t need = fs_pending_blocks(fs) + blocks;
    uint64_t user = le64(fs->cp->user_block_count);
    *logical = fs_used_blocks(fs) + blocks <= user;
    uint32_t free_segs = seg_free_segments(fs->seg);
    uint32_t gc_segs = gc_reserved_segments(fs);
    uint32_t reserved = FS_LOG_RESERVED_SEGMENTS + gc_segs;
    uint64_t writable = free_segs > reserved
                            ? (uint64_t)(free_segs - reserved) * F2FS_BLOCKS_PER_SEG
                            : 0;
    if (!*logical || need <= writable || !fs->opts.gc_ssr)
        return *logical && need <= writable;
    /* Slack space reuse (segment.c): below the reserve, data fills the free slots of other
     * data segments; nodes still need free segments, and may take half of GC's reserve.
     * Once the reserve is touched, GC runs first. */
    uint64_t data = pcache_dirty_count(fs->cache, PAGE_DATA) + blocks;
    uint64_t nodes = need > data ? need - data : 0;
    return free_segs >= reserved && nodes <= (uint64_t)gc_segs * F2FS_BLOCKS_PER_SEG / 2 &&
           data <= writable + seg_ssr_blocks(fs->seg);
}

int fs_reserve(struct f2fuse *fs, uint64_t blocks)
{
    bool logical;
    gc_note_activity(fs); /* gc.c: the background thread waits for idleness */
    if (fs_room_for(fs, blocks, &logical))
        return 0;
    if (!logical)
        return -ENOSPC;
    /* Out-of-place writes need free segments: a checkpoint writes back what is dirty and
     * turns the segments it emptied into free ones, and GC (gc.c) cleans victims. */
    return gc_make_room(fs, blocks);
}

void fs_after_change(struct f2fuse *fs)
{
    if (pcache_over_budget(fs->cache))
        f2fuse_sync(fs);
}

int f2fuse_sync(struct f2fuse *fs)
{
    return checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
}

int f2fuse_sync_as(struct f2fuse *fs, const struct f2fuse_caller *who)
{
    return checkpoint_request_by(fs, blk_prio_of_ioprio(who ? who->ioprio : 0),
                                 who && who->tid > 0 ? (uint32_t)who->tid : 0, CP_ALL_DATA);
}

static void *checkpoint_thread(void *arg)
{
    struct f2fuse *fs = arg;
    pthread_mutex_lock(&fs->cp_thread_lock);
    while (!fs->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += fs->opts.checkpoint_interval;
        while (!fs->stopping &&
               pthread_cond_timedwait(&fs->cp_thread_wake, &fs->cp_thread_lock, &until) == 0)
            ;
        if (fs->stopping)
            break;
        pthread_mutex_unlock(&fs->cp_thread_lock);
        if (pcache_dirty_count(fs->cache, PAGE_DATA) || pcache_dirty_count(fs->cache, PAGE_NODE))
            /* sync(1) never reaches a FUSE daemon: the interval is what bounds the loss of
             * un-fsync'ed data, so this one writes the data too */
            checkpoint_request(fs, BLK_PRIO_LOW, CP_ALL_DATA);
        pthread_mutex_lock(&fs->cp_thread_lock);
    }
    pthread_mutex_unlock(&fs->cp_thread_lock);
    return NULL;
}

uint32_t f2fuse_root_ino(const struct f2fuse *fs)
{
    return fs->root_ino;
}

/* Reading operations hold cp_lock and the inode's stripe shared, so that they never see
 * an inode or directory block halfway through a change, and no block they read from the
 * device is moved (writeback, GC) and reused while they read it. */
static void rd_begin(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    inode_lock_shared(fs, ino);
}

static void rd_end(struct f2fuse *fs, uint32_t ino)
{
    inode_unlock_shared(fs, ino);
    pthread_rwlock_unlock(&fs->cp_lock);
}

/* One inode's change outside file.c and namei.c (xattrs). */
static void change_begin(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    inode_lock_many(fs, &ino, 1);
}

static void change_end(struct f2fuse *fs, uint32_t ino)
{
    inode_unlock_many(fs, &ino, 1);
    pthread_rwlock_unlock(&fs->cp_lock);
}

static int getattr_locked(struct f2fuse *fs, uint32_t ino, struct f2fuse_attr *attr)
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

int f2fuse_getattr(struct f2fuse *fs, uint32_t ino, struct f2fuse_attr *attr)
{
    rd_begin(fs, ino);
    int err = getattr_locked(fs, ino, attr);
    rd_end(fs, ino);
    return err;
}

/* Reads a directory inode, failing with ENOTDIR for anything else. */
static int dir_get(struct f2fuse *fs, uint32_t ino, struct page **page, struct inode_info *ii)
{
    int err = inode_get(fs, ino, page, ii);
    if (err)
        return err;
    if (!S_ISDIR(ii->mode) || (ii->advise & FADVISE_ENCRYPT_BIT)) {
        /* Encrypted names are ciphertext (may hold '/' or NUL): without the key, none. */
        pcache_put(fs->cache, *page);
        return S_ISDIR(ii->mode) ? -ENOKEY : -ENOTDIR;
    }
    return 0;
}

int f2fuse_lookup(struct f2fuse *fs, uint32_t dir_ino, const char *name, size_t namelen,
                  struct f2fuse_attr *attr)
{
    struct page *page;
    struct inode_info dir;
    rd_begin(fs, dir_ino);
    int err = dir_get(fs, dir_ino, &page, &dir);
    uint32_t ino;
    if (!err) {
        err = dir_lookup(fs, &dir, page, name, namelen, &ino);
        pcache_put(fs->cache, page);
    }
    /* The kernel's reference is taken while the name is held: an unlink can't slip in. */
    if (!err)
        err = inode_lookup_ref(fs, ino);
    rd_end(fs, dir_ino);
    if (!err) {
        err = f2fuse_getattr(fs, ino, attr);
        if (err)
            f2fuse_forget(fs, ino, 1);
    }
    return err;
}

int f2fuse_readdir(struct f2fuse *fs, uint32_t dir_ino, uint64_t cookie, f2fuse_dirent_fn fn,
                   void *arg)
{
    struct page *page;
    struct inode_info dir;
    rd_begin(fs, dir_ino);
    int err = dir_get(fs, dir_ino, &page, &dir);
    if (!err) {
        err = dir_iterate(fs, &dir, page, cookie, fn, arg);
        pcache_put(fs->cache, page);
    }
    rd_end(fs, dir_ino);
    return err;
}

ssize_t f2fuse_read(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off)
{
    struct page *page;
    struct inode_info ii;
    rd_begin(fs, ino);
    int err = inode_get(fs, ino, &page, &ii);
    if (err) {
        rd_end(fs, ino);
        return err;
    }
    ssize_t ret;
    if (S_ISDIR(ii.mode))
        ret = -EISDIR;
    else if (!S_ISREG(ii.mode))
        ret = -EINVAL;
    else
        ret = data_read(fs, &ii, page, buf, size, off);
    pcache_put(fs->cache, page);
    rd_end(fs, ino);
    return ret;
}

ssize_t f2fuse_readlink(struct f2fuse *fs, uint32_t ino, char *buf, size_t size)
{
    struct page *page;
    struct inode_info ii;
    rd_begin(fs, ino);
    int err = inode_get(fs, ino, &page, &ii);
    if (err) {
        rd_end(fs, ino);
        return err;
    }
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
    rd_end(fs, ino);
    return ret;
}

ssize_t f2fuse_getxattr(struct f2fuse *fs, uint32_t ino, const char *name, void *value,
                        size_t size)
{
    struct page *page;
    struct inode_info ii;
    rd_begin(fs, ino);
    int err = inode_get(fs, ino, &page, &ii);
    if (err) {
        rd_end(fs, ino);
        return err;
    }
    ssize_t ret = xattr_get(fs, &ii, page, name, value, size);
    pcache_put(fs->cache, page);
    rd_end(fs, ino);
    return ret;
}

ssize_t f2fuse_listxattr(struct f2fuse *fs, uint32_t ino, char *list, size_t size)
{
    struct page *page;
    struct inode_info ii;
    rd_begin(fs, ino);
    int err = inode_get(fs, ino, &page, &ii);
    if (err) {
        rd_end(fs, ino);
        return err;
    }
    ssize_t ret = xattr_list(fs, &ii, page, list, size);
    pcache_put(fs->cache, page);
    rd_end(fs, ino);
    return ret;
}

static int xattr_change(struct f2fuse *fs, uint32_t ino, const char *name, const void *value,
                        size_t size, int flags)
{
    int err = fs_writable(fs);
    if (!err)
        err = fs_reserve(fs, 2);
    if (err)
        return err;
    change_begin(fs, ino);
    struct page *page;
    struct inode_info ii;
    err = inode_get(fs, ino, &page, &ii);
    if (!err) {
        err = xattr_set(fs, &ii, page, name, value, size, flags);
        fsync_needs_checkpoint(fs, ino);
        if (!err) {
            inode_touch(page, false, true);
            pcache_mark_dirty(fs->cache, page);
        }
        pcache_put(fs->cache, page);
    }
    change_end(fs, ino);
    fs_after_change(fs);
    return err;
}

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

int f2fuse_statfs(struct f2fuse *fs, struct statvfs *st)
{
    const struct f2fs_checkpoint *cp = fs->cp;
    memset(st, 0, sizeof(*st));
    uint64_t user = le64(cp->user_block_count), valid = le64(cp->valid_block_count);
    if (fs->seg) {
        valid = fs_used_blocks(fs);
        if (valid > user)
            valid = user;
    }
    uint64_t nodes = fs->max_nid - F2FS_RESERVED_NODE_NUM;
    st->f_bsize = st->f_frsize = F2FS_BLKSIZE;
    st->f_blocks = user;
    st->f_bfree = st->f_bavail = user - valid;
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

int f2fuse_tune(struct f2fuse *fs, const char *name, const char *value)
{
    return writeback_tune(fs, name, value); /* writeback.c */
}

void f2fuse_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg)
{
    blk_emit_stats(fs->dev, fn, arg);
    pcache_emit_stats(fs->cache, fn, arg);
    if (fs->seg)
        seg_emit_stats(fs->seg, fn, arg);
    if (fs->nat)
        nat_emit_stats(fs->nat, fn, arg);
    checkpoint_merge_stats(fs, fn, arg);
    discard_emit_stats(fs, fn, arg); /* discard.c */
    writeback_emit_stats(fs, fn, arg); /* writeback.c */
    gc_emit_stats(fs, fn, arg);      /* gc.c */
    fn(arg, "fs.inode_reads", atomic_load(&fs->inode_reads));
    fn(arg, "fsync.fast", atomic_load(&fs->fsync_fast));
    fn(arg, "fsync.flush_requests", atomic_load(&fs->flushes.requests));
    fn(arg, "fsync.flushes", atomic_load(&fs->flushes.issued));
    fn(arg, "fsync.checkpoint", atomic_load(&fs->fsync_checkpoint));
    fn(arg, "fsync.no_room", atomic_load(&fs->fsync_no_room));
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
