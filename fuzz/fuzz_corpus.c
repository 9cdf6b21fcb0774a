/* libFuzzer target: the text corpus and vocabulary code of the char LM
 * (models/text/vocab.h, models/data/data.h): strict UTF-8 decoding, the vocabulary
 * (built from text and from its checkpoint JSON form), encoding, decoding,
 * the 90/10 split and batch sampling.
 *
 * The input is read three ways: as a corpus text, as the "vocab"
 * metadata of a checkpoint (a JSON string), and as a corpus file
 * (cg_corpus_read, as `charlm train --data FILE` reads it: from a regular
 * file and from a pipe, building its vocabulary or with a given one),
 * which must give what the text gave, or be refused with a message:
 * empty, a NUL byte (at its offset), past the size limit, not UTF-8. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "core/error.h"
#include "fuzz/fuzz.h"
#include "models/data/data.h"
#include "models/text/vocab.h"

static void check_vocab(const cg_vocab *v)
{
    CG_FUZZ_CHECK(v->n >= 1 && v->unk >= 0 && v->unk < v->n);
    for (int64_t i = 1; i < v->n; i++)
        CG_FUZZ_CHECK(v->chars[i - 1] < v->chars[i]);
    /* JSON form round-trips */
    char *j = cg_vocab_to_json(v);
    CG_FUZZ_CHECK(j != NULL);
    cg_vocab *w = cg_vocab_from_json(j);
    CG_FUZZ_CHECK(w && w->n == v->n && w->unk == v->unk);
    CG_FUZZ_CHECK(memcmp(w->chars, v->chars, (size_t)v->n * sizeof *v->chars) == 0);
    cg_vocab_free(w);
    free(j);
}

static void as_text(const uint8_t *data, size_t size)
{
    int64_t n = -1;
    cg_clear_error();
    uint32_t *cps = cg_utf8_decode((const char *)data, size, "fuzz", &n);
    if (!cps) {
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
        return;
    }
    CG_FUZZ_CHECK(n >= 0 && (size_t)n <= size);
    if (n == 0) {
        cg_clear_error();
        CG_FUZZ_CHECK(cg_vocab_from_codepoints(cps, n) == NULL && cg_has_error());
        free(cps);
        return;
    }
    cg_clear_error();
    cg_vocab *v = cg_vocab_from_codepoints(cps, n);
    if (!v) { /* only a text holding U+0000 is refused (its vocabulary cannot be saved) */
        bool has_nul = false;
        for (int64_t i = 0; i < n; i++)
            has_nul |= cps[i] == 0;
        CG_FUZZ_CHECK(has_nul && cg_has_error());
        free(cps);
        return;
    }
    check_vocab(v);

    /* encode / decode round trip: decode(encode(text)) re-encodes to the
     * same code points (the text was normalised: \r\n -> \n) */
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    CG_FUZZ_CHECK(ids != NULL);
    CG_FUZZ_CHECK(cg_vocab_encode(v, cps, n, ids, NULL) == 0);
    char *text = cg_vocab_decode(v, ids, n);
    CG_FUZZ_CHECK(text != NULL);
    int64_t n2 = -1;
    uint32_t *cps2 = cg_utf8_decode(text, strlen(text), "decoded", &n2);
    /* a NUL code point ends the C string early: compare the prefix */
    CG_FUZZ_CHECK(cps2 != NULL && n2 <= n);
    CG_FUZZ_CHECK(memcmp(cps2, cps, (size_t)n2 * sizeof *cps) == 0);
    free(cps2);
    free(text);
    /* an out-of-range id is an error, not a crash */
    int64_t bad = v->n;
    cg_clear_error();
    char *t = cg_vocab_decode(v, &bad, 1);
    CG_FUZZ_CHECK(t == NULL && cg_has_error());

    /* corpus, split, batches */
    cg_corpus *c = cg_corpus_new(v, cps, n);
    CG_FUZZ_CHECK(c != NULL && c->n == n && c->unknown == 0);
    cg_split_view tr = cg_corpus_train(c), va = cg_corpus_val(c);
    CG_FUZZ_CHECK(tr.n + va.n == n && tr.n >= 0 && va.n >= 0);
    cg_rng rng = cg_rng_new(1);
    for (int64_t T = 1; T <= 8; T *= 2) {
        int64_t x[2 * 8], y[2 * 8];
        cg_clear_error();
        bool ok = cg_get_batch(tr, 2, T, &rng, x, y);
        CG_FUZZ_CHECK(ok == (tr.n > T));
        if (!ok) {
            CG_FUZZ_CHECK(cg_has_error());
            continue;
        }
        for (int64_t k = 0; k < 2 * T; k++)
            CG_FUZZ_CHECK(x[k] >= 0 && x[k] < v->n && y[k] >= 0 && y[k] < v->n);
    }
    cg_corpus_free(c);
    free(ids);
    cg_vocab_free(v);
    free(cps);
}

static void as_vocab_json(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    CG_FUZZ_CHECK(s != NULL);
    memcpy(s, data, size);
    s[size] = '\0';
    cg_clear_error();
    cg_vocab *v = cg_vocab_from_json(s);
    if (!v)
        CG_FUZZ_CHECK(cg_last_error()[0] != '\0');
    else
        check_vocab(v);
    cg_vocab_free(v);
    free(s);
}

/* cg_corpus_read of the input at path (max_bytes: its limit, 0 the
 * default; vocab NULL: built from the text) against the text's own decode. */
static void read_file(const uint8_t *data, size_t size, const char *path, size_t max_bytes,
                      const cg_vocab *vocab)
{
    cg_vocab *built = NULL;
    cg_data_id id;
    cg_clear_error();
    cg_corpus *c = cg_corpus_read(path, vocab, max_bytes, vocab ? NULL : &built, &id);
    char e[1024];
    snprintf(e, sizeof e, "%s", c ? "" : cg_last_error());
    const char *nul = memchr(data, '\0', size);
    int64_t n = -1;
    uint32_t *cps = nul ? NULL : cg_utf8_decode((const char *)data, size, path, &n);
    char decode_msg[1024];
    snprintf(decode_msg, sizeof decode_msg, "%s", cps ? "" : cg_last_error());
    bool too_big = max_bytes && size > max_bytes;
    if (!c) {
        char at[64];
        snprintf(at, sizeof at, "NUL byte at offset %zu",
                 nul ? (size_t)(nul - (const char *)data) : 0);
        CG_FUZZ_CHECK(e[0] != '\0' && built == NULL);
        CG_FUZZ_CHECK(size == 0 || nul || too_big || !cps || (!vocab && n == 0));
        if (size == 0)
            CG_FUZZ_CHECK(strstr(e, "is empty") != NULL);
        else if (too_big)
            CG_FUZZ_CHECK(strstr(e, "larger than") || strstr(e, "NUL byte"));
        else if (nul)
            CG_FUZZ_CHECK(strstr(e, at) != NULL);
        else if (!cps) /* the decoder's own message */
            CG_FUZZ_CHECK(strcmp(e, decode_msg) == 0);
        free(cps);
        return;
    }
    CG_FUZZ_CHECK(cps && size > 0 && !too_big);
    CG_FUZZ_CHECK(id.size == size);
    const cg_vocab *v = vocab ? vocab : built;
    CG_FUZZ_CHECK(v != NULL);
    if (!vocab) {
        cg_vocab *w = cg_vocab_from_codepoints(cps, n);
        CG_FUZZ_CHECK(w && w->n == built->n && w->unk == built->unk &&
                      !memcmp(w->chars, built->chars, (size_t)w->n * sizeof *w->chars));
        cg_vocab_free(w);
    }
    cg_corpus *want = cg_corpus_new(v, cps, n);
    CG_FUZZ_CHECK(want && c->n == want->n && c->n_train == want->n_train);
    CG_FUZZ_CHECK(c->unknown == want->unknown && (!vocab ? c->unknown == 0 : true));
    CG_FUZZ_CHECK(!memcmp(c->ids, want->ids, (size_t)c->n * sizeof *c->ids));
    cg_corpus_free(want);
    cg_corpus_free(c);
    cg_vocab_free(built);
    free(cps);
}

static void as_file(const uint8_t *data, size_t size)
{
    static const uint32_t abc[] = {'\n', 'a', 'b', 'c'};
    cg_vocab *v = cg_vocab_from_codepoints(abc, 4);
    CG_FUZZ_CHECK(v != NULL);
    char path[64];
    int fd = cg_fuzz_mem_path(data, size, path, sizeof path);
    if (fd >= 0) {
        read_file(data, size, path, 0, NULL); /* the default limit */
        read_file(data, size, path, size + 1, v);
        close(fd);
    }
    /* a pipe (`--data -`, a process substitution): the stream's reader,
     * its limit one byte under the size or exactly the size */
    int p[2];
    if (size < 60000 && pipe(p) == 0) {
        bool written = write(p[1], data, size) == (ssize_t)size;
        close(p[1]);
        if (written) {
            snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
            read_file(data, size, path, size > 1 && size % 2 ? size - 1 : size, NULL);
        }
        close(p[0]);
    }
    cg_vocab_free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    as_text(data, size);
    as_vocab_json(data, size);
    as_file(data, size);
    return 0;
}
