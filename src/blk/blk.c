/* Block layer, common part: open/close, request admission and accounting, the stack of
 * test layers, the bounce path for unaligned requests, and the synchronous helpers. */
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

static void layers_complete(struct blk_dev *dev, struct blk_req *req);

/* Completes one of the caller's requests.  The counters are final before done() runs, so
 * a caller woken by done() reads them exact.  blk_close may then proceed, but it cannot free
 * the device under a running done(): uring's fini joins the completion thread, and psync
 * runs done() inside the caller's own blk_submit. */
static void finish_user(struct blk_dev *dev, struct blk_req *req)
{
    /* before done(): the caller must not see a flush complete before a layer counts it */
    if (req->flags & BLK_REQF_LAYER)
        layers_complete(dev, req);
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
    emit(sink, "blk.fua_writes", atomic_load(&dev->stats.fua_writes));
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
    emit(sink, "blk.net.disconnects", atomic_load(&dev->stats.net_disconnects));
    emit(sink, "blk.net.reconnects", atomic_load(&dev->stats.net_reconnects));
    emit(sink, "blk.net.retries", atomic_load(&dev->stats.net_retries));
    emit(sink, "blk.net.timeouts", atomic_load(&dev->stats.net_timeouts));
    /* every device shows the same names, so f2fuse stat's list does not depend on tests */
    static const struct blk_layer_ops *const kinds[] = {&blk_fault_layer_ops,
                                                        &blk_powercut_layer_ops};
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        kinds[i]->emit_stats(blk_layer_find(dev, kinds[i]), emit, sink);
}

/* ---- layers ------------------------------------------------------------------------ */

static struct blk_layer *layer_top(const struct blk_dev *dev)
{
    return atomic_load_explicit(&((struct blk_dev *)dev)->layers, memory_order_acquire);
}

static struct blk_layer *layer_below(const struct blk_layer *layer)
{
    return atomic_load_explicit(&((struct blk_layer *)layer)->below, memory_order_acquire);
}

void *blk_layer_new(struct blk_dev *dev, const struct blk_layer_ops *ops, size_t size)
{
    struct blk_layer *layer = calloc(1, size);
    if (layer) {
        layer->ops = ops;
        layer->dev = dev;
    }
    return layer;
}

int blk_layer_push(struct blk_layer *layer)
{
    struct blk_dev *dev = layer->dev;
    pthread_mutex_lock(&dev->layer_lock);
    _Atomic(struct blk_layer *) *link = &dev->layers;
    struct blk_layer *next;
    int ret = blk_layer_find(dev, layer->ops) ? -EEXIST : 0;
    while (!ret && (next = atomic_load(link)) && next->ops->depth <= layer->ops->depth)
        link = &next->below;
    if (!ret) {
        /* linked below first, then published: a concurrent admission sees a whole stack */
        atomic_store_explicit(&layer->below, atomic_load(link), memory_order_relaxed);
        atomic_store_explicit(link, layer, memory_order_release);
    }
    pthread_mutex_unlock(&dev->layer_lock);
    return ret;
}

struct blk_layer *blk_layer_find(const struct blk_dev *dev, const struct blk_layer_ops *ops)
{
    struct blk_layer *l = layer_top(dev);
    while (l && l->ops != ops)
        l = layer_below(l);
    return l;
}

static void layers_complete(struct blk_dev *dev, struct blk_req *req)
{
    for (struct blk_layer *l = layer_top(dev); l; l = layer_below(l))
        if (l->ops->complete)
            l->ops->complete(l, req);
}

/* A read-modify-write's data is about to go to the backend. */
static int layers_write_start(struct blk_dev *dev, struct blk_req *req)
{
    int ret = 0;
    for (struct blk_layer *l = layer_top(dev); l && !ret; l = layer_below(l))
        if (l->ops->write_start)
            ret = l->ops->write_start(l, req);
    return ret;
}

static void layers_destroy(struct blk_dev *dev)
{
    struct blk_layer *l = layer_top(dev);
    while (l) {
        struct blk_layer *next = layer_below(l);
        l->ops->destroy(l);
        l = next;
    }
    pthread_mutex_destroy(&dev->layer_lock);
}

uint64_t blk_write_count(const struct blk_dev *dev)
{
    return atomic_load(&dev->stats.writes_submitted);
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
    b->aoff = blk_align_down(user->off);
    b->alen = blk_align_up(user->off + user->len) - b->aoff;
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

static struct blk_req *bounce_io(struct blk_bounce *b, unsigned i, enum blk_op op, uint64_t off,
                                 uint64_t len, blk_done_fn done)
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
    if (user->flags & BLK_REQF_LAYER) {
        int ret = layers_write_start(b->dev, user);
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
        first->done_bytes || first->fua)
        return 1;
    uint64_t end = first->off + first->len, total = first->len;
    unsigned run = 1;
    while (run < n && run < IOV_MAX) {
        const struct blk_req *r = reqs[run];
        if (r->op != first->op || r->prio != first->prio || (r->flags & no_merge) || r->fua ||
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

void blk_req_preset(struct blk_req *req, int64_t result)
{
    req->flags |= BLK_REQF_PRESET;
    req->preset_result = result;
}

/* The verdict of the layers from l down (none: the production case), then of the
 * device's own checks. */
static enum blk_admit admit_from(struct blk_dev *dev, struct blk_layer *l, struct blk_req *req)
{
    if (l)
        return l->ops->admit(l, req);
    int64_t verdict = admission(dev, req);
    if (verdict == 1)
        return BLK_ADMIT_RUN;
    blk_req_preset(req, verdict);
    return BLK_ADMIT_PRESET;
}

enum blk_admit blk_admit_below(struct blk_layer *layer, struct blk_req *req)
{
    return admit_from(layer->dev, layer_below(layer), req);
}

/* Unaligned offset or length on O_DIRECT (or an export that needs aligned requests): the
 * bounce path's read-modify-write. */
bool blk_write_needs_rmw(const struct blk_dev *dev, const struct blk_req *req)
{
    return (dev->direct || dev->aligned_only) && req->op == BLK_WRITE &&
           !(is_aligned(req->off) && is_aligned(req->len));
}

/* Whether a read or write has to go through the bounce path to reach the backend. */
static bool needs_bounce(const struct blk_dev *dev, const struct blk_req *req)
{
    if (req->op != BLK_READ && req->op != BLK_WRITE)
        return false;
    bool range_ok = is_aligned(req->off) && is_aligned(req->len);
    if (dev->direct)
        return !(range_ok && is_aligned((uintptr_t)req->buf));
    return dev->aligned_only && !range_ok;
}

static struct blk_req *prepare(struct blk_dev *dev, struct blk_req *req)
{
    req->result = 0;
    req->done_bytes = 0;
    req->bounce = NULL;
    req->next = NULL;
    req->flags = 0;
    inflight_inc(dev);
    if (req->op == BLK_WRITE)
        atomic_fetch_add(&dev->stats.writes_submitted, 1);
    enum blk_admit v = admit_from(dev, layer_top(dev), req);
    if (v == BLK_ADMIT_HELD)
        return NULL; /* a layer completes it later */
    if (v == BLK_ADMIT_PRESET)
        return req;
    if (needs_bounce(dev, req))
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
    int (*submit)(struct blk_dev *, struct blk_req **, unsigned) = waited && dev->ops->submit_waited
                                                                       ? dev->ops->submit_waited
                                                                       : dev->ops->submit;
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
    return run_sync(dev,
                    (struct blk_req){
                        .op = BLK_WRITE, .off = off, .len = len, .buf = (void *)(uintptr_t)buf});
}

int blk_write_durable(struct blk_dev *dev, uint64_t off, const void *buf, size_t len,
                      enum blk_prio prio)
{
    /* An unaligned write goes through the bounce path, which knows no FUA: flush after it. */
    bool fua = dev->fua && off % BLK_ALIGN == 0 && len % BLK_ALIGN == 0;
    struct blk_req req = {.op = BLK_WRITE,
                          .prio = prio,
                          .off = off,
                          .len = len,
                          .buf = (void *)(uintptr_t)buf,
                          .fua = fua};
    struct blk_req *r = &req;
    int err = blk_submit_wait(dev, &r, 1);
    if (!err && !fua) {
        struct blk_req flush = {.op = BLK_FLUSH, .prio = prio};
        r = &flush;
        err = blk_submit_wait(dev, &r, 1);
    }
    if (!err && fua)
        atomic_fetch_add(&dev->stats.fua_writes, 1);
    return err;
}

int blk_flush(struct blk_dev *dev)
{
    return run_sync(dev, (struct blk_req){.op = BLK_FLUSH, .prio = BLK_PRIO_HIGH});
}

int blk_discard(struct blk_dev *dev, uint64_t off, uint64_t len)
{
    return run_sync(dev, (struct blk_req){
                             .op = BLK_DISCARD, .prio = BLK_PRIO_LOW, .off = off, .len = len});
}

int blk_discard_blockdev(int fd, uint64_t off, uint64_t len)
{
    uint64_t start = blk_align_up(off), end = blk_align_down(off + len);
    if (end <= start)
        return 0; /* discard is advisory: nothing whole to drop */
    uint64_t range[2] = {start, end - start};
    return ioctl(fd, BLKDISCARD, range) < 0 ? -errno : 0;
}

int blk_fd_io(int fd, bool write, void *buf, uint64_t len, off_t pos)
{
    uint8_t *p = buf;
    uint64_t done = 0;
    while (done < len) {
        uint64_t want = len - done > BLK_MAX_XFER ? BLK_MAX_XFER : len - done;
        ssize_t r = write ? pwrite(fd, p + done, want, pos + (off_t)done)
                          : pread(fd, p + done, want, pos + (off_t)done);
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

bool blk_is_network(const struct blk_dev *dev)
{
    return dev->network;
}

bool blk_path_is_network(const char *path, const char **package)
{
    /* the NBD URI schemes libnbd knows: nbd, nbds, each with +unix or +vsock */
    static const char *const nbd_schemes[] = {"nbd://",       "nbds://",      "nbd+unix://",
                                              "nbds+unix://", "nbd+vsock://", "nbds+vsock://"};
    const char *pkg = NULL;
    for (size_t i = 0; i < sizeof(nbd_schemes) / sizeof(nbd_schemes[0]); i++)
        if (strncmp(path, nbd_schemes[i], strlen(nbd_schemes[i])) == 0)
            pkg = "libnbd-dev";
    if (strncmp(path, "rbd:", 4) == 0)
        pkg = "librbd-dev";
    if (package)
        *package = pkg;
    return pkg != NULL;
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
    layers_destroy(dev);
    free(dev);
}

/* The backend opts asks for, or sparse for an Android sparse image (read-only): 0 or -errno. */
static int choose_backend(const char *path, const struct blk_options *opts,
                          const struct blk_backend_ops **ops)
{
    const char *want = opts->backend ? opts->backend : "uring";
    if (strcmp(want, "uring") == 0)
        *ops = &blk_uring_ops;
    else if (strcmp(want, "psync") == 0)
        *ops = &blk_psync_ops;
    else
        return -EINVAL;
    if (!file_is_sparse(path))
        return 0;
    if (!opts->read_only) {
        log_err("%s is an Android sparse image, which f2fuse reads but cannot write: "
                "mount it read-only (-o ro), or convert it to a raw image with "
                "`f2fuse unsparse %s RAW` and mount that read-write",
                path, path);
        return -EROFS;
    }
    *ops = &blk_sparse_ops; /* reads map through the chunk list, never O_DIRECT */
    return 0;
}

/* A device with nothing open yet, or NULL. */
static struct blk_dev *dev_new(const char *path, const struct blk_options *opts)
{
    struct blk_dev *dev = calloc(1, sizeof(*dev));
    if (!dev)
        return NULL;
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
    pthread_mutex_init(&dev->layer_lock, NULL);
    return dev;
}

/* Opens the image (O_DIRECT for uring when the file system takes it) and reads its size;
 * *why_buffered says why uring will not get O_DIRECT. */
static int open_image(struct blk_dev *dev, const char *path, const struct blk_backend_ops *ops,
                      const char **why_buffered)
{
    int mode = (dev->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC;
    if (ops == &blk_uring_ops) {
        dev->fd = open(path, mode | O_DIRECT);
        if (dev->fd >= 0)
            dev->direct = true;
        else if (errno == EINVAL)
            *why_buffered = "the file system refuses O_DIRECT";
    }
    if (dev->fd < 0)
        dev->fd = open(path, mode);
    int ret = dev->fd < 0 ? -errno : device_size(dev);
    return dev->path ? ret : -ENOMEM;
}

/* Starts the backend: psync when O_DIRECT cannot serve the window (said why) or io_uring is
 * unavailable. */
static int start_backend(struct blk_dev *dev, const char *path, const struct blk_backend_ops *ops,
                         const char *why_buffered)
{
    int ret;
    if (dev->direct && dev->window_start % BLK_ALIGN)
        why_buffered = "the partition does not start on a 4096-byte boundary, so O_DIRECT "
                       "cannot reach its blocks";
    if (dev->direct && !why_buffered)
        why_buffered = direct_unusable(dev);
    if (why_buffered && dev->direct && (ret = clear_direct(dev)) < 0)
        return ret;
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
            return ret;
        dev->ops = ops = &blk_psync_ops;
        ret = ops->init(dev);
    }
    return ret;
}

/* The last block of a network device must read: a server that claims more than it holds
 * is caught at open rather than by the first read of the far end.  0, or -EIO logged. */
static int probe_last_block(struct blk_dev *dev)
{
    if (dev->size < BLK_ALIGN)
        return 0; /* too small for f2fs: super_load says so */
    void *buf = blk_alloc_buf(BLK_ALIGN);
    if (!buf)
        return -ENOMEM;
    uint64_t at = blk_align_down(dev->size - BLK_ALIGN);
    int err = blk_read(dev, at, buf, BLK_ALIGN);
    free(buf);
    if (err)
        log_err("%s: the server says the device has %llu bytes, but its last block (at byte "
                "%llu) cannot be read (%s): the size it gives is wrong, or the device is "
                "damaged; nothing was written",
                dev->path, (unsigned long long)dev->size, (unsigned long long)at, strerror(-err));
    return err ? -EIO : 0;
}

/* An NBD export or an RBD image: the backend connects in its init and sets the size. */
static int open_network(const char *path, const struct blk_options *opts, struct blk_dev **out)
{
    struct blk_dev *dev = dev_new(path, opts);
    if (!dev)
        return -ENOMEM;
    dev->network = true;
    dev->ops = strncmp(path, "rbd:", 4) == 0 ? &blk_rbd_ops : &blk_nbd_ops;
    dev->opening = opts;
    int ret = dev->path ? dev->ops->init(dev) : -ENOMEM;
    dev->opening = NULL;
    if (ret < 0) {
        dev->ops = NULL;
        dev_free(dev);
        return ret;
    }
    if (opts->partition && opts->partition[0]) {
        log_err("%s: partition= needs an image file; over the network give the partition's "
                "start with -o offset=BYTES, or export the partition alone (nbdkit's partition "
                "filter)",
                path);
        ret = -EINVAL;
    }
    if (!ret)
        ret = blk_window_apply(dev, path, opts);
    if (!ret)
        ret = probe_last_block(dev);
    if (ret < 0) {
        blk_close(dev);
        return ret;
    }
    *out = dev;
    return 0;
}

int blk_open(const char *path, const struct blk_options *opts, struct blk_dev **out)
{
    static const struct blk_options defaults = {0};
    if (!opts)
        opts = &defaults;
    if (blk_path_is_network(path, NULL))
        return open_network(path, opts, out);
    const struct blk_backend_ops *ops;
    int ret = choose_backend(path, opts, &ops);
    if (ret < 0)
        return ret;
    struct blk_dev *dev = dev_new(path, opts);
    if (!dev)
        return -ENOMEM;
    const char *why_buffered = NULL;
    if ((ret = open_image(dev, path, ops, &why_buffered)) < 0)
        goto fail;
    if (ops == &blk_sparse_ops) {
        /* the chunk list sets the size; the window is cut out of the expanded image */
        dev->ops = ops;
        ret = ops->init(dev);
        if (ret == 0 && (ret = blk_window_apply(dev, path, opts)) < 0)
            ops->fini(dev);
    } else if ((ret = blk_window_apply(dev, path, opts)) >= 0) {
        ret = start_backend(dev, path, ops, why_buffered);
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
