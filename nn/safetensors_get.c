/* cgrad nn: a safetensors file's tensors as cgrad tensors (cg_st_get,
 * cg_st_get_f32, cg_st_get_i64, cg_st_load_into). See nn/safetensors.h.
 *
 * The reader (safetensors_read.c) owns the file: its header, its ranges
 * and its bytes (cg_st_read_values). This file turns those bytes into
 * tensors of a dtype and a shape. */
#include <inttypes.h>

#include "nn/safetensors_impl.h"

/* What a file says of tensor `name`; false + error (naming fn for a NULL
 * argument) if absent. */
typedef struct {
    const char *name;
    cg_st_dtype dtype;
    int ndim;
    int64_t shape[CG_MAX_DIMS];
    int64_t numel;
} st_info;

static bool info_of(const cg_st_file *f, const char *name, const char *fn, st_info *in)
{
    if (!f || !name) {
        if (!f)
            cg_error_null_input(fn);
        else
            cg_set_error("safetensors: %s: %s: NULL tensor name", cg_st_path(f), fn);
        return false;
    }
    in->name = name;
    if (!cg_st_info(f, name, &in->dtype, &in->ndim, in->shape))
        return false;
    in->numel = cg_numel_shape(in->ndim, in->shape);
    return true;
}

/* info_of for a load into dst, which must be given */
static bool info_for(const cg_st_file *f, const char *name, const cg_tensor *dst, const char *fn,
                     st_info *in)
{
    if (!dst) {
        if (!cg_has_error())
            cg_set_error("safetensors: %s: NULL destination", fn);
        return false;
    }
    return info_of(f, name, fn, in);
}

double cg_st_f32_elements(const cg_st_file *f)
{
    double have = 0;
    for (int i = 0; i < cg_st_count(f); i++) {
        st_info in;
        if (info_of(f, cg_st_name(f, i), "cg_st_f32_elements", &in) &&
            (in.dtype == CG_ST_F32 || in.dtype == CG_ST_BF16 || in.dtype == CG_ST_F16 ||
             in.dtype == CG_ST_F64 || in.dtype == CG_ST_F8_E4M3 || in.dtype == CG_ST_F8_E5M2))
            have += (double)in.numel;
    }
    return have;
}

/* A BOOL tensor holds bytes 0 and 1 only. */
static bool bools_valid(const cg_st_file *f, const st_info *in, const cg_tensor *t)
{
    const unsigned char *b = (const unsigned char *)cg_data_ptr(t);
    for (int64_t i = 0; i < in->numel; i++)
        if (b[i] > 1) {
            cg_set_error("safetensors: %s: tensor '%s' (BOOL) holds byte %u at element %" PRId64
                         " (a bool is 0 or 1)",
                         cg_st_path(f), in->name, b[i], i);
            return false;
        }
    return true;
}

/* The tensor in its own dtype, as cg_st_get; fn names the caller. */
static cg_tensor *get_as_is(const cg_st_file *f, const st_info *in, const char *fn)
{
    cg_dtype dt;
    if (!cg_st_dtype_cg(in->dtype, &dt)) {
        cg_set_error("safetensors: %s: tensor '%s' has dtype %s, which cgrad's tensors do not "
                     "have (float32, bfloat16, float16, int64, int32, bool; read its bytes with "
                     "cg_st_raw)",
                     cg_st_path(f), in->name, cg_st_dtype_name(in->dtype));
        return NULL;
    }
    cg_tensor *t = cg_empty_dtype(dt, in->ndim, in->shape);
    if (!t) {
        cg_prefix_error("safetensors: %s: tensor '%s': ", cg_st_path(f), in->name);
        return NULL;
    }
    if (!cg_st_read_values(f, in->name, cg_data_ptr(t), fn) ||
        (dt == CG_BOOL && !bools_valid(f, in, t))) {
        cg_release(t);
        return NULL;
    }
    return t;
}

cg_tensor *cg_st_get(const cg_st_file *f, const char *name)
{
    st_info in;
    return info_of(f, name, "cg_st_get", &in) ? get_as_is(f, &in, "cg_st_get") : NULL;
}

cg_tensor *cg_st_get_f32(const cg_st_file *f, const char *name)
{
    st_info in;
    if (!info_of(f, name, "cg_st_get_f32", &in))
        return NULL;
    if (in.dtype != CG_ST_F32 && in.dtype != CG_ST_BF16 && in.dtype != CG_ST_F16) {
        cg_set_error("safetensors: %s: tensor '%s' has dtype %s, expected F32, BF16 or F16",
                     cg_st_path(f), name, cg_st_dtype_name(in.dtype));
        return NULL;
    }
    cg_tensor *t = get_as_is(f, &in, "cg_st_get_f32");
    if (!t || t->dtype == CG_F32)
        return t;
    cg_tensor *c = cg_k_to(t, CG_F32); /* bfloat16 and float16 widen exactly */
    cg_release(t);
    return c;
}

cg_tensor *cg_st_get_i64(const cg_st_file *f, const char *name)
{
    st_info in;
    if (!info_of(f, name, "cg_st_get_i64", &in))
        return NULL;
    if (in.dtype != CG_ST_I64) {
        cg_set_error("safetensors: %s: tensor '%s' has dtype %s, expected %s", cg_st_path(f), name,
                     cg_st_dtype_name(in.dtype), cg_st_dtype_name(CG_ST_I64));
        return NULL;
    }
    return get_as_is(f, &in, "cg_st_get_i64");
}

bool cg_st_load_range(const cg_st_file *f, const char *name, int64_t first, cg_tensor *dst)
{
    st_info in;
    if (!info_for(f, name, dst, "cg_st_load_range", &in))
        return false;
    cg_dtype own;
    const int64_t n = in.numel, count = cg_numel(dst);
    const bool known = cg_st_dtype_cg(in.dtype, &own);
    /* a float run of another width converts, as cg_st_load_into's */
    const bool convert =
        known && own != dst->dtype && cg_dtype_is_float(own) && cg_dtype_is_float(dst->dtype);
    if (!known || (own != dst->dtype && !convert) || !cg_is_contiguous(dst)) {
        cg_set_error("safetensors: %s: tensor '%s' is %s: a run of it goes into a contiguous "
                     "tensor of that dtype, or of another float one (got %s%s)",
                     cg_st_path(f), name, cg_st_dtype_name(in.dtype), cg_dtype_name(dst->dtype),
                     cg_is_contiguous(dst) ? "" : ", not contiguous");
        return false;
    }
    if (first < 0 || first > n || count > n - first) {
        cg_set_error("safetensors: %s: tensor '%s' has %lld elements: no run of %lld from "
                     "element %lld",
                     cg_st_path(f), name, (long long)n, (long long)count, (long long)first);
        return false;
    }
    if (convert) { /* the run as it is stored, in dst's shape, then converted into dst */
        cg_tensor *run = cg_empty_dtype(own, dst->ndim, dst->shape);
        bool ok = run &&
                  cg_st_read_run(f, name, (uint64_t)first, (uint64_t)count, cg_data_ptr(run),
                                 "cg_st_load_range") &&
                  cg_k_copy_(dst, run);
        cg_release(run);
        return ok;
    }
    bool ok = cg_st_read_run(f, name, (uint64_t)first, (uint64_t)count, cg_data_ptr(dst),
                             "cg_st_load_range");
    cg_tensor_modified(dst); /* even a failed read may have written some */
    return ok;
}

bool cg_st_load_into(const cg_st_file *f, const char *name, cg_tensor *dst)
{
    st_info in;
    if (!info_for(f, name, dst, "cg_st_load_into", &in))
        return false;
    bool same = dst->ndim == in.ndim;
    for (int i = 0; same && i < in.ndim; i++)
        same = dst->shape[i] == in.shape[i];
    if (!same) {
        char a[160], b[160];
        cg_shape_str_n(in.ndim, in.shape, a, sizeof a);
        cg_shape_str(dst, b, sizeof b);
        cg_set_error("safetensors: %s: tensor '%s' has shape %s, destination has shape %s",
                     cg_st_path(f), name, a, b);
        return false;
    }
    cg_dtype own;
    if (cg_st_dtype_cg(in.dtype, &own) && own == dst->dtype && own != CG_BOOL &&
        cg_is_contiguous(dst)) { /* straight in, no copy */
        bool ok = cg_st_read_values(f, name, cg_data_ptr(dst), "cg_st_load_into");
        cg_tensor_modified(dst); /* even a failed read may have written some */
        return ok;
    }
    cg_tensor *src = get_as_is(f, &in, "cg_st_load_into");
    if (!src)
        return false;
    bool ok = src->dtype == dst->dtype ||
              (cg_dtype_is_float(src->dtype) && cg_dtype_is_float(dst->dtype));
    if (!ok)
        cg_set_error("safetensors: %s: tensor '%s' is %s, the destination is %s (floats convert; "
                     "other dtypes must match)",
                     cg_st_path(f), name, cg_dtype_name(src->dtype), cg_dtype_name(dst->dtype));
    ok = ok && cg_k_copy_(dst, src); /* a float of another width rounds as cg_to */
    cg_release(src);
    return ok;
}
