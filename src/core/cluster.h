/* cluster.c: a compressed file's clusters as the page cache and the device see them
 * (fs/f2fs/compress.c around the codecs): reads that decode them, the whole cluster in the
 * cache before any page of a compressed one changes, writeback that stores a full cluster
 * compressed when that saves a block (else plain), partial truncation, and segment
 * cleaning that moves a cluster's compressed blocks as they are. */
#ifndef F2FUSE_CORE_CLUSTER_H
#define F2FUSE_CORE_CLUSTER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "blk/blk.h"
#include "util/stats.h"

struct f2fuse;
struct inode_info;
struct page;

/* What the write and read sides did (f2fuse stat "compress.*"). */
struct cluster_stats {
    atomic_uint_fast64_t written_compressed;   /* clusters writeback stored compressed */
    atomic_uint_fast64_t written_plain;        /* clusters of compressed files stored plain */
    atomic_uint_fast64_t blocks_saved;         /* blocks those compressed clusters did not take */
    atomic_uint_fast64_t decoded;              /* clusters decompressed (reads, rewrites) */
    atomic_uint_fast64_t encode_ns, decode_ns; /* thread CPU time in the codecs */
    atomic_uint_fast64_t gc_moved;             /* compressed clusters GC moved (blocks as are) */
    atomic_uint_fast64_t helper_spans;         /* spans of reads the helper thread decoded */
};

struct cluster_decoder;

/* Stops the thread that helps reads decode (at unmount). */
void cluster_destroy(struct f2fuse *fs);

/* Reads [off, off + size) of a compressed file (inside its size): plain clusters as
 * stored, compressed ones decoded; pages in the cache win over the device.  The reads of
 * every cluster in a range of up to 2 MiB go to the device together, and the mount's helper
 * thread decodes some of them when it is free. */
int cluster_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                 size_t size, uint64_t off);

/* Before a page of the cluster holding index changes (the kernel's
 * prepare_compress_overwrite): when that cluster is stored compressed, every page of it
 * comes into the cache (decoded where absent; bytes at or past i_size as zeros) and is
 * made dirty, so writeback rewrites the cluster whole.  1 when it was compressed, 0 when
 * not, or -errno (-EIO for a cluster that does not decode).  Holds the stripe. */
int cluster_prepare_change(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           uint64_t index);

/* Writeback of a compressed file.  pages[0, n) are some of its dirty pages, sorted, each
 * referenced: _gather adds the other dirty pages of the clusters they touch (a cluster
 * is written whole), within cap entries; a cluster that does not fit is put back and left
 * dirty.  Returns the new count; *err for a failure (what was gathered stays valid).
 * Holds the inode's stripe. */
size_t cluster_gather(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      struct page **pages, size_t n, size_t cap, int *err);
/* Gives the gathered pages' clusters their blocks: a full cluster inside the file stored
 * compressed when that saves a block (COMPRESS_ADDR, its compressed blocks, NEW_ADDR
 * spare slots), any other plain (a formerly compressed one losing its slots past EOF).
 * addrs[i] is where block i is to be written, 0 for nothing (a cluster's first slot,
 * spare slots, pages past EOF); its contents are at out + i * 4096, or, with srcs, at
 * srcs[i]: a plain cluster's own pages (not copied; they must stay unchanged until
 * written), compressed blocks in out.  i_blocks, i_compr_blocks, the valid and reserved
 * counts and quota stay exact.  *done: pages handled (whole clusters), also on error. */
int cluster_assign_blocks(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                          struct page *const *pages, size_t n, uint32_t *addrs, uint8_t *out,
                          const void **srcs, size_t *done);
/* All of writeback for one run of a compressed file's dirty pages (sorted, referenced; every
 * one is put): gathered, assigned, written at prio and waited for, marked clean.  The
 * pages it wrote are added to *written.  Holds the inode's stripe. */
int cluster_writeback_run(struct f2fuse *fs, uint32_t ino, struct page **pages, size_t n,
                          enum blk_prio prio, uint64_t *written);

/* Truncation of a compressed file to new_size inside a cluster stored compressed (the
 * kernel's f2fs_truncate_partial_cluster): the cluster comes into the cache, zeroed past
 * new_size, to be rewritten plain by writeback; *keep_from is the first block the caller
 * may free (the next cluster).  0 with *keep_from = UINT64_MAX when the cluster is plain
 * (the caller truncates per block). */
int cluster_truncate_partial(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                             uint64_t new_size, uint64_t *keep_from);

/* Segment cleaning of blkaddr, the block of file block index of a compressed file: when it
 * belongs to a compressed cluster, that cluster's compressed blocks in the same segment
 * move together, as they are (no decoding: a damaged or released cluster moves too), to
 * the cold data log.  The blocks moved, 0 when the block is in a plain cluster (the caller
 * moves its page), -errno.  Holds the stripe and cp_lock. */
int cluster_gc_move(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index,
                    uint32_t blkaddr);

void cluster_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

#endif
