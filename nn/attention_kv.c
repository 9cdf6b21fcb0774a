/* The key/value buffers of one attention module's incremental decoding
 * (cg_mha_kv, nn/attention.h): clearing, freeing, reordering the batch's
 * rows, and the append the cached forward (nn/attention.c) makes. */
#include <string.h>

#include "autograd/ops.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/attention_impl.h"

void cg_mha_kv_clear(cg_mha_kv *kv)
{
    if (kv)
        kv->len = 0;
}

void cg_mha_kv_free(cg_mha_kv *kv)
{
    if (!kv)
        return;
    cg_unhold(kv->k);
    cg_unhold(kv->v);
    cg_release_all(2, kv->k, kv->v);
    *kv = (cg_mha_kv){0};
}

/* A [B,H,cap,dh] buffer holding rows rows[0..B) (or all rows when rows is
 * NULL) of old's first len positions (rows checked by the caller). */
static cg_tensor *kv_regrow(const cg_tensor *old, const int64_t *rows, int64_t B, int64_t H,
                            int64_t cap, int64_t dh, int64_t len)
{
    cg_tensor *t = cg_empty(CG_SHAPE(B, H, cap, dh));
    if (!t || !old || len == 0)
        return t;
    const int64_t ocap = old->shape[2];
    const float *src = cg_data(old);
    float *dst = cg_data(t);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            memcpy(dst + (b * H + h) * cap * dh, src + ((rows ? rows[b] : b) * H + h) * ocap * dh,
                   (size_t)(len * dh) * sizeof(float));
    return t;
}

/* Replace the cache's buffers by kv_regrow's [B,H,cap,dh] copies (rows
 * selected when rows is not NULL); the cache is unchanged on failure. */
static bool kv_replace(cg_mha_kv *kv, const int64_t *rows, int64_t B, int64_t H, int64_t cap,
                       int64_t dh)
{
    cg_tensor *k = kv_regrow(kv->k, rows, B, H, cap, dh, kv->len);
    cg_tensor *v = kv_regrow(kv->v, rows, B, H, cap, dh, kv->len);
    if (!k || !v) {
        cg_release_all(2, k, v);
        return false;
    }
    cg_unhold(kv->k); /* the buffers outlive any scope (a decoding step's) */
    cg_unhold(kv->v);
    cg_release_all(2, kv->k, kv->v);
    kv->k = cg_hold(k);
    kv->v = cg_hold(v);
    return true;
}

/* The rows rows[0..n) (strictly increasing) moved down to 0..n in place,
 * and the buffers narrowed to them: no new buffers, and the rows before the
 * first one that leaves stay where they are. (A copy of the whole cache
 * every time a sentence of a greedy batch finished cost the translator's
 * evaluation its allocations and page faults.) */
static bool kv_compact(cg_mha_kv *kv, const int64_t *rows, int64_t n)
{
    cg_tensor *k = cg_view_narrow(kv->k, 0, 0, n), *v = cg_view_narrow(kv->v, 0, 0, n);
    if (!k || !v) {
        cg_release_all(2, k, v);
        return false;
    }
    const int64_t H = k->shape[1], cap = k->shape[2], dh = k->shape[3];
    for (int i = 0; i < 2; i++) {
        float *d = cg_data(i ? v : k); /* [B,H,cap,dh], contiguous */
        for (int64_t b = 0; b < n; b++)
            for (int64_t h = 0; rows[b] != b && h < H; h++)
                memmove(d + (b * H + h) * cap * dh, d + (rows[b] * H + h) * cap * dh,
                        (size_t)(kv->len * dh) * sizeof(float));
        cg_tensor_modified(i ? v : k);
    }
    cg_unhold(kv->k);
    cg_unhold(kv->v);
    cg_release_all(2, kv->k, kv->v);
    kv->k = cg_hold(k);
    kv->v = cg_hold(v);
    return true;
}

bool cg_mha_kv_reorder(cg_mha_kv *kv, const cg_tensor *rows)
{
    if (!kv || !rows) {
        cg_set_error("kv cache reorder: NULL %s", kv ? "rows" : "cache");
        return false;
    }
    if (!cg_check_dtype("kv cache reorder", "rows", rows, CG_I64))
        return false;
    if (rows->ndim != 1 || rows->shape[0] < 1) {
        char b[96];
        cg_set_error("kv cache reorder: argument 'rows' has shape %s, expected [n] with n >= 1",
                     cg_shape_str(rows, b, sizeof b));
        return false;
    }
    if (!kv->k)
        return true; /* empty: nothing to move */
    const int64_t B = kv->k->shape[0], H = kv->k->shape[1], cap = kv->k->shape[2];
    const int64_t dh = kv->k->shape[3], n = rows->shape[0];
    cg_tensor *rc = cg_k_contiguous(rows);
    if (!rc)
        return false;
    const int64_t *r = cg_data_i64(rc);
    bool ok = true;
    for (int64_t i = 0; ok && i < n; i++)
        if (r[i] < 0 || r[i] >= B) {
            cg_set_error("kv cache reorder: row %lld (entry %lld) is outside [0, %lld)",
                         (long long)r[i], (long long)i, (long long)B);
            ok = false;
        }
    bool increasing = true; /* rows leaving, the others in order (greedy decoding) */
    for (int64_t i = 1; i < n; i++)
        increasing = increasing && r[i] > r[i - 1];
    ok = ok && (increasing ? kv_compact(kv, r, n) : kv_replace(kv, r, n, H, cap, dh));
    cg_release(rc);
    return ok;
}

bool cg_mha_kv_append(cg_mha_kv *kv, const cg_tensor *kh, const cg_tensor *vh)
{
    const int64_t B = kh->shape[0], H = kh->shape[1], n = kh->shape[2], dh = kh->shape[3];
    if (kv->k && kv->len > 0 &&
        (kv->k->shape[0] != B || kv->k->shape[1] != H || kv->k->shape[3] != dh)) {
        char a[96], b[96];
        cg_set_error("kv cache: new keys %s do not match the cached %s (reorder the cache when "
                     "the batch changes)",
                     cg_shape_str(kh, a, sizeof a), cg_shape_str(kv->k, b, sizeof b));
        return false;
    }
    if (!kv->k || kv->k->shape[0] != B || kv->k->shape[1] != H || kv->k->shape[3] != dh ||
        kv->k->shape[2] < kv->len + n) {
        int64_t cap = kv->k && kv->len > 0 ? 2 * kv->k->shape[2] : 16;
        while (cap < kv->len + n)
            cap *= 2;
        if (!kv_replace(kv, NULL, B, H, cap, dh))
            return false;
    }
    cg_tensor *kd = cg_view_narrow(kv->k, 2, kv->len, n);
    cg_tensor *vd = cg_view_narrow(kv->v, 2, kv->len, n);
    bool ok = kd && vd && cg_k_copy_(kd, kh) && cg_k_copy_(vd, vh);
    cg_release_all(2, kd, vd);
    if (ok)
        kv->len += n;
    return ok;
}
