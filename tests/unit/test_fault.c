/* Faults through the library API on real mkfs.f2fs images: the fault= option, and the mount's
 * answers to injected I/O errors and allocation failures (docs/ARCHITECTURE.md, "Faults and
 * hostile images").  Each case is a regression test of a bug that fault injection found or a
 * rule of the policy. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blk/blk_fault.h"
#include "check.h"
#include "api/api.h"
#include "f2fuse_test.h"

static char img[256];

static void fresh_image(void)
{
    CHECK_EQ(sh("rm -f %s && truncate -s 128M %s && mkfs.f2fs -f %s >/dev/null", img, img, img), 0);
}

/* cache_size 0: the default (auto) */
static struct f2fuse *open_rw_cache(const char *fault, uint64_t cache_size)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.backend = "psync";
    o.read_only = false;
    o.checkpoint_interval = 0;
    if (cache_size)
        o.cache_size = cache_size;
    struct f2fuse_test_options t = {0};
    if (fault)
        CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", fault), 0);
    struct f2fuse *fs = NULL;
    int err = f2fuse_open_test(img, &o, &t, &fs);
    return err ? NULL : fs;
}

static struct f2fuse *open_rw(const char *fault)
{
    return open_rw_cache(fault, 0);
}

static void fault_option_parses(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    struct f2fuse_test_options t = {0};
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write:5"), 0);
    CHECK_EQ(t.faults[0].kind, F2FUSE_FAULT_WRITE);
    CHECK_EQ(t.faults[0].nth, 5);
    CHECK_EQ(t.faults[0].err, EIO);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "read:3:short:sticky"), 0);
    CHECK(t.faults[1].short_io && t.faults[1].sticky);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "flush:1:ENOSPC"), 0);
    CHECK_EQ(t.faults[2].err, ENOSPC);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "alloc:9"), 0);
    CHECK_EQ(t.faults[3].err, ENOMEM);
    CHECK_EQ(t.nfaults, 4);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write:1"), -EINVAL); /* the fifth */
    t = (struct f2fuse_test_options){0};
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", NULL), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write:0"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "seek:1"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "flush:1:short"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write:1:EBOGUS"), -EINVAL);
    CHECK_EQ(t.nfaults, 0);
}

/* The power-cut options go to the test options; the library's own parser does not know
 * them, and the test parser hands every other option to it. */
static void test_options_stay_apart(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    struct f2fuse_test_options t = {0};
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut", "12"), 0);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut_seed", "7"), 0);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut_torn", NULL), 0);
    CHECK_EQ(t.powercut_after, 12);
    CHECK_EQ(t.powercut_seed, 7);
    CHECK(t.powercut_torn);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut", NULL), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut_seed", "x"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut_torn", "1"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "rw", NULL), 0);
    CHECK(!o.read_only);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "bogus", NULL), -ENOENT);
    CHECK_EQ(f2fuse_option_set(&o, "powercut", "12"), -ENOENT);
    CHECK_EQ(f2fuse_option_set(&o, "powercut_torn", NULL), -ENOENT);
    CHECK_EQ(f2fuse_option_set(&o, "fault", "write:5"), -ENOENT);
}

/* A write whose page allocation fails part-way returns the bytes it copied, and the file's
 * size covers them, so that the next fsync keeps them (it used to leave the size behind). */
static void short_write_keeps_its_size(void)
{
    fresh_image();
    struct f2fuse *fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mknod(fs, f2fuse_root_ino(fs), "f", 1, 0100644, 0, 0, 0, &a), 0);
    static uint8_t buf[64 << 10], back[64 << 10];
    memset(buf, 0x3c, sizeof(buf));
    pcache_inject_enomem(fs->cache, 6, false);
    ssize_t n = f2fuse_write(fs, a.ino, buf, sizeof(buf), 0);
    CHECK(n > 0 && n < (ssize_t)sizeof(buf));
    CHECK_EQ(f2fuse_getattr(fs, a.ino, &a), 0);
    CHECK_EQ(a.size, n);
    CHECK_EQ(f2fuse_fsync(fs, a.ino, false), 0);
    f2fuse_close(fs);
    fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    CHECK_EQ(f2fuse_lookup(fs, f2fuse_root_ino(fs), "f", 1, &a), 0);
    CHECK_EQ(a.size, n);
    CHECK_EQ(f2fuse_read(fs, a.ino, back, sizeof(back), 0), n);
    CHECK(memcmp(back, buf, (size_t)(n > 0 ? n : 0)) == 0);
    f2fuse_close(fs);
}

static void count_bad_puts(void *arg, const char *name, uint64_t value)
{
    if (strcmp(name, "cache.bad_puts") == 0)
        *(uint64_t *)arg = value;
}

/* A library caller that names a regular file as the parent gets ENOTDIR from every
 * namespace operation, and the file's inode page is released once, not twice (get_dir
 * released it and left the caller's pointer set). */
static void non_directory_parent(void)
{
    fresh_image();
    struct f2fuse *fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    struct f2fuse_attr a, b;
    CHECK_EQ(f2fuse_mknod(fs, f2fuse_root_ino(fs), "f", 1, 0100644, 0, 0, 0, &a), 0);
    CHECK_EQ(f2fuse_mknod(fs, a.ino, "g", 1, 0100644, 0, 0, 0, &b), -ENOTDIR);
    CHECK_EQ(f2fuse_mkdir(fs, a.ino, "d", 1, 0755, 0, 0, &b), -ENOTDIR);
    CHECK_EQ(f2fuse_unlink(fs, a.ino, "g", 1), -ENOTDIR);
    CHECK_EQ(f2fuse_rmdir(fs, a.ino, "d", 1), -ENOTDIR);
    CHECK_EQ(f2fuse_rename(fs, a.ino, "g", 1, f2fuse_root_ino(fs), "h", 1, 0), -ENOTDIR);
    CHECK_EQ(f2fuse_rename(fs, f2fuse_root_ino(fs), "f", 1, a.ino, "h", 1, 0), -ENOTDIR);
    uint64_t bad = 0;
    f2fuse_stats(fs, count_bad_puts, &bad);
    CHECK_EQ(bad, 0);
    CHECK_EQ(f2fuse_getattr(fs, a.ino, &b), 0); /* the page is still good */
    f2fuse_close(fs);
}

/* A read error on a checkpoint pack refuses the mount: the other pack may be older. */
static void unreadable_checkpoint_refuses_mount(void)
{
    fresh_image();
    struct f2fuse *fs = open_rw(NULL); /* make pack 2 the newer one */
    CHECK(fs != NULL);
    f2fuse_close(fs);
    /* read 1: both superblocks; 2: pack 1; 3: its last block; 4: pack 2 */
    for (int nth = 2; nth <= 4; nth++) {
        char fault[32];
        snprintf(fault, sizeof(fault), "read:%d", nth);
        fs = open_rw(fault);
        CHECK(fs == NULL);
        f2fuse_close(fs);
    }
    fs = open_rw(NULL);
    CHECK(fs != NULL);
    f2fuse_close(fs);
}

/* An operation that fails part-way turns the mount read-only: later changes get EIO, reads
 * go on, and the image keeps its last checkpoint. */
static void failed_operation_turns_read_only(void)
{
    fresh_image();
    struct f2fuse *fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    uint32_t root = f2fuse_root_ino(fs);
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mkdir(fs, root, "kept", 4, 0755, 0, 0, &a), 0);
    CHECK_EQ(f2fuse_sync(fs), 0);
    pcache_inject_enomem(fs->cache, 1, true);
    CHECK_EQ(f2fuse_mkdir(fs, root, "lost", 4, 0755, 0, 0, &a), -ENOMEM);
    pcache_inject_enomem(fs->cache, 0, false);
    CHECK_EQ(f2fuse_mkdir(fs, root, "later", 5, 0755, 0, 0, &a), -EIO);
    CHECK_EQ(f2fuse_sync(fs), -EIO);
    CHECK_EQ(f2fuse_lookup(fs, root, "kept", 4, &a), 0);
    f2fuse_close(fs);
    fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    CHECK_EQ(f2fuse_lookup(fs, root, "kept", 4, &a), 0);
    CHECK_EQ(f2fuse_lookup(fs, root, "lost", 4, &a), -ENOENT);
    f2fuse_close(fs);
}

/* A failed checkpoint write: the sync reports it, the mount turns read-only, and the image
 * still mounts with what the previous checkpoint held. */
static void failed_checkpoint_keeps_previous(void)
{
    fresh_image();
    struct f2fuse *fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    uint32_t root = f2fuse_root_ino(fs);
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mkdir(fs, root, "one", 3, 0755, 0, 0, &a), 0);
    CHECK_EQ(f2fuse_sync(fs), 0);
    CHECK_EQ(f2fuse_mkdir(fs, root, "two", 3, 0755, 0, 0, &a), 0);
    blk_inject_fault(fs->dev, BLK_WRITE, 3, EIO);
    CHECK_EQ(f2fuse_sync(fs), -EIO);
    CHECK_EQ(f2fuse_mkdir(fs, root, "three", 5, 0755, 0, 0, &a), -EIO);
    CHECK_EQ(f2fuse_lookup(fs, root, "two", 3, &a), 0); /* reads go on */
    f2fuse_close(fs);
    fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    CHECK_EQ(f2fuse_lookup(fs, root, "one", 3, &a), 0);
    CHECK_EQ(f2fuse_lookup(fs, root, "two", 3, &a), -ENOENT);
    f2fuse_close(fs);
    CHECK_EQ(sh("fsck.f2fs --dry-run %s >/dev/null 2>&1", img), 0);
}

struct counter {
    const char *name;
    uint64_t value;
};

static void read_counter(void *arg, const char *name, uint64_t value)
{
    struct counter *c = arg;
    if (strcmp(name, c->name) == 0)
        c->value = value;
}

struct writer {
    struct f2fuse *fs;
    uint32_t ino;
    const void *buf;
    size_t size;
    uint64_t off;
    ssize_t result;
    atomic_bool done;
};

static void *writer_main(void *arg)
{
    struct writer *w = arg;
    w->result = f2fuse_write(w->fs, w->ino, w->buf, w->size, w->off);
    atomic_store(&w->done, true);
    return NULL;
}

/* A writer at the hard dirty limit while every allocation fails: the flusher cannot load the
 * node of the dirty page, and the checkpoint it asks for instead is postponed (no memory for
 * the orphan list) and leaves the mount writable.  The write waited for room for ever
 * (test_faults, model case seed 92241955 fault=alloc:2033:sticky: the daemon hung until the
 * watchdog killed it); now it fails with ENOMEM, and what was synced stays. */
static void write_at_dirty_limit_while_writeback_fails(void)
{
    fresh_image();
    struct f2fuse *fs = open_rw_cache(NULL, 1 << 20); /* a hard limit of 200 KiB */
    CHECK(fs != NULL);
    if (!fs)
        return;
    uint32_t root = f2fuse_root_ino(fs);
    struct f2fuse_attr a, b;
    CHECK_EQ(f2fuse_mknod(fs, root, "a", 1, 0100644, 0, 0, 0, &a), 0);
    CHECK_EQ(f2fuse_mknod(fs, root, "b", 1, 0100644, 0, 0, 0, &b), 0);
    static uint8_t buf[1 << 20], back[1 << 20];
    memset(buf, 0x6e, sizeof(buf));
    for (uint64_t mib = 0; mib < 4; mib++) {
        CHECK_EQ(f2fuse_write(fs, a.ino, buf, sizeof(buf), mib << 20), sizeof(buf));
        CHECK_EQ(f2fuse_write(fs, b.ino, buf, sizeof(buf), mib << 20), sizeof(buf));
    }
    CHECK_EQ(f2fuse_sync(fs), 0);
    /* Block 1000 is in a's direct node, which an overwrite leaves clean; reading b pushes
     * that node out of the cache, so the flusher must allocate to write the page back.
     * 64 KiB stays below the background threshold: the flusher waits for the writer. */
    CHECK_EQ(f2fuse_write(fs, a.ino, buf, 64 << 10, 1000 * 4096), 64 << 10);
    for (uint64_t mib = 0; mib < 4; mib++)
        CHECK_EQ(f2fuse_read(fs, b.ino, back, sizeof(back), mib << 20), sizeof(back));
    pcache_inject_enomem(fs->cache, 1, true);
    struct writer w = {.fs = fs, .ino = a.ino, .buf = buf, .size = sizeof(buf), .off = 8 << 20};
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, writer_main, &w), 0);
    for (int i = 0; i < 600 && !atomic_load(&w.done); i++)
        usleep(100000);
    if (!atomic_load(&w.done)) { /* the mount cannot be closed under a hung writer */
        fprintf(stderr, "%s: the write at the dirty limit hangs\n", __func__);
        fflush(NULL);
        _exit(1);
    }
    pthread_join(thread, NULL);
    CHECK_EQ(w.result, -ENOMEM);
    struct counter gave_up = {"wb.throttle.limit_failures", 0};
    f2fuse_stats(fs, read_counter, &gave_up);
    CHECK(gave_up.value > 0); /* the write failed where it waited, not later */
    pcache_inject_enomem(fs->cache, 0, false);
    f2fuse_close(fs);
    fs = open_rw(NULL);
    CHECK(fs != NULL);
    if (!fs)
        return;
    CHECK_EQ(f2fuse_lookup(fs, root, "b", 1, &b), 0);
    CHECK_EQ(b.size, 4 << 20);
    CHECK_EQ(f2fuse_read(fs, b.ino, back, sizeof(back), 3 << 20), sizeof(back));
    CHECK(memcmp(back, buf, sizeof(back)) == 0);
    f2fuse_close(fs);
    CHECK_EQ(sh("fsck.f2fs --dry-run %s >/dev/null 2>&1", img), 0);
}

int main(void)
{
    if (!getenv("F2FUSE_LOG"))
        setenv("F2FUSE_LOG", "none", 1); /* the failures below are wanted */
    const char *tmp = getenv("TMPDIR");
    snprintf(img, sizeof(img), "%s/f2fuse-test-fault.%d.img", tmp ? tmp : "/var/tmp",
             (int)getpid());
    RUN(fault_option_parses);
    RUN(test_options_stay_apart);
    RUN(short_write_keeps_its_size);
    RUN(unreadable_checkpoint_refuses_mount);
    RUN(failed_operation_turns_read_only);
    RUN(failed_checkpoint_keeps_previous);
    RUN(non_directory_parent);
    RUN(write_at_dirty_limit_while_writeback_fails);
    unlink(img);
    return CHECK_DONE();
}
