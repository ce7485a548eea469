/* Device bandwidth limit for experiments (-o dev_bw=25M): a slow disk emulated on a fast
 * one.  The emulated device moves one batch of reads and writes at a time and holds it for
 * bytes / bandwidth; only then does the real I/O run (fast).  Batches wait for the device in
 * a queue of our own, one per priority class, served highest class first (HIGH, NORMAL,
 * LOW, IDLE) and in arrival order within a class: checkpoint I/O overtakes foreground I/O,
 * which overtakes background writeback and discard, which overtake an idle-class requester,
 * as an I/O scheduler that honours priorities does.  A batch that has waited longer than
 * BW_AGING_NS goes next whatever its class, so background I/O is delayed, never starved
 * (mq-deadline's prio_aging_expire, shorter).
 * A large batch holds the device 256 KiB at a time, so a more urgent one waits at most one
 * slice.  Flushes and discards cost nothing. */
#include <errno.h>
#include <time.h>

#include "blk/blk_internal.h"
#include "util/clock.h"

#define BW_AGING_NS 250000000ull /* 250 ms */
/* The idle class is served only once the device has had no other I/O for this long (as
 * CFQ's and BFQ's idle class: a short gap between two background writes does not count as
 * idle); aging still lets it through after BW_AGING_NS. */
#define BW_IDLE_GRACE_NS 20000000ull  /* 20 ms */
#define BW_SLICE_BYTES   (256u << 10) /* the emulated device's largest transfer */

struct bw_ticket {
    struct bw_ticket *next;
    uint64_t queued_ns;
};

static unsigned class_rank(enum blk_prio prio)
{
    switch (prio) {
    case BLK_PRIO_HIGH: return 0;
    case BLK_PRIO_NORMAL: return 1;
    case BLK_PRIO_LOW: return 2;
    default: return 3;
    }
}

void blk_set_bw_limit(struct blk_dev *dev, uint64_t bytes_per_s)
{
    atomic_store(&dev->bw_limit, bytes_per_s);
    pthread_mutex_lock(&dev->bw_lock);
    pthread_cond_broadcast(&dev->bw_cond); /* waiters re-read the limit */
    pthread_mutex_unlock(&dev->bw_lock);
}

uint64_t blk_bw_limit(const struct blk_dev *dev)
{
    return atomic_load(&((struct blk_dev *)dev)->bw_limit);
}

/* The batch the device serves next: the oldest one past the aging limit, else the head of
 * the highest class.  Under bw_lock. */
static struct bw_ticket *bw_next(struct blk_dev *dev, uint64_t now)
{
    struct bw_ticket *aged = NULL;
    for (unsigned c = 0; c < BLK_BW_CLASSES; c++) {
        struct bw_ticket *t = dev->bw_queue[c];
        if (t && now - t->queued_ns > BW_AGING_NS && (!aged || t->queued_ns < aged->queued_ns))
            aged = t;
    }
    if (aged)
        return aged;
    for (unsigned c = 0; c < BLK_BW_CLASSES - 1; c++)
        if (dev->bw_queue[c])
            return dev->bw_queue[c];
    struct bw_ticket *idle = dev->bw_queue[BLK_BW_CLASSES - 1];
    if (idle && now - dev->bw_last_busy_ns < BW_IDLE_GRACE_NS)
        return NULL; /* not idle long enough: the idle class waits (aging lets it in) */
    return idle;
}

static void bw_dequeue(struct blk_dev *dev, unsigned c, struct bw_ticket *t)
{
    struct bw_ticket **p = &dev->bw_queue[c];
    while (*p != t)
        p = &(*p)->next;
    *p = t->next;
}

static void sleep_until(uint64_t at)
{
    struct timespec until = {.tv_sec = (time_t)(at / 1000000000ull),
                             .tv_nsec = (long)(at % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
        ;
}

void blk_bwlimit_wait(struct blk_dev *dev, struct blk_req *const *reqs, unsigned n)
{
    if (!atomic_load(&dev->bw_limit))
        return;
    uint64_t bytes = 0;
    unsigned c = BLK_BW_CLASSES - 1;
    for (unsigned i = 0; i < n; i++) {
        if (reqs[i]->op != BLK_READ && reqs[i]->op != BLK_WRITE)
            continue;
        bytes += reqs[i]->len;
        unsigned r = class_rank(reqs[i]->prio);
        c = r < c ? r : c; /* a batch goes at its most urgent request's class */
    }
    if (!bytes)
        return;
    uint64_t start = clock_mono_ns(), service = 0;
    struct bw_ticket me = {.queued_ns = start};
    pthread_mutex_lock(&dev->bw_lock);
    struct bw_ticket **tail = &dev->bw_queue[c];
    while (*tail)
        tail = &(*tail)->next;
    *tail = &me;
    pthread_cond_broadcast(&dev->bw_cond);
    /* The batch holds the device one slice at a time and keeps its place in its class's
     * queue between slices: a more urgent batch gets in at the next slice boundary, as
     * the requests of a large write are split and scheduled on a real device. */
    while (bytes) {
        uint64_t bw = atomic_load(&dev->bw_limit), now = clock_mono_ns();
        if (!bw)
            break;
        if (dev->bw_busy_until_ns > now || bw_next(dev, now) != &me) {
            /* Wake when the device frees up, or a little later to look again (the batch
             * chosen next may belong to a thread that is not awake yet). */
            uint64_t at = dev->bw_busy_until_ns > now ? dev->bw_busy_until_ns : now + 1000000;
            struct timespec until = {.tv_sec = (time_t)(at / 1000000000ull),
                                     .tv_nsec = (long)(at % 1000000000ull)};
            pthread_cond_timedwait(&dev->bw_cond, &dev->bw_lock, &until);
            continue;
        }
        uint64_t slice = bytes < BW_SLICE_BYTES ? bytes : BW_SLICE_BYTES;
        uint64_t cost = (uint64_t)((double)slice * 1e9 / (double)bw);
        dev->bw_busy_until_ns = now + cost;
        if (c != BLK_BW_CLASSES - 1)
            dev->bw_last_busy_ns = now + cost;
        bytes -= slice;
        service += cost;
        pthread_mutex_unlock(&dev->bw_lock);
        sleep_until(now + cost);
        pthread_mutex_lock(&dev->bw_lock);
    }
    bw_dequeue(dev, c, &me);
    pthread_cond_broadcast(&dev->bw_cond);
    pthread_mutex_unlock(&dev->bw_lock);
    uint64_t took = clock_mono_ns() - start;
    atomic_fetch_add(&dev->bw_wait_ns, took);
    atomic_fetch_add(&dev->bw_class_wait_ns[c], took > service ? took - service : 0);
}
