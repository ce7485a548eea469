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
#include <stdint.h>

struct fuse_session;

struct killpriv {
    bool want;                     /* set before the session starts */
    atomic_bool offered, enabled;  /* the kernel's INIT had the flag; our reply carried it */
    atomic_uint_fast64_t init_unique;
};

/* Takes over the session's /dev/fuse I/O (after fuse_session_mount).  state_of maps the
 * session's userdata to its struct killpriv.  Returns 0 or -errno. */
int killpriv_install(struct fuse_session *se, struct killpriv *(*state_of)(void *userdata));

/* Whether the request this thread is handling asks to kill the set-id bits (a WRITE or
 * SETATTR by a caller without CAP_FSETID, an OPEN with O_TRUNC). */
bool killpriv_request_kills_suidgid(void);

#endif
