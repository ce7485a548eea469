/* LZO1X decoding as the Linux kernel's lzo1x_decompress_safe understands it, including
 * bitstream version 1 (LZO-RLE, runs of zeros), which f2fs writes for the lzo-rle
 * algorithm and which liblzo2 cannot read (Documentation/staging/lzo.rst describes both).
 *
 * A stream is a first byte of its own encoding, then instructions: a literal run, or a copy
 * from the output so far followed by 0..3 literals ("state", which changes how the next
 * short instruction reads).  The kernel's rules are kept exactly: the checks it makes
 * (every literal run leaves 3 bytes for the end marker; the end marker is 0x11 0x00 0x00
 * and nothing may follow it) and the ones its fast paths imply.  Every read and write is
 * bounds-checked, so hostile input fails with -1, never overruns. */
#include <string.h>

#include "core/compress.h"

#define RUN_MIN 4 /* MIN_ZERO_RUN_LENGTH */

struct lzo_cursor {
    const uint8_t *ip, *ip_end;
    uint8_t *op, *out, *op_end;
};

static bool have_in(const struct lzo_cursor *c, size_t n)
{
    return (size_t)(c->ip_end - c->ip) >= n;
}

static bool have_out(const struct lzo_cursor *c, size_t n)
{
    return (size_t)(c->op_end - c->op) >= n;
}

/* A length longer than its opcode field holds: zero bytes add 255 each, the first other
 * byte adds itself.  bits is the field's maximum (7, 15 or 31). */
static bool long_length(struct lzo_cursor *c, size_t bits, size_t *len)
{
    size_t t = 0;
    for (;;) {
        if (!have_in(c, 1))
            return false;
        if (*c->ip)
            break;
        t += 255;
        c->ip++;
    }
    *len = t + bits + *c->ip++;
    return true;
}

/* n literals; the kernel keeps 3 input bytes in hand after every run (the end marker). */
static bool copy_literals(struct lzo_cursor *c, size_t n)
{
    if (!have_in(c, n + 3) || !have_out(c, n))
        return false;
    memcpy(c->op, c->ip, n);
    c->op += n;
    c->ip += n;
    return true;
}

/* len bytes from distance back in the output; overlapping copies repeat bytes, as LZ77. */
static bool copy_match(struct lzo_cursor *c, size_t distance, size_t len)
{
    if (distance == 0 || distance > (size_t)(c->op - c->out) || !have_out(c, len))
        return false;
    const uint8_t *from = c->op - distance;
    for (size_t i = 0; i < len; i++)
        c->op[i] = from[i];
    c->op += len;
    return true;
}

static bool le16_at(struct lzo_cursor *c, size_t *v)
{
    if (!have_in(c, 2))
        return false;
    *v = (size_t)c->ip[0] | (size_t)c->ip[1] << 8;
    c->ip += 2;
    return true;
}

long lzorle_decompress(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len)
{
    struct lzo_cursor c = {in, in + in_len, out, out, out + out_len};
    if (in_len < 3)
        return -1;
    unsigned version = 0;
    if (in_len >= 5 && in[0] == 17) {
        version = in[1];
        c.ip += 2;
    }
    size_t state = 0; /* literals the last instruction copied: 0, 1..3, or 4 for "more" */
    size_t next;
    /* First byte: 18..21 copy 0..3 literals, 22.. a run of byte - 17 literals. */
    if (*c.ip > 17) {
        size_t t = (size_t)*c.ip++ - 17;
        if (t < 4) {
            next = t;
            goto trailing_literals;
        }
        if (!copy_literals(&c, t))
            return -1;
        state = 4;
    }
    for (;;) {
        if (!have_in(&c, 1))
            return -1;
        size_t op = *c.ip++, len, distance;
        if (op < 16) {
            if (state == 0) { /* 0000LLLL: a literal run of 3 + L (or longer) */
                len = op;
                if (len == 0 && !long_length(&c, 15, &len))
                    return -1;
                if (!copy_literals(&c, len + 3))
                    return -1;
                state = 4;
                continue;
            }
            if (!have_in(&c, 1))
                return -1;
            next = op & 3;
            if (state != 4) { /* 0000DDSS after 1..3 literals: 2 bytes within 1 KiB */
                distance = 1 + (op >> 2) + ((size_t)*c.ip++ << 2);
                len = 2;
            } else { /* after a longer run: 3 bytes from 2..3 KiB back */
                distance = 2049 + (op >> 2) + ((size_t)*c.ip++ << 2);
                len = 3;
            }
        } else if (op >= 64) { /* 01LDDDSS / 1LLDDDSS: 3..8 bytes within 2 KiB */
            if (!have_in(&c, 1))
                return -1;
            next = op & 3;
            distance = 1 + ((op >> 2) & 7) + ((size_t)*c.ip++ << 3);
            len = (op >> 5) + 1;
        } else if (op >= 32) { /* 001LLLLL + LE16: within 16 KiB */
            len = op & 31;
            if (len == 0 && !long_length(&c, 31, &len))
                return -1;
            len += 2;
            size_t d;
            if (!le16_at(&c, &d))
                return -1;
            next = d & 3;
            distance = 1 + (d >> 2);
        } else { /* 0001HLLL + LE16: 16..48 KiB back, the end marker, or (v1) a zero run */
            if (version && (op & 8) && have_in(&c, 2) && (c.ip[0] & 0xfc) == 0xfc &&
                c.ip[1] == 0xff) {
                if (!have_in(&c, 3))
                    return -1;
                next = c.ip[0] & 3;
                len = ((op & 7) | (size_t)c.ip[2] << 3) + RUN_MIN;
                c.ip += 3;
                if (!have_out(&c, len))
                    return -1;
                memset(c.op, 0, len);
                c.op += len;
                goto trailing_literals;
            }
            len = op & 7;
            if (len == 0 && !long_length(&c, 7, &len))
                return -1;
            len += 2;
            size_t d;
            if (!le16_at(&c, &d))
                return -1;
            next = d & 3;
            distance = ((op & 8) << 11) + (d >> 2);
            if (distance == 0) {
                /* The end: only 0x11 0x00 0x00, with nothing after it. */
                if (len != 3 || c.ip != c.ip_end)
                    return -1;
                return (long)(c.op - c.out);
            }
            distance += 0x4000;
        }
        if (!copy_match(&c, distance, len))
            return -1;
    trailing_literals:
        state = next;
        if (!copy_literals(&c, next)) /* even none: the kernel wants 3 bytes left here */
            return -1;
    }
}
