/* Segment manager tests on images made by the real mkfs.f2fs and sload.f2fs 1.15: loading
 * (SIT, journal, logs, summaries compact/normal, node summaries from the pack or rebuilt),
 * allocation (LFS append, SSA on a full segment, ENOSPC, free/prefree rules, threads), and
 * the checkpoint side (SIT flushed to the alternate copies, CP fields, summaries) checked by
 * writing a checkpoint pack here, loading it again, and running fsck.f2fs on it.
 *
 * Randomized parts use F2FUSE_SEED (printed). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api/api.h"
#include "util/crc.h"

#define BLKS F2FS_BLOCKS_PER_SEG

static char g_dir[256];
static unsigned long g_seed;

/* ---- helpers ------------------------------------------------------------------------- */

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

static void path_in(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", g_dir, name);
}

static void make_image(const char *img, unsigned mib)
{
    CHECK_EQ(sh("rm -f %s && truncate -s %uM %s && mkfs.f2fs -f %s >/dev/null", img, mib, img, img),
             0);
}

static void write_file(const char *path, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return;
    }
    uint8_t buf[4096];
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof(buf) ? size - done : sizeof(buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)rnd();
        fwrite(buf, 1, n, f);
        done += n;
    }
    fclose(f);
}

/* A tree of some 200 files in 8 directories (a few MiB), loaded by sload. */
static void make_loaded_image(const char *img, unsigned mib)
{
    char src[512], p[700];
    path_in(src, sizeof(src), "src");
    CHECK_EQ(sh("rm -rf %s && mkdir -p %s", src, src), 0);
    for (int d = 0; d < 8; d++) {
        snprintf(p, sizeof(p), "%s/d%d", src, d);
        mkdir(p, 0755);
        for (int f = 0; f < 25; f++) {
            snprintf(p, sizeof(p), "%s/d%d/f%d", src, d, f);
            write_file(p, (size_t)(rnd() % (f % 5 == 0 ? 400000 : 20000)));
        }
    }
    snprintf(p, sizeof(p), "%s/big", src);
    write_file(p, 3u << 20);
    make_image(img, mib);
    CHECK_EQ(sh("sload.f2fs -f %s -t / %s >/dev/null", src, img), 0);
}

static void free_fs(struct f2fuse *fs)
{
    if (!fs)
        return;
    seg_destroy(fs->seg);
    pcache_destroy(fs->cache);
    if (fs->dev)
        blk_close(fs->dev);
    free(fs->cp_block);
    free(fs);
}

/* A write-side struct f2fuse up to the loaded checkpoint (no segment manager yet). */
static struct f2fuse *open_fs(const char *img)
{
    struct f2fuse *fs = calloc(1, sizeof(*fs));
    f2fuse_options_init(&fs->opts);
    fs->opts.read_only = false;
    struct blk_options bo = {
        .backend = fs->opts.backend, .queue_depth = fs->opts.queue_depth, .read_only = false};
    int err = blk_open(img, &bo, &fs->dev);
    if (!err)
        err = pcache_create(fs->dev, 64u << 20, &fs->cache); /* a fixed size, as before auto */
    if (!err)
        err = super_load(fs);
    if (!err)
        err = checkpoint_load(fs);
    CHECK_EQ(err, 0);
    if (err) {
        free_fs(fs);
        return NULL;
    }
    return fs;
}

static struct f2fuse *open_loaded(const char *img)
{
    struct f2fuse *fs = open_fs(img);
    if (!fs)
        return NULL;
    int err = seg_load(fs, &fs->seg);
    CHECK_EQ(err, 0);
    if (err) {
        free_fs(fs);
        return NULL;
    }
    return fs;
}

static uint32_t main_addr(struct f2fuse *fs, uint32_t segno, uint32_t off)
{
    return fs->main_blkaddr + segno * BLKS + off;
}

static void *blkbuf(size_t blocks)
{
    void *p = blk_alloc_buf(blocks * F2FS_BLKSIZE);
    memset(p, 0, blocks * F2FS_BLKSIZE);
    return p;
}

static int read_blk(struct f2fuse *fs, uint32_t addr, void *buf)
{
    return blk_read(fs->dev, (uint64_t)addr * F2FS_BLKSIZE, buf, F2FS_BLKSIZE);
}

/* The checkpoint the segment manager would write now (a copy of the loaded CP block with
 * seg_fill_checkpoint applied).  Free with free(). */
static struct f2fs_checkpoint *cp_now(struct f2fuse *fs)
{
    struct f2fs_checkpoint *cp = blkbuf(1);
    memcpy(cp, fs->cp_block, F2FS_BLKSIZE);
    seg_fill_checkpoint(fs->seg, cp);
    return cp;
}

static void log_pos(struct f2fuse *fs, enum log_type t, uint32_t *segno, uint32_t *off)
{
    struct f2fs_checkpoint *cp = cp_now(fs);
    if (log_is_node(t)) {
        *segno = le32(cp->cur_node_segno[t - LOG_HOT_NODE]);
        *off = le16(cp->cur_node_blkoff[t - LOG_HOT_NODE]);
    } else {
        *segno = le32(cp->cur_data_segno[t]);
        *off = le16(cp->cur_data_blkoff[t]);
    }
    free(cp);
}

static struct f2fs_summary mksum(uint32_t nid, uint8_t ver, uint16_t ofs)
{
    struct f2fs_summary s = {.nid = htole32(nid), .version = ver, .ofs_in_node = htole16(ofs)};
    return s;
}

/* Writes a node block carrying nid in its footer at addr (what the node writer would do). */
static void write_fake_node(struct f2fuse *fs, uint32_t addr, uint32_t nid)
{
    struct f2fs_node *n = blkbuf(1);
    n->footer.nid = htole32(nid);
    n->footer.ino = htole32(nid);
    n->footer.cp_ver = htole64(fs->cp_ver);
    CHECK_EQ(blk_write(fs->dev, (uint64_t)addr * F2FS_BLKSIZE, n, F2FS_BLKSIZE), 0);
    free(n);
}

/* A checkpoint as checkpoint.c will write it, reduced to what the segment side needs: the
 * SIT flushed, a CP block filled by the segment manager, normal summaries (plus the NAT
 * journal the mount loaded, since nothing here rewrites NAT), written into the other pack,
 * then seg_checkpoint_done.  With with_node, CP_UMOUNT and node summaries in the pack. */
static int write_checkpoint(struct f2fuse *fs, bool with_node, uint32_t valid_nodes)
{
    int err = seg_flush_sit(fs->seg);
    if (err)
        return err;
    struct f2fs_checkpoint *cp = blkbuf(1);
    memcpy(cp, fs->cp_block, F2FS_BLKSIZE);
    uint32_t nr = with_node ? 6 : 3, total = 1 + nr + 1;
    cp->checkpoint_ver = htole64(fs->cp_ver + 1);
    cp->ckpt_flags = htole32(with_node ? CP_UMOUNT_FLAG : 0);
    cp->cp_pack_total_block_count = htole32(total);
    cp->cp_pack_start_sum = htole32(1);
    cp->valid_block_count = htole64(seg_valid_blocks(fs->seg));
    cp->valid_node_count = htole32(valid_nodes);
    cp->checksum_offset = htole32(CP_CHKSUM_OFFSET);
    seg_fill_checkpoint(fs->seg, cp);
    uint32_t crc = htole32(f2fs_crc32(F2FS_SUPER_MAGIC, cp, CP_CHKSUM_OFFSET));
    memcpy((uint8_t *)cp + CP_CHKSUM_OFFSET, &crc, 4);

    uint8_t *pack = blkbuf(total);
    memcpy(pack, cp, F2FS_BLKSIZE);
    seg_write_summaries(fs->seg, pack + F2FS_BLKSIZE, with_node);
    struct f2fs_summary_block *hot = (void *)(pack + F2FS_BLKSIZE);
    hot->journal.n_entries = htole16((uint16_t)fs->nat_journal_count);
    for (unsigned i = 0; i < fs->nat_journal_count; i++)
        hot->journal.nat.entries[i] = fs->nat_journal[i];
    memcpy(pack + (size_t)(total - 1) * F2FS_BLKSIZE, cp, F2FS_BLKSIZE);

    uint32_t cp_blkaddr = le32(fs->sb.cp_blkaddr);
    uint32_t start = fs->cp_start == cp_blkaddr ? cp_blkaddr + BLKS : cp_blkaddr;
    err = blk_write(fs->dev, (uint64_t)start * F2FS_BLKSIZE, pack, (size_t)total * F2FS_BLKSIZE);
    if (!err)
        err = blk_flush(fs->dev);
    if (!err) {
        seg_checkpoint_done(fs->seg);
        /* the mount now stands on the new pack */
        memcpy(fs->cp_block, cp, F2FS_BLKSIZE);
        fs->cp_ver++;
        fs->cp_start = start;
    }
    free(pack);
    free(cp);
    return err;
}

static bool fsck_clean(const char *img)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "fsck.f2fs --dry-run %s 2>&1", img);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    char line[1024];
    bool bad = false, done = false;
    while (fgets(line, sizeof(line), p)) {
        if (strstr(line, "[Fail]") || strstr(line, "ASSERT") || strstr(line, "[FIX]") ||
            strstr(line, "Wrong") || strstr(line, "Invalid")) {
            bad = true;
            fprintf(stderr, "fsck: %s", line);
        }
        if (strstr(line, "other corrupted bugs") && strstr(line, "[Ok..]"))
            done = true;
    }
    int rc = pclose(p);
    if (rc != 0)
        fprintf(stderr, "fsck.f2fs exited with %d\n", rc);
    return rc == 0 && done && !bad;
}

/* ---- loading -------------------------------------------------------------------------- */

/* Every block below the write position of a node log that is valid must be the node its
 * summary names. */
static void check_node_summaries(struct f2fuse *fs, const uint8_t *sums)
{
    uint8_t *buf = blkbuf(1);
    for (int t = LOG_HOT_NODE; t <= LOG_COLD_NODE; t++) {
        uint32_t segno, off;
        log_pos(fs, (enum log_type)t, &segno, &off);
        const struct f2fs_summary_block *sb = (const void *)(sums + (size_t)t * F2FS_BLKSIZE);
        CHECK_EQ(sb->footer.entry_type, SUM_TYPE_NODE);
        for (uint32_t j = 0; j < off; j++) {
            uint32_t addr = main_addr(fs, segno, j);
            if (!seg_block_valid(fs->seg, addr))
                continue;
            CHECK_EQ(read_blk(fs, addr, buf), 0);
            const struct f2fs_node *n = (const void *)buf;
            CHECK_EQ(le32(sb->entries[j].nid), le32(n->footer.nid));
        }
        for (uint32_t j = off; j < BLKS; j++)
            CHECK_EQ(le32(sb->entries[j].nid), 0);
    }
    free(buf);
}

static void check_fresh_load(const char *img)
{
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    const struct f2fs_checkpoint *cp = fs->cp;
    CHECK_EQ(seg_valid_blocks(fs->seg), le64(cp->valid_block_count));
    CHECK_EQ(seg_free_segments(fs->seg), le32(cp->free_segment_count));
    CHECK_EQ(seg_prefree_segments(fs->seg), 0);

    /* the CP the manager would write matches the loaded one field by field */
    struct f2fs_checkpoint *now = cp_now(fs);
    for (int i = 0; i < MAX_ACTIVE_NODE_LOGS; i++) {
        CHECK_EQ(le32(now->cur_node_segno[i]), le32(cp->cur_node_segno[i]));
        CHECK_EQ(le16(now->cur_node_blkoff[i]), le16(cp->cur_node_blkoff[i]));
        CHECK_EQ(le32(now->cur_data_segno[i]), le32(cp->cur_data_segno[i]));
        CHECK_EQ(le16(now->cur_data_blkoff[i]), le16(cp->cur_data_blkoff[i]));
    }
    CHECK(memcmp(now->alloc_type, cp->alloc_type, sizeof(cp->alloc_type)) == 0);
    CHECK_EQ(le32(now->free_segment_count), le32(cp->free_segment_count));
    CHECK_EQ(le32(now->sit_ver_bitmap_bytesize), le32(cp->sit_ver_bitmap_bytesize));
    CHECK(memcmp(now->sit_nat_version_bitmap, cp->sit_nat_version_bitmap,
                 le32(cp->sit_ver_bitmap_bytesize)) == 0);
    CHECK(le64(now->elapsed_time) >= le64(cp->elapsed_time));
    /* everything past the SIT bitmap (NAT bitmap, checksum) is left alone */
    size_t tail = offsetof(struct f2fs_checkpoint, sit_nat_version_bitmap) +
                  le32(cp->sit_ver_bitmap_bytesize);
    CHECK(memcmp((uint8_t *)now + tail, (const uint8_t *)cp + tail, F2FS_BLKSIZE - tail) == 0);
    free(now);

    /* summaries: node ones name their block's nid, data ones a plausible owner */
    uint8_t *sums = blkbuf(LOG_COUNT);
    seg_write_summaries(fs->seg, sums, true);
    check_node_summaries(fs, sums);
    for (int t = LOG_HOT_DATA; t <= LOG_COLD_DATA; t++) {
        uint32_t segno, off;
        log_pos(fs, (enum log_type)t, &segno, &off);
        const struct f2fs_summary_block *sb = (const void *)(sums + (size_t)t * F2FS_BLKSIZE);
        CHECK_EQ(sb->footer.entry_type, SUM_TYPE_DATA);
        CHECK_EQ(le16(sb->journal.n_entries), 0);
        for (uint32_t j = 0; j < off; j++)
            if (seg_block_valid(fs->seg, main_addr(fs, segno, j)))
                CHECK(le32(sb->entries[j].nid) >= F2FS_RESERVED_NODE_NUM &&
                      le32(sb->entries[j].nid) < fs->max_nid);
    }

    /* the same checkpoint without node summaries in the pack: rebuilt from the footers */
    uint8_t *cp2 = blkbuf(1);
    memcpy(cp2, fs->cp_block, F2FS_BLKSIZE);
    struct f2fs_checkpoint *c2 = (void *)cp2;
    uint32_t flags = le32(c2->ckpt_flags);
    c2->ckpt_flags = htole32(flags & ~(CP_UMOUNT_FLAG | CP_FASTBOOT_FLAG));
    if (!(flags & CP_COMPACT_SUM_FLAG)) /* normal summaries are found from the pack's end */
        c2->cp_pack_total_block_count = htole32(le32(c2->cp_pack_total_block_count) - 3);
    const struct f2fs_checkpoint *saved = fs->cp;
    struct seg_manager *saved_seg = fs->seg;
    fs->cp = c2;
    struct seg_manager *sm2 = NULL;
    CHECK_EQ(seg_load(fs, &sm2), 0);
    if (sm2) {
        uint8_t *sums2 = blkbuf(LOG_COUNT);
        seg_write_summaries(sm2, sums2, true);
        CHECK(memcmp(sums, sums2, 3 * F2FS_BLKSIZE) == 0);
        for (int t = LOG_HOT_NODE; t <= LOG_COLD_NODE; t++) {
            const struct f2fs_summary_block *a = (const void *)(sums + (size_t)t * F2FS_BLKSIZE);
            const struct f2fs_summary_block *b = (const void *)(sums2 + (size_t)t * F2FS_BLKSIZE);
            for (int j = 0; j < (int)BLKS; j++)
                CHECK_EQ(le32(a->entries[j].nid), le32(b->entries[j].nid));
        }
        fs->seg = sm2;
        check_node_summaries(fs, sums2);
        seg_destroy(sm2);
        free(sums2);
    }
    fs->seg = saved_seg;
    fs->cp = saved;
    free(cp2);
    free(sums);
    free_fs(fs);
}

static void load_matches_checkpoint(void)
{
    char img[300];
    path_in(img, sizeof(img), "mkfs64.img");
    make_image(img, 64);
    check_fresh_load(img);
    path_in(img, sizeof(img), "mkfs512.img");
    make_image(img, 512);
    check_fresh_load(img);
    path_in(img, sizeof(img), "loaded.img");
    make_loaded_image(img, 512);
    check_fresh_load(img);
}

static void load_rejects_damage(void)
{
    char img[300];
    path_in(img, sizeof(img), "damage.img");
    make_image(img, 64);
    struct f2fuse *fs = open_fs(img);
    if (!fs)
        return;
    struct seg_manager *sm = NULL;

    /* large NAT bitmap: the SIT bitmap is elsewhere; refused */
    uint8_t *cpb = blkbuf(1);
    memcpy(cpb, fs->cp_block, F2FS_BLKSIZE);
    struct f2fs_checkpoint *c = (void *)cpb;
    c->ckpt_flags = htole32(le32(c->ckpt_flags) | CP_LARGE_NAT_BITMAP_FLAG);
    const struct f2fs_checkpoint *saved = fs->cp;
    fs->cp = c;
    CHECK_EQ(seg_load(fs, &sm), -EOPNOTSUPP);
    fs->cp = saved;

    /* SIT journal with 7 entries (mkfs: compact summaries, journal at byte 507) */
    uint32_t sumblk = fs->cp_start + le32(fs->cp->cp_pack_start_sum);
    uint8_t *b = blkbuf(1), *orig = blkbuf(1);
    CHECK_EQ(read_blk(fs, sumblk, orig), 0);
    memcpy(b, orig, F2FS_BLKSIZE);
    uint16_t n = htole16(7);
    memcpy(b + SUM_JOURNAL_SIZE, &n, 2);
    CHECK_EQ(blk_write(fs->dev, (uint64_t)sumblk * F2FS_BLKSIZE, b, F2FS_BLKSIZE), 0);
    uint64_t hits = fs->corrupt_hits;
    CHECK_EQ(seg_load(fs, &sm), -EIO);
    CHECK(fs->corrupt_hits > hits);

    /* journal entry whose count disagrees with its map */
    memcpy(b, orig, F2FS_BLKSIZE);
    struct f2fs_journal *j = (void *)(b + SUM_JOURNAL_SIZE);
    CHECK(le16(j->n_entries) >= 1);
    j->sit.entries[0].se.vblocks = htole16(le16(j->sit.entries[0].se.vblocks) + 1);
    CHECK_EQ(blk_write(fs->dev, (uint64_t)sumblk * F2FS_BLKSIZE, b, F2FS_BLKSIZE), 0);
    CHECK_EQ(seg_load(fs, &sm), -EIO);
    CHECK_EQ(blk_write(fs->dev, (uint64_t)sumblk * F2FS_BLKSIZE, orig, F2FS_BLKSIZE), 0);
    CHECK_EQ(seg_load(fs, &sm), 0);
    seg_destroy(sm);
    sm = NULL;

    /* a SIT block entry with a bad type (current copy: bit 0 of the bitmap), in a segment
     * no log uses (the SIT journal holds the logs' segments) */
    uint32_t victim = 0;
    for (bool used = true; used; victim += used) {
        used = false;
        for (int i = 0; i < 3; i++)
            used |= le32(fs->cp->cur_node_segno[i]) == victim ||
                    le32(fs->cp->cur_data_segno[i]) == victim;
    }
    CHECK(victim < SIT_ENTRY_PER_BLOCK && victim < le32(fs->sb.segment_count_main));
    uint32_t sit = le32(fs->sb.sit_blkaddr);
    if (fs->cp->sit_nat_version_bitmap[0] & 0x80)
        sit += le32(fs->sb.segment_count_sit) / 2 * BLKS;
    CHECK_EQ(read_blk(fs, sit, orig), 0);
    memcpy(b, orig, F2FS_BLKSIZE);
    struct f2fs_sit_entry *se = (void *)b;
    se[victim].vblocks = htole16(7 << SIT_VBLOCKS_SHIFT);
    CHECK_EQ(blk_write(fs->dev, (uint64_t)sit * F2FS_BLKSIZE, b, F2FS_BLKSIZE), 0);
    CHECK_EQ(seg_load(fs, &sm), -EIO);
    /* a valid block of segment victim that the checkpoint does not count */
    se[victim].vblocks = htole16(1);
    se[victim].valid_map[0] = 0x80;
    CHECK_EQ(blk_write(fs->dev, (uint64_t)sit * F2FS_BLKSIZE, b, F2FS_BLKSIZE), 0);
    CHECK_EQ(seg_load(fs, &sm), -EIO);
    CHECK_EQ(blk_write(fs->dev, (uint64_t)sit * F2FS_BLKSIZE, orig, F2FS_BLKSIZE), 0);
    CHECK_EQ(seg_load(fs, &sm), 0);
    seg_destroy(sm);
    free(b);
    free(orig);
    free(cpb);
    free_fs(fs);
}

/* ---- allocation ----------------------------------------------------------------------- */

static void alloc_appends_in_each_log(void)
{
    char img[300];
    path_in(img, sizeof(img), "alloc.img");
    make_image(img, 512);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    uint64_t valid0 = seg_valid_blocks(fs->seg);
    uint32_t free0 = seg_free_segments(fs->seg);
    for (int t = 0; t < LOG_COUNT; t++) {
        uint32_t segno, off;
        log_pos(fs, (enum log_type)t, &segno, &off);
        for (uint32_t i = 0; i < 10; i++) {
            struct f2fs_summary s = mksum(1000 + (uint32_t)t, 0, (uint16_t)i);
            uint32_t addr = 0;
            CHECK_EQ(seg_alloc_block(fs->seg, (enum log_type)t, &s, NULL_ADDR, &addr), 0);
            CHECK_EQ(addr, main_addr(fs, segno, off + i));
            CHECK(seg_block_valid(fs->seg, addr));
        }
        uint32_t s2, o2;
        log_pos(fs, (enum log_type)t, &s2, &o2);
        CHECK_EQ(s2, segno);
        CHECK_EQ(o2, off + 10);
    }
    CHECK_EQ(seg_valid_blocks(fs->seg), valid0 + 60);
    CHECK_EQ(seg_free_segments(fs->seg), free0);
    CHECK(!seg_block_valid(fs->seg, fs->main_blkaddr - 1));
    CHECK(!seg_block_valid(fs->seg, fs->main_blkend));
    struct f2fs_summary s = mksum(5, 0, 0);
    uint32_t addr;
    CHECK_EQ(seg_alloc_block(fs->seg, LOG_COUNT, &s, NULL_ADDR, &addr), -EINVAL);
    free_fs(fs);
}

/* seg_alloc_blocks: a batch in one go (consecutive, the summaries each given), all or none:
 * on a file system that runs out, the batch that does not fit leaves nothing behind. */
static void alloc_batch_all_or_none(void)
{
    char img[300];
    path_in(img, sizeof(img), "batch.img");
    make_image(img, 64);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    struct seg_manager *sm = fs->seg;
    struct f2fs_summary sums[8];
    for (uint16_t i = 0; i < 8; i++)
        sums[i] = mksum(321, 4, (uint16_t)(16 + i));
    uint32_t segno, off, addrs[8];
    log_pos(fs, LOG_COLD_DATA, &segno, &off);
    uint64_t valid0 = seg_valid_blocks(sm);
    CHECK_EQ(seg_alloc_blocks(sm, LOG_COLD_DATA, sums, 8, addrs), 0);
    for (uint32_t i = 0; i < 8; i++) {
        CHECK_EQ(addrs[i], main_addr(fs, segno, off + i));
        CHECK(seg_block_valid(sm, addrs[i]));
    }
    CHECK_EQ(seg_valid_blocks(sm), valid0 + 8);
    CHECK_EQ(seg_alloc_blocks(sm, LOG_COUNT, sums, 8, addrs), -EINVAL);
    /* fill the log until a batch of 8 no longer fits: that batch takes nothing */
    int err;
    uint64_t batches = 0;
    while (!(err = seg_alloc_blocks(sm, LOG_COLD_DATA, sums, 8, addrs)))
        batches++;
    CHECK_EQ(err, -ENOSPC);
    CHECK(batches > 0);
    uint64_t valid1 = seg_valid_blocks(sm);
    CHECK_EQ(seg_alloc_blocks(sm, LOG_COLD_DATA, sums, 8, addrs), -ENOSPC);
    CHECK_EQ(seg_valid_blocks(sm), valid1);
    /* what is left goes one by one (fewer than 8) */
    uint32_t addr, single = 0;
    while (!seg_alloc_block(sm, LOG_COLD_DATA, &sums[0], NULL_ADDR, &addr))
        single++;
    CHECK(single < 8);
    free_fs(fs);
}

static void full_segment_writes_ssa_in(const char *name)
{
    char img[300];
    path_in(img, sizeof(img), name);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    static const enum log_type logs[] = {LOG_HOT_NODE, LOG_WARM_DATA, LOG_COLD_NODE};
    for (size_t k = 0; k < 3; k++) {
        enum log_type t = logs[k];
        uint8_t *before = blkbuf(LOG_COUNT);
        seg_write_summaries(fs->seg, before, true);
        uint32_t segno, off;
        log_pos(fs, t, &segno, &off);
        uint32_t free0 = seg_free_segments(fs->seg);
        if (fs->cp->alloc_type[t] == 1) {
            /* SSR log (sload writes these): f2fuse leaves the segment on the first
             * allocation, writing the pack's summary of all 512 blocks to the SSA */
            struct f2fs_summary first = mksum(8, 0, 0);
            uint32_t a0, in_use = 0;
            for (uint32_t j = 0; j < BLKS; j++)
                in_use += seg_block_valid(fs->seg, main_addr(fs, segno, j));
            CHECK_EQ(seg_alloc_block(fs->seg, t, &first, NULL_ADDR, &a0), 0);
            CHECK((a0 - fs->main_blkaddr) % BLKS == 0);
            CHECK((a0 - fs->main_blkaddr) / BLKS != segno);
            /* one segment taken; the one left is free if nothing in it is valid */
            CHECK_EQ(seg_free_segments(fs->seg), free0 - 1 + (in_use == 0));
            struct f2fs_summary_block *ssa = blkbuf(1);
            CHECK_EQ(read_blk(fs, le32(fs->sb.ssa_blkaddr) + segno, ssa), 0);
            const struct f2fs_summary_block *old = (const void *)(before +
                                                                  (size_t)t * F2FS_BLKSIZE);
            CHECK(memcmp(ssa->entries, old->entries, sizeof(old->entries)) == 0);
            CHECK_EQ(ssa->footer.entry_type, log_is_node(t) ? SUM_TYPE_NODE : SUM_TYPE_DATA);
            free(ssa);
            seg_write_summaries(fs->seg, before, true);
            log_pos(fs, t, &segno, &off);
            CHECK_EQ(off, 1);
            struct f2fs_checkpoint *cp = cp_now(fs);
            CHECK_EQ(cp->alloc_type[t], 0);
            free(cp);
            free0 = seg_free_segments(fs->seg);
        }
        struct f2fs_summary *mine = calloc(BLKS, sizeof(*mine));
        for (uint32_t i = off; i < BLKS; i++) {
            mine[i] = mksum(50000 + i, (uint8_t)i, (uint16_t)(i * 3));
            uint32_t addr;
            CHECK_EQ(seg_alloc_block(fs->seg, t, &mine[i], NULL_ADDR, &addr), 0);
            CHECK_EQ(addr, main_addr(fs, segno, i));
        }
        /* the log moved on at once, to a segment that was free */
        uint32_t s2, o2;
        log_pos(fs, t, &s2, &o2);
        CHECK(s2 != segno);
        CHECK_EQ(o2, 0);
        CHECK_EQ(seg_free_segments(fs->seg), free0 - 1);
        struct f2fs_summary next = mksum(7, 0, 0);
        uint32_t addr;
        CHECK_EQ(seg_alloc_block(fs->seg, t, &next, NULL_ADDR, &addr), 0);
        CHECK_EQ(addr, main_addr(fs, s2, 0));

        /* the SSA block: the old entries below off, ours above, the footer type */
        struct f2fs_summary_block *ssa = blkbuf(1);
        CHECK_EQ(read_blk(fs, le32(fs->sb.ssa_blkaddr) + segno, ssa), 0);
        const struct f2fs_summary_block *old = (const void *)(before + (size_t)t * F2FS_BLKSIZE);
        CHECK(memcmp(ssa->entries, old->entries, off * sizeof(struct f2fs_summary)) == 0);
        CHECK(memcmp(&ssa->entries[off], &mine[off], (BLKS - off) * sizeof(*mine)) == 0);
        CHECK_EQ(ssa->footer.entry_type, log_is_node(t) ? SUM_TYPE_NODE : SUM_TYPE_DATA);
        CHECK_EQ(le16(ssa->journal.n_entries), 0);
        free(ssa);
        free(mine);
        free(before);
    }
    free_fs(fs);
}

static void full_segment_writes_ssa(void)
{
    full_segment_writes_ssa_in("mkfs512.img"); /* LFS logs */
    full_segment_writes_ssa_in("loaded.img");  /* SSR logs */
}

/* Fills the rest of log t's segment; the log moves on.  Returns the segment filled. */
/* The fsync fast path's room rule: with free segments F, data blocks D and node blocks N
 * allocated since the last committed checkpoint, there is room iff
 * F >= 2 * LOG_COUNT + reserve + ceil((D + 4 * (N + more)) / 512); a committed checkpoint
 * starts the count again. */
static void room_for_roll_forward(void)
{
    char img[300];
    path_in(img, sizeof(img), "room.img");
    make_image(img, 256);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    const uint32_t reserve = 3, fixed = 2 * LOG_COUNT + reserve;
    seg_set_data_reserve(fs->seg, reserve);
    uint64_t data = 0, nodes = 0;
    bool lost = false;
    for (int round = 0; round < 200 && !lost; round++) {
        /* a random mix of data and node blocks, then the rule against the formula */
        uint32_t nd = (uint32_t)(rnd() % 700), nn = (uint32_t)(rnd() % 40);
        for (uint32_t i = 0; i < nd + nn; i++) {
            enum log_type t = i < nd ? LOG_WARM_DATA : LOG_WARM_NODE;
            struct f2fs_summary sum = mksum(3000 + i, 0, 0);
            uint32_t addr;
            CHECK_EQ(seg_alloc_block(fs->seg, t, &sum, NULL_ADDR, &addr), 0);
        }
        data += nd;
        nodes += nn;
        uint32_t more = (uint32_t)(rnd() % 200);
        uint64_t need = fixed + (data + 4 * (nodes + more) + BLKS - 1) / BLKS;
        uint32_t free_segs = seg_free_segments(fs->seg);
        CHECK_EQ(seg_room_for_roll_forward(fs->seg, more), free_segs >= need);
        lost = free_segs < need;
    }
    CHECK(lost); /* the image is small enough for the rule to say no */
    CHECK(!seg_room_for_roll_forward(fs->seg, 0) || seg_free_segments(fs->seg) >= fixed);
    /* A checkpoint commits what was allocated: room again while enough segments are free */
    CHECK_EQ(write_checkpoint(fs, false, 1), 0);
    uint32_t free_segs = seg_free_segments(fs->seg);
    CHECK_EQ(seg_room_for_roll_forward(fs->seg, 0), free_segs >= fixed);
    CHECK(free_segs >= fixed + 1);
    CHECK(seg_room_for_roll_forward(fs->seg, 0));
    free_fs(fs);
}

static uint32_t fill_segment(struct f2fuse *fs, enum log_type t)
{
    uint32_t segno, off;
    log_pos(fs, t, &segno, &off);
    for (uint32_t i = off; i < BLKS; i++) {
        struct f2fs_summary s = mksum(20000, 0, (uint16_t)i);
        uint32_t addr;
        CHECK_EQ(seg_alloc_block(fs->seg, t, &s, NULL_ADDR, &addr), 0);
    }
    return segno;
}

static void invalidate_segment(struct f2fuse *fs, uint32_t segno)
{
    for (uint32_t i = 0; i < BLKS; i++)
        seg_invalidate_block(fs->seg, main_addr(fs, segno, i));
}

static void invalidate_free_and_prefree(void)
{
    char img[300];
    path_in(img, sizeof(img), "inval.img");
    make_image(img, 512);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    struct seg_manager *sm = fs->seg;
    uint32_t free0 = seg_free_segments(sm);
    uint64_t valid0 = seg_valid_blocks(sm);

    /* a block of a current segment: just invalid, never handed out again in this segment */
    struct f2fs_summary s = mksum(9, 0, 0);
    uint32_t a1, a2;
    CHECK_EQ(seg_alloc_block(sm, LOG_WARM_DATA, &s, NULL_ADDR, &a1), 0);
    seg_invalidate_block(sm, a1);
    CHECK(!seg_block_valid(sm, a1));
    CHECK_EQ(seg_alloc_block(sm, LOG_WARM_DATA, &s, NULL_ADDR, &a2), 0);
    CHECK_EQ(a2, a1 + 1);
    CHECK_EQ(seg_free_segments(sm), free0);
    CHECK_EQ(seg_prefree_segments(sm), 0);
    CHECK_EQ(seg_valid_blocks(sm), valid0 + 1);

    /* the root's dentry block (valid at the checkpoint, in the hot data log) */
    uint32_t hs, ho;
    log_pos(fs, LOG_HOT_DATA, &hs, &ho);
    CHECK(seg_block_valid(sm, main_addr(fs, hs, 0)));
    seg_invalidate_block(sm, main_addr(fs, hs, 0));
    CHECK_EQ(seg_prefree_segments(sm), 0);
    CHECK_EQ(seg_valid_blocks(sm), valid0);

    /* no-ops and errors */
    seg_invalidate_block(sm, NULL_ADDR);
    seg_invalidate_block(sm, NEW_ADDR);
    uint64_t hits = fs->corrupt_hits;
    seg_invalidate_block(sm, main_addr(fs, hs, 0)); /* twice */
    seg_invalidate_block(sm, fs->main_blkaddr - 1);
    CHECK_EQ(fs->corrupt_hits, hits + 2);
    CHECK_EQ(seg_valid_blocks(sm), valid0);

    /* a segment written and emptied since the checkpoint is prefree until the next one,
     * too: it may hold the fsync chain that roll-forward recovery walks */
    uint32_t full = fill_segment(fs, LOG_COLD_DATA);
    CHECK_EQ(seg_free_segments(sm), free0 - 1);
    invalidate_segment(fs, full);
    CHECK_EQ(seg_free_segments(sm), free0 - 1);
    CHECK_EQ(seg_prefree_segments(sm), 1);

    /* one that was valid at the checkpoint is prefree until the next one commits */
    uint32_t kept = fill_segment(fs, LOG_COLD_DATA);
    CHECK_EQ(write_checkpoint(fs, true, le32(fs->cp->valid_node_count)), 0);
    uint32_t free1 = seg_free_segments(sm);
    invalidate_segment(fs, kept);
    CHECK_EQ(seg_prefree_segments(sm), 1);
    CHECK_EQ(seg_free_segments(sm), free1);
    struct f2fs_checkpoint *cp = cp_now(fs);
    CHECK_EQ(le32(cp->free_segment_count), free1 + 1); /* free once that CP commits */
    free(cp);
    /* ... and is not handed out meanwhile */
    uint32_t moves = 0;
    for (uint32_t i = 0; i < 40 * BLKS; i++) {
        uint32_t addr;
        int err = seg_alloc_block(sm, LOG_WARM_DATA, &s, NULL_ADDR, &addr);
        if (err) {
            CHECK_EQ(err, -ENOSPC);
            break;
        }
        CHECK((addr - fs->main_blkaddr) / BLKS != kept);
        moves += (addr - fs->main_blkaddr) % BLKS == 0;
    }
    CHECK(moves >= 30);
    CHECK_EQ(write_checkpoint(fs, false, le32(fs->cp->valid_node_count)), 0);
    CHECK_EQ(seg_prefree_segments(sm), 0);
    free_fs(fs);
}

struct stat_probe {
    const char *name;
    bool found;
    uint64_t value;
};

static void probe_emit(void *sink, const char *name, uint64_t v)
{
    struct stat_probe *p = sink;
    if (strcmp(name, p->name) == 0) {
        p->found = true;
        p->value = v;
    }
}

static void enospc_without_crash(void)
{
    char img[300];
    path_in(img, sizeof(img), "small.img");
    make_image(img, 64);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    struct seg_manager *sm = fs->seg;
    uint32_t free0 = seg_free_segments(sm), segno, off;
    log_pos(fs, LOG_WARM_DATA, &segno, &off);
    uint64_t n = 0;
    int err;
    struct f2fs_summary s = mksum(77, 0, 0);
    uint32_t addr, last = 0;
    while (!(err = seg_alloc_block(sm, LOG_WARM_DATA, &s, NULL_ADDR, &addr))) {
        CHECK(n == 0 || addr != last);
        last = addr;
        n++;
    }
    CHECK_EQ(err, -ENOSPC);
    CHECK_EQ(n, (BLKS - off) + (uint64_t)free0 * BLKS - 1);
    CHECK_EQ(seg_free_segments(sm), 0);
    CHECK_EQ(seg_alloc_block(sm, LOG_WARM_DATA, &s, NULL_ADDR, &addr), -ENOSPC); /* stays so */

    /* the other logs fill their segments up to the last block */
    for (int t = 0; t < LOG_COUNT; t++) {
        if (t == LOG_WARM_DATA)
            continue;
        uint32_t ts, to;
        log_pos(fs, (enum log_type)t, &ts, &to);
        uint32_t k = 0;
        while (!(err = seg_alloc_block(sm, (enum log_type)t, &s, NULL_ADDR, &addr)))
            k++;
        CHECK_EQ(err, -ENOSPC);
        CHECK_EQ(k, BLKS - 1 - to);
    }
    /* a checkpoint now still records a usable position for every log */
    struct f2fs_checkpoint *cp = cp_now(fs);
    for (int i = 0; i < 3; i++) {
        CHECK(le16(cp->cur_node_blkoff[i]) < BLKS);
        CHECK(le16(cp->cur_data_blkoff[i]) < BLKS);
    }
    CHECK_EQ(le32(cp->free_segment_count), 0);
    free(cp);

    /* freeing a whole segment (written since the checkpoint) lets the log go on once a
     * checkpoint has committed the freeing */
    invalidate_segment(fs, segno);
    uint32_t victim = segno;
    CHECK_EQ(seg_free_segments(sm), 0);
    CHECK_EQ(seg_prefree_segments(sm), 1);
    CHECK_EQ(write_checkpoint(fs, true, le32(fs->cp->valid_node_count)), 0);
    CHECK_EQ(seg_free_segments(sm), 1);
    /* with a reserve of one segment the data logs stop, the node logs may take it */
    seg_set_data_reserve(sm, 1);
    CHECK_EQ(seg_alloc_block(sm, LOG_WARM_DATA, &s, NULL_ADDR, &addr), -ENOSPC);
    CHECK_EQ(seg_alloc_block(sm, LOG_COLD_NODE, &s, NULL_ADDR, &addr), 0);
    CHECK_EQ(seg_free_segments(sm), 0);
    uint32_t ns, no;
    log_pos(fs, LOG_COLD_NODE, &ns, &no);
    CHECK_EQ(ns, victim);
    CHECK_EQ(no, 0);
    seg_set_data_reserve(sm, 0);

    struct stat_probe probe = {.name = "seg.enospc"};
    seg_emit_stats(sm, probe_emit, &probe);
    CHECK(probe.found);
    CHECK(probe.value >= 6);
    free_fs(fs);
}

struct thread_arg {
    struct seg_manager *sm;
    uint64_t seed;
    uint32_t *addrs;
    uint32_t n;
    uint32_t invalidated;
    int err;
};

static void *alloc_thread(void *p)
{
    struct thread_arg *a = p;
    uint64_t x = a->seed;
    for (uint32_t i = 0; i < a->n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        struct f2fs_summary s = mksum((uint32_t)(x >> 40), 0, (uint16_t)i);
        int err = seg_alloc_block(a->sm, (enum log_type)(x % LOG_COUNT), &s, NULL_ADDR,
                                  &a->addrs[i]);
        if (err) {
            a->err = err;
            a->n = i;
            break;
        }
        if ((x >> 20) % 10 == 0 && i > 0) {
            /* give back one of ours; marked so the checker knows */
            uint32_t k = (uint32_t)((x >> 24) % i);
            if (a->addrs[k] != 0) {
                seg_invalidate_block(a->sm, a->addrs[k]);
                a->addrs[k] = 0;
                a->invalidated++;
            }
        }
    }
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void threads_allocate_concurrently(void)
{
    char img[300];
    path_in(img, sizeof(img), "threads.img");
    make_image(img, 512);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    uint64_t valid0 = seg_valid_blocks(fs->seg);
    enum { T = 4, N = 6000 };
    struct thread_arg args[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        args[i] = (struct thread_arg){.sm = fs->seg,
                                      .seed = g_seed * 7919 + (uint64_t)i + 1,
                                      .addrs = calloc(N, sizeof(uint32_t)),
                                      .n = N};
        pthread_create(&th[i], NULL, alloc_thread, &args[i]);
    }
    uint32_t *all = calloc(T * N, sizeof(uint32_t));
    uint32_t total = 0, given_back = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(args[i].err, 0);
        for (uint32_t k = 0; k < args[i].n; k++)
            if (args[i].addrs[k])
                all[total++] = args[i].addrs[k];
        given_back += args[i].invalidated;
        free(args[i].addrs);
    }
    CHECK_EQ(seg_valid_blocks(fs->seg), valid0 + total);
    CHECK_EQ(total + given_back, T * N);
    qsort(all, total, sizeof(uint32_t), cmp_u32);
    for (uint32_t k = 0; k < total; k++) {
        CHECK(k == 0 || all[k] != all[k - 1]);
        CHECK(seg_block_valid(fs->seg, all[k]));
    }
    free(all);
    free_fs(fs);
}

/* ---- checkpoint round trip ------------------------------------------------------------- */

/* Compares everything the segment managers of a and b expose. */
static void compare_managers(struct f2fuse *a, struct f2fuse *b, bool node_sums_exact)
{
    CHECK_EQ(seg_valid_blocks(a->seg), seg_valid_blocks(b->seg));
    CHECK_EQ(seg_free_segments(a->seg), seg_free_segments(b->seg));
    CHECK_EQ(seg_prefree_segments(a->seg), seg_prefree_segments(b->seg));
    uint32_t diffs = 0;
    for (uint32_t addr = a->main_blkaddr; addr < a->main_blkend; addr++)
        diffs += seg_block_valid(a->seg, addr) != seg_block_valid(b->seg, addr);
    CHECK_EQ(diffs, 0);
    struct f2fs_checkpoint *ca = cp_now(a), *cb = cp_now(b);
    CHECK(memcmp(ca->cur_node_segno, cb->cur_node_segno, sizeof(ca->cur_node_segno)) == 0);
    CHECK(memcmp(ca->cur_node_blkoff, cb->cur_node_blkoff, sizeof(ca->cur_node_blkoff)) == 0);
    CHECK(memcmp(ca->cur_data_segno, cb->cur_data_segno, sizeof(ca->cur_data_segno)) == 0);
    CHECK(memcmp(ca->cur_data_blkoff, cb->cur_data_blkoff, sizeof(ca->cur_data_blkoff)) == 0);
    CHECK_EQ(le32(ca->free_segment_count), le32(cb->free_segment_count));
    CHECK(memcmp(ca->sit_nat_version_bitmap, cb->sit_nat_version_bitmap,
                 le32(ca->sit_ver_bitmap_bytesize)) == 0);
    free(ca);
    free(cb);
    uint8_t *sa = blkbuf(LOG_COUNT), *sb = blkbuf(LOG_COUNT);
    seg_write_summaries(a->seg, sa, true);
    seg_write_summaries(b->seg, sb, true);
    CHECK(memcmp(sa, sb, 3 * F2FS_BLKSIZE) == 0);
    if (node_sums_exact) {
        CHECK(memcmp(sa + 3 * F2FS_BLKSIZE, sb + 3 * F2FS_BLKSIZE, 3 * F2FS_BLKSIZE) == 0);
    } else {
        for (int t = LOG_HOT_NODE; t <= LOG_COLD_NODE; t++) {
            const struct f2fs_summary_block *x = (const void *)(sa + (size_t)t * F2FS_BLKSIZE);
            const struct f2fs_summary_block *y = (const void *)(sb + (size_t)t * F2FS_BLKSIZE);
            for (uint32_t j = 0; j < BLKS; j++)
                CHECK_EQ(le32(x->entries[j].nid), le32(y->entries[j].nid));
        }
    }
    free(sa);
    free(sb);
}

/* All SIT blocks in use, as the loaded checkpoint selects them. */
static uint8_t *read_current_sit(struct f2fuse *fs, uint32_t *nblocks)
{
    uint32_t main_segs = le32(fs->sb.segment_count_main);
    uint32_t n = (main_segs + SIT_ENTRY_PER_BLOCK - 1) / SIT_ENTRY_PER_BLOCK;
    uint32_t copy = le32(fs->sb.segment_count_sit) / 2 * BLKS;
    uint8_t *buf = blkbuf(n);
    const uint8_t *bm = fs->cp->sit_nat_version_bitmap;
    for (uint32_t b = 0; b < n; b++) {
        uint32_t addr = le32(fs->sb.sit_blkaddr) + b +
                        ((bm[b >> 3] & (0x80 >> (b & 7))) ? copy : 0);
        CHECK_EQ(read_blk(fs, addr, buf + (size_t)b * F2FS_BLKSIZE), 0);
    }
    *nblocks = n;
    return buf;
}

static void reread_at_old_places(struct f2fuse *fs, const uint8_t *old_cp, const uint8_t *snap,
                                 uint32_t n)
{
    uint32_t copy = le32(fs->sb.segment_count_sit) / 2 * BLKS;
    const uint8_t *bm = ((const struct f2fs_checkpoint *)old_cp)->sit_nat_version_bitmap;
    uint8_t *buf = blkbuf(1);
    uint32_t changed = 0;
    for (uint32_t b = 0; b < n; b++) {
        uint32_t addr = le32(fs->sb.sit_blkaddr) + b +
                        ((bm[b >> 3] & (0x80 >> (b & 7))) ? copy : 0);
        CHECK_EQ(read_blk(fs, addr, buf), 0);
        changed += memcmp(buf, snap + (size_t)b * F2FS_BLKSIZE, F2FS_BLKSIZE) != 0;
    }
    CHECK_EQ(changed, 0); /* the old checkpoint's SIT is intact */
    free(buf);
}

/* Random work on a loaded image: new blocks in every log (node ones get a footer), some
 * freed again, some of the image's own data blocks freed.  Tracks the node count. */
static void random_work(struct f2fuse *fs, uint32_t *valid_nodes, uint32_t rounds)
{
    struct seg_manager *sm = fs->seg;
    uint32_t *mine = calloc(rounds, sizeof(uint32_t));
    bool *is_node = calloc(rounds, sizeof(bool));
    uint32_t n = 0;
    for (uint32_t i = 0; i < rounds; i++) {
        uint64_t r = rnd();
        enum log_type t = (enum log_type)(r % LOG_COUNT);
        uint32_t nid = 100000 + (uint32_t)(rnd() % 100000);
        struct f2fs_summary s = log_is_node(t) ? mksum(nid, 0, 0)
                                               : mksum(nid, (uint8_t)r, (uint16_t)(r >> 8));
        uint32_t addr;
        int err = seg_alloc_block(sm, t, &s, NULL_ADDR, &addr);
        CHECK_EQ(err, 0);
        if (err)
            break;
        if (log_is_node(t)) {
            write_fake_node(fs, addr, nid);
            (*valid_nodes)++;
        }
        mine[n] = addr;
        is_node[n++] = log_is_node(t);
        if (rnd() % 4 == 0) {
            uint32_t k = (uint32_t)(rnd() % n);
            if (mine[k]) {
                seg_invalidate_block(sm, mine[k]);
                if (is_node[k])
                    (*valid_nodes)--;
                mine[k] = 0;
            }
        }
    }
    /* free some of the image's data blocks (not in the logs' segments) */
    struct f2fs_checkpoint *cp = cp_now(fs);
    uint32_t cur[LOG_COUNT];
    for (int i = 0; i < 3; i++) {
        cur[i] = le32(cp->cur_data_segno[i]);
        cur[3 + i] = le32(cp->cur_node_segno[i]);
    }
    uint32_t sit_n;
    uint8_t *sit = read_current_sit(fs, &sit_n);
    uint32_t freed = 0;
    for (uint32_t seg = 0; seg < le32(fs->sb.segment_count_main) && freed < 300; seg++) {
        const struct f2fs_sit_entry
            *e = (const struct f2fs_sit_entry *)(sit + (size_t)(seg / SIT_ENTRY_PER_BLOCK) *
                                                           F2FS_BLKSIZE) +
                 seg % SIT_ENTRY_PER_BLOCK;
        unsigned type = le16(e->vblocks) >> SIT_VBLOCKS_SHIFT;
        bool current = false;
        for (int i = 0; i < LOG_COUNT; i++)
            current |= cur[i] == seg;
        if (current || type > 2 || (le16(e->vblocks) & SIT_VBLOCKS_MASK) == 0)
            continue;
        for (uint32_t j = 0; j < BLKS; j++) {
            uint32_t addr = main_addr(fs, seg, j);
            if (seg_block_valid(sm, addr) && rnd() % 3 == 0) {
                seg_invalidate_block(sm, addr);
                freed++;
            }
        }
    }
    free(sit);
    free(cp);
    free(mine);
    free(is_node);
}

static void checkpoint_round_trip(void)
{
    char img[300];
    path_in(img, sizeof(img), "roundtrip.img");
    make_loaded_image(img, 512);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    uint32_t valid_nodes = le32(fs->cp->valid_node_count);
    for (int round = 0; round < 3; round++) {
        bool with_node = round != 1;
        random_work(fs, &valid_nodes, 3000 + (uint32_t)(rnd() % 2000));
        uint32_t n;
        uint8_t *snap = read_current_sit(fs, &n);
        uint8_t *old_cp = blkbuf(1);
        memcpy(old_cp, fs->cp_block, F2FS_BLKSIZE);
        uint32_t prefree = seg_prefree_segments(fs->seg);
        uint32_t free_before = seg_free_segments(fs->seg);
        CHECK_EQ(write_checkpoint(fs, with_node, valid_nodes), 0);
        CHECK_EQ(seg_prefree_segments(fs->seg), 0);
        CHECK_EQ(seg_free_segments(fs->seg), free_before + prefree);
        reread_at_old_places(fs, old_cp, snap, n);
        free(snap);
        free(old_cp);

        /* a fresh mount of the image sees exactly the state in memory */
        struct f2fuse *fs2 = open_loaded(img);
        if (!fs2)
            break;
        CHECK_EQ(fs2->cp_ver, fs->cp_ver);
        compare_managers(fs, fs2, with_node);
        CHECK_EQ(le32(fs2->cp->free_segment_count), seg_free_segments(fs2->seg));
        free_fs(fs2);
    }
    free_fs(fs);
}

/* Blocks allocated and all freed again, then a checkpoint: to fsck.f2fs the image is the
 * same file system with the logs elsewhere, and must be clean. */
static void checkpoint_passes_fsck(void)
{
    char img[300];
    path_in(img, sizeof(img), "fsck.img");
    make_loaded_image(img, 512);
    CHECK(fsck_clean(img));
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    uint32_t nodes = le32(fs->cp->valid_node_count);
    uint64_t valid0 = seg_valid_blocks(fs->seg);
    for (int round = 0; round < 2; round++) {
        uint32_t count = 2000 + (uint32_t)(rnd() % 3000);
        uint32_t *addrs = calloc(count, sizeof(uint32_t));
        for (uint32_t i = 0; i < count; i++) {
            enum log_type t = (enum log_type)(rnd() % LOG_COUNT);
            struct f2fs_summary s = mksum(3, 0, 0);
            CHECK_EQ(seg_alloc_block(fs->seg, t, &s, NULL_ADDR, &addrs[i]), 0);
        }
        /* free them in random order, half before a first checkpoint */
        for (uint32_t i = count - 1; i > 0; i--) {
            uint32_t k = (uint32_t)(rnd() % (i + 1)), tmp = addrs[i];
            addrs[i] = addrs[k];
            addrs[k] = tmp;
        }
        for (uint32_t i = 0; i < count; i++)
            seg_invalidate_block(fs->seg, addrs[i]);
        CHECK_EQ(seg_valid_blocks(fs->seg), valid0);
        CHECK_EQ(write_checkpoint(fs, true, nodes), 0);
        free(addrs);
        CHECK(fsck_clean(img));
    }
    free_fs(fs);
}

/* Writeback turning reservations into blocks, and overwrites moving blocks, never change
 * the space in use, and a reader running alongside never sees a block counted twice (it
 * did, when the reservation was given back after the allocation: a false ENOSPC). */
struct replace_arg {
    struct seg_manager *sm;
    atomic_bool stop;
    uint64_t expect, seen_other;
};

static void *used_reader(void *p)
{
    struct replace_arg *a = p;
    while (!atomic_load(&a->stop))
        if (seg_used_blocks(a->sm) != a->expect)
            a->seen_other++;
    return NULL;
}

static void replace_keeps_used_steady(void)
{
    char img[300];
    path_in(img, sizeof(img), "replace.img");
    make_image(img, 512);
    struct f2fuse *fs = open_loaded(img);
    if (!fs)
        return;
    struct seg_manager *sm = fs->seg;
    enum { N = 3000 };
    uint64_t used0 = seg_used_blocks(sm);
    seg_reserve(sm, N);
    struct replace_arg a = {.sm = sm, .expect = used0 + N};
    CHECK_EQ(seg_used_blocks(sm), a.expect);
    pthread_t reader;
    pthread_create(&reader, NULL, used_reader, &a);
    uint32_t *addrs = calloc(N, sizeof(uint32_t));
    int err = 0;
    for (uint32_t i = 0; i < N && !err; i++) { /* every reservation written */
        struct f2fs_summary s = mksum(100 + i / 900, 0, (uint16_t)(i % 900));
        err = seg_alloc_block(sm, LOG_WARM_DATA, &s, NEW_ADDR, &addrs[i]);
    }
    for (uint32_t i = 0; i < N && !err; i += 3) { /* some overwritten in place of the old */
        struct f2fs_summary s = mksum(100 + i / 900, 0, (uint16_t)(i % 900));
        uint32_t old = addrs[i];
        err = seg_alloc_block(sm, LOG_COLD_DATA, &s, old, &addrs[i]);
        if (!err)
            CHECK(!seg_block_valid(sm, old));
    }
    atomic_store(&a.stop, true);
    pthread_join(reader, NULL);
    CHECK_EQ(err, 0);
    CHECK_EQ(a.seen_other, 0);
    CHECK_EQ(seg_used_blocks(sm), used0 + N);
    CHECK_EQ(seg_valid_blocks(sm), seg_used_blocks(sm)); /* no reservation left */
    for (uint32_t i = 0; i < N; i++)
        CHECK(seg_block_valid(sm, addrs[i]));
    free(addrs);
    free_fs(fs);
}

int main(void)
{
    const char *seed = getenv("F2FUSE_SEED");
    g_seed = seed ? strtoul(seed, NULL, 0) : (unsigned long)time(NULL);
    printf("F2FUSE_SEED=%lu\n", g_seed);
    rng_state = g_seed * 2654435761u + 1;

    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/f2fuse-seg-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }

    RUN(load_matches_checkpoint);
    RUN(load_rejects_damage);
    RUN(alloc_appends_in_each_log);
    RUN(alloc_batch_all_or_none);
    RUN(full_segment_writes_ssa);
    RUN(invalidate_free_and_prefree);
    RUN(enospc_without_crash);
    RUN(threads_allocate_concurrently);
    RUN(replace_keeps_used_steady);
    RUN(checkpoint_round_trip);
    RUN(checkpoint_passes_fsck);
    RUN(room_for_roll_forward);

    if (!getenv("F2FUSE_KEEP"))
        sh("rm -rf %s", g_dir);
    else
        printf("images kept in %s\n", g_dir);
    return CHECK_DONE();
}
