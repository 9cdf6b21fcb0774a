/* seq2seq: train and use the encoder-decoder translator over characters or
 * BPE subwords (models/text/tokenizer.h).
 *
 *   seq2seq train      [--data F --preset tiny|base --steps N ...]
 *   seq2seq translate  --ckpt F [--beam N --length-penalty A --no-cache --max-len-a A
 *                      --max-len-b B --min-len N --no-repeat-ngram-size N] [sentences...]
 *   seq2seq eval       --ckpt F [--beam N] [--no-cache]
 *   seq2seq attention  --ckpt F --text S [--out DIR]
 *   seq2seq score      --ref F [--hyp F]   (BLEU and chrF of a translation file)
 *   seq2seq average    --out F CKPT CKPT...
 *
 * The training recipe is shared/reference/train_seq2seq.py (see its
 * docstring); the data split and batch order use numpy's RandomState
 * bit-exactly (models/data/pairs.h). The loop is models/train/trainer.h's, as are the
 * exit codes and the one-line errors "seq2seq: error: ...". This file holds
 * the program's flag tables, help texts and commands; the training glue is
 * seq2seq_train.c, the work of translate, eval and score seq2seq_cmds.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/seq2seq/seq2seq_cmds.h"
#include "models/seq2seq/seq2seq_train.h"
#include "models/util/cli.h"
#include "models/util/files.h"
#include "models/seq2seq/seq2seq.h"
#include "models/train/program.h"
#include "models/seq2seq/translate.h"

/* ============================================================ train */
static const char TRAIN_HELP[] =
    "usage: seq2seq train [options]\n"
    "\n"
    "Train the Transformer translator (characters or BPE subwords) with the recipe of\n"
    "shared/reference/train_seq2seq.py: Adam(0.9, 0.98, 1e-9) with the Noam\n"
    "schedule, gradient clipping at 1.0, batches of at most --max-tokens padded\n"
    "tokens from length-sorted pairs. Split: pairs shuffled with numpy\n"
    "RandomState(0); the last --test-size are test, the --valid-size before them\n"
    "validation, the rest train.\n"
    "seq2seq's own options and defaults:\n";
static const char FINETUNE_NOTES[] =
    "fine-tuning (fairseq's --restore-file with --reset-optimizer, --reset-dataloader\n"
    "and --reset-lr-scheduler; PEFT's LoRA):\n";
static const char TRAIN_NOTES[] =
    "  --tokenizer          (shared, below): one vocabulary for source and target\n"
    "  defaults: --data " DEFAULT_DATA ", --out " DEFAULT_CKPT ",\n"
    "  --tokenizer bpe --vocab-size 4000 --dropout 0.3 (the best of char and bpe at\n"
    "  equal wall time; the reference's recipe is --tokenizer char --dropout 0.1\n"
    "  --factor 0.25 --steps 5000), --factor 0.5 (learns faster than 0.25 here),\n"
    "  --steps 11000 (13-15 minutes of steps on 2 threads of an AMD EPYC Zen 5 in\n"
    "  fp32, 11 on an Intel Xeon with AMX in bf16, then the test decoding; the\n"
    "  progress line estimates it on yours), --eval-every 1000,\n"
    "  --label-smoothing 0.1, --norm layernorm, --act relu, --norm-first false\n"
    "The final JSON line has val_nll (plain cross-entropy over non-pad validation\n"
    "targets, nats per token), val_bpc (the same in bits per target character:\n"
    "val_nll x target tokens / target characters / ln 2, each EOS one token and\n"
    "one character, so char and bpe compare) and chrF/BLEU of greedy and beam\n"
    "decoding (of the detokenised text) on the test split.\n"
    "\n";

/* The recipe's defaults where they are not both programs' */
static void recipe_defaults(cg_train_recipe *rec)
{
    rec->tokenizer_arg = "bpe"; /* README: char against bpe at equal wall time */
    rec->norm_first = false;
    rec->dropout = 0.3;
    rec->label_smoothing = 0.1;
    rec->beta2 = 0.98; /* Adam (0.9, 0.98, 1e-9), as the paper's */
    rec->adam_eps = 1e-9;
}

/* --eval-bleu's and --best-metric's help (a #define: clang-format keeps its lines) */
#define EVAL_BLEU_HELP                                                                     \
    "  --eval-bleu N        also decode the first N validation pairs at each evaluation\n" \
    "                       and report their BLEU and chrF (fairseq's --eval-bleu;\n"      \
    "                       default 0: none; under mpirun each rank decodes a share)\n"    \
    "  --eval-bleu-beam K   their beam, with --length-penalty (default 1: greedy;\n"       \
    "                       fairseq's --eval-bleu-args '{\"beam\": K}')\n"                 \
    "  --best-metric M      what --keep-best and --patience judge: loss (the validation\n" \
    "                       loss, lower better; the default), bleu or chrf (of\n"          \
    "                       --eval-bleu's decoding, higher better: fairseq's\n"            \
    "                       --best-checkpoint-metric bleu with\n"                          \
    "                       --maximize-best-checkpoint-metric)\n"

/* Their rows (r an mt_run *, o a cg_train_opts *) */
/* clang-format off */
#define EVAL_BLEU_FLAGS(r, o)                                                                   \
    {"--eval-bleu", CG_CLI_I64, &(r)->eval_bleu, 0, 1e9, EVAL_BLEU_HELP,                        \
     CG_CLI_FIXED | CG_CLI_SAVED},                                                              \
    {"--eval-bleu-beam", CG_CLI_I64, &(r)->eval_beam, 1, 1000, NULL,                            \
     CG_CLI_FIXED | CG_CLI_SAVED},                                                              \
    {"--best-metric", CG_CLI_STR, &(o)->best_metric, 0, 0, NULL, CG_CLI_FIXED | CG_CLI_SAVED}
/* clang-format on */

/* seq2seq train's defaults (the recipe's: recipe_defaults) */
static const mt_run TRAIN_DEFAULTS = {
    .preset = "tiny",
    .max_tokens = 3000,
    .pad_to = 1,
    .max_len = 256,
    .valid_size = 500,
    .test_size = 1000,
    .test_limit = 1000,
    .beam = 4,
    .examples = 3,
    .alpha = CG_BEAM_ALPHA,
    .eval_beam = 1,
    .lora = {.rank = 0, .alpha = NAN, .dropout = 0, .targets = NULL}};

static int cmd_train(int argc, char **argv)
{
    cg_train_opts o;
    cg_train_recipe rec;
    cg_train_init(&o, &rec, 11000, 1000);
    recipe_defaults(&rec);
    mt_run r = TRAIN_DEFAULTS;
    cg_train_sched_init(&r.sched, "noam", 400);
    r.sched.factor = 0.5;
    /* seq2seq train's flags, one row each (models/train/options.h: how to add
     * one), then the rows both train commands share */
    const cg_cli_opt opts[] = {
        {"--preset", CG_CLI_STR, &r.preset, 0, 0,
         "  --preset NAME        tiny (d 128, 4 heads, 2+2 layers, d_ff 512; default),\n"
         "                       base (d 256, 8 heads, 3+3 layers, d_ff 1024) or paper\n"
         "                       (the Transformer base: d 512, 8 heads, 6+6 layers, d_ff 2048)\n",
         CG_CLI_FIXED},
        {"--enc-layers", CG_CLI_I64, &rec.shape.enc_layers, 0, 1 << 10,
         "  --enc-layers N --dec-layers N   encoder and decoder layers (from the preset;\n"
         "                       the decoder's, at least 1, are what reads the source)\n",
         CG_CLI_FIXED},
        {"--dec-layers", CG_CLI_I64, &rec.shape.dec_layers, 1, 1 << 10, NULL, CG_CLI_FIXED},
        {"--max-tokens", CG_CLI_I64, &r.max_tokens, 2, 1e9,
         "  --max-tokens N       padded tokens per batch (default 3000)\n", CG_CLI_FIXED},
        {"--pad-to-multiple", CG_CLI_I64, &r.pad_to, 1, 1e6,
         "  --pad-to-multiple N  pad batch lengths up to a multiple of N (at most --max-len)\n",
         CG_CLI_FIXED},
        {"--factor", CG_CLI_F64, &r.sched.factor, 1e-12, 1e3,
         "  --factor F           Noam factor (default 0.5; --lr X sets the peak instead:\n"
         "                       factor = X * sqrt(d * warmup))\n",
         CG_CLI_FIXED},
        {"--warmup", CG_CLI_I64, &r.sched.warmup, 0, 1e9,
         "  --warmup N           warmup steps (default 400): Noam's, or the linear ramp\n"
         "                       of another --lr-schedule\n",
         CG_CLI_FIXED},
        {"--word-dropout", CG_CLI_F64, &r.word_dropout, 0, 1,
         "  --word-dropout P     zero each token's embedding in training with probability P\n",
         CG_CLI_FIXED},
        {"--max-len", CG_CLI_I64, &r.max_len, 3, 100000,
         "  --max-len N          longest sequence; longer training pairs are dropped (256)\n",
         CG_CLI_FIXED},
        {"--extra-data", CG_CLI_STR, &o.extra_data, 0, 0,
         "  --extra-data FILE    more training pairs (--data's format); a pair sharing a\n"
         "                       sentence with a validation or test pair is dropped\n",
         0},
        {"--valid-size", CG_CLI_I64, &r.valid_size, 1, 1e9,
         "  --valid-size N       validation pairs (default 500)\n", CG_CLI_FIXED},
        {"--test-size", CG_CLI_I64, &r.test_size, 1, 1e9,
         "  --test-size N        test pairs (default 1000)\n", CG_CLI_FIXED},
        {"--test-limit", CG_CLI_I64, &r.test_limit, 0, 1e9,
         "  --test-limit N       decode only this many test pairs at the end (default\n"
         "                       1000; 0 skips test decoding; this flag and the next\n"
         "                       three: with --resume, the checkpoint's unless given)\n",
         CG_CLI_SAVED},
        {"--beam", CG_CLI_I64, &r.beam, 1, 1000,
         "  --beam N             beam size for the final test (default 4)\n", CG_CLI_SAVED},
        {"--length-penalty", CG_CLI_F64, &r.alpha, -100, 100,
         "  --length-penalty A   alpha of ((5+len)/6)^alpha (default " CG_BEAM_ALPHA_TEXT ")\n",
         CG_CLI_SAVED},
        {"--examples", CG_CLI_I64, &r.examples, 0, 1e9,
         "  --examples N         test examples to print (default 3)\n", CG_CLI_SAVED},
        EVAL_BLEU_FLAGS(&r, &o),
        {NULL, 0, NULL, 0, 0, TRAIN_NOTES, 0},
        CG_TRAIN_INIT_FROM_FLAGS(&o, FINETUNE_NOTES),
        CG_TRAIN_LORA_FLAGS(&r.lora, &o),
        CG_TRAIN_RECIPE_FLAGS(&rec),
        CG_TRAIN_SCHEDULE_FLAGS(&r.sched),
        CG_TRAIN_RUN_FLAGS(&o),
    };
    cg_cli_args args = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
    const cg_train_program p = {"seq2seq", TRAIN_HELP, DEFAULT_CKPT, DEFAULT_DATA,
                                mt_check,  mt_setup,   mt_cleanup};
    return cg_train_command(argc, argv, &args, &o, &rec, &p, &r);
}

/* ============================================================ translate */
static const char TRANSLATE_HELP[] =
    "usage: seq2seq translate --ckpt FILE [options] [sentence ...]\n"
    "\n"
    "Translate each sentence given as an argument, or else each line of stdin;\n"
    "prints one translation per line. A sentence that cannot be translated (not\n"
    "UTF-8, or longer than the model takes) is reported on stderr and printed as an\n"
    "empty line, so that the output stays line for line with the input.\n"
    "\n"
    "options:\n" CG_TRANSLATE_HELP(DEFAULT_CKPT)
        NBEST_HELP SAMPLING_HELP SCORE_REF_HELP CG_CKPT_NO_EMA_HELP;

static int cmd_translate(int argc, char **argv)
{
    cg_translate_opts t;
    cg_cli_opt opts[CG_TRANSLATE_N_OPTS + 9];
    bool no_ema = false;
    int n_opts = cg_translate_cli_opts(&t, DEFAULT_CKPT, opts);
    opts[n_opts++] = (cg_cli_opt){"--nbest", CG_CLI_I64, &t.nbest, 1, 1000, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--no-ema", CG_CLI_SWITCH, &no_ema, 0, 0, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--sampling", CG_CLI_SWITCH, &t.sampling, 0, 0, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--sampling-topk", CG_CLI_I64, &t.sample.top_k, 0, 1e9, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--sampling-topp", CG_CLI_F64, &t.sample.top_p, 0, 1, NULL, 0};
    opts[n_opts++] =
        (cg_cli_opt){"--temperature", CG_CLI_F64, &t.sample.temperature, 0, 1e6, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--seed", CG_CLI_U64, &t.seed, 0, 0, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--score-reference", CG_CLI_STR, &t.score_ref, 0, 0, NULL, 0};
    opts[n_opts++] = (cg_cli_opt){"--buffer-size", CG_CLI_I64, &t.buffer, 1, 1e9, NULL, 0};
    int np, rc = cg_prog_parse_pos(argc, argv, opts, n_opts, TRANSLATE_HELP, &np);
    if (rc >= 0 || (rc = cg_precision_flag(t.precision, NULL)) >= 0 ||
        (rc = translate_flag_rules(&t)) >= 0)
        return rc;
    if (!cg_translate_limits_flags(&t.lim, 0)) {
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    if (t.nbest > t.beam) {
        cg_prog_fail("--nbest %lld needs a beam of as many: give --beam %lld or more",
                     (long long)t.nbest, (long long)t.nbest);
        return CG_EXIT_USAGE;
    }
    cg_cli_set_threads(PROG, t.threads);
    cg_precision prec;
    cg_seq2seq_ckpt c = {0};  /* freed whether or not it was loaded */
    int64_t nbad = 0, n = np; /* the sentences: the arguments, else the lines of stdin */
    if ((np == 0 && !stdin_not_ckpt(t.ckpt)) ||
        !ckpt_load(t.ckpt, t.base, no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE, &c) ||
        !cg_decode_precision(t.precision, cg_st_metadata(c.file, "train"), t.ckpt, &prec) ||
        (np == 0 && !cg_out_check_stdout("/dev/stdin", "standard input")))
        rc = cg_prog_fail_lib(NULL);
    else if (np > 0)
        rc = translate_texts(&c, &t, argv, NULL, np, "sentence", 0, &nbad);
    else
        rc = translate_stdin(&c, &t, &n, &nbad);
    if (rc < 0 && nbad)
        cg_prog_warn("%lld of %lld %ss not translated", (long long)nbad, (long long)n,
                     np > 0 ? "sentence" : "line");
    cg_seq2seq_ckpt_free(&c);
    return rc < 0 ? 0 : rc;
}

/* ============================================================ eval */
static const char EVAL_HELP[] =
    "usage: seq2seq eval --ckpt FILE [options]\n"
    "\n"
    "Corpus BLEU and chrF (sacreBLEU defaults) of the model's translations of the\n"
    "test split (or the validation split), as one JSON line.\n"
    "\n"
    "options:\n"
    "  --data FILE          pairs (default: the file the checkpoint was trained on)\n"
    "  --split S            test (default) or valid: the validation pairs, to tune\n"
    "                       decoding (--beam, --length-penalty) without the test set\n"
    "  --test-limit N       decode only the first N pairs of the split (default: "
    "all)\n" CG_TRANSLATE_HELP(DEFAULT_CKPT) CG_CKPT_NO_EMA_HELP;

static int cmd_eval(int argc, char **argv)
{
    const char *data = NULL, *split = "test";
    int64_t limit = -1;
    bool no_ema = false;
    cg_translate_opts t;
    cg_cli_opt opts[4 + CG_TRANSLATE_N_OPTS] = {
        {"--data", CG_CLI_STR, &data, 0, 0, NULL, 0},
        {"--test-limit", CG_CLI_I64, &limit, 1, 1e9, NULL, 0},
        {"--split", CG_CLI_STR, &split, 0, 0, NULL, 0},
        {"--no-ema", CG_CLI_SWITCH, &no_ema, 0, 0, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, 4 + cg_translate_cli_opts(&t, DEFAULT_CKPT, opts + 4),
                           EVAL_HELP);
    if (rc >= 0 || (rc = cg_precision_flag(t.precision, NULL)) >= 0)
        return rc;
    if (!cg_translate_limits_flags(&t.lim, 0)) {
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    bool valid = strcmp(split, "valid") == 0;
    if (!valid && strcmp(split, "test") != 0) {
        cg_prog_fail("--split: '%s' is not one of test, valid", split);
        return CG_EXIT_USAGE;
    }
    cg_cli_set_threads(PROG, t.threads);
    cg_seq2seq_ckpt c;
    cg_mt_data ds = {0};
    rc = ckpt_load(t.ckpt, t.base, no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE, &c)
             ? eval_split(&c, &t, &ds, data, valid, limit)
             : cg_prog_fail_lib(NULL);
    cg_mt_data_free(&ds);
    cg_seq2seq_ckpt_free(&c);
    return rc < 0 ? 0 : rc;
}

/* ============================================================ attention */
static const char ATTENTION_HELP[] =
    "usage: seq2seq attention --ckpt FILE --text S [options]\n"
    "\n"
    "Translate S greedily (or take --target) and draw the attention weights of\n"
    "that pass as PNG heatmaps, one panel per layer (rows) and head (columns),\n"
    "tokens (characters or subwords) on the axes: DIR/encoder_self.png, DIR/decoder_self.png,\n"
    "DIR/cross.png (rows: decoder inputs, columns: source).\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --base FILE          a LoRA checkpoint's base (default: the file it recorded)\n"
    "  --text S             source sentence (required)\n"
    "  --target S           decoder input instead of the greedy translation\n"
    "  --out DIR            output directory (default attention)\n"
    "  --no-cache           greedy translation without the key/value cache\n"
    "  --precision P        fp32 or bf16 matrix products (default: the checkpoint's\n"
    "                       training precision, as translate)\n"
    "  --force              overwrite existing pictures (refused otherwise)\n"
    "  --threads N          threads (default 2)\n" CG_CKPT_NO_EMA_HELP;

static int cmd_attention(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT, *base = NULL, *text = NULL, *target = NULL, *dir = "attention",
               *precision = NULL;
    int64_t threads = 2;
    bool no_cache = false, force = false, no_ema = false;
    const cg_cli_opt opts[] = {
        {"--no-ema", CG_CLI_SWITCH, &no_ema, 0, 0, NULL, 0},
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL, 0},
        {"--force", CG_CLI_SWITCH, &force, 0, 0, NULL, 0},
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL, 0},
        {"--base", CG_CLI_STR, &base, 0, 0, NULL, 0},
        {"--text", CG_CLI_TEXT, &text, 0, 0, NULL, 0},
        {"--target", CG_CLI_TEXT, &target, 0, 0, NULL, 0},
        {"--out", CG_CLI_STR, &dir, 0, 0, NULL, 0},
        {"--precision", CG_CLI_STR, &precision, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), ATTENTION_HELP);
    if (rc >= 0 || (rc = cg_precision_flag(precision, NULL)) >= 0)
        return rc;
    if (!text) {
        cg_prog_fail("attention needs --text (try --help)");
        return CG_EXIT_USAGE;
    }
    /* the pictures: never over a file without --force, never the checkpoint,
     * in DIR or where it can be made (cg_seq2seq_draw_attention makes it) */
    const char *pics[] = {"encoder_self.png", "decoder_self.png", "cross.png"};
    for (int i = 0; i < 3; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, pics[i]);
        if (!cg_out_picture_check(path, force, ck, "--ckpt", true))
            return cg_prog_fail_lib(NULL);
    }
    cg_cli_set_threads(PROG, threads);
    cg_seq2seq_ckpt c;
    cg_precision prec; /* decoded as translate decodes it */
    rc = ckpt_load(ck, base, no_ema ? CG_CKPT_TRAINED : CG_CKPT_AVERAGE, &c) &&
                 cg_decode_precision(precision, cg_st_metadata(c.file, "train"), ck, &prec) &&
                 attention_inputs(&c, text, target) &&
                 cg_seq2seq_attention_of_text(c.model, c.tok, text, target, "--target", !no_cache,
                                              dir, stdout, stderr)
             ? 0
             : cg_prog_fail_lib(NULL);
    cg_seq2seq_ckpt_free(&c);
    return rc;
}

/* ============================================================ score */
static const char SCORE_HELP[] =
    "usage: seq2seq score --ref FILE [--hyp FILE]\n"
    "\n"
    "Score a translation file against its references, one sentence a line in each\n"
    "(fairseq-score --sys HYP --ref REF; sacrebleu REF -i HYP -m bleu chrf): corpus\n"
    "BLEU and chrF as sacreBLEU 2.x computes them with its defaults, as one JSON\n"
    "line: bleu, chrf, BLEU's four n-gram precisions, bp (brevity penalty), ratio,\n"
    "hyp_len and ref_len (13a tokens), sentences, and each metric's signature\n"
    "(sacreBLEU's settings; impl:cgrad: computed by cgrad, not by sacreBLEU).\n"
    "Numbers are given in full (sacreBLEU prints one decimal).\n"
    "  seq2seq translate --ckpt m.st <src.txt | seq2seq score --ref ref.txt\n"
    "\n"
    "options:\n"
    "  --ref FILE           the references (required; -: standard input, with --hyp)\n"
    "  --hyp FILE           the hypotheses (default, or -: standard input)\n"
    "Both are UTF-8 text (a line that is not is refused, by its number), read as\n"
    "translate reads its input: a line ends at \"\\n\" (a \"\\r\" before it dropped; a\n"
    "last line without one counts); they must have as many lines. An empty line is\n"
    "an empty hypothesis (translate prints one for a sentence it cannot translate).\n";

static int cmd_score(int argc, char **argv)
{
    const char *ref = NULL, *hyp = NULL;
    const cg_cli_opt opts[] = {
        {"--ref", CG_CLI_STR, &ref, 0, 0, NULL, 0},
        {"--hyp", CG_CLI_STR, &hyp, 0, 0, NULL, 0},
    };
    int rc = cg_prog_parse(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), SCORE_HELP);
    if (rc >= 0)
        return rc;
    if (!ref) {
        cg_prog_fail("score needs --ref FILE, the references (try --help)");
        return CG_EXIT_USAGE;
    }
    rc = score_files(ref, hyp);
    return rc < 0 ? 0 : rc;
}

/* ============================================================ average */
/* Does the checkpoint at path load as a translator? (average's check) */
static bool mt_loads(const char *path, cg_ckpt_weights w)
{
    cg_seq2seq_ckpt c;
    bool ok = cg_seq2seq_ckpt_load_weights(path, NULL, w, &c);
    cg_seq2seq_ckpt_free(&c);
    return ok;
}

/* ============================================================ main */
static const char MAIN_HELP[] =
    "usage: seq2seq <command> [options]   (seq2seq <command> --help for each)\n"
    "\n"
    "A Transformer translator over characters or BPE subwords (English -> German by\n"
    "default).\n"
    "\n"
    "commands:\n"
    "  train      train a model on tab-separated sentence pairs\n"
    "  translate  translate sentences (arguments or stdin lines)\n"
    "  eval       BLEU and chrF on the test split, one JSON line\n"
    "  attention  PNG heatmaps of every attention layer and head for one sentence\n"
    "  score      BLEU and chrF of a translation file against its references\n"
    "  average    average the weights of checkpoints (e.g. those of train --keep-last)\n"
    "  merge      merge a LoRA adapter checkpoint into its base (PEFT's merge_and_unload)\n"
    "Run 'seq2seq COMMAND --help' (or 'seq2seq help COMMAND') for a command's options.\n"
    "Exit status: 0 done, 1 failed, 2 bad command line.\n";

int main(int argc, char **argv)
{
    static const cg_prog_command cmds[] = {{"train", cmd_train},
                                           {"translate", cmd_translate},
                                           {"eval", cmd_eval},
                                           {"attention", cmd_attention},
                                           {"score", cmd_score}};
    static const cg_program p = {
        PROG,
        MAIN_HELP,
        cmds,
        5,
        {"seq2seq", cg_seq2seq_config_same_arch, mt_loads, NULL, cg_seq2seq_load_adapted}};
    return cg_program_main(argc, argv, &p);
}
