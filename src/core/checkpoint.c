/* Checkpoint: choose the valid pack and load what the rest of the mount reads from it
 * (the NAT version bitmap and the NAT journal kept in the hot-data summary). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint.h"
#include "core/context.h"
#include "core/data.h"
#include "core/discard.h"
#include "core/fsync.h"
#include "core/locks.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/quota.h"
#include "core/segment.h"
#include "core/writeback.h"
#include "util/crc.h"
#include "util/log.h"

/* A damaged checkpoint refuses the mount (EUCLEAN), unlike damage met later (EIO). */
#define CP_CORRUPT(fs, ...) (fs_corrupt(fs, __VA_ARGS__), -EUCLEAN)

/* One candidate pack: its first block plus the payload blocks, read contiguously because
 * the version bitmaps may continue into the payload. */
struct pack {
    uint8_t *blocks;
    uint64_t version;
    uint32_t start;
};

/* Validates the checksum of a checkpoint block; returns its version through *ver. */
static bool cp_block_valid(const uint8_t *blk, uint64_t *ver, char *why, size_t n)
{
    const struct f2fs_checkpoint *cp = (const void *)blk;
    uint32_t crc_off = le32(cp->checksum_offset);
    if (crc_off < CP_MIN_CHKSUM_OFFSET || crc_off > CP_CHKSUM_OFFSET) {
        snprintf(why, n, "bad checksum offset %u", crc_off);
        return false;
    }
    uint32_t stored;
    memcpy(&stored, blk + crc_off, sizeof(stored));
    /* With the large NAT bitmap the checksum sits early and covers the rest of the block. */
    uint32_t crc = f2fs_crc32(F2FS_SUPER_MAGIC, blk, crc_off);
    if (crc_off + sizeof(stored) < F2FS_BLKSIZE)
        crc = f2fs_crc32(crc, blk + crc_off + sizeof(stored),
                         F2FS_BLKSIZE - crc_off - sizeof(stored));
    if (crc != le32(stored)) {
        snprintf(why, n, "checksum mismatch (stored 0x%08x, computed 0x%08x)", le32(stored), crc);
        return false;
    }
    *ver = le64(cp->checkpoint_ver);
    return true;
}

static int pack_load(struct f2fuse *fs, uint32_t start, struct pack *pk, char *why, size_t n)
{
    uint32_t payload = le32(fs->sb.cp_payload);
    size_t bytes = (size_t)(1 + payload) * F2FS_BLKSIZE;
    uint8_t *blocks = blk_alloc_buf(bytes);
    uint8_t *last = blk_alloc_buf(F2FS_BLKSIZE);
    int err = -ENOMEM;
    snprintf(why, n, "out of memory");
    if (!blocks || !last)
        goto fail;
    err = blk_read(fs->dev, (uint64_t)start * F2FS_BLKSIZE, blocks, bytes);
    if (err) {
        snprintf(why, n, "read error: %s", strerror(-err));
        goto fail;
    }
    err = -EUCLEAN;
    uint64_t ver_first, ver_last;
    if (!cp_block_valid(blocks, &ver_first, why, n))
        goto fail;
    const struct f2fs_checkpoint *cp = (const void *)blocks;
    uint32_t total = le32(cp->cp_pack_total_block_count);
    if (total <= 2 || total > F2FS_BLOCKS_PER_SEG) {
        snprintf(why, n, "bad pack size %u blocks", total);
        goto fail;
    }
    err = blk_read(fs->dev, (uint64_t)(start + total - 1) * F2FS_BLKSIZE, last, F2FS_BLKSIZE);
    if (err) {
        snprintf(why, n, "read error: %s", strerror(-err));
        goto fail;
    }
    err = -EUCLEAN;
    char why_last[120];
    if (!cp_block_valid(last, &ver_last, why_last, sizeof(why_last))) {
        snprintf(why, n, "last block: %s", why_last);
        goto fail;
    }
    if (ver_first != ver_last) {
        snprintf(why, n, "torn pack (versions %llu and %llu)", (unsigned long long)ver_first,
                 (unsigned long long)ver_last);
        goto fail;
    }
    free(last);
    pk->blocks = blocks;
    pk->version = ver_first;
    pk->start = start;
    return 0;
fail:
    free(blocks);
    free(last);
    return err;
}

/* Cross-checks the chosen checkpoint against the geometry (f2fs_sanity_check_ckpt). */
static int cp_sane(struct f2fuse *fs)
{
    const struct f2fs_checkpoint *cp = fs->cp;
    const struct f2fs_super_block *sb = &fs->sb;
    uint32_t main_segs = le32(sb->segment_count_main);
    uint64_t main_blocks = (uint64_t)main_segs * F2FS_BLOCKS_PER_SEG;
    uint32_t flags = le32(cp->ckpt_flags);
    uint32_t total = le32(cp->cp_pack_total_block_count);
    uint32_t payload = le32(sb->cp_payload);

    if (le64(cp->user_block_count) == 0 || le64(cp->user_block_count) > main_blocks ||
        le64(cp->valid_block_count) > le64(cp->user_block_count))
        return CP_CORRUPT(fs, "checkpoint: bad block counts (user %llu, valid %llu, main %llu)",
                          (unsigned long long)le64(cp->user_block_count),
                          (unsigned long long)le64(cp->valid_block_count),
                          (unsigned long long)main_blocks);
    for (int i = 0; i < 3; i++) {
        if (le32(cp->cur_node_segno[i]) >= main_segs || le32(cp->cur_data_segno[i]) >= main_segs ||
            le16(cp->cur_node_blkoff[i]) >= F2FS_BLOCKS_PER_SEG ||
            le16(cp->cur_data_blkoff[i]) >= F2FS_BLOCKS_PER_SEG)
            return CP_CORRUPT(fs, "checkpoint: current segment %d out of range", i);
    }
    uint32_t sit_bytes = le32(sb->segment_count_sit) / 2 * F2FS_BLOCKS_PER_SEG / 8;
    uint32_t nat_bytes = fs->nat_blocks / 8;
    if (le32(cp->sit_ver_bitmap_bytesize) != sit_bytes ||
        le32(cp->nat_ver_bitmap_bytesize) != nat_bytes)
        return CP_CORRUPT(fs, "checkpoint: version bitmap sizes %u/%u, expected %u/%u",
                          le32(cp->sit_ver_bitmap_bytesize), le32(cp->nat_ver_bitmap_bytesize),
                          sit_bytes, nat_bytes);
    uint32_t start_sum = le32(cp->cp_pack_start_sum);
    if (start_sum < 1 + payload || start_sum >= total - 1)
        return CP_CORRUPT(fs, "checkpoint: summary start %u outside the pack of %u blocks",
                          start_sum, total);

    /* Where the NAT version bitmap lives depends on the flags and the payload. */
    size_t area = (size_t)(1 + payload) * F2FS_BLKSIZE;
    size_t off = offsetof(struct f2fs_checkpoint, sit_nat_version_bitmap);
    if (flags & CP_LARGE_NAT_BITMAP_FLAG)
        off += sizeof(uint32_t);
    else if (payload == 0)
        off += sit_bytes;
    /* Without the large-bitmap flag the bitmap must end before the checksum. */
    size_t limit = (flags & CP_LARGE_NAT_BITMAP_FLAG) ? area : le32(cp->checksum_offset);
    if (off + nat_bytes > limit)
        return CP_CORRUPT(fs, "checkpoint: NAT bitmap of %u bytes does not fit", nat_bytes);
    fs->nat_bitmap = (const uint8_t *)fs->cp_block + off;
    fs->nat_bitmap_bytes = nat_bytes;
    return 0;
}

/* The NAT journal sits in the HOT_DATA summary: at the start of the compact summary area,
 * or in the journal of the first normal data summary block. */
static int nat_journal_load(struct f2fuse *fs)
{
    const struct f2fs_checkpoint *cp = fs->cp;
    uint32_t flags = le32(cp->ckpt_flags);
    uint32_t total = le32(cp->cp_pack_total_block_count);
    uint32_t blk;
    size_t journal_off;
    if (flags & CP_COMPACT_SUM_FLAG) {
        blk = fs->cp_start + le32(cp->cp_pack_start_sum);
        journal_off = 0;
    } else {
        uint32_t nr = (flags & (CP_UMOUNT_FLAG | CP_FASTBOOT_FLAG)) ? 6 : 3;
        if (total < nr + 2)
            return CP_CORRUPT(fs, "checkpoint: pack of %u blocks cannot hold %u summaries", total,
                              nr);
        blk = fs->cp_start + total - (nr + 1);
        journal_off = offsetof(struct f2fs_summary_block, journal);
    }
    uint8_t *buf = blk_alloc_buf(F2FS_BLKSIZE);
    if (!buf)
        return -ENOMEM;
    int err = blk_read(fs->dev, (uint64_t)blk * F2FS_BLKSIZE, buf, F2FS_BLKSIZE);
    if (err) {
        free(buf);
        return err;
    }
    struct f2fs_journal journal;
    memcpy(&journal, buf + journal_off, sizeof(journal));
    free(buf);
    unsigned n = le16(journal.n_entries);
    if (n > NAT_JOURNAL_ENTRIES)
        return CP_CORRUPT(fs, "checkpoint: NAT journal claims %u entries (max %d)", n,
                          NAT_JOURNAL_ENTRIES);
    for (unsigned i = 0; i < n; i++) {
        if (le32(journal.nat.entries[i].nid) >= fs->max_nid)
            return CP_CORRUPT(fs, "checkpoint: NAT journal entry %u names nid %u out of range", i,
                              le32(journal.nat.entries[i].nid));
        fs->nat_journal[i] = journal.nat.entries[i];
    }
    fs->nat_journal_count = n;
    return 0;
}

int checkpoint_load(struct f2fuse *fs)
{
    uint32_t cp_blkaddr = le32(fs->sb.cp_blkaddr);
    struct pack packs[2] = {{0}};
    char why[2][200];
    int errs[2];
    for (int i = 0; i < 2; i++)
        errs[i] = pack_load(fs, cp_blkaddr + i * F2FS_BLOCKS_PER_SEG, &packs[i], why[i],
                            sizeof(why[i]));
    /* A pack that cannot be read may be the newer one: falling back to the other would roll
     * committed work back without a word, so a read error refuses the mount. */
    for (int i = 0; i < 2; i++)
        if (errs[i] && errs[i] != -EUCLEAN) {
            log_err("cannot read checkpoint pack %d (%s); refusing to mount rather than fall "
                    "back to a possibly older checkpoint",
                    i + 1, why[i]);
            free(packs[!i].blocks);
            return errs[i];
        }
    int chosen;
    if (!errs[0] && !errs[1])
        chosen = (int64_t)(packs[1].version - packs[0].version) > 0 ? 1 : 0;
    else if (!errs[0])
        chosen = 0;
    else if (!errs[1])
        chosen = 1;
    else {
        log_err("no valid checkpoint: pack 1: %s; pack 2: %s", why[0], why[1]);
        return errs[0] == -EUCLEAN || errs[1] == -EUCLEAN ? -EUCLEAN : errs[0];
    }
    free(packs[!chosen].blocks);
    fs->cp_block = packs[chosen].blocks;
    fs->cp = fs->cp_block;
    fs->cp_ver = packs[chosen].version;
    fs->cp_start = packs[chosen].start;

    int err = cp_sane(fs);
    if (!err)
        err = nat_journal_load(fs);
    return err;
}

/* ---- write side ---- */

#define ORPHANS_PER_BLOCK 1020

struct orphan_block {
    uint32_t ino[ORPHANS_PER_BLOCK];
    uint32_t reserved;
    uint16_t blk_addr; /* 1-based index of this block among the orphan blocks */
    uint16_t blk_count;
    uint32_t entry_count;
    uint32_t check_sum;
} __attribute__((packed));
static_assert(sizeof(struct orphan_block) == F2FS_BLKSIZE, "orphan block");

/* Checkpoint I/O carries fs->io_prio: high for the merging daemon (merged checkpoints go
 * ahead of background work), the requester's own class when each requester checkpoints
 * itself. */
static int cp_write(struct f2fuse *fs, uint64_t off, const void *buf, size_t len)
{
    struct blk_req req = {.op = BLK_WRITE,
                          .prio = fs->io_prio,
                          .off = off,
                          .len = len,
                          .buf = (void *)(uintptr_t)buf};
    struct blk_req *r = &req;
    return blk_submit_wait(fs->dev, &r, 1);
}

static int cp_flush(struct f2fuse *fs)
{
    struct blk_req req = {.op = BLK_FLUSH, .prio = fs->io_prio};
    struct blk_req *r = &req;
    return blk_submit_wait(fs->dev, &r, 1);
}

/* Commits everything written so far as a new checkpoint in the other pack
 * (f2fs_write_checkpoint / do_checkpoint).  Order: directory and symlink blocks (every data
 * page with CP_ALL_DATA or at unmount), then node pages (data writeback dirties direct
 * nodes), then NAT and SIT blocks into their alternate copies; then the pack: all of it
 * but its last block, a flush, the last block written durably (FUA, or a write and a flush).
 * Until that last block is on disk
 * the previous checkpoint stays the valid one, and nothing it references has been
 * overwritten.  Data the flusher wrote is on disk before this starts (it holds cp_lock
 * while its blocks are in flight), so the flush before the last block covers it too.
 * The caller holds cp_lock for writing. */
int checkpoint_write(struct f2fuse *fs, bool umount, enum cp_scope scope, const uint32_t *orphans,
                     uint32_t norphans)
{
    bool all = umount || scope == CP_ALL_DATA || fs->opts.checkpoint_all_data;
    read_pins_drain(fs); /* reads still on the device read blocks this commit may free */
    /* The quota files' changed pages first: this checkpoint writes them with everything
     * else (quota.c), so the usage it records is that of the tree it commits. */
    int err = quota_flush(fs);
    if (!err)
        err = all ? data_writeback(fs, 0) : data_writeback_metadata(fs);
    if (!err)
        err = node_writeback(fs, 0, false);
    if (!err)
        err = nat_flush(fs->nat);
    if (!err)
        err = seg_flush_sit(fs->seg);
    if (err)
        return err;

    /* The flusher's blocks in flight may be what those nodes point at: on the device (or
     * failed: then no commit) before the pack's flush. */
    writeback_wait_io(fs);
    if (__atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE))
        return -EIO;

    uint32_t orphan_blocks = (norphans + ORPHANS_PER_BLOCK - 1) / ORPHANS_PER_BLOCK;
    uint32_t sum_blocks = umount ? 6 : 3;
    uint32_t total = 1 + orphan_blocks + sum_blocks + 1;
    if (total > F2FS_BLOCKS_PER_SEG)
        return -ENOSPC;
    uint8_t *pack = blk_alloc_buf((size_t)total * F2FS_BLKSIZE);
    if (!pack)
        return -ENOMEM;
    memset(pack, 0, (size_t)total * F2FS_BLKSIZE);

    struct f2fs_checkpoint *cp = (void *)pack;
    memcpy(cp, fs->cp_block, F2FS_BLKSIZE);
    uint64_t version = fs->cp_ver + 1;
    cp->checkpoint_ver = htole64(version);
    /* SIT-valid blocks plus the NEW_ADDR data pointers the nodes just written hold (every
     * new node is written, so no node reservation is left): what fsck counts. */
    cp->valid_block_count = htole64(seg_used_blocks(fs->seg));
    seg_fill_checkpoint(fs->seg, cp);
    nat_fill_checkpoint(fs->nat, cp);
    /* Flags f2fuse writes: nothing optional (no compact summaries, no nat_bits), so the
     * kernel and fsck read the pack the plain way. */
    uint32_t flags = (umount ? CP_UMOUNT_FLAG : 0) | (norphans ? CP_ORPHAN_PRESENT_FLAG : 0);
    /* Damage met on this mount (fs_corrupt) marks the image as needing fsck, as the
     * kernel's SBI_NEED_FSCK does: fsck.f2fs -a / -p check only such images.  Safe to
     * write: a checkpoint is only written while no operation has failed part-way. */
    if (atomic_load(&fs->corrupt_hits))
        flags |= CP_FSCK_FLAG;
    if (quota_needs_repair(fs)) /* the kernel's SBI_QUOTA_NEED_REPAIR */
        flags |= CP_QUOTA_NEED_FSCK_FLAG;
    cp->ckpt_flags = htole32(flags);
    cp->cp_pack_total_block_count = htole32(total);
    cp->cp_pack_start_sum = htole32(1 + orphan_blocks);
    cp->checksum_offset = htole32(CP_CHKSUM_OFFSET);
    uint32_t crc = htole32(f2fs_crc32(F2FS_SUPER_MAGIC, cp, CP_CHKSUM_OFFSET));
    memcpy(pack + CP_CHKSUM_OFFSET, &crc, sizeof(crc));

    for (uint32_t b = 0; b < orphan_blocks; b++) {
        struct orphan_block *ob = (void *)(pack + (1 + b) * F2FS_BLKSIZE);
        uint32_t n = norphans - b * ORPHANS_PER_BLOCK;
        if (n > ORPHANS_PER_BLOCK)
            n = ORPHANS_PER_BLOCK;
        for (uint32_t i = 0; i < n; i++)
            ob->ino[i] = htole32(orphans[b * ORPHANS_PER_BLOCK + i]);
        ob->blk_addr = htole16((uint16_t)(b + 1));
        ob->blk_count = htole16((uint16_t)orphan_blocks);
        ob->entry_count = htole32(n);
    }
    seg_write_summaries(fs->seg, pack + (1 + orphan_blocks) * F2FS_BLKSIZE, umount);
    memcpy(pack + (total - 1) * F2FS_BLKSIZE, pack, F2FS_BLKSIZE);

    uint32_t cp_blkaddr = le32(fs->sb.cp_blkaddr);
    uint32_t start = fs->cp_start == cp_blkaddr ? cp_blkaddr + F2FS_BLOCKS_PER_SEG : cp_blkaddr;
    uint64_t at = (uint64_t)start * F2FS_BLKSIZE;
    err = cp_write(fs, at, pack, (size_t)(total - 1) * F2FS_BLKSIZE);
    if (!err)
        err = cp_flush(fs);
    /* The last block commits: one durable write (FUA where the device offers it, as f2fs
     * writes it with REQ_FUA), else a write and a flush. */
    if (!err)
        err = blk_write_durable(fs->dev, at + (uint64_t)(total - 1) * F2FS_BLKSIZE,
                                pack + (total - 1) * F2FS_BLKSIZE, F2FS_BLKSIZE, fs->io_prio);
    if (!err) {
        /* The pack is durable: what it frees may be discarded (discard.c).  Before
         * seg_checkpoint_done, which forgets what the last checkpoint held. */
        discard_checkpoint(fs);
        seg_checkpoint_done(fs->seg);
        /* Everything is in this checkpoint now: every file may take the fsync fast path. */
        fsync_checkpointed(fs);
        memcpy(fs->cp_block, pack, F2FS_BLKSIZE);
        fs->cp_ver = version;
        fs->cp_start = start;
    }
    free(pack);
    return err;
}

int checkpoint_read_orphans(struct f2fuse *fs, uint32_t **out, uint32_t *count)
{
    *out = NULL;
    *count = 0;
    if (!(le32(fs->cp->ckpt_flags) & CP_ORPHAN_PRESENT_FLAG))
        return 0;
    uint32_t first = 1 + le32(fs->sb.cp_payload);
    uint32_t nblocks = le32(fs->cp->cp_pack_start_sum) - first;
    uint8_t *buf = blk_alloc_buf(F2FS_BLKSIZE);
    uint32_t *inos = malloc((size_t)nblocks * ORPHANS_PER_BLOCK * sizeof(*inos) + 1);
    int err = buf && inos ? 0 : -ENOMEM;
    uint32_t n = 0;
    for (uint32_t b = 0; b < nblocks && !err; b++) {
        err = blk_read(fs->dev, (uint64_t)(fs->cp_start + first + b) * F2FS_BLKSIZE, buf,
                       F2FS_BLKSIZE);
        if (err)
            break;
        const struct orphan_block *ob = (const void *)buf;
        uint32_t entries = le32(ob->entry_count);
        if (entries > ORPHANS_PER_BLOCK) {
            err = CP_CORRUPT(fs, "checkpoint: orphan block %u claims %u entries", b, entries);
            break;
        }
        for (uint32_t i = 0; i < entries; i++) {
            uint32_t ino = le32(ob->ino[i]);
            if (!nid_valid(fs, ino)) {
                err = CP_CORRUPT(fs, "checkpoint: orphan inode %u out of range", ino);
                break;
            }
            inos[n++] = ino;
        }
    }
    free(buf);
    if (err) {
        free(inos);
        return err;
    }
    *out = inos;
    *count = n;
    return 0;
}

/* ---- the packs as they are (f2fuse info) ---- */

int checkpoint_pack_version(struct f2fuse *fs, unsigned index, uint64_t *version)
{
    struct pack pk;
    char why[200];
    int err = pack_load(fs, le32(fs->sb.cp_blkaddr) + index * F2FS_BLOCKS_PER_SEG, &pk, why,
                        sizeof(why));
    if (err)
        return err;
    *version = pk.version;
    free(pk.blocks);
    return 0;
}
