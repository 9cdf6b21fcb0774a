/* Batches of token ids (nn/data.h). */
#include "nn/data.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

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
