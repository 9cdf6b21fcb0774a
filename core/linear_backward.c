/* A linear layer's backward (core/ops.h cg_k_linear_backward and its
 * activation's and dropout's forms): two GEMMs and a column sum for the
 * bias, each column summed in row order (in double), so results do not
 * depend on the thread count; in bf16 one pass over g takes it through the
 * activation or the dropout, rounds it for both products and sums the
 * bias's gradient. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/linear_impl.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"
#include "core/vmath.h"

/* Bias gradient: b[j] = sum over rows of g[r, j] for j in [j0, j1), rows in
 * order, in double. Rows are read in passes of RB rows across up to JB
 * columns (whole cache lines, in address order: walking one narrow column
 * block down every row was bound by the strided reads); within a pass the
 * CB sums of a block stay in registers, and between passes they wait in
 * acc (in L1). Each column's sum is the same chain of additions in row
 * order either way. JB of 1024 reads the rows of a 1024-wide layer (the
 * feed-forward's hidden) in one run each: 512 read each row as two
 * halves, in two walks down the block, and round_cols waited on its
 * loads (Zen 5: 4.4% of a seq2seq base bf16 step, 1.6% now; the same
 * bits). Compiled for AVX-512, AVX2 and the baseline. */
enum { CB = 16, RB = 16, JB = 1024 };
EW_CLONES static void colsum_cols(const float *g, int64_t N, int64_t ld, int64_t j0, int64_t j1,
                                  float *b)
{
    double acc[JB];
    for (int64_t c0 = j0; c0 < j1; c0 += JB) {
        const int64_t w = j1 - c0 < JB ? j1 - c0 : JB;
        memset(acc, 0, sizeof(double) * (size_t)w);
        for (int64_t r0 = 0; r0 < N; r0 += RB) {
            const int64_t r1 = N - r0 < RB ? N : r0 + RB;
            int64_t j = 0;
            for (; j + CB <= w; j += CB) {
                double s[CB];
                for (int l = 0; l < CB; l++)
                    s[l] = acc[j + l];
                for (int64_t r = r0; r < r1; r++)
                    for (int l = 0; l < CB; l++)
                        s[l] += (double)g[r * ld + c0 + j + l];
                for (int l = 0; l < CB; l++)
                    acc[j + l] = s[l];
            }
            for (; j < w; j++)
                for (int64_t r = r0; r < r1; r++)
                    acc[j] += (double)g[r * ld + c0 + j];
        }
        for (int64_t j = 0; j < w; j++)
            b[c0 + j] = (float)acc[j];
    }
}

/* colsum_cols over column runs of g [N, ld] into b */
typedef struct {
    const float *g;
    int64_t N, ld;
    float *b;
} colsum_job;

static void colsum_run(int64_t j0, int64_t j1, int thread, const void *ctx)
{
    const colsum_job *c = ctx;
    colsum_cols(c->g, c->N, c->ld, j0, j1, c->b);
}

/* What a layer's gradient goes through before its products: its
 * activation (act) and what the forward saved for it (t: relu's mask,
 * the GELUs' pre-activation), or a dropout of p (drop; t its mask), or
 * nothing (t NULL). */
typedef struct {
    cg_k_act act;
    const cg_tensor *t;
    bool drop;
    float p;
} act_grad;

/* Columns [j0, j1) of g's N rows, taken through the activation when t
 * (the data of act_grad's t, contiguous like g; tbf: bf16 elements) is not
 * NULL, or through a dropout when drop (t its mask, scale its factor),
 * rounded into g16 as the bf16 products round them, and, when b is not
 * NULL, their sums into b (doubles): each column's chain in row order
 * from 0. One pass over g where the gradient of the pre-activation, its
 * rounding and its column sums took three. */
EW_CLONES static void round_cols(const float *g, cg_k_act act, const void *t, bool tbf, bool drop,
                                 float scale, int64_t N, int64_t ld, int64_t j0, int64_t j1,
                                 uint16_t *g16, double *b)
{
    double acc[JB];
    float buf[JB];
    for (int64_t c0 = j0; c0 < j1; c0 += JB) {
        const int64_t w = j1 - c0 < JB ? j1 - c0 : JB;
        memset(acc, 0, sizeof(double) * (size_t)w);
        for (int64_t r = 0; r < N; r++) {
            const float *src = g + r * ld + c0;
            if (drop) { /* cg_k_dropout_backward's bits */
                const uint8_t *m = (const uint8_t *)t + r * ld + c0;
                for (int64_t j = 0; j < w; j++)
                    buf[j] = src[j] * (m[j] ? scale : 0.0f);
                src = buf;
            } else if (t && act == CG_K_ACT_RELU && tbf) {
                /* the output's bf16 rounding, positive where the mask is:
                 * in [1, 0x7f80] (not zero, negative or NaN) */
                const uint16_t *a = (const uint16_t *)t + r * ld + c0;
                for (int64_t j = 0; j < w; j++) { /* both read: no masked loads */
                    const float s = src[j];
                    buf[j] = (uint16_t)(a[j] - 1u) < 0x7f80u ? s : 0.0f;
                }
                src = buf;
            } else if (t && act == CG_K_ACT_RELU) { /* the mask, here (a call a row cost 1%) */
                const uint8_t *m = (const uint8_t *)t + r * ld + c0;
                for (int64_t j = 0; j < w; j++)
                    buf[j] = m[j] ? src[j] : 0.0f;
                src = buf;
            } else if (t) {
                const int64_t at = r * ld + c0;
                const void *tr = tbf ? (const void *)((const uint16_t *)t + at)
                                     : (const void *)((const float *)t + at);
                cg_k_act_grad_run(act, w, tr, tbf, NULL, src, buf);
                src = buf;
            }
            cg_bf16_round_run(w, src, g16 + r * ld + c0);
            if (b)
                for (int64_t j = 0; j < w; j++)
                    acc[j] += (double)src[j];
        }
        if (b)
            for (int64_t j = 0; j < w; j++)
                b[c0 + j] = acc[j];
    }
}

/* round_cols over all of g [N, out]: g's blocks of SUM_ROWS rows for the
 * threads, each block's column sums in double, the blocks' sums then added
 * in block order into b (float; NULL: no sums). The bits do not depend on
 * the thread count; with one block they are colsum_cols's (one chain a
 * column), and that block's columns go to the threads instead. Blocks of
 * rows, not of columns: with each thread walking a column block down every
 * row (a piece of each row, and half of the rows last written by the other
 * core: the op before splits g by rows, attention by heads, the norms by
 * rows), the pass took as long at 2 threads as at 1, and a seq2seq tiny
 * bf16 step at 2 threads was 1.2x as long (Intel Xeon). Blocks of 128
 * rows, not 256: charlm tiny's 768 rows made 3 blocks of 256, split 1:2
 * between two threads, and its step took 1.08x as long as with 6 of 128.
 * False + error when out of memory. */
enum { SUM_ROWS = 128 };

/* What round_rows's chunks read and write (round_cols's arguments) */
typedef struct {
    const float *g;
    cg_k_act act;
    const char *t;
    bool tbf, drop;
    float scale;
    int64_t te; /* bytes of an element of t */
    int64_t N, out;
    uint16_t *g16;
    double *part; /* a block's column sums (out doubles), or NULL */
} round_job;

/* Rows [r0, r1): one block of SUM_ROWS rows (the last may be short) */
static void round_row_block(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const round_job *j = ctx;
    const int64_t out = j->out;
    round_cols(j->g + r0 * out, j->act, j->t ? j->t + r0 * out * j->te : NULL, j->tbf, j->drop,
               j->scale, r1 - r0, out, 0, out, j->g16 + r0 * out,
               j->part ? j->part + r0 / SUM_ROWS * out : NULL);
}

/* Columns [c0, c1) of the one block */
static void round_col_run(int64_t c0, int64_t c1, int thread, const void *ctx)
{
    const round_job *j = ctx;
    round_cols(j->g, j->act, j->t, j->tbf, j->drop, j->scale, j->N, j->out, c0, c1, j->g16,
               j->part);
}

static bool round_rows(const float *g, const act_grad *ag, const cg_tensor *t, int64_t N,
                       int64_t out, uint16_t *g16, float *b)
{
    const int64_t nrb = (N + SUM_ROWS - 1) / SUM_ROWS;
    double *part = b ? cg_alloc((size_t)(nrb * out) * sizeof(double)) : NULL;
    if (b && !part) {
        cg_set_error("linear backward: out of memory");
        return false;
    }
    /* the blocks in shares (core/shares.h), or one block's column runs */
    const char *tp = t ? cg_data_ptr(t) : NULL;
    const bool tbf = t && t->dtype == CG_BF16;
    const int64_t te = t ? (int64_t)cg_dtype_size(t->dtype) : 0;
    const bool drop = ag && ag->drop;
    const round_job job = {g,    ag ? ag->act : CG_K_ACT_RELU,
                           tp,   tbf,
                           drop, drop ? cg_k_dropout_scale(ag->p) : 0.0f,
                           te,   N,
                           out,  g16,
                           part};
    const int nt = N * out > LINEAR_PAR_THRESHOLD && !omp_in_parallel() ? cg_get_num_threads() : 1;
    if (nrb > 1)
        cg_shares_run(N, SUM_ROWS, nt, round_row_block, &job);
    else
        cg_shares_run(out, CB, nt, round_col_run, &job);
    /* each column's blocks in block order, into block 0's row (a column
     * at a time down the blocks was a strided scalar chain) */
    for (int64_t q = 1; b && q < nrb; q++)
        for (int64_t j = 0; j < out; j++)
            part[j] += part[q * out + j];
    for (int64_t j = 0; b && j < out; j++)
        b[j] = (float)part[j];
    cg_free(part);
    return true;
}

/* The gradient of the pre-activation as its own tensor: the unfused ops'
 * bits (cg_k_relu_mask_backward, cg_k_relu_backward, cg_k_<gelu>_backward,
 * cg_k_dropout_backward). */
static cg_tensor *act_backward(const act_grad *ag, const cg_tensor *g)
{
    if (ag->drop)
        return cg_k_dropout_backward(ag->t, g, ag->p);
    if (ag->act == CG_K_ACT_RELU)
        return ag->t->dtype == CG_BOOL ? cg_k_relu_mask_backward(ag->t, g)
                                       : cg_k_relu_backward(ag->t, g);
    return ag->act == CG_K_ACT_GELU ? cg_k_gelu_backward(ag->t, g)
                                    : cg_k_gelu_erf_backward(ag->t, g);
}

static bool linear_backward(const char *op, const cg_tensor *x, const cg_tensor *w,
                            const act_grad *ag, const cg_tensor *g, cg_tensor *acc, cg_tensor **dx,
                            cg_tensor **dw, cg_tensor **db)
{
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    if (db)
        *db = NULL;
    if (!cg_f32_args(op, 3, (const cg_tensor *[]){x->dtype == CG_BF16 ? NULL : x, w, g}))
        return false;
    if (!linear_check(op, x, w, NULL))
        return false;
    const int64_t in = w->shape[1], out = w->shape[0];
    const int64_t N = cg_numel_shape(x->ndim - 1, x->shape);
    if (g->ndim != x->ndim || cg_numel_shape(g->ndim - 1, g->shape) != N ||
        g->shape[g->ndim - 1] != out) {
        char s1[96], s2[96];
        cg_set_error("%s: gradient %s does not match input %s", op, cg_shape_str(g, s1, sizeof s1),
                     cg_shape_str(x, s2, sizeof s2));
        return false;
    }
    if (!cg_check_grad_acc(op, acc, x, dx != NULL))
        return false;
    if (ag) { /* relu: a bool mask or the float output; the GELUs: the input; a dropout: its mask */
        const cg_tensor *t = ag->t;
        const bool relu = !ag->drop && ag->act == CG_K_ACT_RELU;
        if (!ag->drop && !relu && ag->act != CG_K_ACT_GELU && ag->act != CG_K_ACT_GELU_ERF) {
            cg_set_error("%s: unknown activation %d", op, (int)ag->act);
            return false;
        }
        if (ag->drop && !(ag->p >= 0.0f && ag->p <= 1.0f)) {
            cg_set_error("%s: p must be in [0, 1] (got %g)", op, (double)ag->p);
            return false;
        }
        const bool dt =
            ag->drop ? t->dtype == CG_BOOL
                     : t->dtype == CG_F32 || t->dtype == CG_BF16 || (relu && t->dtype == CG_BOOL);
        if (!cg_same_shape(t, g) || !dt) {
            char s1[96], s2[96];
            cg_set_error("%s: need %s of the gradient's shape, got %s %s and %s", op,
                         ag->drop ? "a bool mask"
                         : relu   ? "a bool mask or a float32 or bfloat16 output"
                                  : "a float32 or bfloat16 pre-activation",
                         cg_dtype_name(t->dtype), cg_shape_str(t, s1, sizeof s1),
                         cg_shape_str(g, s2, sizeof s2));
            return false;
        }
    }
    const bool empty = N == 0 || in == 0 || out == 0;
    const bool bf16 = cg_get_matmul_precision() == CG_PRECISION_BF16;
    /* both products in bf16 read g rounded as their packing rounds it:
     * rounded once (through the activation, with the bias's sums:
     * round_cols), read as it is by each (the same bits) */
    const bool fused = bf16 && dx && dw && !empty;
    if (ag && (!fused || (!ag->drop && ag->act == CG_K_ACT_RELU && ag->t->dtype == CG_F32))) {
        /* the pre-activation's gradient, then as without an activation
         * (relu's float output: its mask first) */
        cg_tensor *gm = fused ? cg_k_relu_mask(ag->t) : act_backward(ag, g);
        const bool ok =
            gm && (fused ? linear_backward(op, x, w, &(act_grad){.act = ag->act, .t = gm}, g, acc,
                                           dx, dw, db)
                         : linear_backward(op, x, w, NULL, gm, acc, dx, dw, db));
        cg_release(gm);
        return ok;
    }
    cg_tensor *gc = cg_k_contiguous(g);
    cg_tensor *mc = ag ? cg_k_contiguous(ag->t) : NULL;
    cg_tensor *xc = dw ? cg_k_contiguous(x) : NULL;
    /* dx straight into acc: the product's one k block adds it (beta 1,
     * CG_GEMM_C_ONCE: on AMX too, whose tiles otherwise sum onto acc),
     * each element's sum rounded once as acc + dx would be */
    const bool into = acc && !empty && cg_gemm_k_block(CG_GEMM_AUTO, out, 0) == out;
    /* beta = 0: the products write every element, so no zero-fill unless a
     * product is skipped for an empty dimension */
    cg_tensor *gx = !dx     ? NULL
                    : into  ? cg_retain(acc)
                    : empty ? cg_zeros(x->ndim, x->shape)
                            : cg_empty(x->ndim, x->shape);
    cg_tensor *gw = dw ? (empty ? cg_zeros(CG_SHAPE(out, in)) : cg_empty(CG_SHAPE(out, in))) : NULL;
    cg_tensor *gb = db ? cg_empty(CG_SHAPE(out)) : NULL;
    cg_tensor *g16 = fused ? cg_empty_dtype(CG_BF16, g->ndim, g->shape) : NULL;
    if (!gc || (ag && !mc) || (dw && (!xc || !gw)) || (dx && !gx) || (db && !gb) ||
        (fused && !g16)) {
        cg_release_all(7, gc, mc, xc, gx, gw, gb, g16);
        cg_set_error("%s: out of memory", op);
        return false;
    }
    const float *gp = cg_data(gc);
    bool ok = !fused || round_rows(gp, ag, mc, N, out, cg_data_bf16(g16), gb ? cg_data(gb) : NULL);
    if (ok && gx && !empty && bf16) {
        /* dx [N,in] = g [N,out] W [out,in] on W^T's cached bf16 copy */
        cg_packed_weight *pw = cg_packed_weight_get(w, CG_PACKED_BF16_T);
        const cg_bf16_matrix *wm = pw ? cg_packed_weight_bf16(pw) : NULL;
        ok = pw && cg_bf16_matrix_mul_epi(wm, CG_GEMM_AUTO, 0, N,
                                          g16 ? cg_data_ptr(g16) : (const void *)gp,
                                          (g16 ? CG_GEMM_A_BF16 : 0) | CG_GEMM_C_ONCE, out, 1, NULL,
                                          0, into ? 1.0f : 0.0f, cg_data(gx), in, 1, NULL);
        cg_packed_weight_release(pw);
    } else if (ok && gx && !empty) { /* dx [N,in] = g [N,out] W [out,in] */
        ok = cg_sgemm_path(CG_GEMM_AUTO, 0, N, in, out, 1.0f, gp, out, 1, cg_data(w), w->strides[0],
                           w->strides[1], into ? 1.0f : 0.0f, cg_data(gx), in, 1);
        if (!ok) /* gemm's message */
            cg_prefix_error("%s: ", op);
    }
    if (into) /* acc written in place (the other path's cg_k_add_ says so itself) */
        cg_tensor_modified(acc);
    /* dW [out,in] = g^T [out,N] x [N,in] (bf16 operands read as they are) */
    const unsigned bf =
        (g16 ? CG_GEMM_A_BF16 : 0) | (xc && xc->dtype == CG_BF16 ? CG_GEMM_B_BF16 : 0);
    if (gw && !empty && ok &&
        !cg_gemm_mixed_path(CG_GEMM_AUTO, 0, out, in, N, 1.0f,
                            g16 ? cg_data_ptr(g16) : (const void *)gp, 1, out, cg_data_ptr(xc), in,
                            1, bf, 0.0f, cg_data(gw), in, 1)) {
        cg_set_error("linear backward: the weight's gradient failed (out of memory)");
        ok = false;
    }
    cg_release(g16);
    if (gb && !fused) {
        /* column sums, runs of 8 blocks of CB columns for the threads */
        const colsum_job job = {gp, N, out, cg_data(gb)};
        cg_shares_run(out, 8 * CB, cg_shares_team(N * out > LINEAR_PAR_THRESHOLD), colsum_run,
                      &job);
    }
    cg_release_all(3, gc, mc, xc);
    if (ok && acc && !into) { /* the bits of the same sum made apart */
        ok = cg_k_add_(acc, gx);
        cg_release(gx);
        gx = cg_retain(acc);
    }
    if (!ok) {
        cg_release_all(3, gx, gw, gb);
        return false;
    }
    if (dx)
        *dx = gx;
    if (dw)
        *dw = gw;
    if (db)
        *db = gb;
    return true;
}

/* linear_backward with the operands that share acc's memory (acc = x, or
 * g when in == out) read as they were before the call: dx is added into
 * acc while the weight's gradient still reads x and g */
static bool linear_backward_unaliased(const char *op, const cg_tensor *x, const cg_tensor *w,
                                      const act_grad *ag, const cg_tensor *g, cg_tensor *acc,
                                      cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (!acc)
        return linear_backward(op, x, w, ag, g, acc, dx, dw, db);
    if (dx)
        *dx = NULL;
    if (dw)
        *dw = NULL;
    if (db)
        *db = NULL;
    cg_tensor *cx = NULL, *cw = NULL, *cg = NULL, *ct = NULL;
    act_grad a = ag ? *ag : (act_grad){0};
    bool ok = (x = cg_k_unaliased(acc, x, false, &cx)) &&
              (w = cg_k_unaliased(acc, w, false, &cw)) &&
              (g = cg_k_unaliased(acc, g, false, &cg)) &&
              (!ag || (a.t = cg_k_unaliased(acc, ag->t, false, &ct)));
    ok = ok && linear_backward(op, x, w, ag ? &a : NULL, g, acc, dx, dw, db);
    cg_release_all(4, cx, cw, cg, ct);
    return ok;
}

bool cg_k_linear_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *g,
                          cg_tensor *acc, cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (!x || !w || !g)
        return cg_error_null_input("cg_k_linear_backward");
    return linear_backward_unaliased("linear backward", x, w, NULL, g, acc, dx, dw, db);
}

bool cg_k_linear_act_backward(const cg_tensor *x, const cg_tensor *w, cg_k_act act,
                              const cg_tensor *saved, const cg_tensor *g, cg_tensor *acc,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (!x || !w || !saved || !g)
        return cg_error_null_input("cg_k_linear_act_backward");
    return linear_backward_unaliased("linear_act backward", x, w,
                                     &(act_grad){.act = act, .t = saved}, g, acc, dx, dw, db);
}

bool cg_k_linear_dropout_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *mask,
                                  float p, const cg_tensor *g, cg_tensor *acc, cg_tensor **dx,
                                  cg_tensor **dw, cg_tensor **db)
{
    if (!x || !w || !mask || !g)
        return cg_error_null_input("cg_k_linear_dropout_backward");
    return linear_backward_unaliased("linear_dropout backward", x, w,
                                     &(act_grad){.t = mask, .drop = true, .p = p}, g, acc, dx, dw,
                                     db);
}
