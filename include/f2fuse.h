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
#include <stdio.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

struct f2fuse;

struct f2fuse_options {
    const char *backend;          /* block backend: "uring" (default) or "psync" */
    unsigned queue_depth;         /* io_uring queue depth (default 64) */
    uint64_t cache_size;          /* page cache budget in bytes; 0 = auto (the default): sized
                                   * from free memory and the memory cgroup, given back under
                                   * pressure, between cache_min and cache_max */
    uint64_t cache_min;           /* auto: the floor (default 32 MiB) */
    uint64_t cache_max;           /* auto: the ceiling; 0 = none (the default) */
    bool read_only;               /* open without writing anything (default) */
    unsigned checkpoint_interval; /* seconds between checkpoints of a dirty mount; 0 = off */
    bool checkpoint_merge; /* one daemon thread serves concurrent checkpoint requests at once */
    /* With checkpoint_merge: before a checkpoint, wait at most this long (and no longer than
     * an average checkpoint takes) for requesters seen recently that have not asked yet, so
     * that alternating requesters share checkpoints (jbd2's batching); 0 = never wait. */
    unsigned checkpoint_batch_us;
    bool fsync_fast;  /* fsync writes the file and its nodes, not a checkpoint, when it can */
    bool flush_merge; /* concurrent fast fsyncs share device flushes (default on) */
    /* Reads map blocks inside an inode's largest extent (i_ext) without the node, as the
     * kernel's read extent cache (default on; the extent is kept true either way). */
    bool extent_cache;
    /* Big directories get an in-memory index by name hash: a lookup reads one dentry
     * block instead of a bucket on every level (default on; nothing on disk changes). */
    bool dir_index;
    /* The mount options sync and dirsync (MS_SYNCHRONOUS, MS_DIRSYNC): a change of names is
     * on disk when it returns, in every directory.  FUSE makes a sync mount's writes
     * synchronous itself (it sends FSYNC) but leaves directories to the file system. */
    bool mount_sync, mount_dirsync;
    /* Every checkpoint also writes every file's dirty data (checkpoint_data=all): a directory
     * fsync then makes everything durable.  Off (checkpoint_data=metadata, the default), as
     * in f2fs: regular files' data reaches the image by writeback, fsync, f2fuse_sync, the
     * checkpoint_interval timer and unmount. */
    bool checkpoint_all_data;
    /* Count a lookup reference for every inode an operation returns (lookup, mknod, mkdir,
     * symlink, link), released by f2fuse_forget: an unlinked inode (and its number) lives
     * until then.  The FUSE daemon sets it: the kernel's nodeids must not be reused while
     * it holds them. */
    bool track_lookups;
    /* discard (see f2fuse_trim): */
    bool discard;          /* online: what each checkpoint frees is discarded after it (default) */
    unsigned discard_mode; /* F2FUSE_DISCARD_* (default parallel; the others are baselines) */
    uint64_t discard_max;  /* largest single discard request in bytes (default 64 MiB) */
    unsigned discard_qd;   /* discard requests in flight in parallel mode (default 32) */
    unsigned
        discard_idle_ms; /* online discard waits for this long without writes (100; 0: at once) */
    /* writeback control (bandwidth × time, dirty_background_time; all changeable on a
     * running mount, see f2fuse_tune).  Dirty means file data written and not yet on the
     * device; ratios are % of cache_size, the most dirty data could ever take. */
    uint64_t dirty_bytes;            /* hard limit: writers wait above it; 0 = dirty_ratio */
    unsigned dirty_ratio;            /* default 20 */
    uint64_t dirty_background_bytes; /* background writeback above it; 0 = the ratio */
    unsigned dirty_background_ratio; /* default 10 */
    unsigned dirty_expire_ms;        /* data dirty for longer is written back (default 30000) */
    unsigned writeback_interval_ms;  /* the flusher's period (default 5000; 0 = off) */
    unsigned dirty_background_time;  /* ms: background writeback also above the device's
                                        estimated write bandwidth × this; 0 = off (default) */
    uint64_t dev_bw;                 /* experiments: device limited to this many bytes/s */
    /* segment cleaning (GC): */
    unsigned background_gc; /* F2FUSE_BGGC_*: 1 on (default), 0 off, 2 sync (src/core/gc.h) */
    unsigned gc_idle_ms;    /* background GC waits this long without writes (default 1000) */
    bool gc_ssr;            /* data fills free slots of partly valid segments near full (default) */
    /* Whole-disk images (option "offset=BYTES" or "partition=N|NAME"): the file system is
     * the part of the file that starts offset bytes in (a multiple of 4096), or the
     * partition of the file's GPT or MBR table with that number or GPT name.  Every read
     * and write stays inside it. */
    uint64_t offset;
    char partition[80]; /* "" = none */
    /* Quota (images with the quota feature): usage is always kept; which types' limits bind
     * (options usrquota, grpquota, prjquota, quota, noquota; 0 = every type's). */
    unsigned quota_limits;
    /* Compression (images with the compression feature): what a file made compressed gets
     * (by chattr +c, a compressed parent directory or compress_extension), as the kernel's
     * mount options of the same names. */
    unsigned compress_algorithm; /* 0 lzo, 1 lz4 (default), 2 zstd, 3 lzo-rle */
    unsigned compress_level;     /* LZ4HC 3..12, zstd 1..22; 0 = the algorithm's default */
    unsigned compress_log_size;  /* a cluster is 2^this blocks: 2 (default)..8 */
    bool compress_chksum;        /* clusters carry a CRC of their data, checked on reads */
    /* New regular files whose name ends in ".EXT" (case-insensitive; "*" = all) are
     * compressed, unless listed in nocompress: up to 16 of each, 7 characters at most. */
    char compress_ext[16][8];
    unsigned compress_ext_count;
    char nocompress_ext[16][8];
    unsigned nocompress_ext_count;
    /* Network devices (IMAGE an nbd:// URI or rbd:POOL/IMAGE): seconds a server may stay
     * unreachable or leave a request unanswered before requests fail (default 30); NBD
     * connections when the server allows several (default 1); the Ceph client's id (as in
     * client.ID), its ceph.conf and keyring ("" = librados' defaults). */
    unsigned net_timeout;
    unsigned connections;
    char ceph_id[64];
    char ceph_conf[256];
    char ceph_keyring[256];
    /* fscrypt master keys read at open (option fscrypt_key=[DESC:]FILE, repeatable): each
     * value followed by a newline (see f2fuse_key_add). */
    char fscrypt_keys[2048];
};

#define F2FUSE_DISCARD_BLOCK    0u /* one request per block, one at a time */
#define F2FUSE_DISCARD_SERIAL   1u /* merged ranges, one at a time */
#define F2FUSE_DISCARD_PARALLEL 2u /* merged ranges, discard_qd at a time */

void f2fuse_options_init(struct f2fuse_options *opts);

/* Sets one option by name, as in "-o name=value" (value NULL for "-o name"): every option
 * is listed, with its default and range, by f2fuse_options_print.  Returns 0, -ENOENT for an
 * unknown name, -EINVAL for a bad or missing value.  The string stored for "backend" is a
 * static one, so value need not outlive the call. */
int f2fuse_option_set(struct f2fuse_options *opts, const char *name, const char *value);

/* Lists the option names f2fuse_option_set accepts, for help and error messages; those
 * marked "(tests) " are f2fuse_test_option_set's (f2fuse_test.h). */
const char *f2fuse_option_names(void);

/* Describes every option (the test ones too): F2FUSE_OPTIONS_LIST as f2fuse_option_names,
 * _LINES one option per entry with its help, default, range and whether f2fuse_tune may
 * change it, _TROFF the same as man(7) paragraphs (the man page's option summary). */
#define F2FUSE_OPTIONS_LIST  0u
#define F2FUSE_OPTIONS_LINES 1u
#define F2FUSE_OPTIONS_TROFF 2u
void f2fuse_options_print(FILE *out, unsigned style);

int f2fuse_open(const char *image, const struct f2fuse_options *opts, struct f2fuse **out);
void f2fuse_close(struct f2fuse *fs);

uint32_t f2fuse_root_ino(const struct f2fuse *fs);
/* The superblock's feature bits (F2FS_FEATURE_*; no I/O, unlike f2fuse_info). */
uint32_t f2fuse_features(const struct f2fuse *fs);

struct f2fuse_attr {
    uint32_t ino;
    uint32_t mode; /* type and permission bits, as st_mode */
    uint32_t nlink;
    uint32_t uid, gid;
    uint64_t size;
    uint64_t blocks; /* 512-byte units, as st_blocks */
    uint64_t rdev;
    uint32_t generation;
    uint32_t flags; /* FS_*_FL inode flags */
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
/* f2fuse_read, except that a read of a plain file that only needs one device read returns
 * -EINPROGRESS at once and calls done(arg, result) once that read is done, on whichever
 * thread completed it (a thread of the block backend, or the caller's own before this
 * returns); buf must stay valid until then.  Anything else returns its result here. */
typedef void (*f2fuse_read_done_fn)(void *arg, ssize_t result);
ssize_t f2fuse_read_async(struct f2fuse *fs, uint32_t ino, void *buf, size_t size, uint64_t off,
                          f2fuse_read_done_fn done, void *arg);
/* Returns once every done() of f2fuse_read_async has returned. */
void f2fuse_read_drain(struct f2fuse *fs);
/* Copies the symlink target (not NUL-terminated) and returns its length, or -errno.  An
 * encrypted symlink's target is its no-key encoding, as the kernel shows it without the
 * key; so are the names of an encrypted directory (readdir, and lookup takes them). */
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

/* Creates a regular file, device node, fifo or socket (mode's type bits; 0 = regular).
 * mknod and mkdir apply POSIX.1e, as the kernel's f2fs: a parent's default ACL masks the mode
 * and becomes the new inode's access ACL (and a directory's default); without one, the
 * umask given as mode | F2FUSE_UMASK(umask) masks it (none given: the mode as it is). */
#define F2FUSE_UMASK(umask) (((uint32_t)(umask)&0777u) << 16)
int f2fuse_mknod(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen,
                 uint32_t mode, uint64_t rdev, uint32_t uid, uint32_t gid,
                 struct f2fuse_attr *attr);
int f2fuse_mkdir(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen,
                 uint32_t mode, uint32_t uid, uint32_t gid, struct f2fuse_attr *attr);
int f2fuse_symlink(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen,
                   const char *target, uint32_t uid, uint32_t gid, struct f2fuse_attr *attr);
int f2fuse_link(struct f2fuse *fs, uint32_t ino, uint32_t parent, const char *name, size_t namelen,
                struct f2fuse_attr *attr);
int f2fuse_unlink(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen);
int f2fuse_rmdir(struct f2fuse *fs, uint32_t parent, const char *name, size_t namelen);

#define F2FUSE_RENAME_NOREPLACE 1u /* as RENAME_NOREPLACE */
#define F2FUSE_RENAME_EXCHANGE  2u /* as RENAME_EXCHANGE */
int f2fuse_rename(struct f2fuse *fs, uint32_t old_parent, const char *old_name, size_t old_len,
                  uint32_t new_parent, const char *new_name, size_t new_len, unsigned flags);

/* An inode open through the caller (a FUSE open file) outlives its last name until
 * f2fuse_release; a crash in between leaves an orphan that the next mount frees. */
int f2fuse_open_inode(struct f2fuse *fs, uint32_t ino);
/* Whether ino may be opened at all: -ENOKEY for an encrypted regular file, whose contents
 * f2fuse cannot decrypt (the kernel's fscrypt_file_open without the key).  f2fuse_open_inode
 * checks it too; a read-only caller that takes no reference asks this. */
int f2fuse_open_check(struct f2fuse *fs, uint32_t ino);
int f2fuse_forget(struct f2fuse *fs, uint32_t ino, uint64_t nlookup);
int f2fuse_release(struct f2fuse *fs, uint32_t ino);
/* open(2) of ino with flags (O_ACCMODE, O_TRUNC), as the kernel decides it: -EPERM for an
 * fs-verity file opened for writing or with O_TRUNC, -EIO when its verity metadata does not
 * parse; on a read-write mount the open counts as f2fuse_open_inode's, and one with write
 * access as a writer (f2fuse_verity_enable refuses files with writers).  Does not truncate.
 * Release with f2fuse_release_file and the same flags. */
int f2fuse_open_file(struct f2fuse *fs, uint32_t ino, int flags);
int f2fuse_release_file(struct f2fuse *fs, uint32_t ino, int flags);

/* Writes size bytes at off (past the end: the gap reads as zeros); returns size or -errno.
 * As the kernel's VFS, any write drops the file's security.capability attribute. */
ssize_t f2fuse_write(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off);
/* flags for f2fuse_write_ex: the writer may not keep the set-id bits (it lacks
 * CAP_FSETID): set-user-ID goes, set-group-ID too when the group may execute.
 * *mode_changed (when not NULL) says whether that changed the mode. */
#define F2FUSE_WRITE_KILL_SUIDGID 1u
/* The kernel writing back pages it cached (FUSE's writepage): the writer's rights were
 * checked when it wrote them.  Any other write is a caller's own, refused on an immutable
 * file and, on an append-only one, anywhere but at its end (EPERM). */
#define F2FUSE_WRITE_WRITEBACK 2u
ssize_t f2fuse_write_ex(struct f2fuse *fs, uint32_t ino, const void *buf, size_t size, uint64_t off,
                        unsigned flags, bool *mode_changed);

#define F2FUSE_SET_MODE  (1u << 0)
#define F2FUSE_SET_UID   (1u << 1)
#define F2FUSE_SET_GID   (1u << 2)
#define F2FUSE_SET_SIZE  (1u << 3)
#define F2FUSE_SET_ATIME (1u << 4)
#define F2FUSE_SET_MTIME (1u << 5)
#define F2FUSE_SET_CTIME (1u << 6)
/* With SET_SIZE: the caller may not keep the set-id bits (as F2FUSE_WRITE_KILL_SUIDGID).
 * A size change always drops security.capability; a change of owner or group (without
 * SET_MODE) drops it and the set-id bits of a non-directory, as chown(2) does. */
#define F2FUSE_SET_KILL_SUIDGID (1u << 7)
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
/* The flags of lsattr/chattr (FS_IOC_GETFLAGS/SETFLAGS, FS_*_FL values) and the view of
 * FS_IOC_FSGETXATTR/FSSETXATTR (FS_XFLAG_* and the project id).  On set, from_xflags says
 * which of the two the caller filled in: a set through xflags changes only the flags the
 * two views share, and the project id. */
struct f2fuse_fileattr {
    uint32_t flags;
    uint32_t xflags;
    uint32_t projid;
    bool from_xflags;
};
int f2fuse_fileattr_get(struct f2fuse *fs, uint32_t ino, struct f2fuse_fileattr *fa);
/* The 16-byte nonce of an encrypted inode's encryption context (FS_IOC_GET_ENCRYPTION_NONCE):
 * -ENODATA when the inode is not encrypted, -EIO when its context is damaged. */
int f2fuse_encryption_nonce(struct f2fuse *fs, uint32_t ino, uint8_t nonce[16]);
/* caller_uid: only the owner and root may change flags (EPERM otherwise). */
int f2fuse_fileattr_set(struct f2fuse *fs, uint32_t ino, const struct f2fuse_fileattr *fa,
                        uint32_t caller_uid);

/* fs-verity (the kernel's FS_IOC_MEASURE_VERITY and FS_IOC_ENABLE_VERITY; reading a
 * verity file checks every block against its Merkle tree, -EIO when one does not match;
 * writing it, changing its size or fallocate is -EPERM).  The digest is the hash of the
 * file's descriptor: what `fsverity digest` prints for the same content and parameters.
 * measure: -ENODATA for a file without verity. */
struct f2fuse_verity_digest {
    uint16_t algorithm; /* 1 SHA-256, 2 SHA-512 (FS_VERITY_HASH_ALG_*) */
    uint16_t size;      /* bytes of digest */
    uint8_t digest[64];
};
int f2fuse_verity_measure(struct f2fuse *fs, uint32_t ino, struct f2fuse_verity_digest *d);
/* enable builds the tree over the file's data and stores it with the descriptor past EOF.
 * -EEXIST when verity is on already, -ETXTBSY while the file is open for writing
 * (f2fuse_open_file), -EINVAL for a block size or algorithm the kernel refuses (block sizes
 * 1024 to 4096), -EMSGSIZE for a salt over 32 bytes, -EOPNOTSUPP on an image without the
 * verity feature.  A signature is stored, not checked (no keyring in user space). */
struct f2fuse_verity_enable {
    uint32_t hash_algorithm; /* 1 SHA-256, 2 SHA-512 */
    uint32_t block_size;
    const void *salt;
    uint32_t salt_size;
    const void *signature;
    uint32_t sig_size;
};
int f2fuse_verity_enable(struct f2fuse *fs, uint32_t ino, const struct f2fuse_verity_enable *arg);

/* flags: 0, XATTR_CREATE or XATTR_REPLACE (as setxattr(2)). */
int f2fuse_setxattr(struct f2fuse *fs, uint32_t ino, const char *name, const void *value,
                    size_t size, int flags);
int f2fuse_removexattr(struct f2fuse *fs, uint32_t ino, const char *name);

/* f2fuse_sync makes everything written so far durable: every file's data, then a
 * checkpoint.  f2fuse_fsync makes one inode durable: for a regular file with one name that
 * the last checkpoint holds, by writing its data and nodes for roll-forward recovery (no
 * checkpoint); any other regular file has its data written, then a checkpoint; a directory
 * or symlink takes a checkpoint.  A checkpoint holds the whole namespace and every inode,
 * but not the data of other regular files that were not written back yet (as f2fs). */
int f2fuse_sync(struct f2fuse *fs);
int f2fuse_fsync(struct f2fuse *fs, uint32_t ino, bool datasync);
/* The same on behalf of a caller: its Linux I/O priority (ioprio_get(2); 0 = none) - without
 * checkpoint_merge the checkpoint's I/O runs at that priority, as the kernel's does in the
 * caller's context; with it, the merging daemon's I/O is high priority - and its thread id
 * (0 = unknown), which lets the merging daemon batch requests of different callers. */
struct f2fuse_caller {
    int ioprio;
    int tid;
};
int f2fuse_sync_as(struct f2fuse *fs, const struct f2fuse_caller *who);
int f2fuse_fsync_as(struct f2fuse *fs, uint32_t ino, bool datasync,
                    const struct f2fuse_caller *who);
/* fsync of a directory the caller knows to be one: the checkpoint is requested at once,
 * without taking any lock, so that it can join a checkpoint being batched. */
int f2fuse_fsyncdir_as(struct f2fuse *fs, uint32_t ino, const struct f2fuse_caller *who);

/* Discards the free space of the main area inside [start, start + len) (bytes on the device,
 * FITRIM's fstrim_range): a checkpoint first, so that what was freed is committed, then every
 * free extent of at least minlen bytes that is not known to be discarded already (punched
 * holes in an image file, BLKDISCARD on a block device).  *trimmed gets the bytes discarded
 * by this call, so a second call with nothing freed in between reports 0.  -EINVAL when
 * start is past the device or len is under one block, -EROFS on a read-only mount,
 * -EOPNOTSUPP when the device cannot discard. */
int f2fuse_trim(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen,
                uint64_t *trimmed);

/* Changes an option of a mounted image by name (those f2fuse_options_print marks as
 * changeable: the writeback options above and dev_bw): 0, -ENOENT for an unknown name,
 * -EPERM for an option that cannot change while mounted, -EINVAL for a bad value, -EROFS for
 * a writeback option on a read-only mount. */
int f2fuse_tune(struct f2fuse *fs, const char *name, const char *value);

/* Reports every counter of the mount (block layer, cache, file system), one call each. */
typedef void (*f2fuse_stat_fn)(void *arg, const char *name, uint64_t value);
void f2fuse_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg);

/* ---- quota (images with the quota feature: mkfs.f2fs -O quota, project_quota) ----
 * Usage per user, group and project is kept in the image's quota files as the kernel keeps
 * it; limits found there bind as the kernel's do when limits are enabled. */
#define F2FUSE_QUOTA_USR 0u
#define F2FUSE_QUOTA_GRP 1u
#define F2FUSE_QUOTA_PRJ 2u
struct f2fuse_quota {
    unsigned type; /* F2FUSE_QUOTA_* */
    uint32_t id;
    uint64_t space, inodes; /* usage: bytes (what i_blocks counts, less the inode), inodes */
    uint64_t bhard, bsoft;  /* block limits in bytes, 0 = none */
    uint64_t ihard, isoft;  /* inode limits, 0 = none */
    uint64_t btime, itime;  /* when an exceeded soft limit starts to bind (epoch s), 0 = not */
};
typedef int (*f2fuse_quota_fn)(void *arg, const struct f2fuse_quota *q);
/* Calls fn for every id the quota files know (fn returns non-zero to stop): the live usage on
 * a read-write mount, the files' content on a read-only one.  -ENODATA when the image keeps
 * no quota files, -EUCLEAN when one is damaged. */
int f2fuse_quota_list(struct f2fuse *fs, f2fuse_quota_fn fn, void *arg);
/* Limits bind a caller who is not root (the kernel: without CAP_SYS_RESOURCE).  A program
 * acting for other users (the FUSE daemon) names, per thread, the user behind the operations
 * this thread calls next; F2FUSE_CALLER_NONE, the default, is not bound. */
#define F2FUSE_CALLER_NONE UINT32_MAX
void f2fuse_set_caller_uid(uint32_t uid);

/* ---- offline summary (f2fuse info) ----
 * What an image's superblock and current checkpoint say: geometry, features, which of the
 * two checkpoint packs is current, block and segment usage by log, and whether the last
 * mount ended cleanly.  Describes the image as of its last checkpoint; on a read-write
 * handle, usage is the live segment state instead. */
#define F2FUSE_INFO_LOGS 6 /* hot, warm, cold data; hot, warm, cold node */
struct f2fuse_info {
    char volume_name[128]; /* UTF-8 */
    uint8_t uuid[16];
    char version[257];       /* kernel or tool that last wrote the superblock */
    char init_version[257];  /* the one that made it */
    uint32_t features;       /* superblock feature bits */
    char feature_names[320]; /* the same as comma-separated names */
    uint64_t device_bytes;
    uint64_t block_count; /* 4 KiB blocks the file system spans */
    uint32_t segment_count, segs_per_sec, secs_per_zone, section_count;
    uint32_t segments_cp, segments_sit, segments_nat, segments_ssa, segments_main;
    uint32_t main_blkaddr;
    uint32_t max_nid;

    unsigned cp_pack; /* 1 or 2: the current checkpoint pack */
    uint64_t cp_version;
    bool other_pack_valid; /* the other pack: the previous checkpoint, if intact */
    uint64_t other_pack_version;
    uint32_t cp_flags; /* ckpt_flags */
    char cp_flag_names[256];
    bool clean_unmount;       /* the last mount ended with an unmount checkpoint */
    bool in_use;              /* another program has the image open read-write now (a live
                                * f2fuse mount): the figures are its last checkpoint's */
    bool needs_fsck;          /* an error or fsck flag is set */
    uint32_t orphans;         /* inodes unlinked while open, freed at the next rw mount */
    uint32_t fsync_nodes;     /* nodes written by fsync after the checkpoint (recovery) */
    uint64_t elapsed_seconds; /* mounted time recorded in the checkpoint */
    uint64_t user_blocks, valid_blocks, free_blocks;
    uint32_t valid_nodes, valid_inodes;
    uint32_t free_segments, overprov_segments, reserved_segments;

    bool usage_known; /* false when the segment table could not be read */
    struct {
        uint32_t segments; /* segments of this type holding valid blocks */
        uint64_t valid_blocks;
        uint32_t cur_segno, cur_blkoff; /* where the log writes next */
    } logs[F2FUSE_INFO_LOGS];
    uint32_t empty_segments; /* main segments without a valid block */
};

int f2fuse_info(struct f2fuse *fs, struct f2fuse_info *info);

/* ---- fscrypt master keys ----
 * Encrypted trees (fscrypt, Android's file-based encryption) read and written with their key.
 * A master key (16 to 64 bytes, raw as given to FS_IOC_ADD_ENCRYPTION_KEY) unlocks every
 * tree whose v2 policy names its key identifier, or whose v1 policy names its descriptor.
 * Keys live in locked memory and are wiped on removal and at close; none is ever logged. */
struct f2fuse_key_info {
    unsigned status;  /* F2FUSE_KEY_* */
    unsigned version; /* _MISSING: the version of the policy met (1: the descriptor names it) */
    uint8_t identifier[16]; /* v2 key identifier */
    uint8_t descriptor[8];  /* v1 descriptor */
    unsigned busy_files;    /* _BUSY: open files that keep keys derived from it */
};
#define F2FUSE_KEY_PRESENT 1u
#define F2FUSE_KEY_BUSY    2u /* removed; files open then keep their keys until closed */
#define F2FUSE_KEY_MISSING 3u /* a policy met whose key is absent */
typedef int (*f2fuse_key_fn)(void *arg, const struct f2fuse_key_info *k);
/* Adds a master key; desc is its v1 descriptor, or NULL for the conventional one (the first
 * 8 bytes of SHA-512(SHA-512(key)), as e4crypt, fscrypt and Android's vold choose it).
 * -EINVAL for a size outside 16..64, -ENOSPC past 32 keys, -ENOMEM when memory cannot be
 * locked.  info gets the identifier and descriptor. */
int f2fuse_key_add(struct f2fuse *fs, const uint8_t *raw, size_t len, const uint8_t *desc,
                   struct f2fuse_key_info *info);
/* Removes the key with this identifier (16 bytes) or descriptor (8 bytes); *busy gets the
 * open files that keep using it until closed (-ENOKEY when no such key). */
int f2fuse_key_remove(struct f2fuse *fs, const uint8_t *spec, size_t len, unsigned *busy);
/* Lists the keys present or busy, then the policies met without a key. */
int f2fuse_key_list(struct f2fuse *fs, f2fuse_key_fn fn, void *arg);
/* Reads a key file ("-": standard input): 16..64 raw bytes, or that many bytes in hex digits
 * (a newline may follow).  key has room for 64 bytes; the caller wipes it.  -EINVAL for
 * anything else. */
int f2fuse_key_read_file(const char *path, uint8_t *key, size_t *len);
/* Calls fn for every encrypted inode the caller holds (lookups, opens): what a kernel in
 * front cached of them (symlink sizes, file pages) changed with a key. */
int f2fuse_encrypted_held(struct f2fuse *fs, void (*fn)(void *arg, uint32_t ino), void *arg);

/* ---- whole-disk images ----
 * The partitions of an image with a GPT or MBR table, for `f2fuse info` and for picking
 * one with the partition= option. */
struct f2fuse_partition {
    unsigned number;       /* as in /dev/sdX<number>: what partition=N takes */
    char name[80];         /* GPT partition name (UTF-8), "" on MBR */
    char type[40];         /* GPT type GUID, or the MBR type as "0x83" */
    const char *type_name; /* what the type means ("Linux filesystem"), or NULL */
    uint64_t start, size;  /* bytes */
    bool f2fs;             /* the f2fs superblock magic is where it belongs */
};

/* Reads the partition table of image: *table_kind gets libblkid's name for it ("gpt",
 * "dos"; "" when there is none, *count then 0), *parts an array to free().  0 or -errno. */
int f2fuse_partitions(const char *image, char *table_kind, size_t kind_len,
                      struct f2fuse_partition **parts, unsigned *count);

/* Reports progress of a long operation: done out of total (units of the operation);
 * return non-zero to stop it early (the operation then returns -EINTR, having left the
 * image consistent). */
typedef int (*f2fuse_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* f2fuse_trim with progress in bytes of the range scanned; *trimmed counts what was
 * discarded before a stop. */
int f2fuse_trim_progress(struct f2fuse *fs, uint64_t start, uint64_t len, uint64_t minlen,
                         uint64_t *trimmed, f2fuse_progress_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
