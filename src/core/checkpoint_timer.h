/* checkpoint_timer.c: the checkpoint_interval thread. */
#ifndef F2FUSE_CORE_CHECKPOINT_TIMER_H
#define F2FUSE_CORE_CHECKPOINT_TIMER_H

struct f2fuse;

/* Starts it when checkpoint_interval is set (0 or -errno); stop is harmless without. */
int checkpoint_timer_start(struct f2fuse *fs);
void checkpoint_timer_stop(struct f2fuse *fs);

#endif
