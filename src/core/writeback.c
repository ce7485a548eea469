/* Writeback control (bandwidth × time background writeback, the kernel's
 * dirty_background_time): the flusher thread, writer throttling, the tunables.
 *
 * The flusher writes file data back outside checkpoints.  That keeps the crash model of
 * f2fs intact: a block written here is referenced only by in-memory node pages until a
 * checkpoint (or an fsync's node chain) persists them, and the blocks the last checkpoint
 * references are never overwritten (logs only append to free segments, and a segment freed
 * since the checkpoint stays unused until the next one).
 *
 * One chunk = the oldest dirty pages, at most ~25 ms of device time, one run per inode in
 *   file order: cp_lock shared -> per inode, its stripe: assign blocks, copy the data into
 *   the chunk's buffer, mark the pages clean -> stripes and cp_lock dropped (writers and
 *   checkpoints go on) -> one request per run of consecutive blocks at low priority ->
 *   pages put once written.  Two chunks may be in flight (WB_SLOTS): the next one is
 *   prepared while the device writes the last.  A checkpoint that starts while a chunk is
 *   in flight records node pages
 *   pointing at its blocks; it waits for the chunk (writeback_wait_io) just before its
 *   commit flush, so the blocks are on the device before the pack that references them,
 *   and its own node, NAT and SIT writes overlap the chunk.  (Holding cp_lock through the
 *   I/O, as before, made every checkpoint wait for the chunk first — and kept the
 *   background writes off the device while one ran, which hid the priority inversion
 *   merged checkpoints fix: a low-priority checkpoint could never be stuck behind them.)
 * The pages stay referenced through the I/O, so a reader finds them in the cache and never
 * reads a block still being written; fsync of that inode waits for the chunk
 * (writeback_wait_inode) so that its flush covers it. */
#include "core/writeback.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/cluster.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/inode.h"
#include "core/segment.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"
#include "core/writeback_ctl.h"

#define WB_MAX_CHUNK  1024u /* pages: a slot's buffer */
#define WB_ROOM       256u  /* more: a compressed file's run grows to whole clusters */
#define WB_CAPACITY   (WB_MAX_CHUNK + WB_ROOM)
#define WB_MAX_INODES 16u /* inodes merged into one chunk */
#define WB_SLOTS      2u  /* chunks in flight: the next is prepared while one is written */

/* One chunk's buffers and state.  The flusher prepares a chunk in a free slot and submits
 * it; the completion thread counts its requests down; the flusher finishes it (pages put,
 * counters) later.  Waiters (fsync, checkpoint) need only its I/O to be complete. */
struct wb_slot {
    struct f2fuse *fs;
    uint8_t *buf;
    struct page **pages;
    uint32_t *addrs;
    struct blk_req *reqs;
    struct blk_req **rp;
    size_t assigned; /* pages[0, assigned): referenced, being written */
    unsigned nreq;
    uint64_t submitted_ns;
    uint64_t seq; /* submission order */
    /* under wb->lock */
    bool used;        /* being prepared, in flight or not yet finished */
    bool io_pending;  /* being prepared or requests in flight */
    unsigned pending; /* requests not completed */
    int ioerr;
    uint64_t completed_ns;
    uint32_t inos[WB_MAX_INODES];
    unsigned ninos;
};

struct wb_control {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* the flusher sleeps here */
    pthread_cond_t progress; /* broadcast after every chunk: limit waiters, fsync */
    struct wb_tunables t;
    struct wb_bw_est est;
    pthread_t thread;
    bool running, stopping, active;
    enum wb_reason reason; /* of the running writeback (WB_NONE when idle) */
    unsigned waiters;      /* writers waiting at the hard limit */
    unsigned syncers;      /* writeback_sync callers waiting */
    uint64_t sync_before;  /* they want every page dirtied before this written (0: none) */
    bool soft_error_logged;
    /* The flusher's rounds that failed (nothing written, no checkpoint either: ENOMEM while
     * the checkpoint is postponed), and the last one's error, 0 once a round succeeds: a
     * writer at the hard limit must not wait for a flusher that cannot make room. */
    uint64_t failed_rounds;
    int round_err;
    struct wb_slot slots[WB_SLOTS];
    uint64_t seq;            /* chunks started */
    uint64_t last_io_end_ns; /* bandwidth: busy time without the overlap of two chunks */

    /* counters (under lock) */
    uint64_t starts[WB_REASONS];
    uint64_t pages_written, chunks, chunk_inodes, requests, io_ns, errors, cp_requests,
        prefree_checkpoints;
    uint64_t pauses, pause_ns, limit_waits, limit_wait_ns, limit_failures;
    atomic_uint_fast64_t dirty_max;
    /* Published under lock whenever a tunable or the estimate changes, read by writers
     * without it: below fast_below a write neither starts writeback nor pauses, and up to
     * fast_hard it does not wait (the common case takes no lock; the expire trigger is
     * left to the flusher's periodic check, as in the kernel). */
    atomic_uint_fast64_t fast_below, fast_hard;
};

/* ---- options ---------------------------------------------------------------------- */

static struct wb_tunables tunables_of(const struct f2fuse_options *o)
{
    return (struct wb_tunables){.dirty_bytes = o->dirty_bytes,
                                .dirty_ratio = o->dirty_ratio,
                                .dirty_background_bytes = o->dirty_background_bytes,
                                .dirty_background_ratio = o->dirty_background_ratio,
                                .dirty_expire_ms = o->dirty_expire_ms,
                                .writeback_interval_ms = o->writeback_interval_ms,
                                .dirty_background_time = o->dirty_background_time};
}

static void limits_locked(struct f2fuse *fs, struct wb_limits *l)
{
    /* The base is the cache's size now: it changes with cache_size=auto (cachesize.c). */
    wb_limits_compute(&fs->wb->t, pcache_budget(fs->cache), fs->wb->est.bw, l);
}

static void publish_limits_locked(struct f2fuse *fs)
{
    struct wb_limits l;
    limits_locked(fs, &l);
    uint64_t below = l.background + (l.hard - l.background) / 2; /* where pauses start */
    if (l.background < below)
        below = l.background;
    if (l.bg_time && l.bg_time < below)
        below = l.bg_time;
    atomic_store_explicit(&fs->wb->fast_below, below, memory_order_relaxed);
    atomic_store_explicit(&fs->wb->fast_hard, l.hard, memory_order_relaxed);
}

void writeback_retune(struct f2fuse *fs, const struct f2fuse_options *opts)
{
    struct wb_control *wb = fs->wb;
    pthread_mutex_lock(&wb->lock);
    wb->t = tunables_of(opts);
    publish_limits_locked(fs);
    pthread_cond_signal(&wb->wake); /* a new threshold may call for writeback now */
    pthread_mutex_unlock(&wb->lock);
}

void writeback_resized(struct f2fuse *fs)
{
    struct wb_control *wb = fs->wb;
    pthread_mutex_lock(&wb->lock);
    publish_limits_locked(fs);
    pthread_cond_signal(&wb->wake);        /* a smaller limit may call for writeback now */
    pthread_cond_broadcast(&wb->progress); /* a bigger one may release waiting writers */
    pthread_mutex_unlock(&wb->lock);
}

/* ---- decisions -------------------------------------------------------------------- */

static uint64_t dirty_bytes_now(struct f2fuse *fs)
{
    return (uint64_t)pcache_dirty_count(fs->cache, PAGE_DATA) * F2FS_BLKSIZE;
}

static enum wb_reason evaluate_locked(struct f2fuse *fs, uint64_t now)
{
    struct wb_control *wb = fs->wb;
    struct wb_limits l;
    limits_locked(fs, &l);
    uint64_t key, dirtied = now;
    if (!pcache_oldest_dirty(fs->cache, PAGE_DATA, &key, &dirtied))
        return WB_NONE;
    uint64_t age = now > dirtied ? now - dirtied : 0;
    enum wb_reason r = wb_trigger(&l, dirty_bytes_now(fs), wb->waiters > 0, age,
                                  wb->t.dirty_expire_ms);
    if (r == WB_NONE && wb->sync_before && dirtied <= wb->sync_before)
        r = WB_SYNC;
    return r;
}

/* ---- the flusher ------------------------------------------------------------------ */

static int by_key(const void *a, const void *b)
{
    uint64_t ka = (*(struct page *const *)a)->key, kb = (*(struct page *const *)b)->key;
    return ka < kb ? -1 : ka > kb;
}

static void reverse_pages(struct page **p, size_t n)
{
    for (size_t i = 0; i < n / 2; i++) {
        struct page *t = p[i];
        p[i] = p[n - 1 - i];
        p[n - 1 - i] = t;
    }
}

/* Free segments below which the flusher leaves writeback to a checkpoint, which turns the
 * segments emptied since the last one into free ones (the flusher itself only consumes). */
#define WB_MIN_FREE_SEGMENTS 8u

/* Adds n pages of ino (sorted, still dirty, referenced: s->pages[at, at + n)) to slot s's
 * chunk: blocks assigned, data copied into the slot's buffer, pages marked clean.  A
 * compressed file's run first grows to whole clusters, up to room entries, and its blocks
 * (compressed or not) are laid into the buffer by cluster.c.  Caller holds ino's stripe.
 * Returns how many were assigned; the rest stay dirty and are put. */
static size_t chunk_add_pages(struct f2fuse *fs, struct wb_slot *s, uint32_t ino, size_t at,
                              size_t n, size_t room, int *err)
{
    struct page **pages = s->pages + at;
    struct page *ipage;
    struct inode_info ii;
    size_t assigned = 0;
    *err = inode_get(fs, ino, &ipage, &ii);
    if (!*err && compress_file(&ii)) {
        n = cluster_gather(fs, &ii, ipage, pages, n, room, err);
        if (!*err)
            *err = cluster_assign_blocks(fs, &ii, ipage, pages, n, s->addrs + at,
                                         s->buf + at * F2FS_BLKSIZE, NULL, &assigned);
        pcache_mark_clean_many(fs->cache, pages, s->addrs + at, assigned);
        pcache_put(fs->cache, ipage);
    } else if (!*err) {
        *err = data_assign_blocks(fs, &ii, ipage, pages, n, s->addrs + at, &assigned);
        for (size_t i = 0; i < assigned; i++)
            memcpy(s->buf + (at + i) * F2FS_BLKSIZE, pages[i]->data, F2FS_BLKSIZE);
        /* Under the stripe no writer touches these pages between the copy and here. */
        pcache_mark_clean_many(fs->cache, pages, s->addrs + at, assigned);
        pcache_put(fs->cache, ipage);
    }
    for (size_t i = assigned; i < n; i++)
        pcache_put(fs->cache, pages[i]);
    return assigned;
}

/* Is ino in a chunk whose writes have not all completed?  Under wb->lock. */
static bool io_pending_for(const struct wb_control *wb, uint32_t ino)
{
    for (unsigned i = 0; i < WB_SLOTS; i++) {
        const struct wb_slot *s = &wb->slots[i];
        if (!s->io_pending)
            continue;
        for (unsigned k = 0; k < s->ninos; k++)
            if (s->inos[k] == ino)
                return true;
    }
    return false;
}

/* Is any slot used (io_only: with writes not yet complete)?  Under wb->lock. */
static bool any_slot_busy(const struct wb_control *wb, bool io_only)
{
    for (unsigned i = 0; i < WB_SLOTS; i++)
        if (io_only ? wb->slots[i].io_pending : wb->slots[i].used)
            return true;
    return false;
}

/* Completion thread: the last request of a chunk makes its pages' blocks current on the
 * device (or the mount read-only) before anyone waiting for it goes on. */
static void chunk_req_done(struct blk_req *req)
{
    struct wb_slot *s = req->private;
    struct f2fuse *fs = s->fs;
    struct wb_control *wb = fs->wb;
    int err = 0;
    if (req->result < 0)
        err = (int)req->result;
    else if ((uint64_t)req->result != req->len)
        err = -EIO;
    if (err && fs_first_write_error(fs, err))
        log_err("background writeback failed: %s; the mount turns read-only", strerror(-err));
    pthread_mutex_lock(&wb->lock);
    if (err && !s->ioerr)
        s->ioerr = err;
    if (--s->pending == 0) {
        s->io_pending = false;
        s->completed_ns = clock_mono_ns();
        pthread_cond_broadcast(&wb->progress);
    }
    pthread_mutex_unlock(&wb->lock);
}

/* Counts one event in a counter under wb->lock. */
static void wb_count(struct wb_control *wb, uint64_t *counter)
{
    pthread_mutex_lock(&wb->lock);
    (*counter)++;
    pthread_mutex_unlock(&wb->lock);
}

/* Takes slot s for a new chunk.  Returns whether the flusher may wait for a stripe: only
 * while no other chunk's writes are in flight. */
static bool slot_claim(struct wb_control *wb, struct wb_slot *s)
{
    pthread_mutex_lock(&wb->lock);
    bool wait_ok = !any_slot_busy(wb, true);
    s->used = true;
    s->seq = ++wb->seq;
    s->io_pending = true; /* fsync of an inode added below waits from here on */
    s->ninos = 0;
    s->ioerr = 0;
    pthread_mutex_unlock(&wb->lock);
    s->assigned = 0;
    return wait_ok;
}

/* Sorts the n collected pages by key, then rotates the runs so that the run of inode
 * oldest (the inode with the oldest dirty page) comes first, every run whole and in
 * order: its stripe is the one waited for, and only while nothing is in the chunk yet — an
 * fsync holding a stripe may be waiting for an inode already in it. */
static void sort_oldest_inode_first(struct page **pages, size_t n, uint32_t oldest)
{
    qsort(pages, n, sizeof(*pages), by_key);
    size_t lo = 0;
    while (lo < n && (uint32_t)(pages[lo]->key >> 32) != oldest)
        lo++;
    reverse_pages(pages, lo);
    reverse_pages(pages + lo, n - lo);
    reverse_pages(pages, n);
}

/* Assigns blocks to the runs of s->pages[tail, tail + n), inode by inode under its stripe,
 * moving them down to the chunk's end (s->assigned); a run whose stripe is busy (or that
 * does not fit) is put and stays dirty for a later chunk.  The room between the chunk's
 * end and the next run lets a compressed file's run grow to whole clusters.  The first
 * error is left in *err. */
static void chunk_assign_runs(struct f2fuse *fs, struct wb_slot *s, size_t tail, size_t n,
                              uint32_t oldest, bool wait_ok, int *err)
{
    struct wb_control *wb = fs->wb;
    struct page **runs = s->pages + tail;
    for (size_t i = 0, next; i < n; i = next) {
        uint32_t ino = (uint32_t)(runs[i]->key >> 32);
        for (next = i + 1; next < n && (uint32_t)(runs[next]->key >> 32) == ino; next++)
            ;
        pthread_rwlock_t *stripe = &fs->inode_locks[ino % INODE_LOCK_STRIPES];
        bool locked = false;
        if (!*err && s->ninos < WB_MAX_INODES) {
            if (wait_ok && !s->ninos && ino == oldest) {
                pthread_rwlock_wrlock(stripe);
                locked = true;
            } else {
                locked = pthread_rwlock_trywrlock(stripe) == 0;
            }
        }
        if (!locked) {
            for (size_t k = i; k < next; k++)
                pcache_put(fs->cache, runs[k]);
            continue;
        }
        /* Moved down to the chunk's end (at <= tail + i); those written meanwhile (an fsync)
         * or truncated away are no longer dirty and are put. */
        size_t at = s->assigned;
        memmove(s->pages + at, runs + i, (next - i) * sizeof(*s->pages));
        size_t m = pcache_keep_dirty(fs->cache, s->pages + at, next - i);
        size_t got = m ? chunk_add_pages(fs, s, ino, at, m, tail + next - at, err) : 0;
        s->assigned += got;
        if (got) {
            pthread_mutex_lock(&wb->lock);
            s->inos[s->ninos++] = ino;
            pthread_mutex_unlock(&wb->lock);
        }
        pthread_rwlock_unlock(stripe);
    }
}

/* One request per run of consecutive blocks: the buffer is in the same order.  Returns
 * how many. */
static unsigned chunk_build_requests(struct wb_slot *s)
{
    unsigned nreq = 0;
    for (size_t i = 0; i < s->assigned; i++) {
        if (!s->addrs[i]) /* nothing to write (a compressed cluster's marker, spare slots) */
            continue;
        if (i && s->addrs[i - 1] && s->addrs[i] == s->addrs[i - 1] + 1) {
            s->reqs[nreq - 1].len += F2FS_BLKSIZE;
            continue;
        }
        s->reqs[nreq] = (struct blk_req){.op = BLK_WRITE,
                                         .prio = BLK_PRIO_LOW,
                                         .off = (uint64_t)s->addrs[i] * F2FS_BLKSIZE,
                                         .len = F2FS_BLKSIZE,
                                         .buf = s->buf + i * F2FS_BLKSIZE,
                                         .done = chunk_req_done,
                                         .private = s};
        s->rp[nreq] = &s->reqs[nreq];
        nreq++;
    }
    s->nreq = nreq;
    return nreq;
}

/* Submits the chunk's nreq requests; when that fails, nothing is queued and no completion
 * will come, so they complete here with the error. */
static void chunk_submit(struct f2fuse *fs, struct wb_slot *s, unsigned nreq)
{
    s->submitted_ns = clock_mono_ns();
    if (!nreq)
        return;
    int serr = blk_submit(fs->dev, s->rp, nreq);
    if (serr) {
        for (unsigned i = 0; i < nreq; i++) {
            s->reqs[i].result = serr;
            chunk_req_done(&s->reqs[i]);
        }
    }
}

/* Prepares one chunk in slot s and submits it: the oldest dirty pages, inode by inode; the
 * stripe of the inode with the oldest page is waited for, the others are taken only when
 * free at once (never waiting for a stripe while blocks are in flight: an fsync holding
 * one may be waiting for those).  An inode may be in the other slot's chunk too: its
 * pages dirtied again since then get new blocks here.  Returns pages submitted, 0 when
 * nothing was placed, or -errno.  The slot stays used until chunk_finish_oldest_locked. */
static int chunk_start(struct f2fuse *fs, struct wb_slot *s, unsigned max_pages)
{
    struct wb_control *wb = fs->wb;
    if (!pcache_dirty_count(fs->cache, PAGE_DATA))
        return 0;
    if (seg_free_segments(fs->seg) <
        WB_MIN_FREE_SEGMENTS + WB_SLOTS * max_pages / F2FS_BLOCKS_PER_SEG + 1) {
        wb_count(wb, &wb->cp_requests);
        int err = checkpoint_request(fs, BLK_PRIO_LOW, CP_ALL_DATA);
        return err ? err : 0; /* then a pause: a full image must not loop on checkpoints */
    }

    pthread_rwlock_rdlock(&fs->cp_lock);
    if (__atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE)) {
        pthread_rwlock_unlock(&fs->cp_lock);
        return -EIO;
    }
    bool wait_ok = slot_claim(wb, s);
    int err = 0;
    /* One scan of the dirty list takes the oldest pages; sorted by key they fall into one
     * run per inode, in file order.  (A scan per inode took a fifth of the flusher's time
     * with 16 files being written.)  Each inode's run is checked and assigned under its
     * stripe; a run whose stripe is busy stays dirty for a later chunk. */
    size_t n = pcache_collect_dirty(fs->cache, PAGE_DATA, s->pages, max_pages);
    uint32_t oldest = n ? (uint32_t)(s->pages[0]->key >> 32) : 0;
    sort_oldest_inode_first(s->pages, n, oldest);
    /* to the array's end: runs move down to the chunk's end as they are assigned */
    size_t tail = WB_CAPACITY - n;
    memmove(s->pages + tail, s->pages, n * sizeof(*s->pages));
    chunk_assign_runs(fs, s, tail, n, oldest, wait_ok, &err);

    unsigned nreq = chunk_build_requests(s);
    pthread_mutex_lock(&wb->lock);
    s->pending = nreq;
    if (!nreq) { /* nothing placed: the slot is free again */
        s->io_pending = false;
        s->used = false;
        s->ninos = 0;
        pthread_cond_broadcast(&wb->progress);
    }
    pthread_mutex_unlock(&wb->lock);
    /* The nodes point at the chunk's blocks: from here on a checkpoint may run, and waits
     * for the writes only before its commit (writeback_wait_io). */
    pthread_rwlock_unlock(&fs->cp_lock);

    chunk_submit(fs, s, nreq);
    if (err && !s->assigned) {
        /* Could not place anything (no space until a checkpoint, a damaged inode, ...):
         * a checkpoint writes everything back or reports what is wrong. */
        if (!wb->soft_error_logged)
            log_warn("background writeback of inode %u: %s; leaving it to a checkpoint", oldest,
                     strerror(-err));
        wb->soft_error_logged = true;
        wb_count(wb, &wb->errors);
        int cerr = checkpoint_request(fs, BLK_PRIO_LOW, CP_ALL_DATA);
        return cerr ? cerr : 0;
    }
    if (err)
        wb_count(wb, &wb->errors);
    return (int)s->assigned;
}

/* Segments emptied since the last checkpoint (prefree) are reusable only once the next one
 * commits.  Writing fast between periodic checkpoints, the free pool would drain into
 * prefree ones until writers stall in foreground GC, whose first step is a checkpoint of all
 * dirty data (seen: 16 x 128 KiB writers on a 4 GiB image, 1,489 prefree and 138 free
 * segments after 3 s).  So the flusher asks for a metadata checkpoint, which is what frees
 * them, once prefree segments are past 5 % of the main area (the kernel's
 * excess_prefree_segs, at least 8) and outnumber the free ones.  The second condition keeps
 * them rare: a checkpoint stalls writers and costs two device flushes, and asking at 5 %
 * alone took 33 checkpoints in 10 s of 128 KiB writes and 15 % of their throughput. */
static void reclaim_prefree(struct f2fuse *fs)
{
    uint32_t limit = seg_main_segments(fs->seg) / 20;
    if (limit < 8)
        limit = 8;
    uint32_t prefree = seg_prefree_segments(fs->seg);
    if (prefree <= limit || prefree < seg_free_segments(fs->seg))
        return;
    struct wb_control *wb = fs->wb;
    wb_count(wb, &wb->prefree_checkpoints);
    checkpoint_request(fs, BLK_PRIO_LOW, CP_METADATA);
}

/* Waits for the oldest used slot's writes, then releases its pages and counts it.  Called
 * by the flusher with wb->lock held; drops it meanwhile.  Returns the chunk's I/O error. */
static int chunk_finish_oldest_locked(struct f2fuse *fs)
{
    struct wb_control *wb = fs->wb;
    struct wb_slot *s = NULL;
    for (unsigned i = 0; i < WB_SLOTS; i++)
        if (wb->slots[i].used && (!s || wb->slots[i].seq < s->seq))
            s = &wb->slots[i];
    if (!s)
        return 0;
    while (s->io_pending)
        pthread_cond_wait(&wb->progress, &wb->lock);
    int ioerr = s->ioerr;
    pthread_mutex_unlock(&wb->lock);
    if (ioerr) /* back to dirty: the content in memory is right, the mount read-only */
        for (size_t i = 0; i < s->assigned; i++)
            pcache_mark_dirty(fs->cache, s->pages[i]);
    for (size_t i = 0; i < s->assigned; i++) /* regular files' pages leave (kernel has them) */
        ioerr ? pcache_put(fs->cache, s->pages[i]) : pcache_put_written(fs->cache, s->pages[i]);
    pthread_mutex_lock(&wb->lock);
    if (!ioerr && s->assigned) {
        /* busy time: two chunks in flight overlap, count the overlap once */
        uint64_t from = s->submitted_ns > wb->last_io_end_ns ? s->submitted_ns : wb->last_io_end_ns;
        uint64_t took = s->completed_ns > from ? s->completed_ns - from : 0;
        if (took)
            wb_bw_account(&wb->est, s->assigned * (uint64_t)F2FS_BLKSIZE, took);
        publish_limits_locked(fs);
        wb->pages_written += s->assigned;
        wb->chunks++;
        wb->chunk_inodes += s->ninos;
        wb->requests += s->nreq;
        wb->io_ns += took;
        atomic_fetch_add(&fs->data_pages_written, s->assigned);
    }
    if (s->completed_ns > wb->last_io_end_ns)
        wb->last_io_end_ns = s->completed_ns;
    if (ioerr)
        wb->errors++;
    s->used = false;
    s->ninos = 0;
    s->assigned = 0;
    pthread_cond_broadcast(&wb->progress);
    return ioerr;
}

static struct wb_slot *free_slot(struct wb_control *wb)
{
    for (unsigned i = 0; i < WB_SLOTS; i++)
        if (!wb->slots[i].used)
            return &wb->slots[i];
    return NULL;
}

static void timed_wait(pthread_cond_t *cond, pthread_mutex_t *lock, uint64_t ns)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t t = (uint64_t)until.tv_nsec + ns % 1000000000ull;
    until.tv_sec += (time_t)(ns / 1000000000ull + t / 1000000000ull);
    until.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(cond, lock, &until);
}

static void *flusher_thread(void *arg)
{
    struct f2fuse *fs = arg;
    struct wb_control *wb = fs->wb;
    pthread_mutex_lock(&wb->lock);
    while (!wb->stopping) {
        enum wb_reason r = fs_write_error(fs) ? WB_NONE : evaluate_locked(fs, clock_mono_ns());
        if (r == WB_NONE && any_slot_busy(wb, false)) {
            chunk_finish_oldest_locked(fs);
            continue;
        }
        if (r == WB_NONE) {
            wb->active = false;
            wb->reason = WB_NONE;
            pthread_cond_broadcast(&wb->progress);
            unsigned ms = wb->t.writeback_interval_ms;
            /* The expire check needs the periodic wakeup; without it only a kick (a writer
             * past a threshold, a tunable changed) starts writeback, as in the kernel. */
            if (ms)
                timed_wait(&wb->wake, &wb->lock, (uint64_t)ms * 1000000ull);
            else
                pthread_cond_wait(&wb->wake, &wb->lock);
            continue;
        }
        if (!wb->active)
            wb->starts[r]++;
        wb->active = true;
        wb->reason = r;
        struct wb_slot *slot = free_slot(wb);
        if (!slot) { /* both chunks in flight: the older one must land first */
            chunk_finish_oldest_locked(fs);
            continue;
        }
        unsigned chunk = wb_chunk_pages(wb->est.bw);
        pthread_mutex_unlock(&wb->lock);
        int got = chunk_start(fs, slot, chunk);
        if (got > 0)
            reclaim_prefree(fs);
        pthread_mutex_lock(&wb->lock);
        wb->round_err = got < 0 ? got : 0;
        if (got < 0)
            wb->failed_rounds++;
        /* fewer dirty pages now, or a failure: writers at the limit look again */
        if (got != 0)
            pthread_cond_broadcast(&wb->progress);
        if (got > 0)
            continue;
        if (any_slot_busy(wb, false))
            chunk_finish_oldest_locked(fs);
        else if (!wb->stopping) /* nothing done: do not spin */
            timed_wait(&wb->wake, &wb->lock, 100000000ull);
    }
    while (any_slot_busy(wb, false))
        chunk_finish_oldest_locked(fs);
    wb->active = false;
    pthread_cond_broadcast(&wb->progress);
    pthread_mutex_unlock(&wb->lock);
    return NULL;
}

int writeback_init(struct f2fuse *fs)
{
    struct wb_control *wb = calloc(1, sizeof(*wb));
    if (!wb)
        return -ENOMEM;
    pthread_mutex_init(&wb->lock, NULL);
    pthread_cond_init(&wb->wake, NULL);
    pthread_cond_init(&wb->progress, NULL);
    wb->t = tunables_of(&fs->opts);
    wb_bw_init(&wb->est);
    fs->wb = wb;
    publish_limits_locked(fs);
    for (unsigned i = 0; i < WB_SLOTS; i++) {
        struct wb_slot *s = &wb->slots[i];
        s->fs = fs;
        s->buf = blk_alloc_buf((size_t)WB_CAPACITY * F2FS_BLKSIZE);
        s->pages = calloc(WB_CAPACITY, sizeof(*s->pages));
        s->addrs = calloc(WB_CAPACITY, sizeof(*s->addrs));
        s->reqs = calloc(WB_CAPACITY, sizeof(*s->reqs));
        s->rp = calloc(WB_CAPACITY, sizeof(*s->rp));
        if (!s->buf || !s->pages || !s->addrs || !s->reqs || !s->rp)
            return -ENOMEM;
    }
    int err = -pthread_create(&wb->thread, NULL, flusher_thread, fs);
    pthread_mutex_lock(&wb->lock); /* writeback_sync reads it under the lock */
    wb->running = !err;
    pthread_mutex_unlock(&wb->lock);
    return err;
}

void writeback_stop(struct f2fuse *fs)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    pthread_mutex_lock(&wb->lock);
    wb->stopping = true;
    pthread_cond_broadcast(&wb->wake);
    pthread_cond_broadcast(&wb->progress);
    pthread_mutex_unlock(&wb->lock);
    if (wb->running)
        pthread_join(wb->thread, NULL);
    wb->running = false;
}

void writeback_destroy(struct f2fuse *fs)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    writeback_stop(fs);
    fs->wb = NULL;
    for (unsigned i = 0; i < WB_SLOTS; i++) {
        struct wb_slot *s = &wb->slots[i];
        free(s->buf);
        free(s->pages);
        free(s->addrs);
        free(s->reqs);
        free(s->rp);
    }
    pthread_cond_destroy(&wb->progress);
    pthread_cond_destroy(&wb->wake);
    pthread_mutex_destroy(&wb->lock);
    free(wb);
}

/* ---- the write path --------------------------------------------------------------- */

/* Flusher rounds that must fail, with none succeeding in between, while a writer waits at
 * the hard limit before it gives up: one that began after the writer came, at least. */
#define WB_FAILED_ROUNDS_TO_GIVE_UP 2u

int writeback_throttle_before(struct f2fuse *fs, uint64_t bytes)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return 0;
    uint64_t dirty = dirty_bytes_now(fs);
    if (dirty == 0 || dirty + bytes <= atomic_load_explicit(&wb->fast_hard, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&wb->lock);
    struct wb_limits l;
    limits_locked(fs, &l);
    dirty = dirty_bytes_now(fs);
    if (dirty == 0 || dirty + bytes <= l.hard || !wb->running) {
        pthread_mutex_unlock(&wb->lock);
        return 0;
    }
    uint64_t t0 = clock_mono_ns(), failed_before = wb->failed_rounds;
    int err = 0;
    wb->limit_waits++;
    wb->waiters++;
    /* Waits for the flusher (which counts us as a reason to run) to make room; a write
     * larger than the room that is left goes in once nothing is dirty.  A flusher that keeps
     * failing makes none: with every allocation failing, its chunks cannot get node pages
     * and the checkpoint it asks for is postponed (no memory for the orphan list), which
     * leaves the mount writable, so waiting on would never end. */
    while (!wb->stopping && !fs_write_error(fs) && dirty && dirty + bytes > l.hard) {
        if (wb->round_err && wb->failed_rounds - failed_before >= WB_FAILED_ROUNDS_TO_GIVE_UP) {
            err = wb->round_err;
            wb->limit_failures++;
            break;
        }
        pthread_cond_signal(&wb->wake);
        timed_wait(&wb->progress, &wb->lock, 100000000ull);
        limits_locked(fs, &l);
        dirty = dirty_bytes_now(fs);
    }
    wb->waiters--;
    wb->limit_wait_ns += clock_mono_ns() - t0;
    pthread_mutex_unlock(&wb->lock);
    return err;
}

void writeback_throttle_after(struct f2fuse *fs, uint64_t bytes)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    uint64_t dirty = dirty_bytes_now(fs);
    uint64_t seen = atomic_load_explicit(&wb->dirty_max, memory_order_relaxed);
    while (dirty > seen && !atomic_compare_exchange_weak(&wb->dirty_max, &seen, dirty))
        ;
    if (dirty <= atomic_load_explicit(&wb->fast_below, memory_order_relaxed))
        return;
    uint64_t now = clock_mono_ns();
    pthread_mutex_lock(&wb->lock);
    dirty = dirty_bytes_now(fs);
    if (!wb->active && evaluate_locked(fs, now) != WB_NONE)
        pthread_cond_signal(&wb->wake);
    struct wb_limits l;
    limits_locked(fs, &l);
    uint64_t pause = wb_throttle_pause_ns(&l, dirty, wb->est.bw, bytes);
    if (pause) {
        wb->pauses++;
        wb->pause_ns += pause;
    }
    pthread_mutex_unlock(&wb->lock);
    if (pause) {
        struct timespec ts = {.tv_sec = (time_t)(pause / 1000000000ull),
                              .tv_nsec = (long)(pause % 1000000000ull)};
        nanosleep(&ts, NULL);
    }
}

void writeback_sync(struct f2fuse *fs, uint64_t timeout_ns)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    uint64_t now = clock_mono_ns(), deadline = now + timeout_ns;
    pthread_mutex_lock(&wb->lock);
    if (!wb->running) {
        pthread_mutex_unlock(&wb->lock);
        return;
    }
    wb->syncers++;
    if (now > wb->sync_before)
        wb->sync_before = now;
    pthread_cond_signal(&wb->wake);
    uint64_t key, dirtied;
    while (!wb->stopping && !fs_write_error(fs) && clock_mono_ns() < deadline &&
           pcache_oldest_dirty(fs->cache, PAGE_DATA, &key, &dirtied) && dirtied <= now) {
        pthread_cond_signal(&wb->wake);
        timed_wait(&wb->progress, &wb->lock, 50000000ull);
    }
    if (--wb->syncers == 0)
        wb->sync_before = 0;
    pthread_mutex_unlock(&wb->lock);
}

void writeback_wait_inode(struct f2fuse *fs, uint32_t ino)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    pthread_mutex_lock(&wb->lock);
    while (io_pending_for(wb, ino))
        pthread_cond_wait(&wb->progress, &wb->lock);
    pthread_mutex_unlock(&wb->lock);
}

void writeback_wait_io(struct f2fuse *fs)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    pthread_mutex_lock(&wb->lock);
    while (any_slot_busy(wb, true))
        pthread_cond_wait(&wb->progress, &wb->lock);
    pthread_mutex_unlock(&wb->lock);
}

void writeback_account(struct f2fuse *fs, uint64_t bytes, uint64_t busy_ns)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    pthread_mutex_lock(&wb->lock);
    wb_bw_account(&wb->est, bytes, busy_ns);
    publish_limits_locked(fs);
    pthread_mutex_unlock(&wb->lock);
}

void writeback_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct wb_control *wb = fs->wb;
    if (!wb)
        return;
    pthread_mutex_lock(&wb->lock);
    struct wb_limits l;
    limits_locked(fs, &l);
    emit(sink, "wb.limit.hard_bytes", l.hard);
    emit(sink, "wb.limit.background_bytes", l.background);
    emit(sink, "wb.limit.bg_time_bytes", l.bg_time);
    uint64_t dirty = dirty_bytes_now(fs);
    emit(sink, "wb.dirty_bytes", dirty);
    uint64_t dirty_max = atomic_load(&wb->dirty_max);
    emit(sink, "wb.dirty_max_bytes", dirty_max > dirty ? dirty_max : dirty);
    emit(sink, "wb.bw_estimate", wb->est.bw);
    emit(sink, "wb.bw_samples", wb->est.samples);
    emit(sink, "wb.active", wb->active);
    emit(sink, "wb.reason", (uint64_t)wb->reason);
    for (int r = WB_LIMIT; r < WB_REASONS; r++) {
        char name[48];
        snprintf(name, sizeof(name), "wb.started.%s", wb_reason_name((enum wb_reason)r));
        emit(sink, name, wb->starts[r]);
    }
    emit(sink, "wb.pages_written", wb->pages_written);
    emit(sink, "wb.chunks", wb->chunks);
    emit(sink, "wb.chunk_inodes", wb->chunk_inodes);
    emit(sink, "wb.requests", wb->requests);
    emit(sink, "wb.io_ms", wb->io_ns / 1000000);
    emit(sink, "wb.errors", wb->errors);
    emit(sink, "wb.checkpoint_requests", wb->cp_requests);
    emit(sink, "wb.prefree_checkpoints", wb->prefree_checkpoints);
    emit(sink, "wb.throttle.pauses", wb->pauses);
    emit(sink, "wb.throttle.pause_ms", wb->pause_ns / 1000000);
    emit(sink, "wb.throttle.limit_waits", wb->limit_waits);
    emit(sink, "wb.throttle.limit_wait_ms", wb->limit_wait_ns / 1000000);
    emit(sink, "wb.throttle.limit_failures", wb->limit_failures);
    pthread_mutex_unlock(&wb->lock);
}
