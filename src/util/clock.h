/* Monotonic time for the mechanisms' clocks (idle waits, ages, latency figures) and the
 * absolute deadlines pthread condition variables sleep until. */
#ifndef F2FUSE_UTIL_CLOCK_H
#define F2FUSE_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

#define NS_PER_SEC 1000000000ull
#define NS_PER_MS  1000000ull

static inline uint64_t timespec_ns(const struct timespec *t)
{
    return (uint64_t)t->tv_sec * NS_PER_SEC + (uint64_t)t->tv_nsec;
}

static inline struct timespec ns_timespec(uint64_t ns)
{
    struct timespec t = {.tv_sec = (time_t)(ns / NS_PER_SEC), .tv_nsec = (long)(ns % NS_PER_SEC)};
    return t;
}

/* CLOCK_MONOTONIC in nanoseconds. */
static inline uint64_t clock_mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return timespec_ns(&t);
}

/* The absolute time ns from now on clock (CLOCK_MONOTONIC for condition variables set up
 * with pthread_condattr_setclock, CLOCK_REALTIME for the others). */
static inline struct timespec clock_deadline(clockid_t clock, uint64_t ns)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return ns_timespec(timespec_ns(&t) + ns);
}

#endif
