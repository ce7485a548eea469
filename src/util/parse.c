#include "util/parse.h"

#include <errno.h>
#include <stdlib.h>

int parse_size(const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long n = strtoull(text, &end, 10);
    if (errno || end == text || text[0] == '-')
        return -EINVAL;
    /* K, M, G, T: powers of 1024, either case */
    static const char units[] = "kmgt";
    unsigned shift = 0;
    for (unsigned i = 0; *end && units[i]; i++) {
        if ((*end | 0x20) == units[i]) {
            shift = 10 * (i + 1);
            end++;
            break;
        }
    }
    if (*end || n > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t)n << shift;
    return 0;
}

int parse_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}
