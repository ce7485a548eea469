/* `f2fuse info [--json] IMAGE`: what an image is, without mounting it — geometry, features,
 * the current checkpoint pack, usage by segment type, free space, and whether the last
 * mount ended cleanly (and what a read-write mount would recover if not).  Opens the image
 * read-only: nothing is written, even to an uncleanly unmounted image. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blk/blk_partition.h"
#include "cli/cli.h"
#include "cli/progress.h"

static const char *const log_names[F2FUSE_INFO_LOGS] = {"hot_data", "warm_data", "cold_data",
                                                        "hot_node", "warm_node", "cold_node"};

static void uuid_string(const uint8_t *u, char *out)
{
    static const int dashes = (1 << 4) | (1 << 6) | (1 << 8) | (1 << 10);
    char *o = out;
    for (int i = 0; i < 16; i++) {
        if (dashes & (1 << i))
            *o++ = '-';
        o += sprintf(o, "%02x", u[i]);
    }
    *o = '\0';
}

static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* A comma-separated list as a JSON array of strings. */
static void json_list(FILE *out, const char *list)
{
    fputc('[', out);
    const char *p = list;
    bool first = true;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[64];
        snprintf(item, sizeof(item), "%.*s", (int)n, p);
        fputs(first ? "" : ", ", out);
        json_string(out, item);
        first = false;
        p += n + (comma ? 1 : 0);
    }
    fputc(']', out);
}

#define U(x) ((unsigned long long)(x))

/* The quota files' entries (f2fuse_quota_list), or why there are none. */
struct quotas {
    struct f2fuse_quota *list;
    size_t n, cap;
    int err; /* -ENODATA: the image keeps no quota files */
};

static int take_quota(void *arg, const struct f2fuse_quota *q)
{
    struct quotas *qs = arg;
    if (qs->n == qs->cap) {
        size_t cap = qs->cap ? 2 * qs->cap : 64;
        struct f2fuse_quota *grown = realloc(qs->list, cap * sizeof(*grown));
        if (!grown) {
            qs->err = -ENOMEM;
            return 1;
        }
        qs->list = grown;
        qs->cap = cap;
    }
    qs->list[qs->n++] = *q;
    return 0;
}

static const char *const quota_types[] = {"user", "group", "project"};

static void print_quota_json(FILE *out, const struct quotas *qs)
{
    if (qs->err) {
        fprintf(out, "  \"quota\": null,\n");
        return;
    }
    fputs("  \"quota\": [", out);
    for (size_t i = 0; i < qs->n; i++) {
        const struct f2fuse_quota *q = &qs->list[i];
        fprintf(out,
                "%s\n    {\"type\": \"%s\", \"id\": %u, \"space\": %llu, \"inodes\": %llu, "
                "\"block_soft\": %llu, \"block_hard\": %llu, \"inode_soft\": %llu, "
                "\"inode_hard\": %llu, \"block_grace_ends\": %llu, \"inode_grace_ends\": %llu}",
                i ? "," : "", quota_types[q->type], q->id, U(q->space), U(q->inodes), U(q->bsoft),
                U(q->bhard), U(q->isoft), U(q->ihard), U(q->btime), U(q->itime));
    }
    fputs(qs->n ? "\n  ],\n" : "],\n", out);
}

static void print_quota_text(FILE *out, const struct quotas *qs)
{
    if (qs->err == -ENODATA)
        return;
    if (qs->err) {
        fprintf(out, "quota          (the quota files cannot be read: %s)\n", strerror(-qs->err));
        return;
    }
    fprintf(out, "quota          type     id          space   inodes  block soft/hard (bytes)  "
                 "inode soft/hard\n");
    for (size_t i = 0; i < qs->n; i++) {
        const struct f2fuse_quota *q = &qs->list[i];
        fprintf(out, "               %-7s  %-10u %8llu %8llu  %llu/%llu  %llu/%llu\n",
                quota_types[q->type], q->id, U(q->space), U(q->inodes), U(q->bsoft), U(q->bhard),
                U(q->isoft), U(q->ihard));
    }
}

static void print_json(FILE *out, const char *image, const struct f2fuse_info *in,
                       const struct quotas *qs)
{
    char uuid[40];
    uuid_string(in->uuid, uuid);
    fputs("{\n  \"image\": ", out);
    json_string(out, image);
    fputs(",\n  \"volume_name\": ", out);
    json_string(out, in->volume_name);
    fprintf(out, ",\n  \"uuid\": \"%s\",\n  \"version\": ", uuid);
    json_string(out, in->version);
    fputs(",\n  \"init_version\": ", out);
    json_string(out, in->init_version);
    fprintf(out, ",\n  \"features\": ");
    json_list(out, in->feature_names);
    fprintf(out,
            ",\n  \"geometry\": {\"device_bytes\": %llu, \"block_size\": 4096, "
            "\"block_count\": %llu, \"segment_count\": %u, \"blocks_per_segment\": 512, "
            "\"segments_per_section\": %u, \"sections_per_zone\": %u, \"section_count\": %u, "
            "\"segments\": {\"checkpoint\": %u, \"sit\": %u, \"nat\": %u, \"ssa\": %u, "
            "\"main\": %u}, \"main_blkaddr\": %u, \"max_nid\": %u},\n",
            U(in->device_bytes), U(in->block_count), in->segment_count, in->segs_per_sec,
            in->secs_per_zone, in->section_count, in->segments_cp, in->segments_sit,
            in->segments_nat, in->segments_ssa, in->segments_main, in->main_blkaddr, in->max_nid);
    fprintf(out, "  \"checkpoint\": {\"current_pack\": %u, \"version\": %llu, ", in->cp_pack,
            U(in->cp_version));
    if (in->other_pack_valid)
        fprintf(out, "\"other_pack_version\": %llu, ", U(in->other_pack_version));
    else
        fputs("\"other_pack_version\": null, ", out);
    fprintf(out, "\"flags\": ");
    json_list(out, in->cp_flag_names);
    fprintf(out, ", \"elapsed_seconds\": %llu},\n", U(in->elapsed_seconds));
    fprintf(out,
            "  \"clean_unmount\": %s,\n  \"in_use\": %s,\n  \"needs_fsck\": %s,\n"
            "  \"orphans\": %u,\n  \"fsync_nodes_to_recover\": %u,\n",
            in->clean_unmount ? "true" : "false", in->in_use ? "true" : "false",
            in->needs_fsck ? "true" : "false", in->orphans, in->fsync_nodes);
    fprintf(out,
            "  \"space\": {\"user_blocks\": %llu, \"valid_blocks\": %llu, \"free_blocks\": %llu, "
            "\"free_bytes\": %llu, \"valid_nodes\": %u, \"valid_inodes\": %u, "
            "\"free_segments\": %u, \"overprovision_segments\": %u, \"reserved_segments\": %u},\n",
            U(in->user_blocks), U(in->valid_blocks), U(in->free_blocks), U(in->free_blocks * 4096),
            in->valid_nodes, in->valid_inodes, in->free_segments, in->overprov_segments,
            in->reserved_segments);
    print_quota_json(out, qs);
    if (!in->usage_known) {
        fputs("  \"usage\": null\n}\n", out);
        return;
    }
    fputs("  \"usage\": {", out);
    for (int t = 0; t < F2FUSE_INFO_LOGS; t++)
        fprintf(out,
                "%s\n    \"%s\": {\"segments\": %u, \"valid_blocks\": %llu, "
                "\"current_segment\": %u, \"next_block\": %u}",
                t ? "," : "", log_names[t], in->logs[t].segments, U(in->logs[t].valid_blocks),
                in->logs[t].cur_segno, in->logs[t].cur_blkoff);
    fprintf(out, ",\n    \"empty_segments\": %u\n  }\n}\n", in->empty_segments);
}

static void print_text(FILE *out, const char *image, const struct f2fuse_info *in,
                       const struct quotas *qs)
{
    char uuid[40], size[32], free_h[32], user_h[32], used_h[32];
    uuid_string(in->uuid, uuid);
    progress_human(in->device_bytes, size, sizeof(size));
    fprintf(out, "image          %s (%s)\n", image, size);
    fprintf(out, "volume         \"%s\", uuid %s\n", in->volume_name, uuid);
    fprintf(out, "made by        %s\n", in->init_version);
    fprintf(out, "last written   %s\n", in->version);
    fprintf(out, "features       %s\n", in->feature_names[0] ? in->feature_names : "(none)");
    fprintf(out,
            "geometry       %llu blocks of 4 KiB, %u segments of 2 MiB, %u segment(s) per "
            "section, %u section(s) per zone\n",
            U(in->block_count), in->segment_count, in->segs_per_sec, in->secs_per_zone);
    fprintf(out,
            "areas          checkpoint %u, SIT %u, NAT %u, SSA %u, main %u segments "
            "(main area from block %u); %u node ids\n",
            in->segments_cp, in->segments_sit, in->segments_nat, in->segments_ssa,
            in->segments_main, in->main_blkaddr, in->max_nid);
    fprintf(out, "checkpoint     pack %u is current, version %llu", in->cp_pack, U(in->cp_version));
    if (in->other_pack_valid)
        fprintf(out, " (pack %u: version %llu)\n", 3 - in->cp_pack, U(in->other_pack_version));
    else
        fprintf(out, " (pack %u: not valid)\n", 3 - in->cp_pack);
    fprintf(out, "flags          %s\n", in->cp_flag_names[0] ? in->cp_flag_names : "(none)");
    if (in->in_use)
        fprintf(out, "state          IN USE: open read-write by another program (a live f2fuse "
                     "mount?); what follows is its last checkpoint, which says:\n"
                     "               ");
    else
        fprintf(out, "state          ");
    if (in->clean_unmount)
        fprintf(out, "clean: the last mount ended with an unmount\n");
    else
        fprintf(out,
                "NOT cleanly unmounted: %u orphan inode(s) and %u node(s) "
                "written by fsync wait for a read-write mount to recover them\n",
                in->orphans, in->fsync_nodes);
    if (in->needs_fsck)
        fprintf(out, "               marked as needing fsck.f2fs (f2fuse mounts it read-only)\n");
    progress_human(in->free_blocks * 4096, free_h, sizeof(free_h));
    progress_human(in->user_blocks * 4096, user_h, sizeof(user_h));
    progress_human(in->valid_blocks * 4096, used_h, sizeof(used_h));
    fprintf(out, "space          %s used of %s (%.1f%%), %s free; %u inodes, %u nodes\n", used_h,
            user_h,
            in->user_blocks ? 100.0 * (double)in->valid_blocks / (double)in->user_blocks : 0,
            free_h, in->valid_inodes, in->valid_nodes);
    fprintf(out, "segments       %u free, %u overprovisioned, %u reserved\n", in->free_segments,
            in->overprov_segments, in->reserved_segments);
    print_quota_text(out, qs);
    if (!in->usage_known) {
        fprintf(out, "usage          (the segment table could not be read)\n");
        return;
    }
    fprintf(out, "usage          type        segments  valid blocks  writes at\n");
    for (int t = 0; t < F2FUSE_INFO_LOGS; t++)
        fprintf(out, "               %-10s  %8u  %12llu  segment %u block %u\n", log_names[t],
                in->logs[t].segments, U(in->logs[t].valid_blocks), in->logs[t].cur_segno,
                in->logs[t].cur_blkoff);
    fprintf(out, "               empty       %8u\n", in->empty_segments);
}

/* A whole-disk image: its partitions, which hold f2fs, and how to mount one. */
static void print_partitions(FILE *out, bool json, const char *image, const char *kind,
                             const struct f2fuse_partition *parts, unsigned count)
{
    if (json) {
        fputs("{\n  \"image\": ", out);
        json_string(out, image);
        fprintf(out, ",\n  \"partition_table\": \"%s\",\n  \"partitions\": [", kind);
        for (unsigned i = 0; i < count; i++) {
            const struct f2fuse_partition *p = &parts[i];
            fprintf(out, "%s\n    {\"number\": %u, \"name\": ", i ? "," : "", p->number);
            json_string(out, p->name);
            fprintf(out, ", \"start\": %llu, \"size\": %llu, \"type\": ", U(p->start), U(p->size));
            json_string(out, p->type);
            fputs(", \"type_name\": ", out);
            if (p->type_name)
                json_string(out, p->type_name);
            else
                fputs("null", out);
            fprintf(out, ", \"f2fs\": %s}", p->f2fs ? "true" : "false");
        }
        fputs("\n  ]\n}\n", out);
        return;
    }
    fprintf(out, "image          %s: a whole disk with a %s partition table, %u partition(s)\n",
            image, kind, count);
    fprintf(out, "partitions     %-3s %-16s %14s %10s  %-5s %s\n", "#", "name", "start (bytes)",
            "size", "f2fs", "type");
    const struct f2fuse_partition *first_f2fs = NULL;
    for (unsigned i = 0; i < count; i++) {
        const struct f2fuse_partition *p = &parts[i];
        char size[32];
        progress_human(p->size, size, sizeof(size));
        fprintf(out, "               %-3u %-16s %14llu %10s  %-5s %s%s%s%s\n", p->number,
                p->name[0] ? p->name : "-", U(p->start), size, p->f2fs ? "yes" : "no", p->type,
                p->type_name ? " (" : "", p->type_name ? p->type_name : "",
                p->type_name ? ")" : "");
        if (p->f2fs && !first_f2fs)
            first_f2fs = p;
    }
    if (!first_f2fs) {
        fprintf(out, "mount          no partition holds f2fs\n");
        return;
    }
    fprintf(out, "mount          f2fuse -o partition=%u %s MOUNTPOINT", first_f2fs->number, image);
    if (first_f2fs->name[0])
        fprintf(out, " (or -o partition=%s)", first_f2fs->name);
    fprintf(out, "\n               f2fuse info -o partition=%u %s  describes its file system\n",
            first_f2fs->number, image);
}

/* Lists the partitions when image is a partitioned disk rather than f2fs itself; true when
 * it did. */
static bool list_partitions(bool json, const char *image)
{
    char kind[16];
    struct f2fuse_partition *parts = NULL;
    unsigned count = 0;
    if (f2fuse_partitions(image, kind, sizeof(kind), &parts, &count) != 0 || !kind[0]) {
        free(parts);
        return false;
    }
    int fd = open(image, O_RDONLY | O_CLOEXEC);
    bool whole_is_f2fs = fd >= 0 && blk_has_f2fs_magic(fd, 0);
    if (fd >= 0)
        close(fd);
    if (!whole_is_f2fs)
        print_partitions(stdout, json, image, kind, parts, count);
    free(parts);
    return !whole_is_f2fs;
}

int info_main(int argc, char **argv)
{
    static const char usage_line[] =
        "usage: f2fuse info [--json] [-o offset=BYTES|partition=N|NAME] IMAGE\n";
    bool json = false;
    const char *image = NULL;
    struct f2fuse_options opts;
    f2fuse_options_init(&opts); /* read-only */
    struct f2fuse_test_options test = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            if (cli_apply_options(&opts, &test, argv[++i]))
                return 2;
        } else if (argv[i][0] == '-' || image) {
            fputs(usage_line, stderr);
            return 2;
        } else {
            image = argv[i];
        }
    }
    if (!image) {
        fputs(usage_line, stderr);
        return 2;
    }
    if (!opts.offset && !opts.partition[0] && list_partitions(json, image))
        return 0;
    opts.read_only = true;  /* whatever -o said: info writes nothing */
    opts.backend = "psync"; /* a few reads: no io_uring set-up, no O_DIRECT needed */
    struct f2fuse *fs;
    int err = f2fuse_open_test(image, &opts, &test, &fs);
    if (err) {
        fprintf(stderr, "f2fuse: error: cannot read %s: %s\n", image, strerror(-err));
        return 1;
    }
    struct f2fuse_info in;
    err = f2fuse_info(fs, &in);
    struct quotas qs = {0};
    if (!err) {
        int qerr = f2fuse_quota_list(fs, take_quota, &qs);
        if (!qs.err)
            qs.err = qerr;
    }
    f2fuse_close(fs);
    if (err) {
        fprintf(stderr, "f2fuse: error: %s: %s\n", image, strerror(-err));
        return 1;
    }
    if (json)
        print_json(stdout, image, &in, &qs);
    else
        print_text(stdout, image, &in, &qs);
    free(qs.list);
    return 0;
}
