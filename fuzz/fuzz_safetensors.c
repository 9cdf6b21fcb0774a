/* libFuzzer target: the safetensors reader (nn/safetensors.h).
 *
 * Every input must either be rejected with a message or open as a file
 * whose tensors and metadata all read back consistently, from memory
 * (cg_st_open_memory) and from a file (cg_st_open) alike (adapted from
 * tools/fuzz_safetensors.c). When the file holds only F32/I64 tensors they
 * are copied into a writer too, which must accept them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/tensor.h"
#include "fuzz/fuzz.h"
#include "nn/safetensors.h"

/* The same bytes as a file through cg_st_open (tensors read on demand):
 * the same verdict as from memory (m), the same tensors and bytes. */
static void check_as_file(const uint8_t *data, size_t size, const cg_st_file *m)
{
    char path[64];
    int fd = cg_fuzz_mem_path(data, size, path, sizeof path);
    if (fd < 0)
        return; /* environment problem, not an input problem */
    cg_clear_error();
    cg_st_file *f = cg_st_open(path);
    CG_FUZZ_CHECK(!f == !m);
    CG_FUZZ_CHECK(f || cg_last_error()[0] != '\0');
    CG_FUZZ_CHECK(cg_st_count(f) == cg_st_count(m));
    CG_FUZZ_CHECK(cg_st_metadata_count(f) == cg_st_metadata_count(m));
    for (int i = 0; f && i < cg_st_count(m); i++) {
        const char *name = cg_st_name(m, i);
        CG_FUZZ_CHECK(strcmp(cg_st_name(f, i), name) == 0);
        size_t nm = 0, nf = 0;
        const void *rm = cg_st_raw(m, name, &nm), *rf = cg_st_raw(f, name, &nf);
        CG_FUZZ_CHECK(rm && rf && nm == nf && memcmp(rm, rf, nm) == 0);
        cg_tensor *tm = cg_st_get(m, name), *tf = cg_st_get(f, name);
        CG_FUZZ_CHECK(!tm == !tf);
        CG_FUZZ_CHECK(!tm || memcmp(cg_data_ptr(tm), cg_data_ptr(tf), nm) == 0);
        cg_release(tm);
        cg_release(tf);
    }
    cg_st_close(f);
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cg_clear_error();
    cg_st_file *f = cg_st_open_memory(data, size, "fuzz");
    if (!f) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0'); /* rejected without a reason */
        check_as_file(data, size, NULL);
        return 0;
    }
    check_as_file(data, size, f);
    cg_st_writer *w = cg_st_writer_new();
    CG_FUZZ_CHECK(w != NULL);
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        size_t nb;
        CG_FUZZ_CHECK(name && cg_st_has(f, name) && cg_st_info(f, name, &dt, &nd, shape));
        CG_FUZZ_CHECK(nd >= 0 && nd <= CG_MAX_DIMS);
        const unsigned char *raw = cg_st_raw(f, name, &nb);
        CG_FUZZ_CHECK(raw && nb == (size_t)cg_numel_shape(nd, shape) * cg_st_dtype_size(dt));
        volatile unsigned char sink = 0;
        for (size_t k = 0; k < nb; k++)
            sink ^= raw[k]; /* touch every byte */
        (void)sink;
        cg_dtype cdt;
        if (cg_st_dtype_cg(dt, &cdt)) {
            /* a dtype cgrad has: read as it is (a BOOL byte other than 0/1
             * and a huge empty shape may be refused, with a reason) */
            cg_tensor *t = cg_st_get(f, name);
            CG_FUZZ_CHECK(t || cg_has_error());
            if (t) {
                CG_FUZZ_CHECK(t->dtype == cdt && memcmp(cg_data_ptr(t), raw, nb) == 0);
                CG_FUZZ_CHECK(cg_st_add(w, name, t));
            }
            cg_release(t);
            if (cg_dtype_is_float(cdt)) { /* widened to float32 */
                cg_tensor *g = cg_st_get_f32(f, name);
                CG_FUZZ_CHECK(g || cg_has_error());
                CG_FUZZ_CHECK(!g || g->dtype == CG_F32);
                cg_release(g);
            }
        } else {
            CG_FUZZ_CHECK(cg_st_get(f, name) == NULL && cg_has_error());
            CG_FUZZ_CHECK(cg_st_get_f32(f, name) == NULL && cg_has_error());
        }
    }
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        CG_FUZZ_CHECK(k && cg_st_metadata(f, k));
        CG_FUZZ_CHECK(cg_st_set_metadata(w, k, cg_st_metadata(f, k)));
    }
    cg_st_writer_free(w);
    cg_st_close(f);
    return 0;
}
