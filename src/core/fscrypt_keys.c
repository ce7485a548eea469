/* fscrypt keys (fs/crypto/keyring.c, keysetup.c, keysetup_v1.c): master keys added by the
 * user, and per-inode keys derived from them on first use and cached, all in locked memory.
 *
 * Derivation, as the kernel's: v2 keys through HKDF-SHA512 (the master key extracted once;
 * info "fscrypt\0", a context byte, then the nonce, or the mode number and the file system's
 * UUID for IV_INO_LBLK_64/32), v1 keys as AES-128-ECB of the master key under the nonce.
 * Every primitive is libcrypto's (EVP_KDF "HKDF", EVP_MAC "SIPHASH", EVP_CIPHER). */
#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "core/fscrypt_keys.h"
#include "core/context.h"
#include "core/fscrypt.h"
#include "core/fscrypt_cipher.h"
#include "core/inode.h"
#include "core/namei.h"
#include "core/node.h"
#include "util/log.h"

/* ---- memory for secrets: locked, out of core dumps, wiped when freed ---- */

#define SLOT_SIZE       256
#define SLOTS_PER_CHUNK 64
#define CHUNK_SIZE      (SLOT_SIZE * SLOTS_PER_CHUNK)

struct chunk {
    uint8_t *mem;
    uint64_t used; /* one bit per slot */
};

struct secure_pool {
    struct chunk *chunks;
    size_t n;
};

static void *pool_alloc(struct secure_pool *p)
{
    for (size_t c = 0; c < p->n; c++) {
        if (p->chunks[c].used == UINT64_MAX)
            continue;
        int slot = __builtin_ctzll(~p->chunks[c].used);
        p->chunks[c].used |= 1ull << slot;
        return p->chunks[c].mem + (size_t)slot * SLOT_SIZE;
    }
    struct chunk *grown = realloc(p->chunks, (p->n + 1) * sizeof(*grown));
    if (!grown)
        return NULL;
    p->chunks = grown;
    void *mem = mmap(NULL, CHUNK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return NULL;
    if (mlock(mem, CHUNK_SIZE) != 0) {
        log_err("fscrypt: cannot lock memory for keys (%s; RLIMIT_MEMLOCK, `ulimit -l`): "
                "no key is kept where it could be swapped out",
                strerror(errno));
        munmap(mem, CHUNK_SIZE);
        return NULL;
    }
    madvise(mem, CHUNK_SIZE, MADV_DONTDUMP);
    p->chunks[p->n] = (struct chunk){.mem = mem, .used = 1};
    return p->chunks[p->n++].mem;
}

static void pool_free(struct secure_pool *p, void *slot)
{
    if (!slot)
        return;
    for (size_t c = 0; c < p->n; c++) {
        uint8_t *mem = p->chunks[c].mem;
        if ((uint8_t *)slot >= mem && (uint8_t *)slot < mem + CHUNK_SIZE) {
            OPENSSL_cleanse(slot, SLOT_SIZE);
            p->chunks[c].used &= ~(1ull << (((uint8_t *)slot - mem) / SLOT_SIZE));
            return;
        }
    }
}

static void pool_destroy(struct secure_pool *p)
{
    for (size_t c = 0; c < p->n; c++) {
        OPENSSL_cleanse(p->chunks[c].mem, CHUNK_SIZE);
        munlock(p->chunks[c].mem, CHUNK_SIZE);
        munmap(p->chunks[c].mem, CHUNK_SIZE);
    }
    free(p->chunks);
    p->chunks = NULL;
    p->n = 0;
}

/* ---- the key ring ---- */

enum v1_state { V1_UNCHECKED, V1_RIGHT, V1_WRONG };

/* A master key, in a locked slot.  prk: HKDF-Extract(no salt, raw), which every v2 key is
 * expanded from. */
struct fscrypt_master {
    uint8_t raw[FSCRYPT_MASTER_MAX];
    uint8_t prk[64];
    uint8_t ino_hash_key[16]; /* IV_INO_LBLK_32: SipHash key of inode numbers */
    uint32_t len;
    uint8_t identifier[FSCRYPT_IDENTIFIER_SIZE];
    uint8_t descriptor[FSCRYPT_DESCRIPTOR_SIZE];
    bool removed;             /* secret wiped; inode keys of open files remain */
    _Atomic int v1;           /* enum v1_state */
    atomic_uint v1_plausible; /* names that came out plausible while unchecked */
    uint32_t orphans;         /* inode keys kept after removal */
};
_Static_assert(sizeof(struct fscrypt_master) <= SLOT_SIZE, "a master key fills one slot");
_Static_assert(sizeof(struct fscrypt_ikey) <= SLOT_SIZE, "an inode key fills one slot");

#define IKEY_BUCKETS 256
#define IKEY_CACHE   256 /* inode keys kept beyond those in use */
#define MISSING_MAX  32

struct fscrypt_keyring {
    pthread_mutex_t lock;
    struct secure_pool pool;
    struct fscrypt_algs algs;
    struct fscrypt_master *masters[FSCRYPT_MAX_MASTERS];
    struct fscrypt_ikey *buckets[IKEY_BUCKETS];
    uint32_t ikeys; /* cached, orphans included */
    uint64_t tick;
    /* Policies met without their key, for `f2fuse key list`: version and key (not secret). */
    struct {
        uint8_t version;
        uint8_t key[FSCRYPT_IDENTIFIER_SIZE];
    } missing[MISSING_MAX];
    unsigned nmissing;
    uint32_t logged_modes; /* bit per mode number: "cannot do" said once */
    atomic_uint_fast64_t derived, evicted, blocks_decrypted, blocks_encrypted, names;
};

const struct fscrypt_algs *fscrypt_algs_of(struct f2fuse *fs)
{
    return &fs->keys->algs;
}

void fscrypt_count(struct f2fuse *fs, uint64_t blocks_decrypted, uint64_t blocks_encrypted,
                   uint64_t names)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (blocks_decrypted)
        atomic_fetch_add(&kr->blocks_decrypted, blocks_decrypted);
    if (blocks_encrypted)
        atomic_fetch_add(&kr->blocks_encrypted, blocks_encrypted);
    if (names)
        atomic_fetch_add(&kr->names, names);
}

static void algs_free(struct fscrypt_algs *a)
{
    EVP_KDF_free(a->hkdf);
    EVP_MAC_free(a->siphash);
    EVP_MD_free(a->sha256);
    EVP_MD_free(a->sha512);
    EVP_CIPHER_free(a->aes128_ecb);
    EVP_CIPHER_free(a->aes256_ecb);
    EVP_CIPHER_free(a->aes256_xts);
    EVP_CIPHER_free(a->aes128_cbc);
    EVP_CIPHER_free(a->aes256_cts);
    EVP_CIPHER_free(a->aes128_cts);
}

int fscrypt_keys_init(struct f2fuse *fs)
{
    struct fscrypt_keyring *kr = calloc(1, sizeof(*kr));
    if (!kr)
        return -ENOMEM;
    pthread_mutex_init(&kr->lock, NULL);
    struct fscrypt_algs *a = &kr->algs;
    a->hkdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
    a->siphash = EVP_MAC_fetch(NULL, "SIPHASH", NULL);
    a->sha256 = EVP_MD_fetch(NULL, "SHA2-256", NULL);
    a->sha512 = EVP_MD_fetch(NULL, "SHA2-512", NULL);
    a->aes128_ecb = EVP_CIPHER_fetch(NULL, "AES-128-ECB", NULL);
    a->aes256_ecb = EVP_CIPHER_fetch(NULL, "AES-256-ECB", NULL);
    a->aes256_xts = EVP_CIPHER_fetch(NULL, "AES-256-XTS", NULL);
    a->aes128_cbc = EVP_CIPHER_fetch(NULL, "AES-128-CBC", NULL);
    /* The kernel's cts(cbc(aes)) is CBC with ciphertext stealing, the last two blocks
     * swapped (CS3); OpenSSL 3 has it (fscrypt_cipher.c asks for CS3). */
    a->aes256_cts = EVP_CIPHER_fetch(NULL, "AES-256-CBC-CTS", NULL);
    a->aes128_cts = EVP_CIPHER_fetch(NULL, "AES-128-CBC-CTS", NULL);
    if (!a->hkdf || !a->siphash || !a->sha256 || !a->sha512 || !a->aes128_ecb || !a->aes256_ecb ||
        !a->aes256_xts || !a->aes128_cbc || !a->aes256_cts || !a->aes128_cts) {
        log_err("fscrypt: libcrypto lacks HKDF, SipHash, SHA-2 or an AES mode (XTS, CBC, "
                "CBC-CTS): encrypted trees stay as without their keys");
        algs_free(a);
        pthread_mutex_destroy(&kr->lock);
        free(kr);
        return -EOPNOTSUPP;
    }
    fs->keys = kr;
    return 0;
}

void fscrypt_keys_destroy(struct f2fuse *fs)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (!kr)
        return;
    pool_destroy(&kr->pool); /* every master and inode key wiped */
    algs_free(&kr->algs);
    pthread_mutex_destroy(&kr->lock);
    free(kr);
    fs->keys = NULL;
}

/* ---- HKDF-SHA512 as fscrypt uses it (fs/crypto/hkdf.c) ---- */

#define HKDF_CONTEXT_KEY_IDENTIFIER     1
#define HKDF_CONTEXT_PER_FILE_ENC_KEY   2
#define HKDF_CONTEXT_IV_INO_LBLK_64_KEY 4
#define HKDF_CONTEXT_DIRHASH_KEY        5
#define HKDF_CONTEXT_IV_INO_LBLK_32_KEY 6
#define HKDF_CONTEXT_INODE_HASH_KEY     7

static int hkdf_extract(const struct fscrypt_algs *a, const uint8_t *raw, size_t len,
                        uint8_t prk[64])
{
    EVP_KDF_CTX *c = EVP_KDF_CTX_new(a->hkdf);
    if (!c)
        return -ENOMEM;
    int mode = EVP_KDF_HKDF_MODE_EXTRACT_ONLY;
    OSSL_PARAM p[] = {OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
                      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA512", 0),
                      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)raw, len),
                      OSSL_PARAM_END};
    int ok = EVP_KDF_derive(c, prk, 64, p);
    EVP_KDF_CTX_free(c); /* libcrypto wipes its copy of the key */
    return ok == 1 ? 0 : -ENOMEM;
}

/* HKDF-Expand(prk, "fscrypt\0" || context || info) into out[0, len). */
static int hkdf_expand(const struct fscrypt_algs *a, const uint8_t prk[64], uint8_t context,
                       const uint8_t *info, size_t info_len, uint8_t *out, size_t len)
{
    uint8_t full[9 + 32];
    if (info_len > sizeof(full) - 9)
        return -EINVAL;
    memcpy(full, "fscrypt\0", 8);
    full[8] = context;
    if (info_len)
        memcpy(full + 9, info, info_len);
    EVP_KDF_CTX *c = EVP_KDF_CTX_new(a->hkdf);
    if (!c)
        return -ENOMEM;
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM p[] = {OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
                      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, "SHA512", 0),
                      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)prk, 64),
                      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, full, 9 + info_len),
                      OSSL_PARAM_END};
    int ok = EVP_KDF_derive(c, out, len, p);
    EVP_KDF_CTX_free(c);
    return ok == 1 ? 0 : -ENOMEM;
}

/* ---- master keys ---- */

static bool same_bytes(const uint8_t *a, const uint8_t *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}

/* The master whose identifier (16 bytes) or descriptor (8 bytes) is spec; lock held. */
static struct fscrypt_master *master_find(struct fscrypt_keyring *kr, const uint8_t *spec,
                                          size_t len)
{
    for (unsigned i = 0; i < FSCRYPT_MAX_MASTERS; i++) {
        struct fscrypt_master *m = kr->masters[i];
        if (!m)
            continue;
        if (len == FSCRYPT_IDENTIFIER_SIZE && same_bytes(m->identifier, spec, len))
            return m;
        if (len == FSCRYPT_DESCRIPTOR_SIZE && same_bytes(m->descriptor, spec, len))
            return m;
    }
    return NULL;
}

static void master_info(const struct fscrypt_master *m, struct f2fuse_key_info *info)
{
    memset(info, 0, sizeof(*info));
    info->status = m->removed ? F2FUSE_KEY_BUSY : F2FUSE_KEY_PRESENT;
    info->version = 2;
    memcpy(info->identifier, m->identifier, sizeof(m->identifier));
    memcpy(info->descriptor, m->descriptor, sizeof(m->descriptor));
    info->busy_files = m->orphans;
}

/* Fills m's secrets from raw: the identifier and the HKDF pseudo-random keys. */
static int master_setup(struct fscrypt_keyring *kr, struct fscrypt_master *m, const uint8_t *raw,
                        size_t len, const uint8_t *desc)
{
    memcpy(m->raw, raw, len);
    m->len = (uint32_t)len;
    int err = hkdf_extract(&kr->algs, raw, len, m->prk);
    if (!err)
        err = hkdf_expand(&kr->algs, m->prk, HKDF_CONTEXT_KEY_IDENTIFIER, NULL, 0, m->identifier,
                          sizeof(m->identifier));
    if (!err)
        err = hkdf_expand(&kr->algs, m->prk, HKDF_CONTEXT_INODE_HASH_KEY, NULL, 0, m->ino_hash_key,
                          sizeof(m->ino_hash_key));
    if (err)
        return err;
    if (desc) {
        memcpy(m->descriptor, desc, FSCRYPT_DESCRIPTOR_SIZE);
        return 0;
    }
    /* The descriptor e4crypt, fscrypt and vold give a v1 key: SHA-512(SHA-512(key))[0, 8). */
    uint8_t h1[64], h2[64];
    unsigned n1 = 0, n2 = 0;
    int ok = EVP_Digest(raw, len, h1, &n1, kr->algs.sha512, NULL) == 1 &&
             EVP_Digest(h1, sizeof(h1), h2, &n2, kr->algs.sha512, NULL) == 1;
    if (ok)
        memcpy(m->descriptor, h2, FSCRYPT_DESCRIPTOR_SIZE);
    OPENSSL_cleanse(h1, sizeof(h1));
    OPENSSL_cleanse(h2, sizeof(h2));
    return ok ? 0 : -ENOMEM;
}

static void missing_forget(struct fscrypt_keyring *kr, const struct fscrypt_master *m)
{
    for (unsigned i = 0; i < kr->nmissing;) {
        bool v1 = kr->missing[i].version == FSCRYPT_CONTEXT_V1;
        const uint8_t *mine = v1 ? m->descriptor : m->identifier;
        if (same_bytes(kr->missing[i].key, mine, v1 ? 8 : 16))
            kr->missing[i] = kr->missing[--kr->nmissing];
        else
            i++;
    }
}

int fscrypt_key_add(struct f2fuse *fs, const uint8_t *raw, size_t len, const uint8_t *desc,
                    struct f2fuse_key_info *info)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (!kr)
        return -EOPNOTSUPP;
    if (len < FSCRYPT_MASTER_MIN || len > FSCRYPT_MASTER_MAX)
        return -EINVAL;
    pthread_mutex_lock(&kr->lock);
    int err = 0;
    struct fscrypt_master *m = pool_alloc(&kr->pool);
    if (!m)
        err = -ENOMEM;
    if (!err)
        err = master_setup(kr, m, raw, len, desc);
    struct fscrypt_master *old = err ? NULL : master_find(kr, m->identifier, 16);
    if (!err && old) {
        /* Present already (no error, as FS_IOC_ADD_ENCRYPTION_KEY), or removed with files
         * still open: whole again.  A new v1 descriptor is not taken on: remove it first. */
        if (old->removed) {
            memcpy(old->raw, m->raw, sizeof(m->raw));
            memcpy(old->prk, m->prk, sizeof(m->prk));
            memcpy(old->ino_hash_key, m->ino_hash_key, sizeof(m->ino_hash_key));
            old->len = m->len;
            old->removed = false;
        }
        pool_free(&kr->pool, m);
        m = old;
    } else if (!err) {
        unsigned i = 0;
        while (i < FSCRYPT_MAX_MASTERS && kr->masters[i])
            i++;
        if (i == FSCRYPT_MAX_MASTERS) {
            err = -ENOSPC;
        } else {
            kr->masters[i] = m;
            atomic_store(&m->v1, desc ? V1_UNCHECKED : V1_RIGHT);
        }
    }
    if (err) {
        pool_free(&kr->pool, m);
    } else {
        missing_forget(kr, m);
        if (info)
            master_info(m, info);
    }
    pthread_mutex_unlock(&kr->lock);
    return err;
}

/* ---- inode keys ---- */

static struct fscrypt_ikey **ikey_slot(struct fscrypt_keyring *kr, uint32_t ino)
{
    struct fscrypt_ikey **pp = &kr->buckets[ino % IKEY_BUCKETS];
    while (*pp && (*pp)->ino != ino)
        pp = &(*pp)->next;
    return pp;
}

/* Removes master m from the ring and wipes it; lock held. */
static void master_free(struct fscrypt_keyring *kr, struct fscrypt_master *m)
{
    for (unsigned i = 0; i < FSCRYPT_MAX_MASTERS; i++)
        if (kr->masters[i] == m)
            kr->masters[i] = NULL;
    pool_free(&kr->pool, m);
}

/* Wipes k, which nobody holds and no bucket reaches any more; lock held.  A removed master
 * goes with the last key a busy file kept of it. */
static void ikey_free(struct fscrypt_keyring *kr, struct fscrypt_ikey *k)
{
    struct fscrypt_master *m = k->master;
    if (k->orphaned && m && --m->orphans == 0 && m->removed)
        master_free(kr, m);
    kr->ikeys--;
    pool_free(&kr->pool, k);
}

/* Unhashes and wipes k (nobody holds it); lock held. */
static void ikey_drop(struct fscrypt_keyring *kr, struct fscrypt_ikey *k)
{
    struct fscrypt_ikey **pp = ikey_slot(kr, k->ino);
    if (*pp == k)
        *pp = k->next;
    ikey_free(kr, k);
}

/* Keeps the cache at IKEY_CACHE keys besides those held or orphaned: the least recently
 * used goes. */
static void ikey_evict(struct fscrypt_keyring *kr)
{
    while (kr->ikeys > IKEY_CACHE) {
        struct fscrypt_ikey *victim = NULL;
        for (unsigned b = 0; b < IKEY_BUCKETS; b++)
            for (struct fscrypt_ikey *k = kr->buckets[b]; k; k = k->next)
                if (!k->refs && !k->orphaned && (!victim || k->last_use < victim->last_use))
                    victim = k;
        if (!victim)
            return;
        ikey_drop(kr, victim);
        atomic_fetch_add(&kr->evicted, 1);
    }
}

/* Where libcrypto cannot do a mode (no Adiantum, HCTR2 or SM4-XTS in OpenSSL 3.0). */
static bool mode_done(uint8_t mode)
{
    return mode == FSCRYPT_MODE_AES_256_XTS || mode == FSCRYPT_MODE_AES_256_CTS ||
           mode == FSCRYPT_MODE_AES_128_CBC || mode == FSCRYPT_MODE_AES_128_CTS;
}

static const char *mode_name(uint8_t mode)
{
    switch (mode) {
    case FSCRYPT_MODE_ADIANTUM: return "Adiantum";
    case FSCRYPT_MODE_AES_256_HCTR2: return "AES-256-HCTR2";
    case FSCRYPT_MODE_SM4_XTS: return "SM4-XTS";
    case FSCRYPT_MODE_SM4_CTS: return "SM4-CBC-CTS";
    default: return "an unknown mode";
    }
}

/* Key sizes and the least master key size a v2 policy needs (security strength). */
static uint8_t mode_key_size(uint8_t mode)
{
    switch (mode) {
    case FSCRYPT_MODE_AES_256_XTS: return 64;
    case FSCRYPT_MODE_AES_256_CTS: return 32;
    default: return 16; /* AES-128-CBC(-ESSIV), AES-128-CTS */
    }
}

static uint8_t mode_strength(uint8_t mode)
{
    return mode == FSCRYPT_MODE_AES_128_CBC || mode == FSCRYPT_MODE_AES_128_CTS ? 16 : 32;
}

static void note_missing(struct fscrypt_keyring *kr, const struct fscrypt_context *ctx)
{
    size_t n = ctx->version == FSCRYPT_CONTEXT_V1 ? 8 : 16;
    for (unsigned i = 0; i < kr->nmissing; i++)
        if (kr->missing[i].version == ctx->version && memcmp(kr->missing[i].key, ctx->key, n) == 0)
            return;
    if (kr->nmissing == MISSING_MAX)
        return;
    kr->missing[kr->nmissing].version = ctx->version;
    memset(kr->missing[kr->nmissing].key, 0, FSCRYPT_IDENTIFIER_SIZE);
    memcpy(kr->missing[kr->nmissing].key, ctx->key, n);
    kr->nmissing++;
}

static int siphash_u64(const struct fscrypt_algs *a, const uint8_t key[16], uint64_t v,
                       uint32_t *out)
{
    uint8_t msg[8], mac[8];
    for (int i = 0; i < 8; i++)
        msg[i] = (uint8_t)(v >> (8 * i));
    int err = fscrypt_siphash(a, key, msg, sizeof(msg), mac);
    if (!err)
        *out = (uint32_t)mac[0] | (uint32_t)mac[1] << 8 | (uint32_t)mac[2] << 16 |
               (uint32_t)mac[3] << 24;
    return err;
}

/* v1: the master key's first key_len bytes encrypted with AES-128-ECB under the nonce. */
static int derive_v1(const struct fscrypt_algs *a, const struct fscrypt_master *m,
                     const uint8_t nonce[16], uint8_t *out, size_t len)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int n = 0, ok = c && EVP_EncryptInit_ex2(c, a->aes128_ecb, nonce, NULL, NULL) == 1 &&
                    EVP_CIPHER_CTX_set_padding(c, 0) == 1 &&
                    EVP_EncryptUpdate(c, out, &n, m->raw, (int)len) == 1 && n == (int)len;
    EVP_CIPHER_CTX_free(c);
    return ok ? 0 : -ENOMEM;
}

/* Fills k for inode ii with context ctx, from master m; lock held. */
static int derive(struct f2fuse *fs, const struct fscrypt_master *m,
                  const struct fscrypt_context *ctx, const struct inode_info *ii,
                  struct fscrypt_ikey *k)
{
    const struct fscrypt_algs *a = &fs->keys->algs;
    bool reg = S_ISREG(ii->mode);
    k->version = ctx->version;
    k->mode = reg ? ctx->contents_mode : ctx->filenames_mode;
    k->flags = ctx->flags;
    k->log2_dus = ctx->log2_data_unit_size ? ctx->log2_data_unit_size : 12;
    k->key_len = mode_key_size(k->mode);
    int err;
    if (ctx->version == FSCRYPT_CONTEXT_V1) {
        err = derive_v1(a, m, ctx->nonce, k->key, k->key_len);
    } else {
        uint8_t info[1 + 16];
        info[0] = k->mode;
        memcpy(info + 1, fs->sb.uuid, 16);
        if (ctx->flags & FSCRYPT_POLICY_FLAG_IV_INO_LBLK_64) {
            err = hkdf_expand(a, m->prk, HKDF_CONTEXT_IV_INO_LBLK_64_KEY, info, sizeof(info),
                              k->key, k->key_len);
        } else if (ctx->flags & FSCRYPT_POLICY_FLAG_IV_INO_LBLK_32) {
            err = hkdf_expand(a, m->prk, HKDF_CONTEXT_IV_INO_LBLK_32_KEY, info, sizeof(info),
                              k->key, k->key_len);
            if (!err)
                err = siphash_u64(a, m->ino_hash_key, ii->ino, &k->hashed_ino);
        } else {
            err = hkdf_expand(a, m->prk, HKDF_CONTEXT_PER_FILE_ENC_KEY, ctx->nonce,
                              FSCRYPT_NONCE_SIZE, k->key, k->key_len);
        }
        if (!err && S_ISDIR(ii->mode) && (ii->flags & F2FS_CASEFOLD_FL)) {
            err = hkdf_expand(a, m->prk, HKDF_CONTEXT_DIRHASH_KEY, ctx->nonce, FSCRYPT_NONCE_SIZE,
                              k->dirhash_key, sizeof(k->dirhash_key));
            k->has_dirhash = !err;
        }
    }
    if (!err && k->mode == FSCRYPT_MODE_AES_128_CBC) {
        /* ESSIV: IVs are encrypted with AES-256 under SHA-256 of the contents key. */
        unsigned n = 0;
        if (EVP_Digest(k->key, k->key_len, k->essiv_key, &n, a->sha256, NULL) != 1)
            err = -ENOMEM;
    }
    return err;
}

/* Whether k may serve inode generation gen now; lock held.  An orphaned key serves only
 * while its file stays open. */
static bool ikey_usable(struct f2fuse *fs, struct fscrypt_ikey *k, uint32_t gen)
{
    if (k->generation != gen || (k->master && atomic_load(&k->master->v1) == V1_WRONG))
        return false;
    return !k->orphaned || inode_is_open(fs, k->ino);
}

int fscrypt_ikey_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                     struct fscrypt_ikey **out)
{
    struct fscrypt_keyring *kr = fs->keys;
    *out = NULL;
    uint32_t gen = le32(page_node(ipage)->i.i_generation);
    struct fscrypt_context ctx;
    int err = fscrypt_inode_context(fs, ii, ipage, &ctx);
    if (err)
        return err;
    if (!kr)
        return -ENOKEY;
    pthread_mutex_lock(&kr->lock);
    struct fscrypt_ikey *k = *ikey_slot(kr, ii->ino);
    if (k && ikey_usable(fs, k, gen)) {
        k->refs++;
        k->last_use = ++kr->tick;
        pthread_mutex_unlock(&kr->lock);
        *out = k;
        return 0;
    }
    if (k && !k->refs) {
        ikey_drop(kr, k); /* another inode's by that number, or orphaned and closed */
    } else if (k) {
        *ikey_slot(kr, ii->ino) = k->next; /* its last holder wipes it (ikey_settle) */
        k->unhashed = true;
    }
    err = -ENOKEY;
    /* A policy the kernel would not use: as without the key (allow_unsupported). */
    bool casefolded_dir = S_ISDIR(ii->mode) && (ii->flags & F2FS_CASEFOLD_FL);
    if (fscrypt_policy_unsupported(&ctx, casefolded_dir))
        goto out;
    uint8_t mode = S_ISREG(ii->mode) ? ctx.contents_mode : ctx.filenames_mode;
    struct fscrypt_master *m = master_find(kr, ctx.key, ctx.version == 1 ? 8 : 16);
    if (!m || m->removed || atomic_load(&m->v1) == V1_WRONG) {
        note_missing(kr, &ctx);
        goto out;
    }
    if (!mode_done(ctx.contents_mode) || !mode_done(ctx.filenames_mode)) {
        uint8_t bad = mode_done(ctx.contents_mode) ? ctx.filenames_mode : ctx.contents_mode;
        if (bad < 32 && !(kr->logged_modes & (1u << bad))) {
            kr->logged_modes |= 1u << bad;
            log_warn("fscrypt: inode %u is encrypted with %s, which libcrypto does not offer: "
                     "files of that policy stay as without their key",
                     ii->ino, mode_name(bad));
        }
        goto out;
    }
    size_t need = ctx.version == FSCRYPT_CONTEXT_V1 ? mode_key_size(mode) : mode_strength(mode);
    if (m->len < need) {
        log_warn("fscrypt: inode %u: its policy needs a master key of at least %zu bytes, the "
                 "key added is %u bytes: not used",
                 ii->ino, need, m->len);
        goto out;
    }
    k = pool_alloc(&kr->pool);
    err = -ENOMEM;
    if (!k)
        goto out;
    err = derive(fs, m, &ctx, ii, k);
    if (err) {
        pool_free(&kr->pool, k);
        goto out;
    }
    k->master = m;
    k->ino = ii->ino;
    k->generation = gen;
    k->refs = 1;
    k->last_use = ++kr->tick;
    k->next = kr->buckets[ii->ino % IKEY_BUCKETS];
    kr->buckets[ii->ino % IKEY_BUCKETS] = k;
    kr->ikeys++;
    atomic_fetch_add(&kr->derived, 1);
    ikey_evict(kr);
    *out = k;
out:
    pthread_mutex_unlock(&kr->lock);
    return err;
}

/* Drops k once its last holder let go, when it was unhashed or it is an orphan
 * whose file closed; lock held. */
static void ikey_settle(struct f2fuse *fs, struct fscrypt_ikey *k)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (k->refs)
        return;
    if (k->unhashed)
        ikey_free(kr, k);
    else if (k->orphaned && !inode_is_open(fs, k->ino))
        ikey_drop(kr, k);
}

void fscrypt_ikey_put(struct f2fuse *fs, struct fscrypt_ikey *k)
{
    if (!k)
        return;
    struct fscrypt_keyring *kr = fs->keys;
    pthread_mutex_lock(&kr->lock);
    k->refs--;
    ikey_settle(fs, k);
    pthread_mutex_unlock(&kr->lock);
}

void fscrypt_ikey_forget(struct f2fuse *fs, uint32_t ino)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (!kr)
        return;
    pthread_mutex_lock(&kr->lock);
    struct fscrypt_ikey **pp = ikey_slot(kr, ino);
    struct fscrypt_ikey *k = *pp;
    if (k) {
        *pp = k->next;
        k->unhashed = true;
        ikey_settle(fs, k);
    }
    pthread_mutex_unlock(&kr->lock);
}

void fscrypt_ikey_closed(struct f2fuse *fs, uint32_t ino)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (!kr)
        return;
    pthread_mutex_lock(&kr->lock);
    struct fscrypt_ikey *k = *ikey_slot(kr, ino);
    if (k && k->orphaned)
        ikey_settle(fs, k);
    pthread_mutex_unlock(&kr->lock);
}

/* Drops every inode key of m but those of open files, which become orphans; lock held. */
static unsigned master_unlock_inodes(struct f2fuse *fs, struct fscrypt_master *m)
{
    struct fscrypt_keyring *kr = fs->keys;
    unsigned busy = 0;
    for (unsigned b = 0; b < IKEY_BUCKETS; b++) {
        for (struct fscrypt_ikey *k = kr->buckets[b], *next; k; k = next) {
            next = k->next;
            if (k->master != m || k->orphaned)
                continue;
            if (k->refs || inode_is_open(fs, k->ino)) {
                k->orphaned = true;
                m->orphans++;
                busy++;
            } else {
                ikey_drop(kr, k);
            }
        }
    }
    return busy;
}

int fscrypt_key_remove(struct f2fuse *fs, const uint8_t *spec, size_t spec_len, unsigned *busy)
{
    struct fscrypt_keyring *kr = fs->keys;
    *busy = 0;
    if (!kr)
        return -ENOKEY;
    if (spec_len != FSCRYPT_IDENTIFIER_SIZE && spec_len != FSCRYPT_DESCRIPTOR_SIZE)
        return -EINVAL;
    pthread_mutex_lock(&kr->lock);
    struct fscrypt_master *m = master_find(kr, spec, spec_len);
    int err = m && !m->removed ? 0 : -ENOKEY;
    if (!err) {
        master_unlock_inodes(fs, m);
        *busy = m->orphans;
        OPENSSL_cleanse(m->raw, sizeof(m->raw));
        OPENSSL_cleanse(m->prk, sizeof(m->prk));
        OPENSSL_cleanse(m->ino_hash_key, sizeof(m->ino_hash_key));
        m->removed = true;
        if (!m->orphans)
            master_free(kr, m);
    }
    pthread_mutex_unlock(&kr->lock);
    return err;
}

int fscrypt_key_list(struct f2fuse *fs, f2fuse_key_fn fn, void *arg)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (!kr)
        return 0;
    struct f2fuse_key_info list[FSCRYPT_MAX_MASTERS + MISSING_MAX];
    unsigned n = 0;
    pthread_mutex_lock(&kr->lock);
    for (unsigned i = 0; i < FSCRYPT_MAX_MASTERS; i++)
        if (kr->masters[i])
            master_info(kr->masters[i], &list[n++]);
    for (unsigned i = 0; i < kr->nmissing; i++) {
        struct f2fuse_key_info *k = &list[n++];
        memset(k, 0, sizeof(*k));
        k->status = F2FUSE_KEY_MISSING;
        k->version = kr->missing[i].version;
        if (k->version == FSCRYPT_CONTEXT_V1)
            memcpy(k->descriptor, kr->missing[i].key, FSCRYPT_DESCRIPTOR_SIZE);
        else
            memcpy(k->identifier, kr->missing[i].key, FSCRYPT_IDENTIFIER_SIZE);
    }
    pthread_mutex_unlock(&kr->lock);
    for (unsigned i = 0; i < n; i++) {
        int r = fn(arg, &list[i]);
        if (r)
            return r;
    }
    return 0;
}

bool fscrypt_master_unchecked(const struct fscrypt_ikey *k)
{
    return k->version == FSCRYPT_CONTEXT_V1 && k->master &&
           atomic_load(&k->master->v1) == V1_UNCHECKED;
}

bool fscrypt_master_name_seen(struct f2fuse *fs, struct fscrypt_ikey *k, bool plausible,
                              uint32_t dir_ino)
{
    struct fscrypt_master *m = k->master;
    if (k->version != FSCRYPT_CONTEXT_V1 || !m)
        return false;
    int state = atomic_load(&m->v1);
    if (state != V1_UNCHECKED)
        return state == V1_WRONG;
    if (plausible) {
        if (atomic_fetch_add(&m->v1_plausible, 1) + 1 >= FSCRYPT_V1_PLAUSIBLE)
            atomic_compare_exchange_strong(&m->v1, &state, V1_RIGHT);
        return false;
    }
    if (atomic_compare_exchange_strong(&m->v1, &state, V1_WRONG)) {
        char desc[2 * FSCRYPT_DESCRIPTOR_SIZE + 1];
        for (int i = 0; i < FSCRYPT_DESCRIPTOR_SIZE; i++)
            snprintf(desc + 2 * i, 3, "%02x", m->descriptor[i]);
        log_err("fscrypt: the key added for v1 descriptor %s does not decrypt the names of "
                "directory %u: it is not that descriptor's key, and is not used",
                desc, dir_ino);
    }
    return atomic_load(&m->v1) == V1_WRONG;
}

void fscrypt_master_confirmed(struct fscrypt_ikey *k)
{
    int state = V1_UNCHECKED;
    if (k->version == FSCRYPT_CONTEXT_V1 && k->master)
        atomic_compare_exchange_strong(&k->master->v1, &state, V1_RIGHT);
}

void fscrypt_master_scan_done(struct fscrypt_ikey *k)
{
    int state = V1_UNCHECKED;
    if (fscrypt_master_unchecked(k) && atomic_load(&k->master->v1_plausible) > 0)
        atomic_compare_exchange_strong(&k->master->v1, &state, V1_RIGHT);
}

void fscrypt_keys_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct fscrypt_keyring *kr = fs->keys;
    if (!kr)
        return;
    pthread_mutex_lock(&kr->lock);
    uint64_t masters = 0, ikeys = kr->ikeys;
    for (unsigned i = 0; i < FSCRYPT_MAX_MASTERS; i++)
        masters += kr->masters[i] && !kr->masters[i]->removed;
    pthread_mutex_unlock(&kr->lock);
    emit(sink, "fscrypt.master_keys", masters);
    emit(sink, "fscrypt.inode_keys", ikeys);
    emit(sink, "fscrypt.inode_keys_derived", atomic_load(&kr->derived));
    emit(sink, "fscrypt.inode_keys_evicted", atomic_load(&kr->evicted));
    emit(sink, "fscrypt.blocks_decrypted", atomic_load(&kr->blocks_decrypted));
    emit(sink, "fscrypt.blocks_encrypted", atomic_load(&kr->blocks_encrypted));
    emit(sink, "fscrypt.names", atomic_load(&kr->names));
}
