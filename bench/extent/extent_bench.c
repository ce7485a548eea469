/* Read-extent benchmark driver (bench/extent/run.sh): reads one file of an image through
 * the library, with the read extent cache on or off, once from a fresh open (cold: no node
 * of the file cached) and once more in the same open (warm).
 *
 *   extent_bench IMAGE NAME seq|rand on|off COUNT SEED [CACHE_SIZE]
 *       seq:  the whole file in 1 MiB reads, COUNT times over
 *       rand: COUNT reads of 4 KiB at random block offsets (xorshift seeded with SEED)
 *
 * Prints one line of key=value pairs: the wall time, rate and CPU time of each pass, and
 * what the cold pass cost the device and the cache (block reads, cache misses, extent hits).
 *
 *   extent_bench write IMAGE NAME MIB
 *       creates NAME in the root of a read-write open and writes MIB MiB in order (the layout
 *       f2fuse itself gives a file, with one extent over its contiguous run) */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "f2fuse.h"

#define SEQ_CHUNK (1u << 20)
#define RAND_SIZE 4096u

struct counters {
    uint64_t dev_reads, cache_misses, extent_hits, extent_misses;
};

static void collect(void *arg, const char *name, uint64_t value)
{
    struct counters *c = arg;
    if (strcmp(name, "blk.read.ops") == 0)
        c->dev_reads = value;
    else if (strcmp(name, "cache.misses") == 0)
        c->cache_misses = value;
    else if (strcmp(name, "read.extent_hits") == 0)
        c->extent_hits = value;
    else if (strcmp(name, "read.extent_misses") == 0)
        c->extent_misses = value;
}

static struct counters counters_of(struct f2fuse *fs)
{
    struct counters c = {0};
    f2fuse_stats(fs, collect, &c);
    return c;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* CPU time (user + system) of the whole process, every thread, in microseconds. */
static uint64_t cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* One pass of the workload; returns the bytes read, or -errno. */
static int64_t run_pass(struct f2fuse *fs, uint32_t ino, uint64_t size, int random_reads,
                        uint64_t count, uint64_t seed, uint8_t *buf)
{
    int64_t total = 0;
    if (!random_reads) {
        for (uint64_t round = 0; round < count; round++)
            for (uint64_t off = 0; off < size; off += SEQ_CHUNK) {
                ssize_t n = f2fuse_read(fs, ino, buf, SEQ_CHUNK, off);
                if (n < 0)
                    return n;
                total += n;
            }
        return total;
    }
    uint64_t x = seed | 1, blocks = size / RAND_SIZE;
    for (uint64_t i = 0; i < count; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ssize_t n = f2fuse_read(fs, ino, buf, RAND_SIZE, (x % blocks) * RAND_SIZE);
        if (n < 0)
            return n;
        total += n;
    }
    return total;
}

/* The write mode: a file written in order through the library. */
static int write_file(const char *image, const char *name, uint64_t mib)
{
    struct f2fuse_options opts;
    f2fuse_options_init(&opts);
    f2fuse_option_set(&opts, "rw", NULL);
    struct f2fuse *fs;
    int err = f2fuse_open(image, &opts, &fs);
    struct f2fuse_attr attr;
    if (!err)
        err = f2fuse_mknod(fs, f2fuse_root_ino(fs), name, strlen(name), 0100644, 0, 0, 0, &attr);
    uint8_t *buf = malloc(SEQ_CHUNK);
    uint64_t x = 88172645463325252ull;
    for (uint64_t i = 0; !err && buf && i < mib; i++) {
        for (size_t k = 0; k < SEQ_CHUNK / 8; k++) { /* incompressible content */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            memcpy(buf + 8 * k, &x, 8);
        }
        ssize_t n = f2fuse_write(fs, attr.ino, buf, SEQ_CHUNK, i * SEQ_CHUNK);
        if (n < 0)
            err = (int)n;
    }
    free(buf);
    if (fs)
        f2fuse_close(fs);
    if (err)
        fprintf(stderr, "extent_bench: write %s in %s: %s\n", name, image, strerror(-err));
    return err ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "write") == 0)
        return write_file(argv[2], argv[3], strtoull(argv[4], NULL, 10));
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: extent_bench IMAGE NAME seq|rand on|off COUNT SEED [CACHE_SIZE]\n");
        return 2;
    }
    int random_reads = strcmp(argv[3], "rand") == 0;
    uint64_t count = strtoull(argv[5], NULL, 10), seed = strtoull(argv[6], NULL, 10);
    struct f2fuse_options opts;
    f2fuse_options_init(&opts);
    if (f2fuse_option_set(&opts, strcmp(argv[4], "on") == 0 ? "extent_cache" : "noextent_cache",
                          NULL) != 0 ||
        (argc == 8 && f2fuse_option_set(&opts, "cache_size", argv[7]) != 0))
        return 2;
    struct f2fuse *fs;
    int err = f2fuse_open(argv[1], &opts, &fs);
    if (err) {
        fprintf(stderr, "extent_bench: open %s: %s\n", argv[1], strerror(-err));
        return 1;
    }
    uint32_t ino;
    struct f2fuse_attr attr;
    err = f2fuse_lookup(fs, f2fuse_root_ino(fs), argv[2], strlen(argv[2]), &attr);
    ino = attr.ino;
    uint8_t *buf = malloc(SEQ_CHUNK);
    if (err || !buf) {
        fprintf(stderr, "extent_bench: %s: %s\n", argv[2], strerror(err ? -err : ENOMEM));
        return 1;
    }
    struct counters before = counters_of(fs);
    uint64_t c0 = cpu_us(), t0 = now_ns();
    int64_t cold = run_pass(fs, ino, attr.size, random_reads, count, seed, buf);
    uint64_t c1 = cpu_us(), t1 = now_ns();
    struct counters after = counters_of(fs);
    int64_t warm = run_pass(fs, ino, attr.size, random_reads, count, seed, buf);
    uint64_t c2 = cpu_us(), t2 = now_ns();
    if (cold < 0 || warm < 0) {
        fprintf(stderr, "extent_bench: read: %s\n", strerror((int)-(cold < 0 ? cold : warm)));
        return 1;
    }
    double cold_s = (double)(t1 - t0) / 1e9, warm_s = (double)(t2 - t1) / 1e9;
    double ops = random_reads ? (double)count : (double)cold / SEQ_CHUNK;
    printf("cold_s=%.4f warm_s=%.4f cold_mbps=%.1f warm_mbps=%.1f cold_iops=%.0f warm_iops=%.0f "
           "cold_cpu_us_per_op=%.2f warm_cpu_us_per_op=%.2f "
           "dev_reads=%llu cache_misses=%llu extent_hits=%llu extent_misses=%llu\n",
           cold_s, warm_s, (double)cold / cold_s / 1e6, (double)warm / warm_s / 1e6, ops / cold_s,
           ops / warm_s, (double)(c1 - c0) / ops, (double)(c2 - c1) / ops,
           (unsigned long long)(after.dev_reads - before.dev_reads),
           (unsigned long long)(after.cache_misses - before.cache_misses),
           (unsigned long long)(after.extent_hits - before.extent_hits),
           (unsigned long long)(after.extent_misses - before.extent_misses));
    free(buf);
    f2fuse_close(fs);
    return 0;
}
