/* fscrypt.c: encrypted files and directories (fs/crypto): contexts, and what is shown and
 * refused without the key.
 *
 * An encrypted inode carries FADVISE_ENCRYPT and an encryption context in the xattr index 9
 * "c": the policy (modes, flags, master key) and a per-file nonce.  Without the key f2fuse
 * keeps everything encrypted as it is and shows it as the kernel does: names as no-key
 * names (base64url of the entry's hash and ciphertext, long ones abbreviated by SHA-256),
 * symlink targets the same way, contents refused with ENOKEY (docs/FORMAT.md §15).  With
 * the key (fscrypt_keys.c, fscrypt_cipher.c) names, targets and contents are decrypted. */
#ifndef F2FUSE_CORE_FSCRYPT_H
#define F2FUSE_CORE_FSCRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/fscrypt.h>
#include <sys/types.h>

#include "cache/pcache.h"
#include "core/inode.h"

struct f2fuse;

/* Context versions (the first byte) and their sizes. */
#define FSCRYPT_CONTEXT_V1      1
#define FSCRYPT_CONTEXT_V2      2
#define FSCRYPT_CONTEXT_V1_SIZE 28
#define FSCRYPT_CONTEXT_V2_SIZE 40
#define FSCRYPT_CONTEXT_MAX     FSCRYPT_CONTEXT_V2_SIZE
#define FSCRYPT_NONCE_SIZE      16

/* Policy flags and mode numbers: include/uapi/linux/fscrypt.h (Debian's linux-libc-dev
 * predates the SM4 modes). */
#ifndef FSCRYPT_MODE_SM4_XTS
#define FSCRYPT_MODE_SM4_XTS 7
#define FSCRYPT_MODE_SM4_CTS 8
#endif

/* A parsed context.  The policy is everything but the nonce: files of one encrypted tree
 * share it (fscrypt_has_permitted_context). */
struct fscrypt_context {
    uint8_t version; /* FSCRYPT_CONTEXT_V1 or _V2 */
    uint8_t contents_mode, filenames_mode, flags;
    uint8_t log2_data_unit_size; /* v2 only; 0 = the block size */
    uint8_t reserved[3];         /* v2 only; zero */
    uint8_t key[16];             /* v1: an 8-byte descriptor; v2: the key identifier */
    uint8_t nonce[FSCRYPT_NONCE_SIZE];
};

/* Parses a context as stored: -EINVAL when its size does not match a known version (the
 * kernel's fscrypt_context_is_valid).  Pure: no I/O, no allocation. */
int fscrypt_context_parse(const uint8_t *buf, size_t len, struct fscrypt_context *ctx);
/* The stored form of ctx (buf: FSCRYPT_CONTEXT_MAX bytes); returns its size. */
size_t fscrypt_context_build(const struct fscrypt_context *ctx, uint8_t *buf);
/* Whether the kernel would use the policy (fscrypt_supported_policy for f2fs): known mode
 * pairs and flags, reserved bytes zero.  NULL when it would, else why not. */
const char *fscrypt_policy_unsupported(const struct fscrypt_context *ctx, bool casefolded_dir);
/* Whether two contexts name the same policy (the nonces aside). */
bool fscrypt_same_policy(const struct fscrypt_context *a, const struct fscrypt_context *b);

/* Reads and parses inode ii's context.  A missing or unparsable one is damage: a
 * `corrupt image:` line and -EIO.  (A policy the kernel would not use is no damage:
 * without the key it changes nothing, and the kernel too lists and deletes such files.) */
int fscrypt_inode_context(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                          struct fscrypt_context *ctx);

static inline bool fscrypt_encrypted(const struct inode_info *ii)
{
    return ii->advise & FADVISE_ENCRYPT_BIT;
}

/* ---- no-key names (fs/crypto/fname.c, struct fscrypt_nokey_name) ---- */

#define FSCRYPT_NOKEY_BYTES       149 /* ciphertext bytes a no-key name carries whole */
#define FSCRYPT_NOKEY_DIGEST      32  /* SHA-256 of the rest, for longer ones */
#define FSCRYPT_NOKEY_MAX_DECODED (8 + FSCRYPT_NOKEY_BYTES + FSCRYPT_NOKEY_DIGEST) /* 189 */
#define FSCRYPT_NOKEY_MAX_ENCODED 252 /* base64url of 189 bytes, <= NAME_MAX */
#define FSCRYPT_MIN_CIPHERTEXT    16  /* names shorter are padded to one AES block */

/* A no-key name decoded: the entry's hash words and its ciphertext, whole (digest false)
 * or its first FSCRYPT_NOKEY_BYTES and a SHA-256 of the rest. */
struct fscrypt_nokey {
    uint32_t hash, minor_hash;
    bool digest;
    size_t len; /* of bytes[] in use */
    uint8_t bytes[FSCRYPT_NOKEY_BYTES];
    uint8_t sha256[FSCRYPT_NOKEY_DIGEST];
};

/* Encodes a stored entry (hash words, ciphertext) as its no-key name into out (at least
 * FSCRYPT_NOKEY_MAX_ENCODED + 1 bytes, NUL-terminated); returns its length, or -ENOMEM when
 * libcrypto cannot hash. */
ssize_t fscrypt_nokey_encode(uint32_t hash, uint32_t minor_hash, const uint8_t *ciphertext,
                             size_t len, char *out);
/* Decodes a name given for lookup; -ENOENT when it cannot be a no-key name (the kernel's
 * fscrypt_setup_filename without the key). */
int fscrypt_nokey_decode(const char *name, size_t len, struct fscrypt_nokey *nk);
/* Whether the stored ciphertext is the one nk names (fscrypt_match_name; the caller
 * compares the hash). */
bool fscrypt_nokey_matches(const struct fscrypt_nokey *nk, const uint8_t *stored, size_t len);

/* base64url without padding (RFC 4648 §5), as fscrypt writes and reads it.  decode returns
 * the byte count or -1 for a character outside the alphabet or non-zero trailing bits. */
size_t fscrypt_base64url_encode(const uint8_t *src, size_t len, char *dst);
ssize_t fscrypt_base64url_decode(const char *src, size_t len, uint8_t *dst);

/* ---- encrypted symlinks ---- */

/* What readlink shows for an encrypted symlink without its key: the no-key encoding of
 * its stored target (struct fscrypt_symlink_data: le16 length + ciphertext), read from
 * raw[0, raw_len).  Returns the length written to out (FSCRYPT_NOKEY_MAX_ENCODED + 1 bytes)
 * or -EUCLEAN for a target that cannot be one (fscrypt_get_symlink). */
ssize_t fscrypt_symlink_nokey(const uint8_t *raw, size_t raw_len, char *out);
/* Reads symlink ii's stored target and shows it decrypted with its key (fscrypt_keys.c), or
 * as above without; damage is reported (-EIO).  out: FSCRYPT_SYMLINK_TARGET_MAX bytes. */
#define FSCRYPT_SYMLINK_TARGET_MAX 4096
ssize_t fscrypt_symlink_target(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                               char *out);

/* ---- what is refused without the key (fs/crypto/hooks.c) ---- */

/* Contents of an encrypted regular file: opening, reading, writing, truncating. */
int fscrypt_check_contents(const struct inode_info *ii);
/* An open of the inode (fscrypt_file_open): an encrypted regular file needs its key
 * (-ENOKEY); a context that does not parse is reported first (EIO), as fscrypt_require_key
 * does. */
int fscrypt_check_open(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage);
/* Setting CASEFOLD on encrypted directory ii (fscrypt_prepare_setflags): its key
 * (-ENOKEY), and a v2 policy (-EINVAL), whose dirhash key its names will hash with. */
int fscrypt_check_casefold(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage);
/* A new name in dir (create, mknod, mkdir, symlink, link, the new side of rename) needs its
 * key (fscrypt_prepare_new_inode): -ENOKEY without, -EIO for a damaged context. */
int fscrypt_check_new_name(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage);
/* Whether ii may sit in dir (fscrypt_has_permitted_context): only files of dir's policy in an
 * encrypted directory, devices, fifos and sockets aside; -EXDEV else. */
int fscrypt_permitted(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                      const struct inode_info *ii, struct page *ipage);
/* A link of ii into dir (__fscrypt_prepare_link): the key, then the policy. */
int fscrypt_check_link(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                       const struct inode_info *ii, struct page *ipage);
/* A rename (__fscrypt_prepare_rename): both directories' keys when encrypted, and what moves
 * between two directories must be of the new one's policy (tgt: with exchange). */
struct fscrypt_rename {
    const struct inode_info *odir, *ndir, *src, *tgt;
    struct page *odpage, *ndpage, *spage, *tpage;
    bool exchange;
};
int fscrypt_check_rename(struct f2fuse *fs, const struct fscrypt_rename *r);
/* A new inode ii in dir (f2fs_new_inode, fscrypt_set_context, init_dent_inode): in an
 * encrypted directory a file, directory or symlink gets dir's policy with a new nonce from
 * the CSPRNG (a regular file no inline data), and every inode the ENC_NAME mark; in a
 * casefolded one the name's hash follows i_name, for roll-forward recovery. */
int fscrypt_new_inode(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                      struct inode_info *ii, struct page *ipage, uint32_t name_hash);
/* The marks of a name recorded in i_name (init_dent_inode) when dir is encrypted: ENC_NAME,
 * never cleared, and the hash of a casefolded one after it. */
void fscrypt_name_recorded(const struct inode_info *dir, struct page *ipage, uint32_t name_hash);

#endif
