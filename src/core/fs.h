/* The mount context and the core's internal interfaces.  One source file per mechanism, as
 * in the kernel's fs/f2fs: super.c, checkpoint.c, node.c, inode.c, data.c, dir.c, hash.c,
 * xattr.c, fs.c (the public API). */
#ifndef F2FUSE_CORE_FS_H
#define F2FUSE_CORE_FS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "blk/blk.h"
#include "cache/pcache.h"
#include "core/format.h"
#include "core/nat.h"
#include "core/segment.h"
#include "f2fuse.h"
#include "util/log.h"

/* Everything known about a mounted image.  Geometry and checkpoint state are read once at
 * mount and are immutable on a read-only mount. */
struct f2fuse {
    struct f2fuse_options opts;
    struct blk_dev *dev;
    struct pcache *cache;

    struct f2fs_super_block sb; /* the valid copy, as on disk */
    uint32_t features;
    uint32_t main_blkaddr;      /* first block of the main area */
    uint32_t main_blkend;       /* one past its last block */
    uint32_t nat_blkaddr;
    uint32_t nat_blocks;        /* blocks in one NAT copy */
    uint32_t max_nid;           /* nids are < max_nid */
    uint32_t root_ino;
    uint32_t uuid_crc;          /* inode checksum seed: crc over the uuid */

    void *cp_block;             /* the valid checkpoint's first block (4 KiB) */
    const struct f2fs_checkpoint *cp;
    uint64_t cp_ver;
    uint32_t cp_start;          /* first block of the valid pack */
    const uint8_t *nat_bitmap;  /* which copy of each NAT block is current (in cp_block) */
    uint32_t nat_bitmap_bytes;

    struct nat_journal_entry nat_journal[NAT_JOURNAL_ENTRIES];
    unsigned nat_journal_count;

    /* The write side (NULL on a read-only mount). */
    struct seg_manager *seg;
    struct nat_manager *nat;

    atomic_uint_fast64_t corrupt_hits; /* times a damaged structure was met */
    atomic_uint_fast64_t inode_reads;
};

/* Logs a corruption with the structure's name and returns -EIO. */
int fs_corrupt(struct f2fuse *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* super.c */
int super_load(struct f2fuse *fs);

/* checkpoint.c */
int checkpoint_load(struct f2fuse *fs);

/* node.c */
bool nid_valid(const struct f2fuse *fs, uint32_t nid);
bool blkaddr_in_main(const struct f2fuse *fs, uint32_t blkaddr);
int nat_lookup(struct f2fuse *fs, uint32_t nid, struct f2fs_nat_entry *out);
/* Reads node nid and checks its footer (nid, and owner ino unless ino == 0). */
int node_get(struct f2fuse *fs, uint32_t nid, uint32_t ino, struct page **out);
static inline struct f2fs_node *page_node(struct page *p) { return p->data; }

/* inode.c: the decoded, immutable view of an on-disk inode that the rest of the core uses. */
struct inode_info {
    uint32_t ino;
    uint16_t mode;
    uint8_t inline_flags;       /* i_inline */
    uint8_t advise;
    uint32_t flags;             /* i_flags */
    uint64_t size;
    uint32_t links;
    uint32_t extra_isize;       /* bytes */
    uint32_t xattr_addrs;       /* inline xattr size in 4-byte words */
    uint32_t addrs_per_inode;   /* data pointers in the inode */
    uint32_t xattr_nid;
    uint32_t current_depth;
    uint32_t dir_level;
    uint32_t nids[DEF_NIDS_PER_INODE];
};
int inode_get(struct f2fuse *fs, uint32_t ino, struct page **page, struct inode_info *info);
int inode_fill_attr(struct f2fuse *fs, const struct f2fs_inode *ri, const struct inode_info *ii,
                    struct f2fuse_attr *attr);
/* Byte offset and size of the inline data area inside the inode block. */
uint32_t inline_data_offset(const struct inode_info *ii);
uint32_t inline_data_size(const struct inode_info *ii);
uint32_t inline_xattr_offset(const struct inode_info *ii);

/* data.c */
/* Maps count file blocks from index; addrs[i] gets a block address, NULL_ADDR for holes. */
int data_map(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
             uint64_t index, uint32_t count, uint32_t *addrs);
/* For a hole at index: the next index that may hold data (skips absent node ranges). */
uint64_t data_next_candidate(struct f2fuse *fs, const struct inode_info *ii, uint64_t index);
ssize_t data_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                  size_t size, uint64_t off);

/* hash.c */
uint32_t dentry_hash(const uint8_t *name, size_t len);

/* dir.c */
int dir_lookup(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
               const char *name, size_t len, uint32_t *ino);
int dir_iterate(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                uint64_t cookie, f2fuse_dirent_fn fn, void *arg);

/* xattr.c */
ssize_t xattr_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                  const char *name, void *value, size_t size);
ssize_t xattr_list(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                   char *list, size_t size);

#endif
