/* compress.c: f2fs compressed clusters (fs/f2fs/compress.c) - the inode's compression
 * parameters, the cluster header, and the codecs (Debian's liblz4, liblzo2, libzstd; the
 * kernel's own LZO-RLE variant in lzorle.c). */
#ifndef F2FUSE_CORE_COMPRESS_H
#define F2FUSE_CORE_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct f2fs_inode;
struct inode_info;

enum compress_algorithm {
    COMPRESS_LZO = 0,
    COMPRESS_LZ4 = 1,
    COMPRESS_ZSTD = 2,
    COMPRESS_LZORLE = 3,
    COMPRESS_ALGORITHMS
};

/* The kernel's bounds on i_log_cluster_size (MIN/MAX_COMPRESS_LOG_SIZE). */
#define COMPRESS_LOG_MIN 2
#define COMPRESS_LOG_MAX 8
/* struct compress_data: clen, chksum, reserved[4], then the compressed bytes. */
#define COMPRESS_HEADER_SIZE 24u

struct compress_info {
    enum compress_algorithm algorithm;
    uint32_t log_cluster_size; /* a cluster is 1 << this many blocks */
    bool chksum;               /* i_compress_flag bit 0: the header's chksum is checked */
    uint8_t level;             /* i_compress_flag >> 8 (0: the algorithm's default) */
    bool released;             /* F2FS_COMPRESS_RELEASED: the spare blocks were given back */
};

/* Whether the inode is a compressed file as the kernel takes one (inode_decode decides). */
bool compress_file(const struct inode_info *ii);
/* The compression parameters of a compressed file (inode_decode checked their range). */
int compress_info_get(const struct f2fs_inode *ri, const struct inode_info *ii,
                      struct compress_info *ci, const char **why);
const char *compress_algorithm_name(enum compress_algorithm a);

/* Decompresses one cluster: cbuf holds its nr_cpages compressed blocks (the header first),
 * out receives 4096 << log_cluster_size bytes.  0, or -EIO with *why for a header whose
 * length runs past its blocks, a checksum mismatch, a codec error or a wrong length (as
 * f2fs_decompress_cluster, except that a bad checksum fails the read); -ENOMEM. */
int compress_decode(const struct compress_info *ci, const uint8_t *cbuf, uint32_t nr_cpages,
                    uint8_t *out, const char **why);

/* Compresses one cluster as f2fs stores it (f2fs_compress_pages): rbuf (4096 <<
 * log_cluster_size bytes) with the inode's algorithm and level (LZ4 level > 0: LZ4HC; zstd
 * level 0: 1) into cbuf, which has room for cluster - 1 blocks: the header (clen, the
 * checksum when the inode asks for it, zeros), the data, zeros to the end of its last
 * block.  Returns the blocks it takes, 0 when it would not save a block (the cluster is
 * then stored plain, as the kernel does), -ENOMEM, or -EIO when a codec fails. */
int compress_encode(const struct compress_info *ci, const uint8_t *rbuf, uint8_t *cbuf);

/* lzorle.c: the kernel's LZO1X decompressor semantics, bitstream version 1 (LZO-RLE: runs
 * of zeros) included.  Returns the decoded length, or -1 for a stream that is malformed or
 * does not fit out_len. */
long lzorle_decompress(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len);

#endif
