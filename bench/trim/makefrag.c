/* The workload of the ext4 parallel-discard thread (its "makefrag.c"): N files of SIZE bytes
 * written sequentially, made durable, then a HOLE-byte hole punched every STRIDE bytes of
 * each (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE), so that the freed space is many small
 * pieces.  Prints "files=N holes=H write_s=... punch_s=...".
 *
 *   makefrag DIR NFILES SIZE_MIB [STRIDE_KIB=16] [HOLE_KIB=4] */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: makefrag DIR NFILES SIZE_MIB [STRIDE_KIB] [HOLE_KIB]\n");
        return 2;
    }
    const char *dir = argv[1];
    int nfiles = atoi(argv[2]);
    long long size = atoll(argv[3]) << 20;
    long long stride = (argc > 4 ? atoll(argv[4]) : 16) << 10;
    long long hole = (argc > 5 ? atoll(argv[5]) : 4) << 10;
    size_t chunk = 1 << 20;
    char *buf = malloc(chunk);
    if (!buf || nfiles <= 0 || size <= 0 || stride <= 0 || hole <= 0 || hole > stride)
        return 2;
    unsigned seed = 12345;
    for (size_t i = 0; i < chunk; i++) /* incompressible-ish, never zero blocks */
        buf[i] = (char)((seed = seed * 1103515245u + 12345u) >> 16 | 1);
    char path[4096];
    double t0 = now();
    for (int f = 0; f < nfiles; f++) {
        snprintf(path, sizeof(path), "%s/frag%02d", dir, f);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        for (long long off = 0; off < size; off += (long long)chunk) {
            buf[0] = (char)f; /* each chunk differs a little */
            memcpy(buf + 8, &off, sizeof(off));
            if (pwrite(fd, buf, chunk, off) != (ssize_t)chunk) {
                perror("pwrite");
                return 1;
            }
        }
        if (fsync(fd) != 0) {
            perror("fsync");
            return 1;
        }
        close(fd);
    }
    double t1 = now();
    long long holes = 0;
    for (int f = 0; f < nfiles; f++) {
        snprintf(path, sizeof(path), "%s/frag%02d", dir, f);
        int fd = open(path, O_WRONLY);
        if (fd < 0) {
            perror(path);
            return 1;
        }
        for (long long off = 0; off + hole <= size; off += stride) {
            if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, hole) != 0) {
                fprintf(stderr, "fallocate %s at %lld: %s\n", path, off, strerror(errno));
                return 1;
            }
            holes++;
        }
        if (fsync(fd) != 0) {
            perror("fsync");
            return 1;
        }
        close(fd);
    }
    double t2 = now();
    printf("files=%d holes=%lld write_s=%.2f punch_s=%.2f\n", nfiles, holes, t1 - t0, t2 - t1);
    free(buf);
    return 0;
}
