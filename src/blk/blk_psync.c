/* psync backend: each request runs inline in blk_submit with pread/pwrite on a buffered
 * descriptor.  It is the baseline the uring backend is measured against, and the fallback
 * where O_DIRECT is refused. */
#include "blk/blk_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Bytes moved (short only at the end of the device for reads) or -errno. */
static int64_t transfer(struct blk_dev *dev, struct blk_req *req)
{
    uint8_t *buf = req->buf;
    uint64_t done = 0;
    while (done < req->len) {
        uint64_t want = req->len - done;
        if (want > BLK_MAX_XFER)
            want = BLK_MAX_XFER;
        struct iovec iov = {buf + done, want};
        off_t at = blk_file_pos(dev, req->off + done);
        ssize_t r = req->op == BLK_READ ? preadv2(dev->fd, &iov, 1, at, 0)
                                        : pwritev2(dev->fd, &iov, 1, at, req->fua ? RWF_DSYNC : 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (r == 0) /* end of file; a write that makes no progress would spin forever */
            return req->op == BLK_READ ? (int64_t)done : -EIO;
        done += (uint64_t)r;
        if ((uint64_t)r < want && done < req->len)
            atomic_fetch_add(&dev->stats.short_resubmits, 1);
    }
    return (int64_t)done;
}

static int64_t execute(struct blk_dev *dev, struct blk_req *req)
{
    switch (req->op) {
    case BLK_READ:
    case BLK_WRITE: return transfer(dev, req);
    case BLK_FLUSH: return fdatasync(dev->fd) < 0 ? -errno : 0;
    case BLK_DISCARD: {
        int ret = dev->is_blockdev
                      ? blk_discard_blockdev(dev->fd, (uint64_t)blk_file_pos(dev, req->off),
                                             req->len)
                      : (fallocate(dev->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                   blk_file_pos(dev, req->off), (off_t)req->len) < 0
                             ? -errno
                             : 0);
        return ret < 0 ? ret : (int64_t)req->len;
    }
    default: return -EINVAL;
    }
}

static int psync_init(struct blk_dev *dev)
{
    dev->fua = true; /* pwritev2 with RWF_DSYNC */
    return 0;
}

/* Requests gathered into one preadv/pwritev at most (a stack array). */
#define GATHER_MAX 256u

/* A contiguous run reqs[0..n) as one system call.  True when it moved every byte; false
 * leaves the requests to run one by one (again, which rewrites or rereads the same bytes:
 * a short transfer or an error is sorted out per request). */
static bool run_gathered(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    struct iovec iov[GATHER_MAX];
    uint64_t total = 0;
    for (unsigned i = 0; i < n; i++) {
        iov[i] = (struct iovec){.iov_base = reqs[i]->buf, .iov_len = reqs[i]->len};
        total += reqs[i]->len;
    }
    ssize_t r;
    do {
        r = reqs[0]->op == BLK_READ
                ? preadv(dev->fd, iov, (int)n, blk_file_pos(dev, reqs[0]->off))
                : pwritev(dev->fd, iov, (int)n, blk_file_pos(dev, reqs[0]->off));
    } while (r < 0 && errno == EINTR);
    if (r < 0 || (uint64_t)r != total)
        return false;
    atomic_fetch_add(&dev->stats.merged, n - 1);
    for (unsigned i = 0; i < n; i++) {
        reqs[i]->result = (int64_t)reqs[i]->len;
        blk_req_complete(dev, reqs[i]);
    }
    return true;
}

static int psync_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    for (unsigned i = 0; i < n;) {
        unsigned run = blk_mergeable_run(reqs + i, n - i);
        if (run > GATHER_MAX)
            run = GATHER_MAX;
        if (run > 1 && run_gathered(dev, reqs + i, run)) {
            i += run;
            continue;
        }
        for (unsigned end = i + run; i < end; i++) {
            struct blk_req *req = reqs[i];
            req->result = (req->flags & BLK_REQF_PRESET) ? req->preset_result : execute(dev, req);
            blk_req_complete(dev, req);
        }
    }
    return 0;
}

static void psync_fini(struct blk_dev *dev)
{
}

const struct blk_backend_ops blk_psync_ops = {
    .name = "psync",
    .init = psync_init,
    .submit = psync_submit,
    .fini = psync_fini,
};
