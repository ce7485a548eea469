/* Host and cgroup memory facts, and PSI triggers (hostmem.h). */
#include "util/hostmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* root + path into buf; false when it does not fit. */
static bool join(char *buf, size_t len, const char *root, const char *path)
{
    return (size_t)snprintf(buf, len, "%s%s", root, path) < len;
}

int hostmem_meminfo(const char *root, uint64_t *total, uint64_t *available)
{
    char path[PATH_MAX], line[256];
    if (!join(path, sizeof(path), root, "/proc/meminfo"))
        return -ENAMETOOLONG;
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    unsigned long long kb;
    int found = 0;
    *total = *available = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
            *total = kb * 1024;
            found |= 1;
        } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            *available = kb * 1024;
            found |= 2;
        }
    }
    fclose(f);
    return found == 3 ? 0 : -ENODATA;
}

/* One number from a cgroup file ("max" is no limit).  0 or -errno. */
static int read_number(const char *dir, const char *name, uint64_t *out)
{
    char path[PATH_MAX], text[64];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return -ENAMETOOLONG;
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    bool ok = fgets(text, sizeof(text), f) != NULL;
    fclose(f);
    if (!ok)
        return -ENODATA;
    if (strncmp(text, "max", 3) == 0) {
        *out = HOSTMEM_NO_LIMIT;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text)
        return -EINVAL;
    *out = v;
    return 0;
}

/* Sum of the values of the named keys of a flat-keyed file (memory.stat).  0 or -errno. */
static int read_keys(const char *dir, const char *name, const char *const *keys, uint64_t *sum)
{
    char path[PATH_MAX], line[256];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return -ENAMETOOLONG;
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    *sum = 0;
    while (fgets(line, sizeof(line), f)) {
        char key[64];
        unsigned long long v;
        if (sscanf(line, "%63s %llu", key, &v) != 2)
            continue;
        for (const char *const *k = keys; *k; k++)
            if (strcmp(key, *k) == 0)
                *sum += v;
    }
    fclose(f);
    return 0;
}

/* The mount point of the hierarchy (cgroup2, or the v1 one carrying the memory controller)
 * and the root it shows, from mountinfo. */
static bool find_mount(const char *root, int version, char *point, size_t plen, char *mroot,
                       size_t rlen)
{
    char path[PATH_MAX], line[PATH_MAX + 512];
    if (!join(path, sizeof(path), root, "/proc/self/mountinfo"))
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        /* "id parent dev root mountpoint options [optional...] - type source superoptions" */
        char r[PATH_MAX], mp[PATH_MAX];
        if (sscanf(line, "%*s %*s %*s %4095s %4095s", r, mp) != 2)
            continue;
        const char *dash = strstr(line, " - ");
        if (!dash)
            continue;
        char type[32], source[256], super[512];
        if (sscanf(dash + 3, "%31s %255s %511s", type, source, super) != 3)
            continue;
        if (version == 2)
            found = strcmp(type, "cgroup2") == 0;
        else if (strcmp(type, "cgroup") == 0) {
            /* "rw,memory" */
            for (char *tok = strtok(super, ","); tok && !found; tok = strtok(NULL, ","))
                found = strcmp(tok, "memory") == 0;
        }
        if (found) {
            snprintf(point, plen, "%s", mp);
            snprintf(mroot, rlen, "%s", r);
        }
    }
    fclose(f);
    return found;
}

/* The cgroup path of /proc/self/cgroup for the hierarchy: "0::/x" (v2), "N:memory:/x"
 * (v1, possibly among other controllers "N:cpu,memory:/x"). */
static bool own_cgroup(const char *root, int version, char *out, size_t len)
{
    char path[PATH_MAX], line[PATH_MAX + 64];
    if (!join(path, sizeof(path), root, "/proc/self/cgroup"))
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';
        const char *controllers = c1 + 1, *cgpath = c2 + 1;
        if (version == 2) {
            found = strcmp(line, "0") == 0 && controllers[0] == '\0';
        } else {
            char list[256];
            snprintf(list, sizeof(list), "%s", controllers);
            for (char *tok = strtok(list, ","); tok && !found; tok = strtok(NULL, ","))
                found = strcmp(tok, "memory") == 0;
        }
        if (found)
            snprintf(out, len, "%s", cgpath);
    }
    fclose(f);
    return found;
}

static int locate(const char *root, int version, struct cgroup_dir *out)
{
    char point[PATH_MAX], mroot[PATH_MAX], cgpath[PATH_MAX];
    if (!find_mount(root, version, point, sizeof(point), mroot, sizeof(mroot)) ||
        !own_cgroup(root, version, cgpath, sizeof(cgpath)))
        return -ENOENT;
    /* A mount of a subtree (a container's view) shows paths below its root. */
    const char *rel = cgpath;
    size_t rl = strlen(mroot);
    if (strcmp(mroot, "/") != 0 && strncmp(cgpath, mroot, rl) == 0)
        rel = cgpath + rl;
    if ((size_t)snprintf(out->path, sizeof(out->path), "%s%s%s", root, point,
                         strcmp(rel, "/") == 0 ? "" : rel) >= sizeof(out->path))
        return -ENAMETOOLONG;
    out->version = version;
    /* The controller governs it when its usage file is there. */
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof(probe), "%s/%s", out->path,
             version == 2 ? "memory.current" : "memory.usage_in_bytes");
    return access(probe, R_OK) == 0 ? 0 : -ENOENT;
}

int cgroup_memory_find(const char *root, struct cgroup_dir *out)
{
    if (locate(root, 2, out) == 0)
        return 0;
    return locate(root, 1, out);
}

/* The root cgroup of a hierarchy: its directory is the mount point, whose parent is not a
 * cgroup (it has no cgroup.procs). */
static bool is_cgroup(const char *dir)
{
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof(probe), "%s/cgroup.procs", dir);
    return access(probe, F_OK) == 0;
}

static void tighter(struct cgroup_memory *m, uint64_t v, const char *what)
{
    if (v < m->limit) {
        m->limit = v;
        m->limit_is = what;
    }
}

int cgroup_memory_read(const struct cgroup_dir *cg, struct cgroup_memory *out)
{
    *out = (struct cgroup_memory){.limit = HOSTMEM_NO_LIMIT, .limit_is = "none"};
    if (cg->version == 1) {
        /* v1: memory.stat's hierarchical_memory_limit is the tightest up the tree. */
        static const char *const limit_key[] = {"hierarchical_memory_limit", NULL};
        static const char *const file_keys[] = {"total_inactive_file", "total_active_file", NULL};
        uint64_t limit = HOSTMEM_NO_LIMIT;
        int err = read_number(cg->path, "memory.usage_in_bytes", &out->current);
        if (!err)
            err = read_keys(cg->path, "memory.stat", file_keys, &out->file);
        if (!err && read_keys(cg->path, "memory.stat", limit_key, &limit) == 0 && limit)
            tighter(out, limit, "memory.limit_in_bytes");
        /* "no limit" is PAGE_COUNTER_MAX pages: anything near 2^63 */
        if (out->limit >= (1ull << 62))
            *out = (struct cgroup_memory){.limit = HOSTMEM_NO_LIMIT,
                                          .limit_is = "none",
                                          .current = out->current,
                                          .file = out->file};
        return err;
    }
    static const char *const file_keys[] = {"file", NULL};
    int err = read_number(cg->path, "memory.current", &out->current);
    if (!err)
        err = read_keys(cg->path, "memory.stat", file_keys, &out->file);
    if (err)
        return err;
    /* v2: every ancestor's memory.max and memory.high bind as well. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", cg->path);
    while (is_cgroup(dir)) {
        uint64_t v;
        if (read_number(dir, "memory.max", &v) == 0)
            tighter(out, v, "memory.max");
        if (read_number(dir, "memory.high", &v) == 0)
            tighter(out, v, "memory.high");
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
    }
    return 0;
}

void cgroup_pressure_path(const struct cgroup_dir *cg, char *buf, size_t len)
{
    if (cg->version == 2)
        snprintf(buf, len, "%s/memory.pressure", cg->path);
    else
        buf[0] = '\0';
}

static int arm(const char *path, uint64_t stall_us, uint64_t window_us)
{
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char trigger[64];
    int n = snprintf(trigger, sizeof(trigger), "some %llu %llu", (unsigned long long)stall_us,
                     (unsigned long long)window_us);
    /* The trigger string goes with its terminating NUL (psi.rst's example). */
    if (write(fd, trigger, (size_t)n + 1) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

int psi_trigger_open(const char *path, uint64_t stall_us, uint64_t window_us)
{
    if (!path[0])
        return -ENOENT;
    int fd = arm(path, stall_us, window_us);
    if (fd == -EINVAL || fd == -EPERM || fd == -EACCES) {
        /* Unprivileged triggers need a window of a multiple of 2 s (Linux 6.5+). */
        uint64_t w = 2000000, s = stall_us * w / window_us;
        fd = arm(path, s, w);
    }
    return fd;
}
