/* Block layer, common part: open/close, request admission and accounting, fault injection,
 * the bounce path for unaligned requests, and the synchronous helpers. */
#include "blk/blk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "blk/blk_sparse.h"
#include "util/log.h"

static bool is_aligned(uint64_t v)
{
    return (v & (BLK_ALIGN - 1)) == 0;
}

static uint64_t align_down(uint64_t v)
{
    return v & ~(uint64_t)(BLK_ALIGN - 1);
}

static uint64_t align_up(uint64_t v)
{
    return align_down(v + BLK_ALIGN - 1);
}

void *blk_alloc_buf(size_t len)
{
    void *p = NULL;
    if (posix_memalign(&p, BLK_ALIGN, len ? len : BLK_ALIGN) != 0)
        return NULL;
    return p;
}

/* ---- counters ---------------------------------------------------------------------- */

static void inflight_inc(struct blk_dev *dev)
{
    uint64_t now = atomic_fetch_add(&dev->stats.inflight, 1) + 1;
    uint64_t max = atomic_load(&dev->stats.inflight_max);
    while (now > max && !atomic_compare_exchange_weak(&dev->stats.inflight_max, &max, now))
        ;
}

static void inflight_dec(struct blk_dev *dev)
{
    if (atomic_fetch_sub(&dev->stats.inflight, 1) == 1) {
        pthread_mutex_lock(&dev->idle_lock);
        pthread_cond_broadcast(&dev->idle_cond);
        pthread_mutex_unlock(&dev->idle_lock);
    }
}

static void pc_write_done(struct blk_dev *dev, struct blk_req *req);
static void pc_flush_done(struct blk_dev *dev, struct blk_req *req);

/* Completes one of the caller's requests.  The counters are final before done() runs, so
 * a caller woken by done() reads them exact.  blk_close may then proceed, but it cannot free
 * the device under a running done(): uring's fini joins the completion thread, and psync
 * runs done() inside the caller's own blk_submit. */
static void finish_user(struct blk_dev *dev, struct blk_req *req)
{
    /* before done(): the caller must not see a flush complete before it counts */
    if (req->flags & BLK_REQF_PC_WRITE)
        pc_write_done(dev, req);
    else if (req->flags & BLK_REQF_PC_FLUSH)
        pc_flush_done(dev, req);
    enum blk_op op = req->op;
    int64_t result = req->result;
    atomic_fetch_add(&dev->stats.ops[op], 1);
    if (result < 0)
        atomic_fetch_add(&dev->stats.errors[op], 1);
    else
        atomic_fetch_add(&dev->stats.bytes[op], (uint64_t)result);
    inflight_dec(dev);
    req->done(req);
}

void blk_req_complete(struct blk_dev *dev, struct blk_req *req)
{
    if (req->flags & BLK_REQF_INTERNAL)
        req->done(req);
    else
        finish_user(dev, req);
}

void blk_emit_stats(struct blk_dev *dev, stat_emit_fn emit, void *sink)
{
    static const char *const op_names[BLK_OP_COUNT] = {"read", "write", "flush", "discard"};
    char name[64];
    for (int op = 0; op < BLK_OP_COUNT; op++) {
        snprintf(name, sizeof(name), "blk.%s.ops", op_names[op]);
        emit(sink, name, atomic_load(&dev->stats.ops[op]));
        snprintf(name, sizeof(name), "blk.%s.bytes", op_names[op]);
        emit(sink, name, atomic_load(&dev->stats.bytes[op]));
        snprintf(name, sizeof(name), "blk.%s.errors", op_names[op]);
        emit(sink, name, atomic_load(&dev->stats.errors[op]));
    }
    emit(sink, "blk.merged", atomic_load(&dev->stats.merged));
    emit(sink, "blk.inflight", atomic_load(&dev->stats.inflight));
    emit(sink, "blk.inflight_max", atomic_load(&dev->stats.inflight_max));
    emit(sink, "blk.bounced", atomic_load(&dev->stats.bounced));
    emit(sink, "blk.short_resubmits", atomic_load(&dev->stats.short_resubmits));
    emit(sink, "blk.ioprio_rejected", atomic_load(&dev->stats.ioprio_rejected));
    emit(sink, "blk.bw_limit", atomic_load(&dev->bw_limit));
    emit(sink, "blk.bw_wait_ms", atomic_load(&dev->bw_wait_ns) / 1000000);
    emit(sink, "blk.bw_queue_ms.high", atomic_load(&dev->bw_class_wait_ns[0]) / 1000000);
    emit(sink, "blk.bw_queue_ms.normal", atomic_load(&dev->bw_class_wait_ns[1]) / 1000000);
    emit(sink, "blk.bw_queue_ms.low", atomic_load(&dev->bw_class_wait_ns[2]) / 1000000);
    emit(sink, "blk.bw_queue_ms.idle", atomic_load(&dev->bw_class_wait_ns[3]) / 1000000);
    emit(sink, "blk.direct", dev->direct ? 1 : 0);
    emit(sink, "blk.faults_fired", blk_faults_fired(dev));
    emit(sink, "blk.powercut.armed", dev->pc.armed ? 1 : 0);
    emit(sink, "blk.powercut.cut", blk_powercut_happened(dev) ? 1 : 0);
    emit(sink, "blk.powercut.dropped_writes", atomic_load(&dev->pc.dropped));
    emit(sink, "blk.powercut.reverted_blocks", atomic_load(&dev->pc.reverted_blocks));
    emit(sink, "blk.powercut.undo_bytes", atomic_load(&dev->pc.undo_bytes));
}

/* ---- fault injection --------------------------------------------------------------- */

void blk_inject_fault_mode(struct blk_dev *dev, enum blk_op op, uint64_t nth, int err,
                           unsigned mode)
{
    if ((unsigned)op >= BLK_OP_COUNT)
        return;
    /* err and mode first: a submitter that sees the countdown hit zero must see them */
    atomic_store(&dev->faults[op].err, err);
    atomic_store(&dev->faults[op].mode, mode);
    atomic_store(&dev->faults[op].dead, false);
    atomic_store(&dev->faults[op].countdown, nth);
}

void blk_inject_fault(struct blk_dev *dev, enum blk_op op, uint64_t nth, int err)
{
    blk_inject_fault_mode(dev, op, nth, err, 0);
}

uint64_t blk_faults_fired(const struct blk_dev *dev)
{
    uint64_t n = 0;
    for (int op = 0; op < BLK_OP_COUNT; op++)
        n += atomic_load(&dev->faults[op].fired);
    return n;
}

/* The result an injected fault gives this request: -err, a short count, or 1 when no
 * fault applies. */
static int64_t take_fault(struct blk_dev *dev, const struct blk_req *req)
{
    struct blk_fault *f = &dev->faults[req->op];
    bool fire = atomic_load(&f->dead);
    uint64_t left = atomic_load(&f->countdown);
    while (!fire && left) {
        if (atomic_compare_exchange_weak(&f->countdown, &left, left - 1)) {
            fire = left == 1;
            break;
        }
    }
    if (!fire)
        return 1;
    unsigned mode = atomic_load(&f->mode);
    if (mode & BLK_FAULT_STICKY)
        atomic_store(&f->dead, true);
    atomic_fetch_add(&f->fired, 1);
    if ((mode & BLK_FAULT_SHORT) && (req->op == BLK_READ || req->op == BLK_WRITE) && req->len)
        return (int64_t)((req->len / 2) & ~(uint64_t)511);
    return -atomic_load(&f->err);
}

/* ---- power-cut emulation ----------------------------------------------------------- */

/* The old contents of the blocks one not-yet-durable write touches. */
struct blk_undo {
    struct blk_undo *prev, *next; /* log order: the order writes were handed to the device */
    uint64_t off, len;            /* block-aligned start; len stops at the end of the device */
    bool completed;
    uint64_t completed_seq; /* pc.completed counting this write's completion */
    uint8_t *old;
};

static void pc_init(struct blk_dev *dev, const struct blk_options *opts)
{
    struct blk_powercut *pc = &dev->pc;
    pthread_mutex_init(&pc->lock, NULL);
    /* a read-only device has nothing to lose */
    pc->armed = opts->powercut_after != 0 && !opts->read_only;
    pc->after = opts->powercut_after;
    pc->torn = opts->powercut_torn;
    pc->rng = opts->powercut_seed;
}

/* splitmix64: any seed, 0 included, gives a full-quality stream */
static uint64_t pc_random(struct blk_powercut *pc)
{
    uint64_t z = (pc->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Moves a whole range with plain pread/pwrite on the device's descriptor: the undo log
 * must not go through the request machinery it is watching.  0 or -errno. */
static int pc_io(struct blk_dev *dev, bool write, uint8_t *buf, uint64_t off, uint64_t len)
{
    uint64_t done = 0;
    while (done < len) {
        uint64_t want = len - done > BLK_MAX_XFER ? BLK_MAX_XFER : len - done;
        ssize_t r = write ? pwrite(dev->fd, buf + done, want, blk_file_pos(dev, off + done))
                          : pread(dev->fd, buf + done, want, blk_file_pos(dev, off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO;
        done += (uint64_t)r;
    }
    return 0;
}

static void pc_log_drop_locked(struct blk_powercut *pc, struct blk_undo *u)
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

/* Saves what the blocks under [off, off + len) hold now, as the newest log entry.  Runs
 * right before the write goes to the backend, so a block written twice is logged in the
 * order the device saw the writes (two overlapping writes in flight at once have no order
 * on the device either; the log then follows the order of capture). */
static int pc_capture_locked(struct blk_dev *dev, struct blk_req *req, uint64_t off,
                             uint64_t len)
{
    struct blk_powercut *pc = &dev->pc;
    uint64_t start = align_down(off), end = align_up(off + len);
    if (end > dev->size)
        end = dev->size; /* psync accepts a size that is not a multiple of 4096 */
    struct blk_undo *u = calloc(1, sizeof(*u));
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
    req->undo = u;
    return 0;
}

static int pc_capture(struct blk_dev *dev, struct blk_req *req, uint64_t off, uint64_t len)
{
    pthread_mutex_lock(&dev->pc.lock);
    int ret = pc_capture_locked(dev, req, off, len);
    pthread_mutex_unlock(&dev->pc.lock);
    return ret;
}

static void pc_write_back(struct blk_dev *dev, struct blk_undo *u, uint64_t first,
                          uint64_t count)
{
    uint64_t from = first * BLK_ALIGN, to = (first + count) * BLK_ALIGN;
    if (to > u->len)
        to = u->len;
    int ret = pc_io(dev, true, u->old + from, u->off + from, to - from);
    if (ret < 0)
        log_err("power cut: undoing %llu bytes at %llu: %s", (unsigned long long)(to - from),
                (unsigned long long)(u->off + from), strerror(-ret));
    else
        atomic_fetch_add(&dev->pc.reverted_blocks, count);
}

/* The cut proper, with no pre-cut write in flight: replays the log newest first, so a
 * block written several times ends as it was before the oldest non-durable write.  Torn:
 * each block of each entry is reverted or kept by a coin flip, drawn in log order from
 * the newest entry, so a seed always tears the same way. */
static void pc_cut_locked(struct blk_dev *dev)
{
    struct blk_powercut *pc = &dev->pc;
    while (pc->log_tail) {
        struct blk_undo *u = pc->log_tail;
        uint64_t blocks = (u->len + BLK_ALIGN - 1) / BLK_ALIGN, run = 0;
        for (uint64_t i = 0; i < blocks; i++) {
            bool revert = !pc->torn || (pc_random(pc) >> 63);
            if (revert)
                run++;
            if (run && (!revert || i + 1 == blocks)) {
                uint64_t end = revert ? i + 1 : i;
                pc_write_back(dev, u, end - run, run);
                run = 0;
            }
        }
        pc_log_drop_locked(pc, u);
    }
    atomic_store(&pc->state, BLK_PC_DONE);
    log_info("power cut emulated at write %llu: %llu block(s) undone",
             (unsigned long long)pc->after, (unsigned long long)atomic_load(&pc->reverted_blocks));
}

/* What a write, flush or discard gets after the cut: success, with no I/O. */
static int64_t pc_dropped_result(const struct blk_req *req)
{
    return req->op == BLK_FLUSH ? 0 : (int64_t)req->len;
}

static void preset(struct blk_req *req, int64_t result)
{
    req->flags |= BLK_REQF_PRESET;
    req->preset_result = result;
}

enum pc_verdict { PC_RUN, PC_PRESET, PC_PARKED };

static bool needs_rmw(const struct blk_dev *dev, const struct blk_req *req);
static int64_t admission(struct blk_dev *dev, const struct blk_req *req);

/* Admission of a write, flush or discard in power-cut mode: counts writes, makes the cut,
 * logs the old contents under pre-cut writes and notes what pre-cut flushes cover.  All
 * under one lock, so no write can slip between its count and its log entry. */
static enum pc_verdict pc_admission(struct blk_dev *dev, struct blk_req *req)
{
    struct blk_powercut *pc = &dev->pc;
    pthread_mutex_lock(&pc->lock);
    int state = atomic_load(&pc->state);
    if (req->op == BLK_WRITE) {
        uint64_t n = atomic_fetch_add(&pc->writes, 1) + 1;
        if (state == BLK_PC_ARMED && n == pc->after)
            atomic_store(&pc->state, state = BLK_PC_CUTTING);
        if (state != BLK_PC_ARMED)
            atomic_fetch_add(&pc->dropped, 1);
    }
    enum pc_verdict v = PC_PRESET;
    if (state == BLK_PC_ARMED) {
        int64_t verdict = admission(dev, req);
        if (verdict == 1 && req->op == BLK_WRITE) {
            /* a read-modify-write logs once its edges are read, right before its write */
            int ret = needs_rmw(dev, req) ? 0 : pc_capture_locked(dev, req, req->off, req->len);
            if (ret < 0) {
                verdict = ret;
            } else {
                req->flags |= BLK_REQF_PC_WRITE;
                pc->writes_pending++;
            }
        } else if (verdict == 1 && req->op == BLK_FLUSH) {
            req->flags |= BLK_REQF_PC_FLUSH;
            req->flush_cover = pc->completed;
        }
        if (verdict == 1)
            v = PC_RUN;
        else
            preset(req, verdict);
    } else if (state == BLK_PC_CUTTING && pc->writes_pending) {
        /* finished after the undo, so whoever waits for it sees the final device */
        req->next = NULL;
        if (pc->parked_tail)
            pc->parked_tail->next = req;
        else
            pc->parked_head = req;
        pc->parked_tail = req;
        v = PC_PARKED;
    } else {
        if (state == BLK_PC_CUTTING)
            pc_cut_locked(dev); /* nothing in flight: nobody parked either */
        preset(req, pc_dropped_result(req));
    }
    pthread_mutex_unlock(&pc->lock);
    return v;
}

/* A pre-cut write completed: it now counts for later flushes, and when it is the last one
 * the cut was waiting for, the cut runs here (on whichever thread completes it: the uring
 * completion thread cannot wait for in-flight writes, so nobody waits). */
static void pc_write_done(struct blk_dev *dev, struct blk_req *req)
{
    struct blk_powercut *pc = &dev->pc;
    struct blk_req *parked = NULL;
    pthread_mutex_lock(&pc->lock);
    pc->completed++;
    if (req->undo) {
        req->undo->completed = true;
        req->undo->completed_seq = pc->completed;
        req->undo = NULL;
    }
    if (--pc->writes_pending == 0 && atomic_load(&pc->state) == BLK_PC_CUTTING) {
        pc_cut_locked(dev);
        parked = pc->parked_head;
        pc->parked_head = pc->parked_tail = NULL;
    }
    pthread_mutex_unlock(&pc->lock);
    while (parked) {
        struct blk_req *r = parked;
        parked = r->next; /* done() may reuse r */
        r->next = NULL;
        r->result = pc_dropped_result(r);
        finish_user(dev, r);
    }
}

/* A pre-cut flush completed: the writes that had completed when it was submitted are
 * durable, their old contents no longer needed.  After the cut power is gone, so a flush
 * completing then makes nothing durable. */
static void pc_flush_done(struct blk_dev *dev, struct blk_req *req)
{
    struct blk_powercut *pc = &dev->pc;
    if (req->result < 0)
        return;
    pthread_mutex_lock(&pc->lock);
    if (atomic_load(&pc->state) == BLK_PC_ARMED) {
        struct blk_undo *u = pc->log_head;
        while (u) {
            struct blk_undo *next = u->next;
            if (u->completed && u->completed_seq <= req->flush_cover)
                pc_log_drop_locked(pc, u);
            u = next;
        }
    }
    pthread_mutex_unlock(&pc->lock);
}

static void pc_fini(struct blk_dev *dev)
{
    while (dev->pc.log_head)
        pc_log_drop_locked(&dev->pc, dev->pc.log_head);
    pthread_mutex_destroy(&dev->pc.lock);
}

bool blk_powercut_happened(const struct blk_dev *dev)
{
    return atomic_load(&dev->pc.state) == BLK_PC_DONE;
}

uint64_t blk_write_count(const struct blk_dev *dev)
{
    return atomic_load(&dev->pc.writes);
}

/* ---- bounce path ------------------------------------------------------------------- */

/* One unaligned request in flight: the aligned range covering it and the internal
 * requests that move that range. */
struct blk_bounce {
    struct blk_dev *dev;
    struct blk_req *user;
    uint64_t aoff, alen;
    uint8_t *buf;
    struct blk_req io[2]; /* the transfer, or a read-modify-write's edge reads */
    atomic_uint pending;  /* edge reads outstanding */
    atomic_int first_err;
    struct blk_bounce *next; /* rmw queue */
};

static struct blk_bounce *bounce_new(struct blk_dev *dev, struct blk_req *user)
{
    struct blk_bounce *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->dev = dev;
    b->user = user;
    b->aoff = align_down(user->off);
    b->alen = align_up(user->off + user->len) - b->aoff;
    b->buf = blk_alloc_buf(b->alen);
    if (!b->buf) {
        free(b);
        return NULL;
    }
    user->bounce = b;
    return b;
}

static void bounce_free(struct blk_bounce *b)
{
    b->user->bounce = NULL;
    free(b->buf);
    free(b);
}

static struct blk_req *bounce_io(struct blk_bounce *b, unsigned i, enum blk_op op,
                                 uint64_t off, uint64_t len, blk_done_fn done)
{
    struct blk_req *r = &b->io[i];
    memset(r, 0, sizeof(*r));
    r->op = op;
    r->prio = b->user->prio;
    r->off = off;
    r->len = len;
    r->buf = b->buf + (off - b->aoff);
    r->done = done;
    r->private = b;
    r->flags = BLK_REQF_INTERNAL;
    return r;
}

static void bounce_read_done(struct blk_req *io)
{
    struct blk_bounce *b = io->private;
    struct blk_req *user = b->user;
    struct blk_dev *dev = b->dev;
    if (io->result < 0) {
        user->result = io->result;
    } else {
        /* the transfer may stop early at the end of the device */
        uint64_t skip = user->off - b->aoff;
        uint64_t got = (uint64_t)io->result > skip ? (uint64_t)io->result - skip : 0;
        if (got > user->len)
            got = user->len;
        memcpy(user->buf, b->buf + skip, got);
        user->result = (int64_t)got;
    }
    bounce_free(b);
    finish_user(dev, user);
}

/* Only the buffer was unaligned: one aligned write of a copy. */
static void bounce_write_done(struct blk_req *io)
{
    struct blk_bounce *b = io->private;
    struct blk_req *user = b->user;
    struct blk_dev *dev = b->dev;
    user->result = io->result < 0 ? io->result : (int64_t)user->len;
    bounce_free(b);
    finish_user(dev, user);
}

static void rmw_start(struct blk_bounce *b);

/* Ends the active read-modify-write and starts the next queued one. */
static void rmw_finish(struct blk_bounce *b, int64_t result)
{
    struct blk_dev *dev = b->dev;
    struct blk_req *user = b->user;
    pthread_mutex_lock(&dev->rmw_lock);
    struct blk_bounce *next = dev->rmw_head;
    if (next) {
        dev->rmw_head = next->next;
        if (!dev->rmw_head)
            dev->rmw_tail = NULL;
    }
    dev->rmw_active = next;
    pthread_mutex_unlock(&dev->rmw_lock);
    bounce_free(b);
    if (next)
        rmw_start(next);
    user->result = result;
    finish_user(dev, user);
}

static void rmw_write_done(struct blk_req *io)
{
    struct blk_bounce *b = io->private;
    rmw_finish(b, io->result < 0 ? io->result : (int64_t)b->user->len);
}

static void rmw_edge_read_done(struct blk_req *io)
{
    struct blk_bounce *b = io->private;
    if (io->result < 0) {
        int expected = 0;
        atomic_compare_exchange_strong(&b->first_err, &expected, (int)io->result);
    } else if ((uint64_t)io->result < io->len) {
        /* past the end of the file there is nothing to preserve */
        memset((uint8_t *)io->buf + io->result, 0, io->len - (uint64_t)io->result);
    }
    if (atomic_fetch_sub(&b->pending, 1) != 1)
        return;
    int err = atomic_load(&b->first_err);
    if (err) {
        rmw_finish(b, err);
        return;
    }
    struct blk_req *user = b->user;
    if (user->flags & BLK_REQF_PC_WRITE) {
        int ret = pc_capture(b->dev, user, user->off, user->len);
        if (ret < 0) {
            rmw_finish(b, ret);
            return;
        }
    }
    memcpy(b->buf + (user->off - b->aoff), user->buf, user->len);
    struct blk_req *w = bounce_io(b, 0, BLK_WRITE, b->aoff, b->alen, rmw_write_done);
    int ret = b->dev->ops->submit(b->dev, &w, 1);
    if (ret < 0)
        rmw_finish(b, ret);
}

/* Reads the partial blocks at either end of the write; the rest of the range is about to
 * be overwritten anyway. */
static void rmw_start(struct blk_bounce *b)
{
    struct blk_req *user = b->user;
    struct blk_req *reads[2];
    unsigned n = 0;
    uint64_t last_block = b->aoff + b->alen - BLK_ALIGN;
    if (!is_aligned(user->off))
        reads[n] = bounce_io(b, n, BLK_READ, b->aoff, BLK_ALIGN, rmw_edge_read_done), n++;
    if (!is_aligned(user->off + user->len) && (n == 0 || last_block != b->aoff))
        reads[n] = bounce_io(b, n, BLK_READ, last_block, BLK_ALIGN, rmw_edge_read_done), n++;
    atomic_store(&b->pending, n);
    int ret = b->dev->ops->submit(b->dev, reads, n);
    if (ret < 0)
        rmw_finish(b, ret);
}

/* Takes an unaligned read or write.  Returns the request to hand to the backend now, or
 * NULL when the request continues on its own (queued read-modify-write). */
static struct blk_req *bounce_begin(struct blk_dev *dev, struct blk_req *user)
{
    struct blk_bounce *b = bounce_new(dev, user);
    if (!b) {
        user->flags |= BLK_REQF_PRESET;
        user->preset_result = -ENOMEM;
        return user;
    }
    atomic_fetch_add(&dev->stats.bounced, 1);
    if (user->op == BLK_READ)
        return bounce_io(b, 0, BLK_READ, b->aoff, b->alen, bounce_read_done);
    if (is_aligned(user->off) && is_aligned(user->len)) {
        memcpy(b->buf, user->buf, user->len);
        return bounce_io(b, 0, BLK_WRITE, b->aoff, b->alen, bounce_write_done);
    }
    pthread_mutex_lock(&dev->rmw_lock);
    bool start_now = dev->rmw_active == NULL;
    if (start_now) {
        dev->rmw_active = b;
    } else {
        if (dev->rmw_tail)
            dev->rmw_tail->next = b;
        else
            dev->rmw_head = b;
        dev->rmw_tail = b;
    }
    pthread_mutex_unlock(&dev->rmw_lock);
    if (start_now)
        rmw_start(b);
    return NULL;
}

/* ---- submission -------------------------------------------------------------------- */

unsigned blk_mergeable_run(struct blk_req *const *reqs, unsigned n)
{
    const struct blk_req *first = reqs[0];
    const unsigned no_merge = BLK_REQF_PRESET | BLK_REQF_NO_MERGE;
    if ((first->op != BLK_READ && first->op != BLK_WRITE) || (first->flags & no_merge) ||
        first->done_bytes)
        return 1;
    uint64_t end = first->off + first->len, total = first->len;
    unsigned run = 1;
    while (run < n && run < IOV_MAX) {
        const struct blk_req *r = reqs[run];
        if (r->op != first->op || r->prio != first->prio || (r->flags & no_merge) ||
            r->off != end || total + r->len > BLK_MAX_XFER)
            break;
        end += r->len;
        total += r->len;
        run++;
    }
    return run;
}

static bool req_valid(const struct blk_req *req)
{
    if (!req || !req->done || (unsigned)req->op >= BLK_OP_COUNT)
        return false;
    if ((req->op == BLK_READ || req->op == BLK_WRITE) && req->len && !req->buf)
        return false;
    return true;
}

/* Result a request gets without any I/O, or 1 when it has to run. */
static int64_t admission(struct blk_dev *dev, const struct blk_req *req)
{
    int64_t fault = take_fault(dev, req);
    if (fault != 1)
        return fault;
    if (req->op == BLK_FLUSH)
        return 1;
    if (req->off + req->len < req->off)
        return -EINVAL;
    if (req->op != BLK_READ && dev->read_only)
        return -EROFS;
    if (req->len == 0)
        return 0;
    if (req->op == BLK_READ) {
        if (req->off >= dev->size)
            return 0;
        /* crossing the end gives a short count, except in a window: the file goes on, and
         * the bytes after the window are not the device's */
        return dev->windowed && req->off + req->len > dev->size ? -EIO : 1;
    }
    return req->off + req->len > dev->size ? -EIO : 1;
}

/* Unaligned offset or length on O_DIRECT: the bounce path's read-modify-write. */
static bool needs_rmw(const struct blk_dev *dev, const struct blk_req *req)
{
    return dev->direct && req->op == BLK_WRITE &&
           !(is_aligned(req->off) && is_aligned(req->len));
}

static struct blk_req *prepare(struct blk_dev *dev, struct blk_req *req)
{
    req->result = 0;
    req->done_bytes = 0;
    req->bounce = NULL;
    req->next = NULL;
    req->flags = 0;
    req->undo = NULL;
    req->flush_cover = 0;
    inflight_inc(dev);
    if (dev->pc.armed && req->op != BLK_READ) {
        enum pc_verdict v = pc_admission(dev, req);
        if (v == PC_PARKED)
            return NULL;
        if (v == PC_PRESET)
            return req;
    } else {
        if (req->op == BLK_WRITE)
            atomic_fetch_add(&dev->pc.writes, 1);
        int64_t verdict = admission(dev, req);
        if (verdict != 1) {
            preset(req, verdict);
            return req;
        }
    }
    if (dev->direct && (req->op == BLK_READ || req->op == BLK_WRITE) &&
        !(is_aligned(req->off) && is_aligned(req->len) && is_aligned((uintptr_t)req->buf)))
        return bounce_begin(dev, req);
    return req;
}

static int submit_batch(struct blk_dev *dev, struct blk_req **reqs, unsigned n, bool waited)
{
    if (!dev || (!reqs && n))
        return -EINVAL;
    for (unsigned i = 0; i < n; i++)
        if (!req_valid(reqs[i]))
            return -EINVAL;
    if (n == 0)
        return 0;
    blk_bwlimit_wait(dev, reqs, n);
    struct blk_req *on_stack[64];
    struct blk_req **batch = n <= 64 ? on_stack : malloc(n * sizeof(*batch));
    if (!batch)
        return -ENOMEM;
    unsigned m = 0;
    for (unsigned i = 0; i < n; i++) {
        struct blk_req *r = prepare(dev, reqs[i]);
        if (r)
            batch[m++] = r;
    }
    int (*submit)(struct blk_dev *, struct blk_req **, unsigned) =
        waited && dev->ops->submit_waited ? dev->ops->submit_waited : dev->ops->submit;
    int ret = m ? submit(dev, batch, m) : 0;
    if (ret < 0) {
        /* the requests are counted in flight already: finish them rather than forget them */
        for (unsigned i = 0; i < m; i++) {
            batch[i]->result = ret;
            blk_req_complete(dev, batch[i]);
        }
    }
    if (batch != on_stack)
        free(batch);
    return 0;
}

int blk_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    return submit_batch(dev, reqs, n, false);
}

/* ---- synchronous helpers ----------------------------------------------------------- */

/* Waiting for a batch of requests: the one synchronous path of the block layer, under the
 * sync helpers below and under every synchronous caller above. */
struct batch_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned pending;
    int err;
};

static void batch_done(struct blk_req *req)
{
    struct batch_wait *b = req->private;
    int err = 0;
    if (req->result < 0)
        err = (int)req->result;
    else if ((req->op == BLK_READ || req->op == BLK_WRITE) && (uint64_t)req->result != req->len)
        err = -EIO; /* short: past the end of the device */
    pthread_mutex_lock(&b->lock);
    if (err && !b->err)
        b->err = err;
    if (--b->pending == 0)
        pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

int blk_submit_wait(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    if (n == 0)
        return 0;
    /* Only the completion thread can finish what it would wait for. */
    if (dev->has_completion_thread && pthread_equal(pthread_self(), dev->completion_thread))
        return -EDEADLK;
    struct batch_wait b = {.pending = n};
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.cond, NULL);
    for (unsigned i = 0; i < n; i++) {
        reqs[i]->done = batch_done;
        reqs[i]->private = &b;
    }
    int err = submit_batch(dev, reqs, n, true);
    if (!err) {
        pthread_mutex_lock(&b.lock);
        while (b.pending)
            pthread_cond_wait(&b.cond, &b.lock);
        pthread_mutex_unlock(&b.lock);
        err = b.err;
    }
    pthread_cond_destroy(&b.cond);
    pthread_mutex_destroy(&b.lock);
    return err;
}

static int run_sync(struct blk_dev *dev, struct blk_req req)
{
    struct blk_req *r = &req;
    return blk_submit_wait(dev, &r, 1);
}

int blk_read(struct blk_dev *dev, uint64_t off, void *buf, size_t len)
{
    return run_sync(dev, (struct blk_req){.op = BLK_READ, .off = off, .len = len, .buf = buf});
}

int blk_write(struct blk_dev *dev, uint64_t off, const void *buf, size_t len)
{
    /* the request type is shared with reads; a write never stores through buf */
    return run_sync(dev, (struct blk_req){.op = BLK_WRITE, .off = off, .len = len,
                                          .buf = (void *)(uintptr_t)buf});
}

int blk_flush(struct blk_dev *dev)
{
    return run_sync(dev, (struct blk_req){.op = BLK_FLUSH, .prio = BLK_PRIO_HIGH});
}

int blk_discard(struct blk_dev *dev, uint64_t off, uint64_t len)
{
    return run_sync(dev, (struct blk_req){.op = BLK_DISCARD, .prio = BLK_PRIO_LOW, .off = off,
                                          .len = len});
}

int blk_discard_blockdev(int fd, uint64_t off, uint64_t len)
{
    uint64_t start = align_up(off), end = align_down(off + len);
    if (end <= start)
        return 0; /* discard is advisory: nothing whole to drop */
    uint64_t range[2] = {start, end - start};
    return ioctl(fd, BLKDISCARD, range) < 0 ? -errno : 0;
}

/* ---- open / close ------------------------------------------------------------------ */

uint64_t blk_size(const struct blk_dev *dev)
{
    return dev->size;
}

const char *blk_backend_name(const struct blk_dev *dev)
{
    return dev->ops->name;
}

uint64_t blk_window_start(const struct blk_dev *dev)
{
    return dev->window_start;
}

bool blk_is_sparse(const struct blk_dev *dev)
{
    return dev->ops == &blk_sparse_ops;
}

/* Whether the file starts with the Android sparse image magic (read on a descriptor of its
 * own: the device's may be O_DIRECT, which refuses a 4-byte read). */
static bool file_is_sparse(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    uint8_t head[4];
    bool sparse = pread(fd, head, sizeof(head), 0) == (ssize_t)sizeof(head) &&
                  blk_sparse_magic(head, sizeof(head));
    close(fd);
    return sparse;
}

/* Why O_DIRECT can't serve this device, or NULL when it can. */
static const char *direct_unusable(struct blk_dev *dev)
{
    struct statfs sfs;
    if (!dev->is_blockdev && fstatfs(dev->fd, &sfs) == 0 &&
        (sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC))
        return "the file lives in memory (tmpfs), so O_DIRECT cannot bypass the page cache";
    if (dev->size % BLK_ALIGN)
        return "the size is not a multiple of 4096, so O_DIRECT cannot reach the last block";
    if (dev->is_blockdev) {
        int lbs = 0;
        if (ioctl(dev->fd, BLKSSZGET, &lbs) == 0 && lbs > (int)BLK_ALIGN)
            return "the logical block size exceeds 4096";
    }
    /* some file systems accept the open but refuse the I/O */
    if (dev->size >= BLK_ALIGN) {
        void *probe = blk_alloc_buf(BLK_ALIGN);
        ssize_t r = probe ? pread(dev->fd, probe, BLK_ALIGN, blk_file_pos(dev, 0)) : 0;
        int err = errno;
        free(probe);
        if (r < 0 && err == EINVAL)
            return "the file system refuses O_DIRECT reads";
    }
    return NULL;
}

static int device_size(struct blk_dev *dev)
{
    struct stat st;
    if (fstat(dev->fd, &st) < 0)
        return -errno;
    if (S_ISREG(st.st_mode)) {
        dev->size = (uint64_t)st.st_size;
        return 0;
    }
    if (S_ISBLK(st.st_mode)) {
        dev->is_blockdev = true;
        return ioctl(dev->fd, BLKGETSIZE64, &dev->size) < 0 ? -errno : 0;
    }
    return -EINVAL;
}

static int clear_direct(struct blk_dev *dev)
{
    int fl = fcntl(dev->fd, F_GETFL);
    if (fl < 0 || fcntl(dev->fd, F_SETFL, fl & ~O_DIRECT) < 0)
        return -errno;
    dev->direct = false;
    return 0;
}

static void dev_free(struct blk_dev *dev)
{
    if (dev->fd >= 0)
        close(dev->fd);
    free(dev->path);
    pthread_mutex_destroy(&dev->idle_lock);
    pthread_cond_destroy(&dev->idle_cond);
    pthread_mutex_destroy(&dev->rmw_lock);
    pthread_mutex_destroy(&dev->bw_lock);
    pthread_cond_destroy(&dev->bw_cond);
    pc_fini(dev);
    free(dev);
}

int blk_open(const char *path, const struct blk_options *opts, struct blk_dev **out)
{
    static const struct blk_options defaults = {0};
    if (!opts)
        opts = &defaults;
    const char *want = opts->backend ? opts->backend : "uring";
    const struct blk_backend_ops *ops;
    if (strcmp(want, "uring") == 0)
        ops = &blk_uring_ops;
    else if (strcmp(want, "psync") == 0)
        ops = &blk_psync_ops;
    else
        return -EINVAL;
    if (file_is_sparse(path)) {
        if (!opts->read_only) {
            log_err("%s is an Android sparse image, which f2fuse reads but cannot write: "
                    "mount it read-only (-o ro), or convert it to a raw image with "
                    "`f2fuse unsparse %s RAW` and mount that read-write", path, path);
            return -EROFS;
        }
        ops = &blk_sparse_ops; /* reads map through the chunk list, never O_DIRECT */
    }

    struct blk_dev *dev = calloc(1, sizeof(*dev));
    if (!dev)
        return -ENOMEM;
    dev->fd = -1;
    dev->path = strdup(path);
    dev->read_only = opts->read_only;
    dev->queue_depth = opts->queue_depth ? opts->queue_depth : 64;
    pthread_mutex_init(&dev->idle_lock, NULL);
    pthread_cond_init(&dev->idle_cond, NULL);
    pthread_mutex_init(&dev->rmw_lock, NULL);
    pthread_mutex_init(&dev->bw_lock, NULL);
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
    pthread_cond_init(&dev->bw_cond, &mono);
    pthread_condattr_destroy(&mono);
    atomic_store(&dev->bw_limit, opts->bw_limit);
    pc_init(dev, opts);

    int mode = (opts->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    const char *why_buffered = NULL;
    if (ops == &blk_uring_ops) {
        dev->fd = open(path, mode | O_DIRECT);
        if (dev->fd >= 0)
            dev->direct = true;
        else if (errno == EINVAL)
            why_buffered = "the file system refuses O_DIRECT";
    }
    if (dev->fd < 0)
        dev->fd = open(path, mode);
    int ret = dev->fd < 0 ? -errno : device_size(dev);
    if (!dev->path)
        ret = -ENOMEM;
    if (ret < 0)
        goto fail;
    if (ops == &blk_sparse_ops) {
        /* the chunk list sets the size; the window is cut out of the expanded image */
        dev->ops = ops;
        ret = ops->init(dev);
        if (ret == 0 && (ret = blk_window_apply(dev, path, opts)) < 0)
            ops->fini(dev);
        if (ret < 0)
            goto fail;
        *out = dev;
        return 0;
    }
    if ((ret = blk_window_apply(dev, path, opts)) < 0)
        goto fail;
    if (dev->direct && dev->window_start % BLK_ALIGN)
        why_buffered = "the partition does not start on a 4096-byte boundary, so O_DIRECT "
                       "cannot reach its blocks";
    if (dev->direct && !why_buffered)
        why_buffered = direct_unusable(dev);
    if (why_buffered && dev->direct && (ret = clear_direct(dev)) < 0)
        goto fail;
    if (why_buffered) {
        log_info("%s: %s; using the psync backend (buffered I/O)", path, why_buffered);
        ops = &blk_psync_ops;
    }

    dev->ops = ops;
    ret = ops->init(dev);
    if (ret < 0 && ops == &blk_uring_ops) {
        log_warn("%s: io_uring unavailable (%s); using the psync backend (buffered I/O)", path,
                 strerror(-ret));
        if ((ret = clear_direct(dev)) < 0)
            goto fail;
        dev->ops = ops = &blk_psync_ops;
        ret = ops->init(dev);
    }
    if (ret < 0)
        goto fail;
    *out = dev;
    return 0;
fail:
    dev_free(dev);
    return ret;
}

void blk_close(struct blk_dev *dev)
{
    if (!dev)
        return;
    pthread_mutex_lock(&dev->idle_lock);
    while (atomic_load(&dev->stats.inflight))
        pthread_cond_wait(&dev->idle_cond, &dev->idle_lock);
    pthread_mutex_unlock(&dev->idle_lock);
    dev->ops->fini(dev);
    dev_free(dev);
}
