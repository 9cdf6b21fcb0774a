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
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/gemm.h"
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
        fprintf(stderr, "bench: error: %s (try --help)\n", msg);
        return 2;
    }
    fprintf(stdout,
            "usage: bench [--model charlm|seq2seq] [--preset tiny|base] [--threads N>=1]\n"
            "             [--steps S>=1] [--warmup W>=0] [--seed K] [--T len] [--d width]\n"
            "             [--batch-size B] [--precision fp32|bf16] [--recompute]\n"
            "             [--zero 0|1]\n"
            "Times S training steps (zero grad, forward, loss, backward, AdamW) after W\n"
            "untimed ones on random data; prints one JSON line (see torch_peer.py).\n");
    return 0;
}

static int bad_value(const char *flag, const char *v, const char *want)
{
    char m[256];
    snprintf(m, sizeof m, "%s: '%.64s' is not an %s", flag, v, want);
    return usage(m);
}

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
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
    *p = (preset){.B = t->B, .T = t->T, .V = charlm ? 65 : 96, .d = t->d, .d_ff = t->d_ff,
                  .H = t->H, .layers = t->layers, .enc_layers = t->enc_layers,
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

static int run(int argc, char **argv)
{
    const char *model_name = "charlm", *preset_name = "tiny";
    long threads = 0, steps = 20, warmup = 5, seed = 0, Tover = 0, d_over = 0, b_over = 0;
    long zero = 0;
    cg_precision precision = CG_PRECISION_FP32;
    bool recompute = false;
    /* Under mpirun: every rank takes the same steps on its own B rows (data
     * parallel; the gradients are averaged by the trainer's step) and rank 0
     * prints, with the ranks and the communication backward did not hide. */
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot()) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage(NULL);
        if (!strcmp(a, "--recompute")) { /* the trainers' --recompute (a switch) */
            recompute = true;
            continue;
        }
        if (i + 1 >= argc) {
            char m[128];
            snprintf(m, sizeof m, "%s needs a value", a);
            return usage(strncmp(a, "--", 2) ? "unexpected argument" : m);
        }
        const char *v = argv[++i];
        char msg[256];
        if (!strcmp(a, "--model")) {
            if (strcmp(v, "charlm") && strcmp(v, "seq2seq")) {
                snprintf(msg, sizeof msg, "unknown model '%s' (have: charlm, seq2seq)", v);
                return usage(msg);
            }
            model_name = v;
        } else if (!strcmp(a, "--preset")) {
            if (strcmp(v, "tiny") && strcmp(v, "base")) {
                snprintf(msg, sizeof msg, "unknown preset '%s' (have: tiny, base)", v);
                return usage(msg);
            }
            preset_name = v;
        } else if (!strcmp(a, "--threads")) {
            if (!parse_long(v, 1, 1024, &threads))
                return bad_value("--threads", v, "integer in [1, 1024]");
        } else if (!strcmp(a, "--steps")) {
            if (!parse_long(v, 1, 1000000, &steps))
                return bad_value("--steps", v, "integer in [1, 1000000]");
        } else if (!strcmp(a, "--warmup")) {
            if (!parse_long(v, 0, 1000000, &warmup))
                return bad_value("--warmup", v, "integer in [0, 1000000]");
        } else if (!strcmp(a, "--seed")) {
            if (!parse_long(v, 0, 1L << 62, &seed))
                return usage("--seed needs a non-negative integer");
        } else if (!strcmp(a, "--T")) {
            if (!parse_long(v, 1, 65536, &Tover))
                return bad_value("--T", v, "integer in [1, 65536]");
        } else if (!strcmp(a, "--precision")) {
            if (!cg_precision_parse(v, &precision))
                return usage(cg_last_error());
        } else if (!strcmp(a, "--batch-size")) {
            if (!parse_long(v, 1, 65536, &b_over))
                return bad_value("--batch-size", v, "integer in [1, 65536]");
        } else if (!strcmp(a, "--d")) {
            if (!parse_long(v, 1, 65536, &d_over))
                return bad_value("--d", v, "integer in [1, 65536]");
        } else if (!strcmp(a, "--zero")) {
            if (!parse_long(v, 0, 1, &zero))
                return bad_value("--zero", v, "integer in [0, 1]");
        } else {
            snprintf(msg, sizeof msg, "unknown option '%s'", a);
            return usage(msg);
        }
    }
    cg_cli_set_threads("bench", threads);
    threads = cg_get_num_threads();
    cg_set_matmul_precision(precision); /* before the peak is measured: MFU against bf16's */

    bool charlm = !strcmp(model_name, "charlm");
    preset p;
    get_preset(charlm, preset_name, &p);
    if (Tover)
        p.T = Tover;
    if (b_over)
        p.B = b_over;
    if (d_over) { /* width scaling: d_ff = 4d, heads of 32 (at least 1) */
        if (d_over % 32 && d_over >= 32)
            return usage("--d must be a multiple of 32");
        p.H = d_over >= 32 ? d_over / 32 : 1;
        p.d = d_over;
        p.d_ff = 4 * d_over;
    }
    const int64_t B = p.B, T = p.T;

    double peak_gflops = gemm_gflops();

    cg_charlm *lm = NULL;
    cg_seq2seq *s2s = NULL;
    cg_module *model;
    if (charlm) {
        cg_charlm_config c = cg_charlm_config_default();
        c.vocab = p.V, c.d = p.d, c.H = p.H, c.layers = p.layers, c.d_ff = p.d_ff;
        c.max_len = T, c.norm = CG_NORM_LAYERNORM, c.act = CG_ACT_GELU, c.norm_first = true;
        c.dropout = 0.0f;
        lm = cg_charlm_new(&c, (uint64_t)seed);
        cg_charlm_set_recompute(lm, recompute);
        model = CG_MODULE(lm);
    } else {
        cg_seq2seq_config c = cg_seq2seq_config_default();
        c.vocab = p.V, c.d = p.d, c.H = p.H, c.enc_layers = p.enc_layers,
        c.dec_layers = p.dec_layers, c.d_ff = p.d_ff, c.max_len = T;
        c.norm = CG_NORM_LAYERNORM, c.act = CG_ACT_RELU, c.norm_first = false;
        c.dropout = 0.0f, c.label_smoothing = 0.1f;
        s2s = cg_seq2seq_new(&c, (uint64_t)seed);
        cg_seq2seq_set_recompute(s2s, recompute);
        model = CG_MODULE(s2s);
    }
    if (!model) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }

    bench_model bm = {.lm = lm, .s2s = s2s, .B = B, .T = T};
    cg_trainer_model tm = {.module = model, .optim = cg_adamw_config(1e-3, 0.9, 0.98, 1e-9),
                           .weight_decay_2d = 0.01, .weight_decay_1d = 0.01, .self = &bm,
                           .batch = bm_batch, .loss = bm_loss, .lr = bm_lr};
    cg_stepper st;
    if (!cg_stepper_init(&st, &tm, 1, (int)zero)) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    int64_t n_params = 0, n_mm = 0;
    for (int i = 0; i < st.pl.n; i++) {
        cg_tensor *t = st.pl.items[i].tensor;
        n_params += cg_numel(t);
        if (t->ndim == 2 && strcmp(st.pl.items[i].name, "tok_emb.weight") &&
            strcmp(st.pl.items[i].name, "emb.weight"))
            n_mm += cg_numel(t);
    }
    n_mm += p.V * p.d; /* tied output head */
    int64_t n_attn = charlm ? p.layers : p.enc_layers + 2 * p.dec_layers;
    const int64_t tokens = B * T;
    double flops_step = 6.0 * (double)n_mm * (double)tokens +
                        12.0 * (double)n_attn * (double)T * (double)p.d * (double)tokens;

    /* four random batches, used in turn (as the peer) */
    enum { NB = 4 };
    int64_t *src[NB], *tin[NB], *tout[NB];
    cg_rng rng = cg_rng_new((uint64_t)seed + 12345);
    for (int b = 0; b < NB; b++) {
        src[b] = malloc((size_t)tokens * sizeof(int64_t));
        tin[b] = malloc((size_t)tokens * sizeof(int64_t));
        tout[b] = malloc((size_t)tokens * sizeof(int64_t));
        for (int64_t r = 0; r < B; r++) {
            if (charlm) {
                int64_t prev = (int64_t)cg_rng_below(&rng, (uint64_t)p.V);
                for (int64_t t = 0; t < T; t++) {
                    int64_t nx = (int64_t)cg_rng_below(&rng, (uint64_t)p.V);
                    tin[b][r * T + t] = prev;
                    tout[b][r * T + t] = nx;
                    prev = nx;
                }
            } else {
                for (int64_t t = 0; t < T; t++) {
                    src[b][r * T + t] = 3 + (int64_t)cg_rng_below(&rng, (uint64_t)(p.V - 3));
                    tout[b][r * T + t] = 3 + (int64_t)cg_rng_below(&rng, (uint64_t)(p.V - 3));
                }
                tin[b][r * T] = CG_BOS;
                for (int64_t t = 1; t < T; t++)
                    tin[b][r * T + t] = tout[b][r * T + t - 1];
            }
        }
    }

    double *times = malloc((size_t)steps * sizeof(double));
    double *cpu = malloc((size_t)steps * sizeof(double)); /* process CPU time per step */
    double *exposed = malloc((size_t)steps * sizeof(double)); /* communication not hidden */
    if (!cg_dist_broadcast_module(model)) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    float last_loss = NAN;
    double rss10 = NAN, rss_last = NAN; /* RSS after the 10th step (warm-up included), the last */
    for (long i = 0; i < warmup + steps; i++) {
        int b = (int)(i % NB);
        bm.src = src[b], bm.tin = tin[b], bm.tout = tout[b];
        double t0 = cg_now(), c0 = cg_cpu_now(), comm0 = cg_dist_comm_seconds(), loss, ntok;
        cg_step_result r = cg_stepper_step(&st, i + 1, &loss, &ntok);
        last_loss = (float)loss;
        if (r != CG_STEP_OK) {
            fprintf(stderr, "bench: step %ld failed: %s\n", i, cg_last_error());
            return 1;
        }
        double dt = cg_now() - t0;
        if (i == 9)
            rss10 = rss_now_mb();
        if (i == warmup + steps - 1) /* here, not after the code below faults its pages in */
            rss_last = rss_now_mb();
        if (i >= warmup) {
            times[i - warmup] = dt;
            cpu[i - warmup] = cg_cpu_now() - c0;
            exposed[i - warmup] = st.reducer ? cg_dist_reducer_exposed_seconds(st.reducer)
                                             : cg_dist_comm_seconds() - comm0;
        }
    }
    if (!isfinite(last_loss)) {
        fprintf(stderr, "bench: non-finite loss %g\n", (double)last_loss);
        return 1;
    }
    qsort(times, (size_t)steps, sizeof(double), cmp_double);
    qsort(cpu, (size_t)steps, sizeof(double), cmp_double);
    qsort(exposed, (size_t)steps, sizeof(double), cmp_double);
    double emed = steps % 2 ? exposed[steps / 2] : 0.5 * (exposed[steps / 2 - 1] + exposed[steps / 2]);
    double med = steps % 2 ? times[steps / 2] : 0.5 * (times[steps / 2 - 1] + times[steps / 2]);
    double cmed = steps % 2 ? cpu[steps / 2] : 0.5 * (cpu[steps / 2 - 1] + cpu[steps / 2]);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    /* the largest over ranks (collective: every rank reaches it) */
    double worst[2] = {(double)ru.ru_maxrss / 1024.0, (double)cg_optim_state_bytes(st.opt) / 1e6};
    if (!cg_dist_allreduce_max(worst, 2)) {
        fprintf(stderr, "bench: %s\n", cg_last_error());
        return 1;
    }
    double mfu = flops_step / med / (peak_gflops * 1e9);
    const cg_gemm_path gemm_path = precision == CG_PRECISION_FP32 ? cg_gemm_active_path()
                                   : cg_bf16_native()             ? CG_GEMM_BF16
                                                                  : CG_GEMM_BF16_EMULATED;
    printf("{\"model\": %s, \"preset\": %s, \"precision\": %s, \"threads\": %ld, \"tokens_per_step\": %lld, "
           "\"step_ms_median\": %s, \"tokens_per_s\": %s, \"params\": %lld, "
           "\"peak_rss_mb\": %s, \"mfu\": %s, \"flops_per_step\": %s, "
           "\"gemm_gflops\": %s, \"gemm_path\": %s, \"T\": %lld, \"B\": %lld, \"d\": %lld, "
           "\"cpu_ms_median\": %s, \"final_loss\": %s, \"rss_mb_step10\": %s, "
           "\"rss_mb_last\": %s, \"recompute\": %s, \"ranks\": %d, \"overlap\": %s, "
           "\"comm_exposed_ms_median\": %s, \"zero\": %ld, \"optim_state_mb\": %s, "
           "\"peak_rss_mb_max_rank\": %s}\n",
           CG_JSON_STR(model_name), CG_JSON_STR(preset_name),
           CG_JSON_STR(cg_precision_name(precision)), threads, (long long)tokens,
           CG_JSON_NUM("%.3f", med * 1e3),
           CG_JSON_NUM("%.1f", (double)tokens / med), (long long)n_params,
           CG_JSON_NUM("%.1f", (double)ru.ru_maxrss / 1024.0), CG_JSON_NUM("%.4f", mfu),
           CG_JSON_NUM("%.4g", flops_step), CG_JSON_NUM("%.1f", peak_gflops),
           CG_JSON_STR(cg_gemm_path_name(gemm_path)), (long long)T, (long long)p.B,
           (long long)p.d, CG_JSON_NUM("%.3f", cmed * 1e3), CG_JSON_NUM("%.9g", (double)last_loss),
           CG_JSON_NUM("%.1f", rss10), CG_JSON_NUM("%.1f", rss_last),
           recompute ? "true" : "false", cg_dist_size(), st.reducer ? "true" : "false",
           CG_JSON_NUM("%.3f", emed * 1e3), zero, CG_JSON_NUM("%.2f", worst[1]),
           CG_JSON_NUM("%.1f", worst[0]));

    for (int b = 0; b < NB; b++)
        free(src[b]), free(tin[b]), free(tout[b]);
    free(times);
    free(cpu);
    free(exposed);
    cg_stepper_free(&st);
    cg_module_free(model);
    cg_dist_finalize();
    return 0;
}

int main(int argc, char **argv)
{
    cg_cli_start();
    int rc = run(argc, argv);
    if (rc == 0 && !cg_cli_stdout_ok()) { /* the JSON line is lost */
        fprintf(stderr, "bench: error: %s\n", cg_last_error());
        rc = 1;
    }
    return rc;
}
