/* Shared pieces of the libFuzzer harnesses: see harness.h. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "util/crc.h"

#ifndef F2FUSE_SRC_ROOT
#define F2FUSE_SRC_ROOT "."
#endif

/* Harness state: one per fuzzing process, set up once by fz_init.  (The library itself has
 * no globals; the harness is a test program.) */
static struct {
    int fd;
    char path[64];
    char dir[128];     /* the base script's output */
    uint8_t *base;     /* the base image, FZ_IMAGE_BYTES */
    uint32_t *nonzero; /* its blocks that are not all zeros */
    uint32_t nonzero_count;
    uint32_t *targets[FZ_T_COUNT];
    uint32_t target_count[FZ_T_COUNT];
    uint32_t cp_blkaddr;
    const char *seed_dir;
} fz = {.fd = -1};

static void die(const char *what)
{
    fprintf(stderr, "fuzz harness: %s: %s\n", what, strerror(errno));
    abort();
}

const char *fz_image_path(void)
{
    return fz.path;
}

void fz_write(uint64_t off, const void *buf, size_t len)
{
    if (pwrite(fz.fd, buf, len, (off_t)off) != (ssize_t)len)
        die("pwrite");
}

void fz_read(uint64_t off, void *buf, size_t len)
{
    if (pread(fz.fd, buf, len, (off_t)off) != (ssize_t)len)
        die("pread");
}

void fz_image_zero(void)
{
    if (ftruncate(fz.fd, 0) || ftruncate(fz.fd, FZ_IMAGE_BYTES))
        die("ftruncate");
}

void fz_image_base(void)
{
    fz_image_zero();
    for (uint32_t i = 0; i < fz.nonzero_count;) {
        uint32_t j = i + 1; /* one write per run of consecutive blocks */
        while (j < fz.nonzero_count && fz.nonzero[j] == fz.nonzero[j - 1] + 1)
            j++;
        uint64_t off = (uint64_t)fz.nonzero[i] * FZ_BLOCK;
        fz_write(off, fz.base + off, (size_t)(j - i) * FZ_BLOCK);
        i = j;
    }
}

const uint8_t *fz_base_block(uint32_t blkaddr)
{
    return fz.base + (uint64_t)(blkaddr % FZ_BLOCKS) * FZ_BLOCK;
}

void fz_restore_block(uint32_t blkaddr)
{
    fz_write((uint64_t)blkaddr * FZ_BLOCK, fz_base_block(blkaddr), FZ_BLOCK);
}

static uint32_t get_le(const uint8_t *p, int n)
{
    uint32_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

void fz_apply_records(const uint8_t *data, size_t size, uint32_t (*map)(uint32_t, void *),
                      void *arg)
{
    while (size >= 8) {
        uint32_t blk = get_le(data, 4), off = get_le(data + 4, 2) % FZ_BLOCK;
        uint32_t len = get_le(data + 6, 2);
        data += 8;
        size -= 8;
        if (len > size)
            len = (uint32_t)size;
        if (len > FZ_BLOCK - off)
            len = FZ_BLOCK - off;
        blk = map ? map(blk, arg) : blk % FZ_BLOCKS;
        fz_write((uint64_t)blk * FZ_BLOCK + off, data, len);
        data += len;
        size -= len;
    }
}

size_t fz_record(uint8_t *buf, uint32_t blkaddr, const uint8_t *block)
{
    uint32_t len = FZ_BLOCK;
    while (len && !block[len - 1])
        len--;
    uint8_t hdr[8] = {(uint8_t)blkaddr,
                      (uint8_t)(blkaddr >> 8),
                      (uint8_t)(blkaddr >> 16),
                      (uint8_t)(blkaddr >> 24),
                      0,
                      0,
                      (uint8_t)len,
                      (uint8_t)(len >> 8)};
    memcpy(buf, hdr, 8);
    memcpy(buf + 8, block, len);
    return 8 + len;
}

/* ---- the walk ---------------------------------------------------------------------- */

#define WALK_MAX_INODES      1024
#define WALK_MAX_DIR_ENTRIES 256
#define WALK_READ_BYTES      (128u << 10) /* per file: hostile sizes must not make a run slow */

struct name_list {
    struct {
        char name[256];
        size_t len;
    } * v;
    size_t n, cap;
};

static int collect(void *arg, const char *name, size_t len, uint32_t ino, unsigned type,
                   uint64_t next_cookie)
{
    struct name_list *l = arg;
    if (l->n >= l->cap)
        return 1;
    if (len > 255) /* the library never hands out more; say so loudly if it does */
        abort();
    memcpy(l->v[l->n].name, name, len);
    l->v[l->n].len = len;
    l->n++;
    return 0;
}

struct seen {
    uint32_t ino[WALK_MAX_INODES];
    unsigned n;
};

static bool seen_add(struct seen *s, uint32_t ino)
{
    for (unsigned i = 0; i < s->n; i++)
        if (s->ino[i] == ino)
            return false;
    if (s->n == WALK_MAX_INODES)
        return false;
    s->ino[s->n++] = ino;
    return true;
}

static void read_file(struct f2fuse *fs, const struct f2fuse_attr *a, uint8_t *buf)
{
    for (uint64_t off = 0; off < a->size && off < WALK_READ_BYTES; off += 65536)
        if (f2fuse_read(fs, a->ino, buf, 65536, off) < 0)
            return;
    if (a->size <= WALK_READ_BYTES)
        return;
    /* a big (or hostile) file: 16 samples over its size reach every node, and the tail */
    for (uint64_t k = 1; k < 16; k++)
        f2fuse_read(fs, a->ino, buf, 4096, a->size / 16 * k);
    f2fuse_read(fs, a->ino, buf, 8192, a->size - 4096);
}

static void read_xattrs(struct f2fuse *fs, uint32_t ino, uint8_t *buf)
{
    char list[4096];
    ssize_t n = f2fuse_listxattr(fs, ino, list, sizeof(list));
    for (ssize_t i = 0; n > 0 && i < n;) {
        size_t len = strnlen(list + i, (size_t)(n - i));
        if ((ssize_t)(i + len) >= n)
            break;
        f2fuse_getxattr(fs, ino, list + i, NULL, 0);
        f2fuse_getxattr(fs, ino, list + i, buf, 65536);
        i += (ssize_t)len + 1;
    }
}

/* What the walk met, for the changes a read-write harness makes afterwards. */
#define WALK_KEEP 48
struct walked {
    uint32_t dir, ino, mode;
    uint64_t size;
    char name[256];
    size_t len;
};

static void walk(struct f2fuse *fs, struct walked *kept, unsigned *nkept)
{
    static __thread struct seen seen;
    uint8_t *buf = malloc(65536);
    struct name_list names = {.v = malloc(sizeof(*names.v) * WALK_MAX_DIR_ENTRIES),
                              .cap = WALK_MAX_DIR_ENTRIES};
    uint32_t *queue = malloc(sizeof(uint32_t) * WALK_MAX_INODES);
    if (!buf || !names.v || !queue)
        die("malloc");
    unsigned head = 0, tail = 0;
    seen.n = 0;
    struct statvfs st;
    f2fuse_statfs(fs, &st);
    uint32_t root = f2fuse_root_ino(fs);
    seen_add(&seen, root);
    queue[tail++] = root;
    read_xattrs(fs, root, buf);
    while (head < tail) {
        uint32_t dir = queue[head++];
        names.n = 0;
        f2fuse_readdir(fs, dir, 0, collect, &names);
        if (names.n > 3) { /* resume in the middle: cookies come from the image */
            struct name_list rest = {.v = names.v + names.n - 1, .cap = 1};
            f2fuse_readdir(fs, dir, 2, collect, &rest);
        }
        for (size_t i = 0; i < names.n; i++) {
            const char *name = names.v[i].name;
            size_t len = names.v[i].len;
            if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
                continue;
            struct f2fuse_attr a;
            if (f2fuse_lookup(fs, dir, name, len, &a))
                continue;
            if (!seen_add(&seen, a.ino))
                continue;
            f2fuse_getattr(fs, a.ino, &a);
            if (*nkept < WALK_KEEP) {
                struct walked *w = &kept[(*nkept)++];
                *w = (struct walked){
                    .dir = dir, .ino = a.ino, .mode = a.mode, .size = a.size, .len = len};
                memcpy(w->name, name, len);
            }
            read_xattrs(fs, a.ino, buf);
            if (S_ISDIR(a.mode) && tail < WALK_MAX_INODES)
                queue[tail++] = a.ino;
            else if (S_ISREG(a.mode))
                read_file(fs, &a, buf);
            else if (S_ISLNK(a.mode))
                f2fuse_readlink(fs, a.ino, (char *)buf, 65536);
        }
    }
    if (getenv("F2FUSE_FUZZ_LOG"))
        fprintf(stderr, "fuzz harness: walked %u inodes\n", seen.n);
    free(queue);
    free(names.v);
    free(buf);
}

/* Changes of every kind on what the walk met in a hostile image: its damaged inodes, nodes,
 * directory blocks and xattrs get written, truncated, extended, renamed, linked and freed, and
 * the checkpoints write its SIT, NAT and summaries back. */
static void mutate(struct f2fuse *fs, const struct walked *kept, unsigned n)
{
    static const char data[6000] = "fuzz";
    uint32_t root = f2fuse_root_ino(fs);
    struct f2fuse_attr a;
    for (unsigned i = 0; i < n; i++) {
        const struct walked *w = &kept[i];
        char name[16];
        int nlen = snprintf(name, sizeof(name), "fz%u", i);
        if (S_ISREG(w->mode)) {
            f2fuse_write(fs, w->ino, data, sizeof(data), i % 3 == 0 ? 4000 : w->size);
            f2fuse_setxattr(fs, w->ino, "user.fz", data, 40 + 100 * (i % 4), 0);
            f2fuse_removexattr(fs, w->ino, "user.small");
            struct f2fuse_setattr sa = {.valid = F2FUSE_SET_SIZE, .size = w->size / 2};
            f2fuse_setattr(fs, w->ino, &sa, &a);
            f2fuse_fsync(fs, w->ino, i % 2);
            if (i % 4 == 1)
                f2fuse_link(fs, w->ino, root, name, (size_t)nlen, &a);
        } else if (S_ISDIR(w->mode)) {
            f2fuse_mknod(fs, w->ino, name, (size_t)nlen, 0100644, 0, 0, 0, &a);
            f2fuse_mkdir(fs, w->ino, "fzd", 3, 040755, 0, 0, &a);
            f2fuse_symlink(fs, w->ino, "fzl", 3, "target", 0, 0, &a);
            f2fuse_rmdir(fs, w->ino, "fzd", 3);
        } else {
            f2fuse_setxattr(fs, w->ino, "user.fz", data, 10, 0);
        }
        if (i % 5 == 2)
            f2fuse_rename(fs, w->dir, w->name, w->len, root, name, (size_t)nlen, 0);
        else if (i % 5 == 4)
            S_ISDIR(w->mode) ? f2fuse_rmdir(fs, w->dir, w->name, w->len)
                             : f2fuse_unlink(fs, w->dir, w->name, w->len);
        if (i % 8 == 7)
            f2fuse_sync(fs);
    }
    if (f2fuse_mkdir(fs, root, "fz_dir", 6, 040755, 0, 0, &a) == 0) {
        f2fuse_setxattr(fs, a.ino, "user.fz", data, 300, 0);
        f2fuse_rename(fs, root, "fz_dir", 6, root, "fz_dir2", 7, 0);
    }
    f2fuse_sync(fs);
}

int fz_mount_walk(bool rw)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.backend = "psync";
    o.cache_size = 2u << 20;
    o.read_only = !rw;
    o.checkpoint_interval = 0;
    o.checkpoint_merge = false;
    o.discard = false;
    struct f2fuse *fs;
    int err = f2fuse_open(fz.path, &o, &fs);
    if (err)
        return err;
    static __thread struct walked kept[WALK_KEEP];
    unsigned nkept = 0;
    walk(fs, kept, &nkept);
    if (rw)
        mutate(fs, kept, nkept);
    f2fuse_close(fs);
    return 0;
}

void fz_fix_cp_crc(uint32_t blkaddr)
{
    uint8_t b[FZ_BLOCK];
    fz_read((uint64_t)blkaddr * FZ_BLOCK, b, FZ_BLOCK);
    uint32_t off = get_le(b + offsetof(struct f2fs_checkpoint, checksum_offset), 4);
    if (off < sizeof(struct f2fs_checkpoint) || off > FZ_BLOCK - 4)
        return;
    uint32_t crc = f2fs_crc32(F2FS_SUPER_MAGIC, b, off);
    fz_write((uint64_t)blkaddr * FZ_BLOCK + off, &crc, 4);
}

/* ---- the base image and its targets ------------------------------------------------- */

static void add_target(enum fz_target k, uint32_t blkaddr)
{
    if (blkaddr == NULL_ADDR || blkaddr == NEW_ADDR || blkaddr >= FZ_BLOCKS)
        return;
    uint32_t n = fz.target_count[k];
    for (uint32_t i = 0; i < n; i++)
        if (fz.targets[k][i] == blkaddr)
            return;
    uint32_t *t = realloc(fz.targets[k], sizeof(uint32_t) * (n + 1));
    if (!t)
        die("realloc");
    t[n] = blkaddr;
    fz.targets[k] = t;
    fz.target_count[k] = n + 1;
}

static uint32_t node_addr(struct f2fuse *fs, uint32_t nid)
{
    struct f2fs_nat_entry ne;
    return nat_lookup(fs, nid, &ne) ? 0 : le32(ne.block_addr);
}

/* Walks the base image through the core's own lookups and records where each kind of
 * structure lives. */
static void find_targets(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.backend = "psync";
    struct f2fuse *fs;
    if (f2fuse_open(fz.path, &o, &fs))
        die("the base image does not open");
    uint32_t queue[256];
    unsigned head = 0, tail = 0;
    queue[tail++] = fs->root_ino;
    struct name_list names = {.v = malloc(sizeof(*names.v) * WALK_MAX_DIR_ENTRIES),
                              .cap = WALK_MAX_DIR_ENTRIES};
    while (head < tail) {
        uint32_t dir = queue[head++];
        names.n = 0;
        f2fuse_readdir(fs, dir, 0, collect, &names);
        for (size_t i = 0; i <= names.n; i++) {
            struct f2fuse_attr a;
            if (i == names.n) { /* the directory itself, last */
                if (f2fuse_getattr(fs, dir, &a))
                    continue;
            } else if (names.v[i].name[0] == '.' ||
                       f2fuse_lookup(fs, dir, names.v[i].name, names.v[i].len, &a)) {
                continue;
            }
            if (S_ISDIR(a.mode) && i < names.n && tail < 256)
                queue[tail++] = a.ino;
            struct page *page;
            struct inode_info ii;
            if (inode_get(fs, a.ino, &page, &ii))
                continue;
            uint32_t iblk = node_addr(fs, a.ino);
            add_target(FZ_T_INODE, iblk);
            for (int k = 0; k < DEF_NIDS_PER_INODE; k++) {
                if (!ii.nids[k])
                    continue;
                add_target(FZ_T_NODE, node_addr(fs, ii.nids[k]));
                if (k >= 2) { /* an indirect node: its first child too */
                    struct page *ind;
                    if (node_get(fs, ii.nids[k], a.ino, &ind) == 0) {
                        add_target(FZ_T_NODE, node_addr(fs, le32(page_node(ind)->nid[0])));
                        pcache_put(fs->cache, ind);
                    }
                }
            }
            char list[64];
            if (ii.xattr_nid)
                add_target(FZ_T_XATTR, node_addr(fs, ii.xattr_nid));
            if (f2fuse_listxattr(fs, a.ino, list, 0) > 0 && (ii.inline_flags & F2FS_INLINE_XATTR))
                add_target(FZ_T_XATTR, iblk);
            bool dir_or_link = S_ISDIR(ii.mode) || S_ISLNK(ii.mode);
            enum fz_target k = S_ISDIR(ii.mode) ? FZ_T_DENTRY : FZ_T_SYMLINK;
            if (dir_or_link && (ii.inline_flags & (F2FS_INLINE_DENTRY | F2FS_INLINE_DATA)))
                add_target(k, iblk);
            else if (dir_or_link)
                for (uint64_t idx = 0; idx < 8 && idx * FZ_BLOCK < ii.size; idx++) {
                    uint32_t addr;
                    if (data_map(fs, &ii, &page_node(page)->i, idx, 1, &addr) == 0)
                        add_target(k, addr);
                }
            pcache_put(fs->cache, page);
        }
    }
    free(names.v);
    /* Metadata: NAT and SIT blocks and SSA blocks in use, the checkpoint's summaries. */
    const struct f2fs_super_block *sb = &fs->sb;
    uint32_t areas[3][2] = {{le32(sb->nat_blkaddr), le32(sb->segment_count_nat)},
                            {le32(sb->sit_blkaddr), le32(sb->segment_count_sit)},
                            {le32(sb->ssa_blkaddr), le32(sb->segment_count_ssa)}};
    for (int a = 0; a < 3; a++)
        for (uint32_t b = 0; b < areas[a][1] * F2FS_BLOCKS_PER_SEG; b++) {
            uint32_t addr = areas[a][0] + b;
            const uint8_t *blk = fz_base_block(addr);
            for (uint32_t j = 0; j < FZ_BLOCK; j++)
                if (blk[j]) {
                    add_target(FZ_T_META, addr);
                    break;
                }
        }
    for (uint32_t b = le32(fs->cp->cp_pack_start_sum);
         b + 1 < le32(fs->cp->cp_pack_total_block_count); b++)
        add_target(FZ_T_META, fs->cp_start + b);
    fz.cp_blkaddr = le32(sb->cp_blkaddr);
    f2fuse_close(fs);
}

static void load_image(const char *file)
{
    int in = open(file, O_RDONLY);
    if (in < 0)
        die(file);
    for (uint64_t off = 0; off < FZ_IMAGE_BYTES;) {
        ssize_t n = pread(in, fz.base + off, FZ_IMAGE_BYTES - off, (off_t)off);
        if (n <= 0)
            die("reading the base image");
        off += (uint64_t)n;
    }
    close(in);
    free(fz.nonzero);
    fz.nonzero = malloc(sizeof(uint32_t) * FZ_BLOCKS);
    fz.nonzero_count = 0;
    for (uint32_t b = 0; b < FZ_BLOCKS; b++) {
        const uint8_t *p = fz.base + (uint64_t)b * FZ_BLOCK;
        for (uint32_t j = 0; j < FZ_BLOCK; j += 8)
            if (*(const uint64_t *)(p + j)) {
                fz.nonzero[fz.nonzero_count++] = b;
                break;
            }
    }
    fz_image_base();
}

/* What f2fuse itself writes: inline and node xattrs (sload writes none). */
static void add_f2fuse_changes(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.backend = "psync";
    o.read_only = false;
    o.checkpoint_interval = 0;
    o.discard = false;
    struct f2fuse *fs;
    if (f2fuse_open(fz.path, &o, &fs))
        die("the base image does not open read-write");
    uint32_t root = f2fuse_root_ino(fs);
    struct f2fuse_attr a, d;
    static const char big[3000] = "a value too large for the inode";
    if (f2fuse_lookup(fs, root, "small", 5, &d) || f2fuse_lookup(fs, d.ino, "inline.txt", 10, &a) ||
        f2fuse_setxattr(fs, a.ino, "user.small", "v", 1, 0) ||
        f2fuse_setxattr(fs, a.ino, "trusted.big", big, sizeof(big), 0) ||
        f2fuse_lookup(fs, d.ino, "three_blocks", 12, &a) ||
        f2fuse_setxattr(fs, a.ino, "user.inline", "inline value", 12, 0) ||
        f2fuse_mknod(fs, root, "made_by_f2fuse", 14, 0100600, 0, 0, 0, &a) ||
        f2fuse_write(fs, a.ino, big, 100, 0) != 100)
        die("changing the base image");
    f2fuse_close(fs);
    fz_read(0, fz.base, FZ_IMAGE_BYTES);
    char file[160];
    snprintf(file, sizeof(file), "%s/base.img", fz.dir);
    int out = open(file, O_WRONLY | O_TRUNC);
    if (out < 0 || pwrite(out, fz.base, FZ_IMAGE_BYTES, 0) != FZ_IMAGE_BYTES)
        die("writing the base image");
    close(out);
}

void fz_init(bool with_base)
{
    if (!getenv("F2FUSE_FUZZ_LOG"))
        setenv("F2FUSE_LOG", "none", 1);
    fz.seed_dir = getenv("F2FUSE_FUZZ_SEEDS");
    fz.fd = memfd_create("f2fuse-fuzz", 0);
    if (fz.fd < 0)
        die("memfd_create");
    snprintf(fz.path, sizeof(fz.path), "/proc/self/fd/%d", fz.fd);
    fz_image_zero();
    if (!with_base && !fz.seed_dir)
        return;
    const char *tmp = getenv("TMPDIR");
    snprintf(fz.dir, sizeof(fz.dir), "%s/f2fuse-fuzz-base.XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(fz.dir))
        die("mkdtemp");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "%s/tests/fuzz/mkbase.sh %s", F2FUSE_SRC_ROOT, fz.dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "fuzz harness: %s failed\n", cmd);
        abort();
    }
    fz.base = malloc(FZ_IMAGE_BYTES);
    if (!fz.base)
        die("malloc");
    char file[160];
    snprintf(file, sizeof(file), "%s/base.img", fz.dir);
    load_image(file);
    add_f2fuse_changes();
    load_image(file);
    find_targets();
}

const uint32_t *fz_targets(enum fz_target kind, uint32_t *count)
{
    *count = fz.target_count[kind];
    return fz.targets[kind];
}

uint32_t fz_base_cp_blkaddr(void)
{
    return fz.cp_blkaddr;
}

bool fz_want_seeds(void)
{
    return fz.seed_dir != NULL;
}

void fz_seed(const char *name, const void *data, size_t size)
{
    char file[512];
    snprintf(file, sizeof(file), "%s/%s", fz.seed_dir, name);
    FILE *f = fopen(file, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f))
        die(file);
}

/* The whole image in the memfd as one block-list seed. */
static void seed_current_image(const char *name)
{
    uint8_t *img = malloc(FZ_IMAGE_BYTES), *out = malloc(FZ_IMAGE_BYTES + FZ_BLOCKS * 8u);
    if (!img || !out)
        die("malloc");
    fz_read(0, img, FZ_IMAGE_BYTES);
    size_t n = 0;
    for (uint32_t b = 0; b < FZ_BLOCKS; b++) {
        const uint8_t *p = img + (uint64_t)b * FZ_BLOCK;
        bool zero = true;
        for (uint32_t j = 0; j < FZ_BLOCK && zero; j++)
            zero = !p[j];
        if (!zero)
            n += fz_record(out + n, b, p);
    }
    fz_seed(name, out, n);
    free(out);
    free(img);
}

void fz_seed_whole_images(void)
{
    fz_image_base();
    seed_current_image("base");
    static const char *const others[] = {"fresh", "feat", "crypt"};
    for (int i = 0; i < 3; i++) {
        char file[160];
        snprintf(file, sizeof(file), "%s/%s.img", fz.dir, others[i]);
        int in = open(file, O_RDONLY);
        uint8_t *img = malloc(FZ_IMAGE_BYTES);
        if (in < 0 || !img || pread(in, img, FZ_IMAGE_BYTES, 0) != FZ_IMAGE_BYTES)
            die(file);
        close(in);
        fz_image_zero();
        fz_write(0, img, FZ_IMAGE_BYTES);
        free(img);
        seed_current_image(others[i]);
    }
    /* An fsync chain for roll-forward recovery: fsync'ed by f2fuse, never checkpointed
     * (the image is taken before close). */
    fz_image_base();
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    o.backend = "psync";
    o.read_only = false;
    o.checkpoint_interval = 0;
    o.discard = false;
    struct f2fuse *fs;
    if (f2fuse_open(fz.path, &o, &fs))
        die("the base image does not open read-write");
    struct f2fuse_attr a;
    static const char data[9000] = "fsync'ed";
    if (f2fuse_lookup(fs, f2fuse_root_ino(fs), "made_by_f2fuse", 14, &a) ||
        f2fuse_write(fs, a.ino, data, sizeof(data), 2000) != sizeof(data) ||
        f2fuse_fsync(fs, a.ino, false))
        die("fsync on the base image");
    seed_current_image("fsync_chain");
    f2fuse_close(fs);
}

/* ---- per-structure harnesses -------------------------------------------------------- */

int fz_block_harness(enum fz_target kind, const uint8_t *data, size_t size)
{
    uint32_t n;
    const uint32_t *t = fz_targets(kind, &n);
    if (size < 1 || n == 0)
        return 0;
    uint32_t blk = t[(data[0] & 0x7f) % n];
    bool rw = data[0] & 0x80;
    uint8_t b[FZ_BLOCK] = {0};
    memcpy(b, data + 1, size - 1 < FZ_BLOCK ? size - 1 : FZ_BLOCK);
    fz_write((uint64_t)blk * FZ_BLOCK, b, FZ_BLOCK);
    fz_mount_walk(rw);
    if (rw)
        fz_image_base();
    else
        fz_restore_block(blk);
    return 0;
}

void fz_block_seeds(enum fz_target kind)
{
    uint32_t n;
    const uint32_t *t = fz_targets(kind, &n);
    if (n == 0) {
        fprintf(stderr, "fuzz harness: the base image has no target of kind %d\n", kind);
        abort();
    }
    for (uint32_t i = 0; i < n && i < 24; i++) {
        uint8_t b[1 + FZ_BLOCK];
        const uint8_t *blk = fz_base_block(t[i]);
        uint32_t len = FZ_BLOCK;
        while (len && !blk[len - 1])
            len--;
        b[0] = (uint8_t)i;
        memcpy(b + 1, blk, len);
        char name[32];
        snprintf(name, sizeof(name), "block%02u", i);
        fz_seed(name, b, 1 + len);
        if (i < 4) { /* and read-write */
            b[0] |= 0x80;
            snprintf(name, sizeof(name), "block%02u_rw", i);
            fz_seed(name, b, 1 + len);
        }
    }
}
