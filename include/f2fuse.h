/* libf2fuse: open, read (and, as the project grows, write) f2fs images in user space.
 *
 * One struct f2fuse is one opened image; all its state hangs off it, so a process may
 * open several images.  Functions return 0 (or a byte count) on success and -errno on
 * failure; a corrupt image yields -EIO (-EUCLEAN when the damage refuses the mount, and
 * -EOPNOTSUPP for features f2fuse does not support) plus a log line that says what is wrong.  Inode numbers are f2fs inode numbers (the root is
 * f2fuse_root_ino()).  Every function is safe to call from several threads at once. */
#ifndef F2FUSE_H
#define F2FUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

struct f2fuse;

struct f2fuse_options {
    const char *backend;   /* block backend: "uring" (default) or "psync" */
    unsigned queue_depth;  /* io_uring queue depth (default 64) */
    uint64_t cache_size;   /* page cache budget in bytes (default 64 MiB) */
    bool read_only;        /* open without writing anything (default) */
    unsigned checkpoint_interval; /* seconds between checkpoints of a dirty mount; 0 = off */
    bool checkpoint_merge; /* one daemon thread serves concurrent checkpoint requests at once */
    bool fsync_fast;       /* fsync writes the file and its nodes, not a checkpoint, when it can */
    /* Count a lookup reference for every inode an operation returns (lookup, mknod, mkdir,
     * symlink, link), released by f2fuse_forget: an unlinked inode (and its number) lives
     * until then.  The FUSE daemon sets it: the kernel's nodeids must not be reused while
     * it holds them. */
    bool track_lookups;
    /* Tests only: emulate a power cut at the powercut_after-th device write (0 = never):
     * that write, every later one, and every write not yet flushed are lost; with
     * powercut_torn, unflushed writes are lost 4 KiB block by block (PRNG powercut_seed). */
    uint64_t powercut_after;
    bool powercut_torn;
    uint64_t powercut_seed;
    /* discard (see f2fuse_trim): */
    bool discard;          /* online: what each checkpoint frees is discarded after it (default) */
    unsigned discard_mode; /* F2FUSE_DISCARD_* (default parallel; the others are baselines) */
    uint64_t discard_max;  /* largest single discard request in bytes (default 64 MiB) */
    unsigned discard_qd;   /* discard requests in flight in parallel mode (default 32) */
    /* Tests only: fault injection (option "fault=KIND:N[:WHAT][:sticky]", repeatable up to
     * F2FUSE_MAX_FAULTS).  The Nth request of KIND (read, write, flush, discard; alloc =
     * page-cache allocations) after open fails with WHAT: an errno name (EIO by default,
     * ENOSPC, ENOMEM, ...) or "short" (half the length transferred); sticky: every later
     * one fails too.  See docs/ARCHITECTURE.md, "Faults and hostile images". */
    struct f2fuse_fault {
        unsigned kind; /* F2FUSE_FAULT_* */
        uint64_t nth;
        int err;       /* positive errno; 0 with short_io */
        bool short_io;
        bool sticky;
    } faults[4];
    unsigned nfaults;
};

#define F2FUSE_MAX_FAULTS 4
#define F2FUSE_FAULT_READ 0u
#define F2FUSE_FAULT_WRITE 1u
#define F2FUSE_FAULT_FLUSH 2u
#define F2FUSE_FAULT_DISCARD 3u
#define F2FUSE_FAULT_ALLOC 4u

#define F2FUSE_DISCARD_BLOCK 0u    /* one request per block, one at a time */
#define F2FUSE_DISCARD_SERIAL 1u   /* merged ranges, one at a time */
#define F2FUSE_DISCARD_PARALLEL 2u /* merged ranges, discard_qd at a time */

void f2fuse_options_init(struct f2fuse_options *opts);

/* Sets one option by name ("backend", "queue_depth", "cache_size" with K/M/G suffixes,
 * "ro"/"rw").  Returns 0, -ENOENT for an unknown name, -EINVAL for a bad value.  The
 * string stored for "backend" is a static one, so value need not outlive the call. */
int f2fuse_option_set(struct f2fuse_options *opts, const char *name, const char *value);

/* Lists the option names f2fuse_option_set accepts, for help and error messages. */
const char *f2fuse_option_names(void);

int f2fuse_open(const char *image, const struct f2fuse_options *opts, struct f2fuse **out);
void f2fuse_close(struct f2fuse *fs);

uint32_t f2fuse_root_ino(const struct f2fuse *fs);

struct f2fuse_attr {
    uint32_t ino;
    uint32_t mode;     /* type and permission bits, as st_mode */
    uint32_t nlink;
    uint32_t uid, gid;
    uint64_t size;
    uint64_t blocks;   /* 512-byte units, as st_blocks */
    uint64_t rdev;
    uint32_t generation;
    uint32_t flags;    /* FS_*_FL inode flags */
    struct timespec atime, mtime, ctime, crtime;
};

int f2fuse_getattr(struct f2fuse *fs, uint32_t ino, struct f2fuse_attr *attr);
int f2fuse_lookup(struct f2fuse *fs, uint32_t dir_ino, const char *name, size_t namelen,
                  struct f2fuse_attr *attr);

/* Called once per entry, "." and ".." included; type is a DT_* value.  next_cookie resumes
 * the listing after this entry.  Return non-zero to stop. */
typedef int (*f2fuse_dirent_fn)(void *arg, const char *name, size_t namelen, uint32_t ino,
                                unsigned type, uint64_t next_cookie);
/* Lists dir_ino from cookie (0 = start).  Returns 0 or -errno.  fn runs with the
 * directory locked: it must not call back into this f2fuse. */
int f2fuse_readdir(struct f2fuse *fs, uint32_t dir_ino, uint64_t cookie, f2fuse_dirent_fn fn,
                   void *arg);

/* Reads up to size bytes at off; returns the bytes read (0 at or past EOF) or -errno. */
ssize_t f2fuse_read(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off);
/* Copies the symlink target (not NUL-terminated) and returns its length, or -errno. */
ssize_t f2fuse_readlink(struct f2fuse *fs, uint32_t ino, char *buf, size_t size);

/* As getxattr(2)/listxattr(2): size 0 asks for the size needed; -ERANGE when too small. */
ssize_t f2fuse_getxattr(struct f2fuse *fs, uint32_t ino, const char *name, void *value,
                        size_t size);
ssize_t f2fuse_listxattr(struct f2fuse *fs, uint32_t ino, char *list, size_t size);

int f2fuse_statfs(struct f2fuse *fs, struct statvfs *st);

/* ---- writing (a mount opened with read_only = false) ----
 * Every change is in memory until the next checkpoint, which makes it durable: at
 * f2fuse_sync, f2fuse_fsync, every checkpoint_interval seconds, when memory or free space
 * runs short, and at f2fuse_close. */

/* Creates a regular file, device node, fifo or socket (mode's type bits; 0 = regular). */
int f2fuse_mknod(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen,
                 uint32_t mode, uint64_t rdev, uint32_t uid, uint32_t gid,
                 struct f2fuse_attr *attr);
int f2fuse_mkdir(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen,
                 uint32_t mode, uint32_t uid, uint32_t gid, struct f2fuse_attr *attr);
int f2fuse_symlink(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen,
                   const char *target, uint32_t uid, uint32_t gid, struct f2fuse_attr *attr);
int f2fuse_link(struct f2fuse *fs, uint32_t ino, uint32_t parent, const char *name,
                size_t namelen, struct f2fuse_attr *attr);
int f2fuse_unlink(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen);
int f2fuse_rmdir(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen);

#define F2FUSE_RENAME_NOREPLACE 1u /* as RENAME_NOREPLACE */
#define F2FUSE_RENAME_EXCHANGE 2u  /* as RENAME_EXCHANGE */
int f2fuse_rename(struct f2fuse *fs, uint32_t old_parent, const char *old_name, size_t old_len,
                  uint32_t new_parent, const char *new_name, size_t new_len, unsigned flags);

/* An inode open through the caller (a FUSE open file) outlives its last name until
 * f2fuse_release; a crash in between leaves an orphan that the next mount frees. */
int f2fuse_open_inode(struct f2fuse *fs, uint32_t ino);
int f2fuse_forget(struct f2fuse *fs, uint32_t ino, uint64_t nlookup);
int f2fuse_release(struct f2fuse *fs, uint32_t ino);

/* Writes size bytes at off (past the end: the gap reads as zeros); returns size or -errno. */
ssize_t f2fuse_write(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off);

#define F2FUSE_SET_MODE  (1u << 0)
#define F2FUSE_SET_UID   (1u << 1)
#define F2FUSE_SET_GID   (1u << 2)
#define F2FUSE_SET_SIZE  (1u << 3)
#define F2FUSE_SET_ATIME (1u << 4)
#define F2FUSE_SET_MTIME (1u << 5)
#define F2FUSE_SET_CTIME (1u << 6)
struct f2fuse_setattr {
    unsigned valid; /* F2FUSE_SET_* */
    uint32_t mode;  /* permission bits only */
    uint32_t uid, gid;
    uint64_t size;
    struct timespec atime, mtime, ctime;
};
int f2fuse_setattr(struct f2fuse *fs, uint32_t ino, const struct f2fuse_setattr *sa,
                   struct f2fuse_attr *attr);

/* mode: 0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE. */
int f2fuse_fallocate(struct f2fuse *fs, uint32_t ino, int mode, uint64_t off, uint64_t len);

/* flags: 0, XATTR_CREATE or XATTR_REPLACE (as setxattr(2)). */
int f2fuse_setxattr(struct f2fuse *fs, uint32_t ino, const char *name, const void *value,
                    size_t size, int flags);
int f2fuse_removexattr(struct f2fuse *fs, uint32_t ino, const char *name);

/* f2fuse_sync makes everything written so far durable (a checkpoint).  f2fuse_fsync makes
 * one inode durable: for a regular file with one name that the last checkpoint holds, by
 * writing its data and nodes for roll-forward recovery (no checkpoint); else a checkpoint. */
int f2fuse_sync(struct f2fuse *fs);
int f2fuse_fsync(struct f2fuse *fs, uint32_t ino, bool datasync);
/* The same on behalf of a caller with Linux I/O priority ioprio (ioprio_get(2); 0 = none):
 * without checkpoint_merge the checkpoint's I/O runs at that priority, as the kernel's
 * does in the caller's context; with it, the merging daemon's I/O is high priority. */
int f2fuse_sync_ioprio(struct f2fuse *fs, int ioprio);
int f2fuse_fsync_ioprio(struct f2fuse *fs, uint32_t ino, bool datasync, int ioprio);

/* Discards the free space of the main area inside [start, start + len) (bytes on the device,
 * FITRIM's fstrim_range): a checkpoint first, so that what was freed is committed, then every
 * free extent of at least minlen bytes that is not known to be discarded already (punched
 * holes in an image file, BLKDISCARD on a block device).  *trimmed gets the bytes discarded
 * by this call, so a second call with nothing freed in between reports 0.  -EINVAL when
 * start is past the device or len is under one block, -EROFS on a read-only mount,
 * -EOPNOTSUPP when the device cannot discard. */
int f2fuse_trim(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen,
                uint64_t *trimmed);

/* Reports every counter of the mount (block layer, cache, file system), one call each. */
typedef void (*f2fuse_stat_fn)(void *arg, const char *name, uint64_t value);
void f2fuse_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
