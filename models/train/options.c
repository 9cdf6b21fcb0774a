/* cgrad zoo: the flags of the train commands (see options.h). */
#include "models/train/options.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/ops.h"
#include "models/text/spm.h"
#include "models/train/prog.h"
#include "models/util/config_json.h"

void cg_train_opts_init(cg_train_opts *o)
{
    o->stop_at = -1;
    o->log_every = 0;
    o->precision_arg = "auto";
    o->precision = CG_PRECISION_FP32;
    o->precision_auto = NULL;
    o->precision_was = NULL;
    o->threads = 0;
    o->grad_accum = 1;
    o->ema_update_freq = 1;
    o->best_metric = "loss";
}

void cg_train_recipe_init(cg_train_recipe *r)
{
    r->norm_first = true;
    r->bias = true;
    r->tokenizer = CG_TOK_CHAR;
    r->vocab_size = 4000;
    r->beta1 = 0.9;
    r->beta2 = 0.999;
    r->adam_eps = 1e-8;
    r->clip_norm = 1;
    r->rope_theta = 10000;
    r->optimizer = "";
    r->alpha = 0.99;
    r->rho = 0.9;
    r->lambd = 1e-4;
}

void cg_train_init(cg_train_opts *o, cg_train_recipe *r, int64_t steps, int64_t eval_every)
{
    memset(o, 0, sizeof *o);
    memset(r, 0, sizeof *r);
    cg_train_opts_init(o);
    cg_train_recipe_init(r);
    o->steps = steps;
    o->eval_every = eval_every;
    o->seed = 1;
}

/* names ("a|b|c") as help text: lines of at most 80 columns, each after
 * the 23 columns of a flag's description, a line break after a '|' */
static void wrap_names(const char *names, char *out, size_t cap)
{
    size_t n = 0, col = 23;
    for (const char *p = names; *p && n + 26 < cap;) {
        size_t w = strcspn(p, "|") + (p[strcspn(p, "|")] == '|');
        if (col + w > 80) {
            n += (size_t)snprintf(out + n, cap - n, "\n%23s", "");
            col = 23;
        }
        memcpy(out + n, p, w);
        n += w, col += w, p += w;
    }
    out[n] = '\0';
}

const char *cg_train_arch_help(cg_train_recipe *r)
{
    char norms[64], acts[256], wrapped[320];
    cg_act_names(acts, sizeof acts, "|");
    wrap_names(acts, wrapped, sizeof wrapped);
    snprintf(r->arch_help, sizeof r->arch_help,
             "  --norm %s  --norm-first true|false\n"
             "  --act NAME           the feed-forward's activation, one of\n"
             "                       %s\n"
             "  --bias true|false    biases in every Linear and LayerNorm (default true; false:\n"
             "                       nanoGPT's bias = False, PyTorch's bias=False)\n"
             "  --pos-enc sinusoidal|rope|learned  positions: sinusoidal tables added to\n"
             "                       the embeddings (the default), rotary embeddings of q and\n"
             "                       k in every self-attention (RoFormer, LLaMA), or a learnt\n"
             "                       table added (GPT-2's wpe; the translator: one a side)\n"
             "  --rope-theta N       rope's base (default 10000; LLaMA 3: 500000)\n"
             "  --emb-scale sqrt_d|none  the token embeddings times sqrt(d) (the default, the\n"
             "                       paper's) or as they are (GPT-2's, nanoGPT's)\n",
             cg_norm_names(norms, sizeof norms, "|"), wrapped);
    return r->arch_help;
}

/* --norm and --act, when given, parsed into *norm and *act (names of nn's
 * tables), --pos-enc into r->pos (fresh: --rope-theta needs rope); false +
 * error naming the flag. */
static bool parse_arch(const cg_cli_args *a, cg_train_recipe *r, cg_norm_kind *norm, cg_act *act,
                       bool fresh)
{
    r->pos = CG_POS_SINUSOIDAL;
    r->emb_scale = CG_EMB_SCALE_SQRT_D;
    if (r->emb_scale_arg && strcmp(r->emb_scale_arg, "sqrt_d") != 0) {
        if (strcmp(r->emb_scale_arg, "none") != 0) {
            cg_set_error("--emb-scale: '%s' is not one of sqrt_d, none", r->emb_scale_arg);
            return false;
        }
        r->emb_scale = CG_EMB_SCALE_NONE;
    }
    if (r->pos_enc && strcmp(r->pos_enc, "sinusoidal") != 0) {
        if (strcmp(r->pos_enc, "rope") != 0 && strcmp(r->pos_enc, "learned") != 0) {
            cg_set_error("--pos-enc: '%s' is not one of sinusoidal, rope, learned", r->pos_enc);
            return false;
        }
        r->pos = strcmp(r->pos_enc, "rope") ? CG_POS_LEARNED : CG_POS_ROPE;
    }
    /* a fresh run's (--init-from's and --resume's positions are their
     * checkpoint's, the flag compared with it) */
    if (fresh && r->pos != CG_POS_ROPE && cg_cli_given(a, &r->rope_theta)) {
        cg_set_error("--rope-theta is rope's: give --pos-enc rope");
        return false;
    }
    if (r->norm && !cg_norm_kind_parse(r->norm, norm)) {
        cg_prefix_error("--norm: ");
        return false;
    }
    if (r->act && !cg_act_parse(r->act, act)) {
        cg_prefix_error("--act: ");
        return false;
    }
    return true;
}

/* --precision into o->precision (see cg_train_parse); a given "auto" is
 * marked not given in a (--resume refuses the flags the checkpoint fixes).
 * -1, or the exit code after the error line. */
static int train_precision(cg_cli_args *a, cg_train_opts *o)
{
    o->precision_auto = NULL;
    if (strcmp(o->precision_arg, "auto") != 0) {
        if (!strcmp(o->precision_arg, "fp32") || !strcmp(o->precision_arg, "bf16"))
            return cg_precision_flag(o->precision_arg, &o->precision);
        cg_prog_fail("--precision: '%s' is not one of auto, fp32, bf16", o->precision_arg);
        return CG_EXIT_USAGE;
    }
    for (int i = 0; i < a->n; i++)
        if (a->opts[i].dst == &o->precision_arg)
            a->given[i] = 0;
    /* emulated bf16 is exact but no faster than fp32: never chosen (on
     * --resume, the checkpoint's precision replaces this: state.c) */
    const bool native = cg_bf16_native();
    o->precision = native ? CG_PRECISION_BF16 : CG_PRECISION_FP32;
    o->precision_arg = cg_precision_name(o->precision);
    o->precision_auto = !native                                   ? "no native bf16 on this CPU"
                        : cg_bf16_auto_path() != CG_GEMM_BF16_AMX ? "the CPU has AVX512_BF16"
                        : cg_bf16_amx_emulated() ? "AMX emulated (CG_AMX_EMULATE=1)"
                                                 : "the CPU has AMX";
    return -1;
}

const char *cg_train_precision_note(const cg_train_opts *o, char *buf, size_t cap)
{
    if (o->precision_was) {
        snprintf(buf, cap, " (switched from the checkpoint's %s)", o->precision_was);
        return buf;
    }
    if (!o->precision_auto)
        return "";
    snprintf(buf, cap, " (auto: %s%s)", o->precision_auto,
             o->precision == CG_PRECISION_BF16 ? "; --precision fp32 to opt out" : "");
    return buf;
}

static int optimizer_flags(const cg_cli_args *a, cg_train_recipe *r);

int cg_train_parse(int argc, char **argv, cg_cli_args *a, const char *help, cg_train_opts *o,
                   cg_train_recipe *r)
{
    bool want_help = false;
    if (!cg_cli_parse_args(argc, argv, a, &want_help)) {
        cg_prog_fail("%s", cg_last_error());
        return CG_EXIT_USAGE;
    }
    if (want_help) {
        fputs(help, stdout);
        cg_cli_help(stdout, a->opts, a->n);
        return 0;
    }
    o->args = a;
    int rc = train_precision(a, o);
    if (rc >= 0)
        return rc;
    const double *betas[] = {&r->beta1, &r->beta2};
    for (int i = 0; i < 2; i++)
        if (*betas[i] >= 1) { /* the row's range takes 1; Adam's does not */
            cg_prog_fail("--beta%d %g: Adam's betas are in [0, 1)", i + 1, *betas[i]);
            return CG_EXIT_USAGE;
        }
    if (!o->resume && (rc = optimizer_flags(a, r)) >= 0) /* --resume: the checkpoint's */
        return rc;
    const char *ema_flag = cg_cli_given(a, &o->ema_start)         ? "--ema-start-update"
                           : cg_cli_given(a, &o->ema_update_freq) ? "--ema-update-freq"
                                                                  : NULL;
    if (ema_flag && !(o->ema_decay > 0) && !o->resume) { /* --resume: the checkpoint's */
        cg_prog_fail("%s needs --ema-decay (no average is kept without it)", ema_flag);
        return CG_EXIT_USAGE;
    }
    cg_norm_kind norm;
    cg_act act;
    if (!parse_arch(a, r, &norm, &act, !o->resume && !o->init_from)) { /* before any file is read */
        cg_prog_fail("%s", cg_last_error());
        return CG_EXIT_USAGE;
    }
    rc = o->resume || o->init_from /* the checkpoint's tokenizer */
             ? -1
             : cg_train_tokenizer_flags(r->tokenizer_arg, cg_cli_given(a, &r->vocab_size),
                                        r->vocab_size, &r->tokenizer);
    if (rc >= 0)
        cg_prog_fail_lib(NULL);
    return rc;
}

const cg_train_preset *cg_train_preset_find(const cg_train_preset *p, int n, const char *name)
{
    char choices[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(p[i].name, name) == 0)
            return &p[i];
        snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s", i ? ", " : "",
                 p[i].name);
    }
    cg_set_error("--preset: unknown preset '%s' (choices: %s)", name, choices);
    return NULL;
}

int64_t cg_train_loss_chunk(int64_t vocab)
{
    return vocab >= CG_FUSED_HEAD_ROWS_VOCAB  ? CG_FUSED_HEAD_CHUNK
           : vocab >= CG_FUSED_HEAD_MIN_VOCAB ? CG_LCE_EXACT
                                              : 0;
}

bool cg_train_shape(const cg_cli_args *a, const cg_train_preset *p, cg_train_recipe *r,
                    cg_norm_kind *norm, cg_act *act)
{
    cg_train_preset *s = &r->shape;
    /* the shape fields not given on the command line come from the preset */
    int64_t *const field[] = {&s->d,          &s->H,    &s->layers, &s->enc_layers,
                              &s->dec_layers, &s->d_ff, &s->T,      &s->B};
    const int64_t *const from[] = {&p->d,          &p->H,    &p->layers, &p->enc_layers,
                                   &p->dec_layers, &p->d_ff, &p->T,      &p->B};
    for (size_t i = 0; i < sizeof field / sizeof field[0]; i++)
        if (!cg_cli_given(a, field[i]))
            *field[i] = *from[i];
    s->name = p->name;
    return parse_arch(a, r, norm, act, false);
}

int cg_train_tokenizer_flags(const char *name, bool seen, int64_t vocab_size,
                             cg_tokenizer_kind *kind)
{
    *kind = CG_TOK_CHAR;
    if (name && !cg_tokenizer_kind_parse(name, kind)) {
        cg_prefix_error("--tokenizer: ");
    } else if (seen && *kind != CG_TOK_BPE) {
        cg_set_error("--vocab-size needs --tokenizer bpe (the character vocabulary is the "
                     "characters of the training data)");
    } else if (seen && vocab_size < CG_SPM_MIN_VOCAB) {
        cg_set_error("--vocab-size %lld is too small: BPE needs at least %d ids (4 special ids "
                     "+ 256 byte pieces + 1)",
                     (long long)vocab_size, CG_SPM_MIN_VOCAB);
    } else if (*kind == CG_TOK_BPE && !cg_spm_available()) {
        cg_set_error("--tokenizer bpe: this build has no SentencePiece, so BPE is unavailable "
                     "(apt-get install libsentencepiece-dev g++, then reconfigure)");
        return CG_EXIT_FAIL;
    } else {
        return -1;
    }
    return CG_EXIT_USAGE;
}

/* The CG_CLI_SAVED rows of a as fields of the checkpoint's "options"
 * (key: the name without "--", '-' as '_'), but for the rows given when
 * skip_given (a flag given to --resume is this run's); returns their count. */
static int saved_fields(const cg_cli_args *a, cg_json_field *f, char (*keys)[64], bool skip_given)
{
    int n = 0;
    for (int j = 0; a && j < a->n; j++) {
        const cg_cli_opt *r = &a->opts[j];
        if (!r->name || !(r->flags & CG_CLI_SAVED) || (skip_given && a->given[j]))
            continue;
        snprintf(keys[n], sizeof keys[n], "%s", r->name + 2);
        for (char *c = keys[n]; *c; c++)
            if (*c == '-')
                *c = '_';
        static const cg_json_field_kind kind[] = {
            [CG_CLI_I64] = CG_JF_I64,     [CG_CLI_U64] = CG_JF_U64STR,
            [CG_CLI_F64] = CG_JF_F64,     [CG_CLI_BOOL] = CG_JF_BOOL,
            [CG_CLI_STR] = CG_JF_STR,     [CG_CLI_TEXT] = CG_JF_STR,
            [CG_CLI_SWITCH] = CG_JF_BOOL, [CG_CLI_SWITCH_OFF] = CG_JF_BOOL};
        f[n] = (cg_json_field){keys[n], kind[r->kind], r->dst, r->lo, r->hi, true};
        n++;
    }
    return n;
}

bool cg_train_options_save(const cg_cli_args *a, cJSON *j)
{
    cg_json_field f[CG_CLI_MAX_OPTS];
    char keys[CG_CLI_MAX_OPTS][64];
    return j && cg_json_write_fields(j, f, saved_fields(a, f, keys, false));
}

bool cg_train_options_restore(const cg_cli_args *a, const cJSON *j, const char *what)
{
    cg_json_field f[CG_CLI_MAX_OPTS];
    char keys[CG_CLI_MAX_OPTS][64];
    return j == NULL || cg_json_read_fields(j, what, f, saved_fields(a, f, keys, true));
}

/* --optimizer's type (""; the default: -1), or -2 for an unknown name */
static int optimizer_type(const char *name)
{
    if (!name || !*name)
        return -1;
    for (int t = 0; t < CG_OPTIM_NTYPES; t++)
        if (!strcmp(name, cg_optim_type_name((cg_optim_type)t)))
            return t;
    return -2;
}

cg_optim_config cg_train_optim_config(const cg_train_recipe *rec, double lr)
{
    int t = optimizer_type(rec->optimizer);
    if (t < 0)
        t = rec->weight_decay > 0 || t == -2 ? CG_OPTIM_ADAMW : CG_OPTIM_ADAM;
    cg_optim_config c;
    switch ((cg_optim_type)t) {
    case CG_OPTIM_SGD: c = cg_sgd_config(lr, rec->momentum, rec->nesterov); break;
    case CG_OPTIM_RMSPROP:
        c = cg_rmsprop_config(lr, rec->alpha, cg_rmsprop_default(lr).eps, rec->momentum,
                              rec->centered);
        break;
    case CG_OPTIM_ADAGRAD: c = cg_adagrad_default(lr); break;
    case CG_OPTIM_ADADELTA:
        c = cg_adadelta_config(lr, rec->rho, cg_adadelta_default(lr).eps);
        break;
    case CG_OPTIM_ASGD:
        c = cg_asgd_default(lr);
        c.lambd = rec->lambd;
        break;
    case CG_OPTIM_RPROP: c = cg_rprop_default(lr); break;
    case CG_OPTIM_NADAM:
        c = cg_nadam_config(lr, rec->beta1, rec->beta2, rec->adam_eps,
                            cg_nadam_default(lr).momentum_decay);
        break;
    default: /* adam, adamw, adamax, radam */
        c = cg_adam_config(lr, rec->beta1, rec->beta2, rec->adam_eps);
        c.type = (cg_optim_type)t;
        c.amsgrad = rec->amsgrad;
    }
    return c;
}

/* --optimizer's name, and its flags given for its type only (one line
 * naming the first that is not); rprop's weight decay: none (PyTorch
 * 1.13's Rprop has none: the recipe's is dropped, a given one refused);
 * -1 or CG_EXIT_USAGE */
static int optimizer_flags(const cg_cli_args *a, cg_train_recipe *r)
{
    int t = optimizer_type(r->optimizer);
    if (t == -2) {
        cg_prog_fail("--optimizer: '%.60s' is not one of adamw, adam, sgd, rmsprop, adagrad, "
                     "adadelta, adamax, nadam, radam, asgd, rprop",
                     r->optimizer);
        return CG_EXIT_USAGE;
    }
    if (t == CG_OPTIM_RPROP) {
        if (cg_cli_given(a, &r->weight_decay) && r->weight_decay != 0) {
            cg_prog_fail("--weight-decay %g: rprop takes none (PyTorch 1.13's Rprop has no "
                         "weight decay)",
                         r->weight_decay);
            return CG_EXIT_USAGE;
        }
        r->weight_decay = 0;
    }
    unsigned mask = 1u << (t < 0 ? CG_OPTIM_ADAMW : t);
    const unsigned adams = (1u << CG_OPTIM_ADAM) | (1u << CG_OPTIM_ADAMW);
    const unsigned betas =
        adams | (1u << CG_OPTIM_ADAMAX) | (1u << CG_OPTIM_NADAM) | (1u << CG_OPTIM_RADAM);
    const struct {
        const void *dst;
        const char *flag, *whose;
        unsigned types;
    } rows[] = {
        {&r->beta1, "--beta1", "the adam family's (adam, adamw, adamax, nadam, radam)", betas},
        {&r->beta2, "--beta2", "the adam family's (adam, adamw, adamax, nadam, radam)", betas},
        {&r->adam_eps, "--adam-eps", "the adam family's (adam, adamw, adamax, nadam, radam)",
         betas},
        {&r->amsgrad, "--amsgrad", "adam's and adamw's", adams},
        {&r->momentum, "--momentum", "sgd's and rmsprop's",
         (1u << CG_OPTIM_SGD) | (1u << CG_OPTIM_RMSPROP)},
        {&r->nesterov, "--nesterov", "sgd's", 1u << CG_OPTIM_SGD},
        {&r->alpha, "--alpha", "rmsprop's", 1u << CG_OPTIM_RMSPROP},
        {&r->centered, "--centered", "rmsprop's", 1u << CG_OPTIM_RMSPROP},
        {&r->rho, "--rho", "adadelta's", 1u << CG_OPTIM_ADADELTA},
        {&r->lambd, "--lambd", "asgd's", 1u << CG_OPTIM_ASGD},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (cg_cli_given(a, rows[i].dst) && !(rows[i].types & mask)) {
            cg_prog_fail("%s is %s: not for --optimizer %s%s", rows[i].flag, rows[i].whose,
                         t < 0 ? "adamw" : r->optimizer, t < 0 ? " (the default)" : "");
            return CG_EXIT_USAGE;
        }
    if (r->nesterov && !(r->momentum > 0)) {
        cg_prog_fail("--nesterov needs --momentum > 0 (PyTorch's Nesterov momentum)");
        return CG_EXIT_USAGE;
    }
    return -1;
}

void cg_train_vocab_warn(const cg_tokenizer *tok, int64_t vocab_size)
{
    int64_t got = tok ? cg_tokenizer_vocab_size(tok) : 0;
    if (tok && tok->kind == CG_TOK_BPE && got < vocab_size)
        cg_prog_warn("--vocab-size %lld: this text gives only %lld ids (every merge of its "
                     "training split); using %lld",
                     (long long)vocab_size, (long long)got, (long long)got);
}

int cg_precision_flag(const char *arg, cg_precision *out)
{
    cg_precision p;
    if (!arg || cg_precision_parse(arg, out ? out : &p))
        return -1;
    /* cg_precision_parse's "precision: ..." as the flag: "--precision: ..." */
    bool usage = strstr(cg_last_error(), "is not one of") != NULL;
    cg_prog_fail("--%s", cg_last_error());
    return usage ? CG_EXIT_USAGE : CG_EXIT_FAIL;
}

bool cg_decode_precision(const char *arg, const char *train_json, const char *ckpt_path,
                         cg_precision *out)
{
    bool ok;
    if (arg) {
        ok = cg_precision_parse(arg, out); /* its error names the value, or the CPU */
    } else {
        ok = cg_train_precision(train_json, ckpt_path, out);
    }
    if (ok)
        cg_set_matmul_precision(*out);
    return ok;
}

const char *cg_train_given_name(const cg_cli_args *a, const void *dst)
{
    for (int i = 0; i < a->n; i++)
        if (a->opts[i].dst == dst && a->given[i])
            return a->opts[i].name;
    return "?";
}

/* Append ", " (after the first) and the formatted text to bad. */
static void add_bad(char *bad, size_t cap, int *nbad, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add_bad(char *bad, size_t cap, int *nbad, const char *fmt, ...)
{
    size_t n = strlen(bad);
    snprintf(bad + n, cap - n, "%s", (*nbad)++ ? ", " : "");
    n = strlen(bad);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(bad + n, cap - n, fmt, ap);
    va_end(ap);
}

/* The shape flags that differ from the base's, into bad; a difference no
 * flag given explains is --preset's when it was given. */
static void shape_bad(const cg_cli_args *a, const cg_train_recipe *rec, const char *const *preset,
                      const cg_train_arch *want, const cg_train_arch *have, char *bad, size_t cap,
                      int *nbad)
{
    const cg_train_preset *w = &want->shape, *h = &have->shape, *r = &rec->shape;
    const struct {
        const void *dst;
        int64_t want, have;
    } num[] = {{&r->d, w->d, h->d},
               {&r->H, w->H, h->H},
               {&r->layers, w->layers, h->layers},
               {&r->enc_layers, w->enc_layers, h->enc_layers},
               {&r->dec_layers, w->dec_layers, h->dec_layers},
               {&r->d_ff, w->d_ff, h->d_ff},
               {&r->T, w->T, h->T}};
    bool preset_bad = false;
    for (size_t i = 0; i < sizeof num / sizeof num[0]; i++) {
        if (num[i].want == num[i].have)
            continue;
        if (cg_cli_given(a, num[i].dst))
            add_bad(bad, cap, nbad, "%s %lld", cg_train_given_name(a, num[i].dst),
                    (long long)num[i].want);
        else
            preset_bad = cg_cli_given(a, preset);
    }
    if (preset_bad)
        add_bad(bad, cap, nbad, "--preset %s", *preset);
}

int cg_train_check_base(const cg_cli_args *a, const cg_train_recipe *rec, const char *const *preset,
                        const cg_train_arch *want, const cg_train_arch *have,
                        const cg_tokenizer *tok, const char *path)
{
    char bad[512] = "";
    int nbad = 0;
    shape_bad(a, rec, preset, want, have, bad, sizeof bad, &nbad);
    if (rec->norm && want->norm != have->norm)
        add_bad(bad, sizeof bad, &nbad, "--norm %s", rec->norm);
    if (rec->act && want->act != have->act)
        add_bad(bad, sizeof bad, &nbad, "--act %s", rec->act);
    if (cg_cli_given(a, &rec->norm_first) && want->norm_first != have->norm_first)
        add_bad(bad, sizeof bad, &nbad, "--norm-first %s", want->norm_first ? "true" : "false");
    if (cg_cli_given(a, &rec->bias) && want->bias != have->bias)
        add_bad(bad, sizeof bad, &nbad, "--bias %s", want->bias ? "true" : "false");
    if (cg_cli_given(a, &rec->kv_heads) && want->kv_heads != have->kv_heads)
        add_bad(bad, sizeof bad, &nbad, "--kv-heads %lld", (long long)rec->kv_heads);
    if (rec->emb_scale_arg && want->emb_scale != have->emb_scale)
        add_bad(bad, sizeof bad, &nbad, "--emb-scale %s", rec->emb_scale_arg);
    if (rec->pos_enc && want->pos != have->pos)
        add_bad(bad, sizeof bad, &nbad, "--pos-enc %s", rec->pos_enc);
    if (cg_cli_given(a, &rec->rope_theta) && want->rope_theta != have->rope_theta)
        add_bad(bad, sizeof bad, &nbad, "--rope-theta %lld", (long long)rec->rope_theta);
    cg_tokenizer_kind kind = tok->kind;
    if (rec->tokenizer_arg && !cg_tokenizer_kind_parse(rec->tokenizer_arg, &kind)) {
        cg_prog_fail("--tokenizer: %s", cg_last_error());
        return CG_EXIT_USAGE;
    }
    if (kind != tok->kind && cg_cli_given(a, &rec->tokenizer_arg)) /* not seq2seq's default */
        add_bad(bad, sizeof bad, &nbad, "--tokenizer %s", rec->tokenizer_arg);
    if (cg_cli_given(a, &rec->vocab_size) && rec->vocab_size != cg_tokenizer_vocab_size(tok))
        add_bad(bad, sizeof bad, &nbad, "--vocab-size %lld", (long long)rec->vocab_size);
    if (nbad == 0)
        return -1;
    const cg_train_preset *h = &have->shape;
    char layers[64], len[40];
    const bool s2s = h->enc_layers || h->dec_layers;
    if (s2s)
        snprintf(layers, sizeof layers, "enc_layers=%lld dec_layers=%lld", (long long)h->enc_layers,
                 (long long)h->dec_layers);
    else
        snprintf(layers, sizeof layers, "layers=%lld", (long long)h->layers);
    snprintf(len, sizeof len, "%s=%lld", s2s ? "max_len" : "T", (long long)h->T);
    return cg_prog_fail("'%s' fixes the model's shape and tokenizer (d=%lld H=%lld %s "
                        "d_ff=%lld %s, %s, %lld ids); %s contradict%s it (drop %s)",
                        path, (long long)h->d, (long long)h->H, layers, (long long)h->d_ff, len,
                        cg_tokenizer_kind_name(tok->kind), (long long)cg_tokenizer_vocab_size(tok),
                        bad, nbad > 1 ? "" : "s", nbad > 1 ? "them" : "it");
}

int cg_train_check_lora(const cg_train_opts *o, const cg_ft_lora *l)
{
    const cg_cli_args *a = o->args;
    const void *rows[] = {&l->alpha, &l->dropout, &l->targets};
    for (int i = 0; i < 3 && !o->resume; i++)
        if (cg_cli_given(a, rows[i]) && !cg_cli_given(a, &l->rank)) {
            cg_prog_fail("%s needs --lora-rank", cg_train_given_name(a, rows[i]));
            return CG_EXIT_USAGE;
        }
    if (cg_cli_given(a, &l->rank) && !o->init_from && !o->resume) {
        cg_prog_fail("--lora-rank needs --init-from (adapters fine-tune a trained checkpoint)");
        return CG_EXIT_USAGE;
    }
    if (o->init_no_ema && o->init_from && cg_cli_given(a, &l->rank)) {
        cg_prog_fail("--no-ema with --lora-rank: an adapter checkpoint's base is read as its "
                     "moving average wherever it is loaded (every command that reads it, "
                     "--resume); drop --no-ema, or fine-tune in full");
        return CG_EXIT_USAGE;
    }
    if (o->base && !o->resume) {
        cg_prog_fail("--base names the base of a LoRA checkpoint given to --resume (--init-from "
                     "names the checkpoint a new run starts from)");
        return CG_EXIT_USAGE;
    }
    return -1;
}
