/* The quota file's tree (quota_file.c) on its own: entries added and removed as the kernel's
 * quota_tree.c does (a scan finds each id once, where its path leads), blocks reused through
 * the free lists, and damaged trees refused instead of followed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/format.h"
#include "core/quota_file.h"

#define IDS 300

struct seen {
    uint32_t ids[IDS * 2];
    uint32_t offs[IDS * 2];
    int n;
};

static int collect(void *arg, const struct qentry *e, uint32_t off)
{
    struct seen *s = arg;
    for (int i = 0; i < s->n; i++)
        if (s->ids[i] == e->id)
            return -EUCLEAN;
    if (s->n == IDS * 2)
        return -ENOSPC;
    s->ids[s->n] = e->id;
    s->offs[s->n++] = off;
    return 0;
}

/* A spread of ids: small ones, neighbours, ones that differ only in a high byte. */
static uint32_t id_of(int i)
{
    return i % 3 == 0   ? (uint32_t)i
           : i % 3 == 1 ? 0x10000u * (uint32_t)i + 7
                        : 0xfffff000u + (uint32_t)i;
}

static int index_of(const struct seen *s, uint32_t id)
{
    for (int i = 0; i < s->n; i++)
        if (s->ids[i] == id)
            return i;
    return -1;
}

/* Reopens the in-memory file as a fresh reader would (checks and all). */
static int reopen(struct qfile *qf, struct qfile *out, char *why)
{
    size_t size = (size_t)qf->blocks * QUOTA_BLKSIZE;
    uint8_t *buf = malloc(size);
    memcpy(buf, qf->data, size);
    return qfile_open(out, qf->type, buf, size, why, 160);
}

static void test_insert_delete(void)
{
    struct qfile qf;
    CHECK_EQ(qfile_create(&qf, QUOTA_GRP), 0);
    uint32_t offs[IDS];
    for (int i = 0; i < IDS; i++) {
        CHECK_EQ(qfile_insert(&qf, id_of(i), &offs[i]), 0);
        struct qentry e = {.id = id_of(i), .space = 4096u * (uint32_t)i, .inodes = 1};
        qfile_put_entry(&qf, offs[i], &e);
    }
    uint32_t dup;
    CHECK_EQ(qfile_insert(&qf, id_of(5), &dup), -EEXIST);
    char why[160] = "";
    struct qfile back;
    CHECK_EQ(reopen(&qf, &back, why), 0);
    struct seen s = {0};
    CHECK_EQ(qfile_scan(&back, collect, &s, why, sizeof(why)), 0);
    CHECK_EQ(s.n, IDS);
    for (int i = 0; i < IDS; i++)
        CHECK(index_of(&s, id_of(i)) >= 0 && s.offs[index_of(&s, id_of(i))] == offs[i]);
    qfile_close(&back);
    /* half of them go; the other half is still found, the file holds together */
    for (int i = 0; i < IDS; i += 2)
        CHECK_EQ(qfile_delete(&qf, id_of(i), offs[i]), 0);
    uint32_t blocks = qf.blocks;
    CHECK_EQ(reopen(&qf, &back, why), 0);
    memset(&s, 0, sizeof(s));
    CHECK_EQ(qfile_scan(&back, collect, &s, why, sizeof(why)), 0);
    CHECK_EQ(s.n, IDS / 2);
    qfile_close(&back);
    /* new ids take freed slots and blocks before the file grows */
    for (int i = 0; i < IDS; i += 2) {
        CHECK_EQ(qfile_insert(&qf, id_of(i) + 1, &offs[i]), 0);
        qfile_put_entry(&qf, offs[i], &(struct qentry){.id = id_of(i) + 1, .inodes = 2});
    }
    CHECK(qf.blocks <= blocks + 8);
    CHECK_EQ(reopen(&qf, &back, why), 0);
    memset(&s, 0, sizeof(s));
    CHECK_EQ(qfile_scan(&back, collect, &s, why, sizeof(why)), 0);
    CHECK_EQ(s.n, IDS);
    qfile_close(&back);
    /* all gone: only the header and the root are in use */
    for (int i = 0; i < IDS; i++)
        CHECK_EQ(qfile_delete(&qf, i % 2 ? id_of(i) : id_of(i) + 1, offs[i]), 0);
    CHECK_EQ(reopen(&qf, &back, why), 0);
    memset(&s, 0, sizeof(s));
    CHECK_EQ(qfile_scan(&back, collect, &s, why, sizeof(why)), 0);
    CHECK_EQ(s.n, 0);
    qfile_close(&back);
    qfile_close(&qf);
}

/* id 0 with nothing would be an all-zero entry: stored with itime 1, read back as 0. */
static void test_zero_entry(void)
{
    struct qfile qf;
    CHECK_EQ(qfile_create(&qf, QUOTA_USR), 0);
    uint32_t off;
    CHECK_EQ(qfile_insert(&qf, 0, &off), 0);
    qfile_put_entry(&qf, off, &(struct qentry){0});
    struct seen s = {0};
    char why[160];
    CHECK_EQ(qfile_scan(&qf, collect, &s, why, sizeof(why)), 0);
    CHECK_EQ(s.n, 1);
    qfile_close(&qf);
}

/* Damage is refused with a reason, never followed. */
static void test_damage(void)
{
    struct qfile qf;
    CHECK_EQ(qfile_create(&qf, QUOTA_PRJ), 0);
    uint32_t off;
    CHECK_EQ(qfile_insert(&qf, 1234, &off), 0);
    qfile_put_entry(&qf, off, &(struct qentry){.id = 1234, .inodes = 1});
    char why[160];
    struct qfile bad;
    struct seen s;
    /* a root reference past the end */
    CHECK_EQ(reopen(&qf, &bad, why), 0);
    uint32_t far = htole32(999999);
    memcpy(bad.data + QUOTA_BLKSIZE, &far, 4);
    memset(&s, 0, sizeof(s));
    CHECK_EQ(qfile_scan(&bad, collect, &s, why, sizeof(why)), -EUCLEAN);
    qfile_close(&bad);
    /* a tree block referring back to the root: a loop */
    CHECK_EQ(reopen(&qf, &bad, why), 0);
    uint32_t root = htole32(QUOTA_TREE_ROOT), b;
    memcpy(&b, bad.data + QUOTA_BLKSIZE, 4); /* id 1234's first level: slot 0 */
    memcpy(bad.data + (size_t)le32(b) * QUOTA_BLKSIZE + 4, &root, 4);
    memset(&s, 0, sizeof(s));
    CHECK_EQ(qfile_scan(&bad, collect, &s, why, sizeof(why)), -EUCLEAN);
    qfile_close(&bad);
    /* a data block whose header miscounts its entries */
    CHECK_EQ(reopen(&qf, &bad, why), 0);
    bad.data[(off / QUOTA_BLKSIZE) * QUOTA_BLKSIZE + 8] = 5;
    memset(&s, 0, sizeof(s));
    CHECK_EQ(qfile_scan(&bad, collect, &s, why, sizeof(why)), -EUCLEAN);
    qfile_close(&bad);
    /* a wrong magic, and more blocks than the file has */
    CHECK_EQ(reopen(&qf, &bad, why), 0);
    qfile_close(&bad);
    uint8_t *buf = calloc(2, QUOTA_BLKSIZE);
    memcpy(buf, qf.data, 2 * QUOTA_BLKSIZE);
    buf[0] ^= 1;
    CHECK_EQ(qfile_open(&bad, QUOTA_PRJ, buf, 2 * QUOTA_BLKSIZE, why, sizeof(why)), -EUCLEAN);
    qfile_close(&bad);
    buf = calloc(2, QUOTA_BLKSIZE);
    memcpy(buf, qf.data, 2 * QUOTA_BLKSIZE);
    CHECK_EQ(qfile_open(&bad, QUOTA_PRJ, buf, 2 * QUOTA_BLKSIZE, why, sizeof(why)), -EUCLEAN);
    qfile_close(&bad);
    qfile_close(&qf);
}

int main(void)
{
    RUN(test_insert_delete);
    RUN(test_zero_entry);
    RUN(test_damage);
    return check_failures ? 1 : 0;
}
