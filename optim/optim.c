/* cgrad optim: SGD, Adam, AdamW: configs, construction, the update rules and
 * queries (the sharded state and checkpoints are optim_state.c).
 *
 * Every update is a flat loop over one parameter's memory with PyTorch's
 * single-tensor operation order (torch/optim/{sgd,adam,adamw}.py): scalar
 * factors are computed in double, as Python does, and rounded to float once,
 * as ATen does when it passes a Python number to a float32 kernel. */
#include "optim/optim.h"

#include "autograd/autograd.h"
#include "core/lifetime.h"
#include "core/shares.h"
#include "core/vmath.h"
#include "optim/optim_impl.h"

#include <errno.h>
#include <float.h>
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
#define OPTIM_CHUNK 16384 /* elements: the threads' chunks (core/shares.h) */

const char *cg_optim_type_name(cg_optim_type t)
{
    return ((int)t >= 0 && (int)t < CG_OPTIM_NTYPES) ? type_names[t] : "?";
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
        cg_release_held(s[i].p);
        for (int k = 1; k < CG_OPTIM_NBUFS; k++)
            cg_release_held(s[i].buf[k]);
    }
    free(s);
}

/* Optimizer state: held by the optimizer beyond any scope (cg_hold). */
cg_tensor *cg_optim_zeros_like_param(const cg_tensor *p)
{
    return cg_hold(cg_zeros(p->ndim, p->shape));
}

/* The state buffer of a slot: the parameter's shape, or its owned run. */
cg_tensor *cg_optim_zeros_state(const slot *s)
{
    if (s->lo == 0 && s->hi == cg_numel(s->p))
        return cg_optim_zeros_like_param(s->p);
    return cg_hold(cg_zeros(CG_SHAPE(s->hi - s->lo)));
}

cg_tensor *cg_optim_new_buffer(const cg_optim_config *c, const slot *s, int k)
{
    /* Adagrad's sum: torch.full_like(p, initial_accumulator_value); a
     * scalar: torch.tensor(v) */
    const float v = cg_optim_buffer_start(c, k, param_rate(c->lr, s->lr_scale));
    if (cg_optim_buffer_is_scalar(k))
        return cg_hold(cg_scalar(v));
    cg_tensor *t = cg_optim_zeros_state(s);
    if (t && v != 0 && !cg_fill_(t, v)) {
        cg_release_held(t);
        return NULL;
    }
    return t;
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
    if (!cg_optim_check_config("optim_new", cfg))
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
        if (cfg->type == CG_OPTIM_RPROP && q->weight_decay != 0) {
            cg_set_error("optim_new: parameter '%s': rprop takes no weight decay (%g given; "
                         "PyTorch 1.13's Rprop has none)",
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
        s[i].lr_scale = 1.0;
        s[i].lo = own ? own[i].lo : 0;
        s[i].hi = own ? own[i].hi : cg_numel(q->tensor);
        o->sharded |= s[i].lo != 0 || s[i].hi != cg_numel(q->tensor);
        o->n = i + 1;
        bool ok = s[i].name != NULL;
        for (int k = 1; ok && k < CG_OPTIM_NBUFS; k++)
            if (cg_optim_keeps(cfg, k))
                ok = (s[i].buf[k] = cg_optim_new_buffer(cfg, &s[i], k)) != NULL;
        if (!ok) {
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
    if (!cg_module_live(m, "cg_optim_from_module"))
        return NULL;
    if (rule != CG_DECAY_ALL && rule != CG_DECAY_MATRICES) {
        cg_set_error("optim_from_module: unknown decay rule %d (CG_DECAY_ALL or CG_DECAY_MATRICES)",
                     (int)rule);
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

/* The updates are compiled for AVX-512, AVX2 and the baseline (EW_CLONES,
 * core/vmath.h: the same IEEE operations in each, no contraction, so the
 * same bits on every CPU). SSE2's 4 lanes made Adam's square root and
 * division the bound: the AVX-512 clone took the update from 4.2% to 2.0%
 * of a 1-thread seq2seq paper bf16 step (63 million parameters, Zen 4). */
EW_CLONES static void sgd_update(float *restrict p, const float *restrict g0, float *restrict buf,
                                 int64_t n, float wd, float mom, float damp1, bool first,
                                 bool nesterov, float neg_lr)
{
    for (int64_t i = 0; i < n; i++) {
        float g = with_l2(g0[i], wd, p[i]);
        if (buf) {
            /* buf.mul_(momentum).add_(g, alpha=1-dampening): at dampening 0,
             * 1 * g is g, the bits of before dampening existed */
            buf[i] = first ? g : buf[i] * mom + damp1 * g;
            g = nesterov ? g + mom * buf[i] : buf[i];
        }
        p[i] = p[i] + neg_lr * g; /* param.add_(d_p, alpha=-lr) */
    }
}

EW_CLONES static void adam_update(float *restrict p, const float *restrict g0, float *restrict m,
                                  float *restrict v, float *restrict vmax, int64_t n, float l2,
                                  float decay, float b1, float a1, float b2, float a2,
                                  float bc2_sqrt, float eps, float neg_step)
{
    for (int64_t i = 0; i < n; i++) {
        float g = with_l2(g0[i], l2, p[i]); /* Adam's; AdamW's l2 is 0 */
        float pi = p[i];
        if (decay != 1)
            pi = pi * decay;           /* AdamW: param.mul_(1 - lr*wd) */
        m[i] = m[i] * b1 + a1 * g;     /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */
        v[i] = v[i] * b2 + a2 * g * g; /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2) */
        float vi = v[i];
        if (vmax) /* amsgrad: torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq) */
            vi = vmax[i] = maximum(vmax[i], vi);
        float denom = sqrtf(vi) / bc2_sqrt + eps;
        p[i] = pi + neg_step * m[i] / denom; /* param.addcdiv_(m, denom, -step_size) */
    }
}

EW_CLONES static void rmsprop_update(float *restrict p, const float *restrict g0,
                                     float *restrict sq, float *restrict ga, float *restrict buf,
                                     int64_t n, float wd, float alpha, float a1, float eps,
                                     float mom, float neg_lr)
{
    for (int64_t i = 0; i < n; i++) {
        float g = with_l2(g0[i], wd, p[i]);
        sq[i] = sq[i] * alpha + a1 * g * g; /* square_avg.mul_(alpha).addcmul_(g, g, 1-alpha) */
        float avg;
        if (ga) {
            ga[i] = ga[i] * alpha + a1 * g; /* grad_avg.mul_(alpha).add_(g, alpha=1-alpha) */
            avg = sqrtf(sq[i] + -1.0f * ga[i] * ga[i]); /* square_avg.addcmul(ga, ga, -1) */
        } else {
            avg = sqrtf(sq[i]);
        }
        avg = avg + eps;
        if (buf) {
            buf[i] = buf[i] * mom + g / avg; /* buf.mul_(momentum).addcdiv_(g, avg) */
            p[i] = p[i] + neg_lr * buf[i];   /* param.add_(buf, alpha=-lr) */
        } else {
            p[i] = p[i] + neg_lr * g / avg; /* param.addcdiv_(g, avg, value=-lr) */
        }
    }
}

EW_CLONES static void adagrad_update(float *restrict p, const float *restrict g0,
                                     float *restrict sum, int64_t n, float wd, float eps,
                                     float neg_clr)
{
    for (int64_t i = 0; i < n; i++) {
        float g = with_l2(g0[i], wd, p[i]);
        sum[i] = sum[i] + 1.0f * g * g; /* state_sum.addcmul_(g, g, value=1) */
        float std = sqrtf(sum[i]) + eps;
        p[i] = p[i] + neg_clr * g / std; /* param.addcdiv_(g, std, value=-clr) */
    }
}

/* All parameters are updated in ONE parallel region: the concatenated element range is cut
 * into chunks of OPTIM_CHUNK elements, in shares (core/shares.h; a model
 * has many small tensors: a region per tensor cost a fork and a join
 * each). The updates are elementwise, so the cut does not change any
 * result. */
/* The jobs' elements as one range: what its chunks read */
typedef struct {
    const cg_optim_config *c;
    const update_job *jobs;
    int njobs;
} update_range;

/* Buffer k of job u from element a on, or NULL */
static float *job_buf(const update_job *u, int k, int64_t a)
{
    return u->buf[k] ? u->buf[k] + a : NULL;
}

/* Elements [lo, hi) of the concatenated range, job by job */
static void update_chunk(int64_t lo, int64_t hi, int thread, const void *ctx)
{
    const update_range *r = ctx;
    const cg_optim_config *c = r->c;
    int64_t base = 0;
    for (int j = 0; j < r->njobs && base < hi; base += r->jobs[j].n, j++) {
        const update_job *u = &r->jobs[j];
        int64_t a = lo > base ? lo - base : 0, b = hi - base < u->n ? hi - base : u->n;
        if (a >= b)
            continue;
        float *p = u->p + a, *mom = job_buf(u, CG_OPTIM_BUF_MOMENTUM, a);
        const float *g = u->g + a;
        switch (c->type) {
        case CG_OPTIM_SGD:
            sgd_update(p, g, mom, b - a, u->wd, (float)c->momentum, (float)(1 - c->dampening),
                       u->first, c->nesterov, u->neg_lr);
            break;
        case CG_OPTIM_RMSPROP:
            rmsprop_update(p, g, job_buf(u, CG_OPTIM_BUF_SQUARE_AVG, a),
                           job_buf(u, CG_OPTIM_BUF_GRAD_AVG, a), mom, b - a, u->wd, (float)c->alpha,
                           (float)(1 - c->alpha), (float)c->eps, (float)c->momentum, u->neg_lr);
            break;
        case CG_OPTIM_ADAGRAD:
            adagrad_update(p, g, job_buf(u, CG_OPTIM_BUF_SUM, a), b - a, u->wd, (float)c->eps,
                           u->neg_step);
            break;
        case CG_OPTIM_ADAM:
        case CG_OPTIM_ADAMW:
            adam_update(p, g, job_buf(u, CG_OPTIM_BUF_EXP_AVG, a),
                        job_buf(u, CG_OPTIM_BUF_EXP_AVG_SQ, a),
                        job_buf(u, CG_OPTIM_BUF_MAX_EXP_AVG_SQ, a), b - a, u->l2, u->decay,
                        (float)c->beta1, (float)(1 - c->beta1), (float)c->beta2,
                        (float)(1 - c->beta2), u->bc2_sqrt, (float)c->eps, u->neg_step);
            break;
        default: cg_optim_update_more(c, u, a, b - a);
        }
    }
}

static void run_jobs(const cg_optim_config *c, const update_job *jobs, int njobs, int64_t total)
{
    const update_range r = {c, jobs, njobs};
    const int nt = total >= OPTIM_PAR_THRESHOLD && !omp_in_parallel() ? cg_get_num_threads() : 1;
    cg_shares_run(total, OPTIM_CHUNK, nt, update_chunk, &r);
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
    if (cg_debug_enabled() && o->tag == OPTIM_FREED) { /* the checked mode keeps its struct */
        cg_debug_report("cg_optim_step: optimizer %s over %d parameters was already freed (by "
                        "cg_optim_free)",
                        cg_optim_type_name(o->cfg.type), o->n);
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
        } else if (!cg_same_shape(grad, s->p)) {
            char b1[96], b2[96];
            cg_set_error("optim_step: gradient of '%s' has shape %s, the parameter %s", s->name,
                         cg_shape_str(grad, b1, sizeof b1), cg_shape_str(s->p, b2, sizeof b2));
            ok = false;
        } else if (grad->dtype != CG_F32) {
            cg_set_error("optim_step: gradient of '%s' is %s, expected float32 (its parameter's "
                         "dtype)",
                         s->name, cg_dtype_name(grad->dtype));
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
        int nj = 0;
        int64_t total = 0;
        for (int i = 0; i < o->n; i++) {
            slot *s = &o->s[i];
            if (!g[i])
                continue; /* no gradient: skipped, as in PyTorch */
            s->step++;
            update_job *u = &jobs[nj++];
            u->p = cg_data(s->p) + s->lo; /* the owned run (all of it unsharded) */
            u->g = g[i] + s->lo;
            u->n = s->hi - s->lo;
            for (int k = 1; k < CG_OPTIM_NBUFS; k++)
                u->buf[k] = s->buf[k] ? cg_data(s->buf[k]) : NULL;
            u->wd = (float)s->wd;
            u->first = s->step == 1;
            total += u->n;
            /* this parameter's rate: at most FLT_MAX (cg_optim_rate_ok) */
            double lr = param_rate(c->lr, s->lr_scale);
            u->neg_lr = (float)-lr;
            if (c->type == CG_OPTIM_SGD || c->type == CG_OPTIM_RMSPROP)
                continue;
            if (c->type != CG_OPTIM_ADAGRAD && c->type != CG_OPTIM_ADAM &&
                c->type != CG_OPTIM_ADAMW) {
                cg_optim_prepare_more(c, s, u, lr);
                continue;
            }
            double t = (double)s->step;
            if (c->type == CG_OPTIM_ADAGRAD) { /* clr = lr / (1 + (step - 1) * lr_decay) */
                u->neg_step = (float)-(lr / (1 + (t - 1) * c->lr_decay));
                continue;
            }
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
        /* Announced once written, not before: a product on another thread
         * during the update (Hogwild's forwards, inference beside
         * training) packs W's kept copy from values half written, kept
         * under the version it read; announced first, that was the new
         * version, and the copy outlived the step (tests/test_threads.c). */
        for (int i = 0; i < o->n; i++)
            if (g[i])
                cg_tensor_modified(o->s[i].p);
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
    if (cg_debug_enabled() && o->tag == OPTIM_FREED) { /* the checked mode keeps its struct */
        cg_debug_report("cg_optim_zero_grad: optimizer %s over %d parameters was already freed "
                        "(by cg_optim_free)",
                        cg_optim_type_name(o->cfg.type), o->n);
        return;
    }
    for (int i = 0; i < o->n; i++)
        cg_zero_grad(o->s[i].p);
}

/* ------------------------------------------------------------ queries */

bool cg_optim_set_lr(cg_optim *o, double lr)
{
    if (!o) {
        cg_error_null_input("cg_optim_set_lr");
        return false;
    }
    char why[192];
    if (!cg_optim_rate_ok(lr, 1.0, why, sizeof why)) {
        cg_set_error("optim set_lr: %s (kept %g)", why, o->cfg.lr);
        return false;
    }
    for (int i = 0; i < o->n; i++) /* and every parameter's own rate */
        if (!cg_optim_rate_ok(lr, o->s[i].lr_scale, why, sizeof why)) {
            cg_set_error("optim set_lr: parameter '%s': %s (kept %g)", o->s[i].name, why,
                         o->cfg.lr);
            return false;
        }
    o->cfg.lr = lr;
    return true;
}

double cg_optim_lr(const cg_optim *o) { return o ? o->cfg.lr : 0.0; }

bool cg_optim_set_momentum(cg_optim *o, double momentum)
{
    if (!o)
        return cg_error_null_input("cg_optim_set_momentum");
    return cg_optim_config_set_momentum(&o->cfg, momentum);
}

bool cg_optim_config_set_momentum(cg_optim_config *c, double momentum)
{
    if (!c)
        return cg_error_null_input("cg_optim_config_set_momentum");
    if ((int)c->type < 0 || (int)c->type >= CG_OPTIM_NTYPES) {
        cg_set_error("optim set_momentum: unknown optimizer type %d", (int)c->type);
        return false;
    }
    const char *tn = type_names[c->type];
    const cg_optim_type t = c->type;
    if (t == CG_OPTIM_ADAGRAD || t == CG_OPTIM_ADADELTA || t == CG_OPTIM_ASGD ||
        t == CG_OPTIM_RPROP) {
        cg_set_error("optim set_momentum: %s has no momentum (sgd, rmsprop: momentum; adam, "
                     "adamw, adamax, nadam, radam: beta1)",
                     tn);
        return false;
    }
    bool adams = t != CG_OPTIM_SGD && t != CG_OPTIM_RMSPROP; /* the types with betas */
    if (!adams && c->momentum == 0) {
        cg_set_error("optim set_momentum: this %s was built without momentum (0: no "
                     "momentum_buffer); build it with momentum > 0",
                     tn);
        return false;
    }
    if (adams ? !(momentum >= 0 && momentum < 1) : !(momentum > 0 && momentum <= DBL_MAX)) {
        cg_set_error("optim set_momentum: %s %s %g must be %s (kept %g)", tn,
                     adams ? "beta1" : "momentum", momentum, adams ? "in [0, 1)" : "finite and > 0",
                     adams ? c->beta1 : c->momentum);
        return false;
    }
    *(adams ? &c->beta1 : &c->momentum) = momentum;
    return true;
}

cg_optim_config cg_optim_get_config(const cg_optim *o) { return o ? o->cfg : (cg_optim_config){0}; }

int64_t cg_optim_steps(const cg_optim *o) { return o ? o->steps : 0; }

int cg_optim_count(const cg_optim *o) { return o ? o->n : 0; }

const slot *cg_optim_get_slot(const cg_optim *o, int i, const char *what)
{
    if (!o || i < 0 || i >= o->n) {
        cg_set_error("%s: no parameter %d (the optimizer has %d)", what, i, o ? o->n : 0);
        return NULL;
    }
    return &o->s[i];
}

const char *cg_optim_param_name(const cg_optim *o, int i)
{
    const slot *s = cg_optim_get_slot(o, i, "optim_param_name");
    return s ? s->name : NULL;
}

cg_tensor *cg_optim_param_tensor(const cg_optim *o, int i)
{
    const slot *s = cg_optim_get_slot(o, i, "optim_param_tensor");
    return s ? s->p : NULL;
}

double cg_optim_param_weight_decay(const cg_optim *o, int i)
{
    const slot *s = cg_optim_get_slot(o, i, "optim_param_weight_decay");
    return s ? s->wd : -1;
}

bool cg_optim_set_lr_scale(cg_optim *o, int i, double scale)
{
    if (!o)
        return cg_error_null_input("cg_optim_set_lr_scale");
    if (!cg_optim_get_slot(o, i, "optim_set_lr_scale"))
        return false;
    slot *s = &o->s[i];
    char why[192];
    if (!cg_optim_rate_ok(o->cfg.lr, scale, why, sizeof why)) {
        cg_set_error("optim_set_lr_scale: parameter '%s': %s (kept %g)", s->name, why, s->lr_scale);
        return false;
    }
    s->lr_scale = scale == 0 ? 0.0 : scale; /* -0 as 0: the same rate, saved as "0" */
    return true;
}

double cg_optim_param_lr_scale(const cg_optim *o, int i)
{
    const slot *s = cg_optim_get_slot(o, i, "optim_param_lr_scale");
    return s ? s->lr_scale : -1;
}

int64_t cg_optim_param_steps(const cg_optim *o, int i)
{
    const slot *s = cg_optim_get_slot(o, i, "optim_param_steps");
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
    const slot *s = cg_optim_get_slot(o, i, "optim_state");
    if (!s)
        return NULL;
    const cg_optim_config *c = &o->cfg;
    char keeps[160] = "";
    size_t len = 0;
    for (int k = 1; k < CG_OPTIM_NBUFS; k++) {
        if (!s->buf[k])
            continue;
        if (what && strcmp(what, cg_optim_buffer_name(k)) == 0)
            return s->buf[k];
        int w = snprintf(keeps + len, sizeof keeps - len, "%s%s", len ? ", " : "",
                         cg_optim_buffer_name(k));
        len += w > 0 && (size_t)w < sizeof keeps - len ? (size_t)w : 0;
    }
    cg_set_error("optim_state: %s optimizer has no state '%s' (it keeps %s)", type_names[c->type],
                 what ? what : "(null)", len ? keeps : "no buffers");
    return NULL;
}
