/* The fsync state: which inodes a fast fsync (roll-forward) may not serve */
#ifndef F2FUSE_CORE_FSYNC_H
#define F2FUSE_CORE_FSYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "blk/blk.h"

struct f2fuse;

/* The fast path runs one at a time (lock), so that the warm node chain has no gaps.  Inodes
 * that changed in ways roll-forward cannot replay (linked, renamed, truncated, xattrs, not
 * regular files; directories that lost a name) since the last checkpoint make their fsync
 * a checkpoint (needs_cp).  A regular file created since then is replayed with its name
 * (the dentry mark) when its parent is in the checkpoint and lost no name since
 * (new_name).  Operations set bits holding cp_lock shared; a checkpoint clears them. */
struct fsync_state {
    pthread_mutex_t lock;
    uint8_t *needs_cp;     /* one bit per nid */
    uint8_t *new_name;     /* one bit per nid (same allocation) */
    uint32_t needs_cp_end; /* bytes of both that may have bits set */
    atomic_uint_fast64_t fast, checkpoints;
    atomic_uint_fast64_t no_room; /* fast fsyncs that checkpointed: recovery's room */
};

/* The per-nid bitmaps of a writable mount (sized by max_nid); 0 or -ENOMEM. */
int fsync_init(struct f2fuse *fs);
void fsync_destroy(struct f2fuse *fs);

void fsync_needs_checkpoint(struct f2fuse *fs, uint32_t ino);
/* A regular file was created: its first fsync may carry its name (the dentry mark). */
void fsync_new_name(struct f2fuse *fs, uint32_t ino);
void fsync_checkpointed(struct f2fuse *fs); /* a checkpoint committed: all bits clear */

/* fsync of inode ino for a caller (its I/O priority and thread id: 0 = unknown).  As f2fs:
 * when roll-forward recovery can bring the file back (a regular file with one name, whose
 * name is in the last checkpoint or can be added to a parent that is), its dirty data and
 * direct nodes go to the logs, chained after the checkpoint with the fsync mark (and the
 * dentry mark) on the inode, then one flush - no checkpoint.  Anything else takes one. */
int fsync_file(struct f2fuse *fs, uint32_t ino, enum blk_prio prio, uint32_t tid);
/* fsync of a directory: a checkpoint, which holds every name. */
int fsync_dir(struct f2fuse *fs, enum blk_prio prio, uint32_t tid);

#endif
