/* inode.c: decoding and checking on-disk inodes */
#ifndef F2FUSE_CORE_INODE_H
#define F2FUSE_CORE_INODE_H

#include <stdint.h>

#include "cache/pcache.h"
#include "core/format.h"
#include "f2fuse.h"

struct f2fuse;
struct fscrypt_ikey;

/* inode.c: the decoded, immutable view of an on-disk inode that the rest of the core uses. */
struct inode_info {
    uint32_t ino;
    uint16_t mode;
    uint8_t inline_flags; /* i_inline */
    uint8_t advise;
    uint32_t flags; /* i_flags */
    uint64_t size;
    uint32_t links;
    uint32_t extra_isize;     /* bytes */
    uint32_t xattr_addrs;     /* inline xattr size in 4-byte words */
    uint32_t addrs_per_inode; /* data pointers in the inode */
    uint32_t addrs_per_block; /* data pointers in a direct node (ADDRS_PER_BLOCK) */
    /* A compressed file's i_log_cluster_size, 0 for any other inode.  Its pointer counts
     * are whole clusters (the kernel's addrs_per_inode/addrs_per_block align them down). */
    uint8_t log_cluster_size;
    uint32_t xattr_nid;
    uint32_t current_depth;
    uint32_t dir_level;
    uint32_t nids[DEF_NIDS_PER_INODE];
    /* An encrypted regular file's contents key (fscrypt_keys.c), set by the operation that
     * reads or writes its contents; NULL otherwise (data.c then refuses with ENOKEY). */
    const struct fscrypt_ikey *contents_key;
    /* What the operation claimed (space.h), set by it: the blocks and nodes it reserves
     * are taken from it.  NULL for operations that claim nothing. */
    struct space_claim *claim;
};
int inode_get(struct f2fuse *fs, uint32_t ino, struct page **page, struct inode_info *info);
/* Checks an inode page and decodes it (inode_get without the read). */
int inode_decode(struct f2fuse *fs, const struct page *page, uint32_t ino, struct inode_info *ii);
int inode_fill_attr(struct f2fuse *fs, struct page *ipage, const struct inode_info *ii,
                    struct f2fuse_attr *attr);
/* Byte offset and size of the inline data area inside the inode block. */
uint32_t inline_data_offset(const struct inode_info *ii);
uint32_t inline_data_size(const struct inode_info *ii);
uint32_t inline_xattr_offset(const struct inode_info *ii);
/* Recomputes the inode checksum of an inode page when the image uses them. */
void inode_update_checksum(struct f2fuse *fs, struct page *page);
/* i_extra_isize of a new inode on this image (the features decide, as in f2fs-tools). */
uint16_t inode_new_extra_isize(const struct f2fuse *fs);

#endif
