/* parity: check the zoo models against fixtures from the PyTorch reference.
 *
 *   parity [-q] FIXTURE.safetensors...
 *
 * Each fixture (shared/reference/make_fixture.py) holds a model config and
 * optimizer settings (metadata "model" and "config"), the initial
 * parameters, an input batch, and PyTorch's logits, loss, every parameter
 * gradient (grad.<name>) and every parameter after one AdamW step
 * (step1.<name>). For each fixture this program builds the model from the
 * config, loads the parameters, checks that the parameter names and their
 * order equal the fixture's (models.py named_parameters()), runs forward,
 * loss, backward and one AdamW step, and compares everything.
 *
 * An element passes iff |ours - torch| <= 1e-5 + 1e-4 * |torch|. Two known
 * facts of the math get an absolute tolerance instead (and say so):
 *   - k_proj.bias gradients are zero in exact arithmetic (softmax is
 *     invariant to a shift of all scores of a row), so both sides hold float
 *     noise: compared with atol 1e-6 x the largest gradient of that
 *     attention's projection weights. AdamW turns noise into an update of
 *     up to lr, so step1 of k_proj.bias is checked to move by at most lr
 *     from p0 * (1 - lr*wd).
 *   - attention over exactly one key (CharLM with T=1, Seq2Seq with T=1 or
 *     S=1) has weights 1 whatever q and k are: q/k projection gradients are
 *     exactly zero, compared with the same absolute tolerance.
 * And one fact of AdamW: its first update is lr * g / (|g| + eps), so where
 * a gradient element nearly cancels (|g| <= 1e-5 x max |g| of the tensor)
 * a rounding-level difference in g moves step1 by up to lr. Those elements
 * (counted in the output) are checked against the AdamW formula applied to
 * our own gradient and against |p1 - p0 (1 - lr*wd)| <= lr instead.
 * Prints the worst absolute and relative error per tensor (-q: failures and
 * summaries only). Exit status 0 iff every fixture passes; a missing or
 * malformed fixture is an error (message, exit status 1). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/charlm/charlm.h"
#include "models/seq2seq/seq2seq.h"
#include "nn/nn.h"
#include "optim/optim.h"

#define RTOL 1e-4
#define ATOL 1e-5
#define ZERO_SCALE 1e-6 /* atol for exact-zero gradients, times the layer's grad scale */

static bool g_quiet;

/* Worst errors over a run, by kind of tensor. */
typedef struct {
    double abs, rel, ratio;
    char where[256];
} worst;

enum { K_LOGITS, K_LOSS, K_GRAD, K_STEP1, K_ZERO, K_COUNT };
static const char *const kind_name[K_COUNT] = {"logits", "loss", "grad", "step1",
                                               "exact-zero grads (atol)"};
static worst g_worst[K_COUNT];

typedef struct {
    const char *path;
    int failures;
    double worst_ratio;
} fixture_result;

/* ---------------------------------------------------------------- helpers */
static float *values(const cg_tensor *t)
{
    int64_t n = cg_numel(t);
    float *v = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (v && !cg_copy_to(t, v)) {
        free(v);
        return NULL;
    }
    if (!v)
        cg_set_error("parity: out of memory");
    return v;
}

static double max_abs(const cg_tensor *t)
{
    float *v = values(t);
    double m = 0;
    for (int64_t i = 0; v && i < cg_numel(t); i++)
        m = fmax(m, fabs((double)v[i]));
    free(v);
    return m;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Compare ours against expect element by element: pass iff every
 * |a-b| <= atol + rtol*|b|. Prints one line; returns pass/fail. A shape
 * mismatch is a failure. */
static bool compare(fixture_result *fr, int kind, const char *label, const cg_tensor *ours,
                    const cg_tensor *expect, double atol, double rtol, const char *note,
                    const uint8_t *skip)
{
    char s1[96], s2[96];
    if (!ours || !expect || cg_numel(ours) != cg_numel(expect) ||
        (ours->ndim && expect->ndim && !cg_same_shape(ours, expect))) {
        printf("  FAIL %-44s shape %s, expected %s\n", label,
               ours ? cg_shape_str(ours, s1, sizeof s1) : "(none)",
               expect ? cg_shape_str(expect, s2, sizeof s2) : "(none)");
        fr->failures++;
        return false;
    }
    float *a = values(ours), *b = values(expect);
    double wabs = 0, wrel = 0, ratio = 0;
    int64_t n = cg_numel(ours), bad = -1;
    for (int64_t i = 0; a && b && i < n; i++) {
        if (skip && skip[i])
            continue;
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(a[i]) != isnan(b[i]) || (isnan(d) && !isnan(b[i])))
            d = INFINITY;
        if (isnan(a[i]) && isnan(b[i]))
            d = 0;
        double r = d / fmax(fabs((double)b[i]), 1e-6); /* as selftest.py's rel() */
        double q = d / (atol + rtol * fabs((double)b[i]));
        wabs = fmax(wabs, d);
        wrel = fmax(wrel, r);
        if (q > ratio || isnan(q)) {
            ratio = isnan(q) ? INFINITY : q;
            if (q > 1)
                bad = i;
        }
    }
    bool ok = a && b && ratio <= 1.0;
    if (!ok || !g_quiet) {
        printf("  %s %-44s %-10s max abs %.2e  max rel %.2e", ok ? "ok  " : "FAIL", label,
               cg_shape_str(expect, s2, sizeof s2), wabs, wrel);
        if (bad >= 0)
            printf("  (element %lld: %.9g vs %.9g)", (long long)bad, (double)a[bad],
                   (double)b[bad]);
        if (note)
            printf("\n       %s", note);
        printf("\n");
    }
    free(a);
    free(b);
    worst *w = &g_worst[kind];
    if (ratio >= w->ratio) {
        snprintf(w->where, sizeof w->where, "%s: %s", fr->path, label);
        w->ratio = ratio;
    }
    w->abs = fmax(w->abs, wabs);
    if (atol == ATOL)
        w->rel = fmax(w->rel, wrel);
    fr->worst_ratio = fmax(fr->worst_ratio, ratio);
    if (!ok)
        fr->failures++;
    return ok;
}

/* Largest expected gradient over the q/k/v/o projection weights of the
 * attention module whose parameter prefix is `attn` ("blocks.0.attn."). */
static double attn_grad_scale(const cg_st_file *f, const char *attn)
{
    double s = 0;
    const char *proj[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
    for (int i = 0; i < 4; i++) {
        char key[512];
        snprintf(key, sizeof key, "grad.%s%s.weight", attn, proj[i]);
        cg_tensor *t = cg_st_get_f32(f, key);
        if (t)
            s = fmax(s, max_abs(t));
        cg_release(t);
    }
    cg_clear_error();
    return s;
}

/* The attention-module prefix of a parameter name ("blocks.0.attn." from
 * "blocks.0.attn.k_proj.bias"), written to buf; false if name is not a
 * q/k/v/o projection parameter. */
static bool attn_prefix(const char *name, char *buf, size_t n)
{
    const char *p = strstr(name, "_proj.");
    if (!p || p - name < 2 || p[-2] != '.')
        return false;
    size_t len = (size_t)(p - name) - 1; /* up to and including the '.' before q/k/v/o */
    if (len + 1 > n)
        return false;
    memcpy(buf, name, len);
    buf[len] = 0;
    return true;
}

/* Whether the q/k projections of this attention see exactly one key per
 * query (then their gradients are exactly zero). */
static bool single_key_attention(const char *model, const char *attn, int64_t T, int64_t S)
{
    if (!strcmp(model, "charlm"))
        return T == 1;
    if (strstr(attn, "decoder.") == attn && ends_with(attn, ".self_attn."))
        return T == 1;
    return S == 1; /* encoder self-attention and decoder cross-attention */
}

/* --------------------------------------------------------------- fixture */
typedef struct {
    const char *name; /* "AdamW" */
    double lr, beta1, beta2, eps, wd;
} optim_cfg;

static bool parse_optimizer(const char *path, const char *json, optim_cfg *o)
{
    cJSON *root = cJSON_Parse(json);
    const cJSON *opt = root ? cJSON_GetObjectItemCaseSensitive(root, "optimizer") : NULL;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(opt, "name");
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(opt, "lr");
    const cJSON *betas = cJSON_GetObjectItemCaseSensitive(opt, "betas");
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(opt, "eps");
    const cJSON *wd = cJSON_GetObjectItemCaseSensitive(opt, "weight_decay");
    bool ok = cJSON_IsString(name) && !strcmp(name->valuestring, "AdamW") && cJSON_IsNumber(lr) &&
              cJSON_IsArray(betas) && cJSON_GetArraySize(betas) == 2 &&
              cJSON_IsNumber(cJSON_GetArrayItem(betas, 0)) &&
              cJSON_IsNumber(cJSON_GetArrayItem(betas, 1)) && cJSON_IsNumber(eps) &&
              cJSON_IsNumber(wd);
    if (ok)
        *o = (optim_cfg){"AdamW",
                         lr->valuedouble,
                         cJSON_GetArrayItem(betas, 0)->valuedouble,
                         cJSON_GetArrayItem(betas, 1)->valuedouble,
                         eps->valuedouble,
                         wd->valuedouble};
    else
        cg_set_error("%s: config has no valid \"optimizer\" entry (expected {\"name\": "
                     "\"AdamW\", \"lr\", \"betas\": [b1, b2], \"eps\", \"weight_decay\"})",
                     path);
    cJSON_Delete(root);
    return ok;
}

static bool is_param_key(const char *k)
{
    return strncmp(k, "input.", 6) && strncmp(k, "expect.", 7) && strncmp(k, "grad.", 5) &&
           strncmp(k, "step1.", 6);
}

/* An I64 input of the expected rank 2; *B and *L receive its shape. */
static int64_t *get_ids(const cg_st_file *f, const char *name, int64_t *B, int64_t *L)
{
    cg_tensor *t = cg_st_get_i64(f, name);
    if (t && t->ndim != 2) {
        cg_set_error("%s: %s must be 2-D [B, T] (has %d dims)", cg_st_path(f), name, t->ndim);
        cg_release(t);
        return NULL;
    }
    int64_t *ids = t ? malloc((size_t)(cg_numel(t) ? cg_numel(t) : 1) * sizeof *ids) : NULL;
    if (ids) {
        memcpy(ids, cg_data_i64(t), (size_t)cg_numel(t) * sizeof *ids);
        *B = t->shape[0];
        *L = t->shape[1];
    }
    cg_release(t);
    return ids;
}

/* step1 of one parameter. all_noise (k_proj.bias): every element is
 * treated as below. Otherwise, elements whose torch gradient
 * is near rounding level (|g| <= 1e-5 x max |g| of the tensor: a cancellation,
 * zero in exact arithmetic up to rounding) are taken out of the comparison
 * with torch, because AdamW's update lr * g / (|g| + eps) turns a rounding
 * difference of g into up to lr there; they are checked instead against the
 * AdamW formula applied to our own gradient and against the bound
 * |p1 - p0 (1 - lr wd)| <= lr. False only on a fixture error. */
static bool check_step1(fixture_result *fr, const cg_st_file *f, const optim_cfg *oc,
                        const char *name, const cg_tensor *ours, const cg_tensor *expect,
                        bool all_noise)
{
    char key[512], label[512], note[512];
    snprintf(key, sizeof key, "grad.%s", name);
    cg_tensor *gt = cg_st_get_f32(f, key), *p0 = cg_st_get_f32(f, name);
    if (!gt || !p0 || cg_numel(gt) != cg_numel(ours) || cg_numel(p0) != cg_numel(ours)) {
        if (gt && p0)
            cg_set_error("%s: %s or %s has the wrong size", cg_st_path(f), key, name);
        cg_release_all(2, gt, p0);
        return false;
    }
    int64_t n = cg_numel(ours), nskip = 0;
    float *g = values(gt), *p = values(p0), *a = values(ours), *e = values(expect);
    const cg_tensor *og = cg_grad(ours);
    float *go = og ? values(og) : calloc((size_t)n + 1, sizeof(float));
    uint8_t *skip = calloc((size_t)n + 1, 1);
    double gmax = 0, wf = 0, wb = 0;
    bool ok = g && p && a && e && go && skip;
    for (int64_t i = 0; ok && i < n; i++)
        gmax = fmax(gmax, fabs((double)g[i]));
    for (int64_t i = 0; ok && i < n; i++) {
        /* exact zeros on both sides (dead ReLU units, one-key attention)
         * are compared directly */
        if (!all_noise && (!(fabs((double)g[i]) <= 1e-5 * gmax) || (g[i] == 0 && go[i] == 0)))
            continue;
        skip[i] = 1;
        nskip++;
        double base = (double)p[i] * (1.0 - oc->lr * oc->wd);
        double mine = base - oc->lr * go[i] / (fabs((double)go[i]) + oc->eps);
        wf = fmax(wf, fabs((double)a[i] - mine) / (ATOL + RTOL * fabs(mine)));
        wb = fmax(wb, fabs((double)a[i] - base));
        wb = fmax(wb, fabs((double)e[i] - base)); /* torch's obeys the bound too */
    }
    if (!ok) {
        cg_set_error("parity: out of memory");
    } else {
        snprintf(label, sizeof label, "step1.%s", name);
        double bound = oc->lr * (1 + 1e-5) + 1e-6;
        bool sok = wf <= 1.0 && wb <= bound;
        if (all_noise)
            snprintf(note, sizeof note,
                     "k_proj.bias gradient is rounding noise (AdamW turns it into up to lr): "
                     "checked apart: %s AdamW of our own gradient (ratio %.3f), "
                     "|p1 - p0(1-lr*wd)| max %.2e <= lr (ours and torch's)",
                     sok ? "match" : "MISMATCH with", wf, wb);
        else
            snprintf(note, sizeof note,
                     "%lld element%s with |grad| <= 1e-5 x max|grad| (near rounding level; "
                     "AdamW amplifies it up to lr) checked apart: %s AdamW of our own gradient "
                     "(ratio %.3f), |p1 - p0(1-lr*wd)| max %.2e <= lr",
                     (long long)nskip, nskip == 1 ? "" : "s", sok ? "match" : "MISMATCH with", wf,
                     wb);
        if (all_noise) {
            char shape[64];
            if (!g_quiet)
                printf("  %s %-44s %-10s\n       %s\n", sok ? "ok  " : "FAIL", label,
                       cg_shape_str(expect, shape, sizeof shape), note);
        } else {
            compare(fr, K_STEP1, label, ours, expect, ATOL, RTOL, nskip ? note : NULL, skip);
        }
        if (!sok) {
            printf("  FAIL %s: %s\n", label, note);
            fr->failures++;
        }
    }
    free(g);
    free(p);
    free(a);
    free(e);
    free(go);
    free(skip);
    cg_release_all(2, gt, p0);
    return ok;
}

/* The fixture's model and inputs. */
typedef struct {
    cg_charlm *lm;
    cg_seq2seq *s2s;
    cg_module *model;
    int64_t *x, *y, *src; /* charlm: x, targets; seq2seq: tgt_in, tgt_out, src */
    int64_t B, T, S;
} fixture_model;

static void fixture_model_free(fixture_model *m)
{
    cg_module_free(m->model);
    free(m->x);
    free(m->y);
    free(m->src);
}

/* A charlm of the fixture's config with its inputs; desc receives a
 * one-line description. */
static bool charlm_of(cg_st_file *f, const char *path, const char *config, fixture_model *m,
                      char *desc, size_t len)
{
    cg_charlm_config c;
    int64_t B2 = 0, T2 = 0;
    if (!cg_charlm_config_from_json(config, &c))
        return false;
    if (c.dropout != 0) {
        cg_set_error("%s: fixtures need dropout 0 (got %g)", path, (double)c.dropout);
        return false;
    }
    if (!(m->x = get_ids(f, "input.x", &m->B, &m->T)) ||
        !(m->y = get_ids(f, "input.targets", &B2, &T2)))
        return false;
    if (B2 != m->B || T2 != m->T) {
        cg_set_error("%s: input.targets shape differs from input.x", path);
        return false;
    }
    if (!(m->lm = cg_charlm_new(&c, 0)))
        return false;
    m->model = CG_MODULE(m->lm);
    snprintf(desc, len, "charlm %s %s %s V=%lld d=%lld H=%lld layers=%lld d_ff=%lld B=%lld T=%lld",
             c.norm_first ? "pre-norm" : "post-norm", cg_norm_kind_name(c.norm), cg_act_name(c.act),
             (long long)c.vocab, (long long)c.d, (long long)c.H, (long long)c.layers,
             (long long)c.d_ff, (long long)m->B, (long long)m->T);
    return true;
}

/* The same for a seq2seq fixture. */
static bool seq2seq_of(cg_st_file *f, const char *path, const char *config, fixture_model *m,
                       char *desc, size_t len)
{
    cg_seq2seq_config c;
    int64_t B2 = 0, T2 = 0;
    if (!cg_seq2seq_config_from_json(config, &c))
        return false;
    if (c.dropout != 0) {
        cg_set_error("%s: fixtures need dropout 0 (got %g)", path, (double)c.dropout);
        return false;
    }
    if (!(m->src = get_ids(f, "input.src", &m->B, &m->S)) ||
        !(m->x = get_ids(f, "input.tgt_in", &B2, &m->T)) ||
        !(m->y = get_ids(f, "input.tgt_out", &B2, &T2)))
        return false;
    if (B2 != m->B || T2 != m->T) {
        cg_set_error("%s: input.src/tgt_in/tgt_out batch shapes disagree", path);
        return false;
    }
    if (!(m->s2s = cg_seq2seq_new(&c, 0)))
        return false;
    m->model = CG_MODULE(m->s2s);
    snprintf(desc, len,
             "seq2seq %s %s %s V=%lld d=%lld H=%lld layers=%lld+%lld d_ff=%lld ls=%g "
             "B=%lld S=%lld T=%lld",
             c.norm_first ? "pre-norm" : "post-norm", cg_norm_kind_name(c.norm), cg_act_name(c.act),
             (long long)c.vocab, (long long)c.d, (long long)c.H, (long long)c.enc_layers,
             (long long)c.dec_layers, (long long)c.d_ff, (double)c.label_smoothing, (long long)m->B,
             (long long)m->S, (long long)m->T);
    return true;
}

/* Parameter names and order must be models.py's. */
static void check_param_names(fixture_result *fr, cg_st_file *f, const cg_param_list *params,
                              cg_module *model)
{
    int nf = 0;
    bool same = true;
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *k = cg_st_name(f, i);
        if (!is_param_key(k))
            continue;
        if (nf >= params->n || strcmp(params->items[nf].name, k)) {
            if (same)
                printf("  FAIL parameter %d: fixture has '%s', model has '%s'\n", nf, k,
                       nf < params->n ? params->items[nf].name : "(nothing)");
            same = false;
        }
        nf++;
    }
    if (nf != params->n || !same) {
        printf("  FAIL parameter names: fixture has %d, model has %d\n", nf, params->n);
        fr->failures++;
    } else if (!g_quiet) {
        printf("  ok   parameter names and order: %d tensors, %lld floats, as models.py\n",
               params->n, (long long)cg_module_num_params(model));
    }
}

/* Every parameter's gradient against grad.<name>. False + error when the
 * fixture lacks one. */
static bool check_grads(fixture_result *fr, cg_st_file *f, const cg_param_list *params,
                        const char *model_name, const fixture_model *m)
{
    for (int i = 0; i < params->n; i++) {
        const char *name = params->items[i].name;
        char key[512], label[512], note[512], attn[256];
        snprintf(key, sizeof key, "grad.%s", name);
        cg_tensor *t = cg_st_get_f32(f, key);
        if (!t)
            return false;
        const cg_tensor *g = cg_grad(params->items[i].tensor);
        cg_tensor *zero = g ? NULL : cg_zeros_like(params->items[i].tensor);
        snprintf(label, sizeof label, "grad.%s", name);
        bool is_attn = attn_prefix(name, attn, sizeof attn);
        bool kb = is_attn && ends_with(name, "k_proj.bias");
        bool qk = is_attn && (strstr(name, ".q_proj.") || strstr(name, ".k_proj.")) &&
                  single_key_attention(model_name, attn, m->T, m->S);
        if (kb || qk) {
            double scale = attn_grad_scale(f, attn);
            double atol = ZERO_SCALE * fmax(scale, 1e-3);
            snprintf(note, sizeof note,
                     "%s: zero in exact arithmetic, compared with atol %.1e "
                     "(1e-6 x max(1e-3, max |grad| of %s*_proj.weight = %.1e))",
                     qk ? "one key per query, q/k gradient"
                        : "k_proj.bias (softmax shift invariance)",
                     atol, attn, scale);
            compare(fr, K_ZERO, label, g ? g : zero, t, atol, 0.0, note, NULL);
        } else {
            compare(fr, K_GRAD, label, g ? g : zero, t, ATOL, RTOL, NULL, NULL);
        }
        cg_release_all(2, t, zero);
    }
    return true;
}

/* One AdamW step, weight decay on every parameter, against step1.<name>. */
static bool check_adamw_step(fixture_result *fr, cg_st_file *f, const optim_cfg *oc,
                             const cg_param_list *params)
{
    cg_optim *opt = NULL;
    cg_optim_param *op = calloc((size_t)params->n + 1, sizeof *op);
    bool ok = op != NULL;
    if (!ok)
        cg_set_error("parity: out of memory");
    for (int i = 0; ok && i < params->n; i++)
        op[i] = (cg_optim_param){params->items[i].name, params->items[i].tensor, oc->wd};
    cg_optim_config ocfg = cg_adamw_config(oc->lr, oc->beta1, oc->beta2, oc->eps);
    ok = ok && (opt = cg_optim_new(&ocfg, params->n, op)) && cg_optim_step(opt);
    for (int i = 0; ok && i < params->n; i++) {
        const char *name = params->items[i].name;
        char key[512], attn[256];
        snprintf(key, sizeof key, "step1.%s", name);
        cg_tensor *t = cg_st_get_f32(f, key);
        bool kb = attn_prefix(name, attn, sizeof attn) && ends_with(name, "k_proj.bias");
        ok = t && check_step1(fr, f, oc, name, params->items[i].tensor, t, kb);
        cg_release(t);
    }
    cg_optim_free(opt);
    free(op);
    return ok;
}

/* Runs one fixture. Returns 0 pass, 1 fail, -1 error (message recorded). */
static int run_fixture(const char *path)
{
    fixture_result fr = {.path = path};
    int rc = -1;
    fixture_model m = {0};
    cg_param_list params = {0};
    cg_tensor *logits = NULL, *loss = NULL, *t = NULL;

    cg_clear_error();
    cg_st_file *f = cg_st_open(path);
    if (!f)
        return -1;
    const char *model_name = cg_st_metadata(f, "model");
    const char *config = cg_st_metadata(f, "config");
    if (!model_name || !config) {
        cg_set_error("%s: not a parity fixture (metadata \"model\" and \"config\" missing)", path);
        goto out;
    }
    optim_cfg oc;
    if (!parse_optimizer(path, config, &oc))
        goto out;
    char desc[256];
    if (!strcmp(model_name, "charlm")) {
        if (!charlm_of(f, path, config, &m, desc, sizeof desc))
            goto out;
    } else if (!strcmp(model_name, "seq2seq")) {
        if (!seq2seq_of(f, path, config, &m, desc, sizeof desc))
            goto out;
    } else {
        cg_set_error("%s: unknown model \"%s\" (expected charlm or seq2seq)", path, model_name);
        goto out;
    }
    printf("%s: %s\n", path, desc);

    if (!cg_module_params(m.model, &params))
        goto out;
    check_param_names(&fr, f, &params, m.model);
    /* a fixture holds, beside the parameters, the inputs, the expected
     * results and gradients, and the parameters after one step */
    const char *const fixture_extras[] = {"input.*", "expect.*", "grad.*", "step1.*"};
    cg_load_options lo = {.n_ignore = 4, .ignore = fixture_extras};
    if (!cg_module_load_ex(m.model, f, &lo))
        goto out;

    /* forward, loss */
    logits = m.lm ? cg_charlm_forward(m.lm, m.x, m.B, m.T)
                  : cg_seq2seq_forward(m.s2s, m.src, m.B, m.S, m.x, m.T);
    loss = m.lm ? cg_charlm_loss(m.lm, logits, m.y) : cg_seq2seq_loss(m.s2s, logits, m.y);
    if (!loss)
        goto out;
    if (!(t = cg_st_get_f32(f, "expect.logits")))
        goto out;
    compare(&fr, K_LOGITS, "logits", logits, t, ATOL, RTOL, NULL, NULL);
    cg_release(t);
    if (!(t = cg_st_get_f32(f, "expect.loss")))
        goto out;
    compare(&fr, K_LOSS, "loss", loss, t, ATOL, RTOL, NULL, NULL);
    cg_release(t);
    t = NULL;

    if (!cg_backward(loss, NULL, false) || !check_grads(&fr, f, &params, model_name, &m) ||
        !check_adamw_step(&fr, f, &oc, &params))
        goto out;
    rc = fr.failures ? 1 : 0;
    printf("%s %s: %d failure%s, worst error %.3g of the tolerance\n", rc ? "FAIL" : "PASS", path,
           fr.failures, fr.failures == 1 ? "" : "s", fr.worst_ratio);

out:
    if (rc < 0 && !cg_has_error())
        cg_set_error("%s: failed", path);
    cg_release_all(3, logits, loss, t);
    cg_param_list_free(&params);
    fixture_model_free(&m);
    cg_st_close(f);
    return rc;
}

int main(int argc, char **argv)
{
    int first = 1;
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: %s [-q] FIXTURE.safetensors...\n"
               "Compare the zoo models with PyTorch fixtures (logits, loss, gradients, one "
               "AdamW step).\n"
               "Pass iff every element has |ours - torch| <= 1e-5 + 1e-4*|torch|.\n"
               "  -q  print only failures and one summary line per fixture\n",
               argv[0]);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "-q")) {
        g_quiet = true;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [-q] FIXTURE.safetensors...\n", argv[0]);
        return 2;
    }
    int failed = 0, errors = 0;
    for (int i = first; i < argc; i++) {
        int rc = run_fixture(argv[i]);
        if (rc < 0) {
            fprintf(stderr, "parity: error: %s\n", cg_last_error());
            printf("ERROR %s: %s\n", argv[i], cg_last_error());
            errors++;
        } else if (rc > 0) {
            failed++;
        }
        fflush(stdout);
    }
    printf("\nworst errors over %d fixture%s (ratio = error / tolerance, pass iff <= 1):\n",
           argc - first, argc - first == 1 ? "" : "s");
    for (int k = 0; k < K_COUNT; k++) {
        if (!g_worst[k].where[0])
            continue;
        printf("  %-24s max abs %.2e", kind_name[k], g_worst[k].abs);
        if (k != K_ZERO)
            printf("  max rel %.2e", g_worst[k].rel);
        printf("  worst ratio %.3f at %s\n", g_worst[k].ratio, g_worst[k].where);
    }
    printf("  (rel = |ours - torch| / max(|torch|, 1e-6))\n");
    printf("%s: %d passed, %d failed, %d error%s\n", failed || errors ? "FAIL" : "PASS",
           argc - first - failed - errors, failed, errors, errors == 1 ? "" : "s");
    return failed || errors ? 1 : 0;
}
