/* The name index of big directories (src/core/dir_index.c) against the scan it replaces.
 *
 * Two directories of a few thousand names (deep enough to be indexed) go through a seeded
 * random run of creates, unlinks, hard links and renames (within one directory, across,
 * over an existing name, exchanges), with names of 1 to 255 bytes so that entries take 1
 * to 32 slots.  After every change a sample of names, present and absent, is looked up
 * with the index and again with it switched off (opts.dir_index: the hashed scan of the
 * format), and both must agree with the model.  On the way: checkpoints, a close and
 * reopen (indexes rebuilt from disk), and a cache budget too small to hold any index
 * (builds refused, lookups still right).  One directory starts on an image sload.f2fs
 * wrote, the other is made by f2fuse.  At the end no index may have been found stale and
 * fsck.f2fs -f must find the image clean.
 *
 * F2FUSE_SEED picks the run (default: the time), printed first.  Skips (exit 77) without
 * mkfs.f2fs/sload.f2fs. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "api/api.h"
#include "core/cachesize.h"

#define LOADED_NAMES  3000 /* written by sload.f2fs */
#define CREATED_NAMES 2500 /* created through f2fuse */
#define MAX_NAMES     8000
#define STEPS         6000

struct name {
    char text[256];
    size_t len;
    uint32_t ino;
};

struct model_dir {
    const char *label;
    uint32_t ino;
    struct name names[MAX_NAMES];
    unsigned count;
};

static uint64_t rng_state;
static char img[PATH_MAX], srcdir[PATH_MAX];
static struct f2fuse *fs;
static struct model_dir dirs[2];

static uint64_t rnd(void)
{
    return check_rand(&rng_state);
}

static uint32_t rnd_below(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

/* Mostly short names; one in eight long, up to F2FS_NAME_LEN (up to 32 slots). */
static void random_name(char *out, size_t *len)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
    size_t n = rnd_below(8) ? 1 + rnd_below(24) : 1 + rnd_below(255);
    for (size_t i = 0; i < n; i++)
        out[i] = chars[rnd_below(sizeof(chars) - 1)];
    out[n] = '\0';
    if ((n == 1 && out[0] == '.') || (n == 2 && out[0] == '.' && out[1] == '.'))
        out[0] = 'x';
    *len = n;
}

static int model_find(const struct model_dir *d, const char *text, size_t len)
{
    for (unsigned i = 0; i < d->count; i++)
        if (d->names[i].len == len && memcmp(d->names[i].text, text, len) == 0)
            return (int)i;
    return -1;
}

static void model_remove(struct model_dir *d, unsigned i)
{
    d->names[i] = d->names[--d->count];
}

/* A name absent from d. */
static void fresh_name(const struct model_dir *d, char *text, size_t *len)
{
    do
        random_name(text, len);
    while (model_find(d, text, *len) >= 0);
}

/* Looks name up with and without the index; both must give want (0: absent). */
static void check_lookup(const struct model_dir *d, const char *text, size_t len, uint32_t want)
{
    for (int indexed = 1; indexed >= 0; indexed--) {
        fs->opts.dir_index = indexed;
        struct f2fuse_attr a;
        int err = f2fuse_lookup(fs, d->ino, text, len, &a);
        if (want ? (err != 0 || a.ino != want) : err != -ENOENT) {
            fprintf(stderr, "%s: lookup of %.*s (%zu bytes) %s index: err %d ino %u, want %u\n",
                    d->label, (int)(len > 40 ? 40 : len), text, len, indexed ? "with" : "without",
                    err, err ? 0 : a.ino, want);
            check_failures++;
        }
    }
    fs->opts.dir_index = true;
}

static void check_sample(void)
{
    for (int k = 0; k < 2; k++) {
        struct model_dir *d = &dirs[k];
        for (int s = 0; s < 6 && d->count; s++) {
            const struct name *n = &d->names[rnd_below(d->count)];
            check_lookup(d, n->text, n->len, n->ino);
        }
        char text[256];
        size_t len;
        fresh_name(d, text, &len);
        check_lookup(d, text, len, 0);
    }
}

static void check_all(void)
{
    for (int k = 0; k < 2; k++)
        for (unsigned i = 0; i < dirs[k].count; i++)
            check_lookup(&dirs[k], dirs[k].names[i].text, dirs[k].names[i].len,
                         dirs[k].names[i].ino);
}

static int open_rw(void)
{
    return check_open_rw(img, "64M", &fs);
}

static void step_create(struct model_dir *d)
{
    if (d->count == MAX_NAMES)
        return;
    struct name *n = &d->names[d->count];
    fresh_name(d, n->text, &n->len);
    struct f2fuse_attr a;
    int err = f2fuse_mknod(fs, d->ino, n->text, n->len, S_IFREG | 0644, 0, 0, 0, &a);
    CHECK_EQ(err, 0);
    if (!err) {
        n->ino = a.ino;
        d->count++;
        f2fuse_forget(fs, a.ino, 1);
    }
}

static void step_unlink(struct model_dir *d)
{
    if (!d->count)
        return;
    unsigned i = rnd_below(d->count);
    CHECK_EQ(f2fuse_unlink(fs, d->ino, d->names[i].text, d->names[i].len), 0);
    model_remove(d, i);
}

static void step_link(struct model_dir *from, struct model_dir *to)
{
    if (!from->count || to->count == MAX_NAMES)
        return;
    struct name *n = &to->names[to->count];
    fresh_name(to, n->text, &n->len);
    n->ino = from->names[rnd_below(from->count)].ino;
    struct f2fuse_attr a;
    int err = f2fuse_link(fs, n->ino, to->ino, n->text, n->len, &a);
    CHECK_EQ(err, 0);
    if (!err) {
        to->count++;
        f2fuse_forget(fs, a.ino, 1);
    }
}

/* Renames a name of from into to: a fresh name, or over an existing one, or an exchange. */
static void step_rename(struct model_dir *from, struct model_dir *to)
{
    if (!from->count || !to->count || to->count == MAX_NAMES)
        return;
    unsigned i = rnd_below(from->count);
    struct name old = from->names[i];
    uint32_t kind = rnd_below(3);
    if (kind == 0) { /* to a fresh name */
        struct name n;
        fresh_name(to, n.text, &n.len);
        n.ino = old.ino;
        int err = f2fuse_rename(fs, from->ino, old.text, old.len, to->ino, n.text, n.len, 0);
        CHECK_EQ(err, 0);
        if (!err) {
            model_remove(from, i);
            to->names[to->count++] = n;
        }
        return;
    }
    unsigned j = rnd_below(to->count);
    struct name target = to->names[j];
    if (from == to && i == j)
        return;
    unsigned flags = kind == 1 ? 0 : F2FUSE_RENAME_EXCHANGE;
    if (old.ino == target.ino) /* two names of one inode: the kernel's VFS does nothing */
        return;
    int err = f2fuse_rename(fs, from->ino, old.text, old.len, to->ino, target.text, target.len,
                            flags);
    CHECK_EQ(err, 0);
    if (err)
        return;
    if (flags) {
        from->names[i].ino = target.ino;
        to->names[j].ino = old.ino;
    } else {
        to->names[j].ino = old.ino;
        model_remove(from, i); /* after: i may be the last entry, moved into j's place */
    }
}

static void run_steps(unsigned steps)
{
    for (unsigned s = 0; s < steps && !check_failures; s++) {
        struct model_dir *d = &dirs[rnd_below(2)], *other = &dirs[rnd_below(2)];
        uint32_t op = rnd_below(10);
        if (op < 4)
            step_create(d);
        else if (op < 7)
            step_unlink(d);
        else if (op < 8)
            step_link(d, other);
        else
            step_rename(d, other);
        check_sample();
        if (s % 1500 == 1499)
            CHECK_EQ(f2fuse_sync(fs), 0);
    }
}

/* sload.f2fs writes LOADED_NAMES files into /big of a fresh image. */
static int make_image(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(img, sizeof(img), "%s/f2fuse-test-dir-index.%d.img", tmp ? tmp : "/var/tmp",
             (int)getpid());
    snprintf(srcdir, sizeof(srcdir), "%s/f2fuse-test-dir-index.%d.src", tmp ? tmp : "/var/tmp",
             (int)getpid());
    if (sh("rm -rf %s && mkdir -p %s/big", srcdir, srcdir))
        return -1;
    struct model_dir *d = &dirs[0];
    for (unsigned i = 0; i < LOADED_NAMES; i++) {
        struct name *n = &d->names[d->count];
        fresh_name(d, n->text, &n->len);
        char path[PATH_MAX + 300];
        snprintf(path, sizeof(path), "%s/big/%s", srcdir, n->text);
        FILE *f = fopen(path, "w");
        if (!f)
            return -1;
        fclose(f);
        d->count++;
    }
    return sh("rm -f %s && truncate -s 256M %s && mkfs.f2fs -q -f %s >/dev/null && "
              "sload.f2fs -f %s %s >/dev/null",
              img, img, img, srcdir, img);
}

/* The model's inode numbers for the loaded names, read through the scan. */
static void learn_loaded(void)
{
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_lookup(fs, f2fuse_root_ino(fs), "big", 3, &a), 0);
    dirs[0].ino = a.ino;
    fs->opts.dir_index = false;
    for (unsigned i = 0; i < dirs[0].count; i++) {
        CHECK_EQ(f2fuse_lookup(fs, dirs[0].ino, dirs[0].names[i].text, dirs[0].names[i].len, &a),
                 0);
        dirs[0].names[i].ino = a.ino;
    }
    fs->opts.dir_index = true;
}

static void build_and_follow(void)
{
    dirs[0].label = "loaded";
    dirs[1].label = "created";
    learn_loaded();
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mkdir(fs, f2fuse_root_ino(fs), "made", 4, 0755, 0, 0, &a), 0);
    dirs[1].ino = a.ino;
    for (unsigned i = 0; i < CREATED_NAMES; i++)
        step_create(&dirs[1]);
    check_all(); /* lookups enough to build both indexes */
    check_all();
    CHECK(atomic_load(&fs->dir_indexes.builds) >= 2);
    uint64_t used = atomic_load(&fs->dir_indexes.lookups);
    run_steps(STEPS);
    CHECK(atomic_load(&fs->dir_indexes.lookups) > used);
    check_all();
}

/* Closes the mount after checking that no index was ever found stale. */
static void close_checked(void)
{
    CHECK_EQ(atomic_load(&fs->dir_indexes.stale), 0);
    f2fuse_close(fs);
    fs = NULL;
}

static void rebuilt_after_reopen(void)
{
    close_checked();
    if (open_rw())
        return;
    uint64_t builds = atomic_load(&fs->dir_indexes.builds);
    CHECK_EQ(builds, 0);
    check_all();
    check_all();
    CHECK(atomic_load(&fs->dir_indexes.builds) >= 2);
    run_steps(STEPS / 4);
    check_all();
}

static void refused_when_too_small(void)
{
    if (!fs)
        return;
    uint64_t budget = pcache_budget(fs->cache);
    close_checked(); /* drop the indexes, then reopen with room for none */
    if (open_rw())
        return;
    /* The cache sizer would put its own target back within a second (cache_size is a
     * fixed 64M here): stopped, it leaves the budget to this test. */
    cachesize_stop(fs);
    pcache_set_budget(fs->cache, PCACHE_MIN_BYTES);
    check_all();
    check_all();
    CHECK_EQ(atomic_load(&fs->dir_indexes.builds), 0);
    CHECK(atomic_load(&fs->dir_indexes.refused) >= 1);
    run_steps(STEPS / 6);
    check_all();
    pcache_set_budget(fs->cache, budget);
}

int main(void)
{
    if (!getenv("F2FUSE_LOG"))
        setenv("F2FUSE_LOG", "none", 1);
    uint64_t seed = check_seed();
    rng_state = seed * 2 + 1;
    if (make_image()) {
        printf("skip: mkfs.f2fs/sload.f2fs failed\n");
        return 77;
    }
    if (open_rw())
        return CHECK_DONE();
    RUN(build_and_follow);
    RUN(rebuilt_after_reopen);
    RUN(refused_when_too_small);
    if (fs)
        close_checked();
    CHECK_EQ(sh("fsck.f2fs -f %s >/dev/null 2>&1", img), 0);
    if (!check_failures)
        sh("rm -rf %s %s", img, srcdir);
    return CHECK_DONE();
}
