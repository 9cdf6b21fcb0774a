/* Fused affine map y = x W^T + b (a Linear layer) and its backward.
 *
 * The bias goes into the GEMM (cg_sgemm_bias): the bf16 kernels add it as
 * they write y, so y is written once; in fp32 it is written into the output
 * rows first and the product added on top (beta = 1). The
 * backward is two GEMMs and a column sum for the bias, each column summed
 * by one thread in row order (in double), so results do not depend on the
 * thread count. */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/shares.h"
#include "core/ops.h"
#include "core/vmath.h"
#include "core/upcast.h"

#define PAR_THRESHOLD 32768

static bool check_linear(const char *op, const cg_tensor *x, const cg_tensor *w, const cg_tensor *b)
{
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        char s1[96], s2[96], s3[96];
        cg_set_error("%s: input %s, weight %s, bias %s: need x [..., in], weight [out, in], "
                     "bias [out]",
                     op, cg_shape_str(x, s1, sizeof s1), cg_shape_str(w, s2, sizeof s2),
                     b ? cg_shape_str(b, s3, sizeof s3) : "none");
        return false;
    }
    return true;
}

/* x rounded as the bf16 products round it, contiguous. */
static void round_of(int64_t n, const float *x, void *y) { cg_bf16_round_run(n, x, y); }
static cg_tensor *round_copy(const cg_tensor *x) { return cg_k_map_runs(x, CG_BF16, round_of); }

/* The copy is kept in x's storage's derived slot (core/tensor.h), keyed by
 * the view and the version, so that the products that read one activation
 * (q, k and v of one input; a decoder's cross-attention reading the
 * encoder's output) keep one copy between them. The slot holds a
 * reference (held: no scope gives it back), dropped when the storage dies
 * or is written. */
typedef struct {
    cg_tensor *copy;
    int64_t offset;
    int ndim;
    int64_t shape[CG_MAX_DIMS], strides[CG_MAX_DIMS];
    uint64_t version;
    bool dense; /* the view and its copy both contiguous: views within it
                 * take views of the copy (slot_copy) */
} operand_slot;

static pthread_mutex_t g_operand_lock = PTHREAD_MUTEX_INITIALIZER;

static void operand_slot_free(void *p)
{
    operand_slot *o = p;
    if (o)
        cg_release_held(o->copy);
    free(o);
}

static bool same_view(const operand_slot *o, const cg_tensor *x)
{
    return o->offset == x->offset && o->ndim == x->ndim && o->version == x->storage->version &&
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
    if (o->version != x->storage->version)
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

cg_tensor *cg_k_bf16_operand(const cg_tensor *x)
{
    if (!x)
        return cg_error_null_input("cg_k_bf16_operand"), NULL;
    if (!cg_f32_args("bf16_operand", 1, &x))
        return NULL;
    cg_storage *s = x->storage;
    cg_tensor *y = NULL;
    pthread_mutex_lock(&g_operand_lock);
    if (s->derived && s->derived_free == operand_slot_free)
        y = slot_copy(s->derived, x);
    pthread_mutex_unlock(&g_operand_lock);
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
                        s->version,
                        cg_is_contiguous(x) && cg_is_contiguous(y)};
    memcpy(o->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(o->strides, x->strides, sizeof(int64_t) * (size_t)x->ndim);
    pthread_mutex_lock(&g_operand_lock);
    /* a slot of this kind is replaced; another kind's (a weight's) stays */
    const bool mine = !s->derived || s->derived_free == operand_slot_free;
    void *old = mine ? s->derived : NULL;
    if (mine) {
        s->derived = o;
        s->derived_free = operand_slot_free;
    }
    pthread_mutex_unlock(&g_operand_lock);
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

/* The outputs of ao beside y (contiguous): in bf16 the rounded ones and
 * the activation in place, in fp32 a GELU's own output (y is kept). */
static bool act_outputs(act_out *ao, const cg_tensor *y, bool bf16)
{
    const bool relu = ao->act == CG_K_ACT_RELU;
    ao->e = (cg_gemm_epilogue){act_block, cg_data(y)};
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
    return true;
}

/* y = x W^T + b on the GEMM, or in bf16 (the thread's policy, or packed)
 * on W's cached bf16 copy (core/weight_cache.c), which sets y's rows to the
 * bias itself. A bfloat16 x (cg_k_bf16_operand's) is read as it is by the
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
        !check_linear("linear", x, w, b))
        return NULL;
    const int64_t in = w->shape[1], out = w->shape[0];
    const int64_t N = in > 0 ? cg_numel(x) / in : cg_numel_shape(x->ndim - 1, x->shape);
    cg_bf16_weight *pw = NULL;
    if ((packed || cg_get_matmul_precision() == CG_PRECISION_BF16) && N > 0 && in > 0 && out > 0 &&
        !(pw = cg_bf16_weight_get(w, false)))
        return NULL;
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
    /* fp32 products of a bfloat16 x: its values as floats */
    cg_tensor *xc = x->dtype == CG_BF16 && !pw ? cg_k_to(x, CG_F32) : cg_k_contiguous(x);
    if (!y || !xc || (y16 && pw && !ao && !r16) || (want_m && !m) ||
        (ao && !act_outputs(ao, y, pw != NULL))) {
        cg_release_all(4, y, xc, r16, m);
        cg_bf16_weight_release(pw);
        return NULL;
    }
    round_out ro = {{round_block, cg_data(y)}, r16 ? cg_data_bf16(r16) : NULL};
    if (y16)
        *y16 = r16;
    if (to) {
        to->e = (cg_gemm_epilogue){tail_block, cg_data(y)};
        to->mask = m;
        to->m = m ? (uint8_t *)cg_data_bool(m) : NULL;
    }
    const cg_gemm_epilogue *epi = ao ? &ao->e : to ? &to->e : ro.y16 ? &ro.e : NULL;
    float *yp = cg_data(y);
    bool ok = true;
    if (in == 0 && !b)
        memset(yp, 0, sizeof(float) * (size_t)(N * out));
    else if (pw)
        ok = cg_bf16_matrix_mul_epi(cg_bf16_weight_matrix(pw), CG_GEMM_AUTO, 0, N, cg_data_ptr(xc),
                                    xc->dtype == CG_BF16, in, 1, b ? cg_data(b) : NULL,
                                    b ? b->strides[0] : 0, 0.0f, yp, out, 1, epi);
    else if (N > 0 && out > 0 && b)
        cg_sgemm_bias(N, out, in, cg_data(xc), in, 1, cg_data(w), w->strides[1], w->strides[0],
                      cg_data(b), b->strides[0], yp, out, 1);
    else if (N > 0 && out > 0 && in > 0)
        cg_sgemm(N, out, in, 1.0f, cg_data(xc), in, 1, cg_data(w), w->strides[1], w->strides[0],
                 0.0f, yp, out, 1);
    cg_release(xc);
    cg_bf16_weight_release(pw);
    if (ok && (ao || to) && !pw) { /* no product ran the epilogue: over y, in blocks of 64 rows */
        const epi_rows job = {epi, yp, out};
        cg_shares_run(N, 64, cg_shares_team(N * out > PAR_THRESHOLD), epi_row_block, &job);
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

cg_tensor *cg_k_linear_bf16_packed(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b)
{
    return linear(x, w, b, true, NULL, NULL, NULL);
}

cg_tensor *cg_k_linear_act(const cg_tensor *x, const cg_tensor *w, const cg_tensor *b, cg_k_act act,
                           cg_tensor **saved)
{
    if (saved)
        *saved = NULL;
    if (!saved)
        return cg_error_null_input("cg_k_linear_act"), NULL;
    if (act != CG_K_ACT_RELU && act != CG_K_ACT_GELU && act != CG_K_ACT_GELU_ERF) {
        cg_set_error("linear_act: unknown activation %d", (int)act);
        return NULL;
    }
    act_out ao = {.act = act};
    cg_tensor *y = linear(x, w, b, false, &ao, NULL, NULL);
    if (!y)
        return NULL;
    cg_tensor *out = ao.a ? ao.a : y; /* y activated in place, or y = h kept */
    if (ao.a16)
        cg_k_bf16_operand_keep(out, ao.a16);
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
    if (!check_linear("linear_residual", x, w, b))
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
    if (p > 0.0f)
        to.d = cg_k_drop_from(rng, p);
    cg_tensor *y = linear(x, w, b, false, NULL, &to, NULL);
    cg_release(rc);
    if (!y)
        return NULL;
    if (p > 0.0f)
        rng->counter += (uint64_t)cg_numel(y);
    if (mask)
        *mask = to.mask;
    return y;
}

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
    const int nt = N * out > PAR_THRESHOLD && !omp_in_parallel() ? cg_get_num_threads() : 1;
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
    if (!check_linear(op, x, w, NULL))
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
    /* dx straight into acc: the product's one k block adds it (beta 1),
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
        cg_bf16_weight *pw = cg_bf16_weight_get(w, true);
        const cg_bf16_matrix *wm = pw ? cg_bf16_weight_matrix(pw) : NULL;
        ok = pw && cg_bf16_matrix_mul_epi(
                       wm, CG_GEMM_AUTO, 0, N, g16 ? cg_data_ptr(g16) : (const void *)gp,
                       g16 != NULL, out, 1, NULL, 0, into ? 1.0f : 0.0f, cg_data(gx), in, 1, NULL);
        cg_bf16_weight_release(pw);
    } else if (ok && gx && !empty) { /* dx [N,in] = g [N,out] W [out,in] */
        cg_sgemm(N, in, out, 1.0f, gp, out, 1, cg_data(w), w->strides[0], w->strides[1],
                 into ? 1.0f : 0.0f, cg_data(gx), in, 1);
    }
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
        cg_shares_run(out, 8 * CB, cg_shares_team(N * out > PAR_THRESHOLD), colsum_run, &job);
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

bool cg_k_linear_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *g,
                          cg_tensor *acc, cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (!x || !w || !g)
        return cg_error_null_input("cg_k_linear_backward");
    return linear_backward("linear backward", x, w, NULL, g, acc, dx, dw, db);
}

bool cg_k_linear_act_backward(const cg_tensor *x, const cg_tensor *w, cg_k_act act,
                              const cg_tensor *saved, const cg_tensor *g, cg_tensor *acc,
                              cg_tensor **dx, cg_tensor **dw, cg_tensor **db)
{
    if (!x || !w || !saved || !g)
        return cg_error_null_input("cg_k_linear_act_backward");
    return linear_backward("linear_act backward", x, w, &(act_grad){.act = act, .t = saved}, g, acc,
                           dx, dw, db);
}

bool cg_k_linear_dropout_backward(const cg_tensor *x, const cg_tensor *w, const cg_tensor *mask,
                                  float p, const cg_tensor *g, cg_tensor *acc, cg_tensor **dx,
                                  cg_tensor **dw, cg_tensor **db)
{
    if (!x || !w || !mask || !g)
        return cg_error_null_input("cg_k_linear_dropout_backward");
    return linear_backward("linear_dropout backward", x, w,
                           &(act_grad){.t = mask, .drop = true, .p = p}, g, acc, dx, dw, db);
}
