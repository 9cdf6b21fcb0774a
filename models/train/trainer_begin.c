/* cgrad zoo: the trainer's set-up and end (see trainer.h): the output
 * rules checked before any training, --resume's checkpoint read. The loop
 * itself is trainer.c. */
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

/* ============================================================ output */
/* Everything about the output, before any training (models/train/outfile.h): a
 * file name that fits with its temporary and sibling files, a regular file
 * or absent, a writable directory (created when missing, as mkdir -p), and
 * the lock on NAME.cgrad-lock. */
static int check_output(cg_trainer *t, const char *out)
{
    if (!cg_out_check(out, true) || !cg_out_lock_take(out, &t->lock))
        return cg_prog_fail_lib(NULL);
    return -1;
}

/* The base a LoRA checkpoint given to --resume loads (--base, else the one
 * it records; models/train/finetune.h) is read by the run like --resume:
 * no file the run writes may be it. It must hold every weight, so no other
 * file is followed from it. */
static bool check_base_read(const cg_trainer *t)
{
    const cg_train_opts *o = t->o;
    if (!o->resume || !t->adapters || !t->from_origin)
        return true; /* (an adapter without "init_from" is refused at its load) */
    const char *base = cg_ft_base_path(o->resume, &t->origin, o->base);
    return base &&
           cg_out_check_reads(t->out, base, o->base ? "--base" : "the base of --resume", true);
}

/* Does the command's flag table have the flag name? */
static bool has_flag(const cg_cli_args *a, const char *name)
{
    for (int i = 0; a && i < a->n; i++)
        if (a->opts[i].name && strcmp(a->opts[i].name, name) == 0)
            return true;
    return false;
}

/* --keep-last: the kept checkpoints already there are this run's (or
 * --force), never a file the run reads (models/train/outfile.h
 * cg_kept_check). */
static bool check_kept(const cg_trainer *t)
{
    const cg_train_opts *o = t->o;
    const char *reads[] = {o->data, o->extra_data, o->init_from},
               *what[] = {"--data", "--extra-data", "--init-from"};
    /* the run's own: those it keeps, and those its last save dropped (a
     * run killed before it removed them) */
    int64_t ours[2 * (CG_TRAIN_KEEP_MAX + 1)];
    memcpy(ours, t->kept, (size_t)t->n_kept * sizeof *ours);
    memcpy(ours + t->n_kept, t->dropping, (size_t)t->n_dropping * sizeof *ours);
    return cg_kept_check(t->out, ours, t->n_kept + t->n_dropping, o->force, reads, what, 3);
}

/* --keep-best: the best checkpoint is a file the run writes. It follows a
 * checkpoint's rules (cg_out_check), is none of the files the run reads
 * nor standard output, and is absent unless the run may replace what is
 * there (--force, or a resume into out: then it is the run's own). */
static bool check_best(const cg_trainer *t, bool may_replace)
{
    const cg_train_opts *o = t->o;
    const char *reads[] = {o->data, o->extra_data, o->init_from, o->resume},
               *what[] = {"--data", "--extra-data", "--init-from", "--resume"};
    char *bp = cg_best_path(t->out);
    bool ok = bp && cg_out_check(bp, false) &&
              cg_out_check_stdout_writes(bp, "the best checkpoint this run writes");
    for (int i = 0; ok && i < 4; i++)
        if (reads[i] && cg_same_file(bp, reads[i])) {
            cg_set_error("%s '%s' is the same file as '%s', the best checkpoint this run writes "
                         "(--keep-best); choose another --out (nothing was written)",
                         what[i], reads[i], bp);
            ok = false;
        }
    struct stat st;
    if (ok && !may_replace && lstat(bp, &st) == 0) {
        cg_set_error("'%s' exists: the best checkpoint of '%s', which this run writes "
                     "(--keep-best); pass --force to overwrite it, or choose another --out",
                     bp, t->out);
        ok = false;
    }
    free(bp);
    return ok;
}

/* Does the resumed run (at step t->start) have a step left before --steps
 * and --stop-at? False + error. */
static bool resume_has_steps(const cg_trainer *t, const cg_train_opts *o)
{
    if (t->start >= o->steps)
        cg_set_error("'%s' is already at step %lld of %lld; pass a larger --steps", o->resume,
                     (long long)t->start, (long long)o->steps);
    else if (o->stop_at >= 0 && o->stop_at <= t->start) /* it would stop before a step */
        cg_set_error("--stop-at %lld: '%s' is already at step %lld; pass a later step",
                     (long long)o->stop_at, o->resume, (long long)t->start);
    else
        return true;
    return false;
}

/* --best-metric's name for the history: NULL for the validation loss (o
 * NULL: none, cg_trainer_end's). */
static const char *best_metric(const cg_train_opts *o)
{
    return o && o->best_metric && strcmp(o->best_metric, "loss") != 0 ? o->best_metric : NULL;
}

/* A resumed history judged by a score (--best-metric): every evaluation of
 * that run recorded one (BLEU and chrF are always numbers), so one missing
 * is damage, which would choose another best evaluation and count
 * --patience otherwise, silently. False + error naming the evaluation. */
static bool scores_recorded(const cg_history *h, const char *path)
{
    for (int i = 0; h->metric && i < h->n; i++)
        if (!isfinite(h->score[i])) {
            cg_set_error("'%s': its history has no %s of the evaluation at step %lld (a damaged "
                         "checkpoint?)",
                         path, h->metric, (long long)h->step[i]);
            return false;
        }
    return true;
}

void cg_trainer_init(cg_trainer *t, cg_train_opts *o)
{
    memset(t, 0, sizeof *t);
    t->o = o;
    t->lock.fd = -1;
    t->last_loss = NAN;
    t->best_saved = -1;
    t->hist.metric = best_metric(o);
}

/* --resume: the checkpoint, its recipe, history and origin; -1 to go on, else
 * the exit code */
static int begin_resume(cg_trainer *t, cg_train_opts *o, const char *kind)
{
    char given[512];
    if (cg_cli_given_list(o->args, CG_CLI_FIXED, given, sizeof given)) {
        cg_prog_fail("--resume continues a run with the model and recipe of its "
                     "checkpoint; drop %s",
                     given);
        return CG_EXIT_USAGE; /* the flags alone say it */
    }
    t->ckpt = cg_ckpt_open(o->resume, kind);
    if (!t->ckpt)
        return cg_prog_fail_lib(NULL);
    const bool merged = cg_st_metadata(t->ckpt, "merged") != NULL; /* models/train/merge.h */
    if (merged || cg_st_metadata(t->ckpt, "averaged"))             /* models/train/average.h */
        return cg_prog_fail("'%s' is %s: weights only, no optimizer state, so --resume cannot "
                            "continue it%s",
                            o->resume,
                            merged ? "LoRA adapters merged into their base (resume the adapter "
                                     "checkpoint instead)"
                                   : "an average of checkpoints",
                            has_flag(o->args, "--init-from")
                                ? " (start a new run from its weights with --init-from)"
                                : "; use it to decode and evaluate");
    t->start = cg_ckpt_step(t->ckpt);
    if (!cg_trainer_restore(t, cg_st_metadata(t->ckpt, "train"), o->resume) ||
        !cg_ft_origin_read(t->ckpt, o->resume, &t->origin, &t->from_origin))
        return cg_prog_fail_lib(NULL);
    t->adapters = cg_ft_is_adapter(t->ckpt);
    t->hist.metric = best_metric(o); /* the checkpoint's --best-metric */
    if (!scores_recorded(&t->hist, o->resume))
        return cg_prog_fail_lib(NULL);
    int b = cg_history_best(&t->hist); /* --keep-best: written then, or not kept */
    t->best_saved = b >= 0 ? t->hist.step[b] : -1;
    if (!resume_has_steps(t, o))
        return cg_prog_fail_lib(NULL);
    return -1;
}

int cg_trainer_begin(cg_trainer *t, cg_train_opts *o, const char *kind, const char *default_out)
{
    cg_trainer_init(t, o);
    int rc;
    if (o->init_from && o->resume) {
        cg_prog_fail("--init-from starts a new run from a checkpoint's weights, --resume "
                     "continues a run: give one of them");
        return CG_EXIT_USAGE;
    }
    if (o->init_no_ema && !o->init_from) {
        cg_prog_fail("--no-ema needs --init-from (it picks the weights a new run starts from)");
        return CG_EXIT_USAGE;
    }
    cg_cli_set_threads(cg_prog_name(), o->threads);
    t->out = o->out ? o->out : o->resume ? o->resume : default_out;
    if (o->resume) {
        int rr = begin_resume(t, o, kind);
        if (rr >= 0)
            return rr;
    }
    /* before the model is built or evaluated; cg_trainer_end restores it */
    t->outer_precision = cg_autocast_begin(o->precision);
    t->autocast = true;
    if (cg_dist_is_root()) { /* rank 0 alone writes */
        /* an existing checkpoint is replaced only with --force or by its resume */
        bool may_replace = o->force || (o->resume && strcmp(t->out, o->resume) == 0);
        /* the result line into a file the run replaces is lost (and `>> m.st`
         * made m.st: named as standard output, not as an existing checkpoint) */
        if (!cg_out_check_stdout_run(t->out) ||
            !cg_out_check_regular(t->out)) /* a directory is no checkpoint, --force or not */
            return cg_prog_fail_lib(NULL);
        if (access(t->out, F_OK) == 0 && !may_replace)
            return cg_prog_fail("checkpoint %s exists; continue it with --resume %s, or pass "
                                "--force to overwrite it",
                                t->out, t->out);
        /* no file written is a file read (with --force too) */
        if ((o->data && !cg_out_check_reads(t->out, o->data, "--data", true)) ||
            (o->resume && !cg_out_check_reads(t->out, o->resume, "--resume", false)) ||
            (o->extra_data && !cg_out_check_reads(t->out, o->extra_data, "--extra-data", true)) ||
            (o->init_from && !cg_out_check_reads(t->out, o->init_from, "--init-from", true)) ||
            !check_base_read(t))
            return cg_prog_fail_lib(NULL);
        /* so are the files beside it (after the reads: a file read is named as one) */
        if (!may_replace && !cg_out_check_siblings(t->out))
            return cg_prog_fail_lib(NULL);
        if ((o->keep_last > 0 && !check_kept(t)) || (o->keep_best && !check_best(t, may_replace)))
            return cg_prog_fail_lib(NULL);
        rc = check_output(t, t->out);
        if (rc >= 0)
            return rc;
        char *last = o->keep_last > 0 ? cg_kept_path(t->out, o->steps) : NULL;
        bool fits = !last || cg_out_check(last, false); /* its name fits */
        free(last);
        if (!fits || (o->keep_last > 0 && !last))
            return cg_prog_fail_lib(NULL);
    }
    t->step = t->start;
    return -1;
}

bool cg_trainer_set_origin(cg_trainer *t, const char *path, const cg_st_file *f, bool adapters)
{
    t->adapters = adapters;
    return (t->from_origin = cg_ft_origin_of(path, f, &t->origin));
}

bool cg_trainer_set_data(cg_trainer *t, const cg_data_id *id)
{
    if (t->data_stored_set && !cg_data_id_check(&t->data_stored, id))
        return false;
    t->data = *id;
    t->data_set = true;
    return true;
}

void cg_eval_add(cg_eval_result *e, const char *key, const char *name, double value, int decimals)
{
    int n = (int)(sizeof e->extra / sizeof e->extra[0]);
    if (e->n_extra >= n)
        return;
    e->extra[e->n_extra].key = key;
    e->extra[e->n_extra].name = name;
    e->extra[e->n_extra].value = value;
    e->extra[e->n_extra++].decimals = decimals;
}

double cg_trainer_recent_loss(const cg_trainer *t)
{
    double s = 0;
    for (int i = 0; i < t->n_recent; i++)
        s += t->recent[i];
    return t->n_recent ? s / t->n_recent : NAN;
}

void cg_trainer_end(cg_trainer *t)
{
    cg_st_close(t->ckpt);
    cJSON_Delete(t->state);
    cg_history_free(&t->hist);
    free(t->rank_counters);
    /* its last lines may be lost; never published (no save): the old log stays */
    if (!cg_metrics_log_close(&t->metrics))
        cg_prog_warn("%s", cg_last_error());
    cg_out_lock_release(&t->lock);
    if (t->autocast)
        cg_autocast_end(t->outer_precision);
    cg_trainer_init(t, NULL);
}
