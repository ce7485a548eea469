/* fs-verity (Documentation/filesystems/fsverity.rst; fs/verity and fs/f2fs/verity.c are the
 * reference for the format and the rules, FORMAT.md says where things are).
 *
 * A verity file's Merkle tree starts at i_size rounded up to 64 KiB, root level first; its
 * descriptor (and an optional built-in signature, kept but not checked: no keyring here, as
 * a kernel without CONFIG_FS_VERITY_BUILTIN_SIGNATURES) follows wherever the "v" xattr says.
 * Reads hash each data block and walk up the tree until a tree block already verified, as
 * the kernel does with PageChecked: the verified state is a bit on the cached page
 * (page->verity_checked), so a block evicted and read again is checked again.  Parsed
 * descriptors are cached per inode.  Damage is logged as "corrupt image:" but does not mark
 * the image for fsck: fsck.f2fs cannot repair file contents, and the kernel does not either. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/verity.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/fsync.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/namei.h"
#include "core/node.h"
#include "core/space.h"
#include "core/writeback.h"
#include "core/xattr.h"
#include "util/log.h"

#define INFO_BUCKETS            256
#define INFO_MAX                4096 /* parsed descriptors kept; beyond, the unused ones go */
#define TREE_MAX_BLOCKS_SUBPAGE (1ull << 23) /* the kernel's bound on its bitmap */
#define ENABLE_CHUNK_BLOCKS     256          /* data read per step while building the tree */

/* One verity inode's parameters, as the kernel's fsverity_info. */
struct verity_info {
    struct verity_info *next;
    uint32_t ino, generation;
    unsigned refs;
    bool forgotten; /* out of the table: freed by the last put */
    const EVP_MD *md;
    EVP_MD_CTX *salted; /* the state after the padded salt; NULL without salt */
    unsigned alg, digest_size, block_size, log_blocksize, log_arity;
    unsigned levels;
    uint64_t level_start[VERITY_MAX_LEVELS]; /* first tree block of each level (0 = leaves) */
    uint64_t data_size, meta_pos, tree_blocks;
    uint8_t root_hash[VERITY_MAX_DIGEST];
    uint8_t file_digest[VERITY_MAX_DIGEST];
};

struct verity_cache {
    pthread_mutex_t lock;
    struct verity_info *buckets[INFO_BUCKETS];
    unsigned count;
    EVP_MD *sha256, *sha512;
    atomic_uint_fast64_t data_blocks, tree_blocks, tree_hits, failures, parsed;
};

/* Bad verity metadata or data: logged as damage, -EIO (see the top of the file). */
static int verity_corrupt(struct f2fuse *fs, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int verity_corrupt(struct f2fuse *fs, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    atomic_fetch_add(&fs->verity->failures, 1);
    log_err("corrupt image: %s", msg);
    return -EIO;
}

int verity_init(struct f2fuse *fs)
{
    struct verity_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    pthread_mutex_init(&c->lock, NULL);
    c->sha256 = EVP_MD_fetch(NULL, "SHA2-256", NULL);
    c->sha512 = EVP_MD_fetch(NULL, "SHA2-512", NULL);
    fs->verity = c;
    if (!c->sha256 || !c->sha512) {
        log_err("libcrypto offers no SHA-256 or SHA-512");
        verity_destroy(fs);
        return -ENOPKG;
    }
    return 0;
}

static void info_free(struct verity_info *vi)
{
    if (vi)
        EVP_MD_CTX_free(vi->salted);
    free(vi);
}

void verity_destroy(struct f2fuse *fs)
{
    struct verity_cache *c = fs->verity;
    if (!c)
        return;
    for (unsigned b = 0; b < INFO_BUCKETS; b++) {
        while (c->buckets[b]) {
            struct verity_info *vi = c->buckets[b];
            c->buckets[b] = vi->next;
            info_free(vi);
        }
    }
    EVP_MD_free(c->sha256);
    EVP_MD_free(c->sha512);
    pthread_mutex_destroy(&c->lock);
    free(c);
    fs->verity = NULL;
}

/* ---- hashing ---- */

/* A block hash (salted when the tree is) or, with salted false, a plain one. */
static int hash_data(const struct verity_info *vi, EVP_MD_CTX *ctx, const void *data, size_t len,
                     bool salted, uint8_t *out)
{
    int ok = salted && vi->salted ? EVP_MD_CTX_copy_ex(ctx, vi->salted)
                                  : EVP_DigestInit_ex2(ctx, vi->md, NULL);
    ok = ok && EVP_DigestUpdate(ctx, data, len) && EVP_DigestFinal_ex(ctx, out, NULL);
    return ok ? 0 : -ENOMEM;
}

/* The tree's shape from the hash algorithm, block size, salt and data size: the kernel's
 * fsverity_init_merkle_tree_params.  Returns 0, -EINVAL for what no kernel accepts or
 * -EFBIG for a tree too large; *why says what. */
static int params_init(struct f2fuse *fs, struct verity_info *vi, unsigned alg, unsigned log_bs,
                       const uint8_t *salt, unsigned salt_size, uint64_t data_size,
                       const char **why)
{
    struct verity_cache *c = fs->verity;
    if (alg == VERITY_HASH_SHA256)
        vi->md = c->sha256;
    else if (alg == VERITY_HASH_SHA512)
        vi->md = c->sha512;
    else {
        *why = "unknown hash algorithm";
        return -EINVAL;
    }
    /* 1024 up to the file system block (and page) size, as the kernel since 6.3. */
    if (log_bs < 10 || log_bs > 12) {
        *why = "unsupported block size";
        return -EINVAL;
    }
    vi->alg = alg;
    vi->digest_size = (unsigned)EVP_MD_get_size(vi->md);
    vi->block_size = 1u << log_bs;
    vi->log_blocksize = log_bs;
    unsigned log_digest = vi->digest_size == 32 ? 5 : 6;
    vi->log_arity = log_bs - log_digest;
    vi->data_size = data_size;
    vi->meta_pos = (data_size + VERITY_METADATA_ALIGN - 1) / VERITY_METADATA_ALIGN *
                   VERITY_METADATA_ALIGN;
    uint64_t blocks = (data_size + vi->block_size - 1) >> log_bs, per_level[VERITY_MAX_LEVELS];
    vi->levels = 0;
    while (blocks > 1) {
        if (vi->levels >= VERITY_MAX_LEVELS) {
            *why = "too many tree levels";
            return -EFBIG;
        }
        blocks = (blocks + (1u << vi->log_arity) - 1) >> vi->log_arity;
        per_level[vi->levels++] = blocks;
    }
    uint64_t offset = 0;
    for (int level = (int)vi->levels - 1; level >= 0; level--) {
        vi->level_start[level] = offset;
        offset += per_level[level];
    }
    if (vi->block_size != F2FS_BLKSIZE && offset > TREE_MAX_BLOCKS_SUBPAGE) {
        *why = "too many tree blocks";
        return -EFBIG;
    }
    vi->tree_blocks = offset;
    EVP_MD_CTX_free(vi->salted);
    vi->salted = NULL;
    if (salt_size) {
        /* Padded to the hash's input block, so that no hash state carries a partial block. */
        uint8_t padded[128] = {0};
        size_t unit = (size_t)EVP_MD_get_block_size(vi->md);
        size_t plen = (salt_size + unit - 1) / unit * unit;
        memcpy(padded, salt, salt_size);
        vi->salted = EVP_MD_CTX_new();
        if (!vi->salted || !EVP_DigestInit_ex2(vi->salted, vi->md, NULL) ||
            !EVP_DigestUpdate(vi->salted, padded, plen)) {
            *why = "no memory";
            return -ENOMEM;
        }
    }
    return 0;
}

/* ---- the descriptor ---- */

/* Reads and checks ii's descriptor into vi: the kernel's f2fs_get_verity_descriptor,
 * validate_fsverity_descriptor and fsverity_create_info. */
static int info_parse(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      struct verity_info *vi)
{
    uint32_t ino = ii->ino;
    if (ii->inline_flags & F2FS_INLINE_DATA)
        return verity_corrupt(fs, "inode %u: fs-verity file with inline data (no Merkle tree)",
                              ino);
    struct verity_location loc;
    ssize_t n = xattr_get_internal(fs, ii, ipage, F2FS_XATTR_INDEX_VERITY, F2FS_XATTR_NAME_VERITY,
                                   &loc, sizeof(loc));
    if (n == -ENODATA)
        return verity_corrupt(fs,
                              "inode %u: fs-verity file without its descriptor location "
                              "(xattr index 11 \"v\")",
                              ino);
    if (n == -ERANGE || (n >= 0 && n != (ssize_t)sizeof(loc)) ||
        (n >= 0 && le32(loc.version) != VERITY_LOCATION_VERSION))
        return verity_corrupt(fs, "inode %u: unknown fs-verity xattr format", ino);
    if (n < 0)
        return (int)n;
    uint64_t pos = le64(loc.pos), size = le32(loc.size);
    uint64_t meta_pos = (ii->size + VERITY_METADATA_ALIGN - 1) / VERITY_METADATA_ALIGN *
                        VERITY_METADATA_ALIGN;
    if (pos + size < pos || pos + size > data_max_size(ii) || pos < meta_pos)
        return verity_corrupt(fs,
                              "inode %u: fs-verity descriptor at %llu (+%llu) is outside "
                              "the file's metadata area",
                              ino, (unsigned long long)pos, (unsigned long long)size);
    if (size > VERITY_MAX_DESC_SIZE || size < sizeof(struct verity_descriptor))
        return verity_corrupt(fs, "inode %u: fs-verity descriptor of %llu bytes", ino,
                              (unsigned long long)size);
    uint8_t *buf = fs_malloc(fs, size);
    if (!buf)
        return -ENOMEM;
    int err = data_read_past_end(fs, ii, ipage, buf, size, pos);
    struct verity_descriptor d;
    memcpy(&d, buf, sizeof(d));
    free(buf);
    if (err)
        return err;
    static const uint8_t zeros[sizeof(d.reserved)];
    const char *why = NULL;
    if (d.version != VERITY_DESC_VERSION)
        why = "unknown descriptor version";
    else if (memcmp(d.reserved, zeros, sizeof(zeros)))
        why = "reserved descriptor bytes set";
    else if (d.salt_size > VERITY_MAX_SALT)
        why = "salt too long";
    else if (le64(d.data_size) != ii->size)
        why = "data size differs from the inode's";
    else if (le32(d.sig_size) > size - sizeof(d))
        why = "signature overflows the descriptor";
    if (!why)
        err = params_init(fs, vi, d.hash_algorithm, d.log_blocksize, d.salt, d.salt_size, ii->size,
                          &why);
    if (!why && vi->meta_pos + vi->tree_blocks * vi->block_size > data_max_size(ii))
        why = "the Merkle tree runs past the largest file";
    if (why)
        return err == -ENOMEM
                   ? err
                   : verity_corrupt(fs,
                                    "inode %u: fs-verity descriptor does not parse "
                                    "(%s: version %u, hash %u, log_blocksize %u)",
                                    ino, why, d.version, d.hash_algorithm, d.log_blocksize);
    memcpy(vi->root_hash, d.root_hash, vi->digest_size);
    d.sig_size = 0; /* the digest covers the descriptor without its signature */
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    err = ctx ? hash_data(vi, ctx, &d, sizeof(d), false, vi->file_digest) : -ENOMEM;
    EVP_MD_CTX_free(ctx);
    return err;
}

static struct verity_info *info_find(struct verity_cache *c, uint32_t ino)
{
    for (struct verity_info *vi = c->buckets[ino % INFO_BUCKETS]; vi; vi = vi->next)
        if (vi->ino == ino)
            return vi;
    return NULL;
}

static void info_unlink(struct verity_cache *c, struct verity_info *vi)
{
    struct verity_info **pp = &c->buckets[vi->ino % INFO_BUCKETS];
    while (*pp != vi)
        pp = &(*pp)->next;
    *pp = vi->next;
    c->count--;
    vi->forgotten = true;
}

/* Drops every parsed descriptor nobody uses (the table is full).  Called locked. */
static void info_trim(struct verity_cache *c)
{
    for (unsigned b = 0; b < INFO_BUCKETS; b++) {
        for (struct verity_info **pp = &c->buckets[b]; *pp;) {
            struct verity_info *vi = *pp;
            if (vi->refs) {
                pp = &vi->next;
                continue;
            }
            *pp = vi->next;
            c->count--;
            info_free(vi);
        }
    }
}

static void info_put(struct f2fuse *fs, struct verity_info *vi)
{
    struct verity_cache *c = fs->verity;
    pthread_mutex_lock(&c->lock);
    bool last = --vi->refs == 0 && vi->forgotten;
    pthread_mutex_unlock(&c->lock);
    if (last)
        info_free(vi);
}

/* The parameters of verity file ii, parsed at its first use (referenced: info_put). */
static int info_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                    struct verity_info **out)
{
    struct verity_cache *c = fs->verity;
    uint32_t gen = le32(page_node(ipage)->i.i_generation);
    pthread_mutex_lock(&c->lock);
    struct verity_info *vi = info_find(c, ii->ino);
    if (vi && vi->generation == gen && vi->data_size == ii->size) {
        vi->refs++;
        pthread_mutex_unlock(&c->lock);
        *out = vi;
        return 0;
    }
    if (vi && !vi->refs) {
        info_unlink(c, vi);
        info_free(vi);
    } else if (vi) {
        info_unlink(c, vi);
    }
    pthread_mutex_unlock(&c->lock);

    vi = fs_calloc(fs, 1, sizeof(*vi));
    if (!vi)
        return -ENOMEM;
    int err = info_parse(fs, ii, ipage, vi);
    if (err) {
        info_free(vi);
        return err;
    }
    atomic_fetch_add(&c->parsed, 1);
    vi->ino = ii->ino;
    vi->generation = gen;
    vi->refs = 1;
    pthread_mutex_lock(&c->lock);
    struct verity_info *other = info_find(c, ii->ino);
    if (other && other->generation == gen && other->data_size == ii->size) {
        other->refs++; /* parsed meanwhile by another reader */
        pthread_mutex_unlock(&c->lock);
        info_free(vi);
        *out = other;
        return 0;
    }
    if (other)
        info_unlink(c, other);
    if (other && !other->refs)
        info_free(other);
    if (c->count >= INFO_MAX)
        info_trim(c);
    vi->next = c->buckets[ii->ino % INFO_BUCKETS];
    c->buckets[ii->ino % INFO_BUCKETS] = vi;
    c->count++;
    pthread_mutex_unlock(&c->lock);
    *out = vi;
    return 0;
}

void verity_forget(struct f2fuse *fs, uint32_t ino)
{
    struct verity_cache *c = fs->verity;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    struct verity_info *vi = info_find(c, ino);
    if (vi)
        info_unlink(c, vi);
    bool free_now = vi && !vi->refs;
    pthread_mutex_unlock(&c->lock);
    if (free_now)
        info_free(vi);
}

int verity_open_check(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, int flags)
{
    if (!verity_file(ii))
        return 0;
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC))
        return -EPERM;
    struct verity_info *vi;
    int err = info_get(fs, ii, ipage, &vi);
    if (!err)
        info_put(fs, vi);
    return err;
}

int verity_measure(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                   struct f2fuse_verity_digest *d)
{
    if (!(fs->features & F2FS_FEATURE_VERITY))
        return -EOPNOTSUPP; /* f2fs_ioc_measure_verity */
    if (!verity_file(ii))
        return -ENODATA;
    struct verity_info *vi;
    int err = info_get(fs, ii, ipage, &vi);
    if (err)
        return err;
    memset(d, 0, sizeof(*d));
    d->algorithm = (uint16_t)vi->alg;
    d->size = (uint16_t)vi->digest_size;
    memcpy(d->digest, vi->file_digest, vi->digest_size);
    info_put(fs, vi);
    return 0;
}

/* ---- verifying reads ---- */

/* One tree block: in a cached page (page->verity_checked has a bit per block of it), or a
 * hole, which reads as zeros and is never marked. */
struct tree_block {
    struct page *page;
    const uint8_t *data;
    uint8_t bit;
};

static const uint8_t zero_block[F2FS_BLKSIZE];

struct verify_ctx {
    struct f2fuse *fs;
    const struct inode_info *ii;
    struct page *ipage;
    const struct verity_info *vi;
    EVP_MD_CTX *md;
};

static int tree_block_get(struct verify_ctx *c, uint64_t block, struct tree_block *tb)
{
    struct f2fuse *fs = c->fs;
    uint64_t pos = c->vi->meta_pos + block * c->vi->block_size;
    uint64_t index = pos / F2FS_BLKSIZE;
    size_t in_page = pos % F2FS_BLKSIZE;
    uint64_t key = data_key(c->ii->ino, index);
    tb->bit = (uint8_t)(1u << (in_page / c->vi->block_size));
    tb->page = pcache_find(fs->cache, PAGE_DATA, key);
    if (!tb->page) {
        uint32_t addr;
        int err = data_map(fs, c->ii, &page_node(c->ipage)->i, index, 1, &addr);
        if (err)
            return err;
        if (addr == NULL_ADDR) {
            tb->data = zero_block;
            return 0;
        }
        err = pcache_get(fs->cache, PAGE_DATA, key, addr, &tb->page);
        if (err)
            return err;
    }
    tb->data = (const uint8_t *)tb->page->data + in_page;
    return 0;
}

static void tree_block_put(struct verify_ctx *c, struct tree_block *tb)
{
    if (tb->page)
        pcache_put(c->fs->cache, tb->page);
    tb->page = NULL;
}

static bool tree_block_checked(const struct tree_block *tb)
{
    return tb->page && (__atomic_load_n(&tb->page->verity_checked, __ATOMIC_ACQUIRE) & tb->bit);
}

static int hash_mismatch(struct verify_ctx *c, uint64_t index, int level)
{
    return verity_corrupt(c->fs,
                          "inode %u: fs-verity: data block %llu does not match its Merkle tree "
                          "(hash of %s%d differs)",
                          c->ii->ino, (unsigned long long)index,
                          level < 0 ? "the data block, level " : "tree level ", level);
}

/* Checks data block index (block_size bytes at data) against the tree: up from the leaf
 * level until a verified tree block (or the root hash), then down verifying each. */
static int verify_block(struct verify_ctx *c, uint64_t index, const uint8_t *data)
{
    const struct verity_info *vi = c->vi;
    const unsigned ds = vi->digest_size;
    struct tree_block held[VERITY_MAX_LEVELS];
    unsigned offsets[VERITY_MAX_LEVELS];
    uint8_t want[VERITY_MAX_DIGEST], real[VERITY_MAX_DIGEST];
    int err = 0;
    unsigned level;
    for (level = 0; level < vi->levels; level++) {
        uint64_t position = index >> (level * vi->log_arity);
        uint64_t block = vi->level_start[level] + (position >> vi->log_arity);
        unsigned offset = (unsigned)(position & ((1u << vi->log_arity) - 1)) * ds;
        struct tree_block tb;
        err = tree_block_get(c, block, &tb);
        if (err)
            goto out;
        if (tree_block_checked(&tb)) {
            memcpy(want, tb.data + offset, ds);
            tree_block_put(c, &tb);
            atomic_fetch_add(&c->fs->verity->tree_hits, 1);
            goto descend;
        }
        held[level] = tb;
        offsets[level] = offset;
    }
    memcpy(want, vi->root_hash, ds);
descend:
    for (; level > 0; level--) {
        struct tree_block *tb = &held[level - 1];
        err = hash_data(vi, c->md, tb->data, vi->block_size, true, real);
        if (!err && memcmp(want, real, ds))
            err = hash_mismatch(c, index, (int)level - 1);
        if (err)
            goto out;
        if (tb->page)
            __atomic_fetch_or(&tb->page->verity_checked, tb->bit, __ATOMIC_RELEASE);
        atomic_fetch_add(&c->fs->verity->tree_blocks, 1);
        memcpy(want, tb->data + offsets[level - 1], ds);
        tree_block_put(c, tb);
    }
    err = hash_data(vi, c->md, data, vi->block_size, true, real);
    if (!err && memcmp(want, real, ds))
        err = hash_mismatch(c, index, -1);
    if (!err)
        atomic_fetch_add(&c->fs->verity->data_blocks, 1);
out:
    for (; level > 0; level--)
        tree_block_put(c, &held[level - 1]);
    return err;
}

ssize_t verity_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                    size_t size, uint64_t off)
{
    if (off >= ii->size || size == 0)
        return 0; /* the tree and descriptor past EOF stay hidden, as in the kernel */
    if (size > ii->size - off)
        size = ii->size - off;
    struct verity_info *vi;
    int err = info_get(fs, ii, ipage, &vi);
    if (err)
        return err;
    struct verify_ctx c = {fs, ii, ipage, vi, EVP_MD_CTX_new()};
    if (!c.md) {
        info_put(fs, vi);
        return -ENOMEM;
    }
    ssize_t n = data_read(fs, ii, ipage, buf, size, off);
    /* Whole blocks are checked where they lie; a block the range cuts (or that runs past
     * EOF, whose tail is hashed as stored) is read whole, checked, and its part copied. */
    const uint64_t bs = vi->block_size, end = off + (n > 0 ? (uint64_t)n : 0);
    uint8_t edge[F2FS_BLKSIZE];
    for (uint64_t b = off / bs; n > 0 && b * bs < end; b++) {
        uint64_t from = b * bs, to = from + bs;
        if (from >= off && to <= end) {
            err = verify_block(&c, b, (const uint8_t *)buf + (from - off));
        } else {
            err = data_read_past_end(fs, ii, ipage, edge, bs, from);
            if (!err)
                err = verify_block(&c, b, edge);
            uint64_t lo = from > off ? from : off, hi = to < end ? to : end;
            if (!err)
                memcpy((uint8_t *)buf + (lo - off), edge + (lo - from), hi - lo);
        }
        if (err)
            n = err;
    }
    EVP_MD_CTX_free(c.md);
    info_put(fs, vi);
    return n;
}

/* ---- enabling ---- */

/* Writes len bytes at file offset pos past EOF, through the page cache (the size stays). */
static int write_past_end(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                          const void *src, size_t len, uint64_t pos)
{
    while (len) {
        uint64_t index = pos / F2FS_BLKSIZE;
        size_t in_page = pos % F2FS_BLKSIZE, n = F2FS_BLKSIZE - in_page;
        if (n > len)
            n = len;
        struct page *page;
        int err = data_get_page(fs, ii, ipage, index, true, &page);
        if (err)
            return err;
        memcpy((uint8_t *)page->data + in_page, src, n);
        page->verity_checked = 0;
        pcache_put_dirty(fs->cache, page);
        src = (const uint8_t *)src + n;
        pos += n;
        len -= n;
    }
    return 0;
}

/* One level of the tree: each block below (data blocks for level 0) hashed in order, the
 * hashes packed into blocks of this level; the last level's one block is the root hash. */
static int build_level(struct verify_ctx *c, struct inode_info *ii, unsigned level, uint64_t count,
                       uint8_t *chunk, uint8_t *pending, uint8_t *root)
{
    const struct verity_info *vi = c->vi;
    const uint64_t bs = vi->block_size;
    const uint64_t per_chunk = ENABLE_CHUNK_BLOCKS * (F2FS_BLKSIZE / bs);
    size_t filled = 0;
    uint64_t dst = level < vi->levels ? vi->level_start[level] : 0;
    for (uint64_t i = 0; i < count; i += per_chunk) {
        uint64_t n = count - i < per_chunk ? count - i : per_chunk;
        int err = 0;
        if (level == 0) {
            memset(chunk, 0, n * bs);
            ssize_t r = data_read(c->fs, ii, c->ipage, chunk, n * bs, i * bs);
            err = r < 0 ? (int)r : 0;
        } else {
            uint64_t src = vi->meta_pos + (vi->level_start[level - 1] + i) * bs;
            err = data_read_past_end(c->fs, ii, c->ipage, chunk, n * bs, src);
        }
        for (uint64_t k = 0; k < n && !err; k++) {
            err = hash_data(vi, c->md, chunk + k * bs, bs, true, pending + filled);
            filled += vi->digest_size;
            if (err || level == vi->levels)
                break; /* the root: one block's hash */
            if (filled + vi->digest_size > bs || i + k + 1 == count) {
                memset(pending + filled, 0, bs - filled);
                err = write_past_end(c->fs, ii, c->ipage, pending, bs, vi->meta_pos + dst * bs);
                dst++;
                filled = 0;
            }
        }
        if (err)
            return err;
    }
    if (level == vi->levels)
        memcpy(root, pending, vi->digest_size);
    return 0;
}

/* The tree of ii's data written past EOF; its root hash in root. */
static int build_tree(struct verify_ctx *c, struct inode_info *ii, uint8_t *root)
{
    const struct verity_info *vi = c->vi;
    memset(root, 0, VERITY_MAX_DIGEST);
    if (ii->size == 0)
        return 0; /* an empty file's root hash is all zeros */
    uint8_t *chunk = fs_malloc(c->fs, ENABLE_CHUNK_BLOCKS * F2FS_BLKSIZE);
    uint8_t *pending = fs_malloc(c->fs, vi->block_size);
    int err = chunk && pending ? 0 : -ENOMEM;
    uint64_t blocks = (ii->size + vi->block_size - 1) >> vi->log_blocksize;
    for (unsigned level = 0; level <= vi->levels && !err; level++) {
        err = build_level(c, ii, level, blocks, chunk, pending, root);
        blocks = (blocks + (1u << vi->log_arity) - 1) >> vi->log_arity;
    }
    free(chunk);
    free(pending);
    return err;
}

static int enable_checks(struct f2fuse *fs, const struct f2fuse_verity_enable *arg)
{
    if (!(fs->features & F2FS_FEATURE_VERITY))
        return -EOPNOTSUPP; /* f2fs_ioc_enable_verity */
    if (arg->block_size == 0 || (arg->block_size & (arg->block_size - 1)))
        return -EINVAL;
    if (arg->salt_size > VERITY_MAX_SALT ||
        arg->sig_size > VERITY_MAX_DESC_SIZE - sizeof(struct verity_descriptor))
        return -EMSGSIZE;
    if ((arg->salt_size && !arg->salt) || (arg->sig_size && !arg->signature))
        return -EFAULT;
    return fs_writable(fs);
}

/* Under the inode's lock: the tree, the descriptor, the data and tree written back, then
 * the xattr and the flag (f2fs_end_enable_verity's order: a crash leaves either no verity
 * or a complete one). */
static int enable_locked(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                         const struct f2fuse_verity_enable *arg, struct verity_info *vi)
{
    if (S_ISDIR(ii->mode))
        return -EISDIR;
    if (!S_ISREG(ii->mode))
        return -EINVAL;
    if (ii->advise & FADVISE_VERITY_BIT)
        return -EEXIST;
    if (ii->flags & F2FS_APPEND_FL)
        return -EPERM;
    /* not supported (README Limitations): the tree past EOF would be clusters, and data
     * decoded from a cluster is not verified */
    if (compress_file(ii))
        return -EOPNOTSUPP;
    if (inode_writers(fs, ii->ino))
        return -ETXTBSY; /* deny_write_access: no writable open may exist */
    unsigned log_bs = 0;
    while ((1u << log_bs) < arg->block_size && log_bs < 31)
        log_bs++;
    const char *why = NULL;
    int err = params_init(fs, vi, arg->hash_algorithm, log_bs, arg->salt, arg->salt_size, ii->size,
                          &why);
    if (!err && vi->meta_pos + vi->tree_blocks * vi->block_size + sizeof(struct verity_descriptor) +
                        arg->sig_size >
                    data_max_size(ii))
        err = -EFBIG;
    if (err)
        return err;
    if (ii->inline_flags & F2FS_INLINE_DATA)
        err = data_convert_inline(fs, ii, ipage);
    /* Blocks fallocate kept past EOF would sit between the data and the tree. */
    if (!err && (ii->advise & FADVISE_KEEP_SIZE_BIT))
        err = data_truncate(fs, ii, ipage, ii->size);
    /* The last block is hashed with zeros past EOF: a stale tail on disk would not match. */
    if (!err)
        err = data_zero_past_end(fs, ii, ipage);
    if (err)
        return err;
    struct verity_descriptor *d = fs_calloc(fs, 1, sizeof(*d) + arg->sig_size);
    struct verify_ctx c = {fs, ii, ipage, vi, EVP_MD_CTX_new()};
    if (!d || !c.md)
        err = -ENOMEM;
    if (!err) {
        d->version = VERITY_DESC_VERSION;
        d->hash_algorithm = (uint8_t)arg->hash_algorithm;
        d->log_blocksize = (uint8_t)log_bs;
        d->salt_size = (uint8_t)arg->salt_size;
        if (arg->salt_size)
            memcpy(d->salt, arg->salt, arg->salt_size);
        d->sig_size = htole32(arg->sig_size);
        d->data_size = htole64(ii->size);
        if (arg->sig_size)
            memcpy((uint8_t *)(d + 1), arg->signature, arg->sig_size);
        err = build_tree(&c, ii, d->root_hash);
    }
    uint64_t desc_pos = vi->meta_pos + vi->tree_blocks * vi->block_size;
    size_t desc_size = sizeof(*d) + arg->sig_size;
    if (!err)
        err = write_past_end(fs, ii, ipage, d, desc_size, desc_pos);
    free(d);
    EVP_MD_CTX_free(c.md);
    struct space_claim *claim = ii->claim;
    if (!err)
        err = inode_decode(fs, ipage, ii->ino, ii); /* nodes were added on the way */
    ii->claim = claim;
    if (!err) {
        writeback_wait_inode(fs, ii->ino);
        err = data_writeback_inode(fs, ii->ino, BLK_PRIO_NORMAL);
    }
    struct verity_location loc = {htole32(VERITY_LOCATION_VERSION), htole32((uint32_t)desc_size),
                                  htole64(desc_pos)};
    if (!err)
        err = xattr_set_internal(fs, ii, ipage, F2FS_XATTR_INDEX_VERITY, F2FS_XATTR_NAME_VERITY,
                                 &loc, sizeof(loc), XATTR_CREATE_FLAG);
    if (err) {
        /* As f2fs: what was written past EOF goes again. */
        int undo = data_free_past_end(fs, ii, ipage);
        if (undo)
            log_err("inode %u: fs-verity metadata could not be removed after a failed enable: "
                    "%s",
                    ii->ino, strerror(-undo));
        return err;
    }
    struct f2fs_inode *ri = &page_node(ipage)->i;
    ri->i_advise |= FADVISE_VERITY_BIT;
    ii->advise = ri->i_advise;
    inode_touch(ipage, false, true);
    pcache_mark_dirty(fs->cache, ipage);
    fsync_needs_checkpoint(fs, ii->ino); /* roll-forward replays no xattr */
    return 0;
}

int verity_enable(struct f2fuse *fs, uint32_t ino, const struct f2fuse_verity_enable *arg)
{
    int err = enable_checks(fs, arg);
    if (err)
        return err;
    /* Room for the tree (at most a block per 127 with SHA-512 and 1 KiB blocks, ~1/3 of the
     * data) and the descriptor: claimed from the size before the lock, settled after. */
    struct page *ipage;
    struct inode_info ii;
    op_read_begin(fs, ino);
    err = inode_get(fs, ino, &ipage, &ii);
    uint64_t size = err ? 0 : ii.size;
    if (!err)
        pcache_put(fs->cache, ipage);
    op_read_end(fs, ino);
    if (err)
        return err;
    uint64_t blocks = size / F2FS_BLKSIZE / 3 + 8 + (arg->sig_size + F2FS_BLKSIZE) / F2FS_BLKSIZE;
    uint64_t n = blocks + blocks / ADDRS_PER_BLOCK + 4;
    struct space_claim claim;
    err = space_claim(fs, &claim, n, n);
    if (err)
        return err;
    op_change_begin(fs, ino);
    err = inode_get(fs, ino, &ipage, &ii);
    if (!err) {
        ii.claim = &claim;
        struct verity_info *vi = fs_calloc(fs, 1, sizeof(*vi));
        err = vi ? enable_locked(fs, &ii, ipage, arg, vi) : -ENOMEM;
        info_free(vi);
        pcache_put(fs->cache, ipage);
    }
    op_change_end(fs, ino);
    space_settle(fs, &claim);
    space_after_change(fs);
    if (!err)
        verity_forget(fs, ino); /* parsed afresh from what was written */
    return err;
}

void verity_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct verity_cache *c = fs->verity;
    if (!c)
        return;
    emit(sink, "verity.data_blocks_verified", atomic_load(&c->data_blocks));
    emit(sink, "verity.tree_blocks_verified", atomic_load(&c->tree_blocks));
    emit(sink, "verity.tree_blocks_cached", atomic_load(&c->tree_hits));
    emit(sink, "verity.descriptors_parsed", atomic_load(&c->parsed));
    emit(sink, "verity.failures", atomic_load(&c->failures));
}
