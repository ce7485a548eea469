/* dirname.c: a name as one directory sees it (the kernel's struct f2fs_filename).
 *
 * A directory operation turns the caller's name into a dir_name once: the hash its entry
 * carries on disk and the form stored entries are compared against.  Plain directories
 * hash and compare the bytes as given; directories with other rules (casefolded names,
 * names encrypted without the key at hand) differ only here, so that lookup, add, remove
 * and rename in dir.c stay one code path. */
#ifndef F2FUSE_CORE_DIRNAME_H
#define F2FUSE_CORE_DIRNAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct f2fuse;
struct inode_info;

struct dir_name {
    const uint8_t *name; /* as the caller gave it: what a new entry stores */
    size_t len;
    uint32_t hash; /* the hash_code of its entry */
};

/* Prepares name for an operation on dir: -ENAMETOOLONG past F2FS_NAME_LEN, -ENOENT for an
 * empty name. */
int dir_name_init(struct f2fuse *fs, const struct inode_info *dir, const char *name, size_t len,
                  struct dir_name *dn);
/* Whether the stored entry (its hash and name bytes) is dn. */
bool dir_name_matches(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                      uint32_t stored_hash, const uint8_t *stored, size_t stored_len);

#endif
