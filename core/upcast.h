/* cgrad core, INTERNAL: the dtype rule of the float kernels (not a public
 * header; only core's .c files include it).
 *
 * float32 is the compute type. A kernel that also takes bfloat16 and
 * float16 (elementwise math, reductions, softmax, matmul) converts those
 * arguments to float32, computes, and rounds its result to the promoted
 * dtype of its float arguments (torch.result_type: 0-d arguments count
 * only when no argument has dims), as PyTorch's CPU
 * kernels compute reduced-precision floats in float32:
 *
 *     cg_upcast u;
 *     if (!cg_upcast_begin(&u, "softmax", 1, (const cg_tensor **[]){&a}))
 *         return NULL;
 *     cg_tensor *out = ...float32 work on a...;
 *     return cg_upcast_end(&u, out);
 *
 * An integer or bool argument is refused in one line naming the op, the
 * argument and both dtypes. NULL arguments are left to the kernel (its own
 * NULL message). Kernels that take float32 only call cg_check_f32. */
#ifndef CG_UPCAST_H
#define CG_UPCAST_H

#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"

#define CG_UPCAST_MAX 4

typedef struct cg_upcast {
    int n;
    const cg_tensor **slot[CG_UPCAST_MAX]; /* the kernel's argument variables */
    const cg_tensor *orig[CG_UPCAST_MAX];
    cg_tensor *tmp[CG_UPCAST_MAX];
    cg_dtype out; /* the result's dtype */
    bool active;  /* some argument was converted */
} cg_upcast;

/* "argument 2" unless names gives one. */
static inline bool cg_upcast_refuse(const char *op, int k, const cg_tensor *t)
{
    cg_set_error("%s: argument %d is %s, expected a float tensor (float32, bfloat16 or float16)",
                 op, k + 1, cg_dtype_name(t->dtype));
    return false;
}

static inline void cg_upcast_undo(cg_upcast *u)
{
    for (int k = 0; k < u->n; k++) {
        if (u->tmp[k]) {
            *u->slot[k] = u->orig[k];
            cg_release(u->tmp[k]);
            u->tmp[k] = NULL;
        }
    }
}

/* Check the n arguments behind slots and convert the reduced-precision
 * ones in place (the variables then point at float32 copies until
 * cg_upcast_end). false + error: nothing to undo. */
static inline bool cg_upcast_begin(cg_upcast *u, const char *op, int n, const cg_tensor **slots[])
{
    u->n = n;
    u->active = false;
    u->out = CG_F32;
    bool first = true, dims = false;
    for (int k = 0; k < n; k++)
        dims |= *slots[k] && (*slots[k])->ndim > 0;
    for (int k = 0; k < n; k++) {
        u->slot[k] = slots[k];
        u->tmp[k] = NULL;
        const cg_tensor *t = *slots[k];
        if (!t)
            continue;
        if (cg_debug_enabled() && !cg_lifetime_use_ok(t, op))
            return false; /* a freed tensor (the checked mode): named */
        if (!cg_dtype_is_float(t->dtype))
            return cg_upcast_refuse(op, k, t);
        u->active |= t->dtype != CG_F32;
        /* torch.result_type: a 0-d argument decides only when none has
         * dims (all are floats, one category): bf16 [n] * a float32 0-d is
         * bf16, as x * torch.tensor(2.0) */
        if (dims && t->ndim == 0)
            continue;
        u->out = first ? t->dtype : cg_promote_types(u->out, t->dtype);
        first = false;
    }
    for (int k = 0; u->active && k < n; k++) {
        const cg_tensor *t = *slots[k];
        u->orig[k] = t;
        if (!t || t->dtype == CG_F32)
            continue;
        if (!(u->tmp[k] = cg_k_to(t, CG_F32))) {
            cg_upcast_undo(u);
            return false;
        }
        *slots[k] = u->tmp[k];
    }
    return true;
}

/* Give the arguments back and round out (owned) to the result's dtype. */
static inline cg_tensor *cg_upcast_end(cg_upcast *u, cg_tensor *out)
{
    if (!u->active)
        return out;
    cg_upcast_undo(u);
    if (out && u->out != CG_F32) {
        cg_tensor *r = cg_k_to(out, u->out);
        cg_release(out);
        out = r;
    }
    return out;
}

/* The check of the kernels that take float32 only: each non-NULL argument
 * is float32, or false + "<op>: argument <k> is bfloat16, expected
 * float32 (convert with cg_to)". */
static inline bool cg_f32_args(const char *op, int n, const cg_tensor *const *ts)
{
    for (int k = 0; k < n; k++) {
        if (cg_debug_enabled() && !cg_lifetime_use_ok(ts[k], op))
            return false; /* a freed tensor (the checked mode): named */
        if (ts[k] && ts[k]->dtype != CG_F32) {
            cg_set_error("%s: argument %d is %s, expected float32%s", op, k + 1,
                         cg_dtype_name(ts[k]->dtype),
                         cg_dtype_is_float(ts[k]->dtype) ? " (convert with cg_to)" : "");
            return false;
        }
    }
    return true;
}

/* The check of a backward's acc, the tensor it adds its dx into in place
 * (autograd's cg_node_grad_acc): NULL, or with dx asked for, a contiguous
 * float32 tensor of x's shape; false + error naming op otherwise. */
static inline bool cg_check_grad_acc(const char *op, const cg_tensor *acc, const cg_tensor *x,
                                     bool dx)
{
    if (acc && !dx) {
        cg_set_error("%s: a tensor to add dx into, but dx not asked for", op);
        return false;
    }
    if (acc && (acc->dtype != CG_F32 || !cg_same_shape(acc, x) || !cg_is_contiguous(acc))) {
        char s1[96], s2[96];
        cg_set_error("%s: dx is added into a contiguous float32 tensor of the input's shape %s, "
                     "got %s%s %s",
                     op, cg_shape_str(x, s2, sizeof s2), cg_is_contiguous(acc) ? "" : "a view ",
                     cg_dtype_name(acc->dtype), cg_shape_str(acc, s1, sizeof s1));
        return false;
    }
    return true;
}

/* where and masked_fill on integer and bool values (core/typed.c): the
 * float kernels hand them over, their bool condition or mask checked. */
cg_tensor *cg_typed_where(const cg_tensor *cond, const cg_tensor *a, const cg_tensor *b);
cg_tensor *cg_typed_masked_fill(const cg_tensor *a, const cg_tensor *mask, float value);

/* t as a kernel of one pass over contiguous elements reads it: a new
 * reference to t itself when it is a contiguous float32 tensor (or, with
 * keep_bf16, a contiguous bfloat16 one, which such a kernel widens a run
 * at a time), else a contiguous float32 copy; NULL + error when out of
 * memory. */
static inline cg_tensor *cg_upcast_dense(const cg_tensor *t, bool keep_bf16)
{
    if (cg_is_contiguous(t) && (t->dtype == CG_F32 || (keep_bf16 && t->dtype == CG_BF16)))
        return cg_retain((cg_tensor *)t);
    if (t->dtype == CG_F32)
        return cg_k_contiguous(t);
    cg_tensor *c = cg_k_to(t, CG_F32);
    if (c && !cg_is_contiguous(c)) {
        cg_tensor *d = cg_k_contiguous(c);
        cg_release(c);
        return d;
    }
    return c;
}

/* out (float32, contiguous) in dt: out itself, or rounded once into a new
 * tensor (out released); NULL stays NULL */
static inline cg_tensor *cg_upcast_round(cg_tensor *out, cg_dtype dt)
{
    if (!out || dt == CG_F32)
        return out;
    cg_tensor *r = cg_k_to(out, dt);
    cg_release(out);
    return r;
}

/* A kernel's body for one or two upcast arguments (variables a, b of
 * type const cg_tensor *): return CALL's result rounded to their dtype. */
#define CG_UPCAST1(op, a, call)                                           \
    do {                                                                  \
        cg_upcast u_;                                                     \
        if (!cg_upcast_begin(&u_, (op), 1, (const cg_tensor **[]){&(a)})) \
            return NULL;                                                  \
        return cg_upcast_end(&u_, (call));                                \
    } while (0)
#define CG_UPCAST2(op, a, b, call)                                              \
    do {                                                                        \
        cg_upcast u_;                                                           \
        if (!cg_upcast_begin(&u_, (op), 2, (const cg_tensor **[]){&(a), &(b)})) \
            return NULL;                                                        \
        return cg_upcast_end(&u_, (call));                                      \
    } while (0)

#endif
