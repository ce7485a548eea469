/* Segment manager (segment.c): the write side's view of the main area.
 *
 * In memory: one entry per main segment (valid-block map now and as of the last checkpoint,
 * type, mtime), the six current segments ("logs") with the summaries of the blocks written
 * into them, and the free/prefree state.  Blocks are allocated out of place, appended to a
 * log (LFS).  A block valid in the last checkpoint is never handed out again before the
 * next checkpoint has committed (it is "prefree" until then): that is what makes every
 * checkpoint a consistent state to crash back to.
 *
 * Checkpoint protocol (driven by checkpoint.c):
 *   seg_flush_sit()       dirty SIT entries → the alternate SIT block copies
 *   seg_fill_checkpoint() current segments, free count, SIT bitmap → the new CP block
 *   seg_write_summaries() the current segments' summaries → blocks of the new CP pack
 *   ... the CP pack is written and flushed ...
 *   seg_checkpoint_done() "checkpointed" maps := current maps; prefree → free
 */
#ifndef F2FUSE_CORE_SEGMENT_H
#define F2FUSE_CORE_SEGMENT_H

#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"
#include "core/format.h"
#include "util/stats.h"

struct f2fuse;

enum log_type {
    LOG_HOT_DATA,  /* directory blocks */
    LOG_WARM_DATA, /* file data */
    LOG_COLD_DATA, /* moved by GC, cold files */
    LOG_HOT_NODE,  /* direct nodes of directories */
    LOG_WARM_NODE, /* direct nodes and inodes of files */
    LOG_COLD_NODE, /* indirect nodes */
    LOG_COUNT
};

static inline bool log_is_node(enum log_type t)
{
    return t >= LOG_HOT_NODE;
}

struct seg_manager;

/* Builds the in-memory state from the valid checkpoint loaded in fs (fs->cp, fs->cp_start,
 * fs->sb, fs->dev): SIT blocks (current copy per the checkpoint's SIT bitmap) with the SIT
 * journal applied, the current segments with their summaries (compact or normal data
 * summaries; node summaries from the pack, or rebuilt from node footers when the pack has
 * none).  Validates what it reads (-EIO with fs_corrupt on damage).  -EOPNOTSUPP (with a
 * log line) for images whose SIT bitmap is not in the CP block (cp_payload > 0 or
 * CP_LARGE_NAT_BITMAP_FLAG).  Segments whose entries came from the SIT journal are marked
 * dirty, so the next checkpoint writes them to SIT blocks. */
int seg_load(struct f2fuse *fs, struct seg_manager **out);
void seg_destroy(struct seg_manager *sm);

/* Allocates the next block of a log for the owner sum describes (data: the dnode's nid,
 * its NAT version and the pointer's offset in it; node: its nid) and marks it valid.
 * When the log's segment is full its summary is written to the SSA and the log moves to
 * a free segment.  -ENOSPC when no free segment is left.
 * Details: sum is stored as given, i.e. in on-disk (little-endian) byte order.  The log
 * moves on as soon as its last block is handed out (as the kernel does), so a checkpoint
 * never records a full segment; the last block of a segment is therefore refused with
 * -ENOSPC when no free segment is left to move to.  Segments freed since the last
 * checkpoint are prefree, not free: when this returns -ENOSPC while
 * seg_prefree_segments() > 0, a checkpoint makes room.  -EIO (fs_corrupt) if the block at
 * the write position is not free in both the current and the checkpointed map.
 * replaces is the address the new block takes over from: a main-area block becomes invalid,
 * NEW_ADDR gives back its reservation (seg_reserve), NULL_ADDR changes nothing.  Doing that
 * in the same critical section keeps seg_used_blocks() from counting one block twice. */
int seg_alloc_block(struct seg_manager *sm, enum log_type type, const struct f2fs_summary *sum,
                    uint32_t replaces, uint32_t *blkaddr);

/* n blocks of log type in one critical section, taking nothing over (replaces NULL_ADDR):
 * consecutive unless the log moves to another segment meanwhile (a compressed cluster's
 * blocks, which are read together).  All or none: -errno leaves none allocated. */
int seg_alloc_blocks(struct seg_manager *sm, enum log_type type, const struct f2fs_summary *sums,
                     unsigned n, uint32_t *blkaddrs);

/* Marks a block invalid (overwritten elsewhere, or freed).  NULL_ADDR/NEW_ADDR are no-ops. */
void seg_invalidate_block(struct seg_manager *sm, uint32_t blkaddr);

/* A valid block that stops being one but stays counted as used: a compressed cluster's
 * spare slot (NEW_ADDR or COMPRESS_ADDR) takes its place.  One critical section, so that
 * seg_used_blocks() never dips between the two. */
void seg_invalidate_to_reserved(struct seg_manager *sm, uint32_t blkaddr);

/* Reservations: blocks promised to NEW_ADDR data pointers and NAT entries, not yet
 * written.  blocks < 0 gives some back (freed before they were written). */
void seg_reserve(struct seg_manager *sm, int64_t blocks);

/* The user-visible space in use: valid blocks plus reservations, read together. */
uint64_t seg_used_blocks(struct seg_manager *sm);

bool seg_block_valid(struct seg_manager *sm, uint32_t blkaddr);

/* The address the next block of log type will get (the roll-forward chain's next_blkaddr),
 * or 0 while unknown (a log loaded in SSR mode moves to a fresh segment first). */
uint32_t seg_next_blkaddr(struct seg_manager *sm, enum log_type type);

/* Every log leaves its segment for a free one (writing the summaries), so that nothing
 * written after the last checkpoint is overwritten: roll-forward recovery needs it. */
int seg_new_segments(struct seg_manager *sm);

/* Keeps the segment holding blkaddr out of allocation until seg_release_holds (the blocks
 * a recovery still reads while its checkpoint allocates). */
void seg_hold(struct seg_manager *sm, uint32_t blkaddr);
void seg_release_holds(struct seg_manager *sm);

/* Valid blocks in the main area right now (the checkpoint's valid_block_count). */
uint64_t seg_valid_blocks(struct seg_manager *sm);
/* Segments that are free now (not current, no valid blocks now or at the last CP). */
uint32_t seg_free_segments(struct seg_manager *sm);
/* Whether a roll-forward recovery after a crash now — with more_nodes further nodes in the
 * fsync chain — would find the free segments its checkpoint needs.  Segments free now
 * hold nothing of the chain, so recovery finds at least these free and unheld; the need
 * is bounded by what the logs allocated since the last committed checkpoint (the kernel's
 * f2fs_space_for_roll_forward).  The fsync fast path checkpoints instead when not. */
bool seg_room_for_roll_forward(struct seg_manager *sm, uint32_t more_nodes);
/* Segments that become free once the next checkpoint commits. */
uint32_t seg_prefree_segments(struct seg_manager *sm);

/* Keeps the last segs free segments for the node logs: a data log that needs a new
 * segment gets -ENOSPC when no more than segs are free (0, the default: no reserve).  The
 * checkpoint writes dirty node blocks to new places, so without a reserve a data-heavy
 * workload can take the space a checkpoint needs to run (and to turn prefree segments
 * into free ones). */
void seg_set_data_reserve(struct seg_manager *sm, uint32_t segs);

/* Checkpoint steps, called with every writer stopped (see above). */
/* Writes each SIT block with a changed entry (all 55 entries, from memory) to the copy
 * that the last COMMITTED checkpoint does not use, and records that copy in the SIT bitmap
 * the next checkpoint carries.  So a checkpoint that fails after this never damages the
 * last valid one, and a retry simply flushes again. */
int seg_flush_sit(struct seg_manager *sm);
/* Sets cur_node/data_segno and _blkoff (unused slots 3..7: segno 0xFFFFFFFF, blkoff 0, as
 * mkfs writes them), alloc_type (all LFS once a log has moved), free_segment_count
 * (counting prefree segments as free: they are once this checkpoint commits; this is what
 * fsck expects), elapsed_time (seconds; SIT mtimes use the same clock),
 * sit_ver_bitmap_bytesize and the SIT bitmap at offset 192 (cp is a whole 4 KiB block;
 * f2fuse writes no cp_payload).  It does not set valid_block_count: seg_valid_blocks()
 * is the SIT total, to which the caller adds any NEW_ADDR reservations it keeps. */
void seg_fill_checkpoint(struct seg_manager *sm, struct f2fs_checkpoint *cp);
/* Writes 3 data summary blocks (hot, warm, cold: normal layout, each with its journal; the
 * SIT journal is left empty because seg_flush_sit wrote everything to SIT blocks; the NAT
 * journal is left empty too) and, when with_node, 3 node summary blocks, into blocks[]
 * (6 × 4096 bytes, caller-allocated, 4 KiB aligned).  Journals are all zero, footers carry
 * the entry type, entries past a log's write position are zero.  Without with_node the
 * last three blocks are not touched; the next mount then rebuilds node summaries from the
 * footers of the blocks written in the node logs' segments. */
void seg_write_summaries(struct seg_manager *sm, uint8_t *blocks, bool with_node);
void seg_checkpoint_done(struct seg_manager *sm);

/* ---- discard support (discard.c) ----
 * Both functions report runs of main-area blocks [blkaddr, blkaddr + len) through fn, in
 * ascending order, with the segment manager's lock held: fn must not call back into it.
 * That lock is what makes a reported block safe to queue for discard: allocating it again
 * takes the lock too, and seg_alloc_block tells discard (discard_block_allocated) before
 * the block is written. */
typedef void (*seg_range_fn)(void *arg, uint32_t blkaddr, uint32_t len);
/* The blocks the checkpoint being written frees: valid at the last checkpoint and invalid
 * now, plus every block of segments that changed since it and are empty and not current
 * now (blocks written and freed again in between).  Called after the new pack is durable
 * and before seg_checkpoint_done.  Returns the number of blocks reported. */
uint64_t seg_discard_candidates(struct seg_manager *sm, seg_range_fn fn, void *arg);
/* Free extents inside [start, end) (block addresses, clamped to the main area): blocks free
 * in both the current and the checkpointed map, maximal across segment boundaries, at least
 * minlen blocks long.  Segments changed since the last checkpoint count as in use: a block
 * written and freed since then may hold a node that roll-forward recovery still walks
 * through.  Returns the number of blocks reported. */
uint64_t seg_free_extents(struct seg_manager *sm, uint32_t start, uint32_t end, uint32_t minlen,
                          seg_range_fn fn, void *arg);

/* ---- usage summary (f2fuse info) ----
 * Per SIT type: segments holding valid blocks and those blocks; each log's write position;
 * *empty gets the main segments without a valid block (current ones included). */
struct seg_log_usage {
    uint32_t segments;
    uint64_t valid_blocks;
    uint32_t cur_segno, cur_blkoff;
};
void seg_usage(struct seg_manager *sm, struct seg_log_usage usage[LOG_COUNT], uint32_t *empty);

/* ---- segment cleaning support (gc.c) ----
 * Victim selection: greedy (fewest valid blocks) for foreground GC, cost-benefit (the
 * kernel's get_cb_cost: utilization and age from the SIT mtime) for background GC.  Only
 * segments with some valid and some invalid blocks, no log writing into them, not held and
 * not already being cleaned are candidates. */
enum gc_policy { GC_GREEDY, GC_COST_BENEFIT };
struct seg_gc_victim {
    uint32_t segno;
    uint16_t valid;
    uint8_t type; /* SIT type: the log type that wrote it */
    uint64_t mtime;
    uint8_t map[SIT_VBLOCK_MAP_SIZE]; /* valid blocks when picked */
};
/* Picks the best candidate with at most max_valid valid blocks, marks it busy (no later
 * pick returns it until seg_gc_done) and describes it in *v.  UINT32_MAX when none. */
uint32_t seg_gc_pick(struct seg_manager *sm, enum gc_policy policy, uint32_t max_valid,
                     struct seg_gc_victim *v);
/* Ends the cleaning of segno; true when it is empty now.  With skip, a victim left
 * non-empty is not picked again until one of its blocks is invalidated (blocks GC could
 * not move: it would pick the same segment forever). */
bool seg_gc_done(struct seg_manager *sm, uint32_t segno, bool skip);
/* Reads the SSA block of segno (its summary as written when a log left it). */
int seg_read_ssa(struct seg_manager *sm, uint32_t segno, enum blk_prio prio,
                 struct f2fs_summary_block *out);
uint32_t seg_block_addr(struct seg_manager *sm, uint32_t segno, unsigned off);
uint32_t seg_main_segments(struct seg_manager *sm);
/* Blocks allocated in all logs since the mount (write amplification's numerator). */
uint64_t seg_blocks_allocated(struct seg_manager *sm);

/* ---- slack space reuse (SSR) ----
 * At or below segs free segments (and always when a data log would otherwise get
 * -ENOSPC), a data log that needs a new segment takes a data segment with free slots
 * instead, unchanged since the last checkpoint, and fills those slots (alloc_type SSR in
 * the checkpoint).  seg_ssr_blocks counts the slots data may still take that way. */
void seg_set_ssr_threshold(struct seg_manager *sm, uint32_t segs);
uint64_t seg_ssr_blocks(struct seg_manager *sm);

/* Counters "seg.*": free, prefree, valid_blocks, alloc.<log> (blocks allocated per log),
 * ssa_writes, sit_blocks_written, new_segments, enospc, ssr_segments. */
void seg_emit_stats(struct seg_manager *sm, stat_emit_fn emit, void *sink);

#endif
