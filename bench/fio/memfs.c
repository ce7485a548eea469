/* memfs: the FUSE ceiling for bench/fio (bench-only code, never part of f2fuse).
 *
 * A minimal in-memory file system on libfuse3's low-level API with the same dispatch as
 * f2fuse (multi-threaded loop, 1 MiB max_write, keep_cache, optional writeback_cache).  It
 * does as little per request as a file system can, so what fio measures through it is the
 * cost of the FUSE round trip on this machine; f2fuse is judged as a ratio to it.
 *
 *   memfs [-f] [-s] [-o writeback_cache] [-o fuse_ring=N] [-o other FUSE options] MOUNTPOINT
 *
 * Files keep their data in 4 KiB pages (sparse); directory entries sit in one hash table
 * keyed by (parent, name) for lookups and in a per-directory list for readdir.  Enough
 * for fio, the metadata workloads and a tarball.  Locking: one rwlock over the namespace
 * and the inode table, one mutex per inode for its data. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fuse/fuse_ring.h" /* the same io_uring transport as f2fuse */
#include "fuse/killpriv.h"

#define PAGE    4096u
#define MAX_IO  (1u << 20)
#define TIMEOUT 3600.0 /* f2fuse's attr_timeout */

struct mentry {
    struct mentry *next, **prev; /* the directory's list */
    struct mentry *hnext;        /* hash chain */
    fuse_ino_t parent, ino;
    char name[];
};

#define HASH_BITS 20

struct minode {
    pthread_mutex_t lock; /* data, size, times */
    struct stat st;
    char **pages; /* regular files: page index -> 4 KiB or NULL (a hole) */
    size_t npages;
    struct mentry *entries; /* directories */
    char *target;           /* symlinks */
    uint64_t nlookup;
};

struct memfs {
    pthread_rwlock_t ns; /* the inode table and every directory */
    struct minode **inodes;
    size_t ninodes, cap;
    struct mentry **hash; /* 1 << HASH_BITS chains */
    bool writeback_cache;
    bool no_opendir;    /* the kernel opens directories without a request (INIT) */
    unsigned fuse_ring; /* -o fuse_ring=N: requests over io_uring, as f2fuse's option */
    struct fuse_session *se;
    struct killpriv channel; /* the session's I/O hooks (kill flags not wanted here) */
    struct fuse_ring *ring;
};

static struct memfs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static struct minode *get(struct memfs *m, fuse_ino_t ino)
{
    return ino < m->ninodes ? m->inodes[ino] : NULL;
}

static void now(struct timespec *t)
{
    clock_gettime(CLOCK_REALTIME, t);
}

/* Under ns held for writing. */
static struct minode *new_inode(struct memfs *m, mode_t mode, const struct fuse_ctx *ctx)
{
    if (m->ninodes == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        struct minode **n = realloc(m->inodes, cap * sizeof(*n));
        if (!n)
            return NULL;
        m->inodes = n;
        m->cap = cap;
    }
    struct minode *in = calloc(1, sizeof(*in));
    if (!in)
        return NULL;
    pthread_mutex_init(&in->lock, NULL);
    in->st.st_ino = m->ninodes;
    in->st.st_mode = mode;
    in->st.st_nlink = S_ISDIR(mode) ? 2 : 1;
    in->st.st_uid = ctx ? ctx->uid : 0;
    in->st.st_gid = ctx ? ctx->gid : 0;
    in->st.st_blksize = PAGE;
    now(&in->st.st_mtim);
    in->st.st_atim = in->st.st_ctim = in->st.st_mtim;
    m->inodes[m->ninodes++] = in;
    return in;
}

static size_t hash_of(fuse_ino_t parent, const char *name)
{
    uint64_t h = 1469598103934665603ull ^ parent;
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 1099511628211ull;
    return (size_t)(h >> (64 - HASH_BITS));
}

static struct mentry *find(struct memfs *m, fuse_ino_t parent, const char *name)
{
    for (struct mentry *e = m->hash[hash_of(parent, name)]; e; e = e->hnext)
        if (e->parent == parent && strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* Under ns held for writing. */
static void link_entry(struct memfs *m, struct minode *dir, struct mentry *e)
{
    e->next = dir->entries;
    if (e->next)
        e->next->prev = &e->next;
    e->prev = &dir->entries;
    dir->entries = e;
    struct mentry **chain = &m->hash[hash_of(e->parent, e->name)];
    e->hnext = *chain;
    *chain = e;
}

static void unlink_entry(struct memfs *m, struct mentry *e)
{
    *e->prev = e->next;
    if (e->next)
        e->next->prev = e->prev;
    struct mentry **p = &m->hash[hash_of(e->parent, e->name)];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
}

static struct mentry *new_entry(fuse_ino_t parent, const char *name, fuse_ino_t ino)
{
    struct mentry *e = malloc(sizeof(*e) + strlen(name) + 1);
    if (e) {
        e->parent = parent;
        e->ino = ino;
        strcpy(e->name, name);
    }
    return e;
}

static void reply_entry(fuse_req_t req, struct minode *in)
{
    struct fuse_entry_param e = {
        .ino = in->st.st_ino, .attr_timeout = TIMEOUT, .entry_timeout = TIMEOUT, .attr = in->st};
    in->nlookup++;
    fuse_reply_entry(req, &e);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct memfs *m = userdata;
    conn->max_write = MAX_IO;
    conn->max_readahead = MAX_IO;
    conn->max_background = 64; /* as f2fuse (src/fuse/mount.c: struct fuse_perf_opts) */
    conn->congestion_threshold = 48;
    if (m->writeback_cache && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    /* The kernel-side setup of f2fuse (src/fuse/mount.c, op_init): written pages stay
     * cached, directories open without a request. */
    conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
    m->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (fs_of(req)->no_opendir) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_wrlock(&m->ns); /* nlookup changes */
    struct mentry *e = find(m, parent, name);
    if (e) {
        reply_entry(req, m->inodes[e->ino]);
    } else {
        struct fuse_entry_param neg = {.entry_timeout = TIMEOUT};
        fuse_reply_entry(req, &neg);
    }
    pthread_rwlock_unlock(&m->ns);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n)
{
    fuse_reply_none(req); /* inodes live as long as the mount: the ceiling needs no reclaim */
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_rdlock(&m->ns);
    struct minode *in = get(m, ino);
    if (!in) {
        pthread_rwlock_unlock(&m->ns);
        fuse_reply_err(req, ENOENT);
        return;
    }
    pthread_mutex_lock(&in->lock);
    struct stat st = in->st;
    pthread_mutex_unlock(&in->lock);
    pthread_rwlock_unlock(&m->ns);
    fuse_reply_attr(req, &st, TIMEOUT);
}

static void truncate_pages(struct minode *in, off_t size)
{
    size_t keep = ((size_t)size + PAGE - 1) / PAGE;
    for (size_t i = keep; i < in->npages; i++) {
        free(in->pages[i]);
        in->pages[i] = NULL;
    }
    if (keep > 0 && keep <= in->npages && in->pages[keep - 1] && size % PAGE)
        memset(in->pages[keep - 1] + size % PAGE, 0, PAGE - size % PAGE);
    in->st.st_size = size;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_rdlock(&m->ns);
    struct minode *in = get(m, ino);
    if (!in) {
        pthread_rwlock_unlock(&m->ns);
        fuse_reply_err(req, ENOENT);
        return;
    }
    pthread_mutex_lock(&in->lock);
    if (to_set & FUSE_SET_ATTR_MODE)
        in->st.st_mode = (in->st.st_mode & S_IFMT) | (attr->st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID)
        in->st.st_uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID)
        in->st.st_gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE)
        truncate_pages(in, attr->st_size);
    if (to_set & FUSE_SET_ATTR_ATIME)
        in->st.st_atim = attr->st_atim;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW)
        now(&in->st.st_atim);
    if (to_set & FUSE_SET_ATTR_MTIME)
        in->st.st_mtim = attr->st_mtim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW)
        now(&in->st.st_mtim);
    now(&in->st.st_ctim);
    struct stat st = in->st;
    pthread_mutex_unlock(&in->lock);
    pthread_rwlock_unlock(&m->ns);
    fuse_reply_attr(req, &st, TIMEOUT);
}

static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      const char *target, struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_wrlock(&m->ns);
    struct minode *dir = get(m, parent);
    int err = 0;
    struct minode *in = NULL;
    struct mentry *e = NULL;
    if (!dir || !S_ISDIR(dir->st.st_mode))
        err = ENOENT;
    else if (find(m, parent, name))
        err = EEXIST;
    else if (!(e = new_entry(parent, name, 0)) || !(in = new_inode(m, mode, fuse_req_ctx(req))))
        err = ENOMEM;
    if (!err && target) {
        in->target = strdup(target);
        in->st.st_size = (off_t)strlen(target);
    }
    if (err) {
        free(e);
        pthread_rwlock_unlock(&m->ns);
        fuse_reply_err(req, err);
        return;
    }
    e->ino = in->st.st_ino;
    link_entry(m, dir, e);
    if (S_ISDIR(mode))
        dir->st.st_nlink++;
    now(&dir->st.st_mtim);
    if (fi) {
        struct fuse_entry_param ep = {.ino = in->st.st_ino,
                                      .attr_timeout = TIMEOUT,
                                      .entry_timeout = TIMEOUT,
                                      .attr = in->st};
        in->nlookup++;
        fi->keep_cache = 1;
        fuse_reply_create(req, &ep, fi);
    } else {
        reply_entry(req, in);
    }
    pthread_rwlock_unlock(&m->ns);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    make_node(req, parent, name, mode, NULL, NULL);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make_node(req, parent, name, S_IFDIR | (mode & 07777), NULL, NULL);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    make_node(req, parent, name, S_IFREG | (mode & 07777), NULL, fi);
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name)
{
    make_node(req, parent, name, S_IFLNK | 0777, target, NULL);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_rdlock(&m->ns);
    struct minode *in = get(m, ino);
    if (in && in->target)
        fuse_reply_readlink(req, in->target);
    else
        fuse_reply_err(req, EINVAL);
    pthread_rwlock_unlock(&m->ns);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_wrlock(&m->ns);
    struct minode *dir = get(m, parent), *in = get(m, ino);
    struct mentry *e = NULL;
    int err = !dir || !in ? ENOENT : find(m, parent, name) ? EEXIST : 0;
    if (!err && !(e = new_entry(parent, name, ino)))
        err = ENOMEM;
    if (err) {
        pthread_rwlock_unlock(&m->ns);
        fuse_reply_err(req, err);
        return;
    }
    link_entry(m, dir, e);
    in->st.st_nlink++;
    reply_entry(req, in);
    pthread_rwlock_unlock(&m->ns);
}

/* Unlinked inodes keep their number (never reused) and drop their data. */
static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, bool want_dir)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_wrlock(&m->ns);
    struct minode *dir = get(m, parent);
    struct mentry *e = dir ? find(m, parent, name) : NULL;
    struct minode *in = e ? m->inodes[e->ino] : NULL;
    int err = !e ? ENOENT : 0;
    if (!err && want_dir && !S_ISDIR(in->st.st_mode))
        err = ENOTDIR;
    else if (!err && !want_dir && S_ISDIR(in->st.st_mode))
        err = EISDIR;
    else if (!err && want_dir && in->entries)
        err = ENOTEMPTY;
    if (!err) {
        unlink_entry(m, e);
        free(e);
        if (want_dir) {
            dir->st.st_nlink--;
            in->st.st_nlink = 0;
        } else if (--in->st.st_nlink == 0) {
            pthread_mutex_lock(&in->lock);
            truncate_pages(in, 0);
            pthread_mutex_unlock(&in->lock);
        }
        now(&dir->st.st_mtim);
    }
    pthread_rwlock_unlock(&m->ns);
    fuse_reply_err(req, err);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    remove_entry(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    remove_entry(req, parent, name, true);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    struct memfs *m = fs_of(req);
    if (flags) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    pthread_rwlock_wrlock(&m->ns);
    struct minode *from = get(m, parent), *to = get(m, newparent);
    struct mentry *e = from ? find(m, parent, name) : NULL;
    struct mentry *n = NULL;
    int err = !e || !to ? ENOENT : 0;
    if (!err && !(n = new_entry(newparent, newname, e->ino)))
        err = ENOMEM;
    if (!err) {
        unlink_entry(m, e);
        free(e);
        struct mentry *old = find(m, newparent, newname);
        if (old) { /* replaced: the old inode loses a name */
            unlink_entry(m, old);
            m->inodes[old->ino]->st.st_nlink--;
            free(old);
        }
        link_entry(m, to, n);
    }
    pthread_rwlock_unlock(&m->ns);
    fuse_reply_err(req, err);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    if (fi->flags & O_TRUNC) {
        pthread_rwlock_rdlock(&m->ns);
        struct minode *in = get(m, ino);
        pthread_mutex_lock(&in->lock);
        truncate_pages(in, 0);
        pthread_mutex_unlock(&in->lock);
        pthread_rwlock_unlock(&m->ns);
    }
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    if (size > MAX_IO)
        size = MAX_IO;
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_rwlock_rdlock(&m->ns);
    struct minode *in = get(m, ino);
    pthread_mutex_lock(&in->lock);
    size_t n = off >= in->st.st_size ? 0 : (size_t)(in->st.st_size - off);
    if (n > size)
        n = size;
    for (size_t done = 0; done < n;) {
        size_t pg = (size_t)(off + done) / PAGE, at = (size_t)(off + done) % PAGE;
        size_t len = PAGE - at < n - done ? PAGE - at : n - done;
        if (pg < in->npages && in->pages[pg])
            memcpy(buf + done, in->pages[pg] + at, len);
        else
            memset(buf + done, 0, len);
        done += len;
    }
    pthread_mutex_unlock(&in->lock);
    pthread_rwlock_unlock(&m->ns);
    fuse_reply_buf(req, buf, n);
    free(buf);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    pthread_rwlock_rdlock(&m->ns);
    struct minode *in = get(m, ino);
    pthread_mutex_lock(&in->lock);
    size_t last = (size_t)(off + (off_t)size + PAGE - 1) / PAGE;
    int err = 0;
    if (last > in->npages) {
        size_t cap = in->npages ? in->npages : 16;
        while (cap < last)
            cap *= 2;
        char **p = realloc(in->pages, cap * sizeof(*p));
        if (p) {
            memset(p + in->npages, 0, (cap - in->npages) * sizeof(*p));
            in->pages = p;
            in->npages = cap;
        } else {
            err = ENOMEM;
        }
    }
    for (size_t done = 0; !err && done < size;) {
        size_t pg = (size_t)(off + (off_t)done) / PAGE, at = (size_t)(off + (off_t)done) % PAGE;
        size_t len = PAGE - at < size - done ? PAGE - at : size - done;
        if (!in->pages[pg] && !(in->pages[pg] = calloc(1, PAGE)))
            err = ENOMEM;
        else
            memcpy(in->pages[pg] + at, buf + done, len);
        done += len;
    }
    if (!err && off + (off_t)size > in->st.st_size)
        in->st.st_size = off + (off_t)size;
    pthread_mutex_unlock(&in->lock);
    pthread_rwlock_unlock(&m->ns);
    if (err)
        fuse_reply_err(req, err);
    else
        fuse_reply_write(req, size);
}

static void op_ok(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    fuse_reply_err(req, 0);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    struct memfs *m = fs_of(req);
    char *buf = malloc(size ? size : 1);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    pthread_rwlock_rdlock(&m->ns);
    struct minode *dir = get(m, ino);
    size_t used = 0;
    off_t pos = 0;
    /* Offsets are positions in the list: good enough for a listing nobody changes. */
    const char *dots[2] = {".", ".."};
    for (; pos < 2; pos++) {
        if (pos < off)
            continue;
        struct stat st = {.st_ino = ino, .st_mode = S_IFDIR};
        size_t need = fuse_add_direntry(req, buf + used, size - used, dots[pos], &st, pos + 1);
        if (used + need > size)
            goto done;
        used += need;
    }
    for (struct mentry *e = dir ? dir->entries : NULL; e; e = e->next, pos++) {
        if (pos < off)
            continue;
        struct stat st = {.st_ino = e->ino, .st_mode = m->inodes[e->ino]->st.st_mode};
        size_t need = fuse_add_direntry(req, buf + used, size - used, e->name, &st, pos + 1);
        if (used + need > size)
            break;
        used += need;
    }
done:
    pthread_rwlock_unlock(&m->ns);
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs st = {.f_bsize = PAGE,
                         .f_frsize = PAGE,
                         .f_blocks = 1u << 24,
                         .f_bfree = 1u << 23,
                         .f_bavail = 1u << 23,
                         .f_files = 1u << 24,
                         .f_ffree = 1u << 23,
                         .f_namemax = 255};
    fuse_reply_statfs(req, &st);
}

static const struct fuse_lowlevel_ops memfs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .symlink = op_symlink,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .link = op_link,
    .open = op_open,
    .opendir = op_opendir,
    .read = op_read,
    .write = op_write,
    .flush = op_ok,
    .release = op_ok,
    .fsync = op_fsync,
    .readdir = op_readdir,
    .releasedir = op_ok,
    .fsyncdir = op_fsync,
    .statfs = op_statfs,
    .create = op_create,
};

static struct killpriv *channel_of(void *userdata)
{
    return &((struct memfs *)userdata)->channel;
}

static void start_ring(void *userdata)
{
    struct memfs *m = userdata;
    if (!atomic_load(&m->channel.ring_flagged) ||
        fuse_ring_start(m->se, fuse_session_fd(m->se), m->fuse_ring, 1u << 20, &m->ring))
        fprintf(stderr, "memfs: no FUSE over io_uring; requests stay on /dev/fuse\n");
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct memfs *m = data;
    if (key == FUSE_OPT_KEY_OPT && strncmp(arg, "fuse_ring=", 10) == 0) {
        m->fuse_ring = (unsigned)strtoul(arg + 10, NULL, 10);
        return 0;
    }
    if (key == FUSE_OPT_KEY_OPT && strcmp(arg, "writeback_cache") == 0) {
        m->writeback_cache = true;
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct memfs m = {0};
    pthread_rwlock_init(&m.ns, NULL);
    m.hash = calloc((size_t)1 << HASH_BITS, sizeof(*m.hash));
    if (!m.hash)
        return 1;
    if (fuse_opt_parse(&args, &m, NULL, opt_proc) != 0)
        return 2;
    struct fuse_cmdline_opts fo;
    if (fuse_parse_cmdline(&args, &fo) != 0 || !fo.mountpoint) {
        fprintf(stderr, "usage: memfs [-f] [-s] [-o writeback_cache] MOUNTPOINT\n");
        return 2;
    }
    new_inode(&m, 0, NULL);              /* 0: no inode */
    new_inode(&m, S_IFDIR | 0755, NULL); /* 1: FUSE_ROOT_ID */
    fuse_opt_add_arg(&args, "-odefault_permissions,subtype=memfs,fsname=memfs");
    struct fuse_session *se = fuse_session_new(&args, &memfs_ops, sizeof(memfs_ops), &m);
    int ret = 1;
    if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, fo.mountpoint) != 0)
        goto out;
    m.se = se;
    if (m.fuse_ring) {
        m.channel.ring_flag = true;
        m.channel.on_init_replied = start_ring;
        if (killpriv_install(se, channel_of) != 0)
            fprintf(stderr, "memfs: cannot take over the session's I/O\n");
    }
    fuse_daemonize(fo.foreground);
    if (fo.singlethread) {
        ret = fuse_session_loop(se) != 0;
    } else {
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(cfg, fo.clone_fd);
        if (fo.max_idle_threads != UINT_MAX)
            fuse_loop_cfg_set_idle_threads(cfg, fo.max_idle_threads);
        ret = fuse_session_loop_mt(se, cfg) != 0;
        fuse_loop_cfg_destroy(cfg);
    }
    fuse_session_unmount(se);
    fuse_ring_stop(m.ring);
out:
    if (se) {
        fuse_remove_signal_handlers(se);
        fuse_session_destroy(se);
    }
    free(fo.mountpoint);
    fuse_opt_free_args(&args);
    return ret;
}
