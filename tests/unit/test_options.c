/* The option tables: defaults as documented, every row's default and range consistent,
 * parsing and validation as the table says, the lists generated from it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/options.h"
#include "check.h"
#include "core/quota.h"
#include "f2fuse.h"
#include "f2fuse_test.h"

/* The defaults the man page and README promise. */
static void test_defaults(void)
{
    struct f2fuse_options o;
    memset(&o, 0xa5, sizeof(o)); /* init must set every field, not rely on a zeroed struct */
    f2fuse_options_init(&o);
    CHECK(strcmp(o.backend, "uring") == 0);
    CHECK_EQ(o.quota_limits, 0);       /* every type's limits bind */
    CHECK_EQ(o.compress_algorithm, 1); /* lz4, the kernel's default */
    CHECK_EQ(o.compress_level, 0);
    CHECK_EQ(o.compress_log_size, 2);
    CHECK(!o.compress_chksum);
    CHECK_EQ(o.compress_ext_count, 0);
    CHECK_EQ(o.nocompress_ext_count, 0);
    CHECK_EQ(o.queue_depth, 64);
    CHECK_EQ(o.net_timeout, 30);
    CHECK_EQ(o.connections, 1);
    CHECK(o.ceph_id[0] == 0 && o.ceph_conf[0] == 0 && o.ceph_keyring[0] == 0);
    CHECK_EQ(o.cache_size, 0); /* auto */
    CHECK_EQ(o.cache_min, 32ull << 20);
    CHECK_EQ(o.cache_max, 0); /* auto: what memory allows */
    CHECK(o.read_only);
    CHECK_EQ(o.checkpoint_interval, 5);
    CHECK(o.checkpoint_merge);
    CHECK_EQ(o.checkpoint_batch_us, 15000);
    CHECK(o.fsync_fast);
    CHECK(o.flush_merge);
    CHECK(o.extent_cache);
    CHECK(o.dir_index);
    CHECK(!o.checkpoint_all_data);
    CHECK(!o.track_lookups);
    CHECK(o.discard);
    CHECK_EQ(o.discard_mode, F2FUSE_DISCARD_PARALLEL);
    CHECK_EQ(o.discard_max, 64ull << 20);
    CHECK_EQ(o.discard_qd, 32);
    CHECK_EQ(o.discard_idle_ms, 100);
    CHECK_EQ(o.dirty_bytes, 0);
    CHECK_EQ(o.dirty_ratio, 20);
    CHECK_EQ(o.dirty_background_bytes, 0);
    CHECK_EQ(o.dirty_background_ratio, 10);
    CHECK_EQ(o.dirty_expire_ms, 30000);
    CHECK_EQ(o.writeback_interval_ms, 5000);
    CHECK_EQ(o.dirty_background_time, 0);
    CHECK_EQ(o.dev_bw, 0);
    CHECK_EQ(o.background_gc, 1); /* on */
    CHECK_EQ(o.gc_idle_ms, 1000);
    CHECK(o.gc_ssr);
    CHECK_EQ(o.offset, 0);
    CHECK_EQ(o.partition[0], '\0');
    CHECK_EQ(o.fscrypt_keys[0], '\0');
}

/* Every row is well formed: names unique over both tables, help present, each default
 * accepted by its own parser, and for numbers the range ends accepted and one past refused. */
static void check_table(const struct optspec_table *t, void *target, size_t size)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct optspec *s = &t->specs[i];
        CHECK(s->name && s->help && s->help[0]);
        CHECK(optspec_find(&library_options, s->name, NULL) == NULL || t == &library_options);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(t->specs[j].name, s->name) != 0);
        CHECK(s->kind == OPTSPEC_CUSTOM || s->offset + s->size <= size);
        if (s->fallback && s->kind != OPTSPEC_FLAG) {
            int err = optspec_set(t, target, s->name, s->fallback);
            if (err)
                fprintf(stderr, "default of %s (%s) refused: %d\n", s->name, s->fallback, err);
            CHECK_EQ(err, 0);
        }
        if (s->kind != OPTSPEC_NUMBER)
            continue;
        char v[32];
        snprintf(v, sizeof(v), "%llu", (unsigned long long)s->min);
        CHECK_EQ(optspec_set(t, target, s->name, v), 0);
        CHECK_EQ(optspec_number(s, target), s->min);
        if (s->max != UINT64_MAX) {
            snprintf(v, sizeof(v), "%llu", (unsigned long long)s->max);
            CHECK_EQ(optspec_set(t, target, s->name, v), 0);
            CHECK_EQ(optspec_number(s, target), s->max);
            snprintf(v, sizeof(v), "%llu", (unsigned long long)s->max + 1);
            CHECK_EQ(optspec_set(t, target, s->name, v), -EINVAL);
        }
        if (s->min > 0 && !(s->flags & OPTSPEC_ZERO_OFF)) {
            snprintf(v, sizeof(v), "%llu", (unsigned long long)s->min - 1);
            CHECK_EQ(optspec_set(t, target, s->name, v), -EINVAL);
        }
        CHECK_EQ(optspec_set(t, target, s->name, NULL), -EINVAL);
        CHECK_EQ(optspec_set(t, target, s->name, "12q"), -EINVAL);
    }
}

static void test_tables(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    check_table(&library_options, &o, sizeof(o));
    struct f2fuse_test_options t = {0};
    check_table(&test_options, &t, sizeof(t));
    CHECK_EQ(library_options.count, 48); /* a new option: add it to test_defaults too */
}

/* fscrypt_key= is repeatable: each value is kept, one per line; no value, a newline in one or
 * more than the list holds is refused. */
static void test_fscrypt_key_option(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    CHECK_EQ(f2fuse_option_set(&o, "fscrypt_key", "/a/key"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "fscrypt_key", "0123456789abcdef:/b"), 0);
    CHECK(strcmp(o.fscrypt_keys, "/a/key\n0123456789abcdef:/b\n") == 0);
    CHECK_EQ(f2fuse_option_set(&o, "fscrypt_key", NULL), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "fscrypt_key", "a\nb"), -EINVAL);
    char big[2100];
    memset(big, 'k', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    CHECK_EQ(f2fuse_option_set(&o, "fscrypt_key", big), -EINVAL);
    CHECK(strcmp(o.fscrypt_keys, "/a/key\n0123456789abcdef:/b\n") == 0);
}

/* The quota options in the kernel's order: each type option adds its type, noquota clears,
 * quota is usrquota; none takes a value. */
static void test_quota_options(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    CHECK_EQ(f2fuse_option_set(&o, "grpquota", NULL), 0);
    CHECK_EQ(o.quota_limits, QUOTA_LIMITS_CHOSEN | 1u << QUOTA_GRP);
    CHECK_EQ(f2fuse_option_set(&o, "quota", NULL), 0);
    CHECK_EQ(o.quota_limits, QUOTA_LIMITS_CHOSEN | 1u << QUOTA_GRP | 1u << QUOTA_USR);
    CHECK_EQ(f2fuse_option_set(&o, "noquota", NULL), 0);
    CHECK_EQ(o.quota_limits, QUOTA_LIMITS_CHOSEN);
    CHECK_EQ(f2fuse_option_set(&o, "prjquota", NULL), 0);
    CHECK_EQ(o.quota_limits, QUOTA_LIMITS_CHOSEN | 1u << QUOTA_PRJ);
    CHECK_EQ(f2fuse_option_set(&o, "usrquota", "1"), -EINVAL);
}

static void test_parsing(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    CHECK_EQ(f2fuse_option_set(&o, "rw", NULL), 0);
    CHECK(!o.read_only);
    CHECK_EQ(f2fuse_option_set(&o, "rw", "yes"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "nodiscard", NULL), 0);
    CHECK(!o.discard);
    CHECK_EQ(f2fuse_option_set(&o, "nodiscard", "1"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_mode", "serial"), 0);
    CHECK_EQ(o.discard_mode, F2FUSE_DISCARD_SERIAL);
    CHECK_EQ(f2fuse_option_set(&o, "discard_mode", "fast"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "fsync", NULL), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "fsync", "checkpoint"), 0);
    CHECK(!o.fsync_fast);
    CHECK_EQ(f2fuse_option_set(&o, "checkpoint_data", "all"), 0);
    CHECK(o.checkpoint_all_data);
    CHECK_EQ(f2fuse_option_set(&o, "background_gc", "sync"), 0);
    CHECK_EQ(o.background_gc, 2);
    /* a value that must not outlive the call */
    char word[8] = "psync";
    CHECK_EQ(f2fuse_option_set(&o, "backend", word), 0);
    word[0] = 'x';
    CHECK(strcmp(o.backend, "psync") == 0);
    /* dev_bw: 0 is off, below 64 KiB/s refused */
    CHECK_EQ(f2fuse_option_set(&o, "dev_bw", "0"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "dev_bw", "1000"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "dev_bw", "25M"), 0);
    CHECK_EQ(o.dev_bw, 25ull << 20);
    /* a ratio replaces the byte value it competes with, as vm.dirty_* */
    CHECK_EQ(f2fuse_option_set(&o, "dirty_bytes", "8M"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "dirty_ratio", "30"), 0);
    CHECK_EQ(o.dirty_ratio, 30);
    CHECK_EQ(o.dirty_bytes, 0);
    CHECK_EQ(f2fuse_option_set(&o, "dirty_ratio", "101"), -EINVAL);
    CHECK_EQ(o.dirty_ratio, 30);
    CHECK_EQ(f2fuse_option_set(&o, "partition", ""), -EINVAL);
    char longname[100];
    memset(longname, 'p', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK_EQ(f2fuse_option_set(&o, "partition", longname), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "partition", "userdata"), 0);
    CHECK(strcmp(o.partition, "userdata") == 0);
    CHECK_EQ(f2fuse_option_set(&o, "powercut", "3"), -ENOENT); /* the test entry point's */
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "2t"), 0);    /* K, M, G, T in either case */
    CHECK_EQ(o.cache_size, 2ull << 40);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "3K"), -EINVAL); /* below 1 MiB */
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "4P"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "16777216T"), -EINVAL); /* 2^64 */
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "auto"), 0);
    CHECK_EQ(o.cache_size, 0);
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "0"), -EINVAL); /* "auto", not 0 */
    CHECK_EQ(f2fuse_option_set(&o, "cache_size", "automatic"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "cache_min", "auto"), -EINVAL); /* a floor is a number */
    CHECK_EQ(f2fuse_option_set(&o, "cache_min", "512K"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "cache_min", "128M"), 0);
    CHECK_EQ(o.cache_min, 128ull << 20);
    CHECK_EQ(f2fuse_option_set(&o, "cache_max", "1G"), 0);
    CHECK_EQ(o.cache_max, 1ull << 30);
    CHECK_EQ(f2fuse_option_set(&o, "cache_max", "auto"), 0);
    CHECK_EQ(o.cache_max, 0);
}

static void test_test_options(void)
{
    struct f2fuse_options o;
    struct f2fuse_test_options t = {0};
    f2fuse_options_init(&o);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut", "17"), 0);
    CHECK_EQ(t.powercut_after, 17);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut_torn", NULL), 0);
    CHECK(t.powercut_torn);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "powercut_torn", "1"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "cache_size", "8M"), 0); /* falls through */
    CHECK_EQ(o.cache_size, 8ull << 20);
    for (int i = 0; i < F2FUSE_MAX_FAULTS; i++)
        CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write:3"), 0);
    CHECK_EQ(t.nfaults, F2FUSE_MAX_FAULTS);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "write:3"), -EINVAL);
    CHECK_EQ(f2fuse_test_option_set(&o, &t, "fault", "teleport:3"), -EINVAL);
}

/* The lists are read off the table: every row appears, in the form a user types. */
static void test_descriptions(void)
{
    const char *names = f2fuse_option_names();
    CHECK(strstr(names, "cache_size=auto|BYTES[K|M|G]") != NULL);
    CHECK(strstr(names, "cache_min=BYTES[K|M|G]") != NULL);
    CHECK(strstr(names, "discard, nodiscard") != NULL);
    CHECK(strstr(names, "discard_mode=block|serial|parallel") != NULL);
    CHECK(strstr(names, "(tests) powercut=N") != NULL);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    CHECK(out != NULL);
    if (!out)
        return;
    f2fuse_options_print(out, F2FUSE_OPTIONS_LINES);
    fclose(out);
    for (size_t i = 0; i < library_options.count; i++)
        CHECK(strstr(text, library_options.specs[i].help) != NULL);
    CHECK(strstr(text, "default auto; auto, 1M or more; f2fuse set changes it on any") != NULL);
    CHECK(strstr(text, "default 32M; 1M or more") != NULL);
    CHECK(strstr(text, "default 0; 0 (off), 64K or more; f2fuse set changes it on any") != NULL);
    free(text);
}

/* The compression options as the kernel's parse_options takes them. */
static void test_compress_options(void)
{
    struct f2fuse_options o;
    f2fuse_options_init(&o);
    static const struct {
        const char *value;
        int err;
        unsigned alg, level;
    } algs[] = {
        {"lzo", 0, 0, 0},          {"lz4", 0, 1, 0},
        {"zstd", 0, 2, 0},         {"lzo-rle", 0, 3, 0},
        {"lz4:3", 0, 1, 3},        {"lz4:12", 0, 1, 12},
        {"zstd:1", 0, 2, 1},       {"zstd:22", 0, 2, 22},
        {"lz4:2", -EINVAL, 0, 0},  {"lz4:13", -EINVAL, 0, 0},
        {"zstd:0", -EINVAL, 0, 0}, {"zstd:23", -EINVAL, 0, 0},
        {"lzo:1", -EINVAL, 0, 0},  {"lzo-rle:4", -EINVAL, 0, 0},
        {"lz4:", -EINVAL, 0, 0},   {"lz4:3x", -EINVAL, 0, 0},
        {"gzip", -EINVAL, 0, 0},   {"lz", -EINVAL, 0, 0},
    };
    for (size_t i = 0; i < sizeof(algs) / sizeof(algs[0]); i++) {
        o.compress_algorithm = 9;
        o.compress_level = 9;
        CHECK_EQ(f2fuse_option_set(&o, "compress_algorithm", algs[i].value), algs[i].err);
        if (!algs[i].err) {
            CHECK_EQ(o.compress_algorithm, algs[i].alg);
            CHECK_EQ(o.compress_level, algs[i].level);
        }
    }
    CHECK_EQ(f2fuse_option_set(&o, "compress_algorithm", NULL), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_log_size", "8"), 0);
    CHECK_EQ(o.compress_log_size, 8);
    CHECK_EQ(f2fuse_option_set(&o, "compress_log_size", "1"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_log_size", "9"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_chksum", NULL), 0);
    CHECK(o.compress_chksum);
    /* extensions: appended, at most 16 of 7 characters; never in both lists; no "*" for
     * nocompress */
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "txt"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "log"), 0);
    CHECK_EQ(o.compress_ext_count, 2);
    CHECK(strcmp(o.compress_ext[1], "log") == 0);
    CHECK_EQ(f2fuse_option_set(&o, "nocompress_extension", "TXT"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "nocompress_extension", "*"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "nocompress_extension", "bin"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "BIN"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "1234567"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "12345678"), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", ""), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", NULL), -EINVAL);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "*"), 0);
    for (int i = (int)o.compress_ext_count; i < 16; i++)
        CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "e"), 0);
    CHECK_EQ(f2fuse_option_set(&o, "compress_extension", "f"), -EINVAL);
}

int main(void)
{
    RUN(test_defaults);
    RUN(test_tables);
    RUN(test_parsing);
    RUN(test_quota_options);
    RUN(test_compress_options);
    RUN(test_fscrypt_key_option);
    RUN(test_test_options);
    RUN(test_descriptions);
    return check_failures ? 1 : 0;
}
