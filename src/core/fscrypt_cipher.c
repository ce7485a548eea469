/* Contents, names and symlink targets with an inode's key (fs/crypto/crypto.c, fname.c,
 * hooks.c), every primitive from libcrypto. */
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

#include "core/fscrypt_cipher.h"
#include "core/context.h"
#include "core/fscrypt.h"
#include "core/fscrypt_keys.h"

int fscrypt_siphash(const struct fscrypt_algs *a, const uint8_t key[16], const uint8_t *msg,
                    size_t len, uint8_t out[8])
{
    EVP_MAC_CTX *c = EVP_MAC_CTX_new(a->siphash);
    if (!c)
        return -ENOMEM;
    size_t size = 8, n = 0; /* SipHash-2-4 with a 64-bit result (libcrypto's default is 128) */
    OSSL_PARAM p[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size), OSSL_PARAM_END};
    int ok = EVP_MAC_init(c, key, 16, p) == 1 && EVP_MAC_update(c, msg, len) == 1 &&
             EVP_MAC_final(c, out, &n, 8) == 1 && n == 8;
    EVP_MAC_CTX_free(c);
    return ok ? 0 : -ENOMEM;
}

/* fscrypt_generate_iv: the index little-endian in the first 8 bytes of 16, with the inode
 * number above it (IV_INO_LBLK_64) or the inode number's hash added (IV_INO_LBLK_32). */
static void make_iv(const struct fscrypt_ikey *k, uint64_t index, uint8_t iv[16])
{
    if (k->flags & FSCRYPT_POLICY_FLAG_IV_INO_LBLK_64)
        index |= (uint64_t)k->ino << 32;
    else if (k->flags & FSCRYPT_POLICY_FLAG_IV_INO_LBLK_32)
        index = (uint32_t)(k->hashed_ino + index);
    for (int i = 0; i < 8; i++)
        iv[i] = (uint8_t)(index >> (8 * i));
    memset(iv + 8, 0, 8);
}

/* ---- contents ---- */

/* AES-128-CBC-ESSIV's IV for a data unit: the plain IV encrypted with AES-256 under the
 * SHA-256 of the key. */
static int essiv(EVP_CIPHER_CTX *ecb, uint8_t iv[16])
{
    int n = 0;
    return EVP_EncryptUpdate(ecb, iv, &n, iv, 16) == 1 && n == 16 ? 0 : -EIO;
}

int fscrypt_crypt_blocks(struct f2fuse *fs, const struct fscrypt_ikey *k, bool encrypt,
                         uint64_t first_lblk, uint8_t *buf, size_t nblocks)
{
    const struct fscrypt_algs *a = fscrypt_algs_of(fs);
    bool cbc = k->mode == FSCRYPT_MODE_AES_128_CBC;
    const EVP_CIPHER *cipher = cbc ? a->aes128_cbc : a->aes256_xts;
    size_t unit = (size_t)1 << k->log2_dus, per_block = F2FS_BLKSIZE / unit;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new(), *ecb = cbc ? EVP_CIPHER_CTX_new() : NULL;
    int err = c && (!cbc || ecb) ? 0 : -ENOMEM;
    if (!err && EVP_CipherInit_ex2(c, cipher, k->key, NULL, encrypt, NULL) != 1)
        err = -EIO; /* libcrypto refuses XTS keys whose halves are equal */
    if (!err && cbc &&
        (EVP_CIPHER_CTX_set_padding(c, 0) != 1 ||
         EVP_EncryptInit_ex2(ecb, a->aes256_ecb, k->essiv_key, NULL, NULL) != 1 ||
         EVP_CIPHER_CTX_set_padding(ecb, 0) != 1))
        err = -EIO;
    for (size_t b = 0; b < nblocks && !err; b++) {
        for (size_t u = 0; u < per_block && !err; u++) {
            uint8_t iv[16], *p = buf + b * F2FS_BLKSIZE + u * unit;
            make_iv(k, (first_lblk + b) * per_block + u, iv);
            int n = 0;
            if (cbc)
                err = essiv(ecb, iv);
            if (!err && (EVP_CipherInit_ex2(c, NULL, NULL, iv, -1, NULL) != 1 ||
                         EVP_CipherUpdate(c, p, &n, p, (int)unit) != 1 || n != (int)unit))
                err = -EIO;
        }
    }
    EVP_CIPHER_CTX_free(c); /* libcrypto wipes the key schedules */
    EVP_CIPHER_CTX_free(ecb);
    if (err == -EIO)
        fs_corrupt(fs, "inode %u: libcrypto refused to %s its contents", k->ino,
                   encrypt ? "encrypt" : "decrypt");
    else if (!err)
        fscrypt_count(fs, encrypt ? 0 : nblocks, encrypt ? nblocks : 0, 0);
    return err;
}

/* ---- names: CBC with ciphertext stealing, the kernel's cts(cbc(aes)) (CS3) ---- */

static int cts(struct f2fuse *fs, const struct fscrypt_ikey *k, bool encrypt, const uint8_t *in,
               uint8_t *out, size_t len)
{
    const struct fscrypt_algs *a = fscrypt_algs_of(fs);
    const EVP_CIPHER *cipher = k->mode == FSCRYPT_MODE_AES_128_CTS ? a->aes128_cts : a->aes256_cts;
    uint8_t iv[16];
    make_iv(k, 0, iv);
    OSSL_PARAM p[] = {OSSL_PARAM_construct_utf8_string(OSSL_CIPHER_PARAM_CTS_MODE, "CS3", 0),
                      OSSL_PARAM_END};
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0, m = 0;
    bool ok = c && EVP_CipherInit_ex2(c, cipher, k->key, iv, encrypt, p) == 1 &&
              EVP_CipherUpdate(c, out, &n, in, (int)len) == 1 &&
              EVP_CipherFinal_ex(c, out + n, &m) == 1 && (size_t)(n + m) == len;
    EVP_CIPHER_CTX_free(c);
    if (ok)
        fscrypt_count(fs, 0, 0, 1);
    return ok ? 0 : -ENOMEM;
}

size_t fscrypt_name_encrypted_size(const struct fscrypt_ikey *k, size_t len, size_t max)
{
    if (len > max)
        return 0;
    size_t pad = (size_t)4 << (k->flags & FSCRYPT_POLICY_FLAGS_PAD_MASK);
    size_t n = len < FSCRYPT_MIN_CIPHERTEXT ? FSCRYPT_MIN_CIPHERTEXT : len;
    n = (n + pad - 1) / pad * pad;
    return n < max ? n : max;
}

int fscrypt_name_encrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *name,
                         size_t len, uint8_t *out, size_t out_len)
{
    if (len > out_len || out_len < FSCRYPT_MIN_CIPHERTEXT)
        return -ENAMETOOLONG;
    memcpy(out, name, len);
    memset(out + len, 0, out_len - len);
    return cts(fs, k, true, out, out, out_len);
}

int fscrypt_name_decrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *ct,
                         size_t len, uint8_t *out, size_t *plain_len, bool *valid)
{
    *plain_len = 0;
    *valid = false;
    if (len < FSCRYPT_MIN_CIPHERTEXT)
        return -EUCLEAN;
    int err = cts(fs, k, false, ct, out, len);
    if (err)
        return err;
    size_t n = strnlen((const char *)out, len);
    *plain_len = n;
    *valid = n > 0 && !memchr(out, '/', n);
    for (size_t i = n; i < len && *valid; i++)
        *valid = out[i] == 0;
    return 0;
}

int fscrypt_dirhash(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *name,
                    size_t len, uint32_t *hash)
{
    if (!k->has_dirhash)
        return fs_corrupt(fs, "directory %u: encrypted and casefolded without a dirhash key",
                          k->ino);
    uint8_t mac[8];
    int err = fscrypt_siphash(fscrypt_algs_of(fs), k->dirhash_key, name, len, mac);
    if (!err)
        *hash = (uint32_t)mac[0] | (uint32_t)mac[1] << 8 | (uint32_t)mac[2] << 16 |
                (uint32_t)mac[3] << 24;
    return err;
}

/* ---- symlink targets (struct fscrypt_symlink_data: le16 length, ciphertext, NUL) ---- */

ssize_t fscrypt_symlink_decrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const uint8_t *raw,
                                size_t raw_len, char *out)
{
    if (raw_len < 3)
        return -EUCLEAN;
    size_t len = (size_t)raw[0] | (size_t)raw[1] << 8;
    if (len == 0 || len + 2 > raw_len || len > FSCRYPT_SYMLINK_MAX_CIPHERTEXT)
        return -EUCLEAN;
    const uint8_t *ct = raw + 2;
    /* fscrypt_fname_disk_to_usr passes "." and ".." through, even as ciphertext. */
    if ((len == 1 && ct[0] == '.') || (len == 2 && ct[0] == '.' && ct[1] == '.')) {
        memcpy(out, ct, len);
        out[len] = '\0';
        return (ssize_t)len;
    }
    size_t n;
    bool valid;
    int err = fscrypt_name_decrypt(fs, k, ct, len, (uint8_t *)out, &n, &valid);
    if (err)
        return err;
    out[n] = '\0';
    /* A target is a path: '/' belongs in it; an empty one is damage (fscrypt_get_symlink). */
    return n ? (ssize_t)n : -EUCLEAN;
}

ssize_t fscrypt_symlink_encrypt(struct f2fuse *fs, const struct fscrypt_ikey *k, const char *target,
                                size_t tlen, uint8_t *out)
{
    size_t n = fscrypt_name_encrypted_size(k, tlen, FSCRYPT_SYMLINK_MAX_CIPHERTEXT);
    if (!n)
        return -ENAMETOOLONG;
    out[0] = (uint8_t)n;
    out[1] = (uint8_t)(n >> 8);
    int err = fscrypt_name_encrypt(fs, k, (const uint8_t *)target, tlen, out + 2, n);
    out[2 + n] = '\0';
    return err ? err : (ssize_t)(2 + n);
}
