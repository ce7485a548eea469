/* Inodes: read an inode block, verify it (checksum, extra attributes, inline rules, sizes)
 * as the kernel's sanity_check_inode does, and decode it into struct inode_info. */
#include <errno.h>
#include <linux/fs.h> /* FS_ENCRYPT_FL */
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "core/inode.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/fscrypt.h"
#include "core/node.h"
#include "util/crc.h"

#define EXTRA_OFF(field)       (offsetof(struct f2fs_inode, field) - offsetof(struct f2fs_inode, i_addr))
#define MIN_INLINE_XATTR_ADDRS (sizeof(struct f2fs_xattr_header) / sizeof(uint32_t))

/* The largest file block index + 1 the node tree of the inode can address. */
static uint64_t max_file_blocks(const struct inode_info *ii)
{
    uint64_t n = NIDS_PER_BLOCK, d = ii->addrs_per_block;
    return ii->addrs_per_inode + 2 * d + 2 * n * d + n * n * d;
}

/* A compressed file as the kernel takes one (do_read_inode): a regular file with COMPR_FL on
 * a compression image whose extra attributes reach the cluster size.  Its fields must be in
 * range (f2fs_sanity_check_inode); its pointer counts hold whole clusters. */
static int decode_compression(struct f2fuse *fs, const struct f2fs_inode *ri, struct inode_info *ii)
{
    ii->addrs_per_block = ADDRS_PER_BLOCK;
    if (!S_ISREG(ii->mode) || !(ii->flags & F2FS_COMPR_FL) ||
        !(fs->features & F2FS_FEATURE_COMPRESSION) ||
        ii->extra_isize < EXTRA_OFF(i_log_cluster_size) + sizeof(ri->i_log_cluster_size))
        return 0;
    if (ri->i_compress_algorithm >= COMPRESS_ALGORITHMS)
        return fs_corrupt(fs, "inode %u: unknown compression algorithm %u", ii->ino,
                          ri->i_compress_algorithm);
    if (ri->i_log_cluster_size < COMPRESS_LOG_MIN || ri->i_log_cluster_size > COMPRESS_LOG_MAX)
        return fs_corrupt(fs, "inode %u: cluster size 2^%u blocks out of range", ii->ino,
                          ri->i_log_cluster_size);
    if (le64(ri->i_compr_blocks) > le64(ri->i_blocks))
        return fs_corrupt(fs, "inode %u: %llu compressed blocks, more than its %llu blocks",
                          ii->ino, (unsigned long long)le64(ri->i_compr_blocks),
                          (unsigned long long)le64(ri->i_blocks));
    ii->log_cluster_size = ri->i_log_cluster_size;
    uint32_t cluster = 1u << ii->log_cluster_size;
    ii->addrs_per_inode -= ii->addrs_per_inode % cluster;
    ii->addrs_per_block -= ii->addrs_per_block % cluster;
    return 0;
}

uint32_t inline_data_offset(const struct inode_info *ii)
{
    return offsetof(struct f2fs_inode, i_addr) +
           4 * (ii->extra_isize / 4 + DEF_INLINE_RESERVED_SIZE);
}

uint32_t inline_data_size(const struct inode_info *ii)
{
    return 4 *
           (DEF_ADDRS_PER_INODE - ii->extra_isize / 4 - ii->xattr_addrs - DEF_INLINE_RESERVED_SIZE);
}

uint32_t inline_xattr_offset(const struct inode_info *ii)
{
    return offsetof(struct f2fs_inode, i_addr) + 4 * (DEF_ADDRS_PER_INODE - ii->xattr_addrs);
}

uint16_t inode_new_extra_isize(const struct f2fuse *fs)
{
    /* As mkfs/sload (calc_extra_isize): up to the last field the image's features use.
     * The kernel writes F2FS_TOTAL_EXTRA_ATTR_SIZE, which is 36 only from 5.6 on; older
     * kernels refuse an inode whose i_extra_isize is above their (smaller) total. */
    uint32_t f = fs->features;
    size_t end = offsetof(struct f2fs_inode, i_projid);
    if (f & F2FS_FEATURE_PRJQUOTA)
        end = offsetof(struct f2fs_inode, i_inode_checksum);
    if (f & F2FS_FEATURE_INODE_CHKSUM)
        end = offsetof(struct f2fs_inode, i_crtime);
    if (f & F2FS_FEATURE_INODE_CRTIME)
        end = offsetof(struct f2fs_inode, i_compr_blocks);
    if (f & F2FS_FEATURE_COMPRESSION)
        end = offsetof(struct f2fs_inode, i_compress_flag) + sizeof(uint16_t);
    return (uint16_t)(end - offsetof(struct f2fs_inode, i_addr));
}

static uint32_t inode_checksum(struct f2fuse *fs, const struct page *page)
{
    const uint8_t *blk = page->data;
    const struct f2fs_node *node = page->data;
    uint32_t ino = node->footer.ino, gen = node->i.i_generation; /* both little-endian */
    size_t off = offsetof(struct f2fs_inode, i_inode_checksum);
    const uint32_t zero = 0;
    uint32_t crc = f2fs_crc32(fs->uuid_crc, &ino, sizeof(ino));
    crc = f2fs_crc32(crc, &gen, sizeof(gen));
    crc = f2fs_crc32(crc, blk, off);
    crc = f2fs_crc32(crc, &zero, sizeof(zero));
    return f2fs_crc32(crc, blk + off + 4, F2FS_BLKSIZE - off - 4);
}

static bool has_checksum(struct f2fuse *fs, const struct f2fs_inode *ri)
{
    return (fs->features & F2FS_FEATURE_INODE_CHKSUM) && (ri->i_inline & F2FS_EXTRA_ATTR) &&
           le16(ri->i_extra_isize) >= EXTRA_OFF(i_inode_checksum) + 4;
}

static bool checksum_ok(struct f2fuse *fs, const struct page *page)
{
    return inode_checksum(fs, page) == le32(page_node((struct page *)page)->i.i_inode_checksum);
}

void inode_update_checksum(struct f2fuse *fs, struct page *page)
{
    struct f2fs_inode *ri = &page_node(page)->i;
    if (has_checksum(fs, ri))
        ri->i_inode_checksum = htole32(inode_checksum(fs, page));
}

int inode_decode(struct f2fuse *fs, const struct page *page, uint32_t ino, struct inode_info *ii)
{
    const struct f2fs_node *node = page->data;
    const struct f2fs_inode *ri = &node->i;
    memset(ii, 0, sizeof(*ii));
    ii->ino = ino;

    if (le32(node->footer.flag) >> OFFSET_BIT_SHIFT)
        return fs_corrupt(fs, "inode %u: node block is not an inode (offset %u)", ino,
                          le32(node->footer.flag) >> OFFSET_BIT_SHIFT);
    ii->mode = le16(ri->i_mode);
    ii->inline_flags = ri->i_inline;
    ii->advise = ri->i_advise;
    ii->flags = le32(ri->i_flags);
    ii->size = le64(ri->i_size);
    ii->links = le32(ri->i_links);
    ii->xattr_nid = le32(ri->i_xattr_nid);
    ii->current_depth = le32(ri->i_current_depth);
    ii->dir_level = ri->i_dir_level;
    for (int i = 0; i < DEF_NIDS_PER_INODE; i++)
        ii->nids[i] = le32(ri->i_nid[i]);

    switch (ii->mode & S_IFMT) {
    case S_IFREG:
    case S_IFDIR:
    case S_IFLNK:
    case S_IFCHR:
    case S_IFBLK:
    case S_IFIFO:
    case S_IFSOCK: break;
    default: return fs_corrupt(fs, "inode %u: unknown file type in mode 0%o", ino, ii->mode);
    }

    ii->extra_isize = 0;
    if (ii->inline_flags & F2FS_EXTRA_ATTR) {
        if (!(fs->features & F2FS_FEATURE_EXTRA_ATTR))
            return fs_corrupt(fs, "inode %u: extra attributes without the extra_attr feature", ino);
        ii->extra_isize = le16(ri->i_extra_isize);
        if (ii->extra_isize < 4 || ii->extra_isize > F2FS_EXTRA_ISIZE_MAX || ii->extra_isize % 4)
            return fs_corrupt(fs, "inode %u: bad extra_isize %u", ino, ii->extra_isize);
    }
    if (fs->features & F2FS_FEATURE_FLEXIBLE_INLINE_XATTR) {
        if (!(ii->inline_flags & F2FS_EXTRA_ATTR))
            return fs_corrupt(fs,
                              "inode %u: no extra attributes on a flexible_inline_xattr "
                              "image",
                              ino);
        ii->xattr_addrs = le16(ri->i_inline_xattr_size);
        if ((ii->inline_flags & F2FS_INLINE_XATTR) && ii->xattr_addrs < MIN_INLINE_XATTR_ADDRS)
            return fs_corrupt(fs, "inode %u: inline xattr size %u too small", ino, ii->xattr_addrs);
    } else if (ii->inline_flags & (F2FS_INLINE_XATTR | F2FS_INLINE_DENTRY)) {
        ii->xattr_addrs = DEF_INLINE_XATTR_ADDRS;
    } else {
        ii->xattr_addrs = 0;
    }
    /* At least one data pointer (the inline reserved slot) must remain. */
    if (ii->extra_isize / 4 + ii->xattr_addrs + DEF_INLINE_RESERVED_SIZE + 1 > DEF_ADDRS_PER_INODE)
        return fs_corrupt(fs, "inode %u: inline xattr size %u leaves no data pointers", ino,
                          ii->xattr_addrs);
    ii->addrs_per_inode = DEF_ADDRS_PER_INODE - ii->extra_isize / 4 - ii->xattr_addrs;
    int err = decode_compression(fs, ri, ii);
    if (err)
        return err;

    /* A page dirtied since its last write carries a stale checksum until written. */
    if (has_checksum(fs, &node->i) && !page->dirty && !checksum_ok(fs, page))
        return fs_corrupt(fs, "inode %u: checksum mismatch", ino);

    bool is_dir = S_ISDIR(ii->mode);
    if ((ii->inline_flags & F2FS_INLINE_DATA) && !S_ISREG(ii->mode) && !S_ISLNK(ii->mode))
        return fs_corrupt(fs, "inode %u: inline data on a file of mode 0%o", ino, ii->mode);
    /* Encrypted contents live in blocks only (f2fs_sanity_check_inline_data). */
    if ((ii->inline_flags & F2FS_INLINE_DATA) && S_ISREG(ii->mode) && fscrypt_encrypted(ii))
        return fs_corrupt(fs, "inode %u: inline data in an encrypted file", ino);
    if ((ii->inline_flags & F2FS_INLINE_DENTRY) && !is_dir)
        return fs_corrupt(fs, "inode %u: inline dentries on a non-directory", ino);
    /* As the kernel's sanity_check_inode: names under it could not be hashed. */
    if ((ii->flags & F2FS_CASEFOLD_FL) && !(fs->features & F2FS_FEATURE_CASEFOLD))
        return fs_corrupt(fs, "inode %u: casefold flag on an image without casefolding", ino);
    if ((ii->inline_flags & F2FS_INLINE_DATA) && ii->size > inline_data_size(ii))
        return fs_corrupt(fs, "inode %u: inline file of %llu bytes, the inline area holds %u", ino,
                          (unsigned long long)ii->size, inline_data_size(ii));
    if (ii->size > max_file_blocks(ii) * F2FS_BLKSIZE)
        return fs_corrupt(fs, "inode %u: size %llu is beyond the largest possible file", ino,
                          (unsigned long long)ii->size);
    if (S_ISLNK(ii->mode) && ii->size > F2FS_MAX_SYMLINK)
        return fs_corrupt(fs, "inode %u: symlink target of %llu bytes", ino,
                          (unsigned long long)ii->size);
    if (is_dir && (ii->current_depth > MAX_DIR_HASH_DEPTH || ii->dir_level > MAX_DIR_HASH_DEPTH))
        return fs_corrupt(fs, "inode %u: directory depth %u / level %u out of range", ino,
                          ii->current_depth, ii->dir_level);
    if (ii->xattr_nid && !nid_valid(fs, ii->xattr_nid))
        return fs_corrupt(fs, "inode %u: xattr nid %u out of range", ino, ii->xattr_nid);
    return 0;
}

int inode_get(struct f2fuse *fs, uint32_t ino, struct page **pagep, struct inode_info *ii)
{
    struct page *page;
    int err = node_get(fs, ino, ino, &page);
    if (err)
        return err;
    atomic_fetch_add(&fs->inode_reads, 1);
    err = inode_decode(fs, page, ino, ii);
    if (err) {
        pcache_put(fs->cache, page);
        return err;
    }
    *pagep = page;
    return 0;
}

static struct timespec ts(uint64_t sec, uint32_t nsec)
{
    struct timespec t = {.tv_sec = (time_t)sec, .tv_nsec = nsec < 1000000000u ? nsec : 0};
    return t;
}

int inode_fill_attr(struct f2fuse *fs, struct page *ipage, const struct inode_info *ii,
                    struct f2fuse_attr *attr)
{
    const struct f2fs_inode *ri = &page_node(ipage)->i;
    memset(attr, 0, sizeof(*attr));
    attr->ino = ii->ino;
    attr->mode = ii->mode;
    attr->nlink = ii->links;
    attr->uid = le32(ri->i_uid);
    attr->gid = le32(ri->i_gid);
    attr->size = ii->size;
    /* On disk i_blocks counts 4 KiB blocks including the inode itself; st_blocks doesn't. */
    uint64_t blocks = le64(ri->i_blocks);
    attr->blocks = blocks ? (blocks - 1) * (F2FS_BLKSIZE / 512) : 0;
    attr->generation = le32(ri->i_generation);
    attr->flags = ii->flags;
    if (fscrypt_encrypted(ii)) /* lsattr's 'E' (kept in i_advise, not i_flags) */
        attr->flags |= FS_ENCRYPT_FL;
    attr->atime = ts(le64(ri->i_atime), le32(ri->i_atime_nsec));
    attr->mtime = ts(le64(ri->i_mtime), le32(ri->i_mtime_nsec));
    attr->ctime = ts(le64(ri->i_ctime), le32(ri->i_ctime_nsec));
    if ((fs->features & F2FS_FEATURE_INODE_CRTIME) &&
        ii->extra_isize >= EXTRA_OFF(i_crtime_nsec) + 4)
        attr->crtime = ts(le64(ri->i_crtime), le32(ri->i_crtime_nsec));
    if (S_ISCHR(ii->mode) || S_ISBLK(ii->mode)) {
        /* Old 16-bit encoding in the first pointer, else the new one in the second. */
        uint32_t old = le32(ri->i_addr[ii->extra_isize / 4]);
        uint32_t new = le32(ri->i_addr[ii->extra_isize / 4 + 1]);
        if (old)
            attr->rdev = makedev((old >> 8) & 0xff, old & 0xff);
        else
            attr->rdev = makedev((new & 0xfff00) >> 8, (new & 0xff) | ((new >> 12) & 0xfff00));
    }
    if (S_ISLNK(ii->mode) && fscrypt_encrypted(ii)) {
        /* st_size is what readlink shows (fscrypt_symlink_getattr): the target decrypted,
         * or without the key its no-key form. */
        char target[FSCRYPT_SYMLINK_TARGET_MAX];
        ssize_t n = fscrypt_symlink_target(fs, ii, ipage, target);
        if (n < 0)
            return (int)n;
        attr->size = (uint64_t)n;
    }
    return 0;
}
