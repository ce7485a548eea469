/* What every mechanism shares: corruption reports, the read-only checks and the write-error
 * policy. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/context.h"
#include "core/dir_index.h"
#include "core/refs.h"
#include "util/log.h"

int fs_corrupt(struct f2fuse *fs, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    atomic_fetch_add(&fs->corrupt_hits, 1);
    log_err("corrupt image: %s", msg);
    return -EIO;
}

int fs_writable(struct f2fuse *fs)
{
    if (!fs->seg)
        return -EROFS;
    return __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE) ? -EIO : 0;
}

int fs_op_result(struct f2fuse *fs, const char *op, int err)
{
    if (err != -EIO && err != -ENOMEM && err != -EUCLEAN)
        return err;
    if (!fs->seg || __atomic_load_n(&fs->write_error, __ATOMIC_ACQUIRE))
        return err;
    if (fs_first_write_error(fs, err))
        log_err("%s failed part-way: %s; the mount turns read-only (no further checkpoint) "
                "so that no half-done change reaches the image",
                op, strerror(-err));
    return err;
}

struct f2fuse *context_create(const struct f2fuse_options *opts)
{
    struct f2fuse *fs = calloc(1, sizeof(*fs));
    if (!fs)
        return NULL;
    fs->lock_fd = -1;
    fs->opts = *opts;
    /* A checkpoint must not starve behind a stream of operations: writers go first (no
     * operation takes cp_lock twice, so this cannot deadlock). */
    pthread_rwlockattr_t rwattr;
    pthread_rwlockattr_init(&rwattr);
    pthread_rwlockattr_setkind_np(&rwattr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&fs->cp_lock, &rwattr);
    pthread_rwlockattr_destroy(&rwattr);
    pthread_mutex_init(&fs->ns_lock, NULL);
    pthread_mutex_init(&fs->pin_lock, NULL);
    pthread_cond_init(&fs->pins_gone, NULL);
    refs_init(fs);
    dir_index_init(fs);
    pthread_mutex_init(&fs->tune_lock, NULL);
    pthread_mutex_init(&fs->space.lock, NULL);
    pthread_mutex_init(&fs->fsync.lock, NULL);
    flush_merge_init(&fs->flushes);
    pthread_mutex_init(&fs->cpc.lock, NULL);
    /* the merging daemon's batch wait and the space waits have monotonic deadlines */
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);
    pthread_cond_init(&fs->cpc.wake, &mono);
    pthread_cond_init(&fs->space.freed, &mono);
    pthread_condattr_destroy(&mono);
    pthread_cond_init(&fs->cpc.done, NULL);
    pthread_rwlockattr_t prefer_writers;
    pthread_rwlockattr_init(&prefer_writers);
    pthread_rwlockattr_setkind_np(&prefer_writers, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    for (int i = 0; i < INODE_LOCK_STRIPES; i++)
        pthread_rwlock_init(&fs->inode_locks[i], &prefer_writers);
    pthread_rwlockattr_destroy(&prefer_writers);
    return fs;
}

void context_free(struct f2fuse *fs)
{
    pthread_rwlock_destroy(&fs->cp_lock);
    pthread_mutex_destroy(&fs->ns_lock);
    pthread_mutex_destroy(&fs->pin_lock);
    pthread_cond_destroy(&fs->pins_gone);
    for (unsigned i = 0; i < REF_STRIPES; i++)
        pthread_mutex_destroy(&fs->refs[i].lock);
    pthread_mutex_destroy(&fs->tune_lock);
    pthread_mutex_destroy(&fs->space.lock);
    pthread_cond_destroy(&fs->space.freed);
    pthread_mutex_destroy(&fs->fsync.lock);
    flush_merge_destroy(&fs->flushes);
    pthread_mutex_destroy(&fs->cpc.lock);
    pthread_cond_destroy(&fs->cpc.wake);
    pthread_cond_destroy(&fs->cpc.done);
    for (int i = 0; i < INODE_LOCK_STRIPES; i++)
        pthread_rwlock_destroy(&fs->inode_locks[i]);
    free(fs);
}
