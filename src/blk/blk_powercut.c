/* Power-cut emulation (blk_powercut.h): a layer on top of the device.  It counts the
 * caller's writes, keeps an undo log of the old contents under every write not yet durable
 * (oldest first), and at the cut replays the log backwards.  It decides before every other
 * layer: after the cut nothing reaches the device.
 *
 * What the layer needs to know of a request in flight (a write's log entry, what a flush
 * covers) lives in a table of its own keyed by the request: the request carries only the
 * BLK_REQF_LAYER mark that makes blk.c call write_start and complete for it. */
#include "blk/blk_powercut.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blk/blk_internal.h"
#include "util/log.h"

enum pc_state {
    PC_ARMED,   /* before the cut */
    PC_CUTTING, /* cut: waiting for the writes in flight to land before undoing */
    PC_DONE,    /* undone: the device holds its post-power-failure content */
};

/* The old contents of the blocks one not-yet-durable write touches. */
struct pc_undo {
    struct pc_undo *prev, *next; /* log order: the order writes were handed to the device */
    uint64_t off, len;           /* block-aligned start; len stops at the end of the device */
    bool completed;
    uint64_t completed_seq; /* pc->completed counting this write's completion */
    uint8_t *old;
};

/* A pre-cut write or flush in flight. */
struct pc_watch {
    struct pc_watch *next; /* hash chain */
    const struct blk_req *req;
    struct pc_undo *undo; /* write: its log entry (NULL until a read-modify-write's capture) */
    uint64_t flush_cover; /* flush: it makes the writes completed up to here durable */
};

#define PC_WATCH_BUCKETS 256

struct powercut {
    struct blk_layer layer; /* first: the layer is the powercut */
    bool torn;
    uint64_t after;
    atomic_int state; /* enum pc_state; written under lock */
    atomic_uint_fast64_t dropped;
    atomic_uint_fast64_t reverted_blocks;
    atomic_uint_fast64_t undo_bytes;
    pthread_mutex_t lock; /* everything below */
    uint64_t writes;      /* caller writes admitted: the cut falls on the after-th */
    uint64_t rng;
    uint64_t completed;      /* write completions so far: a flush covers those before it */
    uint64_t writes_pending; /* pre-cut writes not yet completed: the cut waits for them */
    struct pc_undo *log_head, *log_tail;
    struct blk_req *parked_head, *parked_tail; /* arrived while cutting, finish after undo */
    struct pc_watch *watch[PC_WATCH_BUCKETS];
};

/* splitmix64: any seed, 0 included, gives a full-quality stream */
static uint64_t pc_random(struct powercut *pc)
{
    uint64_t z = (pc->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the table of requests in flight --------------------------------------------- */

static struct pc_watch **watch_bucket(struct powercut *pc, const struct blk_req *req)
{
    uint64_t h = (uint64_t)(uintptr_t)req * 0x9e3779b97f4a7c15ull;
    return &pc->watch[h >> 56]; /* 256 buckets */
}

static struct pc_watch *watch_add_locked(struct powercut *pc, struct blk_req *req)
{
    struct pc_watch *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    struct pc_watch **b = watch_bucket(pc, req);
    w->req = req;
    w->next = *b;
    *b = w;
    req->flags |= BLK_REQF_LAYER;
    return w;
}

static struct pc_watch *watch_find_locked(struct powercut *pc, const struct blk_req *req)
{
    struct pc_watch *w = *watch_bucket(pc, req);
    while (w && w->req != req)
        w = w->next;
    return w;
}

/* Takes req's entry out of the table; NULL when the layer does not watch req. */
static struct pc_watch *watch_take_locked(struct powercut *pc, const struct blk_req *req)
{
    struct pc_watch **p = watch_bucket(pc, req);
    while (*p && (*p)->req != req)
        p = &(*p)->next;
    struct pc_watch *w = *p;
    if (w)
        *p = w->next;
    return w;
}

/* ---- the undo log ------------------------------------------------------------------ */

/* Moves a whole range with plain pread/pwrite on the device's descriptor: the undo log
 * must not go through the request machinery it is watching.  0 or -errno. */
static int pc_io(struct blk_dev *dev, bool write, uint8_t *buf, uint64_t off, uint64_t len)
{
    return blk_fd_io(dev->fd, write, buf, len, blk_file_pos(dev, off));
}

static void pc_log_drop_locked(struct powercut *pc, struct pc_undo *u)
{
    if (u->prev)
        u->prev->next = u->next;
    else
        pc->log_head = u->next;
    if (u->next)
        u->next->prev = u->prev;
    else
        pc->log_tail = u->prev;
    atomic_fetch_sub(&pc->undo_bytes, u->len);
    free(u->old);
    free(u);
}

/* Saves what the blocks under the write hold now, as the newest log entry.  Runs right
 * before the write goes to the backend, so a block written twice is logged in the order the
 * device saw the writes (two overlapping writes in flight at once have no order on the
 * device either; the log then follows the order of capture). */
static int pc_capture_locked(struct powercut *pc, struct pc_watch *w, const struct blk_req *req)
{
    struct blk_dev *dev = pc->layer.dev;
    uint64_t start = blk_align_down(req->off), end = blk_align_up(req->off + req->len);
    if (end > dev->size)
        end = dev->size; /* psync accepts a size that is not a multiple of 4096 */
    struct pc_undo *u = calloc(1, sizeof(*u));
    uint8_t *old = u ? blk_alloc_buf(end - start) : NULL;
    if (!old) {
        free(u);
        return -ENOMEM;
    }
    int ret = pc_io(dev, false, old, start, end - start);
    if (ret < 0) {
        free(old);
        free(u);
        return ret;
    }
    u->off = start;
    u->len = end - start;
    u->old = old;
    u->prev = pc->log_tail;
    if (pc->log_tail)
        pc->log_tail->next = u;
    else
        pc->log_head = u;
    pc->log_tail = u;
    atomic_fetch_add(&pc->undo_bytes, u->len);
    w->undo = u;
    return 0;
}

static void pc_write_back(struct powercut *pc, struct pc_undo *u, uint64_t first, uint64_t count)
{
    uint64_t from = first * BLK_ALIGN, to = (first + count) * BLK_ALIGN;
    if (to > u->len)
        to = u->len;
    int ret = pc_io(pc->layer.dev, true, u->old + from, u->off + from, to - from);
    if (ret < 0)
        log_err("power cut: undoing %llu bytes at %llu: %s", (unsigned long long)(to - from),
                (unsigned long long)(u->off + from), strerror(-ret));
    else
        atomic_fetch_add(&pc->reverted_blocks, count);
}

/* The cut proper, with no pre-cut write in flight: replays the log newest first, so a
 * block written several times ends as it was before the oldest non-durable write.  Torn:
 * each block of each entry is reverted or kept by a coin flip, drawn in log order from
 * the newest entry, so a seed always tears the same way. */
static void pc_cut_locked(struct powercut *pc)
{
    while (pc->log_tail) {
        struct pc_undo *u = pc->log_tail;
        uint64_t blocks = (u->len + BLK_ALIGN - 1) / BLK_ALIGN, run = 0;
        for (uint64_t i = 0; i < blocks; i++) {
            bool revert = !pc->torn || (pc_random(pc) >> 63);
            if (revert)
                run++;
            if (run && (!revert || i + 1 == blocks)) {
                uint64_t end = revert ? i + 1 : i;
                pc_write_back(pc, u, end - run, run);
                run = 0;
            }
        }
        pc_log_drop_locked(pc, u);
    }
    atomic_store(&pc->state, PC_DONE);
    log_info("power cut emulated at write %llu: %llu block(s) undone",
             (unsigned long long)pc->after, (unsigned long long)atomic_load(&pc->reverted_blocks));
}

/* What a write, flush or discard gets after the cut: success, with no I/O. */
static int64_t pc_dropped_result(const struct blk_req *req)
{
    return req->op == BLK_FLUSH ? 0 : (int64_t)req->len;
}

/* ---- the layer's hooks ------------------------------------------------------------- */

/* Before the cut, a write or flush the device runs is watched: a write has its old
 * contents logged (a read-modify-write's once its edges are read, in write_start) and
 * counts until it completes; a flush notes which completed writes it covers. */
static int pc_watch_locked(struct powercut *pc, struct blk_req *req)
{
    struct pc_watch *w = watch_add_locked(pc, req);
    if (!w)
        return -ENOMEM;
    if (req->op == BLK_FLUSH) {
        w->flush_cover = pc->completed;
        return 0;
    }
    int ret = blk_write_needs_rmw(pc->layer.dev, req) ? 0 : pc_capture_locked(pc, w, req);
    if (ret < 0) {
        free(watch_take_locked(pc, req));
        req->flags &= ~(unsigned)BLK_REQF_LAYER;
        return ret;
    }
    pc->writes_pending++;
    return 0;
}

/* Counts writes, makes the cut, and watches the pre-cut writes and flushes.  All under one
 * lock, so no write can slip between its count and its log entry.  Reads pass: they see
 * the device as it is, before the cut and after. */
static enum blk_admit pc_admit(struct blk_layer *layer, struct blk_req *req)
{
    struct powercut *pc = (struct powercut *)layer;
    if (req->op == BLK_READ)
        return blk_admit_below(layer, req);
    pthread_mutex_lock(&pc->lock);
    int state = atomic_load(&pc->state);
    if (req->op == BLK_WRITE) {
        uint64_t n = ++pc->writes;
        if (state == PC_ARMED && n == pc->after)
            atomic_store(&pc->state, state = PC_CUTTING);
        if (state != PC_ARMED)
            atomic_fetch_add(&pc->dropped, 1);
    }
    enum blk_admit v = BLK_ADMIT_PRESET;
    if (state == PC_ARMED) {
        v = blk_admit_below(layer, req);
        if (v == BLK_ADMIT_RUN && (req->op == BLK_WRITE || req->op == BLK_FLUSH)) {
            int ret = pc_watch_locked(pc, req);
            if (ret < 0) {
                blk_req_preset(req, ret);
                v = BLK_ADMIT_PRESET;
            }
        }
    } else if (state == PC_CUTTING && pc->writes_pending) {
        /* finished after the undo, so whoever waits for it sees the final device */
        req->next = NULL;
        if (pc->parked_tail)
            pc->parked_tail->next = req;
        else
            pc->parked_head = req;
        pc->parked_tail = req;
        v = BLK_ADMIT_HELD;
    } else {
        if (state == PC_CUTTING)
            pc_cut_locked(pc); /* nothing in flight: nobody parked either */
        blk_req_preset(req, pc_dropped_result(req));
    }
    pthread_mutex_unlock(&pc->lock);
    return v;
}

static int pc_write_start(struct blk_layer *layer, struct blk_req *req)
{
    struct powercut *pc = (struct powercut *)layer;
    pthread_mutex_lock(&pc->lock);
    struct pc_watch *w = watch_find_locked(pc, req);
    int ret = w && !w->undo ? pc_capture_locked(pc, w, req) : 0;
    pthread_mutex_unlock(&pc->lock);
    return ret;
}

/* A FUA write completed before the cut: its data is durable, so its old contents will not
 * come back, nor will those of earlier writes it covers whole (undone first, they would
 * overwrite it).  Other writes stay as volatile as they were: FUA makes no flush. */
static void pc_fua_durable_locked(struct powercut *pc, struct pc_undo *fua)
{
    uint64_t lo = fua->off, hi = fua->off + fua->len;
    for (struct pc_undo *u = pc->log_head; u;) {
        struct pc_undo *next = u->next;
        bool last = u == fua; /* later writes are newer than it: they stay */
        if (last || (u->completed && u->off >= lo && u->off + u->len <= hi))
            pc_log_drop_locked(pc, u);
        u = last ? NULL : next;
    }
}

/* A pre-cut write completed: it now counts for later flushes, and when it is the last one
 * the cut was waiting for, the cut runs here (on whichever thread completes it: the uring
 * completion thread cannot wait for in-flight writes, so nobody waits).  A pre-cut flush
 * completed: the writes that had completed when it was submitted are durable, their old
 * contents no longer needed.  After the cut power is gone, so a flush completing then makes
 * nothing durable. */
static void pc_complete(struct blk_layer *layer, struct blk_req *req)
{
    struct powercut *pc = (struct powercut *)layer;
    struct blk_req *parked = NULL;
    pthread_mutex_lock(&pc->lock);
    struct pc_watch *w = watch_take_locked(pc, req);
    if (w && req->op == BLK_WRITE) {
        pc->completed++;
        if (w->undo) {
            w->undo->completed = true;
            w->undo->completed_seq = pc->completed;
        }
        if (req->fua && req->result >= 0 && atomic_load(&pc->state) == PC_ARMED && w->undo)
            pc_fua_durable_locked(pc, w->undo);
        if (--pc->writes_pending == 0 && atomic_load(&pc->state) == PC_CUTTING) {
            pc_cut_locked(pc);
            parked = pc->parked_head;
            pc->parked_head = pc->parked_tail = NULL;
        }
    } else if (w && req->result >= 0 && atomic_load(&pc->state) == PC_ARMED) {
        struct pc_undo *u = pc->log_head;
        while (u) {
            struct pc_undo *next = u->next;
            if (u->completed && u->completed_seq <= w->flush_cover)
                pc_log_drop_locked(pc, u);
            u = next;
        }
    }
    pthread_mutex_unlock(&pc->lock);
    free(w);
    while (parked) {
        struct blk_req *r = parked;
        parked = r->next; /* done() may reuse r */
        r->next = NULL;
        r->result = pc_dropped_result(r);
        blk_req_complete(layer->dev, r);
    }
}

static bool pc_cut_done(const struct powercut *pc)
{
    return pc && atomic_load(&pc->state) == PC_DONE;
}

static void pc_emit_stats(const struct blk_layer *layer, stat_emit_fn emit, void *sink)
{
    const struct powercut *pc = (const struct powercut *)layer;
    emit(sink, "blk.powercut.armed", pc ? 1 : 0);
    emit(sink, "blk.powercut.cut", pc_cut_done(pc) ? 1 : 0);
    emit(sink, "blk.powercut.dropped_writes", pc ? atomic_load(&pc->dropped) : 0);
    emit(sink, "blk.powercut.reverted_blocks", pc ? atomic_load(&pc->reverted_blocks) : 0);
    emit(sink, "blk.powercut.undo_bytes", pc ? atomic_load(&pc->undo_bytes) : 0);
}

static void pc_destroy(struct blk_layer *layer)
{
    struct powercut *pc = (struct powercut *)layer;
    while (pc->log_head)
        pc_log_drop_locked(pc, pc->log_head);
    for (unsigned i = 0; i < PC_WATCH_BUCKETS; i++) {
        struct pc_watch *w = pc->watch[i];
        while (w) {
            struct pc_watch *next = w->next;
            free(w);
            w = next;
        }
    }
    pthread_mutex_destroy(&pc->lock);
    free(pc);
}

const struct blk_layer_ops blk_powercut_layer_ops = {
    .name = "powercut",
    .depth = 0,
    .admit = pc_admit,
    .write_start = pc_write_start,
    .complete = pc_complete,
    .emit_stats = pc_emit_stats,
    .destroy = pc_destroy,
};

int blk_powercut_arm(struct blk_dev *dev, const struct blk_powercut_options *opts)
{
    if (!opts->after || dev->read_only)
        return 0; /* a read-only device has nothing to lose */
    struct powercut *pc = blk_layer_new(dev, &blk_powercut_layer_ops, sizeof(*pc));
    if (!pc)
        return -ENOMEM;
    pc->after = opts->after;
    pc->torn = opts->torn;
    pc->rng = opts->seed;
    pthread_mutex_init(&pc->lock, NULL);
    int ret = blk_layer_push(&pc->layer);
    if (ret < 0)
        pc_destroy(&pc->layer);
    return ret;
}

bool blk_powercut_happened(const struct blk_dev *dev)
{
    return pc_cut_done((const struct powercut *)blk_layer_find(dev, &blk_powercut_layer_ops));
}
