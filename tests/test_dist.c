/* Data-parallel equivalence (models/train/dist.h).
 *
 * Run as `mpirun -np 2 test_dist` (meson does when MPI was found) or as one
 * plain process. For each zoo model (tiny config, dropout 0, AdamW):
 *   - every rank builds the model from a different seed, then rank 0's
 *     parameters are broadcast: all ranks must then hold rank 0's values;
 *   - 20 steps: rank r of N takes rows [r*B/N, (r+1)*B/N) of each global
 *     batch of B rows, forward + loss + backward, cg_dist_average_grads,
 *     AdamW step;
 *   - after the run every rank must hold the same parameters (compared with
 *     rank 0's by broadcast), and rank 0 repeats the 20 steps alone on the
 *     full batches: the parameters must agree within 1e-5 (relative to the
 *     largest value of each tensor; attention key biases excepted, whose
 *     true gradient is 0: see cg_test_max_rel_diff in testutil.c).
 * Seq2seq batches are padded, so the ranks see different numbers of non-PAD
 * target tokens: its gradients are averaged with each rank's token count as
 * weight (the mean over all tokens of the global batch, as the 1-rank loss).
 * The char LM has the same number of tokens on every rank (weight 1). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/charlm/charlm.h"
#include "models/train/dist.h"
#include "models/seq2seq/seq2seq.h"
#include "models/train/trainer.h"
#include "optim/optim.h"
#include "testutil.h"

#define STEPS 20
#define B_GLOBAL 4
#define TOL 1e-5

/* ---------------------------------------------------------- helpers */
static cg_optim *make_adamw(cg_module *m)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    cg_optim_param *ps = calloc((size_t)l.n, sizeof *ps);
    ck_assert_ptr_nonnull(ps);
    for (int i = 0; i < l.n; i++)
        ps[i] = (cg_optim_param){l.items[i].name, l.items[i].tensor,
                                 l.items[i].tensor->ndim >= 2 ? 0.01 : 0.0};
    cg_optim_config cfg = cg_adamw_config(3e-3, 0.9, 0.999, 1e-8);
    cg_optim *o = cg_optim_new(&cfg, l.n, ps);
    ck_assert_msg(o != NULL, "%s", cg_last_error());
    free(ps);
    cg_param_list_free(&l);
    return o;
}

/* Largest |a-b| / max|b| over the tensors of two modules with the same
 * layout. */

/* Every rank compares its parameters with rank 0's (bit-exact). */
static void assert_same_on_all_ranks(cg_module *m)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    cg_tensor **copies = calloc((size_t)l.n, sizeof *copies);
    for (int i = 0; i < l.n; i++)
        copies[i] = cg_clone(l.items[i].tensor);
    ck_assert_msg(cg_dist_broadcast_tensors(l.n, copies), "%s", cg_last_error());
    double diff = 0;
    for (int i = 0; i < l.n; i++) {
        const float *x = cg_data(l.items[i].tensor), *y = cg_data(copies[i]);
        for (int64_t k = 0; k < cg_numel(copies[i]); k++)
            diff = fmax(diff, fabs((double)x[k] - (double)y[k]));
        cg_release(copies[i]);
    }
    free(copies);
    cg_param_list_free(&l);
    ck_assert_msg(cg_dist_allreduce_max(&diff, 1), "%s", cg_last_error());
    ck_assert_msg(diff == 0, "parameters differ between ranks by %g", diff);
}

/* ------------------------------------------------------------ char LM */
#define LM_T 8

static cg_charlm_config lm_config(void)
{
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = 16;
    c.d = 16;
    c.H = 2;
    c.layers = 2;
    c.d_ff = 32;
    c.max_len = 16;
    c.dropout = 0;
    return c;
}

/* Global batch of step s: B_GLOBAL rows of LM_T inputs and targets. */
static void lm_batch(int s, int64_t *x, int64_t *y)
{
    cg_rng r = cg_rng_new(1000 + (uint64_t)s);
    for (int i = 0; i < B_GLOBAL * LM_T; i++) {
        x[i] = (int64_t)cg_rng_below(&r, 16);
        y[i] = (int64_t)cg_rng_below(&r, 16);
    }
}

/* STEPS steps on rows [r0, r1) of every global batch. */
static void lm_train(cg_charlm *m, int r0, int r1, bool dist)
{
    cg_optim *o = make_adamw(CG_MODULE(m));
    int64_t x[B_GLOBAL * LM_T], y[B_GLOBAL * LM_T];
    for (int s = 0; s < STEPS; s++) {
        lm_batch(s, x, y);
        cg_optim_zero_grad(o);
        cg_tensor *logits = cg_charlm_forward(m, x + r0 * LM_T, r1 - r0, LM_T);
        cg_tensor *loss = cg_charlm_loss(m, logits, y + r0 * LM_T);
        ck_assert_msg(loss != NULL, "%s", cg_last_error());
        ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
        cg_release_all(2, logits, loss);
        if (dist)
            ck_assert_msg(cg_dist_average_grads(CG_MODULE(m), 1.0), "%s", cg_last_error());
        ck_assert_msg(cg_optim_step(o), "%s", cg_last_error());
    }
    cg_optim_free(o);
}

START_TEST(test_charlm_equivalence)
{
    int rank = cg_dist_rank(), size = cg_dist_size();
    ck_assert_int_eq(B_GLOBAL % size, 0);
    cg_charlm_config c = lm_config();
    cg_charlm *m = cg_charlm_new(&c, cg_dist_rank_seed(7));
    ck_assert_ptr_nonnull(m);
    ck_assert_msg(cg_dist_broadcast_module(CG_MODULE(m)), "%s", cg_last_error());
    assert_same_on_all_ranks(CG_MODULE(m));

    int per = B_GLOBAL / size;
    cg_dist_reset_stats();
    lm_train(m, rank * per, (rank + 1) * per, true);
    assert_same_on_all_ranks(CG_MODULE(m));
    if (size > 1)
        ck_assert(cg_dist_comm_bytes() > 0);

    if (rank == 0) {
        cg_charlm *ref = cg_charlm_new(&c, 7);
        lm_train(ref, 0, B_GLOBAL, false);
        char worst[128] = "";
        double rel = cg_test_max_rel_diff(CG_MODULE(m), CG_MODULE(ref), worst, sizeof worst);
        cg_charlm *init = cg_charlm_new(&c, 7);
        double moved = cg_test_max_rel_diff(CG_MODULE(init), CG_MODULE(ref), NULL, 0);
        fprintf(stderr, "charlm: %d ranks vs 1 rank after %d steps: max rel diff %.3g (%s); "
                "training moved the parameters by %.3g\n", size, STEPS, rel, worst, moved);
        ck_assert_msg(rel <= TOL, "charlm: %d-rank and 1-rank parameters differ by %g (%s)",
                      size, rel, worst);
        ck_assert(moved > 1e-3); /* the test would prove nothing otherwise */
        cg_charlm_free(ref);
        cg_charlm_free(init);
    }
    cg_charlm_free(m);
}
END_TEST

/* ------------------------------------------------------------ seq2seq */
#define S2S_S 7
#define S2S_T 6
#define S2S_V 12

static cg_seq2seq_config s2s_config(void)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = S2S_V;
    c.d = 16;
    c.H = 2;
    c.enc_layers = 1;
    c.dec_layers = 1;
    c.d_ff = 32;
    c.max_len = 16;
    c.dropout = 0;
    c.label_smoothing = 0.1f;
    return c;
}

/* Padded global batch of step s; rows have random lengths. */
static void s2s_batch(int s, int64_t *src, int64_t *tin, int64_t *tout)
{
    cg_rng r = cg_rng_new(5000 + (uint64_t)s);
    for (int b = 0; b < B_GLOBAL; b++) {
        int ls = 1 + (int)cg_rng_below(&r, S2S_S);       /* 1..S source tokens */
        int lt = 1 + (int)cg_rng_below(&r, S2S_T - 1);   /* 1..T-1 target tokens */
        for (int i = 0; i < S2S_S; i++)
            src[b * S2S_S + i] = i < ls ? 3 + (int64_t)cg_rng_below(&r, S2S_V - 3) : CG_PAD;
        int64_t y[S2S_T];
        for (int i = 0; i < lt; i++)
            y[i] = 3 + (int64_t)cg_rng_below(&r, S2S_V - 3);
        for (int i = 0; i < S2S_T; i++) {
            tin[b * S2S_T + i] = i == 0 ? CG_BOS : i <= lt ? y[i - 1] : CG_PAD;
            tout[b * S2S_T + i] = i < lt ? y[i] : i == lt ? CG_EOS : CG_PAD;
        }
    }
}

static void s2s_train(cg_seq2seq *m, int r0, int r1, bool dist)
{
    cg_optim *o = make_adamw(CG_MODULE(m));
    int64_t src[B_GLOBAL * S2S_S], tin[B_GLOBAL * S2S_T], tout[B_GLOBAL * S2S_T];
    for (int s = 0; s < STEPS; s++) {
        s2s_batch(s, src, tin, tout);
        cg_optim_zero_grad(o);
        cg_tensor *logits = cg_seq2seq_forward(m, src + r0 * S2S_S, r1 - r0, S2S_S,
                                               tin + r0 * S2S_T, S2S_T);
        cg_tensor *loss = cg_seq2seq_loss(m, logits, tout + r0 * S2S_T);
        ck_assert_msg(loss != NULL, "%s", cg_last_error());
        ck_assert_msg(cg_backward(loss, NULL, false), "%s", cg_last_error());
        cg_release_all(2, logits, loss);
        if (dist) {
            double tokens = 0;
            for (int i = r0 * S2S_T; i < r1 * S2S_T; i++)
                tokens += tout[i] != CG_PAD;
            ck_assert_msg(cg_dist_average_grads(CG_MODULE(m), tokens), "%s", cg_last_error());
        }
        ck_assert_msg(cg_optim_step(o), "%s", cg_last_error());
    }
    cg_optim_free(o);
}

START_TEST(test_seq2seq_equivalence)
{
    int rank = cg_dist_rank(), size = cg_dist_size();
    cg_seq2seq_config c = s2s_config();
    cg_seq2seq *m = cg_seq2seq_new(&c, cg_dist_rank_seed(11));
    ck_assert_ptr_nonnull(m);
    ck_assert_msg(cg_dist_broadcast_module(CG_MODULE(m)), "%s", cg_last_error());
    assert_same_on_all_ranks(CG_MODULE(m));

    int per = B_GLOBAL / size;
    s2s_train(m, rank * per, (rank + 1) * per, true);
    assert_same_on_all_ranks(CG_MODULE(m));

    if (rank == 0) {
        cg_seq2seq *ref = cg_seq2seq_new(&c, 11);
        s2s_train(ref, 0, B_GLOBAL, false);
        char worst[128] = "";
        double rel = cg_test_max_rel_diff(CG_MODULE(m), CG_MODULE(ref), worst, sizeof worst);
        cg_seq2seq *init = cg_seq2seq_new(&c, 11);
        double moved = cg_test_max_rel_diff(CG_MODULE(init), CG_MODULE(ref), NULL, 0);
        fprintf(stderr, "seq2seq: %d ranks vs 1 rank after %d steps: max rel diff %.3g (%s); "
                "training moved the parameters by %.3g\n", size, STEPS, rel, worst, moved);
        ck_assert_msg(rel <= TOL, "seq2seq: %d-rank and 1-rank parameters differ by %g (%s)",
                      size, rel, worst);
        ck_assert(moved > 1e-3);
        cg_seq2seq_free(ref);
        cg_seq2seq_free(init);
    }
    cg_seq2seq_free(m);
}
END_TEST

/* --grad-accum under MPI (models/train/trainer.h cg_stepper): every rank takes its
 * rows of 2 micro-batches (the two halves of each global batch) per step;
 * the result must equal one rank's plain steps on the whole batches. */
typedef struct {
    int64_t src[B_GLOBAL * S2S_S], tin[B_GLOBAL * S2S_T], tout[B_GLOBAL * S2S_T];
    cg_seq2seq *m;
    int s;
} accum_ctx;

static bool accum_batch(void *self, int k, double *weight, double *tokens)
{
    accum_ctx *a = self;
    if (k == 0)
        s2s_batch(a->s++, a->src, a->tin, a->tout);
    int half = B_GLOBAL / 2, per = half / cg_dist_size(), r0 = k * half + cg_dist_rank() * per;
    double n = 0;
    for (int i = r0 * S2S_T; i < (r0 + per) * S2S_T; i++)
        n += a->tout[i] != CG_PAD;
    *weight = n;
    *tokens = n;
    return true;
}

static cg_tensor *accum_loss(void *self, int k)
{
    accum_ctx *a = self;
    int half = B_GLOBAL / 2, per = half / cg_dist_size(), r0 = k * half + cg_dist_rank() * per;
    cg_tensor *logits = cg_seq2seq_forward(a->m, a->src + r0 * S2S_S, per, S2S_S,
                                           a->tin + r0 * S2S_T, S2S_T);
    cg_tensor *loss = cg_seq2seq_loss(a->m, logits, a->tout + r0 * S2S_T);
    cg_release(logits);
    return loss;
}

static double accum_lr(void *self, int64_t step)
{
    (void)self, (void)step;
    return 3e-3;
}

START_TEST(test_grad_accum_equivalence)
{
    int size = cg_dist_size();
    ck_assert_int_eq((B_GLOBAL / 2) % size, 0);
    cg_seq2seq_config c = s2s_config();
    accum_ctx a = {.m = cg_seq2seq_new(&c, cg_dist_rank_seed(11))};
    ck_assert_ptr_nonnull(a.m);
    ck_assert_msg(cg_dist_broadcast_module(CG_MODULE(a.m)), "%s", cg_last_error());
    cg_trainer_model tm = {.module = CG_MODULE(a.m), .dropout_rng = &a.m->dropout_rng,
                           .optim = cg_adamw_config(3e-3, 0.9, 0.999, 1e-8),
                           .weight_decay_2d = 0.01, .self = &a, .batch = accum_batch,
                           .loss = accum_loss, .lr = accum_lr};
    cg_stepper st;
    ck_assert_msg(cg_stepper_init(&st, &tm, 2), "%s", cg_last_error());
    for (int s = 1; s <= STEPS; s++) {
        double loss, tokens;
        ck_assert_msg(cg_stepper_step(&st, s, &loss, &tokens) == CG_STEP_OK, "%s",
                      cg_last_error());
    }
    cg_stepper_free(&st);
    assert_same_on_all_ranks(CG_MODULE(a.m));
    if (cg_dist_rank() == 0) {
        cg_seq2seq *ref = cg_seq2seq_new(&c, 11);
        s2s_train(ref, 0, B_GLOBAL, false);
        char worst[128] = "";
        double rel = cg_test_max_rel_diff(CG_MODULE(a.m), CG_MODULE(ref), worst, sizeof worst);
        fprintf(stderr, "seq2seq: %d ranks x 2 micro-batches vs 1 rank after %d steps: max rel "
                "diff %.3g (%s)\n", size, STEPS, rel, worst);
        ck_assert_msg(rel <= TOL, "grad-accum: parameters differ by %g (%s)", rel, worst);
        cg_seq2seq_free(ref);
    }
    cg_seq2seq_free(a.m);
}
END_TEST

/* ---------------------------------------------------------- API bits */
START_TEST(test_api)
{
    ck_assert_int_ge(cg_dist_size(), 1);
    ck_assert_int_lt(cg_dist_rank(), cg_dist_size());
    ck_assert(cg_dist_is_root() == (cg_dist_rank() == 0));
    /* Rank 0 keeps the seed; other ranks get distinct, documented seeds. */
    ck_assert_uint_eq(cg_dist_seed_for_rank(42, 0), 42);
    ck_assert_uint_eq(cg_dist_seed_for_rank(42, 1), 42 ^ 0x9E3779B97F4A7C15ULL);
    ck_assert_uint_ne(cg_dist_seed_for_rank(42, 1), cg_dist_seed_for_rank(42, 2));
    double v[2] = {1.0, (double)cg_dist_rank()};
    ck_assert(cg_dist_allreduce_sum(v, 2));
    ck_assert(v[0] == (double)cg_dist_size());
    ck_assert(v[1] == (double)cg_dist_size() * (cg_dist_size() - 1) / 2);
    /* Gradients: rank r holds r+1 everywhere with weight r+1: the weighted
     * mean is sum (r+1)^2 / sum (r+1). A parameter with a gradient on no
     * rank keeps none. */
    cg_tensor *p[2] = {cg_requires_grad(cg_zeros(CG_SHAPE(3, 5)), true),
                       cg_requires_grad(cg_zeros(CG_SHAPE(2)), true)};
    p[0]->grad = cg_full(CG_SHAPE(3, 5), (float)(cg_dist_rank() + 1));
    ck_assert_msg(cg_dist_average_grads_tensors(2, p, cg_dist_rank() + 1.0), "%s",
                  cg_last_error());
    double num = 0, den = 0;
    for (int r = 0; r < cg_dist_size(); r++) {
        num += (r + 1.0) * (r + 1.0);
        den += r + 1.0;
    }
    for (int k = 0; k < 15; k++)
        ck_assert_float_eq_tol(cg_data(p[0]->grad)[k], num / den, 1e-6);
    ck_assert_ptr_null(p[1]->grad);
    ck_assert(!cg_dist_average_grads_tensors(2, p, -1.0));
    ck_assert(strstr(cg_last_error(), "weight") != NULL || cg_dist_size() == 1);
    cg_release_all(2, p[0], p[1]);
}
END_TEST

static Suite *dist_suite(void)
{
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, test_api);
    suite_add_tcase(s, tc);
    tc = tcase_create("equivalence");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_charlm_equivalence);
    tcase_add_test(tc, test_seq2seq_equivalence);
    tcase_add_test(tc, test_grad_accum_equivalence);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    if (!cg_dist_init(&argc, &argv)) {
        fprintf(stderr, "test_dist: %s\n", cg_last_error());
        return 1;
    }
    if (cg_dist_is_root())
        fprintf(stderr, "test_dist: %d rank(s), built %s MPI\n", cg_dist_size(),
                cg_dist_compiled_with_mpi() ? "with" : "without");
    SRunner *sr = srunner_create(dist_suite());
    srunner_set_fork_status(sr, CK_NOFORK); /* MPI and fork do not mix */
    srunner_run_all(sr, cg_dist_is_root() ? CK_NORMAL : CK_SILENT);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* A rank whose check failed must fail the whole job. */
    double f = failed;
    cg_dist_allreduce_max(&f, 1);
    cg_dist_finalize();
    return f > 0 ? 1 : 0;
}
