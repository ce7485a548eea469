/* Option tables: one row per option (name, type, default, range, the field it is stored in,
 * whether a running mount may change it, one line of help), from which come the parser, the
 * validation, the defaults, the usage lists, `f2fuse options`, the man page's option summary
 * and `f2fuse stat`'s tune.* lines.  In the spirit of the kernel's fs_parameter_spec tables
 * (f2fs_param_specs[]) and libfuse's fuse_opt: no option is known in two places. */
#ifndef F2FUSE_UTIL_OPTSPEC_H
#define F2FUSE_UTIL_OPTSPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum optspec_kind {
    OPTSPEC_FLAG,   /* bool: "name" sets it, the negated name clears it */
    OPTSPEC_NUMBER, /* unsigned or uint64_t: a count with K/M/G suffixes (parse_size) */
    OPTSPEC_CHOICE, /* one word of choices[]: its value in a bool or unsigned field */
    OPTSPEC_TEXT,   /* a string copied into a char array field */
    OPTSPEC_CUSTOM, /* parse() reads the value */
};

#define OPTSPEC_LIVE       (1u << 0) /* `f2fuse set` may change it on a read-write mount */
#define OPTSPEC_LIVE_RO    (1u << 1) /* ... and on a read-only one */
#define OPTSPEC_ON_OFF     (1u << 2) /* FLAG: also name=on|off|1|0 */
#define OPTSPEC_ZERO_OFF   (1u << 3) /* NUMBER: 0 (off) is valid besides min..max */
#define OPTSPEC_STORE_WORD (1u << 4) /* CHOICE: the field is a const char * to the word */
#define OPTSPEC_TEST       (1u << 5) /* for the crash and fault tests (f2fuse_test.h) */
#define OPTSPEC_AUTO       (1u << 6) /* NUMBER: the word "auto" stores 0 */

struct optspec_choice {
    const char *word;
    unsigned value;
};

struct optspec {
    const char *name;
    enum optspec_kind kind;
    size_t offset, size;  /* of the field in the table's target struct */
    const char *negated;  /* FLAG: the name that clears it ("nodiscard"), or NULL */
    const char *fallback; /* the default as a user would write it ("64M", "on"); NULL: zero */
    uint64_t min, max;    /* NUMBER: the valid range */
    const struct optspec_choice *choices; /* CHOICE: ends with a NULL word */
    /* CUSTOM: stores value (NULL when given without '=') into the target; 0 or -EINVAL. */
    int (*parse)(void *target, const char *value);
    const char *metavar; /* what the value is ("BYTES"), or the whole usage for CUSTOM */
    unsigned flags;      /* OPTSPEC_* */
    const char *clears;  /* another option of the table zeroed when this one is set */
    const char *help;    /* one line: what it does */
};

struct optspec_table {
    const char *title; /* the group's name in lists ("f2fuse", "FUSE tuning") */
    const struct optspec *specs;
    size_t count;
};

#define OPTSPEC_FIELD(type, member) offsetof(type, member), sizeof(((type *)0)->member)
#define OPTSPEC_TABLE(title, specs)                          \
    {                                                        \
        (title), (specs), sizeof(specs) / sizeof((specs)[0]) \
    }

/* The option called name (or its negated name, then *negated is set), or NULL. */
const struct optspec *optspec_find(const struct optspec_table *t, const char *name, bool *negated);

/* Sets one option of target from "name" or "name=value" (value NULL without '=').
 * 0, -ENOENT when the table has no such name, -EINVAL for a bad or missing value. */
int optspec_set(const struct optspec_table *t, void *target, const char *name, const char *value);

/* Stores every option's default into target. */
void optspec_defaults(const struct optspec_table *t, void *target);

/* The field of a FLAG, NUMBER or CHOICE option as a number (stat lines), else 0. */
uint64_t optspec_number(const struct optspec *s, const void *target);

/* Copies the field of s from src to dst (and of the option it clears). */
void optspec_copy(const struct optspec_table *t, const struct optspec *s, void *dst,
                  const void *src);

/* "name=METAVAR", "name, noname", "name=a|b|c": how the option is written. */
void optspec_usage(const struct optspec *s, char *buf, size_t len);

enum optspec_style {
    OPTSPEC_LIST,  /* "a, b=N, c=x|y": for --help and error messages */
    OPTSPEC_LINES, /* one option per line: usage, help, default, range, live */
    OPTSPEC_TROFF, /* the man page's option summary */
};

/* Prints the table's options (those with OPTSPEC_TEST only when tests is true; in a list,
 * behind "(tests) "). */
void optspec_print(const struct optspec_table *t, FILE *out, enum optspec_style style, bool tests);

/* What values s accepts, for error messages ("1..4096", "on|off|sync"). */
void optspec_range(const struct optspec *s, char *buf, size_t len);

#endif
