/* Check suite "models": models/charlm/charlm.{h,c} and models/seq2seq/seq2seq.{h,c}.
 *
 * Construction errors, parameter names/order/count equal to models.py's
 * (hard-coded from `/usr/bin/python3` on shared/reference/models.py), the
 * init rule, forward shapes and input errors, causality and padding
 * invariance, encode/decode = forward, and two tiny overfits (a char LM on a
 * repeated string, a seq2seq on three pairs) that must reach loss < 0.1.
 * Numerical parity with PyTorch is tests/parity.c's job. */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "models/charlm/charlm.h"
#include "models/seq2seq/seq2seq.h"
#include "models/train/model_common.h"
#include "models/train/options.h"
#include "optim/optim.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------ helpers */
static void setup(void) { cg_clear_error(); }

static cg_charlm_config small_lm(void)
{
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = 20, c.d = 16, c.H = 2, c.layers = 2, c.d_ff = 32, c.max_len = 16;
    return c;
}

static cg_seq2seq_config small_s2s(void)
{
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = 20, c.d = 16, c.H = 2, c.enc_layers = 1, c.dec_layers = 2, c.d_ff = 32;
    c.max_len = 16;
    return c;
}

static void assert_names(cg_module *m, const char *const *expect, int n)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    ck_assert_int_eq(l.n, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(!strcmp(l.items[i].name, expect[i]), "parameter %d: '%s', expected '%s'", i,
                      l.items[i].name, expect[i]);
    cg_param_list_free(&l);
}

/* An AdamW over every parameter of m (weight decay wd on all). */
static cg_optim *adamw(cg_module *m, double lr, double wd)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    cg_optim_param *p = calloc((size_t)l.n, sizeof *p);
    for (int i = 0; i < l.n; i++)
        p[i] = (cg_optim_param){l.items[i].name, l.items[i].tensor, wd};
    cg_optim_config c = cg_adamw_config(lr, 0.9, 0.98, 1e-9);
    cg_optim *o = cg_optim_new(&c, l.n, p);
    ck_assert_msg(o != NULL, "%s", cg_last_error());
    free(p);
    cg_param_list_free(&l);
    return o;
}

static bool tensors_equal(const cg_tensor *a, const cg_tensor *b)
{
    if (!cg_same_shape(a, b))
        return false;
    float *x = cg_test_values(a), *y = cg_test_values(b);
    bool eq = !memcmp(x, y, sizeof(float) * (size_t)cg_numel(a));
    free(x);
    free(y);
    return eq;
}

/* ---------------------------------------------------------- config */
START_TEST(test_charlm_bad_config)
{
    cg_charlm_config c = small_lm();
    c.d = 30, c.H = 4;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "d=30 is not divisible by H=4");
    c = small_lm(), c.vocab = 0;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "vocab");
    c = small_lm(), c.layers = -1;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "layers");
    /* dropout in [0, 1], as nn.Dropout: 1 is taken (it was refused) */
    c = small_lm(), c.dropout = 1.0f;
    cg_charlm *m1 = cg_charlm_new(&c, 0);
    ck_assert_msg(m1 != NULL, "%s", cg_last_error());
    cg_module_free(CG_MODULE(m1));
    c = small_lm(), c.dropout = 1.5f;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "charlm config: dropout must be in [0, 1] (got 1.5)");
    c = small_lm(), c.dropout = NAN;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "dropout must be in [0, 1]");
    c = small_lm(), c.dropout = -0.5f;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "dropout must be in [0, 1]");
    c = small_lm(), c.max_len = 0;
    CG_ASSERT_FAILS(cg_charlm_new(&c, 0), "max_len");
    CG_ASSERT_FAILS(cg_charlm_new(NULL, 0), "NULL");
}
END_TEST

START_TEST(test_seq2seq_bad_config)
{
    cg_seq2seq_config c = small_s2s();
    c.d = 16, c.H = 3;
    CG_ASSERT_FAILS(cg_seq2seq_new(&c, 0), "d=16 is not divisible by H=3");
    c = small_s2s(), c.vocab = 3;
    CG_ASSERT_FAILS(cg_seq2seq_new(&c, 0), "vocab");
    c = small_s2s(), c.label_smoothing = 1.5f;
    CG_ASSERT_FAILS(cg_seq2seq_new(&c, 0), "label_smoothing must be in [0, 1] (got 1.5)");
    c = small_s2s(), c.label_smoothing = NAN;
    CG_ASSERT_FAILS(cg_seq2seq_new(&c, 0), "label_smoothing");
    c = small_s2s(), c.norm = (cg_norm_kind)7;
    CG_ASSERT_FAILS(cg_seq2seq_new(&c, 0), "norm");
}
END_TEST

START_TEST(test_config_json)
{
    cg_charlm_config c = small_lm(), back;
    c.norm = CG_NORM_RMSNORM, c.act = CG_ACT_RELU, c.norm_first = false, c.dropout = 0.25f;
    char *js = cg_charlm_config_to_json(&c);
    ck_assert_ptr_nonnull(js);
    ck_assert(cg_charlm_config_from_json(js, &back));
    free(js);
    ck_assert(c.vocab == back.vocab && c.d == back.d && c.H == back.H && c.layers == back.layers &&
              c.d_ff == back.d_ff && c.max_len == back.max_len && c.norm == back.norm &&
              c.act == back.act && c.norm_first == back.norm_first && c.dropout == back.dropout);
    /* missing fields keep the models.py defaults; extra keys are ignored */
    ck_assert(cg_charlm_config_from_json("{\"d\": 64, \"seed\": 3, \"init\": {}}", &back));
    ck_assert_int_eq(back.d, 64);
    ck_assert_int_eq(back.vocab, 65);
    ck_assert(back.norm_first && back.act == CG_ACT_GELU);
    ck_assert(!cg_charlm_config_from_json("{\"d\": \"x\"}", &back));
    ck_assert(strstr(cg_last_error(), "\"d\""));
    ck_assert(!cg_charlm_config_from_json("{\"norm\": \"batchnorm\"}", &back));
    ck_assert(strstr(cg_last_error(), "batchnorm"));
    ck_assert(!cg_charlm_config_from_json("{\"d\": 30, \"H\": 4}", &back));
    ck_assert(!cg_charlm_config_from_json("[1, 2", &back));

    cg_seq2seq_config s = small_s2s(), sback;
    s.label_smoothing = 0.2f, s.norm_first = true;
    js = cg_seq2seq_config_to_json(&s);
    ck_assert(cg_seq2seq_config_from_json(js, &sback));
    free(js);
    ck_assert(s.vocab == sback.vocab && s.d == sback.d && s.H == sback.H &&
              s.enc_layers == sback.enc_layers && s.dec_layers == sback.dec_layers &&
              s.d_ff == sback.d_ff && s.max_len == sback.max_len && s.norm == sback.norm &&
              s.act == sback.act && s.norm_first == sback.norm_first &&
              s.dropout == sback.dropout && s.label_smoothing == sback.label_smoothing);
    ck_assert(cg_seq2seq_config_from_json("{\"norm_first\": 1, \"act\": \"gelu\"}", &sback));
    ck_assert(sback.norm_first && sback.act == CG_ACT_GELU && sback.label_smoothing == 0.1f);
    ck_assert(!cg_seq2seq_config_from_json("{\"vocab\": 2.5}", &sback));
}
END_TEST

/* Issue 33: every architectural fact is in the config, so a checkpoint can
 * be rebuilt without guessing (docs/architectures.md). */
static void assert_key(const cJSON *o, const char *key, const char *json)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cJSON *want = cJSON_Parse(json);
    char *got = v ? cJSON_PrintUnformatted(v) : NULL;
    ck_assert_msg(v && want && cJSON_Compare(v, want, true), "\"%s\" is %s, expected %s", key,
                  got ? got : "absent", json);
    free(got);
    cJSON_Delete(want);
}

/* The facts of both models (post-norm: no final norm). */
static void assert_facts(const cJSON *o)
{
    const char *facts[][2] = {{"emb_scale", "\"sqrt_d\""}, {"pos_enc", "\"sinusoidal\""},
                              {"tied_head", "true"},       {"bias", "true"},
                              {"norm_eps", "1e-05"},       {"gelu_approximate", "\"tanh\""},
                              {"final_norm", "false"}};
    for (size_t i = 0; i < sizeof facts / sizeof facts[0]; i++)
        assert_key(o, facts[i][0], facts[i][1]);
}

START_TEST(test_config_arch_facts)
{
    cg_charlm_config c = small_lm(), back;
    c.norm_first = false;
    char *js = cg_charlm_config_to_json(&c);
    cJSON *o = cJSON_Parse(js);
    ck_assert_ptr_nonnull(o);
    assert_facts(o);
    assert_key(o, "norm_first", "false");
    assert_key(o, "vocab", "20");
    assert_key(o, "layers", "2");
    cJSON_Delete(o);
    ck_assert(cg_charlm_config_from_json(js, &back));
    free(js);
    ck_assert(back.d == c.d && back.norm_first == c.norm_first && back.vocab == c.vocab);
    c.norm_first = true; /* pre-norm has the final norm ln_f */
    js = cg_charlm_config_to_json(&c);
    o = cJSON_Parse(js);
    assert_key(o, "final_norm", "true");
    cJSON_Delete(o);
    free(js);
    /* a checkpoint written before these keys (388f5e0's writer) loads with
     * today's meaning */
    ck_assert(cg_charlm_config_from_json(
        "{\"model\": \"charlm\", \"vocab\": 20, \"d\": 16, \"H\": 2, \"layers\": 2, \"d_ff\": "
        "32, \"max_len\": 16, \"norm\": \"layernorm\", \"act\": \"gelu\", \"norm_first\": "
        "true, \"dropout\": 0}",
        &back));
    ck_assert(back.d == 16 && back.norm_first && back.act == CG_ACT_GELU && back.layers == 2);
    ck_assert(back.bias);                 /* written before "bias" was a key: biases */
    ck_assert(back.attn_dropout == 0.0f); /* before "attn_dropout": none */
    /* attn_dropout is a field, written and read back; a recipe (a float),
     * not the architecture */
    c.attn_dropout = 0.25f;
    js = cg_charlm_config_to_json(&c);
    o = cJSON_Parse(js);
    assert_key(o, "attn_dropout", "0.25");
    cJSON_Delete(o);
    ck_assert(cg_charlm_config_from_json(js, &back) && back.attn_dropout == 0.25f);
    char *js0 = (c.attn_dropout = 0.0f, cg_charlm_config_to_json(&c));
    ck_assert(cg_charlm_config_same_arch(js, js0));
    free(js0);
    free(js);
    ck_assert(back.pos_enc == CG_POS_SINUSOIDAL && back.rope_theta == 10000);
    /* positions: "pos_enc" names them, "rope_theta" is rope's base; both
     * the architecture's */
    c.pos_enc = CG_POS_ROPE;
    c.rope_theta = 500000;
    js = cg_charlm_config_to_json(&c);
    o = cJSON_Parse(js);
    assert_key(o, "pos_enc", "\"rope\"");
    assert_key(o, "rope_theta", "500000");
    cJSON_Delete(o);
    ck_assert(cg_charlm_config_from_json(js, &back) && back.pos_enc == CG_POS_ROPE &&
              back.rope_theta == 500000);
    js0 = (c.pos_enc = CG_POS_SINUSOIDAL, cg_charlm_config_to_json(&c));
    ck_assert(!cg_charlm_config_same_arch(js, js0));
    ck_assert_msg(strstr(cg_last_error(), "pos_enc is rope in one and sinusoidal in the other"),
                  "%s", cg_last_error());
    free(js0);
    free(js);
    ck_assert(cg_charlm_config_from_json("{\"pos_enc\": \"learned\"}", &back) &&
              back.pos_enc == CG_POS_LEARNED); /* charlm's: nanoGPT's wpe */
    ck_assert(cg_charlm_config_from_json("{\"emb_scale\": \"none\"}", &back) &&
              back.emb_scale == CG_EMB_SCALE_NONE);
    ck_assert(cg_charlm_config_from_json("{}", &back) && back.emb_scale == CG_EMB_SCALE_SQRT_D);
    cg_seq2seq_config s2;
    ck_assert(cg_seq2seq_config_from_json("{\"pos_enc\": \"learned\"}", &s2) &&
              s2.pos_enc == CG_POS_LEARNED); /* a table a side, fairseq's */
    ck_assert(!cg_seq2seq_config_from_json("{\"pos_enc\": \"alibi\"}", &s2));
    ck_assert_msg(strstr(cg_last_error(), "have sinusoidal|rope|learned"), "%s", cg_last_error());
    back = c;
    ck_assert(back.kv_heads == 0); /* written before "kv_heads": H's */
    c.kv_heads = 1;                /* multi-query: architecture */
    js = cg_charlm_config_to_json(&c);
    o = cJSON_Parse(js);
    assert_key(o, "kv_heads", "1");
    cJSON_Delete(o);
    js0 = (c.kv_heads = 0, cg_charlm_config_to_json(&c));
    ck_assert(!cg_charlm_config_same_arch(js, js0));
    free(js0);
    free(js);
    ck_assert(!cg_charlm_config_from_json("{\"H\": 4, \"d\": 16, \"kv_heads\": 3}", &back));
    ck_assert_msg(strstr(cg_last_error(), "H=4 is not divisible by kv_heads=3"), "%s",
                  cg_last_error());
    ck_assert(!cg_charlm_config_from_json("{\"attn_dropout\": 1.5}", &back));
    ck_assert_msg(strstr(cg_last_error(), "attn_dropout"), "%s", cg_last_error());
    /* "bias" is a field (--bias false), not a fact */
    ck_assert(cg_charlm_config_from_json("{\"bias\": false}", &back) && !back.bias);
    ck_assert(cg_charlm_config_from_json("{\"bias\": true}", &back) && back.bias);
    /* a config that says the model is another one is refused, naming the key */
    const char *bad[] = {"{\"pos_enc\": \"alibi\"}",
                         "{\"emb_scale\": 1}",
                         "{\"tied_head\": false}",
                         "{\"norm_eps\": 1e-6}",
                         "{\"gelu_approximate\": \"none\"}",
                         "{\"bias\": \"no\"}",
                         "{\"norm_first\": true, \"final_norm\": false}"};
    const char *key[] = {"pos_enc",          "emb_scale", "tied_head", "norm_eps",
                         "gelu_approximate", "bias",      "final_norm"};
    for (int i = 0; i < 7; i++) {
        ck_assert_msg(!cg_charlm_config_from_json(bad[i], &back), "%s was accepted", bad[i]);
        ck_assert_msg(strstr(cg_last_error(), key[i]), "%s: %s", bad[i], cg_last_error());
    }

    cg_seq2seq_config s = small_s2s(), sback;
    js = cg_seq2seq_config_to_json(&s);
    o = cJSON_Parse(js);
    assert_facts(o);
    assert_key(o, "shared_emb", "true");
    assert_key(o, "pad_id", "0");
    assert_key(o, "bos_id", "1");
    assert_key(o, "eos_id", "2");
    cJSON_Delete(o);
    ck_assert(cg_seq2seq_config_from_json(js, &sback));
    free(js);
    ck_assert(cg_seq2seq_config_from_json(
        "{\"model\": \"seq2seq\", \"vocab\": 20, \"d\": 16, \"H\": 2, \"enc_layers\": 1, "
        "\"dec_layers\": 2, \"d_ff\": 32, \"max_len\": 16, \"norm\": \"layernorm\", \"act\": "
        "\"relu\", \"norm_first\": false, \"dropout\": 0, \"label_smoothing\": 0.1}",
        &sback));
    ck_assert(sback.dec_layers == 2 && !sback.norm_first && sback.act == CG_ACT_RELU);
    ck_assert(!cg_seq2seq_config_from_json("{\"eos_id\": 3}", &sback));
    ck_assert(strstr(cg_last_error(), "eos_id"));
    ck_assert(!cg_seq2seq_config_from_json("{\"shared_emb\": false}", &sback));
    ck_assert(strstr(cg_last_error(), "shared_emb"));
}
END_TEST

/* Issue 35: every activation of nn's table builds both models; the config
 * records it with PyTorch's GELU form (gelu_erf: "none"), and a form that
 * disagrees with act is refused. Configs of relu and gelu models are
 * written as before (gelu_approximate "tanh"). */
START_TEST(test_config_every_act)
{
    int64_t ids[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    cg_tensor *logits[CG_N_ACTS];
    for (int i = 0; i < CG_N_ACTS; i++) {
        cg_charlm_config c = small_lm(), back;
        c.act = (cg_act)i;
        char *js = cg_charlm_config_to_json(&c);
        cJSON *o = cJSON_Parse(js);
        char quoted[32];
        snprintf(quoted, sizeof quoted, "\"%s\"", cg_act_name((cg_act)i));
        assert_key(o, "act", quoted);
        /* every form but the exact GELU's is written "tanh", as before */
        assert_key(o, "gelu_approximate", i == CG_ACT_GELU_ERF ? "\"none\"" : "\"tanh\"");
        cJSON_Delete(o);
        ck_assert(cg_charlm_config_from_json(js, &back) && back.act == c.act);
        free(js);
        cg_charlm *m = cg_charlm_new(&c, 7);
        ck_assert_msg(m, "%s", cg_last_error());
        logits[i] = cg_charlm_forward(m, ids, 1, 8);
        cg_charlm_free(m);
        cg_seq2seq_config s = small_s2s(), sback;
        s.act = (cg_act)i;
        js = cg_seq2seq_config_to_json(&s);
        ck_assert(cg_seq2seq_config_from_json(js, &sback) && sback.act == s.act);
        free(js);
        cg_seq2seq *sm = cg_seq2seq_new(&s, 7);
        ck_assert_msg(sm, "%s", cg_last_error());
        cg_seq2seq_free(sm);
    }
    /* the same weights (one seed), another function: other logits */
    ck_assert(memcmp(cg_data(logits[CG_ACT_GELU]), cg_data(logits[CG_ACT_GELU_ERF]),
                     sizeof(float) * 8 * 20) != 0);
    for (int i = 0; i < CG_N_ACTS; i++)
        cg_release(logits[i]);
    cg_charlm_config back;
    ck_assert(
        cg_charlm_config_from_json("{\"act\": \"relu\", \"gelu_approximate\": \"tanh\"}", &back));
    ck_assert(!cg_charlm_config_from_json("{\"act\": \"gelu_erf\", \"gelu_approximate\": \"tanh\"}",
                                          &back));
    ck_assert_msg(strstr(cg_last_error(), "gelu_approximate") &&
                      strstr(cg_last_error(), "gelu_erf"),
                  "%s", cg_last_error());
    cg_seq2seq_config sback;
    ck_assert(!cg_seq2seq_config_from_json("{\"act\": \"gelu\", \"gelu_approximate\": \"none\"}",
                                           &sback));
    ck_assert(strstr(cg_last_error(), "gelu_approximate"));
    ck_assert(!cg_seq2seq_config_from_json("{\"act\": \"swish\"}", &sback));
    ck_assert_msg(strstr(cg_last_error(),
                         "(choices: relu, gelu, gelu_erf, silu, swiglu, geglu, tanh, "
                         "sigmoid, mish, hardswish, hardsigmoid, relu6, selu, "
                         "softsign, logsigmoid, tanhshrink)"),
                  "%s", cg_last_error());
    cg_charlm_config bad = small_lm();
    bad.act = CG_N_ACTS;
    CG_ASSERT_FAILS(cg_charlm_new(&bad, 0), "charlm config: unknown activation 16");
}
END_TEST

/* ---------------------------------------------------------- CharLM */
static const char *const lm_names[] = {"tok_emb.weight",
                                       "blocks.0.ln1.weight",
                                       "blocks.0.ln1.bias",
                                       "blocks.0.attn.q_proj.weight",
                                       "blocks.0.attn.q_proj.bias",
                                       "blocks.0.attn.k_proj.weight",
                                       "blocks.0.attn.k_proj.bias",
                                       "blocks.0.attn.v_proj.weight",
                                       "blocks.0.attn.v_proj.bias",
                                       "blocks.0.attn.o_proj.weight",
                                       "blocks.0.attn.o_proj.bias",
                                       "blocks.0.ln2.weight",
                                       "blocks.0.ln2.bias",
                                       "blocks.0.ff.fc1.weight",
                                       "blocks.0.ff.fc1.bias",
                                       "blocks.0.ff.fc2.weight",
                                       "blocks.0.ff.fc2.bias",
                                       "blocks.1.ln1.weight",
                                       "blocks.1.ln1.bias",
                                       "blocks.1.attn.q_proj.weight",
                                       "blocks.1.attn.q_proj.bias",
                                       "blocks.1.attn.k_proj.weight",
                                       "blocks.1.attn.k_proj.bias",
                                       "blocks.1.attn.v_proj.weight",
                                       "blocks.1.attn.v_proj.bias",
                                       "blocks.1.attn.o_proj.weight",
                                       "blocks.1.attn.o_proj.bias",
                                       "blocks.1.ln2.weight",
                                       "blocks.1.ln2.bias",
                                       "blocks.1.ff.fc1.weight",
                                       "blocks.1.ff.fc1.bias",
                                       "blocks.1.ff.fc2.weight",
                                       "blocks.1.ff.fc2.bias",
                                       "ln_f.weight",
                                       "ln_f.bias"};

START_TEST(test_charlm_params)
{
    /* counts from models.py named_parameters() for the same configs */
    cg_charlm_config c = small_lm();
    cg_charlm *m = cg_charlm_new(&c, 1);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    assert_names(CG_MODULE(m), lm_names, 35);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), 4800);
    cg_charlm_free(m);

    c.norm = CG_NORM_RMSNORM, c.act = CG_ACT_RELU, c.norm_first = false;
    m = cg_charlm_new(&c, 1);
    ck_assert_int_eq(cg_module_num_param_tensors(CG_MODULE(m)), 29);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), 4704);
    ck_assert_ptr_null(m->ln_f);
    cg_charlm_free(m);

    cg_charlm_config d = cg_charlm_config_default();
    m = cg_charlm_new(&d, 1);
    ck_assert_int_eq(cg_module_num_param_tensors(CG_MODULE(m)), 67);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), 801664);
    cg_charlm_free(m);
}
END_TEST

START_TEST(test_charlm_init)
{
    cg_charlm_config c = small_lm();
    cg_charlm *m = cg_charlm_new(&c, 7), *m2 = cg_charlm_new(&c, 7), *m3 = cg_charlm_new(&c, 8);
    cg_param_list l = {0}, l2 = {0}, l3 = {0};
    ck_assert(cg_module_params(CG_MODULE(m), &l) && cg_module_params(CG_MODULE(m2), &l2) &&
              cg_module_params(CG_MODULE(m3), &l3));
    for (int i = 0; i < l.n; i++) {
        const char *n = l.items[i].name;
        float *v = cg_test_values(l.items[i].tensor);
        int64_t k = cg_numel(l.items[i].tensor);
        ck_assert(tensors_equal(l.items[i].tensor, l2.items[i].tensor)); /* same seed */
        if (strstr(n, "ln") && strstr(n, ".weight")) {
            for (int64_t j = 0; j < k; j++)
                ck_assert_float_eq(v[j], 1.0f);
        } else if (strstr(n, ".bias")) {
            for (int64_t j = 0; j < k; j++)
                ck_assert_float_eq(v[j], 0.0f);
        } else {
            double s = 0, s2 = 0;
            for (int64_t j = 0; j < k; j++)
                s += v[j], s2 += (double)v[j] * v[j];
            double sd = sqrt(s2 / k - (s / k) * (s / k));
            ck_assert_msg(sd > 0.015 && sd < 0.025 && fabs(s / k) < 0.006,
                          "%s: mean %g std %g, expected N(0, 0.02)", n, s / k, sd);
            ck_assert(!tensors_equal(l.items[i].tensor, l3.items[i].tensor)); /* other seed */
        }
        free(v);
    }
    cg_param_list_free(&l);
    cg_param_list_free(&l2);
    cg_param_list_free(&l3);
    cg_charlm_free(m);
    cg_charlm_free(m2);
    cg_charlm_free(m3);
}
END_TEST

/* The skip_init constructors: the same parameters as the initialised
 * models, their Linear and Embedding weights zero (norm weights 1, biases
 * 0), and the model otherwise the same (its dropout generator). */
static void assert_skipped(cg_module *a, cg_module *b, const char *what)
{
    cg_param_list l = {0}, l2 = {0};
    ck_assert(cg_module_params(a, &l) && cg_module_params(b, &l2));
    ck_assert_int_eq(l.n, l2.n);
    int zeroed = 0;
    for (int i = 0; i < l.n; i++) {
        const char *n = l.items[i].name;
        ck_assert_str_eq(n, l2.items[i].name);
        ck_assert(cg_same_shape(l.items[i].tensor, l2.items[i].tensor));
        const bool drawn = !strstr(n, ".bias") && !(strstr(n, "ln") && strstr(n, ".weight"));
        float *v = cg_test_values(l2.items[i].tensor);
        for (int64_t j = 0; drawn && j < cg_numel(l2.items[i].tensor); j++)
            ck_assert_msg(v[j] == 0.0f, "%s: %s[%lld] = %g", what, n, (long long)j, (double)v[j]);
        zeroed += drawn;
        if (!drawn)
            ck_assert(tensors_equal(l.items[i].tensor, l2.items[i].tensor));
        free(v);
    }
    ck_assert_int_gt(zeroed, 4);
    cg_param_list_free(&l);
    cg_param_list_free(&l2);
}

START_TEST(test_skip_init)
{
    cg_charlm_config c = small_lm();
    cg_charlm *m = cg_charlm_new(&c, 7), *s = cg_charlm_new_skip_init(&c, 7);
    ck_assert_msg(m && s, "%s", cg_last_error());
    assert_skipped(CG_MODULE(m), CG_MODULE(s), "charlm");
    ck_assert(m->dropout_rng.seed == s->dropout_rng.seed);
    cg_seq2seq_config sc = small_s2s();
    cg_seq2seq *q = cg_seq2seq_new(&sc, 7), *r = cg_seq2seq_new_skip_init(&sc, 7);
    ck_assert_msg(q && r, "%s", cg_last_error());
    assert_skipped(CG_MODULE(q), CG_MODULE(r), "seq2seq");
    ck_assert(q->dropout_rng.seed == r->dropout_rng.seed);
    c.d = 30, c.H = 4; /* the config is checked the same */
    CG_ASSERT_FAILS(cg_charlm_new_skip_init(&c, 0), "d=30 is not divisible by H=4");
    cg_charlm_free(m);
    cg_charlm_free(s);
    cg_seq2seq_free(q);
    cg_seq2seq_free(r);
}
END_TEST

START_TEST(test_charlm_forward)
{
    cg_charlm_config c = small_lm();
    cg_charlm *m = cg_charlm_new(&c, 3);
    int64_t ids[2 * 5], tg[2 * 5];
    for (int i = 0; i < 10; i++)
        ids[i] = (i * 7) % 20, tg[i] = (i * 3 + 1) % 20;
    cg_tensor *logits = cg_charlm_forward(m, ids, 2, 5);
    ck_assert_msg(logits != NULL, "%s", cg_last_error());
    ck_assert_int_eq(logits->ndim, 3);
    ck_assert_int_eq(logits->shape[0], 2);
    ck_assert_int_eq(logits->shape[1], 5);
    ck_assert_int_eq(logits->shape[2], 20);
    cg_tensor *loss = cg_charlm_loss(m, logits, tg);
    ck_assert_ptr_nonnull(loss);
    ck_assert_int_eq(cg_numel(loss), 1);
    /* small init: nearly uniform predictions */
    ck_assert_float_eq_tol(cg_item(loss), logf(20.0f), 0.2f);
    ck_assert(cg_backward(loss, NULL, false));
    ck_assert_ptr_nonnull(cg_grad(m->tok_emb->weight));
    ck_assert_ptr_nonnull(cg_grad(m->block[1]->ff->fc2->bias));
    cg_release_all(2, logits, loss);

    /* T = max_len works, T = 1 works */
    int64_t longer[16] = {0};
    logits = cg_charlm_forward(m, longer, 1, 16);
    ck_assert_ptr_nonnull(logits);
    cg_release(logits);
    logits = cg_charlm_forward(m, ids, 10, 1);
    ck_assert_ptr_nonnull(logits);
    ck_assert_int_eq(logits->shape[0], 10);
    cg_release(logits);
    cg_charlm_free(m);
}
END_TEST

/* The embedding's forms, through a model of no layers and no final norm
 * (logits = h0 E^T): h0 = E[x] sqrt(d) + PE[t] (sinusoidal, models.py's),
 * E[x] + P[t] (learned positions, no scale: GPT-2's and nanoGPT's), and
 * E[x] sqrt(d) alone (rope: the positions act in the attention), each
 * against float64 values computed here from the checkpointed tables. */
START_TEST(test_charlm_embedding_forms)
{
    enum { V = 20, D = 16, T = 5 };
    const int64_t ids[T] = {3, 0, 19, 7, 7};
    const cg_pos_kind pos[3] = {CG_POS_SINUSOIDAL, CG_POS_LEARNED, CG_POS_ROPE};
    const cg_emb_scale sc[3] = {CG_EMB_SCALE_SQRT_D, CG_EMB_SCALE_NONE, CG_EMB_SCALE_SQRT_D};
    for (int f = 0; f < 3; f++) {
        cg_charlm_config c = small_lm();
        c.layers = 0, c.norm_first = false, c.pos_enc = pos[f], c.emb_scale = sc[f];
        cg_charlm *m = cg_charlm_new(&c, 5);
        ck_assert_msg(m, "%s", cg_last_error());
        cg_tensor *table = cg_charlm_positions(m);
        ck_assert(f == 2 ? table == NULL : table != NULL);
        ck_assert(f == 1 ? m->pos_emb && table == m->pos_emb->weight : !m->pos_emb);
        float *E = cg_test_values(m->tok_emb->weight), *P = table ? cg_test_values(table) : NULL;
        const double s = sc[f] == CG_EMB_SCALE_NONE ? 1.0 : (float)sqrt((double)D);
        float want[T * V];
        for (int t = 0; t < T; t++) {
            double h[D];
            for (int k = 0; k < D; k++)
                h[k] = (double)(float)(E[ids[t] * D + k] * (float)s) + (P ? P[t * D + k] : 0.0);
            for (int v = 0; v < V; v++) {
                double acc = 0;
                for (int k = 0; k < D; k++)
                    acc += h[k] * E[v * D + k];
                want[t * V + v] = (float)acc;
            }
        }
        cg_tensor *logits = cg_charlm_forward(m, ids, 1, T);
        CG_ASSERT_TENSOR(logits, want, 1e-5, 1e-4);
        free(E);
        free(P);
        cg_release(logits);
        cg_charlm_free(m);
    }
}
END_TEST

START_TEST(test_charlm_errors)
{
    cg_charlm_config c = small_lm();
    cg_charlm *m = cg_charlm_new(&c, 3);
    int64_t ids[17] = {0};
    ids[3] = 20;
    CG_ASSERT_FAILS(cg_charlm_forward(m, ids, 1, 4), "token id 20 at [0, 3]");
    ids[3] = -1;
    CG_ASSERT_FAILS(cg_charlm_forward(m, ids, 2, 2), "token id -1 at [1, 1]");
    ids[3] = 0;
    CG_ASSERT_FAILS(cg_charlm_forward(m, ids, 1, 17), "sequence length 17 exceeds max_len 16");
    CG_ASSERT_FAILS(cg_charlm_forward(m, ids, 0, 4), "at least");
    CG_ASSERT_FAILS(cg_charlm_forward(m, ids, 1, 0), "batch 1 x 0 must be at least 1 x 1");
    CG_ASSERT_FAILS(cg_charlm_forward(m, NULL, 1, 4), "NULL");
    CG_ASSERT_FAILS(cg_charlm_forward(NULL, ids, 1, 4), "NULL");
    cg_tensor *logits = cg_charlm_forward(m, ids, 1, 4);
    int64_t tg[4] = {1, 2, 3, 99};
    CG_ASSERT_FAILS(cg_charlm_loss(m, logits, tg), "");
    cg_tensor *wrong = cg_zeros(CG_SHAPE(4, 7));
    CG_ASSERT_FAILS(cg_charlm_loss(m, wrong, tg), "vocabulary size 20");
    CG_ASSERT_FAILS(cg_charlm_loss(NULL, wrong, tg), "charlm loss: NULL model");
    CG_ASSERT_FAILS(cg_charlm_loss(m, wrong, NULL), "charlm loss: NULL targets");
    cg_release_all(2, logits, wrong);
    cg_charlm_free(m);
}
END_TEST

/* Changing a token never changes the logits of earlier positions. */
START_TEST(test_charlm_causal)
{
    cg_charlm_config c = small_lm();
    c.norm_first = false;
    cg_charlm *m = cg_charlm_new(&c, 5);
    int64_t a[6] = {1, 5, 9, 2, 7, 3}, b[6] = {1, 5, 9, 11, 0, 19};
    cg_tensor *la = cg_charlm_forward(m, a, 1, 6), *lb = cg_charlm_forward(m, b, 1, 6);
    float *x = cg_test_values(la), *y = cg_test_values(lb);
    CG_ASSERT_CLOSE(x, y, 3 * 20, 1e-6, 1e-5); /* positions 0..2 */
    double diff = 0;
    for (int i = 3 * 20; i < 6 * 20; i++)
        diff = fmax(diff, fabs(x[i] - y[i]));
    ck_assert(diff > 1e-4);
    free(x);
    free(y);
    cg_release_all(2, la, lb);
    cg_charlm_free(m);
}
END_TEST

/* The full validation loss forwards at most 4096 tokens at a time (issue
 * 35: one pass over 64 windows of 1024 set the program's peak memory), and
 * gives the same bits as the reference's one pass per chunk of 64 windows:
 * at T 128 a chunk takes two passes of 32 windows. */
START_TEST(test_charlm_full_loss_passes)
{
    cg_charlm_config c = small_lm();
    c.max_len = 128;
    cg_charlm *m = cg_charlm_new(&c, 7);
    enum { T = 128, NWIN = 70 };
    int32_t *ids = malloc(sizeof *ids * (NWIN * T + 1));
    for (int i = 0; i < NWIN * T + 1; i++)
        ids[i] = (int32_t)((i * 7 + i / 13) % 20);
    cg_split_view s = {ids, NWIN * T + 1};
    double got;
    int64_t nwin;
    ck_assert_msg(cg_charlm_full_loss(m, s, T, &got, &nwin), "%s", cg_last_error());
    ck_assert_int_eq(nwin, NWIN);
    /* the reference's full_split_loss: one forward per chunk of 64 windows */
    int64_t *x = malloc(sizeof *x * 64 * T), *y = malloc(sizeof *y * 64 * T);
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    double total = 0;
    for (int64_t st = 0; st < NWIN; st += 64) {
        int64_t b = NWIN - st < 64 ? NWIN - st : 64;
        for (int64_t i = 0; i < b; i++)
            cg_split_window(s, (st + i) * T, T, x + i * T, y + i * T);
        cg_tensor *logits = cg_charlm_forward(m, x, b, T);
        cg_tensor *loss = cg_charlm_loss(m, logits, y);
        ck_assert_ptr_nonnull(loss);
        total += (double)cg_item(loss) * (double)b;
        cg_release_all(2, logits, loss);
    }
    cg_no_grad_end();
    double want = total / NWIN;
    ck_assert_msg(got == want, "full loss %.17g, one pass per chunk %.17g", got, want);
    free(x);
    free(y);
    free(ids);
    cg_charlm_free(m);
}
END_TEST

/* The strided (sliding-window) loss against one token at a time: each
 * target i + 1 of the split is scored by the window that first holds it,
 * with that window's context; here recomputed from that window's logits,
 * the softmax in double. stride == T is the full loss, bit for bit. */
static double token_nll(cg_charlm *m, const int32_t *ids, int64_t w0, int64_t T, int64_t t)
{
    int64_t x[16];
    for (int64_t k = 0; k < T; k++)
        x[k] = ids[w0 + k];
    cg_tensor *logits = cg_charlm_forward(m, x, 1, T);
    ck_assert_ptr_nonnull(logits);
    const float *l = cg_data(logits) + t * 20;
    double mx = l[0], z = 0;
    for (int v = 1; v < 20; v++)
        mx = l[v] > mx ? l[v] : mx;
    for (int v = 0; v < 20; v++)
        z += exp((double)l[v] - mx);
    double nll = log(z) + mx - (double)l[ids[w0 + t + 1]];
    cg_release(logits);
    return nll;
}

START_TEST(test_charlm_strided_loss)
{
    cg_charlm_config c = small_lm();
    c.layers = 1;
    cg_charlm *m = cg_charlm_new(&c, 5);
    enum { T = 16, N = 61 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 7 + i / 5) % 20);
    cg_split_view s = {ids, N};
    cg_module_train(CG_MODULE(m), false);
    const int64_t strides[] = {1, 3, 7, 15};
    for (int k = 0; k < 4; k++) {
        int64_t S = strides[k], nwin, scored;
        double got;
        ck_assert_msg(cg_charlm_strided_loss(m, s, T, S, &got, &nwin, &scored), "%s",
                      cg_last_error());
        ck_assert_int_eq(nwin, (N - 1 - T) / S + 1);
        cg_no_grad_begin();
        double want = 0;
        int64_t n = 0;
        for (int64_t w = 0; w < nwin; w++)
            for (int64_t t = w == 0 ? 0 : T - S; t < T; t++, n++)
                want += token_nll(m, ids, w * S, T, t);
        cg_no_grad_end();
        ck_assert_int_eq(scored, n);
        ck_assert_int_eq(n, T + (nwin - 1) * S); /* each target once */
        want /= (double)n;
        ck_assert_msg(fabs(got - want) < 1e-5, "stride %lld: %.9g, token by token %.9g",
                      (long long)S, got, want);
    }
    double full, strided;
    int64_t nwin, nfull, scored;
    ck_assert(cg_charlm_full_loss(m, s, T, &full, &nfull));
    ck_assert(cg_charlm_strided_loss(m, s, T, T, &strided, &nwin, &scored));
    ck_assert(full == strided && nwin == nfull && scored == nfull * T);
    CG_ASSERT_FAILS(cg_charlm_strided_loss(m, s, T, 0, &strided, &nwin, &scored),
                    "stride 0 is out of range [1, 16]");
    CG_ASSERT_FAILS(cg_charlm_strided_loss(m, s, T, T + 1, &strided, &nwin, &scored),
                    "stride 17 is out of range [1, 16]");
    CG_ASSERT_FAILS(
        cg_charlm_strided_loss(m, (cg_split_view){ids, T}, T, 4, &strided, &nwin, &scored),
        "shorter than one window of 16+1");
    /* the default stride (T) on a text as short: the same words (it said
     * "the validation split (16 characters)" of --split all's whole text,
     * and of a BPE model's tokens) */
    CG_ASSERT_FAILS(
        cg_charlm_strided_loss(m, (cg_split_view){ids, T}, T, T, &strided, &nwin, &scored),
        "the split (16 tokens) is shorter than one window of 16+1");
    cg_charlm_free(m);
}
END_TEST

/* The full validation loss keeps one pass's logits at a time ([4096, V]),
 * not its chunk's ([64 T, V], copied together: 13 GB at GPT-2's 50,257
 * ids and T 1,024, where training's fused head keeps 256 rows of them).
 * Here V 2,048 and T 512: the chunk's logits were 256 MiB, a pass's 32
 * MiB. The bound is on the allocator's peak of live bytes, which only
 * rises: if an earlier test's peak was higher, it holds trivially. */
START_TEST(test_charlm_full_loss_logits_bounded)
{
    cg_charlm_config c = small_lm();
    c.vocab = 2048, c.d = 8, c.H = 1, c.layers = 1, c.d_ff = 8, c.max_len = 512;
    cg_charlm *m = cg_charlm_new(&c, 3);
    ck_assert_msg(m, "%s", cg_last_error());
    enum { T = 512, NWIN = 64 };
    int32_t *ids = malloc(sizeof *ids * (NWIN * T + 1));
    for (int i = 0; i < NWIN * T + 1; i++)
        ids[i] = (int32_t)((i * 7 + i / 13) % 2048);
    const cg_alloc_stats before = cg_alloc_get_stats();
    double got;
    int64_t nwin;
    ck_assert_msg(cg_charlm_full_loss(m, (cg_split_view){ids, NWIN * T + 1}, T, &got, &nwin), "%s",
                  cg_last_error());
    const cg_alloc_stats after = cg_alloc_get_stats();
    ck_assert_int_eq(nwin, NWIN);
    ck_assert_msg(fabs(got - log(2048.0)) < 0.5, "loss %g of an untrained model", got);
    const size_t bound = before.live_bytes + ((size_t)96 << 20);
    ck_assert_msg(after.peak_live_bytes <=
                      (before.peak_live_bytes > bound ? before.peak_live_bytes : bound),
                  "peak %zu MiB with %zu MiB live before", after.peak_live_bytes >> 20,
                  before.live_bytes >> 20);
    free(ids);
    cg_charlm_free(m);
}
END_TEST

/* Dropout acts in train mode only and is seeded. */
START_TEST(test_charlm_dropout)
{
    cg_charlm_config c = small_lm();
    c.dropout = 0.5f;
    cg_charlm *m = cg_charlm_new(&c, 5);
    int64_t ids[4] = {1, 2, 3, 4};
    cg_tensor *t1 = cg_charlm_forward(m, ids, 1, 4), *t2 = cg_charlm_forward(m, ids, 1, 4);
    ck_assert(!tensors_equal(t1, t2));
    cg_release_all(2, t1, t2);
    cg_module_train(CG_MODULE(m), false);
    t1 = cg_charlm_forward(m, ids, 1, 4), t2 = cg_charlm_forward(m, ids, 1, 4);
    ck_assert(tensors_equal(t1, t2));
    cg_release_all(2, t1, t2);
    cg_charlm_free(m);
    /* the dropout stream is not the initialisation's of the same seed (the
     * masks would follow the weights' draws) */
    cg_rng drop = cg_model_dropout_rng(5), init = cg_rng_new(5);
    ck_assert(cg_rng_uniform(&drop) != cg_rng_uniform(&init));
}
END_TEST

/* ---------------------------------------------------------- Seq2Seq */
static const char *const s2s_names_head[] = {"emb.weight",
                                             "encoder.layers.0.self_attn.q_proj.weight",
                                             "encoder.layers.0.self_attn.q_proj.bias",
                                             "encoder.layers.0.self_attn.k_proj.weight",
                                             "encoder.layers.0.self_attn.k_proj.bias",
                                             "encoder.layers.0.self_attn.v_proj.weight",
                                             "encoder.layers.0.self_attn.v_proj.bias",
                                             "encoder.layers.0.self_attn.o_proj.weight",
                                             "encoder.layers.0.self_attn.o_proj.bias",
                                             "encoder.layers.0.ln1.weight",
                                             "encoder.layers.0.ln1.bias",
                                             "encoder.layers.0.ff.fc1.weight",
                                             "encoder.layers.0.ff.fc1.bias",
                                             "encoder.layers.0.ff.fc2.weight",
                                             "encoder.layers.0.ff.fc2.bias",
                                             "encoder.layers.0.ln2.weight",
                                             "encoder.layers.0.ln2.bias"};
static const char *const s2s_dec_layer[] = {"self_attn.q_proj.weight",
                                            "self_attn.q_proj.bias",
                                            "self_attn.k_proj.weight",
                                            "self_attn.k_proj.bias",
                                            "self_attn.v_proj.weight",
                                            "self_attn.v_proj.bias",
                                            "self_attn.o_proj.weight",
                                            "self_attn.o_proj.bias",
                                            "ln1.weight",
                                            "ln1.bias",
                                            "cross_attn.q_proj.weight",
                                            "cross_attn.q_proj.bias",
                                            "cross_attn.k_proj.weight",
                                            "cross_attn.k_proj.bias",
                                            "cross_attn.v_proj.weight",
                                            "cross_attn.v_proj.bias",
                                            "cross_attn.o_proj.weight",
                                            "cross_attn.o_proj.bias",
                                            "ln2.weight",
                                            "ln2.bias",
                                            "ff.fc1.weight",
                                            "ff.fc1.bias",
                                            "ff.fc2.weight",
                                            "ff.fc2.bias",
                                            "ln3.weight",
                                            "ln3.bias"};

START_TEST(test_seq2seq_params)
{
    /* models.py: 69 tensors / 9232 floats (post, layernorm), 63 / 9136 (pre,
     * rmsnorm), defaults 85 / 937984 */
    char buf[69][64];
    const char *names[69];
    int n = 0;
    for (size_t i = 0; i < sizeof s2s_names_head / sizeof *s2s_names_head; i++)
        names[n++] = s2s_names_head[i];
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < 26; j++) {
            snprintf(buf[n], sizeof buf[n], "decoder.layers.%d.%s", l, s2s_dec_layer[j]);
            names[n] = buf[n];
            n++;
        }
    ck_assert_int_eq(n, 69);
    cg_seq2seq_config c = small_s2s();
    cg_seq2seq *m = cg_seq2seq_new(&c, 1);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    assert_names(CG_MODULE(m), names, 69);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), 9232);
    cg_seq2seq_free(m);

    c.norm = CG_NORM_RMSNORM, c.act = CG_ACT_GELU, c.norm_first = true;
    m = cg_seq2seq_new(&c, 1);
    ck_assert_int_eq(cg_module_num_param_tensors(CG_MODULE(m)), 63);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), 9136);
    ck_assert_ptr_nonnull(cg_module_get_param(CG_MODULE(m), "encoder.ln_f.weight"));
    ck_assert_ptr_nonnull(cg_module_get_param(CG_MODULE(m), "decoder.ln_f.weight"));
    cg_seq2seq_free(m);

    cg_seq2seq_config d = cg_seq2seq_config_default();
    m = cg_seq2seq_new(&d, 1);
    ck_assert_int_eq(cg_module_num_param_tensors(CG_MODULE(m)), 85);
    ck_assert_int_eq(cg_module_num_params(CG_MODULE(m)), 937984);
    cg_seq2seq_free(m);
}
END_TEST

/* label smoothing 1 (PyTorch's CrossEntropyLoss takes it): the target is
 * the uniform distribution, so the loss is the mean over the non-pad
 * positions of -mean_v log p_v, whatever the targets are */
START_TEST(test_seq2seq_label_smoothing_one)
{
    cg_seq2seq_config c = small_s2s();
    c.dropout = 0.0f, c.label_smoothing = 1.0f;
    cg_seq2seq *m = cg_seq2seq_new(&c, 3);
    ck_assert_msg(m != NULL, "%s", cg_last_error());
    int64_t src[2 * 4] = {5, 6, 7, 2, 8, 2, 0, 0};
    int64_t tin[2 * 3] = {1, 9, 10, 1, 11, 0}, tout[2 * 3] = {9, 10, 2, 11, 2, 0};
    cg_tensor *logits = cg_seq2seq_forward(m, src, 2, 4, tin, 3);
    ck_assert_msg(logits != NULL, "%s", cg_last_error());
    cg_tensor *lc = cg_k_contiguous(logits);
    const float *x = cg_data(lc);
    double want = 0;
    int kept = 0;
    for (int r = 0; r < 6; r++) {
        if (tout[r] == 0) /* PAD: not in the mean */
            continue;
        double mx = -INFINITY, se = 0, sum = 0;
        for (int v = 0; v < 20; v++)
            mx = fmax(mx, x[r * 20 + v]);
        for (int v = 0; v < 20; v++)
            se += exp(x[r * 20 + v] - mx), sum += x[r * 20 + v];
        want += mx + log(se) - sum / 20; /* -mean_v log p_v */
        kept++;
    }
    want /= kept;
    cg_tensor *loss = cg_seq2seq_loss(m, logits, tout);
    ck_assert_msg(loss != NULL, "%s", cg_last_error());
    ck_assert_msg(fabs(cg_item(loss) - want) < 1e-5 * fabs(want), "%.8g against %.8g",
                  (double)cg_item(loss), want);
    /* the fused head of training gives it too */
    cg_tensor *fused = cg_seq2seq_forward_loss(m, src, 2, 4, tin, 3, tout, 1.0f);
    ck_assert_msg(fused != NULL, "%s", cg_last_error());
    ck_assert_msg(fabs(cg_item(fused) - want) < 1e-5 * fabs(want), "%.8g against %.8g",
                  (double)cg_item(fused), want);
    cg_release_all(4, logits, lc, loss, fused);
    cg_seq2seq_free(m);
}
END_TEST

START_TEST(test_seq2seq_forward)
{
    cg_seq2seq_config c = small_s2s();
    cg_seq2seq *m = cg_seq2seq_new(&c, 2);
    int64_t src[2 * 4] = {5, 6, 7, 2, 8, 2, 0, 0};
    int64_t tin[2 * 3] = {1, 9, 10, 1, 11, 0}, tout[2 * 3] = {9, 10, 2, 11, 2, 0};
    cg_tensor *logits = cg_seq2seq_forward(m, src, 2, 4, tin, 3);
    ck_assert_msg(logits != NULL, "%s", cg_last_error());
    ck_assert_int_eq(logits->ndim, 3);
    ck_assert_int_eq(logits->shape[0], 2);
    ck_assert_int_eq(logits->shape[1], 3);
    ck_assert_int_eq(logits->shape[2], 20);
    cg_tensor *loss = cg_seq2seq_loss(m, logits, tout);
    ck_assert_ptr_nonnull(loss);
    ck_assert(isfinite(cg_item(loss)));
    ck_assert(cg_backward(loss, NULL, false));
    ck_assert_ptr_nonnull(cg_grad(m->emb->weight));

    /* encode + decode give the same logits; so does a selected memory */
    cg_seq2seq_memory mem, sel;
    ck_assert(cg_seq2seq_encode(m, src, 2, 4, &mem));
    ck_assert_int_eq(mem.memory->shape[0], 2);
    ck_assert_int_eq(mem.memory->shape[1], 4);
    ck_assert_int_eq(mem.memory->shape[2], 16);
    ck_assert_int_eq(mem.src_pad->dtype, CG_BOOL);
    ck_assert_int_eq(cg_get_i64(mem.src_pad, (int64_t[]){1, 2}), 1);
    ck_assert_int_eq(cg_get_i64(mem.src_pad, (int64_t[]){1, 1}), 0);
    cg_tensor *l2 = cg_seq2seq_decode(m, tin, 2, 3, &mem);
    ck_assert(tensors_equal(logits, l2));
    int64_t rows[3] = {1, 1, 0};
    ck_assert(cg_seq2seq_memory_select(&mem, rows, 3, &sel));
    int64_t tin3[3 * 3] = {1, 11, 0, 1, 11, 0, 1, 9, 10};
    cg_tensor *l3 = cg_seq2seq_decode(m, tin3, 3, 3, &sel);
    ck_assert_ptr_nonnull(l3);
    float *a = cg_test_values(l2), *b = cg_test_values(l3);
    CG_ASSERT_CLOSE(b, a + 60, 60, 1e-6, 1e-5); /* row 0 of l3 = row 1 of l2 */
    CG_ASSERT_CLOSE(b + 60, a + 60, 60, 1e-6, 1e-5);
    CG_ASSERT_CLOSE(b + 120, a, 60, 1e-6, 1e-5);
    free(a);
    free(b);
    cg_seq2seq_memory_free(&sel);
    cg_seq2seq_memory_free(&mem);
    cg_seq2seq_memory_free(&mem); /* zeroed: a second free is harmless */
    cg_release_all(4, logits, loss, l2, l3);
    cg_seq2seq_free(m);
}
END_TEST

/* The parameter of m named name (borrowed; fails the test when absent). */
static cg_tensor *param_named(cg_module *m, const char *name)
{
    cg_param_list l = {0};
    ck_assert(cg_module_params(m, &l));
    cg_tensor *t = NULL;
    for (int i = 0; i < l.n && !t; i++)
        if (!strcmp(l.items[i].name, name))
            t = l.items[i].tensor;
    cg_param_list_free(&l);
    ck_assert_msg(t, "no parameter '%s'", name);
    return t;
}

/* Rows [r0, r1) of a 2-D float32 parameter all zero? */
static bool rows_zero(const cg_tensor *t, int64_t r0, int64_t r1)
{
    const float *d = cg_data(t);
    for (int64_t i = r0 * t->shape[1]; i < r1 * t->shape[1]; i++)
        if (d[i] != 0.0f)
            return false;
    return true;
}

/* --pos-enc learned in the translator: a table a side (enc_pos_emb,
 * dec_pos_emb, fairseq's encoder and decoder embed_positions), drawn like
 * the other weights. Holding the sinusoidal table in both, the model gives
 * the sinusoidal model's bits; the source's table moves the memory and
 * the target's only the decoder; each table's gradient reaches the rows
 * of its side's positions only. */
START_TEST(test_seq2seq_learned_positions)
{
    cg_seq2seq_config c = small_s2s(), cs = small_s2s();
    c.pos_enc = CG_POS_LEARNED;
    cg_seq2seq *m = cg_seq2seq_new(&c, 2), *ms = cg_seq2seq_new(&cs, 2);
    ck_assert_msg(m && ms, "%s", cg_last_error());
    cg_tensor *pe = param_named(CG_MODULE(m), "enc_pos_emb.weight"),
              *pd = param_named(CG_MODULE(m), "dec_pos_emb.weight");
    ck_assert(!m->pe && pe == cg_seq2seq_positions(m, false) &&
              pd == cg_seq2seq_positions(m, true));
    ck_assert(cg_seq2seq_positions(ms, false) == ms->pe &&
              cg_seq2seq_positions(ms, true) == ms->pe);
    ck_assert(pe->shape[0] == 16 && pe->shape[1] == 16 && cg_same_shape(pe, pd));
    ck_assert(!rows_zero(pe, 0, 16) && !rows_zero(pd, 0, 16) && !tensors_equal(pe, pd));

    /* every other parameter and both tables set to the sinusoidal model's */
    cg_param_list ps = {0};
    ck_assert(cg_module_params(CG_MODULE(ms), &ps));
    for (int i = 0; i < ps.n; i++) {
        cg_tensor *t = param_named(CG_MODULE(m), ps.items[i].name);
        memcpy(cg_data(t), cg_data(ps.items[i].tensor), (size_t)cg_numel(t) * sizeof(float));
        cg_tensor_modified(t);
    }
    cg_param_list_free(&ps);
    for (int i = 0; i < 2; i++) {
        memcpy(cg_data(i ? pd : pe), cg_data(ms->pe), (size_t)cg_numel(pe) * sizeof(float));
        cg_tensor_modified(i ? pd : pe);
    }
    int64_t src[2 * 4] = {5, 6, 7, 2, 8, 2, 0, 0};
    int64_t tin[2 * 3] = {1, 9, 10, 1, 11, 0}, tout[2 * 3] = {9, 10, 2, 11, 2, 0};
    cg_tensor *ls = cg_seq2seq_forward(ms, src, 2, 4, tin, 3);
    cg_tensor *l = cg_seq2seq_forward(m, src, 2, 4, tin, 3);
    ck_assert_msg(l && ls, "%s", cg_last_error());
    ck_assert(tensors_equal(l, ls));

    /* the target's table: the memory as it was, the logits not */
    cg_seq2seq_memory m0, m1;
    ck_assert(cg_seq2seq_encode(m, src, 2, 4, &m0));
    ((float *)cg_data(pd))[16 + 3] += 0.5f; /* position 1 */
    cg_tensor_modified(pd);
    ck_assert(cg_seq2seq_encode(m, src, 2, 4, &m1));
    ck_assert(tensors_equal(m0.memory, m1.memory));
    cg_tensor *l1 = cg_seq2seq_decode(m, tin, 2, 3, &m1);
    ck_assert(l1 && !tensors_equal(l1, l));
    cg_seq2seq_memory_free(&m1);
    ((float *)cg_data(pe))[3] += 0.5f; /* the source's position 0 */
    cg_tensor_modified(pe);
    ck_assert(cg_seq2seq_encode(m, src, 2, 4, &m1));
    ck_assert(!tensors_equal(m0.memory, m1.memory));

    /* gradients: rows of positions < S (source) and < T (target) only */
    cg_tensor *loss = cg_seq2seq_loss(m, l1, tout);
    ck_assert(loss && cg_backward(loss, NULL, false));
    const cg_tensor *ge = cg_grad(pe), *gd = cg_grad(pd);
    ck_assert(ge && gd);
    ck_assert(rows_zero(ge, 4, 16) && rows_zero(gd, 3, 16));
    for (int64_t r = 0; r < 3; r++)
        ck_assert(!rows_zero(ge, r, r + 1) && !rows_zero(gd, r, r + 1));
    cg_seq2seq_memory_free(&m0);
    cg_seq2seq_memory_free(&m1);
    cg_release_all(4, ls, l, l1, loss);
    cg_seq2seq_free(m);
    cg_seq2seq_free(ms);
}
END_TEST

/* The head fused with the loss (cfg.loss_chunk != 0, issue 37): the loss
 * and the gradients of the unfused head, for both models (chunks of rows:
 * close; CG_LCE_EXACT: the same bits); the config records the chunk (absent
 * in older files: 0); the rule picks it from the vocabulary (the presets'
 * 96 ids keep the unfused head, the default recipe's 4,000 fuse it
 * exactly). */
static void grads_close(cg_module *a, cg_module *b, bool same_bits)
{
    cg_param_list pa = {0}, pb = {0};
    ck_assert(cg_module_params(a, &pa) && cg_module_params(b, &pb));
    ck_assert_int_eq(pa.n, pb.n);
    for (int i = 0; i < pa.n; i++) {
        const cg_tensor *ga = cg_grad(pa.items[i].tensor), *gb = cg_grad(pb.items[i].tensor);
        ck_assert_msg(ga && gb, "%s has no gradient", pa.items[i].name);
        float *x = cg_test_values(ga), *y = cg_test_values(gb);
        CG_ASSERT_CLOSE(x, y, cg_numel(ga), 1e-6, 1e-4);
        ck_assert_msg(!same_bits || memcmp(x, y, sizeof(float) * (size_t)cg_numel(ga)) == 0,
                      "%s: not the unfused head's bits", pa.items[i].name);
        free(x);
        free(y);
    }
    cg_param_list_free(&pa);
    cg_param_list_free(&pb);
}

START_TEST(test_fused_head)
{
    ck_assert_int_eq(cg_train_loss_chunk(96), 0);
    ck_assert_int_eq(cg_train_loss_chunk(CG_FUSED_HEAD_MIN_VOCAB - 1), 0);
    ck_assert_int_eq(cg_train_loss_chunk(4000), CG_LCE_EXACT);
    ck_assert_int_eq(cg_train_loss_chunk(CG_FUSED_HEAD_ROWS_VOCAB - 1), CG_LCE_EXACT);
    ck_assert_int_eq(cg_train_loss_chunk(CG_FUSED_HEAD_ROWS_VOCAB), CG_FUSED_HEAD_CHUNK);
    ck_assert_int_eq(cg_train_loss_chunk(37000), CG_FUSED_HEAD_CHUNK);
    ck_assert_int_eq(cg_train_loss_chunk(50257), CG_FUSED_HEAD_CHUNK);
    int64_t src[2 * 4] = {5, 6, 7, 2, 8, 2, 0, 0};
    int64_t tin[2 * 3] = {1, 9, 10, 1, 11, 0}, tout[2 * 3] = {9, 10, 2, 11, 2, 0};
    cg_seq2seq *sm[3];
    cg_charlm *lm[3];
    float sl[3], ll[3];
    for (int k = 0; k < 3; k++) {
        cg_seq2seq_config c = small_s2s();
        cg_charlm_config lc = small_lm();
        /* chunks of 2 rows: 3 of them; or on the k blocks */
        c.loss_chunk = lc.loss_chunk = k == 1 ? 2 : k == 2 ? CG_LCE_EXACT : 0;
        sm[k] = cg_seq2seq_new(&c, 2);
        lm[k] = cg_charlm_new(&lc, 2);
        cg_tensor *l = cg_seq2seq_forward_loss(sm[k], src, 2, 4, tin, 3, tout, 1.0f);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        sl[k] = cg_item(l);
        cg_release(l);
        l = cg_charlm_forward_loss(lm[k], tin, 2, 3, tout, 0.1f, 1.0f);
        ck_assert_msg(l && cg_backward(l, NULL, false), "%s", cg_last_error());
        ll[k] = cg_item(l);
        cg_release(l);
    }
    ck_assert_float_eq_tol(sl[1], sl[0], 1e-6f * fabsf(sl[0]));
    ck_assert_float_eq_tol(ll[1], ll[0], 1e-6f * fabsf(ll[0]));
    ck_assert(memcmp(&sl[2], &sl[0], sizeof sl[0]) == 0 &&
              memcmp(&ll[2], &ll[0], sizeof ll[0]) == 0);
    for (int k = 1; k < 3; k++) {
        grads_close(CG_MODULE(sm[0]), CG_MODULE(sm[k]), k == 2);
        grads_close(CG_MODULE(lm[0]), CG_MODULE(lm[k]), k == 2);
    }
    /* recorded, and read back; a config without it (older files) means 0 */
    char *j = cg_seq2seq_config_to_json(&sm[1]->cfg);
    ck_assert_ptr_nonnull(strstr(j, "\"loss_chunk\": 2"));
    cg_seq2seq_config back;
    ck_assert(cg_seq2seq_config_from_json(j, &back) && back.loss_chunk == 2);
    free(j);
    j = cg_charlm_config_to_json(&lm[0]->cfg);
    cJSON *o = cJSON_Parse(j);
    cJSON_DeleteItemFromObject(o, "loss_chunk");
    char *old = cJSON_PrintUnformatted(o);
    cg_charlm_config lback;
    ck_assert(cg_charlm_config_from_json(old, &lback) && lback.loss_chunk == 0);
    cg_charlm_config bad = small_lm();
    bad.loss_chunk = -2;
    CG_ASSERT_FAILS(cg_charlm_new(&bad, 0), "loss_chunk");
    free(old);
    free(j);
    cJSON_Delete(o);
    for (int k = 0; k < 3; k++) {
        cg_seq2seq_free(sm[k]);
        cg_charlm_free(lm[k]);
    }
}
END_TEST

/* Padding is invisible: more PAD at the end of the source, or of the
 * target, changes no logit of the real positions. */
START_TEST(test_seq2seq_padding)
{
    cg_seq2seq_config c = small_s2s();
    c.norm_first = true;
    cg_seq2seq *m = cg_seq2seq_new(&c, 4);
    cg_rng r = cg_rng_new(9);
    ck_assert(cg_module_init_params(CG_MODULE(m), &r, 0.2f)); /* sharper attention */
    int64_t src[3] = {5, 6, 2}, src_p[6] = {5, 6, 2, 0, 0, 0};
    int64_t tin[2] = {1, 9}, tin_p[4] = {1, 9, 0, 0};
    cg_tensor *a = cg_seq2seq_forward(m, src, 1, 3, tin, 2);
    cg_tensor *b = cg_seq2seq_forward(m, src_p, 1, 6, tin_p, 4);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    float *x = cg_test_values(a), *y = cg_test_values(b);
    CG_ASSERT_CLOSE(y, x, 2 * 20, 1e-5, 1e-4);
    free(x);
    free(y);
    /* ... while a real token there does change them */
    int64_t src_q[4] = {5, 6, 2, 7};
    cg_tensor *d = cg_seq2seq_forward(m, src_q, 1, 4, tin, 2);
    ck_assert(!tensors_equal(a, d));
    cg_release_all(3, a, b, d);
    cg_seq2seq_free(m);
}
END_TEST

START_TEST(test_seq2seq_errors)
{
    cg_seq2seq_config c = small_s2s();
    cg_seq2seq *m = cg_seq2seq_new(&c, 2);
    cg_seq2seq_memory mem;
    int64_t src[4] = {5, 2, 0, 0}, padrow[4] = {5, 2, 0, 0};
    int64_t bad[4] = {5, 20, 2, 0};
    ck_assert(!cg_seq2seq_encode(m, bad, 1, 4, &mem));
    ck_assert(strstr(cg_last_error(), "source token id 20 at [0, 1]"));
    ck_assert(!cg_seq2seq_encode(m, padrow, 2, 2, &mem));
    ck_assert(strstr(cg_last_error(), "source row 1 is all padding"));
    int64_t lng[17] = {5};
    ck_assert(!cg_seq2seq_encode(m, lng, 1, 17, &mem));
    ck_assert(strstr(cg_last_error(), "length 17 exceeds max_len 16"));
    ck_assert(cg_seq2seq_encode(m, src, 1, 4, &mem));
    int64_t t_pad[2] = {0, 1}, t_bad[2] = {1, -3}, t2[4] = {1, 5, 1, 6};
    CG_ASSERT_FAILS(cg_seq2seq_decode(m, t_pad, 1, 2, &mem), "target row 0 starts with PAD");
    CG_ASSERT_FAILS(cg_seq2seq_decode(m, t_bad, 1, 2, &mem), "target token id -3");
    CG_ASSERT_FAILS(cg_seq2seq_decode(m, t2, 2, 2, &mem), "differs from the memory's 1");
    CG_ASSERT_FAILS(cg_seq2seq_decode(m, lng, 1, 17, &mem), "exceeds max_len");
    CG_ASSERT_FAILS(cg_seq2seq_decode(m, t2, 1, 2, NULL), "NULL");
    int64_t rows[1] = {1};
    cg_seq2seq_memory sel;
    ck_assert(!cg_seq2seq_memory_select(&mem, rows, 1, &sel));
    ck_assert(strstr(cg_last_error(), "row 1"));
    cg_tensor *lg = cg_seq2seq_decode(m, t2, 1, 2, &mem);
    cg_tensor *w = cg_zeros(CG_SHAPE(2, 5));
    CG_ASSERT_FAILS(cg_seq2seq_loss(m, w, t2), "vocabulary size 20");
    cg_release_all(2, lg, w);
    cg_seq2seq_memory_free(&mem);
    cg_seq2seq_free(m);
}
END_TEST

/* --------------------------------------------------------- overfits */
START_TEST(test_charlm_overfit)
{
    const char *text = "hello world, hello cgrad! ";
    char chars[64];
    int V = 0, idx[256];
    memset(idx, -1, sizeof idx);
    for (const char *p = text; *p; p++)
        if (idx[(unsigned char)*p] < 0)
            chars[V] = *p, idx[(unsigned char)*p] = V++;
    enum { B = 4, T = 24 };
    int64_t x[B * T], y[B * T];
    size_t L = strlen(text);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            size_t k = (size_t)(b * 5 + t);
            x[b * T + t] = idx[(unsigned char)text[k % L]];
            y[b * T + t] = idx[(unsigned char)text[(k + 1) % L]];
        }
    cg_charlm_config c = cg_charlm_config_default();
    c.vocab = V, c.d = 32, c.H = 4, c.layers = 2, c.d_ff = 64, c.max_len = 32;
    cg_charlm *m = cg_charlm_new(&c, 11);
    cg_optim *o = adamw(CG_MODULE(m), 3e-3, 0.0);
    float loss_v = INFINITY, first = 0;
    int step;
    for (step = 0; step < 400 && loss_v >= 0.1f; step++) {
        cg_optim_zero_grad(o);
        cg_tensor *logits = cg_charlm_forward(m, x, B, T);
        cg_tensor *loss = cg_charlm_loss(m, logits, y);
        ck_assert_msg(loss != NULL, "%s", cg_last_error());
        loss_v = cg_item(loss);
        if (step == 0)
            first = loss_v;
        ck_assert(cg_backward(loss, NULL, false));
        ck_assert(cg_optim_step(o));
        cg_release_all(2, logits, loss);
    }
    if (getenv("CG_TEST_VERBOSE"))
        fprintf(stderr, "charlm overfit: loss %g -> %g in %d steps\n", first, loss_v, step);
    ck_assert_msg(loss_v < 0.1f, "charlm loss %g after %d steps (from %g)", loss_v, step, first);
    (void)chars;
    cg_optim_free(o);
    cg_charlm_free(m);
}
END_TEST

START_TEST(test_seq2seq_overfit)
{
    /* three pairs (reverse the letters), PAD-padded: ids 3.. are letters */
    enum { B = 3, S = 5, T = 5 };
    const int64_t src[B * S] = {3,  4, 5, 2, 0,  /* abc -> cba */
                                6,  7, 8, 9, 2,  /* defg -> gfed */
                                10, 3, 2, 0, 0}; /* ha -> ah */
    const int64_t tin[B * T] = {1, 5, 4, 3, 0, 1, 9, 8, 7, 6, 1, 3, 10, 0, 0};
    const int64_t tout[B * T] = {5, 4, 3, 2, 0, 9, 8, 7, 6, 2, 3, 10, 2, 0, 0};
    cg_seq2seq_config c = cg_seq2seq_config_default();
    c.vocab = 11, c.d = 32, c.H = 4, c.enc_layers = 1, c.dec_layers = 1, c.d_ff = 64;
    c.max_len = 8, c.label_smoothing = 0.0f;
    cg_seq2seq *m = cg_seq2seq_new(&c, 12);
    cg_optim *o = adamw(CG_MODULE(m), 3e-3, 0.0);
    float loss_v = INFINITY, first = 0;
    int step;
    for (step = 0; step < 400 && loss_v >= 0.1f; step++) {
        cg_optim_zero_grad(o);
        cg_tensor *logits = cg_seq2seq_forward(m, src, B, S, tin, T);
        cg_tensor *loss = cg_seq2seq_loss(m, logits, tout);
        ck_assert_msg(loss != NULL, "%s", cg_last_error());
        loss_v = cg_item(loss);
        if (step == 0)
            first = loss_v;
        ck_assert(cg_backward(loss, NULL, false));
        ck_assert(cg_optim_step(o));
        cg_release_all(2, logits, loss);
    }
    if (getenv("CG_TEST_VERBOSE"))
        fprintf(stderr, "seq2seq overfit: loss %g -> %g in %d steps\n", first, loss_v, step);
    ck_assert_msg(loss_v < 0.1f, "seq2seq loss %g after %d steps (from %g)", loss_v, step, first);
    /* teacher-forced argmax reproduces every non-pad target */
    cg_module_train(CG_MODULE(m), false);
    cg_tensor *logits = cg_seq2seq_forward(m, src, B, S, tin, T);
    cg_tensor *am = cg_k_argmax(logits, -1, false);
    float *v = cg_test_values(am);
    for (int i = 0; i < B * T; i++)
        if (tout[i] != CG_PAD)
            ck_assert_int_eq((int64_t)v[i], tout[i]);
    free(v);
    cg_release_all(2, logits, am);
    cg_optim_free(o);
    cg_seq2seq_free(m);
}
END_TEST

static Suite *models_suite(void)
{
    Suite *s = suite_create("models");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_charlm_bad_config);
    tcase_add_test(tc, test_seq2seq_bad_config);
    tcase_add_test(tc, test_config_json);
    tcase_add_test(tc, test_config_arch_facts);
    tcase_add_test(tc, test_config_every_act);
    suite_add_tcase(s, tc);

    tc = tcase_create("charlm");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_charlm_params);
    tcase_add_test(tc, test_charlm_init);
    tcase_add_test(tc, test_skip_init);
    tcase_add_test(tc, test_charlm_forward);
    tcase_add_test(tc, test_charlm_embedding_forms);
    tcase_add_test(tc, test_charlm_errors);
    tcase_add_test(tc, test_charlm_causal);
    tcase_add_test(tc, test_charlm_dropout);
    tcase_add_test(tc, test_charlm_full_loss_passes);
    tcase_add_test(tc, test_charlm_strided_loss);
    tcase_add_test(tc, test_charlm_full_loss_logits_bounded);
    suite_add_tcase(s, tc);

    tc = tcase_create("seq2seq");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_seq2seq_params);
    tcase_add_test(tc, test_seq2seq_forward);
    tcase_add_test(tc, test_seq2seq_learned_positions);
    tcase_add_test(tc, test_seq2seq_label_smoothing_one);
    tcase_add_test(tc, test_seq2seq_padding);
    tcase_add_test(tc, test_seq2seq_errors);
    tcase_add_test(tc, test_fused_head);
    suite_add_tcase(s, tc);

    tc = tcase_create("overfit");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_charlm_overfit);
    tcase_add_test(tc, test_seq2seq_overfit);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {models_suite()};
    return cg_test_run(s, 1);
}
