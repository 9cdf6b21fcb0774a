/* parity_steps: three training steps of the zoo's models against PyTorch.
 *
 *   parity_steps FIXTURE.safetensors...
 *
 * Each fixture (tests/fixtures/parity_steps/make_steps.py) holds a model
 * config, a recipe (steps K, warmup, lr, weight decay, clip), the initial
 * parameters, one batch per step, and for fp32 and for bf16 autocast
 * (P = fp32, bf16): PyTorch's loss and pre-clip gradient norm of every step
 * (P.loss, P.norm), every gradient of step 1 (P.grad.<name>) and every
 * parameter after step K (P.stepK.<name>). The recipe is charlm train's:
 * AdamW betas (0.9, 0.99), eps 1e-8, weight decay on the 2-D parameters
 * only, the rate cg_lr_warmup_cosine(step - 1, K, warmup, lr, lr/10),
 * clipping at the global norm. Each fixture runs three times, through the
 * training loss cg_*_forward_loss unfused (loss_chunk 0), fused exact
 * (CG_LCE_EXACT) and fused in chunks of 4 rows.
 *
 * fp32: every element within 1e-5 + 1e-4 |torch| (parity.c's tolerance),
 * but k_proj.bias (its gradient is rounding noise: softmax is shift
 * invariant) after K steps only within K * lr of torch's.
 * bf16: both sides round differently (PyTorch keeps activations in bf16,
 * cgrad keeps them fp32), so each is held to its distance from PyTorch's
 * fp32: the loss within 1e-3 relative, and the relative error norm of each
 * gradient, ||ours - fp32|| / ||fp32||, at most 5 x PyTorch's own + 1e-2
 * (k_proj.bias apart): loose, because at these sizes one ReLU unit whose
 * pre-activation rounds to the other side of 0 in one of the two makes a
 * whole row of fc1's gradient differ (seen: 4 x PyTorch's error, all of it
 * in one of 16 rows), but an error of cgrad's bf16 path an order beyond
 * rounding (a wrong factor, a dropped term) stands out.
 * Exit status 0 iff every fixture passes; a malformed fixture is an error. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/charlm/charlm.h"
#include "models/seq2seq/seq2seq.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "optim/schedule.h"

typedef struct {
    int K, warmup;
    double lr, wd, clip, ls;
} recipe;

static int g_fail;

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static float *values(const cg_tensor *t)
{
    float *v = t ? malloc(sizeof(float) * (size_t)(cg_numel(t) + 1)) : NULL;
    if (v && !cg_copy_to(t, v)) {
        free(v);
        return NULL;
    }
    return v;
}

static cg_tensor *get(const cg_st_file *f, const char *fmt, const char *a, const char *b)
{
    char key[512];
    snprintf(key, sizeof key, fmt, a, b);
    return cg_st_get_f32(f, key);
}

static void fail(const char *what, const char *name, const char *detail)
{
    printf("  FAIL %s %s: %s\n", what, name, detail);
    g_fail++;
}

/* fp32: element by element; atol > 0 replaces the tolerance (k_proj.bias). */
static void cmp_fp32(const char *what, const char *name, const cg_tensor *ours,
                     const cg_tensor *exp, double atol)
{
    float *a = values(ours), *b = values(exp);
    char msg[160];
    if (!a || !b || cg_numel(ours) != cg_numel(exp)) {
        fail(what, name, "missing or of another size");
    } else {
        for (int64_t i = 0; i < cg_numel(exp); i++) {
            double d = fabs((double)a[i] - b[i]);
            if (!(d <= (atol > 0 ? atol : 1e-5 + 1e-4 * fabs(b[i])))) {
                snprintf(msg, sizeof msg, "element %lld: %.9g vs torch %.9g", (long long)i,
                         (double)a[i], (double)b[i]);
                fail(what, name, msg);
                break;
            }
        }
    }
    free(a);
    free(b);
}

/* ||x - y|| / ||y|| */
static double rel_norm(const float *x, const float *y, int64_t n)
{
    double d = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        d += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        s += (double)y[i] * y[i];
    }
    return sqrt(d / (s > 0 ? s : 1));
}

/* bf16: ours no farther from torch's fp32 than 5x torch's bf16 + 1e-2. */
static void cmp_bf16(const char *name, const cg_tensor *ours, const cg_tensor *tb,
                     const cg_tensor *tf)
{
    float *a = values(ours), *b = values(tb), *c = values(tf);
    char msg[160];
    int64_t n = tf ? cg_numel(tf) : 0;
    if (!a || !b || !c || cg_numel(ours) != n || cg_numel(tb) != n) {
        fail("bf16 grad", name, "missing or of another size");
    } else {
        double ro = rel_norm(a, c, n), rt = rel_norm(b, c, n);
        if (!(ro <= 5 * rt + 1e-2)) {
            snprintf(msg, sizeof msg, "|ours - fp32| / |fp32| = %.2e, torch's bf16 %.2e", ro, rt);
            fail("bf16 grad", name, msg);
        }
    }
    free(a);
    free(b);
    free(c);
}

static int64_t *ids(const cg_st_file *f, const char *k, int s, int64_t *B, int64_t *T)
{
    char key[64];
    snprintf(key, sizeof key, "input.%s.%d", k, s);
    cg_tensor *t = cg_st_get_i64(f, key);
    int64_t *v = t && t->ndim == 2 ? malloc(sizeof(int64_t) * (size_t)cg_numel(t)) : NULL;
    if (v) {
        memcpy(v, cg_data_i64(t), sizeof(int64_t) * (size_t)cg_numel(t));
        *B = t->shape[0];
        *T = t->shape[1];
    } else if (t) {
        cg_set_error("%s: %s is not 2-D", cg_st_path(f), key);
    }
    cg_release(t);
    return v;
}

/* The training loss of step s (its batch), or NULL + error. */
static cg_tensor *step_loss(const cg_st_file *f, cg_module *m, bool lm, int s, const recipe *r)
{
    int64_t B = 0, T = 0, S = 0, B2 = 0, T2 = 0, B3 = 0, T3 = 0;
    cg_tensor *loss = NULL;
    int64_t *a = ids(f, lm ? "x" : "src", s, &B, lm ? &T : &S);
    int64_t *b = ids(f, lm ? "targets" : "tgt_in", s, &B2, &T2);
    int64_t *c = lm ? NULL : ids(f, "tgt_out", s, &B3, &T3);
    if (lm && a && b && B2 == B && T2 == T)
        loss = cg_charlm_forward_loss((cg_charlm *)m, a, B, T, b, (float)r->ls, 1);
    else if (!lm && a && b && c && B2 == B && B3 == B && T3 == T2)
        loss = cg_seq2seq_forward_loss((cg_seq2seq *)m, a, B, S, b, T2, c, 1);
    else if (!cg_has_error())
        cg_set_error("%s: the batch of step %d has inconsistent shapes", cg_st_path(f), s);
    free(a);
    free(b);
    free(c);
    return loss;
}

/* A new model of the fixture's config with its initial parameters. */
static cg_module *model_of(cg_st_file *f, const char *config, bool lm, int64_t chunk)
{
    cg_module *m = NULL;
    if (lm) {
        cg_charlm_config c;
        c.loss_chunk = 0;
        if (cg_charlm_config_from_json(config, &c) && (c.loss_chunk = chunk, true))
            m = CG_MODULE(cg_charlm_new(&c, 0));
    } else {
        cg_seq2seq_config c;
        if (cg_seq2seq_config_from_json(config, &c) && (c.loss_chunk = chunk, true))
            m = CG_MODULE(cg_seq2seq_new(&c, 0));
    }
    const char *const extras[] = {"input.*", "fp32.*", "bf16.*"};
    cg_load_options lo = {.n_ignore = 3, .ignore = extras};
    if (m && !cg_module_load_ex(m, f, &lo)) {
        cg_module_free(m);
        m = NULL;
    }
    return m;
}

/* Step 1's gradients against the fixture's. */
static void check_grads(const cg_st_file *f, const cg_param_list *pl, bool bf16)
{
    for (int i = 0; i < pl->n; i++) {
        const char *name = pl->items[i].name;
        const cg_tensor *g = cg_grad(pl->items[i].tensor);
        cg_tensor *tf = get(f, "fp32.grad.%s%s", name, ""),
                  *tb = get(f, "bf16.grad.%s%s", name, "");
        bool kb = ends_with(name, "k_proj.bias");
        if (bf16 && !kb)
            cmp_bf16(name, g, tb, tf);
        else if (!bf16)
            cmp_fp32("fp32 grad", name, g, tf, kb ? 1e-6 : 0);
        cg_release_all(2, tf, tb);
    }
}

/* The K steps in one precision; false on a fixture error. */
static bool run_precision(cg_st_file *f, const char *config, bool lm, const recipe *r,
                          int64_t chunk, bool bf16)
{
    const char *P = bf16 ? "bf16" : "fp32";
    cg_module *m = model_of(f, config, lm, chunk);
    cg_param_list pl = {0};
    if (!m || !cg_module_params(m, &pl)) {
        cg_module_free(m);
        return false;
    }
    cg_optim_param *op = calloc((size_t)pl.n + 1, sizeof *op);
    cg_tensor **pt = calloc((size_t)pl.n + 1, sizeof *pt);
    for (int i = 0; op && pt && i < pl.n; i++) {
        pt[i] = pl.items[i].tensor;
        op[i] = (cg_optim_param){pl.items[i].name, pt[i], pt[i]->ndim >= 2 ? r->wd : 0};
    }
    cg_optim_config oc = cg_adamw_config(r->lr, 0.9, 0.99, 1e-8);
    cg_optim *opt = op && pt ? cg_optim_new(&oc, pl.n, op) : NULL;
    cg_tensor *eloss = get(f, "%s.loss%s", P, ""), *enorm = get(f, "%s.norm%s", P, "");
    bool ok = opt && eloss && enorm && cg_numel(eloss) == r->K && cg_numel(enorm) == r->K;
    char msg[160];
    for (int s = 1; ok && s <= r->K; s++) {
        cg_precision prev = cg_autocast_begin(bf16 ? CG_PRECISION_BF16 : CG_PRECISION_FP32);
        cg_optim_set_lr(opt, cg_lr_warmup_cosine(s - 1, r->K, r->warmup, r->lr, r->lr / 10));
        cg_optim_zero_grad(opt);
        cg_tensor *loss = step_loss(f, m, lm, s, r);
        ok = loss && cg_backward(loss, NULL, false);
        cg_autocast_end(prev);
        double l = loss ? cg_item(loss) : NAN, el = cg_data(eloss)[s - 1];
        double norm = cg_grad_norm(pl.n, pt), en = cg_data(enorm)[s - 1];
        cg_release(loss);
        double tol = bf16 ? 1e-3 : 1e-6;
        if (ok && (!(fabs(l - el) <= tol * fabs(el)) || !(fabs(norm - en) <= 10 * tol * en))) {
            snprintf(msg, sizeof msg, "step %d: loss %.9g vs torch %.9g, grad norm %.9g vs %.9g", s,
                     l, el, norm, en);
            fail(P, "loss", msg);
        }
        if (ok && s == 1)
            check_grads(f, &pl, bf16);
        ok = ok && (r->clip <= 0 || cg_optim_clip_grad_norm(opt, r->clip) >= 0) &&
             cg_optim_step(opt);
    }
    for (int i = 0; ok && !bf16 && i < pl.n; i++) {
        char key[64];
        snprintf(key, sizeof key, "fp32.step%d.%%s%%s", r->K);
        cg_tensor *t = get(f, key, pl.items[i].name, "");
        bool kb = ends_with(pl.items[i].name, "k_proj.bias");
        cmp_fp32("fp32 after the last step", pl.items[i].name, pt[i], t, kb ? r->K * r->lr : 0);
        ok = t != NULL;
        cg_release(t);
    }
    cg_release_all(2, eloss, enorm);
    cg_optim_free(opt);
    free(op);
    free(pt);
    cg_param_list_free(&pl);
    cg_module_free(m);
    return ok;
}

static bool parse_recipe(const char *path, const char *config, bool lm, recipe *r)
{
    cJSON *root = cJSON_Parse(config);
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(root, "recipe");
    const char *keys[] = {"steps", "warmup", "lr", "wd", "clip"};
    double v[5];
    bool ok = cJSON_IsObject(rc);
    for (int i = 0; ok && i < 5; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(rc, keys[i]);
        ok = cJSON_IsNumber(x);
        v[i] = ok ? x->valuedouble : 0;
    }
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(root, "label_smoothing");
    ok = ok && v[0] >= 1 && v[0] <= 100 && (!lm || cJSON_IsNumber(ls));
    if (ok)
        *r = (recipe){(int)v[0], (int)v[1], v[2], v[3], v[4], lm ? ls->valuedouble : 0};
    else
        cg_set_error("%s: config has no valid \"recipe\" (steps, warmup, lr, wd, clip)", path);
    cJSON_Delete(root);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURE.safetensors...\n", argv[0]);
        return 2;
    }
    int errors = 0;
    for (int a = 1; a < argc; a++) {
        cg_clear_error();
        cg_st_file *f = cg_st_open(argv[a]);
        const char *model = f ? cg_st_metadata(f, "model") : NULL;
        const char *config = f ? cg_st_metadata(f, "config") : NULL;
        bool lm = model && !strcmp(model, "charlm");
        recipe r;
        bool ok = model && config && (lm || !strcmp(model, "seq2seq")) &&
                  parse_recipe(argv[a], config, lm, &r);
        const int64_t chunks[] = {0, CG_LCE_EXACT, 4};
        for (int c = 0; ok && c < 3; c++) {
            int before = g_fail;
            for (int p = 0; ok && p < 2; p++)
                ok = run_precision(f, config, lm, &r, chunks[c], p == 1);
            printf("%s %s loss_chunk %lld: %d failure%s\n", g_fail > before ? "FAIL" : "PASS",
                   argv[a], (long long)chunks[c], g_fail - before, g_fail - before == 1 ? "" : "s");
        }
        if (!ok) {
            printf("ERROR %s: %s\n", argv[a], cg_has_error() ? cg_last_error() : "not a fixture");
            errors++;
        }
        cg_st_close(f);
    }
    printf("%s: %d failure%s, %d error%s\n", g_fail || errors ? "FAIL" : "PASS", g_fail,
           g_fail == 1 ? "" : "s", errors, errors == 1 ? "" : "s");
    return g_fail || errors ? 1 : 0;
}
