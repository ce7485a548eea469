/* libFuzzer harness: the read-write mount of a hostile image.  Input as fuzz_mount (a whole
 * image as a sparse block list; the same corpus).  The mount loads the SIT, SSA and NAT,
 * frees orphans and replays the fsync chain (roll-forward recovery); then the walk, then
 * writes, truncates, unlinks, creates, xattrs and renames on what the image holds, a
 * checkpoint, and the unmount's checkpoint. */
#include <stdlib.h>

#include "harness.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(false);
    if (fz_want_seeds()) {
        fz_seed_whole_images();
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_image_zero();
    fz_apply_records(data, size, NULL, NULL);
    fz_mount_walk(true);
    return 0;
}
