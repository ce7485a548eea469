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

#include "core/fscrypt.h"

struct f2fuse;
struct inode_info;
struct f2fs_inode;

struct dir_name {
    const uint8_t *name; /* as the caller gave it: what a new entry stores (NULL: nokey) */
    size_t len;
    uint32_t hash; /* the hash_code of its entry */
    /* In an encrypted directory (without its key) a caller names entries by their no-key
     * names: nk holds the decoded one, and no new entry can be made from it. */
    bool nokey;
    struct fscrypt_nokey nk;
};

/* Prepares name for an operation on dir: -ENAMETOOLONG past F2FS_NAME_LEN, -ENOENT for an
 * empty name or, in an encrypted directory, one that is no no-key name. */
int dir_name_init(struct f2fuse *fs, const struct inode_info *dir, const char *name, size_t len,
                  struct dir_name *dn);
/* Prepares the name inode ri records for itself (i_name, as its entry stores it: ciphertext
 * in an encrypted directory, with the hash after it when that needs the key), for
 * roll-forward recovery.  dn points into ri. */
int dir_name_init_recorded(struct f2fuse *fs, const struct inode_info *dir,
                           const struct f2fs_inode *ri, struct dir_name *dn);
/* Whether the stored entry (its hash and name bytes) is dn. */
bool dir_name_matches(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                      uint32_t stored_hash, const uint8_t *stored, size_t stored_len);

/* The name a listing shows for a stored entry: its bytes, or in an encrypted directory its
 * no-key name (built in buf).  A stored name no encryption makes is damage (-EIO). */
#define DIR_NAME_SHOW_MAX (FSCRYPT_NOKEY_MAX_ENCODED + 1)
int dir_name_show(struct f2fuse *fs, const struct inode_info *dir, uint32_t stored_hash,
                  const uint8_t *stored, size_t stored_len, char buf[DIR_NAME_SHOW_MAX],
                  const char **shown, size_t *shown_len);

#endif
