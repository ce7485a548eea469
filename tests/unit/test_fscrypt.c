/* Unit tests of core/fscrypt.c's pure parts: base64url (RFC 4648 vectors), no-key names
 * (encode, decode, match, the long form's digest, the decoder's refusals), contexts (v1, v2,
 * every refusal) and no-key symlink targets.  The encoding is also checked end to end
 * against tests/integration/f2crypt.py, an independent implementation (test_fscrypt_nokey). */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "core/fscrypt.h"

static void base64url_vectors(void)
{
    /* RFC 4648 §10, without padding; the URL alphabet shows in 0xfb 0xff -> "-_8". */
    static const struct {
        const char *in, *out;
    } v[] = {{"", ""},           {"f", "Zg"},          {"fo", "Zm8"},          {"foo", "Zm9v"},
             {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"}, {"\xfb\xff", "-_8"}};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char out[32];
        size_t n = fscrypt_base64url_encode((const uint8_t *)v[i].in, strlen(v[i].in), out);
        CHECK_EQ(n, strlen(v[i].out));
        CHECK(memcmp(out, v[i].out, n) == 0);
        uint8_t back[32];
        CHECK_EQ(fscrypt_base64url_decode(v[i].out, strlen(v[i].out), back), strlen(v[i].in));
        CHECK(memcmp(back, v[i].in, strlen(v[i].in)) == 0);
    }
    uint8_t b[8];
    CHECK_EQ(fscrypt_base64url_decode("Zm9v+A", 6, b), -1); /* '+' is base64, not base64url */
    CHECK_EQ(fscrypt_base64url_decode("Zm9=", 4, b), -1);   /* no padding */
    CHECK_EQ(fscrypt_base64url_decode("Zh", 2, b), -1);     /* trailing bits must be zero */
    CHECK_EQ(fscrypt_base64url_decode("A", 1, b), 0);       /* six zero bits: no byte, valid */
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 3));
}

static void nokey_roundtrip(void)
{
    for (size_t len = 16; len <= 255; len++) {
        uint8_t ct[255];
        fill(ct, len, (unsigned)len);
        char name[FSCRYPT_NOKEY_MAX_ENCODED + 1];
        ssize_t n = fscrypt_nokey_encode(0x12345678u, 0, ct, len, name);
        size_t raw = len <= FSCRYPT_NOKEY_BYTES ? 8 + len : FSCRYPT_NOKEY_MAX_DECODED;
        CHECK_EQ(n, (raw * 4 + 2) / 3);
        CHECK_EQ(strlen(name), (size_t)n);
        CHECK(n <= FSCRYPT_NOKEY_MAX_ENCODED);
        CHECK(!memchr(name, '/', (size_t)n));
        struct fscrypt_nokey nk;
        CHECK_EQ(fscrypt_nokey_decode(name, (size_t)n, &nk), 0);
        CHECK_EQ(nk.hash, 0x12345678u);
        CHECK_EQ(nk.digest, len > FSCRYPT_NOKEY_BYTES);
        CHECK(fscrypt_nokey_matches(&nk, ct, len));
        /* a different last byte, or one byte more or less, is another name */
        ct[len - 1] ^= 1;
        CHECK(!fscrypt_nokey_matches(&nk, ct, len));
        ct[len - 1] ^= 1;
        CHECK(!fscrypt_nokey_matches(&nk, ct, len - 1));
    }
}

static void nokey_known(void)
{
    /* hash 1, minor 0, ciphertext 16 x 0xff: le32 01 00 00 00, 00 00 00 00, ff... */
    uint8_t ct[16];
    memset(ct, 0xff, sizeof(ct));
    char name[FSCRYPT_NOKEY_MAX_ENCODED + 1];
    CHECK_EQ(fscrypt_nokey_encode(1, 0, ct, sizeof(ct), name), 32);
    CHECK(strcmp(name, "AQAAAAAAAAD_____________________") == 0);
}

static void nokey_refused(void)
{
    struct fscrypt_nokey nk;
    char big[300];
    memset(big, 'A', sizeof(big));
    CHECK_EQ(fscrypt_nokey_decode(big, 253, &nk), -ENOENT);      /* longer than any no-key name */
    CHECK_EQ(fscrypt_nokey_decode(big, 11, &nk), -ENOENT);       /* 8 bytes: no ciphertext byte */
    CHECK_EQ(fscrypt_nokey_decode(big, 12, &nk), 0);             /* 9 bytes: one byte */
    CHECK_EQ(fscrypt_nokey_decode(big, 210, &nk), 0);            /* 157 bytes: 149 whole */
    CHECK_EQ(fscrypt_nokey_decode(big, 212, &nk), -ENOENT);      /* 159: neither form */
    CHECK_EQ(fscrypt_nokey_decode(big, 252, &nk), 0);            /* 189: the digest form */
    CHECK_EQ(fscrypt_nokey_decode("name.txt", 8, &nk), -ENOENT); /* '.' */
    CHECK_EQ(fscrypt_nokey_decode("AAAAAAAAAAAAAAA=", 16, &nk), -ENOENT);
    /* The digest form matches only names longer than 149 bytes. */
    CHECK_EQ(fscrypt_nokey_decode(big, 252, &nk), 0);
    uint8_t short_ct[149];
    memset(short_ct, 0, sizeof(short_ct));
    CHECK(!fscrypt_nokey_matches(&nk, short_ct, sizeof(short_ct)));
}

static void contexts(void)
{
    uint8_t v1[FSCRYPT_CONTEXT_V1_SIZE] = {1, 1, 4, 3, 'k', 'e', 'y', 'd', 'e', 's', 'c', '!'};
    uint8_t v2[FSCRYPT_CONTEXT_V2_SIZE] = {2, 1, 4, 3, 0};
    fill(v1 + 12, 16, 1);
    fill(v2 + 8, 32, 2);
    struct fscrypt_context c1, c2, c3;
    CHECK_EQ(fscrypt_context_parse(v1, sizeof(v1), &c1), 0);
    CHECK_EQ(c1.version, 1);
    CHECK(memcmp(c1.key, "keydesc!", 8) == 0 && memcmp(c1.nonce, v1 + 12, 16) == 0);
    CHECK(!fscrypt_policy_unsupported(&c1, false));
    CHECK(fscrypt_policy_unsupported(&c1, true)); /* v1 cannot hash casefolded names */
    CHECK_EQ(fscrypt_context_parse(v2, sizeof(v2), &c2), 0);
    CHECK(memcmp(c2.key, v2 + 8, 16) == 0 && memcmp(c2.nonce, v2 + 24, 16) == 0);
    CHECK(!fscrypt_policy_unsupported(&c2, true));
    /* sizes and versions that do not go together */
    CHECK_EQ(fscrypt_context_parse(v1, 0, &c3), -EINVAL);
    CHECK_EQ(fscrypt_context_parse(v1, sizeof(v1) - 1, &c3), -EINVAL);
    CHECK_EQ(fscrypt_context_parse(v2, sizeof(v1), &c3), -EINVAL);
    CHECK_EQ(fscrypt_context_parse(v1, sizeof(v2), &c3), -EINVAL);
    v2[0] = 3;
    CHECK_EQ(fscrypt_context_parse(v2, sizeof(v2), &c3), -EINVAL);
    v2[0] = 2;
    /* two files of one tree: the same policy whatever their nonces */
    uint8_t other[FSCRYPT_CONTEXT_V2_SIZE];
    memcpy(other, v2, sizeof(other));
    fill(other + 24, 16, 9);
    CHECK_EQ(fscrypt_context_parse(other, sizeof(other), &c3), 0);
    CHECK(fscrypt_same_policy(&c2, &c3));
    other[8] ^= 1; /* another master key */
    CHECK_EQ(fscrypt_context_parse(other, sizeof(other), &c3), 0);
    CHECK(!fscrypt_same_policy(&c2, &c3));
    CHECK(!fscrypt_same_policy(&c1, &c2));
    /* what the kernel would not use */
    static const struct {
        uint8_t contents, filenames, flags, dus, reserved;
        bool ok;
    } p[] = {{1, 4, 0, 0, 0, true},      {1, 10, 3, 0, 0, true},    {9, 9, 4, 0, 0, true},
             {7, 8, 0, 0, 0, true},      {1, 4, 0x08, 0, 0, true},  {1, 4, 0x10, 12, 0, true},
             {1, 4, 0, 9, 0, true},      {2, 4, 0, 0, 0, false},    {1, 6, 0, 0, 0, false},
             {1, 4, 0x04, 0, 0, false},  {9, 9, 0x0c, 0, 0, false}, {5, 6, 0x08, 0, 0, false},
             {1, 4, 0x20, 0, 0, false},  {1, 4, 0, 8, 0, false},    {1, 4, 0, 13, 0, false},
             {1, 4, 0x10, 11, 0, false}, {1, 4, 0, 0, 1, false}};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
        v2[1] = p[i].contents;
        v2[2] = p[i].filenames;
        v2[3] = p[i].flags;
        v2[4] = p[i].dus;
        v2[5] = p[i].reserved;
        CHECK_EQ(fscrypt_context_parse(v2, sizeof(v2), &c3), 0);
        const char *why = fscrypt_policy_unsupported(&c3, false);
        if ((why == NULL) != p[i].ok)
            fprintf(stderr, "policy %zu: %s\n", i, why ? why : "accepted");
        CHECK((why == NULL) == p[i].ok);
    }
}

static void symlinks(void)
{
    uint8_t raw[64] = {0};
    char out[FSCRYPT_NOKEY_MAX_ENCODED + 1];
    CHECK_EQ(fscrypt_symlink_nokey(raw, sizeof(raw), out), -EUCLEAN); /* length 0 */
    raw[0] = 16;
    memset(raw + 2, 0xff, 16);
    CHECK_EQ(fscrypt_symlink_nokey(raw, sizeof(raw), out), 32);
    CHECK(strcmp(out, "AAAAAAAAAAD_____________________") == 0); /* hash words are 0 */
    CHECK_EQ(fscrypt_symlink_nokey(raw, 17, out), -EUCLEAN);     /* runs past the buffer */
    CHECK_EQ(fscrypt_symlink_nokey(raw, 2, out), -EUCLEAN);
    raw[0] = 15;
    CHECK_EQ(fscrypt_symlink_nokey(raw, sizeof(raw), out), -EUCLEAN); /* under one block */
    raw[0] = 2;
    raw[2] = raw[3] = '.';
    CHECK_EQ(fscrypt_symlink_nokey(raw, sizeof(raw), out), 2); /* ".." passes as it is */
    CHECK(strcmp(out, "..") == 0);
}

int main(void)
{
    RUN(base64url_vectors);
    RUN(nokey_roundtrip);
    RUN(nokey_known);
    RUN(nokey_refused);
    RUN(contexts);
    RUN(symlinks);
    return CHECK_DONE();
}
