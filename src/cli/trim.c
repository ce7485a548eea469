/* f2fuse trim: FITRIM without a mount.  Opens the image read-write through the library
 * (roll-forward recovery and orphans as at any mount), discards its free space, closes it
 * with a clean checkpoint and prints the bytes trimmed as `fstrim -v` does.  On a terminal
 * it shows progress; Ctrl-C stops it between steps, with the image closed cleanly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/progress.h"
#include "util/parse.h"

static const char usage_line[] =
    "usage: f2fuse trim [-o start=BYTES,len=BYTES,minlen=BYTES,OPTIONS] IMAGE\n";

struct trim_args {
    uint64_t start, len, minlen;
};

/* start/len/minlen are the trim's; anything else is a library option (discard_mode=...). */
static int apply(struct trim_args *t, struct f2fuse_options *opts, struct f2fuse_test_options *test,
                 const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (!copy)
        return -1;
    int ret = 0;
    for (char *item = strtok_r(copy, ",", &save); item && !ret; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq)
            *eq = '\0';
        const char *value = eq ? eq + 1 : NULL;
        uint64_t *field = strcmp(item, "start") == 0    ? &t->start
                          : strcmp(item, "len") == 0    ? &t->len
                          : strcmp(item, "minlen") == 0 ? &t->minlen
                                                        : NULL;
        if (field) {
            if (!value || parse_size(value, field)) {
                fprintf(stderr, "f2fuse: error: bad value in trim option '%s'\n", item);
                ret = -1;
            }
            continue;
        }
        if (strcmp(item, "ro") == 0) {
            fprintf(stderr, "f2fuse: error: trim writes the image; 'ro' makes no sense here\n");
            ret = -1;
            continue;
        }
        int err = f2fuse_test_option_set(opts, test, item, value);
        if (err) {
            fprintf(stderr, "f2fuse: error: %s option '%s' (valid: start, len, minlen, %s)\n",
                    err == -ENOENT ? "unknown" : "bad value in", item, f2fuse_option_names());
            ret = -1;
        }
    }
    free(copy);
    return ret;
}

static int trim_progress(void *arg, uint64_t done, uint64_t total)
{
    struct progress *p = arg;
    progress_update(p, done, total);
    return progress_stop_requested(p);
}

int trim_main(int argc, char **argv)
{
    struct f2fuse_options opts;
    f2fuse_options_init(&opts);
    opts.read_only = false;
    struct f2fuse_test_options test = {0};
    struct trim_args t = {.start = 0, .len = UINT64_MAX, .minlen = 0};
    int c;
    while ((c = getopt(argc, argv, "o:")) != -1) {
        if (c != 'o' || apply(&t, &opts, &test, optarg) != 0) {
            if (c != 'o')
                fputs(usage_line, stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fputs(usage_line, stderr);
        return 2;
    }
    const char *image = argv[optind];
    struct progress prog;
    progress_begin(&prog, "trim", true); /* before the library starts its threads */
    struct f2fuse *fs;
    int err = f2fuse_open_test(image, &opts, &test, &fs);
    if (err) {
        progress_end(&prog);
        fprintf(stderr, "f2fuse: error: cannot open %s read-write: %s\n", image, strerror(-err));
        return 1;
    }
    uint64_t trimmed = 0;
    err = f2fuse_trim_progress(fs, t.start, t.len, t.minlen, &trimmed, trim_progress, &prog);
    f2fuse_close(fs);
    progress_end(&prog);
    char h[32];
    progress_human(trimmed, h, sizeof(h));
    if (err == -EINTR) {
        /* 128 + signal, as a shell reports a command the signal ended */
        fprintf(stderr, "f2fuse: trim of %s interrupted; the image is closed cleanly\n", image);
        printf("%s: %s (%llu bytes) trimmed before the stop\n", image, h,
               (unsigned long long)trimmed);
        return 128 + (prog.stop_signal ? prog.stop_signal : SIGINT);
    }
    if (err) {
        fprintf(stderr, "f2fuse: error: trim of %s failed: %s\n", image, strerror(-err));
        return 1;
    }
    printf("%s: %s (%llu bytes) trimmed\n", image, h, (unsigned long long)trimmed);
    return 0;
}
