/* cache_size=auto: the target's rules (cachesize_target) and what it reads (hostmem.c:
 * /proc/meminfo, /proc/self/cgroup, mountinfo and the cgroup files of v2 and v1), the latter
 * from fake trees under a temporary root. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/pcache.h"
#include "check.h"
#include "core/cachesize.h"
#include "util/hostmem.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

static struct cache_inputs host(uint64_t available)
{
    return (struct cache_inputs){.host_available = available,
                                 .cg_limit = HOSTMEM_NO_LIMIT,
                                 .pressure_cap = UINT64_MAX,
                                 .min = 32 * MIB};
}

/* Half of what the host could give, its own use included so that growing does not move it. */
static void host_half(void)
{
    enum cache_bound why;
    struct cache_inputs in = host(22 * GIB);
    CHECK_EQ(cachesize_target(&in, &why), 11 * GIB);
    CHECK_EQ(why, CACHE_BOUND_HOST);
    in.host_available = 20 * GIB; /* the cache took 4 GiB of it */
    in.own = 4 * GIB;
    CHECK_EQ(cachesize_target(&in, &why), 12 * GIB);
    in = host(0); /* nothing known */
    CHECK_EQ(cachesize_target(&in, &why), 64 * MIB);
    in = host(1 * GIB + 12345); /* whole MiB */
    CHECK_EQ(cachesize_target(&in, &why) % MIB, 0);
}

static void floor_and_ceiling(void)
{
    enum cache_bound why;
    struct cache_inputs in = host(40 * MIB);
    CHECK_EQ(cachesize_target(&in, &why), 32 * MIB);
    CHECK_EQ(why, CACHE_BOUND_MIN);
    in = host(22 * GIB);
    in.max = 1 * GIB;
    CHECK_EQ(cachesize_target(&in, &why), 1 * GIB);
    CHECK_EQ(why, CACHE_BOUND_MAX);
    in.pressure_cap = 300 * MIB;
    CHECK_EQ(cachesize_target(&in, &why), 300 * MIB);
    CHECK_EQ(why, CACHE_BOUND_PRESSURE);
    in.pressure_cap = 10 * MIB; /* pressure never goes below the floor */
    CHECK_EQ(cachesize_target(&in, &why), 32 * MIB);
    CHECK_EQ(why, CACHE_BOUND_MIN);
}

/* Under memory.max=512M: the limit less others' anonymous memory and a quarter. */
static void cgroup_room(void)
{
    enum cache_bound why;
    struct cache_inputs in = host(22 * GIB);
    in.cg_limit = 512 * MIB;
    in.cg_current = 300 * MIB; /* 200 of it the cache's, 60 file pages, 40 others' */
    in.cg_file = 60 * MIB;
    in.own = 200 * MIB;
    CHECK_EQ(cachesize_target(&in, &why), 512 * MIB - 40 * MIB - 128 * MIB);
    CHECK_EQ(why, CACHE_BOUND_CGROUP);
    /* A small limit: headroom of at least 32 MiB, and below cache_min the cgroup wins. */
    in.cg_limit = 48 * MIB;
    in.cg_current = 10 * MIB;
    in.cg_file = 0;
    in.own = 0;
    CHECK_EQ(cachesize_target(&in, &why), 6 * MIB);
    CHECK_EQ(why, CACHE_BOUND_CGROUP_FLOOR);
    /* Nothing left at all: the smallest cache there is. */
    in.cg_current = 40 * MIB;
    CHECK_EQ(cachesize_target(&in, &why), PCACHE_MIN_BYTES);
    /* A fixed size is kept, but not past the cgroup. */
    in = host(22 * GIB);
    in.fixed = 2 * GIB;
    CHECK_EQ(cachesize_target(&in, &why), 2 * GIB);
    CHECK_EQ(why, CACHE_BOUND_FIXED);
    in.pressure_cap = 100 * MIB; /* a fixed size does not follow pressure */
    CHECK_EQ(cachesize_target(&in, &why), 2 * GIB);
    in.cg_limit = 512 * MIB;
    in.cg_current = in.cg_file = in.own = 0;
    CHECK_EQ(cachesize_target(&in, &why), 384 * MIB);
    CHECK_EQ(why, CACHE_BOUND_CGROUP_FLOOR);
}

/* Without PSI, the periodic check: MemAvailable under 5 %, or the cgroup's anonymous memory
 * within 1/8 of its limit (its file pages are the kernel's to reclaim). */
static void polled_low_memory(void)
{
    struct cache_inputs in = host(0);
    CHECK(!cachesize_memory_low(24 * GIB, 2 * GIB, &in));
    CHECK(cachesize_memory_low(24 * GIB, 1 * GIB, &in)); /* 4.2 % left */
    CHECK(!cachesize_memory_low(0, 0, &in));             /* meminfo unreadable */
    in.cg_limit = 512 * MIB;
    in.cg_current = 460 * MIB;
    in.cg_file = 20 * MIB; /* 440 MiB anonymous: under 448 */
    CHECK(!cachesize_memory_low(24 * GIB, 20 * GIB, &in));
    in.cg_file = 0; /* 460 MiB anonymous: within 1/8 */
    CHECK(cachesize_memory_low(24 * GIB, 20 * GIB, &in));
    in.cg_file = 500 * MIB; /* more file pages than charged (counters read apart): none */
    CHECK(!cachesize_memory_low(24 * GIB, 20 * GIB, &in));
}

/* ---- hostmem.c on fake trees ----------------------------------------------------- */

static char root[] = "/tmp/f2fuse-hostmem-XXXXXX";

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    /* mkdir -p of the directories on the way */
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        mkdir(path, 0755);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void meminfo(void)
{
    put("/proc/meminfo", "MemTotal:       24683664 kB\nMemFree:        21000000 kB\n"
                         "MemAvailable:   23162040 kB\nBuffers:            1024 kB\n");
    uint64_t total, avail;
    CHECK_EQ(hostmem_meminfo(root, &total, &avail), 0);
    CHECK_EQ(total, 24683664ull * 1024);
    CHECK_EQ(avail, 23162040ull * 1024);
    put("/proc/meminfo", "MemTotal: 1000 kB\n"); /* an old kernel: no MemAvailable */
    CHECK_EQ(hostmem_meminfo(root, &total, &avail), -ENODATA);
}

/* cgroup v2: the tightest of memory.max and memory.high up the tree. */
static void cgroup_v2(void)
{
    put("/proc/self/mountinfo",
        "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n");
    put("/proc/self/cgroup", "0::/system.slice/f2fuse.service\n");
    put("/sys/fs/cgroup/cgroup.procs", "");
    put("/sys/fs/cgroup/system.slice/cgroup.procs", "");
    put("/sys/fs/cgroup/system.slice/memory.max", "1073741824\n");
    put("/sys/fs/cgroup/system.slice/memory.high", "max\n");
    const char *svc = "/sys/fs/cgroup/system.slice/f2fuse.service/";
    char rel[256];
#define SVC(name) (snprintf(rel, sizeof(rel), "%s%s", svc, name), rel)
    put(SVC("cgroup.procs"), "1234\n");
    put(SVC("memory.max"), "max\n");
    put(SVC("memory.high"), "805306368\n");
    put(SVC("memory.current"), "104857600\n");
    put(SVC("memory.stat"), "anon 50000000\nfile 41943040\nkernel 1000\n");
    put(SVC("memory.pressure"), "some avg10=0.00\n");
    struct cgroup_dir cg;
    CHECK_EQ(cgroup_memory_find(root, &cg), 0);
    CHECK_EQ(cg.version, 2);
    CHECK(strstr(cg.path, "/sys/fs/cgroup/system.slice/f2fuse.service") != NULL);
    struct cgroup_memory m;
    CHECK_EQ(cgroup_memory_read(&cg, &m), 0);
    CHECK_EQ(m.limit, 805306368);
    CHECK(strcmp(m.limit_is, "memory.high") == 0);
    CHECK_EQ(m.current, 104857600);
    CHECK_EQ(m.file, 41943040);
    put(SVC("memory.high"), "max\n"); /* the parent's max binds then */
    CHECK_EQ(cgroup_memory_read(&cg, &m), 0);
    CHECK_EQ(m.limit, 1073741824);
    CHECK(strcmp(m.limit_is, "memory.max") == 0);
    put("/sys/fs/cgroup/system.slice/memory.max", "max\n");
    CHECK_EQ(cgroup_memory_read(&cg, &m), 0);
    CHECK_EQ(m.limit, HOSTMEM_NO_LIMIT);
    char pressure[PATH_MAX + 32];
    cgroup_pressure_path(&cg, pressure, sizeof(pressure));
    CHECK(strstr(pressure, "f2fuse.service/memory.pressure") != NULL);
#undef SVC
}

/* cgroup v1 (a hybrid host: this machine's kind): the memory hierarchy's own mount. */
static void cgroup_v1(void)
{
    put("/proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n");
    put("/proc/self/cgroup", "9:name=systemd:/\n4:memory:/jobs/42\n0::/\n");
    put("/sys/fs/cgroup/unified/cgroup.procs", ""); /* v2 without the memory controller */
    put("/sys/fs/cgroup/memory/jobs/42/cgroup.procs", "");
    put("/sys/fs/cgroup/memory/jobs/42/memory.usage_in_bytes", "209715200\n");
    put("/sys/fs/cgroup/memory/jobs/42/memory.stat",
        "cache 100\nhierarchical_memory_limit 536870912\ntotal_inactive_file 10485760\n"
        "total_active_file 20971520\n");
    struct cgroup_dir cg;
    CHECK_EQ(cgroup_memory_find(root, &cg), 0);
    CHECK_EQ(cg.version, 1);
    CHECK(strstr(cg.path, "/sys/fs/cgroup/memory/jobs/42") != NULL);
    struct cgroup_memory m;
    CHECK_EQ(cgroup_memory_read(&cg, &m), 0);
    CHECK_EQ(m.limit, 536870912);
    CHECK_EQ(m.current, 209715200);
    CHECK_EQ(m.file, 31457280);
    put("/sys/fs/cgroup/memory/jobs/42/memory.stat",
        "hierarchical_memory_limit 9223372036854771712\n");
    CHECK_EQ(cgroup_memory_read(&cg, &m), 0);
    CHECK_EQ(m.limit, HOSTMEM_NO_LIMIT);
    char pressure[PATH_MAX + 32];
    cgroup_pressure_path(&cg, pressure, sizeof(pressure));
    CHECK_EQ(pressure[0], '\0'); /* v1 has no memory.pressure: host-wide PSI only */
}

static void no_cgroup(void)
{
    put("/proc/self/mountinfo", "22 1 0:21 / /proc rw - proc proc rw\n");
    put("/proc/self/cgroup", "0::/\n");
    struct cgroup_dir cg;
    CHECK_EQ(cgroup_memory_find(root, &cg), -ENOENT);
    CHECK_EQ(psi_trigger_open("", 150000, 1000000), -ENOENT);
    char path[600];
    snprintf(path, sizeof(path), "%s/nonexistent/memory.pressure", root);
    CHECK(psi_trigger_open(path, 150000, 1000000) < 0);
}

int main(void)
{
    RUN(host_half);
    RUN(floor_and_ceiling);
    RUN(cgroup_room);
    RUN(polled_low_memory);
    if (!mkdtemp(root))
        return 1;
    RUN(meminfo);
    RUN(cgroup_v2);
    RUN(cgroup_v1);
    RUN(no_cgroup);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
    if (system(cmd) != 0)
        return 1;
    return CHECK_DONE();
}
