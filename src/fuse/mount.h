/* The FUSE daemon: `f2fuse [options] IMAGE MOUNTPOINT`. */
#ifndef F2FUSE_FUSE_MOUNT_H
#define F2FUSE_FUSE_MOUNT_H

#include <stdio.h>

int mount_main(int argc, char **argv);
void mount_usage(FILE *out);

#endif
