#include "cache/pcache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define PAGE_BYTES 4096u
#define MIN_PAGES 64u

struct pcache {
    struct blk_dev *dev;
    pthread_mutex_t lock;
    pthread_cond_t loaded; /* broadcast when any page finishes loading */
    struct page **buckets;
    size_t nbuckets;       /* power of two */
    struct page lru;       /* sentinel: lru.lru_next is the least recently used */
    uint64_t max_pages;
    uint64_t pages;
    atomic_uint_fast64_t hits, misses, evictions, load_errors;
};

static size_t bucket_of(const struct pcache *c, uint64_t blkaddr)
{
    /* Fibonacci hashing spreads consecutive block addresses over the table. */
    return (size_t)((blkaddr * 0x9E3779B97F4A7C15ull) >> 20) & (c->nbuckets - 1);
}

static void lru_unlink(struct page *p)
{
    if (p->lru_next) {
        p->lru_prev->lru_next = p->lru_next;
        p->lru_next->lru_prev = p->lru_prev;
        p->lru_next = p->lru_prev = NULL;
    }
}

static void lru_add_tail(struct pcache *c, struct page *p)
{
    p->lru_prev = c->lru.lru_prev;
    p->lru_next = &c->lru;
    c->lru.lru_prev->lru_next = p;
    c->lru.lru_prev = p;
}

static void hash_remove(struct pcache *c, struct page *p)
{
    struct page **pp = &c->buckets[bucket_of(c, p->blkaddr)];
    while (*pp != p)
        pp = &(*pp)->hash_next;
    *pp = p->hash_next;
}

static void page_free(struct page *p)
{
    free(p->data);
    free(p);
}

/* Frees least recently used unreferenced pages until the budget has room for one more.
 * Called with the lock held. */
static void reclaim(struct pcache *c, uint64_t target_pages)
{
    struct page *p = c->lru.lru_next;
    while (c->pages > target_pages && p != &c->lru) {
        struct page *next = p->lru_next;
        if (p->refs == 0) {
            lru_unlink(p);
            hash_remove(c, p);
            page_free(p);
            c->pages--;
            atomic_fetch_add(&c->evictions, 1);
        }
        p = next;
    }
}

int pcache_create(struct blk_dev *dev, uint64_t budget_bytes, struct pcache **out)
{
    struct pcache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->dev = dev;
    c->max_pages = budget_bytes / PAGE_BYTES;
    if (c->max_pages < MIN_PAGES)
        c->max_pages = MIN_PAGES;
    c->nbuckets = 1024;
    while (c->nbuckets < c->max_pages && c->nbuckets < (1u << 22))
        c->nbuckets <<= 1;
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    if (!c->buckets) {
        free(c);
        return -ENOMEM;
    }
    c->lru.lru_next = c->lru.lru_prev = &c->lru;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->loaded, NULL);
    *out = c;
    return 0;
}

void pcache_destroy(struct pcache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nbuckets; i++) {
        struct page *p = c->buckets[i];
        while (p) {
            struct page *next = p->hash_next;
            page_free(p);
            p = next;
        }
    }
    free(c->buckets);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->loaded);
    free(c);
}

int pcache_get(struct pcache *c, uint64_t blkaddr, struct page **out)
{
    pthread_mutex_lock(&c->lock);
    struct page *p = c->buckets[bucket_of(c, blkaddr)];
    while (p && p->blkaddr != blkaddr)
        p = p->hash_next;
    if (p) {
        p->refs++;
        lru_unlink(p);
        /* Another thread is reading it: wait instead of reading it twice. */
        while (!p->uptodate && !p->load_error)
            pthread_cond_wait(&c->loaded, &c->lock);
        int err = p->load_error;
        if (err) {
            /* The failed page is already out of the table; the last holder frees it. */
            bool last = --p->refs == 0;
            pthread_mutex_unlock(&c->lock);
            if (last)
                page_free(p);
            return err;
        }
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_add(&c->hits, 1);
        *out = p;
        return 0;
    }

    if (c->pages >= c->max_pages)
        reclaim(c, c->max_pages - 1);
    p = calloc(1, sizeof(*p));
    void *data = p ? blk_alloc_buf(PAGE_BYTES) : NULL;
    if (!data) {
        free(p);
        pthread_mutex_unlock(&c->lock);
        return -ENOMEM;
    }
    p->blkaddr = blkaddr;
    p->data = data;
    p->refs = 1;
    size_t b = bucket_of(c, blkaddr);
    p->hash_next = c->buckets[b];
    c->buckets[b] = p;
    c->pages++;
    pthread_mutex_unlock(&c->lock);

    atomic_fetch_add(&c->misses, 1);
    int err = blk_read(c->dev, blkaddr * PAGE_BYTES, p->data, PAGE_BYTES);

    pthread_mutex_lock(&c->lock);
    if (err) {
        /* Forget the page so that a later access retries the read. */
        atomic_fetch_add(&c->load_errors, 1);
        p->load_error = err;
        hash_remove(c, p);
        c->pages--;
        p->refs--;
        pthread_cond_broadcast(&c->loaded);
        /* Waiters still hold references; the last one out frees it. */
        bool last = p->refs == 0;
        pthread_mutex_unlock(&c->lock);
        if (last)
            page_free(p);
        return err;
    }
    p->uptodate = true;
    pthread_cond_broadcast(&c->loaded);
    pthread_mutex_unlock(&c->lock);
    *out = p;
    return 0;
}

void pcache_put(struct pcache *c, struct page *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&c->lock);
    if (--p->refs == 0) {
        if (p->load_error) {
            /* Already out of the hash table (failed load). */
            pthread_mutex_unlock(&c->lock);
            page_free(p);
            return;
        }
        lru_add_tail(c, p);
        if (c->pages > c->max_pages)
            reclaim(c, c->max_pages);
    }
    pthread_mutex_unlock(&c->lock);
}

void pcache_shrink(struct pcache *c)
{
    pthread_mutex_lock(&c->lock);
    reclaim(c, 0);
    pthread_mutex_unlock(&c->lock);
}

void pcache_emit_stats(struct pcache *c, stat_emit_fn emit, void *sink)
{
    pthread_mutex_lock(&c->lock);
    uint64_t pages = c->pages;
    pthread_mutex_unlock(&c->lock);
    emit(sink, "cache.hits", atomic_load(&c->hits));
    emit(sink, "cache.misses", atomic_load(&c->misses));
    emit(sink, "cache.evictions", atomic_load(&c->evictions));
    emit(sink, "cache.load_errors", atomic_load(&c->load_errors));
    emit(sink, "cache.pages", pages);
    emit(sink, "cache.bytes", pages * PAGE_BYTES);
    emit(sink, "cache.budget_bytes", c->max_pages * PAGE_BYTES);
}
