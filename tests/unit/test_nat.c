/* Unit tests of the NAT manager (src/core/nat.c) against images made by the real
 * f2fs-tools 1.15: a bare mkfs.f2fs image (root in the NAT journal) and an mkfs + sload.f2fs
 * image of a generated tree of a few hundred files.  The read-only path (nat_lookup on a
 * second, read-only open) is the oracle for lookups; after a flush the raw NAT area is read
 * back to check which copies changed, fsck.f2fs --dry-run confirms that the committed
 * state is untouched, and a reload with the new bitmap reads the new copies.
 *
 * How a checkpoint commit is imitated here (there is no checkpoint writer in this test):
 * nat_fill_checkpoint fills a copy of the CP block; that copy replaces fs->cp_block's bytes
 * (fs->nat_bitmap points into it, so nat_load and nat_lookup then see the flipped bitmap),
 * the in-memory NAT journal is emptied (a checkpoint writes it empty), the page cache is
 * shrunk so that NAT blocks come from disk, and nat_load runs again.
 *
 * Randomized parts use F2FUSE_SEED (default: the time), printed first.  Skips (exit 77)
 * when mkfs.f2fs/sload.f2fs are missing. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api/api.h"

/* mkfs.f2fs 1.15 on 64 MiB leaves sload room for about one segment per log (the rest is
 * over-provisioning), too little for the tree below; the sload image is 128 MiB.  Both
 * have the same NAT: 2 segments, 512 blocks per copy. */
#define MKFS_IMG_MB  64
#define SLOAD_IMG_MB 128
#define NE_SIZE      sizeof(struct f2fs_nat_entry)

static uint64_t rng_state;
static char workdir[PATH_MAX];
static char img_mkfs[PATH_MAX + 32], img_sload[PATH_MAX + 32];
static char tool_mkfs[PATH_MAX], tool_sload[PATH_MAX], tool_fsck[PATH_MAX];
static unsigned case_no;

static uint64_t rnd(void)
{
    return check_rand(&rng_state);
}

static uint32_t rnd_below(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

/* ---- tools and images ---- */

static bool find_tool(const char *name, char *out)
{
    const char *dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        snprintf(out, PATH_MAX, "%s/%s", dirs[i], name);
        if (access(out, X_OK) == 0)
            return true;
    }
    return false;
}

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[4 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void write_file(const char *path, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    static uint8_t buf[65536];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 7 + size);
    while (size) {
        size_t n = size < sizeof(buf) ? size : sizeof(buf);
        if (write(fd, buf, n) != (ssize_t)n) {
            perror(path);
            exit(1);
        }
        size -= n;
    }
    close(fd);
}

/* About 500 files in 20 directories (enough nodes to reach the second NAT block), a
 * nested directory, symlinks, and two files big enough to need direct nodes. */
static void make_tree(const char *root)
{
    char path[PATH_MAX + 64];
    mkdir(root, 0755);
    for (int d = 0; d < 20; d++) {
        snprintf(path, sizeof(path), "%s/d%02d", root, d);
        mkdir(path, 0755);
        for (int f = 0; f < 25; f++) {
            snprintf(path, sizeof(path), "%s/d%02d/f%03d", root, d, f);
            uint32_t kind = rnd_below(10);
            size_t size = kind < 6 ? rnd_below(3000) : kind < 9 ? 4096 + rnd_below(20000) : 0;
            write_file(path, size);
        }
    }
    snprintf(path, sizeof(path), "%s/d00/sub", root);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/d00/sub/deeper", root);
    mkdir(path, 0755);
    for (int f = 0; f < 10; f++) {
        snprintf(path, sizeof(path), "%s/d00/sub/deeper/g%d", root, f);
        write_file(path, 100 * f);
        char target[64], link[PATH_MAX + 64];
        snprintf(target, sizeof(target), "deeper/g%d", f);
        snprintf(link, sizeof(link), "%s/d00/sub/l%d", root, f);
        if (symlink(target, link) != 0)
            perror(link);
    }
    snprintf(path, sizeof(path), "%s/big0", root);
    write_file(path, 4u << 20); /* 1024 blocks: past the 923 in the inode */
    snprintf(path, sizeof(path), "%s/d01/big1", root);
    write_file(path, 3700000);
}

static bool make_images(void)
{
    snprintf(img_mkfs, sizeof(img_mkfs), "%s/mkfs.img", workdir);
    snprintf(img_sload, sizeof(img_sload), "%s/sload.img", workdir);
    char tree[PATH_MAX + 16];
    snprintf(tree, sizeof(tree), "%s/tree", workdir);
    make_tree(tree);
    for (int i = 0; i < 2; i++) {
        const char *img = i ? img_sload : img_mkfs;
        if (run("truncate -s %dM '%s' && '%s' -f -q '%s' >'%s/mkfs.log' 2>&1",
                i ? SLOAD_IMG_MB : MKFS_IMG_MB, img, tool_mkfs, img, workdir) != 0) {
            fprintf(stderr, "mkfs.f2fs failed:\n");
            run("tail -n 20 '%s/mkfs.log' >&2", workdir);
            return false;
        }
    }
    int rc = run("'%s' -f '%s' -t / '%s' >'%s/sload.log' 2>&1", tool_sload, tree, img_sload,
                 workdir);
    if (rc != 0) {
        fprintf(stderr, "sload.f2fs exited %d:\n", rc);
        run("tail -n 20 '%s/sload.log' >&2", workdir);
        return false;
    }
    return true;
}

/* A private copy of an image for one case. */
static const char *image_copy(const char *src, char *dst, size_t n)
{
    snprintf(dst, n, "%s/case%u.img", workdir, ++case_no);
    if (run("cp --sparse=always '%s' '%s'", src, dst) != 0) {
        fprintf(stderr, "cannot copy %s\n", src);
        exit(1);
    }
    return dst;
}

/* fsck.f2fs --dry-run: exit 0, the full check ran, and no line reports a problem. */
static bool fsck_clean(const char *img)
{
    char log[PATH_MAX + 32];
    snprintf(log, sizeof(log), "%s/fsck.log", workdir);
    int rc = run("'%s' --dry-run '%s' >'%s' 2>&1", tool_fsck, img, log);
    int bad = run("grep -qE 'Fail|ASSERT|FIX|Do you want|[Ii]nvalid|Error|Can.t find' '%s'", log);
    int full = run("grep -qE '^\\[FSCK\\] other corrupted bugs +\\[Ok\\.\\.\\]' '%s'", log);
    if (rc != 0 || bad == 0 || full != 0) {
        run("sed 's/^/    fsck: /' '%s' | grep -vE 'Info:|Linux version|Ok\\.\\.' | head -20 >&2",
            log);
        return false;
    }
    return true;
}

/* ---- a struct f2fuse opened by hand for writing ---- */

static struct f2fuse *rw_open(const char *img)
{
    struct f2fuse *fs = calloc(1, sizeof(*fs));
    if (!fs)
        exit(1);
    f2fuse_options_init(&fs->opts);
    fs->opts.read_only = false;
    struct blk_options bo = {.backend = "uring", .queue_depth = 64, .read_only = false};
    int err = blk_open(img, &bo, &fs->dev);
    if (!err)
        err = pcache_create(fs->dev, 8u << 20, &fs->cache);
    if (!err)
        err = super_load(fs);
    if (!err)
        err = checkpoint_load(fs);
    if (!err)
        err = nat_load(fs, &fs->nat);
    if (err) {
        fprintf(stderr, "cannot open %s for writing: %s\n", img, strerror(-err));
        exit(1);
    }
    return fs;
}

static void rw_close(struct f2fuse *fs)
{
    nat_destroy(fs->nat);
    pcache_destroy(fs->cache);
    blk_close(fs->dev);
    free(fs->cp_block);
    free(fs);
}

static struct f2fuse *ro_open(const char *img)
{
    struct f2fuse *ro;
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    int err = f2fuse_open(img, &o, &ro);
    if (err) {
        fprintf(stderr, "cannot open %s read-only: %s\n", img, strerror(-err));
        exit(1);
    }
    return ro;
}

static bool entry_eq(const struct f2fs_nat_entry *a, const struct f2fs_nat_entry *b)
{
    return memcmp(a, b, NE_SIZE) == 0;
}

static uint32_t rnd_main_addr(struct f2fuse *fs)
{
    return fs->main_blkaddr + rnd_below(fs->main_blkend - fs->main_blkaddr);
}

/* The whole NAT area, both copies (nat_blocks · 2 blocks). */
static uint8_t *read_nat_area(struct f2fuse *fs)
{
    size_t bytes = (size_t)fs->nat_blocks * 2 * F2FS_BLKSIZE;
    uint8_t *buf = blk_alloc_buf(bytes);
    if (!buf || blk_read(fs->dev, (uint64_t)fs->nat_blkaddr * F2FS_BLKSIZE, buf, bytes) != 0) {
        fprintf(stderr, "cannot read the NAT area\n");
        exit(1);
    }
    return buf;
}

/* Copy `second` of NAT block b inside a read_nat_area buffer. */
static uint8_t *area_block(struct f2fuse *fs, uint8_t *area, uint32_t b, bool second)
{
    uint32_t rel = (b / F2FS_BLOCKS_PER_SEG) * 2 * F2FS_BLOCKS_PER_SEG + b % F2FS_BLOCKS_PER_SEG +
                   (second ? F2FS_BLOCKS_PER_SEG : 0);
    (void)fs;
    return area + (size_t)rel * F2FS_BLKSIZE;
}

static bool bitmap_bit(const uint8_t *map, uint32_t b)
{
    return map[b >> 3] & (0x80u >> (b & 7));
}

/* Imitates the commit of a checkpoint whose CP block nat_fill_checkpoint filled (see the
 * top of the file): what the checkpoint writer does once the pack is durable. */
static void fake_commit(struct f2fuse *fs)
{
    uint8_t *cp = blk_alloc_buf(F2FS_BLKSIZE);
    memcpy(cp, fs->cp_block, F2FS_BLKSIZE);
    nat_fill_checkpoint(fs->nat, (struct f2fs_checkpoint *)cp);
    memcpy(fs->cp_block, cp, F2FS_BLKSIZE);
    free(cp);
    fs->nat_journal_count = 0;
}

/* ... and then reloads the NAT manager from it. */
static void fake_commit_and_reload(struct f2fuse *fs)
{
    fake_commit(fs);
    nat_destroy(fs->nat);
    fs->nat = NULL;
    pcache_shrink(fs->cache);
    int err = nat_load(fs, &fs->nat);
    CHECK_EQ(err, 0);
}

/* ---- cases ---- */

/* mkfs puts the root (nid 3) into the NAT journal; nat_get must see it, and flush must
 * move it into NAT block 0. */
static void mkfs_root_from_journal(void)
{
    char img[PATH_MAX + 64];
    struct f2fuse *fs = rw_open(image_copy(img_mkfs, img, sizeof(img)));
    bool in_journal = false;
    for (unsigned i = 0; i < fs->nat_journal_count; i++)
        in_journal |= le32(fs->nat_journal[i].nid) == fs->root_ino;
    CHECK(in_journal);

    struct f2fs_nat_entry ne, ro;
    CHECK_EQ(nat_get(fs->nat, 3, &ne), 0);
    CHECK_EQ(le32(ne.ino), 3);
    CHECK_EQ(le32(ne.block_addr), fs->main_blkaddr);
    CHECK_EQ(nat_lookup(fs, 3, &ro), 0);
    CHECK(entry_eq(&ne, &ro));
    CHECK_EQ(nat_valid_nodes(fs->nat), 1);
    CHECK_EQ(nat_valid_inodes(fs->nat), 1);
    CHECK_EQ(nat_free_nids(fs->nat), fs->max_nid - 3 - 1);

    /* Out of range. */
    CHECK_EQ(nat_get(fs->nat, 0, &ne), -EIO);
    CHECK_EQ(nat_get(fs->nat, 2, &ne), -EIO);
    CHECK_EQ(nat_get(fs->nat, fs->max_nid, &ne), -EIO);
    CHECK_EQ(nat_set(fs->nat, fs->max_nid, 5, fs->main_blkaddr), -EINVAL);
    CHECK_EQ(nat_set(fs->nat, 1, 1, fs->main_blkaddr), -EINVAL);
    CHECK_EQ(nat_get(fs->nat, fs->max_nid - 1, &ne), 0);
    CHECK_EQ(le32(ne.block_addr), 0);

    /* The block copy of block 0 does not have the root; after the flush the other copy
     * does, and nothing else changed in it. */
    uint8_t *before = read_nat_area(fs);
    bool cur = bitmap_bit(fs->nat_bitmap, 0);
    CHECK_EQ(nat_flush(fs->nat), 0);
    uint8_t *after = read_nat_area(fs);
    CHECK(memcmp(area_block(fs, before, 0, cur), area_block(fs, after, 0, cur), F2FS_BLKSIZE) == 0);
    uint8_t *nb = area_block(fs, after, 0, !cur);
    CHECK(memcmp(nb + 3 * NE_SIZE, &ro, NE_SIZE) == 0);
    CHECK(memcmp(nb, area_block(fs, before, 0, cur), 3 * NE_SIZE) == 0); /* nids 0..2 */
    CHECK(memcmp(nb + 4 * NE_SIZE, area_block(fs, before, 0, cur) + 4 * NE_SIZE,
                 F2FS_BLKSIZE - 4 * NE_SIZE) == 0);
    /* Only block 0 moved. */
    for (uint32_t b = 1; b < fs->nat_blocks; b++)
        for (int c = 0; c < 2; c++)
            CHECK(memcmp(area_block(fs, before, b, c), area_block(fs, after, b, c), F2FS_BLKSIZE) ==
                  0);
    CHECK_EQ(nat_get(fs->nat, 3, &ne), 0);
    CHECK(entry_eq(&ne, &ro));
    CHECK(fsck_clean(img)); /* the committed copy is untouched */

    fake_commit_and_reload(fs);
    CHECK_EQ(nat_get(fs->nat, 3, &ne), 0);
    CHECK(entry_eq(&ne, &ro));
    CHECK_EQ(nat_lookup(fs, 3, &ne), 0); /* journal empty: read from the flipped block */
    CHECK(entry_eq(&ne, &ro));
    CHECK_EQ(nat_valid_nodes(fs->nat), 1);
    free(before);
    free(after);
    rw_close(fs);
}

struct walk {
    struct f2fuse *ro, *rw;
    unsigned files;
};

static void walk_dir(struct walk *w, uint32_t dir);

struct dirent_list {
    uint32_t ino[1024];
    unsigned type[1024];
    char name[1024][64];
    unsigned n;
};

static int collect(void *arg, const char *name, size_t namelen, uint32_t ino, unsigned type,
                   uint64_t next_cookie)
{
    struct dirent_list *l = arg;
    (void)next_cookie;
    if ((namelen == 1 && name[0] == '.') || (namelen == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    if (l->n < 1024 && namelen < 64) {
        l->ino[l->n] = ino;
        l->type[l->n] = type;
        memcpy(l->name[l->n], name, namelen);
        l->name[l->n][namelen] = 0;
        l->n++;
    }
    return 0;
}

static void walk_dir(struct walk *w, uint32_t dir)
{
    struct dirent_list *l = calloc(1, sizeof(*l));
    CHECK_EQ(f2fuse_readdir(w->ro, dir, 0, collect, l), 0);
    for (unsigned i = 0; i < l->n; i++) {
        struct f2fuse_attr attr;
        CHECK_EQ(f2fuse_lookup(w->ro, dir, l->name[i], strlen(l->name[i]), &attr), 0);
        CHECK_EQ(attr.ino, l->ino[i]);
        struct f2fs_nat_entry a, b;
        CHECK_EQ(nat_get(w->rw->nat, attr.ino, &a), 0);
        CHECK_EQ(nat_lookup(w->ro, attr.ino, &b), 0);
        CHECK(entry_eq(&a, &b));
        CHECK_EQ(le32(a.ino), attr.ino);
        CHECK(blkaddr_in_main(w->rw, le32(a.block_addr)));
        w->files++;
        if (S_ISDIR(attr.mode))
            walk_dir(w, attr.ino);
    }
    free(l);
}

/* Every nid of the sload'ed image resolves as the read-only path resolves it, and the
 * counts of used entries match the checkpoint. */
static void sload_matches_readonly_path(void)
{
    char img[PATH_MAX + 64];
    image_copy(img_sload, img, sizeof(img));
    struct f2fuse *fs = rw_open(img);
    struct f2fuse *ro = ro_open(img);
    uint32_t used = 0, inodes = 0, mismatches = 0, max_used = 0;
    for (uint32_t nid = 3; nid < fs->max_nid; nid++) {
        struct f2fs_nat_entry a, b;
        int ea = nat_get(fs->nat, nid, &a), eb = nat_lookup(ro, nid, &b);
        if (ea || eb || !entry_eq(&a, &b))
            mismatches++;
        if (le32(a.block_addr)) {
            used++;
            max_used = nid;
            inodes += le32(a.ino) == nid;
        }
    }
    CHECK_EQ(mismatches, 0);
    CHECK_EQ(used, le32(fs->cp->valid_node_count));
    CHECK_EQ(inodes, le32(fs->cp->valid_inode_count));
    CHECK_EQ(nat_valid_nodes(fs->nat), used);
    CHECK_EQ(nat_valid_inodes(fs->nat), inodes);
    CHECK(used > 500);
    CHECK(max_used >= NAT_ENTRY_PER_BLOCK); /* the tree spills into NAT block 1 */

    struct walk w = {.ro = ro, .rw = fs};
    walk_dir(&w, f2fuse_root_ino(ro));
    CHECK(w.files > 500);
    printf("    %u nodes, %u inodes, %u entries walked\n", used, inodes, w.files);
    f2fuse_close(ro);
    rw_close(fs);
}

/* Allocation never hands out a used nid, nids 0..2, or one handed out already; release
 * and reuse; the free count follows. */
static void alloc_skips_used(void)
{
    char img[PATH_MAX + 64];
    struct f2fuse *fs = rw_open(image_copy(img_sload, img, sizeof(img)));
    uint8_t *taken = calloc(fs->max_nid, 1);
    uint32_t valid = nat_valid_nodes(fs->nat);
    uint32_t n = 3000 + rnd_below(3000), *nids = malloc(n * sizeof(*nids));
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        CHECK_EQ(nat_alloc_nid(fs->nat, &nids[i]), 0);
        uint32_t nid = nids[i];
        struct f2fs_nat_entry ne;
        if (nid < 3 || nid >= fs->max_nid || taken[nid] || nat_get(fs->nat, nid, &ne) ||
            le32(ne.block_addr) != 0)
            bad++;
        else
            taken[nid] = 1;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(nat_free_nids(fs->nat), fs->max_nid - 3 - valid - n);

    /* Use a third, give a third back, free some of the used ones again. */
    uint32_t set = 0;
    for (uint32_t i = 0; i < n; i++) {
        switch (i % 3) {
        case 0:
            CHECK_EQ(nat_set(fs->nat, nids[i], nids[i], rnd_main_addr(fs)), 0);
            set++;
            break;
        case 1:
            nat_release_nid(fs->nat, nids[i]);
            taken[nids[i]] = 0;
            break;
        default: break;
        }
    }
    uint32_t outstanding = 0;
    for (uint32_t i = 0; i < n; i++)
        outstanding += i % 3 == 2;
    CHECK_EQ(nat_valid_nodes(fs->nat), valid + set);
    CHECK_EQ(nat_valid_inodes(fs->nat), le32(fs->cp->valid_inode_count) + set);
    CHECK_EQ(nat_free_nids(fs->nat), fs->max_nid - 3 - valid - set - outstanding);

    /* Allocate again: nothing in use, nothing still handed out. */
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nid;
        CHECK_EQ(nat_alloc_nid(fs->nat, &nid), 0);
        struct f2fs_nat_entry ne;
        if (nid < 3 || taken[nid] || nat_get(fs->nat, nid, &ne) || le32(ne.block_addr) != 0)
            bad++;
        taken[nid] = 1;
    }
    CHECK_EQ(bad, 0);

    /* A freed nid is reusable right away: free all that were set; they come back. */
    for (uint32_t i = 0; i < n; i += 3) {
        CHECK_EQ(nat_set(fs->nat, nids[i], nids[i], NULL_ADDR), 0);
        taken[nids[i]] = 0;
    }
    CHECK_EQ(nat_valid_nodes(fs->nat), valid);
    uint32_t reused = 0;
    for (uint32_t i = 0; i < set; i++) {
        uint32_t nid;
        CHECK_EQ(nat_alloc_nid(fs->nat, &nid), 0);
        if (taken[nid])
            bad++;
        taken[nid] = 1;
        for (uint32_t j = 0; j < n; j += 3)
            reused += nids[j] == nid;
    }
    CHECK_EQ(bad, 0);
    CHECK(reused > 0);
    printf("    %u allocated, %u reused after free\n", n, reused);
    free(taken);
    free(nids);
    rw_close(fs);
}

/* Allocating everything ends in -ENOSPC exactly when the counts say so, and the scan
 * (which goes all the way round) skips nids used only in memory; a released nid comes
 * back. */
static void alloc_until_enospc(void)
{
    char img[PATH_MAX + 64];
    struct f2fuse *fs = rw_open(image_copy(img_mkfs, img, sizeof(img)));
    uint32_t got = 0, nid, last = 0, bad = 0;
    uint8_t *taken = calloc(fs->max_nid, 1);
    /* Used in memory only (not flushed): some allocated, some picked directly. */
    for (int i = 0; i < 2000; i++) {
        CHECK_EQ(nat_alloc_nid(fs->nat, &nid), 0);
        CHECK_EQ(nat_set(fs->nat, nid, nid, rnd_main_addr(fs)), 0);
        taken[nid] = 1;
    }
    for (int i = 0; i < 2000; i++) {
        nid = 3 + rnd_below(fs->max_nid - 3);
        struct f2fs_nat_entry ne;
        CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
        if (le32(ne.block_addr) == 0)
            CHECK_EQ(nat_set(fs->nat, nid, 3, rnd_main_addr(fs)), 0);
        taken[nid] = 1;
    }
    uint32_t expect = nat_free_nids(fs->nat);
    int err;
    while ((err = nat_alloc_nid(fs->nat, &nid)) == 0) {
        struct f2fs_nat_entry ne;
        if (nid <= 3 || nid >= fs->max_nid || taken[nid] || nat_get(fs->nat, nid, &ne) ||
            le32(ne.block_addr))
            bad++;
        else
            taken[nid] = 1;
        last = nid;
        if (++got > expect)
            break;
    }
    CHECK_EQ(err, -ENOSPC);
    CHECK_EQ(got, expect);
    CHECK_EQ(bad, 0);
    CHECK_EQ(nat_free_nids(fs->nat), 0);
    nat_release_nid(fs->nat, last);
    CHECK_EQ(nat_free_nids(fs->nat), 1);
    CHECK_EQ(nat_alloc_nid(fs->nat, &nid), 0);
    CHECK_EQ(nid, last);
    CHECK_EQ(nat_alloc_nid(fs->nat, &nid), -ENOSPC);
    free(taken);
    rw_close(fs);
}

/* A model of every entry the test changed. */
struct model {
    struct f2fs_nat_entry *ne;
    uint8_t *known;
    uint32_t valid, inodes;
};

static void model_init(struct model *m, struct f2fuse *fs)
{
    m->ne = calloc(fs->max_nid, NE_SIZE);
    m->known = calloc(fs->max_nid, 1);
    m->valid = nat_valid_nodes(fs->nat);
    m->inodes = nat_valid_inodes(fs->nat);
}

static void model_free(struct model *m)
{
    free(m->ne);
    free(m->known);
}

/* nat_set through the model: the expected entry, version and counts. */
static void model_set(struct model *m, struct f2fuse *fs, uint32_t nid, uint32_t ino, uint32_t addr)
{
    struct f2fs_nat_entry old;
    CHECK_EQ(nat_get(fs->nat, nid, &old), 0);
    if (m->known[nid])
        CHECK(entry_eq(&old, &m->ne[nid]));
    uint32_t oa = le32(old.block_addr);
    struct f2fs_nat_entry ne = old;
    if (addr == NULL_ADDR) {
        if (oa != NULL_ADDR && oa != NEW_ADDR)
            ne.version++;
    } else {
        ne.ino = htole32(ino);
    }
    ne.block_addr = htole32(addr);
    if (oa == NULL_ADDR && addr != NULL_ADDR)
        m->valid++;
    if (oa != NULL_ADDR && addr == NULL_ADDR)
        m->valid--;
    bool was_inode = oa != NULL_ADDR && le32(old.ino) == nid;
    bool is_inode = addr != NULL_ADDR && le32(ne.ino) == nid;
    m->inodes += (int)is_inode - (int)was_inode;
    CHECK_EQ(nat_set(fs->nat, nid, ino, addr), 0);
    m->ne[nid] = ne;
    m->known[nid] = 1;
    struct f2fs_nat_entry now;
    CHECK_EQ(nat_get(fs->nat, nid, &now), 0);
    CHECK(entry_eq(&now, &ne));
    CHECK_EQ(nat_valid_nodes(fs->nat), m->valid);
    CHECK_EQ(nat_valid_inodes(fs->nat), m->inodes);
}

static uint32_t model_check_all(struct model *m, struct f2fuse *fs)
{
    uint32_t wrong = 0;
    for (uint32_t nid = 3; nid < fs->max_nid; nid++) {
        if (!m->known[nid])
            continue;
        struct f2fs_nat_entry ne;
        if (nat_get(fs->nat, nid, &ne) || !entry_eq(&ne, &m->ne[nid]))
            wrong++;
    }
    return wrong;
}

struct stat_sink {
    uint64_t written, dirty;
};

static void stat_collect(void *s, const char *name, uint64_t v)
{
    struct stat_sink *k = s;
    if (strcmp(name, "nat.blocks_written") == 0)
        k->written = v;
    if (strcmp(name, "nat.dirty_entries") == 0)
        k->dirty = v;
}

/* Changes in several NAT blocks → nat_flush → the other copies hold them, the old copies
 * are unchanged, fsck still passes (the committed state is intact), and a reload with the
 * flipped bitmap reads the new values.  Then two more rounds: after the commit the flush
 * goes back to the first copies; without a commit (a failed checkpoint) it rewrites the
 * same uncommitted copy. */
static void set_flush_roundtrip(void)
{
    char img[PATH_MAX + 64];
    image_copy(img_sload, img, sizeof(img));
    struct f2fuse *fs = rw_open(img);
    struct model m;
    model_init(&m, fs);
    const uint32_t blocks[] = {0, 1, 2, 17, 100, 255, 256, 400, 511};
    const size_t nblocks = sizeof(blocks) / sizeof(blocks[0]);
    uint8_t touched[512] = {0};
    CHECK_EQ(fs->nat_blocks, 512); /* the block list and arrays here assume it */
    if (fs->nat_blocks != 512) {
        model_free(&m);
        rw_close(fs);
        return;
    }

    /* Used nodes of the tree (blocks 0 and 1): free some, move some. */
    uint32_t freed = 0, moved = 0;
    for (uint32_t nid = 4; nid < 2 * NAT_ENTRY_PER_BLOCK; nid++) {
        struct f2fs_nat_entry ne;
        CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
        if (!le32(ne.block_addr))
            continue;
        uint32_t r = rnd_below(8);
        if (r == 0) {
            model_set(&m, fs, nid, le32(ne.ino), NULL_ADDR);
            freed++;
        } else if (r == 1) {
            model_set(&m, fs, nid, le32(ne.ino), rnd_main_addr(fs));
            moved++;
        } else {
            continue;
        }
        touched[nid / NAT_ENTRY_PER_BLOCK] = 1;
    }
    /* Fresh entries in every listed block: inodes and nodes of other inodes; some of them
     * freed again (version +1) and one set to NEW_ADDR and freed (no version change). */
    for (size_t i = 0; i < nblocks; i++) {
        uint32_t b = blocks[i];
        for (int k = 0; k < 12; k++) {
            uint32_t nid = b * NAT_ENTRY_PER_BLOCK + rnd_below(NAT_ENTRY_PER_BLOCK);
            if (nid < 3)
                continue;
            struct f2fs_nat_entry ne;
            CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
            if (le32(ne.block_addr))
                continue;
            uint32_t ino = rnd_below(2) ? nid : 3 + rnd_below(fs->max_nid - 3);
            model_set(&m, fs, nid, ino, rnd_main_addr(fs));
            if (k % 4 == 3)
                model_set(&m, fs, nid, ino, NULL_ADDR);
            if (k == 5) {
                model_set(&m, fs, nid, ino, NEW_ADDR);
                model_set(&m, fs, nid, ino, NULL_ADDR);
            }
            touched[b] = 1;
        }
    }
    touched[0] = 1; /* the root's journal entry */
    printf("    %u freed, %u moved, %u valid nodes after\n", freed, moved, m.valid);

    CHECK(nat_dirty_entries(fs->nat) > freed + moved);
    uint8_t *before = read_nat_area(fs);
    uint8_t old_bitmap[64];
    memcpy(old_bitmap, fs->nat_bitmap, sizeof(old_bitmap));
    uint8_t *expect = malloc(F2FS_BLKSIZE);
    CHECK_EQ(nat_flush(fs->nat), 0);
    uint8_t *after = read_nat_area(fs);
    uint32_t nchanged = 0;
    for (uint32_t b = 0; b < fs->nat_blocks; b++) {
        bool cur = bitmap_bit(old_bitmap, b);
        if (!touched[b]) {
            CHECK(memcmp(area_block(fs, before, b, 0), area_block(fs, after, b, 0), F2FS_BLKSIZE) ==
                  0);
            CHECK(memcmp(area_block(fs, before, b, 1), area_block(fs, after, b, 1), F2FS_BLKSIZE) ==
                  0);
            continue;
        }
        nchanged++;
        CHECK(memcmp(area_block(fs, before, b, cur), area_block(fs, after, b, cur), F2FS_BLKSIZE) ==
              0);
        memcpy(expect, area_block(fs, before, b, cur), F2FS_BLKSIZE);
        for (uint32_t i = 0; i < NAT_ENTRY_PER_BLOCK; i++) {
            uint32_t nid = b * NAT_ENTRY_PER_BLOCK + i;
            if (m.known[nid])
                memcpy(expect + i * NE_SIZE, &m.ne[nid], NE_SIZE);
        }
        for (unsigned j = 0; j < fs->nat_journal_count; j++) {
            uint32_t nid = le32(fs->nat_journal[j].nid);
            if (nid / NAT_ENTRY_PER_BLOCK == b && !m.known[nid])
                memcpy(expect + (nid % NAT_ENTRY_PER_BLOCK) * NE_SIZE, &fs->nat_journal[j].ne,
                       NE_SIZE);
        }
        CHECK(memcmp(area_block(fs, after, b, !cur), expect, F2FS_BLKSIZE) == 0);
    }
    CHECK_EQ(model_check_all(&m, fs), 0); /* through the cache, new copies */
    struct stat_sink sink = {0, 0};
    nat_emit_stats(fs->nat, stat_collect, &sink);
    CHECK_EQ(sink.written, nchanged);
    CHECK_EQ(sink.dirty, 0);
    CHECK_EQ(nat_dirty_entries(fs->nat), 0);
    CHECK(fsck_clean(img));

    /* The filled checkpoint: counts, hint, the flipped bitmap, nothing else touched. */
    uint8_t *cpb = blk_alloc_buf(F2FS_BLKSIZE);
    memcpy(cpb, fs->cp_block, F2FS_BLKSIZE);
    nat_fill_checkpoint(fs->nat, (struct f2fs_checkpoint *)cpb);
    const struct f2fs_checkpoint *cp = (const void *)cpb;
    CHECK_EQ(le32(cp->valid_node_count), m.valid);
    CHECK_EQ(le32(cp->valid_inode_count), m.inodes);
    CHECK_EQ(le32(cp->nat_ver_bitmap_bytesize), 64);
    CHECK(le32(((const struct f2fs_checkpoint *)fs->cp_block)->ckpt_flags) & CP_NAT_BITS_FLAG);
    CHECK_EQ(le32(cp->ckpt_flags),
             le32(((const struct f2fs_checkpoint *)fs->cp_block)->ckpt_flags) & ~CP_NAT_BITS_FLAG);
    uint32_t hint = le32(cp->next_free_nid);
    CHECK(hint >= 3 && hint < fs->max_nid);
    size_t off = (size_t)(fs->nat_bitmap - (const uint8_t *)fs->cp_block);
    CHECK_EQ(off, 192 + le32(cp->sit_ver_bitmap_bytesize));
    for (uint32_t b = 0; b < fs->nat_blocks; b++)
        CHECK_EQ(bitmap_bit(cpb + off, b), bitmap_bit(old_bitmap, b) ^ touched[b]);
    CHECK(memcmp(cpb + 192, (const uint8_t *)fs->cp_block + 192, off - 192) == 0); /* SIT */
    CHECK(memcmp(cpb + 8, (const uint8_t *)fs->cp_block + 8,
                 offsetof(struct f2fs_checkpoint, ckpt_flags) - 8) == 0);
    CHECK(memcmp(cpb + off + 64, (const uint8_t *)fs->cp_block + off + 64,
                 F2FS_BLKSIZE - off - 64) == 0);
    free(cpb);

    /* Reload from the flipped bitmap with an empty journal: the disk has everything, for
     * nat_get and for the read-only nat_lookup alike. */
    fake_commit_and_reload(fs);
    CHECK_EQ(model_check_all(&m, fs), 0);
    uint32_t mismatches = 0;
    for (uint32_t nid = 3; nid < fs->max_nid; nid++) {
        struct f2fs_nat_entry a, b;
        if (nat_get(fs->nat, nid, &a) || nat_lookup(fs, nid, &b) || !entry_eq(&a, &b))
            mismatches++;
    }
    CHECK_EQ(mismatches, 0);
    CHECK_EQ(nat_valid_nodes(fs->nat), m.valid);
    CHECK_EQ(nat_valid_inodes(fs->nat), m.inodes);

    /* Round 2 (committed = the flipped bitmap): block 17 goes back to its first copy. */
    uint8_t bm1[64];
    memcpy(bm1, fs->nat_bitmap, 64);
    free(before);
    before = after;
    uint32_t nid17 = 17 * NAT_ENTRY_PER_BLOCK + 7;
    model_set(&m, fs, nid17, nid17, rnd_main_addr(fs));
    CHECK_EQ(nat_flush(fs->nat), 0);
    after = read_nat_area(fs);
    bool c17 = bitmap_bit(bm1, 17);
    CHECK(memcmp(area_block(fs, before, 17, c17), area_block(fs, after, 17, c17), F2FS_BLKSIZE) ==
          0);
    CHECK(memcmp(area_block(fs, after, 17, !c17) + 7 * NE_SIZE, &m.ne[nid17], NE_SIZE) == 0);
    CHECK_EQ(model_check_all(&m, fs), 0);

    /* Round 3, without a commit (a checkpoint that failed): the same uncommitted copy is
     * written again; the committed one stays as it was. */
    model_set(&m, fs, nid17 + 1, nid17, rnd_main_addr(fs));
    CHECK_EQ(nat_flush(fs->nat), 0);
    uint8_t *after3 = read_nat_area(fs);
    CHECK(memcmp(area_block(fs, before, 17, c17), area_block(fs, after3, 17, c17), F2FS_BLKSIZE) ==
          0);
    CHECK(memcmp(area_block(fs, after3, 17, !c17) + 7 * NE_SIZE, &m.ne[nid17], 2 * NE_SIZE) == 0);
    CHECK_EQ(model_check_all(&m, fs), 0);

    /* Round 4, after a commit: now the other copy again. */
    fake_commit(fs);
    model_set(&m, fs, nid17 + 2, nid17, rnd_main_addr(fs));
    CHECK_EQ(nat_flush(fs->nat), 0);
    uint8_t *after4 = read_nat_area(fs);
    CHECK(memcmp(area_block(fs, after3, 17, !c17), area_block(fs, after4, 17, !c17),
                 F2FS_BLKSIZE) == 0);
    CHECK(memcmp(area_block(fs, after4, 17, c17) + 7 * NE_SIZE, &m.ne[nid17], 3 * NE_SIZE) == 0);
    CHECK_EQ(model_check_all(&m, fs), 0);

    free(before);
    free(after);
    free(after3);
    free(after4);
    free(expect);
    model_free(&m);
    rw_close(fs);
}

/* Versions: +1 per free of a written node, none for NEW_ADDR → NULL, wrapping at 256. */
static void versions_increment_on_free(void)
{
    char img[PATH_MAX + 64];
    struct f2fuse *fs = rw_open(image_copy(img_sload, img, sizeof(img)));
    uint32_t nid;
    CHECK_EQ(nat_alloc_nid(fs->nat, &nid), 0);
    struct f2fs_nat_entry ne;
    CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
    uint8_t v0 = ne.version;
    for (int i = 1; i <= 256; i++) {
        CHECK_EQ(nat_set(fs->nat, nid, nid, rnd_main_addr(fs)), 0);
        CHECK_EQ(nat_set(fs->nat, nid, nid, NULL_ADDR), 0);
        CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
        CHECK_EQ(ne.version, (uint8_t)(v0 + i));
        CHECK_EQ(le32(ne.ino), nid);
        CHECK_EQ(le32(ne.block_addr), 0);
        if (i == 100)
            CHECK_EQ(nat_flush(fs->nat), 0);
    }
    CHECK_EQ(nat_set(fs->nat, nid, nid, NEW_ADDR), 0);
    CHECK_EQ(nat_valid_nodes(fs->nat), le32(fs->cp->valid_node_count) + 1);
    CHECK_EQ(nat_flush(fs->nat), -EINVAL); /* a NEW_ADDR entry must not reach disk */
    CHECK_EQ(nat_set(fs->nat, nid, nid, NULL_ADDR), 0);
    CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
    CHECK_EQ(ne.version, v0);
    CHECK_EQ(nat_flush(fs->nat), 0);
    /* Freeing a node of the tree: the inode count follows only for an inode. */
    uint32_t inodes = nat_valid_inodes(fs->nat), nodes = nat_valid_nodes(fs->nat);
    uint32_t freed_inode = 0, freed_node = 0;
    for (uint32_t n = 4; n < fs->max_nid && (!freed_inode || !freed_node); n++) {
        CHECK_EQ(nat_get(fs->nat, n, &ne), 0);
        if (!le32(ne.block_addr))
            continue;
        bool inode = le32(ne.ino) == n;
        if ((inode && freed_inode) || (!inode && freed_node))
            continue;
        CHECK_EQ(nat_set(fs->nat, n, le32(ne.ino), NULL_ADDR), 0);
        struct f2fs_nat_entry now;
        CHECK_EQ(nat_get(fs->nat, n, &now), 0);
        CHECK_EQ(now.version, (uint8_t)(ne.version + 1));
        CHECK_EQ(le32(now.ino), le32(ne.ino));
        *(inode ? &freed_inode : &freed_node) = n;
    }
    CHECK(freed_inode && freed_node);
    CHECK_EQ(nat_valid_nodes(fs->nat), nodes - 2);
    CHECK_EQ(nat_valid_inodes(fs->nat), inodes - 1);
    rw_close(fs);
}

/* A random mix of operations checked against a model, with flushes, fake commits and
 * reloads in between. */
static void random_ops_against_model(void)
{
    char img[PATH_MAX + 64];
    struct f2fuse *fs = rw_open(image_copy(img_sload, img, sizeof(img)));
    struct model m;
    model_init(&m, fs);
    uint32_t *live = malloc(fs->max_nid * sizeof(*live)), nlive = 0;
    uint32_t *out = malloc(4096 * sizeof(*out)), nout = 0;
    uint8_t *handed = calloc(fs->max_nid, 1);
    uint32_t bad = 0;
    for (uint32_t nid = 3; nid < fs->max_nid; nid++) {
        struct f2fs_nat_entry ne;
        CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
        if (le32(ne.block_addr))
            live[nlive++] = nid;
    }
    for (int op = 0; op < 20000; op++) {
        uint32_t r = rnd_below(100), nid;
        if (r < 40 && nout < 4096) {
            if (nat_alloc_nid(fs->nat, &nid) != 0) {
                bad++;
                continue;
            }
            struct f2fs_nat_entry ne;
            CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
            if (handed[nid] || le32(ne.block_addr) || (m.known[nid] && le32(m.ne[nid].block_addr)))
                bad++;
            handed[nid] = 1;
            out[nout++] = nid;
        } else if (r < 70 && nout) {
            uint32_t i = rnd_below(nout);
            nid = out[i];
            out[i] = out[--nout];
            handed[nid] = 0;
            if (rnd_below(5) == 0) {
                nat_release_nid(fs->nat, nid);
            } else {
                uint32_t ino = rnd_below(3) || !nlive ? nid : live[rnd_below(nlive)];
                model_set(&m, fs, nid, ino, rnd_main_addr(fs));
                live[nlive++] = nid;
            }
        } else if (r < 85 && nlive) {
            uint32_t i = rnd_below(nlive);
            nid = live[i];
            live[i] = live[--nlive];
            model_set(&m, fs, nid, nid, NULL_ADDR);
        } else if (r < 95 && nlive) {
            nid = live[rnd_below(nlive)];
            struct f2fs_nat_entry ne;
            CHECK_EQ(nat_get(fs->nat, nid, &ne), 0);
            model_set(&m, fs, nid, le32(ne.ino), rnd_main_addr(fs));
        } else if (r < 99) {
            CHECK_EQ(nat_flush(fs->nat), 0);
            if (rnd_below(2))
                fake_commit(fs);
        } else if (nout == 0) {
            CHECK_EQ(nat_flush(fs->nat), 0);
            fake_commit_and_reload(fs);
            CHECK_EQ(model_check_all(&m, fs), 0);
        }
        CHECK_EQ(nat_free_nids(fs->nat), fs->max_nid - 3 - m.valid - nout);
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(model_check_all(&m, fs), 0);
    for (uint32_t i = 0; i < nout; i++)
        nat_release_nid(fs->nat, out[i]);
    CHECK_EQ(nat_flush(fs->nat), 0);
    fake_commit_and_reload(fs);
    CHECK_EQ(model_check_all(&m, fs), 0);
    CHECK_EQ(nat_valid_nodes(fs->nat), m.valid);
    CHECK_EQ(nat_valid_inodes(fs->nat), m.inodes);
    free(live);
    free(out);
    free(handed);
    model_free(&m);
    rw_close(fs);
}

/* Threads allocating, setting, reading and freeing at once: no nid is ever owned twice. */
struct thread_arg {
    struct f2fuse *fs;
    _Atomic uint8_t *owner;
    unsigned id;
    uint64_t seed;
    uint32_t bad, live_sets;
};

static void *thread_main(void *p)
{
    struct thread_arg *a = p;
    uint64_t s = a->seed | 1;
    uint32_t mine[256], n = 0;
    for (int op = 0; op < 4000; op++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        uint64_t r = s * 2685821657736338717ull;
        if ((r % 3 != 0 && n < 256) || n == 0) {
            uint32_t nid;
            if (nat_alloc_nid(a->fs->nat, &nid) != 0) {
                a->bad++;
                continue;
            }
            uint8_t zero = 0;
            if (!atomic_compare_exchange_strong(&a->owner[nid], &zero, (uint8_t)(a->id + 1)))
                a->bad++;
            uint32_t addr = a->fs->main_blkaddr + (uint32_t)(r >> 32) % 1000;
            if (nat_set(a->fs->nat, nid, nid, addr) != 0)
                a->bad++;
            struct f2fs_nat_entry ne;
            if (nat_get(a->fs->nat, nid, &ne) != 0 || le32(ne.block_addr) != addr)
                a->bad++;
            mine[n++] = nid;
        } else {
            uint32_t i = (uint32_t)(r >> 40) % n, nid = mine[i];
            mine[i] = mine[--n];
            atomic_store(&a->owner[nid], 0);
            if (nat_set(a->fs->nat, nid, nid, NULL_ADDR) != 0)
                a->bad++;
        }
    }
    a->live_sets = n;
    return NULL;
}

static void threads_never_share_a_nid(void)
{
    char img[PATH_MAX + 64];
    struct f2fuse *fs = rw_open(image_copy(img_sload, img, sizeof(img)));
    uint32_t nodes = nat_valid_nodes(fs->nat);
    _Atomic uint8_t *owner = calloc(fs->max_nid, 1);
    enum { NT = 6 };
    pthread_t t[NT];
    struct thread_arg args[NT];
    for (unsigned i = 0; i < NT; i++) {
        args[i] = (struct thread_arg){.fs = fs, .owner = owner, .id = i, .seed = rnd()};
        pthread_create(&t[i], NULL, thread_main, &args[i]);
    }
    uint32_t bad = 0, live = 0;
    for (unsigned i = 0; i < NT; i++) {
        pthread_join(t[i], NULL);
        bad += args[i].bad;
        live += args[i].live_sets;
    }
    CHECK_EQ(bad, 0);
    CHECK_EQ(nat_valid_nodes(fs->nat), nodes + live);
    CHECK_EQ(nat_flush(fs->nat), 0);
    fake_commit_and_reload(fs);
    CHECK_EQ(nat_valid_nodes(fs->nat), nodes + live);
    free((void *)owner);
    rw_close(fs);
}

static void remove_workdir(void)
{
    const char *keep = getenv("F2FUSE_KEEP");
    if (keep && *keep && strcmp(keep, "0") != 0)
        printf("kept %s\n", workdir);
    else
        run("rm -rf '%s'", workdir);
}

int main(void)
{
    uint64_t seed = check_seed();
    fflush(stdout);
    rng_state = seed * 0x9e3779b97f4a7c15ull | 1;

    if (!find_tool("mkfs.f2fs", tool_mkfs) || !find_tool("sload.f2fs", tool_sload) ||
        !find_tool("fsck.f2fs", tool_fsck)) {
        printf("skip: f2fs-tools (mkfs.f2fs, sload.f2fs, fsck.f2fs) not found\n");
        return 77;
    }
    const char *base = getenv("F2FUSE_TEST_DIR");
    if (!base || !*base)
        base = getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(workdir, sizeof(workdir), "%s/f2fuse-nat-XXXXXX", base);
    if (!mkdtemp(workdir)) {
        perror("mkdtemp");
        return 1;
    }
    atexit(remove_workdir); /* also when a helper gives up with exit(1) */
    if (!make_images())
        return 1;

    RUN(mkfs_root_from_journal);
    RUN(sload_matches_readonly_path);
    RUN(alloc_skips_used);
    RUN(alloc_until_enospc);
    RUN(set_flush_roundtrip);
    RUN(versions_increment_on_free);
    RUN(random_ops_against_model);
    RUN(threads_never_share_a_nid);

    return CHECK_DONE();
}
