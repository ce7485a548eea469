/* Encrypted trees (fs/crypto/policy.c, fname.c, hooks.c): contexts, no-key names, no-key
 * symlink targets, and what the kernel refuses without the key.  Decryption with the key is
 * fscrypt_cipher.c's; here ciphertext is only encoded for display or compared. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fscrypt.h"
#include "core/context.h"
#include "core/data.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"
#include "core/inode.h"
#include "core/node.h"
#include "core/xattr.h"

/* ---- contexts (fscrypt_context_v1 / _v2) ---- */

/* Byte offsets inside a context. */
#define CTX_VERSION   0
#define CTX_CONTENTS  1
#define CTX_FILENAMES 2
#define CTX_FLAGS     3
#define CTX_V1_KEY    4  /* 8-byte master key descriptor */
#define CTX_V1_NONCE  12 /* then the nonce: 28 bytes */
#define CTX_V2_DUS    4  /* log2_data_unit_size, then 3 reserved bytes */
#define CTX_V2_KEY    8  /* 16-byte master key identifier */
#define CTX_V2_NONCE  24 /* then the nonce: 40 bytes */

int fscrypt_context_parse(const uint8_t *buf, size_t len, struct fscrypt_context *ctx)
{
    memset(ctx, 0, sizeof(*ctx));
    if (len == 0)
        return -EINVAL;
    if (buf[CTX_VERSION] == FSCRYPT_CONTEXT_V1 && len == FSCRYPT_CONTEXT_V1_SIZE) {
        memcpy(ctx->key, buf + CTX_V1_KEY, 8);
        memcpy(ctx->nonce, buf + CTX_V1_NONCE, FSCRYPT_NONCE_SIZE);
    } else if (buf[CTX_VERSION] == FSCRYPT_CONTEXT_V2 && len == FSCRYPT_CONTEXT_V2_SIZE) {
        ctx->log2_data_unit_size = buf[CTX_V2_DUS];
        memcpy(ctx->reserved, buf + CTX_V2_DUS + 1, sizeof(ctx->reserved));
        memcpy(ctx->key, buf + CTX_V2_KEY, 16);
        memcpy(ctx->nonce, buf + CTX_V2_NONCE, FSCRYPT_NONCE_SIZE);
    } else {
        return -EINVAL;
    }
    ctx->version = buf[CTX_VERSION];
    ctx->contents_mode = buf[CTX_CONTENTS];
    ctx->filenames_mode = buf[CTX_FILENAMES];
    ctx->flags = buf[CTX_FLAGS];
    return 0;
}

size_t fscrypt_context_build(const struct fscrypt_context *ctx, uint8_t *buf)
{
    memset(buf, 0, FSCRYPT_CONTEXT_MAX);
    buf[CTX_VERSION] = ctx->version;
    buf[CTX_CONTENTS] = ctx->contents_mode;
    buf[CTX_FILENAMES] = ctx->filenames_mode;
    buf[CTX_FLAGS] = ctx->flags;
    if (ctx->version == FSCRYPT_CONTEXT_V1) {
        memcpy(buf + CTX_V1_KEY, ctx->key, 8);
        memcpy(buf + CTX_V1_NONCE, ctx->nonce, FSCRYPT_NONCE_SIZE);
        return FSCRYPT_CONTEXT_V1_SIZE;
    }
    buf[CTX_V2_DUS] = ctx->log2_data_unit_size;
    memcpy(buf + CTX_V2_DUS + 1, ctx->reserved, sizeof(ctx->reserved));
    memcpy(buf + CTX_V2_KEY, ctx->key, 16);
    memcpy(buf + CTX_V2_NONCE, ctx->nonce, FSCRYPT_NONCE_SIZE);
    return FSCRYPT_CONTEXT_V2_SIZE;
}

static bool modes_v1(uint8_t contents, uint8_t filenames)
{
    return (contents == FSCRYPT_MODE_AES_256_XTS && filenames == FSCRYPT_MODE_AES_256_CTS) ||
           (contents == FSCRYPT_MODE_AES_128_CBC && filenames == FSCRYPT_MODE_AES_128_CTS) ||
           (contents == FSCRYPT_MODE_ADIANTUM && filenames == FSCRYPT_MODE_ADIANTUM);
}

static bool modes_v2(uint8_t contents, uint8_t filenames)
{
    return modes_v1(contents, filenames) ||
           (contents == FSCRYPT_MODE_AES_256_XTS && filenames == FSCRYPT_MODE_AES_256_HCTR2) ||
           (contents == FSCRYPT_MODE_SM4_XTS && filenames == FSCRYPT_MODE_SM4_CTS);
}

/* DIRECT_KEY puts the nonce into the IV: only modes with IVs of 24 bytes or more (Adiantum),
 * and one mode for both (supported_direct_key_modes). */
static const char *direct_key_unsupported(const struct fscrypt_context *ctx)
{
    if (ctx->contents_mode != ctx->filenames_mode)
        return "DIRECT_KEY with different contents and filenames modes";
    if (ctx->contents_mode != FSCRYPT_MODE_ADIANTUM)
        return "DIRECT_KEY with a mode whose IV has no room for the nonce";
    return NULL;
}

const char *fscrypt_policy_unsupported(const struct fscrypt_context *ctx, bool casefolded_dir)
{
    if (ctx->version == FSCRYPT_CONTEXT_V1) {
        if (!modes_v1(ctx->contents_mode, ctx->filenames_mode))
            return "unknown pair of modes";
        if (ctx->flags & ~(FSCRYPT_POLICY_FLAGS_PAD_MASK | FSCRYPT_POLICY_FLAG_DIRECT_KEY))
            return "unknown flags";
        if (ctx->flags & FSCRYPT_POLICY_FLAG_DIRECT_KEY)
            return direct_key_unsupported(ctx);
        return casefolded_dir ? "a v1 policy on a casefolded directory" : NULL;
    }
    if (!modes_v2(ctx->contents_mode, ctx->filenames_mode))
        return "unknown pair of modes";
    uint8_t iv_flags = FSCRYPT_POLICY_FLAG_DIRECT_KEY | FSCRYPT_POLICY_FLAG_IV_INO_LBLK_64 |
                       FSCRYPT_POLICY_FLAG_IV_INO_LBLK_32;
    if (ctx->flags & ~(FSCRYPT_POLICY_FLAGS_PAD_MASK | iv_flags))
        return "unknown flags";
    uint8_t iv = ctx->flags & iv_flags;
    if (iv & (iv - 1))
        return "mutually exclusive flags";
    uint8_t dus = ctx->log2_data_unit_size;
    if (dus && (dus > 12 || dus < 9))
        return "a data unit size outside 512..4096";
    if (dus && dus != 12 && (iv & FSCRYPT_POLICY_FLAG_IV_INO_LBLK_32))
        return "sub-block data units with IV_INO_LBLK_32";
    if (iv == FSCRYPT_POLICY_FLAG_DIRECT_KEY)
        return direct_key_unsupported(ctx);
    if (iv && ctx->contents_mode != FSCRYPT_MODE_AES_256_XTS)
        return "IV_INO_LBLK_* with contents not in AES-256-XTS";
    for (size_t i = 0; i < sizeof(ctx->reserved); i++)
        if (ctx->reserved[i])
            return "reserved bytes set";
    return NULL;
}

bool fscrypt_same_policy(const struct fscrypt_context *a, const struct fscrypt_context *b)
{
    size_t key = a->version == FSCRYPT_CONTEXT_V1 ? 8 : 16;
    return a->version == b->version && a->contents_mode == b->contents_mode &&
           a->filenames_mode == b->filenames_mode && a->flags == b->flags &&
           a->log2_data_unit_size == b->log2_data_unit_size &&
           memcmp(a->reserved, b->reserved, sizeof(a->reserved)) == 0 &&
           memcmp(a->key, b->key, key) == 0;
}

int fscrypt_inode_context(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                          struct fscrypt_context *ctx)
{
    uint8_t buf[FSCRYPT_CONTEXT_MAX];
    ssize_t n = xattr_get_internal(fs, ii, ipage, F2FS_XATTR_INDEX_ENCRYPTION, "c", buf,
                                   sizeof(buf));
    if (n == -ENODATA)
        return fs_corrupt(fs, "inode %u is encrypted but has no encryption context", ii->ino);
    if (n == -ERANGE)
        return fs_corrupt(fs, "inode %u: encryption context longer than %d bytes", ii->ino,
                          FSCRYPT_CONTEXT_MAX);
    if (n < 0)
        return (int)n;
    if (fscrypt_context_parse(buf, (size_t)n, ctx))
        return fs_corrupt(fs,
                          "inode %u: encryption context of %zd bytes, version %u, does not "
                          "parse",
                          ii->ino, n, n ? buf[0] : 0);
    return 0;
}

/* ---- base64url (RFC 4648 §5, no padding) ---- */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

size_t fscrypt_base64url_encode(const uint8_t *src, size_t len, char *dst)
{
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        acc = (acc << 8) | src[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            dst[n++] = b64url[(acc >> bits) & 0x3f];
        }
    }
    if (bits)
        dst[n++] = b64url[(acc << (6 - bits)) & 0x3f];
    return n;
}

static int b64url_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '-' ? 62 : c == '_' ? 63 : -1;
}

ssize_t fscrypt_base64url_decode(const char *src, size_t len, uint8_t *dst)
{
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64url_value(src[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            dst[n++] = (uint8_t)(acc >> bits);
        }
    }
    /* The bits left over must be zero: one encoding per byte string. */
    if (acc & ((1u << bits) - 1))
        return -1;
    return (ssize_t)n;
}

/* ---- no-key names ---- */

static int sha256(const uint8_t *data, size_t len, uint8_t out[FSCRYPT_NOKEY_DIGEST])
{
    unsigned int n = 0;
    if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1 || n != FSCRYPT_NOKEY_DIGEST)
        return -ENOMEM; /* libcrypto fails only for want of memory */
    return 0;
}

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

ssize_t fscrypt_nokey_encode(uint32_t hash, uint32_t minor_hash, const uint8_t *ciphertext,
                             size_t len, char *out)
{
    /* struct fscrypt_nokey_name: dirhash[2], bytes[149], sha256[32], cut after what is used */
    uint8_t raw[FSCRYPT_NOKEY_MAX_DECODED];
    size_t n;
    put_le32(raw, hash);
    put_le32(raw + 4, minor_hash);
    if (len <= FSCRYPT_NOKEY_BYTES) {
        memcpy(raw + 8, ciphertext, len);
        n = 8 + len;
    } else {
        memcpy(raw + 8, ciphertext, FSCRYPT_NOKEY_BYTES);
        int err = sha256(ciphertext + FSCRYPT_NOKEY_BYTES, len - FSCRYPT_NOKEY_BYTES,
                         raw + 8 + FSCRYPT_NOKEY_BYTES);
        if (err)
            return err;
        n = FSCRYPT_NOKEY_MAX_DECODED;
    }
    size_t w = fscrypt_base64url_encode(raw, n, out);
    out[w] = '\0';
    return (ssize_t)w;
}

int fscrypt_nokey_decode(const char *name, size_t len, struct fscrypt_nokey *nk)
{
    uint8_t raw[FSCRYPT_NOKEY_MAX_DECODED];
    memset(nk, 0, sizeof(*nk));
    if (len > FSCRYPT_NOKEY_MAX_ENCODED)
        return -ENOENT;
    ssize_t n = fscrypt_base64url_decode(name, len, raw);
    /* At least one ciphertext byte; longer than the whole-name form only as the digest form. */
    if (n < 9 || (n > 8 + FSCRYPT_NOKEY_BYTES && n != FSCRYPT_NOKEY_MAX_DECODED))
        return -ENOENT;
    nk->hash = get_le32(raw);
    nk->minor_hash = get_le32(raw + 4);
    nk->digest = n == FSCRYPT_NOKEY_MAX_DECODED;
    nk->len = nk->digest ? FSCRYPT_NOKEY_BYTES : (size_t)n - 8;
    memcpy(nk->bytes, raw + 8, nk->len);
    if (nk->digest)
        memcpy(nk->sha256, raw + 8 + FSCRYPT_NOKEY_BYTES, FSCRYPT_NOKEY_DIGEST);
    return 0;
}

bool fscrypt_nokey_matches(const struct fscrypt_nokey *nk, const uint8_t *stored, size_t len)
{
    if (!nk->digest)
        return len == nk->len && memcmp(stored, nk->bytes, len) == 0;
    uint8_t digest[FSCRYPT_NOKEY_DIGEST];
    return len > FSCRYPT_NOKEY_BYTES && memcmp(stored, nk->bytes, FSCRYPT_NOKEY_BYTES) == 0 &&
           sha256(stored + FSCRYPT_NOKEY_BYTES, len - FSCRYPT_NOKEY_BYTES, digest) == 0 &&
           memcmp(digest, nk->sha256, FSCRYPT_NOKEY_DIGEST) == 0;
}

/* ---- encrypted symlinks (struct fscrypt_symlink_data) ---- */

ssize_t fscrypt_symlink_nokey(const uint8_t *raw, size_t raw_len, char *out)
{
    if (raw_len < 3)
        return -EUCLEAN;
    size_t len = (size_t)raw[0] | (size_t)raw[1] << 8;
    if (len == 0 || len + 2 > raw_len)
        return -EUCLEAN;
    const uint8_t *ct = raw + 2;
    /* fscrypt_fname_disk_to_usr passes "." and ".." through, even as ciphertext. */
    if ((len == 1 && ct[0] == '.') || (len == 2 && ct[0] == '.' && ct[1] == '.')) {
        memcpy(out, ct, len);
        out[len] = '\0';
        return (ssize_t)len;
    }
    if (len < FSCRYPT_MIN_CIPHERTEXT)
        return -EUCLEAN;
    return fscrypt_nokey_encode(0, 0, ct, len, out);
}

ssize_t fscrypt_symlink_target(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                               char *out)
{
    /* The kernel reads the target's whole block (inline: the inline area, zero-padded). */
    uint8_t block[F2FS_BLKSIZE] = {0};
    struct inode_info whole = *ii;
    whole.size = (ii->inline_flags & F2FS_INLINE_DATA) ? inline_data_size(ii) : F2FS_BLKSIZE;
    ssize_t n = data_read(fs, &whole, ipage, block, (size_t)whole.size, 0);
    if (n < 0)
        return n;
    struct fscrypt_ikey *key = NULL;
    int err = fscrypt_ikey_get(fs, ii, ipage, &key);
    if (err && err != -ENOKEY)
        return err;
    ssize_t r = key ? fscrypt_symlink_decrypt(fs, key, block, sizeof(block), out)
                    : fscrypt_symlink_nokey(block, sizeof(block), out);
    fscrypt_ikey_put(fs, key);
    if (r == -EUCLEAN)
        return fs_corrupt(fs, "encrypted symlink %u: stored target of %u bytes is not one", ii->ino,
                          (unsigned)block[0] | (unsigned)block[1] << 8);
    return r;
}

/* ---- refusals ---- */

int fscrypt_check_contents(const struct inode_info *ii)
{
    return S_ISREG(ii->mode) && fscrypt_encrypted(ii) ? -ENOKEY : 0;
}

int fscrypt_check_open(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage)
{
    if (!fscrypt_check_contents(ii))
        return 0;
    /* fscrypt_require_key: a context that does not parse is reported first (EIO). */
    struct fscrypt_ikey *key;
    int err = fscrypt_ikey_get(fs, ii, ipage, &key);
    fscrypt_ikey_put(fs, key);
    return err;
}

int fscrypt_check_casefold(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage)
{
    struct fscrypt_ikey *key;
    int err = fscrypt_ikey_get(fs, ii, ipage, &key);
    if (!err && key->version != FSCRYPT_CONTEXT_V2)
        err = -EINVAL;
    fscrypt_ikey_put(fs, key);
    return err;
}

int fscrypt_check_new_name(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage)
{
    if (!fscrypt_encrypted(dir))
        return 0;
    struct fscrypt_ikey *key;
    int err = fscrypt_ikey_get(fs, dir, dpage, &key);
    fscrypt_ikey_put(fs, key);
    return err;
}

int fscrypt_permitted(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                      const struct inode_info *ii, struct page *ipage)
{
    if (!fscrypt_encrypted(dir) || (!S_ISREG(ii->mode) && !S_ISDIR(ii->mode) && !S_ISLNK(ii->mode)))
        return 0;
    struct fscrypt_context dctx, ctx;
    if (!fscrypt_encrypted(ii) || fscrypt_inode_context(fs, dir, dpage, &dctx) ||
        fscrypt_inode_context(fs, ii, ipage, &ctx) || !fscrypt_same_policy(&dctx, &ctx))
        return -EXDEV;
    return 0;
}

int fscrypt_check_link(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                       const struct inode_info *ii, struct page *ipage)
{
    int err = fscrypt_check_new_name(fs, dir, dpage);
    return err ? err : fscrypt_permitted(fs, dir, dpage, ii, ipage);
}

int fscrypt_check_rename(struct f2fuse *fs, const struct fscrypt_rename *r)
{
    int err = fscrypt_check_new_name(fs, r->odir, r->odpage);
    if (!err && r->ndir->ino != r->odir->ino)
        err = fscrypt_check_new_name(fs, r->ndir, r->ndpage);
    if (err || r->ndir->ino == r->odir->ino)
        return err;
    err = fscrypt_permitted(fs, r->ndir, r->ndpage, r->src, r->spage);
    if (!err && r->exchange)
        err = fscrypt_permitted(fs, r->odir, r->odpage, r->tgt, r->tpage);
    return err;
}

void fscrypt_name_recorded(const struct inode_info *dir, struct page *ipage, uint32_t name_hash)
{
    if (!fscrypt_encrypted(dir))
        return;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    ri->i_advise |= FADVISE_ENC_NAME_BIT;
    /* Roll-forward recovery has no keys: the keyed hash of a casefolded name rides along. */
    uint32_t len = le32(ri->i_namelen);
    if ((dir->flags & F2FS_CASEFOLD_FL) && len + sizeof(name_hash) <= F2FS_NAME_LEN) {
        uint32_t h = htole32(name_hash);
        memcpy(ri->i_name + len, &h, sizeof(h));
    }
}

int fscrypt_new_inode(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                      struct inode_info *ii, struct page *ipage, uint32_t name_hash)
{
    if (!fscrypt_encrypted(dir))
        return 0;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    fscrypt_name_recorded(dir, ipage, name_hash);
    if (S_ISREG(ii->mode) || S_ISDIR(ii->mode) || S_ISLNK(ii->mode)) {
        struct fscrypt_context ctx;
        uint8_t buf[FSCRYPT_CONTEXT_MAX];
        int err = fscrypt_inode_context(fs, dir, dpage, &ctx);
        if (!err && RAND_bytes(ctx.nonce, sizeof(ctx.nonce)) != 1)
            err = -EIO; /* no randomness: no file whose key an attacker could guess */
        if (err)
            return err;
        size_t n = fscrypt_context_build(&ctx, buf);
        ri->i_advise |= FADVISE_ENCRYPT_BIT;
        if (S_ISREG(ii->mode)) /* f2fs_may_inline_data: encrypted contents live in blocks */
            ri->i_inline &= (uint8_t) ~(F2FS_INLINE_DATA | F2FS_DATA_EXIST);
        err = inode_decode(fs, ipage, ii->ino, ii);
        if (!err)
            err = xattr_set_internal(fs, ii, ipage, F2FS_XATTR_INDEX_ENCRYPTION, "c", buf, n,
                                     XATTR_CREATE_FLAG);
        if (err)
            return err;
    }
    pcache_mark_dirty(fs->cache, ipage);
    return inode_decode(fs, ipage, ii->ino, ii);
}
