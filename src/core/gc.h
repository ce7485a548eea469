/* Segment cleaning (gc.c): makes free segments out of partly valid ones, so that an image
 * that is overwritten again and again stays writable up to its user-visible size.
 *
 * Foreground GC runs inside space_reserve when the free segments left after what is dirty would
 * eat into the GC reserve: greedy victims (fewest valid blocks).  The background thread
 * (-o background_gc=on, the default) cleans cost-benefit victims while the mount is idle;
 * background_gc=sync cleans greedy victims without waiting for idleness; off: no thread.
 *
 * Moving a block means making its owner's page dirty in the page cache (a data page of the
 * file, or the node page): the checkpoint that GC then requests writes it to a new block of
 * its log (moved file data goes to the cold data log), points the dnode or the NAT entry
 * at it, and invalidates the old one.  So SSA, NAT and SIT stay right by the ordinary write
 * path, the victim becomes free exactly when that checkpoint commits (nothing the previous
 * checkpoint references is overwritten before), and a crash before then loses nothing. */
#ifndef F2FUSE_CORE_GC_H
#define F2FUSE_CORE_GC_H

#include <stdbool.h>
#include <stdint.h>

#include "f2fuse.h"

struct f2fuse;
struct gc_control;

#define F2FUSE_BGGC_OFF  0u
#define F2FUSE_BGGC_ON   1u
#define F2FUSE_BGGC_SYNC 2u

/* Read-write mounts: fs->gc and the background thread (started after recovery). */
int gc_init(struct f2fuse *fs);
int gc_start(struct f2fuse *fs);
void gc_stop(struct f2fuse *fs);
void gc_destroy(struct f2fuse *fs);

/* Free segments user writes must leave to GC, from the checkpoint's rsvd_segment_count. */
uint32_t gc_reserved_segments(struct f2fuse *fs);

/* Foreground cleaning, for space_reserve (space.c decides when): begin takes the GC lock
 * (one cleaner at a time; the background thread skips its round meanwhile), each round
 * cleans greedy victims with one checkpoint (-ENOSPC when none can be cleaned), end
 * counts the outcome and the time the writer waited, and unlocks. */
void gc_foreground_begin(struct f2fuse *fs);
int gc_foreground_round(struct f2fuse *fs);
void gc_foreground_end(struct f2fuse *fs, int err, uint64_t waited_ns);

/* An operation is about to change the file system (the background thread waits for idle). */
void gc_note_activity(struct f2fuse *fs);

/* Counters "gc.*". */
void gc_emit_stats(struct f2fuse *fs, f2fuse_stat_fn fn, void *arg);

#endif
