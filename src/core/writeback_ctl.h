/* Writeback control, the pure part (bandwidth × time, dirty_background_time): dirty
 * thresholds, the decision to start background writeback, writer throttling and the write
 * bandwidth estimate.  Nothing here reads a clock or takes a lock — every function gets the
 * time and counts it needs — so the unit tests drive it with a fake clock.  writeback.c
 * runs it against the mount. */
#ifndef F2FUSE_CORE_WRITEBACK_CTL_H
#define F2FUSE_CORE_WRITEBACK_CTL_H

#include <stdbool.h>
#include <stdint.h>

/* The tunables, as the kernel's vm.dirty_* and the bdi's dirty_background_time. */
struct wb_tunables {
    uint64_t dirty_bytes;            /* hard limit in bytes; 0 = dirty_ratio applies */
    unsigned dirty_ratio;            /* hard limit in % of the cache budget */
    uint64_t dirty_background_bytes; /* 0 = dirty_background_ratio applies */
    unsigned dirty_background_ratio; /* % of the cache budget */
    unsigned dirty_expire_ms;        /* data dirty longer than this is written (0 = never) */
    unsigned writeback_interval_ms;  /* the flusher's period (0 = only when kicked) */
    unsigned dirty_background_time;  /* ms of estimated bandwidth; 0 = off */
};

/* Effective limits in bytes. */
struct wb_limits {
    uint64_t background; /* background writeback above this */
    uint64_t hard;       /* writers wait above this; never above the cache budget */
    uint64_t bg_time;    /* bandwidth × dirty_background_time (0 = off) */
};

/* base = the cache's size now (cache_size, or what cache_size=auto chose): the most dirty
 * data could ever take. */
void wb_limits_compute(const struct wb_tunables *t, uint64_t base, uint64_t bw_bytes_per_s,
                       struct wb_limits *out);

/* Why background writeback runs.  The order is the order of the checks. */
enum wb_reason {
    WB_NONE,
    WB_LIMIT,      /* writers are waiting at the hard limit */
    WB_BACKGROUND, /* dirty > dirty_background_{bytes,ratio} */
    WB_BG_TIME,    /* dirty > bandwidth × dirty_background_time */
    WB_EXPIRE,     /* the oldest dirty data is older than dirty_expire_ms */
    WB_SYNC,       /* a sync (the checkpoint timer) wants data dirtied before it written */
    WB_REASONS
};
const char *wb_reason_name(enum wb_reason r);

/* Should writeback run now (and go on running)?  oldest_age_ns: age of the oldest dirty
 * data (ignored when dirty == 0). */
enum wb_reason wb_trigger(const struct wb_limits *l, uint64_t dirty, bool writers_waiting,
                          uint64_t oldest_age_ns, unsigned expire_ms);

/* Smooth throttling, after the kernel's balance_dirty_pages: below the midpoint between the
 * background and the hard limit a writer runs free; above it, a writer that just dirtied
 * `bytes` pauses so that writers together dirty at bw × (distance to the hard limit /
 * distance of the midpoint to it), which converges on a dirty level under the limit
 * instead of hitting it.  At or above the hard limit: WB_MAX_PAUSE_NS (the caller waits
 * for the flusher instead).  Pauses are capped at WB_MAX_PAUSE_NS. */
#define WB_MAX_PAUSE_NS 200000000ull
uint64_t wb_throttle_pause_ns(const struct wb_limits *l, uint64_t dirty, uint64_t bw,
                              uint64_t bytes);

/* Write bandwidth estimate.  It counts only the time writeback I/O is actually in flight,
 * so idle periods (nothing dirty, a paused producer) neither drag it down nor age it; short
 * latency-bound writes weigh by their (short) duration.  Samples close every
 * WB_BW_WINDOW_NS of busy time and move the estimate towards them with a time constant of
 * WB_BW_TAU_NS of busy time; the first sample replaces the initial guess outright. */
#define WB_BW_INIT      (100ull << 20) /* bytes/s before anything was measured (the kernel's too) */
#define WB_BW_WINDOW_NS 100000000ull
#define WB_BW_TAU_NS    1000000000ull
struct wb_bw_est {
    uint64_t bw;        /* bytes/s */
    uint64_t acc_bytes; /* the open sample */
    uint64_t acc_ns;
    uint64_t samples;
};
void wb_bw_init(struct wb_bw_est *e);
/* bytes took busy_ns of writeback I/O (submit to completion). */
void wb_bw_account(struct wb_bw_est *e, uint64_t bytes, uint64_t busy_ns);

/* Pages the flusher writes in one go: ~25 ms of device time at the estimate, between 64
 * and 1024 pages (256 KiB .. 4 MiB).  A checkpoint waits for the chunk in flight before its
 * commit, whatever its priority, so this bounds how long background writeback can hold up
 * a high-priority checkpoint (100 ms chunks made the merged checkpoints' p99 ~90 ms on a
 * 50 MB/s device); the flusher goes on with the next chunk at once while data is due. */
unsigned wb_chunk_pages(uint64_t bw);

#endif
