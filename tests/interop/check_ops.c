/* A differential test of cgrad's public ops against PyTorch (the cases and
 * PyTorch's answers: tests/interop/make_op_cases.py, which documents the
 * file):
 *     check_ops FILE [-v]    exit 0: every case agrees; 1: a difference
 * Each case's inputs are its bases seen through its views (differentiable
 * transposes, slices with steps, expands with stride 0), so the op reads
 * strided data and the gradient flows back through the views to the bases.
 * The op runs through cgrad's autograd; its outputs must have PyTorch's
 * count, dtypes and shapes, and values equal (exact ops, integer and bool
 * results: bit for bit, any NaN for a NaN) or within the file's tolerance
 * of each element (NaN where PyTorch has NaN, the same infinities). Then a
 * backward with PyTorch's upstream gradients, and each base's gradient
 * compared within its tolerance (a gradient through a broadcast or an
 * expand is a sum; no gradient is fine where PyTorch's is zero).
 * A case PyTorch refuses must be refused: NULL and one line of error. A
 * case cgrad refuses where PyTorch does not passes only when the file says
 * cgrad's documentation refuses it ("doc"); it is counted apart, as are
 * the differences cgrad keeps on purpose in the cases marked "known"
 * (make_op_cases.py, KNOWN: e.g. a limit where PyTorch gives NaN). -v
 * prints every refusal and deliberate difference, and for each op the largest
 * error of its outputs and gradients as a share of their tolerance; OP runs only that op. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"
#include "tests/interop/check_ops.h"
#include "tests/interop/check_ops_lapack.h"
#include "tests/interop/check_ops_linalg.h"

#define MAXIN 8
#define MAXOUT 8

static const cg_st_file *g_f;
static int g_verbose;

static const char *g_op;    /* the case being run, for messages */
static const char *g_known; /* its deliberate difference from PyTorch, or "" */
static int g_case, g_case_failed;

typedef struct {
    int fails, refused_doc, accepted_doc, torch_refused, cases, known;
} op_stats;

static bool dtype_of(const char *s, cg_dtype *dt)
{
    for (int d = 0; d < CG_NDTYPES; d++)
        if (!strcmp(s, cg_dtype_name((cg_dtype)d)))
            return *dt = (cg_dtype)d, true;
    return false;
}

/* ----------------------------------------------------------------- ops */
static cg_tensor *unary(const char *op, cg_tensor *x, const cJSON *a)
{
    static const struct {
        const char *name;
        cg_tensor *(*fn)(cg_tensor *);
    } t[] = {{"neg", cg_neg},
             {"abs", cg_abs},
             {"relu", cg_relu},
             {"exp", cg_exp},
             {"log", cg_log},
             {"sqrt", cg_sqrt},
             {"rsqrt", cg_rsqrt},
             {"tanh", cg_tanh},
             {"sigmoid", cg_sigmoid},
             {"gelu", cg_gelu},
             {"gelu_erf", cg_gelu_erf},
             {"silu", cg_silu},
             {"sin", cg_sin},
             {"cos", cg_cos},
             {"mish", cg_mish},
             {"hardswish", cg_hardswish},
             {"hardsigmoid", cg_hardsigmoid},
             {"relu6", cg_relu6},
             {"selu", cg_selu},
             {"softsign", cg_softsign},
             {"logsigmoid", cg_logsigmoid},
             {"tanhshrink", cg_tanhshrink}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(op, t[i].name))
            return t[i].fn(x);
    if (!strcmp(op, "softplus"))
        return cg_softplus(x, (float)ad(a, "beta"), (float)ad(a, "threshold"));
    if (!strcmp(op, "leaky_relu"))
        return cg_leaky_relu(x, (float)ad(a, "slope"));
    if (!strcmp(op, "elu"))
        return cg_elu(x, (float)ad(a, "alpha"));
    if (!strcmp(op, "hardtanh"))
        return cg_hardtanh(x, (float)ad(a, "lo"), (float)ad(a, "hi"));
    if (!strcmp(op, "celu"))
        return cg_celu(x, (float)ad(a, "alpha"));
    if (!strcmp(op, "softshrink"))
        return cg_softshrink(x, (float)ad(a, "l"));
    if (!strcmp(op, "hardshrink"))
        return cg_hardshrink(x, (float)ad(a, "l"));
    if (!strcmp(op, "threshold"))
        return cg_threshold(x, (float)ad(a, "th"), (float)ad(a, "v"));
    if (!strcmp(op, "normalize"))
        return cg_normalize(x, (float)ad(a, "p"), ai(a, "dim"), (float)ad(a, "eps"));
    if (!strcmp(op, "pow"))
        return cg_pow(x, (float)ad(a, "p"));
    if (!strcmp(op, "clamp"))
        return cg_clamp(x, (float)ad(a, "lo"), (float)ad(a, "hi"));
    if (!strcmp(op, "adds"))
        return cg_adds(x, (float)ad(a, "s"));
    if (!strcmp(op, "muls"))
        return cg_muls(x, (float)ad(a, "s"));
    return NULL;
}

static bool is_unary(const char *op)
{
    static const char *const names[] = {
        "neg",         "abs",        "relu",       "exp",        "log",        "sqrt",
        "rsqrt",       "tanh",       "sigmoid",    "gelu",       "gelu_erf",   "silu",
        "sin",         "cos",        "softplus",   "pow",        "clamp",      "adds",
        "muls",        "leaky_relu", "elu",        "normalize",  "mish",       "hardswish",
        "hardsigmoid", "relu6",      "selu",       "softsign",   "logsigmoid", "tanhshrink",
        "hardtanh",    "celu",       "softshrink", "hardshrink", "threshold"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(op, names[i]))
            return true;
    return false;
}

static cg_tensor *binary(const char *op, cg_tensor *x, cg_tensor *y, const cJSON *a)
{
    double v = ad(a, "v");
    static const struct {
        const char *name;
        cg_tensor *(*fn)(const cg_tensor *, const cg_tensor *);
        cg_tensor *(*sc)(const cg_tensor *, double);
    } cmp[] = {{"eq", cg_eq, cg_eq_scalar}, {"ne", cg_ne, cg_ne_scalar},
               {"lt", cg_lt, cg_lt_scalar}, {"le", cg_le, cg_le_scalar},
               {"gt", cg_gt, cg_gt_scalar}, {"ge", cg_ge, cg_ge_scalar}};
    for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
        size_t n = strlen(cmp[i].name);
        if (!strncmp(op, cmp[i].name, n) && !op[n])
            return cmp[i].fn(x, y);
        if (!strncmp(op, cmp[i].name, n) && !strcmp(op + n, "_scalar"))
            return cmp[i].sc(x, v);
    }
    if (!strcmp(op, "add"))
        return cg_add(x, y);
    if (!strcmp(op, "sub"))
        return cg_sub(x, y);
    if (!strcmp(op, "mul"))
        return cg_mul(x, y);
    if (!strcmp(op, "div"))
        return cg_div(x, y);
    if (!strcmp(op, "cosine_similarity"))
        return cg_cosine_similarity(x, y, ai(a, "dim"), (float)ad(a, "eps"));
    if (!strcmp(op, "maximum"))
        return cg_maximum(x, y);
    if (!strcmp(op, "minimum"))
        return cg_minimum(x, y);
    if (!strcmp(op, "logical_and"))
        return cg_logical_and(x, y);
    if (!strcmp(op, "logical_or"))
        return cg_logical_or(x, y);
    if (!strcmp(op, "logical_not"))
        return cg_logical_not(x);
    if (!strcmp(op, "matmul"))
        return cg_matmul(x, y);
    if (!strcmp(op, "masked_fill"))
        return cg_masked_fill(x, y, (float)v);
    if (!strcmp(op, "mse_loss"))
        return cg_mse_loss(x, y, (cg_reduction)ai(a, "red"));
    if (!strcmp(op, "bce_with_logits"))
        return cg_binary_cross_entropy_with_logits(x, y, (cg_reduction)ai(a, "red"));
    if (!strcmp(op, "embedding"))
        return cg_embedding(x, y);
    return NULL;
}

/* Reductions and the ops with several outputs: false + error on failure. */
static bool reduce(const char *op, cg_tensor *x, const cJSON *a, cg_tensor **out, int *nout)
{
    int64_t d64[CG_MAX_DIMS];
    int dims[CG_MAX_DIMS], nd = alist(a, "dims", d64, CG_MAX_DIMS);
    for (int i = 0; i < nd && i < CG_MAX_DIMS; i++)
        dims[i] = (int)d64[i];
    bool keep = ai(a, "keep");
    *nout = 1;
    if (!strcmp(op, "sum"))
        out[0] = cg_sum(x, nd, dims, keep);
    else if (!strcmp(op, "mean"))
        out[0] = cg_mean(x, nd, dims, keep);
    else if (!strcmp(op, "var"))
        out[0] = cg_var(x, nd, dims, ai(a, "corr"), keep);
    else if (!strcmp(op, "logsumexp"))
        out[0] = cg_logsumexp(x, nd, dims, keep);
    else if (!strcmp(op, "sum_all"))
        out[0] = cg_sum_all(x);
    else if (!strcmp(op, "mean_all"))
        out[0] = cg_mean_all(x);
    else if (!strcmp(op, "max")) {
        *nout = 2;
        out[0] = cg_max(x, ai(a, "dim"), keep, &out[1]);
        return out[0] && out[1];
    } else if (!strcmp(op, "min")) {
        *nout = 2;
        out[0] = cg_min(x, ai(a, "dim"), keep, &out[1]);
        return out[0] && out[1];
    } else if (!strcmp(op, "argmax"))
        out[0] = cg_argmax(x, ai(a, "dim"), keep);
    else if (!strcmp(op, "argmin"))
        out[0] = cg_argmin(x, ai(a, "dim"), keep);
    else if (!strcmp(op, "nonzero"))
        out[0] = cg_nonzero(x);
    else if (!strcmp(op, "topk")) {
        *nout = 2;
        out[0] = cg_topk(x, ai64(a, "k"), ai(a, "dim"), ai(a, "largest"), &out[1]);
        return out[0] && out[1];
    } else if (!strcmp(op, "cumsum"))
        out[0] = cg_cumsum(x, ai(a, "dim"));
    else if (cg_check_scan_op(op, x, a, out, nout))
        return out[0] != NULL;
    else if (!strcmp(op, "softmax"))
        out[0] = cg_softmax(x, ai(a, "dim"));
    else if (!strcmp(op, "log_softmax"))
        out[0] = cg_log_softmax(x, ai(a, "dim"));
    else if (!strcmp(op, "tril"))
        out[0] = cg_tril(x, ai64(a, "diag"));
    else if (!strcmp(op, "triu"))
        out[0] = cg_triu(x, ai64(a, "diag"));
    else
        return false;
    return out[0] != NULL;
}

static cg_tensor *view_op(const char *op, cg_tensor *x, const cJSON *a)
{
    int64_t sh[CG_MAX_DIMS + 2];
    int n = alist(a, "shape", sh, CG_MAX_DIMS + 2);
    if (!strcmp(op, "permute")) {
        int perm[CG_MAX_DIMS];
        int np = alist(a, "perm", sh, CG_MAX_DIMS);
        for (int i = 0; i < np && i < CG_MAX_DIMS; i++)
            perm[i] = (int)sh[i];
        if (np != x->ndim)
            cg_set_error("permute: %d dims given for a tensor of %d", np, x->ndim);
        return np == x->ndim ? cg_permute(x, perm) : NULL;
    }
    if (!strcmp(op, "transpose"))
        return cg_transpose(x, ai(a, "d0"), ai(a, "d1"));
    if (!strcmp(op, "slice"))
        return cg_slice(x, ai(a, "dim"), ai64(a, "start"), ai64(a, "stop"), ai64(a, "step"));
    if (!strcmp(op, "narrow"))
        return cg_narrow(x, ai(a, "dim"), ai64(a, "start"), ai64(a, "len"));
    if (!strcmp(op, "select"))
        return cg_select(x, ai(a, "dim"), ai64(a, "index"));
    if (!strcmp(op, "squeeze"))
        return cg_squeeze(x, ai(a, "dim"));
    if (!strcmp(op, "unsqueeze"))
        return cg_unsqueeze(x, ai(a, "dim"));
    if (n > CG_MAX_DIMS) {
        cg_set_error("check_ops: shape of %d dims", n);
        return NULL;
    }
    if (!strcmp(op, "expand"))
        return cg_expand(x, n, sh);
    if (!strcmp(op, "reshape"))
        return cg_reshape(x, n, sh);
    if (!strcmp(op, "view"))
        return cg_view(x, n, sh);
    if (!strcmp(op, "contiguous"))
        return cg_contiguous(x);
    if (!strcmp(op, "clone"))
        return cg_clone(x);
    if (!strcmp(op, "to")) {
        cg_dtype dt;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(a, "dt");
        return cJSON_IsString(v) && dtype_of(v->valuestring, &dt) ? cg_to(x, dt) : NULL;
    }
    return NULL;
}

/* The rest of torch.nn's losses (make_op_cases.py gen_losses_rest) */
static bool loss_op(const char *op, cg_tensor **x, const cJSON *a, cg_tensor **out)
{
    const cg_reduction r = (cg_reduction)ai(a, "red");
    const float m = (float)ad(a, "margin");
    if (!strcmp(op, "binary_cross_entropy"))
        *out = cg_binary_cross_entropy(x[0], x[1], ai(a, "w") ? x[2] : NULL, r);
    else if (!strcmp(op, "poisson_nll_loss"))
        *out = cg_poisson_nll_loss(x[0], x[1], ai(a, "log"), ai(a, "full"), (float)ad(a, "eps"), r);
    else if (!strcmp(op, "gaussian_nll_loss"))
        *out = cg_gaussian_nll_loss(x[0], x[1], x[2], ai(a, "full"), (float)ad(a, "eps"), r);
    else if (!strcmp(op, "soft_margin_loss"))
        *out = cg_soft_margin_loss(x[0], x[1], r);
    else if (!strcmp(op, "margin_ranking_loss"))
        *out = cg_margin_ranking_loss(x[0], x[1], x[2], m, r);
    else if (!strcmp(op, "hinge_embedding_loss"))
        *out = cg_hinge_embedding_loss(x[0], x[1], m, r);
    else if (!strcmp(op, "cosine_embedding_loss"))
        *out = cg_cosine_embedding_loss(x[0], x[1], x[2], m, r);
    else if (!strcmp(op, "triplet_margin_loss"))
        *out = cg_triplet_margin_loss(x[0], x[1], x[2], m, (float)ad(a, "p"), (float)ad(a, "eps"),
                                      ai(a, "swap"), r);
    else if (!strcmp(op, "multi_margin_loss"))
        *out = cg_multi_margin_loss(x[0], x[1], ai(a, "p"), m, ai(a, "w") ? x[2] : NULL, r);
    else if (!strcmp(op, "multilabel_soft_margin_loss"))
        *out = cg_multilabel_soft_margin_loss(x[0], x[1], ai(a, "w") ? x[2] : NULL, r);
    else if (!strcmp(op, "multilabel_margin_loss"))
        *out = cg_multilabel_margin_loss(x[0], x[1], r);
    else
        return false;
    return *out != NULL;
}

static bool nn_op(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out)
{
    float eps = (float)ad(a, "eps");
    bool w = ai(a, "w"), b = ai(a, "b");
    if (!strcmp(op, "cross_entropy"))
        *out = cg_cross_entropy(x[0], x[1], ai64(a, "ignore"), (float)ad(a, "ls"),
                                (cg_reduction)ai(a, "red"));
    else if (!strcmp(op, "nll_loss"))
        *out = cg_nll_loss(x[0], x[1], ai64(a, "ignore"), (cg_reduction)ai(a, "red"));
    else if (!strcmp(op, "cross_entropy_w"))
        *out = cg_cross_entropy_weighted(x[0], x[1], x[2], ai64(a, "ignore"), (float)ad(a, "ls"),
                                         (cg_reduction)ai(a, "red"));
    else if (!strcmp(op, "nll_loss_w"))
        *out =
            cg_nll_loss_weighted(x[0], x[1], x[2], ai64(a, "ignore"), (cg_reduction)ai(a, "red"));
    else if (!strcmp(op, "bce_with_logits_ex"))
        *out = cg_binary_cross_entropy_with_logits_ex(x[0], x[1], ai(a, "w") ? x[2] : NULL,
                                                      ai(a, "pw") ? x[2 + ai(a, "w")] : NULL,
                                                      (cg_reduction)ai(a, "red"));
    else if (!strcmp(op, "layer_norm"))
        *out = cg_layer_norm(x[0], w ? x[1] : NULL, b ? x[1 + w] : NULL, eps);
    else if (!strcmp(op, "rms_norm"))
        *out = cg_rms_norm(x[0], w ? x[1] : NULL, eps);
    else if (!strcmp(op, "add_layer_norm"))
        *out = cg_add_layer_norm(x[0], x[1], w ? x[2] : NULL, b ? x[2 + w] : NULL, eps);
    else if (!strcmp(op, "add_rms_norm"))
        *out = cg_add_rms_norm(x[0], x[1], w ? x[2] : NULL, eps);
    else if (!strcmp(op, "dropout")) {
        cg_rng rng = cg_rng_new(7);
        *out = cg_dropout(x[0], (float)ad(a, "p"), &rng, ai(a, "train"));
    } else if (!strcmp(op, "affine"))
        *out = cg_affine(x[0], x[1], b ? x[2] : NULL);
    else if (!strcmp(op, "affine_relu"))
        *out = cg_affine_relu(x[0], x[1], b ? x[2] : NULL);
    else if (!strcmp(op, "affine_gelu") || !strcmp(op, "affine_gelu_erf"))
        *out = cg_affine_gelu(x[0], x[1], b ? x[2] : NULL, !strcmp(op, "affine_gelu_erf"));
    else if (!strcmp(op, "attention"))
        *out = cg_attention(x[0], x[1], x[2], ai(a, "causal"), n > 3 ? x[3] : NULL, NULL);
    else if (!strcmp(op, "linear_cross_entropy"))
        *out = cg_linear_cross_entropy(x[0], x[1], b ? x[2] : NULL, x[n - 1], ai64(a, "ignore"),
                                       (float)ad(a, "ls"), CG_REDUCTION_MEAN, CG_LCE_EXACT, 1.0f);
    else if (!strcmp(op, "l1_loss"))
        *out = cg_l1_loss(x[0], x[1], (cg_reduction)ai(a, "red"));
    else if (!strcmp(op, "smooth_l1_loss"))
        *out = cg_smooth_l1_loss(x[0], x[1], (cg_reduction)ai(a, "red"), (float)ad(a, "beta"));
    else if (!strcmp(op, "huber_loss"))
        *out = cg_huber_loss(x[0], x[1], (cg_reduction)ai(a, "red"), (float)ad(a, "delta"));
    else if (!strcmp(op, "kl_div"))
        *out = cg_kl_div(x[0], x[1], (cg_reduction)ai(a, "red"), ai(a, "log_target"));
    else if (!strcmp(op, "where"))
        *out = cg_where(x[0], x[1], x[2]);
    else if (!strcmp(op, "index_select"))
        *out = cg_index_select(x[0], ai(a, "dim"), x[1]);
    else if (!strcmp(op, "gather"))
        *out = cg_gather(x[0], ai(a, "dim"), x[1]);
    else if (!strcmp(op, "index_add"))
        *out = cg_index_add(x[0], ai(a, "dim"), x[1], x[2]);
    else if (!strcmp(op, "scatter_add"))
        *out = cg_scatter_add(x[0], ai(a, "dim"), x[1], x[2]);
    else if (!strcmp(op, "concat"))
        *out = cg_concat(x, n, ai(a, "dim"));
    else if (!strcmp(op, "stack"))
        *out = cg_stack(x, n, ai(a, "dim"));
    else
        return loss_op(op, x, a, out) || check_ops_linalg(op, x, n, a, out);
    return *out != NULL;
}

/* pad, flip, roll, repeat (lists of sizes, dims and shifts) */
static cg_tensor *rearrange_op(const char *op, cg_tensor *x, const cJSON *a)
{
    int64_t v[2 * CG_MAX_DIMS + 2], d64[2 * CG_MAX_DIMS + 2];
    int dims[2 * CG_MAX_DIMS + 2];
    const int max = 2 * CG_MAX_DIMS + 2, nv = alist(a, "v", v, max),
              nd = alist(a, "dims", d64, max);
    if (nv > max || nd > max) {
        cg_set_error("check_ops: %s lists of %d and %d entries", op, nv, nd);
        return NULL;
    }
    for (int i = 0; i < nd; i++)
        dims[i] = (int)d64[i];
    if (!strcmp(op, "pad"))
        return cg_pad(x, nv, v, (cg_pad_mode)ai(a, "mode"), (float)ad(a, "value"));
    if (!strcmp(op, "flip"))
        return cg_flip(x, nd, dims);
    if (!strcmp(op, "roll"))
        return cg_roll(x, nv, v, nd ? dims : NULL);
    return !strcmp(op, "repeat") ? cg_repeat(x, nv, v) : NULL;
}

/* Runs the case's op: its outputs into out (new references), their count
 * into *nout; false + error when cgrad refuses. */
static bool run_op(const char *op, cg_tensor **x, int n, const cJSON *a, cg_tensor **out, int *nout)
{
    *nout = 1;
    if (is_unary(op))
        return (out[0] = unary(op, x[0], a)) != NULL;
    if (reduce(op, x[0], a, out, nout))
        return true;
    if (out[0] || cg_has_error())
        return false;
    if (!strcmp(op, "split")) {
        int64_t sizes[MAXOUT];
        int ns = alist(a, "sizes", sizes, MAXOUT);
        if (ns > MAXOUT)
            return false;
        *nout = ns;
        return cg_split(x[0], ai(a, "dim"), ns, sizes, out);
    }
    if ((out[0] = view_op(op, x[0], a)) || cg_has_error())
        return out[0] != NULL;
    if ((out[0] = rearrange_op(op, x[0], a)) || cg_has_error())
        return out[0] != NULL;
    if ((out[0] = binary(op, x[0], n > 1 ? x[1] : NULL, a)) || cg_has_error())
        return out[0] != NULL;
    if (cg_check_misc_op(op, x, n, a, out, nout))
        return out[0] != NULL;
    if (!strcmp(op, "attention_w") || !strcmp(op, "sdpa_w")) { /* the output and its weights */
        *nout = 2;
        out[0] = op[0] == 'a'
                     ? cg_attention(x[0], x[1], x[2], ai(a, "causal"), n > 3 ? x[3] : NULL, &out[1])
                     : cg_scaled_dot_product_attention(x[0], x[1], x[2], x[3], &out[1]);
        return out[0] && out[1];
    }
    if (check_ops_lapack(op, x, n, a, out, nout))
        return out[0] != NULL;
    if (nn_op(op, x, n, a, out) || cg_has_error())
        return out[0] != NULL;
    cg_set_error("check_ops: no op '%s'", op);
    return false;
}

/* ---------------------------------------------------------- comparisons */
static cg_tensor *get(int i, const char *kind, int j)
{
    char name[64];
    snprintf(name, sizeof name, "%d.%s%d", i, kind, j);
    return cg_st_has(g_f, name) ? cg_st_get(g_f, name) : NULL;
}

static void shape_str(const cg_tensor *t, char *buf, size_t n)
{
    int k = snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && k < (int)n; d++)
        k += snprintf(buf + k, n - (size_t)k, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (k < (int)n)
        snprintf(buf + k, n - (size_t)k, "]");
}

/* How close each op came, for -v: the largest |got - want| / tol over its
 * float outputs and over its gradients (0: bit for bit or no tolerance) */
typedef struct {
    const char *op;
    double out, grad;
} op_worst;
static op_worst g_worst[256];
static int g_nworst;
static double *g_ratio; /* where agree() records its worst ratio, or NULL */

static void note_worst(const char *op, double ratio, bool grad)
{
    int i = 0;
    while (i < g_nworst && strcmp(g_worst[i].op, op))
        i++;
    if (i == g_nworst && g_nworst < 256)
        g_worst[g_nworst++] = (op_worst){op, 0, 0};
    if (i < g_nworst) {
        double *w = grad ? &g_worst[i].grad : &g_worst[i].out;
        *w = ratio > *w ? ratio : *w;
    }
}

/* got against want (both any dtype): one line saying the first difference
 * into why, or "" when they agree. tol: per-element bounds (float32), or
 * NULL: bit for bit (any NaN for a NaN; -0 and +0 differ). */
static bool agree(const cg_tensor *got, const cg_tensor *want, const cg_tensor *tol, char *why,
                  size_t nw)
{
    char gs[96], ws[96];
    shape_str(got, gs, sizeof gs);
    shape_str(want, ws, sizeof ws);
    if (got->dtype != want->dtype || !cg_same_shape(got, want)) {
        snprintf(why, nw, "got %s %s, PyTorch %s %s", cg_dtype_name(got->dtype), gs,
                 cg_dtype_name(want->dtype), ws);
        return false;
    }
    int64_t n = cg_numel(want);
    cg_tensor *g = cg_k_contiguous(got), *w = cg_k_contiguous(want);
    cg_tensor *t = tol ? cg_k_contiguous(tol) : NULL;
    size_t es = cg_dtype_size(want->dtype);
    bool fl = cg_dtype_is_float(want->dtype), ok = g && w && (!tol || t);
    const char *gp = ok ? cg_data_ptr(g) : NULL, *wp = ok ? cg_data_ptr(w) : NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        double gv = cg_elem_get(want->dtype, gp + i * es),
               wv = cg_elem_get(want->dtype, wp + i * es);
        bool same;
        if (fl && (isnan(gv) || isnan(wv)))
            same = isnan(gv) && isnan(wv);
        else if (!t || isinf(wv) || isinf(gv))
            same = t ? gv == wv : !memcmp(gp + i * es, wp + i * es, es);
        else {
            same = fabs(gv - wv) <= cg_data(t)[i];
            if (g_ratio && cg_data(t)[i] > 0 && fabs(gv - wv) / cg_data(t)[i] > *g_ratio)
                *g_ratio = fabs(gv - wv) / cg_data(t)[i];
        }
        if (!same) {
            snprintf(why, nw, "element %lld of %s %s: got %.9g, PyTorch %.9g%s", (long long)i,
                     cg_dtype_name(want->dtype), ws, gv, wv,
                     t ? "" : (gv == wv ? " (sign of zero)" : ""));
            ok = false;
            cg_release_all(3, g, w, t);
            return false;
        }
    }
    if (!ok)
        snprintf(why, nw, "could not read the tensors: %s", cg_last_error());
    cg_release_all(3, g, w, t);
    return ok;
}

static bool all_zero(const cg_tensor *want)
{
    cg_tensor *w = cg_k_to(want, CG_F32);
    bool z = w != NULL;
    for (int64_t i = 0; z && i < cg_numel(w); i++)
        z = cg_data(w)[i] == 0;
    cg_release(w);
    return z;
}

/* ------------------------------------------------------------ one case */
static cg_tensor *apply_views(cg_tensor *b, const cJSON *views)
{
    cg_tensor *t = cg_retain(b);
    const cJSON *v;
    cJSON_ArrayForEach(v, views)
    {
        const char *k = cJSON_GetArrayItem(v, 0)->valuestring;
        cg_tensor *n = NULL;
        int p1 = cJSON_GetArrayItem(v, 1) ? (int)cJSON_GetArrayItem(v, 1)->valuedouble : 0;
        if (!strcmp(k, "T"))
            n = cg_transpose(t, p1, (int)cJSON_GetArrayItem(v, 2)->valuedouble);
        else if (!strcmp(k, "slice"))
            n = cg_slice(t, p1, (int64_t)cJSON_GetArrayItem(v, 2)->valuedouble,
                         (int64_t)cJSON_GetArrayItem(v, 3)->valuedouble,
                         (int64_t)cJSON_GetArrayItem(v, 4)->valuedouble);
        else if (!strcmp(k, "expand")) {
            int64_t sh[CG_MAX_DIMS];
            int nd = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetArrayItem(v, 1)) sh[nd++] = (int64_t)e->valuedouble;
            n = cg_expand(t, nd, sh);
        }
        cg_release(t);
        t = n;
    }
    return t;
}

static void describe(const cJSON *c, char *buf, size_t n)
{
    char *a = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "a"));
    char *in = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "in"));
    snprintf(buf, n, "args %s inputs %s", a ? a : "?", in ? in : "?");
    free(a);
    free(in);
}

static void fail(op_stats *s, const cJSON *c, const char *what)
{
    char d[1024];
    describe(c, d, sizeof d);
    if (*g_known) { /* a difference cgrad keeps on purpose (make_op_cases.py KNOWN) */
        s->known += !g_case_failed;
        g_case_failed = 1;
        if (g_verbose)
            printf("KNOWN case %d %s: %s\n    %s\n    (%s)\n", g_case, g_op, what, d, g_known);
        return;
    }
    printf("FAIL case %d %s: %s\n    %s\n", g_case, g_op, what, d);
    s->fails++;
}

/* The backward with PyTorch's upstream gradients and the bases' gradients
 * compared. */
static void check_grads(op_stats *s, const cJSON *c, cg_tensor **base, int nb, cg_tensor **out,
                        int nout)
{
    char why[512];
    int last = -1;
    for (int k = 0; k < nout; k++)
        if (out[k]->node || out[k]->requires_grad) /* a leaf: contiguous, dropout in eval */
            last = k;
    for (int k = 0; k <= last; k++) {
        bool diff = out[k]->node || out[k]->requires_grad;
        cg_tensor *u = diff ? get(g_case, "u", k) : NULL;
        if (diff && !cg_backward(out[k], u, k < last)) {
            snprintf(why, sizeof why, "backward of output %d refused: %s", k, cg_last_error());
            cg_release(u);
            return fail(s, c, why);
        }
        cg_release(u);
    }
    for (int j = 0; j < nb; j++) {
        if (!base[j]->requires_grad)
            continue;
        cg_tensor *want = get(g_case, "g", j), *tol = get(g_case, "h", j);
        const cg_tensor *got = cg_grad(base[j]);
        bool ok = true;
        why[0] = 0;
        if (!want)
            ok = !got || all_zero(got), snprintf(why, sizeof why, "a gradient PyTorch has not");
        else if (!got)
            ok = all_zero(want), snprintf(why, sizeof why, "no gradient, PyTorch's is not zero");
        else {
            double r = 0;
            g_ratio = &r;
            ok = agree(got, want, tol, why, sizeof why); /* sums: never exact */
            g_ratio = NULL;
            note_worst(g_op, r, true);
        }
        if (!ok) {
            char m[600];
            snprintf(m, sizeof m, "gradient of input %d: %s", j, why);
            fail(s, c, m);
        }
        cg_release_all(2, want, tol);
    }
}

static void check_outputs(op_stats *s, const cJSON *c, cg_tensor **base, int nb, cg_tensor **out,
                          int nout)
{
    int n = cJSON_GetObjectItemCaseSensitive(c, "n")->valueint;
    bool exact = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "exact"));
    char why[512], m[600];
    if (nout != n) {
        snprintf(m, sizeof m, "%d outputs, PyTorch %d", nout, n);
        return fail(s, c, m);
    }
    bool ok = true;
    for (int k = 0; k < n; k++) {
        cg_tensor *want = get(g_case, "o", k), *tol = exact ? NULL : get(g_case, "t", k);
        double r = 0;
        g_ratio = &r;
        const bool same = agree(out[k], want, tol, why, sizeof why);
        g_ratio = NULL;
        note_worst(g_op, r, false);
        if (!same) {
            snprintf(m, sizeof m, "output %d: %s", k, why);
            fail(s, c, m);
            ok = false;
        }
        cg_release_all(2, want, tol);
    }
    if (ok)
        check_grads(s, c, base, nb, out, nout);
}

static bool one_line_error(void)
{
    const char *e = cg_last_error();
    return cg_has_error() && e && *e && !strchr(e, '\n');
}

static void run_case(op_stats *s, const cJSON *c)
{
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(c, "in"), *in;
    const char *err = cJSON_GetObjectItemCaseSensitive(c, "err")->valuestring;
    const char *doc = cJSON_GetObjectItemCaseSensitive(c, "doc")->valuestring;
    cg_tensor *base[MAXIN] = {0}, *x[MAXIN] = {0}, *out[MAXOUT] = {0};
    int nb = 0, nout = 0;
    char m[700];
    s->cases++;
    cg_clear_error();
    cJSON_ArrayForEach(in, ins)
    {
        base[nb] = get(g_case, "b", nb);
        if (base[nb] && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(in, "g")))
            cg_requires_grad(base[nb], true);
        x[nb] = base[nb] ? apply_views(base[nb], cJSON_GetObjectItemCaseSensitive(in, "v")) : NULL;
        if (!x[nb]) {
            snprintf(m, sizeof m, "input %d not made: %s", nb, cg_last_error());
            fail(s, c, m);
            goto done;
        }
        nb++;
    }
    bool ran = run_op(g_op, x, nb, cJSON_GetObjectItemCaseSensitive(c, "a"), out, &nout);
    if (*err) {
        s->torch_refused++;
        if (ran) {
            snprintf(m, sizeof m, "accepted what PyTorch refuses (%s)", err);
            fail(s, c, m);
        } else if (!one_line_error())
            fail(s, c, "refused without one line of error");
        else if (g_verbose)
            printf("ok   case %d %s refused by both: %s\n", g_case, g_op, cg_last_error());
    } else if (!ran) {
        if (*doc && one_line_error()) {
            s->refused_doc++;
            if (g_verbose)
                printf("doc  case %d %s refused (%s): %s\n", g_case, g_op, doc, cg_last_error());
        } else {
            snprintf(m, sizeof m, "refused what PyTorch computes: %s",
                     cg_has_error() ? cg_last_error() : "(no message)");
            fail(s, c, m);
        }
    } else {
        if (*doc && g_verbose)
            printf("doc  case %d %s computed though documented as refused (%s)\n", g_case, g_op,
                   doc);
        s->accepted_doc += *doc != 0;
        check_outputs(s, c, base, nb, out, nout);
    }
done:
    for (int k = 0; k < MAXOUT; k++)
        cg_release(out[k]);
    for (int j = 0; j < MAXIN; j++)
        cg_release_all(2, x[j], base[j]);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return fprintf(stderr, "usage: check_ops FILE [-v] [OP]\n"), 2;
    g_verbose = argc > 2 && !strcmp(argv[2], "-v");
    const char *only = argc > 3 ? argv[3] : NULL;
    cg_st_file *f = cg_st_open(argv[1]);
    const char *meta = f ? cg_st_metadata(f, "cases") : NULL;
    cJSON *cases = meta ? cJSON_Parse(meta) : NULL;
    if (!cases)
        return fprintf(stderr, "check_ops: %s\n", f ? "no cases" : cg_last_error()), 1;
    g_f = f;
    op_stats total = {0};
    const cJSON *c;
    g_case = 0;
    cJSON_ArrayForEach(c, cases)
    {
        g_op = cJSON_GetObjectItemCaseSensitive(c, "op")->valuestring;
        g_known = cJSON_GetObjectItemCaseSensitive(c, "known")->valuestring;
        g_case_failed = 0;
        if (!only || !strcmp(only, g_op))
            run_case(&total, c);
        g_case++;
    }
    for (int i = 0; g_verbose && i < g_nworst; i++)
        printf("worst %-28s output %.3f of its tolerance, gradient %.3f\n", g_worst[i].op,
               g_worst[i].out, g_worst[i].grad);
    printf("check_ops: %d cases, %d differences; refused by PyTorch and cgrad: %d; refused as "
           "documented: %d; documented as refused but computed as PyTorch: %d; deliberate "
           "differences met (-v lists them): %d\n",
           total.cases, total.fails, total.torch_refused, total.refused_doc, total.accepted_doc,
           total.known);
    cJSON_Delete(cases);
    cg_st_close(f);
    return total.fails ? 1 : 0;
}
