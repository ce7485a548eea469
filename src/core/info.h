/* info.c: an image's summary (f2fuse info). */
#ifndef F2FUSE_CORE_INFO_H
#define F2FUSE_CORE_INFO_H

#include "f2fuse.h"

int info_fill(struct f2fuse *fs, struct f2fuse_info *info);

#endif
