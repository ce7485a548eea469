#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Verbosity comes from the environment (F2FUSE_LOG=debug, or =none for fuzzers that feed
 * millions of broken images), read each time: logging is rare and this keeps the library
 * free of global mutable state.  -1 = nothing. */
static int max_level(void)
{
    const char *env = getenv("F2FUSE_LOG");
    if (env && env[0] == 'd')
        return LOG_DEBUG;
    if (env && env[0] == 'n')
        return -1;
    return LOG_INFO;
}

void f2_log(enum log_level level, const char *fmt, ...)
{
    static const char *const words[] = {"error", "warning", "info", "debug"};
    if ((int)level > max_level())
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "f2fuse: %s: %s\n", words[level], line);
}
