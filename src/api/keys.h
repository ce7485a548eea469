/* keys.c: the fscrypt key options and key files of the API. */
#ifndef F2FUSE_API_KEYS_H
#define F2FUSE_API_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct f2fuse;

/* Adds every key the fscrypt_key= options name (at open); an unreadable one refuses the
 * mount with a message. */
int keys_load_options(struct f2fuse *fs);
/* Appends one fscrypt_key= value to the option's list (size bytes): -EINVAL when it does
 * not fit or holds a newline. */
int keys_option_add(char *list, size_t size, const char *value);
/* Hex digits to bytes: the count, or -EINVAL (odd, too long, not hex). */
ssize_t keys_hex_decode(const char *hex, size_t len, uint8_t *out, size_t max);

#endif
