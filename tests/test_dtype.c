/* Dtypes (issue 31): creation, conversion, promotion, accessors, copies,
 * element access and printing for every dtype. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "testutil.h"

START_TEST(test_names_sizes_promotion)
{
    ck_assert_str_eq(cg_dtype_name(CG_F32), "float32");
    ck_assert_str_eq(cg_dtype_name(CG_BF16), "bfloat16");
    ck_assert_str_eq(cg_dtype_name(CG_F16), "float16");
    ck_assert_str_eq(cg_dtype_name(CG_I64), "int64");
    ck_assert_str_eq(cg_dtype_name(CG_I32), "int32");
    ck_assert_str_eq(cg_dtype_name(CG_BOOL), "bool");
    ck_assert_str_eq(cg_dtype_name((cg_dtype)99), "?");
    ck_assert_uint_eq(cg_dtype_size(CG_F32), 4);
    ck_assert_uint_eq(cg_dtype_size(CG_BF16), 2);
    ck_assert_uint_eq(cg_dtype_size(CG_I64), 8);
    ck_assert_uint_eq(cg_dtype_size(CG_BOOL), 1);
    ck_assert(cg_dtype_is_float(CG_BF16) && !cg_dtype_is_float(CG_I64));
    /* torch.promote_types */
    ck_assert_int_eq(cg_promote_types(CG_F32, CG_BF16), CG_F32);
    ck_assert_int_eq(cg_promote_types(CG_BF16, CG_BF16), CG_BF16);
    ck_assert_int_eq(cg_promote_types(CG_BF16, CG_F16), CG_F32);
    ck_assert_int_eq(cg_promote_types(CG_I64, CG_BF16), CG_BF16);
    ck_assert_int_eq(cg_promote_types(CG_I32, CG_I64), CG_I64);
    ck_assert_int_eq(cg_promote_types(CG_BOOL, CG_I32), CG_I32);
    ck_assert_int_eq(cg_promote_types(CG_BOOL, CG_F16), CG_F16);
}
END_TEST

START_TEST(test_scalar_conversions)
{
    /* bf16: round to nearest even, as torch's .to(torch.bfloat16) */
    ck_assert_uint_eq(cg_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(cg_f32_to_bf16(1.00390625f), 0x3f80); /* tie: to even (down) */
    ck_assert_uint_eq(cg_f32_to_bf16(1.01171875f), 0x3f82); /* tie: to even (up) */
    ck_assert_uint_eq(cg_f32_to_bf16(-2.0f), 0xc000);
    ck_assert_uint_eq(cg_f32_to_bf16(INFINITY), 0x7f80);
    ck_assert(isnan(cg_bf16_to_f32(cg_f32_to_bf16(NAN))));
    ck_assert_uint_eq(cg_f32_to_bf16(1e-40f), 0x0001); /* a subnormal is kept */
    ck_assert(cg_bf16_to_f32(0x3f80) == 1.0f);
    ck_assert(cg_bf16_to_f32(0x4049) == 3.140625f);
    /* f16: IEEE half */
    ck_assert_uint_eq(cg_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(cg_f32_to_f16(-2.5f), 0xc100);
    ck_assert_uint_eq(cg_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(cg_f32_to_f16(65520.0f), 0x7c00);        /* rounds up to inf */
    ck_assert_uint_eq(cg_f32_to_f16(0x1p-24f), 0x0001);        /* smallest subnormal */
    ck_assert_uint_eq(cg_f32_to_f16(0x1p-26f), 0x0000);        /* below half of it */
    ck_assert_uint_eq(cg_f32_to_f16(0x5p-25f), 0x0002);        /* subnormal ties: to even (down) */
    ck_assert_uint_eq(cg_f32_to_f16(0x3p-25f), 0x0002);        /* (up) */
    ck_assert_uint_eq(cg_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    ck_assert_uint_eq(cg_f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
    ck_assert(isnan(cg_f16_to_f32(cg_f32_to_f16(NAN))));
    /* a signalling NaN whose payload is all in the bits dropped stays a
     * NaN (torch gives NaN in both), not infinity */
    const uint32_t snan_bits = 0x7f800001u;
    float snan;
    memcpy(&snan, &snan_bits, sizeof snan);
    ck_assert(isnan(cg_bf16_to_f32(cg_f32_to_bf16(snan))));
    ck_assert(isnan(cg_f16_to_f32(cg_f32_to_f16(snan))));
    ck_assert(cg_f16_to_f32(0x3555) == 0.333251953125f);
    ck_assert(cg_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(cg_f16_to_f32(0xfc00) == -INFINITY);
    /* every half round-trips exactly */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = cg_f16_to_f32((uint16_t)h);
        if (!isnan(f))
            ck_assert_uint_eq(cg_f32_to_f16(f), h);
    }
}
END_TEST

START_TEST(test_creation_every_dtype)
{
    for (cg_dtype dt = 0; dt < CG_NDTYPES; dt++) {
        cg_tensor *z = cg_zeros_dtype(dt, CG_SHAPE(2, 3));
        cg_tensor *f = cg_full_dtype(dt, CG_SHAPE(4), 1.0);
        ck_assert(z && f);
        ck_assert_int_eq(z->dtype, dt);
        ck_assert_int_eq(cg_dtype_of(f), dt);
        for (int64_t i = 0; i < 6; i++)
            ck_assert(cg_get(z, (int64_t[]){i / 3, i % 3}) == 0.0f);
        for (int64_t i = 0; i < 4; i++)
            ck_assert(cg_get(f, (int64_t[]){i}) == 1.0f);
        cg_tensor *e = cg_empty_like(f), *zl = cg_zeros_like(f);
        ck_assert_int_eq(e->dtype, dt);
        ck_assert_int_eq(zl->dtype, dt);
        cg_release_all(4, z, f, e, zl);
    }
    cg_tensor *a = cg_arange_dtype(CG_I64, 0, 5, 1);
    ck_assert_int_eq(a->dtype, CG_I64);
    ck_assert_int_eq(cg_numel(a), 5);
    for (int64_t i = 0; i < 5; i++)
        ck_assert_int_eq(cg_data_i64(a)[i], i);
    cg_release(a);
    a = cg_arange_dtype(CG_I64, 10, 0, -3); /* 10 7 4 1 */
    ck_assert_int_eq(cg_numel(a), 4);
    ck_assert_int_eq(cg_data_i64(a)[3], 1);
    cg_release(a);
    CG_ASSERT_REFUSED(cg_arange_dtype(CG_I64, 0, 1e300, 1) == NULL, "2^62");
    /* a few elements, but past int64's range: no cast of them */
    CG_ASSERT_REFUSED(cg_arange_dtype(CG_I64, 0x1p63, 0x1p63 + 4096, 2048) == NULL,
                      "arange: start and stop must be within +-2^62 for int64");
    CG_ASSERT_REFUSED(cg_empty_dtype((cg_dtype)42, CG_SHAPE(2)) == NULL, "unknown dtype");
    cg_tensor *s = cg_scalar_i64(INT64_MAX);
    ck_assert_int_eq(s->ndim, 0);
    ck_assert_int_eq(cg_item_i64(s), INT64_MAX); /* exact, not through float */
    cg_release(s);
}
END_TEST

START_TEST(test_from_arrays)
{
    int64_t ids[] = {3, -1, (int64_t)1 << 60, 7};
    cg_tensor *t = cg_from_i64(CG_SHAPE(2, 2), ids);
    ck_assert_int_eq(t->dtype, CG_I64);
    ck_assert_int_eq(cg_get_i64(t, (int64_t[]){1, 0}), (int64_t)1 << 60);
    ck_assert_int_eq(cg_get_i64(t, (int64_t[]){-1, -1}), 7);
    int64_t back[4];
    ck_assert(cg_copy_to_array(t, back));
    ck_assert(memcmp(back, ids, sizeof ids) == 0);
    cg_release(t);
    bool m[] = {true, false, true};
    t = cg_from_bool(CG_SHAPE(3), m);
    ck_assert_int_eq(t->dtype, CG_BOOL);
    ck_assert(cg_data_bool(t)[0] && !cg_data_bool(t)[1]);
    cg_release(t);
    uint8_t bytes[] = {0, 2, 255};
    t = cg_from_array(CG_BOOL, CG_SHAPE(3), bytes); /* one representation of true */
    ck_assert_uint_eq(((uint8_t *)cg_data_bool(t))[1], 1);
    ck_assert_uint_eq(((uint8_t *)cg_data_bool(t))[2], 1);
    cg_release(t);
    int32_t i32[] = {1, 2};
    t = cg_from_i32(CG_SHAPE(2), i32);
    ck_assert_int_eq(t->dtype, CG_I32);
    ck_assert_int_eq(cg_data_i32(t)[1], 2);
    cg_release(t);
    CG_ASSERT_REFUSED(cg_from_i64(CG_SHAPE(2), NULL) == NULL, "NULL data");
}
END_TEST

START_TEST(test_accessors_check_dtype)
{
    cg_tensor *i = cg_zeros_dtype(CG_I64, CG_SHAPE(3));
    cg_tensor *f = cg_zeros(CG_SHAPE(3));
    CG_ASSERT_REFUSED(cg_data(i) == NULL, "int64, not float32");
    CG_ASSERT_REFUSED(cg_data_i64(f) == NULL, "float32, not int64");
    CG_ASSERT_REFUSED(cg_data_bool(i) == NULL, "not bool");
    CG_ASSERT_REFUSED(cg_data_bf16(f) == NULL, "not bfloat16");
    CG_ASSERT_REFUSED(cg_data_i32(NULL) == NULL, "NULL");
    ck_assert_ptr_nonnull(cg_data_ptr(i));
    ck_assert_ptr_nonnull(cg_data_i64(i));
    CG_ASSERT_REFUSED(!cg_check_f32("softmax", "x", i),
                      "softmax: argument 'x' is int64, expected float32");
    CG_ASSERT_REFUSED(!cg_check_dtype("embedding", "ids", f, CG_I64),
                      "embedding: argument 'ids' is float32, expected int64");
    ck_assert(cg_check_dtype("embedding", "ids", i, CG_I64));
    cg_release_all(2, i, f);
}
END_TEST

START_TEST(test_to_every_pair)
{
    float vals[] = {-2.75f, -1.0f, 0.0f, 0.5f, 1.5f, 3.0f, 100.25f, -0.0f};
    cg_tensor *x = cg_from_data(CG_SHAPE(2, 4), vals);
    for (cg_dtype a = 0; a < CG_NDTYPES; a++) {
        cg_tensor *xa = cg_k_to(x, a);
        ck_assert_int_eq(xa->dtype, a);
        for (cg_dtype b = 0; b < CG_NDTYPES; b++) {
            cg_tensor *xb = cg_k_to(xa, b);
            ck_assert_int_eq(xb->dtype, b);
            for (int i = 0; i < 8; i++) {
                /* the value after two conversions, computed in C */
                double v = vals[i];
                if (a == CG_I64 || a == CG_I32)
                    v = trunc(v);
                else if (a == CG_BOOL)
                    v = v != 0;
                else if (a == CG_BF16)
                    v = cg_bf16_to_f32(cg_f32_to_bf16((float)v));
                else if (a == CG_F16)
                    v = cg_f16_to_f32(cg_f32_to_f16((float)v));
                if (b == CG_I64 || b == CG_I32)
                    v = trunc(v);
                else if (b == CG_BOOL)
                    v = v != 0;
                else if (b == CG_BF16)
                    v = cg_bf16_to_f32(cg_f32_to_bf16((float)v));
                else if (b == CG_F16)
                    v = cg_f16_to_f32(cg_f32_to_f16((float)v));
                float got = cg_get(xb, (int64_t[]){i / 4, i % 4});
                ck_assert_msg(got == (float)v, "%s -> %s: element %d is %g, expected %g",
                              cg_dtype_name(a), cg_dtype_name(b), i, got, v);
            }
            cg_release(xb);
        }
        cg_release(xa);
    }
    cg_release(x);
    /* to the same dtype: a new header over the same storage */
    cg_tensor *y = cg_zeros(CG_SHAPE(2));
    cg_tensor *z = cg_k_to(y, CG_F32);
    ck_assert_ptr_eq(z->storage, y->storage);
    cg_release_all(2, y, z);
}
END_TEST

/* A bfloat16 input beside a float32 one (GELU's backward from its saved
 * bf16 copy): contiguous operands of one shape are widened a run at a time
 * inside the kernel; the bits equal those of the float32 copy's, over
 * several runs with a tail, and so do a broadcast and a strided operand
 * (the whole-copy path). */
START_TEST(test_mixed_bf16_inputs)
{
    cg_rng rng = cg_rng_new(7), *r = &rng;
    const int64_t n = 3 * 16384 + 2048 + 37; /* three runs, a wide chunk, a tail */
    cg_tensor *x = cg_randn(r, CG_SHAPE(n)), *g = cg_randn(r, CG_SHAPE(n));
    cg_tensor *xb = cg_k_to(x, CG_BF16), *xf = cg_k_to(xb, CG_F32);
    cg_tensor *got[] = {cg_k_gelu_backward(xb, g), cg_k_mul(g, xb), cg_k_add(xb, g)};
    cg_tensor *want[] = {cg_k_gelu_backward(xf, g), cg_k_mul(g, xf), cg_k_add(xf, g)};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(got[k]->dtype, CG_F32);
        ck_assert(memcmp(cg_data(got[k]), cg_data(want[k]), (size_t)n * sizeof(float)) == 0);
    }
    /* strided and broadcast bf16 operands */
    cg_tensor *m = cg_randn(r, CG_SHAPE(64, 48)), *mb = cg_k_to(m, CG_BF16);
    cg_tensor *mt = cg_view_transpose(mb, 0, 1), *row = cg_view_narrow(mb, 0, 0, 1);
    cg_tensor *h = cg_randn(r, CG_SHAPE(48, 64)), *h2 = cg_randn(r, CG_SHAPE(64, 48));
    cg_tensor *mtf = cg_k_to(mt, CG_F32), *rowf = cg_k_to(row, CG_F32);
    cg_tensor *a1 = cg_k_mul(mt, h), *b1 = cg_k_mul(mtf, h);
    cg_tensor *a2 = cg_k_add(h2, row), *b2 = cg_k_add(h2, rowf);
    ck_assert(memcmp(cg_data(a1), cg_data(b1), 48 * 64 * sizeof(float)) == 0);
    ck_assert(memcmp(cg_data(a2), cg_data(b2), 64 * 48 * sizeof(float)) == 0);
    cg_release_all(4, x, g, xb, xf);
    for (int k = 0; k < 3; k++)
        cg_release_all(2, got[k], want[k]);
    cg_release_all(12, m, mb, mt, row, h, h2, mtf, rowf, a1, b1, a2, b2);
}
END_TEST

/* Dense views (a permuted contiguous block, as split attention heads
 * are) are recognised, and their bf16 copies keep their strides, read in
 * place; a strided slice and an expanded view are not dense. */
START_TEST(test_dense_views)
{
    cg_rng rng = cg_rng_new(3);
    cg_tensor *x = cg_randn(&rng, CG_SHAPE(2, 5, 3, 4)); /* [B,T,H,dh] */
    cg_tensor *h = cg_view_transpose(x, 1, 2);           /* [B,H,T,dh] */
    cg_tensor *s = cg_view_narrow(x, 1, 1, 3), *one = cg_view_narrow(x, 1, 2, 1);
    cg_tensor *row = cg_view_narrow(x, 0, 0, 1);
    cg_tensor *e = cg_view_expand(row, CG_SHAPE(2, 5, 3, 4));
    ck_assert(cg_is_dense(x) && cg_is_dense(h) && cg_is_dense(row));
    ck_assert(!cg_is_contiguous(h));
    ck_assert(!cg_is_dense(s) && !cg_is_dense(e));
    ck_assert(!cg_is_dense(one)); /* a gap between the batches */
    cg_tensor *hb = cg_k_bf16_operand(h), *sb = cg_k_bf16_operand(s);
    ck_assert_int_eq(hb->dtype, CG_BF16);
    for (int d = 0; d < 4; d++)
        ck_assert_int_eq(hb->strides[d], h->strides[d]);
    ck_assert(cg_is_contiguous(sb));
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 3; i++)
            for (int64_t t = 0; t < 5; t++)
                for (int64_t d = 0; d < 4; d++) {
                    const int64_t at[] = {b, i, t, d}, as[] = {b, t < 3 ? t : 0, i, d};
                    ck_assert(cg_get(hb, at) == cg_bf16_to_f32(cg_f32_to_bf16(cg_get(h, at))));
                    ck_assert(cg_get(sb, as) == cg_bf16_to_f32(cg_f32_to_bf16(cg_get(s, as))));
                }
    cg_tensor *el = cg_empty_dense_like(h, CG_BOOL), *ec = cg_empty_dense_like(s, CG_F32);
    ck_assert_int_eq(el->strides[1], h->strides[1]);
    ck_assert(cg_is_contiguous(ec));
    cg_release_all(10, x, h, s, one, row, e, hb, sb, el, ec);
}
END_TEST

START_TEST(test_to_edge_values)
{
    float v[] = {NAN, INFINITY, -INFINITY, 1e20f, -1e20f, 2147483647.0f, -2.5f, 0.9999f};
    cg_tensor *x = cg_from_data(CG_SHAPE(8), v);
    cg_tensor *l = cg_k_to(x, CG_I64), *i = cg_k_to(x, CG_I32), *b = cg_k_to(x, CG_BOOL);
    int64_t el[] = {INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, 2147483648LL, -2, 0};
    int32_t ei[] = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, -2, 0};
    bool eb[] = {true, true, true, true, true, true, true, true};
    for (int k = 0; k < 8; k++) {
        ck_assert_int_eq(cg_data_i64(l)[k], el[k]);
        ck_assert_int_eq(cg_data_i32(i)[k], ei[k]);
        ck_assert(cg_data_bool(b)[k] == eb[k]);
    }
    /* int64 keeps every bit through int64 copies, wraps into int32 */
    int64_t big[] = {((int64_t)1 << 53) + 1, ((int64_t)1 << 32) + 5};
    cg_tensor *g = cg_from_i64(CG_SHAPE(2), big);
    cg_tensor *g2 = cg_k_clone(g), *g32 = cg_k_to(g, CG_I32);
    ck_assert_int_eq(cg_data_i64(g2)[0], big[0]);
    ck_assert_int_eq(cg_data_i32(g32)[1], 5);
    cg_release_all(7, x, l, i, b, g, g2, g32);
}
END_TEST

START_TEST(test_views_copies_fill)
{
    int64_t ids[] = {0, 1, 2, 3, 4, 5};
    cg_tensor *t = cg_from_i64(CG_SHAPE(2, 3), ids);
    cg_tensor *tr = cg_view_transpose(t, 0, 1); /* [3, 2]: 0 3 1 4 2 5 */
    ck_assert_int_eq(tr->dtype, CG_I64);
    ck_assert_int_eq(cg_get_i64(tr, (int64_t[]){0, 1}), 3);
    cg_tensor *c = cg_k_contiguous(tr);
    ck_assert_int_eq(c->dtype, CG_I64);
    int64_t want[] = {0, 3, 1, 4, 2, 5};
    ck_assert(memcmp(cg_data_i64(c), want, sizeof want) == 0);
    cg_tensor *r = cg_k_reshape(tr, CG_SHAPE(6)); /* needs a copy */
    ck_assert_int_eq(r->dtype, CG_I64);
    ck_assert_int_eq(cg_get_i64(r, (int64_t[]){5}), 5);
    cg_tensor *sel = cg_view_select(t, 0, 1);
    ck_assert_int_eq(cg_get_i64(sel, (int64_t[]){2}), 5);
    /* copy_ converts: floats into an int64 view (strided destination) */
    cg_tensor *src = cg_from_data(CG_SHAPE(3, 2), (float[]){9.7f, -1.2f, 8, 7, 6, 5});
    ck_assert(cg_k_copy_(tr, src));
    ck_assert_int_eq(cg_get_i64(t, (int64_t[]){0, 0}), 9);
    ck_assert_int_eq(cg_get_i64(t, (int64_t[]){1, 0}), -1);
    uint64_t v = cg_version(t);
    ck_assert(cg_fill_(sel, 42));
    ck_assert_int_eq(cg_get_i64(t, (int64_t[]){1, 2}), 42);
    ck_assert(cg_version(t) > v);
    ck_assert(cg_set(t, (int64_t[]){0, 1}, 3.9f));
    ck_assert_int_eq(cg_get_i64(t, (int64_t[]){0, 1}), 3);
    float fl[6];
    ck_assert(cg_copy_to(t, fl)); /* converted to float */
    ck_assert(fl[0] == 9.0f && fl[5] == 42.0f);
    /* bf16 fill and item */
    cg_tensor *h = cg_full_dtype(CG_BF16, CG_SHAPE(1), 3.14159);
    ck_assert(cg_item(h) == 3.140625f);
    ck_assert(cg_fill_(h, 1.0f / 3.0f));
    ck_assert(cg_item(h) == cg_bf16_to_f32(cg_f32_to_bf16(1.0f / 3.0f)));
    cg_release_all(8, t, tr, c, r, sel, src, h, NULL);
}
END_TEST

/* c (contiguous) holds v's elements in row-major order, byte for byte
 * (v 2-D, any strides) */
static void assert_copy_of(const cg_tensor *c, const cg_tensor *v, const char *what)
{
    ck_assert(c && cg_is_contiguous(c) && cg_same_shape(c, v) && c->dtype == v->dtype);
    const size_t z = cg_dtype_size(v->dtype);
    const char *cp = cg_data_ptr(c), *vp = cg_data_ptr(v);
    for (int64_t i = 0; i < v->shape[0]; i++)
        for (int64_t j = 0; j < v->shape[1]; j++)
            ck_assert_msg(memcmp(cp + (size_t)(i * v->shape[1] + j) * z,
                                 vp + (i * v->strides[0] + j * v->strides[1]) * (int64_t)z, z) == 0,
                          "%s %s: element [%lld, %lld]", cg_dtype_name(v->dtype), what,
                          (long long)i, (long long)j);
}

/* Strided copies of every dtype (contiguous of a transposed view, of every
 * third column, of a column expanded along the rows; copy_ into a
 * transposed destination) move each element's bits, with 1 and 2 threads
 * (66,000 elements: two threads copy). Each dtype's strided rows run a
 * loop of its own type, and a stride-0 source row a fill. */
START_TEST(test_strided_copies_every_dtype)
{
    const cg_dtype dts[] = {CG_F32, CG_BF16, CG_F16, CG_I64, CG_I32, CG_BOOL};
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        const cg_dtype dt = dts[k];
        cg_tensor *base = cg_empty_dtype(dt, CG_SHAPE(300, 220));
        unsigned char *b = cg_data_ptr(base);
        const size_t bytes = (size_t)cg_numel(base) * cg_dtype_size(dt);
        for (size_t i = 0; i < bytes; i++) /* every element's bytes differ */
            b[i] = dt == CG_BOOL ? (unsigned char)(i * 7 % 3 == 0) : (unsigned char)(i * 131 >> 3);
        cg_tensor *tr = cg_view_transpose(base, 0, 1);             /* [220, 300] */
        cg_tensor *third = cg_view_slice(base, 1, 1, 220, 3);      /* [300, 73] */
        cg_tensor *col = cg_view_slice(base, 1, 5, 6, 1);          /* [300, 1] */
        cg_tensor *wide = cg_view_expand(col, CG_SHAPE(300, 220)); /* stride 0 in the rows */
        cg_tensor *dst = cg_empty_dtype(dt, CG_SHAPE(220, 300));
        cg_tensor *dstt = cg_view_transpose(dst, 0, 1); /* [300, 220], strided */
        for (int threads = 1; threads <= 2; threads++) {
            cg_set_num_threads(threads);
            const cg_tensor *views[] = {tr, third, wide};
            const char *what[] = {"transposed", "every third column", "expanded column"};
            for (int v = 0; v < 3; v++) {
                cg_tensor *c = cg_k_contiguous(views[v]);
                assert_copy_of(c, views[v], what[v]);
                cg_release(c);
            }
            memset(cg_data_ptr(dst), 0, bytes);
            ck_assert(cg_k_copy_(dstt, base));
            cg_tensor *back = cg_k_contiguous(dstt);
            ck_assert(memcmp(cg_data_ptr(back), b, bytes) == 0);
            assert_copy_of(dst, tr, "copied into a transposed destination");
            cg_release(back);
        }
        cg_release_all(7, base, tr, third, col, wide, dst, dstt);
    }
}
END_TEST

/* What cg_fprint writes for t. */
static char *printed(const cg_tensor *t)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    ck_assert(cg_fprint(f, t));
    fclose(f);
    return buf;
}

START_TEST(test_printing)
{
    cg_tensor *t = cg_from_i64(CG_SHAPE(2, 2), (int64_t[]){1, 2, 3, 4});
    char *s = printed(t);
    ck_assert_str_eq(s, "tensor([[1, 2],\n        [3, 4]], dtype=torch.int64)\n");
    free(s);
    cg_release(t);
    t = cg_from_bool(CG_SHAPE(3), (bool[]){true, false, true});
    s = printed(t);
    ck_assert_str_eq(s, "tensor([True, False, True], dtype=torch.bool)\n");
    free(s);
    cg_release(t);
    t = cg_from_data(CG_SHAPE(2), (float[]){0.5f, NAN});
    s = printed(t);
    ck_assert_str_eq(s, "tensor([0.5000, nan])\n");
    free(s);
    cg_release(t);
    t = cg_arange_dtype(CG_I64, 0, 2000, 1);
    s = printed(t);
    ck_assert_str_eq(s, "tensor([0, 1, 2, ..., 1997, 1998, 1999], dtype=torch.int64)\n");
    free(s);
    cg_release(t);
    t = cg_arange_dtype(CG_I64, 0, 1000, 1); /* 1000: whole (torch: summarised past 1000) */
    s = printed(t);
    ck_assert_msg(!strstr(s, "...") && strstr(s, ", 500, 501, ") &&
                      strstr(s, ", 998, 999], dtype=torch.int64)\n"),
                  "%.80s", s);
    free(s);
    cg_release(t);
    /* summarised, a dim of 6 (no more than the 3 + 3 shown at its ends) is whole */
    t = cg_arange_dtype(CG_I64, 0, 1200, 1);
    cg_tensor *rows = cg_view_reshape(t, 2, (int64_t[]){200, 6});
    s = printed(rows);
    ck_assert_msg(strstr(s, "tensor([[0, 1, 2, 3, 4, 5],\n") == s &&
                      strstr(s, "[1194, 1195, 1196, 1197, 1198, 1199]], dtype=torch.int64)\n"),
                  "%.80s", s);
    free(s);
    cg_release_all(2, t, rows);
    CG_ASSERT_REFUSED(!cg_print(NULL), "NULL");
}
END_TEST

START_TEST(test_comparisons_and_logic)
{
    int64_t ids[] = {0, 5, 0, 7};
    cg_tensor *t = cg_from_i64(CG_SHAPE(2, 2), ids);
    cg_tensor *pad = cg_eq_scalar(t, 0); /* ids == pad: the padding mask */
    ck_assert_int_eq(pad->dtype, CG_BOOL);
    bool want[] = {true, false, true, false};
    ck_assert(memcmp(cg_data_bool(pad), want, sizeof want) == 0);
    cg_tensor *big = cg_gt_scalar(t, 5), *nb = cg_logical_not(big), *both = cg_logical_or(pad, big);
    ck_assert(!cg_data_bool(big)[1] && cg_data_bool(big)[3]);
    ck_assert(cg_data_bool(nb)[1] && !cg_data_bool(nb)[3]);
    ck_assert(cg_data_bool(both)[0] && !cg_data_bool(both)[1] && cg_data_bool(both)[3]);
    /* exact int64 compare beyond float's precision */
    int64_t a2[] = {((int64_t)1 << 40) + 1}, b2[] = {(int64_t)1 << 40};
    cg_tensor *x = cg_from_i64(CG_SHAPE(1), a2), *y = cg_from_i64(CG_SHAPE(1), b2);
    cg_tensor *ne = cg_ne(x, y);
    ck_assert(cg_data_bool(ne)[0]);
    /* int64 against float32 as torch: the int64 through float32 (2^24 + 1
     * is 2^24 there) */
    cg_tensor *i24 = cg_from_i64(CG_SHAPE(1), (int64_t[]){(1 << 24) + 1});
    cg_tensor *f24 = cg_from_data(CG_SHAPE(1), (float[]){0x1p24f}), *e24 = cg_eq(i24, f24);
    ck_assert(e24 && cg_data_bool(e24)[0]);
    /* a whole number past int64's range compared as a float, not cast */
    cg_tensor *lt = cg_lt_scalar(i24, 1e19), *gt = cg_gt_scalar(i24, -1e19);
    ck_assert(lt && gt && cg_data_bool(lt)[0] && cg_data_bool(gt)[0]);
    cg_release_all(5, i24, f24, e24, lt, gt);
    /* broadcast, mixed dtypes, NaN */
    cg_tensor *f = cg_from_data(CG_SHAPE(3), (float[]){1.0f, NAN, -2.0f});
    cg_tensor *col = cg_from_i64(CG_SHAPE(2, 1), (int64_t[]){1, -2});
    cg_tensor *e = cg_eq(f, col); /* [2, 3] */
    ck_assert_int_eq(e->ndim, 2);
    bool we[] = {true, false, false, false, false, true};
    ck_assert(memcmp(cg_data_bool(e), we, sizeof we) == 0);
    cg_tensor *l = cg_le_scalar(f, 1.0);
    ck_assert(cg_data_bool(l)[0] && !cg_data_bool(l)[1] && cg_data_bool(l)[2]);
    /* logic on numbers, as torch.logical_and: nonzero (NaN too) is true */
    cg_tensor *nz = cg_from_i64(CG_SHAPE(3), (int64_t[]){0, 2, -1});
    cg_tensor *fz = cg_from_data(CG_SHAPE(3), (float[]){0.0f, NAN, 0.0f});
    cg_tensor *la = cg_logical_and(nz, f), *lo = cg_logical_or(fz, nz), *ln = cg_logical_not(fz);
    const bool wa[] = {false, true, true}, wo[] = {false, true, true}, wn[] = {true, false, true};
    ck_assert(la && lo && ln && la->dtype == CG_BOOL);
    ck_assert(memcmp(cg_data_bool(la), wa, sizeof wa) == 0);
    ck_assert(memcmp(cg_data_bool(lo), wo, sizeof wo) == 0);
    ck_assert(memcmp(cg_data_bool(ln), wn, sizeof wn) == 0);
    cg_release_all(5, nz, fz, la, lo, ln);
    cg_tensor *z3 = cg_zeros_dtype(CG_I64, CG_SHAPE(3));
    CG_ASSERT_REFUSED(cg_eq(t, z3) == NULL, "broadcast");
    cg_release(z3);
    cg_release_all(11, t, pad, big, nb, both, x, y, ne, f, col, e);
    cg_release(l);
}
END_TEST

/* torch.nonzero: coordinates of the nonzero elements in row-major order,
 * int64 [count, ndim], for every dtype and layout (NaN counts, -0 does
 * not); a 0-d input gives [1, 0] or [0, 0]; torch.where(top_i == e) of a
 * mixture of experts is its columns. */
START_TEST(test_nonzero)
{
    cg_tensor *top_i = cg_from_i64(CG_SHAPE(3, 2), (int64_t[]){2, 0, 1, 2, 0, 1});
    cg_tensor *is2 = cg_eq_scalar(top_i, 2), *hit = cg_nonzero(is2);
    ck_assert_msg(hit && hit->dtype == CG_I64, "%s", cg_last_error());
    ck_assert(hit->ndim == 2 && hit->shape[0] == 2 && hit->shape[1] == 2);
    ck_assert(!memcmp(cg_data_i64(hit), (int64_t[]){0, 0, 1, 1}, 4 * sizeof(int64_t)));
    cg_tensor *f = cg_from_data(CG_SHAPE(2, 3), (float[]){0, NAN, -0.0f, 3, 0, 1e-30f});
    cg_tensor *ft = cg_transpose(f, 0, 1); /* [3, 2]: 0 3 / NaN 0 / -0 1e-30 */
    cg_tensor *fb = cg_to(f, CG_BF16), *nf = cg_nonzero(ft), *nb = cg_nonzero(fb);
    ck_assert(nf && nf->shape[0] == 3 && nf->shape[1] == 2);
    ck_assert(!memcmp(cg_data_i64(nf), (int64_t[]){0, 1, 1, 0, 2, 1}, 6 * sizeof(int64_t)));
    ck_assert(nb && nb->shape[0] == 3); /* PyTorch: [[0, 1], [1, 0], [1, 2]] */
    ck_assert(!memcmp(cg_data_i64(nb), (int64_t[]){0, 1, 1, 0, 1, 2}, 6 * sizeof(int64_t)));
    cg_tensor *z = cg_zeros(CG_SHAPE(4, 0)), *two = cg_scalar(2), *zero = cg_scalar(0);
    cg_tensor *e = cg_nonzero(z), *one = cg_nonzero(two), *none = cg_nonzero(zero);
    ck_assert(e && e->shape[0] == 0 && e->shape[1] == 2);
    ck_assert(one && one->shape[0] == 1 && one->shape[1] == 0);
    ck_assert(none && none->shape[0] == 0 && none->shape[1] == 0);
    CG_ASSERT_REFUSED(cg_nonzero(NULL) == NULL, "nonzero: input is NULL");
    cg_release_all(10, top_i, is2, hit, f, ft, fb, nf, nb, z, two);
    cg_release_all(4, zero, e, one, none);
}
END_TEST

START_TEST(test_where_masked_fill_any_dtype)
{
    int64_t ids[] = {4, 5, 6};
    cg_tensor *t = cg_from_i64(CG_SHAPE(3), ids);
    cg_tensor *m = cg_from_bool(CG_SHAPE(3), (bool[]){false, true, false});
    cg_tensor *mf = cg_k_masked_fill(t, m, -100); /* ids.masked_fill(mask, -100) */
    ck_assert_int_eq(mf->dtype, CG_I64);
    int64_t wm[] = {4, -100, 6};
    ck_assert(memcmp(cg_data_i64(mf), wm, sizeof wm) == 0);
    cg_tensor *z = cg_zeros_dtype(CG_I64, CG_SHAPE(1));
    cg_tensor *w = cg_k_where(m, t, z);
    int64_t ww[] = {0, 5, 0};
    ck_assert(memcmp(cg_data_i64(w), ww, sizeof ww) == 0);
    /* float values with a bool mask: the float kernel */
    cg_tensor *s = cg_from_data(CG_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
    cg_tensor *sf = cg_k_masked_fill(s, m, -INFINITY);
    ck_assert(isinf(cg_get(sf, (int64_t[]){1, 1})) && cg_get(sf, (int64_t[]){1, 2}) == 6);
    cg_tensor *zero = cg_scalar(0);
    cg_tensor *sw = cg_k_where(m, s, zero); /* bool condition, float values */
    ck_assert(cg_get(sw, (int64_t[]){0, 1}) == 2 && cg_get(sw, (int64_t[]){0, 0}) == 0);
    /* an int64 or float32 mask is not a mask (PyTorch refuses both): not
     * even where it holds only 0 and 1 */
    CG_ASSERT_REFUSED(cg_k_masked_fill(s, t, 0) == NULL,
                      "masked_fill: the mask is int64, expected bool");
    cg_tensor *f01 = cg_from_data(CG_SHAPE(3), (float[]){0, 1, 0});
    CG_ASSERT_REFUSED(cg_k_masked_fill(s, f01, 0) == NULL,
                      "masked_fill: the mask is float32, expected bool (cg_to(mask, CG_BOOL)");
    CG_ASSERT_REFUSED(cg_k_masked_fill(t, f01, 0) == NULL,
                      "masked_fill: the mask is float32, expected bool");
    CG_ASSERT_REFUSED(cg_k_where(f01, s, zero) == NULL,
                      "where: the condition is float32, expected bool (cg_to(condition, CG_BOOL)");
    CG_ASSERT_REFUSED(cg_k_where(t, t, z) == NULL, "where: the condition is int64, expected bool");
    cg_release_all(10, t, m, mf, z, w, s, sf, sw, zero, f01);
}
END_TEST

START_TEST(test_float_ops_refuse_integers)
{
    cg_tensor *f = cg_ones(CG_SHAPE(2, 2));
    cg_tensor *b = cg_zeros_dtype(CG_BOOL, CG_SHAPE(2, 2));
    cg_tensor *i = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 2));
    CG_ASSERT_REFUSED(cg_matmul(b, f) == NULL, "matmul: argument 1 is bool, expected a float");
    CG_ASSERT_REFUSED(cg_add(f, i) == NULL, "add: argument 2 is int64");
    CG_ASSERT_REFUSED(cg_exp(i) == NULL, "exp: argument 1 is int64");
    CG_ASSERT_REFUSED(cg_softmax(b, -1) == NULL, "softmax: argument 1 is bool");
    CG_ASSERT_REFUSED(cg_sum_all(i) == NULL, "sum: argument 1 is int64");
    cg_release_all(3, f, b, i);
}
END_TEST

START_TEST(test_bf16_math_promotes)
{
    cg_tensor *a = cg_from_data(CG_SHAPE(3), (float[]){1.0f, 1.0f / 3, -2.5f});
    cg_tensor *h = cg_k_to(a, CG_BF16);
    cg_tensor *hh = cg_add(h, h);
    ck_assert_int_eq(hh->dtype, CG_BF16); /* bf16 + bf16 stays bf16 */
    ck_assert(cg_get(hh, (int64_t[]){1}) ==
              cg_bf16_to_f32(cg_f32_to_bf16(2 * cg_bf16_to_f32(cg_f32_to_bf16(1.0f / 3)))));
    cg_tensor *hf = cg_mul(h, a);
    ck_assert_int_eq(hf->dtype, CG_F32); /* bf16 * f32 promotes to f32 */
    cg_tensor *h32 = cg_k_to(h, CG_F32);
    cg_tensor *sm = cg_softmax(h, 0), *sm32 = cg_softmax(h32, 0);
    ck_assert_int_eq(sm->dtype, CG_BF16);
    for (int64_t k = 0; k < 3; k++)
        ck_assert(cg_get(sm, &k) == cg_bf16_to_f32(cg_f32_to_bf16(cg_get(sm32, &k))));
    cg_tensor *r = cg_view_unsqueeze(h, 0), *c = cg_view_unsqueeze(h, 1);
    cg_tensor *m = cg_matmul(r, c); /* [1, 3] @ [3, 1] */
    ck_assert_int_eq(m->dtype, CG_BF16);
    cg_release_all(10, a, h, hh, hf, h32, sm, sm32, r, c, m);
}
END_TEST

/* torch.result_type: a 0-d tensor decides the dtype only when no argument
 * has dims (floats are one category), so bf16 [3] * a float32 0-d tensor
 * is bfloat16, as `x * torch.tensor(2.0)` is in PyTorch; cgrad promoted it
 * to float32. Two 0-d tensors, or both with dims, promote as before. */
START_TEST(test_scalar_tensors_do_not_promote)
{
    cg_tensor *a = cg_from_data(CG_SHAPE(3), (float[]){1.0f, 1.0f / 3, -2.5f});
    cg_tensor *h = cg_k_to(a, CG_BF16), *s = cg_scalar(3.0f), *s16 = cg_k_to(s, CG_F16);
    cg_tensor *m = cg_test_mask(1, (int64_t[]){3}, (const uint8_t[]){1, 0, 1});
    cg_tensor *outs[6] = {cg_mul(h, s),   cg_add(s, h),   cg_div(h, s16),
                          cg_mul(s, s16), cg_mul(a, s16), cg_where(m, s, h)};
    const cg_dtype want[6] = {CG_BF16, CG_BF16, CG_BF16, CG_F32, CG_F32, CG_BF16};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(outs[i] && outs[i]->dtype == want[i], "case %d: %s", i,
                      outs[i] ? cg_dtype_name(outs[i]->dtype) : cg_last_error());
    ck_assert(cg_get(outs[0], (int64_t[]){1}) ==
              cg_bf16_to_f32(cg_f32_to_bf16(3 * cg_bf16_to_f32(cg_f32_to_bf16(1.0f / 3)))));
    cg_release_all(4, a, h, s, s16); /* m: the runner holds it */
    for (int i = 0; i < 6; i++)
        cg_release(outs[i]);
}
END_TEST

START_TEST(test_shape_ops_any_dtype)
{
    cg_tensor *a = cg_from_i64(CG_SHAPE(2, 2), (int64_t[]){1, 2, 3, 4});
    cg_tensor *b = cg_from_i64(CG_SHAPE(1, 2), (int64_t[]){5, 6});
    cg_tensor *c = cg_concat((cg_tensor *[]){a, b}, 2, 0);
    ck_assert_int_eq(c->dtype, CG_I64);
    ck_assert_int_eq(cg_get_i64(c, (int64_t[]){2, 1}), 6);
    cg_tensor *s = cg_stack((cg_tensor *[]){a, a}, 2, 0);
    ck_assert(s->dtype == CG_I64 && s->ndim == 3);
    cg_tensor *f = cg_ones(CG_SHAPE(1, 2));
    cg_tensor *cf = cg_concat((cg_tensor *[]){a, f}, 2, 0); /* torch.cat promotes */
    ck_assert_int_eq(cf->dtype, CG_F32);
    cg_tensor *sel = cg_index_select(a, 0, cg_test_ids(3, (int64_t[]){1, 1, 0}));
    ck_assert_int_eq(sel->dtype, CG_I64);
    ck_assert_int_eq(cg_get_i64(sel, (int64_t[]){2, 1}), 2);
    cg_tensor *m = cg_from_bool(CG_SHAPE(2), (bool[]){true, false});
    cg_tensor *ms = cg_index_select(m, 0, cg_test_ids(2, (int64_t[]){1, 0}));
    ck_assert(!cg_data_bool(ms)[0] && cg_data_bool(ms)[1]);
    /* an index must be int64 (or int32: test_int32_ids) */
    CG_ASSERT_REFUSED(cg_index_select(a, 0, f) == NULL,
                      "index_select: argument 'index' is float32, expected int64 or int32");
    cg_tensor *v = cg_from_data(CG_SHAPE(3), (float[]){1, 9, 2});
    cg_tensor *am = cg_argmax(v, 0, false);
    ck_assert(am->dtype == CG_I64 && cg_item_i64(am) == 1);
    cg_release_all(9, a, b, c, s, f, cf, sel, m, ms);
    cg_release_all(2, v, am);
}
END_TEST

/* int32 ids where PyTorch 1.13 takes them (index_select, index_add,
 * embedding, the Embedding module): the bits of int64 ids, forward and
 * backward, also strided; gather and scatter_add take int64 only, as
 * PyTorch's; ids of a float or bool dtype are refused by name. */
static void assert_same_f32(const cg_tensor *got, const cg_tensor *want)
{
    ck_assert(got && want && cg_same_shape(got, want));
    cg_tensor *g = cg_k_contiguous(got), *w = cg_k_contiguous(want);
    ck_assert(memcmp(cg_data(g), cg_data(w), (size_t)cg_numel(w) * sizeof(float)) == 0);
    cg_release_all(2, g, w);
}

START_TEST(test_int32_ids)
{
    cg_rng r = cg_rng_new(3);
    cg_tensor *w = cg_randn(&r, CG_SHAPE(5, 3));
    cg_requires_grad(w, true);
    const int64_t ids[6] = {4, 0, 4, 2, 1, 3};
    cg_tensor *i64 = cg_test_ids_nd(CG_SHAPE(2, 3), ids);
    cg_tensor *i32 = cg_to(i64, CG_I32);
    ck_assert_int_eq(i32->dtype, CG_I32);
    cg_tensor *t32 = cg_transpose(i32, 0, 1); /* strided: [3, 2] */
    cg_tensor *t64 = cg_transpose(i64, 0, 1);
    cg_tensor *y[2], *gw[2];
    for (int k = 0; k < 2; k++) {
        cg_tensor *e = cg_embedding(w, k ? t32 : t64);
        ck_assert(e && e->ndim == 3);
        cg_tensor *sq = cg_mul(e, e), *s = cg_sum_all(sq);
        ck_assert(cg_backward(s, NULL, false));
        cg_release(sq);
        y[k] = e;
        gw[k] = cg_clone(cg_grad(w));
        cg_zero_grad(w);
        cg_release(s);
    }
    assert_same_f32(y[1], y[0]);
    assert_same_f32(gw[1], gw[0]);
    cg_release_all(4, y[0], y[1], gw[0], gw[1]);
    /* the raw kernels */
    cg_tensor *flat64 = cg_test_ids(3, (int64_t[]){2, 2, 0}), *flat32 = cg_to(flat64, CG_I32);
    cg_tensor *a = cg_k_index_select(w, 0, flat64), *b = cg_k_index_select(w, 0, flat32);
    assert_same_f32(b, a);
    cg_tensor *d64 = cg_zeros(CG_SHAPE(5, 3)), *d32 = cg_zeros(CG_SHAPE(5, 3));
    ck_assert(cg_k_index_add_(d64, 0, flat64, a) && cg_k_index_add_(d32, 0, flat32, a));
    assert_same_f32(d32, d64);
    /* out of range in int32 too, by position */
    cg_tensor *bad = cg_to(cg_test_ids(2, (int64_t[]){1, 5}), CG_I32);
    CG_ASSERT_REFUSED(cg_k_index_select(w, 0, bad) == NULL,
                      "index_select: id 5 at position 1 is out of range [0, 5)");
    /* gather and scatter_add: int64 only */
    cg_tensor *gi = cg_to(cg_test_ids_nd(CG_SHAPE(1, 3), (int64_t[]){0, 1, 2}), CG_I32);
    CG_ASSERT_REFUSED(cg_gather(w, 0, gi) == NULL,
                      "gather: argument 'index' is int32, expected int64");
    CG_ASSERT_REFUSED(cg_k_scatter_add(d64, 0, gi, a) == NULL,
                      "argument 'index' is int32, expected int64");
    cg_tensor *fl = cg_ones(CG_SHAPE(2)), *bo = cg_from_bool(CG_SHAPE(2), (bool[]){true, false});
    CG_ASSERT_REFUSED(cg_embedding(w, fl) == NULL,
                      "embedding: argument 'ids' is float32, expected int64 or int32");
    CG_ASSERT_REFUSED(cg_k_ids_i64("op", "ids", bo) == NULL,
                      "op: argument 'ids' is bool, expected int64 or int32");
    CG_ASSERT_REFUSED(cg_k_ids_i64("op", "ids", NULL) == NULL, "op");
    cg_release_all(8, w, i32, t32, t64, flat32, a, b, d64); /* (cg_test_ids': the runner's) */
    cg_release_all(5, d32, bad, gi, fl, bo);
}
END_TEST

/* The first finite element a narrower float dtype would make inf:
 * float32 to float16 past 65504, bfloat16 to float16 (the same width, a
 * wider range), float32's largest to bfloat16 (rounds up to inf); the
 * tensor's own infinities are not counted, and integers are refused. */
START_TEST(test_first_overflow)
{
    const float big = 3.4028235e38f;
    cg_tensor *t = cg_from_data(CG_SHAPE(5), (float[]){1.0f, INFINITY, 65504.0f, 70000.0f, big});
    double v = 0.0;
    ck_assert_int_eq(cg_k_first_overflow(t, CG_F16, &v), 3);
    ck_assert(v == 70000.0);
    ck_assert_int_eq(cg_k_first_overflow(t, CG_BF16, &v), 4);
    ck_assert(v == (double)big);
    ck_assert_int_eq(cg_k_first_overflow(t, CG_F32, NULL), -1);
    cg_tensor *b = cg_k_to(t, CG_BF16);
    ck_assert_int_eq(cg_k_first_overflow(b, CG_F16, NULL), 2); /* 65504 is 65536 in bf16 */
    ck_assert_int_eq(cg_k_first_overflow(b, CG_BF16, NULL), -1);
    cg_tensor *small = cg_from_data(CG_SHAPE(2), (float[]){-65504.0f, -INFINITY});
    ck_assert_int_eq(cg_k_first_overflow(small, CG_F16, NULL), -1);
    cg_tensor *ids = cg_from_i64(CG_SHAPE(1), (int64_t[]){1});
    ck_assert_int_eq(cg_k_first_overflow(ids, CG_F16, NULL), -2);
    ck_assert_ptr_nonnull(strstr(cg_last_error(), "not a float conversion"));
    cg_clear_error();
    cg_release_all(4, t, b, small, ids);
}
END_TEST

/* Integers against fractions, where's promotion, -0 and strided fills of
 * other dtypes, a broadcast refused at the first dim: each a mutant the
 * suites let through (docs/robustness.md, "Mutants of the views and
 * dtypes"); the values are PyTorch's. */
START_TEST(test_mixed_dtype_edges)
{
    cg_tensor *i = cg_from_i64(CG_SHAPE(2), (int64_t[]){2, 3});
    cg_tensor *f = cg_from_data(CG_SHAPE(2), (float[]){2.5f, 3.0f});
    cg_tensor *eq = cg_eq(i, f), *lt = cg_lt(i, f); /* 2 < 2.5: not compared as integers */
    cg_tensor *es = cg_eq_scalar(i, 2.5), *ls = cg_lt_scalar(i, 2.5);
    ck_assert_msg(eq && lt && es && ls, "%s", cg_last_error());
    ck_assert(!cg_data_bool(eq)[0] && cg_data_bool(eq)[1]);
    ck_assert(cg_data_bool(lt)[0] && !cg_data_bool(lt)[1]);
    ck_assert(!cg_data_bool(es)[0] && !cg_data_bool(es)[1]);
    ck_assert(cg_data_bool(ls)[0] && !cg_data_bool(ls)[1]);
    /* torch.where(c, int64, float32) is float32: [2.0, 1.5] */
    cg_tensor *c = cg_from_bool(CG_SHAPE(2), (bool[]){true, false});
    cg_tensor *h = cg_from_data(CG_SHAPE(2), (float[]){0.5f, 1.5f}), *w = cg_k_where(c, i, h);
    ck_assert_msg(w && w->dtype == CG_F32, "%s", w ? cg_dtype_name(w->dtype) : cg_last_error());
    ck_assert(cg_get(w, (int64_t[]){0}) == 2.0f && cg_get(w, (int64_t[]){1}) == 1.5f);
    /* torch.full((2,), -0.0, dtype=torch.bfloat16) keeps the sign */
    cg_tensor *nb = cg_full_dtype(CG_BF16, CG_SHAPE(2), -0.0);
    cg_tensor *nh = cg_full_dtype(CG_F16, CG_SHAPE(2), -0.0);
    ck_assert(signbit(cg_get(nb, (int64_t[]){1})) && signbit(cg_get(nh, (int64_t[]){1})));
    /* fill_ of a column (stride 3) of an int64 tensor */
    cg_tensor *t = cg_zeros_dtype(CG_I64, CG_SHAPE(2, 3)), *col = cg_view_select(t, 1, 1);
    ck_assert(cg_fill_(col, 7));
    ck_assert(!memcmp(cg_data_i64(t), (int64_t[]){0, 7, 0, 0, 7, 0}, 6 * sizeof(int64_t)));
    /* [2, 3] and [4, 3] differ in the result's first dim */
    cg_tensor *z = cg_zeros_dtype(CG_I64, CG_SHAPE(4, 3));
    CG_ASSERT_REFUSED(cg_eq(t, z) == NULL, "cannot be broadcast together (dim 0: 2 vs 4)");
    /* float to int32 out of its range is INT32_MIN (x86's cvttss2si), as
     * torch.tensor([3e9]).int() */
    cg_tensor *big = cg_from_data(CG_SHAPE(1), (float[]){3e9f}), *b32 = cg_k_to(big, CG_I32);
    ck_assert_int_eq(cg_data_i32(b32)[0], INT32_MIN);
    cg_release_all(10, i, f, eq, lt, es, ls, c, h, w, nb);
    cg_release_all(6, nh, t, col, z, big, b32);
}
END_TEST

static Suite *dtype_suite(void)
{
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_names_sizes_promotion);
    tcase_add_test(tc, test_scalar_conversions);
    tcase_add_test(tc, test_creation_every_dtype);
    tcase_add_test(tc, test_from_arrays);
    tcase_add_test(tc, test_accessors_check_dtype);
    tcase_add_test(tc, test_to_every_pair);
    tcase_add_test(tc, test_to_edge_values);
    tcase_add_test(tc, test_mixed_bf16_inputs);
    tcase_add_test(tc, test_dense_views);
    tcase_add_test(tc, test_views_copies_fill);
    tcase_add_test(tc, test_strided_copies_every_dtype);
    tcase_add_test(tc, test_printing);
    tcase_add_test(tc, test_comparisons_and_logic);
    tcase_add_test(tc, test_nonzero);
    tcase_add_test(tc, test_where_masked_fill_any_dtype);
    tcase_add_test(tc, test_float_ops_refuse_integers);
    tcase_add_test(tc, test_bf16_math_promotes);
    tcase_add_test(tc, test_scalar_tensors_do_not_promote);
    tcase_add_test(tc, test_shape_ops_any_dtype);
    tcase_add_test(tc, test_int32_ids);
    tcase_add_test(tc, test_first_overflow);
    tcase_add_test(tc, test_mixed_dtype_edges);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    Suite *s[] = {dtype_suite()};
    return cg_test_run(s, 1);
}
