/* FUSE_HANDLE_KILLPRIV_V2 on libfuse 3.14, which cannot ask for it.
 *
 * Without it the kernel asks the daemon for security.capability (a GETXATTR round trip)
 * before every WRITE of a file, to know whether the write must drop it: half the requests
 * of a 4 KiB write stream.  With it the kernel leaves dropping set-id bits and
 * capabilities on write, truncate and chown to the daemon (flagging writes and truncates
 * by callers without CAP_FSETID) and marks its inodes S_NOSEC.
 *
 * libfuse lets a session do its own /dev/fuse I/O (fuse_session_custom_io): the reader
 * notes the INIT request's flags and each request's kill flag, and the writer adds the
 * flag to the INIT reply when the kernel offered it. */
#ifndef F2FUSE_FUSE_KILLPRIV_H
#define F2FUSE_FUSE_KILLPRIV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fuse_session;

struct killpriv {
    bool want;                    /* set before the session starts */
    atomic_bool offered, enabled; /* the kernel's INIT had the flag; our reply carried it */
    atomic_uint_fast64_t init_unique;
    /* Called once, in the thread that wrote it, after the kernel took the INIT reply in
     * (fuse_ring.c registers then). */
    void (*on_init_replied)(void *userdata);
    atomic_bool init_done;
    /* FUSE over io_uring (fuse_ring.c): ring_flag, set before the session starts, asks for
     * the INIT flag when the kernel offered it (ring_offered); ring_flagged: our reply
     * carried it, so the kernel holds requests until every queue has an entry. */
    bool ring_flag;
    atomic_bool ring_offered, ring_flagged;
};

/* Takes over the session's /dev/fuse I/O (after fuse_session_mount).  state_of maps the
 * session's userdata to its struct killpriv.  Returns 0 or -errno. */
int killpriv_install(struct fuse_session *se, struct killpriv *(*state_of)(void *userdata));

/* Notes the kill flag of a request this thread is about to handle (buf, n: the request
 * as /dev/fuse delivers it); io_read does it for requests read from /dev/fuse. */
void killpriv_note_request(const void *buf, size_t n);

/* Whether the request this thread is handling asks to kill the set-id bits (a WRITE or
 * SETATTR by a caller without CAP_FSETID, an OPEN with O_TRUNC). */
bool killpriv_request_kills_suidgid(void);

#endif
