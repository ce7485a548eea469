/* NAT manager (nat.c): nid → (ino, block address, version) for reading and writing.
 *
 * Lookups go: entries changed since the last checkpoint (and those taken from the NAT
 * journal at mount) → the current copy of the NAT block (per the NAT version bitmap).
 * Changes stay in memory until nat_flush, which writes every changed NAT block to its
 * alternate copy and flips the block's bit in the in-memory bitmap; the checkpoint then
 * commits the bitmap.  The NAT journal is always written empty, and the NAT_BITS flag is
 * cleared (both are optional to the kernel and fsck).
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
 * checkpoint (fs->nat_bitmap, fs->nat_journal), and the node/inode counts from fs->cp. */
int nat_load(struct f2fuse *fs, struct nat_manager **out);
void nat_destroy(struct nat_manager *nm);

/* The entry of nid (all-zero for a free nid).  -EIO (fs_corrupt) for nid out of range. */
int nat_get(struct nat_manager *nm, uint32_t nid, struct f2fs_nat_entry *out);

/* Records that node nid of inode ino now lives at blkaddr (NULL_ADDR: the node was freed,
 * which increments its version as the kernel does).  Also keeps valid_node_count and
 * valid_inode_count (an inode is the node with nid == ino) in step. */
int nat_set(struct nat_manager *nm, uint32_t nid, uint32_t ino, uint32_t blkaddr);

/* Hands out a nid that is free on disk and in memory; -ENOSPC when the NAT is full.
 * nat_release_nid gives back one that was not used after all. */
int nat_alloc_nid(struct nat_manager *nm, uint32_t *nid);
void nat_release_nid(struct nat_manager *nm, uint32_t nid);

uint32_t nat_valid_nodes(struct nat_manager *nm);
uint32_t nat_valid_inodes(struct nat_manager *nm);
uint32_t nat_free_nids(struct nat_manager *nm); /* nids that can still be allocated */

/* Checkpoint steps, with every writer stopped. */
int nat_flush(struct nat_manager *nm);
/* next_free_nid, valid node/inode counts and the NAT bitmap → the new CP block (the bitmap
 * goes right after the SIT bitmap: f2fuse writes no cp_payload). */
void nat_fill_checkpoint(struct nat_manager *nm, struct f2fs_checkpoint *cp);

/* Counters "nat.*": lookups, dirty entries, NAT blocks written, free nids cached. */
void nat_emit_stats(struct nat_manager *nm, stat_emit_fn emit, void *sink);

#endif
