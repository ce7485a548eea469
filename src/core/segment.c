/* Segment manager: SIT state of every main segment, the six logs, free/prefree tracking,
 * and the segment side of the checkpoint (SIT blocks, current segments, summaries).
 *
 * State per segment: the valid map now and as of the last committed checkpoint, the valid
 * counts of both, the SIT type and mtime, and which log (if any) is writing into it.  A
 * segment is
 *   current  a log appends to it;
 *   free     not current, no valid block now nor at the last checkpoint: can be handed out;
 *   prefree  not current, no valid block now but some at the last checkpoint: becomes free
 *            when the next checkpoint commits (the last checkpoint still points into it);
 *   in use   otherwise.
 * Free and prefree segments are kept in two bitmaps (one bit per segment) with counters.
 *
 * SIT versions: committed_bitmap is the SIT bitmap of the last committed checkpoint;
 * sit_bitmap is the one the next checkpoint will carry.  seg_flush_sit writes every dirty
 * SIT block to the copy the committed bitmap does NOT select and records that copy in
 * sit_bitmap; seg_checkpoint_done makes sit_bitmap the committed one.  A checkpoint that
 * fails after the flush therefore never damages what the last valid checkpoint references,
 * and a retry writes to the same alternate copies again.
 *
 * One mutex guards everything. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/segment.h"
#include "core/context.h"
#include "core/discard.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/stats.h"

#define BLKS      F2FS_BLOCKS_PER_SEG
#define NO_LOG    (-1)
#define ALLOC_LFS 0
#define ALLOC_SSR 1
#define IO_BATCH  64u

struct seg_entry {
    uint8_t map[SIT_VBLOCK_MAP_SIZE];      /* valid blocks now, MSB-first */
    uint8_t ckpt_map[SIT_VBLOCK_MAP_SIZE]; /* as of the last committed checkpoint */
    uint64_t mtime;
    uint16_t valid;
    uint16_t ckpt_valid;
    uint8_t type; /* SIT type: the log type that wrote it */
    int8_t log;   /* log writing into it, or NO_LOG */
};

struct log_state {
    uint32_t segno;
    uint16_t next_blkoff;
    uint8_t alloc_type;
    bool must_move;                 /* loaded as SSR (or full): leave it first */
    struct f2fs_summary_block *sum; /* 4 KiB aligned: written to the SSA as is */
};

struct seg_manager {
    struct f2fuse *fs;
    pthread_mutex_t lock;

    uint32_t main_segs;
    uint32_t main_blkaddr;
    uint32_t sit_blkaddr;
    uint32_t sit_copy_blocks; /* blocks in one SIT copy */
    uint32_t sit_blk_cnt;     /* SIT blocks in use: ceil(main_segs / 55) */
    uint32_t ssa_blkaddr;
    uint32_t sit_bitmap_bytes;

    struct seg_entry *se;
    uint64_t *free_map; /* one bit per segment */
    uint64_t *prefree_map;
    uint64_t *changed_map;     /* segments whose map changed since the last checkpoint */
    uint64_t *hold_map;        /* free segments allocation must not take (recovery) */
    uint64_t *gc_busy_map;     /* GC victims being migrated: not picked again */
    uint64_t *gc_skip_map;     /* victims GC could not empty: skipped until they change */
    uint64_t *sit_dirty;       /* one bit per SIT block */
    uint8_t *committed_bitmap; /* SIT version bitmap of the last committed checkpoint */
    uint8_t *sit_bitmap;       /* the one the next checkpoint carries */

    struct log_state logs[LOG_COUNT];
    void *sum_mem;

    uint32_t free_segs;
    uint32_t prefree_segs;
    uint32_t data_reserve;
    uint32_t ssr_threshold; /* data logs reuse slack space at or below this many free */
    uint64_t valid_blocks;
    /* Blocks promised but not yet written (NEW_ADDR data pointers and NAT entries): kept
     * under the same lock as valid_blocks, so that their sum never counts a block twice
     * while writeback turns a reservation into a valid block. */
    int64_t reserved_blocks;

    uint64_t elapsed_base; /* the checkpoint's elapsed_time at load */
    uint64_t mono_base;    /* CLOCK_MONOTONIC seconds at load */

    /* Blocks the data and node logs allocated in all, as of the fill of the checkpoint
     * being written and as of the last committed one: an upper bound of what a roll-forward
     * recovery after a crash now may have to copy and rewrite. */
    uint64_t alloc_at_fill[2], alloc_at_cp[2];

    uint64_t st_alloc[LOG_COUNT];
    uint64_t st_ssa_writes;
    uint64_t st_sit_writes;
    uint64_t st_new_segments;
    uint64_t st_enospc;
    uint64_t st_ssr_segments;
};

/* ---- bits ------------------------------------------------------------------------------ */

static inline bool f2fs_test_bit(unsigned nr, const uint8_t *map)
{
    return map[nr >> 3] & (0x80u >> (nr & 7));
}

static inline void f2fs_set_bit(unsigned nr, uint8_t *map)
{
    map[nr >> 3] |= (uint8_t)(0x80u >> (nr & 7));
}

static inline void f2fs_clear_bit(unsigned nr, uint8_t *map)
{
    map[nr >> 3] &= (uint8_t) ~(0x80u >> (nr & 7));
}

static inline bool bm_test(const uint64_t *bm, uint32_t i)
{
    return (bm[i >> 6] >> (i & 63)) & 1;
}

static inline void bm_set(uint64_t *bm, uint32_t i)
{
    bm[i >> 6] |= 1ull << (i & 63);
}

static inline void bm_clear(uint64_t *bm, uint32_t i)
{
    bm[i >> 6] &= ~(1ull << (i & 63));
}

/* First set bit in [from, n), or n. */
static uint32_t bm_next(const uint64_t *bm, uint32_t n, uint32_t from)
{
    if (from >= n)
        return n;
    uint32_t w = from >> 6;
    uint64_t word = bm[w] & (~0ull << (from & 63));
    uint32_t words = (n + 63) / 64;
    for (;;) {
        if (word) {
            uint32_t i = (w << 6) + (uint32_t)__builtin_ctzll(word);
            return i < n ? i : n;
        }
        if (++w >= words)
            return n;
        word = bm[w];
    }
}

static unsigned popcount_map(const uint8_t *map)
{
    unsigned n = 0;
    for (unsigned i = 0; i < SIT_VBLOCK_MAP_SIZE; i++)
        n += (unsigned)__builtin_popcount(map[i]);
    return n;
}

/* ---- time ------------------------------------------------------------------------------ */

/* The file system's age in seconds (the kernel's get_mtime): the checkpoint's elapsed_time
 * plus the time since this mount; monotonic. */
static uint64_t seg_now(const struct seg_manager *sm)
{
    return sm->elapsed_base + ((clock_mono_ns() / NS_PER_SEC) - sm->mono_base);
}

/* ---- state ----------------------------------------------------------------------------- */

/* Puts segment s into the free/prefree sets its counts call for. */
static void seg_update_state(struct seg_manager *sm, uint32_t s)
{
    const struct seg_entry *e = &sm->se[s];
    /* A segment emptied since the last checkpoint stays prefree until the next one, even
     * when that checkpoint held nothing in it: it may hold the fsync chain that
     * roll-forward recovery walks (the kernel's rule too). */
    bool changed = bm_test(sm->changed_map, s);
    bool want_free = e->log == NO_LOG && e->valid == 0 && e->ckpt_valid == 0 && !changed;
    bool want_prefree = e->log == NO_LOG && e->valid == 0 && (e->ckpt_valid != 0 || changed);
    bool is_free = bm_test(sm->free_map, s), is_prefree = bm_test(sm->prefree_map, s);
    if (want_free != is_free) {
        if (want_free) {
            bm_set(sm->free_map, s);
            sm->free_segs++;
        } else {
            bm_clear(sm->free_map, s);
            sm->free_segs--;
        }
    }
    if (want_prefree != is_prefree) {
        if (want_prefree) {
            bm_set(sm->prefree_map, s);
            sm->prefree_segs++;
        } else {
            bm_clear(sm->prefree_map, s);
            sm->prefree_segs--;
        }
    }
}

static void seg_mark_dirty(struct seg_manager *sm, uint32_t s)
{
    bm_set(sm->sit_dirty, s / SIT_ENTRY_PER_BLOCK);
}

/* A free segment that is not held, searching upward from hint and wrapping around;
 * UINT32_MAX if none. */
static uint32_t find_free_segment(struct seg_manager *sm, uint32_t hint)
{
    if (sm->free_segs == 0)
        return UINT32_MAX;
    if (hint >= sm->main_segs)
        hint = 0;
    for (uint32_t s = bm_next(sm->free_map, sm->main_segs, hint); s < sm->main_segs;
         s = bm_next(sm->free_map, sm->main_segs, s + 1))
        if (!bm_test(sm->hold_map, s))
            return s;
    for (uint32_t s = bm_next(sm->free_map, hint, 0); s < hint; /* wrap: [0, hint) */
         s = bm_next(sm->free_map, hint, s + 1))
        if (!bm_test(sm->hold_map, s))
            return s;
    return UINT32_MAX;
}

static void summary_footer_set(struct f2fs_summary_block *sum, enum log_type t)
{
    memset(&sum->journal, 0, sizeof(sum->journal));
    sum->footer.entry_type = log_is_node(t) ? SUM_TYPE_NODE : SUM_TYPE_DATA;
    sum->footer.check_sum = 0;
}

/* The next slot of log lg's segment e after off that it may write (LFS: simply the next
 * one; SSR: the next free in both the current and the checkpointed map), or BLKS. */
static unsigned next_slot(const struct log_state *lg, const struct seg_entry *e, int off)
{
    if (lg->alloc_type == ALLOC_LFS)
        return (unsigned)(off + 1);
    for (unsigned i = (unsigned)(off + 1); i < BLKS; i++)
        if (!f2fs_test_bit(i, e->map) && !f2fs_test_bit(i, e->ckpt_map))
            return i;
    return BLKS;
}

/* Makes newseg the current segment of log t: a free segment (LFS), or with ssr a segment
 * whose free slots the log fills (slack space reuse), its summary read from the SSA so that
 * the entries of its valid blocks stay.  The old segment's summary must have been written
 * already. */
static int log_switch(struct seg_manager *sm, enum log_type t, uint32_t newseg, bool ssr)
{
    struct log_state *lg = &sm->logs[t];
    if (ssr) {
        int err = blk_read(sm->fs->dev, (uint64_t)(sm->ssa_blkaddr + newseg) * F2FS_BLKSIZE,
                           lg->sum, F2FS_BLKSIZE);
        if (err) {
            log_err("segment %u: reading its summary block failed: %s", newseg, strerror(-err));
            return err;
        }
    }
    uint32_t old = lg->segno;
    sm->se[old].log = NO_LOG;
    seg_update_state(sm, old);

    struct seg_entry *e = &sm->se[newseg];
    e->log = (int8_t)t;
    if (e->type != t) {
        e->type = (uint8_t)t;
        seg_mark_dirty(sm, newseg);
    }
    seg_update_state(sm, newseg);
    lg->segno = newseg;
    lg->must_move = false;
    if (ssr) {
        lg->alloc_type = ALLOC_SSR;
        lg->next_blkoff = (uint16_t)next_slot(lg, e, -1);
        sm->st_ssr_segments++;
    } else {
        lg->alloc_type = ALLOC_LFS;
        lg->next_blkoff = 0;
        memset(lg->sum, 0, sizeof(*lg->sum));
        sm->st_new_segments++;
    }
    summary_footer_set(lg->sum, t);
    return 0;
}

/* Writes the summary of log t's segment to its SSA block. */
static int write_ssa(struct seg_manager *sm, enum log_type t)
{
    struct log_state *lg = &sm->logs[t];
    summary_footer_set(lg->sum, t);
    int err = blk_write(sm->fs->dev, (uint64_t)(sm->ssa_blkaddr + lg->segno) * F2FS_BLKSIZE,
                        lg->sum, F2FS_BLKSIZE);
    if (err) {
        log_err("segment %u: writing its summary block failed: %s", lg->segno, strerror(-err));
        return err;
    }
    sm->st_ssa_writes++;
    return 0;
}

/* A segment whose free slots a data log may fill (SSR): a data segment with free slots, no
 * log in it, neither held nor being cleaned, and unchanged since the last checkpoint — so
 * every slot free in both maps holds nothing the last checkpoint or the fsync chain after
 * it needs.  Of those the one with the fewest valid blocks, of type t if there is one. */
static bool ssr_candidate(const struct seg_manager *sm, uint32_t s)
{
    const struct seg_entry *e = &sm->se[s];
    return e->log == NO_LOG && e->valid > 0 && e->valid < BLKS && e->valid == e->ckpt_valid &&
           !log_is_node((enum log_type)e->type) && !bm_test(sm->changed_map, s) &&
           !bm_test(sm->hold_map, s) && !bm_test(sm->gc_busy_map, s);
}

static uint32_t find_ssr_segment(struct seg_manager *sm, enum log_type t)
{
    uint32_t best = UINT32_MAX, best_other = UINT32_MAX;
    for (uint32_t s = 0; s < sm->main_segs; s++) {
        if (!ssr_candidate(sm, s))
            continue;
        uint32_t *b = sm->se[s].type == t ? &best : &best_other;
        if (*b == UINT32_MAX || sm->se[s].valid < sm->se[*b].valid)
            *b = s;
    }
    return best != UINT32_MAX ? best : best_other;
}

/* Where log t goes next.  Data logs leave data_reserve free segments to the node logs, and
 * at or below ssr_threshold free segments they fill the free slots of other data segments
 * instead (*ssr), as the kernel does when free segments run short. */
static uint32_t pick_new_segment(struct seg_manager *sm, enum log_type t, bool *ssr)
{
    *ssr = false;
    if (!log_is_node(t)) {
        uint32_t limit = sm->ssr_threshold > sm->data_reserve ? sm->ssr_threshold
                                                              : sm->data_reserve;
        if (sm->free_segs <= limit) {
            uint32_t s = find_ssr_segment(sm, t);
            if (s != UINT32_MAX) {
                *ssr = true;
                return s;
            }
        }
        if (sm->free_segs <= sm->data_reserve)
            return UINT32_MAX;
    }
    return find_free_segment(sm, sm->logs[t].segno);
}

/* ---- I/O helpers ----------------------------------------------------------------------- */

/* Reads or writes n single blocks at addrs[i] from/to bufs + i * 4096, in batches. */
static int io_blocks(struct seg_manager *sm, enum blk_op op, const uint32_t *addrs, uint8_t *bufs,
                     unsigned n)
{
    struct blk_req reqs[IO_BATCH];
    struct blk_req *ptrs[IO_BATCH];
    for (unsigned done = 0; done < n;) {
        unsigned m = n - done < IO_BATCH ? n - done : IO_BATCH;
        for (unsigned i = 0; i < m; i++) {
            memset(&reqs[i], 0, sizeof(reqs[i]));
            reqs[i].op = op;
            /* SIT writes belong to the checkpoint: its priority (the requester's without
             * checkpoint_merge: the baseline merged checkpoints are compared with) */
            reqs[i].prio = op == BLK_WRITE ? sm->fs->io_prio : BLK_PRIO_HIGH;
            reqs[i].off = (uint64_t)addrs[done + i] * F2FS_BLKSIZE;
            reqs[i].len = F2FS_BLKSIZE;
            reqs[i].buf = bufs + (size_t)(done + i) * F2FS_BLKSIZE;
            ptrs[i] = &reqs[i];
        }
        int err = blk_submit_wait(sm->fs->dev, ptrs, m);
        if (err)
            return err;
        done += m;
    }
    return 0;
}

/* ---- load ------------------------------------------------------------------------------ */

static int check_sit_entry(struct f2fuse *fs, uint32_t segno, const struct f2fs_sit_entry *raw,
                           const char *where)
{
    uint16_t vb = le16(raw->vblocks);
    unsigned valid = vb & SIT_VBLOCKS_MASK, type = vb >> SIT_VBLOCKS_SHIFT;
    unsigned pop = popcount_map(raw->valid_map);
    if (valid > BLKS || valid != pop)
        return fs_corrupt(fs, "%s: segment %u claims %u valid blocks, its map has %u", where, segno,
                          valid, pop);
    if (type >= LOG_COUNT)
        return fs_corrupt(fs, "%s: segment %u has type %u", where, segno, type);
    return 0;
}

static void entry_from_raw(struct seg_entry *e, const struct f2fs_sit_entry *raw)
{
    uint16_t vb = le16(raw->vblocks);
    e->valid = vb & SIT_VBLOCKS_MASK;
    e->type = (uint8_t)(vb >> SIT_VBLOCKS_SHIFT);
    memcpy(e->map, raw->valid_map, SIT_VBLOCK_MAP_SIZE);
    e->mtime = le64(raw->mtime);
}

static void entry_to_raw(const struct seg_entry *e, struct f2fs_sit_entry *raw)
{
    raw->vblocks = htole16((uint16_t)((unsigned)e->type << SIT_VBLOCKS_SHIFT | e->valid));
    memcpy(raw->valid_map, e->map, SIT_VBLOCK_MAP_SIZE);
    raw->mtime = htole64(e->mtime);
}

/* Reads every SIT block in use from the copy the checkpoint's bitmap selects. */
static int load_sit_blocks(struct seg_manager *sm)
{
    int err = -ENOMEM;
    uint32_t *addrs = malloc(sizeof(*addrs) * IO_BATCH);
    uint8_t *buf = blk_alloc_buf((size_t)IO_BATCH * F2FS_BLKSIZE);
    if (!addrs || !buf)
        goto out;
    for (uint32_t first = 0; first < sm->sit_blk_cnt; first += IO_BATCH) {
        unsigned m = sm->sit_blk_cnt - first < IO_BATCH ? sm->sit_blk_cnt - first : IO_BATCH;
        for (unsigned i = 0; i < m; i++) {
            uint32_t b = first + i;
            addrs[i] = sm->sit_blkaddr + b +
                       (f2fs_test_bit(b, sm->committed_bitmap) ? sm->sit_copy_blocks : 0);
        }
        err = io_blocks(sm, BLK_READ, addrs, buf, m);
        if (err) {
            log_err("reading SIT blocks failed: %s", strerror(-err));
            goto out;
        }
        for (unsigned i = 0; i < m; i++) {
            const struct f2fs_sit_entry *ents = (const void *)(buf + (size_t)i * F2FS_BLKSIZE);
            for (unsigned j = 0; j < SIT_ENTRY_PER_BLOCK; j++) {
                uint32_t s = (first + i) * SIT_ENTRY_PER_BLOCK + j;
                if (s >= sm->main_segs)
                    break;
                err = check_sit_entry(sm->fs, s, &ents[j], "SIT");
                if (err)
                    goto out;
                entry_from_raw(&sm->se[s], &ents[j]);
            }
        }
    }
    err = 0;
out:
    free(addrs);
    free(buf);
    return err;
}

static int apply_sit_journal(struct seg_manager *sm, const struct f2fs_journal *j)
{
    unsigned n = le16(j->n_entries);
    if (n > SIT_JOURNAL_ENTRIES)
        return fs_corrupt(sm->fs, "SIT journal claims %u entries (max %d)", n, SIT_JOURNAL_ENTRIES);
    for (unsigned i = 0; i < n; i++) {
        const struct sit_journal_entry *je = &j->sit.entries[i];
        uint32_t s = le32(je->segno);
        if (s >= sm->main_segs)
            return fs_corrupt(sm->fs, "SIT journal entry %u names segment %u (of %u)", i, s,
                              sm->main_segs);
        int err = check_sit_entry(sm->fs, s, &je->se, "SIT journal");
        if (err)
            return err;
        entry_from_raw(&sm->se[s], &je->se);
        /* f2fuse writes everything to SIT blocks and leaves the journal empty */
        seg_mark_dirty(sm, s);
    }
    return 0;
}

/* Number of summary entries stored for a log: all of them for an SSR log. */
static unsigned log_sum_entries(const struct log_state *lg)
{
    return lg->alloc_type == ALLOC_SSR ? BLKS : lg->next_blkoff;
}

static int read_block(struct seg_manager *sm, uint32_t blkaddr, void *buf)
{
    int err = blk_read(sm->fs->dev, (uint64_t)blkaddr * F2FS_BLKSIZE, buf, F2FS_BLKSIZE);
    if (err)
        log_err("reading block %u failed: %s", blkaddr, strerror(-err));
    return err;
}

/* Compact data summaries: NAT journal, SIT journal, then the entries of hot, warm and cold
 * data, 7 bytes each, continuing in the next block when the footer area would be reached
 * (read_compacted_summaries). */
static int read_compacted(struct seg_manager *sm, uint8_t *buf, uint32_t first, uint32_t last,
                          struct f2fs_journal *sit_journal)
{
    uint32_t blk = first;
    int err = read_block(sm, blk, buf);
    if (err)
        return err;
    memcpy(sit_journal, buf + SUM_JOURNAL_SIZE, SUM_JOURNAL_SIZE);
    size_t off = 2 * SUM_JOURNAL_SIZE;
    for (int t = LOG_HOT_DATA; t <= LOG_COLD_DATA; t++) {
        struct log_state *lg = &sm->logs[t];
        unsigned n = log_sum_entries(lg);
        for (unsigned j = 0; j < n; j++) {
            if (off + sizeof(struct f2fs_summary) > F2FS_BLKSIZE - SUM_FOOTER_SIZE) {
                if (++blk > last)
                    return fs_corrupt(sm->fs, "checkpoint: compact summaries run past the "
                                              "summary area of the pack");
                err = read_block(sm, blk, buf);
                if (err)
                    return err;
                off = 0;
            }
            memcpy(&lg->sum->entries[j], buf + off, sizeof(struct f2fs_summary));
            off += sizeof(struct f2fs_summary);
        }
    }
    return 0;
}

/* Node summaries without a copy in the pack: each written block of a node log names its
 * nid in its footer (f2fs_restore_node_summary). */
static int restore_node_summary(struct seg_manager *sm, enum log_type t)
{
    struct log_state *lg = &sm->logs[t];
    unsigned n = log_sum_entries(lg);
    if (n == 0)
        return 0;
    uint8_t *buf = blk_alloc_buf((size_t)n * F2FS_BLKSIZE);
    if (!buf)
        return -ENOMEM;
    uint32_t start = sm->main_blkaddr + lg->segno * BLKS;
    int err = blk_read(sm->fs->dev, (uint64_t)start * F2FS_BLKSIZE, buf, (size_t)n * F2FS_BLKSIZE);
    if (err) {
        log_err("reading node segment %u failed: %s", lg->segno, strerror(-err));
        free(buf);
        return err;
    }
    for (unsigned j = 0; j < n; j++) {
        const struct f2fs_node *node = (const void *)(buf + (size_t)j * F2FS_BLKSIZE);
        lg->sum->entries[j].nid = node->footer.nid;
        lg->sum->entries[j].version = 0;
        lg->sum->entries[j].ofs_in_node = 0;
    }
    free(buf);
    return 0;
}

static int load_summaries(struct seg_manager *sm)
{
    struct f2fuse *fs = sm->fs;
    const struct f2fs_checkpoint *cp = fs->cp;
    uint32_t flags = le32(cp->ckpt_flags);
    uint32_t total = le32(cp->cp_pack_total_block_count);
    uint32_t start_sum = le32(cp->cp_pack_start_sum);
    bool node_sums = flags & (CP_UMOUNT_FLAG | CP_FASTBOOT_FLAG);
    uint32_t nr = node_sums ? 6 : 3;
    uint32_t pack = fs->cp_start;

    uint8_t *buf = blk_alloc_buf(F2FS_BLKSIZE);
    struct f2fs_journal *sit_journal = malloc(sizeof(*sit_journal));
    int err = -ENOMEM;
    if (!buf || !sit_journal)
        goto out;

    if (total < 2 + (node_sums ? 3 : 0) + 1 || start_sum < 1 ||
        start_sum > total - 2 - (node_sums ? 3 : 0)) {
        err = fs_corrupt(fs,
                         "checkpoint: pack of %u blocks, summaries at %u, cannot hold "
                         "its summaries",
                         total, start_sum);
        goto out;
    }

    if (flags & CP_COMPACT_SUM_FLAG) {
        uint32_t last = pack + total - 2 - (node_sums ? 3 : 0);
        err = read_compacted(sm, buf, pack + start_sum, last, sit_journal);
        if (err)
            goto out;
    } else {
        if (total < nr + 2) {
            err = fs_corrupt(fs, "checkpoint: pack of %u blocks cannot hold %u summaries", total,
                             nr);
            goto out;
        }
        for (int t = LOG_HOT_DATA; t <= LOG_COLD_DATA; t++) {
            err = read_block(sm, pack + total - (nr + 1) + (uint32_t)t, buf);
            if (err)
                goto out;
            const struct f2fs_summary_block *sb = (const void *)buf;
            memcpy(sm->logs[t].sum->entries, sb->entries, sizeof(sb->entries));
            if (t == LOG_COLD_DATA)
                memcpy(sit_journal, &sb->journal, sizeof(*sit_journal));
        }
    }

    for (int t = LOG_HOT_NODE; t <= LOG_COLD_NODE; t++) {
        if (node_sums) {
            err = read_block(sm, pack + total - 4 + (uint32_t)(t - LOG_HOT_NODE), buf);
            if (err)
                goto out;
            const struct f2fs_summary_block *sb = (const void *)buf;
            memcpy(sm->logs[t].sum->entries, sb->entries, sizeof(sb->entries));
        } else {
            err = restore_node_summary(sm, (enum log_type)t);
            if (err)
                goto out;
        }
    }

    /* Entries past the write position of an LFS log describe nothing. */
    for (int t = 0; t < LOG_COUNT; t++) {
        struct log_state *lg = &sm->logs[t];
        unsigned n = log_sum_entries(lg);
        memset(&lg->sum->entries[n], 0, (BLKS - n) * sizeof(struct f2fs_summary));
        summary_footer_set(lg->sum, (enum log_type)t);
    }

    err = apply_sit_journal(sm, sit_journal);
out:
    free(buf);
    free(sit_journal);
    return err;
}

static int load_logs(struct seg_manager *sm)
{
    const struct f2fs_checkpoint *cp = sm->fs->cp;
    for (int t = 0; t < LOG_COUNT; t++) {
        struct log_state *lg = &sm->logs[t];
        uint32_t segno;
        uint16_t blkoff;
        if (log_is_node((enum log_type)t)) {
            segno = le32(cp->cur_node_segno[t - LOG_HOT_NODE]);
            blkoff = le16(cp->cur_node_blkoff[t - LOG_HOT_NODE]);
        } else {
            segno = le32(cp->cur_data_segno[t]);
            blkoff = le16(cp->cur_data_blkoff[t]);
        }
        if (segno >= sm->main_segs || blkoff > BLKS)
            return fs_corrupt(sm->fs,
                              "checkpoint: log %d at segment %u block %u (of %u "
                              "segments)",
                              t, segno, blkoff, sm->main_segs);
        for (int u = 0; u < t; u++)
            if (sm->logs[u].segno == segno)
                return fs_corrupt(sm->fs, "checkpoint: logs %d and %d share segment %u", u, t,
                                  segno);
        lg->segno = segno;
        lg->next_blkoff = blkoff;
        lg->alloc_type = cp->alloc_type[t] == ALLOC_SSR ? ALLOC_SSR : ALLOC_LFS;
        if (cp->alloc_type[t] > ALLOC_SSR)
            return fs_corrupt(sm->fs, "checkpoint: log %d has allocation type %u", t,
                              cp->alloc_type[t]);
        lg->must_move = lg->alloc_type == ALLOC_SSR || blkoff == BLKS;
    }
    return 0;
}

/* Cross-checks the loaded SIT against the checkpoint and the logs. */
static int check_loaded(struct seg_manager *sm)
{
    struct f2fuse *fs = sm->fs;
    uint64_t node_blocks = 0, all = 0;
    for (uint32_t s = 0; s < sm->main_segs; s++) {
        all += sm->se[s].valid;
        if (log_is_node((enum log_type)sm->se[s].type))
            node_blocks += sm->se[s].valid;
    }
    if (all > le64(fs->cp->valid_block_count))
        return fs_corrupt(fs, "SIT: %llu valid blocks, checkpoint says %llu",
                          (unsigned long long)all,
                          (unsigned long long)le64(fs->cp->valid_block_count));
    if (node_blocks != le32(fs->cp->valid_node_count))
        return fs_corrupt(fs, "SIT: %llu valid node blocks, checkpoint says %u nodes",
                          (unsigned long long)node_blocks, le32(fs->cp->valid_node_count));
    for (int t = 0; t < LOG_COUNT; t++) {
        const struct log_state *lg = &sm->logs[t];
        const struct seg_entry *e = &sm->se[lg->segno];
        if (lg->alloc_type != ALLOC_LFS)
            continue;
        for (unsigned b = lg->next_blkoff; b < BLKS; b++)
            if (f2fs_test_bit(b, e->map))
                return fs_corrupt(fs,
                                  "log %d: block %u of its segment %u is valid but lies "
                                  "past the write position %u",
                                  t, b, lg->segno, lg->next_blkoff);
    }
    sm->valid_blocks = all;
    /* The checkpoint counts NEW_ADDR data pointers too (blocks reserved, not yet written
     * when it was taken): they stay reserved until written or freed. */
    sm->reserved_blocks = (int64_t)(le64(fs->cp->valid_block_count) - all);
    return 0;
}

void seg_destroy(struct seg_manager *sm)
{
    if (!sm)
        return;
    pthread_mutex_destroy(&sm->lock);
    free(sm->se);
    free(sm->free_map);
    free(sm->prefree_map);
    free(sm->changed_map);
    free(sm->hold_map);
    free(sm->gc_busy_map);
    free(sm->gc_skip_map);
    free(sm->sit_dirty);
    free(sm->committed_bitmap);
    free(sm->sit_bitmap);
    free(sm->sum_mem);
    free(sm);
}

int seg_load(struct f2fuse *fs, struct seg_manager **out)
{
    const struct f2fs_super_block *sb = &fs->sb;
    const struct f2fs_checkpoint *cp = fs->cp;
    uint32_t flags = le32(cp->ckpt_flags);
    if (le32(sb->cp_payload) > 0 || (flags & CP_LARGE_NAT_BITMAP_FLAG)) {
        log_err("read-write mounting is not supported with %s: the SIT bitmap does not sit "
                "in the checkpoint block",
                le32(sb->cp_payload) > 0 ? "cp_payload blocks" : "a large NAT bitmap");
        return -EOPNOTSUPP;
    }

    struct seg_manager *sm = calloc(1, sizeof(*sm));
    if (!sm)
        return -ENOMEM;
    pthread_mutex_init(&sm->lock, NULL);
    sm->fs = fs;
    sm->main_segs = le32(sb->segment_count_main);
    sm->main_blkaddr = le32(sb->main_blkaddr);
    sm->sit_blkaddr = le32(sb->sit_blkaddr);
    sm->sit_copy_blocks = le32(sb->segment_count_sit) / 2 * BLKS;
    sm->sit_blk_cnt = (sm->main_segs + SIT_ENTRY_PER_BLOCK - 1) / SIT_ENTRY_PER_BLOCK;
    sm->ssa_blkaddr = le32(sb->ssa_blkaddr);
    sm->sit_bitmap_bytes = sm->sit_copy_blocks / 8;
    sm->elapsed_base = le64(cp->elapsed_time);
    sm->mono_base = (clock_mono_ns() / NS_PER_SEC);

    int err;
    if (sm->main_segs == 0 || sm->sit_blk_cnt > sm->sit_copy_blocks ||
        le32(cp->sit_ver_bitmap_bytesize) != sm->sit_bitmap_bytes ||
        offsetof(struct f2fs_checkpoint, sit_nat_version_bitmap) + sm->sit_bitmap_bytes >
            le32(cp->checksum_offset) ||
        le32(sb->segment_count_ssa) * BLKS < sm->main_segs) {
        err = fs_corrupt(fs,
                         "SIT/SSA geometry: %u main segments, %u SIT blocks per copy, "
                         "SIT bitmap of %u bytes",
                         sm->main_segs, sm->sit_copy_blocks, le32(cp->sit_ver_bitmap_bytesize));
        goto fail;
    }

    size_t seg_words = (sm->main_segs + 63) / 64;
    size_t sit_words = (sm->sit_blk_cnt + 63) / 64;
    err = -ENOMEM;
    sm->se = calloc(sm->main_segs, sizeof(*sm->se));
    sm->free_map = calloc(seg_words, sizeof(uint64_t));
    sm->prefree_map = calloc(seg_words, sizeof(uint64_t));
    sm->changed_map = calloc(seg_words, sizeof(uint64_t));
    sm->hold_map = calloc(seg_words, sizeof(uint64_t));
    sm->gc_busy_map = calloc(seg_words, sizeof(uint64_t));
    sm->gc_skip_map = calloc(seg_words, sizeof(uint64_t));
    sm->sit_dirty = calloc(sit_words, sizeof(uint64_t));
    sm->committed_bitmap = malloc(sm->sit_bitmap_bytes);
    sm->sit_bitmap = malloc(sm->sit_bitmap_bytes);
    sm->sum_mem = blk_alloc_buf((size_t)LOG_COUNT * F2FS_BLKSIZE);
    if (!sm->se || !sm->free_map || !sm->prefree_map || !sm->changed_map || !sm->sit_dirty ||
        !sm->hold_map || !sm->gc_busy_map || !sm->gc_skip_map || !sm->committed_bitmap ||
        !sm->sit_bitmap || !sm->sum_mem)
        goto fail;
    memset(sm->sum_mem, 0, (size_t)LOG_COUNT * F2FS_BLKSIZE);
    for (int t = 0; t < LOG_COUNT; t++)
        sm->logs[t].sum = (void *)((uint8_t *)sm->sum_mem + (size_t)t * F2FS_BLKSIZE);
    memcpy(sm->committed_bitmap, cp->sit_nat_version_bitmap, sm->sit_bitmap_bytes);
    memcpy(sm->sit_bitmap, cp->sit_nat_version_bitmap, sm->sit_bitmap_bytes);
    for (uint32_t s = 0; s < sm->main_segs; s++)
        sm->se[s].log = NO_LOG;

    err = load_sit_blocks(sm);
    if (!err)
        err = load_logs(sm);
    if (!err)
        err = load_summaries(sm);
    if (!err)
        err = check_loaded(sm);
    if (err)
        goto fail;

    for (int t = 0; t < LOG_COUNT; t++) {
        struct seg_entry *e = &sm->se[sm->logs[t].segno];
        e->log = (int8_t)t;
        if (e->type != t) {
            e->type = (uint8_t)t;
            seg_mark_dirty(sm, sm->logs[t].segno);
        }
    }
    for (uint32_t s = 0; s < sm->main_segs; s++) {
        struct seg_entry *e = &sm->se[s];
        memcpy(e->ckpt_map, e->map, SIT_VBLOCK_MAP_SIZE);
        e->ckpt_valid = e->valid;
        seg_update_state(sm, s);
    }
    *out = sm;
    return 0;
fail:
    seg_destroy(sm);
    return err;
}

/* ---- allocation ------------------------------------------------------------------------ */

/* Leaves the current segment of log t for a free one, writing the old one's summary. */
static int log_move(struct seg_manager *sm, enum log_type t)
{
    bool ssr;
    uint32_t newseg = pick_new_segment(sm, t, &ssr);
    if (newseg == UINT32_MAX) {
        sm->st_enospc++;
        return -ENOSPC;
    }
    int err = write_ssa(sm, t);
    if (err)
        return err;
    return log_switch(sm, t, newseg, ssr);
}

static void invalidate_locked(struct seg_manager *sm, uint32_t blkaddr);

/* seg_alloc_block with sm->lock held, without telling discard. */
static int alloc_locked(struct seg_manager *sm, enum log_type type, const struct f2fs_summary *sum,
                        uint32_t replaces, uint32_t *blkaddr)
{
    struct log_state *lg = &sm->logs[type];
    int err = 0;
    if (lg->must_move) {
        err = log_move(sm, type);
        if (err)
            goto out;
    }
    uint32_t segno = lg->segno;
    unsigned off = lg->next_blkoff;
    struct seg_entry *e = &sm->se[segno];
    if (f2fs_test_bit(off, e->map) || f2fs_test_bit(off, e->ckpt_map)) {
        err = fs_corrupt(sm->fs, "log %d: next block %u of segment %u is not free", type, off,
                         segno);
        goto out;
    }
    unsigned next = next_slot(lg, e, (int)off);
    bool last = next >= BLKS, ssr = false;
    uint32_t newseg = UINT32_MAX;
    if (last) {
        /* the log must be able to move on: a checkpoint never records a full segment */
        newseg = pick_new_segment(sm, type, &ssr);
        if (newseg == UINT32_MAX) {
            sm->st_enospc++;
            err = -ENOSPC;
            goto out;
        }
    }
    lg->sum->entries[off] = *sum;
    if (last) {
        err = write_ssa(sm, type);
        if (err) {
            memset(&lg->sum->entries[off], 0, sizeof(struct f2fs_summary));
            goto out;
        }
    }
    f2fs_set_bit(off, e->map);
    e->valid++;
    e->mtime = seg_now(sm);
    sm->valid_blocks++;
    seg_mark_dirty(sm, segno);
    bm_set(sm->changed_map, segno);
    lg->next_blkoff = (uint16_t)next;
    sm->st_alloc[type]++;
    *blkaddr = sm->main_blkaddr + segno * BLKS + off;
    if (replaces == NEW_ADDR)
        sm->reserved_blocks--;
    else if (replaces != NULL_ADDR)
        invalidate_locked(sm, replaces);
    if (last && log_switch(sm, type, newseg, ssr)) {
        /* the summary of the SSR segment is unreadable: a free segment, or stop here */
        lg->must_move = true;
    }
out:
    return err;
}

int seg_alloc_block(struct seg_manager *sm, enum log_type type, const struct f2fs_summary *sum,
                    uint32_t replaces, uint32_t *blkaddr)
{
    if ((unsigned)type >= LOG_COUNT || !sum || !blkaddr)
        return -EINVAL;
    pthread_mutex_lock(&sm->lock);
    int err = alloc_locked(sm, type, sum, replaces, blkaddr);
    pthread_mutex_unlock(&sm->lock);
    /* discard.c: a queued or running discard of this block must not land on the data about
     * to be written into it, and the block leaves the map of discarded space. */
    if (!err)
        discard_block_allocated(sm->fs, *blkaddr);
    return err;
}

int seg_alloc_blocks(struct seg_manager *sm, enum log_type type, const struct f2fs_summary *sums,
                     unsigned n, uint32_t *blkaddrs)
{
    if ((unsigned)type >= LOG_COUNT || (n && (!sums || !blkaddrs)))
        return -EINVAL;
    pthread_mutex_lock(&sm->lock);
    int err = 0;
    unsigned i = 0;
    for (; i < n && !err; i++)
        err = alloc_locked(sm, type, &sums[i], NULL_ADDR, &blkaddrs[i]);
    if (err) /* the last call failed and took nothing; the others are given back */
        for (i--; i-- > 0;)
            invalidate_locked(sm, blkaddrs[i]);
    pthread_mutex_unlock(&sm->lock);
    for (unsigned k = 0; !err && k < n; k++)
        discard_block_allocated(sm->fs, blkaddrs[k]);
    return err;
}

/* seg_invalidate_block with sm->lock held. */
static void invalidate_locked(struct seg_manager *sm, uint32_t blkaddr)
{
    uint64_t rel = (uint64_t)blkaddr - sm->main_blkaddr;
    if (blkaddr < sm->main_blkaddr || rel >= (uint64_t)sm->main_segs * BLKS) {
        fs_corrupt(sm->fs, "invalidating block %u outside the main area", blkaddr);
        return;
    }
    uint32_t segno = (uint32_t)(rel / BLKS);
    unsigned off = (unsigned)(rel % BLKS);
    struct seg_entry *e = &sm->se[segno];
    if (!f2fs_test_bit(off, e->map)) {
        fs_corrupt(sm->fs, "invalidating block %u, which is not in use", blkaddr);
        return;
    }
    f2fs_clear_bit(off, e->map);
    e->valid--;
    sm->valid_blocks--;
    bm_clear(sm->gc_skip_map, segno); /* it changed: GC may try it again */
    seg_mark_dirty(sm, segno);
    bm_set(sm->changed_map, segno);
    seg_update_state(sm, segno);
}

void seg_invalidate_block(struct seg_manager *sm, uint32_t blkaddr)
{
    if (blkaddr == NULL_ADDR || blkaddr == NEW_ADDR)
        return;
    pthread_mutex_lock(&sm->lock);
    invalidate_locked(sm, blkaddr);
    pthread_mutex_unlock(&sm->lock);
}

void seg_invalidate_to_reserved(struct seg_manager *sm, uint32_t blkaddr)
{
    pthread_mutex_lock(&sm->lock);
    invalidate_locked(sm, blkaddr);
    sm->reserved_blocks++;
    pthread_mutex_unlock(&sm->lock);
}

void seg_reserve(struct seg_manager *sm, int64_t blocks)
{
    pthread_mutex_lock(&sm->lock);
    sm->reserved_blocks += blocks;
    pthread_mutex_unlock(&sm->lock);
}

uint64_t seg_used_blocks(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    uint64_t n = sm->valid_blocks + (sm->reserved_blocks > 0 ? (uint64_t)sm->reserved_blocks : 0);
    pthread_mutex_unlock(&sm->lock);
    return n;
}

bool seg_block_valid(struct seg_manager *sm, uint32_t blkaddr)
{
    bool valid = false;
    pthread_mutex_lock(&sm->lock);
    uint64_t rel = (uint64_t)blkaddr - sm->main_blkaddr;
    if (blkaddr >= sm->main_blkaddr && rel < (uint64_t)sm->main_segs * BLKS)
        valid = f2fs_test_bit((unsigned)(rel % BLKS), sm->se[rel / BLKS].map);
    pthread_mutex_unlock(&sm->lock);
    return valid;
}

uint32_t seg_next_blkaddr(struct seg_manager *sm, enum log_type type)
{
    pthread_mutex_lock(&sm->lock);
    const struct log_state *lg = &sm->logs[type];
    uint32_t addr = lg->must_move ? 0 : sm->main_blkaddr + lg->segno * BLKS + lg->next_blkoff;
    pthread_mutex_unlock(&sm->lock);
    return addr;
}

int seg_new_segments(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    int err = 0;
    for (int t = 0; t < LOG_COUNT && !err; t++)
        err = log_move(sm, (enum log_type)t);
    pthread_mutex_unlock(&sm->lock);
    return err;
}

void seg_hold(struct seg_manager *sm, uint32_t blkaddr)
{
    pthread_mutex_lock(&sm->lock);
    uint64_t rel = (uint64_t)blkaddr - sm->main_blkaddr;
    if (blkaddr >= sm->main_blkaddr && rel < (uint64_t)sm->main_segs * BLKS)
        bm_set(sm->hold_map, (uint32_t)(rel / BLKS));
    pthread_mutex_unlock(&sm->lock);
}

void seg_release_holds(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    memset(sm->hold_map, 0, (sm->main_segs + 63) / 64 * sizeof(uint64_t));
    pthread_mutex_unlock(&sm->lock);
}

uint64_t seg_valid_blocks(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    uint64_t n = sm->valid_blocks;
    pthread_mutex_unlock(&sm->lock);
    return n;
}

uint32_t seg_free_segments(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    uint32_t n = sm->free_segs;
    pthread_mutex_unlock(&sm->lock);
    return n;
}

/* Blocks allocated so far by the data logs ([0]) and the node logs ([1]). */
static void alloc_totals(const struct seg_manager *sm, uint64_t out[2])
{
    out[0] = out[1] = 0;
    for (int t = 0; t < LOG_COUNT; t++)
        out[log_is_node((enum log_type)t)] += sm->st_alloc[t];
}

bool seg_room_for_roll_forward(struct seg_manager *sm, uint32_t more_nodes)
{
    pthread_mutex_lock(&sm->lock);
    uint64_t now[2];
    alloc_totals(sm, now);
    uint64_t data = now[0] - sm->alloc_at_cp[0];
    uint64_t nodes = now[1] - sm->alloc_at_cp[1] + more_nodes;
    /* Recovery copies at most every data block written since the checkpoint and writes
     * for each chain node at most itself, a parent's inode, dnode and dentry block; every
     * log first moves to a fresh segment and may leave its last one part-filled, and data
     * logs leave data_reserve segments to the node logs. */
    uint64_t need = 2 * LOG_COUNT + sm->data_reserve + (data + 4 * nodes + BLKS - 1) / BLKS;
    bool room = sm->free_segs >= need;
    pthread_mutex_unlock(&sm->lock);
    return room;
}

uint32_t seg_prefree_segments(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    uint32_t n = sm->prefree_segs;
    pthread_mutex_unlock(&sm->lock);
    return n;
}

void seg_set_data_reserve(struct seg_manager *sm, uint32_t segs)
{
    pthread_mutex_lock(&sm->lock);
    sm->data_reserve = segs;
    pthread_mutex_unlock(&sm->lock);
}

/* ---- checkpoint ------------------------------------------------------------------------ */

int seg_flush_sit(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    int err = -ENOMEM;
    uint32_t *addrs = malloc(sizeof(*addrs) * IO_BATCH);
    uint32_t *blks = malloc(sizeof(*blks) * IO_BATCH);
    uint8_t *buf = blk_alloc_buf((size_t)IO_BATCH * F2FS_BLKSIZE);
    if (!addrs || !blks || !buf)
        goto out;
    uint32_t b = bm_next(sm->sit_dirty, sm->sit_blk_cnt, 0);
    while (b < sm->sit_blk_cnt) {
        unsigned m = 0;
        for (; b < sm->sit_blk_cnt && m < IO_BATCH;
             b = bm_next(sm->sit_dirty, sm->sit_blk_cnt, b + 1)) {
            uint8_t *blk = buf + (size_t)m * F2FS_BLKSIZE;
            memset(blk, 0, F2FS_BLKSIZE);
            struct f2fs_sit_entry *ents = (void *)blk;
            for (unsigned j = 0; j < SIT_ENTRY_PER_BLOCK; j++) {
                uint32_t s = b * SIT_ENTRY_PER_BLOCK + j;
                if (s >= sm->main_segs)
                    break;
                entry_to_raw(&sm->se[s], &ents[j]);
            }
            bool alt = !f2fs_test_bit(b, sm->committed_bitmap);
            addrs[m] = sm->sit_blkaddr + b + (alt ? sm->sit_copy_blocks : 0);
            blks[m] = b;
            m++;
        }
        err = io_blocks(sm, BLK_WRITE, addrs, buf, m);
        if (err) {
            log_err("writing SIT blocks failed: %s", strerror(-err));
            goto out;
        }
        for (unsigned i = 0; i < m; i++) {
            if (f2fs_test_bit(blks[i], sm->committed_bitmap))
                f2fs_clear_bit(blks[i], sm->sit_bitmap);
            else
                f2fs_set_bit(blks[i], sm->sit_bitmap);
            bm_clear(sm->sit_dirty, blks[i]);
        }
        sm->st_sit_writes += m;
    }
    err = 0;
out:
    pthread_mutex_unlock(&sm->lock);
    free(addrs);
    free(blks);
    free(buf);
    return err;
}

void seg_fill_checkpoint(struct seg_manager *sm, struct f2fs_checkpoint *cp)
{
    pthread_mutex_lock(&sm->lock);
    for (int i = 0; i < MAX_ACTIVE_NODE_LOGS; i++) {
        /* unused slots as mkfs.f2fs writes them */
        cp->cur_node_segno[i] = htole32(0xFFFFFFFFu);
        cp->cur_node_blkoff[i] = 0;
        cp->cur_data_segno[i] = htole32(0xFFFFFFFFu);
        cp->cur_data_blkoff[i] = 0;
    }
    memset(cp->alloc_type, 0, sizeof(cp->alloc_type));
    for (int t = 0; t < LOG_COUNT; t++) {
        const struct log_state *lg = &sm->logs[t];
        if (log_is_node((enum log_type)t)) {
            cp->cur_node_segno[t - LOG_HOT_NODE] = htole32(lg->segno);
            cp->cur_node_blkoff[t - LOG_HOT_NODE] = htole16(lg->next_blkoff);
        } else {
            cp->cur_data_segno[t] = htole32(lg->segno);
            cp->cur_data_blkoff[t] = htole16(lg->next_blkoff);
        }
        cp->alloc_type[t] = lg->alloc_type;
    }
    alloc_totals(sm, sm->alloc_at_fill);
    /* Once this checkpoint commits, prefree segments are free: count them (fsck counts
     * every non-current segment without valid blocks). */
    cp->free_segment_count = htole32(sm->free_segs + sm->prefree_segs);
    cp->sit_ver_bitmap_bytesize = htole32(sm->sit_bitmap_bytes);
    cp->elapsed_time = htole64(seg_now(sm));
    memcpy(cp->sit_nat_version_bitmap, sm->sit_bitmap, sm->sit_bitmap_bytes);
    pthread_mutex_unlock(&sm->lock);
}

void seg_write_summaries(struct seg_manager *sm, uint8_t *blocks, bool with_node)
{
    pthread_mutex_lock(&sm->lock);
    int n = with_node ? LOG_COUNT : LOG_HOT_NODE;
    for (int t = 0; t < n; t++) {
        struct f2fs_summary_block *out = (void *)(blocks + (size_t)t * F2FS_BLKSIZE);
        memcpy(out->entries, sm->logs[t].sum->entries, sizeof(out->entries));
        summary_footer_set(out, (enum log_type)t);
    }
    pthread_mutex_unlock(&sm->lock);
}

void seg_checkpoint_done(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    for (uint32_t s = bm_next(sm->changed_map, sm->main_segs, 0); s < sm->main_segs;
         s = bm_next(sm->changed_map, sm->main_segs, s + 1)) {
        struct seg_entry *e = &sm->se[s];
        memcpy(e->ckpt_map, e->map, SIT_VBLOCK_MAP_SIZE);
        e->ckpt_valid = e->valid;
        bm_clear(sm->changed_map, s);
        seg_update_state(sm, s); /* prefree → free */
    }
    memcpy(sm->committed_bitmap, sm->sit_bitmap, sm->sit_bitmap_bytes);
    memcpy(sm->alloc_at_cp, sm->alloc_at_fill, sizeof(sm->alloc_at_cp));
    pthread_mutex_unlock(&sm->lock);
}

/* ---- discard support (discard.c) ------------------------------------------------------- */

/* Reports the runs of set bits of a segment-sized map (MSB-first, as the SIT's). */
static uint64_t report_runs(struct seg_manager *sm, uint32_t segno, const uint8_t *bits,
                            seg_range_fn fn, void *arg)
{
    uint32_t base = sm->main_blkaddr + segno * BLKS;
    uint64_t n = 0;
    unsigned off = 0;
    while (off < BLKS) {
        if ((off & 7) == 0 && bits[off >> 3] == 0) {
            off += 8;
            continue;
        }
        if (!f2fs_test_bit(off, bits)) {
            off++;
            continue;
        }
        unsigned end = off + 1;
        while (end < BLKS) {
            if ((end & 7) == 0 && bits[end >> 3] == 0xFF)
                end += 8;
            else if (f2fs_test_bit(end, bits))
                end++;
            else
                break;
        }
        fn(arg, base + off, end - off);
        n += end - off;
        off = end;
    }
    return n;
}

uint64_t seg_discard_candidates(struct seg_manager *sm, seg_range_fn fn, void *arg)
{
    uint64_t total = 0;
    uint8_t freed[SIT_VBLOCK_MAP_SIZE];
    pthread_mutex_lock(&sm->lock);
    for (uint32_t s = bm_next(sm->changed_map, sm->main_segs, 0); s < sm->main_segs;
         s = bm_next(sm->changed_map, sm->main_segs, s + 1)) {
        const struct seg_entry *e = &sm->se[s];
        /* An empty segment no log writes into is garbage once this checkpoint commits,
         * including what was written and freed again since the last one. */
        bool whole = e->valid == 0 && e->log == NO_LOG;
        for (unsigned i = 0; i < SIT_VBLOCK_MAP_SIZE; i++)
            freed[i] = whole ? 0xFF : (uint8_t)(e->ckpt_map[i] & ~e->map[i]);
        total += report_runs(sm, s, freed, fn, arg);
    }
    pthread_mutex_unlock(&sm->lock);
    return total;
}

/* The extent being built by seg_free_extents: reported once a run that does not continue it
 * arrives (or at the end), so extents are maximal across segment boundaries. */
struct extent_acc {
    uint32_t start, len, minlen;
    uint64_t total;
    seg_range_fn fn;
    void *arg;
};

static void extent_flush(struct extent_acc *x)
{
    if (x->len && x->len >= x->minlen) {
        x->fn(x->arg, x->start, x->len);
        x->total += x->len;
    }
    x->len = 0;
}

static void extent_run_cb(void *arg, uint32_t blkaddr, uint32_t len)
{
    struct extent_acc *x = arg;
    if (x->len && x->start + x->len == blkaddr) {
        x->len += len;
        return;
    }
    extent_flush(x);
    x->start = blkaddr;
    x->len = len;
}

uint64_t seg_free_extents(struct seg_manager *sm, uint32_t start, uint32_t end, uint32_t minlen,
                          seg_range_fn fn, void *arg)
{
    uint64_t main_end = sm->main_blkaddr + (uint64_t)sm->main_segs * BLKS;
    if (start < sm->main_blkaddr)
        start = sm->main_blkaddr;
    if (end > main_end)
        end = (uint32_t)main_end;
    if (start >= end)
        return 0;
    struct extent_acc x = {.minlen = minlen ? minlen : 1, .fn = fn, .arg = arg};
    uint8_t free_bits[SIT_VBLOCK_MAP_SIZE];
    pthread_mutex_lock(&sm->lock);
    uint32_t first = (start - sm->main_blkaddr) / BLKS, last = (end - 1 - sm->main_blkaddr) / BLKS;
    for (uint32_t s = first; s <= last; s++) {
        const struct seg_entry *e = &sm->se[s];
        uint32_t base = sm->main_blkaddr + s * BLKS;
        unsigned lo = start > base ? start - base : 0;
        unsigned hi = end - base < BLKS ? end - base : BLKS;
        if (bm_test(sm->changed_map, s))
            continue; /* the next run cannot continue the open extent: it ends there */
        if (e->valid == 0 && e->ckpt_valid == 0 && lo == 0 && hi == BLKS) {
            extent_run_cb(&x, base, BLKS);
            continue;
        }
        for (unsigned i = 0; i < SIT_VBLOCK_MAP_SIZE; i++)
            free_bits[i] = (uint8_t) ~(e->map[i] | e->ckpt_map[i]);
        for (unsigned b = 0; b < lo; b++)
            f2fs_clear_bit(b, free_bits);
        for (unsigned b = hi; b < BLKS; b++)
            f2fs_clear_bit(b, free_bits);
        report_runs(sm, s, free_bits, extent_run_cb, &x);
    }
    extent_flush(&x);
    pthread_mutex_unlock(&sm->lock);
    return x.total;
}

void seg_emit_stats(struct seg_manager *sm, stat_emit_fn emit, void *sink)
{
    static const char *const names[LOG_COUNT] = {"seg.alloc.hot_data",  "seg.alloc.warm_data",
                                                 "seg.alloc.cold_data", "seg.alloc.hot_node",
                                                 "seg.alloc.warm_node", "seg.alloc.cold_node"};
    pthread_mutex_lock(&sm->lock);
    uint64_t v[] = {sm->free_segs,     sm->prefree_segs,    sm->valid_blocks, sm->st_ssa_writes,
                    sm->st_sit_writes, sm->st_new_segments, sm->st_enospc};
    uint64_t ssr = sm->st_ssr_segments;
    int64_t reserved = sm->reserved_blocks;
    uint64_t alloc[LOG_COUNT];
    memcpy(alloc, sm->st_alloc, sizeof(alloc));
    pthread_mutex_unlock(&sm->lock);
    emit(sink, "seg.free", v[0]);
    emit(sink, "seg.prefree", v[1]);
    emit(sink, "seg.valid_blocks", v[2]);
    for (int t = 0; t < LOG_COUNT; t++)
        emit(sink, names[t], alloc[t]);
    emit(sink, "seg.ssa_writes", v[3]);
    emit(sink, "seg.sit_blocks_written", v[4]);
    emit(sink, "seg.new_segments", v[5]);
    emit(sink, "seg.enospc", v[6]);
    emit(sink, "seg.ssr_segments", ssr);
    emit(sink, "seg.reserved_blocks", reserved > 0 ? (uint64_t)reserved : 0);
}

/* ---- segment cleaning support (gc.c) --------------------------------------------------- */

/* A segment GC may take as a victim: written, not full, no log in it, not held by recovery,
 * not being cleaned, not known to be uncleanable. */
static bool gc_candidate(const struct seg_manager *sm, uint32_t s)
{
    const struct seg_entry *e = &sm->se[s];
    return e->log == NO_LOG && e->valid > 0 && e->valid < BLKS && !bm_test(sm->hold_map, s) &&
           !bm_test(sm->gc_busy_map, s) && !bm_test(sm->gc_skip_map, s);
}

uint32_t seg_gc_pick(struct seg_manager *sm, enum gc_policy policy, uint32_t max_valid,
                     struct seg_gc_victim *v)
{
    pthread_mutex_lock(&sm->lock);
    uint64_t min_mtime = UINT64_MAX, max_mtime = 0;
    if (policy == GC_COST_BENEFIT) {
        for (uint32_t s = 0; s < sm->main_segs; s++) {
            if (!gc_candidate(sm, s))
                continue;
            if (sm->se[s].mtime < min_mtime)
                min_mtime = sm->se[s].mtime;
            if (sm->se[s].mtime > max_mtime)
                max_mtime = sm->se[s].mtime;
        }
    }
    uint32_t best = UINT32_MAX;
    uint64_t best_cost = UINT64_MAX;
    for (uint32_t s = 0; s < sm->main_segs; s++) {
        const struct seg_entry *e = &sm->se[s];
        if (!gc_candidate(sm, s) || e->valid > max_valid)
            continue;
        uint64_t cost;
        if (policy == GC_GREEDY) {
            cost = e->valid;
        } else {
            /* The kernel's get_cb_cost: utilization u and age (0 = youngest, 100 = oldest)
             * in percent; the benefit (1-u)/(1+u) * age is largest for old, empty segments. */
            uint64_t u = (uint64_t)e->valid * 100 / BLKS;
            uint64_t age = max_mtime > min_mtime
                               ? 100 - 100 * (e->mtime - min_mtime) / (max_mtime - min_mtime)
                               : 0;
            cost = UINT32_MAX - 100 * (100 - u) * age / (100 + u);
        }
        if (cost < best_cost) {
            best_cost = cost;
            best = s;
        }
    }
    if (best != UINT32_MAX && v) {
        const struct seg_entry *e = &sm->se[best];
        v->segno = best;
        v->valid = e->valid;
        v->type = e->type;
        v->mtime = e->mtime;
        memcpy(v->map, e->map, SIT_VBLOCK_MAP_SIZE);
        bm_set(sm->gc_busy_map, best);
    }
    pthread_mutex_unlock(&sm->lock);
    return best;
}

bool seg_gc_done(struct seg_manager *sm, uint32_t segno, bool skip)
{
    pthread_mutex_lock(&sm->lock);
    bool empty = segno < sm->main_segs && sm->se[segno].valid == 0;
    if (segno < sm->main_segs) {
        bm_clear(sm->gc_busy_map, segno);
        if (!empty && skip)
            bm_set(sm->gc_skip_map, segno);
    }
    pthread_mutex_unlock(&sm->lock);
    return empty;
}

int seg_read_ssa(struct seg_manager *sm, uint32_t segno, enum blk_prio prio,
                 struct f2fs_summary_block *out)
{
    if (segno >= sm->main_segs)
        return -EINVAL;
    struct blk_req req = {.op = BLK_READ,
                          .prio = prio,
                          .off = (uint64_t)(sm->ssa_blkaddr + segno) * F2FS_BLKSIZE,
                          .len = F2FS_BLKSIZE,
                          .buf = out};
    struct blk_req *r = &req;
    return blk_submit_wait(sm->fs->dev, &r, 1);
}

uint32_t seg_block_addr(struct seg_manager *sm, uint32_t segno, unsigned off)
{
    return sm->main_blkaddr + segno * BLKS + off;
}

uint32_t seg_main_segments(struct seg_manager *sm)
{
    return sm->main_segs;
}

uint64_t seg_blocks_allocated(struct seg_manager *sm)
{
    pthread_mutex_lock(&sm->lock);
    uint64_t n = 0;
    for (int t = 0; t < LOG_COUNT; t++)
        n += sm->st_alloc[t];
    pthread_mutex_unlock(&sm->lock);
    return n;
}

/* ---- slack space reuse ------------------------------------------------------------------ */

void seg_set_ssr_threshold(struct seg_manager *sm, uint32_t segs)
{
    pthread_mutex_lock(&sm->lock);
    sm->ssr_threshold = segs;
    pthread_mutex_unlock(&sm->lock);
}

uint64_t seg_ssr_blocks(struct seg_manager *sm)
{
    uint64_t n = 0;
    pthread_mutex_lock(&sm->lock);
    for (uint32_t s = 0; s < sm->main_segs; s++)
        if (ssr_candidate(sm, s))
            n += BLKS - sm->se[s].valid;
    /* and what is left in the data logs' current SSR segments */
    for (int t = LOG_HOT_DATA; t <= LOG_COLD_DATA; t++) {
        const struct log_state *lg = &sm->logs[t];
        if (lg->alloc_type != ALLOC_SSR || lg->must_move)
            continue;
        const struct seg_entry *e = &sm->se[lg->segno];
        for (unsigned i = lg->next_blkoff; i < BLKS; i++)
            n += !f2fs_test_bit(i, e->map) && !f2fs_test_bit(i, e->ckpt_map);
    }
    pthread_mutex_unlock(&sm->lock);
    return n;
}

/* ---- usage summary (f2fuse info) ------------------------------------------------------- */

void seg_usage(struct seg_manager *sm, struct seg_log_usage usage[LOG_COUNT], uint32_t *empty)
{
    memset(usage, 0, sizeof(*usage) * LOG_COUNT);
    *empty = 0;
    pthread_mutex_lock(&sm->lock);
    for (uint32_t s = 0; s < sm->main_segs; s++) {
        const struct seg_entry *e = &sm->se[s];
        if (!e->valid) {
            (*empty)++;
            continue;
        }
        usage[e->type].segments++;
        usage[e->type].valid_blocks += e->valid;
    }
    for (int t = 0; t < LOG_COUNT; t++) {
        usage[t].cur_segno = sm->logs[t].segno;
        usage[t].cur_blkoff = sm->logs[t].next_blkoff;
    }
    pthread_mutex_unlock(&sm->lock);
}
