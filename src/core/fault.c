/* Faults: the test-only options (fault=KIND:N[:WHAT][:sticky], powercut=N, powercut_torn,
 * powercut_seed=N; f2fuse_test.h), which stack the block layer's fault and power-cut layers
 * at open, and the mount's policy when an operation fails part-way (docs/ARCHITECTURE.md,
 * "Faults and hostile images"). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "blk/blk_fault.h"
#include "blk/blk_powercut.h"
#include "core/context.h"
#include "f2fuse_test.h"
#include "util/log.h"
#include "util/parse.h"

static const char *const kind_names[] = {"read", "write", "flush", "discard", "alloc"};

static const struct {
    const char *name;
    int err;
} errnos[] = {
    {"EIO", EIO},       {"ENOSPC", ENOSPC}, {"ENOMEM", ENOMEM}, {"EROFS", EROFS},
    {"EAGAIN", EAGAIN}, {"EINTR", EINTR},   {"ENXIO", ENXIO},   {"ETIMEDOUT", ETIMEDOUT},
};

int fault_parse(const char *value, struct f2fuse_fault *f)
{
    char buf[96];
    if (strlen(value) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, value);
    memset(f, 0, sizeof(*f));
    f->err = EIO;
    char *save, *part = strtok_r(buf, ":", &save);
    unsigned k;
    for (k = 0; part && k < sizeof(kind_names) / sizeof(kind_names[0]); k++)
        if (strcmp(part, kind_names[k]) == 0)
            break;
    if (!part || k == sizeof(kind_names) / sizeof(kind_names[0]))
        return -EINVAL;
    f->kind = k;
    part = strtok_r(NULL, ":", &save);
    if (!part || parse_size(part, &f->nth) || f->nth == 0)
        return -EINVAL;
    if (k == F2FUSE_FAULT_ALLOC)
        f->err = ENOMEM;
    while ((part = strtok_r(NULL, ":", &save))) {
        bool known = false;
        if (strcmp(part, "sticky") == 0) {
            f->sticky = known = true;
        } else if (strcmp(part, "short") == 0 &&
                   (k == F2FUSE_FAULT_READ || k == F2FUSE_FAULT_WRITE)) {
            f->short_io = known = true;
            f->err = 0;
        } else if (k != F2FUSE_FAULT_ALLOC) {
            for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
                if (strcmp(part, errnos[i].name) == 0) {
                    f->err = errnos[i].err;
                    known = true;
                }
        }
        if (!known)
            return -EINVAL;
    }
    return 0;
}

int fault_arm(struct f2fuse *fs, const struct f2fuse_test_options *t)
{
    if (!t)
        return 0;
    struct blk_powercut_options pc = {
        .after = t->powercut_after, .torn = t->powercut_torn, .seed = t->powercut_seed};
    int err = blk_powercut_arm(fs->dev, &pc);
    if (err)
        return err;
    static const enum blk_op ops[] = {BLK_READ, BLK_WRITE, BLK_FLUSH, BLK_DISCARD};
    for (unsigned i = 0; i < t->nfaults && i < F2FUSE_MAX_FAULTS; i++) {
        const struct f2fuse_fault *f = &t->faults[i];
        if (f->kind == F2FUSE_FAULT_ALLOC) {
            pcache_inject_enomem(fs->cache, f->nth, f->sticky);
        } else if (f->kind < F2FUSE_FAULT_ALLOC) {
            unsigned mode = (f->sticky ? BLK_FAULT_STICKY : 0) |
                            (f->short_io ? BLK_FAULT_SHORT : 0);
            blk_inject_fault_mode(fs->dev, ops[f->kind], f->nth, f->err, mode);
        }
        log_info("fault injection armed: %s request %llu fails with %s%s",
                 kind_names[f->kind < 5 ? f->kind : 0], (unsigned long long)f->nth,
                 f->short_io ? "a short transfer" : strerror(f->err),
                 f->sticky ? ", and every later one too" : "");
    }
    return 0;
}
