/* Shared pieces of the libFuzzer harnesses (one harness per tests/fuzz/fuzz_*.c).
 *
 * Every harness feeds a hostile image to the library the way the daemon would: the image
 * lives in a memfd of FZ_IMAGE_BYTES (a tmpfs file: no disk I/O, one execution takes
 * milliseconds), is opened with backend=psync through /proc/self/fd/N, walked completely
 * (every directory listed, every name looked up, every file read, every link and xattr
 * read) and closed.  The mount harnesses' input is a whole image in a sparse "block list"
 * encoding; the per-structure harnesses start from a base image (mkfs.f2fs + sload.f2fs +
 * changes made by f2fuse itself, built once per process by tests/fuzz/mkbase.sh) and let
 * the fuzzer's bytes replace one structure of it.
 *
 * Environment: F2FUSE_FUZZ_SEEDS=DIR writes the harness's seed inputs (taken from the base
 * image) into DIR and exits; F2FUSE_FUZZ_LOG=1 keeps the library's log lines (silenced
 * otherwise: a fuzzer meets millions of corrupt structures). */
#ifndef F2FUSE_FUZZ_HARNESS_H
#define F2FUSE_FUZZ_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "f2fuse.h"

#define FZ_BLOCK       4096u
#define FZ_IMAGE_BYTES (96u << 20) /* tests/fuzz/mkbase.sh */
#define FZ_BLOCKS      (FZ_IMAGE_BYTES / FZ_BLOCK)

/* What a per-structure harness points the fuzzer at, found by walking the base image. */
enum fz_target {
    FZ_T_INODE,   /* every inode block */
    FZ_T_NODE,    /* direct and indirect node blocks of files */
    FZ_T_DENTRY,  /* directory blocks, and inode blocks of inline directories */
    FZ_T_XATTR,   /* xattr node blocks, and inode blocks holding inline xattrs */
    FZ_T_SYMLINK, /* symlink inode blocks and their target blocks */
    FZ_T_META,    /* NAT, SIT and SSA blocks in use, and the checkpoint's summary blocks */
    FZ_T_COUNT
};

/* Call once from LLVMFuzzerInitialize.  with_base builds the base image. */
void fz_init(bool with_base);

/* The memfd image. */
const char *fz_image_path(void);
/* Makes the image all zeros (a fresh sparse file). */
void fz_image_zero(void);
/* Makes the image the base image again (every block). */
void fz_image_base(void);
void fz_write(uint64_t off, const void *buf, size_t len);
void fz_read(uint64_t off, void *buf, size_t len);
/* Puts block blkaddr back as the base image has it. */
void fz_restore_block(uint32_t blkaddr);
/* The base image's block (FZ_BLOCK bytes). */
const uint8_t *fz_base_block(uint32_t blkaddr);

/* Sparse block list: records {u32 blkaddr, u16 offset, u16 length, bytes} (little-endian),
 * each written at blkaddr * 4096 + offset, clipped to its block.  map (may be NULL) turns a
 * record's blkaddr into the real one (per-structure harnesses index their target list). */
void fz_apply_records(const uint8_t *data, size_t size, uint32_t (*map)(uint32_t, void *),
                      void *arg);

/* The base image's blocks of one kind (sorted, unique). */
const uint32_t *fz_targets(enum fz_target kind, uint32_t *count);
/* Geometry of the base image. */
uint32_t fz_base_cp_blkaddr(void);

/* Opens the image (read-only, or read-write with changes of every kind made after the
 * walk), walks it, closes it.  Returns what f2fuse_open returned. */
int fz_mount_walk(bool rw);

/* Recomputes the CRC of the checkpoint block at blkaddr in the image (when its
 * checksum_offset leaves room for one), as a fuzzer cannot. */
void fz_fix_cp_crc(uint32_t blkaddr);

/* Seed output (F2FUSE_FUZZ_SEEDS): true when seeds are wanted; fz_seed writes one. */
bool fz_want_seeds(void);
void fz_seed(const char *name, const void *data, size_t size);
/* Appends a record for bytes [0, len) of a block, trailing zeros trimmed, to buf. */
size_t fz_record(uint8_t *buf, uint32_t blkaddr, const uint8_t *block);
/* Writes a seed for the base image as a whole-image block list, then one for every image
 * the base script leaves beside it (fresh mkfs images, an f2fuse fsync chain). */
void fz_seed_whole_images(void);

/* Per-structure harness: input = one selector byte (its low 7 bits pick the target block of
 * kind; the high bit mounts read-write and changes what the walk met) and the block's new
 * bytes (zero-padded); the image is walked, then restored. */
int fz_block_harness(enum fz_target kind, const uint8_t *data, size_t size);
void fz_block_seeds(enum fz_target kind); /* one seed per target block (up to 24) */

#endif
