/* checkpoint_merge.c: merged checkpoints - one daemon thread serves concurrent checkpoint
 * requests with one checkpoint, its I/O at high priority */
#ifndef F2FUSE_CORE_CHECKPOINT_MERGE_H
#define F2FUSE_CORE_CHECKPOINT_MERGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"
#include "core/checkpoint.h"
#include "f2fuse.h"

struct f2fuse;

#define CP_WAIT_BUCKETS   40 /* log2 buckets of microseconds: up to ~6 days */
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

/* checkpoint_merge.c: every checkpoint request goes through checkpoint_request, which
 * returns once a checkpoint that started after the call, with at least scope, has
 * committed (merged requests get the widest scope among them). */
int checkpoint_request(struct f2fuse *fs, enum blk_prio prio, enum cp_scope scope);
/* The same for a known caller (thread id; 0 = anonymous: timer, pressure, GC). */
int checkpoint_request_by(struct f2fuse *fs, enum blk_prio prio, uint32_t tid, enum cp_scope scope);
int checkpoint_merge_start(struct f2fuse *fs);
void checkpoint_merge_stop(struct f2fuse *fs);
void checkpoint_merge_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg);

#endif
