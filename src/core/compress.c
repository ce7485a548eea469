/* Compressed clusters (fs/f2fs/compress.c): a cluster of 1 << log_cluster_size blocks is
 * either plain (its blocks as they are) or compressed: COMPRESS_ADDR in its first slot, the
 * compressed bytes in the blocks of the next slots (struct compress_data: clen, chksum,
 * reserved, data), reserved or released slots after them.  The codecs are Debian's: liblz4
 * (LZ4 and LZ4HC data alike), liblzo2, libzstd; LZO-RLE is the kernel's own (lzorle.c). */
#include <errno.h>
#include <lz4.h>
#include <lz4hc.h>
#include <lzo/lzo1x.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "core/compress.h"
#include "core/format.h"
#include "core/inode.h"
#include "util/crc.h"

#define COMPRESS_CHKSUM_BIT  0x1
#define COMPRESS_LEVEL_SHIFT 8

bool compress_file(const struct inode_info *ii)
{
    return ii->log_cluster_size != 0;
}

const char *compress_algorithm_name(enum compress_algorithm a)
{
    static const char *const names[COMPRESS_ALGORITHMS] = {"lzo", "lz4", "zstd", "lzo-rle"};
    return (unsigned)a < COMPRESS_ALGORITHMS ? names[a] : "unknown";
}

int compress_info_get(const struct f2fs_inode *ri, const struct inode_info *ii,
                      struct compress_info *ci, const char **why)
{
    /* inode_decode checked the algorithm and the cluster size of a compressed file. */
    if (!compress_file(ii) || ri->i_compress_algorithm >= COMPRESS_ALGORITHMS) {
        *why = "no compression fields";
        return -EIO;
    }
    /* i_compress_flag follows the cluster size; an inode may end before it (flag 0). */
    size_t end = offsetof(struct f2fs_inode, i_compress_flag) + sizeof(ri->i_compress_flag) -
                 offsetof(struct f2fs_inode, i_addr);
    uint16_t flag = ii->extra_isize >= end ? le16(ri->i_compress_flag) : 0;
    *ci = (struct compress_info){.algorithm = ri->i_compress_algorithm,
                                 .log_cluster_size = ii->log_cluster_size,
                                 .chksum = flag & COMPRESS_CHKSUM_BIT,
                                 .level = (uint8_t)(flag >> COMPRESS_LEVEL_SHIFT),
                                 .released = ii->inline_flags & F2FS_COMPRESS_RELEASED};
    return 0;
}

/* liblzo2 asks for lzo_init() once per process. */
static pthread_once_t lzo_once = PTHREAD_ONCE_INIT;
static int lzo_ready;
static void lzo_setup(void)
{
    lzo_ready = lzo_init() == LZO_E_OK;
}

/* A zstd context per thread: creating one per cluster costs more than the decoding. */
static __thread ZSTD_DCtx *zstd_ctx;
static pthread_key_t zstd_key;
static pthread_once_t zstd_once = PTHREAD_ONCE_INIT;
static void zstd_free(void *ctx)
{
    ZSTD_freeDCtx(ctx);
}
static void zstd_setup(void)
{
    pthread_key_create(&zstd_key, zstd_free);
}

static ZSTD_DCtx *zstd_thread_ctx(uint32_t log_cluster_size)
{
    if (!zstd_ctx) {
        pthread_once(&zstd_once, zstd_setup);
        zstd_ctx = ZSTD_createDCtx();
        if (!zstd_ctx)
            return NULL;
        pthread_setspecific(zstd_key, zstd_ctx);
    }
    /* The kernel's window: no larger than the cluster (MAX_COMPRESS_WINDOW_SIZE). */
    ZSTD_DCtx_setParameter(zstd_ctx, ZSTD_d_windowLogMax, (int)(12 + log_cluster_size));
    return zstd_ctx;
}

/* The decoded length, -1 for data the codec rejects, or -ENOMEM. */
static long decode(const struct compress_info *ci, const uint8_t *in, size_t clen, uint8_t *out,
                   size_t rlen)
{
    switch (ci->algorithm) {
    case COMPRESS_LZ4: {
        int n = LZ4_decompress_safe((const char *)in, (char *)out, (int)clen, (int)rlen);
        return n < 0 ? -1 : n;
    }
    case COMPRESS_LZO: {
        pthread_once(&lzo_once, lzo_setup);
        if (!lzo_ready)
            return -1;
        lzo_uint n = rlen;
        int r = lzo1x_decompress_safe(in, clen, out, &n, NULL);
        return r == LZO_E_OK ? (long)n : -1;
    }
    case COMPRESS_LZORLE: return lzorle_decompress(in, clen, out, rlen);
    case COMPRESS_ZSTD: {
        ZSTD_DCtx *ctx = zstd_thread_ctx(ci->log_cluster_size);
        if (!ctx)
            return -ENOMEM;
        size_t n = ZSTD_decompressDCtx(ctx, out, rlen, in, clen);
        return ZSTD_isError(n) ? -1 : (long)n;
    }
    default: return -1;
    }
}

int compress_decode(const struct compress_info *ci, const uint8_t *cbuf, uint32_t nr_cpages,
                    uint8_t *out, const char **why)
{
    size_t rlen = (size_t)F2FS_BLKSIZE << ci->log_cluster_size;
    uint32_t clen = le32(*(const uint32_t *)cbuf);
    uint32_t stored_sum = le32(*(const uint32_t *)(cbuf + 4));
    if (nr_cpages == 0 || clen > (size_t)nr_cpages * F2FS_BLKSIZE - COMPRESS_HEADER_SIZE) {
        *why = "its compressed length runs past its blocks";
        return -EIO;
    }
    const uint8_t *data = cbuf + COMPRESS_HEADER_SIZE;
    if (ci->chksum && f2fs_crc32(F2FS_SUPER_MAGIC, data, clen) != stored_sum) {
        *why = "its checksum does not match (compress_chksum)";
        return -EIO;
    }
    long n = decode(ci, data, clen, out, rlen);
    if (n == -ENOMEM)
        return -ENOMEM;
    if (n < 0) {
        *why = "the decompressor rejects its data";
        return -EIO;
    }
    if ((size_t)n != rlen) {
        *why = "it decompresses to the wrong length";
        return -EIO;
    }
    return 0;
}

/* ---- the write side ---------------------------------------------------------------- */

/* zstd's level when the inode names none (the kernel's F2FS_ZSTD_DEFAULT_CLEVEL). */
#define ZSTD_DEFAULT_LEVEL 1
/* LZO-RLE streams start with 17 and the bitstream version (lzo1x_compress.c). */
#define LZORLE_HEADER 2
/* Up to here no copy reaches the far distances whose encodings version 1 reads as zero
 * runs (0001 1LLL with a distance field of all ones): a stream is taken as it is. */
#define LZORLE_SAFE_INPUT (32u << 10)

/* One thread's compression state: the codecs' work memory (LZ4's and LZ4HC's states, LZO's
 * dictionary, a zstd context) and an output buffer for LZO, whose compressor takes no
 * output bound.  Made on first use, freed with the thread. */
struct encoder {
    void *lz4, *lz4hc, *lzo;
    ZSTD_CCtx *zstd;
    uint8_t *out, *check; /* LZO's worst case; LZO-RLE's decoded copy */
};
static __thread struct encoder *thread_encoder;
static pthread_key_t encoder_key;
static pthread_once_t encoder_once = PTHREAD_ONCE_INIT;

static void encoder_free(void *arg)
{
    struct encoder *e = arg;
    if (!e)
        return;
    free(e->lz4);
    free(e->lz4hc);
    free(e->lzo);
    ZSTD_freeCCtx(e->zstd);
    free(e->out);
    free(e->check);
    free(e);
}

static void encoder_setup(void)
{
    pthread_key_create(&encoder_key, encoder_free);
}

/* The largest LZO1X-1 output for n bytes (liblzo2's documented bound). */
static size_t lzo_bound(size_t n)
{
    return n + n / 16 + 64 + 3;
}

static struct encoder *encoder_get(void)
{
    if (thread_encoder)
        return thread_encoder;
    pthread_once(&encoder_once, encoder_setup);
    struct encoder *e = calloc(1, sizeof(*e));
    if (!e)
        return NULL;
    size_t rmax = (size_t)F2FS_BLKSIZE << COMPRESS_LOG_MAX;
    e->lz4 = malloc((size_t)LZ4_sizeofState());
    e->lz4hc = malloc((size_t)LZ4_sizeofStateHC());
    e->lzo = malloc(LZO1X_1_MEM_COMPRESS);
    e->zstd = ZSTD_createCCtx();
    e->out = malloc(LZORLE_HEADER + lzo_bound(rmax));
    e->check = malloc(rmax);
    if (!e->lz4 || !e->lz4hc || !e->lzo || !e->zstd || !e->out || !e->check) {
        encoder_free(e);
        return NULL;
    }
    pthread_setspecific(encoder_key, e);
    thread_encoder = e;
    return e;
}

/* LZO1X-1 into e->out + skip; the stream's length, or -1. */
static long lzo_compress(struct encoder *e, const uint8_t *in, size_t rlen, size_t skip)
{
    pthread_once(&lzo_once, lzo_setup);
    if (!lzo_ready)
        return -1;
    lzo_uint n = lzo_bound(rlen);
    if (lzo1x_1_compress(in, rlen, e->out + skip, &n, e->lzo) != LZO_E_OK)
        return -1;
    return (long)n;
}

/* LZO-RLE (the kernel's lzorle1x_1_compress output format): an LZO1X-1 stream behind the
 * version 1 header.  Version 1 reads every version 0 instruction alike but one: a copy
 * from the farthest M4 distance (49151 bytes), whose bits are those of a zero run.
 * liblzo2 compresses in pieces of 49152 bytes, so its copies stop short of that; as that
 * is how it is built, not what it promises, a stream of more than 32 KiB of input is
 * decoded as the kernel would, and one that does not give the input back is not used (the
 * cluster stays plain).  Without zero runs the stream is a little larger than the kernel's
 * for zero-rich data; every decoder of the format reads it. */
static long lzorle_compress(struct encoder *e, const uint8_t *in, size_t rlen)
{
    long n = lzo_compress(e, in, rlen, LZORLE_HEADER);
    if (n < 0)
        return -1;
    e->out[0] = 17;
    e->out[1] = 1;
    n += LZORLE_HEADER;
    if (rlen > LZORLE_SAFE_INPUT) {
        long back = lzorle_decompress(e->out, (size_t)n, e->check, rlen);
        if (back != (long)rlen || memcmp(e->check, in, rlen) != 0)
            return -1;
    }
    return n;
}

/* The compressed length (at most cap) in dst, or 0 when it does not fit, -1 on failure. */
static long encode(const struct compress_info *ci, struct encoder *e, const uint8_t *in,
                   size_t rlen, uint8_t *dst, size_t cap)
{
    switch (ci->algorithm) {
    case COMPRESS_LZ4: {
        int n = ci->level ? LZ4_compress_HC_extStateHC(e->lz4hc, (const char *)in, (char *)dst,
                                                       (int)rlen, (int)cap, ci->level)
                          : LZ4_compress_fast_extState(e->lz4, (const char *)in, (char *)dst,
                                                       (int)rlen, (int)cap, 1);
        return n > 0 ? n : 0; /* liblz4 returns 0 when the output would not fit */
    }
    case COMPRESS_ZSTD: {
        int level = ci->level ? ci->level : ZSTD_DEFAULT_LEVEL;
        if (level > ZSTD_maxCLevel())
            level = ZSTD_maxCLevel();
        size_t n = ZSTD_compressCCtx(e->zstd, dst, cap, in, rlen, level);
        /* Its errors here are an output that does not fit: the cluster stays plain. */
        return ZSTD_isError(n) ? 0 : (long)n;
    }
    case COMPRESS_LZO:
    case COMPRESS_LZORLE: {
        long n = ci->algorithm == COMPRESS_LZO ? lzo_compress(e, in, rlen, 0)
                                               : lzorle_compress(e, in, rlen);
        if (n < 0)
            return ci->algorithm == COMPRESS_LZO ? -1 : 0;
        if ((size_t)n > cap)
            return 0;
        memcpy(dst, e->out, (size_t)n);
        return n;
    }
    default: return -1;
    }
}

int compress_encode(const struct compress_info *ci, const uint8_t *rbuf, uint8_t *cbuf)
{
    uint32_t cluster = 1u << ci->log_cluster_size;
    size_t rlen = (size_t)F2FS_BLKSIZE << ci->log_cluster_size;
    /* A cluster must save a block: at most cluster - 1 blocks, the header included. */
    size_t cap = (size_t)(cluster - 1) * F2FS_BLKSIZE - COMPRESS_HEADER_SIZE;
    struct encoder *e = encoder_get();
    if (!e)
        return -ENOMEM;
    uint8_t *data = cbuf + COMPRESS_HEADER_SIZE;
    long clen = encode(ci, e, rbuf, rlen, data, cap);
    if (clen < 0)
        return -EIO;
    if (clen == 0)
        return 0;
    uint32_t nr = (uint32_t)((COMPRESS_HEADER_SIZE + (size_t)clen + F2FS_BLKSIZE - 1) /
                             F2FS_BLKSIZE);
    uint32_t len = htole32((uint32_t)clen);
    uint32_t sum = htole32(ci->chksum ? f2fs_crc32(F2FS_SUPER_MAGIC, data, (size_t)clen) : 0);
    memcpy(cbuf, &len, 4);
    memcpy(cbuf + 4, &sum, 4);
    memset(cbuf + 8, 0, COMPRESS_HEADER_SIZE - 8);
    memset(data + clen, 0, (size_t)nr * F2FS_BLKSIZE - COMPRESS_HEADER_SIZE - (size_t)clen);
    return (int)nr;
}
