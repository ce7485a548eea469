/* The checkpoint interval: a dirty mount commits every checkpoint_interval seconds.  sync(1)
 * never reaches a FUSE daemon, so this bound is what limits the loss of data nobody
 * fsync'ed; that is why its checkpoint writes the data too. */
#include "core/checkpoint_timer.h"

#include "core/context.h"
#include "core/writeback.h"
#include "util/clock.h"

static uint64_t interval_ns(void *arg)
{
    const struct f2fuse *fs = arg;
    return (uint64_t)fs->opts.checkpoint_interval * NS_PER_SEC;
}

static void checkpoint_if_dirty(void *arg)
{
    struct f2fuse *fs = arg;
    if (pcache_dirty_count(fs->cache, PAGE_DATA) || pcache_dirty_count(fs->cache, PAGE_NODE)) {
        /* The data first by the flusher, beside the operations: the checkpoint, which
         * stops them, then writes what came meanwhile (writeback.c). */
        writeback_sync(fs, interval_ns(fs) / 2); /* the interval stays the bound */
        checkpoint_request(fs, BLK_PRIO_LOW, CP_ALL_DATA);
    }
}

int checkpoint_timer_start(struct f2fuse *fs)
{
    if (!fs->opts.checkpoint_interval)
        return 0;
    return ticker_start(&fs->cp_timer, interval_ns, checkpoint_if_dirty, fs);
}

void checkpoint_timer_stop(struct f2fuse *fs)
{
    ticker_stop(&fs->cp_timer);
}
