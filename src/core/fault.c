/* Faults: the test-only options (fault=KIND:N[:WHAT][:sticky], powercut=N, powercut_torn,
 * powercut_seed=N; f2fuse_test.h), which stack the block layer's fault and power-cut layers
 * at open, and the mount's policy when an operation fails part-way (docs/ARCHITECTURE.md,
 * "Faults and hostile images"). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "blk/blk_fault.h"
#include "blk/blk_powercut.h"
#include "core/fs.h"
#include "f2fuse_test.h"

static const char *const kind_names[] = {"read", "write", "flush", "discard", "alloc"};

static const struct { const char *name; int err; } errnos[] = {
    {"EIO", EIO}, {"ENOSPC", ENOSPC}, {"ENOMEM", ENOMEM}, {"EROFS", EROFS},
    {"EAGAIN", EAGAIN}, {"EINTR", EINTR}, {"ENXIO", ENXIO}, {"ETIMEDOUT", ETIMEDOUT},
};

/* "KIND:N[:WHAT][:sticky]" */
static int parse_fault(const char *value, struct f2fuse_fault *f)
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
        } else if (strcmp(part, "short") == 0 && (k == F2FUSE_FAULT_READ ||
                                                   k == F2FUSE_FAULT_WRITE)) {
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

int f2fuse_test_option_set(struct f2fuse_options *o, struct f2fuse_test_options *t,
                           const char *name, const char *value)
{
    if (strcmp(name, "fault") == 0) {
        if (!value || t->nfaults == F2FUSE_MAX_FAULTS)
            return -EINVAL;
        struct f2fuse_fault f;
        int err = parse_fault(value, &f);
        if (!err)
            t->faults[t->nfaults++] = f;
        return err;
    }
    if (strcmp(name, "powercut_torn") == 0) {
        if (value)
            return -EINVAL;
        t->powercut_torn = true;
        return 0;
    }
    if (strcmp(name, "powercut") == 0 || strcmp(name, "powercut_seed") == 0) {
        uint64_t n;
        if (!value || parse_size(value, &n))
            return -EINVAL;
        if (name[8] == '_')
            t->powercut_seed = n;
        else
            t->powercut_after = n;
        return 0;
    }
    return f2fuse_option_set(o, name, value);
}

int fault_arm(struct f2fuse *fs, const struct f2fuse_test_options *t)
{
    if (!t)
        return 0;
    struct blk_powercut_options pc = {.after = t->powercut_after, .torn = t->powercut_torn,
                                      .seed = t->powercut_seed};
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

int fs_op_result(struct f2fuse *fs, const char *op, int err)
{
    if (err != -EIO && err != -ENOMEM && err != -EUCLEAN)
        return err;
    if (!fs->seg || __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE))
        return err;
    if (fs_first_write_error(fs, err))
        log_err("%s failed part-way: %s; the mount turns read-only (no further checkpoint) "
                "so that no half-done change reaches the image", op, strerror(-err));
    return err;
}
