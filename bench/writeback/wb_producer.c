/* The dirty_background_time patch's producer: writes TOTAL bytes to FILE in records of RECORD
 * bytes as if they arrived over a link of RATE bytes/s (record i is written once it has fully
 * arrived, at (i + 1) × RECORD / RATE after the start, as an NFS server writes a WRITE once
 * received), then fsyncs.  The file is created and fsync'ed before the clock starts, so the
 * final fsync is the file's own (NFS's COMMIT).  With "random", records go to a shuffled order
 * of offsets.  Prints one line: key=value pairs (seconds, bytes/s). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - (double)(time_t)t) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr,
                "usage: wb_producer FILE TOTAL_BYTES RECORD_BYTES RATE_BYTES_PER_S [random]\n");
        return 2;
    }
    const char *path = argv[1];
    uint64_t total = strtoull(argv[2], NULL, 10), record = strtoull(argv[3], NULL, 10);
    double rate = strtod(argv[4], NULL);
    int random_order = argc > 5 && strcmp(argv[5], "random") == 0;
    if (!total || !record || record > total || rate <= 0) {
        fprintf(stderr, "wb_producer: bad arguments\n");
        return 2;
    }
    uint64_t n = total / record;
    uint8_t *buf = malloc(record);
    uint64_t *order = malloc(n * sizeof(*order));
    if (!buf || !order)
        return 1;
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (uint64_t i = 0; i < record; i += 8) {
        uint64_t v = xorshift(&seed);
        memcpy(buf + i, &v, record - i < 8 ? record - i : 8);
    }
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    if (random_order)
        for (uint64_t i = n - 1; i > 0; i--) {
            uint64_t j = xorshift(&seed) % (i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || fsync(fd) != 0) {
        fprintf(stderr, "wb_producer: %s: %s\n", path, strerror(errno));
        return 1;
    }
    double t0 = now_s(), late = 0;
    for (uint64_t i = 0; i < n; i++) {
        double due = t0 + (double)(i + 1) * (double)record / rate;
        double t = now_s();
        if (t < due)
            sleep_until(due);
        else if (t - due > late)
            late = t - due;
        uint64_t done = 0;
        while (done < record) {
            ssize_t w = pwrite(fd, buf + done, record - done, (off_t)(order[i] * record + done));
            if (w <= 0) {
                fprintf(stderr, "wb_producer: write: %s\n", w < 0 ? strerror(errno) : "0 bytes");
                return 1;
            }
            done += (uint64_t)w;
        }
    }
    double t_written = now_s();
    if (fsync(fd) != 0) {
        fprintf(stderr, "wb_producer: fsync: %s\n", strerror(errno));
        return 1;
    }
    double t_end = now_s();
    close(fd);
    double elapsed = t_end - t0;
    printf("elapsed=%.4f written=%.4f fsync=%.4f net=%.4f max_late=%.4f throughput=%.0f\n", elapsed,
           t_written - t0, t_end - t_written, (double)(n * record) / rate, late,
           (double)(n * record) / elapsed);
    free(buf);
    free(order);
    return 0;
}
