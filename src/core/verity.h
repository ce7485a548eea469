/* verity.c: fs-verity files as the kernel keeps them (fs/verity, fs/f2fs/verity.c): the
 * Merkle tree and descriptor past EOF, every data block read checked against the tree up to
 * the root hash, no writer ever, the file digest measured, verity enabled on a file. */
#ifndef F2FUSE_CORE_VERITY_H
#define F2FUSE_CORE_VERITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cache/pcache.h"
#include "core/inode.h"
#include "f2fuse.h"
#include "util/stats.h"

struct f2fuse;

/* The mount's parsed descriptors (one per verity inode read since) and hash algorithms. */
int verity_init(struct f2fuse *fs);
void verity_destroy(struct f2fuse *fs);

static inline bool verity_file(const struct inode_info *ii)
{
    return S_ISREG(ii->mode) && (ii->advise & FADVISE_VERITY_BIT);
}

/* May ii be opened with these open(2) flags?  A verity file: -EPERM for write access or
 * O_TRUNC (the kernel's fsverity_file_open, and its setattr refusal of the truncation that
 * follows), -EIO when its verity metadata does not parse.  0 for any other file. */
int verity_open_check(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      int flags);

/* data_read for a verity file: every block the range touches is hashed and checked against
 * the tree up to the root hash (tree blocks once verified stay so while cached); a mismatch
 * is -EIO with a "corrupt image:" line, never the wrong bytes. */
ssize_t verity_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                    size_t size, uint64_t off);

/* FS_IOC_MEASURE_VERITY: the file digest (the hash of its descriptor, signature excluded).
 * -ENODATA for a file without verity. */
int verity_measure(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                   struct f2fuse_verity_digest *d);

/* FS_IOC_ENABLE_VERITY on inode ino, the whole operation (space, locks): the tree is built
 * over the data and written past EOF with the descriptor, then the xattr and the flag are
 * set (f2fs_end_enable_verity), data and tree written back first. */
int verity_enable(struct f2fuse *fs, uint32_t ino, const struct f2fuse_verity_enable *arg);

/* Inode ino was freed (its number may come back as another file). */
void verity_forget(struct f2fuse *fs, uint32_t ino);

/* Counters "verity.*". */
void verity_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

#endif
