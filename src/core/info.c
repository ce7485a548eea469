/* f2fuse_info: an image's summary, read through the mount's own read path (the superblock
 * and checkpoint super.c and checkpoint.c chose, the segment table as segment.c loads it,
 * the fsync chain as recovery.c walks it), so what `f2fuse info` shows is what a mount
 * would see. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/info.h"
#include "core/context.h"
#include "core/recovery.h"
#include "core/segment.h"

static const char *const feature_names[] = {"encrypt",
                                            "blkzoned",
                                            "atomic_write",
                                            "extra_attr",
                                            "project_quota",
                                            "inode_checksum",
                                            "flexible_inline_xattr",
                                            "quota",
                                            "inode_crtime",
                                            "lost_found",
                                            "verity",
                                            "sb_checksum",
                                            "casefold",
                                            "compression",
                                            "ro"};

static const char *const cp_flag_names[] = {
    "umount",           "orphan_present",  "compact_summary", "error",          "fsck",
    "fastboot",         "crc_recovery",    "nat_bits",        "trimmed",        "nocrc_recovery",
    "large_nat_bitmap", "quota_need_fsck", "disabled",        "disabled_quick", "resizefs"};

/* Names of the set bits, comma-separated; unnamed bits as hex. */
static void bit_names(uint32_t bits, const char *const *names, unsigned count, char *out,
                      size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (unsigned b = 0; b < 32; b++) {
        if (!(bits & (1u << b)))
            continue;
        char hex[16];
        snprintf(hex, sizeof(hex), "0x%x", 1u << b);
        int n = snprintf(out + used, size - used, "%s%s", used ? "," : "",
                         b < count ? names[b] : hex);
        if (n < 0 || (size_t)n >= size - used)
            break;
        used += (size_t)n;
    }
}

/* The superblock's UTF-16LE volume name as UTF-8 (unpaired surrogates become '?'). */
static void volume_name(const struct f2fs_super_block *sb, char *out, size_t size)
{
    size_t o = 0;
    for (size_t i = 0; i < sizeof(sb->volume_name) / 2; i++) {
        uint32_t c = le16(sb->volume_name[i]);
        if (!c)
            break;
        if (c >= 0xD800 && c < 0xDC00 && i + 1 < sizeof(sb->volume_name) / 2) {
            uint32_t lo = le16(sb->volume_name[i + 1]);
            if (lo >= 0xDC00 && lo < 0xE000) {
                c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                i++;
            }
        }
        if (c >= 0xD800 && c < 0xE000)
            c = '?';
        uint8_t enc[4];
        size_t n;
        if (c < 0x80) {
            enc[0] = (uint8_t)c;
            n = 1;
        } else if (c < 0x800) {
            enc[0] = (uint8_t)(0xC0 | c >> 6);
            enc[1] = (uint8_t)(0x80 | (c & 0x3F));
            n = 2;
        } else if (c < 0x10000) {
            enc[0] = (uint8_t)(0xE0 | c >> 12);
            enc[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            enc[2] = (uint8_t)(0x80 | (c & 0x3F));
            n = 3;
        } else {
            enc[0] = (uint8_t)(0xF0 | c >> 18);
            enc[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
            enc[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            enc[3] = (uint8_t)(0x80 | (c & 0x3F));
            n = 4;
        }
        if (o + n >= size)
            break;
        memcpy(out + o, enc, n);
        o += n;
    }
    out[o] = '\0';
}

/* A fixed-size version field as a C string, printable characters only. */
static void version_string(const uint8_t *field, size_t len, char *out)
{
    size_t n = 0;
    for (; n < len && field[n]; n++)
        out[n] = field[n] >= 0x20 && field[n] < 0x7f ? (char)field[n] : '?';
    out[n] = '\0';
}

static void usage_fill(struct f2fuse_info *info, struct seg_manager *sm)
{
    struct seg_log_usage usage[LOG_COUNT];
    seg_usage(sm, usage, &info->empty_segments);
    for (int t = 0; t < LOG_COUNT; t++) {
        info->logs[t].segments = usage[t].segments;
        info->logs[t].valid_blocks = usage[t].valid_blocks;
        info->logs[t].cur_segno = usage[t].cur_segno;
        info->logs[t].cur_blkoff = usage[t].cur_blkoff;
    }
    info->usage_known = true;
}

int info_fill(struct f2fuse *fs, struct f2fuse_info *info)
{
    memset(info, 0, sizeof(*info));
    const struct f2fs_super_block *sb = &fs->sb;
    volume_name(sb, info->volume_name, sizeof(info->volume_name));
    memcpy(info->uuid, sb->uuid, sizeof(info->uuid));
    version_string(sb->version, sizeof(sb->version), info->version);
    version_string(sb->init_version, sizeof(sb->init_version), info->init_version);
    info->features = fs->features;
    bit_names(fs->features, feature_names, sizeof(feature_names) / sizeof(feature_names[0]),
              info->feature_names, sizeof(info->feature_names));
    info->device_bytes = blk_size(fs->dev);
    info->block_count = le64(sb->block_count);
    info->segment_count = le32(sb->segment_count);
    info->segs_per_sec = le32(sb->segs_per_sec);
    info->secs_per_zone = le32(sb->secs_per_zone);
    info->section_count = le32(sb->section_count);
    info->segments_cp = le32(sb->segment_count_ckpt);
    info->segments_sit = le32(sb->segment_count_sit);
    info->segments_nat = le32(sb->segment_count_nat);
    info->segments_ssa = le32(sb->segment_count_ssa);
    info->segments_main = le32(sb->segment_count_main);
    info->main_blkaddr = fs->main_blkaddr;
    info->max_nid = fs->max_nid;

    /* Checkpoint state: read under cp_lock, a read-write mount may be committing one. */
    pthread_rwlock_rdlock(&fs->cp_lock);
    const struct f2fs_checkpoint *cp = fs->cp;
    unsigned current = fs->cp_start == le32(sb->cp_blkaddr) ? 0 : 1;
    info->cp_pack = current + 1;
    info->cp_version = fs->cp_ver;
    info->cp_flags = le32(cp->ckpt_flags);
    info->elapsed_seconds = le64(cp->elapsed_time);
    info->user_blocks = le64(cp->user_block_count);
    info->valid_blocks = le64(cp->valid_block_count);
    info->valid_nodes = le32(cp->valid_node_count);
    info->valid_inodes = le32(cp->valid_inode_count);
    info->free_segments = le32(cp->free_segment_count);
    info->overprov_segments = le32(cp->overprov_segment_count);
    info->reserved_segments = le32(cp->rsvd_segment_count);
    pthread_rwlock_unlock(&fs->cp_lock);
    info->free_blocks = info->user_blocks - info->valid_blocks;
    bit_names(info->cp_flags, cp_flag_names, sizeof(cp_flag_names) / sizeof(cp_flag_names[0]),
              info->cp_flag_names, sizeof(info->cp_flag_names));
    info->clean_unmount = info->cp_flags & CP_UMOUNT_FLAG;
    info->in_use = fs->in_use_rw; /* imagelock.c */
    info->needs_fsck = info->cp_flags & (CP_ERROR_FLAG | CP_FSCK_FLAG | CP_QUOTA_NEED_FSCK_FLAG);
    info->other_pack_valid = checkpoint_pack_version(fs, !current, &info->other_pack_version) == 0;

    int err = 0;
    if (!fs->seg) {
        /* Read-only: the orphan list and the fsync chain are still on disk, as is the segment
         * table of the checkpoint. */
        uint32_t *orphans;
        err = checkpoint_read_orphans(fs, &orphans, &info->orphans);
        if (!err)
            free(orphans);
        if (!err)
            err = recovery_pending(fs, &info->fsync_nodes);
        /* The segment table of a checkpoint with a payload is not read by f2fuse (seg_load
         * would say so in terms of mounting): usage stays unknown. */
        bool sit_readable = le32(sb->cp_payload) == 0 &&
                            !(info->cp_flags & CP_LARGE_NAT_BITMAP_FLAG);
        struct seg_manager *sm;
        if (!err && sit_readable && seg_load(fs, &sm) == 0) {
            usage_fill(info, sm);
            seg_destroy(sm);
        }
    } else {
        usage_fill(info, fs->seg); /* a live mount: orphans were freed and recovery ran */
    }
    return err;
}
