#include "fuse/ctl.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/log.h"

#define CTL_MAX_COMMAND 512

struct ctl_server {
    int fd;
    pthread_t thread;
    ctl_handler_fn handler;
    void *arg;
};

/* Abstract socket address "\0f2fuse-ctl:<hash of the real path>". */
static int ctl_address(const char *real, struct sockaddr_un *addr, socklen_t *len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const char *p = real; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "f2fuse-ctl:%016llx",
                     (unsigned long long)h);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    return 0;
}

/* Only root and the daemon's own user may read counters or change settings. */
static int peer_allowed(int fd)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return 0;
    return cred.uid == 0 || cred.uid == getuid();
}

static void serve_one(struct ctl_server *srv, int fd)
{
    char command[CTL_MAX_COMMAND];
    size_t used = 0;
    while (used < sizeof(command) - 1) {
        ssize_t n = read(fd, command + used, sizeof(command) - 1 - used);
        if (n <= 0)
            break;
        used += (size_t)n;
        if (memchr(command, '\n', used))
            break;
    }
    command[used] = '\0';
    command[strcspn(command, "\n")] = '\0';
    FILE *out = fdopen(fd, "w");
    if (!out) {
        close(fd);
        return;
    }
    if (!peer_allowed(fd))
        fprintf(out, "error: permission denied\n");
    else if (srv->handler(srv->arg, command, out) != 0)
        fprintf(out, "error: unknown command '%s'\n", command);
    fclose(out);
    OPENSSL_cleanse(command, sizeof(command)); /* `f2fuse key add` sends a key */
}

static void *ctl_thread(void *p)
{
    struct ctl_server *srv = p;
    for (;;) {
        int fd = accept4(srv->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break; /* shut down by ctl_stop */
        }
        serve_one(srv, fd);
    }
    return NULL;
}

int ctl_start(const char *real_path, ctl_handler_fn handler, void *arg, struct ctl_server **out)
{
    struct sockaddr_un addr;
    socklen_t len;
    int err = ctl_address(real_path, &addr, &len);
    if (err)
        return err;
    struct ctl_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return -ENOMEM;
    srv->handler = handler;
    srv->arg = arg;
    srv->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (srv->fd < 0 || bind(srv->fd, (struct sockaddr *)&addr, len) != 0 ||
        listen(srv->fd, 8) != 0) {
        err = -errno;
        if (srv->fd >= 0)
            close(srv->fd);
        free(srv);
        return err;
    }
    err = -pthread_create(&srv->thread, NULL, ctl_thread, srv);
    if (err) {
        close(srv->fd);
        free(srv);
        return err;
    }
    *out = srv;
    return 0;
}

void ctl_stop(struct ctl_server *srv)
{
    if (!srv)
        return;
    shutdown(srv->fd, SHUT_RDWR); /* wakes accept() */
    pthread_join(srv->thread, NULL);
    close(srv->fd);
    free(srv);
}

int ctl_request(const char *mountpoint, const char *command, FILE *out)
{
    char real[PATH_MAX];
    if (!realpath(mountpoint, real))
        return -errno;
    struct sockaddr_un addr;
    socklen_t len;
    int err = ctl_address(real, &addr, &len);
    if (err)
        return err;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&addr, len) != 0) {
        err = -errno;
        close(fd);
        return err;
    }
    size_t clen = strlen(command);
    if (write(fd, command, clen) != (ssize_t)clen || write(fd, "\n", 1) != 1) {
        err = -errno;
        close(fd);
        return err;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        fwrite(buf, 1, (size_t)n, out);
    close(fd);
    return n < 0 ? -errno : 0;
}
