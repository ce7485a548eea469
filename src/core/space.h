/* Space policy: may an operation allocate N blocks, and what must happen first */
#ifndef F2FUSE_CORE_SPACE_H
#define F2FUSE_CORE_SPACE_H

#include <stdbool.h>
#include <stdint.h>

struct f2fuse;

/* Every write operation asks before it changes anything: 0 when blocks more fit (making
 * room first by checkpoint and GC when only free segments are short), -ENOSPC when the
 * user-visible space cannot hold them besides what is used and claimed. */
int space_reserve(struct f2fuse *fs, uint64_t blocks);

/* What one operation has claimed and not yet reserved in the file.  The operation hangs
 * it on its inode_info; the blocks and nodes it reserves there are taken from it in the
 * same step (space_reserve_claimed), so that no block counts as used and claimed at once:
 * counted twice for the length of a write, a concurrent overwrite on a near-full file
 * system got ENOSPC. */
struct space_claim {
    uint64_t blocks;
};

/* As space_reserve for data blocks an operation will reserve in the file (fallocate,
 * write; written: the blocks that will need free segments): the blocks are also claimed
 * into *c, so that a concurrent operation's check counts them until they are reserved
 * or the operation ends with space_settle.
 * Check and claim are one step: two operations can never be promised the same block. */
int space_claim(struct f2fuse *fs, struct space_claim *c, uint64_t blocks, uint64_t written);
/* Whether blocks more of metadata fit the user-visible space (reserve included): a
 * directory asks before it grows by a block, so that a rename or link that needs one gets
 * ENOSPC rather than a block past the end, while the rest of them ask for segments only. */
int space_metadata_room(struct f2fuse *fs, uint64_t blocks);
/* More blocks for a claim, by an operation that holds locks: no waiting, no GC. */
int space_claim_more(struct f2fuse *fs, struct space_claim *c, uint64_t blocks);
/* The operation is done: what it claimed and did not reserve is given back. */
void space_settle(struct f2fuse *fs, struct space_claim *c);
/* blocks (negative: given back) reserved as NEW_ADDR data or nodes; with a claim c (may
 * be NULL), as much as it still holds is taken from it at the same moment. */
void space_reserve_claimed(struct f2fuse *fs, struct space_claim *c, int64_t blocks);
/* Claims stop this many blocks short of the user-visible space: metadata keeps room on a
 * file system full of data (statfs shows it as free, not as available). */
uint64_t space_metadata_reserve(struct f2fuse *fs);

/* For operations that free space (truncate, and the node writes that carry it): only the
 * free segments are made sure of; the user-visible space is not asked, so that a full file
 * system can always shrink. */
int space_reserve_to_free(struct f2fuse *fs, uint64_t blocks);
/* After a change: a checkpoint when the page cache is over its budget. */
void space_after_change(struct f2fuse *fs);

/* Inodes that are unlinked and wait only for the kernel's forget (refs.c): their blocks
 * count as free for statfs at once.  _add when the last name goes, _cancel when the inode
 * is opened again after all, _begin when its free starts (under its refs.c stripe lock, so
 * statfs never misses both), _end when it is done. */
void space_freeing_add(struct f2fuse *fs, uint64_t blocks);
void space_freeing_cancel(struct f2fuse *fs, uint64_t blocks);
void space_free_begin(struct f2fuse *fs, uint64_t blocks);
void space_free_end(struct f2fuse *fs);

/* What statfs shows as used: valid and reserved blocks less those being freed, once no
 * inode is in the middle of being freed (it waits for those, at most a few seconds). */
uint64_t space_statfs_used(struct f2fuse *fs);

/* Would blocks more (plus what is dirty) fit?  *logical: in the user-visible space, with
 * what is claimed (blocks included when already claimed); the result also asks for free
 * segments beyond the node logs' and GC's reserve. */
bool space_room_for(struct f2fuse *fs, uint64_t blocks, bool claimed, bool *logical);
/* Blocks that writing back what is dirty now could take. */
uint64_t space_pending_blocks(struct f2fuse *fs);
/* Blocks of the user-visible space in use: valid plus reserved (data and nodes). */
uint64_t space_used_blocks(struct f2fuse *fs);
/* Free segments kept for the node logs and the hot data log of one checkpoint. */
#define SPACE_LOG_RESERVED_SEGMENTS 4u

/* Whether a roll-forward recovery after a crash now, with more_nodes further nodes in the
 * fsync chain, would find the free segments its checkpoint needs (segment.c counts what
 * the logs allocated since the last checkpoint).  A fast fsync checkpoints instead when
 * not. */
bool space_room_for_roll_forward(struct f2fuse *fs, uint32_t more_nodes);

#endif
