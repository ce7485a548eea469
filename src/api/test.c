/* The test entry points (include/f2fuse_test.h): power-cut and fault options, and an open
 * that arms them.  Nothing here runs on a mount opened through f2fuse_open. */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "api/options.h"
#include "f2fuse_test.h"

#define TOPT(member) OPTSPEC_FIELD(struct f2fuse_test_options, member)

/* fault= is repeatable: each one armed takes the next slot. */
static int add_fault(void *target, const char *value)
{
    struct f2fuse_test_options *t = target;
    if (!value || t->nfaults == F2FUSE_MAX_FAULTS)
        return -EINVAL;
    struct f2fuse_fault f;
    int err = fault_parse(value, &f);
    if (!err)
        t->faults[t->nfaults++] = f;
    return err;
}

static const struct optspec test_specs[] = {
    {.name = "powercut",
     .kind = OPTSPEC_NUMBER,
     TOPT(powercut_after),
     .max = UINT64_MAX,
     .metavar = "N",
     .flags = OPTSPEC_TEST,
     .help = "Tests: a power cut at the Nth device write; it and every later write are lost."},
    {.name = "powercut_torn",
     .kind = OPTSPEC_FLAG,
     TOPT(powercut_torn),
     .flags = OPTSPEC_TEST,
     .help = "Tests: writes not yet flushed at the cut are lost block by block."},
    {.name = "powercut_seed",
     .kind = OPTSPEC_NUMBER,
     TOPT(powercut_seed),
     .max = UINT64_MAX,
     .metavar = "N",
     .flags = OPTSPEC_TEST,
     .help = "Tests: the seed choosing which blocks of a torn write survive."},
    {.name = "fault",
     .kind = OPTSPEC_CUSTOM,
     .parse = add_fault,
     .flags = OPTSPEC_TEST,
     .metavar = "fault=read|write|flush|discard|alloc:N[:ERRNO|short][:sticky]",
     .help = "Tests: the Nth request of that kind fails (repeatable, up to 4)."},
};

const struct optspec_table test_options = OPTSPEC_TABLE("tests", test_specs);

int f2fuse_test_option_set(struct f2fuse_options *o, struct f2fuse_test_options *t,
                           const char *name, const char *value)
{
    int err = optspec_set(&test_options, t, name, value);
    return err == -ENOENT ? f2fuse_option_set(o, name, value) : err;
}
