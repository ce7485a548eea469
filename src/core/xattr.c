/* Extended attributes: one list that starts in the inode's inline xattr area and continues
 * in the xattr node block.  POSIX ACLs are stored in f2fs's compact form and converted to
 * the kernel's xattr form on the way out. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/xattr.h"
#include "core/acl.h"
#include "core/context.h"
#include "core/data.h"
#include "core/fileattr.h"
#include "core/fsync.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/namei.h"
#include "core/node.h"
#include "core/space.h"

#define XATTR_ALIGN(n) (((n) + 3u) & ~3u)

struct xattr_prefix {
    uint8_t index;
    const char *prefix;
    bool whole_name; /* the ACL names carry no suffix on disk */
};

static const struct xattr_prefix prefixes[] = {
    {F2FS_XATTR_INDEX_USER, "user.", false},
    {F2FS_XATTR_INDEX_POSIX_ACL_ACCESS, "system.posix_acl_access", true},
    {F2FS_XATTR_INDEX_POSIX_ACL_DEFAULT, "system.posix_acl_default", true},
    {F2FS_XATTR_INDEX_TRUSTED, "trusted.", false},
    {F2FS_XATTR_INDEX_SECURITY, "security.", false},
};

static const struct xattr_prefix *prefix_of_index(uint8_t index)
{
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
        if (prefixes[i].index == index)
            return &prefixes[i];
    return NULL;
}

static bool is_acl_index(uint8_t index)
{
    return index == F2FS_XATTR_INDEX_POSIX_ACL_ACCESS ||
           index == F2FS_XATTR_INDEX_POSIX_ACL_DEFAULT;
}

/* The whole xattr list of an inode in one buffer; *len is its usable length. */
static int xattr_load(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      uint8_t **out, size_t *len)
{
    size_t inline_bytes = (ii->inline_flags & F2FS_INLINE_XATTR) ? ii->xattr_addrs * 4u : 0;
    size_t total = inline_bytes + (ii->xattr_nid ? XATTR_BLOCK_BODY : 0);
    *out = NULL;
    *len = 0;
    if (total < sizeof(struct f2fs_xattr_header))
        return 0;
    uint8_t *buf = fs_calloc(fs, 1, total + sizeof(uint32_t)); /* a zero word ends a full list */
    if (!buf)
        return -ENOMEM;
    memcpy(buf, (const uint8_t *)ipage->data + inline_xattr_offset(ii), inline_bytes);
    if (ii->xattr_nid) {
        struct page *xpage;
        int err = node_get(fs, ii->xattr_nid, ii->ino, &xpage);
        if (!err && le32(page_node(xpage)->footer.flag) >> OFFSET_BIT_SHIFT != XATTR_NODE_OFFSET) {
            pcache_put(fs->cache, xpage);
            err = fs_corrupt(fs, "inode %u: xattr node %u has the wrong node offset", ii->ino,
                             ii->xattr_nid);
        }
        if (err) {
            free(buf);
            return err;
        }
        memcpy(buf + inline_bytes, xpage->data, XATTR_BLOCK_BODY);
        pcache_put(fs->cache, xpage);
    }
    *out = buf;
    *len = total;
    return 0;
}

typedef int (*xattr_visit_fn)(void *arg, const struct f2fs_xattr_entry *e);

/* Calls visit for each entry; stops at the end marker, a non-zero return, or damage. */
static int xattr_walk(struct f2fuse *fs, uint32_t ino, const uint8_t *buf, size_t len,
                      xattr_visit_fn visit, void *arg)
{
    size_t pos = sizeof(struct f2fs_xattr_header);
    while (pos + sizeof(uint32_t) <= len) {
        uint32_t word;
        memcpy(&word, buf + pos, sizeof(word));
        if (word == 0)
            return 0;
        const struct f2fs_xattr_entry *e = (const void *)(buf + pos);
        size_t size = XATTR_ALIGN(sizeof(*e) + e->e_name_len + le16(e->e_value_size));
        if (pos + size > len)
            return fs_corrupt(fs, "inode %u: xattr entry at byte %zu runs past the list", ino, pos);
        int r = visit(arg, e);
        if (r)
            return r;
        pos += size;
    }
    return 0;
}

struct list_ctx {
    char *list;
    size_t size, used;
};

static int list_visit(void *arg, const struct f2fs_xattr_entry *e)
{
    struct list_ctx *c = arg;
    const struct xattr_prefix *p = prefix_of_index(e->e_name_index);
    if (!p)
        return 0; /* internal attributes (encryption, verity, ...) stay hidden */
    size_t plen = strlen(p->prefix), nlen = p->whole_name ? 0 : e->e_name_len;
    if (c->list && c->used + plen + nlen + 1 <= c->size) {
        memcpy(c->list + c->used, p->prefix, plen);
        memcpy(c->list + c->used + plen, e->e_name, nlen);
        c->list[c->used + plen + nlen] = '\0';
    }
    c->used += plen + nlen + 1;
    return 0;
}

ssize_t xattr_list(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, char *list,
                   size_t size)
{
    uint8_t *buf;
    size_t len;
    int err = xattr_load(fs, ii, ipage, &buf, &len);
    if (err)
        return err;
    struct list_ctx c = {size ? list : NULL, size, 0};
    err = buf ? xattr_walk(fs, ii->ino, buf, len, list_visit, &c) : 0;
    free(buf);
    if (err)
        return err;
    if (size && c.used > size)
        return -ERANGE;
    return (ssize_t)c.used;
}

struct get_ctx {
    uint8_t index;
    const char *name;
    size_t name_len;
    const struct f2fs_xattr_entry *found;
};

static int get_visit(void *arg, const struct f2fs_xattr_entry *e)
{
    struct get_ctx *c = arg;
    if (e->e_name_index == c->index && e->e_name_len == c->name_len &&
        memcmp(e->e_name, c->name, c->name_len) == 0) {
        c->found = e;
        return 1;
    }
    return 0;
}

/* Converts f2fs's ACL encoding to the posix_acl_xattr one; returns its size or -errno.
 * With out == NULL only the size is computed. */
static ssize_t acl_to_xattr(const uint8_t *v, size_t len, uint8_t *out, size_t size)
{
    if (len < sizeof(uint32_t))
        return -EIO;
    uint32_t version;
    memcpy(&version, v, sizeof(version));
    if (le32(version) != F2FS_ACL_VERSION)
        return -EIO;
    size_t need = sizeof(uint32_t), pos = sizeof(uint32_t);
    for (int pass = 0; pass < 2; pass++) {
        size_t wpos = sizeof(uint32_t);
        pos = sizeof(uint32_t);
        while (pos < len) {
            struct f2fs_acl_entry ent = {0};
            if (pos + sizeof(struct f2fs_acl_entry_short) > len)
                return -EIO;
            memcpy(&ent, v + pos, sizeof(struct f2fs_acl_entry_short));
            uint16_t tag = le16(ent.e_tag);
            uint32_t id = ACL_UNDEFINED_ID;
            if (tag == ACL_USER || tag == ACL_GROUP) {
                if (pos + sizeof(ent) > len)
                    return -EIO;
                memcpy(&ent, v + pos, sizeof(ent));
                id = le32(ent.e_id);
                pos += sizeof(ent);
            } else if (tag == ACL_USER_OBJ || tag == ACL_GROUP_OBJ || tag == ACL_MASK ||
                       tag == ACL_OTHER) {
                pos += sizeof(struct f2fs_acl_entry_short);
            } else {
                return -EIO;
            }
            if (pass == 0) {
                need += sizeof(struct f2fs_acl_entry);
            } else {
                struct f2fs_acl_entry x = {htole16(tag), ent.e_perm, htole32(id)};
                memcpy(out + wpos, &x, sizeof(x));
                wpos += sizeof(x);
            }
        }
        if (pass == 0) {
            if (!out)
                return (ssize_t)need;
            if (need > size)
                return -ERANGE;
            uint32_t hdr = htole32(ACL_XATTR_VERSION);
            memcpy(out, &hdr, sizeof(hdr));
        }
    }
    return (ssize_t)need;
}

/* Splits a full attribute name into its on-disk index and suffix (c->name stays NULL for
 * a namespace f2fs does not store). */
static void name_split(const char *name, struct get_ctx *c)
{
    for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]) && !c->name; i++) {
        size_t plen = strlen(prefixes[i].prefix);
        if (prefixes[i].whole_name ? strcmp(name, prefixes[i].prefix) == 0
                                   : strncmp(name, prefixes[i].prefix, plen) == 0) {
            c->index = prefixes[i].index;
            c->name = prefixes[i].whole_name ? "" : name + plen;
        }
    }
}

static ssize_t get_entry(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                         struct get_ctx c, void *value, size_t size)
{
    uint8_t *buf;
    size_t len;
    int err = xattr_load(fs, ii, ipage, &buf, &len);
    if (err)
        return err;
    if (!buf)
        return -ENODATA;
    ssize_t ret = xattr_walk(fs, ii->ino, buf, len, get_visit, &c);
    if (ret >= 0 && !c.found)
        ret = -ENODATA;
    if (ret >= 0) {
        const uint8_t *v = (const uint8_t *)c.found->e_name + c.found->e_name_len;
        size_t vlen = le16(c.found->e_value_size);
        if (is_acl_index(c.index)) {
            ret = acl_to_xattr(v, vlen, size ? value : NULL, size);
            if (ret == -EIO)
                ret = fs_corrupt(fs, "inode %u: damaged ACL", ii->ino);
        } else if (size && vlen > size) {
            ret = -ERANGE;
        } else {
            if (size)
                memcpy(value, v, vlen);
            ret = (ssize_t)vlen;
        }
    }
    free(buf);
    return ret;
}

ssize_t xattr_get(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                  const char *name, void *value, size_t size)
{
    struct get_ctx c = {0};
    name_split(name, &c);
    if (!c.name)
        return -ENODATA;
    c.name_len = strlen(c.name);
    if (c.name_len > F2FS_NAME_LEN)
        return -ERANGE;
    return get_entry(fs, ii, ipage, c, value, size);
}

ssize_t xattr_get_internal(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           uint8_t index, const char *name, void *value, size_t size)
{
    struct get_ctx c = {.index = index, .name = name, .name_len = strlen(name)};
    return get_entry(fs, ii, ipage, c, value, size);
}

/* ---- write side ---- */

/* Converts a posix_acl_xattr value to f2fs's compact ACL; returns its size or -EINVAL. */
static ssize_t xattr_to_acl(const uint8_t *v, size_t len, uint8_t *out)
{
    uint32_t version;
    if (len < sizeof(version) || (len - sizeof(version)) % sizeof(struct f2fs_acl_entry))
        return -EINVAL;
    memcpy(&version, v, sizeof(version));
    if (le32(version) != ACL_XATTR_VERSION)
        return -EINVAL;
    uint32_t f2fs_version = htole32(F2FS_ACL_VERSION);
    memcpy(out, &f2fs_version, sizeof(f2fs_version));
    size_t w = sizeof(uint32_t);
    for (size_t pos = sizeof(version); pos < len; pos += sizeof(struct f2fs_acl_entry)) {
        struct f2fs_acl_entry e;
        memcpy(&e, v + pos, sizeof(e));
        uint16_t tag = le16(e.e_tag);
        if (tag == ACL_USER || tag == ACL_GROUP) {
            memcpy(out + w, &e, sizeof(e));
            w += sizeof(e);
        } else if (tag == ACL_USER_OBJ || tag == ACL_GROUP_OBJ || tag == ACL_MASK ||
                   tag == ACL_OTHER) {
            struct f2fs_acl_entry_short s = {e.e_tag, e.e_perm};
            memcpy(out + w, &s, sizeof(s));
            w += sizeof(s);
        } else {
            return -EINVAL;
        }
    }
    return (ssize_t)w;
}

/* The permission bits an access ACL implies (posix_acl_equiv_mode / posix_acl_update_mode):
 * owner from USER_OBJ, group from MASK (else GROUP_OBJ), other from OTHER.  *plain is set
 * when the ACL says nothing a mode cannot say; it then need not be stored at all. */
static int acl_xattr_mode(const uint8_t *v, size_t len, uint16_t *mode, bool *plain)
{
    if (len < sizeof(uint32_t) || (len - sizeof(uint32_t)) % sizeof(struct f2fs_acl_entry))
        return -EINVAL;
    uint16_t user = 0, group = 0, mask = 0xffff, other = 0;
    *plain = true;
    for (size_t pos = sizeof(uint32_t); pos < len; pos += sizeof(struct f2fs_acl_entry)) {
        struct f2fs_acl_entry e;
        memcpy(&e, v + pos, sizeof(e));
        uint16_t perm = le16(e.e_perm) & 7;
        switch (le16(e.e_tag)) {
        case ACL_USER_OBJ: user = perm; break;
        case ACL_GROUP_OBJ: group = perm; break;
        case ACL_OTHER: other = perm; break;
        case ACL_MASK:
            mask = perm;
            *plain = false;
            break;
        case ACL_USER:
        case ACL_GROUP: *plain = false; break;
        default: return -EINVAL;
        }
    }
    *mode = (uint16_t)(user << 6 | (mask != 0xffff ? mask : group) << 3 | other);
    return 0;
}

struct rebuild_ctx {
    const struct get_ctx *skip; /* the entry being replaced or removed */
    uint8_t *out;
    size_t used, cap;
    bool overflow;
};

static int rebuild_visit(void *arg, const struct f2fs_xattr_entry *e)
{
    struct rebuild_ctx *c = arg;
    if (e->e_name_index == c->skip->index && e->e_name_len == c->skip->name_len &&
        memcmp(e->e_name, c->skip->name, c->skip->name_len) == 0)
        return 0;
    size_t size = XATTR_ALIGN(sizeof(*e) + e->e_name_len + le16(e->e_value_size));
    if (c->used + size > c->cap) {
        c->overflow = true;
        return 1;
    }
    memcpy(c->out + c->used, e, size);
    c->used += size;
    return 0;
}

/* An access ACL sets the permission bits, as on any file system with ACLs; *plain when it
 * says no more than the bits (then it is not stored). */
static int acl_set_mode(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                        const void *value, size_t size, bool *plain)
{
    uint16_t perms;
    int err = acl_xattr_mode(value, size, &perms, plain);
    if (err)
        return err;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    ri->i_mode = htole16((uint16_t)((le16(ri->i_mode) & ~0777u) | perms));
    ii->mode = le16(ri->i_mode);
    pcache_mark_dirty(fs->cache, ipage);
    return 0;
}

/* The value as stored: ACLs in f2fs's compact form (never larger than the xattr form),
 * then in *stored (to be freed) and *value; anything else as given. */
static int value_to_store(struct f2fuse *fs, const struct get_ctx *c, const void **value,
                          size_t size, uint8_t **stored, size_t *stored_len)
{
    *stored = NULL;
    *stored_len = size;
    if (*value && is_acl_index(c->index)) {
        *stored = fs_malloc(fs, size + sizeof(uint32_t));
        if (!*stored)
            return -ENOMEM;
        ssize_t n = xattr_to_acl(*value, size, *stored);
        if (n < 0) {
            free(*stored);
            *stored = NULL;
            return (int)n;
        }
        *stored_len = (size_t)n;
        *value = *stored;
    }
    if (*stored_len > UINT16_MAX) {
        free(*stored);
        *stored = NULL;
        return -E2BIG;
    }
    return 0;
}

/* Writes into buf (room for cap bytes and a zero word) the new list: the header, every
 * entry but c's, then c's with value when there is one; *used is its length.  flags are
 * setxattr's (create only, replace only). */
static int list_rebuild(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                        const struct get_ctx *c, const void *value, size_t value_len, int flags,
                        uint8_t *buf, size_t cap, size_t *used)
{
    uint8_t *old;
    size_t old_len;
    int err = xattr_load(fs, ii, ipage, &old, &old_len);
    if (err)
        return err;
    struct get_ctx found = *c;
    bool exists = old && xattr_walk(fs, ii->ino, old, old_len, get_visit, &found) == 1;
    if ((flags & XATTR_CREATE_FLAG) && exists)
        err = -EEXIST;
    else if (((flags & XATTR_REPLACE_FLAG) || !value) && !exists)
        err = -ENODATA;
    struct rebuild_ctx r = {c, buf, sizeof(struct f2fs_xattr_header), cap, false};
    if (!err && old)
        err = xattr_walk(fs, ii->ino, old, old_len, rebuild_visit, &r);
    if (!err && value) {
        size_t esize = XATTR_ALIGN(sizeof(struct f2fs_xattr_entry) + c->name_len + value_len);
        if (r.overflow || r.used + esize > r.cap) {
            err = -E2BIG; /* as f2fs: the list would outgrow the inode and its xattr node */
        } else {
            struct f2fs_xattr_entry *e = (void *)(buf + r.used);
            e->e_name_index = c->index;
            e->e_name_len = (uint8_t)c->name_len;
            e->e_value_size = htole16((uint16_t)value_len);
            memcpy(e->e_name, c->name, c->name_len);
            memcpy(e->e_name + c->name_len, value, value_len);
            r.used += esize;
        }
    }
    free(old);
    *used = r.used;
    return err;
}

/* Copies what does not fit inline into the inode's xattr node, made when there is none. */
static int xattr_node_fill(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                           const uint8_t *rest)
{
    struct page *xpage;
    int err;
    if (ii->xattr_nid) {
        err = node_get(fs, ii->xattr_nid, ii->ino, &xpage);
    } else {
        /* charged by list_store before anything changed */
        err = node_new(fs, ii->ino, 0, XATTR_NODE_OFFSET, !S_ISDIR(ii->mode), NULL, &xpage);
        if (!err) {
            ii->xattr_nid = le32(page_node(xpage)->footer.nid);
            page_node(ipage)->i.i_xattr_nid = htole32(ii->xattr_nid);
        } else {
            inode_add_blocks(fs, ipage, -1);
        }
    }
    if (!err) {
        memcpy(xpage->data, rest, XATTR_BLOCK_BODY);
        pcache_mark_dirty(fs->cache, xpage);
        pcache_put(fs->cache, xpage);
    }
    return err;
}

/* Puts the new list (used bytes of buf) in place: the inline part first; the xattr node
 * holds the rest, and goes when not needed. */
static int list_store(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint8_t *buf,
                      size_t used, size_t inline_bytes)
{
    struct f2fs_xattr_header *h = (void *)buf;
    h->h_magic = htole32(F2FS_XATTR_MAGIC);
    h->h_refcount = htole32(1);
    bool empty = used == sizeof(*h);

    struct f2fs_inode *ri = &page_node(ipage)->i;
    bool need_node = used + sizeof(uint32_t) > inline_bytes && !empty;
    /* A new xattr node is charged first: over quota (-EDQUOT) the list stays as it was. */
    int err = need_node && !ii->xattr_nid ? inode_alloc_blocks(fs, ipage, 1) : 0;
    if (err)
        return err;
    memcpy((uint8_t *)ipage->data + inline_xattr_offset(ii), buf, inline_bytes);
    if (need_node) {
        err = xattr_node_fill(fs, ii, ipage, buf + inline_bytes);
    } else if (ii->xattr_nid) {
        err = node_free(fs, ii->xattr_nid, ii->ino);
        if (!err) {
            ii->xattr_nid = 0;
            ri->i_xattr_nid = 0;
            inode_add_blocks(fs, ipage, -1);
        }
    }
    if (!err && empty && inline_bytes)
        memset((uint8_t *)ipage->data + inline_xattr_offset(ii), 0, inline_bytes);
    pcache_mark_dirty(fs->cache, ipage);
    return err;
}

static int set_entry(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, struct get_ctx c,
                     const void *value, size_t size, int flags);

int xattr_set(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, const char *name,
              const void *value, size_t size, int flags)
{
    struct get_ctx c = {0};
    name_split(name, &c);
    if (!c.name)
        return -EOPNOTSUPP;
    c.name_len = strlen(c.name);
    if (c.name_len > F2FS_NAME_LEN || (c.name_len == 0 && !is_acl_index(c.index)))
        return c.name_len ? -ERANGE : -EINVAL;
    if (value && c.index == F2FS_XATTR_INDEX_POSIX_ACL_ACCESS) {
        bool plain;
        int err = acl_set_mode(fs, ii, ipage, value, size, &plain);
        if (err)
            return err;
        if (plain) {
            err = xattr_set(fs, ii, ipage, name, NULL, 0, 0);
            return err == -ENODATA ? 0 : err;
        }
    }
    return set_entry(fs, ii, ipage, c, value, size, flags);
}

int xattr_set_internal(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint8_t index,
                       const char *name, const void *value, size_t size, int flags)
{
    struct get_ctx c = {.index = index, .name = name, .name_len = strlen(name)};
    return set_entry(fs, ii, ipage, c, value, size, flags);
}

/* xattr_set once the name is split: the list rebuilt with c's entry replaced. */
static int set_entry(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, struct get_ctx c,
                     const void *value, size_t size, int flags)
{
    uint8_t *stored;
    size_t stored_len;
    int err = value_to_store(fs, &c, &value, size, &stored, &stored_len);
    if (err)
        return err;

    /* The new list: the header, every other entry, the new one, a zero word. */
    size_t inline_bytes = (ii->inline_flags & F2FS_INLINE_XATTR) ? ii->xattr_addrs * 4u : 0;
    size_t capacity = inline_bytes + XATTR_BLOCK_BODY;
    uint8_t *buf = fs_calloc(fs, 1, capacity + sizeof(uint32_t));
    size_t used = 0;
    err = buf ? list_rebuild(fs, ii, ipage, &c, value, stored_len, flags, buf,
                             capacity - sizeof(uint32_t), &used)
              : -ENOMEM;
    free(stored);
    if (!err)
        err = list_store(fs, ii, ipage, buf, used, inline_bytes);
    free(buf);
    return err;
}

/* No attribute at all: no xattr node and an empty inline list (checked on every write, so
 * without loading anything). */
static bool xattr_none(const struct inode_info *ii, const struct page *ipage)
{
    if (ii->xattr_nid)
        return false;
    size_t inline_bytes = (ii->inline_flags & F2FS_INLINE_XATTR) ? ii->xattr_addrs * 4u : 0;
    if (inline_bytes < sizeof(struct f2fs_xattr_header) + sizeof(uint32_t))
        return true;
    uint32_t first;
    memcpy(&first,
           (const uint8_t *)ipage->data + inline_xattr_offset(ii) +
               sizeof(struct f2fs_xattr_header),
           sizeof(first));
    return first == 0;
}

int xattr_drop_capability(struct f2fuse *fs, struct inode_info *ii, struct page *ipage)
{
    if (xattr_none(ii, ipage))
        return 0;
    int err = xattr_set(fs, ii, ipage, "security.capability", NULL, 0, 0);
    if (err == -ENODATA)
        return 0;
    if (err)
        return err;
    fsync_needs_checkpoint(fs, ii->ino); /* as any xattr change (roll-forward replays none) */
    return 1;
}

/* setxattr/removexattr: the whole operation, as file.c's are. */
int xattr_change(struct f2fuse *fs, uint32_t ino, const char *name, const void *value, size_t size,
                 int flags)
{
    int err = fs_writable(fs);
    if (!err)
        err = space_reserve(fs, 2);
    if (err)
        return err;
    op_change_begin(fs, ino);
    struct page *page;
    struct inode_info ii;
    err = inode_get(fs, ino, &page, &ii);
    if (!err) {
        err = fileattr_may_change(&ii); /* fileattr.c: immutable, append-only */
        if (!err)
            err = xattr_set(fs, &ii, page, name, value, size, flags);
        fsync_needs_checkpoint(fs, ino);
        if (!err) {
            inode_touch(page, false, true);
            pcache_mark_dirty(fs->cache, page);
        }
        pcache_put(fs->cache, page);
    }
    op_change_end(fs, ino);
    space_after_change(fs);
    return err;
}
