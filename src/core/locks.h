/* The inode lock stripes */
#ifndef F2FUSE_CORE_LOCKS_H
#define F2FUSE_CORE_LOCKS_H

#include <stdint.h>

struct f2fuse;

void inode_lock_many(struct f2fuse *fs, const uint32_t *inos, int n); /* exclusive */
void inode_unlock_many(struct f2fuse *fs, const uint32_t *inos, int n);
void inode_lock_shared(struct f2fuse *fs, uint32_t ino); /* for reading only; not nested */
void inode_unlock_shared(struct f2fuse *fs, uint32_t ino);

/* The shell of a one-inode change: cp_lock shared, the inode's stripe exclusive. */
void op_change_begin(struct f2fuse *fs, uint32_t ino);
void op_change_end(struct f2fuse *fs, uint32_t ino);
/* The shell of a read: cp_lock and the stripe shared, so that a reader never sees an inode
 * or directory block halfway through a change, and no block it reads is moved (writeback,
 * GC) and reused meanwhile. */
void op_read_begin(struct f2fuse *fs, uint32_t ino);
void op_read_end(struct f2fuse *fs, uint32_t ino);
/* A read that goes on after its shell (f2fuse_read_async) is pinned inside it until its
 * device read is done; a checkpoint, holding cp_lock for writing, waits for every pin to go
 * before it commits (blocks freed since the last one become reusable then). */
void read_pin(struct f2fuse *fs);
void read_unpin(struct f2fuse *fs);
void read_pins_drain(struct f2fuse *fs);

#endif
