/* data.c: file data - mapping, reading, writing, reserving, truncating and writing back
 * file blocks */
#ifndef F2FUSE_CORE_DATA_H
#define F2FUSE_CORE_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "blk/blk.h"
#include "cache/pcache.h"

struct f2fuse;
struct inode_info;
struct f2fs_inode;

/* Maps count file blocks from index; addrs[i] gets a block address, NULL_ADDR for holes. */
int data_map(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
             uint64_t index, uint32_t count, uint32_t *addrs);
/* The holes among count file blocks from index (reserved NEW_ADDR blocks are none). */
/* The slots of blocks [index, index + count) as stored: NEW_ADDR and COMPRESS_ADDR kept. */
int data_map_slots(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
                   uint64_t index, uint32_t count, uint32_t *addrs);
int data_count_holes(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
                     uint64_t index, uint64_t count, uint64_t *holes);
/* For a hole at index: the next index that may hold data (skips absent node ranges). */
uint64_t data_next_candidate(struct f2fuse *fs, const struct inode_info *ii, uint64_t index);
/* Reads [off, off + size) of a file in blocks, wherever its size ends: blocks with a page
 * in the cache from it, the others from the device (holes as zeros). */
int data_read_blocks(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                     size_t size, uint64_t off);
/* The start of a read that may finish after the caller dropped its locks (f2fuse_read_async):
 * [off, off + size), inside the file's size, of a plain file (no inline data, encryption or
 * compression) in one chunk.  Returns 0 when buf is complete (cached pages, holes), 1 when
 * *req is the one device read left (READ, off, len, buf set), -EAGAIN when the read needs more
 * than that (the caller reads it with data_read), or -errno. */
int data_read_start(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                    size_t size, uint64_t off, struct blk_req *req);
ssize_t data_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                  size_t size, uint64_t off);
/* Reads size bytes at off of a file's blocks, past its size too (fs-verity keeps its Merkle
 * tree there); holes read as zeros.  0 or -errno; -EINVAL for an inline file. */
int data_read_past_end(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                       void *buf, size_t size, uint64_t off);
/* The page cache key of file block index of inode ino (PAGE_DATA). */
static inline uint64_t data_key(uint32_t ino, uint64_t index)
{
    return (uint64_t)ino << 32 | index;
}
uint64_t data_max_size(const struct inode_info *ii);
/* fallocate (f2fs_expand_inode_data): block index becomes NEW_ADDR when it is a hole -
 * counted in i_blocks and the used space, reading as zeros, written by nobody until data
 * comes; a checkpoint persists it as it is. */
int data_reserve_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                       uint64_t index);

/* Where the pointer to one file block lives: in the inode or in a direct node. */
struct dnode {
    struct page *page; /* the inode page or the direct node's page (referenced) */
    uint32_t nid;      /* its nid */
    uint32_t ofs;      /* index in its address array (the summary's ofs_in_node) */
    uint32_t *addr;    /* the little-endian pointer itself */
};
/* Finds the pointer of file block index; with alloc, creates missing nodes on the way
 * (else -ENOENT for a hole in the node tree).  Release with dnode_put. */
int dnode_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, uint64_t index,
              bool alloc, struct dnode *dn);
/* How dnode_find makes missing nodes: not at all, charged to the caller's quota (an
 * operation: -EDQUOT possible), or without a check (writeback of blocks already charged). */
enum dnode_alloc { DNODE_LOOKUP, DNODE_ALLOC, DNODE_ALLOC_NOFAIL };
int dnode_find(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, uint64_t index,
               enum dnode_alloc alloc, struct dnode *dn);
void dnode_put(struct f2fuse *fs, struct page *ipage, struct dnode *dn);
/* i_blocks += delta (4 KiB blocks), the quota usage with it (never refused: frees, and
 * blocks charged before); inode_alloc_blocks charges n more as an allocation, which the
 * caller's quota may refuse (-EDQUOT, nothing changed). */
void inode_add_blocks(struct f2fuse *fs, struct page *ipage, int64_t delta);
int inode_alloc_blocks(struct f2fuse *fs, struct page *ipage, uint64_t n);
ssize_t data_write(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, const void *buf,
                   size_t size, uint64_t off);
int data_truncate(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t new_size);
int data_zero_past_end(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
/* Frees every block and node of a file, past its size too (fallocate KEEP_SIZE). */
int data_free_all(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
/* Frees every block past the last one i_size covers (a failed fs-verity enable's tree). */
int data_free_past_end(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
int data_writeback(struct f2fuse *fs, uint32_t only_ino);
/* The same for the pages every checkpoint writes: directory and symlink blocks. */
int data_writeback_metadata(struct f2fuse *fs);
/* One inode's dirty data, at prio, by a caller holding its stripe (fsync: several at once). */
int data_writeback_inode(struct f2fuse *fs, uint32_t ino, enum blk_prio prio);
/* Gives the file blocks of the n data pages (one inode's, sorted by index) new blocks in
 * their data log (the cold one for data GC moves) and points the file at them (the old
 * blocks turn invalid); addrs[i] is page i's block, which the caller writes.  Each direct
 * node is looked up, and its NAT entry read, once.  *done: pages assigned, also on error.
 * Holds the inode's stripe. */
int data_assign_blocks(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                       struct page *const *pages, size_t n, uint32_t *addrs, size_t *done);
/* The cached page of file block index, created when absent: read from its block when
 * keep_old (and it has one), else zero-filled.  A block without one gets it reserved
 * (NEW_ADDR in its pointer, counted in i_blocks, as f2fs_reserve_block does), so that
 * st_blocks is right before writeback allocates it. */
int data_get_page(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index,
                  bool keep_old, struct page **out);
/* Moves an inline file's data to block 0 (f2fs_convert_inline_inode). */
int data_convert_inline(struct f2fuse *fs, struct inode_info *ii, struct page *ipage);
/* Frees one data pointer (a hole afterwards): a block, a reservation, a compressed
 * cluster's marker; i_blocks, quota and the used count follow. */
void data_free_slot(struct f2fuse *fs, struct page *ipage, uint32_t *addr);
/* Frees file block index (a hole afterwards). */
int data_punch_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index);

#endif
