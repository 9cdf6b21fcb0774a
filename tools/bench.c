/* bench: training throughput of the zoo models, the peer of
 * shared/bench/torch_peer.py (same presets, same step, same JSON fields).
 *
 *   build/tools/bench --model charlm|seq2seq --preset tiny|base|gpt2|paper|real --threads N
 *                      --steps S --warmup W [--seed K] [--T len] [--batch-size B]
 *                      [--precision fp32|bf16] [--recompute] [--zero 0|1] [--arch gpt|llama]
 *
 * --arch llama (charlm): LLaMA's block (RMSNorm, rotary positions, SwiGLU of 2/3 the
 * width, no biases), the peer of tools/llama_peer.py.
 *
 * A step is zero_grad + forward + loss + backward + AdamW step (lr 1e-3,
 * betas 0.9/0.98, eps 1e-9, weight decay 0.01, as the peer; no clipping),
 * taken by the trainer's own step (models/train/stepper.h cg_stepper), on random
 * full-length sequences (dropout 0; S = T for seq2seq). W untimed steps, then
 * S timed ones; prints one JSON line:
 *   model, preset, precision, threads, tokens_per_step (B*T; target tokens for seq2seq),
 *   step_ms_median, tokens_per_s (tokens_per_step / median), params, B and T
 *   (the means over the timed steps; seq2seq: S too, the sources' length),
 *   peak_rss_mb (getrusage ru_maxrss at the end of the timed steps, MiB:
 *   the step's and the process's start, as the peer's; the GEMM rate below
 *   is measured after it), rss_mb_start (the resident set before the model:
 *   the program and its libraries; the peer's start, python3 with torch,
 *   is about 230 MiB), mfu, plus flops_per_step,
 *   gemm_gflops, cpu_ms_median (process CPU time per step: a load-robust
 *   measure on a shared machine), final_loss (thread counts must agree), and
 *   rss_mb_step10 / rss_mb_last: the resident set after the 10th step and
 *   after the last (flat memory: the two agree). Under mpirun: ranks,
 *   overlap, comm_exposed_ms_median, and with --zero 1 (ZeRO-1, the
 *   trainers' flag) zero, optim_state_mb (the optimizer state this rank
 *   holds, largest over ranks) and peak_rss_mb_max_rank. timed_from_s and
 *   timed_to_s: CLOCK_MONOTONIC seconds at the start of the first timed
 *   step and the end of the last (a profiler's window: `perf record -k
 *   CLOCK_MONOTONIC` stamps its samples on that clock; scripts/step_profile.sh).
 *
 * MFU = model FLOPs per second / the sgemm rate measured after the timed
 * steps (1024^3, same thread count and precision, the best run of a
 * quarter of a second). Model FLOPs per step follow the
 * PaLM convention (Chowdhery et al. 2022, appendix B):
 *   6 * N_mm * tokens                         every weight matmul, fwd + bwd
 *   + 12 * n_attn * T_k * d * tokens          q k^T and w v, fwd + bwd
 * where N_mm = the elements of every 2-D weight except the embedding table,
 * plus V*d for the tied output head (a real matmul), and n_attn = the number
 * of attention blocks a token passes through (charlm: layers; seq2seq:
 * enc_layers + 2*dec_layers). For seq2seq the tokens are a weight's own
 * side's: the encoder's weights and cross-attention's k and v projections
 * take the B*S source tokens, the rest the B*T target tokens; T_k is S in
 * the encoder and cross-attention, T in the decoder's self-attention (the
 * random presets have S = T; --preset real's batches do not).
 * Causal attention is counted in full (not halved), as in PaLM; layer norm,
 * softmax, activations and the optimizer are not counted. --T overrides the
 * sequence length, --batch-size the batch and --d the width (d_ff = 4d,
 * heads of 32) for scaling curves. libgomp's default wait policy (spin briefly, then sleep) is kept, as
 * in the trainers: on an idle machine it is 15% faster at 2 threads than
 * OMP_WAIT_POLICY=passive, which wakes a sleeping thread for every region.
 * On a machine shared with other work, passive can be much faster.
 *
 * --preset real (seq2seq only) times the translator's default recipe instead
 * of random batches: the pairs of --data split as `seq2seq train` splits
 * them, its BPE tokenizer of 4000 ids, its length-sorted batches of at most
 * 3000 padded tokens in the seed's epoch order (every step a new shape),
 * dropout 0.3, label smoothing 0.1, the tiny shape with the tokenizer's
 * vocabulary. tokens_per_step is then the mean of the steps' target tokens
 * (non-pad: the tokens the loss is taken over, the trainers' meaning),
 * tokens_per_s all of them over all the steps' time, and MFU counts each
 * batch's padded B x S sources and B x T targets (S: the mean source
 * length, printed beside B and T). --dump-batches FILE writes the batches taken
 * (src.N, tgt_in.N, tgt_out.N, int64) and the model's shape for
 * tools/real_peer.py, PyTorch's step on the same batches, after the result
 * line; FILE is checked before any work: a new file (bench has no --force),
 * in a writable directory, not --data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/parse.h"
#include "models/charlm/charlm.h"
#include "models/charlm/charlm_presets.h"
#include "models/util/cli.h"
#include "models/util/config_json.h"
#include "models/seq2seq/seq2seq.h"
#include "models/seq2seq/seq2seq_presets.h"
#include "models/seq2seq/translate.h"
#include "nn/safetensors.h"
#include "dist/dist.h"
#include "models/train/options.h"
#include "models/train/outfile.h"
#include "models/train/prog.h"
#include "models/train/train_common.h"
#include "models/train/trainer.h"
#include "optim/optim.h"

/* --preset real: the translator's default recipe (seq2seq_main.c's
 * defaults: BPE 4000, --max-tokens 3000, --max-len 256, validation 500,
 * test 1000, dropout 0.3). */
#define REAL_DATA "data/en_de_ding.tsv"
enum { REAL_VOCAB = 4000, REAL_MAX_TOKENS = 3000, REAL_MAX_LEN = 256 };
#define REAL_DROPOUT 0.3

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --help: the usage on stdout, exit 0; an error: one line on stderr
 * (models/train/prog.h), exit 2 */
static int usage(const char *msg)
{
    if (msg) {
        /* the flag parser's messages may already say it */
        cg_prog_fail("%s%s", msg, strstr(msg, "(try --help)") ? "" : " (try --help)");
        return CG_EXIT_USAGE;
    }
    fprintf(stdout,
            "usage: bench [--model charlm|seq2seq] [--preset tiny|base|gpt2|paper|real]\n"
            "             [--threads N>=1]\n"
            "             [--steps S>=1] [--warmup W>=0] [--seed K] [--T len] [--d width]\n"
            "             [--batch-size B] [--precision fp32|bf16] [--recompute]\n"
            "             [--zero 0|1] [--data FILE] [--dump-batches FILE] [--vocab-size N]\n"
            "             [--arch gpt|llama]\n"
            "Times S training steps (zero grad, forward, loss, backward, AdamW) after W\n"
            "untimed ones on random data; prints one JSON line (see torch_peer.py).\n"
            "--preset real (seq2seq): the translator's default recipe instead: BPE of\n"
            "--vocab-size ids (default 4000) trained on the training split of --data\n"
            "(default %s), length-sorted batches of at most 3000 padded\n"
            "tokens in the seed's order, dropout 0.3, label smoothing 0.1, the tiny\n"
            "shape; --dump-batches FILE writes the batches it took for\n"
            "tools/real_peer.py (PyTorch's step on the same batches): a new file, never\n"
            "--data (an existing one is refused before the run). --data, --vocab-size and\n"
            "--dump-batches need --preset real.\n"
            "tokens_per_s counts target tokens (those the loss is taken over; no padding)\n"
            "per second of steps: with --preset real, all of them over all the time.\n"
            "--arch llama (charlm): LLaMA's block instead of GPT-2's: RMSNorm, rotary\n"
            "positions, a SwiGLU feed-forward of 2/3 the preset's d_ff (to 64; the same\n"
            "parameters), no biases (tools/llama_peer.py is PyTorch's).\n",
            REAL_DATA);
    return 0;
}

/* Resident set size now, in MiB (/proc/self/statm), or NAN. */
static double rss_now_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages_total = 0, pages_res = 0;
    bool ok = f && fscanf(f, "%ld %ld", &pages_total, &pages_res) == 2;
    if (f)
        fclose(f);
    long psz = sysconf(_SC_PAGESIZE);
    return ok && psz > 0 ? (double)pages_res * (double)psz / (1024.0 * 1024.0) : NAN;
}

/* GEMM rate (GFLOP/s) of a 1024^3 product on the active path and precision,
 * the best of the runs in a quarter of a second (at least 5, after one to
 * warm up): on a shared host the best of 5 (25 ms) could all land in a
 * neighbour's burst, and MFU came out above 1 (Zen 4, 2026-11-30). */
static double gemm_gflops(void)
{
    const int64_t n = 1024;
    float *a = cg_alloc((size_t)(n * n) * sizeof(float));
    float *b = cg_alloc((size_t)(n * n) * sizeof(float));
    float *c = cg_alloc((size_t)(n * n) * sizeof(float));
    if (!a || !b || !c) {
        cg_free(a), cg_free(b), cg_free(c);
        return NAN;
    }
    for (int64_t i = 0; i < n * n; i++) {
        a[i] = (float)((i * 7) % 13) * 0.01f;
        b[i] = (float)((i * 5) % 11) * 0.01f;
    }
    double best = 1e30;
    const double start = cg_now();
    for (int r = 0; r < 6 || (cg_now() - start < 0.25 && r < 200); r++) {
        double t0 = cg_now();
        cg_sgemm(n, n, n, 1.0f, a, n, 1, b, n, 1, 0.0f, c, n, 1);
        double dt = cg_now() - t0;
        if (r > 0 && dt < best) /* the first run warms up */
            best = dt;
    }
    cg_free(a), cg_free(b), cg_free(c);
    return 2.0 * (double)n * n * n / best * 1e-9;
}

typedef struct {
    int64_t B, T, V, d, d_ff, H, layers, enc_layers, dec_layers;
} preset;

/* The model's preset (models/charlm/charlm_presets.h, seq2seq_presets.h)
 * with the peer's vocabulary: 65 characters (charlm tiny and base), 96 ids
 * (seq2seq tiny and base), GPT-2's 50,257 (charlm gpt2) and the paper's
 * 37,000 (seq2seq paper). */
static bool get_preset(bool charlm, const char *name, preset *p)
{
    memset(p, 0, sizeof *p);
    const cg_train_preset *t =
        charlm ? cg_train_preset_find(cg_charlm_presets, CG_CHARLM_N_PRESETS, name)
               : cg_train_preset_find(cg_seq2seq_presets, CG_SEQ2SEQ_N_PRESETS, name);
    if (!t)
        return false;
    *p = (preset){.B = t->B,
                  .T = t->T,
                  .V = t->V,
                  .d = t->d,
                  .d_ff = t->d_ff,
                  .H = t->H,
                  .layers = t->layers,
                  .enc_layers = t->enc_layers,
                  .dec_layers = t->dec_layers};
    return true;
}

/* The bench's model for the trainer's step: the random batch set before
 * each step. */
typedef struct {
    cg_charlm *lm;
    cg_seq2seq *s2s;
    int64_t B, S, T, *src, *tin, *tout;
    cg_mt_data *real;   /* --preset real: the batches of the recipe */
    cg_st_writer *dump; /* --dump-batches: every batch taken */
    int64_t taken;
} bench_model;

/* The batch's target ids as the loss sees them. */
static int64_t target_tokens(const int64_t *tout, int64_t n)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += tout[i] != CG_PAD;
    return c;
}

/* One batch into the dump: src.N [B, S], tgt_in.N and tgt_out.N [B, T]. */
static bool dump_batch(bench_model *b)
{
    const int64_t *arr[3] = {b->src, b->tin, b->tout};
    const char *names[3] = {"src", "tgt_in", "tgt_out"};
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) {
        char name[32];
        snprintf(name, sizeof name, "%s.%06lld", names[i], (long long)b->taken);
        cg_tensor *t = cg_from_i64(2, (int64_t[]){b->B, i ? b->T : b->S}, arr[i]);
        ok = t && cg_st_add(b->dump, name, t);
        cg_release(t);
    }
    return ok;
}

/* The random batch was set by time_steps; a real one is the recipe's next. */
static bool bm_batch(void *self, int k, double *weight, double *tokens)
{
    bench_model *b = self;
    if (b->real) {
        if (!cg_mt_data_next(b->real, k, weight, tokens))
            return false;
        const cg_batch *bt = &b->real->bt[k];
        b->B = bt->B, b->S = bt->S, b->T = bt->T;
        b->src = bt->src, b->tin = bt->tgt_in, b->tout = bt->tgt_out;
        if (b->dump && !dump_batch(b))
            return false;
        b->taken++;
    }
    if (!b->real)
        *weight = 1;
    *tokens = b->real ? (double)target_tokens(b->tout, b->B * b->T) : (double)(b->B * b->T);
    return true;
}

static cg_tensor *bm_loss(void *self, int k, float grad_scale)
{
    (void)k;
    bench_model *b = self;
    return b->lm ? cg_charlm_forward_loss(b->lm, b->tin, b->B, b->T, b->tout, 0.0f, grad_scale)
                 : cg_seq2seq_forward_loss(b->s2s, b->src, b->B, b->S, b->tin, b->T, b->tout,
                                           grad_scale);
}

static double bm_lr(void *self, int64_t step)
{
    (void)self, (void)step;
    return 1e-3;
}

/* The command line (flag table: models/util/cli.h). */
typedef struct {
    const char *model, *preset, *precision, *data, *dump, *arch;
    int64_t threads, steps, warmup, seed, T, d, B; /* T, d, B: 0 = the preset's */
    int64_t zero;                                  /* ZeRO stage: 0 or 1 */
    int64_t vocab_size;                            /* --preset real's BPE */
    bool recompute;
} bench_args;

/* Parse argv (after cg_dist_init) into *a: -1 to go on, else the exit
 * status (0 after --help, 2 on a bad command line). */
static int parse_args(int argc, char **argv, bench_args *a)
{
    /* data NULL and vocab_size 0 until given: --preset real's alone */
    *a = (bench_args){
        .model = "charlm", .preset = "tiny", .precision = "fp32", .steps = 20, .warmup = 5};
    const cg_cli_opt opts[] = {
        {"--model", CG_CLI_STR, &a->model, 0, 0, NULL, 0},
        {"--preset", CG_CLI_STR, &a->preset, 0, 0, NULL, 0},
        {"--threads", CG_CLI_I64, &a->threads, 1, 1024, NULL, 0},
        {"--steps", CG_CLI_I64, &a->steps, 1, 1000000, NULL, 0},
        {"--warmup", CG_CLI_I64, &a->warmup, 0, 1000000, NULL, 0},
        {"--seed", CG_CLI_I64, &a->seed, 0, 0x1p62, NULL, 0},
        {"--T", CG_CLI_I64, &a->T, 1, 65536, NULL, 0},
        {"--d", CG_CLI_I64, &a->d, 1, 65536, NULL, 0},
        {"--batch-size", CG_CLI_I64, &a->B, 1, 65536, NULL, 0},
        {"--precision", CG_CLI_STR, &a->precision, 0, 0, NULL, 0},
        {"--recompute", CG_CLI_SWITCH, &a->recompute, 0, 0, NULL, 0}, /* as the trainers' */
        {"--zero", CG_CLI_I64, &a->zero, 0, 1, NULL, 0},              /* as the trainers' */
        {"--data", CG_CLI_STR, &a->data, 0, 0, NULL, 0},
        {"--dump-batches", CG_CLI_STR, &a->dump, 0, 0, NULL, 0},
        {"--vocab-size", CG_CLI_I64, &a->vocab_size, 261, 1 << 20, NULL, 0},
        {"--arch", CG_CLI_STR, &a->arch, 0, 0, NULL, 0},
    };
    bool help;
    char msg[256];
    if (!cg_cli_parse(argc - 1, argv + 1, opts, (int)(sizeof opts / sizeof opts[0]), &help))
        return usage(cg_last_error());
    if (help)
        return usage(NULL);
    if (strcmp(a->model, "charlm") && strcmp(a->model, "seq2seq")) {
        snprintf(msg, sizeof msg, "--model: unknown model '%s' (choices: charlm, seq2seq)",
                 a->model);
        return usage(msg);
    }
    bool real = !strcmp(a->preset, "real"), charlm = !strcmp(a->model, "charlm");
    preset p;
    if (!real && !get_preset(charlm, a->preset, &p)) {
        snprintf(msg, sizeof msg, "--preset: unknown preset '%s' for %s (choices: tiny, base, %s)",
                 a->preset, a->model, charlm ? "gpt2" : "paper, real");
        return usage(msg);
    }
    if (a->arch && strcmp(a->arch, "gpt") && strcmp(a->arch, "llama")) {
        snprintf(msg, sizeof msg, "--arch: unknown architecture '%.64s' (choices: gpt, llama)",
                 a->arch);
        return usage(msg);
    }
    if (a->arch && !strcmp(a->arch, "llama") && !charlm)
        return usage("--arch llama is charlm's (the translator keeps its own block)");
    if (real && strcmp(a->model, "seq2seq"))
        return usage("--preset real is the translator's recipe: use it with --model seq2seq");
    if (real && (a->T || a->B || a->d))
        return usage("--preset real takes its shapes from the data: no --T, --batch-size or --d");
    const char *real_only = a->dump         ? "--dump-batches"
                            : a->data       ? "--data"
                            : a->vocab_size ? "--vocab-size"
                                            : NULL;
    if (real_only && !real) { /* a random run timed in silence is no answer */
        snprintf(msg, sizeof msg, "%s needs --preset real (the other presets' batches are random)",
                 real_only);
        return usage(msg);
    }
    if (!a->data)
        a->data = REAL_DATA;
    if (!a->vocab_size)
        a->vocab_size = REAL_VOCAB;
    if (a->d % 32 && a->d >= 32)
        return usage("--d must be a multiple of 32");
    return -1;
}

/* The model's preset with the overrides: --T, --batch-size, and --d for
 * width scaling (d_ff = 4d, heads of 32, at least 1). */
static preset bench_preset(const bench_args *a, bool charlm)
{
    preset p;
    get_preset(charlm, strcmp(a->preset, "real") ? a->preset : "tiny", &p);
    if (a->T)
        p.T = a->T;
    if (a->B)
        p.B = a->B;
    if (a->d) {
        p.H = a->d >= 32 ? a->d / 32 : 1;
        p.d = a->d;
        p.d_ff = 4 * a->d;
    }
    return p;
}

/* The model of the preset (dropout 0), into bm->lm or bm->s2s. */
static cg_module *new_model(const bench_args *a, const preset *p, bench_model *bm)
{
    if (!strcmp(a->model, "charlm")) {
        cg_charlm_config c = cg_charlm_config_default();
        c.vocab = p->V, c.d = p->d, c.H = p->H, c.layers = p->layers, c.d_ff = p->d_ff;
        c.max_len = p->T, c.norm = CG_NORM_LAYERNORM, c.act = CG_ACT_GELU, c.norm_first = true;
        c.dropout = 0.0f, c.loss_chunk = cg_train_loss_chunk(c.vocab);
        if (a->arch && !strcmp(a->arch, "llama")) { /* the same parameters in three matrices */
            c.norm = CG_NORM_RMSNORM, c.act = CG_ACT_SWIGLU, c.pos_enc = CG_POS_ROPE;
            c.bias = false, c.d_ff = (p->d_ff * 2 / 3 + 32) / 64 * 64;
        }
        bm->lm = cg_charlm_new(&c, (uint64_t)a->seed);
        cg_charlm_set_recompute(bm->lm, a->recompute);
        return CG_MODULE(bm->lm);
    }
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = p->V, c.d = p->d, c.H = p->H, c.enc_layers = p->enc_layers,
    c.dec_layers = p->dec_layers, c.d_ff = p->d_ff, c.max_len = p->T;
    c.norm = CG_NORM_LAYERNORM, c.act = CG_ACT_RELU, c.norm_first = false;
    c.dropout = bm->real ? (float)REAL_DROPOUT : 0.0f, c.label_smoothing = 0.1f;
    c.loss_chunk = cg_train_loss_chunk(c.vocab);
    bm->s2s = cg_seq2seq_new(&c, (uint64_t)a->seed);
    cg_seq2seq_set_recompute(bm->s2s, a->recompute);
    return CG_MODULE(bm->s2s);
}

/* Model FLOPs of a step over B x S source and B x T target tokens (see the
 * top of the file): the weights that read the source (the encoder's and
 * cross-attention's k and v projections) take B x S tokens, the others
 * B x T; attention's keys are S long in the encoder and cross-attention, T
 * in the decoder's (and charlm's) self-attention. */
typedef struct {
    double n_src, n_tgt;              /* 2-D weights on source, target tokens */
    double n_enc, n_self, n_cross, d; /* attention blocks of each kind */
} flops_model;
static double flops_of(const flops_model *f, int64_t B, int64_t S, int64_t T)
{
    const double src = (double)(B * S), tgt = (double)(B * T);
    return 6.0 * (f->n_src * src + f->n_tgt * tgt) +
           12.0 * f->d *
               (f->n_enc * (double)S * src + f->n_self * (double)T * tgt +
                f->n_cross * (double)S * tgt);
}

/* A weight of the source side: the encoder's, or cross-attention's k and v
 * (the memory's projections). */
static bool reads_source(const char *name)
{
    return !strncmp(name, "encoder.", 8) || strstr(name, ".cross_attn.k_proj.") ||
           strstr(name, ".cross_attn.v_proj.");
}

/* The FLOP counts of the model (see the top of the file); *n_params: every
 * parameter's elements. */
static flops_model step_flops(const cg_stepper *st, const preset *p, bool charlm, int64_t *n_params)
{
    int64_t n_src = 0, n_tgt = 0;
    *n_params = 0;
    for (int i = 0; i < st->pl.n; i++) {
        cg_tensor *t = st->pl.items[i].tensor;
        const char *name = st->pl.items[i].name;
        *n_params += cg_numel(t);
        if (t->ndim == 2 && strcmp(name, "tok_emb.weight") && strcmp(name, "emb.weight"))
            *(reads_source(name) ? &n_src : &n_tgt) += cg_numel(t);
    }
    n_tgt += p->V * p->d; /* tied output head */
    return (flops_model){.n_src = (double)n_src,
                         .n_tgt = (double)n_tgt,
                         .n_enc = charlm ? 0 : (double)p->enc_layers,
                         .n_self = (double)(charlm ? p->layers : p->dec_layers),
                         .n_cross = charlm ? 0 : (double)p->dec_layers,
                         .d = (double)p->d};
}

/* four random batches, used in turn (as the peer) */
enum { NB = 4 };
typedef struct {
    int64_t *src[NB], *tin[NB], *tout[NB];
} batches;

static void free_batches(batches *bt)
{
    for (int b = 0; b < NB; b++)
        free(bt->src[b]), free(bt->tin[b]), free(bt->tout[b]);
}

/* false (message printed, nothing held): out of memory */
static bool random_batches(batches *bt, const preset *p, bool charlm, int64_t seed)
{
    const int64_t B = p->B, T = p->T, tokens = B * T;
    cg_rng rng = cg_rng_new((uint64_t)seed + 12345);
    *bt = (batches){0};
    for (int b = 0; b < NB; b++) {
        int64_t *src = bt->src[b] = malloc((size_t)tokens * sizeof(int64_t));
        int64_t *tin = bt->tin[b] = malloc((size_t)tokens * sizeof(int64_t));
        int64_t *tout = bt->tout[b] = malloc((size_t)tokens * sizeof(int64_t));
        if (!src || !tin || !tout) {
            free_batches(bt);
            cg_prog_fail("out of memory for the random batches (%d of %lld x %lld tokens)", NB,
                         (long long)B, (long long)T);
            return false;
        }
        for (int64_t r = 0; r < B; r++) {
            if (charlm) {
                int64_t prev = (int64_t)cg_rng_below(&rng, (uint64_t)p->V);
                for (int64_t t = 0; t < T; t++) {
                    int64_t nx = (int64_t)cg_rng_below(&rng, (uint64_t)p->V);
                    tin[r * T + t] = prev;
                    tout[r * T + t] = nx;
                    prev = nx;
                }
            } else {
                for (int64_t t = 0; t < T; t++) {
                    src[r * T + t] = 3 + (int64_t)cg_rng_below(&rng, (uint64_t)(p->V - 3));
                    tout[r * T + t] = 3 + (int64_t)cg_rng_below(&rng, (uint64_t)(p->V - 3));
                }
                tin[r * T] = CG_BOS;
                for (int64_t t = 1; t < T; t++)
                    tin[r * T + t] = tout[r * T + t - 1];
            }
        }
    }
    return true;
}

/* What the timed steps measured: medians over the steps (wall, process CPU,
 * communication not hidden), the last loss, the resident set after the
 * 10th step (warm-up included) and after the last, its peak at the end of
 * the steps and at the start (MiB). */
typedef struct {
    double med, cmed, emed, rss10, rss_last, rss_peak, rss_start;
    double tokens, seconds, flops, rows, cols, src_cols; /* summed over the timed steps */
    double from, to; /* CLOCK_MONOTONIC seconds: the timed steps' start and end */
    float last_loss;
} timings;

static double median_of(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* warmup + steps steps of st on the batches in turn; false (message printed)
 * when a step fails. */
static bool time_steps(cg_stepper *st, bench_model *bm, const batches *bt, const flops_model *fm,
                       long warmup, long steps, timings *tm)
{
    double *times = malloc((size_t)steps * sizeof(double));
    double *cpu = malloc((size_t)steps * sizeof(double));     /* process CPU time per step */
    double *exposed = malloc((size_t)steps * sizeof(double)); /* communication not hidden */
    if (!times || !cpu || !exposed) {
        free(times);
        free(cpu);
        free(exposed);
        cg_prog_fail("out of memory for the timings of %ld steps", steps);
        return false;
    }
    tm->last_loss = NAN;
    tm->rss10 = NAN, tm->rss_last = NAN;
    tm->tokens = tm->seconds = tm->flops = tm->rows = tm->cols = tm->src_cols = 0;
    tm->from = tm->to = NAN;
    long i;
    for (i = 0; i < warmup + steps; i++) {
        if (!bm->real) {
            int b = (int)(i % NB);
            bm->src = bt->src[b], bm->tin = bt->tin[b], bm->tout = bt->tout[b];
        }
        double t0 = cg_now(), c0 = cg_cpu_now(), comm0 = cg_dist_comm_seconds(), loss, ntok;
        cg_step_result r = cg_stepper_step(st, i + 1, &loss, &ntok);
        tm->last_loss = (float)loss;
        if (r != CG_STEP_OK) {
            cg_prog_fail("step %ld failed: %s", i, cg_last_error());
            break;
        }
        double dt = cg_now() - t0;
        if (i == 9)
            tm->rss10 = rss_now_mb();
        if (i == warmup + steps - 1) /* here, not after the code below faults its pages in */
            tm->rss_last = rss_now_mb();
        if (i >= warmup) {
            if (i == warmup)
                tm->from = t0;
            tm->to = t0 + dt;
            times[i - warmup] = dt;
            cpu[i - warmup] = cg_cpu_now() - c0;
            exposed[i - warmup] = st->reducer ? cg_dist_reducer_exposed_seconds(st->reducer)
                                              : cg_dist_comm_seconds() - comm0;
            tm->tokens += ntok; /* every rank's */
            tm->seconds += dt;
            tm->flops += flops_of(fm, bm->B, bm->S, bm->T);
            tm->rows += (double)bm->B;
            tm->cols += (double)bm->T;
            tm->src_cols += (double)bm->S;
        }
    }
    bool ok = i == warmup + steps;
    if (ok && !isfinite(tm->last_loss)) {
        cg_prog_fail("non-finite loss %g", (double)tm->last_loss);
        ok = false;
    }
    if (ok) {
        tm->med = median_of(times, steps);
        tm->cmed = median_of(cpu, steps);
        tm->emed = median_of(exposed, steps);
    }
    free(times);
    free(cpu);
    free(exposed);
    return ok;
}

/* The result line (false: out of memory). worst: the peak resident set
 * (MB) and the optimizer state (MB), the largest over ranks. */
static bool print_json(const bench_args *a, const preset *p, cg_precision precision, long threads,
                       int64_t n_params, double peak_gflops, bool overlap, const timings *tm,
                       const double worst[2], long steps)
{
    /* the fixed presets: one rank's B x T tokens over the median step, as
     * torch_peer.py; real batches: every target token over all the time */
    const bool real = !strcmp(a->preset, "real");
    const double med = tm->med, tokens = real ? tm->tokens / (double)steps : (double)(p->B * p->T);
    const double tps = real ? tm->tokens / tm->seconds : tokens / med;
    const double flops_step = tm->flops / (double)steps,
                 mfu = tm->flops / tm->seconds / (peak_gflops * 1e9);
    const cg_gemm_path gemm_path =
        precision == CG_PRECISION_FP32 ? cg_gemm_active_path() : cg_bf16_auto_path();
    cJSON *o = cJSON_CreateObject();
    bool ok =
        o && cg_json_put_str(o, "model", a->model) && cg_json_put_str(o, "preset", a->preset) &&
        cg_json_put_str(o, "precision", cg_precision_name(precision)) &&
        cg_json_put_int(o, "threads", threads) &&
        cg_json_put_num(o, "tokens_per_step", "%.1f", tokens) &&
        cg_json_put_num(o, "step_ms_median", "%.3f", med * 1e3) &&
        cg_json_put_num(o, "tokens_per_s", "%.1f", tps) && cg_json_put_int(o, "params", n_params) &&
        cg_json_put_num(o, "peak_rss_mb", "%.1f", tm->rss_peak) &&
        cg_json_put_num(o, "rss_mb_start", "%.1f", tm->rss_start) &&
        cg_json_put_num(o, "mfu", "%.4f", mfu) &&
        cg_json_put_num(o, "flops_per_step", "%.4g", flops_step) &&
        cg_json_put_num(o, "gemm_gflops", "%.1f", peak_gflops) &&
        cg_json_put_str(o, "gemm_path", cg_gemm_path_name(gemm_path)) &&
        cg_json_put_num(o, "T", "%.1f", tm->cols / (double)steps) &&
        cg_json_put_num(o, "B", "%.1f", tm->rows / (double)steps) &&
        (strcmp(a->model, "seq2seq") ||
         cg_json_put_num(o, "S", "%.1f", tm->src_cols / (double)steps)) &&
        cg_json_put_int(o, "d", p->d) && (!a->arch || cg_json_put_str(o, "arch", a->arch)) &&
        cg_json_put_num(o, "cpu_ms_median", "%.3f", tm->cmed * 1e3) &&
        cg_json_put_num(o, "final_loss", "%.9g", (double)tm->last_loss) &&
        cg_json_put_num(o, "rss_mb_step10", "%.1f", tm->rss10) &&
        cg_json_put_num(o, "rss_mb_last", "%.1f", tm->rss_last) &&
        cg_json_put_bool(o, "recompute", a->recompute) &&
        cg_json_put_int(o, "ranks", cg_dist_size()) && cg_json_put_bool(o, "overlap", overlap) &&
        cg_json_put_num(o, "comm_exposed_ms_median", "%.3f", tm->emed * 1e3) &&
        cg_json_put_int(o, "zero", a->zero) &&
        cg_json_put_num(o, "optim_state_mb", "%.2f", worst[1]) &&
        cg_json_put_num(o, "peak_rss_mb_max_rank", "%.1f", worst[0]) &&
        cg_json_put_num(o, "timed_from_s", "%.6f", tm->from) &&
        cg_json_put_num(o, "timed_to_s", "%.6f", tm->to);
    char *line = ok ? cg_json_line(o) : NULL;
    cJSON_Delete(o);
    if (!line)
        return false;
    printf("%s\n", line);
    free(line);
    return true;
}

/* --preset real: the recipe's data, tokenizer and batch order into d, the
 * vocabulary and the longest sequence into p (false: error recorded). */
static bool real_setup(const bench_args *a, cg_mt_data *d, preset *p)
{
    if (a->seed < 0 || a->seed >= (int64_t)1 << 32) {
        cg_set_error("--seed must be below 2^32 with --preset real (numpy RandomState)");
        return false;
    }
    if (!cg_mt_data_load(d, a->data, REAL_DATA, 500, 1000, NULL) ||
        !cg_mt_data_prepare(d, a->data, REAL_MAX_LEN, REAL_MAX_TOKENS, CG_TOK_BPE, a->vocab_size,
                            NULL, NULL, "bench") ||
        !cg_mt_check_ranks(d, REAL_MAX_TOKENS, false) ||
        !cg_mt_data_order(d, (uint32_t)a->seed, 1, false, 0, NULL))
        return false;
    p->V = cg_tokenizer_vocab_size(d->tok);
    p->T = REAL_MAX_LEN;
    return true;
}

/* The batches taken, with what tools/real_peer.py needs to build the same
 * model, to the --dump-batches file. */
static bool dump_save(const bench_args *a, const preset *p, bench_model *bm)
{
    const struct {
        const char *key;
        double v;
    } meta[] = {{"vocab", (double)p->V},
                {"d", (double)p->d},
                {"H", (double)p->H},
                {"enc_layers", (double)p->enc_layers},
                {"dec_layers", (double)p->dec_layers},
                {"d_ff", (double)p->d_ff},
                {"max_len", (double)p->T},
                {"dropout", REAL_DROPOUT},
                {"label_smoothing", 0.1},
                {"warmup", (double)a->warmup},
                {"steps", (double)a->steps},
                {"seed", (double)a->seed}};
    bool ok = true;
    for (size_t i = 0; i < sizeof meta / sizeof meta[0] && ok; i++)
        ok = cg_st_set_metadata_number(bm->dump, meta[i].key, meta[i].v);
    return ok && cg_st_writer_save(bm->dump, a->dump);
}

/* --preset real's files, before any work: standard output (the result
 * line) is not --data, and --dump-batches is a new file (bench has no
 * --force: an existing one is refused, never replaced) in a writable
 * directory (models/train/outfile.h cg_out_check), not --data nor
 * standard output. A file
 * that appears during the run is still replaced (no lock is taken).
 * False + error. */
static bool check_files(const bench_args *a)
{
    struct stat st;
    if (!cg_out_check_stdout(a->data, "--data"))
        return false;
    if (!a->dump)
        return true;
    /* `>> FILE` made it: named as standard output, not as an existing file */
    if (!cg_out_check_stdout_writes(a->dump, "the --dump-batches file this command writes"))
        return false;
    if (cg_same_file(a->dump, a->data)) {
        cg_set_error("--dump-batches '%s' is the same file as --data '%s', which this command "
                     "reads; choose another file (nothing was written)",
                     a->dump, a->data);
        return false;
    }
    if (lstat(a->dump, &st) == 0) {
        cg_set_error("--dump-batches '%s' exists; remove it or choose another file (bench "
                     "replaces no file)",
                     a->dump);
        return false;
    }
    return cg_out_check(a->dump, false);
}

/* The timed steps of a stepper set up, and the result line (then the
 * dump): the exit code, everything it made freed (a failure too). */
static int measure(const bench_args *a, const preset *p, bool charlm, cg_precision precision,
                   long threads, double rss_start, cg_stepper *st, bench_model *bm)
{
    int64_t n_params;
    flops_model fm = step_flops(st, p, charlm, &n_params);
    batches bt;
    timings t;
    bool ok = random_batches(&bt, p, charlm, a->seed); /* false: message printed */
    if (ok && !cg_dist_broadcast_module(st->m->module)) {
        cg_prog_fail_lib(NULL);
        ok = false;
    }
    ok = ok && time_steps(st, bm, &bt, &fm, (long)a->warmup, (long)a->steps, &t);
    free_batches(&bt);
    if (!ok)
        return 1;
    /* the peak of the steps, as the peer's (its process's at the end of its
     * steps), before the GEMM rate's buffers (12 MiB and their packing,
     * which were in it: a fifth of charlm tiny's bf16 peak) */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* ru_maxrss can trail the resident set by the kernel's unsynced counts */
    t.rss_peak = fmax((double)ru.ru_maxrss / 1024.0, rss_now_mb()), t.rss_start = rss_start;
    double peak_gflops = gemm_gflops();
    /* the largest over ranks (collective: every rank reaches it) */
    double worst[2] = {t.rss_peak, (double)cg_optim_state_bytes(st->opt) / 1e6};
    if (!cg_dist_allreduce_max(worst, 2))
        return cg_prog_fail_lib(NULL);
    bool printed = print_json(a, p, precision, threads, n_params, peak_gflops, st->reducer != NULL,
                              &t, worst, (long)a->steps);
    if (!printed)
        cg_prog_fail("out of memory writing the result line");
    /* after the result line, which a dump that cannot be written (a disk
     * filled during the run) no longer takes with it */
    bool dumped = !bm->dump || dump_save(a, p, bm);
    if (!dumped)
        cg_prog_fail_lib("--dump-batches");
    return printed && dumped ? 0 : 1;
}

static int run(int argc, char **argv)
{
    /* Under mpirun: every rank takes the same steps on its own B rows (data
     * parallel; the gradients are averaged by the trainer's step) and rank 0
     * prints, with the ranks and the communication backward did not hide. */
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot())
        return cg_prog_fail_lib("MPI");
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    cg_precision precision = CG_PRECISION_FP32;
    /* an unknown name: exit 2; bf16 on a CPU without it: exit 1 */
    if (rc < 0)
        rc = cg_precision_flag(a.precision, &precision);
    if (rc >= 0)
        return rc;
    cg_cli_set_threads("bench", a.threads);
    long threads = cg_get_num_threads();
    /* the process before any of the run's memory: the program, its
     * libraries and MPI (the peer's start is python3 with torch imported) */
    const double rss_start = rss_now_mb();
    /* this thread's policy, before the GEMM rate is measured (MFU against bf16's) */
    const cg_precision outer = cg_autocast_begin(precision);

    bool charlm = !strcmp(a.model, "charlm");
    preset p = bench_preset(&a, charlm);
    cg_mt_data real = {0};
    bench_model bm = {.B = p.B, .S = p.T, .T = p.T};
    if (!strcmp(a.preset, "real")) {
        bm.real = &real;
        /* the dump's writer once the files are checked: a refusal holds nothing */
        if (!check_files(&a) || !real_setup(&a, &real, &p) ||
            (a.dump && !(bm.dump = cg_st_writer_new())))
            return cg_prog_fail_lib(NULL);
    }
    cg_module *model = new_model(&a, &p, &bm);
    if (!model)
        return cg_prog_fail_lib(NULL);
    cg_trainer_model tm = {.module = model,
                           .optim = cg_adamw_config(1e-3, 0.9, 0.98, 1e-9),
                           .weight_decay_2d = 0.01,
                           .weight_decay_1d = 0.01,
                           .self = &bm,
                           .batch = bm_batch,
                           .loss = bm_loss,
                           .lr = bm_lr};
    cg_stepper st;
    const bool stepping = cg_stepper_init(&st, &tm, 1, (int)a.zero);
    rc = stepping ? measure(&a, &p, charlm, precision, threads, rss_start, &st, &bm)
                  : cg_prog_fail_lib(NULL);
    cg_st_writer_free(bm.dump);
    cg_mt_data_free(&real);
    if (stepping)
        cg_stepper_free(&st);
    cg_module_free(model);
    cg_autocast_end(outer);
    cg_dist_finalize();
    return rc;
}

int main(int argc, char **argv)
{
    cg_prog_set_name("bench"); /* its messages: "bench: error: ..." (models/train/prog.h) */
    cg_cli_start();
    if (!cg_env_check()) { /* a malformed CG_ variable, as a malformed flag */
        cg_prog_fail_lib(NULL);
        return CG_EXIT_USAGE;
    }
    int rc = run(argc, argv);
    if (rc == 0 && !cg_cli_stdout_ok()) /* the JSON line is lost */
        rc = cg_prog_fail_lib(NULL);
    return rc;
}
