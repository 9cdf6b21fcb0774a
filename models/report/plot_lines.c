/* The line chart (cg_plot_lines, cg_plot_loss_curve): ranges, layout, axes,
 * series and legend, drawn on the canvas of plot.c. */
#include "models/report/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <plplot.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/utf8.h"
#include "models/util/files.h"
#include "models/report/plot_impl.h"
#include "nn/safetensors.h"

static const uint32_t PALETTE[] = {0x1F5FBF, 0xE8601C, 0x2CA02C, 0xC62839, 0x8E63B5,
                                   0x8C564B, 0xD561B5, 0x7F7F7F, 0xA8A81E, 0x17A8BD};

/* ------------------------------------------------------------------ line chart */

bool cg_plot_loss_curve(const char *path, const char *title, int n_series,
                        const cg_plot_series *series)
{
    cg_plot_opts o = {title, "step", "loss", CG_PLOT_Y_AUTO, 0, 0};
    return cg_plot_lines(path, &o, n_series, series);
}

static double series_x(const cg_plot_series *s, int i)
{
    return s->x ? (double)s->x[i] : (double)i;
}

/* Log-axis tick values: 1, 2, 5 times powers of ten within [lo, hi] (log10
 * units) when that gives at least 3 of them, else every multiple 1..9; over
 * more than 4 decades, powers of ten only (over more than 8, those whose
 * exponent is a multiple of k: 1, 1e+05, 1e+10, ...). */
static int log_ticks(double lo, double hi, double *out, int cap)
{
    static const double m125[] = {1, 2, 5}, m19[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int n = 0;
    for (int pass = 0; pass < 2 && n < 3; pass++) {
        const double *m = pass ? m19 : m125;
        int nm = pass ? 9 : 3;
        n = 0;
        bool decades_only = hi - lo > 4;
        int every = decades_only ? (int)ceil((hi - lo) / 8) : 1; /* at most about 8 labels */
        int e0 = every > 1 ? (int)ceil(lo / every) * every : (int)floor(lo);
        for (int e = e0; e <= (int)ceil(hi) && n < cap; e += every) {
            for (int k = 0; k < (decades_only ? 1 : nm) && n < cap; k++) {
                double v = log10(m[k]) + e;
                if (v >= lo - 1e-9 && v <= hi + 1e-9)
                    out[n++] = v;
            }
        }
        if (decades_only)
            break;
    }
    return n;
}

/* The inputs of cg_plot_lines checked; *W, *H receive the page size. */
static bool lines_check(const char *who, const char *path, const cg_plot_opts *o, int n_series,
                        const cg_plot_series *series, int *W, int *H)
{
    if (!path || !*path) {
        cg_set_error("%s: path is NULL or empty", who);
        return false;
    }
    if (n_series < 0 || n_series > 1000 || (n_series > 0 && !series)) {
        cg_set_error("%s: n_series = %d with series %s (need 0..1000)", who, n_series,
                     series ? "given" : "NULL");
        return false;
    }
    for (int s = 0; s < n_series; s++) {
        if (series[s].n < 0 || (series[s].n > 0 && !series[s].y)) {
            cg_set_error("%s: series %d has n = %d and y %s", who, s, series[s].n,
                         series[s].y ? "given" : "NULL");
            return false;
        }
    }
    if (o->y_scale < CG_PLOT_Y_AUTO || o->y_scale > CG_PLOT_Y_LOG) {
        cg_set_error("%s: unknown y_scale %d", who, o->y_scale);
        return false;
    }
    *W = o->width > 0 ? o->width : 900;
    *H = o->height > 0 ? o->height : 560;
    if (*W < 200 || *H < 150 || *W > 10000 || *H > 10000) {
        cg_set_error("%s: size %d x %d is outside 200x150 .. 10000x10000", who, *W, *H);
        return false;
    }
    return true;
}

/* A line chart's geometry: data ranges, ticks, fonts, the plot area in
 * pixels (px0, py0 top-left to px1, py1) and the world window drawn in it. */
typedef struct {
    int W, H;
    bool logy, has_title, has_xl, has_yl;
    double xmin, xmax, xstep; /* x axis: range and tick step */
    double ylo, yhi, ystep;   /* y axis (log10 units on a log axis; ystep 0 there) */
    double yt[64];            /* log axis: the tick values */
    int nyt, ylab_chars;      /* their count; the widest y tick label */
    double fs, fs_title, top;
    double px0, py0, px1, py1;
    double wx0, wx1, wy0, wy1;
} chart;

/* The axes' ranges over the finite points, the y scale and the ticks. */
static bool chart_ranges(chart *c, const char *who, const cg_plot_opts *o, int n_series,
                         const cg_plot_series *series)
{
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, yposmin = INFINITY;
    for (int s = 0; s < n_series; s++) {
        for (int i = 0; i < series[s].n; i++) {
            double x = series_x(&series[s], i), y = series[s].y[i];
            if (!isfinite(x) || !isfinite(y))
                continue;
            xmin = fmin(xmin, x);
            xmax = fmax(xmax, x);
            ymin = fmin(ymin, y);
            ymax = fmax(ymax, y);
            if (y > 0)
                yposmin = fmin(yposmin, y);
        }
    }
    bool any = xmin <= xmax;
    if (!any) {
        xmin = 0;
        xmax = 1;
        ymin = 0;
        ymax = 1;
    }
    c->logy = o->y_scale == CG_PLOT_Y_LOG ||
              (o->y_scale == CG_PLOT_Y_AUTO && any && ymin > 0 && ymax / ymin >= 10);
    if (c->logy && !(yposmin < INFINITY)) {
        cg_set_error("%s: a log y axis needs a positive y value", who);
        return false;
    }
    c->ystep = 0;
    cg_plot_nice_range(&xmin, &xmax, c->W < 600 ? 4 : 8, &c->xstep);
    c->xmin = xmin;
    c->xmax = xmax;
    if (c->logy) {
        c->ylo = log10(yposmin);
        c->yhi = log10(fmax(ymax, yposmin));
        double pad = fmax(0.02 * (c->yhi - c->ylo), 0.01);
        c->ylo -= pad;
        c->yhi += pad;
    } else {
        c->ylo = ymin;
        c->yhi = ymax;
        cg_plot_nice_range(&c->ylo, &c->yhi, c->H < 400 ? 4 : 6, &c->ystep);
    }
    return true;
}

/* The y tick labels' width, the margins and the world window (with markers
 * it reaches past the data by a marker's radius, so that a marker at the
 * end of the range is drawn whole). */
static bool chart_layout(chart *c, const char *who, const cg_plot_opts *o, int n_series,
                         const cg_plot_series *series)
{
    char tick[64];
    c->fs = c->H < 400 ? 11 : 13;
    c->fs_title = c->fs * 1.35;
    c->ylab_chars = 0;
    c->nyt = 0;
    if (c->logy) {
        c->nyt = log_ticks(c->ylo, c->yhi, c->yt, 64);
        for (int i = 0; i < c->nyt; i++) {
            snprintf(tick, sizeof tick, "%g", pow(10, c->yt[i]));
            c->ylab_chars = (int)strlen(tick) > c->ylab_chars ? (int)strlen(tick) : c->ylab_chars;
        }
    } else {
        for (int i = 0; c->ylo + i * c->ystep <= c->yhi + c->ystep * 1e-6; i++) {
            cg_plot_label_linear(PL_Y_AXIS, c->ylo + i * c->ystep, tick, sizeof tick, &c->ystep);
            c->ylab_chars = (int)strlen(tick) > c->ylab_chars ? (int)strlen(tick) : c->ylab_chars;
        }
    }
    const double fs = c->fs;
    c->has_title = o->title && *o->title;
    c->has_xl = o->xlabel && *o->xlabel;
    c->has_yl = o->ylabel && *o->ylabel;
    c->top = c->has_title ? c->fs_title * 2.6 : fs * 1.5;
    double left = 12 + (c->has_yl ? fs * 2.4 : 0) + cg_plot_text_w(c->ylab_chars, fs) + fs * 0.7;
    double bottom = fs * 2.4 + (c->has_xl ? fs * 1.8 : 0) + 6;
    double right = 24;
    c->px0 = left, c->py0 = c->top, c->px1 = c->W - right, c->py1 = c->H - bottom;
    if (c->px1 - c->px0 < 50 || c->py1 - c->py0 < 50) {
        cg_set_error("%s: %d x %d is too small for the labels", who, c->W, c->H);
        return false;
    }
    double maxmark = 0;
    for (int s = 0; s < n_series; s++)
        maxmark = fmax(maxmark, series[s].marker);
    double pad = maxmark > 0 ? maxmark / 2 + 2 : 0;
    double dx = pad * (c->xmax - c->xmin) / (c->px1 - c->px0 - 2 * pad);
    double dy = pad * (c->yhi - c->ylo) / (c->py1 - c->py0 - 2 * pad);
    c->wx0 = c->xmin - dx, c->wx1 = c->xmax + dx, c->wy0 = c->ylo - dy, c->wy1 = c->yhi + dy;
    return true;
}

/* Title, grid, frame, ticks, tick labels (at every major tick, the ends
 * included) and axis labels. */
static void chart_axes(const chart *c, const pl_out *out, const cg_plot_opts *o)
{
    char tick[64], text[TEXT_BUF];
    if (c->has_title) {
        cg_plot_text(o->title, 120, text);
        plcol0(C_TEXT);
        cg_plot_text_px(out, c->W / 2.0, c->top * 0.45, 0.5, c->fs_title, text);
    }
    cg_plot_vp_px(out, c->px0, c->py0, c->px1, c->py1);
    plwind(c->wx0, c->wx1, c->wy0, c->wy1);
    cg_plot_font_px(c->fs);
    plwidth(1);
    plcol0(C_GRID);
    if (c->logy) {
        plbox("g", c->xstep, 0, "gl", 0, 0);
        plcol0(C_AXIS);
        plbox("bcst", c->xstep, 0, "bcstl", 0, 0);
    } else {
        plbox("g", c->xstep, 0, "g", c->ystep, 0);
        plcol0(C_AXIS);
        plbox("bcst", c->xstep, 0, "bcst", c->ystep, 0);
    }
    plcol0(C_TEXT);
    for (int i = 0; c->xmin + i * c->xstep <= c->xmax + c->xstep * 1e-6; i++) {
        cg_plot_label_linear(PL_X_AXIS, c->xmin + i * c->xstep, tick, sizeof tick,
                             (PLPointer)&c->xstep);
        plmtex("b", 1.5, (c->xmin + i * c->xstep - c->wx0) / (c->wx1 - c->wx0), 0.5, tick);
    }
    if (c->logy) {
        for (int i = 0; i < c->nyt; i++) {
            snprintf(tick, sizeof tick, "%g", pow(10, c->yt[i]));
            plmtex("lv", 0.7, (c->yt[i] - c->wy0) / (c->wy1 - c->wy0), 1.0, tick);
        }
    } else {
        for (int i = 0; c->ylo + i * c->ystep <= c->yhi + c->ystep * 1e-6; i++) {
            cg_plot_label_linear(PL_Y_AXIS, c->ylo + i * c->ystep, tick, sizeof tick,
                                 (PLPointer)&c->ystep);
            plmtex("lv", 0.7, (c->ylo + i * c->ystep - c->wy0) / (c->wy1 - c->wy0), 1.0, tick);
        }
    }
    if (c->has_xl) {
        cg_plot_text(o->xlabel, 80, text);
        plmtex("b", 3.3, 0.5, 0.5, text);
    }
    if (c->has_yl) {
        cg_plot_text(o->ylabel, 80, text);
        double disp = (cg_plot_text_w(c->ylab_chars, c->fs) + c->fs * 0.7) / c->fs + 1.4;
        plmtex("l", disp, 0.5, 0.5, text);
    }
}

/* n filled points round (x, y) at radius r pixels: a disc (16) or a lone
 * point's diamond (4). */
static void fill_round(const chart *c, double x, double y, double r, int n)
{
    double xppx = (c->wx1 - c->wx0) / (c->px1 - c->px0),
           yppx = (c->wy1 - c->wy0) / (c->py1 - c->py0);
    PLFLT cx[16], cy[16];
    for (int a = 0; a < n; a++) {
        cx[a] = x + r * xppx * cos(a * 2 * M_PI / n);
        cy[a] = y + r * yppx * sin(a * 2 * M_PI / n);
    }
    plfill(n, cx, cy);
}

/* One series in colour slot C_SERIES0 + s: segments broken at skipped
 * points, a marker (a filled disc of that diameter in pixels) at every
 * point, and a lone point between gaps kept visible. xs, ys: room for S->n
 * points. Returns the line width. */
static double chart_series(const chart *c, const cg_plot_series *S, int s, uint32_t col, PLFLT *xs,
                           PLFLT *ys)
{
    cg_plot_set_color(C_SERIES0 + s, col);
    plcol0(C_SERIES0 + s);
    double width = S->width > 0 ? S->width : 1.8;
    plwidth(width);
    int k = 0;
    for (int i = 0; i <= S->n; i++) {
        double x = i < S->n ? series_x(S, i) : NAN, y = i < S->n ? S->y[i] : NAN;
        bool ok = isfinite(x) && isfinite(y) && (!c->logy || y > 0);
        if (ok) {
            xs[k] = x;
            ys[k++] = c->logy ? log10(y) : y;
        }
        if (!ok || i == S->n - 1) {
            if (k > 1)
                plline(k, xs, ys);
            if (S->marker > 0) {
                for (int j = 0; j < k; j++)
                    fill_round(c, xs[j], ys[j], S->marker / 2, 16);
            } else if (k == 1) {
                fill_round(c, xs[0], ys[0], width, 4);
            }
            k = 0;
        }
    }
    return width;
}

/* The legend's entries, one per named series, in pllegend's arrays. */
typedef struct {
    int n;
    PLINT *opt, *colors, *styles, *nsym;
    PLFLT *widths, *sscale;
    const char **names, **syms;
    char (*name_buf)[TEXT_BUF];
} legend;

static bool legend_alloc(legend *L, int n_series)
{
    size_t n = (size_t)n_series + 1;
    *L = (legend){0};
    L->opt = calloc(n, sizeof *L->opt);
    L->colors = calloc(n, sizeof *L->colors);
    L->styles = calloc(n, sizeof *L->styles);
    L->nsym = calloc(n, sizeof *L->nsym);
    L->widths = calloc(n, sizeof *L->widths);
    L->sscale = calloc(n, sizeof *L->sscale);
    L->names = calloc(n, sizeof *L->names);
    L->syms = calloc(n, sizeof *L->syms);
    L->name_buf = calloc(n, sizeof *L->name_buf);
    return L->opt && L->colors && L->styles && L->nsym && L->widths && L->sscale && L->names &&
           L->syms && L->name_buf;
}

static void legend_free(legend *L)
{
    free(L->opt);
    free(L->colors);
    free(L->styles);
    free(L->nsym);
    free(L->widths);
    free(L->sscale);
    free(L->names);
    free(L->syms);
    free(L->name_buf);
}

/* The entry of series s (colour slot C_SERIES0 + s), drawn at width. */
static void legend_add(legend *L, const cg_plot_series *S, int s, double width, double fs)
{
    int e = L->n++;
    cg_plot_text(S->name, 60, L->name_buf[e]);
    L->names[e] = L->name_buf[e];
    L->opt[e] = PL_LEGEND_LINE | (S->marker > 0 ? PL_LEGEND_SYMBOL : 0);
    L->colors[e] = C_SERIES0 + s;
    L->styles[e] = 1;
    L->widths[e] = width;
    L->nsym[e] = 1;
    L->sscale[e] = S->marker > 0 ? S->marker / (fs * 0.75) : 1;
    L->syms[e] = "\xe2\x97\x8f"; /* U+25CF BLACK CIRCLE */
}

/* The legend in the top right corner of the plot area; false: out of memory. */
static bool legend_draw(const legend *L, double fs)
{
    PLFLT lw, lh;
    PLINT *text_colors = calloc((size_t)L->n, sizeof *text_colors);
    if (!text_colors)
        return false;
    for (int e = 0; e < L->n; e++)
        text_colors[e] = C_TEXT;
    cg_plot_font_px(fs);
    pllegend(&lw, &lh, PL_LEGEND_BACKGROUND | PL_LEGEND_BOUNDING_BOX,
             PL_POSITION_TOP | PL_POSITION_RIGHT | PL_POSITION_INSIDE, 0.02, 0.03, 0.08,
             C_LEGEND_BG, C_AXIS, 1, 0, 0, L->n, L->opt, 1.0, 1.0, 1.8, 0.0, text_colors, L->names,
             NULL, NULL, NULL, NULL, L->colors, L->styles, L->widths, L->colors, L->sscale, L->nsym,
             L->syms);
    free(text_colors);
    return true;
}

typedef struct {
    const char *path;
    const cg_plot_opts *o;
    int n_series;
    const cg_plot_series *series;
    const chart *c;
} lines_job;
static bool lines_draw(void *arg);

static bool lines_plot(const char *path, const cg_plot_opts *opts, int n_series,
                       const cg_plot_series *series);
bool cg_plot_lines(const char *path, const cg_plot_opts *opts, int n_series,
                   const cg_plot_series *series)
{
    pthread_mutex_lock(&cg_plot_lock);
    bool ok = lines_plot(path, opts, n_series, series);
    pthread_mutex_unlock(&cg_plot_lock);
    return ok;
}

/* cg_plot_lines under cg_plot_lock: the input checked and laid out here, drawn
 * in a child process. */
static bool lines_plot(const char *path, const cg_plot_opts *opts, int n_series,
                       const cg_plot_series *series)
{
    static const char who[] = "cg_plot_lines";
    cg_plot_opts o = {0};
    if (opts)
        o = *opts;
    chart c = {0};
    if (!lines_check(who, path, &o, n_series, series, &c.W, &c.H) ||
        !chart_ranges(&c, who, &o, n_series, series) ||
        !chart_layout(&c, who, &o, n_series, series))
        return false;
    /* the child's copy of the input (cg_plot_draw_apart) */
    plot_copies k = {0};
    cg_plot_series *cs =
        (cg_plot_series *)cg_plot_copy(&k, series, (size_t)n_series * sizeof *series);
    for (int i = 0; cs && i < n_series; i++) {
        cs[i].name = cg_plot_copy_str(&k, series[i].name);
        cs[i].x = cg_plot_copy(&k, series[i].x, (size_t)series[i].n * sizeof(float));
        cs[i].y = cg_plot_copy(&k, series[i].y, (size_t)series[i].n * sizeof(float));
    }
    o.title = cg_plot_copy_str(&k, o.title);
    o.xlabel = cg_plot_copy_str(&k, o.xlabel);
    o.ylabel = cg_plot_copy_str(&k, o.ylabel);
    const char *cpath = cg_plot_copy_str(&k, path);
    bool ok = !k.failed && (cs || n_series == 0) && cpath;
    if (!ok)
        cg_set_error("%s: out of memory", who);
    lines_job job = {cpath, &o, n_series, cs, &c};
    ok = ok && cg_plot_draw_apart(who, path, lines_draw, &job);
    cg_plot_copies_free(&k);
    return ok;
}

/* The chart drawn and written (in the drawing process). */
static bool lines_draw(void *arg)
{
    static const char who[] = "cg_plot_lines";
    const lines_job *job = arg;
    const chart c = *job->c;
    const cg_plot_opts o = *job->o;
    const int n_series = job->n_series;
    const cg_plot_series *series = job->series;
    pl_out out;
    if (!cg_plot_begin(&out, who, job->path, c.W, c.H, n_series, false))
        return false;
    chart_axes(&c, &out, &o);

    /* series: palette colours for colour 0 */
    legend L;
    int next_palette = 0, maxn = 1;
    for (int s = 0; s < n_series; s++)
        maxn = series[s].n > maxn ? series[s].n : maxn;
    PLFLT *xs = malloc((size_t)maxn * sizeof *xs), *ys = malloc((size_t)maxn * sizeof *ys);
    bool mem_ok = legend_alloc(&L, n_series) && xs && ys;
    for (int s = 0; mem_ok && s < n_series; s++) {
        const cg_plot_series *S = &series[s];
        uint32_t col = S->color
                           ? S->color
                           : PALETTE[next_palette++ % (int)(sizeof PALETTE / sizeof PALETTE[0])];
        double width = chart_series(&c, S, s, col, xs, ys);
        if (S->name && *S->name)
            legend_add(&L, S, s, width, c.fs);
    }
    plwidth(1);
    if (mem_ok && L.n > 0)
        mem_ok = legend_draw(&L, c.fs);
    legend_free(&L);
    free(xs);
    free(ys);
    bool ok = cg_plot_end(&out, who);
    if (ok && !mem_ok) {
        cg_set_error("%s: out of memory", who);
        return false;
    }
    return ok;
}
