/* Partition tables (GPT, MBR) of a whole-disk image, read with libblkid's partition API:
 * for -o partition= (blk_window.c), for `f2fuse info`'s listing and for the message a disk
 * mounted whole gets (blk_identify.c). */
#ifndef F2FUSE_BLK_BLK_PARTITION_H
#define F2FUSE_BLK_BLK_PARTITION_H

#include <stdbool.h>
#include <stdint.h>

#include "f2fuse.h" /* struct f2fuse_partition */

struct blk_partition_table {
    char kind[16]; /* libblkid's name: "gpt", "dos"; "" when there is none */
    unsigned count;
    struct f2fuse_partition *parts; /* in table order */
};

/* Reads the table of the file or device at path.  0 (kind "" and no partitions when there
 * is no table), or -errno.  Each partition's f2fs flag says whether the f2fs superblock
 * magic sits at byte 1024 of it. */
int blk_partition_table_read(const char *path, struct blk_partition_table *table);
void blk_partition_table_free(struct blk_partition_table *table);

/* The partition spec names: a number (as in /dev/sdX<N>) or else a GPT name; NULL when
 * none matches. */
const struct f2fuse_partition *blk_partition_find(const struct blk_partition_table *table,
                                                  const char *spec);

/* Whether the f2fs superblock magic is at byte 1024 from off in the file open on fd. */
bool blk_has_f2fs_magic(int fd, uint64_t off);

/* "2 (data)" list of the partitions holding f2fs, for messages; "none" when there are none. */
void blk_partition_f2fs_list(const struct blk_partition_table *table, char *out, size_t len);

#endif
