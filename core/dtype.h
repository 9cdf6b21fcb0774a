/* cgrad core: dtypes (the element types of tensors), their promotion and
 * element conversions. core/tensor.h includes it; it knows no tensor. */
#ifndef CG_DTYPE_H
#define CG_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The element type of a tensor (PyTorch's dtype). Offsets and strides
 * count elements of it. float32 is the compute type of every float kernel;
 * bfloat16 and float16 are storage types that float kernels read by
 * converting to float32 (and round their results back to); int64 holds ids,
 * targets and indices, bool holds masks (one byte, 0 or 1). An integer or
 * bool tensor never requires grad. */
typedef enum {
    CG_F32 = 0, /* torch.float32 */
    CG_BF16,    /* torch.bfloat16: the high half of a float32, rounded to nearest even */
    CG_F16,     /* torch.float16: IEEE 754 half (read from checkpoints, converted) */
    CG_I64,     /* torch.int64 (long): ids, targets, indices */
    CG_I32,     /* torch.int32 (int): converted with cg_to; refused where ids are read */
    CG_BOOL,    /* torch.bool: masks */
    CG_NDTYPES
} cg_dtype;

/* "float32", "bfloat16", "float16", "int64", "int32", "bool" (PyTorch's
 * names without "torch."); "?" for a value out of range. */
const char *cg_dtype_name(cg_dtype dt);
/* Bytes per element (0 for a value out of range). */
size_t cg_dtype_size(cg_dtype dt);
bool cg_dtype_is_float(cg_dtype dt);
/* torch.promote_types: bool < integers < floats; within integers the wider;
 * float32 with bfloat16 or float16 is float32, bfloat16 with float16 is
 * float32. */
cg_dtype cg_promote_types(cg_dtype a, cg_dtype b);
/* One element converted (round to nearest even; NaN stays NaN): the
 * conversions every dtype change uses. */
uint16_t cg_f32_to_bf16(float x);
float cg_bf16_to_f32(uint16_t h);
uint16_t cg_f32_to_f16(float x);
float cg_f16_to_f32(uint16_t h);
/* n elements from src (dtype sd, element stride ss) into dst (dtype dd,
 * stride ds), converted as cg_k_to converts (strides count elements). */
void cg_convert_run(cg_dtype dd, void *dst, int64_t ds, cg_dtype sd, const void *src, int64_t ss,
                    int64_t n);
/* One element at p read as a double / as an int64 (exact for integers;
 * floats truncate as cg_k_to does), or written from a double. */
double cg_elem_get(cg_dtype dt, const void *p);
int64_t cg_elem_get_i64(cg_dtype dt, const void *p);
void cg_elem_set(cg_dtype dt, void *p, double v);

#ifdef __cplusplus
}
#endif
#endif
