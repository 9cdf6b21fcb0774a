/* cgrad zoo: shared training helpers (see train_common.h). */
#include "models/train_common.h"

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
#include "models/plot.h"

double cg_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static volatile sig_atomic_t g_interrupted = 0;

static void on_signal(int sig)
{
    g_interrupted = 1;
    signal(sig, SIG_DFL); /* a second signal ends the process */
}

void cg_train_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

bool cg_train_interrupted(void) { return g_interrupted != 0; }

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

bool cg_history_push(cg_history *h, int64_t step, double train, double val)
{
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 16;
        float *s = realloc(h->step, (size_t)cap * sizeof *s);
        if (s) h->step = s;
        float *t = realloc(h->train, (size_t)cap * sizeof *t);
        if (t) h->train = t;
        float *v = realloc(h->val, (size_t)cap * sizeof *v);
        if (v) h->val = v;
        if (!s || !t || !v) {
            cg_set_error("out of memory");
            return false;
        }
        h->cap = cap;
    }
    h->step[h->n] = (float)step;
    h->train[h->n] = (float)train;
    h->val[h->n] = (float)val;
    h->n++;
    return true;
}

void cg_history_free(cg_history *h)
{
    free(h->step);
    free(h->train);
    free(h->val);
    memset(h, 0, sizeof *h);
}

char *cg_history_to_json(const cg_history *h)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *s = cJSON_AddArrayToObject(o, "step");
    cJSON *t = cJSON_AddArrayToObject(o, "train");
    cJSON *v = cJSON_AddArrayToObject(o, "val");
    for (int i = 0; s && t && v && i < h->n; i++) {
        cJSON_AddItemToArray(s, cJSON_CreateNumber(h->step[i]));
        cJSON_AddItemToArray(t, cJSON_CreateNumber(h->train[i]));
        cJSON_AddItemToArray(v, cJSON_CreateNumber(h->val[i]));
    }
    char *out = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!out)
        cg_set_error("out of memory");
    return out;
}

bool cg_history_from_json(const char *json, cg_history *h)
{
    cJSON *o = cJSON_Parse(json);
    cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "train");
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "val");
    bool ok = cJSON_IsArray(s) && cJSON_IsArray(t) && cJSON_IsArray(v) &&
              cJSON_GetArraySize(s) == cJSON_GetArraySize(t) &&
              cJSON_GetArraySize(s) == cJSON_GetArraySize(v);
    for (int i = 0; ok && i < cJSON_GetArraySize(s); i++) {
        cJSON *a = cJSON_GetArrayItem(s, i), *b = cJSON_GetArrayItem(t, i),
              *c = cJSON_GetArrayItem(v, i);
        ok = cJSON_IsNumber(a) && cJSON_IsNumber(b) && cJSON_IsNumber(c) &&
             cg_history_push(h, (int64_t)a->valuedouble, b->valuedouble, c->valuedouble);
    }
    cJSON_Delete(o);
    if (!ok)
        cg_set_error("malformed loss history in checkpoint");
    return ok;
}

bool cg_history_plot(const cg_history *h, const char *path, const char *title)
{
    cg_plot_series s[2] = {
        {.name = "train", .x = h->step, .y = h->train, .n = h->n, .color = 0},
        {.name = "val", .x = h->step, .y = h->val, .n = h->n, .color = 0},
    };
    return cg_plot_loss_curve(path, title, 2, s);
}

char *cg_loss_png_path(const char *ckpt_path)
{
    size_t n = strlen(ckpt_path);
    const char *ext = ".safetensors";
    size_t e = strlen(ext);
    if (n > e && strcmp(ckpt_path + n - e, ext) == 0)
        n -= e;
    char *out = malloc(n + 10);
    if (!out) {
        cg_set_error("out of memory");
        return NULL;
    }
    memcpy(out, ckpt_path, n);
    strcpy(out + n, ".loss.png");
    return out;
}

bool cg_ensure_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return true;
    size_t n = (size_t)(slash - path);
    char *dir = malloc(n + 1);
    if (!dir) {
        cg_set_error("out of memory");
        return false;
    }
    memcpy(dir, path, n);
    dir[n] = '\0';
    struct stat st;
    bool ok = true;
    if (stat(dir, &st) != 0) {
        if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
            cg_set_error("cannot create directory '%s': %s", dir, strerror(errno));
            ok = false;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        cg_set_error("'%s' is not a directory", dir);
        ok = false;
    }
    free(dir);
    return ok;
}
