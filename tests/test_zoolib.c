/* Check suite "zoolib": the zoo's models as library models (models/zoo/zoo.h,
 * issue 33). Checkpoints are written here with the programs' own savers
 * (tiny random models), then read through the library only:
 *   - the config holds every architectural fact, also for a checkpoint
 *     written before the facts were recorded;
 *   - the tokenizer round trip, and unknown characters counted;
 *   - score against independent computations (the forward's cross-entropy
 *     per window; beam search's sum of log-probabilities);
 *   - greedy generation against the argmax of the forward, step by step;
 *   - refusals: another model's call, float ids, a file that is no zoo
 *     checkpoint, NULL in, a damaged weights' average (its tensors without
 *     "ema.updates", more updates than steps). The programs' equality
 *     (charlm sample, seq2seq translate) is tests/test_zoo_lib.sh's. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/sampling.h"
#include "models/seq2seq/beam.h"
#include "models/seq2seq/seq2seq_ckpt.h"
#include "models/train/finetune.h"
#include "models/zoo/zoo.h"
#include "optim/ema.h"
#include "tests/testutil.h"

static char lm_path[64], s2s_path[64], old_path[64];
static const char TEXT[] = "the whale and the sea, the ship and the captain";

static void setup(void) { cg_clear_error(); }

/* A charlm (max_len 8, so scores and generation slide) and a seq2seq,
 * saved with random weights. */
static void make_ckpts(void)
{
    snprintf(lm_path, sizeof lm_path, "zoolib_lm_%d.st", (int)getpid());
    snprintf(s2s_path, sizeof s2s_path, "zoolib_s2s_%d.st", (int)getpid());
    snprintf(old_path, sizeof old_path, "zoolib_old_%d.st", (int)getpid());
    uint32_t cps[sizeof TEXT];
    int64_t n = 0;
    for (const char *p = TEXT; *p; p++)
        cps[n++] = (uint32_t)*p;
    cg_vocab *v = cg_vocab_from_codepoints(cps, n);
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = v->n, c.d = 16, c.H = 2, c.layers = 2, c.d_ff = 32, c.max_len = 8;
    c.dropout = 0.5f; /* eval mode matters (test_decoding_keeps_mode) */
    cg_charlm *lm = cg_charlm_new(&c, 3);
    ck_assert(cg_charlm_ckpt_save(lm_path, lm, v, NULL, 0, NULL));
    /* as 388f5e0 wrote it: the config without the architectural facts */
    const cg_tokenizer tok = {.kind = CG_TOK_CHAR, .cv = v};
    char old_cfg[256];
    snprintf(old_cfg, sizeof old_cfg,
             "{\"model\": \"charlm\", \"vocab\": %lld, \"d\": 16, \"H\": 2, \"layers\": 2, "
             "\"d_ff\": 32, \"max_len\": 8, \"norm\": \"layernorm\", \"act\": \"gelu\", "
             "\"norm_first\": true, \"dropout\": 0}",
             (long long)v->n);
    ck_assert(cg_ckpt_save(old_path, "charlm", old_cfg, &tok, CG_MODULE(lm), NULL, 0, NULL));
    cg_charlm_free(lm);
    cg_vocab_free(v);

    const char *sents[] = {"the cat sat", "die katze sass", "a dog", "ein hund"};
    cg_tokenizer *st = cg_tokenizer_train(CG_TOK_CHAR, true, sents, 4, 0);
    cg_seq2seq_config s = cg_seq2seq_config_default();
    s.vocab = cg_tokenizer_vocab_size(st), s.d = 16, s.H = 2, s.d_ff = 32, s.max_len = 32;
    cg_seq2seq *sm = cg_seq2seq_new(&s, 4);
    ck_assert(cg_seq2seq_ckpt_save(s2s_path, sm, st, NULL, 0, NULL));
    cg_seq2seq_free(sm);
    cg_tokenizer_free(st);
}

static void remove_ckpts(void)
{
    remove(lm_path);
    remove(s2s_path);
    remove(old_path);
}

START_TEST(test_load_config)
{
    const char *paths[] = {lm_path, old_path, s2s_path};
    for (int i = 0; i < 3; i++) {
        cg_zoo_model *m = cg_zoo_load(paths[i]);
        ck_assert_msg(m, "%s: %s", paths[i], cg_last_error());
        ck_assert_str_eq(cg_zoo_kind(m), i < 2 ? "charlm" : "seq2seq");
        cJSON *o = cJSON_Parse(cg_zoo_config(m));
        const char *facts[][2] = {
            {"emb_scale", "sqrt_d"}, {"pos_enc", "sinusoidal"}, {"gelu_approximate", "tanh"}};
        for (int k = 0; k < 3; k++)
            ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, facts[k][0])),
                             facts[k][1]);
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "tied_head")));
        ck_assert(cJSON_GetObjectItem(o, "final_norm")->type ==
                  cJSON_GetObjectItem(o, "norm_first")->type);
        ck_assert_double_eq(cJSON_GetObjectItem(o, "vocab")->valuedouble,
                            (double)cg_zoo_vocab_size(m));
        cJSON_Delete(o);
        ck_assert(!cg_zoo_module(m)->training); /* loaded in eval mode */
        cg_zoo_free(m);
    }
}
END_TEST

START_TEST(test_tokenizer)
{
    cg_zoo_model *m = cg_zoo_load(lm_path);
    int64_t unk = -1;
    cg_tensor *ids = cg_zoo_encode(m, "the sea", &unk);
    ck_assert_int_eq(cg_numel(ids), 7);
    ck_assert_int_eq(unk, 0);
    char *back = cg_zoo_decode(m, ids);
    ck_assert_str_eq(back, "the sea");
    free(back);
    cg_release(ids);
    ids = cg_zoo_encode(m, "the zoo", &unk); /* z and o are not in the text */
    ck_assert_int_eq(unk, 3);
    cg_release(ids);
    CG_ASSERT_FAILS(cg_zoo_encode(m, "bad \xff byte", NULL), "UTF-8");
    cg_zoo_free(m);
    m = cg_zoo_load(s2s_path); /* specials: pad, bos, eos dropped by decode */
    ids = cg_from_i64(CG_SHAPE(4), ((const int64_t[]){1, 2, 0, 2}));
    back = cg_zoo_decode(m, ids);
    ck_assert_str_eq(back, "");
    free(back);
    cg_release(ids);
    cg_zoo_free(m);
}
END_TEST

/* The mean cross-entropy of ids[0..n) -> ids[1..n] by one forward. */
static double window_loss(cg_zoo_model *m, const int64_t *ids, int64_t n)
{
    cg_tensor *x = cg_from_i64(CG_SHAPE(1, n - 1), ids);
    cg_tensor *y = cg_from_i64(CG_SHAPE(1, n - 1), ids + 1);
    cg_tensor *l = cg_zoo_forward(m, x, NULL);
    cg_tensor *ce = cg_cross_entropy(l, y, -100, 0.0f, CG_REDUCTION_MEAN);
    double v = cg_item(ce);
    cg_release_all(4, x, y, l, ce);
    return v;
}

START_TEST(test_score)
{
    cg_zoo_model *m = cg_zoo_load(lm_path);
    cg_tensor *ids = cg_zoo_encode(m, "the ship and", NULL); /* 12 ids, max_len 8 */
    const int64_t *v = cg_data_i64(ids);
    /* one window of 5 */
    cg_tensor *few = cg_from_i64(CG_SHAPE(6), v);
    ck_assert_double_eq_tol(cg_zoo_score(m, few, NULL), window_loss(m, v, 6), 1e-6);
    /* 11 predictions: one window of 8, the 3 left over are left out (eval's rule) */
    ck_assert_double_eq_tol(cg_zoo_score(m, ids, NULL), window_loss(m, v, 9), 1e-6);
    ck_assert(isnan(cg_zoo_score(m, ids, ids)));
    ck_assert(strstr(cg_last_error(), "y = NULL"));
    cg_release_all(2, ids, few);
    cg_zoo_free(m);

    m = cg_zoo_load(s2s_path);
    cg_tensor *src = cg_zoo_encode(m, "the cat sat", NULL),
              *tgt = cg_zoo_encode(m, "die katze", NULL);
    int64_t S = cg_numel(src), T = cg_numel(tgt);
    int64_t *se = malloc((size_t)(S + 1) * sizeof *se);
    memcpy(se, cg_data_i64(src), (size_t)S * sizeof *se);
    se[S] = 2; /* EOS */
    cg_seq2seq *sm = (cg_seq2seq *)cg_zoo_module(m);
    double sum = cg_seq2seq_score(sm, se, S + 1, cg_data_i64(tgt), T, true, 0.0);
    ck_assert_double_eq_tol(cg_zoo_score(m, src, tgt), -sum / (double)(T + 1), 1e-5);
    free(se);
    cg_release_all(2, src, tgt);
    cg_zoo_free(m);
}
END_TEST

START_TEST(test_generate_greedy)
{
    cg_zoo_model *m = cg_zoo_load(lm_path);
    cg_tensor *p = cg_zoo_encode(m, "the", NULL);
    cg_sample_config g = {.temperature = 0, .top_k = 0, .top_p = 1};
    cg_tensor *out = cg_zoo_generate(m, p, 4, &g, 99);
    ck_assert_int_eq(cg_numel(out), 7);
    const int64_t *o = cg_data_i64(out);
    for (int64_t len = 3; len < 7; len++) { /* within max_len: the whole prefix */
        cg_tensor *x = cg_from_i64(CG_SHAPE(1, len), o);
        cg_tensor *l = cg_zoo_forward(m, x, NULL);
        cg_tensor *row = cg_view_select(l, 0, 0), *last = cg_view_select(row, 0, len - 1);
        cg_tensor *am = cg_argmax(last, 0, false);
        ck_assert_int_eq(cg_item_i64(am), o[len]);
        cg_release_all(5, x, l, row, last, am);
    }
    ck_assert_int_eq(memcmp(o, cg_data_i64(p), 3 * sizeof *o), 0); /* the prompt first */
    /* the logit rules: NULL is cg_zoo_generate; with them, cg_charlm_generate_ex's ids */
    cg_tensor *same = cg_zoo_generate_ex(m, p, 4, &g, NULL, 99);
    ck_assert(same && !memcmp(cg_data_i64(same), o, 7 * sizeof *o));
    const cg_logit_rules r = {.repetition_penalty = 3.0, .no_repeat_ngram_size = 2};
    cg_tensor *ruled = cg_zoo_generate_ex(m, p, 12, &g, &r, 99);
    cg_charlm_ckpt ck;
    ck_assert(ruled && cg_charlm_ckpt_load(lm_path, &ck));
    cg_rng rng = cg_rng_new(99);
    int64_t *want =
        cg_charlm_generate_ex(ck.model, cg_data_i64(p), 3, 12, &g, &r, &rng, true, NULL, NULL);
    ck_assert(want && !memcmp(cg_data_i64(ruled), want, 15 * sizeof *want));
    free(want);
    cg_charlm_ckpt_free(&ck);
    CG_ASSERT_FAILS(cg_zoo_generate_ex(m, p, 2, &g, &(cg_logit_rules){0.0, 0}, 1),
                    "repetition_penalty is 0");
    cg_release_all(4, p, out, same, ruled);
    cg_zoo_free(m);
}
END_TEST

START_TEST(test_refusals)
{
    cg_zoo_model *lm = cg_zoo_load(lm_path), *s = cg_zoo_load(s2s_path);
    const char *texts[] = {"the cat"};
    CG_ASSERT_FAILS(cg_zoo_translate(lm, texts, 1, 1, 0.6), "a charlm model has no translate");
    cg_tensor *p = cg_zoo_encode(s, "the", NULL);
    CG_ASSERT_FAILS(cg_zoo_generate(s, p, 3, NULL, 1), "a seq2seq model has no generate");
    cg_tensor *f = cg_ones(CG_SHAPE(3));
    CG_ASSERT_FAILS(cg_zoo_generate(lm, f, 3, NULL, 1), "float32");
    cg_tensor *x = cg_reshape(p, 2, (const int64_t[]){1, cg_numel(p)});
    CG_ASSERT_FAILS(cg_zoo_forward(lm, x, x), "takes no tgt_in");
    CG_ASSERT_FAILS(cg_zoo_forward(lm, p, NULL), "x must be [B, T]");
    cg_release(x);
    CG_ASSERT_FAILS(cg_zoo_generate(lm, p, -1, NULL, 1), "n_new");
    /* NULL in, NULL out (the first error kept) */
    cg_clear_error();
    CG_ASSERT_FAILS(cg_zoo_load(NULL), "NULL path");
    ck_assert_ptr_null(cg_zoo_encode(NULL, "x", NULL));
    ck_assert_str_eq(cg_last_error(), "zoo load: NULL path");
    ck_assert_int_eq(cg_zoo_vocab_size(NULL), -1);
    cg_zoo_free(NULL);
    /* a safetensors file of another kind */
    char path[64];
    snprintf(path, sizeof path, "zoolib_plain_%d.st", (int)getpid());
    ck_assert(cg_module_save(cg_zoo_module(lm), path, 0, NULL));
    CG_ASSERT_FAILS(cg_zoo_load(path), "is not a zoo checkpoint");
    remove(path);
    char **two =
        cg_zoo_translate(s, (const char *[]){"the cat", "a dog"}, 2, 2, CG_ZOO_LENGTH_PENALTY);
    ck_assert(two && two[0] && two[1]);
    cg_zoo_strings_free(two, 2);
    /* the library's default alpha is the program's (two headers, one value) */
    ck_assert(CG_ZOO_LENGTH_PENALTY == CG_BEAM_ALPHA);
    ck_assert_double_eq(strtod(CG_BEAM_ALPHA_TEXT, NULL), CG_BEAM_ALPHA);
    cg_release_all(2, p, f);
    cg_zoo_free(lm);
    cg_zoo_free(s);
}
END_TEST

/* n_new so large that the prompt and the new ids overflow int64 (or
 * size_t bytes) is refused, never a short buffer written past its end. */
START_TEST(test_generate_huge_n_new)
{
    cg_zoo_model *m = cg_zoo_load(lm_path);
    cg_tensor *p = cg_zoo_encode(m, "the", NULL);
    CG_ASSERT_FAILS(cg_zoo_generate(m, p, INT64_MAX, NULL, 1), "n_new");
    CG_ASSERT_FAILS(cg_zoo_generate(m, p, INT64_MAX - 2, NULL, 1), "n_new");
    cg_release(p);
    cg_zoo_free(m);
}
END_TEST

/* A NULL among the sentences is named, not "unknown error". */
START_TEST(test_translate_null_sentence)
{
    cg_zoo_model *m = cg_zoo_load(s2s_path);
    CG_ASSERT_FAILS(cg_zoo_translate(m, (const char *[]){"the cat", NULL}, 2, 1, 1.0),
                    "translate: sentence 2 is NULL");
    cg_zoo_free(m);
}
END_TEST

/* Beam search's length penalty needs a finite alpha: NaN made every
 * score NaN and the "best" hypothesis an arbitrary one. */
START_TEST(test_translate_alpha_not_finite)
{
    cg_zoo_model *m = cg_zoo_load(s2s_path);
    const char *texts[] = {"the cat"};
    CG_ASSERT_FAILS(cg_zoo_translate(m, texts, 1, 2, NAN), "alpha");
    CG_ASSERT_FAILS(cg_zoo_translate(m, texts, 1, 2, INFINITY), "alpha");
    char **ok = cg_zoo_translate(m, texts, 1, 1, NAN); /* greedy: no length penalty */
    ck_assert_msg(ok, "%s", cg_last_error());
    cg_zoo_strings_free(ok, 1);
    cg_zoo_free(m);
}
END_TEST

/* cg_zoo_translate_ex: NULL is cg_zoo_translate (the program's defaults,
 * which the two headers spell alike); limits give cg_translate_all's
 * translations under them (`seq2seq translate`'s), greedy and beam; bad
 * limits are refused naming the field. */
START_TEST(test_translate_limits)
{
    cg_zoo_model *m = cg_zoo_load(s2s_path);
    cg_seq2seq_ckpt c;
    ck_assert(m && cg_seq2seq_ckpt_load(s2s_path, &c));
    const char *texts[] = {"the cat", "a dog and the sea"};
    cg_sources src;
    ck_assert(cg_sources_encode(c.tok, texts, 2, c.model->cfg.max_len, &src));
    const cg_decode_limits l = {0.5, 1, 2, 1};
    for (int beam = 1; beam <= 2; beam++) {
        char **a = cg_zoo_translate(m, texts, 2, beam, 1.0);
        char **b = cg_zoo_translate_ex(m, texts, 2, beam, 1.0, NULL);
        char **d = cg_zoo_translate_ex(m, texts, 2, beam, 1.0, &l);
        char **want = cg_translate_all(c.model, c.tok, &src, beam, 1.0, true, &l, NULL);
        ck_assert_msg(a && b && d && want, "%s", cg_last_error());
        for (int i = 0; i < 2; i++) {
            ck_assert_str_eq(a[i], b[i]);
            ck_assert_str_eq(d[i], want[i]);
        }
        cg_zoo_strings_free(a, 2);
        cg_zoo_strings_free(b, 2);
        cg_zoo_strings_free(d, 2);
        cg_strings_free(want, 2);
    }
    CG_ASSERT_FAILS(cg_zoo_translate_ex(m, texts, 1, 1, 1.0, &(cg_decode_limits){1, -1, 0, 0}),
                    "max_len_b is -1");
    ck_assert(CG_ZOO_MAX_LEN_A == CG_MAX_LEN_A && CG_ZOO_MAX_LEN_B == CG_MAX_LEN_B);
    cg_sources_free(&src);
    cg_seq2seq_ckpt_free(&c);
    cg_zoo_free(m);
}
END_TEST

/* cg_zoo_translate_sample: cg_translate_sample's translations (the
 * program's --sampling), top-k above the vocabulary all of it; reproducible
 * by seed, another seed others; temperature 0 the greedy ones; errors. */
START_TEST(test_translate_sample)
{
    cg_zoo_model *m = cg_zoo_load(s2s_path);
    cg_seq2seq_ckpt c;
    ck_assert(m && cg_seq2seq_ckpt_load(s2s_path, &c));
    const char *texts[] = {"the cat", "a dog and the sea", "the sea"};
    cg_sources src;
    ck_assert(cg_sources_encode(c.tok, texts, 3, c.model->cfg.max_len, &src));
    const cg_sample_config s = {.temperature = 1.5, .top_k = 1000000, .top_p = 0.95};
    cg_sample_config k = s;
    k.top_k = c.model->cfg.vocab;
    char **a = cg_zoo_translate_sample(m, texts, 3, &s, 11, NULL);
    char **b = cg_zoo_translate_sample(m, texts, 3, &s, 11, NULL);
    char **d = cg_zoo_translate_sample(m, texts, 3, &s, 12, NULL);
    char **want = cg_translate_sample(c.model, c.tok, &src, &k, 11, true, NULL, NULL);
    const cg_sample_config t0 = {.temperature = 0, .top_k = 0, .top_p = 1};
    char **g = cg_zoo_translate_sample(m, texts, 3, &t0, 5, NULL);
    char **gw = cg_zoo_translate(m, texts, 3, 1, 1.0);
    ck_assert_msg(a && b && d && want && g && gw, "%s", cg_last_error());
    int other = 0;
    for (int i = 0; i < 3; i++) {
        ck_assert_str_eq(a[i], want[i]);
        ck_assert_str_eq(a[i], b[i]);
        ck_assert_str_eq(g[i], gw[i]);
        other += strcmp(a[i], d[i]) != 0;
    }
    ck_assert_int_gt(other, 0);
    cg_zoo_strings_free(a, 3);
    cg_zoo_strings_free(b, 3);
    cg_zoo_strings_free(d, 3);
    cg_zoo_strings_free(g, 3);
    cg_zoo_strings_free(gw, 3);
    cg_strings_free(want, 3);
    const char *bad[] = {"the cat", NULL};
    CG_ASSERT_FAILS(cg_zoo_translate_sample(m, bad, 2, &s, 1, NULL), "sentence 2 is NULL");
    CG_ASSERT_FAILS(cg_zoo_translate_sample(m, texts, 1, &s, 1, &(cg_decode_limits){1, -1, 0, 0}),
                    "max_len_b is -1");
    cg_zoo_model *lm = cg_zoo_load(lm_path);
    ck_assert_ptr_nonnull(lm);
    ck_assert_ptr_null(cg_zoo_translate_sample(lm, texts, 1, &s, 1, NULL));
    cg_clear_error();
    cg_zoo_free(lm);
    cg_sources_free(&src);
    cg_seq2seq_ckpt_free(&c);
    cg_zoo_free(m);
}
END_TEST

/* Generation and translation run in eval mode and leave the module in the
 * mode the caller set (as score does): a user fine-tuning the model who
 * looks at a sample between steps keeps training with dropout. */
START_TEST(test_decoding_keeps_mode)
{
    cg_zoo_model *m = cg_zoo_load(lm_path);
    cg_tensor *p = cg_zoo_encode(m, "the", NULL);
    cg_sample_config g = {.temperature = 0, .top_k = 0, .top_p = 1};
    cg_tensor *want = cg_zoo_generate(m, p, 12, &g, 1); /* in eval mode */
    cg_module_train(cg_zoo_module(m), true);
    cg_tensor *got = cg_zoo_generate(m, p, 12, &g, 1);
    ck_assert_msg(got, "%s", cg_last_error());
    ck_assert(cg_zoo_module(m)->training);
    ck_assert_int_eq(memcmp(cg_data_i64(got), cg_data_i64(want), 15 * sizeof(int64_t)), 0);
    cg_release_all(3, p, want, got);
    cg_zoo_free(m);

    m = cg_zoo_load(s2s_path);
    const char *texts[] = {"the cat"};
    for (int beam = 1; beam <= 2; beam++) {
        cg_module_train(cg_zoo_module(m), true);
        char **out = cg_zoo_translate(m, texts, 1, beam, 1.0);
        ck_assert_msg(out, "%s", cg_last_error());
        ck_assert_msg(cg_zoo_module(m)->training, "beam %d", beam);
        cg_zoo_strings_free(out, 1);
    }
    cg_zoo_free(m);
}
END_TEST

/* generate and score take one sequence: [n], or [1, n] as nanoGPT's idx;
 * a batch [2, n] was read as one sequence of 2n ids (a silently wrong
 * sample or score), and is refused. */
START_TEST(test_one_sequence)
{
    cg_zoo_model *m = cg_zoo_load(lm_path);
    cg_tensor *p = cg_zoo_encode(m, "the sea", NULL); /* 7 ids */
    const int64_t *v = cg_data_i64(p);
    cg_tensor *row = cg_from_i64(CG_SHAPE(1, 7), v), *two = cg_from_i64(CG_SHAPE(2, 3), v);
    cg_sample_config g = {.temperature = 0, .top_k = 0, .top_p = 1};
    cg_tensor *a = cg_zoo_generate(m, p, 3, &g, 1), *b = cg_zoo_generate(m, row, 3, &g, 1);
    ck_assert_msg(a && b, "%s", cg_last_error());
    ck_assert_int_eq(memcmp(cg_data_i64(a), cg_data_i64(b), 10 * sizeof(int64_t)), 0);
    ck_assert_double_eq(cg_zoo_score(m, p, NULL), cg_zoo_score(m, row, NULL));
    CG_ASSERT_FAILS(cg_zoo_generate(m, two, 3, &g, 1), "prompt must be one sequence");
    ck_assert(isnan(cg_zoo_score(m, two, NULL)));
    ck_assert(strstr(cg_last_error(), "x must be one sequence"));
    cg_release_all(5, p, row, two, a, b);
    cg_zoo_free(m);

    m = cg_zoo_load(s2s_path);
    cg_tensor *src = cg_zoo_encode(m, "the cat", NULL);
    cg_tensor *y2 = cg_from_i64(CG_SHAPE(2, 2), cg_data_i64(src));
    ck_assert(isnan(cg_zoo_score(m, src, y2)));
    ck_assert(strstr(cg_last_error(), "y must be one sequence"));
    cg_release_all(2, src, y2);
    cg_zoo_free(m);
}
END_TEST

/* src's tensors as F64 in a new file dst, its metadata kept: what the
 * reference's safetensors_io.save writes for a model.double() state dict. */
static void write_f64_copy(const char *src, const char *dst)
{
    cg_st_file *f = cg_st_open(src);
    ck_assert(f);
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    for (int i = 0; i < cg_st_metadata_count(f); i++)
        cJSON_AddStringToObject(meta, cg_st_metadata_key(f, i),
                                cg_st_metadata(f, cg_st_metadata_key(f, i)));
    size_t off = 0, cap = 0;
    double *data = NULL;
    for (int i = 0; i < cg_st_count(f); i++) {
        cg_tensor *t = cg_st_get_f32(f, cg_st_name(f, i));
        ck_assert(t);
        int64_t n = cg_numel(t);
        data = realloc(data, (cap += (size_t)n) * sizeof *data);
        for (int64_t k = 0; k < n; k++)
            data[off + (size_t)k] = cg_data(t)[k];
        cJSON *e = cJSON_AddObjectToObject(h, cg_st_name(f, i));
        cJSON_AddStringToObject(e, "dtype", "F64");
        cJSON *shape = cJSON_AddArrayToObject(e, "shape"),
              *o = cJSON_AddArrayToObject(e, "data_offsets");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)(off * 8)));
        cJSON_AddItemToArray(o, cJSON_CreateNumber((double)((off + (size_t)n) * 8)));
        off += (size_t)n;
        cg_release(t);
    }
    char *json = cJSON_PrintUnformatted(h);
    uint64_t len = strlen(json);
    FILE *out = fopen(dst, "wb");
    ck_assert(out && fwrite(&len, 8, 1, out) == 1 && fwrite(json, 1, len, out) == len &&
              fwrite(data, 8, off, out) == off && fclose(out) == 0);
    free(json);
    free(data);
    cJSON_Delete(h);
    cg_st_close(f);
}

/* A checkpoint whose parameters are float64 is refused naming a tensor and
 * its dtype (it said "its config needs N parameter values but the file
 * holds 0; corrupt file?"). */
START_TEST(test_float64_checkpoint)
{
    char path[64];
    snprintf(path, sizeof path, "zoolib_f64_%d.st", (int)getpid());
    write_f64_copy(lm_path, path);
    CG_ASSERT_FAILS(cg_zoo_load(path), "tensor 'tok_emb.weight' has dtype F64, expected F32, "
                                       "BF16 or F16");
    remove(path);
}
END_TEST

/* Does every trainable parameter of m hold the bits of e's average? */
static bool params_are_averages(const cg_module *m, const cg_ema *e)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    bool same = true;
    for (int i = 0, k = 0; i < l.n; i++) {
        if (!l.items[i].tensor->requires_grad)
            continue;
        const cg_tensor *a = cg_ema_average(e, k++);
        same = same && memcmp(cg_data(l.items[i].tensor), cg_data(a),
                              (size_t)cg_numel(a) * sizeof(float)) == 0;
    }
    cg_param_list_free(&l);
    return same;
}

/* A checkpoint with the weights' average of a run with --ema-decay
 * (models/train/checkpoint.h cg_ckpt_weights): the loaders give the
 * average unless asked for the trained weights, and cg_zoo_load scores
 * with it as a file holding the averages as weights does. */
START_TEST(test_load_uses_average)
{
    char path[64], avg_path[64];
    snprintf(path, sizeof path, "zoolib_ema_%d.st", (int)getpid());
    snprintf(avg_path, sizeof avg_path, "zoolib_avg_%d.st", (int)getpid());
    cg_charlm_ckpt ck;
    ck_assert(cg_charlm_ckpt_load(lm_path, &ck));
    ck_assert(!ck.averaged); /* a file without one */
    cg_module *m = CG_MODULE(ck.model);
    cg_ema *e = cg_ema_new(m, 0.5);
    cg_param_list l = {0};
    ck_assert(e && cg_module_params(m, &l));
    for (int i = 0; i < l.n; i++) { /* trained on: every weight doubled */
        float *p = cg_data(l.items[i].tensor);
        for (int64_t j = 0; j < cg_numel(l.items[i].tensor); j++)
            p[j] *= 2;
        cg_tensor_modified(l.items[i].tensor);
    }
    cg_param_list_free(&l);
    ck_assert(cg_ema_update(e)); /* averages 1.5x the first weights */
    char *cfg = cg_charlm_config_to_json(&ck.model->cfg);
    const cg_ft_save ft = {.ema = e};
    ck_assert(cg_ft_ckpt_save(path, &ft, "charlm", cfg, ck.tok, m, NULL, 1, NULL));
    ck_assert(cg_ema_swap(e)); /* a file holding the averages as its weights */
    ck_assert(cg_ckpt_save(avg_path, "charlm", cfg, ck.tok, m, NULL, 1, NULL));
    ck_assert(cg_ema_swap(e));
    free(cfg);

    cg_charlm_ckpt a, t;
    ck_assert(cg_charlm_ckpt_load(path, &a));
    ck_assert(a.averaged && params_are_averages(CG_MODULE(a.model), e));
    const cg_charlm_load_opts trained = {.dropout = NAN, .weights = CG_CKPT_TRAINED};
    ck_assert(cg_charlm_ckpt_load_opts(path, &trained, &t));
    ck_assert(!t.averaged && !params_are_averages(CG_MODULE(t.model), e));
    cg_param_list lt = {0}, lm = {0};
    ck_assert(cg_module_params(CG_MODULE(t.model), &lt) && cg_module_params(m, &lm));
    for (int i = 0; i < lt.n; i++) /* the trained weights, as saved */
        ck_assert(memcmp(cg_data(lt.items[i].tensor), cg_data(lm.items[i].tensor),
                         (size_t)cg_numel(lm.items[i].tensor) * sizeof(float)) == 0);
    cg_param_list_free(&lt);
    cg_param_list_free(&lm);

    cg_zoo_model *z = cg_zoo_load(path), *za = cg_zoo_load(avg_path);
    cg_tensor *ids = cg_zoo_encode(z, "the ship and", NULL);
    ck_assert(z && za && ids);
    ck_assert_double_eq(cg_zoo_score(z, ids, NULL), cg_zoo_score(za, ids, NULL));
    cg_release(ids);
    cg_zoo_free(z);
    cg_zoo_free(za);
    cg_charlm_ckpt_free(&a);
    cg_charlm_ckpt_free(&t);
    cg_ema_free(e);
    cg_charlm_ckpt_free(&ck);
    remove(path);
    remove(avg_path);
}
END_TEST

/* A damaged average: cg_zoo_load refuses, naming the file, the averages'
 * tensors without "ema.updates" and more updates than the file's steps;
 * the trained weights still load. */
START_TEST(test_load_refuses_damaged_average)
{
    char path[64];
    snprintf(path, sizeof path, "zoolib_bad_ema_%d.st", (int)getpid());
    cg_charlm_ckpt ck;
    ck_assert(cg_charlm_ckpt_load(lm_path, &ck));
    cg_module *m = CG_MODULE(ck.model);
    char *cfg = cg_charlm_config_to_json(&ck.model->cfg);
    cg_ema *e = cg_ema_new(m, 0.5);
    ck_assert(cfg && e);
    for (int k = 0; k < 2; k++) {
        cg_st_writer *w = cg_ckpt_writer("charlm", cfg, ck.tok, m, NULL, 1, NULL);
        char name[256]; /* k 0: an average's tensor alone; 1: 2 updates at step 1 */
        snprintf(name, sizeof name, "ema.%s", cg_ema_name(e, 0));
        ck_assert(w && (k == 1 || cg_st_add_f32(w, name, cg_ema_average(e, 0))));
        ck_assert(k == 0 || (cg_ema_update(e) && cg_ema_update(e) && cg_ema_save(e, w, "ema")));
        ck_assert(cg_ckpt_writer_save(w, path));
        cg_clear_error();
        ck_assert_ptr_null(cg_zoo_load(path));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), path));
        ck_assert_ptr_nonnull(strstr(cg_last_error(), k == 0 ? "no metadata 'ema.updates'"
                                                             : "'ema.updates' = 2 is more than"));
        cg_charlm_ckpt t;
        const cg_charlm_load_opts trained = {.dropout = NAN, .weights = CG_CKPT_TRAINED};
        ck_assert(cg_charlm_ckpt_load_opts(path, &trained, &t));
        cg_charlm_ckpt_free(&t);
    }
    cg_ema_free(e);
    free(cfg);
    cg_charlm_ckpt_free(&ck);
    remove(path);
}
END_TEST

static Suite *zoolib_suite(void)
{
    Suite *s = suite_create("zoolib");
    TCase *tc = tcase_create("zoolib");
    tcase_add_unchecked_fixture(tc, make_ckpts, remove_ckpts);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_load_config);
    tcase_add_test(tc, test_tokenizer);
    tcase_add_test(tc, test_score);
    tcase_add_test(tc, test_generate_greedy);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_generate_huge_n_new);
    tcase_add_test(tc, test_translate_null_sentence);
    tcase_add_test(tc, test_translate_alpha_not_finite);
    tcase_add_test(tc, test_translate_limits);
    tcase_add_test(tc, test_translate_sample);
    tcase_add_test(tc, test_decoding_keeps_mode);
    tcase_add_test(tc, test_one_sequence);
    tcase_add_test(tc, test_float64_checkpoint);
    tcase_add_test(tc, test_load_uses_average);
    tcase_add_test(tc, test_load_refuses_damaged_average);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {zoolib_suite()};
    return cg_test_run(s, 1);
}
