/* The page cache's size (cachesize.c): cache_size=auto sizes it from what the host and the
 * daemon's memory cgroup have to spare (MemAvailable; memory.max, memory.high), between
 * cache_min and cache_max, and gives memory back when tasks stall on memory (PSI triggers,
 * or a periodic MemAvailable check where there is no PSI).  cache_size=BYTES keeps it fixed
 * (only cut to what the cgroup allows).  The writeback limits follow the size. */
#ifndef F2FUSE_CORE_CACHESIZE_H
#define F2FUSE_CORE_CACHESIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "util/stats.h"

struct f2fuse;

/* What the target is computed from (all bytes). */
struct cache_inputs {
    uint64_t host_available; /* MemAvailable; 0 when unknown */
    uint64_t cg_limit;       /* the cgroup's tightest limit, or HOSTMEM_NO_LIMIT */
    uint64_t cg_current;     /* charged to the cgroup */
    uint64_t cg_file;        /* of which file pages (reclaimable) */
    uint64_t own;            /* the cache's resident memory */
    uint64_t pressure_cap;   /* after memory pressure: at most this; UINT64_MAX: none */
    uint64_t fixed;          /* cache_size=BYTES, or 0 for auto */
    uint64_t min, max;       /* cache_min, cache_max (max 0: no ceiling) */
};

/* What decided the target. */
enum cache_bound {
    CACHE_BOUND_HOST,         /* half of what the host could give (MemAvailable + own) */
    CACHE_BOUND_CGROUP,       /* the cgroup's limit less others' use and headroom */
    CACHE_BOUND_PRESSURE,     /* cut after memory pressure */
    CACHE_BOUND_MIN,          /* raised to cache_min */
    CACHE_BOUND_MAX,          /* cut to cache_max */
    CACHE_BOUND_FIXED,        /* cache_size=BYTES */
    CACHE_BOUND_CGROUP_FLOOR, /* the cgroup leaves less than cache_min (or cache_size): cut */
};

/* The cache size for these inputs (a multiple of 1 MiB, at least PCACHE_MIN_BYTES);
 * *why says what bound it.  No clock, no file: unit-tested. */
uint64_t cachesize_target(const struct cache_inputs *in, enum cache_bound *why);
/* Where the kernel has no PSI, the periodic check's pressure signal: MemAvailable under 5 %
 * of MemTotal (0 when unknown), or others' and the daemon's anonymous memory within 1/8 of
 * the cgroup's limit.  Pure, unit-tested. */
bool cachesize_memory_low(uint64_t host_total, uint64_t host_available,
                          const struct cache_inputs *in);

/* Before the page cache exists: checks the options (cache_max below cache_min: -EINVAL,
 * with a message), finds the cgroup, and returns the first size in *budget. */
int cachesize_init(struct f2fuse *fs, uint64_t *budget);
/* Once the mount is up: the thread that follows memory (and cleans dirty pages first when
 * shrinking a read-write mount).  Stopped before anything it asks (writeback, checkpoints)
 * stops. */
int cachesize_start(struct f2fuse *fs);
void cachesize_stop(struct f2fuse *fs);
void cachesize_destroy(struct f2fuse *fs);
/* cache_size, cache_min or cache_max changed on the running mount (f2fuse_tune). */
void cachesize_retune(struct f2fuse *fs);
/* "cache.*": target, mode, limits seen, pressure events, shrinks. */
void cachesize_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

#endif
