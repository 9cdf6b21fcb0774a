/* The encoder-decoder character model (models.py Seq2Seq): its config (a
 * field table, models/util/config_json.h), encoding, decoding (whole or a
 * step with the key/value cache) and the loss. */
#include "models/seq2seq/seq2seq.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "models/train/model_common.h"
#include "models/util/config_json.h"

/* ---------------------------------------------------------------- config */
static const cg_seq2seq_config DEFAULTS = {.vocab = 96,
                                           .d = 128,
                                           .H = 4,
                                           .enc_layers = 2,
                                           .dec_layers = 2,
                                           .d_ff = 512,
                                           .max_len = 256,
                                           .norm = CG_NORM_LAYERNORM,
                                           .act = CG_ACT_RELU,
                                           .norm_first = false,
                                           .bias = true,
                                           .dropout = 0.0f,
                                           .label_smoothing = 0.1f,
                                           .pos_enc = CG_POS_SINUSOIDAL,
                                           .rope_theta = 10000};

/* The config's JSON fields and their rules, in the order they are written. */
static const cg_config_field FIELDS[] = {
    {"vocab", CG_CF_I64, offsetof(cg_seq2seq_config, vocab), NULL, 4, CG_CF_NO_MAX,
     " (PAD, BOS, EOS are ids 0, 1, 2)", NULL},
    CG_CONFIG_ZOO_WIDTH(cg_seq2seq_config),
    CG_CF_INT(cg_seq2seq_config, enc_layers, 0, 1000000),
    /* at least 1: a decoder without layers has no cross-attention, so it
     * never reads the source (and cached decoding, whose position is its
     * layers' cache length, stayed at position 0) */
    {"dec_layers", CG_CF_I64, offsetof(cg_seq2seq_config, dec_layers), NULL, 1, 1000000,
     " (the decoder's layers are what reads the source)", NULL},
    CG_CONFIG_ZOO_BLOCK(cg_seq2seq_config),
    CG_CF_PROBABILITY(cg_seq2seq_config, label_smoothing),
    CG_CF_PROBABILITY(cg_seq2seq_config, word_dropout),
    {"loss_chunk", CG_CF_I64, offsetof(cg_seq2seq_config, loss_chunk), NULL, -1, CG_CF_NO_MAX,
     " (-1: chunks on the head product's k blocks, 0: no chunks)", NULL},
    CG_CONFIG_ZOO_FACTS(cg_seq2seq_config, "sinusoidal|rope|learned"),
    /* one embedding for the encoder's input, the decoder's and the head */
    CG_CF_FACT("shared_emb", "true"),
    CG_CF_FACT("pad_id", "0"),
    CG_CF_FACT("bos_id", "1"),
    CG_CF_FACT("eos_id", "2"),
};
static const cg_config_model CONFIG = {"seq2seq", FIELDS, (int)(sizeof FIELDS / sizeof FIELDS[0]),
                                       sizeof(cg_seq2seq_config), &DEFAULTS};

cg_seq2seq_config cg_seq2seq_config_default(void) { return DEFAULTS; }

bool cg_seq2seq_config_check(const cg_seq2seq_config *c) { return cg_config_check(&CONFIG, c); }

bool cg_seq2seq_config_from_json(const char *json, cg_seq2seq_config *out)
{
    return cg_config_parse(&CONFIG, json, out);
}

bool cg_seq2seq_config_same_arch(const char *json_a, const char *json_b)
{
    return cg_config_same_arch_json(&CONFIG, json_a, json_b);
}

char *cg_seq2seq_config_to_json(const cg_seq2seq_config *c)
{
    return cg_config_to_json(&CONFIG, c);
}

/* ----------------------------------------------------------------- model */
static void seq2seq_destroy(cg_module *base) { cg_release_held(((cg_seq2seq *)base)->pe); }

/* init false: the drawn weights left at zero (cg_init_skip), for a
 * checkpoint to fill. The layers are built without draws either way:
 * init_params_torch draws every weight they would have drawn. */
static cg_seq2seq *model_new(const cg_seq2seq_config *cfg, uint64_t seed, bool init)
{
    if (!cg_seq2seq_config_check(cfg))
        return NULL;
    cg_seq2seq *m = (cg_seq2seq *)cg_module_alloc(sizeof *m, "Seq2Seq", seq2seq_destroy);
    if (!m)
        return NULL;
    m->cfg = *cfg;
    m->dropout_rng = cg_model_dropout_rng(seed);
    cg_tf_config tf = CG_MODEL_TF_CONFIG(cfg, &m->dropout_rng);
    cg_module *base = CG_MODULE(m);
    bool ok = cfg->pos_enc != CG_POS_SINUSOIDAL || /* rotary: none; learned: the children's */
              (m->pe = cg_hold(cg_sinusoidal_pe(cfg->max_len, cfg->d))) != NULL; /* beyond scopes */
    ok = ok && (m->emb = cg_module_add_child(base, "emb",
                                             cg_embed_new(cfg->vocab, cfg->d, cg_init_skip())));
    if (ok && cfg->pos_enc == CG_POS_LEARNED) /* a table a side, as fairseq's */
        ok = (m->enc_pos_emb = cg_module_add_child(
                  base, "enc_pos_emb", cg_embed_new(cfg->max_len, cfg->d, cg_init_skip()))) &&
             (m->dec_pos_emb = cg_module_add_child(
                  base, "dec_pos_emb", cg_embed_new(cfg->max_len, cfg->d, cg_init_skip())));
    ok = ok && (m->encoder = cg_module_add_child(
                    base, "encoder", cg_enc_stack_new((int)cfg->enc_layers, &tf, cg_init_skip())));
    ok = ok && (m->decoder = cg_module_add_child(
                    base, "decoder", cg_dec_stack_new((int)cfg->dec_layers, &tf, cg_init_skip())));
    ok = ok && (!init || cg_module_init_params_torch(base, seed, CG_INIT_STD));
    if (!ok) {
        cg_module_free(base);
        return NULL;
    }
    return m;
}

cg_seq2seq *cg_seq2seq_new(const cg_seq2seq_config *cfg, uint64_t seed)
{
    return model_new(cfg, seed, true);
}

cg_seq2seq *cg_seq2seq_new_skip_init(const cg_seq2seq_config *cfg, uint64_t seed)
{
    return model_new(cfg, seed, false);
}

void cg_seq2seq_free(cg_seq2seq *m) { cg_module_free(CG_MODULE(m)); }

void cg_seq2seq_set_recompute(cg_seq2seq *m, bool on)
{
    if (m) {
        cg_enc_stack_set_recompute(m->encoder, on);
        cg_dec_stack_set_recompute(m->decoder, on);
    }
}

/* Check a [B,L] batch of ids: sizes, length, vocabulary. */
static bool check_ids(const cg_seq2seq *m, const char *op, const char *what, const int64_t *ids,
                      int64_t B, int64_t L)
{
    return cg_model_check_ids("seq2seq", op, what, ids, B, L, m->cfg.max_len, m->cfg.vocab);
}

/* Word dropout of e [B,L,d]: one dropout draw per token, broadcast over its
 * d features (a [B,L,1] mask of 0 and 1/(1-p)). */
static cg_tensor *drop_words(cg_seq2seq *m, cg_tensor *e, int64_t B, int64_t L)
{
    float p = m->cfg.word_dropout;
    if (!m->base.training || p == 0.0f)
        return e;
    return cg_mul(e, cg_dropout(cg_ones(CG_SHAPE(B, L, 1)), p, &m->dropout_rng, true));
}

cg_tensor *cg_seq2seq_positions(const cg_seq2seq *m, bool target)
{
    if (!m)
        return NULL;
    const cg_embed *learned = target ? m->dec_pos_emb : m->enc_pos_emb;
    return m->pe ? m->pe : learned ? learned->weight : NULL;
}

/* drop(wdrop(emb[ids]) * sqrt(d) + pe[pos:pos+L]) -> [B,L,d], pe the
 * source's positions or (target) the target's */
static cg_tensor *embed_at(cg_seq2seq *m, const int64_t *ids, int64_t B, int64_t L, int64_t pos,
                           bool target)
{
    cg_scope *sc = cg_scope_begin(); /* the intermediates die at its end */
    if (!sc)
        return NULL;
    cg_tensor *e = drop_words(m, cg_embed_forward(m->emb, cg_from_i64(CG_SHAPE(B, L), ids)), B, L);
    cg_tensor *h = cg_keep(cg_model_embed_scaled(
        e, cg_seq2seq_positions(m, target), pos, L, cg_model_emb_scale(m->cfg.emb_scale, m->cfg.d),
        m->cfg.dropout, &m->dropout_rng, m->base.training));
    cg_scope_end(sc);
    return h;
}

static cg_tensor *embed(cg_seq2seq *m, const int64_t *ids, int64_t B, int64_t L, bool target)
{
    return embed_at(m, ids, B, L, 0, target);
}

/* The tied head: h [B,T,d] -> logits [B,T,V] (h is released). */
static cg_tensor *head(cg_seq2seq *m, cg_tensor *h, int64_t B, int64_t T)
{
    cg_scope *sc = cg_scope_begin(); /* the intermediates die at its end */
    if (!sc) {
        cg_release(h);
        return NULL;
    }
    cg_tensor *h2 = cg_reshape(h, 2, (const int64_t[]){B * T, m->cfg.d});
    /* without a graph (decoding) as a linear map: in bf16 it reads the
     * weight's packed bf16 copy; the same product in fp32 */
    cg_tensor *l2 = cg_grad_enabled() ? cg_matmul(h2, cg_transpose(m->emb->weight, 0, 1))
                                      : cg_linear_fn(h2, m->emb->weight, NULL);
    cg_tensor *logits = cg_keep(cg_reshape(l2, 3, (const int64_t[]){B, T, m->cfg.vocab}));
    cg_scope_end(sc);
    cg_release(h);
    return logits;
}

/* ids == PAD: the key-padding mask, bool [B, T] (a new reference). */
static cg_tensor *pad_mask(const int64_t *ids, int64_t B, int64_t T)
{
    cg_tensor *t = cg_from_i64(CG_SHAPE(B, T), ids);
    cg_tensor *pad = t ? cg_eq_scalar(t, CG_PAD) : NULL;
    cg_release(t);
    return pad;
}

bool cg_seq2seq_encode(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                       cg_seq2seq_memory *out)
{
    if (!m || !out) {
        cg_set_error("seq2seq encode: NULL %s", m ? "output" : "model");
        return false;
    }
    memset(out, 0, sizeof *out);
    if (!check_ids(m, "encode", "source", src, B, S))
        return false;
    cg_tensor *pad = pad_mask(src, B, S);
    if (!pad)
        return false;
    const bool *pp = cg_data_bool(pad);
    for (int64_t b = 0; b < B; b++) {
        bool any = false;
        for (int64_t s = 0; s < S; s++)
            any |= !pp[b * S + s];
        if (!any) {
            cg_set_error("seq2seq encode: source row %lld is all padding (every sequence "
                         "needs a non-PAD token)",
                         (long long)b);
            cg_release(pad);
            return false;
        }
    }
    cg_tensor *x = embed(m, src, B, S, false);
    cg_attn_mask mask = {.key_pad = pad};
    cg_tensor *mem = cg_enc_stack_forward(m->encoder, x, &mask);
    cg_release(x);
    if (!mem) {
        cg_release(pad);
        return false;
    }
    *out = (cg_seq2seq_memory){.memory = mem, .src_pad = pad, .B = B, .S = S};
    return true;
}

void cg_seq2seq_memory_free(cg_seq2seq_memory *mem)
{
    if (!mem)
        return;
    cg_release(mem->memory);
    cg_release(mem->src_pad);
    memset(mem, 0, sizeof *mem);
}

bool cg_seq2seq_memory_select(const cg_seq2seq_memory *mem, const int64_t *rows, int64_t n,
                              cg_seq2seq_memory *out)
{
    if (!mem || !mem->memory || !mem->src_pad || !rows || !out || n < 1) {
        cg_set_error("seq2seq memory select: %s",
                     n < 1 ? "need at least one row" : "NULL or empty argument");
        return false;
    }
    memset(out, 0, sizeof *out);
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= mem->B) {
            cg_set_error("seq2seq memory select: row %lld (entry %lld) is outside [0, %lld)",
                         (long long)rows[i], (long long)i, (long long)mem->B);
            return false;
        }
    cg_tensor *rt = cg_from_i64(1, &n, rows);
    cg_tensor *t = rt ? cg_index_select(mem->memory, 0, rt) : NULL;
    cg_tensor *pad = t ? cg_index_select(mem->src_pad, 0, rt) : NULL;
    cg_release(rt);
    if (!pad) {
        cg_release(t);
        return false;
    }
    *out = (cg_seq2seq_memory){.memory = t, .src_pad = pad, .B = n, .S = mem->S};
    return true;
}

/* The decoder's output h [B, T, d] (new reference) for tgt_in over mem. */
static cg_tensor *decode_hidden(cg_seq2seq *m, const int64_t *tgt_in, int64_t B, int64_t T,
                                const cg_seq2seq_memory *mem)
{
    if (!m || !mem || !mem->memory || !mem->src_pad) {
        cg_set_error("seq2seq decode: NULL %s", m ? "memory" : "model");
        return NULL;
    }
    if (!check_ids(m, "decode", "target", tgt_in, B, T))
        return NULL;
    if (B != mem->B) {
        cg_set_error("seq2seq decode: target batch %lld differs from the memory's %lld",
                     (long long)B, (long long)mem->B);
        return NULL;
    }
    for (int64_t b = 0; b < B; b++)
        if (tgt_in[b * T] == CG_PAD) {
            cg_set_error("seq2seq decode: target row %lld starts with PAD (it would have no "
                         "key to attend to)",
                         (long long)b);
            return NULL;
        }
    cg_tensor *pad = pad_mask(tgt_in, B, T);
    if (!pad)
        return NULL;
    cg_tensor *x = embed(m, tgt_in, B, T, true);
    cg_attn_mask self_mask = {.causal = true, .key_pad = pad};
    cg_attn_mask cross_mask = {.key_pad = mem->src_pad};
    cg_tensor *h = cg_dec_stack_forward(m->decoder, x, mem->memory, &self_mask, &cross_mask);
    cg_release_all(2, x, pad);
    return h;
}

cg_tensor *cg_seq2seq_decode(cg_seq2seq *m, const int64_t *tgt_in, int64_t B, int64_t T,
                             const cg_seq2seq_memory *mem)
{
    cg_tensor *h = decode_hidden(m, tgt_in, B, T, mem);
    return h ? head(m, h, B, T) : NULL; /* tied: [B*T, d] @ emb.weight^T [d, V] */
}

cg_kv_cache *cg_seq2seq_kv_cache_new(const cg_seq2seq *m)
{
    if (!m) {
        cg_set_error("seq2seq kv cache: NULL model");
        return NULL;
    }
    return cg_kv_cache_new(m->decoder->n_layers);
}

cg_tensor *cg_seq2seq_decode_step(cg_seq2seq *m, const int64_t *ids, int64_t B,
                                  const cg_seq2seq_memory *mem, cg_kv_cache *c)
{
    const int64_t pos = cg_kv_cache_len(c); /* the new token's position */
    if (!m || !c || (pos == 0 && (!mem || !mem->memory))) {
        cg_set_error("seq2seq decode step: NULL %s", !m   ? "model"
                                                     : !c ? "cache"
                                                          : "memory on the first step");
        return NULL;
    }
    if (!check_ids(m, "decode step", "target", ids, B, 1))
        return NULL;
    if (pos >= m->cfg.max_len) {
        cg_set_error("seq2seq decode step: position %lld is beyond max_len %lld", (long long)pos,
                     (long long)m->cfg.max_len);
        return NULL;
    }
    if (pos == 0 && mem->B != B) {
        cg_set_error("seq2seq decode step: target batch %lld differs from the memory's %lld",
                     (long long)B, (long long)mem->B);
        return NULL;
    }
    cg_no_grad_begin();
    cg_tensor *x = embed_at(m, ids, B, 1, pos, true);
    cg_tensor *h = cg_dec_stack_forward_cached(m->decoder, x, pos ? NULL : mem->memory,
                                               pos ? NULL : mem->src_pad, c);
    cg_release(x);
    cg_tensor *logits = h ? head(m, h, B, 1) : NULL;
    cg_no_grad_end();
    return logits;
}

cg_tensor *cg_seq2seq_forward(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                              const int64_t *tgt_in, int64_t T)
{
    cg_seq2seq_memory mem;
    if (!cg_seq2seq_encode(m, src, B, S, &mem))
        return NULL;
    cg_tensor *logits = cg_seq2seq_decode(m, tgt_in, B, T, &mem);
    cg_seq2seq_memory_free(&mem);
    return logits;
}

cg_tensor *cg_seq2seq_loss(cg_seq2seq *m, cg_tensor *logits, const int64_t *tgt_out)
{
    return cg_model_logits_loss("seq2seq", m != NULL, m ? m->cfg.vocab : 0, logits, tgt_out, CG_PAD,
                                m ? m->cfg.label_smoothing : 0.0f);
}

cg_tensor *cg_seq2seq_forward_loss(cg_seq2seq *m, const int64_t *src, int64_t B, int64_t S,
                                   const int64_t *tgt_in, int64_t T, const int64_t *tgt_out,
                                   float grad_scale)
{
    if (!m || m->cfg.loss_chunk == 0) {
        cg_tensor *logits = cg_seq2seq_forward(m, src, B, S, tgt_in, T);
        cg_tensor *loss = logits ? cg_seq2seq_loss(m, logits, tgt_out) : NULL;
        cg_release(logits);
        return loss;
    }
    if (!tgt_out) {
        cg_set_error("seq2seq loss: NULL targets");
        return NULL;
    }
    cg_seq2seq_memory mem;
    if (!cg_seq2seq_encode(m, src, B, S, &mem))
        return NULL;
    cg_tensor *h = decode_hidden(m, tgt_in, B, T, &mem);
    cg_seq2seq_memory_free(&mem);
    cg_tensor *t = h ? cg_from_i64(CG_SHAPE(B, T), tgt_out) : NULL; /* h [B, T, d] */
    cg_tensor *loss =
        t ? cg_linear_cross_entropy(h, m->emb->weight, NULL, t, CG_PAD, m->cfg.label_smoothing,
                                    CG_REDUCTION_MEAN, m->cfg.loss_chunk, grad_scale)
          : NULL;
    cg_release_all(2, h, t);
    return loss;
}
