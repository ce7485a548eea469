/* One path for every checkpoint request (fsync, sync, the interval timer, memory and space
 * pressure), and the seed-000 mechanism on it: with checkpoint_merge, a daemon thread takes
 * every request pending when it starts and serves them all with one checkpoint; a request
 * that arrives during a checkpoint waits for the next one, and the daemon's checkpoint I/O
 * is high priority.  Without it, each requester checkpoints in its own thread with its own
 * I/O priority (the baseline: a low-priority requester holds cp_lock through a slow
 * checkpoint while everyone else waits).
 *
 * Counters: requests, checkpoints written, requests served per checkpoint (average, max),
 * and request wait (average, p99, max) from a log2 histogram of microseconds. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fs.h"

struct cp_request {
    struct cp_request *next;
    uint64_t queued_ns;
    int result;
    bool done;
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Writes one checkpoint with its I/O at prio; the caller holds no lock. */
static int checkpoint_run(struct f2fuse *fs, enum blk_prio prio)
{
    uint32_t n;
    uint32_t *orphans = inode_orphans(fs, &n);
    if (!orphans) { /* a checkpoint must not lose the orphan list: try again later */
        log_warn("checkpoint postponed: no memory for the orphan list");
        return -ENOMEM;
    }
    pthread_rwlock_wrlock(&fs->cp_lock);
    fs->io_prio = prio;
    /* after a failure, every later request hears EIO (the kernel's cp_error) */
    int err = __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE) ? -EIO : 0;
    if (!err)
        err = checkpoint_write(fs, false, orphans, orphans ? n : 0);
    int none = 0;
    if (err && __atomic_compare_exchange_n(&fs->write_error, &none, err, false, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE)) {
        log_err("checkpoint failed: %s; the mount turns read-only and the image keeps its "
                "last checkpoint", strerror(-err));
    }
    pthread_rwlock_unlock(&fs->cp_lock);
    free(orphans);
    return err;
}

static void record_wait(struct cp_control *cc, uint64_t ns)
{
    uint64_t us = ns / 1000;
    int bucket = 0;
    while (us >> bucket && bucket < CP_WAIT_BUCKETS - 1)
        bucket++;
    cc->wait_hist[bucket]++;
    cc->wait_total_ns += ns;
    if (ns > cc->wait_max_ns)
        cc->wait_max_ns = ns;
    cc->waits++;
}

static void *merge_thread(void *arg)
{
    struct f2fuse *fs = arg;
    struct cp_control *cc = &fs->cpc;
    pthread_mutex_lock(&cc->lock);
    for (;;) {
        while (!cc->head && !cc->stopping)
            pthread_cond_wait(&cc->wake, &cc->lock);
        if (!cc->head)
            break; /* stopping, nothing left to serve */
        struct cp_request *batch = cc->head;
        cc->head = cc->tail = NULL;
        pthread_mutex_unlock(&cc->lock);

        int result = checkpoint_run(fs, BLK_PRIO_HIGH);

        pthread_mutex_lock(&cc->lock);
        uint64_t served = 0, done_ns = now_ns();
        for (struct cp_request *r = batch, *next; r; r = next) {
            next = r->next; /* r lives on its requester's stack: read next first */
            record_wait(cc, done_ns - r->queued_ns);
            r->result = result;
            r->done = true;
            served++;
        }
        cc->checkpoints++;
        cc->served_total += served;
        if (served > cc->served_max)
            cc->served_max = served;
        pthread_cond_broadcast(&cc->done);
    }
    pthread_mutex_unlock(&cc->lock);
    return NULL;
}

int checkpoint_request(struct f2fuse *fs, enum blk_prio prio)
{
    if (!fs->seg)
        return 0;
    struct cp_control *cc = &fs->cpc;
    if (!cc->running) {
        uint64_t start = now_ns();
        int err = checkpoint_run(fs, prio); /* the baseline: at the requester's priority */
        pthread_mutex_lock(&cc->lock);
        cc->requests++;
        cc->checkpoints++;
        cc->served_total++;
        if (cc->served_max < 1)
            cc->served_max = 1;
        record_wait(cc, now_ns() - start);
        pthread_mutex_unlock(&cc->lock);
        return err;
    }
    struct cp_request req = {.queued_ns = now_ns()};
    pthread_mutex_lock(&cc->lock);
    cc->requests++;
    if (cc->tail)
        cc->tail->next = &req;
    else
        cc->head = &req;
    cc->tail = &req;
    pthread_cond_signal(&cc->wake);
    while (!req.done)
        pthread_cond_wait(&cc->done, &cc->lock);
    pthread_mutex_unlock(&cc->lock);
    return req.result;
}

int checkpoint_merge_start(struct f2fuse *fs)
{
    struct cp_control *cc = &fs->cpc;
    if (!fs->opts.checkpoint_merge)
        return 0;
    int err = -pthread_create(&cc->thread, NULL, merge_thread, fs);
    cc->running = !err;
    return err;
}

void checkpoint_merge_stop(struct f2fuse *fs)
{
    struct cp_control *cc = &fs->cpc;
    if (!cc->running)
        return;
    pthread_mutex_lock(&cc->lock);
    cc->stopping = true;
    pthread_cond_signal(&cc->wake);
    pthread_mutex_unlock(&cc->lock);
    pthread_join(cc->thread, NULL); /* serves what is queued, then exits */
    cc->running = false;
}

void checkpoint_merge_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg)
{
    struct cp_control *cc = &fs->cpc;
    pthread_mutex_lock(&cc->lock);
    uint64_t requests = cc->requests, cps = cc->checkpoints, served = cc->served_total;
    uint64_t served_max = cc->served_max, waits = cc->waits, total = cc->wait_total_ns;
    uint64_t max = cc->wait_max_ns, hist[CP_WAIT_BUCKETS];
    memcpy(hist, cc->wait_hist, sizeof(hist));
    pthread_mutex_unlock(&cc->lock);
    /* p99: the upper edge of the bucket holding the 99th percentile wait. */
    uint64_t p99_us = 0, seen = 0, target = waits - waits / 100;
    for (int b = 0; b < CP_WAIT_BUCKETS && waits; b++) {
        seen += hist[b];
        if (seen >= target) {
            p99_us = b ? 1ull << b : 1;
            break;
        }
    }
    fn(arg, "checkpoint.merge", fs->opts.checkpoint_merge);
    fn(arg, "checkpoint.requests", requests);
    fn(arg, "checkpoint.written", cps);
    fn(arg, "checkpoint.served_per_checkpoint_x100", cps ? served * 100 / cps : 0);
    fn(arg, "checkpoint.served_max", served_max);
    fn(arg, "checkpoint.wait_avg_us", waits ? total / waits / 1000 : 0);
    fn(arg, "checkpoint.wait_p99_us", p99_us);
    fn(arg, "checkpoint.wait_max_us", max / 1000);
}
