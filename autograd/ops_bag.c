/* cgrad autograd: F.embedding_bag (autograd/ops.h), one node: the bags'
 * sums, means or maxima of a table's rows, forward and backward side by
 * side. The node saves the ids (contiguous int64), the bags' bounds
 * (int64 [B + 1]) and, for max, each column's row (int64 [B, D], -1 in an
 * empty bag). Serial loops: a bag's rows are added in order, as
 * PyTorch's CPU kernel adds them. */
#include <string.h>

#include "autograd/ops.h"
#include "autograd/ops_impl.h"
#include "core/ops.h"

#define IN(i) (n->inputs[(i)])
#define NEEDS(i) cg_node_needs_grad(n, (i))

/* What the forward works from: the ids flat, the bags' bounds, the
 * padding id (-1: none) */
typedef struct {
    const int64_t *ids;
    const int64_t *bounds; /* bag b is ids[bounds[b] .. bounds[b + 1]) */
    int64_t n, B, V, D, pad;
} bag_plan;

/* The number of ids of bag b that are not padding */
static int64_t bag_count(const bag_plan *p, int64_t b)
{
    int64_t c = 0;
    for (int64_t i = p->bounds[b]; i < p->bounds[b + 1]; i++)
        c += p->ids[i] != p->pad;
    return c;
}

/* ------------------------------------------------------------ backward */
/* p.i[0] the mode, p.i[1] the padding id (-1: none); saved[0] the ids,
 * saved[1] the bounds, saved[2] (max) the rows of the maxima */
static bool plan_of(const cg_node *n, bag_plan *p)
{
    const cg_tensor *ids = n->saved[0], *bounds = n->saved[1];
    *p = (bag_plan){cg_data_i64(ids), cg_data_i64(bounds), cg_numel(ids), cg_numel(bounds) - 1,
                    IN(0)->shape[0],  IN(0)->shape[1],     n->p.i[1]};
    return true;
}

static cg_tensor *weight_grad(const cg_node *n, const bag_plan *p, const float *g)
{
    cg_tensor *gw = cg_zeros(2, (int64_t[]){p->V, p->D});
    if (!gw)
        return NULL;
    float *out = cg_data(gw);
    const int64_t D = p->D;
    if (n->p.i[0] == CG_BAG_MAX) {
        const int64_t *rows = cg_data_i64(n->saved[2]);
        for (int64_t k = 0; k < p->B * D; k++)
            if (rows[k] >= 0)
                out[rows[k] * D + k % D] += g[k];
        return gw;
    }
    cg_tensor *wc = n->n_inputs > 1 ? cg_k_contiguous(IN(1)) : NULL;
    if (n->n_inputs > 1 && !wc) {
        cg_release(gw);
        return NULL;
    }
    const float *w = wc ? cg_data(wc) : NULL;
    for (int64_t b = 0; b < p->B; b++) {
        const int64_t c = n->p.i[0] == CG_BAG_MEAN ? bag_count(p, b) : 1;
        for (int64_t i = p->bounds[b]; i < p->bounds[b + 1]; i++) {
            if (p->ids[i] == p->pad)
                continue;
            float *row = out + p->ids[i] * D;
            for (int64_t d = 0; d < D; d++)
                row[d] += w ? g[b * D + d] * w[i] : g[b * D + d] / (float)c;
        }
    }
    cg_release(wc);
    return gw;
}

/* d/dw[i] = <g[bag of i], weight[ids[i]]>, 0 for padding */
static cg_tensor *sample_weight_grad(const cg_node *n, const bag_plan *p, const float *g)
{
    cg_tensor *gp = cg_zeros(IN(1)->ndim, IN(1)->shape), *Wc = gp ? cg_k_contiguous(IN(0)) : NULL;
    if (!Wc) {
        cg_release(gp);
        return NULL;
    }
    float *out = cg_data(gp);
    const float *W = cg_data(Wc);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t i = p->bounds[b]; i < p->bounds[b + 1]; i++) {
            if (p->ids[i] == p->pad)
                continue;
            float s = 0;
            for (int64_t d = 0; d < p->D; d++)
                s += g[b * p->D + d] * W[p->ids[i] * p->D + d];
            out[i] = s;
        }
    cg_release(Wc);
    return gp;
}

static bool embedding_bag_bw(cg_node *n, const cg_tensor *g, cg_tensor **gin)
{
    bag_plan p;
    plan_of(n, &p);
    cg_tensor *gc = cg_k_contiguous(g);
    if (!gc)
        return false;
    bool ok = true;
    if (NEEDS(0))
        ok = (gin[0] = weight_grad(n, &p, cg_data(gc))) != NULL;
    if (ok && n->n_inputs > 1 && NEEDS(1))
        ok = (gin[1] = sample_weight_grad(n, &p, cg_data(gc))) != NULL;
    cg_release(gc);
    return ok;
}

/* ------------------------------------------------------------- checks */
/* The bags' bounds [B + 1] from ids' shape and o's offsets, or NULL +
 * error */
static cg_tensor *bag_bounds(const cg_tensor *ids, const cg_bag_opts *o)
{
    const int64_t n = cg_numel(ids);
    if (ids->ndim == 2) {
        if (o->offsets || o->include_last_offset) {
            cg_set_error("embedding_bag: 2-d ids are bags of one length: offsets and "
                         "include_last_offset are for 1-d ids");
            return NULL;
        }
        const int64_t B = ids->shape[0], N = ids->shape[1];
        cg_tensor *t = cg_empty_dtype(CG_I64, 1, (int64_t[]){B + 1});
        for (int64_t b = 0; t && b <= B; b++)
            cg_data_i64(t)[b] = b * N;
        return t;
    }
    if (!o->offsets) {
        cg_set_error("embedding_bag: 1-d ids need offsets (the start of each bag)");
        return NULL;
    }
    if (!cg_check_ids("embedding_bag", "offsets", o->offsets))
        return NULL;
    if (o->offsets->dtype != ids->dtype) {
        cg_set_error("embedding_bag: offsets are %s and ids %s: give both one dtype (as PyTorch)",
                     cg_dtype_name(o->offsets->dtype), cg_dtype_name(ids->dtype));
        return NULL;
    }
    const int64_t m = cg_numel(o->offsets);
    if (o->offsets->ndim != 1 || m < 1) {
        char b[96];
        cg_set_error("embedding_bag: offsets must be 1-d with at least one entry, got %s",
                     cg_shape_str(o->offsets, b, sizeof b));
        return NULL;
    }
    cg_tensor *oc = cg_k_ids_i64("embedding_bag", "offsets", o->offsets);
    const int64_t B = o->include_last_offset ? m - 1 : m;
    cg_tensor *t = oc ? cg_empty_dtype(CG_I64, 1, (int64_t[]){B + 1}) : NULL;
    if (!t) {
        cg_release(oc);
        return NULL;
    }
    const int64_t *off = cg_data_i64(oc);
    int64_t *bd = cg_data_i64(t);
    const char *bad =
        off[0] != 0 ? "offsets[0] must be 0 (the first bag starts at the first id)" : NULL;
    for (int64_t k = 1; !bad && k < m; k++)
        if (off[k] < off[k - 1])
            bad = "offsets must not decrease";
    if (!bad && off[m - 1] > n)
        bad = "an offset is past the end of ids";
    if (bad) {
        cg_set_error("embedding_bag: %s (offsets [%lld .. %lld], %lld ids)", bad, (long long)off[0],
                     (long long)off[m - 1], (long long)n);
        cg_release_all(2, oc, t);
        return NULL;
    }
    memcpy(bd, off, (size_t)B * sizeof *bd);
    bd[B] = o->include_last_offset ? off[m - 1] : n;
    cg_release(oc);
    return t;
}

/* weight, ids, mode, per_sample_weights and padding_idx checked; the pad
 * id (-1: none) into *pad */
static bool bag_args(const cg_tensor *weight, const cg_tensor *ids, const cg_bag_opts *o,
                     int64_t *pad)
{
    if (!weight || !ids)
        return cg_error_null_input("cg_embedding_bag");
    if (!cg_check_f32("embedding_bag", "weight", weight) ||
        !cg_check_ids("embedding_bag", "ids", ids))
        return false;
    char s[96], t[96];
    if (weight->ndim != 2) {
        cg_set_error("embedding_bag: weight must be [V, D], got %s",
                     cg_shape_str(weight, s, sizeof s));
        return false;
    }
    if (ids->ndim != 1 && ids->ndim != 2) {
        cg_set_error("embedding_bag: ids must be 1-d (with offsets) or 2-d [B, N], got %s",
                     cg_shape_str(ids, s, sizeof s));
        return false;
    }
    if ((unsigned)o->mode > CG_BAG_MAX) {
        cg_set_error("embedding_bag: mode %d, expected CG_BAG_MEAN, CG_BAG_SUM or CG_BAG_MAX",
                     (int)o->mode);
        return false;
    }
    const cg_tensor *w = o->per_sample_weights;
    if (w && o->mode != CG_BAG_SUM) {
        cg_set_error("embedding_bag: per_sample_weights is only supported for mode sum "
                     "(got mode %s)",
                     o->mode == CG_BAG_MEAN ? "mean" : "max");
        return false;
    }
    if (w && !cg_check_f32("embedding_bag", "per_sample_weights", w))
        return false;
    if (w && !cg_same_shape(w, ids)) {
        cg_set_error("embedding_bag: per_sample_weights %s must have ids' shape %s",
                     cg_shape_str(w, s, sizeof s), cg_shape_str(ids, t, sizeof t));
        return false;
    }
    const int64_t V = weight->shape[0];
    *pad = -1;
    if (o->has_padding_idx) {
        if (o->padding_idx < -V || o->padding_idx >= V) {
            cg_set_error("embedding_bag: padding_idx %lld must be within [-%lld, %lld)",
                         (long long)o->padding_idx, (long long)V, (long long)V);
            return false;
        }
        *pad = o->padding_idx < 0 ? o->padding_idx + V : o->padding_idx;
    }
    return true;
}

/* ------------------------------------------------------------ forward */
/* out [B, D] (zeroed) from W; rows (max) [B, D] */
static void bag_forward(const bag_plan *p, int mode, const float *W, const float *sw, float *out,
                        int64_t *rows)
{
    const int64_t D = p->D;
    for (int64_t b = 0; b < p->B; b++) {
        float *o = out + b * D;
        int64_t c = 0;
        for (int64_t i = p->bounds[b]; i < p->bounds[b + 1]; i++) {
            if (p->ids[i] == p->pad)
                continue;
            const float *row = W + p->ids[i] * D;
            for (int64_t d = 0; d < D; d++) {
                if (mode != CG_BAG_MAX)
                    o[d] += sw ? sw[i] * row[d] : row[d];
                else if (c == 0 || row[d] > o[d]) /* the first maximum kept */
                    o[d] = row[d], rows[b * D + d] = p->ids[i];
            }
            c++;
        }
        for (int64_t d = 0; mode == CG_BAG_MEAN && c > 0 && d < D; d++)
            o[d] /= (float)c;
    }
}

static bool ids_in_range(const bag_plan *p)
{
    for (int64_t i = 0; i < p->n; i++)
        if (p->ids[i] < 0 || p->ids[i] >= p->V) {
            cg_set_error("embedding_bag: id %lld at position %lld is out of range [0, %lld)",
                         (long long)p->ids[i], (long long)i, (long long)p->V);
            return false;
        }
    return true;
}

cg_tensor *cg_embedding_bag(cg_tensor *weight, const cg_tensor *ids, const cg_bag_opts *o)
{
    const cg_bag_opts dflt = {0};
    o = o ? o : &dflt;
    int64_t pad = -1;
    if (!bag_args(weight, ids, o, &pad))
        return NULL;
    cg_tensor *flat = cg_k_ids_i64("embedding_bag", "ids", ids);
    cg_tensor *idc = flat ? cg_k_reshape(flat, 1, (int64_t[]){cg_numel(ids)}) : NULL;
    cg_release(flat);
    cg_tensor *bounds = idc ? bag_bounds(ids, o) : NULL;
    cg_tensor *Wc = bounds ? cg_k_contiguous(weight) : NULL;
    cg_tensor *swc = Wc && o->per_sample_weights ? cg_k_contiguous(o->per_sample_weights) : NULL;
    bag_plan p = {0};
    if (Wc)
        p = (bag_plan){cg_data_i64(idc),
                       cg_data_i64(bounds),
                       cg_numel(idc),
                       cg_numel(bounds) - 1,
                       weight->shape[0],
                       weight->shape[1],
                       pad};
    cg_tensor *out = Wc && (!o->per_sample_weights || swc) && ids_in_range(&p)
                         ? cg_zeros(2, (int64_t[]){p.B, p.D})
                         : NULL;
    cg_tensor *rows =
        out && o->mode == CG_BAG_MAX ? cg_full_dtype(CG_I64, 2, (int64_t[]){p.B, p.D}, -1.0) : NULL;
    if (out && (o->mode != CG_BAG_MAX || rows))
        bag_forward(&p, o->mode, cg_data(Wc), swc ? cg_data(swc) : NULL, cg_data(out),
                    rows ? cg_data_i64(rows) : NULL);
    else
        cg_release(out), out = NULL;
    cg_node *n;
    cg_tensor *in[2] = {weight, o->per_sample_weights};
    out = cg_recorded(out, CG_OP_EMBEDDING_BAG, in[1] ? 2 : 1, in, embedding_bag_bw, &n);
    if (n) {
        n->p.i[0] = o->mode;
        n->p.i[1] = pad;
        if (cg_node_save(n, idc) < 0 || cg_node_save(n, bounds) < 0 ||
            (rows && cg_node_save(n, rows) < 0))
            cg_release(out), out = NULL;
    }
    cg_release_all(5, idc, bounds, Wc, swc, rows);
    return out;
}
