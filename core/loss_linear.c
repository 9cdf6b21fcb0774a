/* Liger-Kernel's fused linear + cross-entropy, our own for the CPU
 * (cg_k_linear_cross_entropy, core/ops.h): the output projection and the
 * loss in row chunks, so that the [N, V] logits are never kept. Its rows
 * are core/loss.c's (core/loss_rows.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "core/loss_rows.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/upcast.h"

/* ------------------------------------- fused linear + cross-entropy */
/* Liger-Kernel's fused linear cross-entropy, our own for the CPU: the rows
 * of h go through in chunks; each chunk's logits [rows, V] = h W^T + b are
 * made, turned into their gradient in place (the rows of
 * cg_k_cross_entropy), and used at once for dh = dL W, dW += dL^T h and
 * db += column sums of dL. The products go through cg_sgemm, so they
 * follow the matrix precision (bf16 rounds their operands, the logits'
 * gradient included).
 *
 * CG_LCE_EXACT: the chunks are the k blocks of dW's product over the N rows
 * (cg_gemm_k_block), so dW, summed block by block with beta 1, has the bits
 * of the unfused head's one product dW = dL^T h; every row of the logits
 * and of dh is one kernel sum over d or V whatever the rows around it. In
 * bf16, whose products read W's packed copies (the weight cache), a
 * block's logits, loss rows and dh go LCE_ROWS rows at a time, so that
 * those rows are still in L2 when read again; in fp32 each product packs
 * W anew, so a block goes whole (rows of 64 made the default step 2-8%
 * slower in CPU time on the Intel Xeon, 384 rows as fast as the unfused
 * head). No run of rows is short enough for the dot products of skinny
 * products (core/gemm.h CG_GEMM_SKINNY) unless all N are. Where the
 * unfused product is split in two (cg_gemm_k_split: many tokens, a small
 * head), the chunks are each half's k blocks, the second half's dW is
 * summed on its own (in dw1) and added to the first's at the end, as the
 * product adds its halves. */
#define LCE_ROWS 64

typedef struct {
    const float *h, *w, *b; /* h [N, d], w [V, d], b [V] or NULL; contiguous */
    int64_t N, d, V;
    const int64_t *targets;
    cg_ce_rows rows;     /* V classes; scale g / kept (mean) or g (sum) */
    const float *g_rows; /* reduction none's upstream gradient [N] (each row's scale), or NULL */
    bool exact;          /* chunks on the k blocks (CG_LCE_EXACT on a path with them) */
    int64_t split;       /* exact: where dW's product splits its k (cg_gemm_k_split), or 0 */
    float *dh, *dw;      /* NULL where not wanted */
    float *dw1;          /* split and dw: the second half's dW [V, d] */
    double *db;          /* the bias's gradient in double (NULL: not wanted) */
    float *spare;        /* exact: [CG_GEMM_SKINNY + 1, V] */
    /* bf16: W and W^T rounded and packed once (the weight cache, as linear
     * layers read them: the bits of cg_sgemm in bf16), else NULL */
    const cg_bf16_matrix *pw, *pwt;
    bool failed; /* a product ran out of memory */
} lce_args;

/* The logits of rows [r0, r0 + m) into L (m rows of V). Exact and with
 * more rows in h than a skinny product has: a product of at least
 * CG_GEMM_SKINNY + 1 rows, the rows before r0 (or after) made in the spare
 * rows and dropped. */
static void lce_logits(lce_args *a, int64_t r0, int64_t m, float *L)
{
    int64_t V = a->V, d = a->d, s = r0, n = m;
    float *out = L;
    if (a->exact && m <= CG_GEMM_SKINNY && a->N > CG_GEMM_SKINNY) {
        n = CG_GEMM_SKINNY + 1;
        s = r0 + m - n > 0 ? r0 + m - n : 0;
        out = a->spare;
    }
    const float *hc = a->h + s * d;
    if (a->pw)
        a->failed |= !cg_bf16_matrix_mul(a->pw, CG_GEMM_AUTO, 0, n, hc, d, 1, a->b, 1, out, V, 1);
    else if (a->b)
        a->failed |=
            !cg_sgemm_bias_path(CG_GEMM_AUTO, 0, n, V, d, hc, d, 1, a->w, 1, d, a->b, 1, out, V, 1);
    else
        a->failed |=
            !cg_sgemm_path(CG_GEMM_AUTO, 0, n, V, d, 1.0f, hc, d, 1, a->w, 1, d, 0.0f, out, V, 1);
    if (out != L)
        memcpy(L, out + (r0 - s) * V, sizeof(float) * (size_t)(m * V));
}

/* Rows [r0, r0 + m): their logits into L, their losses into row[], their
 * gradient in place of the logits (when any gradient is wanted) and dh's
 * rows. */
static void lce_rows(lce_args *a, int64_t r0, int64_t m, float *L, double *row)
{
    int64_t V = a->V, d = a->d;
    lce_logits(a, r0, m, L);
    bool grads = a->dh || a->dw || a->db;
    cg_ce_rows_run(&a->rows, m, L, a->targets + r0, a->g_rows ? a->g_rows + r0 : NULL, NULL,
                   grads ? L : NULL, row + r0);
    if (a->dh && a->pwt)
        a->failed |=
            !cg_bf16_matrix_mul(a->pwt, CG_GEMM_AUTO, 0, m, L, V, 1, NULL, 0, a->dh + r0 * d, d, 1);
    else if (a->dh)
        a->failed |= !cg_sgemm_path(CG_GEMM_AUTO, 0, m, d, V, 1.0f, L, V, 1, a->w, d, 1, 0.0f,
                                    a->dh + r0 * d, d, 1);
}

/* db[j] += the column j of a chunk's gradient L [m, V] */
typedef struct {
    int64_t m, V;
    const float *L;
    double *db;
} db_sums;

static void add_db_columns(int64_t j0, int64_t j1, int thread, const void *ctx)
{
    const db_sums *d = ctx;
    for (int64_t j = j0; j < j1; j++) {
        double s = d->db[j];
        for (int64_t r = 0; r < d->m; r++) /* row order: any thread count */
            s += (double)d->L[r * d->V + j];
        d->db[j] = s;
    }
}

/* One chunk of rows [r0, r0 + m): rows as above, then their products into
 * dw (the second half's into dw1) and db (dw written with beta 0 when
 * first, else added to). */
static void lce_chunk(lce_args *a, int64_t r0, int64_t m, float *L, double *row, bool first)
{
    int64_t V = a->V, d = a->d, step = a->exact && a->pw ? LCE_ROWS : m;
    for (int64_t i = 0, n; i < m; i += n) {
        n = m - i <= step + CG_GEMM_SKINNY ? m - i : step; /* no short run last */
        lce_rows(a, r0 + i, n, L + i * V, row);
    }
    if (a->dw)
        a->failed |=
            !cg_sgemm_path(CG_GEMM_AUTO, 0, V, d, m, 1.0f, L, 1, V, a->h + r0 * d, d, 1,
                           first ? 0.0f : 1.0f, a->split && r0 >= a->split ? a->dw1 : a->dw, d, 1);
    if (a->db) {
        const db_sums sums = {m, V, L, a->db};
        cg_shares_run(V, cg_shares_rows(m), cg_shares_team(m * V > CG_CE_PAR_THRESHOLD),
                      add_db_columns, &sums);
    }
}

/* The size of the chunk at row r0 of N (split: the first half's rows, as
 * lce_args has it). */
static int64_t lce_chunk_at(int64_t chunk, bool exact, int64_t split, int64_t N, int64_t r0)
{
    if (chunk != CG_LCE_EXACT)
        return N - r0 < chunk ? N - r0 : chunk;
    if (!exact)
        return N - r0;
    if (split && r0 >= split)
        return cg_gemm_k_block(CG_GEMM_AUTO, N - split, r0 - split);
    return cg_gemm_k_block(CG_GEMM_AUTO, split ? split : N, r0);
}

/* h, w, b: the shapes of a linear layer's input, weight and bias; r a
 * class loss's reduction. */
static bool lce_check(const cg_tensor *h, const cg_tensor *w, const cg_tensor *b, cg_reduction r,
                      int64_t chunk)
{
    char b1[96], b2[96], b3[96];
    const cg_tensor *in[3] = {h, w, b};
    if (!cg_ce_reduction("linear_cross_entropy", r) ||
        !cg_f32_args("linear_cross_entropy", b ? 3 : 2, in))
        return false;
    if (h->ndim != 2 || w->ndim != 2 || h->shape[1] != w->shape[1] ||
        (b && (b->ndim != 1 || b->shape[0] != w->shape[0]))) {
        cg_set_error("linear_cross_entropy: need h [N, d], weight [V, d] and bias [V] (shapes "
                     "%s, %s, %s)",
                     cg_shape_str(h, b1, sizeof b1), cg_shape_str(w, b2, sizeof b2),
                     b ? cg_shape_str(b, b3, sizeof b3) : "none");
        return false;
    }
    if (chunk < 1 && chunk != CG_LCE_EXACT) {
        cg_set_error("linear_cross_entropy: chunk must be 1 or more rows, or %d for the "
                     "product's k blocks (got %lld)",
                     CG_LCE_EXACT, (long long)chunk);
        return false;
    }
    return true;
}

static atomic_uint_fast64_t g_lce_runs; /* cg_k_linear_cross_entropy_runs */

uint64_t cg_k_linear_cross_entropy_runs(void) { return atomic_load(&g_lce_runs); }

/* All chunks of a->N rows through L; each row's loss into row[]. */
static void lce_run(lce_args *a, int64_t chunk, float *L, double *row)
{
    atomic_fetch_add(&g_lce_runs, 1);
    for (int64_t r0 = 0, m; r0 < a->N; r0 += m) {
        m = lce_chunk_at(chunk, a->exact, a->split, a->N, r0);
        lce_chunk(a, r0, m, L, row, r0 == 0 || r0 == a->split);
    }
    if (a->dw1) /* the halves added as the product adds them */
        for (int64_t i = 0; i < a->V * a->d; i++)
            a->dw[i] += a->dw1[i];
}

/* The upstream gradient of each row (g_rows) against the reduction r and
 * the gradients asked for (grads): reduction none's, [N], needed by its
 * gradients; the others' is g. *held: a contiguous reference or NULL. */
static bool lce_rows_grad(const cg_tensor *g_rows, cg_reduction r, bool grads, int64_t N,
                          cg_tensor **held)
{
    *held = NULL;
    if (g_rows && r != CG_REDUCTION_NONE) {
        cg_set_error("linear_cross_entropy: g_rows is reduction none's upstream gradient (the "
                     "reduction is %s: pass g)",
                     r == CG_REDUCTION_MEAN ? "mean" : "sum");
        return false;
    }
    if (r != CG_REDUCTION_NONE || (!g_rows && !grads))
        return true;
    if (!g_rows) {
        cg_set_error("linear_cross_entropy: reduction none's gradients need each row's upstream "
                     "gradient (g_rows [N], NULL given)");
        return false;
    }
    return cg_ce_upstream_grad("linear_cross_entropy", g_rows, r, N, held);
}

cg_tensor *cg_k_linear_cross_entropy(const cg_tensor *h, const cg_tensor *w, const cg_tensor *b,
                                     const cg_tensor *target_t, int64_t ignore_index,
                                     float label_smoothing, cg_reduction r, int64_t chunk, float g,
                                     const cg_tensor *g_rows, cg_tensor **dh, cg_tensor **dw,
                                     cg_tensor **db)
{
    cg_tensor **outs[3] = {dh, dw, db};
    for (int i = 0; i < 3; i++)
        if (outs[i])
            *outs[i] = NULL;
    if (!h || !w) {
        cg_error_null_input("cg_k_linear_cross_entropy");
        return NULL;
    }
    if (!lce_check(h, w, b, r, chunk))
        return NULL;
    int64_t N = h->shape[0], d = h->shape[1], V = w->shape[0], kept;
    char shape[96]; /* the targets are checked as for logits [N, V] */
    cg_shape_str_n(2, (int64_t[]){N, V}, shape, sizeof shape);
    cg_tensor *tc = NULL, *gc = NULL;
    if (!cg_ce_ls_check("linear_cross_entropy", label_smoothing) ||
        !lce_rows_grad(g_rows, r, dh || dw || db, N, &gc))
        return NULL;
    if (!cg_ce_targets("linear_cross_entropy", N, V, shape, target_t, ignore_index, &kept, &tc)) {
        cg_release(gc);
        return NULL;
    }
    bool exact = chunk == CG_LCE_EXACT && N > 0 && cg_gemm_k_block(CG_GEMM_AUTO, N, 0) > 0;
    const int64_t split = exact ? cg_gemm_k_split(CG_GEMM_AUTO, V, d, N) : 0;
    int64_t m = 1; /* the largest chunk */
    for (int64_t r0 = 0, c; r0 < N; r0 += c) {
        c = lce_chunk_at(chunk, exact, split, N, r0);
        m = c > m ? c : m;
    }
    cg_tensor *hc = cg_k_contiguous(h), *wc = cg_k_contiguous(w),
              *bc = b ? cg_k_contiguous(b) : NULL;
    cg_tensor *L = cg_empty(2, (int64_t[]){m + (exact ? CG_GEMM_SKINNY + 1 : 0), V});
    /* every row of dh and dW is written by a product with beta 0 (the
     * first chunk's, for dW) unless there are no rows */
    cg_tensor *(*make)(int, const int64_t *) = N > 0 && d > 0 ? cg_empty : cg_zeros;
    cg_tensor *g3[3] = {dh ? make(2, h->shape) : NULL, dw ? make(2, w->shape) : NULL,
                        db ? cg_empty(1, &V) : NULL};
    cg_tensor *dw1 = split && dw ? cg_empty(2, w->shape) : NULL;
    double *row = malloc((size_t)(N > 0 ? N : 1) * sizeof(double));
    double *dbs = db ? calloc((size_t)(V > 0 ? V : 1), sizeof(double)) : NULL;
    /* bf16: W's packed copies (W^T only for dh), from the weight cache */
    bool bf16 = cg_get_matmul_precision() == CG_PRECISION_BF16 && N > 0 && d > 0 && V > 0;
    cg_packed_weight *pw = bf16 && wc ? cg_packed_weight_get(wc, CG_PACKED_BF16) : NULL;
    cg_packed_weight *pwt = bf16 && wc && dh ? cg_packed_weight_get(wc, CG_PACKED_BF16_T) : NULL;
    bool ok = hc && wc && (bc || !b) && L && row && (dbs || !db) && (pw || !bf16) &&
              (pwt || !bf16 || !dh) && (dw1 || !split || !dw);
    for (int i = 0; i < 3; i++)
        ok = ok && (g3[i] || !outs[i]);
    if (ok) {
        lce_args a = {.h = cg_data(hc),
                      .w = cg_data(wc),
                      .b = bc ? cg_data(bc) : NULL,
                      .N = N,
                      .d = d,
                      .V = V,
                      .targets = cg_data_i64(tc),
                      .rows = cg_ce_rows_for(V, ignore_index, kept, label_smoothing, g,
                                             r == CG_REDUCTION_MEAN),
                      .g_rows = gc ? cg_data(gc) : NULL,
                      .exact = exact,
                      .split = split,
                      .dh = g3[0] ? cg_data(g3[0]) : NULL,
                      .dw = g3[1] ? cg_data(g3[1]) : NULL,
                      .dw1 = dw1 ? cg_data(dw1) : NULL,
                      .db = dbs,
                      .spare = cg_data(L) + m * V,
                      .pw = pw ? cg_packed_weight_bf16(pw) : NULL,
                      .pwt = pwt ? cg_packed_weight_bf16(pwt) : NULL};
        lce_run(&a, chunk, cg_data(L), row);
        ok = !a.failed;
        for (int64_t j = 0; dbs && j < V; j++) /* cg_k_linear_backward's rounding */
            cg_data(g3[2])[j] = (float)dbs[j];
    } else if (!row || (db && !dbs)) {
        cg_set_error("linear_cross_entropy: out of memory");
    }
    cg_tensor *out = ok ? cg_ce_reduced_rows(row, N, (double)kept, r) : NULL; /* 0/0 = NaN */
    ok = ok && out;
    free(row);
    free(dbs);
    cg_packed_weight_release(pw);
    cg_packed_weight_release(pwt);
    cg_release_all(7, hc, wc, bc, L, tc, dw1, gc);
    for (int i = 0; i < 3; i++) {
        if (ok && outs[i])
            *outs[i] = g3[i];
        else
            cg_release(g3[i]);
    }
    return ok ? out : NULL;
}
