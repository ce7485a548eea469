/* inval_queue.h: a list under a mutex, one thread that drains it. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "fuse/inval_queue.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct inval_item {
    struct inval_item *next;
    fuse_ino_t parent;
    char name[];
};

struct inval_queue {
    struct fuse_session *se;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    struct inval_item *head, **tail;
    bool stop, dropped_logged;
};

static void *inval_thread(void *arg)
{
    struct inval_queue *q = arg;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (!q->head && !q->stop)
            pthread_cond_wait(&q->wake, &q->lock);
        struct inval_item *it = q->head;
        if (!it)
            break; /* stopping, and nothing left */
        q->head = it->next;
        if (!q->head)
            q->tail = &q->head;
        pthread_mutex_unlock(&q->lock);
        /* -ENOENT: the kernel no longer has the entry, which is what was wanted */
        int err = fuse_lowlevel_notify_inval_entry(q->se, it->parent, it->name, strlen(it->name));
        if (err && err != -ENOENT && err != -ENOTCONN && err != -EBADF)
            log_warn("cannot invalidate the kernel's entry '%s': %s", it->name, strerror(-err));
        free(it);
        pthread_mutex_lock(&q->lock);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

struct inval_queue *inval_queue_start(struct fuse_session *se)
{
    struct inval_queue *q = calloc(1, sizeof(*q));
    if (!q) {
        log_warn("no entry invalidation thread: out of memory");
        return NULL;
    }
    q->se = se;
    q->tail = &q->head;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->wake, NULL);
    int err = pthread_create(&q->thread, NULL, inval_thread, q);
    if (err) {
        log_warn("no entry invalidation thread: %s", strerror(err));
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->wake);
        free(q);
        return NULL;
    }
    return q;
}

void inval_queue_push(struct inval_queue *q, uint64_t parent, const char *name)
{
    if (!q)
        return;
    size_t len = strlen(name);
    struct inval_item *it = malloc(sizeof(*it) + len + 1);
    pthread_mutex_lock(&q->lock);
    if (!it) {
        if (!q->dropped_logged)
            log_warn("an entry invalidation was dropped: out of memory (logged once)");
        q->dropped_logged = true;
    } else {
        it->next = NULL;
        it->parent = parent;
        memcpy(it->name, name, len + 1);
        *q->tail = it;
        q->tail = &it->next;
        pthread_cond_signal(&q->wake);
    }
    pthread_mutex_unlock(&q->lock);
}

void inval_queue_stop(struct inval_queue *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_signal(&q->wake);
    pthread_mutex_unlock(&q->lock);
    pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->wake);
    free(q);
}
