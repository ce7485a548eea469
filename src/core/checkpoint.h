/* checkpoint.c: loading the valid checkpoint pack and writing the next one */
#ifndef F2FUSE_CORE_CHECKPOINT_H
#define F2FUSE_CORE_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

struct f2fuse;

/* What a checkpoint writes besides the nodes, NAT, SIT and the pack.  As the kernel's f2fs:
 * a checkpoint is a consistent view of the metadata, and regular files' data gets there
 * by writeback (writeback.c) or fsync; a reserved block whose data is not written yet is
 * recorded as NEW_ADDR and reads as zeros after a crash.  Directory and symlink blocks are
 * metadata (every checkpoint writes them).  CP_ALL_DATA also writes every dirty data page
 * first: sync, syncfs and unmount (the VFS's sync_filesystem does that before ->sync_fs),
 * and the callers that need the space writeback frees (pressure, GC). */
enum cp_scope { CP_METADATA, CP_ALL_DATA };

int checkpoint_load(struct f2fuse *fs);
int checkpoint_write(struct f2fuse *fs, bool umount, enum cp_scope scope, const uint32_t *orphans,
                     uint32_t norphans);
/* The orphan inodes the valid checkpoint lists (malloc'ed array). */
int checkpoint_read_orphans(struct f2fuse *fs, uint32_t **out, uint32_t *count);

/* f2fuse info: the version of checkpoint pack index (0 or 1) when it is intact. */
int checkpoint_pack_version(struct f2fuse *fs, unsigned index, uint64_t *version);

#endif
