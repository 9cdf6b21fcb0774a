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

double cg_lr_step_decay(int64_t step, int64_t step_size, double gamma, double lr)
{
    if (step < 0 || step_size < 1 || !(gamma > 0.0) || !isfinite(gamma)) {
        cg_set_error("lr_step_decay: need step >= 0 and step_size >= 1 and a finite gamma > 0 "
                     "(got %lld, %lld and %g)",
                     (long long)step, (long long)step_size, gamma);
        return NAN;
    }
    /* StepLR's products, one at a time, up to 65,536 of them (a far step
     * of a gamma near 1 would take billions): the rest as one power */
    int64_t k = step / step_size;
    for (; k > 0 && k > (step / step_size) - 65536; k--) {
        double next = lr * gamma;
        if (next == lr) /* a fixed point: 0, inf, or lr for gamma 1 */
            return lr;
        lr = next;
    }
    return k > 0 ? lr * pow(gamma, (double)k) : lr;
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
    }
    cg_set_error("schedule_lr: unknown schedule kind %d", (int)s->kind);
    return NAN;
}

const char *cg_schedule_name(cg_schedule_kind k)
{
    static const char *const names[] = {"constant", "cosine", "noam", "linear", "step", "wsd"};
    return ((int)k >= 0 && (int)k < 6) ? names[k] : "?";
}

bool cg_schedule_parse(const char *name, cg_schedule_kind *out)
{
    for (int k = 0; name && k <= (int)CG_SCHED_WSD; k++)
        if (!strcmp(name, cg_schedule_name((cg_schedule_kind)k))) {
            *out = (cg_schedule_kind)k;
            return true;
        }
    cg_set_error("unknown schedule '%.60s' (constant, cosine, noam, linear, step, wsd)",
                 name ? name : "(null)");
    return false;
}
