/* FUSE over io_uring (Linux 6.14+) for a libfuse 3.14 session, which predates it.
 *
 * With the classic channel every request costs the daemon a read(2) of /dev/fuse and a
 * writev(2) of the reply, each waking a thread; on this 2-vCPU host those wakeups were the
 * largest share of a 4 KiB read (docs/ARCHITECTURE.md, "Performance").  Over the ring a
 * request arrives as the completion of a command the daemon queued, and the reply is the
 * next command (commit and fetch) — one io_uring_enter per request.
 *
 * The kernel keeps one queue per possible CPU and hands a request to the queue of the CPU
 * its caller runs on; here each queue gets `per_queue` threads with one entry (a header
 * and a payload buffer) each.  A request is rebuilt in the payload buffer's headroom into
 * the bytes /dev/fuse would have delivered and given to libfuse as usual; its reply,
 * written through the session's custom I/O (killpriv.c), is turned into the commit.  INIT,
 * FORGET, INTERRUPT and every notification keep using /dev/fuse.
 *
 * Needs the fuse module's enable_uring parameter on when the mount starts (root: echo 1 >
 * /sys/module/fuse/parameters/enable_uring): only then does the kernel offer the ring in
 * INIT; without it the mount stays on /dev/fuse.  The INIT reply accepts the offer, which
 * also keeps the ring working if the parameter is turned off later. */
#ifndef F2FUSE_FUSE_RING_H
#define F2FUSE_FUSE_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct fuse_session;
struct fuse_ring;

/* Registers per_queue entries on every queue of the session's connection, each served by
 * its own thread.  Call once the kernel has processed an INIT reply that carried
 * FUSE_OVER_IO_URING (killpriv.c sets it).  max_payload: the largest request or reply body
 * (max_write, max_read).  On failure the ring is turned off for the connection (requests
 * go on over /dev/fuse) and -errno returned. */
int fuse_ring_start(struct fuse_session *se, int fd, unsigned per_queue, size_t max_payload,
                    struct fuse_ring **out);

/* Stops the ring's threads (each leaves its io_uring, which hands its entry back to the
 * kernel) and frees it; after the session's unmount. */
void fuse_ring_stop(struct fuse_ring *ring);

/* For the session's writev hook: when the calling thread is serving a ring request and
 * iov is its reply, commits it through the ring, sets *written and returns true. */
bool fuse_ring_reply(const struct iovec *iov, int count, ssize_t *written);

/* When the calling thread serves a ring request: where a reply body of size bytes can be
 * built so that committing it copies nothing (a READ's data), else NULL. */
void *fuse_ring_reply_buffer(size_t size);

/* Counters: requests served over the ring, entries that have served one (a registered
 * entry is silent until its first request), the threads (one entry each), failures. */
struct fuse_ring_stats {
    uint64_t requests, entries, threads, errors;
};
void fuse_ring_stats(const struct fuse_ring *ring, struct fuse_ring_stats *st);

#endif
