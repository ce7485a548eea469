/* File operations on one inode: write, setattr (truncate, chmod, chown, times), fallocate,
 * open/release, fsync.  Each takes cp_lock shared and the inode's stripe lock. */
#include <errno.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/file.h"
#include "core/acl.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/fileattr.h"
#include "core/fscrypt.h"
#include "core/fsync.h"
#include "core/fscrypt_keys.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/namei.h"
#include "core/node.h"
#include "core/quota.h"
#include "core/space.h"
#include "core/verity.h"
#include "core/writeback.h"
#include "core/xattr.h"
#include "util/log.h"

static void file_begin(struct f2fuse *fs, uint32_t ino)
{
    op_change_begin(fs, ino);
}

static void file_end(struct f2fuse *fs, uint32_t ino)
{
    op_change_end(fs, ino);
    space_after_change(fs);
}

/* file_begin, then ino's inode; when that cannot be read, file_end again. */
static int file_begin_get(struct f2fuse *fs, uint32_t ino, struct page **ipage,
                          struct inode_info *ii)
{
    file_begin(fs, ino);
    int err = inode_get(fs, ino, ipage, ii);
    if (err)
        file_end(fs, ino);
    return err;
}

/* Whether a regular file's contents and size may change: an encrypted one not without its
 * key (ENOKEY: fscrypt_file_open, fscrypt_prepare_setattr; with it, ii->contents_key gets
 * the key, which the caller puts); a verity file never (EPERM: the kernel has no writable
 * open of one, and fsverity_prepare_setattr refuses a new size); a compressed file whose
 * spare blocks were released (F2FS_COMPRESS_RELEASED) neither, as the kernel's write path
 * says (EPERM), but see file_setattr for its truncation. */
static int contents_writable(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                             struct fscrypt_ikey **key)
{
    if (fscrypt_check_contents(ii)) {
        int err = fscrypt_ikey_get(fs, ii, ipage, key);
        if (err)
            return err;
        ii->contents_key = *key;
    }
    if (verity_file(ii))
        return -EPERM;
    if (compress_file(ii) && (ii->inline_flags & F2FS_COMPRESS_RELEASED))
        return -EPERM;
    return 0;
}

/* A released compressed file may be truncated to a whole number of clusters (the kernel's
 * f2fs_setattr: EINVAL otherwise); truncating it to nothing makes it writable again. */
static int released_truncate(const struct inode_info *ii, uint64_t size)
{
    return size % ((uint64_t)F2FS_BLKSIZE << ii->log_cluster_size) ? -EINVAL : 0;
}

/* Blocks of a range whose holes are scanned; a larger one counts as all holes. */
#define HOLE_SCAN_MAX (1u << 20)

/* What writing or reserving count file blocks from first takes from the user-visible space:
 * its holes (reserved and written blocks take none), and the nodes that may map them. */
static uint64_t new_blocks(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           uint64_t first, uint64_t count, uint64_t inline_end)
{
    /* a write that ends inside an inline file's inline area stays there (data_write) */
    if ((ii->inline_flags & F2FS_INLINE_DATA) && inline_end <= inline_data_size(ii))
        return 0;
    /* past the end nothing is mapped, unless fallocate kept the size: an append maps nothing */
    bool past_end = first * F2FS_BLKSIZE >= ii->size && !(ii->advise & FADVISE_KEEP_SIZE_BIT);
    uint64_t holes = count;
    if (!(ii->inline_flags & F2FS_INLINE_DATA) && !past_end && count <= HOLE_SCAN_MAX &&
        data_count_holes(fs, ii, &page_node(ipage)->i, first, count, &holes) != 0)
        holes = count; /* the operation meets the error itself */
    return holes ? holes + holes / ADDRS_PER_BLOCK + 3 : 0;
}

/* new_blocks before the change, read under the inode's read lock: what to claim before the
 * stripe is taken for writing (claiming may have to wait for a checkpoint or GC).  With
 * written, the blocks writeback will write for it: a compressed file rewrites whole
 * clusters (their user-visible space is the same compressed or not; the free segments
 * they need may be more than the write's own blocks). */
static uint64_t claim_for(struct f2fuse *fs, uint32_t ino, uint64_t first, uint64_t count,
                          uint64_t inline_end, uint64_t *written)
{
    op_read_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    uint64_t n = count + count / ADDRS_PER_BLOCK + 3;
    if (inode_get(fs, ino, &ipage, &ii) == 0) {
        n = new_blocks(fs, &ii, ipage, first, count, inline_end);
        if (written && compress_file(&ii) && count) {
            uint64_t c = 1ull << ii.log_cluster_size;
            *written = (first + count + c - 1) / c * c - first / c * c;
        }
        pcache_put(fs->cache, ipage);
    }
    op_read_end(fs, ino);
    return n;
}

/* Under the stripe: a change that meets more holes than were claimed (a punch came in
 * between) claims the rest now, or gets ENOSPC. */
static int claim_rest(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      uint64_t first, uint64_t count, uint64_t inline_end,
                      struct space_claim *claim)
{
    uint64_t need = new_blocks(fs, ii, ipage, first, count, inline_end);
    return need <= claim->blocks ? 0 : space_claim_more(fs, claim, need - claim->blocks);
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

ssize_t file_write(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off,
                   unsigned flags, bool *mode_changed)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    err = writeback_throttle_before(fs, size); /* writeback.c: the hard dirty limit */
    if (err)
        return err;
    /* The holes written are claimed until data_write has reserved them in segment.c's
     * count; every block written needs room in the free segments. */
    uint64_t first = off / F2FS_BLKSIZE;
    uint64_t span = size ? (off + size - 1) / F2FS_BLKSIZE - first + 1 : 0;
    uint64_t written = span;
    struct space_claim claim;
    err = space_claim(fs, &claim, claim_for(fs, ino, first, span, off + size, &written), written);
    if (err)
        return err;
    file_begin(fs, ino);
    struct page *ipage;
    struct inode_info ii;
    struct fscrypt_ikey *key = NULL;
    bool sync_write = false;
    ssize_t ret = inode_get(fs, ino, &ipage, &ii);
    if (ret == 0) {
        sync_write = ii.flags & F2FS_SYNC_FL;
        ii.claim = &claim;
        if (S_ISDIR(ii.mode))
            ret = -EISDIR;
        else if (!S_ISREG(ii.mode))
            ret = -EINVAL;
        else if (!(flags & F2FUSE_WRITE_WRITEBACK))
            ret = fileattr_may_write(&ii, off); /* fileattr.c: immutable, append-only */
        if (ret == 0 && (ret = contents_writable(fs, &ii, ipage, &key)) == 0)
            ret = claim_rest(fs, &ii, ipage, first, span, off + size, &claim);
        if (ret == 0)
            ret = remove_privs(fs, &ii, ipage, flags & F2FUSE_WRITE_KILL_SUIDGID, mode_changed);
        if (ret == 0)
            ret = data_write(fs, &ii, ipage, buf, size, off);
        if (ret > 0) {
            inode_touch(ipage, true, true);
            pcache_mark_dirty(fs->cache, ipage);
        }
        pcache_put(fs->cache, ipage);
    }
    fscrypt_ikey_put(fs, key);
    file_end(fs, ino);
    space_settle(fs, &claim);
    if (ret > 0 && sync_write) { /* IS_SYNC: generic_write_sync's fsync, its error the write's */
        int err_sync = fsync_file(fs, ino, BLK_PRIO_NORMAL, 0);
        if (err_sync)
            ret = err_sync;
    }
    if (ret > 0)
        writeback_throttle_after(fs, (uint64_t)ret); /* writeback.c: smooth pause */
    return ret;
}

int file_setattr(struct f2fuse *fs, uint32_t ino, const struct f2fuse_setattr *sa,
                 struct f2fuse_attr *attr)
{
    int err = fs_writable(fs);
    /* A new size allocates no data block (a grown file ends in a hole; a shrunk one
     * rewrites at most its last, existing block): only the nodes need free segments, and
     * a full file system must still be able to shrink a file. */
    if (!err && (sa->valid & F2FUSE_SET_SIZE))
        err = space_reserve_to_free(fs, 4);
    if (err)
        return err;
    struct page *ipage;
    struct inode_info ii;
    err = file_begin_get(fs, ino, &ipage, &ii);
    if (err)
        return err;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    struct fscrypt_ikey *key = NULL;
    err = fileattr_may_setattr(&ii, sa->valid);
    /* A size change of a file whose contents stay as they are is refused before anything
     * changes (the kernel's fsverity_prepare_setattr refuses the whole request). */
    if (!err && (sa->valid & F2FUSE_SET_SIZE) && S_ISREG(ii.mode))
        err = compress_file(&ii) && (ii.inline_flags & F2FS_COMPRESS_RELEASED) &&
                      !fscrypt_check_contents(&ii)
                  ? released_truncate(&ii, sa->size)
                  : contents_writable(fs, &ii, ipage, &key);
    /* A new owner or group takes the inode's usage over first, as the kernel's
     * dquot_transfer in f2fs_setattr: -EDQUOT changes nothing. */
    if (!err && (sa->valid & (F2FUSE_SET_UID | F2FUSE_SET_GID))) {
        struct quota_ids to;
        quota_ids_of(fs, ri, &to);
        if (sa->valid & F2FUSE_SET_UID)
            to.id[QUOTA_USR] = sa->uid;
        if (sa->valid & F2FUSE_SET_GID)
            to.id[QUOTA_GRP] = sa->gid;
        err = quota_transfer(fs, ipage, &to);
    }
    if (!err && (sa->valid & F2FUSE_SET_SIZE)) {
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
            /* nothing left that was released (the free above saw it so) */
            if (!err && sa->size == 0 && compress_file(&ii))
                ri->i_inline &= (uint8_t)~F2FS_COMPRESS_RELEASED;
        }
    }
    /* chown(2) of a non-directory drops its privileges, for root too; a request that also
     * sets the mode (a kernel doing this itself) says what it wants. */
    if (!err && (sa->valid & (F2FUSE_SET_UID | F2FUSE_SET_GID)) && !(sa->valid & F2FUSE_SET_MODE) &&
        !S_ISDIR(ii.mode))
        err = remove_privs(fs, &ii, ipage, true, NULL);
    if (!err && (sa->valid & F2FUSE_SET_MODE))
        ri->i_mode = htole16((uint16_t)((ii.mode & S_IFMT) | (sa->mode & 07777)));
    if (!err && (sa->valid & F2FUSE_SET_MODE))
        err = acl_chmod(fs, &ii, ipage);
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
        err = inode_fill_attr(fs, ipage, &ii, attr);
    pcache_put(fs->cache, ipage);
    fscrypt_ikey_put(fs, key);
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

int file_fallocate(struct f2fuse *fs, uint32_t ino, int mode, uint64_t off, uint64_t len)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    bool punch = mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE);
    if (mode != 0 && mode != FALLOC_FL_KEEP_SIZE && !punch)
        return -EOPNOTSUPP;
    if (len == 0 || off + len < off)
        return -EINVAL;
    /* The holes fallocate reserves are claimed until segment.c counts them: a concurrent
     * claim sees them either way.  Only the nodes need free segments now. */
    uint64_t first = off / F2FS_BLKSIZE, count = (off + len - 1) / F2FS_BLKSIZE - first + 1;
    struct space_claim claim = {0};
    if (!punch) {
        uint64_t n = claim_for(fs, ino, first, count, UINT64_MAX, NULL); /* converts */
        err = space_claim(fs, &claim, n, n / ADDRS_PER_BLOCK + 3);
    }
    if (err)
        return err;
    struct page *ipage;
    struct inode_info ii;
    struct fscrypt_ikey *key = NULL;
    err = file_begin_get(fs, ino, &ipage, &ii);
    if (err) {
        space_settle(fs, &claim);
        return err;
    }
    ii.claim = &claim;
    err = fileattr_may_fallocate(&ii, mode);
    if (!err && !punch && S_ISREG(ii.mode) && off + len <= data_max_size(&ii))
        err = claim_rest(fs, &ii, ipage, first, count, UINT64_MAX, &claim);
    if (err)
        goto put;
    if (!S_ISREG(ii.mode)) {
        err = S_ISDIR(ii.mode) ? -EISDIR : -ENODEV;
        goto put;
    }
    err = contents_writable(fs, &ii, ipage, &key);
    /* The kernel refuses to punch (or zero, collapse, insert) a compressed file: a
     * cluster has no holes to make. */
    if (!err && punch && compress_file(&ii))
        err = -EOPNOTSUPP;
    if (err)
        goto put;
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
        uint64_t last = (end - 1) / F2FS_BLKSIZE;
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
    fscrypt_ikey_put(fs, key);
    file_end(fs, ino);
    space_settle(fs, &claim);
    return err;
}

int file_release(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    int err = inode_release(fs, ino);
    pthread_rwlock_unlock(&fs->cp_lock);
    return err;
}
