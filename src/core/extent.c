/* The inode's largest extent (i_ext), kept true as the kernel keeps it.
 *
 * The kernel holds every extent of a file in a tree and writes the largest one into the
 * inode; a change of a block pointer inside it splits it (the longer part survives), and
 * merging a new mapping into a neighbour can make a new largest.  f2fuse keeps no tree:
 * the extent itself and the run the current writeback batch is building are enough to
 * follow the same rules for what f2fuse writes - a file written in order gets one extent
 * over its longest contiguous run, an overwrite inside an extent shrinks it to the longer
 * side, a truncate cuts it.  What matters to a kernel is that every block inside it is
 * exactly where it says (it reads through it without looking at the node) and valid. */
#include <stdatomic.h>

#include "core/extent.h"
#include "core/context.h"

static void extent_set(struct f2fs_inode *ri, uint64_t fofs, uint32_t blk, uint32_t len)
{
    if (len == 0)
        fofs = blk = 0;
    ri->i_ext.fofs = htole32((uint32_t)fofs);
    ri->i_ext.blk = htole32(blk);
    ri->i_ext.len = htole32(len);
}

bool extent_clear(struct f2fs_inode *ri)
{
    bool had = ri->i_ext.len != 0;
    extent_set(ri, 0, 0, 0);
    return had;
}

bool extent_usable(struct f2fuse *fs, const struct f2fs_inode *ri, uint64_t max_blocks)
{
    uint64_t fofs = le32(ri->i_ext.fofs), blk = le32(ri->i_ext.blk), len = le32(ri->i_ext.len);
    if (len == 0)
        return false;
    /* The kernel also wants both ends valid in the SIT.  That check takes the segment
     * manager's lock, too dear for every read; the bounds keep a hostile extent inside the
     * main area, as the bounds of a node's pointers do. */
    bool ok = fofs + len <= max_blocks && blk >= fs->main_blkaddr && blk + len <= fs->main_blkend;
    if (!ok) {
        atomic_fetch_add(&fs->extent_rejected, 1);
        if (!atomic_exchange(&fs->extent_rejected_logged, true))
            fs_corrupt(fs,
                       "an inode's extent [file block %llu, block 0x%llx, %llu blocks] is "
                       "not valid; reading through its nodes instead (logged once)",
                       (unsigned long long)fofs, (unsigned long long)blk, (unsigned long long)len);
    }
    return ok;
}

bool extent_forget_block(struct f2fs_inode *ri, uint64_t index)
{
    uint64_t fofs = le32(ri->i_ext.fofs), len = le32(ri->i_ext.len);
    uint32_t blk = le32(ri->i_ext.blk);
    if (len == 0 || index < fofs || index >= fofs + len)
        return false;
    uint64_t before = index - fofs, after = fofs + len - index - 1;
    if (before >= after)
        extent_set(ri, fofs, blk, (uint32_t)before);
    else
        extent_set(ri, index + 1, blk + (uint32_t)(before + 1), (uint32_t)after);
    return true;
}

bool extent_assigned(struct f2fs_inode *ri, struct extent_run *run, uint64_t index,
                     uint32_t blkaddr)
{
    bool changed = extent_forget_block(ri, index);
    uint64_t fofs = le32(ri->i_ext.fofs), len = le32(ri->i_ext.len);
    uint32_t blk = le32(ri->i_ext.blk);

    if (run->len && index == run->fofs + run->len && blkaddr == run->blk + run->len) {
        run->len++;
    } else {
        run->fofs = index;
        run->blk = blkaddr;
        run->len = 1;
    }
    if (len && index == fofs + len && blkaddr == blk + len && len < UINT32_MAX) {
        extent_set(ri, fofs, blk, (uint32_t)len + 1); /* continues it */
        return true;
    }
    if (len && index + 1 == fofs && blkaddr + 1 == blk && len < UINT32_MAX) {
        extent_set(ri, index, blkaddr, (uint32_t)len + 1); /* precedes it */
        return true;
    }
    if (run->len > len) {
        extent_set(ri, run->fofs, run->blk, run->len);
        return true;
    }
    return changed;
}

bool extent_truncate(struct f2fs_inode *ri, uint64_t first_free)
{
    uint64_t fofs = le32(ri->i_ext.fofs), len = le32(ri->i_ext.len);
    if (len == 0 || fofs + len <= first_free)
        return false;
    extent_set(ri, fofs, le32(ri->i_ext.blk),
               first_free > fofs ? (uint32_t)(first_free - fofs) : 0);
    return true;
}
