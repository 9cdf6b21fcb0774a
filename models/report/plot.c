/* Charts for the zoo: loss curves and attention heatmaps (see plot.h), drawn
 * with PLplot's C API: its cairo driver ("pngcairo", text set by pango with
 * the system's fonts) for PNG, its own "svg" driver (text kept as <text>
 * elements) for SVG.
 *
 * Every picture is drawn in a child process (fork), which writes the file
 * and exits: PLplot, cairo, pango and fontconfig never run in the caller's
 * process, so their failures (a GLib abort creating a thread, a segfault in
 * fontconfig under an address-space limit) end the child only, and come
 * back as an error. Each picture is made under one mutex, the checks and
 * the layout in the caller included: no thread of cgrad's allocates while
 * another forks (a sanitizer's allocator without fork handlers, GCC 12's
 * ASan, could leave its lock taken in the child). In the child the picture is a
 * stream of its own (plmkstrm ... plend1). The driver writes into a memory stream
 * (open_memstream), which PLplot closes at plend1; the bytes are then written
 * to a temporary file next to the target, fsync'd and renamed over it.
 * PLplot's own error reports (plabort) go to a buffer through plsError, and
 * every input is checked here first, so that PLplot prints nothing and never
 * reaches its exit() path (plexit). */
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
#include "nn/safetensors.h"

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

static const uint32_t PALETTE[] = {0x1F5FBF, 0xE8601C, 0x2CA02C, 0xC62839, 0x8E63B5,
                                   0x8C564B, 0xD561B5, 0x7F7F7F, 0xA8A81E, 0x17A8BD};

/* Colour scale: piecewise-linear through hand-picked stops from dark
 * blue-violet through blue, teal and green to yellow (perceptually ordered,
 * readable in grey). */
uint32_t cg_plot_colormap(float t)
{
    static const float stops[][3] = {
        {68, 1, 84},    {71, 44, 122}, {59, 81, 139},  {44, 113, 142}, {33, 144, 141},
        {39, 173, 129}, {92, 200, 99}, {170, 220, 50}, {253, 231, 37},
    };
    const int n = (int)(sizeof stops / sizeof stops[0]);
    if (!(t >= 0))
        t = 0; /* also NaN */
    if (t > 1)
        t = 1;
    float pos = t * (float)(n - 1);
    int i = (int)pos;
    if (i >= n - 1)
        i = n - 2;
    float f = pos - (float)i;
    uint32_t rgb = 0;
    for (int k = 0; k < 3; k++) {
        float v = stops[i][k] + f * (stops[i + 1][k] - stops[i][k]);
        rgb = (rgb << 8) | (uint32_t)lrintf(v);
    }
    return rgb;
}

/* ------------------------------------------------------------------ text */

/* Decode one UTF-8 sequence at *s (NUL-terminated; strict); invalid bytes
 * give U+FFFD and advance by one. */
static uint32_t utf8_next(const unsigned char **s)
{
    uint32_t c;
    int k = cg_utf8_seq(*s, strnlen((const char *)*s, 4), &c);
    *s += k ? k : 1;
    return k ? c : 0xFFFD;
}

enum { TEXT_MAX_CP = 160, TEXT_BUF = TEXT_MAX_CP * 8 + 16 };

/* Text as PLplot is to draw it, into out[TEXT_BUF]: valid UTF-8 (bad bytes
 * become U+FFFD), PLplot's escape character '#' doubled, newlines, tabs and
 * other control characters shown as visible symbols (as is a label that is a
 * single space), at most max_cp characters (more end in an ellipsis).
 * Returns the number of characters shown. */
static int pl_text(const char *in, int max_cp, char *out)
{
    size_t n = 0;
    int shown = 0;
    if (max_cp > TEXT_MAX_CP)
        max_cp = TEXT_MAX_CP;
    out[0] = '\0';
    if (!in)
        return 0;
    if (in[0] == ' ' && in[1] == '\0')
        in = "\xe2\x90\xa3"; /* U+2423 OPEN BOX */
    const unsigned char *p = (const unsigned char *)in;
    while (*p) {
        uint32_t c = utf8_next(&p);
        if (shown == max_cp - 1 && *p) {
            n += (size_t)cg_utf8_put(0x2026, out + n);
            shown++;
            break;
        }
        if (c == '\n')
            c = 0x21B5;
        else if (c == '\t')
            c = 0x2192;
        else if (c < 0x20 || (c >= 0x7F && c < 0xA0))
            c = 0xFFFD;
        if (c == '#')
            out[n++] = '#';
        n += (size_t)cg_utf8_put(c, out + n);
        shown++;
    }
    out[n] = '\0';
    return shown;
}

/* ------------------------------------------------------------------ output */

static pthread_mutex_t pl_lock = PTHREAD_MUTEX_INITIALIZER;

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

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

static bool device_available(const char *dev)
{
    enum { MAX_DEVS = 128 };
    const char *menu[MAX_DEVS], *names[MAX_DEVS];
    const char **pm = menu, **pn = names;
    int n = MAX_DEVS;
    plgDevs(&pm, &pn, &n);
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], dev) == 0)
            return true;
    return false;
}

static void set_color(PLINT slot, uint32_t rgb)
{
    plscol0(slot, (PLINT)(rgb >> 16), (PLINT)((rgb >> 8) & 0xFF), (PLINT)(rgb & 0xFF));
}

static void use_color(uint32_t rgb)
{
    set_color(C_FILL, rgb);
    plcol0(C_FILL);
}

/* Character height in pixels (the drivers work at 72 dpi: 1 pt = 1 px). */
static void font_px(double px) { plschr(px * 25.4 / 72.0, 1.0); }

/* Start a page of W x H pixels (in the drawing process); the format comes
 * from the file name. crisp: no anti-aliasing of shapes in PNG (heatmaps,
 * whose cells lie on whole pixels: faster, and sharp cell edges; text stays
 * anti-aliased). On failure: false + error. */
static bool pl_begin(pl_out *o, const char *who, const char *path, int W, int H, int n_colors,
                     bool crisp)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    o->W = W;
    o->H = H;
    const char *dev = ends_with(path, ".png") ? "pngcairo" : ends_with(path, ".svg") ? "svg" : NULL;
    if (!dev) {
        cg_set_error("%s: %s: unknown picture format (the name must end in .png or .svg)", who,
                     path);
        return false;
    }
    static int have[2] = {-1, -1}; /* pngcairo, svg: unknown / no / yes */
    int *h = &have[dev[0] == 's'];
    if (*h < 0)
        *h = device_available(dev);
    if (!*h) {
        cg_set_error("%s: PLplot's %s driver is not installed (apt-get install %s)", who, dev,
                     dev[0] == 'p' ? "plplot-driver-cairo" : "libplplot17");
        return false;
    }
    FILE *mem = open_memstream(&o->buf, &o->len);
    if (!mem) {
        cg_set_error("%s: out of memory", who);
        return false;
    }
    PLINT strm;
    plgstrm(&o->prev_stream);
    plmkstrm(&strm);
    if (strm < 0) {
        fclose(mem);
        free(o->buf);
        plsstrm(o->prev_stream);
        cg_set_error("%s: PLplot has no free stream", who);
        return false;
    }
    plsError(&o->errcode, o->errmsg);
    plsdev(dev);
    if (crisp && dev[0] == 'p')
        plsetopt("drvopt", "graphics_anti_aliasing=1"); /* CAIRO_ANTIALIAS_NONE */
    plsfile(mem);                                       /* PLplot closes it in plend1 */
    plspage(0, 0, W, H, 0, 0);
    plscmap0n(C_SERIES0 + n_colors + 1);
    set_color(C_BG, WHITE);
    set_color(C_TEXT, TEXT);
    set_color(C_GRID, GRID);
    set_color(C_AXIS, AXIS);
    set_color(C_LEGEND_BG, WHITE);
    plinit();
    pladv(0);
    plcol0(C_TEXT);
    return true;
}

/* Write the bytes atomically: temporary file, fsync, rename. */
static bool write_atomic(const char *who, const char *path, const char *buf, size_t len)
{
    size_t lp = strlen(path);
    char *tmp = malloc(lp + 32);
    if (!tmp) {
        cg_set_error("%s: out of memory", who);
        return false;
    }
    /* "<path>.tmp.<pid>.<n>" (n: this process's count, so that threads
     * drawing the same picture do not share one): a writer killed mid-write
     * leaves one, removed by the next successful write
     * (cg_st_remove_stale_temps) */
    static _Atomic unsigned long seq;
    snprintf(tmp, lp + 32, "%s.tmp.%ld.%lu", path, (long)getpid(), ++seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        cg_set_error("%s: cannot create a temporary file next to %s: %s", who, path,
                     strerror(errno));
        free(tmp);
        return false;
    }
    int err = cg_write_all(fd, buf, len) < len ? errno : 0;
    if (!err && fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    if (err) {
        cg_set_error("%s: writing %s failed: %s", who, tmp, strerror(err));
        unlink(tmp);
        free(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        cg_set_error("%s: cannot rename %s to %s: %s", who, tmp, path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return false;
    }
    free(tmp);
    cg_st_remove_stale_temps(path);
    return true;
}

/* End the page, give the stream back and write the file. */
static bool pl_end(pl_out *o, const char *who)
{
    PLINT code = o->errcode;
    char msg[256];
    snprintf(msg, sizeof msg, "%.255s", o->errmsg);
    plend1(); /* closes the memory stream: o->buf, o->len are final */
    plsstrm(o->prev_stream);
    bool ok = true;
    if (code) {
        size_t k = strlen(msg);
        while (k > 0 && (msg[k - 1] == '\n' || msg[k - 1] == ' '))
            msg[--k] = '\0';
        cg_set_error("%s: PLplot: %s", who, msg[0] == '\n' ? msg + 1 : msg);
        ok = false;
    } else if (!o->buf || o->len == 0) {
        cg_set_error("%s: PLplot produced no output for %s", who, o->path);
        ok = false;
    }
    ok = ok && write_atomic(who, o->path, o->buf, o->len);
    free(o->buf);
    return ok;
}

/* Read the drawing child's output (its pipe fd) into out (cap bytes: the
 * first ones are kept) until the child closes it. False when that takes
 * more than DRAW_SECONDS: the child is killed then (a picture takes well
 * under a second; a child that hangs must not hang the caller). */
enum { DRAW_SECONDS = 300 };
static bool read_child(int fd, pid_t pid, char *out, size_t cap)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t n = 0;
    char skip[512];
    bool in_time = true;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double left =
            DRAW_SECONDS - (double)(t.tv_sec - t0.tv_sec) - 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int r = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            kill(pid, SIGKILL);
            in_time = false;
            break;
        }
        ssize_t k =
            r > 0 ? read(fd, n < cap - 1 ? out + n : skip, n < cap - 1 ? cap - 1 - n : sizeof skip)
                  : -1;
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += n < cap - 1 ? (size_t)k : 0;
    }
    out[n] = '\0';
    return in_time;
}

/* PLplot's plexit (a driver it cannot load under a memory limit, ...)
 * calls exit(), which in the child would run the caller's atexit handlers
 * and library destructors: the child reports the message and _exits. */
static const char *g_child_who = "cg_plot";
static int child_plexit(PLCHAR_VECTOR msg)
{
    dprintf(STDERR_FILENO, "\x1e%s: PLplot: %s", g_child_who, msg ? msg : "");
    _exit(1);
}

/* Run draw(arg) in a child process, which writes the picture `path` and
 * exits; the caller holds pl_lock. The child's stdout goes to
 * /dev/null and its stderr (where GLib and fontconfig complain) into a
 * pipe, with the child's error message last, after a 0x1e byte. A child
 * that fails or dies leaves no file: its temporary file is removed. */
static bool draw_apart(const char *who, const char *path, bool (*draw)(void *), void *arg)
{
    int p[2];
    if (pipe(p) != 0) {
        cg_set_error("%s: cannot draw %s: pipe: %s", who, path, strerror(errno));
        return false;
    }
    pid_t pid = fork();
    if (pid == 0) {               /* the child: one thread, a copy of the caller's memory */
        signal(SIGINT, SIG_IGN);  /* Ctrl-C reaches the whole group: the caller */
        signal(SIGTERM, SIG_IGN); /* decides, and waits for the picture */
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, STDOUT_FILENO) < 0 || dup2(p[1], STDERR_FILENO) < 0)
            _exit(1);
        close(p[0]);
        g_child_who = who;
        plsexit(child_plexit);
        bool ok = draw(arg);
        if (!ok)
            dprintf(STDERR_FILENO, "\x1e%s", cg_last_error());
        _exit(ok ? 0 : 1);
    }
    int fork_err = errno;
    close(p[1]);
    char out[2048] = "";
    bool in_time = pid < 0 || read_child(p[0], pid, out, sizeof out);
    close(p[0]);
    int status = 0;
    pid_t w = pid;
    while (pid > 0 && (w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (pid < 0) {
        cg_set_error("%s: cannot start the process that draws %s: %s", who, path,
                     strerror(fork_err));
        return false;
    }
    if (w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return true;
    cg_st_remove_stale_temps(path); /* the child's, if it died writing it */
    char *msg = strrchr(out, '\x1e');
    if (w == pid && WIFEXITED(status) && msg) {
        cg_set_error("%s", msg + 1);
        return false;
    }
    /* its first line of complaint, if any ("GLib-ERROR **: ... creating thread ...") */
    char *line = out + strspn(out, "\n ");
    line[strcspn(line, "\n")] = '\0';
    char how[64];
    if (!in_time)
        snprintf(how, sizeof how, "did not finish within %d s", (int)DRAW_SECONDS);
    else if (w != pid)
        snprintf(how, sizeof how, "was lost (%s)", strerror(errno));
    else if (WIFSIGNALED(status))
        snprintf(how, sizeof how, "died of signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
    cg_set_error("%s: the process drawing %s %s%s%s", who, path, how, *line ? ": " : "", line);
    return false;
}

/* Viewport from a pixel rectangle (x0, y0 top-left; x1, y1 bottom-right). */
static void vp_px(const pl_out *o, double x0, double y0, double x1, double y1)
{
    plvpor(x0 / o->W, x1 / o->W, 1.0 - y1 / o->H, 1.0 - y0 / o->H);
}

/* Text at pixel position (x, y = vertical centre) of the page. */
static void text_px(const pl_out *o, double x, double y, double just, double size_px, const char *s)
{
    vp_px(o, 0, 0, o->W, o->H);
    plwind(0, o->W, o->H, 0);
    font_px(size_px);
    plptex(x, y, 1, 0, just, s);
}

/* Rough width of n characters of DejaVu Sans at size px (pango's metrics are
 * not available before drawing; this errs on the wide side). */
static double text_w(int n, double px) { return n * 0.62 * px; }

/* ------------------------------------------------------------------ axes */

static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double m = raw / mag;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * mag;
}

/* [lo, hi] widened to multiples of a 1-2-5 step giving about `target`
 * intervals; *step receives the step. */
static void nice_range(double *lo, double *hi, int target, double *step)
{
    if (!(*hi > *lo)) {
        double d = *lo != 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= d;
        *hi += d;
    }
    double s = nice_step((*hi - *lo) / target);
    *lo = floor(*lo / s + 1e-9) * s;
    *hi = ceil(*hi / s - 1e-9) * s;
    *step = s;
}

static int decimals_for(double step)
{
    int d = 0;
    while (d < 8 && fabs(step * pow(10, d) - rint(step * pow(10, d))) > 1e-6 * step * pow(10, d))
        d++;
    return d;
}

/* Tick labels of a linear axis: as many decimals as the step needs; large
 * round numbers as 12k; very small steps and very large values in %g form.
 * data points to the step. */
static void label_linear(PLINT axis, PLFLT v, char *s, PLINT len, PLPointer data)
{
    (void)axis;
    double step = *(const double *)data;
    if (fabs(v) < step * 1e-6)
        v = 0;
    if (step < 1e-3 || fabs(v) >= 1e7)
        snprintf(s, (size_t)len, "%.3g", v);
    else if (fabs(v) >= 10000 && step >= 1000 && fmod(v, 1000) == 0)
        snprintf(s, (size_t)len, "%.0fk", v / 1000);
    else
        snprintf(s, (size_t)len, "%.*f", decimals_for(step), v);
}

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
 * more than 4 decades, powers of ten only (every k-th over more than 8). */
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
        for (int e = (int)floor(lo); e <= (int)ceil(hi) && n < cap; e += every) {
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
    nice_range(&xmin, &xmax, c->W < 600 ? 4 : 8, &c->xstep);
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
        nice_range(&c->ylo, &c->yhi, c->H < 400 ? 4 : 6, &c->ystep);
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
            label_linear(PL_Y_AXIS, c->ylo + i * c->ystep, tick, sizeof tick, &c->ystep);
            c->ylab_chars = (int)strlen(tick) > c->ylab_chars ? (int)strlen(tick) : c->ylab_chars;
        }
    }
    const double fs = c->fs;
    c->has_title = o->title && *o->title;
    c->has_xl = o->xlabel && *o->xlabel;
    c->has_yl = o->ylabel && *o->ylabel;
    c->top = c->has_title ? c->fs_title * 2.6 : fs * 1.5;
    double left = 12 + (c->has_yl ? fs * 2.4 : 0) + text_w(c->ylab_chars, fs) + fs * 0.7;
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
        pl_text(o->title, 120, text);
        plcol0(C_TEXT);
        text_px(out, c->W / 2.0, c->top * 0.45, 0.5, c->fs_title, text);
    }
    vp_px(out, c->px0, c->py0, c->px1, c->py1);
    plwind(c->wx0, c->wx1, c->wy0, c->wy1);
    font_px(c->fs);
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
        label_linear(PL_X_AXIS, c->xmin + i * c->xstep, tick, sizeof tick, (PLPointer)&c->xstep);
        plmtex("b", 1.5, (c->xmin + i * c->xstep - c->wx0) / (c->wx1 - c->wx0), 0.5, tick);
    }
    if (c->logy) {
        for (int i = 0; i < c->nyt; i++) {
            snprintf(tick, sizeof tick, "%g", pow(10, c->yt[i]));
            plmtex("lv", 0.7, (c->yt[i] - c->wy0) / (c->wy1 - c->wy0), 1.0, tick);
        }
    } else {
        for (int i = 0; c->ylo + i * c->ystep <= c->yhi + c->ystep * 1e-6; i++) {
            label_linear(PL_Y_AXIS, c->ylo + i * c->ystep, tick, sizeof tick, (PLPointer)&c->ystep);
            plmtex("lv", 0.7, (c->ylo + i * c->ystep - c->wy0) / (c->wy1 - c->wy0), 1.0, tick);
        }
    }
    if (c->has_xl) {
        pl_text(o->xlabel, 80, text);
        plmtex("b", 3.3, 0.5, 0.5, text);
    }
    if (c->has_yl) {
        pl_text(o->ylabel, 80, text);
        double disp = (text_w(c->ylab_chars, c->fs) + c->fs * 0.7) / c->fs + 1.4;
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
    set_color(C_SERIES0 + s, col);
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
    pl_text(S->name, 60, L->name_buf[e]);
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
    font_px(fs);
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
    pthread_mutex_lock(&pl_lock);
    bool ok = lines_plot(path, opts, n_series, series);
    pthread_mutex_unlock(&pl_lock);
    return ok;
}

/* cg_plot_lines under pl_lock: the input checked and laid out here, drawn
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
    lines_job job = {path, &o, n_series, series, &c};
    return draw_apart(who, path, lines_draw, &job);
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
    if (!pl_begin(&out, who, job->path, c.W, c.H, n_series, false))
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
    bool ok = pl_end(&out, who);
    if (ok && !mem_ok) {
        cg_set_error("%s: out of memory", who);
        return false;
    }
    return ok;
}

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
    return pl_text(s, 14, out);
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
        int t = pl_text(P->title, 60, text);
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
    h->rlab_w = h->rlab > 0 ? text_w(h->rlab, fs) + 6 : 0;
    h->clab_h = h->clab == 0 ? 0 : h->col_rotated ? text_w(h->clab, fs) + 8 : fs + 8;
    h->title_h = h->tlen > 0 ? HEAT_FS_PANEL + 8 : 0;
    double map_w = h->max_cols * cell, map_h = h->max_rows * cell;
    h->slot_w = h->rlab_w + map_w;
    h->slot_h = h->title_h + map_h + h->clab_h;
    if (text_w(h->tlen, HEAT_FS_PANEL) > h->slot_w)
        h->slot_w = text_w(h->tlen, HEAT_FS_PANEL);
    const double gap = HEAT_GAP, margin = HEAT_MARGIN;
    h->title_chars = pl_text(title, 120, h->title);
    h->head_h = h->title_chars > 0 ? HEAT_FS_TITLE * 2.4 : 0;
    double bar_lab = text_w(6, fs) + 8;
    h->grid_w = grid_cols * h->slot_w + (grid_cols - 1) * gap;
    double Wd = margin + h->grid_w + 24 + HEAT_BAR_W + 6 + bar_lab + margin;
    double Hd = margin + h->head_h + grid_rows * h->slot_h + (grid_rows - 1) * gap + margin;
    if (text_w(h->title_chars, HEAT_FS_TITLE) + 2 * margin > Wd)
        Wd = text_w(h->title_chars, HEAT_FS_TITLE) + 2 * margin;
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
    vp_px(out, mx, my, mx + P->cols * cell, my + P->rows * cell);
    plwind(0, P->cols, P->rows, 0);
    /* cells in row-major order, each widened by half a pixel to the
     * right and down so that anti-aliased edges leave no seams */
    double e = 0.5 / cell;
    for (int r = 0; r < P->rows; r++) {
        for (int k = 0; k < P->cols; k++) {
            float v = P->values[(size_t)r * (size_t)P->cols + (size_t)k];
            use_color(isfinite(v) ? cg_plot_colormap((float)((v - h->lo) / (h->hi - h->lo)))
                                  : (uint32_t)NAN_GREY);
            fill_rect(k, r, k + 1 + e, r + 1 + e);
        }
    }
    plcol0(C_AXIS);
    plwidth(1);
    plbox("bc", 0, 0, "bc", 0, 0);
    plcol0(C_TEXT);
    if (pl_text(P->title, 60, text) > 0) {
        font_px(HEAT_FS_PANEL);
        plmtex("t", 0.9, 0.0, 0.0, text);
    }
    font_px(h->fs);
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
    vp_px(out, floor(bx), floor(by0), floor(bx) + HEAT_BAR_W, floor(by0) + floor(bh));
    plwind(0, 1, lo, hi);
    int strips = (int)floor(bh);
    for (int i = 0; i < strips; i++) {
        double a = lo + (hi - lo) * i / strips, b = lo + (hi - lo) * (i + 1.5) / strips;
        use_color(cg_plot_colormap((float)((i + 0.5) / strips)));
        fill_rect(0, a, 1, b > hi ? hi : b);
    }
    double bstep = nice_step((hi - lo) / 4);
    plcol0(C_AXIS);
    plbox("bc", 0, 0, "bct", bstep, 0);
    plcol0(C_TEXT);
    font_px(h->fs);
    for (double v = ceil(lo / bstep - 1e-6) * bstep; v <= hi + bstep * 1e-6; v += bstep) {
        label_linear(PL_Y_AXIS, v, text, sizeof text, &bstep);
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
    pthread_mutex_lock(&pl_lock);
    bool ok = heat_plot(path, title, grid_rows, grid_cols, panels, vmin, vmax);
    pthread_mutex_unlock(&pl_lock);
    return ok;
}

/* cg_plot_heatmaps under pl_lock: checked and laid out here, drawn in a
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
    heat_job job = {path, &h, grid_rows, grid_cols, panels};
    return draw_apart(who, path, heat_draw, &job);
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
    if (!pl_begin(&out, who, job->path, h.W, h.H, 0, true))
        return false;
    if (h.title_chars > 0) {
        plcol0(C_TEXT);
        text_px(&out, h.W / 2.0, HEAT_MARGIN + HEAT_FS_TITLE * 0.7, 0.5, HEAT_FS_TITLE, h.title);
    }
    for (int gr = 0; gr < grid_rows; gr++) {
        for (int gc = 0; gc < grid_cols; gc++) {
            const cg_heatmap_panel *P = &panels[gr * grid_cols + gc];
            if (P->rows != 0 || P->cols != 0)
                heat_panel(&h, &out, P, gr, gc);
        }
    }
    heat_colorbar(&h, &out, grid_rows);
    return pl_end(&out, who);
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
    int64_t H = mods[0]->H, each = H * rows * cols;
    float *w = malloc((size_t)(layers * each) * sizeof *w);
    if (!w) {
        cg_set_error("out of memory");
        return false;
    }
    bool ok = true;
    for (int l = 0; ok && l < layers; l++) {
        const cg_tensor *t = mods[l]->weights;
        ok = t && t->ndim == 4 && cg_numel(t) == each && t->shape[2] == rows &&
             t->shape[3] == cols && cg_copy_to(t, w + l * each);
        if (!ok && !cg_has_error())
            cg_set_error("attention weights of layer %d were not recorded", l);
    }
    ok =
        ok && cg_plot_attention(path, title, layers, (int)H, rows, cols, w, row_labels, col_labels);
    free(w);
    return ok;
}
