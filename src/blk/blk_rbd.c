/* RBD backend: the device is an image (or a snapshot of one) in a Ceph cluster, reached
 * through librbd's asynchronous API: `rbd:POOL[/NAMESPACE]/IMAGE[@SNAP]`, with the client's
 * id, ceph.conf and keyring from -o id=, conf=, keyring= (librados' defaults otherwise).
 *
 * Threads: any thread submits (rbd_aio_* is thread-safe).  librbd completes requests on
 * threads of its own; the callback only queues the completion for our completion thread,
 * which calls done(), so that done() never runs on a librbd thread (where a blocking
 * caller would stall librbd) and the synchronous helpers can tell the thread that must not
 * wait for itself.
 *
 * Faults: librados resends a request on its own when an OSD restarts or a connection
 * drops, and waits for the cluster to come back; net_timeout bounds that wait
 * (rados_osd_op_timeout, rados_mon_op_timeout, client_mount_timeout), after which the
 * request fails with its error (ETIMEDOUT), which reaches the caller as any device error.
 * A snapshot is read-only; a read-write open takes the image's exclusive lock so that a
 * second writer is refused, as flock(2) refuses one on an image file. */
#include "blk/blk_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#ifdef F2FUSE_HAVE_LIBRBD

#include <rbd/librbd.h>

struct rbd_backend;

struct rbd_io {
    struct rbd_backend *rb;
    struct blk_req *req;
    uint64_t len; /* bytes asked of librbd (a read stops at the end of the image) */
    rbd_completion_t comp;
    struct rbd_io *next;
};

struct rbd_backend {
    struct blk_dev *dev;
    rados_t cluster;
    rados_ioctx_t ioctx;
    rbd_image_t image;
    bool have_cluster, have_ioctx, have_image, locked;
    /* completions queued by librbd's threads for ours */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct rbd_io *head, *tail;
    bool stop;
    pthread_t reaper;
};

/* The parts of rbd:POOL[/NAMESPACE]/IMAGE[@SNAP], copied into spec's own buffer. */
struct rbd_spec {
    char buf[1024];
    const char *pool, *ns, *image, *snap;
};

static int parse_spec(const char *path, struct rbd_spec *s)
{
    memset(s, 0, sizeof(*s));
    if (snprintf(s->buf, sizeof(s->buf), "%s", path + 4) >= (int)sizeof(s->buf))
        return -ENAMETOOLONG;
    char *at = strchr(s->buf, '@');
    if (at) {
        *at = '\0';
        s->snap = at + 1;
    }
    char *first = strchr(s->buf, '/');
    if (!first)
        return -EINVAL;
    *first = '\0';
    s->pool = s->buf;
    char *second = strchr(first + 1, '/');
    if (second) {
        *second = '\0';
        s->ns = first + 1;
        s->image = second + 1;
    } else {
        s->image = first + 1;
    }
    if (!s->pool[0] || !s->image[0] || strchr(s->image, '/') || (s->snap && !s->snap[0]))
        return -EINVAL;
    return 0;
}

/* ---- completions ---------------------------------------------------------------------- */

/* librbd's callback, on one of its threads: hand the request to ours. */
static void rbd_callback(rbd_completion_t comp, void *arg)
{
    struct rbd_io *io = arg;
    struct rbd_backend *rb = io->rb;
    io->next = NULL;
    pthread_mutex_lock(&rb->lock);
    if (rb->tail)
        rb->tail->next = io;
    else
        rb->head = io;
    rb->tail = io;
    pthread_cond_signal(&rb->cond);
    pthread_mutex_unlock(&rb->lock);
}

static void complete_io(struct rbd_backend *rb, struct rbd_io *io)
{
    struct blk_req *req = io->req;
    ssize_t ret = rbd_aio_get_return_value(io->comp);
    rbd_aio_release(io->comp);
    if (ret < 0) {
        req->result = ret;
        if (ret == -ETIMEDOUT)
            atomic_fetch_add(&rb->dev->stats.net_timeouts, 1);
    } else if (req->op == BLK_READ || req->op == BLK_WRITE || req->op == BLK_DISCARD) {
        req->result = (int64_t)io->len;
    } else {
        req->result = 0;
    }
    free(io);
    blk_req_complete(rb->dev, req);
}

static void *reaper_main(void *arg)
{
    struct rbd_backend *rb = arg;
    pthread_mutex_lock(&rb->lock);
    for (;;) {
        while (!rb->head && !rb->stop)
            pthread_cond_wait(&rb->cond, &rb->lock);
        if (!rb->head)
            break; /* stop, and nothing left */
        struct rbd_io *list = rb->head;
        rb->head = rb->tail = NULL;
        pthread_mutex_unlock(&rb->lock);
        while (list) {
            struct rbd_io *next = list->next;
            complete_io(rb, list);
            list = next;
        }
        pthread_mutex_lock(&rb->lock);
    }
    pthread_mutex_unlock(&rb->lock);
    return NULL;
}

/* ---- submission ----------------------------------------------------------------------- */

/* Starts one request; -errno when librbd refused it (then it is not started). */
static int start_io(struct rbd_backend *rb, struct rbd_io *io)
{
    struct blk_req *req = io->req;
    struct blk_dev *dev = rb->dev;
    uint64_t off = dev->window_start + req->off;
    io->len = req->len;
    if (req->op == BLK_READ && req->off + req->len > dev->size)
        io->len = dev->size - req->off; /* a short count at the end, as a file gives */
    int ret = rbd_aio_create_completion(io, rbd_callback, &io->comp);
    if (ret < 0)
        return ret;
    switch (req->op) {
    case BLK_READ: ret = rbd_aio_read(rb->image, off, io->len, req->buf, io->comp); break;
    case BLK_WRITE: ret = rbd_aio_write(rb->image, off, io->len, req->buf, io->comp); break;
    case BLK_FLUSH: ret = rbd_aio_flush(rb->image, io->comp); break;
    case BLK_DISCARD: ret = rbd_aio_discard(rb->image, off, io->len, io->comp); break;
    default: ret = -EINVAL; break;
    }
    if (ret < 0)
        rbd_aio_release(io->comp);
    return ret;
}

static int rbd_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    struct rbd_backend *rb = dev->backend;
    for (unsigned i = 0; i < n; i++) {
        struct blk_req *req = reqs[i];
        struct rbd_io *io = NULL;
        int ret;
        if (req->flags & BLK_REQF_PRESET)
            ret = 1, req->result = req->preset_result;
        else if ((req->op == BLK_READ || req->op == BLK_WRITE) && req->len == 0)
            ret = 1, req->result = 0;
        else if (!(io = calloc(1, sizeof(*io))))
            ret = -ENOMEM;
        else
            io->rb = rb, io->req = req, ret = start_io(rb, io);
        if (ret == 0)
            continue; /* the callback completes it */
        free(io);
        if (ret < 0)
            req->result = ret;
        blk_req_complete(dev, req);
    }
    return 0;
}

/* ---- open and close ------------------------------------------------------------------- */

static void set_conf(struct rbd_backend *rb, const char *key, const char *value)
{
    int ret = rados_conf_set(rb->cluster, key, value);
    if (ret < 0)
        log_warn("ceph: cannot set %s=%s: %s", key, value, strerror(-ret));
}

/* A sentence for a failed rados_connect. */
static const char *connect_hint(int ret)
{
    switch (ret) {
    case -EACCES:
    case -EPERM: return "permission denied: a wrong key, keyring or client id (-o id=, keyring=)";
    case -ETIMEDOUT: return "no monitor answered within net_timeout";
    case -ENOENT: return "no monitor address: give a ceph.conf with -o conf=";
    case -EINVAL: return "bad configuration (ceph.conf, keyring)";
    default: return "see the Ceph client's messages above";
    }
}

/* Reads the configuration and connects to the cluster: 0 or -errno, logged. */
static int connect_cluster(struct rbd_backend *rb, const struct blk_options *opts, const char *path)
{
    const char *id = opts->ceph_id && opts->ceph_id[0] ? opts->ceph_id : NULL;
    int ret = rados_create(&rb->cluster, id);
    if (ret < 0) {
        log_err("%s: cannot create a Ceph client: %s", path, strerror(-ret));
        return ret;
    }
    rb->have_cluster = true;
    rados_conf_parse_env(rb->cluster, NULL); /* CEPH_ARGS, as the ceph tools read it */
    bool own_conf = opts->ceph_conf && opts->ceph_conf[0];
    ret = rados_conf_read_file(rb->cluster, own_conf ? opts->ceph_conf : NULL);
    if (ret < 0 && own_conf) {
        log_err("%s: cannot read the Ceph configuration %s: %s", path, opts->ceph_conf,
                strerror(-ret));
        return ret;
    }
    if (opts->ceph_keyring && opts->ceph_keyring[0])
        set_conf(rb, "keyring", opts->ceph_keyring);
    char secs[32];
    snprintf(secs, sizeof(secs), "%u", opts->net_timeout ? opts->net_timeout : 30);
    set_conf(rb, "client_mount_timeout", secs);
    set_conf(rb, "rados_mon_op_timeout", secs);
    set_conf(rb, "rados_osd_op_timeout", secs);
    ret = rados_connect(rb->cluster);
    if (ret < 0)
        log_err("%s: cannot connect to the Ceph cluster as client.%s: %s (%s)", path,
                id ? id : "admin", strerror(-ret), connect_hint(ret));
    return ret;
}

/* Opens the image, checking that a snapshot is opened read-only: 0 or -errno, logged. */
static int open_image(struct rbd_backend *rb, const struct rbd_spec *s, const char *path)
{
    struct blk_dev *dev = rb->dev;
    int ret = rados_ioctx_create(rb->cluster, s->pool, &rb->ioctx);
    if (ret < 0) {
        log_err("%s: cannot use pool %s: %s", path, s->pool, strerror(-ret));
        return ret;
    }
    rb->have_ioctx = true;
    if (s->ns)
        rados_ioctx_set_namespace(rb->ioctx, s->ns);
    if (s->snap && !dev->read_only) {
        log_err("%s: a snapshot cannot be written: mount it read-only (-o ro)", path);
        return -EROFS;
    }
    ret = dev->read_only ? rbd_open_read_only(rb->ioctx, s->image, &rb->image, s->snap)
                         : rbd_open(rb->ioctx, s->image, &rb->image, NULL);
    if (ret < 0) {
        log_err("%s: cannot open image %s%s%s in pool %s: %s", path, s->image, s->snap ? "@" : "",
                s->snap ? s->snap : "", s->pool, strerror(-ret));
        return ret;
    }
    rb->have_image = true;
    uint64_t features = 0;
    if (!dev->read_only && rbd_get_features(rb->image, &features) == 0 &&
        (features & RBD_FEATURE_EXCLUSIVE_LOCK)) {
        ret = rbd_lock_acquire(rb->image, RBD_LOCK_MODE_EXCLUSIVE);
        if (ret < 0) {
            log_err("%s: the image is in use by another client (its exclusive lock: %s); not "
                    "opened read-write",
                    path, strerror(-ret));
            return -EBUSY;
        }
        rb->locked = true;
    }
    uint64_t size;
    ret = rbd_get_size(rb->image, &size);
    if (ret < 0) {
        log_err("%s: cannot read the image's size: %s", path, strerror(-ret));
        return ret;
    }
    dev->size = size;
    return 0;
}

static void backend_free(struct rbd_backend *rb)
{
    if (rb->locked)
        rbd_lock_release(rb->image);
    if (rb->have_image)
        rbd_close(rb->image);
    if (rb->have_ioctx)
        rados_ioctx_destroy(rb->ioctx);
    if (rb->have_cluster)
        rados_shutdown(rb->cluster);
    pthread_mutex_destroy(&rb->lock);
    pthread_cond_destroy(&rb->cond);
    free(rb);
}

static int rbd_init(struct blk_dev *dev)
{
    struct rbd_spec spec;
    int ret = parse_spec(dev->path, &spec);
    if (ret < 0) {
        log_err("%s: not an RBD image name: write rbd:POOL/IMAGE, rbd:POOL/IMAGE@SNAPSHOT or "
                "rbd:POOL/NAMESPACE/IMAGE",
                dev->path);
        return ret;
    }
    struct rbd_backend *rb = calloc(1, sizeof(*rb));
    if (!rb)
        return -ENOMEM;
    rb->dev = dev;
    pthread_mutex_init(&rb->lock, NULL);
    pthread_cond_init(&rb->cond, NULL);
    ret = connect_cluster(rb, dev->opening, dev->path);
    if (!ret)
        ret = open_image(rb, &spec, dev->path);
    if (!ret)
        ret = -pthread_create(&rb->reaper, NULL, reaper_main, rb);
    if (ret < 0) {
        backend_free(rb);
        return ret;
    }
    dev->backend = rb;
    dev->completion_thread = rb->reaper;
    dev->has_completion_thread = true;
    log_info("%s: RBD image of %" PRIu64 " bytes%s", dev->path, dev->size,
             spec.snap ? " (a snapshot: read-only)" : "");
    return 0;
}

/* Called with nothing in flight (blk_close waited). */
static void rbd_fini(struct blk_dev *dev)
{
    struct rbd_backend *rb = dev->backend;
    if (!rb)
        return;
    pthread_mutex_lock(&rb->lock);
    rb->stop = true;
    pthread_cond_signal(&rb->cond);
    pthread_mutex_unlock(&rb->lock);
    pthread_join(rb->reaper, NULL);
    dev->has_completion_thread = false;
    backend_free(rb);
    dev->backend = NULL;
}

#else /* !F2FUSE_HAVE_LIBRBD */

static int rbd_init(struct blk_dev *dev)
{
    log_err("%s: this f2fuse was built without Ceph RBD support: install Debian's librbd-dev "
            "and rebuild it (make)",
            dev->path);
    return -EPROTONOSUPPORT;
}

static int rbd_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    return -EPROTONOSUPPORT;
}

static void rbd_fini(struct blk_dev *dev)
{
}

#endif

const struct blk_backend_ops blk_rbd_ops = {
    .name = "rbd",
    .init = rbd_init,
    .submit = rbd_submit,
    .fini = rbd_fini,
};
