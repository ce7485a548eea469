/* A name as one directory sees it: its entry's hash and how stored entries match it
 * (fs/f2fs/dir.c f2fs_setup_filename, f2fs_match_name; fs/crypto/fname.c for encrypted
 * directories, whose names f2fuse sees only as no-key names). */
#include <errno.h>
#include <string.h>

#include "core/dirname.h"
#include "core/casefold.h"
#include "core/context.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"
#include "core/dir.h"
#include "core/inode.h"

static bool is_dot_or_dotdot(const uint8_t *name, size_t len)
{
    return (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.');
}

/* A name in an encrypted directory with its key: the entry stores its ciphertext, hashed
 * (TEA) as stored, or in a casefolded directory by the SipHash of the folded plaintext
 * (fscrypt_setup_filename, f2fs_hash_filename). */
static int encrypted_name_init(struct f2fuse *fs, const struct inode_info *dir, struct dir_name *dn,
                               const uint8_t *name, size_t len)
{
    dn->plain = name;
    dn->plain_len = len;
    size_t n = fscrypt_name_encrypted_size(dn->key, len, F2FS_NAME_LEN);
    int err = fscrypt_name_encrypt(fs, dn->key, name, len, dn->ciphertext, n);
    if (err)
        return err;
    if (!(dir->flags & F2FS_CASEFOLD_FL)) {
        dn->name = dn->ciphertext;
        dn->len = n;
        dn->hash = dentry_hash(dn->name, n);
        return 0;
    }
    dn->name = name; /* casefold.c folds what the caller gave */
    dn->len = len;
    err = casefold_name_init(fs, dir, dn);
    dn->name = dn->ciphertext;
    dn->len = n;
    if (!err)
        err = dn->folded ? fscrypt_dirhash(fs, dn->key, dn->folded_name, dn->folded_len, &dn->hash)
                         : fscrypt_dirhash(fs, dn->key, name, len, &dn->hash);
    return err;
}

int dir_name_init(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                  const char *name, size_t len, struct dir_name *dn)
{
    memset(dn, 0, sizeof(*dn));
    if (len == 0)
        return -ENOENT;
    if (len > F2FS_NAME_LEN)
        return -ENAMETOOLONG;
    if (fscrypt_encrypted(dir) && !is_dot_or_dotdot((const uint8_t *)name, len)) {
        int err = fscrypt_ikey_get(fs, dir, dpage, &dn->key);
        if (!err) {
            err = encrypted_name_init(fs, dir, dn, (const uint8_t *)name, len);
            if (err)
                dir_name_release(fs, dn);
            return err;
        }
        if (err != -ENOKEY)
            return err;
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

void dir_name_release(struct f2fuse *fs, struct dir_name *dn)
{
    fscrypt_ikey_put(fs, dn->key);
    dn->key = NULL;
}

int dir_name_init_recorded(struct f2fuse *fs, const struct inode_info *dir,
                           const struct f2fs_inode *ri, struct dir_name *dn)
{
    size_t len = le32(ri->i_namelen);
    if (!fscrypt_encrypted(dir) || len == 0 || len > F2FS_NAME_LEN)
        return dir_name_init(fs, dir, NULL, (const char *)ri->i_name, len, dn);
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

/* With the key: the ciphertext compared, or in a casefolded directory the stored name
 * decrypted and compared as generic_ci_match does (exactly, then folded). */
static bool encrypted_same(struct f2fuse *fs, const struct inode_info *dir,
                           const struct dir_name *dn, const uint8_t *stored, size_t stored_len)
{
    if (!dn->casefolded) {
        bool same = stored_len == dn->len && memcmp(stored, dn->name, dn->len) == 0;
        if (same) /* a v1 key that encrypts a stored name is the right one */
            fscrypt_master_confirmed(dn->key);
        return same;
    }
    uint8_t plain[F2FS_NAME_LEN];
    size_t n;
    bool valid;
    if (fscrypt_name_decrypt(fs, dn->key, stored, stored_len, plain, &n, &valid) || !valid)
        return false;
    if (n == dn->plain_len && memcmp(plain, dn->plain, n) == 0)
        return true;
    return dn->folded && casefold_same(dn, plain, n);
}

bool dir_name_same(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                   const uint8_t *stored, size_t stored_len)
{
    if (dn->nokey)
        return fscrypt_nokey_matches(&dn->nk, stored, stored_len);
    if (dn->key)
        return encrypted_same(fs, dir, dn, stored, stored_len);
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

/* Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what a
 * name a user made is, and what bytes decrypted with a wrong key are not. */
static bool utf8_valid(const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        if (!len || i + len > n)
            return false;
        uint32_t cp = len == 1 ? c : c & (0xff >> (len + 1));
        for (size_t j = 1; j < len; j++) {
            if ((p[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + j] & 0x3f);
        }
        static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

int dir_name_show(struct f2fuse *fs, const struct inode_info *dir, struct fscrypt_ikey *key,
                  uint32_t stored_hash, const uint8_t *stored, size_t stored_len,
                  char buf[DIR_NAME_SHOW_MAX], const char **shown, size_t *shown_len)
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
    if (key) {
        size_t n;
        bool valid;
        int err = fscrypt_name_decrypt(fs, key, stored, stored_len, (uint8_t *)buf, &n, &valid);
        if (err)
            return err;
        bool wrong_key = fscrypt_master_name_seen(fs, key, valid && utf8_valid(buf, n), dir->ino);
        if (valid && !wrong_key) {
            buf[n] = '\0';
            *shown = buf;
            *shown_len = n;
            return 0;
        }
        /* Never garbage for a name: its no-key name, which says nothing false. */
        if (!wrong_key)
            fs_corrupt(fs,
                       "encrypted directory %u: a stored name does not decrypt to a name; "
                       "listed by its no-key name",
                       dir->ino);
    }
    /* f2fs fills in only the first hash word (f2fs_fill_dentries). */
    ssize_t n = fscrypt_nokey_encode(stored_hash, 0, stored, stored_len, buf);
    if (n < 0)
        return (int)n;
    *shown = buf;
    *shown_len = (size_t)n;
    return 0;
}
