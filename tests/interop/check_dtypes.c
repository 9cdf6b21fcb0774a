/* Files written by PyTorch in every dtype cgrad has load with the values
 * PyTorch reads (tests/interop/make_dtype_files.py writes them):
 *     check_dtypes DIR     exit 0: every tensor equal; 1: a difference
 * Each tensor of DIR/torch_dtypes.safetensors is read with cg_st_get in its
 * own dtype (checked against the file's), widened (floats to float32, ints
 * and bools to int64) and compared bit for bit with PyTorch's widening in
 * DIR/torch_expect.safetensors. A bfloat16 weight also loads into a
 * float32 parameter (cg_st_load_into) with the same values. */
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

static bool same_bits(const cg_tensor *a, const cg_tensor *b)
{
    return a && b && a->dtype == b->dtype && cg_same_shape(a, b) &&
           !memcmp(cg_data_ptr(a), cg_data_ptr(b), (size_t)cg_numel(a) * cg_dtype_size(a->dtype));
}

static int check(const cg_st_file *got, const cg_st_file *want, const char *name)
{
    cg_st_dtype sdt = CG_ST_NDTYPES; /* "?" when the file has no such tensor */
    cg_dtype dt;
    cg_tensor *t = cg_st_get(got, name), *w = cg_st_get(want, name), *wide = NULL, *p = NULL;
    bool ok = t && w && cg_st_info(got, name, &sdt, NULL, NULL) && cg_st_dtype_cg(sdt, &dt) &&
              t->dtype == dt;
    if (ok) {
        wide = cg_k_to(t, cg_dtype_is_float(dt) ? CG_F32 : CG_I64);
        ok = same_bits(wide, w);
    }
    if (ok && cg_dtype_is_float(dt)) { /* into a float32 parameter */
        p = cg_zeros(t->ndim, t->shape);
        ok = cg_st_load_into(got, name, p) && same_bits(p, w);
    }
    printf("%-12s %-5s %s\n", name, cg_st_dtype_name(sdt), ok ? "equal" : "DIFFERENT");
    if (!ok && cg_has_error())
        printf("  error: %s\n", cg_last_error());
    cg_release_all(4, t, w, wide, p);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: check_dtypes DIR\n"), 2;
    char a[4096], b[4096];
    snprintf(a, sizeof a, "%s/torch_dtypes.safetensors", argv[1]);
    snprintf(b, sizeof b, "%s/torch_expect.safetensors", argv[1]);
    cg_st_file *got = cg_st_open(a), *want = cg_st_open(b);
    if (!got || !want)
        return fprintf(stderr, "check_dtypes: %s\n", cg_last_error()), 1;
    int n = cg_st_count(got), bad = n == cg_st_count(want) && n > 0 ? 0 : 1;
    for (int i = 0; i < n; i++)
        bad += check(got, want, cg_st_name(got, i));
    cg_st_close(got);
    cg_st_close(want);
    printf("check_dtypes: %d tensors, %d different\n", n, bad);
    return bad ? 1 : 0;
}
