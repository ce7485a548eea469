/* libFuzzer harness: checkpoint packs — the choice between the two, their headers and
 * footers, version bitmaps, orphan blocks and the summaries with the NAT and SIT journals.
 * Input: a flags byte, then a sparse block list whose block numbers address the first 16
 * blocks of each pack (bit 4 picks the pack).  Flags: bit 0 recomputes the CRC of each
 * pack's header and footer (else nearly every mutation dies at the CRC), bit 1 copies the
 * header over the footer first, bit 2 mounts read-write (orphans, current segments, the
 * journals loaded into the SIT and NAT managers, a checkpoint written back). */
#include <stdlib.h>
#include <string.h>

#include "core/format.h"
#include "harness.h"

#define PACK_BLOCKS 16u

static uint32_t pack_block(uint32_t blk, void *arg)
{
    return fz_base_cp_blkaddr() + ((blk >> 4) & 1) * F2FS_BLOCKS_PER_SEG + (blk & 15);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    fz_init(true);
    if (fz_want_seeds()) {
        static uint8_t seed[1 + 2 * PACK_BLOCKS * (8 + FZ_BLOCK)];
        size_t n = 1;
        seed[0] = 1;
        for (uint32_t i = 0; i < 2 * PACK_BLOCKS; i++) {
            const uint8_t *b = fz_base_block(pack_block(i, NULL));
            bool zero = true;
            for (uint32_t j = 0; j < FZ_BLOCK && zero; j++)
                zero = !b[j];
            if (!zero)
                n += fz_record(seed + n, i, b);
        }
        fz_seed("packs", seed, n);
        seed[0] = 5;
        fz_seed("packs_rw", seed, n);
        exit(0);
    }
    return 0;
}

static uint32_t get32(uint32_t blkaddr, size_t off)
{
    uint32_t v;
    fz_read((uint64_t)blkaddr * FZ_BLOCK + off, &v, 4);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t flags = data[0];
    fz_apply_records(data + 1, size - 1, pack_block, NULL);
    for (uint32_t pack = 0; pack < 2; pack++) {
        uint32_t head = pack_block(pack << 4, NULL);
        uint32_t total = get32(head, offsetof(struct f2fs_checkpoint, cp_pack_total_block_count));
        uint32_t foot = total >= 2 && total <= PACK_BLOCKS ? head + total - 1 : 0;
        if (foot && (flags & 2)) {
            uint8_t b[FZ_BLOCK];
            fz_read((uint64_t)head * FZ_BLOCK, b, FZ_BLOCK);
            fz_write((uint64_t)foot * FZ_BLOCK, b, FZ_BLOCK);
        }
        if (flags & 1) {
            fz_fix_cp_crc(head);
            if (foot)
                fz_fix_cp_crc(foot);
        }
    }
    fz_mount_walk(flags & 4);
    if (flags & 4) {
        fz_image_base();
    } else {
        for (uint32_t i = 0; i < 2 * PACK_BLOCKS; i++)
            fz_restore_block(pack_block(i, NULL));
    }
    return 0;
}
