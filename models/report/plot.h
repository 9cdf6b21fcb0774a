/* cgrad zoo: pictures for people to look at: loss curves and attention
 * heatmaps, drawn with PLplot (its cairo driver for PNG, its SVG driver for
 * SVG; text in the system's sans-serif font, DejaVu Sans on Debian). The
 * format follows the file name: "*.png" or "*.svg" (any case); any other
 * name is an error.
 *
 * Text (titles, legend entries, labels) is UTF-8; invalid bytes are shown as
 * U+FFFD, control characters as visible symbols, and very long strings are
 * shortened with an ellipsis. PLplot's escape character needs no care.
 *
 * Files are written atomically: to a temporary file in the same directory,
 * then renamed over `path`. Every function returns true on success, or false
 * with a message in the error slot (cg_last_error) and no file changed.
 * PLplot keeps global state: the functions may be called any number of times
 * and from several threads (they take turns on one lock); each picture uses
 * a PLplot stream of its own and restores the caller's current stream. They
 * print nothing. */
#ifndef CG_PLOT_H
#define CG_PLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "nn/attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One line of a chart. x may be NULL (then x = 0, 1, ..., n-1). Points with
 * a non-finite coordinate (or y <= 0 on a log axis) are skipped and break the
 * line. color is 0xRRGGBB, or 0 for the next colour of the built-in palette.
 * name (UTF-8) appears in the legend; NULL or "" leaves the series out.
 * width is the line width in pixels (0: 1.8); marker > 0 also draws a dot of
 * that diameter (pixels) at every point, and in the legend. */
typedef struct {
    const char *name;
    const float *x;
    const float *y;
    int n;
    uint32_t color;
    float width;
    float marker;
} cg_plot_series;

enum { CG_PLOT_Y_AUTO = 0, CG_PLOT_Y_LINEAR = 1, CG_PLOT_Y_LOG = 2 };

typedef struct {
    const char *title;  /* NULL: none */
    const char *xlabel; /* NULL: none */
    const char *ylabel; /* NULL: none */
    int y_scale;        /* CG_PLOT_Y_AUTO: logarithmic when all y > 0 and
                           max/min >= 10, else linear */
    int width, height;  /* pixels; 0 = 900 x 560 */
} cg_plot_opts;

/* A line chart: axes with "nice" ranges and numbered ticks (1-2-5 steps; 1,
 * 2, 5 times powers of ten on a log axis), a grid, and a legend in the top
 * right corner. xlabel "step", ylabel "loss",
 * y_scale AUTO. */
bool cg_plot_loss_curve(const char *path, const char *title, int n_series,
                        const cg_plot_series *series);
/* The same with every option given (opts may be NULL for the defaults). */
bool cg_plot_lines(const char *path, const cg_plot_opts *opts, int n_series,
                   const cg_plot_series *series);

/* One heatmap: values[r * cols + c] drawn as a rows x cols grid of cells
 * (e.g. attention of query r on key c). Labels are optional: either UTF-8
 * strings (row_labels[r], col_labels[c]: characters or subword pieces such
 * as "\u2581Haus"; NULL entries are left blank; more than 14 characters are
 * shortened) or code points (row_chars, col_chars). A label that is a single
 * space is drawn as U+2423, newlines and tabs as arrows. Column labels of
 * more than one character are written upwards. When cells are too small for
 * every label, every k-th is written. A panel with
 * rows == 0 and cols == 0 is an empty slot in the grid. NaN cells are grey. */
typedef struct {
    const char *title;
    int rows, cols;
    const float *values;
    const char *const *row_labels;
    const char *const *col_labels;
    const uint32_t *row_chars;
    const uint32_t *col_chars;
} cg_heatmap_panel;

/* grid_rows x grid_cols panels (panels[i * grid_cols + j], e.g. layer i,
 * head j) in one image under `title`, with a colour bar. Colours run from
 * dark blue-violet (vmin) through teal and green to yellow (vmax). If
 * vmin < vmax the scale is [vmin, vmax] (values outside are clamped),
 * otherwise it spans the finite values of all panels. */
bool cg_plot_heatmaps(const char *path, const char *title, int grid_rows, int grid_cols,
                      const cg_heatmap_panel *panels, float vmin, float vmax);

/* Attention weights of every layer and head in one picture: a grid of
 * `layers` rows by `heads` columns of panels titled "layer l head h", each
 * rows x cols (queries x keys), on the scale [0, 1]. weights holds
 * layers * heads * rows * cols values, [layer][head][query][key] row-major
 * (the layout of the per-layer [1, H, Tq, Tk] weight tensors laid end to
 * end). row_labels[rows] and col_labels[cols] are UTF-8 token strings
 * (characters or subword pieces; either may be NULL). */
bool cg_plot_attention(const char *path, const char *title, int layers, int heads, int rows,
                       int cols, const float *weights, const char *const *row_labels,
                       const char *const *col_labels);

/* cg_plot_attention of what the attention modules mods[0..layers) kept
 * from their last forward (cg_module_keep_attention_weights): of each one's
 * weights [1, H, R, C] (H from mods[0]) the last rows queries over the last
 * cols keys (R >= rows, C >= cols: the end of a longer context, as the
 * model saw it). False + error when a module recorded none or too few. */
bool cg_plot_attention_of(const char *path, const char *title, int layers, cg_mha *const *mods,
                          int rows, int cols, const char *const *row_labels,
                          const char *const *col_labels);

/* The picture format of path, from its name: "png" or "svg" (any case),
 * else NULL + error "PATH: unknown picture format (the name must end in
 * .png or .svg)". Every function here refuses such a name; a caller can
 * ask before the work that makes the picture. */
const char *cg_plot_format(const char *path);

/* The colour of t in [0, 1] on the heatmap scale, as 0xRRGGBB. */
uint32_t cg_plot_colormap(float t);

#ifdef __cplusplus
}
#endif
#endif
