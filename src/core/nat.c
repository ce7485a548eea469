/* NAT manager: nid → (ino, block address, version) for reading and writing (nat.h).
 *
 * In memory there is one hash table of nat_node, keyed by nid.  A node carries any of:
 *   NN_DIRTY  its entry changed since the last nat_flush (or came from the NAT journal at
 *             load): the entry in the node is the truth, the NAT block is stale;
 *   NN_FREE   the nid is known to be free and is in the free-nid heap, ready to hand out;
 *   NN_ALLOC  the nid was handed out by nat_alloc_nid and is neither set nor released yet.
 * A node with no flag is freed at once, so after nat_flush only free/handed-out nids stay
 * in memory (plus what changes until the next flush).  Everything else is read from the
 * current copy of its NAT block through the page cache.
 *
 * NAT copies.  Block b has two copies; bit b of the (mutable, in-memory) bitmap says which
 * one is current, i.e. which one nat_get reads.  The bitmap of the last committed
 * checkpoint is fs->nat_bitmap: it points into fs->cp_block, which the checkpoint writer
 * replaces with the new CP block once that is durable.  nat_flush always writes to the copy
 * the committed checkpoint does NOT use: normally the other copy (as the kernel's
 * get_next_nat_page), but when a flush already moved block b since the last commit (a
 * checkpoint that failed after nat_flush and is tried again), the same uncommitted copy
 * again.  So the NAT blocks that the last valid checkpoint references are never
 * overwritten, and a crash at any point falls back to a consistent NAT. */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/nat.h"
#include "core/context.h"
#include "core/node.h"
#include "util/log.h"
#include "util/stats.h"

/* NAT blocks read per free-nid refill (the kernel's FREE_NID_PAGES), and so the most nids
 * one refill can cache. */
#define NAT_SCAN_BATCH 8u
#define NAT_FREE_MAX   (NAT_ENTRY_PER_BLOCK * NAT_SCAN_BATCH)
/* Freed nids are cached for reuse up to this many; beyond it they wait for a scan. */
#define NAT_FREED_MAX (2 * NAT_FREE_MAX)
/* NAT blocks written per blk_submit_wait in nat_flush. */
#define NAT_WRITE_BATCH 32u
#define NAT_MIN_BUCKETS 1024u

enum { NN_DIRTY = 1, NN_FREE = 2, NN_ALLOC = 4, NN_MARK = 8 /* heap compaction only */ };

struct nat_node {
    struct nat_node *next;
    uint32_t nid;
    uint8_t flags;
    struct f2fs_nat_entry ne; /* meaningful with NN_DIRTY */
};

struct nat_manager {
    struct f2fuse *fs;
    pthread_mutex_t lock;

    uint8_t *bitmap; /* current copy of each NAT block (MSB-first bits) */
    uint32_t bitmap_bytes;
    uint32_t sit_bitmap_bytes; /* where the NAT bitmap goes in a CP block: 192 + this */

    struct nat_node **buckets;
    uint32_t nbuckets; /* a power of two */
    uint32_t nnodes;
    uint32_t ndirty, nfree, nalloc;

    /* Free nids, smallest first.  Entries are pruned lazily: one is live only while its
     * node has NN_FREE (and the same nid may sit in the heap more than once). */
    uint32_t *heap;
    size_t heap_len, heap_cap;

    uint32_t scan_block; /* the next NAT block the free-nid scan reads */
    uint32_t valid_nodes, valid_inodes;

    uint64_t lookups, blocks_written, blocks_scanned, nids_allocated, flushes;
};

/* ---- bitmaps and addresses ---- */

static bool bit_test(const uint8_t *map, uint32_t bit)
{
    return map[bit >> 3] & (0x80u >> (bit & 7));
}

static void bit_assign(uint8_t *map, uint32_t bit, bool on)
{
    if (on)
        map[bit >> 3] |= (uint8_t)(0x80u >> (bit & 7));
    else
        map[bit >> 3] &= (uint8_t) ~(0x80u >> (bit & 7));
}

/* Address of copy `second` of NAT block b: the copies interleave per segment, copy 0 of
 * segment-pair k at nat_blkaddr + 2k·512 and copy 1 right after it. */
static uint32_t nat_copy_addr(const struct f2fuse *fs, uint32_t b, bool second)
{
    return fs->nat_blkaddr + ((b >> F2FS_LOG_BLOCKS_PER_SEG) << (F2FS_LOG_BLOCKS_PER_SEG + 1)) +
           (b & (F2FS_BLOCKS_PER_SEG - 1)) + (second ? F2FS_BLOCKS_PER_SEG : 0);
}

static uint32_t nat_current_addr(const struct nat_manager *nm, uint32_t b)
{
    return nat_copy_addr(nm->fs, b, bit_test(nm->bitmap, b));
}

/* Which copy of block b the last committed checkpoint uses. */
static bool committed_copy(const struct nat_manager *nm, uint32_t b)
{
    return bit_test(nm->fs->nat_bitmap, b);
}

/* ---- the hash table ---- */

static uint32_t bucket_of(const struct nat_manager *nm, uint32_t nid)
{
    return (nid * 2654435761u) & (nm->nbuckets - 1);
}

static struct nat_node *node_find(struct nat_manager *nm, uint32_t nid)
{
    for (struct nat_node *n = nm->buckets[bucket_of(nm, nid)]; n; n = n->next)
        if (n->nid == nid)
            return n;
    return NULL;
}

/* Rehashes into nbuckets buckets; keeps the old table when memory is short. */
static void table_resize(struct nat_manager *nm, uint32_t nbuckets)
{
    struct nat_node **nb = calloc(nbuckets, sizeof(*nb));
    if (!nb)
        return;
    struct nat_node **old = nm->buckets;
    uint32_t oldn = nm->nbuckets;
    nm->buckets = nb;
    nm->nbuckets = nbuckets;
    for (uint32_t i = 0; i < oldn; i++) {
        struct nat_node *n = old[i];
        while (n) {
            struct nat_node *next = n->next;
            uint32_t h = bucket_of(nm, n->nid);
            n->next = nb[h];
            nb[h] = n;
            n = next;
        }
    }
    free(old);
}

/* The node of nid, created (no flags) when absent; NULL only when out of memory. */
static struct nat_node *node_get_or_add(struct nat_manager *nm, uint32_t nid)
{
    struct nat_node *n = node_find(nm, nid);
    if (n)
        return n;
    n = calloc(1, sizeof(*n));
    if (!n)
        return NULL;
    n->nid = nid;
    uint32_t h = bucket_of(nm, nid);
    n->next = nm->buckets[h];
    nm->buckets[h] = n;
    if (++nm->nnodes > nm->nbuckets && nm->nbuckets < (1u << 30))
        table_resize(nm, nm->nbuckets * 2);
    return n;
}

/* Frees n when nothing is left to remember about it. */
static void node_drop_if_unused(struct nat_manager *nm, struct nat_node *n)
{
    if (n->flags)
        return;
    struct nat_node **pp = &nm->buckets[bucket_of(nm, n->nid)];
    while (*pp != n)
        pp = &(*pp)->next;
    *pp = n->next;
    nm->nnodes--;
    free(n);
}

/* ---- the free-nid heap ---- */

static void heap_sift_up(uint32_t *h, size_t i)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= h[i])
            break;
        uint32_t t = h[parent];
        h[parent] = h[i];
        h[i] = t;
        i = parent;
    }
}

static void heap_sift_down(uint32_t *h, size_t len, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < len && h[l] < h[m])
            m = l;
        if (r < len && h[r] < h[m])
            m = r;
        if (m == i)
            return;
        uint32_t t = h[m];
        h[m] = h[i];
        h[i] = t;
        i = m;
    }
}

static void heap_pop(struct nat_manager *nm)
{
    nm->heap[0] = nm->heap[--nm->heap_len];
    heap_sift_down(nm->heap, nm->heap_len, 0);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Drops the stale and duplicate entries; a sorted array is a valid min-heap. */
static void heap_compact(struct nat_manager *nm)
{
    size_t kept = 0;
    for (size_t i = 0; i < nm->heap_len; i++) {
        struct nat_node *n = node_find(nm, nm->heap[i]);
        if (n && (n->flags & NN_FREE) && !(n->flags & NN_MARK)) {
            n->flags |= NN_MARK;
            nm->heap[kept++] = nm->heap[i];
        }
    }
    nm->heap_len = kept;
    for (size_t i = 0; i < kept; i++)
        node_find(nm, nm->heap[i])->flags &= (uint8_t)~NN_MARK;
    qsort(nm->heap, kept, sizeof(*nm->heap), cmp_u32);
}

/* Marks n free and queues it for nat_alloc_nid.  False when out of memory (then n is
 * simply not cached; a later scan finds it again). */
static bool free_push(struct nat_manager *nm, struct nat_node *n)
{
    if (nm->heap_len > 2 * (size_t)nm->nfree + 64)
        heap_compact(nm);
    if (nm->heap_len == nm->heap_cap) {
        size_t cap = nm->heap_cap ? nm->heap_cap * 2 : 1024;
        uint32_t *h = realloc(nm->heap, cap * sizeof(*h));
        if (!h)
            return false;
        nm->heap = h;
        nm->heap_cap = cap;
    }
    nm->heap[nm->heap_len] = n->nid;
    heap_sift_up(nm->heap, nm->heap_len++);
    n->flags |= NN_FREE;
    nm->nfree++;
    return true;
}

/* The smallest cached free nid (stale heap entries are discarded on the way), or NULL. */
static struct nat_node *free_peek(struct nat_manager *nm)
{
    while (nm->heap_len) {
        struct nat_node *n = node_find(nm, nm->heap[0]);
        if (n && (n->flags & NN_FREE))
            return n;
        heap_pop(nm);
    }
    return NULL;
}

static void free_unmark(struct nat_manager *nm, struct nat_node *n)
{
    n->flags &= (uint8_t)~NN_FREE;
    nm->nfree--;
}

/* ---- entries ---- */

/* Reads nid's entry from the current copy of its NAT block. */
static int read_block_entry(struct nat_manager *nm, uint32_t nid, struct f2fs_nat_entry *out)
{
    return nat_entry_in_block(nm->fs, nat_current_addr(nm, nid / NAT_ENTRY_PER_BLOCK), nid, out);
}

/* nid's entry as of now: the changed entry in memory, else the NAT block's. */
static int entry_now(struct nat_manager *nm, uint32_t nid, struct nat_node *n,
                     struct f2fs_nat_entry *out)
{
    if (n && (n->flags & NN_DIRTY)) {
        *out = n->ne;
        return 0;
    }
    return read_block_entry(nm, nid, out);
}

/* ---- load / destroy ---- */

int nat_load(struct f2fuse *fs, struct nat_manager **out)
{
    if (!fs->cp || !fs->nat_bitmap || fs->nat_bitmap_bytes * 8 < fs->nat_blocks)
        return -EINVAL;
    uint32_t flags = le32(fs->cp->ckpt_flags);
    uint32_t sit_bytes = le32(fs->sb.segment_count_sit) / 2 * F2FS_BLOCKS_PER_SEG / 8;
    size_t bitmap_off = offsetof(struct f2fs_checkpoint, sit_nat_version_bitmap) + sit_bytes;
    /* nat_fill_checkpoint puts the bitmap right after the SIT bitmap in the CP block. */
    if (le32(fs->sb.cp_payload) != 0 || (flags & CP_LARGE_NAT_BITMAP_FLAG) ||
        bitmap_off + fs->nat_bitmap_bytes > CP_CHKSUM_OFFSET) {
        log_err("NAT: cannot write this checkpoint layout (cp_payload %u, flags 0x%x)",
                le32(fs->sb.cp_payload), flags);
        return -EOPNOTSUPP;
    }

    struct nat_manager *nm = calloc(1, sizeof(*nm));
    if (!nm)
        return -ENOMEM;
    nm->fs = fs;
    pthread_mutex_init(&nm->lock, NULL);
    nm->bitmap_bytes = fs->nat_bitmap_bytes;
    nm->sit_bitmap_bytes = sit_bytes;
    nm->bitmap = malloc(nm->bitmap_bytes);
    nm->nbuckets = NAT_MIN_BUCKETS;
    nm->buckets = calloc(nm->nbuckets, sizeof(*nm->buckets));
    if (!nm->bitmap || !nm->buckets) {
        nat_destroy(nm);
        return -ENOMEM;
    }
    memcpy(nm->bitmap, fs->nat_bitmap, nm->bitmap_bytes);

    /* Journal entries override the blocks (the first one wins, as in nat_lookup).  They
     * count as changed: the checkpoint writes the journal empty, so the next flush must
     * move them into NAT blocks. */
    for (unsigned i = 0; i < fs->nat_journal_count; i++) {
        uint32_t nid = le32(fs->nat_journal[i].nid);
        if (nid >= fs->max_nid || node_find(nm, nid))
            continue;
        struct nat_node *n = node_get_or_add(nm, nid);
        if (!n) {
            nat_destroy(nm);
            return -ENOMEM;
        }
        n->ne = fs->nat_journal[i].ne;
        n->flags = NN_DIRTY;
        nm->ndirty++;
    }

    nm->valid_nodes = le32(fs->cp->valid_node_count);
    nm->valid_inodes = le32(fs->cp->valid_inode_count);
    uint32_t hint = le32(fs->cp->next_free_nid);
    nm->scan_block = hint < fs->max_nid ? hint / NAT_ENTRY_PER_BLOCK : 0;
    *out = nm;
    return 0;
}

void nat_destroy(struct nat_manager *nm)
{
    if (!nm)
        return;
    for (uint32_t i = 0; nm->buckets && i < nm->nbuckets; i++) {
        struct nat_node *n = nm->buckets[i];
        while (n) {
            struct nat_node *next = n->next;
            free(n);
            n = next;
        }
    }
    pthread_mutex_destroy(&nm->lock);
    free(nm->buckets);
    free(nm->heap);
    free(nm->bitmap);
    free(nm);
}

/* ---- lookups and changes ---- */

int nat_get(struct nat_manager *nm, uint32_t nid, struct f2fs_nat_entry *out)
{
    if (!nid_valid(nm->fs, nid))
        return fs_corrupt(nm->fs, "nid %u is outside the NAT (max %u)", nid, nm->fs->max_nid);
    pthread_mutex_lock(&nm->lock);
    nm->lookups++;
    int err = entry_now(nm, nid, node_find(nm, nid), out);
    pthread_mutex_unlock(&nm->lock);
    return err;
}

/* Reusing a freed nid before the next checkpoint (the kernel waits for the checkpoint) is
 * safe here: the last committed checkpoint still maps the nid to its old node block, which
 * stays untouched (the segment manager never reuses a block that the last checkpoint holds
 * valid, and nat_flush never writes the NAT copies that checkpoint uses), so a crash falls
 * back to the old, consistent mapping.  The kernel's caution is for fsync roll-forward
 * recovery, which finds dnodes by nid after the checkpoint; f2fuse writes no fsync marks. */
int nat_set(struct nat_manager *nm, uint32_t nid, uint32_t ino, uint32_t blkaddr)
{
    struct f2fuse *fs = nm->fs;
    if (!nid_valid(fs, nid)) {
        log_err("NAT: setting nid %u, outside the NAT (max %u)", nid, fs->max_nid);
        return -EINVAL;
    }
    pthread_mutex_lock(&nm->lock);
    struct nat_node *n = node_find(nm, nid);
    struct f2fs_nat_entry old;
    int err = entry_now(nm, nid, n, &old);
    if (!err && !n && !(n = node_get_or_add(nm, nid)))
        err = -ENOMEM;
    if (err) {
        pthread_mutex_unlock(&nm->lock);
        return err;
    }
    if (n->flags & NN_ALLOC) {
        n->flags &= (uint8_t)~NN_ALLOC;
        nm->nalloc--;
    }

    uint32_t old_addr = le32(old.block_addr);
    struct f2fs_nat_entry ne = old;
    if (blkaddr == NULL_ADDR) {
        if (old_addr == NULL_ADDR) {
            /* Nothing to free (a handed-out nid given back through nat_set). */
            if (!(n->flags & NN_FREE) && nm->nfree < NAT_FREED_MAX)
                free_push(nm, n);
            node_drop_if_unused(nm, n);
            pthread_mutex_unlock(&nm->lock);
            return 0;
        }
        /* The node is removed: a new version, so that summaries of the old incarnation no
         * longer match (set_node_addr; not for a NEW_ADDR node that never reached disk).
         * The owner ino stays, as the kernel leaves it. */
        if (old_addr != NEW_ADDR)
            ne.version = (uint8_t)(old.version + 1);
    } else {
        ne.ino = htole32(ino);
    }
    ne.block_addr = htole32(blkaddr);

    bool was_valid = old_addr != NULL_ADDR, is_valid = blkaddr != NULL_ADDR;
    bool was_inode = was_valid && le32(old.ino) == nid;
    bool is_inode = is_valid && le32(ne.ino) == nid;
    if (!was_valid && is_valid)
        nm->valid_nodes++;
    if (was_valid && !is_valid) {
        if (nm->valid_nodes)
            nm->valid_nodes--;
        else
            log_warn("NAT: valid node count underflow freeing nid %u", nid);
    }
    if (!was_inode && is_inode)
        nm->valid_inodes++;
    if (was_inode && !is_inode) {
        if (nm->valid_inodes)
            nm->valid_inodes--;
        else
            log_warn("NAT: valid inode count underflow freeing nid %u", nid);
    }

    n->ne = ne;
    if (!(n->flags & NN_DIRTY)) {
        n->flags |= NN_DIRTY;
        nm->ndirty++;
    }
    if (is_valid && (n->flags & NN_FREE))
        free_unmark(nm, n); /* its heap entry goes stale */
    else if (!is_valid && !(n->flags & NN_FREE) && nm->nfree < NAT_FREED_MAX)
        free_push(nm, n); /* reusable right away (see above) */
    pthread_mutex_unlock(&nm->lock);
    return 0;
}

/* ---- free nids ---- */

static uint32_t available_nids(const struct nat_manager *nm)
{
    int64_t n = (int64_t)nm->fs->max_nid - F2FS_RESERVED_NODE_NUM - nm->valid_nodes - nm->nalloc;
    return n > 0 ? (uint32_t)n : 0;
}

/* Caches the free nids of NAT block b (per the changed entries, else the block). */
static int scan_block(struct nat_manager *nm, uint32_t b)
{
    struct f2fuse *fs = nm->fs;
    uint32_t addr = nat_current_addr(nm, b);
    struct page *page;
    int err = pcache_get(fs->cache, PAGE_META, addr, addr, &page);
    if (err)
        return err;
    nm->blocks_scanned++;
    const struct f2fs_nat_entry *entries = page->data;
    uint32_t base = b * NAT_ENTRY_PER_BLOCK;
    for (uint32_t i = 0; i < NAT_ENTRY_PER_BLOCK && nm->nfree < NAT_FREE_MAX; i++) {
        uint32_t nid = base + i;
        if (nid < F2FS_RESERVED_NODE_NUM || nid >= fs->max_nid)
            continue;
        struct nat_node *n = node_find(nm, nid);
        bool free_now;
        if (n && (n->flags & (NN_FREE | NN_ALLOC)))
            continue;
        if (n && (n->flags & NN_DIRTY))
            free_now = le32(n->ne.block_addr) == NULL_ADDR;
        else
            free_now = le32(entries[i].block_addr) == NULL_ADDR;
        if (!free_now)
            continue;
        bool created = !n;
        if (created && !(n = node_get_or_add(nm, nid))) {
            err = -ENOMEM;
            break;
        }
        if (!free_push(nm, n)) {
            if (created)
                node_drop_if_unused(nm, n);
            err = -ENOMEM;
            break;
        }
    }
    pcache_put(fs->cache, page);
    return err;
}

int nat_alloc_nid(struct nat_manager *nm, uint32_t *nid)
{
    struct f2fuse *fs = nm->fs;
    pthread_mutex_lock(&nm->lock);
    int err = 0;
    struct nat_node *n = NULL;
    if (available_nids(nm) == 0) {
        err = -ENOSPC;
        goto out;
    }
    /* Refill from the NAT blocks, a batch at a time, going round at most once. */
    uint32_t scanned = 0;
    while (!(n = free_peek(nm)) && scanned < fs->nat_blocks) {
        for (uint32_t i = 0; i < NAT_SCAN_BATCH && scanned < fs->nat_blocks; i++, scanned++) {
            err = scan_block(nm, nm->scan_block);
            if (err)
                goto out;
            nm->scan_block = (nm->scan_block + 1) % fs->nat_blocks;
        }
    }
    if (!n) {
        log_warn("NAT: no free nid found, although the counts leave %u", available_nids(nm));
        err = -ENOSPC;
        goto out;
    }
    heap_pop(nm);
    free_unmark(nm, n);
    n->flags |= NN_ALLOC;
    nm->nalloc++;
    nm->nids_allocated++;
    *nid = n->nid;
out:
    pthread_mutex_unlock(&nm->lock);
    return err;
}

void nat_release_nid(struct nat_manager *nm, uint32_t nid)
{
    pthread_mutex_lock(&nm->lock);
    struct nat_node *n = node_find(nm, nid);
    if (!n || !(n->flags & NN_ALLOC)) {
        log_warn("NAT: releasing nid %u, which was not handed out", nid);
    } else {
        n->flags &= (uint8_t)~NN_ALLOC;
        nm->nalloc--;
        if (nm->nfree < NAT_FREED_MAX)
            free_push(nm, n);
        node_drop_if_unused(nm, n);
    }
    pthread_mutex_unlock(&nm->lock);
}

/* A counter of nm, read under its lock. */
static uint32_t read_locked(struct nat_manager *nm, const uint32_t *counter)
{
    pthread_mutex_lock(&nm->lock);
    uint32_t v = *counter;
    pthread_mutex_unlock(&nm->lock);
    return v;
}

uint32_t nat_valid_nodes(struct nat_manager *nm)
{
    return read_locked(nm, &nm->valid_nodes);
}

uint32_t nat_valid_inodes(struct nat_manager *nm)
{
    return read_locked(nm, &nm->valid_inodes);
}

uint32_t nat_free_nids(struct nat_manager *nm)
{
    pthread_mutex_lock(&nm->lock);
    uint32_t v = available_nids(nm);
    pthread_mutex_unlock(&nm->lock);
    return v;
}

uint32_t nat_dirty_entries(struct nat_manager *nm)
{
    return read_locked(nm, &nm->ndirty);
}

/* ---- checkpoint ---- */

static int cmp_node_nid(const void *a, const void *b)
{
    const struct nat_node *x = *(struct nat_node *const *)a, *y = *(struct nat_node *const *)b;
    return x->nid < y->nid ? -1 : x->nid > y->nid;
}

struct flush_slot {
    uint32_t block, target;
    size_t first, end; /* its entries in the sorted array */
};

int nat_flush(struct nat_manager *nm)
{
    struct f2fuse *fs = nm->fs;
    pthread_mutex_lock(&nm->lock);
    nm->flushes++;
    if (nm->ndirty == 0) {
        pthread_mutex_unlock(&nm->lock);
        return 0;
    }
    int err = 0;
    size_t count = 0;
    struct nat_node **dirty = malloc(nm->ndirty * sizeof(*dirty));
    uint8_t *bufs = blk_alloc_buf(NAT_WRITE_BATCH * F2FS_BLKSIZE);
    if (!dirty || !bufs) {
        err = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < nm->nbuckets; i++) {
        for (struct nat_node *n = nm->buckets[i]; n; n = n->next) {
            if (!(n->flags & NN_DIRTY))
                continue;
            if (le32(n->ne.block_addr) == NEW_ADDR) {
                /* Every node must have been written before the NAT is. */
                log_err("NAT: nid %u is still NEW_ADDR at checkpoint", n->nid);
                err = -EINVAL;
                goto out;
            }
            dirty[count++] = n;
        }
    }
    qsort(dirty, count, sizeof(*dirty), cmp_node_nid);

    struct flush_slot slots[NAT_WRITE_BATCH];
    struct blk_req reqs[NAT_WRITE_BATCH];
    struct blk_req *rp[NAT_WRITE_BATCH];
    size_t i = 0;
    while (i < count) {
        unsigned nslots = 0;
        while (nslots < NAT_WRITE_BATCH && i < count) {
            uint32_t b = dirty[i]->nid / NAT_ENTRY_PER_BLOCK;
            size_t end = i;
            while (end < count && dirty[end]->nid / NAT_ENTRY_PER_BLOCK == b)
                end++;
            uint8_t *buf = bufs + (size_t)nslots * F2FS_BLKSIZE;
            uint32_t cur = nat_current_addr(nm, b);
            struct page *page;
            err = pcache_get(fs->cache, PAGE_META, cur, cur, &page);
            if (err)
                goto out;
            memcpy(buf, page->data, F2FS_BLKSIZE);
            pcache_put(fs->cache, page);
            for (size_t k = i; k < end; k++)
                memcpy(buf + (dirty[k]->nid % NAT_ENTRY_PER_BLOCK) * sizeof(struct f2fs_nat_entry),
                       &dirty[k]->ne, sizeof(struct f2fs_nat_entry));
            uint32_t target = nat_copy_addr(fs, b, !committed_copy(nm, b));
            slots[nslots] = (struct flush_slot){
                .block = b, .target = target, .first = i, .end = end};
            reqs[nslots] = (struct blk_req){.op = BLK_WRITE,
                                            .prio = fs->io_prio, /* the cp's */
                                            .off = (uint64_t)target * F2FS_BLKSIZE,
                                            .len = F2FS_BLKSIZE,
                                            .buf = buf};
            rp[nslots] = &reqs[nslots];
            nslots++;
            i = end;
        }
        err = blk_submit_wait(fs->dev, rp, nslots);
        /* Whatever happened, a cached copy of a target block is stale now. */
        for (unsigned s = 0; s < nslots; s++)
            pcache_forget(fs->cache, PAGE_META, slots[s].target);
        if (err)
            goto out;
        for (unsigned s = 0; s < nslots; s++) {
            bit_assign(nm->bitmap, slots[s].block, !committed_copy(nm, slots[s].block));
            for (size_t k = slots[s].first; k < slots[s].end; k++) {
                dirty[k]->flags &= (uint8_t)~NN_DIRTY;
                nm->ndirty--;
                node_drop_if_unused(nm, dirty[k]);
            }
            nm->blocks_written++;
        }
    }
    /* Give back the buckets of a burst of changes. */
    uint32_t want = nm->nbuckets;
    while (want > NAT_MIN_BUCKETS && nm->nnodes < want / 8)
        want /= 2;
    if (want != nm->nbuckets)
        table_resize(nm, want);
out:
    if (err)
        log_err("NAT: flush failed: %s", strerror(-err));
    free(dirty);
    free(bufs);
    pthread_mutex_unlock(&nm->lock);
    return err;
}

void nat_fill_checkpoint(struct nat_manager *nm, struct f2fs_checkpoint *cp)
{
    struct f2fuse *fs = nm->fs;
    pthread_mutex_lock(&nm->lock);
    /* next_free_nid is a hint where to start scanning: the lowest free nid known. */
    struct nat_node *n = free_peek(nm);
    uint32_t next = n ? n->nid : nm->scan_block * NAT_ENTRY_PER_BLOCK;
    if (next < F2FS_RESERVED_NODE_NUM || next >= fs->max_nid)
        next = F2FS_RESERVED_NODE_NUM;
    cp->next_free_nid = htole32(next);
    cp->valid_node_count = htole32(nm->valid_nodes);
    cp->valid_inode_count = htole32(nm->valid_inodes);
    cp->nat_ver_bitmap_bytesize = htole32(nm->bitmap_bytes);
    /* nat_bits would describe the NAT as of this checkpoint; f2fuse does not write them. */
    cp->ckpt_flags = htole32(le32(cp->ckpt_flags) & ~CP_NAT_BITS_FLAG);
    memcpy(cp->sit_nat_version_bitmap + nm->sit_bitmap_bytes, nm->bitmap, nm->bitmap_bytes);
    pthread_mutex_unlock(&nm->lock);
}

void nat_emit_stats(struct nat_manager *nm, stat_emit_fn emit, void *sink)
{
    pthread_mutex_lock(&nm->lock);
    uint64_t v[] = {nm->lookups,        nm->ndirty,         nm->blocks_written, nm->nfree,
                    nm->blocks_scanned, nm->nids_allocated, nm->nalloc,         nm->flushes,
                    nm->valid_nodes,    nm->valid_inodes,   available_nids(nm)};
    pthread_mutex_unlock(&nm->lock);
    static const char *const names[] = {
        "nat.lookups",        "nat.dirty_entries",  "nat.blocks_written",  "nat.free_nids_cached",
        "nat.blocks_scanned", "nat.nids_allocated", "nat.nids_handed_out", "nat.flushes",
        "nat.valid_nodes",    "nat.valid_inodes",   "nat.free_nids"};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        emit(sink, names[i], v[i]);
}
