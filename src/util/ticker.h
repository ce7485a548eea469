/* A thread that runs a step every period until it is stopped: the checkpoint interval and
 * background GC.  The period is asked for before each sleep, so a tunable changed on a
 * running mount applies from the next round. */
#ifndef F2FUSE_UTIL_TICKER_H
#define F2FUSE_UTIL_TICKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct ticker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    bool running, stopping;
    uint64_t (*period_ns)(void *arg);
    void (*step)(void *arg);
    void *arg;
};

/* Starts the thread: sleep period_ns(arg), run step(arg), again.  0 or -errno. */
int ticker_start(struct ticker *t, uint64_t (*period_ns)(void *arg), void (*step)(void *arg),
                 void *arg);
/* Wakes the thread, lets a running step finish and joins it.  Harmless when never started. */
void ticker_stop(struct ticker *t);

#endif
