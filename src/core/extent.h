/* The inode's largest extent (i_ext): one run of file blocks [fofs, fofs + len) stored at
 * device blocks [blk, blk + len).  A kernel seeds its read extent cache from it when it
 * loads the inode and trusts it (fs/f2fs/extent_cache.c), and sload.f2fs and the kernel
 * write it for the files they create, so f2fuse keeps it true on every change of a block
 * pointer and reads through it (extent.c). */
#ifndef F2FUSE_CORE_EXTENT_H
#define F2FUSE_CORE_EXTENT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/format.h"

struct f2fuse;

/* The run of consecutive assignments one writeback batch is building, so that a run longer
 * than the inode's extent replaces it (the kernel's largest-extent rule).  Zero it before
 * the first assignment of a batch. */
struct extent_run {
    uint64_t fofs;
    uint32_t blk;
    uint32_t len;
};

/* Is the extent of ri one that may be read through?  Non-empty, inside the main area and
 * inside the file's addressable blocks (max_blocks).  One that is not counts as corrupt. */
bool extent_usable(struct f2fuse *fs, const struct f2fs_inode *ri, uint64_t max_blocks);

/* File block index maps to *addr through the extent: true, else false (look it up). */
static inline bool extent_lookup(const struct f2fs_extent *ext, uint64_t index, uint32_t *addr)
{
    uint32_t len = le32(ext->len), fofs = le32(ext->fofs);
    if (index < fofs || index - fofs >= len)
        return false;
    *addr = le32(ext->blk) + (uint32_t)(index - fofs);
    return true;
}

/* Block pointer index now holds something else than the extent says (a hole, a reserved
 * block, or another block): the extent keeps the longer of the two parts around index.
 * Returns true when the extent changed (the inode page must be marked dirty). */
bool extent_forget_block(struct f2fs_inode *ri, uint64_t index);

/* Block pointer index was set to device block blkaddr by writeback (run: this batch's
 * run, see above).  The extent grows when blkaddr continues it at either end, and is
 * replaced by the batch's run when that became longer.  Returns true when it changed. */
bool extent_assigned(struct f2fs_inode *ri, struct extent_run *run, uint64_t index,
                     uint32_t blkaddr);

/* Every block from first_free on was freed (truncate): the extent is cut there. */
bool extent_truncate(struct f2fs_inode *ri, uint64_t first_free);

/* Forgets the extent (its blocks are not the file's any more, or the inode is not a regular
 * file, the only kind a kernel keeps one for).  Returns true when there was one. */
bool extent_clear(struct f2fs_inode *ri);

#endif
