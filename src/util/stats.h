/* Counters: every subsystem reports its counters through one callback shape, so that
 * `f2fuse stat MOUNTPOINT`, the library API and the tests read them the same way. */
#ifndef F2FUSE_UTIL_STATS_H
#define F2FUSE_UTIL_STATS_H

#include <stdint.h>

/* Called once per counter; names are dotted, lower case: "blk.read.ops". */
typedef void (*stat_emit_fn)(void *sink, const char *name, uint64_t value);

#endif
