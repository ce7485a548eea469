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

enum mount_opt_verdict {
    MOPT_TAKEN,   /* f2fuse's own; libfuse must not see it */
    MOPT_PASS,    /* for libfuse (FUSE or kernel mount option) */
    MOPT_DROP,    /* meaningful to mount(8) or fstab only */
    MOPT_BAD,     /* refused; a message was printed */
};

/* Classifies one -o item ("name" or "name=value") and applies what is f2fuse's (the test
 * options go to test). */
enum mount_opt_verdict mount_option(struct f2fuse_options *opts,
                                    struct f2fuse_test_options *test, struct id_map *ids,
                                    const char *item);

/* Shows an attribute as the mapping says. */
void id_map_apply(const struct id_map *ids, struct stat *st);

/* Every option the daemon accepts, grouped, for --help and error messages. */
void mount_options_help(FILE *out);

#endif
