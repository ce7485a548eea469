/* What an image is when it is not f2fs, so that a refused mount can say "this is an ext4
 * file system" or "this is a whole disk: pick a partition" rather than "bad magic".
 * libblkid's superblock and partition-table probes name what they know; compressed data
 * has no blkid prober, so its magic bytes are checked here. */
#include <blkid.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blk/blk_internal.h"
#include "blk/blk_partition.h"

/* How much of an expanded sparse image is copied out for libblkid, which reads a
 * descriptor: enough for every superblock it probes near the start. */
#define SPARSE_PROBE_BYTES (8u << 20)

static const char *compression(const uint8_t *h, size_t n, const char **undo)
{
    static const struct {
        const char *name, *magic, *undo;
        size_t len;
    } kinds[] = {
        {"gzip", "\x1f\x8b", "gunzip -k", 2},
        {"xz",
         "\xfd"
         "7zXZ\0",
         "xz -dk", 6},
        {"zstd", "\x28\xb5\x2f\xfd", "zstd -d", 4},
        {"bzip2", "BZh", "bunzip2 -k", 3},
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (n >= kinds[i].len && memcmp(h, kinds[i].magic, kinds[i].len) == 0) {
            *undo = kinds[i].undo;
            return kinds[i].name;
        }
    return NULL;
}

/* What to use for a file system that is not f2fs. */
static const char *advice(const char *type)
{
    if (strncmp(type, "ext", 3) == 0)
        return "mount it with fuse2fs or `mount -o loop`";
    if (strcmp(type, "squashfs") == 0)
        return "mount it with squashfuse or `mount -o loop`";
    if (strcmp(type, "swap") == 0)
        return "it holds no files";
    return "mount it with `mount -o loop` or a FUSE driver for it";
}

/* A descriptor libblkid can read the device through, with the device's range in it. */
static int probe_fd(struct blk_dev *dev, uint64_t *off, uint64_t *size)
{
    if (!blk_is_sparse(dev) && !dev->network) {
        *off = dev->window_start;
        *size = dev->size;
        return open(dev->path, O_RDONLY | O_CLOEXEC);
    }
    /* the expanded image exists only through the chunk map, a network device only through
     * its server: copy out its start */
    uint64_t n = dev->size < SPARSE_PROBE_BYTES ? dev->size : SPARSE_PROBE_BYTES;
    uint8_t *buf = blk_alloc_buf(n);
    int fd = buf ? memfd_create("f2fuse-probe", MFD_CLOEXEC) : -1;
    if (fd >= 0 && (blk_read(dev, 0, buf, n) != 0 || write(fd, buf, n) != (ssize_t)n)) {
        close(fd);
        fd = -1;
    }
    free(buf);
    *off = 0;
    *size = n;
    return fd;
}

/* libblkid's verdict: type gets a file system's TYPE or a table's PTTYPE. */
static bool blkid_names(struct blk_dev *dev, char *type, size_t len, bool *is_table)
{
    uint64_t off, size;
    int fd = probe_fd(dev, &off, &size);
    if (fd < 0)
        return false;
    bool found = false;
    blkid_probe pr = blkid_new_probe();
    if (pr && blkid_probe_set_device(pr, fd, (blkid_loff_t)off, (blkid_loff_t)size) == 0) {
        blkid_probe_enable_superblocks(pr, 1);
        blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
        blkid_probe_enable_partitions(pr, 1);
        if (blkid_do_safeprobe(pr) == 0) {
            const char *v = NULL;
            if (blkid_probe_lookup_value(pr, "TYPE", &v, NULL) == 0 && v) {
                *is_table = false;
                found = true;
            } else if (blkid_probe_lookup_value(pr, "PTTYPE", &v, NULL) == 0 && v) {
                *is_table = true;
                found = true;
            }
            if (found)
                /* cppcheck-suppress nullPointerRedundantCheck ; found implies v != NULL */
                snprintf(type, len, "%s", v);
        }
    }
    if (pr)
        blkid_free_probe(pr);
    close(fd);
    return found;
}

bool blk_identify(struct blk_dev *dev, char *out, size_t len)
{
    bool sparse = blk_is_sparse(dev);
    const char *wrap = sparse ? "an Android sparse image of " : ""; /* what holds the content */
    uint8_t head[16] = {0};
    size_t n = dev->size < sizeof(head) ? (size_t)dev->size : sizeof(head);
    const char *undo;
    const char *packed = blk_read(dev, 0, head, n) == 0 ? compression(head, n, &undo) : NULL;
    if (packed) {
        snprintf(out, len,
                 "not an f2fs image: it is %s%s-compressed data; decompress it "
                 "first (`%s IMAGE`) and mount the result",
                 wrap, packed, undo);
        return true;
    }
    char type[64];
    bool is_table = false;
    if (!blkid_names(dev, type, sizeof(type), &is_table)) {
        if (!sparse)
            return false;
        snprintf(out, len,
                 "not an f2fs image: it is an Android sparse image, but what it "
                 "expands to is not f2fs (nor anything libblkid knows); `f2fuse unsparse "
                 "IMAGE RAW` and blkid(8) on RAW may tell more");
        return true;
    }
    if (strcmp(type, "f2fs") == 0)
        return false; /* blkid's looser check: the damage is f2fs's own to report */
    if (!is_table) {
        snprintf(out, len,
                 "not an f2fs image: it is %sa file system of type %s (found by "
                 "libblkid); f2fuse reads f2fs only: %s",
                 wrap, type, advice(type));
        return true;
    }
    if (sparse) {
        snprintf(out, len,
                 "not an f2fs image: it is an Android sparse image of a whole disk "
                 "with a %s partition table: convert it with `f2fuse unsparse IMAGE RAW`, then "
                 "`f2fuse info RAW` lists the partitions to pick with -o partition=",
                 type);
        return true;
    }
    struct blk_partition_table table = {0};
    char f2fs[256] = "unknown";
    if (dev->window_start == 0 && blk_partition_table_read(dev->path, &table) == 0)
        blk_partition_f2fs_list(&table, f2fs, sizeof(f2fs));
    if (strcmp(f2fs, "none") == 0)
        snprintf(out, len,
                 "not an f2fs image: it is a whole disk with a %s partition table, "
                 "and none of its %u partition(s) holds f2fs; `f2fuse info IMAGE` lists them",
                 type, table.count);
    else
        snprintf(out, len,
                 "not an f2fs image: it is a whole disk with a %s partition table "
                 "(%u partitions; holding f2fs: %s): pick one with -o partition=NUMBER or -o "
                 "partition=NAME; `f2fuse info IMAGE` lists them",
                 type, table.count, f2fs);
    blk_partition_table_free(&table);
    return true;
}
