/* quota_file.c: one quota file (QFMT_VFS_V1, format.h) held in memory - checked as hostile
 * input, its entries listed, entries added and removed in the radix tree with the kernel's
 * free-block and free-entry lists (fs/quota/quota_tree.c's rules).  No f2fs here: quota.c
 * reads the file in and writes the changed 4 KiB pages back. */
#ifndef F2FUSE_CORE_QUOTA_FILE_H
#define F2FUSE_CORE_QUOTA_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum quota_type { QUOTA_USR, QUOTA_GRP, QUOTA_PRJ, QUOTA_TYPES };

/* A quota entry as numbers: limits and usage in the file's units (block limits in 1 KiB,
 * space in bytes), times in seconds since the epoch. */
struct qentry {
    uint32_t id;
    uint64_t ihard, isoft, inodes;
    uint64_t bhard, bsoft, space;
    uint64_t btime, itime;
};

struct qfile {
    enum quota_type type;
    uint8_t *data;   /* blocks * QUOTA_BLKSIZE bytes of content */
    uint32_t blocks; /* the info's block count: the file's quota blocks */
    uint32_t cap;    /* blocks data has room for */
    uint8_t *dirty;  /* one bit per 4 KiB page changed since qfile_clean */
    uint32_t dirty_pages;
};

/* Takes buf (size bytes of the file, malloc'ed; owned by qf from here on, also on error) and
 * checks the header and info against it.  0, -ENOMEM, or -EUCLEAN with why filled in. */
int qfile_open(struct qfile *qf, enum quota_type type, uint8_t *buf, size_t size, char *why,
               size_t why_len);
void qfile_close(struct qfile *qf);

/* Walks the whole tree, checking every reference, data block and both free lists, and calls
 * fn for every entry with its byte offset in the file.  fn returns 0 or -errno (a duplicate
 * id: -EUCLEAN).  0, -ENOMEM, fn's error, or -EUCLEAN with why filled in. */
typedef int (*qfile_entry_fn)(void *arg, const struct qentry *e, uint32_t off);
int qfile_scan(struct qfile *qf, qfile_entry_fn fn, void *arg, char *why, size_t why_len);

/* A new entry slot for id (not in the tree): tree blocks and a data block as the kernel
 * takes them.  *off gets its offset; qfile_put_entry must fill it before anything else.
 * 0, -ENOMEM (nothing changed), -EEXIST, -EUCLEAN (the tree does not hold together). */
int qfile_insert(struct qfile *qf, uint32_t id, uint32_t *off);
/* Removes id's entry at off from the tree, freeing emptied data and tree blocks. */
int qfile_delete(struct qfile *qf, uint32_t id, uint32_t off);
void qfile_put_entry(struct qfile *qf, uint32_t off, const struct qentry *e);

/* The grace times of the info block (seconds). */
uint32_t qfile_bgrace(const struct qfile *qf);
uint32_t qfile_igrace(const struct qfile *qf);

/* The 4 KiB pages changed since the last qfile_clean, in order: next after *page (start at
 * UINT32_MAX); false at the end. */
bool qfile_next_dirty(const struct qfile *qf, uint32_t *page);
void qfile_clean(struct qfile *qf);

/* A new file's content (header, info, empty root): what tests and fsck's rebuild start from. */
int qfile_create(struct qfile *qf, enum quota_type type);

#endif
