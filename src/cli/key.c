/* f2fuse key add|list|remove MOUNTPOINT: fscrypt master keys of a running mount, over its
 * control socket.  The key file is read here, as the caller (who may read it), into locked
 * memory, sent as hex digits and wiped. */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "cli/cli.h"
#include "fuse/ctl.h"

static void usage(void)
{
    fprintf(stderr, "usage: f2fuse key add MOUNTPOINT [DESC:]FILE   add a master key (FILE: 16..64 "
                    "bytes, raw or hex; - reads stdin;\n"
                    "                                               DESC: a v1 descriptor in 16 "
                    "hex digits, if not the usual one)\n"
                    "       f2fuse key list MOUNTPOINT              keys present, and policies met "
                    "without their key\n"
                    "       f2fuse key remove MOUNTPOINT ID         remove a key (identifier or v1 "
                    "descriptor)\n");
}

/* The daemon's lines "present ID DESC", "busy ID DESC N", "missing vN KEY", then "ok". */
static void print_list(const char *reply)
{
    char line[256];
    for (const char *p = reply; *p;) {
        size_t n = strcspn(p, "\n");
        snprintf(line, sizeof(line), "%.*s", (int)n, p);
        p += n + (p[n] == '\n');
        char id[64], desc[64], v[8];
        unsigned busy;
        if (sscanf(line, "present %63s %63s", id, desc) == 2)
            printf("present  v2 %s  v1 %s\n", id, desc);
        else if (sscanf(line, "busy %63s %63s %u", id, desc, &busy) == 3)
            printf("removed  v2 %s  v1 %s  (%u open file(s) keep it until closed)\n", id, desc,
                   busy);
        else if (sscanf(line, "missing %7s %63s", v, id) == 2)
            printf("missing  %s %s  (met without its key)\n", v, id);
    }
}

/* Sends command; the reply lands in reply (size bytes).  Prints why and returns non-zero
 * when no mount answers or it says "error: ...". */
static int ask(const char *mnt, const char *command, char *reply, size_t size, const char *what)
{
    reply[0] = '\0';
    FILE *out = fmemopen(reply, size - 1, "w");
    int err = out ? ctl_request(mnt, command, out) : -ENOMEM;
    if (out)
        fclose(out);
    if (err) {
        fprintf(stderr, "f2fuse: error: %s: no f2fuse mount answers there (%s)\n", mnt,
                strerror(-err));
        return 1;
    }
    if (strncmp(reply, "error: ", 7) == 0 || !reply[0]) {
        fprintf(stderr, "f2fuse: key %s: %s", what, reply[0] ? reply + 7 : "no reply\n");
        return 1;
    }
    return 0;
}

static int key_add(const char *mnt, const char *spec)
{
    const char *path = spec, *desc = "";
    if (strlen(spec) > 17 && spec[16] == ':' && strspn(spec, "0123456789abcdefABCDEF") == 16) {
        desc = spec;
        path = spec + 17;
    }
    uint8_t key[64] = {0};
    char command[64 + 2 * sizeof(key) + 32];
    size_t len = 0;
    int err = mlock(key, sizeof(key)) || mlock(command, sizeof(command)) ? -errno : 0;
    if (!err)
        err = f2fuse_key_read_file(path, key, &len);
    if (err) {
        fprintf(stderr, "f2fuse: error: %s: %s\n", path,
                err == -EINVAL ? "not a key (16 to 64 bytes, raw or in hex digits)"
                               : strerror(-err));
        OPENSSL_cleanse(key, sizeof(key));
        return 1;
    }
    int n = snprintf(command, sizeof(command), "key add ");
    for (size_t i = 0; i < len; i++)
        n += snprintf(command + n, sizeof(command) - (size_t)n, "%02x", key[i]);
    if (*desc)
        snprintf(command + n, sizeof(command) - (size_t)n, " %.16s", desc);
    OPENSSL_cleanse(key, sizeof(key));
    char reply[512];
    int status = ask(mnt, command, reply, sizeof(reply), "add");
    OPENSSL_cleanse(command, sizeof(command));
    char id[64], d[64];
    if (status)
        return status;
    if (sscanf(reply, "ok present %63s %63s", id, d) != 2) {
        fprintf(stderr, "f2fuse: key add: unexpected reply: %s", reply);
        return 1;
    }
    printf("added key %s (v1 descriptor %s)\n", id, d);
    return 0;
}

int key_main(int argc, char **argv)
{
    char reply[8192];
    if (argc == 4 && strcmp(argv[1], "add") == 0)
        return key_add(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "list") == 0) {
        if (ask(argv[2], "key list", reply, sizeof(reply), "list"))
            return 1;
        print_list(reply);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "remove") == 0) {
        char command[128];
        unsigned busy = 0;
        snprintf(command, sizeof(command), "key remove %s", argv[3]);
        if (ask(argv[2], command, reply, sizeof(reply), "remove"))
            return 1;
        if (sscanf(reply, "ok removed %u", &busy) == 1 && busy)
            printf("removed key %s; %u open file(s) keep it until closed\n", argv[3], busy);
        else
            printf("removed key %s\n", argv[3]);
        return 0;
    }
    usage();
    return 2;
}
