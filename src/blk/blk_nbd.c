/* NBD backend: the device is an export of an NBD server, reached through libnbd's
 * asynchronous API (nbd://, nbds://, nbd+unix:// URIs as libnbd parses them).
 *
 * Threads: any thread submits, calling nbd_aio_* itself under nb->lock (the request goes out
 * on the socket at once when it has room).  Each connection's replies are read by one
 * thread at a time, its reader: a caller blocked on its one request (submit_waited) reads
 * the connection that request went out on itself, as a pread would, when nobody else reads
 * it; otherwise it sleeps and the reader hands it its finished request, which it completes
 * in its own thread.  One thread of ours, the poller, reads the connections that carry only
 * requests nobody waits on, takes over a connection its waiting reader leaves with requests
 * in flight and no waiter to hand it to, watches idle connections for the server closing
 * them, reconnects and keeps the timers.  libnbd calls the completion callbacks inside
 * whichever nbd_* call read the reply (or found the connection dead), so always under
 * nb->lock; they only record the outcome.  The caller of that libnbd call then sorts the
 * finished requests (settle: done, retried or failed) and, after dropping the lock,
 * completes them: done() never runs under the lock, and a waiter's thread runs no done()
 * but its own (it may hold locks another request's done() takes).
 *
 * Faults.  A connection that dies (reset, server gone, no reply for net_timeout) is
 * replaced: every request that was on it runs again on the new one, with a backoff between
 * connection attempts (50 ms doubling to 2 s).  When no connection comes back within
 * net_timeout, the requests waiting fail with EIO and later ones fail at once until one
 * does.  The server's own I/O errors on reads and writes are retried a few times with
 * backoff; any other error, and a flush the server failed, is the caller's (a flush retried
 * after a failure could succeed and hide lost writes).  NBD promises durability only after
 * a flush (or for a FUA write, at its reply), so a connection lost after writes were
 * acknowledged and before a flush covered
 * them may have lost them on the server: the next flush then fails with EIO rather than call
 * them safe (a flush that was in flight on that connection included). */
#include "blk/blk_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#ifdef F2FUSE_HAVE_LIBNBD

#include <libnbd.h>
#include <poll.h>
#include <semaphore.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/clock.h"

#define MAX_CONN          16
#define BACKOFF_MIN_NS    (50 * NS_PER_MS)
#define BACKOFF_MAX_NS    (2 * NS_PER_SEC)
#define CONNECT_TRY_NS    (5 * NS_PER_SEC) /* one connection attempt at most */
#define SERVER_TRIES      4                /* runs of a read or write the server fails with EIO */
#define SERVER_BACKOFF_NS (100 * NS_PER_MS)
#define PAYLOAD_DEFAULT   (32u << 20) /* largest read or write when the server names none */
#define TRIM_CHUNK        (1u << 30)  /* NBD lengths are 32-bit */

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_READY };

struct nbd_waiter;

struct nbd_conn {
    struct nbd_handle *h; /* NULL while down */
    enum conn_state state;
    /* Who reads the replies of a ready connection with requests in flight: a waiter, or the
     * poller (poller_reads); neither while it is idle. */
    struct nbd_waiter *reader;
    bool poller_reads;
    unsigned inflight;         /* requests issued on h whose callbacks have not all come */
    uint64_t last_progress_ns; /* the last reply, or when inflight left 0 */
    uint64_t last_write_seq;   /* nb->writes_done when a write last completed here */
    uint64_t attempt_end_ns;   /* CONNECTING: this attempt is given up then */
};

struct nbd_backend;
struct nbd_io;

/* A caller blocked in submit_waited until its one request is done; on its stack. */
struct nbd_waiter {
    struct nbd_io *io;
    sem_t wake;               /* posted after the lock is dropped: look again */
    bool done;                /* io finished: the waiter completes it */
    bool asleep;              /* in sem_wait, on nb->sleepers */
    struct nbd_waiter *next;  /* on nb->sleepers, then on nb->to_post */
    struct nbd_conn *reading; /* the connection it was made the reader of (if it still is) */
};

/* One caller request on its way, split into parts of at most max_payload bytes; or a run
 * of adjacent reads or writes sent as one command through a bounce buffer (a 128 KiB read
 * of 32 blocks is one round trip, not 32). */
struct nbd_io {
    struct nbd_backend *nb;
    struct nbd_waiter *waiter; /* blocked on it in submit_waited, or NULL */
    struct blk_req *req;       /* the request, or a run's first */
    struct nbd_conn *conn;     /* where it runs; NULL while queued */
    uint64_t len;              /* bytes to move: a read stops at the end of the device */
    int64_t result;            /* for the caller(s), once done */
    uint8_t *bounce;           /* a run's data, NULL for one request */
    unsigned nmembers;         /* a run's requests (1: none) */
    unsigned parts_left;
    int err;               /* the first failed part's errno */
    unsigned server_fails; /* runs the server failed with EIO */
    uint64_t due_ns;       /* queued: not before then */
    uint64_t deadline_ns;  /* once its connection was lost: fails if not done by then */
    uint64_t flush_cover;  /* FLUSH: nb->writes_done when it was sent */
    struct nbd_io *next;
    struct blk_req *members[]; /* a run's requests, in offset order */
};

struct nbd_list {
    struct nbd_io *head, *tail;
};

struct nbd_backend {
    struct blk_dev *dev;
    char *uri;
    pthread_mutex_t lock; /* everything below, and every call into libnbd */
    struct nbd_conn conn[MAX_CONN];
    unsigned nconn;
    unsigned qd; /* requests in flight per connection */
    uint64_t timeout_ns;
    uint64_t export_size;
    bool can_flush, can_fua, can_trim;
    uint64_t max_payload;
    struct nbd_list queue;       /* waiting for a connection, for room, or for their due time */
    struct nbd_list finished;    /* every part came back: for settle */
    struct nbd_list done;        /* to complete once the lock is dropped (not in a waiter) */
    struct nbd_waiter *sleepers; /* waiters asleep, the latest first */
    struct nbd_waiter *to_post;  /* waiters to wake once the lock is dropped */
    bool kick;                   /* the poller has to look again */
    /* durability across reconnects (see the top) */
    uint64_t writes_done, flushed;
    bool lost_unflushed;
    /* outage: no connection ready since down_since_ns (0: one is) */
    uint64_t down_since_ns, reconnect_due_ns, backoff_ns;
    bool gone; /* down for longer than the timeout: requests fail at once */
    unsigned rr;
    int wake_fd;
    bool stop;
    pthread_t poller;
};

static void list_push(struct nbd_list *l, struct nbd_io *io)
{
    io->next = NULL;
    if (l->tail)
        l->tail->next = io;
    else
        l->head = io;
    l->tail = io;
}

static struct nbd_io *list_take_all(struct nbd_list *l)
{
    struct nbd_io *all = l->head;
    l->head = l->tail = NULL;
    return all;
}

static void wake_poller(struct nbd_backend *nb)
{
    uint64_t one = 1;
    if (write(nb->wake_fd, &one, sizeof(one)) < 0) {
        /* the counter is full: the poller wakes anyway */
    }
}

static const char *libnbd_error(void)
{
    const char *e = nbd_get_error();
    return e ? e : "unknown error";
}

static bool conn_broken(const struct nbd_conn *c)
{
    return !c->h || nbd_aio_is_dead(c->h) || nbd_aio_is_closed(c->h);
}

/* ---- completions ---------------------------------------------------------------------- */

/* libnbd's completion callback of one part; runs under nb->lock, inside some nbd_* call. */
static int part_done(void *user_data, int *error)
{
    struct nbd_io *io = user_data;
    if (*error && !io->err)
        io->err = *error;
    io->conn->last_progress_ns = clock_mono_ns();
    if (--io->parts_left == 0)
        list_push(&io->nb->finished, io);
    return 1;
}

/* w, asleep, wakes once the lock is dropped. */
static void wake_waiter(struct nbd_backend *nb, struct nbd_waiter *w)
{
    for (struct nbd_waiter **p = &nb->sleepers; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->asleep = false;
    w->next = nb->to_post;
    nb->to_post = w;
}

static void finish(struct nbd_backend *nb, struct nbd_io *io, int64_t result)
{
    io->result = result;
    struct nbd_waiter *w = io->waiter;
    if (!w) {
        list_push(&nb->done, io);
        return;
    }
    w->done = true; /* its waiter completes it */
    if (w->asleep)
        wake_waiter(nb, w);
}

static void io_free(struct nbd_io *io)
{
    free(io->bounce);
    free(io);
}

/* Completes a list settle finished (taken off nb->done under the lock), outside the lock. */
static void complete_list(struct nbd_backend *nb, struct nbd_io *io)
{
    while (io) {
        struct nbd_io *next = io->next;
        if (io->nmembers <= 1) {
            struct blk_req *req = io->req;
            req->result = io->result;
            io_free(io);
            blk_req_complete(nb->dev, req);
        } else {
            uint64_t at = 0;
            for (unsigned i = 0; i < io->nmembers; i++) {
                struct blk_req *m = io->members[i];
                if (io->result >= 0 && m->op == BLK_READ)
                    memcpy(m->buf, io->bounce + at, m->len);
                at += m->len;
                m->result = io->result < 0 ? io->result : (int64_t)m->len;
            }
            unsigned n = io->nmembers;
            struct blk_req *members[n];
            memcpy(members, io->members, sizeof(members));
            io_free(io);
            for (unsigned i = 0; i < n; i++)
                blk_req_complete(nb->dev, members[i]);
        }
        io = next;
    }
}

/* Drops the lock, then wakes the poller if it has to look again and the waiters told to;
 * returns the done list when take_done, else leaves it to the poller. */
static struct nbd_io *unlock_and_wake(struct nbd_backend *nb, bool take_done)
{
    struct nbd_io *done = take_done ? list_take_all(&nb->done) : NULL;
    if (nb->done.head)
        nb->kick = true;
    struct nbd_waiter *post = nb->to_post;
    nb->to_post = NULL;
    bool kick = nb->kick;
    nb->kick = false;
    pthread_mutex_unlock(&nb->lock);
    if (kick)
        wake_poller(nb);
    while (post) {
        struct nbd_waiter *next = post->next; /* post may be gone once it runs */
        sem_post(&post->wake);
        post = next;
    }
    return done;
}

/* The lock dropped: completes what was done. */
static void unlock_and_complete(struct nbd_backend *nb)
{
    complete_list(nb, unlock_and_wake(nb, true));
}

static void queue_retry(struct nbd_backend *nb, struct nbd_io *io, uint64_t due)
{
    io->conn = NULL;
    io->err = 0;
    io->due_ns = due;
    list_push(&nb->queue, io);
}

/* The connection is unusable: its requests come back through their callbacks (libnbd
 * retires everything in flight when the socket goes), and writes it acknowledged that no
 * flush covered may be lost. */
static void conn_lost(struct nbd_backend *nb, struct nbd_conn *c, const char *why)
{
    if (c->state != CONN_READY)
        return;
    c->state = CONN_DOWN;
    c->reader = NULL; /* a waiter reading it wakes (the socket goes) and looks again */
    c->poller_reads = false;
    if (c->last_write_seq > nb->flushed)
        nb->lost_unflushed = true;
    log_warn("%s: connection %u lost (%s); reconnecting", nb->uri, (unsigned)(c - nb->conn), why);
    atomic_fetch_add(&nb->dev->stats.net_disconnects, 1);
    if (c->h && !conn_broken(c)) {
        /* still open (a stall, a server shutting down): drop the socket, then let libnbd
         * see it gone so that it retires what is in flight (through part_done) */
        shutdown(nbd_aio_get_fd(c->h), SHUT_RDWR);
        for (int i = 0; i < 16 && !conn_broken(c); i++) {
            unsigned dir = (unsigned)nbd_aio_get_direction(c->h);
            if ((dir & LIBNBD_AIO_DIRECTION_READ ? nbd_aio_notify_read(c->h)
                                                 : nbd_aio_notify_write(c->h)) < 0)
                break;
        }
    }
    bool any_ready = false;
    for (unsigned i = 0; i < nb->nconn; i++)
        any_ready |= nb->conn[i].state == CONN_READY;
    uint64_t now = clock_mono_ns();
    nb->kick = true; /* to reconnect, when a waiter found it lost */
    if (!any_ready && !nb->down_since_ns) {
        nb->down_since_ns = now;
        nb->backoff_ns = BACKOFF_MIN_NS;
        nb->reconnect_due_ns = now; /* the first attempt at once */
    }
}

static bool connection_errno(int err)
{
    return err == ENOTCONN || err == ECONNRESET || err == EPIPE || err == ESHUTDOWN ||
           err == ECONNABORTED || err == ETIMEDOUT;
}

static void settle_list(struct nbd_backend *nb, struct nbd_io *io, uint64_t now);

/* Sorts the requests whose parts all came back: done, retried, or failed. */
static void settle(struct nbd_backend *nb)
{
    uint64_t now = clock_mono_ns();
    struct nbd_io *io;
    /* dropping a connection (conn_lost) finishes more of them: until none is left */
    while ((io = list_take_all(&nb->finished)) != NULL)
        settle_list(nb, io, now);
}

static void settle_list(struct nbd_backend *nb, struct nbd_io *io, uint64_t now)
{
    while (io) {
        struct nbd_io *next = io->next;
        struct nbd_conn *c = io->conn;
        struct blk_req *req = io->req;
        int err = io->err;
        c->inflight--;
        if (c->inflight == 0) {
            c->last_progress_ns = now;
            c->poller_reads = false; /* idle: the next waiter may read it */
        }
        if (!err) {
            int64_t result = 0;
            if (req->op == BLK_WRITE) {
                uint64_t seq = ++nb->writes_done;
                if (!req->fua) /* a FUA write is durable once acknowledged: no flush owed */
                    c->last_write_seq = seq;
                result = (int64_t)io->len;
            } else if (req->op == BLK_READ || req->op == BLK_DISCARD) {
                result = (int64_t)io->len;
            } else if (nb->lost_unflushed) {
                nb->lost_unflushed = false;
                log_err("%s: the connection was lost after writes the server acknowledged and "
                        "no flush covered: the server may have dropped them, so this flush fails",
                        nb->uri);
                result = -EIO;
            } else if (io->flush_cover > nb->flushed) {
                nb->flushed = io->flush_cover;
            }
            finish(nb, io, result);
        } else if (connection_errno(err) || conn_broken(c)) {
            conn_lost(nb, c, strerror(err));
            if (!io->deadline_ns)
                io->deadline_ns = now + nb->timeout_ns;
            atomic_fetch_add(&nb->dev->stats.net_retries, 1);
            queue_retry(nb, io, now);
        } else if (err == EIO && (req->op == BLK_READ || req->op == BLK_WRITE) &&
                   ++io->server_fails < SERVER_TRIES) {
            uint64_t wait = SERVER_BACKOFF_NS << (2 * (io->server_fails - 1));
            log_warn("%s: the server failed a %s of %" PRIu64 " bytes at %" PRIu64
                     " (%s); trying again in %" PRIu64 " ms",
                     nb->uri, req->op == BLK_READ ? "read" : "write", req->len, req->off,
                     strerror(err), (uint64_t)(wait / NS_PER_MS));
            atomic_fetch_add(&nb->dev->stats.net_retries, 1);
            queue_retry(nb, io, now + wait);
        } else {
            finish(nb, io, -err);
        }
        io = next;
    }
}

/* ---- issuing -------------------------------------------------------------------------- */

/* Sends one request on c (ready, with room); its parts complete through part_done. */
static void issue(struct nbd_backend *nb, struct nbd_conn *c, struct nbd_io *io)
{
    struct blk_req *req = io->req;
    io->conn = c;
    io->err = 0;
    if (c->inflight++ == 0)
        c->last_progress_ns = clock_mono_ns();
    if (!c->reader && !c->poller_reads) {
        /* nobody reads it: the waiter does (unless it still reads another), else the poller;
         * noted on both sides, so that the waiter lets it go even if its request fails
         * right here */
        struct nbd_waiter *w = io->waiter;
        if (w && !w->reading) {
            c->reader = w;
            w->reading = c;
            if (w->asleep)
                wake_waiter(nb, w);
        } else {
            c->poller_reads = true;
            nb->kick = true;
        }
    }
    io->parts_left = 1; /* held until every part is sent */
    nbd_completion_callback cb = {.callback = part_done, .user_data = io};
    uint64_t base = nb->dev->window_start + req->off;
    int64_t cookie = 0;
    if (req->op == BLK_FLUSH) {
        io->flush_cover = nb->writes_done;
        io->parts_left++;
        if ((cookie = nbd_aio_flush(c->h, cb, 0)) < 0)
            io->parts_left--;
    } else {
        uint64_t chunk = req->op == BLK_DISCARD ? TRIM_CHUNK : nb->max_payload;
        for (uint64_t at = 0; at < io->len && cookie >= 0; at += chunk) {
            uint64_t n = io->len - at < chunk ? io->len - at : chunk;
            uint8_t *buf = (io->bounce ? io->bounce : (uint8_t *)req->buf) + at;
            io->parts_left++;
            if (req->op == BLK_READ)
                cookie = nbd_aio_pread(c->h, buf, n, base + at, cb, 0);
            else if (req->op == BLK_WRITE)
                cookie = nbd_aio_pwrite(c->h, buf, n, base + at, cb,
                                        req->fua && nb->can_fua ? LIBNBD_CMD_FLAG_FUA : 0);
            else
                cookie = nbd_aio_trim(c->h, n, base + at, cb, 0);
            if (cookie < 0)
                io->parts_left--; /* libnbd will not call back for it */
        }
    }
    if (cookie < 0 && !io->err) {
        int err = nbd_get_errno();
        char why[256];
        snprintf(why, sizeof(why), "%s", libnbd_error()); /* before the next libnbd call */
        io->err = err ? err : EIO;
        if (conn_broken(c))
            io->err = ENOTCONN;
        else
            log_err("%s: %s", nb->uri, why);
    }
    if (--io->parts_left == 0)
        list_push(&nb->finished, io);
}

/* A ready connection with room, the least busy one (round robin among equals), or NULL. */
static struct nbd_conn *pick_conn(struct nbd_backend *nb)
{
    struct nbd_conn *best = NULL;
    for (unsigned k = 0; k < nb->nconn; k++) {
        struct nbd_conn *c = &nb->conn[(nb->rr + k) % nb->nconn];
        if (c->state == CONN_READY && c->inflight < nb->qd &&
            (!best || c->inflight < best->inflight))
            best = c;
    }
    if (best)
        nb->rr = (unsigned)(best - nb->conn) + 1;
    return best;
}

/* The result a request gets without being sent, or 1 when it has to go to the server. */
static int64_t local_result(const struct nbd_backend *nb, const struct blk_req *req)
{
    if (req->flags & BLK_REQF_PRESET)
        return req->preset_result;
    if (req->op == BLK_FLUSH && !nb->can_flush)
        return 0; /* nothing to flush to (said at open) */
    if (req->op == BLK_DISCARD && !nb->can_trim)
        return (int64_t)req->len; /* advisory */
    if (req->op != BLK_FLUSH && req->len == 0)
        return req->op == BLK_READ ? 0 : (int64_t)req->len;
    return 1;
}

/* Sends what the queue holds and may go now; fails what waited past its deadline. */
static void pump(struct nbd_backend *nb)
{
    uint64_t now = clock_mono_ns();
    struct nbd_io *io = list_take_all(&nb->queue);
    unsigned expired = 0;
    while (io) {
        struct nbd_io *next = io->next;
        struct nbd_conn *c;
        if (nb->gone || (io->deadline_ns && now >= io->deadline_ns)) {
            expired++;
            finish(nb, io, -EIO);
        } else if (io->due_ns > now || !(c = pick_conn(nb))) {
            list_push(&nb->queue, io);
        } else {
            issue(nb, c, io);
        }
        io = next;
    }
    if (expired)
        log_err("%s: %u request(s) found no working connection within net_timeout (%" PRIu64
                " s): they fail with EIO",
                nb->uri, expired, (uint64_t)(nb->timeout_ns / NS_PER_SEC));
    settle(nb);
}

/* Whether a connection has a request still to send, for which the poller has to wait until
 * the socket has room (on one a waiter reads too: another thread's write must not wait for
 * that waiter's reply to come in). */
static bool wants_write(struct nbd_backend *nb)
{
    for (unsigned i = 0; i < nb->nconn; i++) {
        struct nbd_conn *c = &nb->conn[i];
        if (c->h && c->state != CONN_DOWN &&
            (nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE))
            return true;
    }
    return false;
}

/* How many requests from reqs[0] go to the server as one command: a run of adjacent reads or
 * writes (blk_mergeable_run) inside the device and within max_payload, or 1. */
static unsigned run_length(const struct nbd_backend *nb, struct blk_req *const *reqs, unsigned n)
{
    unsigned run = blk_mergeable_run(reqs, n), k = 1;
    uint64_t total = reqs[0]->len;
    while (k < run && total + reqs[k]->len <= nb->max_payload &&
           reqs[k]->off + reqs[k]->len <= nb->dev->size)
        total += reqs[k++]->len;
    return reqs[0]->off + reqs[0]->len <= nb->dev->size ? k : 1;
}

/* The io for reqs[0..k): one request, or a run with its bounce buffer (a write's data copied
 * in now, so that a retry sends the same bytes); NULL on ENOMEM. */
static struct nbd_io *io_new(struct nbd_backend *nb, struct blk_req **reqs, unsigned k)
{
    struct nbd_io *io = calloc(1, sizeof(*io) + (k > 1 ? k * sizeof(io->members[0]) : 0));
    if (!io)
        return NULL;
    io->nb = nb;
    io->req = reqs[0];
    io->nmembers = k;
    io->len = reqs[0]->len;
    if (k == 1) {
        if (io->req->op == BLK_READ && io->req->off + io->len > nb->dev->size)
            io->len = nb->dev->size - io->req->off; /* a short count at the end, as a file */
        return io;
    }
    for (unsigned i = 1; i < k; i++)
        io->len += reqs[i]->len;
    io->bounce = malloc(io->len);
    if (!io->bounce) {
        free(io);
        return NULL;
    }
    uint64_t at = 0;
    for (unsigned i = 0; i < k; i++) {
        io->members[i] = reqs[i];
        if (reqs[i]->op == BLK_WRITE)
            memcpy(io->bounce + at, reqs[i]->buf, reqs[i]->len);
        at += reqs[i]->len;
    }
    atomic_fetch_add(&nb->dev->stats.merged, k - 1);
    return io;
}

/* Sends io now, or queues it behind what waits already (order is kept) for the poller. */
static void start(struct nbd_backend *nb, struct nbd_io *io)
{
    struct nbd_conn *c = NULL;
    if (nb->gone) {
        finish(nb, io, -EIO);
    } else if (nb->queue.head || !(c = pick_conn(nb))) {
        list_push(&nb->queue, io);
        nb->kick = true;
    } else {
        issue(nb, c, io);
    }
}

static int nbd_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    struct nbd_backend *nb = dev->backend;
    struct blk_req *no_memory = NULL; /* chained through next */
    pthread_mutex_lock(&nb->lock);
    for (unsigned i = 0, k; i < n; i += k) {
        k = local_result(nb, reqs[i]) == 1 ? run_length(nb, reqs + i, n - i) : 1;
        struct nbd_io *io = io_new(nb, reqs + i, k);
        if (!io) {
            for (unsigned j = 0; j < k; j++) {
                reqs[i + j]->next = no_memory;
                no_memory = reqs[i + j];
            }
            continue;
        }
        int64_t local = k == 1 ? local_result(nb, io->req) : 1;
        if (local != 1)
            finish(nb, io, local);
        else
            start(nb, io);
    }
    settle(nb);
    nb->kick |= wants_write(nb);
    unlock_and_complete(nb);
    while (no_memory) {
        struct blk_req *next = no_memory->next;
        no_memory->result = -ENOMEM;
        blk_req_complete(dev, no_memory);
        no_memory = next;
    }
    return 0;
}

/* c's socket showed revents: lets libnbd read (when may_read: only c's reader reads a
 * socket that works) or write what it can, and drops the connection when that failed or the
 * server closed it. */
static void conn_notify(struct nbd_backend *nb, struct nbd_conn *c, short revents, bool may_read)
{
    /* the direction may have changed since: ask again, as libnbd says */
    unsigned dir = (unsigned)nbd_aio_get_direction(c->h);
    int ret = 0;
    if (may_read && (dir & LIBNBD_AIO_DIRECTION_READ) &&
        (revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP)))
        ret = nbd_aio_notify_read(c->h);
    else if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && (revents & (POLLOUT | POLLERR)))
        ret = nbd_aio_notify_write(c->h);
    char why[256] = "closed by the server";
    if (ret < 0)
        snprintf(why, sizeof(why), "%s", libnbd_error()); /* before the next libnbd call */
    if (c->state == CONN_READY && (ret < 0 || conn_broken(c)))
        conn_lost(nb, c, why);
}

/* w stops reading the connection it read, if it still does: a waiter asleep on a request
 * in flight there reads on, else the poller does. */
static void leave_reader(struct nbd_backend *nb, struct nbd_waiter *w)
{
    struct nbd_conn *c = w->reading;
    w->reading = NULL;
    if (!c || c->reader != w)
        return;
    c->reader = NULL;
    if (c->state != CONN_READY || !c->inflight)
        return;
    for (struct nbd_waiter *x = nb->sleepers; x; x = x->next)
        if (x->io->conn == c) {
            c->reader = x;
            x->reading = c;
            wake_waiter(nb, x);
            return;
        }
    c->poller_reads = true;
    nb->kick = true;
}

/* How long a reader polls before it looks again under the lock.  Its request may finish
 * without a byte on the socket it polls: the connection lost and its socket closed before
 * the poll began, the number reused by the reconnection's socket, and the retry failed by
 * another thread (which posts only sleeping waiters).  A test_nbd run with ASan hung there
 * once; this bounds such a race to a few milliseconds instead. */
#define READER_POLL_MS 20

/* w, the reader of c (ready), waits for c's socket with the lock dropped, then lets libnbd
 * read the reply (its own or another's) and sends what waits for room. */
static void read_step(struct nbd_backend *nb, struct nbd_waiter *w, struct nbd_conn *c)
{
    unsigned dir = (unsigned)nbd_aio_get_direction(c->h);
    struct pollfd pfd = {
        .fd = nbd_aio_get_fd(c->h),
        .events = (short)(POLLIN | (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0))};
    if (pfd.fd < 0) {
        conn_lost(nb, c, libnbd_error());
        settle(nb);
        return;
    }
    (void)unlock_and_wake(nb, false);
    int r = poll(&pfd, 1, READER_POLL_MS);
    pthread_mutex_lock(&nb->lock);
    if (r > 0 && c->reader == w && c->state == CONN_READY && c->h)
        conn_notify(nb, c, pfd.revents, true);
    pump(nb); /* a reply made room: what the queue holds goes out */
}

/* A caller blocked on one request: it reads the reply itself where nobody else reads that
 * connection (a lone reader needs no other thread to wake it: one thread switch less than
 * the poller's path each way), sleeps otherwise, and completes its request in its own
 * thread.  Batches go the poller's way. */
static int nbd_submit_waited(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    struct nbd_backend *nb = dev->backend;
    if (n != 1 || local_result(nb, reqs[0]) != 1)
        return nbd_submit(dev, reqs, n);
    struct nbd_io *io = io_new(nb, reqs, 1);
    if (!io)
        return nbd_submit(dev, reqs, n); /* fails it there */
    struct nbd_waiter w = {.io = io};
    sem_init(&w.wake, 0, 0);
    io->waiter = &w;
    pthread_mutex_lock(&nb->lock);
    start(nb, io);
    settle(nb);
    nb->kick |= wants_write(nb);
    while (!w.done) {
        struct nbd_conn *c = io->conn; /* NULL while queued */
        if (w.reading && w.reading != c)
            leave_reader(nb, &w);
        if (c && c->state == CONN_READY && !c->reader && !c->poller_reads)
            c->reader = &w;
        if (c && c->state == CONN_READY && c->reader == &w) {
            w.reading = c;
            read_step(nb, &w, c);
            continue;
        }
        /* another reads the reply, or it waits in the queue: until told to look again */
        w.asleep = true;
        w.next = nb->sleepers;
        nb->sleepers = &w;
        (void)unlock_and_wake(nb, false);
        while (sem_wait(&w.wake) != 0) {
            /* EINTR */
        }
        pthread_mutex_lock(&nb->lock);
    }
    leave_reader(nb, &w);
    (void)unlock_and_wake(nb, false);
    sem_destroy(&w.wake);
    io->next = NULL;
    complete_list(nb, io);
    return 0;
}

/* ---- connecting ----------------------------------------------------------------------- */

/* A handle with the URI's connection started, or NULL (logged when log_failure). */
static struct nbd_handle *start_connect(struct nbd_backend *nb, bool log_failure)
{
    struct nbd_handle *h = nbd_create();
    if (!h) {
        if (log_failure)
            log_err("%s: %s", nb->uri, libnbd_error());
        return NULL;
    }
    /* the user names the URI, and with it files such as tls-psk-file= */
    nbd_set_uri_allow_local_file(h, true);
    /* reads fill every byte or fail: libnbd need not zero the buffer first */
    nbd_set_pread_initialize(h, false);
    /* simple replies: a read's reply is a header and the data, two receives; a structured
     * one takes four (bench/nbd), and f2fuse uses nothing only they carry */
    nbd_set_request_structured_replies(h, false);
    if (nbd_aio_connect_uri(h, nb->uri) < 0) {
        if (log_failure)
            log_err("cannot connect to %s: %s", nb->uri, libnbd_error());
        nbd_close(h);
        return NULL;
    }
    return h;
}

/* A new connection's export must be the one the device was opened on. */
static bool same_export(struct nbd_backend *nb, struct nbd_handle *h)
{
    int64_t size = nbd_get_size(h);
    if (size >= 0 && (uint64_t)size == nb->export_size &&
        (nb->dev->read_only || nbd_is_read_only(h) == 0))
        return true;
    log_err("%s: the reconnected export is not the one opened (size %" PRId64 " bytes, was "
            "%" PRIu64 "%s); not using it",
            nb->uri, size, nb->export_size,
            nbd_is_read_only(h) > 0 ? ", and it is read-only now" : "");
    return false;
}

/* The poller: starts connection attempts that are due (all down connections at once). */
static void reconnect_due(struct nbd_backend *nb, uint64_t now)
{
    if (!nb->down_since_ns && !nb->reconnect_due_ns)
        return;
    if (nb->reconnect_due_ns > now)
        return;
    for (unsigned i = 0; i < nb->nconn; i++) {
        struct nbd_conn *c = &nb->conn[i];
        if (c->state != CONN_DOWN || c->inflight)
            continue;
        if (c->h) {
            nbd_close(c->h);
            c->h = NULL;
        }
        c->h = start_connect(nb, false);
        if (c->h) {
            c->state = CONN_CONNECTING;
            c->attempt_end_ns = now + CONNECT_TRY_NS;
        }
    }
    nb->reconnect_due_ns = now + nb->backoff_ns;
    if (nb->backoff_ns < BACKOFF_MAX_NS)
        nb->backoff_ns *= 2;
}

/* Down for longer than the timeout: what waits fails, and what comes fails at once. */
static void check_outage(struct nbd_backend *nb, uint64_t now)
{
    if (nb->down_since_ns && now - nb->down_since_ns >= nb->timeout_ns && !nb->gone) {
        nb->gone = true;
        atomic_fetch_add(&nb->dev->stats.net_timeouts, 1);
        log_err("%s: no connection for %" PRIu64 " s (net_timeout): requests fail with EIO "
                "until the server is back",
                nb->uri, (uint64_t)(nb->timeout_ns / NS_PER_SEC));
    }
}

/* A connection attempt moved on: ready (check the export), failed, or still going. */
static void connecting_step(struct nbd_backend *nb, struct nbd_conn *c, uint64_t now)
{
    if (nbd_aio_is_ready(c->h)) {
        if (!same_export(nb, c->h)) {
            nbd_close(c->h);
            c->h = NULL;
            c->state = CONN_DOWN;
            return;
        }
        c->state = CONN_READY;
        c->last_progress_ns = now;
        if (nb->down_since_ns)
            log_info("%s: reconnected after %" PRIu64 " ms", nb->uri,
                     (uint64_t)((now - nb->down_since_ns) / NS_PER_MS));
        atomic_fetch_add(&nb->dev->stats.net_reconnects, 1);
        nb->down_since_ns = 0;
        nb->reconnect_due_ns = 0;
        nb->gone = false;
        /* the others down too come back at the next round */
        for (unsigned i = 0; i < nb->nconn; i++)
            if (nb->conn[i].state == CONN_DOWN)
                nb->reconnect_due_ns = now;
        return;
    }
    if (conn_broken(c) || now >= c->attempt_end_ns) {
        nbd_close(c->h);
        c->h = NULL;
        c->state = CONN_DOWN;
        if (!nb->down_since_ns) { /* others are up: try this one again later */
            nb->reconnect_due_ns = now + BACKOFF_MAX_NS;
        }
    }
}

/* ---- the poller ----------------------------------------------------------------------- */

static uint64_t next_wakeup(struct nbd_backend *nb, uint64_t now)
{
    uint64_t at = now + (nb->timeout_ns / 4 < NS_PER_SEC ? nb->timeout_ns / 4 : NS_PER_SEC);
    if (nb->reconnect_due_ns && nb->reconnect_due_ns < at)
        at = nb->reconnect_due_ns;
    /* a request due already waits for a connection, whose arrival wakes the poller anyway */
    for (struct nbd_io *io = nb->queue.head; io; io = io->next)
        if (io->due_ns > now && io->due_ns < at)
            at = io->due_ns;
    return at;
}

/* Connections whose server has not answered for the timeout are dropped (and replaced). */
static void check_stalls(struct nbd_backend *nb, uint64_t now)
{
    for (unsigned i = 0; i < nb->nconn; i++) {
        struct nbd_conn *c = &nb->conn[i];
        if (c->state == CONN_READY && c->inflight && now - c->last_progress_ns > nb->timeout_ns)
            conn_lost(nb, c, "no reply within net_timeout");
    }
}

static void *poller_main(void *arg)
{
    struct nbd_backend *nb = arg;
    pthread_mutex_lock(&nb->lock);
    for (;;) {
        struct pollfd pfd[MAX_CONN + 1];
        struct nbd_conn *who[MAX_CONN];
        unsigned n = 0;
        uint64_t now = clock_mono_ns();
        reconnect_due(nb, now);
        check_outage(nb, now);
        check_stalls(nb, now);
        pump(nb);
        bool idle = !nb->queue.head;
        for (unsigned i = 0; i < nb->nconn; i++)
            idle &= nb->conn[i].inflight == 0;
        if (nb->stop && idle) {
            unlock_and_complete(nb);
            break;
        }
        for (unsigned i = 0; i < nb->nconn; i++) {
            struct nbd_conn *c = &nb->conn[i];
            if (!c->h || c->state == CONN_DOWN)
                continue;
            int fd = nbd_aio_get_fd(c->h);
            if (fd < 0)
                continue;
            short events = POLLRDHUP; /* idle: only the server closing it */
            if (c->reader) {
                /* a waiter reads it; the poller only sends what waits for room */
                if (!(nbd_aio_get_direction(c->h) & LIBNBD_AIO_DIRECTION_WRITE))
                    continue;
                events = POLLOUT;
            }
            if (c->state == CONN_READY && c->inflight && !c->reader)
                c->poller_reads = true; /* (it does already) */
            if (c->state == CONN_CONNECTING || (c->poller_reads && !c->reader)) {
                unsigned dir = (unsigned)nbd_aio_get_direction(c->h);
                events = (short)((dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
                                 (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0));
            }
            pfd[n] = (struct pollfd){.fd = fd, .events = events};
            who[n++] = c;
        }
        pfd[n] = (struct pollfd){.fd = nb->wake_fd, .events = POLLIN};
        uint64_t wake_at = next_wakeup(nb, now);
        nb->kick = false; /* the set above is the latest */
        unlock_and_complete(nb);

        int ms = wake_at > now ? (int)((wake_at - now + NS_PER_MS - 1) / NS_PER_MS) : 0;
        int r = poll(pfd, n + 1, ms);
        if (r > 0 && (pfd[n].revents & POLLIN)) {
            uint64_t v;
            if (read(nb->wake_fd, &v, sizeof(v)) < 0) {
                /* nothing pending after all */
            }
        }
        pthread_mutex_lock(&nb->lock);
        now = clock_mono_ns();
        for (unsigned i = 0; r > 0 && i < n; i++) {
            struct nbd_conn *c = who[i];
            /* a waiter may have taken it meanwhile: it reads the replies, unless the socket
             * failed (which wakes the waiter too) */
            if (c->h && pfd[i].revents)
                conn_notify(nb, c, pfd[i].revents,
                            !c->reader || (pfd[i].revents & (POLLHUP | POLLERR)));
        }
        for (unsigned i = 0; i < nb->nconn; i++)
            if (nb->conn[i].state == CONN_CONNECTING)
                connecting_step(nb, &nb->conn[i], now);
        settle(nb);
    }
    return NULL;
}

/* ---- open and close ------------------------------------------------------------------- */

/* Waits until h is connected (0) or failed / timed out (-errno, logged). */
static int connect_wait(struct nbd_backend *nb, struct nbd_handle *h)
{
    uint64_t end = clock_mono_ns() + nb->timeout_ns;
    while (nbd_aio_is_connecting(h)) {
        uint64_t now = clock_mono_ns();
        if (now >= end) {
            log_err("cannot connect to %s: no answer within %" PRIu64 " s (net_timeout)", nb->uri,
                    (uint64_t)(nb->timeout_ns / NS_PER_SEC));
            return -ETIMEDOUT;
        }
        if (nbd_poll(h, (int)((end - now) / NS_PER_MS) + 1) < 0)
            break;
    }
    if (nbd_aio_is_ready(h))
        return 0;
    int err = nbd_get_errno();
    log_err("cannot connect to %s: %s", nb->uri, libnbd_error());
    return -(err ? err : ECONNREFUSED);
}

/* What the export offers, checked against what the device needs; logged. */
static int read_export(struct nbd_backend *nb, struct nbd_handle *h)
{
    struct blk_dev *dev = nb->dev;
    int64_t size = nbd_get_size(h);
    if (size < 0) {
        log_err("%s: %s", nb->uri, libnbd_error());
        return -EIO;
    }
    nb->export_size = (uint64_t)size;
    if (!dev->read_only && nbd_is_read_only(h) > 0) {
        log_err("%s: the export is read-only: mount it with -o ro", nb->uri);
        return -EROFS;
    }
    int64_t min = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    int64_t max = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);
    if (min > (int64_t)BLK_ALIGN || (min > 0 && BLK_ALIGN % (uint64_t)min)) {
        log_err("%s: the export's minimum block size is %" PRId64 " bytes; f2fuse needs one "
                "that divides 4096",
                nb->uri, min);
        return -EINVAL;
    }
    /* a request must be a multiple of the minimum: the bounce path aligns to 4096 */
    dev->aligned_only = min > 1;
    nb->max_payload = max > 0 && (uint64_t)max < PAYLOAD_DEFAULT ? (uint64_t)max & ~(BLK_ALIGN - 1)
                                                                 : PAYLOAD_DEFAULT;
    if (nb->max_payload < BLK_ALIGN) {
        log_err("%s: the export's maximum block size is %" PRId64 " bytes; f2fuse needs 4096",
                nb->uri, max);
        return -EINVAL;
    }
    nb->can_flush = nbd_can_flush(h) > 0;
    nb->can_fua = nbd_can_fua(h) > 0;
    dev->fua = nb->can_fua; /* NBD_CMD_FLAG_FUA; else blk_write_durable flushes */
    nb->can_trim = nbd_can_trim(h) > 0;
    if (!dev->read_only && !nb->can_flush)
        log_warn("%s: the server offers no flush: what it acknowledges is all f2fuse can "
                 "know, and a server crash may lose it",
                 nb->uri);
    return 0;
}

static void backend_free(struct nbd_backend *nb)
{
    for (unsigned i = 0; i < MAX_CONN; i++)
        if (nb->conn[i].h)
            nbd_close(nb->conn[i].h);
    if (nb->wake_fd >= 0)
        close(nb->wake_fd);
    pthread_mutex_destroy(&nb->lock);
    free(nb->uri);
    free(nb);
}

/* The other connections, when the server allows several (multi-conn). */
static int connect_more(struct nbd_backend *nb, unsigned want)
{
    struct nbd_handle *first = nb->conn[0].h;
    if (want <= 1)
        return 0;
    if (nbd_can_multi_conn(first) <= 0) {
        log_info("%s: the server does not offer multi-conn; using one connection", nb->uri);
        return 0;
    }
    for (unsigned i = 1; i < want; i++) {
        struct nbd_handle *h = start_connect(nb, true);
        int err = h ? connect_wait(nb, h) : -ECONNREFUSED;
        if (!err && !same_export(nb, h))
            err = -EIO;
        if (err) {
            if (h)
                nbd_close(h);
            return err;
        }
        nb->conn[i] = (struct nbd_conn){.h = h, .state = CONN_READY};
        nb->nconn = i + 1;
    }
    return 0;
}

static int nbd_init(struct blk_dev *dev)
{
    const struct blk_options *opts = dev->opening;
    struct nbd_backend *nb = calloc(1, sizeof(*nb));
    if (!nb)
        return -ENOMEM;
    nb->dev = dev;
    nb->wake_fd = -1;
    pthread_mutex_init(&nb->lock, NULL);
    nb->uri = strdup(dev->path);
    nb->qd = dev->queue_depth;
    nb->timeout_ns = (uint64_t)(opts->net_timeout ? opts->net_timeout : 30) * NS_PER_SEC;
    unsigned want = opts->connections ? opts->connections : 1;
    if (want > MAX_CONN)
        want = MAX_CONN;
    int err = nb->uri ? 0 : -ENOMEM;
    struct nbd_handle *h = err ? NULL : start_connect(nb, true);
    if (!err && !h)
        err = -ECONNREFUSED;
    if (!err && (err = connect_wait(nb, h)) < 0) {
        nbd_close(h);
        h = NULL;
    }
    if (h) {
        nb->conn[0] = (struct nbd_conn){.h = h, .state = CONN_READY};
        nb->nconn = 1;
        err = read_export(nb, h);
    }
    if (!err)
        err = connect_more(nb, want);
    if (!err && (nb->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        err = -errno;
    if (!err) {
        dev->size = nb->export_size;
        dev->backend = nb;
        err = -pthread_create(&nb->poller, NULL, poller_main, nb);
    }
    if (err) {
        dev->backend = NULL;
        backend_free(nb);
        return err;
    }
    dev->completion_thread = nb->poller;
    dev->has_completion_thread = true;
    log_info("%s: NBD export of %" PRIu64 " bytes, %u connection(s)%s%s%s", nb->uri,
             nb->export_size, nb->nconn, nb->can_flush ? ", flush" : "", nb->can_fua ? ", FUA" : "",
             nb->can_trim ? ", trim" : "");
    return 0;
}

/* Called with nothing in flight (blk_close waited). */
static void nbd_fini(struct blk_dev *dev)
{
    struct nbd_backend *nb = dev->backend;
    if (!nb)
        return;
    pthread_mutex_lock(&nb->lock);
    nb->stop = true;
    pthread_mutex_unlock(&nb->lock);
    wake_poller(nb);
    pthread_join(nb->poller, NULL);
    dev->has_completion_thread = false;
    for (unsigned i = 0; i < nb->nconn; i++) {
        struct nbd_conn *c = &nb->conn[i];
        if (c->h && c->state == CONN_READY)
            nbd_aio_disconnect(c->h, 0); /* a goodbye (NBD_CMD_DISC) without waiting */
    }
    backend_free(nb);
    dev->backend = NULL;
}

#else /* !F2FUSE_HAVE_LIBNBD */

static int nbd_init(struct blk_dev *dev)
{
    log_err("%s: this f2fuse was built without NBD support: install Debian's libnbd-dev "
            "(libnbd 1.14 or later) and rebuild it (make)",
            dev->path);
    return -EPROTONOSUPPORT;
}

static int nbd_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    return -EPROTONOSUPPORT;
}

static void nbd_fini(struct blk_dev *dev)
{
}

#endif

const struct blk_backend_ops blk_nbd_ops = {
    .name = "nbd",
    .init = nbd_init,
    .submit = nbd_submit,
#ifdef F2FUSE_HAVE_LIBNBD
    .submit_waited = nbd_submit_waited,
#endif
    .fini = nbd_fini,
};
