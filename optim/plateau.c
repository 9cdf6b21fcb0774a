/* cgrad optim: ReduceLROnPlateau (see plateau.h). */
#include "optim/plateau.h"

#include <math.h>
#include <stdlib.h>

#include "core/error.h"

struct cg_plateau {
    cg_plateau_mode mode;
    cg_plateau_threshold_mode threshold_mode;
    double factor, threshold, min_lr, eps;
    int64_t patience, cooldown;
    cg_plateau_state st;
};

cg_plateau *cg_plateau_new(cg_plateau_mode mode, double factor, int64_t patience, double threshold,
                           cg_plateau_threshold_mode threshold_mode, int64_t cooldown,
                           double min_lr, double eps)
{
    if ((mode != CG_PLATEAU_MIN && mode != CG_PLATEAU_MAX) ||
        (threshold_mode != CG_PLATEAU_REL && threshold_mode != CG_PLATEAU_ABS)) {
        cg_set_error("plateau_new: need mode min or max and threshold_mode rel or abs (got %d "
                     "and %d)",
                     (int)mode, (int)threshold_mode);
        return NULL;
    }
    if (!(factor >= 0.0 && factor < 1.0) || patience < 0 || cooldown < 0) {
        cg_set_error("plateau_new: need factor in [0, 1), patience >= 0 and cooldown >= 0 (got "
                     "%g, %lld and %lld)",
                     factor, (long long)patience, (long long)cooldown);
        return NULL;
    }
    if (!(threshold >= 0.0 && isfinite(threshold)) || !(min_lr >= 0.0 && isfinite(min_lr)) ||
        !(eps >= 0.0 && isfinite(eps))) {
        cg_set_error("plateau_new: need finite threshold, min_lr and eps >= 0 (got %g, %g and "
                     "%g)",
                     threshold, min_lr, eps);
        return NULL;
    }
    cg_plateau *p = malloc(sizeof *p);
    if (!p) {
        cg_set_error("plateau_new: out of memory");
        return NULL;
    }
    *p = (cg_plateau){.mode = mode,
                      .threshold_mode = threshold_mode,
                      .factor = factor,
                      .threshold = threshold,
                      .min_lr = min_lr,
                      .eps = eps,
                      .patience = patience,
                      .cooldown = cooldown,
                      .st = {.best = mode == CG_PLATEAU_MIN ? INFINITY : -INFINITY}};
    return p;
}

/* ReduceLROnPlateau.is_better, its products and comparisons (false for a
 * NaN a; a threshold of 1 in min rel mode makes an inf best's bar NaN:
 * nothing is better, as there) */
static bool is_better(const cg_plateau *p, double a, double best)
{
    if (p->mode == CG_PLATEAU_MIN)
        return p->threshold_mode == CG_PLATEAU_REL ? a < best * (1. - p->threshold)
                                                   : a < best - p->threshold;
    return p->threshold_mode == CG_PLATEAU_REL ? a > best * (p->threshold + 1.)
                                               : a > best + p->threshold;
}

double cg_plateau_step(cg_plateau *p, double metric, double lr)
{
    if (!p || !(lr >= 0.0) || !isfinite(lr)) {
        cg_set_error("plateau_step: need a plateau and a finite lr >= 0 (got %s and %g)",
                     p ? "one" : "NULL", lr);
        return NAN;
    }
    cg_plateau_state *s = &p->st;
    s->last_epoch++;
    if (is_better(p, metric, s->best)) {
        s->best = metric;
        s->num_bad_epochs = 0;
    } else {
        s->num_bad_epochs++;
    }
    if (s->cooldown_counter > 0) {
        s->cooldown_counter--;
        s->num_bad_epochs = 0;
    }
    if (s->num_bad_epochs > p->patience) {
        double cut = p->min_lr > lr * p->factor ? p->min_lr : lr * p->factor; /* max() */
        if (lr - cut > p->eps)
            lr = cut;
        s->cooldown_counter = p->cooldown;
        s->num_bad_epochs = 0;
    }
    return lr;
}

bool cg_plateau_step_optim(cg_plateau *p, double metric, cg_optim *o)
{
    if (!o)
        return cg_error_null_input("cg_plateau_step_optim");
    cg_plateau_state was = p ? p->st : (cg_plateau_state){0};
    double lr = cg_plateau_step(p, metric, cg_optim_lr(o));
    if (isnan(lr))
        return false;
    if (!cg_optim_set_lr(o, lr)) { /* a cut rate is a rate: not seen */
        p->st = was;
        return false;
    }
    return true;
}

cg_plateau_state cg_plateau_get_state(const cg_plateau *p)
{
    if (!p) {
        cg_set_error("plateau_get_state: plateau is NULL");
        return (cg_plateau_state){0};
    }
    return p->st;
}

bool cg_plateau_set_state(cg_plateau *p, const cg_plateau_state *st)
{
    if (!p || !st) {
        cg_set_error("plateau_set_state: %s is NULL", p ? "state" : "plateau");
        return false;
    }
    if (isnan(st->best) || st->num_bad_epochs < 0 || st->cooldown_counter < 0 ||
        st->last_epoch < 0) {
        cg_set_error("plateau_set_state: need a best that is not NaN and counts >= 0 (got %g, "
                     "%lld, %lld and %lld)",
                     st->best, (long long)st->num_bad_epochs, (long long)st->cooldown_counter,
                     (long long)st->last_epoch);
        return false;
    }
    p->st = *st;
    return true;
}

void cg_plateau_free(cg_plateau *p) { free(p); }
