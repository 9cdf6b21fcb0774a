/* A Seq2Seq translator over sets of sentences (see translate.h). */
#include "models/seq2seq/translate.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "models/seq2seq/beam.h"
#include "models/data/data.h"
#include "dist/dist.h"
#include "models/report/metrics.h"
#include "models/report/plot.h"
#include "models/train/train_common.h"
#include "models/train/trainer.h"
#include "models/util/files.h"

/* The tokenizer as a batch encoder (cg_encode_fn). */
static int64_t *tok_encode(const void *tok, const char *s, int64_t *n, int64_t *n_unk)
{
    return cg_tokenizer_encode(tok, s, n, n_unk);
}

bool cg_batch_make_tok(const cg_pairs *p, const int64_t *idx, int64_t n, const cg_tokenizer *tok,
                       cg_batch *out)
{
    return cg_batch_make_with(p, idx, n, tok_encode, tok, out);
}

cg_tokenizer *cg_pairs_train_tokenizer(const cg_pairs *p, const int64_t *idx, int64_t n,
                                       cg_tokenizer_kind kind, int64_t vocab_size)
{
    const char **sents = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof *sents);
    if (!sents) {
        cg_set_error("out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        sents[2 * i] = p->items[idx[i]].src;
        sents[2 * i + 1] = p->items[idx[i]].tgt;
    }
    cg_tokenizer *t = cg_tokenizer_train(kind, true, sents, 2 * n, vocab_size);
    free(sents);
    return t;
}

/* Append n ids to the growing array *buf (*len used, *cap allocated). */
static bool ids_append(int64_t **buf, int64_t *len, int64_t *cap, const int64_t *ids, int64_t n)
{
    if (*len + n > *cap) {
        int64_t c = *cap ? *cap : 4096;
        while (c < *len + n)
            c *= 2;
        int64_t *nb = realloc(*buf, (size_t)c * sizeof *nb);
        if (!nb) {
            cg_set_error("out of memory");
            return false;
        }
        *buf = nb, *cap = c;
    }
    if (n > 0)
        memcpy(*buf + *len, ids, (size_t)n * sizeof **buf);
    *len += n;
    return true;
}

bool cg_pairs_tokenize(cg_pairs *p, const cg_tokenizer *tok)
{
    int64_t *buf = NULL, len = 0, cap = 0;
    for (int64_t i = 0; i < p->n; i++) {
        cg_pair *q = &p->items[i];
        int64_t ns, nt;
        int64_t *a = cg_tokenizer_encode(tok, q->src, &ns, NULL);
        int64_t *b = a ? cg_tokenizer_encode(tok, q->tgt, &nt, NULL) : NULL;
        bool ok = b && ids_append(&buf, &len, &cap, a, ns) && ids_append(&buf, &len, &cap, b, nt);
        free(a);
        free(b);
        if (!ok) {
            free(buf);
            return false;
        }
        q->src_len = (int32_t)ns;
        q->tgt_len = (int32_t)nt;
    }
    free(p->ids); /* a second tokenizing replaces the first */
    p->ids = buf;
    for (int64_t i = 0, off = 0; i < p->n; i++) { /* the array has its final place now */
        cg_pair *q = &p->items[i];
        q->src_ids = buf + off;
        q->tgt_ids = buf + off + q->src_len;
        off += q->src_len + q->tgt_len;
    }
    return true;
}

bool cg_mt_data_load(cg_mt_data *d, const char *path, const char *default_data, int64_t n_valid,
                     int64_t n_test, cg_data_id *id)
{
    if (cg_pairs_load(path, n_valid, n_test, &d->pairs, &d->split, id))
        return true;
    cg_data_default_hint(path, default_data);
    return false;
}

bool cg_mt_data_add_extra(cg_mt_data *d, const char *path, cg_data_id *id, cg_pairs_extra *c)
{
    cg_pairs x;
    bool ok = cg_pairs_read(path, &x, id) && cg_pairs_add_extra(&d->pairs, &d->split, &x, c);
    cg_pairs_free(&x);
    return ok;
}

bool cg_mt_data_load_ckpt(cg_mt_data *d, const char *train_json, const char *ckpt_path,
                          const char *given, const char *default_data)
{
    int64_t n_valid = 500, n_test = 1000;
    const cg_json_field f[] = {
        {"valid_size", CG_JF_I64, &n_valid, 1, 1e9, true},
        {"test_size", CG_JF_I64, &n_test, 1, 1e9, true},
    };
    char *path = NULL;
    cg_data_id id;
    bool ok = cg_train_model_fields(train_json, ckpt_path, "seq2seq", f, 2) &&
              (path = cg_train_data_path(train_json, ckpt_path, given, default_data));
    ok = ok && cg_mt_data_load(d, path, default_data, n_valid, n_test, &id) &&
         cg_train_data_check(train_json, ckpt_path, &id);
    free(path);
    return ok;
}

/* The tokenizer of cg_mt_data_prepare. */
static bool mt_tokenizer(cg_mt_data *d, const char *path, cg_tokenizer_kind kind,
                         int64_t vocab_size, cg_tokenizer **resume_tok, const char *resume_path)
{
    if (resume_tok && ((*resume_tok)->kind == CG_TOK_BPE || d->base_tok)) {
        d->tok = *resume_tok;
        *resume_tok = NULL;
        return true;
    }
    if (resume_tok)
        kind = (*resume_tok)->kind;
    if (kind == CG_TOK_BPE)
        fprintf(stderr, "training a BPE tokenizer of %lld ids on %lld training pairs...\n",
                (long long)vocab_size, (long long)d->n_train);
    d->tok = cg_pairs_train_tokenizer(&d->pairs, d->split.train, d->n_train, kind, vocab_size);
    if (!d->tok) {
        cg_seq2seq_prefix_error(path);
        return false;
    }
    if (!resume_tok)
        cg_train_vocab_warn(d->tok, vocab_size);
    if (resume_tok && !cg_tokenizer_equal(*resume_tok, d->tok)) {
        cg_set_error("%s: the vocabulary of %s differs from the checkpoint's (data changed?)",
                     resume_path, path);
        return false;
    }
    return true;
}

/* A pair over the budget is a batch of its own (cg_make_batches, as the
 * reference's make_batches; fairseq refuses it): said once, for all. */
static void warn_over_budget(const cg_pairs *P, const int64_t *idx, int64_t n, int64_t max_tokens)
{
    int64_t over = 0, most = 0;
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *q = &P->items[idx[i]];
        int64_t t = q->src_len + 1 + q->tgt_len + 1;
        over += t > max_tokens;
        most = t > most ? t : most;
    }
    if (over > 0)
        cg_prog_warn("%lld training pair%s longer than --max-tokens %lld (up to %lld tokens "
                     "with BOS and EOS): each is a batch of its own, over the budget; a larger "
                     "--max-tokens or a smaller --max-len keeps every batch within it",
                     (long long)over, over == 1 ? " is" : "s are", (long long)max_tokens,
                     (long long)most);
}

/* "no training pair fits --max-len" (unit: "character" or "token"): false */
static bool no_pair_fits(const char *path, int64_t max_len, const char *unit)
{
    cg_set_error("%s: no training pair fits --max-len %lld (both sides at most %lld %s%s, "
                 "leaving room for BOS and EOS)",
                 path, (long long)max_len, (long long)max_len - 2, unit,
                 max_len - 2 == 1 ? "" : "s");
    return false;
}

bool cg_mt_data_prepare(cg_mt_data *d, const char *path, int64_t max_len, int64_t max_tokens,
                        cg_tokenizer_kind kind, int64_t vocab_size, cg_tokenizer **resume_tok,
                        const char *resume_path, const char *prog)
{
    const cg_pairs *P = &d->pairs;
    const cg_pair_split *sp = &d->split;
    /* --max-len counts the model's ids: characters, or (BPE) the pieces of
     * a tokenizer that learns from every training pair; a BPE checkpoint
     * from before counted characters (max_len_chars) */
    const bool bpe = resume_tok ? (*resume_tok)->kind == CG_TOK_BPE : kind == CG_TOK_BPE;
    const bool late = bpe && !d->max_len_chars;
    d->n_train = late ? sp->n_train : cg_pairs_filter(P, sp->train, sp->n_train, max_len - 2);
    if (d->n_train == 0)
        return no_pair_fits(path, max_len, "character");
    d->valid_chars = 0;
    for (int64_t i = 0; i < sp->n_valid; i++)
        d->valid_chars += P->items[sp->valid[i]].tgt_len + 1;
    if (!mt_tokenizer(d, path, kind, vocab_size, resume_tok, resume_path))
        return false;
    if (d->tok->kind == CG_TOK_CHAR) {
        if (d->base_tok) /* a vocabulary of its own covers the training pairs */
            cg_pairs_warn_unknown(P, sp->train, d->n_train, &d->tok->pv, prog,
                                  "the training pairs");
        cg_pairs_warn_unknown(P, sp->valid, sp->n_valid, &d->tok->pv, prog, "the validation pairs");
        cg_pairs_warn_unknown(P, sp->test, sp->n_test, &d->tok->pv, prog, "the test pairs");
    } else if (!cg_pairs_tokenize(&d->pairs, d->tok)) {
        cg_seq2seq_prefix_error(path);
        return false;
    }
    if (late && (d->n_train = cg_pairs_filter(P, sp->train, sp->n_train, max_len - 2)) == 0)
        return no_pair_fits(path, max_len, "token");
    for (int64_t i = 0; i < sp->n_valid; i++) {
        const cg_pair *q = &P->items[sp->valid[i]];
        if (q->src_len + 1 > max_len || q->tgt_len + 1 > max_len) {
            cg_set_error("%s:%lld: the validation pair on line %lld is longer than --max-len "
                         "%lld (%lld and %lld tokens with EOS); raise --max-len or remove the "
                         "line",
                         path, (long long)sp->valid[i] + 1, (long long)sp->valid[i] + 1,
                         (long long)max_len, (long long)q->src_len + 1, (long long)q->tgt_len + 1);
            return false;
        }
    }
    if (prog)
        warn_over_budget(P, sp->train, d->n_train, max_tokens);
    return cg_make_batches(P, sp->train, d->n_train, max_tokens, &d->batches) &&
           cg_make_batches(P, sp->valid, sp->n_valid, max_tokens, &d->vbatches);
}

bool cg_mt_data_order(cg_mt_data *d, uint32_t seed, int grad_accum, bool resumed, int64_t steps,
                      const char *path)
{
    int64_t nb = d->batches.n_batches;
    d->n_bt = grad_accum;
    d->bt = calloc((size_t)grad_accum, sizeof *d->bt);
    if (!d->bt || !(d->perm = malloc((size_t)(nb ? nb : 1) * sizeof *d->perm))) {
        cg_set_error("out of memory");
        return false;
    }
    cg_mt19937_seed(&d->order, seed);
    if (!resumed) {
        d->epoch = 0;
        d->pos = nb;
        return true;
    }
    /* grad_accum batches per step: the position must be exactly where
     * `steps` steps leave it (a bound on the replay too) */
    if (!cg_train_position_check(d->epoch, d->pos, nb, steps * grad_accum, path))
        return false;
    for (int64_t e = 0; e < d->epoch; e++) /* replay the batch order so far */
        cg_mt_permutation(&d->order, nb, d->perm);
    return true;
}

bool cg_mt_data_next(cg_mt_data *d, int k, double *weight, double *tokens)
{
    cg_batch *out = &d->bt[k];
    if (d->pos >= d->batches.n_batches) {
        d->epoch++;
        cg_mt_permutation(&d->order, d->batches.n_batches, d->perm);
        d->pos = 0;
    }
    int64_t bi = d->perm[d->pos++];
    int64_t nb = d->batches.start[bi + 1] - d->batches.start[bi], b0, b1;
    if (!cg_dist_share(nb, &b0, &b1)) {
        cg_set_error("a batch of %lld pairs cannot be split over %d ranks (raise --max-tokens)",
                     (long long)nb, cg_dist_size());
        return false;
    }
    cg_batch_free(out);
    if (!cg_batch_make_tok(&d->pairs, d->batches.idx + d->batches.start[bi] + b0, b1 - b0, d->tok,
                           out) ||
        (d->pad_to > 1 && !cg_batch_pad_to(out, d->pad_to, d->pad_limit)))
        return false;
    *weight = (double)out->n_tokens;
    *tokens = (double)out->n_tokens; /* tokens/s counts target tokens, as bench */
    return true;
}

void cg_mt_data_free(cg_mt_data *d)
{
    cg_pairs_free(&d->pairs);
    cg_pair_split_free(&d->split);
    cg_tokenizer_free(d->tok);
    cg_batches_free(&d->batches);
    cg_batches_free(&d->vbatches);
    free(d->perm);
    for (int k = 0; d->bt && k < d->n_bt; k++)
        cg_batch_free(&d->bt[k]);
    free(d->bt);
    memset(d, 0, sizeof *d);
}

bool cg_seq2seq_valid_loss(cg_seq2seq *m, const cg_pairs *p, const cg_batches *bs,
                           const cg_tokenizer *tok, double *ls_out, double *nll_out,
                           double *ntok_out)
{
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    double ls = 0, nll = 0, ntok = 0;
    bool ok = true;
    for (int64_t b = 0; ok && b < bs->n_batches; b++) {
        if (cg_train_interrupted()) {
            cg_set_error("interrupted");
            ok = false;
            break;
        }
        cg_batch bt;
        if (!cg_batch_make_tok(p, bs->idx + bs->start[b], bs->start[b + 1] - bs->start[b], tok,
                               &bt)) {
            cg_seq2seq_prefix_error("validation batch");
            ok = false;
            break;
        }
        cg_tensor *logits = cg_seq2seq_forward(m, bt.src, bt.B, bt.S, bt.tgt_in, bt.T);
        cg_tensor *l1 = cg_seq2seq_loss(m, logits, bt.tgt_out);
        cg_tensor *yt = cg_from_i64(CG_SHAPE(bt.B, bt.T), bt.tgt_out);
        cg_tensor *l2 = yt ? cg_cross_entropy(logits, yt, CG_PAD, 0.0f, CG_REDUCTION_MEAN) : NULL;
        cg_release(yt);
        if (!l1 || !l2) {
            cg_seq2seq_prefix_error("validation");
            ok = false;
        } else {
            double n = (double)bt.n_tokens;
            ls += cg_item(l1) * n;
            nll += cg_item(l2) * n;
            ntok += n;
        }
        cg_release_all(3, logits, l1, l2);
        cg_batch_free(&bt);
    }
    cg_no_grad_end();
    cg_module_train(CG_MODULE(m), true);
    if (!ok)
        return false;
    *ls_out = ntok > 0 ? ls / ntok : NAN;
    *nll_out = ntok > 0 ? nll / ntok : NAN;
    if (ntok_out)
        *ntok_out = ntok;
    return true;
}

bool cg_seq2seq_wrong_source_nll(cg_seq2seq *m, const cg_pairs *p, const int64_t *idx, int64_t n,
                                 int64_t max_tokens, const cg_tokenizer *tok, double *nll)
{
    cg_pairs wp = {0};
    wp.n = wp.cap = n;
    wp.items = malloc((size_t)(n ? n : 1) * sizeof *wp.items);
    if (!wp.items) {
        cg_set_error("out of memory");
        return false;
    }
    for (int64_t i = 0; i < n; i++) {
        const cg_pair *a = &p->items[idx[(i + 1) % n]], *b = &p->items[idx[i]];
        wp.items[i] = (cg_pair){a->src, b->tgt, a->src_len, b->tgt_len, a->src_ids, b->tgt_ids};
    }
    cg_batches wb;
    double ls;
    bool ok = cg_make_batches(&wp, NULL, wp.n, max_tokens, &wb);
    if (ok) {
        ok = cg_seq2seq_valid_loss(m, &wp, &wb, tok, &ls, nll, NULL);
        cg_batches_free(&wb);
    }
    free(wp.items);
    return ok;
}

bool cg_translate_counts(cg_seq2seq *m, const cg_tokenizer *tok, const cg_pairs *p,
                         const int64_t *idx, int64_t n, int beam, double alpha, bool use_cache,
                         const cg_decode_limits *lim, cg_bleu_stats *bleu, cg_chrf_counts *chrf,
                         char ***hyps)
{
    *bleu = (cg_bleu_stats){0};
    *chrf = (cg_chrf_counts){0};
    if (hyps)
        *hyps = NULL;
    if (n == 0)
        return true;
    const char **srcs = malloc((size_t)n * sizeof *srcs);
    const char **refs = malloc((size_t)n * sizeof *refs);
    cg_sources s = {0};
    char **h = NULL;
    bool ok = srcs && refs;
    if (!ok)
        cg_set_error("out of memory");
    for (int64_t i = 0; ok && i < n; i++) {
        srcs[i] = p->items[idx[i]].src;
        refs[i] = p->items[idx[i]].tgt;
    }
    ok = ok && cg_sources_encode(tok, srcs, n, m->cfg.max_len, &s) &&
         /* cut short by a signal the trainer caught (--eval-bleu's), as
          * cg_seq2seq_valid_loss is */
         (h = cg_translate_all_until(m, tok, &s, beam, alpha, use_cache, lim, NULL,
                                     cg_train_interrupted));
    if (ok && (!cg_bleu_count((int)n, (const char *const *)h, refs, bleu) ||
               !cg_chrf_count((int)n, (const char *const *)h, refs, chrf))) {
        cg_seq2seq_prefix_error("metrics");
        ok = false;
    }
    if (ok && hyps)
        *hyps = h;
    else
        cg_strings_free(h, n);
    cg_sources_free(&s);
    free(srcs);
    free(refs);
    return ok;
}

bool cg_translate_score(cg_seq2seq *m, const cg_tokenizer *tok, const cg_pairs *p,
                        const int64_t *idx, int64_t n, int beam, double alpha, bool use_cache,
                        const cg_decode_limits *lim, double *bleu, double *chrf, char ***hyps)
{
    cg_bleu_stats b;
    cg_chrf_counts c;
    if (!cg_translate_counts(m, tok, p, idx, n, beam, alpha, use_cache, lim, &b, &c, hyps))
        return false;
    cg_bleu_finish(&b);
    *bleu = b.score;
    *chrf = cg_chrf_score(&c);
    return true;
}

/* dir/file: the attention of mods[0..layers) over row_ids x col_ids. */
static bool draw(const char *dir, const char *file, const char *title, int layers,
                 cg_mha *const *mods, const cg_tokenizer *tok, const int64_t *row_ids, int64_t Tq,
                 const int64_t *col_ids, int64_t Tk, FILE *list)
{
    size_t plen = strlen(dir) + strlen(file) + 2;
    char *path = malloc(plen);
    if (!path) {
        cg_set_error("out of memory");
        return false;
    }
    snprintf(path, plen, "%s/%s", dir, file);
    bool ok =
        cg_plot_attention_ids(path, title, layers, mods, tok, row_ids, (int)Tq, col_ids, (int)Tk);
    if (!ok)
        cg_seq2seq_prefix_error(path);
    else if (list)
        fprintf(list, "%s\n", path);
    free(path);
    return ok;
}

bool cg_seq2seq_draw_attention(cg_seq2seq *m, const cg_tokenizer *tok, const int64_t *src,
                               int64_t S, const int64_t *tin, int64_t T, const char *dir,
                               FILE *list)
{
    if (!cg_make_dirs(dir))
        return false;
    cg_module_train(CG_MODULE(m), false);
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_no_grad_begin();
    cg_tensor *logits = cg_seq2seq_forward(m, src, 1, S, tin, T);
    cg_no_grad_end();
    if (!logits) {
        cg_seq2seq_prefix_error("forward");
        return false;
    }
    cg_release(logits);
    int ne = m->encoder->n_layers, nd = m->decoder->n_layers;
    cg_mha **mods = malloc((size_t)(ne + nd + 1) * sizeof *mods);
    if (!mods) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = true;
    if (ne > 0) {
        for (int i = 0; i < ne; i++)
            mods[i] = m->encoder->layers[i]->self_attn;
        ok = draw(dir, "encoder_self.png", "encoder self-attention", ne, mods, tok, src, S, src, S,
                  list);
    }
    if (ok && nd > 0) {
        for (int i = 0; i < nd; i++)
            mods[i] = m->decoder->layers[i]->self_attn;
        ok = draw(dir, "decoder_self.png", "decoder self-attention", nd, mods, tok, tin, T, tin, T,
                  list);
        for (int i = 0; ok && i < nd; i++)
            mods[i] = m->decoder->layers[i]->cross_attn;
        ok = ok && draw(dir, "cross.png", "cross-attention (rows: decoder input, columns: source)",
                        nd, mods, tok, tin, T, src, S, list);
    }
    free(mods);
    return ok;
}

bool cg_translate_test(cg_seq2seq *m, const cg_tokenizer *tok, const cg_pairs *p,
                       const int64_t *idx, int64_t n, int beam, double alpha, int64_t examples,
                       FILE *out, cg_translate_test_result *res)
{
    double t0 = cg_now();
    char **hg = NULL, **hb = NULL;
    bool ok = cg_translate_score(m, tok, p, idx, n, 1, alpha, true, NULL, &res->bleu_greedy,
                                 &res->chrf_greedy, &hg) &&
              cg_translate_score(m, tok, p, idx, n, beam, alpha, true, NULL, &res->bleu_beam,
                                 &res->chrf_beam, &hb);
    res->seconds = cg_now() - t0;
    for (int64_t i = 0; ok && i < n && i < examples; i++)
        fprintf(out, "SRC  %s\nREF  %s\nGRDY %s\nBEAM %s\n\n", p->items[idx[i]].src,
                p->items[idx[i]].tgt, hg[i], hb[i]);
    cg_strings_free(hg, n);
    cg_strings_free(hb, n);
    return ok;
}

/* The decoder input of cg_seq2seq_attention_of_text: target's ids or the
 * greedy translation of src, without BOS (malloc'd, *L ids). */
static int64_t *attention_target(cg_seq2seq *m, const cg_tokenizer *tok, const int64_t *src,
                                 int64_t S, const char *target, const char *target_name,
                                 bool use_cache, int64_t *L)
{
    int64_t *ids = NULL;
    if (target) {
        if (cg_utf8_count(target, strlen(target), NULL) < 0)
            cg_set_error("%s is not valid UTF-8", target_name);
        else if (!(ids = cg_tokenizer_encode(tok, target, L, NULL)))
            cg_seq2seq_prefix_error(target_name);
        return ids;
    }
    int64_t steps = S - 1 + 50 < m->cfg.max_len - 1 ? S - 1 + 50 : m->cfg.max_len - 1;
    ids = malloc((size_t)steps * sizeof *ids);
    if (!ids)
        cg_set_error("greedy decode: out of memory");
    if (!ids || !cg_greedy_decode(m, src, 1, S, steps, ids, L, use_cache)) { /* named */
        free(ids);
        return NULL;
    }
    return ids;
}

bool cg_seq2seq_attention_of_text(cg_seq2seq *m, const cg_tokenizer *tok, const char *text,
                                  const char *target, const char *target_name, bool use_cache,
                                  const char *dir, FILE *list, FILE *log)
{
    cg_module_train(CG_MODULE(m), false);
    cg_sources s;
    if (!cg_sources_encode(tok, &text, 1, m->cfg.max_len, &s))
        return false;
    int64_t S = s.len[0] + 1, L = 0, T = 0;
    int64_t *src = malloc((size_t)S * sizeof *src), *out_ids = NULL, *tin = NULL;
    bool ok = src != NULL;
    if (!ok)
        cg_set_error("out of memory");
    else {
        memcpy(src, s.ids[0], (size_t)s.len[0] * sizeof *src);
        src[S - 1] = CG_EOS;
        ok = (out_ids = attention_target(m, tok, src, S, target, target_name, use_cache, &L));
    }
    if (ok && (T = L + 1) > m->cfg.max_len) {
        cg_set_error("the target is longer than the model's max_len %lld",
                     (long long)m->cfg.max_len);
        ok = false;
    }
    if (ok && !(ok = (tin = malloc((size_t)T * sizeof *tin))))
        cg_set_error("out of memory");
    if (ok) {
        tin[0] = CG_BOS;
        memcpy(tin + 1, out_ids, (size_t)L * sizeof *tin);
        char *trans = cg_tokenizer_decode(tok, out_ids, L);
        if (log)
            fprintf(log, "translation: %s\n", trans ? trans : "");
        free(trans);
        ok = cg_seq2seq_draw_attention(m, tok, src, S, tin, T, dir, list);
    }
    free(tin);
    free(out_ids);
    free(src);
    cg_sources_free(&s);
    return ok;
}

int cg_translate_cli_opts(cg_translate_opts *o, const char *default_ckpt, cg_cli_opt *opts)
{
    *o = (cg_translate_opts){.ckpt = default_ckpt,
                             .beam = 1,
                             .threads = 2,
                             .alpha = CG_BEAM_ALPHA,
                             .lim = cg_translate_limits_default(),
                             .sample = cg_sample_default(),
                             .seed = 1};
    opts[0] = (cg_cli_opt){"--ckpt", CG_CLI_STR, &o->ckpt, 0, 0, NULL, 0};
    opts[1] = (cg_cli_opt){"--beam", CG_CLI_I64, &o->beam, 1, 1000, NULL, 0};
    opts[2] = (cg_cli_opt){"--length-penalty", CG_CLI_F64, &o->alpha, -100, 100, NULL, 0};
    opts[3] = (cg_cli_opt){"--no-cache", CG_CLI_SWITCH, &o->no_cache, 0, 0, NULL, 0};
    opts[4] = (cg_cli_opt){"--precision", CG_CLI_STR, &o->precision, 0, 0, NULL, 0};
    opts[5] = (cg_cli_opt){"--threads", CG_CLI_I64, &o->threads, 1, 1024, NULL, 0};
    opts[6] = (cg_cli_opt){"--max-len-a", CG_CLI_F64, &o->lim.max_len_a, 0, 1e6, NULL, 0};
    opts[7] = (cg_cli_opt){"--max-len-b", CG_CLI_I64, &o->lim.max_len_b, 0, 1e9, NULL, 0};
    opts[8] = (cg_cli_opt){"--min-len", CG_CLI_I64, &o->lim.min_len, 0, 1e9, NULL, 0};
    opts[9] = (cg_cli_opt){
        "--no-repeat-ngram-size", CG_CLI_I64, &o->lim.no_repeat_ngram_size, 0, 1e9, NULL, 0};
    opts[10] = (cg_cli_opt){"--base", CG_CLI_STR, &o->base, 0, 0, NULL, 0};
    return CG_TRANSLATE_N_OPTS;
}

bool cg_translate_limits_flags(const cg_decode_limits *l, int64_t model_max_len)
{
    const long long b = (long long)l->max_len_b, n = (long long)l->min_len;
    if (model_max_len > 0 && l->min_len > model_max_len)
        cg_set_error("--min-len %lld is more than the %lld tokens this model takes (its max_len): "
                     "no translation could end",
                     n, (long long)model_max_len);
    else if (model_max_len <= 0 && l->max_len_a == 0 && l->max_len_b == 0)
        cg_set_error("--max-len-a 0 --max-len-b 0 leave no token to translate");
    else if (model_max_len <= 0 && l->max_len_a == 0 && l->min_len > l->max_len_b)
        cg_set_error("--min-len %lld is more than the %lld tokens --max-len-b %lld allows with "
                     "--max-len-a 0: no translation could end",
                     n, b, b);
    else
        return true;
    return false;
}

bool cg_mt_check_split(const cg_mt_data *d, const cg_tokenizer *tok, bool valid, int64_t n,
                       int64_t max_len, const char *path)
{
    const int64_t *idx = valid ? d->split.valid : d->split.test;
    const char *what = valid ? "validation" : "test";
    int64_t have = valid ? d->split.n_valid : d->split.n_test;
    for (int64_t i = 0; i < n && i < have; i++) {
        int64_t line = idx[i] + 1, k;
        int64_t *ids = cg_tokenizer_encode(tok, d->pairs.items[idx[i]].src, &k, NULL);
        free(ids);
        if (!ids) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", cg_last_error());
            cg_set_error("%s:%lld: %s pair: %s", path, (long long)line, what, msg);
            return false;
        }
        if (k + 1 > max_len) {
            cg_set_error("%s:%lld: the %s pair on line %lld has a source of %lld tokens; the "
                         "model takes at most %lld (--max-len %lld): raise --max-len, remove "
                         "the line, or decode fewer with --test-limit",
                         path, (long long)line, what, (long long)line, (long long)k,
                         (long long)max_len - 1, (long long)max_len);
            return false;
        }
    }
    return true;
}

/* The fewest pairs in a batch of bs. */
static int64_t min_batch(const cg_batches *bs)
{
    int64_t m = INT64_MAX;
    for (int64_t b = 0; b < bs->n_batches; b++)
        if (bs->start[b + 1] - bs->start[b] < m)
            m = bs->start[b + 1] - bs->start[b];
    return m;
}

/* 1 when batches of max_tokens give every batch at least R pairs, 0 when
 * not, -1 + error. */
static int batches_fit(const cg_mt_data *d, int64_t max_tokens, int R)
{
    cg_batches b;
    if (!cg_make_batches(&d->pairs, d->split.train, d->n_train, max_tokens, &b))
        return -1;
    int fits = min_batch(&b) >= R;
    cg_batches_free(&b);
    return fits;
}

bool cg_mt_check_ranks(const cg_mt_data *d, int64_t max_tokens, bool resumed)
{
    const int R = cg_dist_size();
    int64_t m = min_batch(&d->batches);
    if (R <= 1 || m >= R)
        return true;
    /* the smallest --max-tokens (found by doubling, then bisection) that
     * gives every batch a pair per rank */
    int64_t lo = max_tokens, hi = max_tokens, advice = -1;
    for (int k = 0; k < 40 && advice < 0; k++) {
        hi = hi > INT64_MAX / 2 ? INT64_MAX : 2 * hi;
        int fits = batches_fit(d, hi, R);
        if (fits < 0)
            return false;
        if (fits)
            advice = hi;
        else
            lo = hi;
    }
    while (advice > 0 && advice - lo > 1) {
        int64_t mid = lo + (advice - lo) / 2;
        int fits = batches_fit(d, mid, R);
        if (fits < 0)
            return false;
        if (fits)
            advice = mid;
        else
            lo = mid;
    }
    if (resumed)
        cg_set_error("a batch of --max-tokens %lld (the checkpoint's) holds %lld pair%s, which "
                     "cannot be split over %d ranks (one pair per rank at least): resume on at "
                     "most %lld rank%s",
                     (long long)max_tokens, (long long)m, m == 1 ? "" : "s", R, (long long)m,
                     m == 1 ? "" : "s");
    else if (advice > 0)
        cg_set_error("a batch of --max-tokens %lld holds %lld pair%s, which cannot be split over "
                     "%d ranks (one pair per rank at least): use --max-tokens %lld or more, or "
                     "at most %lld rank%s",
                     (long long)max_tokens, (long long)m, m == 1 ? "" : "s", R, (long long)advice,
                     (long long)m, m == 1 ? "" : "s");
    else
        cg_set_error("%lld training pairs cannot be split over %d ranks: use at most %lld",
                     (long long)d->n_train, R, (long long)d->n_train);
    return false;
}
