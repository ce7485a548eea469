/* Discard engine and FITRIM tests.
 *
 * The engine (discard_create/queue/issue/allocated) runs on a plain data file as its device,
 * so that what got discarded is visible as holes (SEEK_HOLE/SEEK_DATA): ranges merged across
 * segment boundaries, split at discard_max, one request per block in block mode, the done
 * map skipping what is discarded already, an allocation cancelling a queued discard, and a
 * race of allocations (each followed by a write) against parallel discards in flight: no
 * write may be punched away.  Then f2fuse_trim on real mkfs.f2fs images through the API:
 * bytes reported, a second trim reporting 0, minlen and range limits, online discard after
 * a checkpoint, and fsck.f2fs clean with every file intact afterwards.
 *
 * Randomized parts use F2FUSE_SEED (printed). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api/api.h"

#define BLK  4096u
#define SEGB F2FS_BLOCKS_PER_SEG
#define MAIN 1024u /* main area of the engine tests starts at this block */
#define SEGS 16u

static char g_dir[256];
static unsigned long g_seed;
static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* ---- engine on a data file --------------------------------------------------------------- */

struct dev {
    char path[300];
    struct blk_dev *blk;
    struct discard_control *dc;
    struct f2fuse_options opts;
};

/* A fully written file of MAIN + SEGS segments' blocks, every block stamped with its number. */
static void dev_open(struct dev *d, const char *backend, unsigned mode, uint64_t max_bytes,
                     unsigned qd)
{
    snprintf(d->path, sizeof(d->path), "%s/engine.img", g_dir);
    int fd = open(d->path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(fd >= 0);
    uint32_t total = MAIN + SEGS * SEGB;
    uint8_t *buf = malloc(256 * BLK);
    for (uint32_t b = 0; b < total; b += 256) {
        for (uint32_t i = 0; i < 256; i++)
            memset(buf + (size_t)i * BLK, (int)((b + i) % 251) + 1, BLK);
        CHECK_EQ(pwrite(fd, buf, 256 * BLK, (off_t)b * BLK), 256 * BLK);
    }
    free(buf);
    fsync(fd);
    close(fd);
    struct blk_options bo = {.backend = backend};
    CHECK_EQ(blk_open(d->path, &bo, &d->blk), 0);
    f2fuse_options_init(&d->opts);
    d->opts.discard = false;
    d->opts.discard_mode = mode;
    d->opts.discard_max = max_bytes;
    d->opts.discard_qd = qd;
    CHECK_EQ(discard_create(d->blk, MAIN, SEGS, &d->opts, &d->dc), 0);
}

static void dev_close(struct dev *d)
{
    discard_free(d->dc);
    blk_close(d->blk);
    unlink(d->path);
}

struct counters {
    uint64_t ranges, bytes, merges, splits, cancelled, skipped, pending, done, waits;
};

static void grab(void *arg, const char *name, uint64_t v)
{
    struct counters *c = arg;
    if (!strcmp(name, "discard.ranges_issued"))
        c->ranges = v;
    else if (!strcmp(name, "discard.bytes"))
        c->bytes = v;
    else if (!strcmp(name, "discard.merges"))
        c->merges = v;
    else if (!strcmp(name, "discard.splits"))
        c->splits = v;
    else if (!strcmp(name, "discard.cancelled"))
        c->cancelled = v;
    else if (!strcmp(name, "discard.skipped_done"))
        c->skipped = v;
    else if (!strcmp(name, "discard.pending"))
        c->pending = v;
    else if (!strcmp(name, "discard.done_blocks"))
        c->done = v;
    else if (!strcmp(name, "discard.alloc_waits"))
        c->waits = v;
}

static struct counters counters(struct discard_control *dc)
{
    struct counters c = {0};
    discard_stats(dc, grab, &c);
    return c;
}

/* Is block b of the file a hole (reads as zeros and has no data extent)? */
static bool is_hole(const char *path, uint32_t b)
{
    int fd = open(path, O_RDONLY);
    off_t data = lseek(fd, (off_t)b * BLK, SEEK_DATA);
    close(fd);
    return data < 0 || data >= (off_t)(b + 1) * BLK;
}

static bool intact(const char *path, uint32_t b)
{
    int fd = open(path, O_RDONLY);
    uint8_t buf[BLK];
    bool ok = pread(fd, buf, BLK, (off_t)b * BLK) == BLK;
    for (unsigned i = 0; ok && i < BLK; i++)
        ok = buf[i] == (uint8_t)(b % 251 + 1);
    close(fd);
    return ok;
}

/* Holes exactly where want(b) says, over the whole file. */
static unsigned holes_mismatch(const char *path, bool (*want)(uint32_t, void *), void *arg)
{
    unsigned bad = 0;
    for (uint32_t b = 0; b < MAIN + SEGS * SEGB; b++) {
        bool h = is_hole(path, b);
        if (h != want(b, arg) || (!h && !intact(path, b))) {
            if (bad++ < 5)
                fprintf(stderr, "  block %u: hole %d, expected %d\n", b, h, want(b, arg));
        }
    }
    return bad;
}

struct span {
    uint32_t a, b;
};
static bool in_span(uint32_t blk, void *arg)
{
    const struct span *s = arg;
    return blk >= s->a && blk < s->b;
}

static void merges_across_segments(void)
{
    struct dev d;
    dev_open(&d, "psync", F2FUSE_DISCARD_SERIAL, 64ull << 20, 32);
    /* three pieces, adjacent, crossing two segment boundaries */
    struct span sp = {MAIN + 300, MAIN + 300 + 1000};
    discard_queue(d.dc, MAIN + 300, 212);
    discard_queue(d.dc, MAIN + 512, 512);
    discard_queue(d.dc, MAIN + 1024, 276);
    uint64_t bytes = 0;
    CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
    CHECK_EQ(bytes, 1000ull * BLK);
    struct counters c = counters(d.dc);
    CHECK_EQ(c.ranges, 1);
    CHECK_EQ(c.merges, 999);
    CHECK_EQ(c.pending, 0);
    CHECK_EQ(c.done, 1000);
    CHECK_EQ(holes_mismatch(d.path, in_span, &sp), 0);
    dev_close(&d);
}

static void splits_at_max(void)
{
    struct dev d;
    dev_open(&d, "uring", F2FUSE_DISCARD_PARALLEL, 64 * BLK, 8);
    struct span sp = {MAIN + 10, MAIN + 10 + 1000};
    discard_queue(d.dc, sp.a, 1000);
    uint64_t bytes = 0;
    CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
    CHECK_EQ(bytes, 1000ull * BLK);
    struct counters c = counters(d.dc);
    CHECK_EQ(c.ranges, 16); /* 15 × 64 + 40 */
    CHECK_EQ(c.splits, 15);
    CHECK_EQ(holes_mismatch(d.path, in_span, &sp), 0);
    dev_close(&d);
}

static bool every_fourth(uint32_t b, void *arg)
{
    return b >= MAIN && (b - MAIN) % 4 == 1;
}

static void block_and_parallel_modes(void)
{
    unsigned modes[] = {F2FUSE_DISCARD_BLOCK, F2FUSE_DISCARD_SERIAL, F2FUSE_DISCARD_PARALLEL};
    for (int m = 0; m < 3; m++) {
        struct dev d;
        dev_open(&d, "uring", modes[m], 64ull << 20, 32);
        /* isolated blocks, then one contiguous stretch of 40 */
        for (uint32_t b = MAIN + 1; b < MAIN + SEGS * SEGB; b += 4)
            discard_queue(d.dc, b, 1);
        uint64_t bytes = 0;
        CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
        CHECK_EQ(bytes, (uint64_t)SEGS * SEGB / 4 * BLK);
        CHECK_EQ(counters(d.dc).ranges, SEGS * SEGB / 4);
        CHECK_EQ(holes_mismatch(d.path, every_fourth, NULL), 0);
        discard_queue(d.dc, MAIN + 2, 1); /* joins nothing: 1 is done, 3 not queued */
        for (uint32_t b = MAIN + 4000; b < MAIN + 4040; b++)
            discard_allocated(d.dc, b); /* allocated and freed again: out of the done map */
        discard_queue(d.dc, MAIN + 4000, 40);
        CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
        CHECK_EQ(bytes, 41ull * BLK);
        CHECK_EQ(counters(d.dc).ranges,
                 SEGS * SEGB / 4 + (modes[m] == F2FUSE_DISCARD_BLOCK ? 41 : 2));
        dev_close(&d);
    }
}

static void done_map_skips(void)
{
    struct dev d;
    dev_open(&d, "psync", F2FUSE_DISCARD_PARALLEL, 64ull << 20, 32);
    discard_queue(d.dc, MAIN, SEGS * SEGB);
    uint64_t bytes = 0;
    CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
    CHECK_EQ(bytes, (uint64_t)SEGS * SEGB * BLK);
    struct counters c = counters(d.dc);
    CHECK_EQ(c.ranges, 1);
    CHECK_EQ(c.done, SEGS * SEGB);
    /* everything again: nothing to do */
    discard_queue(d.dc, MAIN, SEGS * SEGB);
    CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
    CHECK_EQ(bytes, 0);
    c = counters(d.dc);
    CHECK_EQ(c.ranges, 1);
    CHECK_EQ(c.skipped, SEGS * SEGB);
    /* an allocated block leaves the done map and is discarded again next time */
    discard_allocated(d.dc, MAIN + 700);
    CHECK(!discard_is_done(d.dc, MAIN + 700));
    CHECK(discard_is_done(d.dc, MAIN + 701));
    discard_queue(d.dc, MAIN, SEGS * SEGB);
    CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
    CHECK_EQ(bytes, BLK);
    CHECK_EQ(counters(d.dc).done, SEGS * SEGB);
    dev_close(&d);
}

static bool span_minus_one(uint32_t b, void *arg)
{
    return b >= MAIN + 100 && b < MAIN + 900 && b != MAIN + 600;
}

static void allocation_cancels_queued(void)
{
    struct dev d;
    dev_open(&d, "uring", F2FUSE_DISCARD_SERIAL, 64ull << 20, 32);
    discard_queue(d.dc, MAIN + 100, 800);
    discard_allocated(d.dc, MAIN + 600);
    uint64_t bytes = 0;
    CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
    CHECK_EQ(bytes, 799ull * BLK);
    struct counters c = counters(d.dc);
    CHECK_EQ(c.cancelled, 1);
    CHECK_EQ(c.ranges, 2);
    CHECK_EQ(holes_mismatch(d.path, span_minus_one, NULL), 0);
    dev_close(&d);
}

static void issue_honours_range(void)
{
    struct dev d;
    dev_open(&d, "psync", F2FUSE_DISCARD_PARALLEL, 64ull << 20, 4);
    discard_queue(d.dc, MAIN, SEGS * SEGB);
    uint64_t bytes = 0;
    struct span sp = {MAIN + 1000, MAIN + 3000};
    CHECK_EQ(discard_issue(d.dc, sp.a, sp.b, &bytes), 0);
    CHECK_EQ(bytes, 2000ull * BLK);
    CHECK_EQ(counters(d.dc).pending, SEGS * SEGB - 2000);
    CHECK_EQ(holes_mismatch(d.path, in_span, &sp), 0);
    dev_close(&d);
}

/* Allocation racing discards in flight: each allocated block is written right after
 * discard_allocated returns (as the file system does); none of those writes may be lost. */
struct racer {
    struct dev *d;
    uint32_t *order;
    unsigned n;
    int fd;
};

static void *allocator(void *arg)
{
    struct racer *r = arg;
    uint8_t buf[BLK];
    memset(buf, 0xA5, sizeof(buf));
    for (unsigned i = 0; i < r->n; i++) {
        discard_allocated(r->d->dc, r->order[i]);
        if (pwrite(r->fd, buf, BLK, (off_t)r->order[i] * BLK) != BLK)
            check_failures++;
        if (i % 16 == 0)
            sched_yield();
    }
    return NULL;
}

static void allocation_races_inflight(void)
{
    for (int round = 0; round < 3; round++) {
        struct dev d;
        dev_open(&d, "uring", F2FUSE_DISCARD_PARALLEL, 8 * BLK, 32);
        uint32_t total = SEGS * SEGB;
        discard_queue(d.dc, MAIN, total);
        /* the allocator takes 1/8 of the blocks, in random order */
        struct racer r = {.d = &d, .n = total / 8};
        r.order = malloc(r.n * sizeof(*r.order));
        for (unsigned i = 0; i < r.n; i++)
            r.order[i] = MAIN + (uint32_t)(rnd() % total);
        r.fd = open(d.path, O_WRONLY);
        pthread_t t;
        pthread_create(&t, NULL, allocator, &r);
        uint64_t bytes = 0;
        CHECK_EQ(discard_issue(d.dc, 0, UINT32_MAX, &bytes), 0);
        pthread_join(t, NULL);
        close(r.fd);
        int fd = open(d.path, O_RDONLY);
        unsigned lost = 0;
        for (unsigned i = 0; i < r.n; i++) {
            uint8_t buf[BLK];
            if (pread(fd, buf, BLK, (off_t)r.order[i] * BLK) != BLK || buf[0] != 0xA5 ||
                buf[BLK - 1] != 0xA5)
                lost++;
            CHECK(!discard_is_done(d.dc, r.order[i]));
        }
        close(fd);
        CHECK_EQ(lost, 0);
        struct counters c = counters(d.dc);
        CHECK(c.pending == 0);
        printf("  round %d: %llu cancelled, %llu waited for a discard in flight\n", round,
               (unsigned long long)c.cancelled, (unsigned long long)c.waits);
        free(r.order);
        dev_close(&d);
    }
}

/* ---- f2fuse_trim on real images ------------------------------------------------------------ */

static void make_image(const char *img, unsigned mib)
{
    CHECK_EQ(sh("rm -f %s && truncate -s %uM %s && mkfs.f2fs -f %s >/dev/null", img, mib, img, img),
             0);
}

static uint64_t allocated_bytes(const char *img)
{
    struct stat st;
    return stat(img, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

struct lookup {
    const char *name;
    uint64_t v;
};
static void lookup_fn(void *arg, const char *name, uint64_t v)
{
    struct lookup *l = arg;
    if (!strcmp(name, l->name))
        l->v = v;
}
static uint64_t counter(struct f2fuse *fs, const char *name)
{
    struct lookup l = {name, 0};
    f2fuse_stats(fs, lookup_fn, &l);
    return l.v;
}

static uint32_t make_file(struct f2fuse *fs, const char *name, uint32_t blocks, uint8_t tag)
{
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mknod(fs, f2fuse_root_ino(fs), name, strlen(name), 0100644, 0, 0, 0, &a), 0);
    uint8_t *buf = malloc(64 * BLK);
    for (uint32_t b = 0; b < blocks; b += 64) {
        uint32_t n = blocks - b < 64 ? blocks - b : 64;
        for (uint32_t i = 0; i < n; i++)
            memset(buf + (size_t)i * BLK, tag ^ (uint8_t)(b + i), BLK);
        CHECK_EQ(f2fuse_write(fs, a.ino, buf, (size_t)n * BLK, (uint64_t)b * BLK),
                 (ssize_t)n * BLK);
    }
    free(buf);
    return a.ino;
}

static bool file_ok(struct f2fuse *fs, const char *name, uint32_t blocks, uint8_t tag)
{
    struct f2fuse_attr a;
    if (f2fuse_lookup(fs, f2fuse_root_ino(fs), name, strlen(name), &a) != 0)
        return false;
    uint8_t buf[BLK];
    for (uint32_t b = 0; b < blocks; b++) {
        if (f2fuse_read(fs, a.ino, buf, BLK, (uint64_t)b * BLK) != BLK)
            return false;
        if (buf[0] != (uint8_t)(tag ^ (uint8_t)b) || buf[BLK - 1] != (uint8_t)(tag ^ (uint8_t)b))
            return false;
    }
    return true;
}

static bool fsck_clean(const char *img)
{
    return sh("fsck.f2fs --dry-run %s 2>&1 | grep -Eq '\\[Fail\\]|\\[ASSERT\\]|\\[FIX\\]' && exit 1 || exit 0",
              img) == 0;
}

static void trim_reports_and_second_is_zero(void)
{
    char img[300];
    snprintf(img, sizeof(img), "%s/trim.img", g_dir);
    make_image(img, 128);
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.read_only = false;
    o.discard = false;
    o.checkpoint_interval = 0;
    struct f2fuse *fs;
    CHECK_EQ(f2fuse_open(img, &o, &fs), 0);
    if (!fs)
        return;
    make_file(fs, "keep", 3000, 0x11);
    make_file(fs, "gone", 5000, 0x22);
    make_file(fs, "keep2", 2000, 0x33);
    CHECK_EQ(f2fuse_sync(fs), 0);
    uint64_t before = allocated_bytes(img);
    CHECK_EQ(f2fuse_unlink(fs, f2fuse_root_ino(fs), "gone", 4), 0);
    uint64_t trimmed = 0;
    /* a range inside the device but minlen over the whole main area: nothing qualifies */
    CHECK_EQ(f2fuse_trim(fs, 0, UINT64_MAX, 1ull << 40, &trimmed), 0);
    CHECK_EQ(trimmed, 0);
    /* a 4 MiB window */
    uint64_t main_start = (uint64_t)fs->main_blkaddr * BLK;
    CHECK_EQ(f2fuse_trim(fs, main_start, 4 << 20, 0, &trimmed), 0);
    CHECK(trimmed <= 4u << 20);
    uint64_t window = trimmed;
    CHECK_EQ(f2fuse_trim(fs, 0, UINT64_MAX, 0, &trimmed), 0);
    uint64_t free_bytes = ((uint64_t)(fs->main_blkend - fs->main_blkaddr) -
                           seg_valid_blocks(fs->seg)) *
                          BLK;
    printf("  trimmed %llu + %llu bytes of %llu free\n", (unsigned long long)window,
           (unsigned long long)trimmed, (unsigned long long)free_bytes);
    CHECK(trimmed + window <= free_bytes);
    CHECK(trimmed + window >= 5000ull * BLK);
    CHECK(allocated_bytes(img) + 5000ull * BLK <= before + (1 << 20));
    CHECK_EQ(f2fuse_trim(fs, 0, UINT64_MAX, 0, &trimmed), 0);
    CHECK_EQ(trimmed, 0);
    CHECK_EQ(f2fuse_trim(fs, blk_size(fs->dev), 1 << 20, 0, &trimmed), -EINVAL);
    CHECK_EQ(f2fuse_trim(fs, 0, 100, 0, &trimmed), -EINVAL);
    CHECK(counter(fs, "discard.fitrim.calls") >= 4);
    f2fuse_close(fs);
    CHECK(fsck_clean(img));
    o.read_only = true;
    CHECK_EQ(f2fuse_open(img, &o, &fs), 0);
    if (fs) {
        CHECK(file_ok(fs, "keep", 3000, 0x11));
        CHECK(file_ok(fs, "keep2", 2000, 0x33));
        CHECK_EQ(f2fuse_trim(fs, 0, UINT64_MAX, 0, &trimmed), -EROFS);
        f2fuse_close(fs);
    }
}

static void online_discard_after_checkpoint(void)
{
    char img[300];
    snprintf(img, sizeof(img), "%s/online.img", g_dir);
    make_image(img, 128);
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.read_only = false;
    o.checkpoint_interval = 0;
    CHECK(o.discard);
    struct f2fuse *fs;
    CHECK_EQ(f2fuse_open(img, &o, &fs), 0);
    if (!fs)
        return;
    uint32_t ino = make_file(fs, "f", 8192, 0x44);
    CHECK_EQ(f2fuse_sync(fs), 0);
    uint64_t before = allocated_bytes(img);
    /* punch every other 64 KiB: freed at the next checkpoint, discarded after it */
    for (uint64_t off = 0; off < 8192ull * BLK; off += 128 << 10)
        CHECK_EQ(f2fuse_fallocate(fs, ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off,
                                  64 << 10),
                 0);
    CHECK_EQ(f2fuse_sync(fs), 0);
    CHECK(counter(fs, "discard.candidates") >= 4096);
    for (int i = 0; i < 500 && counter(fs, "discard.bytes") < 4096ull * BLK; i++)
        usleep(10000);
    CHECK(counter(fs, "discard.bytes") >= 4096ull * BLK);
    CHECK(counter(fs, "discard.ranges_issued") <= 4096 / 16 + 8);
    CHECK(allocated_bytes(img) + 4096ull * BLK <= before + (1 << 20));
    /* isolated single blocks stay queued online (runs under 16 blocks), for a FITRIM */
    uint64_t ranges = counter(fs, "discard.ranges_issued");
    for (uint64_t off = (64 << 10) + 8192; off < 8192ull * BLK; off += 128 << 10)
        CHECK_EQ(f2fuse_fallocate(fs, ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, BLK),
                 0);
    CHECK_EQ(f2fuse_sync(fs), 0);
    usleep(200000);
    CHECK(counter(fs, "discard.pending") >= 256);
    CHECK(counter(fs, "discard.ranges_issued") <= ranges + 8);
    uint64_t trimmed = 0;
    CHECK_EQ(f2fuse_trim(fs, 0, UINT64_MAX, 0, &trimmed), 0);
    CHECK(trimmed >= 256ull * BLK);
    CHECK_EQ(counter(fs, "discard.pending"), 0);
    /* overwrite: the freed blocks get reused; nothing written may be lost */
    make_file(fs, "g", 6000, 0x55);
    CHECK_EQ(f2fuse_sync(fs), 0);
    f2fuse_close(fs);
    CHECK(fsck_clean(img));
    o.read_only = true;
    CHECK_EQ(f2fuse_open(img, &o, &fs), 0);
    if (fs) {
        CHECK(file_ok(fs, "g", 6000, 0x55));
        f2fuse_close(fs);
    }
}

static void options_parse(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    CHECK(o.discard);
    CHECK_EQ(o.discard_mode, F2FUSE_DISCARD_PARALLEL);
    CHECK_EQ(f2fuse_option_set(&o, "nodiscard", NULL), 0);
    CHECK(!o.discard);
    CHECK_EQ(f2fuse_option_set(&o, "discard", NULL), 0);
    CHECK(o.discard);
    CHECK_EQ(f2fuse_option_set(&o, "discard", "1"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_mode", "block"), 0);
    CHECK_EQ(o.discard_mode, F2FUSE_DISCARD_BLOCK);
    CHECK_EQ(f2fuse_option_set(&o, "discard_mode", "serial"), 0);
    CHECK_EQ(o.discard_mode, F2FUSE_DISCARD_SERIAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_mode", "fast"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_max", "16M"), 0);
    CHECK_EQ(o.discard_max, 16 << 20);
    CHECK_EQ(f2fuse_option_set(&o, "discard_max", "100"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_qd", "0"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_qd", "64"), 0);
    CHECK_EQ(o.discard_qd, 64);
    CHECK_EQ(f2fuse_option_set(&o, "discard_x", "1"), -ENOENT);
}

int main(void)
{
    const char *seed = getenv("F2FUSE_SEED");
    g_seed = seed ? strtoul(seed, NULL, 0) : (unsigned long)time(NULL);
    printf("F2FUSE_SEED=%lu\n", g_seed);
    rng_state = g_seed * 2654435761u + 1;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/f2fuse-discard-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(options_parse);
    RUN(merges_across_segments);
    RUN(splits_at_max);
    RUN(block_and_parallel_modes);
    RUN(done_map_skips);
    RUN(allocation_cancels_queued);
    RUN(issue_honours_range);
    RUN(allocation_races_inflight);
    RUN(trim_reports_and_second_is_zero);
    RUN(online_discard_after_checkpoint);
    if (!getenv("F2FUSE_KEEP"))
        sh("rm -rf %s", g_dir);
    return CHECK_DONE();
}
