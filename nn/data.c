/* Batches of token ids (nn/data.h). */
#include "nn/data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "nn/module.h"

static void window(const int64_t *tokens, int64_t start, int64_t T, int64_t *x, int64_t *y)
{
    memcpy(x, tokens + start, (size_t)T * sizeof *x);
    memcpy(y, tokens + start + 1, (size_t)T * sizeof *y);
}

bool cg_random_batch(const int64_t *tokens, int64_t n, int64_t B, int64_t T, cg_rng *rng,
                     int64_t *x, int64_t *y)
{
    if (!tokens || !rng || !x || !y || B < 1 || T < 1 || n < T + 1) {
        cg_set_error("random_batch: need tokens, rng, x, y, B >= 1, T >= 1 and n >= T + 1 tokens "
                     "(got B=%lld, T=%lld, n=%lld)",
                     (long long)B, (long long)T, (long long)n);
        return false;
    }
    for (int64_t b = 0; b < B; b++) /* torch.randint(len(data) - block_size, (B,)) */
        window(tokens, (int64_t)cg_rng_below(rng, (uint64_t)(n - T)), T, x + b * T, y + b * T);
    return true;
}

cg_batch_iter *cg_batch_iter_new(const int64_t *tokens, int64_t n, int64_t B, int64_t T,
                                 cg_rng *rng)
{
    if (!tokens || !rng || B < 1 || T < 1 || n < B * T + 1) {
        cg_set_error("batch iterator: need tokens, rng, B >= 1, T >= 1 and n >= B*T + 1 tokens "
                     "(got B=%lld, T=%lld, n=%lld)",
                     (long long)B, (long long)T, (long long)n);
        return NULL;
    }
    cg_batch_iter *it = calloc(1, sizeof *it);
    if (!it) {
        cg_set_error("batch iterator: out of memory");
        return NULL;
    }
    *it = (cg_batch_iter){tokens, n, B, T, (n - 1) / T, NULL, 0, 0, rng};
    return it;
}

int cg_batch_iter_next(cg_batch_iter *it, int64_t *x, int64_t *y)
{
    if (!it || !x || !y) {
        cg_set_error("batch iterator: NULL argument");
        return -1;
    }
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
    for (int64_t b = 0; b < it->B; b++)
        window(it->tokens, it->perm[it->pos++] * it->T, it->T, x + b * it->T, y + b * it->T);
    return 1;
}

void cg_batch_iter_free(cg_batch_iter *it)
{
    if (!it)
        return;
    free(it->perm);
    free(it);
}

/* ------------------------------------------------------------ loader */
cg_loader *cg_loader_new(cg_tensor *x, const int64_t *y, int64_t B, cg_rng *rng)
{
    if (!x) {
        cg_error_null_input("cg_loader_new");
        return NULL;
    }
    if (x->ndim < 1 || x->shape[0] < 1 || !y || B < 1) {
        cg_set_error("loader: need x of shape [N, ...] with N >= 1, N labels and B >= 1 (got "
                     "ndim %d, labels %s, B=%lld)",
                     x->ndim, y ? "given" : "NULL", (long long)B);
        return NULL;
    }
    cg_loader *ld = calloc(1, sizeof *ld);
    int64_t N = x->shape[0];
    int64_t *lab = malloc((size_t)N * sizeof *lab), *yb = malloc((size_t)N * sizeof *yb);
    if (!ld || !lab || !yb) {
        free(ld), free(lab), free(yb);
        cg_set_error("loader: out of memory");
        return NULL;
    }
    memcpy(lab, y, (size_t)N * sizeof *lab);
    *ld = (cg_loader){.y = yb,
                      .data = cg_hold(cg_retain(x)),
                      .labels = lab,
                      .N = N,
                      .B = B,
                      .pos = N,
                      .rng = rng};
    return ld;
}

bool cg_loader_next(cg_loader *ld)
{
    if (!ld) {
        cg_error_null_input("cg_loader_next");
        return false;
    }
    if (ld->scope) { /* the previous batch and what was made from it */
        cg_scope_end(ld->scope);
        ld->scope = NULL;
    }
    ld->x = NULL;
    ld->n = 0;
    if (ld->pos >= ld->N && ld->perm) { /* end of an epoch */
        free(ld->perm);
        ld->perm = NULL;
        return false;
    }
    if (!ld->perm) { /* a new epoch */
        ld->perm = ld->rng ? cg_randperm(ld->rng, ld->N) : malloc((size_t)ld->N * sizeof(int64_t));
        if (!ld->perm) {
            if (!cg_has_error())
                cg_set_error("loader: out of memory");
            return false;
        }
        for (int64_t i = 0; !ld->rng && i < ld->N; i++)
            ld->perm[i] = i;
        ld->pos = 0;
        ld->epoch++;
    }
    int64_t n = ld->N - ld->pos < ld->B ? ld->N - ld->pos : ld->B;
    if (!(ld->scope = cg_scope_begin()))
        return false;
    for (int64_t j = 0; j < n; j++)
        ld->y[j] = ld->labels[ld->perm[ld->pos + j]];
    cg_tensor *rows = cg_from_i64(1, &n, ld->perm + ld->pos);
    ld->x = rows ? cg_index_select(ld->data, 0, rows) : NULL;
    cg_release(rows);
    if (!ld->x)
        return false;
    ld->n = n;
    ld->pos += n;
    return true;
}

void cg_loader_free(cg_loader *ld)
{
    if (!ld)
        return;
    if (ld->scope)
        cg_scope_end(ld->scope);
    cg_unhold(ld->data);
    cg_release(ld->data);
    free(ld->labels);
    free(ld->y);
    free(ld->perm);
    free(ld);
}

double cg_accuracy(const cg_tensor *logits, const int64_t *y, int64_t n)
{
    if (!logits || !y) {
        if (!cg_has_error())
            cg_set_error("accuracy: %s is NULL", logits ? "y" : "logits");
        return NAN;
    }
    if (logits->ndim != 2 || logits->shape[0] != n || n < 1) {
        char b[96];
        cg_set_error("accuracy: logits %s do not hold %lld rows of class scores [n, C]",
                     cg_shape_str(logits, b, sizeof b), (long long)n);
        return NAN;
    }
    cg_tensor *pred = cg_argmax(logits, 1, false);
    if (!pred)
        return NAN;
    const int64_t *p = cg_data_i64(pred);
    int64_t hits = 0;
    for (int64_t i = 0; i < n; i++)
        hits += p[i] == y[i];
    cg_release(pred);
    return (double)hits / (double)n;
}

double cg_module_accuracy(cg_module *m, cg_tensor *x, const int64_t *y)
{
    if (!m || !x) {
        if (!cg_has_error())
            cg_set_error("accuracy: %s is NULL", m ? "x" : "module");
        return NAN;
    }
    cg_no_grad_begin();
    cg_scope *s = cg_scope_begin();
    double acc = s ? cg_accuracy(cg_module_forward(m, x), y, x->ndim ? x->shape[0] : 0) : NAN;
    cg_scope_end(s);
    cg_no_grad_end();
    return acc;
}
