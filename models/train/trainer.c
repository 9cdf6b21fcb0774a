/* cgrad zoo: the one trainer's loop: evaluations, saves, steps and the
 * end (see trainer.h; its set-up and the output rules: trainer_begin.c). */
#include "models/train/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "models/train/agree.h"
#include "models/train/checkpoint.h"
#include "models/util/config_json.h"
#include "dist/dist.h"
#include "models/train/model_common.h"
#include "optim/ema.h"

/* ------------------------------------------------------------ the run */
typedef struct {
    cg_trainer *t;
    const cg_trainer_model *m;
    cg_stepper st;
    cg_optim *opt; /* st.opt */
    cg_ema *ema;   /* --ema-decay's average, or NULL */
    char *png;
    /* the metrics log: the room a checkpoint needs (kept free beside it),
     * and why it could not be written when the disk is full or a file-size
     * limit is reached (rank 0; the run then saves and stops) */
    uint64_t reserve;
    char log_full[300];
    bool log_stop;  /* stopped for it (every rank) */
    bool signalled; /* stopped by a signal (every rank) */
    /* the resumed run's first step, evaluated now (a signal cut its
     * evaluation short): saved again, and kept */
    bool cut_resumed;
    /* the loop's clock: its start, the steps taken by this process, the
     * last progress line, and the window of the tokens/s figure */
    bool tty;
    int64_t log_every, done_steps;
    double t_begin, last_print, win_tok, win_time;
} run_ctx;

enum { GO_ON = -1, STOP = -2 }; /* what an iteration of the loop returns, besides exit codes */

/* Was the last evaluation at step? */
static bool evaluated_at(const cg_trainer *t, int64_t step)
{
    return t->hist.n > 0 && t->hist.step[t->hist.n - 1] == step;
}

/* --keep-last: is the checkpoint saved at step an evaluation checkpoint to
 * keep (not yet kept)? The run's first step only when at_start (its
 * evaluation, cut short before, made now). Then it joins t->kept, and the
 * oldest leave it for t->dropping: the checkpoint names them as dropped,
 * and their files are removed once the saves are done. */
static bool keep_at(cg_trainer *t, int64_t step, bool at_start)
{
    int64_t n = t->o->keep_last;
    if (n <= 0 || step < t->start || (step == t->start && !at_start) || !evaluated_at(t, step) ||
        (t->n_kept > 0 && t->kept[t->n_kept - 1] == step))
        return false;
    t->kept[t->n_kept++] = step;
    while (t->n_kept > n) {
        t->dropping[t->n_dropping++] = t->kept[0];
        memmove(t->kept, t->kept + 1, (size_t)--t->n_kept * sizeof *t->kept);
    }
    return true;
}

/* Remove the kept checkpoints of t->dropping (gone already: fine). */
static void remove_dropped(cg_trainer *t)
{
    for (int i = 0; i < t->n_dropping; i++) {
        char *p = cg_kept_path(t->out, t->dropping[i]);
        if (p && unlink(p) != 0 && errno != ENOENT)
            cg_prog_warn("cannot remove the old evaluation checkpoint '%s': %s", p,
                         strerror(errno));
        free(p);
    }
    t->n_dropping = 0;
}

/* --keep-best: is the checkpoint saved at step that of the best evaluation
 * so far, not yet written? Then it is recorded as written. */
static bool best_at(cg_trainer *t, int64_t step)
{
    int b = cg_history_best(&t->hist);
    if (!t->o->keep_best || b < 0 || b != t->hist.n - 1 || !evaluated_at(t, step) ||
        t->best_saved == step)
        return false;
    t->best_saved = step;
    return true;
}

/* The files a save writes, each one whole (written aside, then renamed):
 * copies beside it, of the other kept files. */
static uint64_t copies(const cg_train_opts *o) { return 1 + (o->keep_last > 0) + o->keep_best; }

/* Save to t->out, then also to the kept checkpoint of step (cg_kept_path)
 * when keep, and to the best checkpoint (cg_best_path) when best (in this order: a run killed in between has recorded a kept
 * checkpoint it lacks, which is harmless, rather than left one that its
 * checkpoint does not know and a resume would refuse). The first save that
 * replaces t->out also puts the run's metrics log in place of the old one,
 * which told the history of the old checkpoint until then. */
static bool save_files(cg_trainer *t, const cg_trainer_model *m, const cg_optim *opt, cg_ft_save ft,
                       int64_t step, bool keep, bool best, const char *tj)
{
    char *cfg = m->config_json(m->self);
    char *from = cfg && t->from_origin ? cg_ft_origin_json(&t->origin) : NULL;
    char *kp = keep ? cg_kept_path(t->out, step) : NULL;
    char *bp = best ? cg_best_path(t->out) : NULL;
    ft.init_from = from;
    ft.adapters = t->adapters;
    const cg_tokenizer *tok = m->tok;
    bool ok = cfg && (from || !t->from_origin) && (kp || !keep) && (bp || !best) &&
              cg_ft_ckpt_save(t->out, &ft, m->name, cfg, tok, m->module, opt, step, tj);
    if (ok && !cg_metrics_log_publish(&t->metrics)) /* tried again at the next save */
        cg_prog_warn("%s", cg_last_error());
    ok = ok && (!kp || cg_ft_ckpt_save(kp, &ft, m->name, cfg, tok, m->module, opt, step, tj));
    ok = ok && (!bp || cg_ft_ckpt_save(bp, &ft, m->name, cfg, tok, m->module, opt, step, tj));
    free(cfg);
    free(from);
    free(kp);
    free(bp);
    return ok;
}

/* Every rank's dropout counter into t->rank_counters (collective; each
 * rank's stream advances by its own share of the batch). One process: none
 * (a list resumed from a run on more ranks is not this run's). */
static bool gather_rank_counters(run_ctx *c)
{
    cg_trainer *t = c->t;
    int n = cg_dist_size(), me = cg_dist_rank();
    free(t->rank_counters);
    t->rank_counters = NULL;
    t->n_rank_counters = 0;
    if (n <= 1)
        return true;
    double *v = calloc((size_t)n * 2, sizeof *v); /* in 32-bit halves: exact */
    uint64_t *r = malloc((size_t)n * sizeof *r), mine = c->m->dropout_rng->counter;
    if (!v || !r) {
        free(v);
        free(r);
        cg_set_error("out of memory");
        return false;
    }
    v[2 * me] = (double)(mine >> 32);
    v[2 * me + 1] = (double)(mine & 0xffffffffu);
    bool ok = cg_dist_allreduce_sum(v, 2 * n);
    for (int i = 0; ok && i < n; i++)
        r[i] = ((uint64_t)v[2 * i] << 32) | (uint64_t)v[2 * i + 1];
    free(v);
    if (!ok) {
        free(r);
        return false;
    }
    t->rank_counters = r;
    t->n_rank_counters = n;
    return true;
}

static bool save_root(run_ctx *c, int64_t step, cg_dist_stream *zero);
/* The other ranks wait for rank 0's files however long the disk takes:
 * their next collective would charge it to CG_DIST_TIMEOUT and end the job
 * as if rank 0 had died (a rank 0 that fails ends the job itself). Under
 * ZeRO they send it each tensor of their shards of the optimizer state and
 * the average meanwhile, as its writer reaches it: it writes the layout of
 * an unsharded run, holding one of those tensors whole at a time. */
static bool save(run_ctx *c, int64_t step)
{
    if (!gather_rank_counters(c))
        return false;
    if (!c->st.zero)
        return (!cg_dist_is_root() || save_root(c, step, NULL)) && cg_dist_wait_for_root();
    /* the step's blocks in the allocator's cache go back first: what follows
     * would add to them (charlm gpt2, 2 ranks: rank 1 at 2.15 GB, not 2.00) */
    cg_alloc_trim();
    cg_dist_stream *s = cg_dist_stream_new(c->st.opt, c->ema);
    if (!s)
        return false;
    bool ok = !cg_dist_is_root() || save_root(c, step, s);
    return cg_dist_stream_end(s) && ok;
}

/* Rank 0's part of a save: the checkpoint and the files beside it. */
static bool save_root(run_ctx *c, int64_t step, cg_dist_stream *zero)
{
    int held = cg_out_lock_keep(c->t->out, &c->t->lock);
    if (held == 0)
        return false;
    if (held == 2)
        cg_prog_warn("the lock '%s' was moved or removed during the run; taken again",
                     c->t->lock.path);
    const cg_trainer_model *m = c->m;
    /* those the checkpoint being replaced names as dropped (a resumed run
     * whose last save was cut short): removed first, so none is left that
     * the new one does not name */
    remove_dropped(c->t);
    bool keep = keep_at(c->t, step, c->cut_resumed);
    bool best = best_at(c->t, step);
    char *tj = cg_train_state_json(c->t, m);
    cg_shard_gather og = zero ? cg_dist_stream_optim(zero) : (cg_shard_gather){0},
                    eg = zero ? cg_dist_stream_ema(zero) : (cg_shard_gather){0};
    cg_ft_save ft = {
        .ema = c->ema, .optim_gather = zero ? &og : NULL, .ema_gather = zero ? &eg : NULL};
    bool ok = tj && save_files(c->t, m, c->st.opt, ft, step, keep, best, tj);
    free(tj);
    if (ok) /* kept checkpoints of this run, now too old */
        remove_dropped(c->t);
    if (ok && c->png && (c->t->hist.n > 0 || c->t->hist.dn > 0) &&
        !cg_history_plot(&c->t->hist, c->png, m->plot_title))
        cg_prog_warn("could not write the loss curve: %s", cg_last_error());
    struct stat st;
    if (ok && stat(c->t->out, &st) == 0)                      /* what the next save needs */
        c->reserve = (uint64_t)st.st_size * copies(c->t->o) + /* + its copies */
                     (c->png && stat(c->png, &st) == 0 ? st.st_size : 0);
    return ok;
}

/* A number with `decimals` decimals (null when not finite). */
static void put_fixed(cJSON *j, const char *key, double v, int decimals)
{
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%.%df", decimals < 0 ? 0 : decimals > 17 ? 17 : decimals);
    cg_json_put_num(j, key, fmt, v);
}

/* Write j (deleted) as a line of the metrics log: whole or not at all. A
 * full disk (or one with less room than the checkpoint needs) or a
 * file-size limit stops the run while the checkpoint can still be saved
 * (c->log_full); another failure is a warning and the run goes on without
 * the log. */
static void metrics_line(run_ctx *c, cJSON *j)
{
    char *s = c->t->metrics.f ? cg_json_line(j) : NULL;
    if (c->t->metrics.f && !s)
        cg_prog_warn("the metrics log misses a line: %s", cg_last_error());
    if (s && !cg_metrics_log_append(c->t->metrics.f, s, c->reserve)) {
        int e = errno;
        if (e == ENOSPC || e == EDQUOT || e == EFBIG)
            snprintf(c->log_full, sizeof c->log_full, "%s%s", cg_last_error(),
                     e == EFBIG ? " (the file-size limit, ulimit -f)" : "");
        else
            cg_prog_warn("%s; training goes on without it", cg_last_error());
        fclose(c->t->metrics.f); /* what it holds is still published at the next save */
        c->t->metrics.f = NULL;
    }
    free(s);
    cJSON_Delete(j);
}

/* The evaluation at step, its line and its metrics. -1, STOP (cut short
 * by a signal) or the exit code. */
static int evaluate(run_ctx *c, int64_t step)
{
    cg_trainer *t = c->t;
    cg_eval_result e = {.train = NAN, .val = NAN, .score = NAN};
    if (c->ema && !cg_ema_swap(c->ema)) /* the average is judged */
        return cg_prog_fail("evaluation at step %lld: %s", (long long)step, cg_last_error());
    bool ok = c->m->evaluate(c->m->self, step, &e);
    if (c->ema && !cg_ema_swap(c->ema))
        return cg_prog_fail("evaluation at step %lld: %s", (long long)step, cg_last_error());
    if (!ok && !cg_train_interrupted())
        return cg_prog_fail("evaluation at step %lld: %s", (long long)step, cg_last_error());
    /* a signal cut it short (here or on another rank: every rank evaluates
     * at the same steps, and they agree): the run stops before this step,
     * its evaluation left out, and saves */
    double cut = !ok;
    if (!cg_dist_allreduce_max(&cut, 1))
        return cg_prog_fail("evaluation at step %lld: %s", (long long)step, cg_last_error());
    if (cut > 0) {
        cg_progress_end();
        fprintf(stderr, "%s: the evaluation at step %lld was cut short by a signal\n",
                cg_prog_name(), (long long)step);
        t->interrupted = c->signalled = true;
        return STOP;
    }
    if (isnan(e.train))
        e.train = cg_trainer_recent_loss(t);
    char extra[256] = "";
    for (int i = 0; i < e.n_extra; i++)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", %s %.*f", e.extra[i].name,
                 e.extra[i].decimals, e.extra[i].value);
    cg_progress_end();
    fprintf(stderr, "%s: step %lld: train loss %.4f, val loss %.4f%s%s\n", cg_prog_name(),
            (long long)step, e.train, e.val, c->ema ? " (EMA)" : "", extra);
    if (!cg_history_push_scored(&t->hist, step, e.train, e.val, e.score))
        return cg_prog_fail_lib(NULL);
    cJSON *j = cJSON_CreateObject();
    cg_json_put_int(j, "step", step);
    cg_json_put_num(j, "train_loss", "%.6f", e.train);
    cg_json_put_num(j, "val_loss", "%.6f", e.val);
    if (c->ema) /* the average's, as the line's "(EMA)" */
        cg_json_put_bool(j, "ema", true);
    for (int i = 0; i < e.n_extra; i++)
        put_fixed(j, e.extra[i].key, e.extra[i].value, /* a count (epoch) stays one */
                  e.extra[i].decimals > 0 ? e.extra[i].decimals + 2 : 0);
    metrics_line(c, j);
    return -1;
}

/* fairseq's EMA.step after an optimizer update (a skipped step is none):
 * every --ema-update-freq F-th update moves the average, the others count
 * (t->ema_since); a move's update number (fairseq's num_updates: F times
 * the moves so far) below --ema-start-update N makes it a copy (decay 0):
 * (moves + 1) F < N, as moves + 1 < ceil(N / F), which cannot overflow. */
static bool ema_step(run_ctx *c)
{
    cg_trainer *t = c->t;
    const int64_t f = t->o->ema_update_freq;
    if (++t->ema_since < f)
        return true;
    t->ema_since = 0;
    const bool copy = cg_ema_updates(c->ema) + 1 < (t->o->ema_start + f - 1) / f;
    return (!copy || cg_ema_set_decay(c->ema, 0)) && cg_ema_update(c->ema) &&
           (!copy || cg_ema_set_decay(c->ema, t->o->ema_decay));
}

/* One optimizer step from step s to s + 1. Returns -1 (done or skipped)
 * or an exit code. */
static int train_step(run_ctx *c, bool *skipped, double *tokens)
{
    cg_trainer *t = c->t;
    const int64_t s = t->step + 1; /* the step being taken, 1-based */
    double lv;
    *skipped = false;
    cg_step_result r = cg_stepper_step(&c->st, s, &lv, tokens);
    if (r == CG_STEP_FAILED)
        return cg_prog_fail("step %lld: %s", (long long)s, cg_last_error());
    if (r == CG_STEP_NONFINITE) {
        if (access(t->out, F_OK) == 0)
            return cg_prog_fail("%s; stopping (the checkpoint %s is left as it was)",
                                cg_last_error(), t->out);
        return cg_prog_fail("%s; stopping (no checkpoint was written)", cg_last_error());
    }
    if (r == CG_STEP_SKIPPED) {
        cg_prog_warn("skipping step %lld: %s", (long long)s, cg_last_error());
        t->skipped++;
        *skipped = true;
        return -1;
    }
    if (c->ema && !ema_step(c))
        return cg_prog_fail("step %lld: the weights' average: %s", (long long)s, cg_last_error());
    if (!cg_history_train_step(&t->hist, s, lv))
        return cg_prog_fail_lib(NULL);
    t->last_loss = lv;
    if (t->n_recent == CG_TRAIN_RECENT) {
        memmove(t->recent, t->recent + 1, (CG_TRAIN_RECENT - 1) * sizeof *t->recent);
        t->n_recent--;
    }
    t->recent[t->n_recent++] = lv;
    return -1;
}

/* The room the next checkpoint and loss curve need until a save measures
 * it: those of --out when it exists (a resumed run), else the saved
 * parameters, the optimizer state and --ema-decay's average of the
 * trainable ones in fp32, and 64 KiB for the rest. */
static uint64_t first_reserve(const run_ctx *c)
{
    struct stat st;
    uint64_t r = 64 << 10;
    if (stat(c->t->out, &st) == 0 && S_ISREG(st.st_mode))
        return r + (uint64_t)st.st_size;
    int64_t trainable = 0;
    for (int i = 0; i < c->st.n_train; i++)
        trainable += cg_numel(c->st.op[i].tensor);
    int64_t saved = c->t->adapters ? trainable : cg_module_num_params(c->m->module);
    int64_t state = cg_optim_state_bytes(c->opt) * (c->st.zero ? cg_dist_size() : 1);
    int64_t averaged = c->t->o->ema_decay > 0 ? trainable : 0;
    return r + (uint64_t)(saved + averaged) * 4 + (uint64_t)(state > 0 ? state : 0);
}

/* --zero 1: what rank 0 holds of the optimizer state and of the average. */
static void zero_line(const run_ctx *c)
{
    int64_t n = 0;
    for (int i = 0; i < c->st.n_train; i++)
        n += cg_numel(c->st.op[i].tensor);
    double whole = (double)n * cg_optim_n_buffers(&c->m->optim) * sizeof(float);
    char avg[96] = "";
    if (c->ema)
        snprintf(avg, sizeof avg, ", the weights' average %.2f MB (%.2f MB)",
                 (double)cg_ema_bytes(c->ema) / 1e6, (double)n * sizeof(float) / 1e6);
    fprintf(stderr,
            "%s: ZeRO-1 over %d rank(s): optimizer state %.2f MB on rank 0 (%.2f MB "
            "unsharded)%s%s\n",
            cg_prog_name(), cg_dist_size(), (double)cg_optim_state_bytes(c->opt) / 1e6, whole / 1e6,
            avg, cg_dist_size() == 1 ? "; one process: nothing to shard" : "");
}

static int setup(run_ctx *c)
{
    cg_trainer *t = c->t;
    const cg_trainer_model *m = c->m;
    if (!cg_stepper_init(&c->st, m, (int)t->o->grad_accum, (int)t->o->zero))
        return cg_prog_fail_lib("optimizer");
    c->st.skip_nonfinite = t->o->skip_nonfinite;
    c->opt = c->st.opt;
    c->reserve = first_reserve(c) * copies(t->o); /* --keep-last, --keep-best: copies too */
    if (t->ckpt && !cg_optim_load(c->opt, t->ckpt, "optim"))
        return cg_prog_fail("'%s': %s", t->o->resume, cg_last_error());
    if (t->dropout_rng_set)
        *m->dropout_rng = t->dropout_rng;
    /* Data parallel (dist/dist.h): every rank starts from rank 0's
     * parameters and trains on its share of every global batch; dropout is
     * seeded per rank (rank 0 keeps the checkpoint's stream). */
    if (!cg_trainer_ranks_agree(t, m))
        return cg_prog_fail_lib(NULL);
    if (!cg_dist_broadcast_module(m->module))
        return cg_prog_fail_lib("broadcasting the parameters");
    /* --ema-decay: the average starts as the weights (a fresh run), or is
     * the checkpoint's */
    if (t->o->ema_decay > 0 && !(c->ema = cg_stepper_ema_new(&c->st, t->o->ema_decay)))
        return cg_prog_fail_lib("--ema-decay");
    if (t->o->zero && cg_dist_is_root())
        zero_line(c);
    if (t->ckpt && !cg_ckpt_resume_average(c->ema, t->ckpt, t->o->resume, t->o->ema_decay))
        return cg_prog_fail_lib(NULL);
    if (c->ema)
        t->hist.val_name = "validation (EMA)";
    cg_st_close(t->ckpt); /* everything is read */
    t->ckpt = NULL;
    m->dropout_rng->seed = cg_dist_rank_seed(m->dropout_rng->seed);
    if (t->n_rank_counters == cg_dist_size() && cg_dist_size() > 1) /* resumed on as many */
        m->dropout_rng->counter = t->rank_counters[cg_dist_rank()];
    if (cg_dist_is_root()) {
        c->png = cg_loss_png_path(t->out);
        char *mp = cg_ckpt_sibling(t->out, ".metrics.jsonl");
        if (!c->png || !mp) {
            free(mp);
            return cg_prog_fail("out of memory");
        }
        int64_t dropped = 0;
        if (!cg_metrics_log_open(&t->metrics, mp, t->o->resume ? t->start : -1, &dropped)) {
            free(mp);
            return cg_prog_fail_lib(NULL);
        }
        if (dropped > 0) /* one history: what the checkpoint does not hold is gone */
            cg_prog_warn("the metrics log '%s' keeps its history up to step %lld; %lld line(s) "
                         "after it (a killed run's) or damaged were dropped",
                         mp, (long long)t->start, (long long)dropped);
        free(mp);
    }
    if (t->o->resume)
        fprintf(stderr, "%s: resuming '%s' at step %lld\n", cg_prog_name(), t->o->resume,
                (long long)t->start);
    return -1;
}

/* The model's final evaluation (of the weights' average with
 * --ema-decay: the run ends with it in place), its fields into j. */
static bool final_evaluation(run_ctx *c, cJSON *j)
{
    return (!c->ema || cg_ema_swap(c->ema)) && c->m->finish(c->m->self, c->t, j);
}

/* The run's precision: "precision", and "precision_auto" (why --precision
 * auto chose it) or "precision_switched_from" (the resumed checkpoint's,
 * which a given --precision switched). */
static void put_precision(const cg_train_opts *o, cJSON *j)
{
    cg_json_put_str(j, "precision", cg_precision_name(o->precision));
    if (o->precision_auto)
        cg_json_put_str(j, "precision_auto", o->precision_auto);
    if (o->precision_was)
        cg_json_put_str(j, "precision_switched_from", o->precision_was);
}

/* The best evaluation (--keep-best, --patience): "best_step",
 * "best_val_loss", with --best-metric "best_metric" and "best_<metric>",
 * and "best_checkpoint" (when that file is there). */
static void put_best(const cg_trainer *t, cJSON *j)
{
    int b = cg_history_best(&t->hist);
    if ((!t->o->keep_best && t->o->patience == 0) || b < 0)
        return;
    cg_json_put_int(j, "best_step", t->hist.step[b]);
    cg_json_put_num(j, "best_val_loss", "%.6f", t->hist.val[b]);
    if (t->hist.metric) {
        char key[64];
        snprintf(key, sizeof key, "best_%s", t->hist.metric);
        cg_json_put_str(j, "best_metric", t->hist.metric);
        cg_json_put_num(j, key, "%.4f", t->hist.score[b]);
    }
    char *bp = t->o->keep_best ? cg_best_path(t->out) : NULL;
    if (bp && t->best_saved == t->hist.step[b] && access(bp, F_OK) == 0)
        cg_json_put_str(j, "best_checkpoint", bp);
    free(bp);
}

/* --ema-decay's fields of the JSON line (--ema-update-freq's when not 1). */
static void put_ema(const run_ctx *c, cJSON *j)
{
    const cg_train_opts *o = c->t->o;
    if (c->ema)
        cg_json_put_num(j, "ema_decay", "%.10g", o->ema_decay);
    if (c->ema && o->ema_update_freq > 1)
        cg_json_put_int(j, "ema_update_freq", o->ema_update_freq);
}

static int finish(run_ctx *c)
{
    cg_trainer *t = c->t;
    const cg_trainer_model *m = c->m;
    const char *prog = cg_prog_name();
    cg_progress_end();
    if (t->skipped > 0)
        fprintf(stderr, "%s: %lld step(s) skipped (non-finite loss or gradient)\n", prog,
                (long long)t->skipped);
    double tps = t->elapsed > 0 ? t->tokens / t->elapsed : 0;
    int nranks = cg_dist_size();
    if (nranks > 1)
        fprintf(stderr, "%s: %d ranks: %.1f s of %.1f s of training in communication (%.0f%%)\n",
                prog, nranks, t->comm, t->elapsed, 100 * t->comm / fmax(t->elapsed, 1e-9));
    /* a signal or a full disk before the first step: nothing trained, nothing saved (with
     * --force, the initial model replaced an earlier run's files; resumed, it is as saved) */
    const bool untrained = (c->signalled || c->log_stop) && c->done_steps == 0;
    if (!untrained && !save(c, t->step))
        return cg_prog_fail("could not save the checkpoint at step %lld: %s", (long long)t->step,
                            cg_last_error());
    if (c->log_stop && !cg_dist_is_root()) /* rank 0 ends the job with the reason */
        return 0;
    if (c->log_stop)
        return untrained
                   ? cg_prog_fail("%s; stopped before the first step; nothing saved", c->log_full)
                   : cg_prog_fail("%s; stopped at step %lld and saved the checkpoint '%s' "
                                  "(continue with --resume %s once there is room)",
                                  c->log_full, (long long)t->step, t->out, t->out);
    if (c->log_full[0]) /* at the last step: the run is complete all the same */
        cg_prog_warn("%s; its last line is missing", c->log_full);
    cJSON *j = cJSON_CreateObject();
    cg_json_put_int(j, "step", t->step);
    if (untrained) {
        fprintf(stderr, "%s: stopped before the first step; nothing saved\n", prog);
        cg_json_put_bool(j, "interrupted", true);
    } else if (t->interrupted) {
        fprintf(stderr,
                "%s: stopped at step %lld; checkpoint saved to '%s' (continue with "
                "--resume %s)\n",
                prog, (long long)t->step, t->out, t->out);
        cg_json_put_bool(j, "interrupted", true);
        double tl = isfinite(t->last_loss) ? t->last_loss
                    : t->hist.n > 0        ? (double)t->hist.train[t->hist.n - 1]
                                           : NAN;
        cg_json_put_num(j, "train_loss", "%.4f", tl);
    } else {
        fprintf(stderr, "%s: checkpoint saved to '%s'\n", prog, t->out);
        /* the final evaluation (seq2seq decodes for minutes) may be cut
         * short at once: everything is saved */
        cg_train_release_signals();
        if (!final_evaluation(c, j)) {
            cJSON_Delete(j);
            return cg_prog_fail_lib(NULL);
        }
        if (t->o->max_minutes > 0)
            cg_json_put_bool(j, "max_minutes_reached", t->out_of_time);
        if (t->o->patience > 0)
            cg_json_put_bool(j, "early_stopped", t->early_stopped);
    }
    put_best(t, j);
    put_precision(t->o, j);
    put_ema(c, j);
    cg_json_put_num(j, "tokens_per_s", "%.0f", tps);
    cg_json_put_num(j, "elapsed_s", "%.1f", t->elapsed);
    cg_json_put_int(j, "params", cg_module_num_params(m->module));
    if (t->from_origin) {
        int64_t trainable = 0;
        for (int i = 0; i < cg_optim_count(c->opt); i++)
            trainable += cg_numel(cg_optim_param_tensor(c->opt, i));
        cg_json_put_int(j, "trainable_params", trainable);
        cg_json_put_str(j, "init_from", t->origin.id.path);
    }
    if (!untrained)
        cg_json_put_str(j, "checkpoint", t->out);
    bool printed = cg_json_print_line(stdout, j); /* a reader gone: the result is lost, exit 1 */
    cJSON_Delete(j);
    return printed ? 0 : cg_prog_fail_lib(NULL);
}

/* --patience, after the evaluation at step: have the last `patience`
 * evaluations (of the run and the runs it resumes) all left the best
 * validation loss where it was? Then the run stops early, on every rank
 * together. GO_ON, STOP or the exit code (a failed vote: see stop_before). */
static int out_of_patience(run_ctx *c, int64_t step)
{
    cg_trainer *t = c->t;
    const cg_history *h = &t->hist;
    int b = cg_history_best(h);
    double out = t->o->patience > 0 && (b < 0 ? h->n : h->n - 1 - b) >= t->o->patience;
    if (!cg_dist_allreduce_max(&out, 1))
        return cg_prog_fail("--patience at step %lld: %s", (long long)step, cg_last_error());
    if (out == 0)
        return GO_ON;
    t->early_stopped = true;
    const char *what = cg_history_best_name(h);
    if (b >= 0)
        fprintf(stderr,
                "%s: stopping early at step %lld: %lld evaluation(s) without a %s %s %.4f "
                "(step %lld; --patience %lld)\n",
                cg_prog_name(), (long long)step, (long long)(h->n - 1 - b), what,
                h->metric ? "above" : "below", cg_history_best_value(h, b), (long long)h->step[b],
                (long long)t->o->patience);
    else
        fprintf(stderr,
                "%s: stopping early at step %lld: %d evaluation(s) without a finite %s "
                "(--patience %lld)\n",
                cg_prog_name(), (long long)step, h->n, what, (long long)t->o->patience);
    return STOP;
}

/* At step: the evaluation and the checkpoint (with the loss curve) when
 * due. -1, STOP (a signal cut the evaluation short, or --patience ran out:
 * the run ends as at its last step) or the exit code. */
static int eval_and_save(run_ctx *c, int64_t step)
{
    const cg_trainer *t = c->t;
    const cg_train_opts *o = t->o;
    int rc;
    bool due = step % o->eval_every == 0 || step == o->steps;
    if (due && (step > 0 || c->m->eval_at_start) && !evaluated_at(t, step)) {
        if ((rc = evaluate(c, step)) != -1)
            return rc;
        /* a resumed run that evaluates its first step (a signal cut that
         * evaluation short) saves it and keeps it (--keep-last), as the
         * uninterrupted run did */
        c->cut_resumed = o->resume != NULL && step == t->start && step > 0;
        if (step < o->steps && (rc = out_of_patience(c, step)) != GO_ON)
            return rc; /* STOP: finish saves, evaluates and reports */
    }
    if (due && (step > t->start || c->cut_resumed) && step < o->steps && !save(c, step))
        return cg_prog_fail("could not save the checkpoint at step %lld: %s", (long long)step,
                            cg_last_error());
    c->cut_resumed = false;
    return -1;
}

/* Stop before step? Every rank stops at the same step: a signal, a metrics
 * log that cannot be written, --stop-at, --max-minutes (which ends the run
 * as at the last step, evaluated). GO_ON, STOP or the exit code. */
static int stop_before(run_ctx *c, int64_t step)
{
    cg_trainer *t = c->t;
    const cg_train_opts *o = t->o;
    double stop[3] = {cg_train_interrupted(),
                      o->max_minutes > 0 && cg_now() - c->t_begin >= 60 * o->max_minutes,
                      c->log_full[0] != 0};
    if (!cg_dist_allreduce_max(stop, 3)) /* read as "no", this rank would train on alone */
        return cg_prog_fail("stop vote before step %lld: %s", (long long)step, cg_last_error());
    if (stop[2] > 0) {
        t->interrupted = c->log_stop = true;
        return STOP;
    }
    if (stop[0] > 0 || (o->stop_at >= 0 && step >= o->stop_at)) {
        t->interrupted = true;
        c->signalled = stop[0] > 0;
        return STOP;
    }
    if (stop[1] == 0)
        return GO_ON;
    t->out_of_time = true;
    fprintf(stderr, "%s: --max-minutes %g reached at step %lld\n", cg_prog_name(), o->max_minutes,
            (long long)step);
    int rc = evaluated_at(t, step) ? -1 : evaluate(c, step);
    return rc >= 0 ? rc : STOP;
}

/* After a step taken in dt seconds over tokens: the clock and the counts,
 * then the progress line (a terminal: 4 times a second; else every
 * log_every steps) and the metrics log's line (every log_every steps). */
static void report_step(run_ctx *c, double dt, double tokens, bool skipped)
{
    cg_trainer *t = c->t;
    const cg_train_opts *o = t->o;
    t->step++;
    t->elapsed += dt;
    t->tokens += tokens;
    c->win_tok += tokens;
    c->win_time += dt;
    c->done_steps++;
    bool last = t->step == o->steps, logged = t->step % c->log_every == 0 || last;
    if (skipped)
        return;
    double tps = c->win_time > 0 ? c->win_tok / c->win_time : 0;
    double lr = cg_optim_lr(c->opt), loss = cg_trainer_recent_loss(t);
    if (c->tty ? (cg_now() - c->last_print > 0.25 || last) : logged) {
        double eta = (double)(o->steps - t->step) * t->elapsed / (double)c->done_steps;
        if (o->max_minutes > 0) /* the budget's end comes first */
            eta = fmin(eta, fmax(0.0, 60 * o->max_minutes - (cg_now() - c->t_begin)));
        cg_progress(cg_prog_name(), t->step, o->steps, loss, lr, tps, eta);
        c->last_print = cg_now();
    }
    if (logged) { /* the metrics log */
        cJSON *j = cJSON_CreateObject();
        cg_json_put_int(j, "step", t->step);
        cg_json_put_num(j, "loss", "%.6f", t->last_loss);
        cg_json_put_num(j, "loss_avg", "%.6f", loss);
        cg_json_put_num(j, "lr", "%.10g", lr); /* its digits at any size (1e-11) */
        cg_json_put_num(j, "tokens_per_s", "%.0f", tps);
        cg_json_put_num(j, "elapsed_s", "%.2f", t->elapsed);
        metrics_line(c, j);
        c->win_tok = c->win_time = 0;
    }
}

/* One iteration of the training loop, in order, as nanoGPT's loop reads:
 *   1. at an evaluation step: evaluate, save the checkpoint and loss curve;
 *   2. stop at --steps, or here on a signal, --stop-at, --max-minutes;
 *   3. the optimizer step (stepper.c cg_stepper_step, itself in order:
 *      the micro-batches of --grad-accum, forward + loss and backward of
 *      each, the gradients reduced over the ranks, clipping, the
 *      schedule's learning rate, the optimizer), its loss recorded;
 *   4. the clock, the progress line and the metrics log.
 * Returns GO_ON, STOP (the run ends: save and report) or the exit code. */
static int iteration(run_ctx *c)
{
    const int64_t step = c->t->step;
    int rc = eval_and_save(c, step);
    if (rc != -1)
        return rc;
    if (step >= c->t->o->steps)
        return STOP;
    if ((rc = stop_before(c, step)) != GO_ON)
        return rc;
    double t0 = cg_now(), comm0 = cg_dist_comm_seconds(), tokens = 0;
    bool skipped;
    if ((rc = train_step(c, &skipped, &tokens)) >= 0)
        return rc;
    c->t->comm += cg_dist_comm_seconds() - comm0; /* the steps' own, not the set-up's or a save's */
    report_step(c, cg_now() - t0, tokens, skipped);
    return GO_ON;
}

/* What the model must give (models/train/run.h cg_trainer_model). */
static bool model_complete(const cg_trainer_model *m)
{
    const struct {
        bool given;
        const char *what;
    } need[] = {{m->name, "name"},
                {m->module, "module"},
                {m->batch, "batch"},
                {m->loss, "loss"},
                {m->lr, "lr"},
                {m->evaluate, "evaluate"},
                {m->finish, "finish"},
                {m->config_json, "config_json"},
                {m->tok, "tokenizer (tok), which its checkpoints keep"}};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!need[i].given) {
            cg_set_error("the trainer's model has no %s", need[i].what);
            return false;
        }
    return true;
}

int cg_trainer_run(cg_trainer *t, const cg_trainer_model *model)
{
    if (!model_complete(model))
        return cg_prog_fail_lib(NULL);
    cg_trainer_model m_own = *model, *m = &m_own;
    if (!m->dropout_rng) { /* a model without dropout: a stream nothing draws from */
        t->own_dropout_rng = cg_model_dropout_rng(t->o->seed);
        m->dropout_rng = &t->own_dropout_rng;
    }
    if (!m->plot_title)
        m->plot_title = m->name;
    run_ctx c = {.t = t, .m = m};
    const cg_train_opts *o = t->o;
    int rc = setup(&c);
    if (rc < 0) {
        c.tty = cg_progress_is_tty();
        c.log_every = o->log_every;
        if (c.log_every <= 0) {
            c.log_every = o->steps / 20 > 0 ? o->steps / 20 : 1;
            if (c.log_every > 100)
                c.log_every = 100;
        }
        c.t_begin = cg_now();
        while ((rc = iteration(&c)) == GO_ON)
            ;
        if (rc == STOP)
            rc = finish(&c);
    }
    cg_progress_end();
    free(c.png);
    cg_ema_free(c.ema);
    cg_stepper_free(&c.st);
    return rc;
}
