/* Inode flags as lsattr/chattr and FS_IOC_FSGETXATTR see them.  The on-disk i_flags use the
 * FS_*_FL values, so the flags view is the stored word plus the states f2fs keeps
 * elsewhere (encryption, verity, inline data).  Only flags whose meaning f2fuse keeps may
 * be changed: a flag stored but not honoured would be a promise broken silently. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/fileattr.h"
#include "core/compress.h"
#include "core/fscrypt.h"
#include "core/fscrypt_keys.h"
#include "core/context.h"
#include "core/data.h"
#include "core/dir.h"
#include "core/locks.h"
#include "core/node.h"
#include "core/namei.h"
#include "core/quota.h"
#include "core/refs.h"
#include "core/space.h"
#include "util/log.h"

/* fs/f2fs/f2fs.h: what a new inode takes from its parent, and what suits each file type. */
#define FLAGS_INHERITED                                                                        \
    (F2FS_SYNC_FL | F2FS_NODUMP_FL | F2FS_NOATIME_FL | F2FS_DIRSYNC_FL | F2FS_PROJINHERIT_FL | \
     F2FS_CASEFOLD_FL | F2FS_COMPR_FL | F2FS_NOCOMP_FL)
#define FLAGS_REGULAR (~(F2FS_DIRSYNC_FL | F2FS_PROJINHERIT_FL | F2FS_CASEFOLD_FL))
#define FLAGS_OTHER   (F2FS_NODUMP_FL | F2FS_NOATIME_FL)

/* What the stored word may show and what a caller may ask to change (the kernel's
 * F2FS_GETTABLE_FS_FL / F2FS_SETTABLE_FS_FL). */
#define FLAGS_STORED_VISIBLE                                                                    \
    (F2FS_COMPR_FL | F2FS_SYNC_FL | F2FS_IMMUTABLE_FL | F2FS_APPEND_FL | F2FS_NODUMP_FL |       \
     F2FS_NOATIME_FL | F2FS_NOCOMP_FL | F2FS_INDEX_FL | F2FS_DIRSYNC_FL | F2FS_PROJINHERIT_FL | \
     F2FS_CASEFOLD_FL)
#define FLAGS_GETTABLE (FLAGS_STORED_VISIBLE | FS_ENCRYPT_FL | FS_INLINE_DATA_FL | FS_VERITY_FL)
#define FLAGS_SETTABLE (FLAGS_STORED_VISIBLE & ~F2FS_INDEX_FL)
/* The flags the xflags view shares with the flags view (the kernel's FS_COMMON_FL). */
#define FLAGS_COMMON                                                                        \
    (F2FS_SYNC_FL | F2FS_IMMUTABLE_FL | F2FS_APPEND_FL | F2FS_NODUMP_FL | F2FS_NOATIME_FL | \
     F2FS_PROJINHERIT_FL)
#define FLAGS_LOCKED (F2FS_IMMUTABLE_FL | F2FS_APPEND_FL)

#define F2FS_DEF_PROJID 0u

static const struct {
    uint32_t flag, xflag;
} common_map[] = {
    {F2FS_SYNC_FL, FS_XFLAG_SYNC},       {F2FS_IMMUTABLE_FL, FS_XFLAG_IMMUTABLE},
    {F2FS_APPEND_FL, FS_XFLAG_APPEND},   {F2FS_NODUMP_FL, FS_XFLAG_NODUMP},
    {F2FS_NOATIME_FL, FS_XFLAG_NOATIME}, {F2FS_PROJINHERIT_FL, FS_XFLAG_PROJINHERIT},
};

static uint32_t xflags_of(uint32_t flags)
{
    uint32_t x = 0;
    for (size_t i = 0; i < sizeof(common_map) / sizeof(common_map[0]); i++)
        if (flags & common_map[i].flag)
            x |= common_map[i].xflag;
    return x;
}

static uint32_t flags_of_xflags(uint32_t xflags)
{
    uint32_t f = 0;
    for (size_t i = 0; i < sizeof(common_map) / sizeof(common_map[0]); i++)
        if (xflags & common_map[i].xflag)
            f |= common_map[i].flag;
    return f;
}

static uint32_t mask_for_mode(uint16_t mode, uint32_t flags)
{
    if (S_ISDIR(mode))
        return flags;
    return flags & (S_ISREG(mode) ? FLAGS_REGULAR : FLAGS_OTHER);
}

static bool has_projid_slot(const struct f2fuse *fs, const struct f2fs_inode *ri)
{
    size_t end = offsetof(struct f2fs_inode, i_projid) + sizeof(ri->i_projid) -
                 offsetof(struct f2fs_inode, i_addr);
    return (fs->features & F2FS_FEATURE_PRJQUOTA) && (ri->i_inline & F2FS_EXTRA_ATTR) &&
           le16(ri->i_extra_isize) >= end;
}

uint32_t fileattr_projid(const struct f2fuse *fs, const struct f2fs_inode *ri)
{
    return has_projid_slot(fs, ri) ? le32(ri->i_projid) : F2FS_DEF_PROJID;
}

uint32_t fileattr_inherited_flags(const struct inode_info *parent, uint16_t mode)
{
    /* Compression is decided by fileattr_new_compression (names, options, parent). */
    uint32_t flags = parent->flags & FLAGS_INHERITED & ~(F2FS_COMPR_FL | F2FS_NOCOMP_FL);
    return mask_for_mode(mode, flags);
}

/* ---- compression ------------------------------------------------------------------------- */

#define COMPRESS_LEVEL_SHIFT 8 /* i_compress_flag: bit 0 checksum, bits 8.. the level */

/* Whether the inode's extra attributes reach i_compress_flag (new inodes' do, on a
 * compression image; an older inode may end before). */
static bool compression_fields(const struct f2fs_inode *ri)
{
    size_t end = offsetof(struct f2fs_inode, i_compress_flag) + sizeof(ri->i_compress_flag) -
                 offsetof(struct f2fs_inode, i_addr);
    return (ri->i_inline & F2FS_EXTRA_ATTR) && le16(ri->i_extra_isize) >= end;
}

/* The kernel's set_compress_context: the mount's algorithm, level (LZ4 and zstd only),
 * cluster size and checksum choice, and COMPR_FL. */
static void set_compress_context(const struct f2fuse *fs, struct f2fs_inode *ri)
{
    unsigned alg = fs->opts.compress_algorithm;
    uint16_t flag = fs->opts.compress_chksum ? 1 : 0;
    if (alg == COMPRESS_LZ4 || alg == COMPRESS_ZSTD)
        flag = (uint16_t)(flag | fs->opts.compress_level << COMPRESS_LEVEL_SHIFT);
    ri->i_compress_algorithm = (uint8_t)alg;
    ri->i_log_cluster_size = (uint8_t)fs->opts.compress_log_size;
    ri->i_compress_flag = htole16(flag);
    ri->i_flags = htole32(le32(ri->i_flags) | F2FS_COMPR_FL);
}

/* The kernel's is_extension_exist without temporary extensions: "*" matches every name,
 * else the name ends in "." + ext (any case) with something before the dot. */
static bool has_extension(const char *name, size_t len, const char *ext)
{
    size_t elen = strnlen(ext, F2FS_EXTENSION_LEN);
    if (elen == 1 && ext[0] == '*')
        return true;
    if (len < elen + 2 || name[len - elen - 1] != '.')
        return false;
    return strncasecmp(name + len - elen, ext, elen) == 0;
}

void fileattr_new_compression(const struct f2fuse *fs, const struct inode_info *parent,
                              struct f2fs_inode *ri, const char *name, size_t len)
{
    uint16_t mode = le16(ri->i_mode);
    if (!(fs->features & F2FS_FEATURE_COMPRESSION) || !compression_fields(ri))
        return;
    if (S_ISREG(mode)) {
        /* hot files (the superblock's hot extensions) and nocompress ones stay plain */
        const struct f2fs_super_block *sb = &fs->sb;
        uint32_t cold = le32(sb->extension_count), hot = sb->hot_ext_count;
        for (uint32_t i = cold; i < cold + hot && i < F2FS_MAX_EXTENSION; i++)
            if (has_extension(name, len, (const char *)sb->extension_list[i]))
                return;
        for (unsigned i = 0; i < fs->opts.nocompress_ext_count; i++)
            if (has_extension(name, len, fs->opts.nocompress_ext[i]))
                return;
        for (unsigned i = 0; i < fs->opts.compress_ext_count; i++)
            if (has_extension(name, len, fs->opts.compress_ext[i])) {
                set_compress_context(fs, ri);
                break;
            }
    } else if (!S_ISDIR(mode)) {
        return;
    }
    /* inherited from the directory, when no extension decided */
    if (!(le32(ri->i_flags) & F2FS_COMPR_FL)) {
        if (parent->flags & F2FS_NOCOMP_FL)
            ri->i_flags = htole32(le32(ri->i_flags) | F2FS_NOCOMP_FL);
        else if (parent->flags & F2FS_COMPR_FL)
            set_compress_context(fs, ri);
    }
    /* A compressed file keeps no inline data (f2fs_may_inline_data). */
    if (S_ISREG(mode) && (le32(ri->i_flags) & F2FS_COMPR_FL))
        ri->i_inline &= (uint8_t)~F2FS_INLINE_DATA;
}

/* A compression flag change (f2fs_setflags_common): only on an image with the feature;
 * set on a directory or on a regular file without blocks (inline data moved out first),
 * not pinned; cleared from a file without blocks.  Blocks: beyond the inode and its xattr
 * node (the kernel's F2FS_HAS_BLOCKS). */
static int compression_change(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                              bool set)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    if (!(fs->features & F2FS_FEATURE_COMPRESSION))
        return -EOPNOTSUPP;
    if (set && S_ISREG(ii->mode)) {
        if (ii->inline_flags & F2FS_PIN_FILE)
            return -EINVAL;
        if (ii->inline_flags & F2FS_INLINE_DATA) {
            int err = data_convert_inline(fs, ii, ipage);
            if (err)
                return err;
        }
    }
    uint64_t blocks = le64(ri->i_blocks) - 1 - (ii->xattr_nid ? 1 : 0);
    if (S_ISREG(ii->mode) && blocks > 0)
        return -EINVAL;
    if (set && !compression_fields(ri))
        return -EOPNOTSUPP;
    if (set)
        set_compress_context(fs, ri);
    else
        ri->i_flags = htole32(le32(ri->i_flags) & ~F2FS_COMPR_FL);
    return 0;
}

static void fill(const struct f2fuse *fs, const struct f2fs_inode *ri, const struct inode_info *ii,
                 struct f2fuse_fileattr *fa)
{
    uint32_t flags = ii->flags & FLAGS_STORED_VISIBLE;
    if (ii->advise & FADVISE_ENCRYPT_BIT)
        flags |= FS_ENCRYPT_FL;
    if (ii->advise & FADVISE_VERITY_BIT)
        flags |= FS_VERITY_FL;
    if (ii->inline_flags & (F2FS_INLINE_DATA | F2FS_INLINE_DENTRY))
        flags |= FS_INLINE_DATA_FL;
    fa->flags = flags;
    fa->xflags = xflags_of(flags);
    fa->projid = fileattr_projid(fs, ri);
    fa->from_xflags = false;
}

int fileattr_get(struct f2fuse *fs, uint32_t ino, struct f2fuse_fileattr *fa)
{
    struct page *ipage;
    struct inode_info ii;
    op_read_begin(fs, ino);
    int err = inode_get(fs, ino, &ipage, &ii);
    if (!err) {
        fill(fs, &page_node(ipage)->i, &ii, fa);
        pcache_put(fs->cache, ipage);
    }
    op_read_end(fs, ino);
    return err;
}

/* The kernel's checks for a casefold change (f2fs_setflags_common): the image must have an
 * encoding, and the directory must be empty, since its names would hash differently. */
static int casefold_change_check(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage)
{
    if (!(fs->features & F2FS_FEATURE_CASEFOLD))
        return -EOPNOTSUPP;
    bool empty;
    int err = dir_is_empty(fs, ii, ipage, &empty);
    return err ? err : empty ? 0 : -ENOTEMPTY;
}

static int projid_change_check(struct f2fuse *fs, const struct f2fs_inode *ri, uint32_t projid)
{
    if (!(fs->features & F2FS_FEATURE_PRJQUOTA))
        return projid == F2FS_DEF_PROJID ? 0 : -EOPNOTSUPP;
    if (!has_projid_slot(fs, ri))
        return -EOVERFLOW;
    return 0;
}

/* The new stored word, or -errno for a request the kernel or f2fuse refuses. */
static int64_t new_flags(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                         const struct f2fuse_fileattr *fa, uint32_t caller_uid)
{
    uint32_t want = fa->from_xflags ? flags_of_xflags(fa->xflags) : fa->flags;
    uint32_t mask = fa->from_xflags ? FLAGS_COMMON : FLAGS_SETTABLE;
    if (!fa->from_xflags && (want & ~FLAGS_GETTABLE))
        return -EOPNOTSUPP;
    want &= FLAGS_SETTABLE;
    if (mask_for_mode(ii->mode, want) != want)
        return -EOPNOTSUPP;
    if ((want & F2FS_COMPR_FL) && (want & F2FS_NOCOMP_FL))
        return -EINVAL;
    const struct f2fs_inode *ri = &page_node(ipage)->i;
    if (caller_uid != 0 && caller_uid != le32(ri->i_uid))
        return -EPERM;
    uint32_t changed = (ii->flags ^ want) & mask;
    if ((changed & FLAGS_LOCKED) && caller_uid != 0)
        return -EPERM; /* CAP_LINUX_IMMUTABLE */
    /* A writer's later WRITEs cannot be told from the kernel's writeback of pages it
     * cached before the flag (writeback_cache), so they could be neither refused nor
     * allowed rightly: the flag waits until no one has the file open for writing. */
    if ((changed & want & FLAGS_LOCKED) && inode_writers(fs, ii->ino))
        return -ETXTBSY;
    /* fscrypt_prepare_setflags, before the file system's checks: casefolded names of an
     * encrypted directory hash with a key derived from its master key (ENOKEY without it,
     * EINVAL under a v1 policy). */
    if ((want & mask & ~ii->flags & F2FS_CASEFOLD_FL) && fscrypt_encrypted(ii)) {
        int err = fscrypt_check_casefold(fs, ii, ipage);
        if (err)
            return err;
    }
    if (changed & F2FS_CASEFOLD_FL) {
        int err = casefold_change_check(fs, ii, ipage);
        if (err)
            return err;
    }
    return (ii->flags & ~mask) | (want & mask);
}

static bool is_locked(const struct inode_info *ii)
{
    return ii->flags & FLAGS_LOCKED;
}

int fileattr_may_open(const struct inode_info *ii, int open_flags)
{
    bool writes = (open_flags & O_ACCMODE) != O_RDONLY || (open_flags & O_TRUNC);
    if (writes && (ii->flags & F2FS_IMMUTABLE_FL))
        return -EPERM;
    if ((ii->flags & F2FS_APPEND_FL) &&
        (((open_flags & O_ACCMODE) != O_RDONLY && !(open_flags & O_APPEND)) ||
         (open_flags & O_TRUNC)))
        return -EPERM;
    return 0;
}

int fileattr_may_write(const struct inode_info *ii, uint64_t off)
{
    if (ii->flags & F2FS_IMMUTABLE_FL)
        return -EPERM;
    return (ii->flags & F2FS_APPEND_FL) && off < ii->size ? -EPERM : 0;
}

int fileattr_may_setattr(const struct inode_info *ii, unsigned valid)
{
    if (is_locked(ii) &&
        (valid & (F2FUSE_SET_MODE | F2FUSE_SET_UID | F2FUSE_SET_GID | F2FUSE_SET_SIZE)))
        return -EPERM;
    if ((ii->flags & F2FS_IMMUTABLE_FL) && (valid & (F2FUSE_SET_ATIME | F2FUSE_SET_MTIME)))
        return -EPERM;
    return 0;
}

int fileattr_may_change(const struct inode_info *ii)
{
    return is_locked(ii) ? -EPERM : 0;
}

int fileattr_may_fallocate(const struct inode_info *ii, int mode)
{
    if (ii->flags & F2FS_IMMUTABLE_FL)
        return -EPERM;
    if ((ii->flags & F2FS_APPEND_FL) && (mode & ~FALLOC_FL_KEEP_SIZE))
        return -EPERM;
    return 0;
}

int fileattr_may_add_name(const struct inode_info *dir)
{
    return dir->flags & F2FS_IMMUTABLE_FL ? -EPERM : 0;
}

int fileattr_may_drop_name(const struct inode_info *dir, const struct inode_info *victim)
{
    return is_locked(dir) || is_locked(victim) ? -EPERM : 0;
}

int fileattr_set(struct f2fuse *fs, uint32_t ino, const struct f2fuse_fileattr *fa,
                 uint32_t caller_uid)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    struct page *ipage;
    struct inode_info ii;
    op_change_begin(fs, ino);
    err = inode_get(fs, ino, &ipage, &ii);
    if (err)
        goto out;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    int64_t flags = new_flags(fs, &ii, ipage, fa, caller_uid);
    if (flags < 0)
        err = (int)flags;
    bool projid_changes = fa->from_xflags && fa->projid != fileattr_projid(fs, ri);
    if (!err && projid_changes)
        err = projid_change_check(fs, ri, fa->projid);
    if (!err && projid_changes) { /* f2fs_transfer_project_quota: -EDQUOT changes nothing */
        struct quota_ids to;
        quota_ids_of(fs, ri, &to);
        to.id[QUOTA_PRJ] = fa->projid;
        err = quota_transfer(fs, ipage, &to);
    }
    uint32_t compr_changed = !err ? (ii.flags ^ (uint32_t)flags) & F2FS_COMPR_FL : 0;
    if (compr_changed)
        err = compression_change(fs, &ii, ipage, flags & F2FS_COMPR_FL);
    if (!err && ((uint32_t)flags ^ ii.flags) & F2FS_CASEFOLD_FL)
        fscrypt_ikey_forget(fs, ino); /* its names key again, with or without a dirhash key */
    if (!err) {
        ri->i_flags = htole32((uint32_t)flags);
        if (projid_changes)
            ri->i_projid = htole32(fa->projid);
        inode_touch(ipage, false, true);
        pcache_mark_dirty(fs->cache, ipage);
    }
    pcache_put(fs->cache, ipage);
out:
    op_change_end(fs, ino);
    space_after_change(fs);
    return err;
}
