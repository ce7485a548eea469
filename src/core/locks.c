/* The inode lock stripes, always taken in ascending stripe order, and the lock shells of
 * one-inode operations. */
#include <stdbool.h>
#include <stdlib.h>

#include "core/locks.h"
#include "core/context.h"

static int stripe_order(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The distinct stripes of inos, ascending: the one order every thread locks them in. */
static int stripes_of(const uint32_t *inos, int n, int *out)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (!inos[i])
            continue;
        int s = (int)(inos[i] % INODE_LOCK_STRIPES);
        bool seen = false;
        for (int j = 0; j < m; j++)
            seen |= out[j] == s;
        if (!seen)
            out[m++] = s;
    }
    qsort(out, (size_t)m, sizeof(*out), stripe_order);
    return m;
}

void inode_lock_many(struct f2fuse *fs, const uint32_t *inos, int n)
{
    int stripes[8];
    int m = stripes_of(inos, n, stripes);
    for (int i = 0; i < m; i++)
        pthread_rwlock_wrlock(&fs->inode_locks[stripes[i]]);
}

void inode_unlock_many(struct f2fuse *fs, const uint32_t *inos, int n)
{
    int stripes[8];
    int m = stripes_of(inos, n, stripes);
    for (int i = m - 1; i >= 0; i--)
        pthread_rwlock_unlock(&fs->inode_locks[stripes[i]]);
}

void inode_lock_shared(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->inode_locks[ino % INODE_LOCK_STRIPES]);
}

void inode_unlock_shared(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_unlock(&fs->inode_locks[ino % INODE_LOCK_STRIPES]);
}

void op_change_begin(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    inode_lock_many(fs, &ino, 1);
}

void op_change_end(struct f2fuse *fs, uint32_t ino)
{
    inode_unlock_many(fs, &ino, 1);
    pthread_rwlock_unlock(&fs->cp_lock);
}

void op_read_begin(struct f2fuse *fs, uint32_t ino)
{
    pthread_rwlock_rdlock(&fs->cp_lock);
    inode_lock_shared(fs, ino);
}

void op_read_end(struct f2fuse *fs, uint32_t ino)
{
    inode_unlock_shared(fs, ino);
    pthread_rwlock_unlock(&fs->cp_lock);
}

void read_pin(struct f2fuse *fs)
{
    pthread_mutex_lock(&fs->pin_lock);
    fs->read_pins++;
    pthread_mutex_unlock(&fs->pin_lock);
}

void read_unpin(struct f2fuse *fs)
{
    pthread_mutex_lock(&fs->pin_lock);
    if (--fs->read_pins == 0)
        pthread_cond_broadcast(&fs->pins_gone);
    pthread_mutex_unlock(&fs->pin_lock);
}

void read_pins_drain(struct f2fuse *fs)
{
    pthread_mutex_lock(&fs->pin_lock);
    while (fs->read_pins)
        pthread_cond_wait(&fs->pins_gone, &fs->pin_lock);
    pthread_mutex_unlock(&fs->pin_lock);
}
