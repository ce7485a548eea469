/* The test entry points (include/f2fuse_test.h): power-cut and fault options, and an open
 * that arms them.  Nothing here runs on a mount opened through f2fuse_open. */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "f2fuse_test.h"

int f2fuse_test_option_set(struct f2fuse_options *o, struct f2fuse_test_options *t,
                           const char *name, const char *value)
{
    if (strcmp(name, "fault") == 0) {
        if (!value || t->nfaults == F2FUSE_MAX_FAULTS)
            return -EINVAL;
        struct f2fuse_fault f;
        int err = fault_parse(value, &f);
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
