/* libFuzzer target: a BPE tokenizer as a checkpoint stores it
 * (models/text/spm.h): SentencePiece's serialized model behind the zoo's
 * 24-byte header. The checksum of the header would stop a mutated model
 * there, so the input (after its first byte) is the model alone
 * (cg_spm_from_model_proto); the first byte chooses whether to damage the
 * header of a model that loads (then its blob is refused). A model that loads must follow the zoo's
 * conventions, encode text to ids that are no pad, bos or eos and decode
 * them to the same text; every id of it must have a piece and a label. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/text/spm.h"
#include "models/text/tokenizer.h"

static void check_model(cg_spm *t)
{
    int64_t V = cg_spm_vocab_size(t);
    CG_FUZZ_CHECK(V >= CG_SPM_MIN_VOCAB);
    const cg_tokenizer tok = {.kind = CG_TOK_BPE, .specials = true, .spm = t};
    for (int64_t id = 0; id < V && id < 4096; id++) {
        char *label = cg_tokenizer_label(&tok, id);
        CG_FUZZ_CHECK(cg_spm_piece(t, id) != NULL && label != NULL);
        free(label);
    }
    cg_clear_error();
    CG_FUZZ_CHECK(cg_spm_piece(t, V) == NULL && cg_has_error());
    static const char *const texts[] = {"",
                                        "Hallo Welt",
                                        " a  b ",
                                        "\xc3\xa9t\xc3\xa9\n\t",
                                        "\xe4\xb8\xad\xe6\x96\x87",
                                        "<pad><s></s><unk>",
                                        "<0x41>"};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        int64_t n = -1;
        cg_clear_error();
        int64_t *ids = cg_spm_encode(t, texts[k], &n);
        CG_FUZZ_CHECK(ids && n >= 0);
        /* never pad, bos or eos (the caller adds those: a pad id in the
         * text would be masked and skipped by the loss as padding) */
        for (int64_t i = 0; i < n; i++)
            CG_FUZZ_CHECK(ids[i] > CG_SPM_EOS && ids[i] < V);
        char *back = cg_spm_decode(t, ids, n);
        CG_FUZZ_CHECK(back != NULL);
        CG_FUZZ_CHECK(strcmp(back, texts[k]) == 0); /* lossless (no U+2581 in the texts) */
        free(back);
        free(ids);
    }
    /* the blob round-trips */
    size_t len = 0;
    unsigned char *b = cg_spm_blob(t, &len);
    CG_FUZZ_CHECK(b != NULL);
    cg_spm *u = cg_spm_from_blob(b, len);
    CG_FUZZ_CHECK(u && cg_spm_vocab_size(u) == V);
    cg_spm_free(u);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || !cg_spm_available())
        return 0;
    uint8_t knob = data[0];
    cg_clear_error();
    cg_spm *t = cg_spm_from_model_proto(data + 1, size - 1);
    if (!t) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        return 0;
    }
    check_model(t);
    if (knob >= 0xf0) { /* the blob with one bit of its header flipped, or cut short */
        size_t len = 0;
        unsigned char *blob = cg_spm_blob(t, &len);
        CG_FUZZ_CHECK(blob != NULL && len >= 24);
        blob[(knob & 3) * 8 % 24] ^= (unsigned char)(1 << (knob & 7));
        cg_clear_error();
        cg_spm *u = cg_spm_from_blob(blob, knob & 8 ? len / 2 : len);
        CG_FUZZ_CHECK(u == NULL && cg_last_error()[0] != '\0');
        free(blob);
    }
    cg_spm_free(t);
    return 0;
}
