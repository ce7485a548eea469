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
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default: break;
    }
    if (*end || n > (UINT64_MAX >> shift))
        return -EINVAL;
    *out = (uint64_t)n << shift;
    return 0;
}
