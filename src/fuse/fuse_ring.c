/* FUSE over io_uring for a libfuse 3.14 session (fuse_ring.h). */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse/fuse_ring.h"
#include "fuse/killpriv.h"
#include "util/log.h"

/* The kernel's ring protocol (uapi fuse.h 7.42; Debian 12's headers are 7.38). */
enum { RING_CMD_REGISTER = 1, RING_CMD_COMMIT_AND_FETCH = 2 };

struct ring_ent_in_out {
    uint64_t flags;
    uint64_t commit_id;  /* the request's unique: named again by the commit */
    uint32_t payload_sz; /* bytes in the payload buffer, both ways */
    uint32_t padding;
    uint64_t reserved;
};

struct ring_req_header {
    uint8_t in_out[128]; /* fuse_in_header on delivery, fuse_out_header on commit */
    uint8_t op_in[128];  /* the request's first argument, its per-opcode header */
    struct ring_ent_in_out ent;
};

struct ring_cmd_req { /* in the 128-byte SQE's command area */
    uint64_t flags;
    uint64_t commit_id;
    uint16_t qid;
    uint8_t padding[6];
};

_Static_assert(sizeof(struct ring_req_header) == 288, "the kernel's fuse_uring_req_header");
_Static_assert(sizeof(struct ring_cmd_req) == 24, "the kernel's fuse_uring_cmd_req");

/* Room before the payload for the in header and the per-opcode header, so that a request
 * is rebuilt contiguously without moving its payload (a WRITE's data); a whole page, so
 * that the payload stays aligned for O_DIRECT reads straight into it. */
#define HEADROOM 4096

struct ring_thread {
    struct fuse_ring *ring;
    pthread_t tid;
    bool started, have_uring;
    struct io_uring uring;
    uint16_t qid;
    struct ring_req_header *hdr;
    uint8_t *room; /* HEADROOM bytes, then the payload */
    struct iovec iov[2];
    uint64_t commit_id; /* of the request being served */
    bool replied;
};

struct fuse_ring {
    struct fuse_session *se;
    int fd;
    unsigned nthreads;
    size_t payload_len;
    atomic_uint registered;
    unsigned nqueues, per_queue;
    atomic_uint_fast64_t requests, errors;
    atomic_bool stopping;
    struct ring_thread *threads;
};

/* The ring request this thread is serving, for fuse_ring_reply. */
static __thread struct ring_thread *serving;

/* The kernel keeps one queue per possible CPU (not per online one). */
static unsigned possible_cpus(void)
{
    FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
    unsigned last = 0;
    if (f) {
        char buf[256];
        if (fgets(buf, sizeof(buf), f)) {
            /* "0-1", "0,2-5": the last number is the highest CPU id */
            for (char *p = buf; *p; p++)
                if (*p >= '0' && *p <= '9' && (p == buf || p[-1] < '0' || p[-1] > '9'))
                    last = (unsigned)strtoul(p, NULL, 10);
        }
        fclose(f);
    }
    return last + 1;
}

static struct io_uring_sqe *ring_sqe(struct ring_thread *t, uint32_t cmd)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&t->uring);
    if (!sqe)
        return NULL;
    memset(sqe, 0, 128); /* SQE128: the command area follows the common fields */
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = t->ring->fd;
    sqe->cmd_op = cmd;
    sqe->user_data = (uint64_t)(uintptr_t)t;
    struct ring_cmd_req *req = (struct ring_cmd_req *)sqe->cmd;
    req->qid = t->qid;
    req->commit_id = cmd == RING_CMD_COMMIT_AND_FETCH ? t->commit_id : 0;
    return sqe;
}

static int ring_register(struct ring_thread *t)
{
    struct io_uring_sqe *sqe = ring_sqe(t, RING_CMD_REGISTER);
    if (!sqe)
        return -EBUSY;
    sqe->addr = (uint64_t)(uintptr_t)t->iov;
    sqe->len = 2;
    int n = io_uring_submit(&t->uring);
    return n == 1 ? 0 : n < 0 ? n : -EIO;
}

/* Hands the reply in the thread's buffers back and asks for the next request. */
static int ring_commit(struct ring_thread *t)
{
    if (!ring_sqe(t, RING_CMD_COMMIT_AND_FETCH))
        return -EBUSY;
    int n = io_uring_submit(&t->uring);
    return n == 1 ? 0 : n < 0 ? n : -EIO;
}

void *fuse_ring_reply_buffer(size_t size)
{
    struct ring_thread *t = serving;
    return t && !t->replied && size <= t->ring->payload_len ? t->room + HEADROOM : NULL;
}

bool fuse_ring_reply(const struct iovec *iov, int count, ssize_t *written)
{
    struct ring_thread *t = serving;
    struct fuse_out_header oh;
    if (!t || t->replied || count < 1 || iov[0].iov_len != sizeof(oh))
        return false;
    memcpy(&oh, iov[0].iov_base, sizeof(oh));
    if (oh.unique != t->commit_id)
        return false; /* a notification, or not this request's reply */
    size_t body = 0;
    for (int i = 1; i < count; i++)
        body += iov[i].iov_len;
    if (body > t->ring->payload_len) {
        /* cannot happen with the sizes negotiated at INIT; fail the request, not the mount */
        oh.error = -EIO;
        body = 0;
    } else {
        uint8_t *p = t->room + HEADROOM;
        for (int i = 1; i < count; i++) {
            if (iov[i].iov_base != p) /* not built in place (fuse_ring_reply_buffer) */
                memmove(p, iov[i].iov_base, iov[i].iov_len);
            p += iov[i].iov_len;
        }
    }
    oh.len = (uint32_t)(sizeof(oh) + body);
    memcpy(t->hdr->in_out, &oh, sizeof(oh));
    t->hdr->ent.payload_sz = (uint32_t)body;
    t->replied = true;
    int err = ring_commit(t);
    if (err) {
        atomic_fetch_add(&t->ring->errors, 1);
        *written = -1;
        errno = -err;
        return true;
    }
    *written = (ssize_t)(sizeof(oh) + body);
    return true;
}

/* Rebuilds the request the thread's entry holds as /dev/fuse would have delivered it (in
 * header, per-opcode header, payload) and lets libfuse dispatch it; a request libfuse does
 * not answer (FORGET, NOTIFY_REPLY) still has to be committed to free the entry. */
static void ring_serve(struct ring_thread *t)
{
    struct fuse_in_header in;
    memcpy(&in, t->hdr->in_out, sizeof(in));
    uint32_t payload = t->hdr->ent.payload_sz;
    t->commit_id = t->hdr->ent.commit_id;
    t->replied = false;
    size_t fixed = sizeof(in) + payload;
    if (in.len < fixed || in.len - fixed > sizeof(t->hdr->op_in) ||
        payload > t->ring->payload_len) {
        log_err("fuse ring: malformed request (opcode %u, length %u, payload %u)", in.opcode,
                in.len, payload);
        atomic_fetch_add(&t->ring->errors, 1);
        struct fuse_out_header oh = {.len = sizeof(oh), .error = -EIO, .unique = t->commit_id};
        struct iovec iov = {&oh, sizeof(oh)};
        serving = t;
        ssize_t n;
        fuse_ring_reply(&iov, 1, &n);
        serving = NULL;
        return;
    }
    size_t op_len = in.len - fixed;
    uint8_t *start = t->room + HEADROOM - sizeof(in) - op_len;
    memcpy(start, &in, sizeof(in));
    memcpy(start + sizeof(in), t->hdr->op_in, op_len);
    killpriv_note_request(start, in.len);
    struct fuse_buf buf = {.mem = start, .size = in.len};
    serving = t;
    fuse_session_process_buf(t->ring->se, &buf);
    serving = NULL;
    atomic_fetch_add(&t->ring->requests, 1);
    if (!t->replied) {
        struct fuse_out_header oh = {.len = sizeof(oh), .error = 0, .unique = t->commit_id};
        memcpy(t->hdr->in_out, &oh, sizeof(oh));
        t->hdr->ent.payload_sz = 0;
        t->replied = true;
        if (ring_commit(t))
            atomic_fetch_add(&t->ring->errors, 1);
    }
}

static void *ring_thread_main(void *arg)
{
    struct ring_thread *t = arg;
    bool registered = false;
    int err = ring_register(t);
    while (!err) {
        struct io_uring_cqe *cqe;
        /* wake now and then to see whether the daemon is stopping */
        struct __kernel_timespec wait = {.tv_sec = 0, .tv_nsec = 200 * 1000000};
        err = io_uring_wait_cqe_timeout(&t->uring, &cqe, &wait);
        if (err == -EINTR || err == -ETIME) {
            err = atomic_load(&t->ring->stopping) ? -ECANCELED : 0;
            continue;
        }
        if (err)
            break;
        int res = cqe->res;
        io_uring_cqe_seen(&t->uring, cqe);
        if (res == -EAGAIN || res == -EINTR) {
            /* the kernel has not taken the INIT reply in yet: ask again shortly */
            nanosleep(&(struct timespec){0, 1000000}, NULL);
            err = registered ? ring_commit(t) : ring_register(t);
            continue;
        }
        if (res < 0) {
            /* -ENOTCONN/-ECONNABORTED/-ECANCELED: the connection is going away */
            if (!registered && res != -ENOTCONN)
                log_warn("fuse ring: registering an entry of queue %u failed: %s", t->qid,
                         strerror(-res));
            break;
        }
        if (!registered) {
            registered = true;
            atomic_fetch_add(&t->ring->registered, 1);
        }
        ring_serve(t);
    }
    /* Leaving the ring cancels the entry's command: the kernel takes the entry back. */
    io_uring_queue_exit(&t->uring);
    return NULL;
}

/* A REGISTER the kernel must refuse (no such queue): a failed REGISTER turns the ring off
 * for the connection and releases the requests it holds until the ring is ready. */
static void ring_abandon(int fd)
{
    struct io_uring u;
    if (io_uring_queue_init(2, &u, IORING_SETUP_SQE128))
        return;
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u);
    if (!sqe) {
        io_uring_queue_exit(&u);
        return;
    }
    memset(sqe, 0, 128);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = fd;
    sqe->cmd_op = RING_CMD_REGISTER;
    ((struct ring_cmd_req *)sqe->cmd)->qid = UINT16_MAX;
    struct io_uring_cqe *cqe;
    if (io_uring_submit(&u) == 1 && io_uring_wait_cqe(&u, &cqe) == 0)
        io_uring_cqe_seen(&u, cqe);
    io_uring_queue_exit(&u);
}

int fuse_ring_start(struct fuse_session *se, int fd, unsigned per_queue, size_t max_payload,
                    struct fuse_ring **out)
{
    *out = NULL;
    struct fuse_ring *ring = calloc(1, sizeof(*ring));
    if (!ring) {
        ring_abandon(fd);
        return -ENOMEM;
    }
    ring->se = se;
    ring->fd = fd;
    ring->nqueues = possible_cpus();
    ring->per_queue = per_queue ? per_queue : 1;
    ring->nthreads = ring->nqueues * ring->per_queue;
    /* the kernel wants room for max_write and max_pages, at least 8 KiB */
    ring->payload_len = max_payload < 8192 ? 8192 : max_payload;
    ring->threads = calloc(ring->nthreads, sizeof(*ring->threads));
    if (!ring->threads) {
        free(ring);
        ring_abandon(fd);
        return -ENOMEM;
    }
    /* Everything first, threads last: the kernel holds requests until every queue has an
     * entry, so either all entries get registered or none is. */
    int err = 0;
    for (unsigned i = 0; i < ring->nthreads && !err; i++) {
        struct ring_thread *t = &ring->threads[i];
        t->ring = ring;
        t->qid = (uint16_t)(i % ring->nqueues);
        /* page-aligned buffers; the payload's pages are touched only as far as used */
        if (posix_memalign((void **)&t->hdr, 4096, sizeof(*t->hdr)) ||
            posix_memalign((void **)&t->room, 4096, HEADROOM + ring->payload_len)) {
            err = -ENOMEM;
            break;
        }
        memset(t->hdr, 0, sizeof(*t->hdr));
        t->iov[0] = (struct iovec){t->hdr, sizeof(*t->hdr)};
        t->iov[1] = (struct iovec){t->room + HEADROOM, ring->payload_len};
        err = io_uring_queue_init(4, &t->uring, IORING_SETUP_SQE128);
        if (!err)
            t->have_uring = true;
    }
    for (unsigned i = 0; i < ring->nthreads && !err; i++) {
        struct ring_thread *t = &ring->threads[i];
        err = -pthread_create(&t->tid, NULL, ring_thread_main, t);
        t->started = !err;
    }
    if (err) {
        log_warn("fuse ring: cannot set up (%s); requests stay on /dev/fuse", strerror(-err));
        ring_abandon(fd);
    }
    *out = ring;
    return err;
}

void fuse_ring_stop(struct fuse_ring *ring)
{
    if (!ring)
        return;
    atomic_store(&ring->stopping, true);
    for (unsigned i = 0; i < ring->nthreads; i++) {
        struct ring_thread *t = &ring->threads[i];
        if (t->started)
            pthread_join(t->tid, NULL); /* the thread leaves its io_uring */
        else if (t->have_uring)
            io_uring_queue_exit(&t->uring);
        free(t->hdr);
        free(t->room);
    }
    free(ring->threads);
    free(ring);
}

void fuse_ring_stats(const struct fuse_ring *ring, struct fuse_ring_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (!ring)
        return;
    st->requests = atomic_load(&ring->requests);
    st->errors = atomic_load(&ring->errors);
    st->entries = atomic_load(&ring->registered);
    st->threads = ring->nthreads;
}
