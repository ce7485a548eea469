/* nbd_forward: the least a FUSE file system over NBD can do (bench-only code, never part of
 * f2fuse), for bench/nbd's "FUSE over NBD floor" column.
 *
 *   nbd_forward URI MOUNTPOINT
 *
 * One file, /data, is the whole export: a READ or WRITE becomes one libnbd command at the
 * same offset, an FSYNC a flush; nothing is mapped, cached or allocated beyond the command's
 * buffer.  One thread runs everything in one poll loop, the shape that costs least per
 * request here: it reads every FUSE request waiting (the /dev/fuse descriptor non-blocking),
 * lets libnbd send them, and answers each from libnbd's completion callback as its reply
 * arrives.  No thread hand-offs, no locks.  What fio measures through it is FUSE's round trip
 * plus an NBD client's: f2fuse over NBD is judged against it as well as against fio's nbd
 * engine, which has no FUSE in between. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifdef F2FUSE_HAVE_LIBNBD
#include <libnbd.h>
#include <poll.h>

#define DATA_INO       2
#define TIMEOUT        3600.0
#define MAX_BACKGROUND 64 /* f2fuse's max_background */
#define RECEIVE_BURST  64 /* requests taken off /dev/fuse before libnbd gets a turn */

struct forward {
    struct nbd_handle *nbd;
    struct fuse_session *se;
    int64_t size;
    const char *error; /* set when the export failed under us */
};

struct command {
    fuse_req_t req;
    size_t len;
    bool is_read;
    char buf[]; /* read into, or the write's copy (FUSE reuses its receive buffer) */
};

static struct forward *fw_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static void fill_attr(const struct forward *fw, fuse_ino_t ino, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = ino;
    if (ino == FUSE_ROOT_ID) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
    } else {
        st->st_mode = S_IFREG | 0644;
        st->st_nlink = 1;
        st->st_size = fw->size;
    }
}

/* As many reads in flight as f2fuse allows (the kernel's default is 12 background requests,
 * which an O_DIRECT io_uring read is). */
static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    conn->max_background = MAX_BACKGROUND;
    conn->congestion_threshold = MAX_BACKGROUND * 3 / 4;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    if (parent != FUSE_ROOT_ID || strcmp(name, "data") != 0) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct fuse_entry_param e = {
        .ino = DATA_INO, .generation = 1, .attr_timeout = TIMEOUT, .entry_timeout = TIMEOUT};
    fill_attr(fw_of(req), DATA_INO, &e.attr);
    fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    if (ino != FUSE_ROOT_ID && ino != DATA_INO) {
        fuse_reply_err(req, ENOENT);
        return;
    }
    struct stat st;
    fill_attr(fw_of(req), ino, &st);
    fuse_reply_attr(req, &st, TIMEOUT);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

/* libnbd's callback, inside whichever nbd_* call read the reply (always the loop thread). */
static int command_done(void *user_data, int *error)
{
    struct command *cmd = user_data;
    if (*error)
        fuse_reply_err(cmd->req, *error);
    else if (cmd->is_read)
        fuse_reply_buf(cmd->req, cmd->buf, cmd->len);
    else
        fuse_reply_write(cmd->req, cmd->len);
    free(cmd);
    return 1;
}

/* The part of [off, off + len) inside the export; 0 past its end. */
static size_t clamp(const struct forward *fw, off_t off, size_t len)
{
    if (off < 0 || off >= fw->size)
        return 0;
    return (int64_t)len > fw->size - off ? (size_t)(fw->size - off) : len;
}

static void send_command(fuse_req_t req, bool is_read, const char *data, size_t len, off_t off)
{
    struct forward *fw = fw_of(req);
    struct command *cmd = malloc(sizeof(*cmd) + len);
    if (!cmd) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    *cmd = (struct command){.req = req, .len = len, .is_read = is_read};
    nbd_completion_callback cb = {.callback = command_done, .user_data = cmd};
    int64_t cookie;
    if (is_read) {
        cookie = nbd_aio_pread(fw->nbd, cmd->buf, len, (uint64_t)off, cb, 0);
    } else {
        memcpy(cmd->buf, data, len);
        cookie = nbd_aio_pwrite(fw->nbd, cmd->buf, len, (uint64_t)off, cb, 0);
    }
    if (cookie < 0) { /* libnbd calls no callback for a command it refused */
        fuse_reply_err(req, EIO);
        free(cmd);
    }
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    size_t len = clamp(fw_of(req), off, size);
    if (len == 0)
        fuse_reply_buf(req, NULL, 0);
    else
        send_command(req, true, NULL, len, off);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    size_t len = clamp(fw_of(req), off, size);
    if (len < size)
        fuse_reply_err(req, ENOSPC); /* the export does not grow */
    else
        send_command(req, false, buf, len, off);
}

static int flush_done(void *user_data, int *error)
{
    fuse_reply_err(user_data, *error);
    return 1;
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    nbd_completion_callback cb = {.callback = flush_done, .user_data = req};
    if (nbd_aio_flush(fw_of(req)->nbd, cb, 0) < 0)
        fuse_reply_err(req, EIO);
}

static const struct fuse_lowlevel_ops forward_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .open = op_open,
    .read = op_read,
    .write = op_write,
    .fsync = op_fsync,
};

/* Lets libnbd act on what poll saw on its socket; false once the connection is gone. */
static bool nbd_step(struct forward *fw, short revents)
{
    unsigned dir = (unsigned)nbd_aio_get_direction(fw->nbd);
    int ret = 0;
    if ((dir & LIBNBD_AIO_DIRECTION_READ) && (revents & (POLLIN | POLLHUP | POLLERR)))
        ret = nbd_aio_notify_read(fw->nbd);
    else if ((dir & LIBNBD_AIO_DIRECTION_WRITE) && (revents & (POLLOUT | POLLERR)))
        ret = nbd_aio_notify_write(fw->nbd);
    if (ret < 0 || nbd_aio_is_dead(fw->nbd) || nbd_aio_is_closed(fw->nbd)) {
        fw->error = nbd_get_error() ? nbd_get_error() : "the server closed the connection";
        return false;
    }
    return true;
}

/* Takes up to RECEIVE_BURST waiting requests off /dev/fuse; false once unmounted. */
static bool fuse_step(struct forward *fw, struct fuse_buf *fbuf)
{
    for (int i = 0; i < RECEIVE_BURST; i++) {
        int res = fuse_session_receive_buf(fw->se, fbuf);
        if (res == -EAGAIN || res == -EINTR)
            return true;
        if (res <= 0)
            return false; /* -ENODEV: unmounted */
        fuse_session_process_buf(fw->se, fbuf);
    }
    return true;
}

static int run_loop(struct forward *fw)
{
    struct fuse_buf fbuf = {.mem = NULL};
    int fuse_fd = fuse_session_fd(fw->se);
    if (fcntl(fuse_fd, F_SETFL, fcntl(fuse_fd, F_GETFL) | O_NONBLOCK) < 0) {
        perror("nbd_forward: O_NONBLOCK on /dev/fuse");
        return 1;
    }
    while (!fuse_session_exited(fw->se)) {
        unsigned dir = (unsigned)nbd_aio_get_direction(fw->nbd);
        struct pollfd pfd[2] = {
            {.fd = fuse_fd, .events = POLLIN},
            {.fd = nbd_aio_get_fd(fw->nbd),
             .events = (short)((dir & LIBNBD_AIO_DIRECTION_READ ? POLLIN : 0) |
                               (dir & LIBNBD_AIO_DIRECTION_WRITE ? POLLOUT : 0))},
        };
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            perror("nbd_forward: poll");
            break;
        }
        if (pfd[1].revents && !nbd_step(fw, pfd[1].revents))
            break;
        if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL))
            break; /* unmounted */
        if ((pfd[0].revents & POLLIN) && !fuse_step(fw, &fbuf))
            break;
    }
    free(fbuf.mem);
    if (fw->error) {
        fprintf(stderr, "nbd_forward: %s\n", fw->error);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: nbd_forward URI MOUNTPOINT\n");
        return 2;
    }
    struct forward fw = {.nbd = nbd_create()};
    if (!fw.nbd || nbd_connect_uri(fw.nbd, argv[1]) < 0 || (fw.size = nbd_get_size(fw.nbd)) < 0) {
        fprintf(stderr, "nbd_forward: %s: %s\n", argv[1], nbd_get_error());
        return 1;
    }
    char *fuse_argv[] = {argv[0], "-o", "default_permissions,fsname=nbd_forward", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
    fw.se = fuse_session_new(&args, &forward_ops, sizeof(forward_ops), &fw);
    if (!fw.se || fuse_session_mount(fw.se, argv[2]) != 0) {
        fprintf(stderr, "nbd_forward: cannot mount %s\n", argv[2]);
        return 1;
    }
    int ret = run_loop(&fw);
    fuse_session_unmount(fw.se);
    fuse_session_destroy(fw.se);
    nbd_close(fw.nbd);
    return ret;
}

#else /* built without libnbd-dev */

int main(void)
{
    fprintf(stderr, "nbd_forward: built without libnbd (install libnbd-dev and rebuild)\n");
    return 2;
}

#endif
