/* PyTorch's nn.Transformer* names (nn/torch_names.h): the name table, a
 * save/load round trip, and the refusals. tests/interop/torch_names.py
 * checks the files against PyTorch itself (meson test torch_names). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nn/lora.h"
#include "nn/torch_names.h"
#include "tests/testutil.h"

static cg_tf_config config(bool norm_first)
{
    cg_torch_layer_args a = {
        .d_model = 8, .nhead = 2, .dim_feedforward = 12, .norm_first = norm_first};
    cg_tf_config c;
    ck_assert(cg_tf_config_from_torch(&a, &c));
    return c;
}

/* nn.TransformerEncoder(TransformerEncoderLayer(8, 2, 12, norm_first=True),
 * 1, norm=LayerNorm(8)).state_dict().keys(), in cgrad's order. */
START_TEST(test_encoder_names)
{
    static const char *const want[] = {"layers.0.self_attn.in_proj_weight",
                                       "layers.0.self_attn.in_proj_bias",
                                       "layers.0.self_attn.out_proj.weight",
                                       "layers.0.self_attn.out_proj.bias",
                                       "layers.0.norm1.weight",
                                       "layers.0.norm1.bias",
                                       "layers.0.linear1.weight",
                                       "layers.0.linear1.bias",
                                       "layers.0.linear2.weight",
                                       "layers.0.linear2.bias",
                                       "layers.0.norm2.weight",
                                       "layers.0.norm2.bias",
                                       "norm.weight",
                                       "norm.bias"};
    cg_tf_config c = config(true);
    cg_enc_stack *s = cg_enc_stack_new(1, &c, NULL);
    cg_torch_names l = {0};
    ck_assert(cg_torch_names_of(CG_MODULE(s), &l));
    ck_assert_int_eq(l.n, 14);
    for (int i = 0; i < l.n; i++)
        ck_assert_str_eq(l.items[i].torch_name, want[i]);
    ck_assert_int_eq(l.items[0].n_parts, 3);
    ck_assert_str_eq(l.items[0].names[1], "layers.0.self_attn.k_proj.weight");
    cg_torch_names_free(&l);
    cg_module_free(CG_MODULE(s));
}
END_TEST

/* A decoder layer: multihead_attn and norm3; an LM block: a norm_first
 * encoder layer's names. */
START_TEST(test_decoder_and_block_names)
{
    cg_tf_config c = config(false);
    cg_dec_layer *d = cg_dec_layer_new(&c, NULL);
    cg_lm_block *b = cg_lm_block_new(&c, NULL);
    cg_torch_names l = {0}, m = {0};
    ck_assert(cg_torch_names_of(CG_MODULE(d), &l) && cg_torch_names_of(CG_MODULE(b), &m));
    ck_assert_int_eq(l.n, 4 + 2 + 4 + 2 + 4 + 2);
    ck_assert_str_eq(l.items[6].torch_name, "multihead_attn.in_proj_weight");
    ck_assert_str_eq(l.items[16].torch_name, "norm3.weight");
    ck_assert_str_eq(m.items[0].torch_name, "norm1.weight");
    ck_assert_str_eq(m.items[2].torch_name, "self_attn.in_proj_weight");
    cg_torch_names_free(&l);
    cg_torch_names_free(&m);
    cg_module_free(CG_MODULE(d));
    cg_module_free(CG_MODULE(b));
}
END_TEST

/* An empty file of its own made in the scratch directory, named in path. */
static void temp_file(char *path, size_t n)
{
    int fd = cg_test_mkstemp(path, n, "cg_torch_names_");
    ck_assert(fd >= 0);
    close(fd);
}

/* Saved under PyTorch's names and loaded into another layer: the same
 * values (q, k, v unpacked), frozen parameters stay frozen, and a file of
 * another shape changes nothing. */
START_TEST(test_round_trip)
{
    char path[PATH_MAX];
    temp_file(path, sizeof path);
    cg_tf_config c = config(false);
    cg_rng r1 = cg_rng_new(1), r2 = cg_rng_new(2);
    cg_enc_layer *a = cg_enc_layer_new(&c, &r1), *b = cg_enc_layer_new(&c, &r2);
    cg_module_requires_grad(CG_MODULE(b->ff), false);
    ck_assert(cg_torch_save(CG_MODULE(a), path));
    ck_assert(cg_torch_load_file(CG_MODULE(b), path));
    ck_assert_float_eq(cg_test_max_rel_diff(CG_MODULE(a), CG_MODULE(b), NULL, 0), 0.0);
    ck_assert(!b->ff->fc1->weight->requires_grad && b->self_attn->q_proj->weight->requires_grad);
    cg_tf_config wide = c;
    wide.d_ff = 16;
    cg_enc_layer *w = cg_enc_layer_new(&wide, &r2);
    float before = cg_data(w->self_attn->k_proj->weight)[0];
    CG_ASSERT_REFUSED(!cg_torch_load_file(CG_MODULE(w), path),
                      "'linear1.weight' has shape [12, 8]");
    ck_assert_float_eq(cg_data(w->self_attn->k_proj->weight)[0], before);
    remove(path);
    cg_module_free(CG_MODULE(a));
    cg_module_free(CG_MODULE(b));
    cg_module_free(CG_MODULE(w));
}
END_TEST

/* A layer shared by two parents (ALBERT's weight sharing): PyTorch's
 * state_dict lists it under both names, in_proj too, and a strict load
 * takes that file as cg_module_load_ex does for any shared module (loads
 * it once, refuses copies that differ). */
START_TEST(test_shared_layer_load)
{
    char path[PATH_MAX];
    temp_file(path, sizeof path);
    cg_tf_config c = config(true);
    cg_rng r1 = cg_rng_new(1), r2 = cg_rng_new(2);
    cg_enc_layer *src = cg_enc_layer_new(&c, &r1), *copy = cg_enc_layer_new(&c, &r2);
    ck_assert(cg_torch_save(CG_MODULE(src), path) && cg_torch_load_file(CG_MODULE(copy), path));
    cg_module *two = cg_module_new("Two"); /* PyTorch's state dict: a.* and b.*, equal */
    ck_assert(cg_module_add_child(two, "a", src) && cg_module_add_child(two, "b", copy));
    ck_assert(cg_torch_save(two, path));
    cg_enc_layer *dst = cg_enc_layer_new(&c, &r2);
    cg_module *shared = cg_module_new("Shared");
    ck_assert(cg_module_add_child(shared, "a", dst) && cg_module_add_child(shared, "b", dst));
    ck_assert_msg(cg_torch_load_file(shared, path), "%s", cg_last_error());
    ck_assert_float_eq(cg_test_max_rel_diff(CG_MODULE(src), CG_MODULE(dst), NULL, 0), 0.0);
    char saved[PATH_MAX]; /* a save writes the shared layer once, under its first name */
    temp_file(saved, sizeof saved);
    ck_assert(cg_torch_save(shared, saved));
    cg_st_file *f = cg_st_open(saved);
    ck_assert_msg(f, "%s", cg_last_error());
    ck_assert_int_eq(cg_st_count(f), 12);
    ck_assert(cg_st_has(f, "a.self_attn.in_proj_weight") &&
              !cg_st_has(f, "b.self_attn.in_proj_weight") && !cg_st_has(f, "b.norm1.weight"));
    cg_st_close(f);
    remove(saved);
    cg_data(copy->self_attn->v_proj->bias)[1] += 1; /* b's in_proj_bias differs now */
    ck_assert(cg_torch_save(two, path));
    float before = cg_data(dst->self_attn->v_proj->bias)[1];
    CG_ASSERT_REFUSED(!cg_torch_load_file(shared, path),
                      "'a.self_attn.in_proj_bias' and 'b.self_attn.in_proj_bias' are one tied "
                      "tensor but differ in the file (first at element 17)");
    ck_assert_float_eq(cg_data(dst->self_attn->v_proj->bias)[1], before);
    remove(path);
    cg_module_free(two);
    cg_module_free(shared);
}
END_TEST

START_TEST(test_refusals)
{
    cg_tf_config c = config(true), out;
    c.norm = CG_NORM_RMSNORM;
    cg_enc_layer *l = cg_enc_layer_new(&c, NULL);
    cg_torch_names n = {0};
    CG_ASSERT_REFUSED(!cg_torch_names_of(CG_MODULE(l), &n), "'ln1' is an RMSNorm");
    cg_module_free(CG_MODULE(l));
    c.norm = CG_NORM_LAYERNORM;
    l = cg_enc_layer_new(&c, NULL);
    ck_assert(cg_lora_attach(l->self_attn->q_proj, 2, 4.0f, 0.0f, NULL));
    CG_ASSERT_REFUSED(!cg_torch_save(CG_MODULE(l), "/nonexistent/x.safetensors"),
                      "'self_attn.q_proj.lora_A.weight' is below an attention projection");
    cg_module_free(CG_MODULE(l));
    /* an adapter on the feed-forward too (it was saved as linear1.lora_A.weight,
     * which PyTorch's layer refuses, beside the unadapted linear1.weight) */
    l = cg_enc_layer_new(&c, NULL);
    ck_assert(cg_lora_attach(l->ff->fc1, 2, 4.0f, 0.0f, NULL));
    CG_ASSERT_REFUSED(!cg_torch_save(CG_MODULE(l), "/nonexistent/x.safetensors"),
                      "'ff.fc1.lora_A.weight' is below a feed-forward projection");
    cg_module_free(CG_MODULE(l));
    cg_torch_layer_args a = {.d_model = 8, .nhead = 2, .dim_feedforward = 12};
    a.no_bias = true; /* PyTorch 2.1's bias=False */
    ck_assert(cg_tf_config_from_torch(&a, &out) && out.no_bias);
    a.no_bias = false;
    ck_assert(cg_tf_config_from_torch(&a, &out) && !out.no_bias);
    a.layer_norm_eps = 1e-6;
    CG_ASSERT_REFUSED(!cg_tf_config_from_torch(&a, &out), "layer_norm_eps=1e-06");
    a.layer_norm_eps = 0;
    a.activation = "silu";
    CG_ASSERT_REFUSED(!cg_tf_config_from_torch(&a, &out), "activation 'silu'");
    a.activation = "gelu";
    ck_assert(cg_tf_config_from_torch(&a, &out) && out.act == CG_ACT_GELU_ERF);
    a.nhead = 3;
    CG_ASSERT_REFUSED(!cg_tf_config_from_torch(&a, &out), "");
    CG_ASSERT_REFUSED(!cg_torch_names_of(NULL, &n), "");
}
END_TEST

/* Each LayerNorm of PyTorch's layers and stacks refused as an RMSNorm by
 * its name: a decoder layer's, an LM block's (a TransformerEncoderLayer's
 * names), a stack's final norm (no layers: that norm alone). An RMSNorm of
 * the user's own module is not one of PyTorch's layers: it keeps its name. */
START_TEST(test_rmsnorm_refused_in_each_layer)
{
    cg_tf_config c = config(true);
    c.norm = CG_NORM_RMSNORM;
    cg_module *m[] = {CG_MODULE(cg_dec_layer_new(&c, NULL)), CG_MODULE(cg_lm_block_new(&c, NULL)),
                      CG_MODULE(cg_enc_stack_new(0, &c, NULL)),
                      CG_MODULE(cg_dec_stack_new(0, &c, NULL))};
    static const char *const want[] = {
        "'ln1' is an RMSNorm: PyTorch's TransformerDecoderLayer has LayerNorm only",
        "'ln1' is an RMSNorm: PyTorch's TransformerEncoderLayer has LayerNorm only",
        "'ln_f' is an RMSNorm: PyTorch's TransformerEncoder has LayerNorm only",
        "'ln_f' is an RMSNorm: PyTorch's TransformerDecoder has LayerNorm only"};
    for (int i = 0; i < 4; i++) {
        cg_torch_names n = {0};
        ck_assert_msg(m[i], "%s", cg_last_error());
        CG_ASSERT_REFUSED(!cg_torch_names_of(m[i], &n), want[i]);
        ck_assert_int_eq(n.n, 0);
        cg_module_free(m[i]);
    }
    cg_module *own = cg_module_new("Mine");
    ck_assert(cg_module_add_child(own, "norm", cg_norm_new(CG_NORM_RMSNORM, 8)));
    cg_torch_names n = {0};
    ck_assert(cg_torch_names_of(own, &n));
    ck_assert_int_eq(n.n, 1);
    ck_assert_str_eq(n.items[0].torch_name, "norm.weight");
    cg_torch_names_free(&n);
    cg_module_free(own);
}
END_TEST

/* A FeedForward is flattened into linear1 and linear2 only below a layer:
 * on its own, or in the user's module, its names are its own. */
START_TEST(test_feedforward_outside_a_layer)
{
    cg_module *own = cg_module_new("Mine");
    cg_ff *ff = cg_ff_new(8, 12, CG_ACT_RELU, NULL);
    ck_assert(cg_module_add_child(own, "ff", ff));
    static const char *const want[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    cg_torch_names a = {0}, b = {0};
    ck_assert(cg_torch_names_of(CG_MODULE(ff), &a) && cg_torch_names_of(own, &b));
    ck_assert_int_eq(a.n, 4);
    ck_assert_int_eq(b.n, 4);
    for (int i = 0; i < 4; i++) {
        char full[32];
        snprintf(full, sizeof full, "ff.%s", want[i]);
        ck_assert_str_eq(a.items[i].torch_name, want[i]);
        ck_assert_str_eq(b.items[i].torch_name, full);
    }
    cg_torch_names_free(&a);
    cg_torch_names_free(&b);
    cg_module_free(own);
}
END_TEST

/* The user's module with a Linear under a child named by len a's. */
static cg_module *long_named(int len, uint64_t seed)
{
    char child[506];
    memset(child, 'a', (size_t)len);
    child[len] = 0;
    cg_rng r = cg_rng_new(seed);
    cg_module *m = cg_module_new("Mine");
    ck_assert(cg_module_add_child(m, child, cg_linear_new(2, 2, false, &r)));
    return m;
}

/* PyTorch's names are built in 512 bytes: a name of 511 characters is
 * taken, saved and loaded back, and one of 512 refused by name (not cut
 * short, not overrun). */
START_TEST(test_name_length_limit)
{
    cg_module *a = long_named(504, 1), *b = long_named(504, 2); /* "<504 a's>.weight": 511 */
    cg_torch_names n = {0};
    ck_assert_msg(cg_torch_names_of(a, &n), "%s", cg_last_error());
    ck_assert_int_eq(strlen(n.items[0].torch_name), 511);
    cg_torch_names_free(&n);
    char path[PATH_MAX];
    temp_file(path, sizeof path);
    ck_assert_msg(cg_torch_save(a, path) && cg_torch_load_file(b, path), "%s", cg_last_error());
    ck_assert_float_eq(cg_test_max_rel_diff(a, b, NULL, 0), 0.0);
    remove(path);
    cg_module_free(a);
    cg_module_free(b);
    cg_module *c = long_named(505, 1); /* 512 */
    CG_ASSERT_REFUSED(!cg_torch_names_of(c, &n), ".weight' is too long");
    ck_assert_int_eq(n.n, 0);
    cg_module_free(c);
}
END_TEST

/* An in_proj packs one attention's q, k and v: a projection whose first
 * name is elsewhere (shared with another module first) cannot be packed,
 * and the refusal names the part it lacks. */
START_TEST(test_projection_shared_elsewhere)
{
    for (int part = 0; part < 3; part++) {
        cg_mha *a = cg_mha_new(8, 2, NULL);
        cg_linear *proj = part == 0 ? a->q_proj : part == 1 ? a->k_proj : a->v_proj;
        cg_module *m = cg_module_new("Mine");
        ck_assert(cg_module_add_child(m, "first", proj) && cg_module_add_child(m, "attn", a));
        cg_torch_names n = {0};
        char want[96];
        snprintf(want, sizeof want, "'attn.in_proj_weight' lacks its %c projection", "qkv"[part]);
        CG_ASSERT_REFUSED(!cg_torch_names_of(m, &n), want);
        CG_ASSERT_REFUSED(!cg_torch_save(m, "/nonexistent/x.safetensors"), want);
        cg_module_free(m);
    }
}
END_TEST

/* PyTorch packs q_proj, k_proj and v_proj into in_proj_weight and
 * in_proj_bias: a buffer of the user's in one of them has no name there. */
START_TEST(test_buffer_in_projection)
{
    cg_mha *a = cg_mha_new(8, 2, NULL);
    cg_tensor *t = cg_zeros(1, (int64_t[]){3});
    ck_assert(cg_module_add_buffer(CG_MODULE(a->k_proj), "scale", t, true));
    cg_release(t);
    const char *want = "buffer 'k_proj.scale' sits in a q/k/v projection";
    CG_ASSERT_REFUSED(!cg_torch_save(CG_MODULE(a), "/nonexistent/x.safetensors"), want);
    cg_module_free(CG_MODULE(a));
}
END_TEST

/* The keys of a load refused before the file is compared (a model PyTorch
 * has no names for) come back zeroed, as cg_module_load_ex's do, whatever
 * the caller's struct held. */
START_TEST(test_refused_load_zeroes_keys)
{
    char path[PATH_MAX];
    temp_file(path, sizeof path);
    cg_tf_config c = config(true);
    cg_enc_layer *good = cg_enc_layer_new(&c, NULL);
    ck_assert(cg_torch_save(CG_MODULE(good), path));
    c.norm = CG_NORM_RMSNORM;
    cg_enc_layer *rms = cg_enc_layer_new(&c, NULL);
    cg_st_file *f = cg_st_open(path);
    ck_assert_msg(f, "%s", cg_last_error());
    cg_load_keys k = {.n_missing = 7, .n_unexpected = 3};
    cg_load_options opt = {.non_strict = true, .keys = &k};
    CG_ASSERT_REFUSED(!cg_torch_load(CG_MODULE(rms), f, &opt), "'ln1' is an RMSNorm");
    ck_assert(!k.missing && !k.unexpected && k.n_missing == 0 && k.n_unexpected == 0);
    cg_st_close(f);
    remove(path);
    cg_module_free(CG_MODULE(good));
    cg_module_free(CG_MODULE(rms));
}
END_TEST

/* nn.TransformerEncoderLayer's arguments into a config: each field
 * carried over; unset ones are PyTorch's defaults (ReLU, eps 1e-5), and an
 * eps PyTorch would take but cgrad has no equivalent for is refused. */
START_TEST(test_config_from_torch_fields)
{
    cg_torch_layer_args a = {
        .d_model = 8, .nhead = 2, .dim_feedforward = 12, .dropout = 0.25, .norm_first = true};
    cg_tf_config c;
    ck_assert(cg_tf_config_from_torch(&a, &c));
    ck_assert_int_eq(c.d, 8);
    ck_assert_int_eq(c.H, 2);
    ck_assert_int_eq(c.d_ff, 12);
    ck_assert_float_eq(c.dropout, 0.25);
    ck_assert(c.norm_first && c.norm == CG_NORM_LAYERNORM && c.act == CG_ACT_RELU);
    a.norm_first = false;
    a.layer_norm_eps = 1e-5;
    ck_assert(cg_tf_config_from_torch(&a, &c) && !c.norm_first);
    a.layer_norm_eps = -1e-5;
    CG_ASSERT_REFUSED(!cg_tf_config_from_torch(&a, &c), "layer_norm_eps=-1e-05 has no equivalent");
    a.layer_norm_eps = 0;
    a.dropout = 1.5;
    CG_ASSERT_REFUSED(!cg_tf_config_from_torch(&a, &c), "dropout");
    ck_assert_float_eq(c.dropout, 0.25); /* a refusal leaves *out as it was */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("torch_names");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_encoder_names);
    tcase_add_test(tc, test_decoder_and_block_names);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_shared_layer_load);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_rmsnorm_refused_in_each_layer);
    tcase_add_test(tc, test_feedforward_outside_a_layer);
    tcase_add_test(tc, test_name_length_limit);
    tcase_add_test(tc, test_projection_shared_elsewhere);
    tcase_add_test(tc, test_buffer_in_projection);
    tcase_add_test(tc, test_refused_load_zeroes_keys);
    tcase_add_test(tc, test_config_from_torch_fields);
    suite_add_tcase(s, tc);
    return cg_test_run(&s, 1);
}
