/* fscrypt master keys through the API: key files, the fscrypt_key= option at open, add,
 * remove, list (fscrypt_keys.c keeps them), and the encrypted inodes a caller holds. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/keys.h"
#include "util/parse.h"

int f2fuse_key_add(struct f2fuse *fs, const uint8_t *raw, size_t len, const uint8_t *desc,
                   struct f2fuse_key_info *info)
{
    return fscrypt_key_add(fs, raw, len, desc, info);
}

int f2fuse_key_remove(struct f2fuse *fs, const uint8_t *spec, size_t len, unsigned *busy)
{
    return fscrypt_key_remove(fs, spec, len, busy);
}

int f2fuse_key_list(struct f2fuse *fs, f2fuse_key_fn fn, void *arg)
{
    return fscrypt_key_list(fs, fn, arg);
}

ssize_t keys_hex_decode(const char *hex, size_t len, uint8_t *out, size_t max)
{
    if (len % 2 || len / 2 > max)
        return -EINVAL;
    for (size_t i = 0; i < len; i += 2) {
        int hi = parse_hex_digit((unsigned char)hex[i]),
            lo = parse_hex_digit((unsigned char)hex[i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return (ssize_t)(len / 2);
}

int f2fuse_key_read_file(const char *path, uint8_t *key, size_t *len)
{
    /* Room for 64 bytes as hex and a newline; read into locked memory, wiped after. */
    enum { MAX_FILE = 2 * FSCRYPT_MASTER_MAX + 2 };
    uint8_t buf[MAX_FILE + 1] = {0};
    if (mlock(buf, sizeof(buf)) != 0)
        return -errno;
    bool in = strcmp(path, "-") == 0;
    int fd = in ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -errno : 0;
    size_t got = 0;
    while (n >= 0 && got < sizeof(buf)) {
        n = read(fd, buf + got, sizeof(buf) - got);
        if (n < 0)
            n = errno == EINTR ? 0 : -errno;
        else if (n == 0)
            break;
        else
            got += (size_t)n;
    }
    if (fd >= 0 && !in)
        close(fd);
    int err = n < 0 ? (int)n : 0;
    if (!err) {
        size_t text = got && buf[got - 1] == '\n' ? got - 1 : got;
        ssize_t hex = keys_hex_decode((const char *)buf, text, key, FSCRYPT_MASTER_MAX);
        if (hex >= FSCRYPT_MASTER_MIN && got <= MAX_FILE) {
            *len = (size_t)hex;
        } else if (got >= FSCRYPT_MASTER_MIN && got <= FSCRYPT_MASTER_MAX) {
            memcpy(key, buf, got);
            *len = got;
        } else {
            err = -EINVAL;
        }
    }
    OPENSSL_cleanse(buf, sizeof(buf));
    munlock(buf, sizeof(buf));
    return err;
}

/* One fscrypt_key= value: FILE, or DESC:FILE with a v1 descriptor of 16 hex digits. */
static int load_spec(struct f2fuse *fs, const char *spec)
{
    uint8_t desc[FSCRYPT_DESCRIPTOR_SIZE];
    const char *path = spec;
    bool has_desc = strlen(spec) > 17 && spec[16] == ':' &&
                    keys_hex_decode(spec, 16, desc, sizeof(desc)) == FSCRYPT_DESCRIPTOR_SIZE;
    if (has_desc)
        path = spec + 17;
    uint8_t key[FSCRYPT_MASTER_MAX];
    size_t len = 0;
    int err = mlock(key, sizeof(key)) ? -errno : f2fuse_key_read_file(path, key, &len);
    struct f2fuse_key_info info;
    if (!err)
        err = fscrypt_key_add(fs, key, len, has_desc ? desc : NULL, &info);
    OPENSSL_cleanse(key, sizeof(key));
    munlock(key, sizeof(key));
    if (err == -EINVAL)
        log_err("fscrypt_key=%s: not a key (16 to 64 bytes, raw or in hex digits)", path);
    else if (err)
        log_err("fscrypt_key=%s: %s", path, strerror(-err));
    return err;
}

int keys_load_options(struct f2fuse *fs)
{
    char list[sizeof(fs->opts.fscrypt_keys)];
    memcpy(list, fs->opts.fscrypt_keys, sizeof(list));
    list[sizeof(list) - 1] = '\0';
    char *save = NULL;
    for (char *spec = strtok_r(list, "\n", &save); spec; spec = strtok_r(NULL, "\n", &save)) {
        int err = load_spec(fs, spec);
        if (err)
            return err;
    }
    return 0;
}

int keys_option_add(char *list, size_t size, const char *value)
{
    size_t used = strnlen(list, size), n = value ? strlen(value) : 0;
    if (!n || strchr(value, '\n') || used + n + 2 > size)
        return -EINVAL;
    memcpy(list + used, value, n);
    list[used + n] = '\n';
    list[used + n + 1] = '\0';
    return 0;
}

static ssize_t encrypted_step(struct f2fuse *fs, uint32_t ino)
{
    op_read_begin(fs, ino);
    struct page *page;
    struct inode_info ii;
    int err = inode_get(fs, ino, &page, &ii);
    if (!err) {
        err = fscrypt_encrypted(&ii);
        pcache_put(fs->cache, page);
    }
    op_read_end(fs, ino);
    return err;
}

int f2fuse_encrypted_held(struct f2fuse *fs, void (*fn)(void *arg, uint32_t ino), void *arg)
{
    uint32_t n;
    uint32_t *held = inode_refs_held(fs, &n);
    if (!held)
        return -ENOMEM;
    for (uint32_t i = 0; i < n; i++)
        if (encrypted_step(fs, held[i]) > 0)
            fn(arg, held[i]);
    free(held);
    return 0;
}
