/* Compressed files' clusters between the page cache and the device (fs/f2fs/compress.c and
 * data.c's cluster paths).  The cache holds a compressed file's data as it reads: page
 * (ino, index) is file block index, never a compressed block.  So
 *   - a read decodes a compressed cluster unless its pages are cached;
 *   - before any page of a cluster stored compressed changes, the whole cluster is in the
 *     cache and dirty (cluster_prepare_change), and writeback writes clusters whole
 *     (cluster_gather): a cluster is never half old, half new on the device;
 *   - writeback stores a full cluster inside the file compressed when that saves a block,
 *     as f2fs_write_compressed_pages lays it out, anything else plain (the kernel's rule:
 *     partial clusters at EOF, incompressible data); the blocks go to the cold data log;
 *   - segment cleaning moves compressed blocks as they are, without decoding;
 *   - an encrypted file's pages hold ciphertext, as all its pages do (data.c): writeback
 *     decrypts a cluster aside to compress it and encrypts the compressed blocks, each as
 *     the file block whose slot it takes (first + 1 on), as f2fs_write_compressed_pages;
 *     without the key at writeback the cluster is stored plain, as its pages are.
 * Accounting (FORMAT.md, compressed files): a compressed cluster's COMPRESS_ADDR and
 * NEW_ADDR slots count in i_blocks and the checkpoint's valid_block_count like blocks, and
 * i_compr_blocks counts them; writeback only swaps blocks for such slots and back, so a
 * cluster costs the same user-visible space compressed or not - what compression saves is
 * physical (segments), as in the kernel, until the blocks are released. */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/cluster.h"
#include "core/compress.h"
#include "core/context.h"
#include "core/data.h"
#include "core/extent.h"
#include "core/fscrypt.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"
#include "core/inode.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/segment.h"
#include "util/log.h"

#define BLK          F2FS_BLKSIZE
#define MAX_CLUSTER  (1u << COMPRESS_LOG_MAX)
#define READ_SPAN    256u /* blocks mapped and read at once (1 MiB, at least a cluster) */
#define NO_PAGE_ROOM MAX_CLUSTER

/* ---- per-thread buffers ---------------------------------------------------------------- */

/* A cluster's compressed blocks as read, and a decoded or to-be-encoded cluster: up to
 * 1 MiB each, 4 KiB aligned (O_DIRECT reads land in them), kept per thread. */
struct thread_bufs {
    uint8_t *cbuf, *rbuf, *wbuf;
    size_t ccap, rcap, wcap;
};
static __thread struct thread_bufs *thread_bufs;
static pthread_key_t bufs_key;
static pthread_once_t bufs_once = PTHREAD_ONCE_INIT;

static void bufs_free(void *arg)
{
    struct thread_bufs *b = arg;
    if (b) {
        free(b->cbuf);
        free(b->rbuf);
        free(b->wbuf);
        free(b);
    }
}

static void bufs_setup(void)
{
    pthread_key_create(&bufs_key, bufs_free);
}

static uint8_t *grow(uint8_t **buf, size_t *cap, size_t len)
{
    if (*cap >= len)
        return *buf;
    void *p = NULL;
    if (posix_memalign(&p, BLK, len))
        return NULL;
    free(*buf);
    *buf = p;
    *cap = len;
    return p;
}

/* The thread's buffer of at least len bytes: which 0 for compressed blocks, 1 for a
 * cluster's data, 2 for what writeback writes.  NULL without memory. */
static uint8_t *thread_buf(struct f2fuse *fs, int which, size_t len)
{
    if (pcache_alloc_fails(fs->cache))
        return NULL;
    if (!thread_bufs) {
        pthread_once(&bufs_once, bufs_setup);
        thread_bufs = calloc(1, sizeof(*thread_bufs));
        if (!thread_bufs)
            return NULL;
        pthread_setspecific(bufs_key, thread_bufs);
    }
    struct thread_bufs *b = thread_bufs;
    return which == 2 ? grow(&b->wbuf, &b->wcap, len)
           : which    ? grow(&b->rbuf, &b->rcap, len)
                      : grow(&b->cbuf, &b->ccap, len);
}

/* The codecs' time: they never block, so their wall time is their CPU time, and the
 * monotonic clock costs ~25 ns where a thread CPU clock is a system call (~1 us a call). */
static uint64_t codec_clock_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- cluster shape ----------------------------------------------------------------------- */

static bool valid_block(const struct f2fuse *fs, uint32_t a)
{
    return a != NULL_ADDR && a != NEW_ADDR && a != COMPRESS_ADDR && blkaddr_in_main(fs, a);
}

static int compress_params(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           struct compress_info *ci)
{
    const char *why;
    if (compress_info_get(&page_node(ipage)->i, ii, ci, &why))
        return fs_corrupt(fs, "inode %u: compressed file with %s", ii->ino, why);
    return 0;
}

/* The compressed blocks of a cluster whose first slot is COMPRESS_ADDR: the valid
 * addresses that follow it, none after a hole or reservation, no second marker (the
 * kernel's f2fs_sanity_check_cluster).  Returns how many (at least one), or -EIO. */
static int stored_blocks(struct f2fuse *fs, const struct inode_info *ii, uint64_t first,
                         const uint32_t *slots, uint32_t csize)
{
    uint32_t n = 0;
    bool ended = false;
    for (uint32_t i = 1; i < csize; i++) {
        bool spare = slots[i] == NULL_ADDR || slots[i] == NEW_ADDR;
        if (slots[i] == COMPRESS_ADDR || (ended && !spare) ||
            (!spare && !blkaddr_in_main(fs, slots[i])))
            return fs_corrupt(fs, "inode %u: compressed cluster at block %llu is malformed",
                              ii->ino, (unsigned long long)first);
        if (spare)
            ended = true;
        else
            n++;
    }
    if (n == 0)
        return fs_corrupt(fs, "inode %u: compressed cluster at block %llu has no data", ii->ino,
                          (unsigned long long)first);
    return (int)n;
}

/* Requests reading the nr compressed blocks slots[1..nr] into buf, one per run of
 * consecutive addresses (a run goes on from the previous cluster's request when the device
 * and the buffer both continue it: clusters written in a row are read in one request);
 * they go to reqs[*nreq] on. */
static void add_block_reads(const uint32_t *slots, int nr, uint8_t *buf, struct blk_req *reqs,
                            struct blk_req **rp, unsigned *nreq)
{
    for (int k = 1; k <= nr; k++) {
        uint8_t *dst = buf + (size_t)(k - 1) * BLK;
        struct blk_req *last = *nreq ? &reqs[*nreq - 1] : NULL;
        if (last && last->off + last->len == (uint64_t)slots[k] * BLK &&
            (uint8_t *)last->buf + last->len == dst) {
            last->len += BLK;
            continue;
        }
        reqs[*nreq] = (struct blk_req){
            .op = BLK_READ, .off = (uint64_t)slots[k] * BLK, .len = BLK, .buf = dst};
        rp[*nreq] = &reqs[*nreq];
        (*nreq)++;
    }
}

/* Decodes nr compressed blocks at cbuf into out (a whole cluster), counting the time.  An
 * encrypted file's compressed blocks are decrypted in place first, each as the file block
 * it occupies (first + 1 on), as the kernel encrypts them. */
static int decode_cluster(struct f2fuse *fs, const struct inode_info *ii,
                          const struct compress_info *ci, uint64_t first, uint8_t *cbuf, int nr,
                          uint8_t *out)
{
    if (ii->contents_key) {
        int err = fscrypt_crypt_blocks(fs, ii->contents_key, false, first + 1, cbuf, (uint32_t)nr);
        if (err)
            return err;
    }
    const char *why = NULL;
    uint64_t t0 = codec_clock_ns();
    int err = compress_decode(ci, cbuf, (uint32_t)nr, out, &why);
    atomic_fetch_add(&fs->clusters.decode_ns, codec_clock_ns() - t0);
    atomic_fetch_add(&fs->clusters.decoded, 1);
    if (err == -EIO)
        err = fs_corrupt(fs, "inode %u: compressed cluster at block %llu (%s): %s", ii->ino,
                         (unsigned long long)first, compress_algorithm_name(ci->algorithm), why);
    return err;
}

/* Reads and decodes the cluster at first (slots as mapped, slots[0] == COMPRESS_ADDR) into
 * out, straight from the device. */
static int decode_stored(struct f2fuse *fs, const struct inode_info *ii,
                         const struct compress_info *ci, uint64_t first, const uint32_t *slots,
                         uint8_t *out)
{
    uint32_t csize = 1u << ci->log_cluster_size;
    int nr = stored_blocks(fs, ii, first, slots, csize);
    if (nr < 0)
        return nr;
    uint8_t *cbuf = thread_buf(fs, 0, (size_t)nr * BLK);
    if (!cbuf)
        return -ENOMEM;
    struct blk_req reqs[MAX_CLUSTER], *rp[MAX_CLUSTER];
    unsigned nreq = 0;
    add_block_reads(slots, nr, cbuf, reqs, rp, &nreq);
    int err = blk_submit_wait(fs->dev, rp, nreq);
    return err ? err : decode_cluster(fs, ii, ci, first, cbuf, nr, out);
}

/* ---- reads ------------------------------------------------------------------------------- */

/* Bytes [from, from + len) of file block b from its cached page p into dst.  An encrypted
 * file's page holds the block's ciphertext: it is decrypted aside. */
static int copy_cached(struct f2fuse *fs, const struct inode_info *ii, const struct page *p,
                       uint64_t b, size_t from, size_t len, uint8_t *dst)
{
    if (!ii->contents_key) {
        memcpy(dst, (const uint8_t *)p->data + from, len);
        return 0;
    }
    _Alignas(64) uint8_t plain[BLK];
    memcpy(plain, p->data, BLK);
    int err = fscrypt_crypt_blocks(fs, ii->contents_key, false, b, plain, 1);
    if (!err)
        memcpy(dst, plain + from, len);
    OPENSSL_cleanse(plain, sizeof(plain));
    return err;
}

/* Copies [lo, hi) of the file into buf (which holds the file from off) from cached pages
 * when every block of it has one (1); else takes the references it found into found[] (by
 * block from base) for the caller to lay over the decoded cluster, and returns 0. */
static int from_cache(struct f2fuse *fs, const struct inode_info *ii, uint8_t *buf, uint64_t off,
                      uint64_t lo, uint64_t hi, uint64_t base, struct page **found)
{
    bool all = true;
    for (uint64_t b = lo / BLK; b * BLK < hi; b++) {
        found[b - base] = pcache_find(fs->cache, PAGE_DATA, data_key(ii->ino, b));
        all &= found[b - base] != NULL;
    }
    if (!all)
        return 0;
    int err = 0;
    for (uint64_t b = lo / BLK; b * BLK < hi; b++) {
        uint64_t from = b * BLK > lo ? b * BLK : lo, to = (b + 1) * BLK < hi ? (b + 1) * BLK : hi;
        if (!err)
            err = copy_cached(fs, ii, found[b - base], b, from - b * BLK, to - from,
                              buf + (from - off));
        pcache_put(fs->cache, found[b - base]);
        found[b - base] = NULL;
    }
    return err ? err : 1;
}

struct read_job {
    uint64_t first; /* the cluster's first block */
    int nr;         /* its compressed blocks, at cbuf + coff */
    size_t coff;
    uint64_t lo, hi; /* the bytes of it the caller wants */
};

/* One span of clusters being read: its compressed blocks' requests in flight (submitted
 * without waiting, so that the previous span decodes meanwhile), the clusters to decode,
 * the cached pages to lay over them. */
struct read_span {
    uint64_t cfirst;
    uint32_t count;
    uint8_t *cbuf;
    struct read_job jobs[READ_SPAN / 4];
    unsigned njobs;
    struct blk_req reqs[READ_SPAN];
    struct blk_req *rp[READ_SPAN];
    unsigned nreq;
    struct page *found[READ_SPAN];
    /* completions */
    pthread_mutex_t lock;
    pthread_cond_t done;
    unsigned pending;
    int ioerr;
};

static void span_req_done(struct blk_req *req)
{
    struct read_span *sp = req->private;
    int err = req->result < 0 ? (int)req->result : (uint64_t)req->result != req->len ? -EIO : 0;
    pthread_mutex_lock(&sp->lock);
    if (err && !sp->ioerr)
        sp->ioerr = err;
    if (--sp->pending == 0)
        pthread_cond_broadcast(&sp->done);
    pthread_mutex_unlock(&sp->lock);
}

/* A run of plain clusters' bytes [lo, hi) not read yet: it grows across spans and is read
 * in one piece when a compressed cluster or a gap ends it (or at the end of the read). */
struct plain_run {
    uint64_t lo, hi;
};

/* Reads the plain clusters of [cfirst, cfirst + count) that [off, off + size) touches (or
 * adds them to the run pr) and starts the reads of its compressed ones (sp->cbuf: room for
 * count blocks). */
static int span_start(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      const struct compress_info *ci, uint8_t *buf, size_t size, uint64_t off,
                      struct read_span *sp, struct plain_run *pr)
{
    uint32_t csize = 1u << ci->log_cluster_size;
    size_t rlen = (size_t)csize * BLK;
    uint64_t end = off + size;
    uint32_t slots[READ_SPAN];
    size_t coff = 0;
    sp->njobs = sp->nreq = sp->pending = 0;
    sp->ioerr = 0;
    memset(sp->found, 0, sizeof(sp->found));
    int err = data_map_slots(fs, ii, &page_node(ipage)->i, sp->cfirst, sp->count, slots);
    for (uint32_t c = 0; c < sp->count && !err; c += csize) {
        uint64_t cbyte = (sp->cfirst + c) * BLK;
        uint64_t lo = off > cbyte ? off : cbyte, hi = end < cbyte + rlen ? end : cbyte + rlen;
        if (lo >= hi)
            continue;
        if (slots[c] != COMPRESS_ADDR) {
            if (pr->hi != lo) {
                if (pr->hi > pr->lo)
                    err = data_read_blocks(fs, ii, ipage, buf + (pr->lo - off), pr->hi - pr->lo,
                                           pr->lo);
                pr->lo = lo;
            }
            pr->hi = hi;
            continue;
        }
        int nr = stored_blocks(fs, ii, sp->cfirst + c, slots + c, csize);
        if (nr < 0) {
            err = nr;
            break;
        }
        /* Cached pages are newer than the device or equal to it; blocks being written by
         * writeback are always read from their pages, which stay cached meanwhile. */
        int cached = fs->seg ? from_cache(fs, ii, buf, off, lo, hi, sp->cfirst, sp->found) : 0;
        if (cached < 0) {
            err = cached;
            break;
        }
        if (cached)
            continue;
        sp->jobs[sp->njobs++] = (struct read_job){sp->cfirst + c, nr, coff, lo, hi};
        add_block_reads(slots + c, nr, sp->cbuf + coff, sp->reqs, sp->rp, &sp->nreq);
        coff += (size_t)nr * BLK;
    }
    if (err || !sp->nreq)
        return err;
    for (unsigned i = 0; i < sp->nreq; i++) {
        sp->reqs[i].done = span_req_done;
        sp->reqs[i].private = sp;
    }
    sp->pending = sp->nreq;
    err = blk_submit(fs->dev, sp->rp, sp->nreq);
    if (err)
        sp->nreq = sp->pending = 0; /* none queued, none will complete */
    return err;
}

/* Waits for a started span's reads (always, also to drop its buffer safely), decodes its
 * clusters and lays cached pages over them. */
static int span_finish(struct f2fuse *fs, const struct inode_info *ii,
                       const struct compress_info *ci, uint8_t *buf, uint64_t off,
                       struct read_span *sp, int err)
{
    size_t rlen = (size_t)BLK << ci->log_cluster_size;
    pthread_mutex_lock(&sp->lock);
    while (sp->pending)
        pthread_cond_wait(&sp->done, &sp->lock);
    if (!err)
        err = sp->ioerr;
    pthread_mutex_unlock(&sp->lock);
    for (unsigned j = 0; j < sp->njobs && !err; j++) {
        struct read_job *jb = &sp->jobs[j];
        uint64_t cbyte = jb->first * BLK;
        /* A whole cluster decodes straight into the caller's buffer. */
        bool whole = jb->lo == cbyte && jb->hi == cbyte + rlen;
        uint8_t *out = whole ? buf + (cbyte - off) : thread_buf(fs, 1, rlen);
        if (!out) {
            err = -ENOMEM;
            break;
        }
        err = decode_cluster(fs, ii, ci, jb->first, sp->cbuf + jb->coff, jb->nr, out);
        if (!err && !whole)
            memcpy(buf + (jb->lo - off), out + (jb->lo - cbyte), jb->hi - jb->lo);
        for (uint64_t b = jb->lo / BLK; !err && b * BLK < jb->hi; b++) {
            struct page *p = sp->found[b - sp->cfirst];
            if (!p)
                continue;
            uint64_t from = b * BLK > jb->lo ? b * BLK : jb->lo;
            uint64_t to = (b + 1) * BLK < jb->hi ? (b + 1) * BLK : jb->hi;
            err = copy_cached(fs, ii, p, b, from - b * BLK, to - from, buf + (from - off));
        }
    }
    for (uint32_t b = 0; b < sp->count; b++)
        if (sp->found[b])
            pcache_put(fs->cache, sp->found[b]);
    sp->njobs = sp->nreq = 0;
    return err;
}

/* ---- a second thread decoding reads ------------------------------------------------------ */

/* Decoding is most of a compressed read's time (LZ4 here: 0.7 ms per MiB where a plain 1 MiB
 * read through FUSE takes 1.5), and a FUSE read is one thread's work: a helper thread takes
 * spans of a read to decode while its reader decodes the others.  One read at a time gets
 * help; when the helper is busy the reader decodes alone.  Started on the first read that
 * has two spans to decode, on machines with more than one CPU. */
struct decode_work {
    struct f2fuse *fs;
    const struct inode_info *ii;
    const struct compress_info *ci;
    uint8_t *buf;
    uint64_t off;
    struct read_span *sps;
    unsigned n;       /* spans started, each to be finished exactly once */
    atomic_uint next; /* the next span to take */
    atomic_int err;   /* the first error */
};

struct cluster_decoder {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake, idle;
    struct decode_work *posted;  /* waiting for the helper */
    struct decode_work *current; /* the helper is in it */
    bool stop;
};

/* Finishes spans of w until none is left to take (in the reader and in the helper);
 * returns how many it finished. */
static unsigned decode_spans(struct decode_work *w)
{
    unsigned done = 0;
    for (unsigned i; (i = atomic_fetch_add(&w->next, 1)) < w->n; done++) {
        int err = span_finish(w->fs, w->ii, w->ci, w->buf, w->off, &w->sps[i],
                              atomic_load(&w->err));
        int none = 0;
        if (err)
            atomic_compare_exchange_strong(&w->err, &none, err);
    }
    return done;
}

static void *decoder_thread(void *arg)
{
    struct cluster_decoder *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stop) {
        if (!d->posted) {
            pthread_cond_wait(&d->wake, &d->lock);
            continue;
        }
        struct decode_work *w = d->posted;
        d->posted = NULL;
        d->current = w;
        pthread_mutex_unlock(&d->lock);
        struct f2fuse *fs = w->fs;
        atomic_fetch_add(&fs->clusters.helper_spans, decode_spans(w));
        pthread_mutex_lock(&d->lock);
        d->current = NULL;
        pthread_cond_broadcast(&d->idle);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

static void decoder_stop(struct cluster_decoder *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stop = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->wake);
    pthread_cond_destroy(&d->idle);
    free(d);
}

/* The helper, started the first time (NULL: one CPU, or it could not start). */
static struct cluster_decoder *decoder(struct f2fuse *fs)
{
    struct cluster_decoder *d = atomic_load(&fs->cluster_decoder);
    if (d)
        return d == (void *)fs ? NULL : d; /* fs: none, and none to try again */
    struct cluster_decoder *none = NULL;
    d = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? calloc(1, sizeof(*d)) : NULL;
    if (d) {
        pthread_mutex_init(&d->lock, NULL);
        pthread_cond_init(&d->wake, NULL);
        pthread_cond_init(&d->idle, NULL);
        if (pthread_create(&d->thread, NULL, decoder_thread, d)) {
            pthread_mutex_destroy(&d->lock);
            pthread_cond_destroy(&d->wake);
            pthread_cond_destroy(&d->idle);
            free(d);
            d = NULL;
        }
    }
    if (atomic_compare_exchange_strong(&fs->cluster_decoder, &none, d ? d : (void *)fs))
        return d;
    decoder_stop(d); /* another reader started one first */
    d = atomic_load(&fs->cluster_decoder);
    return d == (void *)fs ? NULL : d;
}

void cluster_destroy(struct f2fuse *fs)
{
    /* fs: none from now on (a late read decodes alone rather than start another) */
    struct cluster_decoder *d = atomic_exchange(&fs->cluster_decoder, (void *)fs);
    if (d != (void *)fs)
        decoder_stop(d);
}

/* Finishes the started spans sps[0, n), with the helper's hand when it is free. */
static int finish_spans(struct f2fuse *fs, const struct inode_info *ii,
                        const struct compress_info *ci, uint8_t *buf, uint64_t off,
                        struct read_span *sps, unsigned n, int err)
{
    struct decode_work w = {
        .fs = fs, .ii = ii, .ci = ci, .buf = buf, .off = off, .sps = sps, .n = n};
    atomic_init(&w.next, 0);
    atomic_init(&w.err, err);
    unsigned jobs = 0;
    for (unsigned i = 0; i < n; i++)
        jobs += sps[i].njobs > 0;
    struct cluster_decoder *d = !err && jobs > 1 ? decoder(fs) : NULL;
    if (d) {
        pthread_mutex_lock(&d->lock);
        if (!d->posted && !d->current) {
            d->posted = &w;
            pthread_cond_signal(&d->wake);
        }
        pthread_mutex_unlock(&d->lock);
    }
    decode_spans(&w);
    if (d) { /* w lives on this stack: the helper is out of it before it goes */
        pthread_mutex_lock(&d->lock);
        if (d->posted == &w)
            d->posted = NULL;
        while (d->current == &w)
            pthread_cond_wait(&d->idle, &d->lock);
        pthread_mutex_unlock(&d->lock);
    }
    return atomic_load(&w.err);
}

/* Spans of 256 KiB (at least a cluster), up to PIPE_DEPTH of them at once: a 1 MiB read
 * submits all its compressed blocks together (as a plain read does) and decodes each span
 * as its blocks arrive, with the helper, while the later ones are still coming in. */
#define PIPE_SPAN  64u
#define PIPE_DEPTH 8u

int cluster_read(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage, void *buf,
                 size_t size, uint64_t off)
{
    struct compress_info ci;
    int err = compress_params(fs, ii, ipage, &ci);
    if (err || size == 0)
        return err;
    uint32_t csize = 1u << ci.log_cluster_size;
    uint32_t span = csize > PIPE_SPAN ? csize : PIPE_SPAN;
    uint64_t first = off / BLK / csize * csize, last = (off + size - 1) / BLK;
    uint64_t total = (last + 1 - first + csize - 1) / csize * csize;
    uint64_t nspans = (total + span - 1) / span;
    unsigned depth = nspans < PIPE_DEPTH ? (unsigned)nspans : PIPE_DEPTH;
    uint8_t *cbufs = thread_buf(fs, 0, (size_t)depth * span * BLK);
    struct read_span *sps = fs_calloc(fs, depth, sizeof(*sps));
    if (!cbufs || !sps) {
        free(sps);
        return -ENOMEM;
    }
    for (unsigned k = 0; k < depth; k++) {
        pthread_mutex_init(&sps[k].lock, NULL);
        pthread_cond_init(&sps[k].done, NULL);
        sps[k].cbuf = cbufs + (size_t)k * span * BLK;
    }
    struct plain_run pr = {0, 0};
    uint64_t next = first;
    for (uint64_t done = 0; done < nspans && !err; done += depth) {
        unsigned started = 0;
        while (!err && started < depth && done + started < nspans) {
            struct read_span *sp = &sps[started++];
            uint64_t left = first + total - next;
            sp->cfirst = next;
            sp->count = left < span ? (uint32_t)left : span;
            err = span_start(fs, ii, ipage, &ci, buf, size, off, sp, &pr);
            next += sp->count;
        }
        /* every started span is finished, after an error too (its reads, its pages) */
        err = finish_spans(fs, ii, &ci, buf, off, sps, started, err);
    }
    if (!err && pr.hi > pr.lo)
        err = data_read_blocks(fs, ii, ipage, (uint8_t *)buf + (pr.lo - off), pr.hi - pr.lo, pr.lo);
    for (unsigned k = 0; k < depth; k++) {
        pthread_mutex_destroy(&sps[k].lock);
        pthread_cond_destroy(&sps[k].done);
    }
    free(sps);
    return err;
}

/* ---- the whole cluster before a change ----------------------------------------------------- */

int cluster_prepare_change(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                           uint64_t index)
{
    if (!compress_file(ii))
        return 0;
    struct compress_info ci;
    int err = compress_params(fs, ii, ipage, &ci);
    if (err)
        return err;
    uint32_t csize = 1u << ci.log_cluster_size;
    uint64_t first = index / csize * csize;
    uint32_t slots[MAX_CLUSTER];
    /* the first slot says whether the cluster is compressed: the rest only then */
    err = data_map_slots(fs, ii, &page_node(ipage)->i, first, 1, slots);
    if (err || slots[0] != COMPRESS_ADDR)
        return err;
    if (fscrypt_check_contents(ii) && !ii->contents_key)
        return -ENOKEY; /* its pages are ciphertext: nothing to encrypt them with */
    err = data_map_slots(fs, ii, &page_node(ipage)->i, first, csize, slots);
    if (err)
        return err;
    struct page *pages[MAX_CLUSTER];
    bool missing = false;
    for (uint32_t k = 0; k < csize; k++) {
        pages[k] = pcache_find(fs->cache, PAGE_DATA, data_key(ii->ino, first + k));
        missing |= !pages[k];
    }
    uint8_t *rbuf = NULL;
    if (missing) {
        rbuf = thread_buf(fs, 1, (size_t)csize * BLK);
        err = rbuf ? decode_stored(fs, ii, &ci, first, slots, rbuf) : -ENOMEM;
    }
    for (uint32_t k = 0; k < csize && !err; k++) {
        if (pages[k])
            continue;
        /* Bytes at or past the end are zeros, whatever the cluster held there (a crash
         * after a truncate's checkpoint leaves the old cluster behind a smaller i_size). */
        uint8_t *blk = rbuf + (size_t)k * BLK;
        uint64_t at = (first + k) * BLK;
        size_t keep = ii->size <= at ? 0 : ii->size - at >= BLK ? BLK : (size_t)(ii->size - at);
        memset(blk + keep, 0, BLK - keep);
        /* encrypted in the buffer, so that no page ever holds plaintext */
        if (ii->contents_key)
            err = fscrypt_crypt_blocks(fs, ii->contents_key, true, first + k, blk, 1);
        if (!err)
            err = pcache_get(fs->cache, PAGE_DATA, data_key(ii->ino, first + k), PCACHE_NO_LOAD,
                             &pages[k]);
        if (err)
            break;
        memcpy(pages[k]->data, blk, BLK);
    }
    if (rbuf && ii->contents_key)
        OPENSSL_cleanse(rbuf, (size_t)csize * BLK);
    for (uint32_t k = 0; k < csize; k++) {
        if (!pages[k])
            continue;
        if (!err) {
            pages[k]->checkpoint_data = false;
            pcache_mark_dirty(fs->cache, pages[k]);
        }
        pcache_put(fs->cache, pages[k]);
    }
    return err ? err : 1;
}

/* ---- writeback --------------------------------------------------------------------------- */

static uint64_t page_index(const struct page *p)
{
    return p->key & 0xffffffffu;
}

static uint64_t eof_blocks(const struct inode_info *ii)
{
    return (ii->size + BLK - 1) / BLK;
}

size_t cluster_gather(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                      struct page **pages, size_t n, size_t cap, int *err)
{
    *err = 0;
    uint32_t csize = 1u << ii->log_cluster_size;
    uint64_t eof = eof_blocks(ii);
    struct page **out = fs_malloc(fs, cap * sizeof(*out));
    size_t m = 0, i = 0;
    if (!out)
        *err = -ENOMEM;
    while (i < n && !*err) {
        uint64_t first = page_index(pages[i]) / csize * csize;
        size_t j = i;
        struct page *cl[MAX_CLUSTER] = {0};
        for (; j < n && page_index(pages[j]) < first + csize; j++)
            cl[page_index(pages[j]) - first] = pages[j];
        bool gap = false;
        for (uint32_t k = 0; k < csize; k++) {
            if (!cl[k])
                cl[k] = pcache_find_dirty(fs->cache, PAGE_DATA, data_key(ii->ino, first + k));
            gap |= !cl[k] && first + k < eof;
        }
        /* A cluster stored compressed is rewritten whole: its pages were all made dirty
         * when the first one changed; should one be missing, it is decoded now. */
        int r = gap ? cluster_prepare_change(fs, ii, ipage, first) : 0;
        if (r < 0)
            *err = r;
        for (uint32_t k = 0; r > 0 && k < csize; k++)
            if (!cl[k])
                cl[k] = pcache_find_dirty(fs->cache, PAGE_DATA, data_key(ii->ino, first + k));
        size_t count = 0;
        for (uint32_t k = 0; k < csize; k++)
            count += cl[k] != NULL;
        if (*err || m + count > cap) {
            for (uint32_t k = 0; k < csize; k++)
                if (cl[k])
                    pcache_put(fs->cache, cl[k]);
            i = j;
            break; /* the rest stays dirty for a later round */
        }
        for (uint32_t k = 0; k < csize; k++)
            if (cl[k])
                out[m++] = cl[k];
        i = j;
    }
    for (; i < n; i++)
        pcache_put(fs->cache, pages[i]);
    if (out)
        memcpy(pages, out, m * sizeof(*out));
    free(out);
    return m;
}

static void compr_blocks_add(struct page *ipage, int64_t delta)
{
    struct f2fs_inode *ri = &page_node(ipage)->i;
    int64_t v = (int64_t)le64(ri->i_compr_blocks) + delta;
    ri->i_compr_blocks = htole64(v > 0 ? (uint64_t)v : 0);
}

/* One cluster's slots while writeback changes them. */
struct cluster_write {
    struct dnode dn;
    uint8_t version; /* of the direct node, for the summaries */
    uint32_t old[MAX_CLUSTER];
    int old_nr; /* compressed blocks before, 0 for a plain cluster */
};

/* New blocks in the cold data log for the slots ks[0, n) (offsets in the cluster), none
 * taking anything over yet, allocated together (consecutive, so that the cluster reads
 * in one request): either all are allocated or none (-errno). */
static int alloc_blocks(struct f2fuse *fs, const struct cluster_write *cw, const uint32_t *ks,
                        uint32_t n, uint32_t *news)
{
    struct f2fs_summary sums[MAX_CLUSTER];
    for (uint32_t i = 0; i < n; i++)
        sums[i] = (struct f2fs_summary){.nid = htole32(cw->dn.nid),
                                        .version = cw->version,
                                        .ofs_in_node = htole16((uint16_t)(cw->dn.ofs + ks[i]))};
    return seg_alloc_blocks(fs->seg, LOG_COLD_DATA, sums, n, news);
}

/* Slot k gets block b: what it held before is given back (a block invalidated, a
 * reservation spent) or, when it held nothing, i_blocks grows. */
static void take_slot(struct f2fuse *fs, struct page *ipage, struct cluster_write *cw, uint32_t k,
                      uint32_t b, bool released)
{
    uint32_t o = cw->old[k];
    if (valid_block(fs, o))
        seg_invalidate_block(fs->seg, o);
    else if (o == NEW_ADDR || (o == COMPRESS_ADDR && !released))
        seg_reserve(fs->seg, -1);
    else
        inode_add_blocks(fs, ipage, 1);
    cw->dn.addr[k] = htole32(b);
}

static int store_compressed(struct f2fuse *fs, struct page *ipage, struct cluster_write *cw,
                            uint32_t csize, int nr, uint32_t *addrs)
{
    uint32_t ks[MAX_CLUSTER], news[MAX_CLUSTER];
    for (int k = 1; k <= nr; k++)
        ks[k - 1] = (uint32_t)k;
    int err = alloc_blocks(fs, cw, ks, (uint32_t)nr, news);
    if (err)
        return err;
    /* The first slot turns into the marker, the slots past the data into spare ones: a
     * block there becomes a reservation, which keeps i_blocks and the used count. */
    if (valid_block(fs, cw->old[0]))
        seg_invalidate_to_reserved(fs->seg, cw->old[0]);
    cw->dn.addr[0] = htole32(COMPRESS_ADDR);
    addrs[0] = 0;
    for (int k = 1; k <= nr; k++) {
        take_slot(fs, ipage, cw, (uint32_t)k, news[k - 1], false);
        addrs[k] = news[k - 1];
    }
    for (uint32_t k = (uint32_t)nr + 1; k < csize; k++) {
        if (valid_block(fs, cw->old[k]))
            seg_invalidate_to_reserved(fs->seg, cw->old[k]);
        cw->dn.addr[k] = htole32(NEW_ADDR);
        addrs[k] = 0;
    }
    compr_blocks_add(ipage, (int64_t)(csize - (uint32_t)nr) -
                                (cw->old_nr ? (int64_t)(csize - (uint32_t)cw->old_nr) : 0));
    atomic_fetch_add(&fs->clusters.written_compressed, 1);
    atomic_fetch_add(&fs->clusters.blocks_saved, csize - (uint32_t)nr);
    return 0;
}

/* copied: the pages are in out already (a full cluster's attempt put them there); with
 * srcs, nothing is copied: srcs[j] is the page's own data. */
static int store_plain(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                       struct cluster_write *cw, uint32_t csize, uint64_t first,
                       struct page *const *pages, size_t m, uint32_t *addrs, uint8_t *out,
                       bool copied, const void **srcs)
{
    bool released = ii->inline_flags & F2FS_COMPRESS_RELEASED;
    uint64_t eof = eof_blocks(ii);
    uint32_t ks[MAX_CLUSTER], news[MAX_CLUSTER];
    size_t js[MAX_CLUSTER];
    bool written[MAX_CLUSTER] = {false};
    uint32_t n = 0;
    for (size_t j = 0; j < m; j++) {
        uint32_t k = (uint32_t)(page_index(pages[j]) - first);
        addrs[j] = 0;
        /* A formerly compressed cluster keeps nothing past EOF: those slots go below. */
        if (cw->old_nr && first + k >= eof)
            continue;
        ks[n] = k;
        js[n++] = j;
        written[k] = true;
    }
    /* Rewriting a compressed cluster leaves none of its old blocks: every slot inside the
     * file needs its page (cluster_gather and cluster_prepare_change see to it). */
    for (uint32_t k = 0; cw->old_nr && k < csize; k++)
        if (!written[k] && first + k < eof) {
            log_err("inode %u: cluster at block %llu rewritten without its block %u", ii->ino,
                    (unsigned long long)first, k);
            return -EIO;
        }
    int err = alloc_blocks(fs, cw, ks, n, news);
    if (err)
        return err;
    for (uint32_t i = 0; i < n; i++) {
        take_slot(fs, ipage, cw, ks[i], news[i], released);
        addrs[js[i]] = news[i];
        if (srcs)
            srcs[js[i]] = pages[js[i]]->data;
        else if (!copied)
            memcpy(out + js[i] * BLK, pages[js[i]]->data, BLK);
    }
    if (cw->old_nr) {
        for (uint32_t k = 0; k < csize; k++)
            if (!written[k])
                data_free_slot(fs, ipage, &cw->dn.addr[k]);
        if (!released)
            compr_blocks_add(ipage, -(int64_t)(csize - (uint32_t)cw->old_nr));
    }
    atomic_fetch_add(&fs->clusters.written_plain, 1);
    return 0;
}

/* The direct node (or inode) of the clusters one run assigns, held from one cluster to the
 * next: a run's clusters mostly share it (a node maps 1018 blocks), and finding it and its
 * NAT version for each 4-block cluster was a tenth of an incompressible write's CPU. */
struct node_cursor {
    struct dnode dn; /* dn.page NULL: none held */
    uint64_t first;  /* the file block dn points at */
    uint64_t end;    /* the end of the blocks its node maps */
    uint8_t version;
};

/* The pointer of file block first (a cluster's first: clusters never straddle nodes) into
 * cw->dn and cw->version, from the held node when it maps first. */
static int cursor_find(struct f2fuse *fs, const struct inode_info *ii, struct page *ipage,
                       struct node_cursor *nc, uint64_t first, struct cluster_write *cw)
{
    if (!nc->dn.page || first < nc->first || first >= nc->end) {
        dnode_put(fs, ipage, &nc->dn);
        int err = dnode_find(fs, ii, ipage, first, DNODE_ALLOC_NOFAIL, &nc->dn);
        if (err)
            return err;
        struct f2fs_nat_entry ne = {0};
        err = nat_get(fs->nat, nc->dn.nid, &ne);
        if (err) {
            dnode_put(fs, ipage, &nc->dn);
            return err;
        }
        uint32_t cap = nc->dn.page == ipage ? ii->addrs_per_inode : ii->addrs_per_block;
        nc->first = first;
        nc->end = first - nc->dn.ofs + cap;
        nc->version = ne.version;
    }
    uint32_t step = (uint32_t)(first - nc->first);
    cw->dn = (struct dnode){.page = nc->dn.page,
                            .nid = nc->dn.nid,
                            .ofs = nc->dn.ofs + step,
                            .addr = nc->dn.addr + step};
    cw->version = nc->version;
    return 0;
}

/* Writes back one cluster's gathered pages (m of them, from first). */
static int assign_cluster(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                          const struct compress_info *ci, struct node_cursor *nc, uint64_t first,
                          struct page *const *pages, size_t m, uint32_t *addrs, uint8_t *out,
                          const void **srcs)
{
    uint32_t csize = 1u << ci->log_cluster_size;
    struct cluster_write cw = {0};
    int err = cursor_find(fs, ii, ipage, nc, first, &cw);
    if (!err) {
        for (uint32_t k = 0; k < csize; k++)
            cw.old[k] = le32(cw.dn.addr[k]);
        if (cw.old[0] == COMPRESS_ADDR) {
            cw.old_nr = stored_blocks(fs, ii, first, cw.old, csize);
            if (cw.old_nr < 0)
                err = cw.old_nr;
        }
    }
    /* The kernel compresses a cluster whose pages are all dirty, inside the file, every
     * slot reserved or written (cluster_may_compress, f2fs_write_compressed_pages). */
    /* An encrypted file without its key now is stored as its pages are: ciphertext. */
    bool encrypted = fscrypt_check_contents(ii) != 0;
    bool full = !err && m == csize && first + csize <= eof_blocks(ii) &&
                !(ii->inline_flags & F2FS_COMPRESS_RELEASED) && (!encrypted || ii->contents_key);
    for (uint32_t k = 0; full && k < csize; k++)
        full = cw.old[k] != NULL_ADDR;
    int nr = 0;
    if (full) {
        /* The codec reads the cluster from one buffer: where a plain cluster is written
         * from when the caller copies (the stream is laid over it when it saves a block),
         * else a thread's, so that a plain cluster goes out from its pages. */
        uint8_t *in = srcs ? thread_buf(fs, 1, (size_t)csize * BLK) : out;
        for (uint32_t k = 0; in && k < csize; k++)
            memcpy(in + (size_t)k * BLK, pages[k]->data, BLK);
        if (!in)
            err = -ENOMEM;
        else if (encrypted)
            err = fscrypt_crypt_blocks(fs, ii->contents_key, false, first, in, csize);
        uint8_t *cbuf = err ? NULL : thread_buf(fs, 0, (size_t)(csize - 1) * BLK);
        uint64_t t0 = codec_clock_ns();
        nr = err ? 0 : cbuf ? compress_encode(ci, in, cbuf) : -ENOMEM;
        atomic_fetch_add(&fs->clusters.encode_ns, codec_clock_ns() - t0);
        if (nr == -ENOMEM)
            err = nr;
        if (nr < 0)
            nr = 0; /* a codec failure: the cluster is stored plain */
        if (encrypted && in) {
            OPENSSL_cleanse(in, (size_t)csize * BLK);
            if (cbuf && nr == 0)
                OPENSSL_cleanse(cbuf, (size_t)(csize - 1) * BLK);
            if (nr > 0)
                err = fscrypt_crypt_blocks(fs, ii->contents_key, true, first + 1, cbuf,
                                           (uint32_t)nr);
        }
        if (nr > 0)
            memcpy(out + BLK, cbuf, (size_t)nr * BLK);
    }
    if (!err && nr > 0) {
        err = store_compressed(fs, ipage, &cw, csize, nr, addrs);
        for (uint32_t k = 0; srcs && k < csize; k++)
            srcs[k] = addrs[k] ? out + (size_t)k * BLK : NULL;
    } else if (!err) {
        err = store_plain(fs, ii, ipage, &cw, csize, first, pages, m, addrs, out,
                          full && !encrypted && !srcs, srcs);
    }
    if (!err) {
        pcache_mark_dirty(fs->cache, cw.dn.page);
        /* The kernel keeps no read extent for a compressed file (and writes i_ext empty). */
        extent_clear(&page_node(ipage)->i);
        pcache_mark_dirty(fs->cache, ipage);
        for (size_t j = 0; j < m; j++)
            pages[j]->gc_cold = false;
    }
    return err;
}

int cluster_assign_blocks(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                          struct page *const *pages, size_t n, uint32_t *addrs, uint8_t *out,
                          const void **srcs, size_t *done)
{
    *done = 0;
    struct compress_info ci;
    int err = compress_params(fs, ii, ipage, &ci);
    uint32_t csize = 1u << ci.log_cluster_size;
    struct node_cursor nc = {0};
    for (size_t i = 0, next; i < n && !err; i = next) {
        uint64_t first = page_index(pages[i]) / csize * csize;
        for (next = i + 1; next < n && page_index(pages[next]) < first + csize; next++)
            ;
        err = assign_cluster(fs, ii, ipage, &ci, &nc, first, pages + i, next - i, addrs + i,
                             out + i * BLK, srcs ? srcs + i : NULL);
        if (!err)
            *done = next;
    }
    dnode_put(fs, ipage, &nc.dn);
    return err;
}

int cluster_writeback_run(struct f2fuse *fs, uint32_t ino, struct page **pages, size_t n,
                          enum blk_prio prio, uint64_t *written)
{
    struct page *ipage;
    struct inode_info ii;
    struct fscrypt_ikey *key = NULL;
    int err = inode_get(fs, ino, &ipage, &ii);
    if (err) {
        for (size_t i = 0; i < n; i++)
            pcache_put(fs->cache, pages[i]);
        return err;
    }
    /* An encrypted file's clusters are compressed in plaintext: with the key when it is
     * there (a removed key leaves them plain, which the format allows). */
    if (fscrypt_check_contents(&ii) && fscrypt_ikey_get(fs, &ii, ipage, &key) == 0)
        ii.contents_key = key;
    size_t cap = n + NO_PAGE_ROOM, m = 0, done = 0;
    struct page **run = fs_malloc(fs, cap * sizeof(*run));
    uint32_t *addrs = fs_malloc(fs, cap * sizeof(*addrs));
    const void **srcs = fs_malloc(fs, cap * sizeof(*srcs));
    struct blk_req *reqs = fs_malloc(fs, cap * sizeof(*reqs));
    struct blk_req **rp = fs_malloc(fs, cap * sizeof(*rp));
    /* Compressed blocks only (plain clusters go out from their pages, referenced until
     * written): small runs (fsync) reuse the thread's buffer; a checkpoint's big batches
     * allocate, and touch only the pages compressed data lands in. */
    bool own = cap * BLK > (1u << 20);
    uint8_t *out = own ? blk_alloc_buf(cap * BLK) : thread_buf(fs, 2, cap * BLK);
    if (!run || !addrs || !srcs || !reqs || !rp || !out) {
        err = -ENOMEM;
        for (size_t i = 0; i < n; i++)
            pcache_put(fs->cache, pages[i]);
    } else {
        memcpy(run, pages, n * sizeof(*run));
        m = cluster_gather(fs, &ii, ipage, run, n, cap, &err);
        if (!err)
            err = cluster_assign_blocks(fs, &ii, ipage, run, m, addrs, out, srcs, &done);
    }
    /* What was assigned is written even after an error: its pointers changed. */
    unsigned nreq = 0;
    for (size_t i = 0; i < done; i++) {
        if (!addrs[i])
            continue;
        if (nreq && addrs[i] == addrs[i - 1] + 1 &&
            (const uint8_t *)reqs[nreq - 1].buf + reqs[nreq - 1].len == srcs[i]) {
            reqs[nreq - 1].len += BLK;
            continue;
        }
        reqs[nreq] = (struct blk_req){.op = BLK_WRITE,
                                      .prio = prio,
                                      .off = (uint64_t)addrs[i] * BLK,
                                      .len = BLK,
                                      .buf = (void *)srcs[i]};
        rp[nreq] = &reqs[nreq];
        nreq++;
    }
    int werr = nreq ? blk_submit_wait(fs->dev, rp, nreq) : 0;
    if (!werr && done)
        pcache_mark_clean_many(fs->cache, run, addrs, done);
    for (size_t i = 0; i < m; i++)
        pcache_put(fs->cache, run[i]);
    if (!werr)
        *written += done;
    pcache_put(fs->cache, ipage);
    fscrypt_ikey_put(fs, key);
    free(run);
    free(addrs);
    free(srcs);
    free(reqs);
    free(rp);
    if (own)
        free(out);
    return werr ? werr : err;
}

/* ---- truncation ---------------------------------------------------------------------------- */

int cluster_truncate_partial(struct f2fuse *fs, struct inode_info *ii, struct page *ipage,
                             uint64_t new_size, uint64_t *keep_from)
{
    *keep_from = UINT64_MAX;
    uint32_t csize = 1u << ii->log_cluster_size;
    uint64_t first_free = (new_size + BLK - 1) / BLK;
    if (first_free % csize == 0)
        return 0;
    uint64_t first = first_free / csize * csize;
    int r = cluster_prepare_change(fs, ii, ipage, first);
    if (r <= 0)
        return r;
    /* The cluster is all in the cache and dirty: zero past the new end, drop the pages past
     * it; writeback stores it plain (it ends inside the cluster) and frees its slots past
     * EOF.  Until then the device keeps the old cluster, as the kernel does. */
    if (new_size % BLK) {
        uint64_t b = new_size / BLK;
        size_t keep = new_size % BLK;
        struct page *p = pcache_find(fs->cache, PAGE_DATA, data_key(ii->ino, b));
        _Alignas(64) uint8_t plain[BLK];
        int err = 0;
        if (p && ii->contents_key) { /* ciphertext: zeroed in plaintext, encrypted back */
            memcpy(plain, p->data, BLK);
            err = fscrypt_crypt_blocks(fs, ii->contents_key, false, b, plain, 1);
            memset(plain + keep, 0, BLK - keep);
            if (!err)
                err = fscrypt_crypt_blocks(fs, ii->contents_key, true, b, plain, 1);
            if (!err)
                memcpy(p->data, plain, BLK);
            OPENSSL_cleanse(plain, sizeof(plain));
        } else if (p) {
            memset((uint8_t *)p->data + keep, 0, BLK - keep);
        }
        pcache_put(fs->cache, p);
        if (err)
            return err;
    }
    pcache_discard_range(fs->cache, PAGE_DATA, data_key(ii->ino, first_free),
                         data_key(ii->ino, first + csize - 1));
    *keep_from = first + csize;
    return 0;
}

/* ---- segment cleaning ---------------------------------------------------------------------- */

int cluster_gc_move(struct f2fuse *fs, struct inode_info *ii, struct page *ipage, uint64_t index,
                    uint32_t blkaddr)
{
    uint32_t csize = 1u << ii->log_cluster_size;
    uint64_t first = index / csize * csize;
    struct cluster_write cw = {0};
    int err = dnode_get(fs, ii, ipage, first, false, &cw.dn);
    if (err)
        return err == -ENOENT ? 0 : err;
    for (uint32_t k = 0; k < csize; k++)
        cw.old[k] = le32(cw.dn.addr[k]);
    if (cw.old[0] != COMPRESS_ADDR) {
        dnode_put(fs, ipage, &cw.dn);
        return 0;
    }
    int nr = stored_blocks(fs, ii, first, cw.old, csize);
    /* A cluster written in one run moves whole, also its blocks past the victim segment's
     * end (a victim holds at most two such clusters); one scattered over segments (slack
     * space reuse) moves the blocks the victim holds, which the round budgeted for, as the
     * kernel moves blocks. */
    bool run = true;
    for (int k = 2; k <= nr; k++)
        run &= cw.old[k] == cw.old[k - 1] + 1;
    uint32_t seg_first = blkaddr - (blkaddr - fs->main_blkaddr) % F2FS_BLOCKS_PER_SEG;
    uint32_t ks[MAX_CLUSTER], news[MAX_CLUSTER];
    uint32_t n = 0;
    for (int k = 1; k <= nr; k++)
        if (run || (cw.old[k] >= seg_first && cw.old[k] < seg_first + F2FS_BLOCKS_PER_SEG))
            ks[n++] = (uint32_t)k;
    uint8_t *buf = nr > 0 ? thread_buf(fs, 0, (size_t)n * BLK) : NULL;
    if (nr < 0)
        err = nr;
    else if (!buf)
        err = -ENOMEM;
    struct blk_req reqs[MAX_CLUSTER], *rp[MAX_CLUSTER];
    unsigned nreq = 0;
    for (uint32_t i = 0; !err && i < n; i++) {
        reqs[nreq] = (struct blk_req){
            .op = BLK_READ, .off = (uint64_t)cw.old[ks[i]] * BLK, .len = BLK, .buf = buf + i * BLK};
        rp[nreq] = &reqs[nreq];
        nreq++;
    }
    if (!err)
        err = blk_submit_wait(fs->dev, rp, nreq);
    struct f2fs_nat_entry ne = {0};
    if (!err)
        err = nat_get(fs->nat, cw.dn.nid, &ne);
    if (!err) {
        cw.version = ne.version;
        err = alloc_blocks(fs, &cw, ks, n, news);
    }
    if (!err) {
        for (uint32_t i = 0; i < n; i++) {
            reqs[i].op = BLK_WRITE;
            reqs[i].off = (uint64_t)news[i] * BLK;
            reqs[i].result = 0;
        }
        err = blk_submit_wait(fs->dev, rp, nreq);
        if (err) {
            /* The new blocks stay allocated and unreferenced; the mount turns read-only. */
            if (fs_first_write_error(fs, err))
                log_err("moving a compressed cluster of inode %u failed: %s; the mount turns "
                        "read-only",
                        ii->ino, strerror(-err));
        } else {
            for (uint32_t i = 0; i < n; i++) {
                seg_invalidate_block(fs->seg, cw.old[ks[i]]);
                cw.dn.addr[ks[i]] = htole32(news[i]);
            }
            pcache_mark_dirty(fs->cache, cw.dn.page);
            if (extent_clear(&page_node(ipage)->i))
                pcache_mark_dirty(fs->cache, ipage);
            atomic_fetch_add(&fs->clusters.gc_moved, 1);
        }
    }
    dnode_put(fs, ipage, &cw.dn);
    return err ? err : (int)n;
}

void cluster_emit_stats(struct f2fuse *fs, stat_emit_fn emit, void *sink)
{
    struct cluster_stats *s = &fs->clusters;
    emit(sink, "compress.clusters_compressed", atomic_load(&s->written_compressed));
    emit(sink, "compress.clusters_plain", atomic_load(&s->written_plain));
    emit(sink, "compress.bytes_saved", atomic_load(&s->blocks_saved) * BLK);
    emit(sink, "compress.clusters_decoded", atomic_load(&s->decoded));
    emit(sink, "compress.encode_cpu_us", atomic_load(&s->encode_ns) / 1000);
    emit(sink, "compress.decode_cpu_us", atomic_load(&s->decode_ns) / 1000);
    emit(sink, "compress.decode_helper_spans", atomic_load(&s->helper_spans));
    emit(sink, "compress.gc_clusters_moved", atomic_load(&s->gc_moved));
}
