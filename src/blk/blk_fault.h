/* Fault injection for tests: a block-device layer (blk_fault.c) that makes chosen requests
 * fail, stacked on the device the first time a fault is armed.  Production devices never
 * carry it. */
#ifndef F2FUSE_BLK_BLK_FAULT_H
#define F2FUSE_BLK_BLK_FAULT_H

#include <stdint.h>

#include "blk/blk.h"

/* The nth request of kind op from now on (1 = the next one) completes with -err instead of
 * running.  n = 0 clears it. */
void blk_inject_fault(struct blk_dev *dev, enum blk_op op, uint64_t nth, int err);
/* The same with a mode: BLK_FAULT_STICKY makes every later request of the kind fail too (a
 * dead device); BLK_FAULT_SHORT completes the request with half its length transferred
 * (rounded down to 512 bytes) and no I/O instead of an error (err is then unused). */
#define BLK_FAULT_STICKY 1u
#define BLK_FAULT_SHORT  2u
void blk_inject_fault_mode(struct blk_dev *dev, enum blk_op op, uint64_t nth, int err,
                           unsigned mode);
/* Faults carried out so far (every kind); counter "blk.faults_fired". */
uint64_t blk_faults_fired(const struct blk_dev *dev);

#endif
