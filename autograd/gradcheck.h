/* cgrad autograd: numerical gradient checking.
 *
 * cg_gradcheck compares the analytic gradient (cg_backward) of a function
 * of tensors with central finite differences. The function's output may
 * have any shape: it is reduced to a scalar as sum(out * R) with fixed
 * random weights R, so every output element's gradient is exercised.
 * Differences are formed and accumulated in double precision (the
 * function itself computes in float32, so choose eps ~1e-3 and tolerances
 * to match). Inputs may be any views: transposed, sliced, or broadcast
 * with stride 0 (elements that share storage are perturbed together and
 * their analytic gradients summed). Only inputs with requires_grad are
 * checked. */
#ifndef CG_GRADCHECK_H
#define CG_GRADCHECK_H

#include "../autograd/autograd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the output from the inputs; returns a new reference or NULL. */
typedef cg_tensor *(*cg_gradcheck_fn)(void *ctx, cg_tensor *const *inputs);

typedef struct {
    double eps;    /* finite-difference step (default 1e-3) */
    double atol;   /* pass if |analytic - numeric| <= atol' + rtol * |numeric| */
    double rtol;   /* defaults 1e-3 and 1e-2 */
    uint64_t seed; /* for the output weights R and the directions v */
    /* Projections (PyTorch's fast mode, made strict): per input, the
     * analytic u^T J v against central differences along random +-1
     * directions v, Richardson-extrapolated over the steps (h/2, h) and
     * (h, 2h) (h = proj_eps * the input's RMS, at least proj_eps * 1e-2);
     * a direction whose two estimates disagree crosses a kink and is
     * replaced (at most 3 * proj_count tries). The error along v is the
     * smallest of the difference at h/2, the two Richardson values and
     * the parabola's value at 0: kinks crossed within the steps (relus)
     * spoil some, a wrong gradient all four. Passes if |error| <=
     * proj_rtol * (|analytic| + |gradient|_2) + the noise term below.
     * Catches small systematic errors (1% in the backward of any op of a
     * transformer layer: tests/test_gradcheck.c) that the element-wise
     * check's absolute tolerance lets through. A kink nearer than h/2
     * gives the same error at every step, as a wrong gradient does: with
     * relu, a projections-only failure wants a second look at proj_eps
     * 1e-3 (less sensitive). proj_count 0 turns it off. */
    int proj_count;   /* default 4 */
    double proj_eps;  /* default 1e-2 */
    double proj_rtol; /* default 5e-4 */
    /* noise * 2^-24 * sum|out * R| / step: the float32 rounding of the
     * loss over the step, so that large outputs do not fail correct
     * gradients (default 4). The element-wise check's absolute tolerance
     * is at least this (the larger of it and atol, step eps); the
     * projections add it to theirs (step h). */
    double noise;
} cg_gradcheck_opts;

typedef struct {
    bool ok;
    int64_t checked;          /* elements compared */
    int worst_input;          /* input index of the worst element (-1: none) */
    int64_t worst_index;      /* storage offset of the worst element in its view */
    double analytic, numeric; /* values at the worst element */
    double abs_err, rel_err;  /* there */
    double worst_ratio;       /* abs_err / (atol + rtol*|numeric|): > 1 fails */
    double worst_proj_ratio;  /* projections: |error| / tolerance, > 1 fails */
    int worst_proj_input;     /* where (-1: none checked) */
    char message[512];        /* human-readable summary */
} cg_gradcheck_report;

cg_gradcheck_opts cg_gradcheck_defaults(void);
/* Returns report->ok (false also on errors, with the reason in message;
 * a failure also records message as cg_last_error()). The inputs checked
 * are those that require grad, float32 only (another dtype is refused:
 * the steps are float32 values); inputs that need no gradient (ids, masks)
 * may have any dtype. Refused too: no input that requires grad, an output
 * none of them reaches, a tolerance below 0 or not finite.
 * opts may be NULL (defaults); report may be NULL. Leaves each input's
 * .grad as it was before the call. */
bool cg_gradcheck(cg_gradcheck_fn f, void *ctx, int n_inputs, cg_tensor *const *inputs,
                  const cg_gradcheck_opts *opts, cg_gradcheck_report *report);

#ifdef __cplusplus
}
#endif
#endif
