/* Entry invalidations sent to the kernel from a thread of their own.
 *
 * FUSE_NOTIFY_INVAL_ENTRY takes the directory's lock in the kernel, which the kernel holds
 * while it waits for this daemon's reply to an operation in that directory: a worker that
 * sent it would wait for itself (or for a worker that waits for it).  Workers queue the
 * entry instead, and the queue's thread sends it once the operation is over. */
#ifndef F2FUSE_FUSE_INVAL_QUEUE_H
#define F2FUSE_FUSE_INVAL_QUEUE_H

#include <stdint.h>

struct fuse_session;
struct inval_queue;

/* Starts the thread for session se; NULL on failure (logged: no invalidations then). */
struct inval_queue *inval_queue_start(struct fuse_session *se);
/* Queues (parent, name) to be invalidated; dropped (logged once) without memory. */
void inval_queue_push(struct inval_queue *q, uint64_t parent, const char *name);
/* Sends what is queued, stops the thread, frees q (NULL: nothing).  After the unmount:
 * then no kernel lock can hold a notification up. */
void inval_queue_stop(struct inval_queue *q);

#endif
