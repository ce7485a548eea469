/* fault.c: the test options (include/f2fuse_test.h) armed at open */
#ifndef F2FUSE_CORE_FAULT_H
#define F2FUSE_CORE_FAULT_H

struct f2fuse;

struct f2fuse_test_options;
struct f2fuse_fault;

/* One fault=KIND:N[:WHAT][:sticky] value; 0 or -EINVAL. */
int fault_parse(const char *value, struct f2fuse_fault *f);
/* Arms the power-cut and fault layers before the first write (test may be NULL); 0 or
 * -ENOMEM. */
int fault_arm(struct f2fuse *fs, const struct f2fuse_test_options *test);

#endif
