/* The f2fuse command: the daemon plus subcommands (walk, stat, trim, info, unsparse). */
#ifndef F2FUSE_CLI_CLI_H
#define F2FUSE_CLI_CLI_H

#include "f2fuse.h"
#include "f2fuse_test.h"

/* Applies a comma-separated -o list to opts, and its test options to test; prints what is
 * wrong and returns -1. */
int cli_apply_options(struct f2fuse_options *opts, struct f2fuse_test_options *test,
                      const char *list);

int walk_main(int argc, char **argv);
int stat_main(int argc, char **argv);
int set_main(int argc, char **argv);      /* main.c: f2fuse set */
int sync_main(int argc, char **argv);     /* main.c: f2fuse sync */
int trim_main(int argc, char **argv);     /* trim.c */
int info_main(int argc, char **argv);     /* info.c */
int unsparse_main(int argc, char **argv); /* unsparse.c */
int key_main(int argc, char **argv);      /* key.c: f2fuse key */

#endif
