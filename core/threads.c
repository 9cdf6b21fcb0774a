/* cgrad core: the library-wide thread count (kernels and BLIS). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor.h"

/* 0 = not set: use OpenMP's default (omp_get_max_threads()), at most
 * cg_num_cpus(). */
static _Atomic int g_num_threads = 0;

int cg_num_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    if (n < 1) {
        long k = sysconf(_SC_NPROCESSORS_ONLN);
        n = k > 0 && k < 1 << 20 ? (int)k : 1;
    }
    return n;
}

void cg_set_num_threads(int n)
{
    if (n <= 0) {
        g_num_threads = 0; /* back to the default */
        return;
    }
    g_num_threads = n;
    omp_set_num_threads(n);
}

/* The CPU count of cg_get_num_threads, asked once: every product asks for
 * the thread count, and sched_getaffinity per call took 3.4% of the
 * translator's step (issue 37). 0 = not asked yet. */
static _Atomic int g_cpus_cached = 0;

int cg_get_num_threads(void)
{
    int n = g_num_threads;
    if (n > 0)
        return n;
    n = omp_get_max_threads();
    int cpus = g_cpus_cached;
    if (cpus < 1)
        g_cpus_cached = cpus = cg_num_cpus();
    return n < 1 ? 1 : n > cpus ? cpus : n;
}

int cg_cap_default_threads(void)
{
    if (g_num_threads > 0)
        return 0;
    int asked = omp_get_max_threads(), cpus = cg_num_cpus();
    if (asked <= cpus)
        return 0;
    omp_set_num_threads(cpus); /* before any parallel region runs that many */
    return asked;
}

/* Whether this process would start OpenMP with libgomp's spinning default
 * and more than one thread: neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT set
 * (either is the user's choice, kept), not one thread (OMP_NUM_THREADS=1
 * or one CPU), and not under valgrind (an exec would leave its tool). */
static bool spins_by_default(void)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return false;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload"))
        return false;
    const char *n = getenv("OMP_NUM_THREADS");
    if (n && strtol(n, NULL, 10) == 1)
        return false;
    return cg_num_cpus() > 1;
}

/* This process's arguments, from /proc/self/cmdline (NUL-separated), as a
 * NULL-terminated array in one allocation; NULL if unreadable. */
static char **own_argv(void)
{
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    size_t len = 0, cap = 4096;
    char *buf = fd >= 0 ? malloc(cap) : NULL;
    for (ssize_t k = 1; buf && k > 0; len += (size_t)k) {
        if (len == cap) {
            char *p = realloc(buf, cap *= 2);
            if (!p) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = p;
        }
        k = read(fd, buf + len, cap - len);
        if (k < 0) {
            free(buf);
            buf = NULL;
        }
    }
    if (fd >= 0)
        close(fd);
    if (!buf || !len) {
        free(buf);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += buf[i] == 0;
    char **argv = malloc((n + 1) * sizeof *argv + len);
    if (argv) {
        char *text = memcpy((char *)(argv + n + 1), buf, len);
        for (size_t i = 0, a = 0; a < n; i += strlen(text + i) + 1)
            argv[a++] = text + i;
        argv[n] = NULL;
    }
    free(buf);
    return argv;
}

void cg_omp_short_spin(void)
{
    if (!spins_by_default())
        return;
    char **argv = own_argv();
    if (argv && setenv("GOMP_SPINCOUNT", CG_OMP_SPINCOUNT, 1) == 0) {
        execv("/proc/self/exe", argv);
        unsetenv("GOMP_SPINCOUNT"); /* no exec: carry on as started */
    }
    free(argv);
}
