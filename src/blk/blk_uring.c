/* io_uring backend on an O_DIRECT descriptor: direct asynchronous I/O, as the loop driver's
 * direct I/O via kernel AIO (the image's data is cached once, by f2fuse, not again in the
 * host page cache, and async submission saves CPU).
 *
 * Threads: any thread may submit; SQE preparation and io_uring_submit run under st->lock.
 * One completion thread (the "reaper") owns the CQ side: it reaps CQEs, reissues short or
 * ioprio-rejected transfers and calls done().  liburing allows one SQ user and one CQ user
 * at a time, which is exactly this split.
 *
 * Every blk_submit ends in its own io_uring_submit, on the reaper too.  Holding back the
 * reaper's submissions (done() chaining the next request) until the end of a reaped batch
 * saves syscalls, but on a virtio disk that completes requests in bursts it left the
 * device idle for the whole batch turnaround: ~10% fewer IOPS at QD32 than fio.
 *
 * At most cq_entries SQEs are outstanding, so the CQ can never overflow; requests beyond
 * that wait in a backlog that the reaper drains as completions free room. */
#include "blk/blk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/ioprio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

/* user_data: a request or a merge group pointer (8-byte aligned) tagged in the low bits */
#define TAG_GROUP      1u
#define TAG_MASK       7u
#define USER_DATA_STOP 2u /* tells the reaper to exit */

#define REAP_BATCH 64u

/* Several adjacent requests issued as one readv/writev. */
struct uring_group {
    unsigned n;
    bool prio_sent;
    struct blk_req **reqs; /* n entries, stored after iov */
    struct iovec iov[];
};

struct uring_state {
    struct io_uring ring;
    bool fixed_file;      /* fd registered: saves an fget/fput per SQE */
    pthread_mutex_t lock; /* everything below but ioprio_ok */
    unsigned sqes_out;    /* prepared and not yet reaped */
    unsigned sqe_limit;   /* CQ size */
    unsigned unsubmitted; /* prepared but not yet handed to the kernel */
    struct blk_req *backlog_head, *backlog_tail;
    atomic_bool ioprio_ok; /* false once the kernel refused an ioprio */
    pthread_t reaper;
};

static uint16_t ioprio_of(enum blk_prio prio)
{
    switch (prio) {
    case BLK_PRIO_HIGH: return IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 0);
    case BLK_PRIO_LOW: /* background: the lowest best-effort level, as the kernel's flusher */
        return IOPRIO_PRIO_VALUE(IOPRIO_CLASS_BE, 7);
    case BLK_PRIO_IDLE: return IOPRIO_PRIO_VALUE(IOPRIO_CLASS_IDLE, 0);
    default: return 0; /* inherit the task's priority */
    }
}

/* Hands prepared SQEs to the kernel.  When the kernel is short of resources and nothing
 * else is outstanding, no completion would trigger a retry, so retry here. */
static void submit_locked(struct uring_state *st)
{
    while (st->unsubmitted) {
        int ret = io_uring_submit(&st->ring);
        if (ret >= 0) {
            st->unsubmitted -= (unsigned)ret < st->unsubmitted ? (unsigned)ret : st->unsubmitted;
            if (ret == 0)
                break;
            continue;
        }
        if (ret == -EINTR)
            continue;
        if (st->sqes_out > st->unsubmitted)
            break; /* the reaper retries after the next completion */
        nanosleep(&(struct timespec){.tv_nsec = 100 * 1000}, NULL);
    }
}

static struct io_uring_sqe *get_sqe_locked(struct uring_state *st)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (!sqe) { /* SQ full of prepared entries: push them out and retry */
        submit_locked(st);
        sqe = io_uring_get_sqe(&st->ring);
    }
    return sqe;
}

static void set_target(struct uring_state *st, struct blk_dev *dev, struct io_uring_sqe *sqe)
{
    if (st->fixed_file) {
        sqe->fd = 0;
        sqe->flags |= IOSQE_FIXED_FILE;
    } else {
        sqe->fd = dev->fd;
    }
}

/* Returns whether the SQE carries an ioprio. */
static bool set_prio(struct uring_state *st, struct io_uring_sqe *sqe, enum blk_prio prio)
{
    uint16_t value = ioprio_of(prio);
    if (!value || !atomic_load(&st->ioprio_ok))
        return false;
    sqe->ioprio = value;
    return true;
}

static void prep_single(struct uring_state *st, struct blk_dev *dev, struct io_uring_sqe *sqe,
                        struct blk_req *req)
{
    req->flags &= ~(unsigned)BLK_REQF_PRIO_SENT;
    if (req->flags & BLK_REQF_PRESET) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, req);
        return;
    }
    uint64_t left = req->len - req->done_bytes;
    unsigned chunk = (unsigned)(left > BLK_MAX_XFER ? BLK_MAX_XFER : left);
    uint8_t *buf = (uint8_t *)req->buf + req->done_bytes;
    uint64_t off = (uint64_t)blk_file_pos(dev, req->off + req->done_bytes);
    switch (req->op) {
    case BLK_READ: io_uring_prep_read(sqe, dev->fd, buf, chunk, off); break;
    case BLK_WRITE:
        io_uring_prep_write(sqe, dev->fd, buf, chunk, off);
        if (req->fua)
            sqe->rw_flags = RWF_DSYNC; /* O_DSYNC for this write alone: durable on completion */
        break;
    case BLK_FLUSH: io_uring_prep_fsync(sqe, dev->fd, IORING_FSYNC_DATASYNC); break;
    case BLK_DISCARD:
        io_uring_prep_fallocate(sqe, dev->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                blk_file_pos(dev, req->off), (off_t)req->len);
        break;
    default: break;
    }
    set_target(st, dev, sqe);
    if ((req->op == BLK_READ || req->op == BLK_WRITE) && set_prio(st, sqe, req->prio))
        req->flags |= BLK_REQF_PRIO_SENT;
    io_uring_sqe_set_data(sqe, req);
}

/* Prepares reqs[0..n) as one readv/writev; false when there is no memory for it. */
static bool prep_group(struct uring_state *st, struct blk_dev *dev, struct io_uring_sqe *sqe,
                       struct blk_req **reqs, unsigned n)
{
    struct uring_group *g = malloc(sizeof(*g) +
                                   n * (sizeof(struct iovec) + sizeof(struct blk_req *)));
    if (!g)
        return false;
    g->n = n;
    g->reqs = (struct blk_req **)(void *)&g->iov[n];
    for (unsigned i = 0; i < n; i++) {
        g->reqs[i] = reqs[i];
        g->iov[i] = (struct iovec){.iov_base = reqs[i]->buf, .iov_len = reqs[i]->len};
    }
    if (reqs[0]->op == BLK_READ)
        io_uring_prep_readv(sqe, dev->fd, g->iov, n, (uint64_t)blk_file_pos(dev, reqs[0]->off));
    else
        io_uring_prep_writev(sqe, dev->fd, g->iov, n, (uint64_t)blk_file_pos(dev, reqs[0]->off));
    set_target(st, dev, sqe);
    g->prio_sent = set_prio(st, sqe, reqs[0]->prio);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)g | TAG_GROUP);
    return true;
}

static void backlog_append(struct uring_state *st, struct blk_req *req)
{
    req->next = NULL;
    if (st->backlog_tail)
        st->backlog_tail->next = req;
    else
        st->backlog_head = req;
    st->backlog_tail = req;
}

/* Prepares SQEs for reqs in order while the ring has room; the rest join the backlog
 * (everything does while the backlog is not empty, so order is kept). */
static void queue_locked(struct uring_state *st, struct blk_dev *dev, struct blk_req **reqs,
                         unsigned n)
{
    unsigned i = 0;
    while (i < n && !st->backlog_head && st->sqes_out < st->sqe_limit) {
        struct io_uring_sqe *sqe = get_sqe_locked(st);
        if (!sqe)
            break;
        unsigned run = blk_mergeable_run(reqs + i, n - i);
        if (run > 1 && prep_group(st, dev, sqe, reqs + i, run)) {
            atomic_fetch_add(&dev->stats.merged, run - 1);
            i += run;
        } else {
            prep_single(st, dev, sqe, reqs[i]);
            i++;
        }
        st->sqes_out++;
        st->unsubmitted++;
    }
    for (; i < n; i++)
        backlog_append(st, reqs[i]);
}

static void drain_backlog_locked(struct uring_state *st, struct blk_dev *dev)
{
    if (st->sqes_out >= st->sqe_limit)
        return;
    struct blk_req *list = st->backlog_head, *list_tail = st->backlog_tail;
    st->backlog_head = st->backlog_tail = NULL;
    while (list) {
        if (st->backlog_head) { /* the ring filled up: the rest stays queued as it was */
            st->backlog_tail->next = list;
            st->backlog_tail = list_tail;
            return;
        }
        struct blk_req *batch[REAP_BATCH];
        unsigned n = 0;
        while (n < REAP_BATCH && list) {
            batch[n++] = list;
            list = list->next;
        }
        queue_locked(st, dev, batch, n);
    }
}

static int uring_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    struct uring_state *st = dev->backend;
    /* BLKDISCARD has no io_uring opcode in this liburing: run it now, complete it later */
    for (unsigned i = 0; i < n; i++) {
        struct blk_req *r = reqs[i];
        if (r->op == BLK_DISCARD && dev->is_blockdev && !(r->flags & BLK_REQF_PRESET)) {
            int ret = blk_discard_blockdev(dev->fd, (uint64_t)blk_file_pos(dev, r->off), r->len);
            r->flags |= BLK_REQF_PRESET;
            r->preset_result = ret < 0 ? ret : (int64_t)r->len;
        }
    }
    pthread_mutex_lock(&st->lock);
    queue_locked(st, dev, reqs, n);
    submit_locked(st);
    pthread_mutex_unlock(&st->lock);
    return 0;
}

/* A caller blocked on one plain request — a FUSE read of a block f2fuse does not cache,
 * a fast fsync's data block, its inode and its flush — is served by pread, pwrite or
 * fdatasync on the O_DIRECT descriptor in its own thread: one sleep in the kernel, where
 * the ring costs a submit, the reaper's wakeup and then the waiter's (bench/fio: profile
 * of 4 KiB random reads, half the daemon's time in futex waits and wakeups; a create +
 * fsync is three such requests in a row).  Everything else, batches and prioritised I/O
 * included, goes through the ring. */
static int uring_submit_waited(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    struct blk_req *req = reqs[0];
    if (n != 1 || req->prio != BLK_PRIO_NORMAL || (req->flags & BLK_REQF_PRESET) ||
        (req->op != BLK_READ && req->op != BLK_WRITE && req->op != BLK_FLUSH))
        return uring_submit(dev, reqs, n);
    int64_t result = 0;
    if (req->op == BLK_FLUSH) {
        int r;
        do
            r = fdatasync(dev->fd);
        while (r != 0 && errno == EINTR);
        result = r == 0 ? 0 : -errno;
    }
    uint8_t *buf = req->buf;
    while (req->op != BLK_FLUSH && (uint64_t)result < req->len) {
        off_t at = blk_file_pos(dev, req->off + (uint64_t)result);
        struct iovec iov = {buf + result, req->len - (uint64_t)result};
        ssize_t r = req->op == BLK_READ ? preadv2(dev->fd, &iov, 1, at, 0)
                                        : pwritev2(dev->fd, &iov, 1, at, req->fua ? RWF_DSYNC : 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            result = -errno;
            break;
        }
        if (r == 0)
            break; /* the end of the device: a short transfer */
        result += r;
    }
    req->result = result;
    blk_req_complete(dev, req);
    return 0;
}

/* Reissues a request from the reaper (short transfer, rejected ioprio, split group); it
 * goes to the kernel with the rest at the end of the reaped batch. */
static void resubmit(struct uring_state *st, struct blk_dev *dev, struct blk_req *req)
{
    pthread_mutex_lock(&st->lock);
    queue_locked(st, dev, &req, 1);
    pthread_mutex_unlock(&st->lock);
}

/* The kernel refused the ioprio value: stop sending it and say so once. */
static void drop_ioprio(struct uring_state *st, struct blk_dev *dev, int res)
{
    if (atomic_exchange(&st->ioprio_ok, false)) {
        atomic_store(&dev->stats.ioprio_rejected, 1);
        log_warn("the kernel rejects I/O priorities (%s); sending requests without them",
                 strerror(-res));
    }
}

static bool prio_refusal(int res)
{
    return res == -EINVAL || res == -EPERM;
}

static void complete_single(struct uring_state *st, struct blk_dev *dev, struct blk_req *req,
                            int res)
{
    if (req->flags & BLK_REQF_PRESET) {
        req->result = req->preset_result;
        blk_req_complete(dev, req);
        return;
    }
    if (res < 0) {
        if (prio_refusal(res) && (req->flags & BLK_REQF_PRIO_SENT)) {
            drop_ioprio(st, dev, res);
            resubmit(st, dev, req);
            return;
        }
        req->result = res;
        blk_req_complete(dev, req);
        return;
    }
    if (req->op == BLK_READ || req->op == BLK_WRITE) {
        req->done_bytes += (uint64_t)res;
        if (req->done_bytes < req->len) {
            if (res > 0) {
                atomic_fetch_add(&dev->stats.short_resubmits, 1);
                req->flags |= BLK_REQF_NO_MERGE;
                resubmit(st, dev, req);
                return;
            }
            /* no progress: the end of the device for a read, an error for a write */
            req->result = req->op == BLK_READ ? (int64_t)req->done_bytes : -EIO;
            blk_req_complete(dev, req);
            return;
        }
        req->result = (int64_t)req->done_bytes;
    } else {
        req->result = req->op == BLK_DISCARD ? (int64_t)req->len : 0;
    }
    blk_req_complete(dev, req);
}

/* A merged readv/writev finished.  Members it covered completely are done; the others
 * (short transfer or error: which member failed is unknown) go again one by one. */
static void complete_group(struct uring_state *st, struct blk_dev *dev, struct uring_group *g,
                           int res)
{
    if (res < 0 && prio_refusal(res) && g->prio_sent)
        drop_ioprio(st, dev, res);
    uint64_t left = res > 0 ? (uint64_t)res : 0;
    bool counted_short = false;
    for (unsigned i = 0; i < g->n; i++) {
        struct blk_req *req = g->reqs[i];
        uint64_t take = left < req->len ? left : req->len;
        left -= take;
        req->done_bytes = take;
        if (take == req->len) {
            req->result = (int64_t)take;
            blk_req_complete(dev, req);
            continue;
        }
        if (res >= 0 && !counted_short) {
            atomic_fetch_add(&dev->stats.short_resubmits, 1);
            counted_short = true;
        }
        req->flags |= BLK_REQF_NO_MERGE;
        resubmit(st, dev, req);
    }
    free(g);
}

static void *reaper_main(void *arg)
{
    struct blk_dev *dev = arg;
    struct uring_state *st = dev->backend;
    bool stop_seen = false;
    for (;;) {
        struct io_uring_cqe *cqe;
        int ret = io_uring_wait_cqe(&st->ring, &cqe);
        if (ret < 0) {
            if (ret != -EINTR && ret != -EAGAIN) {
                log_err("io_uring_wait_cqe: %s", strerror(-ret));
                nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL); /* no hot loop */
            }
            continue;
        }
        /* copy the batch out so the CQ has room again before callbacks run */
        struct io_uring_cqe *cqes[REAP_BATCH];
        struct {
            uint64_t data;
            int res;
        } done[REAP_BATCH];
        unsigned n = io_uring_peek_batch_cqe(&st->ring, cqes, REAP_BATCH);
        for (unsigned i = 0; i < n; i++) {
            done[i].data = cqes[i]->user_data;
            done[i].res = cqes[i]->res;
        }
        io_uring_cq_advance(&st->ring, n);

        pthread_mutex_lock(&st->lock);
        st->sqes_out -= n;
        drain_backlog_locked(st, dev);
        submit_locked(st);
        pthread_mutex_unlock(&st->lock);

        for (unsigned i = 0; i < n; i++) {
            uint64_t data = done[i].data;
            if (data == USER_DATA_STOP)
                stop_seen = true;
            else if (data & TAG_GROUP)
                complete_group(st, dev,
                               (struct uring_group *)(uintptr_t)(data & ~(uint64_t)TAG_MASK),
                               done[i].res);
            else
                complete_single(st, dev, (struct blk_req *)(uintptr_t)data, done[i].res);
        }

        pthread_mutex_lock(&st->lock);
        submit_locked(st);
        /* a done() may have chained one more request after close began: finish it too */
        bool idle = st->sqes_out == 0 && !st->backlog_head;
        pthread_mutex_unlock(&st->lock);
        if (stop_seen && idle)
            break;
    }
    return NULL;
}

static int uring_init(struct blk_dev *dev)
{
    dev->fua = true; /* RWF_DSYNC on a write: durable when it completes */
    struct uring_state *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    struct io_uring_params params = {0};
    int ret = io_uring_queue_init_params(dev->queue_depth, &st->ring, &params);
    if (ret < 0) {
        free(st);
        return ret;
    }
    st->fixed_file = io_uring_register_files(&st->ring, &dev->fd, 1) == 0;
    st->sqe_limit = params.cq_entries;
    atomic_init(&st->ioprio_ok, true);
    pthread_mutex_init(&st->lock, NULL);
    dev->backend = st;
    ret = pthread_create(&st->reaper, NULL, reaper_main, dev);
    if (ret == 0) { /* before any request exists, so every done() sees it */
        dev->completion_thread = st->reaper;
        dev->has_completion_thread = true;
    } else {
        pthread_mutex_destroy(&st->lock);
        io_uring_queue_exit(&st->ring);
        free(st);
        dev->backend = NULL;
        return -ret;
    }
    return 0;
}

/* Called with nothing in flight (blk_close waited): stops and joins the reaper. */
static void uring_fini(struct blk_dev *dev)
{
    struct uring_state *st = dev->backend;
    pthread_mutex_lock(&st->lock);
    struct io_uring_sqe *sqe;
    while (!(sqe = get_sqe_locked(st)))
        ; /* nothing is outstanding, so the SQ empties on the first submit */
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, USER_DATA_STOP);
    st->sqes_out++;
    st->unsubmitted++;
    submit_locked(st);
    pthread_mutex_unlock(&st->lock);
    pthread_join(st->reaper, NULL);
    dev->has_completion_thread = false;
    io_uring_queue_exit(&st->ring);
    pthread_mutex_destroy(&st->lock);
    free(st);
    dev->backend = NULL;
}

const struct blk_backend_ops blk_uring_ops = {
    .name = "uring",
    .init = uring_init,
    .submit = uring_submit,
    .submit_waited = uring_submit_waited,
    .fini = uring_fini,
};
