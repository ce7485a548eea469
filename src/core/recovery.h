/* recovery.c: roll-forward recovery of what fsync wrote after the last checkpoint */
#ifndef F2FUSE_CORE_RECOVERY_H
#define F2FUSE_CORE_RECOVERY_H

#include <stdint.h>

struct f2fuse;
struct inode_info;

/* recovery.c: replays what fsync wrote after the last checkpoint (roll-forward). */
/* orphans: the inodes the mount freed just before (their fsync'ed nodes are moot). */
int recovery_run(struct f2fuse *fs, const uint32_t *orphans, uint32_t norphans);

/* recovery.c: the first file block a direct node at footer offset ofs maps (UINT64_MAX for
 * nodes that map none). */
uint64_t dnode_first_block(const struct inode_info *ii, uint32_t ofs);

/* f2fuse info: the nodes fsync wrote after the checkpoint that a read-write mount would replay. */
int recovery_pending(struct f2fuse *fs, uint32_t *nodes);

#endif
