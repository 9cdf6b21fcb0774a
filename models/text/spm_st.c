/* cgrad zoo: a tokenizer inside a safetensors checkpoint (models/text/spm.h):
 * its blob as a 1-D U8 tensor. Built with or without SentencePiece (without
 * it, loading fails with the "unavailable" message). */
#include "models/text/spm.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "nn/safetensors.h"

bool cg_spm_st_add(cg_st_writer *w, const char *name, const cg_spm *t)
{
    if (!t)
        return cg_error_null_input("cg_spm_st_add");
    size_t len;
    unsigned char *b = cg_spm_blob(t, &len);
    if (!b)
        return false;
    bool ok = cg_st_add_u8(w, name, (int64_t)len, b);
    free(b);
    return ok;
}

cg_spm *cg_spm_st_load(const cg_st_file *f, const char *name)
{
    if (!f)
        return cg_error_null_input("cg_spm_st_load"), NULL;
    cg_st_dtype dt;
    int ndim;
    if (!name) {
        cg_set_error("cg_spm_st_load: NULL tensor name");
        return NULL;
    }
    if (!cg_st_info(f, name, &dt, &ndim, NULL))
        return NULL;
    if (dt != CG_ST_U8 || ndim != 1) {
        cg_set_error("%s: tokenizer '%s' is %s with %d dimensions (expected 1-D U8)", cg_st_path(f),
                     name, cg_st_dtype_name(dt), ndim);
        return NULL;
    }
    size_t len;
    const void *b = cg_st_raw(f, name, &len);
    cg_spm *t = b ? cg_spm_from_blob(b, len) : NULL;
    if (!t && b) {
        cg_prefix_error("%s: tokenizer '%s': ", cg_st_path(f), name);
    }
    return t;
}
