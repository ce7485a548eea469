/* Load generator of the checkpoint benchmark (bench/checkpoint/run.sh).  Plain POSIX calls
 * on a mounted path, so the same binary drives f2fuse and a kernel file system.
 *
 *   cp_load dirsync DIR COUNT [PREFIX]
 *       COUNT x (create DIR/PREFIX_i; close; fsync(DIR)), timed (thread A of the
 *       checkpoint=merge post).  COUNT 0 = until SIGTERM/SIGINT (thread C).  Prints one line
 *       "ops=N elapsed_s=S ops_per_s=R lat_p50_us=.. lat_p99_us=.. lat_max_us=..".
 *   cp_load fsync FILE COUNT
 *       FILE is created (4 KiB), its directory fsync'ed, so that FILE is in the last
 *       checkpoint; then COUNT x (4 KiB pwrite at offset (i % 256) * 4 KiB; fsync(FILE)),
 *       each pwrite+fsync pair timed.  Same output line.
 *
 * Latencies are exact (every sample kept, sorted). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what, const char *path)
{
    fprintf(stderr, "cp_load: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

struct samples {
    uint64_t *v;
    size_t n, cap;
};

static void add(struct samples *s, uint64_t ns)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof(*s->v));
        if (!s->v) {
            fprintf(stderr, "cp_load: out of memory\n");
            exit(1);
        }
    }
    s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_us(const struct samples *s, double p)
{
    if (!s->n)
        return 0;
    size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);
    return (double)s->v[i] / 1000.0;
}

static void report(struct samples *s, uint64_t elapsed_ns)
{
    qsort(s->v, s->n, sizeof(*s->v), cmp_u64);
    double secs = (double)elapsed_ns / 1e9;
    printf("ops=%zu elapsed_s=%.3f ops_per_s=%.1f lat_p50_us=%.0f lat_p99_us=%.0f "
           "lat_max_us=%.0f\n",
           s->n, secs, secs > 0 ? (double)s->n / secs : 0, pct_us(s, 0.50), pct_us(s, 0.99),
           s->n ? (double)s->v[s->n - 1] / 1000.0 : 0);
    fflush(stdout);
}

static int dirsync(const char *dir, long count, const char *prefix)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        die("open", dir);
    struct samples s = {0};
    char path[PATH_MAX];
    uint64_t start = now_ns();
    for (long i = 0; count ? i < count : !stop; i++) {
        uint64_t t0 = now_ns();
        snprintf(path, sizeof(path), "%s/%s_%ld", dir, prefix, i);
        int fd = open(path, O_WRONLY | O_CREAT, 0644);
        if (fd < 0) {
            if (errno == EINTR && stop)
                break;
            die("create", path);
        }
        close(fd);
        if (fsync(dfd)) {
            if (errno == EINTR && stop)
                break;
            die("fsync", dir);
        }
        add(&s, now_ns() - t0);
    }
    report(&s, now_ns() - start);
    close(dfd);
    return 0;
}

static int filesync(const char *file, long count)
{
    char buf[4096];
    memset(buf, 0xa5, sizeof(buf));
    int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die("create", file);
    if (pwrite(fd, buf, sizeof(buf), 0) != (ssize_t)sizeof(buf))
        die("pwrite", file);
    /* Put the file (its name, inode and first block) into a checkpoint. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = 0;
    else
        strcpy(dir, ".");
    if (fsync(fd))
        die("fsync", file);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd))
        die("fsync", dir);
    close(dfd);

    struct samples s = {0};
    uint64_t start = now_ns();
    for (long i = 0; i < count && !stop; i++) {
        buf[0] = (char)i;
        uint64_t t0 = now_ns();
        if (pwrite(fd, buf, sizeof(buf), (off_t)(i % 256) * 4096) != (ssize_t)sizeof(buf))
            die("pwrite", file);
        if (fsync(fd))
            die("fsync", file);
        add(&s, now_ns() - t0);
    }
    report(&s, now_ns() - start);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: interrupt fsync */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (argc >= 4 && strcmp(argv[1], "dirsync") == 0)
        return dirsync(argv[2], atol(argv[3]), argc > 4 ? argv[4] : "file");
    if (argc == 4 && strcmp(argv[1], "fsync") == 0)
        return filesync(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: cp_load dirsync DIR COUNT [PREFIX] | cp_load fsync FILE COUNT\n");
    return 2;
}
