/* key_ctl.c: `f2fuse key add|list|remove MOUNTPOINT` as the daemon answers them on its control
 * socket: fscrypt master keys added to and removed from a live mount (what the kernel's
 * FS_IOC_ADD_ENCRYPTION_KEY / FS_IOC_REMOVE_ENCRYPTION_KEY do, which FUSE cannot pass). */
#ifndef F2FUSE_FUSE_KEY_CTL_H
#define F2FUSE_FUSE_KEY_CTL_H

#include <stdint.h>
#include <stdio.h>

#include "f2fuse.h"

/* Handles "key add HEX [DESCHEX]", "key remove HEX", "key list" (args: what follows "key "),
 * writing the reply to out.  After a change inval(arg, ino) is called for every encrypted
 * inode the kernel holds: what it cached of them changed.  The key's hex digits in args are
 * the caller's to wipe. */
void key_ctl(struct f2fuse *fs, const char *args, FILE *out, void (*inval)(void *arg, uint32_t ino),
             void *arg);

#endif
