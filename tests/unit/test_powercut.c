/* Power-cut emulation tests (the power-cut layer, blk_powercut.h).  Every case runs once
 * per backend (uring, psync) on a scratch image in a disk-backed directory (F2FUSE_TEST_DIR,
 * TMPDIR, /var/tmp or /tmp, the first that is not memory-backed).  What survived a cut is judged
 * by reading the image file itself after blk_close, as a crash test does after killing the
 * daemon.  Random choices come from F2FUSE_SEED (default: the time), printed first so
 * that a failure can be replayed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "blk/blk.h"
#include "blk/blk_powercut.h"
#include "check.h"

#define BLK        4096u
#define IMG_SIZE   (4u << 20)
#define IMG_BLOCKS (IMG_SIZE / BLK)

static struct {
    const char *backend; /* requested */
    const char *dir;
    bool dir_direct; /* O_DIRECT usable in dir: uring stays uring */
    uint64_t rng;
    char path[512];
} env;

static uint64_t rnd(void)
{
    /* xorshift64* */
    env.rng ^= env.rng >> 12;
    env.rng ^= env.rng << 25;
    env.rng ^= env.rng >> 27;
    return env.rng * 2685821657736338717ull;
}

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
}

/* Position-dependent, so a block holding another block's old contents shows. */
static uint8_t pattern_byte(uint64_t off)
{
    return (uint8_t)((off * 131) ^ (off >> 12) ^ 0x5a);
}

static bool range_has_pattern(const uint8_t *p, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != pattern_byte(off + i))
            return false;
    return true;
}

static uint8_t *pattern_image(void)
{
    uint8_t *img = malloc(IMG_SIZE);
    for (uint64_t i = 0; i < IMG_SIZE; i++)
        img[i] = pattern_byte(i);
    return img;
}

/* Offset of the first differing byte, or -1: says where a comparison went wrong. */
static long long first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long long)i;
    return -1;
}

#define CHECK_SAME(a, b, n) CHECK_EQ(first_diff((a), (b), (n)), -1)

static bool uring_expected(void)
{
    return strcmp(env.backend, "uring") == 0 && env.dir_direct;
}

/* ---- device set-up and inspection ------------------------------------------------- */

static struct blk_dev *open_dev(struct blk_powercut_options cut)
{
    snprintf(env.path, sizeof(env.path), "%s/f2fuse-test-powercut.%d.img", env.dir, (int)getpid());
    uint8_t *img = pattern_image();
    int fd = open(env.path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0 || pwrite(fd, img, IMG_SIZE, 0) != IMG_SIZE || fsync(fd) != 0) {
        perror(env.path);
        exit(2);
    }
    close(fd);
    free(img);
    struct blk_options opts = {.backend = env.backend};
    struct blk_dev *dev = NULL;
    int ret = blk_open(env.path, &opts, &dev);
    if (ret) {
        fprintf(stderr, "blk_open(%s): %s\n", env.path, strerror(-ret));
        exit(2);
    }
    CHECK_EQ(blk_powercut_arm(dev, &cut), 0);
    CHECK(strcmp(blk_backend_name(dev), uring_expected() ? "uring" : "psync") == 0);
    return dev;
}

static struct blk_dev *open_cut(uint64_t after)
{
    return open_dev((struct blk_powercut_options){.after = after});
}

/* Closes the device and returns what the image file holds: what survived the cut. */
static uint8_t *close_and_read(struct blk_dev *dev)
{
    blk_close(dev);
    uint8_t *img = malloc(IMG_SIZE);
    int fd = open(env.path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK_EQ(pread(fd, img, IMG_SIZE, 0), IMG_SIZE);
    close(fd);
    unlink(env.path);
    return img;
}

struct stat_probe {
    const char *name;
    uint64_t value;
    bool found;
};

static void stat_probe_emit(void *sink, const char *name, uint64_t value)
{
    struct stat_probe *p = sink;
    if (strcmp(name, p->name) == 0) {
        p->value = value;
        p->found = true;
    }
}

static uint64_t stat_of(struct blk_dev *dev, const char *name)
{
    struct stat_probe p = {.name = name};
    blk_emit_stats(dev, stat_probe_emit, &p);
    if (!p.found)
        fprintf(stderr, "no counter %s\n", name);
    CHECK(p.found);
    return p.value;
}

/* What the device should hold: `now` follows every write that reached it, `durable` is
 * `now` as of the last flush; a cut (without torn) must leave exactly `durable`. */
struct model {
    uint8_t *now, *durable;
};

static void model_init(struct model *m)
{
    m->now = pattern_image();
    m->durable = pattern_image();
}

static void model_fini(struct model *m)
{
    free(m->now);
    free(m->durable);
}

static int mwrite(struct blk_dev *dev, struct model *m, uint64_t off, const void *buf, size_t len)
{
    memcpy(m->now + off, buf, len);
    return blk_write(dev, off, buf, len);
}

static int mflush(struct blk_dev *dev, struct model *m)
{
    memcpy(m->durable, m->now, IMG_SIZE);
    return blk_flush(dev);
}

/* Counts completions of async requests and lets the test wait for them. */
struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned done;
};

static void waiter_init(struct waiter *w)
{
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    w->done = 0;
}

static void waiter_done(struct blk_req *req)
{
    struct waiter *w = req->private;
    pthread_mutex_lock(&w->lock);
    w->done++;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void waiter_wait(struct waiter *w, unsigned count)
{
    pthread_mutex_lock(&w->lock);
    while (w->done < count)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

static void waiter_fini(struct waiter *w)
{
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

static struct blk_req make_req(enum blk_op op, uint64_t off, uint64_t len, void *buf,
                               struct waiter *w)
{
    return (struct blk_req){
        .op = op, .off = off, .len = len, .buf = buf, .done = waiter_done, .private = w};
}

static int64_t run_async(struct blk_dev *dev, enum blk_op op, uint64_t off, uint64_t len, void *buf)
{
    struct waiter w;
    waiter_init(&w);
    struct blk_req req = make_req(op, off, len, buf, &w);
    struct blk_req *p = &req;
    CHECK_EQ(blk_submit(dev, &p, 1), 0);
    waiter_wait(&w, 1);
    waiter_fini(&w);
    return req.result;
}

/* ---- cases ------------------------------------------------------------------------- */

/* (1) W1 W2 flush W3 W4, cut at W5: W1 and W2 stay, W3 and W4 are undone, W5 never lands.
 * W3 is unaligned at both ends (read-modify-write on O_DIRECT), W4 comes from an unaligned
 * buffer (plain bounce on O_DIRECT). */
static void test_undo_after_flush(void)
{
    struct blk_dev *dev = open_cut(5);
    struct model m;
    model_init(&m);
    uint8_t *src = blk_alloc_buf(4 * BLK);
    fill_random(src, 4 * BLK);
    CHECK_EQ(mwrite(dev, &m, 10 * BLK, src, BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 20 * BLK, src + BLK, 2 * BLK), 0);
    CHECK_EQ(mflush(dev, &m), 0);
    CHECK_EQ(mwrite(dev, &m, 30 * BLK + 3000, src + 7, 2000), 0);
    CHECK_EQ(mwrite(dev, &m, 40 * BLK, src + 1, BLK), 0);
    CHECK_EQ(blk_write_count(dev), 4);
    CHECK(!blk_powercut_happened(dev));

    /* until the cut, W3 and W4 are what readers see */
    uint8_t *back = blk_alloc_buf(2 * BLK);
    CHECK_EQ(blk_read(dev, 30 * BLK, back, 2 * BLK), 0);
    CHECK_SAME(back, m.now + 30 * BLK, 2 * BLK);

    CHECK_EQ(blk_write(dev, 50 * BLK, src + 2 * BLK, BLK), 0);
    CHECK(blk_powercut_happened(dev));
    CHECK_EQ(blk_write_count(dev), 5);
    /* the undo is done once the cutting write returns, and reads see it */
    CHECK_EQ(blk_read(dev, 30 * BLK, back, 2 * BLK), 0);
    CHECK(range_has_pattern(back, 30 * BLK, 2 * BLK));
    CHECK_EQ(stat_of(dev, "blk.powercut.reverted_blocks"), 3); /* W3: 2 blocks, W4: 1 */

    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img, m.durable, IMG_SIZE);
    CHECK_SAME(img + 10 * BLK, src, BLK);
    CHECK_SAME(img + 20 * BLK, src + BLK, 2 * BLK);
    CHECK(range_has_pattern(img + 30 * BLK, 30 * BLK, 2 * BLK));
    CHECK(range_has_pattern(img + 40 * BLK, 40 * BLK, BLK));
    CHECK(range_has_pattern(img + 50 * BLK, 50 * BLK, BLK));
    free(img);
    free(back);
    free(src);
    model_fini(&m);
}

/* A durable write (blk_write_durable: FUA on these backends) survives the cut without a
 * flush, and so does nothing else: an earlier volatile write it covers whole stays covered,
 * one it does not cover is undone, a later one too.  Counted as a FUA write, no flush. */
static void test_fua_survives(void)
{
    struct blk_dev *dev = open_cut(5);
    uint8_t *src = blk_alloc_buf(8 * BLK);
    fill_random(src, 8 * BLK);
    CHECK_EQ(blk_write(dev, 10 * BLK, src, BLK), 0);       /* covered by the FUA below */
    CHECK_EQ(blk_write(dev, 20 * BLK, src + BLK, BLK), 0); /* volatile: undone */
    CHECK_EQ(blk_write_durable(dev, 10 * BLK, src + 2 * BLK, 2 * BLK, BLK_PRIO_HIGH), 0);
    CHECK_EQ(blk_write(dev, 30 * BLK, src + 4 * BLK, BLK), 0); /* after it: undone */
    CHECK_EQ(stat_of(dev, "blk.fua_writes"), 1);
    CHECK_EQ(stat_of(dev, "blk.flush.ops"), 0);
    CHECK(!blk_powercut_happened(dev));
    CHECK_EQ(blk_write(dev, 40 * BLK, src + 5 * BLK, BLK), 0); /* the 5th write: the cut */
    CHECK(blk_powercut_happened(dev));
    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img + 10 * BLK, src + 2 * BLK, 2 * BLK);
    CHECK(range_has_pattern(img + 20 * BLK, 20 * BLK, BLK));
    CHECK(range_has_pattern(img + 30 * BLK, 30 * BLK, BLK));
    CHECK(range_has_pattern(img + 40 * BLK, 40 * BLK, BLK));
    free(img);
    free(src);
}

/* (2) Everything flushed before the cut: nothing is lost, the undo log is empty. */
static void test_all_flushed_kept(void)
{
    struct blk_dev *dev = open_cut(6);
    struct model m;
    model_init(&m);
    uint8_t *src = blk_alloc_buf(8 * BLK);
    fill_random(src, 8 * BLK);
    CHECK_EQ(mwrite(dev, &m, 0, src, 3 * BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 100 * BLK + 17, src + 3 * BLK, 5000), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), 3 * BLK + 2 * BLK);
    CHECK_EQ(mflush(dev, &m), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), 0);
    CHECK_EQ(mwrite(dev, &m, 200 * BLK, src, 8 * BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 3 * BLK, src, BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 100 * BLK, src + BLK, BLK), 0); /* over the unaligned one */
    CHECK_EQ(mflush(dev, &m), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), 0);
    CHECK_EQ(blk_write(dev, 300 * BLK, src, BLK), 0); /* the cut */
    CHECK(blk_powercut_happened(dev));
    CHECK_EQ(stat_of(dev, "blk.powercut.reverted_blocks"), 0);
    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img, m.now, IMG_SIZE);
    free(img);
    free(src);
    model_fini(&m);
}

/* One torn cut: W1 durable, then a 256-block write left unflushed, cut at the third
 * write.  Returns which blocks of the big write survived. */
static void torn_once(uint64_t seed, const uint8_t *big, bool *kept)
{
    enum { N = 256, BASE = 64 };
    struct blk_dev *dev = open_dev((struct blk_powercut_options){
        .after = 3, .torn = true, .seed = seed});
    uint8_t *w1 = blk_alloc_buf(BLK);
    fill_random(w1, BLK);
    CHECK_EQ(blk_write(dev, 0, w1, BLK), 0);
    CHECK_EQ(blk_flush(dev), 0);
    CHECK_EQ(blk_write(dev, BASE * BLK, big, N * BLK), 0);
    CHECK_EQ(blk_write(dev, 2 * BLK, w1, BLK), 0);
    CHECK(blk_powercut_happened(dev));
    uint64_t reverted_counter = stat_of(dev, "blk.powercut.reverted_blocks");
    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img, w1, BLK); /* durable: never torn */
    CHECK(range_has_pattern(img + 2 * BLK, 2 * BLK, BLK));
    unsigned n_kept = 0, n_reverted = 0, bad = 0;
    for (unsigned i = 0; i < N; i++) {
        const uint8_t *b = img + (BASE + i) * BLK;
        kept[i] = memcmp(b, big + i * BLK, BLK) == 0;
        bool reverted = range_has_pattern(b, (BASE + i) * BLK, BLK);
        n_kept += kept[i];
        n_reverted += reverted;
        bad += !kept[i] && !reverted; /* a block is all old or all new */
    }
    CHECK_EQ(bad, 0);
    CHECK(n_kept > 0);
    CHECK(n_reverted > 0);
    CHECK_EQ(n_kept + n_reverted, N);
    CHECK_EQ(reverted_counter, n_reverted);
    free(img);
    free(w1);
}

/* (3) Torn mode reverts some blocks and keeps others, the same ones for the same seed. */
static void test_torn_deterministic(void)
{
    enum { N = 256 };
    uint64_t seed = rnd();
    uint8_t *big = blk_alloc_buf(N * BLK);
    fill_random(big, N * BLK);
    bool first[N], again[N], other[N];
    torn_once(seed, big, first);
    torn_once(seed, big, again);
    torn_once(seed + 1, big, other);
    CHECK(memcmp(first, again, sizeof(first)) == 0);
    CHECK(memcmp(first, other, sizeof(first)) != 0); /* equal by chance: 2^-256 */
    free(big);
}

/* (4) After the cut, writes, flushes and discards succeed and change nothing. */
static void test_after_cut_inert(void)
{
    struct blk_dev *dev = open_cut(2);
    uint8_t *src = blk_alloc_buf(4 * BLK);
    fill_random(src, 4 * BLK);
    CHECK_EQ(blk_write(dev, 5 * BLK, src, BLK), 0);
    CHECK_EQ(blk_write(dev, 6 * BLK, src, BLK), 0); /* the cut */
    CHECK(blk_powercut_happened(dev));
    uint8_t *before = blk_alloc_buf(IMG_SIZE), *after = blk_alloc_buf(IMG_SIZE);
    CHECK_EQ(blk_read(dev, 0, before, IMG_SIZE), 0);
    CHECK(range_has_pattern(before, 0, IMG_SIZE));

    CHECK_EQ(blk_write(dev, 0, src, 4 * BLK), 0);
    CHECK_EQ(blk_write(dev, 9 * BLK + 5, src + 3, 100), 0);
    CHECK_EQ(blk_flush(dev), 0);
    CHECK_EQ(blk_discard(dev, 0, 64 * BLK), 0);
    CHECK_EQ(run_async(dev, BLK_WRITE, 20 * BLK, 2 * BLK, src), 2 * BLK);
    CHECK_EQ(run_async(dev, BLK_WRITE, 30 * BLK + 1, 10, src), 10);
    CHECK_EQ(run_async(dev, BLK_FLUSH, 0, 0, NULL), 0);
    CHECK_EQ(run_async(dev, BLK_DISCARD, 40 * BLK, 8 * BLK, NULL), 8 * BLK);
    /* a write past the end is not refused either: the device is gone */
    CHECK_EQ(blk_write(dev, IMG_SIZE, src, BLK), 0);
    CHECK_EQ(blk_write_count(dev), 7);
    CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), 6);

    CHECK_EQ(blk_read(dev, 0, after, IMG_SIZE), 0);
    CHECK_SAME(after, before, IMG_SIZE);
    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img, before, IMG_SIZE);
    free(img);
    free(before);
    free(after);
    free(src);
}

/* (5) The counters, in power-cut mode and without it. */
static void test_counters(void)
{
    uint8_t *src = blk_alloc_buf(2 * BLK);
    fill_random(src, 2 * BLK);

    struct blk_dev *dev = open_dev((struct blk_powercut_options){0});
    CHECK_EQ(stat_of(dev, "blk.powercut.armed"), 0);
    for (unsigned i = 0; i < 5; i++)
        CHECK_EQ(blk_write(dev, i * BLK + (i & 1), src, BLK), 0);
    CHECK_EQ(run_async(dev, BLK_WRITE, 0, 0, src), 0); /* an empty write counts too */
    CHECK_EQ(blk_flush(dev), 0);
    CHECK_EQ(blk_write_count(dev), 6);
    CHECK(!blk_powercut_happened(dev));
    CHECK_EQ(stat_of(dev, "blk.powercut.cut"), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), 0);
    free(close_and_read(dev));

    dev = open_cut(4);
    CHECK_EQ(stat_of(dev, "blk.powercut.armed"), 1);
    CHECK_EQ(stat_of(dev, "blk.powercut.cut"), 0);
    CHECK_EQ(blk_write(dev, 0, src, BLK), 0);
    CHECK_EQ(blk_flush(dev), 0);
    CHECK_EQ(blk_write(dev, 8 * BLK, src, 2 * BLK), 0);
    CHECK_EQ(blk_write(dev, 16 * BLK + 100, src, BLK), 0); /* touches 2 blocks */
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), 4 * BLK);
    CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), 0);
    CHECK_EQ(blk_write(dev, 24 * BLK, src, BLK), 0); /* the cut */
    CHECK_EQ(blk_write(dev, 25 * BLK, src, BLK), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.cut"), 1);
    CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), 2);
    CHECK_EQ(stat_of(dev, "blk.powercut.reverted_blocks"), 4);
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), 0);
    CHECK_EQ(stat_of(dev, "blk.write.ops"), 5); /* dropped writes still complete */
    CHECK_EQ(stat_of(dev, "blk.write.errors"), 0);
    CHECK_EQ(stat_of(dev, "blk.inflight"), 0);
    free(close_and_read(dev));

    /* a read-only device has nothing to cut */
    dev = open_cut(1);
    blk_close(dev);
    CHECK_EQ(blk_open(env.path, &(struct blk_options){.backend = env.backend, .read_only = true},
                      &dev),
             0);
    CHECK_EQ(blk_powercut_arm(dev, &(struct blk_powercut_options){.after = 1}), 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.armed"), 0);
    CHECK_EQ(blk_write(dev, 0, src, BLK), -EROFS);
    free(close_and_read(dev));
    free(src);
}

/* (6) Three writes to one block, only the first flushed: the undo runs newest first, so
 * the block ends as W1 left it.  The same with unaligned writes straddling blocks. */
static void test_overlapping_undo_order(void)
{
    struct blk_dev *dev = open_cut(7);
    struct model m;
    model_init(&m);
    uint8_t *src = blk_alloc_buf(6 * BLK);
    fill_random(src, 6 * BLK);
    CHECK_EQ(mwrite(dev, &m, 0, src, BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 10 * BLK + 50, src + 4 * BLK, 3000), 0);
    CHECK_EQ(mflush(dev, &m), 0);
    CHECK_EQ(mwrite(dev, &m, 0, src + BLK, BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 0, src + 2 * BLK, BLK), 0);
    CHECK_EQ(mwrite(dev, &m, 10 * BLK + 1000, src + 3, 5000), 0);
    CHECK_EQ(mwrite(dev, &m, 10 * BLK + 2000, src + 3 * BLK, 200), 0);
    CHECK_EQ(blk_write(dev, 50 * BLK, src, BLK), 0); /* the cut */
    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img, src, BLK);
    CHECK_SAME(img, m.durable, IMG_SIZE);
    free(img);
    free(src);
    model_fini(&m);
}

/* A flush submitted while a write is still in flight does not make that write durable. */
static void test_flush_before_completion(void)
{
    struct blk_dev *dev = open_cut(3);
    uint8_t *src = blk_alloc_buf(2 * BLK);
    fill_random(src, 2 * BLK);
    CHECK_EQ(blk_write(dev, 0, src, BLK), 0);
    CHECK_EQ(blk_flush(dev), 0);
    struct waiter w;
    waiter_init(&w);
    /* one batch: the flush is admitted before the write can complete */
    struct blk_req wr = make_req(BLK_WRITE, BLK, BLK, src + BLK, &w);
    struct blk_req fl = make_req(BLK_FLUSH, 0, 0, NULL, &w);
    struct blk_req *batch[2] = {&wr, &fl};
    CHECK_EQ(blk_submit(dev, batch, 2), 0);
    waiter_wait(&w, 2);
    waiter_fini(&w);
    CHECK_EQ(wr.result, BLK);
    CHECK_EQ(fl.result, 0);
    CHECK_EQ(stat_of(dev, "blk.powercut.undo_bytes"), BLK);
    CHECK_EQ(blk_write(dev, 2 * BLK, src, BLK), 0); /* the cut */
    uint8_t *img = close_and_read(dev);
    CHECK_SAME(img, src, BLK);
    CHECK(range_has_pattern(img + BLK, BLK, 2 * BLK));
    free(img);
    free(src);
}

/* Random sequences of aligned and unaligned, overlapping writes and flushes with the cut at
 * a random write (or none).  Without torn the image must be the one at the last flush
 * before the cut; with torn, every block must hold one of the versions it had since then. */
enum { RAND_REGION = 32, RAND_OPS = 60 };

struct rand_op {
    bool flush;
    uint64_t off, len, src; /* src: offset into the source buffer (may be unaligned) */
};

static uint64_t block_hash(const uint8_t *p)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (unsigned i = 0; i < BLK; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

struct versions {
    unsigned n[RAND_REGION];
    uint64_t hash[RAND_REGION][RAND_OPS + 1];
};

static void versions_reset(struct versions *v, const uint8_t *img)
{
    for (unsigned b = 0; b < RAND_REGION; b++) {
        v->n[b] = 1;
        v->hash[b][0] = block_hash(img + b * BLK);
    }
}

static void versions_add(struct versions *v, const uint8_t *img, uint64_t off, uint64_t len)
{
    for (uint64_t b = off / BLK; b <= (off + len - 1) / BLK; b++)
        v->hash[b][v->n[b]++] = block_hash(img + b * BLK);
}

static void random_run(bool torn, unsigned run)
{
    struct rand_op ops[RAND_OPS];
    uint64_t writes = 0;
    for (unsigned i = 0; i < RAND_OPS; i++) {
        struct rand_op *op = &ops[i];
        op->flush = rnd() % 5 == 0;
        if (op->flush)
            continue;
        writes++;
        if (rnd() & 1) { /* whole blocks */
            op->len = (1 + rnd() % 3) * BLK;
            op->off = (rnd() % (RAND_REGION - 2)) * BLK;
        } else {
            op->len = 1 + rnd() % (3 * BLK);
            op->off = rnd() % (RAND_REGION * BLK - op->len);
        }
        op->src = (rnd() & 1) ? rnd() % BLK : 0;
    }
    uint64_t after = 1 + rnd() % (writes + 1); /* writes + 1: armed, never cut */
    uint64_t seed = rnd();
    struct blk_dev *dev = open_dev((struct blk_powercut_options){
        .after = after, .torn = torn, .seed = seed});
    uint8_t *src = blk_alloc_buf(4 * BLK);
    struct model m;
    model_init(&m);
    struct versions *v = malloc(sizeof(*v));
    versions_reset(v, m.durable);
    uint64_t n = 0;
    int errors = 0;
    for (unsigned i = 0; i < RAND_OPS; i++) {
        struct rand_op *op = &ops[i];
        if (op->flush) {
            errors += blk_flush(dev) != 0;
            if (n < after) { /* the cutting write is still to come */
                memcpy(m.durable, m.now, IMG_SIZE);
                versions_reset(v, m.durable);
            }
            continue;
        }
        n++;
        fill_random(src + op->src, op->len);
        errors += blk_write(dev, op->off, src + op->src, op->len) != 0;
        if (n < after) {
            memcpy(m.now + op->off, src + op->src, op->len);
            versions_add(v, m.now, op->off, op->len);
        }
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(blk_write_count(dev), writes);
    CHECK_EQ(blk_powercut_happened(dev), after <= writes);
    CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), after <= writes ? writes - after + 1 : 0);
    uint8_t *img = close_and_read(dev);
    int before = check_failures;
    if (after > writes) {
        CHECK_SAME(img, m.now, IMG_SIZE);
    } else if (!torn) {
        CHECK_SAME(img, m.durable, IMG_SIZE);
    } else {
        unsigned bad = 0;
        for (unsigned b = 0; b < RAND_REGION; b++) {
            uint64_t h = block_hash(img + b * BLK);
            bool found = false;
            for (unsigned k = 0; k < v->n[b] && !found; k++)
                found = v->hash[b][k] == h;
            bad += !found;
        }
        CHECK_EQ(bad, 0);
        CHECK(range_has_pattern(img + RAND_REGION * BLK, RAND_REGION * BLK,
                                IMG_SIZE - RAND_REGION * BLK));
    }
    if (check_failures != before)
        printf("     run %u: torn=%d cut at write %llu of %llu, torn seed %llu\n", run, torn,
               (unsigned long long)after, (unsigned long long)writes, (unsigned long long)seed);
    free(img);
    free(v);
    free(src);
    model_fini(&m);
}

static void test_random_sequences(void)
{
    for (unsigned run = 0; run < 16; run++)
        random_run(false, run);
}

static void test_random_sequences_torn(void)
{
    for (unsigned run = 0; run < 16; run++)
        random_run(true, run);
}

/* (7) Several threads keep batches of async writes in flight and flush between them; the
 * cut lands among in-flight writes.  Each thread writes blocks of its own, each once.  A
 * write is known durable when a flush the thread submitted after seeing it complete
 * returned before the cut's write was counted; known dropped when the cut's write had been
 * counted before it was submitted; anything else may go either way, but a block is always
 * wholly old or wholly new. */
enum { MT_THREADS = 4, MT_ROUNDS = 24, MT_BATCH = 8, MT_WRITES = MT_ROUNDS * MT_BATCH };
enum { FATE_OPEN, FATE_DURABLE, FATE_DROPPED };

struct mt_thread {
    pthread_t th;
    struct blk_dev *dev;
    uint64_t cut_at;
    uint64_t first_block;
    uint8_t *data; /* MT_WRITES blocks, one per write */
    uint8_t fate[MT_WRITES];
    struct blk_req reqs[MT_WRITES];
    struct waiter w[MT_ROUNDS];
    unsigned failed; /* writes or flushes that did not succeed */
};

static void *mt_main(void *arg)
{
    struct mt_thread *t = arg;
    for (unsigned r = 0; r <= MT_ROUNDS; r++) {
        if (r < MT_ROUNDS) {
            struct blk_req *ptrs[MT_BATCH];
            waiter_init(&t->w[r]);
            for (unsigned j = 0; j < MT_BATCH; j++) {
                unsigned i = r * MT_BATCH + j;
                if (blk_write_count(t->dev) >= t->cut_at)
                    t->fate[i] = FATE_DROPPED;
                t->reqs[i] = make_req(BLK_WRITE, (t->first_block + i) * BLK, BLK,
                                      t->data + (size_t)i * BLK, &t->w[r]);
                ptrs[j] = &t->reqs[i];
                /* one at a time, so the count read above covers this very write */
                if (blk_submit(t->dev, &ptrs[j], 1) != 0)
                    t->failed++;
            }
        }
        if (r == 0)
            continue;
        /* the previous batch has completed: a flush now covers it */
        waiter_wait(&t->w[r - 1], MT_BATCH);
        if (blk_flush(t->dev) != 0)
            t->failed++;
        if (blk_write_count(t->dev) < t->cut_at)
            for (unsigned j = 0; j < MT_BATCH; j++)
                t->fate[(r - 1) * MT_BATCH + j] = FATE_DURABLE;
    }
    for (unsigned i = 0; i < MT_WRITES; i++)
        t->failed += t->reqs[i].result != BLK;
    for (unsigned r = 0; r < MT_ROUNDS; r++)
        waiter_fini(&t->w[r]);
    return NULL;
}

static void test_threads_in_flight(void)
{
    for (unsigned run = 0; run < 3; run++) {
        uint64_t cut_at = 1 + rnd() % (MT_THREADS * MT_WRITES);
        struct blk_dev *dev = open_cut(cut_at);
        struct mt_thread *t = calloc(MT_THREADS, sizeof(*t));
        for (unsigned k = 0; k < MT_THREADS; k++) {
            t[k].dev = dev;
            t[k].cut_at = cut_at;
            t[k].first_block = 8 + k * MT_WRITES;
            t[k].data = blk_alloc_buf((size_t)MT_WRITES * BLK);
            fill_random(t[k].data, (size_t)MT_WRITES * BLK);
        }
        for (unsigned k = 0; k < MT_THREADS; k++)
            pthread_create(&t[k].th, NULL, mt_main, &t[k]);
        for (unsigned k = 0; k < MT_THREADS; k++)
            pthread_join(t[k].th, NULL);
        CHECK(blk_powercut_happened(dev));
        CHECK_EQ(blk_write_count(dev), MT_THREADS * MT_WRITES);
        CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), MT_THREADS * MT_WRITES - cut_at + 1);
        uint64_t inflight_max = stat_of(dev, "blk.inflight_max");
        uint8_t *img = close_and_read(dev);
        unsigned failed = 0, wrong = 0, open_kept = 0, open_lost = 0;
        unsigned durable = 0, dropped = 0;
        for (unsigned k = 0; k < MT_THREADS; k++) {
            failed += t[k].failed;
            for (unsigned i = 0; i < MT_WRITES; i++) {
                uint64_t b = t[k].first_block + i;
                bool is_new = memcmp(img + b * BLK, t[k].data + (size_t)i * BLK, BLK) == 0;
                bool is_old = range_has_pattern(img + b * BLK, b * BLK, BLK);
                switch (t[k].fate[i]) {
                case FATE_DURABLE:
                    durable++;
                    wrong += !is_new;
                    break;
                case FATE_DROPPED:
                    dropped++;
                    wrong += !is_old;
                    break;
                default:
                    wrong += !is_new && !is_old;
                    open_kept += is_new;
                    open_lost += is_old;
                }
            }
            free(t[k].data);
        }
        CHECK_EQ(failed, 0);
        CHECK_EQ(wrong, 0);
        CHECK(range_has_pattern(img, 0, 8 * BLK));
        uint64_t end = (8 + MT_THREADS * MT_WRITES) * BLK;
        CHECK(range_has_pattern(img + end, end, IMG_SIZE - end));
        printf("     cut at %llu: %u durable, %u dropped, %u undecided (%u kept, %u undone), "
               "inflight_max %llu\n",
               (unsigned long long)cut_at, durable, dropped, open_kept + open_lost, open_kept,
               open_lost, (unsigned long long)inflight_max);
        free(img);
        free(t);
    }
}

/* (7) The cut made from done() on the uring completion thread, with other writes in flight
 * there: it cannot wait for them, so the last of them to complete carries out the undo. */
enum { CHAINS = 4, CHAIN_LEN = 64 };

struct chain {
    struct blk_dev *dev;
    struct blk_req req;
    uint8_t *buf;
    uint64_t first_block;
    unsigned sent;
    unsigned failed;
    struct waiter *w;
};

static void chain_done(struct blk_req *req)
{
    struct chain *c = req->private;
    if (req->result != BLK)
        c->failed++;
    if (c->sent < CHAIN_LEN) {
        req->off = (c->first_block + c->sent++) * BLK;
        struct blk_req *p = req;
        if (blk_submit(c->dev, &p, 1) == 0)
            return;
        c->failed++;
    }
    waiter_done(&(struct blk_req){.private = c->w});
}

static void test_cut_from_completion(void)
{
    uint64_t cut_at = CHAINS + 1 + rnd() % (CHAINS * CHAIN_LEN - CHAINS);
    struct blk_dev *dev = open_cut(cut_at);
    struct waiter w;
    waiter_init(&w);
    struct chain c[CHAINS];
    struct blk_req *first[CHAINS];
    for (unsigned k = 0; k < CHAINS; k++) {
        c[k] = (struct chain){.dev = dev, .first_block = 16 + k * CHAIN_LEN, .sent = 1, .w = &w};
        c[k].buf = blk_alloc_buf(BLK);
        fill_random(c[k].buf, BLK);
        c[k].req = (struct blk_req){.op = BLK_WRITE,
                                    .off = c[k].first_block * BLK,
                                    .len = BLK,
                                    .buf = c[k].buf,
                                    .done = chain_done,
                                    .private = &c[k]};
        first[k] = &c[k].req;
    }
    CHECK_EQ(blk_submit(dev, first, CHAINS), 0);
    waiter_wait(&w, CHAINS);
    waiter_fini(&w);
    CHECK(blk_powercut_happened(dev));
    CHECK_EQ(blk_write_count(dev), CHAINS * CHAIN_LEN);
    CHECK_EQ(stat_of(dev, "blk.powercut.dropped_writes"), CHAINS * CHAIN_LEN - cut_at + 1);
    uint8_t *img = close_and_read(dev);
    /* nothing was flushed: the cut undoes every write */
    CHECK(range_has_pattern(img, 0, IMG_SIZE));
    for (unsigned k = 0; k < CHAINS; k++) {
        CHECK_EQ(c[k].failed, 0);
        free(c[k].buf);
    }
    free(img);
}

/* ---- main -------------------------------------------------------------------------- */

static bool memory_backed(const char *dir)
{
    struct statfs sfs;
    return statfs(dir, &sfs) != 0 || sfs.f_type == TMPFS_MAGIC || sfs.f_type == RAMFS_MAGIC;
}

static void pick_dir(void)
{
    const char *candidates[] = {getenv("F2FUSE_TEST_DIR"), getenv("TMPDIR"), "/var/tmp", "/tmp"};
    for (unsigned i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
        const char *d = candidates[i];
        if (d && *d && access(d, W_OK) == 0 && !memory_backed(d)) {
            env.dir = d;
            env.dir_direct = true;
            return;
        }
    }
    env.dir = "/tmp";
    env.dir_direct = false;
    printf("note: no disk-backed scratch directory; the uring cases run as psync\n");
}

int main(void)
{
    const char *seed_env = getenv("F2FUSE_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL);
    printf("seed=%llu (F2FUSE_SEED to replay)\n", (unsigned long long)seed);
    pick_dir();
    printf("scratch dir: %s\n", env.dir);

    const char *backends[] = {"uring", "psync"};
    for (unsigned i = 0; i < 2; i++) {
        env.backend = backends[i];
        /* the same random choices for both backends */
        env.rng = seed * 0x9e3779b97f4a7c15ull | 1;
        printf("== backend %s\n", env.backend);
        RUN(test_undo_after_flush);
        RUN(test_all_flushed_kept);
        RUN(test_torn_deterministic);
        RUN(test_after_cut_inert);
        RUN(test_counters);
        RUN(test_overlapping_undo_order);
        RUN(test_flush_before_completion);
        RUN(test_random_sequences);
        RUN(test_random_sequences_torn);
        RUN(test_threads_in_flight);
        RUN(test_cut_from_completion);
        RUN(test_fua_survives);
    }
    return CHECK_DONE();
}
