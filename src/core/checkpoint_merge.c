/* One path for every checkpoint request (fsync, sync, the interval timer, memory and space
 * pressure), and merged checkpoints with prioritised I/O on it (f2fs's checkpoint=merge):
 * with checkpoint_merge, a daemon thread takes every request pending when it starts and
 * serves them all with one checkpoint; a request that arrives during a checkpoint waits for
 * the next one, and the daemon's checkpoint I/O is high priority.  Without it, each
 * requester checkpoints in its own thread with its own I/O priority (the baseline: a
 * low-priority requester holds cp_lock through a slow checkpoint while everyone else
 * waits).
 *
 * Batching (checkpoint_batch_us): two callers that fsync in turn would otherwise alternate -
 * each request arrives while the other's checkpoint runs and gets the next one to itself.
 * As jbd2 does for journal commits, the daemon waits a little before a checkpoint for the
 * callers it saw recently that have not asked yet: no longer than a checkpoint takes on
 * average, capped by checkpoint_batch_us, and not at all for a lone caller.
 *
 * Counters: requests, checkpoints written, requests served per checkpoint (average, max),
 * request wait (average, p99, max) from a log2 histogram of microseconds, and the batching
 * waits. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/checkpoint_merge.h"
#include "core/context.h"
#include "core/namei.h"
#include "util/clock.h"
#include "util/log.h"

struct cp_request {
    struct cp_request *next;
    uint64_t queued_ns;
    uint32_t tid; /* the caller's thread id, 0 = anonymous */
    enum cp_scope scope;
    int result;
    bool done;
};

/* Writes one checkpoint with its I/O at prio; the caller holds no lock. */
static int checkpoint_run(struct f2fuse *fs, enum blk_prio prio, enum cp_scope scope)
{
    uint32_t n;
    pthread_rwlock_wrlock(&fs->cp_lock);
    /* The orphans as this checkpoint commits them: listed before the lock, an unlink in
     * between went into the checkpoint without its orphan (an inode nothing names, fsck's
     * "NID unreachable" after a kill -9: test_full_device's full_family, one run in three
     * once cache_size=auto changed its timing), and a FORGET in between left a freed one
     * listed. */
    uint32_t *orphans = inode_orphans(fs, &n);
    if (!orphans) { /* a checkpoint must not lose the orphan list: try again later */
        pthread_rwlock_unlock(&fs->cp_lock);
        log_warn("checkpoint postponed: no memory for the orphan list");
        return -ENOMEM;
    }
    fs->io_prio = prio;
    /* after a failure, every later request hears EIO (the kernel's cp_error) */
    int err = __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE) ? -EIO : 0;
    if (!err)
        err = checkpoint_write(fs, false, scope, orphans, orphans ? n : 0);
    if (err && fs_first_write_error(fs, err))
        log_err("checkpoint failed: %s; the mount turns read-only and the image keeps its "
                "last checkpoint",
                strerror(-err));
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

/* Remembers that caller tid asked (or was served) at now.  Under cc->lock. */
static void note_caller(struct cp_control *cc, uint32_t tid, uint64_t now)
{
    if (!tid)
        return;
    int slot = 0;
    for (int i = 0; i < CP_RECENT_CALLERS; i++) {
        if (cc->recent[i].tid == tid) {
            cc->recent[i].last_ns = now;
            return;
        }
        if (cc->recent[i].last_ns < cc->recent[slot].last_ns)
            slot = i; /* the longest idle one makes room */
    }
    cc->recent[slot].tid = tid;
    cc->recent[slot].last_ns = now;
}

static unsigned queued(const struct cp_control *cc)
{
    unsigned n = 0;
    for (const struct cp_request *r = cc->head; r; r = r->next)
        n++;
    return n;
}

/* True while a caller seen within horizon_ns has no request queued: it is likely to ask
 * again soon.  Under cc->lock. */
static bool caller_expected(const struct cp_control *cc, uint64_t now, uint64_t horizon_ns)
{
    for (int i = 0; i < CP_RECENT_CALLERS; i++) {
        if (!cc->recent[i].tid || now - cc->recent[i].last_ns > horizon_ns)
            continue;
        bool asked = false;
        for (const struct cp_request *r = cc->head; r && !asked; r = r->next)
            asked = r->tid == cc->recent[i].tid;
        if (!asked)
            return true;
    }
    return false;
}

/* Before a checkpoint: waits for the recent callers that have not asked yet, at most an
 * average checkpoint's time (capped by checkpoint_batch_us) after the oldest request
 * queued.  A caller that comes back within that time shares this checkpoint instead of
 * getting the next one to itself.  Under cc->lock; returns with it held. */
static void batch_wait(struct f2fuse *fs, struct cp_control *cc)
{
    uint64_t cap = (uint64_t)fs->opts.checkpoint_batch_us * 1000;
    uint64_t window = cc->cp_avg_ns < cap ? cc->cp_avg_ns : cap;
    if (!window || cc->stopping)
        return;
    /* A caller served up to this long ago counts as active: it is thinking between
     * requests (a create, a write) rather than gone. */
    uint64_t horizon = 2 * window + 2000000;
    uint64_t deadline = cc->head->queued_ns + window, start = clock_mono_ns(), now = start;
    unsigned before = queued(cc);
    bool waited = false;
    while (!cc->stopping && now < deadline && caller_expected(cc, now, horizon)) {
        struct timespec until = {.tv_sec = (time_t)(deadline / 1000000000u),
                                 .tv_nsec = (long)(deadline % 1000000000u)};
        waited = true;
        pthread_cond_timedwait(&cc->wake, &cc->lock, &until);
        now = clock_mono_ns();
    }
    if (waited) {
        cc->batch_waits++;
        cc->batch_wait_total_ns += now - start;
        cc->batch_joined += queued(cc) - before;
    }
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
        batch_wait(fs, cc);
        struct cp_request *batch = cc->head;
        cc->head = cc->tail = NULL;
        enum cp_scope scope = CP_METADATA;
        for (const struct cp_request *r = batch; r; r = r->next)
            if (r->scope == CP_ALL_DATA)
                scope = CP_ALL_DATA;
        pthread_mutex_unlock(&cc->lock);

        uint64_t started = clock_mono_ns();
        int result = checkpoint_run(fs, BLK_PRIO_HIGH, scope);

        pthread_mutex_lock(&cc->lock);
        uint64_t served = 0, done_ns = clock_mono_ns(), took = done_ns - started;
        cc->cp_avg_ns = cc->cp_avg_ns ? (7 * cc->cp_avg_ns + took) / 8 : took;
        for (struct cp_request *r = batch, *next; r; r = next) {
            next = r->next; /* r lives on its requester's stack: read next first */
            record_wait(cc, done_ns - r->queued_ns);
            note_caller(cc, r->tid, done_ns);
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

int checkpoint_request(struct f2fuse *fs, enum blk_prio prio, enum cp_scope scope)
{
    return checkpoint_request_by(fs, prio, 0, scope);
}

int checkpoint_request_by(struct f2fuse *fs, enum blk_prio prio, uint32_t tid, enum cp_scope scope)
{
    if (!fs->seg)
        return 0;
    struct cp_control *cc = &fs->cpc;
    if (!cc->running) {
        uint64_t start = clock_mono_ns();
        int err = checkpoint_run(fs, prio, scope); /* the baseline: the requester's priority */
        pthread_mutex_lock(&cc->lock);
        cc->requests++;
        cc->checkpoints++;
        cc->served_total++;
        if (cc->served_max < 1)
            cc->served_max = 1;
        record_wait(cc, clock_mono_ns() - start);
        pthread_mutex_unlock(&cc->lock);
        return err;
    }
    struct cp_request req = {.queued_ns = clock_mono_ns(), .tid = tid, .scope = scope};
    pthread_mutex_lock(&cc->lock);
    cc->requests++;
    note_caller(cc, tid, req.queued_ns);
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
    uint64_t bwaits = cc->batch_waits, btotal = cc->batch_wait_total_ns;
    uint64_t bjoined = cc->batch_joined, cp_avg = cc->cp_avg_ns;
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
    fn(arg, "checkpoint.batch_us", fs->opts.checkpoint_batch_us);
    fn(arg, "checkpoint.batch_waits", bwaits);
    fn(arg, "checkpoint.batch_wait_avg_us", bwaits ? btotal / bwaits / 1000 : 0);
    fn(arg, "checkpoint.batch_joined", bjoined);
    fn(arg, "checkpoint.merged_avg_us", cp_avg / 1000);
}
