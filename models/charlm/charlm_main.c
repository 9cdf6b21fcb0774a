/* charlm: train, sample from and evaluate the decoder-only character
 * language model (models/charlm/charlm.h), nanoGPT style (commands: MAIN_HELP).
 * The training recipe is shared/reference/train_charlm.py's (vocabulary,
 * 90/10 split, random windows, AdamW with decay on 2-D parameters only,
 * clipping, warmup + cosine, fixed-seed evaluation batches, full validation
 * loss over consecutive windows); the loop is models/train/trainer.h's, as are
 * the exit codes and the one-line errors "charlm: error: ...". This file
 * holds the program's flag tables, help texts and commands; the training
 * glue is charlm_train.c, sample's generation charlm_cmds.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "models/charlm/charlm.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/charlm_cmds.h"
#include "models/charlm/charlm_train.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/data/data.h"
#include "models/charlm/sampling.h"
#include "models/report/plot.h"
#include "models/train/program.h"
#include "models/text/vocab.h"

/* ------------------------------------------------------------------ train */
static const char TRAIN_HELP[] =
    "usage: charlm train [options]\n"
    "Train the character language model (recipe: shared/reference/train_charlm.py:\n"
    "AdamW betas (0.9, 0.99), weight decay 0.1 on 2-D parameters, clipping at norm 1,\n"
    "100 warmup steps then cosine down to lr/10).\n"
    "charlm's own options and defaults:\n";

static const char TRAIN_NOTES[] =
    "  defaults: --data " DEFAULT_DATA " (made by scripts/prepare_data.sh),\n"
    "  --out " DEFAULT_OUT ", --steps 2000, --eval-every 250, --lr 1e-3,\n"
    "  --dropout 0, --label-smoothing 0, --norm layernorm, --act gelu, --norm-first true,\n"
    "  --tokenizer char\n"
    "\n";

static int cmd_train(int argc, char **argv)
{
    cg_train_opts o;
    cg_train_recipe rec;
    cg_train_init(&o, &rec, 2000, 250);
    rec.lr = 1e-3;
    rec.weight_decay = 0.1; /* AdamW (0.9, 0.99, 1e-8), as nanoGPT's */
    rec.beta2 = 0.99;
    lm_run r = {.preset = "tiny",
                .init = "normal",
                .lora = {.rank = 0, .alpha = NAN, .dropout = 0, .targets = NULL}};
    cg_train_sched_init(&r.sched, "cosine", 100);
    /* charlm train's flags, one row each (models/train/options.h: how to add
     * one), then the rows both train commands share */
    const cg_cli_opt opts[] = {
        {"--preset", CG_CLI_STR, &r.preset, 0, 0,
         "  --preset NAME      tiny (d 128, H 4, 4 layers, d_ff 512, T 64, B 12; default),\n"
         "                     base (d 384, H 6, 6 layers, d_ff 1536, T 256, B 16) or\n"
         "                     gpt2 (GPT-2 small: d 768, H 12, 12 layers, d_ff 3072, T 256,\n"
         "                     B 4)\n",
         CG_CLI_FIXED},
        {"--layers", CG_CLI_I64, &rec.shape.layers, 0, 1 << 10,
         "  --layers N         transformer blocks (default from the preset)\n", CG_CLI_FIXED},
        {"--block-size", CG_CLI_I64, &rec.shape.T, 1, 1 << 16,
         "  --block-size N     context length T (also --T)\n", CG_CLI_FIXED},
        {"--T", CG_CLI_I64, &rec.shape.T, 1, 1 << 16, NULL, CG_CLI_FIXED},
        {"--batch-size", CG_CLI_I64, &rec.shape.B, 1, 1 << 20,
         "  --batch-size N     windows per batch B (default from the preset)\n", CG_CLI_FIXED},
        {"--init", CG_CLI_STR, &r.init, 0, 0,
         "  --init normal|gpt2 weights N(0, 0.02) (models.py's; default), or GPT-2's as\n"
         "                     nanoGPT draws them: o_proj and fc2 N(0, 0.02/sqrt(2 layers))\n",
         CG_CLI_FIXED},
        {"--warmup", CG_CLI_I64, &r.sched.warmup, 0, 1000000000,
         "  --warmup N         steps of the learning rate's linear warmup (default 100)\n",
         CG_CLI_FIXED | CG_CLI_SAVED},
        {NULL, 0, NULL, 0, 0, TRAIN_NOTES, 0},
        CG_TRAIN_INIT_FROM_FLAGS(&o, "fine-tuning (nanoGPT's init_from; PEFT's LoRA):\n"),
        CG_TRAIN_LORA_FLAGS(&r.lora, &o),
        CG_TRAIN_RECIPE_FLAGS(&rec),
        CG_TRAIN_SCHEDULE_FLAGS(&r.sched),
        CG_TRAIN_RUN_FLAGS(&o),
    };
    cg_cli_args args = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    const cg_train_program p = {"charlm", TRAIN_HELP, DEFAULT_OUT, DEFAULT_DATA,
                                lm_check, lm_setup,   lm_cleanup};
    return cg_train_command(argc, argv, &args, &o, &rec, &p, &r);
}

/* ----------------------------------------------------------------- sample */
static const char *SAMPLE_HELP =
    "usage: charlm sample [options]\n"
    "Generate text from a trained checkpoint (key/value-cached decoding).\n"
    "  --ckpt FILE         checkpoint (default " DEFAULT_OUT ")\n"
    "  --base FILE         a LoRA checkpoint's base (default: the file it recorded)\n"
    "  --prompt TEXT       start of the text (default a newline); characters not in\n"
    "                      the vocabulary are replaced, with a warning\n"
    "  --prompt-file FILE  the prompt read from FILE (nanoGPT's --start=FILE:...;\n"
    "                      '-' is standard input)\n"
    "  --length N          characters (bpe: tokens) to generate (default 500)\n"
    "  --num-samples N     samples drawn one after another from one generator,\n"
    "                      each from the prompt, apart by a line of dashes\n"
    "                      (default 1)\n" CG_SAMPLE_HELP
    "  --no-cache          recompute the whole context at every step\n"
    "  --no-ema            the checkpoint's trained weights, not the moving average\n"
    "                      a run with --ema-decay keeps beside them (the default)\n"
    "  --precision P       fp32 or bf16 matrix products (bf16 weights: about twice\n"
    "                      the speed); default: the checkpoint's training precision\n"
    "  --attention FILE    also draw the attention of every layer and head among the\n"
    "                      last (up to 32) characters or tokens, in their context,\n"
    "                      as a PNG (or .svg) heatmap grid\n"
    "  --force             overwrite an existing --attention FILE (refused otherwise)\n"
    "  --threads N         threads for kernels\n"
    "  --repetition-penalty P\n"
    "                      divide the logit of every token already in the text\n"
    "                      (prompt included) by P, multiply it when negative\n"
    "                      (CTRL's, Hugging Face's; default 1: off; 1.2 is usual)\n"
    "  --no-repeat-ngram-size N\n"
    "                      never draw a token that would repeat N tokens in a row\n"
    "                      already in the text (Hugging Face's; default 0: off)\n"
    "Prints the prompt followed by the generated text.\n";

static int cmd_sample(int argc, char **argv)
{
    sample_args a = {.ckpt = DEFAULT_OUT,
                     .prompt = NULL,
                     .length = 500,
                     .num_samples = 1,
                     .rules = cg_logit_rules_default()};
    cg_cli_opt opts[19] = {
        {"--prompt-file", CG_CLI_STR, &a.prompt_file, 0, 0, NULL, 0},
        {"--force", CG_CLI_SWITCH, &a.force, 0, 0, NULL, 0},
        {"--base", CG_CLI_STR, &a.base, 0, 0, NULL, 0},
        {"--ckpt", CG_CLI_STR, &a.ckpt, 0, 0, NULL, 0},
        {"--prompt", CG_CLI_TEXT, &a.prompt, 0, 0, NULL, 0},
        {"--precision", CG_CLI_STR, &a.precision, 0, 0, NULL, 0},
        {"--length", CG_CLI_I64, &a.length, 0, 10000000, NULL, 0},
        {"--no-cache", CG_CLI_SWITCH, &a.no_cache, 0, 0, NULL, 0},
        {"--attention", CG_CLI_STR, &a.attn_png, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &a.threads, 1, 1024, NULL, 0},
        {"--num-samples", CG_CLI_I64, &a.num_samples, 1, 1000000, NULL, 0},
        {"--no-ema", CG_CLI_SWITCH, &a.no_ema, 0, 0, NULL, 0},
        {"--repetition-penalty", CG_CLI_F64, &a.rules.repetition_penalty, 1e-6, 1e6, NULL, 0},
        {"--no-repeat-ngram-size", CG_CLI_I64, &a.rules.no_repeat_ngram_size, 0, 1e9, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, 14 + cg_sample_cli_opts(&a.so, &a.seed, opts + 14),
                           SAMPLE_HELP);
    if (rc >= 0 || (rc = cg_precision_flag(a.precision, NULL)) >= 0)
        return rc;
    if (a.prompt && a.prompt_file) {
        cg_prog_fail("--prompt and --prompt-file both give the prompt (give one)");
        return CG_EXIT_USAGE;
    }
    if (a.prompt && strncmp(a.prompt, "FILE:", 5) == 0) /* nanoGPT's sample.py reads the file */
        cg_prog_warn("--prompt '%.60s' is taken as text; --prompt-file %s reads a prompt from a "
                     "file",
                     a.prompt, a.prompt + 5);
    if (a.attn_png && a.num_samples > 1) {
        cg_prog_fail("--attention draws one sample's attention; give --num-samples 1");
        return CG_EXIT_USAGE;
    }
    if (a.attn_png && !cg_plot_format(a.attn_png)) { /* the name alone says it */
        cg_prog_fail("--attention: %s", cg_last_error());
        return CG_EXIT_USAGE;
    }
    if (a.attn_png && !cg_out_picture_check(a.attn_png, a.force, a.ckpt, "--ckpt", false))
        return cg_prog_fail("--attention: %s", cg_last_error());
    cg_cli_set_threads(PROG, a.threads);
    char *file_prompt = a.prompt_file ? read_prompt_file(a.prompt_file) : NULL;
    if (a.prompt_file && !file_prompt)
        return cg_prog_fail("--prompt-file: %s", cg_last_error());
    a.prompt = a.prompt ? a.prompt : file_prompt ? file_prompt : "\n";
    cg_precision prec;
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.base = a.base,
                                    .seed = 0,
                                    .dropout = NAN,
                                    .weights = a.no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE};
    if (!load_for_stdout(a.ckpt, &lo, &ck)) {
        free(file_prompt);
        return cg_prog_fail_lib(NULL);
    }
    /* the picture is no base the adapter loaded either (its other checks: above) */
    if (a.attn_png && ck.base_path &&
        !cg_out_picture_check(a.attn_png, true, ck.base_path, "its base", false))
        rc = cg_prog_fail("--attention: %s", cg_last_error());
    else if (!cg_decode_precision(a.precision, cg_charlm_ckpt_train_json(&ck), a.ckpt, &prec))
        rc = cg_prog_fail_lib(NULL);
    else
        rc = generate(&ck, &a, prec);
    cg_charlm_ckpt_free(&ck);
    free(file_prompt);
    return rc < 0 ? 0 : rc;
}

/* ------------------------------------------------------------------- eval */
static const char *EVAL_HELP =
    "usage: charlm eval [options]\n"
    "Loss, perplexity and bits per character of a checkpoint on a text: the\n"
    "validation split (last 10%) of its training text, or a whole text.\n"
    "  --ckpt FILE     checkpoint (default " DEFAULT_OUT ")\n"
    "  --base FILE     a LoRA checkpoint's base (default: the file it recorded)\n"
    "  --data FILE     text (default: the one the checkpoint was trained on, else\n"
    "                  " DEFAULT_DATA ")\n"
    "  --split S       valid (default: the last 10% of the text it was trained on)\n"
    "                  or all (the whole of --data, any text: a held-out file)\n"
    "  --stride S      windows of the model's context T start S tokens apart\n"
    "                  (1 <= S <= T; default T: consecutive windows); each scores\n"
    "                  only the tokens no window before it did, so each token is\n"
    "                  seen after at least T - S of context (Hugging Face's\n"
    "                  sliding-window perplexity; about T/S times the work)\n"
    "  --precision P   fp32 or bf16 matrix products (default: the checkpoint's\n"
    "                  training precision)\n"
    "  --threads N     threads for kernels\n"
    "  --no-ema        the checkpoint's trained weights, not the moving average a\n"
    "                  run with --ema-decay keeps beside them (the default)\n"
    "Prints one JSON line: loss (val_loss too for the validation split),\n"
    "perplexity, bits_per_char, the windows, T, stride, the tokens scored, and\n"
    "\"ema\": whether it judged the weights' average, when the checkpoint keeps one.\n";

typedef struct {
    const char *ckpt, *data, *base, *precision, *split;
    int64_t threads, stride;
    bool no_ema;
} eval_args;

/* eval's JSON line. False + error. */
static bool eval_print(const cg_charlm_ckpt *ck, const eval_args *a, cg_precision prec, double loss,
                       double bpc, int64_t nwin, int64_t stride, int64_t scored)
{
    cJSON *j = cJSON_CreateObject();
    if (!j) {
        cg_set_error("out of memory");
        return false;
    }
    cg_json_put_num(j, "loss", "%.4f", loss);
    if (!strcmp(a->split, "valid"))
        cg_json_put_num(j, "val_loss", "%.4f", loss);
    cg_json_put_num(j, "perplexity", "%.4f", exp(loss));
    cg_json_put_num(j, "bits_per_char", "%.4f", bpc);
    cg_json_put_str(j, "split", a->split);
    cg_json_put_int(j, "windows", nwin);
    cg_json_put_int(j, "T", ck->model->cfg.max_len);
    cg_json_put_int(j, "stride", stride);
    cg_json_put_int(j, "scored", scored);
    cg_json_put_int(j, "step", ck->step);
    cg_json_put_str(j, "precision", cg_precision_name(prec));
    cg_json_put_str(j, "tokenizer", cg_tokenizer_kind_name(ck->tok->kind));
    if (cg_st_metadata(ck->file, "ema.updates"))
        cg_json_put_bool(j, "ema", ck->averaged);
    bool ok = cg_json_print_line(stdout, j);
    cJSON_Delete(j);
    return ok;
}

/* The split's loss and bits per character. -1 or the exit code. */
static int eval_loss(cg_charlm_ckpt *ck, const eval_args *a, const char *path,
                     const cg_corpus *corpus, double *loss, double *bpc, int64_t *nwin,
                     int64_t *stride, int64_t *scored)
{
    const int64_t T = ck->model->cfg.max_len;
    *stride = a->stride > 0 ? a->stride : T;
    if (*stride > T) {
        cg_prog_fail("--stride: %lld is out of range [1, %lld] (the model's context T)",
                     (long long)*stride, (long long)T);
        return CG_EXIT_USAGE;
    }
    bool all = !strcmp(a->split, "all");
    cg_split_view s = all ? (cg_split_view){corpus->ids, corpus->n} : cg_corpus_val(corpus);
    if (!cg_charlm_strided_loss(ck->model, s, T, *stride, loss, nwin, scored))
        return cg_prog_fail("'%s': %s", path, cg_last_error());
    int64_t tokens = all ? corpus->n : corpus->n - corpus->n_train;
    int64_t chars = all ? corpus->chars : corpus->chars - corpus->chars_train;
    *bpc = all ? (tokens == chars ? *loss / log(2.0)
                                  : cg_bits_per_char(*loss, (double)tokens, (double)chars))
               : cg_corpus_val_bpc(corpus, *loss);
    return -1;
}

static int cmd_eval(int argc, char **argv)
{
    eval_args a = {.ckpt = DEFAULT_OUT, .split = "valid"};
    cg_cli_opt opts[] = {
        {"--no-ema", CG_CLI_SWITCH, &a.no_ema, 0, 0, NULL, 0},
        {"--ckpt", CG_CLI_STR, &a.ckpt, 0, 0, NULL, 0},
        {"--base", CG_CLI_STR, &a.base, 0, 0, NULL, 0},
        {"--data", CG_CLI_STR, &a.data, 0, 0, NULL, 0},
        {"--split", CG_CLI_STR, &a.split, 0, 0, NULL, 0},
        {"--stride", CG_CLI_I64, &a.stride, 1, 1e9, NULL, 0},
        {"--precision", CG_CLI_STR, &a.precision, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &a.threads, 1, 1024, NULL, 0},
    };
    int prc = cg_prog_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), EVAL_HELP);
    if (prc >= 0 || (prc = cg_precision_flag(a.precision, NULL)) >= 0)
        return prc;
    if (strcmp(a.split, "valid") && strcmp(a.split, "all")) {
        cg_prog_fail("--split: '%.60s' is not one of valid, all", a.split);
        return CG_EXIT_USAGE;
    }
    cg_cli_set_threads(PROG, a.threads);
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.base = a.base,
                                    .seed = 0,
                                    .dropout = NAN,
                                    .weights = a.no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE};
    if (!load_for_stdout(a.ckpt, &lo, &ck))
        return cg_prog_fail_lib(NULL);
    const char *tj = cg_charlm_ckpt_train_json(&ck);
    cg_precision prec; /* the products as trained, or as --precision says */
    cg_corpus *corpus = NULL;
    char *path = cg_train_data_path(tj, a.ckpt, a.data, DEFAULT_DATA);
    cg_data_id id;
    double loss = NAN, bpc = NAN;
    int64_t nwin = 0, stride = 0, scored = 0;
    /* the validation split is the training text's; any text is whole */
    int rc = path && cg_out_check_stdout(path, "--data") &&
                     cg_decode_precision(a.precision, tj, a.ckpt, &prec) &&
                     (corpus = read_corpus(path, &ck.tok, ck.tok->kind, 0, &id)) &&
                     (!strcmp(a.split, "all") || cg_train_data_check(tj, a.ckpt, &id))
                 ? -1
                 : cg_prog_fail_lib(NULL);
    if (rc < 0 && ck.vocab)
        cg_vocab_warn_unknown(ck.vocab, PROG, path, corpus->unknown, corpus->first_unknown);
    if (rc < 0)
        rc = eval_loss(&ck, &a, path, corpus, &loss, &bpc, &nwin, &stride, &scored);
    if (rc < 0 && !eval_print(&ck, &a, prec, loss, bpc, nwin, stride, scored))
        rc = cg_prog_fail_lib(NULL);
    fflush(stdout);
    free(path);
    cg_corpus_free(corpus);
    cg_charlm_ckpt_free(&ck);
    return rc < 0 ? 0 : rc;
}

/* ---------------------------------------------------------------- average */
/* Does the checkpoint at path load as a char LM? (average's check) */
static bool lm_loads(const char *path, cg_ckpt_weights w)
{
    cg_charlm_ckpt ck;
    const cg_charlm_load_opts lo = {.base = NULL, .seed = 0, .dropout = NAN, .weights = w};
    bool ok = cg_charlm_ckpt_load_opts(path, &lo, &ck);
    cg_charlm_ckpt_free(&ck);
    return ok;
}

/* ------------------------------------------------------------------- main */
static const char MAIN_HELP[] =
    "usage: charlm COMMAND [options]\n"
    "The zoo's decoder-only character language model.\n"
    "  train    train a model on a text (default " DEFAULT_DATA ")\n"
    "  sample   generate text from a checkpoint\n"
    "  eval     validation loss, perplexity and bits per character\n"
    "  average  average the weights of checkpoints (e.g. those of train --keep-last)\n"
    "  merge    merge a LoRA adapter checkpoint into its base (PEFT's merge_and_unload)\n"
    "Run 'charlm COMMAND --help' (or 'charlm help COMMAND') for a command's options.\n"
    "Exit status: 0 done, 1 failed, 2 bad command line.\n";

int main(int argc, char **argv)
{
    static const cg_prog_command cmds[] = {
        {"train", cmd_train}, {"sample", cmd_sample}, {"eval", cmd_eval}};
    static const cg_program p = {PROG,
                                 MAIN_HELP,
                                 cmds,
                                 3,
                                 {"charlm", cg_charlm_config_same_arch, lm_loads,
                                  "\n(train --init-from starts a new run from its weights)",
                                  cg_charlm_load_adapted}};
    return cg_program_main(argc, argv, &p);
}
