/* imagelock.c: one writer per image */
#ifndef F2FUSE_CORE_IMAGELOCK_H
#define F2FUSE_CORE_IMAGELOCK_H

struct f2fuse;

/* imagelock.c: read-write opens wait (10 s at most, then -EBUSY) for the image's lock and
 * hold it until image_unlock; read-only opens only note whether a writer holds it. */
int image_lock(struct f2fuse *fs, const char *image);
void image_unlock(struct f2fuse *fs);

#endif
