/* Parameter initialisation helpers. */
#include "nn/init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"

bool cg_init_zeros_(cg_tensor *t) { return t && cg_fill_(t, 0.0f); }

bool cg_init_ones_(cg_tensor *t) { return t && cg_fill_(t, 1.0f); }

static cg_rng skip_rng; /* never drawn from: only its address is used */

cg_rng *cg_init_skip(void) { return &skip_rng; }

static bool need_rng(const char *op, cg_rng *rng)
{
    if (!rng)
        cg_set_error("%s: rng is NULL", op);
    return rng != NULL;
}

bool cg_init_normal_(cg_tensor *t, cg_rng *rng, float mean, float std)
{
    if (!t || !need_rng("init normal", rng)) {
        cg_error_null_input("cg_init_normal_");
        return false;
    }
    if (!(std >= 0.0f) || !isfinite(std) || !isfinite(mean)) {
        cg_set_error("init normal: need a finite mean and a finite std >= 0 (got %g, %g)",
                     (double)mean, (double)std);
        return false;
    }
    return rng == &skip_rng || cg_normal_(t, rng, mean, std);
}

bool cg_init_uniform_(cg_tensor *t, cg_rng *rng, float lo, float hi)
{
    if (!t || !need_rng("init uniform", rng)) {
        cg_error_null_input("cg_init_uniform_");
        return false;
    }
    if (!(lo <= hi) || !isfinite(lo) || !isfinite(hi)) {
        cg_set_error("init uniform: need finite lo <= hi (got %g, %g)", (double)lo, (double)hi);
        return false;
    }
    return rng == &skip_rng || cg_uniform_(t, rng, lo, hi);
}

/* torch.nn.init.orthogonal_: rows = shape[0], cols the rest; the draw
 * [rows, cols] from rng or (PyTorch's generator) mt */
static bool orthogonal(cg_tensor *t, float gain, cg_rng *rng, cg_mt19937 *mt)
{
    const char *op = "init orthogonal";
    if (!t || (!mt && !need_rng(op, rng)))
        return cg_error_null_input(op);
    if (t->ndim < 2 || !cg_dtype_is_float(t->dtype) || !isfinite(gain)) {
        cg_set_error("%s: Only tensors with 2 or more dimensions are supported, of a float "
                     "dtype, and a finite gain (got %d dims, %s, gain %g)",
                     op, t->ndim, cg_dtype_name(t->dtype), (double)gain);
        return false;
    }
    if (rng == &skip_rng || cg_numel(t) == 0)
        return true;
    const int64_t rows = t->shape[0], cols = cg_numel(t) / rows, m = rows > cols ? rows : cols;
    const int64_t k = rows < cols ? rows : cols;
    cg_tensor *flat = cg_empty(CG_SHAPE(rows, cols));
    bool ok =
        flat && (mt ? cg_normal_torch_(flat, mt, 0.0f, 1.0f) : cg_normal_(flat, rng, 0.0f, 1.0f));
    /* Q of the draw (of its transpose when rows < cols: m x k), each column
     * times the sign of R's diagonal */
    cg_tensor *src = ok ? (rows < cols ? cg_view_transpose(flat, 0, 1) : cg_retain(flat)) : NULL;
    cg_tensor *qr = src ? cg_k_linalg_qr(src, CG_QR_REDUCED, NULL) : NULL;
    if (qr) {
        const float *q = cg_data(qr), *r = q + m * k;
        char *base = (char *)t->storage->data;
        const size_t es = cg_dtype_size(t->dtype);
        for (int64_t e = 0; e < rows * cols; e++) { /* t's element e of its logical order */
            const int64_t i = e / cols, j = e % cols, qi = rows < cols ? j : i,
                          qj = rows < cols ? i : j;
            const float d = r[qj * k + qj] > 0 ? 1.0f : r[qj * k + qj] < 0 ? -1.0f : 0.0f;
            const float v = q[qi * k + qj] * d * gain;
            int64_t off = t->offset, rest = e;
            for (int dd = t->ndim - 1; dd >= 0; dd--) {
                off += rest % t->shape[dd] * t->strides[dd];
                rest /= t->shape[dd];
            }
            cg_elem_set(t->dtype, base + (size_t)off * es, v);
        }
        cg_tensor_modified(t);
    }
    ok = qr != NULL;
    cg_release_all(3, flat, src, qr);
    return ok;
}

bool cg_init_orthogonal_(cg_tensor *t, float gain, cg_rng *rng)
{
    return orthogonal(t, gain, rng, NULL);
}

bool cg_init_orthogonal_torch_(cg_tensor *t, float gain, cg_mt19937 *g)
{
    if (!g)
        return cg_error_null_arg("init orthogonal", "g");
    return orthogonal(t, gain, NULL, g);
}

static bool fans(const char *op, const cg_tensor *t, double *fan_in, double *fan_out)
{
    if (t->ndim < 2) {
        char b[96];
        cg_set_error("%s: needs a tensor with at least 2 dims to compute fans (got %s)", op,
                     cg_shape_str(t, b, sizeof b));
        return false;
    }
    double r = 1;
    for (int d = 2; d < t->ndim; d++)
        r *= (double)t->shape[d];
    *fan_in = (double)t->shape[1] * r;
    *fan_out = (double)t->shape[0] * r;
    if (*fan_in + *fan_out <= 0) {
        cg_set_error("%s: tensor has no elements", op);
        return false;
    }
    return true;
}

/* A gain that makes a distribution: torch.nn.init refuses the others at
 * its uniform_ or normal_. */
static bool gain_ok(const char *op, float gain)
{
    if (!(gain >= 0.0f) || !isfinite(gain))
        cg_set_error("%s: gain must be finite and >= 0 (got %g)", op, (double)gain);
    return gain >= 0.0f && isfinite(gain);
}

/* The bounds as torch.nn.init computes them in Python (doubles). */
static double xavier_bound(double fan_in, double fan_out, double gain)
{
    return sqrt(3.0) * (gain * sqrt(2.0 / (fan_in + fan_out)));
}

static double kaiming_bound(double fan_in, double a)
{
    return sqrt(3.0) * (sqrt(2.0 / (1 + pow(a, 2))) / sqrt(fan_in));
}

bool cg_init_xavier_uniform_(cg_tensor *t, cg_rng *rng, float gain)
{
    double fi, fo;
    if (!t || !need_rng("init xavier_uniform", rng) || !fans("init xavier_uniform", t, &fi, &fo) ||
        !gain_ok("init xavier_uniform", gain)) {
        cg_error_null_input("cg_init_xavier_uniform_");
        return false;
    }
    double a = xavier_bound(fi, fo, gain);
    return rng == &skip_rng || cg_uniform_(t, rng, (float)-a, (float)a);
}

bool cg_init_kaiming_uniform_(cg_tensor *t, cg_rng *rng, double a)
{
    double fi, fo;
    if (!t || !need_rng("init kaiming_uniform", rng) ||
        !fans("init kaiming_uniform", t, &fi, &fo)) {
        cg_error_null_input("cg_init_kaiming_uniform_");
        return false;
    }
    if (!(fi > 0) || !isfinite(a)) {
        cg_set_error("init kaiming_uniform: needs fan_in > 0 and a finite a (got %g, %g)", fi, a);
        return false;
    }
    double b = kaiming_bound(fi, a);
    return rng == &skip_rng || cg_uniform_(t, rng, (float)-b, (float)b);
}

bool cg_init_xavier_normal_(cg_tensor *t, cg_rng *rng, float gain)
{
    double fi, fo;
    if (!t || !need_rng("init xavier_normal", rng) || !fans("init xavier_normal", t, &fi, &fo) ||
        !gain_ok("init xavier_normal", gain)) {
        cg_error_null_input("cg_init_xavier_normal_");
        return false;
    }
    return rng == &skip_rng || cg_normal_(t, rng, 0.0f, (float)(gain * sqrt(2.0 / (fi + fo))));
}

/* The normal draw of init_tree: our counter-based stream or PyTorch's. */
typedef struct {
    cg_rng *rng;
    cg_mt19937 *mt;
} init_src;

static bool init_normal(cg_tensor *t, const init_src *src, float std)
{
    return src->mt ? cg_normal_torch_(t, src->mt, 0.0f, std)
                   : cg_init_normal_(t, src->rng, 0.0f, std);
}

/* U(-bound, bound) with the bound rounded to float as PyTorch's uniform_
 * takes it. */
static bool init_uniform(cg_tensor *t, const init_src *src, double bound)
{
    float lo = (float)-bound, hi = (float)bound;
    return src->mt ? cg_uniform_torch_(t, src->mt, lo, hi) : cg_init_uniform_(t, src->rng, lo, hi);
}

static bool init_tree(cg_module *m, const init_src *src, float std)
{
    bool lin = !strcmp(m->type, "Linear") || !strcmp(m->type, "Embedding");
    bool norm = !strcmp(m->type, "LayerNorm") || !strcmp(m->type, "RMSNorm");
    for (int i = 0; i < m->n_params; i++) {
        const char *name = m->params[i].name;
        cg_tensor *t = m->params[i].tensor;
        bool ok = true;
        if (!strcmp(name, "weight") && lin)
            ok = init_normal(t, src, std);
        else if (!strcmp(name, "weight") && norm)
            ok = cg_init_ones_(t);
        else if (!strcmp(name, "bias"))
            ok = cg_init_zeros_(t);
        if (!ok)
            return false;
    }
    for (int i = 0; i < m->n_children; i++)
        if (!init_tree(m->children[i].module, src, std))
            return false;
    return true;
}

static bool std_ok(float std)
{
    if (!(std >= 0.0f))
        cg_set_error("module init_params: std must be >= 0 (got %g)", (double)std);
    return std >= 0.0f;
}

bool cg_module_init_params(cg_module *m, cg_rng *rng, float std)
{
    if (!m || !need_rng("module init_params", rng) || !std_ok(std)) {
        cg_error_null_input("cg_module_init_params");
        return false;
    }
    if (!cg_module_live(m, "cg_module_init_params"))
        return false;
    init_src src = {.rng = rng, .mt = NULL};
    return init_tree(m, &src, std);
}

static bool reset_rnn(cg_module *m, const init_src *src);

/* nn.RNN, nn.GRU, nn.LSTM and their cells (nn/rnn.h) */
static bool is_recurrent(const char *type)
{
    static const char *const types[] = {"RNN", "GRU", "LSTM", "RNNCell", "GRUCell", "LSTMCell"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(type, types[i]))
            return true;
    return false;
}

/* What PyTorch's constructors draw before init_params runs, in the same
 * depth-first order: nn.Linear's reset_parameters fills weight and bias
 * with uniform_ (one 32-bit draw per element), nn.Embedding's fills its
 * weight with normal_: values init_params overwrites, so only the
 * generator's position matters. The recurrent modules' (nn.RNN, nn.GRU,
 * nn.LSTM, their cells) fill every parameter with uniform_, and
 * init_params leaves them (not a Linear, no parameter named bias): they
 * keep those values, here too. */
static bool skip_construction(cg_module *m, cg_mt19937 *g)
{
    if (is_recurrent(m->type))
        return reset_rnn(m, &(init_src){.rng = NULL, .mt = g}); /* no children */
    bool lin = !strcmp(m->type, "Linear"), emb = !strcmp(m->type, "Embedding");
    for (int i = 0; i < m->n_params; i++) {
        const char *name = m->params[i].name;
        cg_tensor *t = m->params[i].tensor;
        if (lin && (!strcmp(name, "weight") || !strcmp(name, "bias"))) {
            for (int64_t j = cg_numel(t); j > 0; j--)
                cg_mt19937_next(g);
        } else if (emb && !strcmp(name, "weight")) {
            if (!cg_normal_torch_(t, g, 0.0f, 1.0f))
                return false;
        }
    }
    for (int i = 0; i < m->n_children; i++)
        if (!skip_construction(m->children[i].module, g))
            return false;
    return true;
}

bool cg_module_init_params_torch(cg_module *m, uint64_t seed, float std)
{
    if (!m || !std_ok(std)) {
        cg_error_null_input("cg_module_init_params_torch");
        return false;
    }
    if (!cg_module_live(m, "cg_module_init_params_torch"))
        return false;
    cg_mt19937 g;
    cg_mt19937_seed(&g, seed);
    init_src src = {.rng = NULL, .mt = &g};
    return skip_construction(m, &g) && init_tree(m, &src, std);
}

/* ------------------------------------------- PyTorch's defaults */

static cg_tensor *param(const cg_module *m, const char *name)
{
    for (int i = 0; m && i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name))
            return m->params[i].tensor;
    return NULL;
}

static cg_module *child(const cg_module *m, const char *name)
{
    for (int i = 0; m && i < m->n_children; i++)
        if (!strcmp(m->children[i].name, name))
            return m->children[i].module;
    return NULL;
}

static bool reset_tree(cg_module *m, const init_src *src);

/* the modules reset_linear draws */
static bool linear_like(const char *type)
{
    static const char *const types[] = {"Linear",         "Conv1d",          "Conv2d",
                                        "Conv3d",         "ConvTranspose1d", "ConvTranspose2d",
                                        "ConvTranspose3d"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (!strcmp(type, types[i]))
            return true;
    return false;
}
/* nn.Linear.reset_parameters: kaiming_uniform_(weight, a=sqrt(5)), then the
 * bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)); nn.Conv1d's to nn.Conv3d's and
 * nn.ConvTranspose1d's to 3d's the same (_ConvNd.reset_parameters),
 * fan_in the weight's dim 1 (in / groups; the transposed: out / groups)
 * times the kernel's taps. */
static bool reset_linear(cg_module *m, const init_src *src)
{
    cg_tensor *w = param(m, "weight"), *b = param(m, "bias");
    if (!w || w->ndim < 2 || w->shape[0] < 1)
        return true;
    double fan_in = (double)(cg_numel(w) / w->shape[0]);
    return init_uniform(w, src, kaiming_bound(fan_in, sqrt(5.0))) &&
           (!b || init_uniform(b, src, 1.0 / sqrt(fan_in)));
}

/* nn.Bilinear.reset_parameters: weight, then bias, U(-1/sqrt(in1),
 * 1/sqrt(in1)), in1 the weight's dim 1 */
static bool reset_bilinear(cg_module *m, const init_src *src)
{
    cg_tensor *w = param(m, "weight"), *b = param(m, "bias");
    const double bound = 1.0 / sqrt((double)w->shape[1]);
    return init_uniform(w, src, bound) && (!b || init_uniform(b, src, bound));
}

/* nn.RNN, nn.GRU, nn.LSTM and their cells (reset_parameters): every
 * parameter U(-1/sqrt(H), 1/sqrt(H)) in registration order (PyTorch's), H
 * from weight_hh_l0 (a cell's weight_hh) [G H, H]. */
static bool reset_rnn(cg_module *m, const init_src *src)
{
    const cg_tensor *whh =
        param(m, "weight_hh_l0") ? param(m, "weight_hh_l0") : param(m, "weight_hh");
    if (!whh || whh->ndim != 2 || whh->shape[1] < 1)
        return true; /* not one of ours: left as it is */
    const double bound = 1.0 / sqrt((double)whh->shape[1]);
    bool ok = true;
    for (int i = 0; ok && i < m->n_params; i++)
        ok = init_uniform(m->params[i].tensor, src, bound);
    return ok;
}

/* nn.MultiheadAttention: out_proj (a Linear, built first), then
 * xavier_uniform_ of the packed [3d, d] in_proj_weight, drawn row after
 * row: q's rows, k's, v's; every bias 0. */
static bool reset_mha(cg_module *m, const init_src *src)
{
    static const char *const names[4] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    cg_module *p[4];
    for (int i = 0; i < 4; i++)
        if (!(p[i] = child(m, names[i])) || !param(p[i], "weight")) {
            cg_set_error("reset_parameters: MultiHeadAttention without '%s'", names[i]);
            return false;
        }
    const cg_tensor *wq = param(p[0], "weight");
    double d_in = (double)wq->shape[1], d_out = (double)wq->shape[0];
    bool ok = reset_linear(p[3], src);
    for (int i = 0; ok && i < 3; i++)
        ok = init_uniform(param(p[i], "weight"), src, xavier_bound(d_in, 3 * d_out, 1.0));
    for (int i = 0; ok && i < 4; i++)
        ok = !param(p[i], "bias") || cg_init_zeros_(param(p[i], "bias"));
    for (int i = 0; ok && i < 4; i++) /* adapters on the projections */
        for (int c = 0; ok && c < p[i]->n_children; c++)
            ok = reset_tree(p[i]->children[c].module, src);
    return ok;
}

/* nn.TransformerEncoder / Decoder: copies of one initialised layer. */
static bool reset_stack(cg_module *m, const init_src *src)
{
    cg_module *list = child(m, "layers");
    bool ok = true;
    for (int i = 0; ok && i < m->n_children; i++) {
        cg_module *c = m->children[i].module;
        if (c != list || !list->n_children) {
            ok = reset_tree(c, src);
            continue;
        }
        cg_module *first = list->children[0].module;
        cg_param_list a = {0}, b = {0};
        ok = reset_tree(first, src) && cg_module_params(first, &a);
        for (int j = 1; ok && j < list->n_children; j++) {
            cg_param_list_free(&b);
            ok = cg_module_params(list->children[j].module, &b);
            if (ok && b.n != a.n) {
                cg_set_error("reset_parameters: %s layer %d has %d parameters, layer 0 %d", m->type,
                             j, b.n, a.n);
                ok = false;
            }
            for (int k = 0; ok && k < a.n; k++)
                ok = cg_k_copy_(b.items[k].tensor, a.items[k].tensor);
        }
        cg_param_list_free(&a);
        cg_param_list_free(&b);
    }
    return ok;
}

static bool reset_tree(cg_module *m, const init_src *src)
{
    const char *t = m->type;
    if (!strcmp(t, "MultiHeadAttention"))
        return reset_mha(m, src);
    if (!strcmp(t, "TransformerEncoder") || !strcmp(t, "TransformerDecoder"))
        return reset_stack(m, src);
    bool ok = true;
    if (linear_like(t))
        ok = reset_linear(m, src);
    else if (is_recurrent(t))
        ok = reset_rnn(m, src);
    else if (!strcmp(t, "Bilinear") && param(m, "weight") && param(m, "weight")->ndim == 3)
        ok = reset_bilinear(m, src);
    else if (!strcmp(t, "Embedding") && param(m, "weight"))
        ok = init_normal(param(m, "weight"), src, 1.0f);
    else if (!strcmp(t, "LayerNorm") || !strcmp(t, "RMSNorm"))
        ok = (!param(m, "weight") || cg_init_ones_(param(m, "weight"))) &&
             (!param(m, "bias") || cg_init_zeros_(param(m, "bias")));
    for (int i = 0; ok && i < m->n_children; i++) {
        cg_module *c = m->children[i].module;
        bool lora_b = !strcmp(t, "Linear") && !strcmp(m->children[i].name, "lora_B");
        ok = lora_b ? cg_init_zeros_(param(c, "weight")) : reset_tree(c, src);
    }
    return ok;
}

bool cg_module_reset_parameters(cg_module *m, cg_rng *rng)
{
    if (!m || !need_rng("module reset_parameters", rng)) {
        cg_error_null_input("cg_module_reset_parameters");
        return false;
    }
    if (!cg_module_live(m, "cg_module_reset_parameters"))
        return false;
    init_src src = {.rng = rng, .mt = NULL};
    return reset_tree(m, &src);
}

bool cg_module_reset_parameters_torch(cg_module *m, cg_mt19937 *g)
{
    if (!m || !g) {
        if (!g && m)
            cg_set_error("module reset_parameters_torch: generator is NULL");
        cg_error_null_input("cg_module_reset_parameters_torch");
        return false;
    }
    if (!cg_module_live(m, "cg_module_reset_parameters_torch"))
        return false;
    init_src src = {.rng = NULL, .mt = g};
    return reset_tree(m, &src);
}
