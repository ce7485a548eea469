/* Node address table: nid → block address (the NAT journal first, then the current copy of
 * the NAT block), and node blocks read with their footers checked. */
#include <errno.h>
#include <string.h>

#include "core/fs.h"

bool nid_valid(const struct f2fuse *fs, uint32_t nid)
{
    return nid >= fs->root_ino && nid < fs->max_nid;
}

bool blkaddr_in_main(const struct f2fuse *fs, uint32_t blkaddr)
{
    return blkaddr >= fs->main_blkaddr && blkaddr < fs->main_blkend;
}

/* The version bitmaps are MSB-first within each byte (f2fs_test_bit). */
static bool test_bit_msb(const uint8_t *map, uint32_t bit)
{
    return map[bit >> 3] & (0x80u >> (bit & 7));
}

/* Block address of the current copy of NAT block block_off.  The two copies interleave
 * per segment: copy 0 of segment-pair k at nat_blkaddr + 2k·512, copy 1 right after. */
static uint32_t nat_block_addr(const struct f2fuse *fs, uint32_t block_off)
{
    uint32_t seg_off = block_off >> F2FS_LOG_BLOCKS_PER_SEG;
    uint32_t addr = fs->nat_blkaddr + (seg_off << (F2FS_LOG_BLOCKS_PER_SEG + 1)) +
                    (block_off & (F2FS_BLOCKS_PER_SEG - 1));
    if (test_bit_msb(fs->nat_bitmap, block_off))
        addr += F2FS_BLOCKS_PER_SEG;
    return addr;
}

int nat_lookup(struct f2fuse *fs, uint32_t nid, struct f2fs_nat_entry *out)
{
    if (!nid_valid(fs, nid))
        return fs_corrupt(fs, "nid %u is outside the NAT (max %u)", nid, fs->max_nid);
    for (unsigned i = 0; i < fs->nat_journal_count; i++) {
        if (le32(fs->nat_journal[i].nid) == nid) {
            *out = fs->nat_journal[i].ne;
            return 0;
        }
    }
    struct page *page;
    uint32_t block_off = nid / NAT_ENTRY_PER_BLOCK;
    uint32_t addr = nat_block_addr(fs, block_off);
    int err = pcache_get(fs->cache, PAGE_META, addr, addr, &page);
    if (err)
        return err;
    memcpy(out, (const uint8_t *)page->data + (nid % NAT_ENTRY_PER_BLOCK) * sizeof(*out),
           sizeof(*out));
    pcache_put(fs->cache, page);
    return 0;
}

int node_get(struct f2fuse *fs, uint32_t nid, uint32_t ino, struct page **out)
{
    /* Node pages are cached by nid: a cached one is current wherever it sits on disk. */
    struct page *page = nid_valid(fs, nid) ? pcache_find(fs->cache, PAGE_NODE, nid) : NULL;
    if (!page) {
        struct f2fs_nat_entry ne;
        int err = nat_lookup(fs, nid, &ne);
        if (err)
            return err;
        uint32_t blkaddr = le32(ne.block_addr);
        if (!blkaddr_in_main(fs, blkaddr))
            return fs_corrupt(fs, "NAT entry of nid %u points to block 0x%x outside the main "
                                  "area", nid, blkaddr);
        if (ino && le32(ne.ino) != ino)
            return fs_corrupt(fs, "NAT entry of nid %u belongs to inode %u, expected %u", nid,
                              le32(ne.ino), ino);
        err = pcache_get(fs->cache, PAGE_NODE, nid, blkaddr, &page);
        if (err)
            return err;
    }
    const struct node_footer *footer = &page_node(page)->footer;
    if (le32(footer->nid) != nid || (ino && le32(footer->ino) != ino)) {
        uint64_t at = page->blkaddr;
        pcache_put(fs->cache, page);
        /* Keep the damaged block out of the cache so that nothing trusts it later. */
        pcache_forget(fs->cache, PAGE_NODE, nid);
        return fs_corrupt(fs, "node block 0x%llx has footer nid %u ino %u, expected nid %u "
                              "ino %u", (unsigned long long)at, le32(footer->nid),
                          le32(footer->ino), nid, ino);
    }
    *out = page;
    return 0;
}
