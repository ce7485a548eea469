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
 * none).  Validates what it reads (-EIO with fs_corrupt on damage). */
int seg_load(struct f2fuse *fs, struct seg_manager **out);
void seg_destroy(struct seg_manager *sm);

/* Allocates the next block of a log for the owner sum describes (data: the dnode's nid,
 * its NAT version and the pointer's offset in it; node: its nid) and marks it valid.
 * When the log's segment is full its summary is written to the SSA and the log moves to
 * a free segment.  -ENOSPC when no free segment is left. */
int seg_alloc_block(struct seg_manager *sm, enum log_type type, const struct f2fs_summary *sum,
                    uint32_t *blkaddr);

/* Marks a block invalid (overwritten elsewhere, or freed).  NULL_ADDR/NEW_ADDR are no-ops. */
void seg_invalidate_block(struct seg_manager *sm, uint32_t blkaddr);

bool seg_block_valid(struct seg_manager *sm, uint32_t blkaddr);

/* Valid blocks in the main area right now (the checkpoint's valid_block_count). */
uint64_t seg_valid_blocks(struct seg_manager *sm);
/* Segments that are free now (not current, no valid blocks now or at the last CP). */
uint32_t seg_free_segments(struct seg_manager *sm);
/* Segments that become free once the next checkpoint commits. */
uint32_t seg_prefree_segments(struct seg_manager *sm);

/* Checkpoint steps, called with every writer stopped (see above). */
int seg_flush_sit(struct seg_manager *sm);
void seg_fill_checkpoint(struct seg_manager *sm, struct f2fs_checkpoint *cp);
/* Writes 3 data summary blocks (hot, warm, cold: normal layout, each with its journal; the
 * SIT journal is left empty because seg_flush_sit wrote everything to SIT blocks; the NAT
 * journal is left empty too) and, when with_node, 3 node summary blocks, into blocks[]
 * (6 × 4096 bytes, caller-allocated, 4 KiB aligned). */
void seg_write_summaries(struct seg_manager *sm, uint8_t *blocks, bool with_node);
void seg_checkpoint_done(struct seg_manager *sm);

/* Counters "seg.*": free, prefree, valid blocks, blocks allocated per log, SSA writes,
 * SIT blocks written. */
void seg_emit_stats(struct seg_manager *sm, stat_emit_fn emit, void *sink);

#endif
