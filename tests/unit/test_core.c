/* Unit tests of core pieces that need no image: the dentry hash (vectors read off images
 * that mkfs.f2fs/sload.f2fs 1.15 wrote), the CRC, option parsing, and on-disk sizes. */
#include <errno.h>

#include "check.h"
#include "api/api.h"
#include "util/crc.h"

static void hash_matches_f2fs_tools(void)
{
    static const struct {
        const char *name;
        uint32_t hash;
    } v[] = {
        {".", 0},
        {"..", 0},
        {"a", 0x6d0ea4c1},
        {"A", 0x280269f2},
        {"big.bin", 0x66a80ad4},
        {"huge.bin", 0x538c170c},
        {"0123456789abcdef", 0x5a0788b2},                       /* exactly one round */
        {"abcdefghijklmnopq", 0x972a82e7},                      /* spills into a second round */
        {"h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93", 0x241925fe}, /* UTF-8: bytes unsigned */
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        CHECK_EQ(dentry_hash((const uint8_t *)v[i].name, strlen(v[i].name)), v[i].hash);
    char longname[256];
    memset(longname, 'x', 255);
    longname[255] = 0;
    CHECK_EQ(dentry_hash((const uint8_t *)longname, 255), 0x6c4c00ee);
}

static void crc_is_reflected_without_final_xor(void)
{
    /* Standard CRC-32 of "123456789" is 0xCBF43926 = ~crc32(~0, ...) in this form. */
    CHECK_EQ(~f2fs_crc32(~0u, "123456789", 9), 0xCBF43926u);
    CHECK_EQ(f2fs_crc32(0x1234, "", 0), 0x1234);
}

static void options_parse_and_reject(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    CHECK(o.read_only);
    CHECK(strcmp(o.backend, "uring") == 0);
    CHECK_EQ(f2fuse_option_set(&o, "backend", "psync"), 0);
    CHECK(strcmp(o.backend, "psync") == 0);
    CHECK_EQ(f2fuse_option_set(&o, "backend", "aio"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "16M"), 0);
    CHECK_EQ(o.cache_size, 16 << 20);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "2G"), 0);
    CHECK_EQ(o.cache_size, 2ull << 30);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "12x"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "-5"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "100"), -EINVAL); /* below 1 MiB */
    CHECK_EQ(f2fuse_option_set(&o, "queue_depth", "0"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "queue_depth", "128"), 0);
    CHECK_EQ(o.queue_depth, 128);
    CHECK_EQ(f2fuse_option_set(&o, "bogus", "1"), -ENOENT);
    CHECK_EQ(f2fuse_option_set(&o, "ro", "1"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "rw", NULL), 0);
    CHECK(!o.read_only);
}

static void format_sizes(void)
{
    CHECK_EQ(sizeof(struct f2fs_super_block), 3072);
    CHECK_EQ(sizeof(struct f2fs_node), 4096);
    CHECK_EQ(sizeof(struct f2fs_dentry_block), 4096);
    CHECK_EQ(sizeof(struct f2fs_summary_block), 4096);
    CHECK_EQ(offsetof(struct f2fs_inode, i_nid), 4052);
}

int main(void)
{
    RUN(hash_matches_f2fs_tools);
    RUN(crc_is_reflected_without_final_xor);
    RUN(options_parse_and_reject);
    RUN(format_sizes);
    return CHECK_DONE();
}
