/* fscrypt_cipher.c: what an inode's key does (fs/crypto/crypto.c, fname.c, hooks.c):
 * contents data units in AES-256-XTS (or AES-128-CBC-ESSIV), names and symlink targets in
 * AES-CBC-CTS with the policy's NUL padding, the SipHash of names in encrypted casefolded
 * directories.  IVs as fscrypt_generate_iv: the data unit index (0 for names), with the
 * inode number in it (IV_INO_LBLK_64) or added to its hash (IV_INO_LBLK_32).  Every cipher
 * is libcrypto's. */
#ifndef F2FUSE_CORE_FSCRYPT_CIPHER_H
#define F2FUSE_CORE_FSCRYPT_CIPHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct f2fuse;
struct fscrypt_ikey;
struct fscrypt_algs;

/* Longest encrypted symlink target: the block less its le16 length and its NUL. */
#define FSCRYPT_SYMLINK_MAX_CIPHERTEXT (4096 - 3)

/* SipHash-2-4 of msg under a 16-byte key: out gets the 8 bytes, little-endian. */
int fscrypt_siphash(const struct fscrypt_algs *a, const uint8_t key[16], const uint8_t *msg,
                    size_t len, uint8_t out[8]);

/* Encrypts or decrypts nblocks whole file blocks in place, from file block first_lblk. */
int fscrypt_crypt_blocks(struct f2fuse *fs, const struct fscrypt_ikey *k, bool encrypt,
                         uint64_t first_lblk, uint8_t *buf, size_t nblocks);

/* The size a name of len bytes encrypts to (fscrypt_fname_encrypted_size): at least one AES
 * block, NUL-padded to the policy's 4, 8, 16 or 32 bytes, at most max; 0 when len > max. */
size_t fscrypt_name_encrypted_size(const struct fscrypt_ikey *k, size_t len, size_t max);
/* name[0, len) padded to out_len bytes and encrypted into out. */
int fscrypt_name_encrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *name,
                         size_t len, uint8_t *out, size_t out_len);
/* Decrypts a stored name of len bytes (at least 16) into out (len bytes); *plain_len gets
 * the name up to its first NUL.  *valid: whether it is a name a kernel could have encrypted
 * (not empty, no '/', only NULs after the first NUL): a name that is not is damage, or
 * comes from a wrong v1 key. */
int fscrypt_name_decrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *ct,
                         size_t len, uint8_t *out, size_t *plain_len, bool *valid);
/* The hash of a name in an encrypted casefolded directory: SipHash of the (folded) name
 * under the directory's dirhash key, its low 32 bits (fscrypt_fname_siphash). */
int fscrypt_dirhash(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *name,
                    size_t len, uint32_t *hash);

/* An encrypted symlink's stored target (struct fscrypt_symlink_data) decrypted into out
 * (FSCRYPT_SYMLINK_MAX_CIPHERTEXT + 1 bytes, NUL-terminated): its length, or -EUCLEAN for a
 * target no kernel writes (fscrypt_get_symlink). */
ssize_t fscrypt_symlink_decrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *raw,
                                size_t raw_len, char *out);

/* target (tlen bytes) as an encrypted symlink stores it, into out (FSCRYPT_SYMLINK_MAX_CIPHERTEXT
 * + 3 bytes): le16 length, ciphertext, NUL; returns the size of the target's data, the NUL
 * excluded (i_size), or -ENAMETOOLONG (__fscrypt_prepare_symlink). */
ssize_t fscrypt_symlink_encrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const char *target,
                                size_t tlen, uint8_t *out);

#endif
