/* langid: which language is this sentence, English or German? A
 * bidirectional GRU reads a sentence's bytes (UTF-8: "ü" is two of them),
 * and its final states, the forward direction's and the reverse one's side
 * by side, go to a linear head: two classes, cross-entropy, AdamW and
 * gradient clipping. The sentences come from data/en_de_ding.tsv, whose
 * lines hold an English sentence, a tab and its German translation: an
 * example of each class (every tenth line is held out for validation),
 * cut to 64 bytes. They differ in length: a batch is padded to its longest
 * (cg_pad_sequence) and run with its lengths (cg_gru_forward_lengths:
 * PyTorch's pack_padded_sequence), so that the padding is never read.
 * langid.py is the same program in PyTorch, from the same initial weights
 * (cg_mt19937, as in gru.c) on the same batches: the meson test
 * example_langid_torch compares the first 20 losses.
 *
 *   build/examples/example_langid [--steps N] [--data FILE] [--predict TEXT]...
 * (default: 400 steps on data/en_de_ding.tsv, which scripts/prepare_data.sh
 * makes; --predict, any number of times: a sentence of yours to classify
 * after training, instead of the four of `mine`) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cgrad.h"

enum { B = 32, E = 32, H = 64, MAXLEN = 64, EVAL_B = 256, STRIDE = 9973 };

#define DATA "data/en_de_ding.tsv"
#define USAGE                                                                                     \
    "usage: example_langid [--steps N (1..100000, default 400)] [--data FILE (default " DATA ")]" \
    " [--predict TEXT]...\n"
static const char *const language[2] = {"English", "German"};
static const char *const mine[4] = {"Where is the station?", "Wo ist der Bahnhof?",
                                    "I would like a cup of coffee.",
                                    "Ich hätte gern eine Tasse Kaffee."};

typedef struct {
    const unsigned char *s; /* its bytes (not terminated) */
    int64_t len, label;     /* len in [1, MAXLEN]; label 0 English, 1 German */
} sentence;

typedef struct {
    unsigned char *text;     /* the file, which the sentences point into */
    sentence *train, *valid; /* line i's English and German; in valid when i % 10 is 9 */
    int64_t n_train, n_valid;
} corpus;

typedef struct {
    cg_module base;
    cg_embed *emb;   /* a byte -> [E] */
    cg_gru *gru;     /* bidirectional, batch_first */
    cg_linear *head; /* [2 H] -> 2 classes */
} langid;

/* Built in PyTorch's order (nn.Embedding, nn.GRU, nn.Linear) from its
 * generator g: the weights langid.py starts from. NULL + error. */
static langid *langid_new(cg_mt19937 *g)
{
    langid *m = (langid *)cg_module_alloc(sizeof *m, "LangID", NULL);
    cg_rnn_config cfg = CG_RNN_CONFIG(E, H);
    cfg.batch_first = true;
    cfg.bidirectional = true;
    m->emb = cg_module_add_child(&m->base, "emb", cg_embed_new(256, E, cg_init_skip()));
    m->gru = cg_module_add_child(&m->base, "gru", cg_gru_new(&cfg, cg_init_skip()));
    m->head = cg_module_add_child(&m->base, "head", cg_linear_new(2 * H, 2, true, cg_init_skip()));
    if (!m->emb || !m->gru || !m->head || !cg_module_reset_parameters_torch(CG_MODULE(m), g)) {
        cg_module_free(CG_MODULE(m));
        return NULL;
    }
    return m;
}

/* ids [b, T] padded, lengths [b] -> logits [b, 2]. In a scope. */
static cg_tensor *langid_forward(langid *m, cg_tensor *ids, cg_tensor *lengths)
{
    cg_tensor *h_n = NULL; /* [2, b, H]: h after each sentence's last byte, and reverse its first */
    cg_gru_forward_lengths(m->gru, cg_embed_forward(m->emb, ids), lengths, NULL, &h_n);
    cg_tensor *both[2] = {cg_select(h_n, 0, 0), cg_select(h_n, 0, 1)};
    return cg_linear_forward(m->head, cg_concat(both, 2, 1)); /* from [b, 2 H] */
}

/* n <= EVAL_B sentences as a batch: ids [n, T], their bytes padded with 0
 * to the longest; *lengths and *labels int64 [n]. In a scope. */
static cg_tensor *batch(const sentence *const *s, int64_t n, cg_tensor **lengths,
                        cg_tensor **labels)
{
    cg_tensor *seqs[EVAL_B];
    int64_t len[EVAL_B], label[EVAL_B], bytes[MAXLEN];
    for (int64_t i = 0; i < n; i++) {
        for (int64_t t = 0; t < s[i]->len; t++)
            bytes[t] = s[i]->s[t];
        seqs[i] = cg_from_i64(1, &s[i]->len, bytes);
        len[i] = s[i]->len, label[i] = s[i]->label;
    }
    *lengths = cg_from_i64(1, &n, len);
    *labels = cg_from_i64(1, &n, label);
    return cg_pad_sequence(n, seqs, 0, NULL);
}

static void corpus_free(corpus *c) { free(c->text), free(c->train), free(c->valid); }

/* The file at path, whole, into a new buffer of *size bytes. NULL + one
 * line on stderr. */
static unsigned char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *text = NULL, *grown;
    size_t n = 0, cap = 1 << 16;
    while (f && (grown = realloc(text, cap)) != NULL) {
        text = grown;
        n += fread(text + n, 1, cap - n, f);
        if (n < cap) /* the end of the file, or an error */
            break;
        cap *= 2;
    }
    if (!f || !text || n == cap || ferror(f)) {
        fprintf(stderr, "example_langid: error: cannot read %s: %s%s\n", path, strerror(errno),
                strcmp(path, DATA) ? "" : " (scripts/prepare_data.sh makes it)");
        free(text), text = NULL;
    }
    if (f)
        fclose(f);
    *size = n;
    return text;
}

/* The sentences of the file at path, English<TAB>German a line (empty
 * lines skipped), each cut to MAXLEN bytes. False + one line on stderr
 * (c is then empty). */
static bool corpus_read(const char *path, corpus *c)
{
    size_t size;
    int64_t i = 0, lines = 1; /* i: the pairs so far */
    *c = (corpus){.text = read_file(path, &size)};
    for (size_t k = 0; c->text && k < size; k++)
        lines += c->text[k] == '\n';
    c->train = c->text ? malloc((size_t)lines * 2 * sizeof *c->train) : NULL;
    c->valid = c->text ? malloc((size_t)lines * 2 * sizeof *c->valid) : NULL;
    bool ok = c->train && c->valid;
    if (c->text && !ok)
        fprintf(stderr, "example_langid: error: out of memory\n");
    const unsigned char *line = c->text, *end = ok ? c->text + size : c->text, *eol;
    for (int64_t lineno = 1; line < end; line = eol + 1, lineno++) {
        eol = memchr(line, '\n', (size_t)(end - line));
        eol = eol ? eol : end;
        if (eol == line)
            continue;
        const unsigned char *tab = memchr(line, '\t', (size_t)(eol - line));
        if (!tab || tab == line || tab + 1 == eol) {
            fprintf(stderr, "example_langid: error: %s: line %lld is not English<TAB>German\n",
                    path, (long long)lineno);
            ok = false;
            break;
        }
        bool held_out = i++ % 10 == 9;
        sentence *to = held_out ? c->valid + c->n_valid : c->train + c->n_train;
        to[0] = (sentence){line, tab - line < MAXLEN ? tab - line : MAXLEN, 0};
        to[1] = (sentence){tab + 1, eol - tab - 1 < MAXLEN ? eol - tab - 1 : MAXLEN, 1};
        *(held_out ? &c->n_valid : &c->n_train) += 2;
    }
    if (ok && !c->n_valid)
        fprintf(stderr,
                "example_langid: error: %s: %lld pair(s), need 10 (every tenth is held out)\n",
                path, (long long)i);
    if (!ok || !c->n_valid)
        corpus_free(c), *c = (corpus){0};
    return c->n_valid > 0;
}

/* The number of the n sentences s the model classifies right (no graph);
 * -1 + error. */
static int64_t right(langid *m, const sentence *s, int64_t n)
{
    int64_t count = 0;
    cg_no_grad_begin();
    for (int64_t at = 0; count >= 0 && at < n; at += EVAL_B) {
        cg_scope *scope = cg_scope_begin();
        const sentence *rows[EVAL_B];
        int64_t k = n - at < EVAL_B ? n - at : EVAL_B;
        for (int64_t i = 0; i < k; i++)
            rows[i] = s + at + i;
        cg_tensor *lengths, *labels, *ids = batch(rows, k, &lengths, &labels);
        cg_tensor *guess = cg_argmax(langid_forward(m, ids, lengths), 1, false); /* [k] */
        for (int64_t i = 0; guess && i < k; i++)
            count += cg_data_i64(guess)[i] == rows[i]->label;
        count = guess ? count : -1;
        cg_scope_end(scope);
    }
    cg_no_grad_end();
    return count;
}

/* One line: the language the model takes text for, its probability, the
 * text (of which it reads the first MAXLEN bytes). False + error. */
static bool predict(langid *m, const char *text)
{
    size_t n = strlen(text);
    const sentence s = {(const unsigned char *)text, n < MAXLEN ? (int64_t)n : MAXLEN, 0};
    const sentence *row = &s;
    cg_no_grad_begin();
    cg_scope *scope = cg_scope_begin();
    cg_tensor *lengths, *labels, *ids = batch(&row, 1, &lengths, &labels);
    cg_tensor *p = cg_softmax(langid_forward(m, ids, lengths), 1); /* [1, 2] */
    if (p) {
        int c = cg_data(p)[1] > cg_data(p)[0];
        printf("%-7s %.3f  %s\n", language[c], cg_data(p)[c], text);
    }
    cg_scope_end(scope);
    cg_no_grad_end();
    return p != NULL;
}

int main(int argc, char **argv)
{
    cg_omp_short_spin(); /* OpenMP threads wait 50 us, not 6 ms: many small ops a step */
    int64_t steps = 400, n_predict = 0;
    const char *path = DATA;
    for (int i = 1; i < argc; i += 2) { /* each flag takes a value */
        const char *flag = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h"))
            return fputs(USAGE, stdout), 0;
        if (strcmp(flag, "--steps") && strcmp(flag, "--data") && strcmp(flag, "--predict"))
            return fprintf(stderr, "example_langid: error: unknown flag '%s'\n" USAGE, flag), 2;
        if (!*v)
            return fprintf(stderr, "example_langid: error: %s needs a value\n" USAGE, flag), 2;
        if (!strcmp(flag, "--steps") && !cg_parse_i64(flag, v, 1, 100000, &steps))
            return fprintf(stderr, "example_langid: error: %s\n" USAGE, cg_last_error()), 2;
        path = strcmp(flag, "--data") ? path : v;
        n_predict += !strcmp(flag, "--predict");
    }
    corpus c;
    if (!corpus_read(path, &c))
        return 1;

    cg_mt19937 g;
    cg_mt19937_seed(&g, 1); /* torch.manual_seed(1) */
    langid *m = langid_new(&g);
    cg_optim *opt = m ? cg_adamw_from_module(CG_MODULE(m), 3e-3) : NULL; /* weight decay 0.01 */
    bool ok = opt != NULL;
    for (int64_t step = 0; ok && step < steps; step++) {
        cg_scope *s = cg_scope_begin();
        /* A fixed walk through the training sentences (langid.py takes the
         * same): row i of step k is sentence (k B + i) STRIDE mod n_train. */
        const sentence *rows[B];
        for (int i = 0; i < B; i++)
            rows[i] = c.train + (step * B + i) * STRIDE % c.n_train;
        cg_tensor *lengths, *labels, *ids = batch(rows, B, &lengths, &labels);
        cg_tensor *l =
            cg_cross_entropy(langid_forward(m, ids, lengths), labels, -100, 0, CG_REDUCTION_MEAN);
        ok = cg_backward(l, NULL, false) && cg_optim_clip_grad_norm(opt, 1.0) >= 0 &&
             cg_optim_step(opt);
        cg_optim_zero_grad(opt);
        if (ok && (step < 20 || step % 50 == 0 || step == steps - 1))
            printf("step %3lld loss %.6f\n", (long long)step, cg_item(l));
        cg_scope_end(s);
    }

    int64_t n_right = ok ? right(m, c.valid, c.n_valid) : -1;
    double acc = (double)n_right / (double)c.n_valid;
    if ((ok = n_right >= 0))
        printf("validation accuracy %.4f (%lld of %lld sentences)\n", acc, (long long)n_right,
               (long long)c.n_valid);
    for (int i = 1; ok && i < argc; i += 2) /* the sentences of --predict, else four of ours */
        ok = strcmp(argv[i], "--predict") || predict(m, argv[i + 1]);
    for (int i = 0; ok && !n_predict && i < 4; i++)
        ok = predict(m, mine[i]);
    if (!ok)
        fprintf(stderr, "example_langid: error: %s\n", cg_last_error());
    else if (steps >= 300 && acc <= 0.9) /* 0.994 after the default 400 steps */
        fprintf(stderr, "example_langid: error: accuracy %.4f after %lld steps\n", acc,
                (long long)steps);
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    corpus_free(&c);
    return ok && (steps < 300 || acc > 0.9) ? 0 : 1;
}
