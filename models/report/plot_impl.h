/* cgrad zoo, INTERNAL: what the canvas (plot.c) gives the line chart
 * (plot_lines.c) and the heatmaps (plot_heat.c): colours, the picture being
 * drawn, text, placement in pixels and axis steps. Not installed. */
#ifndef CG_MODELS_PLOT_IMPL_H
#define CG_MODELS_PLOT_IMPL_H

#include <plplot.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    WHITE = 0xFFFFFF,
    BLACK = 0x000000,
    TEXT = 0x222222,
    GRID = 0xE2E2E2,
    AXIS = 0x555555,
    NAN_GREY = 0xC8C8C8
};

/* cmap0 slots: fixed colours first, then one per series; FILL is rewritten
 * for every heatmap cell. */
enum { C_BG = 0, C_TEXT, C_GRID, C_AXIS, C_FILL, C_LEGEND_BG, C_SERIES0 };

enum { TEXT_MAX_CP = 160, TEXT_BUF = TEXT_MAX_CP * 8 + 16 };

/* One picture being drawn: a PLplot stream writing into memory. */
typedef struct {
    const char *path;
    int W, H;
    PLINT prev_stream;
    char *buf;
    size_t len;
    PLINT errcode;
    char errmsg[2048]; /* PLplot sprintf()s into it */
} pl_out;

/* Held while a picture is checked, laid out and drawn (see plot.c). */
extern pthread_mutex_t cg_plot_lock;

/* Text as PLplot is to draw it, into out[TEXT_BUF]; the characters shown. */
int cg_plot_text(const char *in, int max_cp, char *out);
/* Start and end a page of W x H pixels in the drawing process. */
bool cg_plot_begin(pl_out *o, const char *who, const char *path, int W, int H, int n_colors,
                   bool crisp);
bool cg_plot_end(pl_out *o, const char *who);
/* Run draw(arg) in a child process that writes `path`; the caller holds
 * cg_plot_lock. The child has none of the tensor buffers
 * (cg_fork_without_buffers): what it reads of the caller's input is a copy
 * made first (plot_copies), since the caller's numbers may be a tensor's. */
bool cg_plot_draw_apart(const char *who, const char *path, bool (*draw)(void *), void *arg);
/* malloc'd copies of a picture's input for its drawing process, freed
 * together. A failed copy returns NULL and marks the set failed (out of
 * memory); NULL or 0 bytes copies to NULL. */
typedef struct {
    void **p;
    int n, cap;
    bool failed;
} plot_copies;
const void *cg_plot_copy(plot_copies *k, const void *src, size_t bytes);
const char *cg_plot_copy_str(plot_copies *k, const char *s);
/* An array of n strings, each copied (NULL entries stay NULL). */
const char *const *cg_plot_copy_strs(plot_copies *k, const char *const *s, int n);
void cg_plot_copies_free(plot_copies *k);
void cg_plot_set_color(PLINT slot, uint32_t rgb);
void cg_plot_use_color(uint32_t rgb);
/* Character height in pixels. */
void cg_plot_font_px(double px);
/* Viewport from a pixel rectangle (x0, y0 top-left; x1, y1 bottom-right). */
void cg_plot_vp_px(const pl_out *o, double x0, double y0, double x1, double y1);
/* Text at pixel position (x, y = vertical centre) of the page. */
void cg_plot_text_px(const pl_out *o, double x, double y, double just, double size_px,
                     const char *s);
/* Rough width of n characters at size px. */
double cg_plot_text_w(int n, double px);
/* A 1-2-5 step near raw; [lo, hi] widened to multiples of such a step. */
double cg_plot_nice_step(double raw);
void cg_plot_nice_range(double *lo, double *hi, int target, double *step);
/* Tick labels of a linear axis (PLplot's label callback; data points to the step). */
void cg_plot_label_linear(PLINT axis, PLFLT v, char *s, PLINT len, PLPointer data);

#endif
