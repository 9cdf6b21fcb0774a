/* Shapes as arrays of sizes: their element count, their string, a dim
 * counted from the end, and broadcasting two of them (NumPy's rule). No
 * tensor is made or read here but for its shape, so every layer's checks
 * can use them. */
#include <stdio.h>

#include "core/error.h"
#include "core/tensor.h"

int64_t cg_numel_shape(int ndim, const int64_t *shape)
{
    if (ndim > 0 && !shape) {
        cg_set_error("cg_numel_shape: NULL shape (ndim %d)", ndim);
        return 0;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

/* A NULL buffer is an error of the caller's (fn); the shape functions then
 * return NULL and write nothing. */
static bool shape_buf_ok(const char *fn, const char *buf)
{
    if (!buf)
        cg_set_error("%s: NULL buffer", fn);
    return buf != NULL;
}

char *cg_shape_str_n(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t used = 0;
    if (!shape_buf_ok("cg_shape_str_n", buf) || n == 0)
        return buf;
    if (ndim > 0 && !shape) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, n - used, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

char *cg_shape_str(const cg_tensor *t, char *buf, size_t n)
{
    if (!shape_buf_ok("cg_shape_str", buf) || n == 0)
        return buf;
    if (!t) {
        snprintf(buf, n, "(null)");
        return buf;
    }
    return cg_shape_str_n(t->ndim, t->shape, buf, n);
}

int cg_norm_dim(const char *op, int dim, int ndim)
{
    int d = dim < 0 ? dim + ndim : dim;
    if (d < 0 || d >= ndim) {
        cg_set_error("%s: dim %d out of range for a tensor with %d dims", op, dim, ndim);
        return -1;
    }
    return d;
}

int cg_broadcast_shapes(const char *op, int na, const int64_t *sa, int nb, const int64_t *sb,
                        int64_t *out)
{
    if (na < 0 || nb < 0 || na > CG_MAX_DIMS || nb > CG_MAX_DIMS) {
        cg_set_error("%s: cannot broadcast shapes of %d and %d dims (0 to %d)", op, na, nb,
                     CG_MAX_DIMS);
        return -1;
    }
    if ((na && !sa) || (nb && !sb) || !out) {
        cg_set_error("%s: NULL %s", op, out ? "shape to broadcast" : "output shape");
        return -1;
    }
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char b1[96], b2[96];
            cg_set_error("%s: shapes %s and %s cannot be broadcast together (dim %d: %lld vs %lld)",
                         op, cg_shape_str_n(na, sa, b1, sizeof b1),
                         cg_shape_str_n(nb, sb, b2, sizeof b2), i, (long long)da, (long long)db);
            return -1;
        }
        out[i] = da == 1 ? db : da;
    }
    return n;
}
