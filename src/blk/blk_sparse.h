/* Android sparse images (what img2simg and factory images make): the chunk list of one,
 * checked header by header, and the read-only block backend that serves the expanded
 * image from it (blk_sparse.c). */
#ifndef F2FUSE_BLK_BLK_SPARSE_H
#define F2FUSE_BLK_BLK_SPARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BLK_SPARSE_MAGIC 0xed26ff3au

/* Whether head (the file's first bytes, at least 4) carries the sparse image magic. */
bool blk_sparse_magic(const void *head, size_t len);

enum blk_sparse_kind { BLK_SPARSE_RAW, BLK_SPARSE_FILL, BLK_SPARSE_ZERO };

/* One run of the expanded image: raw bytes stored in the file at file_off, a repeated
 * 32-bit fill value, or zeros (a don't-care chunk, or the unwritten tail). */
struct blk_sparse_extent {
    uint64_t dev_off, len; /* bytes of the expanded image */
    enum blk_sparse_kind kind;
    uint64_t file_off; /* RAW */
    uint32_t fill;     /* FILL: little-endian on disk, so byte i is (fill >> 8*(i%4)) */
};

struct blk_sparse_map {
    struct blk_sparse_extent *extents; /* in dev_off order, covering [0, size) exactly */
    size_t count;
    uint64_t size; /* bytes of the expanded image */
    uint32_t block_size;
};

/* Reads the chunk list of the sparse image open on fd, checking every header against the
 * format and the file's length, then has libsparse import the image as a second opinion.
 * 0, or -EINVAL (bad or truncated image: why says where, e.g. "bad chunk header at byte
 * 4124 (chunk 3 of 9): unknown type 0x1234") or -ENOMEM.  Free the map with
 * blk_sparse_map_free. */
int blk_sparse_map_read(int fd, struct blk_sparse_map *map, char *why, size_t why_len);
void blk_sparse_map_free(struct blk_sparse_map *map);

#endif
