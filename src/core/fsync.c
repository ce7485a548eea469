/* fsync: the fast path (roll-forward: the file's data and nodes, chained after the
 * checkpoint, then one shared flush) and the state that says when an inode may not take it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsync.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/node.h"
#include "core/segment.h"
#include "core/space.h"
#include "core/writeback.h"
#include "util/log.h"

int fsync_init(struct f2fuse *fs)
{
    fs->fsync.needs_cp = calloc(2 * (fs->max_nid / 8 + 1), 1);
    if (!fs->fsync.needs_cp)
        return -ENOMEM;
    fs->fsync.new_name = fs->fsync.needs_cp + fs->max_nid / 8 + 1;
    return 0;
}

void fsync_destroy(struct f2fuse *fs)
{
    free(fs->fsync.needs_cp);
    fs->fsync.needs_cp = fs->fsync.new_name = NULL;
}

/* The bits are set by operations holding cp_lock shared and cleared by a checkpoint
 * holding it exclusively; accesses are atomic as several operations set bits at once.
 * fsync.needs_cp_end bounds the bytes a checkpoint has to clear. */
static void set_fsync_bit(struct f2fuse *fs, uint8_t *map, uint32_t ino)
{
    if (!map || ino >= fs->max_nid)
        return;
    __atomic_fetch_or(&map[ino / 8], (uint8_t)(1u << (ino % 8)), __ATOMIC_RELAXED);
    uint32_t end = ino / 8 + 1, cur = __atomic_load_n(&fs->fsync.needs_cp_end, __ATOMIC_RELAXED);
    while (cur < end && !__atomic_compare_exchange_n(&fs->fsync.needs_cp_end, &cur, end, true,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

static bool fsync_bit(const struct f2fuse *fs, const uint8_t *map, uint32_t ino)
{
    return ino < fs->max_nid &&
           (__atomic_load_n(&map[ino / 8], __ATOMIC_RELAXED) & (1u << (ino % 8)));
}

void fsync_needs_checkpoint(struct f2fuse *fs, uint32_t ino)
{
    set_fsync_bit(fs, fs->fsync.needs_cp, ino);
}

void fsync_new_name(struct f2fuse *fs, uint32_t ino)
{
    set_fsync_bit(fs, fs->fsync.new_name, ino);
}

void fsync_checkpointed(struct f2fuse *fs)
{
    if (!fs->fsync.needs_cp)
        return;
    uint32_t end = __atomic_exchange_n(&fs->fsync.needs_cp_end, 0, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < end; i++) {
        __atomic_store_n(&fs->fsync.needs_cp[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&fs->fsync.new_name[i], 0, __ATOMIC_RELAXED);
    }
}

/* Whether roll-forward recovery can bring back what an fsync of regular file ii writes
 * now, and whether its inode must carry the dentry mark (its name is not in the last
 * checkpoint).  As the kernel's need_do_checkpoint: one name, no change recovery cannot
 * replay; a new file's parent (i_pino) must be in the checkpoint and have lost no name
 * since, so that recovery only ever adds the name. */
static bool fsync_can_roll_forward(struct f2fuse *fs, const struct inode_info *ii,
                                   const struct page *ipage, bool *dentry_mark)
{
    *dentry_mark = false;
    /* A compressed file checkpoints, as the kernel does (CP_COMPRESSED): its recovery
     * replays no compressed cluster (a COMPRESS_ADDR pointer in the chain is skipped), so
     * a kernel mounting the image after a crash would break such a file's clusters. */
    if (compress_file(ii))
        return false;
    if (!fs->opts.fsync_fast || !S_ISREG(ii->mode) || ii->links != 1 ||
        fsync_bit(fs, fs->fsync.needs_cp, ii->ino) || seg_next_blkaddr(fs->seg, LOG_WARM_NODE) == 0)
        return false;
    if (!fsync_bit(fs, fs->fsync.new_name, ii->ino))
        return true;
    const struct f2fs_inode *ri = &((const struct f2fs_node *)ipage->data)->i;
    uint32_t parent = le32(ri->i_pino), namelen = le32(ri->i_namelen);
    if (!nid_valid(fs, parent) || fsync_bit(fs, fs->fsync.needs_cp, parent) ||
        fsync_bit(fs, fs->fsync.new_name, parent) || ii->xattr_nid != 0 || namelen == 0 ||
        namelen > F2FS_NAME_LEN)
        return false;
    *dentry_mark = true;
    return true;
}

/* Nodes one fsync is assumed to add to the chain when checking the room for recovery
 * before it writes them (an inode and its direct nodes: 128 cover 500 MiB of new data). */
#define FSYNC_NODES_MARGIN 128

/* Before any fsync: writable, with free segments for the nodes it writes.  Those nodes
 * exist (each counted as used when it was made), so the user-visible space is not asked:
 * an fsync never fails for lack of space on a file system full of data. */
static int fsync_begin(struct f2fuse *fs)
{
    int err = fs_writable(fs);
    return err ? err : space_reserve_to_free(fs, 8);
}

/* An fsync's write or flush failed: the first failure turns the mount read-only. */
static int fsync_failed(struct f2fuse *fs, uint32_t ino, int err)
{
    if (fs_first_write_error(fs, err))
        log_err("fsync of inode %u failed: %s; the mount turns read-only", ino, strerror(-err));
    return err;
}

int fsync_file(struct f2fuse *fs, uint32_t ino, enum blk_prio prio, uint32_t tid)
{
    if (!fs->seg)
        return 0;
    int err = fsync_begin(fs);
    if (err)
        return err;
    op_change_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    bool fast = false, dentry_mark = false;
    err = inode_get(fs, ino, &ipage, &ii);
    if (!err) {
        fast = fsync_can_roll_forward(fs, &ii, ipage, &dentry_mark);
        /* A regular file's data goes first either way: a checkpoint does not write it.
         * Fsyncs of other files write their data meanwhile; only the node chain is one
         * fsync at a time. */
        if (S_ISREG(ii.mode)) {
            if (fast)
                pcache_mark_dirty(fs->cache, ipage); /* the inode carries the fsync mark */
            writeback_wait_inode(fs, ino); /* the flusher's blocks land before our flush */
            err = data_writeback_inode(fs, ino, prio);
            if (!err && fast) {
                pthread_mutex_lock(&fs->fsync.lock);
                /* A crash must leave recovery the room to replay this chain: with free
                 * space short, a checkpoint instead (which also frees the prefree). */
                fast = space_room_for_roll_forward(fs, FSYNC_NODES_MARGIN);
                if (fast) {
                    fs->io_prio = prio; /* no checkpoint (cp_lock), no other fsync */
                    err = node_writeback(fs, ino, dentry_mark);
                } else {
                    atomic_fetch_add(&fs->fsync.no_room, 1);
                }
                pthread_mutex_unlock(&fs->fsync.lock);
            }
            if (err)
                fsync_failed(fs, ino, err);
        }
        pcache_put(fs->cache, ipage);
    }
    op_change_end(fs, ino);
    if (err)
        return err;
    if (fast) {
        /* Outside every lock: other fsyncs write their nodes meanwhile and share it. */
        err = flush_merge_wait(fs, prio);
        if (err)
            return fsync_failed(fs, ino, err);
        atomic_fetch_add(&fs->fsync.fast, 1);
        /* An fsync of more nodes than the margin may have used up the room: restore it
         * now rather than leave it to the next fsync. */
        if (space_room_for_roll_forward(fs, 0))
            return 0;
        atomic_fetch_add(&fs->fsync.no_room, 1);
        return checkpoint_request_by(fs, prio, tid, CP_METADATA);
    }
    atomic_fetch_add(&fs->fsync.checkpoints, 1);
    return checkpoint_request_by(fs, prio, tid, CP_METADATA);
}

int fsync_dir(struct f2fuse *fs, enum blk_prio prio, uint32_t tid)
{
    if (!fs->seg)
        return 0;
    int err = fsync_begin(fs);
    if (err)
        return err;
    atomic_fetch_add(&fs->fsync.checkpoints, 1);
    return checkpoint_request_by(fs, prio, tid, CP_METADATA);
}
