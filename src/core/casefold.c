/* Casefolded names as the kernel folds them: fs/unicode's utf8_casefold with the "nfdicf"
 * table of Unicode 12.1, the only encoding f2fs defines.
 *
 * The kernel's table gives each code point a combining class and a replacement (full case
 * folding, then canonical decomposition, repeated until nothing changes; nothing for a
 * Default_Ignorable code point); code points unassigned in 12.1 stay as they are.  Its
 * reader then emits the replacements, putting each run of combining marks in canonical
 * order.  Here ICU supplies the character data and its character ages make the 12.1 cut;
 * the reader's behaviour, including what it does with bytes that are not UTF-8, is
 * reproduced exactly, since a kernel hashes what its reader emits (docs/FORMAT.md). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include "core/casefold.h"
#include "core/context.h"
#include "core/dir.h"
#include "core/dirname.h"
#include "core/inode.h"
#include "util/log.h"

struct casefold {
    bool strict;
    bool scan_after_miss;
    /* Directories a full scan found holding only entries hashed as f2fuse hashes them: an
     * open-addressing set of inode numbers (0 = empty slot). */
    pthread_mutex_t lock;
    uint32_t *clean;
    size_t clean_count, clean_slots;
};

/* ---- the character data ---- */

/* One unit of the reader's output: a code point with its combining class, a byte that is
 * not part of any character (a continuation byte where a character should start: the
 * kernel passes it through), or an ignorable code point (emits nothing, but ends a run of
 * combining marks). */
enum unit_kind { UNIT_CHAR, UNIT_BYTE, UNIT_IGNORABLE };
struct unit {
    uint32_t cp;
    uint8_t ccc;
    uint8_t kind;
};

/* A name of at most F2FS_NAME_LEN bytes has at most that many ignorables, and every other
 * unit emits at least one byte, so more than CASEFOLD_MAX of those cannot fold. */
#define MAX_UNITS     (2 * F2FS_NAME_LEN + 2)
#define MAX_EXPANSION 32

/* ICU's age of cp against 12.1: -1 unassigned (ICU gives 0.0), 0 assigned by 12.1, 1 later. */
static int age_vs_12_1(uint32_t cp)
{
    UVersionInfo age;
    u_charAge((UChar32)cp, age);
    if (age[0] == 0 && age[1] == 0)
        return -1;
    return age[0] < 12 || (age[0] == 12 && age[1] <= 1) ? 0 : 1;
}

/* ICU's NFD instance (created once by ICU and shared), NULL when its data is missing. */
static const UNormalizer2 *nfd(void)
{
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2 *norm = unorm2_getNFDInstance(&err);
    return U_FAILURE(err) ? NULL : norm;
}

/* The kernel's replacement of cp as code points (full case folding first, else the
 * canonical decomposition, each part replaced again); returns their number, or -1 when
 * room runs out or ICU fails. */
static int replacement(uint32_t cp, uint32_t *out, int room, int depth)
{
    if (u_hasBinaryProperty((UChar32)cp, UCHAR_DEFAULT_IGNORABLE_CODE_POINT))
        return 0;
    UChar src[2], buf[MAX_EXPANSION];
    int32_t srclen = 0;
    U16_APPEND_UNSAFE(src, srclen, cp);
    UErrorCode err = U_ZERO_ERROR;
    int32_t n = u_strFoldCase(buf, MAX_EXPANSION, src, srclen, U_FOLD_CASE_DEFAULT, &err);
    if (U_FAILURE(err))
        return -1;
    if (n == srclen && memcmp(buf, src, (size_t)n * sizeof(UChar)) == 0) {
        const UNormalizer2 *norm = nfd();
        if (!norm)
            return -1;
        n = unorm2_getDecomposition(norm, (UChar32)cp, buf, MAX_EXPANSION, &err);
        if (U_FAILURE(err))
            return -1;
        if (n < 0) { /* neither folds nor decomposes: itself */
            if (room < 1)
                return -1;
            out[0] = cp;
            return 1;
        }
    }
    if (depth > 8)
        return -1;
    int total = 0;
    for (int32_t i = 0; i < n;) {
        UChar32 part;
        U16_NEXT(buf, i, n, part);
        int k = replacement((uint32_t)part, out + total, room - total, depth + 1);
        if (k < 0)
            return -1;
        total += k;
    }
    return total;
}

/* Appends the units code point cp stands for; returns how many, or -1 past room. */
static int units_of(uint32_t cp, struct unit *u, int room)
{
    if (room < 1)
        return -1;
    if (cp < 0x80) { /* ASCII: only A-Z change */
        u[0] = (struct unit){cp >= 'A' && cp <= 'Z' ? cp + 32 : cp, 0, UNIT_CHAR};
        return 1;
    }
    /* Default_Ignorable covers reserved code points too, which the kernel's table drops
     * as well; one assigned after 12.1 was no ignorable there (U+180F). */
    int age = age_vs_12_1(cp);
    if (age <= 0 && u_hasBinaryProperty((UChar32)cp, UCHAR_DEFAULT_IGNORABLE_CODE_POINT)) {
        u[0] = (struct unit){cp, 0, UNIT_IGNORABLE};
        return 1;
    }
    if (age != 0) { /* the kernel's table has no data for it: itself, a starter */
        u[0] = (struct unit){cp, 0, UNIT_CHAR};
        return 1;
    }
    uint32_t cps[MAX_EXPANSION];
    int n = replacement(cp, cps, MAX_EXPANSION, 0);
    if (n < 0 || n > room)
        return -1;
    for (int i = 0; i < n; i++)
        u[i] = (struct unit){cps[i], (uint8_t)u_getCombiningClass((UChar32)cps[i]), UNIT_CHAR};
    return n;
}

/* ---- the reader ---- */

static bool continuation(uint8_t b)
{
    return (b & 0xC0) == 0x80;
}

/* Decodes the character at s (n bytes left) as the kernel's table accepts it: shortest
 * form, no surrogates, nothing past U+10FFFF.  Returns its length, or 0 when invalid. */
static size_t decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (b < 0x80) {
        *cp = b;
        return 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
        *cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        *cp = b & 0x0F;
        if (b == 0xE0)
            lo = 0xA0;
        else if (b == 0xED)
            hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        *cp = b & 0x07;
        if (b == 0xF0)
            lo = 0x90;
        else if (b == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if (!continuation(s[i]))
            return 0;
        *cp = *cp << 6 | (s[i] & 0x3F);
    }
    return len;
}

/* Splits name into units; returns their number or -EINVAL. */
static int read_units(const uint8_t *name, size_t len, struct unit *units)
{
    const uint8_t *nul = memchr(name, 0, len);
    size_t n = nul ? (size_t)(nul - name) : len;
    if (n && continuation(name[0])) /* the kernel refuses to start there */
        return -EINVAL;
    int count = 0;
    for (size_t i = 0; i < n;) {
        if (continuation(name[i])) {
            if (count == MAX_UNITS)
                return -EINVAL;
            units[count++] = (struct unit){name[i++], 0, UNIT_BYTE};
            continue;
        }
        uint32_t cp;
        size_t clen = decode(name + i, n - i, &cp);
        int k = clen ? units_of(cp, units + count, MAX_UNITS - count) : -1;
        if (k < 0)
            return -EINVAL;
        count += k;
        i += clen;
    }
    return count;
}

struct output {
    uint8_t *buf;
    size_t len;
    bool full;
};

static void put(struct output *o, const struct unit *u)
{
    uint8_t b[4];
    size_t n;
    uint32_t cp = u->cp;
    if (u->kind == UNIT_BYTE || cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xC0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xE0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xF0 | cp >> 18);
        b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        b[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    if (o->len + n > CASEFOLD_MAX) {
        o->full = true;
        return;
    }
    memcpy(o->buf + o->len, b, n);
    o->len += n;
}

static bool starter(const struct unit *u)
{
    return u->kind == UNIT_IGNORABLE || (u->kind == UNIT_CHAR && u->ccc == 0);
}

/* Emits the run of combining marks units[first..end) in canonical order, as the kernel's
 * reader does it: one pass to find the lowest class, then one pass per class, ascending.
 * Stray bytes inside the run are emitted by every pass that crosses them. */
static void put_run(struct output *o, const struct unit *units, int first, int end)
{
    for (int i = first + 1; i < end; i++)
        if (units[i].kind == UNIT_BYTE)
            put(o, &units[i]);
    for (int cls = 0;;) {
        int next = 256;
        for (int i = first; i < end; i++)
            if (units[i].kind == UNIT_CHAR && units[i].ccc > cls && units[i].ccc < next)
                next = units[i].ccc;
        if (next == 256)
            return;
        for (int i = first; i < end; i++)
            if (units[i].kind == UNIT_BYTE || units[i].ccc == next)
                put(o, &units[i]);
        cls = next;
    }
}

int casefold_fold(const uint8_t *name, size_t len, uint8_t *out)
{
    struct unit units[MAX_UNITS];
    int n = read_units(name, len, units);
    if (n < 0)
        return n;
    struct output o = {out, 0, false};
    for (int i = 0; i < n && !o.full;) {
        if (units[i].kind == UNIT_IGNORABLE) {
            i++;
        } else if (units[i].kind == UNIT_BYTE || units[i].ccc == 0) {
            put(&o, &units[i++]);
        } else {
            int end = i + 1;
            while (end < n && !starter(&units[end]))
                end++;
            put_run(&o, units, i, end);
            i = end;
        }
    }
    return o.full ? -EINVAL : (int)o.len;
}

/* ---- names in casefolded directories ---- */

int casefold_name_init(struct f2fuse *fs, const struct inode_info *dir, struct dir_name *dn)
{
    if (!fs->casefold) /* inode.c refuses the flag on an image without the feature */
        return fs_corrupt(fs, "directory %u is casefolded on an image without casefolding",
                          dir->ino);
    dn->casefolded = true;
    int n = casefold_fold(dn->name, dn->len, dn->folded_name);
    if (n > 0) { /* an empty fold does not count: the kernel treats it as a failure */
        dn->folded = true;
        dn->folded_len = (uint8_t)n;
        dn->hash = tea_hash(dn->folded_name, (size_t)n);
        return 0;
    }
    if (fs->casefold->strict)
        return -EINVAL;
    dn->hash = tea_hash(dn->name, dn->len);
    return 0;
}

bool casefold_same(const struct dir_name *dn, const uint8_t *stored, size_t len)
{
    uint8_t folded[CASEFOLD_MAX];
    int n = casefold_fold(stored, len, folded);
    return n == dn->folded_len && memcmp(folded, dn->folded_name, (size_t)n) == 0;
}

bool casefold_placed(struct f2fuse *fs, uint32_t hash, const uint8_t *stored, size_t len)
{
    uint8_t folded[CASEFOLD_MAX];
    int n = casefold_fold(stored, len, folded);
    if (n > 0)
        return hash == tea_hash(folded, (size_t)n);
    /* A strict directory finds no name that does not fold, wherever it sits. */
    return casefold_strict(fs) || hash == tea_hash(stored, len);
}

/* ---- the mount's encoding ---- */

int casefold_init(struct f2fuse *fs)
{
    if (!(fs->features & F2FS_FEATURE_CASEFOLD))
        return 0;
    uint16_t enc = le16(fs->sb.s_encoding), flags = le16(fs->sb.s_encoding_flags);
    if (enc != F2FS_ENC_UTF8_12_1) {
        log_err("the image's casefold encoding %u is unknown (f2fs defines only 1, UTF-8 "
                "12.1); the kernel refuses to mount it",
                enc);
        return -EINVAL;
    }
    if (!nfd()) {
        log_err("ICU's NFD data is not available: casefolded names cannot be folded");
        return -ENOTSUP;
    }
    struct casefold *cf = calloc(1, sizeof(*cf));
    if (!cf)
        return -ENOMEM;
    cf->strict = flags & F2FS_ENC_STRICT_MODE_FL;
    cf->scan_after_miss = !(flags & F2FS_ENC_NO_COMPAT_FALLBACK);
    pthread_mutex_init(&cf->lock, NULL);
    fs->casefold = cf;
    return 0;
}

void casefold_destroy(struct f2fuse *fs)
{
    struct casefold *cf = fs->casefold;
    if (!cf)
        return;
    pthread_mutex_destroy(&cf->lock);
    free(cf->clean);
    free(cf);
    fs->casefold = NULL;
}

bool casefold_strict(const struct f2fuse *fs)
{
    return fs->casefold && fs->casefold->strict;
}

static size_t slot_of(uint32_t ino, size_t slots)
{
    return (ino * 2654435761u) & (slots - 1);
}

bool casefold_needs_scan(struct f2fuse *fs, uint32_t dir_ino)
{
    struct casefold *cf = fs->casefold;
    if (!cf || !cf->scan_after_miss)
        return false;
    bool clean = false;
    pthread_mutex_lock(&cf->lock);
    for (size_t i = cf->clean_slots ? slot_of(dir_ino, cf->clean_slots) : 0;
         cf->clean_slots && cf->clean[i]; i = (i + 1) & (cf->clean_slots - 1)) {
        if (cf->clean[i] == dir_ino) {
            clean = true;
            break;
        }
    }
    pthread_mutex_unlock(&cf->lock);
    return !clean;
}

/* Puts ino into the set's slots; false when it was there already. */
static bool clean_insert(uint32_t *slots, size_t n, uint32_t ino)
{
    size_t i = slot_of(ino, n);
    while (slots[i] && slots[i] != ino)
        i = (i + 1) & (n - 1);
    bool added = !slots[i];
    slots[i] = ino;
    return added;
}

void casefold_scanned_clean(struct f2fuse *fs, uint32_t dir_ino)
{
    struct casefold *cf = fs->casefold;
    if (!cf || !casefold_needs_scan(fs, dir_ino))
        return;
    pthread_mutex_lock(&cf->lock);
    if ((cf->clean_count + 1) * 2 > cf->clean_slots) { /* keep it at most half full */
        size_t n = cf->clean_slots ? cf->clean_slots * 2 : 64;
        uint32_t *grown = calloc(n, sizeof(*grown));
        if (grown) { /* without memory the directory is scanned again next time */
            for (size_t i = 0; i < cf->clean_slots; i++)
                if (cf->clean[i])
                    clean_insert(grown, n, cf->clean[i]);
            free(cf->clean);
            cf->clean = grown;
            cf->clean_slots = n;
        }
    }
    if ((cf->clean_count + 1) * 2 <= cf->clean_slots &&
        clean_insert(cf->clean, cf->clean_slots, dir_ino))
        cf->clean_count++;
    pthread_mutex_unlock(&cf->lock);
}
