/* The option tables of the library (options.c) and of its test entry points (test.c). */
#ifndef F2FUSE_API_OPTIONS_H
#define F2FUSE_API_OPTIONS_H

#include "util/optspec.h"

extern const struct optspec_table library_options; /* targets struct f2fuse_options */
extern const struct optspec_table test_options;    /* targets struct f2fuse_test_options */

#endif
