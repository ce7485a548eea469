/* Roll-forward recovery (the kernel's recovery.c, f2fs_recover_fsync_data): nodes that
 * fsync wrote after the last checkpoint form a chain in the warm node log — from the
 * checkpoint's write position of that log, through each footer's next_blkaddr, for as long
 * as footers carry the checkpoint's version (node_chain_version_matches).  Inodes with an
 * fsync mark in the chain are replayed up to their last marked node: the inode's
 * attributes and every data pointer that differs from the checkpointed tree.  Replayed data
 * is copied into the page cache and a checkpoint then writes it out of place.
 *
 * A regular file created after the checkpoint comes back through the dentry mark on its
 * fsync'ed inode (the kernel's recover_dentry): the inode is rebuilt from that block and
 * its name (i_name) added to its parent (i_pino), before anything is replayed.  The fsync
 * side only sets the mark when the parent is in the checkpoint and lost no name since, so
 * adding the name never has to displace another entry.
 *
 * Until that checkpoint commits, the chain and the data it points at must survive a second
 * crash: every log first moves to a fresh segment, and the segments holding them are kept
 * out of allocation. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/recovery.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/dir.h"
#include "core/extent.h"
#include "core/fileattr.h"
#include "core/fscrypt.h"
#include "core/inode.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/quota.h"
#include "core/segment.h"
#include "util/clock.h"
#include "util/log.h"

struct chain_node {
    uint32_t blkaddr;
    uint32_t nid, ino, ofs;
    bool fsync, dentry;
};

struct chain {
    struct chain_node *nodes;
    size_t n, cap;
};

static int chain_add(struct chain *c, struct chain_node node)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct chain_node *n = realloc(c->nodes, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        c->nodes = n;
        c->cap = cap;
    }
    c->nodes[c->n++] = node;
    return 0;
}

/* Walks the chain; stops at a footer of another version, an address outside the main
 * area, or after as many blocks as the main area has (a loop). */
static int chain_read(struct f2fuse *fs, struct f2fs_node *buf, struct chain *c)
{
    const struct f2fs_checkpoint *cp = fs->cp;
    uint32_t blk = fs->main_blkaddr +
                   le32(cp->cur_node_segno[LOG_WARM_NODE - LOG_HOT_NODE]) * F2FS_BLOCKS_PER_SEG +
                   le16(cp->cur_node_blkoff[LOG_WARM_NODE - LOG_HOT_NODE]);
    uint64_t limit = (uint64_t)fs->main_blkend - fs->main_blkaddr;
    for (uint64_t hops = 0; hops < limit && blkaddr_in_main(fs, blk); hops++) {
        int err = blk_read(fs->dev, (uint64_t)blk * F2FS_BLKSIZE, buf, F2FS_BLKSIZE);
        if (err)
            return err;
        if (!node_chain_version_matches(fs, le64(buf->footer.cp_ver)))
            break;
        uint32_t flag = le32(buf->footer.flag);
        struct chain_node node = {.blkaddr = blk,
                                  .nid = le32(buf->footer.nid),
                                  .ino = le32(buf->footer.ino),
                                  .ofs = flag >> OFFSET_BIT_SHIFT,
                                  .fsync = flag & NODE_FSYNC_BIT,
                                  .dentry = flag & NODE_DENT_BIT};
        if (!nid_valid(fs, node.nid) || !nid_valid(fs, node.ino))
            break;
        err = chain_add(c, node);
        if (err)
            return err;
        blk = le32(buf->footer.next_blkaddr);
    }
    return 0;
}

/* First file block a direct node at footer offset ofs maps, or UINT64_MAX for nodes that
 * map none (indirect nodes, xattr nodes). */
uint64_t dnode_first_block(const struct inode_info *ii, uint32_t ofs)
{
    const uint64_t d = ii->addrs_per_block, n = NIDS_PER_BLOCK, a = ii->addrs_per_inode;
    if (ofs == 1 || ofs == 2)
        return a + (ofs - 1) * d;
    if (ofs == 3 || ofs == 4 + n || ofs == 5 + 2 * n || ofs == XATTR_NODE_OFFSET || ofs == 0)
        return UINT64_MAX;
    if (ofs < 4 + n)
        return a + 2 * d + (ofs - 4) * d;
    if (ofs < 5 + 2 * n)
        return a + 2 * d + n * d + (ofs - 5 - n) * d;
    uint64_t r = ofs - (6 + 2 * n), j = r / (n + 1), m = r % (n + 1);
    if (m == 0)
        return UINT64_MAX;
    return a + 2 * d + 2 * n * d + (j * n + m - 1) * d;
}

/* Makes file block index hold what the fsync'ed pointer addr held: its data copied into
 * a dirty page, or a hole. */
static int replay_pointer(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                          uint64_t index, uint32_t addr)
{
    if (addr == NEW_ADDR)
        addr = NULL_ADDR;
    uint32_t cur = NULL_ADDR;
    struct dnode dn;
    int err = dnode_get(fs, ii, ipage, index, false, &dn);
    if (!err) {
        cur = le32(*dn.addr);
        dnode_put(fs, ipage, &dn);
    } else if (err != -ENOENT) {
        return err;
    }
    if (cur == addr)
        return 0;
    if (addr == NULL_ADDR)
        return data_punch_block(fs, ii, ipage, index);
    if (!blkaddr_in_main(fs, addr))
        return fs_corrupt(fs, "recovery: inode %u block %llu points outside the main area", ii->ino,
                          (unsigned long long)index);
    struct page *page = NULL;
    err = data_get_page(fs, ii, ipage, index, false, &page);
    if (!err)
        err = blk_read(fs->dev, (uint64_t)addr * F2FS_BLKSIZE, page->data, F2FS_BLKSIZE);
    if (err) {
        pcache_put(fs->cache, page);
        return err;
    }
    pcache_mark_dirty(fs->cache, page);
    pcache_put(fs->cache, page);
    return 0;
}

/* A compressed file's nodes in the chain: the kernel never writes them (its fsync of a
 * compressed file checkpoints, CP_COMPRESSED, and its recovery skips COMPRESS_ADDR
 * pointers), nor does f2fuse; replaying them pointer by pointer would break clusters. */
static int refuse_compressed(uint32_t ino)
{
    log_err("recovery: inode %u is a compressed file with nodes written by fsync after the "
            "checkpoint; roll-forward recovery of compressed files is not supported (neither "
            "the kernel nor f2fuse writes them)",
            ino);
    return -EOPNOTSUPP;
}

/* The attributes and direct pointers of a fsync'ed inode block. */
static int replay_inode(struct f2fuse *fs, const struct f2fs_node *node, uint32_t ino)
{
    struct page *ipage;
    struct inode_info ii;
    int err = inode_get(fs, ino, &ipage, &ii);
    if (err)
        return err;
    if (compress_file(&ii) ||
        (S_ISREG(le16(node->i.i_mode)) && (le32(node->i.i_flags) & F2FS_COMPR_FL) &&
         (fs->features & F2FS_FEATURE_COMPRESSION))) {
        pcache_put(fs->cache, ipage);
        return refuse_compressed(ino);
    }
    const struct f2fs_inode *from = &node->i;
    struct f2fs_inode *to = &page_node(ipage)->i;
    uint64_t size = le64(from->i_size);
    if (size < ii.size)
        err = data_truncate(fs, &ii, ipage, size);
    /* A file inline at the checkpoint and in blocks by the fsync: move it out first. */
    if (!err && !(from->i_inline & F2FS_INLINE_DATA) && (ii.inline_flags & F2FS_INLINE_DATA))
        err = data_convert_inline(fs, &ii, ipage);
    if (!err) {
        to->i_mode = from->i_mode;
        to->i_uid = from->i_uid;
        to->i_gid = from->i_gid;
        to->i_advise = from->i_advise;
        to->i_flags = from->i_flags;
        if (fileattr_projid(fs, to) != fileattr_projid(fs, from)) /* the same slot in both */
            to->i_projid = from->i_projid;
        to->i_atime = from->i_atime;
        to->i_mtime = from->i_mtime;
        to->i_ctime = from->i_ctime;
        to->i_atime_nsec = from->i_atime_nsec;
        to->i_mtime_nsec = from->i_mtime_nsec;
        to->i_ctime_nsec = from->i_ctime_nsec;
        to->i_size = from->i_size;
        ii.size = size;
        pcache_mark_dirty(fs->cache, ipage);
    }
    if (!err && (from->i_inline & F2FS_INLINE_DATA)) {
        /* Still inline: the data lives in the inode block itself. */
        if (ii.inline_flags & F2FS_INLINE_DATA) {
            memcpy((uint8_t *)ipage->data + inline_data_offset(&ii),
                   (const uint8_t *)node + inline_data_offset(&ii), inline_data_size(&ii));
            to->i_inline = (uint8_t)((to->i_inline & ~F2FS_DATA_EXIST) |
                                     (from->i_inline & F2FS_DATA_EXIST));
        }
    } else if (!err) {
        for (uint32_t i = 0; i < ii.addrs_per_inode && !err; i++) {
            uint32_t addr = le32(from->i_addr[ii.extra_isize / 4 + i]);
            if (addr || (uint64_t)i * F2FS_BLKSIZE < ii.size)
                err = replay_pointer(fs, &ii, ipage, i, addr);
        }
    }
    pcache_put(fs->cache, ipage);
    return err;
}

static int replay_dnode(struct f2fuse *fs, const struct f2fs_node *node, uint32_t ino, uint32_t ofs)
{
    struct page *ipage;
    struct inode_info ii;
    int err = inode_get(fs, ino, &ipage, &ii);
    if (err)
        return err;
    if (compress_file(&ii)) {
        pcache_put(fs->cache, ipage);
        return refuse_compressed(ino);
    }
    uint64_t first = dnode_first_block(&ii, ofs);
    for (uint32_t k = 0; first != UINT64_MAX && k < ii.addrs_per_block && !err; k++) {
        uint32_t addr = le32(node->addr[k]);
        if (addr || (first + k) * F2FS_BLKSIZE < ii.size)
            err = replay_pointer(fs, &ii, ipage, first + k, addr);
    }
    pcache_put(fs->cache, ipage);
    return err;
}

/* Rebuilds inode ino, created after the checkpoint, from its fsync'ed block node (without
 * data pointers, child nodes or xattr node: replay fills the pointers in) and adds its name
 * to its parent. */
static int recover_new_inode(struct f2fuse *fs, const struct f2fs_node *node, uint32_t ino)
{
    const struct f2fs_inode *from = &node->i;
    uint32_t parent = le32(from->i_pino), namelen = le32(from->i_namelen);
    if (!S_ISREG(le16(from->i_mode)) || !nid_valid(fs, parent) || namelen == 0 ||
        namelen > F2FS_NAME_LEN)
        return fs_corrupt(fs,
                          "recovery: inode %u carries the dentry mark but no usable name "
                          "(mode %#o, parent %u, name length %u)",
                          ino, le16(from->i_mode), parent, namelen);
    const char *name = (const char *)from->i_name;
    struct page *dpage, *ipage = NULL;
    struct inode_info dir, ii;
    int err = inode_get(fs, parent, &dpage, &dir);
    if (err) {
        log_err("recovery: the parent %u of fsync'ed new inode %u cannot be read: %s", parent, ino,
                strerror(-err));
        return err;
    }
    uint32_t existing;
    if (!S_ISDIR(dir.mode)) {
        err = fs_corrupt(fs, "recovery: the parent %u of inode %u is not a directory", parent, ino);
    } else {
        err = dir_lookup_recorded(fs, &dir, dpage, from, &existing);
        if (err == 0) {
            /* f2fuse never writes this; the kernel would unlink the other inode. */
            bool cipher = fscrypt_encrypted(&dir); /* no name to print */
            log_err("recovery: the name of fsync'ed new inode %u (%.*s) is taken by inode %u "
                    "in directory %u; f2fuse cannot replay that (mount the image with the "
                    "kernel first)",
                    ino, cipher ? 9 : (int)namelen, cipher ? "encrypted" : name, existing, parent);
            err = -EOPNOTSUPP;
        } else if (err == -ENOENT) {
            err = node_new(fs, ino, ino, 0, true, NULL, &ipage);
        }
    }
    if (!err) {
        struct f2fs_inode *to = &page_node(ipage)->i;
        *to = *from;
        to->i_links = htole32(1);
        to->i_blocks = htole64(1);
        to->i_xattr_nid = 0;
        memset(to->i_nid, 0, sizeof(to->i_nid));
        extent_clear(to); /* replay copies the data into new blocks */
        err = inode_decode(fs, ipage, ino, &ii);
        if (!err && !(ii.inline_flags & F2FS_INLINE_DATA)) {
            /* Pointers and size come from replay_inode, which reads this same block. */
            memset(&to->i_addr[ii.extra_isize / 4], 0, ii.addrs_per_inode * sizeof(uint32_t));
            to->i_size = 0;
            err = inode_decode(fs, ipage, ino, &ii);
        }
    }
    if (!err)
        err = dir_add_recorded(fs, &dir, dpage, from, ino, le16(from->i_mode));
    if (!err) {
        pcache_mark_dirty(fs->cache, ipage);
        pcache_mark_dirty(fs->cache, dpage);
        atomic_fetch_add(&fs->recovered_names, 1);
    }
    pcache_put(fs->cache, ipage);
    pcache_put(fs->cache, dpage);
    return err;
}

static int read_chain_node(struct f2fuse *fs, const struct chain_node *node, struct f2fs_node *buf)
{
    return blk_read(fs->dev, (uint64_t)node->blkaddr * F2FS_BLKSIZE, buf, F2FS_BLKSIZE);
}

/* Keeps out of allocation what a second recovery would read again: the chain up to its
 * last node that is replayed (the walk follows every link before it) and the data blocks
 * that replayed nodes point to.  last[i] is SIZE_MAX for a node not replayed.  A node that
 * cannot be read fails the recovery (and the mount): its data blocks would not be held. */
static int hold_chain(struct f2fuse *fs, const struct chain *c, const size_t *last,
                      struct f2fs_node *buf)
{
    size_t end = c->n;
    while (end > 0 && last[end - 1] == SIZE_MAX)
        end--;
    for (size_t i = 0; i < end; i++) {
        seg_hold(fs->seg, c->nodes[i].blkaddr);
        if (last[i] == SIZE_MAX)
            continue;
        int err = read_chain_node(fs, &c->nodes[i], buf);
        if (err)
            return err;
        const uint32_t *addrs = (const uint32_t *)((const uint8_t *)buf +
                                                   (c->nodes[i].ofs == 0
                                                        ? offsetof(struct f2fs_inode, i_addr)
                                                        : 0));
        size_t count = c->nodes[i].ofs == 0 ? DEF_ADDRS_PER_INODE : ADDRS_PER_BLOCK;
        for (size_t k = 0; k < count; k++) {
            uint32_t a = le32(addrs[k]);
            if (blkaddr_in_main(fs, a))
                seg_hold(fs->seg, a);
        }
    }
    return 0;
}

/* The last fsync-marked node of each inode bounds what is replayed of it: walking the
 * chain backwards, remember per inode the first mark met.  last[i] becomes the index of
 * that mark for node i's inode, SIZE_MAX when it has none; *marked counts the inodes with
 * one. */
static int find_last_marks(const struct chain *c, size_t *last, size_t *marked)
{
    size_t slots = 16;
    while (slots < 2 * c->n)
        slots <<= 1;
    struct mark {
        uint32_t ino;
        size_t at;
    } *marks = calloc(slots, sizeof(*marks));
    if (!marks)
        return -ENOMEM;
    *marked = 0;
    for (size_t i = c->n; i-- > 0;) {
        uint32_t ino = c->nodes[i].ino;
        size_t h = (ino * 0x9E3779B1u) & (slots - 1);
        while (marks[h].ino && marks[h].ino != ino)
            h = (h + 1) & (slots - 1);
        if (c->nodes[i].fsync && !marks[h].ino) {
            marks[h] = (struct mark){ino, i};
            (*marked)++;
        }
        last[i] = marks[h].ino ? marks[h].at : SIZE_MAX;
    }
    free(marks);
    return 0;
}

/* New inodes first: their direct nodes come before them in the chain. */
static int recover_new_inodes(struct f2fuse *fs, const struct chain *c, const size_t *last,
                              struct f2fs_node *buf)
{
    int err = 0;
    for (size_t i = 0; !err && i < c->n; i++) {
        if (last[i] == SIZE_MAX || c->nodes[i].ofs != 0 || !c->nodes[i].dentry)
            continue;
        struct f2fs_nat_entry ne;
        err = nat_get(fs->nat, c->nodes[i].ino, &ne);
        if (err || le32(ne.block_addr) != NULL_ADDR)
            continue; /* in the checkpoint, or already rebuilt from an earlier block */
        err = read_chain_node(fs, &c->nodes[i], buf);
        if (!err)
            err = recover_new_inode(fs, buf, c->nodes[i].ino);
    }
    return err;
}

static bool is_orphan(const uint32_t *orphans, uint32_t norphans, uint32_t ino)
{
    bool orphan = false;
    for (uint32_t k = 0; k < norphans && !orphan; k++)
        orphan = orphans[k] == ino;
    return orphan;
}

/* Replays every node up to its inode's last mark, in chain order. */
static int replay_chain(struct f2fuse *fs, const struct chain *c, const size_t *last,
                        const uint32_t *orphans, uint32_t norphans, struct f2fs_node *buf)
{
    int err = 0;
    uint32_t replayed_ino = 0;
    for (size_t i = 0; !err && i < c->n; i++) {
        if (last[i] == SIZE_MAX)
            continue; /* not (or no longer) part of an fsync */
        if (is_orphan(orphans, norphans, c->nodes[i].ino))
            continue; /* unlinked and now freed: nothing of it is to be replayed */
        struct f2fs_nat_entry ne;
        err = nat_get(fs->nat, c->nodes[i].ino, &ne);
        if (!err && le32(ne.block_addr) == NULL_ADDR) {
            /* Without the dentry mark there is no name to give it. */
            log_err("recovery: inode %u was fsync'ed but is neither in the checkpoint nor "
                    "named by a dentry mark; f2fuse cannot replay it (mount the image with "
                    "the kernel first)",
                    c->nodes[i].ino);
            err = -EOPNOTSUPP;
            break;
        }
        if (!err)
            err = read_chain_node(fs, &c->nodes[i], buf);
        if (err)
            break;
        if (c->nodes[i].ofs == 0)
            err = replay_inode(fs, buf, c->nodes[i].ino);
        else
            err = replay_dnode(fs, buf, c->nodes[i].ino, c->nodes[i].ofs);
        if (c->nodes[i].ino != replayed_ino) {
            replayed_ino = c->nodes[i].ino;
            atomic_fetch_add(&fs->recovered_inodes, 1);
        }
    }
    return err;
}

static void log_recovery_end(struct f2fuse *fs, int err, uint64_t began_ns)
{
    if (err == -ENOSPC) {
        log_err("roll-forward recovery failed: %s: too few free segments outside the fsync "
                "chain and its data for the checkpoint that replays it (nothing was "
                "committed)",
                strerror(-err));
    } else if (err) {
        log_err("roll-forward recovery failed: %s", strerror(-err));
    } else {
        /* A recovery of a large image can take a while: say what it did and how long. */
        double secs = (double)(clock_mono_ns() - began_ns) / 1e9;
        log_info("roll-forward recovery: %llu inode(s) replayed in %.2f s",
                 (unsigned long long)atomic_load(&fs->recovered_inodes), secs);
    }
}

int recovery_run(struct f2fuse *fs, const uint32_t *orphans, uint32_t norphans)
{
    struct f2fs_node *buf = blk_alloc_buf(F2FS_BLKSIZE);
    struct chain c = {0};
    int err = buf ? chain_read(fs, buf, &c) : -ENOMEM;
    size_t *last = err ? NULL : calloc(c.n + 1, sizeof(*last));
    if (!err && !last)
        err = -ENOMEM;
    size_t marked = 0;
    if (!err)
        err = find_last_marks(&c, last, &marked);
    if (!err && marked > 0) {
        log_info("roll-forward recovery: %zu node(s) written by fsync after the last "
                 "checkpoint",
                 c.n);
        uint64_t began_ns = clock_mono_ns();
        err = hold_chain(fs, &c, last, buf);
        if (!err)
            err = seg_new_segments(fs->seg);
        if (!err)
            err = recover_new_inodes(fs, &c, last, buf);
        if (!err)
            err = replay_chain(fs, &c, last, orphans, norphans, buf);
        /* Replay changed owners, blocks and inodes the quota files never saw: their usage
         * is counted afresh, exact for the checkpoint about to commit it. */
        if (!err)
            err = quota_recount(fs);
        if (!err)
            err = checkpoint_write(fs, false, CP_ALL_DATA, NULL, 0);
        seg_release_holds(fs->seg);
        log_recovery_end(fs, err, began_ns);
    }
    free(last);
    free(c.nodes);
    free(buf);
    return err;
}

/* ---- what a recovery would find (f2fuse info) ---- */

int recovery_pending(struct f2fuse *fs, uint32_t *nodes)
{
    struct f2fs_node *buf = blk_alloc_buf(F2FS_BLKSIZE);
    struct chain c = {0};
    int err = buf ? chain_read(fs, buf, &c) : -ENOMEM;
    bool marked = false;
    for (size_t i = 0; !err && i < c.n; i++)
        marked |= c.nodes[i].fsync;
    *nodes = marked ? (uint32_t)c.n : 0; /* without a mark, recovery replays nothing */
    free(c.nodes);
    free(buf);
    return err;
}
