/* Node address table: nid → block address (the NAT journal first, then the current copy of
 * the NAT block), and node blocks read with their footers checked. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/node.h"
#include "core/context.h"
#include "core/fsync.h"
#include "core/inode.h"
#include "core/nat.h"
#include "core/segment.h"
#include "core/space.h"

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

int nat_entry_in_block(struct f2fuse *fs, uint32_t addr, uint32_t nid, struct f2fs_nat_entry *out)
{
    struct page *page;
    int err = pcache_get(fs->cache, PAGE_META, addr, addr, &page);
    if (err)
        return err;
    memcpy(out, (const uint8_t *)page->data + (nid % NAT_ENTRY_PER_BLOCK) * sizeof(*out),
           sizeof(*out));
    pcache_put(fs->cache, page);
    return 0;
}

int nat_lookup(struct f2fuse *fs, uint32_t nid, struct f2fs_nat_entry *out)
{
    if (!nid_valid(fs, nid))
        return fs_corrupt(fs, "nid %u is outside the NAT (max %u)", nid, fs->max_nid);
    if (fs->nat) /* a writable mount: the NAT manager knows the entries changed since */
        return nat_get(fs->nat, nid, out);
    for (unsigned i = 0; i < fs->nat_journal_count; i++) {
        if (le32(fs->nat_journal[i].nid) == nid) {
            *out = fs->nat_journal[i].ne;
            return 0;
        }
    }
    return nat_entry_in_block(fs, nat_block_addr(fs, nid / NAT_ENTRY_PER_BLOCK), nid, out);
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
        if (blkaddr == NULL_ADDR)
            return -ENOENT; /* a freed node (e.g. an inode unlinked meanwhile) */
        if (!blkaddr_in_main(fs, blkaddr))
            return fs_corrupt(fs,
                              "NAT entry of nid %u points to block 0x%x outside the main "
                              "area",
                              nid, blkaddr);
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
        return fs_corrupt(fs,
                          "node block 0x%llx has footer nid %u ino %u, expected nid %u "
                          "ino %u",
                          (unsigned long long)at, le32(footer->nid), le32(footer->ino), nid, ino);
    }
    *out = page;
    return 0;
}

/* ---- write side ---- */

uint64_t node_chain_version(const struct f2fuse *fs)
{
    uint64_t ver = fs->cp_ver;
    if (le32(fs->cp->ckpt_flags) & CP_CRC_RECOVERY_FLAG) {
        /* cpver_of_node: the checkpoint's CRC in the high half tells chains apart. */
        uint32_t crc;
        memcpy(&crc, (const uint8_t *)fs->cp_block + le32(fs->cp->checksum_offset), sizeof(crc));
        ver |= (uint64_t)le32(crc) << 32;
    }
    return ver;
}

bool node_chain_version_matches(const struct f2fuse *fs, uint64_t footer_ver)
{
    /* is_recoverable_dnode: fsck.f2fs rewrites a crashed image's checkpoint with
     * NOCRC_RECOVERY (and a new CRC) so that a chain stamped with the old CRC in the high
     * half stays recoverable; only the version's low 32 bits then count. */
    if (le32(fs->cp->ckpt_flags) & CP_NOCRC_RECOVERY_FLAG)
        return (uint32_t)footer_ver == (uint32_t)fs->cp_ver;
    return footer_ver == node_chain_version(fs);
}

int node_new(struct f2fuse *fs, uint32_t ino, uint32_t nid, uint32_t ofs, bool cold,
             struct space_claim *claim, struct page **out)
{
    bool allocated = false;
    if (!nid) { /* the caller passes a nid it allocated itself for an inode (nid == ino) */
        int err = nat_alloc_nid(fs->nat, &nid);
        if (err)
            return err;
        allocated = true;
    }
    struct page *page = NULL;
    int err = pcache_get(fs->cache, PAGE_NODE, nid, PCACHE_NO_LOAD, &page);
    if (!err)
        err = nat_set(fs->nat, nid, ino, NEW_ADDR);
    if (err) {
        if (allocated)
            nat_release_nid(fs->nat, nid);
        if (page) {
            pcache_put(fs->cache, page);
            pcache_discard(fs->cache, PAGE_NODE, nid);
        }
        return err;
    }
    space_reserve_claimed(fs, claim, 1); /* a new node: NEW_ADDR until written */
    struct node_footer *f = &page_node(page)->footer;
    f->nid = htole32(nid);
    f->ino = htole32(ino);
    f->flag = htole32(ofs << OFFSET_BIT_SHIFT | (cold ? NODE_COLD_BIT : 0));
    pcache_mark_dirty(fs->cache, page);
    *out = page;
    return 0;
}

int node_free(struct f2fuse *fs, uint32_t nid, uint32_t ino)
{
    struct f2fs_nat_entry ne;
    int err = nat_get(fs->nat, nid, &ne);
    if (err)
        return err;
    uint32_t old = le32(ne.block_addr);
    if (old == NULL_ADDR)
        return fs_corrupt(fs, "freeing nid %u of inode %u, which is not in use", nid, ino);
    if (blkaddr_in_main(fs, old))
        seg_invalidate_block(fs->seg, old);
    else if (old == NEW_ADDR)
        seg_reserve(fs->seg, -1);
    pcache_discard(fs->cache, PAGE_NODE, nid);
    /* The nid may be handed out again before the next checkpoint: an inode given it must
     * not be fsync'ed by roll-forward, which would find the checkpoint's owner under it. */
    fsync_needs_checkpoint(fs, nid);
    return nat_set(fs->nat, nid, ino, NULL_ADDR);
}

/* Which log a node goes to (__get_segment_type_6): direct nodes (inodes included) of
 * directories are hot, of files warm; indirect nodes cold. */
static enum log_type node_log(const struct f2fs_node *node)
{
    uint32_t flag = le32(node->footer.flag);
    uint32_t ofs = flag >> OFFSET_BIT_SHIFT;
    bool direct = true;
    if (ofs == 3 || ofs == 4 + NIDS_PER_BLOCK || ofs == 5 + 2 * NIDS_PER_BLOCK)
        direct = false;
    else if (ofs >= 6 + 2 * NIDS_PER_BLOCK && ofs != XATTR_NODE_OFFSET &&
             (ofs - (6 + 2 * NIDS_PER_BLOCK)) % (NIDS_PER_BLOCK + 1) == 0)
        direct = false;
    if (!direct)
        return LOG_COLD_NODE;
    return (flag & NODE_COLD_BIT) ? LOG_WARM_NODE : LOG_HOT_NODE;
}

#define WRITEBACK_BATCH 1024

struct fsync_match {
    uint32_t ino;
    bool inode; /* the inode itself, or its direct nodes */
};

/* The nodes one fsync writes: the inode's direct nodes, then the inode itself (indirect
 * and xattr nodes wait for the next checkpoint; recovery rebuilds the tree above dnodes). */
static bool fsync_node(const struct page *page, void *arg)
{
    const struct f2fs_node *node = page->data;
    const struct fsync_match *m = arg;
    uint32_t ofs = le32(node->footer.flag) >> OFFSET_BIT_SHIFT;
    if (le32(node->footer.ino) != m->ino)
        return false;
    if (m->inode)
        return node->footer.nid == node->footer.ino;
    return ofs != 0 && ofs != XATTR_NODE_OFFSET && node_log(node) != LOG_COLD_NODE;
}

static int write_nodes(struct f2fuse *fs, bool (*match)(const struct page *, void *), void *arg,
                       uint32_t mark);

/* Writes every dirty node page to a newly allocated block of its log and points its NAT
 * entry there.  For a checkpoint (fsync_ino 0) it runs after data writeback (which dirties
 * nodes).  For the fsync fast path it writes one inode's direct nodes, then the inode, to
 * the warm node log after the checkpoint, chained through next_blkaddr; the inode carries
 * the fsync mark that roll-forward recovery looks for, and with dentry_mark (a file created
 * since the checkpoint) the dentry mark: recovery then adds its name (i_name) to its parent
 * (i_pino). */
int node_writeback(struct f2fuse *fs, uint32_t fsync_ino, bool dentry_mark)
{
    if (!fsync_ino)
        return write_nodes(fs, NULL, NULL, 0);
    struct fsync_match m = {fsync_ino, false};
    int err = write_nodes(fs, fsync_node, &m, 0);
    m.inode = true;
    return err ? err
               : write_nodes(fs, fsync_node, &m,
                             NODE_FSYNC_BIT | (dentry_mark ? NODE_DENT_BIT : 0));
}

/* mark: the footer flags (fsync, dentry) the written nodes carry. */
static int write_nodes(struct f2fuse *fs, bool (*match)(const struct page *, void *), void *arg,
                       uint32_t mark)
{
    struct page **pages = fs_malloc(fs, WRITEBACK_BATCH * sizeof(*pages));
    struct blk_req *reqs = fs_malloc(fs, WRITEBACK_BATCH * sizeof(*reqs));
    struct blk_req **rp = fs_malloc(fs, WRITEBACK_BATCH * sizeof(*rp));
    int err = pages && reqs && rp ? 0 : -ENOMEM;
    while (!err) {
        size_t n = pcache_collect_dirty_match(fs->cache, PAGE_NODE, match, arg, pages,
                                              WRITEBACK_BATCH);
        if (n == 0)
            break;
        size_t i;
        for (i = 0; i < n && !err; i++) {
            struct page *page = pages[i];
            struct f2fs_node *node = page_node(page);
            uint32_t nid = le32(node->footer.nid), ino = le32(node->footer.ino);
            struct f2fs_nat_entry ne;
            err = nat_get(fs->nat, nid, &ne);
            if (err)
                break;
            struct f2fs_summary sum = {.nid = htole32(nid)};
            enum log_type log = node_log(node);
            uint32_t blkaddr;
            uint32_t old = le32(ne.block_addr);
            err = seg_alloc_block(fs->seg, log, &sum,
                                  blkaddr_in_main(fs, old) || old == NEW_ADDR ? old : NULL_ADDR,
                                  &blkaddr);
            if (err)
                break;
            uint32_t flag = le32(node->footer.flag) & ~(NODE_FSYNC_BIT | NODE_DENT_BIT);
            node->footer.flag = htole32(flag | mark);
            node->footer.cp_ver = htole64(node_chain_version(fs));
            uint32_t next = seg_next_blkaddr(fs->seg, log);
            node->footer.next_blkaddr = htole32(next ? next : blkaddr + 1);
            if (nid == ino)
                inode_update_checksum(fs, page);
            err = nat_set(fs->nat, nid, ino, blkaddr);
            reqs[i] = (struct blk_req){.op = BLK_WRITE,
                                       .prio = fs->io_prio,
                                       .off = (uint64_t)blkaddr * F2FS_BLKSIZE,
                                       .len = F2FS_BLKSIZE,
                                       .buf = page->data};
            rp[i] = &reqs[i];
            page->blkaddr = blkaddr;
        }
        if (!err)
            err = blk_submit_wait(fs->dev, rp, (unsigned)i);
        for (size_t j = 0; j < n; j++) {
            if (!err)
                pcache_mark_clean(fs->cache, pages[j], pages[j]->blkaddr);
            pcache_put(fs->cache, pages[j]);
        }
        if (!err)
            atomic_fetch_add(&fs->node_pages_written, n);
    }
    free(pages);
    free(reqs);
    free(rp);
    return err;
}
