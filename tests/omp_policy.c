/* For tests/test_omp_policy.sh: calls cg_omp_short_spin (core/tensor.h)
 * first, as the programs do, then prints its arguments (one a line, in
 * brackets, so that a re-executed program shows it kept them), the
 * GOMP_SPINCOUNT its environment holds, and
 * libgomp's settings in effect (omp_display_env on stderr: GOMP_SPINCOUNT
 * is '1000' for cgrad's, '300000' for libgomp's default), then the thread
 * count as the programs see it after cg_cap_default_threads (cgrad's
 * count, the team a parallel region of that count gets, the CPUs, and the
 * count the cap lowered, 0 if none), then the count cg_set_num_threads(3)
 * gives and OpenMP's and cgrad's counts after cg_set_num_threads(4) and
 * (0). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "cgrad.h"

int main(int argc, char **argv)
{
    cg_omp_short_spin();
    for (int i = 1; i < argc; i++)
        printf("[%s]\n", argv[i]);
    const char *spin = getenv("GOMP_SPINCOUNT"); /* set by the re-exec, or the user's */
    printf("env GOMP_SPINCOUNT %s\n", spin ? spin : "unset");
    fflush(stdout);
    omp_display_env(1);
    int capped = cg_cap_default_threads(), n = cg_get_num_threads(), team = 0;
#pragma omp parallel num_threads(n)
#pragma omp single
    team = omp_get_num_threads();
    printf("threads %d team %d cpus %d capped %d\n", n, team, cg_num_cpus(), capped);
    /* a count set (at most OMP_THREAD_LIMIT), then 0: OpenMP's team size
     * before the first set comes back, not the last set's */
    cg_set_num_threads(3);
    int three = cg_get_num_threads();
    cg_set_num_threads(4);
    cg_set_num_threads(0);
    printf("set 3: threads %d; set 4, then 0: max %d threads %d\n", three, omp_get_max_threads(),
           cg_get_num_threads());
    return 0;
}
