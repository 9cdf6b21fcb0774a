/* The work of charlm's sample and eval commands, whose flags and help
 * stay in charlm_main.c: their checkpoint loaded (never standard output),
 * and sample's generation, printed as it comes, with its speed line and the
 * attention heatmaps when asked for. Moved here from charlm_main.c (issue 35). */
#include "models/charlm/charlm_cmds.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/utf8.h"
#include "models/charlm/charlm_train.h" /* PROG */
#include "models/report/plot.h"
#include "models/text/vocab.h"
#include "models/train/program.h"
#include "models/util/files.h"

/* sample's and eval's checkpoint, loaded; standard output (their result) is
 * neither it nor the base it loads. False + error. */
bool load_for_stdout(const char *ckpt, const cg_charlm_load_opts *lo, cg_charlm_ckpt *ck)
{
    if (!cg_out_check_stdout(ckpt, "--ckpt") || !cg_charlm_ckpt_load_opts(ckpt, lo, ck))
        return false;
    if (ck->averaged)
        cg_prog_note_average(ck->file, ckpt);
    if (!ck->base_path || cg_out_check_stdout(ck->base_path, "its base"))
        return true;
    cg_charlm_ckpt_free(ck);
    return false;
}

char *read_prompt_file(const char *path)
{
    int64_t n;
    uint32_t *cps = cg_read_text_file(path, &n); /* names path in its errors */
    char *text = cps ? malloc((size_t)n * 4 + 1) : NULL;
    if (cps && !text)
        cg_set_error("out of memory for the prompt of '%s'", path);
    size_t len = 0;
    for (int64_t i = 0; text && i < n; i++)
        len += (size_t)cg_utf8_put(cps[i], text + len);
    if (text)
        text[len] = '\0';
    free(cps);
    return text;
}

/* Attention heatmaps (layer x head) of the last w of ids[0..n) as the model
 * sees them: a full forward over the last n ids (its window), the last w
 * queries over the last w keys drawn, labelled with the tokenizer's pieces. */
static bool write_attention_png(cg_charlm *m, const cg_tokenizer *tok, const int64_t *ids,
                                int64_t n, int64_t w, const char *path)
{
    cg_mha **mods = malloc((size_t)(m->cfg.layers + 1) * sizeof *mods);
    if (!mods) {
        cg_set_error("out of memory");
        return false;
    }
    for (int64_t l = 0; l < m->cfg.layers; l++)
        mods[l] = m->block[l]->attn;
    cg_module_keep_attention_weights(CG_MODULE(m), true);
    cg_module_train(CG_MODULE(m), false);
    cg_no_grad_begin();
    cg_tensor *logits = cg_charlm_forward(m, ids, 1, n);
    cg_no_grad_end();
    bool ok = logits && cg_plot_attention_ids(path,
                                              "charlm attention (rows: queries, columns: "
                                              "keys)",
                                              (int)m->cfg.layers, mods, tok, ids + n - w, (int)w,
                                              ids + n - w, (int)w);
    cg_release(logits);
    cg_module_keep_attention_weights(CG_MODULE(m), false);
    free(mods);
    return ok;
}

/* Print each sample, the prompt and then each piece as it is generated from
 * ck, the speed line, and the attention picture when asked for: -1 or the
 * exit code.
 * What can be checked before is (the prompt's encoding, --top-k against
 * the vocabulary), so that a refusal prints nothing on stdout. */
int generate(cg_charlm_ckpt *ck, const sample_args *a, cg_precision prec)
{
    int rc = -1;
    int64_t n = 0, *outp = NULL, unknown = 0, length = a->length, V = ck->model->cfg.vocab;
    uint32_t first = 0;
    int64_t *ids =
        ck->vocab ? cg_vocab_encode_text(ck->vocab, a->prompt, "--prompt", &n, &unknown, &first)
                  : cg_tokenizer_encode(ck->tok, a->prompt, &n, NULL);
    if (!ids)
        return cg_prog_fail_lib(NULL);
    if (a->so.top_k > V) {
        free(ids);
        return cg_prog_fail("--top-k %lld is more than the %lld tokens of the vocabulary of '%s'",
                            (long long)a->so.top_k, (long long)V, a->ckpt);
    }
    if (ck->vocab)
        cg_vocab_warn_unknown(ck->vocab, PROG, "the prompt", unknown, first);
    cg_rng rng = cg_rng_new(a->seed);
    double t_gen = cg_now(), c_gen = cg_cpu_now();
    for (int64_t s = 0; rc < 0 && s < a->num_samples; s++) {
        if (s > 0)
            fputs("---------------\n", stdout);
        fputs(a->prompt, stdout); /* the prompt as given */
        fflush(stdout);
        free(outp);
        if (!(outp = cg_charlm_generate_text(ck->model, ck->tok, ids, n, length, &a->so, &a->rules,
                                             &rng, !a->no_cache, stdout)))
            rc = cg_prog_fail_lib(NULL);
        else
            fputc('\n', stdout); /* end the sample's line (before the speed line on stderr) */
    }
    t_gen = cg_now() - t_gen;
    c_gen = cg_cpu_now() - c_gen;
    const char *unit = ck->vocab ? "characters" : "tokens";
    if (rc < 0) {
        fflush(stdout);
        char samples[64] = "";
        if (a->num_samples > 1)
            snprintf(samples, sizeof samples, "%lld samples of ", (long long)a->num_samples);
        double all = (double)length * (double)a->num_samples;
        /* CPU time too: on a shared machine it moves less than the wall time */
        fprintf(stderr, PROG ": %s%lld %s in %.2f s (%.1f %s/s, %.2f CPU s, %s, %s)\n", samples,
                (long long)length, unit, t_gen, t_gen > 0 ? all / t_gen : 0.0, unit, c_gen,
                a->no_cache ? "full recompute" : "key/value cache", cg_precision_name(prec));
    }
    if (rc < 0 && a->attn_png) {
        int64_t total = n + length,
                ctx = total < ck->model->cfg.max_len ? total : ck->model->cfg.max_len;
        int64_t w = ctx < 32 ? ctx : 32;
        if (!write_attention_png(ck->model, ck->tok, outp + total - ctx, ctx, w, a->attn_png))
            rc = cg_prog_fail("--attention: %s", cg_last_error());
        else
            fprintf(stderr, PROG ": attention heatmaps written to '%s'\n", a->attn_png);
    }
    fflush(stdout);
    free(ids);
    free(outp);
    return rc;
}
