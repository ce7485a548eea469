/* Android sparse images, read in place: the chunk list becomes a sorted extent map at open,
 * and a read of the expanded image copies from the raw chunks' bytes in the file, repeats a
 * fill value, or zeroes.  Nothing is expanded on disk or in memory.
 *
 * Why the headers are walked here rather than only through libsparse: its public API hides
 * where a raw chunk's bytes sit in the file (sparse_file_foreach_chunk hands over copies
 * of the data, read whole), and serving random reads needs exactly those offsets.  So the
 * walk below checks every header itself (giving the error a byte position), and libsparse's
 * own import of the same file must agree before the image is used. */
#include "blk/blk_sparse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sparse/sparse.h>

#include "blk/blk_internal.h"
#include "util/log.h"

/* The on-disk format (AOSP system/core/libsparse/sparse_format.h, version 1.0). */
#define SPARSE_FILE_HDR_MIN  28u
#define SPARSE_CHUNK_HDR_MIN 12u
#define CHUNK_RAW            0xcac1u
#define CHUNK_FILL           0xcac2u
#define CHUNK_DONT_CARE      0xcac3u
#define CHUNK_CRC32          0xcac4u

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

bool blk_sparse_magic(const void *head, size_t len)
{
    return len >= 4 && get32(head) == BLK_SPARSE_MAGIC;
}

/* pread of exactly len bytes: 0, or -EIO at a short read (the file ends), -errno. */
static int read_exact(int fd, void *buf, size_t len, uint64_t off)
{
    return blk_fd_io(fd, false, buf, len, (off_t)off);
}

static int map_add(struct blk_sparse_map *map, size_t *cap, struct blk_sparse_extent e)
{
    if (e.len == 0)
        return 0;
    struct blk_sparse_extent *last = map->count ? &map->extents[map->count - 1] : NULL;
    if (last && last->kind == BLK_SPARSE_ZERO && e.kind == BLK_SPARSE_ZERO) {
        last->len += e.len; /* runs of don't-care chunks are one hole */
        return 0;
    }
    if (map->count == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        struct blk_sparse_extent *n = realloc(map->extents, ncap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        map->extents = n;
        *cap = ncap;
    }
    map->extents[map->count++] = e;
    return 0;
}

void blk_sparse_map_free(struct blk_sparse_map *map)
{
    free(map->extents);
    memset(map, 0, sizeof(*map));
}

/* libsparse's reading of the same file: it must import it and expand it to the same size. */
static int libsparse_agrees(int fd, const struct blk_sparse_map *map, char *why, size_t n)
{
    if (lseek(fd, 0, SEEK_SET) < 0)
        return -errno;
    struct sparse_file *s = sparse_file_import(fd, false, false);
    if (!s) {
        snprintf(why, n, "libsparse cannot import it (a damaged chunk list)");
        return -EINVAL;
    }
    int64_t len = sparse_file_len(s, false, false);
    unsigned block_size = sparse_file_block_size(s);
    sparse_file_destroy(s);
    if (len < 0 || (uint64_t)len != map->size || block_size != map->block_size) {
        snprintf(why, n,
                 "libsparse reads it as %lld bytes in %u-byte blocks, the chunk list "
                 "says %llu in %u-byte blocks",
                 (long long)len, block_size, (unsigned long long)map->size, map->block_size);
        return -EINVAL;
    }
    return 0;
}

#define BAD(...) (snprintf(why, why_len, __VA_ARGS__), -EINVAL)

/* The file header's geometry, checked against itself and the file's size. */
struct sparse_geometry {
    uint64_t file_size;
    uint16_t file_hdr_sz, chunk_hdr_sz;
    uint32_t blk_sz, total_blks, total_chunks;
};

static int read_header(int fd, struct sparse_geometry *g, char *why, size_t why_len)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    g->file_size = (uint64_t)st.st_size;
    uint8_t hdr[SPARSE_FILE_HDR_MIN];
    int err = read_exact(fd, hdr, sizeof(hdr), 0);
    if (err == -EIO)
        return BAD("sparse image: truncated: the file ends inside its %u-byte header",
                   SPARSE_FILE_HDR_MIN);
    if (err)
        return err;
    uint16_t major = get16(hdr + 4);
    g->file_hdr_sz = get16(hdr + 8);
    g->chunk_hdr_sz = get16(hdr + 10);
    g->blk_sz = get32(hdr + 12);
    g->total_blks = get32(hdr + 16);
    g->total_chunks = get32(hdr + 20);
    if (get32(hdr) != BLK_SPARSE_MAGIC)
        return BAD("sparse image: bad magic 0x%08x", get32(hdr));
    if (major != 1)
        return BAD("sparse image: format version %u is not 1", major);
    if (g->file_hdr_sz < SPARSE_FILE_HDR_MIN || g->chunk_hdr_sz < SPARSE_CHUNK_HDR_MIN)
        return BAD("sparse image: bad header sizes (file header %u, chunk header %u bytes)",
                   g->file_hdr_sz, g->chunk_hdr_sz);
    if (g->blk_sz == 0 || g->blk_sz % 4 || g->blk_sz > (64u << 20))
        return BAD("sparse image: bad block size %u", g->blk_sz);
    /* every chunk takes a header in the file: a count the file cannot hold is a lie */
    if (g->file_size < g->file_hdr_sz ||
        g->total_chunks > (g->file_size - g->file_hdr_sz) / g->chunk_hdr_sz)
        return BAD("sparse image: truncated: the header lists %u chunks, the %llu-byte file "
                   "cannot hold them",
                   g->total_chunks, (unsigned long long)g->file_size);
    return 0;
}

/* Chunk i, whose header is at *pos and whose data starts at image block *block: its extent
 * goes to map (a CRC32 chunk adds none); *pos and *block move past it. */
static int read_chunk(int fd, const struct sparse_geometry *g, uint32_t i, uint64_t *pos,
                      uint64_t *block, struct blk_sparse_map *map, size_t *cap, char *why,
                      size_t why_len)
{
    uint8_t ch[SPARSE_CHUNK_HDR_MIN];
    if (*pos + g->chunk_hdr_sz > g->file_size)
        return BAD("sparse image: truncated: chunk %u of %u would start at byte %llu, past the "
                   "end of the %llu-byte file",
                   i + 1, g->total_chunks, (unsigned long long)*pos,
                   (unsigned long long)g->file_size);
    int err = read_exact(fd, ch, sizeof(ch), *pos);
    if (err)
        return err;
    uint16_t type = get16(ch);
    uint32_t chunk_blocks = get32(ch + 4), total_sz = get32(ch + 8);
    uint64_t data_len = (uint64_t)chunk_blocks * g->blk_sz, body = 0;
    switch (type) {
    case CHUNK_RAW: body = data_len; break;
    case CHUNK_FILL: body = 4; break;
    case CHUNK_DONT_CARE: body = 0; break;
    case CHUNK_CRC32: body = 4; break;
    default:
        return BAD("sparse image: bad chunk header at byte %llu (chunk %u of %u): unknown "
                   "chunk type 0x%04x",
                   (unsigned long long)*pos, i + 1, g->total_chunks, type);
    }
    if ((uint64_t)total_sz != g->chunk_hdr_sz + body)
        return BAD("sparse image: bad chunk header at byte %llu (chunk %u of %u): its size %u "
                   "should be %llu for a type 0x%04x chunk of %u blocks",
                   (unsigned long long)*pos, i + 1, g->total_chunks, total_sz,
                   (unsigned long long)(g->chunk_hdr_sz + body), type, chunk_blocks);
    if (type == CHUNK_CRC32) { /* a checksum of what came before: no blocks */
        *pos += total_sz;
        return 0;
    }
    if (chunk_blocks > g->total_blks - *block)
        return BAD("sparse image: bad chunk header at byte %llu (chunk %u of %u): its %u "
                   "blocks run past the image's %u",
                   (unsigned long long)*pos, i + 1, g->total_chunks, chunk_blocks, g->total_blks);
    uint64_t data_at = *pos + g->chunk_hdr_sz;
    if (*pos + total_sz > g->file_size)
        return BAD("sparse image: truncated: chunk %u of %u (at byte %llu) needs %u bytes, the "
                   "file ends after %llu",
                   i + 1, g->total_chunks, (unsigned long long)*pos, total_sz,
                   (unsigned long long)(g->file_size - *pos));
    struct blk_sparse_extent e = {.dev_off = *block * g->blk_sz, .len = data_len};
    if (type == CHUNK_RAW) {
        e.kind = BLK_SPARSE_RAW;
        e.file_off = data_at;
    } else if (type == CHUNK_FILL) {
        uint8_t fill[4];
        if ((err = read_exact(fd, fill, sizeof(fill), data_at)) != 0)
            return err;
        e.fill = get32(fill);
        e.kind = e.fill ? BLK_SPARSE_FILL : BLK_SPARSE_ZERO;
    } else {
        e.kind = BLK_SPARSE_ZERO;
    }
    err = map_add(map, cap, e);
    *block += chunk_blocks;
    *pos += total_sz;
    return err;
}

int blk_sparse_map_read(int fd, struct blk_sparse_map *map, char *why, size_t why_len)
{
    memset(map, 0, sizeof(*map));
    struct sparse_geometry g = {0};
    int err = read_header(fd, &g, why, why_len);
    if (err)
        return err;
    map->block_size = g.blk_sz;
    map->size = (uint64_t)g.total_blks * g.blk_sz;
    size_t cap = 0;
    uint64_t pos = g.file_hdr_sz, block = 0;
    for (uint32_t i = 0; i < g.total_chunks && !err; i++)
        err = read_chunk(fd, &g, i, &pos, &block, map, &cap, why, why_len);
    if (!err && block != g.total_blks)
        err = BAD("sparse image: the chunks cover %llu of the %u blocks the header promises",
                  (unsigned long long)block, g.total_blks);
    if (!err)
        err = libsparse_agrees(fd, map, why, why_len);
    if (err)
        blk_sparse_map_free(map);
    return err;
}
#undef BAD

/* ---- the backend --------------------------------------------------------------------- */

/* The extent holding image offset off (the map covers the whole image, without gaps). */
static size_t extent_at(const struct blk_sparse_map *map, uint64_t off)
{
    size_t lo = 0, hi = map->count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (map->extents[mid].dev_off <= off)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Copies [off, off + len) of the expanded image (inside it) into buf.  0 or -errno. */
static int map_read(const struct blk_sparse_map *map, int fd, uint64_t off, uint8_t *buf,
                    uint64_t len)
{
    size_t i = extent_at(map, off);
    while (len) {
        const struct blk_sparse_extent *e = &map->extents[i++];
        uint64_t skip = off - e->dev_off;
        uint64_t n = e->len - skip < len ? e->len - skip : len;
        if (e->kind == BLK_SPARSE_RAW) {
            int err = read_exact(fd, buf, n, e->file_off + skip);
            if (err)
                return err; /* -EIO: the file shrank under us */
        } else if (e->kind == BLK_SPARSE_FILL) {
            for (uint64_t k = 0; k < n; k++) /* the value is little-endian from the block on */
                buf[k] = (uint8_t)(e->fill >> (8 * ((skip + k) % 4)));
        } else {
            memset(buf, 0, n);
        }
        buf += n;
        off += n;
        len -= n;
    }
    return 0;
}

static int sparse_init(struct blk_dev *dev)
{
    struct blk_sparse_map *map = calloc(1, sizeof(*map));
    if (!map)
        return -ENOMEM;
    char why[256] = "";
    int err = blk_sparse_map_read(dev->fd, map, why, sizeof(why));
    if (err) {
        if (why[0])
            log_err("%s", why);
        free(map);
        return err;
    }
    dev->backend = map;
    dev->size = map->size;
    dev->read_only = true;
    dev->direct = false;
    return 0;
}

static int64_t sparse_execute(struct blk_dev *dev, struct blk_req *req)
{
    const struct blk_sparse_map *map = dev->backend;
    switch (req->op) {
    case BLK_READ: {
        /* admission let through only reads starting inside the device */
        uint64_t len = req->len;
        if (req->off + len > dev->size)
            len = dev->size - req->off; /* a short count at the end, as a file gives */
        int err = map_read(map, dev->fd, dev->window_start + req->off, req->buf, len);
        return err ? err : (int64_t)len;
    }
    case BLK_FLUSH: return 0; /* nothing is ever written */
    default: return -EROFS;
    }
}

static int sparse_submit(struct blk_dev *dev, struct blk_req **reqs, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        struct blk_req *req = reqs[i];
        req->result = (req->flags & BLK_REQF_PRESET) ? req->preset_result
                                                     : sparse_execute(dev, req);
        blk_req_complete(dev, req);
    }
    return 0;
}

static void sparse_fini(struct blk_dev *dev)
{
    struct blk_sparse_map *map = dev->backend;
    if (!map)
        return;
    blk_sparse_map_free(map);
    free(map);
    dev->backend = NULL;
}

const struct blk_backend_ops blk_sparse_ops = {
    .name = "sparse",
    .init = sparse_init,
    .submit = sparse_submit,
    .fini = sparse_fini,
};
