/* File data: map file block indexes to device blocks through the inode's node tree, and
 * read file ranges with one device request per physically contiguous run.  Data is read
 * straight into the caller's buffer (no copy in our cache: the kernel's page cache in front
 * of FUSE already holds one). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"

/* Where one file block's pointer lives: depth 0 = in the inode, else inside a direct node
 * reached through depth-1 indirect levels.  offsets[] index each level's array. */
struct node_path {
    int depth;
    uint32_t offsets[4];
};

static int path_of(uint32_t addrs_per_inode, uint64_t index, struct node_path *p)
{
    const uint64_t d = ADDRS_PER_BLOCK, n = NIDS_PER_BLOCK;
    if (index < addrs_per_inode) {
        *p = (struct node_path){0, {(uint32_t)index}};
        return 0;
    }
    index -= addrs_per_inode;
    for (uint32_t slot = 0; slot < 2; slot++) {
        if (index < d) {
            *p = (struct node_path){1, {slot, (uint32_t)index}};
            return 0;
        }
        index -= d;
    }
    for (uint32_t slot = 2; slot < 4; slot++) {
        if (index < n * d) {
            *p = (struct node_path){2, {slot, (uint32_t)(index / d), (uint32_t)(index % d)}};
            return 0;
        }
        index -= n * d;
    }
    if (index < n * n * d) {
        *p = (struct node_path){3, {4, (uint32_t)(index / (n * d)), (uint32_t)(index / d % n),
                                    (uint32_t)(index % d)}};
        return 0;
    }
    return -EFBIG;
}

/* Checks a data pointer read from disk; holes and reserved blocks read as NULL_ADDR. */
static int check_addr(struct f2fuse *fs, uint32_t ino, uint64_t index, uint32_t *addr)
{
    if (*addr == NULL_ADDR || *addr == NEW_ADDR) {
        *addr = NULL_ADDR;
        return 0;
    }
    if (*addr == COMPRESS_ADDR)
        return -EOPNOTSUPP;
    if (!blkaddr_in_main(fs, *addr))
        return fs_corrupt(fs, "inode %u: block %llu points to 0x%x outside the main area", ino,
                          (unsigned long long)index, *addr);
    return 0;
}

int data_map(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
             uint64_t index, uint32_t count, uint32_t *addrs)
{
    struct page *dnode = NULL;
    uint32_t dnode_nid = 0;
    int err = 0;
    for (uint32_t i = 0; i < count && !err; i++) {
        struct node_path p;
        err = path_of(ii->addrs_per_inode, index + i, &p);
        if (err)
            break;
        if (p.depth == 0) {
            addrs[i] = le32(ri->i_addr[ii->extra_isize / 4 + p.offsets[0]]);
        } else {
            /* Walk down to the direct node; keep it while the next blocks fall into it. */
            uint32_t nid = ii->nids[p.offsets[0]];
            for (int level = 1; level < p.depth && nid; level++) {
                struct page *ind;
                err = node_get(fs, nid, ii->ino, &ind);
                if (err)
                    break;
                nid = le32(page_node(ind)->nid[p.offsets[level]]);
                pcache_put(fs->cache, ind);
            }
            if (err)
                break;
            if (!nid) {
                addrs[i] = NULL_ADDR;
                continue;
            }
            if (nid != dnode_nid) {
                pcache_put(fs->cache, dnode);
                dnode = NULL;
                dnode_nid = 0;
                err = node_get(fs, nid, ii->ino, &dnode);
                if (err)
                    break;
                dnode_nid = nid;
            }
            addrs[i] = le32(page_node(dnode)->addr[p.offsets[p.depth]]);
        }
        err = check_addr(fs, ii->ino, index + i, &addrs[i]);
    }
    pcache_put(fs->cache, dnode);
    return err;
}

/* index is a hole; returns the next index that may be mapped, skipping whole node ranges
 * whose node is absent, so that scanning a sparse (or hostile) huge directory stays cheap. */
uint64_t data_next_candidate(struct f2fuse *fs, const struct inode_info *ii, uint64_t index)
{
    const uint64_t d = ADDRS_PER_BLOCK, n = NIDS_PER_BLOCK;
    struct node_path p;
    if (path_of(ii->addrs_per_inode, index, &p) || p.depth == 0)
        return index + 1;
    /* range[k]: file blocks under one pointer at level k (level 0 = the inode's slot). */
    uint64_t range[3], pos = 0;
    for (int k = 0; k < p.depth; k++) {
        range[k] = d;
        for (int j = k + 1; j < p.depth; j++)
            range[k] *= n;
    }
    for (int k = 1; k <= p.depth; k++)
        pos = pos * (k == p.depth ? d : n) + p.offsets[k];
    uint32_t nid = ii->nids[p.offsets[0]];
    int level = 0;
    while (nid && level + 1 < p.depth) {
        struct page *ind;
        if (node_get(fs, nid, ii->ino, &ind))
            return index + 1;
        level++;
        nid = le32(page_node(ind)->nid[p.offsets[level]]);
        pcache_put(fs->cache, ind);
    }
    if (nid)
        return index + 1;
    return index + (range[level] - pos % range[level]);
}

#define READ_CHUNK_BLOCKS 256 /* map and submit at most 1 MiB at a time */

ssize_t data_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                  size_t size, uint64_t off)
{
    const struct f2fs_inode *ri = &page_node(ipage)->i;
    if (off >= ii->size || size == 0)
        return 0;
    if (size > ii->size - off)
        size = ii->size - off;
    if (ii->inline_flags & F2FS_INLINE_DATA) {
        memcpy(buf, (const uint8_t *)ipage->data + inline_data_offset(ii) + off, size);
        return (ssize_t)size;
    }
    if (S_ISREG(ii->mode) && (ii->advise & FADVISE_ENCRYPT_BIT))
        return -ENOKEY;
    if (ii->flags & F2FS_COMPR_FL)
        return -EOPNOTSUPP;

    uint32_t addrs[READ_CHUNK_BLOCKS];
    struct blk_req reqs[READ_CHUNK_BLOCKS];
    struct blk_req *rp[READ_CHUNK_BLOCKS];
    size_t done = 0;
    while (done < size) {
        uint64_t pos = off + done;
        uint64_t first = pos / F2FS_BLKSIZE;
        uint64_t last = (off + size - 1) / F2FS_BLKSIZE;
        uint32_t count = (uint32_t)(last - first + 1);
        if (count > READ_CHUNK_BLOCKS)
            count = READ_CHUNK_BLOCKS;
        int err = data_map(fs, ii, ri, first, count, addrs);
        if (err)
            return err;
        uint64_t chunk_end = (first + count) * F2FS_BLKSIZE;
        if (chunk_end > off + size)
            chunk_end = off + size;

        /* One request per physically contiguous run; holes are zero-filled here. */
        unsigned nreq = 0;
        for (uint32_t i = 0; i < count;) {
            uint32_t j = i + 1;
            if (addrs[i] != NULL_ADDR)
                while (j < count && addrs[j] == addrs[j - 1] + 1)
                    j++;
            else
                while (j < count && addrs[j] == NULL_ADDR)
                    j++;
            uint64_t from = (first + i) * F2FS_BLKSIZE, to = (first + j) * F2FS_BLKSIZE;
            if (from < pos)
                from = pos;
            if (to > chunk_end)
                to = chunk_end;
            uint8_t *dst = (uint8_t *)buf + (from - off);
            if (addrs[i] == NULL_ADDR) {
                memset(dst, 0, to - from);
            } else {
                uint64_t dev_off = (uint64_t)addrs[i] * F2FS_BLKSIZE +
                                   (from - (first + i) * F2FS_BLKSIZE);
                reqs[nreq] = (struct blk_req){.op = BLK_READ, .off = dev_off, .len = to - from,
                                              .buf = dst};
                rp[nreq] = &reqs[nreq];
                nreq++;
            }
            i = j;
        }
        err = blk_submit_wait(fs->dev, rp, nreq);
        if (err)
            return err;
        done = chunk_end - off;
    }
    return (ssize_t)size;
}
