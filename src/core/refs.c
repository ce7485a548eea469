/* References the caller holds on inodes.  Opens: an unlinked file lives on until its last
 * close.  With opts.track_lookups, the FUSE kernel's lookup references too: its inode
 * numbers must not be reused while the kernel may still use them, so an unlinked inode is
 * freed only at its last forget.
 *
 * The kernel holds a lookup reference on every inode in its cache, a million of them after
 * a walk of a big tree, and every LOOKUP, OPEN, RELEASE and FORGET changes one.  So the
 * table is split into stripes by inode number, each with its own lock and a hash table
 * that doubles when it holds two entries per bucket: a change costs one short chain under
 * a lock few others want. */
#include <errno.h>
#include <stdlib.h>

#include "core/refs.h"
#include "core/context.h"
#include "core/locks.h"
#include "core/namei.h"
#include "core/space.h"

#define REF_FIRST_BUCKETS 64u

struct inode_ref {
    struct inode_ref *next;
    uint32_t ino;
    uint32_t opens;
    uint32_t writers; /* opens with write access (fs-verity's enable wants none) */
    uint64_t lookups;
    bool unlinked;
    /* Blocks counted as free already (space_freeing_add): unlinked and not open, the inode
     * waits only for the kernel's forget, which its unlink has queued. */
    uint64_t freeing;
};

/* Inode numbers are allocated densely, so their low bits pick the stripe and the next
 * ones the bucket. */
static struct ref_stripe *stripe_of(struct f2fuse *fs, uint32_t ino)
{
    return &fs->refs[ino % REF_STRIPES];
}

static struct inode_ref **bucket_of(struct ref_stripe *s, uint32_t ino)
{
    return &s->buckets[(ino / REF_STRIPES) & (s->nbuckets - 1)];
}

void refs_init(struct f2fuse *fs)
{
    for (unsigned i = 0; i < REF_STRIPES; i++)
        pthread_mutex_init(&fs->refs[i].lock, NULL);
}

/* Doubles s's table once it holds two entries per bucket (its lock held).  A failed
 * allocation keeps the smaller table: longer chains, nothing lost. */
static void stripe_grow(struct ref_stripe *s)
{
    if (s->count <= 2 * s->nbuckets)
        return;
    uint32_t n = s->nbuckets * 2;
    struct inode_ref **bigger = calloc(n, sizeof(*bigger));
    if (!bigger)
        return;
    struct ref_stripe moved = {.buckets = bigger, .nbuckets = n};
    for (uint32_t b = 0; b < s->nbuckets; b++)
        for (struct inode_ref *r = s->buckets[b], *next; r; r = next) {
            next = r->next;
            struct inode_ref **head = bucket_of(&moved, r->ino);
            r->next = *head;
            *head = r;
        }
    free(s->buckets);
    s->buckets = bigger;
    s->nbuckets = n;
}

/* The entry of ino, created when create is set; called with its stripe's lock held. */
static struct inode_ref *ref_find(struct ref_stripe *s, uint32_t ino, bool create)
{
    if (!s->buckets) {
        if (!create)
            return NULL;
        s->buckets = calloc(REF_FIRST_BUCKETS, sizeof(*s->buckets));
        if (!s->buckets)
            return NULL;
        s->nbuckets = REF_FIRST_BUCKETS;
    }
    struct inode_ref **head = bucket_of(s, ino);
    for (struct inode_ref *r = *head; r; r = r->next)
        if (r->ino == ino)
            return r;
    if (!create)
        return NULL;
    struct inode_ref *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->ino = ino;
    r->next = *head;
    *head = r;
    s->count++;
    stripe_grow(s);
    return r;
}

/* Drops the entry when nothing holds the inode any more; returns whether it was unlinked
 * (then the caller frees the inode).  Called with the stripe's lock held. */
static bool ref_settle(struct ref_stripe *s, struct inode_ref *r)
{
    if (r->opens || r->lookups)
        return false;
    bool unlinked = r->unlinked;
    struct inode_ref **pp = bucket_of(s, r->ino);
    while (*pp != r)
        pp = &(*pp)->next;
    *pp = r->next;
    s->count--;
    free(r);
    return unlinked;
}

static uint64_t add_clamped(uint64_t value, int64_t delta)
{
    return (int64_t)value + delta < 0 ? 0 : (uint64_t)((int64_t)value + delta);
}

/* Adds opens/lookups to ino's references (negative deltas release them) and frees the
 * inode when its last reference goes after its last name did. */
static int ref_change(struct f2fuse *fs, uint32_t ino, int opens, int64_t lookups)
{
    struct ref_stripe *s = stripe_of(fs, ino);
    pthread_mutex_lock(&s->lock);
    struct inode_ref *r = ref_find(s, ino, opens > 0 || lookups > 0);
    bool free_it = false;
    if (!r && (opens > 0 || lookups > 0)) {
        pthread_mutex_unlock(&s->lock);
        return -ENOMEM;
    }
    uint64_t freeing = 0;
    if (r) {
        r->opens = (uint32_t)add_clamped(r->opens, opens);
        r->lookups = add_clamped(r->lookups, lookups);
        freeing = r->freeing;
        if (r->opens && freeing) { /* opened again (an open that raced the unlink) */
            space_freeing_cancel(fs, freeing);
            r->freeing = freeing = 0;
        }
        free_it = ref_settle(s, r);
        if (free_it) /* statfs waits for the free from here on (space.c) */
            space_free_begin(fs, freeing);
    }
    pthread_mutex_unlock(&s->lock);
    if (!free_it)
        return 0;
    /* Nothing names the inode any more, but segment cleaning (gc.c) still finds it through
     * its blocks' summaries and works on it under its stripe lock. */
    inode_lock_many(fs, &ino, 1);
    int err = inode_free(fs, ino);
    inode_unlock_many(fs, &ino, 1);
    space_free_end(fs);
    return err;
}

int inode_open(struct f2fuse *fs, uint32_t ino)
{
    return ref_change(fs, ino, 1, 0);
}

int inode_release(struct f2fuse *fs, uint32_t ino)
{
    return ref_change(fs, ino, -1, 0);
}

int inode_forget(struct f2fuse *fs, uint32_t ino, uint64_t n)
{
    return ref_change(fs, ino, 0, -(int64_t)n);
}

int inode_lookup_ref(struct f2fuse *fs, uint32_t ino)
{
    return fs->opts.track_lookups && ino != fs->root_ino ? ref_change(fs, ino, 0, 1) : 0;
}

void inode_writer_change(struct f2fuse *fs, uint32_t ino, int delta)
{
    struct ref_stripe *s = stripe_of(fs, ino);
    pthread_mutex_lock(&s->lock);
    struct inode_ref *r = ref_find(s, ino, false);
    if (r)
        r->writers = (uint32_t)add_clamped(r->writers, delta);
    pthread_mutex_unlock(&s->lock);
}

bool inode_is_open(struct f2fuse *fs, uint32_t ino)
{
    struct ref_stripe *s = stripe_of(fs, ino);
    pthread_mutex_lock(&s->lock);
    struct inode_ref *r = ref_find(s, ino, false);
    bool open = r && r->opens;
    pthread_mutex_unlock(&s->lock);
    return open;
}

bool inode_writers(struct f2fuse *fs, uint32_t ino)
{
    struct ref_stripe *s = stripe_of(fs, ino);
    pthread_mutex_lock(&s->lock);
    struct inode_ref *r = ref_find(s, ino, false);
    bool writers = r && r->writers;
    pthread_mutex_unlock(&s->lock);
    return writers;
}

/* Held by the kernel's lookups alone, the inode's blocks count as free at once, as in the
 * kernel, whose unlink frees them itself: the forget that frees them here is already
 * queued. */
bool inode_ref_unlinked(struct f2fuse *fs, uint32_t ino, uint64_t blocks)
{
    struct ref_stripe *s = stripe_of(fs, ino);
    pthread_mutex_lock(&s->lock);
    struct inode_ref *r = ref_find(s, ino, false);
    if (r) {
        r->unlinked = true;
        if (!r->opens && !r->freeing && blocks) {
            r->freeing = blocks;
            space_freeing_add(fs, blocks);
        }
    }
    pthread_mutex_unlock(&s->lock);
    return r != NULL;
}

/* Appends ino to *list (cap entries allocated, n used), doubling it when full. */
static bool list_push(uint32_t **list, size_t *n, size_t *cap, uint32_t ino)
{
    if (*n == *cap) {
        uint32_t *grown = realloc(*list, 2 * *cap * sizeof(**list));
        if (!grown)
            return false;
        *list = grown;
        *cap *= 2;
    }
    (*list)[(*n)++] = ino;
    return true;
}

/* The inode numbers of the entries held (the unlinked ones only when unlinked_only),
 * malloc'ed; NULL when memory runs out.  Each stripe is read under its lock: a snapshot
 * per stripe, as the callers need (they hold what they list, or the checkpoint's lock). */
static uint32_t *refs_list(struct f2fuse *fs, bool unlinked_only, uint32_t *count)
{
    size_t cap = 64, n = 0;
    uint32_t *list = fs_malloc(fs, cap * sizeof(*list));
    bool ok = list != NULL;
    for (unsigned i = 0; ok && i < REF_STRIPES; i++) {
        struct ref_stripe *s = &fs->refs[i];
        pthread_mutex_lock(&s->lock);
        for (uint32_t b = 0; ok && b < s->nbuckets; b++)
            for (struct inode_ref *r = s->buckets[b]; ok && r; r = r->next)
                if (!unlinked_only || r->unlinked)
                    ok = list_push(&list, &n, &cap, r->ino);
        pthread_mutex_unlock(&s->lock);
    }
    if (!ok) {
        free(list);
        list = NULL;
        n = 0;
    }
    *count = (uint32_t)n;
    return list;
}

uint32_t *inode_orphans(struct f2fuse *fs, uint32_t *count)
{
    return refs_list(fs, true, count);
}

uint32_t *inode_refs_held(struct f2fuse *fs, uint32_t *count)
{
    return refs_list(fs, false, count);
}

void inode_refs_destroy(struct f2fuse *fs)
{
    for (unsigned i = 0; i < REF_STRIPES; i++) {
        struct ref_stripe *s = &fs->refs[i];
        pthread_mutex_lock(&s->lock);
        for (uint32_t b = 0; b < s->nbuckets; b++)
            while (s->buckets[b]) {
                struct inode_ref *r = s->buckets[b];
                s->buckets[b] = r->next;
                free(r);
            }
        free(s->buckets);
        s->buckets = NULL;
        s->nbuckets = s->count = 0;
        pthread_mutex_unlock(&s->lock);
    }
}
