/* The mount context: struct f2fuse, the one object every piece of a mount's state hangs
 * off, and the few helpers every mechanism shares (corruption reports, the write-error policy,
 * allocation that fault injection can fail).  Each mechanism's interface is in its own header */
#ifndef F2FUSE_CORE_CONTEXT_H
#define F2FUSE_CORE_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "blk/blk.h"
#include "cache/pcache.h"
#include "core/checkpoint_merge.h"
#include "core/cluster.h"
#include "core/flush_merge.h"
#include "core/format.h"
#include "core/fsync.h"
#include "f2fuse.h"
#include "util/ticker.h"

struct seg_manager;
struct nat_manager;
struct discard_control;
struct wb_control;
struct gc_control;
struct verity_cache;
struct casefold;
struct fscrypt_keyring;
struct inode_ref;
struct dir_index;
struct quota;
struct cache_sizer;

#define INODE_LOCK_STRIPES 64

#define DIR_INDEX_BUCKETS 256

/* refs.c: one stripe of the inode references, a hash table that doubles as it fills */
#define REF_STRIPES 64
struct ref_stripe {
    pthread_mutex_t lock;
    struct inode_ref **buckets;
    uint32_t nbuckets, count;
} __attribute__((aligned(64)));

/* Everything known about a mounted image.  Geometry and checkpoint state are read once at
 * mount and are immutable on a read-only mount. */
struct f2fuse {
    struct f2fuse_options opts;
    pthread_mutex_t tune_lock; /* the options f2fuse_tune changes, while mounted */
    struct blk_dev *dev;
    struct pcache *cache;

    struct f2fs_super_block sb; /* the valid copy, as on disk */
    uint32_t features;
    uint32_t main_blkaddr; /* first block of the main area */
    uint32_t main_blkend;  /* one past its last block */
    uint32_t nat_blkaddr;
    uint32_t nat_blocks; /* blocks in one NAT copy */
    uint32_t max_nid;    /* nids are < max_nid */
    uint32_t root_ino;
    uint32_t uuid_crc; /* inode checksum seed: crc over the uuid */

    void *cp_block; /* the valid checkpoint's first block (4 KiB) */
    const struct f2fs_checkpoint *cp;
    uint64_t cp_ver;
    uint32_t cp_start;         /* first block of the valid pack */
    const uint8_t *nat_bitmap; /* which copy of each NAT block is current (in cp_block) */
    uint32_t nat_bitmap_bytes;

    struct nat_journal_entry nat_journal[NAT_JOURNAL_ENTRIES];
    unsigned nat_journal_count;

    /* The write side (NULL on a read-only mount). */
    struct seg_manager *seg;
    struct nat_manager *nat;
    struct discard_control *discard; /* discard.c */
    struct wb_control *wb;           /* writeback.c: the flusher, throttling, tunables */
    struct gc_control *gc;           /* gc.c: segment cleaning */
    struct quota *quota;             /* quota.c: usage per id (images with quota files) */
    struct verity_cache *verity;     /* verity.c: parsed fs-verity descriptors */
    struct casefold *casefold;       /* casefold.c: the encoding (NULL without casefold) */
    struct cache_sizer *sizer;       /* cachesize.c: cache_size=auto */
    struct fscrypt_keyring *keys;    /* fscrypt_keys.c: master keys, inode keys */

    /* Locking, as the kernel's f2fs: every operation holds cp_lock for reading, a
     * checkpoint holds it for writing; namespace changes serialize on ns_lock; each inode's
     * data, size and dentries are guarded by one of the inode_locks stripes (taken in
     * stripe order when an operation needs two).  A stripe is a reader-writer lock:
     * reading operations share it, so that reads of one file (fio's queue depth, readahead)
     * wait for the device side by side; changes hold it exclusively.  Writers are
     * preferred, so a stream of reads cannot starve writeback. */
    pthread_rwlock_t cp_lock;
    pthread_mutex_t ns_lock;
    pthread_rwlock_t inode_locks[INODE_LOCK_STRIPES];
    /* Reads still on the device after their shell ended (f2fuse_read_async): a checkpoint
     * waits for them (read_pins_drain), so that no block they read is reused meanwhile. */
    pthread_mutex_t pin_lock;
    pthread_cond_t pins_gone;
    unsigned read_pins;
    atomic_uint_fast64_t data_pages_written, node_pages_written;
    atomic_uint_fast32_t next_generation;
    int write_error; /* set when a checkpoint failed: the mount turns read-only */

    /* References the caller holds (opens, FUSE lookups): refs.c. */
    struct ref_stripe refs[REF_STRIPES];

    /* dir_index.c: big directories' name indexes, by inode number */
    struct dir_indexes {
        pthread_rwlock_t lock;
        struct dir_index *buckets[DIR_INDEX_BUCKETS];
        uint64_t bytes; /* of the ready indexes' tables: at most 1/16 of the cache budget */
        atomic_uint_fast64_t clock; /* advances at each build: the indexes' recency */
        atomic_uint_fast64_t builds, refused, evictions, lookups, stale;
    } dir_indexes;

    struct cp_control cpc;
    enum blk_prio io_prio; /* of the writes the running checkpoint or fsync issues */

    struct fsync_state fsync;   /* fsync.c */
    struct flush_merge flushes; /* flush_merge.c: the fast fsyncs' shared flushes */
    atomic_uint_fast64_t recovered_inodes, recovered_names; /* recovery.c */
    atomic_uint_fast64_t stale_tails_zeroed; /* data_zero_past_end found a stale tail */
    /* extent.c: file blocks mapped through an inode's extent / through its nodes, and
     * extents found not valid (then not read through; the first one is logged) */
    atomic_uint_fast64_t extent_hits, extent_misses, extent_rejected;
    atomic_bool extent_rejected_logged;
    struct cluster_stats clusters;                   /* cluster.c: compressed files' clusters */
    struct cluster_decoder *_Atomic cluster_decoder; /* cluster.c: reads' second decoder */
    /* data.c: blocks of pinned files (PIN_FILE) rewritten at their own address */
    atomic_uint_fast64_t pinned_inplace_writes;
    /* Data blocks that operations have claimed (space_claim) and not yet turned into
     * blocks segment.c counts as used: the space check adds them, so that no block is
     * promised twice.  Under its own lock: check and claim are one step. */
    struct {
        pthread_mutex_t lock;
        uint64_t claimed;
        /* Blocks of unlinked inodes that wait only for the kernel's forget: free for
         * statfs already, as in the kernel (namei.c keeps them per inode). */
        uint64_t freeing;
        unsigned frees_running; /* inodes being freed now: statfs waits for them */
        pthread_cond_t freed;   /* frees_running fell to 0, or freeing fell */
    } space;
    /* CLOCK_MONOTONIC ns of the last write-side request (space_reserve): background GC and
     * online discard wait for this to be old enough */
    atomic_uint_fast64_t activity_ns;

    struct ticker cp_timer; /* checkpoint_timer.c */

    atomic_uint_fast64_t corrupt_hits; /* times a damaged structure was met */
    atomic_uint_fast64_t inode_reads;
    /* api/read.c: lookups and getattrs, and those of them that read the device (a miss of
     * the page cache: what a cache big enough for the tree's metadata takes to zero) */
    atomic_uint_fast64_t lookups, lookup_device_reads, getattrs, getattr_device_reads;

    /* imagelock.c: one writer per image (flock held by a read-write open). */
    int lock_fd;
    bool in_use_rw; /* read-only open: another program had it open read-write */
};

/* A zeroed context with its options and locks set up (NULL without memory), and its
 * release once every mechanism is gone. */
struct f2fuse *context_create(const struct f2fuse_options *opts);
void context_free(struct f2fuse *fs);

/* Logs a corruption with the structure's name and returns -EIO. */
int fs_corrupt(struct f2fuse *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* -EROFS on a read-only mount, -EIO once a write error turned the mount read-only. */
int fs_writable(struct f2fuse *fs);

/* fault.c: the policy for an operation that fails part-way with EIO,
 * ENOMEM or EUCLEAN on a writable mount: it may have changed pages in memory, so the mount
 * stops checkpointing (write_error) and turns read-only.  Returns err. */
int fs_op_result(struct f2fuse *fs, const char *op, int err);
/* Records the mount's first write error (it turns read-only and writes no further
 * checkpoint); true when err is the first, so that the caller says what failed. */
static inline bool fs_first_write_error(struct f2fuse *fs, int err)
{
    int none = 0;
    return __atomic_compare_exchange_n(&fs->write_error, &none, err, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
}
/* The first write error, or 0: read by any thread while another may record it. */
static inline int fs_write_error(const struct f2fuse *fs)
{
    return __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE);
}
/* malloc/calloc for the core's per-operation buffers, failing where fault=alloc:N says. */
static inline void *fs_malloc(struct f2fuse *fs, size_t n)
{
    return pcache_alloc_fails(fs->cache) ? NULL : malloc(n);
}
static inline void *fs_calloc(struct f2fuse *fs, size_t n, size_t size)
{
    return pcache_alloc_fails(fs->cache) ? NULL : calloc(n, size);
}

#endif
