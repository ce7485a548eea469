/* Minimal assertions for the unit-test programs.  Each test program runs its cases, prints
 * one line per failed check, and exits non-zero when any check failed; tests/run.sh counts
 * programs as passed or failed. */
#ifndef F2FUSE_TESTS_CHECK_H
#define F2FUSE_TESTS_CHECK_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "f2fuse.h"

static int check_failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                            \
    do {                                                                                          \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                           \
        if (check_a_ != check_b_) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s == %s (%lld != %lld)\n", __FILE__, __LINE__, \
                    #a, #b, check_a_, check_b_);                                                  \
            check_failures++;                                                                     \
        }                                                                                         \
    } while (0)

/* Runs one case function and reports it. */
#define RUN(fn)                                                                    \
    do {                                                                           \
        int check_before_ = check_failures;                                        \
        fn();                                                                      \
        printf("%s %s\n", check_failures == check_before_ ? "ok  " : "FAIL", #fn); \
    } while (0)

/* Runs a shell command built like printf (test setup: mkfs.f2fs, sload.f2fs, ...); returns
 * system()'s status and prints the command when it failed. */
static inline __attribute__((format(printf, 1, 2))) int sh(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* The seed of a randomized test program: F2FUSE_SEED, else the time; printed first, so
 * that a failed run can be replayed. */
static inline uint64_t check_seed(void)
{
    const char *env = getenv("F2FUSE_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    printf("seed=%llu (F2FUSE_SEED to replay)\n", (unsigned long long)seed);
    return seed;
}

/* The next number of a test's xorshift64* sequence (state must not be 0). */
static inline uint64_t check_rand(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 2685821657736338717ull;
}

/* A fresh 64 MiB mkfs.f2fs image at $TMPDIR (else /var/tmp)/f2fuse-test-NAME.PID.img, its
 * path in img; -1 when mkfs.f2fs failed (the caller skips). */
static inline int check_fresh_image(char *img, size_t size, const char *name)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(img, size, "%s/f2fuse-test-%s.%d.img", tmp ? tmp : "/var/tmp", name, (int)getpid());
    return sh("rm -f %s && truncate -s 64M %s && mkfs.f2fs -f %s >/dev/null", img, img, img) ? -1
                                                                                             : 0;
}

/* Closes *fs (NULL after) and checks that fsck.f2fs -f finds img clean. */
static inline void check_close_fsck(struct f2fuse **fs, const char *img)
{
    f2fuse_close(*fs);
    *fs = NULL;
    CHECK_EQ(sh("fsck.f2fs -f %s >/dev/null 2>&1", img), 0);
}

/* Opens img read-write as the library tests want it (psync, no periodic checkpoint), with
 * cache_size when not NULL; a refusal is a failed check.  Returns f2fuse_open's result. */
static inline int check_open_rw(const char *img, const char *cache_size, struct f2fuse **out)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    CHECK_EQ(f2fuse_option_set(&o, "rw", NULL), 0);
    CHECK_EQ(f2fuse_option_set(&o, "backend", "psync"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "checkpoint_interval", "0"), 0);
    if (cache_size)
        CHECK_EQ(f2fuse_option_set(&o, "cache_size", cache_size), 0);
    *out = NULL;
    int err = f2fuse_open(img, &o, out);
    CHECK_EQ(err, 0);
    return err;
}

#define CHECK_DONE() \
    (check_failures ? (fprintf(stderr, "%d check(s) failed\n", check_failures), 1) : 0)

#endif
