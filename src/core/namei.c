/* Names: creating inodes (files, device nodes, fifos, sockets, directories, symlinks), hard
 * links, unlink, rmdir and rename, and the lifetime of an inode whose last name went away
 * while it was still open (an orphan, freed at its last close or at the next mount). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/namei.h"
#include "core/acl.h"
#include "core/context.h"
#include "core/data.h"
#include "core/dir.h"
#include "core/dir_index.h"
#include "core/dirname.h"
#include "core/fscrypt.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"
#include "core/fsync.h"
#include "core/fileattr.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/quota.h"
#include "core/refs.h"
#include "core/space.h"
#include "core/verity.h"

static void now_into(uint64_t *sec, uint32_t *nsec)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    *sec = htole64((uint64_t)t.tv_sec);
    *nsec = htole32((uint32_t)t.tv_nsec);
}

void inode_touch(struct page *ipage, bool mtime, bool ctime)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    uint64_t s;
    uint32_t ns;
    now_into(&s, &ns);
    if (mtime) {
        ri->i_mtime = s;
        ri->i_mtime_nsec = ns;
    }
    if (ctime) {
        ri->i_ctime = s;
        ri->i_ctime_nsec = ns;
    }
}

static void set_links(struct inode_info *ii, struct page *ipage, uint32_t links)
{
    ii->links = links;
    page_node(ipage)->i.i_links = htole32(links);
}

/* Frees an inode with no names left: its data, its xattr node, the inode itself. */
int inode_free(struct f2fuse *fs, uint32_t ino)
{
    struct page *ipage;
    struct inode_info ii;
    int err = inode_get(fs, ino, &ipage, &ii);
    if (err)
        return err;
    if (!(ii.inline_flags & (F2FS_INLINE_DATA | F2FS_INLINE_DENTRY)) && !S_ISCHR(ii.mode) &&
        !S_ISBLK(ii.mode))
        err = data_free_all(fs, &ii, ipage);
    if (!err && ii.xattr_nid)
        err = node_free(fs, ii.xattr_nid, ino);
    if (!err) /* what is left: the xattr node's block, and the inode */
        quota_free_inode(fs, ipage);
    pcache_put(fs->cache, ipage);
    if (!err)
        err = node_free(fs, ino, ino);
    if (S_ISDIR(ii.mode))
        dir_index_forget(fs, ino); /* dir_index.c: so may a directory's */
    verity_forget(fs, ino);        /* verity.c: the number may come back as another file */
    fscrypt_ikey_forget(fs, ino);  /* fscrypt_keys.c: so may its key */
    return err;
}

/* ---- creating ---- */

static int new_inode(struct f2fuse *fs, const struct inode_info *parent, struct page *ppage,
                     uint16_t mode, uint32_t uid, uint32_t gid, const char *name, size_t len,
                     struct page **ipagep, struct inode_info *ii)
{
    struct page *ipage;
    bool is_dir = S_ISDIR(mode);
    uint32_t ino;
    /* As f2fs_new_inode: a directory with project inheritance hands its project id down. */
    bool inherit = (parent->flags & F2FS_PROJINHERIT_FL) &&
                   (fs->features & F2FS_FEATURE_PRJQUOTA) &&
                   (fs->features & F2FS_FEATURE_EXTRA_ATTR);
    struct quota_ids ids = {
        .id = {uid, gid, inherit ? fileattr_projid(fs, &page_node(ppage)->i) : 0}};
    int err = quota_alloc_inode(fs, &ids); /* the kernel's dquot_alloc_inode: -EDQUOT */
    if (err)
        return err;
    err = nat_alloc_nid(fs->nat, &ino);
    if (!err) {
        err = node_new(fs, ino, ino, 0, !is_dir, NULL, &ipage);
        if (err)
            nat_release_nid(fs->nat, ino);
    }
    if (err) {
        quota_release_inode(fs, &ids);
        return err;
    }
    struct f2fs_node *node = page_node(ipage);
    struct f2fs_inode *ri = &node->i;
    ri->i_mode = htole16(mode);
    ri->i_uid = htole32(uid);
    ri->i_gid = htole32(gid);
    ri->i_links = htole32(is_dir ? 2 : 1);
    ri->i_blocks = htole64(1);
    ri->i_generation = htole32(atomic_fetch_add(&fs->next_generation, 1));
    ri->i_pino = htole32(parent->ino);
    ri->i_namelen = htole32((uint32_t)len);
    memcpy(ri->i_name, name, len);
    ri->i_dir_level = 0;
    ri->i_flags = htole32(fileattr_inherited_flags(parent, mode));
    /* The kernel's defaults: inline xattrs always, inline data for files and symlinks,
     * inline dentries for directories; the extra attribute area mkfs gives the root. */
    uint8_t inl = F2FS_INLINE_XATTR;
    if (S_ISREG(mode) || S_ISLNK(mode))
        inl |= F2FS_INLINE_DATA;
    if (is_dir)
        inl |= F2FS_INLINE_DENTRY;
    if (fs->features & F2FS_FEATURE_EXTRA_ATTR) {
        inl |= F2FS_EXTRA_ATTR;
        ri->i_extra_isize = htole16(inode_new_extra_isize(fs));
        if (fs->features & F2FS_FEATURE_FLEXIBLE_INLINE_XATTR)
            ri->i_inline_xattr_size = htole16(DEF_INLINE_XATTR_ADDRS);
    }
    ri->i_inline = inl;
    fileattr_new_compression(fs, parent, ri, name, len);
    if (inherit)
        ri->i_projid = htole32(ids.id[QUOTA_PRJ]);
    uint64_t s;
    uint32_t ns;
    now_into(&s, &ns);
    ri->i_atime = ri->i_mtime = ri->i_ctime = s;
    ri->i_atime_nsec = ri->i_mtime_nsec = ri->i_ctime_nsec = ns;
    if (fs->features & F2FS_FEATURE_INODE_CRTIME) {
        ri->i_crtime = s;
        ri->i_crtime_nsec = ns;
    }
    err = inode_decode(fs, ipage, ino, ii);
    if (err) {
        quota_release_inode(fs, &ids);
        pcache_put(fs->cache, ipage);
        return err;
    }
    /* Its name is not in any checkpoint yet: a regular file's fsync can carry it (the
     * dentry mark); anything else is fsync'ed by a checkpoint. */
    if (S_ISREG(mode))
        fsync_new_name(fs, ino);
    else
        fsync_needs_checkpoint(fs, ino);
    *ipagep = ipage;
    return 0;
}

/* Takes cp_lock (shared), ns_lock and the stripe locks of the given inodes. */
static void ns_begin(struct f2fuse *fs, const uint32_t *inos, int n)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    pthread_mutex_lock(&fs->ns_lock);
    inode_lock_many(fs, inos, n);
}

static void ns_end(struct f2fuse *fs, const uint32_t *inos, int n)
{
    inode_unlock_many(fs, inos, n);
    pthread_mutex_unlock(&fs->ns_lock);
    pthread_rwlock_unlock(&fs->cp_lock);
    space_after_change(fs);
}

/* Looks up name in dir: 0 and *ino when present, -ENOENT when absent. */
static int name_lookup(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                       const char *name, size_t len, uint32_t *ino)
{
    return dir_lookup(fs, dir, dpage, name, len, ino);
}

static int get_dir(struct f2fuse *fs, uint32_t ino, struct page **page, struct inode_info *ii)
{
    int err = inode_get(fs, ino, page, ii);
    if (err)
        return err;
    if (!S_ISDIR(ii->mode)) {
        pcache_put(fs->cache, *page);
        *page = NULL; /* the callers put what they hold on every path */
        return -ENOTDIR;
    }
    return 0;
}

/* IS_DIRSYNC: a change of names in a directory flagged sync or dirsync, or on a sync or
 * dirsync mount, is on disk when it returns.  As the kernel's f2fs_sync_fs after it, the
 * checkpoint does not change the outcome: a failed one has turned the mount read-only,
 * with its message. */
static bool dir_syncs(const struct f2fuse *fs, const struct inode_info *dir)
{
    return fs->opts.mount_sync || fs->opts.mount_dirsync ||
           (dir->flags & (F2FS_SYNC_FL | F2FS_DIRSYNC_FL));
}

static void dir_sync_after(struct f2fuse *fs, bool syncs)
{
    if (syncs)
        (void)fsync_dir(fs, BLK_PRIO_NORMAL, 0);
}

static int check_name(const char *name, size_t len)
{
    if (len == 0 || memchr(name, '/', len) || memchr(name, '\0', len))
        return -EINVAL;
    return len > F2FS_NAME_LEN ? -ENAMETOOLONG : 0;
}

/* What a new name needs before anything is locked: a writable mount and a valid name. */
static int new_name_allowed(struct f2fuse *fs, const char *name, size_t len)
{
    int err = fs_writable(fs);
    return err ? err : check_name(name, len);
}

/* 0 when name is free in dir, -EEXIST when it is taken, else the lookup's error. */
static int name_free(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     const char *name, size_t len)
{
    uint32_t existing;
    int err = name_lookup(fs, dir, dpage, name, len, &existing);
    return err == -ENOENT ? 0 : err ? err : -EEXIST;
}

/* A device node's number in its first data pointers, in the kernel's encoding: the old
 * 16-bit form when it fits, else the new form. */
static void set_rdev(struct page *ipage, const struct inode_info *ii, uint64_t rdev)
{
    uint32_t major = (uint32_t)((rdev >> 8) & 0xfff) | (uint32_t)((rdev >> 32) & ~0xfffu);
    uint32_t minor = (uint32_t)(rdev & 0xff) | (uint32_t)((rdev >> 12) & ~0xffu);
    if (major < 256 && minor < 256)
        *INODE_ADDR(ipage, ii->extra_isize / 4) = htole32(major << 8 | minor);
    else
        *INODE_ADDR(ipage, ii->extra_isize / 4 + 1) = htole32((minor & 0xff) | (major << 8) |
                                                              ((minor & ~0xffu) << 12));
}

/* A new symlink's target: as given, or encrypted with the symlink's own key. */
static int write_target(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                        const char *target, size_t tlen)
{
    ssize_t n;
    if (!fscrypt_encrypted(ii)) {
        n = data_write(fs, ii, ipage, target, tlen, 0);
        return n < 0 ? (int)n : 0;
    }
    struct fscrypt_ikey *key;
    uint8_t disk[FSCRYPT_SYMLINK_MAX_CIPHERTEXT + 3];
    int err = fscrypt_ikey_get(fs, ii, ipage, &key);
    if (err)
        return err;
    n = fscrypt_symlink_encrypt(fs, key, target, tlen, disk);
    fscrypt_ikey_put(fs, key);
    if (n > 0) /* i_size leaves the NUL out (page_symlink) */
        n = data_write(fs, ii, ipage, disk, (size_t)n, 0);
    return n < 0 ? (int)n : 0;
}

/* Creates name in parent; what == S_IFLNK takes target.  The new inode's attributes go to
 * out. */
int namei_create(struct f2fuse *fs, uint32_t parent, const char *name, size_t len, uint32_t mode,
                 uint64_t rdev, uint32_t uid, uint32_t gid, const char *target,
                 struct f2fuse_attr *out)
{
    int err = new_name_allowed(fs, name, len);
    if (err)
        return err;
    size_t tlen = target ? strlen(target) : 0;
    if (target && (tlen == 0 || tlen > F2FS_MAX_SYMLINK))
        return tlen ? -ENAMETOOLONG : -ENOENT;
    err = space_reserve(fs, 4);
    if (err)
        return err;
    ns_begin(fs, &parent, 1);
    struct page *dpage = NULL, *ipage = NULL;
    struct inode_info dir, ii;
    uint32_t umask = mode >> 16 & 0777; /* F2FUSE_UMASK */
    struct acl_inherited acls = {0};
    mode &= 0177777;
    err = get_dir(fs, parent, &dpage, &dir);
    if (!err && dir.links == 0)
        err = -ENOENT; /* a removed directory that is still someone's cwd */
    if (!err)
        err = name_free(fs, &dir, dpage, name, len);
    if (!err)
        err = fileattr_may_add_name(&dir); /* fileattr.c: not in an immutable directory */
    if (!err)
        err = fscrypt_check_new_name(fs, &dir, dpage); /* ENOKEY without the key */
    if (!err && (dir.mode & S_ISGID)) {
        /* A set-group-ID directory hands its group down, and the bit to subdirectories. */
        gid = le32(page_node(dpage)->i.i_gid);
        if (S_ISDIR(mode))
            mode |= S_ISGID;
    }
    if (!err)
        err = acl_create(fs, &dir, dpage, &mode, umask, &acls);
    /* i_name records the name as the entry stores it: ciphertext in an encrypted directory */
    struct dir_name dn = {0};
    if (!err)
        err = dir_name_init(fs, &dir, dpage, name, len, &dn);
    if (!err)
        err = new_inode(fs, &dir, dpage, (uint16_t)mode, uid, gid, (const char *)dn.name, dn.len,
                        &ipage, &ii);
    if (!err) /* fscrypt.c: the directory's policy, a new nonce */
        err = fscrypt_new_inode(fs, &dir, dpage, &ii, ipage, dn.hash);
    dir_name_release(fs, &dn);
    if (!err)
        err = acl_init(fs, &ii, ipage, &acls);
    if (!err && (S_ISCHR(mode) || S_ISBLK(mode)))
        set_rdev(ipage, &ii, rdev);
    if (!err && S_ISDIR(mode))
        err = dir_init(fs, &ii, ipage, parent);
    if (!err && target)
        err = write_target(fs, &ii, ipage, target, tlen);
    if (!err)
        err = dir_add_entry(fs, &dir, dpage, name, len, ii.ino, (uint16_t)mode);
    if (!err) {
        if (S_ISDIR(mode))
            set_links(&dir, dpage, dir.links + 1);
        inode_touch(dpage, true, true);
        pcache_mark_dirty(fs->cache, dpage);
        pcache_mark_dirty(fs->cache, ipage);
        err = inode_fill_attr(fs, ipage, &ii, out);
        if (!err)
            err = inode_lookup_ref(fs, ii.ino);
    } else if (ipage) {
        /* Undo the half-made inode. */
        pcache_put(fs->cache, ipage);
        inode_free(fs, ii.ino);
        ipage = NULL;
    }
    pcache_put(fs->cache, ipage);
    pcache_put(fs->cache, dpage);
    ns_end(fs, &parent, 1);
    acl_inherited_free(&acls);
    dir_sync_after(fs, !err && dir_syncs(fs, &dir));
    return err;
}

/* f2fs_link, f2fs_rename: into a directory with project inheritance only what already
 * belongs to its project may come (else -EXDEV: mv copies, and quota stays with the tree). */
static int project_allows(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                          struct page *ipage)
{
    if (!(dir->flags & F2FS_PROJINHERIT_FL))
        return 0;
    return fileattr_projid(fs, &page_node(dpage)->i) == fileattr_projid(fs, &page_node(ipage)->i)
               ? 0
               : -EXDEV;
}

int namei_link(struct f2fuse *fs, uint32_t ino, uint32_t parent, const char *name, size_t len,
               struct f2fuse_attr *out)
{
    int err = new_name_allowed(fs, name, len);
    if (err)
        return err;
    err = space_reserve_to_free(fs, 2); /* as rename: only a new dentry block is new */
    if (err)
        return err;
    uint32_t inos[2] = {parent, ino};
    ns_begin(fs, inos, 2);
    struct page *dpage = NULL, *ipage = NULL;
    struct inode_info dir, ii;
    err = get_dir(fs, parent, &dpage, &dir);
    if (!err)
        err = inode_get(fs, ino, &ipage, &ii);
    if (!err && S_ISDIR(ii.mode))
        err = -EPERM;
    /* cppcheck-suppress uninitvar ; !err means inode_get ran and filled ii */
    if (!err && ii.links == 0)
        err = -ENOENT;
    if (!err)
        err = project_allows(fs, &dir, dpage, ipage);
    if (!err)
        err = name_free(fs, &dir, dpage, name, len);
    if (!err)
        err = fileattr_may_add_name(&dir);
    if (!err)
        err = fileattr_may_change(&ii); /* no new name for an immutable or append-only inode */
    if (!err) /* fscrypt.c: into an encrypted one with its key and of its policy */
        err = fscrypt_check_link(fs, &dir, dpage, &ii, ipage);
    if (!err)
        err = dir_add_entry(fs, &dir, dpage, name, len, ino, ii.mode);
    if (!err) {
        fsync_needs_checkpoint(fs, ino);
        set_links(&ii, ipage, ii.links + 1);
        inode_touch(ipage, false, true);
        inode_touch(dpage, true, true);
        pcache_mark_dirty(fs->cache, ipage);
        pcache_mark_dirty(fs->cache, dpage);
        err = inode_fill_attr(fs, ipage, &ii, out);
        if (!err)
            err = inode_lookup_ref(fs, ino);
    }
    pcache_put(fs->cache, ipage);
    pcache_put(fs->cache, dpage);
    ns_end(fs, inos, 2);
    dir_sync_after(fs, !err && dir_syncs(fs, &dir));
    return err;
}

/* Drops one name of inode ii (its entry is already gone): directories lose both their
 * links and their parent's link for "..".  The inode is freed when no name and no open
 * file is left. */
static int drop_name(struct f2fuse *fs, struct inode_info *dir, struct page *dpage,
                     struct inode_info *ii, struct page *ipage)
{
    if (S_ISDIR(ii->mode)) {
        set_links(ii, ipage, 0);
        if (dir->links > 2)
            set_links(dir, dpage, dir->links - 1);
    } else if (ii->links > 0) {
        set_links(ii, ipage, ii->links - 1);
    }
    inode_touch(ipage, false, true);
    pcache_mark_dirty(fs->cache, ipage);
    pcache_mark_dirty(fs->cache, dpage);
    fsync_needs_checkpoint(fs, ii->ino);
    fsync_needs_checkpoint(fs, dir->ino); /* recovery only adds names: none into dir now */
    if (ii->links > 0 || inode_ref_unlinked(fs, ii->ino, le64(page_node(ipage)->i.i_blocks)))
        return 0;
    return 1; /* the caller frees it once it has let go of the page */
}

int namei_remove(struct f2fuse *fs, uint32_t parent, const char *name, size_t len, bool want_dir)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    if (len > F2FS_NAME_LEN)
        return -ENAMETOOLONG;
    pthread_rwlock_rdlock(&fs->cp_lock);
    pthread_mutex_lock(&fs->ns_lock);
    /* The victim's inode number is needed for its lock: look it up under ns_lock, which
     * keeps the name from changing meanwhile. */
    struct page *dpage = NULL, *ipage = NULL;
    struct inode_info dir, ii;
    uint32_t ino = 0;
    inode_lock_many(fs, &parent, 1);
    err = get_dir(fs, parent, &dpage, &dir);
    if (!err)
        err = name_lookup(fs, &dir, dpage, name, len, &ino);
    pcache_put(fs->cache, dpage);
    dpage = NULL;
    inode_unlock_many(fs, &parent, 1);
    uint32_t inos[2] = {parent, ino};
    int locked = err ? 0 : 2;
    if (!err)
        inode_lock_many(fs, inos, 2);
    if (!err)
        err = get_dir(fs, parent, &dpage, &dir);
    if (!err)
        err = inode_get(fs, ino, &ipage, &ii);
    if (!err && want_dir && !S_ISDIR(ii.mode))
        err = -ENOTDIR;
    if (!err && !want_dir && S_ISDIR(ii.mode))
        err = -EISDIR;
    if (!err)
        err = fileattr_may_drop_name(&dir, &ii); /* fileattr.c: immutable, append-only */
    if (!err && want_dir) {
        bool empty;
        err = dir_is_empty(fs, &ii, ipage, &empty);
        if (!err && !empty)
            err = -ENOTEMPTY;
    }
    if (!err)
        err = dir_remove_entry(fs, &dir, dpage, name, len, NULL);
    int free_it = 0;
    if (!err) {
        inode_touch(dpage, true, true);
        free_it = drop_name(fs, &dir, dpage, &ii, ipage);
    }
    pcache_put(fs->cache, ipage);
    pcache_put(fs->cache, dpage);
    if (free_it == 1)
        err = inode_free(fs, ino);
    if (locked)
        inode_unlock_many(fs, inos, 2);
    pthread_mutex_unlock(&fs->ns_lock);
    pthread_rwlock_unlock(&fs->cp_lock);
    space_after_change(fs);
    dir_sync_after(fs, !err && dir_syncs(fs, &dir));
    return err;
}

/* Is ancestor an ancestor of (or equal to) dir?  Walks ".." up to the root. */
static int is_ancestor(struct f2fuse *fs, uint32_t ancestor, uint32_t dir, bool *result)
{
    *result = false;
    for (unsigned depth = 0; depth < 4096; depth++) {
        if (dir == ancestor) {
            *result = true;
            return 0;
        }
        if (dir == fs->root_ino)
            return 0;
        struct page *page;
        struct inode_info ii;
        int err = get_dir(fs, dir, &page, &ii);
        if (err)
            return err;
        uint32_t up;
        err = dir_lookup(fs, &ii, page, "..", 2, &up);
        pcache_put(fs->cache, page);
        if (err)
            return err;
        dir = up;
    }
    return fs_corrupt(fs, "directory %u: \"..\" chain does not reach the root", dir);
}

/* Points a moved directory's ".." at its new parent. */
static int reparent_dir(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                        uint32_t new_parent)
{
    int err = dir_set_entry(fs, ii, ipage, "..", 2, new_parent, S_IFDIR);
    page_node(ipage)->i.i_pino = htole32(new_parent);
    pcache_mark_dirty(fs->cache, ipage);
    return err;
}

/* The inode now named name in dir records it (init_dent_inode): as the entry stores it. */
static int set_name_hint(struct f2fuse *fs, const struct inode_info *dir, struct page *dpage,
                         struct page *ipage, const char *name, size_t len)
{
    struct dir_name dn;
    int err = dir_name_init(fs, dir, dpage, name, len, &dn);
    if (err)
        return err;
    struct f2fs_inode *ri = &page_node(ipage)->i;
    ri->i_pino = htole32(dir->ino);
    ri->i_namelen = htole32((uint32_t)dn.len);
    memset(ri->i_name, 0, sizeof(ri->i_name));
    memcpy(ri->i_name, dn.name, dn.len);
    fscrypt_name_recorded(dir, ipage, dn.hash);
    dir_name_release(fs, &dn);
    return 0;
}

/* What one rename works on: both directories, the source and the target (tgt_ino 0 when
 * the new name is free), as the steps below find, load and change them.  With same_dir,
 * ndpage is odpage (put once) and ndir a copy of odir. */
struct rename_op {
    uint32_t old_parent, new_parent;
    const char *old_name, *new_name;
    size_t old_len, new_len;
    unsigned flags;
    bool same_dir;
    uint32_t src_ino, tgt_ino;
    bool src_dir, tgt_dir;
    struct page *odpage, *ndpage, *spage, *tpage;
    struct inode_info odir, ndir, src, tgt;
};

/* What can be refused before any lock is taken. */
static int rename_check_args(unsigned flags, size_t old_len, const char *new_name, size_t new_len)
{
    if (flags & ~(F2FUSE_RENAME_NOREPLACE | F2FUSE_RENAME_EXCHANGE))
        return -EINVAL;
    if ((flags & F2FUSE_RENAME_NOREPLACE) && (flags & F2FUSE_RENAME_EXCHANGE))
        return -EINVAL;
    int err = check_name(new_name, new_len);
    if (err)
        return err;
    return old_len > F2FS_NAME_LEN ? -ENAMETOOLONG : 0;
}

/* Finds both inode numbers under the two directories' locks (ns_lock, held by the caller,
 * keeps the names stable until all four inodes are locked). */
static int rename_find_inodes(struct f2fuse *fs, struct rename_op *op)
{
    uint32_t dirs[2] = {op->old_parent, op->new_parent};
    inode_lock_many(fs, dirs, 2);
    int err = get_dir(fs, op->old_parent, &op->odpage, &op->odir);
    if (!err)
        err = get_dir(fs, op->new_parent, &op->ndpage, &op->ndir);
    if (!err)
        err = name_lookup(fs, &op->odir, op->odpage, op->old_name, op->old_len, &op->src_ino);
    if (!err) {
        int r = name_lookup(fs, &op->ndir, op->ndpage, op->new_name, op->new_len, &op->tgt_ino);
        err = r == -ENOENT ? 0 : r;
        if (r == -ENOENT)
            op->tgt_ino = 0;
    }
    pcache_put(fs->cache, op->odpage);
    pcache_put(fs->cache, op->ndpage);
    op->odpage = op->ndpage = NULL;
    inode_unlock_many(fs, dirs, 2);
    return err;
}

/* Reads the directories and inodes again, now under all four locks. */
static int rename_load(struct f2fuse *fs, struct rename_op *op)
{
    int err = get_dir(fs, op->old_parent, &op->odpage, &op->odir);
    if (!err && !op->same_dir)
        err = get_dir(fs, op->new_parent, &op->ndpage, &op->ndir);
    if (op->same_dir) {
        op->ndpage = op->odpage;
        op->ndir = op->odir;
    }
    if (!err)
        err = inode_get(fs, op->src_ino, &op->spage, &op->src);
    if (!err && op->tgt_ino)
        err = inode_get(fs, op->tgt_ino, &op->tpage, &op->tgt);
    op->src_dir = !err && S_ISDIR(op->src.mode);
    op->tgt_dir = !err && op->tgt_ino && S_ISDIR(op->tgt.mode);
    return err;
}

/* A directory may not move below itself; a replaced target must be of the source's kind
 * and, when a directory, empty. */
static int rename_check_shape(struct f2fuse *fs, struct rename_op *op)
{
    bool exchange = op->flags & F2FUSE_RENAME_EXCHANGE;
    int err = 0;
    if (op->src_dir && !op->same_dir) {
        bool below;
        err = is_ancestor(fs, op->src_ino, op->new_parent, &below);
        if (!err && below)
            err = -EINVAL;
    }
    if (!err && op->tgt_dir && exchange && !op->same_dir) {
        bool below;
        err = is_ancestor(fs, op->tgt_ino, op->old_parent, &below);
        if (!err && below)
            err = -EINVAL;
    }
    if (!err && op->tgt_ino && !exchange) {
        if (op->src_dir && !op->tgt_dir)
            err = -ENOTDIR;
        else if (!op->src_dir && op->tgt_dir)
            err = -EISDIR;
        else if (op->tgt_dir) {
            bool empty;
            err = dir_is_empty(fs, &op->tgt, op->tpage, &empty);
            if (!err && !empty)
                err = -ENOTEMPTY;
        }
    }
    return err;
}

/* RENAME_EXCHANGE: each name now names the other inode. */
static int rename_exchange(struct f2fuse *fs, struct rename_op *op)
{
    int err = dir_set_entry(fs, &op->ndir, op->ndpage, op->new_name, op->new_len, op->src_ino,
                            op->src.mode);
    if (!err)
        err = dir_set_entry(fs, &op->odir, op->odpage, op->old_name, op->old_len, op->tgt_ino,
                            op->tgt.mode);
    if (!err && !op->same_dir && op->src_dir != op->tgt_dir) {
        /* One directory moves each way: the link counts of the parents follow. */
        struct inode_info *gain = op->src_dir ? &op->ndir : &op->odir;
        struct inode_info *lose = op->src_dir ? &op->odir : &op->ndir;
        struct page *gp = op->src_dir ? op->ndpage : op->odpage;
        struct page *lp = op->src_dir ? op->odpage : op->ndpage;
        set_links(gain, gp, gain->links + 1);
        set_links(lose, lp, lose->links - 1);
    }
    if (!err && op->src_dir && !op->same_dir)
        err = reparent_dir(fs, &op->src, op->spage, op->new_parent);
    if (!err && op->tgt_dir && !op->same_dir)
        err = reparent_dir(fs, &op->tgt, op->tpage, op->old_parent);
    if (!err)
        err = set_name_hint(fs, &op->ndir, op->ndpage, op->spage, op->new_name, op->new_len);
    if (!err)
        err = set_name_hint(fs, &op->odir, op->odpage, op->tpage, op->old_name, op->old_len);
    if (!err) {
        inode_touch(op->tpage, false, true);
        pcache_mark_dirty(fs->cache, op->tpage);
    }
    return err;
}

/* A plain rename: the new name (replacing the target's, which loses a link) first, then
 * the old one goes.  *free_tgt as drop_name returns it. */
static int rename_move(struct f2fuse *fs, struct rename_op *op, int *free_tgt)
{
    int err;
    if (op->tgt_ino) {
        err = dir_set_entry(fs, &op->ndir, op->ndpage, op->new_name, op->new_len, op->src_ino,
                            op->src.mode);
        if (!err)
            *free_tgt = drop_name(fs, &op->ndir, op->ndpage, &op->tgt, op->tpage);
    } else {
        err = dir_add_entry(fs, &op->ndir, op->ndpage, op->new_name, op->new_len, op->src_ino,
                            op->src.mode);
    }
    if (!err && op->same_dir)
        op->odir = op->ndir; /* the add may have changed the directory's shape */
    if (!err)
        err = dir_remove_entry(fs, &op->odir, op->odpage, op->old_name, op->old_len, NULL);
    if (!err && op->same_dir)
        op->ndir = op->odir;
    if (!err && op->src_dir && !op->same_dir) {
        /* The moved directory's ".." now counts for the new parent. */
        err = reparent_dir(fs, &op->src, op->spage, op->new_parent);
        set_links(&op->odir, op->odpage, op->odir.links - 1);
        set_links(&op->ndir, op->ndpage, op->ndir.links + 1);
    }
    if (!err)
        err = set_name_hint(fs, &op->ndir, op->ndpage, op->spage, op->new_name, op->new_len);
    return err;
}

/* After a successful rename: every inode involved changed, none may go by fsync alone. */
static void rename_mark_changed(struct f2fuse *fs, struct rename_op *op)
{
    fsync_needs_checkpoint(fs, op->src_ino);
    if (op->tgt_ino)
        fsync_needs_checkpoint(fs, op->tgt_ino);
    fsync_needs_checkpoint(fs, op->old_parent); /* lost a name (see drop_name) */
    fsync_needs_checkpoint(fs, op->new_parent);
    inode_touch(op->spage, false, true);
    inode_touch(op->odpage, true, true);
    inode_touch(op->ndpage, true, true);
    pcache_mark_dirty(fs->cache, op->spage);
    pcache_mark_dirty(fs->cache, op->odpage);
    pcache_mark_dirty(fs->cache, op->ndpage);
}

/* The rename itself, under all four locks: load, check, change, let go of the pages, and
 * free a replaced target that lost its last name. */
static int rename_locked(struct f2fuse *fs, struct rename_op *op)
{
    int err = rename_load(fs, op);
    struct fscrypt_rename fr = {.odir = &op->odir,
                                .ndir = &op->ndir,
                                .src = &op->src,
                                .tgt = &op->tgt,
                                .odpage = op->odpage,
                                .ndpage = op->ndpage,
                                .spage = op->spage,
                                .tpage = op->tpage,
                                .exchange = op->flags & F2FUSE_RENAME_EXCHANGE};
    if (!err) /* fscrypt_prepare_rename, before the file system's own checks */
        err = fscrypt_check_rename(fs, &fr);
    if (!err) /* vfs_rename: the source leaves its directory, the target its name */
        err = fileattr_may_drop_name(&op->odir, &op->src);
    if (!err)
        err = op->tgt_ino ? fileattr_may_drop_name(&op->ndir, &op->tgt)
                          : fileattr_may_add_name(&op->ndir);
    if (!err)
        err = project_allows(fs, &op->ndir, op->ndpage, op->spage);
    if (!err && (op->flags & F2FUSE_RENAME_EXCHANGE))
        err = project_allows(fs, &op->odir, op->odpage, op->tpage);
    if (!err)
        err = rename_check_shape(fs, op);
    int free_tgt = 0;
    if (!err && (op->flags & F2FUSE_RENAME_EXCHANGE))
        err = rename_exchange(fs, op);
    else if (!err)
        err = rename_move(fs, op, &free_tgt);
    if (!err)
        rename_mark_changed(fs, op);
    pcache_put(fs->cache, op->spage);
    pcache_put(fs->cache, op->tpage);
    pcache_put(fs->cache, op->odpage);
    if (!op->same_dir)
        pcache_put(fs->cache, op->ndpage);
    if (free_tgt == 1)
        err = inode_free(fs, op->tgt_ino);
    return err;
}

int namei_rename(struct f2fuse *fs, uint32_t old_parent, const char *old_name, size_t old_len,
                 uint32_t new_parent, const char *new_name, size_t new_len, unsigned flags)
{
    int err = fs_writable(fs);
    if (err)
        return err;
    err = rename_check_args(flags, old_len, new_name, new_len);
    if (err)
        return err;
    /* Nodes are rewritten, not added; a new dentry block asks for itself (dir.c), so a
     * rename over a name works on a full file system. */
    err = space_reserve_to_free(fs, 4);
    if (err)
        return err;

    struct rename_op op = {.old_parent = old_parent,
                           .new_parent = new_parent,
                           .old_name = old_name,
                           .new_name = new_name,
                           .old_len = old_len,
                           .new_len = new_len,
                           .flags = flags,
                           .same_dir = old_parent == new_parent};
    pthread_rwlock_rdlock(&fs->cp_lock);
    pthread_mutex_lock(&fs->ns_lock);
    /* Find both inode numbers first, then lock all four. */
    err = rename_find_inodes(fs, &op);
    uint32_t all[4] = {old_parent, new_parent, op.src_ino, op.tgt_ino};
    int nlocked = 0;
    if (!err) {
        nlocked = op.tgt_ino ? 4 : 3;
        inode_lock_many(fs, all, nlocked);
    }
    if (!err && (flags & F2FUSE_RENAME_EXCHANGE) && !op.tgt_ino)
        err = -ENOENT;
    if (!err && (flags & F2FUSE_RENAME_NOREPLACE) && op.tgt_ino)
        err = -EEXIST;
    /* Two names of one inode: nothing to do, as POSIX says. */
    if (!err && op.src_ino != op.tgt_ino)
        err = rename_locked(fs, &op);
    if (nlocked)
        inode_unlock_many(fs, all, nlocked);
    pthread_mutex_unlock(&fs->ns_lock);
    pthread_rwlock_unlock(&fs->cp_lock);
    space_after_change(fs);
    dir_sync_after(fs, !err && (dir_syncs(fs, &op.odir) || dir_syncs(fs, &op.ndir)));
    return err;
}
