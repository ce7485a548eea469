/* libFuzzer harness: the encryption parsers (core/fscrypt.c) on their own, no image.
 * Input: a selector byte, then the bytes handed over:
 *   0  an encryption context as stored (parse, policy rules, policy comparison)
 *   1  a name given for lookup in an encrypted directory (no-key decode; what it decodes to
 *      is encoded again and must decode to the same and match its own ciphertext)
 *   2  a stored symlink target (struct fscrypt_symlink_data; the no-key target)
 *   3  a stored name: its no-key name must decode back to it and match it, and no other
 *      length of it
 * Any crash, sanitizer report or broken invariant (abort) is a finding. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/fscrypt.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    switch (data[0] & 3) {
    case 0: context(d, n); break;
    case 1: lookup_name(d, n); break;
    case 2: symlink_target(d, n); break;
    default: stored_name(d, n); break;
    }
    return 0;
}
