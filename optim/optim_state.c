/* cgrad optim: an optimizer's state across ranks and files: the sharded
 * state (ZeRO-1) and copies between layouts, and its save and load with
 * safetensors (checkpoints). The update rules are optim.c. */
#include "optim/optim.h"

#include "autograd/autograd.h"
#include "core/parse.h"
#include "optim/optim_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ sharded state */

bool cg_optim_is_sharded(const cg_optim *o) { return o && o->sharded; }

bool cg_optim_shard_range(const cg_optim *o, int i, int64_t *lo, int64_t *hi)
{
    const slot *s = cg_optim_get_slot(o, i, "optim_shard_range");
    if (!s)
        return false;
    *lo = s->lo;
    *hi = s->hi;
    return true;
}

int64_t cg_optim_state_bytes(const cg_optim *o)
{
    int64_t b = 0;
    for (int i = 0; o && i < o->n; i++)
        for (int k = 1; k < CG_OPTIM_NBUFS; k++)
            b += o->s[i].buf[k] && !cg_optim_buffer_is_scalar(k)
                     ? (int64_t)sizeof(float) * cg_numel(o->s[i].buf[k])
                     : 0;
    return b;
}

/* Copy the elements of [max(lo), min(hi)) of one buffer pair; a scalar
 * (cg_optim_buffer_is_scalar: whole in every shard) whole. */
static void copy_overlap(const slot *d, cg_tensor *db, const slot *s, const cg_tensor *sb)
{
    int64_t a = d->lo > s->lo ? d->lo : s->lo, b = d->hi < s->hi ? d->hi : s->hi;
    if (db && sb && db->ndim == 0) {
        cg_data(db)[0] = cg_data((cg_tensor *)sb)[0];
        cg_tensor_modified(db);
        return;
    }
    if (!db || !sb || a >= b)
        return;
    memcpy(cg_data(db) + (a - d->lo), cg_data((cg_tensor *)sb) + (a - s->lo),
           (size_t)(b - a) * sizeof(float));
    cg_tensor_modified(db);
}

bool cg_optim_copy_state(cg_optim *dst, const cg_optim *src)
{
    if (!dst || !src) {
        cg_set_error("optim_copy_state: %s is NULL", !dst ? "dst" : "src");
        return false;
    }
    bool same = dst->cfg.type == src->cfg.type && dst->n == src->n;
    for (int k = 1; same && k < CG_OPTIM_NBUFS; k++)
        same = cg_optim_keeps(&dst->cfg, k) == cg_optim_keeps(&src->cfg, k);
    if (!same) {
        cg_set_error("optim_copy_state: %s optimizer of %d parameters into %s of %d (the type, "
                     "momentum use (the buffers kept: momentum, centered, amsgrad) and count "
                     "must agree)",
                     type_names[src->cfg.type], src->n, type_names[dst->cfg.type], dst->n);
        return false;
    }
    for (int i = 0; i < dst->n; i++)
        if (strcmp(dst->s[i].name, src->s[i].name) != 0 ||
            !cg_same_shape(dst->s[i].p, src->s[i].p)) {
            char s1[96], s2[96];
            cg_set_error("optim_copy_state: parameter %d is '%s' %s in src, '%s' %s in dst", i,
                         src->s[i].name, cg_shape_str(src->s[i].p, s1, sizeof s1), dst->s[i].name,
                         cg_shape_str(dst->s[i].p, s2, sizeof s2));
            return false;
        }
    dst->cfg = src->cfg;
    dst->steps = src->steps;
    for (int i = 0; i < dst->n; i++) {
        slot *d = &dst->s[i];
        const slot *s = &src->s[i];
        d->step = s->step;
        d->lr_scale = s->lr_scale;
        for (int k = 1; k < CG_OPTIM_NBUFS; k++)
            copy_overlap(d, d->buf[k], s, s->buf[k]);
    }
    return true;
}

/* ------------------------------------------------- checkpoint state */

/* The largest step count a file may hold: 2^53, the last a double (the
 * bias correction's exponent, PyTorch's float step) counts exactly; far
 * beyond any run, and far enough from INT64_MAX that counting on from it
 * cannot overflow (a damaged INT64_MAX did, and made AdamW's weights NaN). */
#define MAX_STEPS (INT64_C(1) << 53)

static bool key(char *buf, size_t n, const char *prefix, const char *name, const char *suffix)
{
    int k = name ? snprintf(buf, n, "%s.%s.%s", prefix, name, suffix)
                 : snprintf(buf, n, "%s.%s", prefix, suffix);
    if (k < 0 || (size_t)k >= n) {
        cg_set_error("optim state: key '%s.%s.%s' is too long", prefix, name ? name : "", suffix);
        return false;
    }
    return true;
}

static bool set_meta(cg_st_writer *w, const char *prefix, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool set_meta(cg_st_writer *w, const char *prefix, const char *k, const char *fmt, ...)
{
    char name[256], value[64];
    if (!key(name, sizeof name, prefix, NULL, k))
        return false;
    va_list ap;
    va_start(ap, fmt);
    cg_vsnprintf_c(value, sizeof value, fmt, ap); /* "0.001" whatever the locale */
    va_end(ap);
    return cg_st_set_metadata(w, name, value);
}

typedef struct {
    cg_shard_gather g;
    int i, k;
} gathered_entry;

static bool fill_gathered(void *ctx, void *dst)
{
    const gathered_entry *e = ctx;
    return e->g.fn(e->g.ctx, e->i, e->k, dst);
}

bool cg_optim_add_gathered(cg_st_writer *w, const char *name, const cg_tensor *p,
                           const cg_shard_gather *g, int i, int k)
{
    gathered_entry *e = malloc(sizeof *e);
    if (!e) {
        cg_set_error("out of memory");
        return false;
    }
    *e = (gathered_entry){*g, i, k};
    return cg_st_add_filled(w, name, CG_F32, p->ndim, p->shape, fill_gathered, e, free);
}

/* One state buffer: whole, or gathered at the save (a scalar is whole in
 * every shard). */
static bool add_buffer(cg_st_writer *w, const char *name, const slot *s, cg_tensor *buf,
                       const cg_shard_gather *g, int i, int k)
{
    return g && !cg_optim_buffer_is_scalar(k) ? cg_optim_add_gathered(w, name, s->p, g, i, k)
                                              : cg_st_add_f32(w, name, buf);
}

bool cg_optim_save(const cg_optim *o, cg_st_writer *w, const char *prefix)
{
    return cg_optim_save_gathered(o, w, prefix, NULL);
}

bool cg_optim_save_gathered(const cg_optim *o, cg_st_writer *w, const char *prefix,
                            const cg_shard_gather *g)
{
    if (!o || !w) {
        cg_set_error("optim_save: %s is NULL", !o ? "optimizer" : "writer");
        return false;
    }
    if (!prefix)
        prefix = "optim";
    if (o->sharded && (!g || !g->fn)) {
        cg_set_error("optim_save: the optimizer holds a shard of the state only: gather the "
                     "shards into an unsharded optimizer first (cg_optim_copy_state), or save "
                     "through a gather (cg_optim_save_gathered)");
        return false;
    }
    if (!o->sharded)
        g = NULL;
    const cg_optim_config *c = &o->cfg;
    bool ok = set_meta(w, prefix, "type", "%s", type_names[c->type]) &&
              set_meta(w, prefix, "step", "%" PRId64, o->steps);
    for (int h = 0; ok && h < cg_optim_nhypers; h++) {
        const optim_hyper *y = &cg_optim_hypers[h];
        double v = cg_optim_hyper_value(c, h);
        if (!(y->types & (1u << c->type)) || (y->optional && v == 0))
            continue;
        ok = y->is_bool ? set_meta(w, prefix, y->key, "%s", v != 0 ? "true" : "false")
                        : set_meta(w, prefix, y->key, "%.17g", v);
    }
    const optim_buffer *rows;
    const int nrows = cg_optim_type_buffers(c, &rows);
    for (int i = 0; ok && i < o->n; i++) {
        const slot *s = &o->s[i];
        char name[1024];
        cg_tensor *step = cg_scalar_i64(s->step);
        ok = key(name, sizeof name, prefix, s->name, "step") && cg_st_add(w, name, step);
        cg_release(step);
        for (int r = 0; ok && r < nrows; r++) {
            const int k = rows[r].k;
            if (s->buf[k])
                ok = key(name, sizeof name, prefix, s->name, cg_optim_buffer_name(k)) &&
                     add_buffer(w, name, s, s->buf[k], g, i, k);
        }
        if (ok && s->lr_scale != 1.0) { /* at 1, a file as before scales existed */
            char value[64];
            cg_snprintf_c(value, sizeof value, "%.17g", s->lr_scale);
            ok = key(name, sizeof name, prefix, s->name, "lr_scale") &&
                 cg_st_set_metadata(w, name, value);
        }
    }
    return ok;
}

/* Metadata "<prefix>.<k>" of f, or NULL + error if absent. */
static const char *get_meta(const cg_st_file *f, const char *prefix, const char *k)
{
    char name[256];
    if (!key(name, sizeof name, prefix, NULL, k))
        return NULL;
    const char *v = cg_st_metadata(f, name);
    if (!v)
        cg_set_error("optim_load: %s: metadata '%s' is missing", cg_st_path(f), name);
    return v;
}

/* v as a finite number, as "%.17g" wrote it, subnormals included: strtod
 * reads one with ERANGE and a result neither 0 nor inf (a subnormal
 * learning rate or eps is one cg_optim_set_lr or a config takes). False
 * for anything else: no number, text after it, inf, nan, a value past
 * the doubles or one that underflows to 0 ("1e-999", never written). */
static bool parse_finite(const char *v, double *out)
{
    char *end;
    errno = 0;
    double d = cg_strtod_c(v, &end);
    if (end == v || *end || !isfinite(d) || (errno == ERANGE && d == 0))
        return false;
    *out = d;
    return true;
}

/* Hyper-parameter h (cg_optim_hypers) of c's type from f's metadata into
 * c (an optional one absent: 0/false); nothing for another type's. False +
 * error naming the entry if it is missing or not a value of its kind. */
static bool meta_hyper(const cg_st_file *f, const char *prefix, int h, cg_optim_config *c)
{
    const optim_hyper *y = &cg_optim_hypers[h];
    if (!(y->types & (1u << c->type)))
        return true;
    char name[256];
    if (!key(name, sizeof name, prefix, NULL, y->key))
        return false;
    const char *v = cg_st_metadata(f, name);
    char *field = (char *)c + y->off;
    if (!v && y->optional) {
        if (y->is_bool)
            *(bool *)field = false;
        else
            *(double *)field = 0.0;
        return true;
    }
    if (!v && !(v = get_meta(f, prefix, y->key)))
        return false;
    if (y->is_bool) {
        if (strcmp(v, "true") != 0 && strcmp(v, "false") != 0) {
            cg_set_error("optim_load: %s: metadata '%s' = '%s' is not true/false", cg_st_path(f),
                         name, v);
            return false;
        }
        *(bool *)field = strcmp(v, "true") == 0;
        return true;
    }
    double d;
    if (!parse_finite(v, &d)) {
        cg_set_error("optim_load: %s: metadata '%s' = '%s' is not a finite number", cg_st_path(f),
                     name, v);
        return false;
    }
    *(double *)field = d;
    return true;
}

/* The learning-rate scale of s's parameter in f: metadata
 * "<prefix>.<name>.lr_scale", 1 without it (a scale of 1 is not written,
 * and a file from before scales existed has none). False + error naming
 * the entry if it is not a number, or breaks the rule for rates at the
 * file's rate lr (cg_optim_rate_ok, as cg_optim_set_lr_scale would). */
static bool load_lr_scale(const cg_st_file *f, const char *prefix, double lr, const slot *s,
                          double *out)
{
    char name[1024], why[192];
    if (!key(name, sizeof name, prefix, s->name, "lr_scale"))
        return false;
    const char *v = cg_st_metadata(f, name);
    *out = 1.0;
    if (!v)
        return true;
    double d;
    if (!parse_finite(v, &d)) {
        cg_set_error("optim_load: %s: metadata '%s' = '%s' is not a learning-rate scale (a "
                     "finite number >= 0)",
                     cg_st_path(f), name, v);
        return false;
    }
    if (!cg_optim_rate_ok(lr, d, why, sizeof why)) {
        cg_set_error("optim_load: %s: metadata '%s' = '%s': %s", cg_st_path(f), name, v, why);
        return false;
    }
    *out = d == 0 ? 0.0 : d;
    return true;
}

/* The state of one parameter read from f into fresh buffers of ns. */
static bool load_slot(const cg_st_file *f, const char *prefix, const cg_optim_config *c,
                      const slot *s, slot *ns)
{
    char name[1024];
    cg_st_dtype dt;
    int nd;
    int64_t shape[CG_MAX_DIMS];
    const char *path = cg_st_path(f);
    if (!load_lr_scale(f, prefix, c->lr, s, &ns->lr_scale))
        return false;
    if (!key(name, sizeof name, prefix, s->name, "step"))
        return false;
    if (!cg_st_has(f, name)) {
        cg_set_error("optim_load: %s has no '%s' (no state for parameter '%s')", path, name,
                     s->name);
        return false;
    }
    if (!cg_st_info(f, name, &dt, &nd, shape))
        return false;
    if (dt != CG_ST_I64 || cg_numel_shape(nd, shape) != 1) {
        char b[96];
        cg_set_error("optim_load: %s: '%s' is %s %s, expected one I64", path, name,
                     cg_st_dtype_name(dt), cg_shape_str_n(nd, shape, b, sizeof b));
        return false;
    }
    cg_tensor *st = cg_st_get_i64(f, name);
    if (!st)
        return false;
    ns->step = cg_data_i64(st)[0];
    cg_release(st);
    if (ns->step < 0 || ns->step > MAX_STEPS) {
        cg_set_error("optim_load: %s: '%s' = %" PRId64 " is not a step count (0 to 2^53)", path,
                     name, ns->step);
        return false;
    }
    for (int k = 1; k < CG_OPTIM_NBUFS; k++) {
        if (!cg_optim_keeps(c, k))
            continue;
        const char *suffix = cg_optim_buffer_name(k);
        if (!key(name, sizeof name, prefix, s->name, suffix))
            return false;
        if (!cg_st_has(f, name)) {
            cg_set_error("optim_load: %s has no '%s' (%s state of parameter '%s')", path, name,
                         type_names[c->type], s->name);
            return false;
        }
        if (!cg_st_info(f, name, &dt, &nd, shape))
            return false;
        /* a BF16 or F16 moment widens to the parameter's float32, as
         * PyTorch's load_state_dict casts state to its parameter's dtype */
        const bool scalar = cg_optim_buffer_is_scalar(k);
        bool same = (dt == CG_ST_F32 || dt == CG_ST_BF16 || dt == CG_ST_F16) &&
                    nd == (scalar ? 0 : s->p->ndim);
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == s->p->shape[d];
        if (!same) {
            char b1[96], b2[96];
            if (scalar)
                cg_set_error("optim_load: %s: '%s' is %s %s, expected an F32 scalar (shape [])",
                             path, name, cg_st_dtype_name(dt),
                             cg_shape_str_n(nd, shape, b1, sizeof b1));
            else
                cg_set_error("optim_load: %s: '%s' is %s %s, but parameter '%s' is F32 %s", path,
                             name, cg_st_dtype_name(dt), cg_shape_str_n(nd, shape, b1, sizeof b1),
                             s->name, cg_shape_str(s->p, b2, sizeof b2));
            return false;
        }
        /* sharded (ZeRO): the owned run [lo, hi) alone, read from the file */
        const bool whole = scalar || (s->lo == 0 && s->hi == cg_numel(s->p));
        cg_tensor *t = scalar  ? cg_hold(cg_scalar(0))
                       : whole ? cg_optim_zeros_like_param(s->p)
                               : cg_optim_zeros_state(s);
        if (!t || !(whole ? cg_st_load_into(f, name, t) : cg_st_load_range(f, name, s->lo, t))) {
            cg_release_held(t);
            return false;
        }
        /* a damaged value fails here, naming its entry, not as a NaN
         * gradient of another parameter steps later (a second moment is
         * never negative); each rank checks the run it reads */
        const float *v = cg_data(t);
        for (int64_t e = 0, n = cg_numel(t); e < n; e++)
            if (!isfinite(v[e]) || (cg_optim_buffer_nonneg(k) && v[e] < 0)) {
                cg_set_error("optim_load: %s: '%s' holds %g at element %lld (%s)", path, name,
                             (double)v[e], (long long)(scalar ? 0 : s->lo + e),
                             isfinite(v[e]) ? "a second moment is at least 0" : "not finite");
                cg_release_held(t);
                return false;
            }
        ns->buf[k] = t;
    }
    return true;
}

/* Every "<prefix>.*" tensor of f must be the state of one of o's parameters. */
static bool check_no_strays(const cg_optim *o, const cg_st_file *f, const char *prefix,
                            const cg_optim_config *c)
{
    size_t lp = strlen(prefix);
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *t = cg_st_name(f, i);
        if (strncmp(t, prefix, lp) != 0 || t[lp] != '.')
            continue;
        const char *rest = t + lp + 1;
        size_t lr = strlen(rest);
        bool known = false;
        for (int k = 0; !known && k < CG_OPTIM_NBUFS; k++) {
            /* k 0: the step count; else the buffers c keeps */
            const char *suf = k ? cg_optim_buffer_name(k) : "step";
            size_t ls = strlen(suf);
            if (lr <= ls + 1 || rest[lr - ls - 1] != '.' || strcmp(rest + lr - ls, suf) != 0)
                continue;
            if (k && !cg_optim_keeps(c, k))
                continue;
            for (int j = 0; !known && j < o->n; j++)
                known = strlen(o->s[j].name) == lr - ls - 1 &&
                        strncmp(o->s[j].name, rest, lr - ls - 1) == 0;
        }
        if (!known) {
            cg_set_error("optim_load: %s: '%s' is not the %s state of any parameter of the "
                         "optimizer",
                         cg_st_path(f), t, type_names[c->type]);
            return false;
        }
    }
    return true;
}

/* Every "<prefix>.<name>.lr_scale" metadata entry of f must name one of o's
 * parameters (a scale for another parameter is another optimizer's). */
static bool check_no_stray_scales(const cg_optim *o, const cg_st_file *f, const char *prefix)
{
    static const char suffix[] = ".lr_scale";
    const size_t lp = strlen(prefix), ls = sizeof suffix - 1;
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        size_t lk = strlen(k);
        if (lk <= lp + 1 + ls || strncmp(k, prefix, lp) != 0 || k[lp] != '.' ||
            strcmp(k + lk - ls, suffix) != 0)
            continue;
        const char *pname = k + lp + 1;
        const size_t ln = lk - lp - 1 - ls;
        bool known = false;
        for (int j = 0; !known && j < o->n; j++)
            known = strlen(o->s[j].name) == ln && strncmp(o->s[j].name, pname, ln) == 0;
        if (!known) {
            cg_set_error("optim_load: %s: metadata '%s' is the learning-rate scale of no "
                         "parameter of the optimizer",
                         cg_st_path(f), k);
            return false;
        }
    }
    return true;
}

bool cg_optim_load(cg_optim *o, const cg_st_file *f, const char *prefix)
{
    if (!o || !f) {
        cg_set_error("optim_load: %s is NULL", !o ? "optimizer" : "file");
        return false;
    }
    if (!prefix)
        prefix = "optim";
    const char *path = cg_st_path(f);
    const char *type = get_meta(f, prefix, "type");
    if (!type) {
        cg_set_error("optim_load: %s holds no optimizer state under '%s' (metadata '%s.type' is "
                     "missing)",
                     path, prefix, prefix);
        return false;
    }
    cg_optim_config c = o->cfg;
    if (strcmp(type, type_names[c.type]) != 0) {
        cg_set_error("optim_load: %s holds %s state, the optimizer is %s", path, type,
                     type_names[c.type]);
        return false;
    }
    const char *step_s = get_meta(f, prefix, "step");
    if (!step_s)
        return false;
    char *end;
    errno = 0;
    long long steps = strtoll(step_s, &end, 10);
    if (end == step_s || *end || errno || steps < 0 || steps > MAX_STEPS) {
        cg_set_error("optim_load: %s: metadata '%s.step' = '%s' is not a step count (0 to 2^53)",
                     path, prefix, step_s);
        return false;
    }
    for (int h = 0; h < cg_optim_nhypers; h++)
        if (!meta_hyper(f, prefix, h, &c))
            return false;
    char what[512];
    snprintf(what, sizeof what, "optim_load: %s", path);
    if (!cg_optim_check_config(what, &c) || !check_no_strays(o, f, prefix, &c) ||
        !check_no_stray_scales(o, f, prefix))
        return false;

    slot *ns = calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *ns);
    if (!ns) {
        cg_set_error("optim_load: out of memory");
        return false;
    }
    bool ok = true;
    for (int i = 0; ok && i < o->n; i++)
        ok = load_slot(f, prefix, &c, &o->s[i], &ns[i]);
    if (ok) { /* commit: swap the new state in */
        for (int i = 0; i < o->n; i++) {
            slot *s = &o->s[i];
            for (int k = 1; k < CG_OPTIM_NBUFS; k++) {
                cg_release_held(s->buf[k]);
                s->buf[k] = ns[i].buf[k];
                ns[i].buf[k] = NULL;
            }
            s->step = ns[i].step;
            s->lr_scale = ns[i].lr_scale;
        }
        o->cfg = c;
        o->steps = steps;
    }
    for (int i = 0; i < o->n; i++)
        for (int k = 1; k < CG_OPTIM_NBUFS; k++)
            cg_release_held(ns[i].buf[k]);
    free(ns);
    return ok;
}
