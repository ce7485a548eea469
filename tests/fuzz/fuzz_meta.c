/* libFuzzer harness: NAT, SIT and SSA blocks and the checkpoint's summary blocks (NAT and
 * SIT journals, current segments' summaries).  Input: a sparse block list whose block
 * numbers index the base image's blocks of those kinds (harness.h, FZ_T_META).  Mounted
 * read-write, since only a writable mount loads the SIT and SSA: walked, changed,
 * checkpointed, closed. */
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static uint32_t meta_block(uint32_t i, void *arg)
{
    uint32_t n;
    const uint32_t *t = fz_targets(FZ_T_META, &n);
    return t[i % n];
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(true);
    if (fz_want_seeds()) {
        uint32_t n;
        fz_targets(FZ_T_META, &n);
        for (uint32_t i = 0; i < n && i < 32; i++) {
            static uint8_t seed[8 + FZ_BLOCK];
            char name[32];
            snprintf(name, sizeof(name), "meta%02u", i);
            fz_seed(name, seed, fz_record(seed, i, fz_base_block(meta_block(i, NULL))));
        }
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_apply_records(data, size, meta_block, NULL);
    fz_mount_walk(true);
    fz_image_base();
    return 0;
}
