/* A name as one directory sees it: its entry's hash and how stored entries match it
 * (fs/f2fs/dir.c f2fs_setup_filename, f2fs_match_name). */
#include <errno.h>
#include <string.h>

#include "core/dirname.h"
#include "core/casefold.h"
#include "core/context.h"
#include "core/dir.h"
#include "core/inode.h"

static bool is_dot_or_dotdot(const uint8_t *name, size_t len)
{
    return (len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.');
}

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
    if ((dir->flags & F2FS_CASEFOLD_FL) && !is_dot_or_dotdot(dn->name, len))
        return casefold_name_init(fs, dir, dn);
    dn->hash = dentry_hash(dn->name, len);
    return 0;
}

bool dir_name_matches(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                      uint32_t stored_hash, const uint8_t *stored, size_t stored_len)
{
    return stored_hash == dn->hash && dir_name_same(fs, dir, dn, stored, stored_len);
}

bool dir_name_same(struct f2fuse *fs, const struct inode_info *dir, const struct dir_name *dn,
                   const uint8_t *stored, size_t stored_len)
{
    if (dn->folded)
        return casefold_same(dn, stored, stored_len);
    return stored_len == dn->len && memcmp(stored, dn->name, dn->len) == 0;
}

bool dir_name_scan_on_miss(struct f2fuse *fs, const struct inode_info *dir,
                           const struct dir_name *dn)
{
    return dn->casefolded && casefold_needs_scan(fs, dir->ino);
}

void dir_name_scan_clean(struct f2fuse *fs, const struct inode_info *dir)
{
    casefold_scanned_clean(fs, dir->ino);
}

bool dir_name_placed(struct f2fuse *fs, const struct inode_info *dir, uint32_t stored_hash,
                     const uint8_t *stored, size_t stored_len)
{
    if (is_dot_or_dotdot(stored, stored_len))
        return stored_hash == 0;
    if (dir->flags & F2FS_CASEFOLD_FL)
        return casefold_placed(fs, stored_hash, stored, stored_len);
    return stored_hash == dentry_hash(stored, stored_len);
}
