/* bert_classifier: a BERT-style classifier on sentences of varying length:
 * a [CLS] token in front, each batch padded to its longest with a padding
 * mask (cg_loader_new_seqs), a Transformer encoder, and the [CLS]
 * position's output classified. The task: does token 2 occur more often
 * than token 3? bert_classifier.py is the same in PyTorch. */
#include "cgrad.h" /* (and stdio.h) */

enum { CLS, PAD, V = 8, D = 32, H = 4, N = 600, NT = 200, BATCH = 32, EPOCHS = 20 };

typedef struct {
    cg_module base;
    cg_embed *tok, *pos;
    cg_enc_stack *enc;
    cg_linear *head;
} classifier;

static classifier *classifier_new(cg_rng *r)
{
    classifier *m = (classifier *)cg_module_alloc(sizeof *m, "Classifier", NULL);
    cg_tf_config cfg = {.d = D, .H = H, .d_ff = 4 * D, .act = CG_ACT_RELU, .norm_first = true};
    m->tok = cg_module_add_child(&m->base, "tok", cg_embed_new(V, D, r));
    m->pos = cg_module_add_child(&m->base, "pos", cg_embed_new(16, D, r));
    m->enc = cg_module_add_child(&m->base, "enc", cg_enc_stack_new(2, &cfg, r));
    m->head = cg_module_add_child(&m->base, "head", cg_linear_new(D, 2, true, r));
    return m;
}

static cg_tensor *classifier_forward(classifier *m, cg_tensor *x, cg_tensor *pad) /* in a scope */
{
    cg_tensor *h =
        cg_add(cg_embed_forward(m->tok, x), cg_narrow(m->pos->weight, 0, 0, x->shape[1]));
    h = cg_enc_stack_forward(m->enc, h, &(cg_attn_mask){.key_pad = pad});
    return cg_linear_forward(m->head, cg_select(h, 1, 0)); /* the [CLS] position */
}

/* n sentences into a loader (batches of B, shuffled by r unless NULL). */
static cg_loader *sentences(int n, int64_t B, cg_rng *r, cg_rng *shuffle)
{
    cg_tensor *xs[N], *ys = cg_empty_dtype(CG_I64, CG_SHAPE(n));
    for (int i = 0; i < n;) {
        int64_t s[16] = {CLS}, len = 4 + cg_rng_below(r, 13), a = 0, b = 0;
        for (int t = 1; t < len; t++) {
            s[t] = 2 + cg_rng_below(r, V - 2);
            a += s[t] == 2, b += s[t] == 3;
        }
        if (a != b)
            cg_data_i64(ys)[i] = a > b, xs[i++] = cg_from_i64(1, &len, s);
    }
    cg_loader *ld = cg_loader_new_seqs(n, xs, ys, PAD, B, shuffle); /* it keeps what it needs */
    for (int i = 0; i < n; i++)
        cg_release(xs[i]);
    cg_release(ys);
    return ld;
}

int main(void)
{
    cg_rng rng = cg_rng_new(1);
    cg_loader *train = sentences(N, BATCH, &rng, &rng), *test = sentences(NT, NT, &rng, NULL);
    classifier *m = classifier_new(&rng);
    cg_optim *opt = cg_adamw_from_module(CG_MODULE(m), 1e-3);
    for (int epoch = 0; epoch < EPOCHS; epoch++)
        while (cg_loader_next(train)) /* each batch in its own scope */
            cg_train_step(opt, cg_cross_entropy(classifier_forward(m, train->x, train->mask),
                                                train->y, -100, 0, CG_REDUCTION_MEAN));
    cg_no_grad_begin(); /* the test set: one batch, in order */
    bool ok = cg_loader_next(test);
    double acc = ok ? cg_accuracy(classifier_forward(m, test->x, test->mask), test->y) : 0;
    cg_no_grad_end();
    printf("held-out accuracy %.3f\n", acc);
    cg_loader_free(train);
    cg_loader_free(test);
    cg_optim_free(opt);
    cg_module_free(CG_MODULE(m));
    return acc > 0.9 ? 0 : 1;
}
