/* dirname.c: a name as one directory sees it (the kernel's struct f2fs_filename).
 *
 * A directory operation turns the caller's name into a dir_name once: the hash its entry
 * carries on disk and the form stored entries are compared against.  Plain directories
 * hash and compare the bytes as given; directories with other rules (casefolded names,
 * names encrypted without the key at hand) differ only here, so that lookup, add, remove
 * and rename in dir.c stay one code path.  In an encrypted directory with its key
 * (fscrypt_keys.c) the name is encrypted here and stored names decrypted for listings. */
#ifndef F2FUSE_CORE_DIRNAME_H
#define F2FUSE_CORE_DIRNAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/pcache.h"
#include "core/casefold.h"
#include "core/format.h"
#include "core/fscrypt.h"

struct f2fuse;
struct inode_info;
struct f2fs_inode;
struct fscrypt_ikey;

struct dir_name {
    const uint8_t *name; /* as the caller gave it: what a new entry stores (NULL: nokey) */
    size_t len;
    uint32_t hash; /* the hash_code of its entry */
    /* In a casefolded directory (casefold.c): stored names match by their folded form when
     * this name folds, by their bytes when it does not. */
    bool casefolded;
    bool folded;
    uint8_t folded_len;
    uint8_t folded_name[CASEFOLD_MAX];
    /* In an encrypted directory (without its key) a caller names entries by their no-key
     * names: nk holds the decoded one, and no new entry can be made from it.  This comes
     * first: an encrypted casefolded directory matches no-key names by hash and ciphertext. */
    bool nokey;
    struct fscrypt_nokey nk;
    /* In an encrypted directory whose key is present (fscrypt_keys.c): name and len are the
     * ciphertext of the caller's name (plain), which stored names are compared against
     * byte for byte, or decrypted and folded in a casefolded directory. */
    struct fscrypt_ikey *key;
    const uint8_t *plain;
    size_t plain_len;
    uint8_t ciphertext[F2FS_NAME_LEN];
};

/* Prepares name for an operation on dir (its inode page dpage): -ENAMETOOLONG past
 * F2FS_NAME_LEN, -ENOENT for an empty name or, in an encrypted directory without its key,
 * one that is no no-key name, -EINVAL for a name a strict casefolded directory cannot fold.
 * Release with dir_name_release. */
int dir_name_init(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                  const char *name, size_t len, struct dir_name *dn);
void dir_name_release(struct f2fuse *fs, struct dir_name *dn);
/* Prepares the name inode ri records for itself (i_name, as its entry stores it: ciphertext
 * in an encrypted directory, with the hash after it when that needs the key), for
 * roll-forward recovery.  dn points into ri. */
int dir_name_init_recorded(struct f2fuse *fs, const struct inode_info *dir,
                           const struct f2fs_inode *ri, struct dir_name *dn);
/* Whether the stored entry (its hash and name bytes) is dn. */
bool dir_name_matches(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                      uint32_t stored_hash, const uint8_t *stored, size_t stored_len);
/* The name test alone: a scan after a hash miss (dir_name_scan_on_miss) ignores hashes. */
bool dir_name_same(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                   const uint8_t *stored, size_t stored_len);
/* Whether a miss of the hashed lookup must be confirmed by a scan of every entry: entries a
 * kernel with another folding hashed may sit in other buckets (casefold.c). */
bool dir_name_scan_on_miss(struct f2fuse *fs, const struct inode_info *dir,
                           const struct dir_name *dn);
/* A scan met only entries hashed as their names are here: no more scans of dir. */
void dir_name_scan_clean(struct f2fuse *fs, const struct inode_info *dir);
/* Whether a stored entry carries the hash its name gets here (a scan notes those that do
 * not). */
bool dir_name_placed(struct f2fuse *fs, const struct inode_info *dir, uint32_t stored_hash,
                     const uint8_t *stored, size_t stored_len);

/* The name a listing shows for a stored entry: its bytes, or in an encrypted directory the
 * name decrypted with key (the directory's, or NULL without it) or its no-key name (built in
 * buf).  A stored name no encryption makes is damage (-EIO); one that decrypts to no valid
 * name is shown by its no-key name, with a `corrupt image:` line. */
#define DIR_NAME_SHOW_MAX (F2FS_NAME_LEN + 1)
int dir_name_show(struct f2fuse *fs, const struct inode_info *dir, struct fscrypt_ikey *key,
                  uint32_t stored_hash, const uint8_t *stored, size_t stored_len,
                  char buf[DIR_NAME_SHOW_MAX], const char **shown, size_t *shown_len);

#endif
