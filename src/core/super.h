/* super.c: the superblock (both copies checked, the valid one decoded into the context) */
#ifndef F2FUSE_CORE_SUPER_H
#define F2FUSE_CORE_SUPER_H

struct f2fuse;

int super_load(struct f2fuse *fs);

#endif
