/* The window: a device that is one part of the file (-o offset=, -o partition=), for SD
 * card and whole-disk dumps.  Resolved once at open into window_start and size; from then on
 * every backend adds window_start to its file positions, and admission (blk.c) already
 * refuses what crosses the device's end, so nothing can reach the bytes around the window. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "blk/blk_internal.h"
#include "blk/blk_partition.h"
#include "util/log.h"

static int partition_window(struct blk_dev *dev, const char *path, const char *spec,
                            uint64_t *start, uint64_t *len)
{
    if (dev->ops == &blk_sparse_ops) {
        log_err("%s: partition=%s: the image is an Android sparse image, whose partition table "
                "f2fuse does not read; convert it with `f2fuse unsparse %s RAW` first, or give "
                "the partition's start with -o offset=BYTES",
                path, spec, path);
        return -EINVAL;
    }
    struct blk_partition_table table;
    int err = blk_partition_table_read(path, &table);
    if (err) {
        log_err("%s: cannot read the partition table: %s", path, strerror(-err));
        return err;
    }
    if (!table.kind[0]) {
        log_err("%s: partition=%s: the image has no partition table (GPT or MBR) that "
                "libblkid recognizes; mount it without partition=, or use offset=BYTES",
                path, spec);
        blk_partition_table_free(&table);
        return -ENXIO;
    }
    const struct f2fuse_partition *p = blk_partition_find(&table, spec);
    if (!p) {
        char f2fs[256];
        blk_partition_f2fs_list(&table, f2fs, sizeof(f2fs));
        log_err("%s: partition=%s: no such partition in its %s table (%u partitions; holding "
                "f2fs: %s); `f2fuse info %s` lists them",
                path, spec, table.kind, table.count, f2fs, path);
        blk_partition_table_free(&table);
        return -ENXIO;
    }
    *start = p->start;
    *len = p->size;
    blk_partition_table_free(&table);
    if (*start >= dev->size || *len > dev->size - *start) {
        log_err("%s: partition %s runs past the end of the image (%" PRIu64 " bytes at %" PRIu64
                ", image %" PRIu64 " bytes): the dump is truncated",
                path, spec, *len, *start, dev->size);
        return -ENXIO;
    }
    return 0;
}

int blk_window_apply(struct blk_dev *dev, const char *path, const struct blk_options *opts)
{
    bool has_partition = opts->partition && opts->partition[0];
    if (!opts->offset && !has_partition)
        return 0;
    if (opts->offset && has_partition) {
        log_err("%s: offset= and partition= both say where the file system starts; give one", path);
        return -EINVAL;
    }
    uint64_t start = opts->offset, len;
    if (has_partition) {
        int err = partition_window(dev, path, opts->partition, &start, &len);
        if (err)
            return err;
    } else {
        if (start % BLK_ALIGN) {
            log_err("%s: offset=%" PRIu64 " is not a multiple of 4096 (f2fs blocks are 4 KiB; a "
                    "partition's start in bytes is its start sector times 512)",
                    path, start);
            return -EINVAL;
        }
        if (start >= dev->size) {
            log_err("%s: offset=%" PRIu64 " is not inside the image (%" PRIu64 " bytes)", path,
                    start, dev->size);
            return -EINVAL;
        }
        len = dev->size - start;
    }
    dev->window_start = start;
    dev->windowed = start + len < dev->size;
    dev->size = len;
    return 0;
}
