/* Segment cleaning: foreground GC when space runs short, a background thread when idle
 * (see gc.h for the mechanism; docs/ARCHITECTURE.md, "Segment cleaning").
 *
 * One round: pick victims (greedy or cost-benefit) while what moving them costs fits in
 * the free segments left after what is already dirty; with cp_lock held shared (so no
 * checkpoint runs meanwhile) make the owner page of every valid block dirty, under the
 * owner inode's stripe lock, after checking that the owner still points at the block;
 * then request one checkpoint through checkpoint_request (the one request path), which
 * writes the pages to new blocks and so empties the victims.  Victims a round could not
 * empty (a block nobody points at) are skipped until they change. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/gc.h"
#include "core/cluster.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/recovery.h"
#include "core/segment.h"
#include "core/space.h"
#include "util/clock.h"
#include "util/log.h"

#define BLKS           F2FS_BLOCKS_PER_SEG
#define GC_MAX_VICTIMS 8 /* per round, i.e. per checkpoint */
#define BG_MAX_VICTIMS 2
#define BG_MAX_VALID   (BLKS * 3 / 4) /* background GC leaves segments fuller than this */

struct gc_control {
    pthread_mutex_t lock; /* one round at a time */
    uint32_t reserved;    /* free segments user writes leave to GC */

    struct ticker background; /* the background GC thread */
    bool bg_error_logged;

    atomic_uint_fast64_t fg_rounds, bg_rounds, fg_segments, bg_segments;
    atomic_uint_fast64_t data_moved, node_moved, unmovable, enospc, fg_wait_ns;
    atomic_uint_fast64_t pinned_skipped; /* data blocks of pinned files left in place */
};

/* ---- moving one block ------------------------------------------------------------------- */

/* The NAT entry of a summary's nid and the inode it belongs to: 1 when both are in range,
 * 0 when the summary names nobody valid, or -errno. */
static int summary_owner(struct f2fuse *fs, uint32_t nid, struct f2fs_nat_entry *ne, uint32_t *ino)
{
    if (!nid_valid(fs, nid))
        return 0;
    int err = nat_get(fs->nat, nid, ne);
    if (err)
        return err;
    *ino = le32(ne->ino);
    return nid_valid(fs, *ino) ? 1 : 0;
}

/* Makes the data page that owns blkaddr (per its summary entry) dirty, or moves the
 * compressed cluster holding it (cluster.c).  Returns the blocks moved (1 for a page) when
 * done, 0 when the block no longer belongs to that owner (freed or rewritten meanwhile, or
 * a summary that does not match: the caller sees the victim stay non-empty), or -errno. */
static int move_data_block(struct f2fuse *fs, uint32_t blkaddr, const struct f2fs_summary *e)
{
    uint32_t nid = le32(e->nid);
    uint32_t ofs = le16(e->ofs_in_node);
    struct f2fs_nat_entry ne;
    uint32_t ino;
    int err = summary_owner(fs, nid, &ne, &ino);
    if (err <= 0)
        return err;
    if (le32(ne.block_addr) == NULL_ADDR)
        return 0;
    inode_lock_many(fs, &ino, 1);
    int moved = 0;
    struct page *ipage = NULL;
    struct inode_info ii;
    if (!seg_block_valid(fs->seg, blkaddr))
        goto out; /* freed while we waited for the lock */
    err = inode_get(fs, ino, &ipage, &ii);
    if (err) {
        ipage = NULL;
        goto out;
    }
    /* A pinned file's blocks never move (the kernel's GC skips them too): the victim keeps
     * them, is not emptied, and is skipped until it changes (seg_gc_done). */
    if (ii.inline_flags & F2FS_PIN_FILE) {
        atomic_fetch_add(&fs->gc->pinned_skipped, 1);
        goto out;
    }
    uint64_t index = ofs;
    if (nid != ino) {
        struct page *np;
        err = node_get(fs, nid, ino, &np);
        if (err)
            goto out;
        uint32_t node_ofs = le32(page_node(np)->footer.flag) >> OFFSET_BIT_SHIFT;
        pcache_put(fs->cache, np);
        uint64_t first = dnode_first_block(&ii, node_ofs);
        if (first == UINT64_MAX || ofs >= ii.addrs_per_block)
            goto out;
        index = first + ofs;
    } else if (ofs >= ii.addrs_per_inode) {
        goto out;
    }
    struct dnode dn;
    err = dnode_get(fs, &ii, ipage, index, false, &dn);
    if (err)
        goto out;
    bool owner = dn.nid == nid && le32(*dn.addr) == blkaddr;
    dnode_put(fs, ipage, &dn);
    if (!owner)
        goto out;
    /* A compressed cluster's blocks move as they are, together (cluster.c); a plain
     * cluster's block is a page of the file like any other. */
    if (compress_file(&ii)) {
        int r = cluster_gc_move(fs, &ii, ipage, index, blkaddr);
        if (r < 0)
            err = r;
        if (r != 0) {
            moved = r > 0 ? r : 0; /* blocks moved */
            goto out;
        }
    }
    struct page *page;
    err = data_get_page(fs, &ii, ipage, index, true, &page);
    if (err)
        goto out;
    page->gc_cold = true; /* data_writeback: to the cold data log */
    pcache_mark_dirty(fs->cache, page);
    pcache_put(fs->cache, page);
    moved = 1;
out:
    if (ipage)
        pcache_put(fs->cache, ipage);
    inode_unlock_many(fs, &ino, 1);
    if (err == -ENOENT)
        err = 0;
    return err ? err : moved;
}

/* Makes node page nid dirty when the NAT still puts it at blkaddr. */
static int move_node_block(struct f2fuse *fs, uint32_t blkaddr, const struct f2fs_summary *e)
{
    uint32_t nid = le32(e->nid);
    struct f2fs_nat_entry ne;
    uint32_t ino;
    int err = summary_owner(fs, nid, &ne, &ino);
    if (err <= 0)
        return err;
    if (le32(ne.block_addr) != blkaddr)
        return 0;
    inode_lock_many(fs, &ino, 1);
    int moved = 0;
    err = nat_get(fs->nat, nid, &ne); /* again, under the owner's lock */
    if (!err && le32(ne.block_addr) == blkaddr && le32(ne.ino) == ino) {
        struct page *page;
        err = node_get(fs, nid, ino, &page);
        if (!err) {
            pcache_mark_dirty(fs->cache, page);
            pcache_put(fs->cache, page);
            moved = 1;
        }
    }
    inode_unlock_many(fs, &ino, 1);
    return err ? err : moved;
}

static int nid_order(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Blocks that moving a victim writes: its valid blocks, plus for data one direct node per
 * distinct owner (each owner's pointer changes). */
static uint64_t move_cost(const struct seg_gc_victim *v, const struct f2fs_summary_block *ssa,
                          bool node)
{
    if (node)
        return v->valid;
    uint32_t nids[BLKS];
    unsigned n = 0;
    for (unsigned off = 0; off < BLKS; off++)
        if (v->map[off >> 3] & (0x80u >> (off & 7)))
            nids[n++] = le32(ssa->entries[off].nid);
    /* cppcheck-suppress uninitvar ; qsort reads only the n entries the loop set */
    qsort(nids, n, sizeof(nids[0]), nid_order);
    unsigned distinct = 0;
    for (unsigned i = 0; i < n; i++)
        distinct += i == 0 || nids[i] != nids[i - 1];
    return (uint64_t)v->valid + distinct;
}

/* ---- one round -------------------------------------------------------------------------- */

/* Blocks a round may write: the free segments beyond the node logs' reserve, less what is
 * dirty already (GC's own reserve is what it spends). */
static uint64_t round_budget(struct f2fuse *fs)
{
    uint32_t keep = SPACE_LOG_RESERVED_SEGMENTS;
    uint32_t free_segs = seg_free_segments(fs->seg);
    uint64_t budget = free_segs > keep ? (uint64_t)(free_segs - keep) * BLKS : 0;
    uint64_t pending = space_pending_blocks(fs);
    return budget > pending ? budget - pending : 0;
}

static int gc_round(struct f2fuse *fs, bool background, enum gc_policy policy, uint64_t budget,
                    unsigned max_victims, uint32_t *cleaned)
{
    struct gc_control *gc = fs->gc;
    enum blk_prio prio = background ? BLK_PRIO_LOW : BLK_PRIO_NORMAL;
    uint32_t victims[GC_MAX_VICTIMS];
    unsigned n = 0;
    uint64_t cost = 0, data_cost = 0, data_moved = 0, node_moved = 0;
    /* Moved data may also fill slack space: with free segments this low the data logs
     * reuse the free slots of other data segments (SSR, segment.c).  Without counting it, GC
     * with the free segments down to the node logs' keep found nothing that fits and gave
     * ENOSPC beside thousands of slack blocks. */
    uint64_t slack = fs->opts.gc_ssr ? seg_ssr_blocks(fs->seg) : 0;
    struct f2fs_summary_block *ssa = blk_alloc_buf(F2FS_BLKSIZE);
    struct seg_gc_victim *v = malloc(sizeof(*v));
    *cleaned = 0;
    if (!ssa || !v) {
        free(ssa);
        free(v);
        return -ENOMEM;
    }
    int err = 0;
    pthread_rwlock_rdlock(&fs->cp_lock);
    err = fs_write_error(fs);
    while (!err && n < max_victims && n < GC_MAX_VICTIMS) {
        uint32_t max_valid = background ? BG_MAX_VALID : BLKS - 1;
        if (seg_gc_pick(fs->seg, policy, max_valid, v) == UINT32_MAX)
            break;
        err = seg_read_ssa(fs->seg, v->segno, prio, ssa);
        if (err) {
            seg_gc_done(fs->seg, v->segno, false);
            break;
        }
        bool node = ssa->footer.entry_type == SUM_TYPE_NODE;
        uint64_t c = move_cost(v, ssa, node);
        /* A data victim's blocks may go to slack space; the direct nodes it dirties go to
         * the node logs, which may dip into their keep by an eighth of a segment (each log
         * may take one fresh segment per checkpoint, which the keep covers). */
        bool fits = node ? cost + c <= budget
                         : data_cost + v->valid <= budget + slack &&
                               (cost - data_cost) + (c - v->valid) <= budget + BLKS / 8;
        if (!fits) {
            seg_gc_done(fs->seg, v->segno, false); /* does not fit in this round */
            break;
        }
        cost += c;
        if (!node)
            data_cost += v->valid;
        victims[n++] = v->segno;
        for (unsigned off = 0; off < BLKS && !err; off++) {
            if (!(v->map[off >> 3] & (0x80u >> (off & 7))))
                continue;
            uint32_t blkaddr = seg_block_addr(fs->seg, v->segno, off);
            int r = node ? move_node_block(fs, blkaddr, &ssa->entries[off])
                         : move_data_block(fs, blkaddr, &ssa->entries[off]);
            if (r < 0)
                err = r;
            else if (node)
                node_moved += (unsigned)r;
            else
                data_moved += (unsigned)r;
        }
    }
    pthread_rwlock_unlock(&fs->cp_lock);
    free(ssa);
    free(v);
    if (n && !err)
        err = checkpoint_request(fs, prio, CP_ALL_DATA); /* writes the moved pages */
    for (unsigned i = 0; i < n; i++) {
        if (seg_gc_done(fs->seg, victims[i], !err))
            (*cleaned)++;
        else if (!err)
            atomic_fetch_add(&gc->unmovable, 1);
    }
    atomic_fetch_add(&gc->data_moved, data_moved);
    atomic_fetch_add(&gc->node_moved, node_moved);
    atomic_fetch_add(background ? &gc->bg_rounds : &gc->fg_rounds, 1);
    atomic_fetch_add(background ? &gc->bg_segments : &gc->fg_segments, *cleaned);
    if (n == 0 && !err)
        return -EAGAIN; /* nothing to clean (or nothing that fits) */
    return err;
}

/* ---- foreground ------------------------------------------------------------------------- */

void gc_foreground_begin(struct f2fuse *fs)
{
    pthread_mutex_lock(&fs->gc->lock);
}

int gc_foreground_round(struct f2fuse *fs)
{
    uint32_t cleaned;
    int err = gc_round(fs, false, GC_GREEDY, round_budget(fs), GC_MAX_VICTIMS, &cleaned);
    return err == -EAGAIN ? -ENOSPC : err;
}

void gc_foreground_end(struct f2fuse *fs, int err, uint64_t waited_ns)
{
    struct gc_control *gc = fs->gc;
    if (err == -ENOSPC)
        atomic_fetch_add(&gc->enospc, 1);
    pthread_mutex_unlock(&gc->lock);
    atomic_fetch_add(&gc->fg_wait_ns, waited_ns);
}

/* ---- background ------------------------------------------------------------------------- */

void gc_note_activity(struct f2fuse *fs)
{
    atomic_store_explicit(&fs->activity_ns, clock_mono_ns(), memory_order_relaxed);
}

/* The background thread's period: a round after every gc_idle_ms. */
static uint64_t idle_period_ns(void *arg)
{
    const struct f2fuse *fs = arg;
    return (uint64_t)fs->opts.gc_idle_ms * NS_PER_MS;
}

static void background_step(void *arg)
{
    struct f2fuse *fs = arg;
    struct gc_control *gc = fs->gc;
    unsigned mode = fs->opts.background_gc;
    if (fs_write_error(fs))
        return;
    uint64_t idle_ns = (uint64_t)fs->opts.gc_idle_ms * 1000000u;
    if (mode == F2FUSE_BGGC_ON &&
        clock_mono_ns() - atomic_load_explicit(&fs->activity_ns, memory_order_relaxed) < idle_ns)
        return;
    if (pthread_mutex_trylock(&gc->lock))
        return; /* foreground GC is at work */
    uint32_t cleaned;
    int err = gc_round(fs, true, mode == F2FUSE_BGGC_SYNC ? GC_GREEDY : GC_COST_BENEFIT,
                       round_budget(fs), BG_MAX_VICTIMS, &cleaned);
    pthread_mutex_unlock(&gc->lock);
    if (err && err != -EAGAIN && !gc->bg_error_logged) {
        gc->bg_error_logged = true;
        log_err("background GC failed: %s", strerror(-err));
    }
}

/* ---- setup ------------------------------------------------------------------------------ */

int gc_init(struct f2fuse *fs)
{
    struct gc_control *gc = calloc(1, sizeof(*gc));
    if (!gc)
        return -ENOMEM;
    pthread_mutex_init(&gc->lock, NULL);
    /* The checkpoint's reserve for GC, rsvd_segment_count, is sized for the kernel's section
     * cleaning; f2fuse moves at most a round's worth at a time, so half of it suffices, and
     * small images cannot spare more than an eighth of their segments. */
    uint32_t main_segs = seg_main_segments(fs->seg);
    uint32_t rsvd = le32(fs->cp->rsvd_segment_count) / 2;
    if (rsvd > main_segs / 8)
        rsvd = main_segs / 8;
    gc->reserved = rsvd < 2 ? 2 : rsvd;
    /* data logs turn to slack space reuse where user writes would touch GC's reserve
     * (nossr: only where they would otherwise fail) */
    if (fs->opts.gc_ssr)
        seg_set_ssr_threshold(fs->seg, SPACE_LOG_RESERVED_SEGMENTS + gc->reserved);
    gc_note_activity(fs);
    fs->gc = gc;
    return 0;
}

int gc_start(struct f2fuse *fs)
{
    struct gc_control *gc = fs->gc;
    if (!gc || fs->opts.background_gc == F2FUSE_BGGC_OFF)
        return 0;
    return ticker_start(&gc->background, idle_period_ns, background_step, fs);
}

void gc_stop(struct f2fuse *fs)
{
    struct gc_control *gc = fs->gc;
    if (gc)
        ticker_stop(&gc->background);
}

void gc_destroy(struct f2fuse *fs)
{
    struct gc_control *gc = fs->gc;
    if (!gc)
        return;
    gc_stop(fs);
    pthread_mutex_destroy(&gc->lock);
    free(gc);
    fs->gc = NULL;
}

uint32_t gc_reserved_segments(struct f2fuse *fs)
{
    return fs->gc ? fs->gc->reserved : 0;
}

void gc_emit_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg)
{
    struct gc_control *gc = fs->gc;
    if (!gc)
        return;
    uint64_t fg = atomic_load(&gc->fg_rounds), bg = atomic_load(&gc->bg_rounds);
    uint64_t fgs = atomic_load(&gc->fg_segments), bgs = atomic_load(&gc->bg_segments);
    uint64_t dm = atomic_load(&gc->data_moved), nm = atomic_load(&gc->node_moved);
    uint64_t alloc = seg_blocks_allocated(fs->seg);
    fn(arg, "gc.background_mode", fs->opts.background_gc);
    fn(arg, "gc.reserved_segments", gc->reserved);
    fn(arg, "gc.runs", fg + bg);
    fn(arg, "gc.foreground_runs", fg);
    fn(arg, "gc.background_runs", bg);
    fn(arg, "gc.segments_cleaned", fgs + bgs);
    fn(arg, "gc.background_segments", bgs);
    fn(arg, "gc.blocks_moved", dm + nm);
    fn(arg, "gc.data_blocks_moved", dm);
    fn(arg, "gc.node_blocks_moved", nm);
    fn(arg, "gc.unmovable_segments", atomic_load(&gc->unmovable));
    fn(arg, "gc.pinned_blocks_skipped", atomic_load(&gc->pinned_skipped));
    fn(arg, "gc.enospc", atomic_load(&gc->enospc));
    fn(arg, "gc.foreground_wait_ms", atomic_load(&gc->fg_wait_ns) / 1000000u);
    /* Blocks written to the main area per block the file system was asked to write. */
    fn(arg, "gc.write_amplification_x100", alloc > dm + nm ? alloc * 100 / (alloc - dm - nm) : 100);
}
