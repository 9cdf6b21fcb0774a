/* cgrad zoo: models/text/spm.h in a build without SentencePiece (meson did not
 * find libsentencepiece-dev or a C++ compiler): every function fails with
 * one clear message. */
#include "models/text/spm.h"

#include "core/error.h"

static void unavailable(const char *who)
{
    cg_set_error("%s: BPE tokenization is unavailable: cgrad was built without SentencePiece "
                 "(apt-get install libsentencepiece-dev g++, then reconfigure the build)",
                 who);
}

bool cg_spm_available(void) { return false; }

cg_spm *cg_spm_train(const char *const *sentences, int64_t n, int64_t vocab_size)
{
    (void)sentences, (void)n, (void)vocab_size;
    unavailable("cg_spm_train");
    return NULL;
}

cg_spm *cg_spm_from_blob(const void *blob, size_t len)
{
    (void)blob, (void)len;
    unavailable("cg_spm_from_blob");
    return NULL;
}

cg_spm *cg_spm_from_model_proto(const void *model, size_t len)
{
    (void)model, (void)len;
    unavailable("cg_spm_from_model_proto");
    return NULL;
}

/* No tokenizer can exist in this build: the rest see only NULL, as the
 * real ones do (core/error.h's message for a NULL input). */
unsigned char *cg_spm_blob(const cg_spm *t, size_t *len)
{
    (void)t, (void)len;
    return cg_error_null_input("cg_spm_blob"), NULL;
}

const unsigned char *cg_spm_model_proto(const cg_spm *t, size_t *len)
{
    (void)t, (void)len;
    return cg_error_null_input("cg_spm_model_proto"), NULL;
}

void cg_spm_free(cg_spm *t) { (void)t; }

int64_t cg_spm_vocab_size(const cg_spm *t)
{
    (void)t;
    return -1;
}

int64_t *cg_spm_encode(const cg_spm *t, const char *text, int64_t *n)
{
    (void)t, (void)text, (void)n;
    return cg_error_null_input("cg_spm_encode"), NULL;
}

char *cg_spm_decode(const cg_spm *t, const int64_t *ids, int64_t n)
{
    (void)t, (void)ids, (void)n;
    return cg_error_null_input("cg_spm_decode"), NULL;
}

const char *cg_spm_piece(const cg_spm *t, int64_t id)
{
    (void)t, (void)id;
    return cg_error_null_input("cg_spm_piece"), NULL;
}
