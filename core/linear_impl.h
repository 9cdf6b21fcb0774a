/* cgrad core, INTERNAL: what core/linear.c (a linear layer's forward) and
 * core/linear_backward.c (its backward) share. */
#ifndef CG_LINEAR_IMPL_H
#define CG_LINEAR_IMPL_H

#include <stdbool.h>
#include <stdio.h>

#include "core/error.h"
#include "core/tensor.h"

/* Elements from which a linear layer's passes over its output split
 * among the threads */
#define LINEAR_PAR_THRESHOLD 32768

/* x [..., in], w [out, in] and b [out] (or NULL) fit; false + error naming
 * op, the three shapes, the rule and what breaks it ("x ends in 64, the
 * weight's in is 32") */
static inline bool linear_check(const char *op, const cg_tensor *x, const cg_tensor *w,
                                const cg_tensor *b)
{
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        char s1[96], s2[96], s3[96], why[96];
        if (w->ndim != 2)
            snprintf(why, sizeof why, "the weight has %d dims", w->ndim);
        else if (x->ndim < 1)
            snprintf(why, sizeof why, "x is a scalar");
        else if (x->shape[x->ndim - 1] != w->shape[1])
            snprintf(why, sizeof why, "x ends in %lld, the weight's in is %lld",
                     (long long)x->shape[x->ndim - 1], (long long)w->shape[1]);
        else
            snprintf(why, sizeof why, "the bias is not [%lld]", (long long)w->shape[0]);
        cg_set_error("%s: input %s, weight %s, bias %s: need x [..., in], weight [out, in], "
                     "bias [out] (%s)",
                     op, cg_shape_str(x, s1, sizeof s1), cg_shape_str(w, s2, sizeof s2),
                     b ? cg_shape_str(b, s3, sizeof s3) : "none", why);
        return false;
    }
    return true;
}

#endif
