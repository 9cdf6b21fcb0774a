/* Batches of token ids, padding and loaders on tensors (nn/data.h). */
#include "nn/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/ops.h"
#include "nn/module.h"

/* tokens must be an int64 vector of at least `need` tokens. */
static bool check_tokens(const char *who, const cg_tensor *tokens, int64_t need,
                         const char *need_text, int64_t B, int64_t T)
{
    if (!cg_check_dtype(who, "tokens", tokens, CG_I64))
        return false;
    if (tokens->ndim != 1 || B < 1 || T < 1 || tokens->shape[0] < need) {
        char b[96];
        cg_set_error("%s: need tokens of shape [n] with n >= %s, B >= 1 and T >= 1 (got tokens "
                     "%s, B=%lld, T=%lld)",
                     who, need_text, cg_shape_str(tokens, b, sizeof b), (long long)B, (long long)T);
        return false;
    }
    return true;
}

/* Row b of x and y: the window of T+1 tokens at start. */
static bool window(const cg_tensor *tokens, int64_t start, int64_t T, cg_tensor *x, cg_tensor *y,
                   int64_t b)
{
    cg_tensor *views[4] = {cg_view_select(x, 0, b), cg_view_narrow(tokens, 0, start, T),
                           cg_view_select(y, 0, b), cg_view_narrow(tokens, 0, start + 1, T)};
    bool ok = views[0] && views[1] && views[2] && views[3] && cg_k_copy_(views[0], views[1]) &&
              cg_k_copy_(views[2], views[3]);
    cg_release_all(4, views[0], views[1], views[2], views[3]);
    return ok;
}

static bool new_batch(int64_t B, int64_t T, cg_tensor **x, cg_tensor **y)
{
    int64_t shape[2] = {B, T};
    *x = cg_empty_dtype(CG_I64, 2, shape);
    *y = cg_empty_dtype(CG_I64, 2, shape);
    if (*x && *y)
        return true;
    cg_release_all(2, *x, *y);
    *x = *y = NULL;
    return false;
}

bool cg_random_batch(const cg_tensor *tokens, int64_t B, int64_t T, cg_rng *rng, cg_tensor **x,
                     cg_tensor **y)
{
    if (!x || !y || !rng) {
        cg_set_error("cg_random_batch: %s is NULL", !rng ? "rng" : "an output pointer");
        return false;
    }
    *x = *y = NULL;
    if (!check_tokens("cg_random_batch", tokens, T < INT64_MAX ? T + 1 : INT64_MAX, "T + 1", B, T))
        return false;
    if (!new_batch(B, T, x, y))
        return false;
    int64_t n = tokens->shape[0];
    for (int64_t b = 0; b < B; b++) /* torch.randint(len(data) - block_size, (B,)) */
        if (!window(tokens, (int64_t)cg_rng_below(rng, (uint64_t)(n - T)), T, *x, *y, b)) {
            cg_release_all(2, *x, *y);
            *x = *y = NULL;
            return false;
        }
    return true;
}

struct cg_batch_iter {
    cg_tensor *tokens; /* a reference of the iterator's */
    int64_t B, T;
    int64_t n_windows; /* (n - 1) / T */
    int64_t *perm;     /* this epoch's order of the windows */
    int64_t pos;       /* windows used in this epoch */
    int64_t epoch;     /* epochs started */
    cg_rng *rng;       /* borrowed */
};

cg_batch_iter *cg_batch_iter_new(const cg_tensor *tokens, int64_t B, int64_t T, cg_rng *rng)
{
    if (!rng) {
        cg_set_error("cg_batch_iter_new: rng is NULL");
        return NULL;
    }
    if (!check_tokens("cg_batch_iter_new", tokens,
                      B >= 1 && T >= 1 && B <= (INT64_MAX - 1) / T ? B * T + 1 : INT64_MAX,
                      "B*T + 1", B, T))
        return NULL;
    cg_batch_iter *it = calloc(1, sizeof *it);
    if (!it) {
        cg_set_error("cg_batch_iter_new: out of memory");
        return NULL;
    }
    cg_tensor *own = cg_hold(cg_retain((cg_tensor *)tokens));
    *it = (cg_batch_iter){own, B, T, (tokens->shape[0] - 1) / T, NULL, 0, 0, rng};
    return it;
}

int cg_batch_iter_next(cg_batch_iter *it, cg_tensor **x, cg_tensor **y)
{
    if (!it || !x || !y) {
        cg_set_error("cg_batch_iter_next: %s is NULL", !it ? "the iterator" : "an output pointer");
        return -1;
    }
    *x = *y = NULL;
    if (!it->perm) { /* a new epoch */
        if (!(it->perm = cg_randperm(it->rng, it->n_windows)))
            return -1;
        it->pos = 0;
        it->epoch++;
    }
    if (it->pos + it->B > it->n_windows) {
        free(it->perm);
        it->perm = NULL;
        return 0;
    }
    if (!new_batch(it->B, it->T, x, y))
        return -1;
    for (int64_t b = 0; b < it->B; b++)
        if (!window(it->tokens, it->perm[it->pos++] * it->T, it->T, *x, *y, b)) {
            cg_release_all(2, *x, *y);
            *x = *y = NULL;
            return -1;
        }
    return 1;
}

int64_t cg_batch_iter_epoch(const cg_batch_iter *it) { return it ? it->epoch : 0; }

void cg_batch_iter_free(cg_batch_iter *it)
{
    if (!it)
        return;
    cg_release_held(it->tokens);
    free(it->perm);
    free(it);
}

/* ------------------------------------------------------------ padding */
/* The sequences are one dtype, with one trailing shape; *T: the longest. */
static bool check_seqs(const char *who, int64_t n, cg_tensor *const *seqs, int64_t *T)
{
    if (n < 1 || !seqs) {
        cg_set_error("%s: need at least one sequence (got %lld)", who, (long long)n);
        return false;
    }
    *T = 0;
    for (int64_t i = 0; i < n; i++) {
        const cg_tensor *s = seqs[i], *s0 = seqs[0];
        char b0[96], b[96];
        if (!s) {
            cg_set_error("%s: sequence %lld is NULL", who, (long long)i);
            return false;
        }
        if (cg_debug_enabled() && !cg_lifetime_use_ok(s, who))
            return false;
        if (s->dtype != s0->dtype) {
            cg_set_error("%s: sequence %lld is %s, sequence 0 is %s (one dtype expected)", who,
                         (long long)i, cg_dtype_name(s->dtype), cg_dtype_name(s0->dtype));
            return false;
        }
        if (s->ndim < 1) {
            cg_set_error("%s: sequence %lld has shape [], expected [L, ...] (a sequence of one "
                         "element is [1])",
                         who, (long long)i);
            return false;
        }
        if (s->ndim != s0->ndim ||
            memcmp(s->shape + 1, s0->shape + 1, (size_t)(s->ndim - 1) * sizeof *s->shape)) {
            cg_set_error("%s: sequence %lld has shape %s, sequence 0 %s (expected [L, ...] with "
                         "one trailing shape)",
                         who, (long long)i, cg_shape_str(s, b, sizeof b),
                         cg_shape_str(s0, b0, sizeof b0));
            return false;
        }
        *T = s->shape[0] > *T ? s->shape[0] : *T;
    }
    return true;
}

/* The padding value must be one of the sequences' dtype, as PyTorch's
 * pad_sequence requires ("value cannot be converted to type int64_t
 * without overflow"): an integer dtype takes a finite value in its range
 * (cut toward zero), a float dtype a value that does not round to an
 * infinity (an infinity or NaN itself is one). */
static bool check_pad(const char *who, cg_dtype dt, double pad)
{
    char e[8];
    cg_elem_set(dt, e, pad);
    double lim = dt == CG_I64 ? 0x1p63 : dt == CG_I32 ? 0x1p31 : 0;
    bool bad = lim > 0 ? !(pad >= -lim && pad < lim)
                       : cg_dtype_is_float(dt) && isfinite(pad) && isinf(cg_elem_get(dt, e));
    if (bad)
        cg_set_error("%s: padding value %g cannot be converted to %s without overflow", who, pad,
                     cg_dtype_name(dt));
    return !bad;
}

/* Row i of out (and of mask) takes seq: its first L positions. */
static bool pad_row(cg_tensor *out, cg_tensor *mask, int64_t i, const cg_tensor *seq)
{
    int64_t L = seq->shape[0];
    if (L == 0)
        return true;
    cg_tensor *row = cg_view_select(out, 0, i), *dst = row ? cg_view_narrow(row, 0, 0, L) : NULL;
    bool ok = dst && cg_k_copy_(dst, seq);
    cg_release_all(2, row, dst);
    if (ok && mask) {
        row = cg_view_select(mask, 0, i);
        dst = row ? cg_view_narrow(row, 0, 0, L) : NULL;
        ok = dst && cg_fill_(dst, 0.0f);
        cg_release_all(2, row, dst);
    }
    return ok;
}

cg_tensor *cg_pad_sequence(int64_t n, cg_tensor *const *seqs, double pad, cg_tensor **pad_mask)
{
    int64_t T;
    if (pad_mask)
        *pad_mask = NULL;
    if (!check_seqs("cg_pad_sequence", n, seqs, &T) ||
        !check_pad("cg_pad_sequence", seqs[0]->dtype, pad))
        return NULL;
    int64_t shape[CG_MAX_DIMS + 1] = {n, T}, mshape[2] = {n, T};
    memcpy(shape + 2, seqs[0]->shape + 1, (size_t)(seqs[0]->ndim - 1) * sizeof *shape);
    cg_tensor *out = cg_full_dtype(seqs[0]->dtype, seqs[0]->ndim + 1, shape, pad);
    cg_tensor *mask = pad_mask ? cg_full_dtype(CG_BOOL, 2, mshape, 1.0) : NULL;
    bool ok = out && (mask || !pad_mask);
    for (int64_t i = 0; ok && i < n; i++)
        ok = pad_row(out, mask, i, seqs[i]);
    if (!ok) {
        cg_release_all(2, out, mask);
        return NULL;
    }
    if (pad_mask)
        *pad_mask = mask;
    return out;
}

/* ------------------------------------------------------------ loader */
/* A loader over N rows: the labels y [N, ...] retained and held. */
static cg_loader *loader_new(const char *who, int64_t N, cg_tensor *y, int64_t B, cg_rng *rng)
{
    if (y && (y->ndim < 1 || y->shape[0] != N)) {
        char b[96];
        cg_set_error("%s: need %lld labels y [N, ...] or NULL (got y %s)", who, (long long)N,
                     cg_shape_str(y, b, sizeof b));
        return NULL;
    }
    if (B < 1) {
        cg_set_error("%s: need a batch size B >= 1 (got B=%lld)", who, (long long)B);
        return NULL;
    }
    cg_loader *ld = calloc(1, sizeof *ld);
    if (!ld) {
        cg_set_error("%s: out of memory", who);
        return NULL;
    }
    *ld = (cg_loader){
        .labels = y ? cg_hold(cg_retain(y)) : NULL, .N = N, .B = B, .pos = N, .rng = rng};
    return ld;
}

cg_loader *cg_loader_new(cg_tensor *x, cg_tensor *y, int64_t B, cg_rng *rng)
{
    if (!x) {
        cg_error_null_input("cg_loader_new");
        return NULL;
    }
    if (x->ndim < 1 || x->shape[0] < 1) {
        char b[96];
        cg_set_error("cg_loader_new: need x of shape [N, ...] with N >= 1 (got %s)",
                     cg_shape_str(x, b, sizeof b));
        return NULL;
    }
    cg_loader *ld = loader_new("cg_loader_new", x->shape[0], y, B, rng);
    if (ld)
        ld->data = cg_hold(cg_retain(x));
    return ld;
}

cg_loader *cg_loader_new_seqs(int64_t N, cg_tensor *const *seqs, cg_tensor *y, double pad,
                              int64_t B, cg_rng *rng)
{
    int64_t T;
    if (!check_seqs("cg_loader_new_seqs", N, seqs, &T) ||
        !check_pad("cg_loader_new_seqs", seqs[0]->dtype, pad))
        return NULL;
    cg_loader *ld = loader_new("cg_loader_new_seqs", N, y, B, rng);
    if (!ld)
        return NULL;
    if (!(ld->seqs = malloc((size_t)N * sizeof *ld->seqs))) {
        cg_set_error("cg_loader_new_seqs: out of memory");
        cg_loader_free(ld);
        return NULL;
    }
    for (int64_t i = 0; i < N; i++)
        ld->seqs[i] = cg_hold(cg_retain(seqs[i]));
    ld->pad = pad;
    return ld;
}

/* Start an epoch: a new order of the rows. */
static bool new_epoch(cg_loader *ld)
{
    const unsigned long serial = cg_error_serial();
    ld->perm = ld->rng ? cg_randperm(ld->rng, ld->N) : malloc((size_t)ld->N * sizeof(int64_t));
    if (!ld->perm) {
        if (cg_error_serial() == serial)
            cg_set_error("cg_loader_next: out of memory");
        return false;
    }
    for (int64_t i = 0; !ld->rng && i < ld->N; i++)
        ld->perm[i] = i;
    ld->pos = 0;
    ld->epoch++;
    return true;
}

/* The batch of the n rows at perm[pos..pos+n), in the loader's scope. */
static bool collate(cg_loader *ld, int64_t n)
{
    const int64_t *order = ld->perm + ld->pos;
    cg_tensor *rows = cg_from_i64(1, &n, order);
    ld->y = rows && ld->labels ? cg_index_select(ld->labels, 0, rows) : NULL;
    if (ld->data) {
        ld->x = rows ? cg_index_select(ld->data, 0, rows) : NULL;
    } else {
        cg_tensor **batch = malloc((size_t)n * sizeof *batch);
        for (int64_t j = 0; batch && j < n; j++)
            batch[j] = ld->seqs[order[j]];
        ld->x = batch ? cg_pad_sequence(n, batch, ld->pad, &ld->mask) : NULL;
        if (!batch)
            cg_set_error("cg_loader_next: out of memory");
        free(batch);
    }
    cg_release(rows);
    return ld->x && (ld->y || !ld->labels);
}

/* The previous batch and what was made from it: its scope, unless an
 * outer one (another loader's, the caller's) ended it first, then the
 * loader's own references to the batch. */
static void end_batch(cg_loader *ld)
{
    (void)cg_scope_end_id(ld->scope_id); /* false: an outer one ended it, no error */
    ld->scope_id = 0;
    cg_tensor *own[3] = {ld->x, ld->y, ld->mask};
    for (int k = 0; k < 3; k++)
        cg_release_held(own[k]);
    ld->x = ld->y = ld->mask = NULL;
}

bool cg_loader_next(cg_loader *ld)
{
    if (!ld) {
        cg_error_null_input("cg_loader_next");
        return false;
    }
    end_batch(ld);
    ld->n = 0;
    ld->failed = false;
    if (ld->pos >= ld->N && ld->perm) { /* end of an epoch */
        free(ld->perm);
        ld->perm = NULL;
        return false;
    }
    if (!ld->perm && !new_epoch(ld)) {
        ld->failed = true;
        return false;
    }
    int64_t n = ld->N - ld->pos < ld->B ? ld->N - ld->pos : ld->B;
    cg_scope *s = cg_scope_begin();
    ld->scope_id = cg_scope_id(s);
    if (!s || !collate(ld, n)) {
        ld->x = ld->y = ld->mask = NULL; /* what was made dies with the scope */
        ld->failed = true;
        return false;
    }
    /* the batch lives to this loader's next call, also when an outer
     * scope ends this one first (a second loader's inside the first's) */
    cg_retain_held(ld->x);
    cg_retain_held(ld->y);
    cg_retain_held(ld->mask);
    ld->n = n;
    ld->pos += n;
    return true;
}

void cg_loader_restart(cg_loader *ld)
{
    if (!ld)
        return;
    end_batch(ld);
    ld->n = 0;
    ld->failed = false;
    free(ld->perm); /* the next call draws a new order */
    ld->perm = NULL;
}

void cg_loader_free(cg_loader *ld)
{
    if (!ld)
        return;
    end_batch(ld);
    for (int64_t i = 0; ld->seqs && i < ld->N; i++) {
        cg_release_held(ld->seqs[i]);
    }
    cg_tensor *own[2] = {ld->data, ld->labels};
    for (int k = 0; k < 2; k++) {
        cg_release_held(own[k]);
    }
    free(ld->seqs);
    free(ld->perm);
    free(ld);
}

/* ------------------------------------------------------------ accuracy */
double cg_accuracy(const cg_tensor *logits, const cg_tensor *y)
{
    if (!logits || !y) {
        if (!cg_has_error())
            cg_set_error("cg_accuracy: %s is NULL", logits ? "y" : "logits");
        return NAN;
    }
    if (!cg_check_dtype("cg_accuracy", "y", y, CG_I64))
        return NAN;
    if (logits->ndim != 2 || y->ndim != 1 || y->shape[0] != logits->shape[0] || y->shape[0] < 1) {
        char b[96], c[96];
        cg_set_error("cg_accuracy: logits %s and y %s are not [n, C] and [n] with n >= 1",
                     cg_shape_str(logits, b, sizeof b), cg_shape_str(y, c, sizeof c));
        return NAN;
    }
    cg_tensor *pred = cg_argmax(logits, 1, false);
    cg_tensor *hit = pred ? cg_eq(pred, y) : NULL;
    cg_tensor *dense = hit ? cg_contiguous(hit) : NULL;
    const bool *h = dense ? cg_data_bool(dense) : NULL;
    int64_t hits = 0, n = y->shape[0];
    for (int64_t i = 0; h && i < n; i++)
        hits += h[i];
    cg_release_all(3, pred, hit, dense);
    return h ? (double)hits / (double)n : NAN;
}

double cg_module_accuracy(cg_module *m, cg_tensor *x, const cg_tensor *y)
{
    if (!m || !x) {
        if (!cg_has_error())
            cg_set_error("cg_module_accuracy: %s is NULL", m ? "x" : "module");
        return NAN;
    }
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    double acc = s ? cg_accuracy(cg_module_forward(m, x), y) : NAN;
    cg_scope_end(s);
    cg_no_grad_end();
    return acc;
}
