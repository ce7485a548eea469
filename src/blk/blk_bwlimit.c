/* Device bandwidth limit for experiments (-o dev_bw=25M): a slow disk emulated on a fast
 * one.  The device is a FIFO with a virtual clock: each batch of reads and writes reserves
 * its transfer time after everything reserved before it, and the submitter is held until
 * that transfer would have finished, then the real I/O runs (fast).  Flushes and discards
 * cost nothing.  Priorities are not modelled: whoever reserves first goes first, which is
 * why background writeback submits in bounded chunks. */
#include <errno.h>
#include <time.h>

#include "blk/blk_internal.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void blk_set_bw_limit(struct blk_dev *dev, uint64_t bytes_per_s)
{
    atomic_store(&dev->bw_limit, bytes_per_s);
}

uint64_t blk_bw_limit(const struct blk_dev *dev)
{
    return atomic_load(&((struct blk_dev *)dev)->bw_limit);
}

void blk_bwlimit_wait(struct blk_dev *dev, struct blk_req *const *reqs, unsigned n)
{
    uint64_t bw = atomic_load(&dev->bw_limit);
    if (!bw)
        return;
    uint64_t bytes = 0;
    for (unsigned i = 0; i < n; i++)
        if (reqs[i]->op == BLK_READ || reqs[i]->op == BLK_WRITE)
            bytes += reqs[i]->len;
    if (!bytes)
        return;
    uint64_t cost = (uint64_t)((double)bytes * 1e9 / (double)bw);
    pthread_mutex_lock(&dev->bw_lock);
    uint64_t now = now_ns();
    uint64_t start = dev->bw_busy_until_ns > now ? dev->bw_busy_until_ns : now;
    uint64_t end = start + cost;
    dev->bw_busy_until_ns = end;
    pthread_mutex_unlock(&dev->bw_lock);
    struct timespec until = {.tv_sec = (time_t)(end / 1000000000ull),
                             .tv_nsec = (long)(end % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
    atomic_fetch_add(&dev->bw_wait_ns, end - now);
}
