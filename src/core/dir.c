/* Directories: multi-level hash tables of dentry blocks (or one inline dentry area in the
 * inode), looked up by name hash and listed in on-disk order. */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"

/* A view of one dentry container: a dentry block or an inode's inline dentry area. */
struct dentry_view {
    const uint8_t *bitmap;
    const struct f2fs_dir_entry *dentry;
    const uint8_t (*filename)[F2FS_SLOT_LEN];
    uint32_t slots;
};

static void view_block(struct dentry_view *v, const void *blk)
{
    const struct f2fs_dentry_block *b = blk;
    v->bitmap = b->dentry_bitmap;
    v->dentry = b->dentry;
    v->filename = b->filename;
    v->slots = NR_DENTRY_IN_BLOCK;
}

/* Inline layout: bitmap | reserved | dentries | names, sized from MAX_INLINE_DATA. */
static void view_inline(struct dentry_view *v, const struct inode_info *dir, const void *ipage)
{
    uint32_t area = inline_data_size(dir);
    uint32_t nr = area * 8 / ((SIZE_OF_DIR_ENTRY + F2FS_SLOT_LEN) * 8 + 1);
    uint32_t bitmap_bytes = (nr + 7) / 8;
    uint32_t reserved = area - ((SIZE_OF_DIR_ENTRY + F2FS_SLOT_LEN) * nr + bitmap_bytes);
    const uint8_t *base = (const uint8_t *)ipage + inline_data_offset(dir);
    v->bitmap = base;
    v->dentry = (const void *)(base + bitmap_bytes + reserved);
    v->filename = (const void *)(base + bitmap_bytes + reserved + nr * SIZE_OF_DIR_ENTRY);
    v->slots = nr;
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

/* Checks the used entry at pos; returns the number of slots it takes or -EIO. */
static int entry_check(struct f2fuse *fs, const struct inode_info *dir,
                       const struct dentry_view *v, uint32_t pos)
{
    const struct f2fs_dir_entry *de = &v->dentry[pos];
    uint32_t len = le16(de->name_len);
    if (len == 0 || len > F2FS_NAME_LEN || pos + slots_for(len) > v->slots)
        return fs_corrupt(fs, "directory %u: entry at slot %u has a bad name length %u",
                          dir->ino, pos, len);
    return (int)slots_for(len);
}

/* Finds name in one container; returns 1 and the ino when found, 0 when not, or -errno. */
static int view_find(struct f2fuse *fs, const struct inode_info *dir, const struct dentry_view *v,
                     const char *name, size_t len, uint32_t hash, uint32_t *ino)
{
    for (uint32_t pos = 0; pos < v->slots;) {
        if (!slot_used(v, pos)) {
            pos++;
            continue;
        }
        int slots = entry_check(fs, dir, v, pos);
        if (slots < 0)
            return slots;
        const struct f2fs_dir_entry *de = &v->dentry[pos];
        if (le32(de->hash_code) == hash && le16(de->name_len) == len &&
            memcmp(v->filename[pos], name, len) == 0) {
            *ino = le32(de->ino);
            return 1;
        }
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

/* Reads directory block index; *page is NULL for a hole. */
static int dir_block_get(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                         uint64_t index, struct page **page)
{
    uint32_t addr;
    *page = NULL;
    int err = data_map(fs, dir, &page_node(dpage)->i, index, 1, &addr);
    if (err || addr == NULL_ADDR)
        return err;
    return pcache_get(fs->cache, PAGE_DATA, (uint64_t)dir->ino << 32 | index, addr, page);
}

static int search_block(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                        uint64_t index, const char *name, size_t len, uint32_t hash,
                        uint32_t *ino)
{
    struct page *page;
    int err = dir_block_get(fs, dir, dpage, index, &page);
    if (err || !page)
        return err;
    struct dentry_view v;
    view_block(&v, page->data);
    int found = view_find(fs, dir, &v, name, len, hash, ino);
    pcache_put(fs->cache, page);
    return found;
}

struct name_match {
    const char *name;
    size_t len;
    uint32_t ino;
    bool found;
};

static int match_name(void *arg, const char *name, size_t len, uint32_t ino, unsigned type,
                      uint64_t next)
{
    struct name_match *m = arg;
    if (len != m->len || memcmp(name, m->name, len) != 0)
        return 0;
    m->ino = ino;
    m->found = true;
    return 1;
}

int dir_lookup(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
               const char *name, size_t len, uint32_t *ino)
{
    if (len == 0 || len > F2FS_NAME_LEN)
        return len ? -ENAMETOOLONG : -ENOENT;
    uint32_t hash = dentry_hash((const uint8_t *)name, len);
    int found = 0;
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        struct dentry_view v;
        view_inline(&v, dir, dpage->data);
        found = view_find(fs, dir, &v, name, len, hash, ino);
    } else if (dir->flags & F2FS_CASEFOLD_FL) {
        /* Casefolded names hash differently; an exact-name scan still finds them. */
        struct name_match m = {name, len, 0, false};
        found = dir_iterate(fs, dir, dpage, 0, match_name, &m);
        if (!found && m.found) {
            found = 1;
            *ino = m.ino;
        }
    } else {
        for (uint32_t level = 0; level < dir->current_depth && found == 0; level++) {
            uint64_t bucket = hash % dir_buckets(level, dir->dir_level);
            uint64_t first = dir_block_index(level, dir->dir_level, bucket);
            for (uint64_t b = first; b < first + bucket_blocks(level) && found == 0; b++) {
                if (b >= dir_blocks(dir))
                    break;
                found = search_block(fs, dir, dpage, b, name, len, hash, ino);
            }
        }
    }
    if (found < 0)
        return found;
    if (!found)
        return -ENOENT;
    if (!nid_valid(fs, *ino))
        return fs_corrupt(fs, "directory %u: entry for a name of %zu bytes points to invalid "
                              "inode %u", dir->ino, len, *ino);
    return 0;
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
static int view_iterate(struct f2fuse *fs, const struct inode_info *dir,
                        const struct dentry_view *v, uint32_t start, uint64_t cookie_base,
                        f2fuse_dirent_fn fn, void *arg)
{
    for (uint32_t pos = start; pos < v->slots;) {
        if (!slot_used(v, pos)) {
            pos++;
            continue;
        }
        int slots = entry_check(fs, dir, v, pos);
        if (slots < 0)
            return slots;
        const struct f2fs_dir_entry *de = &v->dentry[pos];
        uint32_t ino = le32(de->ino);
        if (!nid_valid(fs, ino))
            return fs_corrupt(fs, "directory %u: entry at slot %u points to invalid inode %u",
                              dir->ino, pos, ino);
        pos += (uint32_t)slots;
        if (fn(arg, (const char *)v->filename[pos - (uint32_t)slots], le16(de->name_len), ino,
               dtype_of(de->file_type), cookie_base + pos))
            return 1;
    }
    return 0;
}

int dir_iterate(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                uint64_t cookie, f2fuse_dirent_fn fn, void *arg)
{
    if (dir->inline_flags & F2FS_INLINE_DENTRY) {
        struct dentry_view v;
        view_inline(&v, dir, dpage->data);
        if (cookie >= v.slots)
            return 0;
        int r = view_iterate(fs, dir, &v, (uint32_t)cookie, 0, fn, arg);
        return r < 0 ? r : 0;
    }
    for (uint64_t b = cookie / NR_DENTRY_IN_BLOCK; b < dir_blocks(dir); b++) {
        struct page *page;
        int err = dir_block_get(fs, dir, dpage, b, &page);
        if (err)
            return err;
        if (!page) {
            b = data_next_candidate(fs, dir, b) - 1;
            continue;
        }
        struct dentry_view v;
        view_block(&v, page->data);
        uint32_t start = b == cookie / NR_DENTRY_IN_BLOCK ? cookie % NR_DENTRY_IN_BLOCK : 0;
        int r = view_iterate(fs, dir, &v, start, b * NR_DENTRY_IN_BLOCK, fn, arg);
        pcache_put(fs->cache, page);
        if (r)
            return r < 0 ? r : 0;
    }
    return 0;
}
