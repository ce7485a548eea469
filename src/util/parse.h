/* Parsing of option values. */
#ifndef F2FUSE_UTIL_PARSE_H
#define F2FUSE_UTIL_PARSE_H

#include <stdint.h>

/* A decimal count with an optional K/M/G/T suffix (powers of 1024): 0, or -EINVAL for
 * anything else (a sign, trailing characters, overflow). */
int parse_size(const char *text, uint64_t *out);
/* The value of hex digit c (either case), or -1. */
int parse_hex_digit(int c);

#endif
