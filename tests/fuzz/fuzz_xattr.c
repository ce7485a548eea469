/* libFuzzer harness: xattr node blocks and inode blocks with inline xattrs (entry
 * lengths, the list's end, names), mounted read-only, every xattr listed and read.
 * Input: a selector byte, then the new content of the chosen block (harness.h). */
#include <stdlib.h>

#include "harness.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(true);
    if (fz_want_seeds()) {
        fz_block_seeds(FZ_T_XATTR);
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return fz_block_harness(FZ_T_XATTR, data, size);
}
