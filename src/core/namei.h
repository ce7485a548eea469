/* namei.c: the namespace - creating, linking, removing and renaming names, and the
 * references (opens, lookups) that keep unlinked inodes alive */
#ifndef F2FUSE_CORE_NAMEI_H
#define F2FUSE_CORE_NAMEI_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/pcache.h"
#include "f2fuse.h"

struct f2fuse;

void inode_touch(struct page *ipage, bool mtime, bool ctime);
int inode_open(struct f2fuse *fs, uint32_t ino);
int inode_release(struct f2fuse *fs, uint32_t ino);
/* Opens with write access among an inode's opens (after inode_open, before its release). */
void inode_writer_change(struct f2fuse *fs, uint32_t ino, int delta);
bool inode_writers(struct f2fuse *fs, uint32_t ino);
/* Whether ino is open now (fscrypt_keys.c keeps a removed key's files usable until closed;
 * takes ref_lock, so callers may hold the key ring's lock but not ref_lock). */
bool inode_is_open(struct f2fuse *fs, uint32_t ino);
int inode_free(struct f2fuse *fs, uint32_t ino);
int inode_forget(struct f2fuse *fs, uint32_t ino, uint64_t n);
int inode_lookup_ref(struct f2fuse *fs, uint32_t ino); /* with opts.track_lookups */
void inode_refs_destroy(struct f2fuse *fs);
/* The inodes the caller holds (opens, lookups), malloc'ed (fscrypt key changes). */
uint32_t *inode_refs_held(struct f2fuse *fs, uint32_t *count);
/* The unlinked-but-open inodes, for the checkpoint's orphan list (malloc'ed). */
uint32_t *inode_orphans(struct f2fuse *fs, uint32_t *count);

/* The namespace operations (names checked, space reserved, locks taken here): a regular
 * file, device, fifo, socket, directory or (target != NULL) symlink; a new name for ino;
 * a name removed (want_dir: rmdir); a rename with F2FUSE_RENAME_* flags. */
int namei_create(struct f2fuse *fs, uint32_t parent, const char *name, size_t len, uint32_t mode,
                 uint64_t rdev, uint32_t uid, uint32_t gid, const char *target,
                 struct f2fuse_attr *out);
int namei_link(struct f2fuse *fs, uint32_t ino, uint32_t parent, const char *name, size_t len,
               struct f2fuse_attr *out);
int namei_remove(struct f2fuse *fs, uint32_t parent, const char *name, size_t len, bool want_dir);
int namei_rename(struct f2fuse *fs, uint32_t old_parent, const char *old_name, size_t old_len,
                 uint32_t new_parent, const char *new_name, size_t new_len, unsigned flags);

#endif
