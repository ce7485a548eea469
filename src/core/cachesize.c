/* The page cache's size: cache_size=auto (cachesize.h).
 *
 * As the kernel's page cache, f2fuse's grows into memory nobody uses and gives it back when
 * someone needs it.  Unlike the kernel's, its memory is anonymous: the kernel cannot
 * reclaim it, so f2fuse must, and early.  Hence:
 *   - a target of half of what the host could give it (MemAvailable plus its own use: the
 *     sum stays put while it grows, so the target does not chase itself), the other half
 *     left to the kernel's page cache (which holds the file data above FUSE) and others;
 *   - under a memory cgroup, the limit (memory.max, memory.high, or v1's limit) less what
 *     others in it use and a headroom of a quarter, so that it is never the one OOM-killed;
 *   - on memory pressure (a PSI trigger: tasks stalled 150 ms within 1 s, host-wide and in
 *     its cgroup; without PSI, MemAvailable under 5 % or the cgroup within 1/8 of its
 *     limit), a cut to 3/4 of what it holds, again at every further event, growing back by
 *     1/8 a second once 10 s passed calmly;
 *   - shrinking evicts clean pages in batches; dirty pages are written first (the flusher
 *     follows the smaller limits, a checkpoint writes the rest), then the memory goes back
 *     to the system.
 * One thread does it all, woken by the triggers, by f2fuse set, or every second. */
#include "core/cachesize.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/checkpoint_merge.h"
#include "core/context.h"
#include "core/writeback.h"
#include "util/clock.h"
#include "util/hostmem.h"
#include "util/log.h"

#define MIB             (1ull << 20)
#define AUTO_UNKNOWN    (64 * MIB) /* the target when the host says nothing */
#define CG_HEADROOM_MIN (32 * MIB)
#define CHECK_MS        1000                 /* the periodic check */
#define CALM_NS         (10ull * NS_PER_SEC) /* pressure-free time before growing back */
#define PSI_STALL_US    150000               /* a trigger: 150 ms of stall ... */
#define PSI_WINDOW_US   1000000              /* ... within 1 s */
#define FALLBACK_GAP_NS (2ull * NS_PER_SEC)  /* polled pressure: one event per 2 s */
#define RECLAIM_BATCH   1024u                /* pages evicted per hold of the cache lock */

struct cache_sizer {
    pthread_t thread;
    bool running;
    atomic_bool stopping;
    int wake_fd;   /* eventfd: stop, retune */
    int psi_fd[2]; /* host-wide and the cgroup's trigger, or -1 */
    struct cgroup_dir cg;
    bool have_cg;
    pthread_mutex_t lock; /* the fields below: the thread writes, stats read */
    uint64_t target;
    enum cache_bound why;
    uint64_t pressure_cap, last_pressure_ns;
    uint64_t host_available, cg_limit;
    const char *cg_limit_is;
    uint64_t psi_events, polled_events, shrinks, grows, cleanings;
    unsigned psi_armed;
    bool floor_logged;
};

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

uint64_t cachesize_target(const struct cache_inputs *in, enum cache_bound *why)
{
    /* The cgroup's room: its limit less what others in it use (file pages excepted: the
     * kernel takes them back first) and a headroom for the daemon's own other memory and
     * for the moment between a rise and the next check. */
    uint64_t cg = UINT64_MAX;
    if (in->cg_limit != HOSTMEM_NO_LIMIT) {
        uint64_t anon = in->cg_current > in->cg_file ? in->cg_current - in->cg_file : 0;
        uint64_t others = anon > in->own ? anon - in->own : 0;
        uint64_t headroom = in->cg_limit / 4 > CG_HEADROOM_MIN ? in->cg_limit / 4 : CG_HEADROOM_MIN;
        cg = in->cg_limit > others + headroom ? in->cg_limit - others - headroom : 0;
    }
    uint64_t t;
    if (in->fixed) {
        t = in->fixed;
        *why = CACHE_BOUND_FIXED;
    } else {
        t = in->host_available ? (in->host_available + in->own) / 2 : AUTO_UNKNOWN;
        *why = CACHE_BOUND_HOST;
        if (in->pressure_cap < t) {
            t = in->pressure_cap;
            *why = CACHE_BOUND_PRESSURE;
        }
        if (in->max && in->max < t) {
            t = in->max;
            *why = CACHE_BOUND_MAX;
        }
        if (cg < t) {
            t = cg;
            *why = CACHE_BOUND_CGROUP;
        }
        if (t < in->min) {
            t = in->min;
            *why = CACHE_BOUND_MIN;
        }
    }
    /* Never past the cgroup's room, not even for cache_min or a fixed size: an OOM kill
     * loses every dirty page. */
    if (cg < t) {
        t = cg;
        *why = CACHE_BOUND_CGROUP_FLOOR;
    }
    t &= ~(MIB - 1);
    return t < PCACHE_MIN_BYTES ? PCACHE_MIN_BYTES : t;
}

static void wake(struct cache_sizer *z)
{
    uint64_t one = 1;
    if (write(z->wake_fd, &one, sizeof(one)) < 0) {
        /* a pending wakeup already: nothing lost */
    }
}

/* The inputs as they are now.  Reads /proc and the cgroup's files (a few µs). */
static void gather(struct f2fuse *fs, struct cache_inputs *in)
{
    struct cache_sizer *z = fs->sizer;
    pthread_mutex_lock(&fs->tune_lock);
    in->fixed = fs->opts.cache_size;
    in->min = fs->opts.cache_min;
    in->max = fs->opts.cache_max;
    pthread_mutex_unlock(&fs->tune_lock);
    uint64_t total;
    if (hostmem_meminfo("", &total, &in->host_available) != 0)
        in->host_available = 0;
    in->cg_limit = HOSTMEM_NO_LIMIT;
    struct cgroup_memory m;
    if (z->have_cg && cgroup_memory_read(&z->cg, &m) == 0) {
        in->cg_limit = m.limit;
        in->cg_current = m.current;
        in->cg_file = m.file;
        pthread_mutex_lock(&z->lock);
        z->cg_limit_is = m.limit_is;
        pthread_mutex_unlock(&z->lock);
    }
    in->own = fs->cache ? pcache_resident_bytes(fs->cache) : 0;
    pthread_mutex_lock(&z->lock);
    in->pressure_cap = z->pressure_cap;
    z->host_available = in->host_available;
    z->cg_limit = in->cg_limit;
    pthread_mutex_unlock(&z->lock);
}

bool cachesize_memory_low(uint64_t host_total, uint64_t host_available,
                          const struct cache_inputs *in)
{
    bool host_low = host_total && host_available < host_total / 20;
    uint64_t anon = in->cg_current > in->cg_file ? in->cg_current - in->cg_file : 0;
    bool cg_low = in->cg_limit != HOSTMEM_NO_LIMIT && anon > in->cg_limit - in->cg_limit / 8;
    return host_low || cg_low;
}

/* Without PSI: too little memory left is the pressure signal. */
static bool polled_pressure(const struct cache_inputs *in)
{
    uint64_t total, avail;
    if (hostmem_meminfo("", &total, &avail) != 0)
        total = avail = 0;
    return cachesize_memory_low(total, avail, in);
}

static void log_floor(struct cache_sizer *z, const struct cache_inputs *in, uint64_t target)
{
    uint64_t wanted = in->fixed ? in->fixed : in->min;
    log_warn("cache: the memory cgroup's %s of %lluM leaves room for a %lluM cache only, below "
             "%s=%lluM: cut to %lluM so that the daemon is not OOM-killed",
             z->cg_limit_is ? z->cg_limit_is : "limit", (unsigned long long)(in->cg_limit / MIB),
             (unsigned long long)(target / MIB), in->fixed ? "cache_size" : "cache_min",
             (unsigned long long)(wanted / MIB), (unsigned long long)(target / MIB));
}

/* Takes the cache to its new size; a smaller one is reached a batch at a time, dirty pages
 * written first, and the memory given back.  Small moves (MemAvailable wanders as others
 * work) wait until they add up, unless pressure or the cgroup asks. */
static void apply(struct f2fuse *fs, uint64_t target, bool urgent)
{
    struct cache_sizer *z = fs->sizer;
    uint64_t now = pcache_budget(fs->cache);
    uint64_t diff = target > now ? target - now : now - target;
    uint64_t slack = now / 32 > 4 * MIB ? now / 32 : 4 * MIB;
    if (target == now || (!urgent && diff < slack))
        return;
    pcache_set_budget(fs->cache, target);
    if (fs->wb)
        writeback_resized(fs); /* the dirty limits are ratios of the size */
    if (target > now) {
        pthread_mutex_lock(&z->lock);
        z->grows++;
        pthread_mutex_unlock(&z->lock);
        return;
    }
    while (!atomic_load(&z->stopping) && pcache_reclaim_step(fs->cache, RECLAIM_BATCH) > 0)
        ;
    if (fs->seg && !atomic_load(&z->stopping) && pcache_over_budget(fs->cache)) {
        /* Dirty pages hold it above: write them (a checkpoint writes data and nodes). */
        pthread_mutex_lock(&z->lock);
        z->cleanings++;
        pthread_mutex_unlock(&z->lock);
        checkpoint_request(fs, BLK_PRIO_LOW, CP_ALL_DATA);
        while (!atomic_load(&z->stopping) && pcache_reclaim_step(fs->cache, RECLAIM_BATCH) > 0)
            ;
    }
    pcache_give_back(fs->cache);
    pthread_mutex_lock(&z->lock);
    z->shrinks++;
    pthread_mutex_unlock(&z->lock);
}

/* One round: note pressure, compute the target, take the cache there. */
static void step(struct f2fuse *fs, bool psi_fired)
{
    struct cache_sizer *z = fs->sizer;
    struct cache_inputs in;
    gather(fs, &in);
    uint64_t now = clock_mono_ns();
    if (!in.fixed) {
        bool polled = z->psi_fd[0] < 0 && z->psi_fd[1] < 0 &&
                      now - z->last_pressure_ns >= FALLBACK_GAP_NS && polled_pressure(&in);
        pthread_mutex_lock(&z->lock);
        if (psi_fired || polled) {
            uint64_t held = min_u64(pcache_used_bytes(fs->cache), pcache_budget(fs->cache));
            uint64_t cap = held / 4 * 3;
            z->pressure_cap = cap > in.min ? cap : in.min;
            z->last_pressure_ns = now;
            z->psi_events += psi_fired;
            z->polled_events += polled;
        } else if (z->pressure_cap != UINT64_MAX && now - z->last_pressure_ns >= CALM_NS) {
            z->pressure_cap += z->pressure_cap / 8 + MIB;
        }
        in.pressure_cap = z->pressure_cap;
        pthread_mutex_unlock(&z->lock);
    }
    enum cache_bound why;
    uint64_t target = cachesize_target(&in, &why);
    if (why != CACHE_BOUND_PRESSURE && in.pressure_cap != UINT64_MAX && in.pressure_cap > target) {
        pthread_mutex_lock(&z->lock);
        z->pressure_cap = UINT64_MAX; /* grown back past what the rest allows: over */
        pthread_mutex_unlock(&z->lock);
    }
    pthread_mutex_lock(&z->lock);
    bool log = why == CACHE_BOUND_CGROUP_FLOOR && !z->floor_logged;
    z->floor_logged = why == CACHE_BOUND_CGROUP_FLOOR;
    z->target = target;
    z->why = why;
    pthread_mutex_unlock(&z->lock);
    if (log)
        log_floor(z, &in, target);
    apply(fs, target, why != CACHE_BOUND_HOST);
    pcache_give_back_idle(fs->cache); /* buffers no page needed for a whole round */
}

static void *sizer_main(void *arg)
{
    struct f2fuse *fs = arg;
    struct cache_sizer *z = fs->sizer;
    while (!atomic_load(&z->stopping)) {
        struct pollfd pfd[3] = {{.fd = z->wake_fd, .events = POLLIN}};
        nfds_t n = 1;
        for (int i = 0; i < 2; i++)
            if (z->psi_fd[i] >= 0)
                pfd[n++] = (struct pollfd){.fd = z->psi_fd[i], .events = POLLPRI};
        int r = poll(pfd, n, CHECK_MS);
        if (atomic_load(&z->stopping))
            break;
        bool fired = false;
        if (r > 0) {
            uint64_t v;
            if ((pfd[0].revents & POLLIN) && read(z->wake_fd, &v, sizeof(v)) < 0) {
                /* drained by a concurrent read: nothing to do */
            }
            for (nfds_t i = 1; i < n; i++) {
                fired |= (pfd[i].revents & POLLPRI) != 0;
                if (pfd[i].revents & (POLLERR | POLLNVAL)) { /* the cgroup went away */
                    for (int k = 0; k < 2; k++)
                        if (z->psi_fd[k] == pfd[i].fd) {
                            close(z->psi_fd[k]);
                            z->psi_fd[k] = -1;
                            pthread_mutex_lock(&z->lock);
                            z->psi_armed--;
                            pthread_mutex_unlock(&z->lock);
                        }
                }
            }
        }
        step(fs, fired);
    }
    return NULL;
}

int cachesize_init(struct f2fuse *fs, uint64_t *budget)
{
    const struct f2fuse_options *o = &fs->opts;
    if (!o->cache_size && o->cache_max && o->cache_max < o->cache_min) {
        log_err("cache_max=%lluM is below cache_min=%lluM",
                (unsigned long long)(o->cache_max / MIB), (unsigned long long)(o->cache_min / MIB));
        return -EINVAL;
    }
    struct cache_sizer *z = calloc(1, sizeof(*z));
    if (!z)
        return -ENOMEM;
    z->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (z->wake_fd < 0) {
        int err = -errno;
        free(z);
        return err;
    }
    z->psi_fd[0] = z->psi_fd[1] = -1;
    z->pressure_cap = UINT64_MAX;
    pthread_mutex_init(&z->lock, NULL);
    z->have_cg = cgroup_memory_find("", &z->cg) == 0;
    fs->sizer = z;
    struct cache_inputs in;
    gather(fs, &in);
    enum cache_bound why;
    *budget = cachesize_target(&in, &why);
    z->target = *budget;
    z->why = why;
    if (why == CACHE_BOUND_CGROUP_FLOOR) {
        log_floor(z, &in, *budget);
        z->floor_logged = true;
    }
    return 0;
}

int cachesize_start(struct f2fuse *fs)
{
    struct cache_sizer *z = fs->sizer;
    z->psi_fd[0] = psi_trigger_open("/proc/pressure/memory", PSI_STALL_US, PSI_WINDOW_US);
    if (z->have_cg) {
        char path[PATH_MAX + 32];
        cgroup_pressure_path(&z->cg, path, sizeof(path));
        z->psi_fd[1] = psi_trigger_open(path, PSI_STALL_US, PSI_WINDOW_US);
    }
    for (int i = 0; i < 2; i++) {
        if (z->psi_fd[i] < 0)
            z->psi_fd[i] = -1;
        else
            z->psi_armed++;
    }
    int err = pthread_create(&z->thread, NULL, sizer_main, fs);
    z->running = err == 0;
    return -err;
}

void cachesize_stop(struct f2fuse *fs)
{
    struct cache_sizer *z = fs->sizer;
    if (!z || !z->running)
        return;
    atomic_store(&z->stopping, true);
    wake(z);
    pthread_join(z->thread, NULL);
    z->running = false;
}

void cachesize_destroy(struct f2fuse *fs)
{
    struct cache_sizer *z = fs->sizer;
    if (!z)
        return;
    cachesize_stop(fs);
    for (int i = 0; i < 2; i++)
        if (z->psi_fd[i] >= 0)
            close(z->psi_fd[i]);
    close(z->wake_fd);
    pthread_mutex_destroy(&z->lock);
    free(z);
    fs->sizer = NULL;
}

void cachesize_retune(struct f2fuse *fs)
{
    if (fs->sizer)
        wake(fs->sizer);
}

void cachesize_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct cache_sizer *z = fs->sizer;
    if (!z)
        return;
    pthread_mutex_lock(&fs->tune_lock);
    bool automatic = fs->opts.cache_size == 0;
    pthread_mutex_unlock(&fs->tune_lock);
    pthread_mutex_lock(&z->lock);
    uint64_t v[] = {automatic,
                    z->target,
                    z->why,
                    z->host_available,
                    z->cg_limit == HOSTMEM_NO_LIMIT ? 0 : z->cg_limit,
                    z->psi_armed,
                    z->psi_events + z->polled_events,
                    z->pressure_cap == UINT64_MAX ? 0 : z->pressure_cap,
                    z->shrinks,
                    z->grows,
                    z->cleanings};
    pthread_mutex_unlock(&z->lock);
    static const char *const names[] = {"cache.auto",
                                        "cache.target_bytes",
                                        "cache.bound" /* enum cache_bound */,
                                        "cache.host_available_bytes",
                                        "cache.cgroup_limit_bytes",
                                        "cache.psi_triggers",
                                        "cache.pressure_events",
                                        "cache.pressure_cap_bytes",
                                        "cache.shrinks",
                                        "cache.grows",
                                        "cache.shrink_cleanings"};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        emit(sink, names[i], v[i]);
}
