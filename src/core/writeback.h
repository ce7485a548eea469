/* Writeback control (writeback.c; bandwidth × time background writeback, the kernel's
 * dirty_background_time): a flusher thread writes dirty file data back between checkpoints
 * — when dirty data passes dirty_background_{bytes,ratio}, when it passes the device's
 * estimated bandwidth × dirty_background_time, when it is older than dirty_expire_ms, or
 * when writers wait at the hard limit — and writers are throttled smoothly below
 * dirty_{bytes,ratio}.  The decisions themselves are in writeback_ctl.c. */
#ifndef F2FUSE_CORE_WRITEBACK_H
#define F2FUSE_CORE_WRITEBACK_H

#include <stdint.h>

#include "f2fuse.h"
#include "util/stats.h"

struct f2fuse;
struct wb_control;

/* Read-write mounts: fs->wb and the flusher thread.  writeback_stop ends the thread (before
 * the final checkpoint, which writes everything anyway); writeback_destroy frees. */
int writeback_init(struct f2fuse *fs);
void writeback_stop(struct f2fuse *fs);
void writeback_destroy(struct f2fuse *fs);

/* Takes the writeback options (dirty_*, writeback_interval_ms) of opts as the running
 * mount's tunables (f2fuse_tune has validated them). */
void writeback_retune(struct f2fuse *fs, const struct f2fuse_options *opts);

/* The page cache's size changed (cachesize.c): the limits, ratios of it, follow. */
void writeback_resized(struct f2fuse *fs);

/* Write path, outside every lock: _before waits while the write would take dirty data past
 * the hard limit, and returns the flusher's error once it fails round after round (0 when
 * the write may go on); _after pauses the writer smoothly and kicks the flusher. */
int writeback_throttle_before(struct f2fuse *fs, uint64_t bytes);
void writeback_throttle_after(struct f2fuse *fs, uint64_t bytes);

/* Writes back, by the flusher (operations go on meanwhile), every data page dirtied before
 * the call; returns when they are written, or after timeout_ns, or when the mount stops or
 * failed.  The checkpoint timer calls it before its checkpoint, which then writes only
 * what came after under the exclusive cp_lock: with a large cache that could be a second
 * of writing, with every operation waiting (bench/fio write128k: 637 ms). */
void writeback_sync(struct f2fuse *fs, uint64_t timeout_ns);

/* fsync, holding ino's stripe lock: waits until no flusher write of ino is in flight, so
 * that the blocks its nodes point at are on the device before fsync's flush. */
void writeback_wait_inode(struct f2fuse *fs, uint32_t ino);

/* A checkpoint, holding cp_lock for writing, before its commit: waits until the flusher's
 * chunk in flight (whose blocks the nodes it wrote may point at) is on the device. */
void writeback_wait_io(struct f2fuse *fs);

/* Every data writeback reports bytes written and the time the I/O took (the estimate). */
void writeback_account(struct f2fuse *fs, uint64_t bytes, uint64_t busy_ns);

/* Counters and current tunables, "wb.*". */
void writeback_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink);

#endif
