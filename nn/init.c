/* Parameter initialisation helpers. */
#include "nn/init.h"

#include <math.h>
#include <string.h>

bool cg_init_zeros_(cg_tensor *t) { return t && cg_fill_(t, 0.0f); }

bool cg_init_ones_(cg_tensor *t) { return t && cg_fill_(t, 1.0f); }

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
    if (!(std >= 0.0f)) {
        cg_set_error("init normal: std must be >= 0 (got %g)", (double)std);
        return false;
    }
    return cg_normal_(t, rng, mean, std);
}

bool cg_init_uniform_(cg_tensor *t, cg_rng *rng, float lo, float hi)
{
    if (!t || !need_rng("init uniform", rng)) {
        cg_error_null_input("cg_init_uniform_");
        return false;
    }
    if (!(lo <= hi)) {
        cg_set_error("init uniform: need lo <= hi (got %g, %g)", (double)lo, (double)hi);
        return false;
    }
    return cg_uniform_(t, rng, lo, hi);
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

bool cg_init_xavier_uniform_(cg_tensor *t, cg_rng *rng, float gain)
{
    double fi, fo;
    if (!t || !need_rng("init xavier_uniform", rng) || !fans("init xavier_uniform", t, &fi, &fo)) {
        cg_error_null_input("cg_init_xavier_uniform_");
        return false;
    }
    float a = (float)(gain * sqrt(6.0 / (fi + fo)));
    return cg_uniform_(t, rng, -a, a);
}

bool cg_init_xavier_normal_(cg_tensor *t, cg_rng *rng, float gain)
{
    double fi, fo;
    if (!t || !need_rng("init xavier_normal", rng) || !fans("init xavier_normal", t, &fi, &fo)) {
        cg_error_null_input("cg_init_xavier_normal_");
        return false;
    }
    return cg_normal_(t, rng, 0.0f, (float)(gain * sqrt(2.0 / (fi + fo))));
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
    init_src src = {.rng = rng, .mt = NULL};
    return init_tree(m, &src, std);
}

/* What PyTorch's constructors draw before init_params runs, in the same
 * depth-first order: nn.Linear's reset_parameters fills weight and bias
 * with uniform_ (one 32-bit draw per element), nn.Embedding's fills its
 * weight with normal_. The values are overwritten; only the generator's
 * position matters. */
static bool skip_construction(cg_module *m, cg_mt19937 *g)
{
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
    cg_mt19937 g;
    cg_mt19937_seed(&g, seed);
    init_src src = {.rng = NULL, .mt = &g};
    return skip_construction(m, &g) && init_tree(m, &src, std);
}
