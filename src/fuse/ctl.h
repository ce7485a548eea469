/* Control socket of a running mount: `f2fuse stat MOUNTPOINT` (and later `f2fuse set`)
 * talk to the daemon over an abstract unix socket named after the mount point's real path,
 * so nothing on disk has to be cleaned up and no FUSE request is involved. */
#ifndef F2FUSE_FUSE_CTL_H
#define F2FUSE_FUSE_CTL_H

#include <stdio.h>

struct ctl_server;

/* Writes the reply to one command line ("stat") to out; returns 0 or -errno. */
typedef int (*ctl_handler_fn)(void *arg, const char *command, FILE *out);

/* Starts serving on the socket for the mount point whose resolved path is real_path
 * (resolved by the caller before mounting: resolving it afterwards asks the mount). */
int ctl_start(const char *real_path, ctl_handler_fn handler, void *arg, struct ctl_server **out);
void ctl_stop(struct ctl_server *srv);

/* Client side: sends command to the mount at mountpoint and copies the reply to out.
 * Returns 0, or -errno (ECONNREFUSED/ENOENT when no f2fuse daemon serves that path). */
int ctl_request(const char *mountpoint, const char *command, FILE *out);

#endif
