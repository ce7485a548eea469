/* Writeback control logic (see writeback_ctl.h): no clock, no locks, no file system. */
#include "core/writeback_ctl.h"

#define PAGE 4096ull

void wb_limits_compute(const struct wb_tunables *t, uint64_t base, uint64_t bw,
                       struct wb_limits *out)
{
    uint64_t hard = t->dirty_bytes ? t->dirty_bytes : base * t->dirty_ratio / 100;
    uint64_t bg = t->dirty_background_bytes ? t->dirty_background_bytes
                                            : base * t->dirty_background_ratio / 100;
    /* Dirty pages cannot be reclaimed: more than the cache budget is never allowed. */
    if (hard > base)
        hard = base;
    if (hard < 16 * PAGE)
        hard = 16 * PAGE;
    /* As the kernel: a background threshold at or above the limit would never start
     * writeback before writers block, so it becomes half the limit. */
    if (bg >= hard)
        bg = hard / 2;
    out->hard = hard;
    out->background = bg;
    out->bg_time = t->dirty_background_time ? bw / 1000 * t->dirty_background_time : 0;
    if (t->dirty_background_time && out->bg_time < PAGE)
        out->bg_time = PAGE; /* on: something dirty must be able to start it */
}

const char *wb_reason_name(enum wb_reason r)
{
    static const char *const names[WB_REASONS] = {"none",    "limit",  "background",
                                                  "bg_time", "expire", "sync"};
    return (unsigned)r < WB_REASONS ? names[r] : "?";
}

enum wb_reason wb_trigger(const struct wb_limits *l, uint64_t dirty, bool writers_waiting,
                          uint64_t oldest_age_ns, unsigned expire_ms)
{
    if (dirty == 0)
        return WB_NONE;
    if (writers_waiting)
        return WB_LIMIT;
    if (dirty > l->background)
        return WB_BACKGROUND;
    if (l->bg_time && dirty > l->bg_time)
        return WB_BG_TIME;
    if (expire_ms && oldest_age_ns >= (uint64_t)expire_ms * 1000000ull)
        return WB_EXPIRE;
    return WB_NONE;
}

uint64_t wb_throttle_pause_ns(const struct wb_limits *l, uint64_t dirty, uint64_t bw,
                              uint64_t bytes)
{
    uint64_t freerun = l->background + (l->hard - l->background) / 2;
    if (dirty <= freerun || bytes == 0)
        return 0;
    if (dirty >= l->hard)
        return WB_MAX_PAUSE_NS;
    /* pos = (hard - dirty) / (hard - freerun), in (0, 1]; the allowed rate bw × pos, at
     * least bw/64 so that a pause never exceeds what the cap would allow anyway. */
    uint64_t span = l->hard - freerun;
    uint64_t room = l->hard - dirty;
    if (bw < PAGE)
        bw = PAGE;
    double rate = (double)bw * (double)room / (double)span;
    if (rate < (double)bw / 64)
        rate = (double)bw / 64;
    double pause = (double)bytes * 1e9 / rate;
    return pause >= (double)WB_MAX_PAUSE_NS ? WB_MAX_PAUSE_NS : (uint64_t)pause;
}

void wb_bw_init(struct wb_bw_est *e)
{
    *e = (struct wb_bw_est){.bw = WB_BW_INIT};
}

void wb_bw_account(struct wb_bw_est *e, uint64_t bytes, uint64_t busy_ns)
{
    e->acc_bytes += bytes;
    e->acc_ns += busy_ns;
    if (e->acc_ns < WB_BW_WINDOW_NS)
        return;
    double sample = (double)e->acc_bytes * 1e9 / (double)e->acc_ns;
    if (e->samples == 0) {
        e->bw = (uint64_t)sample;
    } else {
        /* weight of the sample = its busy time / (its busy time + tau) */
        double w = (double)e->acc_ns / (double)(e->acc_ns + WB_BW_TAU_NS);
        e->bw = (uint64_t)((double)e->bw * (1 - w) + sample * w);
    }
    if (e->bw < PAGE)
        e->bw = PAGE;
    e->samples++;
    e->acc_bytes = e->acc_ns = 0;
}

unsigned wb_chunk_pages(uint64_t bw)
{
    uint64_t pages = bw / 40 / PAGE;
    if (pages < 64)
        pages = 64;
    if (pages > 1024)
        pages = 1024;
    return (unsigned)pages;
}
