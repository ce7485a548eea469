/* Block layer internals shared by blk.c and the backends (blk_uring.c, blk_psync.c).
 *
 * Division of work: blk.c owns everything that does not depend on how I/O is issued —
 * opening the device, validating and accounting requests, fault injection, and the bounce
 * path that turns unaligned requests into aligned ones for O_DIRECT.  A backend only ever
 * sees requests it can hand to the kernel as they are (aligned when dev->direct), plus
 * "preset" requests that must complete with a given result without touching the device. */
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
    BLK_REQF_PC_WRITE = 1u << 4,  /* power-cut mode: a pre-cut write the cut must wait for */
    BLK_REQF_PC_FLUSH = 1u << 5,  /* power-cut mode: a pre-cut flush (flush_cover is set) */
};

struct blk_counters {
    atomic_uint_fast64_t ops[BLK_OP_COUNT];
    atomic_uint_fast64_t bytes[BLK_OP_COUNT];
    atomic_uint_fast64_t errors[BLK_OP_COUNT];
    atomic_uint_fast64_t merged;          /* requests folded into a neighbour's readv/writev */
    atomic_uint_fast64_t bounced;         /* unaligned requests copied through a bounce buffer */
    atomic_uint_fast64_t short_resubmits; /* short transfers whose remainder was reissued */
    atomic_uint_fast64_t inflight;        /* caller requests submitted and not yet done */
    atomic_uint_fast64_t inflight_max;
    atomic_uint_fast64_t ioprio_rejected; /* 1 once the kernel refused an ioprio value */
};

/* The nth request of one op kind from the moment of arming fails with -err. */
struct blk_fault {
    atomic_uint_fast64_t countdown; /* 0 = disarmed */
    atomic_int err;
    atomic_uint mode;  /* BLK_FAULT_* */
    atomic_bool dead;  /* a sticky fault fired: every later request fails */
    atomic_uint_fast64_t fired;
};

struct blk_bounce;

enum blk_pc_state {
    BLK_PC_ARMED,   /* before the cut (or power-cut mode off) */
    BLK_PC_CUTTING, /* cut: waiting for the writes in flight to land before undoing */
    BLK_PC_DONE,    /* undone: the device holds its post-power-failure content */
};

/* Power-cut emulation (blk_options.powercut_*).  The undo log lists the old contents of
 * every write not yet durable, oldest first; the cut replays it backwards. */
struct blk_powercut {
    bool armed; /* fixed at open */
    bool torn;
    uint64_t after;
    atomic_uint_fast64_t writes; /* caller write requests submitted, armed or not */
    atomic_int state;            /* enum blk_pc_state; written under lock */
    atomic_uint_fast64_t dropped;
    atomic_uint_fast64_t reverted_blocks;
    atomic_uint_fast64_t undo_bytes;
    pthread_mutex_t lock; /* everything below */
    uint64_t rng;
    uint64_t completed;      /* write completions so far: a flush covers those before it */
    uint64_t writes_pending; /* pre-cut writes not yet completed: the cut waits for them */
    struct blk_undo *log_head, *log_tail;
    struct blk_req *parked_head, *parked_tail; /* arrived while cutting, finish after undo */
};

#define BLK_BW_CLASSES 4 /* the bandwidth limit's queues: HIGH, NORMAL, LOW, IDLE */
struct bw_ticket;

struct blk_dev {
    int fd;
    char *path;       /* as opened: blk_identify.c and libblkid open it again */
    bool direct;      /* opened O_DIRECT: the backend needs aligned requests */
    bool is_blockdev; /* discard is BLKDISCARD rather than a punched hole */
    bool read_only;
    uint64_t size;    /* of the device: the window's length when there is one */
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
    struct blk_fault faults[BLK_OP_COUNT];

    /* blk_close waits here until stats.inflight drops to zero. */
    pthread_mutex_t idle_lock;
    pthread_cond_t idle_cond;

    /* Read-modify-write of unaligned writes runs one at a time, in arrival order, so two
     * writes sharing an edge block cannot each write back the other's stale copy. */
    pthread_mutex_t rmw_lock;
    struct blk_bounce *rmw_active;
    struct blk_bounce *rmw_head, *rmw_tail; /* waiting behind rmw_active */

    struct blk_powercut pc;

    /* Bandwidth limit (blk_bwlimit.c): when the emulated device is free, and the batches
     * waiting for it, one queue per priority class (HIGH, NORMAL, LOW, IDLE). */
    atomic_uint_fast64_t bw_limit; /* bytes/s, 0 = off */
    pthread_mutex_t bw_lock;
    pthread_cond_t bw_cond;        /* CLOCK_MONOTONIC */
    uint64_t bw_busy_until_ns;     /* CLOCK_MONOTONIC */
    uint64_t bw_last_busy_ns;      /* when a batch of a class above IDLE last held it */
    struct bw_ticket *bw_queue[BLK_BW_CLASSES];
    atomic_uint_fast64_t bw_wait_ns;
    atomic_uint_fast64_t bw_class_wait_ns[BLK_BW_CLASSES]; /* queueing only, per class */
};

extern const struct blk_backend_ops blk_uring_ops;
extern const struct blk_backend_ops blk_psync_ops;
extern const struct blk_backend_ops blk_sparse_ops; /* blk_sparse.c: read-only */

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

/* How many requests from reqs[0] form one contiguous run of reads or of writes with the
 * same priority that one readv/writev can carry (1 when reqs[0] cannot be gathered). */
unsigned blk_mergeable_run(struct blk_req *const *reqs, unsigned n);

#endif
