/* libFuzzer harness: mount and walk, end to end.  Input: a whole image as a sparse block
 * list (harness.h) written over an all-zero 96 MiB image, opened read-only through the
 * library, every directory listed, every name looked up, every file, link and xattr read,
 * then closed.  Seeds: mkfs.f2fs, sload.f2fs and f2fuse images (with an fsync chain). */
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
    fz_mount_walk(false);
    return 0;
}
