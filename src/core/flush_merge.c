/* Flush merging (f2fs's flush_merge): concurrent fsyncs share device flushes.
 *
 * A fast fsync writes its data and nodes, then needs a flush that began after those
 * writes completed.  The flush is the expensive part (on an image file it is the host's
 * fdatasync), and fsyncs of several threads arrive together, so one flush at a time runs
 * and every caller that arrived while it ran is served by the next one: with N callers
 * waiting, two flushes cover them all instead of N.
 *
 * Flushes are numbered as they start; a caller needs flush number started + 1 (any that
 * is running began before its writes were known to be complete).  Any successful flush
 * with that number or a later one covers the caller. */
#include <errno.h>

#include "core/flush_merge.h"
#include "core/context.h"

void flush_merge_init(struct flush_merge *fm)
{
    pthread_mutex_init(&fm->lock, NULL);
    pthread_cond_init(&fm->done, NULL);
    fm->running = false;
    fm->started = fm->completed = fm->last_ok = 0;
    fm->last_err = 0;
    atomic_init(&fm->requests, 0);
    atomic_init(&fm->issued, 0);
}

void flush_merge_destroy(struct flush_merge *fm)
{
    pthread_mutex_destroy(&fm->lock);
    pthread_cond_destroy(&fm->done);
}

static int flush_device(struct f2fuse *fs, enum blk_prio prio)
{
    struct blk_req req = {.op = BLK_FLUSH, .prio = prio};
    struct blk_req *r = &req;
    return blk_submit_wait(fs->dev, &r, 1);
}

int flush_merge_wait(struct f2fuse *fs, enum blk_prio prio)
{
    struct flush_merge *fm = &fs->flushes;
    atomic_fetch_add(&fm->requests, 1);
    if (!fs->opts.flush_merge) {
        atomic_fetch_add(&fm->issued, 1);
        return flush_device(fs, prio);
    }
    pthread_mutex_lock(&fm->lock);
    uint64_t need = fm->started + 1;
    while (fm->completed < need) {
        if (fm->running) {
            pthread_cond_wait(&fm->done, &fm->lock);
            continue;
        }
        fm->running = true;
        uint64_t mine = ++fm->started;
        pthread_mutex_unlock(&fm->lock);
        atomic_fetch_add(&fm->issued, 1);
        int err = flush_device(fs, prio);
        pthread_mutex_lock(&fm->lock);
        fm->running = false;
        fm->completed = mine;
        if (err)
            fm->last_err = err;
        else
            fm->last_ok = mine;
        pthread_cond_broadcast(&fm->done);
    }
    int err = fm->last_ok >= need ? 0 : (fm->last_err ? fm->last_err : -EIO);
    pthread_mutex_unlock(&fm->lock);
    return err;
}
