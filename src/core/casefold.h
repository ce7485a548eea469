/* casefold.c: names in casefolded directories, folded as the kernel folds them.
 *
 * The kernel (fs/unicode, the superblock's s_encoding 1 = UTF-8 12.1) folds a name to its
 * "nfdicf" form: canonical decomposition and full case folding, Default_Ignorable code
 * points dropped, combining marks put in canonical order, code points unassigned in
 * Unicode 12.1 left as they are.  Casefolded directories hash the folded form and compare
 * names by it (docs/FORMAT.md, "Casefolded directories").  The character data comes from
 * ICU; the 12.1 cut from ICU's character ages. */
#ifndef F2FUSE_CORE_CASEFOLD_H
#define F2FUSE_CORE_CASEFOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct f2fuse;
struct inode_info;
struct dir_name;

/* The superblock's encoding fields (the kernel's f2fs_sb_encoding_map, SB_ENC_*). */
#define F2FS_ENC_UTF8_12_1          1
#define F2FS_ENC_STRICT_MODE_FL     0x0001u
#define F2FS_ENC_NO_COMPAT_FALLBACK 0x0002u

/* A folded name is shorter than F2FS_NAME_LEN: the kernel folds into a buffer of that size
 * and needs room for a terminating NUL. */
#define CASEFOLD_MAX 254

/* Reads the encoding of a casefold image: -EINVAL (and the reason logged) for an encoding
 * the kernel does not know, as it refuses such a mount.  Images without the feature need
 * nothing. */
int casefold_init(struct f2fuse *fs);
void casefold_destroy(struct f2fuse *fs);

/* Folds name into out (CASEFOLD_MAX bytes); returns the folded length, or -EINVAL when the
 * kernel cannot fold it (not UTF-8, or a folded form of more than CASEFOLD_MAX bytes).  A
 * NUL byte ends the name, as in the kernel. */
int casefold_fold(const uint8_t *name, size_t len, uint8_t *out);

/* Whether the strict flag is set (names that cannot be folded are refused). */
bool casefold_strict(const struct f2fuse *fs);

/* dirname.c's casefolded directories (the kernel's f2fs_init_casefolded_name,
 * f2fs_hash_filename, generic_ci_match): the hash of the folded name, or of the bytes when
 * the name does not fold (-EINVAL instead in strict mode). */
int casefold_name_init(struct f2fuse *fs, const struct inode_info *dir, struct dir_name *dn);
/* Whether a stored name folds to dn's folded name. */
bool casefold_same(const struct dir_name *dn, const uint8_t *stored, size_t len);
/* Whether a stored entry carries the hash its name gets in a casefolded directory. */
bool casefold_placed(struct f2fuse *fs, uint32_t hash, const uint8_t *stored, size_t len);

/* Linear search after a hash miss (the kernel's compat lookup, for entries a kernel with
 * another folding hashed): whether dir may still hold such entries, and the record that a
 * full scan found none, which stays true for the mount since f2fuse adds only entries
 * hashed as it looks them up. */
bool casefold_needs_scan(struct f2fuse *fs, uint32_t dir_ino);
void casefold_scanned_clean(struct f2fuse *fs, uint32_t dir_ino);

#endif
