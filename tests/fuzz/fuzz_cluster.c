/* libFuzzer harness: the compressed-cluster decoder (compress_decode) for every algorithm,
 * and the kernel's LZO / LZO-RLE decoder (lzorle_decompress) on the raw bytes; then the same
 * bytes as a cluster's data through the encoder (compress_encode), whose output must decode
 * back to them.
 * Input: an algorithm byte, a cluster-size byte, a flags byte (bit 0: checksum, bit 1: a
 * level: LZ4HC 9, zstd 7), then the cluster's blocks (header first; short input is padded
 * with zeros to whole blocks). */
#include <lz4.h>
#include <lzo/lzo1x.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "core/compress.h"
#include "core/format.h"
#include "util/crc.h"

#define BLK       4096u
#define MAX_CLUST (BLK << 4) /* clusters up to 64 KiB keep each run fast */

static uint8_t cluster[MAX_CLUST], out[MAX_CLUST], enc[MAX_CLUST];

/* One seed per algorithm and cluster size: words compressed by the library itself
 * (F2FUSE_FUZZ_SEEDS=DIR, as the other harnesses). */
static void write_seeds(const char *dir)
{
    static uint8_t src[MAX_CLUST], comp[MAX_CLUST * 2], seed[3 + MAX_CLUST * 2];
    static uint8_t work[LZO1X_1_MEM_COMPRESS];
    static const char *const words[] = {"alpha ", "beta ", "f2fs ", "\n", "cluster "};
    lzo_init();
    for (uint32_t log = 2; log <= 4; log++) {
        size_t rlen = (size_t)BLK << log, n = 0;
        for (unsigned i = 0; n < rlen; i++)
            for (const char *w = words[i * 7 % 5]; *w && n < rlen; w++)
                src[n++] = (uint8_t)*w;
        for (int alg = 0; alg < COMPRESS_ALGORITHMS; alg++) {
            long clen = -1;
            if (alg == COMPRESS_LZ4) {
                clen = LZ4_compress_default((char *)src, (char *)comp, (int)rlen, sizeof(comp));
            } else if (alg == COMPRESS_ZSTD) {
                size_t r = ZSTD_compress(comp, sizeof(comp), src, rlen, 1);
                clen = ZSTD_isError(r) ? -1 : (long)r;
            } else {
                lzo_uint l = sizeof(comp);
                clen = lzo1x_1_compress(src, rlen, comp, &l, work) == LZO_E_OK ? (long)l : -1;
            }
            if (clen <= 0)
                continue;
            uint32_t c = htole32((uint32_t)clen);
            uint32_t sum = htole32(f2fs_crc32(F2FS_SUPER_MAGIC, comp, (size_t)clen));
            seed[0] = (uint8_t)alg;
            seed[1] = (uint8_t)log;
            seed[2] = 1;
            memset(seed + 3, 0, COMPRESS_HEADER_SIZE);
            memcpy(seed + 3, &c, 4);
            memcpy(seed + 7, &sum, 4);
            memcpy(seed + 3 + COMPRESS_HEADER_SIZE, comp, (size_t)clen);
            char path[512];
            snprintf(path, sizeof(path), "%s/%s-L%u", dir, compress_algorithm_name(alg), log);
            FILE *f = fopen(path, "wb");
            size_t len = 3 + COMPRESS_HEADER_SIZE + (size_t)clen;
            if (!f || fwrite(seed, 1, len, f) != len || fclose(f)) {
                perror(path);
                exit(1);
            }
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("F2FUSE_FUZZ_SEEDS");
    if (dir) {
        write_seeds(dir);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    struct compress_info ci = {.algorithm = data[0] % COMPRESS_ALGORITHMS,
                               .log_cluster_size = 2 + data[1] % 3,
                               .chksum = data[2] & 1};
    data += 3;
    size -= 3;
    if (size > MAX_CLUST)
        size = MAX_CLUST;
    uint32_t nr = (uint32_t)((size + BLK - 1) / BLK);
    memset(cluster, 0, sizeof(cluster));
    memcpy(cluster, data, size);
    const char *why = NULL;
    int err = compress_decode(&ci, cluster, nr ? nr : 1, out, &why);
    if (err && !why && err != -12) /* every failure says why, except a lack of memory */
        abort();
    lzorle_decompress(data, size, out, (size_t)BLK << ci.log_cluster_size);
    /* the input as plain data: what the encoder makes of it decodes back to it */
    size_t rlen = (size_t)BLK << ci.log_cluster_size;
    ci.level = (data[-1] & 2) ? (ci.algorithm == COMPRESS_LZ4 ? 9 : 7) : 0;
    memset(cluster, 0, rlen);
    memcpy(cluster, data, size < rlen ? size : rlen);
    int enr = compress_encode(&ci, cluster, enc);
    if (enr < 0 && enr != -12)
        abort();
    if (enr > 0) {
        if ((uint32_t)enr >= 1u << ci.log_cluster_size)
            abort(); /* a compressed cluster must save a block */
        if (compress_decode(&ci, enc, (uint32_t)enr, out, &why) != 0 || memcmp(out, cluster, rlen))
            abort();
    }
    return 0;
}
