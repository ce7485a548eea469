/* The name index of big directories.
 *
 * f2fs finds a name by its hash: on each of the directory's levels it scans the bucket the
 * hash picks, 2 or 4 dentry blocks of up to 214 slots.  A directory of 62,500 names has 9
 * levels, so a lookup scans about 18 blocks and 4,000 slots; the kernel pays that too but
 * its dcache answers most lookups.  Behind FUSE the kernel's dentries come and go (drop
 * caches, a walk bigger than its cache) and every LOOKUP reaches the daemon.
 *
 * So a directory with DIR_INDEX_MIN_DEPTH levels or more gets, once its lookups have
 * scanned as many blocks as it has, an index: hash -> (block, slot) of each entry a hashed
 * lookup would find (its hash picks the bucket it sits in).  A lookup then reads only the
 * blocks that hold an entry with its name's hash: one, mostly.  The index is memory only,
 * rebuilt after a mount or an eviction, and follows every change made through dir.c.
 *
 * Concurrency: lookups hold the directory's inode lock shared, changes exclusively (locks.h).
 * So an index's table is written by a change while no lookup reads it, or by the one lookup
 * that builds it before publishing it (ready).  An index that must go (stale, evicted, its
 * directory freed) is unhooked from the table and freed at its last reference, so a lookup
 * still probing it is safe.  Memory: at most 1/16 of the page cache's budget; the index
 * used least recently goes first. */
#include <errno.h>
#include <stdlib.h>

#include "core/dir_index.h"
#include "core/context.h"

#define INDEX_FIRST_SLOTS 1024u
#define EMPTY_POS         UINT32_MAX

struct index_slot {
    uint32_t hash;
    uint32_t pos; /* block << 8 | slot; EMPTY_POS when free */
};

struct dir_index {
    struct dir_index *next; /* table chain, under the table's lock */
    uint32_t ino;
    bool hooked; /* in the table (its lock) */
    atomic_uint refs;
    atomic_bool ready;            /* answers lookups */
    atomic_bool retired;          /* was unhooked: never built again (lookups may still read it) */
    atomic_bool building;         /* one lookup builds at a time */
    atomic_uint_fast64_t scanned; /* blocks scanned by lookups since the last try */
    atomic_uint_fast64_t last_used; /* the table's clock at its last lookup */
    struct index_slot *slots;
    uint32_t mask, used;
    uint64_t bytes; /* its table's size as counted in the total (under the table's lock) */
};

static uint32_t slot_home(uint32_t hash, uint32_t mask)
{
    hash ^= hash >> 16;
    hash *= 0x7feb352du;
    hash ^= hash >> 15;
    hash *= 0x846ca68bu;
    hash ^= hash >> 16;
    return hash & mask;
}

void dir_index_init(struct f2fuse *fs)
{
    pthread_rwlock_init(&fs->dir_indexes.lock, NULL);
}

static void index_free(struct dir_index *x)
{
    free(x->slots);
    free(x);
}

void dir_index_put(struct f2fuse *fs, struct dir_index *x)
{
    (void)fs;
    if (x && atomic_fetch_sub(&x->refs, 1) == 1)
        index_free(x);
}

void dir_index_destroy(struct f2fuse *fs)
{
    struct dir_indexes *t = &fs->dir_indexes;
    for (unsigned b = 0; b < DIR_INDEX_BUCKETS; b++)
        while (t->buckets[b]) {
            struct dir_index *x = t->buckets[b];
            t->buckets[b] = x->next;
            dir_index_put(fs, x);
        }
    t->bytes = 0;
    pthread_rwlock_destroy(&t->lock);
}

/* Unhooks x (table lock held for writing); the table's reference goes with it. */
static void unhook(struct f2fuse *fs, struct dir_index *x)
{
    struct dir_indexes *t = &fs->dir_indexes;
    if (!x->hooked)
        return;
    struct dir_index **pp = &t->buckets[x->ino % DIR_INDEX_BUCKETS];
    while (*pp != x)
        pp = &(*pp)->next;
    *pp = x->next;
    x->hooked = false;
    atomic_store(&x->retired, true); /* before ready drops: see dir_index_worth_building */
    if (atomic_load(&x->ready))
        t->bytes -= x->bytes;
    atomic_store(&x->ready, false);
    dir_index_put(fs, x);
}

static struct dir_index *find_hooked(struct dir_indexes *t, uint32_t ino)
{
    for (struct dir_index *x = t->buckets[ino % DIR_INDEX_BUCKETS]; x; x = x->next)
        if (x->ino == ino)
            return x;
    return NULL;
}

static struct dir_index *get_existing(struct f2fuse *fs, uint32_t ino)
{
    struct dir_indexes *t = &fs->dir_indexes;
    pthread_rwlock_rdlock(&t->lock);
    struct dir_index *x = find_hooked(t, ino);
    if (x)
        atomic_fetch_add(&x->refs, 1);
    pthread_rwlock_unlock(&t->lock);
    return x;
}

struct dir_index *dir_index_get(struct f2fuse *fs, uint32_t ino)
{
    struct dir_indexes *t = &fs->dir_indexes;
    struct dir_index *x = get_existing(fs, ino);
    if (!x) {
        struct dir_index *fresh = calloc(1, sizeof(*fresh));
        if (!fresh)
            return NULL;
        fresh->ino = ino;
        pthread_rwlock_wrlock(&t->lock);
        x = find_hooked(t, ino);
        if (!x) {
            x = fresh;
            fresh = NULL;
            x->hooked = true;
            atomic_store(&x->refs, 1); /* the table's */
            x->next = t->buckets[ino % DIR_INDEX_BUCKETS];
            t->buckets[ino % DIR_INDEX_BUCKETS] = x;
        }
        atomic_fetch_add(&x->refs, 1);
        pthread_rwlock_unlock(&t->lock);
        free(fresh);
    }
    uint64_t now = atomic_load(&t->clock);
    if (atomic_load_explicit(&x->last_used, memory_order_relaxed) != now)
        atomic_store_explicit(&x->last_used, now, memory_order_relaxed);
    return x;
}

bool dir_index_ready(const struct dir_index *x)
{
    return atomic_load(&x->ready);
}

bool dir_index_worth_building(struct dir_index *x, uint64_t blocks, uint64_t dir_blocks)
{
    if (atomic_fetch_add(&x->scanned, blocks) + blocks < dir_blocks || atomic_load(&x->retired))
        return false;
    bool idle = false;
    return atomic_compare_exchange_strong(&x->building, &idle, true);
}

static void table_set(struct index_slot *slots, uint32_t mask, uint32_t hash, uint32_t pos)
{
    uint32_t i = slot_home(hash, mask);
    while (slots[i].pos != EMPTY_POS)
        i = (i + 1) & mask;
    slots[i].hash = hash;
    slots[i].pos = pos;
}

/* A table of n slots (a power of two) holding x's entries. */
static int table_resize(struct dir_index *x, uint32_t n)
{
    struct index_slot *slots = malloc((size_t)n * sizeof(*slots));
    if (!slots)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        slots[i].pos = EMPTY_POS;
    for (uint32_t i = 0; x->slots && i <= x->mask; i++)
        if (x->slots[i].pos != EMPTY_POS)
            table_set(slots, n - 1, x->slots[i].hash, x->slots[i].pos);
    free(x->slots);
    x->slots = slots;
    x->mask = n - 1;
    return 0;
}

/* Adds an entry, doubling the table past half full. */
static int table_add(struct dir_index *x, uint32_t hash, uint64_t block, uint32_t slot)
{
    if (block >= DIR_INDEX_MAX_BLOCKS)
        return -EFBIG;
    if (!x->slots || 2 * ((uint64_t)x->used + 1) > (uint64_t)x->mask + 1) {
        int err = table_resize(x, x->slots ? 2 * (x->mask + 1) : INDEX_FIRST_SLOTS);
        if (err)
            return err;
    }
    table_set(x->slots, x->mask, hash, (uint32_t)block << 8 | slot);
    x->used++;
    return 0;
}

/* Removes the entry at (hash, pos); false when there is none.  Linear probing's deletion:
 * later entries of the run move back into the hole unless their home lies after it. */
static bool table_remove(struct dir_index *x, uint32_t hash, uint32_t pos)
{
    if (!x->slots)
        return false;
    uint32_t i = slot_home(hash, x->mask);
    while (x->slots[i].pos != pos || x->slots[i].hash != hash) {
        if (x->slots[i].pos == EMPTY_POS)
            return false;
        i = (i + 1) & x->mask;
    }
    for (uint32_t j = i;;) {
        j = (j + 1) & x->mask;
        if (x->slots[j].pos == EMPTY_POS)
            break;
        uint32_t home = slot_home(x->slots[j].hash, x->mask);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays)
            continue;
        x->slots[i] = x->slots[j];
        i = j;
    }
    x->slots[i].pos = EMPTY_POS;
    x->used--;
    return true;
}

static uint64_t table_bytes(const struct dir_index *x)
{
    return x->slots ? ((uint64_t)x->mask + 1) * sizeof(*x->slots) : 0;
}

/* Only an index that was never ready is built: no lookup reads its table. */
void dir_index_build_begin(struct dir_index *x)
{
    free(x->slots);
    x->slots = NULL;
    x->mask = x->used = 0;
}

int dir_index_build_add(struct dir_index *x, uint32_t hash, uint64_t block, uint32_t slot)
{
    return table_add(x, hash, block, slot);
}

/* Makes room for bytes more by unhooking the indexes used least recently (table lock held
 * for writing); false when even that is not enough. */
static bool make_room(struct f2fuse *fs, const struct dir_index *keep, uint64_t bytes)
{
    struct dir_indexes *t = &fs->dir_indexes;
    uint64_t cap = fs->cache ? pcache_budget(fs->cache) / 16 : 0;
    if (bytes > cap)
        return false;
    while (t->bytes + bytes > cap) {
        struct dir_index *oldest = NULL;
        for (unsigned b = 0; b < DIR_INDEX_BUCKETS; b++)
            for (struct dir_index *x = t->buckets[b]; x; x = x->next)
                if (x != keep && atomic_load(&x->ready) &&
                    (!oldest || atomic_load(&x->last_used) < atomic_load(&oldest->last_used)))
                    oldest = x;
        if (!oldest)
            return false;
        unhook(fs, oldest);
        atomic_fetch_add(&t->evictions, 1);
    }
    return true;
}

void dir_index_build_end(struct f2fuse *fs, struct dir_index *x, bool ok)
{
    struct dir_indexes *t = &fs->dir_indexes;
    atomic_store(&x->scanned, 0);
    pthread_rwlock_wrlock(&t->lock);
    if (ok && x->hooked && make_room(fs, x, table_bytes(x))) {
        x->bytes = table_bytes(x);
        t->bytes += x->bytes;
        atomic_fetch_add(&t->clock, 1);
        atomic_store(&x->last_used, atomic_load(&t->clock));
        atomic_store(&x->ready, true);
        atomic_fetch_add(&t->builds, 1);
    } else {
        atomic_fetch_add(&t->refused, 1);
    }
    pthread_rwlock_unlock(&t->lock);
    if (!atomic_load(&x->ready))
        dir_index_build_begin(x); /* nobody reads a table that is not ready */
    atomic_store(&x->building, false);
}

bool dir_index_next(const struct dir_index *x, uint32_t hash, uint32_t *cursor, uint64_t *block,
                    uint32_t *slot)
{
    if (!x->slots) /* built from a directory without entries */
        return false;
    for (uint32_t i = (slot_home(hash, x->mask) + *cursor) & x->mask;
         x->slots[i].pos != EMPTY_POS && *cursor <= x->mask; i = (i + 1) & x->mask) {
        ++*cursor;
        if (x->slots[i].hash == hash) {
            *block = x->slots[i].pos >> 8;
            *slot = x->slots[i].pos & 0xff;
            return true;
        }
    }
    return false;
}

/* Drops ino's index from the table (its memory goes with the last lookup using it). */
static void drop(struct f2fuse *fs, uint32_t ino, struct dir_index *only)
{
    struct dir_indexes *t = &fs->dir_indexes;
    pthread_rwlock_wrlock(&t->lock);
    struct dir_index *x = find_hooked(t, ino);
    if (x && (!only || x == only))
        unhook(fs, x);
    pthread_rwlock_unlock(&t->lock);
}

/* A change of a ready index's table; a failure drops the index, which would be wrong. */
static void change(struct f2fuse *fs, uint32_t ino, uint32_t hash, uint64_t block, uint32_t slot,
                   bool add)
{
    struct dir_index *x = get_existing(fs, ino);
    if (!x)
        return;
    if (atomic_load(&x->ready)) {
        uint32_t mask = x->mask;
        bool done = add ? table_add(x, hash, block, slot) == 0
                        : table_remove(x, hash, (uint32_t)block << 8 | slot);
        if (x->mask != mask) {
            pthread_rwlock_wrlock(&fs->dir_indexes.lock);
            if (atomic_load(&x->ready)) {
                fs->dir_indexes.bytes += table_bytes(x) - x->bytes;
                x->bytes = table_bytes(x);
            }
            pthread_rwlock_unlock(&fs->dir_indexes.lock);
        }
        if (!done) {
            if (!add) /* the entry was not indexed: the index did not match the directory */
                atomic_fetch_add(&fs->dir_indexes.stale, 1);
            drop(fs, ino, x);
        }
    }
    dir_index_put(fs, x);
}

void dir_index_added(struct f2fuse *fs, uint32_t ino, uint32_t hash, uint64_t block, uint32_t slot)
{
    change(fs, ino, hash, block, slot, true);
}

void dir_index_removed(struct f2fuse *fs, uint32_t ino, uint32_t hash, uint64_t block,
                       uint32_t slot)
{
    change(fs, ino, hash, block, slot, false);
}

void dir_index_forget(struct f2fuse *fs, uint32_t ino)
{
    struct dir_index *x = get_existing(fs, ino); /* most directories have none */
    if (x) {
        dir_index_put(fs, x);
        drop(fs, ino, NULL);
    }
}

void dir_index_stale(struct f2fuse *fs, struct dir_index *x)
{
    atomic_fetch_add(&fs->dir_indexes.stale, 1);
    drop(fs, x->ino, x);
}

void dir_index_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct dir_indexes *t = &fs->dir_indexes;
    pthread_rwlock_rdlock(&t->lock);
    uint64_t bytes = t->bytes;
    pthread_rwlock_unlock(&t->lock);
    emit(sink, "dir_index.bytes", bytes);
    emit(sink, "dir_index.builds", atomic_load(&t->builds));
    emit(sink, "dir_index.refused", atomic_load(&t->refused));
    emit(sink, "dir_index.evictions", atomic_load(&t->evictions));
    emit(sink, "dir_index.lookups", atomic_load(&t->lookups));
    emit(sink, "dir_index.stale", atomic_load(&t->stale));
}
