/* FUSE_HANDLE_KILLPRIV_V2 through libfuse's custom I/O hooks (killpriv.h). */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <linux/fuse.h> /* the kernel's protocol: INIT flags, the requests' kill flags */
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuse/fuse_ring.h"
#include "fuse/killpriv.h"

/* FUSE_OVER_IO_URING (1 << 41 in protocol 7.42): bit 9 of the INIT flags2 word. */
#define INIT2_OVER_IO_URING (1u << 9)

/* Set once by killpriv_install, before the session reads anything. */
static struct killpriv *(*state_of_userdata)(void *userdata);

/* libfuse reads a request and handles it in the same thread (so does fuse_ring.c). */
static __thread bool request_kills_suidgid;

bool killpriv_request_kills_suidgid(void)
{
    return request_kills_suidgid;
}

static uint32_t u32_at(const void *arg, size_t len, size_t off)
{
    uint32_t v = 0;
    if (off + sizeof(v) <= len)
        memcpy(&v, (const char *)arg + off, sizeof(v));
    return v;
}

void killpriv_note_request(const void *buf, size_t n)
{
    request_kills_suidgid = false;
    if (n < sizeof(struct fuse_in_header))
        return;
    struct fuse_in_header h;
    memcpy(&h, buf, sizeof(h));
    const char *arg = (const char *)buf + sizeof(h);
    size_t len = n - sizeof(h);
    switch (h.opcode) {
    case FUSE_WRITE:
        request_kills_suidgid = u32_at(arg, len, offsetof(struct fuse_write_in, write_flags)) &
                                FUSE_WRITE_KILL_SUIDGID;
        break;
    case FUSE_SETATTR:
        request_kills_suidgid = u32_at(arg, len, offsetof(struct fuse_setattr_in, valid)) &
                                FATTR_KILL_SUIDGID;
        break;
    case FUSE_OPEN:
        request_kills_suidgid = u32_at(arg, len, offsetof(struct fuse_open_in, open_flags)) &
                                FUSE_OPEN_KILL_SUIDGID;
        break;
    default: break;
    }
}

static ssize_t io_read(int fd, void *buf, size_t buf_len, void *userdata)
{
    ssize_t n = read(fd, buf, buf_len);
    killpriv_note_request(buf, n > 0 ? (size_t)n : 0);
    if (n < (ssize_t)sizeof(struct fuse_in_header))
        return n;
    struct fuse_in_header h;
    memcpy(&h, buf, sizeof(h));
    if (h.opcode == FUSE_INIT) {
        struct killpriv *kp = state_of_userdata(userdata);
        bool offered = u32_at((const char *)buf + sizeof(h), (size_t)n - sizeof(h),
                              offsetof(struct fuse_init_in, flags)) &
                       FUSE_HANDLE_KILLPRIV_V2;
        atomic_store(&kp->init_unique, h.unique);
        atomic_store(&kp->offered, offered);
        uint32_t flags2 = u32_at((const char *)buf + sizeof(h), (size_t)n - sizeof(h),
                                 offsetof(struct fuse_init_in, flags2));
        atomic_store(&kp->ring_offered, (flags2 & INIT2_OVER_IO_URING) != 0);
    }
    return n;
}

/* After the INIT reply went out: the kernel has taken it in when writev returns. */
static void init_replied(struct killpriv *kp, const struct iovec *iov, int count, ssize_t n,
                         void *userdata)
{
    struct fuse_out_header oh;
    if (n < 0 || !kp->on_init_replied || count < 1 || iov[0].iov_len != sizeof(oh))
        return;
    memcpy(&oh, iov[0].iov_base, sizeof(oh));
    if (oh.unique == atomic_load(&kp->init_unique) && oh.error == 0 &&
        !atomic_exchange(&kp->init_done, true))
        kp->on_init_replied(userdata);
}

/* Writes a reply; the INIT reply gets the flags libfuse 3.14 cannot ask for. */
static ssize_t killpriv_writev(struct killpriv *kp, int fd, struct iovec *iov, int count)
{
    struct fuse_out_header oh;
    bool killpriv = kp->want && atomic_load(&kp->offered);
    bool ring = kp->ring_flag && atomic_load(&kp->ring_offered);
    if ((killpriv || ring) && !atomic_load(&kp->init_done) && count == 2 &&
        iov[0].iov_len == sizeof(oh) &&
        iov[1].iov_len >= offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t)) {
        memcpy(&oh, iov[0].iov_base, sizeof(oh));
        struct fuse_init_out init;
        if (oh.unique == atomic_load(&kp->init_unique) && oh.error == 0 &&
            iov[1].iov_len <= sizeof(init)) {
            memcpy(&init, iov[1].iov_base, iov[1].iov_len);
            if (killpriv)
                init.flags |= FUSE_HANDLE_KILLPRIV_V2;
            if (ring) {
                /* the connection keeps the ring even if enable_uring is turned off later */
                init.flags |= FUSE_INIT_EXT;
                init.flags2 |= INIT2_OVER_IO_URING;
            }
            struct iovec patched[2] = {iov[0], {.iov_base = &init, .iov_len = iov[1].iov_len}};
            ssize_t n = writev(fd, patched, 2);
            if (n >= 0) {
                atomic_store(&kp->enabled, killpriv);
                atomic_store(&kp->ring_flagged, ring);
            }
            return n;
        }
    }
    return writev(fd, iov, count);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    ssize_t n;
    if (fuse_ring_reply(iov, count, &n)) /* the reply of a request that came by the ring */
        return n;
    struct killpriv *kp = state_of_userdata(userdata);
    n = killpriv_writev(kp, fd, iov, count);
    init_replied(kp, iov, count, n, userdata);
    return n;
}

int killpriv_install(struct fuse_session *se, struct killpriv *(*state_of)(void *userdata))
{
    state_of_userdata = state_of;
    static const struct fuse_custom_io io = {.read = io_read, .writev = io_writev};
    return fuse_session_custom_io(se, &io, fuse_session_fd(se)) == 0 ? 0 : -EINVAL;
}
