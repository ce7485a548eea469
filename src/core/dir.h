/* dir.c and hash.c: directory entries - lookup, listing, adding and removing names */
#ifndef F2FUSE_CORE_DIR_H
#define F2FUSE_CORE_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/pcache.h"
#include "f2fuse.h"

struct f2fuse;
struct inode_info;
struct f2fs_inode;

uint32_t dentry_hash(const uint8_t *name, size_t len);
/* The TEA hash alone, without dentry_hash's 0 for "." and "..". */
uint32_t tea_hash(const uint8_t *name, size_t len);

int dir_lookup(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
               const char *name, size_t len, uint32_t *ino);
/* Roll-forward recovery: the name inode ri records for itself (i_name, in its on-disk
 * form: ciphertext in an encrypted directory). */
int dir_lookup_recorded(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                        const struct f2fs_inode *ri, uint32_t *ino);
int dir_add_recorded(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     const struct f2fs_inode *ri, uint32_t ino, uint16_t mode);
/* Lists dir from cookie; an encrypted directory's names as their no-key names. */
int dir_iterate(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                uint64_t cookie, f2fuse_dirent_fn fn, void *arg);

/* Write side: entries are added at the lowest hash level with room (inline directories
 * move to a block when full); mode gives the entry's file type. */
uint8_t dir_file_type(uint16_t mode);
int dir_add_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, const char *name,
                  size_t len, uint32_t ino, uint16_t mode);
int dir_remove_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     const char *name, size_t len, uint32_t *ino);
int dir_set_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, const char *name,
                  size_t len, uint32_t ino, uint16_t mode);
int dir_init(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, uint32_t parent);
int dir_is_empty(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage, bool *empty);

#endif
