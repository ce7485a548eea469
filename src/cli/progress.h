/* Progress of a long command on a terminal (percentage, amount, rate), and a clean stop on
 * Ctrl-C.  Nothing is drawn unless stderr is a terminal, so logs and pipes stay quiet.
 *
 * Interruption without a signal handler: progress_begin blocks SIGINT and SIGTERM in the
 * calling thread before the library starts its threads (they inherit the mask), so the
 * signal stays pending until progress_stop_requested() takes it; the command then winds
 * down through its normal path (a trim finishes its in-flight discards, the image gets its
 * unmount checkpoint). */
#ifndef F2FUSE_CLI_PROGRESS_H
#define F2FUSE_CLI_PROGRESS_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

struct progress {
    const char *label;
    bool draw;       /* stderr is a terminal */
    bool bytes;      /* amounts are bytes (shown as KiB/MiB/GiB), else items */
    bool drawn;      /* a line is on screen and needs ending */
    int stop_signal; /* the signal that asked for a stop, or 0 */
    double start, last;
    sigset_t old_mask;
};

/* Call before the library opens the image. */
void progress_begin(struct progress *p, const char *label, bool bytes);
/* Redraws at most ~8 times a second; done may exceed total (shown as 100%). */
void progress_update(struct progress *p, uint64_t done, uint64_t total);
/* True once SIGINT or SIGTERM arrived (stays true). */
bool progress_stop_requested(struct progress *p);
/* Ends the line and restores the signal mask. */
void progress_end(struct progress *p);

/* "1.5 GiB" */
void progress_human(uint64_t bytes, char *out, unsigned size);

#endif
