/* cgrad core: the library-wide thread count (kernels and BLIS). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <omp.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/tensor.h"

/* 0 = not set: use OpenMP's default (omp_get_max_threads()), at most
 * cg_num_cpus(). */
static _Atomic int g_num_threads = 0;

/* The CPUs this process may run on, into *set; their count (0: unknown).
 * Under OMP_PROC_BIND / OMP_PLACES libgomp binds the initial thread to its
 * place before main, so that thread's mask is one place's (1 CPU of 2):
 * every place's CPUs are the process's. */
static int process_cpus(cpu_set_t *set)
{
    CPU_ZERO(set);
    if (sched_getaffinity(0, sizeof *set, set) != 0)
        return 0;
    if (omp_get_proc_bind() != omp_proc_bind_false) {
        for (int p = 0, places = omp_get_num_places(); p < places; p++) {
            int k = omp_get_place_num_procs(p);
            int *ids = k > 0 ? malloc((size_t)k * sizeof *ids) : NULL;
            if (ids)
                omp_get_place_proc_ids(p, ids);
            for (int i = 0; ids && i < k; i++)
                if (ids[i] >= 0 && ids[i] < CPU_SETSIZE)
                    CPU_SET(ids[i], set);
            free(ids);
        }
    }
    return CPU_COUNT(set);
}

int cg_num_cpus(void)
{
    cpu_set_t set;
    int n = process_cpus(&set);
    if (n < 1) {
        long k = sysconf(_SC_NPROCESSORS_ONLN);
        n = k > 0 && k < 1 << 20 ? (int)k : 1;
    }
    return n;
}

/* OpenMP's default team size before the first cg_set_num_threads(n > 0)
 * changed it (0 = not changed yet): what n <= 0 gives back to OpenMP, whose
 * default team the random fills use (core/tensor_create.c's RNG_FILL; the
 * other kernels take cg_get_num_threads(), core/shares.h). */
static _Atomic int g_omp_default = 0;

void cg_set_num_threads(int n)
{
    if (n <= 0) {
        g_num_threads = 0; /* back to the default */
        int d = g_omp_default;
        if (d > 0)
            omp_set_num_threads(d);
        return;
    }
    int unset = 0;
    atomic_compare_exchange_strong(&g_omp_default, &unset, omp_get_max_threads());
    g_num_threads = n;
    omp_set_num_threads(n);
}

/* The CPU count of cg_get_num_threads, asked once: every product asks for
 * the thread count, and sched_getaffinity per call took 3.4% of the
 * translator's step (issue 37). 0 = not asked yet. */
static _Atomic int g_cpus_cached = 0;

int cg_get_num_threads(void)
{
    int n = g_num_threads, limit = omp_get_thread_limit(); /* OMP_THREAD_LIMIT: a team's most */
    if (n > 0)
        return n > limit ? limit : n;
    n = omp_get_max_threads();
    int cpus = g_cpus_cached;
    if (cpus < 1)
        g_cpus_cached = cpus = cg_num_cpus();
    if (cpus > limit)
        cpus = limit;
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
    /* LLVM's libomp (clang's -fopenmp) or Intel's: GOMP_SPINCOUNT means
     * nothing to them (they read KMP_BLOCKTIME), so an exec only starts
     * the program twice */
    if (dlsym(RTLD_DEFAULT, "kmp_set_blocktime"))
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

/* One round of libgomp's spin loop (its cpu_relax: `pause` on x86). */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* Nanoseconds one `pause` takes: the fastest of a few timed runs (a run
 * the scheduler interrupted only takes longer). */
static double pause_ns(void)
{
    enum { ROUNDS = 4096, RUNS = 5 };
    double best = 0.0;
    for (int r = 0; r < RUNS; r++) {
        const double t0 = cg_now();
        for (int i = 0; i < ROUNDS; i++)
            cpu_relax();
        double ns = (cg_now() - t0) * 1e9 / ROUNDS;
        if (r == 0 || ns < best)
            best = ns;
    }
    return best;
}

long cg_omp_spin_count(void)
{
    double ns = pause_ns(), want = CG_OMP_SPIN_US * 1000.0;
    if (!(ns > 0.0) || want / ns > CG_OMP_SPIN_MAX)
        return CG_OMP_SPIN_MAX;
    return want / ns < CG_OMP_SPIN_MIN ? CG_OMP_SPIN_MIN : (long)(want / ns);
}

void cg_omp_short_spin(void)
{
    if (!spins_by_default())
        return;
    char **argv = own_argv();
    char count[24];
    snprintf(count, sizeof count, "%ld", cg_omp_spin_count());
    cpu_set_t set, bound;
    if (argv && setenv("GOMP_SPINCOUNT", count, 1) == 0) {
        /* the program starts again on all its CPUs, not on the one place
         * libgomp bound this thread to (OMP_PROC_BIND), which the new
         * libgomp would take for the whole machine */
        bool widened = sched_getaffinity(0, sizeof bound, &bound) == 0 && process_cpus(&set) > 0 &&
                       sched_setaffinity(0, sizeof set, &set) == 0;
        execv("/proc/self/exe", argv);
        if (widened) /* no exec: bound as before */
            (void)sched_setaffinity(0, sizeof bound, &bound);
        unsetenv("GOMP_SPINCOUNT"); /* no exec: carry on as started */
    }
    free(argv);
}
