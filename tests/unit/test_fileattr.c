/* Immutable and append-only inodes through the library API (fileattr.c's fileattr_may_*):
 * every changing entry point refuses what the kernel's VFS refuses, a caller's write
 * included, while the kernel's writeback of pages it cached (F2FUSE_WRITE_WRITEBACK) still
 * lands; root alone changes the flags, and not while the file is open for writing.
 * test_fileattr compares the same rules with the kernel's f2fs through a FUSE mount. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "f2fuse.h"

static char img[256];
static struct f2fuse *fs;
static uint32_t root;
static uint8_t block[8192];

static int open_rw(void)
{
    int err = check_open_rw(img, NULL, &fs);
    if (!err)
        root = f2fuse_root_ino(fs);
    return err;
}

static uint32_t make(uint32_t dir, const char *name, uint32_t mode)
{
    struct f2fuse_attr a = {0};
    int err = S_ISDIR(mode) ? f2fuse_mkdir(fs, dir, name, strlen(name), mode & 07777, 0, 0, &a)
                            : f2fuse_mknod(fs, dir, name, strlen(name), mode, 0, 0, 0, &a);
    CHECK_EQ(err, 0);
    if (!err && S_ISREG(mode))
        CHECK_EQ(f2fuse_write(fs, a.ino, block, sizeof(block), 0), (ssize_t)sizeof(block));
    return a.ino;
}

/* Sets (or clears) flag on ino as uid, keeping its other flags. */
static int set_flag(uint32_t ino, uint32_t flag, bool on, uint32_t uid)
{
    struct f2fuse_fileattr fa;
    int err = f2fuse_fileattr_get(fs, ino, &fa);
    if (err)
        return err;
    fa.flags = on ? fa.flags | flag : fa.flags & ~flag;
    fa.flags &= ~(uint32_t)FS_INLINE_DATA_FL; /* shown, not settable */
    fa.from_xflags = false;
    return f2fuse_fileattr_set(fs, ino, &fa, uid);
}

static int set_size(uint32_t ino, uint64_t size)
{
    struct f2fuse_setattr sa = {.valid = F2FUSE_SET_SIZE, .size = size};
    struct f2fuse_attr a;
    return f2fuse_setattr(fs, ino, &sa, &a);
}

static int set_mode(uint32_t ino, uint32_t mode)
{
    struct f2fuse_setattr sa = {.valid = F2FUSE_SET_MODE, .mode = mode};
    struct f2fuse_attr a;
    return f2fuse_setattr(fs, ino, &sa, &a);
}

static void immutable_file(void)
{
    uint32_t ino = make(root, "imm", S_IFREG | 0644);
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, true, 1000), -EPERM); /* CAP_LINUX_IMMUTABLE */
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, true, 0), 0);
    CHECK_EQ(f2fuse_write(fs, ino, block, 16, 0), -EPERM);
    CHECK_EQ(f2fuse_write(fs, ino, block, 16, sizeof(block)), -EPERM);
    /* the kernel's writeback of pages cached before the flag still lands */
    CHECK_EQ(f2fuse_write_ex(fs, ino, block, 16, 0, F2FUSE_WRITE_WRITEBACK, NULL), 16);
    CHECK_EQ(set_size(ino, 0), -EPERM);
    CHECK_EQ(set_mode(ino, 0600), -EPERM);
    CHECK_EQ(f2fuse_fallocate(fs, ino, FALLOC_FL_KEEP_SIZE, 0, 65536), -EPERM);
    CHECK_EQ(f2fuse_setxattr(fs, ino, "user.k", "v", 1, 0), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, ino, O_WRONLY), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, ino, O_RDONLY | O_TRUNC), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, ino, O_RDONLY), 0);
    f2fuse_release_file(fs, ino, O_RDONLY);
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_link(fs, ino, root, "imm.link", 8, &a), -EPERM);
    CHECK_EQ(f2fuse_rename(fs, root, "imm", 3, root, "imm2", 4, 0), -EPERM);
    CHECK_EQ(f2fuse_unlink(fs, root, "imm", 3), -EPERM);
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, false, 0), 0);
    CHECK_EQ(f2fuse_write(fs, ino, block, 16, 0), 16);
    CHECK_EQ(f2fuse_unlink(fs, root, "imm", 3), 0);
}

static void append_only_file(void)
{
    uint32_t ino = make(root, "app", S_IFREG | 0644);
    CHECK_EQ(set_flag(ino, FS_APPEND_FL, true, 0), 0);
    CHECK_EQ(f2fuse_write(fs, ino, block, 16, 0), -EPERM);
    CHECK_EQ(f2fuse_write(fs, ino, block, 16, sizeof(block)), 16); /* at the end */
    CHECK_EQ(f2fuse_open_file(fs, ino, O_WRONLY), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, ino, O_WRONLY | O_APPEND | O_TRUNC), -EPERM);
    CHECK_EQ(f2fuse_open_file(fs, ino, O_WRONLY | O_APPEND), 0);
    f2fuse_release_file(fs, ino, O_WRONLY | O_APPEND);
    CHECK_EQ(set_size(ino, 1), -EPERM);
    CHECK_EQ(set_mode(ino, 0600), -EPERM);
    CHECK_EQ(f2fuse_fallocate(fs, ino, FALLOC_FL_KEEP_SIZE, 0, 65536), 0);
    CHECK_EQ(f2fuse_fallocate(fs, ino, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096),
             -EPERM);
    CHECK_EQ(f2fuse_unlink(fs, root, "app", 3), -EPERM);
    CHECK_EQ(set_flag(ino, FS_APPEND_FL, false, 0), 0);
    CHECK_EQ(f2fuse_unlink(fs, root, "app", 3), 0);
}

static void flagged_directories(void)
{
    uint32_t idir = make(root, "idir", S_IFDIR | 0755);
    uint32_t adir = make(root, "adir", S_IFDIR | 0755);
    make(idir, "x", S_IFREG | 0644);
    make(adir, "y", S_IFREG | 0644);
    CHECK_EQ(set_flag(idir, FS_IMMUTABLE_FL, true, 0), 0);
    CHECK_EQ(set_flag(adir, FS_APPEND_FL, true, 0), 0);
    struct f2fuse_attr a;
    CHECK_EQ(f2fuse_mknod(fs, idir, "new", 3, S_IFREG | 0644, 0, 0, 0, &a), -EPERM);
    CHECK_EQ(f2fuse_unlink(fs, idir, "x", 1), -EPERM);
    CHECK_EQ(f2fuse_rename(fs, idir, "x", 1, root, "x", 1, 0), -EPERM);
    CHECK_EQ(f2fuse_mknod(fs, adir, "new", 3, S_IFREG | 0644, 0, 0, 0, &a), 0); /* adding */
    CHECK_EQ(f2fuse_unlink(fs, adir, "y", 1), -EPERM);
    CHECK_EQ(f2fuse_rename(fs, adir, "y", 1, adir, "z", 1, 0), -EPERM);
    CHECK_EQ(f2fuse_rename(fs, root, "idir", 4, root, "idir2", 5, 0), -EPERM);
    CHECK_EQ(set_flag(idir, FS_IMMUTABLE_FL, false, 0), 0);
    CHECK_EQ(set_flag(adir, FS_APPEND_FL, false, 0), 0);
    CHECK_EQ(f2fuse_unlink(fs, idir, "x", 1), 0);
    CHECK_EQ(f2fuse_unlink(fs, adir, "y", 1), 0);
}

static void not_while_written(void)
{
    uint32_t ino = make(root, "busy", S_IFREG | 0644);
    CHECK_EQ(f2fuse_open_file(fs, ino, O_RDWR), 0);
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, true, 0), -ETXTBSY);
    CHECK_EQ(set_flag(ino, FS_APPEND_FL, true, 0), -ETXTBSY);
    f2fuse_release_file(fs, ino, O_RDWR);
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, true, 0), 0);
    /* clearing needs no wait: nothing a writer does breaks a flag that is gone */
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, false, 0), 0);
}

static void survives_remount(void)
{
    uint32_t ino = make(root, "kept", S_IFREG | 0644);
    CHECK_EQ(set_flag(ino, FS_IMMUTABLE_FL, true, 0), 0);
    f2fuse_close(fs);
    if (open_rw())
        return;
    CHECK_EQ(f2fuse_write(fs, ino, block, 16, 0), -EPERM);
    CHECK_EQ(f2fuse_unlink(fs, root, "kept", 4), -EPERM);
    check_close_fsck(&fs, img);
}

int main(void)
{
    if (!getenv("F2FUSE_LOG"))
        setenv("F2FUSE_LOG", "none", 1);
    if (check_fresh_image(img, sizeof(img), "fileattr")) {
        printf("skip: mkfs.f2fs failed\n");
        return 77;
    }
    memset(block, 0x5a, sizeof(block));
    if (open_rw())
        return CHECK_DONE();
    RUN(immutable_file);
    RUN(append_only_file);
    RUN(flagged_directories);
    RUN(not_while_written);
    RUN(survives_remount);
    if (fs)
        f2fuse_close(fs);
    unlink(img);
    return CHECK_DONE();
}
