/* Waiting for a batch of asynchronous requests: the shared building block of every
 * synchronous path above the block layer. */
#include <errno.h>
#include <pthread.h>

#include "blk/blk.h"

struct batch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned pending;
    int err;
};

static void batch_done(struct blk_req *req)
{
    struct batch *b = req->private;
    int err = 0;
    if (req->result < 0)
        err = (int)req->result;
    else if ((uint64_t)req->result != req->len)
        err = -EIO;
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
    struct batch b = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER,
                      .pending = n};
    for (unsigned i = 0; i < n; i++) {
        reqs[i]->done = batch_done;
        reqs[i]->private = &b;
    }
    int err = blk_submit(dev, reqs, n);
    if (err)
        return err;
    pthread_mutex_lock(&b.lock);
    while (b.pending)
        pthread_cond_wait(&b.cond, &b.lock);
    pthread_mutex_unlock(&b.lock);
    pthread_mutex_destroy(&b.lock);
    pthread_cond_destroy(&b.cond);
    return b.err;
}
