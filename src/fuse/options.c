/* The daemon's -o options (see options.h and the OPTIONS section of man/f2fuse.8).
 *
 * mount.fuse3 (what `mount -t fuse.f2fuse` and fstab lines run) calls
 * `f2fuse IMAGE MOUNTPOINT -o LIST`, having dropped user, nouser, users, auto, noauto,
 * _netdev and nofail itself and added dev and suid; mount(8) run by hand, or f2fuse run
 * directly, may still pass those, so they are dropped here too.  libfuse 3.14 refuses
 * relatime, strictatime, lazytime and their kin, which fstab lines often carry: they are
 * dropped (f2fuse never writes an atime on a read, whatever they say). */
#include "fuse/options.h"

#include <errno.h>
#include <pwd.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>

/* FUSE and kernel mount options libfuse 3.14 accepts and f2fuse passes on.  "=" at the end
 * means the option takes a value.  clone_fd, max_idle_threads= and max_threads= are read by
 * fuse_parse_cmdline (the daemon's threads). */
static const char *const fuse_options[] = {
    "allow_other", "allow_root", "auto_unmount", "default_permissions", "fsname=", "subtype=",
    "max_read=", "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime",
    "sync", "async", "dirsync", "context=", "fscontext=", "defcontext=", "rootcontext=",
    "debug", "clone_fd", "max_idle_threads=", "max_threads=", NULL};

/* mount(8) and fstab options that mean nothing to f2fuse.  "x-" and "comment=" are prefixes. */
static const char *const dropped_options[] = {
    "defaults", "auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "owner",
    "group", "relatime", "norelatime", "strictatime", "nostrictatime", "diratime",
    "nodiratime", "lazytime", "nolazytime", "loud", "silent", NULL};

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

static enum mount_opt_verdict id_option(struct id_map *ids, const char *name, const char *value,
                                        const char *item)
{
    bool ok;
    if (strcmp(name, "uid") == 0)
        ok = ids->has_uid = parse_id(value, true, &ids->uid);
    else if (strcmp(name, "gid") == 0)
        ok = ids->has_gid = parse_id(value, false, &ids->gid);
    else
        ok = ids->has_umask = parse_u32(value, &ids->umask, 8, 0777);
    if (ok)
        return MOPT_TAKEN;
    fprintf(stderr, "f2fuse: error: bad value in option '%s' (uid= and gid= take a number or "
                    "a name known here, umask= an octal mode up to 0777)\n", item);
    return MOPT_BAD;
}

enum mount_opt_verdict mount_option(struct f2fuse_options *opts,
                                    struct f2fuse_test_options *test, struct id_map *ids,
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
        if (strcmp(name, "uid") == 0 || strcmp(name, "gid") == 0 || strcmp(name, "umask") == 0)
            return id_option(ids, name, eq ? eq + 1 : NULL, item);
        int err = f2fuse_test_option_set(opts, test, name, eq ? eq + 1 : NULL);
        if (err == 0) /* ro and rw are the kernel mount's too */
            return strcmp(name, "ro") == 0 || strcmp(name, "rw") == 0 ? MOPT_PASS : MOPT_TAKEN;
        if (err == -EINVAL) {
            fprintf(stderr, "f2fuse: error: bad value in option '%s' (f2fuse options: %s)\n",
                    item, f2fuse_option_names());
            return MOPT_BAD;
        }
    }
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
    fprintf(out, "  ownership shown: uid=ID, gid=ID, umask=OCTAL\n");
    fprintf(out, "  FUSE tuning: writeback_cache=on|off, nowriteback_cache, keep_cache=on|off, "
                 "max_write=BYTES, read_ahead_kb=KB, max_background=N, fuse_ring[=N|auto|off], "
                 "nofuse_ring\n");
    fprintf(out, "  FUSE and kernel: ");
    print_table(out, fuse_options);
    fprintf(out, "\n  ignored (mount and fstab): ");
    print_table(out, dropped_options);
    fprintf(out, ", x-*, comment=...\n");
}
