/* Log lines go to stderr with a "f2fuse: " prefix and a level word. */
#ifndef F2FUSE_UTIL_LOG_H
#define F2FUSE_UTIL_LOG_H

enum log_level { LOG_ERR, LOG_WARN, LOG_INFO, LOG_DEBUG };

void f2_log(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...)  f2_log(LOG_ERR, __VA_ARGS__)
#define log_warn(...) f2_log(LOG_WARN, __VA_ARGS__)
#define log_info(...) f2_log(LOG_INFO, __VA_ARGS__)

#endif
