/* cgrad optim: the exponential moving average of a model's weights
 * (optim/ema.h). */
#include "optim/ema.h"
#include "optim/optim_impl.h"

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
    cg_tensor *avg;      /* its average, owned: p's shape, or 1-D [hi - lo] when sharded */
    int64_t lo, hi;      /* the run of p's flat elements averaged (all of them unsharded) */
    int64_t numel;       /* p's when the average was made */
    uint64_t swapped_at; /* p's version once the average was swapped in */
} ema_slot;

struct cg_ema {
    int n;
    ema_slot *s;
    double decay;
    int64_t updates, total; /* total: elements averaged, over every parameter */
    bool swapped, sharded;
    bool bare;                /* cg_ema_load_params': no averages of its own */
    bool (*whole)(void *ctx); /* a sharded average's: the parameters made whole */
    void *ctx;
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

/* A copy of elements [lo, hi) of p: the whole tensor, or 1-D. */
static cg_tensor *copy_run(cg_tensor *p, int64_t lo, int64_t hi)
{
    if (lo == 0 && hi == cg_numel(p))
        return cg_k_clone(p);
    cg_tensor *r = cg_zeros(CG_SHAPE(hi - lo));
    if (r && hi > lo)
        memcpy(cg_data(r), cg_data(p) + lo, (size_t)(hi - lo) * sizeof(float));
    return r;
}

/* The next slot of e for elements [lo, hi) of parameter (name, p) (a
 * module's parameters are contiguous float32 leaves: cg_module_add_param
 * checks them). */
static bool add_slot(cg_ema *e, const char *name, cg_tensor *p, int64_t lo, int64_t hi)
{
    const unsigned long serial = cg_error_serial();
    ema_slot *s = &e->s[e->n];
    s->name = strdup(name);
    s->avg = s->name && !e->bare ? copy_run(p, lo, hi) : NULL;
    if (!s->name || (!e->bare && !s->avg)) {
        free(s->name);
        if (cg_error_serial() == serial)
            cg_set_error("ema_new: out of memory");
        return false;
    }
    if (s->avg)
        cg_hold(s->avg);
    s->p = cg_retain_held(p);
    s->lo = lo;
    s->hi = hi;
    s->numel = cg_numel(p);
    e->total += hi - lo;
    e->sharded |= lo != 0 || hi != cg_numel(p);
    e->n++;
    return true;
}

/* The run of p that like (NULL: none) updates: all of p without like. */
static bool like_range(const cg_optim *like, const char *name, const cg_tensor *p, int64_t *lo,
                       int64_t *hi)
{
    *lo = 0;
    *hi = cg_numel(p);
    if (!like)
        return true;
    for (int j = 0; j < cg_optim_count(like); j++)
        if (cg_optim_param_tensor(like, j) == p)
            return cg_optim_shard_range(like, j, lo, hi);
    cg_set_error("ema_new_sharded: parameter '%s' is not one the optimizer steps", name);
    return false;
}

static cg_ema *ema_build(const cg_module *m, double decay, const cg_optim *like, bool bare,
                         const char *fn)
{
    if (!m) {
        cg_error_null_input(fn);
        return NULL;
    }
    if (!cg_module_live(m, like ? "cg_ema_new_sharded" : "cg_ema_new") || !decay_ok(decay, fn))
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
    else
        e->bare = bare;
    for (int i = 0; ok && i < l.n; i++) {
        cg_tensor *p = l.items[i].tensor;
        int64_t lo, hi;
        if (p->requires_grad) /* frozen ones are not trained: left out */
            ok = like_range(like, l.items[i].name, p, &lo, &hi) &&
                 add_slot(e, l.items[i].name, p, lo, hi);
    }
    if (ok && e->n == 0) {
        cg_set_error("%s: module %s has no trainable parameter", fn, m->type);
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

cg_ema *cg_ema_new(const cg_module *m, double decay)
{
    return ema_build(m, decay, NULL, false, "ema_new");
}

cg_ema *cg_ema_new_sharded(const cg_module *m, double decay, const cg_optim *like,
                           bool (*whole)(void *ctx), void *ctx)
{
    if (!like) {
        cg_set_error("ema_new_sharded: the optimizer is NULL");
        return NULL;
    }
    if (!whole && cg_optim_is_sharded(like)) {
        cg_set_error("ema_new_sharded: a sharded average needs whole() to make the parameters "
                     "whole after a swap");
        return NULL;
    }
    cg_ema *e = ema_build(m, decay, like, false, "ema_new_sharded");
    if (e) {
        e->whole = whole;
        e->ctx = ctx;
    }
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
        int64_t n = s->hi - s->lo;
        int64_t a = lo > base ? lo - base : 0, b = hi - base < n ? hi - base : n;
        base += n;
        if (a >= b)
            continue;
        float *p = cg_data(s->p) + s->lo;
        if (r->swap)
            swap_run(cg_data(s->avg) + a, p + a, b - a);
        else
            lerp_run(cg_data(s->avg) + a, p + a, b - a, r->w);
    }
}

/* Every parameter still contiguous (an optimizer needs it too). */
static bool params_usable(const cg_ema *e, const char *fn)
{
    for (int i = 0; i < e->n; i++)
        if (!cg_is_contiguous(e->s[i].p) || cg_numel(e->s[i].p) != e->s[i].numel) {
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
    /* sharded: each rank exchanged its runs; the others' come from them */
    if (e->whole && !e->whole(e->ctx)) {
        cg_prefix_error("ema_swap: making the parameters whole: ");
        return false;
    }
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

cg_tensor *cg_ema_state(const cg_ema *e, int i)
{
    const ema_slot *s = get_slot(e, i, "ema_state");
    if (s && e->swapped) {
        cg_set_error("ema_state: the parameters hold the average (cg_ema_swap): swap back first");
        return NULL;
    }
    return s ? s->avg : NULL;
}

/* ------------------------------------------------------- sharded state */

bool cg_ema_is_sharded(const cg_ema *e) { return e && e->sharded; }

bool cg_ema_shard_range(const cg_ema *e, int i, int64_t *lo, int64_t *hi)
{
    const ema_slot *s = get_slot(e, i, "ema_shard_range");
    if (s) {
        *lo = s->lo;
        *hi = s->hi;
    }
    return s != NULL;
}

int64_t cg_ema_bytes(const cg_ema *e) { return e ? e->total * (int64_t)sizeof(float) : 0; }

bool cg_ema_copy(cg_ema *dst, const cg_ema *src)
{
    if (!dst || !src) {
        cg_set_error("ema_copy: %s is NULL", !dst ? "dst" : "src");
        return false;
    }
    if (dst->swapped || src->swapped) {
        cg_set_error("ema_copy: the parameters of %s hold the average (cg_ema_swap): swap back "
                     "first",
                     dst->swapped ? "dst" : "src");
        return false;
    }
    if (dst->n != src->n) {
        cg_set_error("ema_copy: an average of %d parameters into one of %d", src->n, dst->n);
        return false;
    }
    for (int i = 0; i < dst->n; i++)
        if (strcmp(dst->s[i].name, src->s[i].name) != 0 ||
            !cg_same_shape(dst->s[i].p, src->s[i].p)) {
            char a[96], b[96];
            cg_set_error("ema_copy: parameter %d is '%s' %s in src, '%s' %s in dst", i,
                         src->s[i].name, cg_shape_str(src->s[i].p, a, sizeof a), dst->s[i].name,
                         cg_shape_str(dst->s[i].p, b, sizeof b));
            return false;
        }
    for (int i = 0; i < dst->n; i++) { /* the runs both hold */
        const ema_slot *d = &dst->s[i], *s = &src->s[i];
        int64_t a = d->lo > s->lo ? d->lo : s->lo, b = d->hi < s->hi ? d->hi : s->hi;
        if (a >= b)
            continue;
        memcpy(cg_data(d->avg) + (a - d->lo), cg_data(s->avg) + (a - s->lo),
               (size_t)(b - a) * sizeof(float));
        cg_tensor_modified(d->avg);
    }
    dst->decay = src->decay;
    dst->updates = src->updates;
    return true;
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
    return cg_ema_save_gathered(e, w, prefix, NULL);
}

bool cg_ema_save_gathered(const cg_ema *e, cg_st_writer *w, const char *prefix,
                          const cg_shard_gather *g)
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
    if (e->sharded && (!g || !g->fn)) {
        cg_set_error("ema_save: a sharded average holds a run of each parameter: gather the "
                     "shards into a whole one first (cg_ema_copy), or save through a gather "
                     "(cg_ema_save_gathered)");
        return false;
    }
    if (!prefix)
        prefix = "ema";
    char k[1024];
    for (int i = 0; i < e->n; i++)
        if (!key(k, sizeof k, prefix, e->s[i].name) ||
            !(e->sharded ? cg_optim_add_gathered(w, k, e->s[i].p, g, i, 0)
                         : cg_st_add_f32(w, k, cg_ema_average(e, i))))
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

/* The file's average of slot s, its run [lo, hi) alone when sharded
 * (read from the file alone): a float tensor of the parameter's shape,
 * finite. */
static cg_tensor *load_average(const cg_st_file *f, const char *prefix, const ema_slot *s)
{
    char k[1024];
    if (!key(k, sizeof k, prefix, s->name))
        return NULL;
    if (!cg_st_has(f, k)) {
        cg_set_error("no tensor '%s' (the average of parameter '%s')", k, s->name);
        return NULL;
    }
    cg_st_dtype dt;
    int nd;
    int64_t shape[CG_MAX_DIMS];
    if (!cg_st_info(f, k, &dt, &nd, shape))
        return NULL;
    if (dt != CG_ST_F32 && dt != CG_ST_BF16 && dt != CG_ST_F16) {
        cg_set_error("'%s' is %s, not a float tensor", k, cg_st_dtype_name(dt));
        return NULL;
    }
    bool same = nd == s->p->ndim;
    for (int d = 0; same && d < nd; d++)
        same = shape[d] == s->p->shape[d];
    if (!same) {
        char a[96], b[96];
        cg_set_error("'%s' is %s, its parameter %s", k, cg_shape_str_n(nd, shape, a, sizeof a),
                     cg_shape_str(s->p, b, sizeof b));
        return NULL;
    }
    cg_tensor *t = s->lo == 0 && s->hi == cg_numel(s->p) ? cg_zeros_like(s->p)
                                                         : cg_zeros(CG_SHAPE(s->hi - s->lo));
    bool ok = t && cg_st_load_range(f, k, s->lo, t);
    const float *v = ok ? cg_data(t) : NULL;
    for (int64_t i = 0; ok && i < cg_numel(t); i++)
        if (!isfinite(v[i])) {
            cg_set_error("'%s' holds %g at element %lld", k, (double)v[i], (long long)(s->lo + i));
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

/* The file's average into each slot of e, every entry checked first (one
 * tensor at a time), nothing changed on failure: into the averages, or
 * (bare) straight into the parameters. */
static bool ema_read(cg_ema *e, const cg_st_file *f, const char *prefix)
{
    double decay;
    int64_t updates;
    bool ok = load_meta(f, prefix, &decay, &updates) && no_stray(e, f, prefix);
    for (int i = 0; ok && i < e->n; i++) { /* pass 1: shapes and values */
        cg_tensor *t = load_average(f, prefix, &e->s[i]);
        ok = t != NULL;
        cg_release(t);
    }
    char k[1024];
    for (int i = 0; ok && i < e->n; i++) { /* pass 2: everything checked, now they change */
        const ema_slot *s = &e->s[i];
        cg_tensor *dst = e->bare ? s->p : s->avg;
        ok = key(k, sizeof k, prefix, s->name) && cg_st_load_range(f, k, e->bare ? 0 : s->lo, dst);
        cg_tensor_modified(dst);
    }
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

bool cg_ema_load(cg_ema *e, const cg_st_file *f, const char *prefix)
{
    if (!e || !f) {
        cg_set_error("ema_load: %s is NULL", !e ? "the average" : "the file");
        return false;
    }
    if (e->swapped) {
        cg_set_error("ema_load: the parameters hold the average (cg_ema_swap): swap back first");
        return false;
    }
    return ema_read(e, f, prefix ? prefix : "ema");
}

bool cg_ema_load_params(const cg_module *m, const cg_st_file *f, const char *prefix,
                        int64_t *updates)
{
    if (!m || !f) {
        cg_error_null_input("ema_load_params");
        return false;
    }
    cg_ema *e = ema_build(m, 0, NULL, true, "ema_load_params");
    bool ok = e && ema_read(e, f, prefix ? prefix : "ema");
    if (ok && updates)
        *updates = e->updates;
    cg_ema_free(e);
    return ok;
}
