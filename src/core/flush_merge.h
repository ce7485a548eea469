/* flush_merge.c: concurrent fast fsyncs share device flushes (f2fs's flush_merge) */
#ifndef F2FUSE_CORE_FLUSH_MERGE_H
#define F2FUSE_CORE_FLUSH_MERGE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"

struct f2fuse;

struct flush_merge {
    pthread_mutex_t lock;
    pthread_cond_t done;
    bool running;                /* a flush is on the device */
    uint64_t started, completed; /* flushes numbered as they start */
    uint64_t last_ok;            /* the latest flush that succeeded */
    int last_err;
    atomic_uint_fast64_t requests, issued;
};

void flush_merge_init(struct flush_merge *fm);
void flush_merge_destroy(struct flush_merge *fm);
/* Returns once a device flush that began after the call has completed (0), or -errno. */
int flush_merge_wait(struct f2fuse *fs, enum blk_prio prio);

#endif
