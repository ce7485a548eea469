/* libFuzzer harness: inode blocks (every inode of the base image: files, directories,
 * symlinks, inline data and dentries, inline xattrs), mounted read-only and walked.
 * Input: a selector byte, then the new content of the chosen block (harness.h). */
#include <stdlib.h>

#include "harness.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(true);
    if (fz_want_seeds()) {
        fz_block_seeds(FZ_T_INODE);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fz_block_harness(FZ_T_INODE, data, size);
}
