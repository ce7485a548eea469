/* One writer per image: a read-write open holds an exclusive flock(2) on the image for its
 * whole life, released only after the final checkpoint and the discard drain.  So a second
 * read-write f2fuse (a mount, `f2fuse trim`) on a mounted image cannot interleave its
 * checkpoints with the first one's; a mount started right after `fusermount3 -u` waits for
 * the previous daemon to finish instead; `flock IMAGE true` waits for a daemon to be done;
 * and a read-only open can tell that the image is live elsewhere (f2fuse info says so).
 * Read-only opens only probe: they never keep a writer out.  The lock is advisory and on
 * the path's inode: other programs (the kernel, fsck.f2fs) do not take it. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/imagelock.h"
#include "core/context.h"
#include "util/log.h"

#define LOCK_WAIT_MS 10000 /* a previous daemon's final checkpoint and discard drain */
#define LOCK_POLL_MS 50

int image_lock(struct f2fuse *fs, const char *image)
{
    fs->lock_fd = -1;
    int fd = open(image, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fs->opts.read_only) {
        /* Someone holds it exclusively: a read-write user is live right now. */
        if (flock(fd, LOCK_SH | LOCK_NB) != 0)
            fs->in_use_rw = errno == EWOULDBLOCK;
        close(fd); /* also drops the shared lock: readers never hold writers back */
        return 0;
    }
    for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; waited += LOCK_POLL_MS) {
        int err = errno;
        if (err != EWOULDBLOCK || waited >= LOCK_WAIT_MS) {
            close(fd);
            if (err != EWOULDBLOCK)
                return -err;
            log_err("%s is in use by another program (an f2fuse mount, or f2fuse trim); "
                    "not opened read-write",
                    image);
            return -EBUSY;
        }
        if (waited == 0)
            log_info("waiting for another program using %s to finish", image);
        struct timespec poll = {0, LOCK_POLL_MS * 1000000L};
        nanosleep(&poll, NULL);
    }
    fs->lock_fd = fd;
    return 0;
}

void image_unlock(struct f2fuse *fs)
{
    if (fs->lock_fd >= 0)
        close(fs->lock_fd); /* closing releases the flock */
    fs->lock_fd = -1;
}
