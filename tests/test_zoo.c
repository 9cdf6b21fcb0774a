/* Check suites for the zoo's char-LM tooling: key/value-cached decoding,
 * sampling, checkpoints, and the charlm program end to end (exact resume,
 * and one clear error line for every kind of bad input).
 *
 * The program is run from the build tree: $CHARLM_BIN if set, else
 * ../models/charlm/charlm relative to this test binary. Training runs use a model
 * with a few thousand parameters on a few kilobytes of text. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "autograd/checkpoint.h"
#include "core/gemm.h"
#include "core/parse.h"
#include "models/charlm/charlm.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/util/cli.h"
#include "models/data/data.h"
#include "models/charlm/sampling.h"
#include "models/train/average.h"
#include "models/train/checkpoint.h"
#include "models/train/finetune.h"
#include "models/train/options.h"
#include "models/train/prog.h"
#include "models/train/program.h"
#include "models/train/run.h"
#include "models/train/stepper.h"
#include "models/train/train_common.h"
#include "models/text/vocab.h"
#include "testutil.h"

/* ---------------------------------------------------------------- helpers */
static cg_charlm *tiny_model(bool norm_first, cg_norm_kind norm, cg_act act, uint64_t seed)
{
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = 23;
    c.d = 16;
    c.H = 2;
    c.layers = 2;
    c.d_ff = 24;
    c.max_len = 12;
    c.norm_first = norm_first;
    c.norm = norm;
    c.act = act;
    cg_charlm *m = cg_charlm_new(&c, seed);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    cg_module_train(CG_MODULE(m), false);
    return m;
}

static void check_cache_matches(cg_charlm *m)
{
    const int64_t T = 12, V = m->cfg.vocab;
    int64_t ids[12];
    cg_rng r = cg_rng_new(7);
    for (int64_t i = 0; i < T; i++)
        ids[i] = (int64_t)cg_rng_below(&r, (uint64_t)V);
    cg_no_grad_begin();
    cg_tensor *full = cg_charlm_forward(m, ids, 1, T);
    cg_no_grad_end();
    ck_assert_msg(full != NULL, "%s", cg_last_error());
    float *want = cg_test_values(full);
    cg_release(full);

    cg_kv_cache *c = cg_charlm_kv_cache_new(m);
    ck_assert_ptr_nonnull(c);
    /* a prefill of 5 positions, then one at a time */
    cg_tensor *l = cg_charlm_forward_cached(m, c, ids, 1, 5);
    ck_assert_msg(l != NULL, "%s", cg_last_error());
    float *got = cg_test_values(l);
    CG_ASSERT_CLOSE(got, want, 5 * V, 1e-5, 1e-4);
    free(got);
    cg_release(l);
    for (int64_t t = 5; t < T; t++) {
        l = cg_charlm_forward_cached(m, c, ids + t, 1, 1);
        ck_assert_msg(l != NULL, "%s", cg_last_error());
        got = cg_test_values(l);
        CG_ASSERT_CLOSE(got, want + t * V, V, 1e-5, 1e-4);
        free(got);
        cg_release(l);
    }
    ck_assert_int_eq(cg_kv_cache_len(c), T);
    /* full: one more position is an error, not a crash */
    CG_ASSERT_FAILS(cg_charlm_forward_cached(m, c, ids, 1, 1), "max_len");
    /* after a reset: 3 positions, then 4 at once (causal among themselves
     * and after the cached ones) */
    cg_kv_cache_reset(c);
    l = cg_charlm_forward_cached(m, c, ids, 1, 3);
    cg_release(l);
    l = cg_charlm_forward_cached(m, c, ids + 3, 1, 4);
    ck_assert_msg(l != NULL, "%s", cg_last_error());
    got = cg_test_values(l);
    CG_ASSERT_CLOSE(got, want + 3 * V, 4 * V, 1e-5, 1e-4);
    free(got);
    cg_release(l);
    /* two rows, then the second row alone (reorder): still the full logits */
    int64_t two[2] = {ids[0], ids[0]};
    cg_kv_cache_reset(c);
    l = cg_charlm_forward_cached(m, c, two, 2, 1);
    cg_release(l);
    ck_assert(cg_kv_cache_reorder(c, cg_test_ids(1, (const int64_t[]){1})));
    l = cg_charlm_forward_cached(m, c, ids + 1, 1, 1);
    ck_assert_msg(l != NULL, "%s", cg_last_error());
    got = cg_test_values(l);
    CG_ASSERT_CLOSE(got, want + V, V, 1e-5, 1e-4);
    free(got);
    cg_release(l);
    CG_ASSERT_FAILS(cg_kv_cache_reorder(c, cg_test_ids(1, (const int64_t[]){1})), "outside");
    cg_kv_cache_free(c);
    free(want);
}

START_TEST(test_kv_cache_matches_full)
{
    cg_charlm *m = tiny_model(true, CG_NORM_LAYERNORM, CG_ACT_GELU, 3);
    check_cache_matches(m);
    cg_charlm_free(m);
    m = tiny_model(false, CG_NORM_RMSNORM, CG_ACT_RELU, 4);
    check_cache_matches(m);
    cg_charlm_free(m);
}
END_TEST

/* Hugging Face's logit rules: the repetition penalty divides a positive
 * logit and multiplies a negative one, once an id however often it occurs;
 * the n-gram rule blocks what would repeat one; generation applies them
 * over the prompt and what it drew (greedy: each id the argmax of its
 * recomputed logits under the rules), and no 3-gram then occurs twice. */
START_TEST(test_logit_rules)
{
    float l[6] = {2.0f, -1.0f, 0.5f, 3.0f, -4.0f, 1.0f};
    const int64_t ids[] = {0, 1, 0, 7, -1, 4, 1};
    cg_logit_rules r = {.repetition_penalty = 2.0, .no_repeat_ngram_size = 0};
    ck_assert(cg_logit_rules_apply(&r, ids, 7, l, 6));
    const float want[6] = {1.0f, -2.0f, 0.5f, 3.0f, -8.0f, 1.0f};
    ck_assert_mem_eq(l, want, sizeof l);
    cg_logit_rules off = cg_logit_rules_default();
    ck_assert(!cg_logit_rules_apply(&off, ids, 7, l, 6) &&
              !cg_logit_rules_apply(NULL, ids, 7, l, 6));
    cg_logit_rules ng = {.repetition_penalty = 1.0, .no_repeat_ngram_size = 2};
    const int64_t h[] = {3, 5, 2, 3}; /* "3 5" is there: after 3, 5 is blocked */
    ck_assert(cg_logit_rules_apply(&ng, h, 4, l, 6) && l[5] == -INFINITY && l[2] == 0.5f);
    CG_ASSERT_FAILS(cg_logit_rules_check(&(cg_logit_rules){0.0, 0}), "repetition_penalty is 0");
    CG_ASSERT_FAILS(cg_logit_rules_check(&(cg_logit_rules){NAN, 0}), "repetition_penalty is nan");
    CG_ASSERT_FAILS(cg_logit_rules_check(&(cg_logit_rules){1.0, -1}), "no_repeat_ngram_size is -1");

    cg_charlm *m = tiny_model(true, CG_NORM_LAYERNORM, CG_ACT_GELU, 5);
    const int64_t V = m->cfg.vocab, prompt[3] = {1, 2, 3};
    cg_sample_opts g = {.temperature = 0, .top_k = 0, .top_p = 1};
    const cg_logit_rules rules[2] = {{1.7, 0}, {1.0, 3}};
    for (int k = 0; k < 2; k++) {
        cg_rng rr = cg_rng_new(1);
        int64_t *a = cg_charlm_generate_ex(m, prompt, 3, 8, &g, &rules[k], &rr, true, NULL, NULL);
        ck_assert_msg(a != NULL, "%s", cg_last_error());
        for (int64_t len = 3; len < 11; len++) {
            cg_no_grad_begin();
            cg_tensor *lg = cg_charlm_forward(m, a, 1, len);
            cg_tensor *c = lg ? cg_contiguous(lg) : NULL;
            cg_no_grad_end();
            ck_assert_ptr_nonnull(c);
            float row[64];
            ck_assert(V <= 64);
            memcpy(row, cg_data(c) + (len - 1) * V, (size_t)V * sizeof *row);
            cg_release_all(2, lg, c);
            cg_logit_rules_apply(&rules[k], a, len, row, V);
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                best = row[v] > row[best] ? v : best;
            ck_assert_int_eq(a[len], best);
        }
        for (int i = 0; k == 1 && i + 3 <= 11; i++)
            for (int j = i + 1; j + 3 <= 11; j++)
                ck_assert_msg(memcmp(a + i, a + j, 3 * sizeof *a) != 0, "3-gram at %d and %d", i,
                              j);
        free(a);
    }
    /* a rule blocking every id fails, saying so */
    cg_rng rb = cg_rng_new(1);
    CG_ASSERT_FAILS(cg_charlm_generate_ex(m, prompt, 3, 40, &g, &(cg_logit_rules){1.0, 1}, &rb,
                                          true, NULL, NULL),
                    "no_repeat_ngram_size 1 leaves no token to draw");
    CG_ASSERT_FAILS(cg_charlm_generate_ex(m, prompt, 3, 4, &g, &(cg_logit_rules){-1.0, 0}, &rb,
                                          true, NULL, NULL),
                    "generate: logit rules: repetition_penalty is -1");
    cg_charlm_free(m);
}
END_TEST

START_TEST(test_sampling_reproducible)
{
    cg_charlm *m = tiny_model(true, CG_NORM_LAYERNORM, CG_ACT_GELU, 5);
    int64_t prompt[3] = {1, 2, 3};
    cg_sample_opts o = {.temperature = 1.0, .top_k = 5, .top_p = 0.9};
    /* 30 new tokens: past max_len (12), so the window slides */
    cg_rng r1 = cg_rng_new(11), r2 = cg_rng_new(11), r3 = cg_rng_new(12);
    int64_t *a = cg_charlm_generate(m, prompt, 3, 30, &o, &r1, true, NULL, NULL);
    int64_t *b = cg_charlm_generate(m, prompt, 3, 30, &o, &r2, true, NULL, NULL);
    int64_t *c = cg_charlm_generate(m, prompt, 3, 30, &o, &r3, true, NULL, NULL);
    ck_assert(a && b && c);
    ck_assert_mem_eq(a, b, 33 * sizeof *a);
    ck_assert_msg(memcmp(a, c, 33 * sizeof *a) != 0, "another seed gave the same sample");
    for (int i = 0; i < 33; i++)
        ck_assert(a[i] >= 0 && a[i] < m->cfg.vocab);
    /* the uncached path draws the same tokens */
    cg_rng r4 = cg_rng_new(11);
    int64_t *d = cg_charlm_generate(m, prompt, 3, 30, &o, &r4, false, NULL, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_mem_eq(a, d, 33 * sizeof *a);
    free(a);
    free(b);
    free(c);
    free(d);
    /* greedy and top-k 1 agree */
    cg_sample_opts g = {.temperature = 0, .top_k = 0, .top_p = 1}, k1 = {1.0, 1, 1.0};
    cg_rng r5 = cg_rng_new(1), r6 = cg_rng_new(2);
    a = cg_charlm_generate(m, prompt, 3, 10, &g, &r5, true, NULL, NULL);
    b = cg_charlm_generate(m, prompt, 3, 10, &k1, &r6, true, NULL, NULL);
    ck_assert(a && b);
    ck_assert_mem_eq(a, b, 13 * sizeof *a);
    free(a);
    free(b);
    cg_charlm_free(m);
}
END_TEST

/* Past max_len the window is the last max_len tokens (the reference's
 * idx[:, -max_len:]): each greedy token, cached or not, is the argmax of a
 * full forward over exactly those. */
START_TEST(test_generate_window_past_max_len)
{
    cg_charlm *m = tiny_model(true, CG_NORM_LAYERNORM, CG_ACT_GELU, 5);
    const int64_t L = m->cfg.max_len, V = m->cfg.vocab, n_new = 2 * L;
    int64_t prompt[3] = {1, 2, 3};
    cg_sample_opts g = {.temperature = 0, .top_k = 0, .top_p = 1};
    for (int cache = 0; cache < 2; cache++) {
        cg_rng r = cg_rng_new(1);
        int64_t *a = cg_charlm_generate(m, prompt, 3, n_new, &g, &r, cache, NULL, NULL);
        ck_assert_msg(a != NULL, "%s", cg_last_error());
        for (int64_t len = 3; len < 3 + n_new; len++) {
            int64_t w = len < L ? len : L;
            cg_no_grad_begin();
            cg_tensor *l = cg_charlm_forward(m, a + len - w, 1, w);
            cg_no_grad_end();
            ck_assert_ptr_nonnull(l);
            cg_tensor *c = cg_contiguous(l);
            const float *d = cg_data(c) + (w - 1) * V;
            int64_t best = 0;
            for (int64_t v = 1; v < V; v++)
                best = d[v] > d[best] ? v : best;
            ck_assert_msg(a[len] == best,
                          "cache %d: token %lld is %lld, the argmax over the last %lld %lld", cache,
                          (long long)len, (long long)a[len], (long long)w, (long long)best);
            cg_release_all(2, l, c);
        }
        free(a);
    }
    cg_charlm_free(m);
}
END_TEST

/* charlm sample's flags as docs/zoo.md gives them: --temperature 1, no
 * top-k, --top-p 1 and --seed 1 by default; --top-p 0 (no mass to keep) is
 * refused, 0 < p <= 1 taken. */
START_TEST(test_sample_flag_defaults)
{
    cg_sample_opts o;
    uint64_t seed;
    cg_cli_opt opts[8];
    int n = cg_sample_cli_opts(&o, &seed, opts);
    ck_assert(n == 4 && o.temperature == 1.0 && o.top_k == 0 && o.top_p == 1.0 && seed == 1);
    bool help;
    char *zero[] = {"--top-p", "0"}, *small[] = {"--top-p", "1e-6", "--temperature", "0"};
    cg_clear_error();
    ck_assert(!cg_cli_parse(2, zero, opts, n, &help));
    ck_assert_msg(strstr(cg_last_error(), "--top-p"), "%s", cg_last_error());
    ck_assert(cg_cli_parse(4, small, opts, n, &help) && o.top_p == 1e-6 && o.temperature == 0);
}
END_TEST

/* Decoding in bf16 (the packed bf16 weights): the cached sampler draws the
 * tokens of the uncached one, its logits stay within bf16 rounding of the
 * fp32 ones, and switching back to fp32 gives the fp32 tokens again. */
START_TEST(test_sampling_bf16)
{
    cg_charlm *m = tiny_model(true, CG_NORM_LAYERNORM, CG_ACT_GELU, 8);
    int64_t prompt[3] = {1, 2, 3};
    cg_sample_opts o = {.temperature = 1.0, .top_k = 0, .top_p = 1};
    cg_rng r0 = cg_rng_new(13);
    int64_t *f32 = cg_charlm_generate(m, prompt, 3, 30, &o, &r0, true, NULL, NULL);
    ck_assert_ptr_nonnull(f32);
    cg_no_grad_begin();
    cg_tensor *l32 = cg_charlm_forward(m, prompt, 1, 3);
    cg_no_grad_end();
    ck_assert_ptr_nonnull(l32);
    cg_set_matmul_precision(CG_PRECISION_BF16);
    cg_rng r1 = cg_rng_new(13), r2 = cg_rng_new(13);
    int64_t *a = cg_charlm_generate(m, prompt, 3, 30, &o, &r1, true, NULL, NULL);
    int64_t *b = cg_charlm_generate(m, prompt, 3, 30, &o, &r2, false, NULL, NULL);
    ck_assert(a && b);
    ck_assert_mem_eq(a, b, 33 * sizeof *a); /* 30 tokens: the window slides */
    /* the cached logits: bf16 products, close to fp32 */
    cg_kv_cache *c = cg_charlm_kv_cache_new(m);
    cg_tensor *l16 = cg_charlm_forward_cached(m, c, prompt, 1, 3);
    ck_assert_msg(l16 != NULL, "%s", cg_last_error());
    float *v32 = cg_test_values(l32), *v16 = cg_test_values(l16);
    CG_ASSERT_CLOSE(v16, v32, 3 * m->cfg.vocab, 2e-2, 2e-2);
    ck_assert_msg(memcmp(v16, v32, (size_t)(3 * m->cfg.vocab) * sizeof(float)) != 0,
                  "bf16 decoding gave the fp32 bits: the products did not run in bf16");
    free(v32);
    free(v16);
    cg_release_all(2, l16, l32);
    cg_kv_cache_free(c);
    cg_set_matmul_precision(CG_PRECISION_FP32);
    cg_rng r3 = cg_rng_new(13);
    int64_t *d = cg_charlm_generate(m, prompt, 3, 30, &o, &r3, true, NULL, NULL);
    ck_assert_ptr_nonnull(d);
    ck_assert_mem_eq(d, f32, 33 * sizeof *d);
    free(a);
    free(b);
    free(d);
    free(f32);
    cg_charlm_free(m);
}
END_TEST

START_TEST(test_sample_logits_filters)
{
    float logits[5] = {0.f, 3.f, 1.f, 2.9f, -1.f};
    cg_sample_opts o = {.temperature = 1.0, .top_k = 2, .top_p = 1};
    cg_rng r = cg_rng_new(9);
    for (int i = 0; i < 200; i++) {
        int64_t id = cg_sample(logits, 5, &o, &r);
        ck_assert(id == 1 || id == 3);
    }
    o = (cg_sample_opts){.temperature = 1.0, .top_k = 0, .top_p = 0.3};
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(cg_sample(logits, 5, &o, &r), 1);
    o.top_p = 0; /* invalid */
    ck_assert_int_eq(cg_sample(logits, 5, &o, &r), -1);
}
END_TEST

static char g_tmp[PATH_MAX];

static void make_tmpdir(void) { cg_test_mkdtemp(g_tmp, sizeof g_tmp, "cgrad_zoo_"); }

static void rm_tmpdir(void)
{
    cg_test_rm_tree(g_tmp);
    ck_assert_msg(access(g_tmp, F_OK) != 0, "%s was not removed", g_tmp);
}

static char *tmp_path(const char *name)
{
    static char buf[4][PATH_MAX + 256];
    static int k = 0;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%.200s", g_tmp, name);
    return p;
}

START_TEST(test_checkpoint_round_trip)
{
    make_tmpdir();
    cg_charlm *m = tiny_model(false, CG_NORM_LAYERNORM, CG_ACT_GELU, 6);
    uint32_t cps[23];
    for (int i = 0; i < 23; i++)
        cps[i] = i < 20 ? (uint32_t)('a' + i) : (uint32_t[]){0xE4, 0x20AC, 0x1F600}[i - 20];
    cg_vocab *v = cg_vocab_from_codepoints(cps, 23);
    ck_assert_ptr_nonnull(v);
    const char *path = tmp_path("m.safetensors");
    ck_assert_msg(cg_charlm_ckpt_save(path, m, v, NULL, 42, NULL), "%s", cg_last_error());
    cg_charlm_ckpt ck;
    ck_assert_msg(cg_charlm_ckpt_load(path, &ck), "%s", cg_last_error());
    ck_assert_int_eq(ck.step, 42);
    ck_assert_int_eq(ck.vocab->n, 23);
    ck_assert_mem_eq(ck.vocab->chars, v->chars, 23 * sizeof(uint32_t));
    ck_assert(!ck.model->cfg.norm_first);
    int64_t prompt[2] = {4, 5};
    cg_sample_opts o = {.temperature = 0.8, .top_k = 0, .top_p = 1};
    cg_rng r1 = cg_rng_new(3), r2 = cg_rng_new(3);
    int64_t *a = cg_charlm_generate(m, prompt, 2, 20, &o, &r1, true, NULL, NULL);
    int64_t *b = cg_charlm_generate(ck.model, prompt, 2, 20, &o, &r2, true, NULL, NULL);
    ck_assert(a && b);
    ck_assert_mem_eq(a, b, 22 * sizeof *a);
    char *ta = cg_vocab_decode(v, a, 22), *tb = cg_vocab_decode(ck.vocab, b, 22);
    ck_assert_str_eq(ta, tb);
    free(ta);
    free(tb);
    free(a);
    free(b);
    cg_charlm_ckpt_free(&ck);
    /* the save makes its directories (as mkdir -p); a checkpoint needs its tokenizer */
    const char *deep = tmp_path("runs/a/m.safetensors");
    ck_assert_msg(cg_charlm_ckpt_save(deep, m, v, NULL, 7, NULL), "%s", cg_last_error());
    ck_assert_msg(cg_charlm_ckpt_load(deep, &ck), "%s", cg_last_error());
    ck_assert_int_eq(ck.step, 7);
    cg_charlm_ckpt_free(&ck);
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_ckpt_save(path, "charlm", "{}", NULL, CG_MODULE(m), NULL, 1, NULL),
        "no tokenizer");
    cg_vocab_free(v);
    cg_charlm_free(m);
    rm_tmpdir();
}
END_TEST

/* A file of metadata only, for cg_ckpt_open: model, config, vocab and step
 * each NULL to leave it out. */
static void meta_file(const char *path, const char *model, const char *config, const char *vocab,
                      const char *step)
{
    cg_st_writer *w = cg_st_writer_new();
    const float one = 1;
    ck_assert(w && cg_st_add_f32_raw(w, "x", 1, (int64_t[]){1}, &one));
    const char *keys[] = {"model", "config", "vocab", "step"},
               *vals[] = {model, config, vocab, step};
    for (int i = 0; i < 4; i++)
        ck_assert(!vals[i] || cg_st_set_metadata(w, keys[i], vals[i]));
    ck_assert_msg(cg_st_writer_save(w, path), "%s", cg_last_error());
    cg_st_writer_free(w);
}

/* cg_ckpt_open names what is wrong with a checkpoint's metadata: another
 * model's (quoted) or none recorded, no config or vocab, a step that is
 * not a plain integer in [0, 1e15]. */
START_TEST(test_ckpt_open_refusals)
{
    make_tmpdir();
    const char *p = tmp_path("c.safetensors");
    meta_file(p, "charlm", "{}", "[]", "12");
    cg_st_file *f = cg_ckpt_open(p, "charlm");
    ck_assert_msg(f && cg_ckpt_step(f) == 12, "%s", cg_last_error());
    cg_st_close(f);
    static const struct {
        const char *model, *config, *vocab, *step, *err;
    } bad[] = {
        {"seq2seq", "{}", "[]", "1", "is not a charlm checkpoint (its model is 'seq2seq')"},
        {NULL, "{}", "[]", "1", "is not a charlm checkpoint (its model is not recorded)"},
        {"charlm", NULL, "[]", "1", "lacks its config metadata"},
        {"charlm", "{}", NULL, "1", "lacks its vocab metadata"},
        {"charlm", "{}", "[]", "12x", "bad step '12x'"},
        {"charlm", "{}", "[]", "-1", "bad step '-1'"},
        {"charlm", "{}", "[]", "+1", "bad step '+1'"},
        {"charlm", "{}", "[]", " 1", "bad step ' 1'"},
        {"charlm", "{}", "[]", "1000000000000001", "bad step '1000000000000001'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        meta_file(p, bad[i].model, bad[i].config, bad[i].vocab, bad[i].step);
        cg_clear_error();
        ck_assert_msg(cg_ckpt_open(p, "charlm") == NULL, "case %zu opened", i);
        ck_assert_msg(strstr(cg_last_error(), bad[i].err), "case %zu: %s", i, cg_last_error());
    }
    rm_tmpdir();
}
END_TEST

START_TEST(test_vocab_and_utf8)
{
    const char *s = "b\xC3\xA4"
                    "a\r\nb\rc";
    int64_t n;
    uint32_t *cps = cg_utf8_decode(s, strlen(s), "s", &n);
    ck_assert_ptr_nonnull(cps);
    ck_assert_int_eq(n, 7); /* b ä a \n b \n c */
    ck_assert_uint_eq(cps[1], 0xE4);
    ck_assert_uint_eq(cps[3], '\n');
    ck_assert_uint_eq(cps[5], '\n');
    cg_vocab *v = cg_vocab_from_codepoints(cps, n);
    ck_assert_int_eq(v->n, 5); /* \n a b c ä */
    ck_assert_int_eq(cg_vocab_id(v, 'a'), 1);
    ck_assert_int_eq(cg_vocab_id(v, 'z'), -1);
    char *j = cg_vocab_to_json(v);
    cg_vocab *w = cg_vocab_from_json(j);
    ck_assert_ptr_nonnull(w);
    ck_assert_mem_eq(w->chars, v->chars, 5 * sizeof(uint32_t));
    free(j);
    cg_vocab_free(w);
    /* the reference's format, with \u escapes */
    w = cg_vocab_from_json("\"\\n ab\\u00e4\"");
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(w->n, 5);
    ck_assert_int_eq(w->unk, 1); /* the space */
    cg_vocab_free(w);
    CG_ASSERT_FAILS(cg_vocab_from_json("\"ba\""), "increasing");
    CG_ASSERT_FAILS(cg_vocab_from_json("\"aab\""), "increasing"); /* a repeat */
    CG_ASSERT_FAILS(cg_utf8_decode("a\xC3", 2, "x", &n), "UTF-8");
    CG_ASSERT_FAILS(cg_utf8_decode("\xC0\x80", 2, "x", &n), "UTF-8");     /* overlong */
    CG_ASSERT_FAILS(cg_utf8_decode("\xED\xA0\x80", 3, "x", &n), "UTF-8"); /* surrogate */
    uint32_t q[3] = {'a', 'Z', 'b'}, first = 0;
    int64_t ids[3];
    ck_assert_int_eq(cg_vocab_encode(v, q, 3, ids, &first), 1);
    ck_assert_uint_eq(first, 'Z');
    ck_assert_int_eq(ids[1], v->unk);
    /* the last id decodes, the next is refused */
    int64_t edge[2] = {v->n - 1, v->n};
    char *t = cg_vocab_decode(v, edge, 1);
    ck_assert_str_eq(t, "\xC3\xA4");
    free(t);
    CG_ASSERT_FAILS(cg_vocab_decode(v, edge, 2), "token id 5 is outside the vocabulary [0, 5)");
    cg_vocab_free(v);
    free(cps);
    /* an unknown character is read as U+FFFD when the text has one, before
     * the space; a NUL is refused (the saved form would end there) */
    const uint32_t rep[4] = {'a', ' ', 0xFFFD, 'b'}, nul[3] = {'a', 0, 'b'};
    v = cg_vocab_from_codepoints(rep, 4);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(v->unk, cg_vocab_id(v, 0xFFFD));
    cg_vocab_free(v);
    CG_ASSERT_FAILS(cg_vocab_from_codepoints(nul, 3), "NUL character (U+0000) at character 1");
    int64_t i64;
    double f;
    ck_assert(!cg_parse_i64("--steps", "12x", 0, 100, &i64));
    ck_assert(!cg_parse_i64("--steps", "-1", 0, 100, &i64));
    ck_assert(!cg_parse_i64("--steps", "", 0, 100, &i64));
    ck_assert(cg_parse_i64("--steps", "100", 0, 100, &i64) && i64 == 100);
    ck_assert(!cg_parse_f64("--lr", "nan", 0, 1, &f));
    ck_assert(!cg_parse_f64("--lr", "1e-3e", 0, 1, &f));
    ck_assert(cg_parse_f64("--lr", "1e-3", 0, 1, &f) && f == 1e-3);
    /* a number too small for a double is not "not a finite number" */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_f64("--lr", "1e-320", 0, 1, &f),
                    "--lr: '1e-320' is too small in magnitude for a double");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_parse_f64("--lr", "1e400", 0, 1, &f),
                    "--lr: '1e400' is not a finite number");
    cg_clear_error();
}
END_TEST

/* ------------------------------------------------------- flag tables */
/* A train command's flags are one table (models/train/options.h): the parse
 * says which were given (in command-line order), the fixed ones are named
 * for --resume, the saved ones round-trip through a checkpoint's "options",
 * and --help is the rows' lines in order. */
START_TEST(test_flag_table)
{
    int64_t rank = 0, steps = 7;
    double alpha = 1.5;
    bool zero = false;
    const char *name = "fp32";
    const cg_cli_opt opts[] = {
        {NULL, 0, NULL, 0, 0, "heading\n", 0},
        {"--rank", CG_CLI_I64, &rank, 0, 64, "  --rank N\n", CG_CLI_FIXED | CG_CLI_SAVED},
        {"--alpha", CG_CLI_F64, &alpha, 0, 100, "  --alpha A\n", CG_CLI_SAVED},
        {"--zero", CG_CLI_SWITCH, &zero, 0, 0, "  --zero\n", CG_CLI_SAVED},
        {"--name", CG_CLI_STR, &name, 0, 0, NULL, CG_CLI_FIXED | CG_CLI_SAVED},
        {"--steps", CG_CLI_I64, &steps, 1, 100, "  --steps N\n", 0},
    };
    cg_cli_args a = {.opts = opts, .n = 6};
    char *argv[] = {"--name=bf16", "--steps", "9", "--rank", "8", "--zero", "--rank", "4"};
    bool help;
    ck_assert(cg_cli_parse_args(8, argv, &a, &help) && !help);
    ck_assert(rank == 4 && steps == 9 && zero && !strcmp(name, "bf16") && alpha == 1.5);
    ck_assert(cg_cli_given(&a, &rank) && cg_cli_given(&a, &steps) && !cg_cli_given(&a, &alpha));
    ck_assert(!cg_cli_given(NULL, &rank));
    char buf[128];
    ck_assert(cg_cli_given_list(&a, CG_CLI_FIXED, buf, sizeof buf));
    ck_assert_str_eq(buf, "--name, --rank");
    ck_assert(cg_cli_given_list(&a, CG_CLI_SAVED, buf, sizeof buf));
    ck_assert_str_eq(buf, "--name, --rank, --zero");
    char *none[] = {"--alpha", "2"};
    ck_assert(cg_cli_parse_args(2, none, &a, &help));
    ck_assert(!cg_cli_given_list(&a, CG_CLI_FIXED, buf, sizeof buf) && buf[0] == '\0');
    /* saved options: written with their names, read back exactly */
    cJSON *j = cJSON_CreateObject();
    alpha = 0.1;
    ck_assert(cg_train_options_save(&a, j));
    char *text = cJSON_PrintUnformatted(j);
    ck_assert_str_eq(text, "{\"rank\":4,\"alpha\":\"0.10000000000000001\",\"zero\":true,"
                           "\"name\":\"bf16\"}");
    free(text);
    rank = 0;
    alpha = 0;
    zero = false;
    name = "fp32";
    ck_assert(cg_train_options_restore(&a, j, "x"));
    /* --alpha was given (the last parse): the run's own, left as it is */
    ck_assert(rank == 4 && alpha == 0 && zero && !strcmp(name, "bf16"));
    ck_assert(cg_cli_parse_args(0, none, &a, &help)); /* nothing given: all restored */
    ck_assert(cg_train_options_restore(&a, j, "x") && alpha == 0.1);
    /* an option the checkpoint predates keeps its default; a bad one is named */
    cJSON_DeleteItemFromObject(j, "zero");
    zero = false;
    ck_assert(cg_train_options_restore(&a, j, "x") && !zero);
    cJSON_ReplaceItemInObject(j, "rank", cJSON_CreateNumber(65));
    ck_assert(!cg_train_options_restore(&a, j, "x"));
    ck_assert_msg(strstr(cg_last_error(), "x: \"rank\" is 65"), "%s", cg_last_error());
    ck_assert(cg_train_options_restore(&a, NULL, "x")); /* written before options */
    cJSON_Delete(j);
    /* --help: the rows' lines in table order */
    char *hb = NULL;
    size_t hn = 0;
    FILE *hf = open_memstream(&hb, &hn);
    cg_cli_help(hf, opts, 6);
    fclose(hf);
    ck_assert_str_eq(hb, "heading\n  --rank N\n  --alpha A\n  --zero\n  --steps N\n");
    free(hb);
    /* a help-only row is no flag */
    char *head[] = {"heading"};
    ck_assert(!cg_cli_parse_args(1, head, &a, &help));
    ck_assert_msg(strstr(cg_last_error(), "unexpected argument"), "%s", cg_last_error());
}
END_TEST

/* A switch and its --no- twin share a variable: the last given wins (as
 * argparse's BooleanOptionalAction), neither takes a value, and either
 * counts as given. */
START_TEST(test_flag_switch_off)
{
    bool keep = false;
    const cg_cli_opt opts[] = {
        {"--keep", CG_CLI_SWITCH, &keep, 0, 0, NULL, 0},
        {"--no-keep", CG_CLI_SWITCH_OFF, &keep, 0, 0, NULL, 0},
    };
    cg_cli_args a = {.opts = opts, .n = 2};
    bool help;
    char *on_off[] = {"--keep", "--no-keep"}, *off_on[] = {"--no-keep", "--keep"};
    ck_assert(cg_cli_parse_args(2, on_off, &a, &help) && !keep && cg_cli_given(&a, &keep));
    ck_assert(cg_cli_parse_args(2, off_on, &a, &help) && keep);
    ck_assert(cg_cli_parse_args(1, off_on, &a, &help) && !keep);
    char *valued[] = {"--no-keep=1"};
    ck_assert(!cg_cli_parse_args(1, valued, &a, &help));
    ck_assert_str_eq(cg_last_error(), "--no-keep takes no value");
    /* split: the word after it is positional, not its value */
    char *argv[] = {"--no-keep", "text"}, *flags[2], *pos[2];
    int nf = 0, np = 0;
    cg_cli_split(2, argv, opts, 2, flags, &nf, pos, &np);
    ck_assert(nf == 1 && np == 1 && !strcmp(pos[0], "text"));
}
END_TEST

/* A flag's value: "--" and "--5" are values (argparse's rule takes only
 * "--" and a letter for the next option), an empty one is refused; a lone
 * "--" ends the flags of a split; a table of more than CG_CLI_MAX_OPTS rows
 * is refused whole. */
START_TEST(test_flag_values)
{
    const char *name = "x";
    const cg_cli_opt opts[] = {{"--name", CG_CLI_STR, &name, 0, 0, NULL, 0}};
    cg_cli_args a = {.opts = opts, .n = 1};
    bool help;
    char *dashes[] = {"--name", "--"}, *digit[] = {"--name", "--5"}, *empty[] = {"--name="};
    ck_assert_msg(cg_cli_parse_args(2, dashes, &a, &help), "%s", cg_last_error());
    ck_assert_str_eq(name, "--");
    ck_assert_msg(cg_cli_parse_args(2, digit, &a, &help), "%s", cg_last_error());
    ck_assert_str_eq(name, "--5");
    ck_assert(!cg_cli_parse_args(1, empty, &a, &help));
    ck_assert_str_eq(cg_last_error(), "--name: empty value");
    ck_assert_str_eq(name, "--5");
    char *lone[] = {"--"}; /* no option at all: a word out of place */
    ck_assert(!cg_cli_parse_args(1, lone, &a, &help));
    ck_assert_str_eq(cg_last_error(), "unexpected argument '--' (try --help)");
    /* split: after "--" every word is positional, "--x" too */
    char *words[] = {"--name", "v", "--", "--x", "y"}, *flags[5], *pos[5];
    int nf = 0, np = 0;
    cg_cli_split(5, words, opts, 1, flags, &nf, pos, &np);
    ck_assert(nf == 2 && np == 2 && !strcmp(flags[1], "v") && !strcmp(pos[0], "--x"));
    static const cg_cli_opt many[CG_CLI_MAX_OPTS + 1];
    cg_cli_args big = {.opts = many, .n = CG_CLI_MAX_OPTS + 1};
    ck_assert(!cg_cli_parse_args(0, NULL, &big, &help));
    char want[64];
    snprintf(want, sizeof want, "a flag table of %d rows (at most %d)", CG_CLI_MAX_OPTS + 1,
             CG_CLI_MAX_OPTS);
    ck_assert_str_eq(cg_last_error(), want);
}
END_TEST

/* The start-up line's note on the precision (options.h): auto's choice of
 * bf16 says how to opt out, of fp32 only why; a resume that switched names
 * the checkpoint's; a precision given adds nothing. Text only, so auto's
 * bf16 is asked here on any CPU (test_precision_auto.sh sees it only on a
 * CPU with native bf16). */
START_TEST(test_precision_note)
{
    cg_train_opts o;
    memset(&o, 0, sizeof o);
    char buf[128];
    ck_assert_str_eq(cg_train_precision_note(&o, buf, sizeof buf), "");
    o.precision_auto = "the CPU has AMX";
    o.precision = CG_PRECISION_BF16;
    ck_assert_str_eq(cg_train_precision_note(&o, buf, sizeof buf),
                     " (auto: the CPU has AMX; --precision fp32 to opt out)");
    o.precision_auto = "no native bf16 on this CPU";
    o.precision = CG_PRECISION_FP32;
    ck_assert_str_eq(cg_train_precision_note(&o, buf, sizeof buf),
                     " (auto: no native bf16 on this CPU)");
    o.precision_was = "bf16";
    ck_assert_str_eq(cg_train_precision_note(&o, buf, sizeof buf),
                     " (switched from the checkpoint's bf16)");
}
END_TEST

/* ------------------------------------------------------- loss history */
static double fake_loss(int64_t step)
{
    return 1.0 + 3.0 / (1.0 + 0.01 * (double)step) + 0.1 * sin((double)step);
}

/* JSON -> history -> JSON, through cJSON as the trainers keep it */
static cg_history history_reload(const cg_history *h)
{
    char *j = cg_history_to_json(h);
    ck_assert_ptr_nonnull(j);
    cg_history r = {0};
    ck_assert_msg(cg_history_from_json(j, &r), "%s", cg_last_error());
    char *j2 = cg_history_to_json(&r);
    ck_assert_str_eq(j, j2);
    free(j);
    free(j2);
    return r;
}

/* Issue 16: a long loss history loads in linear time (it was read with
 * cJSON_GetArrayItem in a loop: 100,000 evaluations took minutes). */
START_TEST(test_history_long)
{
    cg_history h = {0}, back = {0};
    for (int i = 0; i < 200000; i++)
        ck_assert(cg_history_push(&h, 10 * (int64_t)i, 2.0 + 1e-6 * i, 2.5 - 1e-6 * i));
    char *j = cg_history_to_json(&h);
    ck_assert_ptr_nonnull(j);
    ck_assert_msg(cg_history_from_json(j, &back), "%s", cg_last_error());
    ck_assert_int_eq(back.n, 200000);
    ck_assert(back.step[199999] == h.step[199999] && back.val[12345] == h.val[12345]);
    free(j);
    cg_history_free(&h);
    cg_history_free(&back);
}
END_TEST

/* An evaluation's step is kept exactly at any step a run can reach: as a
 * float, 16777217 became 16777216 (the trainer then took that step for
 * evaluated and skipped its evaluation) and 10^12 - 1 became 10^12, in
 * the history and in the checkpoint's JSON. */
/* A checkpoint's identity (--init-from's "init_from", average's inputs,
 * an adapter's base check) is that of the bytes its weights were loaded
 * from: it was the checksum of the name read again, which a run saving
 * there may have replaced in between. */
static void save_one(const char *path, float v)
{
    cg_st_writer *w = cg_st_writer_new();
    cg_tensor *t = cg_full(CG_SHAPE(3), v);
    ck_assert(w && t && cg_st_add(w, "w", t) && cg_st_set_metadata(w, "step", "7"));
    ck_assert_msg(cg_st_writer_save(w, path), "%s", cg_last_error());
    cg_release(t);
    cg_st_writer_free(w);
}

START_TEST(test_origin_of_opened_bytes)
{
    make_tmpdir();
    char path[1300];
    snprintf(path, sizeof path, "%s", tmp_path("base.safetensors"));
    save_one(path, 1.0f);
    size_t n_old = 0;
    char *old = cg_read_file_once(path, 0, false, &n_old);
    ck_assert_ptr_nonnull(old);
    cg_data_id want;
    cg_data_id_of(path, old, n_old, &want);
    free(old);
    cg_st_file *f = cg_st_open(path);
    ck_assert_ptr_nonnull(f);
    save_one(path, 2.0f); /* another save renamed over the name */
    cg_ft_origin o;
    ck_assert_msg(cg_ft_origin_of(path, f, &o), "%s", cg_last_error());
    ck_assert_uint_eq(o.id.size, want.size);
    ck_assert_msg(o.id.hash == want.hash, "the checksum of the file at the name now");
    ck_assert_int_eq(o.step, 7);
    ck_assert_msg(cg_ft_origin_check(&o, "a.safetensors", path, f), "%s", cg_last_error());
    cg_st_file *g = cg_st_open(path); /* the file there now is another */
    ck_assert_ptr_nonnull(g);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_ft_origin_check(&o, "a.safetensors", path, g),
                    "is not the base checkpoint of adapter 'a.safetensors'");
    cg_st_close(g);
    cg_st_close(f);
    rm_tmpdir();
}
END_TEST

/* cg_ckpt_average refuses fewer than 2 inputs itself (the commands check
 * their count first), before it reads any: nothing is called, nothing
 * written. */
static bool avg_never(const char *a, const char *b)
{
    (void)a;
    (void)b;
    ck_abort_msg("same_arch called");
    return false;
}

static bool avg_loads_never(const char *path, cg_ckpt_weights w)
{
    (void)path;
    (void)w;
    ck_abort_msg("loads called");
    return false;
}

/* cg_ft_lora_attach checks its own arguments (the programs' flags check
 * the rank first): a rank below 1 or past an int, no target names, or
 * targets that name no Linear (no adapter is not a success), refused with
 * nothing attached. */
START_TEST(test_lora_attach_refusals)
{
    cg_charlm *m = tiny_model(true, CG_NORM_LAYERNORM, CG_ACT_GELU, 5);
    cg_rng g = cg_rng_new(1);
    const int64_t n0 = cg_module_num_params(CG_MODULE(m));
    const struct {
        cg_ft_lora l;
        const char *why;
    } bad[] = {{{0, NAN, 0, NULL}, "--lora-rank 0: need at least 1"},
               {{-2, NAN, 0, NULL}, "--lora-rank -2: need at least 1"},
               {{(int64_t)INT32_MAX + 1, NAN, 0, NULL}, "need at least 1"},
               {{2, NAN, 0, ","}, "--lora-targets: no module names given"},
               {{2, NAN, 0, "bogus"}, "--lora-targets: 'bogus' names no Linear of the CharLM"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CG_ASSERT_REFUSED(cg_ft_lora_attach(CG_MODULE(m), &bad[i].l, &g, NULL) == -1, bad[i].why);
        ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), n0);
    }
    /* a target that names nothing beside one that does: the Linears that
     * exist, each name once (two layers have one each), and nothing attached */
    const cg_ft_lora half = {1, NAN, 0, "q_proj,bogus"};
    CG_ASSERT_REFUSED(cg_ft_lora_attach(CG_MODULE(m), &half, &g, NULL) == -1,
                      "'bogus' names no Linear of the CharLM (its Linears: q_proj, k_proj, "
                      "v_proj, o_proj, fc1, fc2)");
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), n0);
    const cg_ft_lora ok = {1, NAN, 0, "q_proj"};
    ck_assert_int_eq(cg_ft_lora_attach(CG_MODULE(m), &ok, &g, NULL), 2); /* one per layer */
    cg_module_free(CG_MODULE(m));
}
END_TEST

START_TEST(test_average_needs_two)
{
    make_tmpdir();
    char in[1300], out[1300];
    snprintf(in, sizeof in, "%s", tmp_path("in.safetensors"));
    snprintf(out, sizeof out, "%s", tmp_path("out.safetensors"));
    save_one(in, 1.0f);
    const cg_avg_model m = {"charlm", avg_never, avg_loads_never, NULL, NULL};
    const char *const inputs[1] = {in};
    long long params = -1;
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_ckpt_average(&m, inputs, 1, out, false, CG_CKPT_AVERAGE, &params),
        "averaging needs at least 2 checkpoints (got 1)");
    CG_ASSERT_FAILS(
        (void *)(intptr_t)cg_ckpt_average(&m, inputs, 0, out, false, CG_CKPT_AVERAGE, &params),
        "averaging needs at least 2 checkpoints (got 0)");
    ck_assert(access(out, F_OK) != 0);
    rm_tmpdir();
}
END_TEST

START_TEST(test_history_far_steps)
{
    const int64_t steps[3] = {(INT64_C(1) << 24) + 1, (INT64_C(1) << 24) + 3,
                              INT64_C(999999999999)};
    cg_history h = {0};
    for (int i = 0; i < 3; i++)
        ck_assert(cg_history_push(&h, steps[i], 2.0, 2.5 - i));
    for (int i = 0; i < 3; i++)
        ck_assert_msg((int64_t)h.step[i] == steps[i], "%lld recorded as %lld", (long long)steps[i],
                      (long long)h.step[i]);
    char *j = cg_history_to_json(&h);
    ck_assert_ptr_nonnull(j);
    ck_assert_msg(strstr(j, "\"step\":[16777217,16777219,999999999999]"), "%s", j);
    cg_history r = history_reload(&h);
    for (int i = 0; i < 3; i++)
        ck_assert((int64_t)r.step[i] == steps[i]);
    ck_assert_int_eq(cg_history_best(&r), 2);
    free(j);
    cg_history_free(&h);
    cg_history_free(&r);
}
END_TEST

/* The best evaluation (--keep-best's file, --patience's count) is the
 * first of the lowest finite validation losses: a later equal one is no
 * improvement (strictly lower, as Keras's EarlyStopping with min_delta 0),
 * so --keep-best does not rewrite its file and --patience counts on. */
START_TEST(test_history_best_ties)
{
    const double val[5] = {2.5, 2.0, NAN, 2.0, 2.25};
    cg_history h = {0};
    ck_assert_int_eq(cg_history_best(&h), -1);
    for (int i = 0; i < 5; i++) {
        ck_assert(cg_history_push(&h, 10 * (int64_t)(i + 1), 3.0, val[i]));
        ck_assert_int_eq(cg_history_best(&h), i == 0 ? 0 : 1);
    }
    cg_history_free(&h);
}
END_TEST

/* The loss curve's training line: a history begun without the dense series
 * draws its evaluations' training losses up to the first dense point (not
 * after: the dense points are the finer curve), then the dense points,
 * then the mean of the block being filled. */
START_TEST(test_history_train_line)
{
    cg_history h = {0};
    float x[16], y[16];
    ck_assert_int_eq(cg_history_train_line(&h, x, y), 0);
    ck_assert(cg_history_from_json("{\"step\":[0,250],\"train\":[4.5,2.5],\"val\":[4.5,3]}", &h));
    for (int64_t s = 251; s <= 275; s++) {
        ck_assert(cg_history_train_step(&h, s, s <= 260 ? 2.0 : s <= 270 ? 1.5 : 1.25));
        if (s == 260)
            ck_assert(cg_history_push(&h, 260, 2.0, 2.75));
    }
    ck_assert(h.n + h.dn + 1 <= 16);
    const float wx[] = {0, 250, 255.5f, 265.5f, 273}, wy[] = {4.5f, 2.5f, 2, 1.5f, 1.25f};
    ck_assert_int_eq(cg_history_train_line(&h, x, y), 5);
    for (int i = 0; i < 5; i++)
        ck_assert_msg(x[i] == wx[i] && y[i] == wy[i], "point %d: (%g, %g), not (%g, %g)", i,
                      (double)x[i], (double)y[i], (double)wx[i], (double)wy[i]);
    cg_history_free(&h);
    /* no dense point yet: the evaluations before the block being filled */
    ck_assert(cg_history_from_json("{\"step\":[0,250],\"train\":[4.5,2.5],\"val\":[4.5,3]}", &h));
    for (int64_t s = 245; s <= 249; s++)
        ck_assert(cg_history_train_step(&h, s, 3.0));
    ck_assert_int_eq(cg_history_train_line(&h, x, y), 2);
    ck_assert(x[0] == 0 && y[0] == 4.5f && x[1] == 247 && y[1] == 3.0f);
    cg_history_free(&h);
}
END_TEST

START_TEST(test_history_json)
{
    make_tmpdir();
    cg_history h = {0};
    ck_assert_int_eq(cg_history_every(&h), CG_HISTORY_EVERY);
    for (int64_t s = 1; s <= 25; s++) {
        ck_assert(cg_history_train_step(&h, s, fake_loss(s)));
        if (s % 10 == 0)
            ck_assert(cg_history_push(&h, s, fake_loss(s), NAN)); /* NaN: null in JSON */
    }
    ck_assert(cg_history_train_step(&h, 26, NAN)); /* not recorded */
    ck_assert_int_eq(h.n, 2);
    ck_assert_int_eq(h.dn, 2);
    ck_assert_int_eq(h.acc_n, 5);
    double m = 0;
    for (int s = 1; s <= 10; s++)
        m += fake_loss(s);
    ck_assert_float_eq(h.dloss[0], (float)(m / 10));
    ck_assert_float_eq(h.dstep[0], 5.5f);
    ck_assert_float_eq(h.dstep[1], 15.5f);

    /* round trip: evaluations, dense points and the block being filled */
    cg_history r = history_reload(&h);
    ck_assert_int_eq(r.n, 2);
    ck_assert(isnan(r.val[0]) && r.train[1] == h.train[1] && r.step[1] == 20);
    ck_assert_int_eq(r.dn, 2);
    ck_assert_mem_eq(r.dstep, h.dstep, 2 * sizeof(float));
    ck_assert_mem_eq(r.dloss, h.dloss, 2 * sizeof(float));
    ck_assert(r.acc_loss == h.acc_loss && r.acc_step == h.acc_step && r.acc_n == h.acc_n);
    ck_assert_int_eq(cg_history_every(&r), 10);

    /* resume: a long run split anywhere and reloaded in between gives the
     * same series, bit for bit; it stays under CG_HISTORY_DENSE_MAX points
     * by merging pairs */
    cg_history full = {0}, part = {0};
    const int64_t N = 50003, cut = 21017;
    for (int64_t s = 1; s <= N; s++)
        ck_assert(cg_history_train_step(&full, s, fake_loss(s)));
    for (int64_t s = 1; s <= cut; s++)
        ck_assert(cg_history_train_step(&part, s, fake_loss(s)));
    cg_history resumed = history_reload(&part);
    cg_history_free(&part);
    for (int64_t s = cut + 1; s <= N; s++)
        ck_assert(cg_history_train_step(&resumed, s, fake_loss(s)));
    char *a = cg_history_to_json(&full), *b = cg_history_to_json(&resumed);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    ck_assert_int_eq(cg_history_every(&full), 40); /* 10 -> 20 at 20000 steps -> 40 at 40000 */
    ck_assert_int_eq(full.dn, (int)(N / 40));
    ck_assert_int_eq(full.acc_n, N % 40);
    for (int i = 0; i < full.dn; i++) /* point i: the mean of steps 40i+1 .. 40i+40 */
        ck_assert_float_eq_tol(full.dstep[i], 40.0 * i + 20.5, 1e-3);
    ck_assert_float_eq_tol(full.dloss[0], 1 + 3 / 1.2, 0.05);
    cg_history_free(&resumed);

    /* the picture: thin training line, marked validation line */
    ck_assert_msg(cg_history_plot(&full, tmp_path("h.loss.png"), "loss"), "%s", cg_last_error());
    struct stat sb;
    ck_assert_int_eq(stat(tmp_path("h.loss.png"), &sb), 0);
    cg_history_free(&full);

    /* a history written before the dense series existed still loads, and
     * the series starts from there */
    cg_history old = {0};
    ck_assert(
        cg_history_from_json("{\"step\":[0,250],\"train\":[4.2,2.5],\"val\":[4.2,null]}", &old));
    ck_assert_int_eq(old.n, 2);
    ck_assert(isnan(old.val[1]));
    ck_assert_int_eq(old.dn, 0);
    ck_assert_int_eq(old.acc_n, 0);
    ck_assert_int_eq(cg_history_every(&old), 10);
    for (int64_t s = 251; s <= 270; s++)
        ck_assert(cg_history_train_step(&old, s, 2.0));
    ck_assert_int_eq(old.dn, 2);
    ck_assert(cg_history_plot(&old, tmp_path("old.loss.png"), "loss"));
    cg_history_free(&old);

    /* malformed fields are refused */
    const char *bad[] = {
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":10,\"dense_step\":[1],"
        "\"dense_loss\":[],\"dense_acc\":{\"loss\":\"0\",\"step\":0,\"n\":0}}",
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":0,\"dense_step\":[],"
        "\"dense_loss\":[],\"dense_acc\":{\"loss\":\"0\",\"step\":0,\"n\":0}}",
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":10,\"dense_step\":[],"
        "\"dense_loss\":[],\"dense_acc\":{\"loss\":\"x\",\"step\":0,\"n\":0}}",
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":10,\"dense_step\":[],"
        "\"dense_loss\":[],\"dense_acc\":{\"loss\":\"0\",\"step\":0,\"n\":10}}",
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":10}",
        /* a block of no whole number of steps; a sum with more after its number */
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":10.5,\"dense_step\":[],"
        "\"dense_loss\":[],\"dense_acc\":{\"loss\":\"0\",\"step\":0,\"n\":0}}",
        "{\"step\":[],\"train\":[],\"val\":[],\"dense_every\":10,\"dense_step\":[],"
        "\"dense_loss\":[],\"dense_acc\":{\"loss\":\"1.5x\",\"step\":0,\"n\":0}}",
        /* evaluations: a validation loss missing */
        "{\"step\":[10],\"train\":[2.5],\"val\":[]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cg_history x = {0};
        ck_assert_msg(!cg_history_from_json(bad[i], &x), "accepted: %s", bad[i]);
        cg_history_free(&x);
    }
    /* ... and so is a series longer than any trainer writes */
    {
        size_t cap = 16 * CG_HISTORY_DENSE_MAX + 256, k = 0;
        char *j = malloc(cap);
        ck_assert_ptr_nonnull(j);
        k += (size_t)snprintf(j + k, cap - k,
                              "{\"step\":[],\"train\":[],\"val\":[],"
                              "\"dense_every\":10,\"dense_step\":[");
        for (int i = 0; i < CG_HISTORY_DENSE_MAX; i++)
            k += (size_t)snprintf(j + k, cap - k, "%s%d", i ? "," : "", i);
        k += (size_t)snprintf(j + k, cap - k, "],\"dense_loss\":[");
        for (int i = 0; i < CG_HISTORY_DENSE_MAX; i++)
            k += (size_t)snprintf(j + k, cap - k, "%s1", i ? "," : "");
        snprintf(j + k, cap - k, "],\"dense_acc\":{\"loss\":\"0\",\"step\":0,\"n\":0}}");
        cg_history x = {0};
        ck_assert(!cg_history_from_json(j, &x));
        cg_history_free(&x);
        free(j);
    }
    cg_history_free(&r);
    cg_history_free(&h);
    rm_tmpdir();
}
END_TEST

/* --------------------------------------------------- the program itself */
static char g_bin[PATH_MAX + 32];

static const char *charlm_bin(void)
{
    const char *env = getenv("CHARLM_BIN");
    if (env && *env)
        return env;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert(n > 0);
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(g_bin, sizeof g_bin, "%s/../models/charlm/charlm", self);
    return g_bin;
}

/* Run charlm with args (NULL-terminated); stdout and stderr go to files in
 * the temp dir. Returns the exit status (or 128+signal). */
static int run(const char *const *args)
{
    const char *argv[64];
    int k = 0;
    argv[k++] = charlm_bin();
    for (int i = 0; args[i]; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        int out = open(tmp_path("stdout"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int err = open(tmp_path("stderr"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || err < 0 || chdir(g_tmp) != 0)
            _exit(127);
        dup2(out, 1);
        dup2(err, 2);
        setenv("OMP_NUM_THREADS", "1", 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    if (len)
        *len = got;
    return buf;
}

static void write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* A small corpus: ~4 KB of text. */
static void write_corpus(const char *path)
{
    const char *lines[] = {"Call me Ishmael. Some years ago, never mind how long precisely,\n",
                           "having little or no money in my purse, and nothing particular\n",
                           "to interest me on shore, I thought I would sail about a little.\n"};
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 22; i++)
        fputs(lines[i % 3], f);
    fclose(f);
}

#define TINY                                                                                       \
    "--d", "16", "--H", "2", "--layers", "1", "--d-ff", "16", "--block-size", "8", "--batch-size", \
        "2", "--threads", "1"

/* Expect failure: non-zero exit, exactly one stderr line "charlm: error: ..."
 * that contains needle. */
static void expect_error(const char *const *args, const char *needle)
{
    int rc = run(args);
    char *err = slurp(tmp_path("stderr"), NULL);
    ck_assert_ptr_nonnull(err);
    ck_assert_msg(rc != 0 && rc < 128, "%s: exit %d, stderr: %s", args[0], rc, err);
    ck_assert_msg(strncmp(err, "charlm: error: ", 15) == 0, "stderr: %s", err);
    char *nl = strchr(err, '\n');
    ck_assert_msg(nl && nl[1] == '\0', "expected one line, got: %s", err);
    ck_assert_msg(strstr(err, needle) != NULL, "expected '%s' in: %s", needle, err);
    free(err);
}

/* Copy checkpoint src to dst with element 0 of tensor `poison` (NULL:
 * none) set to 3e38, finite (a NaN weight is refused at load) but the next
 * loss is NaN, and its "train" metadata replaced by train (NULL: kept). */
static void ckpt_copy(const char *src, const char *dst, const char *poison, const char *train)
{
    cg_st_file *f = cg_st_open(src);
    ck_assert_msg(f != NULL, "%s", cg_last_error());
    cg_st_writer *w = cg_st_writer_new();
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        bool new_train = train && strcmp(k, "train") == 0;
        ck_assert(cg_st_set_metadata(w, k, new_train ? train : cg_st_metadata(f, k)));
    }
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        ck_assert(cg_st_info(f, name, &dt, &nd, shape));
        if (dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, name);
            if (poison && !strcmp(name, poison))
                cg_data(t)[0] = 3e38f;
            ck_assert(cg_st_add_f32(w, name, t));
            cg_release(t);
        } else {
            cg_tensor *v = cg_st_get(f, name);
            ck_assert_ptr_nonnull(v);
            ck_assert(cg_st_add(w, name, v));
            cg_release(v);
        }
    }
    ck_assert(cg_st_writer_save(w, dst));
    cg_st_writer_free(w);
    cg_st_close(f);
}

static void poison_copy(const char *src, const char *dst, const char *poison)
{
    ckpt_copy(src, dst, poison, NULL);
}

START_TEST(test_resume_is_exact)
{
    make_tmpdir();
    write_corpus(tmp_path("c.txt"));
    const char *full[] = {"train", TINY,           "--data", "c.txt", "--steps",
                          "40",    "--eval-every", "15",     "--out", "full.safetensors",
                          NULL};
    ck_assert_int_eq(run(full), 0);
    /* stopped inside a block of the dense loss series (10 steps a point) */
    const char *half[] = {"train",     TINY,           "--data", "c.txt", "--steps",
                          "40",        "--eval-every", "15",     "--out", "half.safetensors",
                          "--stop-at", "23",           NULL};
    ck_assert_int_eq(run(half), 0);
    char *out = slurp(tmp_path("stdout"), NULL);
    ck_assert_msg(strstr(out, "\"interrupted\": true") && strstr(out, "\"step\": 23"), "%s", out);
    free(out);
    const char *resume[] = {"train", "--resume", "half.safetensors", "--threads", "1", NULL};
    ck_assert_int_eq(run(resume), 0);
    out = slurp(tmp_path("stdout"), NULL);
    ck_assert_msg(strstr(out, "\"step\": 40") && strstr(out, "\"val_loss\""), "%s", out);
    free(out);
    /* same parameters, optimizer state, RNG state and history: same bytes */
    cg_st_file *a = cg_st_open(tmp_path("full.safetensors"));
    cg_st_file *b = cg_st_open(tmp_path("half.safetensors"));
    ck_assert(a && b);
    ck_assert_int_eq(cg_st_count(a), cg_st_count(b));
    for (int i = 0; i < cg_st_count(a); i++) {
        const char *name = cg_st_name(a, i);
        size_t na, nb;
        const void *ra = cg_st_raw(a, name, &na), *rb = cg_st_raw(b, name, &nb);
        ck_assert_msg(ra && rb && na == nb && memcmp(ra, rb, na) == 0, "%s differs", name);
    }
    ck_assert_str_eq(cg_st_metadata(a, "train"), cg_st_metadata(b, "train"));
    ck_assert_str_eq(cg_st_metadata(a, "step"), "40");
    /* ... including the dense training loss: 4 points of 10 steps */
    cJSON *tj = cJSON_Parse(cg_st_metadata(a, "train"));
    char *hj = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(tj, "history"));
    ck_assert_ptr_nonnull(hj);
    cg_history hist = {0};
    ck_assert_msg(cg_history_from_json(hj, &hist), "%s: %s", cg_last_error(), hj);
    free(hj);
    cJSON_Delete(tj);
    ck_assert_int_eq(hist.n, 4); /* evaluations at 0, 15, 30, 40 */
    ck_assert_int_eq(hist.dn, 4);
    ck_assert_int_eq(hist.acc_n, 0);
    ck_assert_float_eq(hist.dstep[3], 35.5f);
    for (int i = 0; i < 4; i++)
        ck_assert(isfinite(hist.dloss[i]) && hist.dloss[i] > 0);
    cg_history_free(&hist);
    cg_st_close(a);
    cg_st_close(b);
    struct stat sb;
    ck_assert_int_eq(stat(tmp_path("full.loss.png"), &sb), 0);

    /* samples: reproducible, and cache == no cache */
    const char *s1[] = {"sample",   "--ckpt", "full.safetensors", "--prompt", "Call",
                        "--length", "30",     "--seed",           "5",        "--top-k",
                        "4",        NULL};
    ck_assert_int_eq(run(s1), 0);
    char *t1 = slurp(tmp_path("stdout"), NULL);
    ck_assert_int_eq(run(s1), 0);
    char *t2 = slurp(tmp_path("stdout"), NULL);
    const char *s2[] = {
        "sample", "--ckpt", "full.safetensors", "--prompt", "Call",       "--length", "30",
        "--seed", "5",      "--top-k",          "4",        "--no-cache", NULL};
    ck_assert_int_eq(run(s2), 0);
    char *t3 = slurp(tmp_path("stdout"), NULL);
    ck_assert_str_eq(t1, t2);
    ck_assert_str_eq(t1, t3);
    ck_assert(strncmp(t1, "Call", 4) == 0);
    /* --num-samples (nanoGPT's num_samples): one generator drawn on from
     * sample to sample, so the first is the single sample above; the
     * samples apart by a line of dashes, cache or not */
    const char *s5[] = {
        "sample", "--ckpt", "full.safetensors", "--prompt", "Call",          "--length", "30",
        "--seed", "5",      "--top-k",          "4",        "--num-samples", "3",        NULL,
        NULL};
    ck_assert_int_eq(run(s5), 0);
    char *n3 = slurp(tmp_path("stdout"), NULL);
    s5[13] = "--no-cache";
    ck_assert_int_eq(run(s5), 0);
    char *n3b = slurp(tmp_path("stdout"), NULL);
    ck_assert_str_eq(n3, n3b);
    const char *sep = "---------------\n";
    size_t l1 = strlen(t1);
    ck_assert_msg(strncmp(n3, t1, l1) == 0 && strncmp(n3 + l1, sep, strlen(sep)) == 0, "%s", n3);
    const char *second = n3 + l1 + strlen(sep), *third = strstr(second, sep);
    ck_assert_ptr_nonnull(third);
    third += strlen(sep);
    ck_assert_msg(strncmp(second, "Call", 4) == 0 && strncmp(third, "Call", 4) == 0, "%s", n3);
    ck_assert_uint_eq(strlen(third), l1); /* the last ends its line, as the single does */
    ck_assert_ptr_null(strstr(third, sep));
    ck_assert_msg(strncmp(second, t1, l1) != 0 || strncmp(third, t1, l1) != 0,
                  "three samples alike: %s", n3);
    char *err = slurp(tmp_path("stderr"), NULL);
    ck_assert_msg(strstr(err, "charlm: 3 samples of 30 characters in "), "%s", err);
    free(err);
    free(n3);
    free(n3b);
    const char *s6[] = {"sample", "--ckpt",      "full.safetensors", "--num-samples",
                        "2",      "--attention", "two.png",          NULL};
    expect_error(s6, "--attention draws one sample");
    ck_assert_int_ne(access(tmp_path("two.png"), F_OK), 0);
    const char *s7[] = {"sample", "--ckpt", "full.safetensors", "--num-samples", "0", NULL};
    expect_error(s7, "--num-samples");
    free(t1);
    free(t2);
    free(t3);
    /* unseen prompt characters: a warning, not an error */
    const char *s3[] = {
        "sample", "--ckpt", "full.safetensors", "--prompt", "Qx\xE2\x82\xAC", "--length",
        "5",      NULL};
    ck_assert_int_eq(run(s3), 0);
    err = slurp(tmp_path("stderr"), NULL);
    ck_assert_msg(strstr(err, "charlm: warning:") && strstr(err, "vocabulary"), "%s", err);
    free(err);
    const char *s4[] = {"sample", "--ckpt",      "full.safetensors", "--length",
                        "12",     "--attention", "attn.png",         NULL};
    ck_assert_int_eq(run(s4), 0);
    ck_assert_int_eq(stat(tmp_path("attn.png"), &sb), 0);
    const char *ev[] = {"eval", "--ckpt", "full.safetensors", NULL};
    ck_assert_int_eq(run(ev), 0);
    out = slurp(tmp_path("stdout"), NULL);
    ck_assert_msg(strstr(out, "\"perplexity\"") && strstr(out, "\"bits_per_char\""), "%s", out);
    free(out);
    rm_tmpdir();
}
END_TEST

START_TEST(test_bad_inputs)
{
    make_tmpdir();
    write_corpus(tmp_path("c.txt"));
    write_file(tmp_path("empty.txt"), "", 0);
    write_file(tmp_path("latin1.txt"), "caf\xE9 au lait\n", 13);
    write_file(tmp_path("short.txt"), "abcdefghij\n", 11);
    write_file(tmp_path("short2.txt"), "Call me\n", 8);

    const char *a1[] = {"train", "--bogus", "1", NULL};
    expect_error(a1, "unknown option '--bogus'");
    const char *a2[] = {"train", "--steps", "12x", NULL};
    expect_error(a2, "--steps");
    const char *a3[] = {"train", "--steps", "-5", NULL};
    expect_error(a3, "out of range");
    const char *a4[] = {"train", "--data", "c.txt", "--d", "30", "--H", "4", NULL};
    expect_error(a4, "divisible");
    const char *a5[] = {"train", "--data", "nope.txt", NULL};
    expect_error(a5, "nope.txt");
    const char *a6[] = {"train", "--data", "empty.txt", NULL};
    expect_error(a6, "empty");
    const char *a7[] = {"train", "--data", "latin1.txt", NULL};
    expect_error(a7, "UTF-8");
    const char *a8[] = {"train", TINY, "--data", "short.txt", NULL};
    expect_error(a8, "too short");
    const char *a9[] = {"train", "--lr", "abc", NULL};
    expect_error(a9, "--lr");
    const char *a10[] = {"train", "--preset", "huge", NULL};
    expect_error(a10, "preset");
    const char *a11[] = {"train", "--norm", "batchnorm", NULL};
    expect_error(a11, "--norm");
    const char *a12[] = {"frobnicate", NULL};
    expect_error(a12, "unknown command");
    const char *a13[] = {"sample", "--ckpt", "missing.safetensors", NULL};
    expect_error(a13, "missing.safetensors");
    const char *a14[] = {"train", "--steps", NULL};
    expect_error(a14, "needs a value");
    /* issue 34, finding 14: the missing value is named, not the next word */
    const char *a14b[] = {"train", "--data", "--steps", "4", NULL};
    expect_error(a14b, "--data needs a value, got the option '--steps'");
    const char *a15[] = {"train", "--dropout", "1.5", NULL};
    expect_error(a15, "--dropout");

    /* a checkpoint of another model kind */
    cg_st_writer *w = cg_st_writer_new();
    float one = 1;
    ck_assert(cg_st_add_f32_raw(w, "emb.weight", 1, (const int64_t[]){1}, &one));
    ck_assert(cg_st_set_metadata(w, "model", "seq2seq"));
    ck_assert(cg_st_writer_save(w, tmp_path("s2s.safetensors")));
    cg_st_writer_free(w);
    const char *b1[] = {"sample", "--ckpt", "s2s.safetensors", NULL};
    expect_error(b1, "not a charlm checkpoint");
    const char *b2[] = {"eval", "--ckpt", "s2s.safetensors", NULL};
    expect_error(b2, "not a charlm checkpoint");
    write_file(tmp_path("junk.safetensors"), "\x10\0\0\0\0\0\0\0{\"a\":", 13);
    const char *b3[] = {"sample", "--ckpt", "junk.safetensors", NULL};
    expect_error(b3, "junk.safetensors");

    /* a good checkpoint survives failing runs that point at it */
    const char *t[] = {"train", TINY,    "--data",           "c.txt", "--steps",
                       "3",     "--out", "good.safetensors", NULL};
    ck_assert_int_eq(run(t), 0);
    size_t n0 = 0, n1 = 1;
    char *before = slurp(tmp_path("good.safetensors"), &n0);
    /* an existing --out is not overwritten without --force */
    expect_error(t, "checkpoint good.safetensors exists; continue it with --resume "
                    "good.safetensors, or pass --force to overwrite it");
    const char *c0[] = {
        "train",   "--resume", "good.safetensors", "--out", "good.safetensors",
        "--steps", "2",        "--force",          NULL}; /* same file: resuming, not a refusal */
    expect_error(c0, "already at step");
    const char *c1[] = {"train",   TINY, "--data", "latin1.txt", "--out", "good.safetensors",
                        "--force", NULL};
    expect_error(c1, "UTF-8");
    const char *c2[] = {"train", "--resume", "good.safetensors", "--steps", "2", NULL};
    expect_error(c2, "already at step");
    const char *c3[] = {"train", "--resume", "good.safetensors", "--d", "64", NULL};
    expect_error(c3, "--resume");
    const char *c4[] = {"sample", "--ckpt", "good.safetensors", "--top-p", "0", NULL};
    expect_error(c4, "--top-p");
    const char *c5[] = {"sample", "--ckpt", "good.safetensors", "--temperature", "-1", NULL};
    expect_error(c5, "--temperature");
    const char *c6[] = {"eval", "--ckpt", "good.safetensors", "--data", "short2.txt", NULL};
    expect_error(c6, "short2.txt");
    char *after = slurp(tmp_path("good.safetensors"), &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* a NaN weight: the run stops at its first step, naming the step and a
     * parameter, and the checkpoint it resumed from is kept as it was */
    poison_copy(tmp_path("good.safetensors"), tmp_path("nan.safetensors"), "ln_f.weight");
    before = slurp(tmp_path("nan.safetensors"), &n0);
    const char *d1[] = {"train", "--resume", "nan.safetensors", "--steps", "10", NULL};
    int rc = run(d1);
    char *err = slurp(tmp_path("stderr"), NULL);
    ck_assert_msg(rc == 1 && strstr(err, "charlm: error: loss is nan at step 4") &&
                      strstr(err, "non-finite gradient: '"),
                  "exit %d: %s", rc, err);
    free(err);
    after = slurp(tmp_path("nan.safetensors"), &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* resuming into another existing file is refused too; --force overwrites */
    const char *e1[] = {"train", "--resume", "good.safetensors", "--steps",
                        "5",     "--out",    "nan.safetensors",  NULL};
    expect_error(e1, "checkpoint nan.safetensors exists");
    const char *e2[] = {"train", "--resume",        "good.safetensors", "--steps", "5",
                        "--out", "nan.safetensors", "--force",          NULL};
    ck_assert_int_eq(run(e2), 0);
    cg_st_file *f = cg_st_open(tmp_path("nan.safetensors"));
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(cg_st_metadata(f, "step"), "5");
    cg_st_close(f);
    const char *e3[] = {"train", TINY,    "--data",           "c.txt",   "--steps",
                        "2",     "--out", "good.safetensors", "--force", NULL};
    ck_assert_int_eq(run(e3), 0);
    f = cg_st_open(tmp_path("good.safetensors"));
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(cg_st_metadata(f, "step"), "2");
    cg_st_close(f);
    /* --help works for each command */
    const char *h[][3] = {{"--help", NULL},
                          {"train", "--help", NULL},
                          {"sample", "--help", NULL},
                          {"eval", "--help", NULL}};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(run(h[i]), 0);
        char *o = slurp(tmp_path("stdout"), NULL);
        ck_assert_msg(strstr(o, "usage: charlm"), "%s", o);
        free(o);
    }
    rm_tmpdir();
}
END_TEST

/* Parameters of two charlm checkpoints: largest relative difference. */
static double ckpt_rel_diff(const char *a, const char *b)
{
    cg_charlm_ckpt ca, cb;
    ck_assert_msg(cg_charlm_ckpt_load(tmp_path(a), &ca), "%s", cg_last_error());
    ck_assert_msg(cg_charlm_ckpt_load(tmp_path(b), &cb), "%s", cg_last_error());
    char worst[128] = "";
    double rel =
        cg_test_max_rel_diff(CG_MODULE(ca.model), CG_MODULE(cb.model), worst, sizeof worst);
    cg_charlm_ckpt_free(&ca);
    cg_charlm_ckpt_free(&cb);
    return rel;
}

/* A child that takes training's signals and raises sig; it writes a byte
 * to fd once the first has left it running. released = false: sig again
 * (the end of the process, but for SIGXCPU); true: the signals released,
 * then SIGXCPU (ignored) and sig again (SIGHUP for SIGXCPU: the end). Its
 * exit code names the first check that failed, 0 when it is not ended. */
static int signals_child(int sig, bool released, int fd)
{
    struct rlimit none = {0, 0}; /* no core file from SIGXCPU's default action */
    if (setrlimit(RLIMIT_CORE, &none) != 0)
        return 2;
    cg_train_catch_signals();
    if (cg_train_interrupted())
        return 3;
    raise(sig);
    if (!cg_train_interrupted())
        return 4;
    if (released) {
        cg_train_release_signals();
        if (cg_train_interrupted())
            return 5;
        raise(SIGXCPU); /* ignored while the final evaluation runs */
        if (cg_train_interrupted())
            return 6;
    }
    if (write(fd, "1", 1) != 1)
        return 7;
    raise(released && sig == SIGXCPU ? SIGHUP : sig);
    return 0;
}

/* SIGINT, SIGTERM, SIGUSR1 (what mpirun forwards), SIGHUP and SIGXCPU each
 * set the trainer's flag and leave the process running; a second one ends
 * it, but for SIGXCPU (the soft CPU limit, repeated every second), ignored.
 * Released, the flag is cleared, SIGXCPU is ignored and the others end the
 * process at once. Each in a child: the signals end it or change its
 * handlers. */
START_TEST(test_train_signals)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP, SIGXCPU};
    for (int released = 0; released <= 1; released++)
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
            int p[2];
            ck_assert_int_eq(pipe(p), 0);
            fflush(NULL);
            pid_t c = fork();
            ck_assert_int_ge(c, 0);
            if (c == 0) {
                close(p[0]);
                _exit(signals_child(sigs[i], released, p[1]));
            }
            close(p[1]);
            char b;
            bool lived = read(p[0], &b, 1) == 1; /* through the first signal */
            close(p[0]);
            int st = 0;
            ck_assert_int_eq(waitpid(c, &st, 0), c);
            const char *what = released ? "released" : "the second";
            ck_assert_msg(lived, "%s (%s): the child %s %d before writing its byte",
                          strsignal(sigs[i]), what,
                          WIFSIGNALED(st) ? "ended by signal" : "exited with check",
                          WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            int want = released && sigs[i] == SIGXCPU ? SIGHUP : sigs[i];
            if (!released && sigs[i] == SIGXCPU)
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                              "a second SIGXCPU: the child %s %d (wanted: not ended)",
                              WIFSIGNALED(st) ? "ended by signal" : "exited with check",
                              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            else
                ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == want,
                              "%s (%s): the child %s %d (wanted: ended by %s)", strsignal(sigs[i]),
                              what, WIFSIGNALED(st) ? "ended by signal" : "exited with check",
                              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), strsignal(want));
        }
}
END_TEST

/* The progress line written to a file: one line a call, its ETA rounded
 * to the second, minutes and seconds below an hour, hours and minutes from
 * one; an ETA not known (NaN) or negative is 0m00s; cg_progress_end adds
 * nothing to a file (it ends a terminal's open line). */
START_TEST(test_progress_lines)
{
    make_tmpdir();
    static const double eta[] = {59.4, 59.6, 3599.4, 3599.6, 3600, 7500, 45296, NAN, -5};
    static const char *const want[] = {"0m59s", "1m00s",  "59m59s", "1h00m", "1h00m",
                                       "2h05m", "12h34m", "0m00s",  "0m00s"};
    enum { N = sizeof eta / sizeof eta[0] };
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(tmp_path("progress"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(saved >= 0 && fd >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
    close(fd);
    for (int i = 0; i < N; i++)
        cg_progress("charlm", i + 1, N, 2.5, 1e-3, 1234.4, eta[i]);
    cg_progress_end();
    fflush(stderr);
    ck_assert(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
    close(saved);
    char expect[1024] = "";
    for (int i = 0; i < N; i++) {
        size_t at = strlen(expect);
        snprintf(expect + at, sizeof expect - at,
                 "charlm: step %d/%d  loss 2.5000  lr 1.00e-03  1234 tok/s  ETA %s\n", i + 1, N,
                 want[i]);
    }
    char *got = slurp(tmp_path("progress"), NULL);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, expect);
    free(got);
    rm_tmpdir();
}
END_TEST

/* The programs' messages: "<program>: error: " or "warning: ", one line
 * (a newline or carriage return in it a space), whole however long (one
 * of the buffer's size exactly, and one of twice it); a library failure
 * with what failed before its error, "unknown error" when none was set. */
START_TEST(test_prog_messages)
{
    make_tmpdir();
    static char longer[4001];
    memset(longer, 'a', 4000);
    longer[2047] = 'b';
    longer[3999] = 'c';
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    int fd = open(tmp_path("messages"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(saved >= 0 && fd >= 0 && dup2(fd, STDERR_FILENO) == STDERR_FILENO);
    close(fd);
    cg_prog_set_name("charlm");
    ck_assert_int_eq(cg_prog_fail("x\ny\rz %d", 3), CG_EXIT_FAIL);
    cg_prog_warn("w%s", "!");
    cg_prog_fail("%.2048s", longer); /* 2,048 bytes: the buffer's size */
    cg_prog_fail("%s", longer);
    cg_clear_error();
    ck_assert_int_eq(cg_prog_fail_lib(NULL), CG_EXIT_FAIL);
    cg_set_error("the reason");
    cg_prog_fail_lib("loading");
    fflush(stderr);
    ck_assert(dup2(saved, STDERR_FILENO) == STDERR_FILENO);
    close(saved);
    cg_prog_set_name("cgrad");
    char *got = slurp(tmp_path("messages"), NULL);
    ck_assert_ptr_nonnull(got);
    size_t cap = 3 * sizeof longer + 256;
    char *want = malloc(cap);
    ck_assert_ptr_nonnull(want);
    snprintf(want, cap,
             "charlm: error: x y z 3\ncharlm: warning: w!\ncharlm: error: %.2048s\n"
             "charlm: error: %s\ncharlm: error: unknown error\ncharlm: error: loading: the "
             "reason\n",
             longer, longer);
    ck_assert_msg(strcmp(got, want) == 0, "got %zu bytes, not the %zu wanted", strlen(got),
                  strlen(want));
    free(got);
    free(want);
    rm_tmpdir();
}
END_TEST

/* On a terminal the progress line is rewritten in place ("\r", the line,
 * then erase to its end), and a message ends it first: the message is on
 * a line of its own, as is the shell's prompt after cg_progress_end. Run
 * in a child whose stderr is a pseudo-terminal (raw: no newline
 * translation). */
START_TEST(test_progress_tty)
{
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0) { /* a sandbox without /dev/pts: nothing to run it on */
        printf("skip: test_progress_tty: no pseudo-terminal (%s)\n", strerror(errno));
        return;
    }
    ck_assert(grantpt(master) == 0 && unlockpt(master) == 0);
    char slave[64];
    ck_assert_int_eq(ptsname_r(master, slave, sizeof slave), 0);
    fflush(NULL);
    pid_t c = fork();
    ck_assert_int_ge(c, 0);
    if (c == 0) {
        int fd = open(slave, O_RDWR | O_NOCTTY);
        struct termios tio;
        if (fd < 0 || tcgetattr(fd, &tio) != 0)
            _exit(2);
        cfmakeraw(&tio);
        if (tcsetattr(fd, TCSANOW, &tio) != 0 || dup2(fd, STDERR_FILENO) != STDERR_FILENO)
            _exit(3);
        if (!cg_progress_is_tty())
            _exit(4);
        cg_prog_set_name("charlm");
        cg_progress("charlm", 1, 2, 2.5, 1e-3, 1234.4, 59.4);
        cg_progress("charlm", 2, 2, 2.5, 1e-3, 1234.4, 0);
        cg_prog_warn("a %s", "warning");
        cg_progress("charlm", 2, 2, 2.5, 1e-3, 1234.4, 0);
        cg_progress_end();
        cg_progress_end(); /* a line already ended: nothing more */
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(c, &st, 0), c);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d", WEXITSTATUS(st));
    char got[1024];
    size_t n = 0;
    for (ssize_t r; n + 1 < sizeof got && (r = read(master, got + n, sizeof got - 1 - n)) > 0;)
        n += (size_t)r; /* EIO once the child's side is closed */
    got[n] = '\0';
    close(master);
#define LINE(s, eta) \
    "\rcharlm: step " s "/2  loss 2.5000  lr 1.00e-03  1234 tok/s  ETA " eta "\033[K"
    const char *want = LINE("1", "0m59s")
        LINE("2", "0m00s") "\ncharlm: warning: a warning\n" LINE("2", "0m00s") "\n";
#undef LINE
    ck_assert_str_eq(got, want);
}
END_TEST

/* The metrics log NAME of the scratch directory as a JSON array of its
 * lines, each a JSON object (asserted); cJSON_Delete it. */
static cJSON *metrics_log(const char *name)
{
    char *log = slurp(tmp_path(name), NULL);
    ck_assert_msg(log != NULL, "no %s", name);
    cJSON *lines = cJSON_CreateArray();
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        ck_assert_msg(cJSON_IsObject(o), "not a JSON object: %s", line);
        cJSON_AddItemToArray(lines, o);
    }
    free(log);
    return lines;
}

/* --grad-accum 4 with batches of B takes the steps of batches of 4B (the
 * same windows: both draw them in turn from the batch stream); --resume
 * refuses it; the metrics log has one valid JSON line per logged step and
 * per evaluation, and a resumed run appends to it. */
START_TEST(test_grad_accum_and_metrics)
{
    make_tmpdir();
    write_corpus(tmp_path("c.txt"));
#define SHAPE                                                                                   \
    "--d", "16", "--H", "2", "--layers", "1", "--d-ff", "16", "--block-size", "8", "--threads", \
        "1", "--data", "c.txt", "--steps", "20", "--eval-every", "10"
    const char *big[] = {"train", SHAPE, "--batch-size", "8", "--out", "big.safetensors", NULL};
    ck_assert_int_eq(run(big), 0);
    const char *acc[] = {"train", SHAPE,   "--batch-size",    "2", "--grad-accum",
                         "4",     "--out", "acc.safetensors", NULL};
    ck_assert_int_eq(run(acc), 0);
    const char *small[] = {"train", SHAPE, "--batch-size", "2", "--out", "small.safetensors", NULL};
    ck_assert_int_eq(run(small), 0);
    double rel = ckpt_rel_diff("acc.safetensors", "big.safetensors");
    ck_assert_msg(rel <= 1e-5, "--grad-accum 4 differs from a 4x batch by %.3g", rel);
    ck_assert_msg(ckpt_rel_diff("small.safetensors", "big.safetensors") > 1e-3,
                  "the test cannot tell the batch sizes apart");
    const char *r1[] = {"train", "--resume", "acc.safetensors", "--grad-accum", "2", "--steps",
                        "30",    NULL};
    expect_error(r1, "drop --grad-accum");
#undef SHAPE
    /* the metrics log: 20 steps logged every step (steps/20) + evaluations at 0, 10, 20 */
    const char *m1[] = {
        "train", TINY,        "--data", "c.txt", "--steps",       "20", "--eval-every",
        "10",    "--stop-at", "12",     "--out", "m.safetensors", NULL};
    ck_assert_int_eq(run(m1), 0);
    const char *m2[] = {"train", "--resume", "m.safetensors", "--threads", "1", NULL};
    ck_assert_int_eq(run(m2), 0);
    cJSON *log = metrics_log("m.metrics.jsonl");
    int steps = 0, evals = 0;
    int64_t last = -1;
    const cJSON *o;
    cJSON_ArrayForEach(o, log)
    {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
        ck_assert(cJSON_IsNumber(st));
        if (cJSON_GetObjectItemCaseSensitive(o, "val_loss")) {
            ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "train_loss")));
            evals++;
        } else {
            ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "loss")));
            ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "lr")));
            ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "tokens_per_s")));
            ck_assert_int_eq((int64_t)st->valuedouble, last + 1 < 1 ? 1 : last + 1);
            last = (int64_t)st->valuedouble;
            steps++;
        }
    }
    ck_assert_int_eq(steps, 20);
    ck_assert_int_eq(evals, 3);
    cJSON_Delete(log);
    rm_tmpdir();
}
END_TEST

/* The optimizer's flags (--weight-decay, --beta1, --beta2, --adam-eps,
 * --clip-norm; charlm's --warmup and --min-lr): the defaults spelled out
 * are the recipe, bit for bit; each other value trains otherwise; the
 * checkpoint records them and --resume continues with them (and refuses
 * them given again); a checkpoint from before them resumes with the
 * recipe's; the learning rates logged follow --warmup and --min-lr. */
START_TEST(test_optimizer_flags)
{
    make_tmpdir();
    write_corpus(tmp_path("c.txt"));
#define SHAPE                                                                                   \
    "--d", "16", "--H", "2", "--layers", "1", "--d-ff", "16", "--block-size", "8", "--threads", \
        "1", "--data", "c.txt", "--steps", "12", "--eval-every", "6", "--batch-size", "4"
    const char *a[] = {"train", SHAPE, "--out", "a.st", NULL};
    ck_assert_int_eq(run(a), 0);
    const char *b[] = {"train",    SHAPE,  "--out",          "b.st", "--warmup",    "100",
                       "--min-lr", "1e-4", "--weight-decay", "0.1",  "--beta1",     "0.9",
                       "--beta2",  "0.99", "--adam-eps",     "1e-8", "--clip-norm", "1",
                       NULL};
    ck_assert_int_eq(run(b), 0);
    ck_assert_msg(ckpt_rel_diff("a.st", "b.st") == 0, "the recipe spelled out differs");
    const char *other[][2] = {{"--weight-decay", "2"}, {"--beta1", "0.5"},      {"--beta2", "0.5"},
                              {"--adam-eps", "0.01"},  {"--clip-norm", "1e-3"}, {"--warmup", "1"}};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        const char *c[] = {"train",   SHAPE,       "--out",     "c.st",
                           "--force", other[i][0], other[i][1], NULL};
        ck_assert_int_eq(run(c), 0);
        ck_assert_msg(ckpt_rel_diff("a.st", "c.st") > 1e-6, "%s %s trains as the recipe",
                      other[i][0], other[i][1]);
    }
    /* --min-lr after a warmup shorter than the run */
    const char *w[] = {"train", SHAPE, "--out", "w.st", "--warmup", "2", NULL};
    ck_assert_int_eq(run(w), 0);
    const char *w2[] = {"train",    SHAPE, "--out",    "c.st", "--force",
                        "--warmup", "2",   "--min-lr", "1e-3", NULL};
    ck_assert_int_eq(run(w2), 0);
    ck_assert_msg(ckpt_rel_diff("w.st", "c.st") > 1e-6, "--min-lr 1e-3 trains as lr/10");
    /* recorded, and resumed exactly with them */
    const char *d[] = {"train",    SHAPE,  "--out",       "d.st", "--warmup",       "2",
                       "--min-lr", "1e-3", "--clip-norm", "0",    "--weight-decay", "0",
                       NULL};
    ck_assert_int_eq(run(d), 0);
    const char *e[] = {"train",     SHAPE,  "--out",       "e.st", "--warmup",       "2",
                       "--min-lr",  "1e-3", "--clip-norm", "0",    "--weight-decay", "0",
                       "--stop-at", "5",    NULL};
    ck_assert_int_eq(run(e), 0);
    const char *e2[] = {"train", "--resume", "e.st", "--threads", "1", NULL};
    ck_assert_int_eq(run(e2), 0);
    ck_assert_msg(ckpt_rel_diff("d.st", "e.st") == 0, "a resumed run left its optimizer flags");
    cg_st_file *f = cg_st_open(tmp_path("e.st"));
    ck_assert_ptr_nonnull(f);
    cJSON *tj = cJSON_Parse(cg_st_metadata(f, "train"));
    cg_st_close(f);
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(tj, "options");
    const char *keys[] = {"warmup", "clip_norm", "weight_decay", "beta1", "beta2", "adam_eps"};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(cJSON_GetObjectItemCaseSensitive(opts, keys[i]), "no \"%s\"", keys[i]);
    /* --min-lr beside lr, in the model's state */
    const cJSON *ml =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "min_lr");
    ck_assert(cJSON_IsString(ml) && strtod(ml->valuestring, NULL) == 1e-3);
    cJSON_Delete(tj);
    /* lr: 1e-3 / 2 at step 1, then the peak, and down to --min-lr (= the peak) */
    cJSON *log = metrics_log("e.st.metrics.jsonl");
    const cJSON *o;
    int n = 0;
    cJSON_ArrayForEach(o, log)
    {
        const cJSON *lr = cJSON_GetObjectItemCaseSensitive(o, "lr");
        if (!lr)
            continue;
        int64_t step = (int64_t)cJSON_GetObjectItemCaseSensitive(o, "step")->valuedouble;
        ck_assert_msg(fabs(lr->valuedouble - (step == 1 ? 5e-4 : 1e-3)) < 1e-12, "step %lld: lr %g",
                      (long long)step, lr->valuedouble);
        n++;
    }
    ck_assert_int_eq(n, 12);
    cJSON_Delete(log);
    const char *e3[] = {"train", "--resume", "e.st", "--steps", "14", "--clip-norm", "1", NULL};
    expect_error(e3, "drop --clip-norm");
    /* a checkpoint written before the flags: the recipe's values */
    const char *g[] = {"train", SHAPE, "--out", "g.st", "--stop-at", "5", NULL};
    ck_assert_int_eq(run(g), 0);
    f = cg_st_open(tmp_path("g.st"));
    ck_assert_ptr_nonnull(f);
    tj = cJSON_Parse(cg_st_metadata(f, "train"));
    cJSON *oj = cJSON_GetObjectItemCaseSensitive(tj, "options");
    for (int i = 0; i < 6; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(oj, keys[i]);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"),
                                            "min_lr");
    char *old = cJSON_PrintUnformatted(tj);
    cJSON_Delete(tj);
    ckpt_copy(tmp_path("g.st"), tmp_path("old.st"), NULL, old);
    cg_st_close(f);
    free(old);
    const char *g2[] = {"train", "--resume", "old.st", "--threads", "1", NULL};
    ck_assert_int_eq(run(g2), 0);
    ck_assert_msg(ckpt_rel_diff("a.st", "old.st") == 0, "an old checkpoint resumed otherwise");
    /* refused before any file is read */
    const char *r1[] = {"train", "--beta1", "1", "--out", "r.st", NULL};
    expect_error(r1, "--beta1 1: Adam's betas are in [0, 1)");
    const char *r2[] = {"train", "--min-lr", "0.01", "--lr", "0.001", "--out", "r.st", NULL};
    expect_error(r2, "--min-lr 0.01 is above the peak --lr 0.001");
    const char *r3[] = {"train", "--clip-norm", "-1", "--out", "r.st", NULL};
    expect_error(r3, "--clip-norm");
    ck_assert_int_ne(access(tmp_path("r.st"), F_OK), 0);
#undef SHAPE
    rm_tmpdir();
}
END_TEST

/* The metrics log's loss_avg is the mean of the last CG_TRAIN_RECENT (250)
 * steps' losses: past 250 steps the oldest leave the window, across a
 * resume too (the window is in the checkpoint). */
START_TEST(test_loss_avg_window)
{
    make_tmpdir();
    write_corpus(tmp_path("c.txt"));
    const char *a[] = {"train",     TINY,   "--data",       "c.txt",         "--steps",     "270",
                       "--lr",      "3e-2", "--eval-every", "300",           "--log-every", "1",
                       "--stop-at", "255",  "--out",        "w.safetensors", NULL};
    ck_assert_int_eq(run(a), 0);
    const char *b[] = {"train", "--resume", "w.safetensors", "--threads", "1", NULL};
    ck_assert_int_eq(run(b), 0);
    cJSON *log = metrics_log("w.metrics.jsonl");
    double loss[271] = {0}, avg[271] = {0};
    const cJSON *o;
    cJSON_ArrayForEach(o, log)
    {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "loss");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "loss_avg");
        if (cJSON_IsNumber(st) && cJSON_IsNumber(l) && cJSON_IsNumber(m) && st->valuedouble >= 1 &&
            st->valuedouble <= 270) {
            loss[(int)st->valuedouble] = l->valuedouble;
            avg[(int)st->valuedouble] = m->valuedouble;
        }
    }
    cJSON_Delete(log);
    ck_assert_msg(fabs(loss[1] - loss[270]) > 0.05, "the losses barely move: %g %g", loss[1],
                  loss[270]);
    for (int s = 1; s <= 270; s++) {
        ck_assert_msg(loss[s] > 0, "step %d not logged", s);
        int from = s > 250 ? s - 249 : 1;
        double sum = 0;
        for (int k = from; k <= s; k++)
            sum += loss[k];
        double mean = sum / (s - from + 1); /* of losses rounded to 6 decimals */
        ck_assert_msg(fabs(avg[s] - mean) < 2e-6,
                      "step %d: loss_avg %.6f, the last %d losses' %.6f", s, avg[s], s - from + 1,
                      mean);
    }
    rm_tmpdir();
}
END_TEST

/* Without --log-every a run logs 20 times (steps/20), at most every 100
 * steps, and its last step: 2020 steps log at 100, 200, ..., 2000, 2020. */
START_TEST(test_log_every_default)
{
    make_tmpdir();
    write_corpus(tmp_path("c.txt"));
    const char *a[] = {"train",        TINY,     "--data", "c.txt",         "--steps", "2020",
                       "--eval-every", "100000", "--out",  "e.safetensors", NULL};
    ck_assert_int_eq(run(a), 0);
    cJSON *log = metrics_log("e.metrics.jsonl");
    int n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, log)
    {
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
        if (cJSON_GetObjectItemCaseSensitive(o, "loss")) {
            n++;
            ck_assert_int_eq((int64_t)st->valuedouble, n <= 20 ? 100 * n : 2020);
        }
    }
    cJSON_Delete(log);
    ck_assert_int_eq(n, 21);
    rm_tmpdir();
}
END_TEST

/* ------------------------------------------------------------ tokenizers */
/* The text cg_charlm_generate_text writes for tok: the text of the ids
 * from the last prompt id on, less that id's own text. */
static char *expected_stream(const cg_tokenizer *tok, const int64_t *ids, int64_t n_prompt,
                             int64_t n)
{
    char *all = cg_tokenizer_decode(tok, ids + n_prompt - 1, n - n_prompt + 1);
    char *first = cg_tokenizer_decode(tok, ids + n_prompt - 1, 1);
    ck_assert(all && first && strncmp(all, first, strlen(first)) == 0);
    memmove(all, all + strlen(first), strlen(all) - strlen(first) + 1);
    free(first);
    return all;
}

/* A character LM of 16 dimensions, one layer, d_ff 24 and max_len 16 over
 * tok's ids (seed 7). */
static cg_charlm *stream_model(const cg_tokenizer *tok, bool norm_first)
{
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = cg_tokenizer_vocab_size(tok);
    c.d = 16;
    c.H = 2;
    c.layers = 1;
    c.d_ff = 24;
    c.max_len = 16;
    c.norm_first = norm_first;
    cg_charlm *m = cg_charlm_new(&c, 7);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    return m;
}

/* What cg_charlm_generate_text streams for n_new ids of m at temperature t
 * equals the decoded ids; the ids (the caller frees them). */
static int64_t *stream_matches(cg_charlm *m, const cg_tokenizer *tok, const int64_t *prompt,
                               int64_t n_prompt, int64_t n_new, double t)
{
    FILE *f = tmpfile();
    ck_assert(f != NULL);
    cg_sample_opts so = {.temperature = t, .top_k = 0, .top_p = 1.0};
    cg_rng rng = cg_rng_new(3);
    int64_t *ids =
        cg_charlm_generate_text(m, tok, prompt, n_prompt, n_new, &so, NULL, &rng, true, f);
    ck_assert_msg(ids != NULL, "%s", cg_last_error());
    long len = ftell(f);
    char *got = calloc((size_t)len + 1, 1);
    rewind(f);
    ck_assert(got && fread(got, 1, (size_t)len, f) == (size_t)len);
    char *want = expected_stream(tok, ids, n_prompt, n_prompt + n_new);
    ck_assert_str_eq(got, want);
    free(want);
    free(got);
    fclose(f);
    return ids;
}

/* The stream equals the decoded ids, for the characters and for BPE (whose
 * random byte pieces make partial UTF-8). */
static void check_stream(const cg_tokenizer *tok, const int64_t *prompt, int64_t n_prompt)
{
    cg_charlm *m = stream_model(tok, true);
    /* past max_len: the window slides, the anchor moves */
    free(stream_matches(m, tok, prompt, n_prompt, 300, 1.5));
    cg_charlm_free(m);
}

START_TEST(test_generate_text_streams)
{
    const char *sents[] = {"the whale and the sea", "Über Wellen — 5 € später"};
    cg_tokenizer *ct = cg_tokenizer_train(CG_TOK_CHAR, false, sents, 2, 0);
    ck_assert_msg(ct != NULL, "%s", cg_last_error());
    int64_t n;
    int64_t *p = cg_tokenizer_encode(ct, "the ", &n, NULL);
    check_stream(ct, p, n);
    free(p);
    cg_tokenizer_free(ct);
    if (!cg_spm_available())
        return;
    cg_tokenizer *bt = cg_tokenizer_train(CG_TOK_BPE, true, sents, 2, 280);
    ck_assert_msg(bt != NULL, "%s", cg_last_error());
    p = cg_tokenizer_encode(bt, "Über the", &n, NULL);
    check_stream(bt, p, n);
    free(p);
    cg_tokenizer_free(bt);
}
END_TEST

/* The printer holds back a U+FFFD that ends the text (a character whose
 * bytes have not all come) and prints it once more text follows. A piece
 * that ends in U+FFFD itself ("\u2581\uFFFD", learnt from a corpus holding
 * U+FFFD as a word) adds text and a U+FFFD in one step: the space is
 * printed, the U+FFFD held back, and it must not be counted as printed (it
 * was lost from the stream when it was). The model is rigged to alternate that piece P and another Q
 * greedily: every weight zero but the tied table's rows P and Q, +-10 in
 * dimensions 0-3 ((1, 1, -1, -1) and (1, -1, -1, 1)), and the last norm's
 * weight -1 in dimensions 1 and 3 and 0 elsewhere, so that from P the head
 * gives Q about +40, P about -40 and every other id 0, and from Q the
 * reverse (the positions, at most 1 beside the embedding's 40, do not
 * change it). Post-norm and pre-norm. */
START_TEST(test_generate_text_streams_held_back_fffd)
{
    if (!cg_spm_available())
        return;
    const char *sents[] = {"ax \xEF\xBF\xBD by \xEF\xBF\xBD ax \xEF\xBF\xBD by",
                           "by \xEF\xBF\xBD ax \xEF\xBF\xBD"};
    cg_tokenizer *tok = cg_tokenizer_train(CG_TOK_BPE, false, sents, 2, 280);
    ck_assert_msg(tok != NULL, "%s", cg_last_error());
    const int64_t V = cg_tokenizer_vocab_size(tok);
    int64_t P = -1, Q = -1; /* the pieces "\u2581\uFFFD" and "\u2581by" */
    for (int64_t i = 0; i < V; i++) {
        char *l = cg_tokenizer_label(tok, i);
        ck_assert(l != NULL);
        P = strcmp(l, "\xE2\x90\xA3\xEF\xBF\xBD") == 0 ? i : P;
        Q = strcmp(l, "\xE2\x90\xA3"
                      "by") == 0
                ? i
                : Q;
        free(l);
    }
    ck_assert_msg(P >= 0 && Q >= 0, "pieces %lld and %lld", (long long)P, (long long)Q);
    /* after Q, P adds a space and a U+FFFD at once */
    char *q = cg_tokenizer_decode(tok, &Q, 1), *qp = cg_tokenizer_decode(tok, (int64_t[]){Q, P}, 2);
    ck_assert(q && qp);
    ck_assert_str_eq(qp + strlen(q), " \xEF\xBF\xBD");
    free(q);
    free(qp);
    for (int nf = 0; nf < 2; nf++) {
        cg_charlm *m = stream_model(tok, nf);
        const int64_t d = m->cfg.d;
        cg_test_blank_params(CG_MODULE(m));
        float *e = cg_data(m->tok_emb->weight);
        const float rows[2][4] = {{10, 10, -10, -10}, {10, -10, -10, 10}};
        for (int k = 0; k < 4; k++)
            e[P * d + k] = rows[0][k], e[Q * d + k] = rows[1][k];
        cg_tensor *lw = (nf ? m->ln_f : m->block[0]->ln2)->weight;
        for (int64_t k = 0; k < d; k++)
            cg_data(lw)[k] = k == 1 || k == 3 ? -1.0f : 0.0f;
        cg_tensor_modified(m->tok_emb->weight);
        cg_tensor_modified(lw);
        enum { N_NEW = 8 };
        int64_t *ids = stream_matches(m, tok, &Q, 1, N_NEW, 0.0);
        for (int k = 1; k <= N_NEW; k++) /* the rig: P Q P Q ... */
            ck_assert_msg(ids[k] == (k % 2 ? P : Q), "norm_first %d: id %d is %lld", nf, k,
                          (long long)ids[k]);
        free(ids);
        cg_charlm_free(m);
    }
    cg_tokenizer_free(tok);
}
END_TEST

/* A BPE corpus: each split encoded on its own, losslessly, with a tokenizer
 * trained on the training split only (a character of the validation split
 * alone gets no piece of its own), and bits per character from the
 * character counts. */
START_TEST(test_corpus_bpe)
{
    if (!cg_spm_available())
        return;
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_corpus_bpe_");
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 90; i++)
        fprintf(f, "line %d of the training text, about whales\n", i);
    fprintf(f, "the validation text has a \xe2\x98\x83 snowman and more whales\n");
    for (int i = 0; i < 8; i++)
        fprintf(f, "and whales %d\n", i);
    fclose(f);
    cg_tokenizer *tok = NULL;
    cg_data_id id;
    cg_corpus *c = cg_corpus_read_tok(path, &tok, CG_TOK_BPE, 400, &id);
    ck_assert_msg(c != NULL, "%s", cg_last_error());
    ck_assert_int_eq(tok->kind, CG_TOK_BPE);
    ck_assert_int_eq(c->chars_train, (int64_t)(0.9 * (double)c->chars));
    ck_assert(c->n_train > 0 && c->n > c->n_train && c->n < c->chars);
    int64_t *ids = malloc((size_t)c->n * sizeof *ids);
    for (int64_t i = 0; i < c->n; i++)
        ids[i] = c->ids[i];
    char *tr = cg_tokenizer_decode(tok, ids, c->n_train);
    char *va = cg_tokenizer_decode(tok, ids + c->n_train, c->n - c->n_train);
    ck_assert(tr && va);
    ck_assert_int_eq((int64_t)(strlen(tr) + strlen(va)), (int64_t)id.size);
    ck_assert(strstr(va, "\xe2\x98\x83 snowman") != NULL);
    int64_t n;
    int64_t *snow = cg_tokenizer_encode(tok, "\xe2\x98\x83", &n, NULL);
    ck_assert(snow != NULL);
    for (int64_t i = 0; i < n; i++) { /* no piece holds it: its bytes are byte pieces */
        char *l = cg_tokenizer_label(tok, snow[i]);
        ck_assert(l && !strstr(l, "\xe2\x98\x83"));
        free(l);
    }
    ck_assert_int_ge(n, 3);
    double tokens = (double)(c->n - c->n_train), chars = (double)(c->chars - c->chars_train);
    ck_assert(fabs(cg_corpus_val_bpc(c, 2.0) - 2.0 * tokens / chars / log(2.0)) < 1e-12);
    free(snow);
    free(tr);
    free(va);
    free(ids);
    /* read again through the tokenizer (eval, resume): the same ids */
    cg_corpus *c2 = cg_corpus_read_tok(path, &tok, CG_TOK_CHAR, 0, NULL);
    ck_assert_msg(c2 != NULL, "%s", cg_last_error());
    ck_assert_int_eq(c2->n, c->n);
    ck_assert_mem_eq(c2->ids, c->ids, (size_t)c->n * sizeof *c->ids);
    cg_corpus_free(c2);
    cg_corpus_free(c);
    cg_tokenizer_free(tok);
    unlink(path);
}
END_TEST

/* Lines longer than SentencePiece takes (2048 bytes) are cut for the
 * tokenizer's training without losing a byte: at a space (dropped) or, in
 * a line without one (CJK, a long token), between two characters. A
 * character found only where a line is cut still gets its piece; UTF-8
 * text without spaces trains (its cut split a character and was refused). */
START_TEST(test_corpus_bpe_long_lines)
{
    if (!cg_spm_available())
        return;
    char path[PATH_MAX];
    int fd = cg_test_mkstemp(path, sizeof path, "cg_corpus_long_");
    ck_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 12; i++) { /* 2048 'x' then 'Q', which is nowhere else */
        for (int j = 0; j < 2048; j++)
            fputc('x', f);
        fputs(i ? "xxxx\n" : "Qxxxx\n", f);
        for (int j = 0; j < 300; j++) /* 2700 bytes, no space */
            fputs("\xe7\x8c\xab\xe3\x81\x8c\xe5\xba\xa7", f);
        fputc('\n', f);
    }
    fputs("validation text\n", f);
    fclose(f);
    cg_tokenizer *tok = NULL;
    cg_corpus *c = cg_corpus_read_tok(path, &tok, CG_TOK_BPE, 300, NULL);
    ck_assert_msg(c != NULL, "%s", cg_last_error());
    const char *one[] = {"Q", "\xe7\x8c\xab"}; /* each one piece, not its bytes */
    for (int k = 0; k < 2; k++) {
        int64_t n = 0;
        int64_t *ids = cg_tokenizer_encode(tok, one[k], &n, NULL);
        ck_assert(ids != NULL);
        bool found = false;
        for (int64_t i = 0; i < n; i++) {
            char *l = cg_tokenizer_label(tok, ids[i]);
            found |= l && strstr(l, one[k]) != NULL;
            free(l);
        }
        ck_assert_msg(found, "'%s' has no piece of its own (%lld ids)", one[k], (long long)n);
        free(ids);
    }
    cg_corpus_free(c);
    cg_tokenizer_free(tok);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------ the stepper */
/* A model of two parameters for the stepper: w [2, 2] and b [2]. Its loss
 * on micro-batch k is (k + 1) sum(w) + sum(b), with a NaN added (finite
 * gradients, NaN loss), times Inf (Inf loss and gradients), or sum(sqrt(w))
 * at w = 0 (a finite loss, Inf gradients). */
enum { TOY_PLAIN, TOY_LOSS_NAN, TOY_LOSS_INF, TOY_GRAD_INF, TOY_BACK_FAILS };
typedef struct {
    cg_module *m;
    cg_tensor *w, *b;
    int mode;
    double lr;
    int calls;
} toy_model;

/* A block that gives another shape when recomputed: its backward fails. */
static cg_tensor *flaky_block(void *ctx, cg_tensor *const *in)
{
    int *calls = ctx;
    return (*calls)++ == 0 ? cg_muls(in[0], 2.0f) : cg_sum(in[0], 0, NULL, false);
}

static bool toy_batch(void *self, int k, double *weight, double *tokens)
{
    (void)self;
    *weight = 1;
    *tokens = 10 * (k + 1);
    return true;
}

static cg_tensor *toy_loss(void *self, int k, float grad_scale)
{
    (void)grad_scale;
    toy_model *t = self;
    cg_tensor *l;
    if (t->mode == TOY_GRAD_INF) {
        l = cg_sum(cg_sqrt(t->w), 0, NULL, false);
    } else if (t->mode == TOY_BACK_FAILS && k == 0) { /* the first micro-batch's backward */
        cg_checkpoint_block blk = {
            .fn = flaky_block, .ctx = &t->calls, .n_inputs = 1, .inputs = &t->w};
        l = cg_sum(cg_checkpoint(&blk), 0, NULL, false);
    } else
        l = cg_add(cg_muls(cg_sum(t->w, 0, NULL, false), (float)(k + 1)),
                   cg_sum(t->b, 0, NULL, false));
    return t->mode == TOY_LOSS_NAN   ? cg_adds(l, NAN)
           : t->mode == TOY_LOSS_INF ? cg_muls(l, INFINITY)
                                     : l;
}

static double toy_lr(void *self, int64_t step)
{
    (void)step;
    return ((toy_model *)self)->lr;
}

static toy_model toy_new(int mode, float w0)
{
    toy_model t = {.m = cg_module_new("toy"), .mode = mode, .lr = 0.5};
    const int64_t ws[2] = {2, 2}, bs[1] = {2};
    cg_tensor *w = cg_full(2, ws, w0), *b = cg_ones(1, bs);
    ck_assert_ptr_nonnull(t.m);
    t.w = cg_module_add_param(t.m, "w", w);
    t.b = cg_module_add_param(t.m, "b", b);
    ck_assert(t.w && t.b);
    cg_release(w);
    cg_release(b);
    return t;
}

static cg_trainer_model toy_trainer(toy_model *t, double clip_norm)
{
    return (cg_trainer_model){.name = "toy",
                              .module = t->m,
                              .optim = cg_sgd_config(0.5, 0, false),
                              .clip_norm = clip_norm,
                              .self = t,
                              .batch = toy_batch,
                              .loss = toy_loss,
                              .lr = toy_lr};
}

/* One step of a toy in mode at step 3: its result and error; *changed:
 * a parameter moved. */
static cg_step_result toy_step(int mode, float w0, double clip_norm, bool skip, double lr,
                               char *err, size_t n, bool *changed)
{
    toy_model t = toy_new(mode, w0);
    t.lr = lr;
    cg_trainer_model tm = toy_trainer(&t, clip_norm);
    cg_stepper st;
    ck_assert_msg(cg_stepper_init(&st, &tm, 1, 0), "%s", cg_last_error());
    st.skip_nonfinite = skip;
    double loss, tokens;
    cg_clear_error();
    cg_step_result r = cg_stepper_step(&st, 3, &loss, &tokens);
    snprintf(err, n, "%s", cg_last_error());
    float *w = cg_test_values(t.w), *b = cg_test_values(t.b);
    *changed = w[0] != w0 || b[0] != 1.0f;
    free(w);
    free(b);
    if (r == CG_STEP_SKIPPED) /* a skipped step drops its gradients */
        ck_assert(t.w->grad == NULL && t.b->grad == NULL);
    cg_stepper_free(&st);
    cg_module_free(t.m);
    return r;
}

/* A backward that fails in one micro-batch fails the step, named as the
 * backward's, though the next micro-batch's succeeds; nothing is updated. */
START_TEST(test_stepper_backward_fails)
{
    toy_model t = toy_new(TOY_BACK_FAILS, 1);
    cg_trainer_model tm = toy_trainer(&t, 1.0);
    cg_stepper st;
    ck_assert_msg(cg_stepper_init(&st, &tm, 2, 0), "%s", cg_last_error());
    double loss, tokens;
    ck_assert_int_eq(cg_stepper_step(&st, 1, &loss, &tokens), CG_STEP_FAILED);
    ck_assert_msg(strncmp(cg_last_error(), "backward: checkpoint: ", 22) == 0, "%s",
                  cg_last_error());
    float *w = cg_test_values(t.w), *b = cg_test_values(t.b);
    ck_assert(w[0] == 1.0f && b[0] == 1.0f);
    free(w);
    free(b);
    cg_stepper_free(&st);
    cg_module_free(t.m);
}
END_TEST

/* cg_stepper_init refuses a ZeRO stage other than 0 and 1; stage 1 with
 * one process is the plain optimizer. */
START_TEST(test_stepper_init)
{
    toy_model t = toy_new(TOY_PLAIN, 1);
    cg_trainer_model tm = toy_trainer(&t, 1.0);
    cg_stepper st;
    for (int z = -1; z <= 2; z += 3) {
        cg_clear_error();
        ck_assert(!cg_stepper_init(&st, &tm, 1, z));
        char want[32];
        snprintf(want, sizeof want, "ZeRO stage %d", z);
        ck_assert_msg(strstr(cg_last_error(), want), "%s", cg_last_error());
        cg_stepper_free(&st);
    }
    ck_assert_msg(cg_stepper_init(&st, &tm, 1, 1), "%s", cg_last_error());
    ck_assert(!st.zero && st.opt && st.n_train == 2 && !st.reducer);
    cg_stepper_free(&st);
    cg_module_free(t.m);
}
END_TEST

/* A step's non-finite loss or gradients: named, with the step; skipped
 * (gradients dropped, nothing updated) under skip_nonfinite. A finite
 * loss with Inf gradients is one too, clipped or not (the update would
 * make every weight NaN). A learning rate the optimizer refuses fails the
 * step. */
START_TEST(test_stepper_nonfinite)
{
    char err[512];
    bool changed;
    ck_assert_int_eq(toy_step(TOY_PLAIN, 1, 1.0, false, 0.5, err, sizeof err, &changed),
                     CG_STEP_OK);
    ck_assert(changed);
    ck_assert_int_eq(toy_step(TOY_PLAIN, 1, 0, false, 0.5, err, sizeof err, &changed),
                     CG_STEP_OK); /* clip_norm 0: no clipping */
    ck_assert(changed);
    ck_assert_int_eq(toy_step(TOY_LOSS_INF, 1, 1.0, false, 0.5, err, sizeof err, &changed),
                     CG_STEP_NONFINITE);
    ck_assert_msg(strstr(err, "loss is inf at step 3") && !changed, "%s", err);
    ck_assert_int_eq(toy_step(TOY_LOSS_NAN, 1, 1.0, false, 0.5, err, sizeof err, &changed),
                     CG_STEP_NONFINITE);
    ck_assert_msg(strstr(err, "loss is nan at step 3") && !changed, "%s", err);
    ck_assert_int_eq(toy_step(TOY_LOSS_NAN, 1, 1.0, true, 0.5, err, sizeof err, &changed),
                     CG_STEP_SKIPPED);
    ck_assert_msg(strcmp(err, "loss nan, the gradients are finite") == 0 && !changed, "%s", err);
    for (int clip = 0; clip <= 1; clip++) {
        ck_assert_int_eq(toy_step(TOY_GRAD_INF, 0, clip, false, 0.5, err, sizeof err, &changed),
                         CG_STEP_NONFINITE);
        ck_assert_msg(strncmp(err, "step 3: ", 8) == 0 && strstr(err, "'w'") && !changed,
                      "clip %d: %s", clip, err);
        ck_assert_int_eq(toy_step(TOY_GRAD_INF, 0, clip, true, 0.5, err, sizeof err, &changed),
                         CG_STEP_SKIPPED);
        ck_assert_msg(strncmp(err, "loss 0, ", 8) == 0 && strstr(err, "'w'") && !changed,
                      "clip %d: %s", clip, err);
    }
    ck_assert_int_eq(toy_step(TOY_PLAIN, 1, 1.0, false, NAN, err, sizeof err, &changed),
                     CG_STEP_FAILED);
    ck_assert_msg(strstr(err, "step 3: ") && strstr(err, "learning rate nan") && !changed, "%s",
                  err);
}
END_TEST

/* A file of float32 tensors of one value each, named as given (NULL ends). */
static void tensors_file(const char *path, const char *const *names)
{
    cg_st_writer *w = cg_st_writer_new();
    const float one = 1;
    ck_assert_ptr_nonnull(w);
    for (int i = 0; names[i]; i++)
        ck_assert(cg_st_add_f32_raw(w, names[i], 1, (int64_t[]){1}, &one));
    ck_assert_msg(cg_st_writer_save(w, path), "%s", cg_last_error());
    cg_st_writer_free(w);
}

/* What a checkpoint may hold beside a model of w [2, 2] and b [2]: its
 * parameters and their optimizer slots by name; an adapter's file its
 * trainable parameters under PEFT's prefix (not a frozen one, not another
 * prefix of that length). And the config's bound: the values it needs
 * must be in the file, and max_len x d at most 4 values a value held plus
 * 2^24. */
START_TEST(test_ckpt_tensor_checks)
{
    make_tmpdir();
    const char *p = tmp_path("t.safetensors");
    toy_model t = toy_new(TOY_PLAIN, 1);
    static const char *const ok[] = {"w",
                                     "b",
                                     "optim.w.step",
                                     "optim.w.exp_avg",
                                     "optim.b.exp_avg_sq",
                                     "optim.b.momentum_buffer",
                                     NULL};
    tensors_file(p, ok);
    cg_st_file *f = cg_st_open(p);
    ck_assert_msg(cg_ckpt_check_tensors(t.m, f, p), "%s", cg_last_error());
    /* 1 value a tensor: 6 held */
    ck_assert(cg_ckpt_config_fits(6, 4096, 4096, f, p)); /* 2^24 <= 4 * 6 + 2^24 */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_ckpt_config_fits(7, 1, 1, f, p),
                    "needs 7 parameter values but the file holds 6");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_ckpt_config_fits(6, 4097, 4096, f, p),
                    "max_len=4097 with d=4096 is implausibly large");
    cg_st_close(f);
    /* a slot's length but no slot's name; a slot's name off the optimizer's prefix */
    static const char *const slot[] = {"w", "optim.w.abcd", NULL}, *off[] = {"abcdefw.step", NULL};
    const char *const *odd[] = {slot, off};
    for (int i = 0; i < 2; i++) {
        tensors_file(p, odd[i]);
        f = cg_st_open(p);
        CG_ASSERT_FAILS((void *)(intptr_t)cg_ckpt_check_tensors(t.m, f, p),
                        i ? "tensor 'abcdefw.step' is not a parameter"
                          : "tensor 'optim.w.abcd' is not a parameter");
        cg_st_close(f);
    }
    /* the names fit, the shapes do not: the load's error, naming the file */
    static const char *const shapes[] = {"w", "b", NULL};
    tensors_file(p, shapes);
    f = cg_st_open(p);
    cg_clear_error();
    ck_assert(!cg_ckpt_load_params(t.m, f, p));
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "checkpoint '%s': ", p);
    ck_assert_msg(strncmp(cg_last_error(), want, strlen(want)) == 0, "%s", cg_last_error());
    cg_st_close(f);
    /* an adapter's file: b frozen */
    t.b->requires_grad = false;
    static const char *const adapter[] = {"base_model.model.w", "optim.w.exp_avg", NULL};
    tensors_file(p, adapter);
    f = cg_st_open(p);
    ck_assert_msg(cg_ckpt_check_adapter_tensors(t.m, f, p), "%s", cg_last_error());
    cg_st_close(f);
    static const char *const frozen[] = {"base_model.model.b", NULL};
    static const char *const prefix[] = {"base_model_MODEL.w", NULL};
    const char *const *bad[] = {frozen, prefix};
    for (int i = 0; i < 2; i++) {
        tensors_file(p, bad[i]);
        f = cg_st_open(p);
        CG_ASSERT_FAILS((void *)(intptr_t)cg_ckpt_check_adapter_tensors(t.m, f, p),
                        "is not an adapter parameter");
        cg_st_close(f);
    }
    cg_module_free(t.m);
    rm_tmpdir();
}
END_TEST

/* A user's own model on the trainer (models/train/program.h): the toy
 * above as a train program, whose evaluation fails at step fail_at. */
typedef struct {
    toy_model t; /* first: the toy's callbacks take the run */
    int64_t fail_at;
    cg_tokenizer *tok;
} toy_run;

static bool toy_evaluate(void *self, int64_t step, cg_eval_result *e)
{
    if (step == ((toy_run *)self)->fail_at) {
        cg_set_error("the toy's evaluation failed");
        return false;
    }
    e->train = 1.0;
    e->val = 1.0 + 1.0 / (double)(step + 1);
    return true;
}

static bool toy_finish(void *self, const cg_trainer *t, cJSON *j)
{
    (void)self;
    (void)t;
    (void)j;
    return true;
}

static char *toy_config(void *self)
{
    (void)self;
    return strdup("{}");
}

static int toy_setup(void *self, cg_trainer *t, cg_train_opts *o, cg_train_recipe *rec,
                     cg_trainer_model *m)
{
    (void)t;
    (void)o;
    (void)rec;
    toy_run *r = self;
    r->t = toy_new(TOY_PLAIN, 1.0f);
    const char *text[] = {"toy"};
    r->tok = cg_tokenizer_train(CG_TOK_CHAR, false, text, 1, 0);
    *m = toy_trainer(&r->t, 1.0);
    m->evaluate = toy_evaluate;
    m->finish = toy_finish;
    m->config_json = toy_config;
    m->tok = r->fail_at == -2 ? NULL : r->tok; /* -2: a model without its tokenizer */
    m->dropout_rng = NULL;                     /* none: the trainer keeps one */
    return -1;
}

static void toy_cleanup(void *self)
{
    toy_run *r = self;
    cg_module_free(r->t.m);
    cg_tokenizer_free(r->tok);
}

/* The toy program's train command in a child, stderr into err: its exit
 * code. */
static int toy_train(int64_t fail_at, const char *out, const char *err)
{
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0 || !freopen("/dev/null", "w", stdout))
            _exit(99);
        cg_prog_set_name("toy");
        cg_train_opts o;
        cg_train_recipe rec;
        cg_train_init(&o, &rec, 6, 2);
        const cg_cli_opt opts[] = {CG_TRAIN_RECIPE_FLAGS(&rec), CG_TRAIN_RUN_FLAGS(&o)};
        cg_cli_args a = {.opts = opts, .n = (int)(sizeof opts / sizeof opts[0])};
        const cg_train_program p = {"toy", "", "toy.st", "/dev/null", NULL, toy_setup, toy_cleanup};
        char *argv[] = {"--out",       (char *)out, "--threads", "1",
                        "--precision", "fp32",      "--force",   NULL};
        toy_run r = {.fail_at = fail_at};
        _exit(cg_train_command(7, argv, &a, &o, &rec, &p, &r));
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "the toy's run ended by signal %d", WTERMSIG(status));
    return WEXITSTATUS(status);
}

/* A user's model on the trainer, without a dropout stream: it trains; an
 * evaluation that fails is the run's failure, named with its step and
 * reason (exit 1), not a signal's cut (exit 0, saved); the checkpoint of
 * the evaluation before it is kept as it was; a model without its
 * tokenizer is refused by name. */
START_TEST(test_trainer_eval_fails)
{
    make_tmpdir();
    const char *out = tmp_path("toy.st"), *err = tmp_path("err.txt");
    int rc = toy_train(-1, out, err);
    char *e = slurp(err, NULL);
    ck_assert_msg(rc == 0 && strstr(e, "toy: step 6: train loss 1.0000"), "exit %d: %s", rc, e);
    free(e);
    ck_assert_int_eq(unlink(out), 0);
    rc = toy_train(4, out, err);
    e = slurp(err, NULL);
    ck_assert_msg(
        rc == 1 && strstr(e, "toy: error: evaluation at step 4: the toy's evaluation failed\n") &&
            !strstr(e, "cut short"),
        "exit %d: %s", rc, e);
    free(e);
    cg_st_file *f = cg_st_open(out);
    ck_assert_msg(f, "%s", cg_last_error());
    ck_assert_str_eq(cg_st_metadata(f, "step"), "2");
    cg_st_close(f);
    /* a model that lacks what the trainer needs is named, not run */
    rc = toy_train(-2, out, err);
    e = slurp(err, NULL);
    ck_assert_msg(rc == 1 && strstr(e, "toy: error: the trainer's model has no tokenizer (tok)"),
                  "exit %d: %s", rc, e);
    free(e);
    rm_tmpdir();
}
END_TEST

/* The ranks' collectives (-Wl,--wrap=cg_dist_allreduce_max and _sum): while
 * vote_fail_at is set, the vote_fail_at-th of their calls from now fails as
 * a broken MPI job's does, and says so on stderr (VOTE_FAILED) so that the
 * test knows it came. */
#define VOTE_FAILED "(the test's collective failed here)"
static long vote_fail_at; /* 0: none fails */
bool __real_cg_dist_allreduce_max(double *v, int n);
bool __wrap_cg_dist_allreduce_max(double *v, int n);
bool __real_cg_dist_allreduce_sum(double *v, int n);
bool __wrap_cg_dist_allreduce_sum(double *v, int n);
static bool vote_fails(void)
{
    if (vote_fail_at <= 0 || --vote_fail_at > 0)
        return false;
    fprintf(stderr, "%s\n", VOTE_FAILED);
    cg_set_error("dist: MPI_Allreduce failed on rank 0 of 2: the test's failure");
    return true;
}
bool __wrap_cg_dist_allreduce_max(double *v, int n)
{
    return !vote_fails() && __real_cg_dist_allreduce_max(v, n);
}
bool __wrap_cg_dist_allreduce_sum(double *v, int n)
{
    return !vote_fails() && __real_cg_dist_allreduce_sum(v, n);
}

/* Each collective of a training run in turn failing (the trainer's votes
 * on stopping before a step, on --patience after an evaluation, on a cut
 * evaluation): the run fails with the collective's message and exit 1. A
 * failed vote once read as "no": the rank trained on alone, as if its
 * ranks had agreed, and the run ended with exit 0. */
START_TEST(test_trainer_collective_fails)
{
    make_tmpdir();
    const char *out = tmp_path("toy.st"), *err = tmp_path("err.txt");
    int k = 1;
    for (;; k++) {
        (void)unlink(out);
        vote_fail_at = k; /* the child's */
        int rc = toy_train(-1, out, err);
        vote_fail_at = 0;
        char *e = slurp(err, NULL);
        if (!strstr(e, VOTE_FAILED)) { /* the run made fewer than k */
            ck_assert_msg(rc == 0, "exit %d: %s", rc, e);
            free(e);
            break;
        }
        ck_assert_msg(rc == 1 && strstr(e, "toy: error: ") &&
                          strstr(e, "MPI_Allreduce failed on rank 0 of 2: the test's failure\n"),
                      "collective %d: exit %d: %s", k, rc, e);
        free(e);
    }
    ck_assert_int_gt(k, 6); /* one before each of the 6 steps at least */
    rm_tmpdir();
}
END_TEST

static Suite *zoo_suite(void)
{
    Suite *s = suite_create("zoo");
    TCase *t = tcase_create("sampling");
    tcase_add_test(t, test_kv_cache_matches_full);
    tcase_add_test(t, test_sampling_reproducible);
    tcase_add_test(t, test_logit_rules);
    tcase_add_test(t, test_generate_window_past_max_len);
    tcase_add_test(t, test_sample_flag_defaults);
    tcase_add_test(t, test_sampling_bf16);
    tcase_add_test(t, test_sample_logits_filters);
    tcase_add_test(t, test_vocab_and_utf8);
    tcase_add_test(t, test_checkpoint_round_trip);
    tcase_add_test(t, test_history_json);
    tcase_add_test(t, test_history_train_line);
    tcase_add_test(t, test_history_far_steps);
    tcase_add_test(t, test_history_best_ties);
    tcase_add_test(t, test_progress_lines);
    tcase_add_test(t, test_train_signals);
    tcase_add_test(t, test_progress_tty);
    tcase_add_test(t, test_prog_messages);
    tcase_add_test(t, test_ckpt_open_refusals);
    tcase_add_test(t, test_origin_of_opened_bytes);
    tcase_add_test(t, test_average_needs_two);
    tcase_add_test(t, test_lora_attach_refusals);
    tcase_add_test(t, test_history_long);
    tcase_add_test(t, test_flag_table);
    tcase_add_test(t, test_flag_switch_off);
    tcase_add_test(t, test_flag_values);
    tcase_add_test(t, test_precision_note);
    tcase_add_test(t, test_generate_text_streams);
    tcase_add_test(t, test_generate_text_streams_held_back_fffd);
    tcase_add_test(t, test_corpus_bpe);
    tcase_add_test(t, test_corpus_bpe_long_lines);
    suite_add_tcase(s, t);
    TCase *p = tcase_create("program");
    tcase_set_timeout(p, 300);
    tcase_add_test(p, test_resume_is_exact);
    tcase_add_test(p, test_bad_inputs);
    tcase_add_test(p, test_grad_accum_and_metrics);
    tcase_add_test(p, test_optimizer_flags);
    tcase_add_test(p, test_trainer_eval_fails);
    tcase_add_test(p, test_trainer_collective_fails);
    tcase_add_test(p, test_loss_avg_window);
    tcase_add_test(p, test_log_every_default);
    suite_add_tcase(s, p);
    TCase *st = tcase_create("stepper");
    tcase_add_test(st, test_stepper_init);
    tcase_add_test(st, test_stepper_nonfinite);
    tcase_add_test(st, test_stepper_backward_fails);
    tcase_add_test(st, test_ckpt_tensor_checks);
    suite_add_tcase(s, st);
    return s;
}

int main(void)
{
    Suite *s[] = {zoo_suite()};
    return cg_test_run(s, 1);
}
