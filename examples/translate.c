/* translate: the toy translation task of the "Attention Is All You Need"
 * notebooks, written against the installed library only:
 *     cc translate.c $(pkg-config --cflags --libs cgrad)
 * An encoder-decoder transformer (d_model 32, 4 heads, d_ff 128, 2 layers,
 * post-norm) learns six German-English word pairs with Adam (lr 1e-3) in
 * 200 full-batch epochs, then translates each source by greedy decoding.
 * Exit status 0 when all six translations are right. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cgrad.h"

enum { N = 6, S = 4, T = 5, D = 32, HEADS = 4, FF = 128, LAYERS = 2, EPOCHS = 200, MAXV = 64 };
enum { PAD, BOS, EOS }; /* word ids 0, 1, 2 */
static const char *pairs[N][2] = {
    {"ich mochte ein bier", "i want a beer"},    {"ich mochte ein cola", "i want a coke"},
    {"du trinkst ein bier", "you drink a beer"}, {"er trinkt eine cola", "he drinks a coke"},
    {"wir essen ein brot", "we eat some bread"}, {"sie isst eine suppe", "she eats a soup"}};
static char words[MAXV][16] = {"<pad>", "<s>", "</s>"};
static int n_words = 3;

/* The S words of a sentence as ids (new words join the vocabulary). */
static void tokenize(const char *s, int64_t *ids)
{
    for (int i = 0; i < S; i++) {
        int len = (int)strcspn(s, " ");
        int id = 0;
        while (id < n_words && (strlen(words[id]) != (size_t)len || strncmp(words[id], s, len)))
            id++;
        if (id == n_words)
            snprintf(words[n_words++], sizeof words[0], "%.*s", len, s);
        ids[i] = id;
        s += len + (s[len] == ' ');
    }
}

typedef struct { /* one vocabulary and embedding for both languages */
    cg_module *root;
    cg_embed *emb;
    cg_posenc *pe;
    cg_enc_stack *enc;
    cg_dec_stack *dec;
    cg_linear *head;
} model;

static cg_tensor *embed(model *m, const int64_t *ids, int64_t B, int64_t L)
{
    cg_tensor *e = cg_embed_forward(m->emb, cg_from_i64(CG_SHAPE(B, L), ids));
    return cg_posenc_forward(m->pe, cg_muls(e, sqrtf((float)D)));
}

/* Called inside a scope: the intermediates die at its end. */
static cg_tensor *forward(model *m, const int64_t *src, const int64_t *tgt, int64_t B, int64_t L)
{
    cg_attn_mask causal = {.causal = true};
    cg_tensor *memory = cg_enc_stack_forward(m->enc, embed(m, src, B, S), NULL);
    cg_tensor *h = cg_dec_stack_forward(m->dec, embed(m, tgt, B, L), memory, &causal, NULL);
    return cg_linear_forward(m->head, h); /* [B, L, vocabulary] */
}

int main(void)
{
    int64_t src[N * S], tgt_in[N * T], tgt_out[N * T];
    for (int i = 0; i < N; i++) {
        tokenize(pairs[i][0], src + i * S);
        tokenize(pairs[i][1], tgt_out + i * T); /* words, then </s> */
        tgt_out[i * T + S] = EOS;
        tgt_in[i * T] = BOS; /* <s>, then the words */
        memcpy(tgt_in + i * T + 1, tgt_out + i * T, S * sizeof(int64_t));
    }
    cg_rng rng = cg_rng_new(1);
    cg_tf_config cfg = {.d = D,
                        .H = HEADS,
                        .d_ff = FF,
                        .norm = CG_NORM_LAYERNORM,
                        .act = CG_ACT_RELU,
                        .norm_first = false};
    model m = {.root = cg_module_new("Translator")};
    m.emb = cg_module_add_child(m.root, "emb", cg_embed_new(MAXV, D, &rng));
    m.pe = cg_module_add_child(m.root, "pe", cg_posenc_new(16, D));
    m.enc = cg_module_add_child(m.root, "encoder", cg_enc_stack_new(LAYERS, &cfg, &rng));
    m.dec = cg_module_add_child(m.root, "decoder", cg_dec_stack_new(LAYERS, &cfg, &rng));
    m.head = cg_module_add_child(m.root, "head", cg_linear_new(D, MAXV, true, &rng));
    cg_optim *opt = cg_adam_from_module(m.root, 1e-3);
    if (!m.head || !opt)
        return fprintf(stderr, "translate: %s\n", cg_last_error()), 1;
    for (int epoch = 1; epoch <= EPOCHS; epoch++) {
        cg_scope *scope = cg_scope_begin();
        cg_tensor *loss =
            cg_cross_entropy(forward(&m, src, tgt_in, N, T), cg_from_i64(CG_SHAPE(N, T), tgt_out),
                             PAD, 0, CG_REDUCTION_MEAN);
        if (!loss || !cg_backward(loss, NULL, false) || !cg_optim_step(opt)) {
            fprintf(stderr, "translate: epoch %d: %s\n", epoch, cg_last_error());
            return 1;
        }
        if (epoch % 50 == 0)
            printf("epoch %3d  loss %.4f\n", epoch, cg_item(loss));
        cg_optim_zero_grad(opt);
        cg_scope_end(scope);
    }
    cg_module_train(m.root, false); /* greedy decoding, no graph */
    cg_no_grad_begin();
    int right = 0;
    for (int i = 0; i < N; i++) {
        int64_t out[T + 1] = {BOS};
        int len = 1;
        while (len <= T && (len == 1 || out[len - 1] != EOS)) {
            cg_scope *scope = cg_scope_begin();
            cg_tensor *logits = forward(&m, src + i * S, out, 1, len);
            cg_tensor *last = cg_select(cg_select(logits, 0, 0), 0, len - 1);
            out[len++] = cg_item_i64(cg_argmax(last, 0, false));
            cg_scope_end(scope);
        }
        char text[128] = "";
        for (int t = 1; t < len && out[t] != EOS; t++)
            snprintf(text + strlen(text), 64, "%s%s", t > 1 ? " " : "", words[out[t]]);
        right += strcmp(text, pairs[i][1]) == 0;
        printf("%-20s -> %s\n", pairs[i][0], text);
    }
    cg_no_grad_end();
    printf("translate: %d of %d translations right\n", right, N);
    cg_optim_free(opt);
    cg_module_free(m.root);
    return right == N ? 0 : 1;
}
