/* Partition tables through libblkid: the table is libblkid's to parse (GPT with its
 * checksums and backup header, MBR with extended and logical partitions); f2fuse only
 * turns its answer into byte ranges and looks for the f2fs magic in each. */
#include "blk/blk_partition.h"

#include <blkid.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define F2FS_MAGIC_AT 1024u
#define F2FS_MAGIC_LE 0xf2f52010u

bool blk_has_f2fs_magic(int fd, uint64_t off)
{
    uint8_t m[4];
    if (pread(fd, m, sizeof(m), (off_t)(off + F2FS_MAGIC_AT)) != (ssize_t)sizeof(m))
        return false;
    uint32_t v = (uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24;
    return v == F2FS_MAGIC_LE;
}

/* Names of the partition types an SD card or disk image usually carries. */
static const char *type_name(const char *type)
{
    static const struct {
        const char *id, *name;
    } known[] = {
        {"0fc63daf-8483-4772-8e79-3d69d8477de4", "Linux filesystem"},
        {"c12a7328-f81f-11d2-ba4b-00a0c93ec93b", "EFI System"},
        {"ebd0a0a2-b9e5-4433-87c0-68b6b72699c7", "Microsoft basic data"},
        {"0657fd6d-a4ab-43c4-84e5-0933c84b4f4f", "Linux swap"},
        {"21686148-6449-6e6f-744e-656564454649", "BIOS boot"},
        {"0x83", "Linux"},
        {"0x82", "Linux swap"},
        {"0x0c", "W95 FAT32 (LBA)"},
        {"0x0b", "W95 FAT32"},
        {"0x07", "HPFS/NTFS/exFAT"},
        {"0x05", "Extended"},
        {"0x0f", "W95 Extended (LBA)"},
        {"0xef", "EFI (FAT-12/16/32)"},
        {"0xee", "GPT"},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (strcasecmp(type, known[i].id) == 0)
            return known[i].name;
    return NULL;
}

void blk_partition_table_free(struct blk_partition_table *table)
{
    free(table->parts);
    memset(table, 0, sizeof(*table));
}

int blk_partition_table_read(const char *path, struct blk_partition_table *table)
{
    memset(table, 0, sizeof(*table));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int err = 0;
    blkid_probe pr = blkid_new_probe();
    if (!pr || blkid_probe_set_device(pr, fd, 0, 0) != 0) {
        err = pr ? -EIO : -ENOMEM;
        goto out;
    }
    blkid_probe_enable_superblocks(pr, 0);
    blkid_probe_enable_partitions(pr, 1);
    blkid_partlist ls = blkid_probe_get_partitions(pr);
    blkid_parttable tab = ls ? blkid_partlist_get_table(ls) : NULL;
    if (!tab)
        goto out; /* no table: not an error */
    snprintf(table->kind, sizeof(table->kind), "%s", blkid_parttable_get_type(tab));
    int n = blkid_partlist_numof_partitions(ls);
    if (n <= 0)
        goto out;
    table->parts = calloc((size_t)n, sizeof(*table->parts));
    if (!table->parts) {
        err = -ENOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        blkid_partition par = blkid_partlist_get_partition(ls, i);
        if (!par)
            continue;
        struct f2fuse_partition *p = &table->parts[table->count++];
        p->number = (unsigned)blkid_partition_get_partno(par);
        p->start = (uint64_t)blkid_partition_get_start(par) * 512; /* libblkid counts sectors */
        p->size = (uint64_t)blkid_partition_get_size(par) * 512;
        const char *name = blkid_partition_get_name(par);
        snprintf(p->name, sizeof(p->name), "%s", name ? name : "");
        const char *type = blkid_partition_get_type_string(par);
        if (type)
            snprintf(p->type, sizeof(p->type), "%s", type);
        else
            snprintf(p->type, sizeof(p->type), "0x%02x", (unsigned)blkid_partition_get_type(par));
        p->type_name = type_name(p->type);
        p->f2fs = p->size > F2FS_MAGIC_AT && blk_has_f2fs_magic(fd, p->start);
    }
out:
    if (pr)
        blkid_free_probe(pr);
    close(fd);
    return err;
}

const struct f2fuse_partition *blk_partition_find(const struct blk_partition_table *table,
                                                  const char *spec)
{
    char *end;
    unsigned long n = strtoul(spec, &end, 10);
    bool numeric = *spec >= '0' && *spec <= '9' && *end == '\0';
    for (unsigned i = 0; i < table->count; i++) {
        const struct f2fuse_partition *p = &table->parts[i];
        if (numeric ? p->number == n : strcmp(p->name, spec) == 0)
            return p;
    }
    /* a GPT name that happens to be a number */
    for (unsigned i = 0; numeric && i < table->count; i++)
        if (strcmp(table->parts[i].name, spec) == 0)
            return &table->parts[i];
    return NULL;
}

void blk_partition_f2fs_list(const struct blk_partition_table *table, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < table->count && used < len; i++) {
        const struct f2fuse_partition *p = &table->parts[i];
        if (!p->f2fs)
            continue;
        int w = snprintf(out + used, len - used, "%s%u%s%s%s", used ? ", " : "", p->number,
                         p->name[0] ? " (" : "", p->name, p->name[0] ? ")" : "");
        used += w > 0 ? (size_t)w : 0;
    }
    if (!out[0])
        snprintf(out, len, "none");
}

int f2fuse_partitions(const char *image, char *table_kind, size_t kind_len,
                      struct f2fuse_partition **parts, unsigned *count)
{
    struct blk_partition_table t;
    int err = blk_partition_table_read(image, &t);
    if (err)
        return err;
    snprintf(table_kind, kind_len, "%s", t.kind);
    *parts = t.parts;
    *count = t.count;
    return 0;
}
