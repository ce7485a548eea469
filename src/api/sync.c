/* Durability: sync, fsync and fsync of a directory, on behalf of a caller. */
#include "api/api.h"

/* The I/O priority and thread id a caller's checkpoint or fsync runs with. */
static enum blk_prio caller_prio(const struct f2fuse_caller *who)
{
    return blk_prio_of_ioprio(who ? who->ioprio : 0);
}

static uint32_t caller_tid(const struct f2fuse_caller *who)
{
    return who && who->tid > 0 ? (uint32_t)who->tid : 0;
}

int f2fuse_sync(struct f2fuse *fs)
{
    return checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
}

int f2fuse_sync_as(struct f2fuse *fs, const struct f2fuse_caller *who)
{
    return checkpoint_request_by(fs, caller_prio(who), caller_tid(who), CP_ALL_DATA);
}

/* fsync as f2fs does it: when roll-forward recovery can bring the file back (a regular
 * file with one name, whose name is in the last checkpoint or can be added to a parent
 * that is), write its dirty data and direct nodes to the logs, chained after the
 * checkpoint with the fsync mark (and the dentry mark) on the inode, then flush — no
 * checkpoint.  Anything else takes a checkpoint. */
int f2fuse_fsync(struct f2fuse *fs, uint32_t ino, bool datasync)
{
    return f2fuse_fsync_as(fs, ino, datasync, NULL);
}

int f2fuse_fsync_as(struct f2fuse *fs, uint32_t ino, bool datasync, const struct f2fuse_caller *who)
{
    (void)datasync; /* f2fs's fdatasync writes the same nodes: the size may have changed */
    return fsync_file(fs, ino, caller_prio(who), caller_tid(who));
}

int f2fuse_fsyncdir_as(struct f2fuse *fs, uint32_t ino, const struct f2fuse_caller *who)
{
    (void)ino; /* a directory's fsync is a checkpoint: it holds every name */
    return fsync_dir(fs, caller_prio(who), caller_tid(who));
}
