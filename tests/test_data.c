/* Data on tensors (nn/data.h, issue 31): pad_sequence, the loader over
 * variable-length sequences, a loader over labels of any dtype, and the
 * refusals a new user meets. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "nn/data.h"
#include "nn/nn.h"
#include "testutil.h"

/* Three sequences of lengths 3, 1 and 0 padded into [3, 3] and the mask. */
START_TEST(test_pad_sequence_ids_and_mask)
{
    cg_tensor *s[3] = {cg_test_ids(3, (const int64_t[]){5, 6, 7}),
                       cg_test_ids(1, (const int64_t[]){8}), cg_test_ids(0, NULL)};
    cg_tensor *mask, *x = cg_pad_sequence(3, s, -1, &mask);
    ck_assert(x && x->dtype == CG_I64 && x->ndim == 2 && x->shape[0] == 3 && x->shape[1] == 3);
    const int64_t want[9] = {5, 6, 7, 8, -1, -1, -1, -1, -1};
    ck_assert(!memcmp(cg_data_i64(x), want, sizeof want));
    ck_assert(mask && mask->dtype == CG_BOOL && mask->ndim == 2 && mask->shape[1] == 3);
    const bool pad[9] = {0, 0, 0, 0, 1, 1, 1, 1, 1};
    ck_assert(!memcmp(cg_data_bool(mask), pad, sizeof pad));
    cg_release_all(2, x, mask);
    /* no mask asked for; a strided sequence (every other token) */
    cg_tensor *all = cg_test_ids(6, (const int64_t[]){1, 2, 3, 4, 5, 6});
    cg_tensor *odd = cg_view_slice(all, 0, 0, 6, 2), *t[2] = {odd, s[1]};
    x = cg_pad_sequence(2, t, 0, NULL);
    ck_assert(!memcmp(cg_data_i64(x), (const int64_t[]){1, 3, 5, 8, 0, 0}, 6 * sizeof(int64_t)));
    cg_release_all(2, x, odd);
}
END_TEST

/* Float sequences [L, D]: padded to [n, max L, D] with the value given. */
START_TEST(test_pad_sequence_trailing_dims)
{
    cg_tensor *a = cg_full(CG_SHAPE(2, 3), 1.5f), *b = cg_full(CG_SHAPE(1, 3), -2.0f);
    cg_tensor *bf = cg_k_to(b, CG_BF16), *s[2] = {a, b}, *mixed[2] = {a, bf};
    cg_tensor *x = cg_pad_sequence(2, s, 0.25, NULL);
    ck_assert(x->ndim == 3 && x->shape[0] == 2 && x->shape[1] == 2 && x->shape[2] == 3);
    const float want[12] = {1.5f, 1.5f, 1.5f, 1.5f, 1.5f, 1.5f, -2, -2, -2, .25f, .25f, .25f};
    CG_ASSERT_TENSOR(x, want, 0, 0);
    cg_release(x);
    CG_ASSERT_FAILS(cg_pad_sequence(2, mixed, 0, NULL),
                    "cg_pad_sequence: sequence 1 is bfloat16, sequence 0 is float32");
    cg_tensor *c = cg_full(CG_SHAPE(2, 4), 0), *other[2] = {a, c};
    CG_ASSERT_FAILS(cg_pad_sequence(2, other, 0, NULL),
                    "cg_pad_sequence: sequence 1 has shape [2, 4], sequence 0 [2, 3]");
    cg_tensor *none[2] = {a, NULL};
    CG_ASSERT_FAILS(cg_pad_sequence(2, none, 0, NULL), "cg_pad_sequence: sequence 1 is NULL");
    CG_ASSERT_FAILS(cg_pad_sequence(0, s, 0, NULL), "need at least one sequence");
    cg_tensor *d = cg_scalar(1), *scalar[2] = {d, a};
    CG_ASSERT_FAILS(cg_pad_sequence(2, scalar, 0, NULL),
                    "cg_pad_sequence: sequence 0 has shape [], expected [L, ...]");
    cg_release_all(5, a, b, bf, c, d);
    cg_clear_error();
}
END_TEST

/* A BERT-style data set: N sentences of varying length with labels; every
 * sentence once per epoch, each batch padded to its own longest, the mask
 * true exactly at the padding, the labels along. */
START_TEST(test_loader_over_sequences)
{
    enum { N = 7 };
    cg_tensor *seqs[N];
    int64_t lab[N];
    for (int i = 0; i < N; i++) {
        int64_t ids[8];
        for (int j = 0; j <= i % 4; j++)
            ids[j] = 10 * i + j + 1; /* sentence i: 10i+1, 10i+2, ... (length i%4 + 1) */
        seqs[i] = cg_from_i64(1, (int64_t[]){i % 4 + 1}, ids);
        lab[i] = i % 2;
    }
    cg_tensor *y = cg_from_i64(1, (int64_t[]){N}, lab);
    cg_rng r = cg_rng_new(3);
    cg_loader *ld = cg_loader_new_seqs(N, seqs, y, 0, 3, &r);
    cg_release_all(1, y); /* the loader holds what it needs */
    for (int i = 0; i < N; i++)
        cg_release(seqs[i]);
    int seen[N] = {0}, batches = 0;
    int64_t live = cg_live_tensors();
    while (cg_loader_next(ld)) {
        batches++;
        int64_t n = ld->n, T = ld->x->shape[1], longest = 0;
        ck_assert(ld->x->dtype == CG_I64 && ld->mask && ld->mask->dtype == CG_BOOL);
        ck_assert(ld->mask->shape[0] == n && ld->mask->shape[1] == T && ld->y->shape[0] == n);
        const int64_t *x = cg_data_i64(ld->x), *yb = cg_data_i64(ld->y);
        const bool *m = cg_data_bool(ld->mask);
        for (int64_t b = 0; b < n; b++) {
            int i = (int)(x[b * T] / 10), L = i % 4 + 1;
            seen[i]++;
            longest = L > longest ? L : longest;
            ck_assert_int_eq(yb[b], i % 2);
            for (int64_t t = 0; t < T; t++) {
                ck_assert_int_eq(m[b * T + t], t >= L);
                ck_assert_int_eq(x[b * T + t], t < L ? 10 * i + t + 1 : 0);
            }
        }
        ck_assert_int_eq(T, longest); /* padded to the batch's longest */
        ck_assert_int_le(cg_live_tensors(), live + 3);
    }
    ck_assert_msg(!cg_has_error(), "%s", cg_last_error());
    ck_assert_int_eq(batches, 3);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(seen[i], 1);
    cg_loader_free(ld);
}
END_TEST

/* Labels of any dtype: float regression targets [N, 2] follow their rows. */
START_TEST(test_loader_float_targets)
{
    cg_tensor *x = cg_arange_dtype(CG_F32, 0, 10, 1), *y = cg_empty(CG_SHAPE(10, 2));
    for (int i = 0; i < 10; i++)
        cg_data(y)[2 * i] = 100.0f + i, cg_data(y)[2 * i + 1] = -(float)i;
    cg_loader *ld = cg_loader_new(x, y, 4, NULL); /* no rng: in order */
    int64_t seen = 0;
    while (cg_loader_next(ld))
        for (int64_t j = 0; j < ld->n; j++, seen++) {
            ck_assert_float_eq(cg_data(ld->x)[j], (float)seen);
            ck_assert_float_eq(cg_data(ld->y)[2 * j], 100.0f + seen);
            ck_assert_float_eq(cg_data(ld->y)[2 * j + 1], -(float)seen);
        }
    ck_assert_int_eq(seen, 10);
    cg_loader_free(ld);
    cg_release_all(2, x, y);
}
END_TEST

/* Inputs alone (an autoencoder's, a VAE's: DataLoader(x)): y NULL gives
 * batches of x with ld->y NULL, every row once an epoch, shuffled. */
START_TEST(test_loader_without_labels)
{
    cg_rng r = cg_rng_new(2);
    cg_tensor *x = cg_arange_dtype(CG_F32, 0, 10, 1);
    cg_loader *ld = cg_loader_new(x, NULL, 4, &r);
    ck_assert_msg(ld != NULL, "%s", cg_last_error());
    for (int epoch = 0; epoch < 2; epoch++) {
        int seen[10] = {0}, n = 0;
        while (cg_loader_next(ld)) {
            ck_assert_ptr_null(ld->y);
            ck_assert_int_eq(ld->x->shape[0], ld->n);
            for (int64_t j = 0; j < ld->n; j++, n++)
                seen[(int)cg_data(ld->x)[j]]++;
        }
        ck_assert(!ld->failed);
        ck_assert_int_eq(n, 10);
        for (int i = 0; i < 10; i++)
            ck_assert_int_eq(seen[i], 1);
    }
    cg_loader_free(ld);
    cg_tensor *seqs[2] = {cg_arange_dtype(CG_I64, 0, 3, 1), cg_arange_dtype(CG_I64, 0, 2, 1)};
    ld = cg_loader_new_seqs(2, seqs, NULL, 0, 2, NULL);
    ck_assert_msg(ld && cg_loader_next(ld), "%s", cg_last_error());
    ck_assert(!ld->y && ld->mask && ld->x->shape[0] == 2 && ld->x->shape[1] == 3);
    cg_loader_free(ld);
    cg_release_all(3, x, seqs[0], seqs[1]);
}
END_TEST

/* A loop left early (break) and a new one: cg_loader_restart starts a new
 * epoch, as a new `for x in loader` does in PyTorch (a new order, every
 * row once); without it the new loop continues the old epoch. */
START_TEST(test_loader_restart)
{
    cg_rng r = cg_rng_new(5);
    cg_tensor *x = cg_arange_dtype(CG_I64, 0, 10, 1);
    cg_loader *ld = cg_loader_new(x, NULL, 3, &r);
    ck_assert_msg(ld != NULL, "%s", cg_last_error());
    ck_assert(cg_loader_next(ld) && ld->epoch == 1); /* one batch, then break */
    cg_loader_restart(ld);
    ck_assert(ld->x == NULL && ld->n == 0);
    int seen[10] = {0}, n = 0;
    while (cg_loader_next(ld))
        for (int64_t j = 0; j < ld->n; j++, n++)
            seen[cg_data_i64(ld->x)[j]]++;
    ck_assert(!ld->failed && ld->epoch == 2);
    ck_assert_int_eq(n, 10);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(seen[i], 1);
    cg_loader_restart(ld); /* at an epoch's end: nothing under way, no epoch lost */
    ck_assert(cg_loader_next(ld) && ld->epoch == 3);
    cg_loader_restart(NULL); /* a no-op */
    cg_loader_free(ld);
    cg_release(x);
}
END_TEST

/* Two loaders in one loop (PyTorch's zip(a, b), or b drawn every other
 * step of a): each batch lives to its own loader's next call. b's scope
 * opened inside a's, so a's next call (which ends a's scope, and with it
 * the inner ones) freed b's batch, which b still published (a use after
 * free), and b's next call then ended a scope that was gone ("scope_end:
 * the scope is not open on this thread", or, had the address been reused,
 * someone else's). */
START_TEST(test_two_loaders_interleaved)
{
    cg_rng r = cg_rng_new(4);
    cg_tensor *xa = cg_arange_dtype(CG_F32, 0, 8, 1), *xb = cg_arange_dtype(CG_F32, 100, 108, 1);
    cg_loader *a = cg_loader_new(xa, NULL, 2, &r), *b = cg_loader_new(xb, NULL, 4, &r);
    ck_assert(a && b);
    cg_clear_error();
    ck_assert(cg_loader_next(a) && cg_loader_next(b));
    float b0 = cg_data(b->x)[0];
    for (int step = 0; step < 3; step++) { /* b's batch serves three steps of a */
        cg_tensor *t = cg_add(a->x, a->x);
        ck_assert(cg_loader_next(a));
        ck_assert(cg_data(b->x)[0] == b0 && b->x->shape[0] == 4);
        cg_tensor *u = cg_add(b->x, b->x); /* made in a's new scope */
        ck_assert(u && cg_data(u)[0] == 2 * b0);
        (void)t;
    }
    ck_assert(cg_loader_next(b) && cg_data(b->x)[0] >= 100);
    ck_assert_msg(!cg_has_error(), "%s", cg_last_error());
    while (cg_loader_next(a) && cg_loader_next(b)) /* zipped: until one epoch ends */
        ck_assert(a->x && b->x);
    ck_assert_msg(!cg_has_error(), "%s", cg_last_error());
    cg_scope *outer = cg_scope_begin(); /* a loop left early, its scope ended by an outer one */
    ck_assert(cg_loader_next(a) || cg_loader_next(a)); /* (after an epoch's end) */
    ck_assert(cg_loader_next(b) || cg_loader_next(b));
    cg_scope_end(outer);
    ck_assert(b->x->shape[0] == 4 && cg_data(b->x)[0] >= 100);
    cg_loader_free(b);
    cg_loader_free(a);
    ck_assert_msg(!cg_has_error(), "%s", cg_last_error());
    cg_release_all(2, xa, xb);
}
END_TEST

/* A padding value the sequences' dtype cannot hold is refused, as
 * PyTorch's pad_sequence refuses it ("value cannot be converted to type
 * int64_t without overflow"): NaN, an infinity or 1e300 padded int64 ids
 * with INT64_MIN, silently, and a float16 pad past its range became inf.
 * A fractional pad is cut toward zero, as torch.full does. */
START_TEST(test_pad_value_must_fit)
{
    cg_tensor *a = cg_arange_dtype(CG_I64, 1, 4, 1), *b = cg_arange_dtype(CG_I64, 1, 2, 1);
    cg_tensor *s[2] = {a, b}, *mask = NULL;
    const double bad[4] = {NAN, INFINITY, 1e300, 0x1p63};
    for (int k = 0; k < 4; k++) {
        CG_ASSERT_FAILS(cg_pad_sequence(2, s, bad[k], &mask), "cg_pad_sequence: padding value");
        ck_assert_ptr_null(mask);
        CG_ASSERT_FAILS(cg_loader_new_seqs(2, s, NULL, bad[k], 2, NULL),
                        "cg_loader_new_seqs: padding value");
    }
    cg_tensor *h[2] = {cg_to(a, CG_F16), cg_to(b, CG_F16)};
    CG_ASSERT_FAILS(cg_pad_sequence(2, h, 1e6, NULL), "cannot be converted to float16");
    cg_tensor *x = cg_pad_sequence(2, h, -INFINITY, NULL); /* an infinity is a float16 */
    ck_assert(x && isinf(cg_elem_get(CG_F16, cg_data_f16(x) + 5)));
    cg_release(x);
    x = cg_pad_sequence(2, s, -1.5, NULL);
    ck_assert(x && cg_data_i64(x)[5] == -1);
    cg_release(x);
    x = cg_pad_sequence(2, s, -0x1p63, NULL); /* INT64_MIN itself fits */
    ck_assert(x && cg_data_i64(x)[5] == INT64_MIN);
    cg_release_all(5, x, a, b, h[0], h[1]);
    cg_clear_error();
}
END_TEST

/* cg_batch_iter's epochs (nn/data.h): n = W T + 1 tokens cut into W
 * windows of T + 1 starting every T; each epoch visits them in the order
 * cg_randperm draws from the rng, the same order a second rng of the same
 * seed draws; a last batch that is full is kept. n = W T tokens give W - 1
 * windows (the last one's target would run past the end). cg_random_batch
 * starts its windows anywhere in [0, n - T - 1]: at n = T + 1 only at 0. */
START_TEST(test_batch_iter_epochs)
{
    cg_tensor *tok = cg_arange_dtype(CG_I64, 0, 13, 1), *x, *y; /* 3 windows of 4 + 1 */
    cg_rng r = cg_rng_new(7), same = cg_rng_new(7);
    cg_batch_iter *it = cg_batch_iter_new(tok, 3, 4, &r);
    ck_assert_msg(it != NULL, "%s", cg_last_error());
    int shuffled = 0;
    for (int epoch = 1; epoch <= 4; epoch++) {
        int64_t *perm = cg_randperm(&same, 3);
        ck_assert_int_eq(cg_batch_iter_next(it, &x, &y), 1); /* 3 windows, B = 3: one batch */
        ck_assert_int_eq(cg_batch_iter_epoch(it), epoch);
        for (int b = 0; b < 3; b++) {
            ck_assert_int_eq(cg_data_i64(x)[b * 4], perm[b] * 4);
            ck_assert_int_eq(cg_data_i64(y)[b * 4 + 3], perm[b] * 4 + 4);
        }
        shuffled += perm[0] != 0 || perm[1] != 1;
        cg_release_all(2, x, y);
        free(perm);
        ck_assert_int_eq(cg_batch_iter_next(it, &x, &y), 0);
    }
    ck_assert_int_gt(shuffled, 0); /* the seed gives an order other than 0 1 2 */
    cg_batch_iter_free(it);
    cg_tensor *twelve = cg_view_narrow(tok, 0, 0, 12); /* 2 windows: 0-4, 4-8 */
    it = cg_batch_iter_new(twelve, 1, 4, &r);
    for (int epoch = 0; epoch < 3; epoch++) {
        int k, batches = 0;
        while ((k = cg_batch_iter_next(it, &x, &y)) == 1) {
            ck_assert_int_le(cg_data_i64(y)[3], 8);
            cg_release_all(2, x, y);
            batches++;
        }
        ck_assert_msg(k == 0, "%s", cg_last_error());
        ck_assert_int_eq(batches, 2);
    }
    cg_batch_iter_free(it);
    cg_tensor *five = cg_view_narrow(tok, 0, 0, 5);
    for (int k = 0; k < 20; k++) {
        ck_assert_msg(cg_random_batch(five, 4, 4, &r, &x, &y), "%s", cg_last_error());
        for (int b = 0; b < 4; b++)
            ck_assert(cg_data_i64(x)[b * 4] == 0 && cg_data_i64(y)[b * 4 + 3] == 4);
        cg_release_all(2, x, y);
    }
    cg_release_all(3, tok, twelve, five);
}
END_TEST

/* What a new user gets wrong, refused in one line naming the argument. */
START_TEST(test_data_refusals)
{
    cg_rng r = cg_rng_new(1);
    cg_tensor *x = NULL, *y = NULL;
    cg_tensor *f = cg_arange_dtype(CG_F32, 0, 50, 1), *i32 = cg_arange_dtype(CG_I32, 0, 50, 1);
    CG_ASSERT_FAILS((void *)(intptr_t)cg_random_batch(f, 2, 4, &r, &x, &y),
                    "cg_random_batch: argument 'tokens' is float32, expected int64");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_random_batch(i32, 2, 4, &r, &x, &y),
                    "argument 'tokens' is int32, expected int64");
    ck_assert(!x && !y);
    CG_ASSERT_FAILS(cg_batch_iter_new(i32, 2, 4, &r), "cg_batch_iter_new: argument 'tokens'");
    cg_tensor *tok = cg_arange_dtype(CG_I64, 0, 50, 1);
    CG_ASSERT_FAILS(cg_batch_iter_new(tok, INT64_MAX / 2, 4, &r), "n >= B*T + 1");
    CG_ASSERT_FAILS((void *)(intptr_t)cg_random_batch(tok, 0, 4, &r, &x, &y), "B=0");
    /* T + 1 overflowed (undefined behaviour), passed the check, and the
     * batch's allocation failed instead: "empty: shape too large" */
    CG_ASSERT_FAILS((void *)(intptr_t)cg_random_batch(tok, 1, INT64_MAX, &r, &x, &y),
                    "cg_random_batch: need tokens of shape [n] with n >= T + 1");
    cg_tensor *two = cg_view_reshape(tok, CG_SHAPE(5, 10));
    CG_ASSERT_FAILS((void *)(intptr_t)cg_random_batch(two, 1, 4, &r, &x, &y), "tokens [5, 10]");
    cg_tensor *seq[1] = {tok};
    CG_ASSERT_FAILS(cg_loader_new_seqs(1, seq, tok, 0, 2, &r),
                    "cg_loader_new_seqs: need 1 labels y [N, ...]");
    CG_ASSERT_FAILS(cg_loader_new(f, tok, 0, &r), "B=0");
    cg_release_all(4, f, i32, tok, two);
    cg_clear_error();
}
END_TEST

static Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("nn");
    tcase_add_test(tc, test_pad_sequence_ids_and_mask);
    tcase_add_test(tc, test_loader_without_labels);
    tcase_add_test(tc, test_loader_restart);
    tcase_add_test(tc, test_pad_sequence_trailing_dims);
    tcase_add_test(tc, test_loader_over_sequences);
    tcase_add_test(tc, test_loader_float_targets);
    tcase_add_test(tc, test_data_refusals);
    tcase_add_test(tc, test_two_loaders_interleaved);
    tcase_add_test(tc, test_pad_value_must_fit);
    tcase_add_test(tc, test_batch_iter_epochs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {data_suite()};
    return cg_test_run(s, 1);
}
