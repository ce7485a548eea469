/* POSIX ACL semantics through the library API on a real mkfs.f2fs image (acl.c): the umask
 * given with F2FUSE_UMASK, a default ACL inherited instead of it (files, directories,
 * symlinks), an equivalent access ACL not stored, chmod moving the mask.  The values are
 * the kernel's xattr form, as setfacl writes them; test_acl checks the same rules against
 * the kernel's f2fs through a FUSE mount. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "f2fuse.h"

enum { USER_OBJ = 1, USER = 2, GROUP_OBJ = 4, GROUP = 8, MASK = 0x10, OTHER = 0x20 };
#define NOID 0xFFFFFFFFu

struct ent {
    uint16_t tag, perm;
    uint32_t id;
};

static char img[256];
static struct f2fuse *fs; /* open read-write across the cases */
static uint32_t root, file_ino;

/* The xattr form of entries (little-endian host assumed, as the test machines are). */
static size_t acl_value(uint8_t *out, const struct ent *e, size_t n)
{
    uint32_t version = 2;
    memcpy(out, &version, 4);
    memcpy(out + 4, e, n * sizeof(*e));
    return 4 + n * sizeof(*e);
}

static const struct ent dflt[] = {
    {USER_OBJ, 7, NOID}, {USER, 7, 1234}, {GROUP_OBJ, 5, NOID},
    {GROUP, 5, 4321},    {MASK, 7, NOID}, {OTHER, 5, NOID},
};

static int open_rw(void)
{
    int err = check_open_rw(img, NULL, &fs);
    if (!err)
        root = f2fuse_root_ino(fs);
    return err;
}

/* The access (or default) ACL of ino as entries; -errno when it has none. */
static int acl_of(uint32_t ino, const char *name, struct ent *e, size_t max)
{
    uint8_t buf[4 + 32 * sizeof(struct ent)];
    ssize_t n = f2fuse_getxattr(fs, ino, name, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    size_t count = ((size_t)n - 4) / sizeof(struct ent);
    if (count > max)
        return -E2BIG;
    memcpy(e, buf + 4, count * sizeof(*e));
    return (int)count;
}

static void umask_without_default_acl(void)
{
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mkdir(fs, root, "plain", 5, 0777 | F2FUSE_UMASK(022), 0, 0, &a), 0);
    CHECK_EQ(a.mode, S_IFDIR | 0755);
    uint32_t plain = a.ino;
    CHECK_EQ(f2fuse_mknod(fs, plain, "x", 1, 0666 | F2FUSE_UMASK(027), 0, 0, 0, &a), 0);
    CHECK_EQ(a.mode, S_IFREG | 0640);
    CHECK_EQ(f2fuse_mknod(fs, plain, "y", 1, 0666, 0, 0, 0, &a), 0); /* no umask given */
    CHECK_EQ(a.mode, S_IFREG | 0666);
    struct ent e[8];
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_access", e, 8), -ENODATA);
}

static void default_acl_inherited(void)
{
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mkdir(fs, root, "d", 1, 0755, 0, 0, &a), 0);
    uint32_t d = a.ino;
    uint8_t v[4 + 8 * sizeof(struct ent)];
    size_t len = acl_value(v, dflt, 6);
    CHECK_EQ(f2fuse_setxattr(fs, d, "system.posix_acl_default", v, len, 0), 0);

    /* a file: 0666 masked by the default ACL, the umask ignored */
    CHECK_EQ(f2fuse_mknod(fs, d, "f", 1, 0666 | F2FUSE_UMASK(077), 0, 0, 0, &a), 0);
    CHECK_EQ(a.mode, S_IFREG | 0664);
    struct ent e[8];
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_access", e, 8), 6);
    CHECK_EQ(e[0].perm, 6); /* user_obj rw- */
    CHECK_EQ(e[1].perm, 7); /* named entries keep their bits (the mask limits them) */
    CHECK_EQ(e[4].tag, MASK);
    CHECK_EQ(e[4].perm, 6);
    CHECK_EQ(e[5].perm, 4); /* other r-- */
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_default", e, 8), -ENODATA);
    file_ino = a.ino;

    /* a directory: the access ACL and its own default */
    CHECK_EQ(f2fuse_mkdir(fs, d, "sub", 3, 0700 | F2FUSE_UMASK(022), 0, 0, &a), 0);
    CHECK_EQ(a.mode, S_IFDIR | 0700);
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_access", e, 8), 6);
    CHECK_EQ(e[4].perm, 0);
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_default", e, 8), 6);
    CHECK(memcmp(e, dflt, sizeof(dflt)) == 0);

    /* a symlink takes nothing */
    CHECK_EQ(f2fuse_symlink(fs, d, "l", 1, "f", 0, 0, &a), 0);
    CHECK_EQ(a.mode, S_IFLNK | 0777);
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_access", e, 8), -ENODATA);

    /* a default ACL equivalent to a mode leaves no access ACL */
    static const struct ent plain[] = {{USER_OBJ, 7, NOID}, {GROUP_OBJ, 5, NOID}, {OTHER, 0, NOID}};
    len = acl_value(v, plain, 3);
    CHECK_EQ(f2fuse_mkdir(fs, root, "e", 1, 0755, 0, 0, &a), 0);
    uint32_t dir_e = a.ino;
    CHECK_EQ(f2fuse_setxattr(fs, dir_e, "system.posix_acl_default", v, len, 0), 0);
    CHECK_EQ(f2fuse_mknod(fs, dir_e, "x", 1, 0666, 0, 0, 0, &a), 0);
    CHECK_EQ(a.mode, S_IFREG | 0640);
    CHECK_EQ(acl_of(a.ino, "system.posix_acl_access", e, 8), -ENODATA);

    /* chmod moves the mask (not the owning group's entry) */
    struct f2fuse_setattr sa = {.valid = F2FUSE_SET_MODE, .mode = 0600};
    CHECK_EQ(f2fuse_setattr(fs, file_ino, &sa, &a), 0);
    CHECK_EQ(a.mode, S_IFREG | 0600);
    CHECK_EQ(acl_of(file_ino, "system.posix_acl_access", e, 8), 6);
    CHECK_EQ(e[0].perm, 6);
    CHECK_EQ(e[2].perm, 5);
    CHECK_EQ(e[4].perm, 0);
    CHECK_EQ(e[5].perm, 0);
}

static void survives_remount(void)
{
    f2fuse_close(fs);
    if (open_rw())
        return;
    struct f2fuse_attr a;
    struct ent e[8];
    CHECK_EQ(f2fuse_getattr(fs, file_ino, &a), 0);
    CHECK_EQ(a.mode, S_IFREG | 0600);
    CHECK_EQ(acl_of(file_ino, "system.posix_acl_access", e, 8), 6);
    CHECK_EQ(e[4].perm, 0);
    check_close_fsck(&fs, img);
}

int main(void)
{
    if (!getenv("F2FUSE_LOG"))
        setenv("F2FUSE_LOG", "none", 1);
    if (check_fresh_image(img, sizeof(img), "acl")) {
        printf("skip: mkfs.f2fs failed\n");
        return 77;
    }
    if (open_rw())
        return CHECK_DONE();
    RUN(umask_without_default_acl);
    RUN(default_acl_inherited);
    RUN(survives_remount);
    if (fs)
        f2fuse_close(fs);
    unlink(img);
    return CHECK_DONE();
}
