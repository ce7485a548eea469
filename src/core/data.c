/* File data: map file block indexes to device blocks through the inode's node tree, and
 * read file ranges with one device request per physically contiguous run.  Data is read
 * straight into the caller's buffer (no copy in our cache: the kernel's page cache in front
 * of FUSE already holds one). */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/data.h"
#include "core/cluster.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/extent.h"
#include "core/fscrypt_cipher.h"
#include "core/fsync.h"
#include "core/inode.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/quota.h"
#include "core/segment.h"
#include "core/space.h"
#include "core/writeback.h"
#include "util/clock.h"

/* Where one file block's pointer lives: depth 0 = in the inode, else inside a direct node
 * reached through depth-1 indirect levels.  offsets[] index each level's array. */
struct node_path {
    int depth;
    uint32_t offsets[4];
};

static int path_of(const struct inode_info *ii, uint64_t index, struct node_path *p)
{
    const uint64_t d = ii->addrs_per_block, n = NIDS_PER_BLOCK;
    if (index < ii->addrs_per_inode) {
        *p = (struct node_path){0, {(uint32_t)index}};
        return 0;
    }
    index -= ii->addrs_per_inode;
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
        *p = (struct node_path){
            3, {4, (uint32_t)(index / (n * d)), (uint32_t)(index / d % n), (uint32_t)(index % d)}};
        return 0;
    }
    return -EFBIG;
}

/* Checks a data pointer read from disk; holes and reserved blocks read as NULL_ADDR.
 * keep_new: a reserved block stays NEW_ADDR and a compressed cluster's COMPRESS_ADDR stays
 * (for counting, and for the compressed read path, which reads clusters whole); else both
 * read as a hole and the marker, where a block is read one by one, is damage. */
static int check_addr(struct f2fuse *fs, uint32_t ino, uint64_t index, uint32_t *addr,
                      bool keep_new)
{
    if (*addr == NULL_ADDR || *addr == NEW_ADDR || (*addr == COMPRESS_ADDR && keep_new)) {
        if (!keep_new)
            *addr = NULL_ADDR;
        return 0;
    }
    if (*addr == COMPRESS_ADDR)
        return fs_corrupt(fs,
                          "inode %u: block %llu is a compressed cluster's marker where "
                          "plain data was expected",
                          ino, (unsigned long long)index);
    if (!blkaddr_in_main(fs, *addr))
        return fs_corrupt(fs, "inode %u: block %llu points to 0x%x outside the main area", ino,
                          (unsigned long long)index, *addr);
    return 0;
}

static int map_blocks(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
                      uint64_t index, uint32_t count, uint32_t *addrs, bool keep_new)
{
    struct page *dnode = NULL;
    uint32_t dnode_nid = 0;
    int err = 0;
    /* Blocks inside the inode's extent need no node (the kernel's read extent cache). */
    bool ext = fs->opts.extent_cache && S_ISREG(ii->mode) &&
               extent_usable(fs, ri, data_max_size(ii) / F2FS_BLKSIZE);
    uint32_t through_ext = 0;
    for (uint32_t i = 0; i < count && !err; i++) {
        if (ext && extent_lookup(&ri->i_ext, index + i, &addrs[i])) {
            through_ext++;
            continue;
        }
        struct node_path p;
        err = path_of(ii, index + i, &p);
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
        err = check_addr(fs, ii->ino, index + i, &addrs[i], keep_new);
    }
    pcache_put(fs->cache, dnode);
    if (!keep_new && through_ext) /* the read path's figures: counting holes is not a read */
        atomic_fetch_add(&fs->extent_hits, through_ext);
    if (!keep_new && count > through_ext)
        atomic_fetch_add(&fs->extent_misses, count - through_ext);
    return err;
}

int data_map(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
             uint64_t index, uint32_t count, uint32_t *addrs)
{
    return map_blocks(fs, ii, ri, index, count, addrs, false);
}

int data_map_slots(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
                   uint64_t index, uint32_t count, uint32_t *addrs)
{
    return map_blocks(fs, ii, ri, index, count, addrs, true);
}

int data_count_holes(struct f2fuse *fs, const struct inode_info *ii, const struct f2fs_inode *ri,
                     uint64_t index, uint64_t count, uint64_t *holes)
{
    uint32_t addrs[256];
    *holes = 0;
    for (uint64_t i = 0; i < count; i += 256) {
        uint32_t n = count - i < 256 ? (uint32_t)(count - i) : 256;
        int err = map_blocks(fs, ii, ri, index + i, n, addrs, true);
        if (err)
            return err;
        for (uint32_t j = 0; j < n; j++)
            *holes += addrs[j] == NULL_ADDR;
    }
    return 0;
}

/* index is a hole; returns the next index that may be mapped, skipping whole node ranges
 * whose node is absent, so that scanning a sparse (or hostile) huge directory stays cheap. */
uint64_t data_next_candidate(struct f2fuse *fs, const struct inode_info *ii, uint64_t index)
{
    const uint64_t d = ii->addrs_per_block, n = NIDS_PER_BLOCK;
    struct node_path p;
    if (path_of(ii, index, &p) || p.depth == 0)
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

#define READ_CHUNK_BLOCKS 256      /* map and submit at most 1 MiB at a time */
#define CACHED_ADDR       NEW_ADDR /* in data_read's map: served from the page cache */

/* Decrypts, in the buffer of blocks [first, first + count) read at buf, those that were not
 * holes (a hole reads as zeros, never decrypted: fscrypt's rule). */
static int decrypt_read(struct f2fuse *fs, const struct inode_info *ii, const uint32_t *addrs,
                        uint64_t first, uint32_t count, uint8_t *buf)
{
    for (uint32_t i = 0; i < count;) {
        if (addrs[i] == NULL_ADDR) {
            i++;
            continue;
        }
        uint32_t j = i + 1;
        while (j < count && addrs[j] != NULL_ADDR)
            j++;
        int err = fscrypt_crypt_blocks(fs, ii->contents_key, false, first + i,
                                       buf + (size_t)i * F2FS_BLKSIZE, j - i);
        if (err)
            return err;
        i = j;
    }
    return 0;
}

/* One chunk of a read of [off, off + size) into buf, from pos on: its blocks [first,
 * first + count) and its end (a byte offset of the file); the device reads it still needs. */
struct read_chunk {
    uint64_t first, end;
    uint32_t count;
    unsigned nreq;
};

/* Maps the chunk of the read that starts at pos: blocks with a page in the cache are copied
 * from it (written, maybe not yet on disk), holes are zero-filled, and every physically
 * contiguous run left becomes one request in reqs (addrs gets the block addresses). */
static int plan_read_chunk(struct f2fuse *fs, const struct inode_info *ii,
                           const struct f2fs_inode *ri, void *buf, size_t size, uint64_t off,
                           uint64_t pos, uint32_t *addrs, struct blk_req *reqs,
                           struct read_chunk *ch)
{
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
    *ch = (struct read_chunk){.first = first, .end = chunk_end, .count = count};

    if (fs->seg) {
        for (uint32_t i = 0; i < count; i++) {
            struct page *page = pcache_find(fs->cache, PAGE_DATA, data_key(ii->ino, first + i));
            if (!page)
                continue;
            uint64_t from = (first + i) * F2FS_BLKSIZE, to = from + F2FS_BLKSIZE;
            if (from < pos)
                from = pos;
            if (to > chunk_end)
                to = chunk_end;
            memcpy((uint8_t *)buf + (from - off), (const uint8_t *)page->data + from % F2FS_BLKSIZE,
                   to - from);
            pcache_put(fs->cache, page);
            addrs[i] = CACHED_ADDR;
        }
    }

    for (uint32_t i = 0; i < count;) {
        if (addrs[i] == CACHED_ADDR) {
            i++;
            continue;
        }
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
            reqs[ch->nreq++] = (struct blk_req){
                .op = BLK_READ, .off = dev_off, .len = to - from, .buf = dst};
        }
        i = j;
    }
    return 0;
}

/* Reads [off, off + size) of a file in blocks, wherever its size ends.  An encrypted file's
 * range is whole blocks (read_blocks). */
static int read_blocks_raw(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           void *buf, size_t size, uint64_t off)
{
    const struct f2fs_inode *ri = &page_node(ipage)->i;
    uint32_t addrs[READ_CHUNK_BLOCKS];
    struct blk_req reqs[READ_CHUNK_BLOCKS];
    struct blk_req *rp[READ_CHUNK_BLOCKS];
    size_t done = 0;
    while (done < size) {
        uint64_t pos = off + done;
        struct read_chunk ch;
        int err = plan_read_chunk(fs, ii, ri, buf, size, off, pos, addrs, reqs, &ch);
        if (err)
            return err;
        for (unsigned i = 0; i < ch.nreq; i++)
            rp[i] = &reqs[i];
        err = blk_submit_wait(fs->dev, rp, ch.nreq);
        if (!err && ii->contents_key)
            err = decrypt_read(fs, ii, addrs, ch.first, ch.count, (uint8_t *)buf + (pos - off));
        if (err)
            return err;
        done = ch.end - off;
    }
    return 0;
}

int data_read_start(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                    size_t size, uint64_t off, struct blk_req *req)
{
    if (size == 0)
        return 0;
    if (!S_ISREG(ii->mode) || (ii->inline_flags & F2FS_INLINE_DATA) ||
        (ii->advise & FADVISE_ENCRYPT_BIT) || ii->contents_key || compress_file(ii) ||
        (off + size - 1) / F2FS_BLKSIZE - off / F2FS_BLKSIZE >= READ_CHUNK_BLOCKS)
        return -EAGAIN;
    uint32_t addrs[READ_CHUNK_BLOCKS];
    struct blk_req reqs[READ_CHUNK_BLOCKS];
    struct read_chunk ch;
    int err = plan_read_chunk(fs, ii, &page_node(ipage)->i, buf, size, off, off, addrs, reqs, &ch);
    if (err)
        return err;
    if (ch.nreq > 1)
        return -EAGAIN;
    if (ch.nreq == 1)
        *req = reqs[0];
    return (int)ch.nreq;
}

/* read_blocks_raw, decrypted where the file is encrypted (its key found): a partial first
 * or last block is read and decrypted aside (data units never straddle a block). */
int data_read_blocks(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                     size_t size, uint64_t off)
{
    if (!ii->contents_key || (off % F2FS_BLKSIZE == 0 && size % F2FS_BLKSIZE == 0))
        return read_blocks_raw(fs, ii, ipage, buf, size, off);
    _Alignas(F2FS_BLKSIZE) uint8_t block[F2FS_BLKSIZE];
    uint8_t *dst = buf;
    while (size) {
        uint64_t base = off / F2FS_BLKSIZE * F2FS_BLKSIZE;
        size_t skip = (size_t)(off - base), n;
        int err;
        if (skip || size < F2FS_BLKSIZE) {
            n = F2FS_BLKSIZE - skip < size ? F2FS_BLKSIZE - skip : size;
            err = read_blocks_raw(fs, ii, ipage, block, F2FS_BLKSIZE, base);
            if (!err)
                memcpy(dst, block + skip, n);
        } else {
            n = size / F2FS_BLKSIZE * F2FS_BLKSIZE;
            err = read_blocks_raw(fs, ii, ipage, dst, n, off);
        }
        OPENSSL_cleanse(block, sizeof(block));
        if (err)
            return err;
        dst += n;
        off += n;
        size -= n;
    }
    return 0;
}

ssize_t data_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                  size_t size, uint64_t off)
{
    if (off >= ii->size || size == 0)
        return 0;
    if (size > ii->size - off)
        size = ii->size - off;
    if (ii->inline_flags & F2FS_INLINE_DATA) {
        memcpy(buf, (const uint8_t *)ipage->data + inline_data_offset(ii) + off, size);
        return (ssize_t)size;
    }
    if (S_ISREG(ii->mode) && (ii->advise & FADVISE_ENCRYPT_BIT) && !ii->contents_key)
        return -ENOKEY; /* fscrypt_keys.c: the caller found no key */
    int err = compress_file(ii) ? cluster_read(fs, ii, ipage, buf, size, off)
                                : data_read_blocks(fs, ii, ipage, buf, size, off);
    return err ? err : (ssize_t)size;
}

int data_read_past_end(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                       void *buf, size_t size, uint64_t off)
{
    if (ii->inline_flags & F2FS_INLINE_DATA)
        return -EINVAL;
    if (size == 0)
        return 0;
    if (off + size < off || off + size > data_max_size(ii))
        return -EFBIG;
    return data_read_blocks(fs, ii, ipage, buf, size, off);
}

/* ---- write side ---- */

/* Footer offset of the node at the given level of a path (kernel get_node_path's noffset):
 * level 1..depth, where level == depth is the direct node. */
static uint32_t node_offset_of(const struct node_path *p, int level)
{
    const uint32_t n = NIDS_PER_BLOCK;
    uint32_t slot = p->offsets[0];
    switch (p->depth) {
    case 1: return 1 + slot;
    case 2: {
        uint32_t ind = slot == 2 ? 3 : 4 + n;
        return level == 1 ? ind : ind + 1 + p->offsets[1];
    }
    default: {
        uint32_t dind = 5 + 2 * n;
        if (level == 1)
            return dind;
        uint32_t ind = dind + 1 + p->offsets[1] * (n + 1);
        return level == 2 ? ind : ind + 1 + p->offsets[2];
    }
    }
}

void inode_add_blocks(struct f2fuse *fs, struct page *ipage, int64_t delta)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    ri->i_blocks = htole64((uint64_t)((int64_t)le64(ri->i_blocks) + delta));
    quota_add_blocks(fs, ipage, delta);
}

int inode_alloc_blocks(struct f2fuse *fs, struct page *ipage, uint64_t n)
{
    int err = quota_alloc_blocks(fs, ipage, n);
    if (!err) {
        struct f2fs_inode *ri = &page_node(ipage)->i;
        ri->i_blocks = htole64(le64(ri->i_blocks) + n);
    }
    return err;
}

int dnode_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, uint64_t index,
              bool alloc, struct dnode *dn)
{
    return dnode_find(fs, ii, ipage, index, alloc ? DNODE_ALLOC : DNODE_LOOKUP, dn);
}

int dnode_find(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, uint64_t index,
               enum dnode_alloc alloc, struct dnode *dn)
{
    struct node_path p;
    int err = path_of(ii, index, &p);
    if (err)
        return err;
    if (p.depth == 0) {
        *dn = (struct dnode){.page = ipage,
                             .nid = ii->ino,
                             .ofs = p.offsets[0],
                             .addr = INODE_ADDR(ipage, ii->extra_isize / 4 + p.offsets[0])};
        return 0;
    }
    bool cold = !S_ISDIR(ii->mode);
    struct page *parent = ipage;
    uint32_t *slot = INODE_NID(ipage, p.offsets[0]);
    for (int level = 1; level <= p.depth; level++) {
        uint32_t nid = le32(*slot);
        struct page *page;
        if (!nid) {
            if (alloc == DNODE_LOOKUP) {
                err = -ENOENT;
                break;
            }
            if (alloc == DNODE_ALLOC)
                err = inode_alloc_blocks(fs, ipage, 1);
            else
                inode_add_blocks(fs, ipage, 1);
            if (!err)
                err = node_new(fs, ii->ino, 0, node_offset_of(&p, level), cold, ii->claim, &page);
            if (err) {
                if (err != -EDQUOT)
                    inode_add_blocks(fs, ipage, -1);
                break;
            }
            *slot = htole32(le32(page_node(page)->footer.nid));
            pcache_mark_dirty(fs->cache, parent);
            pcache_mark_dirty(fs->cache, ipage);
        } else {
            err = node_get(fs, nid, ii->ino, &page);
            if (err)
                break;
        }
        if (parent != ipage)
            pcache_put(fs->cache, parent);
        parent = page;
        if (level == p.depth) {
            *dn = (struct dnode){.page = page,
                                 .nid = le32(page_node(page)->footer.nid),
                                 .ofs = p.offsets[level],
                                 .addr = NODE_SLOT(page, p.offsets[level])};
            return 0;
        }
        slot = NODE_SLOT(page, p.offsets[level]);
    }
    if (parent != ipage)
        pcache_put(fs->cache, parent);
    return err;
}

void dnode_put(struct f2fuse *fs, struct page *ipage, struct dnode *dn)
{
    if (dn->page && dn->page != ipage)
        pcache_put(fs->cache, dn->page);
    dn->page = NULL;
}

int data_get_page(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index,
                  bool keep_old, struct page **out)
{
    uint64_t key = data_key(ii->ino, index);
    struct page *page = pcache_find(fs->cache, PAGE_DATA, key);
    /* A page of a cluster stored compressed comes in with its whole cluster, decoded. */
    if (!page && compress_file(ii)) {
        int r = cluster_prepare_change(fs, ii, ipage, index);
        if (r < 0)
            return r;
        if (r > 0)
            page = pcache_find(fs->cache, PAGE_DATA, key);
    }
    if (page) {
        page->checkpoint_data = !S_ISREG(ii->mode); /* it may have come in by a read */
        *out = page;
        return 0;
    }
    struct dnode dn;
    int err = dnode_get(fs, ii, ipage, index, true, &dn);
    if (err)
        return err;
    uint32_t addr = le32(*dn.addr);
    uint64_t from = PCACHE_NO_LOAD;
    bool reserved = false;
    if (addr == NULL_ADDR) {
        err = inode_alloc_blocks(fs, ipage, 1); /* the kernel's f2fs_reserve_block: -EDQUOT */
        if (err) {
            dnode_put(fs, ipage, &dn);
            return err;
        }
        *dn.addr = htole32(NEW_ADDR);
        space_reserve_claimed(fs, ii->claim, 1);
        extent_forget_block(&page_node(ipage)->i, index);
        reserved = true;
    } else if (addr != NEW_ADDR && !blkaddr_in_main(fs, addr)) {
        err = fs_corrupt(fs, "inode %u: block %llu points to 0x%x outside the main area", ii->ino,
                         (unsigned long long)index, addr);
    } else if (keep_old && addr != NEW_ADDR) {
        from = addr;
    }
    if (!err)
        err = pcache_get(fs->cache, PAGE_DATA, key, from, &page);
    if (!err)
        page->checkpoint_data = !S_ISREG(ii->mode);
    if (reserved) {
        if (err) { /* no page will ever be written for it: give the reservation back */
            *dn.addr = htole32(NULL_ADDR);
            inode_add_blocks(fs, ipage, -1);
            seg_reserve(fs->seg, -1);
        } else {
            pcache_mark_dirty(fs->cache, dn.page);
            pcache_mark_dirty(fs->cache, ipage);
        }
    }
    dnode_put(fs, ipage, &dn);
    if (err)
        return err;
    *out = page;
    return 0;
}

int data_reserve_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index)
{
    struct dnode dn;
    int err = dnode_get(fs, ii, ipage, index, true, &dn);
    if (err)
        return err;
    if (le32(*dn.addr) == NULL_ADDR)
        err = inode_alloc_blocks(fs, ipage, 1);
    if (!err && le32(*dn.addr) == NULL_ADDR) {
        *dn.addr = htole32(NEW_ADDR);
        space_reserve_claimed(fs, ii->claim, 1);
        extent_forget_block(&page_node(ipage)->i, index);
        pcache_mark_dirty(fs->cache, dn.page);
        pcache_mark_dirty(fs->cache, ipage);
    }
    dnode_put(fs, ipage, &dn);
    return err;
}

/* Whether the inline area holds data: DATA_EXIST, or any non-zero byte when the flag is
 * clear (the kernel's __recover_inline_status sets the flag then, and the read path shows
 * those bytes anyway). */
static bool inline_has_data(const struct inode_info *ii, const uint8_t *inline_area)
{
    if (ii->inline_flags & F2FS_DATA_EXIST)
        return true;
    for (uint32_t i = 0; i < inline_data_size(ii); i++)
        if (inline_area[i])
            return true;
    return false;
}

/* Moves inline data into block 0 (f2fs_convert_inline_inode).  The block is reserved first:
 * a caller over its quota (-EDQUOT) leaves the file as it was. */
int data_convert_inline(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    uint8_t *inline_area = (uint8_t *)ipage->data + inline_data_offset(ii);
    struct f2fs_inode *ri = &page_node(ipage)->i;
    bool has_data = ii->size && inline_has_data(ii, inline_area);
    struct page *page = NULL;
    /* Without data there is nothing to move, and no block to spend on it. */
    if (has_data) {
        int err = data_get_page(fs, ii, ipage, 0, false, &page);
        if (err)
            return err;
    }
    ri->i_inline &= (uint8_t) ~(F2FS_INLINE_DATA | F2FS_DATA_EXIST);
    extent_clear(ri); /* an inline inode has no blocks for one to describe */
    ii->inline_flags = ri->i_inline;
    pcache_mark_dirty(fs->cache, ipage);
    if (page) {
        size_t bytes = ii->size < inline_data_size(ii) ? ii->size : inline_data_size(ii);
        memcpy(page->data, inline_area, bytes);
        memset((uint8_t *)page->data + bytes, 0, F2FS_BLKSIZE - bytes);
        pcache_mark_dirty(fs->cache, page);
        pcache_put(fs->cache, page);
    }
    memset(inline_area, 0, inline_data_size(ii));
    return 0;
}

/* ---- an encrypted file's blocks, with its key ----
 * Its DATA pages hold what the device holds, ciphertext, whoever brought them in (a write,
 * segment cleaning, recovery): writeback and GC move them as they are, and no page ever
 * holds plaintext.  A change decrypts the block aside, edits it and encrypts it back. */

/* Encrypts plain (block index of ii) into page, which becomes dirty; wipes plain. */
static int crypt_store(struct f2fuse *fs, const struct inode_info *ii, struct page *page,
                       uint64_t index, uint8_t *plain)
{
    int err = fscrypt_crypt_blocks(fs, ii->contents_key, true, index, plain, 1);
    if (!err) {
        memcpy(page->data, plain, F2FS_BLKSIZE);
        pcache_mark_dirty(fs->cache, page);
    }
    OPENSSL_cleanse(plain, F2FS_BLKSIZE);
    return err;
}

/* zero_block_tail with the key: page holds block index's ciphertext. */
static int crypt_zero_tail(struct f2fuse *fs, const struct inode_info *ii, struct page *page,
                           uint64_t index, size_t keep, bool only_stale)
{
    _Alignas(64) uint8_t plain[F2FS_BLKSIZE];
    memcpy(plain, page->data, F2FS_BLKSIZE);
    int err = fscrypt_crypt_blocks(fs, ii->contents_key, false, index, plain, 1);
    size_t n = F2FS_BLKSIZE - keep;
    bool zero = !err &&
                (!only_stale || plain[keep] || memcmp(plain + keep, plain + keep + 1, n - 1));
    if (zero) {
        memset(plain + keep, 0, n);
        err = crypt_store(fs, ii, page, index, plain);
    }
    OPENSSL_cleanse(plain, sizeof(plain));
    return err ? err : zero;
}

/* Writes src[0, n) at byte in_blk of an encrypted file's block index.  What the rest of the
 * block holds: its plaintext when the block has data (cached, or on the device and kept as
 * data_get_page keeps it), zeros when it has none (a hole, a reserved block). */
static int crypt_write_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                             uint64_t index, size_t in_blk, const uint8_t *src, size_t n)
{
    bool keep_old = n < F2FS_BLKSIZE && index * F2FS_BLKSIZE < ii->size;
    /* A cluster stored compressed comes in whole first (as ciphertext pages): a block of
     * it in a reserved slot holds data all the same. */
    int r = compress_file(ii) ? cluster_prepare_change(fs, ii, ipage, index) : 0;
    if (r < 0)
        return r;
    /* held across data_get_page, so that it cannot be evicted and come back as zeros */
    struct page *cached = pcache_find(fs->cache, PAGE_DATA, data_key(ii->ino, index));
    bool cipher = cached != NULL;
    int err = 0;
    if (!cipher && keep_old) {
        uint32_t addr;
        err = data_map(fs, ii, &page_node(ipage)->i, index, 1, &addr);
        cipher = addr != NULL_ADDR; /* data_map: a reserved block reads as a hole */
    }
    struct page *page = NULL;
    if (!err)
        err = data_get_page(fs, ii, ipage, index, keep_old, &page);
    pcache_put(fs->cache, cached);
    if (err)
        return err;
    _Alignas(64) uint8_t plain[F2FS_BLKSIZE];
    if (n < F2FS_BLKSIZE && cipher) {
        memcpy(plain, page->data, F2FS_BLKSIZE);
        err = fscrypt_crypt_blocks(fs, ii->contents_key, false, index, plain, 1);
    } else if (n < F2FS_BLKSIZE) {
        memset(plain, 0, sizeof(plain));
    }
    if (!err) {
        memcpy(plain + in_blk, src, n);
        err = crypt_store(fs, ii, page, index, plain);
    }
    OPENSSL_cleanse(plain, sizeof(plain));
    pcache_put(fs->cache, page);
    return err;
}

/* Zeroes file block index from byte keep on: the cached page, else the block loaded (a hole
 * or a reserved block reads as zeros already).  only_stale: a tail that is zero already is
 * left alone, not dirtied.  Returns 1 when it zeroed, 0 when not, or -errno. */
static int zero_block_tail(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                           uint64_t index, size_t keep, bool only_stale)
{
    /* An encrypted file's block is ciphertext: zeros written into it would decrypt to
     * garbage, before the end too (a cipher block straddles it).  With the key the tail is
     * zeroed in plaintext (crypt_zero_tail); without it only recovery truncates one, and
     * the kernel's reads stop at i_size anyway. */
    if ((ii->advise & FADVISE_ENCRYPT_BIT) && !ii->contents_key)
        return 0;
    uint64_t key = data_key(ii->ino, index);
    struct page *page = pcache_find(fs->cache, PAGE_DATA, key);
    if (!page) {
        uint32_t addr;
        int err = data_map(fs, ii, &page_node(ipage)->i, index, 1, &addr);
        if (!err && addr == NULL_ADDR) /* data_map: NEW_ADDR reads as a hole too */
            return 0;
        if (!err)
            err = pcache_get(fs->cache, PAGE_DATA, key, addr, &page);
        if (err)
            return err;
    }
    if (ii->contents_key) {
        int r = crypt_zero_tail(fs, ii, page, index, keep, only_stale);
        pcache_put(fs->cache, page);
        return r;
    }
    uint8_t *tail = (uint8_t *)page->data + keep;
    size_t n = F2FS_BLKSIZE - keep;
    bool zero = !only_stale || tail[0] || memcmp(tail, tail + 1, n - 1);
    if (zero) {
        memset(tail, 0, n);
        page->checkpoint_data = !S_ISREG(ii->mode);
        pcache_mark_dirty(fs->cache, page);
    }
    pcache_put(fs->cache, page);
    return zero;
}

/* Bytes between a file's end and the end of its last block must read as zeros once the file
 * grows. Truncate zeroes them in the cache, but a checkpoint taken while that page was dirty
 * records the new size with the old block (checkpoint_data=metadata, as f2fs): after a crash
 * the block's stale tail would show as soon as the file grew. Growing checks the tail here. */
int data_zero_past_end(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    /* A compressed cluster holding the end decodes whole: its blocks past the end too. */
    uint64_t cluster_bytes = compress_file(ii) ? (uint64_t)F2FS_BLKSIZE << ii->log_cluster_size : 0;
    if (cluster_bytes && ii->size % cluster_bytes) {
        int r = cluster_prepare_change(fs, ii, ipage, ii->size / F2FS_BLKSIZE);
        if (r)
            return r < 0 ? r : 0;
    }
    size_t keep = ii->size % F2FS_BLKSIZE;
    if (keep == 0 || ii->inline_flags & F2FS_INLINE_DATA)
        return 0;
    int r = zero_block_tail(fs, ii, ipage, ii->size / F2FS_BLKSIZE, keep, true);
    if (r > 0)
        atomic_fetch_add(&fs->stale_tails_zeroed, 1);
    return r < 0 ? r : 0;
}

ssize_t data_write(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, const void *buf,
                   size_t size, uint64_t off)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    if (size == 0)
        return 0;
    uint64_t end = off + size;
    if (end < off || end > data_max_size(ii))
        return -EFBIG;
    if (S_ISREG(ii->mode) && (ii->advise & FADVISE_ENCRYPT_BIT) && !ii->contents_key)
        return -ENOKEY; /* never plaintext into an encrypted file */
    if (ii->inline_flags & F2FS_INLINE_DATA) {
        if (end <= inline_data_size(ii)) {
            memcpy((uint8_t *)ipage->data + inline_data_offset(ii) + off, buf, size);
            ri->i_inline |= F2FS_DATA_EXIST;
            ii->inline_flags = ri->i_inline;
            if (end > ii->size) {
                ii->size = end;
                ri->i_size = htole64(end);
            }
            pcache_mark_dirty(fs->cache, ipage);
            return (ssize_t)size;
        }
        int err = data_convert_inline(fs, ii, ipage);
        if (err)
            return err;
    }
    if (end > ii->size) {
        int err = data_zero_past_end(fs, ii, ipage);
        if (err)
            return err;
    }
    size_t done = 0;
    while (done < size) {
        uint64_t pos = off + done;
        uint64_t index = pos / F2FS_BLKSIZE;
        size_t in_blk = pos % F2FS_BLKSIZE;
        size_t n = F2FS_BLKSIZE - in_blk;
        if (n > size - done)
            n = size - done;
        /* A partial block inside the file keeps the rest of its old content. */
        bool keep_old = n < F2FS_BLKSIZE && index * F2FS_BLKSIZE < ii->size;
        struct page *page = NULL;
        int err = ii->contents_key ? crypt_write_block(fs, ii, ipage, index, in_blk,
                                                       (const uint8_t *)buf + done, n)
                                   : data_get_page(fs, ii, ipage, index, keep_old, &page);
        if (err && !done)
            return err;
        if (err) { /* a short write: what was copied counts, the size included */
            size = done;
            end = off + done;
            break;
        }
        if (page) {
            memcpy((uint8_t *)page->data + in_blk, (const uint8_t *)buf + done, n);
            /* the kernel keeps only pages a write filled: f2fuse keeps the others */
            __atomic_store_n(&page->partial_write, n < F2FS_BLKSIZE, __ATOMIC_RELAXED);
            pcache_put_dirty(fs->cache, page);
        }
        done += n;
    }
    if (end > ii->size) {
        ii->size = end;
        ri->i_size = htole64(end);
        pcache_mark_dirty(fs->cache, ipage);
    }
    return (ssize_t)size;
}

/* A compressed cluster's COMPRESS_ADDR slot holds a reserved block like NEW_ADDR (i_blocks
 * and the checkpoint's valid count include it), unless the file's spare blocks were
 * released (F2FS_COMPRESS_RELEASED): f2fs_truncate_data_blocks_range counts it only then. */
void data_free_slot(struct f2fuse *fs, struct page *ipage, uint32_t *addr)
{
    uint32_t a = le32(*addr);
    if (a == NULL_ADDR)
        return;
    *addr = 0;
    if (blkaddr_in_main(fs, a)) {
        seg_invalidate_block(fs->seg, a);
    } else if (a == COMPRESS_ADDR && (page_node(ipage)->i.i_inline & F2FS_COMPRESS_RELEASED)) {
        return;
    } else if (a == NEW_ADDR || a == COMPRESS_ADDR) {
        seg_reserve(fs->seg, -1);
    }
    inode_add_blocks(fs, ipage, -1);
}

/* What freeing a compressed file's slots does to i_compr_blocks: each compressed cluster's
 * marker and spare (NEW_ADDR) slots count there (f2fs_truncate_data_blocks_range).  Slots
 * are seen in file order, every one from a cluster's first on. */
struct compr_free {
    uint32_t cluster; /* 0 for a file that is not compressed */
    bool released;    /* F2FS_COMPRESS_RELEASED: i_compr_blocks counts none */
    bool in_compressed;
    uint64_t freed;
};

static void compr_free_see(struct compr_free *cf, uint64_t index, uint32_t addr)
{
    if (!cf->cluster || cf->released)
        return;
    if (index % cf->cluster == 0)
        cf->in_compressed = addr == COMPRESS_ADDR;
    if (cf->in_compressed && (addr == COMPRESS_ADDR || addr == NEW_ADDR))
        cf->freed++;
}

/* Frees, in the node nid covering file blocks [base, base + span), every block from
 * first_free on; frees the node itself when nothing before first_free is left in it.
 * depth 1 = direct node.  Returns 1 when the node was freed, 0 if not, or -errno. */
static int truncate_node(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                         uint32_t nid, int depth, uint64_t base, uint64_t span, uint64_t first_free,
                         struct compr_free *cf)
{
    struct page *page;
    int err = node_get(fs, nid, ii->ino, &page);
    if (err)
        return err;
    struct f2fs_node *node = page_node(page);
    bool changed = false;
    if (depth == 1) {
        for (uint32_t k = 0; k < ii->addrs_per_block; k++) {
            if (base + k < first_free)
                continue;
            compr_free_see(cf, base + k, le32(node->addr[k]));
            if (node->addr[k]) {
                data_free_slot(fs, ipage, NODE_SLOT(page, k));
                changed = true;
            }
        }
    } else {
        uint64_t child_span = span / NIDS_PER_BLOCK;
        for (uint32_t k = 0; k < NIDS_PER_BLOCK && !err; k++) {
            uint32_t child = le32(node->nid[k]);
            uint64_t child_base = base + k * child_span;
            if (!child || child_base + child_span <= first_free)
                continue;
            int r = truncate_node(fs, ii, ipage, child, depth - 1, child_base, child_span,
                                  first_free, cf);
            if (r < 0)
                err = r;
            else if (r == 1) {
                node->nid[k] = 0;
                changed = true;
            }
        }
    }
    if (changed)
        pcache_mark_dirty(fs->cache, page);
    pcache_put(fs->cache, page);
    if (err)
        return err;
    if (base < first_free)
        return 0;
    err = node_free(fs, nid, ii->ino);
    if (err)
        return err;
    inode_add_blocks(fs, ipage, -1);
    return 1;
}

/* Frees every block from file block first_free on, and the nodes left empty.  For a
 * compressed file first_free is a cluster's first block or inside a plain cluster. */
static int free_from(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                     uint64_t first_free)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    struct compr_free cf = {.cluster = compress_file(ii) ? 1u << ii->log_cluster_size : 0,
                            .released = ii->inline_flags & F2FS_COMPRESS_RELEASED};
    fsync_needs_checkpoint(fs, ii->ino); /* freed nodes leave no trace to roll forward */
    extent_truncate(ri, first_free);
    pcache_discard_range(fs->cache, PAGE_DATA, data_key(ii->ino, first_free),
                         data_key(ii->ino, 0xffffffffu));
    for (uint64_t i = first_free; i < ii->addrs_per_inode; i++) {
        compr_free_see(&cf, i, le32(*INODE_ADDR(ipage, ii->extra_isize / 4 + i)));
        data_free_slot(fs, ipage, INODE_ADDR(ipage, ii->extra_isize / 4 + i));
    }
    uint64_t base = ii->addrs_per_inode;
    static const int slot_depth[DEF_NIDS_PER_INODE] = {1, 1, 2, 2, 3};
    int err = 0;
    for (int s = 0; s < DEF_NIDS_PER_INODE && !err; s++) {
        uint64_t span = ii->addrs_per_block;
        for (int d = 1; d < slot_depth[s]; d++)
            span *= NIDS_PER_BLOCK;
        uint32_t nid = le32(ri->i_nid[s]);
        if (nid && base + span > first_free) {
            int r = truncate_node(fs, ii, ipage, nid, slot_depth[s], base, span, first_free, &cf);
            if (r < 0)
                err = r;
            if (r == 1)
                ri->i_nid[s] = 0;
        }
        base += span;
    }
    if (cf.freed) {
        uint64_t have = le64(ri->i_compr_blocks);
        ri->i_compr_blocks = htole64(have > cf.freed ? have - cf.freed : 0);
    }
    for (int s = 0; s < DEF_NIDS_PER_INODE; s++)
        ii->nids[s] = le32(ri->i_nid[s]);
    pcache_mark_dirty(fs->cache, ipage);
    return err;
}

int data_free_all(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    return free_from(fs, ii, ipage, 0);
}

int data_free_past_end(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    if (ii->inline_flags & F2FS_INLINE_DATA)
        return 0;
    return free_from(fs, ii, ipage, (ii->size + F2FS_BLKSIZE - 1) / F2FS_BLKSIZE);
}

int data_truncate(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t new_size)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    uint64_t old_size = ii->size;
    if (new_size > data_max_size(ii))
        return -EFBIG;
    if (ii->inline_flags & F2FS_INLINE_DATA) {
        if (new_size <= inline_data_size(ii)) {
            if (new_size < old_size)
                memset((uint8_t *)ipage->data + inline_data_offset(ii) + new_size, 0,
                       old_size - new_size);
            goto set_size;
        }
        int err = data_convert_inline(fs, ii, ipage);
        if (err)
            return err;
    }
    /* Blocks past the end exist also when fallocate kept the size: free those too. */
    if (new_size < old_size || (ii->advise & FADVISE_KEEP_SIZE_BIT)) {
        uint64_t first_free = (new_size + F2FS_BLKSIZE - 1) / F2FS_BLKSIZE, keep = UINT64_MAX;
        /* A compressed file frees whole clusters; one stored compressed that the new end
         * cuts is rewritten (f2fs_truncate_partial_cluster), a plain one freed per block. */
        int err = compress_file(ii) && new_size < old_size
                      ? cluster_truncate_partial(fs, ii, ipage, new_size, &keep)
                      : 0;
        if (!err)
            err = free_from(fs, ii, ipage, keep != UINT64_MAX ? keep : first_free);
        if (err)
            return err;
        /* The kept part of the last block must read as zeros past the new end. */
        if (new_size % F2FS_BLKSIZE && new_size < old_size && keep == UINT64_MAX) {
            err = zero_block_tail(fs, ii, ipage, new_size / F2FS_BLKSIZE, new_size % F2FS_BLKSIZE,
                                  false);
            if (err < 0)
                return err;
        }
        if (ii->advise & FADVISE_KEEP_SIZE_BIT) {
            ii->advise &= (uint8_t)~FADVISE_KEEP_SIZE_BIT;
            ri->i_advise = ii->advise;
        }
    }
    if (new_size > old_size) {
        int err = data_zero_past_end(fs, ii, ipage);
        if (err)
            return err;
    }
set_size:
    ii->size = new_size;
    ri->i_size = htole64(new_size);
    pcache_mark_dirty(fs->cache, ipage);
    return 0;
}

static int key_order(const void *a, const void *b)
{
    uint64_t ka = (*(struct page *const *)a)->key, kb = (*(struct page *const *)b)->key;
    return ka < kb ? -1 : ka > kb;
}

/* Do two file block indexes have their pointers in the same node? */
static bool same_dnode(const struct node_path *a, const struct node_path *b)
{
    if (a->depth != b->depth)
        return false;
    for (int level = 0; level < a->depth; level++)
        if (a->offsets[level] != b->offsets[level])
            return false;
    return true;
}

int data_assign_blocks(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                       struct page *const *pages, size_t n, uint32_t *addrs, size_t *done)
{
    struct dnode dn = {0};
    struct node_path cur = {0};
    struct f2fs_nat_entry ne;
    struct extent_run run = {0};
    bool have = false, inode_dirty = false, dn_dirty = false;
    int err = compress_file(ii) ? -EINVAL : 0; /* cluster_assign_blocks writes those */
    size_t i = 0;
    for (; i < n && !err; i++) {
        struct page *dpage = pages[i];
        uint64_t index = dpage->key & 0xffffffffu;
        struct node_path p;
        err = path_of(ii, index, &p);
        if (err)
            break;
        if (have && same_dnode(&cur, &p)) {
            dn.ofs = p.offsets[p.depth];
            dn.addr = p.depth == 0 ? INODE_ADDR(ipage, ii->extra_isize / 4 + dn.ofs)
                                   : NODE_SLOT(dn.page, dn.ofs);
        } else {
            dnode_put(fs, ipage, &dn);
            have = false;
            err = dnode_find(fs, ii, ipage, index, DNODE_ALLOC_NOFAIL, &dn);
            if (err)
                break;
            have = true;
            cur = p;
            err = nat_get(fs->nat, dn.nid, &ne);
            if (err)
                break;
            dn_dirty = false;
        }
        uint32_t old = le32(*dn.addr);
        /* A pinned file's blocks keep their addresses (the kernel's in-place update for
         * pinned files): LBAs handed out for it must stay true.  The block is valid in the
         * checkpoint and stays so; a crash may leave old or new content in it, as with
         * any in-place write, but no metadata changes. */
        if ((ii->inline_flags & F2FS_PIN_FILE) && blkaddr_in_main(fs, old)) {
            dpage->gc_cold = false;
            addrs[i] = old;
            atomic_fetch_add(&fs->pinned_inplace_writes, 1);
            continue;
        }
        if (!dn_dirty) {
            pcache_mark_dirty(fs->cache, dn.page); /* its pointers change below */
            dn_dirty = true;
        }
        struct f2fs_summary sum = {.nid = htole32(dn.nid),
                                   .version = ne.version,
                                   .ofs_in_node = htole16((uint16_t)dn.ofs)};
        enum log_type log = S_ISDIR(ii->mode) ? LOG_HOT_DATA
                            : dpage->gc_cold  ? LOG_COLD_DATA
                                              : LOG_WARM_DATA;
        uint32_t blkaddr = 0;
        err = seg_alloc_block(fs->seg, log, &sum,
                              blkaddr_in_main(fs, old) || old == NEW_ADDR ? old : NULL_ADDR,
                              &blkaddr);
        if (err)
            break;
        dpage->gc_cold = false;
        if (old == NULL_ADDR) { /* NEW_ADDR was counted when reserved */
            inode_add_blocks(fs, ipage, 1);
            inode_dirty = true;
        }
        *dn.addr = htole32(blkaddr);
        addrs[i] = blkaddr;
        /* Only regular files have one: a kernel drops (and so rewrites) any other's. */
        if (S_ISREG(ii->mode) ? extent_assigned(&page_node(ipage)->i, &run, index, blkaddr)
                              : extent_clear(&page_node(ipage)->i))
            inode_dirty = true;
    }
    dnode_put(fs, ipage, &dn);
    if (inode_dirty)
        pcache_mark_dirty(fs->cache, ipage);
    *done = i;
    return err;
}

static bool page_of_metadata(const struct page *page, void *arg)
{
    return page->checkpoint_data;
}

/* Writes every dirty data page match selects (or, with match NULL and file non-zero, every
 * one of that file) to a new block of its log, pointing the file at it.  Runs inside a
 * checkpoint before node writeback, or for one file's fsync.  A compressed file's run goes
 * through cluster.c (whole clusters, its own requests). */
static int writeback_matching(struct f2fuse *fs, bool (*match)(const struct page *, void *),
                              void *arg, uint32_t file, enum blk_prio prio)
{
    enum { BATCH = 1024 };
    struct page **pages = fs_malloc(fs, BATCH * sizeof(*pages));
    struct blk_req *reqs = fs_malloc(fs, BATCH * sizeof(*reqs));
    struct blk_req **rp = fs_malloc(fs, BATCH * sizeof(*rp));
    uint32_t *addrs = fs_malloc(fs, BATCH * sizeof(*addrs));
    int err = pages && reqs && rp && addrs ? 0 : -ENOMEM;
    while (!err) {
        /* one file's: its own list in the cache (not every dirty page of the mount) */
        size_t n = file
                       ? pcache_collect_dirty_file(fs->cache, file, pages, BATCH)
                       : pcache_collect_dirty_match(fs->cache, PAGE_DATA, match, arg, pages, BATCH);
        if (n == 0)
            break;
        qsort(pages, n, sizeof(*pages), key_order); /* file order: contiguous blocks */
        size_t nreq = 0, kept = 0;
        uint64_t written = 0;
        for (size_t i = 0, next; i < n; i = next) {
            uint32_t ino = (uint32_t)(pages[i]->key >> 32);
            for (next = i + 1; next < n && (uint32_t)(pages[next]->key >> 32) == ino; next++)
                ;
            if (err) { /* put, left dirty */
                for (size_t k = i; k < next; k++)
                    pcache_put(fs->cache, pages[k]);
                continue;
            }
            struct page *ipage;
            struct inode_info ii;
            err = inode_get(fs, ino, &ipage, &ii);
            if (!err && compress_file(&ii)) {
                pcache_put(fs->cache, ipage);
                err = cluster_writeback_run(fs, ino, pages + i, next - i, prio, &written);
                continue; /* its pages are written and put */
            }
            size_t done = 0;
            if (!err) {
                err = data_assign_blocks(fs, &ii, ipage, pages + i, next - i, addrs + i, &done);
                pcache_put(fs->cache, ipage);
            }
            for (size_t k = i; k < i + done; k++) {
                reqs[nreq] = (struct blk_req){.op = BLK_WRITE,
                                              .prio = prio,
                                              .off = (uint64_t)addrs[k] * F2FS_BLKSIZE,
                                              .len = F2FS_BLKSIZE,
                                              .buf = pages[k]->data};
                rp[nreq] = &reqs[nreq];
                nreq++;
            }
            /* the batch's plain runs, kept in order at the front */
            memmove(pages + kept, pages + i, (next - i) * sizeof(*pages));
            memmove(addrs + kept, addrs + i, done * sizeof(*addrs));
            for (size_t k = done; k < next - i; k++)
                addrs[kept + k] = 0;
            kept += next - i;
        }
        /* Assigned blocks are written even after an error: their pointers changed. */
        uint64_t t0 = clock_mono_ns();
        int werr = nreq ? blk_submit_wait(fs->dev, rp, (unsigned)nreq) : 0;
        if (!werr) /* the bandwidth estimate learns from every data writeback */
            writeback_account(fs, (nreq + written) * (uint64_t)F2FS_BLKSIZE, clock_mono_ns() - t0);
        if (!werr) {
            /* pages not assigned (addrs 0 after an error) stay dirty */
            size_t from = 0;
            for (size_t k = 0; k <= kept; k++) {
                if (k < kept && addrs[k])
                    continue;
                if (k > from)
                    pcache_mark_clean_many(fs->cache, pages + from, addrs + from, k - from);
                from = k + 1;
            }
        }
        for (size_t j = 0; j < kept; j++) /* a regular file's page leaves: the kernel has it */
            werr || !addrs[j] ? pcache_put(fs->cache, pages[j])
                              : pcache_put_written(fs->cache, pages[j]);
        if (!werr)
            atomic_fetch_add(&fs->data_pages_written, nreq + written);
        if (werr && !err)
            err = werr;
    }
    free(pages);
    free(reqs);
    free(rp);
    free(addrs);
    return err;
}

int data_writeback(struct f2fuse *fs, uint32_t only_ino)
{
    return writeback_matching(fs, NULL, NULL, only_ino, fs->io_prio);
}

int data_writeback_inode(struct f2fuse *fs, uint32_t ino, enum blk_prio prio)
{
    return writeback_matching(fs, NULL, NULL, ino, prio);
}

int data_writeback_metadata(struct f2fuse *fs)
{
    return writeback_matching(fs, page_of_metadata, NULL, 0, fs->io_prio);
}

uint64_t data_max_size(const struct inode_info *ii)
{
    const uint64_t d = ii->addrs_per_block, n = NIDS_PER_BLOCK;
    /* Block indexes are kept below 2^32 (the data page key holds 32 bits of index). */
    uint64_t blocks = ii->addrs_per_inode + 2 * d + 2 * n * d + n * n * d;
    if (blocks > UINT32_MAX)
        blocks = UINT32_MAX;
    return blocks * F2FS_BLKSIZE;
}

int data_punch_block(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index)
{
    pcache_discard(fs->cache, PAGE_DATA, data_key(ii->ino, index));
    struct dnode dn;
    int err = dnode_get(fs, ii, ipage, index, false, &dn);
    if (err)
        return err == -ENOENT ? 0 : err;
    if (*dn.addr) {
        data_free_slot(fs, ipage, dn.addr);
        extent_forget_block(&page_node(ipage)->i, index);
        pcache_mark_dirty(fs->cache, dn.page);
        pcache_mark_dirty(fs->cache, ipage);
    }
    dnode_put(fs, ipage, &dn);
    return 0;
}
