/* Power-cut emulation for crash-consistency tests (littlefs-style): a block-device layer
 * (blk_powercut.c) stacked on a device right after it is opened.  Production devices never
 * carry it. */
#ifndef F2FUSE_BLK_BLK_POWERCUT_H
#define F2FUSE_BLK_BLK_POWERCUT_H

#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"

/* The power fails as the after-th write request (1-based, every caller write counts, see
 * blk_write_count) is submitted.  A write is durable once a flush submitted after the write
 * completed has itself completed.  At the cut every write not yet durable is undone (its
 * blocks get back what they held before it), that write and all later ones are dropped;
 * afterwards writes, discards and flushes succeed without touching the device and reads
 * still see it.  With torn each 4 KiB block of each non-durable write is instead kept or
 * reverted at random (a device that persisted part of its volatile cache), from a PRNG
 * seeded with seed. */
struct blk_powercut_options {
    uint64_t after; /* 0 = no cut */
    bool torn;
    uint64_t seed;
};

/* Stacks the power-cut layer on dev; call before the first write.  Nothing is stacked when
 * opts->after is 0 or the device is read-only (it has nothing to lose).  0, -ENOMEM, or
 * -EEXIST when the device carries one already. */
int blk_powercut_arm(struct blk_dev *dev, const struct blk_powercut_options *opts);

/* True once the cut has been carried out, i.e. the device holds its final post-power-
 * failure content (the undo runs after the writes in flight at the cut have landed, so this
 * can lag the cutting write's submission a little). */
bool blk_powercut_happened(const struct blk_dev *dev);

/* Counters "blk.powercut.*" (blk_emit_stats): armed, cut (0/1), dropped_writes,
 * reverted_blocks (4 KiB blocks written back at the cut), undo_bytes (old contents held for
 * not-yet-durable writes). */

#endif
