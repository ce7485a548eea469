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

#define CHECK_DONE() \
    (check_failures ? (fprintf(stderr, "%d check(s) failed\n", check_failures), 1) : 0)

#endif
