/* cgrad zoo: the flags of the `train` commands.
 *
 * Flags belong to their program: charlm_main.c and seq2seq_main.c each
 * declare one table (models/util/cli.h cg_cli_opt) that ends with the rows
 * both share, CG_TRAIN_RECIPE_FLAGS (the model's width, norm, dropout, lr,
 * tokenizer, ...) and CG_TRAIN_RUN_FLAGS (what the trainer itself needs:
 * steps, --eval-every, --out, --resume, ...). That table is the one place a
 * flag lives: its --help lines, its variable, its range, and what a
 * checkpoint does with it.
 *
 * Adding a flag to a train command is one row in its program's table:
 *
 *   {"--lora-rank", CG_CLI_I64, &r.lora_rank, 0, 1024,
 *    "  --lora-rank N      ...help line(s)...\n", CG_CLI_FIXED | CG_CLI_SAVED},
 *
 * (and the variable it writes, a field of the program's run struct with its
 * default). Its row's flags say the rest:
 *   - CG_CLI_FIXED: the checkpoint fixes it; --resume refuses it, named in
 *     the one message "drop --a, --b" with the other fixed flags given;
 *   - CG_CLI_SAVED: kept in the checkpoint's "options" (key: the name
 *     without "--", '-' as '_') and restored into its variable on --resume
 *     unless given again; a checkpoint written before the flag existed
 *     leaves the default.
 * Whether a flag was given is cg_cli_given(o->args, &variable). A flag of
 * one program goes into that program's table; a flag both models read
 * goes into CG_TRAIN_RECIPE_FLAGS (a field of cg_train_recipe); a flag the
 * trainer itself reads (e.g. a sharding switch) into CG_TRAIN_RUN_FLAGS (a
 * field of cg_train_opts). The row's help lines are printed by --help in
 * table order; a row with name NULL is a help line only. */
#ifndef CG_MODELS_TRAIN_OPTIONS_H
#define CG_MODELS_TRAIN_OPTIONS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/gemm.h"
#include "models/train/checkpoint.h"
#include "models/train/finetune.h"
#include "models/text/tokenizer.h"
#include "models/util/cli.h"
#include "nn/layers.h"
#include "optim/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the trainer needs of a run (rows CG_TRAIN_RUN_FLAGS). */
typedef struct {
    int64_t steps, eval_every, log_every, stop_at, threads, grad_accum;
    int64_t zero;       /* --zero: 0 or 1 (ZeRO-1: optimizer state sharded over ranks) */
    double max_minutes; /* --max-minutes: wall-time budget, 0 = none */
    int64_t keep_last;  /* --keep-last N: the last N evaluation checkpoints kept (0: none) */
    bool keep_best;     /* --keep-best: the checkpoint of the best validation loss kept */
    int64_t patience;   /* --patience N: stop after N evaluations without a better one (0: off) */
    uint64_t seed;
    const char *data, *out, *resume;
    /* --init-from FILE (a program that has the flag: charlm): a new run from
     * that checkpoint's weights (models/train/finetune.h) */
    const char *init_from;
    /* --base FILE (charlm): the base of the LoRA checkpoint given to
     * --resume, instead of the one it records */
    const char *base;
    /* --extra-data FILE (seq2seq): more training pairs; here so that the
     * trainer checks it as --data, a file the run reads */
    const char *extra_data;
    /* --best-metric NAME (seq2seq): what --keep-best and --patience judge:
     * NULL or "loss", the validation loss (lower better); else a score the
     * model's evaluation gives (seq2seq: "bleu", "chrf" of --eval-bleu's
     * decoding; higher better) */
    const char *best_metric;
    bool force, skip_nonfinite;
    /* --ema-decay D (0: none), --ema-start-update N and --ema-update-freq
     * F (default 1): an exponential moving average of the trainable
     * weights (optim/ema.h), moved after every Fth optimizer update
     * (fairseq's ema_update_freq), with decay 0 (a copy) when that update
     * is one of 1 .. N-1 (fairseq's: while num_updates < N) */
    double ema_decay;
    int64_t ema_start, ema_update_freq;
    /* --no-ema (charlm, with --init-from): start from the checkpoint's
     * trained weights, not the moving average it keeps */
    bool init_no_ema;
    /* --precision auto|fp32|bf16 ("auto"): cg_train_parse resolves auto to
     * "fp32" or "bf16", the name saved in "options" (on --resume, auto
     * means the checkpoint's, restored from it; fp32 or bf16 switch) */
    const char *precision_arg;
    cg_precision precision; /* of the matrix products (core/gemm.h), parsed */
    /* why auto chose it ("the CPU has AVX512_BF16", "no native bf16 on this
     * CPU"); NULL when --precision named it or --resume's checkpoint did */
    const char *precision_auto;
    /* --resume with a --precision other than the checkpoint's: the
     * checkpoint's ("bf16"), from which the run switches; else NULL */
    const char *precision_was;
    /* The parsed command line (cg_train_parse): which flags were given,
     * which are fixed or saved by a checkpoint. NULL: none given. */
    const cg_cli_args *args;
} cg_train_opts;

/* A model's named shape (--preset); a model uses the fields it has. V is
 * the vocabulary of tools/bench's random batches (shared/bench/torch_peer.py's);
 * the programs take theirs from the data. */
typedef struct {
    const char *name;
    int64_t d, H, layers, enc_layers, dec_layers, d_ff, T, B, V;
} cg_train_preset;

/* The recipe flags both models share (rows CG_TRAIN_RECIPE_FLAGS); a model
 * reads those it has. */
typedef struct {
    /* --d --H --d-ff, and a program's own rows for --layers, --enc-layers,
     * --dec-layers, T and B, write here; cg_train_shape fills the ones not
     * given from the preset */
    cg_train_preset shape;
    const char *norm, *act; /* as given (NULL: the model's default) */
    char arch_help[1536];   /* their --help lines (cg_train_arch_help) */
    /* --pos-enc as given (NULL: sinusoidal), parsed into pos by
     * cg_train_shape; --rope-theta (10000) */
    const char *pos_enc;
    cg_pos_kind pos;
    int64_t rope_theta;
    int64_t kv_heads; /* --kv-heads (0: H) */
    /* --emb-scale as given (NULL: sqrt_d), parsed into emb_scale */
    const char *emb_scale_arg;
    cg_emb_scale emb_scale;
    bool norm_first;
    bool bias; /* --bias: biases in every Linear and LayerNorm (true; nanoGPT's bias) */
    double dropout, attn_dropout, label_smoothing, lr;
    /* The optimizer's: AdamW's decoupled weight decay of the matrices (2-D
     * parameters), Adam's betas and epsilon (a program sets its recipe's
     * before parsing), and the gradients' clipping norm (0: none; 1). */
    double weight_decay, beta1, beta2, adam_eps, clip_norm;
    /* --optimizer (""; not given: AdamW, or Adam at weight decay 0, whose
     * steps are the same: the recipe's as ever) and its type's own flags
     * (cg_train_optim_config): --momentum (0), --nesterov, --amsgrad,
     * --alpha (0.99), --centered, --rho (adadelta: 0.9), --lambd (asgd:
     * 1e-4); PyTorch's names and defaults */
    const char *optimizer;
    double momentum, alpha, rho, lambd;
    bool nesterov, amsgrad, centered;
    /* The tokenizer of a fresh run (a checkpoint keeps its own): --tokenizer
     * char|bpe as given (NULL: char) and parsed, --vocab-size (4000). */
    const char *tokenizer_arg;
    cg_tokenizer_kind tokenizer;
    int64_t vocab_size;
    bool recompute; /* --recompute: activations recomputed in backward */
} cg_train_recipe;

/* Defaults: stop_at -1 (off), log_every 0 (auto), threads 0 (all cores),
 * grad_accum 1, precision_arg "auto" (precision fp32 until resolved),
 * best_metric "loss"; the rest 0. */
void cg_train_opts_init(cg_train_opts *o);
/* Defaults: norm_first true, bias true, vocab_size 4000, tokenizer char, Adam's betas
 * (0.9, 0.999) and epsilon 1e-8 (PyTorch's), clip_norm 1, rope_theta
 * 10000; the rest 0. */
void cg_train_recipe_init(cg_train_recipe *r);
/* Both, for a train command: o and r zeroed and initialised as above, with
 * seed 1 and the program's default steps and eval_every. */
void cg_train_init(cg_train_opts *o, cg_train_recipe *r, int64_t steps, int64_t eval_every);

#define CG_TRAIN_BIG 1e12
#define CG_TRAIN_KEEP_MAX 1000 /* --keep-last at most */

/* The recipe rows of a train command's table (r: cg_train_recipe *). */
#define CG_TRAIN_RECIPE_FLAGS(r)                                                                  \
    {NULL, 0, NULL, 0, 0, "shared by charlm and seq2seq train (one meaning, one default):\n", 0}, \
        {"--d",                                                                                   \
         CG_CLI_I64,                                                                              \
         &(r)->shape.d,                                                                           \
         1,                                                                                       \
         1 << 16,                                                                                 \
         "  --d N --H N --d-ff N  width, heads (must divide d), feed-forward width\n",            \
         CG_CLI_FIXED},                                                                           \
        {"--H", CG_CLI_I64, &(r)->shape.H, 1, 1 << 12, NULL, CG_CLI_FIXED},                       \
        {"--kv-heads",                                                                            \
         CG_CLI_I64,                                                                              \
         &(r)->kv_heads,                                                                          \
         1,                                                                                       \
         1 << 12,                                                                                 \
         "  --kv-heads N         key/value heads, a divisor of --H (grouped-query attention,\n"   \
         "                       LLaMA 2's num_key_value_heads; 1: multi-query; default H)\n",    \
         CG_CLI_FIXED},                                                                           \
        {"--d-ff", CG_CLI_I64, &(r)->shape.d_ff, 1, 1 << 20, NULL, CG_CLI_FIXED},                 \
        {"--norm", CG_CLI_STR, &(r)->norm, 0, 0, cg_train_arch_help(r), CG_CLI_FIXED},            \
        {"--act", CG_CLI_STR, &(r)->act, 0, 0, NULL, CG_CLI_FIXED},                               \
        {"--norm-first", CG_CLI_BOOL, &(r)->norm_first, 0, 0, NULL, CG_CLI_FIXED},                \
        {"--bias", CG_CLI_BOOL, &(r)->bias, 0, 0, NULL, CG_CLI_FIXED},                            \
        {"--pos-enc", CG_CLI_STR, &(r)->pos_enc, 0, 0, NULL, CG_CLI_FIXED},                       \
        {"--rope-theta", CG_CLI_I64, &(r)->rope_theta, 2, 1e12, NULL, CG_CLI_FIXED},              \
        {"--emb-scale", CG_CLI_STR, &(r)->emb_scale_arg, 0, 0, NULL, CG_CLI_FIXED},               \
        {"--dropout",                                                                             \
         CG_CLI_F64,                                                                              \
         &(r)->dropout,                                                                           \
         0,                                                                                       \
         1,                                                                                       \
         "  --dropout P          dropout in [0, 1] (1: everything dropped, as nn.Dropout)\n",     \
         CG_CLI_FIXED},                                                                           \
        {"--attention-dropout",                                                                   \
         CG_CLI_F64,                                                                              \
         &(r)->attn_dropout,                                                                      \
         0,                                                                                       \
         1,                                                                                       \
         "  --attention-dropout P  dropout on the attention weights, in [0, 1] (fairseq's\n"      \
         "                       --attention-dropout, nanoGPT's attn_dropout; default 0)\n",      \
         CG_CLI_FIXED},                                                                           \
        {"--label-smoothing",                                                                     \
         CG_CLI_F64,                                                                              \
         &(r)->label_smoothing,                                                                   \
         0,                                                                                       \
         1,                                                                                       \
         "  --label-smoothing E  label smoothing of the training loss in [0, 1]\n",               \
         CG_CLI_FIXED},                                                                           \
        {"--lr",      CG_CLI_F64, &(r)->lr,                                                       \
         1e-12,       10,         "  --lr X               peak learning rate\n",                  \
         CG_CLI_FIXED},                                                                           \
        {"--weight-decay",                                                                        \
         CG_CLI_F64,                                                                              \
         &(r)->weight_decay,                                                                      \
         0,                                                                                       \
         100,                                                                                     \
         "  --weight-decay W     weight decay of the 2-D parameters (AdamW's decoupled)\n"        \
         "                       (default: the program's recipe, above)\n",                       \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--beta1",                                                                               \
         CG_CLI_F64,                                                                              \
         &(r)->beta1,                                                                             \
         0,                                                                                       \
         1,                                                                                       \
         "  --beta1 B --beta2 B  Adam's moment decay rates, in [0, 1) (default: the recipe's)\n", \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--beta2", CG_CLI_F64, &(r)->beta2, 0, 1, NULL, CG_CLI_FIXED | CG_CLI_SAVED},            \
        {"--adam-eps",                                                                            \
         CG_CLI_F64,                                                                              \
         &(r)->adam_eps,                                                                          \
         0,                                                                                       \
         1,                                                                                       \
         "  --adam-eps E         Adam's epsilon (default: the recipe's)\n",                       \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--optimizer",                                                                           \
         CG_CLI_STR,                                                                              \
         &(r)->optimizer,                                                                         \
         0,                                                                                       \
         0,                                                                                       \
         CG_TRAIN_OPTIMIZER_HELP,                                                                 \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--momentum", CG_CLI_F64, &(r)->momentum, 0, 1e6, NULL, CG_CLI_FIXED | CG_CLI_SAVED},    \
        {"--nesterov", CG_CLI_SWITCH, &(r)->nesterov, 0, 0, NULL, CG_CLI_FIXED | CG_CLI_SAVED},   \
        {"--amsgrad", CG_CLI_SWITCH, &(r)->amsgrad, 0, 0, NULL, CG_CLI_FIXED | CG_CLI_SAVED},     \
        {"--alpha", CG_CLI_F64, &(r)->alpha, 0, 1e6, NULL, CG_CLI_FIXED | CG_CLI_SAVED},          \
        {"--centered", CG_CLI_SWITCH, &(r)->centered, 0, 0, NULL, CG_CLI_FIXED | CG_CLI_SAVED},   \
        {"--rho", CG_CLI_F64, &(r)->rho, 0, 1, NULL, CG_CLI_FIXED | CG_CLI_SAVED},                \
        {"--lambd", CG_CLI_F64, &(r)->lambd, 0, 1, NULL, CG_CLI_FIXED | CG_CLI_SAVED},            \
        {"--clip-norm",                                                                           \
         CG_CLI_F64,                                                                              \
         &(r)->clip_norm,                                                                         \
         0,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --clip-norm C        clip the gradients' global norm to C (default 1; 0: no\n"        \
         "                       clipping, a NaN or Inf gradient still stops the step)\n",        \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--tokenizer",                                                                           \
         CG_CLI_STR,                                                                              \
         &(r)->tokenizer_arg,                                                                     \
         0,                                                                                       \
         0,                                                                                       \
         "  --tokenizer KIND     char or bpe (default: the program's, above): SentencePiece\n"    \
         "                       subwords trained on the training split only; the\n"              \
         "                       checkpoint keeps the tokenizer\n",                               \
         CG_CLI_FIXED},                                                                           \
        {"--vocab-size",                                                                          \
         CG_CLI_I64,                                                                              \
         &(r)->vocab_size,                                                                        \
         1,                                                                                       \
         1e9,                                                                                     \
         "  --vocab-size N       ids of the bpe vocabulary, at least 261 (default 4000)\n",       \
         CG_CLI_FIXED},                                                                           \
    {                                                                                             \
        "--recompute", CG_CLI_SWITCH, &(r)->recompute, 0, 0,                                      \
            "  --recompute          keep only each transformer layer's input for backward and\n"  \
            "                       recompute the rest there (less memory, one more forward\n"    \
            "                       per layer; the same numbers, bit for bit)\n",                 \
            0                                                                                     \
    }

/* --optimizer's help and its flags' (a #define: clang-format keeps its
 * lines). */
#define CG_TRAIN_OPTIMIZER_HELP                                                         \
    "  --optimizer NAME     adamw (default; Adam's steps at --weight-decay 0), adam,\n" \
    "                       sgd, rmsprop, adagrad, adadelta, adamax, nadam, radam,\n"   \
    "                       asgd or rprop (torch.optim's; --weight-decay is their L2\n" \
    "                       decay but adamw's; rprop takes none); a checkpoint keeps\n" \
    "                       it; --beta1, --beta2, --adam-eps for the adam family\n"     \
    "  --momentum M         sgd, rmsprop: momentum (default 0: none)\n"                 \
    "  --nesterov           sgd: Nesterov momentum (needs --momentum > 0)\n"            \
    "  --amsgrad            adam, adamw: AMSGrad's maximum of the second moments\n"     \
    "  --alpha A --centered rmsprop: smoothing constant (default 0.99); normalise by\n" \
    "                       the gradient's variance\n"                                  \
    "  --rho R              adadelta: running average coefficient (default 0.9)\n"      \
    "  --lambd L            asgd: decay term (default 1e-4)\n"

/* --ema-decay's help (a #define: clang-format keeps its lines). */
#define CG_TRAIN_EMA_HELP                                                                \
    "  --ema-decay D        keep an exponential moving average of the weights\n"         \
    "                       (fairseq's --ema-decay, timm's ModelEma): after each\n"      \
    "                       step avg = D*avg + (1-D)*w, D in [0, 1], 0: none (the\n"     \
    "                       default); the evaluations, --keep-best and --patience\n"     \
    "                       judge the average, the checkpoint keeps both (\"ema.*\"),\n" \
    "                       and the commands that read it use the average unless\n"      \
    "                       given --no-ema\n"

/* --init-from and --no-ema, a train command's rows for a new run from a
 * checkpoint's weights, under the help's line `header` (o: cg_train_opts
 * *; models/train/finetune.h). */
/* clang-format off */
#define CG_TRAIN_INIT_FROM_FLAGS(o, header)                                                       \
    {NULL, 0, NULL, 0, 0, header, 0},                                                            \
    {"--init-from", CG_CLI_STR, &(o)->init_from, 0, 0,                                          \
     "  --init-from FILE   a new run from this checkpoint's weights (their moving\n"             \
     "                     average, when its run kept one: --ema-decay), on --data:\n"           \
     "                     its shape and tokenizer, a fresh optimizer, step 0 (the\n"            \
     "                     file is only read; the checkpoint records it)\n",                     \
     CG_CLI_FIXED},                                                                              \
    {"--no-ema", CG_CLI_SWITCH, &(o)->init_no_ema, 0, 0,                                        \
     "  --no-ema           with --init-from: its trained weights, not the moving\n"              \
     "                     average its run kept beside them\n",                                  \
     0}
/* The LoRA rows of a train command (l: cg_ft_lora *, models/train/finetune.h;
 * o: cg_train_opts *), after CG_TRAIN_INIT_FROM_FLAGS; their rules:
 * cg_train_check_lora. */
#define CG_TRAIN_LORA_FLAGS(l, o)                                                                 \
    {"--lora-rank", CG_CLI_I64, &(l)->rank, 1, 1 << 16,                                          \
     "  --lora-rank R      with --init-from: freeze the model and train LoRA adapters\n"         \
     "                     of rank R; the checkpoint holds only the adapters (the\n"             \
     "                     commands that read it load the base with them)\n",                    \
     CG_CLI_FIXED},                                                                              \
    {"--lora-alpha", CG_CLI_F64, &(l)->alpha, 1e-6, 1e6,                                         \
     "  --lora-alpha A     the adapters' scale is A/R (default 2R)\n", CG_CLI_FIXED},             \
    {"--lora-dropout", CG_CLI_F64, &(l)->dropout, 0, 1,                                          \
     "  --lora-dropout P   dropout on the adapters' input (default 0)\n", CG_CLI_FIXED},          \
    {"--lora-targets", CG_CLI_STR, &(l)->targets, 0, 0,                                          \
     "  --lora-targets L   the Linears adapted, comma-separated names or a path's end\n"          \
     "                     (PEFT's target_modules: cross_attn.q_proj; default\n"                \
     "                     " CG_FT_LORA_TARGETS ")\n",                                           \
     CG_CLI_FIXED},                                                                              \
    {"--base", CG_CLI_STR, &(o)->base, 0, 0,                                                     \
     "  --base FILE        with --resume of a LoRA run: its base checkpoint (default:\n"         \
     "                     the file it recorded)\n\n",                                           \
     0}
/* clang-format on */

/* The trainer's rows of a train command's table (o: cg_train_opts *). */
#define CG_TRAIN_RUN_FLAGS(o)                                                                     \
    {"--seed",    CG_CLI_U64,                                                                     \
     &(o)->seed,  0,                                                                              \
     0,           "  --seed N             initialisation, dropout and batch order (default 1)\n", \
     CG_CLI_FIXED},                                                                               \
        {"--grad-accum",                                                                          \
         CG_CLI_I64,                                                                              \
         &(o)->grad_accum,                                                                        \
         1,                                                                                       \
         1 << 16,                                                                                 \
         "  --grad-accum N       micro-batches per optimizer step (default 1); the loss is\n"     \
         "                       that of one batch N times larger\n",                             \
         CG_CLI_FIXED},                                                                           \
        {"--precision",                                                                           \
         CG_CLI_STR,                                                                              \
         &(o)->precision_arg,                                                                     \
         0,                                                                                       \
         0,                                                                                       \
         "  --precision P        matrix products: auto (default: bf16 on a native bf16 CPU,\n"    \
         "                       else fp32), fp32 or bf16; the checkpoint keeps it, and\n"        \
         "                       --resume continues in it unless given fp32 or bf16\n",           \
         CG_CLI_SAVED},                                                                           \
        {"--data",                                                                                \
         CG_CLI_STR,                                                                              \
         &(o)->data,                                                                              \
         0,                                                                                       \
         0,                                                                                       \
         "  --data FILE          training data (with --resume: the checkpoint's unless given)\n", \
         0},                                                                                      \
        {"--steps",                                                                               \
         CG_CLI_I64,                                                                              \
         &(o)->steps,                                                                             \
         1,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --steps N            optimizer steps (with --resume: the checkpoint's unless "        \
         "given)\n",                                                                              \
         0},                                                                                      \
        {"--eval-every",                                                                          \
         CG_CLI_I64,                                                                              \
         &(o)->eval_every,                                                                        \
         1,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --eval-every N       evaluate and checkpoint every N steps (with --resume: the\n"     \
         "                       checkpoint's unless given)\n",                                   \
         0},                                                                                      \
        {"--log-every",                                                                           \
         CG_CLI_I64,                                                                              \
         &(o)->log_every,                                                                         \
         1,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --log-every N        metrics-log line (and progress line, when stderr is not a\n"     \
         "                       terminal) every N steps (default: steps/20, at most 100;\n"      \
         "                       with --resume: the checkpoint's unless given)\n",                \
         0},                                                                                      \
        {"--threads",                                                                             \
         CG_CLI_I64,                                                                              \
         &(o)->threads,                                                                           \
         1,                                                                                       \
         1024,                                                                                    \
         "  --threads N          threads for kernels (default: all cores)\n",                     \
         0},                                                                                      \
        {"--out",                                                                                 \
         CG_CLI_STR,                                                                              \
         &(o)->out,                                                                               \
         0,                                                                                       \
         0,                                                                                       \
         "  --out FILE           checkpoint; beside it NAME.loss.png and NAME.metrics.jsonl\n"    \
         "                       (NAME: FILE without .safetensors) and the lock\n"                \
         "                       NAME.cgrad-lock\n",                                              \
         0},                                                                                      \
        {"--resume",                                                                              \
         CG_CLI_STR,                                                                              \
         &(o)->resume,                                                                            \
         0,                                                                                       \
         0,                                                                                       \
         "  --resume FILE        continue a run from its checkpoint, exactly (--out\n"            \
         "                       defaults to FILE); model and recipe flags are refused\n",        \
         0},                                                                                      \
        {"--force",                                                                               \
         CG_CLI_SWITCH,                                                                           \
         &(o)->force,                                                                             \
         0,                                                                                       \
         0,                                                                                       \
         "  --force              overwrite an existing --out, NAME.loss.png or\n"                 \
         "                       NAME.metrics.jsonl (refused otherwise)\n",                       \
         0},                                                                                      \
        {"--stop-at",                                                                             \
         CG_CLI_I64,                                                                              \
         &(o)->stop_at,                                                                           \
         0,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --stop-at N          save and stop after step N (as if interrupted; 0 saves\n"        \
         "                       the initial model)\n",                                           \
         0},                                                                                      \
        {"--max-minutes",                                                                         \
         CG_CLI_F64,                                                                              \
         &(o)->max_minutes,                                                                       \
         1e-6,                                                                                    \
         1e8,                                                                                     \
         "  --max-minutes M      end the run after M minutes of wall time (M > 0), then\n"        \
         "                       evaluate, save and report as at the last step; the\n"            \
         "                       evaluations and saves on the way count, those at the\n"          \
         "                       end do not; with --resume the budget starts again\n",            \
         0},                                                                                      \
        {"--keep-last",                                                                           \
         CG_CLI_I64,                                                                              \
         &(o)->keep_last,                                                                         \
         0,                                                                                       \
         CG_TRAIN_KEEP_MAX,                                                                       \
         "  --keep-last N        also keep each evaluation checkpoint beside --out as\n"          \
         "                       OUT.stepNNNNNNNN.safetensors (OUT: --out without\n"              \
         "                       .safetensors), the last N of them, to average (the older\n"      \
         "                       ones this run wrote are removed; default 0: none; with\n"        \
         "                       --resume: the checkpoint's unless given)\n",                     \
         0},                                                                                      \
        {"--keep-best",                                                                           \
         CG_CLI_SWITCH,                                                                           \
         &(o)->keep_best,                                                                         \
         0,                                                                                       \
         0,                                                                                       \
         "  --keep-best          also keep the checkpoint of the lowest validation loss so\n"     \
         "                       far as OUT.best.safetensors (fairseq's checkpoint_best;\n"       \
         "                       with --resume: the checkpoint's unless given)\n",                \
         0},                                                                                      \
        {"--no-keep-best",                                                                        \
         CG_CLI_SWITCH_OFF,                                                                       \
         &(o)->keep_best,                                                                         \
         0,                                                                                       \
         0,                                                                                       \
         "  --no-keep-best       do not (turns off the --keep-best of a --resume\n"               \
         "                       checkpoint; of the two flags the last wins)\n",                  \
         0},                                                                                      \
        {"--patience",                                                                            \
         CG_CLI_I64,                                                                              \
         &(o)->patience,                                                                          \
         0,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --patience N         stop early once N evaluations in a row have not lowered\n"       \
         "                       the best validation loss, then evaluate, save and report\n"      \
         "                       as at the last step (default 0: never; with --resume:\n"         \
         "                       the checkpoint's unless given)\n",                               \
         0},                                                                                      \
        {"--ema-decay",                                                                           \
         CG_CLI_F64,                                                                              \
         &(o)->ema_decay,                                                                         \
         0,                                                                                       \
         1,                                                                                       \
         CG_TRAIN_EMA_HELP,                                                                       \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--ema-start-update",                                                                    \
         CG_CLI_I64,                                                                              \
         &(o)->ema_start,                                                                         \
         0,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --ema-start-update N  the average's updates before the Nth copy the weights\n"        \
         "                       (decay 0, as fairseq's while num_updates < N; a skipped\n"       \
         "                       step is no update; default 0)\n",                                \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--ema-update-freq",                                                                     \
         CG_CLI_I64,                                                                              \
         &(o)->ema_update_freq,                                                                   \
         1,                                                                                       \
         CG_TRAIN_BIG,                                                                            \
         "  --ema-update-freq N  move the average at every Nth update only, the others\n"         \
         "                       leave it (fairseq's; default 1: at every one); a move at\n"      \
         "                       an update below --ema-start-update's N copies the weights\n",    \
         CG_CLI_FIXED | CG_CLI_SAVED},                                                            \
        {"--skip-nonfinite",                                                                      \
         CG_CLI_SWITCH,                                                                           \
         &(o)->skip_nonfinite,                                                                    \
         0,                                                                                       \
         0,                                                                                       \
         "  --skip-nonfinite     skip a step whose loss or gradient is NaN/Inf (with a\n"         \
         "                       warning) instead of stopping\n",                                 \
         0},                                                                                      \
        {"--zero",                                                                                \
         CG_CLI_I64,                                                                              \
         &(o)->zero,                                                                              \
         0,                                                                                       \
         1,                                                                                       \
         "  --zero 0|1           1: ZeRO-1 under MPI: each of N ranks keeps 1/N of the\n"         \
         "                       optimizer state and of --ema-decay's average (gradients\n"       \
         "                       reduce-scattered, parameters all-gathered; the same\n"           \
         "                       results); checkpoints stay whole, so a run resumes with\n"       \
         "                       any rank count, with or without it; one process: no\n"           \
         "                       effect (default 0)\n",                                           \
         0},                                                                                      \
    {                                                                                             \
        NULL, 0, NULL, 0, 0,                                                                      \
            "Ctrl-C (SIGINT) or SIGTERM saves a checkpoint and exits 0 (an evaluation under\n"    \
            "way is cut short and left out; during the final evaluation, after the last save,\n"  \
            "it ends the program at once). The last stdout line is a JSON summary. Exit\n"        \
            "status: 0 done, 1 failed, 2 bad command line.\n",                                    \
            0                                                                                     \
    }

/* The --help line of --norm, --act and --norm-first, with the names of
 * nn/layers.h's tables ("  --norm layernorm|rmsnorm  --act relu|gelu|..."),
 * written into r->arch_help. Returns it. */
const char *cg_train_arch_help(cg_train_recipe *r);

/* Parse a train command's table a->opts[0..a->n) (a->given records what
 * was given; o->args = a). --help prints help, then the table's help lines.
 * Then --precision (auto resolved: bf16 when cg_bf16_native(), never the
 * emulation, else fp32; with --resume, the checkpoint's, and a given
 * "auto" counts as not given, while fp32 or bf16 switch the resumed run to
 * it), --norm and --act (names of nn/layers.h's
 * tables) and,
 * for a fresh run, --tokenizer/--vocab-size are checked. Returns -1 to go
 * on, else the exit code (the error printed). */
int cg_train_parse(int argc, char **argv, cg_cli_args *a, const char *help, cg_train_opts *o,
                   cg_train_recipe *r);

/* The preset called name among p[0..n), or NULL + error ("--preset:
 * unknown preset 'x' (choices: tiny, base)"). */
const cg_train_preset *cg_train_preset_find(const cg_train_preset *p, int n, const char *name);
/* The training loss's chunk for a new model of vocabulary V (the configs'
 * loss_chunk, which a checkpoint records): from CG_FUSED_HEAD_MIN_VOCAB ids
 * on, the output projection fused with the loss (autograd/ops.h
 * cg_linear_cross_entropy), so that the [tokens, V] logits are never kept:
 * below CG_FUSED_HEAD_ROWS_VOCAB in CG_LCE_EXACT chunks, on the k blocks of
 * the weight gradient's product, every bit the unfused head's; from it on
 * in chunks of CG_FUSED_HEAD_CHUNK rows, whose weight gradient is summed
 * chunk by chunk (bits of their own), since there the exact chunks' 384
 * rows of logits cost the gpt2 preset 94 MB and 4-11% of its bf16 speed on
 * the Intel Xeon 0xA7. Below CG_FUSED_HEAD_MIN_VOCAB, 0: logits, then
 * cross-entropy. A checkpoint's recorded chunk is kept: 0 and CG_LCE_EXACT
 * give the same bits. Chosen on the Intel Xeon (docs/performance.md, issue
 * 37). */
#define CG_FUSED_HEAD_MIN_VOCAB 4000
#define CG_FUSED_HEAD_ROWS_VOCAB 16384
#define CG_FUSED_HEAD_CHUNK 256
int64_t cg_train_loss_chunk(int64_t vocab);
/* r->shape's fields whose flags were not given (a) taken from the preset p,
 * and --norm/--act, when given, parsed into *norm and *act (which hold the
 * model's defaults). False + error naming the flag. */
bool cg_train_shape(const cg_cli_args *a, const cg_train_preset *p, cg_train_recipe *r,
                    cg_norm_kind *norm, cg_act *act);
/* The flags --tokenizer NAME (NULL: char) and --vocab-size N (given:
 * seen) into *kind: -1 when they are good, else the exit code with the
 * error set (CG_EXIT_USAGE for a bad name, --vocab-size without bpe or
 * below CG_SPM_MIN_VOCAB; CG_EXIT_FAIL for bpe in a build without
 * SentencePiece). */
int cg_train_tokenizer_flags(const char *name, bool seen, int64_t vocab_size,
                             cg_tokenizer_kind *kind);

/* The name of the given flag of a that writes to dst ("--block-size" or
 * its alias "--T"), or "?". */
const char *cg_train_given_name(const cg_cli_args *a, const void *dst);

/* A model's architecture as --init-from compares it with its base's: the
 * shape (d, H, layers or enc_layers and dec_layers, d_ff, T), norm,
 * activation, pre- or post-norm, biases, positions. */
typedef struct {
    cg_train_preset shape;
    cg_norm_kind norm;
    cg_act act;
    bool norm_first, bias;
    cg_pos_kind pos;
    int64_t rope_theta, kv_heads;
    cg_emb_scale emb_scale;
} cg_train_arch;
/* --init-from: the shape, architecture and tokenizer flags given (a, rec;
 * preset: the variable of --preset) with the preset make `want`, which
 * must agree with `have`, the base checkpoint's at path, whose tokenizer
 * is tok; one message names every flag that does not ("drop ..."). -1
 * when they agree, else the exit code (the error printed). */
int cg_train_check_base(const cg_cli_args *a, const cg_train_recipe *rec, const char *const *preset,
                        const cg_train_arch *want, const cg_train_arch *have,
                        const cg_tokenizer *tok, const char *path);
/* The rules of CG_TRAIN_LORA_FLAGS (l) against the run's flags (o), before
 * any file is read: --lora-alpha, --lora-dropout and --lora-targets need
 * --lora-rank, which needs --init-from (or --resume, which refuses it as a
 * flag the checkpoint fixes); --no-ema with --lora-rank is refused (an
 * adapter checkpoint's base is read as its average wherever it is
 * loaded); --base needs --resume. -1, or CG_EXIT_USAGE (the error
 * printed). */
int cg_train_check_lora(const cg_train_opts *o, const cg_ft_lora *l);

/* The checkpoint's "options": the CG_CLI_SAVED rows of a (none when a is
 * NULL), written into j, or read back from j but for the rows given (NULL:
 * a checkpoint written before options; an absent key keeps the default).
 * False + error. */
bool cg_train_options_save(const cg_cli_args *a, cJSON *j);
bool cg_train_options_restore(const cg_cli_args *a, const cJSON *j, const char *what);

/* What a train command's start-up line says after "precision bf16": " (auto:
 * the CPU has AVX512_BF16; --precision fp32 to opt out)", " (switched from
 * the checkpoint's fp32)" on a --resume that changes it, or " (auto: no
 * native bf16 on this CPU)" when auto chose, else "". In buf (cap bytes). */
const char *cg_train_precision_note(const cg_train_opts *o, char *buf, size_t cap);
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
/* The recipe's optimizer at learning rate lr: --optimizer's with its
 * flags (PyTorch's defaults otherwise: RMSprop's eps 1e-8, Adagrad's
 * 1e-10); not given (""), Adam with its betas and epsilon, AdamW (the decay
 * decoupled, as nanoGPT's and fairseq's adam) when its weight decay is
 * above 0. The decay itself is the trainer's
 * (cg_trainer_model.weight_decay_2d). The name is checked by
 * cg_train_parse (an unknown one here: AdamW's). */
cg_optim_config cg_train_optim_config(const cg_train_recipe *rec, double lr);
/* A BPE tokenizer trained for --vocab-size N that has fewer ids (the text
 * has no more merges) is announced: "PROG: warning: --vocab-size N: this
 * text gives only M ids ...; using M". */
void cg_train_vocab_warn(const cg_tokenizer *tok, int64_t vocab_size);

#ifdef __cplusplus
}
#endif
#endif
