/* libFuzzer harness: directory blocks and inline-dentry inode blocks (bitmaps, name
 * lengths, slot ranges, hashes), mounted read-only and walked.
 * Input: a selector byte, then the new content of the chosen block (harness.h). */
#include <stdlib.h>

#include "harness.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(true);
    if (fz_want_seeds()) {
        fz_block_seeds(FZ_T_DENTRY);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fz_block_harness(FZ_T_DENTRY, data, size);
}
