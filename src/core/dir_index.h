/* dir_index.c: an in-memory index of a big directory's entries by name hash, so that a
 * lookup reads one dentry block instead of a bucket on every hash level */
#ifndef F2FUSE_CORE_DIR_INDEX_H
#define F2FUSE_CORE_DIR_INDEX_H

#include <stdbool.h>
#include <stdint.h>

struct f2fuse;
struct dir_index;

/* Directories with fewer hash levels than this are looked up by scanning: few blocks. */
#define DIR_INDEX_MIN_DEPTH 3
/* Entries at block indexes from this on are not indexed (the directory is not). */
#define DIR_INDEX_MAX_BLOCKS (1u << 24)

void dir_index_init(struct f2fuse *fs);
void dir_index_destroy(struct f2fuse *fs);

/* The index of directory ino for a lookup (referenced: dir_index_put), created empty when
 * there is none; NULL without memory.  The caller holds the directory at least shared. */
struct dir_index *dir_index_get(struct f2fuse *fs, uint32_t ino);
void dir_index_put(struct f2fuse *fs, struct dir_index *x);
/* Whether x answers lookups (built and not dropped since). */
bool dir_index_ready(const struct dir_index *x);
/* A lookup without the index scanned blocks dentry blocks: returns true when the scans
 * since the index was last tried add up to dir_blocks, i.e. building it now costs no more
 * than the lookups have already paid. */
bool dir_index_worth_building(struct dir_index *x, uint64_t blocks, uint64_t dir_blocks);

/* Building (by dir.c, under the directory's lock, shared at least): entries are added,
 * then the index is published, or abandoned on failure (too big, no memory). */
void dir_index_build_begin(struct dir_index *x);
int dir_index_build_add(struct dir_index *x, uint32_t hash, uint64_t block, uint32_t slot);
void dir_index_build_end(struct f2fuse *fs, struct dir_index *x, bool ok);

/* The candidates for hash: call with *cursor 0, then again while it returns true. */
bool dir_index_next(const struct dir_index *x, uint32_t hash, uint32_t *cursor, uint64_t *block,
                    uint32_t *slot);

/* Changes (the directory held exclusively): an entry added or removed at (block, slot). */
void dir_index_added(struct f2fuse *fs, uint32_t ino, uint32_t hash, uint64_t block, uint32_t slot);
void dir_index_removed(struct f2fuse *fs, uint32_t ino, uint32_t hash, uint64_t block,
                       uint32_t slot);
/* The directory's entries changed some other way, or its inode was freed. */
void dir_index_forget(struct f2fuse *fs, uint32_t ino);
/* An entry the index named was not there: the index is dropped (and counted). */
void dir_index_stale(struct f2fuse *fs, struct dir_index *x);

void dir_index_emit_stats(struct f2fuse *fs, void (*fn)(void *, const char *, uint64_t), void *arg);

#endif
