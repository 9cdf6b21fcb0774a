/* cgrad optim: SGD, Adam, AdamW and their checkpoint state.
 *
 * Every update is a flat loop over one parameter's memory with PyTorch's
 * single-tensor operation order (torch/optim/{sgd,adam,adamw}.py): scalar
 * factors are computed in double, as Python does, and rounded to float once,
 * as ATen does when it passes a Python number to a float32 kernel. */
#include "optim/optim.h"

#include "autograd/autograd.h"
#include "core/lifetime.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements above which one parameter's update runs on OpenMP threads. Each
 * element is written by one thread, so the result does not depend on it. */
#define OPTIM_PAR_THRESHOLD 32768

typedef struct {
    char *name;
    cg_tensor *p; /* retained */
    double wd;
    int64_t step;    /* updates this parameter received */
    int64_t lo, hi;  /* the elements it owns (cg_optim_new_sharded); [0, numel) */
    cg_tensor *buf1; /* exp_avg, or SGD's momentum buffer (NULL if unused) */
    cg_tensor *buf2; /* exp_avg_sq (NULL if unused) */
} slot;

/* An optimizer's first word while it lives; a freed one in the checked
 * mode (CG_DEBUG=1) is kept with OPTIM_FREED, so a second free is named. */
#define OPTIM_TAG 0x6f706763u
#define OPTIM_FREED 0x6f646564u

struct cg_optim {
    uint32_t tag;
    cg_optim_config cfg;
    int n;
    slot *s;
    int64_t steps;
    bool sharded; /* some slot owns less than its whole parameter */
};

static const char *const type_names[CG_OPTIM_NTYPES] = {"sgd", "adam", "adamw"};

const char *cg_optim_type_name(cg_optim_type t)
{
    return ((int)t >= 0 && (int)t < CG_OPTIM_NTYPES) ? type_names[t] : "?";
}

cg_optim_config cg_sgd_config(double lr, double momentum, bool nesterov)
{
    return (cg_optim_config){
        .type = CG_OPTIM_SGD, .lr = lr, .momentum = momentum, .nesterov = nesterov};
}

cg_optim_config cg_adam_config(double lr, double beta1, double beta2, double eps)
{
    return (cg_optim_config){
        .type = CG_OPTIM_ADAM, .lr = lr, .beta1 = beta1, .beta2 = beta2, .eps = eps};
}

cg_optim_config cg_adamw_config(double lr, double beta1, double beta2, double eps)
{
    cg_optim_config c = cg_adam_config(lr, beta1, beta2, eps);
    c.type = CG_OPTIM_ADAMW;
    return c;
}

cg_optim_config cg_sgd_default(double lr) { return cg_sgd_config(lr, 0.0, false); }
cg_optim_config cg_adam_default(double lr) { return cg_adam_config(lr, 0.9, 0.999, 1e-8); }
cg_optim_config cg_adamw_default(double lr) { return cg_adamw_config(lr, 0.9, 0.999, 1e-8); }

/* ------------------------------------------------------------ helpers */

static bool uses_buf1(const cg_optim_config *c)
{
    return c->type != CG_OPTIM_SGD || c->momentum != 0;
}

static bool uses_buf2(const cg_optim_config *c) { return c->type != CG_OPTIM_SGD; }

static const char *buf1_name(const cg_optim_config *c)
{
    return c->type == CG_OPTIM_SGD ? "momentum_buffer" : "exp_avg";
}

static bool check_config(const char *what, const cg_optim_config *c)
{
    if ((int)c->type < 0 || (int)c->type >= CG_OPTIM_NTYPES) {
        cg_set_error("%s: unknown optimizer type %d", what, (int)c->type);
        return false;
    }
    if (!(c->lr >= 0) || !isfinite(c->lr)) {
        cg_set_error("%s: learning rate %g must be finite and >= 0", what, c->lr);
        return false;
    }
    if (c->type == CG_OPTIM_SGD) {
        if (!(c->momentum >= 0) || !isfinite(c->momentum)) {
            cg_set_error("%s: SGD momentum %g must be finite and >= 0", what, c->momentum);
            return false;
        }
        if (c->nesterov && c->momentum == 0) {
            cg_set_error("%s: Nesterov momentum needs momentum > 0", what);
            return false;
        }
        return true;
    }
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) {
        cg_set_error("%s: %s betas (%g, %g) must be in [0, 1)", what, type_names[c->type], c->beta1,
                     c->beta2);
        return false;
    }
    if (!(c->eps >= 0) || !isfinite(c->eps)) {
        cg_set_error("%s: %s eps %g must be finite and >= 0", what, type_names[c->type], c->eps);
        return false;
    }
    return true;
}

/* Why t cannot be an optimizer parameter, or NULL if it can. */
static const char *param_problem(const cg_tensor *t)
{
    if (t->dtype != CG_F32)
        return "is not float32";
    if (t->node)
        return "is not a leaf (it was computed by an op)";
    if (!cg_is_contiguous(t))
        return "is not contiguous (the optimizer updates parameter memory as one flat run)";
    return NULL;
}

static void free_slots(slot *s, int n)
{
    if (!s)
        return;
    for (int i = 0; i < n; i++) {
        free(s[i].name);
        cg_unhold(s[i].p);
        cg_release(s[i].p);
        cg_release_held(s[i].buf1);
        cg_release_held(s[i].buf2);
    }
    free(s);
}

/* Optimizer state: held by the optimizer beyond any scope (cg_hold). */
static cg_tensor *zeros_like_param(const cg_tensor *p)
{
    return cg_hold(cg_zeros(p->ndim, p->shape));
}

/* The state buffer of a slot: the parameter's shape, or its owned run. */
static cg_tensor *zeros_state(const slot *s)
{
    if (s->lo == 0 && s->hi == cg_numel(s->p))
        return zeros_like_param(s->p);
    return cg_hold(cg_zeros(CG_SHAPE(s->hi - s->lo)));
}

/* ------------------------------------------------------- construction */

cg_optim *cg_optim_new(const cg_optim_config *cfg, int n, const cg_optim_param *params)
{
    return cg_optim_new_sharded(cfg, n, params, NULL);
}

cg_optim *cg_optim_new_sharded(const cg_optim_config *cfg, int n, const cg_optim_param *params,
                               const cg_optim_range *own)
{
    if (!cfg) {
        cg_set_error("optim_new: config is NULL");
        return NULL;
    }
    if (!check_config("optim_new", cfg))
        return NULL;
    if (n < 0 || (n > 0 && !params)) {
        cg_set_error("optim_new: %d parameters given with a %s array", n,
                     params ? "non-NULL" : "NULL");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const cg_optim_param *q = &params[i];
        if (!q->name || !q->name[0]) {
            cg_set_error("optim_new: parameter %d has no name", i);
            return NULL;
        }
        if (!q->tensor) {
            cg_set_error("optim_new: parameter '%s' is NULL", q->name);
            return NULL;
        }
        const char *why = param_problem(q->tensor);
        if (why) {
            char b[96];
            cg_set_error("optim_new: parameter '%s' %s: shape %s", q->name, why,
                         cg_shape_str(q->tensor, b, sizeof b));
            return NULL;
        }
        if (!(q->weight_decay >= 0) || !isfinite(q->weight_decay)) {
            cg_set_error("optim_new: parameter '%s': weight decay %g must be finite and >= 0",
                         q->name, q->weight_decay);
            return NULL;
        }
        for (int j = 0; j < i; j++) {
            const cg_optim_param *r = &params[j];
            if (strcmp(q->name, r->name) == 0) {
                cg_set_error("optim_new: parameter name '%s' appears twice (%d and %d)", q->name, j,
                             i);
                return NULL;
            }
            const cg_tensor *a = q->tensor, *b = r->tensor;
            int64_t na = cg_numel(a), nb = cg_numel(b);
            if (a->storage == b->storage && na > 0 && nb > 0 && a->offset < b->offset + nb &&
                b->offset < a->offset + na) {
                cg_set_error("optim_new: parameters '%s' and '%s' share memory (a tied weight "
                             "must be listed once)",
                             r->name, q->name);
                return NULL;
            }
        }
        if (own &&
            !(own[i].lo >= 0 && own[i].lo <= own[i].hi && own[i].hi <= cg_numel(q->tensor))) {
            cg_set_error("optim_new: parameter '%s' (%lld elements): owned range [%lld, %lld) "
                         "is not inside it",
                         q->name, (long long)cg_numel(q->tensor), (long long)own[i].lo,
                         (long long)own[i].hi);
            return NULL;
        }
    }

    cg_optim *o = calloc(1, sizeof *o);
    slot *s = calloc((size_t)(n > 0 ? n : 1), sizeof *s);
    if (!o || !s) {
        free(o);
        free(s);
        cg_set_error("optim_new: out of memory");
        return NULL;
    }
    o->tag = OPTIM_TAG;
    o->cfg = *cfg;
    o->s = s;
    for (int i = 0; i < n; i++) {
        const cg_optim_param *q = &params[i];
        s[i].name = strdup(q->name);
        s[i].p = cg_hold(cg_retain(q->tensor));
        s[i].wd = q->weight_decay;
        s[i].lo = own ? own[i].lo : 0;
        s[i].hi = own ? own[i].hi : cg_numel(q->tensor);
        o->sharded |= s[i].lo != 0 || s[i].hi != cg_numel(q->tensor);
        o->n = i + 1;
        if (uses_buf1(cfg))
            s[i].buf1 = zeros_state(&s[i]);
        if (uses_buf2(cfg))
            s[i].buf2 = zeros_state(&s[i]);
        if (!s[i].name || (uses_buf1(cfg) && !s[i].buf1) || (uses_buf2(cfg) && !s[i].buf2)) {
            cg_optim_free(o);
            cg_set_error("optim_new: out of memory for the state of parameter '%s'", q->name);
            return NULL;
        }
    }
    return o;
}

void cg_optim_free(cg_optim *o)
{
    if (!o)
        return;
    if (!cg_debug_enabled()) {
        free_slots(o->s, o->n);
        free(o);
        return;
    }
    if (o->tag != OPTIM_TAG) { /* the checked mode: named and refused */
        if (o->tag == OPTIM_FREED)
            cg_debug_report("cg_optim_free: optimizer %s over %d parameters was already freed "
                            "(by cg_optim_free)",
                            cg_optim_type_name(o->cfg.type), o->n);
        else
            cg_debug_report("cg_optim_free: %p is not an optimizer (its first word is 0x%08x)",
                            (void *)o, (unsigned)o->tag);
        return;
    }
    const char *prev = cg_lifetime_enter("cg_optim_free");
    free_slots(o->s, o->n);
    cg_lifetime_leave(prev);
    o->tag = OPTIM_FREED; /* poisoned and kept: never reused */
    o->s = NULL;
    cg_lifetime_quarantine(o);
}

cg_optim *cg_optim_from_module(const cg_optim_config *cfg, const cg_module *m, double weight_decay,
                               cg_decay_rule rule)
{
    if (!cfg || !m) {
        if (!cfg)
            cg_set_error("optim_from_module: config is NULL");
        else
            cg_error_null_input("optim_from_module");
        return NULL;
    }
    cg_param_list l = {0};
    if (!cg_module_params(m, &l)) {
        cg_param_list_free(&l);
        return NULL;
    }
    cg_optim_param *op = calloc((size_t)(l.n ? l.n : 1), sizeof *op);
    cg_optim *o = NULL;
    if (!op) {
        cg_set_error("optim_from_module: out of memory");
    } else {
        int n = 0;
        for (int i = 0; i < l.n; i++) {
            if (!l.items[i].tensor->requires_grad)
                continue; /* frozen (cg_module_requires_grad): left out */
            bool decay = rule == CG_DECAY_ALL || l.items[i].tensor->ndim >= 2;
            op[n++] =
                (cg_optim_param){l.items[i].name, l.items[i].tensor, decay ? weight_decay : 0.0};
        }
        if (n == 0 && l.n == 0) /* PyTorch: "optimizer got an empty parameter list" */
            cg_set_error("optim_from_module: module %s has no parameters", m->type);
        else if (n == 0)
            cg_set_error("optim_from_module: all %d parameters of module %s are frozen "
                         "(cg_module_requires_grad)",
                         l.n, m->type);
        else
            o = cg_optim_new(cfg, n, op); /* copies the names */
    }
    free(op);
    cg_param_list_free(&l);
    return o;
}

cg_optim *cg_adamw_from_module(const cg_module *m, double lr)
{
    cg_optim_config c = cg_adamw_default(lr);
    return cg_optim_from_module(&c, m, 0.01, CG_DECAY_ALL);
}

cg_optim *cg_adam_from_module(const cg_module *m, double lr)
{
    cg_optim_config c = cg_adam_default(lr);
    return cg_optim_from_module(&c, m, 0.0, CG_DECAY_ALL);
}

cg_optim *cg_sgd_from_module(const cg_module *m, double lr)
{
    cg_optim_config c = cg_sgd_default(lr);
    return cg_optim_from_module(&c, m, 0.0, CG_DECAY_ALL);
}

/* ------------------------------------------------------------ updates */

static void sgd_update(float *restrict p, const float *restrict g0, float *restrict buf, int64_t n,
                       float wd, float mom, bool first, bool nesterov, float neg_lr)
{
    for (int64_t i = 0; i < n; i++) {
        float g = g0[i];
        if (wd != 0)
            g = g + wd * p[i]; /* grad.add(param, alpha=wd) */
        if (buf) {
            buf[i] = first ? g : buf[i] * mom + g; /* dampening 0: alpha 1 */
            g = nesterov ? g + mom * buf[i] : buf[i];
        }
        p[i] = p[i] + neg_lr * g; /* param.add_(d_p, alpha=-lr) */
    }
}

static void adam_update(float *restrict p, const float *restrict g0, float *restrict m,
                        float *restrict v, int64_t n, float l2, float decay, float b1, float a1,
                        float b2, float a2, float bc2_sqrt, float eps, float neg_step)
{
    for (int64_t i = 0; i < n; i++) {
        float g = g0[i];
        if (l2 != 0)
            g = g + l2 * p[i]; /* Adam: grad.add(param, alpha=wd) */
        float pi = p[i];
        if (decay != 1)
            pi = pi * decay;           /* AdamW: param.mul_(1 - lr*wd) */
        m[i] = m[i] * b1 + a1 * g;     /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */
        v[i] = v[i] * b2 + a2 * g * g; /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2) */
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = pi + neg_step * m[i] / denom; /* param.addcdiv_(m, denom, -step_size) */
    }
}

/* One parameter's update with its per-step constants. All parameters are
 * updated in ONE parallel region: the concatenated element range is cut
 * into one contiguous piece per thread (a model has many small tensors;
 * a region per tensor cost a fork and a join each). The updates are
 * elementwise, so the cut does not change any result. */
typedef struct {
    float *p, *buf1, *buf2;
    const float *g;
    int64_t n;
    float wd, l2, decay, bc2_sqrt, neg_step;
    bool first;
} update_job;

static void run_jobs(const cg_optim_config *c, const update_job *jobs, int njobs, int64_t total)
{
    const float neg_lr = (float)-c->lr;
    int nt = cg_get_num_threads();
    if (total < OPTIM_PAR_THRESHOLD || nt < 1)
        nt = 1;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        int th = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t lo = total * th / nth, hi = total * (th + 1) / nth, base = 0;
        for (int j = 0; j < njobs && base < hi; base += jobs[j].n, j++) {
            const update_job *u = &jobs[j];
            int64_t a = lo > base ? lo - base : 0, b = hi - base < u->n ? hi - base : u->n;
            if (a >= b)
                continue;
            if (c->type == CG_OPTIM_SGD)
                sgd_update(u->p + a, u->g + a, u->buf1 ? u->buf1 + a : NULL, b - a, u->wd,
                           (float)c->momentum, u->first, c->nesterov, neg_lr);
            else
                adam_update(u->p + a, u->g + a, u->buf1 + a, u->buf2 + a, b - a, u->l2, u->decay,
                            (float)c->beta1, (float)(1 - c->beta1), (float)c->beta2,
                            (float)(1 - c->beta2), u->bc2_sqrt, (float)c->eps, u->neg_step);
        }
    }
}

bool cg_train_step(cg_optim *o, cg_tensor *loss)
{
    if (!o || !loss) {
        if (!cg_has_error())
            cg_set_error("train_step: %s is NULL", o ? "loss" : "optimizer");
        return false;
    }
    bool ok = cg_backward(loss, NULL, false) && cg_optim_step(o);
    cg_optim_zero_grad(o);
    return ok;
}

bool cg_optim_step(cg_optim *o)
{
    if (!o) {
        cg_set_error("optim_step: optimizer is NULL");
        return false;
    }
    /* Check everything first, so that a failure updates nothing. */
    const float **g = calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *g);
    cg_tensor **gc = calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *gc);
    if (!g || !gc) {
        free(g);
        free(gc);
        cg_set_error("optim_step: out of memory");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < o->n && ok; i++) {
        slot *s = &o->s[i];
        const cg_tensor *grad = s->p->grad;
        const char *why = param_problem(s->p);
        if (why) {
            cg_set_error("optim_step: parameter '%s' %s", s->name, why);
            ok = false;
        } else if (!grad) {
            continue;
        } else if (!cg_same_shape(grad, s->p) || grad->dtype != CG_F32) {
            char b1[96], b2[96];
            cg_set_error("optim_step: gradient of '%s' has shape %s, the parameter %s", s->name,
                         cg_shape_str(grad, b1, sizeof b1), cg_shape_str(s->p, b2, sizeof b2));
            ok = false;
        } else {
            gc[i] = cg_k_contiguous(grad); /* a copy only for a strided gradient */
            ok = gc[i] != NULL;
            if (ok)
                g[i] = cg_data(gc[i]);
        }
    }
    update_job *jobs = ok ? calloc((size_t)(o->n > 0 ? o->n : 1), sizeof *jobs) : NULL;
    if (ok && !jobs) {
        cg_set_error("optim_step: out of memory");
        ok = false;
    }
    if (ok) {
        const cg_optim_config *c = &o->cfg;
        double lr = c->lr;
        int nj = 0;
        int64_t total = 0;
        for (int i = 0; i < o->n; i++) {
            slot *s = &o->s[i];
            if (!g[i])
                continue; /* no gradient: skipped, as in PyTorch */
            s->step++;
            update_job *u = &jobs[nj++];
            cg_tensor_modified(s->p);     /* the update below writes it */
            u->p = cg_data(s->p) + s->lo; /* the owned run (all of it unsharded) */
            u->g = g[i] + s->lo;
            u->n = s->hi - s->lo;
            u->buf1 = s->buf1 ? cg_data(s->buf1) : NULL;
            u->buf2 = s->buf2 ? cg_data(s->buf2) : NULL;
            u->wd = (float)s->wd;
            u->first = s->step == 1;
            total += u->n;
            if (c->type == CG_OPTIM_SGD)
                continue;
            double t = (double)s->step;
            double bc1 = 1 - pow(c->beta1, t);
            double bc2 = 1 - pow(c->beta2, t);
            double step_size = lr / bc1;
            bool adamw = c->type == CG_OPTIM_ADAMW;
            u->l2 = adamw ? 0.0f : (float)s->wd;
            u->decay = adamw ? (float)(1 - lr * s->wd) : 1.0f;
            u->bc2_sqrt = (float)sqrt(bc2);
            u->neg_step = (float)-step_size;
        }
        run_jobs(c, jobs, nj, total);
        o->steps++;
    }
    free(jobs);
    for (int i = 0; i < o->n; i++)
        cg_release(gc[i]);
    free(gc);
    free(g);
    return ok;
}

void cg_optim_zero_grad(cg_optim *o)
{
    if (!o)
        return;
    for (int i = 0; i < o->n; i++)
        cg_zero_grad(o->s[i].p);
}

/* ------------------------------------------------------------ queries */

void cg_optim_set_lr(cg_optim *o, double lr)
{
    if (!o) {
        cg_error_null_input("cg_optim_set_lr");
    } else if (!(lr >= 0 && lr < INFINITY)) { /* a schedule's NaN would wreck every weight */
        cg_set_error("optim set_lr: learning rate %g must be finite and >= 0 (kept %g)", lr,
                     o->cfg.lr);
    } else {
        o->cfg.lr = lr;
    }
}

double cg_optim_lr(const cg_optim *o) { return o ? o->cfg.lr : 0.0; }

cg_optim_config cg_optim_get_config(const cg_optim *o) { return o ? o->cfg : (cg_optim_config){0}; }

int64_t cg_optim_steps(const cg_optim *o) { return o ? o->steps : 0; }

int cg_optim_count(const cg_optim *o) { return o ? o->n : 0; }

static const slot *get_slot(const cg_optim *o, int i, const char *what)
{
    if (!o || i < 0 || i >= o->n) {
        cg_set_error("%s: no parameter %d (the optimizer has %d)", what, i, o ? o->n : 0);
        return NULL;
    }
    return &o->s[i];
}

const char *cg_optim_param_name(const cg_optim *o, int i)
{
    const slot *s = get_slot(o, i, "optim_param_name");
    return s ? s->name : NULL;
}

cg_tensor *cg_optim_param_tensor(const cg_optim *o, int i)
{
    const slot *s = get_slot(o, i, "optim_param_tensor");
    return s ? s->p : NULL;
}

double cg_optim_param_weight_decay(const cg_optim *o, int i)
{
    const slot *s = get_slot(o, i, "optim_param_weight_decay");
    return s ? s->wd : -1;
}

int64_t cg_optim_param_steps(const cg_optim *o, int i)
{
    const slot *s = get_slot(o, i, "optim_param_steps");
    return s ? s->step : -1;
}

int cg_optim_find(const cg_optim *o, const char *name)
{
    if (!o || !name)
        return -1;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->s[i].name, name) == 0)
            return i;
    return -1;
}

cg_tensor *cg_optim_state(const cg_optim *o, int i, const char *what)
{
    const slot *s = get_slot(o, i, "optim_state");
    if (!s)
        return NULL;
    const cg_optim_config *c = &o->cfg;
    if (what && s->buf1 && strcmp(what, buf1_name(c)) == 0)
        return s->buf1;
    if (what && s->buf2 && strcmp(what, "exp_avg_sq") == 0)
        return s->buf2;
    cg_set_error("optim_state: %s optimizer has no state '%s' (it keeps %s)", type_names[c->type],
                 what ? what : "(null)",
                 c->type != CG_OPTIM_SGD ? "exp_avg, exp_avg_sq"
                 : s->buf1               ? "momentum_buffer"
                                         : "no buffers");
    return NULL;
}

/* ------------------------------------------------------ sharded state */

bool cg_optim_is_sharded(const cg_optim *o) { return o && o->sharded; }

bool cg_optim_shard_range(const cg_optim *o, int i, int64_t *lo, int64_t *hi)
{
    const slot *s = get_slot(o, i, "optim_shard_range");
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
        b += (int64_t)sizeof(float) * ((o->s[i].buf1 ? cg_numel(o->s[i].buf1) : 0) +
                                       (o->s[i].buf2 ? cg_numel(o->s[i].buf2) : 0));
    return b;
}

/* Copy the elements of [max(lo), min(hi)) of one buffer pair. */
static void copy_overlap(const slot *d, cg_tensor *db, const slot *s, const cg_tensor *sb)
{
    int64_t a = d->lo > s->lo ? d->lo : s->lo, b = d->hi < s->hi ? d->hi : s->hi;
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
    if (dst->cfg.type != src->cfg.type || dst->n != src->n ||
        uses_buf1(&dst->cfg) != uses_buf1(&src->cfg)) {
        cg_set_error("optim_copy_state: %s optimizer of %d parameters into %s of %d (the type, "
                     "momentum use and count must agree)",
                     type_names[src->cfg.type], src->n, type_names[dst->cfg.type], dst->n);
        return false;
    }
    for (int i = 0; i < dst->n; i++)
        if (strcmp(dst->s[i].name, src->s[i].name) != 0 ||
            cg_numel(dst->s[i].p) != cg_numel(src->s[i].p)) {
            cg_set_error("optim_copy_state: parameter %d is '%s' in src, '%s' in dst (or of "
                         "another size)",
                         i, src->s[i].name, dst->s[i].name);
            return false;
        }
    dst->cfg = src->cfg;
    dst->steps = src->steps;
    for (int i = 0; i < dst->n; i++) {
        slot *d = &dst->s[i];
        const slot *s = &src->s[i];
        d->step = s->step;
        copy_overlap(d, d->buf1, s, s->buf1);
        copy_overlap(d, d->buf2, s, s->buf2);
    }
    return true;
}

/* ------------------------------------------------- checkpoint state */

static const char *const state_suffixes[] = {"step", "exp_avg", "exp_avg_sq", "momentum_buffer"};

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
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    return cg_st_set_metadata(w, name, value);
}

bool cg_optim_save(const cg_optim *o, cg_st_writer *w, const char *prefix)
{
    if (!o || !w) {
        cg_set_error("optim_save: %s is NULL", !o ? "optimizer" : "writer");
        return false;
    }
    if (!prefix)
        prefix = "optim";
    if (o->sharded) {
        cg_set_error("optim_save: the optimizer holds a shard of the state only: gather the "
                     "shards into an unsharded optimizer first (cg_optim_copy_state)");
        return false;
    }
    const cg_optim_config *c = &o->cfg;
    bool ok = set_meta(w, prefix, "type", "%s", type_names[c->type]) &&
              set_meta(w, prefix, "step", "%" PRId64, o->steps) &&
              set_meta(w, prefix, "lr", "%.17g", c->lr) &&
              set_meta(w, prefix, "momentum", "%.17g", c->momentum) &&
              set_meta(w, prefix, "nesterov", "%s", c->nesterov ? "true" : "false") &&
              set_meta(w, prefix, "beta1", "%.17g", c->beta1) &&
              set_meta(w, prefix, "beta2", "%.17g", c->beta2) &&
              set_meta(w, prefix, "eps", "%.17g", c->eps);
    for (int i = 0; ok && i < o->n; i++) {
        const slot *s = &o->s[i];
        char name[1024];
        cg_tensor *step = cg_scalar_i64(s->step);
        ok = key(name, sizeof name, prefix, s->name, "step") && cg_st_add(w, name, step);
        cg_release(step);
        if (ok && s->buf1)
            ok = key(name, sizeof name, prefix, s->name, buf1_name(c)) &&
                 cg_st_add_f32(w, name, s->buf1);
        if (ok && s->buf2)
            ok = key(name, sizeof name, prefix, s->name, "exp_avg_sq") &&
                 cg_st_add_f32(w, name, s->buf2);
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

static bool meta_double(const cg_st_file *f, const char *prefix, const char *k, double *out)
{
    const char *v = get_meta(f, prefix, k);
    if (!v)
        return false;
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end || errno == ERANGE || !isfinite(d)) {
        cg_set_error("optim_load: %s: metadata '%s.%s' = '%s' is not a finite number",
                     cg_st_path(f), prefix, k, v);
        return false;
    }
    *out = d;
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
    if (ns->step < 0) {
        cg_set_error("optim_load: %s: '%s' = %" PRId64 " is negative", path, name, ns->step);
        return false;
    }
    for (int b = 0; b < 2; b++) {
        if (b == 0 ? !uses_buf1(c) : !uses_buf2(c))
            continue;
        const char *suffix = b == 0 ? buf1_name(c) : "exp_avg_sq";
        if (!key(name, sizeof name, prefix, s->name, suffix))
            return false;
        if (!cg_st_has(f, name)) {
            cg_set_error("optim_load: %s has no '%s' (%s state of parameter '%s')", path, name,
                         type_names[c->type], s->name);
            return false;
        }
        if (!cg_st_info(f, name, &dt, &nd, shape))
            return false;
        bool same = dt == CG_ST_F32 && nd == s->p->ndim;
        for (int d = 0; same && d < nd; d++)
            same = shape[d] == s->p->shape[d];
        if (!same) {
            char b1[96], b2[96];
            cg_set_error("optim_load: %s: '%s' is %s %s, but parameter '%s' is F32 %s", path, name,
                         cg_st_dtype_name(dt), cg_shape_str_n(nd, shape, b1, sizeof b1), s->name,
                         cg_shape_str(s->p, b2, sizeof b2));
            return false;
        }
        cg_tensor *t = zeros_like_param(s->p);
        if (!t || !cg_st_load_into(f, name, t)) {
            cg_release_held(t);
            return false;
        }
        /* a damaged value fails here, naming its entry, not as a NaN
         * gradient of another parameter steps later (a second moment is
         * never negative) */
        const float *v = cg_data(t);
        for (int64_t e = 0, n = cg_numel(t); e < n; e++)
            if (!isfinite(v[e]) || (b == 1 && v[e] < 0)) {
                cg_set_error("optim_load: %s: '%s' holds %g at element %lld (%s)", path, name,
                             (double)v[e], (long long)e,
                             isfinite(v[e]) ? "a second moment is at least 0" : "not finite");
                cg_release_held(t);
                return false;
            }
        if (s->lo != 0 || s->hi != cg_numel(s->p)) { /* sharded: keep the owned run */
            cg_tensor *part = zeros_state(s);
            if (part)
                memcpy(cg_data(part), v + s->lo, (size_t)(s->hi - s->lo) * sizeof *v);
            cg_release_held(t);
            if (!part)
                return false;
            t = part;
        }
        if (b == 0)
            ns->buf1 = t;
        else
            ns->buf2 = t;
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
        for (size_t k = 0; !known && k < sizeof state_suffixes / sizeof *state_suffixes; k++) {
            const char *suf = state_suffixes[k];
            size_t ls = strlen(suf);
            if (lr <= ls + 1 || rest[lr - ls - 1] != '.' || strcmp(rest + lr - ls, suf) != 0)
                continue;
            bool wanted = k == 0 || (k == 1 && uses_buf2(c)) || (k == 2 && uses_buf2(c)) ||
                          (k == 3 && c->type == CG_OPTIM_SGD && uses_buf1(c));
            if (!wanted)
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
    const char *nest_s = get_meta(f, prefix, "nesterov");
    if (!step_s || !nest_s)
        return false;
    char *end;
    errno = 0;
    long long steps = strtoll(step_s, &end, 10);
    if (end == step_s || *end || errno || steps < 0) {
        cg_set_error("optim_load: %s: metadata '%s.step' = '%s' is not a step count", path, prefix,
                     step_s);
        return false;
    }
    if (strcmp(nest_s, "true") != 0 && strcmp(nest_s, "false") != 0) {
        cg_set_error("optim_load: %s: metadata '%s.nesterov' = '%s' is not true/false", path,
                     prefix, nest_s);
        return false;
    }
    c.nesterov = strcmp(nest_s, "true") == 0;
    if (!meta_double(f, prefix, "lr", &c.lr) || !meta_double(f, prefix, "momentum", &c.momentum) ||
        !meta_double(f, prefix, "beta1", &c.beta1) || !meta_double(f, prefix, "beta2", &c.beta2) ||
        !meta_double(f, prefix, "eps", &c.eps))
        return false;
    char what[512];
    snprintf(what, sizeof what, "optim_load: %s", path);
    if (!check_config(what, &c) || !check_no_strays(o, f, prefix, &c))
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
            cg_release_held(s->buf1);
            cg_release_held(s->buf2);
            s->buf1 = ns[i].buf1;
            s->buf2 = ns[i].buf2;
            s->step = ns[i].step;
            ns[i].buf1 = ns[i].buf2 = NULL;
        }
        o->cfg = c;
        o->steps = steps;
    }
    for (int i = 0; i < o->n; i++) {
        cg_release_held(ns[i].buf1);
        cg_release_held(ns[i].buf2);
    }
    free(ns);
    return ok;
}
