/* The FUSE front end: libfuse3's low-level API, multi-threaded, over libf2fuse.
 *
 * FUSE's root node id is 1; f2fs's root inode is 3 and nid 1 is never a file, so the
 * root is the only inode number that is translated. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <linux/fs.h> /* FITRIM, struct fstrim_range */
#include <linux/fsverity.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "blk/blk.h"
#include "f2fuse.h"
#include "fuse/ctl.h"
#include "fuse/fileattr_ioctl.h"
#include "fuse/verity_ioctl.h"
#include "fuse/fuse_ring.h"
#include "fuse/inval_queue.h"
#include "fuse/key_ctl.h"
#include "fuse/killpriv.h"
#include "fuse/mount.h"
#include "fuse/options.h"
#include "util/log.h"

#define FEATURE_CASEFOLD 0x1000u /* f2fs's casefold bit in f2fuse_features */
#define FEATURE_ENCRYPT  0x0001u /* and its encrypt bit */
#define MAX_IO           FUSE_MAX_IO

/* The kernel's readahead window on this mount: FUSE's default (128 KiB) cuts buffered
 * sequential reads into 128 KiB READs; 1 MiB makes them 1 MiB (fuse-notes).  The bdi is
 * named by the mount's device number, found in mountinfo: a stat of the mount point would
 * wait for this very daemon, whose loop has not started yet. */
static void set_read_ahead(const char *mnt, unsigned kb)
{
    FILE *mi = fopen("/proc/self/mountinfo", "r");
    char line[PATH_MAX + 512], dev[32] = "";
    while (mi && fgets(line, sizeof(line), mi)) {
        char point[PATH_MAX], devno[32];
        /* "id parent major:minor root mountpoint ..."; octal escapes in paths are rare
         * enough that a mount point needing them just keeps the default window. */
        if (sscanf(line, "%*s %*s %31s %*s %4095s", devno, point) == 2 && !strcmp(point, mnt))
            snprintf(dev, sizeof(dev), "%s", devno); /* the last match is the top mount */
    }
    if (mi)
        fclose(mi);
    if (!dev[0]) {
        log_warn("read_ahead_kb: %s not found in mountinfo", mnt);
        return;
    }
    char path[96];
    snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
    FILE *f = fopen(path, "w");
    if (!f) {
        log_warn("cannot set %s: %s", path, strerror(errno));
        return;
    }
    fprintf(f, "%u\n", kb);
    if (fclose(f) != 0)
        log_warn("cannot set %s: %s", path, strerror(errno));
}

enum fuse_op {
    OP_LOOKUP,
    OP_GETATTR,
    OP_READLINK,
    OP_OPEN,
    OP_OPENDIR,
    OP_READ,
    OP_READDIR,
    OP_READDIRPLUS,
    OP_STATFS,
    OP_GETXATTR,
    OP_LISTXATTR,
    OP_CREATE,
    OP_MKNOD,
    OP_MKDIR,
    OP_SYMLINK,
    OP_LINK,
    OP_UNLINK,
    OP_RMDIR,
    OP_RENAME,
    OP_WRITE,
    OP_SETATTR,
    OP_FSYNC,
    OP_FSYNCDIR,
    OP_SETXATTR,
    OP_REMOVEXATTR,
    OP_FALLOCATE,
    OP_RELEASE,
    OP_IOCTL,
    OP_COUNT
};
static const char *const op_names[OP_COUNT] = {
    "lookup",      "getattr",  "readlink", "open",        "opendir",   "read",    "readdir",
    "readdirplus", "statfs",   "getxattr", "listxattr",   "create",    "mknod",   "mkdir",
    "symlink",     "link",     "unlink",   "rmdir",       "rename",    "write",   "setattr",
    "fsync",       "fsyncdir", "setxattr", "removexattr", "fallocate", "release", "ioctl"};

/* READ reply buffers above the malloc mmap threshold (128 KiB, set in main) are kept for
 * reuse: allocating one per request cost an mmap, 256 zero-filled page faults and an
 * munmap with its TLB shootdown, every 1 MiB readahead READ (bench/fio 128k read).  At
 * most READ_POOL_MAX are kept: their memory counts against the daemon's fixed overhead. */
#define READ_POOL_MAX 8
#define READ_POOL_MIN (128u << 10)
struct read_pool {
    pthread_mutex_t lock;
    void *bufs[READ_POOL_MAX]; /* each MAX_IO bytes */
    unsigned n;
};

/* The daemon's context: everything a request handler needs. */
struct daemon {
    struct f2fuse *fs;
    uint32_t root_ino;
    bool read_only;
    struct fuse_perf_opts perf;
    struct read_pool read_pool;
    atomic_uint_fast64_t requests[OP_COUNT];
    atomic_uint_fast64_t errors[OP_COUNT];
    struct id_map ids;        /* uid=, gid=, umask= (options.c) */
    struct killpriv killpriv; /* killpriv.c: no GETXATTR before every WRITE */
    struct fuse_session *se;  /* for notifications to the kernel */
    struct fuse_ring *ring;   /* fuse_ring.c, with -o fuse_ring; set once, atomically */
    bool casefold;            /* the image has casefolded or encrypted directories */
    /* Entries and attributes may be cached by the kernel for long (attr_timeout): every
     * change to the image passes through this daemon. */
    double timeout;
    bool no_opendir;           /* the kernel opens directories without asking (set at INIT) */
    struct inval_queue *inval; /* inval_queue.c, on images with casefold or encryption */
};

static struct killpriv *killpriv_of(void *userdata)
{
    return &((struct daemon *)userdata)->killpriv;
}

/* Once the kernel has the INIT reply: move requests to io_uring when asked to. */
static void start_ring(void *userdata)
{
    struct daemon *d = userdata;
    if (atomic_load(&d->killpriv.ring_flagged)) {
        struct fuse_ring *ring;
        fuse_ring_start(d->se, fuse_session_fd(d->se), d->perf.fuse_ring, MAX_IO, &ring);
        /* published for the control socket's thread (f2fuse stat) */
        __atomic_store_n(&d->ring, ring, __ATOMIC_RELEASE);
    } else if (!d->perf.ring_auto)
        log_warn("fuse_ring: the kernel does not offer FUSE over io_uring (as root: echo 1 > "
                 "/sys/module/fuse/parameters/enable_uring before mounting); requests stay "
                 "on /dev/fuse");
}

static struct daemon *daemon_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static uint32_t to_f2fs(const struct daemon *d, fuse_ino_t ino)
{
    return ino == FUSE_ROOT_ID ? d->root_ino : (uint32_t)ino;
}

static fuse_ino_t to_fuse(const struct daemon *d, uint32_t ino)
{
    return ino == d->root_ino ? FUSE_ROOT_ID : ino;
}

static void count(struct daemon *d, enum fuse_op op, int err)
{
    atomic_fetch_add(&d->requests[op], 1);
    if (err)
        atomic_fetch_add(&d->errors[op], 1);
}

static void attr_to_stat(const struct daemon *d, const struct f2fuse_attr *a, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = to_fuse(d, a->ino);
    st->st_mode = a->mode;
    st->st_nlink = a->nlink;
    st->st_uid = a->uid;
    st->st_gid = a->gid;
    st->st_size = (off_t)a->size;
    st->st_blocks = (blkcnt_t)a->blocks;
    st->st_blksize = 4096;
    st->st_rdev = a->rdev;
    st->st_atim = a->atime;
    st->st_mtim = a->mtime;
    st->st_ctim = a->ctime;
    id_map_apply(&d->ids, st);
}

static void reply_err(fuse_req_t req, int err)
{
    fuse_reply_err(req, err < 0 ? -err : err);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    struct daemon *d = userdata;
    conn->max_write = d->perf.max_write;
    conn->max_readahead = MAX_IO;
    conn->max_background = d->perf.max_background;
    unsigned congested = d->perf.max_background * 3 / 4;
    conn->congestion_threshold = congested ? congested : 1;
    if (conn->capable & FUSE_CAP_ASYNC_READ)
        conn->want |= FUSE_CAP_ASYNC_READ;
    if (d->perf.writeback_cache && !d->read_only && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    else
        conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    /* libfuse asks by default that every attribute reply with a new mtime drop the file's
     * cached pages: after a write, the next stat threw away what was just written (a 256 MiB
     * dd left 0 pages cached).  f2fuse holds the image's lock and is its only writer, and
     * every data change but its own reaches it through the kernel, which updates its cache
     * itself (write, truncate, O_TRUNC, fallocate's punch and zero); f2fuse invalidates
     * precisely what it changes on its own (verity enable, set-id bits). */
    conn->want &= ~(unsigned)FUSE_CAP_AUTO_INVAL_DATA;
    /* Directories: f2fuse keeps no state per open directory, so the kernel may open them
     * without a request (and then caches their listings, FOPEN_CACHE_DIR). */
    d->no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
    /* The kernel checks ACLs; creation gets the mode unmasked and the umask apart, as
     * POSIX.1e needs (a default ACL replaces the umask): the library applies either. */
    if ((conn->capable & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK))
        conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
}

/* The entry the kernel gets for a (its timeouts are the caller's). */
static void entry_fill(const struct daemon *d, const struct f2fuse_attr *a,
                       struct fuse_entry_param *e)
{
    e->ino = to_fuse(d, a->ino);
    e->generation = a->generation;
    attr_to_stat(d, a, &e->attr);
}

/* How long the kernel may trust a name in parent (positive or negative).  A casefolded
 * directory finds a name under any casing, but the dentry cache in front of FUSE compares
 * bytes: a cached "FOO" would outlive the unlink of "foo", a negative "FOO" would hide a
 * "foo" created later.  An encrypted directory's names change with its key (`f2fuse key`):
 * a no-key name, or a plaintext name found missing without the key, must not outlive it.
 * Names there are checked again at every use. */
static double entry_timeout(struct daemon *d, fuse_ino_t parent)
{
    struct f2fuse_attr a;
    if (!d->casefold)
        return d->timeout;
    if (f2fuse_getattr(d->fs, to_f2fs(d, parent), &a) != 0 ||
        (a.flags & (FS_CASEFOLD_FL | FS_ENCRYPT_FL)))
        return 0;
    return d->timeout;
}

/* Replies with the entry of a, which holds a lookup reference for the kernel. */
static void reply_entry_attr(fuse_req_t req, struct daemon *d, fuse_ino_t parent,
                             const struct f2fuse_attr *a)
{
    struct fuse_entry_param e = {.attr_timeout = d->timeout,
                                 .entry_timeout = entry_timeout(d, parent)};
    entry_fill(d, a, &e);
    if (fuse_reply_entry(req, &e) != 0)
        f2fuse_forget(d->fs, a->ino, 1); /* the kernel never got the reference */
}

/* The reply of an operation that makes a new name: its entry, or the error. */
static void reply_new_entry(fuse_req_t req, struct daemon *d, fuse_ino_t parent, enum fuse_op op,
                            int err, const struct f2fuse_attr *a)
{
    count(d, op, err);
    if (err)
        reply_err(req, err);
    else
        reply_entry_attr(req, d, parent, a);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct daemon *d = daemon_of(req);
    struct f2fuse_attr a;
    int err = f2fuse_lookup(d->fs, to_f2fs(d, parent), name, strlen(name), &a);
    count(d, OP_LOOKUP, err && err != -ENOENT);
    if (err == -ENOENT) {
        struct fuse_entry_param e = {.attr_timeout = d->timeout,
                                     .entry_timeout = entry_timeout(d, parent)};
        fuse_reply_entry(req, &e); /* ino 0: a negative entry the kernel may cache */
        return;
    }
    if (err) {
        reply_err(req, err);
        return;
    }
    reply_entry_attr(req, d, parent, &a);
}

/* The kernel drops lookup references: an unlinked inode goes with its last one. */
static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    struct daemon *d = daemon_of(req);
    f2fuse_forget(d->fs, to_f2fs(d, ino), nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count_, struct fuse_forget_data *forgets)
{
    struct daemon *d = daemon_of(req);
    for (size_t i = 0; i < count_; i++)
        f2fuse_forget(d->fs, to_f2fs(d, forgets[i].ino), forgets[i].nlookup);
    fuse_reply_none(req);
}

/* The reply of getattr and setattr: the attributes, or the error. */
static void reply_attr(fuse_req_t req, struct daemon *d, enum fuse_op op, int err,
                       const struct f2fuse_attr *a)
{
    count(d, op, err);
    if (err) {
        reply_err(req, err);
        return;
    }
    struct stat st;
    attr_to_stat(d, a, &st);
    fuse_reply_attr(req, &st, d->timeout);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    struct f2fuse_attr a;
    int err = f2fuse_getattr(d->fs, to_f2fs(d, ino), &a);
    reply_attr(req, d, OP_GETATTR, err, &a);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct daemon *d = daemon_of(req);
    char buf[PATH_MAX + 1];
    ssize_t n = f2fuse_readlink(d->fs, to_f2fs(d, ino), buf, PATH_MAX);
    count(d, OP_READLINK, n < 0);
    if (n < 0) {
        reply_err(req, (int)n);
        return;
    }
    buf[n] = '\0';
    fuse_reply_readlink(req, buf);
}

/* Open files are counted in the library so that an unlinked file lives on until its last
 * close (and a writable one as a writer: fs-verity's enable wants none).  fi->fh marks an
 * open that was counted and keeps its access mode, which release and ioctl need. */
#define FH_COUNTED       1u
#define FH_ACCMODE_SHIFT 1
#define fh_accmode(fh)   ((int)((fh) >> FH_ACCMODE_SHIFT) & O_ACCMODE)

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    int err = 0;
    if (d->read_only && ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)))
        err = -EROFS;
    if (!err) {
        /* The library refuses what the kernel's open does (an encrypted file without its
         * key, a verity file for writing). */
        err = f2fuse_open_file(d->fs, to_f2fs(d, ino), fi->flags);
        fi->fh = err ? 0 : FH_COUNTED | (uint64_t)(fi->flags & O_ACCMODE) << FH_ACCMODE_SHIFT;
    }
    if (!err && (fi->flags & O_TRUNC)) {
        /* libfuse asks for atomic O_TRUNC: the kernel sends no separate truncate, for an
         * O_RDONLY open either (the VFS truncates those too). */
        struct f2fuse_setattr sa = {.valid = F2FUSE_SET_SIZE | F2FUSE_SET_MTIME, .size = 0};
        if (killpriv_request_kills_suidgid())
            sa.valid |= F2FUSE_SET_KILL_SUIDGID;
        clock_gettime(CLOCK_REALTIME, &sa.mtime);
        err = f2fuse_setattr(d->fs, to_f2fs(d, ino), &sa, NULL);
        if (!err && (sa.valid & F2FUSE_SET_KILL_SUIDGID)) /* the mode may have changed */
            fuse_lowlevel_notify_inval_inode(d->se, ino, -1, 0);
        if (err && fi->fh)
            f2fuse_release_file(d->fs, to_f2fs(d, ino), fh_accmode(fi->fh));
    }
    count(d, OP_OPEN, err);
    if (err) {
        reply_err(req, err);
        return;
    }
    /* Nothing changes the image behind the kernel's back, so its page cache stays valid
     * across opens. */
    fi->keep_cache = d->perf.keep_cache;
    if (fuse_reply_open(req, fi) == -ENOENT && fi->fh) /* the opener was interrupted */
        f2fuse_release_file(d->fs, to_f2fs(d, ino), fh_accmode(fi->fh));
}

/* OPENDIR and RELEASEDIR cost two round trips per listing for nothing: the answer is
 * ENOSYS, after which the kernel never asks again (no_opendir, set at INIT).  An older
 * kernel gets the open, with its listings cached.  Regular files are different: the kernel's
 * no-open is one switch for every file, and f2fuse counts opens (an unlinked file lives
 * until its last close; fs-verity's enable needs no writer), refuses some (an encrypted
 * file without its key, a verity file for writing) and truncates in OPEN (atomic O_TRUNC,
 * which no-open would lose), so OPEN stays. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    count(d, OP_OPENDIR, 0);
    if (d->no_opendir) {
        fuse_reply_err(req, ENOSYS);
        return;
    }
    fi->cache_readdir = 1;
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    int err = fi->fh ? f2fuse_release_file(d->fs, to_f2fs(d, ino), fh_accmode(fi->fh)) : 0;
    count(d, OP_RELEASE, err);
    reply_err(req, err);
}

static void *read_buf_get(struct daemon *d, size_t size)
{
    if (size < READ_POOL_MIN)
        return blk_alloc_buf(size ? size : 1);
    void *buf = NULL;
    pthread_mutex_lock(&d->read_pool.lock);
    if (d->read_pool.n)
        buf = d->read_pool.bufs[--d->read_pool.n];
    pthread_mutex_unlock(&d->read_pool.lock);
    return buf ? buf : blk_alloc_buf(MAX_IO);
}

static void read_buf_put(struct daemon *d, void *buf, size_t size)
{
    if (buf && size >= READ_POOL_MIN) {
        pthread_mutex_lock(&d->read_pool.lock);
        bool kept = d->read_pool.n < READ_POOL_MAX;
        if (kept)
            d->read_pool.bufs[d->read_pool.n++] = buf;
        pthread_mutex_unlock(&d->read_pool.lock);
        if (kept)
            return;
    }
    free(buf);
}

/* A READ answered once its device read is done (f2fuse_read_async). */
struct pending_read {
    struct daemon *d;
    fuse_req_t req;
    void *buf;
    size_t size;
};

static void read_reply(struct daemon *d, fuse_req_t req, void *buf, ssize_t n)
{
    count(d, OP_READ, n < 0);
    if (n < 0)
        reply_err(req, (int)n);
    else
        fuse_reply_buf(req, buf, (size_t)n);
}

static void pending_read_done(void *arg, ssize_t n)
{
    struct pending_read *p = arg;
    read_reply(p->d, p->req, p->buf, n);
    read_buf_put(p->d, p->buf, p->size);
    free(p);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    if (size > MAX_IO)
        size = MAX_IO;
    void *ring_buf = fuse_ring_reply_buffer(size); /* read straight into the reply */
    void *buf = ring_buf ? ring_buf : read_buf_get(d, size);
    if (!buf) {
        count(d, OP_READ, -ENOMEM);
        reply_err(req, -ENOMEM);
        return;
    }
    /* An uncached block is read without holding this worker: it goes back to the queue, and
     * whichever backend thread completes the read answers it (bench/nbd: one thread switch
     * per request less).  A ring reply buffer belongs to this thread: the blocking way. */
    struct pending_read *p = ring_buf ? NULL : malloc(sizeof(*p));
    if (p) {
        *p = (struct pending_read){.d = d, .req = req, .buf = buf, .size = size};
        ssize_t n = f2fuse_read_async(d->fs, to_f2fs(d, ino), buf, size, (uint64_t)off,
                                      pending_read_done, p);
        if (n == -EINPROGRESS)
            return;
        free(p);
        read_reply(d, req, buf, n);
        read_buf_put(d, buf, size);
        return;
    }
    ssize_t n = f2fuse_read(d->fs, to_f2fs(d, ino), buf, size, (uint64_t)off);
    count(d, OP_READ, n < 0);
    if (n < 0)
        reply_err(req, (int)n);
    else
        fuse_reply_buf(req, buf, (size_t)n);
    if (!ring_buf)
        read_buf_put(d, buf, size);
}

/* A directory listing is gathered first and answered after: readdirplus asks for each
 * entry's attributes, which must not happen while the library holds the directory. */
struct dir_entry_copy {
    char name[256];
    uint32_t ino;
    unsigned type;
    uint64_t next;
};

struct dir_fill {
    fuse_req_t req;
    struct dir_entry_copy *entries;
    size_t count, cap;
    size_t size, used; /* reply bytes: the budget and what the gathered entries take */
    bool plus;
};

static int gather_entry(void *arg, const char *name, size_t len, uint32_t ino, unsigned type,
                        uint64_t next)
{
    struct dir_fill *f = arg;
    char cname[256];
    memcpy(cname, name, len);
    cname[len] = '\0';
    size_t need = f->plus ? fuse_add_direntry_plus(f->req, NULL, 0, cname, NULL, 0)
                          : fuse_add_direntry(f->req, NULL, 0, cname, NULL, 0);
    if (f->used + need > f->size)
        return 1; /* full: the kernel asks again from this entry */
    if (f->count == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 32;
        struct dir_entry_copy *n = realloc(f->entries, cap * sizeof(*n));
        if (!n)
            return 1;
        f->entries = n;
        f->cap = cap;
    }
    struct dir_entry_copy *e = &f->entries[f->count++];
    memcpy(e->name, cname, len + 1);
    e->ino = ino;
    e->type = type;
    e->next = next;
    f->used += need;
    return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus)
{
    struct daemon *d = daemon_of(req);
    struct dir_fill f = {.req = req, .size = size, .plus = plus};
    int err = f2fuse_readdir(d->fs, to_f2fs(d, ino), (uint64_t)off, gather_entry, &f);
    char *buf = err ? NULL : malloc(size ? size : 1);
    if (!err && !buf)
        err = -ENOMEM;
    size_t used = 0;
    unsigned unread = 0; /* entries whose attributes could not be read */
    double timeout = plus && !err ? entry_timeout(d, ino) : d->timeout;
    for (size_t i = 0; !err && i < f.count; i++) {
        struct dir_entry_copy *e = &f.entries[i];
        size_t room = size - used;
        if (plus) {
            struct fuse_entry_param ep = {.attr_timeout = d->timeout, .entry_timeout = timeout};
            bool dots = strcmp(e->name, ".") == 0 || strcmp(e->name, "..") == 0;
            struct f2fuse_attr a;
            /* By name: the lookup takes the reference the kernel gets with the entry. */
            int lerr = dots ? -ENOENT
                            : f2fuse_lookup(d->fs, to_f2fs(d, ino), e->name, strlen(e->name), &a);
            /* An I/O error is not the kernel's to see here (the listing itself worked; its
             * own LOOKUP of the entry meets the error again if it lasts), but it must not
             * pass unrecorded: a device that failed a read once is one to know about. */
            if (lerr && lerr != -ENOENT && unread++ == 0)
                log_warn("readdirplus: attributes of '%s' in directory %llu: %s; listed by "
                         "name only",
                         e->name, (unsigned long long)to_f2fs(d, ino), strerror(-lerr));
            bool found = lerr == 0;
            if (found && a.ino != e->ino) { /* renamed over meanwhile: name only */
                f2fuse_forget(d->fs, a.ino, 1);
                found = false;
            }
            if (found) {
                entry_fill(d, &a, &ep); /* a.ino == e->ino */
            } else {
                /* "." and "..", or an entry that went away meanwhile: name only, and the
                 * kernel looks it up itself. */
                ep.attr.st_ino = to_fuse(d, e->ino);
                ep.attr.st_mode = e->type << 12;
            }
            used += fuse_add_direntry_plus(req, buf + used, room, e->name, &ep, (off_t)e->next);
        } else {
            struct stat st = {.st_ino = to_fuse(d, e->ino), .st_mode = e->type << 12};
            used += fuse_add_direntry(req, buf + used, room, e->name, &st, (off_t)e->next);
        }
    }
    if (unread > 1)
        log_warn("readdirplus: %u entries of directory %llu listed by name only", unread,
                 (unsigned long long)to_f2fs(d, ino));
    count(d, plus ? OP_READDIRPLUS : OP_READDIR, err);
    if (err)
        reply_err(req, err);
    else
        fuse_reply_buf(req, buf, used);
    free(buf);
    free(f.entries);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, true);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct daemon *d = daemon_of(req);
    struct statvfs st;
    int err = f2fuse_statfs(d->fs, &st);
    count(d, OP_STATFS, err);
    if (err)
        reply_err(req, err);
    else
        fuse_reply_statfs(req, &st);
}

/* The reply of getxattr and listxattr: n bytes of buf (the size alone when size is 0), or
 * the error; buf is freed. */
static void reply_xattr_buf(fuse_req_t req, ssize_t n, char *buf, size_t size)
{
    if (n < 0)
        reply_err(req, (int)n);
    else if (size == 0)
        fuse_reply_xattr(req, (size_t)n);
    else
        fuse_reply_buf(req, buf, (size_t)n);
    free(buf);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
    struct daemon *d = daemon_of(req);
    char *buf = size ? malloc(size) : NULL;
    if (size && !buf) {
        reply_err(req, -ENOMEM);
        return;
    }
    ssize_t n = f2fuse_getxattr(d->fs, to_f2fs(d, ino), name, buf, size);
    count(d, OP_GETXATTR, n < 0 && n != -ENODATA);
    reply_xattr_buf(req, n, buf, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
    struct daemon *d = daemon_of(req);
    char *buf = size ? malloc(size) : NULL;
    if (size && !buf) {
        reply_err(req, -ENOMEM);
        return;
    }
    ssize_t n = f2fuse_listxattr(d->fs, to_f2fs(d, ino), buf, size);
    count(d, OP_LISTXATTR, n < 0);
    reply_xattr_buf(req, n, buf, size);
}

/* Quota limits bind the user behind a request that may allocate (the library asks the
 * calling thread), not the daemon: every such request names it first. */
static const struct fuse_ctx *as_caller(fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    f2fuse_set_caller_uid(ctx ? ctx->uid : F2FUSE_CALLER_NONE);
    return ctx;
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    struct daemon *d = daemon_of(req);
    const struct fuse_ctx *ctx = as_caller(req);
    struct f2fuse_attr a;
    int err = f2fuse_mknod(d->fs, to_f2fs(d, parent), name, strlen(name),
                           mode | F2FUSE_UMASK(ctx->umask), rdev, ctx->uid, ctx->gid, &a);
    reply_new_entry(req, d, parent, OP_MKNOD, err, &a);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    const struct fuse_ctx *ctx = as_caller(req);
    struct f2fuse_attr a;
    int err = f2fuse_mknod(d->fs, to_f2fs(d, parent), name, strlen(name),
                           S_IFREG | (mode & 07777) | F2FUSE_UMASK(ctx->umask), 0, ctx->uid,
                           ctx->gid, &a);
    if (!err) {
        err = f2fuse_open_file(d->fs, a.ino, fi->flags & O_ACCMODE);
        fi->fh = err ? 0 : FH_COUNTED | (uint64_t)(fi->flags & O_ACCMODE) << FH_ACCMODE_SHIFT;
    }
    count(d, OP_CREATE, err);
    if (err) {
        reply_err(req, err);
        return;
    }
    struct fuse_entry_param e = {.attr_timeout = d->timeout,
                                 .entry_timeout = entry_timeout(d, parent)};
    entry_fill(d, &a, &e);
    fi->keep_cache = d->perf.keep_cache;
    if (fuse_reply_create(req, &e, fi) != 0) {
        f2fuse_release_file(d->fs, a.ino, fh_accmode(fi->fh));
        f2fuse_forget(d->fs, a.ino, 1);
    }
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    struct daemon *d = daemon_of(req);
    const struct fuse_ctx *ctx = as_caller(req);
    struct f2fuse_attr a;
    int err = f2fuse_mkdir(d->fs, to_f2fs(d, parent), name, strlen(name),
                           mode | F2FUSE_UMASK(ctx->umask), ctx->uid, ctx->gid, &a);
    reply_new_entry(req, d, parent, OP_MKDIR, err, &a);
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name)
{
    struct daemon *d = daemon_of(req);
    const struct fuse_ctx *ctx = as_caller(req);
    struct f2fuse_attr a;
    int err = f2fuse_symlink(d->fs, to_f2fs(d, parent), name, strlen(name), target, ctx->uid,
                             ctx->gid, &a);
    reply_new_entry(req, d, parent, OP_SYMLINK, err, &a);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
    struct daemon *d = daemon_of(req);
    as_caller(req);
    struct f2fuse_attr a;
    int err = f2fuse_link(d->fs, to_f2fs(d, ino), to_f2fs(d, parent), name, strlen(name), &a);
    reply_new_entry(req, d, parent, OP_LINK, err, &a);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct daemon *d = daemon_of(req);
    int err = f2fuse_unlink(d->fs, to_f2fs(d, parent), name, strlen(name));
    count(d, OP_UNLINK, err);
    reply_err(req, err);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct daemon *d = daemon_of(req);
    int err = f2fuse_rmdir(d->fs, to_f2fs(d, parent), name, strlen(name));
    count(d, OP_RMDIR, err);
    reply_err(req, err);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    struct daemon *d = daemon_of(req);
    as_caller(req);
    unsigned f = 0;
    int err = 0;
    if (flags & RENAME_NOREPLACE)
        f |= F2FUSE_RENAME_NOREPLACE;
    if (flags & RENAME_EXCHANGE)
        f |= F2FUSE_RENAME_EXCHANGE;
    if (flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE))
        err = -EINVAL; /* RENAME_WHITEOUT belongs to overlay file systems */
    if (!err)
        err = f2fuse_rename(d->fs, to_f2fs(d, parent), name, strlen(name), to_f2fs(d, newparent),
                            newname, strlen(newname), f);
    count(d, OP_RENAME, err);
    /* The kernel moves its dentry, which keeps the timeout of the directory it came from:
     * into a directory whose entries it must look up every time (casefolded, encrypted: a
     * change through another spelling of the name would not reach it), it is dropped once
     * the rename is over. */
    bool drop = !err && d->casefold && entry_timeout(d, newparent) == 0 &&
                entry_timeout(d, parent) != 0;
    reply_err(req, err);
    if (drop)
        inval_queue_push(d->inval, newparent, newname);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    as_caller(req);
    unsigned flags = killpriv_request_kills_suidgid() ? F2FUSE_WRITE_KILL_SUIDGID : 0;
    if (fi->writepage)
        flags |= F2FUSE_WRITE_WRITEBACK;
    bool mode_changed = false;
    ssize_t n = off < 0 ? -EINVAL
                        : f2fuse_write_ex(d->fs, to_f2fs(d, ino), buf, size, (uint64_t)off, flags,
                                          &mode_changed);
    if (mode_changed) /* the kernel's copy of the mode still has the set-id bits */
        fuse_lowlevel_notify_inval_inode(d->se, ino, -1, 0);
    count(d, OP_WRITE, n < 0);
    if (n < 0)
        reply_err(req, (int)n);
    else
        fuse_reply_write(req, (size_t)n);
}

static struct timespec now_ts(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t;
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    as_caller(req);
    struct f2fuse_setattr sa = {0};
    if (to_set & FUSE_SET_ATTR_MODE) {
        sa.valid |= F2FUSE_SET_MODE;
        sa.mode = attr->st_mode;
    }
    if (to_set & FUSE_SET_ATTR_UID) {
        sa.valid |= F2FUSE_SET_UID;
        sa.uid = attr->st_uid;
    }
    if (to_set & FUSE_SET_ATTR_GID) {
        sa.valid |= F2FUSE_SET_GID;
        sa.gid = attr->st_gid;
    }
    if (to_set & FUSE_SET_ATTR_SIZE) {
        sa.valid |= F2FUSE_SET_SIZE;
        sa.size = (uint64_t)attr->st_size;
    }
    if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) {
        sa.valid |= F2FUSE_SET_ATIME;
        sa.atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now_ts() : attr->st_atim;
    }
    if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
        sa.valid |= F2FUSE_SET_MTIME;
        sa.mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now_ts() : attr->st_mtim;
    }
    if (to_set & FUSE_SET_ATTR_CTIME) {
        sa.valid |= F2FUSE_SET_CTIME;
        sa.ctime = attr->st_ctim;
    }
    if (killpriv_request_kills_suidgid())
        sa.valid |= F2FUSE_SET_KILL_SUIDGID;
    struct f2fuse_attr a;
    int err = f2fuse_setattr(d->fs, to_f2fs(d, ino), &sa, &a);
    reply_attr(req, d, OP_SETATTR, err, &a);
}

/* The I/O priority of the process behind a request (0 when it cannot be had). */
/* Who asked: the requesting thread's I/O priority (the kernel runs an fsync's I/O at it) and
 * its thread id (FUSE passes the tid), so the checkpoint daemon can batch several callers. */
static struct f2fuse_caller requester(fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    long v = ctx && ctx->pid > 0 ? syscall(SYS_ioprio_get, 1 /* IOPRIO_WHO_PROCESS */, ctx->pid)
                                 : -1;
    return (struct f2fuse_caller){.ioprio = v < 0 ? 0 : (int)v, .tid = ctx ? ctx->pid : 0};
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    struct f2fuse_caller who = requester(req);
    int err = d->read_only ? 0 : f2fuse_fsync_as(d->fs, to_f2fs(d, ino), datasync, &who);
    count(d, OP_FSYNC, err);
    reply_err(req, err);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    struct f2fuse_caller who = requester(req);
    int err = d->read_only ? 0 : f2fuse_fsyncdir_as(d->fs, to_f2fs(d, ino), &who);
    count(d, OP_FSYNCDIR, err);
    reply_err(req, err);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
    struct daemon *d = daemon_of(req);
    as_caller(req);
    int err = f2fuse_setxattr(d->fs, to_f2fs(d, ino), name, value, size, flags);
    count(d, OP_SETXATTR, err);
    reply_err(req, err);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
    struct daemon *d = daemon_of(req);
    int err = f2fuse_removexattr(d->fs, to_f2fs(d, ino), name);
    count(d, OP_REMOVEXATTR, err && err != -ENODATA);
    reply_err(req, err);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
    struct daemon *d = daemon_of(req);
    as_caller(req);
    int err = off < 0 || len <= 0
                  ? -EINVAL
                  : f2fuse_fallocate(d->fs, to_f2fs(d, ino), mode, (uint64_t)off, (uint64_t)len);
    count(d, OP_FALLOCATE, err);
    reply_err(req, err);
}

/* The inode-flag ioctls go to fuse/fileattr_ioctl.c.  FITRIM (fstrim MOUNTPOINT, on the
 * root directory): a restricted ioctl, so the kernel copies
 * struct fstrim_range in and out itself; the reply's len is the bytes trimmed.  The kernel
 * asks CAP_SYS_ADMIN of FITRIM; a FUSE ioctl arrives without that check, so only root and
 * the daemon's own user may trim.  Other commands are not handled here: ENOTTY. */
/* inode_permission(MAY_WRITE) as the kernel's default_permissions would decide it on the
 * attributes it is shown (POSIX ACL entries are not consulted). */
static bool caller_may_write(fuse_req_t req, struct daemon *d, fuse_ino_t ino)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    struct f2fuse_attr a;
    if (f2fuse_getattr(d->fs, to_f2fs(d, ino), &a))
        return false;
    struct stat st;
    attr_to_stat(d, &a, &st);
    if (ctx->uid == 0)
        return true;
    if (ctx->uid == st.st_uid)
        return st.st_mode & S_IWUSR;
    bool in_group = ctx->gid == st.st_gid;
    gid_t groups[64];
    int n = fuse_req_getgroups(req, 64, groups);
    for (int i = 0; i < n && i < 64 && !in_group; i++)
        in_group = groups[i] == st.st_gid;
    return st.st_mode & (in_group ? S_IWGRP : S_IWOTH);
}

/* FS_IOC_MEASURE_VERITY and FS_IOC_ENABLE_VERITY: fuse/verity_ioctl.c. */
static void verity_ioctl_op(fuse_req_t req, struct daemon *d, fuse_ino_t ino, unsigned int cmd,
                            struct fuse_file_info *fi, const void *in_buf, size_t in_bufsz,
                            size_t out_bufsz)
{
    struct verity_caller who = {.fd_readable = fi && fh_accmode(fi->fh) != O_WRONLY,
                                .may_write = cmd == (unsigned int)FS_IOC_ENABLE_VERITY &&
                                             caller_may_write(req, d, ino)};
    unsigned char out[sizeof(struct fsverity_digest) + 64];
    size_t reply_len;
    int err = verity_ioctl(d->fs, to_f2fs(d, ino), cmd, &who, in_buf, in_bufsz, out,
                           out_bufsz < sizeof(out) ? out_bufsz : sizeof(out), &reply_len);
    count(d, OP_IOCTL, err);
    if (err)
        reply_err(req, err);
    else
        fuse_reply_ioctl(req, 0, reply_len ? out : NULL, reply_len);
    if (!err && cmd == (unsigned int)FS_IOC_ENABLE_VERITY) /* as the kernel: nothing cached */
        fuse_lowlevel_notify_inval_inode(d->se, ino, 0, 0);
}

static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                     struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
                     size_t out_bufsz)
{
    struct daemon *d = daemon_of(req);
    const struct fuse_ctx *ctx = as_caller(req);
    if (verity_ioctl_cmd(cmd)) {
        verity_ioctl_op(req, d, ino, cmd, fi, in_buf, in_bufsz, out_bufsz);
        return;
    }
    if (cmd != FITRIM) {
        unsigned char out[64];
        size_t reply_len;
        int err = fileattr_ioctl(d->fs, to_f2fs(d, ino), cmd, ctx->uid, in_buf, in_bufsz, out,
                                 out_bufsz < sizeof(out) ? out_bufsz : sizeof(out), &reply_len);
        count(d, OP_IOCTL, err == -ENOTTY ? 0 : err);
        if (err)
            reply_err(req, err);
        else
            fuse_reply_ioctl(req, 0, reply_len ? out : NULL, reply_len);
        return;
    }
    struct fstrim_range range;
    int err = 0;
    if (in_bufsz < sizeof(range) || out_bufsz < sizeof(range) || !in_buf)
        err = -EINVAL;
    else if (ctx->uid != 0 && ctx->uid != getuid())
        err = -EPERM;
    if (!err) {
        memcpy(&range, in_buf, sizeof(range));
        uint64_t trimmed = 0;
        err = f2fuse_trim(d->fs, range.start, range.len, range.minlen, &trimmed);
        range.len = trimmed;
    }
    count(d, OP_IOCTL, err);
    if (err)
        reply_err(req, err);
    else
        fuse_reply_ioctl(req, 0, &range, sizeof(range));
}

static const struct fuse_lowlevel_ops f2fuse_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .open = op_open,
    .opendir = op_opendir,
    .read = op_read,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .statfs = op_statfs,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .release = op_release,
    .create = op_create,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .symlink = op_symlink,
    .link = op_link,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .write = op_write,
    .setattr = op_setattr,
    .fsync = op_fsync,
    .fsyncdir = op_fsyncdir,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
    .fallocate = op_fallocate,
    .ioctl = op_ioctl,
};

/* Counters of a running mount, for `f2fuse stat`. */
static void print_stat(void *arg, const char *name, uint64_t value)
{
    fprintf(arg, "%s %llu\n", name, (unsigned long long)value);
}

/* "set name=value": a tunable of the running mount (f2fuse_tune).  The reply is "ok" or
 * "error: ..." — `f2fuse set` turns the latter into its exit status. */
static int ctl_set(struct daemon *d, const char *assignment, FILE *out)
{
    char name[64];
    const char *eq = strchr(assignment, '=');
    size_t nlen = eq ? (size_t)(eq - assignment) : 0;
    if (!eq || nlen == 0 || nlen >= sizeof(name)) {
        fprintf(out, "error: expected name=value\n");
        return 0;
    }
    memcpy(name, assignment, nlen);
    name[nlen] = '\0';
    int err = f2fuse_tune(d->fs, name, eq + 1);
    if (err == -ENOENT || err == -EPERM) /* `f2fuse options` says which ones can */
        fprintf(out, "error: '%s' cannot be changed on a running mount (%s)\n", name,
                err == -ENOENT ? "no such option" : "only at mount time");
    else if (err == -EINVAL)
        fprintf(out, "error: bad value for '%s': '%s'\n", name, eq + 1);
    else if (err)
        fprintf(out, "error: %s: %s\n", name, strerror(-err));
    else
        fprintf(out, "ok\n");
    return 0;
}

/* After `f2fuse key`: a kernel in front cached an encrypted inode's attributes (a symlink's
 * size is its target's) and pages (a file's plaintext); both change with a key.  Names need
 * nothing: entries in encrypted directories are not cached (entry_timeout). */
static void key_changed(void *arg, uint32_t ino)
{
    struct daemon *d = arg;
    fuse_lowlevel_notify_inval_inode(d->se, to_fuse(d, ino), 0, 0);
}

static int ctl_handle(void *arg, const char *command, FILE *out)
{
    struct daemon *d = arg;
    if (strncmp(command, "set ", 4) == 0)
        return ctl_set(d, command + 4, out);
    if (strcmp(command, "sync") == 0) { /* `f2fuse sync`: what sync(1) cannot ask of us */
        int err = d->read_only ? 0 : f2fuse_sync(d->fs);
        if (err)
            fprintf(out, "error: %s\n", strerror(-err));
        else
            fprintf(out, "ok\n");
        return 0;
    }
    if (strncmp(command, "key ", 4) == 0) { /* `f2fuse key`: key_ctl.c */
        key_ctl(d->fs, command + 4, out, key_changed, d);
        return 0;
    }
    if (strcmp(command, "stat") != 0)
        return -EINVAL;
    f2fuse_stats(d->fs, print_stat, out);
    print_stat(out, "fuse.handle_killpriv_v2", atomic_load(&d->killpriv.enabled));
    struct fuse_ring_stats rs;
    fuse_ring_stats(__atomic_load_n(&d->ring, __ATOMIC_ACQUIRE), &rs);
    print_stat(out, "fuse.ring.threads", rs.threads);
    print_stat(out, "fuse.ring.entries_used", rs.entries);
    print_stat(out, "fuse.ring.requests", rs.requests);
    print_stat(out, "fuse.ring.errors", rs.errors);
    for (int i = 0; i < OP_COUNT; i++) {
        char name[64];
        snprintf(name, sizeof(name), "fuse.%s.requests", op_names[i]);
        print_stat(out, name, atomic_load(&d->requests[i]));
        snprintf(name, sizeof(name), "fuse.%s.errors", op_names[i]);
        print_stat(out, name, atomic_load(&d->errors[i]));
    }
    return 0;
}

/* Command line: IMAGE MOUNTPOINT plus options; f2fuse's own -o options are taken out,
 * everything else goes to libfuse. */
struct cmdline {
    const char *image;
    struct f2fuse_options opts;
    struct f2fuse_test_options test; /* -o powercut=, fault=: for the tests */
    struct id_map ids;
    struct fuse_perf_opts perf;
    bool bad;
    bool own_fsname; /* the user named the source: f2fuse does not add fsname= */
};

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
    struct cmdline *c = data;
    if (key == FUSE_OPT_KEY_NONOPT) {
        if (!c->image) {
            c->image = arg;
            return 0;
        }
        return 1; /* the mount point, for fuse_parse_cmdline */
    }
    if (key != FUSE_OPT_KEY_OPT || arg[0] == '-')
        return 1; /* -f, -d, -s, ...: for fuse_parse_cmdline */
    switch (mount_option(&c->opts, &c->test, &c->ids, &c->perf, arg)) { /* options.c */
    case MOPT_TAKEN:
    case MOPT_DROP: return 0;
    case MOPT_PASS: c->own_fsname |= strncmp(arg, "fsname=", 7) == 0; return 1;
    case MOPT_BAD: break;
    }
    c->bad = true;
    return -1;
}

void mount_usage(FILE *out)
{
    fprintf(out, "usage: f2fuse [-f] [-d] [-s] [-o OPTIONS] IMAGE MOUNTPOINT\n"
                 "  -f            stay in the foreground\n"
                 "  -d            debug output (implies -f)\n"
                 "  -s            single-threaded\n"
                 "  -o OPTIONS    comma-separated, as listed below\n");
    mount_options_help(out);
}

/* Going to the background: fork first, so that the image is opened, checked and mounted
 * (and every thread started) in the process that serves it, while the parent waits for
 * that outcome and exits with it; a refused image still gives a non-zero exit. */
static int background_start(int *ready_fd)
{
    int p[2];
    if (pipe(p) != 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid > 0) {
        close(p[1]);
        unsigned char status = 1;
        if (read(p[0], &status, 1) != 1)
            status = 1; /* the child died before it could tell */
        _exit(status);
    }
    close(p[0]);
    setsid();
    *ready_fd = p[1];
    return 0;
}

static void background_ready(int ready_fd, unsigned char status)
{
    if (ready_fd < 0)
        return;
    if (status == 0) {
        /* Detach from the terminal like any daemon. */
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
            if (null > 2)
                close(null);
        }
        if (chdir("/") != 0) {
            /* nothing depends on the working directory */
        }
    }
    if (write(ready_fd, &status, 1) != 1) {
        /* the parent is gone; nothing to tell */
    }
    close(ready_fd);
}

/* The kernel checks permissions against the modes we report, and names the mount. */
static void add_kernel_options(struct fuse_args *args, const struct cmdline *c)
{
    char extra[PATH_MAX + 64];
    /* A comma would split the option list. */
    bool plain_name = !strchr(c->image, ',') && !c->own_fsname;
    snprintf(extra, sizeof(extra), "-odefault_permissions,subtype=f2fuse%s%s%s",
             plain_name ? ",fsname=" : "", plain_name ? c->image : "",
             c->opts.read_only ? ",ro" : "");
    fuse_opt_add_arg(args, extra);
}

/* What serving the mounted session takes besides the loop: this daemon's handling of the
 * channel's I/O (killpriv, the ring), read-ahead, the control socket. */
static void serve_setup(struct daemon *d, const char *mnt, struct ctl_server **ctl)
{
    d->killpriv.want = true;
    if (d->perf.fuse_ring) {
        d->killpriv.ring_flag = true;
        d->killpriv.on_init_replied = start_ring;
    }
    if (killpriv_install(d->se, killpriv_of) != 0)
        log_warn("cannot take over the FUSE channel's I/O: every write will cost a GETXATTR");
    set_read_ahead(mnt, d->perf.read_ahead_kb);
    int err = ctl_start(mnt, ctl_handle, d, ctl);
    if (err)
        log_warn("no control socket (f2fuse stat will not work): %s", strerror(-err));
}

/* Serves requests until unmounted; 0, or 1 when the loop failed. */
static int serve(struct fuse_session *se, const struct fuse_cmdline_opts *fo)
{
    if (fo->singlethread)
        return fuse_session_loop(se) != 0;
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(cfg, fo->clone_fd);
    if (fo->max_idle_threads != UINT_MAX) /* UINT_MAX: not given on the command line */
        fuse_loop_cfg_set_idle_threads(cfg, fo->max_idle_threads);
    if (fo->max_threads != UINT_MAX && fo->max_threads > 0)
        fuse_loop_cfg_set_max_threads(cfg, fo->max_threads);
    int ret = fuse_session_loop_mt(se, cfg) != 0;
    fuse_loop_cfg_destroy(cfg);
    return ret;
}

/* Undoes what mount_main set up, in reverse; each part may be missing. */
static void daemon_teardown(struct daemon *d, struct fuse_session *se, bool mounted,
                            struct ctl_server *ctl)
{
    ctl_stop(ctl);
    if (se) {
        if (mounted)
            fuse_session_unmount(se);
        f2fuse_read_drain(d->fs);   /* their replies need the session */
        inval_queue_stop(d->inval); /* after the unmount: no kernel lock can hold it up */
        fuse_ring_stop(__atomic_load_n(&d->ring, __ATOMIC_ACQUIRE));
        fuse_remove_signal_handlers(se);
        fuse_session_destroy(se);
    }
    f2fuse_close(d->fs);
    while (d->read_pool.n)
        free(d->read_pool.bufs[--d->read_pool.n]);
}

int mount_main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct cmdline c = {0};
    f2fuse_options_init(&c.opts);
    fuse_perf_opts_init(&c.perf);
    c.opts.track_lookups = true; /* the kernel's nodeids stay valid until it forgets them */
    if (fuse_opt_parse(&args, &c, NULL, opt_proc) != 0 || c.bad) {
        fuse_opt_free_args(&args);
        return 2;
    }
    struct fuse_cmdline_opts fo;
    if (fuse_parse_cmdline(&args, &fo) != 0) {
        fuse_opt_free_args(&args);
        return 2;
    }
    if (fo.show_help || !c.image || !fo.mountpoint) {
        mount_usage(fo.show_help ? stdout : stderr);
        free(fo.mountpoint);
        fuse_opt_free_args(&args);
        return fo.show_help ? 0 : 2;
    }

    int ret = 1, ready_fd = -1;
    struct daemon d = {.read_only = c.opts.read_only,
                       .ids = c.ids,
                       .perf = c.perf,
                       .timeout = c.perf.attr_timeout,
                       .read_pool = {.lock = PTHREAD_MUTEX_INITIALIZER}};
    struct fuse_session *se = NULL;
    struct ctl_server *ctl = NULL;
    bool mounted = false;
    char real_mnt[PATH_MAX];
    if (!realpath(fo.mountpoint, real_mnt)) {
        log_err("mount point %s: %s", fo.mountpoint, strerror(errno));
        goto out;
    }
    if (!fo.foreground && background_start(&ready_fd) != 0) {
        log_err("cannot go to the background: %s", strerror(errno));
        goto out;
    }
    int err = f2fuse_open_test(c.image, &c.opts, &c.test, &d.fs);
    if (err) {
        log_err("cannot mount %s: %s", c.image, strerror(-err));
        goto out;
    }
    d.root_ino = f2fuse_root_ino(d.fs);
    d.casefold = f2fuse_features(d.fs) & (FEATURE_CASEFOLD | FEATURE_ENCRYPT);
    add_kernel_options(&args, &c);

    se = fuse_session_new(&args, &f2fuse_ops, sizeof(f2fuse_ops), &d);
    if (!se)
        goto out;
    if (fuse_set_signal_handlers(se) != 0)
        goto out;
    if (fuse_session_mount(se, real_mnt) != 0)
        goto out;
    mounted = true;
    d.se = se;
    if (d.casefold)
        d.inval = inval_queue_start(se);
    serve_setup(&d, real_mnt, &ctl);
    background_ready(ready_fd, 0);
    ready_fd = -1;
    ret = serve(se, &fo);
out:
    background_ready(ready_fd, 1);
    daemon_teardown(&d, se, mounted, ctl);
    free(fo.mountpoint);
    fuse_opt_free_args(&args);
    return ret;
}
