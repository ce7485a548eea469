/* Page cache: 4 KiB pages in three key spaces, as the kernel's f2fs keeps them —
 *   PAGE_META  key = device block address (NAT, SIT, SSA, checkpoint blocks)
 *   PAGE_NODE  key = nid (node blocks move on every write; their nid does not)
 *   PAGE_DATA  key = ino << 32 | file block index
 * A memory budget with LRU reclaim of unreferenced clean pages, one load per page even when
 * many threads ask at once, and dirty tracking: dirty pages are never reclaimed; the core
 * writes them back (pcache_collect_dirty) and may go over the budget meanwhile, which it
 * sees through pcache_over_budget().  The budget changes at run time (pcache_set_budget):
 * a smaller one is reached a batch at a time, and the memory given up goes back to the
 * system (pcache_give_back). */
#ifndef F2FUSE_CACHE_PCACHE_H
#define F2FUSE_CACHE_PCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"
#include "util/stats.h"

struct pcache;
struct page_group;

enum page_space { PAGE_META, PAGE_NODE, PAGE_DATA, PAGE_SPACES };

/* blkaddr value for pcache_get: create a zero-filled page instead of reading one. */
#define PCACHE_NO_LOAD UINT64_MAX

struct page {
    enum page_space space;
    uint64_t key;
    uint64_t blkaddr;       /* where the content was read from or last written to */
    void *data;             /* F2FS_BLKSIZE bytes, 4 KiB aligned */
    bool gc_cold;           /* core hint: moved by GC, written back to the cold data log */
    bool checkpoint_data;   /* core: a directory or symlink block, which every checkpoint
                           * writes (regular files' data is left to writeback) */
    uint8_t verity_checked; /* core: fs-verity tree blocks of this page verified (a bit per
                             * block; the kernel's PageChecked), cleared by a new load */
    /* core: a regular file's page that a write filled only in part.  The kernel's page cache
     * in front of FUSE marks a page up to date only when a write fills it, so it cannot
     * serve this one (a small file's last page): pcache_put_written keeps it here. */
    bool partial_write;
    /* cache-private */
    unsigned refs;
    int load_error; /* -errno when the load failed */
    bool uptodate;
    bool dirty;
    bool in_table;       /* false once dropped (failed load, pcache_forget) */
    uint64_t dirtied_ns; /* CLOCK_MONOTONIC when it last went from clean to dirty */
    struct page *hash_next;
    struct page *lru_prev, *lru_next; /* LRU (clean, unreferenced) or the dirty list */
    struct page_group *group;         /* PAGE_DATA: the file's pages (NULL: not indexed) */
    struct page *group_prev, *group_next;
};

/* budget_bytes: the most memory the pages may take (at least 64 pages are kept). */
int pcache_create(struct blk_dev *dev, uint64_t budget_bytes, struct pcache **out);
void pcache_destroy(struct pcache *cache);

/* The smallest budget a cache keeps (64 pages). */
#define PCACHE_MIN_BYTES (64u * 4096u)

/* The budget now, in bytes. */
uint64_t pcache_budget(struct pcache *cache);
/* Changes the budget (at least PCACHE_MIN_BYTES).  Growing takes effect at once.  Shrinking
 * lowers the limit at once; every later get and put then evicts a few clean pages, and
 * pcache_reclaim_step does the rest in batches, so that no caller waits for a long eviction.
 * Dirty pages stay: the caller writes them back when they alone are over the budget
 * (pcache_dirty_total, pcache_over_budget). */
void pcache_set_budget(struct pcache *cache, uint64_t budget_bytes);
/* Evicts up to max clean unreferenced pages while the cache is over its budget (the clean
 * reserve beside dirty pages stays); returns how many went.  0: nothing more to evict. */
size_t pcache_reclaim_step(struct pcache *cache, size_t max);
/* Returns the memory of page buffers no page uses (beyond a small reserve) to the system;
 * the bytes given back.  A buffer given back is reused (and paged in again) when needed. */
uint64_t pcache_give_back(struct pcache *cache);
/* Bytes the pages take now (cached, dirty or held). */
uint64_t pcache_used_bytes(struct pcache *cache);
/* Gives back the free buffers no allocation needed since the last call (the free list's
 * low-water mark, beyond a reserve), when that is 16 MiB or more: after a burst (written
 * data leaves the cache once on the device) memory returns to the system, while a steady
 * stream keeps reusing its buffers.  Called periodically (cachesize.c); the bytes. */
uint64_t pcache_give_back_idle(struct pcache *cache);
/* Bytes of page buffers resident now (in use or kept for reuse). */
uint64_t pcache_resident_bytes(struct pcache *cache);
/* Dirty pages of every space. */
size_t pcache_dirty_total(struct pcache *cache);
/* Pages this thread has read from the device so far (a caller's "did that cost a read?"). */
uint64_t pcache_thread_loads(void);

/* Returns a referenced, up-to-date page for (space, key), reading it from blkaddr when not
 * cached (PCACHE_NO_LOAD: zero-filled), or -errno.  Release with pcache_put. */
int pcache_get(struct pcache *cache, enum page_space space, uint64_t key, uint64_t blkaddr,
               struct page **out);
/* Returns the cached page for (space, key) referenced, or NULL; never reads. */
struct page *pcache_find(struct pcache *cache, enum page_space space, uint64_t key);
/* The same for a dirty page only (a clean one, or none: NULL). */
struct page *pcache_find_dirty(struct pcache *cache, enum page_space space, uint64_t key);
void pcache_put(struct pcache *cache, struct page *page);
/* pcache_put of a page just written back: if that was the last reference and the page is
 * clean, it leaves the cache at once, unless it is checkpoint_data (a directory's) or a
 * partial_write (the kernel does not have it): a
 * regular file's written data lives on in the kernel's page cache above FUSE, and a second
 * copy here only took memory (with cache_size=auto, all of it: 512 MiB written by fio stayed
 * resident twice). */
void pcache_put_written(struct pcache *cache, struct page *page);

/* Dirty tracking.  The caller holds a reference when marking. */
void pcache_mark_dirty(struct pcache *cache, struct page *page);
/* pcache_mark_dirty and pcache_put in one hold of the lock. */
void pcache_put_dirty(struct pcache *cache, struct page *page);
/* Marks the page clean after it was written to blkaddr. */
void pcache_mark_clean(struct pcache *cache, struct page *page, uint64_t blkaddr);
/* pcache_mark_clean of n pages in one hold of the lock (the flusher's chunk). */
void pcache_mark_clean_many(struct pcache *cache, struct page *const *pages,
                            const uint32_t *blkaddrs, size_t n);
/* Fills pages[] with up to max referenced dirty pages of space (oldest first) and returns
 * how many; the caller writes them, marks them clean and puts them. */
/* Keeps in pages[0, return) those of the n referenced pages that are still dirty, in their
 * order, and puts the others. */
size_t pcache_keep_dirty(struct pcache *cache, struct page **pages, size_t n);
size_t pcache_collect_dirty(struct pcache *cache, enum page_space space, struct page **pages,
                            size_t max);
/* The same, for the dirty pages that match says yes to (called with the cache locked: it
 * may look at the page's key and data, nothing else). */
size_t pcache_collect_dirty_match(struct pcache *cache, enum page_space space,
                                  bool (*match)(const struct page *page, void *arg), void *arg,
                                  struct page **pages, size_t max);
/* The same for the dirty PAGE_DATA pages of one file (keys file << 32 | index), through the
 * file's own list: an fsync's cost does not grow with the dirty pages of other files. */
size_t pcache_collect_dirty_file(struct pcache *cache, uint32_t file, struct page **pages,
                                 size_t max);
size_t pcache_dirty_count(struct pcache *cache, enum page_space space);
/* Writeback's view of the dirty list (oldest first): the key of the oldest dirty page of
 * space and when it was dirtied.  False when none is dirty. */
bool pcache_oldest_dirty(struct pcache *cache, enum page_space space, uint64_t *key,
                         uint64_t *dirtied_ns);
bool pcache_over_budget(struct pcache *cache);

/* Drops (space, key) from the cache: the next get reads it again.  A holder of a reference
 * keeps its copy.  A dirty page is left alone. */
void pcache_forget(struct pcache *cache, enum page_space space, uint64_t key);
/* Discards every page of space whose key lies in [lo, hi] (dirty or not).  A range within
 * one file's PAGE_DATA keys walks that file's pages only (an index per ino, key >> 32), so
 * that a truncate or unlink costs what the file has cached, not what the cache holds;
 * otherwise the keys or the whole table, whichever is shorter. */
void pcache_discard_range(struct pcache *cache, enum page_space space, uint64_t lo, uint64_t hi);

/* Like pcache_forget, but also throws away a dirty page (its content is no longer wanted:
 * a truncated block, a freed node). */
void pcache_discard(struct pcache *cache, enum page_space space, uint64_t key);

/* Drops every unreferenced page (tests; memory pressure). */
void pcache_shrink(struct pcache *cache);

/* Allocation-failure injection for tests: the nth page allocation from now on (1 = the
 * next) fails with -ENOMEM; with sticky, every later one too.  nth = 0 clears it. */
void pcache_inject_enomem(struct pcache *cache, uint64_t nth, bool sticky);
/* The same countdown for the core's other per-operation allocations (fs_malloc): true when
 * this one is to fail. */
bool pcache_alloc_fails(struct pcache *cache);

/* Counters "cache.*": hits, misses, evictions, pages, dirty pages, bytes, budget, resizes,
 * memory given back. */
void pcache_emit_stats(struct pcache *cache, stat_emit_fn emit, void *sink);

#endif
