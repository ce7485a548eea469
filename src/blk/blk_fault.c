/* Fault injection: a layer that fails the nth request of a kind (blk_fault.h).  It sits
 * under the power-cut layer, which decides first (after the cut nothing reaches the device,
 * so nothing can fail there), and over the device's own checks: a fault fires whatever the
 * request asks for. */
#include "blk/blk_fault.h"

#include <stdlib.h>

#include "blk/blk_internal.h"
#include "util/log.h"

/* The nth request of one op kind from the moment of arming fails with -err. */
struct fault_slot {
    atomic_uint_fast64_t countdown; /* 0 = disarmed */
    atomic_int err;
    atomic_uint mode; /* BLK_FAULT_* */
    atomic_bool dead; /* a sticky fault fired: every later request fails */
    atomic_uint_fast64_t fired;
};

struct fault_layer {
    struct blk_layer layer; /* first: the layer is the fault_layer */
    struct fault_slot slots[BLK_OP_COUNT];
};

/* The result an injected fault gives this request: -err, a short count, or 1 when no
 * fault applies. */
static int64_t take_fault(struct fault_layer *fl, const struct blk_req *req)
{
    struct fault_slot *f = &fl->slots[req->op];
    bool fire = atomic_load(&f->dead);
    uint64_t left = atomic_load(&f->countdown);
    while (!fire && left) {
        if (atomic_compare_exchange_weak(&f->countdown, &left, left - 1)) {
            fire = left == 1;
            break;
        }
    }
    if (!fire)
        return 1;
    unsigned mode = atomic_load(&f->mode);
    if (mode & BLK_FAULT_STICKY)
        atomic_store(&f->dead, true);
    atomic_fetch_add(&f->fired, 1);
    if ((mode & BLK_FAULT_SHORT) && (req->op == BLK_READ || req->op == BLK_WRITE) && req->len)
        return (int64_t)((req->len / 2) & ~(uint64_t)511);
    return -atomic_load(&f->err);
}

static enum blk_admit fault_admit(struct blk_layer *layer, struct blk_req *req)
{
    int64_t fault = take_fault((struct fault_layer *)layer, req);
    if (fault == 1)
        return blk_admit_below(layer, req);
    blk_req_preset(req, fault);
    return BLK_ADMIT_PRESET;
}

static uint64_t fired_total(const struct fault_layer *fl)
{
    uint64_t n = 0;
    for (int op = 0; fl && op < BLK_OP_COUNT; op++)
        n += atomic_load(&fl->slots[op].fired);
    return n;
}

static void fault_emit_stats(const struct blk_layer *layer, stat_emit_fn emit, void *sink)
{
    emit(sink, "blk.faults_fired", fired_total((const struct fault_layer *)layer));
}

static void fault_destroy(struct blk_layer *layer)
{
    free(layer);
}

const struct blk_layer_ops blk_fault_layer_ops = {
    .name = "fault",
    .depth = 1,
    .admit = fault_admit,
    .emit_stats = fault_emit_stats,
    .destroy = fault_destroy,
};

/* The device's fault layer, stacked now if it has none yet; NULL on ENOMEM. */
static struct fault_layer *fault_layer_get(struct blk_dev *dev)
{
    struct blk_layer *found = blk_layer_find(dev, &blk_fault_layer_ops);
    if (found)
        return (struct fault_layer *)found;
    struct fault_layer *fl = blk_layer_new(dev, &blk_fault_layer_ops, sizeof(*fl));
    if (!fl)
        return NULL;
    if (blk_layer_push(&fl->layer) == 0)
        return fl;
    free(fl); /* another thread stacked one first */
    return (struct fault_layer *)blk_layer_find(dev, &blk_fault_layer_ops);
}

void blk_inject_fault_mode(struct blk_dev *dev, enum blk_op op, uint64_t nth, int err,
                           unsigned mode)
{
    if ((unsigned)op >= BLK_OP_COUNT)
        return;
    if (!nth && !blk_layer_find(dev, &blk_fault_layer_ops))
        return; /* nothing armed, nothing to clear */
    struct fault_layer *fl = fault_layer_get(dev);
    if (!fl) {
        log_err("fault injection: no memory for the fault layer");
        return;
    }
    struct fault_slot *f = &fl->slots[op];
    /* err and mode first: a submitter that sees the countdown hit zero must see them */
    atomic_store(&f->err, err);
    atomic_store(&f->mode, mode);
    atomic_store(&f->dead, false);
    atomic_store(&f->countdown, nth);
}

void blk_inject_fault(struct blk_dev *dev, enum blk_op op, uint64_t nth, int err)
{
    blk_inject_fault_mode(dev, op, nth, err, 0);
}

uint64_t blk_faults_fired(const struct blk_dev *dev)
{
    return fired_total((const struct fault_layer *)blk_layer_find(dev, &blk_fault_layer_ops));
}
