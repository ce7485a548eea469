#include "util/crc.h"

/* The byte-wise table is a compile-time constant, built by the macros below: no init call,
 * no mutable state. */
#define P      0xEDB88320u
#define B1(c)  (((c)&1) ? ((c) >> 1) ^ P : (c) >> 1)
#define B8(c)  B1(B1(B1(B1(B1(B1(B1(B1(c))))))))
#define R4(n)  B8((uint32_t)(n)), B8((uint32_t)(n) + 1), B8((uint32_t)(n) + 2), B8((uint32_t)(n) + 3)
#define R16(n) R4(n), R4((n) + 4), R4((n) + 8), R4((n) + 12)
#define R64(n) R16(n), R16((n) + 16), R16((n) + 32), R16((n) + 48)

static const uint32_t crc_table[256] = {R64(0), R64(64), R64(128), R64(192)};

uint32_t f2fs_crc32(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len--)
        crc = (crc >> 8) ^ crc_table[(crc ^ *p++) & 0xff];
    return crc;
}
