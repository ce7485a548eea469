/* libf2fuse: open, read (and, as the project grows, write) f2fs images in user space.
 *
 * One struct f2fuse is one opened image; all its state hangs off it, so a process may
 * open several images.  Functions return 0 (or a byte count) on success and -errno on
 * failure; a corrupt image yields -EIO (or -EUCLEAN for a refused mount) plus a log line
 * that says what is wrong.  Inode numbers are f2fs inode numbers (the root is
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
    bool read_only;        /* open without writing anything */
};

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
/* Lists dir_ino from cookie (0 = start).  Returns 0 or -errno. */
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

/* Reports every counter of the mount (block layer, cache, file system), one call each. */
typedef void (*f2fuse_stat_fn)(void *arg, const char *name, uint64_t value);
void f2fuse_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
