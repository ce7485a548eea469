/* fs-verity through the library API (verity.c) on a real mkfs.f2fs -O verity image: what a
 * library user (no FUSE, no kernel VFS in front) is refused on a verity file - write,
 * truncate, fallocate, writable or O_TRUNC opens: EPERM - and enable's own refusals
 * (EEXIST, ETXTBSY, EINVAL, EMSGSIZE, EOPNOTSUPP without the feature); reads at odd offsets
 * and sizes through the verified path; the digest after a remount.  test_verity checks the
 * same against fsverity-utils through a FUSE mount. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "f2fuse.h"

#define DATA_SIZE 300001
static char img[256];
static struct f2fuse *fs;
static uint32_t root, vino, busy_ino;
static uint8_t data[DATA_SIZE];
static struct f2fuse_verity_digest digest;

static int open_image(const char *path, bool rw)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    if (rw)
        CHECK_EQ(f2fuse_option_set(&o, "rw", NULL), 0);
    CHECK_EQ(f2fuse_option_set(&o, "backend", "psync"), 0);
    fs = NULL;
    int err = f2fuse_open(path, &o, &fs);
    CHECK_EQ(err, 0);
    if (!err)
        root = f2fuse_root_ino(fs);
    return err;
}

static uint32_t create(const char *name, const void *content, size_t n)
{
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mknod(fs, root, name, strlen(name), S_IFREG | 0644, 0, 0, 0, &a), 0);
    CHECK_EQ(f2fuse_write(fs, a.ino, content, n, 0), (ssize_t)n);
    return a.ino;
}

static void enable(void)
{
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7 + i / 4096);
    vino = create("v", data, sizeof(data));
    busy_ino = create("busy", data, 5000);
    struct f2fuse_verity_enable e = {.hash_algorithm = 1, .block_size = 4096};
    CHECK_EQ(f2fuse_verity_enable(fs, vino, &e), 0);
    CHECK_EQ(f2fuse_verity_enable(fs, vino, &e), -EEXIST);
    CHECK_EQ(f2fuse_verity_measure(fs, vino, &digest), 0);
    CHECK_EQ(digest.algorithm, 1);
    CHECK_EQ(digest.size, 32);
    struct f2fuse_verity_digest none;
    CHECK_EQ(f2fuse_verity_measure(fs, busy_ino, &none), -ENODATA);
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_getattr(fs, vino, &a), 0);
    CHECK_EQ(a.size, sizeof(data)); /* the tree past EOF does not show */
}

static void enable_refusals(void)
{
    CHECK_EQ(f2fuse_open_file(fs, busy_ino, O_RDWR), 0);
    struct f2fuse_verity_enable e = {.hash_algorithm = 1, .block_size = 4096};
    CHECK_EQ(f2fuse_verity_enable(fs, busy_ino, &e), -ETXTBSY);
    CHECK_EQ(f2fuse_release_file(fs, busy_ino, O_RDWR), 0);
    e.block_size = 3000;
    CHECK_EQ(f2fuse_verity_enable(fs, busy_ino, &e), -EINVAL);
    e.block_size = 512; /* a power of two the kernel still refuses */
    CHECK_EQ(f2fuse_verity_enable(fs, busy_ino, &e), -EINVAL);
    e.block_size = 4096;
    e.hash_algorithm = 3;
    CHECK_EQ(f2fuse_verity_enable(fs, busy_ino, &e), -EINVAL);
    uint8_t salt[33] = {0};
    struct f2fuse_verity_enable s = {
        .hash_algorithm = 1, .block_size = 4096, .salt = salt, .salt_size = 33};
    CHECK_EQ(f2fuse_verity_enable(fs, busy_ino, &s), -EMSGSIZE);
    CHECK_EQ(f2fuse_verity_enable(fs, root, &s), -EMSGSIZE);
    s.salt_size = 32;
    CHECK_EQ(f2fuse_verity_enable(fs, root, &s), -EISDIR);
    struct f2fuse_verity_digest d;
    CHECK_EQ(f2fuse_verity_measure(fs, busy_ino, &d), -ENODATA); /* nothing was left behind */
}

static void writes_refused(void)
{
    CHECK_EQ(f2fuse_write(fs, vino, "x", 1, 0), -EPERM);
    CHECK_EQ(f2fuse_write(fs, vino, "x", 1, DATA_SIZE), -EPERM);
    struct f2fuse_setattr sa = {
        .valid = F2FUSE_SET_SIZE | F2FUSE_SET_MODE, .size = 10, .mode = 0600};
    CHECK_EQ(f2fuse_setattr(fs, vino, &sa, NULL), -EPERM);
    sa.size = DATA_SIZE; /* the kernel refuses any size change, even to the same size */
    CHECK_EQ(f2fuse_setattr(fs, vino, &sa, NULL), -EPERM);
    CHECK_EQ(f2fuse_fallocate(fs, vino, 0, 0, 1 << 20), -EPERM);
    CHECK_EQ(f2fuse_fallocate(fs, vino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
             -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, vino, O_WRONLY), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, vino, O_RDWR), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, vino, O_RDONLY | O_TRUNC), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, vino, O_RDONLY), 0);
    CHECK_EQ(f2fuse_release_file(fs, vino, O_RDONLY), 0);
    struct f2fuse_attr a;
    sa = (struct f2fuse_setattr){.valid = F2FUSE_SET_MODE, .mode = 0600};
    CHECK_EQ(f2fuse_setattr(fs, vino, &sa, &a), 0); /* chmod is allowed */
    CHECK_EQ(a.mode & 0777, 0600);
    CHECK_EQ(a.size, DATA_SIZE);
    CHECK_EQ(f2fuse_setxattr(fs, vino, "user.k", "v", 1, 0), 0);
}

static void reads_verified(void)
{
    static uint8_t buf[DATA_SIZE + 8192];
    static const struct {
        uint64_t off;
        size_t n;
    } cases[] = {{0, DATA_SIZE},  {1, 10},
                 {4095, 2},       {4096, 4096},
                 {12345, 100000}, {DATA_SIZE - 5, 100},
                 {DATA_SIZE, 10}, {DATA_SIZE + 70000, 10}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t off = cases[i].off;
        size_t want = off >= DATA_SIZE               ? 0
                      : cases[i].n > DATA_SIZE - off ? DATA_SIZE - off
                                                     : cases[i].n;
        ssize_t n = f2fuse_read(fs, vino, buf, cases[i].n, off);
        CHECK_EQ(n, (ssize_t)want);
        CHECK(n <= 0 || memcmp(buf, data + off, (size_t)n) == 0);
    }
}

static void after_remount(void)
{
    f2fuse_close(fs);
    CHECK_EQ(sh("fsck.f2fs -f %s >/dev/null 2>&1", img), 0);
    if (open_image(img, false))
        return;
    struct f2fuse_verity_digest d;
    CHECK_EQ(f2fuse_verity_measure(fs, vino, &d), 0);
    CHECK(memcmp(&d, &digest, sizeof(d)) == 0);
    reads_verified();
    CHECK_EQ(f2fuse_open_file(fs, vino, O_WRONLY), -EPERM); /* refused before EROFS matters */
    f2fuse_close(fs);
    fs = NULL;
}

static void no_feature(void)
{
    char plain[300];
    snprintf(plain, sizeof(plain), "%s.plain", img);
    if (sh("rm -f %s && truncate -s 64M %s && mkfs.f2fs -f %s >/dev/null", plain, plain, plain))
        return;
    if (open_image(plain, true))
        return;
    uint32_t ino = create("f", "abc", 3);
    struct f2fuse_verity_enable e = {.hash_algorithm = 1, .block_size = 4096};
    CHECK_EQ(f2fuse_verity_enable(fs, ino, &e), -EOPNOTSUPP);
    struct f2fuse_verity_digest d;
    CHECK_EQ(f2fuse_verity_measure(fs, ino, &d), -EOPNOTSUPP);
    f2fuse_close(fs);
    fs = NULL;
    unlink(plain);
}

int main(void)
{
    if (!getenv("F2FUSE_LOG"))
        setenv("F2FUSE_LOG", "none", 1);
    const char *tmp = getenv("TMPDIR");
    snprintf(img, sizeof(img), "%s/f2fuse-test-verity.%d.img", tmp ? tmp : "/var/tmp",
             (int)getpid());
    if (sh("rm -f %s && truncate -s 64M %s && mkfs.f2fs -f -O extra_attr,verity %s >/dev/null", img,
           img, img)) {
        printf("skip: mkfs.f2fs failed\n");
        return 77;
    }
    if (open_image(img, true))
        return CHECK_DONE();
    RUN(enable);
    RUN(enable_refusals);
    RUN(writes_refused);
    RUN(reads_verified);
    RUN(after_remount);
    RUN(no_feature);
    unlink(img);
    return CHECK_DONE();
}
