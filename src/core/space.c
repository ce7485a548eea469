/* The space policy: what a write operation may allocate, and what has to happen first. */
#include <errno.h>

#include "core/space.h"
#include "core/context.h"
#include "core/gc.h"
#include "core/segment.h"
#include "util/clock.h"

/* Blocks that writing back what is dirty now could take, with room for the nodes that
 * writeback itself dirties. */
uint64_t space_pending_blocks(struct f2fuse *fs)
{
    uint64_t data = pcache_dirty_count(fs->cache, PAGE_DATA);
    uint64_t nodes = pcache_dirty_count(fs->cache, PAGE_NODE);
    return data + nodes + data / ADDRS_PER_BLOCK + 16;
}

/* The user-visible space in use: an overwrite of a written block takes none (its old block
 * is freed by the writeback that allocates the new one); a reserved (NEW_ADDR) block does.
 * segment.c counts both under one lock: read apart, a flusher turning reservations into
 * valid blocks in between made a near-full file system report a false ENOSPC. */
uint64_t space_used_blocks(struct f2fuse *fs)
{
    return seg_used_blocks(fs->seg);
}

/* Segments kept back from the space check: the three node logs and the hot data log may
 * each need a fresh segment during one checkpoint (SPACE_LOG_RESERVED_SEGMENTS), and GC needs
 * free segments to move valid blocks into (gc_reserved_segments). */
bool space_room_for(struct f2fuse *fs, uint64_t blocks, bool *logical)
{
    uint64_t need = space_pending_blocks(fs) + blocks;
    uint64_t user = le64(fs->cp->user_block_count);
    *logical = space_used_blocks(fs) + blocks <= user;
    uint32_t free_segs = seg_free_segments(fs->seg);
    uint32_t gc_segs = gc_reserved_segments(fs);
    uint32_t reserved = SPACE_LOG_RESERVED_SEGMENTS + gc_segs;
    uint64_t writable = free_segs > reserved
                            ? (uint64_t)(free_segs - reserved) * F2FS_BLOCKS_PER_SEG
                            : 0;
    if (!*logical || need <= writable || !fs->opts.gc_ssr)
        return *logical && need <= writable;
    /* Slack space reuse (segment.c): below the reserve, data fills the free slots of other
     * data segments; nodes still need free segments, and may take half of GC's reserve.
     * Once the reserve is touched, GC runs first. */
    uint64_t data = pcache_dirty_count(fs->cache, PAGE_DATA) + blocks;
    uint64_t nodes = need > data ? need - data : 0;
    return free_segs >= reserved && nodes <= (uint64_t)gc_segs * F2FS_BLOCKS_PER_SEG / 2 &&
           data <= writable + seg_ssr_blocks(fs->seg);
}

bool space_room_for_roll_forward(struct f2fuse *fs, uint32_t more_nodes)
{
    return seg_room_for_roll_forward(fs->seg, more_nodes);
}

/* Foreground rounds without progress (no segment freed) before ENOSPC. */
#define STUCK_ROUNDS 3

/* The space check failed with the user-visible space available: free segments are short.
 * A checkpoint comes first (it writes back what is dirty and turns prefree segments free),
 * then GC rounds until blocks fit, or ENOSPC once GC makes no progress. */
static int make_room(struct f2fuse *fs, uint64_t blocks)
{
    bool logical;
    if (!fs->gc) { /* no GC (cannot happen on a read-write mount): a checkpoint is all we have */
        int err = checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
        if (err)
            return err;
        return space_room_for(fs, blocks, &logical) ? 0 : -ENOSPC;
    }
    uint64_t start = clock_mono_ns();
    gc_foreground_begin(fs);
    int err = 0;
    unsigned stuck = 0;
    bool synced = false;
    while (!space_room_for(fs, blocks, &logical)) {
        if (!logical) {
            err = -ENOSPC;
            break;
        }
        if (!synced && (seg_prefree_segments(fs->seg) || pcache_dirty_count(fs->cache, PAGE_DATA) ||
                        pcache_dirty_count(fs->cache, PAGE_NODE))) {
            synced = true;
            err = checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
            if (err)
                break;
            continue;
        }
        synced = true;
        uint32_t before = seg_free_segments(fs->seg);
        err = gc_foreground_round(fs);
        if (err)
            break;
        stuck = seg_free_segments(fs->seg) > before ? 0 : stuck + 1;
        if (stuck >= STUCK_ROUNDS) {
            err = -ENOSPC;
            break;
        }
    }
    gc_foreground_end(fs, err, clock_mono_ns() - start);
    return err;
}

int space_reserve(struct f2fuse *fs, uint64_t blocks)
{
    bool logical;
    gc_note_activity(fs); /* gc.c: the background thread waits for idleness */
    if (space_room_for(fs, blocks, &logical))
        return 0;
    if (!logical)
        return -ENOSPC;
    /* Out-of-place writes need free segments: a checkpoint writes back what is dirty and
     * turns the segments it emptied into free ones, and GC (gc.c) cleans victims. */
    return make_room(fs, blocks);
}

void space_after_change(struct f2fuse *fs)
{
    if (pcache_over_budget(fs->cache))
        checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
}
