/* The daemon's -o options: every item is f2fuse's own (the library's, or the id mapping's),
 * a FUSE or kernel mount option handed to libfuse, or a mount(8)/fstab option that means
 * nothing here and is dropped.  Anything else is refused with the list of valid ones, before
 * the image is opened: the mount helper and fstab pass whatever the user wrote. */
#ifndef F2FUSE_FUSE_OPTIONS_H
#define F2FUSE_FUSE_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "f2fuse.h"
#include "f2fuse_test.h"

/* uid=, gid=, umask=: how ownership and modes are shown (ntfs-3g's and sshfs's meaning), for
 * images whose owners do not exist on the host.  The image itself keeps its ids. */
struct id_map {
    bool has_uid, has_gid, has_umask;
    uint32_t uid, gid;
    uint32_t umask;
};

/* The FUSE tuning options (bench/fio; defaults and why: docs/ARCHITECTURE.md, "FUSE front
 * end").  Taken by the daemon, not the library: they only shape the kernel side. */
#define FUSE_MAX_IO (1u << 20) /* fuse-notes: a larger max_write kills the session */
struct fuse_perf_opts {
    bool writeback_cache;   /* the kernel's page cache buffers writes in front of ours */
    bool keep_cache;        /* an open keeps the kernel's cached pages of the file */
    unsigned max_write;     /* largest WRITE request, bytes, <= 1 MiB */
    unsigned read_ahead_kb; /* set on the mount's bdi: 1024 gives 1 MiB buffered READs */
    /* Background requests (readahead, async) the kernel keeps in flight; at 3/4 of it the
     * connection counts as congested and the kernel drops async readahead.  The default,
     * 12, congested at once under 16 readers: their readahead shrank to a few KiB READs
     * (4 KiB sequential fio: 102,853 READs of ~18 KiB in 4 s, 118k IOPS; with 64: 10,791
     * READs, 456k IOPS). */
    unsigned max_background;
    /* Requests over io_uring (fuse_ring.c): threads per kernel queue (one per possible
     * CPU), 0 = off.  ring_auto (the default): taken when the kernel offers it (the fuse
     * module's enable_uring is on), quietly left when not; an explicit fuse_ring says so. */
    unsigned fuse_ring;
    bool ring_auto;
    /* Seconds the kernel trusts names and attributes (entry and attribute timeouts).  f2fuse
     * is the image's only writer and tells the kernel what it changes behind its back, so
     * they stay true; the bound only limits what a mistake could leave stale. */
    unsigned attr_timeout;
};

/* The defaults of the FUSE tuning options. */
void fuse_perf_opts_init(struct fuse_perf_opts *perf);

enum mount_opt_verdict {
    MOPT_TAKEN, /* f2fuse's own; libfuse must not see it */
    MOPT_PASS,  /* for libfuse (FUSE or kernel mount option) */
    MOPT_DROP,  /* meaningful to mount(8) or fstab only */
    MOPT_BAD,   /* refused; a message was printed */
};

/* Classifies one -o item ("name" or "name=value") and applies what is f2fuse's: the
 * library's options go to opts, the test options to test, the id mapping to ids, the FUSE
 * tuning to perf. */
enum mount_opt_verdict mount_option(struct f2fuse_options *opts, struct f2fuse_test_options *test,
                                    struct id_map *ids, struct fuse_perf_opts *perf,
                                    const char *item);

/* Shows an attribute as the mapping says. */
void id_map_apply(const struct id_map *ids, struct stat *st);

/* Every option the daemon accepts, grouped, for --help and error messages. */
void mount_options_help(FILE *out);

/* `f2fuse options`: every option f2fuse takes with its help, default and range, as text or
 * (troff) as the man page's option summary. */
void mount_options_describe(FILE *out, bool troff);

#endif
