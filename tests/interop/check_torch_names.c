/* PyTorch's nn.Transformer* state dicts in cgrad's modules and back
 * (nn/torch_names.h; tests/interop/torch_names.py writes the cases):
 *     check_torch_names DIR CASE...   exit 0: every case equal; 1: not
 * For each CASE: build cgrad's module from the configuration in
 * DIR/CASE.io.safetensors (cg_tf_config_from_torch), load PyTorch's
 * DIR/CASE.safetensors strictly (cg_torch_load_file), run the input and
 * match PyTorch's output; then put other values in every parameter and
 * save them under PyTorch's names (DIR/CASE.cg.safetensors, cg_torch_save)
 * with the output they give (DIR/CASE.cg_out.safetensors) for
 * torch_names.py check. Last, nn.Transformer's post-norm file
 * (transformer_post) is refused in one line naming its final norms. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

typedef struct {
    cg_module *m;
    const char *kind;
    bool batch_first;
} model;

static int64_t meta_int(const cg_st_file *f, const char *key)
{
    double v = 0;
    if (!cg_st_metadata_number(f, key, &v))
        fprintf(stderr, "check_torch_names: %s\n", cg_last_error());
    return (int64_t)v;
}

/* nn.Transformer: encoder and decoder stacks in a container. */
static model build(const cg_st_file *io)
{
    cg_torch_layer_args a = {.d_model = meta_int(io, "d_model"),
                             .nhead = meta_int(io, "nhead"),
                             .dim_feedforward = meta_int(io, "dim_feedforward"),
                             .activation = cg_st_metadata(io, "activation"),
                             .norm_first = meta_int(io, "norm_first"),
                             .batch_first = meta_int(io, "batch_first"),
                             .no_bias = meta_int(io, "bias") == 0};
    model r = {.kind = cg_st_metadata(io, "kind"), .batch_first = a.batch_first};
    cg_tf_config c;
    int n = (int)meta_int(io, "layers");
    cg_rng rng = cg_rng_new(3);
    if (!r.kind || !cg_tf_config_from_torch(&a, &c))
        return r;
    if (!strcmp(r.kind, "enc_layer"))
        r.m = CG_MODULE(cg_enc_layer_new(&c, &rng));
    else if (!strcmp(r.kind, "dec_layer"))
        r.m = CG_MODULE(cg_dec_layer_new(&c, &rng));
    else if (!strcmp(r.kind, "encoder"))
        r.m = CG_MODULE(cg_enc_stack_new(n, &c, &rng));
    else if (!strcmp(r.kind, "decoder"))
        r.m = CG_MODULE(cg_dec_stack_new(n, &c, &rng));
    else if (!strcmp(r.kind, "transformer")) {
        r.m = cg_module_new("Transformer");
        if (!cg_module_add_child(r.m, "encoder", cg_enc_stack_new(n, &c, &rng)) ||
            !cg_module_add_child(r.m, "decoder", cg_dec_stack_new(n, &c, &rng))) {
            cg_module_free(r.m);
            r.m = NULL;
        }
    }
    if (r.m)
        cg_module_train(r.m, false);
    return r;
}

/* The module's output on x (and mem), in PyTorch's layout. */
static cg_tensor *forward(model *md, cg_tensor *x, cg_tensor *mem, const cg_tensor *pad)
{
    cg_scope *s = cg_scope_begin();
    if (!md->batch_first) { /* [T, B, d] -> [B, T, d] */
        x = cg_transpose(x, 0, 1);
        mem = cg_transpose(mem, 0, 1);
    }
    cg_attn_mask self = {.key_pad = pad}, causal = {.causal = true};
    cg_tensor *y = NULL;
    const char *k = md->kind;
    if (!strcmp(k, "enc_layer"))
        y = cg_enc_layer_forward((cg_enc_layer *)md->m, x, &self);
    else if (!strcmp(k, "encoder"))
        y = cg_enc_stack_forward((cg_enc_stack *)md->m, x, &self);
    else if (!strcmp(k, "dec_layer"))
        y = cg_dec_layer_forward((cg_dec_layer *)md->m, x, mem, &causal, NULL);
    else if (!strcmp(k, "decoder"))
        y = cg_dec_stack_forward((cg_dec_stack *)md->m, x, mem, &causal, NULL);
    else { /* nn.Transformer(src = mem, tgt = x) */
        cg_enc_stack *e = (cg_enc_stack *)cg_module_get_child(md->m, "encoder");
        cg_tensor *enc = cg_enc_stack_forward(e, mem, NULL);
        y = cg_dec_stack_forward((cg_dec_stack *)cg_module_get_child(md->m, "decoder"), x, enc,
                                 &causal, NULL);
    }
    if (!md->batch_first)
        y = cg_contiguous(cg_transpose(y, 0, 1));
    cg_keep(y);
    cg_scope_end(s);
    return y;
}

static double max_diff(const cg_tensor *a, const cg_tensor *b)
{
    if (!a || !b || cg_numel(a) != cg_numel(b))
        return INFINITY;
    double m = 0;
    for (int64_t i = 0; i < cg_numel(a); i++)
        m = fmax(m, fabs((double)cg_data((cg_tensor *)a)[i] - cg_data((cg_tensor *)b)[i]));
    return m;
}

/* Other values in every parameter, saved under PyTorch's names with the
 * output they give. */
static bool export_case(model *md, cg_tensor *x, cg_tensor *mem, const cg_tensor *pad,
                        const char *dir, const char *name)
{
    cg_rng rng = cg_rng_new(11);
    cg_param_list l = {0};
    bool ok = cg_module_params(md->m, &l);
    cg_no_grad_begin();
    for (int i = 0; ok && i < l.n; i++) {
        cg_tensor *r = cg_randn(&rng, l.items[i].tensor->ndim, l.items[i].tensor->shape);
        cg_tensor *v = cg_muls(r, 0.3f);
        ok = cg_copy_(l.items[i].tensor, v);
        cg_release_all(2, r, v);
    }
    cg_no_grad_end();
    cg_param_list_free(&l);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.cg.safetensors", dir, name);
    ok = ok && cg_torch_save(md->m, path);
    cg_tensor *y = ok ? forward(md, x, mem, pad) : NULL;
    cg_st_writer *w = cg_st_writer_new();
    snprintf(path, sizeof path, "%s/%s.cg_out.safetensors", dir, name);
    ok = y && w && cg_st_add(w, "y", y) && cg_st_writer_save(w, path);
    cg_st_writer_free(w);
    cg_release(y);
    return ok;
}

static bool run_case(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.io.safetensors", dir, name);
    cg_st_file *io = cg_st_open(path);
    model md = io ? build(io) : (model){0};
    snprintf(path, sizeof path, "%s/%s.safetensors", dir, name);
    bool ok = md.m && cg_torch_load_file(md.m, path);
    cg_tensor *x = ok ? cg_st_get(io, "x") : NULL, *mem = ok ? cg_st_get(io, "mem") : NULL;
    cg_tensor *want = ok ? cg_st_get(io, "y") : NULL;
    cg_tensor *pad = io && cg_st_has(io, "pad") ? cg_st_get(io, "pad") : NULL;
    cg_tensor *y = want ? forward(&md, x, mem, pad) : NULL;
    double err = max_diff(y, want);
    ok = ok && err <= 1e-5;
    printf("%s: PyTorch's weights in cgrad (strict), max |output difference| %.3g: %s\n", name, err,
           ok ? "ok" : "MISMATCH");
    if (ok && !export_case(&md, x, mem, pad, dir, name))
        ok = false;
    if (!ok && cg_has_error())
        printf("  error: %s\n", cg_last_error());
    cg_release_all(5, x, mem, want, pad, y);
    cg_module_free(md.m);
    cg_st_close(io);
    return ok;
}

/* A post-norm nn.Transformer has encoder.norm and decoder.norm, which a
 * post-norm cgrad stack does not: refused, naming them. */
static bool refuses_post_norm(const char *dir)
{
    cg_tf_config c;
    cg_torch_layer_args a = {.d_model = 16, .nhead = 4, .dim_feedforward = 24};
    cg_module *m = cg_module_new("Transformer");
    bool built = cg_tf_config_from_torch(&a, &c) &&
                 cg_module_add_child(m, "encoder", cg_enc_stack_new(1, &c, NULL)) &&
                 cg_module_add_child(m, "decoder", cg_dec_stack_new(1, &c, NULL));
    char path[4096];
    snprintf(path, sizeof path, "%s/transformer_post.safetensors", dir);
    bool loaded = built && cg_torch_load_file(m, path);
    const char *e = cg_last_error();
    bool ok = built && !loaded && strstr(e, "encoder.norm.weight") &&
              strstr(e, "decoder.norm.bias") && !strchr(e, '\n');
    printf("transformer_post: refused: %s\n  %s\n", ok ? "ok" : "NO", e);
    cg_module_free(m);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return fprintf(stderr, "usage: check_torch_names DIR CASE...\n"), 2;
    int bad = 0;
    for (int i = 2; i < argc; i++)
        bad += !run_case(argv[1], argv[i]);
    bad += !refuses_post_norm(argv[1]);
    printf("check_torch_names: %d cases, %d failed\n", argc - 1, bad);
    return bad ? 1 : 0;
}
