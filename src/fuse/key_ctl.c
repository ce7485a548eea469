/* fscrypt keys on a live mount, over the control socket (ctl.c checks the peer: root or the
 * daemon's user).  The reply is what `f2fuse key` prints: "ok ..." lines, or "error: ...". */
#include "fuse/key_ctl.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <string.h>

#include "util/parse.h"

#define FSCRYPT_KEY_MAX 64

static void put_hex(FILE *out, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%02x", b[i]);
}

/* The hex word at *p (advanced past it and the spaces after): its byte count, or -1. */
static int hex_word(const char **p, uint8_t *out, size_t max)
{
    size_t n = 0;
    const char *s = *p;
    for (; parse_hex_digit((unsigned char)s[0]) >= 0 && parse_hex_digit((unsigned char)s[1]) >= 0;
         s += 2) {
        if (n == max)
            return -1;
        out[n++] = (uint8_t)(parse_hex_digit((unsigned char)s[0]) << 4 |
                             parse_hex_digit((unsigned char)s[1]));
    }
    if (*s && *s != ' ')
        return -1;
    while (*s == ' ')
        s++;
    *p = s;
    return (int)n;
}

static void print_key(FILE *out, const struct f2fuse_key_info *k)
{
    if (k->status == F2FUSE_KEY_MISSING) {
        fprintf(out, "missing v%u ", k->version);
        if (k->version == 1)
            put_hex(out, k->descriptor, sizeof(k->descriptor));
        else
            put_hex(out, k->identifier, sizeof(k->identifier));
        fprintf(out, "\n");
        return;
    }
    fprintf(out, "%s ", k->status == F2FUSE_KEY_BUSY ? "busy" : "present");
    put_hex(out, k->identifier, sizeof(k->identifier));
    fprintf(out, " ");
    put_hex(out, k->descriptor, sizeof(k->descriptor));
    if (k->status == F2FUSE_KEY_BUSY)
        fprintf(out, " %u", k->busy_files);
    fprintf(out, "\n");
}

static int list_one(void *arg, const struct f2fuse_key_info *k)
{
    print_key(arg, k);
    return 0;
}

void key_ctl(struct f2fuse *fs, const char *args, FILE *out, void (*inval)(void *arg, uint32_t ino),
             void *arg)
{
    if (strcmp(args, "list") == 0) {
        f2fuse_key_list(fs, list_one, out);
        fprintf(out, "ok\n");
        return;
    }
    if (strncmp(args, "add ", 4) == 0) {
        uint8_t key[FSCRYPT_KEY_MAX], desc[8];
        const char *p = args + 4;
        int n = hex_word(&p, key, sizeof(key));
        int d = n > 0 && *p ? hex_word(&p, desc, sizeof(desc)) : 0;
        struct f2fuse_key_info info;
        int err = n <= 0 || *p || (d && d != (int)sizeof(desc))
                      ? -EINVAL
                      : f2fuse_key_add(fs, key, (size_t)n, d ? desc : NULL, &info);
        OPENSSL_cleanse(key, sizeof(key));
        if (err) {
            fprintf(out, "error: %s\n",
                    err == -EINVAL ? "not a key (16 to 64 bytes)" : strerror(-err));
            return;
        }
        f2fuse_encrypted_held(fs, inval, arg);
        fprintf(out, "ok ");
        print_key(out, &info);
        return;
    }
    if (strncmp(args, "remove ", 7) == 0) {
        uint8_t spec[16];
        const char *p = args + 7;
        int n = hex_word(&p, spec, sizeof(spec));
        unsigned busy = 0;
        int err = (n != 8 && n != 16) || *p ? -EINVAL
                                            : f2fuse_key_remove(fs, spec, (size_t)n, &busy);
        if (err) {
            fprintf(out, "error: %s\n",
                    err == -ENOKEY   ? "no such key on this mount"
                    : err == -EINVAL ? "name a key by its identifier (32 hex digits) or "
                                       "descriptor (16)"
                                     : strerror(-err));
            return;
        }
        f2fuse_encrypted_held(fs, inval, arg);
        fprintf(out, "ok removed %u\n", busy);
        return;
    }
    fprintf(out, "error: key add HEX [DESC] | key remove ID | key list\n");
}
