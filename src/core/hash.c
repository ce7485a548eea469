/* The f2fs dentry name hash (fs/f2fs/hash.c): the name, 16 bytes at a time, padded with a
 * length-derived word, is folded into a 128-bit state by a TEA round.  "." and ".." hash
 * to 0 (a casefolded name that folds to "." does not: tea_hash). */
#include "core/context.h"
#include "core/dir.h"

#define TEA_DELTA  0x9E3779B9u
#define TEA_ROUNDS 16

static void tea_transform(uint32_t buf[4], const uint32_t in[4])
{
    uint32_t sum = 0, b0 = buf[0], b1 = buf[1];
    for (int n = 0; n < TEA_ROUNDS; n++) {
        sum += TEA_DELTA;
        b0 += ((b1 << 4) + in[0]) ^ (b1 + sum) ^ ((b1 >> 5) + in[1]);
        b1 += ((b0 << 4) + in[2]) ^ (b0 + sum) ^ ((b0 >> 5) + in[3]);
    }
    buf[0] += b0;
    buf[1] += b1;
}

/* Packs up to 16 bytes of msg into four words; len is what is left of the whole name, and
 * also seeds the padding, so names that differ only in length hash apart. */
static void str_to_words(const uint8_t *msg, size_t len, uint32_t out[4])
{
    uint32_t pad = (uint32_t)len | ((uint32_t)len << 8);
    pad |= pad << 16;
    size_t take = len < 16 ? len : 16;
    uint32_t val = pad;
    int word = 0;
    for (size_t i = 0; i < take; i++) {
        if (i % 4 == 0)
            val = pad;
        val = msg[i] + (val << 8);
        if (i % 4 == 3) {
            out[word++] = val;
            val = pad;
        }
    }
    if (word < 4 && take % 4)
        out[word++] = val;
    while (word < 4)
        out[word++] = pad;
}

uint32_t tea_hash(const uint8_t *name, size_t len)
{
    uint32_t buf[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    uint32_t in[4];
    const uint8_t *p = name;
    for (;;) {
        str_to_words(p, len, in);
        tea_transform(buf, in);
        p += 16;
        if (len <= 16)
            break;
        len -= 16;
    }
    return buf[0];
}

uint32_t dentry_hash(const uint8_t *name, size_t len)
{
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    return tea_hash(name, len);
}
