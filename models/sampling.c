/* cgrad zoo: cached incremental decoding and sampling (see sampling.h). */
#include "models/sampling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

cg_kv_cache *cg_kv_cache_new(const cg_charlm *m)
{
    if (!m) {
        cg_set_error("kv cache: NULL model");
        return NULL;
    }
    cg_kv_cache *c = calloc(1, sizeof *c);
    if (!c) {
        cg_set_error("kv cache: out of memory");
        return NULL;
    }
    c->layers = m->cfg.layers;
    c->H = m->cfg.H;
    c->d_head = m->cfg.d / m->cfg.H;
    c->cap = m->cfg.max_len;
    size_t nl = (size_t)(c->layers > 0 ? c->layers : 1);
    c->k = calloc(nl, sizeof *c->k);
    c->v = calloc(nl, sizeof *c->v);
    if (!c->k || !c->v) {
        cg_kv_cache_free(c);
        cg_set_error("kv cache: out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < c->layers; i++) {
        c->k[i] = cg_zeros(CG_SHAPE(1, c->H, c->cap, c->d_head));
        c->v[i] = cg_zeros(CG_SHAPE(1, c->H, c->cap, c->d_head));
        if (!c->k[i] || !c->v[i]) {
            cg_kv_cache_free(c);
            return NULL;
        }
    }
    return c;
}

void cg_kv_cache_free(cg_kv_cache *c)
{
    if (!c)
        return;
    for (int64_t i = 0; c->k && c->v && i < c->layers; i++)
        cg_release_all(2, c->k[i], c->v[i]);
    free(c->k);
    free(c->v);
    free(c);
}

void cg_kv_cache_reset(cg_kv_cache *c)
{
    if (c)
        c->len = 0;
}

/* [1,n,d] -> [1,H,n,dh] (a view). */
static cg_tensor *split_heads(cg_tensor *x, int64_t H, int64_t dh)
{
    if (!x)
        return NULL;
    cg_tensor *r = cg_reshape(x, CG_SHAPE(1, x->shape[1], H, dh));
    cg_tensor *t = cg_transpose(r, 1, 2);
    cg_release(r);
    return t;
}

/* Self-attention of the n new positions (h [1,n,d]) over the cache of
 * layer li, after appending their keys and values. */
static cg_tensor *attn_cached(cg_mha *a, cg_kv_cache *c, int64_t li, cg_tensor *h,
                              cg_tensor *mask)
{
    int64_t n = h->shape[1], Tk = c->len + n;
    cg_tensor *q = cg_linear_forward(a->q_proj, h);
    cg_tensor *k = cg_linear_forward(a->k_proj, h);
    cg_tensor *v = cg_linear_forward(a->v_proj, h);
    cg_tensor *qh = split_heads(q, c->H, c->d_head);
    cg_tensor *kh = split_heads(k, c->H, c->d_head);
    cg_tensor *vh = split_heads(v, c->H, c->d_head);
    cg_release_all(3, q, k, v);
    cg_tensor *kdst = cg_view_narrow(c->k[li], 2, c->len, n);
    cg_tensor *vdst = cg_view_narrow(c->v[li], 2, c->len, n);
    bool ok = qh && kh && vh && kdst && vdst && cg_copy_(kdst, kh) && cg_copy_(vdst, vh);
    cg_release_all(4, kdst, vdst, kh, vh);
    cg_tensor *K = ok ? cg_view_narrow(c->k[li], 2, 0, Tk) : NULL;
    cg_tensor *V = ok ? cg_view_narrow(c->v[li], 2, 0, Tk) : NULL;
    cg_tensor *o = (K && V) ? cg_scaled_dot_product_attention(qh, K, V, mask, NULL) : NULL;
    cg_release_all(3, qh, K, V);
    cg_tensor *ot = cg_transpose(o, 1, 2); /* [1,n,H,dh] */
    cg_release(o);
    cg_tensor *merged = cg_reshape(ot, CG_SHAPE(1, n, a->d));
    cg_release(ot);
    cg_tensor *y = cg_linear_forward(a->o_proj, merged);
    cg_release(merged);
    return y;
}

/* x + sub(norm(x)) (pre-norm) or norm(x + sub(x)) (post-norm); eval mode,
 * so dropout is the identity. sub is attention (ff == NULL) or ff. */
static cg_tensor *residual(bool norm_first, cg_norm *norm, cg_mha *a, cg_ff *ff,
                           cg_kv_cache *c, int64_t li, cg_tensor *mask, cg_tensor *x)
{
    if (!x)
        return NULL;
    cg_tensor *h = norm_first ? cg_norm_forward(norm, x) : cg_retain(x);
    cg_tensor *y = !h ? NULL : ff ? cg_ff_forward(ff, h) : attn_cached(a, c, li, h, mask);
    cg_release(h);
    cg_tensor *r = y ? cg_add(x, y) : NULL;
    cg_release(y);
    if (norm_first || !r)
        return r;
    cg_tensor *out = cg_norm_forward(norm, r);
    cg_release(r);
    return out;
}

cg_tensor *cg_charlm_forward_cached(cg_charlm *m, cg_kv_cache *c, const int64_t *ids, int64_t n)
{
    if (!m || !c || !ids) {
        cg_set_error("charlm cached forward: NULL argument");
        return NULL;
    }
    const cg_charlm_config *cfg = &m->cfg;
    if (c->layers != cfg->layers || c->H != cfg->H || c->cap != cfg->max_len ||
        c->d_head * c->H != cfg->d) {
        cg_set_error("charlm cached forward: the cache was made for another model");
        return NULL;
    }
    if (n < 1 || c->len + n > c->cap) {
        cg_set_error("charlm cached forward: %lld new positions after %lld do not fit max_len %lld",
                     (long long)n, (long long)c->len, (long long)c->cap);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->vocab) {
            cg_set_error("charlm cached forward: token id %lld is outside the vocabulary [0, %lld)",
                         (long long)ids[i], (long long)cfg->vocab);
            return NULL;
        }
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    /* Causal mask among the new positions: new query i (absolute c->len+i)
     * may not see key j > c->len + i. */
    cg_tensor *mask = NULL;
    int64_t Tk = c->len + n;
    if (n > 1) {
        mask = cg_zeros(CG_SHAPE(1, 1, n, Tk));
        if (mask) {
            float *md = cg_data(mask);
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = c->len + i + 1; j < Tk; j++)
                    md[i * Tk + j] = 1.0f;
        }
    }
    cg_tensor *e = cg_embed_forward(m->tok_emb, ids, 2, (const int64_t[]){1, n});
    cg_tensor *es = cg_muls(e, (float)sqrt((double)cfg->d));
    cg_release(e);
    cg_tensor *pe = cg_view_narrow(m->pe, 0, c->len, n);
    cg_tensor *h = cg_add(es, pe);
    cg_release_all(2, es, pe);
    for (int64_t i = 0; i < cfg->layers && h && (n == 1 || mask); i++) {
        cg_lm_block *b = m->block[i];
        cg_tensor *h1 = residual(cfg->norm_first, b->ln1, b->attn, NULL, c, i, mask, h);
        cg_tensor *h2 = residual(cfg->norm_first, b->ln2, NULL, b->ff, c, i, NULL, h1);
        cg_release_all(2, h, h1);
        h = h2;
    }
    if (n > 1 && !mask) {
        cg_release(h);
        h = NULL;
    }
    if (m->ln_f && h) {
        cg_tensor *nh = cg_norm_forward(m->ln_f, h);
        cg_release(h);
        h = nh;
    }
    cg_tensor *h2 = cg_reshape(h, 2, (const int64_t[]){n, cfg->d});
    cg_release(h);
    cg_tensor *wt = cg_transpose(m->tok_emb->weight, 0, 1);
    cg_tensor *l2 = cg_matmul(h2, wt);
    cg_release_all(3, h2, wt, mask);
    cg_tensor *logits = cg_reshape(l2, 3, (const int64_t[]){1, n, cfg->vocab});
    cg_release(l2);
    cg_no_grad_end();
    if (logits)
        c->len += n;
    return logits;
}

typedef struct {
    double p;
    int64_t id;
} prob_id;

static int cmp_prob_desc(const void *a, const void *b)
{
    const prob_id *x = a, *y = b;
    if (x->p != y->p)
        return x->p < y->p ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id); /* ties: lower id first */
}

int64_t cg_sample_logits(const float *logits, int64_t V, const cg_sample_opts *o, cg_rng *rng)
{
    if (!logits || V < 1 || !o || !rng || !(o->temperature >= 0) || o->top_k < 0 ||
        !(o->top_p > 0 && o->top_p <= 1)) {
        cg_set_error("sample: bad arguments (temperature >= 0, top_k >= 0, 0 < top_p <= 1)");
        return -1;
    }
    /* greedy: temperature 0, and its limit: a temperature so small that
     * logits / temperature overflow (1e-40 is not even a normal float) used
     * to give NaN probabilities and sample the last characters */
    bool greedy = o->temperature == 0 || !((float)o->temperature >= FLT_MIN);
    prob_id *pi = greedy ? NULL : malloc((size_t)V * sizeof *pi);
    if (!greedy && !pi) {
        cg_set_error("sample: out of memory");
        return -1;
    }
    for (int64_t i = 0; !greedy && i < V; i++) {
        pi[i] = (prob_id){(double)(logits[i] / (float)o->temperature), i};
        greedy = !isfinite(pi[i].p) && isfinite(logits[i]);
    }
    if (greedy) {
        free(pi);
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (logits[i] > logits[best])
                best = i;
        return best;
    }
    /* sort by logit, descending: top-k keeps every logit >= the k-th largest
     * (ties at the k-th value are kept, as logits.masked_fill(logits < kth)) */
    qsort(pi, (size_t)V, sizeof *pi, cmp_prob_desc);
    int64_t keep = V;
    if (o->top_k > 0 && o->top_k < V) {
        double kth = pi[o->top_k - 1].p;
        keep = o->top_k;
        while (keep < V && pi[keep].p >= kth)
            keep++;
    }
    double mx = pi[0].p, sum = 0;
    for (int64_t i = 0; i < keep; i++) {
        pi[i].p = exp(pi[i].p - mx);
        sum += pi[i].p;
    }
    for (int64_t i = 0; i < keep; i++)
        pi[i].p /= sum;
    if (o->top_p < 1) {
        double cum = 0;
        int64_t k = 0;
        while (k < keep) {
            cum += pi[k].p;
            k++;
            if (cum >= o->top_p)
                break;
        }
        keep = k;
        sum = 0;
        for (int64_t i = 0; i < keep; i++)
            sum += pi[i].p;
        for (int64_t i = 0; i < keep; i++)
            pi[i].p /= sum;
    }
    double u = cg_rng_uniform_double(rng), cum = 0;
    int64_t id = pi[keep - 1].id;
    for (int64_t i = 0; i < keep; i++) {
        cum += pi[i].p;
        if (u < cum) {
            id = pi[i].id;
            break;
        }
    }
    free(pi);
    return id;
}

/* Logits of the last position of a full forward over ids[0..n). */
static bool last_logits_full(cg_charlm *m, const int64_t *ids, int64_t n, float *out)
{
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *l = cg_charlm_forward(m, ids, 1, n);
    cg_tensor *last = l ? cg_view_select(l, 1, n - 1) : NULL;
    bool ok = last && cg_copy_to(last, out);
    cg_release_all(2, l, last);
    cg_no_grad_end();
    return ok;
}

static bool last_logits_cached(cg_charlm *m, cg_kv_cache *c, const int64_t *ids, int64_t n,
                               float *out)
{
    cg_tensor *l = cg_charlm_forward_cached(m, c, ids, n);
    cg_tensor *last = l ? cg_view_select(l, 1, n - 1) : NULL;
    bool ok = last && cg_copy_to(last, out);
    cg_release_all(2, l, last);
    return ok;
}

int64_t *cg_charlm_generate(cg_charlm *m, const int64_t *prompt, int64_t n_prompt, int64_t n_new,
                            const cg_sample_opts *o, cg_rng *rng, bool use_cache)
{
    if (!m || !prompt || n_prompt < 1 || n_new < 0 || !o || !rng) {
        cg_set_error("generate: needs a model, a prompt of at least one token and n_new >= 0");
        return NULL;
    }
    int64_t V = m->cfg.vocab, L = m->cfg.max_len, total = n_prompt + n_new;
    int64_t *ids = malloc((size_t)total * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    cg_kv_cache *c = use_cache ? cg_kv_cache_new(m) : NULL;
    if (!ids || !logits || (use_cache && !c)) {
        if (!cg_has_error())
            cg_set_error("generate: out of memory");
        goto fail;
    }
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    int64_t len = n_prompt;
    for (int64_t s = 0; s < n_new; s++) {
        int64_t w = len < L ? len : L; /* window: the last w tokens */
        bool ok;
        if (!use_cache) {
            ok = last_logits_full(m, ids + len - w, w, logits);
        } else if (s > 0 && c->len == w - 1) {
            ok = last_logits_cached(m, c, ids + len - 1, 1, logits);
        } else { /* first step, or the window slid: (re)fill the cache */
            cg_kv_cache_reset(c);
            ok = last_logits_cached(m, c, ids + len - w, w, logits);
        }
        if (!ok)
            goto fail;
        int64_t id = cg_sample_logits(logits, V, o, rng);
        if (id < 0)
            goto fail;
        ids[len++] = id;
    }
    free(logits);
    cg_kv_cache_free(c);
    return ids;
fail:
    free(ids);
    free(logits);
    cg_kv_cache_free(c);
    return NULL;
}
