/* Unit tests of the largest-extent rules (core/extent.c) against a model of a file's block
 * pointers: after every change the extent must map only what the pointers hold. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/extent.h"

#define FILE_BLOCKS 600

static uint32_t ext_fofs(const struct f2fs_inode *ri)
{
    return le32(ri->i_ext.fofs);
}
static uint32_t ext_blk(const struct f2fs_inode *ri)
{
    return le32(ri->i_ext.blk);
}
static uint32_t ext_len(const struct f2fs_inode *ri)
{
    return le32(ri->i_ext.len);
}

/* Every block inside the extent holds exactly the address it says. */
static int extent_true(const struct f2fs_inode *ri, const uint32_t *ptr)
{
    for (uint32_t k = 0; k < ext_len(ri); k++)
        if (ext_fofs(ri) + k >= FILE_BLOCKS || ptr[ext_fofs(ri) + k] != ext_blk(ri) + k)
            return 0;
    return 1;
}

static void set_ext(struct f2fs_inode *ri, uint32_t fofs, uint32_t blk, uint32_t len)
{
    ri->i_ext.fofs = htole32(fofs);
    ri->i_ext.blk = htole32(blk);
    ri->i_ext.len = htole32(len);
}

static void test_split_keeps_longer_side(void)
{
    struct f2fs_inode ri = {0};
    set_ext(&ri, 100, 5000, 200);
    CHECK(extent_forget_block(&ri, 150)); /* 50 before, 149 after */
    CHECK_EQ(ext_fofs(&ri), 151);
    CHECK_EQ(ext_blk(&ri), 5051);
    CHECK_EQ(ext_len(&ri), 149);
    CHECK(extent_forget_block(&ri, 290)); /* 139 before, 9 after */
    CHECK_EQ(ext_fofs(&ri), 151);
    CHECK_EQ(ext_len(&ri), 139);
    CHECK(!extent_forget_block(&ri, 10)); /* outside */
    CHECK(extent_forget_block(&ri, 151)); /* its first block */
    CHECK_EQ(ext_fofs(&ri), 152);
    CHECK_EQ(ext_blk(&ri), 5052);
    CHECK_EQ(ext_len(&ri), 138);
    set_ext(&ri, 7, 900, 1);
    CHECK(extent_forget_block(&ri, 7));
    CHECK_EQ(ext_len(&ri), 0);
    CHECK_EQ(ext_blk(&ri), 0);
}

static void test_sequential_write_one_extent(void)
{
    struct f2fs_inode ri = {0};
    struct extent_run run = {0};
    for (uint32_t i = 0; i < 300; i++)
        extent_assigned(&ri, &run, i, 7000 + i);
    CHECK_EQ(ext_fofs(&ri), 0);
    CHECK_EQ(ext_blk(&ri), 7000);
    CHECK_EQ(ext_len(&ri), 300);
    /* a later batch continuing both file and device order grows it */
    struct extent_run run2 = {0};
    for (uint32_t i = 300; i < 310; i++)
        extent_assigned(&ri, &run2, i, 7000 + i);
    CHECK_EQ(ext_len(&ri), 310);
    /* a run elsewhere replaces it only once it is longer */
    struct extent_run run3 = {0};
    for (uint32_t i = 0; i < 100; i++)
        extent_assigned(&ri, &run3, 400 + i, 20000 + i);
    CHECK_EQ(ext_fofs(&ri), 0);
    CHECK_EQ(ext_len(&ri), 310);
}

static void test_overwrite_moves_to_the_new_run(void)
{
    struct f2fs_inode ri = {0};
    set_ext(&ri, 0, 1000, 100);
    struct extent_run run = {0};
    for (uint32_t i = 10; i < 90; i++) /* 80 blocks rewritten elsewhere */
        extent_assigned(&ri, &run, i, 50000 + i);
    CHECK_EQ(ext_fofs(&ri), 10);
    CHECK_EQ(ext_blk(&ri), 50010);
    CHECK_EQ(ext_len(&ri), 80);
}

static void test_truncate_cuts(void)
{
    struct f2fs_inode ri = {0};
    set_ext(&ri, 10, 1000, 100);
    CHECK(!extent_truncate(&ri, 200));
    CHECK(extent_truncate(&ri, 60));
    CHECK_EQ(ext_len(&ri), 50);
    CHECK(extent_truncate(&ri, 5));
    CHECK_EQ(ext_len(&ri), 0);
    CHECK_EQ(ext_fofs(&ri), 0);
}

/* Random changes of a file's pointers; the extent stays true after each. */
static void test_random_against_model(unsigned long seed)
{
    uint64_t x = seed * 2654435761u + 1;
#define NEXT() (x ^= x << 13, x ^= x >> 7, x ^= x << 17, x)
    static uint32_t ptr[FILE_BLOCKS];
    uint32_t next_blk = 10000;
    for (int round = 0; round < 200; round++) {
        struct f2fs_inode ri = {0};
        memset(ptr, 0, sizeof(ptr));
        /* a loaded file: contiguous, with its extent */
        uint32_t size = 1 + (uint32_t)(NEXT() % FILE_BLOCKS);
        for (uint32_t i = 0; i < size; i++)
            ptr[i] = next_blk + i;
        set_ext(&ri, 0, next_blk, size);
        next_blk += size + 10;
        int bad = 0;
        for (int op = 0; op < 60 && !bad; op++) {
            uint32_t kind = (uint32_t)(NEXT() % 4), at = (uint32_t)(NEXT() % FILE_BLOCKS);
            uint32_t n = 1 + (uint32_t)(NEXT() % 64);
            if (kind == 0 || kind == 1) { /* writeback of a run (in order, maybe contiguous) */
                struct extent_run run = {0};
                for (uint32_t i = at; i < at + n && i < FILE_BLOCKS; i++) {
                    uint32_t b = kind == 0 ? next_blk++ : (next_blk += 2);
                    ptr[i] = b;
                    extent_assigned(&ri, &run, i, b);
                }
            } else if (kind == 2) { /* holes punched or reserved */
                for (uint32_t i = at; i < at + n && i < FILE_BLOCKS; i++) {
                    ptr[i] = 0;
                    extent_forget_block(&ri, i);
                }
            } else { /* truncate */
                for (uint32_t i = at; i < FILE_BLOCKS; i++)
                    ptr[i] = 0;
                extent_truncate(&ri, at);
            }
            if (!extent_true(&ri, ptr)) {
                fprintf(stderr,
                        "seed %lu round %d op %d (kind %u at %u n %u): extent [%u %u %u] "
                        "is not true\n",
                        seed, round, op, kind, at, n, ext_fofs(&ri), ext_blk(&ri), ext_len(&ri));
                bad = 1;
            }
        }
        CHECK(!bad);
    }
#undef NEXT
}

int main(void)
{
    const char *env = getenv("F2FUSE_SEED");
    unsigned long seed = env ? strtoul(env, NULL, 10) : (unsigned long)time(NULL);
    printf("test_extent: seed %lu (replay with F2FUSE_SEED=%lu)\n", seed, seed);
    RUN(test_split_keeps_longer_side);
    RUN(test_sequential_write_one_extent);
    RUN(test_overwrite_moves_to_the_new_run);
    RUN(test_truncate_cuts);
    test_random_against_model(seed);
    printf("%s test_random_against_model\n", check_failures ? "FAIL" : "ok  ");
    return CHECK_DONE();
}
