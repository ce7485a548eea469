/* One quota file in memory (quota_file.h).  The layout is the kernel's QFMT_VFS_V1
 * (fs/quota/quota_tree.c, quota_v2.c; f2fs-tools' fsck/quotaio_tree.c reads the same): the
 * tree is walked and every block number checked before use, so a hostile file can only be
 * refused, never followed outside the file or round in circles. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/quota_file.h"
#include "core/format.h"

#define PAGE_BLOCKS (4096u / QUOTA_BLKSIZE)
#define INFO_OFF    sizeof(struct quota_header)

static const uint32_t magics[QUOTA_TYPES] = {QUOTA_MAGIC_USR, QUOTA_MAGIC_GRP, QUOTA_MAGIC_PRJ};

static int refuse(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -EUCLEAN;
}

static uint8_t *blk(const struct qfile *qf, uint32_t b)
{
    return qf->data + (size_t)b * QUOTA_BLKSIZE;
}

static uint32_t get32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return le32(v);
}

static void put32(void *p, uint32_t v)
{
    v = htole32(v);
    memcpy(p, &v, sizeof(v));
}

static uint64_t get64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return le64(v);
}

static void put64(void *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, sizeof(v));
}

#define INFO_FIELD(f) (INFO_OFF + offsetof(struct quota_info, f))
#define HDR_FIELD(f)  offsetof(struct quota_data_header, f)

static uint32_t info_get(const struct qfile *qf, size_t field)
{
    return get32(qf->data + field);
}

static void touch(struct qfile *qf, uint32_t b)
{
    uint32_t page = b / PAGE_BLOCKS;
    if (!(qf->dirty[page / 8] & (1u << (page % 8)))) {
        qf->dirty[page / 8] |= (uint8_t)(1u << (page % 8));
        qf->dirty_pages++;
    }
}

static void info_set(struct qfile *qf, size_t field, uint32_t v)
{
    put32(qf->data + field, v);
    touch(qf, 0);
}

static uint32_t hdr_next(const struct qfile *qf, uint32_t b)
{
    return get32(blk(qf, b) + HDR_FIELD(next_free));
}

static uint32_t hdr_prev(const struct qfile *qf, uint32_t b)
{
    return get32(blk(qf, b) + HDR_FIELD(prev_free));
}

static uint16_t hdr_entries(const struct qfile *qf, uint32_t b)
{
    uint16_t v;
    memcpy(&v, blk(qf, b) + HDR_FIELD(entries), sizeof(v));
    return le16(v);
}

static void hdr_set_next(struct qfile *qf, uint32_t b, uint32_t v)
{
    put32(blk(qf, b) + HDR_FIELD(next_free), v);
    touch(qf, b);
}

static void hdr_set_prev(struct qfile *qf, uint32_t b, uint32_t v)
{
    put32(blk(qf, b) + HDR_FIELD(prev_free), v);
    touch(qf, b);
}

static void hdr_set_entries(struct qfile *qf, uint32_t b, uint16_t v)
{
    v = htole16(v);
    memcpy(blk(qf, b) + HDR_FIELD(entries), &v, sizeof(v));
    touch(qf, b);
}

static uint32_t ref_get(const struct qfile *qf, uint32_t b, uint32_t i)
{
    return get32(blk(qf, b) + 4 * (size_t)i);
}

static void ref_set(struct qfile *qf, uint32_t b, uint32_t i, uint32_t v)
{
    put32(blk(qf, b) + 4 * (size_t)i, v);
    touch(qf, b);
}

/* The slot of id in a tree block at depth (0 = root): one byte of the id, high first. */
static uint32_t id_index(uint32_t id, int depth)
{
    return (id >> (8 * (QUOTA_TREE_DEPTH - 1 - depth))) & (QUOTA_REFS_PER_BLK - 1);
}

static size_t dirty_bytes(uint32_t cap)
{
    uint32_t pages = (cap + PAGE_BLOCKS - 1) / PAGE_BLOCKS;
    return (pages + 7) / 8;
}

/* Room for at least want blocks (content and dirty bitmap). */
static int reserve(struct qfile *qf, uint32_t want)
{
    if (want <= qf->cap)
        return 0;
    uint32_t cap = qf->cap ? qf->cap : 8;
    while (cap < want)
        cap *= 2;
    cap = (cap + PAGE_BLOCKS - 1) / PAGE_BLOCKS * PAGE_BLOCKS; /* whole pages to copy out */
    uint8_t *data = realloc(qf->data, (size_t)cap * QUOTA_BLKSIZE);
    if (!data)
        return -ENOMEM;
    qf->data = data;
    memset(data + (size_t)qf->cap * QUOTA_BLKSIZE, 0, (size_t)(cap - qf->cap) * QUOTA_BLKSIZE);
    uint8_t *dirty = realloc(qf->dirty, dirty_bytes(cap));
    if (!dirty)
        return -ENOMEM;
    size_t old = qf->dirty ? dirty_bytes(qf->cap) : 0;
    memset(dirty + old, 0, dirty_bytes(cap) - old);
    qf->dirty = dirty;
    qf->cap = cap;
    return 0;
}

int qfile_open(struct qfile *qf, enum quota_type type, uint8_t *buf, size_t size, char *why,
               size_t why_len)
{
    memset(qf, 0, sizeof(*qf));
    qf->type = type;
    qf->data = buf;
    qf->cap = (uint32_t)(size / QUOTA_BLKSIZE);
    uint32_t file_blocks = qf->cap;
    if (size < 2 * QUOTA_BLKSIZE || size % QUOTA_BLKSIZE)
        return refuse(why, why_len,
                      "size %zu is not a whole number of 1 KiB quota blocks (2 or more)", size);
    qf->dirty = calloc(1, dirty_bytes(qf->cap));
    if (!qf->dirty || reserve(qf, qf->cap + 1))
        return -ENOMEM;
    buf = qf->data;
    if (get32(buf) != magics[type] || get32(buf + 4) != QUOTA_VERSION)
        return refuse(why, why_len, "magic 0x%08x version %u, expected 0x%08x version %u",
                      get32(buf), get32(buf + 4), magics[type], QUOTA_VERSION);
    uint32_t blocks = info_get(qf, INFO_FIELD(blocks));
    if (blocks <= QUOTA_TREE_ROOT || blocks > file_blocks)
        return refuse(why, why_len, "%u quota blocks in a file of %u", blocks, file_blocks);
    qf->blocks = blocks;
    uint32_t free_blk = info_get(qf, INFO_FIELD(free_blk));
    uint32_t free_entry = info_get(qf, INFO_FIELD(free_entry));
    if (free_blk >= blocks || free_entry >= blocks || free_blk == QUOTA_TREE_ROOT ||
        free_entry == QUOTA_TREE_ROOT)
        return refuse(why, why_len, "free lists start at blocks %u and %u of %u", free_blk,
                      free_entry, blocks);
    return 0;
}

void qfile_close(struct qfile *qf)
{
    free(qf->data);
    free(qf->dirty);
    memset(qf, 0, sizeof(*qf));
}

static bool entry_unused(const uint8_t *e)
{
    for (size_t i = 0; i < sizeof(struct quota_entry); i++)
        if (e[i])
            return false;
    return true;
}

static void entry_decode(const uint8_t *e, struct qentry *out)
{
    out->id = get32(e + offsetof(struct quota_entry, id));
    out->ihard = get64(e + offsetof(struct quota_entry, ihardlimit));
    out->isoft = get64(e + offsetof(struct quota_entry, isoftlimit));
    out->inodes = get64(e + offsetof(struct quota_entry, curinodes));
    out->bhard = get64(e + offsetof(struct quota_entry, bhardlimit));
    out->bsoft = get64(e + offsetof(struct quota_entry, bsoftlimit));
    out->space = get64(e + offsetof(struct quota_entry, curspace));
    out->btime = get64(e + offsetof(struct quota_entry, btime));
    out->itime = get64(e + offsetof(struct quota_entry, itime));
    /* the stored form of an entry that would be all zero */
    struct qentry zero_but_itime = {.itime = 1};
    if (!memcmp(out, &zero_but_itime, sizeof(*out)))
        out->itime = 0;
}

void qfile_put_entry(struct qfile *qf, uint32_t off, const struct qentry *e)
{
    uint8_t *p = qf->data + off;
    put32(p + offsetof(struct quota_entry, id), e->id);
    put32(p + offsetof(struct quota_entry, pad), 0);
    put64(p + offsetof(struct quota_entry, ihardlimit), e->ihard);
    put64(p + offsetof(struct quota_entry, isoftlimit), e->isoft);
    put64(p + offsetof(struct quota_entry, curinodes), e->inodes);
    put64(p + offsetof(struct quota_entry, bhardlimit), e->bhard);
    put64(p + offsetof(struct quota_entry, bsoftlimit), e->bsoft);
    put64(p + offsetof(struct quota_entry, curspace), e->space);
    put64(p + offsetof(struct quota_entry, btime), e->btime);
    put64(p + offsetof(struct quota_entry, itime), e->itime);
    if (entry_unused(p)) /* id 0 with nothing: would read as a free slot */
        put64(p + offsetof(struct quota_entry, itime), 1);
    touch(qf, off / QUOTA_BLKSIZE);
}

/* ---- checking a file ---- */

enum role { ROLE_NONE, ROLE_META, ROLE_INDEX, ROLE_DATA, ROLE_FREE, ROLE_FREE_ENTRY };

struct scan {
    struct qfile *qf;
    uint8_t *role; /* enum role per block */
    char *why;
    size_t why_len;
};

/* The data block the tree leads id to, 0 when it has no entry, or -EUCLEAN. */
static int64_t leaf_of(const struct qfile *qf, uint32_t id)
{
    uint32_t b = QUOTA_TREE_ROOT;
    for (int depth = 0; depth < QUOTA_TREE_DEPTH; depth++) {
        uint32_t next = ref_get(qf, b, id_index(id, depth));
        if (next == 0)
            return 0;
        if (next <= QUOTA_TREE_ROOT || next >= qf->blocks)
            return -EUCLEAN;
        b = next;
    }
    return b;
}

static int scan_tree(struct scan *s, uint32_t b, int depth)
{
    for (uint32_t i = 0; i < QUOTA_REFS_PER_BLK; i++) {
        uint32_t r = ref_get(s->qf, b, i);
        if (r == 0)
            continue;
        if (r <= QUOTA_TREE_ROOT || r >= s->qf->blocks)
            return refuse(s->why, s->why_len, "tree block %u refers to block %u (of %u)", b, r,
                          s->qf->blocks);
        bool leaf = depth == QUOTA_TREE_DEPTH - 1;
        enum role want = leaf ? ROLE_DATA : ROLE_INDEX;
        /* data blocks are shared by ids; a tree block has one parent */
        if (s->role[r] != ROLE_NONE && !(leaf && s->role[r] == ROLE_DATA))
            return refuse(s->why, s->why_len, "block %u is reached twice in the tree", r);
        s->role[r] = (uint8_t)want;
        if (!leaf) {
            int err = scan_tree(s, r, depth + 1);
            if (err)
                return err;
        }
    }
    return 0;
}

static int scan_data(struct scan *s, uint32_t b, qfile_entry_fn fn, void *arg)
{
    const uint8_t *p = blk(s->qf, b) + sizeof(struct quota_data_header);
    unsigned used = 0;
    for (uint32_t i = 0; i < QUOTA_ENTRIES_PER_BLK; i++, p += sizeof(struct quota_entry)) {
        if (entry_unused(p))
            continue;
        used++;
        struct qentry e;
        entry_decode(p, &e);
        /* the kernel finds an entry only through its id's path */
        if (leaf_of(s->qf, e.id) != b)
            return refuse(s->why, s->why_len,
                          "the entry of id %u in block %u is not where its id leads", e.id, b);
        int err = fn(arg, &e, (uint32_t)(p - s->qf->data));
        if (err == -EUCLEAN)
            return refuse(s->why, s->why_len, "id %u has two entries", e.id);
        if (err)
            return err;
    }
    if (used != hdr_entries(s->qf, b))
        return refuse(s->why, s->why_len, "data block %u holds %u entries, its header says %u", b,
                      used, hdr_entries(s->qf, b));
    return 0;
}

/* The free blocks' list and the list of data blocks with a free entry: every link inside
 * the file, no loop, each block of the right kind; a full block in the second would make
 * an insert fail. */
static int scan_lists(struct scan *s)
{
    uint32_t steps = 0;
    for (uint32_t b = info_get(s->qf, INFO_FIELD(free_blk)); b; b = hdr_next(s->qf, b)) {
        if (b <= QUOTA_TREE_ROOT || b >= s->qf->blocks || s->role[b] != ROLE_NONE ||
            ++steps > s->qf->blocks)
            return refuse(s->why, s->why_len, "the free block list is broken at block %u", b);
        s->role[b] = ROLE_FREE;
    }
    uint32_t prev = 0;
    for (uint32_t b = info_get(s->qf, INFO_FIELD(free_entry)); b;
         prev = b, b = hdr_next(s->qf, b)) {
        if (b <= QUOTA_TREE_ROOT || b >= s->qf->blocks || s->role[b] != ROLE_DATA ||
            hdr_prev(s->qf, b) != prev || hdr_entries(s->qf, b) >= QUOTA_ENTRIES_PER_BLK)
            return refuse(s->why, s->why_len,
                          "the list of blocks with free entries is broken at %u", b);
        s->role[b] = ROLE_FREE_ENTRY;
    }
    return 0;
}

int qfile_scan(struct qfile *qf, qfile_entry_fn fn, void *arg, char *why, size_t why_len)
{
    struct scan s = {.qf = qf, .role = calloc(qf->blocks, 1), .why = why, .why_len = why_len};
    if (!s.role)
        return -ENOMEM;
    s.role[0] = s.role[QUOTA_TREE_ROOT] = ROLE_META;
    int err = scan_tree(&s, QUOTA_TREE_ROOT, 0);
    for (uint32_t b = 0; !err && b < qf->blocks; b++) {
        if (s.role[b] == ROLE_DATA) {
            if (hdr_entries(qf, b) == 0 || hdr_entries(qf, b) > QUOTA_ENTRIES_PER_BLK)
                err = refuse(why, why_len, "data block %u claims %u entries", b,
                             hdr_entries(qf, b));
            else
                err = scan_data(&s, b, fn, arg);
        }
    }
    if (!err)
        err = scan_lists(&s);
    free(s.role);
    return err;
}

/* ---- changing a file (quota_tree.c's algorithms) ---- */

/* A zeroed block: the head of the free list, else one more at the end. */
static uint32_t take_free_block(struct qfile *qf)
{
    uint32_t b = info_get(qf, INFO_FIELD(free_blk));
    if (b)
        info_set(qf, INFO_FIELD(free_blk), hdr_next(qf, b));
    else
        b = qf->blocks++;
    info_set(qf, INFO_FIELD(blocks), qf->blocks);
    memset(blk(qf, b), 0, QUOTA_BLKSIZE);
    touch(qf, b);
    return b;
}

static void give_free_block(struct qfile *qf, uint32_t b)
{
    memset(blk(qf, b), 0, QUOTA_BLKSIZE);
    hdr_set_next(qf, b, info_get(qf, INFO_FIELD(free_blk)));
    info_set(qf, INFO_FIELD(free_blk), b);
}

static bool in_free_entry_list(const struct qfile *qf, uint32_t b)
{
    uint32_t steps = 0;
    for (uint32_t x = info_get(qf, INFO_FIELD(free_entry)); x && steps <= qf->blocks;
         x = hdr_next(qf, x), steps++)
        if (x == b)
            return true;
    return false;
}

static void unlink_free_entry(struct qfile *qf, uint32_t b)
{
    if (!in_free_entry_list(qf, b))
        return;
    uint32_t next = hdr_next(qf, b), prev = hdr_prev(qf, b);
    if (next)
        hdr_set_prev(qf, next, prev);
    if (prev)
        hdr_set_next(qf, prev, next);
    else
        info_set(qf, INFO_FIELD(free_entry), next);
    hdr_set_next(qf, b, 0);
    hdr_set_prev(qf, b, 0);
}

static void link_free_entry(struct qfile *qf, uint32_t b)
{
    if (in_free_entry_list(qf, b))
        return;
    uint32_t head = info_get(qf, INFO_FIELD(free_entry));
    hdr_set_next(qf, b, head);
    hdr_set_prev(qf, b, 0);
    if (head)
        hdr_set_prev(qf, head, b);
    info_set(qf, INFO_FIELD(free_entry), b);
}

/* A free slot in a data block with room (a new one when none has), counted as used. */
static int find_free_slot(struct qfile *qf, uint32_t *b_out, uint32_t *off)
{
    uint32_t b = info_get(qf, INFO_FIELD(free_entry));
    if (b && (b >= qf->blocks || hdr_entries(qf, b) >= QUOTA_ENTRIES_PER_BLK))
        return -EUCLEAN;
    if (!b) {
        b = take_free_block(qf);
        info_set(qf, INFO_FIELD(free_entry), b);
    }
    uint16_t entries = (uint16_t)(hdr_entries(qf, b) + 1);
    if (entries >= QUOTA_ENTRIES_PER_BLK)
        unlink_free_entry(qf, b);
    uint8_t *p = blk(qf, b) + sizeof(struct quota_data_header);
    uint32_t i = 0;
    while (i < QUOTA_ENTRIES_PER_BLK && !entry_unused(p + i * sizeof(struct quota_entry)))
        i++;
    if (i == QUOTA_ENTRIES_PER_BLK)
        return -EUCLEAN;
    hdr_set_entries(qf, b, entries);
    *b_out = b;
    *off = b * QUOTA_BLKSIZE + (uint32_t)sizeof(struct quota_data_header) +
           i * (uint32_t)sizeof(struct quota_entry);
    return 0;
}

int qfile_insert(struct qfile *qf, uint32_t id, uint32_t *off)
{
    /* at most three tree blocks and a data block more: nothing fails half-way */
    int err = reserve(qf, qf->blocks + QUOTA_TREE_DEPTH);
    if (err)
        return err;
    uint32_t b = QUOTA_TREE_ROOT;
    for (int depth = 0; depth < QUOTA_TREE_DEPTH - 1; depth++) {
        uint32_t next = ref_get(qf, b, id_index(id, depth));
        if (next == 0) {
            next = take_free_block(qf);
            ref_set(qf, b, id_index(id, depth), next);
        } else if (next <= QUOTA_TREE_ROOT || next >= qf->blocks) {
            return -EUCLEAN;
        }
        b = next;
    }
    if (ref_get(qf, b, id_index(id, QUOTA_TREE_DEPTH - 1)))
        return -EEXIST;
    uint32_t data;
    err = find_free_slot(qf, &data, off);
    if (!err)
        ref_set(qf, b, id_index(id, QUOTA_TREE_DEPTH - 1), data);
    return err;
}

static bool block_empty(const struct qfile *qf, uint32_t b)
{
    for (uint32_t i = 0; i < QUOTA_REFS_PER_BLK; i++)
        if (ref_get(qf, b, i))
            return false;
    return true;
}

int qfile_delete(struct qfile *qf, uint32_t id, uint32_t off)
{
    uint32_t path[QUOTA_TREE_DEPTH + 1];
    path[0] = QUOTA_TREE_ROOT;
    for (int depth = 0; depth < QUOTA_TREE_DEPTH; depth++) {
        uint32_t next = ref_get(qf, path[depth], id_index(id, depth));
        if (next <= QUOTA_TREE_ROOT || next >= qf->blocks)
            return -EUCLEAN;
        path[depth + 1] = next;
    }
    uint32_t data = path[QUOTA_TREE_DEPTH];
    if (off / QUOTA_BLKSIZE != data || hdr_entries(qf, data) == 0)
        return -EUCLEAN;
    uint16_t entries = (uint16_t)(hdr_entries(qf, data) - 1);
    memset(qf->data + off, 0, sizeof(struct quota_entry));
    hdr_set_entries(qf, data, entries);
    if (entries == 0) {
        unlink_free_entry(qf, data);
        give_free_block(qf, data);
    } else if (entries == QUOTA_ENTRIES_PER_BLK - 1) {
        link_free_entry(qf, data); /* it was full */
    }
    /* the reference to id goes; tree blocks left empty are freed, the root never */
    for (int depth = QUOTA_TREE_DEPTH - 1; depth >= 0; depth--) {
        ref_set(qf, path[depth], id_index(id, depth), 0);
        if (depth == 0 || !block_empty(qf, path[depth]))
            break;
        give_free_block(qf, path[depth]);
    }
    return 0;
}

uint32_t qfile_bgrace(const struct qfile *qf)
{
    return info_get(qf, INFO_FIELD(bgrace));
}

uint32_t qfile_igrace(const struct qfile *qf)
{
    return info_get(qf, INFO_FIELD(igrace));
}

bool qfile_next_dirty(const struct qfile *qf, uint32_t *page)
{
    uint32_t pages = (qf->blocks + PAGE_BLOCKS - 1) / PAGE_BLOCKS;
    for (uint32_t p = *page == UINT32_MAX ? 0 : *page + 1; p < pages; p++) {
        if (qf->dirty[p / 8] & (1u << (p % 8))) {
            *page = p;
            return true;
        }
    }
    return false;
}

void qfile_clean(struct qfile *qf)
{
    if (qf->dirty)
        memset(qf->dirty, 0, dirty_bytes(qf->cap));
    qf->dirty_pages = 0;
}

int qfile_create(struct qfile *qf, enum quota_type type)
{
    memset(qf, 0, sizeof(*qf));
    qf->type = type;
    int err = reserve(qf, QUOTA_TREE_ROOT + 1);
    if (err) {
        qfile_close(qf);
        return err;
    }
    qf->blocks = QUOTA_TREE_ROOT + 1;
    put32(qf->data, magics[type]);
    put32(qf->data + 4, QUOTA_VERSION);
    info_set(qf, INFO_FIELD(bgrace), QUOTA_DEF_GRACE);
    info_set(qf, INFO_FIELD(igrace), QUOTA_DEF_GRACE);
    info_set(qf, INFO_FIELD(blocks), qf->blocks);
    touch(qf, QUOTA_TREE_ROOT);
    return 0;
}
