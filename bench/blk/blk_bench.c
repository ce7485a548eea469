/* blk_bench: drives the block layer the way fio drives a device, for bench/blk/run.sh.
 *
 *   blk_bench --backend uring|psync --file F --size BYTES --rw randread|randwrite|read|write
 *             --bs 4096 --qd N --seconds S
 *
 * Keeps qd requests in flight through blk_submit: each done() issues the slot's next
 * request right away when it runs on the backend's completion thread; when it runs inline
 * (psync) the main loop reissues it, so the stack does not grow.  Prints one line:
 *   backend=... rw=... bs=... qd=... ops=... iops=... mbps=... cpu=...
 * where mbps is 10^6 bytes per second and cpu is user+system time over wall time, in %. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "blk/blk.h"

struct bench;

struct slot {
    struct blk_req req;
    struct bench *bench;
    uint64_t rng;
    struct slot *next_ready; /* inline completions waiting to be reissued */
};

struct bench {
    struct blk_dev *dev;
    enum blk_op op;
    bool random;
    uint64_t bs, span_blocks;
    atomic_uint_fast64_t seq_next; /* next block for sequential runs */
    atomic_uint_fast64_t ops, bytes, errors;
    atomic_bool stop;
    pthread_t main_thread;
    struct slot *ready; /* main thread only */
    /* the main thread waits here for the last slot to come home */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    unsigned outstanding;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static uint64_t next_block(struct bench *b, struct slot *s)
{
    if (!b->random)
        return atomic_fetch_add(&b->seq_next, 1) % b->span_blocks;
    s->rng ^= s->rng << 13; /* xorshift64: per slot, so threads never share state */
    s->rng ^= s->rng >> 7;
    s->rng ^= s->rng << 17;
    return s->rng % b->span_blocks;
}

static void slot_retire(struct bench *b)
{
    pthread_mutex_lock(&b->lock);
    if (--b->outstanding == 0)
        pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

static void slot_done(struct blk_req *req)
{
    struct slot *s = req->private;
    struct bench *b = s->bench;
    if (atomic_load(&b->stop)) {
        slot_retire(b);
        return;
    }
    if (req->result == (int64_t)req->len) {
        atomic_fetch_add(&b->ops, 1);
        atomic_fetch_add(&b->bytes, req->len);
    } else {
        atomic_fetch_add(&b->errors, 1);
    }
    if (pthread_equal(pthread_self(), b->main_thread)) {
        s->next_ready = b->ready;
        b->ready = s;
        return;
    }
    req->off = next_block(b, s) * b->bs;
    struct blk_req *p = req;
    if (blk_submit(b->dev, &p, 1) != 0) {
        atomic_fetch_add(&b->errors, 1);
        slot_retire(b);
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: blk_bench --backend uring|psync --file F --size BYTES "
                    "--rw randread|randwrite|read|write --bs BYTES --qd N --seconds S\n");
    exit(2);
}

static uint64_t parse_size(const char *s)
{
    char *end;
    uint64_t v = strtoull(s, &end, 0);
    switch (*end) {
    case 'k':
    case 'K': return v << 10;
    case 'm':
    case 'M': return v << 20;
    case 'g':
    case 'G': return v << 30;
    default: return v;
    }
}

int main(int argc, char **argv)
{
    const char *backend = "uring", *file = NULL, *rw = "randread";
    uint64_t size = 0, bs = 4096;
    unsigned qd = 1;
    double seconds = 5;
    static const struct option longopts[] = {
        {"backend", required_argument, NULL, 'b'}, {"file", required_argument, NULL, 'f'},
        {"size", required_argument, NULL, 's'},    {"rw", required_argument, NULL, 'r'},
        {"bs", required_argument, NULL, 'B'},      {"qd", required_argument, NULL, 'q'},
        {"seconds", required_argument, NULL, 't'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': backend = optarg; break;
        case 'f': file = optarg; break;
        case 's': size = parse_size(optarg); break;
        case 'r': rw = optarg; break;
        case 'B': bs = parse_size(optarg); break;
        case 'q': qd = (unsigned)strtoul(optarg, NULL, 0); break;
        case 't': seconds = strtod(optarg, NULL); break;
        default: usage();
        }
    }
    if (!file || !bs || !qd || seconds <= 0)
        usage();

    struct bench b = {.bs = bs};
    if (strcmp(rw, "randread") == 0)
        b.op = BLK_READ, b.random = true;
    else if (strcmp(rw, "randwrite") == 0)
        b.op = BLK_WRITE, b.random = true;
    else if (strcmp(rw, "read") == 0)
        b.op = BLK_READ;
    else if (strcmp(rw, "write") == 0)
        b.op = BLK_WRITE;
    else
        usage();

    /* the library's default ring (64) unless more slots than that are asked for */
    struct blk_options opts = {.backend = backend, .queue_depth = qd > 64 ? qd : 0};
    int ret = blk_open(file, &opts, &b.dev);
    if (ret < 0) {
        fprintf(stderr, "blk_open %s: %s\n", file, strerror(-ret));
        return 1;
    }
    if (!size || size > blk_size(b.dev))
        size = blk_size(b.dev);
    b.span_blocks = size / bs;
    if (!b.span_blocks) {
        fprintf(stderr, "size smaller than one block\n");
        return 2;
    }
    b.main_thread = pthread_self();
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.cond, NULL);

    struct slot *slots = calloc(qd, sizeof(*slots));
    uint8_t *bufs = blk_alloc_buf(qd * bs);
    if (!slots || !bufs)
        return 1;
    for (size_t i = 0; i < qd * bs; i++)
        bufs[i] = (uint8_t)(i * 7 + 1);
    struct blk_req **batch = calloc(qd, sizeof(*batch));
    for (unsigned i = 0; i < qd; i++) {
        struct slot *s = &slots[i];
        s->bench = &b;
        s->rng = 0x9e3779b97f4a7c15ull * (i + 1) ^ (uint64_t)time(NULL);
        s->req = (struct blk_req){.op = b.op,
                                  .off = next_block(&b, s) * bs,
                                  .len = bs,
                                  .buf = bufs + (size_t)i * bs,
                                  .done = slot_done,
                                  .private = s};
        batch[i] = &s->req;
    }
    b.outstanding = qd;

    double cpu0 = cpu_seconds(), t0 = now_seconds(), deadline = t0 + seconds;
    if ((ret = blk_submit(b.dev, batch, qd)) < 0) {
        fprintf(stderr, "blk_submit: %s\n", strerror(-ret));
        return 1;
    }
    /* inline completions come back here; async ones reissue themselves */
    while (now_seconds() < deadline) {
        if (!b.ready) {
            struct timespec nap = {.tv_nsec = 20 * 1000 * 1000};
            nanosleep(&nap, NULL);
            continue;
        }
        for (unsigned k = 0; k < 256 && b.ready; k++) {
            struct slot *s = b.ready;
            b.ready = s->next_ready;
            s->req.off = next_block(&b, s) * bs;
            struct blk_req *p = &s->req;
            if (blk_submit(b.dev, &p, 1) != 0)
                return 1;
        }
    }
    atomic_store(&b.stop, true);
    double t1 = now_seconds(), cpu1 = cpu_seconds();
    uint64_t ops = atomic_load(&b.ops), bytes = atomic_load(&b.bytes);
    /* slots parked on the ready list are home already */
    for (struct slot *s = b.ready; s; s = s->next_ready)
        slot_retire(&b);
    pthread_mutex_lock(&b.lock);
    while (b.outstanding)
        pthread_cond_wait(&b.cond, &b.lock);
    pthread_mutex_unlock(&b.lock);

    double wall = t1 - t0;
    printf("backend=%s rw=%s bs=%llu qd=%u seconds=%.2f ops=%llu iops=%.0f mbps=%.1f "
           "cpu=%.1f errors=%llu\n",
           blk_backend_name(b.dev), rw, (unsigned long long)bs, qd, wall, (unsigned long long)ops,
           (double)ops / wall, (double)bytes / wall / 1e6, 100.0 * (cpu1 - cpu0) / wall,
           (unsigned long long)atomic_load(&b.errors));
    blk_close(b.dev);
    free(batch);
    free(bufs);
    free(slots);
    pthread_cond_destroy(&b.cond);
    pthread_mutex_destroy(&b.lock);
    return 0;
}
