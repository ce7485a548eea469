/* Block layer: the "disk" under the file system is an image file, a block device, or a
 * network device named by a URI (an NBD export, a Ceph RBD image).
 *
 * Backends sit behind struct blk_backend_ops:
 *   uring  io_uring + O_DIRECT (default; direct async I/O: no double caching, less CPU)
 *   psync  buffered pread/pwrite (the baseline, and the fallback where O_DIRECT is refused)
 *   sparse an Android sparse image, read in place (read-only)
 *   nbd    nbd://, nbds://, nbd+unix:// URIs through libnbd (when built with it)
 *   rbd    rbd:POOL/IMAGE[@SNAP] through librbd (when built with it)
 *
 * Requests are asynchronous (blk_submit + a completion callback, called from the backend's
 * completion thread or, for psync, inline).  The blk_read/blk_write/blk_flush/blk_discard
 * helpers wrap them synchronously.  Offsets and lengths are bytes; any alignment is
 * accepted (unaligned requests go through a bounce buffer), but 4 KiB-aligned offsets,
 * lengths and buffers take the zero-copy path. */
#ifndef F2FUSE_BLK_BLK_H
#define F2FUSE_BLK_BLK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/stats.h"

#define BLK_ALIGN 4096u

enum blk_op { BLK_READ, BLK_WRITE, BLK_FLUSH, BLK_DISCARD, BLK_OP_COUNT };

/* Priority classes, most urgent first: checkpoint I/O (HIGH) goes ahead of foreground I/O
 * (NORMAL), which goes ahead of background writeback, discard and the timer's checkpoint
 * (LOW); IDLE is the class of a requester running under `ionice -c3` (Linux's idle class:
 * served when nobody else needs the device).  Mapped to io_uring's ioprio field, and used
 * by the queue of the bandwidth limit (blk_bwlimit.c). */
enum blk_prio { BLK_PRIO_NORMAL, BLK_PRIO_HIGH, BLK_PRIO_LOW, BLK_PRIO_IDLE };

/* The class of a Linux I/O priority value (ioprio_get(2)): real-time → HIGH, idle → IDLE,
 * best-effort or none → NORMAL. */
static inline enum blk_prio blk_prio_of_ioprio(int ioprio)
{
    switch (ioprio >> 13) {
    case 1: return BLK_PRIO_HIGH;
    case 3: return BLK_PRIO_IDLE;
    default: return BLK_PRIO_NORMAL;
    }
}

struct blk_req;
typedef void (*blk_done_fn)(struct blk_req *req);

struct blk_req {
    enum blk_op op;
    enum blk_prio prio;
    uint64_t off;     /* byte offset on the device */
    uint64_t len;     /* bytes; 0 for FLUSH */
    void *buf;        /* READ/WRITE data */
    blk_done_fn done; /* called exactly once when the request completes */
    void *private;    /* caller's */
    int64_t result;   /* set before done(): bytes transferred (== len on success) or -errno */
    /* WRITE: durable once it completes (forced unit access), where the backend says it can
     * (blk_write_durable decides); never merged with other requests. */
    bool fua;
    /* backend-private bookkeeping */
    uint64_t done_bytes;
    void *bounce;
    struct blk_req *next;
    unsigned flags;        /* BLK_REQF_* (blk_internal.h) */
    int64_t preset_result; /* with BLK_REQF_PRESET: completes with this, no I/O */
};

struct blk_dev;

struct blk_backend_ops {
    const char *name;
    /* Prepares backend state for dev->fd (opened by the common code).  Returns 0 or -errno. */
    int (*init)(struct blk_dev *dev);
    /* Queues n requests and starts them; completions arrive through req->done. */
    int (*submit)(struct blk_dev *dev, struct blk_req **reqs, unsigned n);
    /* Optional: as submit, for a caller that blocks until these requests complete
     * (blk_submit_wait), so the backend may run them in the calling thread. */
    int (*submit_waited)(struct blk_dev *dev, struct blk_req **reqs, unsigned n);
    /* Waits for every request in flight, then frees backend state. */
    void (*fini)(struct blk_dev *dev);
};

struct blk_options {
    const char *backend;  /* "uring" (default) or "psync" */
    unsigned queue_depth; /* io_uring entries; 0 = 64 */
    bool read_only;
    /* Experiments (blk_bwlimit.c): the device moves at most bw_limit bytes/s of reads and
     * writes (0 = unlimited), emulating a slow disk under an image on a fast one. */
    uint64_t bw_limit;
    /* The device is a window of the file (-o offset= / -o partition=, blk_window.c): offset
     * bytes in (a multiple of 4096, inside the file), or the partition of the file's GPT or
     * MBR table named by its number or GPT name.  Every request stays inside the window:
     * past its end is past the end of the device.  0 and NULL: the whole file. */
    uint64_t offset;
    const char *partition;
    /* Network devices: how long (seconds, 0 = 30) a server may stay unreachable or leave a
     * request unanswered before requests fail with EIO; NBD connections when the server
     * allows several (0 = 1); the Ceph client's id, ceph.conf and keyring (NULL or "":
     * librados' defaults). */
    unsigned net_timeout;
    unsigned connections;
    const char *ceph_id, *ceph_conf, *ceph_keyring;
};

/* Whether path names a network device rather than a file: "nbd://...", "nbds://...",
 * "nbd+unix://..." and the other NBD URI schemes, or "rbd:POOL/IMAGE".  The Debian package
 * whose library the backend needs goes to *package. */
bool blk_path_is_network(const char *path, const char **package);

/* Opens path (image file or block device).  With backend "uring" the device is opened
 * O_DIRECT; where that is refused (tmpfs, ...) it falls back to psync and logs why.  An
 * Android sparse image (blk_sparse.c) is served by the read-only sparse backend whatever
 * the backend asked for; opening one read-write is -EROFS, with a log line saying how to
 * convert it.  A bad window (offset, partition) is -EINVAL or -ENXIO, logged. */
int blk_open(const char *path, const struct blk_options *opts, struct blk_dev **out);
void blk_close(struct blk_dev *dev);

/* Starts n requests; returns 0, or -errno when none could be queued (then no done() runs).
 * done() may call blk_submit again, but must not call the synchronous helpers below: on the
 * uring completion thread they would wait for themselves, so they return -EDEADLK there. */
int blk_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n);

/* Submits n requests and waits for all of them: 0 when every one transferred its whole
 * length, else the first -errno (a short read or write is -EIO).  Sets each request's
 * done and private.  -EDEADLK on the uring completion thread, which cannot wait for itself. */
int blk_submit_wait(struct blk_dev *dev, struct blk_req **reqs, unsigned n);

/* Synchronous helpers: 0 when the whole range was transferred, else -errno
 * (a read or write past the end of the device is -EIO). */
int blk_read(struct blk_dev *dev, uint64_t off, void *buf, size_t len);
int blk_write(struct blk_dev *dev, uint64_t off, const void *buf, size_t len);
/* Writes [off, off + len) durably: as one FUA write where the device offers it (RWF_DSYNC
 * on a file, NBD_CMD_FLAG_FUA), else as a write and a flush.  prio as blk_req's. */
int blk_write_durable(struct blk_dev *dev, uint64_t off, const void *buf, size_t len,
                      enum blk_prio prio);
int blk_flush(struct blk_dev *dev);
int blk_discard(struct blk_dev *dev, uint64_t off, uint64_t len);

uint64_t blk_size(const struct blk_dev *dev); /* bytes */
/* Where the device starts in the file (the window's offset; 0 without one). */
uint64_t blk_window_start(const struct blk_dev *dev);
/* True when the file is an Android sparse image served by the sparse backend. */
bool blk_is_sparse(const struct blk_dev *dev);
/* True for an NBD export or an RBD image: there is no file to lock or probe. */
bool blk_is_network(const struct blk_dev *dev);
const char *blk_backend_name(const struct blk_dev *dev);

/* What the device holds when it is not f2fs, for the message of a refused open: a file
 * system or partition table libblkid knows (read through the window), compressed data
 * (gzip, xz, zstd, bzip2: their magic bytes), and whether the file is a sparse image.
 * Writes a sentence saying what it is and what to do into out and returns true; false when
 * nothing is recognized. */
bool blk_identify(struct blk_dev *dev, char *out, size_t len);

/* 4 KiB-aligned allocation for I/O buffers; free with free(). NULL on ENOMEM. */
void *blk_alloc_buf(size_t len);

/* Caller write requests submitted so far, so a test can learn how many cut points a
 * workload has (blk_powercut.h). */
uint64_t blk_write_count(const struct blk_dev *dev);

/* The device bandwidth limit (blk_options.bw_limit), changeable while in use. */
void blk_set_bw_limit(struct blk_dev *dev, uint64_t bytes_per_s);
uint64_t blk_bw_limit(const struct blk_dev *dev);

/* Counters, names "blk.*": per op kind ops/bytes/errors, merged requests, in flight,
 * max in flight, bounced (unaligned) requests; then the test layers' (blk_fault.h,
 * blk_powercut.h), present with zeros where the layer is not stacked. */
void blk_emit_stats(struct blk_dev *dev, stat_emit_fn emit, void *sink);

#endif
