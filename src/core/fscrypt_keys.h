/* fscrypt_keys.c: the master keys a user gives (fs/crypto/keyring.c) and the keys derived
 * from them for one inode (keysetup.c, keysetup_v1.c).
 *
 * A master key is identified by its v2 key identifier (HKDF-SHA512 of the key, context 1)
 * and by a v1 descriptor (chosen by user space; by convention the first 8 bytes of
 * SHA-512(SHA-512(key)), as e4crypt, fscrypt and Android's vold make it).  Every secret -
 * master keys, their HKDF pseudo-random keys, the per-inode keys - lives in memory locked
 * against swapping and left out of core dumps, and is wiped (OPENSSL_cleanse) when the key
 * is removed, when a cached inode key is evicted, and at unmount.  Nothing here logs key
 * material; identifiers and descriptors are not secret. */
#ifndef F2FUSE_CORE_FSCRYPT_KEYS_H
#define F2FUSE_CORE_FSCRYPT_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <openssl/evp.h>

#include "cache/pcache.h"
#include "f2fuse.h"
#include "util/stats.h"

struct f2fuse;
struct inode_info;
struct fscrypt_master;

#define FSCRYPT_MASTER_MIN      16 /* FSCRYPT_MIN_KEY_SIZE */
#define FSCRYPT_MASTER_MAX      64 /* FSCRYPT_MAX_KEY_SIZE */
#define FSCRYPT_IDENTIFIER_SIZE 16
#define FSCRYPT_DESCRIPTOR_SIZE 8
#define FSCRYPT_MAX_MASTERS     32 /* master keys one mount holds */

/* The key one inode is encrypted with, and what its IVs need: a regular file's contents key,
 * a directory's or symlink's names key (fscrypt_prepare_key's ci_enc_key and the rest of
 * struct fscrypt_inode_info).  It lives in locked memory; hold it between fscrypt_ikey_get
 * and fscrypt_ikey_put. */
struct fscrypt_ikey {
    struct fscrypt_ikey *next; /* hash chain */
    struct fscrypt_master *master;
    uint32_t ino, generation;
    uint32_t refs;
    bool unhashed;     /* out of the cache (its inode freed or changed): wiped at the last put */
    bool orphaned;     /* its master key was removed while the file was open */
    uint64_t last_use; /* for eviction */
    uint8_t version;   /* context version: 1 or 2 */
    uint8_t mode;      /* FSCRYPT_MODE_*: the contents mode of a regular file, else names */
    uint8_t flags;     /* the policy's flags (padding, IV_INO_LBLK_64/32) */
    uint8_t log2_dus;  /* contents: data unit size (the block's when the policy says 0) */
    uint8_t key_len;
    bool has_dirhash; /* a casefolded directory: names hash with SipHash */
    uint32_t hashed_ino;
    uint8_t key[64];
    uint8_t dirhash_key[16];
    uint8_t essiv_key[32]; /* AES-128-CBC-ESSIV: SHA-256 of key */
};

/* The mount's key ring (fs->keys); the libcrypto algorithms are fetched here once.
 * -ENOMEM, or -EOPNOTSUPP when libcrypto lacks HKDF, SipHash or AES. */
int fscrypt_keys_init(struct f2fuse *fs);
/* Wipes and frees every key. */
void fscrypt_keys_destroy(struct f2fuse *fs);

/* Adds master key raw[0, len) (16..64 bytes); desc: its v1 descriptor, or NULL for the
 * conventional one.  Adding a key present already is no error; adding one removed while
 * files stayed open makes it whole again.  info gets its identifier and descriptor. */
int fscrypt_key_add(struct f2fuse *fs, const uint8_t *raw, size_t len, const uint8_t *desc,
                    struct f2fuse_key_info *info);
/* Removes the master key with this identifier (16 bytes) or descriptor (8): its secret is
 * wiped at once, and so is every inode key derived from it, but those of files open now,
 * which stay usable until their last close (FS_IOC_REMOVE_ENCRYPTION_KEY's "files busy");
 * *busy gets their number.  -ENOKEY when no such key was added. */
int fscrypt_key_remove(struct f2fuse *fs, const uint8_t *spec, size_t spec_len, unsigned *busy);
/* The keys present or still busy, then the policies met without their key. */
int fscrypt_key_list(struct f2fuse *fs, f2fuse_key_fn fn, void *arg);

/* The key of encrypted inode ii (its context read from ipage): 0 and a held key, -ENOKEY
 * when its master key is absent, its policy is one the kernel would not use or one whose
 * modes libcrypto cannot do (logged once), -EIO when the context is damaged. */
int fscrypt_ikey_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                     struct fscrypt_ikey **out);
void fscrypt_ikey_put(struct f2fuse *fs, struct fscrypt_ikey *k);
/* Inode ino was freed: its number may come back as another file. */
void fscrypt_ikey_forget(struct f2fuse *fs, uint32_t ino);
/* Inode ino's last open went: a key kept only for it goes too. */
void fscrypt_ikey_closed(struct f2fuse *fs, uint32_t ino);

/* v1 keys cannot be checked against the image (a descriptor is a label, a wrong key
 * decrypts to garbage): names decrypted with a key given under an explicit descriptor tell.
 * A name is plausible when it is one (fscrypt_name_decrypt's valid) in UTF-8.  Until
 * FSCRYPT_V1_PLAUSIBLE of them came out, or a lookup matched a stored name (confirmed), the
 * key is unchecked; one implausible name makes it wrong: dropped, with a message.
 * fscrypt_master_name_seen returns whether k's master is known to be wrong. */
#define FSCRYPT_V1_PLAUSIBLE 4
bool fscrypt_master_unchecked(const struct fscrypt_ikey *k);
bool fscrypt_master_name_seen(struct f2fuse *fs, struct fscrypt_ikey *k, bool plausible,
                              uint32_t dir_ino);
void fscrypt_master_confirmed(struct fscrypt_ikey *k);
/* A scan of a directory's names ended: plausible names and none else make the key right. */
void fscrypt_master_scan_done(struct fscrypt_ikey *k);

/* Counters "fscrypt.*". */
void fscrypt_keys_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

/* ---- for fscrypt_cipher.c: the libcrypto algorithms, fetched once (fetching them at each
 * use costs more than a block's decryption in OpenSSL 3) ---- */
struct fscrypt_algs {
    EVP_KDF *hkdf;
    EVP_MAC *siphash;
    EVP_MD *sha256, *sha512;
    EVP_CIPHER *aes128_ecb, *aes256_ecb, *aes256_xts, *aes128_cbc, *aes256_cts, *aes128_cts;
};
const struct fscrypt_algs *fscrypt_algs_of(struct f2fuse *fs);
/* Counts blocks and names that went through a cipher. */
void fscrypt_count(struct f2fuse *fs, uint64_t blocks_decrypted, uint64_t blocks_encrypted,
                   uint64_t names);

#endif
