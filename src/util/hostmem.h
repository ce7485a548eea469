/* What the host and this process's memory cgroup have to spare: MemAvailable from
 * /proc/meminfo, the memory cgroup's limits and usage (cgroup v2: memory.max, memory.high,
 * memory.current, memory.stat; cgroup v1: memory.limit_in_bytes, memory.usage_in_bytes and
 * the hierarchical limit in memory.stat), and PSI triggers (Documentation/accounting/psi.rst)
 * that wake a poll() when tasks stall on memory.  Every path is taken under root ("" on a
 * real system; a directory tree in the unit tests). */
#ifndef F2FUSE_UTIL_HOSTMEM_H
#define F2FUSE_UTIL_HOSTMEM_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HOSTMEM_NO_LIMIT UINT64_MAX

/* /proc/meminfo: MemTotal and MemAvailable in bytes.  0 or -errno. */
int hostmem_meminfo(const char *root, uint64_t *total, uint64_t *available);

/* This process's memory cgroup, found once: its directory and hierarchy version. */
struct cgroup_dir {
    char path[PATH_MAX];
    int version; /* 2 (unified) or 1 (the v1 memory controller) */
};

/* Finds the cgroup of /proc/self/cgroup that the memory controller governs: the unified
 * hierarchy when it has memory.current there, else the v1 memory hierarchy.  0, or
 * -ENOENT when there is none (no cgroup file system, or no memory controller). */
int cgroup_memory_find(const char *root, struct cgroup_dir *out);

struct cgroup_memory {
    uint64_t limit;       /* the tightest limit over the cgroup and its ancestors, or
                           * HOSTMEM_NO_LIMIT */
    const char *limit_is; /* which one it is: "memory.max", "memory.high", ... */
    uint64_t current;     /* charged to the cgroup now */
    uint64_t file;        /* of which file pages (the kernel may reclaim them) */
};

/* Reads the cgroup's limits and usage.  0 or -errno. */
int cgroup_memory_read(const struct cgroup_dir *cg, struct cgroup_memory *out);

/* The cgroup's own memory.pressure file (v2 only), for psi_trigger_open. */
void cgroup_pressure_path(const struct cgroup_dir *cg, char *buf, size_t len);

/* Opens a PSI file (/proc/pressure/memory, a cgroup's memory.pressure) and arms a trigger:
 * "some" stall of stall_us within each window_us.  A window the kernel refuses to an
 * unprivileged process is retried as a multiple of 2 s.  Returns the fd to poll() for
 * POLLPRI, or -errno (-ENOENT: no PSI here). */
int psi_trigger_open(const char *path, uint64_t stall_us, uint64_t window_us);

#endif
