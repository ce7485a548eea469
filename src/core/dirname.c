/* A name as one directory sees it: its entry's hash and how stored entries match it
 * (fs/f2fs/dir.c f2fs_setup_filename, f2fs_match_name). */
#include <errno.h>
#include <string.h>

#include "core/dirname.h"
#include "core/context.h"
#include "core/dir.h"

int dir_name_init(struct f2fuse *fs, const struct inode_info *dir, const char *name, size_t len,
                  struct dir_name *dn)
{
    memset(dn, 0, sizeof(*dn));
    if (len == 0)
        return -ENOENT;
    if (len > F2FS_NAME_LEN)
        return -ENAMETOOLONG;
    dn->name = (const uint8_t *)name;
    dn->len = len;
    dn->hash = dentry_hash(dn->name, len);
    return 0;
}

bool dir_name_matches(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                      uint32_t stored_hash, const uint8_t *stored, size_t stored_len)
{
    return stored_hash == dn->hash && stored_len == dn->len &&
           memcmp(stored, dn->name, dn->len) == 0;
}
