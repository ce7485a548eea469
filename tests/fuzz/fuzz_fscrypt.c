/* libFuzzer harness: the encryption parsers (core/fscrypt.c, fscrypt_cipher.c) on their own,
 * no image.  Input: a selector byte, then the bytes handed over:
 *   0  an encryption context as stored (parse, policy rules, policy comparison)
 *   1  a name given for lookup in an encrypted directory (no-key decode; what it decodes to
 *      is encoded again and must decode to the same and match its own ciphertext)
 *   2  a stored symlink target (struct fscrypt_symlink_data; the no-key target)
 *   3, 7  a stored name: its no-key name must decode back to it and match it, and no other
 *      length of it
 *   4  a stored name decrypted with a key (the selector's high bits pick the mode and
 *      padding): what comes out is no longer than it, and a valid one holds no '/'
 *   5  a stored symlink target decrypted with a key: EUCLEAN or a NUL-free target
 *   6  a name given to a directory with its key: encrypted, it decrypts back to itself
 * Any crash, sanitizer report or broken invariant (abort) is a finding. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "core/fscrypt.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"

static void must(bool cond)
{
    if (!cond)
        abort();
}

static void context(const uint8_t *d, size_t n)
{
    static const uint8_t ref_bytes[FSCRYPT_CONTEXT_V2_SIZE] = {2, 1, 4, 3};
    struct fscrypt_context ctx, ref;
    must(fscrypt_context_parse(ref_bytes, sizeof(ref_bytes), &ref) == 0);
    if (fscrypt_context_parse(d, n, &ctx) != 0) {
        must(n != FSCRYPT_CONTEXT_V1_SIZE || d[0] != FSCRYPT_CONTEXT_V1);
        must(n != FSCRYPT_CONTEXT_V2_SIZE || d[0] != FSCRYPT_CONTEXT_V2);
        return;
    }
    must(ctx.version == d[0]);
    const char *why = fscrypt_policy_unsupported(&ctx, n & 1);
    must(!why || strlen(why) > 0);
    must(fscrypt_same_policy(&ctx, &ctx));
    (void)fscrypt_same_policy(&ctx, &ref);
}

static void lookup_name(const uint8_t *d, size_t n)
{
    struct fscrypt_nokey nk, again;
    if (fscrypt_nokey_decode((const char *)d, n, &nk) != 0)
        return;
    must(n <= FSCRYPT_NOKEY_MAX_ENCODED && nk.len >= 1 && nk.len <= FSCRYPT_NOKEY_BYTES);
    if (nk.digest)
        return; /* the rest of its ciphertext is unknown */
    char name[FSCRYPT_NOKEY_MAX_ENCODED + 1];
    ssize_t len = fscrypt_nokey_encode(nk.hash, nk.minor_hash, nk.bytes, nk.len, name);
    must(len > 0 && fscrypt_nokey_decode(name, (size_t)len, &again) == 0);
    must(again.hash == nk.hash && again.len == nk.len && !again.digest &&
         memcmp(again.bytes, nk.bytes, nk.len) == 0);
    must(fscrypt_nokey_matches(&nk, nk.bytes, nk.len));
}

static void symlink_target(const uint8_t *d, size_t n)
{
    char out[FSCRYPT_NOKEY_MAX_ENCODED + 1];
    ssize_t len = fscrypt_symlink_nokey(d, n, out);
    must(len == -EUCLEAN || (len > 0 && len <= FSCRYPT_NOKEY_MAX_ENCODED &&
                             strlen(out) == (size_t)len && !memchr(out, '/', (size_t)len)));
}

static void stored_name(const uint8_t *d, size_t n)
{
    if (n < 4 + FSCRYPT_MIN_CIPHERTEXT || n > 4 + 255)
        return;
    uint32_t hash;
    memcpy(&hash, d, sizeof(hash));
    const uint8_t *ct = d + 4;
    size_t len = n - 4;
    char name[FSCRYPT_NOKEY_MAX_ENCODED + 1];
    ssize_t enc = fscrypt_nokey_encode(hash, 0, ct, len, name);
    must(enc > 0 && enc <= FSCRYPT_NOKEY_MAX_ENCODED && !memchr(name, '/', (size_t)enc));
    struct fscrypt_nokey nk;
    must(fscrypt_nokey_decode(name, (size_t)enc, &nk) == 0 && nk.hash == hash);
    must(fscrypt_nokey_matches(&nk, ct, len));
    must(!fscrypt_nokey_matches(&nk, ct, len - 1));
}

/* A names key for selector sel: AES-256- or AES-128-CBC-CTS, any padding. */
static struct fscrypt_ikey names_key(uint8_t sel)
{
    struct fscrypt_ikey k = {.version = 2, .flags = (uint8_t)(sel >> 4 & 3), .ino = 77};
    k.mode = sel & 0x40 ? FSCRYPT_MODE_AES_128_CTS : FSCRYPT_MODE_AES_256_CTS;
    k.key_len = k.mode == FSCRYPT_MODE_AES_128_CTS ? 16 : 32;
    for (int i = 0; i < k.key_len; i++)
        k.key[i] = (uint8_t)(i * 29 + 3);
    if (sel & 0x80)
        k.flags |= FSCRYPT_POLICY_FLAG_IV_INO_LBLK_64;
    return k;
}

static struct f2fuse *keyed_context(void)
{
    static struct f2fuse *fs;
    if (!fs) {
        struct f2fuse_options opts;
        f2fuse_options_init(&opts);
        fs = context_create(&opts);
        must(fs && fscrypt_keys_init(fs) == 0);
    }
    return fs;
}

static void keyed_name(uint8_t sel, const uint8_t *d, size_t n)
{
    struct fscrypt_ikey k = names_key(sel);
    uint8_t out[F2FS_NAME_LEN];
    size_t len;
    bool valid;
    if (n > F2FS_NAME_LEN)
        return;
    int err = fscrypt_name_decrypt(keyed_context(), &k, d, n, out, &len, &valid);
    if (n < FSCRYPT_MIN_CIPHERTEXT) {
        must(err == -EUCLEAN);
        return;
    }
    must(err == 0 && len <= n);
    must(!valid || (len > 0 && !memchr(out, '/', len)));
}

static void keyed_symlink(uint8_t sel, const uint8_t *d, size_t n)
{
    struct fscrypt_ikey k = names_key(sel);
    char out[FSCRYPT_SYMLINK_MAX_CIPHERTEXT + 1];
    ssize_t len = fscrypt_symlink_decrypt(keyed_context(), &k, d, n, out);
    must(len == -EUCLEAN || (len > 0 && strlen(out) == (size_t)len));
}

static void keyed_roundtrip(uint8_t sel, const uint8_t *d, size_t n)
{
    struct fscrypt_ikey k = names_key(sel);
    if (n == 0 || n > F2FS_NAME_LEN || memchr(d, '\0', n) || memchr(d, '/', n))
        return;
    size_t ct_len = fscrypt_name_encrypted_size(&k, n, F2FS_NAME_LEN);
    uint8_t ct[F2FS_NAME_LEN], back[F2FS_NAME_LEN];
    must(ct_len >= n && ct_len >= FSCRYPT_MIN_CIPHERTEXT && ct_len <= F2FS_NAME_LEN);
    must(fscrypt_name_encrypt(keyed_context(), &k, d, n, ct, ct_len) == 0);
    size_t len;
    bool valid;
    must(fscrypt_name_decrypt(keyed_context(), &k, ct, ct_len, back, &len, &valid) == 0);
    must(valid && len == n && memcmp(back, d, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] & 7) {
    case 0: context(d, n); break;
    case 1: lookup_name(d, n); break;
    case 2: symlink_target(d, n); break;
    case 4: keyed_name(data[0], d, n); break;
    case 5: keyed_symlink(data[0], d, n); break;
    case 6: keyed_roundtrip(data[0], d, n); break;
    default: stored_name(d, n); break;
    }
    return 0;
}
