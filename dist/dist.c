/* Data-parallel training, the part that is the same with and without MPI:
 * shares and seeds per rank, the module wrappers and ZeRO-1's global checks.
 * meson builds one backend beside it (the `mpi` option): dist_mpi.c and
 * dist_reducer.c with MPI, dist_single.c without. See dist.h. */
#include "dist/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/parse.h"
#include "dist/dist_args.h"

bool cg_dist_is_root(void) { return cg_dist_rank() == 0; }

bool cg_dist_share(int64_t n, int64_t *lo, int64_t *hi)
{
    *lo = n * cg_dist_rank() / cg_dist_size();
    *hi = n * (cg_dist_rank() + 1) / cg_dist_size();
    return n >= cg_dist_size();
}

uint64_t cg_dist_seed_for_rank(uint64_t seed, int rank)
{
    return seed ^ ((uint64_t)rank * 0x9E3779B97F4A7C15ULL);
}

uint64_t cg_dist_rank_seed(uint64_t seed) { return cg_dist_seed_for_rank(seed, cg_dist_rank()); }

/* ------------------------------------------------ arguments (dist_args.h) */
bool cg_dist_tensors_ok(const char *op, const char *noun, int n, cg_tensor *const *ts,
                        bool contiguous)
{
    if (n < 0 || (n > 0 && !ts)) {
        cg_set_error("dist: %s: bad %s list", op, noun);
        return false;
    }
    for (int i = 0; i < n; i++)
        if (!ts[i] || (contiguous && !cg_is_contiguous(ts[i]))) {
            cg_set_error("dist: %s: %s %d is %s", op, noun, i, ts[i] ? "not contiguous" : "NULL");
            return false;
        }
    return true;
}

bool cg_dist_weight_ok(const char *op, double weight)
{
    if (!(weight >= 0) || !isfinite(weight)) {
        cg_set_error("dist: %s: weight %g must be finite and >= 0", op, weight);
        return false;
    }
    return true;
}

bool cg_dist_reducer_args_ok(int n, cg_tensor *const *params, double bucket_mb)
{
    if (!cg_dist_tensors_ok("reducer", "parameter", n, params, false))
        return false;
    if (!(bucket_mb > 0 && bucket_mb <= 1024)) { /* CG_DIST_BUCKET_MB's bound */
        cg_set_error("dist: reducer: bucket size %g MB must be in (0, 1024]", bucket_mb);
        return false;
    }
    return true;
}

/* Parameter tensors of a module, in cg_module_params() order (malloc'd). */
static cg_tensor **module_tensors(cg_module *m, int *n)
{
    *n = 0;
    if (!m) {
        cg_set_error("dist: module is NULL");
        return NULL;
    }
    cg_param_list l = {0};
    if (!cg_module_params(m, &l))
        return NULL;
    cg_tensor **ts = malloc((size_t)(l.n > 0 ? l.n : 1) * sizeof *ts);
    if (!ts) {
        cg_param_list_free(&l);
        cg_set_error("dist: out of memory");
        return NULL;
    }
    for (int i = 0; i < l.n; i++)
        ts[i] = l.items[i].tensor;
    *n = l.n;
    cg_param_list_free(&l);
    return ts;
}

/* ------------------------------------------------ module wrappers */
/* "parameter 'w' float32 [2, 3]\n" for each entry of l (kind: "parameter"
 * or "buffer"), appended to *text (malloc'd, *len its length). */
static bool describe(const cg_param_list *l, const char *kind, char **text, size_t *len)
{
    for (int i = 0; i < l->n; i++) {
        const cg_tensor *t = l->items[i].tensor;
        char shape[128];
        int n = snprintf(NULL, 0, "%s '%s' %s %s\n", kind, l->items[i].name,
                         cg_dtype_name(t->dtype), cg_shape_str(t, shape, sizeof shape));
        char *p = realloc(*text, *len + (size_t)n + 1);
        if (!p) {
            cg_set_error("dist: out of memory");
            return false;
        }
        *text = p;
        snprintf(p + *len, (size_t)n + 1, "%s '%s' %s %s\n", kind, l->items[i].name,
                 cg_dtype_name(t->dtype), shape);
        *len += (size_t)n;
    }
    return true;
}

/* Line k of text (without its newline) into buf, or "nothing" past the end. */
static const char *line_of(const char *text, int k, char *buf, size_t cap)
{
    for (; k > 0 && text; k--)
        text = strchr(text, '\n') ? strchr(text, '\n') + 1 : NULL;
    if (!text || !*text)
        return "nothing";
    size_t n = strcspn(text, "\n");
    snprintf(buf, cap, "%.*s", (int)(n < cap ? n : cap - 1), text);
    return buf;
}

/* The number of whole lines a and b (which differ) have in common. */
static int first_difference(const char *a, const char *b)
{
    int k = 0;
    for (;;) {
        size_t na = strcspn(a, "\n"), nb = strcspn(b, "\n");
        if (na != nb || memcmp(a, b, na) || !a[na] || !b[nb])
            return k;
        a += na + 1;
        b += nb + 1;
        k++;
    }
}

/* Every rank compares the text of its module (names, dtypes, shapes) with
 * rank 0's; if some rank's differs, every rank fails with one line naming
 * the first difference (the lowest entry, then the lowest rank), before
 * anything is sent. */
static bool same_layout(const char *mine, size_t len)
{
    uint64_t root_len = len + 1;
    if (!cg_dist_broadcast_bytes(&root_len, sizeof root_len))
        return false;
    char *root = malloc(root_len);
    if (!root) {
        cg_set_error("dist: out of memory");
        return false; /* the other ranks wait in the next broadcast: the watchdog ends them */
    }
    if (cg_dist_is_root())
        memcpy(root, mine, root_len);
    bool ok = cg_dist_broadcast_bytes(root, root_len);
    bool bad = ok && strcmp(mine, root);
    int k = bad ? first_difference(mine, root) : 0;
    /* the smallest (line, rank) that differs, as the largest 2^52 - key */
    double key = bad ? 4503599627370496.0 - ((double)k * cg_dist_size() + cg_dist_rank()) : 0;
    ok = ok && cg_dist_allreduce_max(&key, 1);
    if (ok && key > 0) {
        int64_t code = (int64_t)(4503599627370496.0 - key);
        int line = (int)(code / cg_dist_size()), rank = (int)(code % cg_dist_size());
        char here[512], there[512];
        if (rank == cg_dist_rank())
            cg_set_error("dist: broadcast: rank %d's module differs from rank 0's: %s here, %s "
                         "on rank 0 (every rank must build the same parameters and buffers)",
                         rank, line_of(mine, line, here, sizeof here),
                         line_of(root, line, there, sizeof there));
        else
            cg_set_error("dist: broadcast: rank %d's module differs from rank 0's at %s of "
                         "rank 0 (every rank must build the same parameters and buffers)",
                         rank, line_of(root, line, there, sizeof there));
        ok = false;
    }
    free(root);
    return ok;
}
/* m's parameters (into *ps, unless ps is NULL) and buffers (*bs), once
 * every rank has checked that they are named, typed and shaped as rank 0's.
 * False + error on every rank alike. */
static bool module_checked(cg_module *m, cg_param_list *ps, cg_param_list *bs)
{
    if (!m) {
        cg_set_error("dist: broadcast: module is NULL");
        return false;
    }
    char *text = NULL;
    size_t len = 0;
    const bool one = cg_dist_size() == 1; /* nothing to compare */
    bool ok =
        (!ps || (cg_module_params(m, ps) && (one || describe(ps, "parameter", &text, &len)))) &&
        cg_module_buffers(m, bs) && (one || describe(bs, "buffer", &text, &len));
    ok = ok && (one || same_layout(text ? text : "", len));
    free(text);
    return ok;
}

/* Rank 0's bytes of every buffer (each numel times its dtype's size) to the
 * other ranks, packed into one broadcast. */
static bool broadcast_buffer_bytes(const cg_param_list *bs)
{
    size_t total = 0;
    for (int i = 0; i < bs->n; i++)
        total += (size_t)cg_numel(bs->items[i].tensor) * cg_dtype_size(bs->items[i].tensor->dtype);
    if (cg_dist_size() == 1 || total == 0)
        return true;
    unsigned char *pack = malloc(total);
    if (!pack) {
        cg_set_error("dist: broadcast: out of memory packing %zu bytes of buffers", total);
        return false;
    }
    size_t off = 0;
    for (int i = 0; cg_dist_is_root() && i < bs->n; i++) {
        const cg_tensor *t = bs->items[i].tensor;
        size_t n = (size_t)cg_numel(t) * cg_dtype_size(t->dtype);
        memcpy(pack + off, cg_data_ptr(t), n);
        off += n;
    }
    bool ok = cg_dist_broadcast_bytes(pack, total);
    off = 0;
    for (int i = 0; ok && i < bs->n; i++) {
        cg_tensor *t = bs->items[i].tensor;
        size_t n = (size_t)cg_numel(t) * cg_dtype_size(t->dtype);
        if (!cg_dist_is_root())
            memcpy(cg_data_ptr(t), pack + off, n);
        cg_tensor_modified(t); /* the broadcast wrote it on every rank but 0 */
        off += n;
    }
    free(pack);
    return ok;
}

bool cg_dist_broadcast_module(cg_module *m)
{
    cg_param_list ps = {0}, bs = {0};
    bool ok = module_checked(m, &ps, &bs);
    cg_tensor **ts = ok ? malloc((size_t)(ps.n > 0 ? ps.n : 1) * sizeof *ts) : NULL;
    if (ok && !ts) {
        cg_set_error("dist: out of memory");
        ok = false;
    }
    for (int i = 0; ok && i < ps.n; i++)
        ts[i] = ps.items[i].tensor;
    ok = ok && cg_dist_broadcast_tensors(ps.n, ts) && broadcast_buffer_bytes(&bs);
    free(ts);
    cg_param_list_free(&ps);
    cg_param_list_free(&bs);
    return ok;
}

bool cg_dist_broadcast_buffers(cg_module *m)
{
    cg_param_list bs = {0};
    bool ok = module_checked(m, NULL, &bs) && broadcast_buffer_bytes(&bs);
    cg_param_list_free(&bs);
    return ok;
}

bool cg_dist_average_grads(cg_module *m, double weight)
{
    int n = 0;
    cg_tensor **ts = module_tensors(m, &n);
    if (!ts)
        return false;
    bool ok = cg_dist_average_grads_tensors(n, ts, weight);
    free(ts);
    return ok;
}

/* ------------------------------------------------ ZeRO-1: global checks */
double cg_dist_clip_grad_norm(cg_optim *shard, double max_norm)
{
    if (!shard || !(max_norm >= 0)) {
        cg_set_error("dist: clip_grad_norm: %s",
                     !shard ? "optimizer is NULL" : "max_norm must be >= 0");
        return -1;
    }
    double ss = cg_optim_grad_sqsum(shard);
    /* the sum of squares and whether some rank failed, on every rank */
    double v[2] = {ss >= 0 ? ss : 0, ss < 0 ? 1 : 0};
    if (!cg_dist_allreduce_sum(v, 2))
        return -1;
    if (v[1] > 0) {
        if (ss >= 0)
            cg_set_error("dist: clip_grad_norm: another rank could not read its gradients");
        return -1;
    }
    double total = sqrt(v[0]);
    if (max_norm > 0 && !cg_optim_clip_grads_by(shard, total, max_norm))
        return -1;
    return total;
}

bool cg_dist_grads_finite(const cg_optim *shard)
{
    int n = cg_optim_count(shard), bad = -1;
    bool fine = cg_optim_grads_finite(shard, &bad);
    char mine[512] = "";
    if (!fine)
        snprintf(mine, sizeof mine, "%s", cg_last_error());
    /* the first culprit in optimizer order over all ranks: the largest n - bad */
    double first = fine ? 0 : (double)(n - bad);
    if (!cg_dist_allreduce_max(&first, 1))
        return false;
    if (first == 0)
        return true;
    int culprit = n - (int)first;
    if (!fine && bad == culprit)
        cg_set_error("%s (on rank %d)", mine, cg_dist_rank());
    else
        cg_set_error("non-finite gradient: '%s' has a NaN or Inf in another rank's shard",
                     cg_optim_param_name(shard, culprit));
    return false;
}
