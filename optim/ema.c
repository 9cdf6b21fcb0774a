/* cgrad optim: the exponential moving average of a model's weights
 * (optim/ema.h). */
#include "optim/ema.h"

#include "autograd/autograd.h"
#include "core/shares.h"
#include "core/parse.h"
#include "core/vmath.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name;
    cg_tensor *p;        /* the parameter, retained */
    cg_tensor *avg;      /* its average, owned */
    uint64_t swapped_at; /* p's version once the average was swapped in */
} ema_slot;

struct cg_ema {
    int n;
    ema_slot *s;
    double decay;
    int64_t updates, total; /* total: elements of every parameter */
    bool swapped;
};

enum { EMA_CHUNK = 1 << 14, EMA_PAR_THRESHOLD = 1 << 16 };

static bool decay_ok(double decay, const char *fn)
{
    if (decay >= 0.0 && decay <= 1.0)
        return true;
    cg_set_error("%s: decay %g is outside [0, 1]", fn, decay);
    return false;
}

void cg_ema_free(cg_ema *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->n; i++) {
        free(e->s[i].name);
        cg_release_held(e->s[i].p);
        cg_release_held(e->s[i].avg);
    }
    free(e->s);
    free(e);
}

/* The next slot of e for parameter (name, p) (a module's parameters are
 * contiguous float32 leaves: cg_module_add_param checks them). */
static bool add_slot(cg_ema *e, const char *name, cg_tensor *p)
{
    ema_slot *s = &e->s[e->n];
    s->name = strdup(name);
    s->avg = s->name ? cg_k_clone(p) : NULL;
    if (!s->avg) {
        free(s->name);
        if (!cg_has_error())
            cg_set_error("ema_new: out of memory");
        return false;
    }
    cg_hold(s->avg);
    s->p = cg_retain_held(p);
    e->total += cg_numel(p);
    e->n++;
    return true;
}

cg_ema *cg_ema_new(const cg_module *m, double decay)
{
    if (!m) {
        cg_error_null_input("ema_new");
        return NULL;
    }
    if (!cg_module_live(m, "cg_ema_new") || !decay_ok(decay, "ema_new"))
        return NULL;
    cg_param_list l = {0};
    if (!cg_module_params(m, &l)) {
        cg_param_list_free(&l);
        return NULL;
    }
    cg_ema *e = calloc(1, sizeof *e);
    if (e)
        e->s = calloc((size_t)(l.n ? l.n : 1), sizeof *e->s);
    bool ok = e && e->s;
    if (!ok)
        cg_set_error("ema_new: out of memory");
    for (int i = 0; ok && i < l.n; i++)
        if (l.items[i].tensor->requires_grad) /* frozen ones are not trained: left out */
            ok = add_slot(e, l.items[i].name, l.items[i].tensor);
    if (ok && e->n == 0) {
        cg_set_error("ema_new: module %s has no trainable parameter", m->type);
        ok = false;
    }
    cg_param_list_free(&l);
    if (!ok) {
        cg_ema_free(e);
        return NULL;
    }
    e->decay = decay;
    return e;
}

/* ------------------------------------------------------------ updates */

EW_CLONES static void lerp_run(float *restrict avg, const float *restrict p, int64_t n, float w)
{
    if (w < 0.5f) {
        for (int64_t i = 0; i < n; i++)
            avg[i] = avg[i] + w * (p[i] - avg[i]);
    } else {
        const float omw = 1.0f - w;
        for (int64_t i = 0; i < n; i++)
            avg[i] = p[i] - (p[i] - avg[i]) * omw;
    }
}

EW_CLONES static void swap_run(float *restrict a, float *restrict b, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float t = a[i];
        a[i] = b[i];
        b[i] = t;
    }
}

typedef struct {
    const cg_ema *e;
    bool swap;
    float w;
} ema_pass;

/* Elements [lo, hi) of every parameter's run, concatenated in slot order
 * (one parallel region for the model, as the optimizer's update) */
static void ema_chunk(int64_t lo, int64_t hi, int thread, const void *ctx)
{
    const ema_pass *r = ctx;
    int64_t base = 0;
    for (int j = 0; j < r->e->n && base < hi; j++) {
        const ema_slot *s = &r->e->s[j];
        int64_t n = cg_numel(s->p);
        int64_t a = lo > base ? lo - base : 0, b = hi - base < n ? hi - base : n;
        base += n;
        if (a >= b)
            continue;
        if (r->swap)
            swap_run(cg_data(s->avg) + a, cg_data(s->p) + a, b - a);
        else
            lerp_run(cg_data(s->avg) + a, cg_data(s->p) + a, b - a, r->w);
    }
}

/* Every parameter still contiguous (an optimizer needs it too). */
static bool params_usable(const cg_ema *e, const char *fn)
{
    for (int i = 0; i < e->n; i++)
        if (!cg_is_contiguous(e->s[i].p) || cg_numel(e->s[i].p) != cg_numel(e->s[i].avg)) {
            cg_set_error("%s: parameter '%s' is no longer a contiguous tensor of its first "
                         "shape",
                         fn, e->s[i].name);
            return false;
        }
    return true;
}

static void run_pass(const cg_ema *e, bool swap)
{
    const ema_pass r = {e, swap, (float)(1.0 - e->decay)};
    cg_shares_run(e->total, EMA_CHUNK, cg_shares_team(e->total >= EMA_PAR_THRESHOLD), ema_chunk,
                  &r);
}

bool cg_ema_update(cg_ema *e)
{
    if (!e) {
        cg_error_null_input("ema_update");
        return false;
    }
    if (e->swapped) {
        cg_set_error("ema_update: the parameters hold the average (cg_ema_swap): swap back "
                     "before updating");
        return false;
    }
    if (!params_usable(e, "ema_update"))
        return false;
    run_pass(e, false);
    for (int i = 0; i < e->n; i++) /* cg_ema_average hands it out: announced once written */
        cg_tensor_modified(e->s[i].avg);
    e->updates++;
    return true;
}

bool cg_ema_swap(cg_ema *e)
{
    if (!e) {
        cg_error_null_input("ema_swap");
        return false;
    }
    if (!params_usable(e, "ema_swap"))
        return false;
    for (int i = 0; e->swapped && i < e->n; i++)
        if (cg_version(e->s[i].p) != e->s[i].swapped_at) {
            cg_set_error("ema_swap: parameter '%s' was written while it held the average (an "
                         "optimizer step, a load, a merge?): swapping back would undo that "
                         "(train after swapping back; cg_ema_free leaves the model as it is)",
                         e->s[i].name);
            return false;
        }
    run_pass(e, true);
    for (int i = 0; i < e->n; i++) { /* announced once written */
        cg_tensor_modified(e->s[i].p);
        cg_tensor_modified(e->s[i].avg);
    }
    e->swapped = !e->swapped;
    for (int i = 0; e->swapped && i < e->n; i++)
        e->s[i].swapped_at = cg_version(e->s[i].p);
    return true;
}

bool cg_ema_swapped(const cg_ema *e) { return e && e->swapped; }

bool cg_ema_set_decay(cg_ema *e, double decay)
{
    if (!e) {
        cg_error_null_input("ema_set_decay");
        return false;
    }
    if (!decay_ok(decay, "ema_set_decay"))
        return false;
    e->decay = decay;
    return true;
}

double cg_ema_decay(const cg_ema *e) { return e ? e->decay : NAN; }
int64_t cg_ema_updates(const cg_ema *e) { return e ? e->updates : -1; }
int cg_ema_count(const cg_ema *e) { return e ? e->n : -1; }

static const ema_slot *get_slot(const cg_ema *e, int i, const char *fn)
{
    if (e && i >= 0 && i < e->n)
        return &e->s[i];
    cg_set_error("%s: no parameter %d (the average has %d)", fn, i, e ? e->n : 0);
    return NULL;
}

const char *cg_ema_name(const cg_ema *e, int i)
{
    const ema_slot *s = get_slot(e, i, "ema_name");
    return s ? s->name : NULL;
}

const cg_tensor *cg_ema_average(const cg_ema *e, int i)
{
    const ema_slot *s = get_slot(e, i, "ema_average");
    return s ? (e->swapped ? s->p : s->avg) : NULL;
}

/* ---------------------------------------------------- checkpoint state */

static bool key(char *buf, size_t cap, const char *prefix, const char *name)
{
    if ((size_t)snprintf(buf, cap, "%s.%s", prefix, name) < cap)
        return true;
    cg_set_error("ema: the name '%s.%s' is too long", prefix, name);
    return false;
}

bool cg_ema_save(const cg_ema *e, cg_st_writer *w, const char *prefix)
{
    if (!e || !w) {
        cg_set_error("ema_save: %s is NULL", !e ? "the average" : "the writer");
        return false;
    }
    if (e->swapped) {
        cg_set_error("ema_save: the parameters hold the average (cg_ema_swap): the trained "
                     "weights would be in no file; swap back first");
        return false;
    }
    if (!prefix)
        prefix = "ema";
    char k[1024];
    for (int i = 0; i < e->n; i++)
        if (!key(k, sizeof k, prefix, e->s[i].name) || !cg_st_add_f32(w, k, cg_ema_average(e, i)))
            return false;
    char v[64], u[32];
    cg_snprintf_c(v, sizeof v, "%.17g", e->decay);
    snprintf(u, sizeof u, "%lld", (long long)e->updates);
    return key(k, sizeof k, prefix, "decay") && cg_st_set_metadata(w, k, v) &&
           key(k, sizeof k, prefix, "updates") && cg_st_set_metadata(w, k, u);
}

/* The metadata: decay in [0, 1] and a whole update count in [0, 2^53]. */
static bool load_meta(const cg_st_file *f, const char *prefix, double *decay, int64_t *updates)
{
    char k[1024], u[1024];
    double d, n;
    if (!key(k, sizeof k, prefix, "decay") || !key(u, sizeof u, prefix, "updates") ||
        !cg_st_metadata_number(f, k, &d) || !cg_st_metadata_number(f, u, &n))
        return false;
    if (!(d >= 0.0 && d <= 1.0)) {
        cg_set_error("'%s' = %g is outside [0, 1]", k, d);
        return false;
    }
    if (!(n >= 0.0 && n <= 9007199254740992.0 && n == floor(n))) {
        cg_set_error("'%s' = %g is not a whole number of updates", u, n);
        return false;
    }
    *decay = d;
    *updates = (int64_t)n;
    return true;
}

/* The file's average of slot s: its shape, finite. */
static cg_tensor *load_average(const cg_st_file *f, const char *prefix, const ema_slot *s)
{
    char k[1024];
    if (!key(k, sizeof k, prefix, s->name))
        return NULL;
    if (!cg_st_has(f, k)) {
        cg_set_error("no tensor '%s' (the average of parameter '%s')", k, s->name);
        return NULL;
    }
    cg_tensor *t = cg_st_get_f32(f, k);
    if (!t)
        return NULL;
    bool ok = cg_same_shape(t, s->avg);
    if (!ok) {
        char a[96], b[96];
        cg_set_error("'%s' is %s, its parameter %s", k, cg_shape_str(t, a, sizeof a),
                     cg_shape_str(s->avg, b, sizeof b));
    }
    const float *v = cg_data(t);
    for (int64_t i = 0; ok && i < cg_numel(t); i++)
        if (!isfinite(v[i])) {
            cg_set_error("'%s' holds %g at element %lld", k, (double)v[i], (long long)i);
            ok = false;
        }
    if (!ok) {
        cg_release(t);
        return NULL;
    }
    return t;
}

/* A <prefix>.* tensor that averages no parameter of e. */
static bool no_stray(const cg_ema *e, const cg_st_file *f, const char *prefix)
{
    size_t lp = strlen(prefix);
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *n = cg_st_name(f, i);
        if (strncmp(n, prefix, lp) != 0 || n[lp] != '.')
            continue;
        bool known = false;
        for (int j = 0; j < e->n && !known; j++)
            known = strcmp(n + lp + 1, e->s[j].name) == 0;
        if (!known) {
            cg_set_error("'%s' averages no parameter of this model", n);
            return false;
        }
    }
    return true;
}

bool cg_ema_load(cg_ema *e, const cg_st_file *f, const char *prefix)
{
    if (!e || !f) {
        cg_set_error("ema_load: %s is NULL", !e ? "the average" : "the file");
        return false;
    }
    if (!prefix)
        prefix = "ema";
    if (e->swapped) {
        cg_set_error("ema_load: the parameters hold the average (cg_ema_swap): swap back first");
        return false;
    }
    double decay;
    int64_t updates;
    cg_tensor **got = calloc((size_t)e->n, sizeof *got);
    if (!got)
        cg_set_error("out of memory");
    bool ok = got && load_meta(f, prefix, &decay, &updates) && no_stray(e, f, prefix);
    for (int i = 0; ok && i < e->n; i++)
        ok = (got[i] = load_average(f, prefix, &e->s[i])) != NULL;
    for (int i = 0; ok && i < e->n; i++) /* everything checked: now they change */
        ok = cg_k_copy_(e->s[i].avg, got[i]);
    for (int i = 0; got && i < e->n; i++)
        cg_release(got[i]);
    free(got);
    if (!ok) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        if (strstr(msg, cg_st_path(f))) /* the reader's messages name the file already */
            cg_set_error("ema_load: %s", msg);
        else
            cg_set_error("ema_load: %s: %s", cg_st_path(f), msg);
        return false;
    }
    e->decay = decay;
    e->updates = updates;
    return true;
}
