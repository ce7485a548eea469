/* Writeback control logic (src/core/writeback_ctl.c) with a fake clock: thresholds against
 * the cache budget, the start/continue decision (dirty_background_time before the byte
 * threshold), smooth throttling that holds the hard limit, and the bandwidth estimate
 * (convergence, idle periods, latency-bound samples, a step change). */
#include "check.h"
#include "core/writeback_ctl.h"

#define MiB (1ull << 20)
#define MS  1000000ull

static struct wb_tunables defaults(void)
{
    return (struct wb_tunables){.dirty_ratio = 20,
                                .dirty_background_ratio = 10,
                                .dirty_expire_ms = 30000,
                                .writeback_interval_ms = 5000};
}

static void limits_follow_the_cache_budget(void)
{
    struct wb_tunables t = defaults();
    struct wb_limits l;
    wb_limits_compute(&t, 64 * MiB, 25 * MiB, &l);
    CHECK(l.hard > 12 * MiB && l.hard <= 64 * MiB / 5);
    CHECK(l.background > 6 * MiB && l.background <= 64 * MiB / 10);
    CHECK_EQ(l.bg_time, 0); /* off by default */
    /* bytes override ratios; never above the budget; background below the limit */
    t.dirty_bytes = 1024 * MiB;
    t.dirty_background_bytes = 2048 * MiB;
    wb_limits_compute(&t, 64 * MiB, 25 * MiB, &l);
    CHECK_EQ(l.hard, 64 * MiB);
    CHECK_EQ(l.background, 32 * MiB);
    t.dirty_ratio = 100;
    t.dirty_bytes = 0;
    t.dirty_background_bytes = 0;
    t.dirty_background_ratio = 100;
    wb_limits_compute(&t, 64 * MiB, 25 * MiB, &l);
    CHECK_EQ(l.hard, 64 * MiB);
    CHECK(l.background < l.hard);
    /* dirty_background_time: bandwidth × time */
    t = defaults();
    t.dirty_background_time = 200;
    wb_limits_compute(&t, 64 * MiB, 25 * MiB, &l);
    CHECK_EQ(l.bg_time, 25 * MiB / 1000 * 200);
    /* a tiny estimate still leaves a usable threshold */
    wb_limits_compute(&t, 64 * MiB, 1, &l);
    CHECK_EQ(l.bg_time, 4096);
}

static void bg_time_starts_writeback_before_the_byte_threshold(void)
{
    struct wb_tunables t = defaults();
    t.dirty_background_bytes = 256 * MiB;
    t.dirty_bytes = 400 * MiB;
    struct wb_limits off, on;
    wb_limits_compute(&t, 512 * MiB, 25 * MiB, &off);
    t.dirty_background_time = 100;
    wb_limits_compute(&t, 512 * MiB, 25 * MiB, &on);
    /* A producer dirties 12.5 MB/s; step a fake clock by 10 ms and find when each starts. */
    uint64_t start_off = 0, start_on = 0;
    for (uint64_t ms = 10; ms <= 30000 && (!start_off || !start_on); ms += 10) {
        uint64_t dirty = ms * 12500; /* bytes */
        if (!start_off && wb_trigger(&off, dirty, false, ms * MS, 0) != WB_NONE)
            start_off = ms;
        if (!start_on && wb_trigger(&on, dirty, false, ms * MS, 0) == WB_BG_TIME)
            start_on = ms;
    }
    CHECK(start_on > 0 && start_on < 300); /* 2.5 MiB at 12.5 MB/s: ~210 ms */
    CHECK(start_off > 20000);              /* 256 MiB: ~21 s */
    /* writeback goes on while above either threshold, and stops below both */
    CHECK_EQ(wb_trigger(&on, on.bg_time + 1, false, 0, 0), WB_BG_TIME);
    CHECK_EQ(wb_trigger(&on, on.bg_time, false, 0, 0), WB_NONE);
    CHECK_EQ(wb_trigger(&on, on.background + 1, false, 0, 0), WB_BACKGROUND);
    CHECK_EQ(wb_trigger(&off, off.background, false, 0, 0), WB_NONE);
}

static void trigger_order_and_expiry(void)
{
    struct wb_tunables t = defaults();
    struct wb_limits l;
    wb_limits_compute(&t, 64 * MiB, 25 * MiB, &l);
    CHECK_EQ(wb_trigger(&l, 0, true, 60000 * MS, 30000), WB_NONE); /* nothing dirty */
    CHECK_EQ(wb_trigger(&l, 4096, true, 0, 30000), WB_LIMIT);
    CHECK_EQ(wb_trigger(&l, 4096, false, 29999 * MS, 30000), WB_NONE);
    CHECK_EQ(wb_trigger(&l, 4096, false, 30000 * MS, 30000), WB_EXPIRE);
    CHECK_EQ(wb_trigger(&l, 4096, false, 90000 * MS, 0), WB_NONE); /* expiry off */
    CHECK_EQ(wb_trigger(&l, l.background + 1, false, 90000 * MS, 30000), WB_BACKGROUND);
    CHECK(wb_reason_name(WB_BG_TIME)[0] == 'b');
}

/* Writers dirty as fast as the pauses let them, a flusher cleans at bw: with a fake clock
 * the dirty level must settle between the midpoint and the hard limit, never above it. */
static void throttling_holds_the_hard_limit(void)
{
    struct wb_tunables t = defaults();
    struct wb_limits l;
    const uint64_t bw = 25 * MiB;
    wb_limits_compute(&t, 64 * MiB, bw, &l);
    uint64_t freerun = l.background + (l.hard - l.background) / 2;
    CHECK_EQ(wb_throttle_pause_ns(&l, freerun, bw, MiB), 0);
    CHECK(wb_throttle_pause_ns(&l, freerun + MiB, bw, MiB) > 0);
    CHECK_EQ(wb_throttle_pause_ns(&l, l.hard, bw, 4096), WB_MAX_PAUSE_NS);
    /* pauses grow smoothly towards the limit */
    uint64_t prev = 0;
    for (uint64_t d = freerun + 4096; d < l.hard; d += 64 * 1024) {
        uint64_t p = wb_throttle_pause_ns(&l, d, bw, 128 * 1024);
        CHECK(p >= prev);
        CHECK(p <= WB_MAX_PAUSE_NS);
        prev = p;
    }
    /* simulation: 4 writers of 128 KiB records that would go at 1 GB/s unthrottled */
    uint64_t now = 0, dirty = 0, max_dirty = 0, next[4] = {0, 0, 0, 0}, written = 0;
    const uint64_t rec = 128 * 1024, step = MS / 10;
    for (now = 0; now < 20000 * MS; now += step) {
        uint64_t clean = bw * step / 1000000000ull;
        if (dirty > l.background)
            dirty = dirty > clean ? dirty - clean : 0;
        for (int w = 0; w < 4; w++) {
            if (now < next[w])
                continue;
            if (dirty + rec > l.hard) /* the hard wait before dirtying */
                continue;
            dirty += rec;
            written += rec;
            next[w] = now + rec * 1000000000ull / (1000 * MiB) +
                      wb_throttle_pause_ns(&l, dirty, bw, rec);
        }
        if (dirty > max_dirty)
            max_dirty = dirty;
    }
    CHECK(max_dirty <= l.hard);
    CHECK(dirty > freerun - rec); /* it settles above the free-run point ... */
    /* ... and writers get about the device's bandwidth, not stop-and-go zero */
    double rate = (double)written / 20.0;
    CHECK(rate > 0.8 * (double)bw && rate < 1.3 * (double)bw);
}

static void estimate_converges_and_ignores_idle(void)
{
    struct wb_bw_est e;
    wb_bw_init(&e);
    CHECK_EQ(e.bw, WB_BW_INIT);
    /* 4 MiB chunks at 25 MiB/s: 160 ms each */
    for (int i = 0; i < 10; i++)
        wb_bw_account(&e, 4 * MiB, 160 * MS);
    CHECK(e.bw > 24 * MiB && e.bw < 26 * MiB);
    /* idle for an hour: nothing is accounted, nothing changes */
    uint64_t before = e.bw;
    CHECK_EQ(e.bw, before);
    /* a burst of latency-bound 4 KiB writes (fsyncs at 0.5 ms each = 8 MB/s) barely moves
     * it: 50 of them are 25 ms of busy time */
    for (int i = 0; i < 50; i++)
        wb_bw_account(&e, 4096, 500000);
    CHECK(e.bw > 24 * MiB);
    /* a step to 50 MiB/s: followed within ~3 s of busy time */
    for (int i = 0; i < 20; i++)
        wb_bw_account(&e, 8 * MiB, 160 * MS);
    CHECK(e.bw > 45 * MiB && e.bw < 51 * MiB);
    /* a single slow chunk does not halve it */
    wb_bw_account(&e, 1 * MiB, 160 * MS);
    CHECK(e.bw > 40 * MiB);
}

static void chunk_size_bounds(void)
{
    CHECK_EQ(wb_chunk_pages(1), 64);
    CHECK_EQ(wb_chunk_pages(25 * MiB), 25 * MiB / 40 / 4096);
    CHECK_EQ(wb_chunk_pages(10000 * MiB), 1024);
}

int main(void)
{
    RUN(limits_follow_the_cache_budget);
    RUN(bg_time_starts_writeback_before_the_byte_threshold);
    RUN(trigger_order_and_expiry);
    RUN(throttling_holds_the_hard_limit);
    RUN(estimate_converges_and_ignores_idle);
    RUN(chunk_size_bounds);
    return CHECK_DONE();
}
