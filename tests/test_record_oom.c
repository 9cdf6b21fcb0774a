/* Recording a graph node can fail (out of memory): the op must then return
 * NULL with the error, never a result silently detached from the graph
 * (issue 22). Linked with -Wl,--wrap=calloc: while `fail_nodes` is set,
 * every calloc of one graph node fails, while `fail_all` is, every calloc.
 * Also -Wl,--wrap=realloc: a realloc of `fail_realloc_from` bytes or more
 * fails while that is non-zero. And -Wl,--wrap=malloc: the fail_malloc_at-th
 * malloc from now fails (0: none); fail_calloc_at counts callocs alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autograd/checkpoint.h"
#include "autograd/ops.h"
#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/ops.h"
#include "core/random.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/data.h"
#include "nn/init.h"
#include "nn/lora.h"
#include "nn/param.h"
#include "nn/rnn.h"
#include "nn/transformer.h"
#include "nn/upsample.h"
#include "nn/safetensors.h"
#include "nn/spatial.h"
#include "optim/optim.h"
#include "optim/plateau.h"
#include "tests/testutil.h"

void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

void *__real_realloc(void *p, size_t size);
void *__wrap_realloc(void *p, size_t size);

void *__real_malloc(size_t size);
void *__wrap_malloc(size_t size);

static long fail_malloc_at;
static bool malloc_failed; /* the fail_malloc_at-th came */

void *__wrap_malloc(size_t size)
{
    if (fail_malloc_at > 0 && --fail_malloc_at == 0) {
        malloc_failed = true;
        return NULL;
    }
    return __real_malloc(size);
}

static bool fail_nodes, fail_all;
static size_t fail_realloc_from;
static long fail_calloc_at;
static bool calloc_failed; /* the fail_calloc_at-th came */

void *__wrap_realloc(void *p, size_t size)
{
    if (fail_realloc_from && size >= fail_realloc_from)
        return NULL;
    return __real_realloc(p, size);
}

void *__wrap_calloc(size_t n, size_t size)
{
    if (fail_all || (fail_nodes && n == 1 && size == sizeof(cg_node)))
        return NULL;
    if (fail_calloc_at > 0 && --fail_calloc_at == 0) {
        calloc_failed = true;
        return NULL;
    }
    return __real_calloc(n, size);
}

static cg_tensor *leaf(void)
{
    cg_tensor *t = cg_from_data(CG_SHAPE(2, 3), (const float[]){1, 2, 3, 4, 5, 6});
    cg_requires_grad(t, true);
    return t;
}

/* op() under the failing calloc: NULL and the recording error. */
#define ASSERT_OOM(expr)                                                                        \
    do {                                                                                        \
        cg_clear_error();                                                                       \
        fail_nodes = true;                                                                      \
        cg_tensor *r_ = (expr);                                                                 \
        fail_nodes = false;                                                                     \
        ck_assert_msg(!r_, "%s returned a tensor (requires_grad %d) instead of failing", #expr, \
                      r_ ? r_->requires_grad : 0);                                              \
        ck_assert_msg(strstr(cg_last_error(), "out of memory recording the graph"), "%s: '%s'", \
                      #expr, cg_last_error());                                                  \
    } while (0)

START_TEST(test_record_failure_is_an_error)
{
    cg_tensor *a = leaf(), *b = leaf();
    cg_tensor *mask = cg_from_bool(CG_SHAPE(2, 3), (const bool[]){1, 0, 1, 0, 1, 0});
    ASSERT_OOM(cg_add(a, b));  /* finish2 */
    ASSERT_OOM(cg_neg(a));     /* finish1 */
    ASSERT_OOM(cg_exp(a));     /* an op that saves its output */
    ASSERT_OOM(cg_sum_all(a)); /* a reduction */
    ASSERT_OOM(cg_slice(a, 1, 0, 2, 1));
    ASSERT_OOM(cg_select(a, 0, 1));
    ASSERT_OOM(cg_max(a, 1, false, NULL));
    ASSERT_OOM(cg_where(mask, a, b));
    ASSERT_OOM(cg_masked_fill(a, mask, 0.0f));
    /* autograd/ops_misc.c's: the unary rows, triangles, cumsum, the loss */
    ASSERT_OOM(cg_relu(a));
    ASSERT_OOM(cg_gelu_erf(a));
    ASSERT_OOM(cg_tril(a, 0));
    ASSERT_OOM(cg_cumsum(a, 1));
    ASSERT_OOM(cg_binary_cross_entropy_with_logits(a, b, CG_REDUCTION_MEAN));
    ASSERT_OOM(cg_mse_loss(a, b, CG_REDUCTION_NONE));
    /* autograd/ops_scan.c's and std: the nodes, and the gathers behind sort and cummax */
    ASSERT_OOM(cg_prod(a, 1, false));
    ASSERT_OOM(cg_prod_all(a));
    ASSERT_OOM(cg_cumprod(a, 0));
    ASSERT_OOM(cg_logcumsumexp(a, 1));
    ASSERT_OOM(cg_std(a, 0, NULL, 1, false));
    ASSERT_OOM(cg_var_mean(a, 0, NULL, 1, false, NULL));
    ASSERT_OOM(cg_sort(a, 1, true, true, NULL));
    ASSERT_OOM(cg_cummin(a, 0, NULL));
    /* a diagonal view; einsum's chain; cdist's direct node behind its
     * views (3-d inputs of one batch: expand and reshape give a itself) */
    ASSERT_OOM(cg_diagonal(a, 0, 0, 1));
    ASSERT_OOM(cg_einsum("ij,kj->ik", 2, (cg_tensor *[]){a, b}));
    cg_rng rr = cg_rng_new(3);
    cg_tensor *a3 = cg_requires_grad(cg_randn(&rr, CG_SHAPE(1, 2, 3)), true);
    ASSERT_OOM(cg_cdist(a3, a3, 1.0f));
    cg_release(a3);
    /* torch.linalg's nodes (one each; the packed ones behind their views) */
    cg_tensor *sq =
                  cg_requires_grad(cg_from_data(CG_SHAPE(2, 2), (const float[]){2, 1, 1, 3}), true),
              *out = NULL;
    ASSERT_OOM(cg_linalg_solve(sq, sq));
    ASSERT_OOM(cg_linalg_inv(sq));
    ASSERT_OOM(cg_linalg_det(sq));
    ASSERT_OOM(cg_linalg_slogdet(sq, &out));
    ASSERT_OOM(cg_linalg_cholesky(sq, false));
    ASSERT_OOM(cg_linalg_qr(a, NULL, &out));
    ASSERT_OOM(cg_linalg_eigh(sq, NULL, &out));
    ASSERT_OOM(cg_linalg_eigvalsh(sq, NULL));
    ASSERT_OOM(cg_linalg_svd(a, false, &out, NULL));
    ASSERT_OOM(cg_linalg_svdvals(a));
    ASSERT_OOM(cg_linalg_pinv(a, -1, -1));
    ASSERT_OOM(cg_linalg_lstsq(sq, sq, -1));
    ASSERT_OOM(cg_linalg_vector_norm(a, 3.0, 0, NULL, false));
    ASSERT_OOM(cg_linalg_matrix_norm(a, "nuc", NULL, false));
    ck_assert_ptr_null(out);
    cg_release(sq);
    /* and the same ops work again once memory is back */
    cg_tensor *s = cg_add(a, b);
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(s->node);
    cg_release_all(4, s, a, b, mask);
}
END_TEST

/* The nn ops (autograd/ops_nn.c) and cg_checkpoint too. */
static cg_tensor *twice(void *ctx, cg_tensor *const *in)
{
    (void)ctx;
    return cg_muls(in[0], 2.0f);
}

START_TEST(test_record_failure_nn_ops)
{
    cg_tensor *a = leaf(), *b = leaf();
    cg_tensor *w = cg_from_data(CG_SHAPE(3), (const float[]){1, 1, 1});
    cg_tensor *lw =
        cg_from_data(CG_SHAPE(4, 3), (const float[]){1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1});
    cg_requires_grad(w, true);
    cg_requires_grad(lw, true);
    cg_tensor *q = cg_reshape(a, CG_SHAPE(1, 1, 2, 3));
    cg_rng rng = cg_rng_new(1);
    const int64_t t[2] = {0, 2}, ids[2] = {1, 0};
    const int64_t gi[6] = {0, 1, 0, 1, 0, 1};
    cg_tensor *tt = cg_test_ids(2, t), *ti = cg_test_ids(2, ids),
              *tg = cg_test_ids_nd(CG_SHAPE(2, 3), gi);
    ASSERT_OOM(cg_softmax(a, 1));
    ASSERT_OOM(cg_log_softmax(a, 1));
    ASSERT_OOM(cg_cross_entropy(a, tt, -1, 0.0f, CG_REDUCTION_MEAN));
    ASSERT_OOM(cg_cross_entropy(a, tt, -1, 0.1f, CG_REDUCTION_NONE));
    ASSERT_OOM(cg_nll_loss(a, tt, -1, CG_REDUCTION_SUM));
    ASSERT_OOM(cg_layer_norm(a, w, NULL, 1e-5f));
    ASSERT_OOM(cg_rms_norm(a, w, 1e-5f));
    ASSERT_OOM(cg_add_layer_norm(a, b, w, NULL, 1e-5f));
    ASSERT_OOM(cg_add_rms_norm(a, b, w, 1e-5f));
    ASSERT_OOM(cg_dropout(a, 0.5f, &rng, true));
    ASSERT_OOM(cg_dropout1d(a, 0.5f, &rng, true));
    ASSERT_OOM(cg_dropout2d(q, 0.5f, &rng, true));
    ASSERT_OOM(cg_alpha_dropout(a, 0.5f, &rng, true));
    ASSERT_OOM(cg_feature_alpha_dropout(a, 0.5f, &rng, true));
    ASSERT_OOM(cg_concat((cg_tensor *const[]){a, b}, 2, 0));
    ASSERT_OOM(cg_index_select(a, 0, ti));
    ASSERT_OOM(cg_gather(a, 1, tg));
    ASSERT_OOM(cg_affine(a, lw, NULL));
    ASSERT_OOM(cg_affine_relu(a, lw, NULL));
    ASSERT_OOM(cg_attention(q, q, q, true, NULL, NULL));
    ASSERT_OOM(cg_checkpoint(&(cg_checkpoint_block){.fn = twice, .n_inputs = 1, .inputs = &a}));
    cg_release_all(5, a, b, w, lw, q);
}
END_TEST

/* A loader's batch that cannot be made (its scope's calloc fails) ends the
 * loop with ld->failed set and the error, not as the epoch's end; the next
 * call makes that batch. */
START_TEST(test_loader_failure_is_not_an_epoch_end)
{
    cg_tensor *x = cg_arange_dtype(CG_F32, 0, 6, 1), *y = cg_arange_dtype(CG_I64, 0, 6, 1);
    cg_loader *ld = cg_loader_new(x, y, 2, NULL);
    ck_assert(cg_loader_next(ld) && !ld->failed);
    fail_all = true;
    const bool got = cg_loader_next(ld);
    fail_all = false;
    ck_assert(!got && ld->failed && !ld->x);
    ck_assert_str_eq(cg_last_error(), "scope_begin: out of memory");
    for (int b = 1; b < 3; b++) {
        ck_assert(cg_loader_next(ld) && !ld->failed);
        ck_assert_float_eq(cg_data(ld->x)[0], 2.0f * b);
    }
    ck_assert(!cg_loader_next(ld) && !ld->failed); /* the epoch's end */
    cg_loader_free(ld);
    cg_release_all(2, x, y);
}
END_TEST

/* The safetensors header growing past its first 256 bytes cannot: the
 * save fails with the error (it padded the frozen header to a multiple of
 * 8 forever when its length was not one) and leaves no file. Metadata of
 * 8 lengths: the header stops at each residue mod 8. */
START_TEST(test_st_header_oom_is_an_error)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", cg_test_path("cg_record_oom.st"));
    for (int k = 0; k < 8; k++) {
        cg_st_writer *w = cg_st_writer_new();
        char value[400];
        memset(value, 'v', sizeof value);
        value[200 + k] = '\0';
        const float x[2] = {1, 2};
        ck_assert(w && cg_st_set_metadata(w, "note", value));
        ck_assert(cg_st_add_f32_raw(w, "x", 1, (const int64_t[]){2}, x));
        cg_clear_error();
        fail_realloc_from = 512;
        const bool saved = cg_st_writer_save(w, path);
        fail_realloc_from = 0;
        ck_assert_msg(!saved, "k=%d: saved", k);
        ck_assert_msg(strstr(cg_last_error(), "out of memory building the header"), "k=%d: '%s'", k,
                      cg_last_error());
        ck_assert_msg(access(path, F_OK) != 0, "k=%d: %s written", k, path);
        cg_st_writer_free(w);
    }
}
END_TEST

static cg_lm_block *lora_block(void)
{
    cg_rng r = cg_rng_new(7);
    cg_tf_config cfg = {.d = 8, .H = 2, .d_ff = 16, .norm = CG_NORM_LAYERNORM, .act = CG_ACT_GELU};
    return cg_lm_block_new(&cfg, &r);
}

/* Each malloc in turn failing while an adapter file is loaded: false and
 * "out of memory", never a crash (a walk of the model that failed with some
 * adapters listed freed the list, which the loader then freed again: a
 * double free, SIGABRT, under charlm sample --ckpt ADAPTERS). */
START_TEST(test_lora_load_oom_is_an_error)
{
    const char *targets[] = {"q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"};
    cg_lora_config lc = {.r = 2, .alpha = 4.0f, .n_targets = 6, .targets = targets};
    cg_lm_block *b = lora_block();
    cg_rng r = cg_rng_new(8);
    ck_assert_int_eq(cg_lora_attach_all(CG_MODULE(b), &lc, &r), 6);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", cg_test_path("cg_record_oom_lora.st"));
    ck_assert_msg(cg_lora_save(CG_MODULE(b), path), "%s", cg_last_error());
    cg_module_free(CG_MODULE(b));
    long k = 1;
    for (; k < 100000; k++) {
        cg_lm_block *b2 = lora_block();
        ck_assert_ptr_nonnull(b2);
        cg_clear_error();
        malloc_failed = false;
        fail_malloc_at = k;
        const bool ok = cg_lora_load(CG_MODULE(b2), path);
        fail_malloc_at = 0;
        cg_module_free(CG_MODULE(b2));
        if (!malloc_failed) { /* every malloc of the load has failed once */
            ck_assert_msg(ok, "%s", cg_last_error());
            break;
        }
        ck_assert_msg(ok || strstr(cg_last_error(), "out of memory"), "malloc %ld: '%s'", k,
                      cg_last_error());
    }
    ck_assert_int_gt(k, 10);
    unlink(path);
}
END_TEST

/* Each malloc and each calloc in turn failing while an adapter is attached
 * to a Linear: the adapter, or NULL and "out of memory" with the Linear as
 * it was (no child, no adapter, its weight trainable). A forward hook that
 * could not be registered frees the adapter, which the attach then wrote
 * its handle into: a use after free (AddressSanitizer), under a LoRA
 * checkpoint's load out of memory. */
START_TEST(test_lora_attach_oom_is_an_error)
{
    for (int which = 0; which < 2; which++) {
        long k = 1;
        for (; k < 1000; k++) {
            cg_rng r = cg_rng_new(3);
            cg_linear *l = cg_linear_new(6, 4, true, &r);
            ck_assert_ptr_nonnull(l);
            cg_clear_error();
            malloc_failed = calloc_failed = false;
            *(which ? &fail_calloc_at : &fail_malloc_at) = k;
            cg_lora *a = cg_lora_attach(l, 2, 4.0f, 0.0f, &r);
            fail_malloc_at = fail_calloc_at = 0;
            ck_assert_msg(a || strstr(cg_last_error(), "out of memory"), "%s %ld: '%s'",
                          which ? "calloc" : "malloc", k, cg_last_error());
            ck_assert(a ? cg_lora_of(l) == a && l->base.n_children == 3
                        : !cg_lora_of(l) && l->base.n_children == 0 && l->weight->requires_grad);
            cg_module_free(CG_MODULE(l));
            if (!(which ? calloc_failed : malloc_failed))
                break;
        }
        ck_assert_int_gt(k, 1);
    }
}
END_TEST

/* Each calloc in turn failing while cg_k_first_overflow converts: the
 * element that overflows, or -2 and "out of memory", never a crash (a
 * float32 tensor's own view failing left its values NULL while the
 * conversions succeeded, and the scan read them: SIGSEGV under `seq2seq
 * average` of a float16 checkpoint). Float32 and bfloat16 sources. */
START_TEST(test_first_overflow_oom_is_an_error)
{
    const cg_dtype from[] = {CG_F32, CG_BF16};
    for (int d = 0; d < 2; d++) {
        cg_tensor *x = cg_from_data(CG_SHAPE(3), (const float[]){1, -2, 1e6f});
        cg_tensor *t = cg_to(x, from[d]);
        ck_assert_ptr_nonnull(t);
        long k = 1;
        for (; k < 1000; k++) {
            cg_clear_error();
            calloc_failed = false;
            fail_calloc_at = k;
            double v = 0;
            const int64_t bad = cg_k_first_overflow(t, CG_F16, &v);
            fail_calloc_at = 0;
            if (!calloc_failed) { /* every calloc of the scan has failed once */
                ck_assert_int_eq(bad, 2);
                break;
            }
            ck_assert_msg(bad == 2 || (bad == -2 && strstr(cg_last_error(), "out of memory")),
                          "%s, calloc %ld: %lld, '%s'", cg_dtype_name(from[d]), k, (long long)bad,
                          cg_last_error());
        }
        ck_assert_int_gt(k, 1);
        cg_release_all(2, x, t);
    }
}
END_TEST

/* fp32 inference's packed copy of W (the weight cache's CG_PACKED_F32) is
 * an optimisation of a product that can read W itself: its allocations
 * failing, the product reads W, with the bits of the uncached product (it
 * failed with "packed weight: out of memory" where the uncached product
 * needed no such memory). The first malloc of the call is the cache
 * entry's; each other one failing gives the product or "out of memory". */
START_TEST(test_packed_f32_oom_reads_w)
{
    if (!cg_f32_packed_usable())
        return; /* no fp32 form on this CPU */
    cg_rng rng = cg_rng_new(5);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(40, 64)), *w = cg_randn(&rng, CG_SHAPE(48, 64));
    cg_tensor *want = cg_k_linear(x, w, NULL);
    ck_assert_ptr_nonnull(want);
    long k = 1;
    for (; k < 1000; k++) {
        cg_tensor_modified(w); /* no kept copy: each call packs */
        cg_clear_error();
        malloc_failed = false;
        fail_malloc_at = k;
        cg_tensor *y = cg_k_linear_packed(x, w, NULL);
        fail_malloc_at = 0;
        ck_assert_msg(y || (k > 1 && strstr(cg_last_error(), "out of memory")), "malloc %ld: '%s'",
                      k, cg_last_error());
        ck_assert_msg(!y || !memcmp(cg_data(y), cg_data(want), sizeof(float) * 40 * 48),
                      "malloc %ld: other bits", k);
        ck_assert_msg(!y || !cg_has_error(), "malloc %ld: '%s' left", k, cg_last_error());
        cg_release(y);
        if (!malloc_failed) /* every malloc of the call has failed once */
            break;
    }
    ck_assert_int_gt(k, 1);
    cg_release_all(3, x, w, want);
}
END_TEST

/* Each malloc and each calloc in turn failing in cg_k_topk_indices (every
 * beam search step's): the indices, or NULL and "out of memory", never a
 * crash (the contiguous copy of a strided input was used unchecked: SIGSEGV
 * in topk_row under a beam search that ran out of memory). */
START_TEST(test_topk_oom_is_an_error)
{
    cg_rng rng = cg_rng_new(9);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 5)), *xt = cg_transpose(x, 0, 1);
    cg_tensor *want = cg_k_topk_indices(xt, 3, -1, true);
    ck_assert_ptr_nonnull(want);
    for (int which = 0; which < 2; which++) {
        long k = 1;
        for (; k < 1000; k++) {
            cg_clear_error();
            malloc_failed = calloc_failed = false;
            *(which ? &fail_calloc_at : &fail_malloc_at) = k;
            cg_tensor *got = cg_k_topk_indices(xt, 3, -1, true);
            fail_malloc_at = fail_calloc_at = 0;
            ck_assert_msg(got || strstr(cg_last_error(), "out of memory"), "%s %ld: '%s'",
                          which ? "calloc" : "malloc", k, cg_last_error());
            ck_assert(!got || !memcmp(cg_data_i64(got), cg_data_i64(want), 15 * sizeof(int64_t)));
            cg_release(got);
            if (!(which ? calloc_failed : malloc_failed))
                break;
        }
        ck_assert_int_gt(k, 1);
    }
    cg_release_all(3, x, xt, want);
}
END_TEST

/* Each malloc and each calloc in turn failing in the kernels of
 * core/scan.c on a transposed input (its float32 copy, the result, the
 * per-thread scratch of sort and the backwards): the result, or NULL and
 * "out of memory", never a crash. */
static cg_tensor *scan_kernel(int which, const cg_tensor *x, const cg_tensor *g)
{
    switch (which) {
    case 0: return cg_k_sort_indices(x, -1, true);
    case 1: return cg_k_cum_extreme_indices(x, 0, false);
    case 2: return cg_k_cumprod_backward(x, g, 1);
    case 3: return cg_k_logcumsumexp_backward(x, g, g, 0);
    default: return cg_k_prod(x, 1, false);
    }
}
START_TEST(test_scan_oom_is_an_error)
{
    cg_rng rng = cg_rng_new(9);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(6, 5)), *xt = cg_transpose(x, 0, 1);
    cg_tensor *g = cg_randn(&rng, CG_SHAPE(5, 6));
    for (int op = 0; op < 5; op++) {
        cg_tensor *want = scan_kernel(op, xt, g);
        ck_assert_ptr_nonnull(want);
        for (int which = 0; which < 2; which++) {
            long k = 1;
            for (; k < 1000; k++) {
                cg_clear_error();
                malloc_failed = calloc_failed = false;
                *(which ? &fail_calloc_at : &fail_malloc_at) = k;
                cg_tensor *got = scan_kernel(op, xt, g);
                fail_malloc_at = fail_calloc_at = 0;
                ck_assert_msg(got || strstr(cg_last_error(), "out of memory"), "op %d %s %ld: '%s'",
                              op, which ? "calloc" : "malloc", k, cg_last_error());
                ck_assert(!got || !memcmp(cg_data_ptr(got), cg_data_ptr(want),
                                          (size_t)cg_numel(want) * cg_dtype_size(want->dtype)));
                cg_release(got);
                if (!(which ? calloc_failed : malloc_failed))
                    break;
            }
            ck_assert_int_gt(k, which ? 0 : 1);
        }
        cg_release(want);
    }
    cg_release_all(3, x, xt, g);
}
END_TEST

/* cg_autograd_grad with create_graph when an allocation fails, at every
 * allocation in turn (malloc, then calloc): false with the error, or the
 * gradients of a run without failures; nothing leaks (the suite runs
 * under ASan and valgrind), and the graph stays usable. */
static bool hvp(cg_tensor *w, cg_tensor *x, cg_tensor *v, const cg_tensor *ids, float *got)
{
    cg_tensor *h = cg_affine(x, w, NULL), *a = cg_tanh(h),
              *n = h ? cg_layer_norm(a, NULL, NULL, 1e-5f) : NULL;
    cg_tensor *l = n ? cg_cross_entropy(n, ids, -100, 0.1f, CG_REDUCTION_MEAN) : NULL;
    cg_tensor *g = NULL, *gv = NULL, *s = NULL, *hv = NULL;
    bool ok = l && cg_autograd_grad(1, &l, NULL, 1, &w, &(cg_grad_opts){.create_graph = true}, &g);
    ok = ok && (gv = cg_mul(g, v)) && (s = cg_sum_all(gv)) &&
         cg_autograd_grad(1, &s, NULL, 1, &w, NULL, &hv);
    if (ok)
        memcpy(got, cg_data(hv), sizeof(float) * 6);
    cg_release_all(8, h, a, n, l, g, gv, s, hv);
    return ok;
}
START_TEST(test_grad2_oom)
{
    cg_rng rng = cg_rng_new(5);
    cg_tensor *w = cg_requires_grad(cg_randn(&rng, CG_SHAPE(3, 2)), true);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(2, 2)), *v = cg_randn(&rng, CG_SHAPE(3, 2));
    const cg_tensor *ids = cg_test_ids(2, (const int64_t[]){1, 0});
    float want[6], got[6];
    ck_assert_msg(hvp(w, x, v, ids, want), "%s", cg_last_error());
    for (int which = 0; which < 2; which++) {
        long k = 1;
        for (; k < 5000; k++) {
            cg_clear_error();
            malloc_failed = calloc_failed = false;
            *(which ? &fail_calloc_at : &fail_malloc_at) = k;
            const bool ok = hvp(w, x, v, ids, got);
            fail_malloc_at = fail_calloc_at = 0;
            ck_assert_msg(ok || strstr(cg_last_error(), "out of memory"), "%s %ld: '%s'",
                          which ? "calloc" : "malloc", k, cg_last_error());
            ck_assert(!ok || !memcmp(got, want, sizeof want));
            if (!(which ? calloc_failed : malloc_failed))
                break;
        }
        ck_assert_int_gt(k, 1);
        ck_assert_int_lt(k, 5000);
    }
    ck_assert(!w->grad);
    cg_release_all(3, w, x, v);
}
END_TEST

/* A tensor made in a scope that cannot grow its list (out of memory) is
 * not returned untracked, to outlive the scope: NULL and the error, and
 * the scope's end releases every tensor it made. */
START_TEST(test_scope_full_oom_is_an_error)
{
    const int64_t live = cg_live_tensors();
    cg_scope *sc = cg_scope_begin();
    for (int i = 0; i < 256; i++) /* a scope's first list holds 256 */
        ck_assert_ptr_nonnull(cg_zeros(CG_SHAPE(2)));
    cg_clear_error();
    fail_realloc_from = 256 * sizeof(cg_tensor *) + 1; /* its growth */
    cg_tensor *t = cg_zeros(CG_SHAPE(2));
    fail_realloc_from = 0;
    ck_assert_ptr_null(t);
    ck_assert_str_eq(cg_last_error(), "out of memory recording a tensor in its scope");
    ck_assert_int_eq(cg_live_tensors(), live + 256);
    ck_assert_ptr_nonnull(cg_zeros(CG_SHAPE(2))); /* and it grows once memory is back */
    cg_scope_end(sc);
    ck_assert_int_eq(cg_live_tensors(), live);
}
END_TEST

/* A padded batch through a bidirectional GRU and LSTM
 * (cg_*_forward_lengths) and its backward, the k-th malloc and then the
 * k-th calloc failing, for every k until none is left to fail: each run
 * succeeds or fails with an error, and leaves no tensor behind. */
static bool padded_run(cg_rnn *m, cg_tensor *x, const cg_tensor *len)
{
    cg_tensor *hn = NULL, *cn = NULL;
    cg_tensor *y = m->mode == CG_RNN_LSTM ? cg_lstm_forward_lengths(m, x, len, NULL, NULL, &hn, &cn)
                                          : cg_gru_forward_lengths(m, x, len, NULL, &hn);
    cg_tensor *l = y ? cg_sum_all(y) : NULL;
    const bool ok = l && cg_backward(l, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    ck_assert_msg(!y == !hn && (m->mode != CG_RNN_LSTM || !y == !cn),
                  "a result without its states");
    cg_release_all(4, y, hn, cn, l);
    cg_zero_grad(x);
    for (int i = 0; i < m->base.n_params; i++)
        cg_zero_grad(m->base.params[i].tensor);
    return ok;
}

/* run(ctx) with the k-th malloc, then the k-th calloc, failing, for k =
 * 1, 2, ... until none fails: each run fails or succeeds, with no tensor
 * left alive; how many failed */
static int every_allocation_fails(bool (*run)(void *ctx), void *ctx)
{
    const int64_t live = cg_live_tensors();
    int failed = 0;
    for (int which = 0; which < 2; which++)
        for (long k = 1;; k++) {
            cg_clear_error();
            malloc_failed = calloc_failed = false;
            *(which ? &fail_calloc_at : &fail_malloc_at) = k;
            const bool ok = run(ctx);
            fail_malloc_at = fail_calloc_at = 0;
            ck_assert_int_eq(cg_live_tensors(), live);
            if (!(which ? calloc_failed : malloc_failed)) {
                ck_assert_msg(ok, "no allocation failed, and yet: %s", cg_last_error());
                break;
            }
            failed += !ok;
        }
    return failed;
}

typedef struct {
    cg_rnn *m;
    cg_tensor *x, *len;
} rnn_run;

static bool rnn_padded(void *ctx)
{
    const rnn_run *r = ctx;
    return padded_run(r->m, r->x, r->len);
}

START_TEST(test_rnn_lengths_oom)
{
    cg_rnn_config cfg = CG_RNN_CONFIG(3, 4);
    cfg.num_layers = 2;
    cfg.bidirectional = true;
    cg_rng r = cg_rng_new(3);
    cg_tensor *x = cg_randn(&r, CG_SHAPE(5, 3, 3));
    cg_requires_grad(x, true);
    cg_tensor *len = cg_from_i64(CG_SHAPE(3), (const int64_t[]){2, 5, 1});
    for (int lstm = 0; lstm < 2; lstm++) {
        cg_rnn *m = lstm ? cg_lstm_new(&cfg, &r) : cg_gru_new(&cfg, &r);
        rnn_run run = {m, x, len};
        const int failed = every_allocation_fails(rnn_padded, &run);
        ck_assert_msg(failed > 10, "%s: only %d runs failed", lstm ? "LSTM" : "GRU", failed);
        ck_assert(padded_run(m, x, len)); /* and it runs once memory is back */
        cg_module_free(CG_MODULE(m));
    }
    cg_release_all(2, x, len);
}
END_TEST

/* A loss at reduction r, forward and backward (none's losses weighted by
 * w and summed): every malloc and calloc of it failing in turn gives an
 * error or a success, and leaves no tensor behind. which 4 to 6: the
 * class losses with class weights cw, bce with weight and pos_weight cw;
 * 7 and 8: the fused head over x and the weight hw, in chunks of 5 rows
 * and CG_LCE_EXACT (none: its backward computes the chunks). */
typedef struct {
    int which;
    cg_reduction r;
    cg_tensor *x, *y, *t, *w, *cw, *hw;
} loss_ctx;
static bool loss_run(void *ctx)
{
    const loss_ctx *c = ctx;
    const int which = c->which;
    const cg_reduction r = c->r;
    cg_tensor *x = c->x, *y = c->y, *t = c->t, *w = c->w, *cw = c->cw;
    cg_tensor *l = which == 0   ? cg_cross_entropy(x, t, 1, 0.1f, r)
                   : which == 1 ? cg_nll_loss(x, t, 1, r)
                   : which == 2 ? cg_mse_loss(x, y, r)
                   : which == 3 ? cg_binary_cross_entropy_with_logits(x, y, r)
                   : which == 4 ? cg_cross_entropy_weighted(x, t, cw, 1, 0.1f, r)
                   : which == 5 ? cg_nll_loss_weighted(x, t, cw, 1, r)
                   : which == 6 ? cg_binary_cross_entropy_with_logits_ex(x, y, cw, cw, r)
                                : cg_linear_cross_entropy(x, c->hw, NULL, t, 1, 0.1f, r,
                                                          which == 7 ? 5 : CG_LCE_EXACT, 1.0f);
    const bool rows = which < 2 || which == 4 || which == 5 || which > 6;
    cg_tensor *lw = l && r == CG_REDUCTION_NONE ? cg_mul(l, rows ? w : y) : NULL;
    cg_tensor *s = lw ? cg_sum_all(lw) : NULL;
    cg_tensor *root = r == CG_REDUCTION_NONE ? s : l;
    const bool ok = root && cg_backward(root, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release_all(3, l, lw, s);
    cg_zero_grad(x);
    cg_zero_grad(y);
    cg_zero_grad(c->hw);
    return ok;
}

START_TEST(test_loss_reductions_oom)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4, 5)), true);
    cg_tensor *y = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4, 5)), true);
    cg_tensor *w = cg_randn(&r, CG_SHAPE(3, 4));
    int64_t tv[12];
    for (int i = 0; i < 12; i++)
        tv[i] = i % 5;
    cg_tensor *t = cg_test_ids_nd(CG_SHAPE(3, 4), tv);
    cg_tensor *cw = cg_from_data(CG_SHAPE(5), (const float[]){0.5f, 2, 1.5f, 0.25f, 3});
    cg_tensor *hw = cg_requires_grad(cg_randn(&r, CG_SHAPE(6, 5)), true);
    for (int which = 0; which < 9; which++)
        for (int red = CG_REDUCTION_MEAN; red <= CG_REDUCTION_NONE; red++) {
            loss_ctx c = {which, (cg_reduction)red, x, y, t, w, cw, hw};
            const int failed = every_allocation_fails(loss_run, &c);
            ck_assert_msg(failed > 3, "loss %d reduction %d: only %d runs failed", which, red,
                          failed);
            ck_assert(loss_run(&c));
        }
    cg_release_all(5, x, y, w, cw, hw);
}
END_TEST

/* The rest of torch.nn's losses (test_loss_more.c's), forward and
 * backward: which 0 to 10 each loss (the fused multi_margin with a
 * weight, multilabel_margin), p probabilities, v positive, s signs */
typedef struct {
    int which;
    cg_reduction r;
    cg_tensor *x, *y, *z, *p, *v, *s, *rs, *cls, *lab, *w;
} more_ctx;
static bool more_run(void *ctx)
{
    const more_ctx *c = ctx;
    const cg_reduction r = c->r;
    cg_tensor *x = c->x, *y = c->y, *l = NULL;
    switch (c->which) {
    case 0: l = cg_binary_cross_entropy(c->p, y, c->w, r); break;
    case 1: l = cg_poisson_nll_loss(x, y, true, true, 1e-8f, r); break;
    case 2: l = cg_gaussian_nll_loss(x, y, c->v, true, 1e-6f, r); break;
    case 3: l = cg_soft_margin_loss(x, y, r); break;
    case 4: l = cg_margin_ranking_loss(x, y, c->s, 0.2f, r); break;
    case 5: l = cg_hinge_embedding_loss(x, c->s, 1.0f, r); break;
    case 6: l = cg_cosine_embedding_loss(x, y, c->rs, 0.1f, r); break;
    case 7: l = cg_triplet_margin_loss(x, y, c->z, 1.0f, 3.0f, 1e-6f, true, r); break;
    case 8: l = cg_multi_margin_loss(x, c->cls, 2, 1.0f, c->w, r); break;
    case 9: l = cg_multilabel_soft_margin_loss(x, c->p, c->w, r); break;
    default: l = cg_multilabel_margin_loss(x, c->lab, r);
    }
    cg_tensor *s = l ? cg_sum_all(l) : NULL;
    const bool ok = s && cg_backward(s, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release_all(2, l, s);
    cg_zero_grad(x);
    cg_zero_grad(y);
    cg_zero_grad(c->z);
    cg_zero_grad(c->v);
    cg_zero_grad(c->p);
    return ok;
}

START_TEST(test_loss_more_oom)
{
    cg_rng r = cg_rng_new(6);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4)), true);
    cg_tensor *y = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4)), true);
    cg_tensor *z = cg_requires_grad(cg_randn(&r, CG_SHAPE(3, 4)), true);
    cg_tensor *p0 = cg_randn(&r, CG_SHAPE(3, 4)), *p = cg_k_sigmoid(p0);
    cg_tensor *v = cg_requires_grad(cg_k_adds(p, 0.5f), true);
    cg_tensor *s =
        cg_from_data(CG_SHAPE(3, 4), (const float[]){1, -1, 1, 1, -1, 1, -1, 1, 1, 1, -1, -1});
    cg_tensor *rs = cg_from_data(CG_SHAPE(3), (const float[]){1, -1, 1});
    cg_tensor *w = cg_from_data(CG_SHAPE(4), (const float[]){0.5f, 2, 1.5f, 1});
    const int64_t cl[3] = {1, 3, 0}, lb[12] = {0, 2, -1, 0, 3, -1, 0, 0, 1, 2, 3, -1};
    cg_requires_grad(p, true);
    for (int which = 0; which < 11; which++)
        for (int red = CG_REDUCTION_MEAN; red <= CG_REDUCTION_NONE; red++) {
            more_ctx c = {which,
                          (cg_reduction)red,
                          x,
                          y,
                          z,
                          p,
                          v,
                          s,
                          rs,
                          cg_test_ids(3, cl),
                          cg_test_ids_nd(CG_SHAPE(3, 4), lb),
                          w};
            const int failed = every_allocation_fails(more_run, &c);
            ck_assert_msg(failed > 3, "loss %d reduction %d: only %d runs failed", which, red,
                          failed);
            ck_assert(more_run(&c));
        }
    cg_release_all(9, x, y, z, p0, p, v, s, rs, w);
}
END_TEST

/* F.ctc_loss, forward and backward, each reduction with zero_infinity
 * (its node, the mask and the division of the mean) */
typedef struct {
    cg_reduction r;
    cg_tensor *x, *tg, *il, *tl;
} ctc_ctx;
static bool ctc_run(void *ctx)
{
    const ctc_ctx *c = ctx;
    cg_tensor *lp = cg_log_softmax(c->x, -1);
    cg_tensor *l = lp ? cg_ctc_loss(lp, c->tg, c->il, c->tl, 0, c->r, true) : NULL;
    cg_tensor *s = l ? cg_sum_all(l) : NULL;
    const bool ok = s && cg_backward(s, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release_all(3, lp, l, s);
    cg_zero_grad(c->x);
    return ok;
}

START_TEST(test_ctc_oom)
{
    cg_rng r = cg_rng_new(8);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(4, 3, 5)), true);
    const int64_t tg[6] = {1, 2, 2, 3, 4, 4}, il[3] = {4, 3, 1}, tl[3] = {3, 1, 2};
    for (int red = CG_REDUCTION_MEAN; red <= CG_REDUCTION_NONE; red++) {
        ctc_ctx c = {(cg_reduction)red, x, cg_test_ids(6, tg), cg_test_ids(3, il),
                     cg_test_ids(3, tl)};
        const int failed = every_allocation_fails(ctc_run, &c);
        ck_assert_msg(failed > 3, "reduction %d: only %d runs failed", red, failed);
        ck_assert(ctc_run(&c));
    }
    cg_release(x);
}
END_TEST

/* The pad's three other modes over two dims, forward and backward (each
 * padded dim's gather and its gradient's fold) */
static bool pads_run(void *ctx)
{
    cg_tensor *x = ctx, *sum = NULL;
    bool ok = true;
    for (int m = CG_PAD_REFLECT; m <= CG_PAD_CIRCULAR; m++) {
        cg_tensor *p = cg_pad(x, 4, (int64_t[]){2, -1, 1, 3}, (cg_pad_mode)m, 0.0f);
        cg_tensor *s = p ? cg_sum_all(p) : NULL;
        cg_tensor *next = sum && s ? cg_add(sum, s) : s ? cg_retain(s) : NULL;
        ok = ok && next;
        cg_release_all(3, p, s, sum);
        sum = next;
    }
    ok = ok && cg_backward(sum, NULL, false);
    cg_release(sum);
    cg_zero_grad(x);
    return ok;
}

START_TEST(test_pad_modes_oom)
{
    cg_rng r = cg_rng_new(6);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4, 5)), true);
    const int failed = every_allocation_fails(pads_run, x);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(pads_run(x)); /* and it runs once memory is back */
    cg_release(x);
}
END_TEST

/* BatchNorm2d, then every pool (1d ... 3d, the 3d max unpooled), forward
 * and backward */
static bool pools_run(void *ctx)
{
    cg_batchnorm *bn = ((void **)ctx)[0];
    cg_tensor *x = ((void **)ctx)[1], *idx = NULL;
    cg_tensor *h = cg_batchnorm_forward(bn, x);
    const cg_pool o = {.kernel_size = {2, 2}, .padding = {1, 1}, .ceil_mode = true};
    /* h [2, 3, 4, 5] is also an unbatched [C, D, H, W]: the 3d pools and
     * the unpool of the 3d max */
    const cg_pool o3 = {.kernel_size = {2, 2, 3}, .padding = {1, 1, 1}, .ceil_mode = true};
    const cg_pool u3 = {.kernel_size = {2, 2, 3}, .padding = {1, 1, 1}}; /* no ceil_mode */
    cg_tensor *idx3 = NULL, *m3 = cg_max_pool3d_with_indices(h, u3, &idx3);
    cg_tensor *t[9] = {cg_max_pool2d_with_indices(h, o, &idx),
                       cg_avg_pool2d(h, o),
                       cg_adaptive_max_pool2d(h, 2, 3, NULL),
                       cg_adaptive_avg_pool2d(h, 3, 2),
                       cg_avg_pool3d(h, o3),
                       cg_adaptive_max_pool3d(h, 2, 1, 3, NULL),
                       cg_adaptive_avg_pool3d(h, 1, 3, 2),
                       m3 ? cg_max_unpool3d(m3, idx3, u3, (int64_t[]){3, 4, 5}) : NULL,
                       m3};
    cg_tensor *s[9] = {NULL}, *sum = NULL;
    bool ok = h && idx;
    for (int i = 0; i < 9; i++) {
        s[i] = t[i] ? cg_sum_all(t[i]) : NULL;
        cg_tensor *next = sum && s[i] ? cg_add(sum, s[i]) : s[i] ? cg_retain(s[i]) : NULL;
        ok = ok && next;
        cg_release(sum);
        sum = next;
    }
    ok = ok && cg_backward(sum, NULL, false);
    for (int i = 0; i < 9; i++)
        cg_release_all(2, t[i], s[i]);
    cg_release_all(4, h, idx, idx3, sum);
    cg_zero_grad(x);
    cg_zero_grad(bn->weight);
    cg_zero_grad(bn->bias);
    return ok;
}

START_TEST(test_pool_oom)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 4, 5)), true);
    cg_batchnorm *bn = cg_batchnorm2d_new(3, NULL);
    void *ctx[2] = {bn, x};
    const int failed = every_allocation_fails(pools_run, ctx);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(pools_run(ctx)); /* and it runs once memory is back */
    cg_module_free(CG_MODULE(bn));
    cg_release(x);
}
END_TEST

/* The optimizers' new types and options (RMSprop centered with momentum,
 * Adagrad from an initial accumulator, AdamW amsgrad, SGD dampening,
 * Adadelta, Adamax, NAdam and ASGD with their scalars, RAdam, Rprop):
 * built whole and sharded, two steps, saved, the shards gathered */
static bool optims_run(void *ctx)
{
    cg_tensor **p = ctx;
    enum { NC = 10 };
    cg_optim_config cfgs[NC] = {cg_rmsprop_config(1e-2, 0.9, 1e-8, 0.5, true),
                                cg_adagrad_config(0.1, 0.1, 0.5, 1e-10),
                                cg_adamw_default(1e-2),
                                cg_sgd_config(0.1, 0.9, false),
                                cg_adadelta_default(1.0),
                                cg_adamax_default(2e-3),
                                cg_nadam_default(2e-3),
                                cg_radam_default(1e-3),
                                cg_asgd_default(1e-2),
                                cg_rprop_default(1e-2)};
    cfgs[2].amsgrad = true;
    cfgs[3].dampening = 0.25;
    const cg_optim_range own[2] = {{0, 3}, {2, 5}};
    bool ok = true;
    for (int c = 0; c < NC; c++) {
        const double wd = cfgs[c].type == CG_OPTIM_RPROP ? 0 : 0.1; /* Rprop takes none */
        const cg_optim_param ps[2] = {{"a", p[0], wd}, {"b", p[1], 0}};
        cg_optim *o = cg_optim_new(&cfgs[c], 2, ps),
                 *s = cg_optim_new_sharded(&cfgs[c], 2, ps, own);
        cg_st_writer *w = cg_st_writer_new();
        for (int k = 0; k < 2; k++) {
            for (int j = 0; j < 2; j++) {
                cg_zero_grad(p[j]);
                p[j]->grad = cg_full(p[j]->ndim, p[j]->shape, 0.5f + (float)k);
                ok = ok && p[j]->grad;
            }
            ok = ok && o && s && cg_optim_step(o) && cg_optim_step(s);
        }
        ok = ok && w && cg_optim_save(o, w, "opt") && cg_optim_copy_state(o, s);
        cg_st_writer_free(w);
        cg_optim_free(o);
        cg_optim_free(s);
    }
    for (int j = 0; j < 2; j++)
        cg_zero_grad(p[j]);
    return ok;
}

START_TEST(test_optims_oom)
{
    cg_tensor *p[2] = {cg_requires_grad(cg_zeros(CG_SHAPE(2, 3)), true),
                       cg_requires_grad(cg_zeros(CG_SHAPE(5)), true)};
    const int failed = every_allocation_fails(optims_run, p);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(optims_run(p)); /* and it runs once memory is back */
    cg_release_all(2, p[0], p[1]);
}
END_TEST

/* An Upsample (bilinear) and every other mode of cg_interpolate (a
 * bfloat16 copy through nearest), forward and backward */
static bool interp_run(void *ctx)
{
    cg_upsample *u = ((void **)ctx)[0];
    cg_tensor *x = ((void **)ctx)[1], *x3 = ((void **)ctx)[2];
    cg_tensor *xb = cg_to(x, CG_BF16);
    cg_tensor *t[5] = {
        cg_upsample_forward(u, x),
        cg_interpolate(xb, (cg_interp){.mode = CG_INTERP_NEAREST, .scale_factor = {1.7}}),
        cg_interpolate(x, (cg_interp){.mode = CG_INTERP_NEAREST_EXACT, .size = {3, 7}}),
        cg_interpolate(
            x3,
            (cg_interp){.mode = CG_INTERP_LINEAR, .scale_factor = {0.6}, .align_corners = true}),
        cg_interpolate(x, (cg_interp){.mode = CG_INTERP_BICUBIC, .size = {7, 3}})};
    cg_tensor *s[5] = {NULL}, *sum = NULL;
    bool ok = true;
    for (int i = 0; i < 5; i++) {
        cg_tensor *f = t[i] ? cg_to(t[i], CG_F32) : NULL;
        s[i] = f ? cg_sum_all(f) : NULL;
        cg_tensor *next = sum && s[i] ? cg_add(sum, s[i]) : s[i] ? cg_retain(s[i]) : NULL;
        ok = ok && next;
        cg_release_all(2, sum, f);
        sum = next;
    }
    ok = ok && cg_backward(sum, NULL, false);
    for (int i = 0; i < 5; i++)
        cg_release_all(2, t[i], s[i]);
    cg_release_all(2, xb, sum);
    cg_zero_grad(x);
    cg_zero_grad(x3);
    return ok;
}

START_TEST(test_interp_oom)
{
    cg_rng r = cg_rng_new(7);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 4, 5)), true);
    cg_tensor *x3 = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 6)), true);
    cg_upsample *u = cg_upsample_new(&(cg_interp){.mode = CG_INTERP_BILINEAR, .scale_factor = {2}});
    void *ctx[3] = {u, x, x3};
    const int failed = every_allocation_fails(interp_run, ctx);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(interp_run(ctx)); /* and it runs once memory is back */
    cg_module_free(CG_MODULE(u));
    cg_release_all(2, x, x3);
}
END_TEST

/* GroupNorm, then an InstanceNorm2d with running statistics and affine,
 * forward and backward */
static bool norms_run(void *ctx)
{
    cg_groupnorm *gn = ((void **)ctx)[0];
    cg_instancenorm *in = ((void **)ctx)[1];
    cg_tensor *x = ((void **)ctx)[2];
    cg_tensor *h = cg_groupnorm_forward(gn, x), *y = h ? cg_instancenorm_forward(in, h) : NULL;
    cg_tensor *sq = y ? cg_mul(y, h) : NULL, *l = sq ? cg_sum_all(sq) : NULL;
    const bool ok = l && cg_backward(l, NULL, false);
    cg_release_all(4, h, y, sq, l);
    cg_zero_grad(x);
    cg_zero_grad(gn->weight);
    cg_zero_grad(gn->bias);
    cg_zero_grad(in->weight);
    cg_zero_grad(in->bias);
    return ok;
}

START_TEST(test_norm_oom)
{
    cg_rng r = cg_rng_new(5);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4, 3, 5)), true);
    cg_batchnorm_opts o = cg_instancenorm_opts_default();
    o.affine = o.track_running_stats = true;
    cg_groupnorm *gn = cg_groupnorm_new(2, 4, 1e-5f, true);
    cg_instancenorm *in = cg_instancenorm2d_new(4, &o);
    void *ctx[3] = {gn, in, x};
    const int failed = every_allocation_fails(norms_run, ctx);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(norms_run(ctx)); /* and it runs once memory is back */
    cg_module_free(CG_MODULE(gn));
    cg_module_free(CG_MODULE(in));
    cg_release(x);
}
END_TEST

/* A convolution's forward and backward (an nn.Conv2d of 2 groups, then
 * F.conv1d with a padded stride) through every_allocation_fails; t: the
 * transposed ones (nn.ConvTranspose2d with output padding, then
 * F.conv_transpose1d) */
static bool conv_run(cg_conv *m, cg_tensor *x, cg_tensor *x1, cg_tensor *w1, bool t)
{
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = 2, c.padding[0] = 1, c.output_padding[0] = t;
    cg_tensor *y = cg_conv_forward(m, x);
    cg_tensor *y1 = (t ? cg_conv_transpose1d : cg_conv1d)(x1, w1, NULL, &c);
    cg_tensor *s = y ? cg_sum_all(y) : NULL, *s1 = y1 ? cg_sum_all(y1) : NULL;
    cg_tensor *l = s && s1 ? cg_add(s, s1) : NULL;
    const bool ok = l && cg_backward(l, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release_all(5, y, y1, s, s1, l);
    cg_zero_grad(x);
    cg_zero_grad(w1);
    for (int i = 0; i < m->base.n_params; i++)
        cg_zero_grad(m->base.params[i].tensor);
    return ok;
}

typedef struct {
    cg_conv *m;
    cg_tensor *x, *x1, *w1;
    bool t;
} conv_args;
static bool conv_call(void *ctx)
{
    const conv_args *a = ctx;
    return conv_run(a->m, a->x, a->x1, a->w1, a->t);
}

/* _i 1: the transposed convolutions */
START_TEST(test_conv_oom)
{
    cg_rng r = cg_rng_new(4);
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.groups = 2, c.padding[0] = c.padding[1] = 1;
    if (_i)
        c.stride[0] = c.stride[1] = 2, c.output_padding[1] = 1;
    cg_conv *m = (_i ? cg_conv_transpose2d_new : cg_conv2d_new)(4, 6, 3, 3, &c, true, &r);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4, 5, 6)), true);
    cg_tensor *x1 = cg_randn(&r, CG_SHAPE(3, 7));
    cg_tensor *w1 = cg_requires_grad(cg_randn(&r, CG_SHAPE(_i ? 3 : 2, _i ? 2 : 3, 3)), true);
    conv_args a = {m, x, x1, w1, _i};
    const int failed = every_allocation_fails(conv_call, &a);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(conv_call(&a)); /* and it runs once memory is back */
    cg_module_free(CG_MODULE(m));
    cg_release_all(3, x, x1, w1);
}
END_TEST

/* The 3-d ones through every_allocation_fails: an nn.Conv3d (2 groups,
 * reflect padding 'same': a pad node, then the convolution), a bfloat16 x
 * through F.conv_transpose3d with output padding, an
 * nn.ConvTranspose3d's forward(x, output_size); their sum's backward */
static bool conv3d_call(void *ctx)
{
    void **p = ctx;
    cg_conv *m = p[0], *mt = p[1];
    cg_tensor *x = p[2], *xb = p[3], *w = p[4];
    cg_conv_cfg c = CG_CONV_DEFAULT;
    c.stride[0] = c.stride[2] = 2, c.padding[1] = 1, c.output_padding[2] = 1;
    cg_tensor *y[3] = {cg_conv_forward(m, x), cg_conv_transpose3d(xb, w, NULL, &c),
                       cg_conv_transpose_forward(mt, x, 3, (int64_t[]){7, 8, 11})};
    cg_tensor *l = NULL;
    bool ok = true;
    for (int i = 0; i < 3 && ok; i++) { /* l = the sums so far */
        cg_tensor *s = y[i] ? cg_sum_all(y[i]) : NULL;
        cg_tensor *n = !s ? NULL : l ? cg_add(l, s) : cg_retain(s);
        ok = n != NULL;
        cg_release_all(2, s, l);
        l = n;
    }
    ok = ok && cg_backward(l, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release_all(4, y[0], y[1], y[2], l);
    cg_tensor *ps[7] = {x, xb, w, m->weight, m->bias, mt->weight, mt->bias};
    for (int i = 0; i < 7; i++)
        cg_zero_grad(ps[i]);
    return ok;
}

START_TEST(test_conv3d_oom)
{
    cg_rng r = cg_rng_new(9);
    cg_conv_cfg c = CG_CONV_DEFAULT, ct = CG_CONV_DEFAULT;
    c.groups = 2, c.pad = CG_CONV_SAME, c.padding_mode = CG_PAD_REFLECT;
    ct.stride[0] = ct.stride[1] = ct.stride[2] = 2;
    cg_conv *m = cg_conv3d_new(2, 4, 2, 3, 2, &c, true, &r);
    cg_conv *mt = cg_conv_transpose3d_new(2, 2, 2, 2, 2, &ct, true, &r);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 2, 3, 4, 5)), true);
    cg_tensor *xb = cg_requires_grad(cg_k_to(x, CG_BF16), true);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 2, 2, 3)), true);
    ck_assert_msg(m && mt && xb, "%s", cg_last_error());
    void *ctx[5] = {m, mt, x, xb, w};
    const int failed = every_allocation_fails(conv3d_call, ctx);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(conv3d_call(ctx)); /* and it runs once memory is back */
    cg_module_free(CG_MODULE(m));
    cg_module_free(CG_MODULE(mt));
    cg_release_all(3, x, xb, w);
}
END_TEST

/* A ReduceLROnPlateau made and stepped: its one allocation failing is its
 * own error, nothing leaked */
static bool plateau_run(void *ctx)
{
    (void)ctx;
    cg_plateau *p = cg_plateau_new(CG_PLATEAU_MIN, 0.5, 0, 0.0, CG_PLATEAU_REL, 0, 0.0, 0.0);
    if (!p) {
        ck_assert_str_eq(cg_last_error(), "plateau_new: out of memory");
        return false;
    }
    double lr = cg_plateau_step(p, 1.0, 0.1);
    lr = cg_plateau_step(p, 1.0, lr); /* not better: cut */
    cg_plateau_free(p);
    return lr == 0.05;
}

START_TEST(test_plateau_oom)
{
    ck_assert_int_eq(every_allocation_fails(plateau_run, NULL), 1);
    ck_assert(plateau_run(NULL));
}
END_TEST

/* F.unfold (strided, padded, dilated, a bfloat16 input) and F.fold of
 * its result through nn.Fold, forward and backward; then a transposed
 * convolution's forward(x, output_size) */
static bool unfold_run(void *ctx)
{
    cg_tensor *x = ((void **)ctx)[0], *xb = ((void **)ctx)[1];
    cg_module *f = ((void **)ctx)[2];
    cg_conv *m = ((void **)ctx)[3];
    cg_fold_cfg c = {{3, 2}, {1, 2}, {1, 1}, {2, 1}};
    cg_tensor *u = cg_unfold(x, &c), *ub = cg_unfold(xb, &c);
    cg_tensor *y = u ? cg_module_forward(f, u) : NULL;
    const int64_t size[2] = {12, 14};
    cg_tensor *t = cg_conv_transpose_forward(m, x, 2, size);
    cg_tensor *s[3] = {y ? cg_sum_all(y) : NULL, ub ? cg_sum_all(ub) : NULL,
                       t ? cg_sum_all(t) : NULL};
    cg_tensor *a = s[0] && s[1] ? cg_add(s[0], s[1]) : NULL;
    cg_tensor *l = a && s[2] ? cg_add(a, s[2]) : NULL;
    const bool ok = l && cg_backward(l, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release_all(9, u, ub, y, t, s[0], s[1], s[2], a, l);
    cg_zero_grad(x);
    cg_zero_grad(xb);
    for (int i = 0; i < m->base.n_params; i++)
        cg_zero_grad(m->base.params[i].tensor);
    return ok;
}

START_TEST(test_unfold_oom)
{
    cg_rng r = cg_rng_new(8);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 5, 6)), true);
    cg_tensor *xb = cg_requires_grad(cg_k_to(x, CG_BF16), true);
    cg_fold_cfg c = {{3, 2}, {1, 2}, {1, 1}, {2, 1}};
    cg_module *f = cg_fold_new(5, 6, &c);
    cg_conv_cfg cc = CG_CONV_DEFAULT;
    cc.stride[0] = cc.stride[1] = 2;
    cg_conv *m = cg_conv_transpose2d_new(3, 2, 3, 3, &cc, true, &r);
    ck_assert_msg(f && m, "%s", cg_last_error());
    void *ctx[4] = {x, xb, f, m};
    const int failed = every_allocation_fails(unfold_run, ctx);
    ck_assert_msg(failed > 10, "only %d runs failed", failed);
    ck_assert(unfold_run(ctx)); /* and it runs once memory is back */
    cg_module_free(f);
    cg_module_free(CG_MODULE(m));
    cg_release_all(2, x, xb);
}
END_TEST

/* PReLU (a module: its weight's gradient too), rrelu in training, glu, the
 * pixel shuffles and softmin, fp32 and bf16, forward and backward */
static bool acts_run(void *ctx)
{
    cg_tensor *x = ((void **)ctx)[0], *xb = ((void **)ctx)[1];
    cg_module *p = ((void **)ctx)[2];
    cg_module *sm = ((void **)ctx)[3];
    cg_rng d = cg_rng_new(2);
    cg_tensor *t[7] = {cg_module_forward(p, x),
                       cg_rrelu(x, 0.1f, 0.3f, true, &d),
                       cg_glu(x, 1),
                       cg_pixel_unshuffle(x, 2),
                       cg_module_forward(sm, x),
                       cg_prelu(xb, p->params[0].tensor),
                       cg_glu(xb, -1)};
    cg_tensor *s[7] = {NULL}, *sum = NULL;
    bool ok = true;
    for (int i = 0; i < 7; i++) {
        cg_tensor *sq = t[i] ? cg_mul(t[i], t[i]) : NULL;
        s[i] = sq ? cg_sum_all(sq) : NULL;
        cg_release(sq);
        cg_tensor *next = sum && s[i] ? cg_add(sum, s[i]) : s[i] ? cg_to(s[i], CG_F32) : NULL;
        ok = ok && next;
        cg_release(sum);
        sum = next;
    }
    ok = ok && cg_backward(sum, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    for (int i = 0; i < 7; i++)
        cg_release_all(2, t[i], s[i]);
    cg_release(sum);
    cg_zero_grad(x);
    cg_zero_grad(xb);
    cg_zero_grad(p->params[0].tensor);
    return ok;
}

START_TEST(test_acts_oom)
{
    cg_rng r = cg_rng_new(9);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4, 4, 6)), true);
    cg_tensor *xb = cg_requires_grad(cg_k_to(x, CG_BF16), true);
    cg_module *p = cg_prelu_new(4, 0.25f), *sm = cg_softmin_new(1);
    ck_assert_msg(p && sm, "%s", cg_last_error());
    void *ctx[4] = {x, xb, p, sm};
    ck_assert_int_gt(every_allocation_fails(acts_run, ctx), 10);
    ck_assert(acts_run(ctx)); /* and it runs once memory is back */
    cg_module_free(p), cg_module_free(sm);
    cg_release_all(2, x, xb);
}
END_TEST

/* embedding_bag (sum with per_sample_weights, max), local_response_norm,
 * channel_shuffle, forward and backward */
static bool bag_run(void *ctx)
{
    cg_tensor *w = ((void **)ctx)[0], *psw = ((void **)ctx)[1], *x = ((void **)ctx)[2];
    cg_tensor *ids = ((void **)ctx)[3], *off = ((void **)ctx)[4];
    cg_bag_opts sum = {.mode = CG_BAG_SUM, .offsets = off, .per_sample_weights = psw};
    cg_bag_opts max = {.mode = CG_BAG_MAX, .offsets = off};
    cg_tensor *t[4] = {cg_embedding_bag(w, ids, &sum), cg_embedding_bag(w, ids, &max),
                       cg_local_response_norm(x, 3, 0.1f, 0.75f, 1.0f), cg_channel_shuffle(x, 2)};
    cg_tensor *sum_all = NULL;
    bool ok = true;
    for (int i = 0; i < 4; i++) {
        cg_tensor *s = t[i] ? cg_sum_all(t[i]) : NULL;
        cg_tensor *next = sum_all && s ? cg_add(sum_all, s) : s ? cg_retain(s) : NULL;
        ok = ok && next;
        cg_release_all(2, sum_all, s);
        sum_all = next;
    }
    ok = ok && cg_backward(sum_all, NULL, false);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    for (int i = 0; i < 4; i++)
        cg_release(t[i]);
    cg_release(sum_all);
    cg_zero_grad(w), cg_zero_grad(psw), cg_zero_grad(x);
    return ok;
}

START_TEST(test_bag_oom)
{
    cg_rng r = cg_rng_new(10);
    cg_tensor *w = cg_requires_grad(cg_randn(&r, CG_SHAPE(5, 3)), true);
    cg_tensor *psw = cg_requires_grad(cg_randn(&r, CG_SHAPE(4)), true);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 4, 3)), true);
    cg_tensor *ids = cg_test_ids(4, (int64_t[]){0, 4, 2, 2});
    cg_tensor *off = cg_test_ids(2, (int64_t[]){0, 1});
    void *ctx[5] = {w, psw, x, ids, off};
    ck_assert_int_gt(every_allocation_fails(bag_run, ctx), 10);
    ck_assert(bag_run(ctx)); /* and it runs once memory is back */
    cg_release_all(3, w, psw, x);
}
END_TEST

/* The random tensors (core/random.h) of both generators, the init
 * functions that allocate (nn/init.h), the dropouts with a noise forward
 * and backward, parameters_to_vector's graph and vector_to_parameters,
 * clip_grad_value and clip_grad_norm's other norms */
static bool random_run(void *ctx)
{
    cg_tensor *x = ((void **)ctx)[0], *p = ((void **)ctx)[1];
    cg_module *m = ((void **)ctx)[2];
    cg_rng r = cg_rng_new(5);
    cg_mt19937 g;
    cg_mt19937_seed(&g, 5);
    cg_tensor *t[16] = {cg_bernoulli(&r, p),
                        cg_bernoulli_torch(&g, p),
                        cg_rand_like(&r, p),
                        cg_randn_like_torch(&g, p),
                        cg_randint_like(&r, p, 0, 9),
                        cg_normal(&r, p, p),
                        cg_normal_torch(&g, p, p),
                        cg_poisson(&r, p),
                        cg_poisson_torch(&g, p),
                        cg_multinomial_tensor(&r, p, 4, true),
                        cg_multinomial_tensor(&r, p, 3, false),
                        cg_multinomial_torch(&g, p, 4, true),
                        cg_multinomial_torch(&g, p, 3, false),
                        cg_randperm_tensor(&r, 7),
                        cg_randperm_torch(&g, 7),
                        cg_randint(&r, 0, 5, CG_SHAPE(3))};
    bool ok = true;
    for (int i = 0; i < 16; i++) {
        ok = ok && t[i];
        cg_release(t[i]);
    }
    cg_tensor *w = cg_empty(CG_SHAPE(6, 4));
    ok = ok && w && cg_init_trunc_normal_(w, &r, 0, 1, -2, 2) && cg_init_sparse_(w, &r, 0.5, 0.1) &&
         cg_init_sparse_torch_(w, &g, 0.5, 0.1) &&
         cg_init_trunc_normal_torch_(w, &g, 0, 1, -2, 2) &&
         cg_init_kaiming_normal_(w, &r, 0, NULL, NULL) && cg_init_eye_(w) &&
         cg_bernoulli_(w, &r, 0.5);
    cg_release(w);
    cg_tensor *d[4] = {cg_dropout2d(x, 0.5f, &r, true), cg_alpha_dropout(x, 0.3f, &r, true),
                       cg_feature_alpha_dropout(x, 0.3f, &r, true), cg_parameters_to_vector(m)};
    cg_tensor *sum = NULL;
    for (int i = 0; i < 4; i++) {
        cg_tensor *s = d[i] ? cg_sum_all(d[i]) : NULL;
        cg_tensor *next = sum && s ? cg_add(sum, s) : s ? cg_retain(s) : NULL;
        ok = ok && next;
        cg_release_all(3, sum, s, d[i]);
        sum = next;
    }
    ok = ok && cg_backward(sum, NULL, false);
    cg_release(sum);
    cg_param_list l = {0};
    ok = ok && cg_clip_grad_value(1, &x, 0.5) && cg_clip_grad_norm_ex(1, &x, 1.0, 3, false) >= 0 &&
         cg_module_params(m, &l);
    cg_tensor *vec = ok ? cg_zeros(CG_SHAPE(cg_module_num_params(m))) : NULL;
    ok = ok && vec && cg_vector_to_parameters(vec, m);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    cg_release(vec);
    cg_param_list_free(&l);
    cg_zero_grad(x);
    cg_module_zero_grad(m);
    return ok;
}

START_TEST(test_random_oom)
{
    cg_rng r = cg_rng_new(11);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 4, 5)), true);
    cg_tensor *p = cg_rand(&r, CG_SHAPE(3, 6));
    cg_module *m = CG_MODULE(cg_linear_new(3, 2, true, &r));
    void *ctx[3] = {x, p, m};
    ck_assert_int_gt(every_allocation_fails(random_run, ctx), 10);
    ck_assert(random_run(ctx)); /* and it runs once memory is back */
    cg_module_free(m);
    cg_release_all(2, x, p);
}
END_TEST

/* The ops of autograd/ops_select.c and ops_pointwise.c: each node's
 * recording failing is an error, never a detached result */
START_TEST(test_misc_record_oom)
{
    cg_tensor *a = leaf(), *b = leaf();
    cg_tensor *m = cg_from_bool(CG_SHAPE(3), (const bool[]){1, 0, 1});
    cg_tensor *a3 = cg_requires_grad(cg_from_data(CG_SHAPE(3), (const float[]){1, 2, 3}), true);
    ASSERT_OOM(cg_masked_select(a, m));
    ASSERT_OOM(cg_masked_scatter(a, m, b));
    ASSERT_OOM(cg_nan_to_num(a, 0, NULL, NULL));
    ASSERT_OOM(cg_fmod(a, b));
    ASSERT_OOM(cg_remainder_scalar(a, 1.5));
    ASSERT_OOM(cg_lerp(a, b, b));
    ASSERT_OOM(cg_lerp_scalar(a, b, 0.5f));
    ASSERT_OOM(cg_clamp_tensor(a, NULL, b));
    ASSERT_OOM(cg_cross(a, b, 1));
    ASSERT_OOM(cg_diff(a, 1, 1, NULL, NULL));
    ASSERT_OOM(cg_trapezoid(a, 0.5, 1));
    ASSERT_OOM(cg_rot90(a, 1, 0, 1));
    ASSERT_OOM(cg_msort(a));
    ASSERT_OOM(cg_cartesian_prod((cg_tensor *[]){a3, a3}, 2));
    cg_release_all(5, a, b, m, a3, NULL);
}
END_TEST

/* Every allocation in turn failing in those ops, forward and backward,
 * and in the kernels without a gradient (core/select.c, search.c,
 * pointwise.c, the integer sorts): NULL or false with an error, no tensor
 * leaked, never a crash */
static bool misc_run(void *ctx)
{
    cg_tensor **in = ctx; /* x [2, 3], y [2, 3] (grad), mask [3], ids [4], w [4] */
    cg_tensor *x = in[0], *y = in[1], *m = in[2], *ids = in[3], *w = in[4];
    cg_tensor *xs = cg_from_data(CG_SHAPE(3), (const float[]){0, 1, 3});
    cg_tensor *grid[2] = {NULL, NULL};
    const bool mg = xs && cg_meshgrid((cg_tensor *[]){xs, xs}, 2, CG_MESHGRID_XY, grid);
    cg_tensor *t[14] = {cg_masked_select(x, m),
                        cg_masked_scatter(x, m, y),
                        cg_nan_to_num(x, 1, NULL, NULL),
                        cg_fmod(x, y),
                        cg_remainder(x, y),
                        cg_lerp(x, y, y),
                        cg_clamp_tensor(x, y, NULL),
                        cg_cross(x, y, 1),
                        cg_diff(x, 2, 1, y, NULL),
                        xs ? cg_trapezoid_x(x, xs, 1) : NULL,
                        cg_rot90(x, 3, 0, 1),
                        mg ? cg_add(grid[0], grid[1]) : NULL,
                        cg_clamp_tensor(x, NULL, y),
                        cg_lerp_scalar(x, y, 0.7f)};
    cg_tensor *sum = NULL;
    bool ok = mg;
    for (int i = 0; i < 14; i++) {
        cg_tensor *s = t[i] ? cg_sum_all(t[i]) : NULL;
        cg_tensor *next = sum && s ? cg_add(sum, s) : s ? cg_retain(s) : NULL;
        ok = ok && next;
        cg_release_all(2, sum, s);
        sum = next;
    }
    ok = ok && cg_backward(sum, NULL, false);
    for (int i = 0; i < 14; i++)
        cg_release(t[i]);
    cg_release_all(4, sum, xs, grid[0], grid[1]);
    cg_zero_grad(x), cg_zero_grad(y);
    /* no gradient: their results checked for being made */
    cg_tensor *xd = cg_detach(x), *inv = NULL, *cnt = NULL, *ix = NULL;
    cg_tensor *xi = xd ? cg_k_to(xd, CG_I64) : NULL, *row = xi ? cg_select(xi, 0, 0) : NULL;
    cg_tensor *bd = xd ? cg_select(xd, 0, 0) : NULL;
    cg_tensor *u[16] = {row ? cg_searchsorted(row, xi, &(cg_search_opts){.right = true}) : NULL,
                        bd ? cg_bucketize(xd, bd, false, false) : NULL,
                        cg_bincount(ids, w, 2),
                        xd ? cg_histc(xd, 4, 0, 0) : NULL,
                        xd ? cg_unique(xd, true, &inv, &cnt) : NULL,
                        xi ? cg_unique_dim(xi, 1, true, NULL, NULL) : NULL,
                        xi ? cg_unique_consecutive(xi, NULL, NULL) : NULL,
                        xd ? cg_isclose(xd, xd, 1e-5, 1e-8, true) : NULL,
                        xd ? cg_count_nonzero(xd, 1, (const int[]){1}) : NULL,
                        xd ? cg_any(xd, 1, (const int[]){0}, true) : NULL,
                        xd ? cg_isnan(xd) : NULL,
                        xi ? cg_sort(xi, 1, true, true, &ix) : NULL,
                        xi ? cg_topk(xi, 2, 1, false, NULL) : NULL,
                        xi ? cg_cummax(xi, 0, NULL) : NULL,
                        xi ? cg_fmod_scalar(xi, 2) : NULL,
                        xi ? cg_diff(xi, 1, 0, NULL, NULL) : NULL};
    bool r = false;
    ok = ok && xd && xi && row && bd && inv && cnt && ix &&
         cg_allclose(xd, xd, 1e-5, 1e-8, false, &r) && cg_equal(xd, xi, &r);
    for (int i = 0; i < 16; i++) {
        ok = ok && u[i];
        cg_release(u[i]);
    }
    cg_release_all(7, xd, xi, row, bd, inv, cnt, ix);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    return ok;
}

START_TEST(test_misc_oom)
{
    cg_rng r = cg_rng_new(12);
    cg_tensor *x = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3)), true);
    cg_tensor *y = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3)), true);
    cg_tensor *m = cg_from_bool(CG_SHAPE(3), (const bool[]){1, 0, 1});
    cg_tensor *ids = cg_test_ids(4, (int64_t[]){0, 1, 1, 3});
    cg_tensor *w = cg_from_data(CG_SHAPE(4), (const float[]){1, 2, 3, 4});
    void *ctx[5] = {x, y, m, ids, w};
    ck_assert_int_gt(every_allocation_fails(misc_run, ctx), 10);
    ck_assert(misc_run(ctx)); /* and it runs once memory is back */
    cg_release_all(4, x, y, m, w);
}
END_TEST

/* torch.linalg's ops forward and backward (ctx: a batch of two
 * positive-definite 3 x 3 matrices and of two 3 x 2 ones): every malloc
 * and calloc of them failing in turn gives an error or a success, and
 * leaves no tensor behind */
static bool linalg_run(void *ctx)
{
    cg_tensor *a = ((cg_tensor **)ctx)[0], *b = ((cg_tensor **)ctx)[1];
    cg_tensor *lad = NULL, *r = NULL, *v = NULL, *s = NULL, *vh = NULL;
    cg_tensor *t[20] = {cg_linalg_solve(a, b),
                        cg_linalg_inv(a),
                        cg_linalg_det(a),
                        cg_linalg_slogdet(a, &lad),
                        NULL,
                        cg_linalg_cholesky(a, true),
                        cg_linalg_qr(b, NULL, &r),
                        NULL,
                        cg_linalg_eigh(a, "U", &v),
                        NULL,
                        cg_linalg_eigvalsh(a, NULL),
                        cg_linalg_svd(b, false, &s, &vh),
                        NULL,
                        NULL,
                        cg_linalg_svdvals(b),
                        cg_linalg_pinv(b, -1, -1),
                        cg_linalg_lstsq(b, a, -1),
                        cg_linalg_vector_norm(b, 3.0, 1, (int[]){1}, true),
                        cg_linalg_matrix_norm(b, "1", NULL, false),
                        cg_linalg_matrix_norm(a, "-2", NULL, false)};
    t[4] = lad, t[7] = r, t[9] = v, t[12] = s, t[13] = vh;
    cg_tensor *sum_all = NULL;
    bool ok = true;
    for (int i = 0; i < 20; i++) {
        cg_tensor *q = t[i] ? cg_sum_all(t[i]) : NULL;
        cg_tensor *next = sum_all && q ? cg_add(sum_all, q) : q ? cg_retain(q) : NULL;
        ok = ok && next;
        cg_release_all(2, sum_all, q);
        sum_all = next;
    }
    ok = ok && cg_backward(sum_all, NULL, false);
    cg_rng rng = cg_rng_new(4); /* nn.init.orthogonal_: its draw and QR */
    ok = ok && cg_init_orthogonal_(((cg_tensor **)ctx)[2], 1.0f, &rng);
    ck_assert_msg(ok || *cg_last_error(), "a failure without an error");
    for (int i = 0; i < 20; i++)
        cg_release(t[i]);
    cg_release(sum_all);
    cg_zero_grad(a), cg_zero_grad(b);
    return ok;
}

START_TEST(test_linalg_oom)
{
    const float spd[9] = {4, 1, 2, 1, 5, 3, 2, 3, 6};
    cg_tensor *a1 = cg_from_data(CG_SHAPE(3, 3), spd), *e = cg_expand(a1, 3, (int64_t[]){2, 3, 3});
    cg_tensor *a = cg_requires_grad(cg_k_contiguous(e), true);
    cg_rng r = cg_rng_new(11);
    cg_tensor *b = cg_requires_grad(cg_randn(&r, CG_SHAPE(2, 3, 2)), true);
    cg_tensor *o = cg_zeros(CG_SHAPE(3, 2, 2)), *ctx[3] = {a, b, o};
    ck_assert_int_gt(every_allocation_fails(linalg_run, ctx), 10);
    ck_assert(linalg_run(ctx)); /* and it runs once memory is back */
    cg_release_all(5, a1, e, a, b, o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("record_oom");
    TCase *tc = tcase_create("record");
    tcase_add_test(tc, test_record_failure_is_an_error);
    tcase_add_test(tc, test_record_failure_nn_ops);
    tcase_add_test(tc, test_loader_failure_is_not_an_epoch_end);
    tcase_add_test(tc, test_st_header_oom_is_an_error);
    tcase_add_test(tc, test_lora_load_oom_is_an_error);
    tcase_add_test(tc, test_lora_attach_oom_is_an_error);
    tcase_add_test(tc, test_first_overflow_oom_is_an_error);
    tcase_add_test(tc, test_topk_oom_is_an_error);
    tcase_add_test(tc, test_scan_oom_is_an_error);
    tcase_add_test(tc, test_grad2_oom);
    tcase_add_test(tc, test_packed_f32_oom_reads_w);
    tcase_add_test(tc, test_scope_full_oom_is_an_error);
    tcase_add_test(tc, test_rnn_lengths_oom);
    tcase_add_test(tc, test_loss_reductions_oom);
    tcase_add_test(tc, test_pad_modes_oom);
    tcase_add_test(tc, test_pool_oom);
    tcase_add_test(tc, test_interp_oom);
    tcase_add_test(tc, test_optims_oom);
    tcase_add_test(tc, test_norm_oom);
    tcase_add_test(tc, test_plateau_oom);
    tcase_add_test(tc, test_conv3d_oom);
    tcase_add_loop_test(tc, test_conv_oom, 0, 2);
    tcase_add_test(tc, test_unfold_oom);
    tcase_add_test(tc, test_acts_oom);
    tcase_add_test(tc, test_loss_more_oom);
    tcase_add_test(tc, test_bag_oom);
    tcase_add_test(tc, test_ctc_oom);
    tcase_add_test(tc, test_random_oom);
    tcase_add_test(tc, test_misc_record_oom);
    tcase_add_test(tc, test_misc_oom);
    tcase_add_test(tc, test_linalg_oom);
    suite_add_tcase(s, tc);
    return cg_test_run(&s, 1);
}
