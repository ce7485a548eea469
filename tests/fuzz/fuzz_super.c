/* libFuzzer harness: superblock parsing and the choice between its two copies.  Input: up
 * to 3072 bytes for copy 0 (block 0 from byte 1024), then up to 3072 for copy 1 (block 1);
 * a copy the input does not reach stays as the base image has it.  Mounted read-only and
 * walked. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SB_OFF  1024u
#define SB_AREA (FZ_BLOCK - SB_OFF)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(true);
    if (fz_want_seeds()) {
        uint8_t seed[2 * SB_AREA];
        memcpy(seed, fz_base_block(0) + SB_OFF, SB_AREA);
        fz_seed("copy0", seed, SB_AREA);
        memcpy(seed + SB_AREA, fz_base_block(1) + SB_OFF, SB_AREA);
        fz_seed("both", seed, sizeof(seed));
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (uint32_t copy = 0; copy < 2 && size > copy * SB_AREA; copy++) {
        uint8_t area[SB_AREA] = {0};
        size_t len = size - copy * SB_AREA;
        memcpy(area, data + copy * SB_AREA, len < SB_AREA ? len : SB_AREA);
        fz_write((uint64_t)copy * FZ_BLOCK + SB_OFF, area, SB_AREA);
    }
    fz_mount_walk(false);
    fz_restore_block(0);
    fz_restore_block(1);
    return 0;
}
