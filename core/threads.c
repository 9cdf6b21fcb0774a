/* cgrad core: the library-wide thread count (kernels and BLIS). */
#include <omp.h>

#include "core/tensor.h"

/* 0 = not set: use OpenMP's default (omp_get_max_threads()). */
static _Atomic int g_num_threads = 0;

void cg_set_num_threads(int n) {
    if (n <= 0) {
        g_num_threads = 0; /* back to the default */
        return;
    }
    g_num_threads = n;
    omp_set_num_threads(n);
}

int cg_get_num_threads(void) {
    int n = g_num_threads;
    if (n > 0) return n;
    n = omp_get_max_threads();
    return n > 0 ? n : 1;
}
