/* cgrad optim: the configurations (PyTorch's argument orders and
 * defaults, and their checks) and the one description of what each type
 * keeps and saves: its hyper-parameters and its state buffers, which
 * optim.c (construction, updates, cg_optim_state) and optim_state.c (save,
 * load, copies, sharding) read. */
#include "optim/optim.h"

#include "optim/optim_impl.h"

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

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

cg_optim_config cg_rmsprop_config(double lr, double alpha, double eps, double momentum,
                                  bool centered)
{
    return (cg_optim_config){.type = CG_OPTIM_RMSPROP,
                             .lr = lr,
                             .alpha = alpha,
                             .eps = eps,
                             .momentum = momentum,
                             .centered = centered};
}

cg_optim_config cg_adagrad_config(double lr, double lr_decay, double initial_accumulator_value,
                                  double eps)
{
    return (cg_optim_config){.type = CG_OPTIM_ADAGRAD,
                             .lr = lr,
                             .lr_decay = lr_decay,
                             .initial_accumulator_value = initial_accumulator_value,
                             .eps = eps};
}

cg_optim_config cg_adadelta_config(double lr, double rho, double eps)
{
    return (cg_optim_config){.type = CG_OPTIM_ADADELTA, .lr = lr, .rho = rho, .eps = eps};
}

cg_optim_config cg_adamax_config(double lr, double beta1, double beta2, double eps)
{
    cg_optim_config c = cg_adam_config(lr, beta1, beta2, eps);
    c.type = CG_OPTIM_ADAMAX;
    return c;
}

cg_optim_config cg_radam_config(double lr, double beta1, double beta2, double eps)
{
    cg_optim_config c = cg_adam_config(lr, beta1, beta2, eps);
    c.type = CG_OPTIM_RADAM;
    return c;
}

cg_optim_config cg_nadam_config(double lr, double beta1, double beta2, double eps,
                                double momentum_decay)
{
    cg_optim_config c = cg_adam_config(lr, beta1, beta2, eps);
    c.type = CG_OPTIM_NADAM;
    c.momentum_decay = momentum_decay;
    return c;
}

cg_optim_config cg_asgd_config(double lr, double lambd, double alpha, double t0)
{
    return (cg_optim_config){
        .type = CG_OPTIM_ASGD, .lr = lr, .lambd = lambd, .alpha = alpha, .t0 = t0};
}

cg_optim_config cg_rprop_config(double lr, double etaminus, double etaplus, double step_size_min,
                                double step_size_max)
{
    return (cg_optim_config){.type = CG_OPTIM_RPROP,
                             .lr = lr,
                             .etaminus = etaminus,
                             .etaplus = etaplus,
                             .step_size_min = step_size_min,
                             .step_size_max = step_size_max};
}

cg_optim_config cg_sgd_default(double lr) { return cg_sgd_config(lr, 0.0, false); }
cg_optim_config cg_adam_default(double lr) { return cg_adam_config(lr, 0.9, 0.999, 1e-8); }
cg_optim_config cg_adamw_default(double lr) { return cg_adamw_config(lr, 0.9, 0.999, 1e-8); }
cg_optim_config cg_rmsprop_default(double lr)
{
    return cg_rmsprop_config(lr, 0.99, 1e-8, 0.0, false);
}
cg_optim_config cg_adagrad_default(double lr) { return cg_adagrad_config(lr, 0.0, 0.0, 1e-10); }
cg_optim_config cg_adadelta_default(double lr) { return cg_adadelta_config(lr, 0.9, 1e-6); }
cg_optim_config cg_adamax_default(double lr) { return cg_adamax_config(lr, 0.9, 0.999, 1e-8); }
cg_optim_config cg_nadam_default(double lr) { return cg_nadam_config(lr, 0.9, 0.999, 1e-8, 4e-3); }
cg_optim_config cg_radam_default(double lr) { return cg_radam_config(lr, 0.9, 0.999, 1e-8); }
cg_optim_config cg_asgd_default(double lr) { return cg_asgd_config(lr, 1e-4, 0.75, 1e6); }
cg_optim_config cg_rprop_default(double lr) { return cg_rprop_config(lr, 0.5, 1.2, 1e-6, 50); }

/* ------------------------------------------- hyper-parameters and buffers */

#define TYPE(t) (1u << CG_OPTIM_##t)
#define ALL_TYPES ((1u << CG_OPTIM_NTYPES) - 1)
#define ADAMS (TYPE(ADAM) | TYPE(ADAMW))
#define BETAS (ADAMS | TYPE(ADAMAX) | TYPE(NADAM) | TYPE(RADAM)) /* the types with betas */
#define FIELD(f) offsetof(cg_optim_config, f)

enum { H_LR, H_MOMENTUM, H_NESTEROV, H_BETA1, H_BETA2, H_EPS, H_AMSGRAD, H_CENTERED };

/* In the order they are saved: the first six as ever, for every type. */
const optim_hyper cg_optim_hypers[] = {
    [H_LR] = {"lr", FIELD(lr), false, ALL_TYPES, false},
    [H_MOMENTUM] = {"momentum", FIELD(momentum), false, ALL_TYPES, false},
    [H_NESTEROV] = {"nesterov", FIELD(nesterov), true, ALL_TYPES, false},
    [H_BETA1] = {"beta1", FIELD(beta1), false, ALL_TYPES, false},
    [H_BETA2] = {"beta2", FIELD(beta2), false, ALL_TYPES, false},
    [H_EPS] = {"eps", FIELD(eps), false, ALL_TYPES, false},
    [H_AMSGRAD] = {"amsgrad", FIELD(amsgrad), true, ADAMS, true},
    [H_CENTERED] = {"centered", FIELD(centered), true, TYPE(RMSPROP), false},
    {"alpha", FIELD(alpha), false, TYPE(RMSPROP) | TYPE(ASGD), false},
    {"lr_decay", FIELD(lr_decay), false, TYPE(ADAGRAD), false},
    {"initial_accumulator_value", FIELD(initial_accumulator_value), false, TYPE(ADAGRAD), false},
    {"dampening", FIELD(dampening), false, TYPE(SGD), true},
    {"rho", FIELD(rho), false, TYPE(ADADELTA), false},
    {"momentum_decay", FIELD(momentum_decay), false, TYPE(NADAM), false},
    {"lambd", FIELD(lambd), false, TYPE(ASGD), false},
    {"t0", FIELD(t0), false, TYPE(ASGD), false},
    {"etaminus", FIELD(etaminus), false, TYPE(RPROP), false},
    {"etaplus", FIELD(etaplus), false, TYPE(RPROP), false},
    {"step_size_min", FIELD(step_size_min), false, TYPE(RPROP), false},
    {"step_size_max", FIELD(step_size_max), false, TYPE(RPROP), false},
};
const int cg_optim_nhypers = (int)(sizeof cg_optim_hypers / sizeof *cg_optim_hypers);

double cg_optim_hyper_value(const cg_optim_config *c, int h)
{
    const char *f = (const char *)c + cg_optim_hypers[h].off;
    return cg_optim_hypers[h].is_bool ? (double)*(const bool *)f : *(const double *)f;
}

/* Each type's buffers, in the order they are saved (PyTorch's state order). */
static const struct {
    int n;
    optim_buffer b[OPTIM_MAX_TYPE_BUFS];
} type_buffers[CG_OPTIM_NTYPES] = {
    [CG_OPTIM_SGD] = {1, {{CG_OPTIM_BUF_MOMENTUM, H_MOMENTUM}}},
    [CG_OPTIM_ADAM] = {3,
                       {{CG_OPTIM_BUF_EXP_AVG, -1},
                        {CG_OPTIM_BUF_EXP_AVG_SQ, -1},
                        {CG_OPTIM_BUF_MAX_EXP_AVG_SQ, H_AMSGRAD}}},
    [CG_OPTIM_ADAMW] = {3,
                        {{CG_OPTIM_BUF_EXP_AVG, -1},
                         {CG_OPTIM_BUF_EXP_AVG_SQ, -1},
                         {CG_OPTIM_BUF_MAX_EXP_AVG_SQ, H_AMSGRAD}}},
    [CG_OPTIM_RMSPROP] = {3,
                          {{CG_OPTIM_BUF_SQUARE_AVG, -1},
                           {CG_OPTIM_BUF_MOMENTUM, H_MOMENTUM},
                           {CG_OPTIM_BUF_GRAD_AVG, H_CENTERED}}},
    [CG_OPTIM_ADAGRAD] = {1, {{CG_OPTIM_BUF_SUM, -1}}},
    [CG_OPTIM_ADADELTA] = {2, {{CG_OPTIM_BUF_SQUARE_AVG, -1}, {CG_OPTIM_BUF_ACC_DELTA, -1}}},
    [CG_OPTIM_ADAMAX] = {2, {{CG_OPTIM_BUF_EXP_AVG, -1}, {CG_OPTIM_BUF_EXP_INF, -1}}},
    [CG_OPTIM_NADAM] = {3,
                        {{CG_OPTIM_BUF_MU_PRODUCT, -1},
                         {CG_OPTIM_BUF_EXP_AVG, -1},
                         {CG_OPTIM_BUF_EXP_AVG_SQ, -1}}},
    [CG_OPTIM_RADAM] = {2, {{CG_OPTIM_BUF_EXP_AVG, -1}, {CG_OPTIM_BUF_EXP_AVG_SQ, -1}}},
    [CG_OPTIM_ASGD] = {3, {{CG_OPTIM_BUF_ETA, -1}, {CG_OPTIM_BUF_MU, -1}, {CG_OPTIM_BUF_AX, -1}}},
    [CG_OPTIM_RPROP] = {2, {{CG_OPTIM_BUF_PREV, -1}, {CG_OPTIM_BUF_STEP_SIZE, -1}}},
};

static const char *const buffer_names[CG_OPTIM_NBUFS] = {
    NULL,         "exp_avg",    "exp_avg_sq", "momentum_buffer",
    "square_avg", "grad_avg",   "sum",        "max_exp_avg_sq",
    "acc_delta",  "exp_inf",    "ax",         "prev",
    "step_size",  "mu_product", "eta",        "mu"};
static const bool buffer_nonneg[CG_OPTIM_NBUFS] = {
    [CG_OPTIM_BUF_EXP_AVG_SQ] = true, [CG_OPTIM_BUF_SQUARE_AVG] = true,
    [CG_OPTIM_BUF_SUM] = true,        [CG_OPTIM_BUF_MAX_EXP_AVG_SQ] = true,
    [CG_OPTIM_BUF_ACC_DELTA] = true,  [CG_OPTIM_BUF_EXP_INF] = true};

const char *cg_optim_buffer_name(int k)
{
    return k > 0 && k < CG_OPTIM_NBUFS ? buffer_names[k] : NULL;
}

bool cg_optim_buffer_nonneg(int k) { return k > 0 && k < CG_OPTIM_NBUFS && buffer_nonneg[k]; }

bool cg_optim_buffer_is_scalar(int k) { return k >= CG_OPTIM_BUF_MU_PRODUCT && k < CG_OPTIM_NBUFS; }

float cg_optim_buffer_start(const cg_optim_config *c, int k, double lr)
{
    switch (k) {
    case CG_OPTIM_BUF_SUM: return (float)c->initial_accumulator_value;
    case CG_OPTIM_BUF_STEP_SIZE:             /* fill_(group['lr']) */
    case CG_OPTIM_BUF_ETA: return (float)lr; /* torch.tensor(group['lr']) */
    case CG_OPTIM_BUF_MU_PRODUCT:
    case CG_OPTIM_BUF_MU: return 1.0f;
    default: return 0.0f;
    }
}

int cg_optim_type_buffers(const cg_optim_config *c, const optim_buffer **rows)
{
    if ((int)c->type < 0 || (int)c->type >= CG_OPTIM_NTYPES) {
        *rows = NULL;
        return 0;
    }
    *rows = type_buffers[c->type].b;
    return type_buffers[c->type].n;
}

bool cg_optim_keeps(const cg_optim_config *c, int k)
{
    const optim_buffer *b;
    int n = c ? cg_optim_type_buffers(c, &b) : 0;
    for (int j = 0; j < n; j++)
        if (b[j].k == k)
            return b[j].when < 0 || cg_optim_hyper_value(c, b[j].when) != 0;
    return false;
}

int cg_optim_n_buffers(const cg_optim_config *c)
{
    int n = 0;
    for (int k = 1; k < CG_OPTIM_NBUFS; k++)
        n += cg_optim_keeps(c, k) && !cg_optim_buffer_is_scalar(k);
    return n;
}

/* The hyper-parameters each type checks (PyTorch's constructors' checks,
 * finite numbers besides): >= 0, in [0, 1) for a beta, in [0, 1] for
 * Adadelta's rho, any finite number where PyTorch checks none. */
enum { NONNEG, UNIT_OPEN, UNIT_CLOSED, FINITE };
static const struct {
    unsigned types;
    size_t off;
    const char *name;
    int range;
} hyper_checks[] = {
    {TYPE(SGD) | TYPE(RMSPROP), FIELD(momentum), "momentum", NONNEG},
    {BETAS, FIELD(beta1), "betas[0]", UNIT_OPEN},
    {BETAS, FIELD(beta2), "betas[1]", UNIT_OPEN},
    {BETAS | TYPE(RMSPROP) | TYPE(ADAGRAD) | TYPE(ADADELTA), FIELD(eps), "eps", NONNEG},
    {TYPE(RMSPROP), FIELD(alpha), "alpha", NONNEG},
    {TYPE(ADAGRAD), FIELD(lr_decay), "lr_decay", NONNEG},
    {TYPE(ADAGRAD), FIELD(initial_accumulator_value), "initial_accumulator_value", NONNEG},
    {TYPE(ADADELTA), FIELD(rho), "rho", UNIT_CLOSED},
    {TYPE(NADAM), FIELD(momentum_decay), "momentum_decay", NONNEG},
    {TYPE(ASGD), FIELD(lambd), "lambd", FINITE},
    {TYPE(ASGD), FIELD(alpha), "alpha", FINITE},
    {TYPE(ASGD), FIELD(t0), "t0", FINITE},
    {TYPE(RPROP), FIELD(step_size_min), "step_size_min", FINITE},
    {TYPE(RPROP), FIELD(step_size_max), "step_size_max", FINITE},
};

/* ------------------------------------------------------------ helpers */

/* Subnormals are rates: PyTorch takes any lr >= 0, a schedule (StepLR)
 * passes through them on its way to 0, and "%.17g" writes them exactly.
 * FLT_MAX bounds a rate: the step rounds -rate to float once, and past it
 * that is -inf, which wrote inf and NaN into the weights. */
bool cg_optim_rate_ok(double lr, double scale, char *why, size_t n)
{
    if (!(lr >= 0 && lr <= FLT_MAX)) /* a schedule's NaN would wreck every weight */
        snprintf(why, n, "learning rate %g must be finite, >= 0 and at most %g (float32's largest)",
                 lr, (double)FLT_MAX);
    else if (!(scale >= 0 && scale <= DBL_MAX))
        snprintf(why, n, "learning-rate scale %g must be finite and >= 0", scale);
    else if (!(param_rate(lr, scale) <= FLT_MAX))
        snprintf(why, n, "learning rate %g times scale %g is %g, past float32's largest (%g)", lr,
                 scale, param_rate(lr, scale), (double)FLT_MAX);
    else
        return true;
    return false;
}

bool cg_optim_check_config(const char *what, const cg_optim_config *c)
{
    if ((int)c->type < 0 || (int)c->type >= CG_OPTIM_NTYPES) {
        cg_set_error("%s: unknown optimizer type %d", what, (int)c->type);
        return false;
    }
    char why[192];
    if (!cg_optim_rate_ok(c->lr, 1.0, why, sizeof why)) {
        cg_set_error("%s: %s", what, why);
        return false;
    }
    const char *tn = type_names[c->type];
    for (size_t j = 0; j < sizeof hyper_checks / sizeof *hyper_checks; j++) {
        if (!(hyper_checks[j].types & (1u << c->type)))
            continue;
        double v = *(const double *)((const char *)c + hyper_checks[j].off);
        static const char *const must[] = {"finite and >= 0", "in [0, 1)", "in [0, 1]", "finite"};
        const int r = hyper_checks[j].range;
        bool ok = r == FINITE        ? isfinite(v)
                  : r == UNIT_OPEN   ? v >= 0 && v < 1
                  : r == UNIT_CLOSED ? v >= 0 && v <= 1
                                     : v >= 0 && v <= DBL_MAX;
        if (!ok) {
            cg_set_error("%s: %s %s %g must be %s", what, tn, hyper_checks[j].name, v, must[r]);
            return false;
        }
    }
    /* PyTorch: "Invalid eta values" unless 0 < etaminus < 1 < etaplus */
    if (c->type == CG_OPTIM_RPROP &&
        !(c->etaminus > 0 && c->etaminus < 1 && c->etaplus > 1 && c->etaplus <= DBL_MAX)) {
        cg_set_error("%s: rprop etas (%g, %g) must be 0 < etaminus < 1 < etaplus (finite)", what,
                     c->etaminus, c->etaplus);
        return false;
    }
    if (c->type == CG_OPTIM_SGD) {
        if (!isfinite(c->dampening)) {
            cg_set_error("%s: sgd dampening %g must be finite", what, c->dampening);
            return false;
        }
        if (c->nesterov && (c->momentum == 0 || c->dampening != 0)) {
            /* PyTorch: "Nesterov momentum requires a momentum and zero dampening" */
            cg_set_error("%s: Nesterov momentum needs momentum > 0 and dampening 0 (momentum %g, "
                         "dampening %g)",
                         what, c->momentum, c->dampening);
            return false;
        }
    }
    return true;
}
