/* cgrad core: the library-wide thread count (kernels and BLIS). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <omp.h>
#include <sched.h>
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
