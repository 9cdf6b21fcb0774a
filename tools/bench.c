/* bench: training throughput of the zoo models, the peer of
 * shared/bench/torch_peer.py (same presets, same step, same JSON fields).
 *
 *   build/tools/bench --model charlm|seq2seq --preset tiny|base --threads N
 *                      --steps S --warmup W [--seed K] [--T len] [--batch-size B]
 *                      [--precision fp32|bf16] [--recompute] [--zero 0|1]
 *
 * A step is zero_grad + forward + loss + backward + AdamW step (lr 1e-3,
 * betas 0.9/0.98, eps 1e-9, weight decay 0.01, as the peer; no clipping),
 * taken by the trainer's own step (models/train/trainer.h cg_stepper), on random
 * full-length sequences (dropout 0; S = T for seq2seq). W untimed steps, then
 * S timed ones; prints one JSON line:
 *   model, preset, precision, threads, tokens_per_step (B*T; target tokens for seq2seq),
 *   step_ms_median, tokens_per_s (tokens_per_step / median), params,
 *   peak_rss_mb (getrusage ru_maxrss, MiB), mfu, plus flops_per_step,
 *   gemm_gflops, cpu_ms_median (process CPU time per step: a load-robust
 *   measure on a shared machine), final_loss (thread counts must agree), and
 *   rss_mb_step10 / rss_mb_last: the resident set after the 10th step and
 *   after the last (flat memory: the two agree). Under mpirun: ranks,
 *   overlap, comm_exposed_ms_median, and with --zero 1 (ZeRO-1, the
 *   trainers' flag) zero, optim_state_mb (the optimizer state this rank
 *   holds, largest over ranks) and peak_rss_mb_max_rank.
 *
 * MFU = model FLOPs per second / the sgemm rate measured at start-up
 * (1024^3, same thread count, best of 5). Model FLOPs per step follow the
 * PaLM convention (Chowdhery et al. 2022, appendix B):
 *   6 * N_mm * tokens                         every weight matmul, fwd + bwd
 *   + 12 * n_attn * T_k * d * tokens          q k^T and w v, fwd + bwd
 * where N_mm = the elements of every 2-D weight except the embedding table,
 * plus V*d for the tied output head (a real matmul), and n_attn = the number
 * of attention blocks a token passes through (charlm: layers; seq2seq:
 * enc_layers + 2*dec_layers, with S = T every block sees the same count).
 * Causal attention is counted in full (not halved), as in PaLM; layer norm,
 * softmax, activations and the optimizer are not counted. --T overrides the
 * sequence length, --batch-size the batch and --d the width (d_ff = 4d,
 * heads of 32) for scaling curves. libgomp's default wait policy (spin briefly, then sleep) is kept, as
 * in the trainers: on an idle machine it is 15% faster at 2 threads than
 * OMP_WAIT_POLICY=passive, which wakes a sleeping thread for every region.
 * On a machine shared with other work, passive can be much faster. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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
#include "models/train/dist.h"
#include "models/train/train_common.h"
#include "models/train/trainer.h"
#include "optim/optim.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --help: the usage on stdout, exit 0; an error: one line on stderr, exit 2 */
static int usage(const char *msg)
{
    if (msg) {
        /* the flag parser's messages may already say it */
        fprintf(stderr, "bench: error: %s%s\n", msg,
                strstr(msg, "(try --help)") ? "" : " (try --help)");
        return 2;
    }
    fprintf(stdout, "usage: bench [--model charlm|seq2seq] [--preset tiny|base] [--threads N>=1]\n"
                    "             [--steps S>=1] [--warmup W>=0] [--seed K] [--T len] [--d width]\n"
                    "             [--batch-size B] [--precision fp32|bf16] [--recompute]\n"
                    "             [--zero 0|1]\n"
                    "Times S training steps (zero grad, forward, loss, backward, AdamW) after W\n"
                    "untimed ones on random data; prints one JSON line (see torch_peer.py).\n");
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
 * best of 5. */
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
    for (int r = 0; r < 6; r++) {
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
 * with the peer's vocabulary: 65 characters (charlm), 96 ids (seq2seq). */
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
                  .V = charlm ? 65 : 96,
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
    int64_t B, T, *src, *tin, *tout;
} bench_model;

static bool bm_batch(void *self, int k, double *weight, double *tokens)
{
    (void)self, (void)k;
    *weight = 1;
    *tokens = 0;
    return true;
}

static cg_tensor *bm_loss(void *self, int k)
{
    (void)k;
    bench_model *b = self;
    cg_tensor *logits = b->lm ? cg_charlm_forward(b->lm, b->tin, b->B, b->T)
                              : cg_seq2seq_forward(b->s2s, b->src, b->B, b->T, b->tin, b->T);
    cg_tensor *loss = !logits ? NULL
                      : b->lm ? cg_charlm_loss(b->lm, logits, b->tout)
                              : cg_seq2seq_loss(b->s2s, logits, b->tout);
    cg_release(logits);
    return loss;
}

static double bm_lr(void *self, int64_t step)
{
    (void)self, (void)step;
    return 1e-3;
}

/* The command line (flag table: models/util/cli.h). */
typedef struct {
    const char *model, *preset, *precision;
    int64_t threads, steps, warmup, seed, T, d, B; /* T, d, B: 0 = the preset's */
    int64_t zero;                                  /* ZeRO stage: 0 or 1 */
    bool recompute;
} bench_args;

/* Parse argv (after cg_dist_init) into *a: -1 to go on, else the exit
 * status (0 after --help, 2 on a bad command line). */
static int parse_args(int argc, char **argv, bench_args *a)
{
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
    };
    bool help;
    char msg[256];
    if (!cg_cli_parse(argc - 1, argv + 1, opts, (int)(sizeof opts / sizeof opts[0]), &help))
        return usage(cg_last_error());
    if (help)
        return usage(NULL);
    if (strcmp(a->model, "charlm") && strcmp(a->model, "seq2seq")) {
        snprintf(msg, sizeof msg, "unknown model '%s' (have: charlm, seq2seq)", a->model);
        return usage(msg);
    }
    if (strcmp(a->preset, "tiny") && strcmp(a->preset, "base")) {
        snprintf(msg, sizeof msg, "unknown preset '%s' (have: tiny, base)", a->preset);
        return usage(msg);
    }
    if (a->d % 32 && a->d >= 32)
        return usage("--d must be a multiple of 32");
    return -1;
}

/* The model's preset with the overrides: --T, --batch-size, and --d for
 * width scaling (d_ff = 4d, heads of 32, at least 1). */
static preset bench_preset(const bench_args *a, bool charlm)
{
    preset p;
    get_preset(charlm, a->preset, &p);
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
        c.dropout = 0.0f;
        bm->lm = cg_charlm_new(&c, (uint64_t)a->seed);
        cg_charlm_set_recompute(bm->lm, a->recompute);
        return CG_MODULE(bm->lm);
    }
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = p->V, c.d = p->d, c.H = p->H, c.enc_layers = p->enc_layers,
    c.dec_layers = p->dec_layers, c.d_ff = p->d_ff, c.max_len = p->T;
    c.norm = CG_NORM_LAYERNORM, c.act = CG_ACT_RELU, c.norm_first = false;
    c.dropout = 0.0f, c.label_smoothing = 0.1f;
    bm->s2s = cg_seq2seq_new(&c, (uint64_t)a->seed);
    cg_seq2seq_set_recompute(bm->s2s, a->recompute);
    return CG_MODULE(bm->s2s);
}

/* Model FLOPs per step (see the top of the file); *n_params: every
 * parameter's elements. */
static double step_flops(const cg_stepper *st, const preset *p, bool charlm, int64_t *n_params)
{
    int64_t n_mm = 0;
    *n_params = 0;
    for (int i = 0; i < st->pl.n; i++) {
        cg_tensor *t = st->pl.items[i].tensor;
        *n_params += cg_numel(t);
        if (t->ndim == 2 && strcmp(st->pl.items[i].name, "tok_emb.weight") &&
            strcmp(st->pl.items[i].name, "emb.weight"))
            n_mm += cg_numel(t);
    }
    n_mm += p->V * p->d; /* tied output head */
    int64_t n_attn = charlm ? p->layers : p->enc_layers + 2 * p->dec_layers;
    const int64_t tokens = p->B * p->T;
    return 6.0 * (double)n_mm * (double)tokens +
           12.0 * (double)n_attn * (double)p->T * (double)p->d * (double)tokens;
}

/* four random batches, used in turn (as the peer) */
enum { NB = 4 };
typedef struct {
    int64_t *src[NB], *tin[NB], *tout[NB];
} batches;

static void random_batches(batches *bt, const preset *p, bool charlm, int64_t seed)
{
    const int64_t B = p->B, T = p->T, tokens = B * T;
    cg_rng rng = cg_rng_new((uint64_t)seed + 12345);
    for (int b = 0; b < NB; b++) {
        int64_t *src = bt->src[b] = malloc((size_t)tokens * sizeof(int64_t));
        int64_t *tin = bt->tin[b] = malloc((size_t)tokens * sizeof(int64_t));
        int64_t *tout = bt->tout[b] = malloc((size_t)tokens * sizeof(int64_t));
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
}

/* What the timed steps measured: medians over the steps (wall, process CPU,
 * communication not hidden), the last loss, and the resident set after the
 * 10th step (warm-up included) and after the last. */
typedef struct {
    double med, cmed, emed, rss10, rss_last;
    float last_loss;
} timings;

static double median_of(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* warmup + steps steps of st on the batches in turn; false (message printed)
 * when a step fails. */
static bool time_steps(cg_stepper *st, bench_model *bm, const batches *bt, long warmup, long steps,
                       timings *tm)
{
    double *times = malloc((size_t)steps * sizeof(double));
    double *cpu = malloc((size_t)steps * sizeof(double));     /* process CPU time per step */
    double *exposed = malloc((size_t)steps * sizeof(double)); /* communication not hidden */
    tm->last_loss = NAN;
    tm->rss10 = NAN, tm->rss_last = NAN;
    long i;
    for (i = 0; i < warmup + steps; i++) {
        int b = (int)(i % NB);
        bm->src = bt->src[b], bm->tin = bt->tin[b], bm->tout = bt->tout[b];
        double t0 = cg_now(), c0 = cg_cpu_now(), comm0 = cg_dist_comm_seconds(), loss, ntok;
        cg_step_result r = cg_stepper_step(st, i + 1, &loss, &ntok);
        tm->last_loss = (float)loss;
        if (r != CG_STEP_OK) {
            fprintf(stderr, "bench: step %ld failed: %s\n", i, cg_last_error());
            break;
        }
        double dt = cg_now() - t0;
        if (i == 9)
            tm->rss10 = rss_now_mb();
        if (i == warmup + steps - 1) /* here, not after the code below faults its pages in */
            tm->rss_last = rss_now_mb();
        if (i >= warmup) {
            times[i - warmup] = dt;
            cpu[i - warmup] = cg_cpu_now() - c0;
            exposed[i - warmup] = st->reducer ? cg_dist_reducer_exposed_seconds(st->reducer)
                                              : cg_dist_comm_seconds() - comm0;
        }
    }
    bool ok = i == warmup + steps;
    if (ok && !isfinite(tm->last_loss)) {
        fprintf(stderr, "bench: non-finite loss %g\n", (double)tm->last_loss);
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
                       int64_t n_params, double flops_step, double peak_gflops, bool overlap,
                       const timings *tm, const double worst[2])
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const int64_t tokens = p->B * p->T;
    const double med = tm->med, mfu = flops_step / med / (peak_gflops * 1e9);
    const cg_gemm_path gemm_path =
        precision == CG_PRECISION_FP32 ? cg_gemm_active_path() : cg_bf16_auto_path();
    cJSON *o = cJSON_CreateObject();
    bool ok =
        o && cg_json_put_str(o, "model", a->model) && cg_json_put_str(o, "preset", a->preset) &&
        cg_json_put_str(o, "precision", cg_precision_name(precision)) &&
        cg_json_put_int(o, "threads", threads) && cg_json_put_int(o, "tokens_per_step", tokens) &&
        cg_json_put_num(o, "step_ms_median", "%.3f", med * 1e3) &&
        cg_json_put_num(o, "tokens_per_s", "%.1f", (double)tokens / med) &&
        cg_json_put_int(o, "params", n_params) &&
        cg_json_put_num(o, "peak_rss_mb", "%.1f", (double)ru.ru_maxrss / 1024.0) &&
        cg_json_put_num(o, "mfu", "%.4f", mfu) &&
        cg_json_put_num(o, "flops_per_step", "%.4g", flops_step) &&
        cg_json_put_num(o, "gemm_gflops", "%.1f", peak_gflops) &&
        cg_json_put_str(o, "gemm_path", cg_gemm_path_name(gemm_path)) &&
        cg_json_put_int(o, "T", p->T) && cg_json_put_int(o, "B", p->B) &&
        cg_json_put_int(o, "d", p->d) &&
        cg_json_put_num(o, "cpu_ms_median", "%.3f", tm->cmed * 1e3) &&
        cg_json_put_num(o, "final_loss", "%.9g", (double)tm->last_loss) &&
        cg_json_put_num(o, "rss_mb_step10", "%.1f", tm->rss10) &&
        cg_json_put_num(o, "rss_mb_last", "%.1f", tm->rss_last) &&
        cg_json_put_bool(o, "recompute", a->recompute) &&
        cg_json_put_int(o, "ranks", cg_dist_size()) && cg_json_put_bool(o, "overlap", overlap) &&
        cg_json_put_num(o, "comm_exposed_ms_median", "%.3f", tm->emed * 1e3) &&
        cg_json_put_int(o, "zero", a->zero) &&
        cg_json_put_num(o, "optim_state_mb", "%.2f", worst[1]) &&
        cg_json_put_num(o, "peak_rss_mb_max_rank", "%.1f", worst[0]);
    char *line = ok ? cg_json_line(o) : NULL;
    cJSON_Delete(o);
    if (!line)
        return false;
    printf("%s\n", line);
    free(line);
    return true;
}

static int run(int argc, char **argv)
{
    /* Under mpirun: every rank takes the same steps on its own B rows (data
     * parallel; the gradients are averaged by the trainer's step) and rank 0
     * prints, with the ranks and the communication backward did not hide. */
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot()) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    bench_args a;
    int rc = parse_args(argc, argv, &a);
    cg_precision precision = CG_PRECISION_FP32;
    if (rc < 0 && !cg_precision_parse(a.precision, &precision))
        rc = usage(cg_last_error());
    if (rc >= 0)
        return rc;
    cg_cli_set_threads("bench", a.threads);
    long threads = cg_get_num_threads();
    cg_set_matmul_precision(precision); /* before the peak is measured: MFU against bf16's */

    bool charlm = !strcmp(a.model, "charlm");
    preset p = bench_preset(&a, charlm);
    double peak_gflops = gemm_gflops();
    bench_model bm = {.B = p.B, .T = p.T};
    cg_module *model = new_model(&a, &p, &bm);
    if (!model) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    cg_trainer_model tm = {.module = model,
                           .optim = cg_adamw_config(1e-3, 0.9, 0.98, 1e-9),
                           .weight_decay_2d = 0.01,
                           .weight_decay_1d = 0.01,
                           .self = &bm,
                           .batch = bm_batch,
                           .loss = bm_loss,
                           .lr = bm_lr};
    cg_stepper st;
    if (!cg_stepper_init(&st, &tm, 1, (int)a.zero)) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    int64_t n_params;
    double flops_step = step_flops(&st, &p, charlm, &n_params);
    batches bt;
    random_batches(&bt, &p, charlm, a.seed);
    if (!cg_dist_broadcast_module(model)) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    timings t;
    if (!time_steps(&st, &bm, &bt, (long)a.warmup, (long)a.steps, &t))
        return 1;
    /* the largest over ranks (collective: every rank reaches it) */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double worst[2] = {(double)ru.ru_maxrss / 1024.0, (double)cg_optim_state_bytes(st.opt) / 1e6};
    if (!cg_dist_allreduce_max(worst, 2)) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    bool printed = print_json(&a, &p, precision, threads, n_params, flops_step, peak_gflops,
                              st.reducer != NULL, &t, worst);
    if (!printed)
        fprintf(stderr, "bench: out of memory writing the result line\n");
    for (int b = 0; b < NB; b++)
        free(bt.src[b]), free(bt.tin[b]), free(bt.tout[b]);
    cg_stepper_free(&st);
    cg_module_free(model);
    cg_dist_finalize();
    return printed ? 0 : 1;
}

int main(int argc, char **argv)
{
    cg_cli_start();
    if (!cg_env_check()) { /* a malformed CG_ variable, as a malformed flag */
        fprintf(stderr, "bench: error: %s\n", cg_last_error());
        return 2;
    }
    int rc = run(argc, argv);
    if (rc == 0 && !cg_cli_stdout_ok()) { /* the JSON line is lost */
        fprintf(stderr, "bench: error: %s\n", cg_last_error());
        rc = 1;
    }
    return rc;
}
