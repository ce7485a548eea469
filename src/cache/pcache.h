/* Page cache: 4 KiB pages keyed by device block address, a memory budget with LRU reclaim
 * of unreferenced clean pages, and one load per page even when many threads ask at once.
 *
 * The read side is what exists today (meta, node and directory blocks); dirty tracking and
 * writeback arrive with the read-write path, behind the same page structure. */
#ifndef F2FUSE_CACHE_PCACHE_H
#define F2FUSE_CACHE_PCACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"
#include "util/stats.h"

struct pcache;

struct page {
    uint64_t blkaddr;
    void *data;          /* F2FS_BLKSIZE bytes, 4 KiB aligned */
    /* cache-private */
    unsigned refs;
    int load_error;      /* -errno when the load failed */
    bool uptodate;
    struct page *hash_next;
    struct page *lru_prev, *lru_next;
};

/* budget_bytes: the most memory the pages may take (at least 64 pages are kept). */
int pcache_create(struct blk_dev *dev, uint64_t budget_bytes, struct pcache **out);
void pcache_destroy(struct pcache *cache);

/* Returns a referenced, up-to-date page for blkaddr (reading it from the device when not
 * cached), or -errno.  Release with pcache_put. */
int pcache_get(struct pcache *cache, uint64_t blkaddr, struct page **out);
void pcache_put(struct pcache *cache, struct page *page);

/* Drops every unreferenced page (tests; memory pressure). */
void pcache_shrink(struct pcache *cache);

/* Counters "cache.*": hits, misses, evictions, pages, bytes, budget. */
void pcache_emit_stats(struct pcache *cache, stat_emit_fn emit, void *sink);

#endif
