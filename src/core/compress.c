/* Compressed clusters (fs/f2fs/compress.c): a cluster of 1 << log_cluster_size blocks is
 * either plain (its blocks as they are) or compressed: COMPRESS_ADDR in its first slot, the
 * compressed bytes in the blocks of the next slots (struct compress_data: clen, chksum,
 * reserved, data), reserved or released slots after them.  The codecs are Debian's: liblz4
 * (LZ4 and LZ4HC data alike), liblzo2, libzstd; LZO-RLE is the kernel's own (lzorle.c). */
#include <errno.h>
#include <lz4.h>
#include <lzo/lzo1x.h>
#include <pthread.h>
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
