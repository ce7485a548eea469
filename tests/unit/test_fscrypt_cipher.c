/* Unit tests of core/fscrypt_cipher.c and fscrypt_keys.c with known answers: AES-CBC-CTS
 * (RFC 3962 appendix B, the kernel's cts(cbc(aes))), AES-256-XTS (IEEE P1619 vector 10),
 * SipHash-2-4 (the SipHash paper's vectors), HKDF-SHA512 (the kernel's crypto/hkdf.c), the
 * IV flavours, name padding and the validity of decrypted names, symlink targets, and a
 * master key's identifier and v1 descriptor as tests/integration/f2crypt.py (an independent
 * implementation) computes them. */
#include <errno.h>
#include <openssl/evp.h>
#include <string.h>

#include "check.h"
#include "core/context.h"
#include "core/fscrypt.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"

static struct f2fuse *fs;

static void unhex(const char *h, uint8_t *out)
{
    for (size_t i = 0; h[2 * i]; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static struct fscrypt_ikey names_key(uint8_t mode, const char *key, size_t len, uint8_t flags)
{
    struct fscrypt_ikey k = {.version = 2, .mode = mode, .flags = flags, .key_len = (uint8_t)len};
    memcpy(k.key, key, len);
    return k;
}

static void cts_rfc3962(void)
{
    static const char msg[] = "I would like the General Gau's Chicken, please, and wonton soup.";
    static const struct {
        size_t n;
        const char *ct;
    } v[] = {{17, "c6353568f2bf8cb4d8a580362da7ff7f97"},
             {31, "fc00783e0efdb2c1d445d4c8eff7ed2297687268d6ecccc0c07b25e25ecfe5"},
             {32, "39312523a78662d5be7fcbcc98ebf5a897687268d6ecccc0c07b25e25ecfe584"},
             {47, "97687268d6ecccc0c07b25e25ecfe584b3fffd940c16a18c1b5549d2f838029e39312523a786"
                  "62d5be7fcbcc98ebf5"},
             {48, "97687268d6ecccc0c07b25e25ecfe5849dad8bbb96c4cdc03bc103e1a194bbd839312523a786"
                  "62d5be7fcbcc98ebf5a8"},
             {64, "97687268d6ecccc0c07b25e25ecfe58439312523a78662d5be7fcbcc98ebf5a84807efe836ee"
                  "89a526730dbc2f7bc8409dad8bbb96c4cdc03bc103e1a194bbd8"}};
    struct fscrypt_ikey k = names_key(FSCRYPT_MODE_AES_128_CTS, "chicken teriyaki", 16, 0);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t want[64], out[64], back[64];
        unhex(v[i].ct, want);
        CHECK_EQ(fscrypt_name_encrypt(fs, &k, (const uint8_t *)msg, v[i].n, out, v[i].n), 0);
        CHECK(memcmp(out, want, v[i].n) == 0);
        size_t n;
        bool valid;
        CHECK_EQ(fscrypt_name_decrypt(fs, &k, out, v[i].n, back, &n, &valid), 0);
        CHECK_EQ(n, v[i].n);
        CHECK(valid);
        CHECK(memcmp(back, msg, n) == 0);
    }
}

static void xts_ieee1619(void)
{
    /* Vector 10: 512-byte data unit 0xff.  Here the eighth 512-byte unit of file block 31
     * (31 * 8 + 7 = 0xff) with log2_data_unit_size 9. */
    struct fscrypt_ikey k = {
        .version = 2, .mode = FSCRYPT_MODE_AES_256_XTS, .log2_dus = 9, .key_len = 64};
    unhex("27182818284590452353602874713526624977572470936999595749669676273141592653589793238462"
          "643383279502884197169399375105820974944592",
          k.key);
    uint8_t block[4096] = {0};
    for (int i = 0; i < 512; i++)
        block[3584 + i] = (uint8_t)i;
    uint8_t want[32], orig[4096];
    memcpy(orig, block, sizeof(block));
    unhex("1c3b3a102f770386e4836c99e370cf9bea00803f5e482357a4ae12d414a3e63b", want);
    CHECK_EQ(fscrypt_crypt_blocks(fs, &k, true, 31, block, 1), 0);
    CHECK(memcmp(block + 3584, want, sizeof(want)) == 0);
    CHECK_EQ(fscrypt_crypt_blocks(fs, &k, false, 31, block, 1), 0);
    CHECK(memcmp(block, orig, sizeof(block)) == 0);
}

/* The same block under an explicit IV, through libcrypto directly. */
static void xts_with_iv(const uint8_t *key, uint64_t index, const uint8_t *in, uint8_t *out)
{
    uint8_t iv[16] = {0};
    for (int i = 0; i < 8; i++)
        iv[i] = (uint8_t)(index >> (8 * i));
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0;
    EVP_EncryptInit_ex(c, EVP_aes_256_xts(), NULL, key, iv);
    EVP_EncryptUpdate(c, out, &n, in, 4096);
    EVP_CIPHER_CTX_free(c);
}

static void iv_flavours(void)
{
    struct fscrypt_ikey k = {.version = 2,
                             .mode = FSCRYPT_MODE_AES_256_XTS,
                             .log2_dus = 12,
                             .key_len = 64,
                             .ino = 0x12345678};
    for (int i = 0; i < 64; i++)
        k.key[i] = (uint8_t)(i * 7 + 1);
    uint8_t in[4096], got[4096], want[4096];
    for (int i = 0; i < 4096; i++)
        in[i] = (uint8_t)(i ^ (i >> 8));
    /* per-file keys: the block index alone */
    memcpy(got, in, sizeof(in));
    fscrypt_crypt_blocks(fs, &k, true, 5, got, 1);
    xts_with_iv(k.key, 5, in, want);
    CHECK(memcmp(got, want, sizeof(got)) == 0);
    /* IV_INO_LBLK_64: the inode number in bits 32..63 */
    k.flags = FSCRYPT_POLICY_FLAG_IV_INO_LBLK_64;
    memcpy(got, in, sizeof(in));
    fscrypt_crypt_blocks(fs, &k, true, 5, got, 1);
    xts_with_iv(k.key, 5 | (uint64_t)0x12345678 << 32, in, want);
    CHECK(memcmp(got, want, sizeof(got)) == 0);
    /* IV_INO_LBLK_32: the inode's hash plus the index, mod 2^32 */
    k.flags = FSCRYPT_POLICY_FLAG_IV_INO_LBLK_32;
    k.hashed_ino = 0xfffffffeu;
    memcpy(got, in, sizeof(in));
    fscrypt_crypt_blocks(fs, &k, true, 5, got, 1);
    xts_with_iv(k.key, 3, in, want);
    CHECK(memcmp(got, want, sizeof(got)) == 0);
}

static void siphash_paper(void)
{
    uint8_t key[16], msg[15], out[8];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 15; i++)
        msg[i] = (uint8_t)i;
    static const struct {
        size_t n;
        uint64_t v;
    } v[] = {{0, 0x726fdb47dd0e0e31ull}, {8, 0x93f5f5799a932462ull}, {15, 0xa129ca6149be45e5ull}};
    for (size_t i = 0; i < 3; i++) {
        CHECK_EQ(fscrypt_siphash(fscrypt_algs_of(fs), key, msg, v[i].n, out), 0);
        uint64_t got = 0;
        for (int b = 7; b >= 0; b--)
            got = got << 8 | out[b];
        CHECK(got == v[i].v);
    }
}

static void padding_and_validity(void)
{
    struct fscrypt_ikey k = names_key(FSCRYPT_MODE_AES_256_CTS, "0123456789abcdef0123456789abcdef",
                                      32, 0);
    static const struct {
        uint8_t pad_flag;
        size_t len, want;
    } v[] = {{0, 1, 16},    {0, 16, 16},   {0, 17, 20},   {1, 17, 24},   {2, 17, 32},
             {3, 17, 32},   {3, 33, 64},   {3, 250, 255}, {0, 255, 255}, {2, 241, 255},
             {0, 253, 255}, {3, 224, 224}, {3, 225, 255}};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        k.flags = v[i].pad_flag;
        CHECK_EQ(fscrypt_name_encrypted_size(&k, v[i].len, 255), v[i].want);
    }
    CHECK_EQ(fscrypt_name_encrypted_size(&k, 256, 255), 0);
    k.flags = 3;
    /* what does not come out of a name: a '/', bytes after the NUL padding, nothing */
    static const char *bad[] = {"a/b", "", "abc\0x"};
    static const size_t bad_len[] = {3, 0, 5};
    for (size_t i = 0; i < 3; i++) {
        uint8_t ct[32], back[32];
        CHECK_EQ(fscrypt_name_encrypt(fs, &k, (const uint8_t *)bad[i], bad_len[i], ct, 32), 0);
        size_t n;
        bool valid = true;
        CHECK_EQ(fscrypt_name_decrypt(fs, &k, ct, 32, back, &n, &valid), 0);
        CHECK(!valid);
    }
    uint8_t ct[32], back[32];
    size_t n;
    bool valid;
    CHECK_EQ(fscrypt_name_encrypt(fs, &k, (const uint8_t *)"name.txt", 8, ct, 32), 0);
    CHECK_EQ(fscrypt_name_decrypt(fs, &k, ct, 32, back, &n, &valid), 0);
    CHECK(valid && n == 8 && memcmp(back, "name.txt", 8) == 0);
    CHECK_EQ(fscrypt_name_decrypt(fs, &k, ct, 15, back, &n, &valid), -EUCLEAN);
}

static void symlink_targets(void)
{
    struct fscrypt_ikey k = names_key(FSCRYPT_MODE_AES_256_CTS, "0123456789abcdef0123456789abcdef",
                                      32, 0);
    uint8_t raw[64] = {0};
    char out[FSCRYPT_SYMLINK_MAX_CIPHERTEXT + 1];
    CHECK_EQ(fscrypt_name_encrypt(fs, &k, (const uint8_t *)"../up/there", 11, raw + 2, 16), 0);
    raw[0] = 16;
    CHECK_EQ(fscrypt_symlink_decrypt(fs, &k, raw, sizeof(raw), out), 11);
    CHECK(strcmp(out, "../up/there") == 0);
    raw[0] = 0; /* no target */
    CHECK_EQ(fscrypt_symlink_decrypt(fs, &k, raw, sizeof(raw), out), -EUCLEAN);
    raw[0] = 63; /* past the block */
    CHECK_EQ(fscrypt_symlink_decrypt(fs, &k, raw, sizeof(raw), out), -EUCLEAN);
    raw[0] = 5; /* shorter than a cipher block */
    CHECK_EQ(fscrypt_symlink_decrypt(fs, &k, raw, sizeof(raw), out), -EUCLEAN);
    raw[0] = 2;
    raw[2] = raw[3] = '.';
    CHECK_EQ(fscrypt_symlink_decrypt(fs, &k, raw, sizeof(raw), out), 2);
    CHECK(strcmp(out, "..") == 0);
}

/* HKDF-SHA512 as fscrypt runs it, against the kernel's own known answer: crypto/hkdf.c's
 * "hkdf test with zero salt and info" gives the PRK of 22 bytes of 0x0b (fscrypt extracts
 * without a salt); the identifier is HMAC-SHA512(PRK, "fscrypt\0" 0x01 0x01)[0,16), worked
 * out from that PRK with Python's hmac module, not with libcrypto's HKDF. */
static void hkdf_kernel_vector(void)
{
    uint8_t raw[22], ident[16];
    memset(raw, 0x0b, sizeof(raw));
    unhex("364420632cece73956049114a9ccb856", ident);
    struct f2fuse_key_info info;
    CHECK_EQ(fscrypt_key_add(fs, raw, sizeof(raw), NULL, &info), 0);
    CHECK(memcmp(info.identifier, ident, 16) == 0);
    unsigned busy;
    CHECK_EQ(fscrypt_key_remove(fs, ident, 16, &busy), 0);
}

static int count_keys(void *arg, const struct f2fuse_key_info *k)
{
    (*(unsigned *)arg)++;
    return 0;
}

static void master_keys(void)
{
    uint8_t raw[64];
    for (int i = 0; i < 64; i++)
        raw[i] = (uint8_t)i;
    /* f2crypt.py's MasterKey(bytes(range(64))): HKDF-SHA512 context 1, and the double SHA-512 */
    uint8_t ident[16], desc[8];
    unhex("8699c2c53707405da5aba5ae4d8583c0", ident);
    unhex("04334e23057a6e2d", desc);
    struct f2fuse_key_info info;
    CHECK_EQ(fscrypt_key_add(fs, raw, 64, NULL, &info), 0);
    CHECK(memcmp(info.identifier, ident, 16) == 0);
    CHECK(memcmp(info.descriptor, desc, 8) == 0);
    CHECK_EQ(info.status, F2FUSE_KEY_PRESENT);
    CHECK_EQ(fscrypt_key_add(fs, raw, 64, NULL, &info), 0); /* again: no error, one key */
    unsigned n = 0;
    fscrypt_key_list(fs, count_keys, &n);
    CHECK_EQ(n, 1);
    CHECK_EQ(fscrypt_key_add(fs, raw, 15, NULL, NULL), -EINVAL);
    CHECK_EQ(fscrypt_key_add(fs, raw, 65, NULL, NULL), -EINVAL);
    unsigned busy = 7;
    CHECK_EQ(fscrypt_key_remove(fs, desc, 8, &busy), 0);
    CHECK_EQ(busy, 0);
    CHECK_EQ(fscrypt_key_remove(fs, ident, 16, &busy), -ENOKEY);
    for (int i = 0; i < FSCRYPT_MAX_MASTERS; i++) {
        raw[0] = (uint8_t)i;
        CHECK_EQ(fscrypt_key_add(fs, raw, 32, NULL, NULL), 0);
    }
    raw[0] = 0xee;
    CHECK_EQ(fscrypt_key_add(fs, raw, 32, NULL, NULL), -ENOSPC);
}

int main(void)
{
    struct f2fuse_options opts;
    f2fuse_options_init(&opts);
    fs = context_create(&opts);
    if (!fs || fscrypt_keys_init(fs)) {
        fprintf(stderr, "cannot set up a context with keys\n");
        return 1;
    }
    RUN(cts_rfc3962);
    RUN(xts_ieee1619);
    RUN(iv_flavours);
    RUN(siphash_paper);
    RUN(padding_and_validity);
    RUN(symlink_targets);
    RUN(hkdf_kernel_vector);
    RUN(master_keys);
    fscrypt_keys_destroy(fs);
    context_free(fs);
    return check_failures ? 1 : 0;
}
