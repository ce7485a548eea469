/* The mount context and the core's internal interfaces.  One source file per mechanism, as
 * in the kernel's fs/f2fs: super.c, checkpoint.c, node.c, inode.c, data.c, dir.c, hash.c,
 * xattr.c, fs.c (the public API). */
#ifndef F2FUSE_CORE_FS_H
#define F2FUSE_CORE_FS_H

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "blk/blk.h"
#include "cache/pcache.h"
#include "core/discard.h"
#include "core/format.h"
#include "core/gc.h"
#include "core/nat.h"
#include "core/segment.h"
#include "core/writeback.h"
#include "f2fuse.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/parse.h"

#define INODE_LOCK_STRIPES 64
#define CP_WAIT_BUCKETS 40 /* log2 buckets of microseconds: up to ~6 days */
#define CP_RECENT_CALLERS 16 /* callers the merging daemon remembers for batching */

/* Checkpoint requests (checkpoint_merge.c). */
struct cp_request;
struct cp_control {
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    struct cp_request *head, *tail;
    bool running, stopping;
    pthread_t thread;
    uint64_t requests, checkpoints, served_total, served_max;
    uint64_t waits, wait_total_ns, wait_max_ns, wait_hist[CP_WAIT_BUCKETS];
    /* batching: the callers (thread ids) that asked recently, and when; how long a
     * checkpoint takes (moving average) */
    struct {
        uint32_t tid;
        uint64_t last_ns;
    } recent[CP_RECENT_CALLERS];
    uint64_t cp_avg_ns;
    uint64_t batch_waits, batch_wait_total_ns, batch_joined;
};

/* Everything known about a mounted image.  Geometry and checkpoint state are read once at
 * mount and are immutable on a read-only mount. */
/* flush_merge.c: concurrent fast fsyncs share device flushes (f2fs's flush_merge). */
struct flush_merge {
    pthread_mutex_t lock;
    pthread_cond_t done;
    bool running;                    /* a flush is on the device */
    uint64_t started, completed;     /* flushes numbered as they start */
    uint64_t last_ok;                /* the latest flush that succeeded */
    int last_err;
    atomic_uint_fast64_t requests, issued;
};

struct f2fuse {
    struct f2fuse_options opts;
    struct blk_dev *dev;
    struct pcache *cache;

    struct f2fs_super_block sb; /* the valid copy, as on disk */
    uint32_t features;
    uint32_t main_blkaddr;      /* first block of the main area */
    uint32_t main_blkend;       /* one past its last block */
    uint32_t nat_blkaddr;
    uint32_t nat_blocks;        /* blocks in one NAT copy */
    uint32_t max_nid;           /* nids are < max_nid */
    uint32_t root_ino;
    uint32_t uuid_crc;          /* inode checksum seed: crc over the uuid */

    void *cp_block;             /* the valid checkpoint's first block (4 KiB) */
    const struct f2fs_checkpoint *cp;
    uint64_t cp_ver;
    uint32_t cp_start;          /* first block of the valid pack */
    const uint8_t *nat_bitmap;  /* which copy of each NAT block is current (in cp_block) */
    uint32_t nat_bitmap_bytes;

    struct nat_journal_entry nat_journal[NAT_JOURNAL_ENTRIES];
    unsigned nat_journal_count;

    /* The write side (NULL on a read-only mount). */
    struct seg_manager *seg;
    struct nat_manager *nat;
    struct discard_control *discard; /* discard.c */
    struct wb_control *wb;           /* writeback.c: the flusher, throttling, tunables */
    struct gc_control *gc;           /* gc.c: segment cleaning */

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
    atomic_uint_fast64_t data_pages_written, node_pages_written;
    atomic_uint_fast32_t next_generation;
    int write_error;            /* set when a checkpoint failed: the mount turns read-only */

    /* References the caller holds (opens, FUSE lookups): namei.c. */
    pthread_mutex_t ref_lock;
    struct inode_ref **refs;

    struct cp_control cpc;
    enum blk_prio io_prio; /* of the writes the running checkpoint or fsync issues */

    /* fsync fast path: one at a time, so that the warm node chain has no gaps; inodes that
     * changed in ways roll-forward cannot replay (linked, renamed, truncated, xattrs, not
     * regular files; directories that lost a name) since the last checkpoint make their
     * fsync a checkpoint.  A regular file created since then is replayed with its name
     * (the dentry mark) when its parent is in the checkpoint and lost no name since. */
    pthread_mutex_t fsync_lock;
    struct flush_merge flushes; /* flush_merge.c: the fast fsyncs' shared flushes */
    uint8_t *fsync_needs_cp; /* one bit per nid, cleared by each checkpoint */
    uint8_t *fsync_new_name; /* one bit per nid: created since (same allocation, cleared too) */
    uint32_t fsync_needs_cp_end; /* bytes of both that may have bits set */
    atomic_uint_fast64_t fsync_fast, fsync_checkpoint, recovered_inodes, recovered_names;
    atomic_uint_fast64_t fsync_no_room; /* fast fsyncs that checkpointed: recovery's room */
    atomic_uint_fast64_t stale_tails_zeroed; /* data_zero_past_end found a stale tail */
    /* extent.c: file blocks mapped through an inode's extent / through its nodes, and
     * extents found not valid (then not read through; the first one is logged) */
    atomic_uint_fast64_t extent_hits, extent_misses, extent_rejected;
    atomic_bool extent_rejected_logged;
    /* data.c: blocks of pinned files (PIN_FILE) rewritten at their own address */
    atomic_uint_fast64_t pinned_inplace_writes;
    /* CLOCK_MONOTONIC ns of the last write-side request (fs_reserve): background GC and
     * online discard wait for this to be old enough */
    atomic_uint_fast64_t activity_ns;

    /* The checkpoint thread: commits every checkpoint_interval seconds when dirty. */
    pthread_t cp_thread;
    bool cp_thread_running, stopping;
    pthread_mutex_t cp_thread_lock;
    pthread_cond_t cp_thread_wake;

    atomic_uint_fast64_t corrupt_hits; /* times a damaged structure was met */
    atomic_uint_fast64_t inode_reads;

    /* imagelock.c: one writer per image (flock held by a read-write open). */
    int lock_fd;
    bool in_use_rw; /* read-only open: another program had it open read-write */
};

/* Logs a corruption with the structure's name and returns -EIO. */
int fs_corrupt(struct f2fuse *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* super.c */
int super_load(struct f2fuse *fs);

/* What a checkpoint writes besides the nodes, NAT, SIT and the pack.  As the kernel's f2fs:
 * a checkpoint is a consistent view of the metadata, and regular files' data gets there
 * by writeback (writeback.c) or fsync; a reserved block whose data is not written yet is
 * recorded as NEW_ADDR and reads as zeros after a crash.  Directory and symlink blocks are
 * metadata (every checkpoint writes them).  CP_ALL_DATA also writes every dirty data page
 * first: sync, syncfs and unmount (the VFS's sync_filesystem does that before ->sync_fs),
 * and the callers that need the space writeback frees (pressure, GC). */
enum cp_scope { CP_METADATA, CP_ALL_DATA };

/* checkpoint.c */
int checkpoint_load(struct f2fuse *fs);
int checkpoint_write(struct f2fuse *fs, bool umount, enum cp_scope scope,
                     const uint32_t *orphans, uint32_t norphans);
/* The orphan inodes the valid checkpoint lists (malloc'ed array). */
int checkpoint_read_orphans(struct f2fuse *fs, uint32_t **out, uint32_t *count);

/* checkpoint_merge.c: every checkpoint request goes through checkpoint_request, which
 * returns once a checkpoint that started after the call, with at least scope, has
 * committed (merged requests get the widest scope among them). */
int checkpoint_request(struct f2fuse *fs, enum blk_prio prio, enum cp_scope scope);
/* The same for a known caller (thread id; 0 = anonymous: timer, pressure, GC). */
int checkpoint_request_by(struct f2fuse *fs, enum blk_prio prio, uint32_t tid,
                          enum cp_scope scope);
/* Parses checkpoint_batch_us; -ENOENT for any other name. */
int checkpoint_merge_option_set(struct f2fuse_options *o, const char *name, const char *value);
int checkpoint_merge_start(struct f2fuse *fs);
void checkpoint_merge_stop(struct f2fuse *fs);
void checkpoint_merge_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg);

/* node.c */
bool nid_valid(const struct f2fuse *fs, uint32_t nid);
bool blkaddr_in_main(const struct f2fuse *fs, uint32_t blkaddr);
int nat_lookup(struct f2fuse *fs, uint32_t nid, struct f2fs_nat_entry *out);
/* Reads node nid and checks its footer (nid, and owner ino unless ino == 0). */
int node_get(struct f2fuse *fs, uint32_t nid, uint32_t ino, struct page **out);
static inline struct f2fs_node *page_node(struct page *p) { return p->data; }
/* Word pointers into a node page's arrays.  Page buffers are 4 KiB aligned and these
 * arrays sit at 4-byte aligned offsets, so such pointers are safe despite the packing. */
static inline uint32_t *node_word(struct page *p, size_t byte_off)
{
    return (uint32_t *)((uint8_t *)p->data + byte_off);
}
#define INODE_ADDR(p, i) node_word((p), offsetof(struct f2fs_inode, i_addr) + 4 * (size_t)(i))
#define INODE_NID(p, i) node_word((p), offsetof(struct f2fs_inode, i_nid) + 4 * (size_t)(i))
#define NODE_SLOT(p, i) node_word((p), 4 * (size_t)(i)) /* direct addr[i] / indirect nid[i] */
/* Write side.  node_new makes a dirty, zero-filled node page for nid (0: allocate a nid)
 * with its footer set; node_free releases a node and its block. */
int node_new(struct f2fuse *fs, uint32_t ino, uint32_t nid, uint32_t ofs, bool cold,
             struct page **out);
int node_free(struct f2fuse *fs, uint32_t nid, uint32_t ino);
int node_writeback(struct f2fuse *fs, uint32_t fsync_ino, bool dentry_mark);
/* The version node footers written after the current checkpoint carry; roll-forward
 * recovery accepts a footer when node_chain_version_matches (only the low 32 bits under
 * NOCRC_RECOVERY). */
uint64_t node_chain_version(const struct f2fuse *fs);
bool node_chain_version_matches(const struct f2fuse *fs, uint64_t footer_ver);

/* inode.c: the decoded, immutable view of an on-disk inode that the rest of the core uses. */
struct inode_info {
    uint32_t ino;
    uint16_t mode;
    uint8_t inline_flags;       /* i_inline */
    uint8_t advise;
    uint32_t flags;             /* i_flags */
    uint64_t size;
    uint32_t links;
    uint32_t extra_isize;       /* bytes */
    uint32_t xattr_addrs;       /* inline xattr size in 4-byte words */
    uint32_t addrs_per_inode;   /* data pointers in the inode */
    uint32_t xattr_nid;
    uint32_t current_depth;
    uint32_t dir_level;
    uint32_t nids[DEF_NIDS_PER_INODE];
};
int inode_get(struct f2fuse *fs, uint32_t ino, struct page **page, struct inode_info *info);
/* Checks an inode page and decodes it (inode_get without the read). */
int inode_decode(struct f2fuse *fs, const struct page *page, uint32_t ino, struct inode_info *ii);
int inode_fill_attr(struct f2fuse *fs, const struct f2fs_inode *ri, const struct inode_info *ii,
                    struct f2fuse_attr *attr);
/* Byte offset and size of the inline data area inside the inode block. */
uint32_t inline_data_offset(const struct inode_info *ii);
uint32_t inline_data_size(const struct inode_info *ii);
uint32_t inline_xattr_offset(const struct inode_info *ii);
/* Recomputes the inode checksum of an inode page when the image uses them. */
void inode_update_checksum(struct f2fuse *fs, struct page *page);
/* i_extra_isize of a new inode on this image (the features decide, as in f2fs-tools). */
uint16_t inode_new_extra_isize(const struct f2fuse *fs);

/* data.c */
/* Maps count file blocks from index; addrs[i] gets a block address, NULL_ADDR for holes. */
int data_map(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
             uint64_t index, uint32_t count, uint32_t *addrs);
/* For a hole at index: the next index that may hold data (skips absent node ranges). */
uint64_t data_next_candidate(struct f2fuse *fs, const struct inode_info *ii, uint64_t index);
ssize_t data_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                  size_t size, uint64_t off);
uint64_t data_max_size(const struct inode_info *ii);
/* fallocate (f2fs_expand_inode_data): block index becomes NEW_ADDR when it is a hole -
 * counted in i_blocks and the used space, reading as zeros, written by nobody until data
 * comes; a checkpoint persists it as it is. */
int data_reserve_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                       uint64_t index);

/* Where the pointer to one file block lives: in the inode or in a direct node. */
struct dnode {
    struct page *page; /* the inode page or the direct node's page (referenced) */
    uint32_t nid;      /* its nid */
    uint32_t ofs;      /* index in its address array (the summary's ofs_in_node) */
    uint32_t *addr;    /* the little-endian pointer itself */
};
/* Finds the pointer of file block index; with alloc, creates missing nodes on the way
 * (else -ENOENT for a hole in the node tree).  Release with dnode_put. */
int dnode_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, uint64_t index,
              bool alloc, struct dnode *dn);
void dnode_put(struct f2fuse *fs, struct page *ipage, struct dnode *dn);
void inode_add_blocks(struct page *ipage, int64_t delta);
ssize_t data_write(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, const void *buf,
                   size_t size, uint64_t off);
int data_truncate(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t new_size);
int data_zero_past_end(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
/* Frees every block and node of a file, past its size too (fallocate KEEP_SIZE). */
int data_free_all(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
int data_writeback(struct f2fuse *fs, uint32_t only_ino);
/* The same for the pages every checkpoint writes: directory and symlink blocks. */
int data_writeback_metadata(struct f2fuse *fs);
/* One inode's dirty data, at prio, by a caller holding its stripe (fsync: several at once). */
int data_writeback_inode(struct f2fuse *fs, uint32_t ino, enum blk_prio prio);
/* Gives the file blocks of the n data pages (one inode's, sorted by index) new blocks in
 * their data log (the cold one for data GC moves) and points the file at them (the old
 * blocks turn invalid); addrs[i] is page i's block, which the caller writes.  Each direct
 * node is looked up, and its NAT entry read, once.  *done: pages assigned, also on error.
 * Holds the inode's stripe. */
int data_assign_blocks(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                       struct page *const *pages, size_t n, uint32_t *addrs, size_t *done);
/* The cached page of file block index, created when absent: read from its block when
 * keep_old (and it has one), else zero-filled.  A block without one gets it reserved
 * (NEW_ADDR in its pointer, counted in i_blocks, as f2fs_reserve_block does), so that
 * st_blocks is right before writeback allocates it. */
int data_get_page(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index,
                  bool keep_old, struct page **out);
/* Moves an inline file's data to block 0 (f2fs_convert_inline_inode). */
int data_convert_inline(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
/* Frees file block index (a hole afterwards). */
int data_punch_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index);

/* hash.c */
uint32_t dentry_hash(const uint8_t *name, size_t len);

/* dir.c */
int dir_lookup(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
               const char *name, size_t len, uint32_t *ino);
int dir_iterate(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                uint64_t cookie, f2fuse_dirent_fn fn, void *arg);

/* Write side: entries are added at the lowest hash level with room (inline directories
 * move to a block when full); mode gives the entry's file type. */
uint8_t dir_file_type(uint16_t mode);
int dir_add_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, const char *name,
                  size_t len, uint32_t ino, uint16_t mode);
int dir_remove_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     const char *name, size_t len, uint32_t *ino);
int dir_set_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, const char *name,
                  size_t len, uint32_t ino, uint16_t mode);
int dir_init(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, uint32_t parent);
int dir_is_empty(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage, bool *empty);

/* namei.c */
void inode_touch(struct page *ipage, bool mtime, bool ctime);
int inode_open(struct f2fuse *fs, uint32_t ino);
int inode_release(struct f2fuse *fs, uint32_t ino);
int inode_free(struct f2fuse *fs, uint32_t ino);
int inode_forget(struct f2fuse *fs, uint32_t ino, uint64_t n);
int inode_lookup_ref(struct f2fuse *fs, uint32_t ino); /* with opts.track_lookups */
void inode_refs_destroy(struct f2fuse *fs);
/* The unlinked-but-open inodes, for the checkpoint's orphan list (malloc'ed). */
uint32_t *inode_orphans(struct f2fuse *fs, uint32_t *count);

/* file.c */
void fsync_needs_checkpoint(struct f2fuse *fs, uint32_t ino);
/* A regular file was created: its first fsync may carry its name (the dentry mark). */
void fsync_new_name(struct f2fuse *fs, uint32_t ino);
void fsync_checkpointed(struct f2fuse *fs); /* a checkpoint committed: all bits clear */

/* flush_merge.c */
void flush_merge_init(struct flush_merge *fm);
void flush_merge_destroy(struct flush_merge *fm);
/* Returns once a device flush that began after the call has completed (0), or -errno. */
int flush_merge_wait(struct f2fuse *fs, enum blk_prio prio);

/* recovery.c: replays what fsync wrote after the last checkpoint (roll-forward). */
/* orphans: the inodes the mount freed just before (their fsync'ed nodes are moot). */
int recovery_run(struct f2fuse *fs, const uint32_t *orphans, uint32_t norphans);

/* imagelock.c: read-write opens wait (10 s at most, then -EBUSY) for the image's lock and
 * hold it until image_unlock; read-only opens only note whether a writer holds it. */
int image_lock(struct f2fuse *fs, const char *image);
void image_unlock(struct f2fuse *fs);

/* info.c (f2fuse info): the version of checkpoint pack index (0 or 1) when it is intact,
 * and the nodes fsync wrote after the checkpoint that a read-write mount would replay. */
int checkpoint_pack_version(struct f2fuse *fs, unsigned index, uint64_t *version);
int recovery_pending(struct f2fuse *fs, uint32_t *nodes);

/* fs.c: shared pieces of every write operation */
int fs_writable(struct f2fuse *fs);               /* -EROFS on a read-only mount */
int fs_reserve(struct f2fuse *fs, uint64_t blocks); /* -ENOSPC when they cannot be had */
void fs_after_change(struct f2fuse *fs);           /* checkpoints when memory or space is short */
void inode_lock_many(struct f2fuse *fs, const uint32_t *inos, int n);   /* exclusive */
void inode_unlock_many(struct f2fuse *fs, const uint32_t *inos, int n);
void inode_lock_shared(struct f2fuse *fs, uint32_t ino);  /* for reading only; not nested */
void inode_unlock_shared(struct f2fuse *fs, uint32_t ino);

/* ---- segment cleaning (gc.c) support ---- */
/* recovery.c: the first file block a direct node at footer offset ofs maps (UINT64_MAX for
 * nodes that map none). */
uint64_t dnode_first_block(uint32_t addrs_per_inode, uint32_t ofs);
/* fs.c: would blocks more (plus what is dirty) fit?  *logical: in the user-visible space;
 * the result also asks for free segments beyond the node logs' and GC's reserve. */
bool fs_room_for(struct f2fuse *fs, uint64_t blocks, bool *logical);
/* fs.c: blocks that writing back what is dirty now could take. */
uint64_t fs_pending_blocks(struct f2fuse *fs);
/* fs.c: blocks of the user-visible space in use: valid plus reserved (data and nodes). */
uint64_t fs_used_blocks(struct f2fuse *fs);
/* fs.c: free segments kept for the node logs and the hot data log of one checkpoint. */
#define FS_LOG_RESERVED_SEGMENTS 4u
/* fault.c: the test options (f2fuse_test.h), armed at open before the first write (test may
 * be NULL; 0 or -ENOMEM); and the policy for an operation that fails part-way with EIO,
 * ENOMEM or EUCLEAN on a writable mount: it may have changed pages in memory, so the mount
 * stops checkpointing (write_error) and turns read-only.  Returns err. */
struct f2fuse_test_options;
int fault_arm(struct f2fuse *fs, const struct f2fuse_test_options *test);
int fs_op_result(struct f2fuse *fs, const char *op, int err);
/* Records the mount's first write error (it turns read-only and writes no further
 * checkpoint); true when err is the first, so that the caller says what failed. */
static inline bool fs_first_write_error(struct f2fuse *fs, int err)
{
    int none = 0;
    return __atomic_compare_exchange_n(&fs->write_error, &none, err, false, __ATOMIC_ACQ_REL,
                                       __ATOMIC_ACQUIRE);
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

/* xattr.c */
ssize_t xattr_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                  const char *name, void *value, size_t size);
ssize_t xattr_list(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                   char *list, size_t size);
#define XATTR_CREATE_FLAG 1  /* = XATTR_CREATE */
#define XATTR_REPLACE_FLAG 2 /* = XATTR_REPLACE */
/* Sets (value != NULL) or removes an attribute; flags as setxattr(2). */
int xattr_set(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, const char *name,
              const void *value, size_t size, int flags);
/* Removes security.capability (a write, truncate or chown does, as the VFS's killpriv):
 * 1 when there was one, 0 when not, or -errno.  Cheap when the inode has no xattrs. */
int xattr_drop_capability(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);

#endif
