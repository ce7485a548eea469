/* meta_load: the metadata workloads of bench/fio, run from several threads at once.
 *
 *   meta_load create|stat|unlink DIR FILES THREADS DIRS
 *                                  FILES small files (100 bytes each) spread over DIRS
 *                                  directories: create them, stat them or unlink them
 *                                  (separate runs, so that the caller can drop caches)
 *   meta_load fsync DIR FILES THREADS
 *                                  create FILES files of 4 KiB, each fsync'ed before
 *                                  close (one directory per thread)
 *
 * Thread t takes files t, t+THREADS, ...; file i lives in directory i % DIRS.  Each phase
 * starts when every thread is ready and ends when the last finishes.  Prints
 * "phase=NAME ops=N seconds=S"; exit status 1 on any failed call. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum phase { PH_CREATE, PH_STAT, PH_UNLINK, PH_FSYNC };

struct load {
    const char *dir;
    long files, threads, dirs;
    enum phase phase;
    atomic_int failed;
    pthread_barrier_t start;
};

struct worker {
    struct load *load;
    long index;
};

static void file_path(const struct load *l, long i, char *buf, size_t size)
{
    snprintf(buf, size, "%s/d%02ld/f%07ld", l->dir, i % l->dirs, i);
}

static int do_one(struct load *l, long i)
{
    char path[4096];
    static const char small[100] = "meta_load";
    static char block[4096] = "meta_load fsync";
    file_path(l, i, path, sizeof(path));
    struct stat st;
    int fd;
    switch (l->phase) {
    case PH_CREATE:
        fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || write(fd, small, sizeof(small)) != (ssize_t)sizeof(small))
            return -1;
        return close(fd);
    case PH_STAT: return stat(path, &st);
    case PH_UNLINK: return unlink(path);
    case PH_FSYNC:
        fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || write(fd, block, sizeof(block)) != (ssize_t)sizeof(block) || fsync(fd))
            return -1;
        return close(fd);
    }
    return -1;
}

static void *work(void *arg)
{
    struct worker *w = arg;
    struct load *l = w->load;
    pthread_barrier_wait(&l->start);
    for (long i = w->index; i < l->files; i += l->threads) {
        if (do_one(l, i) != 0) {
            if (atomic_fetch_add(&l->failed, 1) == 0) {
                char path[4096];
                file_path(l, i, path, sizeof(path));
                fprintf(stderr, "meta_load: %s: %s\n", path, strerror(errno));
            }
            break;
        }
    }
    pthread_barrier_wait(&l->start); /* the end of the phase */
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int run_phase(struct load *l, enum phase ph, const char *name)
{
    l->phase = ph;
    pthread_t tids[l->threads];
    struct worker ws[l->threads];
    pthread_barrier_init(&l->start, NULL, (unsigned)l->threads + 1);
    for (long t = 0; t < l->threads; t++) {
        ws[t] = (struct worker){.load = l, .index = t};
        pthread_create(&tids[t], NULL, work, &ws[t]);
    }
    pthread_barrier_wait(&l->start);
    double t0 = now_s();
    pthread_barrier_wait(&l->start);
    double t1 = now_s();
    for (long t = 0; t < l->threads; t++)
        pthread_join(tids[t], NULL);
    pthread_barrier_destroy(&l->start);
    printf("phase=%s ops=%ld seconds=%.6f\n", name, l->files, t1 - t0);
    fflush(stdout);
    return atomic_load(&l->failed) ? -1 : 0;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"create", "stat", "unlink", "fsync"};
    int ph = -1;
    for (int i = 0; argc >= 5 && i < 4; i++)
        if (strcmp(argv[1], names[i]) == 0)
            ph = i;
    if (ph < 0) {
        fprintf(stderr, "usage: meta_load create|stat|unlink|fsync DIR FILES THREADS [DIRS]\n");
        return 2;
    }
    struct load l = {.dir = argv[2], .files = atol(argv[3]), .threads = atol(argv[4])};
    l.dirs = ph == PH_FSYNC ? l.threads : (argc > 5 ? atol(argv[5]) : 16);
    if (l.files <= 0 || l.threads <= 0 || l.dirs <= 0 || l.threads > 256) {
        fprintf(stderr, "meta_load: bad numbers\n");
        return 2;
    }
    for (long d = 0; ph != PH_UNLINK && ph != PH_STAT && d < l.dirs; d++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/d%02ld", l.dir, d);
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "meta_load: mkdir %s: %s\n", path, strerror(errno));
            return 1;
        }
    }
    return run_phase(&l, (enum phase)ph, names[ph]) ? 1 : 0;
}
