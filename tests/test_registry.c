/* Tests of the module registry's newer parts (nn/module.h): what
 * cg_module_add_param refuses, buffers (PyTorch's register_buffer) and
 * weight tying (cg_module_tie). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/gradcheck.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/testutil.h"

static void assert_ok(const void *p)
{
    ck_assert_msg(p != NULL, "unexpected failure: %s", cg_last_error());
}

/* ------------------------------------------------- add_param validation */
START_TEST(test_add_param_refusals)
{
    cg_module *m = cg_module_new("Net");
    cg_tensor *bf = cg_zeros_dtype(CG_BF16, CG_SHAPE(2, 3));
    cg_tensor *ids = cg_zeros_dtype(CG_I64, CG_SHAPE(3));
    cg_tensor *base = cg_zeros(CG_SHAPE(2, 3));
    cg_tensor *tr = cg_transpose(base, 0, 1); /* a non-contiguous view */
    cg_tensor *row = cg_select(base, 0, 1);   /* a contiguous view at an offset: taken */
    CG_ASSERT_FAILS(cg_module_add_param(m, "w", bf), "module Net: parameter 'w' is bfloat16");
    CG_ASSERT_FAILS(cg_module_add_param(m, "ids", ids), "parameter 'ids' is int64");
    CG_ASSERT_FAILS(cg_module_add_param(m, "t", tr), "parameter 't' is not contiguous");
    ck_assert(!bf->requires_grad && !tr->requires_grad && !base->requires_grad);
    ck_assert_int_eq(m->n_params, 0);
    assert_ok(cg_module_add_param(m, "row", row));
    ck_assert_int_eq(m->n_params, 1);
    /* a parameter built by a module is one the optimizer takes */
    cg_optim *opt = cg_sgd_from_module(m, 0.1);
    assert_ok(opt);
    cg_optim_free(opt);
    cg_release_all(5, bf, ids, base, tr, row);
    cg_module_free(m);
}
END_TEST

/* ------------------------------------------------------------- buffers */
/* A module with a parameter and three buffers of three dtypes, one of them
 * not persistent:  w [2, 3] f32 param; mean [3] f32; steps [] i64;
 * mask [2] bool (persistent as asked). */
static cg_module *buffered(const char *type, bool mask_persistent, float seed)
{
    cg_module *m = cg_module_new(type);
    cg_tensor *w = cg_full(CG_SHAPE(2, 3), seed);
    cg_tensor *mean = cg_full(CG_SHAPE(3), seed + 1);
    cg_tensor *steps = cg_full_dtype(CG_I64, CG_SHAPE(1), seed * 10);
    cg_tensor *mask = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2));
    cg_data_bool(mask)[1] = seed > 0;
    assert_ok(cg_module_add_param(m, "w", w));
    assert_ok(cg_module_add_buffer(m, "mean", mean, true));
    assert_ok(cg_module_add_buffer(m, "steps", steps, true));
    assert_ok(cg_module_add_buffer(m, "mask", mask, mask_persistent));
    cg_release_all(4, w, mean, steps, mask);
    return m;
}

static void assert_list(const cg_param_list *l, const char *const *names, int n)
{
    ck_assert_int_eq(l->n, n);
    for (int i = 0; i < n; i++)
        ck_assert_str_eq(l->items[i].name, names[i]);
}

START_TEST(test_buffer_registration)
{
    cg_module *m = buffered("Stats", true, 1);
    cg_tensor *t = cg_zeros(CG_SHAPE(2)), *g = cg_zeros(CG_SHAPE(2));
    cg_requires_grad(g, true);
    cg_tensor *base = cg_zeros(CG_SHAPE(2, 3)), *tr = cg_transpose(base, 0, 1);
    /* one namespace for parameters, buffers and children */
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "mean", t, true), "'mean' is already a buffer");
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "w", t, true), "'w' is already a parameter");
    CG_ASSERT_FAILS(cg_module_add_param(m, "steps", t), "'steps' is already a buffer");
    assert_ok(cg_module_add_child(m, "sub", cg_module_new("Sub")));
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "sub", t, true), "already a child");
    CG_ASSERT_FAILS(cg_module_add_child(m, "mask", cg_module_new("X")),
                    "'mask' is already a buffer");
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "a.b", t, true), "'a.b'");
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "", t, true), "non-empty");
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "g", g, true), "buffer 'g' requires grad");
    CG_ASSERT_FAILS(cg_module_add_buffer(m, "tr", tr, true), "buffer 'tr' is not contiguous");
    ck_assert_ptr_null(cg_module_add_buffer(NULL, "x", t, true));
    ck_assert_ptr_null(cg_module_add_buffer(m, "x", NULL, true));
    ck_assert_int_eq(m->n_buffers, 3);
    /* not parameters: no gradient, not counted, not in an optimizer */
    ck_assert_int_eq(cg_module_num_param_tensors(m), 1);
    ck_assert_int_eq(cg_module_num_params(m), 6);
    cg_module_requires_grad(m, true);
    ck_assert(!cg_module_get_buffer(m, "mean")->requires_grad);
    cg_optim *opt = cg_adamw_from_module(m, 1e-3);
    assert_ok(opt);
    ck_assert_int_eq(cg_optim_count(opt), 1);
    cg_optim_free(opt);
    /* lookups */
    assert_ok(cg_module_get_buffer(m, "steps"));
    ck_assert_int_eq(cg_module_get_buffer(m, "steps")->dtype, CG_I64);
    CG_ASSERT_FAILS(cg_module_get_buffer(m, "w"), "no buffer named 'w'");
    CG_ASSERT_FAILS(cg_module_get_param(m, "mean"), "no parameter named 'mean'");
    CG_ASSERT_FAILS(cg_module_get_buffer(m, "sub.mean"), "no buffer named 'sub.mean'");
    cg_release_all(4, t, g, tr, base);
    cg_module_free(m);
}
END_TEST

/* named_buffers() and state_dict() order of
 *   class Leaf(nn.Module): p [param], b1, b2 (b2 not persistent)
 *   root: own param "p", buffer "rb"; children "a" = Leaf, "b" = the same
 *   Leaf again (shared), "c" = Leaf
 * PyTorch: named_buffers(): rb, a.b1, a.b2, c.b1, c.b2
 *          state_dict(): p, rb, a.p, a.b1, b.p, b.b1, c.p, c.b1 (it repeats
 *          the shared child; cgrad lists it once). */
static cg_module *leaf_module(void)
{
    cg_module *l = cg_module_new("Leaf");
    cg_tensor *p = cg_zeros(CG_SHAPE(1)), *b1 = cg_zeros(CG_SHAPE(1)), *b2 = cg_zeros(CG_SHAPE(1));
    assert_ok(cg_module_add_buffer(l, "b1", b1, true));
    assert_ok(cg_module_add_param(l, "p", p)); /* a parameter after a buffer: still first */
    assert_ok(cg_module_add_buffer(l, "b2", b2, false));
    cg_release_all(3, p, b1, b2);
    return l;
}

START_TEST(test_buffer_order_and_sharing)
{
    cg_module *root = cg_module_new("Root");
    cg_tensor *p = cg_zeros(CG_SHAPE(1)), *rb = cg_zeros(CG_SHAPE(1));
    assert_ok(cg_module_add_buffer(root, "rb", rb, true));
    assert_ok(cg_module_add_param(root, "p", p));
    cg_module *a = cg_module_add_child(root, "a", leaf_module());
    assert_ok(a);
    assert_ok(cg_module_add_child(root, "b", a));
    assert_ok(cg_module_add_child(root, "c", leaf_module()));
    cg_param_list l = {0};
    ck_assert(cg_module_buffers(root, &l));
    assert_list(&l, (const char *const[]){"rb", "a.b1", "a.b2", "c.b1", "c.b2"}, 5);
    ck_assert(l.items[0].is_buffer);
    cg_param_list_free(&l);
    ck_assert(cg_module_state_dict(root, &l));
    assert_list(&l, (const char *const[]){"p", "rb", "a.p", "a.b1", "c.p", "c.b1"}, 6);
    ck_assert(!l.items[0].is_buffer && l.items[1].is_buffer && !l.items[2].is_buffer);
    cg_param_list_free(&l);
    ck_assert(cg_module_params(root, &l));
    assert_list(&l, (const char *const[]){"p", "a.p", "c.p"}, 3);
    cg_param_list_free(&l);
    ck_assert_ptr_eq(cg_module_get_buffer(root, "b.b1"), cg_module_get_buffer(root, "a.b1"));
    ck_assert(!cg_module_buffers(NULL, &l) && !cg_module_state_dict(root, NULL));
    cg_release_all(2, p, rb);
    cg_module_free(root);
}
END_TEST

static const char *tmp_file(const char *tag)
{
    char name[256];
    snprintf(name, sizeof name, "cg_test_registry_%s.safetensors", tag);
    return cg_test_path(name);
}

START_TEST(test_buffer_save_load)
{
    cg_module *a = cg_module_new("Top"), *b = cg_module_new("Top");
    assert_ok(cg_module_add_child(a, "s", buffered("Stats", false, 2)));
    assert_ok(cg_module_add_child(b, "s", buffered("Stats", false, -1)));
    const char *path = tmp_file("buf");
    ck_assert(cg_module_save(a, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    assert_ok(f);
    /* persistent buffers in their own dtype; the non-persistent one not written */
    ck_assert_int_eq(cg_st_count(f), 3);
    cg_st_dtype dt;
    int nd;
    int64_t shape[CG_MAX_DIMS];
    ck_assert(cg_st_info(f, "s.steps", &dt, &nd, shape) && dt == CG_ST_I64);
    ck_assert(cg_st_info(f, "s.mean", &dt, &nd, shape) && dt == CG_ST_F32);
    ck_assert(!cg_st_has(f, "s.mask"));
    ck_assert(cg_module_load(b, f, NULL));
    ck_assert_float_eq(cg_data(cg_module_get_buffer(b, "s.mean"))[2], 3.0f);
    ck_assert_int_eq(cg_data_i64(cg_module_get_buffer(b, "s.steps"))[0], 20);
    ck_assert_int_eq(cg_module_get_buffer(b, "s.steps")->dtype, CG_I64);
    ck_assert(!cg_data_bool(cg_module_get_buffer(b, "s.mask"))[1]); /* not loaded */
    ck_assert_float_eq(cg_data(cg_module_get_param(b, "s.w"))[5], 2.0f);
    cg_st_close(f);

    /* a persistent bool mask, and a bf16 save: the float buffer follows,
     * the integer and bool ones keep their dtypes */
    cg_module *c = buffered("Stats", true, 3), *d = buffered("Stats", true, -3);
    cg_data(cg_module_get_buffer(c, "mean"))[0] = 1.0f / 3.0f;
    ck_assert(cg_module_save_as(c, path, CG_BF16, 0, NULL));
    f = cg_st_open(path);
    ck_assert(cg_st_info(f, "mean", &dt, &nd, shape) && dt == CG_ST_BF16);
    ck_assert(cg_st_info(f, "steps", &dt, &nd, shape) && dt == CG_ST_I64);
    ck_assert(cg_st_info(f, "mask", &dt, &nd, shape) && dt == CG_ST_BOOL);
    ck_assert(cg_module_load(d, f, NULL));
    cg_st_close(f);
    ck_assert_int_eq(cg_module_get_buffer(d, "mean")->dtype, CG_F32);
    ck_assert_float_eq(cg_data(cg_module_get_buffer(d, "mean"))[0], 0.333984375f); /* bf16's */
    ck_assert_int_eq(cg_data_i64(cg_module_get_buffer(d, "steps"))[0], 30);
    ck_assert(cg_data_bool(cg_module_get_buffer(d, "mask"))[1]);

    /* a bf16 buffer saved as it is, loaded as it is */
    cg_module *e = cg_module_new("E"), *e2 = cg_module_new("E");
    cg_tensor *h = cg_full_dtype(CG_BF16, CG_SHAPE(2), 1.5f),
              *h2 = cg_zeros_dtype(CG_BF16, CG_SHAPE(2));
    assert_ok(cg_module_add_buffer(e, "h", h, true));
    assert_ok(cg_module_add_buffer(e2, "h", h2, true));
    ck_assert(cg_module_save(e, path, 0, NULL));
    f = cg_st_open(path);
    ck_assert(cg_st_info(f, "h", &dt, &nd, shape) && dt == CG_ST_BF16);
    ck_assert(cg_module_load(e2, f, NULL));
    cg_st_close(f);
    ck_assert_float_eq(cg_get(h2, (int64_t[]){1}), 1.5f);
    cg_release_all(2, h, h2);
    cg_module_free(e);
    cg_module_free(e2);
    cg_module_free(a);
    cg_module_free(b);
    cg_module_free(c);
    cg_module_free(d);
    unlink(path);
}
END_TEST

START_TEST(test_buffer_load_refusals)
{
    const char *path = tmp_file("refuse"), *other = tmp_file("other");
    cg_module *m = buffered("Stats", false, 1);
    ck_assert(cg_module_save(m, path, 0, NULL));
    /* a module with one more buffer: strict load names it */
    cg_module *more = buffered("Stats", false, 1);
    cg_tensor *z = cg_zeros(CG_SHAPE(1));
    assert_ok(cg_module_add_buffer(more, "var", z, true));
    cg_st_file *f = cg_st_open(path);
    CG_ASSERT_FAILS(cg_module_load(more, f, NULL) ? (void *)1 : NULL,
                    "1 parameter or buffer missing from the file: 'var'");
    cg_load_keys k = {0};
    ck_assert(cg_module_load_ex(more, f, &(cg_load_options){.non_strict = true, .keys = &k}));
    ck_assert_int_eq(k.n_missing, 1);
    ck_assert_str_eq(k.missing[0], "var");
    cg_load_keys_free(&k);
    cg_st_close(f);
    /* the other way: an unexpected buffer in the file, also a
     * non-persistent one (PyTorch's strict load refuses it too) */
    ck_assert(cg_module_save(more, other, 0, NULL));
    f = cg_st_open(other);
    CG_ASSERT_FAILS(cg_module_load(m, f, NULL) ? (void *)1 : NULL,
                    "1 unexpected tensor in the file: 'var'");
    ck_assert(cg_module_load_ex(
        m, f, &(cg_load_options){.n_ignore = 1, .ignore = (const char *const[]){"var"}}));
    cg_st_close(f);
    cg_module *pm = buffered("Stats", true, 1);
    ck_assert(cg_module_save(pm, other, 0, NULL));
    f = cg_st_open(other);
    CG_ASSERT_FAILS(cg_module_load(m, f, NULL) ? (void *)1 : NULL,
                    "unexpected tensor in the file: 'mask'");
    cg_st_close(f);
    /* a buffer of another dtype or shape in the file: refused, nothing changed */
    cg_st_writer *w = cg_st_writer_new();
    cg_tensor *wv = cg_full(CG_SHAPE(2, 3), 7), *mean = cg_full(CG_SHAPE(3), 7);
    cg_tensor *fsteps = cg_full(CG_SHAPE(1), 7), *short_mean = cg_full(CG_SHAPE(2), 7);
    ck_assert(cg_st_add(w, "w", wv) && cg_st_add(w, "mean", mean) && cg_st_add(w, "steps", fsteps));
    ck_assert(cg_st_writer_save(w, other));
    cg_st_writer_free(w);
    f = cg_st_open(other);
    CG_ASSERT_FAILS(cg_module_load(m, f, NULL) ? (void *)1 : NULL,
                    "buffer 'steps' has dtype F32 in the file but the model's is int64");
    cg_st_close(f);
    ck_assert_float_eq(cg_data(cg_module_get_param(m, "w"))[0], 1.0f);
    w = cg_st_writer_new();
    cg_tensor *isteps = cg_full_dtype(CG_I64, CG_SHAPE(1), 7);
    ck_assert(cg_st_add(w, "w", wv) && cg_st_add(w, "mean", short_mean) &&
              cg_st_add(w, "steps", isteps));
    ck_assert(cg_st_writer_save(w, other));
    cg_st_writer_free(w);
    f = cg_st_open(other);
    CG_ASSERT_FAILS(cg_module_load(m, f, NULL) ? (void *)1 : NULL, "'mean' has shape [2]");
    cg_st_close(f);
    ck_assert_float_eq(cg_data(cg_module_get_param(m, "w"))[0], 1.0f);
    ck_assert_int_eq(cg_data_i64(cg_module_get_buffer(m, "steps"))[0], 10);
    /* an additive mask of -inf is a buffer's business: loaded */
    cg_fill_(cg_module_get_buffer(pm, "mean"), -INFINITY);
    cg_module *pm2 = buffered("Stats", true, 0);
    ck_assert(cg_module_save(pm, other, 0, NULL));
    f = cg_st_open(other);
    ck_assert(cg_module_load(pm2, f, NULL));
    cg_st_close(f);
    ck_assert(isinf(cg_data(cg_module_get_buffer(pm2, "mean"))[1]));
    cg_release_all(7, z, wv, mean, fsteps, short_mean, isteps, (cg_tensor *)NULL);
    cg_module_free(m);
    cg_module_free(more);
    cg_module_free(pm);
    cg_module_free(pm2);
    unlink(path);
    unlink(other);
}
END_TEST

/* A bool buffer holding a byte other than 0 or 1 is refused before
 * anything is copied: the parameter and the buffers loaded before it
 * keep their values (the check used to come at the copy, after them). */
START_TEST(test_buffer_bad_bool_changes_nothing)
{
    const char *path = tmp_file("badbool");
    cg_module *m = buffered("Stats", true, 1), *d = buffered("Stats", true, 5);
    ck_assert(cg_module_save(m, path, 0, NULL));
    FILE *fp = fopen(path, "r+b"); /* "mask" is the last tensor: [0, 1] */
    ck_assert_ptr_nonnull(fp);
    ck_assert(fseek(fp, -1, SEEK_END) == 0 && fputc(2, fp) == 2 && fclose(fp) == 0);
    cg_st_file *f = cg_st_open(path);
    assert_ok(f);
    CG_ASSERT_FAILS(cg_module_load(d, f, NULL) ? (void *)1 : NULL,
                    "tensor 'mask' (BOOL) holds byte 2 at element 1");
    cg_st_close(f);
    ck_assert_float_eq(cg_data(cg_module_get_param(d, "w"))[0], 5.0f);
    ck_assert_float_eq(cg_data(cg_module_get_buffer(d, "mean"))[0], 6.0f);
    ck_assert_int_eq(cg_data_i64(cg_module_get_buffer(d, "steps"))[0], 50);
    cg_module_free(m);
    cg_module_free(d);
    unlink(path);
}
END_TEST

/* PyTorch's names (nn/torch_names.h) carry a model's buffers: an encoder
 * layer's ln1 is norm1 there, a buffer beside it keeps its name. */
START_TEST(test_buffer_torch_names)
{
    cg_rng rng = cg_rng_new(2);
    cg_tf_config c = {.d = 4, .H = 2, .d_ff = 6, .norm = CG_NORM_LAYERNORM, .act = CG_ACT_RELU};
    cg_module *a = cg_module_new("Model"), *b = cg_module_new("Model");
    cg_enc_stack *ea = cg_module_add_child(a, "enc", cg_enc_stack_new(1, &c, &rng));
    cg_enc_stack *eb = cg_module_add_child(b, "enc", cg_enc_stack_new(1, &c, &rng));
    assert_ok(ea);
    assert_ok(eb);
    cg_tensor *sa = cg_full_dtype(CG_I64, CG_SHAPE(1), 41),
              *sb = cg_zeros_dtype(CG_I64, CG_SHAPE(1));
    cg_tensor *ma = cg_full(CG_SHAPE(4), 0.5f), *mb = cg_zeros(CG_SHAPE(4));
    assert_ok(cg_module_add_buffer(a, "steps", sa, true));
    assert_ok(cg_module_add_buffer(b, "steps", sb, true));
    assert_ok(cg_module_add_buffer(CG_MODULE(ea->layers[0]->ln1), "mean", ma, true));
    assert_ok(cg_module_add_buffer(CG_MODULE(eb->layers[0]->ln1), "mean", mb, true));
    const char *path = tmp_file("torch");
    ck_assert(cg_torch_save(a, path));
    cg_st_file *f = cg_st_open(path);
    ck_assert(cg_st_has(f, "steps") && cg_st_has(f, "enc.layers.0.norm1.mean"));
    cg_st_close(f);
    ck_assert_msg(cg_torch_load_file(b, path), "%s", cg_last_error());
    ck_assert_int_eq(cg_data_i64(sb)[0], 41);
    ck_assert_float_eq(cg_data(mb)[3], 0.5f);
    ck_assert_float_eq(cg_data(eb->layers[0]->self_attn->q_proj->weight)[1],
                       cg_data(ea->layers[0]->self_attn->q_proj->weight)[1]);
    unlink(path);
    cg_release_all(4, sa, sb, ma, mb);
    cg_module_free(a);
    cg_module_free(b);
}
END_TEST

/* cg_posenc's table is PyTorch's register_buffer('pe', pe, persistent=False):
 * listed by cg_module_buffers, never saved nor expected by a load, and the
 * table the forward reads. */
START_TEST(test_posenc_buffer)
{
    cg_module *root = cg_module_new("Model");
    cg_posenc *p = cg_module_add_child(root, "pos", cg_posenc_new(6, 4));
    assert_ok(p);
    cg_param_list l = {0};
    ck_assert(cg_module_buffers(root, &l));
    assert_list(&l, (const char *const[]){"pos.pe"}, 1);
    ck_assert_ptr_eq(l.items[0].tensor, p->pe);
    cg_param_list_free(&l);
    ck_assert_ptr_eq(cg_module_get_buffer(root, "pos.pe"), p->pe);
    ck_assert(!p->pe->requires_grad);
    ck_assert(cg_module_state_dict(root, &l));
    ck_assert_int_eq(l.n, 0);
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_param_tensors(root), 0);
    /* the buffer is the table: a write to it is what the forward adds */
    cg_data(p->pe)[5] = 100.0f;
    cg_tensor_modified(p->pe);
    cg_tensor *x = cg_zeros(CG_SHAPE(1, 2, 4)), *y = cg_posenc_forward(p, x);
    assert_ok(y);
    ck_assert_float_eq(cg_data(y)[5], 100.0f);
    /* saved: no tensor; a file with a 'pos.pe' is unexpected, as in PyTorch */
    const char *path = tmp_file("posenc");
    ck_assert(cg_module_save(root, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    ck_assert_int_eq(cg_st_count(f), 0);
    ck_assert(cg_module_load(root, f, NULL));
    cg_st_close(f);
    cg_st_writer *w = cg_st_writer_new();
    ck_assert(cg_st_add(w, "pos.pe", p->pe) && cg_st_writer_save(w, path));
    cg_st_writer_free(w);
    f = cg_st_open(path);
    CG_ASSERT_FAILS(cg_module_load(root, f, NULL) ? (void *)1 : NULL,
                    "1 unexpected tensor in the file: 'pos.pe'");
    cg_st_close(f);
    unlink(path);
    cg_release_all(2, x, y);
    cg_module_free(root);
}
END_TEST

/* --------------------------------------------------------- weight tying */
enum { V = 5, D = 3, T = 4 };

/* model.tok_emb = nn.Embedding(V, D); model.lm_head = nn.Linear(D, V,
 * bias=False); model.lm_head.weight = model.tok_emb.weight (tie false:
 * left untied, each with the same values). */
typedef struct {
    cg_module *root;
    cg_embed *emb;
    cg_linear *head;
} tied_lm;

static tied_lm tied_lm_new(bool tie)
{
    cg_rng rng = cg_rng_new(7);
    tied_lm m = {.root = cg_module_new("LM")};
    m.emb = cg_module_add_child(m.root, "tok_emb", cg_embed_new(V, D, &rng));
    m.head = cg_module_add_child(m.root, "lm_head", cg_linear_new(D, V, false, &rng));
    assert_ok(m.head);
    if (tie)
        ck_assert_msg(cg_module_tie(m.root, "lm_head.weight", "tok_emb.weight"), "%s",
                      cg_last_error());
    else
        ck_assert(cg_k_copy_(m.head->weight, m.emb->weight));
    return m;
}

static const int64_t ids_data[T] = {1, 4, 0, 1};

/* logits = lm_head(tok_emb(ids)) [T, V] (inputs are the weights, read by
 * the modules themselves) */
static cg_tensor *tied_forward(void *ctx, cg_tensor *const *in)
{
    (void)in;
    tied_lm *m = ctx;
    cg_tensor *ids = cg_test_ids(T, ids_data);
    cg_tensor *h = cg_embed_forward(m->emb, ids);
    cg_tensor *y = cg_linear_forward(m->head, h);
    cg_release(h);
    return y;
}

static cg_tensor *sum_loss(tied_lm *m)
{
    cg_tensor *y = tied_forward(m, NULL), *w = cg_arange(0, V * T, 1);
    cg_tensor *w2 = cg_reshape(w, CG_SHAPE(T, V)), *p = cg_mul(y, w2), *l = cg_sum_all(p);
    cg_release_all(4, y, w, w2, p);
    return l;
}

START_TEST(test_tie_linear_embedding)
{
    tied_lm m = tied_lm_new(true);
    ck_assert_ptr_eq(m.head->weight, m.emb->weight);
    ck_assert_ptr_eq(cg_module_get_param(m.root, "lm_head.weight"), m.emb->weight);
    cg_param_list l = {0};
    ck_assert(cg_module_params(m.root, &l));
    assert_list(&l, (const char *const[]){"tok_emb.weight"}, 1);
    cg_param_list_free(&l);
    ck_assert_int_eq(cg_module_num_params(m.root), V * D);
    ck_assert(cg_module_tie(m.root, "lm_head.weight", "tok_emb.weight")); /* again: nothing */
    ck_assert(cg_module_tie(m.root, "tok_emb.weight", "tok_emb.weight"));

    /* gradcheck through both uses of the one tensor */
    cg_gradcheck_report rep;
    cg_tensor *in[] = {m.emb->weight};
    ck_assert_msg(cg_gradcheck(tied_forward, &m, 1, in, NULL, &rep), "%s", rep.message);

    /* its gradient is the sum of the two uses' (untied, same values) */
    tied_lm u = tied_lm_new(false);
    cg_tensor *lt = sum_loss(&m), *lu = sum_loss(&u);
    ck_assert(cg_backward(lt, NULL, false) && cg_backward(lu, NULL, false));
    const float *gt = cg_data(cg_grad(m.emb->weight)), *ge = cg_data(cg_grad(u.emb->weight)),
                *gh = cg_data(cg_grad(u.head->weight));
    for (int i = 0; i < V * D; i++)
        ck_assert_float_eq_tol(gt[i], ge[i] + gh[i], 1e-4f * (1 + fabsf(gt[i])));

    /* one optimizer slot, updated once: w - lr * g */
    cg_tensor *before = cg_k_clone(m.emb->weight);
    cg_optim *opt = cg_sgd_from_module(m.root, 0.5);
    assert_ok(opt);
    ck_assert_int_eq(cg_optim_count(opt), 1);
    ck_assert(cg_optim_step(opt));
    for (int i = 0; i < V * D; i++)
        ck_assert_float_eq_tol(cg_data(m.head->weight)[i], cg_data(before)[i] - 0.5f * gt[i],
                               1e-6f);
    cg_optim_free(opt);

    /* save/load: one key; a fresh tied model loads it and stays tied */
    const char *path = tmp_file("tie");
    ck_assert(cg_module_save(m.root, path, 0, NULL));
    cg_st_file *f = cg_st_open(path);
    ck_assert_int_eq(cg_st_count(f), 1);
    ck_assert(cg_st_has(f, "tok_emb.weight"));
    tied_lm n = tied_lm_new(true);
    ck_assert(cg_module_load(n.root, f, NULL));
    cg_st_close(f);
    ck_assert_ptr_eq(n.head->weight, n.emb->weight);
    ck_assert(!memcmp(cg_data(n.head->weight), cg_data(m.emb->weight), sizeof(float) * V * D));
    unlink(path);
    cg_release_all(3, lt, lu, before);
    cg_module_free(m.root);
    cg_module_free(u.root);
    cg_module_free(n.root);
}
END_TEST

/* Write the named tensors to path with our own writer (n pairs). */
static void write_file(const char *path, int n, const char *const *names, cg_tensor *const *ts)
{
    cg_st_writer *w = cg_st_writer_new();
    for (int i = 0; i < n; i++)
        ck_assert(cg_st_add(w, names[i], ts[i]));
    ck_assert(cg_st_writer_save(w, path));
    cg_st_writer_free(w);
}

/* PyTorch's state_dict() of a tied model holds both names (torch.save and
 * save_file of it write both; safetensors' save_model one of them): a
 * strict load takes the file with both, or with either one, into the tied
 * tensor once; both present must be equal. A shared module's names too. */
START_TEST(test_tie_load_aliases)
{
    const char *path = tmp_file("alias");
    tied_lm m = tied_lm_new(true), n = tied_lm_new(true);
    cg_tensor *w = cg_k_clone(m.emb->weight), *w2 = cg_k_clone(m.emb->weight);
    cg_data(w)[4] = 0.5f;
    cg_data(w2)[4] = 0.5f;
    const char *both[] = {"tok_emb.weight", "lm_head.weight"};
    write_file(path, 2, both, (cg_tensor *const[]){w, w2});
    cg_st_file *f = cg_st_open(path);
    ck_assert_msg(cg_module_load(n.root, f, NULL), "%s", cg_last_error());
    cg_st_close(f);
    ck_assert_float_eq(cg_data(n.emb->weight)[4], 0.5f);
    ck_assert_ptr_eq(n.head->weight, n.emb->weight);
    cg_data(n.emb->weight)[4] = 0;
    ck_assert_msg(cg_torch_load_file(n.root, path), "%s", cg_last_error()); /* PyTorch's names */
    ck_assert_float_eq(cg_data(n.emb->weight)[4], 0.5f);
    /* either name alone */
    for (int k = 0; k < 2; k++) {
        cg_data(w)[4] = 1.5f + (float)k;
        write_file(path, 1, both + k, &w);
        f = cg_st_open(path);
        ck_assert_msg(cg_module_load(n.root, f, NULL), "%s", cg_last_error());
        cg_st_close(f);
        ck_assert_float_eq(cg_data(n.emb->weight)[4], 1.5f + (float)k);
    }
    /* both, with other values: refused naming both, nothing changed */
    cg_data(w)[4] = 7.0f;
    write_file(path, 2, both, (cg_tensor *const[]){w, w2});
    f = cg_st_open(path);
    CG_ASSERT_FAILS(cg_module_load(n.root, f, NULL) ? (void *)1 : NULL,
                    "'tok_emb.weight' and 'lm_head.weight' are one tied tensor but differ in the "
                    "file");
    cg_st_close(f);
    ck_assert_float_eq(cg_data(n.emb->weight)[4], 2.5f);
    /* beside an unexpected tensor and with a prefix: only that one is named */
    const char *pre[] = {"model.lm_head.weight", "model.tok_emb.weight", "model.extra"};
    write_file(path, 3, pre, (cg_tensor *const[]){w2, w2, w2});
    f = cg_st_open(path);
    char load_path[PATH_MAX + 8];
    snprintf(load_path, sizeof load_path, "load %s", path);
    CG_ASSERT_FAILS(cg_module_load(n.root, f, "model.") ? (void *)1 : NULL, load_path);
    ck_assert_msg(!strstr(cg_last_error(), "weight"), "%s", cg_last_error());
    ck_assert(strstr(cg_last_error(), "1 unexpected tensor in the file: 'model.extra'"));
    cg_load_options o = {
        .prefix = "model.", .n_ignore = 1, .ignore = (const char *const[]){"model.extra"}};
    ck_assert_msg(cg_module_load_ex(n.root, f, &o), "%s", cg_last_error());
    cg_st_close(f);
    ck_assert_float_eq(cg_data(n.emb->weight)[4], 0.5f);
    /* neither name: missing once, under the first */
    const char *none[] = {"other"};
    write_file(path, 1, none, &w);
    f = cg_st_open(path);
    CG_ASSERT_FAILS(cg_module_load(n.root, f, NULL) ? (void *)1 : NULL,
                    "1 parameter missing from the file: 'tok_emb.weight'; 1 unexpected");
    cg_load_keys k = {0};
    ck_assert(cg_module_load_ex(n.root, f, &(cg_load_options){.non_strict = true, .keys = &k}));
    ck_assert_int_eq(k.n_missing, 1);
    ck_assert_str_eq(k.missing[0], "tok_emb.weight");
    cg_load_keys_free(&k);
    cg_st_close(f);
    /* saving stays one entry */
    ck_assert(cg_module_save(n.root, path, 0, NULL));
    f = cg_st_open(path);
    ck_assert_int_eq(cg_st_count(f), 1);
    cg_st_close(f);

    /* a shared module's parameters and buffers under both of its names */
    cg_module *root = cg_module_new("Root");
    cg_module *a = cg_module_add_child(root, "a", leaf_module());
    assert_ok(cg_module_add_child(root, "b", a));
    cg_tensor *one = cg_full(CG_SHAPE(1), 3.0f);
    const char *shared[] = {"a.p", "a.b1", "b.p", "b.b1"};
    write_file(path, 4, shared, (cg_tensor *const[]){one, one, one, one});
    f = cg_st_open(path);
    ck_assert_msg(cg_module_load(root, f, NULL), "%s", cg_last_error());
    cg_st_close(f);
    ck_assert_float_eq(cg_data(cg_module_get_param(root, "b.p"))[0], 3.0f);
    ck_assert_float_eq(cg_data(cg_module_get_buffer(root, "b.b1"))[0], 3.0f);
    write_file(path, 2, shared + 2, (cg_tensor *const[]){w2, w2}); /* wrong shape [V, D] */
    f = cg_st_open(path);
    CG_ASSERT_FAILS(cg_module_load(root, f, NULL) ? (void *)1 : NULL, "'b.p' has shape [5, 3]");
    cg_st_close(f);
    unlink(path);
    cg_release_all(3, w, w2, one);
    cg_module_free(root);
    cg_module_free(m.root);
    cg_module_free(n.root);
}
END_TEST

START_TEST(test_tie_refusals)
{
    cg_rng rng = cg_rng_new(1);
    cg_module *root = cg_module_new("Net");
    cg_embed *e = cg_module_add_child(root, "emb", cg_embed_new(V, D, &rng));
    cg_linear *wide = cg_module_add_child(root, "wide", cg_linear_new(D, V + 1, true, &rng));
    cg_norm *ln = cg_module_add_child(root, "ln", cg_layernorm_new(D));
    cg_module *own = cg_module_add_child(root, "own", cg_module_new("Own"));
    cg_tensor *w = cg_zeros(CG_SHAPE(V, D));
    assert_ok(cg_module_add_param(own, "w", w)); /* registered without its field */
    cg_tensor *old = wide->weight;
    CG_ASSERT_FAILS(cg_module_tie(root, "wide.weight", "emb.weight") ? (void *)1 : NULL,
                    "cannot tie 'wide.weight' ([6, 3] float32) to 'emb.weight' ([5, 3] float32)");
    CG_ASSERT_FAILS(cg_module_tie(root, "wide.bias", "ln.weight") ? (void *)1 : NULL,
                    "'wide.bias' ([6] float32) to 'ln.weight' ([3] float32)");
    CG_ASSERT_FAILS(cg_module_tie(root, "own.w", "emb.weight") ? (void *)1 : NULL,
                    "cannot tie 'own.w': its module (Own) registered it without the field");
    CG_ASSERT_FAILS(cg_module_tie(root, "emb.bias", "emb.weight") ? (void *)1 : NULL,
                    "no parameter named 'emb.bias'");
    CG_ASSERT_FAILS(cg_module_tie(root, "emb.weight", "nope.weight") ? (void *)1 : NULL,
                    "no parameter named 'nope.weight'");
    CG_ASSERT_FAILS(cg_module_tie(root, "x.weight", "emb.weight") ? (void *)1 : NULL, "x.weight");
    ck_assert(!cg_module_tie(NULL, "a", "b") && !cg_module_tie(root, NULL, "b"));
    ck_assert_ptr_eq(wide->weight, old);
    ck_assert_ptr_eq(cg_module_get_param(root, "own.w"), w);
    /* the other way round works: the field-less parameter as the source */
    ck_assert(cg_module_tie(root, "emb.weight", "own.w"));
    ck_assert_ptr_eq(e->weight, w);
    cg_tensor *bias = ln->bias, *z = cg_zeros(CG_SHAPE(D)); /* a field changed behind it */
    ln->bias = z;
    CG_ASSERT_FAILS(cg_module_tie(root, "ln.bias", "ln.weight") ? (void *)1 : NULL,
                    "its module (LayerNorm) changed it behind the registry in the field");
    ln->bias = bias;
    cg_release(z);
    /* norms' weights and biases tie too */
    ck_assert(cg_module_tie(root, "ln.bias", "ln.weight"));
    ck_assert_ptr_eq(ln->bias, ln->weight);
    ck_assert_int_eq(cg_module_num_param_tensors(root),
                     4); /* emb.weight (own.w), wide.*, ln.weight */
    cg_release(w);
    cg_module_free(root);
}
END_TEST

/* Every parameter of every nn module is registered with the field its
 * forward reads, so every one can be tied. */
static void assert_fields(const cg_module *m)
{
    for (int i = 0; i < m->n_params; i++) {
        ck_assert_msg(m->params[i].field, "%s.%s has no field", m->type, m->params[i].name);
        ck_assert_ptr_eq(*m->params[i].field, m->params[i].tensor);
    }
    for (int i = 0; i < m->n_children; i++)
        assert_fields(m->children[i].module);
}

START_TEST(test_tie_every_nn_param)
{
    cg_rng rng = cg_rng_new(3);
    cg_tf_config c = {.d = 6,
                      .H = 2,
                      .d_ff = 5,
                      .norm = CG_NORM_LAYERNORM,
                      .act = CG_ACT_GELU,
                      .norm_first = true};
    cg_module *root = cg_module_new("All");
    assert_ok(cg_module_add_child(root, "enc", cg_enc_stack_new(1, &c, &rng)));
    assert_ok(cg_module_add_child(root, "dec", cg_dec_stack_new(1, &c, &rng)));
    assert_ok(cg_module_add_child(root, "rms", cg_rmsnorm_new(6)));
    assert_ok(cg_module_add_child(root, "emb", cg_embed_new(4, 6, &rng)));
    assert_ok(
        cg_module_add_child(root, "mlp", cg_mlp(3, (const int64_t[]){6, 4, 6}, CG_ACT_RELU, &rng)));
    cg_linear *l = cg_module_add_child(root, "lin", cg_linear_new(6, 6, true, &rng));
    assert_ok(cg_lora_attach(l, 2, 4.0f, 0.0f, &rng));
    assert_fields(root);
    /* e.g. a decoder's cross-attention output projection tied to an encoder's */
    ck_assert(cg_module_tie(root, "dec.layers.0.cross_attn.o_proj.weight",
                            "enc.layers.0.self_attn.o_proj.weight"));
    cg_module_free(root);
}
END_TEST

static Suite *registry_suite(void)
{
    Suite *s = suite_create("registry");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, test_add_param_refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("buffers");
    tcase_add_test(tc, test_buffer_registration);
    tcase_add_test(tc, test_buffer_order_and_sharing);
    tcase_add_test(tc, test_buffer_save_load);
    tcase_add_test(tc, test_buffer_load_refusals);
    tcase_add_test(tc, test_buffer_bad_bool_changes_nothing);
    tcase_add_test(tc, test_buffer_torch_names);
    tcase_add_test(tc, test_posenc_buffer);
    suite_add_tcase(s, tc);
    tc = tcase_create("tie");
    tcase_add_test(tc, test_tie_linear_embedding);
    tcase_add_test(tc, test_tie_load_aliases);
    tcase_add_test(tc, test_tie_refusals);
    tcase_add_test(tc, test_tie_every_nn_param);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {registry_suite()};
    return cg_test_run(s, 1);
}
