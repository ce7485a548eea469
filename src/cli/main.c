/* f2fuse: mount an f2fs image with FUSE, or run one of the tools. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "fuse/ctl.h"
#include "fuse/mount.h"
#include "fuse/options.h"

int cli_apply_options(struct f2fuse_options *opts, struct f2fuse_test_options *test,
                      const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return -1;
    int ret = 0;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq)
            *eq = '\0';
        int err = f2fuse_test_option_set(opts, test, item, eq ? eq + 1 : NULL);
        if (err) {
            fprintf(stderr, "f2fuse: error: %s option '%s' (valid: %s)\n",
                    err == -ENOENT ? "unknown" : "bad value in", item, f2fuse_option_names());
            ret = -1;
            break;
        }
    }
    free(copy);
    return ret;
}

int stat_main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: f2fuse stat MOUNTPOINT\n");
        return 2;
    }
    int err = ctl_request(argv[1], "stat", stdout);
    if (err) {
        fprintf(stderr, "f2fuse: error: %s: no f2fuse mount answers there (%s)\n", argv[1],
                strerror(-err));
        return 1;
    }
    return 0;
}

/* Sends command to the mount's control socket; its one-line reply lands in reply.
 * Prints why and returns non-zero when no mount answers. */
static int ctl_ask(const char *mnt, const char *command, char *reply, size_t size)
{
    reply[0] = '\0';
    FILE *out = fmemopen(reply, size - 1, "w");
    if (!out)
        return 1;
    int err = ctl_request(mnt, command, out);
    fclose(out);
    if (err)
        fprintf(stderr, "f2fuse: error: %s: no f2fuse mount answers there (%s)\n", mnt,
                strerror(-err));
    return err ? 1 : 0;
}

/* f2fuse set MOUNTPOINT name=value...: changes tunables of a running mount. */
int set_main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: f2fuse set MOUNTPOINT NAME=VALUE...\n");
        return 2;
    }
    int status = 0;
    for (int i = 2; i < argc; i++) {
        char command[512], reply[512];
        snprintf(command, sizeof(command), "set %s", argv[i]);
        if (ctl_ask(argv[1], command, reply, sizeof(reply)))
            return 1;
        if (strncmp(reply, "ok", 2) != 0) {
            fprintf(stderr, "f2fuse: %s: %s", argv[i], reply[0] ? reply : "no reply\n");
            status = 1;
        }
    }
    return status;
}

/* f2fuse sync MOUNTPOINT...: makes everything written to the mounts durable.  sync(1) never
 * reaches a FUSE daemon; syncfs(2) still pushes the kernel's own dirty pages (writeback_cache)
 * to the daemon, and the control socket then asks it for a checkpoint with all data. */
int sync_main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: f2fuse sync MOUNTPOINT...\n");
        return 2;
    }
    int status = 0;
    for (int i = 1; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY | O_DIRECTORY);
        if (fd >= 0) {
            syncfs(fd);
            close(fd);
        }
        char reply[512];
        if (ctl_ask(argv[i], "sync", reply, sizeof(reply))) {
            status = 1;
        } else if (strncmp(reply, "ok", 2) != 0) {
            fprintf(stderr, "f2fuse: error: %s: %s", argv[i], reply[0] ? reply : "no reply\n");
            status = 1;
        }
    }
    return status;
}

/* f2fuse options [--troff]: every option with its help, default and range (--troff: the
 * man page's option summary, which `make man` splices into man/f2fuse.8). */
static int options_main(int argc, char **argv)
{
    bool troff = argc == 2 && strcmp(argv[1], "--troff") == 0;
    if (argc > 2 || (argc == 2 && !troff)) {
        fprintf(stderr, "usage: f2fuse options [--troff]\n");
        return 2;
    }
    mount_options_describe(stdout, troff);
    return fflush(stdout) == 0 ? 0 : 1;
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: f2fuse [-f] [-d] [-s] [-o OPTIONS] IMAGE MOUNTPOINT   mount\n"
        "       f2fuse info [--json] [-o offset=|partition=] IMAGE   summary of an image (or a disk's partitions), offline\n"
        "       f2fuse walk [-q] [-o OPTIONS] IMAGE   read everything offline, one line per entry\n"
        "       f2fuse stat MOUNTPOINT                 counters of a running mount\n"
        "       f2fuse set MOUNTPOINT NAME=VALUE...    change tunables of a running mount\n"
        "       f2fuse sync MOUNTPOINT...              make everything written durable\n"
        "       f2fuse key add|list|remove MOUNTPOINT ...   fscrypt keys of a running mount\n"
        "       f2fuse trim [-o start=,len=,minlen=] IMAGE   discard free space offline\n"
        "       f2fuse unsparse [-f] SPARSE RAW        expand an Android sparse image to a raw one\n"
        "       f2fuse options [--troff]               every -o option: help, default, range\n"
        "mount flags: -f foreground, -d debug (implies -f), -s single-threaded\n");
    mount_options_help(out);
    fprintf(out, "manual: man 8 f2fuse\n");
}

int main(int argc, char **argv)
{
    /* I/O buffers of up to 1 MiB come and go per request: keep them mmap'ed (a fixed
     * threshold) so that freeing them returns the memory, rather than letting glibc raise
     * the threshold and pile them up in per-thread heaps. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (argc >= 2 && strcmp(argv[1], "walk") == 0)
        return walk_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "stat") == 0)
        return stat_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "set") == 0)
        return set_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "sync") == 0)
        return sync_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "trim") == 0)
        return trim_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "unsparse") == 0)
        return unsparse_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "key") == 0)
        return key_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "info") == 0)
        return info_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "options") == 0)
        return options_main(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    return mount_main(argc, argv);
}
