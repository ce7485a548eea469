/* f2fs's CRC-32: reflected polynomial 0xEDB88320, no final inversion.  Checkpoints and the
 * superblock seed it with F2FS_SUPER_MAGIC; inode checksums chain it from the uuid. */
#ifndef F2FUSE_UTIL_CRC_H
#define F2FUSE_UTIL_CRC_H

#include <stddef.h>
#include <stdint.h>

uint32_t f2fs_crc32(uint32_t crc, const void *buf, size_t len);

#endif
