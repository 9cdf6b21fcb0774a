/* Fused affine map y = x W^T + b (a Linear layer), its activation or its
 * residual block's dropout and add; the backward is core/linear_backward.c.
 *
 * The bias goes into the GEMM (cg_sgemm_bias): the bf16 kernels add it as
 * they write y, so y is written once; in fp32 it is written into the output
 * rows first and the product added on top (beta = 1). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/shares.h"
#include "core/ops.h"
#include "core/vmath.h"
#include "core/upcast.h"
#include "core/linear_impl.h"
#include "core/tensor_impl.h"

/* x rounded as the bf16 products round it, contiguous. */
static void round_of(int64_t n, const float *x, void *y) { cg_bf16_round_run(n, x, y); }
static cg_tensor *round_copy(const cg_tensor *x) { return cg_k_map_runs(x, CG_BF16, round_of); }

/* The copy is kept in x's storage's derived slot (core/tensor.h), keyed by
 * the view and the version, so that the products that read one activation
 * (q, k and v of one input; a decoder's cross-attention reading the
 * encoder's output) keep one copy between them. The slot holds a
 * reference (held: no scope gives it back), dropped when the storage dies
 * or is written. The slot is read and replaced under the derived-slot lock
 * (core/tensor_impl.h), which cg_tensor_modified takes it out under. */
typedef struct {
    cg_tensor *copy;
    int64_t offset;
    int ndim;
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    uint64_t version;
    bool dense; /* the view and its copy both contiguous: views within it
                 * take views of the copy (slot_copy) */
} operand_slot;

/* x's storage's version (atomic: cg_tensor_modified counts so) */
static uint64_t version_of(const cg_tensor *x)
{
    return __atomic_load_n(&x->storage->version, __ATOMIC_SEQ_CST);
}

static void operand_slot_free(void *p)
{
    operand_slot *o = p;
    if (o)
        cg_release_held(o->copy);
    free(o);
}

static bool same_view(const operand_slot *o, const cg_tensor *x)
{
    return o->offset == x->offset && o->ndim == x->ndim && o->version == version_of(x) &&
           !memcmp(o->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) &&
           !memcmp(o->strides, x->strides, sizeof(int64_t) * (size_t)x->ndim);
}

/* x's copy from the slot o of x's storage, or NULL: the copy itself for
 * the view it was kept for; for a view of elements that all lie within a
 * dense slot's view (attention's heads of a kept projection output, the
 * heads merged back), the copy's elements as x's layout, a view of the
 * copy. */
static cg_tensor *slot_copy(const operand_slot *o, const cg_tensor *x)
{
    if (o->version != version_of(x))
        return NULL;
    if (same_view(o, x))
        return cg_retain(o->copy);
    if (!o->dense)
        return NULL;
    int64_t lo = x->offset, hi = x->offset;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 0)
            return NULL;
        const int64_t reach = x->strides[d] * (x->shape[d] - 1);
        lo += reach < 0 ? reach : 0;
        hi += reach > 0 ? reach : 0;
    }
    if (lo < o->offset || hi >= o->offset + cg_numel_shape(o->ndim, o->shape))
        return NULL;
    return cg_view_as_strided(o->copy, x->ndim, x->shape, x->strides,
                              o->copy->offset + (x->offset - o->offset));
}

/* x's kept bf16 copy (a new reference), or NULL when it has none */
static cg_tensor *operand_kept(const cg_tensor *x)
{
    cg_storage *s = x->storage;
    cg_tensor *y = NULL;
    cg_derived_lock();
    if (s->derived && s->derived_free == operand_slot_free)
        y = slot_copy(s->derived, x);
    cg_derived_unlock();
    return y;
}

cg_tensor *cg_k_bf16_operand(const cg_tensor *x)
{
    if (!x)
        return cg_error_null_input("cg_k_bf16_operand"), NULL;
    if (!cg_f32_args("bf16_operand", 1, &x))
        return NULL;
    cg_tensor *y = operand_kept(x);
    if (y || !(y = round_copy(x)))
        return y;
    cg_k_bf16_operand_keep(x, y);
    return y;
}

void cg_k_bf16_operand_keep(const cg_tensor *x, cg_tensor *y)
{
    cg_storage *s = x->storage;
    operand_slot *o = malloc(sizeof *o);
    if (!o)
        return; /* kept by its caller alone */
    *o = (operand_slot){cg_retain_held(y),
                        x->offset,
                        x->ndim,
                        {0},
                        {0},
                        version_of(x),
                        cg_is_contiguous(x) && cg_is_contiguous(y)};
    memcpy(o->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(o->strides, x->strides, sizeof(int64_t) * (size_t)x->ndim);
    cg_derived_lock();
    /* a slot of this kind is replaced; another kind's (a weight's) stays */
    const bool mine = !s->derived || s->derived_free == operand_slot_free;
    void *old = mine ? s->derived : NULL;
    if (mine) {
        s->derived = o;
        s->derived_free = operand_slot_free;
    }
    cg_derived_unlock();
    operand_slot_free(mine ? old : o);
}

/* A linear layer's activation (cg_k_linear_act) as the product's
 * epilogue: its outputs, laid out as y, whose data e.c0 is. */
typedef struct {
    cg_gemm_epilogue e; /* first: the driver hands &e back to act_block */
    cg_k_act act;
    /* the output when not y itself (a GELU in fp32), relu's mask, and in
     * bf16 the pre-activation (the GELUs) and the output rounded */
    cg_tensor *a, *m, *h16, *a16;
    bool infer; /* no backward: only the output and its bf16 rounding */
} act_out;

static void *data_or_null(const cg_tensor *t) { return t ? cg_data_ptr(t) : NULL; }

/* The activation over a block of y (as the kernels store it: see
 * cg_gemm_epilogue), in runs along whichever of its dims is contiguous. */
/* An epilogue's block (rows x cols at c, strides rsc and csc) as `runs`
 * runs of `len` contiguous elements, ld apart: down the columns, along the
 * rows, or (general strides) by element, in `groups` groups of runs, group
 * j starting at c + j csc. */
typedef struct {
    int64_t len, runs, ld, groups;
} block_runs;

static block_runs runs_of(int64_t rows, int64_t cols, int64_t rsc, int64_t csc)
{
    const bool down = rsc == 1, along = !down && csc == 1;
    return (block_runs){down    ? rows
                        : along ? cols
                                : 1,
                        down ? cols : rows, down ? csc : rsc, down || along ? 1 : cols};
}

static void act_block(const cg_gemm_epilogue *e, float *c, int64_t rows, int64_t cols, int64_t rsc,
                      int64_t csc)
{
    const act_out *o = (const act_out *)e;
    const block_runs r = runs_of(rows, cols, rsc, csc);
    float *a = data_or_null(o->a);
    uint8_t *m = data_or_null(o->m);
    uint16_t *h16 = data_or_null(o->h16), *a16 = data_or_null(o->a16);
    for (int64_t j = 0; j < r.groups; j++) {
        const ptrdiff_t off = (c + j * csc) - o->e.c0;
        cg_k_act_run(o->act, r.len, r.runs, r.ld, c + j * csc, a ? a + off : NULL,
                     m ? m + off : NULL, h16 ? h16 + off : NULL, a16 ? a16 + off : NULL);
    }
}

/* The output's bf16 rounding as the product's epilogue (cg_k_linear_keep_bf16) */
typedef struct {
    cg_gemm_epilogue e; /* first: the driver hands &e back to round_block */
    uint16_t *y16;      /* laid out as y */
} round_out;

static void round_block(const cg_gemm_epilogue *e, float *c, int64_t rows, int64_t cols,
                        int64_t rsc, int64_t csc)
{
    const round_out *o = (const round_out *)e;
    const block_runs r = runs_of(rows, cols, rsc, csc);
    for (int64_t j = 0; j < r.groups; j++)
        cg_bf16_round_runs(r.len, r.runs, r.ld, c + j * csc, r.ld,
                           o->y16 + ((c + j * csc) - o->e.c0));
}

/* A residual block's dropout and add (cg_k_linear_residual) as the
 * product's epilogue: res and the mask laid out as y */
typedef struct {
    cg_gemm_epilogue e; /* first: the driver hands &e back to tail_block */
    cg_k_drop d;        /* p 0: no dropout */
    const float *res;   /* or NULL */
    bool want_mask;     /* the dropout's keep wanted (a dropout's backward) */
    cg_tensor *mask;    /* then the keep, bool (linear makes it) */
    uint8_t *m;         /* its data */
} tail_out;

static void tail_block(const cg_gemm_epilogue *e, float *c, int64_t rows, int64_t cols, int64_t rsc,
                       int64_t csc)
{
    const tail_out *o = (const tail_out *)e;
    const block_runs r = runs_of(rows, cols, rsc, csc);
    for (int64_t j = 0; j < r.groups; j++) {
        const ptrdiff_t off = (c + j * csc) - o->e.c0;
        cg_k_dropout_add_run(&o->d, r.len, r.runs, r.ld, off, c + j * csc,
                             o->res ? o->res + off : NULL, o->m ? o->m + off : NULL);
    }
}

/* The epilogue over rows of y [N, out] (no product ran it) */
typedef struct {
    const cg_gemm_epilogue *e;
    float *y;
    int64_t out;
} epi_rows;

static void epi_row_block(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    const epi_rows *a = ctx;
    a->e->fn(a->e, a->y + r0 * a->out, a->out, r1 - r0, 1, a->out);
}

/* In bf16, act_block as the kernels' write-out can do it (the tanh GELU
 * and relu, in place: cg_gemm_epilogue's wo) */
static void act_write_out(act_out *ao)
{
    const int act = ao->act == CG_K_ACT_RELU   ? CG_GEMM_WO_RELU
                    : ao->act == CG_K_ACT_GELU ? CG_GEMM_WO_GELU
                                               : CG_GEMM_WO_NONE;
    ao->e.wo = act != CG_GEMM_WO_NONE;
    ao->e.act = act;
    ao->e.pre16 = data_or_null(ao->h16);
    ao->e.out16 = data_or_null(ao->a16);
}

/* The outputs of ao beside y (contiguous): in bf16 the rounded ones and
 * the activation in place, in fp32 a GELU's own output (y is kept). */
static bool act_outputs(act_out *ao, const cg_tensor *y, bool bf16)
{
    ao->e = (cg_gemm_epilogue){.fn = act_block, .c0 = cg_data(y)};
    if (ao->infer) { /* the activation in place; the rounding for the next product */
        ao->a16 = bf16 ? cg_empty_dtype(CG_BF16, y->ndim, y->shape) : NULL;
        if (!bf16)
            return true;
        if (!ao->a16)
            return false;
        act_write_out(ao);
        return true;
    }
    const bool relu = ao->act == CG_K_ACT_RELU;
    ao->a = !relu && !bf16 ? cg_empty(y->ndim, y->shape) : NULL;
    /* relu's backward reads its mask, or in bf16 the output's rounding
     * (positive where the mask is) */
    ao->m = relu && !bf16 ? cg_empty_dtype(CG_BOOL, y->ndim, y->shape) : NULL;
    ao->h16 = !relu && bf16 ? cg_empty_dtype(CG_BF16, y->ndim, y->shape) : NULL;
    ao->a16 = bf16 ? cg_empty_dtype(CG_BF16, y->ndim, y->shape) : NULL;
    if ((!relu && !bf16 && !ao->a) || (relu && !bf16 && !ao->m) || (!relu && bf16 && !ao->h16) ||
        (bf16 && !ao->a16)) {
        cg_release_all(4, ao->a, ao->m, ao->h16, ao->a16);
        ao->a = ao->m = ao->h16 = ao->a16 = NULL;
        return false;
    }
    if (bf16)
        act_write_out(ao);
    return true;
}

/* y = x W^T + b on the GEMM, or in bf16 (the thread's policy) on W's
 * cached bf16 copy (core/weight_cache.c), which sets y's rows to the bias
 * itself. packed (no backward to come): in fp32 too on W's cached copy,
 * its fp32 panels, where the thread's fp32 path reads them, x has more
 * than CG_GEMM_SKINNY and at most CG_K_LINEAR_PACKED_ROWS rows, W more
 * than CG_GEMM_SKINNY (fewer: the dot products read W itself) and the
 * cache keeps the copy (else W itself: no transient copy of W's size);
 * the same bits either way. A bfloat16 x (cg_k_bf16_operand's) is read as it is by the
 * bf16 products and widened (exactly) for fp32 ones. With ao, its
 * activation too, or with to its dropout and residual add (to->e,
 * to->mask and to->m set here): the bf16 products run it on each finished
 * block of y,
 * otherwise a pass over y after the product. */
static cg_tensor *linear(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, bool packed,
                         act_out *ao, tail_out *to, cg_tensor **y16)
{
    if (y16)
        *y16 = NULL;
    if (!x || !w)
        return NULL;
    if (!cg_f32_args("linear", 3, (const cg_tensor *[]){x->dtype == CG_BF16 ? NULL : x, w, b}) ||
        !linear_check("linear", x, w, b))
        return NULL;
    const int64_t in = w->shape[1], out = w->shape[0];
    const int64_t N = in > 0 ? cg_numel(x) / in : cg_numel_shape(x->ndim - 1, x->shape);
    cg_packed_weight *pw = NULL, *pf = NULL;
    if (cg_get_matmul_precision() == CG_PRECISION_BF16) {
        if (N > 0 && in > 0 && out > 0 && !(pw = cg_packed_weight_get(w, CG_PACKED_BF16)))
            return NULL;
    } else if (packed && N > CG_GEMM_SKINNY && N <= CG_K_LINEAR_PACKED_ROWS &&
               out > CG_GEMM_SKINNY && in > 0 && cg_f32_packed_usable()) {
        pf = cg_packed_weight_f32_kept(w); /* NULL: W itself, as uncached */
    }
    int64_t shp[CG_MAX_DIMS];
    memcpy(shp, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shp[x->ndim - 1] = out;
    /* the output's rounding (bf16 products only: they run the epilogue),
     * taken before the output itself: the other order left a seq2seq base
     * bf16 step's peak 2-6 MB higher (the allocator's blocks, not more
     * live tensors: the same requests were live at the backward's start) */
    cg_tensor *r16 = y16 && pw && !ao ? cg_empty_dtype(CG_BF16, x->ndim, shp) : NULL;
    cg_tensor *y = cg_empty(x->ndim, shp);
    /* the dropout's mask */
    const bool want_m = to && to->want_mask && to->d.p > 0.0f;
    cg_tensor *m = want_m ? cg_empty_dtype(CG_BOOL, x->ndim, shp) : NULL;
    /* fp32 products of a bfloat16 x: its values as floats; bf16 ones of a
     * float32 x read its kept bf16 copy if it has one (the same bits) */
    cg_tensor *x16 = pw && x->dtype == CG_F32 ? operand_kept(x) : NULL;
    const cg_tensor *xs = x16 ? x16 : x;
    cg_tensor *xc = xs->dtype == CG_BF16 && !pw ? cg_k_to(xs, CG_F32) : cg_k_contiguous(xs);
    cg_release(x16);
    if (!y || !xc || (y16 && pw && !ao && !r16) || (want_m && !m) ||
        (ao && !act_outputs(ao, y, pw != NULL))) {
        cg_release_all(4, y, xc, r16, m);
        cg_packed_weight_release(pw);
        cg_packed_weight_release(pf);
        return NULL;
    }
    uint16_t *r16p = r16 ? cg_data_bf16(r16) : NULL;
    round_out ro = {{round_block, cg_data(y), true, CG_GEMM_WO_NONE, NULL, r16p}, r16p};
    if (y16)
        *y16 = r16;
    if (to) {
        to->e = (cg_gemm_epilogue){.fn = tail_block, .c0 = cg_data(y)};
        to->mask = m;
        to->m = m ? (uint8_t *)cg_data_bool(m) : NULL;
    }
    const cg_gemm_epilogue *epi = ao ? &ao->e : to ? &to->e : ro.y16 ? &ro.e : NULL;
    float *yp = cg_data(y);
    bool ok = true;
    if (in == 0 && !b)
        memset(yp, 0, sizeof(float) * (size_t)(N * out));
    else if (pw)
        ok = cg_bf16_matrix_mul_epi(cg_packed_weight_bf16(pw), CG_GEMM_AUTO, 0, N, cg_data_ptr(xc),
                                    xc->dtype == CG_BF16 ? CG_GEMM_A_BF16 : 0, in, 1,
                                    b ? cg_data(b) : NULL, b ? b->strides[0] : 0, 0.0f, yp, out, 1,
                                    epi);
    else if (pf)
        ok = cg_f32_packed_mul(cg_packed_weight_f32(pf), 0, N, cg_data(xc), in, 1,
                               b ? cg_data(b) : NULL, b ? b->strides[0] : 0, yp, out);
    else if (N > 0 && out > 0 && b)
        ok =
            cg_sgemm_bias_path(CG_GEMM_AUTO, 0, N, out, in, cg_data(xc), in, 1, cg_data(w),
                               w->strides[1], w->strides[0], cg_data(b), b->strides[0], yp, out, 1);
    else if (N > 0 && out > 0 && in > 0)
        ok = cg_sgemm_path(CG_GEMM_AUTO, 0, N, out, in, 1.0f, cg_data(xc), in, 1, cg_data(w),
                           w->strides[1], w->strides[0], 0.0f, yp, out, 1);
    cg_release(xc);
    cg_packed_weight_release(pw);
    cg_packed_weight_release(pf);
    if (ok && (ao || to) && !pw) { /* no product ran the epilogue: over y, in blocks of 64 rows */
        const epi_rows job = {epi, yp, out};
        cg_shares_run(N, 64, cg_shares_team(N * out > LINEAR_PAR_THRESHOLD), epi_row_block, &job);
    }
    if (!ok) {
        if (to) {
            cg_release(m);
            to->mask = NULL;
        }
        if (ao)
            cg_release_all(4, ao->a, ao->m, ao->h16, ao->a16);
        if (y16) {
            cg_release(*y16);
            *y16 = NULL;
        }
        cg_release(y);
        return NULL;
    }
    return y;
}

cg_tensor *cg_k_linear(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b)
{
    return linear(x, w, b, false, NULL, NULL, NULL);
}

cg_tensor *cg_k_linear_keep_bf16(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b)
{
    cg_tensor *y16, *y = linear(x, w, b, false, NULL, NULL, &y16);
    if (y16)
        cg_k_bf16_operand_keep(y, y16);
    cg_release(y16);
    return y;
}

cg_tensor *cg_k_linear_packed(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b)
{
    return linear(x, w, b, true, NULL, NULL, NULL);
}

cg_tensor *cg_k_linear_act(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, cg_k_act act,
                           cg_tensor **saved)
{
    if (saved)
        *saved = NULL;
    if (act != CG_K_ACT_RELU && act != CG_K_ACT_GELU && act != CG_K_ACT_GELU_ERF) {
        cg_set_error("linear_act: unknown activation %d", (int)act);
        return NULL;
    }
    act_out ao = {.act = act, .infer = !saved};
    cg_tensor *y = linear(x, w, b, !saved, &ao, NULL, NULL);
    if (!y)
        return NULL;
    cg_tensor *out = ao.a ? ao.a : y; /* y activated in place, or y = h kept */
    if (ao.a16)
        cg_k_bf16_operand_keep(out, ao.a16);
    if (!saved) {
        cg_release(ao.a16);
        return out;
    }
    if (act == CG_K_ACT_RELU)
        *saved = ao.m ? ao.m : cg_retain(ao.a16);
    else
        *saved = ao.h16 ? ao.h16 : y;
    cg_release(ao.a16);
    return out;
}

cg_tensor *cg_k_linear_residual(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b,
                                const cg_tensor *res, float p, cg_rng *rng, cg_tensor **mask)
{
    if (mask)
        *mask = NULL;
    if (!x || !w)
        return cg_error_null_input("cg_k_linear_residual"), NULL;
    if (!(p >= 0.0f && p <= 1.0f)) {
        cg_set_error("linear_residual: p must be in [0, 1] (got %g)", (double)p);
        return NULL;
    }
    if (!rng && p > 0.0f) {
        cg_set_error("linear_residual: NULL rng");
        return NULL;
    }
    if (!linear_check("linear_residual", x, w, b))
        return NULL;
    if (res && !cg_check_f32("linear_residual", "res", res))
        return NULL;
    bool same = !res || (res->ndim == x->ndim && res->shape[x->ndim - 1] == w->shape[0]);
    for (int i = 0; same && res && i < x->ndim - 1; i++)
        same = res->shape[i] == x->shape[i];
    if (!same) { /* the output's shape: x's with its last dim out */
        char a[96], c[96];
        cg_set_error("linear_residual: residual %s does not match the output of input %s and "
                     "%lld outputs",
                     cg_shape_str(res, a, sizeof a), cg_shape_str(x, c, sizeof c),
                     (long long)w->shape[0]);
        return NULL;
    }
    cg_tensor *rc = res ? cg_k_contiguous(res) : NULL;
    if (res && !rc)
        return NULL;
    tail_out to = {.d = {.p = 0.0f}, .res = rc ? cg_data(rc) : NULL, .want_mask = mask != NULL};
    if (p > 0.0f) { /* the output's draws, taken before it is made (also if that fails) */
        int64_t n = w->shape[0];
        for (int i = 0; i < x->ndim - 1; i++)
            n *= x->shape[i];
        to.d = cg_k_drop_take(rng, p, n);
    }
    cg_tensor *y = linear(x, w, b, !mask, NULL, &to, NULL);
    cg_release(rc);
    if (!y)
        return NULL;
    if (mask)
        *mask = to.mask;
    return y;
}
