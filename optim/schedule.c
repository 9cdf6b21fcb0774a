/* cgrad optim: learning-rate schedules (see schedule.h for the formulas). */
#include "optim/schedule.h"

#include <math.h>
#include <string.h>

#include "core/error.h"

/* The arguments of the warm-up schedules (cosine and linear): step and
 * warmup >= 0 (warmup 0, step -1: 0 / 0), steps >= 0 (a far one overflowed
 * steps - warmup, or steps - step); false + an error naming the schedule
 * otherwise. */
static bool warmup_args_ok(const char *name, int64_t step, int64_t steps, int64_t warmup)
{
    if (step < 0 || warmup < 0) {
        cg_set_error("%s: need step >= 0 and warmup >= 0 (got %lld and %lld)", name,
                     (long long)step, (long long)warmup);
        return false;
    }
    if (steps < 0) {
        cg_set_error("%s: need steps >= 0 (got %lld)", name, (long long)steps);
        return false;
    }
    return true;
}

double cg_lr_warmup_cosine(int64_t step, int64_t steps, int64_t warmup, double hi, double lo)
{
    if (!warmup_args_ok("lr_warmup_cosine", step, steps, warmup))
        return NAN;
    if (step < warmup)
        return hi * (double)(step + 1) / (double)warmup;
    int64_t span = steps - warmup > 1 ? steps - warmup : 1;
    double r = (double)(step - warmup) / (double)span;
    if (r > 1.0)
        r = 1.0;
    return lo + 0.5 * (1 + cos(M_PI * r)) * (hi - lo);
}

double cg_lr_noam(int64_t step, int64_t d_model, int64_t warmup, double factor)
{
    if (d_model < 1 || warmup < 0) {
        cg_set_error("lr_noam: need d_model >= 1 and warmup >= 0 (got %lld and %lld)",
                     (long long)d_model, (long long)warmup);
        return NAN;
    }
    if (step <= 0)
        return 0.0;
    double s = (double)step;
    double a = pow(s, -0.5), b = s * pow((double)warmup, -1.5);
    return factor * pow((double)d_model, -0.5) * (a < b ? a : b);
}

double cg_lr_warmup_linear(int64_t step, int64_t steps, int64_t warmup, double hi, double lo)
{
    if (!warmup_args_ok("lr_warmup_linear", step, steps, warmup))
        return NAN;
    if (step < warmup)
        return hi * ((double)step / (double)(warmup > 1 ? warmup : 1));
    double f = (double)(steps - step) / (double)(steps - warmup > 1 ? steps - warmup : 1);
    return lo + (hi - lo) * (f > 0.0 ? f : 0.0);
}

/* lr times gamma k times, as StepLR's and ExponentialLR's schedulers
 * multiply it step by step, up to 65,536 products (a far step of a gamma
 * near 1 would take billions): the rest as one power */
static double decay_products(int64_t k, double gamma, double lr)
{
    const int64_t all = k;
    for (; k > 0 && k > all - 65536; k--) {
        double next = lr * gamma;
        if (next == lr) /* a fixed point: 0, inf, or lr for gamma 1 */
            return lr;
        lr = next;
    }
    return k > 0 ? lr * pow(gamma, (double)k) : lr;
}

double cg_lr_step_decay(int64_t step, int64_t step_size, double gamma, double lr)
{
    if (step < 0 || step_size < 1 || !(gamma > 0.0) || !isfinite(gamma)) {
        cg_set_error("lr_step_decay: need step >= 0 and step_size >= 1 and a finite gamma > 0 "
                     "(got %lld, %lld and %g)",
                     (long long)step, (long long)step_size, gamma);
        return NAN;
    }
    return decay_products(step / step_size, gamma, lr);
}

/* step >= 0 and a finite gamma > 0 (StepLR's rule), or false + an error
 * naming the schedule */
static bool gamma_ok(const char *name, int64_t step, double gamma)
{
    if (step < 0 || !(gamma > 0.0) || !isfinite(gamma)) {
        cg_set_error("%s: need step >= 0 and a finite gamma > 0 (got %lld and %g)", name,
                     (long long)step, gamma);
        return false;
    }
    return true;
}

/* step >= 0 and total >= 1 (what, PyTorch's argument name), or false + an
 * error naming the schedule */
static bool span_ok(const char *name, int64_t step, const char *what, int64_t total)
{
    if (step < 0 || total < 1) {
        cg_set_error("%s: need step >= 0 and %s >= 1 (got %lld and %lld)", name, what,
                     (long long)step, (long long)total);
        return false;
    }
    return true;
}

double cg_lr_exponential(int64_t step, double gamma, double lr)
{
    return gamma_ok("lr_exponential", step, gamma) ? decay_products(step, gamma, lr) : NAN;
}

double cg_lr_multistep(int64_t step, const int64_t *milestones, int n, double gamma, double lr)
{
    if (!gamma_ok("lr_multistep", step, gamma))
        return NAN;
    if (!milestones || n < 1 || n > CG_SCHED_MAX_MILESTONES) {
        cg_set_error("lr_multistep: need 1 to %d milestones (got %d%s)", CG_SCHED_MAX_MILESTONES, n,
                     milestones ? "" : ", NULL");
        return NAN;
    }
    for (int i = 0; i < n; i++)
        if (milestones[i] < (i ? milestones[i - 1] : 0)) {
            cg_set_error("lr_multistep: need milestones >= 0 in increasing order (milestone %d "
                         "is %lld)",
                         i, (long long)milestones[i]);
            return NAN;
        }
    /* MultiStepLR's lr * gamma ** count at each milestone reached */
    for (int i = 0, c; i < n && milestones[i] <= step; i += c) {
        for (c = 1; i + c < n && milestones[i + c] == milestones[i]; c++)
            ;
        lr = lr * pow(gamma, (double)c);
    }
    return lr;
}

double cg_lr_polynomial(int64_t step, int64_t total_iters, double power, double lr)
{
    if (!span_ok("lr_polynomial", step, "total_iters", total_iters))
        return NAN;
    if (!(power >= 0.0) || !isfinite(power)) {
        cg_set_error("lr_polynomial: need a finite power >= 0 (got %g)", power);
        return NAN;
    }
    int64_t t = step < total_iters ? step : total_iters;
    return lr * pow(1.0 - (double)t / (double)total_iters, power);
}

double cg_lr_cosine_restarts(int64_t step, int64_t t_0, int64_t t_mult, double lr, double eta_min)
{
    if (!span_ok("lr_cosine_restarts", step, "T_0", t_0))
        return NAN;
    if (t_mult < 1) {
        cg_set_error("lr_cosine_restarts: need T_mult >= 1 (got %lld)", (long long)t_mult);
        return NAN;
    }
    /* its T_cur and T_i: cycles of t_0, t_0 t_mult, ... (one past the far
     * end of int64 is the last: the step is inside it) */
    int64_t cur = step, len = t_0;
    double t_i = (double)t_0;
    if (t_mult == 1)
        cur = step % t_0;
    while (t_mult > 1 && cur >= len) {
        cur -= len;
        t_i = (double)len * (double)t_mult;
        if (len > INT64_MAX / t_mult)
            break;
        len *= t_mult;
        t_i = (double)len;
    }
    return eta_min + (lr - eta_min) * (1 + cos(M_PI * (double)cur / t_i)) / 2;
}

/* OneCycleLR's phase of step and how far into it (pct), or false + error:
 * the checks of cg_lr_onecycle. Its phases' rates: from[*i] to to[*i]; its
 * momentum's: mfrom, mto (0: max_momentum, 1: base_momentum). */
typedef struct {
    int i;
    double pct;
    double from[3], to[3];
    int mfrom[3], mto[3];
} onecycle_at;

static bool onecycle_phase(int64_t step, int64_t total_steps, double max_lr, double pct_start,
                           cg_anneal anneal, double div_factor, double final_div_factor,
                           bool three_phase, onecycle_at *at)
{
    if (step < 0 || total_steps < 1 || step > total_steps) {
        cg_set_error("lr_onecycle: need total_steps >= 1 and a step in [0, total_steps] (got "
                     "%lld and %lld)",
                     (long long)total_steps, (long long)step);
        return false;
    }
    if (!(pct_start >= 0.0 && pct_start <= 1.0) ||
        (anneal != CG_ANNEAL_COS && anneal != CG_ANNEAL_LINEAR)) {
        cg_set_error("lr_onecycle: need pct_start in [0, 1] and anneal cos or linear (got %g "
                     "and %d)",
                     pct_start, (int)anneal);
        return false;
    }
    if (!(div_factor > 0.0) || !isfinite(div_factor) || !(final_div_factor > 0.0) ||
        !isfinite(final_div_factor)) {
        cg_set_error("lr_onecycle: need finite div_factor and final_div_factor > 0 (got %g and "
                     "%g)",
                     div_factor, final_div_factor);
        return false;
    }
    double initial = max_lr / div_factor, min_lr = initial / final_div_factor;
    /* OneCycleLR's phases: their last steps and the rates they go between */
    double end[3] = {pct_start * (double)total_steps - 1, (double)(total_steps - 1), 0};
    *at = (onecycle_at){.from = {initial, max_lr, initial},
                        .to = {max_lr, min_lr, min_lr},
                        .mfrom = {0, 1, 0},
                        .mto = {1, 0, 0}};
    int phases = 2;
    if (three_phase) {
        end[1] = 2 * pct_start * (double)total_steps - 2;
        end[2] = (double)(total_steps - 1);
        at->to[1] = initial;
        phases = 3;
    }
    double start = 0, s = (double)step;
    int i = 0;
    for (; i < phases - 1 && s > end[i]; i++)
        start = end[i];
    if (end[i] == start) {
        cg_set_error("lr_onecycle: step %lld is in a phase of length 0 (pct_start %g of %lld "
                     "steps; PyTorch divides by zero)",
                     (long long)step, pct_start, (long long)total_steps);
        return false;
    }
    at->i = i;
    at->pct = (s - start) / (end[i] - start);
    return true;
}

/* OneCycleLR's _anneal_func from `from` to `to` at pct */
static double anneal_at(cg_anneal anneal, double from, double to, double pct)
{
    if (anneal == CG_ANNEAL_LINEAR)
        return (to - from) * pct + from;
    return to + (from - to) / 2.0 * (cos(M_PI * pct) + 1);
}

double cg_lr_onecycle(int64_t step, int64_t total_steps, double max_lr, double pct_start,
                      cg_anneal anneal, double div_factor, double final_div_factor,
                      bool three_phase)
{
    onecycle_at at;
    if (!onecycle_phase(step, total_steps, max_lr, pct_start, anneal, div_factor, final_div_factor,
                        three_phase, &at))
        return NAN;
    return anneal_at(anneal, at.from[at.i], at.to[at.i], at.pct);
}

double cg_lr_linear_lr(int64_t step, double start_factor, double end_factor, int64_t total_iters,
                       double lr)
{
    if (!span_ok("lr_linear_lr", step, "total_iters", total_iters))
        return NAN;
    if (!(start_factor > 0.0 && start_factor <= 1.0) || !(end_factor >= 0.0 && end_factor <= 1.0)) {
        cg_set_error("lr_linear_lr: need start_factor in (0, 1] and end_factor in [0, 1] (got "
                     "%g and %g)",
                     start_factor, end_factor);
        return NAN;
    }
    int64_t t = step < total_iters ? step : total_iters;
    return lr * (start_factor + (end_factor - start_factor) * (double)t / (double)total_iters);
}

double cg_lr_constant_lr(int64_t step, double factor, int64_t total_iters, double lr)
{
    if (!span_ok("lr_constant_lr", step, "total_iters", total_iters))
        return NAN;
    if (!(factor > 0.0 && factor <= 1.0)) {
        cg_set_error("lr_constant_lr: need factor in (0, 1] (got %g)", factor);
        return NAN;
    }
    double lo = lr * factor; /* ConstantLR's products: lr * factor, then * (1 / factor) */
    return step < total_iters ? lo : lo * (1.0 / factor);
}

cg_schedule cg_schedule_constant(double lr)
{
    return (cg_schedule){.kind = CG_SCHED_CONSTANT, .lr = lr};
}

cg_schedule cg_schedule_cosine(int64_t steps, int64_t warmup, double hi, double lo)
{
    return (cg_schedule){
        .kind = CG_SCHED_COSINE, .lr = hi, .lr_min = lo, .warmup = warmup, .steps = steps};
}

cg_schedule cg_schedule_noam(int64_t d_model, int64_t warmup, double factor)
{
    return (cg_schedule){
        .kind = CG_SCHED_NOAM, .d_model = d_model, .warmup = warmup, .factor = factor};
}

cg_schedule cg_schedule_linear(int64_t steps, int64_t warmup, double hi, double lo)
{
    return (cg_schedule){
        .kind = CG_SCHED_LINEAR, .lr = hi, .lr_min = lo, .warmup = warmup, .steps = steps};
}

double cg_lr_wsd(int64_t step, int64_t steps, int64_t warmup, int64_t cooldown, double hi,
                 double lo)
{
    if (!warmup_args_ok("lr_wsd", step, steps, warmup))
        return NAN;
    if (cooldown < 0 || cooldown > steps) {
        cg_set_error("lr_wsd: need cooldown in [0, steps] (got %lld of %lld)", (long long)cooldown,
                     (long long)steps);
        return NAN;
    }
    if (step < warmup)
        return hi * (double)(step + 1) / (double)warmup;
    int64_t start = steps - cooldown;
    if (step < start)
        return hi;
    double r = (double)(step - start) / (double)(cooldown > 1 ? cooldown : 1);
    return r < 1.0 ? hi + (lo - hi) * r : lo;
}

cg_schedule cg_schedule_wsd(int64_t steps, int64_t warmup, int64_t cooldown, double hi, double lo)
{
    return (cg_schedule){.kind = CG_SCHED_WSD,
                         .lr = hi,
                         .lr_min = lo,
                         .warmup = warmup,
                         .steps = steps,
                         .cooldown = cooldown};
}

cg_schedule cg_schedule_step(int64_t step_size, double gamma, double lr)
{
    return (cg_schedule){.kind = CG_SCHED_STEP, .lr = lr, .step_size = step_size, .gamma = gamma};
}

cg_schedule cg_schedule_exponential(double gamma, double lr)
{
    return (cg_schedule){.kind = CG_SCHED_EXPONENTIAL, .lr = lr, .gamma = gamma};
}

cg_schedule cg_schedule_multistep(const int64_t *milestones, int n, double gamma, double lr)
{
    cg_schedule s = {.kind = CG_SCHED_MULTISTEP, .lr = lr, .gamma = gamma};
    s.n_milestones = milestones ? n : 0;
    for (int i = 0; milestones && i < n && i < CG_SCHED_MAX_MILESTONES; i++)
        s.milestones[i] = milestones[i];
    return s;
}

cg_schedule cg_schedule_polynomial(int64_t total_iters, double power, double lr)
{
    return (cg_schedule){
        .kind = CG_SCHED_POLYNOMIAL, .lr = lr, .steps = total_iters, .power = power};
}

cg_schedule cg_schedule_cosine_restarts(int64_t t_0, int64_t t_mult, double lr, double eta_min)
{
    return (cg_schedule){.kind = CG_SCHED_COSINE_RESTARTS,
                         .lr = lr,
                         .lr_min = eta_min,
                         .steps = t_0,
                         .t_mult = t_mult};
}

cg_schedule cg_schedule_onecycle(int64_t total_steps, double max_lr, double pct_start,
                                 cg_anneal anneal, double div_factor, double final_div_factor,
                                 bool three_phase)
{
    return (cg_schedule){.kind = CG_SCHED_ONECYCLE,
                         .lr = max_lr,
                         .steps = total_steps,
                         .pct_start = pct_start,
                         .anneal = anneal,
                         .div_factor = div_factor,
                         .final_div_factor = final_div_factor,
                         .three_phase = three_phase};
}

cg_schedule cg_schedule_linear_lr(double start_factor, double end_factor, int64_t total_iters,
                                  double lr)
{
    return (cg_schedule){.kind = CG_SCHED_LINEAR_LR,
                         .lr = lr,
                         .factor = start_factor,
                         .end_factor = end_factor,
                         .steps = total_iters};
}

cg_schedule cg_schedule_constant_lr(double factor, int64_t total_iters, double lr)
{
    return (cg_schedule){
        .kind = CG_SCHED_CONSTANT_LR, .lr = lr, .factor = factor, .steps = total_iters};
}

cg_schedule cg_schedule_sequential(const cg_schedule *children, int n, const int64_t *milestones)
{
    cg_schedule s = {.kind = CG_SCHED_SEQUENTIAL, .children = children, .n_children = n};
    s.n_milestones = n - 1;
    for (int i = 0; milestones && i < n - 1 && i < CG_SCHED_MAX_MILESTONES; i++)
        s.milestones[i] = milestones[i];
    if (!milestones && n > 1)
        s.n_milestones = -1; /* refused by cg_schedule_lr */
    return s;
}

cg_schedule cg_schedule_chained(const cg_schedule *children, int n, double lr)
{
    return (cg_schedule){.kind = CG_SCHED_CHAINED, .lr = lr, .children = children, .n_children = n};
}

cg_schedule cg_schedule_cycle_momentum(cg_schedule s, double base_momentum, double max_momentum)
{
    s.cycle_momentum = true;
    s.base_momentum = base_momentum;
    s.max_momentum = max_momentum;
    return s;
}

/* A composite's children: 1 to CG_SCHED_MAX_MILESTONES + 1 of them, none
 * moving the momentum; or false + an error naming the composite */
static bool children_ok(const cg_schedule *s, const char *name)
{
    if (!s->children || s->n_children < 1 || s->n_children > CG_SCHED_MAX_MILESTONES + 1) {
        cg_set_error("%s: need 1 to %d children (got %d%s)", name, CG_SCHED_MAX_MILESTONES + 1,
                     s->n_children, s->children ? "" : ", NULL");
        return false;
    }
    for (int i = 0; i < s->n_children; i++)
        if (s->children[i].cycle_momentum) {
            cg_set_error("%s: child %d moves the momentum (cycle_momentum): only a onecycle "
                         "schedule applied alone does",
                         name, i);
            return false;
        }
    return true;
}

/* SequentialLR: child i from milestone i-1 on, counting from 0 there */
static double sequential_lr(const cg_schedule *s, int64_t step)
{
    if (!children_ok(s, "lr_sequential"))
        return NAN;
    if (s->n_milestones != s->n_children - 1) {
        cg_set_error("lr_sequential: need %d milestones for %d children (got %s)",
                     s->n_children - 1, s->n_children, s->n_milestones < 0 ? "NULL" : "fewer");
        return NAN;
    }
    for (int i = 0; i < s->n_milestones; i++)
        if (s->milestones[i] < (i ? s->milestones[i - 1] + 1 : 1)) {
            cg_set_error("lr_sequential: need milestones >= 1 in strictly increasing order "
                         "(milestone %d is %lld)",
                         i, (long long)s->milestones[i]);
            return NAN;
        }
    for (int i = 0; i < s->n_children; i++)
        if (s->children[i].kind == CG_SCHED_SEQUENTIAL || s->children[i].kind == CG_SCHED_CHAINED) {
            cg_set_error("lr_sequential: child %d is %s: a composite cannot be a child (PyTorch's "
                         "SequentialLR cannot step one)",
                         i, cg_schedule_name(s->children[i].kind));
            return NAN;
        }
    if (step < 0) {
        cg_set_error("lr_sequential: need step >= 0 (got %lld)", (long long)step);
        return NAN;
    }
    int i = 0;
    while (i < s->n_milestones && s->milestones[i] <= step)
        i++;
    return cg_schedule_lr(&s->children[i], step - (i ? s->milestones[i - 1] : 0));
}

/* ChainedScheduler: lr times each chainable child's factor (its rate at
 * lr 1) */
static double chained_lr(const cg_schedule *s, int64_t step)
{
    if (!children_ok(s, "lr_chained"))
        return NAN;
    double lr = s->lr;
    for (int i = 0; i < s->n_children; i++) {
        cg_schedule c = s->children[i];
        switch (c.kind) {
        case CG_SCHED_CONSTANT:
        case CG_SCHED_STEP:
        case CG_SCHED_EXPONENTIAL:
        case CG_SCHED_MULTISTEP:
        case CG_SCHED_POLYNOMIAL:
        case CG_SCHED_LINEAR_LR:
        case CG_SCHED_CONSTANT_LR: break;
        default:
            cg_set_error("lr_chained: child %d (%s) sets the rate instead of scaling it: chain "
                         "constant, step, exponential, multistep, polynomial, linear_lr or "
                         "constant_lr",
                         i, cg_schedule_name(c.kind));
            return NAN;
        }
        c.lr = 1.0;
        double f = cg_schedule_lr(&c, step);
        if (isnan(f))
            return NAN;
        lr *= f;
    }
    return lr;
}

double cg_schedule_lr(const cg_schedule *s, int64_t step)
{
    if (!s) {
        cg_set_error("schedule_lr: schedule is NULL");
        return NAN;
    }
    switch (s->kind) {
    case CG_SCHED_CONSTANT: return s->lr;
    case CG_SCHED_COSINE: return cg_lr_warmup_cosine(step, s->steps, s->warmup, s->lr, s->lr_min);
    case CG_SCHED_NOAM: return cg_lr_noam(step, s->d_model, s->warmup, s->factor);
    case CG_SCHED_LINEAR: return cg_lr_warmup_linear(step, s->steps, s->warmup, s->lr, s->lr_min);
    case CG_SCHED_STEP: return cg_lr_step_decay(step, s->step_size, s->gamma, s->lr);
    case CG_SCHED_WSD: return cg_lr_wsd(step, s->steps, s->warmup, s->cooldown, s->lr, s->lr_min);
    case CG_SCHED_EXPONENTIAL: return cg_lr_exponential(step, s->gamma, s->lr);
    case CG_SCHED_MULTISTEP:
        return cg_lr_multistep(step, s->milestones, s->n_milestones, s->gamma, s->lr);
    case CG_SCHED_POLYNOMIAL: return cg_lr_polynomial(step, s->steps, s->power, s->lr);
    case CG_SCHED_COSINE_RESTARTS:
        return cg_lr_cosine_restarts(step, s->steps, s->t_mult, s->lr, s->lr_min);
    case CG_SCHED_ONECYCLE:
        return cg_lr_onecycle(step, s->steps, s->lr, s->pct_start, s->anneal, s->div_factor,
                              s->final_div_factor, s->three_phase);
    case CG_SCHED_LINEAR_LR:
        return cg_lr_linear_lr(step, s->factor, s->end_factor, s->steps, s->lr);
    case CG_SCHED_CONSTANT_LR: return cg_lr_constant_lr(step, s->factor, s->steps, s->lr);
    case CG_SCHED_SEQUENTIAL: return sequential_lr(s, step);
    case CG_SCHED_CHAINED: return chained_lr(s, step);
    }
    cg_set_error("schedule_lr: unknown schedule kind %d", (int)s->kind);
    return NAN;
}

const char *cg_schedule_name(cg_schedule_kind k)
{
    static const char *const names[] = {
        "constant", "cosine",      "noam",        "linear",     "step",
        "wsd",      "exponential", "multistep",   "polynomial", "cosine_restarts",
        "onecycle", "linear_lr",   "constant_lr", "sequential", "chained"};
    return ((int)k >= 0 && (int)k <= (int)CG_SCHED_CHAINED) ? names[k] : "?";
}

bool cg_schedule_parse(const char *name, cg_schedule_kind *out)
{
    for (int k = 0; name && k <= (int)CG_SCHED_CHAINED; k++)
        if (!strcmp(name, cg_schedule_name((cg_schedule_kind)k))) {
            *out = (cg_schedule_kind)k;
            return true;
        }
    cg_set_error("unknown schedule '%.60s' (constant, cosine, noam, linear, step, wsd, "
                 "exponential, multistep, polynomial, cosine_restarts, onecycle, linear_lr, "
                 "constant_lr, sequential, chained)",
                 name ? name : "(null)");
    return false;
}

bool cg_schedule_moves_momentum(const cg_schedule *s) { return s && s->cycle_momentum; }

double cg_schedule_momentum(const cg_schedule *s, int64_t step)
{
    if (!s) {
        cg_set_error("schedule_momentum: schedule is NULL");
        return NAN;
    }
    if (!s->cycle_momentum || s->kind != CG_SCHED_ONECYCLE) {
        cg_set_error("schedule_momentum: a %s schedule %s (OneCycleLR's cycle_momentum: a "
                     "onecycle schedule's)",
                     cg_schedule_name(s->kind),
                     s->cycle_momentum ? "cannot move the momentum" : "moves no momentum");
        return NAN;
    }
    if (!(s->base_momentum >= 0 && isfinite(s->base_momentum)) ||
        !(s->max_momentum >= 0 && isfinite(s->max_momentum))) {
        cg_set_error("schedule_momentum: need finite base_momentum and max_momentum >= 0 (got %g "
                     "and %g)",
                     s->base_momentum, s->max_momentum);
        return NAN;
    }
    onecycle_at at;
    if (!onecycle_phase(step, s->steps, s->lr, s->pct_start, s->anneal, s->div_factor,
                        s->final_div_factor, s->three_phase, &at))
        return NAN;
    const double m[2] = {s->max_momentum, s->base_momentum};
    return anneal_at(s->anneal, m[at.mfrom[at.i]], m[at.mto[at.i]], at.pct);
}

bool cg_schedule_apply(const cg_schedule *s, int64_t step, cg_optim *o)
{
    if (!o)
        return cg_error_null_input("cg_schedule_apply");
    cg_clear_error();
    double lr = cg_schedule_lr(s, step), m = 0;
    if (isnan(lr)) {
        if (!cg_has_error())
            cg_set_error("schedule_apply: the %s schedule's rate at step %lld is NaN",
                         cg_schedule_name(s->kind), (long long)step);
        return false;
    }
    bool moves = cg_schedule_moves_momentum(s);
    if (moves && isnan(m = cg_schedule_momentum(s, step)))
        return false;
    double was = cg_optim_lr(o);
    if (!cg_optim_set_lr(o, lr))
        return false;
    if (moves && !cg_optim_set_momentum(o, m)) {
        cg_optim_set_lr(o, was); /* taken before: taken again */
        return false;
    }
    return true;
}
