/* Heatmaps (cg_plot_heatmaps) and attention pictures (cg_plot_attention,
 * cg_plot_attention_of): panels, labels and colour bar, drawn on the canvas
 * of plot.c. */
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

/* ------------------------------------------------------------------ heatmaps */

/* The label of entry i of a panel axis, ready for PLplot, into out; returns
 * the number of characters (0: no label). */
static int panel_label(const char *const *strs, const uint32_t *cps, int i, char *out)
{
    char one[8];
    const char *s = NULL;
    if (strs) {
        s = strs[i];
    } else if (cps) {
        uint32_t c = cps[i];
        if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
            c = 0xFFFD;
        one[(size_t)cg_utf8_put(c, one)] = '\0';
        s = c ? one : "\xe2\x90\x80"; /* U+0000 as the NUL symbol */
    }
    return cg_plot_text(s, 14, out);
}

static int max_label_chars(const char *const *strs, const uint32_t *cps, int n)
{
    int m = 0;
    char buf[TEXT_BUF];
    for (int i = 0; i < n && (strs || cps); i++) {
        int k = panel_label(strs, cps, i, buf);
        m = k > m ? k : m;
    }
    return m;
}

/* A filled rectangle in world coordinates. */
static void fill_rect(double x0, double y0, double x1, double y1)
{
    PLFLT x[4] = {x0, x1, x1, x0}, y[4] = {y0, y0, y1, y1};
    plfill(4, x, y);
}

/* A heatmap picture's geometry: what the panels hold, the value scale, one
 * cell size for all panels, label sizes and steps, a panel's slot (labels,
 * title and map) and the page. */
typedef struct {
    int maxdim, max_rows, max_cols; /* the largest panel side, rows, columns */
    int rlab, clab, tlen;           /* the longest row label, column label, panel title */
    double lo, hi;                  /* the colour scale */
    int cell, step, step_c; /* cell side (pixels); a label every step rows, step_c columns */
    bool col_rotated;       /* column labels read upwards */
    double fs, rlab_w, clab_h, title_h, slot_w, slot_h, head_h, grid_w;
    int title_chars, W, H;
    char title[TEXT_BUF];
} heat;

enum { HEAT_FS_PANEL = 11, HEAT_FS_TITLE = 15, HEAT_GAP = 22, HEAT_MARGIN = 16, HEAT_BAR_W = 16 };

/* The panels checked; their sizes, label lengths and the finite values'
 * range (h->lo, h->hi) measured. */
static bool heat_scan(heat *h, const char *who, int np, const cg_heatmap_panel *panels)
{
    char text[TEXT_BUF];
    h->maxdim = 1;
    h->lo = INFINITY;
    h->hi = -INFINITY;
    for (int p = 0; p < np; p++) {
        const cg_heatmap_panel *P = &panels[p];
        if (P->rows == 0 && P->cols == 0)
            continue;
        if (P->rows <= 0 || P->cols <= 0 || P->rows > 4096 || P->cols > 4096 || !P->values) {
            cg_set_error("%s: panel %d is %d x %d with values %s (need 1..4096 each)", who, p,
                         P->rows, P->cols, P->values ? "given" : "NULL");
            return false;
        }
        h->maxdim = P->rows > h->maxdim ? P->rows : h->maxdim;
        h->maxdim = P->cols > h->maxdim ? P->cols : h->maxdim;
        h->max_rows = P->rows > h->max_rows ? P->rows : h->max_rows;
        h->max_cols = P->cols > h->max_cols ? P->cols : h->max_cols;
        int r = max_label_chars(P->row_labels, P->row_chars, P->rows);
        int cl = max_label_chars(P->col_labels, P->col_chars, P->cols);
        h->rlab = r > h->rlab ? r : h->rlab;
        h->clab = cl > h->clab ? cl : h->clab;
        int t = cg_plot_text(P->title, 60, text);
        h->tlen = t > h->tlen ? t : h->tlen;
        for (long i = 0; i < (long)P->rows * P->cols; i++) {
            float v = P->values[i];
            if (isfinite(v)) {
                h->lo = fmin(h->lo, v);
                h->hi = fmax(h->hi, v);
            }
        }
    }
    if (h->max_rows == 0) {
        cg_set_error("%s: every panel is empty", who);
        return false;
    }
    return true;
}

/* One cell size for all panels, labels thinned out when cells are small,
 * and the page's size. */
static bool heat_layout(heat *h, const char *who, const char *title, int grid_rows, int grid_cols)
{
    int cell = 360 / h->maxdim;
    cell = cell < 2 ? 2 : cell > 18 ? 18 : cell;
    if ((h->rlab > 0 || h->clab > 0) && cell < 9) {
        /* labels want rows of 9 pixels: grow panels up to about 1000 pixels */
        int grown = 1000 / h->maxdim;
        cell = grown > 9 ? 9 : grown > cell ? grown : cell;
    }
    h->cell = cell;
    /* labels: 10 px, or down to 8 px to label every row of small cells;
     * rows of labels need their height and a pixel, upright single
     * characters their width */
    const double fs = cell >= 12 ? 10 : cell >= 11 ? 9 : 8;
    h->fs = fs;
    h->step = (int)ceil((fs + 1) / cell);
    h->col_rotated = h->clab > 1;
    h->step_c = h->col_rotated ? h->step : (int)ceil((fs * 0.62 + 2) / cell);
    h->rlab_w = h->rlab > 0 ? cg_plot_text_w(h->rlab, fs) + 6 : 0;
    h->clab_h = h->clab == 0 ? 0 : h->col_rotated ? cg_plot_text_w(h->clab, fs) + 8 : fs + 8;
    h->title_h = h->tlen > 0 ? HEAT_FS_PANEL + 8 : 0;
    double map_w = h->max_cols * cell, map_h = h->max_rows * cell;
    h->slot_w = h->rlab_w + map_w;
    h->slot_h = h->title_h + map_h + h->clab_h;
    /* a panel's title starts at its map, right of the row labels */
    if (h->rlab_w + cg_plot_text_w(h->tlen, HEAT_FS_PANEL) > h->slot_w)
        h->slot_w = h->rlab_w + cg_plot_text_w(h->tlen, HEAT_FS_PANEL);
    const double gap = HEAT_GAP, margin = HEAT_MARGIN;
    h->title_chars = cg_plot_text(title, 120, h->title);
    h->head_h = h->title_chars > 0 ? HEAT_FS_TITLE * 2.4 : 0;
    double bar_lab = cg_plot_text_w(6, fs) + 8;
    h->grid_w = grid_cols * h->slot_w + (grid_cols - 1) * gap;
    double Wd = margin + h->grid_w + 24 + HEAT_BAR_W + 6 + bar_lab + margin;
    double Hd = margin + h->head_h + grid_rows * h->slot_h + (grid_rows - 1) * gap + margin;
    if (cg_plot_text_w(h->title_chars, HEAT_FS_TITLE) + 2 * margin > Wd)
        Wd = cg_plot_text_w(h->title_chars, HEAT_FS_TITLE) + 2 * margin;
    h->W = (int)ceil(Wd);
    h->H = (int)ceil(Hd < 200 ? 200 : Hd);
    if ((double)h->W * h->H > 1e8) {
        cg_set_error("%s: the picture would be %d x %d pixels", who, h->W, h->H);
        return false;
    }
    return true;
}

/* Panel P in the slot at grid row gr, column gc: its cells, frame, title
 * and labels. */
static void heat_panel(const heat *h, const pl_out *out, const cg_heatmap_panel *P, int gr, int gc)
{
    char text[TEXT_BUF];
    const int cell = h->cell;
    double sx = HEAT_MARGIN + gc * (h->slot_w + HEAT_GAP),
           sy = HEAT_MARGIN + h->head_h + gr * (h->slot_h + HEAT_GAP);
    double mx = floor(sx + h->rlab_w), my = floor(sy + h->title_h);
    cg_plot_vp_px(out, mx, my, mx + P->cols * cell, my + P->rows * cell);
    plwind(0, P->cols, P->rows, 0);
    /* cells in row-major order, each widened by half a pixel to the
     * right and down so that anti-aliased edges leave no seams, but not
     * past the map (PLplot fills nothing of a polygon that encloses the
     * whole window: a 1 x 1 map stayed blank) */
    double e = 0.5 / cell;
    for (int r = 0; r < P->rows; r++) {
        for (int k = 0; k < P->cols; k++) {
            float v = P->values[(size_t)r * (size_t)P->cols + (size_t)k];
            cg_plot_use_color(isfinite(v) ? cg_plot_colormap((float)((v - h->lo) / (h->hi - h->lo)))
                                          : (uint32_t)NAN_GREY);
            fill_rect(k, r, fmin(k + 1 + e, P->cols), fmin(r + 1 + e, P->rows));
        }
    }
    plcol0(C_AXIS);
    plwidth(1);
    plbox("bc", 0, 0, "bc", 0, 0);
    plcol0(C_TEXT);
    if (cg_plot_text(P->title, 60, text) > 0) {
        cg_plot_font_px(HEAT_FS_PANEL);
        plmtex("t", 0.9, 0.0, 0.0, text);
    }
    cg_plot_font_px(h->fs);
    /* row labels left of the rows, right-aligned */
    for (int r = 0; r < P->rows && h->rlab > 0; r += h->step) {
        if (panel_label(P->row_labels, P->row_chars, r, text) > 0)
            plmtex("lv", 0.4, 1.0 - (r + 0.5) / P->rows, 1.0, text);
    }
    /* column labels below: upright when single characters, else
     * rotated to read upwards, ending at the map */
    for (int k = 0; k < P->cols && h->clab > 0; k += h->step_c) {
        if (panel_label(P->col_labels, P->col_chars, k, text) > 0) {
            if (h->col_rotated)
                plmtex("bv", 0.4, (k + 0.5) / P->cols, 1.0, text);
            else
                plmtex("b", 1.2, (k + 0.5) / P->cols, 0.5, text);
        }
    }
}

/* The colour bar right of the grid, with its tick labels. */
static void heat_colorbar(const heat *h, const pl_out *out, int grid_rows)
{
    char text[TEXT_BUF];
    const double lo = h->lo, hi = h->hi;
    double bx = HEAT_MARGIN + h->grid_w + 24, by0 = HEAT_MARGIN + h->head_h + h->title_h;
    double bh = grid_rows * h->slot_h + (grid_rows - 1) * HEAT_GAP - h->title_h - h->clab_h;
    bh = bh > 300 ? 300 : bh < 60 ? 60 : bh;
    cg_plot_vp_px(out, floor(bx), floor(by0), floor(bx) + HEAT_BAR_W, floor(by0) + floor(bh));
    plwind(0, 1, lo, hi);
    int strips = (int)floor(bh);
    for (int i = 0; i < strips; i++) {
        double a = lo + (hi - lo) * i / strips, b = lo + (hi - lo) * (i + 1.5) / strips;
        cg_plot_use_color(cg_plot_colormap((float)((i + 0.5) / strips)));
        fill_rect(0, a, 1, b > hi ? hi : b);
    }
    double bstep = cg_plot_nice_step((hi - lo) / 4);
    plcol0(C_AXIS);
    plbox("bc", 0, 0, "bct", bstep, 0);
    plcol0(C_TEXT);
    cg_plot_font_px(h->fs);
    for (double v = ceil(lo / bstep - 1e-6) * bstep; v <= hi + bstep * 1e-6; v += bstep) {
        cg_plot_label_linear(PL_Y_AXIS, v, text, sizeof text, &bstep);
        plmtex("rv", 0.6, (v - lo) / (hi - lo), 0.0, text);
    }
}

typedef struct {
    const char *path;
    const heat *h;
    int grid_rows, grid_cols;
    const cg_heatmap_panel *panels;
} heat_job;
static bool heat_draw(void *arg);

static bool heat_plot(const char *path, const char *title, int grid_rows, int grid_cols,
                      const cg_heatmap_panel *panels, float vmin, float vmax);
bool cg_plot_heatmaps(const char *path, const char *title, int grid_rows, int grid_cols,
                      const cg_heatmap_panel *panels, float vmin, float vmax)
{
    pthread_mutex_lock(&cg_plot_lock);
    bool ok = heat_plot(path, title, grid_rows, grid_cols, panels, vmin, vmax);
    pthread_mutex_unlock(&cg_plot_lock);
    return ok;
}

/* cg_plot_heatmaps under cg_plot_lock: checked and laid out here, drawn in a
 * child process. */
static bool heat_plot(const char *path, const char *title, int grid_rows, int grid_cols,
                      const cg_heatmap_panel *panels, float vmin, float vmax)
{
    static const char who[] = "cg_plot_heatmaps";
    if (!path || !*path) {
        cg_set_error("%s: path is NULL or empty", who);
        return false;
    }
    if (grid_rows <= 0 || grid_cols <= 0 || !panels || grid_rows > 64 || grid_cols > 64) {
        cg_set_error("%s: need 1..64 x 1..64 panels (got %d x %d, panels %s)", who, grid_rows,
                     grid_cols, panels ? "given" : "NULL");
        return false;
    }
    heat h = {0};
    if (!heat_scan(&h, who, grid_rows * grid_cols, panels))
        return false;
    if (vmin < vmax) {
        h.lo = vmin;
        h.hi = vmax;
    } else if (!(h.lo <= h.hi)) {
        h.lo = 0;
        h.hi = 1;
    } else if (h.lo == h.hi) {
        h.hi = h.lo + 1;
    }
    if (!heat_layout(&h, who, title, grid_rows, grid_cols))
        return false;
    /* the child's copy of the input (cg_plot_draw_apart) */
    const int np = grid_rows * grid_cols;
    plot_copies k = {0};
    cg_heatmap_panel *cp =
        (cg_heatmap_panel *)cg_plot_copy(&k, panels, (size_t)np * sizeof *panels);
    for (int i = 0; cp && i < np; i++) {
        const cg_heatmap_panel *P = &panels[i];
        if (P->rows == 0 && P->cols == 0)
            continue;
        cp[i].title = cg_plot_copy_str(&k, P->title);
        cp[i].values =
            cg_plot_copy(&k, P->values, (size_t)P->rows * (size_t)P->cols * sizeof(float));
        cp[i].row_labels = cg_plot_copy_strs(&k, P->row_labels, P->rows);
        cp[i].col_labels = cg_plot_copy_strs(&k, P->col_labels, P->cols);
        cp[i].row_chars = cg_plot_copy(&k, P->row_chars, (size_t)P->rows * sizeof(uint32_t));
        cp[i].col_chars = cg_plot_copy(&k, P->col_chars, (size_t)P->cols * sizeof(uint32_t));
    }
    const char *cpath = cg_plot_copy_str(&k, path);
    bool ok = !k.failed && cp && cpath;
    if (!ok)
        cg_set_error("%s: out of memory", who);
    heat_job job = {cpath, &h, grid_rows, grid_cols, cp};
    ok = ok && cg_plot_draw_apart(who, path, heat_draw, &job);
    cg_plot_copies_free(&k);
    return ok;
}

/* The heatmaps drawn and written (in the drawing process). */
static bool heat_draw(void *arg)
{
    static const char who[] = "cg_plot_heatmaps";
    const heat_job *job = arg;
    const heat h = *job->h;
    const int grid_rows = job->grid_rows, grid_cols = job->grid_cols;
    const cg_heatmap_panel *panels = job->panels;
    pl_out out;
    if (!cg_plot_begin(&out, who, job->path, h.W, h.H, 0, true))
        return false;
    if (h.title_chars > 0) {
        plcol0(C_TEXT);
        cg_plot_text_px(&out, h.W / 2.0, HEAT_MARGIN + HEAT_FS_TITLE * 0.7, 0.5, HEAT_FS_TITLE,
                        h.title);
    }
    for (int gr = 0; gr < grid_rows; gr++) {
        for (int gc = 0; gc < grid_cols; gc++) {
            const cg_heatmap_panel *P = &panels[gr * grid_cols + gc];
            if (P->rows != 0 || P->cols != 0)
                heat_panel(&h, &out, P, gr, gc);
        }
    }
    heat_colorbar(&h, &out, grid_rows);
    return cg_plot_end(&out, who);
}

bool cg_plot_attention(const char *path, const char *title, int layers, int heads, int rows,
                       int cols, const float *weights, const char *const *row_labels,
                       const char *const *col_labels)
{
    if (layers <= 0 || heads <= 0 || rows <= 0 || cols <= 0 || !weights) {
        cg_set_error("cg_plot_attention: %d layers x %d heads of %d x %d weights (%s): need "
                     "positive sizes and weights",
                     layers, heads, rows, cols, weights ? "given" : "NULL");
        return false;
    }
    if (layers > 64 || heads > 64) {
        cg_set_error("cg_plot_attention: %d layers x %d heads (at most 64 x 64)", layers, heads);
        return false;
    }
    int n = layers * heads;
    cg_heatmap_panel *p = calloc((size_t)n, sizeof *p);
    char(*titles)[40] = calloc((size_t)n, sizeof *titles);
    if (!p || !titles) {
        free(p);
        free(titles);
        cg_set_error("cg_plot_attention: out of memory");
        return false;
    }
    for (int l = 0; l < layers; l++) {
        for (int h = 0; h < heads; h++) {
            int i = l * heads + h;
            snprintf(titles[i], sizeof titles[i], "layer %d head %d", l, h);
            p[i] = (cg_heatmap_panel){.title = titles[i],
                                      .rows = rows,
                                      .cols = cols,
                                      .values = weights + (size_t)i * (size_t)rows * (size_t)cols,
                                      .row_labels = row_labels,
                                      .col_labels = col_labels};
        }
    }
    bool ok = cg_plot_heatmaps(path, title, layers, heads, p, 0.0f, 1.0f);
    free(p);
    free(titles);
    return ok;
}

bool cg_plot_attention_of(const char *path, const char *title, int layers, cg_mha *const *mods,
                          int rows, int cols, const char *const *row_labels,
                          const char *const *col_labels)
{
    if (layers < 1 || !mods) {
        cg_set_error("the model has no attention layers to draw");
        return false;
    }
    if (rows < 1 || cols < 1) {
        cg_set_error("cg_plot_attention_of: %d x %d weights (need positive sizes)", rows, cols);
        return false;
    }
    const unsigned long serial = cg_error_serial();
    int64_t H = mods[0]->H, each = H * rows * cols;
    float *w = malloc((size_t)(layers * each) * sizeof *w), *all = NULL;
    if (!w) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = true;
    for (int l = 0; ok && l < layers; l++) {
        /* the last rows queries over the last cols keys of [1, H, R, C] */
        const cg_tensor *t = mods[l]->weights;
        ok = t && t->ndim == 4 && t->shape[0] == 1 && t->shape[1] == H && t->shape[2] >= rows &&
             t->shape[3] >= cols;
        int64_t R = ok ? t->shape[2] : 0, C = ok ? t->shape[3] : 0;
        float *grown = ok ? realloc(all, (size_t)(H * R * C) * sizeof *all) : NULL;
        if (ok && !grown)
            cg_set_error("out of memory");
        all = grown ? grown : all;
        ok = ok && grown && cg_copy_to(t, all);
        for (int64_t h = 0; ok && h < H; h++)
            for (int64_t r = 0; r < rows; r++)
                memcpy(w + l * each + (h * rows + r) * cols,
                       all + (h * R + R - rows + r) * C + C - cols, (size_t)cols * sizeof *w);
        if (!ok && cg_error_serial() == serial)
            cg_set_error("attention weights of layer %d were not recorded", l);
    }
    ok =
        ok && cg_plot_attention(path, title, layers, (int)H, rows, cols, w, row_labels, col_labels);
    free(all);
    free(w);
    return ok;
}
