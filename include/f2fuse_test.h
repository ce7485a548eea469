/* libf2fuse's test-only options: power-cut emulation and fault injection.  Not installed
 * with f2fuse.h: a program that uses the library opens images with f2fuse_open and never
 * meets them.  The daemon and the tools take them (-o powercut=N, -o fault=...) so that the
 * crash and fault tests can drive the real binary. */
#ifndef F2FUSE_TEST_H
#define F2FUSE_TEST_H

#include "f2fuse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define F2FUSE_MAX_FAULTS    4
#define F2FUSE_FAULT_READ    0u
#define F2FUSE_FAULT_WRITE   1u
#define F2FUSE_FAULT_FLUSH   2u
#define F2FUSE_FAULT_DISCARD 3u
#define F2FUSE_FAULT_ALLOC   4u

/* All zero: nothing armed. */
struct f2fuse_test_options {
    /* Emulate a power cut at the powercut_after-th device write (0 = never): that write,
     * every later one, and every write not yet flushed are lost; with powercut_torn,
     * unflushed writes are lost 4 KiB block by block (PRNG powercut_seed).  Options
     * powercut=N, powercut_torn, powercut_seed=N. */
    uint64_t powercut_after;
    bool powercut_torn;
    uint64_t powercut_seed;
    /* Fault injection (option "fault=KIND:N[:WHAT][:sticky]", repeatable up to
     * F2FUSE_MAX_FAULTS).  The Nth request of KIND (read, write, flush, discard; alloc =
     * page-cache allocations) after open fails with WHAT: an errno name (EIO by default,
     * ENOSPC, ENOMEM, ...) or "short" (half the length transferred); sticky: every later
     * one fails too.  See docs/ARCHITECTURE.md, "Faults and hostile images". */
    struct f2fuse_fault {
        unsigned kind; /* F2FUSE_FAULT_* */
        uint64_t nth;
        int err; /* positive errno; 0 with short_io */
        bool short_io;
        bool sticky;
    } faults[F2FUSE_MAX_FAULTS];
    unsigned nfaults;
};

/* As f2fuse_option_set, and the test options above, which go to test. */
int f2fuse_test_option_set(struct f2fuse_options *opts, struct f2fuse_test_options *test,
                           const char *name, const char *value);

/* As f2fuse_open, with the power cut and the faults of test armed (test may be NULL). */
int f2fuse_open_test(const char *image, const struct f2fuse_options *opts,
                     const struct f2fuse_test_options *test, struct f2fuse **out);

#ifdef __cplusplus
}
#endif

#endif
