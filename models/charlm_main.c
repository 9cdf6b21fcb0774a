/* charlm: train, sample from and evaluate the decoder-only character
 * language model (models/charlm.h), nanoGPT style.
 *
 *   charlm train  [--preset tiny|base] [--data F] [--steps N] [--out F] ...
 *   charlm sample --ckpt F [--prompt S] [--length N] [--temperature X] ...
 *   charlm eval   --ckpt F [--data F]
 *
 * The training recipe is shared/reference/train_charlm.py's (vocabulary,
 * 90/10 split, random windows, AdamW with decay on 2-D parameters only,
 * clipping, warmup + cosine, fixed-seed evaluation batches, full validation
 * loss over consecutive windows). Errors print one line
 * "charlm: error: ..." on stderr and exit 1; checkpoints are written
 * atomically, so an existing one is never lost. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "models/charlm.h"
#include "models/checkpoint.h"
#include "models/cli.h"
#include "models/config_json.h"
#include "models/data.h"
#include "models/dist.h"
#include "models/plot.h"
#include "models/sampling.h"
#include "models/train_common.h"
#include "models/vocab.h"
#include "optim/optim.h"
#include "optim/schedule.h"

#define PROG "charlm"
#define DEFAULT_DATA "data/moby_dick.txt"
#define DEFAULT_OUT "out/charlm.safetensors"
#define EVAL_BATCHES 20
#define EVAL_SEED 1234
#define WARMUP 100
#define WEIGHT_DECAY 0.1
#define CLIP_NORM 1.0
#define BATCH_SEED_MIX 0xd1b54a32d192ed03ULL /* batch stream != init stream */

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    cg_progress_end();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int fail_lib(void) { return fail("%s", cg_has_error() ? cg_last_error() : "unknown error"); }

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...)
{
    cg_progress_end();
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": warning: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Read the corpus; a missing default file gets a hint about how to make it. */
static uint32_t *read_corpus(const char *path, int64_t *n)
{
    uint32_t *cps = cg_read_text_file(path, n);
    if (!cps && strcmp(path, DEFAULT_DATA) == 0 && strstr(cg_last_error(), "cannot open")) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", cg_last_error());
        cg_set_error("%s; create it with scripts/prepare_data.sh (or pass --data FILE)", msg);
    }
    return cps;
}

/* ------------------------------------------------------------ evaluation */
/* Mean loss over EVAL_BATCHES batches from a generator seeded EVAL_SEED. */
static bool sampled_loss(cg_charlm *m, cg_split_view s, int64_t B, int64_t T, int64_t *x,
                         int64_t *y, double *out)
{
    cg_rng gen = cg_rng_new(EVAL_SEED);
    double total = 0;
    for (int i = 0; i < EVAL_BATCHES; i++) {
        if (!cg_get_batch(s, B, T, &gen, x, y))
            return false;
        cg_tensor *logits = cg_charlm_forward(m, x, B, T);
        cg_tensor *loss = cg_charlm_loss(m, logits, y);
        cg_release(logits);
        if (!loss)
            return false;
        total += cg_item(loss);
        cg_release(loss);
    }
    *out = total / EVAL_BATCHES;
    return true;
}

/* The reference's full_split_loss: all (len-1)/T consecutive windows. */
static bool full_split_loss(cg_charlm *m, cg_split_view s, int64_t T, double *out, int64_t *nwin)
{
    const int64_t chunk = 64;
    int64_t n = (s.n - 1) / T;
    if (n < 1) {
        cg_set_error("the validation split (%lld characters) is shorter than one window of %lld+1",
                     (long long)s.n, (long long)T);
        return false;
    }
    int64_t *x = malloc((size_t)(chunk * T) * sizeof *x), *y = malloc((size_t)(chunk * T) * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        cg_set_error("out of memory");
        return false;
    }
    bool was_training = m->base.training;
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    double total = 0;
    bool ok = true;
    for (int64_t st = 0; ok && st < n; st += chunk) {
        int64_t b = n - st < chunk ? n - st : chunk;
        for (int64_t i = 0; i < b; i++) {
            cg_split_window(s, (st + i) * T, T, x + i * T, y + i * T);
        }
        cg_tensor *logits = cg_charlm_forward(m, x, b, T);
        cg_tensor *loss = cg_charlm_loss(m, logits, y);
        cg_release(logits);
        ok = loss != NULL;
        if (ok)
            total += (double)cg_item(loss) * (double)b;
        cg_release(loss);
    }
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), was_training);
    free(x);
    free(y);
    *out = total / (double)n;
    *nwin = n;
    return ok;
}

/* ------------------------------------------------------------------ train */
static const char *TRAIN_HELP =
    "usage: charlm train [options]\n"
    "Train the character language model (recipe: shared/reference/train_charlm.py).\n"
    "\n"
    "model (defaults from --preset; not allowed with --resume):\n"
    "  --preset NAME      tiny (d 128, H 4, 4 layers, d_ff 512, T 64, B 12; default)\n"
    "                     or base (d 384, H 6, 6 layers, d_ff 1536, T 256, B 16)\n"
    "  --d N --H N --layers N --d-ff N   width, heads (must divide d), blocks, FF width\n"
    "  --block-size N     context length T (also --T)\n"
    "  --norm layernorm|rmsnorm   --act gelu|relu   --norm-first true|false\n"
    "  --dropout P        in [0, 1) (default 0)\n"
    "training:\n"
    "  --data FILE        UTF-8 text (default " DEFAULT_DATA
    ", made by scripts/prepare_data.sh)\n"
    "  --steps N          total optimizer steps (default 2000; with --resume: the\n"
    "                     checkpoint's target unless given)\n"
    "  --batch-size N     windows per batch B (default from the preset)\n"
    "  --lr X             peak learning rate (default 1e-3; cosine down to X/10,\n"
    "                     100 warmup steps); AdamW betas (0.9, 0.99), wd 0.1 on 2-D\n"
    "                     parameters, gradient clipping at norm 1\n"
    "  --seed N           model init and batch order (default 1)\n"
    "  --eval-every N     evaluate and checkpoint every N steps (default 250)\n"
    "  --threads N        threads for kernels (default: all cores)\n"
    "  --out FILE         checkpoint (default " DEFAULT_OUT
    "; the loss curve is written\n"
    "                     beside it as FILE.loss.png)\n"
    "  --resume FILE      continue a run from its checkpoint, exactly (--out\n"
    "                     defaults to FILE)\n"
    "  --force            overwrite an existing --out (refused otherwise)\n"
    "  --stop-at N        save and stop after step N (as if interrupted)\n"
    "  --skip-nonfinite   skip a step whose loss or gradient is NaN/Inf (with a\n"
    "                     warning) instead of stopping\n"
    "Ctrl-C saves a checkpoint and stops. The last stdout line is a JSON summary.\n";

typedef struct {
    int64_t d, H, layers, d_ff, T, B;
} preset;

static const preset PRESET_TINY = {128, 4, 4, 512, 64, 12};
static const preset PRESET_BASE = {384, 6, 6, 1536, 256, 16};

/* The trainer's state kept in the checkpoint's "train" metadata. */
typedef struct {
    int64_t steps, B, eval_every;
    uint64_t seed;
    double lr;
    cg_rng batch_rng, dropout_rng;
    const char *data;
} train_state;

static char *u64str(uint64_t v, char *buf)
{
    sprintf(buf, "%" PRIu64, v);
    return buf;
}

static char *train_state_json(const train_state *s, const cg_history *h)
{
    char b[32];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "steps", (double)s->steps);
    cJSON_AddNumberToObject(o, "batch_size", (double)s->B);
    cJSON_AddNumberToObject(o, "eval_every", (double)s->eval_every);
    cJSON_AddStringToObject(o, "seed", u64str(s->seed, b));
    cJSON_AddStringToObject(o, "lr", (snprintf(b, sizeof b, "%.17g", s->lr), b));
    cJSON_AddStringToObject(o, "batch_rng_seed", u64str(s->batch_rng.seed, b));
    cJSON_AddStringToObject(o, "batch_rng_counter", u64str(s->batch_rng.counter, b));
    cJSON_AddStringToObject(o, "dropout_rng_seed", u64str(s->dropout_rng.seed, b));
    cJSON_AddStringToObject(o, "dropout_rng_counter", u64str(s->dropout_rng.counter, b));
    cJSON_AddStringToObject(o, "data", s->data);
    char *hj = cg_history_to_json(h);
    cJSON *hist = hj ? cJSON_Parse(hj) : NULL;
    free(hj);
    if (hist)
        cJSON_AddItemToObject(o, "history", hist);
    char *out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return out;
}

static bool json_u64(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it))
        return false;
    char *end;
    *out = strtoull(it->valuestring, &end, 10);
    return *it->valuestring && *end == '\0';
}

static bool json_i64(const cJSON *o, const char *key, int64_t *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it))
        return false;
    *out = (int64_t)it->valuedouble;
    return true;
}

/* Parse the "train" metadata; data is copied into *data_copy (malloc'd). */
static bool train_state_parse(const char *json, train_state *s, cg_history *h, char **data_copy)
{
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    const cJSON *lr = cJSON_GetObjectItemCaseSensitive(o, "lr");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(o, "data");
    bool ok = o && json_i64(o, "steps", &s->steps) && json_i64(o, "batch_size", &s->B) &&
              json_i64(o, "eval_every", &s->eval_every) && json_u64(o, "seed", &s->seed) &&
              json_u64(o, "batch_rng_seed", &s->batch_rng.seed) &&
              json_u64(o, "batch_rng_counter", &s->batch_rng.counter) &&
              json_u64(o, "dropout_rng_seed", &s->dropout_rng.seed) &&
              json_u64(o, "dropout_rng_counter", &s->dropout_rng.counter) && cJSON_IsString(lr) &&
              cJSON_IsString(data) && s->B >= 1 && s->eval_every >= 1;
    if (ok) {
        s->lr = strtod(lr->valuestring, NULL);
        *data_copy = strdup(data->valuestring);
        const cJSON *hist = cJSON_GetObjectItemCaseSensitive(o, "history");
        if (hist) {
            char *hj = cJSON_PrintUnformatted(hist);
            ok = hj && cg_history_from_json(hj, h);
            free(hj);
        }
    }
    cJSON_Delete(o);
    return ok;
}

/* Save checkpoint + loss curve. */
static bool save_all(const char *out, const cg_charlm *m, const cg_vocab *v, const cg_optim *o,
                     int64_t step, const train_state *s, const cg_history *h)
{
    if (!cg_dist_is_root()) /* data parallel: rank 0 alone writes */
        return true;
    char *tj = train_state_json(s, h);
    if (!tj) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = cg_charlm_ckpt_save(out, m, v, o, step, tj);
    free(tj);
    if (ok && (h->n > 0 || h->dn > 0)) {
        char *png = cg_loss_png_path(out);
        if (png && !cg_history_plot(h, png, "charlm loss"))
            warn("could not write the loss curve: %s", cg_last_error());
        free(png);
    }
    return ok;
}

static int cmd_train(int argc, char **argv)
{
    const char *preset_name = "tiny", *norm = NULL, *act = NULL, *data = NULL, *out = NULL,
               *resume = NULL;
    int64_t d = 0, H = 0, layers = 0, d_ff = 0, T = 0, B = 0, steps = 2000, threads = 0,
            eval_every = 250, stop_at = -1, skipped = 0;
    bool skip_nonfinite = false, force = false;
    double lr = 1e-3, dropout = 0;
    uint64_t seed = 1;
    bool norm_first = true;
    bool s_d = false, s_H = false, s_layers = false, s_dff = false, s_T = false, s_B = false,
         s_norm = false, s_act = false, s_nf = false, s_drop = false, s_preset = false,
         s_steps = false, s_lr = false, s_seed = false, s_eval = false, s_data = false;
    const double big = 1e12;
    cg_cli_opt opts[] = {
        {"--preset", CG_CLI_STR, &preset_name, 0, 0, &s_preset},
        {"--d", CG_CLI_I64, &d, 1, 1 << 16, &s_d},
        {"--H", CG_CLI_I64, &H, 1, 1 << 12, &s_H},
        {"--layers", CG_CLI_I64, &layers, 0, 1 << 10, &s_layers},
        {"--d-ff", CG_CLI_I64, &d_ff, 1, 1 << 20, &s_dff},
        {"--block-size", CG_CLI_I64, &T, 1, 1 << 16, &s_T},
        {"--T", CG_CLI_I64, &T, 1, 1 << 16, &s_T},
        {"--norm", CG_CLI_STR, &norm, 0, 0, &s_norm},
        {"--act", CG_CLI_STR, &act, 0, 0, &s_act},
        {"--norm-first", CG_CLI_BOOL, &norm_first, 0, 0, &s_nf},
        {"--dropout", CG_CLI_F64, &dropout, 0, 0.999999, &s_drop},
        {"--data", CG_CLI_STR, &data, 0, 0, &s_data},
        {"--steps", CG_CLI_I64, &steps, 1, big, &s_steps},
        {"--batch-size", CG_CLI_I64, &B, 1, 1 << 20, &s_B},
        {"--lr", CG_CLI_F64, &lr, 1e-12, 10, &s_lr},
        {"--seed", CG_CLI_U64, &seed, 0, 0, &s_seed},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
        {"--out", CG_CLI_STR, &out, 0, 0, NULL},
        {"--resume", CG_CLI_STR, &resume, 0, 0, NULL},
        {"--force", CG_CLI_SWITCH, &force, 0, 0, NULL},
        {"--eval-every", CG_CLI_I64, &eval_every, 1, big, &s_eval},
        {"--stop-at", CG_CLI_I64, &stop_at, 0, big, NULL},
        {"--skip-nonfinite", CG_CLI_SWITCH, &skip_nonfinite, 0, 0, NULL},
    };
    bool help;
    if (!cg_cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), &help))
        return fail("train: %s", cg_last_error());
    if (help) {
        fputs(TRAIN_HELP, stdout);
        return 0;
    }
    if (threads > 0)
        cg_set_num_threads((int)cg_cli_threads(PROG, threads));
    if (!out)
        out = resume ? resume : DEFAULT_OUT;
    /* never overwrite a checkpoint by accident (rank 0 alone writes) */
    if (cg_dist_is_root() && access(out, F_OK) == 0 && !force &&
        !(resume && strcmp(out, resume) == 0))
        return fail("checkpoint %s exists; continue it with --resume %s, or pass --force to "
                    "overwrite it",
                    out, out);

    cg_charlm *model = NULL;
    cg_vocab *vocab = NULL;
    cg_corpus *corpus = NULL;
    cg_optim *opt = NULL;
    cg_history hist = {0};
    cg_param_list pl = {0};
    cg_optim_param *op = NULL;
    int64_t *x = NULL, *y = NULL;
    char *data_copy = NULL;
    int rc = 1;
    int64_t start = 0;
    train_state st = {0};
    cg_charlm_ckpt ck = {0};

    if (resume) {
        if (s_preset || s_d || s_H || s_layers || s_dff || s_T || s_norm || s_act || s_nf ||
            s_drop || s_B || s_lr || s_seed) {
            rc = fail("train: --resume continues a run with its own model and recipe; "
                      "drop the model, --batch-size, --lr and --seed options");
            goto done;
        }
        if (!cg_charlm_ckpt_load(resume, &ck)) {
            rc = fail_lib();
            goto done;
        }
        if (!train_state_parse(cg_charlm_ckpt_train_json(&ck), &st, &hist, &data_copy)) {
            rc = fail("'%s' holds no training state (it cannot be resumed; use it with sample or "
                      "eval)",
                      resume);
            goto done;
        }
        model = ck.model;
        vocab = ck.vocab;
        ck.model = NULL;
        ck.vocab = NULL;
        model->dropout_rng = st.dropout_rng;
        start = ck.step;
        if (s_steps)
            st.steps = steps;
        if (s_eval)
            st.eval_every = eval_every;
        if (!s_data)
            data = data_copy;
        st.data = data;
        T = model->cfg.max_len;
        if (start >= st.steps) {
            rc = fail("train: '%s' is already at step %lld of %lld; pass a larger --steps", resume,
                      (long long)start, (long long)st.steps);
            goto done;
        }
    } else {
        preset p;
        if (strcmp(preset_name, "tiny") == 0)
            p = PRESET_TINY;
        else if (strcmp(preset_name, "base") == 0)
            p = PRESET_BASE;
        else {
            rc = fail("train: --preset: unknown preset '%s' (choices: tiny, base)", preset_name);
            goto done;
        }
        cg_charlm_config cfg = cg_charlm_config_default();
        cfg.d = s_d ? d : p.d;
        cfg.H = s_H ? H : p.H;
        cfg.layers = s_layers ? layers : p.layers;
        cfg.d_ff = s_dff ? d_ff : p.d_ff;
        cfg.max_len = T = s_T ? T : p.T;
        B = s_B ? B : p.B;
        cfg.norm_first = norm_first;
        cfg.dropout = (float)dropout;
        cfg.norm = CG_NORM_LAYERNORM;
        cfg.act = CG_ACT_GELU;
        if (norm && !cg_norm_kind_parse(norm, &cfg.norm)) {
            rc = fail("train: --norm: %s", cg_last_error());
            goto done;
        }
        if (act && !cg_act_parse(act, &cfg.act)) {
            rc = fail("train: --act: %s", cg_last_error());
            goto done;
        }
        if (!data)
            data = DEFAULT_DATA;
        int64_t n;
        uint32_t *cps = read_corpus(data, &n);
        if (!cps) {
            rc = fail_lib();
            goto done;
        }
        vocab = cg_vocab_from_codepoints(cps, n);
        free(cps);
        if (!vocab) {
            rc = fail_lib();
            goto done;
        }
        cfg.vocab = vocab->n;
        if (!cg_charlm_config_check(&cfg)) {
            rc = fail("train: %s", cg_last_error());
            goto done;
        }
        model = cg_charlm_new(&cfg, seed);
        if (!model) {
            rc = fail_lib();
            goto done;
        }
        /* the checkpoint remembers the corpus by its absolute path, so that
         * eval and --resume find it from any directory */
        data_copy = realpath(data, NULL);
        if (data_copy)
            data = data_copy;
        st = (train_state){.steps = steps, .B = B, .eval_every = eval_every, .seed = seed,
                           .lr = lr, .batch_rng = cg_rng_new(seed ^ BATCH_SEED_MIX),
                           .dropout_rng = model->dropout_rng, .data = data};
    }
    B = st.B;

    /* corpus */
    {
        int64_t n;
        uint32_t *cps = read_corpus(data, &n);
        if (!cps) {
            rc = fail_lib();
            goto done;
        }
        corpus = cg_corpus_new(vocab, cps, n);
        free(cps);
        if (!corpus) {
            rc = fail_lib();
            goto done;
        }
        if (corpus->unknown > 0) {
            rc = fail("'%s' has %lld characters outside the checkpoint's vocabulary (first U+%04X)",
                      data, (long long)corpus->unknown, (unsigned)corpus->first_unknown);
            goto done;
        }
        cg_split_view tr = cg_corpus_train(corpus), va = cg_corpus_val(corpus);
        if (tr.n <= T || va.n <= T) {
            rc = fail("'%s' is too short: %lld characters give train/val splits of %lld/%lld, "
                      "but windows of %lld+1 are needed (use a longer text or a smaller "
                      "--block-size)",
                      data, (long long)corpus->n, (long long)tr.n, (long long)va.n, (long long)T);
            goto done;
        }
    }
    if (!cg_ensure_parent_dir(out)) {
        rc = fail_lib();
        goto done;
    }

    /* optimizer: AdamW, weight decay on 2-D parameters only */
    if (!cg_module_params(CG_MODULE(model), &pl)) {
        rc = fail_lib();
        goto done;
    }
    op = calloc((size_t)pl.n + 1, sizeof *op);
    for (int i = 0; op && i < pl.n; i++)
        op[i] = (cg_optim_param){pl.items[i].name, pl.items[i].tensor,
                                 pl.items[i].tensor->ndim >= 2 ? WEIGHT_DECAY : 0.0};
    cg_optim_config oc = cg_adamw_config(st.lr, 0.9, 0.99, 1e-8);
    opt = op ? cg_optim_new(&oc, pl.n, op) : NULL;
    if (!opt) {
        rc = fail_lib();
        goto done;
    }
    if (resume && !cg_optim_load(opt, ck.file, "optim")) {
        rc = fail("'%s': %s", resume, cg_last_error());
        goto done;
    }
    cg_st_close(ck.file);
    ck.file = NULL;

    x = malloc((size_t)(B * T) * sizeof *x);
    y = malloc((size_t)(B * T) * sizeof *y);
    if (!x || !y) {
        rc = fail("out of memory for batches of %lld x %lld", (long long)B, (long long)T);
        goto done;
    }

    fprintf(stderr,
            PROG ": %lld chars, vocab %lld, train %lld, val %lld, params %lld; %s d=%lld H=%lld "
                 "layers=%lld d_ff=%lld T=%lld B=%lld, %lld steps\n",
            (long long)corpus->n, (long long)vocab->n, (long long)cg_corpus_train(corpus).n,
            (long long)cg_corpus_val(corpus).n,
            (long long)cg_module_num_params(CG_MODULE(model)), resume ? "resumed" : preset_name,
            (long long)model->cfg.d, (long long)model->cfg.H, (long long)model->cfg.layers,
            (long long)model->cfg.d_ff, (long long)T, (long long)B, (long long)st.steps);
    if (resume)
        fprintf(stderr, PROG ": resuming '%s' at step %lld\n", resume, (long long)start);

    /* Data parallel (models/dist.h): every rank starts from rank 0's parameters,
     * draws the same global batches and trains on rows [r0, r1) of each; its
     * dropout stream is seeded per rank (rank 0 keeps the checkpoint's). */
    int nranks = cg_dist_size();
    int64_t r0 = B * cg_dist_rank() / nranks, r1 = B * (cg_dist_rank() + 1) / nranks;
    if (B < nranks) {
        rc = fail("train: --batch-size %lld is smaller than the %d ranks", (long long)B, nranks);
        goto done;
    }
    if (!cg_dist_broadcast_module(CG_MODULE(model))) {
        rc = fail_lib();
        goto done;
    }
    model->dropout_rng.seed = cg_dist_rank_seed(model->dropout_rng.seed);
    cg_train_catch_signals();
    cg_split_view tr = cg_corpus_train(corpus), va = cg_corpus_val(corpus);
    double elapsed = 0, last_loss = NAN, last_print = 0, tl = NAN, vl = NAN;
    int64_t step = start, done_steps = 0;
    bool tty = cg_progress_is_tty(), interrupted = false;
    int64_t log_every = st.steps / 20 > 0 ? st.steps / 20 : 1;
    if (log_every > 100)
        log_every = 100;

    for (;; step++) {
        if (step % st.eval_every == 0 || step == st.steps) {
            if (!(hist.n > 0 && hist.step[hist.n - 1] == (float)step)) {
                cg_module_train(CG_MODULE(model), false);
                cg_no_grad_begin();
                bool ok = sampled_loss(model, tr, B, T, x, y, &tl) &&
                          sampled_loss(model, va, B, T, x, y, &vl);
                cg_no_grad_end();
                cg_module_train(CG_MODULE(model), true);
                if (!ok) {
                    rc = fail_lib();
                    goto done;
                }
                cg_progress_end();
                fprintf(stderr, PROG ": step %lld: train loss %.4f, val loss %.4f\n",
                        (long long)step, tl, vl);
                cg_history_push(&hist, step, tl, vl);
            }
            if (step > start && step < st.steps) {
                st.dropout_rng = model->dropout_rng;
                if (!save_all(out, model, vocab, opt, step, &st, &hist)) {
                    rc = fail("could not save checkpoint at step %lld: %s", (long long)step,
                              cg_last_error());
                    goto done;
                }
            }
        }
        if (step >= st.steps)
            break;
        double stop_flag = cg_train_interrupted(); /* every rank stops at the same step */
        cg_dist_allreduce_max(&stop_flag, 1);
        if (stop_flag > 0 || (stop_at >= 0 && step >= stop_at)) {
            interrupted = true;
            break;
        }
        double t0 = cg_now();
        cg_optim_set_lr(opt, cg_lr_warmup_cosine(step, st.steps, WARMUP, st.lr, st.lr / 10));
        if (!cg_get_batch(tr, B, T, &st.batch_rng, x, y)) {
            rc = fail_lib();
            goto done;
        }
        cg_tensor *logits = cg_charlm_forward(model, x + r0 * T, r1 - r0, T);
        cg_tensor *loss = cg_charlm_loss(model, logits, y + r0 * T);
        cg_release(logits);
        if (!loss) {
            rc = fail("step %lld: %s", (long long)step, cg_last_error());
            goto done;
        }
        last_loss = cg_item(loss);
        cg_optim_zero_grad(opt);
        bool ok = cg_backward(loss, NULL, false);
        cg_release(loss);
        if (!isfinite(last_loss) && !skip_nonfinite) {
            char culprit[400] = "";
            int bad = -1;
            if (ok && !cg_optim_grads_finite(opt, &bad))
                snprintf(culprit, sizeof culprit, " (%s)", cg_last_error());
            rc = fail("loss is %s at step %lld%s; stopping (the last checkpoint is kept)",
                      isnan(last_loss) ? "nan" : "inf", (long long)step, culprit);
            goto done;
        }
        if (!ok) {
            rc = fail("step %lld: backward: %s", (long long)step, cg_last_error());
            goto done;
        }
        double lsum = last_loss * (double)(r1 - r0); /* loss and gradients of the batch */
        if (!cg_dist_allreduce_sum(&lsum, 1) ||
            !cg_dist_average_grads(CG_MODULE(model), (double)(r1 - r0))) {
            rc = fail("step %lld: %s", (long long)step, cg_last_error());
            goto done;
        }
        last_loss = lsum / (double)B;
        double norm_total = cg_optim_clip_grad_norm(opt, CLIP_NORM);
        if (norm_total < 0) {
            rc = fail("step %lld: %s", (long long)step, cg_last_error());
            goto done;
        }
        if (skip_nonfinite && (!isfinite(last_loss) || !isfinite(norm_total))) {
            int bad = -1;
            if (cg_optim_grads_finite(opt, &bad))
                cg_set_error("gradient norm is not finite");
            cg_progress_end();
            fprintf(stderr, PROG ": warning: skipping step %lld: loss %g, %s\n", (long long)step,
                    last_loss, cg_last_error());
            cg_optim_zero_grad(opt);
            skipped++;
            continue;
        }
        if (!isfinite(norm_total)) {
            int bad = -1;
            if (cg_optim_grads_finite(opt, &bad))
                cg_set_error("gradient norm is not finite");
            rc = fail("step %lld: %s; stopping (the last checkpoint is kept)", (long long)step,
                      cg_last_error());
            goto done;
        }
        if (!cg_optim_step(opt)) {
            rc = fail("step %lld: optimizer: %s", (long long)step, cg_last_error());
            goto done;
        }
        if (!cg_history_train_step(&hist, step + 1, last_loss)) {
            rc = fail_lib();
            goto done;
        }
        elapsed += cg_now() - t0;
        done_steps++;
        double tps = (double)(done_steps * B * T) / (elapsed > 0 ? elapsed : 1e-9);
        double eta = (double)(st.steps - step - 1) * elapsed / (double)done_steps;
        bool show = tty ? (cg_now() - last_print > 0.25 || step + 1 == st.steps)
                        : ((step + 1) % log_every == 0);
        if (show) {
            cg_progress(PROG, step + 1, st.steps, last_loss, cg_optim_lr(opt), tps, eta);
            last_print = cg_now();
        }
    }
    cg_progress_end();

    if (skipped > 0)
        fprintf(stderr, PROG ": %lld step(s) skipped (non-finite loss or gradient)\n",
                (long long)skipped);
    double tps = done_steps > 0 && elapsed > 0 ? (double)(done_steps * B * T) / elapsed : 0;
    if (nranks > 1)
        fprintf(stderr, PROG ": %d ranks: %.1f s of %.1f s of training in communication (%.0f%%)\n",
                nranks, cg_dist_comm_seconds(), elapsed,
                elapsed > 0 ? 100 * cg_dist_comm_seconds() / elapsed : 0.0);
    st.dropout_rng = model->dropout_rng;
    if (interrupted) {
        if (!save_all(out, model, vocab, opt, step, &st, &hist)) {
            rc = fail("could not save checkpoint at step %lld: %s", (long long)step,
                      cg_last_error());
            goto done;
        }
        fprintf(stderr, PROG ": stopped at step %lld; checkpoint saved to '%s' (continue with "
                        "--resume %s)\n",
                (long long)step, out, out);
        printf("{\"step\": %lld, \"interrupted\": true, \"train_loss\": %s, "
               "\"tokens_per_s\": %s, \"elapsed_s\": %s, \"checkpoint\": %s}\n",
               (long long)step, CG_JSON_NUM("%.4f", isfinite(last_loss) ? last_loss : tl),
               CG_JSON_NUM("%.0f", tps), CG_JSON_NUM("%.1f", elapsed), CG_JSON_STR(out));
        rc = 0;
        goto done;
    }

    double val_loss;
    int64_t nwin;
    if (!full_split_loss(model, va, T, &val_loss, &nwin)) {
        rc = fail_lib();
        goto done;
    }
    fprintf(stderr, PROG ": full validation split: %lld windows of %lld, loss %.4f\n",
            (long long)nwin, (long long)T, val_loss);
    if (!save_all(out, model, vocab, opt, step, &st, &hist)) {
        rc = fail("could not save the final checkpoint: %s", cg_last_error());
        goto done;
    }
    fprintf(stderr, PROG ": checkpoint saved to '%s'\n", out);
    printf("{\"step\": %lld, \"train_loss\": %s, \"val_loss\": %s, \"val_loss_sampled\": "
           "%s, \"tokens_per_s\": %s, \"elapsed_s\": %s, \"params\": %lld}\n",
           (long long)step, CG_JSON_NUM("%.4f", tl), CG_JSON_NUM("%.4f", val_loss),
           CG_JSON_NUM("%.4f", vl), CG_JSON_NUM("%.0f", tps), CG_JSON_NUM("%.1f", elapsed),
           (long long)cg_module_num_params(CG_MODULE(model)));
    rc = 0;
done:
    fflush(stdout);
    cg_charlm_ckpt_free(&ck);
    cg_optim_free(opt);
    free(op);
    cg_param_list_free(&pl);
    cg_charlm_free(model);
    cg_vocab_free(vocab);
    cg_corpus_free(corpus);
    cg_history_free(&hist);
    free(x);
    free(y);
    free(data_copy);
    return rc;
}

/* ----------------------------------------------------------------- sample */
static const char *SAMPLE_HELP =
    "usage: charlm sample [options]\n"
    "Generate text from a trained checkpoint (key/value-cached decoding).\n"
    "  --ckpt FILE         checkpoint (default " DEFAULT_OUT ")\n"
    "  --prompt TEXT       start of the text (default a newline); characters not in\n"
    "                      the vocabulary are replaced, with a warning\n"
    "  --length N          characters to generate (default 500)\n"
    "  --temperature X     softmax temperature (default 1; 0 = greedy)\n"
    "  --top-k K           keep the K most likely characters (default 0 = all)\n"
    "  --top-p P           nucleus sampling mass in (0, 1] (default 1 = off)\n"
    "  --seed N            sampling seed (default 1)\n"
    "  --no-cache          recompute the whole context at every step\n"
    "  --attention FILE    also draw the attention of every layer and head over the\n"
    "                      last (up to 32) characters as a PNG heatmap grid\n"
    "  --threads N         threads for kernels\n"
    "Prints the prompt followed by the generated text.\n";

static void describe_char(uint32_t c, char *buf, size_t n)
{
    if (c >= 0x20 && c != 0x7f) {
        char u[5] = {0};
        cg_utf8_put(c, u);
        snprintf(buf, n, "'%s' (U+%04X)", u, (unsigned)c);
    } else {
        snprintf(buf, n, "U+%04X", (unsigned)c);
    }
}

/* Attention heatmaps (layer x head) of a full forward over ids[0..n). */
static bool write_attention_png(cg_charlm *m, const cg_vocab *v, const int64_t *ids, int64_t n,
                                const char *path)
{
    int64_t L = m->cfg.layers, H = m->cfg.H;
    if (L < 1) {
        cg_set_error("the model has no attention layers to draw");
        return false;
    }
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *logits = cg_charlm_forward(m, ids, 1, n);
    cg_no_grad_end();
    bool ok = logits != NULL;
    cg_release(logits);
    float *vals = ok ? malloc((size_t)(L * H * n * n) * sizeof *vals) : NULL;
    uint32_t *chars = ok ? malloc((size_t)n * sizeof *chars) : NULL;
    cg_heatmap_panel *panels = ok ? calloc((size_t)(L * H), sizeof *panels) : NULL;
    char (*titles)[64] = ok ? calloc((size_t)(L * H), sizeof *titles) : NULL;
    ok = ok && vals && chars && panels && titles;
    for (int64_t i = 0; ok && i < n; i++)
        chars[i] = v->chars[ids[i]];
    for (int64_t l = 0; ok && l < L; l++) {
        cg_tensor *w = m->block[l]->attn->weights; /* [1,H,n,n] */
        ok = w && cg_numel(w) == H * n * n && cg_copy_to(w, vals + l * H * n * n);
        for (int64_t h = 0; ok && h < H; h++) {
            cg_heatmap_panel *p = &panels[l * H + h];
            snprintf(titles[l * H + h], sizeof titles[0], "layer %lld head %lld", (long long)l,
                     (long long)h);
            *p = (cg_heatmap_panel){.title = titles[l * H + h], .rows = (int)n, .cols = (int)n,
                                    .values = vals + (l * H + h) * n * n, .row_chars = chars,
                                    .col_chars = chars};
        }
    }
    if (!ok && !cg_has_error())
        cg_set_error("could not collect the attention weights");
    ok = ok && cg_plot_heatmaps(path, "charlm attention (rows: queries, columns: keys)", (int)L,
                                (int)H, panels, 0.0f, 1.0f);
    cg_module_keep_attention_weights(CG_MODULE(m), false);
    free(vals);
    free(chars);
    free(panels);
    free(titles);
    return ok;
}

static int cmd_sample(int argc, char **argv)
{
    const char *ckpt = DEFAULT_OUT, *prompt = "\n", *attn_png = NULL;
    int64_t length = 500, top_k = 0, threads = 0;
    double temperature = 1.0, top_p = 1.0;
    uint64_t seed = 1;
    bool no_cache = false;
    cg_cli_opt opts[] = {
        {"--ckpt", CG_CLI_STR, &ckpt, 0, 0, NULL},
        {"--prompt", CG_CLI_STR, &prompt, 0, 0, NULL},
        {"--length", CG_CLI_I64, &length, 0, 10000000, NULL},
        {"--temperature", CG_CLI_F64, &temperature, 0, 1e6, NULL},
        {"--top-k", CG_CLI_I64, &top_k, 0, 1 << 30, NULL},
        {"--top-p", CG_CLI_F64, &top_p, 1e-9, 1, NULL},
        {"--seed", CG_CLI_U64, &seed, 0, 0, NULL},
        {"--no-cache", CG_CLI_SWITCH, &no_cache, 0, 0, NULL},
        {"--attention", CG_CLI_STR, &attn_png, 0, 0, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
    };
    bool help;
    if (!cg_cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), &help))
        return fail("sample: %s", cg_last_error());
    if (help) {
        fputs(SAMPLE_HELP, stdout);
        return 0;
    }
    if (threads > 0)
        cg_set_num_threads((int)cg_cli_threads(PROG, threads));
    cg_charlm_ckpt ck;
    if (!cg_charlm_ckpt_load(ckpt, &ck))
        return fail_lib();
    int rc = 1;
    int64_t n = 0, *ids = NULL, *outp = NULL;
    char *text = NULL;
    uint32_t *cps = cg_utf8_decode(prompt, strlen(prompt), "--prompt", &n);
    if (!cps) {
        rc = fail_lib();
        goto done;
    }
    ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) {
        rc = fail("out of memory");
        goto done;
    }
    uint32_t first = 0;
    int64_t unknown = cg_vocab_encode(ck.vocab, cps, n, ids, &first);
    if (unknown > 0) {
        char a[48], b[48];
        describe_char(first, a, sizeof a);
        describe_char(ck.vocab->chars[ck.vocab->unk], b, sizeof b);
        warn("%lld prompt character(s) are not in the vocabulary (first %s); they are read as %s",
             (long long)unknown, a, b);
    }
    cg_sample_opts so = {.temperature = temperature, .top_k = top_k, .top_p = top_p};
    cg_rng rng = cg_rng_new(seed);
    double t_gen = cg_now();
    /* print the prompt as given, then each character as it is generated */
    fputs(prompt, stdout);
    fflush(stdout);
    cg_token_printer tp = {ck.vocab, stdout};
    outp = cg_charlm_generate(ck.model, ids, n, length, &so, &rng, !no_cache, cg_print_token, &tp);
    if (!outp) {
        rc = fail_lib();
        goto done;
    }
    t_gen = cg_now() - t_gen;
    fprintf(stderr, PROG ": %lld characters in %.2f s (%.1f characters/s, %s)\n",
            (long long)length, t_gen, t_gen > 0 ? (double)length / t_gen : 0.0,
            no_cache ? "full recompute" : "key/value cache");
    fputc('\n', stdout);
    if (attn_png) {
        int64_t total = n + length, w = total < 32 ? total : 32;
        if (w > ck.model->cfg.max_len)
            w = ck.model->cfg.max_len;
        if (!write_attention_png(ck.model, ck.vocab, outp + total - w, w, attn_png)) {
            rc = fail("--attention: %s", cg_last_error());
            goto done;
        }
        fprintf(stderr, PROG ": attention heatmaps written to '%s'\n", attn_png);
    }
    rc = 0;
done:
    fflush(stdout);
    free(cps);
    free(ids);
    free(outp);
    free(text);
    cg_charlm_ckpt_free(&ck);
    return rc;
}

/* ------------------------------------------------------------------- eval */
static const char *EVAL_HELP =
    "usage: charlm eval [options]\n"
    "Loss, perplexity and bits per character of a checkpoint on the validation\n"
    "split (last 10%) of a text, over consecutive windows of the model's context.\n"
    "  --ckpt FILE     checkpoint (default " DEFAULT_OUT ")\n"
    "  --data FILE     text (default: the one the checkpoint was trained on, else\n"
    "                  " DEFAULT_DATA ")\n"
    "  --threads N     threads for kernels\n"
    "Prints one JSON line.\n";

static int cmd_eval(int argc, char **argv)
{
    const char *ckpt = DEFAULT_OUT, *data = NULL;
    int64_t threads = 0;
    cg_cli_opt opts[] = {
        {"--ckpt", CG_CLI_STR, &ckpt, 0, 0, NULL},
        {"--data", CG_CLI_STR, &data, 0, 0, NULL},
        {"--threads", CG_CLI_I64, &threads, 1, 1024, NULL},
    };
    bool help;
    if (!cg_cli_parse(argc, argv, opts, (int)(sizeof opts / sizeof *opts), &help))
        return fail("eval: %s", cg_last_error());
    if (help) {
        fputs(EVAL_HELP, stdout);
        return 0;
    }
    if (threads > 0)
        cg_set_num_threads((int)cg_cli_threads(PROG, threads));
    cg_charlm_ckpt ck;
    if (!cg_charlm_ckpt_load(ckpt, &ck))
        return fail_lib();
    int rc = 1;
    char *data_copy = NULL;
    cg_corpus *corpus = NULL;
    if (!data) {
        cJSON *o = cJSON_Parse(cg_charlm_ckpt_train_json(&ck) ? cg_charlm_ckpt_train_json(&ck)
                                                               : "{}");
        const cJSON *dj = cJSON_GetObjectItemCaseSensitive(o, "data");
        if (cJSON_IsString(dj))
            data_copy = strdup(dj->valuestring);
        cJSON_Delete(o);
        data = data_copy ? data_copy : DEFAULT_DATA;
    }
    int64_t n;
    uint32_t *cps = read_corpus(data, &n);
    if (!cps) {
        rc = fail_lib();
        goto done;
    }
    corpus = cg_corpus_new(ck.vocab, cps, n);
    free(cps);
    if (!corpus) {
        rc = fail_lib();
        goto done;
    }
    if (corpus->unknown > 0) {
        char a[48];
        describe_char(corpus->first_unknown, a, sizeof a);
        warn("'%s' has %lld character(s) outside the vocabulary (first %s); they are read as "
             "the substitute character",
             data, (long long)corpus->unknown, a);
    }
    double loss;
    int64_t nwin, T = ck.model->cfg.max_len;
    if (!full_split_loss(ck.model, cg_corpus_val(corpus), T, &loss, &nwin)) {
        rc = fail("'%s': %s", data, cg_last_error());
        goto done;
    }
    printf("{\"val_loss\": %s, \"perplexity\": %s, \"bits_per_char\": %s, \"windows\": "
           "%lld, \"T\": %lld, \"step\": %lld}\n",
           CG_JSON_NUM("%.4f", loss), CG_JSON_NUM("%.4f", exp(loss)),
           CG_JSON_NUM("%.4f", loss / log(2.0)), (long long)nwin, (long long)T, (long long)ck.step);
    rc = 0;
done:
    fflush(stdout);
    free(data_copy);
    cg_corpus_free(corpus);
    cg_charlm_ckpt_free(&ck);
    return rc;
}

/* ------------------------------------------------------------------- main */
static const char *MAIN_HELP =
    "usage: charlm COMMAND [options]\n"
    "The zoo's decoder-only character language model.\n"
    "  train    train a model on a text (default " DEFAULT_DATA ")\n"
    "  sample   generate text from a checkpoint\n"
    "  eval     validation loss, perplexity and bits per character\n"
    "Run 'charlm COMMAND --help' for a command's options.\n";

static int run(int argc, char **argv);

int main(int argc, char **argv)
{
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot())
        return fail("%s", cg_last_error());
    int rc = run(argc, argv);
    if (rc != 0 && cg_dist_size() > 1) /* do not leave the other ranks waiting */
        cg_dist_abort(rc, "stopping every rank");
    cg_dist_finalize();
    return rc;
}

static int run(int argc, char **argv)
{
    if (argc < 2)
        return fail("no command given (usage: charlm train|sample|eval [options]; try --help)");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(MAIN_HELP, stdout);
        return 0;
    }
    if (!strcmp(cmd, "train"))
        return cmd_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "sample"))
        return cmd_sample(argc - 2, argv + 2);
    if (!strcmp(cmd, "eval"))
        return cmd_eval(argc - 2, argv + 2);
    return fail("unknown command '%s' (choices: train, sample, eval; try --help)", cmd);
}
