/* Directories: multi-level hash tables of dentry blocks (or one inline dentry area in the
 * inode), looked up by name hash and listed in on-disk order. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dir.h"
#include "core/context.h"
#include "core/data.h"
#include "core/dir_index.h"
#include "core/dirname.h"
#include "core/fscrypt_keys.h"
#include "core/inode.h"
#include "core/node.h"
#include "core/space.h"

/* A view of one dentry container: a dentry block or an inode's inline dentry area. */
struct dentry_view {
    uint8_t *bitmap;
    struct f2fs_dir_entry *dentry;
    uint8_t (*filename)[F2FS_SLOT_LEN];
    uint32_t slots;
};

static void view_block(struct dentry_view *v, void *blk)
{
    struct f2fs_dentry_block *b = blk;
    v->bitmap = b->dentry_bitmap;
    v->dentry = b->dentry;
    v->filename = b->filename;
    v->slots = NR_DENTRY_IN_BLOCK;
}

/* Inline layout: bitmap | reserved | dentries | names, sized from MAX_INLINE_DATA; base is
 * the start of the inline area (in the inode page, or a copy of it). */
static void view_inline_area(struct dentry_view *v, const struct inode_info *dir, uint8_t *base)
{
    uint32_t area = inline_data_size(dir);
    uint32_t nr = area * 8 / ((SIZE_OF_DIR_ENTRY + F2FS_SLOT_LEN) * 8 + 1);
    uint32_t bitmap_bytes = (nr + 7) / 8;
    uint32_t reserved = area - ((SIZE_OF_DIR_ENTRY + F2FS_SLOT_LEN) * nr + bitmap_bytes);
    v->bitmap = base;
    v->dentry = (void *)(base + bitmap_bytes + reserved);
    v->filename = (void *)(base + bitmap_bytes + reserved + nr * SIZE_OF_DIR_ENTRY);
    v->slots = nr;
}

static void view_inline(struct dentry_view *v, const struct inode_info *dir, void *ipage)
{
    view_inline_area(v, dir, (uint8_t *)ipage + inline_data_offset(dir));
}

/* Dentry bitmaps are LSB-first (test_bit_le). */
static bool slot_used(const struct dentry_view *v, uint32_t pos)
{
    return v->bitmap[pos >> 3] & (1u << (pos & 7));
}

static uint32_t slots_for(uint32_t name_len)
{
    return (name_len + F2FS_SLOT_LEN - 1) / F2FS_SLOT_LEN;
}

/* Checks the used entry at pos; returns the number of slots it takes or -EIO.  Callers
 * skip a damaged slot and go on, as the kernel does: one bad entry must not hide the rest
 * of the directory. */
static int entry_check(struct f2fuse *fs, const struct inode_info *dir, const struct dentry_view *v,
                       uint32_t pos)
{
    const struct f2fs_dir_entry *de = &v->dentry[pos];
    uint32_t len = le16(de->name_len);
    if (len == 0 || len > F2FS_NAME_LEN || pos + slots_for(len) > v->slots)
        return fs_corrupt(fs, "directory %u: entry at slot %u has a bad name length %u", dir->ino,
                          pos, len);
    return (int)slots_for(len);
}

/* Whether an entry starts at pos: used, with a name that fits (entry_check without the
 * report: the index names slots that a stale index would get wrong, not the image). */
static bool entry_at(const struct dentry_view *v, uint32_t pos)
{
    if (pos >= v->slots || !slot_used(v, pos))
        return false;
    uint32_t len = le16(v->dentry[pos].name_len);
    return len > 0 && len <= F2FS_NAME_LEN && pos + slots_for(len) <= v->slots;
}

/* Finds dn in one container; returns 1 and its slot when found, 0 when not, or -errno.  A
 * scan (misplaced set) ignores hashes and notes entries whose hash is not their name's. */
static int view_find(struct f2fuse *fs, const struct inode_info *dir, const struct dentry_view *v,
                     const struct dir_name *dn, uint32_t *slot, bool *misplaced)
{
    for (uint32_t pos = 0; pos < v->slots;) {
        if (!slot_used(v, pos)) {
            pos++;
            continue;
        }
        int slots = entry_check(fs, dir, v, pos);
        if (slots < 0) {
            pos++;
            continue;
        }
        const struct f2fs_dir_entry *de = &v->dentry[pos];
        uint32_t hash = le32(de->hash_code), len = le16(de->name_len);
        if (misplaced ? dir_name_same(fs, dir, dn, v->filename[pos], len)
                      : dir_name_matches(fs, dir, dn, hash, v->filename[pos], len)) {
            *slot = pos;
            return 1;
        }
        if (misplaced && !*misplaced && !dir_name_placed(fs, dir, hash, v->filename[pos], len))
            *misplaced = true;
        pos += (uint32_t)slots;
    }
    return 0;
}

static uint64_t dir_buckets(uint32_t level, uint32_t dir_level)
{
    if (level + dir_level < MAX_DIR_HASH_DEPTH / 2)
        return 1ull << (level + dir_level);
    return MAX_DIR_BUCKETS;
}

static uint32_t bucket_blocks(uint32_t level)
{
    return level < MAX_DIR_HASH_DEPTH / 2 ? 2 : 4;
}

static uint64_t dir_block_index(uint32_t level, uint32_t dir_level, uint64_t bucket)
{
    uint64_t bidx = 0;
    for (uint32_t i = 0; i < level; i++)
        bidx += dir_buckets(i, dir_level) * bucket_blocks(i);
    return bidx + bucket * bucket_blocks(level);
}

static uint64_t dir_blocks(const struct inode_info *dir)
{
    return (dir->size + F2FS_BLKSIZE - 1) / F2FS_BLKSIZE;
}

static uint64_t dir_key(const struct inode_info *dir, uint64_t index)
{
    return (uint64_t)dir->ino << 32 | index;
}

/* A directory block goes with every checkpoint.  Lookups sharing the directory's stripe
 * mark the same page at once (every path walk through an encrypted or casefolded directory
 * looks up): atomic, as two plain stores of one value race for ThreadSanitizer. */
static void mark_checkpoint_data(struct page *page)
{
    __atomic_store_n(&page->checkpoint_data, true, __ATOMIC_RELAXED);
}

/* Reads directory block index (the cached copy first: it may be newer than the disk, or
 * not on disk yet); *page is NULL for a hole. */
static int dir_block_get(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                         uint64_t index, struct page **page)
{
    *page = pcache_find(fs->cache, PAGE_DATA, dir_key(dir, index));
    if (*page) {
        mark_checkpoint_data(*page);
        return 0;
    }
    uint32_t addr;
    int err = data_map(fs, dir, &page_node(dpage)->i, index, 1, &addr);
    if (err || addr == NULL_ADDR)
        return err;
    err = pcache_get(fs->cache, PAGE_DATA, dir_key(dir, index), addr, page);
    if (!err)
        mark_checkpoint_data(*page);
    return err;
}

/* The first block of dir at *b or after it that is not a hole, moving *b there; *page is
 * NULL past the last one.  Holes are skipped a node's range at a time. */
static int next_dir_block(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                          uint64_t *b, struct page **page)
{
    for (*page = NULL; *b < dir_blocks(dir); *b = data_next_candidate(fs, dir, *b)) {
        int err = dir_block_get(fs, dir, dpage, *b, page);
        if (err || *page)
            return err;
    }
    return 0;
}

/* Where an entry was found: in block page (referenced) or, for an inline directory, in
 * the directory's inode page (page == NULL). */
struct dentry_loc {
    struct page *page;
    uint64_t block;
    struct dentry_view v;
    uint32_t slot;
};

/* The hashed lookup the format prescribes: the bucket the hash picks on every level.
 * *scanned counts the blocks read. */
static int find_scanned(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                        const struct dir_name *dn, struct dentry_loc *loc, uint64_t *scanned)
{
    for (uint32_t level = 0; level < dir->current_depth; level++) {
        uint64_t bucket = dn->hash % dir_buckets(level, dir->dir_level);
        uint64_t first = dir_block_index(level, dir->dir_level, bucket);
        for (uint64_t b = first; b < first + bucket_blocks(level) && b < dir_blocks(dir); b++) {
            struct page *page;
            int err = dir_block_get(fs, dir, dpage, b, &page);
            if (err)
                return err;
            if (!page)
                continue;
            ++*scanned;
            view_block(&loc->v, page->data);
            int found = view_find(fs, dir, &loc->v, dn, &loc->slot, NULL);
            if (found) {
                if (found > 0) {
                    loc->page = page;
                    loc->block = b;
                } else {
                    pcache_put(fs->cache, page);
                }
                return found;
            }
            pcache_put(fs->cache, page);
        }
    }
    return 0;
}

/* Where block b of dir sits in the hash table: its level and bucket; false past the
 * directory's current depth (no hashed lookup reads it). */
static bool block_place(const struct inode_info *dir, uint64_t b, uint32_t *level, uint64_t *bucket)
{
    uint64_t start = 0;
    for (uint32_t l = 0; l < dir->current_depth; l++) {
        uint64_t n = dir_buckets(l, dir->dir_level) * bucket_blocks(l);
        if (b < start + n) {
            *level = l;
            *bucket = (b - start) / bucket_blocks(l);
            return true;
        }
        start += n;
    }
    return false;
}

/* Whether an entry with hash in block b is one a hashed lookup finds, so indexed. */
static bool indexed_at(const struct inode_info *dir, uint32_t hash, uint64_t b)
{
    uint32_t level;
    uint64_t bucket;
    return block_place(dir, b, &level, &bucket) &&
           hash % dir_buckets(level, dir->dir_level) == bucket;
}

/* Fills x with every entry a hashed lookup could find: those whose hash picks the bucket
 * they sit in (walked as view_find walks, so that damaged entries are left out alike). */
static int index_build(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                       struct dir_index *x)
{
    dir_index_build_begin(x);
    for (uint64_t b = 0;; b++) {
        struct page *page;
        int err = next_dir_block(fs, dir, dpage, &b, &page);
        if (err || !page)
            return err;
        uint32_t level;
        uint64_t bucket;
        if (!block_place(dir, b, &level, &bucket)) {
            pcache_put(fs->cache, page);
            return 0;
        }
        struct dentry_view v;
        view_block(&v, page->data);
        for (uint32_t pos = 0; pos < v.slots && !err;) {
            int slots = slot_used(&v, pos) ? entry_check(fs, dir, &v, pos) : -1;
            if (slots < 0) {
                pos++;
                continue;
            }
            uint32_t hash = le32(v.dentry[pos].hash_code);
            if (hash % dir_buckets(level, dir->dir_level) == bucket)
                err = dir_index_build_add(x, hash, b, pos);
            pos += (uint32_t)slots;
        }
        pcache_put(fs->cache, page);
        if (err)
            return err;
    }
}

/* The lookup through an index: the candidates' blocks only, the first match in the order
 * a scan meets them (lowest block, then slot).  A candidate that is not there (a bug: the
 * index follows every change) returns 1 after dropping the index: the caller scans. */
static int find_indexed(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                        const struct dir_name *dn, struct dir_index *x, struct dentry_loc *loc)
{
    uint32_t cursor = 0, slot;
    uint64_t block;
    int found = 0;
    while (dir_index_next(x, dn->hash, &cursor, &block, &slot)) {
        if (found > 0 && (block > loc->block || (block == loc->block && slot > loc->slot)))
            continue;
        struct page *page = NULL;
        int err = block < dir_blocks(dir) ? dir_block_get(fs, dir, dpage, block, &page) : 0;
        if (err) {
            if (found > 0)
                pcache_put(fs->cache, loc->page);
            loc->page = NULL;
            return err;
        }
        struct dentry_view v;
        if (page)
            view_block(&v, page->data);
        if (!page || !entry_at(&v, slot) || le32(v.dentry[slot].hash_code) != dn->hash) {
            pcache_put(fs->cache, page);
            if (found > 0)
                pcache_put(fs->cache, loc->page);
            loc->page = NULL;
            dir_index_stale(fs, x);
            return 1;
        }
        if (!dir_name_matches(fs, dir, dn, dn->hash, v.filename[slot],
                              le16(v.dentry[slot].name_len))) {
            pcache_put(fs->cache, page);
            continue;
        }
        if (found > 0)
            pcache_put(fs->cache, loc->page);
        found = 1;
        loc->page = page;
        loc->block = block;
        loc->v = v;
        loc->slot = slot;
    }
    atomic_fetch_add_explicit(&fs->dir_indexes.lookups, 1, memory_order_relaxed);
    return found ? 2 : 0;
}

static int find_hashed(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                       const struct dir_name *dn, struct dentry_loc *loc)
{
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        view_inline(&loc->v, dir, dpage->data);
        return view_find(fs, dir, &loc->v, dn, &loc->slot, NULL);
    }
    uint64_t scanned = 0;
    if (!fs->opts.dir_index || dir->current_depth < DIR_INDEX_MIN_DEPTH)
        return find_scanned(fs, dir, dpage, dn, loc, &scanned);
    struct dir_index *x = dir_index_get(fs, dir->ino);
    if (!x)
        return find_scanned(fs, dir, dpage, dn, loc, &scanned);
    if (dir_index_ready(x)) {
        int found = find_indexed(fs, dir, dpage, dn, x, loc);
        if (found != 1) {
            dir_index_put(fs, x);
            return found == 2 ? 1 : found;
        }
    }
    int found = find_scanned(fs, dir, dpage, dn, loc, &scanned);
    if (found >= 0 && dir_index_worth_building(x, scanned, dir_blocks(dir)))
        dir_index_build_end(fs, x, index_build(fs, dir, dpage, x) == 0);
    dir_index_put(fs, x);
    return found;
}

/* Every entry of dir, hashes ignored (the kernel's linear lookup after a hash miss in a
 * casefolded directory); a scan that finds every entry hashed as f2fuse hashes it is the
 * last one for dir. */
static int scan_entries(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                        const struct dir_name *dn, struct dentry_loc *loc)
{
    bool misplaced = false;
    int found = 0;
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        view_inline(&loc->v, dir, dpage->data);
        found = view_find(fs, dir, &loc->v, dn, &loc->slot, &misplaced);
    } else {
        for (uint64_t b = 0; !found; b++) {
            struct page *page;
            int err = next_dir_block(fs, dir, dpage, &b, &page);
            if (err || !page)
                return err;
            view_block(&loc->v, page->data);
            found = view_find(fs, dir, &loc->v, dn, &loc->slot, &misplaced);
            if (found > 0) {
                loc->page = page;
                loc->block = b;
            } else {
                pcache_put(fs->cache, page);
            }
        }
    }
    if (!found && !misplaced)
        dir_name_scan_clean(fs, dir);
    return found;
}

static int find_entry(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                      const struct dir_name *dn, struct dentry_loc *loc)
{
    memset(loc, 0, sizeof(*loc));
    int found = find_hashed(fs, dir, dpage, dn, loc);
    if (found == 0 && dir_name_scan_on_miss(fs, dir, dn))
        found = scan_entries(fs, dir, dpage, dn, loc);
    return found;
}

static int lookup_name(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                       const struct dir_name *dn, uint32_t *ino)
{
    struct dentry_loc loc;
    int found = find_entry(fs, dir, dpage, dn, &loc);
    if (found < 0)
        return found;
    if (!found)
        return -ENOENT;
    *ino = le32(loc.v.dentry[loc.slot].ino);
    pcache_put(fs->cache, loc.page);
    if (!nid_valid(fs, *ino))
        return fs_corrupt(fs, "directory %u: an entry points to invalid inode %u", dir->ino, *ino);
    return 0;
}

int dir_lookup(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
               const char *name, size_t len, uint32_t *ino)
{
    struct dir_name dn;
    int err = dir_name_init(fs, dir, dpage, name, len, &dn);
    if (err)
        return err;
    err = lookup_name(fs, dir, dpage, &dn, ino);
    dir_name_release(fs, &dn);
    return err;
}

int dir_lookup_recorded(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                        const struct f2fs_inode *ri, uint32_t *ino)
{
    struct dir_name dn;
    int err = dir_name_init_recorded(fs, dir, ri, &dn);
    if (err)
        return err;
    err = lookup_name(fs, dir, dpage, &dn, ino);
    dir_name_release(fs, &dn);
    return err;
}

static unsigned dtype_of(uint8_t file_type)
{
    static const unsigned char map[F2FS_FT_MAX] = {
        [F2FS_FT_UNKNOWN] = DT_UNKNOWN, [F2FS_FT_REG_FILE] = DT_REG, [F2FS_FT_DIR] = DT_DIR,
        [F2FS_FT_CHRDEV] = DT_CHR,      [F2FS_FT_BLKDEV] = DT_BLK,   [F2FS_FT_FIFO] = DT_FIFO,
        [F2FS_FT_SOCK] = DT_SOCK,       [F2FS_FT_SYMLINK] = DT_LNK};
    return file_type < F2FS_FT_MAX ? map[file_type] : DT_UNKNOWN;
}

/* Lists one container from slot start; cookie_base + slot is each entry's position.
 * Returns 1 when fn asked to stop, 0 at the end, or -errno. */
static int view_iterate(struct f2fuse *fs, const struct inode_info *dir, struct fscrypt_ikey *key,
                        const struct dentry_view *v, uint32_t start, uint64_t cookie_base,
                        f2fuse_dirent_fn fn, void *arg)
{
    for (uint32_t pos = start; pos < v->slots;) {
        if (!slot_used(v, pos)) {
            pos++;
            continue;
        }
        /* As the kernel's f2fs_fill_dentries: an empty name is skipped, a name running
         * past the block fails the listing; a bad inode number is listed (its lookup
         * fails), so that the rest stays reachable. */
        if (v->dentry[pos].name_len == 0) {
            fs_corrupt(fs, "directory %u: entry at slot %u has an empty name", dir->ino, pos);
            pos++;
            continue;
        }
        int slots = entry_check(fs, dir, v, pos);
        if (slots < 0)
            return slots;
        const struct f2fs_dir_entry *de = &v->dentry[pos];
        char buf[DIR_NAME_SHOW_MAX];
        const char *name;
        size_t len;
        int err = dir_name_show(fs, dir, key, le32(de->hash_code), v->filename[pos],
                                le16(de->name_len), buf, &name, &len);
        if (err)
            return err;
        pos += (uint32_t)slots;
        if (fn(arg, name, len, le32(de->ino), dtype_of(de->file_type), cookie_base + pos))
            return 1;
    }
    return 0;
}

static int iterate(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                   struct fscrypt_ikey *key, uint64_t cookie, f2fuse_dirent_fn fn, void *arg)
{
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        struct dentry_view v;
        view_inline(&v, dir, dpage->data);
        if (cookie >= v.slots)
            return 0;
        int r = view_iterate(fs, dir, key, &v, (uint32_t)cookie, 0, fn, arg);
        return r < 0 ? r : 0;
    }
    for (uint64_t b = cookie / NR_DENTRY_IN_BLOCK;; b++) {
        struct page *page;
        int err = next_dir_block(fs, dir, dpage, &b, &page);
        if (err || !page)
            return err;
        struct dentry_view v;
        view_block(&v, page->data);
        uint32_t start = b == cookie / NR_DENTRY_IN_BLOCK ? cookie % NR_DENTRY_IN_BLOCK : 0;
        int r = view_iterate(fs, dir, key, &v, start, b * NR_DENTRY_IN_BLOCK, fn, arg);
        pcache_put(fs->cache, page);
        if (r)
            return r < 0 ? r : 0;
    }
}

/* A v1 key's check (fscrypt_keys.h): a few names are decrypted before any is shown. */
static int count_names(void *arg, const char *name, size_t len, uint32_t ino, unsigned type,
                       uint64_t next)
{
    bool dots = name[0] == '.' && (len == 1 || (len == 2 && name[1] == '.'));
    return !dots && ++*(unsigned *)arg >= FSCRYPT_V1_PLAUSIBLE;
}

int dir_iterate(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                uint64_t cookie, f2fuse_dirent_fn fn, void *arg)
{
    /* An encrypted directory lists its names decrypted when its key is present. */
    struct fscrypt_ikey *key = NULL;
    int err = fscrypt_encrypted(dir) ? fscrypt_ikey_get(fs, dir, dpage, &key) : 0;
    if (err && err != -ENOKEY)
        return err;
    err = 0;
    if (key && fscrypt_master_unchecked(key)) {
        unsigned seen = 0;
        err = iterate(fs, dir, dpage, key, 0, count_names, &seen);
        fscrypt_master_scan_done(key);
    }
    if (!err)
        err = iterate(fs, dir, dpage, key, cookie, fn, arg);
    fscrypt_ikey_put(fs, key);
    return err;
}

/* ---- write side ---- */

uint8_t dir_file_type(uint16_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return F2FS_FT_REG_FILE;
    case S_IFDIR: return F2FS_FT_DIR;
    case S_IFCHR: return F2FS_FT_CHRDEV;
    case S_IFBLK: return F2FS_FT_BLKDEV;
    case S_IFIFO: return F2FS_FT_FIFO;
    case S_IFSOCK: return F2FS_FT_SOCK;
    case S_IFLNK: return F2FS_FT_SYMLINK;
    default: return F2FS_FT_UNKNOWN;
    }
}

/* First run of n free slots, or -1 (f2fs_room_for_filename). */
static int room_for(const struct dentry_view *v, uint32_t n)
{
    uint32_t run = 0;
    for (uint32_t pos = 0; pos < v->slots; pos++) {
        run = slot_used(v, pos) ? 0 : run + 1;
        if (run == n)
            return (int)(pos + 1 - n);
    }
    return -1;
}

static void put_entry(struct dentry_view *v, uint32_t pos, const uint8_t *name, size_t len,
                      uint32_t hash, uint32_t ino, uint8_t type)
{
    uint32_t n = slots_for((uint32_t)len);
    struct f2fs_dir_entry *de = &v->dentry[pos];
    de->hash_code = htole32(hash);
    de->ino = htole32(ino);
    de->name_len = htole16((uint16_t)len);
    de->file_type = type;
    memset(v->filename[pos], 0, (size_t)n * F2FS_SLOT_LEN);
    memcpy(v->filename[pos], name, len);
    for (uint32_t i = 0; i < n; i++) {
        v->bitmap[(pos + i) >> 3] |= (uint8_t)(1u << ((pos + i) & 7));
        if (i) /* continuation slots carry no entry of their own */
            memset(&v->dentry[pos + i], 0, sizeof(v->dentry[pos + i]));
    }
}

static void clear_entry(struct dentry_view *v, uint32_t pos)
{
    uint32_t n = slots_for(le16(v->dentry[pos].name_len));
    for (uint32_t i = 0; i < n; i++)
        v->bitmap[(pos + i) >> 3] &= (uint8_t) ~(1u << ((pos + i) & 7));
}

static bool view_empty(const struct dentry_view *v)
{
    for (uint32_t pos = 0; pos < v->slots; pos++)
        if (slot_used(v, pos))
            return false;
    return true;
}

static void set_depth(struct inode_info *dir, struct page *dpage, uint32_t depth)
{
    dir->current_depth = depth;
    page_node(dpage)->i.i_current_depth = htole32(depth);
}

static void set_size(struct inode_info *dir, struct page *dpage, uint64_t size)
{
    dir->size = size;
    page_node(dpage)->i.i_size = htole64(size);
}

/* Puts an entry into the lowest level whose bucket for hash has room; a new level when none
 * has (f2fs_add_regular_entry). */
static int add_block_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                           const uint8_t *name, size_t len, uint32_t hash, uint32_t ino,
                           uint8_t type)
{
    uint32_t slots = slots_for((uint32_t)len);
    uint32_t depth = dir->current_depth;
    for (uint32_t level = 0;; level++) {
        if (level == depth) {
            if (depth == MAX_DIR_HASH_DEPTH)
                return -ENOSPC;
            depth++;
        }
        uint64_t bucket = hash % dir_buckets(level, dir->dir_level);
        uint64_t first = dir_block_index(level, dir->dir_level, bucket);
        for (uint64_t b = first; b < first + bucket_blocks(level); b++) {
            if (b >= UINT32_MAX)
                return -ENOSPC;
            struct page *page = NULL;
            int err = b < dir_blocks(dir) ? dir_block_get(fs, dir, dpage, b, &page) : 0;
            if (!err && !page) /* a new dentry block: the only one a name may need */
                err = space_metadata_room(fs, 1);
            if (!err && !page)
                err = data_get_page(fs, dir, dpage, b, false, &page);
            if (err)
                return err;
            struct dentry_view v;
            view_block(&v, page->data);
            int pos = room_for(&v, slots);
            if (pos < 0) {
                pcache_put(fs->cache, page);
                continue;
            }
            put_entry(&v, (uint32_t)pos, name, len, hash, ino, type);
            dir_index_added(fs, dir->ino, hash, b, (uint32_t)pos);
            pcache_mark_dirty(fs->cache, page);
            pcache_put(fs->cache, page);
            if ((b + 1) * F2FS_BLKSIZE > dir->size)
                set_size(dir, dpage, (b + 1) * F2FS_BLKSIZE);
            if (depth != dir->current_depth)
                set_depth(dir, dpage, depth);
            pcache_mark_dirty(fs->cache, dpage);
            return 0;
        }
    }
}

/* Leaves inline mode: the inline area is cleared and the flag dropped. */
static void drop_inline_area(struct f2fuse *fs, struct inode_info *dir, struct page *dpage)
{
    memset((uint8_t *)dpage->data + inline_data_offset(dir), 0, inline_data_size(dir));
    struct f2fs_inode *ri = &page_node(dpage)->i;
    ri->i_inline &= (uint8_t)~F2FS_INLINE_DENTRY;
    dir->inline_flags = ri->i_inline;
    pcache_mark_dirty(fs->cache, dpage);
}

/* Moves an inline directory's entries into block 0, at the same slots
 * (f2fs_move_inline_dirents): the inline area has fewer slots than a block.  Right only
 * with dir_level 0, where level 0 is the one bucket of blocks 0 and 1. */
static int move_inline_entries(struct f2fuse *fs, struct inode_info *dir, struct page *dpage)
{
    struct page *page;
    int err = data_get_page(fs, dir, dpage, 0, false, &page);
    if (err)
        return err;
    struct dentry_view from, to;
    view_inline(&from, dir, dpage->data);
    view_block(&to, page->data);
    for (uint32_t pos = 0; pos < from.slots; pos++) {
        if (!slot_used(&from, pos))
            continue;
        to.bitmap[pos >> 3] |= (uint8_t)(1u << (pos & 7));
        to.dentry[pos] = from.dentry[pos];
        memcpy(to.filename[pos], from.filename[pos], F2FS_SLOT_LEN);
    }
    pcache_mark_dirty(fs->cache, page);
    pcache_put(fs->cache, page);
    drop_inline_area(fs, dir, dpage);
    set_size(dir, dpage, F2FS_BLKSIZE);
    set_depth(dir, dpage, 1);
    return 0;
}

/* With dir_level d > 0, level 0 has 2^d buckets and an entry belongs in bucket
 * hash % 2^d, so every entry is inserted again by its hash (f2fs_move_rehashed_dirents).
 * On failure the blocks are dropped and the inline area restored. */
static int rehash_inline_entries(struct f2fuse *fs, struct inode_info *dir, struct page *dpage)
{
    uint32_t area = inline_data_size(dir);
    uint8_t *copy = fs_malloc(fs, area);
    if (!copy)
        return -ENOMEM;
    memcpy(copy, (uint8_t *)dpage->data + inline_data_offset(dir), area);
    uint64_t old_size = dir->size;
    uint32_t old_depth = dir->current_depth;
    struct dentry_view from;
    view_inline_area(&from, dir, copy);
    drop_inline_area(fs, dir, dpage);
    set_size(dir, dpage, 0);
    set_depth(dir, dpage, 0);
    int err = 0;
    for (uint32_t pos = 0; pos < from.slots && !err;) {
        int slots = slot_used(&from, pos) ? entry_check(fs, dir, &from, pos) : -1;
        if (slots <= 0) {
            pos++;
            continue;
        }
        const struct f2fs_dir_entry *de = &from.dentry[pos];
        err = add_block_entry(fs, dir, dpage, from.filename[pos], le16(de->name_len),
                              le32(de->hash_code), le32(de->ino), de->file_type);
        pos += (uint32_t)slots;
    }
    if (err) {
        int undo = data_truncate(fs, dir, dpage, 0);
        memcpy((uint8_t *)dpage->data + inline_data_offset(dir), copy, area);
        struct f2fs_inode *ri = &page_node(dpage)->i;
        ri->i_inline |= F2FS_INLINE_DENTRY;
        dir->inline_flags = ri->i_inline;
        set_size(dir, dpage, old_size);
        set_depth(dir, dpage, old_depth);
        pcache_mark_dirty(fs->cache, dpage);
        if (undo)
            err = undo;
    }
    free(copy);
    return err;
}

static int convert_inline_dir(struct f2fuse *fs, struct inode_info *dir, struct page *dpage)
{
    dir_index_forget(fs, dir->ino); /* none should exist: the directory was inline */
    if (dir->dir_level == 0)
        return move_inline_entries(fs, dir, dpage);
    return rehash_inline_entries(fs, dir, dpage);
}

static int add_name(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                    const struct dir_name *dn, uint32_t ino, uint16_t mode)
{
    if (dn->nokey)
        return -ENOKEY; /* a new name needs the directory's key */
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        struct dentry_view v;
        view_inline(&v, dir, dpage->data);
        int pos = room_for(&v, slots_for((uint32_t)dn->len));
        if (pos >= 0) {
            put_entry(&v, (uint32_t)pos, dn->name, dn->len, dn->hash, ino, dir_file_type(mode));
            pcache_mark_dirty(fs->cache, dpage);
            return 0;
        }
        int err = convert_inline_dir(fs, dir, dpage);
        if (err)
            return err;
    }
    return add_block_entry(fs, dir, dpage, dn->name, dn->len, dn->hash, ino, dir_file_type(mode));
}

int dir_add_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, const char *name,
                  size_t len, uint32_t ino, uint16_t mode)
{
    struct dir_name dn;
    int err = dir_name_init(fs, dir, dpage, name, len, &dn);
    if (err)
        return err;
    err = add_name(fs, dir, dpage, &dn, ino, mode);
    dir_name_release(fs, &dn);
    return err;
}

int dir_add_recorded(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     const struct f2fs_inode *ri, uint32_t ino, uint16_t mode)
{
    struct dir_name dn;
    int err = dir_name_init_recorded(fs, dir, ri, &dn);
    if (err)
        return err;
    err = add_name(fs, dir, dpage, &dn, ino, mode);
    dir_name_release(fs, &dn);
    return err;
}

/* Where name's entry is, for a change: 0, -ENOENT or another error. */
static int locate_name(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                       const char *name, size_t len, struct dentry_loc *loc)
{
    struct dir_name dn;
    int err = dir_name_init(fs, dir, dpage, name, len, &dn);
    if (err)
        return err;
    int found = find_entry(fs, dir, dpage, &dn, loc);
    dir_name_release(fs, &dn);
    return found > 0 ? 0 : found ? found : -ENOENT;
}

int dir_remove_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     const char *name, size_t len, uint32_t *ino)
{
    struct dentry_loc loc;
    int err = locate_name(fs, dir, dpage, name, len, &loc);
    if (err)
        return err;
    if (ino)
        *ino = le32(loc.v.dentry[loc.slot].ino);
    uint32_t hash = le32(loc.v.dentry[loc.slot].hash_code);
    if (loc.page && indexed_at(dir, hash, loc.block))
        dir_index_removed(fs, dir->ino, hash, loc.block, loc.slot);
    clear_entry(&loc.v, loc.slot);
    if (!loc.page) {
        pcache_mark_dirty(fs->cache, dpage);
        return 0;
    }
    bool empty = view_empty(&loc.v);
    pcache_mark_dirty(fs->cache, loc.page);
    pcache_put(fs->cache, loc.page);
    /* An emptied block is given back (f2fs_delete_entry punches it). */
    return empty ? data_punch_block(fs, dir, dpage, loc.block) : 0;
}

int dir_set_entry(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, const char *name,
                  size_t len, uint32_t ino, uint16_t mode)
{
    struct dentry_loc loc;
    int err = locate_name(fs, dir, dpage, name, len, &loc);
    if (err)
        return err;
    loc.v.dentry[loc.slot].ino = htole32(ino);
    loc.v.dentry[loc.slot].file_type = dir_file_type(mode);
    pcache_mark_dirty(fs->cache, loc.page ? loc.page : dpage);
    pcache_put(fs->cache, loc.page);
    return 0;
}

int dir_init(struct f2fuse *fs, struct inode_info *dir, struct page *dpage, uint32_t parent)
{
    struct dentry_view v;
    struct page *page = NULL;
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        view_inline(&v, dir, dpage->data);
        /* An inline directory's size is its inline area (f2fs_make_empty_inline_dir). */
        set_size(dir, dpage, inline_data_size(dir));
    } else {
        int err = data_get_page(fs, dir, dpage, 0, false, &page);
        if (err)
            return err;
        view_block(&v, page->data);
        set_size(dir, dpage, F2FS_BLKSIZE);
        set_depth(dir, dpage, 1);
    }
    put_entry(&v, 0, (const uint8_t *)".", 1, 0, dir->ino, F2FS_FT_DIR);
    put_entry(&v, 1, (const uint8_t *)"..", 2, 0, parent, F2FS_FT_DIR);
    if (page) {
        pcache_mark_dirty(fs->cache, page);
        pcache_put(fs->cache, page);
    }
    pcache_mark_dirty(fs->cache, dpage);
    return 0;
}

/* Empty = no slot in use but "." and ".." (slots 0 and 1 of the first block), judged
 * from the bitmaps alone as f2fs_empty_dir does, so damaged entries still count. */
int dir_is_empty(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage, bool *empty)
{
    *empty = true;
    struct dentry_view v;
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        view_inline(&v, dir, dpage->data);
        for (uint32_t pos = 2; pos < v.slots && *empty; pos++)
            *empty = !slot_used(&v, pos);
        return 0;
    }
    for (uint64_t b = 0; *empty; b++) {
        struct page *page;
        int err = next_dir_block(fs, dir, dpage, &b, &page);
        if (err || !page)
            return err;
        view_block(&v, page->data);
        for (uint32_t pos = b == 0 ? 2 : 0; pos < v.slots && *empty; pos++)
            *empty = !slot_used(&v, pos);
        pcache_put(fs->cache, page);
    }
    return 0;
}
