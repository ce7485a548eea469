/* NAT manager (nat.c): nid → (ino, block address, version) for reading and writing.
 *
 * Lookups go: entries changed since the last checkpoint (and those taken from the NAT
 * journal at mount) → the current copy of the NAT block (per the NAT version bitmap).
 * Changes stay in memory until nat_flush, which writes every changed NAT block to its
 * alternate copy and flips the block's bit in the in-memory bitmap; the checkpoint then
 * commits the bitmap.  The NAT journal is always written empty, and the NAT_BITS flag is
 * cleared (both are optional to the kernel and fsck).  "Alternate" means: not the copy the
 * last committed checkpoint uses, read off fs->nat_bitmap (in fs->cp_block, which the
 * checkpoint writer replaces with the new CP block once it is durable); so a flush repeated
 * after a failed checkpoint rewrites the same uncommitted copy and never touches what the
 * committed checkpoint references.
 *
 * Free nids are found by scanning NAT blocks lazily from the checkpoint's next_free_nid
 * hint, a few blocks at a time, skipping nids with changed entries in memory. */
#ifndef F2FUSE_CORE_NAT_H
#define F2FUSE_CORE_NAT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/format.h"
#include "util/stats.h"

struct f2fuse;
struct nat_manager;

/* Takes the NAT bitmap (copied: it becomes mutable) and the NAT journal from the loaded
 * checkpoint (fs->nat_bitmap, fs->nat_journal), and the node/inode counts from fs->cp.
 * -EOPNOTSUPP for a checkpoint layout f2fuse does not write (cp_payload, large NAT bitmap). */
int nat_load(struct f2fuse *fs, struct nat_manager **out);
void nat_destroy(struct nat_manager *nm);

/* The entry of nid (all-zero for a free nid).  -EIO (fs_corrupt) for nid out of range. */
int nat_get(struct nat_manager *nm, uint32_t nid, struct f2fs_nat_entry *out);

/* Records that node nid of inode ino now lives at blkaddr (NULL_ADDR: the node was freed,
 * which increments its version as the kernel does, unless it was NEW_ADDR, and keeps the
 * entry's ino).  Also keeps valid_node_count and valid_inode_count (an inode is the node
 * with nid == ino) in step: any address other than NULL_ADDR, NEW_ADDR too, is in use.
 * -EINVAL for a nid outside [root_ino, max_nid). */
int nat_set(struct nat_manager *nm, uint32_t nid, uint32_t ino, uint32_t blkaddr);

/* Hands out a nid that is free on disk and in memory; -ENOSPC when the NAT is full.
 * nat_release_nid gives back one that was not used after all.  A nid freed by nat_set
 * (NULL_ADDR) may be handed out again before the next checkpoint. */
int nat_alloc_nid(struct nat_manager *nm, uint32_t *nid);
void nat_release_nid(struct nat_manager *nm, uint32_t nid);

uint32_t nat_valid_nodes(struct nat_manager *nm);
uint32_t nat_valid_inodes(struct nat_manager *nm);
uint32_t nat_free_nids(struct nat_manager *nm); /* nids that can still be allocated */
/* Entries changed since the last nat_flush (what the next one writes); a checkpoint
 * trigger can watch it, as the kernel's excess_dirty_nats does. */
uint32_t nat_dirty_entries(struct nat_manager *nm);

/* Checkpoint steps, with every writer stopped: nat_flush (after node writeback; -EINVAL,
 * writing nothing, if an entry is still NEW_ADDR), then nat_fill_checkpoint; once the pack
 * is durable the writer copies the new CP block into fs->cp_block (fs->nat_bitmap then
 * shows the committed bitmap, which the next nat_flush goes by).  If the checkpoint fails
 * after nat_flush, fs->cp_block stays as it was and a later nat_flush is still safe. */
int nat_flush(struct nat_manager *nm);
/* next_free_nid, valid node/inode counts and the NAT bitmap → the new CP block (the bitmap
 * goes right after the SIT bitmap: f2fuse writes no cp_payload); clears CP_NAT_BITS_FLAG
 * in cp->ckpt_flags, since f2fuse does not keep nat_bits up to date. */
void nat_fill_checkpoint(struct nat_manager *nm, struct f2fs_checkpoint *cp);

/* Counters "nat.*": lookups, dirty entries, NAT blocks written, free nids cached, NAT
 * blocks scanned, nids allocated / handed out now, flushes, valid nodes/inodes, free nids. */
void nat_emit_stats(struct nat_manager *nm, stat_emit_fn emit, void *sink);

#endif
