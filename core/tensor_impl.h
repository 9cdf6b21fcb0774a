/* cgrad core, INTERNAL: what tensor.c (storage, lifecycle), tensor_create.c
 * (creation, copies, RNG) and tensor_views.c (views) share, and the lock of
 * the storages' derived slots (the weight cache, linear.c's kept operand
 * copies). Not installed.
 * Include it after core/tensor.h (it does not include it: a module never
 * uses itself round a circle, tests/check_layers.py). */
#ifndef CG_CORE_TENSOR_IMPL_H
#define CG_CORE_TENSOR_IMPL_H

#include <stdint.h>

/* A storage of numel elements of dt, refcount 1, its bytes all zero when
 * zeroed (cg_alloc_zeroed); NULL + error. */
cg_storage *cg_storage_new(int64_t numel, cg_dtype dt, bool zeroed);
/* Drop one reference to s (NULL is fine); the last one frees it. */
void cg_storage_release(cg_storage *s);
/* A tensor header over storage s (retained), with the given layout. */
cg_tensor *cg_tensor_header(cg_storage *s, cg_dtype dt, int64_t offset, int ndim,
                            const int64_t *shape, const int64_t *strides);
/* The one lock of every storage's derived slot (core/tensor.h): the forms'
 * owners (core/weight_cache.c, core/linear.c) read, fill and replace
 * s->derived under it, and cg_tensor_modified takes a form out under it
 * (then frees it without it: a form's free function may take it). */
void cg_derived_lock(void);
void cg_derived_unlock(void);
/* The most elements a shape may have (2^61 - 1: the bytes of that many
 * 8-byte elements still count in 64 bits). */
#define CG_MAX_NUMEL (INT64_MAX / 4)
/* Whether a shape may be a tensor's: ndim in [0, CG_MAX_DIMS], no negative
 * size, and the product of its nonzero sizes at most CG_MAX_NUMEL (in any
 * order: a size-0 tensor is permuted and reshaped too, and cg_numel
 * multiplies every size). False + an error naming op and the shape. Every
 * new size a tensor header gets passes it (creation, expand, as_strided,
 * reshape, view). */
bool cg_shape_check(const char *op, int ndim, const int64_t *shape);
/* Row-major strides of a shape. */
void cg_contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* Byte address of element `off` (in elements) of t's storage. */
static inline char *cg_elem_ptr(const cg_tensor *t, int64_t off)
{
    return (char *)t->storage->data + off * (int64_t)cg_dtype_size(t->dtype);
}

#endif
