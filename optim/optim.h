/* cgrad optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta, Adamax, NAdam,
 * RAdam, ASGD and Rprop over named parameters, gradient clipping
 * by global norm, a NaN/Inf check on gradients, and state save/load.
 *
 * An optimizer holds a list of (name, tensor, weight_decay) parameters. Each
 * parameter must be a contiguous float32 leaf (no creator node); its .grad
 * (autograd/autograd.h) is read at every step. A parameter whose grad is
 * NULL is skipped: its values, its step count and its buffers stay as they
 * are (PyTorch does the same). Per-parameter weight decay and learning-rate
 * scales replace PyTorch's param groups (e.g. weight decay 0.1 on 2-D
 * weights, 0 on biases and norm weights; a pretrained encoder at 0.1 times
 * the rate of a new head: cg_optim_set_lr_scale).
 *
 * The arithmetic follows PyTorch's single-tensor implementations (the CPU
 * default) operation by operation, in float32 with the scalar factors
 * computed in double as Python does, with one step count per parameter.
 * lr below is the parameter's own rate, lr * its scale (in double; the
 * rate itself at scale 1), as PyTorch uses its group's lr everywhere:
 *
 *   SGD    g += wd*p  (L2, if wd != 0)
 *          momentum != 0: buf = g on the parameter's first step, else
 *                         buf = momentum*buf + (1-dampening)*g;
 *                         g = nesterov ? g + momentum*buf : buf
 *          p += -lr * g
 *   Adam   g += wd*p  (L2, if wd != 0)
 *   AdamW  p *= 1 - lr*wd  (decoupled, before the update)
 *   both   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g*g
 *          bc1 = 1 - beta1^t;  bc2 = 1 - beta2^t  (t = the parameter's step)
 *          amsgrad: vmax = maximum(vmax, v) (NaN kept, as torch.maximum),
 *                   read below in v's place
 *          denom = sqrt(v)/sqrt(bc2) + eps;  p += (-lr/bc1) * m / denom
 *   RMSprop g += wd*p  (L2, if wd != 0);  sq = alpha*sq + (1-alpha)*g*g
 *          centered: ga = alpha*ga + (1-alpha)*g;  avg = sqrt(sq - ga*ga)
 *          else      avg = sqrt(sq);           then avg += eps
 *          momentum > 0: buf = momentum*buf + g/avg;  p += -lr * buf
 *          else          p += -lr * g / avg
 *   Adagrad g += wd*p  (L2, if wd != 0);  clr = lr / (1 + (t-1)*lr_decay)
 *          sum += g*g  (sum starts at initial_accumulator_value)
 *          p += -clr * g / (sqrt(sum) + eps)
 *   Adadelta g += wd*p (L2);  sq = rho*sq + (1-rho)*g*g
 *          delta = sqrt(acc_delta + eps) / sqrt(sq + eps) * g
 *          acc_delta = rho*acc_delta + (1-rho)*delta*delta;  p += -lr * delta
 *   Adamax g += wd*p (L2);  m = beta1*m + (1-beta1)*g
 *          exp_inf = max(beta2*exp_inf, |g| + eps);  p += (-lr/bc1) * m / exp_inf
 *   NAdam  g += wd*p (L2);  mu_t = beta1*(1 - 0.5*0.96^(t*momentum_decay))
 *          mu_product *= mu_t (a float32 scalar, 1 at the start), m and v
 *          as Adam;  denom = sqrt(v / bc2) + eps;
 *          p += -lr*(1-mu_t)/(1-mu_product) * g / denom;
 *          p += -lr*mu_{t+1}/(1-mu_product*mu_{t+1}) * m / denom
 *   RAdam  g += wd*p (L2);  m and v as Adam;  rho_inf = 2/(1-beta2) - 1,
 *          rho_t = rho_inf - 2t*beta2^t/bc2;  rho_t > 5: p -= m/bc1 * lr *
 *          (sqrt(bc2) / (sqrt(v) + eps)) * rect (the variance rectification),
 *          else p -= m/bc1 * lr
 *   ASGD   g += wd*p (L2);  p *= 1 - lambd*eta;  p += -eta * g;
 *          ax = mu == 1 ? p : ax + (p - ax)*mu;  then (float32 scalars)
 *          eta = lr / (1 + lambd*lr*t)^alpha, mu = 1 / max(1, t - t0);
 *          eta starts at lr, mu at 1
 *   Rprop  (no weight decay: PyTorch 1.13's has none, and a parameter
 *          given one is refused) s = sign(g*prev): step_size *= etaplus
 *          (s > 0), etaminus (s < 0; then g = 0), 1 (s = 0), clamped to
 *          [step_size_min, step_size_max];  p -= sign(g) * step_size;
 *          prev = g;  step_size starts at lr (lr is read at a parameter's
 *          first step only, as PyTorch's)
 * LBFGS is not here: it needs a closure that re-evaluates the loss within
 * a step, which this step-after-backward interface does not take.
 *
 * Updates are flat loops over parameter memory (no graph is recorded), each
 * element computed by one thread: results are bit-identical for any thread
 * count. The learning rate is set before each step (cg_optim_set_lr) so that
 * a schedule (optim/schedule.h) can drive it.
 *
 * Ownership: the optimizer retains its parameter tensors and copies their
 * names; it owns its state buffers. cg_optim_free releases everything.
 * Errors: NULL/false/negative + cg_set_error (core/error.h); never exits. */
#ifndef CG_OPTIM_H
#define CG_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "../core/tensor.h"
#include "../nn/module.h"
#include "../nn/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CG_OPTIM_SGD = 0,
    CG_OPTIM_ADAM,
    CG_OPTIM_ADAMW,
    CG_OPTIM_RMSPROP,
    CG_OPTIM_ADAGRAD,
    CG_OPTIM_ADADELTA,
    CG_OPTIM_ADAMAX,
    CG_OPTIM_NADAM,
    CG_OPTIM_RADAM,
    CG_OPTIM_ASGD,
    CG_OPTIM_RPROP,
    CG_OPTIM_NTYPES
} cg_optim_type;

/* "sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "adamax",
 * "nadam", "radam", "asgd", "rprop" (static; "?" if out of range). */
const char *cg_optim_type_name(cg_optim_type t);

/* Fields a type does not use are ignored (neither checked nor saved). The
 * checks are PyTorch's constructors' (finite numbers besides). */
typedef struct cg_optim_config {
    cg_optim_type type;
    double lr;                           /* initial learning rate: a rate (cg_optim_set_lr) */
    double momentum;                     /* SGD, RMSprop: >= 0; 0 = none (no momentum_buffer) */
    bool nesterov;                       /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2;                 /* Adam/AdamW, Adamax, NAdam, RAdam: in [0, 1) */
    double eps;                          /* all but SGD, ASGD, Rprop: >= 0 */
    double alpha;                        /* RMSprop: the smoothing constant, >= 0; ASGD: eta's
                                         power, finite */
    bool centered;                       /* RMSprop: by the gradient's average (a grad_avg) */
    double lr_decay;                     /* Adagrad: >= 0 */
    double initial_accumulator_value;    /* Adagrad: sum's start, >= 0 */
    bool amsgrad;                        /* Adam/AdamW: keep max_exp_avg_sq */
    double dampening;                    /* SGD: momentum's dampening; 0 for nesterov */
    double rho;                          /* Adadelta: in [0, 1] */
    double momentum_decay;               /* NAdam: >= 0 */
    double lambd, t0;                    /* ASGD: the decay term, the step averaging starts at
                                         (finite) */
    double etaminus, etaplus;            /* Rprop: 0 < etaminus < 1 < etaplus */
    double step_size_min, step_size_max; /* Rprop: the step sizes' bounds (finite) */
} cg_optim_config;

/* Configs with PyTorch's argument order (weight decay is per parameter,
 * cg_optim_param; the fields not listed are 0/false: set them after). */
cg_optim_config cg_sgd_config(double lr, double momentum, bool nesterov);
cg_optim_config cg_adam_config(double lr, double beta1, double beta2, double eps);
cg_optim_config cg_adamw_config(double lr, double beta1, double beta2, double eps);
/* torch.optim.RMSprop(lr, alpha, eps, weight_decay, momentum, centered) */
cg_optim_config cg_rmsprop_config(double lr, double alpha, double eps, double momentum,
                                  bool centered);
/* torch.optim.Adagrad(lr, lr_decay, weight_decay, initial_accumulator_value, eps) */
cg_optim_config cg_adagrad_config(double lr, double lr_decay, double initial_accumulator_value,
                                  double eps);
/* torch.optim.Adadelta(lr, rho, eps) */
cg_optim_config cg_adadelta_config(double lr, double rho, double eps);
/* torch.optim.Adamax(lr, betas, eps), torch.optim.RAdam(lr, betas, eps) */
cg_optim_config cg_adamax_config(double lr, double beta1, double beta2, double eps);
cg_optim_config cg_radam_config(double lr, double beta1, double beta2, double eps);
/* torch.optim.NAdam(lr, betas, eps, weight_decay, momentum_decay) */
cg_optim_config cg_nadam_config(double lr, double beta1, double beta2, double eps,
                                double momentum_decay);
/* torch.optim.ASGD(lr, lambd, alpha, t0) */
cg_optim_config cg_asgd_config(double lr, double lambd, double alpha, double t0);
/* torch.optim.Rprop(lr, etas=(etaminus, etaplus), step_sizes=(min, max)) */
cg_optim_config cg_rprop_config(double lr, double etaminus, double etaplus, double step_size_min,
                                double step_size_max);
/* Configs with PyTorch's defaults for everything but lr: SGD without
 * momentum; Adam and AdamW with betas (0.9, 0.999) and eps 1e-8; RMSprop
 * with alpha 0.99, eps 1e-8, no momentum, not centered; Adagrad with
 * lr_decay 0, initial accumulator 0, eps 1e-10; Adadelta with rho 0.9, eps
 * 1e-6; Adamax and RAdam with betas (0.9, 0.999), eps 1e-8; NAdam with
 * those and momentum_decay 4e-3; ASGD with lambd 1e-4, alpha 0.75, t0 1e6;
 * Rprop with etas (0.5, 1.2) and step sizes (1e-6, 50). (PyTorch's default
 * rates differ by type: 1.0 for Adadelta, 2e-3 for Adamax and NAdam, 1e-3
 * for RAdam, 1e-2 for ASGD and Rprop.) Change a field afterwards for
 * anything else (cfg.beta2 = 0.98, cfg.amsgrad = true). */
cg_optim_config cg_sgd_default(double lr);
cg_optim_config cg_adam_default(double lr);
cg_optim_config cg_adamw_default(double lr);
cg_optim_config cg_rmsprop_default(double lr);
cg_optim_config cg_adagrad_default(double lr);
cg_optim_config cg_adadelta_default(double lr);
cg_optim_config cg_adamax_default(double lr);
cg_optim_config cg_nadam_default(double lr);
cg_optim_config cg_radam_default(double lr);
cg_optim_config cg_asgd_default(double lr);
cg_optim_config cg_rprop_default(double lr);

/* The state buffers an optimizer may keep per parameter, numbered as
 * cg_shard_gather's k (k 0 is a sharded average's, optim/ema.h), each
 * named as in PyTorch's optimizer state:
 *   1 "exp_avg"                   Adam, AdamW, Adamax, NAdam, RAdam
 *   2 "exp_avg_sq"                Adam, AdamW, NAdam, RAdam
 *   3 "momentum_buffer"           SGD and RMSprop with momentum != 0
 *   4 "square_avg"                RMSprop, Adadelta
 *   5 "grad_avg"                  RMSprop centered
 *   6 "sum"                       Adagrad
 *   7 "max_exp_avg_sq"            Adam, AdamW with amsgrad
 *   8 "acc_delta"                 Adadelta
 *   9 "exp_inf"                   Adamax
 *  10 "ax"                        ASGD (the averaged parameter)
 *  11 "prev", 12 "step_size"      Rprop
 * and three scalars (shape [], float32 as in PyTorch; whole in every shard
 * of a sharded optimizer, as the step counts are, so never gathered):
 *  13 "mu_product"                NAdam
 *  14 "eta", 15 "mu"              ASGD */
enum {
    CG_OPTIM_BUF_EXP_AVG = 1,
    CG_OPTIM_BUF_EXP_AVG_SQ,
    CG_OPTIM_BUF_MOMENTUM,
    CG_OPTIM_BUF_SQUARE_AVG,
    CG_OPTIM_BUF_GRAD_AVG,
    CG_OPTIM_BUF_SUM,
    CG_OPTIM_BUF_MAX_EXP_AVG_SQ,
    CG_OPTIM_BUF_ACC_DELTA,
    CG_OPTIM_BUF_EXP_INF,
    CG_OPTIM_BUF_AX,
    CG_OPTIM_BUF_PREV,
    CG_OPTIM_BUF_STEP_SIZE,
    CG_OPTIM_BUF_MU_PRODUCT,
    CG_OPTIM_BUF_ETA,
    CG_OPTIM_BUF_MU,
    CG_OPTIM_NBUFS /* one past the last k */
};
/* The name of buffer k (static), NULL for k outside 1 .. CG_OPTIM_NBUFS-1. */
const char *cg_optim_buffer_name(int k);
/* Does an optimizer with configuration c keep buffer k? (False for a bad
 * k or type.) */
bool cg_optim_keeps(const cg_optim_config *c, int k);
/* Is buffer k one of the scalars (13 to 15), not of its parameter's shape? */
bool cg_optim_buffer_is_scalar(int k);
/* How many buffers of its parameter's shape it keeps for each parameter (0
 * for plain SGD, 3 for RMSprop with momentum and centered, 2 for NAdam,
 * 1 for ASGD: the scalars are not counted). */
int cg_optim_n_buffers(const cg_optim_config *c);

/* One parameter. name: non-empty, unique in the optimizer (copied). tensor:
 * contiguous float32 leaf, retained. weight_decay >= 0. */
typedef struct cg_optim_param {
    const char *name;
    cg_tensor *tensor;
    double weight_decay;
} cg_optim_param;

typedef struct cg_optim cg_optim;

/* A new optimizer (caller owns; free with cg_optim_free) over n >= 0
 * parameters, state zeroed, step count 0. NULL + error on a bad config or
 * parameter (NULL, non-contiguous, not a leaf, duplicate name or tensor). */
cg_optim *cg_optim_new(const cg_optim_config *cfg, int n, const cg_optim_param *params);
void cg_optim_free(cg_optim *o); /* NULL is a no-op */

/* An optimizer over every trainable parameter of a module (requires_grad
 * on: frozen ones, cg_module_requires_grad, are left out, as PyTorch's
 * filter(lambda p: p.requires_grad, m.parameters()) would), in
 * cg_module_params order and under its dotted names (a tied or shared
 * tensor once). As in PyTorch, the optimizer has the parameters it was
 * given: a parameter unfrozen later is not updated by it (its gradient is
 * computed, but nothing steps it); build a new optimizer to train it. Weight decay
 * weight_decay on every parameter, or (CG_DECAY_MATRICES) on parameters of
 * 2 or more dims only, as the zoo's recipes do (biases and norms exempt).
 * NULL + error for a module with no trainable parameter (none, or all
 * frozen), as PyTorch refuses an empty parameter list, or a rule not one of
 * the two. */
typedef enum { CG_DECAY_ALL = 0, CG_DECAY_MATRICES } cg_decay_rule;
cg_optim *cg_optim_from_module(const cg_optim_config *cfg, const cg_module *m, double weight_decay,
                               cg_decay_rule rule);
/* One call, PyTorch's defaults:
 *   cg_adamw_from_module(m, lr) = torch.optim.AdamW(m.parameters(), lr)
 *     (betas (0.9, 0.999), eps 1e-8, weight decay 0.01 on every parameter);
 *   cg_adam_from_module(m, lr)  = torch.optim.Adam(m.parameters(), lr);
 *   cg_sgd_from_module(m, lr)   = torch.optim.SGD(m.parameters(), lr). */
cg_optim *cg_adamw_from_module(const cg_module *m, double lr);
cg_optim *cg_adam_from_module(const cg_module *m, double lr);
cg_optim *cg_sgd_from_module(const cg_module *m, double lr);

/* One update of every parameter that has a gradient, at the current learning
 * rate. False + error (nothing updated) if a gradient's shape differs from
 * its parameter's or a parameter stopped being contiguous. */
bool cg_optim_step(cg_optim *o);
/* Drop every parameter's gradient (grad = NULL, like zero_grad(set_to_none)). */
void cg_optim_zero_grad(cg_optim *o);
/* One training step on a scalar loss: loss.backward(); opt.step();
 * opt.zero_grad() (the gradients are dropped also when the backward or
 * the step fails). A NULL loss (a failed forward) keeps its error. False +
 * error. */
bool cg_train_step(cg_optim *o, cg_tensor *loss);

/* The learning rate. The one rule for a rate, here and wherever one is
 * checked (the config's lr, cg_optim_set_lr_scale, cg_optim_load): a
 * number from 0 to FLT_MAX (float32's largest, 3.4e38: the step uses the
 * rate in float32), and so must every parameter's own rate be, lr times
 * its scale (cg_optim_set_lr_scale). Subnormals are rates, as in PyTorch
 * (any lr >= 0): a schedule (StepLR) passes through them on its way to 0,
 * and a checkpoint written then loads back exactly (a double that small
 * is 0 in the float32 step). Refused, the old rate kept, false + error
 * (naming the parameter whose rate it would take past FLT_MAX): NaN,
 * inf, a negative, a rate past FLT_MAX, or one that some parameter's
 * scale takes past it (there the step would write inf and NaN into the
 * weights). Whatever is taken is saved and loaded back. */
bool cg_optim_set_lr(cg_optim *o, double lr);
double cg_optim_lr(const cg_optim *o);
/* The momentum, as PyTorch's schedulers move param_group['momentum'] or
 * param_group['betas'][0] (OneCycleLR's cycle_momentum, optim/schedule.h):
 * SGD's and RMSprop's momentum (finite and > 0: one built without momentum
 * keeps no momentum_buffer and is refused), the beta1 (in [0, 1)) of Adam,
 * AdamW, Adamax, NAdam and RAdam; Adagrad, Adadelta, ASGD and Rprop have
 * none. Refused: false + error, the old value kept.
 * Saved and loaded back with the state (cg_optim_save's .momentum and
 * .beta1). */
bool cg_optim_set_momentum(cg_optim *o, double momentum);
/* The same on a configuration (before an optimizer is built from it:
 * whether its type takes a moved momentum), with the same refusals. */
bool cg_optim_config_set_momentum(cg_optim_config *c, double momentum);
/* The configuration (lr is the current learning rate). */
cg_optim_config cg_optim_get_config(const cg_optim *o);
/* Number of cg_optim_step calls (restored by cg_optim_load). */
int64_t cg_optim_steps(const cg_optim *o);

/* Parameters, 0 <= i < count. Borrowed; -1/NULL on a bad index. */
int cg_optim_count(const cg_optim *o);
const char *cg_optim_param_name(const cg_optim *o, int i);
cg_tensor *cg_optim_param_tensor(const cg_optim *o, int i);
double cg_optim_param_weight_decay(const cg_optim *o, int i);
/* The learning-rate scale of parameter i (1.0 when built): its updates use
 * lr * scale where the formulas above say lr (SGD's step, Adam's step size,
 * AdamW's decay 1 - lr*wd), lr being the rate cg_optim_set_lr sets, so a
 * schedule moves every parameter's rate by the same factor, as a PyTorch
 * scheduler does each param group's (timm's layer-wise "lr_scale"). A
 * scale must be finite and >= 0, and the parameter's rate, lr * scale, a
 * rate (cg_optim_set_lr: at most FLT_MAX); at 0 the values stay while the
 * state (moments, step count) still advances, as with a group lr of 0.
 * False + error naming the parameter on a bad index or scale, nothing
 * changed; the getter: -1 on a bad index. Saved and loaded with the
 * state, copied by cg_optim_copy_state. */
bool cg_optim_set_lr_scale(cg_optim *o, int i, double scale);
double cg_optim_param_lr_scale(const cg_optim *o, int i);
/* Updates parameter i has received (its own step count, as in PyTorch). */
int64_t cg_optim_param_steps(const cg_optim *o, int i);
/* Index of the parameter with this name, or -1 (no error recorded). */
int cg_optim_find(const cg_optim *o, const char *name);
/* State buffer of parameter i, borrowed, by its name (cg_optim_buffer_name:
 * one the optimizer keeps, cg_optim_keeps); of a sharded optimizer (below),
 * 1-D with the owned range's elements. NULL + error otherwise. */
cg_tensor *cg_optim_state(const cg_optim *o, int i, const char *what);

/* ------------------------------------------------- sharded state (ZeRO-1) */
/* An optimizer that keeps the state of part of each parameter only: own[i]
 * = [lo, hi) with 0 <= lo <= hi <= numel is the run of parameter i's flat
 * elements it updates (lo == hi: none). Its state buffers of parameter i
 * hold hi - lo floats (1-D; nothing is
 * allocated for the rest), and cg_optim_step updates those elements of the
 * parameter only, with the same arithmetic as the unsharded optimizer
 * (element by element, so the owned elements get exactly the values an
 * unsharded step gives them). Every parameter's step count still advances
 * when it has a gradient, owned elements or not, so that the optimizers of
 * all shards agree on it. own == NULL, or ranges that all cover whole
 * parameters, give a plain optimizer (cg_optim_new).
 *
 * The data-parallel layer (dist/dist.h, ZeRO-1) builds one per rank
 * over disjoint ranges; this layer knows nothing of ranks. On a sharded
 * optimizer, cg_optim_clip_grad_norm and cg_optim_grads_finite look at the
 * owned gradient elements only; cg_optim_save refuses (gather the shards
 * into an unsharded optimizer first, cg_optim_copy_state, or save through a
 * gather, cg_optim_save_gathered); cg_optim_load
 * reads the unsharded layout and keeps each parameter's own range, so one
 * checkpoint resumes with any sharding. */
typedef struct cg_optim_range {
    int64_t lo, hi;
} cg_optim_range;
cg_optim *cg_optim_new_sharded(const cg_optim_config *cfg, int n, const cg_optim_param *params,
                               const cg_optim_range *own);
/* True if some parameter's state is not whole. */
bool cg_optim_is_sharded(const cg_optim *o);
/* The range of parameter i this optimizer owns ([0, numel) when unsharded);
 * false + error on a bad index. */
bool cg_optim_shard_range(const cg_optim *o, int i, int64_t *lo, int64_t *hi);
/* What gathers sharded state from where the other shards are (the
 * data-parallel layer's: dist/dist.h cg_dist_stream):
 * fn(ctx, i, k, dst) writes buffer k of parameter i whole, numel floats,
 * into dst: k 1 .. CG_OPTIM_NBUFS-1 are cg_optim_state's buffers
 * (CG_OPTIM_BUF_*: 1, 2, 3 "exp_avg", "exp_avg_sq", "momentum_buffer", as
 * ever); k 0 a sharded average's (optim/ema.h). False + error. */
typedef struct cg_shard_gather {
    bool (*fn)(void *ctx, int i, int k, float *dst);
    void *ctx;
} cg_shard_gather;
/* cg_optim_save of a sharded optimizer: the entries an unsharded one
 * holding the whole state writes, each buffer gathered by g while the
 * writer saves (nn/safetensors.h cg_st_add_filled), so that the whole state
 * is never in memory at once, one tensor of it at a time. Save w before o's
 * next step. With o unsharded, cg_optim_save (g unused). False + error. */
bool cg_optim_save_gathered(const cg_optim *o, cg_st_writer *w, const char *prefix,
                            const cg_shard_gather *g);
/* Bytes of state buffers of its parameters' shape (every one it keeps,
 * CG_OPTIM_BUF_*, but the scalars: 4 bytes a parameter each) held. */
int64_t cg_optim_state_bytes(const cg_optim *o);
/* Copy into dst what src holds: the learning rate and hyper-parameters, the
 * learning-rate scales, the step counts (overall and per parameter), and
 * every state element that both own (the intersection of their ranges,
 * parameter by parameter).
 * Both must have the same type, keep the same buffers (cg_optim_keeps), and
 * have the same parameter names and shapes in
 * the same order (false + error otherwise, dst unchanged). Gathering shards: an
 * unsharded dst and each shard in turn; splitting: the other way round. */
bool cg_optim_copy_state(cg_optim *dst, const cg_optim *src);

/* Sum of squares of the gradient elements the optimizer owns (every
 * element when unsharded), in double; -1 + error on bad input. The shards'
 * sums add up to the square of the global norm. */
double cg_optim_grad_sqsum(const cg_optim *o);
/* Clip the owned gradient elements against a given total norm (e.g. the
 * global norm summed over shards): multiplied by PyTorch's factor
 * max_norm / (total + 1e-6) when it is below 1 (float32, as
 * cg_clip_grad_norm), untouched otherwise or if total is not finite. False
 * + error on bad input. */
bool cg_optim_clip_grads_by(cg_optim *o, double total, double max_norm);

/* ------------------------------------------------- checkpoint state */
/* Add the optimizer's state to w, under prefix (NULL: "optim"):
 *   tensors   <prefix>.<name>.step             I64, shape [] (per parameter)
 *             <prefix>.<name>.<buffer>  F32, each buffer it keeps
 *                                       (cg_optim_buffer_name; the
 *                                       scalars of shape [])
 *   metadata  <prefix>.type (cg_optim_type_name), <prefix>.step,
 *             <prefix>.lr, .momentum, .nesterov, .beta1, .beta2, .eps,
 *             then its type's own: .alpha, .centered (RMSprop);
 *             .lr_decay, .initial_accumulator_value (Adagrad); .amsgrad
 *             (Adam, AdamW: only when true) and .dampening (SGD: only
 *             when not 0), so that files of before they existed keep
 *             their bytes (absent: false, 0); .rho (Adadelta);
 *             .momentum_decay (NAdam); .lambd, .alpha, .t0 (ASGD);
 *             .etaminus, .etaplus, .step_size_min, .step_size_max (Rprop);
 *             <prefix>.<name>.lr_scale  (only for a scale other than 1)
 *             (decimal strings that read back exactly).
 * Parameter values are not included: save them next to it. */
bool cg_optim_save(const cg_optim *o, cg_st_writer *w, const char *prefix);
/* Restore the state written by cg_optim_save: step counts, buffers, and the
 * hyper-parameters of the metadata (lr, betas, eps, momentum, nesterov, the
 * type's own (alpha, centered, lr_decay, initial_accumulator_value,
 * amsgrad, dampening, rho, momentum_decay, lambd, t0, the etas and step
 * sizes), and
 * each parameter's learning-rate scale, as PyTorch's load_state_dict
 * restores each group's lr: 1 for a parameter without an lr_scale entry,
 * so every one of a file written before scales existed; per-parameter
 * weight decay stays as built).
 * Moments stored BF16 or F16 widen to float32 (PyTorch's load_state_dict
 * casts state to its parameter's dtype). Everything is checked before
 * anything changes: a different optimizer type, a missing entry, a shape
 * that differs from the parameter's or a dtype that is not a float, a
 * damaged value (a non-finite moment, a negative exp_avg_sq, square_avg,
 * sum, max_exp_avg_sq, acc_delta or exp_inf, a step count
 * outside [0, 2^53], a learning rate or scale that breaks the rule for
 * rates of cg_optim_set_lr), or a <prefix>.* tensor or <prefix>.*.lr_scale
 * entry that belongs to no parameter gives false + an error naming it,
 * and the optimizer is left unchanged. */
bool cg_optim_load(cg_optim *o, const cg_st_file *f, const char *prefix);

/* ------------------------------------------------- gradient utilities */
/* torch.nn.utils.clip_grad_norm_(params, max_norm): total = sqrt of the sum
 * of squares of every gradient element (params without grad are skipped),
 * accumulated in double in a fixed order; if max_norm / (total + 1e-6) < 1
 * every gradient is multiplied by that factor (in float32, as PyTorch; a
 * finite total past FLT_MAX, whose float32 norm PyTorch sees as inf, takes
 * the factor in double). Returns total (before clipping), or -1 + error on bad input (NULL, a grad
 * whose shape differs from its parameter's or of no float dtype, max_norm
 * < 0). A bfloat16 or float16 grad (a low-precision leaf's) is read as its
 * float32 values and scaled in float32, rounded back into its dtype. A
 * non-finite total is returned as is and the gradients are left unscaled,
 * so that cg_optim_grads_finite can still name the culprit. The cg_optim_
 * forms take float32 gradients only, as cg_optim_step does. */
double cg_clip_grad_norm(int n, cg_tensor *const *params, double max_norm);
double cg_optim_clip_grad_norm(cg_optim *o, double max_norm);
/* The global gradient norm alone (no clipping); -1 + error on bad input. */
double cg_grad_norm(int n, cg_tensor *const *params);
/* clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite): the
 * same with PyTorch's other norms: norm_type 2 is cg_clip_grad_norm (its
 * bits), INFINITY the largest gradient magnitude, any other q > 0 the
 * q-norm (sum |g|^q)^(1/q) of all the elements, summed in double in
 * parameter order (PyTorch: the q-norm of the per-parameter q-norms, in
 * float32: the same value, rounded otherwise). A NaN gradient gives NaN.
 * A non-finite total with error_if_nonfinite: -1 + PyTorch's error
 * ("The total norm of order q for gradients from `parameters` is
 * non-finite, so it cannot be clipped..."), the gradients untouched;
 * without it, the total returned and the gradients left unscaled (as
 * cg_clip_grad_norm; PyTorch scales them by the NaN or zero factor).
 * Refused: max_norm < 0, norm_type <= 0 or NaN (PyTorch takes 0, whose
 * "norm" counts the nonzero elements, and -inf, the smallest magnitude). */
double cg_clip_grad_norm_ex(int n, cg_tensor *const *params, double max_norm, double norm_type,
                            bool error_if_nonfinite);
/* torch.nn.utils.clip_grad_value_(params, clip_value): every gradient
 * element clamped to [-clip_value, clip_value] in float32 (NaN stays NaN;
 * a bfloat16 or float16 gradient clamped as its float32 values, then
 * rounded back); params without grad skipped. False + error on bad input
 * (as cg_clip_grad_norm's) or a clip_value < 0 or NaN (PyTorch clamps to
 * [|c|, -|c|], which sets every element to -|c|). */
bool cg_clip_grad_value(int n, cg_tensor *const *params, double clip_value);

/* Index of the first parameter whose gradient holds a NaN or Inf, or -1 if
 * all are finite (params without grad count as finite). If elem is not NULL
 * it receives the offending element's flat index. */
int cg_first_nonfinite_grad(int n, cg_tensor *const *params, int64_t *elem);
/* True if every gradient is finite. Otherwise false, *bad (if not NULL) =
 * the parameter's index, and an error is recorded that names it, e.g.
 * "non-finite gradient: 'blocks.0.ff.fc1.weight' has nan at element 17".
 * A NULL optimizer: false, *bad = -1, + error. */
bool cg_optim_grads_finite(const cg_optim *o, int *bad);

#ifdef __cplusplus
}
#endif
#endif
