#include "util/ticker.h"

#include <time.h>

#include "util/clock.h"

static void *ticker_main(void *arg)
{
    struct ticker *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stopping) {
        struct timespec until = clock_deadline(CLOCK_MONOTONIC, t->period_ns(t->arg));
        /* a wakeup before the deadline is a stop, or spurious */
        while (!t->stopping && pthread_cond_timedwait(&t->wake, &t->lock, &until) == 0)
            ;
        if (t->stopping)
            break;
        pthread_mutex_unlock(&t->lock);
        t->step(t->arg);
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int ticker_start(struct ticker *t, uint64_t (*period_ns)(void *arg), void (*step)(void *arg),
                 void *arg)
{
    *t = (struct ticker){.period_ns = period_ns, .step = step, .arg = arg};
    pthread_mutex_init(&t->lock, NULL);
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &mono);
    pthread_condattr_destroy(&mono);
    int err = pthread_create(&t->thread, NULL, ticker_main, t);
    t->running = err == 0;
    if (err) {
        pthread_cond_destroy(&t->wake);
        pthread_mutex_destroy(&t->lock);
    }
    return -err;
}

void ticker_stop(struct ticker *t)
{
    if (!t->running)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    t->running = false;
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
}
