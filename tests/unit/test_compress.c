/* Compressed clusters: the header checks and every codec, against data compressed by the
 * libraries' own compressors; the kernel's LZO-RLE decoder (lzorle.c) against liblzo2 on
 * plain LZO1X streams and against hand-built version 1 streams; hostile input.
 * F2FUSE_SEED replays the random data; the seed is printed. */
#include <errno.h>
#include <lz4.h>
#include <lz4hc.h>
#include <lzo/lzo1x.h>
#include <stdint.h>
#include <time.h>
#include <zstd.h>

#include "check.h"
#include "core/compress.h"
#include "core/format.h"
#include "core/inode.h"
#include "util/crc.h"

#define BLK 4096u

static uint64_t rng_state;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Data of a chosen compressibility: runs of a few words, zeros, or random bytes. */
static void fill(uint8_t *buf, size_t n, int kind)
{
    static const char *const words[] = {"alpha ", "beta ", "f2fs ", "cluster ", "\n"};
    size_t i = 0;
    while (i < n) {
        if (kind == 0) {
            const char *w = words[rnd() % 5];
            for (size_t k = 0; w[k] && i < n; k++)
                buf[i++] = (uint8_t)w[k];
        } else if (kind == 1) {
            size_t run = rnd() % 700;
            uint8_t v = rnd() % 3 ? 0 : (uint8_t)rnd();
            for (size_t k = 0; k < run && i < n; k++)
                buf[i++] = v;
        } else {
            buf[i++] = (uint8_t)rnd();
        }
    }
}

/* Lays out a cluster as f2fs stores it: header + data, the rest of the blocks zero. */
static uint32_t make_cluster(uint8_t *cbuf, const uint8_t *data, uint32_t clen, bool sum)
{
    uint32_t nr = (COMPRESS_HEADER_SIZE + clen + BLK - 1) / BLK;
    memset(cbuf, 0, (size_t)nr * BLK);
    uint32_t c = htole32(clen), s = htole32(sum ? f2fs_crc32(F2FS_SUPER_MAGIC, data, clen) : 0);
    memcpy(cbuf, &c, 4);
    memcpy(cbuf + 4, &s, 4);
    memcpy(cbuf + COMPRESS_HEADER_SIZE, data, clen);
    return nr;
}

static long compress_with(enum compress_algorithm alg, const uint8_t *in, size_t n, uint8_t *out,
                          size_t cap)
{
    static uint8_t lzo_work[LZO1X_1_MEM_COMPRESS];
    switch (alg) {
    case COMPRESS_LZ4: return LZ4_compress_default((const char *)in, (char *)out, (int)n, (int)cap);
    case COMPRESS_LZO: {
        lzo_uint len = cap;
        return lzo1x_1_compress(in, n, out, &len, lzo_work) == LZO_E_OK ? (long)len : -1;
    }
    case COMPRESS_ZSTD: {
        size_t r = ZSTD_compress(out, cap, in, n, 3);
        return ZSTD_isError(r) ? -1 : (long)r;
    }
    default: return -1;
    }
}

static void roundtrip_every_codec(void)
{
    CHECK_EQ(lzo_init(), LZO_E_OK);
    static uint8_t src[BLK << COMPRESS_LOG_MAX], comp[(BLK << COMPRESS_LOG_MAX) * 2],
        cbuf[(BLK << COMPRESS_LOG_MAX) * 2], out[BLK << COMPRESS_LOG_MAX];
    enum compress_algorithm algs[] = {COMPRESS_LZ4, COMPRESS_LZO, COMPRESS_ZSTD};
    for (uint32_t log = COMPRESS_LOG_MIN; log <= COMPRESS_LOG_MAX; log += 2) {
        size_t rlen = (size_t)BLK << log;
        for (int kind = 0; kind < 3; kind++) {
            fill(src, rlen, kind);
            for (size_t a = 0; a < sizeof(algs) / sizeof(algs[0]); a++) {
                long clen = compress_with(algs[a], src, rlen, comp, sizeof(comp));
                CHECK(clen > 0);
                if (clen <= 0)
                    continue;
                for (int sum = 0; sum < 2; sum++) {
                    struct compress_info ci = {
                        .algorithm = algs[a], .log_cluster_size = log, .chksum = sum};
                    uint32_t nr = make_cluster(cbuf, comp, (uint32_t)clen, sum);
                    const char *why = NULL;
                    memset(out, 0xAA, rlen);
                    int err = compress_decode(&ci, cbuf, nr, out, &why);
                    CHECK_EQ(err, 0);
                    CHECK(memcmp(out, src, rlen) == 0);
                }
            }
        }
    }
}

/* LZ4HC writes the same block format: the kernel reads it with LZ4_decompress_safe. */
static void lz4hc_reads_as_lz4(void)
{
    static uint8_t src[BLK * 4], comp[BLK * 8], cbuf[BLK * 8], out[BLK * 4];
    fill(src, sizeof(src), 0);
    int clen = LZ4_compress_HC((const char *)src, (char *)comp, sizeof(src), sizeof(comp), 9);
    CHECK(clen > 0);
    struct compress_info ci = {.algorithm = COMPRESS_LZ4, .log_cluster_size = 2, .level = 9};
    uint32_t nr = make_cluster(cbuf, comp, (uint32_t)clen, false);
    const char *why;
    CHECK_EQ(compress_decode(&ci, cbuf, nr, out, &why), 0);
    CHECK(memcmp(out, src, sizeof(src)) == 0);
}

static void hostile_clusters(void)
{
    static uint8_t src[BLK * 4], comp[BLK * 8], cbuf[BLK * 8], out[BLK * 4];
    fill(src, sizeof(src), 0);
    long clen = compress_with(COMPRESS_LZ4, src, sizeof(src), comp, sizeof(comp));
    struct compress_info ci = {.algorithm = COMPRESS_LZ4, .log_cluster_size = 2, .chksum = true};
    uint32_t nr = make_cluster(cbuf, comp, (uint32_t)clen, true);
    const char *why = NULL;

    /* clen past the blocks the cluster has (f2fs_decompress_cluster's check) */
    uint32_t big = htole32(nr * BLK - COMPRESS_HEADER_SIZE + 1);
    uint8_t saved[4];
    memcpy(saved, cbuf, 4);
    memcpy(cbuf, &big, 4);
    CHECK_EQ(compress_decode(&ci, cbuf, nr, out, &why), -EIO);
    CHECK(why && strstr(why, "length"));
    memcpy(cbuf, saved, 4);
    CHECK_EQ(compress_decode(&ci, cbuf, 0, out, &why), -EIO);

    /* one flipped bit in the data: the checksum says so */
    cbuf[COMPRESS_HEADER_SIZE + 10] ^= 1;
    CHECK_EQ(compress_decode(&ci, cbuf, nr, out, &why), -EIO);
    CHECK(why && strstr(why, "checksum"));
    /* ... and without the checksum flag the codec or the length check still catch it, or
     * the data decodes (a flipped literal): never a crash */
    ci.chksum = false;
    int r = compress_decode(&ci, cbuf, nr, out, &why);
    CHECK(r == 0 || r == -EIO);
    cbuf[COMPRESS_HEADER_SIZE + 10] ^= 1;

    /* a cluster of 2 blocks' worth decoded as 4: the wrong length */
    static uint8_t half[BLK * 2];
    fill(half, sizeof(half), 0);
    clen = compress_with(COMPRESS_LZ4, half, sizeof(half), comp, sizeof(comp));
    nr = make_cluster(cbuf, comp, (uint32_t)clen, false);
    CHECK_EQ(compress_decode(&ci, cbuf, nr, out, &why), -EIO);
    CHECK(why && strstr(why, "wrong length"));

    /* garbage for every codec: rejected or decoded, never a crash (ASan watches) */
    for (int alg = 0; alg < COMPRESS_ALGORITHMS; alg++) {
        for (int i = 0; i < 200; i++) {
            for (size_t k = 0; k < sizeof(cbuf); k++)
                cbuf[k] = (uint8_t)rnd();
            uint32_t c = htole32(rnd() % (BLK * 2));
            memcpy(cbuf, &c, 4);
            struct compress_info g = {.algorithm = alg, .log_cluster_size = 2};
            r = compress_decode(&g, cbuf, 2, out, &why);
            CHECK(r == 0 || r == -EIO);
        }
    }
}

static void inode_fields(void)
{
    /* inode_decode sets log_cluster_size for a compressed file (its range checks are
     * test_compress's bad-input sub-test); the flag word is read here. */
    static struct f2fs_inode ri;
    struct inode_info ii = {.mode = 0100644,
                            .flags = F2FS_COMPR_FL,
                            .inline_flags = F2FS_EXTRA_ATTR,
                            .extra_isize = 36,
                            .log_cluster_size = 4};
    struct compress_info ci;
    const char *why;
    ri.i_compress_algorithm = COMPRESS_ZSTD;
    ri.i_log_cluster_size = 4;
    ri.i_compress_flag = htole16(1 | 7 << 8);
    CHECK(compress_file(&ii));
    CHECK_EQ(compress_info_get(&ri, &ii, &ci, &why), 0);
    CHECK_EQ(ci.algorithm, COMPRESS_ZSTD);
    CHECK_EQ(ci.log_cluster_size, 4);
    CHECK(ci.chksum);
    CHECK_EQ(ci.level, 7);
    /* an inode whose extra attributes end before i_compress_flag: no checksum, level 0 */
    ii.extra_isize = 34;
    CHECK_EQ(compress_info_get(&ri, &ii, &ci, &why), 0);
    CHECK(!ci.chksum);
    CHECK_EQ(ci.level, 0);
    ii.log_cluster_size = 0;
    CHECK(!compress_file(&ii));
    CHECK_EQ(compress_info_get(&ri, &ii, &ci, &why), -EIO);
}

/* The kernel's decoder reads every LZO1X stream the way liblzo2 does. */
static void lzorle_reads_plain_lzo(void)
{
    static uint8_t src[BLK * 16], comp[BLK * 40], a[BLK * 16], b[BLK * 16];
    static uint8_t work[LZO1X_1_MEM_COMPRESS];
    for (int i = 0; i < 300; i++) {
        size_t n = 1 + rnd() % sizeof(src);
        fill(src, n, (int)(rnd() % 3));
        lzo_uint clen = sizeof(comp);
        CHECK_EQ(lzo1x_1_compress(src, n, comp, &clen, work), LZO_E_OK);
        lzo_uint alen = sizeof(a);
        CHECK_EQ(lzo1x_decompress_safe(comp, clen, a, &alen, NULL), LZO_E_OK);
        long blen = lzorle_decompress(comp, clen, b, sizeof(b));
        CHECK_EQ(blen, (long)alen);
        CHECK(blen == (long)n && memcmp(b, src, n) == 0);
        /* A truncated or extended stream fails. */
        CHECK_EQ(lzorle_decompress(comp, clen - 1, b, sizeof(b)), -1);
        comp[clen] = 0;
        CHECK_EQ(lzorle_decompress(comp, clen + 1, b, sizeof(b)), -1);
        /* An output buffer one byte short fails. */
        CHECK_EQ(lzorle_decompress(comp, clen, b, n - 1), -1);
    }
}

/* Version 1 streams built by hand from Documentation/staging/lzo.rst: a version header,
 * literals, a zero run (0001 1LLL, then D bits all ones, then X), a match, the end. */
static void lzorle_zero_runs(void)
{
    uint8_t out[8192];
    /* 17 1 | 22: a run of 5 literals | run of (X<<3 | L) + 4 zeros, then 2 literals |
     * 0x11 0 0 end */
    const uint8_t s1[] = {17,       1,    17 + 5, 'a', 'b', 'c',  'd', 'e', 0x18 | 3,
                          0xfc | 2, 0xff, 10,     'x', 'y', 0x11, 0,   0};
    long n = lzorle_decompress(s1, sizeof(s1), out, sizeof(out));
    size_t zeros = (10u << 3 | 3) + 4;
    CHECK_EQ(n, (long)(5 + zeros + 2));
    CHECK(memcmp(out, "abcde", 5) == 0);
    size_t z = 0;
    while (z < zeros && out[5 + z] == 0)
        z++;
    CHECK_EQ(z, zeros);
    CHECK(memcmp(out + 5 + zeros, "xy", 2) == 0);
    /* Without the version header the same bytes are a long match far back: rejected. */
    CHECK_EQ(lzorle_decompress(s1 + 2, sizeof(s1) - 2, out, sizeof(out)), -1);
    /* Version 1 still reads an ordinary far match: 0001 1LLL with other D bits is a copy
     * from 16..48 KiB back, too far here. */
    uint8_t s2[sizeof(s1)];
    memcpy(s2, s1, sizeof(s1));
    s2[10] = 0xfe;
    CHECK_EQ(lzorle_decompress(s2, sizeof(s2), out, sizeof(out)), -1);
    /* The run must fit the output. */
    CHECK_EQ(lzorle_decompress(s1, sizeof(s1), out, 5 + zeros - 1), -1);
    /* The end marker must end the stream and be exactly 0x11 0 0. */
    const uint8_t s3[] = {17, 1, 17 + 4, 'a', 'b', 'c', 'd', 0x11, 0, 0, 0};
    CHECK_EQ(lzorle_decompress(s3, sizeof(s3), out, sizeof(out)), -1);
    CHECK_EQ(lzorle_decompress(s3, sizeof(s3) - 1, out, sizeof(out)), 4);
    const uint8_t s4[] = {17, 1, 17 + 4, 'a', 'b', 'c', 'd', 0x12, 0, 0};
    CHECK_EQ(lzorle_decompress(s4, sizeof(s4), out, sizeof(out)), -1);
    /* A match reaching before the output's start is refused (lookbehind). */
    const uint8_t s5[] = {17 + 4, 'a', 'b', 'c', 'd', 0x40 | 0x1c, 1, 0x11, 0, 0};
    CHECK_EQ(lzorle_decompress(s5, sizeof(s5), out, sizeof(out)), -1);
    /* ... while one inside it copies, overlapping: 'abcd' then 3 bytes from 4 back. */
    const uint8_t s6[] = {17 + 4, 'a', 'b', 'c', 'd', 0x40 | (3 << 2), 0, 0x11, 0, 0};
    CHECK_EQ(lzorle_decompress(s6, sizeof(s6), out, sizeof(out)), 7);
    CHECK(memcmp(out, "abcdabc", 7) == 0);
}

static void lzorle_garbage(void)
{
    static uint8_t in[4096], out[BLK * 4];
    for (int i = 0; i < 20000; i++) {
        size_t n = rnd() % sizeof(in);
        for (size_t k = 0; k < n; k++)
            in[k] = (uint8_t)(rnd() % 4 ? rnd() : 0);
        if (n > 2 && rnd() % 2) {
            in[0] = 17;
            in[1] = 1;
        }
        long r = lzorle_decompress(in, n, out, sizeof(out));
        CHECK(r >= -1 && r <= (long)sizeof(out));
    }
}

/* compress_encode and compress_decode round-trip every algorithm and cluster size; a
 * cluster that would not save a block is refused (0); the layout is f2fs's. */
static void encode_roundtrip(void)
{
    static uint8_t src[BLK << COMPRESS_LOG_MAX], cbuf[BLK << COMPRESS_LOG_MAX],
        out[BLK << COMPRESS_LOG_MAX];
    for (int alg = 0; alg < COMPRESS_ALGORITHMS; alg++) {
        uint8_t levels[] = {0, alg == COMPRESS_LZ4 ? 9 : alg == COMPRESS_ZSTD ? 6 : 0};
        for (uint32_t log = COMPRESS_LOG_MIN; log <= COMPRESS_LOG_MAX; log++) {
            size_t rlen = (size_t)BLK << log;
            for (int kind = 0; kind < 3; kind++) {
                for (size_t l = 0; l < sizeof(levels); l++) {
                    fill(src, rlen, kind);
                    struct compress_info ci = {.algorithm = alg,
                                               .log_cluster_size = log,
                                               .chksum = (rnd() & 1) != 0,
                                               .level = levels[l]};
                    memset(cbuf, 0xEE, sizeof(cbuf));
                    int nr = compress_encode(&ci, src, cbuf);
                    CHECK(nr >= 0 && nr < (1 << log));
                    /* text and zero runs always compress; random bytes never */
                    CHECK(kind == 2 ? nr == 0 : nr > 0);
                    if (nr <= 0)
                        continue;
                    uint32_t clen = le32(*(uint32_t *)cbuf);
                    CHECK(clen + COMPRESS_HEADER_SIZE <= (uint32_t)nr * BLK);
                    CHECK(clen + COMPRESS_HEADER_SIZE > (uint32_t)(nr - 1) * BLK);
                    uint32_t sum = le32(*(uint32_t *)(cbuf + 4));
                    CHECK_EQ(sum, ci.chksum ? f2fs_crc32(F2FS_SUPER_MAGIC,
                                                         cbuf + COMPRESS_HEADER_SIZE, clen)
                                            : 0);
                    for (size_t k = 8; k < COMPRESS_HEADER_SIZE; k++)
                        CHECK_EQ(cbuf[k], 0);
                    /* the last block is zero past the data */
                    size_t end = (size_t)nr * BLK, tail = COMPRESS_HEADER_SIZE + clen;
                    while (tail < end && cbuf[tail] == 0)
                        tail++;
                    CHECK_EQ(tail, end);
                    const char *why = NULL;
                    memset(out, 0x55, rlen);
                    CHECK_EQ(compress_decode(&ci, cbuf, (uint32_t)nr, out, &why), 0);
                    CHECK(memcmp(out, src, rlen) == 0);
                }
            }
        }
    }
}

/* The LZ4 and LZO streams are the libraries' own: liblz4 and liblzo2 read them too. */
static void encode_libraries_read_it(void)
{
    static uint8_t src[BLK * 16], cbuf[BLK * 16], out[BLK * 16];
    fill(src, sizeof(src), 0);
    struct compress_info lz = {.algorithm = COMPRESS_LZ4, .log_cluster_size = 4};
    int nr = compress_encode(&lz, src, cbuf);
    CHECK(nr > 0);
    uint32_t clen = le32(*(uint32_t *)cbuf);
    CHECK_EQ(LZ4_decompress_safe((const char *)cbuf + COMPRESS_HEADER_SIZE, (char *)out, (int)clen,
                                 sizeof(out)),
             sizeof(src));
    CHECK(memcmp(out, src, sizeof(src)) == 0);
    struct compress_info lzo = {.algorithm = COMPRESS_LZO, .log_cluster_size = 4};
    nr = compress_encode(&lzo, src, cbuf);
    CHECK(nr > 0);
    clen = le32(*(uint32_t *)cbuf);
    lzo_uint n = sizeof(out);
    CHECK_EQ(lzo1x_decompress_safe(cbuf + COMPRESS_HEADER_SIZE, clen, out, &n, NULL), LZO_E_OK);
    CHECK(n == sizeof(src) && memcmp(out, src, sizeof(src)) == 0);
    struct compress_info zs = {.algorithm = COMPRESS_ZSTD, .log_cluster_size = 4};
    nr = compress_encode(&zs, src, cbuf);
    CHECK(nr > 0);
    clen = le32(*(uint32_t *)cbuf);
    CHECK_EQ(ZSTD_decompress(out, sizeof(out), cbuf + COMPRESS_HEADER_SIZE, clen), sizeof(src));
    /* LZO-RLE: the version 1 header, then a stream liblzo2 reads too */
    struct compress_info rle = {.algorithm = COMPRESS_LZORLE, .log_cluster_size = 4};
    nr = compress_encode(&rle, src, cbuf);
    CHECK(nr > 0);
    clen = le32(*(uint32_t *)cbuf);
    CHECK(cbuf[COMPRESS_HEADER_SIZE] == 17 && cbuf[COMPRESS_HEADER_SIZE + 1] == 1);
    n = sizeof(out);
    CHECK_EQ(lzo1x_decompress_safe(cbuf + COMPRESS_HEADER_SIZE + 2, clen - 2, out, &n, NULL),
             LZO_E_OK);
    CHECK(n == sizeof(src) && memcmp(out, src, sizeof(src)) == 0);
}

/* Input whose best matches lie near the farthest M4 distance (49151 bytes back), short
 * ones: in a version 1 stream a copy from exactly that far reads as a zero run.  (liblzo2
 * compresses in pieces of 49152 bytes, so its copies stop short of it; the encoder checks
 * its streams of larger clusters anyway.)  Every stream handed out decodes right. */
static void lzorle_far_copies(void)
{
    static uint8_t src[BLK << 8], cbuf[BLK << 8], out[BLK << 8];
    const size_t n = sizeof(src);
    for (int round = 0; round < 12; round++) {
        size_t far = 49151 - (size_t)(rnd() % 64), len = 3 + (size_t)round % 7;
        memset(src, 0, n);
        for (size_t at = rnd() % 512; at + len + 2 < far; at += 1024) {
            for (size_t k = 0; k < len + 2; k++)
                src[at + k] = (uint8_t)(rnd() | 1);
            memcpy(src + at + far, src + at, len);
            src[at + far + len] = (uint8_t)(src[at + len] ^ 0x80);
        }
        for (uint32_t log = 4; log <= COMPRESS_LOG_MAX; log += 2) {
            struct compress_info ci = {.algorithm = COMPRESS_LZORLE, .log_cluster_size = log};
            int nr = compress_encode(&ci, src, cbuf);
            CHECK(nr > 0);
            if (nr > 0) {
                const char *why;
                CHECK_EQ(compress_decode(&ci, cbuf, (uint32_t)nr, out, &why), 0);
                CHECK(memcmp(out, src, (size_t)BLK << log) == 0);
            }
        }
    }
}

int main(void)
{
    const char *seed = getenv("F2FUSE_SEED");
    rng_state = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL);
    printf("test_compress: seed %llu (replay with F2FUSE_SEED=%llu)\n",
           (unsigned long long)rng_state, (unsigned long long)rng_state);
    RUN(roundtrip_every_codec);
    RUN(lz4hc_reads_as_lz4);
    RUN(hostile_clusters);
    RUN(inode_fields);
    RUN(lzorle_reads_plain_lzo);
    RUN(lzorle_zero_runs);
    RUN(lzorle_garbage);
    RUN(encode_roundtrip);
    RUN(encode_libraries_read_it);
    RUN(lzorle_far_copies);
    return CHECK_DONE();
}
