/* What the PyTorch checkers (check_swiglu.c, check_rope.c) compare with:
 * max |a - b| / max(1, max |b|) over two tensors of one element count, any
 * float dtype and strides (INFINITY for a missing one or other counts). */
#ifndef CG_TESTS_INTEROP_REL_DIFF_H
#define CG_TESTS_INTEROP_REL_DIFF_H

#include <math.h>

#include "cgrad.h"

static inline double rel_diff(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || cg_numel(a) != cg_numel(b))
        return INFINITY;
    cg_tensor *ac = cg_k_to(a, CG_F32), *bc = cg_k_to(b, CG_F32);
    cg_tensor *ad = cg_k_contiguous(ac), *bd = cg_k_contiguous(bc);
    const float *x = cg_data(ad), *y = cg_data(bd);
    double d = 0, m = 1;
    for (int64_t i = 0; i < cg_numel(a); i++) {
        d = fmax(d, fabs((double)x[i] - y[i]));
        m = fmax(m, fabs((double)y[i]));
    }
    cg_release_all(4, ac, bc, ad, bd);
    return d / m;
}

#endif
