/* Page cache: contents, budget and LRU reclaim, one load per page under concurrency, a
 * failed load that is retried rather than cached, and a budget that changes at run time
 * (grow, shrink past dirty pages, memory given back, the hash table growing in use). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "blk/blk.h"
#include "blk/blk_fault.h"
#include "cache/pcache.h"
#include "check.h"

#define NBLOCKS 512

static char path[] = "/tmp/f2fuse-pcache-XXXXXX";
static struct blk_dev *dev;

struct counters {
    uint64_t hits, misses, evictions, pages;
};

static void grab(void *sink, const char *name, uint64_t v)
{
    struct counters *c = sink;
    if (!strcmp(name, "cache.hits"))
        c->hits = v;
    else if (!strcmp(name, "cache.misses"))
        c->misses = v;
    else if (!strcmp(name, "cache.evictions"))
        c->evictions = v;
    else if (!strcmp(name, "cache.pages"))
        c->pages = v;
}

static struct counters counters_of(struct pcache *c)
{
    struct counters k = {0};
    pcache_emit_stats(c, grab, &k);
    return k;
}

static void pages_hold_device_blocks(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 1 << 20, &c), 0);
    for (uint64_t b = 0; b < 100; b += 7) {
        struct page *p;
        CHECK_EQ(pcache_get(c, PAGE_META, b, b, &p), 0);
        uint64_t first;
        memcpy(&first, p->data, sizeof(first));
        CHECK_EQ(first, b);
        pcache_put(c, p);
    }
    struct page *p;
    CHECK_EQ(pcache_get(c, PAGE_META, 7, 7, &p), 0);
    pcache_put(c, p);
    struct counters k = counters_of(c);
    CHECK_EQ(k.misses, 15);
    CHECK_EQ(k.hits, 1);
    pcache_destroy(c);
}

static void budget_is_kept(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 * 4096, &c), 0); /* 64 pages */
    for (uint64_t b = 0; b < 300; b++) {
        struct page *p;
        CHECK_EQ(pcache_get(c, PAGE_META, b, b, &p), 0);
        pcache_put(c, p);
    }
    struct counters k = counters_of(c);
    CHECK(k.pages <= 64);
    CHECK_EQ(k.evictions, 300 - k.pages);
    /* The most recent pages survive, the oldest went first. */
    struct page *p;
    CHECK_EQ(pcache_get(c, PAGE_META, 299, 299, &p), 0);
    pcache_put(c, p);
    CHECK_EQ(counters_of(c).hits, 1);
    CHECK_EQ(pcache_get(c, PAGE_META, 0, 0, &p), 0);
    pcache_put(c, p);
    CHECK_EQ(counters_of(c).hits, 1);
    pcache_destroy(c);
}

struct race {
    struct pcache *c;
    pthread_barrier_t *barrier;
    int err;
};

/* Gets block b's page, checks it holds block b (its first word), puts it: 0 or -errno. */
static int get_check_put(struct pcache *c, uint64_t b)
{
    struct page *p;
    int err = pcache_get(c, PAGE_META, b, b, &p);
    if (err)
        return err;
    uint64_t first;
    memcpy(&first, p->data, sizeof(first));
    pcache_put(c, p);
    return first == b ? 0 : -EIO;
}

static void *race_thread(void *arg)
{
    struct race *r = arg;
    pthread_barrier_wait(r->barrier);
    for (uint64_t b = 0; b < 64; b++) {
        int err = get_check_put(r->c, b);
        if (err)
            r->err = err;
    }
    return NULL;
}

static void one_load_per_page_under_concurrency(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 1 << 20, &c), 0);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 8);
    pthread_t t[8];
    struct race r[8];
    for (int i = 0; i < 8; i++) {
        r[i] = (struct race){c, &barrier, 0};
        pthread_create(&t[i], NULL, race_thread, &r[i]);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].err, 0);
    }
    struct counters k = counters_of(c);
    CHECK_EQ(k.misses, 64);
    CHECK_EQ(k.hits, 7 * 64);
    pthread_barrier_destroy(&barrier);
    pcache_destroy(c);
}

static void failed_load_is_retried(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 1 << 20, &c), 0);
    blk_inject_fault(dev, BLK_READ, 1, EIO);
    struct page *p;
    CHECK_EQ(pcache_get(c, PAGE_META, 5, 5, &p), -EIO);
    CHECK_EQ(pcache_get(c, PAGE_META, 5, 5, &p), 0);
    uint64_t first;
    memcpy(&first, p->data, sizeof(first));
    CHECK_EQ(first, 5);
    pcache_put(c, p);
    CHECK_EQ(counters_of(c).pages, 1);
    pcache_destroy(c);
}

static void dirty_pages_stay_until_clean(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 * 4096, &c), 0);
    struct page *p;
    CHECK_EQ(pcache_get(c, PAGE_NODE, 1000, PCACHE_NO_LOAD, &p), 0);
    CHECK_EQ(((uint8_t *)p->data)[100], 0); /* a new page is zero-filled */
    memset(p->data, 0xab, 4096);
    pcache_mark_dirty(c, p);
    pcache_put(c, p);
    CHECK_EQ(pcache_dirty_count(c, PAGE_NODE), 1);
    /* Pressure on the budget reclaims clean pages only. */
    for (uint64_t b = 0; b < 200; b++) {
        CHECK_EQ(pcache_get(c, PAGE_META, b, b, &p), 0);
        pcache_put(c, p);
    }
    p = pcache_find(c, PAGE_NODE, 1000);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ(((uint8_t *)p->data)[4095], 0xab);
        pcache_put(c, p);
    }
    /* The same key in another space is another page. */
    CHECK(pcache_find(c, PAGE_DATA, 1000) == NULL);
    struct page *dirty[4];
    CHECK_EQ(pcache_collect_dirty(c, PAGE_NODE, dirty, 4), 1);
    pcache_mark_clean(c, dirty[0], 77);
    CHECK_EQ(dirty[0]->blkaddr, 77);
    pcache_put(c, dirty[0]);
    CHECK_EQ(pcache_dirty_count(c, PAGE_NODE), 0);
    pcache_destroy(c);
}

static void forget_drops_a_page_even_while_held(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 1 << 20, &c), 0);
    struct page *held, *p;
    CHECK_EQ(pcache_get(c, PAGE_META, 9, 9, &held), 0);
    pcache_forget(c, PAGE_META, 9);
    CHECK(pcache_find(c, PAGE_META, 9) == NULL);
    CHECK_EQ(pcache_get(c, PAGE_META, 9, 9, &p), 0);
    CHECK(p != held);
    pcache_put(c, p);
    pcache_put(c, held); /* frees the forgotten page (ASan checks) */
    pcache_destroy(c);
}

/* Misses allocate outside the lock: concurrent ones (also of the same key) must still get
 * one page per key with the right content, and never take the cache over its budget (a
 * draft counted a page only at insertion and overshot, which costs a checkpoint each
 * time in the core). */
struct churn {
    struct pcache *c;
    unsigned seed;
    int err;
};

static atomic_bool churn_stop;

static void *churn_thread(void *arg)
{
    struct churn *r = arg;
    for (int i = 0; i < 4000; i++) {
        int err = get_check_put(r->c, (uint64_t)(rand_r(&r->seed) % NBLOCKS));
        if (err)
            r->err = err;
    }
    return NULL;
}

static void *budget_watch(void *arg)
{
    struct churn *w = arg;
    while (!atomic_load(&churn_stop))
        if (pcache_over_budget(w->c))
            w->err = -E2BIG;
    return NULL;
}

static void concurrent_misses_keep_the_budget(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 * 4096, &c), 0);
    enum { N = 6 };
    pthread_t t[N], watch;
    struct churn r[N], w = {c, 0, 0};
    atomic_store(&churn_stop, false);
    pthread_create(&watch, NULL, budget_watch, &w);
    for (int i = 0; i < N; i++) {
        r[i] = (struct churn){c, 1234u + (unsigned)i, 0};
        pthread_create(&t[i], NULL, churn_thread, &r[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].err, 0);
    }
    atomic_store(&churn_stop, true);
    pthread_join(watch, NULL);
    CHECK_EQ(w.err, 0); /* never over the budget */
    struct counters k = counters_of(c);
    CHECK(k.pages <= 64);
    CHECK_EQ(k.hits + k.misses, (uint64_t)N * 4000);
    pcache_destroy(c);
}

/* The one-hold forms: put_dirty, keep_dirty (drops what is clean again), mark_clean_many. */
static void batch_forms(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 1 << 20, &c), 0);
    struct page *p[4];
    for (uint64_t i = 0; i < 4; i++) {
        CHECK_EQ(pcache_get(c, PAGE_DATA, i, PCACHE_NO_LOAD, &p[i]), 0);
        pcache_put_dirty(c, p[i]);
    }
    CHECK_EQ(pcache_dirty_count(c, PAGE_DATA), 4);
    struct page *got[8];
    CHECK_EQ(pcache_collect_dirty(c, PAGE_DATA, got, 8), 4);
    pcache_mark_clean(c, got[1], 11); /* written meanwhile */
    size_t kept = pcache_keep_dirty(c, got, 4);
    CHECK_EQ(kept, 3);
    CHECK(got[0] == p[0] && got[1] == p[2] && got[2] == p[3]);
    const uint32_t addrs[3] = {20, 22, 23};
    pcache_mark_clean_many(c, got, addrs, kept);
    CHECK_EQ(pcache_dirty_count(c, PAGE_DATA), 0);
    CHECK_EQ(p[0]->blkaddr, 20);
    CHECK_EQ(p[1]->blkaddr, 11);
    CHECK_EQ(p[3]->blkaddr, 23);
    for (size_t i = 0; i < kept; i++)
        pcache_put(c, got[i]);
    pcache_destroy(c); /* ASan: every reference was dropped once */
}

struct named_counter {
    const char *name;
    uint64_t value;
};

static void grab_named(void *sink, const char *name, uint64_t v)
{
    struct named_counter *w = sink;
    if (!strcmp(name, w->name))
        w->value = v;
}

static uint64_t counter(struct pcache *c, const char *name)
{
    struct named_counter want = {name, 0};
    pcache_emit_stats(c, grab_named, &want);
    return want.value;
}

/* Resident memory of this process in bytes (/proc/self/statm). */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Fills keys [from, to) of PAGE_DATA with pages holding their key (no device reads). */
static int fill_keys(struct pcache *c, uint64_t from, uint64_t to, bool dirty)
{
    for (uint64_t k = from; k < to; k++) {
        struct page *p;
        int err = pcache_get(c, PAGE_DATA, k, PCACHE_NO_LOAD, &p);
        if (err)
            return err;
        memcpy(p->data, &k, sizeof(k));
        if (dirty)
            pcache_put_dirty(c, p);
        else
            pcache_put(c, p);
    }
    return 0;
}

static size_t reclaim_all(struct pcache *c)
{
    size_t total = 0, n;
    while ((n = pcache_reclaim_step(c, 100)) > 0)
        total += n;
    return total;
}

/* A bigger budget keeps more; a smaller one is reached by batches, the least recently used
 * going first, and the memory comes back to the system. */
static void budget_grows_and_shrinks(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 * 4096, &c), 0);
    CHECK_EQ(pcache_budget(c), 64 * 4096);
    CHECK_EQ(fill_keys(c, 0, 200, false), 0);
    CHECK(counters_of(c).pages <= 64);
    pcache_set_budget(c, 16384 * 4096ull); /* 64 MiB */
    CHECK_EQ(pcache_budget(c), 16384 * 4096ull);
    uint64_t before = counters_of(c).evictions;
    CHECK_EQ(fill_keys(c, 1000, 17000, false), 0);
    struct counters k = counters_of(c);
    CHECK(k.pages <= 16384);
    CHECK(k.pages >= 16000);                 /* grown: nothing evicted until the new budget */
    CHECK(k.evictions - before <= 64 + 400); /* only the overflow went */
    uint64_t resident = pcache_resident_bytes(c), rss = rss_bytes();
    CHECK(resident >= 16000 * 4096ull);

    pcache_set_budget(c, 256 * 4096);
    CHECK(counters_of(c).pages > 256); /* lowered at once, reached gradually */
    size_t evicted = reclaim_all(c);
    k = counters_of(c);
    CHECK(k.pages <= 256);
    CHECK(evicted >= 16000 - 256);
    struct page *p = pcache_find(c, PAGE_DATA, 16999); /* the most recent stays */
    CHECK(p != NULL);
    pcache_put(c, p);
    CHECK(pcache_find(c, PAGE_DATA, 1000) == NULL); /* the oldest went */
    uint64_t given = pcache_give_back(c);
    CHECK(given >= (16000 - 256 - 256) * 4096ull);
    CHECK_EQ(counter(c, "cache.given_back_bytes"), given);
    CHECK(pcache_resident_bytes(c) <= resident - given);
    CHECK(rss_bytes() + given / 2 <= rss); /* the system really got it */
    /* Buffers given back serve new pages again, zero-filled or loaded as asked. */
    pcache_set_budget(c, 4096 * 4096);
    CHECK_EQ(fill_keys(c, 20000, 23000, false), 0);
    for (uint64_t key = 20000; key < 23000; key += 97) {
        p = pcache_find(c, PAGE_DATA, key);
        CHECK(p != NULL);
        if (p) {
            uint64_t v;
            memcpy(&v, p->data, sizeof(v));
            CHECK_EQ(v, key);
            pcache_put(c, p);
        }
    }
    CHECK(counter(c, "cache.resizes") >= 3);
    pcache_destroy(c);
}

/* Shrinking below the dirty pages drops clean ones only: the dirty ones keep their content,
 * and the cache says it is over its budget until they are written. */
static void shrink_keeps_dirty_pages(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 512 * 4096, &c), 0);
    CHECK_EQ(fill_keys(c, 0, 300, true), 0);
    CHECK_EQ(fill_keys(c, 1000, 1200, false), 0);
    CHECK(!pcache_over_budget(c));
    pcache_set_budget(c, 128 * 4096);
    reclaim_all(c);
    CHECK_EQ(pcache_dirty_total(c), 300);
    struct counters k = counters_of(c);
    CHECK(k.pages <= 300 + 16); /* the dirty pages and a clean reserve of budget/8 */
    CHECK(pcache_over_budget(c));
    for (uint64_t key = 0; key < 300; key++) {
        struct page *p = pcache_find(c, PAGE_DATA, key);
        CHECK(p != NULL && p->dirty);
        if (p) {
            uint64_t v;
            memcpy(&v, p->data, sizeof(v));
            CHECK_EQ(v, key);
            pcache_put(c, p);
        }
    }
    /* Written back: now they may go. */
    struct page *dirty[300];
    size_t n = pcache_collect_dirty(c, PAGE_DATA, dirty, 300);
    CHECK_EQ(n, 300);
    for (size_t i = 0; i < n; i++) {
        pcache_mark_clean(c, dirty[i], 7);
        pcache_put(c, dirty[i]);
    }
    reclaim_all(c);
    CHECK(counters_of(c).pages <= 128);
    CHECK(!pcache_over_budget(c));
    pcache_destroy(c);
}

/* The hash table doubles while pages come in (moved a few buckets at a time): every page
 * stays findable during and after, and a range discard walks both tables. */
static void table_grows_in_use(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 1024 * 4096, &c), 0); /* 1024 buckets */
    pcache_set_budget(c, 40000 * 4096ull);
    for (uint64_t key = 0; key < 36000; key += 1000) {
        CHECK_EQ(fill_keys(c, key, key + 1000, false), 0);
        /* mid-move: everything so far is there */
        for (uint64_t probe = 0; probe < key + 1000; probe += 331) {
            struct page *p = pcache_find(c, PAGE_DATA, probe);
            CHECK(p != NULL);
            if (p)
                pcache_put(c, p);
        }
    }
    CHECK_EQ(counters_of(c).pages, 36000);
    uint64_t bad = 0;
    for (uint64_t key = 0; key < 36000; key++) {
        struct page *p = pcache_find(c, PAGE_DATA, key);
        uint64_t v = UINT64_MAX;
        if (p) {
            memcpy(&v, p->data, sizeof(v));
            pcache_put(c, p);
        }
        bad += v != key;
    }
    CHECK_EQ(bad, 0);
    pcache_discard_range(c, PAGE_DATA, 5000, 30999); /* more keys than buckets: a walk */
    CHECK_EQ(counters_of(c).pages, 36000 - 26000);
    CHECK(pcache_find(c, PAGE_DATA, 5000) == NULL);
    struct page *p = pcache_find(c, PAGE_DATA, 31000);
    CHECK(p != NULL);
    pcache_put(c, p);
    pcache_destroy(c);
}

/* A range inside one file's PAGE_DATA keys goes by the file's own list: only its pages in
 * the range go (dirty and held ones too), every other file's stay; a range across files
 * still works. */
static void file_range_discard(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 << 20, &c), 0);
    for (uint64_t ino = 1; ino <= 20; ino++)
        for (uint64_t i = 0; i < 300; i += 3) { /* sparse indexes, beyond the bucket count */
            struct page *p;
            CHECK_EQ(pcache_get(c, PAGE_DATA, ino << 32 | (i * 1000), PCACHE_NO_LOAD, &p), 0);
            if (i % 2)
                pcache_put_dirty(c, p);
            else
                pcache_put(c, p);
        }
    struct page *held = pcache_find(c, PAGE_DATA, 7ull << 32 | 150000);
    CHECK(held != NULL);
    CHECK_EQ(counters_of(c).pages, 20 * 100);
    /* a truncate of file 7 to block 150000: its pages from there go */
    pcache_discard_range(c, PAGE_DATA, 7ull << 32 | 150000, 7ull << 32 | 0xffffffffu);
    CHECK_EQ(counters_of(c).pages, 20 * 100 - 50);
    CHECK(pcache_find(c, PAGE_DATA, 7ull << 32 | 150000) == NULL);
    struct page *p = pcache_find(c, PAGE_DATA, 7ull << 32 | 147000);
    CHECK(p != NULL);
    pcache_put(c, p);
    pcache_put(c, held); /* discarded while held: freed now (ASan) */
    /* an unlink of file 3: all of it, nothing of file 4 */
    pcache_discard_range(c, PAGE_DATA, 3ull << 32, 3ull << 32 | 0xffffffffu);
    CHECK_EQ(counters_of(c).pages, 20 * 100 - 150);
    p = pcache_find(c, PAGE_DATA, 4ull << 32);
    CHECK(p != NULL);
    pcache_put(c, p);
    CHECK(pcache_find(c, PAGE_DATA, 3ull << 32) == NULL);
    pcache_discard_range(c, PAGE_DATA, 99ull << 32, 99ull << 32 | 0xffffffffu); /* no pages */
    /* files 10 to 12 at once: the walk */
    pcache_discard_range(c, PAGE_DATA, 10ull << 32, 12ull << 32 | 0xffffffffu);
    CHECK_EQ(counters_of(c).pages, 20 * 100 - 450);
    CHECK_EQ(pcache_dirty_total(c), 20 * 50 - 25 - 50 - 150);
    /* the file's pages come back under a fresh list */
    CHECK_EQ(pcache_get(c, PAGE_DATA, 3ull << 32 | 5, PCACHE_NO_LOAD, &p), 0);
    pcache_put(c, p);
    pcache_discard_range(c, PAGE_DATA, 3ull << 32, 3ull << 32 | 0xffffffffu);
    CHECK(pcache_find(c, PAGE_DATA, 3ull << 32 | 5) == NULL);
    pcache_destroy(c);
}

/* A page put after its writeback leaves when clean and unreferenced (the kernel's page cache
 * holds a regular file's data); a directory's, a re-dirtied or a still held one stays. */
static void written_pages_leave(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 << 20, &c), 0);
    struct page *p[4];
    for (uint64_t i = 0; i < 4; i++) {
        CHECK_EQ(pcache_get(c, PAGE_DATA, 1ull << 32 | i, PCACHE_NO_LOAD, &p[i]), 0);
        pcache_mark_dirty(c, p[i]);
        pcache_mark_clean(c, p[i], 100 + (uint32_t)i); /* written */
    }
    p[1]->checkpoint_data = true; /* a directory's block */
    pcache_mark_dirty(c, p[2]);   /* written again meanwhile */
    struct page *reader = pcache_find(c, PAGE_DATA, 1ull << 32 | 3);
    for (int i = 0; i < 4; i++)
        pcache_put_written(c, p[i]);
    CHECK(pcache_find(c, PAGE_DATA, 1ull << 32 | 0) == NULL);
    for (uint64_t i = 1; i < 4; i++) {
        struct page *q = pcache_find(c, PAGE_DATA, 1ull << 32 | i);
        CHECK(q != NULL);
        pcache_put(c, q);
    }
    pcache_put(c, reader);
    CHECK_EQ(counter(c, "cache.written_dropped"), 1);
    CHECK_EQ(counters_of(c).pages, 3);
    /* One file's dirty pages through its own list: p[2] of file 1 only. */
    struct page *q;
    CHECK_EQ(pcache_get(c, PAGE_DATA, 2ull << 32 | 7, PCACHE_NO_LOAD, &q), 0);
    pcache_put_dirty(c, q);
    struct page *got[8];
    CHECK_EQ(pcache_collect_dirty_file(c, 1, got, 8), 1);
    CHECK(got[0] == p[2]);
    pcache_put(c, got[0]);
    CHECK_EQ(pcache_collect_dirty_file(c, 2, got, 8), 1);
    pcache_put(c, got[0]);
    CHECK_EQ(pcache_collect_dirty_file(c, 3, got, 8), 0);
    pcache_destroy(c);
}

/* Buffers nobody needed for a whole period go back; those a steady stream reuses stay. */
static void idle_buffers_given_back(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 64 << 20, &c), 0);
    CHECK_EQ(fill_keys(c, 1ull << 32, (1ull << 32) + 8000, false), 0);
    pcache_discard_range(c, PAGE_DATA, 1ull << 32, 1ull << 32 | 0xffffffffu); /* an unlink */
    CHECK_EQ(counters_of(c).pages, 0);
    pcache_give_back_idle(c); /* starts the period */
    uint64_t given = pcache_give_back_idle(c);
    CHECK(given >= (8000 - 256 - 64) * 4096ull);
    /* a stream that reuses its buffers every period keeps them */
    CHECK_EQ(fill_keys(c, 2ull << 32, (2ull << 32) + 6000, false), 0);
    pcache_give_back_idle(c);
    for (int round = 0; round < 3; round++) {
        pcache_discard_range(c, PAGE_DATA, 2ull << 32, 2ull << 32 | 0xffffffffu);
        CHECK_EQ(fill_keys(c, 2ull << 32, (2ull << 32) + 6000, false), 0);
        CHECK_EQ(pcache_give_back_idle(c), 0);
    }
    pcache_destroy(c);
}

/* Readers, writers of dirty pages and a resizer at once (run it under ThreadSanitizer too:
 * make SAN=thread build-tsan/tests/test_pcache): contents stay right, and once the resizer
 * stops and the dirty pages are cleaned the budget holds. */
static atomic_bool resize_stop;

static void *resize_thread(void *arg)
{
    struct churn *r = arg;
    while (!atomic_load(&resize_stop)) {
        uint64_t pages = 64 + (uint64_t)(rand_r(&r->seed) % 1024);
        pcache_set_budget(r->c, pages * 4096);
        while (pcache_reclaim_step(r->c, 16) > 0)
            ;
        pcache_give_back(r->c);
    }
    return NULL;
}

static void *dirty_thread(void *arg)
{
    struct churn *r = arg;
    for (int i = 0; i < 3000; i++) {
        uint64_t key = (uint64_t)(rand_r(&r->seed) % 256);
        struct page *p;
        int err = pcache_get(r->c, PAGE_NODE, key, PCACHE_NO_LOAD, &p);
        if (err) {
            r->err = err;
            continue;
        }
        uint64_t v;
        memcpy(&v, p->data, sizeof(v));
        if (v != 0 && v != key + 1)
            r->err = -EIO;
        v = key + 1;
        memcpy(p->data, &v, sizeof(v));
        if (i % 3)
            pcache_put_dirty(r->c, p);
        else {
            pcache_mark_clean(r->c, p, 1);
            pcache_put(r->c, p);
        }
    }
    return NULL;
}

static void resize_under_concurrency(void)
{
    struct pcache *c;
    CHECK_EQ(pcache_create(dev, 256 * 4096, &c), 0);
    enum { N = 4 };
    pthread_t t[N], d, rz;
    struct churn r[N], dr = {c, 99, 0}, rr = {c, 7, 0};
    atomic_store(&resize_stop, false);
    pthread_create(&rz, NULL, resize_thread, &rr);
    pthread_create(&d, NULL, dirty_thread, &dr);
    for (int i = 0; i < N; i++) {
        r[i] = (struct churn){c, 4321u + (unsigned)i, 0};
        pthread_create(&t[i], NULL, churn_thread, &r[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].err, 0);
    }
    pthread_join(d, NULL);
    CHECK_EQ(dr.err, 0);
    atomic_store(&resize_stop, true);
    pthread_join(rz, NULL);
    struct page *dirty[256];
    size_t n = pcache_collect_dirty(c, PAGE_NODE, dirty, 256);
    for (size_t i = 0; i < n; i++) {
        pcache_mark_clean(c, dirty[i], 1);
        pcache_put(c, dirty[i]);
    }
    pcache_set_budget(c, 64 * 4096);
    reclaim_all(c);
    CHECK(counters_of(c).pages <= 64);
    pcache_destroy(c);
}

int main(void)
{
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    char *blk = calloc(1, 4096);
    for (uint64_t b = 0; b < NBLOCKS; b++) {
        memcpy(blk, &b, sizeof(b));
        if (pwrite(fd, blk, 4096, (off_t)(b * 4096)) != 4096)
            return 1;
    }
    free(blk);
    close(fd);
    struct blk_options o = {.backend = "uring", .read_only = true};
    if (blk_open(path, &o, &dev) != 0)
        return 1;
    RUN(pages_hold_device_blocks);
    RUN(budget_is_kept);
    RUN(one_load_per_page_under_concurrency);
    RUN(failed_load_is_retried);
    RUN(dirty_pages_stay_until_clean);
    RUN(forget_drops_a_page_even_while_held);
    RUN(concurrent_misses_keep_the_budget);
    RUN(batch_forms);
    RUN(budget_grows_and_shrinks);
    RUN(shrink_keeps_dirty_pages);
    RUN(table_grows_in_use);
    RUN(resize_under_concurrency);
    RUN(file_range_discard);
    RUN(written_pages_leave);
    RUN(idle_buffers_given_back);
    blk_close(dev);
    unlink(path);
    return CHECK_DONE();
}
