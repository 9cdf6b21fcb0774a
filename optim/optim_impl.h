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
    cg_tensor *buf[CG_OPTIM_NBUFS]; /* by k (CG_OPTIM_BUF_*; [0] unused): NULL if not kept */
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

static const char *const type_names[CG_OPTIM_NTYPES] = {"sgd",     "adam",     "adamw",  "rmsprop",
                                                        "adagrad", "adadelta", "adamax", "nadam",
                                                        "radam",   "asgd",     "rprop"};

/* ------------------------------------------- hyper-parameters and buffers */
/* The one description of what each type keeps and saves, which
 * construction, cg_optim_state, save, load, copies, sharding and the byte
 * count all read (optim.c holds the tables). */

/* A hyper-parameter saved as metadata "<prefix>.<key>": a field of
 * cg_optim_config, a double or a bool ("true"/"false"), saved for the types
 * of its mask; `optional` ones only when not 0/false (absent at a load:
 * 0/false), so that the files of the types that had none keep their bytes. */
typedef struct {
    const char *key;
    size_t off; /* offsetof(cg_optim_config, field) */
    bool is_bool;
    unsigned types; /* 1u << type */
    bool optional;
} optim_hyper;
extern const optim_hyper cg_optim_hypers[];
extern const int cg_optim_nhypers;
/* Is hyper-parameter h of c not 0/false? Its value as a double. */
double cg_optim_hyper_value(const cg_optim_config *c, int h);

/* A buffer of a type: k (CG_OPTIM_BUF_*), kept always (when = -1) or when
 * hyper-parameter `when` (an index of cg_optim_hypers) is not 0/false. */
typedef struct {
    int k;
    int when;
} optim_buffer;
#define OPTIM_MAX_TYPE_BUFS 3
/* The buffers of c's type in the order they are saved; their count. */
int cg_optim_type_buffers(const cg_optim_config *c, const optim_buffer **rows);
/* Is buffer k never negative (a second moment, a sum of squares, an
 * infinity norm)? */
bool cg_optim_buffer_nonneg(int k);
/* A fresh buffer k of slot s (its owned run; a scalar: shape []) as c
 * starts it: zeros, Adagrad's initial_accumulator_value, Rprop's step size
 * and ASGD's eta at lr, NAdam's mu_product and ASGD's mu at 1. Held
 * (cg_hold), NULL on failure. */
cg_tensor *cg_optim_new_buffer(const cg_optim_config *c, const slot *s, int k);
/* That start of buffer k (0 for most) at the parameter's rate lr. */
float cg_optim_buffer_start(const cg_optim_config *c, int k, double lr);

/* ------------------------------------------------------------ updates */

/* One parameter's update with its per-step constants (optim.c runs them;
 * optim_more.c holds the rules of Adadelta, Adamax, NAdam, RAdam, ASGD and
 * Rprop). */
typedef struct {
    float *p, *buf[CG_OPTIM_NBUFS]; /* buf by k, NULL where not kept */
    const float *g;
    int64_t n;
    float wd, neg_lr, l2, decay, bc2_sqrt, neg_step;
    float bc1, bc2, neg_step2, lr, rect, mu; /* NAdam, RAdam, ASGD: optim_more.c */
    bool first, rectify;
} update_job;

/* The per-step constants of slot s's job u at its rate lr, for the types
 * of optim_more.c, and their scalar state advanced (NAdam's mu_product,
 * ASGD's eta and mu), as PyTorch's step does before its element loop. */
void cg_optim_prepare_more(const cg_optim_config *c, slot *s, update_job *u, double lr);
/* Elements [a, a + n) of job u, for the types of optim_more.c. */
void cg_optim_update_more(const cg_optim_config *c, const update_job *u, int64_t a, int64_t n);

/* The gradient with L2 weight decay: grad.add(param, alpha=wd), if wd != 0 */
static inline float with_l2(float g, float wd, float p) { return wd != 0 ? g + wd * p : g; }

/* torch.maximum, torch.amax: NaN if either is */
static inline float maximum(float a, float b) { return a != a ? a : (a >= b ? a : b); }

/* ------------------------------------------------------------ helpers */

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
