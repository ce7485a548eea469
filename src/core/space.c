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
static bool segments_room_for(struct f2fuse *fs, uint64_t blocks)
{
    uint64_t need = space_pending_blocks(fs) + blocks;
    uint32_t free_segs = seg_free_segments(fs->seg);
    uint32_t gc_segs = gc_reserved_segments(fs);
    uint32_t reserved = SPACE_LOG_RESERVED_SEGMENTS + gc_segs;
    uint64_t writable = free_segs > reserved
                            ? (uint64_t)(free_segs - reserved) * F2FS_BLOCKS_PER_SEG
                            : 0;
    if (need <= writable || !fs->opts.gc_ssr)
        return need <= writable;
    /* Slack space reuse (segment.c): below the reserve, data fills the free slots of other
     * data segments; nodes still need free segments, and may take half of GC's reserve.
     * Once the reserve is touched, GC runs first. */
    uint64_t data = pcache_dirty_count(fs->cache, PAGE_DATA) + blocks;
    uint64_t nodes = need > data ? need - data : 0;
    return free_segs >= reserved && nodes <= (uint64_t)gc_segs * F2FS_BLOCKS_PER_SEG / 2 &&
           data <= writable + seg_ssr_blocks(fs->seg);
}

/* Used plus claimed, read together: a claim turning into reservations between two
 * separate reads would be missed or counted twice. */
static uint64_t used_and_claimed(struct f2fuse *fs)
{
    pthread_mutex_lock(&fs->space.lock);
    uint64_t n = space_used_blocks(fs) + fs->space.claimed;
    pthread_mutex_unlock(&fs->space.lock);
    return n;
}

bool space_room_for(struct f2fuse *fs, uint64_t blocks, bool claimed, bool *logical)
{
    uint64_t user = le64(fs->cp->user_block_count);
    *logical = used_and_claimed(fs) + (claimed ? 0 : blocks) <= user;
    return *logical && segments_room_for(fs, blocks);
}

bool space_room_for_roll_forward(struct f2fuse *fs, uint32_t more_nodes)
{
    return seg_room_for_roll_forward(fs->seg, more_nodes);
}

/* What make_room asks of the user-visible space while it works. */
enum room_kind {
    ROOM_UNCLAIMED, /* blocks more must fit besides what is used and claimed */
    ROOM_CLAIMED,   /* blocks are claimed already: used and claimed must fit */
    ROOM_TO_FREE,   /* nothing: the operation frees space; only segments count */
};

static bool room_for(struct f2fuse *fs, uint64_t blocks, enum room_kind kind, bool *logical)
{
    if (kind == ROOM_TO_FREE) {
        *logical = true;
        return segments_room_for(fs, blocks);
    }
    return space_room_for(fs, blocks, kind == ROOM_CLAIMED, logical);
}

/* Foreground rounds without progress (no segment freed) before ENOSPC. */
#define STUCK_ROUNDS 3

/* The space check failed with the user-visible space available: free segments are short.
 * A checkpoint comes first (it writes back what is dirty and turns prefree segments free),
 * then GC rounds until blocks fit, or ENOSPC once GC makes no progress. */
static int make_room(struct f2fuse *fs, uint64_t blocks, enum room_kind kind)
{
    bool logical;
    if (!fs->gc) { /* no GC (cannot happen on a read-write mount): a checkpoint is all we have */
        int err = checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
        if (err)
            return err;
        return room_for(fs, blocks, kind, &logical) ? 0 : -ENOSPC;
    }
    uint64_t start = clock_mono_ns();
    gc_foreground_begin(fs);
    int err = 0;
    unsigned stuck = 0;
    bool synced = false;
    while (!room_for(fs, blocks, kind, &logical)) {
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

/* A free holds the inode's stripe and walks its nodes: seconds at most, even for a huge
 * file.  An unlinked inode whose forget does not come (a process keeps it as its working
 * directory) is waited for that long too, then statfs answers and a write gets ENOSPC. */
#define FREE_WAIT_NS (5 * NS_PER_SEC)

/* Waits while blocks shown free are still being freed; whether there were any. */
static bool wait_for_frees(struct f2fuse *fs)
{
    struct timespec until = clock_deadline(CLOCK_MONOTONIC, FREE_WAIT_NS);
    pthread_mutex_lock(&fs->space.lock);
    bool any = fs->space.freeing || fs->space.frees_running;
    while ((fs->space.freeing || fs->space.frees_running) &&
           pthread_cond_timedwait(&fs->space.freed, &fs->space.lock, &until) == 0)
        ;
    pthread_mutex_unlock(&fs->space.lock);
    return any;
}

/* The check, then (when only free segments are short) make_room: out-of-place writes need
 * free segments; a checkpoint writes back what is dirty and turns the segments it emptied
 * into free ones, and GC (gc.c) cleans victims. */
static int reserve(struct f2fuse *fs, uint64_t blocks, enum room_kind kind)
{
    bool logical;
    gc_note_activity(fs); /* gc.c: the background thread waits for idleness */
    if (room_for(fs, blocks, kind, &logical))
        return 0;
    if (!logical && wait_for_frees(fs))
        room_for(fs, blocks, kind, &logical);
    return logical ? make_room(fs, blocks, kind) : -ENOSPC;
}

int space_reserve(struct f2fuse *fs, uint64_t blocks)
{
    return reserve(fs, blocks, ROOM_UNCLAIMED);
}

int space_reserve_to_free(struct f2fuse *fs, uint64_t blocks)
{
    return reserve(fs, blocks, ROOM_TO_FREE);
}

/* Blocks of the user-visible space that data (writes into holes, fallocate) leaves to
 * metadata: the node and dentry blocks of an fsync, a rename, a create or an xattr on a
 * file system full of data, as the kernel's reserved blocks are (0.2 %, 32 to 2048). */
uint64_t space_metadata_reserve(struct f2fuse *fs)
{
    uint64_t r = le64(fs->cp->user_block_count) / 512;
    return r < 32 ? 32 : r > 2048 ? 2048 : r;
}

/* The most that data may use. */
static uint64_t data_limit(struct f2fuse *fs)
{
    uint64_t user = le64(fs->cp->user_block_count), r = space_metadata_reserve(fs);
    return user > r ? user - r : 0;
}

int space_metadata_room(struct f2fuse *fs, uint64_t blocks)
{
    uint64_t user = le64(fs->cp->user_block_count);
    pthread_mutex_lock(&fs->space.lock);
    bool fits = space_used_blocks(fs) + fs->space.claimed + blocks <= user;
    pthread_mutex_unlock(&fs->space.lock);
    return fits ? 0 : -ENOSPC;
}

int space_claim_more(struct f2fuse *fs, struct space_claim *c, uint64_t blocks)
{
    uint64_t user = data_limit(fs);
    pthread_mutex_lock(&fs->space.lock);
    bool fits = !blocks || space_used_blocks(fs) + fs->space.claimed + blocks <= user;
    if (fits) {
        fs->space.claimed += blocks;
        c->blocks += blocks;
    }
    pthread_mutex_unlock(&fs->space.lock);
    return fits ? 0 : -ENOSPC;
}

int space_claim(struct f2fuse *fs, struct space_claim *c, uint64_t blocks, uint64_t written)
{
    c->blocks = 0;
    uint64_t user = data_limit(fs);
    /* Check and claim in one step under space.lock: what is used grows only by blocks
     * claimed first (or by metadata), so a claim that fits here is not handed out again. */
    struct timespec until = clock_deadline(CLOCK_MONOTONIC, FREE_WAIT_NS);
    pthread_mutex_lock(&fs->space.lock);
    bool fits;
    /* a claim of nothing (an overwrite, a write into reserved blocks) always fits: metadata
     * may have taken used past the data limit */
    while (!(fits = !blocks || space_used_blocks(fs) + fs->space.claimed + blocks <= user) &&
           (fs->space.freeing || fs->space.frees_running) &&
           pthread_cond_timedwait(&fs->space.freed, &fs->space.lock, &until) == 0)
        ; /* statfs shows those blocks free already: wait for them rather than refuse */
    if (fits) {
        fs->space.claimed += blocks;
        c->blocks = blocks;
    }
    pthread_mutex_unlock(&fs->space.lock);
    if (!fits)
        return -ENOSPC;
    int err = reserve(fs, written, ROOM_CLAIMED);
    if (err)
        space_settle(fs, c);
    return err;
}

void space_settle(struct f2fuse *fs, struct space_claim *c)
{
    pthread_mutex_lock(&fs->space.lock);
    fs->space.claimed -= c->blocks;
    c->blocks = 0;
    pthread_mutex_unlock(&fs->space.lock);
}

void space_reserve_claimed(struct f2fuse *fs, struct space_claim *c, int64_t blocks)
{
    if (!c || blocks <= 0) {
        seg_reserve(fs->seg, blocks);
        return;
    }
    /* space.lock, then segment.c's lock inside it, as every reader of both takes them */
    pthread_mutex_lock(&fs->space.lock);
    seg_reserve(fs->seg, blocks);
    uint64_t take = (uint64_t)blocks < c->blocks ? (uint64_t)blocks : c->blocks;
    c->blocks -= take;
    fs->space.claimed -= take;
    pthread_mutex_unlock(&fs->space.lock);
}

void space_freeing_add(struct f2fuse *fs, uint64_t blocks)
{
    pthread_mutex_lock(&fs->space.lock);
    fs->space.freeing += blocks;
    pthread_mutex_unlock(&fs->space.lock);
}

void space_freeing_cancel(struct f2fuse *fs, uint64_t blocks)
{
    pthread_mutex_lock(&fs->space.lock);
    fs->space.freeing -= blocks;
    pthread_cond_broadcast(&fs->space.freed); /* waiters: those blocks will not come */
    pthread_mutex_unlock(&fs->space.lock);
}

void space_free_begin(struct f2fuse *fs, uint64_t blocks)
{
    pthread_mutex_lock(&fs->space.lock);
    fs->space.freeing -= blocks;
    fs->space.frees_running++;
    pthread_mutex_unlock(&fs->space.lock);
}

void space_free_end(struct f2fuse *fs)
{
    pthread_mutex_lock(&fs->space.lock);
    fs->space.frees_running--;
    pthread_cond_broadcast(&fs->space.freed); /* claims wait for any one free */
    pthread_mutex_unlock(&fs->space.lock);
}

uint64_t space_statfs_used(struct f2fuse *fs)
{
    struct timespec until = clock_deadline(CLOCK_MONOTONIC, FREE_WAIT_NS);
    pthread_mutex_lock(&fs->space.lock);
    while (fs->space.frees_running &&
           pthread_cond_timedwait(&fs->space.freed, &fs->space.lock, &until) == 0)
        ;
    /* read under space.lock: a free's begin and its blocks leaving the count are ordered */
    uint64_t used = space_used_blocks(fs), freeing = fs->space.freeing;
    pthread_mutex_unlock(&fs->space.lock);
    return used > freeing ? used - freeing : 0;
}

void space_after_change(struct f2fuse *fs)
{
    if (pcache_over_budget(fs->cache))
        checkpoint_request(fs, BLK_PRIO_NORMAL, CP_ALL_DATA);
}
