/* The work of charlm's sample and eval commands, private to the charlm
 * program: loading their checkpoint, and sample's generation (sample_args:
 * its flags, which charlm_main.c's table writes). */
#ifndef CG_MODELS_CHARLM_CMDS_H
#define CG_MODELS_CHARLM_CMDS_H

#include "models/charlm/charlm_ckpt.h"
#include "models/charlm/sampling.h"

/* sample's and eval's checkpoint, loaded; standard output (their result) is
 * neither it nor the base it loads. False + error. */
bool load_for_stdout(const char *ckpt, const cg_charlm_load_opts *lo, cg_charlm_ckpt *ck);

/* The text of --prompt-file FILE (nanoGPT's sample.py --start=FILE:...),
 * malloc'd: read once as --data is (any stream, strict UTF-8, no NUL, not
 * empty, within the input limit), newlines as Python's text mode reads
 * them ("\r\n" and a lone "\r" become "\n"). NULL + error naming FILE. */
char *read_prompt_file(const char *path);

/* sample's flags. */
typedef struct {
    const char *ckpt, *prompt, *prompt_file, *attn_png, *base, *precision;
    int64_t length, threads, num_samples;
    uint64_t seed;
    bool no_cache, force, no_ema;
    cg_sample_opts so;
    cg_logit_rules rules; /* --repetition-penalty, --no-repeat-ngram-size */
} sample_args;

/* Print num_samples samples, each the prompt and then each piece as it is
 * generated from ck (one generator drawn on from sample to sample; a line
 * of 15 dashes between samples), the speed line, and the attention
 * picture when asked for (one sample): -1 or the exit code. */
int generate(cg_charlm_ckpt *ck, const sample_args *a, cg_precision prec);

#endif
