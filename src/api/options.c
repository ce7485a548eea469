/* The library's options: defaults, names and parsing (each mechanism parses its own). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"

#define DEFAULT_CACHE_SIZE (64ull << 20)

void f2fuse_options_init(struct f2fuse_options *o)
{
    memset(o, 0, sizeof(*o));
    o->backend = "uring";
    o->queue_depth = 64;
    o->cache_size = DEFAULT_CACHE_SIZE;
    o->read_only = true;
    o->checkpoint_interval = 5;
    o->checkpoint_merge = true;
    o->checkpoint_batch_us = 15000;
    o->fsync_fast = true;
    o->flush_merge = true;
    o->extent_cache = true;
    discard_options_init(o); /* discard.c */
    writeback_options_init(o); /* writeback.c */
    gc_options_init(o);      /* gc.c */
}

const char *f2fuse_option_names(void)
{
    return "ro, rw, offset=BYTES, partition=N|NAME, backend=uring|psync, queue_depth=N, cache_size=BYTES[K|M|G], "
           "checkpoint_interval=SECONDS, checkpoint_merge, nocheckpoint_merge, checkpoint_batch_us=N, "
           "fsync=fast|checkpoint, flush_merge, noflush_merge, extent_cache, noextent_cache, checkpoint_data=metadata|all, discard, nodiscard, discard_mode=block|serial|parallel, "
           "discard_max=BYTES[K|M|G], discard_qd=N, discard_idle_ms=MS, "
           "dirty_bytes=BYTES, dirty_ratio=PCT, dirty_background_bytes=BYTES, "
           "dirty_background_ratio=PCT, dirty_expire_ms=MS, writeback_interval_ms=MS, "
           "dirty_background_time=MS, dev_bw=BYTES_PER_S, "
           "background_gc=on|off|sync, gc_idle_ms=N, ssr, nossr, "
                      "(tests) powercut=N, powercut_torn, powercut_seed=N, "
           "fault=read|write|flush|discard|alloc:N[:ERRNO|short][:sticky]";
}

int f2fuse_option_set(struct f2fuse_options *o, const char *name, const char *value)
{
    int derr = discard_option_set(o, name, value); /* discard.c */
    if (derr != -ENOENT)
        return derr;
    derr = checkpoint_merge_option_set(o, name, value); /* checkpoint_merge.c */
    if (derr != -ENOENT)
        return derr;
    derr = writeback_option_set(o, name, value); /* writeback.c */
    if (derr != -ENOENT)
        return derr;
    int gerr = gc_option_set(o, name, value); /* gc.c */
    if (gerr != -ENOENT)
        return gerr;
    if (strcmp(name, "ro") == 0 || strcmp(name, "rw") == 0) {
        if (value)
            return -EINVAL;
        o->read_only = name[1] == 'o';
        return 0;
    }
    if (strcmp(name, "checkpoint_merge") == 0 || strcmp(name, "nocheckpoint_merge") == 0) {
        if (value)
            return -EINVAL;
        o->checkpoint_merge = name[0] == 'c';
        return 0;
    }
    if (strcmp(name, "flush_merge") == 0 || strcmp(name, "noflush_merge") == 0) {
        if (value)
            return -EINVAL;
        o->flush_merge = name[0] == 'f';
        return 0;
    }
    if (strcmp(name, "extent_cache") == 0 || strcmp(name, "noextent_cache") == 0) {
        if (value)
            return -EINVAL;
        o->extent_cache = name[0] == 'e';
        return 0;
    }
    if (!value)
        return strcmp(name, "backend") && strcmp(name, "queue_depth") &&
                       strcmp(name, "cache_size") && strcmp(name, "checkpoint_interval") &&
                       strcmp(name, "fsync") && strcmp(name, "checkpoint_data") &&
                       strcmp(name, "offset") && strcmp(name, "partition")
                   ? -ENOENT
                   : -EINVAL;
    if (strcmp(name, "fsync") == 0) {
        if (strcmp(value, "fast") == 0)
            o->fsync_fast = true;
        else if (strcmp(value, "checkpoint") == 0)
            o->fsync_fast = false;
        else
            return -EINVAL;
        return 0;
    }
    if (strcmp(name, "checkpoint_data") == 0) {
        if (strcmp(value, "metadata") == 0)
            o->checkpoint_all_data = false;
        else if (strcmp(value, "all") == 0)
            o->checkpoint_all_data = true;
        else
            return -EINVAL;
        return 0;
    }
    if (strcmp(name, "backend") == 0) {
        if (strcmp(value, "uring") == 0)
            o->backend = "uring";
        else if (strcmp(value, "psync") == 0)
            o->backend = "psync";
        else
            return -EINVAL;
        return 0;
    }
    if (strcmp(name, "queue_depth") == 0) {
        uint64_t n;
        if (parse_size(value, &n) || n < 1 || n > 4096)
            return -EINVAL;
        o->queue_depth = (unsigned)n;
        return 0;
    }
    if (strcmp(name, "offset") == 0) { /* checked against the image at open */
        uint64_t n;
        if (parse_size(value, &n))
            return -EINVAL;
        o->offset = n;
        return 0;
    }
    if (strcmp(name, "partition") == 0) {
        if (!value[0] || strlen(value) >= sizeof(o->partition))
            return -EINVAL;
        snprintf(o->partition, sizeof(o->partition), "%s", value);
        return 0;
    }
    if (strcmp(name, "checkpoint_interval") == 0) {
        uint64_t n;
        if (parse_size(value, &n) || n > 86400)
            return -EINVAL;
        o->checkpoint_interval = (unsigned)n;
        return 0;
    }
    if (strcmp(name, "cache_size") == 0) {
        uint64_t n;
        if (parse_size(value, &n) || n < (1u << 20))
            return -EINVAL;
        o->cache_size = n;
        return 0;
    }
    return -ENOENT;
}

