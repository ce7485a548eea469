/* The daemon's -o options (see options.h and the OPTIONS section of man/f2fuse.8).
 *
 * mount.fuse3 (what `mount -t fuse.f2fuse` and fstab lines run) calls
 * `f2fuse IMAGE MOUNTPOINT -o LIST`, having dropped user, nouser, users, auto, noauto,
 * _netdev and nofail itself and added dev and suid; mount(8) run by hand, or f2fuse run
 * directly, may still pass those, so they are dropped here too.  libfuse 3.14 refuses
 * relatime, strictatime, lazytime and their kin, which fstab lines often carry: they are
 * dropped (f2fuse never writes an atime on a read, whatever they say). */
#include "fuse/options.h"

#include "util/optspec.h"

#include <errno.h>
#include <pwd.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* FUSE and kernel mount options libfuse 3.14 accepts and f2fuse passes on.  "=" at the end
 * means the option takes a value.  clone_fd, max_idle_threads= and max_threads= are read by
 * fuse_parse_cmdline (the daemon's threads). */
static const char *const fuse_options[] = {"allow_other",
                                           "allow_root",
                                           "auto_unmount",
                                           "default_permissions",
                                           "fsname=",
                                           "subtype=",
                                           "max_read=",
                                           "dev",
                                           "nodev",
                                           "suid",
                                           "nosuid",
                                           "exec",
                                           "noexec",
                                           "atime",
                                           "noatime",
                                           "sync",
                                           "async",
                                           "dirsync",
                                           "context=",
                                           "fscontext=",
                                           "defcontext=",
                                           "rootcontext=",
                                           "debug",
                                           "clone_fd",
                                           "max_idle_threads=",
                                           "max_threads=",
                                           NULL};

/* mount(8) and fstab options that mean nothing to f2fuse.  "x-" and "comment=" are prefixes. */
static const char *const dropped_options[] = {
    "defaults",    "auto",          "noauto",   "nofail",     "_netdev",  "user",
    "users",       "nouser",        "owner",    "group",      "relatime", "norelatime",
    "strictatime", "nostrictatime", "diratime", "nodiratime", "lazytime", "nolazytime",
    "loud",        "silent",        NULL};

/* Whether item matches a table entry: "name" exactly, or "name=" followed by a value. */
static bool in_table(const char *const *table, const char *item)
{
    const char *eq = strchr(item, '=');
    size_t nlen = eq ? (size_t)(eq - item) : strlen(item);
    for (int i = 0; table[i]; i++) {
        size_t tlen = strlen(table[i]);
        bool wants_value = table[i][tlen - 1] == '=';
        if (wants_value ? (eq && nlen == tlen - 1 && strncmp(item, table[i], nlen) == 0)
                        : (!eq && strcmp(item, table[i]) == 0))
            return true;
    }
    return false;
}

static bool parse_u32(const char *v, uint32_t *out, int base, uint32_t max)
{
    if (!v || !*v || *v == '-' || *v == '+')
        return false;
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, base);
    if (errno || *end || n > max)
        return false;
    *out = (uint32_t)n;
    return true;
}

/* uid= and gid= take a number or a name known to the host. */
static bool parse_id(const char *v, bool user, uint32_t *out)
{
    if (parse_u32(v, out, 10, UINT32_MAX - 1))
        return true;
    if (!v || !*v)
        return false;
    if (user) {
        struct passwd *pw = getpwnam(v);
        if (pw)
            *out = pw->pw_uid;
        return pw != NULL;
    }
    struct group *gr = getgrnam(v);
    if (gr)
        *out = gr->gr_gid;
    return gr != NULL;
}

static int set_uid(void *target, const char *value)
{
    struct id_map *ids = target;
    return (ids->has_uid = parse_id(value, true, &ids->uid)) ? 0 : -EINVAL;
}

static int set_gid(void *target, const char *value)
{
    struct id_map *ids = target;
    return (ids->has_gid = parse_id(value, false, &ids->gid)) ? 0 : -EINVAL;
}

static int set_umask(void *target, const char *value)
{
    struct id_map *ids = target;
    return (ids->has_umask = parse_u32(value, &ids->umask, 8, 0777)) ? 0 : -EINVAL;
}

static const struct optspec id_specs[] = {
    {.name = "uid",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_uid,
     .metavar = "uid=ID",
     .help = "Every file is shown as owned by this user (a number or a name known here)."},
    {.name = "gid",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_gid,
     .metavar = "gid=ID",
     .help = "Every file is shown in this group (a number or a name known here)."},
    {.name = "umask",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_umask,
     .metavar = "umask=OCTAL",
     .help = "These permission bits (an octal mode up to 0777) are cleared in what is shown."},
};
static const struct optspec_table id_options = OPTSPEC_TABLE("ownership shown", id_specs);

/* Ring threads per CPU queue by default: each serves one request at a time, so a queue
 * needs several when requests block on the device; a 1 MiB payload buffer each bounds how
 * many (16 per queue on 2 CPUs, 2 per queue from 32 CPUs on). */
static unsigned ring_threads_default(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    unsigned n = cpus > 0 ? (unsigned)(64 / cpus) : 2;
    return n < 2 ? 2 : n > 16 ? 16 : n;
}

/* fuse_ring alone: the default thread count, but the mount says why when there is no ring;
 * auto: the same, quietly; off (or nofuse_ring): never. */
static int set_fuse_ring(void *target, const char *value)
{
    struct fuse_perf_opts *o = target;
    o->ring_auto = value && strcmp(value, "auto") == 0;
    if (!value || o->ring_auto) {
        o->fuse_ring = ring_threads_default();
        return 0;
    }
    uint32_t n = 0;
    if (strcmp(value, "off") != 0 && !parse_u32(value, &n, 10, 64))
        return -EINVAL;
    o->fuse_ring = n;
    return 0;
}

static int set_no_fuse_ring(void *target, const char *value)
{
    return value ? -EINVAL : set_fuse_ring(target, "off");
}

#define PERF(member) OPTSPEC_FIELD(struct fuse_perf_opts, member)
static const struct optspec perf_specs[] = {
    {.name = "writeback_cache",
     .negated = "nowriteback_cache",
     .kind = OPTSPEC_FLAG,
     PERF(writeback_cache),
     .flags = OPTSPEC_ON_OFF,
     .fallback = "off",
     .help = "The kernel's page cache buffers writes in front of f2fuse's own."},
    {.name = "keep_cache",
     .kind = OPTSPEC_FLAG,
     PERF(keep_cache),
     .flags = OPTSPEC_ON_OFF,
     .fallback = "on",
     .help = "An open keeps the kernel's cached pages of the file."},
    {.name = "max_write",
     .kind = OPTSPEC_NUMBER,
     PERF(max_write),
     .min = 4096,
     .max = FUSE_MAX_IO,
     .fallback = "1M",
     .metavar = "BYTES",
     .help = "Largest WRITE request the kernel sends."},
    {.name = "read_ahead_kb",
     .kind = OPTSPEC_NUMBER,
     PERF(read_ahead_kb),
     .min = 1,
     .max = 65536,
     .fallback = "1024",
     .metavar = "KB",
     .help = "The kernel's read-ahead window on the mount."},
    {.name = "max_background",
     .kind = OPTSPEC_NUMBER,
     PERF(max_background),
     .min = 1,
     .max = 65535,
     .fallback = "64",
     .metavar = "N",
     .help = "Background requests (read-ahead, asynchronous) the kernel keeps in flight."},
    {.name = "fuse_ring",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_fuse_ring,
     .fallback = "auto",
     .metavar = "fuse_ring[=N|auto|off]",
     .help = "Requests over io_uring, N threads per kernel queue (1..64), when offered."},
    {.name = "attr_timeout",
     .kind = OPTSPEC_NUMBER,
     PERF(attr_timeout),
     .max = 86400,
     .fallback = "3600",
     .metavar = "SECONDS",
     .help = "How long the kernel trusts names and attributes before it asks again."},
    {.name = "nofuse_ring",
     .kind = OPTSPEC_CUSTOM,
     .parse = set_no_fuse_ring,
     .metavar = "nofuse_ring",
     .help = "Requests through /dev/fuse only."},
};
static const struct optspec_table perf_options = OPTSPEC_TABLE("FUSE tuning", perf_specs);

void fuse_perf_opts_init(struct fuse_perf_opts *perf)
{
    memset(perf, 0, sizeof(*perf));
    optspec_defaults(&perf_options, perf);
}

/* One of the daemon's own tables takes the item: MOPT_TAKEN, MOPT_BAD with a message naming
 * what the option accepts, or MOPT_PASS (not theirs: the caller goes on). */
static enum mount_opt_verdict own_option(const struct optspec_table *t, void *target,
                                         const char *name, const char *value, const char *item)
{
    int err = optspec_set(t, target, name, value);
    if (err == -ENOENT)
        return MOPT_PASS;
    if (!err)
        return MOPT_TAKEN;
    bool negated;
    const struct optspec *s = optspec_find(t, name, &negated);
    char usage[200], range[200];
    optspec_usage(s, usage, sizeof(usage));
    optspec_range(s, range, sizeof(range));
    fprintf(stderr, "f2fuse: error: bad value in option '%s' (%s: %s; %s)\n", item, usage, s->help,
            range);
    return MOPT_BAD;
}

enum mount_opt_verdict mount_option(struct f2fuse_options *opts, struct f2fuse_test_options *test,
                                    struct id_map *ids, struct fuse_perf_opts *perf,
                                    const char *item)
{
    char name[64];
    const char *eq = strchr(item, '=');
    size_t nlen = eq ? (size_t)(eq - item) : strlen(item);
    if (nlen == 0 && !eq)
        return MOPT_DROP; /* an empty item, as in "ro,,rw" */
    if (nlen < sizeof(name)) {
        memcpy(name, item, nlen);
        name[nlen] = '\0';
        const char *value = eq ? eq + 1 : NULL;
        enum mount_opt_verdict v = own_option(&perf_options, perf, name, value, item);
        if (v == MOPT_PASS)
            v = own_option(&id_options, ids, name, value, item);
        if (v != MOPT_PASS)
            return v;
        int err = f2fuse_test_option_set(opts, test, name, value);
        if (err == 0) /* ro and rw are the kernel mount's too */
            return strcmp(name, "ro") == 0 || strcmp(name, "rw") == 0 ? MOPT_PASS : MOPT_TAKEN;
        if (err == -EINVAL) {
            fprintf(stderr, "f2fuse: error: bad value in option '%s' (f2fuse options: %s)\n", item,
                    f2fuse_option_names());
            return MOPT_BAD;
        }
    }
    /* The kernel keeps a sync mount's writes synchronous; the names are f2fuse's to keep. */
    if (strcmp(item, "sync") == 0 || strcmp(item, "async") == 0)
        opts->mount_sync = item[0] == 's';
    if (strcmp(item, "dirsync") == 0)
        opts->mount_dirsync = true;
    if (in_table(fuse_options, item))
        return MOPT_PASS;
    if (in_table(dropped_options, item) || strncmp(item, "x-", 2) == 0 ||
        strncmp(item, "comment=", 8) == 0)
        return MOPT_DROP;
    fprintf(stderr, "f2fuse: error: unknown option '%s'\n", item);
    mount_options_help(stderr);
    return MOPT_BAD;
}

void id_map_apply(const struct id_map *ids, struct stat *st)
{
    if (ids->has_uid)
        st->st_uid = ids->uid;
    if (ids->has_gid)
        st->st_gid = ids->gid;
    if (ids->has_umask)
        st->st_mode &= ~(mode_t)ids->umask;
}

static void print_table(FILE *out, const char *const *table)
{
    for (int i = 0; table[i]; i++)
        fprintf(out, "%s%s%s", i ? ", " : "", table[i],
                table[i][strlen(table[i]) - 1] == '=' ? "..." : "");
}

void mount_options_help(FILE *out)
{
    fprintf(out, "valid -o options (all described in f2fuse(8)):\n  f2fuse: %s\n",
            f2fuse_option_names());
    const struct optspec_table *own[] = {&id_options, &perf_options};
    for (int i = 0; i < 2; i++) {
        fprintf(out, "  %s: ", own[i]->title);
        optspec_print(own[i], out, OPTSPEC_LIST, false);
        fputc('\n', out);
    }
    fprintf(out, "  FUSE and kernel: ");
    print_table(out, fuse_options);
    fprintf(out, "\n  ignored (mount and fstab): ");
    print_table(out, dropped_options);
    fprintf(out, ", x-*, comment=...\n");
}

void mount_options_describe(FILE *out, bool troff)
{
    if (!troff)
        fprintf(out, "f2fuse options:\n");
    f2fuse_options_print(out, troff ? F2FUSE_OPTIONS_TROFF : F2FUSE_OPTIONS_LINES);
    const struct optspec_table *own[] = {&id_options, &perf_options};
    for (int i = 0; i < 2; i++) {
        if (!troff)
            fprintf(out, "%s options:\n", own[i]->title);
        optspec_print(own[i], out, troff ? OPTSPEC_TROFF : OPTSPEC_LINES, false);
    }
}
