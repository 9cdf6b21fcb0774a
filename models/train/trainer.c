/* cgrad zoo: the one trainer and the programs' shared conventions (see
 * trainer.h). */
#include "models/train/trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/ops.h"
#include "core/error.h"
#include "models/train/checkpoint.h"
#include "models/util/config_json.h"
#include "models/train/dist.h"

/* ============================================================ programs */
static const char *g_prog = "cgrad";

void cg_prog_set_name(const char *prog) { g_prog = prog; }
const char *cg_prog_name(void) { return g_prog; }

static void vprint_line(const char *kind, const char *fmt, va_list ap)
{
    cg_progress_end();
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (char *p = msg; *p; p++) /* keep it one line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fprintf(stderr, "%s: %s: %s\n", g_prog, kind, msg);
    fflush(stderr);
}

int cg_prog_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    return CG_EXIT_FAIL;
}

int cg_prog_fail_lib(const char *what)
{
    const char *e = cg_has_error() ? cg_last_error() : "unknown error";
    return what ? cg_prog_fail("%s: %s", what, e) : cg_prog_fail("%s", e);
}

void cg_prog_die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_line("error", fmt, ap);
    va_end(ap);
    fflush(stdout);
    if (cg_dist_size() > 1) /* do not leave the other ranks waiting */
        cg_dist_abort(code, "stopping every rank");
    exit(code);
}

void cg_prog_die_lib(const char *what)
{
    const char *e = cg_has_error() ? cg_last_error() : "unknown error";
    if (what)
        cg_prog_die(CG_EXIT_FAIL, "%s: %s", what, e);
    cg_prog_die(CG_EXIT_FAIL, "%s", e);
}

void cg_prog_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprint_line("warning", fmt, ap);
    va_end(ap);
}

int cg_prog_parse(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help)
{
    bool want_help = false;
    if (!cg_cli_parse(argc, argv, opts, n, &want_help)) {
        cg_prog_fail("%s", cg_last_error());
        return CG_EXIT_USAGE;
    }
    if (want_help) {
        fputs(help, stdout);
        return 0;
    }
    return -1;
}

int cg_prog_parse_pos(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help,
                      int *np)
{
    char **flags = malloc((size_t)(argc + 1) * sizeof *flags);
    char **pos = malloc((size_t)(argc + 1) * sizeof *pos);
    int nf, rc = CG_EXIT_FAIL;
    if (!flags || !pos) {
        cg_prog_fail("out of memory");
    } else {
        cg_cli_split(argc, argv, opts, n, flags, &nf, pos, np);
        rc = cg_prog_parse(nf, flags, opts, n, help);
        memcpy(argv, pos, (size_t)*np * sizeof *argv);
    }
    free(flags);
    free(pos);
    return rc;
}

const cg_train_preset *cg_train_preset_find(const cg_train_preset *p, int n, const char *name)
{
    char choices[256] = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(p[i].name, name) == 0)
            return &p[i];
        snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s",
                 i ? ", " : "", p[i].name);
    }
    cg_set_error("--preset: unknown preset '%s' (choices: %s)", name, choices);
    return NULL;
}

bool cg_train_shape(const cg_train_opts *o, const cg_train_preset *p, cg_train_preset *out,
                    cg_norm_kind *norm, cg_act *act)
{
    *out = *p;
    out->d = o->d_seen ? o->d : p->d;
    out->H = o->H_seen ? o->H : p->H;
    out->layers = o->layers_seen ? o->layers : p->layers;
    out->enc_layers = o->enc_layers_seen ? o->enc_layers : p->enc_layers;
    out->dec_layers = o->dec_layers_seen ? o->dec_layers : p->dec_layers;
    out->d_ff = o->d_ff_seen ? o->d_ff : p->d_ff;
    if (o->norm && !cg_norm_kind_parse(o->norm, norm)) {
        cg_prefix_error("--norm: ");
        return false;
    }
    if (o->act && !cg_act_parse(o->act, act)) {
        cg_prefix_error("--act: ");
        return false;
    }
    return true;
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
                     "+ 256 byte pieces + 1)", (long long)vocab_size, CG_SPM_MIN_VOCAB);
    } else if (*kind == CG_TOK_BPE && !cg_spm_available()) {
        cg_set_error("--tokenizer bpe: this build has no SentencePiece, so BPE is unavailable "
                     "(apt-get install libsentencepiece-dev g++, then reconfigure)");
        return CG_EXIT_FAIL;
    } else {
        return -1;
    }
    return CG_EXIT_USAGE;
}

int cg_train_parse(int argc, char **argv, const cg_cli_opt *opts, int n, const char *help)
{
    int rc = cg_prog_parse(argc, argv, opts, n, "");
    if (rc == 0)
        printf("%s%s", help, CG_TRAIN_HELP_COMMON);
    return rc;
}

int cg_prog_main(int argc, char **argv, const char *prog, const char *help,
                 const cg_prog_command *cmds, int ncmds)
{
    cg_prog_set_name(prog);
    cg_cli_start(); /* fds 0-2 taken, OMP_NUM_THREADS capped: before anything else */
    if (!cg_dist_init(&argc, &argv) || !cg_dist_quiet_nonroot())
        return cg_prog_fail_lib("MPI");
    char names[256] = "";
    for (int i = 0; i < ncmds; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                 i == 0 ? "" : i + 1 == ncmds ? " or " : ", ", cmds[i].name);
    int rc;
    if (argc < 2) {
        cg_prog_fail("missing command (%s; try --help)", names);
        rc = CG_EXIT_USAGE;
    } else if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(help, stdout);
        rc = 0;
    } else {
        rc = -1;
        for (int i = 0; i < ncmds && rc < 0; i++)
            if (!strcmp(argv[1], cmds[i].name))
                rc = cmds[i].run(argc - 2, argv + 2);
        if (rc < 0) {
            cg_prog_fail("unknown command '%s' (%s; try --help)", argv[1], names);
            rc = CG_EXIT_USAGE;
        }
    }
    if (rc == 0 && !cg_cli_stdout_ok()) /* the result is lost: a failure */
        rc = cg_prog_fail_lib(NULL);
    fflush(stdout);
    if (rc != 0 && cg_dist_size() > 1) /* do not leave the other ranks waiting */
        cg_dist_abort(rc, "stopping every rank");
    cg_dist_finalize();
    return rc;
}

/* ============================================================ JSON lines */
static void jl_put(cg_jline *j, const char *s, size_t n)
{
    if (j->oom)
        return;
    if (j->len + n + 3 > j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 256;
        while (cap < j->len + n + 3)
            cap *= 2;
        char *b = realloc(j->buf, cap);
        if (!b) {
            j->oom = true;
            return;
        }
        j->buf = b;
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = '\0';
}

static void jl_puts(cg_jline *j, const char *s) { jl_put(j, s, strlen(s)); }

/* Strings and numbers are written as the printf'd JSON lines write them
 * (models/util/config_json.h cg_json_quote, cg_json_num: null when not finite). */
static void jl_str_escaped(cg_jline *j, const char *s)
{
    size_t n = 6 * strlen(s) + 3; /* every byte escaped at worst */
    char *b = malloc(n);
    if (!b) {
        j->oom = true;
        return;
    }
    jl_puts(j, cg_json_quote(b, n, s));
    free(b);
}

static void jl_key(cg_jline *j, const char *key)
{
    jl_puts(j, j->len == 0 ? "{" : ", ");
    jl_str_escaped(j, key);
    jl_puts(j, ": ");
}

void cg_jline_num(cg_jline *j, const char *key, double v, int decimals)
{
    jl_key(j, key);
    char fmt[16];
    snprintf(fmt, sizeof fmt, "%%.%df", decimals < 0 ? 0 : decimals > 17 ? 17 : decimals);
    jl_puts(j, CG_JSON_NUM(fmt, v));
}

void cg_jline_int(cg_jline *j, const char *key, int64_t v)
{
    jl_key(j, key);
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    jl_puts(j, b);
}

void cg_jline_str(cg_jline *j, const char *key, const char *v)
{
    jl_key(j, key);
    jl_str_escaped(j, v ? v : "");
}

void cg_jline_bool(cg_jline *j, const char *key, bool v)
{
    jl_key(j, key);
    jl_puts(j, v ? "true" : "false");
}

const char *cg_jline_end(cg_jline *j)
{
    if (j->len == 0)
        jl_puts(j, "{");
    jl_puts(j, "}");
    return j->oom ? NULL : j->buf;
}

void cg_jline_free(cg_jline *j)
{
    free(j->buf);
    memset(j, 0, sizeof *j);
}

/* ============================================================ options */
void cg_train_opts_init(cg_train_opts *o)
{
    o->stop_at = -1;
    o->log_every = 0;
    o->precision = CG_PRECISION_FP32;
    o->threads = 0;
    o->grad_accum = 1;
    o->norm_first = true;
    o->vocab_size = 4000;
}

const char CG_TRAIN_HELP_COMMON[] =
    "shared by charlm and seq2seq train (one meaning, one default):\n"
    "  --d N --H N --d-ff N  width, heads (must divide d), feed-forward width\n"
    "  --norm layernorm|rmsnorm  --act gelu|relu  --norm-first true|false\n"
    "  --dropout P          dropout in [0, 1)\n"
    "  --label-smoothing E  label smoothing of the training loss in [0, 1)\n"
    "  --lr X               peak learning rate\n"
    "  --seed N             initialisation, dropout and batch order (default 1)\n"
    "  --grad-accum N       micro-batches per optimizer step (default 1); the loss is\n"
    "                       that of one batch N times larger\n"
    "  --precision P        matrix products: fp32 (default) or bf16 (bfloat16 operands,\n"
    "                       fp32 accumulation); kept by the checkpoint\n"
    "  --tokenizer KIND     char or bpe (default: the program's, above): SentencePiece\n"
    "                       subwords trained on the training split only; the\n"
    "                       checkpoint keeps the tokenizer\n"
    "  --vocab-size N       ids of the bpe vocabulary, at least 261 (default 4000)\n"
    "  --data FILE          training data (with --resume: the checkpoint's unless given)\n"
    "  --steps N            optimizer steps (with --resume: the checkpoint's unless given)\n"
    "  --eval-every N       evaluate and checkpoint every N steps\n"
    "  --log-every N        metrics-log line (and progress line, when stderr is not a\n"
    "                       terminal) every N steps (default: steps/20, at most 100)\n"
    "  --threads N          threads for kernels (default: all cores)\n"
    "  --out FILE           checkpoint; FILE.loss.png, FILE.metrics.jsonl and\n"
    "                       FILE.cgrad-lock are written beside it\n"
    "  --resume FILE        continue a run from its checkpoint, exactly (--out\n"
    "                       defaults to FILE); model and recipe flags are refused\n"
    "  --force              overwrite an existing --out (refused otherwise)\n"
    "  --stop-at N          save and stop after step N (as if interrupted; 0 saves\n"
    "                       the initial model)\n"
    "  --max-minutes M      end the run after M minutes of wall time (M > 0), then\n"
    "                       evaluate, save and report as at the last step; the\n"
    "                       evaluations and saves on the way count, those at the\n"
    "                       end do not; with --resume the budget starts again\n"
    "  --skip-nonfinite     skip a step whose loss or gradient is NaN/Inf (with a\n"
    "                       warning) instead of stopping\n"
    "  --recompute          keep only each transformer layer's input for backward and\n"
    "                       recompute the rest there (less memory, one more forward\n"
    "                       per layer; the same numbers, bit for bit)\n"
    "Ctrl-C (SIGINT) or SIGTERM saves a checkpoint and exits 0 (during the final\n"
    "evaluation, after the last save, it ends the program at once). The last stdout\n"
    "line is a JSON summary. Exit status: 0 done, 1 failed, 2 bad command line.\n";

int cg_train_cli_opts(cg_train_opts *o, unsigned which, cg_cli_opt *p)
{
    const double big = 1e12;
    int n = 0;
#define OPT(name, kind, dst, lo, hi, seen, fixed) \
    p[n++] = (cg_cli_opt){name, kind, dst, lo, hi, seen}
    OPT("--d", CG_CLI_I64, &o->d, 1, 1 << 16, &o->d_seen, true);
    OPT("--H", CG_CLI_I64, &o->H, 1, 1 << 12, &o->H_seen, true);
    if (which & CG_TRAIN_FLAGS_LAYERS)
        OPT("--layers", CG_CLI_I64, &o->layers, 0, 1 << 10, &o->layers_seen, true);
    if (which & CG_TRAIN_FLAGS_ENC_DEC) {
        OPT("--enc-layers", CG_CLI_I64, &o->enc_layers, 0, 1 << 10, &o->enc_layers_seen, true);
        OPT("--dec-layers", CG_CLI_I64, &o->dec_layers, 0, 1 << 10, &o->dec_layers_seen, true);
    }
    OPT("--d-ff", CG_CLI_I64, &o->d_ff, 1, 1 << 20, &o->d_ff_seen, true);
    OPT("--norm", CG_CLI_STR, &o->norm, 0, 0, &o->norm_seen, true);
    OPT("--act", CG_CLI_STR, &o->act, 0, 0, &o->act_seen, true);
    OPT("--norm-first", CG_CLI_BOOL, &o->norm_first, 0, 0, &o->norm_first_seen, true);
    OPT("--dropout", CG_CLI_F64, &o->dropout, 0, 0.999999, &o->dropout_seen, true);
    OPT("--label-smoothing", CG_CLI_F64, &o->label_smoothing, 0, 0.999999,
        &o->label_smoothing_seen, true);
    OPT("--lr", CG_CLI_F64, &o->lr, 1e-12, 10, &o->lr_seen, true);
    OPT("--seed", CG_CLI_U64, &o->seed, 0, 0, &o->seed_seen, true);
    OPT("--grad-accum", CG_CLI_I64, &o->grad_accum, 1, 1 << 16, NULL, true);
    OPT("--precision", CG_CLI_STR, &o->precision_arg, 0, 0, NULL, true);
    OPT("--tokenizer", CG_CLI_STR, &o->tokenizer_arg, 0, 0, NULL, true);
    OPT("--vocab-size", CG_CLI_I64, &o->vocab_size, 1, 1e9, &o->vocab_size_seen, true);
    OPT("--data", CG_CLI_STR, &o->data, 0, 0, &o->data_seen, false);
    OPT("--steps", CG_CLI_I64, &o->steps, 1, big, &o->steps_seen, false);
    OPT("--eval-every", CG_CLI_I64, &o->eval_every, 1, big, &o->eval_every_seen, false);
    OPT("--log-every", CG_CLI_I64, &o->log_every, 1, big, &o->log_every_seen, false);
    OPT("--threads", CG_CLI_I64, &o->threads, 1, 1024, NULL, false);
    OPT("--out", CG_CLI_STR, &o->out, 0, 0, NULL, false);
    OPT("--resume", CG_CLI_STR, &o->resume, 0, 0, NULL, false);
    OPT("--force", CG_CLI_SWITCH, &o->force, 0, 0, NULL, false);
    OPT("--stop-at", CG_CLI_I64, &o->stop_at, 0, big, NULL, false);
    OPT("--max-minutes", CG_CLI_F64, &o->max_minutes, 1e-6, 1e8, NULL, false);
    OPT("--skip-nonfinite", CG_CLI_SWITCH, &o->skip_nonfinite, 0, 0, NULL, false);
    OPT("--recompute", CG_CLI_SWITCH, &o->recompute, 0, 0, NULL, false);
#undef OPT
    return n;
}

/* The flags fixed by a checkpoint: refused with --resume. */
static const char FIXED_COMMON[] = " --d --H --layers --enc-layers --dec-layers --d-ff --norm "
                                   "--act --norm-first --dropout --label-smoothing --lr --seed "
                                   "--grad-accum --precision --tokenizer --vocab-size ";

static bool is_fixed(const char *name, size_t len, const char *extra)
{
    char key[64];
    if (len + 3 > sizeof key)
        return false;
    snprintf(key, sizeof key, " %.*s ", (int)len, name);
    if (strstr(FIXED_COMMON, key))
        return true;
    char list[512];
    snprintf(list, sizeof list, " %s ", extra ? extra : "");
    return strstr(list, key) != NULL;
}

/* The fixed flags given in argv (parsed already, so well formed), as
 * "--a, --b" into buf; false if none. */
static bool fixed_flags_given(int argc, char **argv, const cg_cli_opt *opts, int n,
                              const char *extra, char *buf, size_t cap)
{
    buf[0] = '\0';
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        for (int j = 0; j < n; j++) {
            if (strlen(opts[j].name) != len || strncmp(opts[j].name, a, len) != 0)
                continue;
            if (is_fixed(a, len, extra) && !strstr(buf, opts[j].name))
                snprintf(buf + strlen(buf), cap - strlen(buf), "%s%s", buf[0] ? ", " : "",
                         opts[j].name);
            if (!eq && opts[j].kind != CG_CLI_SWITCH)
                i++; /* its value */
            break;
        }
    }
    return buf[0] != '\0';
}

/* ============================================================ state */
bool cg_state_put_u64(cJSON *o, const char *key, uint64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    return cJSON_AddStringToObject(o, key, b) != NULL;
}

bool cg_state_put_f64(cJSON *o, const char *key, double v)
{
    char b[40];
    snprintf(b, sizeof b, "%.17g", v);
    return cJSON_AddStringToObject(o, key, b) != NULL;
}

static bool model_fields(const cJSON *ms, const char *path, const char *kind,
                         const cg_json_field *f, int n)
{
    char what[600];
    snprintf(what, sizeof what, "'%.500s': %s training state", path, kind);
    return cg_json_read_fields(ms, what, f, n);
}

bool cg_train_model_fields(const char *train_json, const char *ckpt_path, const char *kind,
                           const cg_json_field *f, int n)
{
    cJSON *st = train_json ? cJSON_Parse(train_json) : NULL;
    if (!st)
        return true;
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(st, "model");
    bool ok = model_fields(ms ? ms : st, ckpt_path, kind, f, n);
    cJSON_Delete(st);
    return ok;
}

bool cg_trainer_model_state(const cg_trainer *t, const char *kind, cJSON *o,
                            const cg_json_field *f, int n)
{
    if (!o)
        return model_fields(t->model_state, t->o->resume, kind, f, n);
    bool ok = true;
    for (int i = 0; ok && i < n; i++) {
        if (f[i].kind == CG_JF_I64)
            ok = cJSON_AddNumberToObject(o, f[i].key, (double)*(int64_t *)f[i].dst) != NULL;
        else if (f[i].kind == CG_JF_F64)
            ok = cg_state_put_f64(o, f[i].key, *(double *)f[i].dst);
        else if (f[i].kind == CG_JF_U64STR)
            ok = cg_state_put_u64(o, f[i].key, *(uint64_t *)f[i].dst);
        else
            ok = cJSON_AddStringToObject(o, f[i].key, *(const char **)f[i].dst) != NULL;
    }
    return ok;
}

cJSON *cg_train_state_parse(const char *json)
{
    cJSON *o = json ? cJSON_Parse(json) : NULL;
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        cg_set_error("no training state (not a training checkpoint)");
        return NULL;
    }
    return o;
}

/* The per-run options a checkpoint keeps ("options"; see cg_train_opts). */
static bool options_save(const cg_train_opts *o, cJSON *j)
{
    return j && cJSON_AddStringToObject(j, "precision", cg_precision_name(o->precision));
}

/* Absent options or fields: a checkpoint written before them (fp32). */
static bool options_restore(cg_train_opts *o, const cJSON *j)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "precision");
    o->precision = CG_PRECISION_FP32;
    return j == NULL ||
           (cJSON_IsObject(j) && (!p || (cJSON_IsString(p) &&
                                         cg_precision_parse(p->valuestring, &o->precision))));
}

bool cg_train_precision(const char *train_json, const char *ckpt_path, cg_precision *out)
{
    cJSON *s = train_json ? cJSON_Parse(train_json) : NULL;
    cg_train_opts o;
    bool ok = options_restore(&o, cJSON_GetObjectItemCaseSensitive(s, "options"));
    cJSON_Delete(s);
    *out = o.precision;
    if (!ok)
        cg_set_error("'%s': bad \"options\" in its training state", ckpt_path);
    return ok;
}

void cg_train_vocab_warn(const cg_tokenizer *tok, int64_t vocab_size)
{
    int64_t got = tok ? cg_tokenizer_vocab_size(tok) : 0;
    if (tok && tok->kind == CG_TOK_BPE && got < vocab_size)
        cg_prog_warn("--vocab-size %lld: this text gives only %lld ids (every merge of its "
                     "training split); using %lld", (long long)vocab_size, (long long)got,
                     (long long)got);
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

static char *state_json(const cg_trainer *t, const cg_trainer_model *m)
{
    const cg_train_opts *o = t->o;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "steps", (double)o->steps);
    cJSON_AddNumberToObject(j, "eval_every", (double)o->eval_every);
    cg_state_put_u64(j, "seed", o->seed);
    cJSON_AddNumberToObject(j, "grad_accum", (double)o->grad_accum);
    cg_json_add_name(j, "data", t->data_set ? t->data.path : "");
    if (t->data_set)
        cJSON_AddItemToObject(j, "data_id", cg_data_id_to_json(&t->data));
    cJSON *dr = cJSON_AddObjectToObject(j, "dropout_rng");
    cg_state_put_u64(dr, "seed", m->dropout_rng->seed);
    cg_state_put_u64(dr, "counter", m->dropout_rng->counter);
    cJSON *r = cJSON_AddArrayToObject(j, "recent");
    for (int i = 0; i < t->n_recent; i++)
        cJSON_AddItemToArray(r, cJSON_CreateNumber(t->recent[i]));
    char *hj = cg_history_to_json(&t->hist);
    cJSON *h = hj ? cJSON_Parse(hj) : NULL;
    free(hj);
    bool ok = h != NULL;
    if (h)
        cJSON_AddItemToObject(j, "history", h);
    ok = ok && options_save(o, cJSON_AddObjectToObject(j, "options"));
    cJSON *ms = cJSON_AddObjectToObject(j, "model");
    ok = ok && ms && (!m->state_save || m->state_save(m->self, ms));
    char *s = ok ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s && !cg_has_error())
        cg_set_error("out of memory");
    return s;
}

/* Restore the shared state of a checkpoint into t and o: every field type-
 * and range-checked (models/util/config_json.h), the first bad one named. */
static bool state_restore(cg_trainer *t, cg_train_opts *o, const char *path)
{
    const cJSON *s = t->state;
    int64_t steps, eval_every, accum;
    uint64_t seed;
    const char *data;
    char what[600];
    snprintf(what, sizeof what, "'%.500s': training state", path);
    const cg_json_field f[] = {
        {"steps", CG_JF_I64, &steps, 1, 1e12, false},
        {"eval_every", CG_JF_I64, &eval_every, 1, 1e12, false},
        {"seed", CG_JF_U64STR, &seed, 0, 0, false},
        {"grad_accum", CG_JF_I64, &accum, 1, 1 << 16, false},
        {"data", CG_JF_STR, &data, 0, 0, false},
    };
    const cg_json_field fr[] = {
        {"seed", CG_JF_U64STR, &t->dropout_rng.seed, 0, 0, false},
        {"counter", CG_JF_U64STR, &t->dropout_rng.counter, 0, 0, false},
    };
    const cJSON *dr = cJSON_GetObjectItemCaseSensitive(s, "dropout_rng");
    const cJSON *hist = cJSON_GetObjectItemCaseSensitive(s, "history");
    t->model_state = cJSON_GetObjectItemCaseSensitive(s, "model");
    cJSON *idj = cJSON_GetObjectItemCaseSensitive(t->state, "data_id");
    if (!cg_json_name_decode(t->state, "data", what) || /* names are bytes */
        (cJSON_IsObject(idj) && !cg_json_name_decode(idj, "path", what)))
        return false;
    if (!cg_json_read_fields(s, what, f, 2 + 3) ||
        !cg_json_read_fields(dr, "training state: \"dropout_rng\"", fr, 2) ||
        !cg_json_f64_array(s, what, "recent", t->recent, CG_TRAIN_RECENT, &t->n_recent))
        return false;
    if (!cJSON_IsObject(t->model_state) ||
        !options_restore(o, cJSON_GetObjectItemCaseSensitive(s, "options"))) {
        cg_set_error("%s: bad or missing \"%s\"", what,
                     cJSON_IsObject(t->model_state) ? "options" : "model");
        return false;
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "data_id");
    if (id && !cg_data_id_from_json(id, what, &t->data_stored))
        return false;
    t->data_stored_set = id != NULL; /* absent: written before identities */
    if (hist && !cg_history_from_cjson(hist, &t->hist)) {
        cg_prefix_error("'%s': ", path);
        return false;
    }
    t->dropout_rng_set = true;
    o->seed = seed;
    o->grad_accum = accum;
    if (!o->steps_seen)
        o->steps = steps;
    if (!o->eval_every_seen)
        o->eval_every = eval_every;
    if (!o->data_seen)
        o->data = data;
    return true;
}

/* ============================================================ output */
/* Everything about the output, before any training (models/train/outfile.h): a
 * file name that fits with its temporary and sibling files, a regular file
 * or absent, a writable directory (created when missing, one level), and
 * the lock on FILE.cgrad-lock. */
static int check_output(cg_trainer *t, const char *out)
{
    if (!cg_out_check(out, true) || !cg_out_lock_take(out, &t->lock))
        return cg_prog_fail_lib(NULL);
    return -1;
}

void cg_trainer_init(cg_trainer *t, cg_train_opts *o)
{
    memset(t, 0, sizeof *t);
    t->o = o;
    t->lock.fd = -1;
    t->last_loss = NAN;
}

bool cg_trainer_restore(cg_trainer *t, const char *train_json, const char *path)
{
    t->state = cg_train_state_parse(train_json);
    if (!t->state) {
        cg_set_error("'%s' holds no training state (it cannot be resumed; use it for inference)",
                     path);
        return false;
    }
    return state_restore(t, t->o, path);
}

int cg_trainer_begin(cg_trainer *t, cg_train_opts *o, const char *kind, const char *default_out,
                     const char *fixed, int argc, char **argv, const cg_cli_opt *opts, int nopts)
{
    cg_trainer_init(t, o);
    int rc = cg_precision_flag(o->precision_arg, &o->precision);
    if (rc >= 0)
        return rc;
    rc = o->resume ? -1
                       : cg_train_tokenizer_flags(o->tokenizer_arg, o->vocab_size_seen,
                                                  o->vocab_size, &o->tokenizer);
    if (rc >= 0) {
        cg_prog_fail_lib(NULL);
        return rc;
    }
    cg_cli_set_threads(cg_prog_name(), o->threads);
    t->out = o->out ? o->out : o->resume ? o->resume : default_out;
    if (o->resume) {
        char given[512];
        if (fixed_flags_given(argc, argv, opts, nopts, fixed, given, sizeof given))
            return cg_prog_fail("--resume continues a run with the model and recipe of its "
                                "checkpoint; drop %s",
                                given);
        t->ckpt = cg_ckpt_open(o->resume, kind);
        if (!t->ckpt)
            return cg_prog_fail_lib(NULL);
        t->start = cg_ckpt_step(t->ckpt);
        if (!cg_trainer_restore(t, cg_st_metadata(t->ckpt, "train"), o->resume))
            return cg_prog_fail_lib(NULL);
        if (t->start >= o->steps)
            return cg_prog_fail("'%s' is already at step %lld of %lld; pass a larger --steps",
                                o->resume, (long long)t->start, (long long)o->steps);
    }
    cg_set_matmul_precision(o->precision); /* before the model is built or evaluated */
    if (cg_dist_is_root()) { /* rank 0 alone writes */
        if (access(t->out, F_OK) == 0 && !o->force &&
            !(o->resume && strcmp(t->out, o->resume) == 0))
            return cg_prog_fail("checkpoint %s exists; continue it with --resume %s, or pass "
                                "--force to overwrite it",
                                t->out, t->out);
        /* no file written is a file read (with --force too) */
        if ((o->data && !cg_out_check_reads(t->out, o->data, "--data", true)) ||
            (o->resume && !cg_out_check_reads(t->out, o->resume, "--resume", false)))
            return cg_prog_fail_lib(NULL);
        rc = check_output(t, t->out);
        if (rc >= 0)
            return rc;
    }
    t->step = t->start;
    return -1;
}

bool cg_trainer_set_data(cg_trainer *t, const cg_data_id *id)
{
    if (t->data_stored_set && !cg_data_id_check(&t->data_stored, id))
        return false;
    t->data = *id;
    t->data_set = true;
    return true;
}

bool cg_train_data_check(const char *train_json, const char *ckpt_path, const cg_data_id *id)
{
    cJSON *s = train_json ? cJSON_Parse(train_json) : NULL;
    cJSON *j = cJSON_GetObjectItemCaseSensitive(s, "data_id");
    cg_data_id stored;
    char what[600];
    snprintf(what, sizeof what, "'%.500s': training state", ckpt_path);
    bool ok = !j || (cJSON_IsObject(j) && cg_json_name_decode(j, "path", what) &&
                     cg_data_id_from_json(j, what, &stored) && cg_data_id_check(&stored, id));
    cJSON_Delete(s);
    return ok;
}

char *cg_train_data_path(const char *train_json, const char *given, const char *default_data)
{
    cJSON *s = !given && train_json ? cJSON_Parse(train_json) : NULL;
    if (s && !cg_json_name_decode(s, "data", "training state")) {
        cJSON_Delete(s);
        return NULL;
    }
    const cJSON *dj = cJSON_GetObjectItemCaseSensitive(s, "data");
    char *p = strdup(given ? given : cJSON_IsString(dj) ? dj->valuestring : default_data);
    cJSON_Delete(s);
    if (!p)
        cg_set_error("out of memory");
    return p;
}

void cg_eval_add(cg_eval_result *e, const char *key, const char *name, double value,
                 int decimals)
{
    int n = (int)(sizeof e->extra / sizeof e->extra[0]);
    if (e->n_extra >= n)
        return;
    e->extra[e->n_extra].key = key;
    e->extra[e->n_extra].name = name;
    e->extra[e->n_extra].value = value;
    e->extra[e->n_extra++].decimals = decimals;
}

double cg_trainer_recent_loss(const cg_trainer *t)
{
    double s = 0;
    for (int i = 0; i < t->n_recent; i++)
        s += t->recent[i];
    return t->n_recent ? s / t->n_recent : NAN;
}

void cg_trainer_end(cg_trainer *t)
{
    cg_st_close(t->ckpt);
    cJSON_Delete(t->state);
    cg_history_free(&t->hist);
    if (t->metrics && fclose(t->metrics) != 0) /* its last lines may be lost */
        cg_prog_warn("cannot write the metrics log: %s", strerror(errno));
    cg_out_lock_release(&t->lock);
    cg_trainer_init(t, NULL);
}

/* ============================================================ the run */
/* ------------------------------------------------------------ the step */
bool cg_stepper_init(cg_stepper *s, const cg_trainer_model *m, int grad_accum)
{
    memset(s, 0, sizeof *s);
    s->m = m;
    s->grad_accum = grad_accum;
    if (!cg_module_params(m->module, &s->pl))
        return false;
    s->op = calloc((size_t)s->pl.n + 1, sizeof *s->op);
    s->w = calloc((size_t)grad_accum, sizeof *s->w);
    s->tok = calloc((size_t)grad_accum, sizeof *s->tok);
    if (!s->op || !s->w || !s->tok) {
        cg_set_error("out of memory");
        return false;
    }
    for (int i = 0; i < s->pl.n; i++) {
        const cg_tensor *p = s->pl.items[i].tensor;
        s->op[i] = (cg_optim_param){s->pl.items[i].name, s->pl.items[i].tensor,
                                    p->ndim >= 2 ? m->weight_decay_2d : m->weight_decay_1d};
    }
    s->opt = cg_optim_new(&m->optim, s->pl.n, s->op);
    if (!s->opt)
        return false;
    const char *ov = getenv("CG_DIST_OVERLAP");
    if (cg_dist_size() > 1 && !(ov && !strcmp(ov, "0"))) {
        const char *mb = getenv("CG_DIST_BUCKET_MB");
        double bucket_mb = mb ? atof(mb) : 4.0;
        cg_tensor **ps = malloc(sizeof *ps * (size_t)(s->pl.n ? s->pl.n : 1));
        if (!ps) {
            cg_set_error("out of memory");
            return false;
        }
        for (int i = 0; i < s->pl.n; i++)
            ps[i] = s->pl.items[i].tensor;
        s->reducer = cg_dist_reducer_new(s->pl.n, ps, bucket_mb > 0 ? bucket_mb : 4.0);
        free(ps);
        if (!s->reducer)
            return false;
    }
    return true;
}

void cg_stepper_free(cg_stepper *s)
{
    cg_dist_reducer_free(s->reducer);
    cg_optim_free(s->opt);
    free(s->op);
    free(s->w);
    free(s->tok);
    cg_param_list_free(&s->pl);
    memset(s, 0, sizeof *s);
}

cg_step_result cg_stepper_step(cg_stepper *st, int64_t s, double *loss_out, double *tokens_out)
{
    const cg_trainer_model *m = st->m;
    const int N = st->grad_accum;
    double W = 0, tok = 0;
    *loss_out = NAN;
    *tokens_out = 0;
    for (int k = 0; k < N; k++) {
        if (!m->batch(m->self, k, &st->w[k], &st->tok[k]))
            return CG_STEP_FAILED;
        W += st->w[k];
        tok += st->tok[k];
    }
    cg_optim_set_lr(st->opt, m->lr(m->self, s));
    cg_optim_zero_grad(st->opt);
    double lsum = 0, lv = NAN;
    bool back_ok = true;
    for (int k = 0; k < N; k++) {
        /* every tensor of the micro-batch's graph dies at the scope's end */
        cg_scope *sc = cg_scope_begin();
        cg_tensor *loss = sc ? m->loss(m->self, k) : NULL;
        if (!loss) {
            cg_scope_end(sc);
            return CG_STEP_FAILED;
        }
        double l = cg_item(loss);
        lsum += l * st->w[k];
        if (k == N - 1 && st->reducer && !cg_dist_reducer_prepare(st->reducer, W)) {
            cg_scope_end(sc);
            return CG_STEP_FAILED;
        }
        if (N == 1) {
            lv = l;
            back_ok = cg_backward(loss, NULL, false);
        } else { /* the mean over all N micro-batches' units */
            cg_tensor *scaled = cg_muls(loss, (float)(st->w[k] / W));
            back_ok = back_ok && scaled && cg_backward(scaled, NULL, false);
        }
        cg_scope_end(sc);
    }
    if (N > 1)
        lv = lsum / W;
    *loss_out = lv;
    if (!isfinite(lv) && !st->skip_nonfinite) {
        char culprit[400] = "";
        if (back_ok && !cg_optim_grads_finite(st->opt, NULL))
            snprintf(culprit, sizeof culprit, " (%s)", cg_last_error());
        cg_set_error("loss is %s at step %lld%s", isnan(lv) ? "nan" : "inf", (long long)s,
                     culprit);
        return CG_STEP_NONFINITE;
    }
    if (!back_ok) {
        cg_prefix_error("backward: ");
        return CG_STEP_FAILED;
    }
    /* loss, weight and tokens of every rank: from here on every rank takes
     * the same decisions */
    double red[3] = {lv * W, W, tok};
    if (!cg_dist_allreduce_sum(red, 3) ||
        !(st->reducer ? cg_dist_reducer_finish(st->reducer) : cg_dist_average_grads(m->module, W)))
        return CG_STEP_FAILED;
    lv = red[0] / red[1];
    *loss_out = lv;
    *tokens_out = red[2];
    double norm = m->clip_norm > 0 ? cg_optim_clip_grad_norm(st->opt, m->clip_norm) : 0.0;
    if (norm < 0)
        return CG_STEP_FAILED;
    if (!isfinite(lv) || !isfinite(norm)) {
        if (cg_optim_grads_finite(st->opt, NULL))
            cg_set_error("gradient norm is not finite");
        if (!st->skip_nonfinite) {
            cg_prefix_error("step %lld: ", (long long)s);
            return CG_STEP_NONFINITE;
        }
        cg_prefix_error("loss %g, ", lv);
        cg_optim_zero_grad(st->opt);
        return CG_STEP_SKIPPED;
    }
    if (!cg_optim_step(st->opt)) {
        cg_prefix_error("optimizer: ");
        return CG_STEP_FAILED;
    }
    return CG_STEP_OK;
}

/* ------------------------------------------------------------ the run */
typedef struct {
    cg_trainer *t;
    const cg_trainer_model *m;
    cg_stepper st;
    cg_optim *opt; /* st.opt */
    char *png;
} run_ctx;

static bool save(run_ctx *c, int64_t step)
{
    if (!cg_dist_is_root())
        return true;
    const cg_trainer_model *m = c->m;
    char *tj = state_json(c->t, m);
    char *cfg = tj ? m->config_json(m->self) : NULL;
    bool ok = cfg && cg_ckpt_save(c->t->out, m->name, cfg, m->tokenizer(m->self), m->module,
                                  c->opt, step, tj);
    free(tj);
    free(cfg);
    if (ok && c->png && (c->t->hist.n > 0 || c->t->hist.dn > 0) &&
        !cg_history_plot(&c->t->hist, c->png, m->plot_title))
        cg_prog_warn("could not write the loss curve: %s", cg_last_error());
    return ok;
}

static void metrics_line(run_ctx *c, cg_jline *j)
{
    const char *s = cg_jline_end(j);
    if (c->t->metrics && s &&
        (fputs(s, c->t->metrics) < 0 || fputc('\n', c->t->metrics) < 0 ||
         fflush(c->t->metrics) != 0)) {
        cg_prog_warn("cannot write the metrics log (%s); training goes on without it",
                     strerror(errno));
        fclose(c->t->metrics);
        c->t->metrics = NULL;
    }
    cg_jline_free(j);
}

static int evaluate(run_ctx *c, int64_t step)
{
    cg_trainer *t = c->t;
    cg_eval_result e = {.train = NAN, .val = NAN};
    if (!c->m->evaluate(c->m->self, step, &e))
        return cg_prog_fail("evaluation at step %lld: %s", (long long)step, cg_last_error());
    if (isnan(e.train))
        e.train = cg_trainer_recent_loss(t);
    char extra[256] = "";
    for (int i = 0; i < e.n_extra; i++)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", %s %.*f",
                 e.extra[i].name, e.extra[i].decimals, e.extra[i].value);
    cg_progress_end();
    fprintf(stderr, "%s: step %lld: train loss %.4f, val loss %.4f%s\n", cg_prog_name(),
            (long long)step, e.train, e.val, extra);
    if (!cg_history_push(&t->hist, step, e.train, e.val))
        return cg_prog_fail_lib(NULL);
    cg_jline j = {0};
    cg_jline_int(&j, "step", step);
    cg_jline_num(&j, "train_loss", e.train, 6);
    cg_jline_num(&j, "val_loss", e.val, 6);
    for (int i = 0; i < e.n_extra; i++)
        cg_jline_num(&j, e.extra[i].key, e.extra[i].value, e.extra[i].decimals + 2);
    metrics_line(c, &j);
    return -1;
}

/* One optimizer step from step s to s + 1. Returns -1 (done or skipped)
 * or an exit code. */
static int train_step(run_ctx *c, bool *skipped, double *tokens)
{
    cg_trainer *t = c->t;
    const int64_t s = t->step + 1; /* the step being taken, 1-based */
    double lv;
    *skipped = false;
    cg_step_result r = cg_stepper_step(&c->st, s, &lv, tokens);
    if (r == CG_STEP_FAILED)
        return cg_prog_fail("step %lld: %s", (long long)s, cg_last_error());
    if (r == CG_STEP_NONFINITE) {
        if (access(t->out, F_OK) == 0)
            return cg_prog_fail("%s; stopping (the checkpoint %s is left as it was)",
                                cg_last_error(), t->out);
        return cg_prog_fail("%s; stopping (no checkpoint was written)", cg_last_error());
    }
    if (r == CG_STEP_SKIPPED) {
        cg_prog_warn("skipping step %lld: %s", (long long)s, cg_last_error());
        t->skipped++;
        *skipped = true;
        return -1;
    }
    if (!cg_history_train_step(&t->hist, s, lv))
        return cg_prog_fail_lib(NULL);
    t->last_loss = lv;
    if (t->n_recent == CG_TRAIN_RECENT) {
        memmove(t->recent, t->recent + 1, (CG_TRAIN_RECENT - 1) * sizeof *t->recent);
        t->n_recent--;
    }
    t->recent[t->n_recent++] = lv;
    return -1;
}

/* The leaves of o as flat["a.b.c"] = the leaf's JSON text. */
static bool flatten(const cJSON *o, const char *prefix, cJSON *flat)
{
    bool ok = true;
    for (const cJSON *c = o ? o->child : NULL; ok && c; c = c->next) {
        char key[512];
        snprintf(key, sizeof key, "%s%s", prefix, c->string ? c->string : "?");
        if (cJSON_IsObject(c)) {
            char sub[520];
            snprintf(sub, sizeof sub, "%s.", key);
            ok = flatten(c, sub, flat);
        } else {
            char *v = cJSON_PrintUnformatted(c);
            ok = v && cJSON_AddStringToObject(flat, key, v);
            free(v);
        }
    }
    return ok;
}

/* Every rank was started with the same run: the same data (size and
 * checksum; its path may differ between machines), model, recipe and
 * per-run flags as rank 0. A difference is an error naming the flag, on
 * every rank, before anything is trained. */
static bool check_ranks_agree(const cg_trainer *t, const cg_trainer_model *m)
{
    if (cg_dist_size() <= 1)
        return true;
    char *sj = state_json(t, m), *cj = sj ? m->config_json(m->self) : NULL;
    cJSON *s = cj ? cJSON_Parse(sj) : NULL, *cfg = s ? cJSON_Parse(cj) : NULL;
    cJSON *flat = cfg ? cJSON_CreateObject() : NULL, *run = flat ? cJSON_CreateObject() : NULL;
    free(sj);
    free(cj);
    bool ok = run != NULL;
    if (ok) {
        cJSON_DeleteItemFromObjectCaseSensitive(s, "data"); /* paths: per machine */
        cJSON_DeleteItemFromObjectCaseSensitive(s, "data_hex");
        cJSON *id = cJSON_GetObjectItemCaseSensitive(s, "data_id");
        cJSON_DeleteItemFromObjectCaseSensitive(id, "path");
        cJSON_DeleteItemFromObjectCaseSensitive(id, "path_hex");
        const cg_train_opts *o = t->o;
        cJSON_AddNumberToObject(run, "stop_at", (double)o->stop_at);
        cJSON_AddNumberToObject(run, "max_minutes", o->max_minutes);
        cJSON_AddBoolToObject(run, "skip_nonfinite", o->skip_nonfinite);
        ok = flatten(s, "", flat) && flatten(cfg, "config.", flat) && flatten(run, "", flat);
    }
    /* rank 0's list to every rank: its length, then its bytes */
    char *mine = ok ? cJSON_PrintUnformatted(flat) : NULL;
    uint64_t len = mine ? strlen(mine) + 1 : 0;
    ok = mine && cg_dist_broadcast_bytes(&len, sizeof len);
    char *root = ok ? malloc(len) : NULL;
    if (root && cg_dist_is_root())
        memcpy(root, mine, len);
    ok = root && cg_dist_broadcast_bytes(root, len);
    cJSON *rf = ok ? cJSON_Parse(root) : NULL;
    /* the first of rank 0's leaves that differs here */
    int idx = 0, first = -1;
    for (const cJSON *c = rf ? rf->child : NULL; c && first < 0; c = c->next, idx++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(flat, c->string);
        if (!cJSON_IsString(v) || strcmp(v->valuestring, c->valuestring) != 0)
            first = idx;
    }
    if (rf && first < 0 && cJSON_GetArraySize(flat) != cJSON_GetArraySize(rf))
        first = idx; /* leaves rank 0 does not have */
    double worst = first >= 0 ? 1e9 - first : 0; /* the lowest index over the ranks */
    bool sent = ok && cg_dist_allreduce_max(&worst, 1);
    if (sent && worst > 0) {
        int at = (int)(1e9 - worst);
        const cJSON *c = rf ? cJSON_GetArrayItem(rf, at) : NULL;
        const char *key = c ? c->string : "a value", *leaf = strrchr(key, '.');
        leaf = leaf ? leaf + 1 : key;
        char flag[256];
        if (!strncmp(key, "data_id.", 8))
            snprintf(flag, sizeof flag, "--data (the file's content)");
        else if (!strncmp(key, "history.", 8) || !strcmp(key, "recent"))
            snprintf(flag, sizeof flag, "the checkpoint resumed");
        else {
            snprintf(flag, sizeof flag, "--%s", leaf);
            for (char *p = flag; *p; p++)
                if (*p == '_')
                    *p = '-';
        }
        cg_set_error("the ranks were not started with the same run: %s differs between ranks "
                     "(rank 0: %s = %s); every rank needs the same data and flags", flag, key,
                     c ? c->valuestring : "?");
        ok = false;
    } else if (!sent) {
        ok = false;
    }
    free(mine);
    free(root);
    cJSON_Delete(rf);
    cJSON_Delete(s);
    cJSON_Delete(cfg);
    cJSON_Delete(flat);
    cJSON_Delete(run);
    if (!ok && !cg_has_error())
        cg_set_error("out of memory");
    return ok;
}

static int setup(run_ctx *c)
{
    cg_trainer *t = c->t;
    const cg_trainer_model *m = c->m;
    if (!cg_stepper_init(&c->st, m, (int)t->o->grad_accum))
        return cg_prog_fail_lib("optimizer");
    c->st.skip_nonfinite = t->o->skip_nonfinite;
    c->opt = c->st.opt;
    if (t->ckpt) {
        if (!cg_optim_load(c->opt, t->ckpt, "optim"))
            return cg_prog_fail("'%s': %s", t->o->resume, cg_last_error());
        cg_st_close(t->ckpt); /* everything is read */
        t->ckpt = NULL;
    }
    if (t->dropout_rng_set)
        *m->dropout_rng = t->dropout_rng;
    /* Data parallel (models/train/dist.h): every rank starts from rank 0's
     * parameters and trains on its share of every global batch; dropout is
     * seeded per rank (rank 0 keeps the checkpoint's stream). */
    if (!check_ranks_agree(t, m))
        return cg_prog_fail_lib(NULL);
    if (!cg_dist_broadcast_module(m->module))
        return cg_prog_fail_lib("broadcasting the parameters");
    m->dropout_rng->seed = cg_dist_rank_seed(m->dropout_rng->seed);
    if (cg_dist_is_root()) {
        c->png = cg_loss_png_path(t->out);
        char *mp = cg_ckpt_sibling(t->out, ".metrics.jsonl");
        if (!c->png || !mp) {
            free(mp);
            return cg_prog_fail("out of memory");
        }
        int64_t dropped = 0;
        t->metrics = cg_metrics_log_open(mp, t->o->resume ? t->start : -1, &dropped);
        if (!t->metrics) {
            free(mp);
            return cg_prog_fail_lib(NULL);
        }
        if (dropped > 0) /* one history: what the checkpoint does not hold is gone */
            cg_prog_warn("the metrics log '%s' keeps its history up to step %lld; %lld line(s) "
                         "after it (a killed run's) or damaged were dropped",
                         mp, (long long)t->start, (long long)dropped);
        free(mp);
    }
    if (t->o->resume)
        fprintf(stderr, "%s: resuming '%s' at step %lld\n", cg_prog_name(), t->o->resume,
                (long long)t->start);
    return -1;
}

static int finish(run_ctx *c)
{
    cg_trainer *t = c->t;
    const cg_trainer_model *m = c->m;
    const char *prog = cg_prog_name();
    cg_progress_end();
    if (t->skipped > 0)
        fprintf(stderr, "%s: %lld step(s) skipped (non-finite loss or gradient)\n", prog,
                (long long)t->skipped);
    double tps = t->elapsed > 0 ? t->tokens / t->elapsed : 0;
    int nranks = cg_dist_size();
    if (nranks > 1)
        fprintf(stderr, "%s: %d ranks: %.1f s of %.1f s of training in communication (%.0f%%)\n",
                prog, nranks, cg_dist_comm_seconds(), t->elapsed,
                t->elapsed > 0 ? 100 * cg_dist_comm_seconds() / t->elapsed : 0.0);
    if (!save(c, t->step))
        return cg_prog_fail("could not save the checkpoint at step %lld: %s", (long long)t->step,
                            cg_last_error());
    cg_jline j = {0};
    cg_jline_int(&j, "step", t->step);
    if (t->interrupted) {
        fprintf(stderr, "%s: stopped at step %lld; checkpoint saved to '%s' (continue with "
                        "--resume %s)\n",
                prog, (long long)t->step, t->out, t->out);
        cg_jline_bool(&j, "interrupted", true);
        double tl = isfinite(t->last_loss) ? t->last_loss
                    : t->hist.n > 0        ? (double)t->hist.train[t->hist.n - 1]
                                           : NAN;
        cg_jline_num(&j, "train_loss", tl, 4);
    } else {
        fprintf(stderr, "%s: checkpoint saved to '%s'\n", prog, t->out);
        /* the final evaluation (seq2seq decodes for minutes) may be cut
         * short at once: everything is saved */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (!m->finish(m->self, t, &j)) {
            cg_jline_free(&j);
            return cg_prog_fail_lib(NULL);
        }
        if (t->o->max_minutes > 0)
            cg_jline_bool(&j, "max_minutes_reached", t->out_of_time);
    }
    cg_jline_str(&j, "precision", cg_precision_name(t->o->precision));
    cg_jline_num(&j, "tokens_per_s", tps, 0);
    cg_jline_num(&j, "elapsed_s", t->elapsed, 1);
    cg_jline_int(&j, "params", cg_module_num_params(m->module));
    cg_jline_str(&j, "checkpoint", t->out);
    const char *line = cg_jline_end(&j);
    if (!line) {
        cg_jline_free(&j);
        return cg_prog_fail("out of memory");
    }
    printf("%s\n", line);
    fflush(stdout);
    cg_jline_free(&j);
    return 0;
}

/* Was the last evaluation at step? */
static bool evaluated_at(const cg_trainer *t, int64_t step)
{
    return t->hist.n > 0 && t->hist.step[t->hist.n - 1] == (float)step;
}

int cg_trainer_run(cg_trainer *t, const cg_trainer_model *m)
{
    run_ctx c = {.t = t, .m = m};
    const cg_train_opts *o = t->o;
    int rc = setup(&c);
    if (rc >= 0)
        goto done;
    cg_train_catch_signals();
    const bool tty = cg_progress_is_tty();
    int64_t log_every = o->log_every;
    if (log_every <= 0) {
        log_every = o->steps / 20 > 0 ? o->steps / 20 : 1;
        if (log_every > 100)
            log_every = 100;
    }
    double last_print = 0, win_tok = 0, win_time = 0;
    const double t_begin = cg_now();
    int64_t done_steps = 0;
    for (;;) {
        const int64_t step = t->step;
        bool due = step % o->eval_every == 0 || step == o->steps;
        if (due && (step > 0 || m->eval_at_start) &&
            !evaluated_at(t, step) &&
            (rc = evaluate(&c, step)) >= 0)
            goto done;
        if (due && step > t->start && step < o->steps && !save(&c, step)) {
            rc = cg_prog_fail("could not save the checkpoint at step %lld: %s", (long long)step,
                              cg_last_error());
            goto done;
        }
        if (step >= o->steps)
            break;
        /* every rank stops at the same step: [interrupted, out of time] */
        double stop[2] = {cg_train_interrupted(),
                          o->max_minutes > 0 && cg_now() - t_begin >= 60 * o->max_minutes};
        cg_dist_allreduce_max(stop, 2);
        if (stop[0] > 0 || (o->stop_at >= 0 && step >= o->stop_at)) {
            t->interrupted = true;
            break;
        }
        if (stop[1] > 0) { /* --max-minutes: end here as at the last step */
            t->out_of_time = true;
            fprintf(stderr, "%s: --max-minutes %g reached at step %lld\n", cg_prog_name(),
                    o->max_minutes, (long long)step);
            if (!evaluated_at(t, step) &&
                (rc = evaluate(&c, step)) >= 0)
                goto done;
            break;
        }
        double t0 = cg_now(), tokens = 0;
        bool skipped;
        if ((rc = train_step(&c, &skipped, &tokens)) >= 0)
            goto done;
        double dt = cg_now() - t0;
        t->step++;
        t->elapsed += dt;
        t->tokens += tokens;
        win_tok += tokens;
        win_time += dt;
        done_steps++;
        bool last = t->step == o->steps, logged = t->step % log_every == 0 || last;
        if (skipped)
            continue;
        double tps = win_time > 0 ? win_tok / win_time : 0;
        double lr = cg_optim_lr(c.opt), loss = cg_trainer_recent_loss(t);
        if (tty ? (cg_now() - last_print > 0.25 || last) : logged) {
            double eta = (double)(o->steps - t->step) * t->elapsed / (double)done_steps;
            if (o->max_minutes > 0) /* the budget's end comes first */
                eta = fmin(eta, fmax(0.0, 60 * o->max_minutes - (cg_now() - t_begin)));
            cg_progress(cg_prog_name(), t->step, o->steps, loss, lr, tps, eta);
            last_print = cg_now();
        }
        if (logged) { /* the metrics log */
            cg_jline j = {0};
            cg_jline_int(&j, "step", t->step);
            cg_jline_num(&j, "loss", t->last_loss, 6);
            cg_jline_num(&j, "loss_avg", loss, 6);
            cg_jline_num(&j, "lr", lr, 10);
            cg_jline_num(&j, "tokens_per_s", tps, 0);
            cg_jline_num(&j, "elapsed_s", t->elapsed, 2);
            metrics_line(&c, &j);
            win_tok = win_time = 0;
        }
    }
    rc = finish(&c);
done:
    cg_progress_end();
    free(c.png);
    cg_stepper_free(&c.st);
    return rc;
}
