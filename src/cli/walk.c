/* `f2fuse walk IMAGE`: reads a whole image offline through the library — every directory,
 * every byte of every file, every symlink target and xattr — and prints one line per entry.
 * It is the read path's end-to-end check (tests run it under ASan/UBSan on damaged
 * images) and a quick way to see what an image holds without mounting it. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blk/blk.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "f2fuse.h"
#include "util/crc.h"

#define WALK_BUF (1u << 20)

struct walk {
    struct f2fuse *fs;
    bool quiet;
    unsigned errors;
    uint64_t entries, bytes;
    uint64_t encrypted; /* files whose contents need a key f2fuse does not have */
    void *buf;
    uint32_t *seen_dirs; /* directories entered, to stop at loops */
    size_t nseen, capseen;
    struct progress prog; /* entries walked of the inodes the checkpoint counts */
    uint64_t inodes;
    bool stopped; /* Ctrl-C: no further entries */
};

static void problem(struct walk *w, const char *path, const char *what, int err)
{
    w->errors++;
    fprintf(stderr, "f2fuse: error: %s: %s: %s\n", path, what, strerror(-err));
}

static bool seen_before(struct walk *w, uint32_t ino)
{
    for (size_t i = 0; i < w->nseen; i++)
        if (w->seen_dirs[i] == ino)
            return true;
    if (w->nseen == w->capseen) {
        size_t cap = w->capseen ? w->capseen * 2 : 64;
        uint32_t *n = realloc(w->seen_dirs, cap * sizeof(*n));
        if (!n)
            return true; /* out of memory: stop descending rather than risk a loop */
        w->seen_dirs = n;
        w->capseen = cap;
    }
    w->seen_dirs[w->nseen++] = ino;
    return false;
}

static void walk_xattrs(struct walk *w, const char *path, uint32_t ino)
{
    ssize_t n = f2fuse_listxattr(w->fs, ino, NULL, 0);
    if (n <= 0) {
        if (n < 0)
            problem(w, path, "listxattr", (int)n);
        return;
    }
    char *list = malloc((size_t)n);
    if (!list)
        return;
    n = f2fuse_listxattr(w->fs, ino, list, (size_t)n);
    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(list + off) + 1) {
        ssize_t v = f2fuse_getxattr(w->fs, ino, list + off, NULL, 0);
        if (v < 0)
            problem(w, path, list + off, (int)v);
        else if (!w->quiet)
            printf("  xattr %s (%zd bytes)\n", list + off, v);
    }
    free(list);
}

static void walk_file(struct walk *w, const char *path, const struct f2fuse_attr *a)
{
    uint32_t crc = ~0u;
    uint64_t off = 0;
    for (;;) {
        ssize_t n = f2fuse_read(w->fs, a->ino, w->buf, WALK_BUF, off);
        if (n == -ENOKEY && off == 0) {
            /* encrypted, and f2fuse has no key: nothing to read, nothing wrong */
            w->encrypted++;
            if (!w->quiet)
                printf("f %06o %u %llu encrypted %s\n", a->mode & 07777, a->nlink,
                       (unsigned long long)a->size, path);
            return;
        }
        if (n < 0) {
            problem(w, path, "read", (int)n);
            return;
        }
        if (n == 0)
            break;
        crc = f2fs_crc32(crc, w->buf, (size_t)n);
        off += (uint64_t)n;
    }
    w->bytes += off;
    if (off != a->size)
        problem(w, path, "file ends before its size", -EIO);
    if (!w->quiet)
        printf("f %06o %u %llu crc=%08x %s\n", a->mode & 07777, a->nlink,
               (unsigned long long)a->size, ~crc, path);
}

struct dir_list {
    struct walk *w;
    char **names;
    uint32_t *inos;
    size_t n, cap;
};

static int collect(void *arg, const char *name, size_t len, uint32_t ino, unsigned type,
                   uint64_t next)
{
    struct dir_list *l = arg;
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **nn = realloc(l->names, cap * sizeof(*nn));
        if (!nn)
            return 1;
        l->names = nn;
        uint32_t *ni = realloc(l->inos, cap * sizeof(*ni));
        if (!ni)
            return 1;
        l->inos = ni;
        l->cap = cap;
    }
    l->names[l->n] = strndup(name, len);
    l->inos[l->n] = ino;
    if (!l->names[l->n])
        return 1;
    l->n++;
    return 0;
}

static void walk_entry(struct walk *w, const char *path, uint32_t ino);

static void walk_dir(struct walk *w, const char *path, const struct f2fuse_attr *a)
{
    if (!w->quiet)
        printf("d %06o %u %llu - %s\n", a->mode & 07777, a->nlink, (unsigned long long)a->size,
               path);
    if (seen_before(w, a->ino)) {
        problem(w, path, "directory reached twice (a loop in the tree)", -ELOOP);
        return;
    }
    struct dir_list l = {.w = w};
    int err = f2fuse_readdir(w->fs, a->ino, 0, collect, &l);
    if (err)
        problem(w, path, "readdir", err);
    for (size_t i = 0; i < l.n; i++) {
        char child[PATH_MAX];
        if (snprintf(child, sizeof(child), "%s/%s", strcmp(path, "/") ? path : "", l.names[i]) >=
            (int)sizeof(child))
            problem(w, path, "path too long", -ENAMETOOLONG);
        else
            walk_entry(w, child, l.inos[i]);
        free(l.names[i]);
    }
    free(l.names);
    free(l.inos);
}

static void walk_entry(struct walk *w, const char *path, uint32_t ino)
{
    if (w->stopped || (w->stopped = progress_stop_requested(&w->prog)))
        return;
    progress_update(&w->prog, w->entries, w->inodes);
    struct f2fuse_attr a;
    int err = f2fuse_getattr(w->fs, ino, &a);
    if (err) {
        problem(w, path, "getattr", err);
        return;
    }
    w->entries++;
    if (S_ISDIR(a.mode)) {
        walk_dir(w, path, &a);
    } else if (S_ISREG(a.mode)) {
        walk_file(w, path, &a);
    } else if (S_ISLNK(a.mode)) {
        char target[PATH_MAX + 1];
        ssize_t n = f2fuse_readlink(w->fs, ino, target, PATH_MAX);
        if (n < 0) {
            problem(w, path, "readlink", (int)n);
        } else if (!w->quiet) {
            target[n] = '\0';
            printf("l %06o %u %zd %s -> %s\n", a.mode & 07777, a.nlink, n, path, target);
        }
    } else if (!w->quiet) {
        printf("%c %06o %u %llu - %s\n",
               S_ISFIFO(a.mode)   ? 'p'
               : S_ISSOCK(a.mode) ? 's'
               : S_ISCHR(a.mode)  ? 'c'
                                  : 'b',
               a.mode & 07777, a.nlink, (unsigned long long)a.size, path);
    }
    walk_xattrs(w, path, ino);
}

static void count_inodes(void *arg, const char *name, uint64_t value)
{
    if (strcmp(name, "fs.valid_inodes") == 0)
        *(uint64_t *)arg = value;
}

static void count_corrupt(void *arg, const char *name, uint64_t value)
{
    if (strcmp(name, "fs.corrupt_hits") == 0)
        *(uint64_t *)arg = value;
}

int walk_main(int argc, char **argv)
{
    struct f2fuse_options opts;
    f2fuse_options_init(&opts);
    struct f2fuse_test_options test = {0};
    struct walk w = {0};
    int c;
    while ((c = getopt(argc, argv, "qo:")) != -1) {
        if (c == 'q') {
            w.quiet = true;
        } else if (c == 'o') {
            if (cli_apply_options(&opts, &test, optarg) != 0)
                return 2;
        } else {
            fprintf(stderr, "usage: f2fuse walk [-q] [-o OPTIONS] IMAGE\n");
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "usage: f2fuse walk [-q] [-o OPTIONS] IMAGE\n");
        return 2;
    }
    progress_begin(&w.prog, "walk", false); /* before the library starts its threads */
    if (!w.quiet && isatty(STDOUT_FILENO))
        w.prog.draw = false; /* the listing itself shows the progress */
    int err = f2fuse_open_test(argv[optind], &opts, &test, &w.fs);
    if (err) {
        progress_end(&w.prog);
        fprintf(stderr, "f2fuse: error: cannot open %s: %s\n", argv[optind], strerror(-err));
        return 1;
    }
    f2fuse_stats(w.fs, count_inodes, &w.inodes); /* the checkpoint's count: the total */
    w.buf = blk_alloc_buf(WALK_BUF);
    if (!w.buf) {
        f2fuse_close(w.fs);
        progress_end(&w.prog);
        return 1;
    }
    walk_entry(&w, "/", f2fuse_root_ino(w.fs));
    if (!w.stopped)
        progress_update(&w.prog, w.entries, w.entries > w.inodes ? w.entries : w.inodes);
    /* Damage the library stepped over (a bad directory entry) is a problem too. */
    uint64_t corrupt = 0;
    f2fuse_stats(w.fs, count_corrupt, &corrupt);
    if (corrupt) {
        fprintf(stderr, "f2fuse: error: %llu damaged structure(s) met and skipped\n",
                (unsigned long long)corrupt);
        w.errors += (unsigned)corrupt;
    }
    free(w.buf);
    free(w.seen_dirs);
    f2fuse_close(w.fs);
    progress_end(&w.prog);
    if (w.stopped) {
        fprintf(stderr, "f2fuse: walk interrupted after %llu entries\n",
                (unsigned long long)w.entries);
        return 128 + w.prog.stop_signal;
    }
    fprintf(stderr,
            "f2fuse: walked %llu entries, %llu bytes of file data, %llu encrypted file(s), "
            "%u problem(s)\n",
            (unsigned long long)w.entries, (unsigned long long)w.bytes,
            (unsigned long long)w.encrypted, w.errors);
    return w.errors ? 1 : 0;
}
