/* quota.c: the user, group and project quota files of an image with the quota feature -
 * usage per id kept in memory on every charge and release, limits enforced as the kernel's
 * dquot.c does, and the changed entries written into the files by every checkpoint. */
#ifndef F2FUSE_CORE_QUOTA_H
#define F2FUSE_CORE_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/quota_file.h"
#include "f2fuse.h"
#include "util/stats.h"

struct f2fuse;
struct page;
struct f2fs_inode;

/* opts.quota_limits: which types' limits bind (bits 1 << QUOTA_*), once QUOTA_LIMITS_CHOSEN
 * says an option chose; without, every type's do. */
#define QUOTA_LIMITS_CHOSEN (1u << 3)

/* The ids an inode is charged to. */
struct quota_ids {
    uint32_t id[QUOTA_TYPES];
};

/* A read-write mount: reads and checks the quota files (-EUCLEAN with a message naming the
 * file when one is damaged; nothing is kept then).  No-op without the quota feature. */
int quota_load(struct f2fuse *fs);
void quota_destroy(struct f2fuse *fs);
/* Is ino one of the quota files (which are charged to nobody)? */
bool quota_is_file(const struct f2fuse *fs, uint32_t ino);
void quota_ids_of(const struct f2fuse *fs, const struct f2fs_inode *ri, struct quota_ids *ids);

/* Usage, called with the inode's stripe held (or by a checkpoint).  Blocks are 4 KiB blocks
 * the inode's i_blocks counts (data, and nodes other than the inode itself).  _alloc_ checks
 * the limits for the calling thread's user (f2fuse_set_caller_uid) and charges nothing on
 * -EDQUOT; _add_ never fails (frees, and charges the kernel makes without a check). */
int quota_alloc_blocks(struct f2fuse *fs, struct page *ipage, uint64_t blocks);
void quota_add_blocks(struct f2fuse *fs, struct page *ipage, int64_t blocks);
int quota_alloc_inode(struct f2fuse *fs, const struct quota_ids *ids);
/* Gives back an inode charge taken by quota_alloc_inode (a create that failed). */
void quota_release_inode(struct f2fuse *fs, const struct quota_ids *ids);
/* The inode is freed: its remaining blocks and the inode itself. */
void quota_free_inode(struct f2fuse *fs, struct page *ipage);
/* New owner, group or project: the inode's whole usage moves (-EDQUOT as __dquot_transfer). */
int quota_transfer(struct f2fuse *fs, struct page *ipage, const struct quota_ids *to);

/* Usage counted afresh from every inode (after roll-forward recovery, which replays
 * changes the quota files never saw). */
int quota_recount(struct f2fuse *fs);
/* Checkpoint (cp_lock held exclusively): the changed entries into the quota files' pages,
 * which the checkpoint then writes. */
int quota_flush(struct f2fuse *fs);
/* Usage could not be kept exact (out of memory): checkpoints say CP_QUOTA_NEED_FSCK. */
bool quota_needs_repair(const struct f2fuse *fs);

/* The calling thread's user, for the limits (root and threads that never set one are not
 * bound, as callers with CAP_SYS_RESOURCE in the kernel). */
void quota_set_caller(uint32_t uid);

/* Every id's usage and limits (f2fuse_quota_list). */
int quota_list(struct f2fuse *fs, f2fuse_quota_fn fn, void *arg);
void quota_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

#endif
