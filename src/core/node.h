/* node.c: node blocks - reading them through the NAT, creating, freeing and writing them */
#ifndef F2FUSE_CORE_NODE_H
#define F2FUSE_CORE_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/pcache.h"
#include "core/format.h"

struct f2fuse;

bool nid_valid(const struct f2fuse *fs, uint32_t nid);
bool blkaddr_in_main(const struct f2fuse *fs, uint32_t blkaddr);
int nat_lookup(struct f2fuse *fs, uint32_t nid, struct f2fs_nat_entry *out);
/* nid's entry in the NAT block at addr (read through the cache). */
int nat_entry_in_block(struct f2fuse *fs, uint32_t addr, uint32_t nid, struct f2fs_nat_entry *out);
/* Reads node nid and checks its footer (nid, and owner ino unless ino == 0). */
int node_get(struct f2fuse *fs, uint32_t nid, uint32_t ino, struct page **out);
static inline struct f2fs_node *page_node(struct page *p)
{
    return p->data;
}
/* Word pointers into a node page's arrays.  Page buffers are 4 KiB aligned and these
 * arrays sit at 4-byte aligned offsets, so such pointers are safe despite the packing. */
static inline uint32_t *node_word(struct page *p, size_t byte_off)
{
    return (uint32_t *)((uint8_t *)p->data + byte_off);
}
#define INODE_ADDR(p, i) node_word((p), offsetof(struct f2fs_inode, i_addr) + 4 * (size_t)(i))
#define INODE_NID(p, i)  node_word((p), offsetof(struct f2fs_inode, i_nid) + 4 * (size_t)(i))
#define NODE_SLOT(p, i)  node_word((p), 4 * (size_t)(i)) /* direct addr[i] / indirect nid[i] */
/* Write side.  node_new makes a dirty, zero-filled node page for nid (0: allocate a nid)
 * with its footer set; its block is reserved from claim when the operation claimed it
 * (space.h; NULL otherwise).  node_free releases a node and its block. */
struct space_claim;
int node_new(struct f2fuse *fs, uint32_t ino, uint32_t nid, uint32_t ofs, bool cold,
             struct space_claim *claim, struct page **out);
int node_free(struct f2fuse *fs, uint32_t nid, uint32_t ino);
int node_writeback(struct f2fuse *fs, uint32_t fsync_ino, bool dentry_mark);
/* The version node footers written after the current checkpoint carry; roll-forward
 * recovery accepts a footer when node_chain_version_matches (only the low 32 bits under
 * NOCRC_RECOVERY). */
uint64_t node_chain_version(const struct f2fuse *fs);
bool node_chain_version_matches(const struct f2fuse *fs, uint64_t footer_ver);

#endif
