/* The public API's implementation (include/f2fuse.h): each function a thin shell that checks
 * its arguments, takes the locks of a reading operation or calls the mechanism that does the
 * work, and applies the write-error policy.  Mechanisms never call back up into it. */
#ifndef F2FUSE_API_API_H
#define F2FUSE_API_API_H

#include "core/cachesize.h"
#include "core/casefold.h"
#include "core/checkpoint.h"
#include "core/checkpoint_merge.h"
#include "core/checkpoint_timer.h"
#include "core/context.h"
#include "core/data.h"
#include "core/dir.h"
#include "core/discard.h"
#include "core/fault.h"
#include "core/file.h"
#include "core/fileattr.h"
#include "core/flush_merge.h"
#include "core/fscrypt.h"
#include "core/fscrypt_cipher.h"
#include "core/fscrypt_keys.h"
#include "core/fsync.h"
#include "core/gc.h"
#include "core/imagelock.h"
#include "core/info.h"
#include "core/inode.h"
#include "core/locks.h"
#include "core/namei.h"
#include "core/nat.h"
#include "core/node.h"
#include "core/quota.h"
#include "core/recovery.h"
#include "core/segment.h"
#include "core/space.h"
#include "core/super.h"
#include "core/verity.h"
#include "core/writeback.h"
#include "core/xattr.h"
#include "util/log.h"
#include "util/parse.h"

#endif
