/* Option tables: parsing, defaults and descriptions, all read off the rows (optspec.h). */
#include "util/optspec.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "util/parse.h"

const struct optspec *optspec_find(const struct optspec_table *t, const char *name, bool *negated)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct optspec *s = &t->specs[i];
        bool neg = s->negated && strcmp(name, s->negated) == 0;
        if (neg || strcmp(name, s->name) == 0) {
            if (negated)
                *negated = neg;
            return s;
        }
    }
    return NULL;
}

static void *field(const struct optspec *s, void *target)
{
    return (char *)target + s->offset;
}

static const void *cfield(const struct optspec *s, const void *target)
{
    return (const char *)target + s->offset;
}

/* Fields are bool, unsigned or uint64_t; the table's sizes say which. */
static void store_number(const struct optspec *s, void *target, uint64_t n)
{
    void *f = field(s, target);
    if (s->size == sizeof(bool))
        *(bool *)f = n != 0;
    else if (s->size == sizeof(unsigned))
        *(unsigned *)f = (unsigned)n;
    else
        *(uint64_t *)f = n;
}

uint64_t optspec_number(const struct optspec *s, const void *target)
{
    if (s->kind == OPTSPEC_TEXT || s->kind == OPTSPEC_CUSTOM || (s->flags & OPTSPEC_STORE_WORD))
        return 0;
    const void *f = cfield(s, target);
    if (s->size == sizeof(bool))
        return *(const bool *)f;
    if (s->size == sizeof(unsigned))
        return *(const unsigned *)f;
    return *(const uint64_t *)f;
}

static int set_flag(const struct optspec *s, void *target, const char *value, bool negated)
{
    bool on = !negated;
    if (value) {
        if (negated || !(s->flags & OPTSPEC_ON_OFF))
            return -EINVAL;
        if (strcmp(value, "on") == 0 || strcmp(value, "1") == 0)
            on = true;
        else if (strcmp(value, "off") == 0 || strcmp(value, "0") == 0)
            on = false;
        else
            return -EINVAL;
    }
    store_number(s, target, on);
    return 0;
}

static int set_number(const struct optspec *s, void *target, const char *value)
{
    uint64_t n;
    if (value && (s->flags & OPTSPEC_AUTO) && strcmp(value, "auto") == 0) {
        store_number(s, target, 0);
        return 0;
    }
    if (!value || parse_size(value, &n))
        return -EINVAL;
    bool off = n == 0 && (s->flags & OPTSPEC_ZERO_OFF);
    if (!off && (n < s->min || n > s->max))
        return -EINVAL;
    store_number(s, target, n);
    return 0;
}

static int set_choice(const struct optspec *s, void *target, const char *value)
{
    if (!value)
        return -EINVAL;
    for (const struct optspec_choice *c = s->choices; c->word; c++) {
        if (strcmp(value, c->word) != 0)
            continue;
        if (s->flags & OPTSPEC_STORE_WORD)
            *(const char **)field(s, target) = c->word; /* the table's: static */
        else
            store_number(s, target, c->value);
        return 0;
    }
    return -EINVAL;
}

static int set_text(const struct optspec *s, void *target, const char *value)
{
    if (!value || !value[0] || strlen(value) >= s->size)
        return -EINVAL;
    memcpy(field(s, target), value, strlen(value) + 1);
    return 0;
}

static int set_one(const struct optspec *s, void *target, const char *value, bool negated)
{
    if (negated && s->kind != OPTSPEC_FLAG)
        return -EINVAL;
    switch (s->kind) {
    case OPTSPEC_FLAG: return set_flag(s, target, value, negated);
    case OPTSPEC_NUMBER: return set_number(s, target, value);
    case OPTSPEC_CHOICE: return set_choice(s, target, value);
    case OPTSPEC_TEXT: return set_text(s, target, value);
    case OPTSPEC_CUSTOM: return s->parse(target, value);
    }
    return -EINVAL;
}

int optspec_set(const struct optspec_table *t, void *target, const char *name, const char *value)
{
    bool negated = false;
    const struct optspec *s = optspec_find(t, name, &negated);
    if (!s)
        return -ENOENT;
    int err = set_one(s, target, value, negated);
    if (err)
        return err;
    const struct optspec *cleared = s->clears ? optspec_find(t, s->clears, NULL) : NULL;
    if (cleared) /* as the kernel's vm.dirty_* pairs: a ratio replaces the byte value */
        memset(field(cleared, target), 0, cleared->size);
    return 0;
}

void optspec_defaults(const struct optspec_table *t, void *target)
{
    for (size_t i = 0; i < t->count; i++) {
        const struct optspec *s = &t->specs[i];
        if (!s->fallback) {
            if (s->kind != OPTSPEC_CUSTOM)
                memset(field(s, target), 0, s->size);
            continue;
        }
        int err;
        if (s->kind == OPTSPEC_FLAG) /* "on"/"off", whatever the flag accepts from users */
            err = (store_number(s, target, strcmp(s->fallback, "on") == 0), 0);
        else
            err = set_one(s, target, s->fallback, false);
        (void)err; /* the tables' own defaults parse (unit/test_options checks each) */
    }
}

void optspec_copy(const struct optspec_table *t, const struct optspec *s, void *dst,
                  const void *src)
{
    memcpy(field(s, dst), cfield(s, src), s->size);
    const struct optspec *cleared = s->clears ? optspec_find(t, s->clears, NULL) : NULL;
    if (cleared)
        memcpy(field(cleared, dst), cfield(cleared, src), cleared->size);
}

/* A byte count as the user would write it: 64M rather than 67108864. */
static void format_size(uint64_t n, bool bytes, char *buf, size_t len)
{
    static const char suffix[] = "KMG";
    int unit = -1;
    while (bytes && n && unit < 2 && n % 1024 == 0) {
        n /= 1024;
        unit++;
    }
    if (unit < 0)
        snprintf(buf, len, "%" PRIu64, n);
    else
        snprintf(buf, len, "%" PRIu64 "%c", n, suffix[unit]);
}

static bool counts_bytes(const struct optspec *s)
{
    return s->metavar && strstr(s->metavar, "BYTES");
}

static void choice_words(const struct optspec *s, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const struct optspec_choice *c = s->choices; c->word && used < len; c++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", c == s->choices ? "" : "|",
                                 c->word);
}

void optspec_usage(const struct optspec *s, char *buf, size_t len)
{
    char words[160];
    switch (s->kind) {
    case OPTSPEC_FLAG:
        snprintf(buf, len, "%s%s%s%s", s->name, s->flags & OPTSPEC_ON_OFF ? "=on|off" : "",
                 s->negated ? ", " : "", s->negated ? s->negated : "");
        break;
    case OPTSPEC_CHOICE:
        choice_words(s, words, sizeof(words));
        snprintf(buf, len, "%s=%s", s->name, words);
        break;
    case OPTSPEC_CUSTOM: /* its metavar says all: "fuse_ring[=N|auto|off]" */
        snprintf(buf, len, "%s", s->metavar ? s->metavar : s->name);
        break;
    default: snprintf(buf, len, "%s=%s", s->name, s->metavar ? s->metavar : "VALUE"); break;
    }
}

void optspec_range(const struct optspec *s, char *buf, size_t len)
{
    char lo[32], hi[32];
    switch (s->kind) {
    case OPTSPEC_FLAG:
        snprintf(buf, len, "%s", s->flags & OPTSPEC_ON_OFF ? "on|off" : "no value");
        break;
    case OPTSPEC_CHOICE: choice_words(s, buf, len); break;
    case OPTSPEC_NUMBER:
        format_size(s->min, counts_bytes(s), lo, sizeof(lo));
        format_size(s->max, counts_bytes(s), hi, sizeof(hi));
        const char *zero = s->flags & OPTSPEC_ZERO_OFF ? "0 (off), "
                           : s->flags & OPTSPEC_AUTO   ? "auto, "
                                                       : "";
        if (s->max == UINT64_MAX)
            snprintf(buf, len, "%s%s or more", zero, lo);
        else
            snprintf(buf, len, "%s%s..%s", zero, lo, hi);
        break;
    case OPTSPEC_TEXT: snprintf(buf, len, "up to %zu characters", s->size - 1); break;
    case OPTSPEC_CUSTOM: snprintf(buf, len, "%s", s->metavar ? s->metavar : s->name); break;
    }
}

/* The default as shown: the flag's own name or its negation for flags. */
static const char *shown_default(const struct optspec *s, char *buf, size_t len)
{
    if (!s->fallback)
        return s->kind == OPTSPEC_NUMBER ? "0" : "none";
    if (s->kind == OPTSPEC_FLAG) {
        bool on = strcmp(s->fallback, "on") == 0;
        if (!(s->flags & OPTSPEC_ON_OFF) && (on || s->negated))
            return on ? s->name : s->negated;
        return s->fallback;
    }
    if (s->kind == OPTSPEC_NUMBER) {
        uint64_t n;
        if (parse_size(s->fallback, &n) == 0) {
            format_size(n, counts_bytes(s), buf, len);
            return buf;
        }
    }
    return s->fallback;
}

static const char *liveness(const struct optspec *s)
{
    if (s->flags & OPTSPEC_LIVE_RO)
        return "; f2fuse set changes it on any running mount";
    if (s->flags & OPTSPEC_LIVE)
        return "; f2fuse set changes it on a running read-write mount";
    return "";
}

static void print_lines(const struct optspec *s, FILE *out, bool troff)
{
    char usage[200], range[200], dflt[32];
    optspec_usage(s, usage, sizeof(usage));
    optspec_range(s, range, sizeof(range));
    const char *d = shown_default(s, dflt, sizeof(dflt));
    bool show_range = s->kind == OPTSPEC_NUMBER || s->kind == OPTSPEC_TEXT;
    const char *sep = show_range ? "; " : "", *r = show_range ? range : "";
    if (s->kind == OPTSPEC_CUSTOM && !s->fallback) /* an action, not a value */
        fprintf(out, troff ? ".TP\n\\fB%s\\fR\n%s\n" : "  %s\n      %s\n", usage, s->help);
    else if (troff) /* text lines, not requests: test_manpage looks for the prose on those */
        fprintf(out, ".TP\n\\fB%s\\fR\n%s\nDefault: %s%s%s%s.\n", usage, s->help, d, sep, r,
                liveness(s));
    else
        fprintf(out, "  %s\n      %s\n      default %s%s%s%s\n", usage, s->help, d, sep, r,
                liveness(s));
}

void optspec_print(const struct optspec_table *t, FILE *out, enum optspec_style style, bool tests)
{
    bool first = true;
    for (size_t i = 0; i < t->count; i++) {
        const struct optspec *s = &t->specs[i];
        bool test = s->flags & OPTSPEC_TEST;
        if (test && !tests)
            continue;
        if (style == OPTSPEC_LIST) {
            char usage[200];
            optspec_usage(s, usage, sizeof(usage));
            fprintf(out, "%s%s%s", first ? "" : ", ", test ? "(tests) " : "", usage);
        } else {
            print_lines(s, out, style == OPTSPEC_TROFF);
        }
        first = false;
    }
}
