/* Superblock: pick a valid copy (block 0, else block 1), check its geometry as the kernel's
 * sanity_check_raw_super does, and apply the feature policy. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/super.h"
#include "core/context.h"
#include "util/crc.h"
#include "util/log.h"

/* Features f2fuse reads; anything else set in the superblock refuses the mount. */
#define FEATURES_READABLE                                                                      \
    (F2FS_FEATURE_ENCRYPT | F2FS_FEATURE_EXTRA_ATTR | F2FS_FEATURE_PRJQUOTA |                  \
     F2FS_FEATURE_INODE_CHKSUM | F2FS_FEATURE_FLEXIBLE_INLINE_XATTR | F2FS_FEATURE_QUOTA_INO | \
     F2FS_FEATURE_INODE_CRTIME | F2FS_FEATURE_LOST_FOUND | F2FS_FEATURE_VERITY |               \
     F2FS_FEATURE_SB_CHKSUM | F2FS_FEATURE_CASEFOLD | F2FS_FEATURE_COMPRESSION)

/* Checks one superblock copy; on failure writes the reason into why. */
static bool sb_valid(const struct f2fs_super_block *sb, uint64_t dev_bytes, char *why, size_t n)
{
#define BAD(...) (snprintf(why, n, __VA_ARGS__), false)
    if (le32(sb->magic) != F2FS_SUPER_MAGIC)
        return BAD("bad magic 0x%08x", le32(sb->magic));
    uint32_t features = le32(sb->feature);
    if (features & F2FS_FEATURE_SB_CHKSUM) {
        if (le32(sb->checksum_offset) != offsetof(struct f2fs_super_block, crc))
            return BAD("bad checksum offset %u", le32(sb->checksum_offset));
        uint32_t crc = f2fs_crc32(F2FS_SUPER_MAGIC, sb, offsetof(struct f2fs_super_block, crc));
        if (crc != le32(sb->crc))
            return BAD("checksum mismatch (stored 0x%08x, computed 0x%08x)", le32(sb->crc), crc);
    }
    if (le32(sb->log_blocksize) != F2FS_LOG_BLKSIZE)
        return BAD("block size 2^%u is not 4096", le32(sb->log_blocksize));
    if (le32(sb->log_blocks_per_seg) != F2FS_LOG_BLOCKS_PER_SEG)
        return BAD("segment of 2^%u blocks is not 512", le32(sb->log_blocks_per_seg));
    uint32_t log_sector = le32(sb->log_sectorsize);
    if (log_sector < 9 || log_sector > 12 || log_sector + le32(sb->log_sectors_per_block) != 12)
        return BAD("bad sector size 2^%u x %u", log_sector, le32(sb->log_sectors_per_block));

    uint32_t segs_per_sec = le32(sb->segs_per_sec), secs_per_zone = le32(sb->secs_per_zone);
    uint32_t seg_count = le32(sb->segment_count), seg_main = le32(sb->segment_count_main);
    if (!segs_per_sec || !secs_per_zone || segs_per_sec > seg_count ||
        secs_per_zone > seg_count / segs_per_sec)
        return BAD("bad section geometry (%u segs/section, %u sections/zone)", segs_per_sec,
                   secs_per_zone);
    if (le32(sb->segment_count_ckpt) != 2)
        return BAD("%u checkpoint segments, expected 2", le32(sb->segment_count_ckpt));
    uint32_t sit = le32(sb->segment_count_sit), nat = le32(sb->segment_count_nat);
    if (!sit || sit % 2 || !nat || nat % 2 || !le32(sb->segment_count_ssa) || !seg_main)
        return BAD("bad area sizes (sit %u, nat %u, ssa %u, main %u segments)", sit, nat,
                   le32(sb->segment_count_ssa), seg_main);
    if (le32(sb->section_count) != seg_main / segs_per_sec)
        return BAD("section count %u does not match %u main segments", le32(sb->section_count),
                   seg_main);

    /* The areas must follow one another exactly: CP | SIT | NAT | SSA | MAIN. */
    uint64_t seg0 = le32(sb->segment0_blkaddr);
    uint64_t cp = le32(sb->cp_blkaddr), sita = le32(sb->sit_blkaddr);
    uint64_t nata = le32(sb->nat_blkaddr), ssaa = le32(sb->ssa_blkaddr);
    uint64_t mainaddr = le32(sb->main_blkaddr);
    if (cp != seg0 || sita != cp + 2ull * F2FS_BLOCKS_PER_SEG ||
        nata != sita + (uint64_t)sit * F2FS_BLOCKS_PER_SEG ||
        ssaa != nata + (uint64_t)nat * F2FS_BLOCKS_PER_SEG ||
        mainaddr != ssaa + (uint64_t)le32(sb->segment_count_ssa) * F2FS_BLOCKS_PER_SEG)
        return BAD("areas do not chain (cp %llu sit %llu nat %llu ssa %llu main %llu)",
                   (unsigned long long)cp, (unsigned long long)sita, (unsigned long long)nata,
                   (unsigned long long)ssaa, (unsigned long long)mainaddr);
    uint64_t seg_end = seg0 + (uint64_t)seg_count * F2FS_BLOCKS_PER_SEG;
    if (mainaddr + (uint64_t)seg_main * F2FS_BLOCKS_PER_SEG > seg_end)
        return BAD("main area ends past the last segment");
    /* Six logs need six distinct segments; the SSA holds one block per main segment. */
    if (seg_main < 6 || (uint64_t)le32(sb->segment_count_ssa) * F2FS_BLOCKS_PER_SEG < seg_main)
        return BAD("too few main or SSA segments");
    uint64_t block_count = le64(sb->block_count);
    if (seg_end > block_count)
        return BAD("segments end at block %llu, past block_count %llu", (unsigned long long)seg_end,
                   (unsigned long long)block_count);
    if (seg_end * F2FS_BLKSIZE > dev_bytes)
        return BAD("image is truncated: file system needs %llu bytes, device has %llu",
                   (unsigned long long)(seg_end * F2FS_BLKSIZE), (unsigned long long)dev_bytes);
    if (le32(sb->root_ino) != 3 || le32(sb->node_ino) != F2FS_NODE_INO ||
        le32(sb->meta_ino) != F2FS_META_INO)
        return BAD("bad reserved inode numbers (root %u node %u meta %u)", le32(sb->root_ino),
                   le32(sb->node_ino), le32(sb->meta_ino));
    if (le32(sb->cp_payload) >= F2FS_BLOCKS_PER_SEG - 2 - 6)
        return BAD("checkpoint payload of %u blocks is too large", le32(sb->cp_payload));
    /* extension_count counts the cold extensions; the hot ones follow them. */
    if (le32(sb->extension_count) + sb->hot_ext_count > F2FS_MAX_EXTENSION)
        return BAD("bad extension counts");
    return true;
#undef BAD
}

static int check_features(struct f2fuse *fs)
{
    const struct f2fs_super_block *sb = &fs->sb;
    uint32_t f = fs->features;
    if (f & ~FEATURES_READABLE) {
        log_err("unsupported f2fs feature bits 0x%x (superblock features 0x%x)",
                f & ~FEATURES_READABLE, f);
        return -EOPNOTSUPP;
    }
    if (f & F2FS_FEATURE_BLKZONED || sb->devs[0].path[0]) {
        log_err("multi-device and zoned f2fs are not supported");
        return -EOPNOTSUPP;
    }
    return 0;
}

int super_load(struct f2fuse *fs)
{
    uint8_t *buf = blk_alloc_buf(2 * F2FS_BLKSIZE);
    if (!buf)
        return -ENOMEM;
    int err = blk_read(fs->dev, 0, buf, 2 * F2FS_BLKSIZE);
    if (err) {
        free(buf);
        char what[512]; /* a file too short for f2fs may still be something known */
        if (err == -EIO && blk_size(fs->dev) < 2 * F2FS_BLKSIZE &&
            blk_identify(fs->dev, what, sizeof(what))) {
            log_err("%s", what);
            return -EMEDIUMTYPE;
        }
        if (err == -EIO && blk_size(fs->dev) < 2 * F2FS_BLKSIZE) {
            log_err("not an f2fs image: it is only %llu bytes, and f2fs starts with two "
                    "4096-byte superblock blocks",
                    (unsigned long long)blk_size(fs->dev));
            return -EMEDIUMTYPE;
        }
        log_err("cannot read the superblocks: %s", strerror(-err));
        return err;
    }
    char why[2][160];
    bool magic[2];
    int chosen = -1;
    for (int i = 0; i < 2; i++)
        magic[i] = le32(((const struct f2fs_super_block *)(buf + i * F2FS_BLKSIZE +
                                                           F2FS_SUPER_OFFSET))
                            ->magic) == F2FS_SUPER_MAGIC;
    for (int i = 0; i < 2 && chosen < 0; i++) {
        const void *copy = buf + i * F2FS_BLKSIZE + F2FS_SUPER_OFFSET;
        if (sb_valid(copy, blk_size(fs->dev), why[i], sizeof(why[i]))) {
            memcpy(&fs->sb, copy, sizeof(fs->sb));
            chosen = i;
        }
    }
    free(buf);
    if (chosen < 0) {
        /* Neither copy even claims to be f2fs: say what the image is instead. */
        char what[512];
        if (!magic[0] && !magic[1] && blk_identify(fs->dev, what, sizeof(what))) {
            log_err("%s", what);
            return -EMEDIUMTYPE;
        }
        log_err("not a valid f2fs image: superblock 0: %s; superblock 1: %s", why[0], why[1]);
        return -EUCLEAN;
    }
    if (chosen == 1)
        log_warn("superblock 0 is damaged (%s); using the copy in block 1", why[0]);

    const struct f2fs_super_block *sb = &fs->sb;
    fs->features = le32(sb->feature);
    fs->main_blkaddr = le32(sb->main_blkaddr);
    fs->main_blkend = fs->main_blkaddr + le32(sb->segment_count_main) * F2FS_BLOCKS_PER_SEG;
    fs->nat_blkaddr = le32(sb->nat_blkaddr);
    fs->nat_blocks = le32(sb->segment_count_nat) / 2 * F2FS_BLOCKS_PER_SEG;
    fs->max_nid = fs->nat_blocks * NAT_ENTRY_PER_BLOCK;
    fs->root_ino = le32(sb->root_ino);
    fs->uuid_crc = f2fs_crc32(~0u, sb->uuid, sizeof(sb->uuid));
    return check_features(fs);
}
