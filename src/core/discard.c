/* Discard (merged, parallel discard and a fast FITRIM, as ext4's): telling the device which
 * main-area blocks hold nothing — holes punched into an image file, BLKDISCARD on a block
 * device (the block layer picks).
 *
 * Where the work comes from:
 *   online (-o discard)  each checkpoint, once its pack is durable, queues the blocks it
 *                        frees (seg_discard_candidates); a background thread issues the runs
 *                        of 16 blocks or more (as the kernel's background policy does), and
 *                        everything at unmount, for at most 5 s.  Shorter runs wait queued
 *                        for a neighbour, a FITRIM, the unmount, or their reuse.
 *   FITRIM (f2fuse_trim) a checkpoint first, so freed space is committed; then the free
 *                        extents of the range (seg_free_extents, minlen applied) are queued
 *                        and the caller issues them, waits, and reports the bytes.
 *
 * What may be discarded: nothing a durable checkpoint references, nothing valid in memory,
 * and nothing roll-forward recovery may still walk.  Online candidates were valid at the
 * previous checkpoint and are free in the new, durable one; the previous one is no longer
 * what a crash returns to, and its fsync chain is obsolete with it.  A chain written after
 * the new checkpoint consists of blocks allocated after it, which are valid when written
 * and, if a later fsync supersedes them, free only in segments changed since the
 * checkpoint: seg_free_extents (FITRIM) skips those segments, and online candidates are
 * only ever computed at a checkpoint.  A queued block that is allocated again before its
 * discard runs is taken out of the queue by discard_block_allocated, and one whose discard
 * is running is waited for, before the block's new data is written (the kernel's
 * f2fs_wait_discard_bio).
 *
 * State per main segment, allocated on demand: pending (queued, not issued) and done
 * (discarded since and not allocated again) bitmaps, the number of requests in flight over
 * it, and a flags byte the allocation hook reads without the lock.  A bitmap covering a
 * whole segment is the shared `full` sentinel, so a trimmed empty device costs 8 bytes per
 * segment per map.  The done map is what makes a second FITRIM with nothing new return at
 * once; it lives in memory only, so the first FITRIM of a mount trims all free space.
 *
 * Issue: runs are taken from the pending bitmaps in address order — maximal, across
 * segment boundaries — and split at discard_max.  discard_mode=block issues every block on
 * its own and waits for it (the naive baseline), serial issues merged ranges one at a time,
 * parallel (default) keeps discard_qd merged ranges in flight through blk_submit.  All at
 * BLK_PRIO_LOW.  One issuer at a time (issue_lock): the background thread works in rounds,
 * each waited for, so a FITRIM gets in between and finds nothing of its range in flight. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/discard.h"
#include "core/context.h"
#include "core/segment.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"

#define SEG_BLKS          F2FS_BLOCKS_PER_SEG
#define SEG_WORDS         (SEG_BLKS / 64)
#define DEFAULT_MAX_BYTES (64ull << 20)
#define DEFAULT_QD        32u
#define ROUND_RANGES      1024u /* background round; then a FITRIM may take over */
/* Online discard leaves runs shorter than this queued (the kernel's background policy,
 * DEFAULT_DISCARD_GRANULARITY): scattered single blocks freed by random overwrites would
 * cost a request each, in the foreground's way, for little; a FITRIM, a later neighbour
 * or the unmount drain takes them. */
#define ONLINE_MIN_BLOCKS    16u
#define UMOUNT_DRAIN_SECONDS 5 /* the kernel's DEF_UMOUNT_DISCARD_TIMEOUT */
/* Online discard waits for discard_idle_ms without writes (the kernel's io_aware policy:
 * on an image file a discard is a hole punched into the host file, which the host file
 * system serialises with the O_DIRECT writes in flight: -10 % on 128 KiB overwrites), but
 * never longer than this: a busy mount still gives freed space back. */
#define MAX_DEFER_NS (10ull * 1000000000ull)

enum { SF_PENDING = 1u, SF_INFLIGHT = 2u, SF_DONE = 4u };

/* One caller issuing: its requests in flight and what they achieved. */
struct issuer {
    unsigned inflight;
    unsigned wake_at; /* completions wake the issuer only once inflight is down to this */
    uint64_t bytes, ranges;
    int err;
};

struct dreq {
    struct blk_req req; /* first: the completion gets it back as a dreq */
    struct discard_control *dc;
    struct issuer *is;
    uint32_t start, len; /* blocks */
    struct dreq *prev, *next;
};

struct discard_control {
    struct blk_dev *dev;
    uint32_t main_blkaddr, main_segs;
    unsigned mode, qd;
    uint32_t max_blocks;
    atomic_bool online;

    pthread_mutex_t lock;   /* everything below but flags' lock-free readers */
    pthread_cond_t changed; /* a request completed */
    pthread_cond_t wake;    /* the thread: work queued, or stop */
    uint64_t full[SEG_WORDS];
    uint64_t **pend, **done;
    uint16_t *inflight;     /* requests in flight over each segment */
    _Atomic uint8_t *flags; /* SF_* per segment */
    uint64_t *pend_segs;    /* one bit per segment with pending blocks */
    struct dreq *busy;      /* requests in flight */
    uint64_t pending_blocks, done_blocks, bitmaps;
    uint64_t queue_gen; /* bumped by every checkpoint that queues something */
    unsigned cur_inflight;
    unsigned alloc_waiters; /* discard_allocated callers waiting for a request in flight */

    pthread_mutex_t issue_lock;
    pthread_t thread;
    bool thread_running, stopping;
    uint64_t drain_until_ns;
    uint64_t idle_ns;                        /* discard_idle_ms */
    const atomic_uint_fast64_t *activity_ns; /* the mount's last write (NULL: no waiting) */
    uint64_t deferred_since;                 /* when the thread first held work back */

    uint64_t st_candidates, st_queued, st_skipped_done, st_ranges, st_bytes, st_merges, st_splits,
        st_errors, st_cancelled, st_waits, st_dropped, st_trims, st_trim_bytes, st_inflight_max,
        st_idle_waits;
};

/* ---- per-segment bitmaps (NULL = no block, dc->full = every block) --------------------- */

static unsigned bits_card(const struct discard_control *dc, const uint64_t *w)
{
    if (!w)
        return 0;
    if (w == dc->full)
        return SEG_BLKS;
    unsigned n = 0;
    for (unsigned i = 0; i < SEG_WORDS; i++)
        n += (unsigned)__builtin_popcountll(w[i]);
    return n;
}

static bool bits_test(const uint64_t *w, unsigned b)
{
    return w && (w[b >> 6] >> (b & 63) & 1);
}

/* First set bit of w in [from, SEG_BLKS), or SEG_BLKS. */
static unsigned bits_next(const uint64_t *w, unsigned from)
{
    for (unsigned i = from >> 6; i < SEG_WORDS; i++) {
        uint64_t word = w[i] & (i == from >> 6 ? ~0ull << (from & 63) : ~0ull);
        if (word)
            return i * 64 + (unsigned)__builtin_ctzll(word);
    }
    return SEG_BLKS;
}

/* Number of consecutive set bits of w from b, not past limit. */
static unsigned bits_run(const uint64_t *w, unsigned b, unsigned limit)
{
    unsigned start = b;
    while (b < limit) {
        uint64_t holes = ~w[b >> 6] >> (b & 63);
        unsigned n = holes ? (unsigned)__builtin_ctzll(holes) : 64 - (b & 63);
        b += n;
        if (holes || b >= limit)
            break;
    }
    return (b < limit ? b : limit) - start;
}

/* A writable private copy of map[s]; NULL when out of memory. */
static uint64_t *bits_mut(struct discard_control *dc, uint64_t **map, uint32_t s)
{
    uint64_t *w = map[s];
    if (w && w != dc->full)
        return w;
    uint64_t *n = malloc(sizeof(dc->full));
    if (!n)
        return NULL;
    memset(n, w ? 0xFF : 0, sizeof(dc->full));
    map[s] = n;
    dc->bitmaps++;
    return n;
}

/* Back to NULL or the sentinel when a private bitmap is empty or full. */
static void bits_settle(struct discard_control *dc, uint64_t **map, uint32_t s)
{
    uint64_t *w = map[s];
    if (!w || w == dc->full)
        return;
    bool none = true, all = true;
    for (unsigned i = 0; i < SEG_WORDS; i++) {
        none &= w[i] == 0;
        all &= w[i] == ~0ull;
    }
    if (none || all) {
        free(w);
        dc->bitmaps--;
        map[s] = all ? dc->full : NULL;
    }
}

static void bits_drop(struct discard_control *dc, uint64_t **map, uint32_t s)
{
    if (map[s] && map[s] != dc->full) {
        free(map[s]);
        dc->bitmaps--;
    }
    map[s] = NULL;
}

static uint64_t word_mask(unsigned b, unsigned n)
{
    return (n == 64 ? ~0ull : (1ull << n) - 1) << b;
}

/* Sets or clears bits [lo, hi) of map[s]; returns how many changed.  Out of memory, a set
 * is skipped and a clear forgets the segment: both maps are hints whose loss is safe (a
 * block not discarded, or discarded twice). */
static unsigned bits_range(struct discard_control *dc, uint64_t **map, uint32_t s, unsigned lo,
                           unsigned hi, bool set)
{
    if (lo == 0 && hi == SEG_BLKS) {
        unsigned before = bits_card(dc, map[s]);
        bits_drop(dc, map, s);
        map[s] = set ? dc->full : NULL;
        return set ? SEG_BLKS - before : before;
    }
    if ((set && map[s] == dc->full) || (!set && !map[s]))
        return 0;
    uint64_t *w = bits_mut(dc, map, s);
    if (!w) {
        if (set)
            return 0;
        unsigned before = bits_card(dc, map[s]);
        bits_drop(dc, map, s);
        return before;
    }
    unsigned changed = 0;
    for (unsigned b = lo; b < hi;) {
        unsigned n = hi - b < 64 - (b & 63) ? hi - b : 64 - (b & 63);
        uint64_t m = word_mask(b & 63, n), *word = &w[b >> 6];
        changed += (unsigned)__builtin_popcountll(set ? m & ~*word : m & *word);
        if (set)
            *word |= m;
        else
            *word &= ~m;
        b += n;
    }
    bits_settle(dc, map, s);
    return changed;
}

static void update_flags(struct discard_control *dc, uint32_t s)
{
    uint8_t f = (uint8_t)((dc->pend[s] ? SF_PENDING : 0) | (dc->inflight[s] ? SF_INFLIGHT : 0) |
                          (dc->done[s] ? SF_DONE : 0));
    if (dc->pend[s])
        dc->pend_segs[s >> 6] |= 1ull << (s & 63);
    else
        dc->pend_segs[s >> 6] &= ~(1ull << (s & 63));
    atomic_store_explicit(&dc->flags[s], f, memory_order_release);
}

/* Calls fn for each segment piece of [blkaddr, blkaddr + len) (absolute addresses). */
#define FOR_EACH_PIECE(dc, blkaddr, len, s, lo, hi)                                      \
    for (uint32_t rel_ = (blkaddr) - (dc)->main_blkaddr, end_ = rel_ + (len), s, lo, hi; \
         rel_ < end_ &&                                                                  \
         ((s = rel_ / SEG_BLKS), (lo = rel_ % SEG_BLKS),                                 \
          (hi = end_ - s * SEG_BLKS < SEG_BLKS ? end_ - s * SEG_BLKS : SEG_BLKS), true); \
         rel_ = s * SEG_BLKS + hi)

/* ---- queue ----------------------------------------------------------------------------- */

static void queue_locked(struct discard_control *dc, uint32_t blkaddr, uint32_t len)
{
    uint64_t main_end = dc->main_blkaddr + (uint64_t)dc->main_segs * SEG_BLKS;
    if (blkaddr < dc->main_blkaddr || blkaddr >= main_end || len == 0)
        return;
    if (blkaddr + (uint64_t)len > main_end)
        len = (uint32_t)(main_end - blkaddr);
    FOR_EACH_PIECE (dc, blkaddr, len, s, lo, hi) {
        const uint64_t *d = dc->done[s];
        unsigned added = 0, skipped = 0;
        if (d == dc->full) {
            skipped = hi - lo;
        } else if (!d) {
            added = bits_range(dc, dc->pend, s, lo, hi, true);
        } else {
            uint64_t *p = bits_mut(dc, dc->pend, s);
            if (p) {
                for (unsigned b = lo; b < hi;) {
                    unsigned n = hi - b < 64 - (b & 63) ? hi - b : 64 - (b & 63);
                    uint64_t m = word_mask(b & 63, n), want = m & ~d[b >> 6];
                    skipped += (unsigned)__builtin_popcountll(m & d[b >> 6]);
                    added += (unsigned)__builtin_popcountll(want & ~p[b >> 6]);
                    p[b >> 6] |= want;
                    b += n;
                }
                bits_settle(dc, dc->pend, s);
            }
        }
        dc->pending_blocks += added;
        dc->st_queued += added;
        dc->st_skipped_done += skipped;
        update_flags(dc, s);
    }
}

void discard_queue(struct discard_control *dc, uint32_t blkaddr, uint32_t len)
{
    pthread_mutex_lock(&dc->lock);
    queue_locked(dc, blkaddr, len);
    pthread_mutex_unlock(&dc->lock);
}

static void queue_cb(void *arg, uint32_t blkaddr, uint32_t len)
{
    discard_queue(arg, blkaddr, len);
}

/* Finds the first pending run at or after cursor and before end (main-relative), at most
 * max blocks long. */
static bool find_run(struct discard_control *dc, uint32_t cursor, uint32_t end, uint32_t max,
                     uint32_t *start, uint32_t *len)
{
    if (cursor >= end)
        return false;
    uint32_t s = cursor / SEG_BLKS, last = (end - 1) / SEG_BLKS;
    unsigned from = cursor % SEG_BLKS;
    for (;; s++, from = 0) {
        while (s <= last && !(dc->pend_segs[s >> 6] >> (s & 63) & 1)) {
            if ((s & 63) == 0 && !dc->pend_segs[s >> 6])
                s += 64; /* a whole empty word of segments */
            else
                s++;
            from = 0;
        }
        if (s > last)
            return false;
        unsigned limit = s == last ? end - s * SEG_BLKS : SEG_BLKS;
        unsigned b = dc->pend[s] == dc->full ? from : bits_next(dc->pend[s], from);
        if (b < limit)
            break;
    }
    /* Grow across segment boundaries while the next segment's run starts at its block 0. */
    uint32_t rstart = s * SEG_BLKS +
                      (dc->pend[s] == dc->full ? from : bits_next(dc->pend[s], from));
    uint32_t rlen = 0;
    for (uint32_t t = s; t <= last && rlen < max; t++) {
        unsigned b = t == s ? rstart % SEG_BLKS : 0;
        unsigned limit = t == last ? end - t * SEG_BLKS : SEG_BLKS;
        if (b >= limit || !bits_test(dc->pend[t], b))
            break;
        unsigned want = max - rlen < limit - b ? max - rlen : limit - b;
        unsigned n = dc->pend[t] == dc->full ? want : bits_run(dc->pend[t], b, b + want);
        rlen += n;
        if (b + n < SEG_BLKS)
            break;
    }
    *start = rstart;
    *len = rlen;
    return true;
}

/* Takes the first pending run of at least min blocks (shorter ones stay queued) at or after
 * *cursor and before end (main-relative), at most max blocks, out of the pending maps.
 * *cursor moves past it. */
static bool take_run(struct discard_control *dc, uint32_t *cursor, uint32_t end, uint32_t max,
                     uint32_t min, uint32_t *start, uint32_t *len)
{
    uint32_t rstart, rlen;
    for (;;) {
        if (!find_run(dc, *cursor, end, max, &rstart, &rlen))
            return false;
        if (rlen >= min)
            break;
        *cursor = rstart + rlen;
    }
    FOR_EACH_PIECE (dc, dc->main_blkaddr + rstart, rlen, t, lo, hi) {
        dc->pending_blocks -= bits_range(dc, dc->pend, t, lo, hi, false);
        update_flags(dc, t);
    }
    /* Split: the run went on but discard_max ended the request. */
    uint32_t next = rstart + rlen;
    if (rlen == max && next < end && bits_test(dc->pend[next / SEG_BLKS], next % SEG_BLKS))
        dc->st_splits++;
    *start = dc->main_blkaddr + rstart;
    *len = rlen;
    *cursor = next;
    return true;
}

/* ---- issue ----------------------------------------------------------------------------- */

static bool busy_covers(const struct discard_control *dc, uint32_t blkaddr)
{
    for (const struct dreq *d = dc->busy; d; d = d->next)
        if (blkaddr >= d->start && blkaddr - d->start < d->len)
            return true;
    return false;
}

static void busy_unlink(struct discard_control *dc, struct dreq *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        dc->busy = d->next;
    if (d->next)
        d->next->prev = d->prev;
}

/* A request left flight: the segments it covered, the done map when it worked. */
static void retire_locked(struct discard_control *dc, struct dreq *d, int64_t result)
{
    busy_unlink(dc, d);
    FOR_EACH_PIECE (dc, d->start, d->len, s, lo, hi) {
        dc->inflight[s]--;
        if (result >= 0)
            dc->done_blocks += bits_range(dc, dc->done, s, lo, hi, true);
        update_flags(dc, s);
    }
    struct issuer *is = d->is;
    if (result >= 0) {
        dc->st_bytes += (uint64_t)d->len * F2FS_BLKSIZE;
        is->bytes += (uint64_t)d->len * F2FS_BLKSIZE;
    } else {
        if (dc->st_errors++ == 0 && result != -EOPNOTSUPP)
            log_warn("a discard failed: %s; its blocks stay free, only the trim is lost "
                     "(further failures are counted in discard.errors)",
                     strerror((int)-result));
        if (!is->err)
            is->err = (int)result;
        if (result == -EOPNOTSUPP && atomic_exchange(&dc->online, false))
            log_warn("the device does not support discard (%s); online discard is off",
                     strerror(EOPNOTSUPP));
    }
    is->inflight--;
    dc->cur_inflight--;
    /* Wake-ups cost more than a punched hole: only when somebody can act on this one. */
    if (is->inflight <= is->wake_at || dc->alloc_waiters || dc->cur_inflight == 0)
        pthread_cond_broadcast(&dc->changed);
}

static void dreq_done(struct blk_req *req)
{
    struct dreq *d = (struct dreq *)req;
    struct discard_control *dc = d->dc;
    pthread_mutex_lock(&dc->lock);
    retire_locked(dc, d, req->result);
    pthread_mutex_unlock(&dc->lock);
    free(d);
}

/* Issues pending runs of at least min blocks inside [start, end) (absolute, clamped to the
 * main area), at most max_ranges of them, and waits until they are done.  The caller holds
 * issue_lock. */
static void issue(struct discard_control *dc, uint32_t start, uint32_t end, unsigned max_ranges,
                  uint32_t min, struct issuer *is)
{
    uint64_t main_end = dc->main_blkaddr + (uint64_t)dc->main_segs * SEG_BLKS;
    if (start < dc->main_blkaddr)
        start = dc->main_blkaddr;
    if (end > main_end)
        end = (uint32_t)main_end;
    if (start >= end)
        return;
    unsigned limit = dc->mode == F2FUSE_DISCARD_PARALLEL ? dc->qd : 1;
    /* Refill once half the requests are back: one submission and one wake-up per batch. */
    unsigned low = limit / 2;
    uint32_t max = dc->mode == F2FUSE_DISCARD_BLOCK ? 1 : dc->max_blocks;
    if (min > max)
        min = max; /* block mode takes its blocks one by one, whatever their run */
    if (min < 1)
        min = 1;
    struct blk_req **batch = malloc(limit * sizeof(*batch));
    if (!batch) {
        is->err = -ENOMEM;
        return;
    }
    uint32_t cursor = start - dc->main_blkaddr, rel_end = end - dc->main_blkaddr;
    unsigned issued = 0;
    pthread_mutex_lock(&dc->lock);
    for (;;) {
        is->wake_at = low;
        while (is->inflight > low)
            pthread_cond_wait(&dc->changed, &dc->lock);
        unsigned n = 0;
        while (is->inflight + n < limit && issued < max_ranges) {
            struct dreq *d = calloc(1, sizeof(*d));
            uint32_t rs, rl;
            if (!d || !take_run(dc, &cursor, rel_end, max, min, &rs, &rl)) {
                free(d);
                break;
            }
            *d = (struct dreq){.req = {.op = BLK_DISCARD,
                                       .prio = BLK_PRIO_LOW,
                                       .off = (uint64_t)rs * F2FS_BLKSIZE,
                                       .len = (uint64_t)rl * F2FS_BLKSIZE,
                                       .done = dreq_done},
                               .dc = dc,
                               .is = is,
                               .start = rs,
                               .len = rl,
                               .next = dc->busy};
            if (dc->busy)
                dc->busy->prev = d;
            dc->busy = d;
            FOR_EACH_PIECE (dc, rs, rl, s, lo, hi) {
                (void)lo;
                (void)hi;
                dc->inflight[s]++;
                update_flags(dc, s);
            }
            dc->st_ranges++;
            dc->st_merges += rl - 1;
            is->ranges++;
            batch[n++] = &d->req;
            issued++;
        }
        if (n == 0)
            break;
        is->inflight += n;
        dc->cur_inflight += n;
        if (dc->cur_inflight > dc->st_inflight_max)
            dc->st_inflight_max = dc->cur_inflight;
        pthread_mutex_unlock(&dc->lock);
        int err = blk_submit(dc->dev, batch, n);
        pthread_mutex_lock(&dc->lock);
        if (err) { /* none was queued: drop them (discard is advisory) */
            for (unsigned i = 0; i < n; i++) {
                retire_locked(dc, (struct dreq *)batch[i], err);
                free(batch[i]);
            }
            break;
        }
    }
    is->wake_at = 0;
    while (is->inflight)
        pthread_cond_wait(&dc->changed, &dc->lock);
    pthread_mutex_unlock(&dc->lock);
    free(batch);
}

int discard_issue(struct discard_control *dc, uint32_t start, uint32_t end, uint64_t *bytes)
{
    struct issuer is = {0};
    pthread_mutex_lock(&dc->issue_lock);
    issue(dc, start, end, UINT32_MAX, 1, &is);
    pthread_mutex_unlock(&dc->issue_lock);
    if (bytes)
        *bytes = is.bytes;
    return is.err;
}

/* ---- allocation ------------------------------------------------------------------------ */

void discard_allocated(struct discard_control *dc, uint32_t blkaddr)
{
    uint32_t rel = blkaddr - dc->main_blkaddr, s = rel / SEG_BLKS;
    if (blkaddr < dc->main_blkaddr || s >= dc->main_segs)
        return;
    if (!atomic_load_explicit(&dc->flags[s], memory_order_acquire))
        return;
    unsigned b = rel % SEG_BLKS;
    pthread_mutex_lock(&dc->lock);
    if (bits_test(dc->pend[s], b)) {
        dc->pending_blocks -= bits_range(dc, dc->pend, s, b, b + 1, false);
        dc->st_cancelled++;
    }
    if (dc->inflight[s] && busy_covers(dc, blkaddr)) {
        dc->st_waits++;
        dc->alloc_waiters++;
        while (dc->inflight[s] && busy_covers(dc, blkaddr))
            pthread_cond_wait(&dc->changed, &dc->lock);
        dc->alloc_waiters--;
    }
    if (bits_test(dc->done[s], b))
        dc->done_blocks -= bits_range(dc, dc->done, s, b, b + 1, false);
    update_flags(dc, s);
    pthread_mutex_unlock(&dc->lock);
}

bool discard_is_done(struct discard_control *dc, uint32_t blkaddr)
{
    uint32_t rel = blkaddr - dc->main_blkaddr, s = rel / SEG_BLKS;
    if (blkaddr < dc->main_blkaddr || s >= dc->main_segs)
        return false;
    pthread_mutex_lock(&dc->lock);
    bool done = bits_test(dc->done[s], rel % SEG_BLKS);
    pthread_mutex_unlock(&dc->lock);
    return done;
}

/* ---- life cycle ------------------------------------------------------------------------ */

int discard_create(struct blk_dev *dev, uint32_t main_blkaddr, uint32_t main_segs,
                   const struct f2fuse_options *opts, struct discard_control **out)
{
    struct discard_control *dc = calloc(1, sizeof(*dc));
    if (!dc)
        return -ENOMEM;
    dc->dev = dev;
    dc->main_blkaddr = main_blkaddr;
    dc->main_segs = main_segs;
    dc->mode = opts->discard_mode <= F2FUSE_DISCARD_PARALLEL ? opts->discard_mode
                                                             : F2FUSE_DISCARD_PARALLEL;
    dc->qd = opts->discard_qd ? opts->discard_qd : DEFAULT_QD;
    dc->idle_ns = (uint64_t)opts->discard_idle_ms * 1000000ull;
    uint64_t max = (opts->discard_max ? opts->discard_max : DEFAULT_MAX_BYTES) / F2FS_BLKSIZE;
    dc->max_blocks = max ? (uint32_t)(max < UINT32_MAX ? max : UINT32_MAX) : 1;
    atomic_init(&dc->online, opts->discard);
    memset(dc->full, 0xFF, sizeof(dc->full));
    pthread_mutex_init(&dc->lock, NULL);
    pthread_mutex_init(&dc->issue_lock, NULL);
    pthread_cond_init(&dc->changed, NULL);
    pthread_cond_init(&dc->wake, NULL);
    dc->pend = calloc(main_segs, sizeof(*dc->pend));
    dc->done = calloc(main_segs, sizeof(*dc->done));
    dc->inflight = calloc(main_segs, sizeof(*dc->inflight));
    dc->flags = calloc(main_segs, sizeof(*dc->flags));
    dc->pend_segs = calloc((main_segs + 63) / 64 + 1, sizeof(uint64_t));
    if (!dc->pend || !dc->done || !dc->inflight || !dc->flags || !dc->pend_segs) {
        discard_free(dc);
        return -ENOMEM;
    }
    *out = dc;
    return 0;
}

void discard_free(struct discard_control *dc)
{
    if (!dc)
        return;
    pthread_mutex_lock(&dc->lock);
    while (dc->cur_inflight)
        pthread_cond_wait(&dc->changed, &dc->lock);
    pthread_mutex_unlock(&dc->lock);
    for (uint32_t s = 0; dc->pend && dc->done && s < dc->main_segs; s++) {
        bits_drop(dc, dc->pend, s);
        bits_drop(dc, dc->done, s);
    }
    free(dc->pend);
    free(dc->done);
    free(dc->inflight);
    free((void *)dc->flags);
    free(dc->pend_segs);
    pthread_mutex_destroy(&dc->lock);
    pthread_mutex_destroy(&dc->issue_lock);
    pthread_cond_destroy(&dc->changed);
    pthread_cond_destroy(&dc->wake);
    free(dc);
}

static void drop_pending_locked(struct discard_control *dc)
{
    for (uint32_t s = 0; s < dc->main_segs; s++) {
        if (!dc->pend[s])
            continue;
        bits_drop(dc, dc->pend, s);
        update_flags(dc, s);
    }
    dc->st_dropped += dc->pending_blocks;
    dc->pending_blocks = 0;
}

/* Online discard: issues the runs of ONLINE_MIN_BLOCKS or more that checkpoints queue, in
 * rounds, each time a checkpoint queued something; once told to stop, everything left, until
 * the drain deadline. */
/* Sleeps on dc->wake (new work, stop) for at most ns.  Called with dc->lock held. */
static void wait_ns(struct discard_control *dc, uint64_t ns)
{
    struct timespec until = clock_deadline(CLOCK_REALTIME, ns);
    pthread_cond_timedwait(&dc->wake, &dc->lock, &until);
}

static void *discard_thread(void *arg)
{
    struct discard_control *dc = arg;
    uint64_t seen = 0; /* the queue generation whose issuable runs are all out */
    pthread_mutex_lock(&dc->lock);
    for (;;) {
        while (!dc->stopping &&
               !(atomic_load(&dc->online) && dc->pending_blocks && dc->queue_gen != seen))
            pthread_cond_wait(&dc->wake, &dc->lock);
        if (!atomic_load(&dc->online) || !dc->pending_blocks)
            break; /* stopping with nothing (more) to do */
        bool draining = dc->stopping;
        if (draining && clock_mono_ns() >= dc->drain_until_ns) {
            drop_pending_locked(dc);
            break;
        }
        unsigned round = ROUND_RANGES;
        if (!draining && dc->idle_ns && dc->activity_ns) {
            /* io-aware: short rounds, each after discard_idle_ms without writes */
            uint64_t now = clock_mono_ns();
            uint64_t last = atomic_load_explicit(dc->activity_ns, memory_order_relaxed);
            if (!dc->deferred_since)
                dc->deferred_since = now;
            bool overdue = now - dc->deferred_since >= MAX_DEFER_NS;
            if (!overdue && now - last < dc->idle_ns) {
                dc->st_idle_waits++;
                wait_ns(dc, dc->idle_ns - (now - last));
                continue;
            }
            round = dc->qd;
        }
        uint64_t gen = dc->queue_gen;
        pthread_mutex_unlock(&dc->lock);
        struct issuer is = {0};
        pthread_mutex_lock(&dc->issue_lock);
        issue(dc, dc->main_blkaddr, UINT32_MAX, round, draining ? 1 : ONLINE_MIN_BLOCKS, &is);
        pthread_mutex_unlock(&dc->issue_lock);
        pthread_mutex_lock(&dc->lock);
        if (is.ranges < round) {
            seen = gen;
            dc->deferred_since = 0;
        }
        if (is.err && !dc->stopping) {
            /* a failing device: no hot loop, and what failed is not retried */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            pthread_cond_timedwait(&dc->wake, &dc->lock, &until);
        }
        if (!atomic_load(&dc->online))
            drop_pending_locked(dc);
    }
    pthread_mutex_unlock(&dc->lock);
    return NULL;
}

int discard_init(struct f2fuse *fs)
{
    int err = discard_create(fs->dev, fs->main_blkaddr, le32(fs->sb.segment_count_main), &fs->opts,
                             &fs->discard);
    if (err || !fs->opts.discard)
        return err;
    struct discard_control *dc = fs->discard;
    dc->activity_ns = &fs->activity_ns;
    err = -pthread_create(&dc->thread, NULL, discard_thread, dc);
    dc->thread_running = !err;
    return err;
}

void discard_destroy(struct f2fuse *fs)
{
    struct discard_control *dc = fs->discard;
    if (!dc)
        return;
    if (dc->thread_running) {
        pthread_mutex_lock(&dc->lock);
        dc->stopping = true;
        dc->drain_until_ns = clock_mono_ns();
        if (!fs_write_error(fs))
            dc->drain_until_ns += UMOUNT_DRAIN_SECONDS * NS_PER_SEC;
        pthread_cond_signal(&dc->wake);
        pthread_mutex_unlock(&dc->lock);
        pthread_join(dc->thread, NULL);
        dc->thread_running = false;
    }
    discard_free(dc);
    fs->discard = NULL;
}

/* ---- the file system's side ------------------------------------------------------------ */

void discard_checkpoint(struct f2fuse *fs)
{
    struct discard_control *dc = fs->discard;
    if (!dc || !atomic_load(&dc->online))
        return;
    uint64_t n = seg_discard_candidates(fs->seg, queue_cb, dc);
    pthread_mutex_lock(&dc->lock);
    dc->st_candidates += n;
    if (n) {
        dc->queue_gen++;
        pthread_cond_signal(&dc->wake);
    }
    pthread_mutex_unlock(&dc->lock);
}

void discard_block_allocated(struct f2fuse *fs, uint32_t blkaddr)
{
    if (fs->discard)
        discard_allocated(fs->discard, blkaddr);
}

/* Progress steps of a trim: about 200 over the range, of at least this many blocks (the
 * pipeline of parallel discards drains at each step's end). */
#define TRIM_STEPS           200u
#define TRIM_STEP_MIN_BLOCKS (64u * SEG_BLKS)

int discard_trim(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen,
                 uint64_t *trimmed, f2fuse_progress_fn fn, void *arg)
{
    if (trimmed)
        *trimmed = 0;
    int err = fs_writable(fs);
    if (err)
        return err;
    struct discard_control *dc = fs->discard;
    if (!dc)
        return -EOPNOTSUPP;
    /* As the kernel's FITRIM: a start past the device or a range under a block is EINVAL. */
    if (start >= blk_size(fs->dev) || len < F2FS_BLKSIZE)
        return -EINVAL;
    uint64_t end = start + len < start ? UINT64_MAX : start + len;
    uint64_t first = (start + F2FS_BLKSIZE - 1) / F2FS_BLKSIZE, last = end / F2FS_BLKSIZE;
    if (first < fs->main_blkaddr)
        first = fs->main_blkaddr;
    if (last > fs->main_blkend)
        last = fs->main_blkend;
    uint64_t min_blocks = (minlen + F2FS_BLKSIZE - 1) / F2FS_BLKSIZE;
    if (min_blocks > UINT32_MAX)
        min_blocks = UINT32_MAX;

    /* One issuer at a time: the background thread finishes its round first, so nothing of
     * this range is in flight and everything queued here is counted here. */
    pthread_mutex_lock(&dc->issue_lock);
    /* what was freed becomes free in a durable checkpoint; the data first, so that the
     * free space trimmed is what stays free */
    err = checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
    struct issuer is = {0};
    bool stopped = false;
    if (!err && first < last) {
        /* Everything is queued at once (so minlen sees whole extents), then issued step by
         * step with a report after each. */
        seg_free_extents(fs->seg, (uint32_t)first, (uint32_t)last, (uint32_t)min_blocks, queue_cb,
                         dc);
        uint64_t total = last - first, step = total;
        if (fn) {
            step = (total + TRIM_STEPS - 1) / TRIM_STEPS;
            if (step < TRIM_STEP_MIN_BLOCKS)
                step = TRIM_STEP_MIN_BLOCKS;
        }
        for (uint64_t at = first; at < last && !stopped; at += step) {
            uint64_t to = last - at > step ? at + step : last;
            issue(dc, (uint32_t)at, (uint32_t)to, UINT32_MAX, 1, &is);
            stopped = fn && fn(arg, (to - first) * F2FS_BLKSIZE, total * F2FS_BLKSIZE) != 0;
        }
        if (stopped) {
            /* What is still queued is simply not discarded: it stays free space. */
            pthread_mutex_lock(&dc->lock);
            drop_pending_locked(dc);
            pthread_mutex_unlock(&dc->lock);
        }
    }
    pthread_mutex_unlock(&dc->issue_lock);
    if (err)
        return err;
    pthread_mutex_lock(&dc->lock);
    dc->st_trims++;
    dc->st_trim_bytes += is.bytes;
    pthread_mutex_unlock(&dc->lock);
    if (trimmed)
        *trimmed = is.bytes;
    if (is.err)
        log_warn("trim: a discard failed: %s (%llu bytes trimmed)", strerror(-is.err),
                 (unsigned long long)is.bytes);
    if (stopped)
        return -EINTR;
    return is.err == -EOPNOTSUPP || (is.err && !is.bytes) ? is.err : 0;
}

/* ---- counters -------------------------------------------------------------------------- */

void discard_stats(struct discard_control *dc, stat_emit_fn emit, void *sink)
{
    pthread_mutex_lock(&dc->lock);
    uint64_t v[] = {atomic_load(&dc->online),
                    dc->mode,
                    (uint64_t)dc->max_blocks * F2FS_BLKSIZE,
                    dc->qd,
                    dc->st_candidates,
                    dc->st_queued,
                    dc->st_skipped_done,
                    dc->pending_blocks,
                    dc->st_ranges,
                    dc->st_bytes,
                    dc->st_merges,
                    dc->st_splits,
                    dc->st_errors,
                    dc->cur_inflight,
                    dc->st_inflight_max,
                    dc->st_cancelled,
                    dc->st_waits,
                    dc->st_dropped,
                    dc->st_trims,
                    dc->st_trim_bytes,
                    dc->done_blocks,
                    dc->idle_ns / 1000000u,
                    dc->st_idle_waits,
                    dc->bitmaps * sizeof(dc->full) +
                        (uint64_t)dc->main_segs * (2 * sizeof(uint64_t *) + sizeof(uint16_t) + 1)};
    pthread_mutex_unlock(&dc->lock);
    static const char *const names[] = {
        "discard.online",        "discard.mode",     "discard.max_bytes",    "discard.queue_depth",
        "discard.candidates",    "discard.queued",   "discard.skipped_done", "discard.pending",
        "discard.ranges_issued", "discard.bytes",    "discard.merges",       "discard.splits",
        "discard.errors",        "discard.inflight", "discard.inflight_max", "discard.cancelled",
        "discard.alloc_waits",   "discard.dropped",  "discard.fitrim.calls", "discard.fitrim.bytes",
        "discard.done_blocks",   "discard.idle_ms",  "discard.idle_waits",   "discard.map_bytes"};
    static_assert(sizeof(names) / sizeof(names[0]) == sizeof(v) / sizeof(v[0]), "counters");
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        emit(sink, names[i], v[i]);
}

void discard_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    if (fs->discard)
        discard_stats(fs->discard, emit, sink);
}
