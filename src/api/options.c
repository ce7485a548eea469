/* The library's options: one table (util/optspec.h) that parses them, holds their defaults
 * and ranges, says which a running mount may change, and describes them for --help,
 * `f2fuse options`, the man page and `f2fuse stat`. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "api/keys.h"
#include "api/options.h"

#define OPT(member) OPTSPEC_FIELD(struct f2fuse_options, member)
#define DAY_MS      86400000ull

static const struct optspec_choice backends[] = {{"uring", 0}, {"psync", 0}, {NULL, 0}};
static const struct optspec_choice fsync_modes[] = {{"fast", 1}, {"checkpoint", 0}, {NULL, 0}};
static const struct optspec_choice checkpoint_data[] = {{"metadata", 0}, {"all", 1}, {NULL, 0}};
static const struct optspec_choice discard_modes[] = {{"block", F2FUSE_DISCARD_BLOCK},
                                                      {"serial", F2FUSE_DISCARD_SERIAL},
                                                      {"parallel", F2FUSE_DISCARD_PARALLEL},
                                                      {NULL, 0}};
static const struct optspec_choice gc_modes[] = {
    {"on", F2FUSE_BGGC_ON}, {"off", F2FUSE_BGGC_OFF}, {"sync", F2FUSE_BGGC_SYNC}, {NULL, 0}};

/* Quota limits (quota.c): each of usrquota, grpquota, prjquota (and quota, which the kernel
 * takes for usrquota) makes its type's limits bind, noquota none; in the order given, as
 * the kernel parses them.  Without any of them every type's limits bind. */
static int quota_option(void *target, const char *value, unsigned bits)
{
    unsigned *chosen = &((struct f2fuse_options *)target)->quota_limits;
    if (value)
        return -EINVAL;
    if (!(*chosen & QUOTA_LIMITS_CHOSEN) || !bits)
        *chosen = QUOTA_LIMITS_CHOSEN;
    *chosen |= bits;
    return 0;
}

static int set_usrquota(void *target, const char *value)
{
    return quota_option(target, value, 1u << QUOTA_USR);
}

static int set_grpquota(void *target, const char *value)
{
    return quota_option(target, value, 1u << QUOTA_GRP);
}

static int set_prjquota(void *target, const char *value)
{
    return quota_option(target, value, 1u << QUOTA_PRJ);
}

static int set_noquota(void *target, const char *value)
{
    return quota_option(target, value, 0);
}

/* compress_algorithm=NAME[:LEVEL], as the kernel parses it: a level for lz4 (LZ4HC, 3..12)
 * and zstd (1..22) only. */
static int set_compress_algorithm(void *target, const char *value)
{
    struct f2fuse_options *o = target;
    static const char *const names[] = {"lzo", "lz4", "zstd", "lzo-rle"};
    static const unsigned max_level[] = {0, 12, 22, 0};
    if (!value)
        return -EINVAL;
    const char *colon = strchr(value, ':');
    size_t len = colon ? (size_t)(colon - value) : strlen(value);
    for (unsigned a = 0; a < 4; a++) {
        if (strlen(names[a]) != len || strncmp(value, names[a], len) != 0)
            continue;
        unsigned level = 0;
        if (colon) {
            char *end;
            unsigned long l = strtoul(colon + 1, &end, 10);
            unsigned min = a == 1 ? 3 : 1;
            if (!max_level[a] || !colon[1] || *end || l < min || l > max_level[a])
                return -EINVAL;
            level = (unsigned)l;
        }
        o->compress_algorithm = a;
        o->compress_level = level;
        return 0;
    }
    return -EINVAL;
}

/* compress_extension= and nocompress_extension=: each adds one to its list (16 at most, 7
 * characters each); the kernel refuses one in both lists and "*" for nocompress. */
static int add_extension(char (*list)[8], unsigned *count, char (*other)[8], unsigned other_count,
                         const char *value, bool no)
{
    if (!value || !value[0] || strlen(value) >= 8 || *count >= 16 || (no && !strcmp(value, "*")))
        return -EINVAL;
    for (unsigned i = 0; i < other_count; i++)
        if (!strcasecmp(other[i], value))
            return -EINVAL;
    memcpy(list[(*count)++], value, strlen(value) + 1);
    return 0;
}

static int set_compress_extension(void *target, const char *value)
{
    struct f2fuse_options *o = target;
    return add_extension(o->compress_ext, &o->compress_ext_count, o->nocompress_ext,
                         o->nocompress_ext_count, value, false);
}

static int set_nocompress_extension(void *target, const char *value)
{
    struct f2fuse_options *o = target;
    return add_extension(o->nocompress_ext, &o->nocompress_ext_count, o->compress_ext,
                         o->compress_ext_count, value, true);
}

/* fscrypt_key=[DESC:]FILE, repeatable: every value is kept (keys.c reads them at open). */
static int add_fscrypt_key(void *target, const char *value)
{
    struct f2fuse_options *o = target;
    return keys_option_add(o->fscrypt_keys, sizeof(o->fscrypt_keys), value);
}

static const struct optspec library_specs[] = {
    {.name = "ro",
     .negated = "rw",
     .kind = OPTSPEC_FLAG,
     OPT(read_only),
     .fallback = "on",
     .help = "Mount read-only, or read-write."},
    {.name = "offset",
     .kind = OPTSPEC_NUMBER,
     OPT(offset),
     .max = UINT64_MAX,
     .metavar = "BYTES", /* checked against the image at open */
     .help = "The file system starts this many bytes into the image (a multiple of 4096)."},
    {.name = "partition",
     .kind = OPTSPEC_TEXT,
     OPT(partition),
     .metavar = "N|NAME",
     .help = "Mount this partition (number or GPT name) of a whole-disk image."},
    {.name = "backend",
     .kind = OPTSPEC_CHOICE,
     OPT(backend),
     .choices = backends,
     .flags = OPTSPEC_STORE_WORD,
     .fallback = "uring",
     .help = "How the image is read and written: io_uring with O_DIRECT, or pread/pwrite."},
    {.name = "queue_depth",
     .kind = OPTSPEC_NUMBER,
     OPT(queue_depth),
     .min = 1,
     .max = 4096,
     .fallback = "64",
     .metavar = "N",
     .help = "Requests the io_uring backend keeps in flight (NBD: per connection)."},
    {.name = "net_timeout",
     .kind = OPTSPEC_NUMBER,
     OPT(net_timeout),
     .min = 1,
     .max = 86400,
     .fallback = "30",
     .metavar = "SECONDS",
     .help = "NBD, RBD: requests fail after the server is unreachable or silent this long."},
    {.name = "connections",
     .kind = OPTSPEC_NUMBER,
     OPT(connections),
     .min = 1,
     .max = 16,
     .fallback = "1",
     .metavar = "N",
     .help = "NBD connections, when the server allows several (multi-conn)."},
    {.name = "id",
     .kind = OPTSPEC_TEXT,
     OPT(ceph_id),
     .metavar = "NAME",
     .help = "RBD: the Ceph client's name, client.NAME (default admin)."},
    {.name = "conf",
     .kind = OPTSPEC_TEXT,
     OPT(ceph_conf),
     .metavar = "FILE",
     .help = "RBD: the Ceph configuration file (default: librados' search)."},
    {.name = "keyring",
     .kind = OPTSPEC_TEXT,
     OPT(ceph_keyring),
     .metavar = "FILE",
     .help = "RBD: the keyring holding the client's key."},
    {.name = "fscrypt_key",
     .kind = OPTSPEC_CUSTOM,
     .parse = add_fscrypt_key,
     .metavar = "fscrypt_key=[DESC:]FILE",
     .help = "An fscrypt master key (16..64 bytes, raw or hex) for encrypted trees; repeatable. "
             "DESC: the v1 descriptor in 16 hex digits, if not the usual one."},
    /* auto (cachesize.c): from free memory and the memory cgroup, given back under pressure.
     * A fixed size of less than 1 MiB left a read-write mount checkpointing at every step. */
    {.name = "cache_size",
     .kind = OPTSPEC_NUMBER,
     OPT(cache_size),
     .min = 1u << 20,
     .max = UINT64_MAX,
     .fallback = "auto",
     .metavar = "auto|BYTES[K|M|G]",
     .flags = OPTSPEC_AUTO | OPTSPEC_LIVE_RO,
     .help = "Memory for f2fuse's page cache (nodes, metadata, directories, dirty data); "
             "auto follows free memory."},
    {.name = "cache_min",
     .kind = OPTSPEC_NUMBER,
     OPT(cache_min),
     .min = 1u << 20,
     .max = UINT64_MAX,
     .fallback = "32M",
     .metavar = "BYTES[K|M|G]",
     .flags = OPTSPEC_LIVE_RO,
     .help = "cache_size=auto: the size it keeps under memory pressure (a memory cgroup "
             "may cut it)."},
    {.name = "cache_max",
     .kind = OPTSPEC_NUMBER,
     OPT(cache_max),
     .min = 1u << 20,
     .max = UINT64_MAX,
     .fallback = "auto",
     .metavar = "auto|BYTES[K|M|G]",
     .flags = OPTSPEC_AUTO | OPTSPEC_LIVE_RO,
     .help = "cache_size=auto: the most it takes; auto: what free memory allows."},
    {.name = "checkpoint_interval",
     .kind = OPTSPEC_NUMBER,
     OPT(checkpoint_interval),
     .max = 86400,
     .fallback = "5",
     .metavar = "SECONDS",
     .help = "A mount with changes checkpoints at least this often; 0 turns the timer off."},
    {.name = "checkpoint_merge",
     .negated = "nocheckpoint_merge",
     .kind = OPTSPEC_FLAG,
     OPT(checkpoint_merge),
     .fallback = "on",
     .help = "One thread serves concurrent checkpoint requests with one checkpoint."},
    {.name = "checkpoint_batch_us",
     .kind = OPTSPEC_NUMBER,
     OPT(checkpoint_batch_us),
     .max = 1000000,
     .fallback = "15000",
     .metavar = "N",
     .help = "Microseconds a merged checkpoint waits for recent requesters; 0 never waits."},
    {.name = "fsync",
     .kind = OPTSPEC_CHOICE,
     OPT(fsync_fast),
     .choices = fsync_modes,
     .fallback = "fast",
     .help = "fsync writes the file and its nodes (roll-forward), or a full checkpoint."},
    {.name = "flush_merge",
     .negated = "noflush_merge",
     .kind = OPTSPEC_FLAG,
     OPT(flush_merge),
     .fallback = "on",
     .help = "Concurrent fast fsyncs share device flushes."},
    {.name = "extent_cache",
     .negated = "noextent_cache",
     .kind = OPTSPEC_FLAG,
     OPT(extent_cache),
     .fallback = "on",
     .help = "Reads map blocks inside an inode's largest extent without reading its node."},
    {.name = "dir_index",
     .negated = "nodir_index",
     .kind = OPTSPEC_FLAG,
     OPT(dir_index),
     .fallback = "on",
     .help = "Big directories get an in-memory index by name hash for lookups."},
    {.name = "checkpoint_data",
     .kind = OPTSPEC_CHOICE,
     OPT(checkpoint_all_data),
     .choices = checkpoint_data,
     .fallback = "metadata",
     .help = "What a checkpoint writes besides metadata: nothing, or all dirty file data."},
    /* On by default, as in the kernel (when the device supports it): an image file gives
     * freed space back to the host as it goes, and what it costs stays off the foreground
     * (a background thread, low priority, runs of 16 blocks or more; measured within noise
     * on 4 KiB random writes). */
    {.name = "discard",
     .negated = "nodiscard",
     .kind = OPTSPEC_FLAG,
     OPT(discard),
     .fallback = "on",
     .help = "Discard what each checkpoint frees (holes in an image file)."},
    {.name = "discard_mode",
     .kind = OPTSPEC_CHOICE,
     OPT(discard_mode),
     .choices = discard_modes,
     .fallback = "parallel",
     .help = "Per block, merged ranges one at a time, or merged ranges in parallel."},
    {.name = "discard_max",
     .kind = OPTSPEC_NUMBER,
     OPT(discard_max),
     .min = F2FS_BLKSIZE,
     .max = (1ull << 32) - F2FS_BLKSIZE,
     .fallback = "64M",
     .metavar = "BYTES[K|M|G]",
     .help = "Largest single discard request."},
    {.name = "discard_qd",
     .kind = OPTSPEC_NUMBER,
     OPT(discard_qd),
     .min = 1,
     .max = 4096,
     .fallback = "32",
     .metavar = "N",
     .help = "Discard requests in flight in parallel mode."},
    {.name = "discard_idle_ms",
     .kind = OPTSPEC_NUMBER,
     OPT(discard_idle_ms),
     .max = 60000,
     .fallback = "100",
     .metavar = "MS",
     .help = "Online discard waits this long without writes; 0 discards at once."},
    {.name = "dirty_bytes",
     .kind = OPTSPEC_NUMBER,
     OPT(dirty_bytes),
     .max = UINT64_MAX,
     .metavar = "BYTES",
     .flags = OPTSPEC_LIVE,
     .help = "Writers wait above this much dirty data; 0 uses dirty_ratio."},
    {.name = "dirty_ratio",
     .kind = OPTSPEC_NUMBER,
     OPT(dirty_ratio),
     .max = 100,
     .fallback = "20",
     .metavar = "PCT",
     .flags = OPTSPEC_LIVE,
     .clears = "dirty_bytes",
     .help = "The writers' limit as a percentage of cache_size (clears dirty_bytes)."},
    {.name = "dirty_background_bytes",
     .kind = OPTSPEC_NUMBER,
     OPT(dirty_background_bytes),
     .max = UINT64_MAX,
     .metavar = "BYTES",
     .flags = OPTSPEC_LIVE,
     .help = "Background writeback starts above this much dirty data; 0 uses the ratio."},
    {.name = "dirty_background_ratio",
     .kind = OPTSPEC_NUMBER,
     OPT(dirty_background_ratio),
     .max = 100,
     .fallback = "10",
     .metavar = "PCT",
     .flags = OPTSPEC_LIVE,
     .clears = "dirty_background_bytes",
     .help = "The background threshold as a percentage of cache_size."},
    {.name = "dirty_expire_ms",
     .kind = OPTSPEC_NUMBER,
     OPT(dirty_expire_ms),
     .max = DAY_MS,
     .fallback = "30000",
     .metavar = "MS",
     .flags = OPTSPEC_LIVE,
     .help = "Data dirty for longer than this is written back."},
    {.name = "writeback_interval_ms",
     .kind = OPTSPEC_NUMBER,
     OPT(writeback_interval_ms),
     .max = DAY_MS,
     .fallback = "5000",
     .metavar = "MS",
     .flags = OPTSPEC_LIVE,
     .help = "The flusher's period; 0 turns the periodic flush off."},
    {.name = "dirty_background_time",
     .kind = OPTSPEC_NUMBER,
     OPT(dirty_background_time),
     .max = DAY_MS,
     .metavar = "MS",
     .flags = OPTSPEC_LIVE,
     .help = "Background writeback also above the device's write bandwidth times this."},
    /* below 64 KiB/s a 4 KiB block would take most of a second */
    {.name = "dev_bw",
     .kind = OPTSPEC_NUMBER,
     OPT(dev_bw),
     .min = 65536,
     .max = UINT64_MAX,
     .metavar = "BYTES_PER_S",
     .flags = OPTSPEC_ZERO_OFF | OPTSPEC_LIVE | OPTSPEC_LIVE_RO,
     .help = "For experiments: the device is limited to this bandwidth; 0 is unlimited."},
    {.name = "background_gc",
     .kind = OPTSPEC_CHOICE,
     OPT(background_gc),
     .choices = gc_modes,
     .fallback = "on",
     .help = "Segment cleaning while idle: on, off, or every round waited for."},
    {.name = "gc_idle_ms",
     .kind = OPTSPEC_NUMBER,
     OPT(gc_idle_ms),
     .min = 10,
     .max = 3600000,
     .fallback = "1000",
     .metavar = "N",
     .help = "How long without a write operation counts as idle for background GC."},
    {.name = "usrquota",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_usrquota,
     .metavar = "usrquota",
     .help = "Of the quota files' limits, users' bind (with grpquota, prjquota: only those)."},
    {.name = "quota",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_usrquota,
     .metavar = "quota",
     .help = "The same as usrquota, as in the kernel."},
    {.name = "grpquota",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_grpquota,
     .metavar = "grpquota",
     .help = "Groups' quota limits bind (without any of these options every type's do)."},
    {.name = "prjquota",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_prjquota,
     .metavar = "prjquota",
     .help = "Projects' quota limits bind (the image needs project_quota)."},
    {.name = "noquota",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_noquota,
     .metavar = "noquota",
     .help = "No quota limit binds; usage is still kept in the quota files."},
    {.name = "compress_algorithm",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_compress_algorithm,
     .fallback = "lz4",
     .metavar = "compress_algorithm=lzo|lz4|zstd|lzo-rle[:LEVEL]",
     .help = "What newly compressed files use (LZ4 with a level 3..12 is LZ4HC; zstd 1..22)."},
    {.name = "compress_log_size",
     .kind = OPTSPEC_NUMBER,
     OPT(compress_log_size),
     .min = COMPRESS_LOG_MIN,
     .max = COMPRESS_LOG_MAX,
     .fallback = "2",
     .metavar = "N",
     .help = "Newly compressed files' clusters are 2^N blocks (4 KiB to 1 MiB)."},
    {.name = "compress_chksum",
     .kind = OPTSPEC_FLAG,
     OPT(compress_chksum),
     .help = "Newly compressed files' clusters carry a checksum, checked on every read."},
    {.name = "compress_extension",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_compress_extension,
     .metavar = "compress_extension=EXT",
     .help = "New files named *.EXT are compressed (\"*\": all); repeat for more (16)."},
    {.name = "nocompress_extension",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_nocompress_extension,
     .metavar = "nocompress_extension=EXT",
     .help = "New files named *.EXT are not compressed, even in a compressed directory."},
    {.name = "ssr",
     .negated = "nossr",
     .kind = OPTSPEC_FLAG,
     OPT(gc_ssr),
     .fallback = "on",
     .help = "Near full, data fills free slots of partly valid segments (slack space reuse)."},
};

const struct optspec_table library_options = OPTSPEC_TABLE("f2fuse", library_specs);

void f2fuse_options_init(struct f2fuse_options *o)
{
    memset(o, 0, sizeof(*o));
    optspec_defaults(&library_options, o);
}

int f2fuse_option_set(struct f2fuse_options *o, const char *name, const char *value)
{
    return optspec_set(&library_options, o, name, value);
}

static char *option_names;

static void list_option_names(void)
{
    size_t len;
    FILE *out = open_memstream(&option_names, &len);
    if (!out)
        return;
    optspec_print(&library_options, out, OPTSPEC_LIST, false);
    fputs(", ", out);
    optspec_print(&test_options, out, OPTSPEC_LIST, true);
    if (fclose(out) != 0) {
        free(option_names);
        option_names = NULL;
    }
}

const char *f2fuse_option_names(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, list_option_names);
    return option_names ? option_names : "(out of memory)";
}

void f2fuse_options_print(FILE *out, unsigned style)
{
    enum optspec_style s = style == F2FUSE_OPTIONS_TROFF  ? OPTSPEC_TROFF
                           : style == F2FUSE_OPTIONS_LIST ? OPTSPEC_LIST
                                                          : OPTSPEC_LINES;
    optspec_print(&library_options, out, s, false);
    if (s == OPTSPEC_LIST)
        fputs(", ", out);
    optspec_print(&test_options, out, s, true);
}
