/* cgrad optim: the update rules of torch.optim's other first-order
 * optimizers, Adadelta, Adamax, NAdam, RAdam, ASGD and Rprop (optim.c runs
 * them, with its own types', in its one parallel region).
 *
 * Each follows its single-tensor implementation in PyTorch 1.13
 * (torch/optim/{adadelta,adamax,nadam,radam,asgd,rprop}.py) operation by
 * operation: scalar factors in double, as Python computes them, rounded to
 * float once where ATen takes a Python number into a float32 kernel; the
 * float32 scalar state (NAdam's mu_product, ASGD's eta and mu) in float,
 * as PyTorch's 0-dim tensors hold it. */
#include "optim/optim.h"

#include "core/vmath.h"
#include "optim/optim_impl.h"

#include <math.h>

/* ------------------------------------------------ per-step constants */

/* The float32 scalar k of slot s */
static float *scalar(slot *s, int k) { return cg_data(s->buf[k]); }

void cg_optim_prepare_more(const cg_optim_config *c, slot *s, update_job *u, double lr)
{
    const double t = (double)s->step; /* step_t.item(), after step_t += 1 */
    switch (c->type) {
    case CG_OPTIM_ADAMAX: /* clr = lr / (1 - beta1 ** step) */
        u->neg_step = (float)-(lr / (1 - pow(c->beta1, t)));
        break;
    case CG_OPTIM_NADAM: {
        float *mp = scalar(s, CG_OPTIM_BUF_MU_PRODUCT);
        if (u->first)
            *mp = 1.0f; /* state['mu_product'] = torch.tensor(1.) */
        const double mu = c->beta1 * (1. - 0.5 * pow(0.96, t * c->momentum_decay));
        const double mu_next = c->beta1 * (1. - 0.5 * pow(0.96, (t + 1) * c->momentum_decay));
        *mp = *mp * (float)mu;                                  /* mu_product *= mu */
        const float mp_next = *mp * (float)mu * (float)mu_next; /* mu_product * mu * mu_next */
        u->bc2 = (float)(1 - pow(c->beta2, t));
        u->neg_step = (float)(-lr * (1. - mu) / (1. - (double)*mp));
        u->neg_step2 = (float)(-lr * mu_next / (1. - (double)mp_next));
        break;
    }
    case CG_OPTIM_RADAM: {
        const double bc1 = 1 - pow(c->beta1, t), bc2 = 1 - pow(c->beta2, t);
        const double rho_inf = 2 / (1 - c->beta2) - 1;
        const double rho_t = rho_inf - 2 * t * pow(c->beta2, t) / bc2;
        u->bc1 = (float)bc1;
        u->lr = (float)lr;
        u->rectify = rho_t > 5.;
        if (u->rectify) {
            u->rect = (float)sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                                  ((rho_inf - 4) * (rho_inf - 2) * rho_t));
            u->bc2_sqrt = (float)sqrt(bc2);
        }
        break;
    }
    case CG_OPTIM_ASGD: {
        float *eta = scalar(s, CG_OPTIM_BUF_ETA), *mu = scalar(s, CG_OPTIM_BUF_MU);
        if (u->first) { /* the state PyTorch makes at a parameter's first step */
            *eta = (float)lr;
            *mu = 1.0f;
        }
        u->decay = (float)(1 - c->lambd * (double)*eta); /* param.mul_(1 - lambd * eta) */
        u->neg_lr = (float)-(double)*eta;                /* param.add_(grad, alpha=-eta) */
        u->mu = *mu;
        *eta = (float)(lr / pow(1 + c->lambd * lr * t, c->alpha));
        const double past = t - c->t0; /* 1 / max(1, step - t0) */
        *mu = (float)(1 / (past > 1 ? past : 1));
        break;
    }
    case CG_OPTIM_RPROP: u->lr = (float)lr; break; /* the step size's start */
    default: break;                                /* Adadelta: neg_lr alone */
    }
}

/* ------------------------------------------------------------ updates */
/* Compiled as optim.c's (EW_CLONES: no contraction, the same bits on every
 * CPU); each element by one thread. PyTorch's CPU kernels fuse two of the
 * operations these rules use (measured on 1.13 with an FMA unit, every CPU
 * since 2013): add_(x, alpha=a) is fma(a, x, self) and addcmul_(t1, t2,
 * value=v) is fma(v*t1, t2, self), while addcdiv_ is not fused; so here
 * fmaf where PyTorch fuses, and a plain product and sum where it does not
 * (fmaf is exact on every CPU: its bits do not depend on the clone). */

/* grad.add(param, alpha=wd), if wd != 0 */
static inline float l2(float g, float wd, float p) { return wd != 0 ? fmaf(wd, p, g) : g; }

EW_CLONES static void adadelta_update(float *restrict p, const float *restrict g0,
                                      float *restrict sq, float *restrict acc, int64_t n, float wd,
                                      float rho, float a1, float eps, float neg_lr)
{
    for (int64_t i = 0; i < n; i++) {
        float g = l2(g0[i], wd, p[i]);
        sq[i] = fmaf(a1 * g, g, sq[i] * rho); /* square_avg.mul_(rho).addcmul_(g, g, 1-rho) */
        float std = sqrtf(sq[i] + eps);       /* square_avg.add(eps).sqrt_() */
        float delta =
            sqrtf(acc[i] + eps) / std * g; /* acc_delta.add(eps).sqrt_().div_(std).mul_(g) */
        acc[i] = fmaf(a1 * delta, delta, acc[i] * rho);
        p[i] = fmaf(neg_lr, delta, p[i]); /* param.add_(delta, alpha=-lr) */
    }
}

EW_CLONES static void adamax_update(float *restrict p, const float *restrict g0, float *restrict m,
                                    float *restrict u, int64_t n, float wd, float b1, float a1,
                                    float b2, float eps, float neg_clr)
{
    for (int64_t i = 0; i < n; i++) {
        float g = l2(g0[i], wd, p[i]);
        m[i] = fmaf(a1, g, m[i] * b1); /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */
        /* torch.amax(cat([exp_inf.mul_(b2), g.abs().add_(eps)]), 0) */
        u[i] = maximum(u[i] * b2, fabsf(g) + eps);
        p[i] = p[i] + neg_clr * m[i] / u[i]; /* param.addcdiv_(exp_avg, exp_inf, -clr) */
    }
}

EW_CLONES static void nadam_update(float *restrict p, const float *restrict g0, float *restrict m,
                                   float *restrict v, int64_t n, float wd, float b1, float a1,
                                   float b2, float a2, float bc2, float eps, float c_grad,
                                   float c_avg)
{
    for (int64_t i = 0; i < n; i++) {
        float g = l2(g0[i], wd, p[i]);
        m[i] = fmaf(a1, g, m[i] * b1);         /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */
        v[i] = fmaf(a2 * g, g, v[i] * b2);     /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2) */
        float denom = sqrtf(v[i] / bc2) + eps; /* exp_avg_sq.div(bc2).sqrt().add_(eps) */
        float pi = p[i] + c_grad * g / denom;  /* param.addcdiv_(grad, denom, value=...) */
        p[i] = pi + c_avg * m[i] / denom;      /* param.addcdiv_(exp_avg, denom, value=...) */
    }
}

EW_CLONES static void radam_update(float *restrict p, const float *restrict g0, float *restrict m,
                                   float *restrict v, int64_t n, float wd, float b1, float a1,
                                   float b2, float a2, float bc1, float lr, bool rectify,
                                   float bc2_sqrt, float eps, float rect)
{
    for (int64_t i = 0; i < n; i++) {
        float g = l2(g0[i], wd, p[i]);
        m[i] = fmaf(a1, g, m[i] * b1);     /* exp_avg.mul_(b1).add_(g, alpha=1-b1) */
        v[i] = fmaf(a2 * g, g, v[i] * b2); /* exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2) */
        float bcm = m[i] / bc1;            /* exp_avg / bias_correction1 */
        if (rectify) {
            /* sqrt(bc2) / exp_avg_sq.sqrt().add_(eps): Tensor.__rdiv__ is
             * reciprocal() * sqrt(bc2) */
            float adaptive = 1.0f / (sqrtf(v[i]) + eps) * bc2_sqrt;
            p[i] = p[i] + -1.0f * (bcm * lr * adaptive * rect); /* param.add_(..., alpha=-1) */
        } else {
            p[i] = p[i] + -1.0f * (bcm * lr);
        }
    }
}

EW_CLONES static void asgd_update(float *restrict p, const float *restrict g0, float *restrict ax,
                                  int64_t n, float wd, float decay, float neg_eta, float mu)
{
    for (int64_t i = 0; i < n; i++) {
        float g = l2(g0[i], wd, p[i]);
        float pi = p[i] * decay;   /* param.mul_(1 - lambd * eta) */
        pi = fmaf(neg_eta, g, pi); /* param.add_(grad, alpha=-eta) */
        p[i] = pi;
        ax[i] = mu != 1 ? ax[i] + (pi - ax[i]) * mu : pi; /* ax.add_(param.sub(ax).mul(mu)) */
    }
}

/* torch.sign: 1, -1, or 0 (for 0 and NaN) */
static inline float sign_of(float x) { return (float)((0 < x) - (x < 0)); }

EW_CLONES static void rprop_update(float *restrict p, const float *restrict g0,
                                   float *restrict prev, float *restrict ss, int64_t n, bool first,
                                   float lr, float etaminus, float etaplus, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++) {
        if (first) { /* the state PyTorch makes at a parameter's first step */
            prev[i] = 0;
            ss[i] = lr;
        }
        float g = g0[i];
        float s = sign_of(g * prev[i]); /* grad.mul(prev).sign(), then etaplus, etaminus, 1 */
        float f = s > 0 ? etaplus : s < 0 ? etaminus : 1.0f;
        float st = ss[i] * f;      /* step_size.mul_(sign).clamp_(min, max) */
        st = st < lo ? lo : st;    /* std::max(a, min) */
        ss[i] = hi < st ? hi : st; /* std::min(a, max) */
        if (f == etaminus)
            g = 0;                                /* grad[sign.eq(etaminus)] = 0 */
        p[i] = p[i] + -1.0f * sign_of(g) * ss[i]; /* param.addcmul_(grad.sign(), step_size, -1) */
        prev[i] = g;
    }
}

/* Buffer k of job u from element a on, or NULL */
static float *at(const update_job *u, int k, int64_t a) { return u->buf[k] ? u->buf[k] + a : NULL; }

void cg_optim_update_more(const cg_optim_config *c, const update_job *u, int64_t a, int64_t n)
{
    float *p = u->p + a;
    const float *g = u->g + a;
    const float b1 = (float)c->beta1, a1 = (float)(1 - c->beta1);
    const float b2 = (float)c->beta2, a2 = (float)(1 - c->beta2), eps = (float)c->eps;
    switch (c->type) {
    case CG_OPTIM_ADADELTA:
        adadelta_update(p, g, at(u, CG_OPTIM_BUF_SQUARE_AVG, a), at(u, CG_OPTIM_BUF_ACC_DELTA, a),
                        n, u->wd, (float)c->rho, (float)(1 - c->rho), eps, u->neg_lr);
        break;
    case CG_OPTIM_ADAMAX:
        adamax_update(p, g, at(u, CG_OPTIM_BUF_EXP_AVG, a), at(u, CG_OPTIM_BUF_EXP_INF, a), n,
                      u->wd, b1, a1, b2, eps, u->neg_step);
        break;
    case CG_OPTIM_NADAM:
        nadam_update(p, g, at(u, CG_OPTIM_BUF_EXP_AVG, a), at(u, CG_OPTIM_BUF_EXP_AVG_SQ, a), n,
                     u->wd, b1, a1, b2, a2, u->bc2, eps, u->neg_step, u->neg_step2);
        break;
    case CG_OPTIM_RADAM:
        radam_update(p, g, at(u, CG_OPTIM_BUF_EXP_AVG, a), at(u, CG_OPTIM_BUF_EXP_AVG_SQ, a), n,
                     u->wd, b1, a1, b2, a2, u->bc1, u->lr, u->rectify, u->bc2_sqrt, eps, u->rect);
        break;
    case CG_OPTIM_ASGD:
        asgd_update(p, g, at(u, CG_OPTIM_BUF_AX, a), n, u->wd, u->decay, u->neg_lr, u->mu);
        break;
    case CG_OPTIM_RPROP:
        rprop_update(p, g, at(u, CG_OPTIM_BUF_PREV, a), at(u, CG_OPTIM_BUF_STEP_SIZE, a), n,
                     u->first, u->lr, (float)c->etaminus, (float)c->etaplus,
                     (float)c->step_size_min, (float)c->step_size_max);
        break;
    default: break;
    }
}
