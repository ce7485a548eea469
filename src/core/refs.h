/* refs.c: the references the caller holds on inodes (opens, and the FUSE kernel's lookups)
 * that keep an unlinked inode alive until the last one goes */
#ifndef F2FUSE_CORE_REFS_H
#define F2FUSE_CORE_REFS_H

#include <stdbool.h>
#include <stdint.h>

struct f2fuse;

void refs_init(struct f2fuse *fs);
void inode_refs_destroy(struct f2fuse *fs);

int inode_open(struct f2fuse *fs, uint32_t ino);
int inode_release(struct f2fuse *fs, uint32_t ino);
/* Opens with write access among an inode's opens (after inode_open, before its release). */
void inode_writer_change(struct f2fuse *fs, uint32_t ino, int delta);
bool inode_writers(struct f2fuse *fs, uint32_t ino);
/* Whether ino is open now (fscrypt_keys.c keeps a removed key's files usable until closed;
 * takes a reference stripe's lock, so callers may hold the key ring's lock). */
bool inode_is_open(struct f2fuse *fs, uint32_t ino);
int inode_forget(struct f2fuse *fs, uint32_t ino, uint64_t n);
int inode_lookup_ref(struct f2fuse *fs, uint32_t ino); /* with opts.track_lookups */
/* The last name of ino went away: returns true when something still holds it (then it is
 * freed at its last release or forget), false when the caller frees it now.  blocks: what
 * the inode occupies, counted as free at once while only the kernel's lookups hold it. */
bool inode_ref_unlinked(struct f2fuse *fs, uint32_t ino, uint64_t blocks);
/* The inodes the caller holds (opens, lookups), malloc'ed (fscrypt key changes). */
uint32_t *inode_refs_held(struct f2fuse *fs, uint32_t *count);
/* The unlinked-but-open inodes, for the checkpoint's orphan list (malloc'ed). */
uint32_t *inode_orphans(struct f2fuse *fs, uint32_t *count);

#endif
