/* namei.c: the namespace - creating, linking, removing and renaming names, and the
 * freeing of an inode whose last name and reference went away (refs.c) */
#ifndef F2FUSE_CORE_NAMEI_H
#define F2FUSE_CORE_NAMEI_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/pcache.h"
#include "core/refs.h"
#include "f2fuse.h"

struct f2fuse;

void inode_touch(struct page *ipage, bool mtime, bool ctime);
int inode_free(struct f2fuse *fs, uint32_t ino);

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
