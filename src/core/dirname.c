/* A name as one directory sees it: its entry's hash and how stored entries match it
 * (fs/f2fs/dir.c f2fs_setup_filename, f2fs_match_name; fs/crypto/fname.c for encrypted
 * directories, whose names f2fuse sees only as no-key names). */
#include <errno.h>
#include <string.h>

#include "core/dirname.h"
#include "core/casefold.h"
#include "core/context.h"
#include "core/dir.h"
#include "core/inode.h"

static bool is_dot_or_dotdot(const uint8_t *name, size_t len)
{
    return (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.');
}

int dir_name_init(struct f2fuse *fs, const struct inode_info *dir, const char *name, size_t len,
                  struct dir_name *dn)
{
    memset(dn, 0, sizeof(*dn));
    if (len == 0)
        return -ENOENT;
    if (len > F2FS_NAME_LEN)
        return -ENAMETOOLONG;
    if (fscrypt_encrypted(dir) && !is_dot_or_dotdot((const uint8_t *)name, len)) {
        if (fscrypt_nokey_decode(name, len, &dn->nk))
            return -ENOENT;
        dn->nokey = true;
        dn->hash = dn->nk.hash; /* what the entry carries: the no-key name says it */
        return 0;
    }
    dn->name = (const uint8_t *)name;
    dn->len = len;
    if ((dir->flags & F2FS_CASEFOLD_FL) && !is_dot_or_dotdot(dn->name, len))
        return casefold_name_init(fs, dir, dn);
    dn->hash = dentry_hash(dn->name, len);
    return 0;
}

int dir_name_init_recorded(struct f2fuse *fs, const struct inode_info *dir,
                           const struct f2fs_inode *ri, struct dir_name *dn)
{
    size_t len = le32(ri->i_namelen);
    if (!fscrypt_encrypted(dir) || len == 0 || len > F2FS_NAME_LEN)
        return dir_name_init(fs, dir, (const char *)ri->i_name, len, dn);
    memset(dn, 0, sizeof(*dn));
    dn->name = ri->i_name;
    dn->len = len;
    if (!(dir->flags & F2FS_CASEFOLD_FL)) {
        dn->hash = dentry_hash(dn->name, len); /* TEA over the ciphertext */
        return 0;
    }
    /* Encrypted and casefolded: the hash is keyed, so init_dent_inode put it after the name
     * (or, without room, left the name to a checkpoint). */
    if (len + sizeof(uint32_t) > F2FS_NAME_LEN)
        return fs_corrupt(fs, "recovery: encrypted casefolded name of %zu bytes has no hash", len);
    uint32_t hash;
    memcpy(&hash, ri->i_name + len, sizeof(hash));
    dn->hash = le32(hash);
    return 0;
}

bool dir_name_matches(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                      uint32_t stored_hash, const uint8_t *stored, size_t stored_len)
{
    return stored_hash == dn->hash && dir_name_same(fs, dir, dn, stored, stored_len);
}

bool dir_name_same(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                   const uint8_t *stored, size_t stored_len)
{
    if (dn->nokey)
        return fscrypt_nokey_matches(&dn->nk, stored, stored_len);
    if (dn->folded)
        return casefold_same(dn, stored, stored_len);
    return stored_len == dn->len && memcmp(stored, dn->name, dn->len) == 0;
}

bool dir_name_scan_on_miss(struct f2fuse *fs, const struct inode_info *dir,
                           const struct dir_name *dn)
{
    return dn->casefolded && casefold_needs_scan(fs, dir->ino);
}

void dir_name_scan_clean(struct f2fuse *fs, const struct inode_info *dir)
{
    casefold_scanned_clean(fs, dir->ino);
}

bool dir_name_placed(struct f2fuse *fs, const struct inode_info *dir, uint32_t stored_hash,
                     const uint8_t *stored, size_t stored_len)
{
    if (is_dot_or_dotdot(stored, stored_len))
        return stored_hash == 0;
    if (fscrypt_encrypted(dir) && (dir->flags & F2FS_CASEFOLD_FL))
        return true; /* a keyed hash (SipHash of the plaintext): not ours to check */
    if (dir->flags & F2FS_CASEFOLD_FL)
        return casefold_placed(fs, stored_hash, stored, stored_len);
    return stored_hash == dentry_hash(stored, stored_len);
}

int dir_name_show(struct f2fuse *fs, const struct inode_info *dir, uint32_t stored_hash,
                  const uint8_t *stored, size_t stored_len, char buf[DIR_NAME_SHOW_MAX],
                  const char **shown, size_t *shown_len)
{
    *shown = (const char *)stored;
    *shown_len = stored_len;
    if (!fscrypt_encrypted(dir) || is_dot_or_dotdot(stored, stored_len))
        return 0;
    if (stored_len < FSCRYPT_MIN_CIPHERTEXT)
        return fs_corrupt(fs,
                          "encrypted directory %u: a stored name of %zu bytes is shorter "
                          "than any ciphertext",
                          dir->ino, stored_len);
    /* f2fs fills in only the first hash word (f2fs_fill_dentries). */
    ssize_t n = fscrypt_nokey_encode(stored_hash, 0, stored, stored_len, buf);
    if (n < 0)
        return (int)n;
    *shown = buf;
    *shown_len = (size_t)n;
    return 0;
}
