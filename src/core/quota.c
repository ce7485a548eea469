/* Quota: the usage of every user, group and project, as the kernel's dquot.c keeps it on an
 * image with the quota feature, and the limits the quota files carry.
 *
 * What counts (fs/f2fs: dquot_reserve_block/claim on every block i_blocks counts, the
 * inode block itself excepted; dquot_alloc_inode per inode; fsck.f2fs's
 * quota_add_inode_usage agrees: (i_blocks - 1) * 4096 and one inode): data blocks, reserved
 * (NEW_ADDR) blocks, direct/indirect nodes and the xattr node; not inline data or inline
 * xattrs; not the quota files themselves (the kernel's S_NOQUOTA; mkfs leaves them out).
 * An unlinked file still open is charged until it is freed, as fsck counts orphans.
 *
 * The files are read whole at mount (checked as hostile input: a damaged tree refuses the
 * read-write mount) into memory.  Every change of usage updates one entry per type in a
 * hash table; a checkpoint (cp_lock exclusive, nothing else running) puts the changed entries
 * into the in-memory files - new ids get tree entries, ids left with nothing and no limits
 * lose theirs (qtree_release_dquot) - and the changed 4 KiB pages into the quota inodes'
 * data pages, which the same checkpoint writes out of place: a crash leaves the old
 * checkpoint with its old quota blocks, or the new one with the new. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/quota.h"
#include "core/context.h"
#include "core/data.h"
#include "core/fileattr.h"
#include "core/inode.h"
#include "core/namei.h"
#include "core/nat.h"
#include "core/node.h"
#include "util/log.h"

/* The files are held in memory: a larger one (some 700,000 ids) is refused. */
#define QUOTA_FILE_MAX (64u << 20)

static const char *const type_names[QUOTA_TYPES] = {"usr", "grp", "prj"};
static const char *const type_words[QUOTA_TYPES] = {"user", "group", "project"};

struct dquot {
    struct dquot *next; /* hash chain */
    uint32_t id;
    uint8_t type;
    bool dirty;   /* changed since the last flush */
    uint32_t off; /* its entry's offset in the quota file, 0 = none yet */
    uint64_t space, inodes;
    uint64_t bhard, bsoft, ihard, isoft; /* bytes / inodes, 0 = none */
    uint64_t btime, itime;
};

struct quota {
    pthread_mutex_t lock; /* internal tier: taken last, held for memory work only */
    unsigned types;       /* 1 << type for each quota file the image has */
    unsigned binding;     /* 1 << type for each type whose limits bind */
    uint32_t ino[QUOTA_TYPES];
    struct qfile file[QUOTA_TYPES];
    struct dquot **table;
    size_t buckets, count;
    uint64_t dirty; /* dquots changed since the last flush */
    bool repair;    /* usage could not be kept: checkpoints ask fsck to repair it */
    atomic_uint_fast64_t edquot, flushes, pages, added, removed;
};

static __thread uint32_t caller_uid = F2FUSE_CALLER_NONE;

void quota_set_caller(uint32_t uid)
{
    caller_uid = uid;
}

static bool caller_bound(void)
{
    return caller_uid != F2FUSE_CALLER_NONE && caller_uid != 0;
}

static uint64_t now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec;
}

/* ---- the table ---- */

static size_t bucket_of(const struct quota *q, unsigned type, uint32_t id)
{
    uint64_t k = ((uint64_t)type << 32 | id) * 0x9E3779B97F4A7C15ull;
    return (size_t)(k >> 32) & (q->buckets - 1);
}

static int grow(struct quota *q)
{
    size_t n = q->buckets ? q->buckets * 2 : 256;
    struct dquot **t = calloc(n, sizeof(*t));
    if (!t)
        return -ENOMEM;
    struct dquot **old = q->table;
    size_t old_n = q->buckets;
    q->table = t;
    q->buckets = n;
    for (size_t b = 0; b < old_n; b++) {
        while (old[b]) {
            struct dquot *d = old[b];
            old[b] = d->next;
            size_t nb = bucket_of(q, d->type, d->id);
            d->next = t[nb];
            t[nb] = d;
        }
    }
    free(old);
    return 0;
}

/* The dquot of (type, id), made (empty) when create and absent; NULL when absent or
 * without memory.  Called with q->lock held. */
static struct dquot *dquot_get(struct quota *q, unsigned type, uint32_t id, bool create)
{
    if (q->buckets) {
        for (struct dquot *d = q->table[bucket_of(q, type, id)]; d; d = d->next)
            if (d->id == id && d->type == type)
                return d;
    }
    if (!create)
        return NULL;
    if ((q->count + 1 > 2 * q->buckets) && grow(q))
        return NULL;
    struct dquot *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->id = id;
    d->type = (uint8_t)type;
    size_t b = bucket_of(q, type, id);
    d->next = q->table[b];
    q->table[b] = d;
    q->count++;
    return d;
}

static void mark_dirty(struct quota *q, struct dquot *d)
{
    if (!d->dirty) {
        d->dirty = true;
        q->dirty++;
    }
}

static bool has_limits(const struct dquot *d)
{
    return d->bhard || d->bsoft || d->ihard || d->isoft;
}

/* ---- the kernel's checks (dquot.c check_bdq, check_idq) ---- */

static uint32_t grace(const struct quota *q, unsigned type, bool blocks)
{
    const struct qfile *qf = &q->file[type];
    return blocks ? qfile_bgrace(qf) : qfile_igrace(qf);
}

/* May usage grow to total?  *start_grace: it crosses the soft limit now. */
static int check_limit(const struct quota *q, const struct dquot *d, uint64_t total, uint64_t hard,
                       uint64_t soft, uint64_t since, bool *start_grace)
{
    *start_grace = false;
    if (!(q->binding & (1u << d->type)) || !has_limits(d))
        return 0;
    bool bound = caller_bound();
    if (hard && total > hard && bound)
        return -EDQUOT;
    if (soft && total > soft && since && now_s() >= since && bound)
        return -EDQUOT;
    *start_grace = soft && total > soft && since == 0;
    return 0;
}

static int check_space(const struct quota *q, const struct dquot *d, uint64_t bytes, bool *grace_b)
{
    return check_limit(q, d, d->space + bytes, d->bhard, d->bsoft, d->btime, grace_b);
}

static int check_inodes(const struct quota *q, const struct dquot *d, uint64_t n, bool *grace_i)
{
    return check_limit(q, d, d->inodes + n, d->ihard, d->isoft, d->itime, grace_i);
}

static void add_space(struct quota *q, struct dquot *d, uint64_t bytes, bool start_grace)
{
    d->space += bytes;
    if (start_grace)
        d->btime = now_s() + grace(q, d->type, true);
    mark_dirty(q, d);
}

static void sub_space(struct quota *q, struct dquot *d, uint64_t bytes)
{
    d->space = d->space >= bytes ? d->space - bytes : 0;
    if (d->space <= d->bsoft)
        d->btime = 0;
    mark_dirty(q, d);
}

static void add_inodes(struct quota *q, struct dquot *d, uint64_t n, bool start_grace)
{
    d->inodes += n;
    if (start_grace)
        d->itime = now_s() + grace(q, d->type, false);
    mark_dirty(q, d);
}

static void sub_inodes(struct quota *q, struct dquot *d, uint64_t n)
{
    d->inodes = d->inodes >= n ? d->inodes - n : 0;
    if (d->inodes <= d->isoft)
        d->itime = 0;
    mark_dirty(q, d);
}

/* ---- ids ---- */

bool quota_is_file(const struct f2fuse *fs, uint32_t ino)
{
    const struct quota *q = fs->quota;
    for (unsigned t = 0; q && t < QUOTA_TYPES; t++)
        if ((q->types & (1u << t)) && q->ino[t] == ino)
            return true;
    return false;
}

void quota_ids_of(const struct f2fuse *fs, const struct f2fs_inode *ri, struct quota_ids *ids)
{
    ids->id[QUOTA_USR] = le32(ri->i_uid);
    ids->id[QUOTA_GRP] = le32(ri->i_gid);
    ids->id[QUOTA_PRJ] = fileattr_projid(fs, ri);
}

/* The dquots of ids, made when absent: false without memory (then some may be NULL). */
static bool get_all(struct quota *q, const struct quota_ids *ids, struct dquot *d[QUOTA_TYPES])
{
    bool ok = true;
    for (unsigned t = 0; t < QUOTA_TYPES; t++) {
        d[t] = NULL;
        if (q->types & (1u << t)) {
            d[t] = dquot_get(q, t, ids->id[t], true);
            ok = ok && d[t];
        }
    }
    return ok;
}

/* The quota and the ids of the inode in ipage, or NULL when it is charged to nobody. */
static struct quota *charged(struct f2fuse *fs, struct page *ipage, struct quota_ids *ids)
{
    struct quota *q = fs->quota;
    if (!q)
        return NULL;
    const struct f2fs_node *n = page_node(ipage);
    if (quota_is_file(fs, le32(n->footer.ino)))
        return NULL;
    quota_ids_of(fs, &n->i, ids);
    return q;
}

static void lost(struct quota *q)
{
    if (!q->repair)
        log_err("quota: out of memory, usage can no longer be kept exact; checkpoints ask "
                "fsck.f2fs to repair the quota files");
    q->repair = true;
}

int quota_alloc_blocks(struct f2fuse *fs, struct page *ipage, uint64_t blocks)
{
    struct quota_ids ids;
    struct quota *q = charged(fs, ipage, &ids);
    if (!q || !blocks)
        return 0;
    uint64_t bytes = blocks * F2FS_BLKSIZE;
    struct dquot *d[QUOTA_TYPES];
    bool grace_b[QUOTA_TYPES] = {false};
    pthread_mutex_lock(&q->lock);
    int err = get_all(q, &ids, d) ? 0 : -ENOMEM;
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++)
        if (d[t])
            err = check_space(q, d[t], bytes, &grace_b[t]);
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++)
        if (d[t])
            add_space(q, d[t], bytes, grace_b[t]);
    pthread_mutex_unlock(&q->lock);
    if (err == -EDQUOT)
        atomic_fetch_add(&q->edquot, 1);
    return err;
}

void quota_add_blocks(struct f2fuse *fs, struct page *ipage, int64_t blocks)
{
    struct quota_ids ids;
    struct quota *q = charged(fs, ipage, &ids);
    if (!q || !blocks)
        return;
    uint64_t bytes = (uint64_t)(blocks < 0 ? -blocks : blocks) * F2FS_BLKSIZE;
    struct dquot *d[QUOTA_TYPES];
    pthread_mutex_lock(&q->lock);
    if (!get_all(q, &ids, d))
        lost(q);
    for (unsigned t = 0; t < QUOTA_TYPES; t++) {
        if (!d[t])
            continue;
        if (blocks < 0) {
            sub_space(q, d[t], bytes);
        } else {
            bool start_grace; /* a charge the kernel never refuses still starts a grace time */
            check_space(q, d[t], bytes, &start_grace);
            add_space(q, d[t], bytes, start_grace);
        }
    }
    pthread_mutex_unlock(&q->lock);
}

int quota_alloc_inode(struct f2fuse *fs, const struct quota_ids *ids)
{
    struct quota *q = fs->quota;
    if (!q)
        return 0;
    struct dquot *d[QUOTA_TYPES];
    bool grace_i[QUOTA_TYPES] = {false};
    pthread_mutex_lock(&q->lock);
    int err = get_all(q, ids, d) ? 0 : -ENOMEM;
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++)
        if (d[t])
            err = check_inodes(q, d[t], 1, &grace_i[t]);
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++)
        if (d[t])
            add_inodes(q, d[t], 1, grace_i[t]);
    pthread_mutex_unlock(&q->lock);
    if (err == -EDQUOT)
        atomic_fetch_add(&q->edquot, 1);
    return err;
}

void quota_release_inode(struct f2fuse *fs, const struct quota_ids *ids)
{
    struct quota *q = fs->quota;
    if (!q)
        return;
    struct dquot *d[QUOTA_TYPES];
    pthread_mutex_lock(&q->lock);
    if (!get_all(q, ids, d))
        lost(q);
    for (unsigned t = 0; t < QUOTA_TYPES; t++)
        if (d[t])
            sub_inodes(q, d[t], 1);
    pthread_mutex_unlock(&q->lock);
}

void quota_free_inode(struct f2fuse *fs, struct page *ipage)
{
    struct quota_ids ids;
    struct quota *q = charged(fs, ipage, &ids);
    if (!q)
        return;
    uint64_t blocks = le64(page_node(ipage)->i.i_blocks);
    uint64_t bytes = blocks > 1 ? (blocks - 1) * F2FS_BLKSIZE : 0;
    struct dquot *d[QUOTA_TYPES];
    pthread_mutex_lock(&q->lock);
    if (!get_all(q, &ids, d))
        lost(q);
    for (unsigned t = 0; t < QUOTA_TYPES; t++) {
        if (d[t]) {
            sub_space(q, d[t], bytes);
            sub_inodes(q, d[t], 1);
        }
    }
    pthread_mutex_unlock(&q->lock);
}

int quota_transfer(struct f2fuse *fs, struct page *ipage, const struct quota_ids *to)
{
    struct quota_ids from;
    struct quota *q = charged(fs, ipage, &from);
    if (!q)
        return 0;
    uint64_t blocks = le64(page_node(ipage)->i.i_blocks);
    uint64_t bytes = blocks > 1 ? (blocks - 1) * F2FS_BLKSIZE : 0;
    struct dquot *src[QUOTA_TYPES], *dst[QUOTA_TYPES];
    bool grace_b[QUOTA_TYPES] = {false}, grace_i[QUOTA_TYPES] = {false};
    pthread_mutex_lock(&q->lock);
    int err = get_all(q, &from, src) && get_all(q, to, dst) ? 0 : -ENOMEM;
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++) {
        if (!dst[t] || from.id[t] == to->id[t])
            continue;
        err = check_inodes(q, dst[t], 1, &grace_i[t]);
        if (!err)
            err = check_space(q, dst[t], bytes, &grace_b[t]);
    }
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++) {
        if (!dst[t] || from.id[t] == to->id[t])
            continue;
        sub_inodes(q, src[t], 1);
        sub_space(q, src[t], bytes);
        add_inodes(q, dst[t], 1, grace_i[t]);
        add_space(q, dst[t], bytes, grace_b[t]);
    }
    pthread_mutex_unlock(&q->lock);
    if (err == -EDQUOT)
        atomic_fetch_add(&q->edquot, 1);
    return err;
}

bool quota_needs_repair(const struct f2fuse *fs)
{
    return fs->quota && fs->quota->repair;
}

/* ---- reading the files ---- */

struct load_ctx {
    struct quota *q;
    unsigned type;
};

static int take_entry(void *arg, const struct qentry *e, uint32_t off)
{
    struct load_ctx *c = arg;
    struct dquot *d = dquot_get(c->q, c->type, e->id, false);
    if (d)
        return -EUCLEAN; /* two entries for one id */
    d = dquot_get(c->q, c->type, e->id, true);
    if (!d)
        return -ENOMEM;
    d->off = off;
    d->space = e->space;
    d->inodes = e->inodes;
    d->bhard = e->bhard * QUOTA_LIMIT_UNIT;
    d->bsoft = e->bsoft * QUOTA_LIMIT_UNIT;
    d->ihard = e->ihard;
    d->isoft = e->isoft;
    d->btime = e->btime;
    d->itime = e->itime;
    return 0;
}

/* Reads quota file type (inode ino) whole and takes its entries into q. */
static int load_file(struct f2fuse *fs, struct quota *q, unsigned type, uint32_t ino)
{
    struct page *ipage;
    struct inode_info ii;
    char why[160] = "";
    int err = inode_get(fs, ino, &ipage, &ii);
    if (err) {
        log_err("corrupt image: the %s quota file (inode %u) cannot be read: %s", type_words[type],
                ino, strerror(-err));
        return -EUCLEAN;
    }
    uint8_t *buf = NULL;
    size_t size = (ii.size + QUOTA_BLKSIZE - 1) / QUOTA_BLKSIZE * QUOTA_BLKSIZE;
    if (!S_ISREG(ii.mode) || (ii.inline_flags & F2FS_INLINE_DATA)) {
        err = -EUCLEAN;
        snprintf(why, sizeof(why), "it is not a regular file with data blocks (mode 0%o)", ii.mode);
    } else if (ii.size > QUOTA_FILE_MAX) {
        err = -EUCLEAN;
        snprintf(why, sizeof(why), "its size %llu is over the %u MiB f2fuse keeps in memory",
                 (unsigned long long)ii.size, QUOTA_FILE_MAX >> 20);
    } else if (!(buf = calloc(1, size ? size : 1))) {
        err = -ENOMEM;
    } else {
        ssize_t n = data_read(fs, &ii, ipage, buf, ii.size, 0);
        err = n < 0 ? (int)n : (uint64_t)n != ii.size ? -EIO : 0;
    }
    pcache_put(fs->cache, ipage);
    if (!err)
        err = qfile_open(&q->file[type], type, buf, size, why, sizeof(why));
    else
        free(buf);
    struct load_ctx c = {q, type};
    if (!err)
        err = qfile_scan(&q->file[type], take_entry, &c, why, sizeof(why));
    if (err == -EUCLEAN)
        fs_corrupt(fs, "the %s quota file (inode %u) is damaged: %s", type_words[type], ino, why);
    else if (err)
        log_err("the %s quota file (inode %u) cannot be read: %s", type_words[type], ino,
                strerror(-err));
    return err == -EIO ? -EUCLEAN : err;
}

static void quota_free(struct quota *q)
{
    for (size_t b = 0; b < q->buckets; b++) {
        while (q->table[b]) {
            struct dquot *d = q->table[b];
            q->table[b] = d->next;
            free(d);
        }
    }
    free(q->table);
    for (unsigned t = 0; t < QUOTA_TYPES; t++)
        qfile_close(&q->file[t]);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

/* Reads every quota file the image has; NULL in *out when it has none. */
static int quota_read(struct f2fuse *fs, struct quota **out)
{
    *out = NULL;
    if (!(fs->features & F2FS_FEATURE_QUOTA_INO))
        return 0;
    struct quota *q = calloc(1, sizeof(*q));
    if (!q)
        return -ENOMEM;
    pthread_mutex_init(&q->lock, NULL);
    int err = grow(q);
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++) {
        uint32_t ino = le32(fs->sb.qf_ino[t]);
        if (!ino)
            continue;
        if (!nid_valid(fs, ino) || ino == fs->root_ino) {
            err = fs_corrupt(fs, "the superblock names inode %u as the %s quota file", ino,
                             type_words[t]);
            err = -EUCLEAN;
            break;
        }
        q->ino[t] = ino;
        q->types |= 1u << t;
        err = load_file(fs, q, t, ino);
    }
    if (err) {
        quota_free(q);
        return err;
    }
    *out = q;
    return 0;
}

int quota_load(struct f2fuse *fs)
{
    struct quota *q;
    int err = quota_read(fs, &q);
    if (err)
        return err;
    if (!q)
        return 0;
    unsigned chosen = fs->opts.quota_limits;
    q->binding = (chosen & QUOTA_LIMITS_CHOSEN) ? chosen & 7u : 7u;
    if ((chosen & (1u << QUOTA_PRJ)) && !(q->types & (1u << QUOTA_PRJ))) {
        log_err("prjquota: the image has no project quota file (mkfs.f2fs -O project_quota)");
        quota_free(q);
        return -EINVAL;
    }
    fs->quota = q;
    return 0;
}

void quota_destroy(struct f2fuse *fs)
{
    if (fs->quota)
        quota_free(fs->quota);
    fs->quota = NULL;
}

/* ---- counting afresh ---- */

int quota_recount(struct f2fuse *fs)
{
    struct quota *q = fs->quota;
    if (!q)
        return 0;
    pthread_mutex_lock(&q->lock);
    for (size_t b = 0; b < q->buckets; b++) {
        for (struct dquot *d = q->table[b]; d; d = d->next) {
            d->space = d->inodes = 0;
            mark_dirty(q, d);
        }
    }
    pthread_mutex_unlock(&q->lock);
    int err = 0;
    for (uint32_t nid = F2FS_RESERVED_NODE_NUM; nid < fs->max_nid && !err; nid++) {
        struct f2fs_nat_entry ne;
        err = nat_get(fs->nat, nid, &ne);
        if (err || le32(ne.ino) != nid || le32(ne.block_addr) == NULL_ADDR ||
            quota_is_file(fs, nid))
            continue;
        struct page *ipage;
        struct inode_info ii;
        err = inode_get(fs, nid, &ipage, &ii);
        if (err)
            break;
        struct quota_ids ids;
        quota_ids_of(fs, &page_node(ipage)->i, &ids);
        uint64_t blocks = le64(page_node(ipage)->i.i_blocks);
        struct dquot *d[QUOTA_TYPES];
        pthread_mutex_lock(&q->lock);
        if (!get_all(q, &ids, d))
            err = -ENOMEM;
        for (unsigned t = 0; t < QUOTA_TYPES && !err; t++) {
            if (d[t]) {
                d[t]->space += blocks > 1 ? (blocks - 1) * F2FS_BLKSIZE : 0;
                d[t]->inodes++;
                mark_dirty(q, d[t]);
            }
        }
        pthread_mutex_unlock(&q->lock);
        pcache_put(fs->cache, ipage);
    }
    /* grace periods of usage now back under its soft limits end, as the kernel's do */
    pthread_mutex_lock(&q->lock);
    for (size_t b = 0; b < q->buckets; b++) {
        for (struct dquot *d = q->table[b]; d; d = d->next) {
            if (d->space <= d->bsoft)
                d->btime = 0;
            if (d->inodes <= d->isoft)
                d->itime = 0;
        }
    }
    pthread_mutex_unlock(&q->lock);
    if (err)
        log_err("quota: counting usage after recovery failed: %s", strerror(-err));
    return err;
}

/* ---- writing the files ---- */

static struct qentry entry_of(const struct dquot *d)
{
    return (struct qentry){.id = d->id,
                           .ihard = d->ihard,
                           .isoft = d->isoft,
                           .inodes = d->inodes,
                           .bhard = d->bhard / QUOTA_LIMIT_UNIT,
                           .bsoft = d->bsoft / QUOTA_LIMIT_UNIT,
                           .space = d->space,
                           .btime = d->btime,
                           .itime = d->itime};
}

/* One changed dquot into its file.  Returns 1 when it is to be dropped from the table. */
static int put_dquot(struct f2fuse *fs, struct quota *q, struct dquot *d)
{
    struct qfile *qf = &q->file[d->type];
    int err = 0;
    if (!d->space && !d->inodes && !has_limits(d)) {
        if (d->off)
            err = qfile_delete(qf, d->id, d->off);
        if (!err && d->off)
            atomic_fetch_add(&q->removed, 1);
        if (!err)
            return 1;
    } else {
        if (!d->off) {
            err = qfile_insert(qf, d->id, &d->off);
            if (!err)
                atomic_fetch_add(&q->added, 1);
        }
        if (!err) {
            struct qentry e = entry_of(d);
            qfile_put_entry(qf, d->off, &e);
        }
    }
    if (err == -ENOMEM)
        return err;
    if (err) {
        fs_corrupt(fs, "the %s quota file's tree does not hold id %u where it should",
                   type_words[d->type], d->id);
        q->repair = true;
    }
    return 0;
}

/* The changed 4 KiB pages of quota file type into its inode's data pages (written by the
 * checkpoint under way), and its size when it grew. */
static int write_pages(struct f2fuse *fs, struct quota *q, unsigned type)
{
    struct qfile *qf = &q->file[type];
    if (!qf->dirty_pages)
        return 0;
    struct page *ipage;
    struct inode_info ii;
    int err = inode_get(fs, q->ino[type], &ipage, &ii);
    if (err)
        return err;
    uint32_t p = UINT32_MAX;
    while (!err && qfile_next_dirty(qf, &p)) {
        struct page *page;
        err = data_get_page(fs, &ii, ipage, p, false, &page);
        if (err)
            break;
        memcpy(page->data, qf->data + (size_t)p * F2FS_BLKSIZE, F2FS_BLKSIZE);
        page->checkpoint_data = true; /* with the checkpoint, as the kernel's quota sync */
        pcache_put_dirty(fs->cache, page);
        atomic_fetch_add(&q->pages, 1);
    }
    uint64_t size = (uint64_t)qf->blocks * QUOTA_BLKSIZE;
    if (!err && size > ii.size)
        page_node(ipage)->i.i_size = htole64(size);
    if (!err) {
        inode_touch(ipage, true, true); /* as f2fs_quota_write */
        pcache_mark_dirty(fs->cache, ipage);
        qfile_clean(qf);
    }
    pcache_put(fs->cache, ipage);
    return err;
}

int quota_flush(struct f2fuse *fs)
{
    struct quota *q = fs->quota;
    if (!q)
        return 0;
    int err = 0;
    pthread_mutex_lock(&q->lock);
    for (size_t b = 0; q->dirty && b < q->buckets && !err; b++) {
        struct dquot **pp = &q->table[b];
        while (*pp && !err) {
            struct dquot *d = *pp;
            int r = d->dirty ? put_dquot(fs, q, d) : 0;
            if (r < 0) {
                err = r;
                break;
            }
            d->dirty = false;
            if (r == 1) {
                *pp = d->next;
                q->count--;
                free(d);
            } else {
                pp = &d->next;
            }
        }
    }
    if (!err)
        q->dirty = 0;
    pthread_mutex_unlock(&q->lock);
    for (unsigned t = 0; t < QUOTA_TYPES && !err; t++)
        if (q->types & (1u << t))
            err = write_pages(fs, q, t);
    if (!err)
        atomic_fetch_add(&q->flushes, 1);
    return err;
}

/* ---- showing it ---- */

static void fill_public(const struct dquot *d, struct f2fuse_quota *out)
{
    *out = (struct f2fuse_quota){.type = d->type,
                                 .id = d->id,
                                 .space = d->space,
                                 .inodes = d->inodes,
                                 .bhard = d->bhard,
                                 .bsoft = d->bsoft,
                                 .ihard = d->ihard,
                                 .isoft = d->isoft,
                                 .btime = d->btime,
                                 .itime = d->itime};
}

static int cmp_quota(const void *a, const void *b)
{
    const struct f2fuse_quota *x = a, *y = b;
    if (x->type != y->type)
        return x->type < y->type ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Every dquot with something to show, sorted by type and id (malloc'ed). */
static int snapshot(struct quota *q, struct f2fuse_quota **out, size_t *n)
{
    pthread_mutex_lock(&q->lock);
    struct f2fuse_quota *list = malloc((q->count + 1) * sizeof(*list));
    size_t k = 0;
    for (size_t b = 0; list && b < q->buckets; b++)
        for (const struct dquot *d = q->table[b]; d; d = d->next)
            if (d->space || d->inodes || has_limits(d))
                fill_public(d, &list[k++]);
    pthread_mutex_unlock(&q->lock);
    if (!list)
        return -ENOMEM;
    qsort(list, k, sizeof(*list), cmp_quota);
    *out = list;
    *n = k;
    return 0;
}

int quota_list(struct f2fuse *fs, f2fuse_quota_fn fn, void *arg)
{
    struct quota *q = fs->quota, *mine = NULL;
    if (!q) {
        int err = quota_read(fs, &mine);
        if (err)
            return err;
        q = mine;
    }
    if (!q)
        return -ENODATA;
    struct f2fuse_quota *list = NULL;
    size_t n = 0;
    int err = snapshot(q, &list, &n);
    for (size_t i = 0; !err && i < n; i++)
        if (fn(arg, &list[i]))
            break;
    free(list);
    if (mine)
        quota_free(mine);
    return err;
}

void quota_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct quota *q = fs->quota;
    if (!q)
        return;
    emit(sink, "quota.edquot", atomic_load(&q->edquot));
    emit(sink, "quota.flushes", atomic_load(&q->flushes));
    emit(sink, "quota.pages_written", atomic_load(&q->pages));
    emit(sink, "quota.entries_added", atomic_load(&q->added));
    emit(sink, "quota.entries_removed", atomic_load(&q->removed));
    emit(sink, "quota.needs_repair", q->repair);
    struct f2fuse_quota *list = NULL;
    size_t n = 0;
    if (snapshot(q, &list, &n))
        return;
    for (size_t i = 0; i < n; i++) {
        const struct f2fuse_quota *e = &list[i];
        const struct {
            const char *what;
            uint64_t v;
            bool always;
        } fields[] = {{"space", e->space, true},  {"inodes", e->inodes, true},
                      {"bhard", e->bhard, false}, {"bsoft", e->bsoft, false},
                      {"ihard", e->ihard, false}, {"isoft", e->isoft, false},
                      {"btime", e->btime, false}, {"itime", e->itime, false}};
        for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
            if (!fields[f].always && !fields[f].v)
                continue;
            char name[64];
            snprintf(name, sizeof(name), "quota.%s.%u.%s", type_names[e->type], e->id,
                     fields[f].what);
            emit(sink, name, fields[f].v);
        }
    }
    free(list);
}
