/* cgrad zoo: the one trainer behind `charlm train` and `seq2seq train`, and
 * the conventions every zoo program shares.
 *
 * The trainer holds the training loop and everything around it once:
 *   - the output rules: an existing checkpoint is kept unless --force or
 *     --resume into it, checked before anything is trained;
 *   - --resume: the checkpoint's state (position, RNG streams, optimizer,
 *     loss history, recipe) restored exactly; flags that would change the
 *     recipe are refused with one message naming them; a run already at its
 *     --steps is refused;
 *   - MPI (models/train/dist.h): parameters from rank 0, gradients averaged with
 *     each rank's weight (rows or target tokens), every rank stopping at the
 *     same step, rank 0 alone writing;
 *   - the step: --grad-accum micro-batches, loss and gradients checked for
 *     NaN/Inf (stop naming the step and the parameter, or --skip-nonfinite),
 *     clipping, the model's learning-rate schedule, the optimizer;
 *   - the progress line with tokens/s and time left, evaluation, checkpoint
 *     and loss-curve cadence (--eval-every), SIGINT/SIGTERM (save, exit 0),
 *     --stop-at, --max-minutes, the final JSON line (null for a non-finite
 *     number).
 * A model plugs in what is its own through cg_trainer_model: its batches
 * and loss, its evaluation, its learning rate, and the state it saves.
 *
 * Checkpoint layout (both models; models/train/checkpoint.h writes it):
 *   metadata "model" (charlm|seq2seq), "config", the tokenizer ("vocab", or
 *   "tokenizer": "bpe" with the tensor "tokenizer.spm"), "step", and
 *   "train": {"steps", "eval_every", "seed" (string), "grad_accum", "data",
 *             "dropout_rng": {"seed","counter"} (strings),
 *             "recent": [last training losses], "history": {...},
 *             "options": {per-run options, see cg_train_opts},
 *             "model": {the model's own state: batch stream, epoch, ...}}
 *   tensors: the parameters and the optimizer state under "optim.".
 *
 * Exit codes of every zoo program: 0 success (also a run stopped by
 * SIGINT/SIGTERM or --stop-at, which saves); 1 a failure (bad input, bad
 * data or checkpoint, a NaN, a failed save); 2 a bad command line (missing
 * or unknown command, unknown flag, bad flag value). Every error is one
 * line "PROG: error: ..." on stderr; under MPI an error ends every rank. */
#ifndef CG_MODELS_TRAINER_H
#define CG_MODELS_TRAINER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/gemm.h"
#include "core/tensor.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/train/dist.h"
#include "models/train/outfile.h"
#include "models/text/tokenizer.h"
#include "models/train/train_common.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/safetensors.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { CG_EXIT_OK = 0, CG_EXIT_FAIL = 1, CG_EXIT_USAGE = 2 };

/* ------------------------------------------------------------ programs */
/* The program name used in messages ("charlm"). */
void cg_prog_set_name(const char *prog);
const char *cg_prog_name(void);
/* "PROG: error: <msg>" (one line: newlines become spaces) on stderr;
 * returns CG_EXIT_FAIL. */
int cg_prog_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* cg_prog_fail with the library's last error message. */
int cg_prog_fail_lib(const char *what);
/* Print like cg_prog_fail and end the process with code (every MPI rank). */
_Noreturn void cg_prog_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* cg_prog_die(CG_EXIT_FAIL) with the library's last error message
 * ("what: message" when what is not NULL). */
_Noreturn void cg_prog_die_lib(const char *what);
void cg_prog_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse a command's flags. Returns -1 to go on, else the exit code to
 * return at once: 0 after printing help on --help, CG_EXIT_USAGE after the
 * error line. */
int cg_prog_parse(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help);

/* cg_prog_parse for a command that also takes positional arguments
 * (cg_cli_split): the flags are parsed, and the positional arguments are
 * moved, in order, to argv[0..*np). */
int cg_prog_parse_pos(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help,
                      int *np);
typedef struct {
    const char *name;
    int (*run)(int argc, char **argv); /* argv after the command name */
} cg_prog_command;

/* A zoo program's main(): MPI set-up (models/train/dist.h), the command
 * dispatch (a missing or unknown command exits CG_EXIT_USAGE), and an
 * MPI abort of every rank when a command fails. */
int cg_prog_main(int argc, char **argv, const char *prog, const char *help,
                 const cg_prog_command *cmds, int ncmds);

/* ------------------------------------------------------------ JSON lines */
/* A one-line JSON object built field by field ({"a": 1, "b": "x"}); a
 * non-finite number is written as null. */
typedef struct {
    char *buf;
    size_t len, cap;
    bool oom;
} cg_jline;

void cg_jline_num(cg_jline *j, const char *key, double v, int decimals);
void cg_jline_int(cg_jline *j, const char *key, int64_t v);
void cg_jline_str(cg_jline *j, const char *key, const char *v);
void cg_jline_bool(cg_jline *j, const char *key, bool v);
/* The finished line (borrowed, valid until cg_jline_free) or NULL. */
const char *cg_jline_end(cg_jline *j);
void cg_jline_free(cg_jline *j);

/* ------------------------------------------------------------ options */
/* The flags both `train` commands share, with one meaning and default. A
 * model reads the shape and recipe fields it has; *_seen says the flag was
 * given. The shape and recipe flags are fixed by a checkpoint: --resume
 * refuses them. */
typedef struct {
    /* the run */
    int64_t steps, eval_every, log_every, stop_at, threads, grad_accum;
    double max_minutes;        /* --max-minutes: wall-time budget, 0 = none */
    uint64_t seed;
    const char *data, *out, *resume;
    bool force, skip_nonfinite;
    bool recompute;            /* --recompute: activations recomputed in backward */
    bool steps_seen, eval_every_seen, log_every_seen, seed_seen, data_seen;
    /* the model's shape and recipe (a model uses those it has) */
    int64_t d, H, layers, enc_layers, dec_layers, d_ff;
    const char *norm, *act;
    bool norm_first;
    double dropout, label_smoothing, lr;
    bool d_seen, H_seen, layers_seen, enc_layers_seen, dec_layers_seen, d_ff_seen, norm_seen,
        act_seen, norm_first_seen, dropout_seen, label_smoothing_seen, lr_seen;
    /* Per-run options that a checkpoint keeps (its "options"; fixed on
     * resume): add the field here, its flag in cg_train_cli_opts and
     * FIXED_COMMON, and one line each in trainer.c's options_save /
     * options_restore. */
    const char *precision_arg; /* --precision fp32|bf16 as given */
    cg_precision precision;    /* of the matrix products (core/gemm.h); fp32 */
    /* The tokenizer of a fresh run (a checkpoint keeps its own; fixed on
     * resume): --tokenizer char|bpe as given and parsed, --vocab-size. */
    const char *tokenizer_arg;
    cg_tokenizer_kind tokenizer;
    int64_t vocab_size; /* 4000 */
    bool vocab_size_seen;
} cg_train_opts;

/* A model's named shape (--preset); a model uses the fields it has. */
typedef struct {
    const char *name;
    int64_t d, H, layers, enc_layers, dec_layers, d_ff, T, B;
} cg_train_preset;

/* The preset called name among p[0..n), or NULL + error ("--preset:
 * unknown preset 'x' (choices: tiny, base)"). */
const cg_train_preset *cg_train_preset_find(const cg_train_preset *p, int n, const char *name);
/* *out = *p with the shape flags given in o (--d --H --layers --enc-layers
 * --dec-layers --d-ff) applied, and --norm/--act, when given, parsed into
 * *norm and *act (which hold the model's defaults). False + error naming
 * the flag. */
bool cg_train_shape(const cg_train_opts *o, const cg_train_preset *p, cg_train_preset *out,
                    cg_norm_kind *norm, cg_act *act);

/* Which model-shape flags a program has. */
enum {
    CG_TRAIN_FLAGS_LAYERS = 1,     /* --layers */
    CG_TRAIN_FLAGS_ENC_DEC = 2     /* --enc-layers --dec-layers */
};

/* Defaults: steps/eval_every/seed as given in *o; stop_at -1 (off),
 * log_every 0 (auto), threads 0 (all cores), grad_accum 1. */
void cg_train_opts_init(cg_train_opts *o);
/* Append the shared flag table to opts (room for CG_TRAIN_MAX_OPTS);
 * returns the number appended. */
#define CG_TRAIN_MAX_OPTS 40
int cg_train_cli_opts(cg_train_opts *o, unsigned which, cg_cli_opt *opts);
/* The help text of the shared flags. */
extern const char CG_TRAIN_HELP_COMMON[];
/* The flags --tokenizer NAME (NULL: char) and --vocab-size N (given:
 * seen) into *kind (cg_trainer_begin checks o's): -1 when they are good,
 * else the exit code with the error set (CG_EXIT_USAGE for a bad name, --vocab-size without bpe or
 * below CG_SPM_MIN_VOCAB; CG_EXIT_FAIL for bpe in a build without
 * SentencePiece). */
int cg_train_tokenizer_flags(const char *name, bool seen, int64_t vocab_size,
                             cg_tokenizer_kind *kind);
/* cg_prog_parse for a train command: --help prints help, then the shared
 * flags' help. */
int cg_train_parse(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help);

/* ------------------------------------------------------------ the trainer */
#define CG_TRAIN_RECENT 250 /* training losses averaged for the progress line */

typedef struct cg_trainer cg_trainer;

/* An evaluation's figures. */
typedef struct {
    double train, val;
    int n_extra;
    struct {
        const char *key;  /* metrics-log key ("val_nll") */
        const char *name; /* on the evaluation line ("nll") */
        double value;
        int decimals;
    } extra[4];
} cg_eval_result;
/* Append a figure to e->extra (ignored when it is full). */
void cg_eval_add(cg_eval_result *e, const char *key, const char *name, double value,
                 int decimals);

/* What a model plugs in. `self` is passed back to every callback. */
typedef struct {
    const char *name;       /* "charlm": the checkpoint's "model" and messages */
    const char *plot_title; /* title of the loss curve */
    cg_module *module;
    cg_rng *dropout_rng;    /* the model's dropout stream: saved, seeded per rank */
    cg_optim_config optim;  /* the optimizer (its lr is set every step) */
    double weight_decay_2d; /* weight decay of parameters with >= 2 dims */
    double weight_decay_1d; /* ... and of the others */
    double clip_norm;       /* 0: no clipping */
    bool eval_at_start;     /* evaluate at step 0 too */
    void *self;
    /* Make micro-batch k (0 <= k < grad_accum) of the next optimizer step:
     * this rank's share. *weight: what the model's loss is a mean over on
     * this rank (rows, target tokens); *tokens: tokens processed here. */
    bool (*batch)(void *self, int k, double *weight, double *tokens);
    /* The mean loss of micro-batch k (a graph to backpropagate). */
    cg_tensor *(*loss)(void *self, int k);
    /* Learning rate of the optimizer step that brings the model to step
     * `step` (1-based). */
    double (*lr)(void *self, int64_t step);
    /* Evaluation at `step`: e->val, and e->train (NaN: the trainer uses
     * the mean of the recent training losses); e->extra: more figures for
     * the evaluation line and the metrics log. */
    bool (*evaluate)(void *self, int64_t step, cg_eval_result *e);
    /* At the end of a completed run (the checkpoint is saved): the final
     * evaluation; adds its fields to the JSON line. */
    bool (*finish)(void *self, const cg_trainer *t, cg_jline *j);
    /* The checkpoint's "config" (malloc'd), its tokenizer (borrowed;
     * models/text/tokenizer.h) and the model's own trainer state, added to o. */
    char *(*config_json)(void *self);
    const cg_tokenizer *(*tokenizer)(void *self);
    bool (*state_save)(void *self, cJSON *o);
} cg_trainer_model;

/* The optimizer step alone (what cg_trainer_run repeats; build/tools/bench
 * times it): grad_accum micro-batches (each loss weighted by its share of
 * the step's units), backward, gradients averaged over MPI ranks, the NaN
 * check, clipping, the optimizer. */
typedef struct {
    const cg_trainer_model *m;
    cg_optim *opt;          /* over the module's parameters (m->optim) */
    int grad_accum;
    bool skip_nonfinite;
    cg_param_list pl;
    cg_optim_param *op;
    double *w, *tok;
    /* With more than one rank: gradients averaged during the last
     * micro-batch's backward (models/train/dist.h cg_dist_reducer; buckets
     * of CG_DIST_BUCKET_MB, default 4); CG_DIST_OVERLAP=0 averages them
     * after backward instead (cg_dist_average_grads). */
    cg_dist_reducer *reducer;
} cg_stepper;

typedef enum {
    CG_STEP_OK = 0,
    CG_STEP_SKIPPED,   /* non-finite with skip_nonfinite: no update (error: why) */
    CG_STEP_NONFINITE, /* non-finite loss or gradient (error: the step and the parameter) */
    CG_STEP_FAILED     /* error */
} cg_step_result;

/* False + error (free with cg_stepper_free either way). */
bool cg_stepper_init(cg_stepper *s, const cg_trainer_model *m, int grad_accum);
void cg_stepper_free(cg_stepper *s);
/* Take the optimizer step numbered step (1-based; its learning rate is
 * m->lr(step)). *loss: the step's mean loss over every rank; *tokens: the
 * tokens processed by every rank. */
cg_step_result cg_stepper_step(cg_stepper *s, int64_t step, double *loss, double *tokens);

struct cg_trainer {
    cg_train_opts *o;      /* with --resume: the checkpoint's recipe filled in */
    const char *out;       /* the checkpoint written */
    /* resuming: the checkpoint (open) and its state */
    cg_st_file *ckpt;
    cJSON *state;
    const cJSON *model_state; /* its "model" object (borrowed from state) */
    int64_t start, step;
    /* the run */
    cg_history hist;
    double recent[CG_TRAIN_RECENT];
    int n_recent;
    double elapsed, tokens; /* training seconds and tokens of this process */
    double last_loss;       /* loss of the last step taken */
    int64_t skipped;
    bool interrupted;
    bool out_of_time;       /* stopped by --max-minutes (a normal end otherwise) */
    cg_rng dropout_rng;     /* the saved stream (from the checkpoint on resume) */
    bool dropout_rng_set;
    cg_data_id data;        /* the data read (models/train/outfile.h), once set */
    bool data_set;
    cg_data_id data_stored; /* resuming: the identity the checkpoint recorded */
    bool data_stored_set;
    cg_out_lock lock;       /* flock'd FILE.cgrad-lock beside the checkpoint (models/train/outfile.h) */
    FILE *metrics;          /* FILE.metrics.jsonl (rank 0) */
};

/* Start a training command: threads, the output rules (an existing --out
 * is refused unless --force or resuming into it), and with --resume: open
 * the checkpoint (its "model" must be kind), refuse the fixed flags given
 * on the command line, restore the shared state into t and *o (steps unless
 * given, eval_every unless given, seed, data unless given, ...) and refuse
 * a run already at its --steps. Returns -1 to go on, else an exit code
 * (the error is printed). argv/opts: as parsed, for the fixed-flag check;
 * fixed: the model's own flags fixed by a checkpoint ("--preset --T"),
 * besides the shared shape and recipe flags. */
int cg_trainer_begin(cg_trainer *t, cg_train_opts *o, const char *kind, const char *default_out,
                     const char *fixed, int argc, char **argv, const cg_cli_opt *opts, int nopts);
/* An empty trainer over options o (cg_trainer_begin calls it). */
void cg_trainer_init(cg_trainer *t, cg_train_opts *o);
/* Restore the shared state of a checkpoint's "train" metadata into t and
 * t->o, every field range-checked (what --resume does; path names the file
 * in messages). False + error. */
bool cg_trainer_restore(cg_trainer *t, const char *train_json, const char *path);
/* Record the data read (its identity from cg_corpus_read/cg_pairs_read:
 * absolute path, size, XXH3), kept in the checkpoint's "data" and
 * "data_id", so that eval and --resume find it from any directory and
 * know it again. Resuming a checkpoint that recorded an identity, the data
 * must be the same bytes (a moved copy named by --data is fine): false +
 * error naming the difference otherwise. */
bool cg_trainer_set_data(cg_trainer *t, const cg_data_id *id);
/* The same check for a checkpoint's "train" metadata (eval): true when it
 * recorded no identity or id is the same data; false + error otherwise. */
bool cg_train_data_check(const char *train_json, const char *ckpt_path, const cg_data_id *id);
/* The data an eval reads: `given` when not NULL, else the path that a
 * checkpoint's "train" metadata recorded, else default_data; a malloc'd
 * copy or NULL + error. */
char *cg_train_data_path(const char *train_json, const char *given, const char *default_data);
/* Train from t->start to o->steps (or a stop), then finish: save, the
 * model's final evaluation, the JSON line. Returns the exit code. */
int cg_trainer_run(cg_trainer *t, const cg_trainer_model *m);
/* Mean of the recent training losses (NaN if none). */
double cg_trainer_recent_loss(const cg_trainer *t);
void cg_trainer_end(cg_trainer *t);

/* Fields of a training state (JSON objects in the checkpoint): 64-bit
 * integers and doubles are kept exactly as decimal strings; they are read
 * back, range-checked, with cg_json_read_fields (models/util/config_json.h:
 * CG_JF_U64STR, CG_JF_F64). */
bool cg_state_put_u64(cJSON *o, const char *key, uint64_t v);
bool cg_state_put_f64(cJSON *o, const char *key, double v);
/* A model's own state through one field table: written into o (CG_JF_I64
 * as a number, CG_JF_F64 and CG_JF_U64STR as exact decimal strings,
 * CG_JF_STR as a string) when o is not NULL, else read back from
 * t->model_state (resuming; false + error "'FILE': KIND training state:
 * ..."). */
bool cg_trainer_model_state(const cg_trainer *t, const char *kind, cJSON *o,
                            const cg_json_field *f, int n);

/* Read fields of a model's own state from a checkpoint's "train" metadata
 * (its "model" object; the top level in checkpoints written before the one
 * trainer), as eval needs them: true without reading when train_json is
 * NULL or not JSON; false + error "'FILE': KIND training state: ..." for a
 * bad field. */
bool cg_train_model_fields(const char *train_json, const char *ckpt_path, const char *kind,
                           const cg_json_field *f, int n);
/* The matrix-product precision a checkpoint's "train" metadata recorded
 * (fp32 when it recorded none); false + error when it is malformed. */
bool cg_train_precision(const char *train_json, const char *ckpt_path, cg_precision *out);
/* The precision a program decodes or evaluates a checkpoint in, and sets
 * (cg_set_matmul_precision): `arg` (its --precision flag, "fp32" or
 * "bf16") when not NULL, else the one the checkpoint was trained in. False
 * + error naming the flag or the checkpoint otherwise. */
bool cg_decode_precision(const char *arg, const char *train_json, const char *ckpt_path,
                         cg_precision *out);
/* A command's --precision flag (arg; NULL: not given), checked as soon as
 * the flags are parsed: -1 when it is good (*out, may be NULL, gets it),
 * else the exit code after the error line "PROG: error: --precision: ...":
 * CG_EXIT_USAGE for an unknown name, CG_EXIT_FAIL for bf16 on a CPU
 * without it. */
int cg_precision_flag(const char *arg, cg_precision *out);
/* A BPE tokenizer trained for --vocab-size N that has fewer ids (the text
 * has no more merges) is announced: "PROG: warning: --vocab-size N: this
 * text gives only M ids ...; using M". */
void cg_train_vocab_warn(const cg_tokenizer *tok, int64_t vocab_size);

/* Parse a checkpoint's "train" metadata into a cJSON object (caller
 * deletes it) or NULL + error. */
cJSON *cg_train_state_parse(const char *json);

#ifdef __cplusplus
}
#endif
#endif
