/* Buffers (cg_module_add_buffer) against PyTorch's register_buffer, with
 * tests/interop/check_buffers.py:
 *     check_buffers write DIR   DIR/cgrad_buffers.safetensors from cgrad
 *     check_buffers read DIR    DIR/torch_buffers.safetensors (PyTorch's
 *                               state_dict) loads strictly into cgrad
 * The module is PyTorch's
 *     class Net(nn.Module):   mask: bool [3] buffer; fc = nn.Linear(3, 2);
 *                             bn = nn.BatchNorm1d(2); cache: float [2]
 *                             buffer, persistent=False
 * with BatchNorm1d's weight, bias, running_mean, running_var and its int64
 * num_batches_tracked (0-d).
 *
 * Tied weights: TiedLM (tok_emb = nn.Embedding(4, 3), lm_head =
 * nn.Linear(3, 4, bias=False), lm_head.weight = tok_emb.weight) is written
 * once, DIR/cgrad_tied.safetensors; `read` loads PyTorch's files strictly:
 * its state_dict with both names and the head's name alone, with
 * cg_module_load_file and cg_torch_load_file, and refuses both names with
 * different values. Exit 0: equal; 1: a difference or an error. */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

typedef struct {
    cg_module *root;
    cg_linear *fc;
    cg_module *bn;
} net;

static bool buffer(cg_module *m, const char *name, cg_tensor *t, bool persistent)
{
    bool ok = cg_module_add_buffer(m, name, t, persistent) != NULL;
    cg_release(t);
    return ok;
}

static bool param(cg_module *m, const char *name, cg_tensor *t)
{
    bool ok = cg_module_add_param(m, name, t) != NULL;
    cg_release(t);
    return ok;
}

/* k: 0 for the values cgrad writes, 1 for what PyTorch writes back */
static bool net_new(net *n, int k)
{
    cg_rng rng = cg_rng_new(1);
    n->root = cg_module_new("Net");
    cg_tensor *mask = cg_zeros_dtype(CG_BOOL, CG_SHAPE(3));
    if (!mask || !buffer(n->root, "mask", mask, true))
        return false;
    cg_data_bool(mask)[0] = cg_data_bool(mask)[2] = k == 0;
    n->fc = cg_module_add_child(n->root, "fc", cg_linear_new(3, 2, true, &rng));
    n->bn = cg_module_add_child(n->root, "bn", cg_module_new("BatchNorm1d"));
    return n->fc && n->bn && buffer(n->root, "cache", cg_full(CG_SHAPE(2), 9), false) &&
           param(n->bn, "weight", cg_full(CG_SHAPE(2), 1.5f + k)) &&
           param(n->bn, "bias", cg_full(CG_SHAPE(2), -0.25f - k)) &&
           buffer(n->bn, "running_mean", cg_full(CG_SHAPE(2), 0.5f + k), true) &&
           buffer(n->bn, "running_var", cg_full(CG_SHAPE(2), 2.0f + k), true) &&
           buffer(n->bn, "num_batches_tracked", cg_full_dtype(CG_I64, 0, NULL, 7 + k), true);
}

/* TiedLM; k = 1: its weight plus 1 (what PyTorch writes back). NULL + error. */
static cg_module *tied_new(int k)
{
    cg_rng rng = cg_rng_new(5);
    cg_module *root = cg_module_new("TiedLM");
    cg_embed *e = cg_module_add_child(root, "tok_emb", cg_embed_new(4, 3, &rng));
    bool ok = e && cg_module_add_child(root, "lm_head", cg_linear_new(3, 4, false, &rng)) &&
              cg_module_tie(root, "lm_head.weight", "tok_emb.weight");
    for (int i = 0; ok && i < 12; i++)
        cg_data(e->weight)[i] += (float)k;
    if (!ok)
        cg_module_free(root);
    return ok ? root : NULL;
}

/* The tied files PyTorch wrote load strictly into TiedLM (and stay tied);
 * the one whose two names differ is refused. 0, or 1 + a message. */
static int read_tied(const char *dir)
{
    cg_module *want = tied_new(1);
    int bad = want ? 0 : 1;
    const char *files[] = {"torch_tied_both", "torch_tied_head", "torch_tied_bad"};
    for (int i = 0; !bad && i < 6; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, files[i % 3]);
        cg_module *m = tied_new(0);
        bool torch = i >= 3,
             ok = m && (torch ? cg_torch_load_file(m, path) : cg_module_load_file(m, path));
        cg_tensor *w = m ? cg_module_get_param(m, "tok_emb.weight") : NULL;
        if (i % 3 == 2) {
            bool named = !ok && strstr(cg_last_error(), "'tok_emb.weight' and 'lm_head.weight'");
            if (!named)
                bad = fprintf(stderr,
                              "check_buffers: %s loaded or was refused for another "
                              "reason: %s\n",
                              path, ok ? "(loaded)" : cg_last_error()) > 0;
        } else if (!ok || w != cg_module_get_param(m, "lm_head.weight") ||
                   memcmp(cg_data(w), cg_data(cg_module_get_param(want, "tok_emb.weight")),
                          12 * sizeof(float))) {
            bad = fprintf(stderr, "check_buffers: %s (%s): %s\n", path,
                          torch ? "cg_torch_load_file" : "cg_module_load_file",
                          ok ? "other values, or untied" : cg_last_error()) > 0;
        }
        cg_module_free(m);
    }
    if (!bad)
        printf("check_buffers: PyTorch's tied state dicts load strictly (both names, one)\n");
    cg_module_free(want);
    return bad;
}

static int fail(const char *what)
{
    fprintf(stderr, "check_buffers: %s: %s\n", what, cg_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "read")))
        return fprintf(stderr, "usage: check_buffers write|read DIR\n"), 2;
    char path[4096];
    net n;
    if (!net_new(&n, 0))
        return fail("building the module");
    int bad = 0;
    if (!strcmp(argv[1], "write")) {
        snprintf(path, sizeof path, "%s/cgrad_buffers.safetensors", argv[1 + 1]);
        bad = cg_module_save(n.root, path, 0, NULL) ? 0 : fail("save");
        cg_module *t = tied_new(0);
        snprintf(path, sizeof path, "%s/cgrad_tied.safetensors", argv[2]);
        bad = bad || !t || !cg_module_save(t, path, 0, NULL) ? 1 : 0;
        if (bad)
            fail("save (tied)");
        cg_module_free(t);
    } else {
        snprintf(path, sizeof path, "%s/torch_buffers.safetensors", argv[2]);
        net want;
        bad = net_new(&want, 1) ? 0 : fail("building the expected module");
        bad = bad || cg_module_load_file(n.root, path) ? bad : fail("load");
        cg_param_list a = {0}, b = {0};
        bad = bad || (cg_module_state_dict(n.root, &a) && cg_module_state_dict(want.root, &b) &&
                      a.n == b.n)
                  ? bad
                  : fail("state dict");
        for (int i = 0; !bad && i < a.n; i++) {
            const cg_tensor *x = a.items[i].tensor, *y = b.items[i].tensor;
            bool same = x->dtype == y->dtype && cg_same_shape(x, y) &&
                        !memcmp(cg_data_ptr(x), cg_data_ptr(y),
                                (size_t)cg_numel(x) * cg_dtype_size(x->dtype));
            if (!same && strcmp(a.items[i].name, "fc.weight") && strcmp(a.items[i].name, "fc.bias"))
                bad = fprintf(stderr, "check_buffers: '%s' differs\n", a.items[i].name) > 0;
        }
        printf("check_buffers: %d tensors loaded from PyTorch's state dict\n", a.n);
        cg_param_list_free(&a);
        cg_param_list_free(&b);
        cg_module_free(want.root);
        bad = bad || read_tied(argv[2]);
    }
    cg_module_free(n.root);
    return bad;
}
