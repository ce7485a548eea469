#include "cache/pcache.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "util/clock.h"
#include "util/log.h"

#define PAGE_BYTES 4096u
#define MIN_PAGES  (PCACHE_MIN_BYTES / PAGE_BYTES)

/* Page buffers come from 256 KiB chunks carved into 4 KiB pages and are recycled through a
 * free list: memory stays at the cache's high-water mark instead of fragmenting the heap
 * (per-thread malloc arenas would otherwise hold freed pages of other threads).  When the
 * budget shrinks, free buffers go back to the system (MADV_DONTNEED) and wait on a second
 * list, outside their own memory (writing a link into one would page it in again). */
#define POOL_CHUNK_PAGES 64
#define POOL_KEEP_FREE   256u /* free buffers kept resident when giving memory back (1 MiB) */
/* pcache_give_back_idle: at least this many buffers free through a whole period (16 MiB) */
#define IDLE_GIVE_BACK_MIN 4096u

struct page_pool {
    pthread_mutex_t lock;
    void *free_list; /* resident free buffers: each one's first word links to the next */
    size_t nfree;
    size_t nfree_low; /* the fewest free buffers since the last idle give-back */
    void **released;  /* free buffers whose memory went back to the system */
    size_t nreleased, capreleased;
    void **chunks;
    size_t nchunks, capchunks;
    uint64_t given_back; /* bytes, in total */
};

/* The hash table starts small and doubles when it holds two pages per bucket.  The move is
 * incremental (as Redis's dict): each insertion moves a few old buckets, and a bucket not
 * moved yet is looked up in the old table, so no caller waits for a whole rehash. */
#define INITIAL_BUCKETS_MAX (1u << 16)
#define MAX_BUCKETS         (1u << 26)
#define REHASH_STEP         8u /* old buckets moved per insertion */

/* PAGE_DATA pages are also listed per file (key >> 32, the ino): a truncate or unlink then
 * finds the file's pages without walking the whole table, which grows with the cache. */
struct page_group {
    uint64_t id;
    struct page_group *next; /* hash chain */
    struct page *pages;      /* through page->group_next, NULL-terminated */
};
#define GROUP_BUCKETS_MIN 1024u

/* Pages a get or a put evicts at most: a budget that shrank by a lot is reached over many
 * calls (and pcache_reclaim_step's batches), never in one long hold of the lock. */
#define RECLAIM_BATCH 32u

struct pcache {
    struct blk_dev *dev;
    struct page_pool pool;
    pthread_mutex_t lock;
    pthread_cond_t loaded; /* broadcast when any page finishes loading */
    struct page **buckets;
    size_t nbuckets;            /* power of two */
    struct page **old_buckets;  /* during a resize: the table being moved, or NULL */
    size_t old_nbuckets;        /* power of two */
    size_t rehashed;            /* old buckets [0, rehashed) are moved */
    struct page_group **groups; /* the per-file index of PAGE_DATA pages */
    size_t ngroup_buckets, ngroups;
    bool groups_incomplete;         /* a group could not be allocated: ranges walk the table */
    struct page lru;                /* sentinel: lru.lru_next is the least recently used */
    struct page dirty[PAGE_SPACES]; /* sentinels of the dirty lists, oldest first */
    size_t ndirty[PAGE_SPACES];     /* changed under the lock (atomically: read without it) */
    uint64_t max_pages;
    uint64_t pages;
    uint64_t resizes;
    atomic_uint_fast64_t hits, misses, evictions, load_errors;
    atomic_uint_fast64_t bad_puts;        /* puts of a page nobody held: a caller's bug, refused */
    atomic_uint_fast64_t written_dropped; /* pcache_put_written: copies the kernel holds */
    /* pcache_inject_enomem (under lock) */
    uint64_t enomem_countdown, enomem_fired, allocations;
    bool enomem_sticky, enomem_dead;
};

static _Thread_local uint64_t thread_loads;

uint64_t pcache_thread_loads(void)
{
    return thread_loads;
}

void pcache_inject_enomem(struct pcache *c, uint64_t nth, bool sticky)
{
    pthread_mutex_lock(&c->lock);
    c->enomem_countdown = nth;
    c->enomem_sticky = sticky;
    c->enomem_dead = false;
    pthread_mutex_unlock(&c->lock);
}

static bool enomem_injected(struct pcache *c);

bool pcache_alloc_fails(struct pcache *c)
{
    pthread_mutex_lock(&c->lock);
    bool fail = enomem_injected(c);
    pthread_mutex_unlock(&c->lock);
    return fail;
}

/* True when an injected allocation failure applies to this allocation (lock held). */
static bool enomem_injected(struct pcache *c)
{
    c->allocations++;
    bool fire = c->enomem_dead;
    if (!fire && c->enomem_countdown)
        fire = --c->enomem_countdown == 0;
    if (fire) {
        c->enomem_fired++;
        c->enomem_dead = c->enomem_sticky;
    }
    return fire;
}

/* A 64-bit mix (MurmurHash3's finalizer): every key bit reaches the low bits the tables
 * index by.  The multiplicative hash before took bits 20 and up of key * constant, which
 * for PAGE_DATA keys (ino << 32 | index) of small files, all index 0, left 4 bits to tell
 * the files apart: a copied source tree put ~86,000 pages in 16 chains (hash_find 27 % of
 * the daemon's CPU in perf). */
static uint64_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static uint64_t hash_of(enum page_space space, uint64_t key)
{
    return mix64(key ^ ((uint64_t)space << 62));
}

/* The chain that holds (space, key) now: the old table's while its bucket is not moved. */
static struct page **bucket_head(struct pcache *c, enum page_space space, uint64_t key)
{
    uint64_t h = hash_of(space, key);
    if (c->old_buckets) {
        size_t ob = (size_t)h & (c->old_nbuckets - 1);
        if (ob >= c->rehashed)
            return &c->old_buckets[ob];
    }
    return &c->buckets[(size_t)h & (c->nbuckets - 1)];
}

/* Moves up to n buckets of the old table into the new one (lock held). */
static void rehash_step(struct pcache *c, size_t n)
{
    while (c->old_buckets && n--) {
        struct page *p = c->old_buckets[c->rehashed++];
        while (p) {
            struct page *next = p->hash_next;
            struct page **head = &c->buckets[(size_t)hash_of(p->space, p->key) & (c->nbuckets - 1)];
            p->hash_next = *head;
            *head = p;
            p = next;
        }
        if (c->rehashed == c->old_nbuckets) {
            free(c->old_buckets);
            c->old_buckets = NULL;
            c->old_nbuckets = c->rehashed = 0;
        }
    }
}

/* Before an insertion (lock held): go on moving, or start a move to a table twice as big
 * once chains average two pages.  Without memory for it the chains just grow longer. */
static void table_grow(struct pcache *c)
{
    if (c->old_buckets) {
        rehash_step(c, REHASH_STEP);
        return;
    }
    if (c->pages <= 2 * (uint64_t)c->nbuckets || c->nbuckets >= MAX_BUCKETS)
        return;
    struct page **bigger = calloc(c->nbuckets * 2, sizeof(*bigger));
    if (!bigger)
        return;
    c->old_buckets = c->buckets;
    c->old_nbuckets = c->nbuckets;
    c->rehashed = 0;
    c->buckets = bigger;
    c->nbuckets *= 2;
    rehash_step(c, REHASH_STEP);
}

/* Calls fn on every page in the table(s), which may unlink it (lock held). */
static void table_walk(struct pcache *c, void (*fn)(struct pcache *c, struct page *p, void *arg),
                       void *arg)
{
    for (size_t b = c->rehashed; c->old_buckets && b < c->old_nbuckets; b++)
        for (struct page *p = c->old_buckets[b], *next; p; p = next) {
            next = p->hash_next;
            fn(c, p, arg);
        }
    for (size_t b = 0; b < c->nbuckets; b++)
        for (struct page *p = c->buckets[b], *next; p; p = next) {
            next = p->hash_next;
            fn(c, p, arg);
        }
}

static void list_init(struct page *head)
{
    head->lru_next = head->lru_prev = head;
}

static void list_unlink(struct page *p)
{
    if (p->lru_next) {
        p->lru_prev->lru_next = p->lru_next;
        p->lru_next->lru_prev = p->lru_prev;
        p->lru_next = p->lru_prev = NULL;
    }
}

static void list_add_tail(struct page *head, struct page *p)
{
    p->lru_prev = head->lru_prev;
    p->lru_next = head;
    head->lru_prev->lru_next = p;
    head->lru_prev = p;
}

static struct page *hash_find(struct pcache *c, enum page_space space, uint64_t key)
{
    struct page *p = *bucket_head(c, space, key);
    while (p && (p->key != key || p->space != space))
        p = p->hash_next;
    return p;
}

static size_t group_bucket(size_t nbuckets, uint64_t id)
{
    return (size_t)mix64(id) & (nbuckets - 1);
}

static struct page_group *group_find(struct pcache *c, uint64_t id)
{
    struct page_group *g = c->groups[group_bucket(c->ngroup_buckets, id)];
    while (g && g->id != id)
        g = g->next;
    return g;
}

/* Doubles the group table once it holds two groups per bucket (lock held; the groups are
 * moved at once: there are as many as files with cached data, far fewer than pages). */
static void groups_grow(struct pcache *c)
{
    if (c->ngroups <= 2 * c->ngroup_buckets)
        return;
    size_t n = c->ngroup_buckets * 2;
    struct page_group **t = calloc(n, sizeof(*t));
    if (!t)
        return;
    for (size_t b = 0; b < c->ngroup_buckets; b++)
        for (struct page_group *g = c->groups[b], *next; g; g = next) {
            next = g->next;
            size_t nb = group_bucket(n, g->id);
            g->next = t[nb];
            t[nb] = g;
        }
    free(c->groups);
    c->groups = t;
    c->ngroup_buckets = n;
}

/* Lists a PAGE_DATA page under its file (lock held). */
static void group_add(struct pcache *c, struct page *p)
{
    if (p->space != PAGE_DATA)
        return;
    uint64_t id = p->key >> 32;
    struct page_group *g = group_find(c, id);
    if (!g) {
        g = calloc(1, sizeof(*g));
        if (!g) {
            c->groups_incomplete = true;
            return;
        }
        g->id = id;
        size_t b = group_bucket(c->ngroup_buckets, id);
        g->next = c->groups[b];
        c->groups[b] = g;
        c->ngroups++;
        groups_grow(c);
    }
    p->group = g;
    p->group_prev = NULL;
    p->group_next = g->pages;
    if (g->pages)
        g->pages->group_prev = p;
    g->pages = p;
}

static void group_remove(struct pcache *c, struct page *p)
{
    struct page_group *g = p->group;
    if (!g)
        return;
    if (p->group_prev)
        p->group_prev->group_next = p->group_next;
    else
        g->pages = p->group_next;
    if (p->group_next)
        p->group_next->group_prev = p->group_prev;
    p->group = NULL;
    p->group_prev = p->group_next = NULL;
    if (!g->pages) {
        struct page_group **gp = &c->groups[group_bucket(c->ngroup_buckets, g->id)];
        while (*gp != g)
            gp = &(*gp)->next;
        *gp = g->next;
        c->ngroups--;
        free(g);
    }
}

static void hash_remove(struct pcache *c, struct page *p)
{
    group_remove(c, p);
    struct page **pp = bucket_head(c, p->space, p->key);
    while (*pp && *pp != p)
        pp = &(*pp)->hash_next;
    if (*pp)
        *pp = p->hash_next;
    p->hash_next = NULL;
    p->in_table = false;
}

static void *pool_get(struct page_pool *pool)
{
    pthread_mutex_lock(&pool->lock);
    if (!pool->free_list && !pool->nreleased) {
        if (pool->nchunks == pool->capchunks) {
            size_t cap = pool->capchunks ? pool->capchunks * 2 : 64;
            void **n = realloc(pool->chunks, cap * sizeof(*n));
            if (!n) {
                pthread_mutex_unlock(&pool->lock);
                return NULL;
            }
            pool->chunks = n;
            pool->capchunks = cap;
        }
        uint8_t *chunk = mmap(NULL, (size_t)POOL_CHUNK_PAGES * PAGE_BYTES, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (chunk == MAP_FAILED) {
            pthread_mutex_unlock(&pool->lock);
            return NULL;
        }
        pool->chunks[pool->nchunks++] = chunk;
        for (int i = POOL_CHUNK_PAGES - 1; i >= 0; i--) {
            void *buf = chunk + (size_t)i * PAGE_BYTES;
            *(void **)buf = pool->free_list;
            pool->free_list = buf;
        }
        pool->nfree += POOL_CHUNK_PAGES;
    }
    void *buf;
    if (pool->free_list) {
        buf = pool->free_list;
        pool->free_list = *(void **)buf;
        pool->nfree--;
        if (pool->nfree < pool->nfree_low)
            pool->nfree_low = pool->nfree;
    } else {
        buf = pool->released[--pool->nreleased]; /* paged in again by the caller's use */
    }
    pthread_mutex_unlock(&pool->lock);
    return buf;
}

static void pool_put(struct page_pool *pool, void *buf)
{
    pthread_mutex_lock(&pool->lock);
    *(void **)buf = pool->free_list;
    pool->free_list = buf;
    pool->nfree++;
    pthread_mutex_unlock(&pool->lock);
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* Gives the memory of up to want free buffers back to the system, keeping keep on the free
 * list; returns the bytes.  The buffers leave the free list under the lock, are released
 * outside it in runs of adjacent addresses (one madvise each), then wait on the released
 * list. */
static uint64_t pool_give_back(struct page_pool *pool, size_t want, size_t keep)
{
    pthread_mutex_lock(&pool->lock);
    size_t spare = pool->nfree > keep ? pool->nfree - keep : 0;
    pthread_mutex_unlock(&pool->lock);
    if (want > spare)
        want = spare;
    void **batch = want ? malloc(want * sizeof(*batch)) : NULL;
    if (!batch)
        return 0;
    size_t n = 0;
    pthread_mutex_lock(&pool->lock);
    while (n < want && pool->nfree > keep) {
        batch[n++] = pool->free_list;
        pool->free_list = *(void **)pool->free_list;
        pool->nfree--;
    }
    pthread_mutex_unlock(&pool->lock);
    if (n == 0) { /* taken meanwhile */
        free(batch);
        return 0;
    }
    qsort(batch, n, sizeof(*batch), by_address);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && (char *)batch[j] == (char *)batch[j - 1] + PAGE_BYTES)
            j++;
        madvise(batch[i], (j - i) * PAGE_BYTES, MADV_DONTNEED);
        i = j;
    }
    pthread_mutex_lock(&pool->lock);
    if (pool->nreleased + n > pool->capreleased) {
        size_t cap = pool->capreleased * 2 > pool->nreleased + n ? pool->capreleased * 2
                                                                 : pool->nreleased + n;
        void **bigger = realloc(pool->released, cap * sizeof(*bigger));
        if (bigger) {
            pool->released = bigger;
            pool->capreleased = cap;
        }
    }
    size_t kept = 0;
    if (pool->nreleased + n <= pool->capreleased) {
        memcpy(pool->released + pool->nreleased, batch, n * sizeof(*batch));
        pool->nreleased += n;
    } else { /* no room to note them: back on the free list (each paged in by its link) */
        for (size_t i = 0; i < n; i++) {
            *(void **)batch[i] = pool->free_list;
            pool->free_list = batch[i];
        }
        pool->nfree += n;
        kept = n;
    }
    uint64_t bytes = (uint64_t)(n - kept) * PAGE_BYTES;
    pool->given_back += bytes;
    pthread_mutex_unlock(&pool->lock);
    free(batch);
    return bytes;
}

static void page_free(struct pcache *c, struct page *p)
{
    pool_put(&c->pool, p->data);
    free(p);
}

/* Clean pages kept when dirty pages fill the budget (1 MiB): without them every load
 * evicted every clean page, so a writeback or a write walking a file re-read its inode and
 * node blocks for each data page (bench/fio: ~19k node reads per 4 s of sequential writes). */
#define CLEAN_RESERVE_PAGES 256u

static uint64_t dirty_locked(const struct pcache *c)
{
    uint64_t dirty = 0;
    for (int s = 0; s < PAGE_SPACES; s++)
        dirty += c->ndirty[s];
    return dirty;
}

/* The clean pages kept beside the dirty ones: an eighth of the budget at most, so that a
 * small cache keeps its budget exactly. */
static uint64_t clean_reserve(uint64_t budget_pages)
{
    return budget_pages / 8 < CLEAN_RESERVE_PAGES ? budget_pages / 8 : CLEAN_RESERVE_PAGES;
}

/* Frees up to max least recently used clean unreferenced pages while more than target_pages
 * remain (or only the clean reserve on top of the dirty pages); returns how many.  Called
 * with the lock held. */
static size_t reclaim(struct pcache *c, uint64_t target_pages, size_t max)
{
    uint64_t floor = dirty_locked(c) + clean_reserve(target_pages);
    if (target_pages < floor)
        target_pages = floor;
    size_t n = 0;
    struct page *p = c->lru.lru_next;
    while (c->pages > target_pages && p != &c->lru && n < max) {
        struct page *next = p->lru_next;
        list_unlink(p);
        hash_remove(c, p);
        page_free(c, p);
        c->pages--;
        n++;
        p = next;
    }
    atomic_fetch_add(&c->evictions, n);
    return n;
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
    c->nbuckets = 1024; /* grows with the pages (table_grow) */
    while (c->nbuckets < c->max_pages && c->nbuckets < INITIAL_BUCKETS_MAX)
        c->nbuckets <<= 1;
    c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
    c->ngroup_buckets = GROUP_BUCKETS_MIN;
    c->groups = calloc(c->ngroup_buckets, sizeof(*c->groups));
    if (!c->buckets || !c->groups) {
        free(c->buckets);
        free(c->groups);
        free(c);
        return -ENOMEM;
    }
    list_init(&c->lru);
    for (int s = 0; s < PAGE_SPACES; s++)
        list_init(&c->dirty[s]);
    /* Held for a few hundred ns at a time by every request thread and the flusher: spin a
     * little before sleeping, so that a short wait does not cost two context switches. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&c->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    pthread_cond_init(&c->loaded, NULL);
    pthread_mutex_init(&c->pool.lock, NULL);
    *out = c;
    return 0;
}

static void destroy_page(struct pcache *c, struct page *p, void *arg)
{
    group_remove(c, p);
    page_free(c, p);
}

void pcache_destroy(struct pcache *c)
{
    if (!c)
        return;
    table_walk(c, destroy_page, NULL);
    free(c->buckets);
    free(c->old_buckets);
    free(c->groups); /* each group went with its last page */
    for (size_t i = 0; i < c->pool.nchunks; i++)
        munmap(c->pool.chunks[i], (size_t)POOL_CHUNK_PAGES * PAGE_BYTES);
    free(c->pool.chunks);
    free(c->pool.released);
    pthread_mutex_destroy(&c->pool.lock);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->loaded);
    free(c);
}

/* Takes a reference on a page found in the table, waiting for its load. */
static int grab_existing(struct pcache *c, struct page *p)
{
    p->refs++;
    if (!p->dirty)
        list_unlink(p); /* referenced pages are on no LRU */
    while (!p->uptodate && !p->load_error)
        pthread_cond_wait(&c->loaded, &c->lock);
    if (p->load_error) {
        /* The failed page is already out of the table; the last holder frees it. */
        int err = p->load_error;
        bool last = --p->refs == 0;
        pthread_mutex_unlock(&c->lock);
        if (last)
            page_free(c, p);
        return err;
    }
    pthread_mutex_unlock(&c->lock);
    atomic_fetch_add(&c->hits, 1);
    return 0;
}

/* Takes the least recently used clean unreferenced page out of the table for reuse when
 * the cache is at its budget and reclaim would evict it anyway (the clean reserve stays).
 * Called with the lock held; the caller owns the page. */
static struct page *reclaim_one(struct pcache *c)
{
    if (c->pages < c->max_pages || c->lru.lru_next == &c->lru)
        return NULL;
    uint64_t target = c->max_pages - 1;
    uint64_t floor = dirty_locked(c) + clean_reserve(target);
    if (target < floor)
        target = floor;
    if (c->pages <= target)
        return NULL;
    struct page *p = c->lru.lru_next;
    list_unlink(p);
    hash_remove(c, p);
    c->pages--;
    atomic_fetch_add(&c->evictions, 1);
    return p;
}

int pcache_get(struct pcache *c, enum page_space space, uint64_t key, uint64_t blkaddr,
               struct page **out)
{
    pthread_mutex_lock(&c->lock);
    struct page *p = hash_find(c, space, key);
    if (p) {
        int err = grab_existing(c, p);
        if (!err)
            *out = p;
        return err;
    }
    if (enomem_injected(c)) {
        pthread_mutex_unlock(&c->lock);
        return -ENOMEM;
    }
    /* At the budget the evicted page is reused as it is; the allocation, the zeroing and
     * any further eviction happen outside the lock every request thread takes. */
    struct page *spare = reclaim_one(c);
    if (c->pages >= c->max_pages)
        reclaim(c, c->max_pages - 1, RECLAIM_BATCH);
    c->pages++; /* counted from here, so that concurrent misses do not overshoot the budget */
    pthread_mutex_unlock(&c->lock);

    void *data;
    if (spare) {
        data = spare->data;
        memset(spare, 0, sizeof(*spare));
        p = spare;
    } else {
        p = calloc(1, sizeof(*p));
        data = p ? pool_get(&c->pool) : NULL;
        if (!data) {
            free(p);
            pthread_mutex_lock(&c->lock);
            c->pages--;
            pthread_mutex_unlock(&c->lock);
            return -ENOMEM;
        }
    }
    p->space = space;
    p->key = key;
    p->blkaddr = blkaddr;
    p->data = data;
    p->refs = 1;
    bool load = blkaddr != PCACHE_NO_LOAD;
    if (!load) {
        memset(p->data, 0, PAGE_BYTES);
        p->uptodate = true;
    }

    pthread_mutex_lock(&c->lock);
    struct page *other = hash_find(c, space, key);
    if (other) { /* created by another thread meanwhile: use that one */
        c->pages--;
        int err = grab_existing(c, other);
        page_free(c, p);
        if (!err)
            *out = other;
        return err;
    }
    table_grow(c);
    struct page **head = bucket_head(c, space, key);
    p->hash_next = *head;
    *head = p;
    p->in_table = true;
    group_add(c, p);
    pthread_mutex_unlock(&c->lock);
    if (!load) {
        *out = p;
        return 0;
    }

    atomic_fetch_add(&c->misses, 1);
    thread_loads++;
    int err = blk_read(c->dev, blkaddr * PAGE_BYTES, p->data, PAGE_BYTES);

    pthread_mutex_lock(&c->lock);
    if (err) {
        /* Forget the page so that a later access retries the read. */
        atomic_fetch_add(&c->load_errors, 1);
        p->load_error = err;
        hash_remove(c, p);
        c->pages--;
        pthread_cond_broadcast(&c->loaded);
        bool last = --p->refs == 0; /* waiters hold references; the last one frees it */
        pthread_mutex_unlock(&c->lock);
        if (last)
            page_free(c, p);
        return err;
    }
    p->uptodate = true;
    pthread_cond_broadcast(&c->loaded);
    pthread_mutex_unlock(&c->lock);
    *out = p;
    return 0;
}

struct page *pcache_find(struct pcache *c, enum page_space space, uint64_t key)
{
    pthread_mutex_lock(&c->lock);
    struct page *p = hash_find(c, space, key);
    if (!p) {
        pthread_mutex_unlock(&c->lock);
        return NULL;
    }
    return grab_existing(c, p) ? NULL : p;
}

struct page *pcache_find_dirty(struct pcache *c, enum page_space space, uint64_t key)
{
    pthread_mutex_lock(&c->lock);
    struct page *p = hash_find(c, space, key);
    if (!p || !p->dirty) {
        pthread_mutex_unlock(&c->lock);
        return NULL;
    }
    return grab_existing(c, p) ? NULL : p;
}

/* Drops a reference; returns the page when the caller must free it (after unlocking). */
static struct page *put_locked(struct pcache *c, struct page *p)
{
    if (--p->refs == 0) {
        if (!p->in_table)
            return p; /* out of the table (failed load, or forgotten while referenced) */
        if (!p->dirty)
            list_add_tail(&c->lru, p);
        if (c->pages > c->max_pages)
            reclaim(c, c->max_pages, RECLAIM_BATCH);
    }
    return NULL;
}

void pcache_put(struct pcache *c, struct page *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&c->lock);
    if (p->refs == 0) { /* a wrapped count would keep the page off the LRU for good */
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_add(&c->bad_puts, 1);
        log_err("page cache: a page was released more often than taken");
        return;
    }
    struct page *gone = put_locked(c, p);
    pthread_mutex_unlock(&c->lock);
    if (gone)
        page_free(c, gone);
}

void pcache_put_written(struct pcache *c, struct page *p)
{
    pthread_mutex_lock(&c->lock);
    if (p->refs == 1 && !p->dirty && p->in_table && !p->checkpoint_data &&
        !__atomic_load_n(&p->partial_write, __ATOMIC_RELAXED)) {
        p->refs = 0;
        hash_remove(c, p);
        c->pages--;
        pthread_mutex_unlock(&c->lock);
        atomic_fetch_add(&c->written_dropped, 1);
        page_free(c, p);
        return;
    }
    pthread_mutex_unlock(&c->lock);
    pcache_put(c, p);
}

static void mark_dirty_locked(struct pcache *c, struct page *p)
{
    if (!p->dirty) {
        p->dirtied_ns = clock_mono_ns();
        p->dirty = true;
        list_unlink(p);
        list_add_tail(&c->dirty[p->space], p);
        __atomic_add_fetch(&c->ndirty[p->space], 1, __ATOMIC_RELAXED);
    }
}

void pcache_mark_dirty(struct pcache *c, struct page *p)
{
    pthread_mutex_lock(&c->lock);
    mark_dirty_locked(c, p);
    pthread_mutex_unlock(&c->lock);
}

void pcache_put_dirty(struct pcache *c, struct page *p)
{
    pthread_mutex_lock(&c->lock);
    mark_dirty_locked(c, p);
    struct page *gone = put_locked(c, p);
    pthread_mutex_unlock(&c->lock);
    if (gone)
        page_free(c, gone);
}

static void mark_clean_locked(struct pcache *c, struct page *p, uint64_t blkaddr)
{
    p->blkaddr = blkaddr;
    if (p->dirty) {
        p->dirty = false;
        list_unlink(p);
        __atomic_sub_fetch(&c->ndirty[p->space], 1, __ATOMIC_RELAXED);
        if (p->refs == 0)
            list_add_tail(&c->lru, p);
    }
}

void pcache_mark_clean(struct pcache *c, struct page *p, uint64_t blkaddr)
{
    pthread_mutex_lock(&c->lock);
    mark_clean_locked(c, p, blkaddr);
    pthread_mutex_unlock(&c->lock);
}

void pcache_mark_clean_many(struct pcache *c, struct page *const *pages, const uint32_t *blkaddrs,
                            size_t n)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++)
        mark_clean_locked(c, pages[i], blkaddrs[i]);
    pthread_mutex_unlock(&c->lock);
}

size_t pcache_collect_dirty_match(struct pcache *c, enum page_space space,
                                  bool (*match)(const struct page *page, void *arg), void *arg,
                                  struct page **pages, size_t max)
{
    pthread_mutex_lock(&c->lock);
    size_t n = 0;
    for (struct page *p = c->dirty[space].lru_next; p != &c->dirty[space] && n < max;
         p = p->lru_next) {
        if (match && !match(p, arg))
            continue;
        p->refs++;
        pages[n++] = p;
    }
    pthread_mutex_unlock(&c->lock);
    return n;
}

static bool of_file(const struct page *p, void *arg)
{
    return p->key >> 32 == *(const uint32_t *)arg;
}

size_t pcache_collect_dirty_file(struct pcache *c, uint32_t file, struct page **pages, size_t max)
{
    pthread_mutex_lock(&c->lock);
    if (c->groups_incomplete) {
        pthread_mutex_unlock(&c->lock);
        return pcache_collect_dirty_match(c, PAGE_DATA, of_file, &file, pages, max);
    }
    struct page_group *g = group_find(c, file);
    size_t n = 0;
    for (struct page *p = g ? g->pages : NULL; p && n < max; p = p->group_next)
        if (p->dirty) {
            p->refs++;
            pages[n++] = p;
        }
    pthread_mutex_unlock(&c->lock);
    return n;
}

size_t pcache_keep_dirty(struct pcache *c, struct page **pages, size_t n)
{
    size_t kept = 0;
    struct page *gone = NULL; /* out of the table, last reference: freed after unlocking */
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        struct page *p = pages[i];
        if (p->dirty) {
            pages[kept++] = p;
            continue;
        }
        struct page *freed = put_locked(c, p);
        if (freed) {
            freed->hash_next = gone;
            gone = freed;
        }
    }
    pthread_mutex_unlock(&c->lock);
    while (gone) {
        struct page *next = gone->hash_next;
        page_free(c, gone);
        gone = next;
    }
    return kept;
}

size_t pcache_collect_dirty(struct pcache *c, enum page_space space, struct page **pages,
                            size_t max)
{
    return pcache_collect_dirty_match(c, space, NULL, NULL, pages, max);
}

size_t pcache_dirty_count(struct pcache *c, enum page_space space)
{
    /* Every write asks (writeback throttling): changed under the lock, read without it. */
    return __atomic_load_n(&c->ndirty[space], __ATOMIC_RELAXED);
}

bool pcache_oldest_dirty(struct pcache *c, enum page_space space, uint64_t *key,
                         uint64_t *dirtied_ns)
{
    pthread_mutex_lock(&c->lock);
    struct page *p = c->dirty[space].lru_next;
    bool any = p != &c->dirty[space];
    if (any) {
        *key = p->key;
        *dirtied_ns = p->dirtied_ns;
    }
    pthread_mutex_unlock(&c->lock);
    return any;
}

bool pcache_over_budget(struct pcache *c)
{
    pthread_mutex_lock(&c->lock);
    /* Over by pages that eviction cannot take: dirty ones (with their clean reserve), or
     * referenced ones when no clean page is left.  Clean pages above a budget that just
     * shrank are not a reason to write anything. */
    bool over = c->pages > c->max_pages &&
                (c->lru.lru_next == &c->lru ||
                 dirty_locked(c) + clean_reserve(c->max_pages) >= c->max_pages);
    pthread_mutex_unlock(&c->lock);
    return over;
}

uint64_t pcache_budget(struct pcache *c)
{
    pthread_mutex_lock(&c->lock);
    uint64_t pages = c->max_pages;
    pthread_mutex_unlock(&c->lock);
    return pages * PAGE_BYTES;
}

void pcache_set_budget(struct pcache *c, uint64_t budget_bytes)
{
    uint64_t pages = budget_bytes / PAGE_BYTES;
    if (pages < MIN_PAGES)
        pages = MIN_PAGES;
    pthread_mutex_lock(&c->lock);
    if (pages != c->max_pages)
        c->resizes++;
    c->max_pages = pages;
    pthread_mutex_unlock(&c->lock);
}

size_t pcache_reclaim_step(struct pcache *c, size_t max)
{
    pthread_mutex_lock(&c->lock);
    size_t n = c->pages > c->max_pages ? reclaim(c, c->max_pages, max) : 0;
    pthread_mutex_unlock(&c->lock);
    return n;
}

uint64_t pcache_give_back(struct pcache *c)
{
    uint64_t bytes = pool_give_back(&c->pool, SIZE_MAX, POOL_KEEP_FREE);
    /* The pages' descriptors came from malloc: let it return what their frees emptied. */
    if (bytes >= (4u << 20))
        malloc_trim(0);
    return bytes;
}

uint64_t pcache_give_back_idle(struct pcache *c)
{
    pthread_mutex_lock(&c->pool.lock);
    size_t idle = c->pool.nfree_low;
    c->pool.nfree_low = c->pool.nfree;
    pthread_mutex_unlock(&c->pool.lock);
    if (idle < IDLE_GIVE_BACK_MIN)
        return 0;
    return pool_give_back(&c->pool, idle - POOL_KEEP_FREE, POOL_KEEP_FREE);
}

uint64_t pcache_used_bytes(struct pcache *c)
{
    pthread_mutex_lock(&c->lock);
    uint64_t pages = c->pages;
    pthread_mutex_unlock(&c->lock);
    return pages * PAGE_BYTES;
}

uint64_t pcache_resident_bytes(struct pcache *c)
{
    pthread_mutex_lock(&c->pool.lock);
    uint64_t buffers = (uint64_t)c->pool.nchunks * POOL_CHUNK_PAGES - c->pool.nreleased;
    pthread_mutex_unlock(&c->pool.lock);
    return buffers * PAGE_BYTES;
}

size_t pcache_dirty_total(struct pcache *c)
{
    size_t n = 0;
    for (int s = 0; s < PAGE_SPACES; s++)
        n += __atomic_load_n(&c->ndirty[s], __ATOMIC_RELAXED);
    return n;
}

static void drop(struct pcache *c, enum page_space space, uint64_t key, bool even_dirty)
{
    pthread_mutex_lock(&c->lock);
    struct page *p = hash_find(c, space, key);
    if (p && p->dirty && even_dirty) {
        p->dirty = false;
        list_unlink(p);
        __atomic_sub_fetch(&c->ndirty[p->space], 1, __ATOMIC_RELAXED);
    }
    if (p && !p->dirty) {
        hash_remove(c, p);
        c->pages--;
        if (p->refs == 0) {
            list_unlink(p);
            page_free(c, p);
        }
        /* else: the last pcache_put sees it is out of the table and frees it */
    }
    pthread_mutex_unlock(&c->lock);
}

void pcache_forget(struct pcache *c, enum page_space space, uint64_t key)
{
    drop(c, space, key, false);
}

void pcache_discard(struct pcache *c, enum page_space space, uint64_t key)
{
    drop(c, space, key, true);
}

struct range {
    enum page_space space;
    uint64_t lo, hi;
};

static void discard_in_range(struct pcache *c, struct page *p, void *arg)
{
    const struct range *r = arg;
    if (p->space != r->space || p->key < r->lo || p->key > r->hi)
        return;
    if (p->dirty) {
        p->dirty = false;
        list_unlink(p);
        __atomic_sub_fetch(&c->ndirty[p->space], 1, __ATOMIC_RELAXED);
    }
    hash_remove(c, p);
    c->pages--;
    if (p->refs == 0) {
        list_unlink(p);
        page_free(c, p);
    }
}

void pcache_discard_range(struct pcache *c, enum page_space space, uint64_t lo, uint64_t hi)
{
    if (hi < lo)
        return;
    struct range r = {.space = space, .lo = lo, .hi = hi};
    pthread_mutex_lock(&c->lock);
    if (space == PAGE_DATA && lo >> 32 == hi >> 32 && !c->groups_incomplete) {
        /* one file's pages: its list (discard_in_range may unlink the page it is given) */
        struct page_group *g = group_find(c, lo >> 32);
        struct page *p = g ? g->pages : NULL;
        while (p) { /* the group itself goes with its last page */
            struct page *next = p->group_next;
            discard_in_range(c, p, &r);
            p = next;
        }
        pthread_mutex_unlock(&c->lock);
        return;
    }
    bool few = hi - lo < c->nbuckets;
    pthread_mutex_unlock(&c->lock);
    if (few) {
        for (uint64_t k = lo;; k++) {
            drop(c, space, k, true);
            if (k == hi)
                break;
        }
        return;
    }
    pthread_mutex_lock(&c->lock);
    table_walk(c, discard_in_range, &r);
    pthread_mutex_unlock(&c->lock);
}

void pcache_shrink(struct pcache *c)
{
    pthread_mutex_lock(&c->lock);
    reclaim(c, 0, SIZE_MAX);
    pthread_mutex_unlock(&c->lock);
}

void pcache_emit_stats(struct pcache *c, stat_emit_fn emit, void *sink)
{
    pthread_mutex_lock(&c->lock);
    uint64_t pages = c->pages, dirty = dirty_locked(c), enomem = c->enomem_fired,
             allocs = c->allocations, budget = c->max_pages * PAGE_BYTES, resizes = c->resizes;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&c->pool.lock);
    uint64_t given_back = c->pool.given_back;
    pthread_mutex_unlock(&c->pool.lock);
    emit(sink, "cache.hits", atomic_load(&c->hits));
    emit(sink, "cache.misses", atomic_load(&c->misses));
    emit(sink, "cache.evictions", atomic_load(&c->evictions));
    emit(sink, "cache.written_dropped", atomic_load(&c->written_dropped));
    emit(sink, "cache.bad_puts", atomic_load(&c->bad_puts));
    emit(sink, "cache.load_errors", atomic_load(&c->load_errors));
    emit(sink, "cache.enomem_injected", enomem);
    emit(sink, "cache.allocations", allocs); /* pages created: what fault=alloc:N counts */
    emit(sink, "cache.pages", pages);
    emit(sink, "cache.dirty_pages", dirty);
    emit(sink, "cache.bytes", pages * PAGE_BYTES);
    emit(sink, "cache.budget_bytes", budget);
    emit(sink, "cache.resident_bytes", pcache_resident_bytes(c));
    emit(sink, "cache.resizes", resizes);
    emit(sink, "cache.given_back_bytes", given_back);
}
