/* `f2fuse unsparse [-f] SPARSE RAW`: an Android sparse image expanded to a raw one, for a
 * read-write mount (a sparse image mounts read-only).  libsparse does the expansion
 * (sparse_file_import + sparse_file_foreach_chunk); blocks that are all zeros (don't-care
 * and zero-fill chunks, zero raw blocks) are left as holes, so RAW takes no more disk than
 * SPARSE did.  The output is written under a temporary name next to RAW and renamed into
 * place at the end: a failure or Ctrl-C leaves no partial RAW behind. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sparse/sparse.h>

#include "blk/blk_sparse.h"
#include "cli/cli.h"
#include "cli/progress.h"

struct unsparse {
    int out_fd;
    uint32_t block_size;
    int64_t chunk_block; /* the chunk being written (-1 before the first) */
    uint64_t pos;        /* where its next bytes go */
    uint64_t total;
    struct progress progress;
    int err; /* -errno of a failed write, -EINTR on Ctrl-C */
};

static bool all_zero(const uint8_t *p, size_t n)
{
    return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

/* libsparse hands over each chunk's expanded bytes, a fill chunk block by block, all with
 * the chunk's first block number: the position within the chunk is counted here. */
static int write_chunk(void *priv, const void *data, size_t len, unsigned int block,
                       unsigned int nr_blocks)
{
    struct unsparse *u = priv;
    if ((int64_t)block != u->chunk_block) {
        u->chunk_block = block;
        u->pos = (uint64_t)block * u->block_size;
    }
    if (u->pos + len > u->total) {
        u->err = -EINVAL; /* more data than the header promised */
        return -1;
    }
    if (data && !all_zero(data, len)) {
        size_t done = 0;
        while (done < len) {
            ssize_t r = pwrite(u->out_fd, (const uint8_t *)data + done, len - done,
                               (off_t)(u->pos + done));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                u->err = r < 0 ? -errno : -EIO;
                return -1;
            }
            done += (size_t)r;
        }
    }
    u->pos += len;
    progress_update(&u->progress, u->pos, u->total);
    if (progress_stop_requested(&u->progress)) {
        u->err = -EINTR;
        return -1;
    }
    return 0;
}

/* Whether the chunk list holds any data at all (libsparse's foreach over no chunks returns
 * an unset value, so an all-hole image is not handed to it). */
static bool has_data(const struct blk_sparse_map *map)
{
    for (size_t i = 0; i < map->count; i++)
        if (map->extents[i].kind != BLK_SPARSE_ZERO)
            return true;
    return false;
}

static int expand(int in_fd, const struct blk_sparse_map *map, struct unsparse *u)
{
    if (ftruncate(u->out_fd, (off_t)map->size) < 0)
        return -errno;
    if (!has_data(map))
        return 0;
    if (lseek(in_fd, 0, SEEK_SET) < 0)
        return -errno;
    struct sparse_file *s = sparse_file_import(in_fd, false, false);
    if (!s)
        return -EINVAL;
    int ret = sparse_file_foreach_chunk(s, false, false, write_chunk, u);
    sparse_file_destroy(s);
    if (u->err)
        return u->err;
    if (ret)
        return ret < 0 ? ret : -EIO;
    return fsync(u->out_fd) < 0 ? -errno : 0;
}

int unsparse_main(int argc, char **argv)
{
    static const char usage_line[] = "usage: f2fuse unsparse [-f] SPARSE RAW\n";
    bool force = false;
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-f") == 0 || strcmp(argv[i], "--force") == 0)
            force = true;
        else if (argv[i][0] == '-' || (in && out))
            return fputs(usage_line, stderr), 2;
        else if (!in)
            in = argv[i];
        else
            out = argv[i];
    }
    if (!in || !out)
        return fputs(usage_line, stderr), 2;

    int in_fd = open(in, O_RDONLY | O_CLOEXEC);
    if (in_fd < 0) {
        fprintf(stderr, "f2fuse: error: %s: %s\n", in, strerror(errno));
        return 1;
    }
    uint8_t head[4];
    if (pread(in_fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
        !blk_sparse_magic(head, sizeof(head))) {
        fprintf(stderr,
                "f2fuse: error: %s is not an Android sparse image (no sparse magic "
                "0x%08x at its start); a raw image needs no unsparse\n",
                in, BLK_SPARSE_MAGIC);
        close(in_fd);
        return 1;
    }
    struct blk_sparse_map map;
    char why[256] = "";
    int err = blk_sparse_map_read(in_fd, &map, why, sizeof(why));
    if (err) {
        fprintf(stderr, "f2fuse: error: %s: %s\n", in, why[0] ? why : strerror(-err));
        close(in_fd);
        return 1;
    }
    struct stat st;
    if (!force && lstat(out, &st) == 0) {
        fprintf(stderr, "f2fuse: error: %s exists; add -f to overwrite it\n", out);
        blk_sparse_map_free(&map);
        close(in_fd);
        return 1;
    }
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s.unsparse-XXXXXX", out);
    struct unsparse u = {.block_size = map.block_size, .chunk_block = -1, .total = map.size};
    u.out_fd = mkstemp(tmp);
    if (u.out_fd < 0) {
        fprintf(stderr, "f2fuse: error: cannot create %s: %s\n", tmp, strerror(errno));
        blk_sparse_map_free(&map);
        close(in_fd);
        return 1;
    }
    mode_t mask = umask(0); /* mkstemp makes it 0600; give it a plain create's mode */
    umask(mask);
    fchmod(u.out_fd, 0666 & ~mask);
    progress_begin(&u.progress, "unsparse", true);
    err = expand(in_fd, &map, &u);
    progress_end(&u.progress);
    if (close(u.out_fd) < 0 && !err)
        err = -errno;
    if (!err &&
        (force ? rename(tmp, out) : renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_NOREPLACE)) < 0)
        err = -errno;
    if (err) {
        unlink(tmp);
        if (err == -EEXIST)
            fprintf(stderr, "f2fuse: error: %s appeared meanwhile; add -f to overwrite it\n", out);
        else if (err == -EINTR)
            fprintf(stderr, "f2fuse: unsparse stopped; %s was not written\n", out);
        else
            fprintf(stderr, "f2fuse: error: cannot expand %s into %s: %s\n", in, out,
                    err == -EINVAL ? "libsparse refuses the image" : strerror(-err));
    } else {
        char human[32];
        progress_human(map.size, human, sizeof(human));
        fprintf(stderr, "f2fuse: %s: %s raw image\n", out, human);
    }
    blk_sparse_map_free(&map);
    close(in_fd);
    return err ? 1 : 0;
}
