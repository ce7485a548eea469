/* Discard (discard.c; merged, parallel discard and a fast FITRIM, as ext4's): tells the
 * device which main-area blocks hold nothing, so an image file gets holes punched (it
 * shrinks on the host) and an SSD learns what it may erase.  Online after each checkpoint
 * (-o discard) and on demand (FITRIM, f2fuse_trim).
 *
 * The checkpoint side calls discard_checkpoint once the new pack is durable; the segment
 * manager calls discard_block_allocated for every block it hands out again. */
#ifndef F2FUSE_CORE_DISCARD_H
#define F2FUSE_CORE_DISCARD_H

#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"
#include "f2fuse.h"
#include "util/stats.h"

struct f2fuse;
struct discard_control;

/* Mount side (read-write mounts): fs->discard, plus the background thread with -o discard.
 * discard_destroy issues what is still queued (for at most 5 s, as the kernel at umount),
 * then frees everything. */
int discard_init(struct f2fuse *fs);
void discard_destroy(struct f2fuse *fs);

/* Checkpoint side: queues what the checkpoint frees (seg_discard_candidates) for the
 * background thread, which issues runs of 16 blocks or more.  Call after the pack is durable
 * and before seg_checkpoint_done, with cp_lock held for writing. */
void discard_checkpoint(struct f2fuse *fs);

/* Allocation side (seg_alloc_block, after the segment lock is dropped): a queued discard of
 * blkaddr is cancelled, a running one is waited for, and the block leaves the map of
 * discarded space.  One atomic load when its segment has no discard state. */
void discard_block_allocated(struct f2fuse *fs, uint32_t blkaddr);

/* Counters "discard.*" (nothing on read-only mounts). */
/* FITRIM over [start, start + len): a checkpoint, then discards of the free runs of at
 * least minlen bytes; *trimmed gets the bytes discarded, fn (when set) progress. */
int discard_trim(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen,
                 uint64_t *trimmed, f2fuse_progress_fn fn, void *arg);
void discard_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

/* ---- the engine without a file system (for tests): block addresses are absolute ---- */
int discard_create(struct blk_dev *dev, uint32_t main_blkaddr, uint32_t main_segs,
                   const struct f2fuse_options *opts, struct discard_control **out);
void discard_free(struct discard_control *dc);
/* Queues [blkaddr, blkaddr + len) minus what is known to be discarded. */
void discard_queue(struct discard_control *dc, uint32_t blkaddr, uint32_t len);
/* Issues the queued blocks inside [start, end) in the configured mode and waits for them.
 * *bytes gets what was discarded; returns the first error (0 when none). */
int discard_issue(struct discard_control *dc, uint32_t start, uint32_t end, uint64_t *bytes);
void discard_allocated(struct discard_control *dc, uint32_t blkaddr);
bool discard_is_done(struct discard_control *dc, uint32_t blkaddr);
void discard_stats(struct discard_control *dc, stat_emit_fn emit, void *sink);

#endif
