/* FUSE_HANDLE_KILLPRIV_V2 through libfuse's custom I/O hooks (killpriv.h). */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <linux/fuse.h> /* the kernel's protocol: INIT flags, the requests' kill flags */
#include <stddef.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fuse/killpriv.h"

/* Set once by killpriv_install, before the session reads anything. */
static struct killpriv *(*state_of_userdata)(void *userdata);

/* libfuse reads a request and handles it in the same thread. */
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

static ssize_t io_read(int fd, void *buf, size_t buf_len, void *userdata)
{
    ssize_t n = read(fd, buf, buf_len);
    request_kills_suidgid = false;
    if (n < (ssize_t)sizeof(struct fuse_in_header))
        return n;
    struct fuse_in_header h;
    memcpy(&h, buf, sizeof(h));
    const char *arg = (const char *)buf + sizeof(h);
    size_t len = (size_t)n - sizeof(h);
    switch (h.opcode) {
    case FUSE_INIT: {
        struct killpriv *kp = state_of_userdata(userdata);
        bool offered = u32_at(arg, len, offsetof(struct fuse_init_in, flags)) &
                       FUSE_HANDLE_KILLPRIV_V2;
        atomic_store(&kp->init_unique, h.unique);
        atomic_store(&kp->offered, offered);
        break;
    }
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
    default:
        break;
    }
    return n;
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
    struct killpriv *kp = state_of_userdata(userdata);
    struct fuse_out_header oh;
    if (kp->want && atomic_load(&kp->offered) && !atomic_load(&kp->enabled) && count == 2 &&
        iov[0].iov_len == sizeof(oh) && iov[1].iov_len >= offsetof(struct fuse_init_out, flags) +
                                                            sizeof(uint32_t)) {
        memcpy(&oh, iov[0].iov_base, sizeof(oh));
        struct fuse_init_out init;
        if (oh.unique == atomic_load(&kp->init_unique) && oh.error == 0 &&
            iov[1].iov_len <= sizeof(init)) {
            memcpy(&init, iov[1].iov_base, iov[1].iov_len);
            init.flags |= FUSE_HANDLE_KILLPRIV_V2;
            struct iovec patched[2] = {iov[0], {.iov_base = &init, .iov_len = iov[1].iov_len}};
            ssize_t n = writev(fd, patched, 2);
            if (n >= 0)
                atomic_store(&kp->enabled, true);
            return n;
        }
    }
    return writev(fd, iov, count);
}

int killpriv_install(struct fuse_session *se, struct killpriv *(*state_of)(void *userdata))
{
    state_of_userdata = state_of;
    static const struct fuse_custom_io io = {.read = io_read, .writev = io_writev};
    return fuse_session_custom_io(se, &io, fuse_session_fd(se)) == 0 ? 0 : -EINVAL;
}
