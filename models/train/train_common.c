/* cgrad zoo: shared training helpers (see train_common.h). */
#include "models/train/train_common.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/parse.h"
#include "models/report/plot.h"
#include "models/util/config_json.h"

static volatile sig_atomic_t g_interrupted = 0;

static void on_signal(int sig)
{
    g_interrupted = 1;
    /* a second SIGINT or SIGTERM ends the process; SIGXCPU comes again
     * every second past the soft CPU limit (the hard one sends SIGKILL):
     * ignored while the checkpoint is saved */
    signal(sig, sig == SIGXCPU ? SIG_IGN : SIG_DFL);
}

void cg_train_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* SIGUSR1: what mpirun forwards to every rank without ending the job
     * (its own SIGINT/SIGTERM handling exits 1 and sends SIGKILL a second
     * later); SIGXCPU: the soft CPU-time limit (ulimit -t); SIGHUP: the
     * terminal is gone (a dropped ssh session) */
    static const int sigs[] = {SIGINT, SIGTERM, SIGUSR1, SIGXCPU, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
    /* SIGPIPE: ignored by every program from its start (models/util/cli.h
     * cg_cli_streams): a reader of the progress lines that went away
     * (`| head`, a killed tee) fails the writes, the run goes on to its
     * checkpoint, and a lost result line is exit 1 at the end */
}

bool cg_train_interrupted(void) { return g_interrupted != 0; }

void cg_train_release_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGUSR1, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    signal(SIGXCPU, SIG_IGN);
    g_interrupted = 0;
}

static bool g_line_open = false;

bool cg_progress_is_tty(void) { return isatty(STDERR_FILENO) == 1; }

static void fmt_time(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0)
        s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else
        snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
}

void cg_progress(const char *prog, int64_t step, int64_t steps, double loss, double lr,
                 double tokens_per_s, double eta_s)
{
    char eta[32];
    fmt_time(eta_s, eta, sizeof eta);
    bool tty = cg_progress_is_tty();
    fprintf(stderr, "%s%s: step %lld/%lld  loss %.4f  lr %.2e  %.0f tok/s  ETA %s%s",
            tty ? "\r" : "", prog, (long long)step, (long long)steps, loss, lr, tokens_per_s, eta,
            tty ? "\033[K" : "\n");
    g_line_open = tty;
    fflush(stderr);
}

void cg_progress_end(void)
{
    if (g_line_open)
        fputc('\n', stderr);
    g_line_open = false;
}

int cg_history_best(const cg_history *h)
{
    int b = -1;
    for (int i = 0; i < h->n; i++) {
        const float *v = h->metric ? h->score : h->val;
        bool better = h->metric ? v[i] > v[b < 0 ? i : b] : v[i] < v[b < 0 ? i : b];
        if (isfinite(v[i]) && (b < 0 || better))
            b = i;
    }
    return b;
}

const char *cg_history_best_name(const cg_history *h)
{
    return h->metric ? h->metric : "validation loss";
}

double cg_history_best_value(const cg_history *h, int i)
{
    return h->metric ? h->score[i] : h->val[i];
}

bool cg_history_push(cg_history *h, int64_t step, double train, double val)
{
    return cg_history_push_scored(h, step, train, val, NAN);
}

bool cg_history_push_scored(cg_history *h, int64_t step, double train, double val, double score)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        int64_t *s = realloc(h->step, (size_t)cap * sizeof *s);
        if (s)
            h->step = s;
        float *t = realloc(h->train, (size_t)cap * sizeof *t);
        if (t)
            h->train = t;
        float *v = realloc(h->val, (size_t)cap * sizeof *v);
        if (v)
            h->val = v;
        float *sc = realloc(h->score, (size_t)cap * sizeof *sc);
        if (sc)
            h->score = sc;
        if (!s || !t || !v || !sc) {
            cg_set_error("out of memory");
            return false;
        }
        h->cap = cap;
    }
    h->step[h->n] = step;
    h->train[h->n] = (float)train;
    h->val[h->n] = (float)val;
    h->score[h->n] = (float)score;
    h->n++;
    return true;
}

int64_t cg_history_every(const cg_history *h) { return h->every > 0 ? h->every : CG_HISTORY_EVERY; }

/* Append one point to the dense series; at CG_HISTORY_DENSE_MAX points,
 * merge adjacent pairs and double `every`. */
static bool dense_append(cg_history *h, double step, double loss)
{
    if (h->dn == h->dcap) {
        int cap = h->dcap ? 2 * h->dcap : 64;
        if (cap > CG_HISTORY_DENSE_MAX)
            cap = CG_HISTORY_DENSE_MAX;
        float *s = realloc(h->dstep, (size_t)cap * sizeof *s);
        if (s)
            h->dstep = s;
        float *l = realloc(h->dloss, (size_t)cap * sizeof *l);
        if (l)
            h->dloss = l;
        if (!s || !l) {
            cg_set_error("out of memory");
            return false;
        }
        h->dcap = cap;
    }
    h->dstep[h->dn] = (float)step;
    h->dloss[h->dn] = (float)loss;
    h->dn++;
    if (h->dn == CG_HISTORY_DENSE_MAX) { /* even: every point pairs up */
        int m = h->dn / 2;
        for (int i = 0; i < m; i++) {
            h->dstep[i] = (float)(0.5 * ((double)h->dstep[2 * i] + (double)h->dstep[2 * i + 1]));
            h->dloss[i] = (float)(0.5 * ((double)h->dloss[2 * i] + (double)h->dloss[2 * i + 1]));
        }
        h->dn = m;
        h->every = 2 * cg_history_every(h);
    }
    return true;
}

bool cg_history_train_step(cg_history *h, int64_t step, double loss)
{
    if (!isfinite(loss))
        return true;
    h->every = cg_history_every(h);
    h->acc_loss += loss;
    h->acc_step += step;
    h->acc_n++;
    if (h->acc_n < h->every)
        return true;
    double n = (double)h->acc_n;
    bool ok = dense_append(h, (double)h->acc_step / n, h->acc_loss / n);
    h->acc_loss = 0;
    h->acc_step = h->acc_n = 0;
    return ok;
}

void cg_history_free(cg_history *h)
{
    free(h->step);
    free(h->train);
    free(h->val);
    free(h->score);
    free(h->dstep);
    free(h->dloss);
    memset(h, 0, sizeof *h);
}

/* cJSON prints NaN and Inf as null; read them back as NaN */
static bool json_loss(const cJSON *x, double *out)
{
    if (cJSON_IsNull(x)) {
        *out = NAN;
        return true;
    }
    if (!cJSON_IsNumber(x))
        return false;
    *out = x->valuedouble;
    return true;
}

char *cg_history_to_json(const cg_history *h)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *s = cJSON_AddArrayToObject(o, "step");
    cJSON *t = cJSON_AddArrayToObject(o, "train");
    cJSON *v = cJSON_AddArrayToObject(o, "val");
    cJSON *sc = h->metric ? cJSON_AddArrayToObject(o, "score") : NULL;
    bool ok = s && t && v && (sc || !h->metric);
    for (int i = 0; ok && i < h->n; i++) /* (an item that cannot be made is no item) */
        ok = cJSON_AddItemToArray(s, cJSON_CreateNumber((double)h->step[i])) &&
             cJSON_AddItemToArray(t, cJSON_CreateNumber(h->train[i])) &&
             cJSON_AddItemToArray(v, cJSON_CreateNumber(h->val[i])) &&
             (!sc || cJSON_AddItemToArray(sc, cJSON_CreateNumber(h->score[i])));
    ok = ok && cJSON_AddNumberToObject(o, "dense_every", (double)cg_history_every(h));
    cJSON *ds = ok ? cJSON_AddArrayToObject(o, "dense_step") : NULL;
    cJSON *dl = ok ? cJSON_AddArrayToObject(o, "dense_loss") : NULL;
    ok = ds && dl;
    for (int i = 0; ok && i < h->dn; i++)
        ok = cJSON_AddItemToArray(ds, cJSON_CreateNumber(h->dstep[i])) &&
             cJSON_AddItemToArray(dl, cJSON_CreateNumber(h->dloss[i]));
    /* the sum of losses as a string: exact through any number of cJSON
     * parse/print rounds (cJSON may print a double with 15 digits) */
    cJSON *acc = ok ? cJSON_AddObjectToObject(o, "dense_acc") : NULL;
    char buf[40];
    cg_snprintf_c(buf, sizeof buf, "%.17g", h->acc_loss);
    ok = acc && cJSON_AddStringToObject(acc, "loss", buf) &&
         cJSON_AddNumberToObject(acc, "step", (double)h->acc_step) &&
         cJSON_AddNumberToObject(acc, "n", (double)h->acc_n);
    char *out = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!out)
        cg_set_error("out of memory");
    return out;
}

/* Arrays are walked by their links (cJSON_GetArrayItem in a loop would be
 * quadratic in the history's length). */
static bool dense_from_json(const cJSON *o, cg_history *h)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "dense_every");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "dense_step");
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "dense_loss");
    const cJSON *acc = cJSON_GetObjectItemCaseSensitive(o, "dense_acc");
    if (!e && !s && !l && !acc)
        return true; /* written before the dense series existed */
    if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1 && e->valuedouble <= 1e15) ||
        e->valuedouble != floor(e->valuedouble) || !cJSON_IsArray(s) || !cJSON_IsArray(l) ||
        cJSON_GetArraySize(s) != cJSON_GetArraySize(l) ||
        cJSON_GetArraySize(s) >= CG_HISTORY_DENSE_MAX || !cJSON_IsObject(acc))
        return false;
    h->every = (int64_t)e->valuedouble;
    for (const cJSON *a = s->child, *b = l->child; a && b; a = a->next, b = b->next) {
        double y;
        if (!cJSON_IsNumber(a) || !json_loss(b, &y) || !dense_append(h, a->valuedouble, y))
            return false;
    }
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(acc, "loss");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(acc, "step");
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(acc, "n");
    if (!cJSON_IsString(al) || !cJSON_IsNumber(as) || !cJSON_IsNumber(an))
        return false;
    char *end;
    h->acc_loss = cg_strtod_c(al->valuestring, &end);
    if (end == al->valuestring || *end || !(fabs(as->valuedouble) <= 9e15) ||
        !(an->valuedouble >= 0 && an->valuedouble < (double)h->every))
        return false;
    h->acc_step = (int64_t)as->valuedouble;
    h->acc_n = (int64_t)an->valuedouble;
    return true;
}

bool cg_history_from_cjson(const cJSON *o, cg_history *h)
{
    const unsigned long serial = cg_error_serial(); /* a push's "out of memory" is kept */
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "train");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "val");
    bool ok = cJSON_IsArray(s) && cJSON_IsArray(t) && cJSON_IsArray(v) &&
              cJSON_GetArraySize(s) == cJSON_GetArraySize(t) &&
              cJSON_GetArraySize(s) == cJSON_GetArraySize(v);
    for (const cJSON *a = ok ? s->child : NULL, *b = ok ? t->child : NULL,
                     *c = ok ? v->child : NULL;
         ok && a && b && c; a = a->next, b = b->next, c = c->next) {
        double x, y;
        ok = cJSON_IsNumber(a) && fabs(a->valuedouble) <= 9e15 && json_loss(b, &x) &&
             json_loss(c, &y) && cg_history_push(h, (int64_t)a->valuedouble, x, y);
    }
    /* the scores (a run with a metric; absent: NaN, none is the best) */
    const cJSON *sc = ok ? cJSON_GetObjectItemCaseSensitive(o, "score") : NULL;
    ok = ok && (!sc || (cJSON_IsArray(sc) && cJSON_GetArraySize(sc) == h->n));
    int i = 0;
    for (const cJSON *a = sc ? sc->child : NULL; ok && a; a = a->next) {
        double x = NAN;
        ok = json_loss(a, &x);
        h->score[i++] = (float)x;
    }
    ok = ok && dense_from_json(o, h);
    if (!ok && cg_error_serial() == serial)
        cg_set_error("malformed loss history in checkpoint");
    return ok;
}

bool cg_history_from_json(const char *json, cg_history *h)
{
    cJSON *o = cg_json_parse(json);
    bool ok = cg_history_from_cjson(o, h);
    cJSON_Delete(o);
    return ok;
}

int cg_history_train_line(const cg_history *h, float *x, float *y)
{
    double first = h->dn > 0      ? h->dstep[0]
                   : h->acc_n > 0 ? (double)h->acc_step / (double)h->acc_n
                                  : INFINITY;
    int k = 0;
    for (int i = 0; i < h->n && (double)h->step[i] < first; i++, k++)
        x[k] = (float)h->step[i], y[k] = h->train[i];
    for (int i = 0; i < h->dn; i++, k++)
        x[k] = h->dstep[i], y[k] = h->dloss[i];
    if (h->acc_n > 0) {
        x[k] = (float)((double)h->acc_step / (double)h->acc_n);
        y[k++] = (float)(h->acc_loss / (double)h->acc_n);
    }
    return k;
}

bool cg_history_plot(const cg_history *h, const char *path, const char *title)
{
    int cap = h->n + h->dn + 1;
    float *x = malloc((size_t)cap * sizeof *x), *y = malloc((size_t)cap * sizeof *y);
    float *vx = malloc((size_t)(h->n > 0 ? h->n : 1) * sizeof *vx); /* the axis is float */
    if (!x || !y || !vx) {
        free(x);
        free(y);
        free(vx);
        cg_set_error("out of memory");
        return false;
    }
    for (int i = 0; i < h->n; i++)
        vx[i] = (float)h->step[i];
    int k = cg_history_train_line(h, x, y);
    char name[64];
    if (h->dn > 0 || h->acc_n > 0)
        snprintf(name, sizeof name, "train (mean of %lld steps)", (long long)cg_history_every(h));
    else
        snprintf(name, sizeof name, "train");
    cg_plot_series s[2] = {
        {.name = name, .x = x, .y = y, .n = k, .color = 0x7DA7E0, .width = 1.0f},
        {.name = h->val_name ? h->val_name : "validation",
         .x = vx,
         .y = h->val,
         .n = h->n,
         .color = 0xD9480F,
         .width = 2.0f,
         .marker = 6.0f},
    };
    bool ok = cg_plot_loss_curve(path, title, 2, s);
    free(x);
    free(y);
    free(vx);
    return ok;
}

bool cg_train_position_check(int64_t epoch, int64_t pos, int64_t n_batches, int64_t step,
                             const char *path)
{
    bool ok = n_batches >= 1 && step >= 0 && epoch >= 0 && pos >= 0 && pos <= n_batches;
    if (ok && epoch == 0)
        ok = pos == n_batches && step == 0;
    else if (ok)
        ok = epoch - 1 <= step / n_batches && (epoch - 1) * n_batches + pos == step;
    if (!ok)
        cg_set_error("%s: bad trainer position (epoch %lld, batch %lld of %lld) for step %lld; "
                     "corrupt checkpoint?",
                     path, (long long)epoch, (long long)pos, (long long)n_batches, (long long)step);
    return ok;
}

char *cg_ckpt_sibling(const char *ckpt_path, const char *suffix)
{
    size_t n = strlen(ckpt_path);
    const char *ext = ".safetensors";
    size_t e = strlen(ext);
    /* ".safetensors" alone is a whole name (a hidden file's, no stem), in
     * any directory: kept */
    if (n > e && strcmp(ckpt_path + n - e, ext) == 0 && ckpt_path[n - e - 1] != '/')
        n -= e;
    char *out = malloc(n + strlen(suffix) + 1);
    if (!out) {
        cg_set_error("out of memory");
        return NULL;
    }
    memcpy(out, ckpt_path, n);
    strcpy(out + n, suffix);
    return out;
}

char *cg_loss_png_path(const char *ckpt_path) { return cg_ckpt_sibling(ckpt_path, ".loss.png"); }

bool cg_plot_attention_ids(const char *path, const char *title, int layers, cg_mha *const *mods,
                           const cg_tokenizer *tok, const int64_t *row_ids, int rows,
                           const int64_t *col_ids, int cols)
{
    char **rl = cg_tokenizer_labels(tok, row_ids, rows);
    char **cl = rl ? cg_tokenizer_labels(tok, col_ids, cols) : NULL;
    bool ok = cl && cg_plot_attention_of(path, title, layers, mods, rows, cols,
                                         (const char *const *)rl, (const char *const *)cl);
    for (int i = 0; rl && i < rows; i++)
        free(rl[i]);
    for (int i = 0; cl && i < cols; i++)
        free(cl[i]);
    free(rl);
    free(cl);
    return ok;
}
