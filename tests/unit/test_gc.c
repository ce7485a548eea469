/* Victim selection and slack space reuse in the segment manager (segment.c's GC support), on
 * an image made by the real mkfs.f2fs and sload.f2fs 1.15: greedy picks the fewest valid
 * blocks, cost-benefit prefers an old half-full segment to a young emptier one, busy and
 * uncleanable segments are skipped until they change, and at the SSR threshold a data log
 * fills the free slots of an unchanged data segment (never a slot valid now or at the last
 * checkpoint) and the checkpoint records it as SSR.  The whole-system behaviour (moving
 * blocks, fsck) is tests/integration/test_gc. */
#include <errno.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api/api.h"

#define BLKS F2FS_BLOCKS_PER_SEG

static char g_dir[256];

/* A 128 MiB image holding four 3 MiB files (whole data segments). */
static void make_image(const char *img)
{
    CHECK_EQ(sh("rm -rf %s/src && mkdir -p %s/src && for i in 1 2 3 4; do "
                "head -c 3145728 /dev/urandom > %s/src/f$i; done",
                g_dir, g_dir, g_dir),
             0);
    CHECK_EQ(sh("truncate -s 128M %s && mkfs.f2fs -f %s >/dev/null && "
                "sload.f2fs -f %s/src -t / %s >/dev/null",
                img, img, g_dir, img),
             0);
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

static struct f2fuse *open_seg(const char *img)
{
    struct f2fuse *fs = calloc(1, sizeof(*fs));
    f2fuse_options_init(&fs->opts);
    fs->opts.read_only = false;
    struct blk_options bo = {.backend = "psync", .queue_depth = 8, .read_only = false};
    int err = blk_open(img, &bo, &fs->dev);
    if (!err)
        err = pcache_create(fs->dev, 64u << 20, &fs->cache); /* a fixed size, as before auto */
    if (!err)
        err = super_load(fs);
    if (!err)
        err = checkpoint_load(fs);
    if (!err)
        err = seg_load(fs, &fs->seg);
    CHECK_EQ(err, 0);
    if (err) {
        free_fs(fs);
        return NULL;
    }
    return fs;
}

static unsigned valid_in(struct f2fuse *fs, uint32_t segno)
{
    unsigned n = 0;
    for (unsigned i = 0; i < BLKS; i++)
        n += seg_block_valid(fs->seg, seg_block_addr(fs->seg, segno, i));
    return n;
}

/* Full data segments (sload's files), at most max of them. */
static unsigned full_segments(struct f2fuse *fs, uint32_t *out, unsigned max)
{
    unsigned n = 0;
    for (uint32_t s = 0; s < seg_main_segments(fs->seg) && n < max; s++)
        if (valid_in(fs, s) == BLKS)
            out[n++] = s;
    return n;
}

/* Leaves keep valid blocks in segno (invalidating the others, every other one first). */
static void thin(struct f2fuse *fs, uint32_t segno, unsigned keep)
{
    unsigned drop = BLKS - keep;
    for (unsigned i = 0; i < BLKS && drop; i += 2, drop--)
        seg_invalidate_block(fs->seg, seg_block_addr(fs->seg, segno, i));
    for (unsigned i = 1; i < BLKS && drop; i += 2, drop--)
        seg_invalidate_block(fs->seg, seg_block_addr(fs->seg, segno, i));
}

/* Makes the current state the checkpointed one (what seg_checkpoint_done does after a
 * commit), without writing anything: segments no longer count as changed. */
static void pretend_checkpoint(struct f2fuse *fs)
{
    seg_checkpoint_done(fs->seg);
}

static void greedy_and_cost_benefit(void)
{
    char img[300];
    snprintf(img, sizeof(img), "%s/pick.img", g_dir);
    make_image(img);
    struct f2fuse *fs = open_seg(img);
    if (!fs)
        return;
    uint32_t segs[4];
    CHECK(full_segments(fs, segs, 4) >= 3);
    uint32_t old_seg = segs[0], other = segs[1];

    /* segments sload left partly valid are taken out of the game: picked (busy) for good */
    struct seg_gc_victim v;
    unsigned pre = 0, last_valid = 0;
    for (uint32_t s; (s = seg_gc_pick(fs->seg, GC_GREEDY, BLKS, &v)) != UINT32_MAX; pre++) {
        CHECK(v.valid >= last_valid); /* greedy: in order of valid blocks */
        CHECK(s != old_seg && s != other);
        last_valid = v.valid;
    }
    CHECK(pre < 20);

    /* old_seg half valid (sload's mtime); a young segment 40% valid, written a moment later */
    thin(fs, old_seg, BLKS / 2);
    thin(fs, other, BLKS - 1); /* almost full: the worst victim */
    sleep(2);                  /* SIT mtimes count seconds */
    struct f2fs_summary sum = {.nid = htole32(3)};
    uint32_t first = 0, addr;
    for (unsigned i = 0; i < BLKS; i++) {
        CHECK_EQ(seg_alloc_block(fs->seg, LOG_COLD_DATA, &sum, NULL_ADDR, &addr), 0);
        if (i == 0)
            first = addr;
    }
    uint32_t young = (first - fs->main_blkaddr) / BLKS;
    CHECK(young != old_seg && young != other);
    for (unsigned i = 0; i < BLKS * 6 / 10; i++)
        seg_invalidate_block(fs->seg, first + i);
    CHECK_EQ(valid_in(fs, young), BLKS - BLKS * 6 / 10);

    /* greedy: fewest valid blocks */
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS, &v), young);
    CHECK_EQ(v.valid, BLKS - BLKS * 6 / 10);
    /* busy now: the next pick is the next best */
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS, &v), old_seg);
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS, &v), other);
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS, NULL), UINT32_MAX);
    CHECK(!seg_gc_done(fs->seg, young, false));
    CHECK(!seg_gc_done(fs->seg, old_seg, false));
    CHECK(!seg_gc_done(fs->seg, other, true)); /* not emptied: skipped from now on */

    /* cost-benefit: the old half-full segment beats the young 40% one */
    CHECK_EQ(seg_gc_pick(fs->seg, GC_COST_BENEFIT, BLKS, &v), old_seg);
    seg_gc_done(fs->seg, old_seg, false);
    /* max_valid bounds the candidates */
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS / 4, NULL), UINT32_MAX);
    /* the skipped one comes back once one of its blocks changes */
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS, &v), young);
    seg_gc_done(fs->seg, young, false);
    for (unsigned i = 0; i < BLKS; i++) {
        uint32_t a = seg_block_addr(fs->seg, other, i);
        if (seg_block_valid(fs->seg, a)) {
            for (unsigned k = 0; k < BLKS - 3; k++) /* down to 3 valid: the best victim */
                if (seg_block_valid(fs->seg, seg_block_addr(fs->seg, other, (i + k) % BLKS)))
                    seg_invalidate_block(fs->seg, seg_block_addr(fs->seg, other, (i + k) % BLKS));
            break;
        }
    }
    CHECK_EQ(seg_gc_pick(fs->seg, GC_GREEDY, BLKS, &v), other);
    seg_gc_done(fs->seg, other, false);
    free_fs(fs);
}

static void ssr_fills_free_slots(void)
{
    char img[300];
    snprintf(img, sizeof(img), "%s/ssr.img", g_dir);
    make_image(img);
    struct f2fuse *fs = open_seg(img);
    if (!fs)
        return;
    uint32_t segs[4];
    CHECK(full_segments(fs, segs, 4) >= 3);
    uint32_t target = segs[0];
    thin(fs, target, BLKS - 100); /* 100 free slots, every other one from the start */
    thin(fs, segs[1], BLKS - 20);
    pretend_checkpoint(fs); /* the holes are in the checkpointed maps now too */
    uint64_t holes = seg_ssr_blocks(fs->seg);
    CHECK(holes >= 120);

    /* SSR as soon as a data log needs a segment: threshold above the free count */
    seg_set_ssr_threshold(fs->seg, seg_main_segments(fs->seg));
    struct f2fs_summary sum = {.nid = htole32(3)};
    struct f2fs_checkpoint *cp = blk_alloc_buf(F2FS_BLKSIZE);
    memcpy(cp, fs->cp_block, F2FS_BLKSIZE);
    seg_fill_checkpoint(fs->seg, cp);
    uint32_t lfs_seg = le32(cp->cur_data_segno[LOG_WARM_DATA]);
    uint32_t addr;
    unsigned in_holes = 0, elsewhere = 0, total = 0;
    bool saw_ssr_cp = false;
    /* the warm data log fills its current (LFS) segment, then the holes of the two thinned
     * segments, never a free segment while holes are left */
    while (in_holes < 120 && total < 3 * BLKS) {
        CHECK_EQ(seg_alloc_block(fs->seg, LOG_WARM_DATA, &sum, NULL_ADDR, &addr), 0);
        total++;
        uint32_t s = (addr - fs->main_blkaddr) / BLKS;
        if (s == target || s == segs[1])
            in_holes++;
        else if (s != lfs_seg)
            elsewhere++;
        if (in_holes == 10 && !saw_ssr_cp) {
            memcpy(cp, fs->cp_block, F2FS_BLKSIZE);
            seg_fill_checkpoint(fs->seg, cp);
            uint32_t cur = le32(cp->cur_data_segno[LOG_WARM_DATA]);
            CHECK(cur == target || cur == segs[1]);
            CHECK_EQ(cp->alloc_type[LOG_WARM_DATA], 1); /* SSR */
            /* the recorded write position is a free slot (what fsck checks for SSR) */
            unsigned pos = le16(cp->cur_data_blkoff[LOG_WARM_DATA]);
            CHECK(!seg_block_valid(fs->seg, seg_block_addr(fs->seg, cur, pos)));
            saw_ssr_cp = true;
        }
    }
    CHECK(saw_ssr_cp);
    CHECK_EQ(in_holes, 120);
    CHECK_EQ(elsewhere, 0);
    CHECK_EQ(valid_in(fs, target), BLKS);
    CHECK_EQ(valid_in(fs, segs[1]), BLKS);
    free(cp);

    /* a segment changed since the last checkpoint offers no slots: a slot freed since may
     * still be referenced by that checkpoint */
    uint64_t holes_before = seg_ssr_blocks(fs->seg);
    thin(fs, segs[2], BLKS - 50);
    CHECK_EQ(seg_ssr_blocks(fs->seg), holes_before);
    pretend_checkpoint(fs);
    CHECK_EQ(seg_ssr_blocks(fs->seg), holes_before + 50);
    free_fs(fs);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/f2fuse-gc-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(greedy_and_cost_benefit);
    RUN(ssr_fills_free_slots);
    if (!getenv("F2FUSE_KEEP"))
        sh("rm -rf %s", g_dir);
    return CHECK_DONE();
}
