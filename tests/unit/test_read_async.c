/* f2fuse_read_async (src/api/read.c, data_read_start): the same bytes as f2fuse_read for every
 * kind of range (blocks on disk, holes, pages newer than the disk, inline data, the end of
 * the file, ranges it hands to the blocking way), on the io_uring backend where the read
 * finishes on the reaper thread; and a checkpoint waits for a read still in flight. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "check.h"

static char img[256];

static struct f2fuse *open_rw(const char *backend)
{
    CHECK_EQ(sh("rm -f %s && truncate -s 128M %s && mkfs.f2fs -f %s >/dev/null", img, img, img), 0);
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.backend = backend;
    o.read_only = false;
    o.checkpoint_interval = 0;
    struct f2fuse *fs = NULL;
    return f2fuse_open(img, &o, &fs) ? NULL : fs;
}

/* One async read's outcome, and a gate its done() may be held at. */
struct waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done, hold, in_done;
    ssize_t result;
};

static void waiter_init(struct waiter *w)
{
    *w = (struct waiter){.result = -1};
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
}

static void read_done(void *arg, ssize_t result)
{
    struct waiter *w = arg;
    pthread_mutex_lock(&w->lock);
    w->in_done = true;
    pthread_cond_broadcast(&w->cond);
    while (w->hold)
        pthread_cond_wait(&w->cond, &w->lock);
    w->result = result;
    w->done = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* f2fuse_read_async's result, waited for when it came later (*later says so). */
static ssize_t read_async(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off,
                          bool *later)
{
    struct waiter w;
    waiter_init(&w);
    ssize_t n = f2fuse_read_async(fs, ino, buf, size, off, read_done, &w);
    *later = n == -EINPROGRESS;
    if (n == -EINPROGRESS) {
        pthread_mutex_lock(&w.lock);
        while (!w.done)
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        n = w.result;
    }
    return n;
}

enum way { NOW, LATER }; /* what f2fuse_read_async should do with the range */

/* Both ways give the same count and bytes for [off, off + size). */
static void same_as_read(struct f2fuse *fs, uint32_t ino, size_t size, uint64_t off, enum way way)
{
    bool later;
    uint8_t *a = malloc(size + 1), *b = malloc(size + 1);
    memset(a, 0xa5, size + 1);
    memset(b, 0x5a, size + 1);
    ssize_t na = f2fuse_read(fs, ino, a, size, off);
    ssize_t nb = read_async(fs, ino, b, size, off, &later);
    CHECK_EQ(nb, na);
    CHECK_EQ(later, way == LATER);
    if (na > 0)
        CHECK(memcmp(a, b, (size_t)na) == 0);
    free(a);
    free(b);
}

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i * 31 + seed + i / 4096);
}

static void same_bytes_as_read(void)
{
    struct f2fuse *fs = open_rw("uring"); /* done() on the reaper thread */
    CHECK(fs != NULL);
    if (!fs)
        return;
    uint32_t root = f2fuse_root_ino(fs);
    struct f2fuse_attr a, small, dir;
    CHECK_EQ(f2fuse_mknod(fs, root, "f", 1, 0100644, 0, 0, 0, &a), 0);
    CHECK_EQ(f2fuse_mknod(fs, root, "small", 5, 0100644, 0, 0, 0, &small), 0);
    CHECK_EQ(f2fuse_mkdir(fs, root, "d", 1, 040755, 0, 0, &dir), 0);
    static uint8_t data[256 << 10];
    fill(data, sizeof(data), 1);
    /* blocks 0..63 data, 64..127 a hole, 128..191 data */
    CHECK_EQ(f2fuse_write(fs, a.ino, data, 64 << 12, 0), 64 << 12);
    CHECK_EQ(f2fuse_write(fs, a.ino, data, 64 << 12, 128 << 12), 64 << 12);
    CHECK_EQ(f2fuse_write(fs, small.ino, "inline bytes", 12, 0), 12);
    CHECK_EQ(f2fuse_sync(fs), 0); /* on the disk now */
    fill(data, 4096, 7);
    CHECK_EQ(f2fuse_write(fs, a.ino, data, 4096, 5 << 12), 4096); /* newer than the disk */
    CHECK_EQ(f2fuse_write(fs, a.ino, data, 100, 150 << 12), 100);

    same_as_read(fs, a.ino, 4096, 0, LATER);              /* one block on disk */
    same_as_read(fs, a.ino, 4096, 3 << 12, LATER);        /* another */
    same_as_read(fs, a.ino, 1000, 10 * 4096 + 77, LATER); /* inside a block */
    same_as_read(fs, a.ino, 4096, 5 << 12, NOW);          /* the cached page alone */
    same_as_read(fs, a.ino, 3 * 4096, 4 << 12, NOW);      /* disk, cache, disk: the blocking way */
    same_as_read(fs, a.ino, 2 * 4096, 5 << 12, LATER);    /* cache, then disk */
    same_as_read(fs, a.ino, 4096, 80 << 12, NOW);         /* a hole */
    same_as_read(fs, a.ino, 8 * 4096, 60 << 12, LATER);   /* data, then the hole */
    same_as_read(fs, a.ino, 128 << 10, 8 << 12, LATER);   /* 32 blocks */
    same_as_read(fs, a.ino, (1 << 20) + 4096, 0, NOW);    /* more than one chunk */
    same_as_read(fs, a.ino, 8192, (192 << 12) - 4096, LATER); /* past the end */
    same_as_read(fs, a.ino, 4096, 192 << 12, NOW);            /* at the end */
    same_as_read(fs, a.ino, 4096, 1 << 30, NOW);              /* far past it */
    same_as_read(fs, a.ino, 0, 0, NOW);                       /* nothing */
    same_as_read(fs, small.ino, 4096, 0, NOW);                /* inline data */
    same_as_read(fs, small.ino, 4096, 3, NOW);
    uint8_t buf[64];
    bool later;
    CHECK_EQ(read_async(fs, dir.ino, buf, sizeof(buf), 0, &later), -EISDIR);
    f2fuse_close(fs);
}

static void *sync_thread(void *arg)
{
    struct f2fuse *fs = arg;
    return (void *)(intptr_t)f2fuse_sync(fs);
}

struct held_read {
    struct f2fuse *fs;
    uint32_t ino;
    uint8_t *buf;
    struct waiter w;
    ssize_t returned;
};

/* psync completes a read inside the submitting call: this thread holds it in done(). */
static void *held_read_thread(void *arg)
{
    struct held_read *h = arg;
    h->returned = f2fuse_read_async(h->fs, h->ino, h->buf, 4096, 2 << 12, read_done, &h->w);
    return NULL;
}

/* A read's block must not be reused while it is on the device: freed blocks become free at
 * a checkpoint, so a checkpoint waits until every async read is done (read_pins_drain). */
static void checkpoint_waits_for_reads_in_flight(void)
{
    struct f2fuse *fs = open_rw("psync");
    CHECK(fs != NULL);
    if (!fs)
        return;
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mknod(fs, f2fuse_root_ino(fs), "f", 1, 0100644, 0, 0, 0, &a), 0);
    static uint8_t data[16 << 12], back[4096];
    fill(data, sizeof(data), 3);
    CHECK_EQ(f2fuse_write(fs, a.ino, data, sizeof(data), 0), (ssize_t)sizeof(data));
    CHECK_EQ(f2fuse_sync(fs), 0);

    struct held_read h = {.fs = fs, .ino = a.ino, .buf = back};
    waiter_init(&h.w);
    h.w.hold = true; /* its done() waits until released: the read stays in flight */
    pthread_t reader, syncer;
    CHECK_EQ(pthread_create(&reader, NULL, held_read_thread, &h), 0);
    pthread_mutex_lock(&h.w.lock);
    while (!h.w.in_done)
        pthread_cond_wait(&h.w.cond, &h.w.lock);
    pthread_mutex_unlock(&h.w.lock);
    /* rewritten, its old block freed: the next checkpoint would make that block free */
    CHECK_EQ(f2fuse_write(fs, a.ino, data + 4096, 4096, 2 << 12), 4096);
    CHECK_EQ(pthread_create(&syncer, NULL, sync_thread, fs), 0);
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    void *ret = NULL;
    CHECK_EQ(pthread_tryjoin_np(syncer, &ret), EBUSY); /* waiting for the read */
    pthread_mutex_lock(&h.w.lock);
    h.w.hold = false;
    pthread_cond_broadcast(&h.w.cond);
    pthread_mutex_unlock(&h.w.lock);
    CHECK_EQ(pthread_join(reader, NULL), 0);
    CHECK_EQ(pthread_join(syncer, &ret), 0);
    CHECK_EQ((intptr_t)ret, 0);
    CHECK_EQ(h.returned, -EINPROGRESS);
    CHECK_EQ(h.w.result, 4096);
    CHECK(memcmp(back, data + 2 * 4096, 4096) == 0);
    f2fuse_close(fs);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(img, sizeof(img), "%s/f2fuse-test-read-async.%d.img", tmp ? tmp : "/var/tmp",
             (int)getpid());
    RUN(same_bytes_as_read);
    RUN(checkpoint_waits_for_reads_in_flight);
    unlink(img);
    return CHECK_DONE();
}
