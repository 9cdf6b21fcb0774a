/* cgrad zoo: the train commands' learning-rate schedule (lr_sched.h).
 * Moved here from charlm_train.c, where it was charlm's alone, so that
 * seq2seq takes the same kinds (its default, noam, one of them). */
#include "models/train/lr_sched.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/train/prog.h"
#include "optim/plateau.h"

/* ReduceLROnPlateau's, but the factor (--gamma) and the patience */
#define PLATEAU_THRESHOLD 1e-4
#define PLATEAU_EPS 1e-8
/* OneCycleLR's: pct_start, div_factor, final_div_factor, base and max momentum */
#define ONECYCLE_PCT 0.3
#define ONECYCLE_DIV 25
#define ONECYCLE_FINAL_DIV 1e4
#define ONECYCLE_BASE_MOMENTUM 0.85
#define ONECYCLE_MAX_MOMENTUM 0.95

void cg_train_sched_init(cg_train_sched *s, const char *def, int64_t warmup)
{
    *s = (cg_train_sched){.text = def,
                          .warmup = warmup,
                          .min_lr = NAN,
                          .milestones = "",
                          .power = 1,
                          .t_mult = 1,
                          .lr_patience = 10};
}

/* The kinds --lr-schedule takes (the library's that compose no others,
 * but step, which multistep covers; plateau is the zoo's) */
static bool parse_kind(cg_train_sched *s)
{
    s->plateau = s->text && !strcmp(s->text, "plateau");
    if (s->plateau) {
        s->kind = CG_SCHED_CONSTANT;
        return true;
    }
    return cg_schedule_parse(s->text, &s->kind) && s->kind != CG_SCHED_STEP &&
           s->kind < CG_SCHED_LINEAR_LR;
}

static const char *kind_name(const cg_train_sched *s)
{
    return s->plateau ? "plateau" : cg_schedule_name(s->kind);
}

/* --milestones into ms: NULL, or why not (in buf) */
static const char *parse_milestones(cg_train_sched *s, char *buf, size_t cap)
{
    s->n_ms = 0;
    for (const char *p = s->milestones; *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 1 || v > 1e12 ||
            (s->n_ms && v <= s->ms[s->n_ms - 1]) || s->n_ms == CG_SCHED_MAX_MILESTONES) {
            snprintf(buf, cap,
                     "--milestones '%.60s': need 1 to %d steps >= 1, increasing, comma-separated",
                     s->milestones, CG_SCHED_MAX_MILESTONES);
            return buf;
        }
        s->ms[s->n_ms++] = v;
        p = *end ? end + 1 : end;
    }
    return NULL;
}

/* Each kind's flags given for that kind only, the ones it needs given
 * (fresh: a new run, whose flags these are): NULL, or why not */
static const char *kind_flags(cg_train_sched *s, const cg_cli_args *a, bool fresh)
{
    const cg_schedule_kind k = s->kind;
    const bool gamma = k == CG_SCHED_EXPONENTIAL || k == CG_SCHED_MULTISTEP || s->plateau;
    if (s->gamma != 0 && !gamma)
        return "--gamma is exponential's, multistep's and plateau's decay: give that "
               "--lr-schedule";
    if (*s->milestones && k != CG_SCHED_MULTISTEP)
        return "--milestones are multistep's: give --lr-schedule multistep";
    if (s->power != 1 && k != CG_SCHED_POLYNOMIAL)
        return "--power is polynomial's: give --lr-schedule polynomial";
    if ((s->t0 || s->t_mult != 1) && k != CG_SCHED_COSINE_RESTARTS)
        return "--t0 and --t-mult are cosine_restarts': give --lr-schedule cosine_restarts";
    if (s->lr_patience != 10 && !s->plateau)
        return "--lr-patience is plateau's: give --lr-schedule plateau";
    if (s->cycle_momentum && k != CG_SCHED_ONECYCLE)
        return "--cycle-momentum is onecycle's: give --lr-schedule onecycle";
    if (s->cooldown && k != CG_SCHED_WSD)
        return "--cooldown is the length of wsd's decay: give --lr-schedule wsd";
    if (k == CG_SCHED_EXPONENTIAL && s->gamma == 0)
        return "--lr-schedule exponential needs --gamma (the decay of each step)";
    if (k == CG_SCHED_MULTISTEP && !*s->milestones)
        return "--lr-schedule multistep needs --milestones (steps after the warmup: 100,200)";
    if (k == CG_SCHED_COSINE_RESTARTS && !s->t0)
        return "--lr-schedule cosine_restarts needs --t0 (its first cycle's steps)";
    if (k == CG_SCHED_ONECYCLE && fresh && cg_cli_given(a, &s->warmup))
        return "--lr-schedule onecycle warms up by itself (30% of the steps): drop --warmup";
    if (k == CG_SCHED_NOAM && s->warmup < 1)
        return "--lr-schedule noam peaks at step --warmup: give --warmup 1 or more";
    if (s->plateau && s->gamma >= 1)
        return "--lr-schedule plateau cuts the rate: --gamma must be below 1";
    bool reads_min = k == CG_SCHED_COSINE || k == CG_SCHED_LINEAR || k == CG_SCHED_WSD ||
                     k == CG_SCHED_COSINE_RESTARTS || s->plateau;
    if (fresh && cg_cli_given(a, &s->min_lr) && !reads_min)
        return k == CG_SCHED_CONSTANT ? "--lr-schedule constant keeps --lr after the warmup: "
                                        "drop --min-lr"
                                      : "--min-lr is not read by this --lr-schedule: drop it";
    return NULL;
}

int cg_train_sched_check(cg_train_sched *s, const cg_train_opts *o, const cg_optim_config *opt,
                         const char *ckpt)
{
    const cg_cli_args *a = o->args;
    const char *why = NULL;
    char buf[256];
    bool ok = parse_kind(s);
    if (!ok) {
        snprintf(buf, sizeof buf,
                 "--lr-schedule: '%.60s' is not one of cosine, linear, constant, wsd, noam, "
                 "plateau, exponential, multistep, polynomial, cosine_restarts, onecycle",
                 s->text);
        why = buf;
    } else if ((why = kind_flags(s, a, !ckpt)) || (why = parse_milestones(s, buf, sizeof buf))) {
    } else if (!ckpt && cg_cli_given(a, &s->min_lr) && s->lr > 0 && s->min_lr > s->lr) {
        snprintf(buf, sizeof buf,
                 "--min-lr %g is above the peak --lr %g (the schedule goes down "
                 "to it)",
                 s->min_lr, s->lr);
        why = buf;
    } else if (s->cooldown > o->steps) {
        snprintf(buf, sizeof buf, "--cooldown %lld is longer than the run's %lld steps",
                 (long long)s->cooldown, (long long)o->steps);
        why = buf;
    } else if (s->cycle_momentum) {
        cg_optim_config c = *opt; /* the optimizer has a momentum to move */
        if (!cg_optim_config_set_momentum(&c, ONECYCLE_MAX_MOMENTUM)) {
            snprintf(buf, sizeof buf,
                     "--cycle-momentum: %.160s; drop it, or take an optimizer with a momentum",
                     cg_last_error());
            why = buf;
        }
    }
    s->text = ok ? kind_name(s) : "cosine"; /* static, not the checkpoint's */
    if (ok && s->gamma == 0 && (s->kind == CG_SCHED_MULTISTEP || s->plateau))
        s->gamma = 0.1; /* MultiStepLR's, ReduceLROnPlateau's factor */
    if (!why)
        return -1;
    if (ckpt && !cg_cli_given(a, &o->steps)) /* the file's own: damaged */
        return cg_prog_fail("'%s': its training state's %s (a damaged checkpoint?)", ckpt, why);
    cg_prog_fail("%s", why);
    return CG_EXIT_USAGE;
}

void cg_train_sched_ready(cg_train_sched *s, double lr, int64_t d_model)
{
    s->lr = lr;
    s->d_model = d_model;
    if (isnan(s->min_lr)) /* not given, nor recorded (a checkpoint from before --min-lr) */
        s->min_lr = s->plateau ? 0 : lr / 10;
}

int cg_train_sched_fields(cg_train_sched *s, cg_json_field *f)
{
    const cg_json_field rows[CG_TRAIN_SCHED_NFIELDS] = {
        /* beside lr, which its default follows (absent: from before --min-lr) */
        {"min_lr", CG_JF_F64, &s->min_lr, 0, 10, true},
        /* absent: from before --lr-schedule, the program's default kind */
        {"lr_schedule", CG_JF_STR, &s->text, 0, 0, true},
        {"cooldown", CG_JF_I64, &s->cooldown, 0, 1e9, true},
        /* absent: from before PyTorch's kinds (none of them) */
        {"gamma", CG_JF_F64, &s->gamma, 0, 1e6, true},
        {"milestones", CG_JF_STR, &s->milestones, 0, 0, true},
        {"power", CG_JF_F64, &s->power, 0, 1e6, true},
        {"t0", CG_JF_I64, &s->t0, 0, 1e12, true},
        {"t_mult", CG_JF_I64, &s->t_mult, 1, 1e6, true},
        /* absent: from before plateau and --cycle-momentum (neither) */
        {"lr_patience", CG_JF_I64, &s->lr_patience, 0, 1e9, true},
        {"cycle_momentum", CG_JF_BOOL, &s->cycle_momentum, 0, 0, true},
    };
    memcpy(f, rows, sizeof rows);
    return CG_TRAIN_SCHED_NFIELDS;
}

/* The schedule over a run of steps (kids: a SequentialLR's children): the
 * warmup's ramp, then the kind */
static cg_schedule schedule_of(const cg_train_sched *s, int64_t steps, cg_schedule kids[2])
{
    int64_t after = steps - s->warmup > 1 ? steps - s->warmup : 1;
    kids[0] = cg_schedule_cosine(steps, s->warmup, s->lr, s->lr);
    switch (s->kind) {
    case CG_SCHED_EXPONENTIAL: kids[1] = cg_schedule_exponential(s->gamma, s->lr); break;
    case CG_SCHED_MULTISTEP:
        kids[1] = cg_schedule_multistep(s->ms, s->n_ms, s->gamma, s->lr);
        break;
    case CG_SCHED_POLYNOMIAL: kids[1] = cg_schedule_polynomial(after, s->power, s->lr); break;
    case CG_SCHED_COSINE_RESTARTS:
        kids[1] = cg_schedule_cosine_restarts(s->t0, s->t_mult, s->lr, s->min_lr);
        break;
    case CG_SCHED_ONECYCLE: { /* its own warmup (pct_start): --warmup refused */
        cg_schedule c = cg_schedule_onecycle(steps, s->lr, ONECYCLE_PCT, CG_ANNEAL_COS,
                                             ONECYCLE_DIV, ONECYCLE_FINAL_DIV, false);
        return s->cycle_momentum
                   ? cg_schedule_cycle_momentum(c, ONECYCLE_BASE_MOMENTUM, ONECYCLE_MAX_MOMENTUM)
                   : c;
    }
    case CG_SCHED_NOAM: /* factor 0: the peak lr at step warmup */
        return cg_schedule_noam(s->d_model, s->warmup,
                                s->factor ? s->factor
                                          : s->lr * sqrt((double)s->d_model * (double)s->warmup));
    case CG_SCHED_LINEAR: return cg_schedule_linear(steps, s->warmup, s->lr, s->min_lr);
    case CG_SCHED_CONSTANT: return kids[0]; /* plateau's before its cuts */
    case CG_SCHED_WSD:
        return cg_schedule_wsd(steps, s->warmup, s->cooldown ? s->cooldown : steps / 5, s->lr,
                               s->min_lr);
    default: return cg_schedule_cosine(steps, s->warmup, s->lr, s->min_lr);
    }
    return s->warmup ? cg_schedule_sequential(kids, 2, &s->warmup) : kids[1];
}

/* plateau's rate after the warmup: the peak, cut by the evaluations after
 * the warmup and before step, replayed (ReduceLROnPlateau's steps) */
static double plateau_lr(const cg_train_sched *s, int64_t step, const cg_history *h)
{
    cg_plateau *p = cg_plateau_new(CG_PLATEAU_MIN, s->gamma, s->lr_patience, PLATEAU_THRESHOLD,
                                   CG_PLATEAU_REL, 0, s->min_lr, PLATEAU_EPS);
    double lr = p ? s->lr : NAN;
    for (int i = 0; p && h && i < h->n && h->step[i] < step && !isnan(lr); i++)
        if (h->step[i] > 0 && h->step[i] >= s->warmup)
            lr = cg_plateau_step(p, h->val[i], lr);
    cg_plateau_free(p);
    return lr;
}

double cg_train_sched_lr(const cg_train_sched *s, int64_t steps, int64_t step,
                         const cg_history *hist)
{
    cg_schedule kids[2];
    cg_schedule c = schedule_of(s, steps, kids);
    if (s->plateau && step > s->warmup)
        return plateau_lr(s, step, hist);
    return cg_schedule_lr(&c, s->kind == CG_SCHED_NOAM ? step : step - 1);
}

double cg_train_sched_momentum(const cg_train_sched *s, int64_t steps, int64_t step)
{
    cg_schedule kids[2];
    cg_schedule c = schedule_of(s, steps, kids);
    return cg_schedule_moves_momentum(&c) ? cg_schedule_momentum(&c, step - 1) : NAN;
}

void cg_train_sched_note(const cg_train_sched *s, const char *resume, int64_t ckpt_steps,
                         int64_t steps, int64_t start, const cg_history *hist)
{
    if (!resume || ckpt_steps == steps)
        return;
    double was = cg_train_sched_lr(s, ckpt_steps, start + 1, hist);
    double now = cg_train_sched_lr(s, steps, start + 1, hist);
    if (was != now)
        cg_prog_warn("--steps %lld reshapes the %s schedule of '%s' (warmup %lld, then down "
                     "to %.3e at step %lld): the learning rate of step %lld is %.3e instead of "
                     "%.3e, so the run goes on neither as that run nor as a %lld-step run would",
                     (long long)steps, kind_name(s), resume, (long long)s->warmup, s->min_lr,
                     (long long)ckpt_steps, (long long)start + 1, now, was, (long long)steps);
}
