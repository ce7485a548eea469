/* Progress lines and Ctrl-C for long commands (see progress.h). */
#include "cli/progress.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define REDRAW_SECONDS 0.125

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

void progress_human(uint64_t n, char *out, unsigned size)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    unsigned u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, size, "%llu B", (unsigned long long)n);
    else
        snprintf(out, size, "%.1f %s", v, units[u]);
}

void progress_begin(struct progress *p, const char *label, bool bytes)
{
    *p = (struct progress){.label = label, .bytes = bytes, .draw = isatty(STDERR_FILENO)};
    p->start = p->last = now_seconds();
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &p->old_mask);
}

static void amount(const struct progress *p, uint64_t n, char *out, unsigned size)
{
    if (p->bytes)
        progress_human(n, out, size);
    else
        snprintf(out, size, "%llu", (unsigned long long)n);
}

void progress_update(struct progress *p, uint64_t done, uint64_t total)
{
    if (!p->draw)
        return;
    double t = now_seconds();
    if (t - p->last < REDRAW_SECONDS && done < total)
        return;
    p->last = t;
    double elapsed = t - p->start;
    double pct = total ? 100.0 * (double)(done < total ? done : total) / (double)total : 100.0;
    char d[32], tot[32], rate[32];
    amount(p, done, d, sizeof(d));
    amount(p, total, tot, sizeof(tot));
    amount(p, elapsed > 0 ? (uint64_t)((double)done / elapsed) : 0, rate, sizeof(rate));
    /* \r and a clear to the end of the line: the next draw overwrites this one. */
    fprintf(stderr, "\r%s: %5.1f%%  %s of %s  %s/s\033[K", p->label, pct, d, tot, rate);
    fflush(stderr);
    p->drawn = true;
}

bool progress_stop_requested(struct progress *p)
{
    if (p->stop_signal)
        return true;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    struct timespec zero = {0, 0};
    int sig = sigtimedwait(&stop, NULL, &zero);
    if (sig > 0)
        p->stop_signal = sig;
    return p->stop_signal != 0;
}

void progress_end(struct progress *p)
{
    progress_stop_requested(p); /* one that came late must not kill us on unblocking */
    if (p->drawn) {
        fputc('\n', stderr);
        p->drawn = false;
    }
    pthread_sigmask(SIG_SETMASK, &p->old_mask, NULL);
}
