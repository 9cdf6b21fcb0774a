/* cgrad optim, INTERNAL: what optim.c (construction, updates, queries) and
 * optim_state.c (sharded state, save and load) share: the optimizer's
 * layout and its small helpers; and ema.c, the entries of sharded state
 * gathered at a save. Not installed. Include it after
 * optim/optim.h (it does not include it: a module never uses itself round a
 * circle, tests/check_layers.py). */
#ifndef CG_OPTIM_IMPL_H
#define CG_OPTIM_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *name;
    cg_tensor *p; /* retained */
    double wd;
    double lr_scale; /* its rate is lr * lr_scale (cg_optim_set_lr_scale); 1 when built */
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

/* ------------------------------------------------------------ helpers */

static inline bool uses_buf1(const cg_optim_config *c)
{
    return c->type != CG_OPTIM_SGD || c->momentum != 0;
}

static inline bool uses_buf2(const cg_optim_config *c) { return c->type != CG_OPTIM_SGD; }

static inline const char *buf1_name(const cg_optim_config *c)
{
    return c->type == CG_OPTIM_SGD ? "momentum_buffer" : "exp_avg";
}

/* A parameter's own rate at the optimizer's rate lr (its param group's lr
 * in PyTorch), in double; at scale 1 the rate itself, so the bits stay.
 * The step uses it, and the rule for rates judges it. */
static inline double param_rate(double lr, double scale) { return scale == 1.0 ? lr : lr * scale; }

/* The one rule for learning rates (optim.h, above cg_optim_set_lr), which
 * every check of a rate uses: the configs', cg_optim_set_lr's,
 * cg_optim_set_lr_scale's and cg_optim_load's. True if lr is a rate, scale
 * a learning-rate scale and param_rate(lr, scale) a rate too (scale 1 to
 * check lr alone); otherwise false, and why in why[n] ("learning rate -1
 * must be ..."), for the caller to frame (nothing is recorded). */
bool cg_optim_rate_ok(double lr, double scale, char *why, size_t n);
/* False + error (prefixed by what) if c is not a valid configuration. */
bool cg_optim_check_config(const char *what, const cg_optim_config *c);
/* The slot of parameter i, or NULL + error. */
const slot *cg_optim_get_slot(const cg_optim *o, int i, const char *what);
/* Zeros held by the optimizer: of p's shape; of a slot's owned run. */
cg_tensor *cg_optim_zeros_like_param(const cg_tensor *p);
cg_tensor *cg_optim_zeros_state(const slot *s);

/* Add entry `name`, p's shape in float32, to w, made at the save by
 * g->fn(g->ctx, i, k, dst) (cg_optim_save_gathered's and cg_ema_save's
 * way of writing sharded state). False + error. */
bool cg_optim_add_gathered(cg_st_writer *w, const char *name, const cg_tensor *p,
                           const cg_shard_gather *g, int i, int k);

#endif
