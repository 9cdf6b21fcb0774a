/* seq2seq: train and use the character encoder-decoder translator.
 *
 *   seq2seq train      [--data F --preset tiny|base --steps N ...]
 *   seq2seq translate  --ckpt F [--beam N --length-penalty A --no-cache] [sentences...]
 *   seq2seq eval       --ckpt F [--beam N] [--no-cache]
 *   seq2seq attention  --ckpt F --text S [--out DIR]
 *
 * The training recipe is shared/reference/train_seq2seq.py (see its
 * docstring); the data split and batch order use numpy's RandomState
 * bit-exactly (models/pairs.h). Every error prints one line
 * "seq2seq: error: ..." on stderr and exits non-zero; checkpoints are
 * written atomically, so an existing one is never lost. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "models/beam.h"
#include "models/checkpoint.h"
#include "models/cli.h"
#include "models/config_json.h"
#include "models/data.h"
#include "models/dist.h"
#include "models/metrics.h"
#include "models/pairs.h"
#include "models/plot.h"
#include "models/seq2seq.h"
#include "models/train_common.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PROG "seq2seq"
#define DEFAULT_DATA "data/en_de_ding.tsv"
#define DEFAULT_CKPT "seq2seq.safetensors"

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    cg_progress_end();
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* keep it one line */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, PROG ": error: %s\n", msg);
    exit(1);
}

static void die_lib(const char *what)
{
    const char *e = cg_last_error();
    if (what)
        die("%s: %s", what, e && *e ? e : "unknown error");
    die("%s", e && *e ? e : "unknown error");
}

/* ------------------------------------------------------------ presets */
typedef struct {
    const char *name;
    int64_t d, H, enc_layers, dec_layers, d_ff;
} preset;

static const preset PRESETS[] = {
    {"tiny", 128, 4, 2, 2, 512},
    {"base", 256, 8, 3, 3, 1024},
};

static const preset *find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof PRESETS[0]; i++)
        if (strcmp(PRESETS[i].name, name) == 0)
            return &PRESETS[i];
    return NULL;
}

/* ------------------------------------------------------------ checkpoints */
/* Metadata: "model": "seq2seq", "config": JSON, "vocab": JSON string of the
 * characters (ids 4..), "step", "train": trainer state JSON. Tensors: the
 * model's parameters, and "optim.*" for training checkpoints. */
static bool ckpt_save(const char *path, const cg_seq2seq *m, const cg_pair_vocab *v,
                      const cg_optim *o, int64_t step, const char *train_json)
{
    bool ok = false;
    char *cfg = cg_seq2seq_config_to_json(&m->cfg);
    char *voc = cg_pair_vocab_to_json(v);
    cg_st_writer *w = cg_st_writer_new();
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    if (!cfg || !voc || !w)
        goto out;
    if (!cg_st_set_metadata(w, "model", "seq2seq") || !cg_st_set_metadata(w, "config", cfg) ||
        !cg_st_set_metadata(w, "vocab", voc) || !cg_st_set_metadata(w, "step", stepbuf))
        goto out;
    if (train_json && !cg_st_set_metadata(w, "train", train_json))
        goto out;
    if (!cg_module_write(CG_MODULE(m), w, NULL))
        goto out;
    if (o && !cg_optim_save(o, w, "optim"))
        goto out;
    if (!cg_ensure_parent_dir(path))
        goto out;
    ok = cg_st_writer_save(w, path);
out:
    free(cfg);
    free(voc);
    cg_st_writer_free(w);
    return ok;
}

typedef struct {
    cg_seq2seq *model;
    cg_pair_vocab vocab;
    cg_st_file *file;
    int64_t step;
} ckpt;

/* A corrupt config ("d": 100000) must not make the loader allocate
 * gigabytes before the parameters are found not to match: the file (already
 * in memory) must hold at least the config's weight matrices (a lower bound
 * of its parameters: embedding, attention and feed-forward weights), and the
 * positions table (max_len x d, not stored) must be of a plausible size. */
static bool config_fits_file(const cg_seq2seq_config *c, const cg_st_file *f)
{
    double have = cg_st_f32_elements(f);
    double d = (double)c->d, ff = (double)c->d_ff;
    double need = (double)c->vocab * d + (double)c->enc_layers * (4 * d * d + 2 * d * ff) +
                  (double)c->dec_layers * (8 * d * d + 2 * d * ff);
    if (need > have) {
        cg_set_error("its config needs at least %.0f parameter values but the file holds %.0f; "
                     "corrupt file?", need, have);
        return false;
    }
    if ((double)c->max_len * d > 4 * have + (double)(1 << 24)) {
        cg_set_error("max_len=%lld with d=%lld is implausibly large for a model of %.0f "
                     "values; corrupt file?", (long long)c->max_len, (long long)c->d, have);
        return false;
    }
    return true;
}

static void ckpt_load(const char *path, ckpt *c)
{
    memset(c, 0, sizeof *c);
    if (access(path, F_OK) != 0)
        die("checkpoint %s: %s", path, strerror(errno));
    c->file = cg_st_open(path);
    if (!c->file)
        die_lib(NULL);
    const char *kind = cg_st_metadata(c->file, "model");
    if (!kind || strcmp(kind, "seq2seq") != 0)
        die("%s is not a seq2seq checkpoint (model: %s)", path, kind ? kind : "missing");
    const char *cfgj = cg_st_metadata(c->file, "config");
    const char *vocj = cg_st_metadata(c->file, "vocab");
    if (!cfgj || !vocj)
        die("%s: checkpoint lacks its %s", path, cfgj ? "vocabulary" : "config");
    cg_seq2seq_config cfg;
    if (!cg_seq2seq_config_from_json(cfgj, &cfg))
        die_lib(path);
    if (!cg_pair_vocab_from_json(vocj, &c->vocab))
        die_lib(path);
    if (cg_pair_vocab_size(&c->vocab) != cfg.vocab)
        die("%s: vocabulary of %lld characters (+4 specials) does not match the config's "
            "vocab %lld",
            path, (long long)c->vocab.n_chars, (long long)cfg.vocab);
    if (!config_fits_file(&cfg, c->file))
        die_lib(path);
    c->model = cg_seq2seq_new(&cfg, 0);
    if (!c->model)
        die_lib(path);
    if (!cg_ckpt_check_tensors(CG_MODULE(c->model), c->file, path) ||
        !cg_module_load(CG_MODULE(c->model), c->file, NULL))
        die_lib(path);
    if (!cg_ckpt_parse_step(c->file, path, &c->step))
        die_lib(NULL);
}

static void ckpt_free(ckpt *c)
{
    cg_seq2seq_free(c->model);
    cg_pair_vocab_free(&c->vocab);
    cg_st_close(c->file);
    memset(c, 0, sizeof *c);
}

/* ------------------------------------------------------------ flags */
/* Parse flags; print help and exit 0 on --help. */
static void parse_flags(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help)
{
    bool want_help;
    if (!cg_cli_parse(argc, argv, opts, n, &want_help))
        die_lib(NULL);
    if (want_help) {
        fputs(help, stdout);
        exit(0);
    }
}

/* Split argv into flags (with their values) and positional arguments: an
 * argument starting with "--" is a flag (a value follows unless it is a
 * switch or has "="); "--" ends the flags. Arrays must hold argc entries. */
static void split_args(int argc, char **argv, const cg_cli_opt *opts, int n, char **flags,
                       int *nf, char **pos, int *np)
{
    *nf = *np = 0;
    bool only_pos = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        if (!only_pos && (strncmp(a, "--", 2) == 0 || strcmp(a, "-h") == 0)) {
            flags[(*nf)++] = argv[i];
            if (strchr(a, '='))
                continue;
            for (int j = 0; j < n; j++)
                if (strcmp(opts[j].name, a) == 0 && opts[j].kind != CG_CLI_SWITCH &&
                    i + 1 < argc) {
                    flags[(*nf)++] = argv[++i];
                    break;
                }
            continue;
        }
        pos[(*np)++] = argv[i];
    }
}

/* ------------------------------------------------------------ evaluation */
/* (label-smoothed loss, cross-entropy) averaged over non-pad targets. */
static void valid_loss(cg_seq2seq *m, const cg_pairs *p, const cg_batches *bs,
                       const cg_pair_vocab *v, double *ls_out, double *nll_out)
{
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    double ls = 0, nll = 0, ntok = 0;
    for (int64_t b = 0; b < bs->n_batches; b++) {
        cg_batch bt;
        if (!cg_batch_make(p, bs->idx + bs->start[b], bs->start[b + 1] - bs->start[b], v, &bt))
            die_lib("validation batch");
        cg_tensor *logits = cg_seq2seq_forward(m, bt.src, bt.B, bt.S, bt.tgt_in, bt.T);
        cg_tensor *l1 = cg_seq2seq_loss(m, logits, bt.tgt_out);
        cg_tensor *l2 = cg_cross_entropy(logits, bt.tgt_out, bt.B * bt.T, CG_PAD, 0.0f);
        if (!l1 || !l2)
            die_lib("validation");
        double n = (double)bt.n_tokens;
        ls += cg_item(l1) * n;
        nll += cg_item(l2) * n;
        ntok += n;
        cg_release_all(3, logits, l1, l2);
        cg_batch_free(&bt);
    }
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), true);
    *ls_out = ntok > 0 ? ls / ntok : NAN;
    *nll_out = ntok > 0 ? nll / ntok : NAN;
}

/* Encode sources; returns ids per source (malloc'd) without EOS. */
typedef struct {
    int64_t **ids;
    int64_t *len;
    int64_t n;
} sources;

static void sources_free(sources *s)
{
    for (int64_t i = 0; i < s->n; i++)
        free(s->ids[i]);
    free(s->ids);
    free(s->len);
    memset(s, 0, sizeof *s);
}

static void sources_encode(const cg_pair_vocab *v, const char *const *texts, int64_t n,
                           int64_t max_len, sources *out)
{
    out->n = 0;
    out->ids = calloc((size_t)(n ? n : 1), sizeof *out->ids);
    out->len = calloc((size_t)(n ? n : 1), sizeof *out->len);
    if (!out->ids || !out->len)
        die("out of memory");
    for (int64_t i = 0; i < n; i++) {
        int64_t k;
        int64_t *ids = cg_pair_vocab_encode(v, texts[i], &k, NULL);
        if (!ids)
            die("sentence %lld: %s", (long long)i + 1, cg_last_error());
        if (k + 1 > max_len)
            die("sentence %lld has %lld characters; the model takes at most %lld", (long long)i + 1,
                (long long)k, (long long)max_len - 1);
        out->ids[i] = ids;
        out->len[i] = k;
        out->n++;
    }
}

/* Decode every source: beam <= 1 greedy in chunks of 50 (reference
 * `greedy`), else beam search per sentence. Each output is cut at
 * len(source) + 50 tokens (and at the model's max_len). Returns malloc'd
 * UTF-8 strings; echo (may be NULL) gets each line as soon as it is
 * decoded. use_cache: decode with the key/value cache (else recompute). */
static char **decode_all(cg_seq2seq *m, const cg_pair_vocab *v, const sources *src, int beam,
                         double alpha, bool use_cache, FILE *echo)
{
    cg_module_train(CG_MODULE(m), false);
    char **out = calloc((size_t)(src->n ? src->n : 1), sizeof *out);
    if (!out)
        die("out of memory");
    const int64_t maxT = m->cfg.max_len;
    if (beam <= 1) {
        const int64_t chunk = 50;
        for (int64_t c0 = 0; c0 < src->n; c0 += chunk) {
            int64_t B = src->n - c0 < chunk ? src->n - c0 : chunk, S = 0;
            for (int64_t i = 0; i < B; i++)
                if (src->len[c0 + i] + 1 > S)
                    S = src->len[c0 + i] + 1;
            int64_t steps = S - 1 + 50;
            if (steps > maxT)
                steps = maxT;
            int64_t *ids = calloc((size_t)(B * S), sizeof *ids);
            int64_t *res = malloc((size_t)(B * steps) * sizeof *res);
            int64_t *lens = malloc((size_t)B * sizeof *lens);
            if (!ids || !res || !lens)
                die("out of memory");
            for (int64_t i = 0; i < B; i++) {
                memcpy(ids + i * S, src->ids[c0 + i], (size_t)src->len[c0 + i] * sizeof *ids);
                ids[i * S + src->len[c0 + i]] = CG_EOS;
            }
            if (!cg_greedy_decode(m, ids, B, S, steps, res, lens, use_cache))
                die_lib("greedy decoding");
            for (int64_t i = 0; i < B; i++) {
                int64_t lim = src->len[c0 + i] + 50, L = lens[i] < lim ? lens[i] : lim;
                out[c0 + i] = cg_pair_vocab_decode(v, res + i * steps, L);
                if (!out[c0 + i])
                    die_lib(NULL);
                if (echo)
                    fprintf(echo, "%s\n", out[c0 + i]), fflush(echo);
            }
            free(ids);
            free(res);
            free(lens);
        }
    } else {
        for (int64_t i = 0; i < src->n; i++) {
            int64_t S = src->len[i] + 1;
            int64_t *ids = malloc((size_t)S * sizeof *ids);
            if (!ids)
                die("out of memory");
            memcpy(ids, src->ids[i], (size_t)src->len[i] * sizeof *ids);
            ids[S - 1] = CG_EOS;
            int64_t steps = src->len[i] + 50, *res = NULL, L = 0;
            if (steps > maxT)
                steps = maxT;
            if (!cg_beam_search(m, ids, S, beam, alpha, steps, &res, &L, NULL, NULL, use_cache))
                die_lib("beam search");
            out[i] = cg_pair_vocab_decode(v, res, L);
            if (!out[i])
                die_lib(NULL);
            if (echo)
                fprintf(echo, "%s\n", out[i]), fflush(echo);
            free(res);
            free(ids);
        }
    }
    return out;
}

static void strings_free(char **s, int64_t n)
{
    if (!s)
        return;
    for (int64_t i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

/* ------------------------------------------------------------ data set */
typedef struct {
    cg_pairs pairs;
    cg_pair_split split;
} dataset;

static void dataset_load(const char *path, int64_t n_valid, int64_t n_test, dataset *d)
{
    if (!cg_pairs_read(path, &d->pairs))
        die_lib(NULL);
    if (!cg_pairs_split(&d->pairs, n_valid, n_test, &d->split))
        die("%s: %s", path, cg_last_error());
}

static void dataset_free(dataset *d)
{
    cg_pairs_free(&d->pairs);
    cg_pair_split_free(&d->split);
}

/* ============================================================ train */
static const char TRAIN_HELP[] =
    "usage: seq2seq train [options]\n"
    "\n"
    "Train the character Transformer translator with the recipe of\n"
    "shared/reference/train_seq2seq.py: post-norm, layernorm, relu, dropout 0.1,\n"
    "label smoothing 0.1, Adam(0.9, 0.98, 1e-9), Noam schedule, gradient clipping\n"
    "at 1.0, batches of at most --max-tokens padded tokens from length-sorted\n"
    "pairs. Split: pairs shuffled with numpy RandomState(0); the last --test-size\n"
    "are test, the --valid-size before them validation, the rest train.\n"
    "\n"
    "options:\n"
    "  --data FILE          source<TAB>target pairs (default " DEFAULT_DATA ")\n"
    "  --preset NAME        tiny (d 128, 4 heads, 2+2 layers, d_ff 512) or\n"
    "                       base (d 256, 8 heads, 3+3 layers, d_ff 1024); default tiny\n"
    "  --steps N            training steps (default 16000: about 15 minutes on 2\n"
    "                       threads of the development machine, the best test chrF\n"
    "                       found for that time; the reference's recipe is 5000)\n"
    "  --max-tokens N       padded tokens per batch (default 3000)\n"
    "  --factor F           Noam factor (default 0.25)\n"
    "  --warmup N           Noam warmup steps (default 400)\n"
    "  --max-len N          longest sequence; longer training pairs are dropped (256)\n"
    "  --seed N             initialisation, dropout and batch order (default 1)\n"
    "  --threads N          threads (default 2)\n"
    "  --out FILE           checkpoint to write (default " DEFAULT_CKPT "; the loss\n"
    "                       curve is written beside it as FILE.loss.png)\n"
    "  --resume FILE        continue a run from its checkpoint, exactly (its recipe,\n"
    "                       model and position; --out defaults to FILE, --steps to\n"
    "                       the checkpoint's target)\n"
    "  --stop-at N          save and stop after step N (as if interrupted)\n"
    "  --force              overwrite an existing --out (refused otherwise)\n"
    "  --skip-nonfinite     skip a step whose loss or gradient is NaN/Inf (with a\n"
    "                       warning) instead of stopping\n"
    "  --eval-every N       validate and checkpoint every N steps (default 1000)\n"
    "  --log-every N        progress line every N steps (default 250)\n"
    "  --valid-size N       validation pairs (default 500)\n"
    "  --test-size N        test pairs (default 1000)\n"
    "  --test-limit N       decode only this many test pairs at the end (default\n"
    "                       1000; 0 skips test decoding)\n"
    "  --beam N             beam size for the final test (default 4)\n"
    "  --length-penalty A   alpha of ((5+len)/6)^alpha (default 0.6)\n"
    "  --examples N         test examples to print (default 3)\n"
    "\n"
    "Progress goes to stderr; examples and a final JSON line (val_nll: plain\n"
    "cross-entropy over non-pad validation targets; chrF/BLEU of greedy and beam\n"
    "decoding on the test split) to stdout. Ctrl-C saves a checkpoint and stops.\n";

typedef struct {
    const char *data, *preset, *ckpt, *resume_from;
    int64_t stop_at;
    int64_t steps, max_tokens, warmup, max_len, threads, eval_every, log_every;
    int64_t valid_size, test_size, test_limit, beam, examples;
    uint64_t seed;
    double factor, alpha;
    bool resume, force, skip_nonfinite;
} train_opts;


static char *train_state_json(const train_opts *o, int64_t epoch, int64_t pos,
                              const cg_rng *drop, double elapsed, const double *recent,
                              int n_recent, const cg_history *h)
{
    cJSON *j = cJSON_CreateObject();
    char buf[64];
    cJSON_AddStringToObject(j, "data", o->data);
    cJSON_AddStringToObject(j, "preset", o->preset);
    cJSON_AddNumberToObject(j, "max_tokens", (double)o->max_tokens);
    cJSON_AddNumberToObject(j, "factor", o->factor);
    cJSON_AddNumberToObject(j, "warmup", (double)o->warmup);
    cJSON_AddNumberToObject(j, "max_len", (double)o->max_len);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)o->seed);
    cJSON_AddStringToObject(j, "seed", buf);
    cJSON_AddNumberToObject(j, "valid_size", (double)o->valid_size);
    cJSON_AddNumberToObject(j, "test_size", (double)o->test_size);
    cJSON_AddNumberToObject(j, "steps", (double)o->steps);
    cJSON_AddNumberToObject(j, "epoch", (double)epoch);
    cJSON_AddNumberToObject(j, "pos", (double)pos);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)drop->seed);
    cJSON_AddStringToObject(j, "dropout_seed", buf);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)drop->counter);
    cJSON_AddStringToObject(j, "dropout_counter", buf);
    cJSON_AddNumberToObject(j, "elapsed", elapsed);
    cJSON *r = cJSON_AddArrayToObject(j, "recent");
    for (int i = 0; i < n_recent; i++)
        cJSON_AddItemToArray(r, cJSON_CreateNumber(recent[i]));
    char *hj = cg_history_to_json(h);
    if (hj) {
        cJSON_AddItemToObject(j, "history", cJSON_Parse(hj));
        free(hj);
    }
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static double jnum(const cJSON *j, const char *key, const char *path)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x))
        die("%s: trainer state lacks '%s'", path, key);
    return x->valuedouble;
}

static const char *jstr(const cJSON *j, const char *key, const char *path)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsString(x))
        die("%s: trainer state lacks '%s'", path, key);
    return x->valuestring;
}

static int cmd_train(int argc, char **argv)
{
    train_opts o = {.data = DEFAULT_DATA, .preset = "tiny", .ckpt = NULL,
                    .steps = 16000, .max_tokens = 3000, .warmup = 400, .max_len = 256,
                    .threads = 2, .eval_every = 1000, .log_every = 250, .valid_size = 500,
                    .test_size = 1000, .test_limit = 1000, .beam = 4, .examples = 3,
                    .seed = 1, .factor = 0.25, .alpha = 0.6};
    bool steps_seen = false;
    const cg_cli_opt opts[] = {
        {"--data", CG_CLI_STR, &o.data, 0, 0, NULL},
        {"--preset", CG_CLI_STR, &o.preset, 0, 0, NULL},
        {"--steps", CG_CLI_I64, &o.steps, 1, 1e9, &steps_seen},
        {"--max-tokens", CG_CLI_I64, &o.max_tokens, 2, 1e9, NULL},
        {"--factor", CG_CLI_F64, &o.factor, 0, 1e3, NULL},
        {"--warmup", CG_CLI_I64, &o.warmup, 1, 1e9, NULL},
        {"--max-len", CG_CLI_I64, &o.max_len, 3, 100000, NULL},
        {"--seed", CG_CLI_U64, &o.seed, 0, 0, NULL},
        {"--threads", CG_CLI_I64, &o.threads, 1, 1024, NULL},
        {"--out", CG_CLI_STR, &o.ckpt, 0, 0, NULL},
        {"--resume", CG_CLI_STR, &o.resume_from, 0, 0, NULL},
        {"--stop-at", CG_CLI_I64, &o.stop_at, 1, 1e9, NULL},
        {"--force", CG_CLI_SWITCH, &o.force, 0, 0, NULL},
        {"--skip-nonfinite", CG_CLI_SWITCH, &o.skip_nonfinite, 0, 0, NULL},
        {"--eval-every", CG_CLI_I64, &o.eval_every, 1, 1e9, NULL},
        {"--log-every", CG_CLI_I64, &o.log_every, 1, 1e9, NULL},
        {"--valid-size", CG_CLI_I64, &o.valid_size, 1, 1e9, NULL},
        {"--test-size", CG_CLI_I64, &o.test_size, 1, 1e9, NULL},
        {"--test-limit", CG_CLI_I64, &o.test_limit, 0, 1e9, NULL},
        {"--beam", CG_CLI_I64, &o.beam, 1, 1000, NULL},
        {"--length-penalty", CG_CLI_F64, &o.alpha, -100, 100, NULL},
        {"--examples", CG_CLI_I64, &o.examples, 0, 1e9, NULL},
    };
    parse_flags(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), TRAIN_HELP);
    cg_set_num_threads((int)cg_cli_threads(PROG, o.threads));
    o.resume = o.resume_from != NULL;
    if (!o.ckpt)
        o.ckpt = o.resume ? o.resume_from : DEFAULT_CKPT;
    if (access(o.ckpt, F_OK) == 0 && !o.force &&
        !(o.resume && strcmp(o.ckpt, o.resume_from) == 0))
        die("checkpoint %s exists; continue it with --resume %s, or pass --force to "
            "overwrite it",
            o.ckpt, o.ckpt);

    /* resume: the recipe comes from the checkpoint */
    ckpt rc = {0};
    cJSON *state = NULL;
    if (o.resume) {
        ckpt_load(o.resume_from, &rc);
        const char *tj = cg_st_metadata(rc.file, "train");
        if (!tj || !(state = cJSON_Parse(tj)))
            die("%s: no trainer state to resume from (not a training checkpoint)",
                o.resume_from);
        o.data = jstr(state, "data", o.resume_from);
        o.preset = jstr(state, "preset", o.resume_from);
        o.max_tokens = (int64_t)jnum(state, "max_tokens", o.resume_from);
        o.factor = jnum(state, "factor", o.resume_from);
        o.warmup = (int64_t)jnum(state, "warmup", o.resume_from);
        o.max_len = (int64_t)jnum(state, "max_len", o.resume_from);
        o.seed = strtoull(jstr(state, "seed", o.resume_from), NULL, 10);
        o.valid_size = (int64_t)jnum(state, "valid_size", o.resume_from);
        o.test_size = (int64_t)jnum(state, "test_size", o.resume_from);
        if (!steps_seen)
            o.steps = (int64_t)jnum(state, "steps", o.resume_from);
        if (rc.step >= o.steps)
            die("%s is already at step %lld of %lld; pass a larger --steps", o.resume_from,
                (long long)rc.step, (long long)o.steps);
    }
    const preset *pr = find_preset(o.preset);
    if (!pr)
        die("unknown preset '%s' (choose tiny or base)", o.preset);

    dataset ds = {0};
    dataset_load(o.data, o.valid_size, o.test_size, &ds);
    const cg_pairs *P = &ds.pairs;
    int64_t n_train = cg_pairs_filter(P, ds.split.train, ds.split.n_train, o.max_len - 2);
    if (n_train == 0)
        die("%s: no training pair has both sides within %lld characters", o.data,
            (long long)o.max_len - 2);
    cg_pair_vocab vocab;
    if (!cg_pair_vocab_build(P, ds.split.train, n_train, &vocab))
        die_lib(o.data);
    cg_pairs_warn_unknown(P, ds.split.valid, ds.split.n_valid, &vocab, PROG, "the validation pairs");
    cg_pairs_warn_unknown(P, ds.split.test, ds.split.n_test, &vocab, PROG, "the test pairs");
    for (int64_t i = 0; i < ds.split.n_valid; i++) {
        const cg_pair *q = &P->items[ds.split.valid[i]];
        if (q->src_len + 1 > o.max_len || q->tgt_len + 1 > o.max_len)
            die("%s: a validation pair is longer than --max-len %lld", o.data,
                (long long)o.max_len);
    }

    cg_seq2seq_config cfg = cg_seq2seq_config_default();
    cfg.vocab = cg_pair_vocab_size(&vocab);
    cfg.d = pr->d;
    cfg.H = pr->H;
    cfg.enc_layers = pr->enc_layers;
    cfg.dec_layers = pr->dec_layers;
    cfg.d_ff = pr->d_ff;
    cfg.max_len = o.max_len;
    cfg.norm = CG_NORM_LAYERNORM;
    cfg.act = CG_ACT_RELU;
    cfg.norm_first = false;
    cfg.dropout = 0.1f;
    cfg.label_smoothing = 0.1f;

    cg_seq2seq *model;
    if (o.resume) {
        if (rc.vocab.n_chars != vocab.n_chars ||
            memcmp(rc.vocab.chars, vocab.chars, (size_t)vocab.n_chars * sizeof(uint32_t)) != 0)
            die("%s: the vocabulary of %s differs from the checkpoint's (data changed?)", o.resume_from,
                o.data);
        model = rc.model;
        rc.model = NULL;
        if (model->cfg.d != cfg.d || model->cfg.enc_layers != cfg.enc_layers)
            die("%s: model does not match preset %s", o.resume_from, o.preset);
        cfg = model->cfg;
        cg_module_train(CG_MODULE(model), true);
    } else {
        model = cg_seq2seq_new(&cfg, o.seed);
        if (!model)
            die_lib("model");
    }

    cg_batches batches, vbatches;
    if (!cg_make_batches(P, ds.split.train, n_train, o.max_tokens, &batches) ||
        !cg_make_batches(P, ds.split.valid, ds.split.n_valid, o.max_tokens, &vbatches))
        die_lib(NULL);

    /* optimizer over every parameter, no weight decay */
    cg_param_list pl = {0};
    if (!cg_module_params(CG_MODULE(model), &pl))
        die_lib(NULL);
    cg_optim_param *op = malloc((size_t)pl.n * sizeof *op);
    cg_tensor **ptens = malloc((size_t)pl.n * sizeof *ptens);
    if (!op || !ptens)
        die("out of memory");
    for (int i = 0; i < pl.n; i++) {
        op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor, 0.0};
        ptens[i] = pl.items[i].tensor;
    }
    cg_optim_config oc = cg_adam_config(0.0, 0.9, 0.98, 1e-9);
    cg_optim *opt = cg_optim_new(&oc, pl.n, op);
    if (!opt)
        die_lib("optimizer");

    /* trainer state */
    int64_t step = 0, epoch = 0, pos = batches.n_batches;
    double elapsed = 0;
    double recent[250];
    int n_recent = 0;
    cg_history hist = {0};
    int64_t *perm = malloc((size_t)batches.n_batches * sizeof *perm);
    if (!perm)
        die("out of memory");
    if (o.seed > 0xffffffffULL)
        die("--seed must be below 2^32 (numpy RandomState)");
    cg_mt19937 order;
    cg_mt19937_seed(&order, (uint32_t)o.seed);
    if (o.resume) {
        if (!cg_optim_load(opt, rc.file, "optim"))
            die_lib(o.resume_from);
        step = rc.step;
        epoch = (int64_t)jnum(state, "epoch", o.resume_from);
        pos = (int64_t)jnum(state, "pos", o.resume_from);
        elapsed = jnum(state, "elapsed", o.resume_from);
        model->dropout_rng.seed = strtoull(jstr(state, "dropout_seed", o.resume_from), NULL, 10);
        model->dropout_rng.counter = strtoull(jstr(state, "dropout_counter", o.resume_from), NULL, 10);
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(state, "recent"), *x;
        cJSON_ArrayForEach(x, r)
        {
            if (n_recent < 250 && cJSON_IsNumber(x))
                recent[n_recent++] = x->valuedouble;
        }
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(state, "history");
        if (h) {
            char *hs = cJSON_PrintUnformatted(h);
            if (!hs || !cg_history_from_json(hs, &hist))
                die("%s: bad loss history", o.resume_from);
            free(hs);
        }
        if (!cg_train_position_check(epoch, pos, batches.n_batches, step, o.resume_from))
            die_lib(NULL);
        /* replay the batch order of the epochs so far */
        for (int64_t e = 0; e < epoch; e++)
            cg_mt_permutation(&order, batches.n_batches, perm);
    }

    fprintf(stderr,
            "train %lld pairs in %lld batches, valid %lld, test %lld, vocab %lld, params %lld%s\n",
            (long long)n_train, (long long)batches.n_batches, (long long)ds.split.n_valid,
            (long long)ds.split.n_test, (long long)cfg.vocab,
            (long long)cg_module_num_params(CG_MODULE(model)),
            o.resume ? " (resumed)" : "");
    if (o.resume)
        fprintf(stderr, "resuming %s at step %lld\n", o.resume_from, (long long)step);

    /* Data parallel (models/dist.h): every rank starts from rank 0's parameters,
     * walks the same batch order and trains on its share of each batch's pairs;
     * gradients are averaged weighted by target tokens; dropout is seeded per
     * rank (rank 0 keeps the checkpoint's stream). */
    const int nranks = cg_dist_size(), rank = cg_dist_rank();
    if (!cg_dist_broadcast_module(CG_MODULE(model)))
        die_lib("broadcasting the parameters");
    model->dropout_rng.seed = cg_dist_rank_seed(model->dropout_rng.seed);
    char *png = cg_loss_png_path(o.ckpt);
    cg_train_catch_signals();
    const int64_t start_step = step;
    int64_t skipped = 0;
    double tok_window = 0, time_window = 0, tok_total = 0;
    bool interrupted = false;

#define SAVE_CKPT()                                                                            \
    do {                                                                                       \
        char *tj_ = train_state_json(&o, epoch, pos, &model->dropout_rng, elapsed, recent,     \
                                     n_recent, &hist);                                         \
        if (cg_dist_is_root() && /* rank 0 alone writes */                                   \
            (!tj_ || !ckpt_save(o.ckpt, model, &vocab, opt, step, tj_)))                       \
            die("saving %s: %s", o.ckpt, cg_last_error());                                     \
        free(tj_);                                                                             \
    } while (0)
#define PLOT_LOSS()                                                                            \
    do {                                                                                       \
        if (png && cg_dist_is_root() &&                                                        \
            !cg_history_plot(&hist, png, "seq2seq: label-smoothed loss"))                      \
            fprintf(stderr, PROG ": warning: loss curve: %s\n", cg_last_error());              \
    } while (0)

    while (step < o.steps) {
        double stop_flag = cg_train_interrupted(); /* every rank stops at the same step */
        cg_dist_allreduce_max(&stop_flag, 1);
        if (stop_flag > 0 || (o.stop_at > 0 && step >= o.stop_at)) {
            interrupted = true;
            break;
        }
        if (pos >= batches.n_batches) {
            epoch++;
            cg_mt_permutation(&order, batches.n_batches, perm);
            pos = 0;
        }
        int64_t bi = perm[pos++];
        double t0 = cg_now();
        step++;
        double lr = cg_lr_noam(step, cfg.d, o.warmup, o.factor);
        cg_optim_set_lr(opt, lr);
        cg_batch bt;
        int64_t nb = batches.start[bi + 1] - batches.start[bi];
        int64_t b0 = nb * rank / nranks, b1 = nb * (rank + 1) / nranks;
        if (b1 <= b0)
            die("a batch of %lld pairs cannot be split over %d ranks (raise --max-tokens)",
                (long long)nb, nranks);
        if (!cg_batch_make(P, batches.idx + batches.start[bi] + b0, b1 - b0, &vocab, &bt))
            die_lib("batch");
        cg_tensor *logits = cg_seq2seq_forward(model, bt.src, bt.B, bt.S, bt.tgt_in, bt.T);
        cg_tensor *loss = cg_seq2seq_loss(model, logits, bt.tgt_out);
        cg_release(logits);
        if (!loss)
            die_lib("forward");
        double lv = cg_item(loss);
        cg_optim_zero_grad(opt);
        bool back_ok = cg_backward(loss, NULL, false);
        cg_release(loss);
        if (!isfinite(lv) && !o.skip_nonfinite) {
            char culprit[400] = "";
            if (back_ok && !cg_optim_grads_finite(opt, NULL))
                snprintf(culprit, sizeof culprit, " (%s)", cg_last_error());
            die("loss is %s at step %lld%s; stopping (the checkpoint %s is left as it was)",
                isnan(lv) ? "nan" : "inf", (long long)step, culprit, o.ckpt);
        }
        if (!back_ok)
            die_lib("backward");
        /* loss and gradients of the batch, over every rank: from here on
         * every rank takes the same decisions */
        double lsum[2] = {lv * (double)bt.n_tokens, (double)bt.n_tokens};
        if (!cg_dist_allreduce_sum(lsum, 2) ||
            !cg_dist_average_grads(CG_MODULE(model), (double)bt.n_tokens))
            die_lib("averaging gradients");
        lv = lsum[0] / lsum[1];
        double norm_total = cg_optim_clip_grad_norm(opt, 1.0);
        if (norm_total < 0)
            die_lib("clip");
        bool skip = false;
        if (o.skip_nonfinite && (!isfinite(lv) || !isfinite(norm_total))) {
            if (cg_optim_grads_finite(opt, NULL))
                cg_set_error("gradient norm is not finite");
            cg_progress_end();
            fprintf(stderr, PROG ": warning: skipping step %lld: loss %g, %s\n", (long long)step,
                    lv, cg_last_error());
            cg_optim_zero_grad(opt);
            skipped++;
            skip = true;
        } else if (!isfinite(norm_total)) {
            if (cg_optim_grads_finite(opt, NULL))
                cg_set_error("gradient norm is not finite");
            die("step %lld: %s; stopping (the checkpoint %s is left as it was)", (long long)step,
                cg_last_error(), o.ckpt);
        }
        if (!skip && !cg_optim_step(opt))
            die_lib("optimizer step");
        if (!skip && !cg_history_train_step(&hist, step, lv))
            die_lib(NULL);
        double dt = cg_now() - t0;
        elapsed += dt;
        int64_t ntok = bt.n_tokens;
        for (int64_t i = 0; i < bt.B * bt.S; i++)
            ntok += bt.src[i] != CG_PAD;
        double gtok = (double)ntok; /* tokens of every rank */
        cg_dist_allreduce_sum(&gtok, 1);
        ntok = (int64_t)gtok;
        tok_window += (double)ntok;
        tok_total += (double)ntok;
        time_window += dt;
        cg_batch_free(&bt);
        if (n_recent == 250 && !skip) {
            memmove(recent, recent + 1, 249 * sizeof *recent);
            n_recent--;
        }
        if (!skip)
            recent[n_recent++] = lv;
        double mean = 0;
        for (int i = 0; i < n_recent; i++)
            mean += recent[i];
        mean = n_recent ? mean / n_recent : NAN;
        if (step % o.log_every == 0 || step == o.steps) {
            double tps = time_window > 0 ? tok_window / time_window : 0;
            double per_step = time_window / (double)(step - start_step > o.log_every
                                                         ? o.log_every
                                                         : step - start_step);
            cg_progress(PROG, step, o.steps, mean, lr, tps, per_step * (double)(o.steps - step));
            tok_window = time_window = 0;
        }
        if (step % o.eval_every == 0 || step == o.steps) {
            double vls, vnll;
            valid_loss(model, P, &vbatches, &vocab, &vls, &vnll);
            cg_progress_end();
            fprintf(stderr, "  step %lld epoch %lld: valid loss %.4f, nll %.4f\n",
                    (long long)step, (long long)epoch, vls, vnll);
            cg_history_push(&hist, step, mean, vls);
            SAVE_CKPT();
            PLOT_LOSS();
        }
    }
    if (skipped > 0) {
        cg_progress_end();
        fprintf(stderr, PROG ": %lld step(s) skipped (non-finite loss or gradient)\n",
                (long long)skipped);
    }
    if (interrupted) {
        SAVE_CKPT();
        PLOT_LOSS();
        cg_progress_end();
        fprintf(stderr, PROG ": stopped at step %lld; checkpoint saved to '%s' (continue with "
                        "--resume %s)\n",
                (long long)step, o.ckpt, o.ckpt);
        printf("{\"step\": %lld, \"interrupted\": true, \"elapsed_s\": %s, "
               "\"tokens_per_s\": %s, \"checkpoint\": %s}\n",
               (long long)step, CG_JSON_NUM("%.1f", elapsed),
               CG_JSON_NUM("%.0f", elapsed > 0 && step > start_step ? tok_total / elapsed : 0.0),
               CG_JSON_STR(o.ckpt));
        goto cleanup;
    }
    cg_progress_end();
    if (nranks > 1)
        fprintf(stderr, PROG ": %d ranks: %.1f s of %.1f s of training in communication (%.0f%%)\n",
                nranks, cg_dist_comm_seconds(), elapsed,
                elapsed > 0 ? 100 * cg_dist_comm_seconds() / elapsed : 0.0);

    double train_loss = 0;
    for (int i = 0; i < n_recent; i++)
        train_loss += recent[i];
    train_loss = n_recent ? train_loss / n_recent : NAN;
    double val_loss, val_nll, wrong_nll, dummy;
    valid_loss(model, P, &vbatches, &vocab, &val_loss, &val_nll);
    /* every validation target with the next pair's source */
    {
        cg_pairs wp = {0};
        wp.n = wp.cap = ds.split.n_valid;
        wp.items = malloc((size_t)wp.n * sizeof *wp.items);
        if (!wp.items)
            die("out of memory");
        for (int64_t i = 0; i < wp.n; i++) {
            const cg_pair *a = &P->items[ds.split.valid[(i + 1) % wp.n]];
            const cg_pair *b = &P->items[ds.split.valid[i]];
            wp.items[i] = (cg_pair){a->src, b->tgt, a->src_len, b->tgt_len};
        }
        cg_batches wb;
        if (!cg_make_batches(&wp, NULL, wp.n, o.max_tokens, &wb))
            die_lib(NULL);
        valid_loss(model, &wp, &wb, &vocab, &dummy, &wrong_nll);
        cg_batches_free(&wb);
        free(wp.items);
    }
    fprintf(stderr, "valid nll %.4f, with mismatched sources %.4f\n", val_nll, wrong_nll);

    /* test decoding */
    int64_t nt = o.test_limit < ds.split.n_test ? o.test_limit : ds.split.n_test;
    double bleu_g = NAN, bleu_b = NAN, chrf_g = NAN, chrf_b = NAN, decode_s = 0;
    if (nt > 0) {
        const char **srcs = malloc((size_t)nt * sizeof *srcs);
        const char **refs = malloc((size_t)nt * sizeof *refs);
        if (!srcs || !refs)
            die("out of memory");
        for (int64_t i = 0; i < nt; i++) {
            srcs[i] = P->items[ds.split.test[i]].src;
            refs[i] = P->items[ds.split.test[i]].tgt;
        }
        sources s;
        sources_encode(&vocab, srcs, nt, cfg.max_len, &s);
        fprintf(stderr, "decoding %lld test pairs (greedy, then beam %lld)...\n", (long long)nt,
                (long long)o.beam);
        double t0 = cg_now();
        char **hg = decode_all(model, &vocab, &s, 1, o.alpha, true, NULL);
        char **hb = decode_all(model, &vocab, &s, (int)o.beam, o.alpha, true, NULL);
        decode_s = cg_now() - t0;
        bleu_g = cg_bleu((int)nt, (const char *const *)hg, refs);
        bleu_b = cg_bleu((int)nt, (const char *const *)hb, refs);
        chrf_g = cg_chrf((int)nt, (const char *const *)hg, refs);
        chrf_b = cg_chrf((int)nt, (const char *const *)hb, refs);
        for (int64_t i = 0; i < nt && i < o.examples; i++)
            printf("SRC  %s\nREF  %s\nGRDY %s\nBEAM %s\n\n", srcs[i], refs[i], hg[i], hb[i]);
        strings_free(hg, nt);
        strings_free(hb, nt);
        sources_free(&s);
        free(srcs);
        free(refs);
    }
    cJSON *j = cJSON_CreateObject();
#define R(x, d) (round((x) * (d)) / (d))
    cJSON_AddNumberToObject(j, "steps", (double)step);
    cJSON_AddNumberToObject(j, "epochs", (double)epoch);
    cJSON_AddNumberToObject(j, "train_loss", R(train_loss, 1e4));
    cJSON_AddNumberToObject(j, "val_loss", R(val_loss, 1e4));
    cJSON_AddNumberToObject(j, "val_nll", R(val_nll, 1e4));
    cJSON_AddNumberToObject(j, "val_nll_wrong_src", R(wrong_nll, 1e4));
    if (nt > 0) {
        cJSON_AddNumberToObject(j, "bleu_greedy", R(bleu_g, 100));
        cJSON_AddNumberToObject(j, "bleu_beam", R(bleu_b, 100));
        cJSON_AddNumberToObject(j, "chrf_greedy", R(chrf_g, 100));
        cJSON_AddNumberToObject(j, "chrf_beam", R(chrf_b, 100));
    }
    cJSON_AddNumberToObject(j, "elapsed_s", R(elapsed, 10));
    cJSON_AddNumberToObject(j, "decode_s", R(decode_s, 10));
    cJSON_AddNumberToObject(j, "tokens_per_s",
                            round(elapsed > 0 && step > start_step ? tok_total / elapsed : 0));
    cJSON_AddNumberToObject(j, "factor", o.factor);
    cJSON_AddStringToObject(j, "preset", o.preset);
    cJSON_AddNumberToObject(j, "test_pairs", (double)nt);
    cJSON_AddNumberToObject(j, "beam", (double)o.beam);
    cJSON_AddNumberToObject(j, "params", (double)cg_module_num_params(CG_MODULE(model)));
    cJSON_AddStringToObject(j, "ckpt", o.ckpt);
#undef R
    char *js = cJSON_PrintUnformatted(j);
    printf("%s\n", js);
    fflush(stdout);
    free(js);
    cJSON_Delete(j);

cleanup:
    free(png);
    free(perm);
    cg_history_free(&hist);
    cg_optim_free(opt);
    free(op);
    free(ptens);
    cg_param_list_free(&pl);
    cg_batches_free(&batches);
    cg_batches_free(&vbatches);
    cg_pair_vocab_free(&vocab);
    cg_seq2seq_free(model);
    if (state)
        cJSON_Delete(state);
    ckpt_free(&rc);
    dataset_free(&ds);
    return 0;
}

/* ============================================================ translate */
static const char TRANSLATE_HELP[] =
    "usage: seq2seq translate --ckpt FILE [options] [sentence ...]\n"
    "\n"
    "Translate each sentence given as an argument, or else each line of stdin;\n"
    "prints one translation per line.\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --beam N             beam size; 1 = greedy decoding (default 1)\n"
    "  --length-penalty A   alpha of the beam's ((5+len)/6)^alpha (default 0.6)\n"
    "  --no-cache           recompute the whole prefix at every step (no key/value cache)\n"
    "  --threads N          threads (default 2)\n";

static int cmd_translate(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT;
    int64_t beam = 1, threads = 2;
    double alpha = 0.6;
    bool no_cache = false;
    const cg_cli_opt opts[] = {
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL},
        {"--beam", CG_CLI_I64, &beam, 1, 1000, NULL},
        {"--length-penalty", CG_CLI_F64, &alpha, -100, 100, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
    };
    char **flags = malloc((size_t)(argc + 1) * sizeof *flags);
    char **pos = malloc((size_t)(argc + 1) * sizeof *pos);
    int nf, np;
    if (!flags || !pos)
        die("out of memory");
    split_args(argc, argv, opts, 5, flags, &nf, pos, &np);
    parse_flags(nf, flags, opts, 5, TRANSLATE_HELP);
    cg_set_num_threads((int)cg_cli_threads(PROG, threads));
    ckpt c;
    ckpt_load(ck, &c);

    /* the sentences */
    char **texts = NULL;
    int64_t n = 0, cap = 0;
    if (np > 0) {
        texts = malloc((size_t)np * sizeof *texts);
        if (!texts)
            die("out of memory");
        for (int i = 0; i < np; i++)
            if (!(texts[n++] = strdup(pos[i])))
                die("out of memory");
    } else {
        char *line = NULL;
        size_t lcap = 0;
        ssize_t k;
        while ((k = (ssize_t)cg_read_line(&line, &lcap, stdin, "stdin", CG_LINE_MAX)) >= 0) {
            while (k > 0 && (line[k - 1] == '\n' || line[k - 1] == '\r'))
                line[--k] = '\0';
            if (n == cap) {
                cap = cap ? 2 * cap : 64;
                char **t = realloc(texts, (size_t)cap * sizeof *t);
                if (!t)
                    die("out of memory");
                texts = t;
            }
            if (!(texts[n++] = strdup(line)))
                die("out of memory");
        }
        free(line);
        if (k == -2)
            die_lib(NULL);
    }
    for (int64_t i = 0; i < n; i++) {
        size_t bad;
        if (cg_utf8_count(texts[i], strlen(texts[i]), &bad) < 0)
            die("sentence %lld is not valid UTF-8 (byte %zu)", (long long)i + 1, bad + 1);
        cg_pair_vocab_warn_unknown(&c.vocab, texts[i], PROG, "sentence", i + 1);
    }
    sources s;
    sources_encode(&c.vocab, (const char *const *)texts, n, c.model->cfg.max_len, &s);
    char **hyps = decode_all(c.model, &c.vocab, &s, (int)beam, alpha, !no_cache, stdout);
    strings_free(hyps, n);
    sources_free(&s);
    strings_free(texts, n);
    free(flags);
    free(pos);
    ckpt_free(&c);
    return 0;
}

/* ============================================================ eval */
static const char EVAL_HELP[] =
    "usage: seq2seq eval --ckpt FILE [options]\n"
    "\n"
    "Corpus BLEU and chrF (sacreBLEU defaults) of the model's translations of the\n"
    "test split, as one JSON line.\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --data FILE          pairs (default: the file the checkpoint was trained on)\n"
    "  --beam N             beam size; 1 = greedy decoding (default 1)\n"
    "  --length-penalty A   alpha of ((5+len)/6)^alpha (default 0.6)\n"
    "  --test-limit N       decode only the first N test pairs (default: all)\n"
    "  --no-cache           recompute the whole prefix at every step (no key/value cache)\n"
    "  --threads N          threads (default 2)\n";

static int cmd_eval(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT, *data = NULL;
    int64_t beam = 1, threads = 2, limit = -1;
    double alpha = 0.6;
    bool no_cache = false;
    const cg_cli_opt opts[] = {
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL},
        {"--data", CG_CLI_STR, &data, 0, 0, NULL},
        {"--beam", CG_CLI_I64, &beam, 1, 1000, NULL},
        {"--length-penalty", CG_CLI_F64, &alpha, -100, 100, NULL},
        {"--test-limit", CG_CLI_I64, &limit, 1, 1e9, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
    };
    parse_flags(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), EVAL_HELP);
    cg_set_num_threads((int)cg_cli_threads(PROG, threads));
    ckpt c;
    ckpt_load(ck, &c);
    int64_t n_valid = 500, n_test = 1000;
    const char *tj = cg_st_metadata(c.file, "train");
    cJSON *st = tj ? cJSON_Parse(tj) : NULL;
    if (st) {
        const cJSON *x;
        if (!data && cJSON_IsString(x = cJSON_GetObjectItemCaseSensitive(st, "data")))
            data = x->valuestring;
        if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(st, "valid_size")))
            n_valid = (int64_t)x->valuedouble;
        if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(st, "test_size")))
            n_test = (int64_t)x->valuedouble;
    }
    if (!data)
        data = DEFAULT_DATA;
    dataset ds = {0};
    dataset_load(data, n_valid, n_test, &ds);
    int64_t nt = limit > 0 && limit < ds.split.n_test ? limit : ds.split.n_test;
    cg_pairs_warn_unknown(&ds.pairs, ds.split.test, nt, &c.vocab, PROG, "the test pairs");
    const char **srcs = malloc((size_t)nt * sizeof *srcs);
    const char **refs = malloc((size_t)nt * sizeof *refs);
    if (!srcs || !refs)
        die("out of memory");
    for (int64_t i = 0; i < nt; i++) {
        srcs[i] = ds.pairs.items[ds.split.test[i]].src;
        refs[i] = ds.pairs.items[ds.split.test[i]].tgt;
    }
    sources s;
    sources_encode(&c.vocab, srcs, nt, c.model->cfg.max_len, &s);
    double t0 = cg_now();
    char **hyps = decode_all(c.model, &c.vocab, &s, (int)beam, alpha, !no_cache, NULL);
    double dt = cg_now() - t0;
    double bleu = cg_bleu((int)nt, (const char *const *)hyps, refs);
    double chrf = cg_chrf((int)nt, (const char *const *)hyps, refs);
    if (bleu < 0 || chrf < 0)
        die_lib("metrics");
    printf("{\"bleu\": %s, \"chrf\": %s, \"beam\": %lld, \"test_pairs\": %lld, "
           "\"decode_s\": %s, \"step\": %lld}\n",
           CG_JSON_NUM("%.2f", bleu), CG_JSON_NUM("%.2f", chrf), (long long)beam, (long long)nt,
           CG_JSON_NUM("%.1f", dt), (long long)c.step);
    strings_free(hyps, nt);
    sources_free(&s);
    free(srcs);
    free(refs);
    if (st)
        cJSON_Delete(st);
    dataset_free(&ds);
    ckpt_free(&c);
    return 0;
}

/* ============================================================ attention */
static const char ATTENTION_HELP[] =
    "usage: seq2seq attention --ckpt FILE --text S [options]\n"
    "\n"
    "Translate S greedily (or take --target) and draw the attention weights of\n"
    "that pass as PNG heatmaps, one panel per layer (rows) and head (columns),\n"
    "characters on the axes: DIR/encoder_self.png, DIR/decoder_self.png,\n"
    "DIR/cross.png (rows: decoder inputs, columns: source).\n"
    "\n"
    "options:\n"
    "  --ckpt FILE          checkpoint (default " DEFAULT_CKPT ")\n"
    "  --text S             source sentence (required)\n"
    "  --target S           decoder input instead of the greedy translation\n"
    "  --out DIR            output directory (default attention)\n"
    "  --no-cache           greedy translation without the key/value cache\n"
    "  --threads N          threads (default 2)\n";

/* labels: one string per id */
static char **id_labels(const cg_pair_vocab *v, const int64_t *ids, int64_t n)
{
    char **l = calloc((size_t)n, sizeof *l);
    if (!l)
        die("out of memory");
    for (int64_t i = 0; i < n; i++) {
        const char *sp = ids[i] == CG_PAD ? "<pad>" : ids[i] == CG_BOS ? "<s>"
                       : ids[i] == CG_EOS ? "</s>" : ids[i] == CG_PAIR_UNK ? "<unk>" : NULL;
        l[i] = sp ? strdup(sp) : cg_pair_vocab_decode(v, ids + i, 1);
        if (!l[i])
            die("out of memory");
    }
    return l;
}

static void draw(const char *dir, const char *file, const char *title, int layers, int H,
                 cg_mha *const *mods, int64_t Tq, int64_t Tk, char **rl, char **cl)
{
    cg_heatmap_panel *p = calloc((size_t)(layers * H), sizeof *p);
    char (*titles)[48] = calloc((size_t)(layers * H), sizeof *titles);
    float **vals = calloc((size_t)layers, sizeof *vals);
    if (!p || !titles || !vals)
        die("out of memory");
    for (int i = 0; i < layers; i++) {
        cg_tensor *w = mods[i]->weights;
        if (!w || w->ndim != 4 || w->shape[2] != Tq || w->shape[3] != Tk)
            die("attention weights of layer %d were not recorded", i);
        vals[i] = malloc((size_t)cg_numel(w) * sizeof(float));
        if (!vals[i] || !cg_copy_to(w, vals[i]))
            die("out of memory");
        for (int h = 0; h < H; h++) {
            int k = i * H + h;
            snprintf(titles[k], sizeof titles[k], "layer %d head %d", i, h);
            p[k] = (cg_heatmap_panel){titles[k], (int)Tq, (int)Tk, vals[i] + h * Tq * Tk,
                                      (const char *const *)rl, (const char *const *)cl, NULL,
                                      NULL};
        }
    }
    size_t plen = strlen(dir) + strlen(file) + 2;
    char *path = malloc(plen);
    if (!path)
        die("out of memory");
    snprintf(path, plen, "%s/%s", dir, file);
    if (!cg_plot_heatmaps(path, title, layers, H, p, 0.0f, 1.0f))
        die("%s: %s", path, cg_last_error());
    printf("%s\n", path);
    free(path);
    for (int i = 0; i < layers; i++)
        free(vals[i]);
    free(vals);
    free(titles);
    free(p);
}

static int cmd_attention(int argc, char **argv)
{
    const char *ck = DEFAULT_CKPT, *text = NULL, *target = NULL, *dir = "attention";
    int64_t threads = 2;
    bool no_cache = false;
    const cg_cli_opt opts[] = {
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
        {"--ckpt", CG_CLI_STR, &ck, 0, 0, NULL},
        {"--text", CG_CLI_STR, &text, 0, 0, NULL},
        {"--target", CG_CLI_STR, &target, 0, 0, NULL},
        {"--out", CG_CLI_STR, &dir, 0, 0, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
    };
    parse_flags(argc, argv, opts, (int)(sizeof opts / sizeof opts[0]), ATTENTION_HELP);
    if (!text)
        die("attention needs --text (try --help)");
    cg_set_num_threads((int)cg_cli_threads(PROG, threads));
    ckpt c;
    ckpt_load(ck, &c);
    cg_seq2seq *m = c.model;
    cg_module_train(CG_MODULE(m), false);
    const char *one[1] = {text};
    sources s;
    sources_encode(&c.vocab, one, 1, m->cfg.max_len, &s);
    int64_t S = s.len[0] + 1;
    int64_t *src = malloc((size_t)S * sizeof *src);
    if (!src)
        die("out of memory");
    memcpy(src, s.ids[0], (size_t)s.len[0] * sizeof *src);
    src[S - 1] = CG_EOS;
    /* decoder input: BOS + translation */
    int64_t *out_ids = NULL, L = 0;
    if (target) {
        if (cg_utf8_count(target, strlen(target), NULL) < 0)
            die("--target is not valid UTF-8");
        out_ids = cg_pair_vocab_encode(&c.vocab, target, &L, NULL);
        if (!out_ids)
            die_lib("--target");
    } else {
        int64_t steps = S - 1 + 50 < m->cfg.max_len - 1 ? S - 1 + 50 : m->cfg.max_len - 1;
        out_ids = malloc((size_t)steps * sizeof *out_ids);
        if (!out_ids || !cg_greedy_decode(m, src, 1, S, steps, out_ids, &L, !no_cache))
            die_lib("greedy decoding");
    }
    int64_t T = L + 1;
    if (T > m->cfg.max_len)
        die("the target is longer than the model's max_len %lld", (long long)m->cfg.max_len);
    int64_t *tin = malloc((size_t)T * sizeof *tin);
    if (!tin)
        die("out of memory");
    tin[0] = CG_BOS;
    memcpy(tin + 1, out_ids, (size_t)L * sizeof *tin);
    char *trans = cg_pair_vocab_decode(&c.vocab, out_ids, L);
    fprintf(stderr, "translation: %s\n", trans ? trans : "");
    free(trans);

    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        die("cannot create %s: %s", dir, strerror(errno));
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_no_grad_begin();
    cg_tensor *logits = cg_seq2seq_forward(m, src, 1, S, tin, T);
    cg_no_grad_end();
    if (!logits)
        die_lib("forward");
    cg_release(logits);

    char **sl = id_labels(&c.vocab, src, S), **tl = id_labels(&c.vocab, tin, T);
    int H = (int)m->cfg.H, ne = m->encoder->n_layers, nd = m->decoder->n_layers;
    cg_mha **mods = malloc((size_t)(ne + nd + 1) * sizeof *mods);
    if (!mods)
        die("out of memory");
    if (ne > 0) {
        for (int i = 0; i < ne; i++)
            mods[i] = m->encoder->layers[i]->self_attn;
        draw(dir, "encoder_self.png", "encoder self-attention", ne, H, mods, S, S, sl, sl);
    }
    if (nd > 0) {
        for (int i = 0; i < nd; i++)
            mods[i] = m->decoder->layers[i]->self_attn;
        draw(dir, "decoder_self.png", "decoder self-attention", nd, H, mods, T, T, tl, tl);
        for (int i = 0; i < nd; i++)
            mods[i] = m->decoder->layers[i]->cross_attn;
        draw(dir, "cross.png", "cross-attention (rows: decoder input, columns: source)", nd, H,
             mods, T, S, tl, sl);
    }
    strings_free(sl, S);
    strings_free(tl, T);
    free(mods);
    free(tin);
    free(out_ids);
    free(src);
    sources_free(&s);
    ckpt_free(&c);
    return 0;
}

/* ============================================================ main */
static const char MAIN_HELP[] =
    "usage: seq2seq <command> [options]   (seq2seq <command> --help for each)\n"
    "\n"
    "A character-level Transformer translator (English -> German by default).\n"
    "\n"
    "commands:\n"
    "  train      train a model on tab-separated sentence pairs\n"
    "  translate  translate sentences (arguments or stdin lines)\n"
    "  eval       BLEU and chrF on the test split, one JSON line\n"
    "  attention  PNG heatmaps of every attention layer and head for one sentence\n";

static int run(int argc, char **argv);

int main(int argc, char **argv)
{
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot())
        die_lib("MPI");
    int rc = run(argc, argv);
    if (rc != 0 && cg_dist_size() > 1) /* do not leave the other ranks waiting */
        cg_dist_abort(rc, "stopping every rank");
    cg_dist_finalize();
    return rc;
}

static int run(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, PROG ": error: missing command (train, translate, eval or attention; "
                        "try --help)\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(MAIN_HELP, stdout);
        return 0;
    }
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 2, argv + 2);
    if (strcmp(cmd, "translate") == 0)
        return cmd_translate(argc - 2, argv + 2);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 2, argv + 2);
    if (strcmp(cmd, "attention") == 0)
        return cmd_attention(argc - 2, argv + 2);
    die("unknown command '%s' (choose train, translate, eval or attention)", cmd);
}
