/* Block layer internals shared by blk.c and the backends (blk_uring.c, blk_psync.c).
 *
 * Division of work: blk.c owns everything that does not depend on how I/O is issued —
 * opening the device, validating and accounting requests, and the bounce path that turns
 * unaligned requests into aligned ones for O_DIRECT.  A backend only ever sees requests it
 * can hand to the kernel as they are (aligned when dev->direct), plus "preset" requests that
 * must complete with a given result without touching the device.  Test layers (fault
 * injection, power-cut emulation) stack on top through struct blk_layer_ops. */
#ifndef F2FUSE_BLK_BLK_INTERNAL_H
#define F2FUSE_BLK_BLK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "blk/blk.h"

/* struct blk_req.flags */
enum {
    BLK_REQF_PRESET = 1u << 0,    /* complete with preset_result, do no I/O */
    BLK_REQF_INTERNAL = 1u << 1,  /* made by the bounce path: not counted, done() is ours */
    BLK_REQF_PRIO_SENT = 1u << 2, /* uring: the SQE carried an ioprio */
    BLK_REQF_NO_MERGE = 1u << 3,  /* uring: resubmission, run it on its own */
    BLK_REQF_LAYER = 1u << 4,     /* a layer watches it: write_start and complete hooks run */
};

struct blk_counters {
    atomic_uint_fast64_t ops[BLK_OP_COUNT];
    atomic_uint_fast64_t bytes[BLK_OP_COUNT];
    atomic_uint_fast64_t errors[BLK_OP_COUNT];
    atomic_uint_fast64_t merged;          /* requests folded into a neighbour's readv/writev */
    atomic_uint_fast64_t fua_writes;      /* durable writes that needed no flush (FUA) */
    atomic_uint_fast64_t bounced;         /* unaligned requests copied through a bounce buffer */
    atomic_uint_fast64_t short_resubmits; /* short transfers whose remainder was reissued */
    atomic_uint_fast64_t inflight;        /* caller requests submitted and not yet done */
    atomic_uint_fast64_t inflight_max;
    atomic_uint_fast64_t ioprio_rejected;  /* 1 once the kernel refused an ioprio value */
    atomic_uint_fast64_t writes_submitted; /* caller write requests, counted at submission */
    /* network devices (blk_nbd.c, blk_rbd.c) */
    atomic_uint_fast64_t net_disconnects; /* connections lost */
    atomic_uint_fast64_t net_reconnects;  /* connections made again */
    atomic_uint_fast64_t net_retries;     /* requests run again (lost connection, server error) */
    atomic_uint_fast64_t net_timeouts;    /* outages longer than net_timeout */
};

struct blk_bounce;
struct blk_layer;

#define BLK_BW_CLASSES 4 /* the bandwidth limit's queues: HIGH, NORMAL, LOW, IDLE */
struct bw_ticket;

struct blk_dev {
    int fd;       /* -1 on a network device */
    char *path;   /* as opened: blk_identify.c and libblkid open it again; or the URI */
    bool direct;  /* opened O_DIRECT: the backend needs aligned requests */
    bool fua;     /* the backend honours blk_req.fua (else blk_write_durable flushes) */
    bool network; /* an NBD export or an RBD image: no descriptor, no file */
    /* Offsets and lengths reach the backend 4 KiB-aligned (through the bounce path), as
     * with direct, but buffers may sit anywhere: an export's minimum block size. */
    bool aligned_only;
    /* During blk_open only: what it was asked for, for a backend's init. */
    const struct blk_options *opening;
    bool is_blockdev; /* discard is BLKDISCARD rather than a punched hole */
    bool read_only;
    uint64_t size; /* of the device: the window's length when there is one */
    /* The window (blk_window.c): the device begins this many bytes into the file, and the
     * file may go on past its end.  Every backend adds window_start to device offsets. */
    uint64_t window_start;
    bool windowed;
    unsigned queue_depth;
    const struct blk_backend_ops *ops;
    void *backend; /* the backend's own state */

    /* Set by a backend that completes requests on a thread of its own, so that the sync
     * helpers can refuse to wait on that thread. */
    bool has_completion_thread;
    pthread_t completion_thread;

    struct blk_counters stats;

    /* The test layers stacked on the device, topmost first (NULL: none, the production
     * case); only ever added to, under layer_lock, and freed at close. */
    _Atomic(struct blk_layer *) layers;
    pthread_mutex_t layer_lock;

    /* blk_close waits here until stats.inflight drops to zero. */
    pthread_mutex_t idle_lock;
    pthread_cond_t idle_cond;

    /* Read-modify-write of unaligned writes runs one at a time, in arrival order, so two
     * writes sharing an edge block cannot each write back the other's stale copy. */
    pthread_mutex_t rmw_lock;
    struct blk_bounce *rmw_active;
    struct blk_bounce *rmw_head, *rmw_tail; /* waiting behind rmw_active */

    /* Bandwidth limit (blk_bwlimit.c): when the emulated device is free, and the batches
     * waiting for it, one queue per priority class (HIGH, NORMAL, LOW, IDLE). */
    atomic_uint_fast64_t bw_limit; /* bytes/s, 0 = off */
    pthread_mutex_t bw_lock;
    pthread_cond_t bw_cond;    /* CLOCK_MONOTONIC */
    uint64_t bw_busy_until_ns; /* CLOCK_MONOTONIC */
    uint64_t bw_last_busy_ns;  /* when a batch of a class above IDLE last held it */
    struct bw_ticket *bw_queue[BLK_BW_CLASSES];
    atomic_uint_fast64_t bw_wait_ns;
    atomic_uint_fast64_t bw_class_wait_ns[BLK_BW_CLASSES]; /* queueing only, per class */
};

extern const struct blk_backend_ops blk_uring_ops;
extern const struct blk_backend_ops blk_psync_ops;
extern const struct blk_backend_ops blk_sparse_ops; /* blk_sparse.c: read-only */
extern const struct blk_backend_ops blk_nbd_ops;    /* blk_nbd.c: nbd:// URIs */
extern const struct blk_backend_ops blk_rbd_ops;    /* blk_rbd.c: rbd:POOL/IMAGE */

static inline uint64_t blk_align_down(uint64_t v)
{
    return v & ~(uint64_t)(BLK_ALIGN - 1);
}

static inline uint64_t blk_align_up(uint64_t v)
{
    return blk_align_down(v + BLK_ALIGN - 1);
}

/* The file position of a device offset. */
static inline off_t blk_file_pos(const struct blk_dev *dev, uint64_t off)
{
    return (off_t)(dev->window_start + off);
}

/* blk_window.c: narrows dev (size already known) to the window opts asks for; path is for
 * libblkid, which reads the partition table through a descriptor of its own.  0, or -errno
 * with a log line that says what is wrong. */
int blk_window_apply(struct blk_dev *dev, const char *path, const struct blk_options *opts);

/* Backends call this exactly once per request they were handed, with req->result set.
 * It runs the bounce path's continuation for internal requests, and for the caller's
 * requests updates the counters and calls req->done. */
void blk_req_complete(struct blk_dev *dev, struct blk_req *req);

/* Bandwidth limit: holds the submitter until the emulated device has moved the batch's
 * read and write bytes (after everything reserved before it: a FIFO device). */
void blk_bwlimit_wait(struct blk_dev *dev, struct blk_req *const *reqs, unsigned n);

/* BLKDISCARD over the 4 KiB blocks fully inside [off, off + len); 0 or -errno. */
int blk_discard_blockdev(int fd, uint64_t off, uint64_t len);

/* The largest single read/write handed to the kernel; longer ones continue as "short". */
#define BLK_MAX_XFER (1ull << 30)

/* Moves exactly len bytes between buf and file position pos of fd with plain pread/pwrite
 * (BLK_MAX_XFER at most a call, EINTR retried), outside the request machinery: 0, -EIO
 * when the file ends first, or -errno. */
int blk_fd_io(int fd, bool write, void *buf, uint64_t len, off_t pos);

/* How many requests from reqs[0] form one contiguous run of reads or of writes with the
 * same priority that one readv/writev can carry (1 when reqs[0] cannot be gathered). */
unsigned blk_mergeable_run(struct blk_req *const *reqs, unsigned n);

/* ---- layers --------------------------------------------------------------------------
 * A layer is a device that misbehaves on purpose, for tests (blk_fault.c, blk_powercut.c),
 * stacked over the real one as littlefs stacks its emulated block device over a file: the
 * misbehaviour lives in the layer, not in the request path it watches.  Every caller
 * request passes the layers' admission, topmost first, before the device's own checks; a
 * layer may let it run, complete it without I/O, or hold it and complete it later.  For
 * the requests a layer marks BLK_REQF_LAYER, blk.c also calls its write_start and complete
 * hooks.  Layers sit in the order of their depth whatever order they were stacked in. */

enum blk_admit {
    BLK_ADMIT_RUN,    /* on to the bounce path and the backend */
    BLK_ADMIT_PRESET, /* completes with req->preset_result and no I/O (blk_req_preset) */
    BLK_ADMIT_HELD,   /* a layer keeps it and completes it later (blk_req_complete) */
};

struct blk_layer_ops {
    const char *name;
    unsigned depth; /* stacking order: a smaller depth sits higher and decides first */
    /* Admission of one caller request (any op); blk_admit_below gives the verdict of the
     * layers under this one and of the device's own checks. */
    enum blk_admit (*admit)(struct blk_layer *layer, struct blk_req *req);
    /* Optional, for a BLK_REQF_LAYER write that needs a read-modify-write: its edge blocks
     * are read and its data goes to the backend next.  0, or -errno to fail the write. */
    int (*write_start)(struct blk_layer *layer, struct blk_req *req);
    /* Optional, for a BLK_REQF_LAYER request: it completed (req->result is set); runs
     * before the request is counted and its done() called. */
    void (*complete)(struct blk_layer *layer, struct blk_req *req);
    /* The layer's counters.  layer is NULL when none of this kind is stacked: the names are
     * the same on every device, with zeros. */
    void (*emit_stats)(const struct blk_layer *layer, stat_emit_fn emit, void *sink);
    /* At close, once nothing is in flight. */
    void (*destroy)(struct blk_layer *layer);
};

struct blk_layer {
    const struct blk_layer_ops *ops;
    struct blk_dev *dev;
    _Atomic(struct blk_layer *) below;
};

/* The kinds of layer whose counters blk_emit_stats shows on every device. */
extern const struct blk_layer_ops blk_fault_layer_ops;    /* blk_fault.c */
extern const struct blk_layer_ops blk_powercut_layer_ops; /* blk_powercut.c */

/* A zeroed layer of size bytes (the struct blk_layer first) for ops on dev, not stacked
 * yet; NULL on ENOMEM. */
void *blk_layer_new(struct blk_dev *dev, const struct blk_layer_ops *ops, size_t size);
/* Stacks layer (ops and dev set) on its device at its depth.  -EEXIST when a layer of the
 * same kind is there already.  Safe while requests run: one that is being admitted just
 * misses the new layer. */
int blk_layer_push(struct blk_layer *layer);
/* The device's layer of that kind, or NULL. */
struct blk_layer *blk_layer_find(const struct blk_dev *dev, const struct blk_layer_ops *ops);
/* The verdict on req of everything under layer: the layers below it, then the device's own
 * checks (bounds, read-only).  Sets the preset result when the verdict is PRESET. */
enum blk_admit blk_admit_below(struct blk_layer *layer, struct blk_req *req);
/* Makes req complete with result and no I/O. */
void blk_req_preset(struct blk_req *req, int64_t result);
/* Whether an admitted write will go through the bounce path's read-modify-write, so that
 * its data reaches the backend only after its edge blocks are read (write_start). */
bool blk_write_needs_rmw(const struct blk_dev *dev, const struct blk_req *req);

#endif
