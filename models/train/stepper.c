/* cgrad zoo: one optimizer step of the trainer (see stepper.h). */
#include "models/train/stepper.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/parse.h"
#include "models/train/run.h"

/* ------------------------------------------------------------ the step */
/* The variables that shape the reduction (the buckets' sizes and order, and
 * whether they are reduced during backward) must be the same on every rank,
 * or the ranks' collectives no longer match. mpirun passes a variable to
 * another host only with -x, so they can differ. Collective. */
static bool ranks_agree_reduction(bool reducer, double bucket_mb)
{
    double v[4] = {reducer, -(double)reducer, bucket_mb, -bucket_mb};
    if (cg_dist_size() <= 1 || !cg_dist_allreduce_max(v, 4))
        return cg_dist_size() <= 1;
    const char *var = v[0] != -v[1]   ? "CG_DIST_OVERLAP"
                      : v[2] != -v[3] ? "CG_DIST_BUCKET_MB"
                                      : NULL;
    if (!var)
        return true;
    cg_set_error("the ranks were not started with the same run: the environment variable %s "
                 "differs between ranks (rank %d: %s); give every rank the same value "
                 "(mpirun -x %s passes it to every host)",
                 var, cg_dist_rank(), getenv(var) ? getenv(var) : "unset", var);
    return false;
}

bool cg_stepper_init(cg_stepper *s, const cg_trainer_model *m, int grad_accum, int zero_stage)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->grad_accum = grad_accum;
    if (!cg_module_params(m->module, &s->pl))
        return false;
    s->op = calloc((size_t)s->pl.n + 1, sizeof *s->op);
    s->w = calloc((size_t)grad_accum, sizeof *s->w);
    s->tok = calloc((size_t)grad_accum, sizeof *s->tok);
    if (!s->op || !s->w || !s->tok) {
        cg_set_error("out of memory");
        return false;
    }
    for (int i = 0; i < s->pl.n; i++) {
        const cg_tensor *p = s->pl.items[i].tensor;
        if (p->requires_grad)
            s->op[s->n_train++] =
                (cg_optim_param){s->pl.items[i].name, s->pl.items[i].tensor,
                                 p->ndim >= 2 ? m->weight_decay_2d : m->weight_decay_1d};
    }
    if (zero_stage < 0 || zero_stage > 1) {
        cg_set_error("ZeRO stage %d: only 0 and 1 exist", zero_stage);
        return false;
    }
    s->zero = zero_stage == 1 && cg_dist_size() > 1;
    bool overlap = true;
    double bucket_mb = 4.0;
    if (!cg_env_flag("CG_DIST_OVERLAP", &overlap) ||
        !cg_env_number("CG_DIST_BUCKET_MB", &bucket_mb) ||
        !ranks_agree_reduction(s->zero || overlap, bucket_mb))
        return false;
    if (cg_dist_size() > 1 && (s->zero || overlap)) {
        cg_tensor **ps = malloc(sizeof *ps * (size_t)(s->n_train ? s->n_train : 1));
        cg_optim_range *own = calloc((size_t)s->n_train + 1, sizeof *own);
        if (!ps || !own) {
            free(ps);
            free(own);
            cg_set_error("out of memory");
            return false;
        }
        for (int i = 0; i < s->n_train; i++)
            ps[i] = s->op[i].tensor;
        s->reducer = s->zero ? cg_dist_reducer_new_zero(s->n_train, ps, bucket_mb)
                             : cg_dist_reducer_new(s->n_train, ps, bucket_mb);
        if (s->reducer && s->zero && cg_dist_reducer_shards(s->reducer, own))
            s->opt = cg_optim_new_sharded(&m->optim, s->n_train, s->op, own);
        free(ps);
        free(own);
        if (!s->reducer || (s->zero && !s->opt))
            return false;
    }
    if (!s->zero)
        s->opt = cg_optim_new(&m->optim, s->n_train, s->op);
    return s->opt != NULL;
}

static bool params_whole(void *reducer) { return cg_dist_reducer_gather_params(reducer); }

cg_ema *cg_stepper_ema_new(cg_stepper *s, double decay)
{
    return s->zero ? cg_ema_new_sharded(s->m->module, decay, s->opt, params_whole, s->reducer)
                   : cg_ema_new(s->m->module, decay);
}

/* Every element of this rank's gradients finite? Under ZeRO the optimizer
 * sees its shard only; before the reduction the whole local gradient is
 * this rank's own, so it is checked whole (to name a culprit). */
static bool local_grads_finite(const cg_stepper *st)
{
    if (!st->zero)
        return cg_optim_grads_finite(st->opt, NULL);
    for (int i = 0; i < st->n_train; i++) {
        cg_tensor *p = st->op[i].tensor;
        int64_t at = -1;
        if (cg_first_nonfinite_grad(1, &p, &at) == 0) {
            cg_set_error("non-finite gradient: '%s' has a NaN or Inf at element %lld",
                         st->op[i].name, (long long)at);
            return false;
        }
    }
    return true;
}

void cg_stepper_free(cg_stepper *s)
{
    cg_dist_reducer_free(s->reducer);
    cg_optim_free(s->opt);
    free(s->op);
    free(s->w);
    free(s->tok);
    cg_param_list_free(&s->pl);
    memset(s, 0, sizeof *s);
}

/* The step's micro-batches: st->w[k] and st->tok[k], their sums *W and
 * *tok. False + error. */
static bool make_batches(cg_stepper *st, double *W, double *tok)
{
    const cg_trainer_model *m = st->m;
    *W = *tok = 0;
    for (int k = 0; k < st->grad_accum; k++) {
        if (!m->batch(m->self, k, &st->w[k], &st->tok[k]))
            return false;
        *W += st->w[k];
        *tok += st->tok[k];
    }
    return true;
}

/* Forward + loss and backward of each micro-batch, gradients accumulated:
 * each loss weighted by its share w[k]/W of the step (one micro-batch: as
 * it is); the reducer, if any, is told before the last backward, which
 * starts the reduction over the ranks. *lv: the step's loss on this rank;
 * *back_ok: every backward succeeded. False + error when a loss or the
 * reducer fails. */
static bool forward_backward(cg_stepper *st, double W, double *lv, bool *back_ok)
{
    const cg_trainer_model *m = st->m;
    const int N = st->grad_accum;
    double lsum = 0;
    *lv = NAN;
    *back_ok = true;
    for (int k = 0; k < N; k++) {
        /* the mean over all N micro-batches' units: loss times its share */
        float share = N == 1 ? 1.0f : (float)(st->w[k] / W);
        /* every tensor of the micro-batch's graph dies at the scope's end */
        cg_scope *sc = cg_scope_begin();
        cg_tensor *loss = sc ? m->loss(m->self, k, share) : NULL;
        if (!loss) {
            cg_scope_end(sc);
            return false;
        }
        double l = cg_item(loss);
        lsum += l * st->w[k];
        if (k == N - 1 && st->reducer && !cg_dist_reducer_prepare(st->reducer, W)) {
            cg_scope_end(sc);
            return false;
        }
        if (N == 1) {
            *lv = l;
            *back_ok = cg_backward(loss, NULL, false);
        } else {
            cg_tensor *scaled = cg_muls(loss, share);
            *back_ok = *back_ok && scaled && cg_backward(scaled, NULL, false);
        }
        cg_scope_end(sc);
    }
    if (N > 1)
        *lv = lsum / W;
    return true;
}

/* A non-finite loss on this rank at step s: the error, naming the first
 * parameter with a non-finite gradient when backward ran. */
static cg_step_result nonfinite_loss(const cg_stepper *st, int64_t s, double lv, bool back_ok)
{
    char culprit[400] = "";
    if (back_ok && !local_grads_finite(st))
        snprintf(culprit, sizeof culprit, " (%s)", cg_last_error());
    cg_set_error("loss is %s at step %lld%s", isnan(lv) ? "nan" : "inf", (long long)s, culprit);
    return CG_STEP_NONFINITE;
}

/* Every rank's loss, weight and tokens summed (*lv: the step's loss over
 * every rank, *tokens: their tokens) and the gradients averaged, each rank
 * weighted by W (the reducer finishes what the last backward began). From
 * here on every rank takes the same decisions. False + error. */
static bool reduce_ranks(cg_stepper *st, double W, double tok, double *lv, double *tokens)
{
    double red[3] = {*lv * W, W, tok};
    if (!cg_dist_allreduce_sum(red, 3) || !(st->reducer ? cg_dist_reducer_finish(st->reducer)
                                                        : cg_dist_average_grads(st->m->module, W)))
        return false;
    *lv = red[0] / red[1];
    *tokens = red[2];
    return true;
}

/* Clipping to m->clip_norm (0: none): the gradients' norm before it, under
 * ZeRO the global norm of every rank's shard (collective: every rank takes
 * this alike). Without clipping the norm is taken all the same, with an
 * infinite bound that scales nothing: a finite loss can have non-finite
 * gradients, and the update would make every weight NaN. Negative + error
 * when it fails. */
static double clip(cg_stepper *st)
{
    double max_norm = st->m->clip_norm > 0 ? st->m->clip_norm : INFINITY;
    return st->zero ? cg_dist_clip_grad_norm(st->opt, max_norm)
                    : cg_optim_clip_grad_norm(st->opt, max_norm);
}

/* A non-finite loss or gradient norm over the ranks at step s: stop, or
 * with skip_nonfinite skip the step (gradients zeroed), with the error. */
static cg_step_result nonfinite_step(cg_stepper *st, int64_t s, double lv, double norm)
{
    if (st->zero ? cg_dist_grads_finite(st->opt) : cg_optim_grads_finite(st->opt, NULL))
        cg_set_error(isfinite(norm) ? "the gradients are finite" : "gradient norm is not finite");
    if (!st->skip_nonfinite) {
        cg_prefix_error("step %lld: ", (long long)s);
        return CG_STEP_NONFINITE;
    }
    cg_prefix_error("loss %g, ", isnan(lv) ? NAN : lv); /* "nan", whatever its sign bit */
    cg_optim_zero_grad(st->opt);
    return CG_STEP_SKIPPED;
}

/* The optimizer step, in order: the step's batches, the schedule's learning
 * rate, forward + loss and backward of each micro-batch (gradient
 * accumulation), the reduction over the ranks, clipping, the optimizer
 * (and ZeRO's gathering of the parameters). */
cg_step_result cg_stepper_step(cg_stepper *st, int64_t s, double *loss_out, double *tokens_out)
{
    const cg_trainer_model *m = st->m;
    double W, tok, lv;
    bool back_ok;
    *loss_out = NAN;
    *tokens_out = 0;
    if (!make_batches(st, &W, &tok))
        return CG_STEP_FAILED;
    double mo = m->momentum ? m->momentum(m->self, s) : NAN;
    if (!cg_optim_set_lr(st->opt, m->lr(m->self, s)) ||
        (!isnan(mo) && !cg_optim_set_momentum(st->opt, mo))) {
        cg_prefix_error("step %lld: ", (long long)s);
        return CG_STEP_FAILED;
    }
    cg_optim_zero_grad(st->opt);
    if (!forward_backward(st, W, &lv, &back_ok))
        return CG_STEP_FAILED;
    *loss_out = lv;
    if (!isfinite(lv) && !st->skip_nonfinite)
        return nonfinite_loss(st, s, lv, back_ok);
    if (!back_ok) {
        cg_prefix_error("backward: ");
        return CG_STEP_FAILED;
    }
    if (!reduce_ranks(st, W, tok, &lv, tokens_out))
        return CG_STEP_FAILED;
    *loss_out = lv;
    double norm = clip(st);
    if (norm < 0)
        return CG_STEP_FAILED;
    if (!isfinite(lv) || !isfinite(norm))
        return nonfinite_step(st, s, lv, norm);
    if (!cg_optim_step(st->opt)) {
        cg_prefix_error("optimizer: ");
        return CG_STEP_FAILED;
    }
    if (st->zero && !cg_dist_reducer_gather_params(st->reducer))
        return CG_STEP_FAILED;
    return CG_STEP_OK;
}
