/* cgrad zoo: what charlm and seq2seq share (see model_common.h). */
#include "models/train/model_common.h"

#include <math.h>

#include "core/ops.h"

cg_rng cg_model_dropout_rng(uint64_t seed) { return cg_rng_new(seed ^ 0x9e3779b97f4a7c15ULL); }

bool cg_model_check_ids(const char *model, const char *op, const char *what, const int64_t *ids,
                        int64_t B, int64_t L, int64_t max_len, int64_t vocab)
{
    if (!ids) {
        cg_set_error("%s %s: NULL %s", model, op, what);
        return false;
    }
    if (B < 1 || L < 1) {
        cg_set_error("%s %s: %s batch %lld x %lld must be at least 1 x 1", model, op, what,
                     (long long)B, (long long)L);
        return false;
    }
    if (L > max_len) {
        cg_set_error("%s %s: %s length %lld exceeds max_len %lld", model, op, what, (long long)L,
                     (long long)max_len);
        return false;
    }
    for (int64_t i = 0; i < B * L; i++)
        if (ids[i] < 0 || ids[i] >= vocab) {
            cg_set_error("%s %s: %s token id %lld at [%lld, %lld] is outside the "
                         "vocabulary [0, %lld)",
                         model, op, what, (long long)ids[i], (long long)(i / L), (long long)(i % L),
                         (long long)vocab);
            return false;
        }
    return true;
}

float cg_model_emb_scale(cg_emb_scale kind, int64_t d)
{
    return kind == CG_EMB_SCALE_NONE ? 1.0f : (float)sqrt((double)d);
}

cg_tensor *cg_model_embed_scaled(cg_tensor *e, cg_tensor *pe, int64_t pos, int64_t L, float scale,
                                 float dropout, cg_rng *rng, bool training)
{
    cg_tensor *s = scale == 1.0f ? e : cg_muls(e, scale);
    /* a learnt table (a parameter) takes its rows' gradient through cg_narrow */
    cg_tensor *rows = !pe                 ? NULL
                      : pe->requires_grad ? cg_narrow(pe, 0, pos, L)
                                          : cg_view_narrow(pe, 0, pos, L);
    cg_tensor *x = pe ? cg_add(s, rows) : s;
    return cg_dropout(x, dropout, rng, training);
}

cg_tensor *cg_model_logits_loss(const char *model, bool have_model, int64_t vocab,
                                cg_tensor *logits, const int64_t *targets, int64_t ignore_index,
                                float ls)
{
    if (!have_model || !logits || !targets) {
        if (!have_model || !targets)
            cg_set_error("%s loss: NULL %s", model, have_model ? "targets" : "model");
        return NULL;
    }
    if (logits->ndim < 2 || logits->shape[logits->ndim - 1] != vocab) {
        char s[96];
        cg_set_error("%s loss: logits %s must end in the vocabulary size %lld", model,
                     cg_shape_str(logits, s, sizeof s), (long long)vocab);
        return NULL;
    }
    /* the zoo's batches are [B, T, V] logits over [B, T] targets */
    cg_tensor *t = cg_from_i64(logits->ndim - 1, logits->shape, targets);
    cg_tensor *loss = t ? cg_cross_entropy(logits, t, ignore_index, ls, CG_REDUCTION_MEAN) : NULL;
    cg_release(t);
    return loss;
}

cg_norm *cg_model_norm(cg_norm_kind kind, int64_t d, bool bias)
{
    cg_norm_opts o = cg_norm_opts_default();
    o.bias = bias;
    return cg_norm_new_opts(kind, d, &o);
}
