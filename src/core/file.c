/* File operations on one inode: write, setattr (truncate, chmod, chown, times), fallocate,
 * open/release, fsync.  Each takes cp_lock shared and the inode's stripe lock. */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/fs.h"

static void file_begin(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    inode_lock_many(fs, &ino, 1);
}

static void file_end(struct f2fuse *fs, uint32_t ino)
{
    inode_unlock_many(fs, &ino, 1);
    pthread_rwlock_unlock(&fs->cp_lock);
    fs_after_change(fs);
}

/* Blocks a write of size bytes may need: its data plus the nodes that map it. */
static uint64_t blocks_for(uint64_t size)
{
    uint64_t data = size / F2FS_BLKSIZE + 2;
    return data + data / ADDRS_PER_BLOCK + 3;
}

/* A change by a caller without CAP_FSETID (the VFS's should_remove_suid): set-user-ID
 * goes, set-group-ID too when the group may execute (without that, it marks mandatory
 * locking and stays). */
static bool kill_suidgid(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    uint16_t kill = ii->mode & S_ISUID;
    if ((ii->mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
        kill |= S_ISGID;
    if (!kill)
        return false;
    ii->mode = (uint16_t)(ii->mode & ~kill);
    page_node(ipage)->i.i_mode = htole16(ii->mode);
    pcache_mark_dirty(fs->cache, ipage);
    return true;
}

/* What a write, truncate or chown takes away before it changes anything (the VFS's
 * file_remove_privs): the set-id bits when kill_ids, the capability attribute always. */
static int remove_privs(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, bool kill_ids,
                        bool *mode_changed)
{
    bool killed = kill_ids && kill_suidgid(fs, ii, ipage);
    if (mode_changed)
        *mode_changed = killed;
    int err = S_ISREG(ii->mode) ? xattr_drop_capability(fs, ii, ipage) : 0;
    return err < 0 ? err : 0;
}

static ssize_t write_op(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off,
                        unsigned flags, bool *mode_changed)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    writeback_throttle_before(fs, size); /* writeback.c: the hard dirty limit */
    err = fs_reserve(fs, blocks_for(size));
    if (err)
        return err;
    file_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    ssize_t ret = inode_get(fs, ino, &ipage, &ii);
    if (ret == 0) {
        if (S_ISDIR(ii.mode))
            ret = -EISDIR;
        else if (!S_ISREG(ii.mode))
            ret = -EINVAL;
        else
            ret = remove_privs(fs, &ii, ipage, flags & F2FUSE_WRITE_KILL_SUIDGID, mode_changed);
        if (ret == 0)
            ret = data_write(fs, &ii, ipage, buf, size, off);
        if (ret > 0) {
            inode_touch(ipage, true, true);
            pcache_mark_dirty(fs->cache, ipage);
        }
        pcache_put(fs->cache, ipage);
    }
    file_end(fs, ino);
    if (ret > 0)
        writeback_throttle_after(fs, (uint64_t)ret); /* writeback.c: smooth pause */
    return ret;
}

static int setattr_op(struct f2fuse *fs, uint32_t ino, const struct f2fuse_setattr *sa,
                      struct f2fuse_attr *attr)
{
    int err = fs_writable(fs);
    if (!err && (sa->valid & F2FUSE_SET_SIZE))
        err = fs_reserve(fs, 4);
    if (err)
        return err;
    file_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    err = inode_get(fs, ino, &ipage, &ii);
    if (err)
        goto out;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    if (sa->valid & F2FUSE_SET_SIZE) {
        if (S_ISDIR(ii.mode))
            err = -EISDIR;
        else if (!S_ISREG(ii.mode))
            err = -EINVAL;
        if (!err)
            err = remove_privs(fs, &ii, ipage, sa->valid & F2FUSE_SET_KILL_SUIDGID, NULL);
        if (!err && sa->size != ii.size) {
            err = data_truncate(fs, &ii, ipage, sa->size);
            if (!err)
                inode_touch(ipage, true, false);
        }
    }
    /* chown(2) of a non-directory drops its privileges, for root too; a request that also
     * sets the mode (a kernel doing this itself) says what it wants. */
    if (!err && (sa->valid & (F2FUSE_SET_UID | F2FUSE_SET_GID)) &&
        !(sa->valid & F2FUSE_SET_MODE) && !S_ISDIR(ii.mode))
        err = remove_privs(fs, &ii, ipage, true, NULL);
    if (!err && (sa->valid & F2FUSE_SET_MODE))
        ri->i_mode = htole16((uint16_t)((ii.mode & S_IFMT) | (sa->mode & 07777)));
    if (!err && (sa->valid & F2FUSE_SET_UID))
        ri->i_uid = htole32(sa->uid);
    if (!err && (sa->valid & F2FUSE_SET_GID))
        ri->i_gid = htole32(sa->gid);
    if (!err && (sa->valid & F2FUSE_SET_ATIME)) {
        ri->i_atime = htole64((uint64_t)sa->atime.tv_sec);
        ri->i_atime_nsec = htole32((uint32_t)sa->atime.tv_nsec);
    }
    if (!err && (sa->valid & F2FUSE_SET_MTIME)) {
        ri->i_mtime = htole64((uint64_t)sa->mtime.tv_sec);
        ri->i_mtime_nsec = htole32((uint32_t)sa->mtime.tv_nsec);
    }
    if (!err) {
        if (sa->valid & F2FUSE_SET_CTIME) {
            ri->i_ctime = htole64((uint64_t)sa->ctime.tv_sec);
            ri->i_ctime_nsec = htole32((uint32_t)sa->ctime.tv_nsec);
        } else {
            inode_touch(ipage, false, true);
        }
        pcache_mark_dirty(fs->cache, ipage);
        err = inode_decode(fs, ipage, ino, &ii);
    }
    if (!err && attr)
        err = inode_fill_attr(fs, ri, &ii, attr);
    pcache_put(fs->cache, ipage);
out:
    file_end(fs, ino);
    return err;
}

/* Reserves every hole in [first, last] (NEW_ADDR, as the kernel's f2fs does): no data is
 * written - 1 GiB of fallocate used to mean 1 GiB of zeros through the cache and the
 * device. */
static int allocate_range(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                          uint64_t first, uint64_t last)
{
    for (uint64_t index = first; index <= last; index++) {
        int err = data_reserve_block(fs, ii, ipage, index);
        if (err)
            return err;
    }
    return 0;
}

/* Zeroes [off, off + len) inside the file's current size. */
static int zero_range(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t off,
                      uint64_t len)
{
    static const uint8_t zeros[F2FS_BLKSIZE];
    while (len) {
        size_t n = F2FS_BLKSIZE - off % F2FS_BLKSIZE;
        if (n > len)
            n = (size_t)len;
        ssize_t w = data_write(fs, ii, ipage, zeros, n, off);
        if (w < 0)
            return (int)w;
        off += n;
        len -= n;
    }
    return 0;
}

static int fallocate_op(struct f2fuse *fs, uint32_t ino, int mode, uint64_t off, uint64_t len)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    bool punch = mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE);
    if (mode != 0 && mode != FALLOC_FL_KEEP_SIZE && !punch)
        return -EOPNOTSUPP;
    if (len == 0 || off + len < off)
        return -EINVAL;
    err = punch ? 0 : fs_reserve(fs, blocks_for(len));
    if (err)
        return err;
    file_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    err = inode_get(fs, ino, &ipage, &ii);
    if (err)
        goto out;
    if (!S_ISREG(ii.mode)) {
        err = S_ISDIR(ii.mode) ? -EISDIR : -ENODEV;
        goto put;
    }
    uint64_t end = off + len;
    if (end > data_max_size(&ii)) {
        err = -EFBIG;
        goto put;
    }
    if (punch) {
        if (off >= ii.size)
            goto put;
        if (end > ii.size)
            end = ii.size;
        uint64_t first_whole = (off + F2FS_BLKSIZE - 1) / F2FS_BLKSIZE;
        uint64_t end_whole = end / F2FS_BLKSIZE;
        if (ii.inline_flags & F2FS_INLINE_DATA || first_whole >= end_whole) {
            err = zero_range(fs, &ii, ipage, off, end - off);
        } else {
            err = zero_range(fs, &ii, ipage, off, first_whole * F2FS_BLKSIZE - off);
            for (uint64_t i = first_whole; i < end_whole && !err; i++)
                err = data_punch_block(fs, &ii, ipage, i);
            if (!err)
                err = zero_range(fs, &ii, ipage, end_whole * F2FS_BLKSIZE,
                                 end - end_whole * F2FS_BLKSIZE);
        }
    } else {
        uint64_t first = off / F2FS_BLKSIZE, last = (end - 1) / F2FS_BLKSIZE;
        if (ii.inline_flags & F2FS_INLINE_DATA)
            err = data_convert_inline(fs, &ii, ipage);
        if (!err)
            err = allocate_range(fs, &ii, ipage, first, last);
        if (!err && end > ii.size) {
            if (mode & FALLOC_FL_KEEP_SIZE) {
                /* Blocks past the end on purpose: tell fsck and the kernel (i_advise). */
                page_node(ipage)->i.i_advise |= FADVISE_KEEP_SIZE_BIT;
            } else if (!(err = data_zero_past_end(fs, &ii, ipage))) {
                ii.size = end;
                page_node(ipage)->i.i_size = htole64(end);
            }
        }
    }
    if (!err) {
        inode_touch(ipage, true, true);
        pcache_mark_dirty(fs->cache, ipage);
    }
put:
    pcache_put(fs->cache, ipage);
out:
    file_end(fs, ino);
    return err;
}

int f2fuse_open_inode(struct f2fuse *fs, uint32_t ino)
{
    return inode_open(fs, ino);
}

static int release_op(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    int err = inode_release(fs, ino);
    pthread_rwlock_unlock(&fs->cp_lock);
    return err;
}

/* The bits are set by operations holding cp_lock shared and cleared by a checkpoint
 * holding it exclusively; accesses are atomic as several operations set bits at once.
 * fsync_needs_cp_end bounds the bytes a checkpoint has to clear. */
static void set_fsync_bit(struct f2fuse *fs, uint8_t *map, uint32_t ino)
{
    if (!map || ino >= fs->max_nid)
        return;
    __atomic_fetch_or(&map[ino / 8], (uint8_t)(1u << (ino % 8)), __ATOMIC_RELAXED);
    uint32_t end = ino / 8 + 1, cur = __atomic_load_n(&fs->fsync_needs_cp_end, __ATOMIC_RELAXED);
    while (cur < end && !__atomic_compare_exchange_n(&fs->fsync_needs_cp_end, &cur, end, true,
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
    set_fsync_bit(fs, fs->fsync_needs_cp, ino);
}

void fsync_new_name(struct f2fuse *fs, uint32_t ino)
{
    set_fsync_bit(fs, fs->fsync_new_name, ino);
}

void fsync_checkpointed(struct f2fuse *fs)
{
    if (!fs->fsync_needs_cp)
        return;
    uint32_t end = __atomic_exchange_n(&fs->fsync_needs_cp_end, 0, __ATOMIC_RELAXED);
    for (uint32_t i = 0; i < end; i++) {
        __atomic_store_n(&fs->fsync_needs_cp[i], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&fs->fsync_new_name[i], 0, __ATOMIC_RELAXED);
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
    if (!fs->opts.fsync_fast || !S_ISREG(ii->mode) || ii->links != 1 ||
        fsync_bit(fs, fs->fsync_needs_cp, ii->ino) || seg_next_blkaddr(fs->seg, LOG_WARM_NODE) == 0)
        return false;
    if (!fsync_bit(fs, fs->fsync_new_name, ii->ino))
        return true;
    const struct f2fs_inode *ri = &((const struct f2fs_node *)ipage->data)->i;
    uint32_t parent = le32(ri->i_pino), namelen = le32(ri->i_namelen);
    if (!nid_valid(fs, parent) || fsync_bit(fs, fs->fsync_needs_cp, parent) ||
        fsync_bit(fs, fs->fsync_new_name, parent) || ii->xattr_nid != 0 || namelen == 0 ||
        namelen > F2FS_NAME_LEN)
        return false;
    *dentry_mark = true;
    return true;
}

/* Nodes one fsync is assumed to add to the chain when checking the room for recovery
 * before it writes them (an inode and its direct nodes: 128 cover 500 MiB of new data). */
#define FSYNC_NODES_MARGIN 128

/* fsync as f2fs does it: when roll-forward recovery can bring the file back (a regular
 * file with one name, whose name is in the last checkpoint or can be added to a parent
 * that is), write its dirty data and direct nodes to the logs, chained after the
 * checkpoint with the fsync mark (and the dentry mark) on the inode, then flush — no
 * checkpoint.  Anything else takes a checkpoint. */
int f2fuse_fsync(struct f2fuse *fs, uint32_t ino, bool datasync)
{
    return f2fuse_fsync_as(fs, ino, datasync, NULL);
}

/* Before any fsync: writable, with room for the nodes it may write. */
static int fsync_begin(struct f2fuse *fs)
{
    int err = fs_writable(fs);
    return err ? err : fs_reserve(fs, 8);
}

/* An fsync's write or flush failed: the first failure turns the mount read-only. */
static int fsync_failed(struct f2fuse *fs, uint32_t ino, int err)
{
    if (fs_first_write_error(fs, err))
        log_err("fsync of inode %u failed: %s; the mount turns read-only", ino, strerror(-err));
    return err;
}

static uint32_t caller_tid(const struct f2fuse_caller *who)
{
    return who && who->tid > 0 ? (uint32_t)who->tid : 0;
}

int f2fuse_fsync_as(struct f2fuse *fs, uint32_t ino, bool datasync,
                    const struct f2fuse_caller *who)
{
    enum blk_prio prio = blk_prio_of_ioprio(who ? who->ioprio : 0);
    uint32_t tid = caller_tid(who);
    if (!fs->seg)
        return 0;
    int err = fsync_begin(fs);
    if (err)
        return err;
    file_begin(fs, ino);
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
                pthread_mutex_lock(&fs->fsync_lock);
                /* A crash must leave recovery the room to replay this chain: with free
                 * space short, a checkpoint instead (which also frees the prefree). */
                fast = seg_room_for_roll_forward(fs->seg, FSYNC_NODES_MARGIN);
                if (fast) {
                    fs->io_prio = prio; /* no checkpoint (cp_lock), no other fsync */
                    err = node_writeback(fs, ino, dentry_mark);
                } else {
                    atomic_fetch_add(&fs->fsync_no_room, 1);
                }
                pthread_mutex_unlock(&fs->fsync_lock);
            }
            if (err)
                fsync_failed(fs, ino, err);
        }
        pcache_put(fs->cache, ipage);
    }
    inode_unlock_many(fs, &ino, 1);
    pthread_rwlock_unlock(&fs->cp_lock);
    if (err)
        return err;
    if (fast) {
        /* Outside every lock: other fsyncs write their nodes meanwhile and share it. */
        err = flush_merge_wait(fs, prio);
        if (err)
            return fsync_failed(fs, ino, err);
        atomic_fetch_add(&fs->fsync_fast, 1);
        /* An fsync of more nodes than the margin may have used up the room: restore it
         * now rather than leave it to the next fsync. */
        if (seg_room_for_roll_forward(fs->seg, 0))
            return 0;
        atomic_fetch_add(&fs->fsync_no_room, 1);
        return checkpoint_request_by(fs, prio, tid, CP_METADATA);
    }
    atomic_fetch_add(&fs->fsync_checkpoint, 1);
    return checkpoint_request_by(fs, prio, tid, CP_METADATA);
}

int f2fuse_fsyncdir_as(struct f2fuse *fs, uint32_t ino, const struct f2fuse_caller *who)
{
    if (!fs->seg)
        return 0;
    int err = fsync_begin(fs);
    if (err)
        return err;
    atomic_fetch_add(&fs->fsync_checkpoint, 1);
    return checkpoint_request_by(fs, blk_prio_of_ioprio(who ? who->ioprio : 0), caller_tid(who),
                                 CP_METADATA);
}

/* The public entry points: an operation that fails part-way turns the mount read-only
 * (fault.c). */
ssize_t f2fuse_write(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off)
{
    return f2fuse_write_ex(fs, ino, buf, size, off, 0, NULL);
}

ssize_t f2fuse_write_ex(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size,
                        uint64_t off, unsigned flags, bool *mode_changed)
{
    if (mode_changed)
        *mode_changed = false;
    ssize_t ret = write_op(fs, ino, buf, size, off, flags, mode_changed);
    return ret < 0 ? fs_op_result(fs, "write", (int)ret) : ret;
}

int f2fuse_setattr(struct f2fuse *fs, uint32_t ino, const struct f2fuse_setattr *sa,
                   struct f2fuse_attr *attr)
{
    return fs_op_result(fs, "setattr", setattr_op(fs, ino, sa, attr));
}

int f2fuse_fallocate(struct f2fuse *fs, uint32_t ino, int mode, uint64_t off, uint64_t len)
{
    return fs_op_result(fs, "fallocate", fallocate_op(fs, ino, mode, off, len));
}

int f2fuse_release(struct f2fuse *fs, uint32_t ino)
{
    return fs_op_result(fs, "release", release_op(fs, ino));
}
