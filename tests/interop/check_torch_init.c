/* PyTorch's default initialisation reproduced from PyTorch's generator
 * (tests/interop/make_torch_init.py writes what PyTorch gives):
 *     check_torch_init DIR     exit 0: every parameter as PyTorch's; 1: not
 * The modules of the script are built in its order under one root, then
 * cg_module_reset_parameters_torch draws them from cg_mt19937 seeded as
 * torch.manual_seed(1234). Uniform draws (Linear, MultiheadAttention's
 * in_proj, the layers' projections) must be PyTorch's bits; normal ones
 * (Embedding) within 2e-6 (log, cos and sin may differ in the last bit:
 * core/mt19937.c); the 5 uniforms drawn after must be PyTorch's too (the
 * stream advanced by exactly as many draws). Then check_torch_random.c's
 * random tensors and init functions (DIR/torch_random.safetensors). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

enum { SEED = 1234 };

int check_torch_random(const char *dir); /* check_torch_random.c */

static cg_module *build(void)
{
    cg_tf_config post = {.d = 8, .H = 2, .d_ff = 16, .norm = CG_NORM_LAYERNORM, .act = CG_ACT_RELU};
    cg_tf_config pre = post;
    pre.norm_first = true;
    cg_conv_cfg g2 = CG_CONV_DEFAULT;
    g2.groups = 2;
    cg_module *root = cg_module_new("Root");
    bool ok =
        root && cg_module_add_child(root, "lin", cg_linear_new(5, 7, true, NULL)) &&
        cg_module_add_child(root, "lin_nobias", cg_linear_new(6, 3, false, NULL)) &&
        cg_module_add_child(root, "emb", cg_embed_new(11, 6, NULL)) &&
        cg_module_add_child(root, "emb_small", cg_embed_new(3, 5, NULL)) &&
        cg_module_add_child(root, "ln", cg_layernorm_new(6)) &&
        cg_module_add_child(root, "mha", cg_mha_new(8, 2, NULL)) &&
        cg_module_add_child(root, "enc", cg_enc_layer_new(&post, NULL)) &&
        cg_module_add_child(root, "dec", cg_dec_layer_new(&post, NULL)) &&
        cg_module_add_child(root, "stack", cg_enc_stack_new(2, &pre, NULL)) &&
        cg_module_add_child(root, "conv", CG_MODULE(cg_conv2d_new(3, 4, 2, 3, NULL, true, NULL))) &&
        cg_module_add_child(root, "convt",
                            CG_MODULE(cg_conv_transpose2d_new(4, 6, 3, 2, &g2, true, NULL))) &&
        cg_module_add_child(root, "convt3",
                            CG_MODULE(cg_conv_transpose3d_new(2, 4, 2, 1, 2, NULL, true, NULL))) &&
        cg_module_add_child(root, "bil", cg_bilinear_new(4, 3, 2, true, NULL));
    if (!ok) {
        cg_module_free(root);
        return NULL;
    }
    return root;
}

/* 0 when t equals the file's tensor: bit for bit, or within tol. */
static int check(const cg_st_file *f, const char *name, const cg_tensor *t, double tol)
{
    cg_tensor *w = cg_st_get_f32(f, name);
    bool ok = w && cg_same_shape(w, t);
    double worst = 0;
    for (int64_t i = 0; ok && i < cg_numel(t); i++) {
        double d = fabs((double)cg_data((cg_tensor *)t)[i] - (double)cg_data(w)[i]);
        worst = d > worst ? d : worst;
        ok = tol > 0 ? d <= tol : cg_data((cg_tensor *)t)[i] == cg_data(w)[i];
    }
    printf("%-36s %s", name, ok ? "equal" : "DIFFERENT");
    if (tol > 0)
        printf(" (largest difference %.2g)", worst);
    printf("\n");
    if (!w)
        printf("  error: %s\n", cg_last_error());
    cg_release(w);
    return ok ? 0 : 1;
}

/* nn.init.orthogonal_ (cg_init_orthogonal_torch_) against torch_orth.safetensors
 * (make_torch_init.py's ORTH): the same draws, the QR in double here and in
 * float32 there; the number of tensors that differ */
static int check_orthogonal(const char *dir)
{
    static const struct {
        int nd;
        int64_t shape[3];
        float gain;
    } orth[] = {{2, {3, 5}, 1.0f}, {2, {5, 3}, 2.0f}, {3, {4, 2, 3}, 0.5f},
                {2, {6, 6}, 1.0f}, {2, {2, 8}, 1.5f}, {2, {40, 24}, 1.0f}};
    char path[4096], name[32];
    snprintf(path, sizeof path, "%s/torch_orth.safetensors", dir);
    cg_st_file *f = cg_st_open(path);
    if (!f)
        return fprintf(stderr, "check_torch_init: %s\n", cg_last_error()), 1;
    cg_mt19937 g;
    cg_mt19937_seed(&g, SEED + 1);
    int bad = cg_st_count(f) == 6 ? 0 : 1;
    for (int i = 0; i < 6; i++) {
        cg_tensor *t = cg_empty(orth[i].nd, orth[i].shape);
        snprintf(name, sizeof name, "orth.%d", i);
        if (!t || !cg_init_orthogonal_torch_(t, orth[i].gain, &g)) {
            fprintf(stderr, "check_torch_init: %s: %s\n", name, cg_last_error());
            bad++;
        } else
            bad += check(f, name, t, 1e-6);
        cg_release(t);
    }
    cg_st_close(f);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: check_torch_init DIR\n"), 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/torch_init.safetensors", argv[1]);
    cg_st_file *f = cg_st_open(path);
    cg_module *root = build();
    cg_mt19937 g;
    cg_mt19937_seed(&g, SEED);
    if (!f || !root || !cg_module_reset_parameters_torch(root, &g))
        return fprintf(stderr, "check_torch_init: %s\n", cg_last_error()), 1;
    cg_param_list l = {0};
    int bad = cg_module_params(root, &l) && l.n + 1 == cg_st_count(f) ? 0 : 1;
    for (int i = 0; i < l.n; i++)
        bad += check(f, l.items[i].name, l.items[i].tensor,
                     strncmp(l.items[i].name, "emb", 3) ? 0 : 2e-6);
    cg_tensor *after = cg_empty(CG_SHAPE(5));
    bad += !cg_uniform_torch_(after, &g, 0.0f, 1.0f) || check(f, "after", after, 0);
    bad += check_orthogonal(argv[1]);
    printf("check_torch_init: %d parameters and the draws after, %d different\n", l.n, bad);
    cg_release(after);
    cg_param_list_free(&l);
    cg_module_free(root);
    cg_st_close(f);
    return check_torch_random(argv[1]) || bad ? 1 : 0;
}
