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
 * reaches its exit() path (plexit).
 *
 * This file is the canvas: colours, text, the drawing process, pixel
 * placement and axis steps. The line chart is plot_lines.c, the heatmaps
 * plot_heat.c; plot_impl.h is what they share. */
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
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/utf8.h"
#include "models/util/files.h"
#include "models/report/plot_impl.h"
#include "nn/safetensors.h"

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

/* Text as PLplot is to draw it, into out[TEXT_BUF]: valid UTF-8 (bad bytes
 * become U+FFFD), PLplot's escape character '#' doubled, newlines, tabs and
 * other control characters shown as visible symbols (as is a label that is a
 * single space), at most max_cp characters (more end in an ellipsis).
 * Returns the number of characters shown. */
int cg_plot_text(const char *in, int max_cp, char *out)
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

pthread_mutex_t cg_plot_lock = PTHREAD_MUTEX_INITIALIZER;

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcasecmp(s + n - k, suffix) == 0;
}

const char *cg_plot_format(const char *path)
{
    const char *f = ends_with(path, ".png") ? "png" : ends_with(path, ".svg") ? "svg" : NULL;
    if (!f)
        cg_set_error("%s: unknown picture format (the name must end in .png or .svg)", path);
    return f;
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

void cg_plot_set_color(PLINT slot, uint32_t rgb)
{
    plscol0(slot, (PLINT)(rgb >> 16), (PLINT)((rgb >> 8) & 0xFF), (PLINT)(rgb & 0xFF));
}

void cg_plot_use_color(uint32_t rgb)
{
    cg_plot_set_color(C_FILL, rgb);
    plcol0(C_FILL);
}

/* Character height in pixels (the drivers work at 72 dpi: 1 pt = 1 px). */
void cg_plot_font_px(double px) { plschr(px * 25.4 / 72.0, 1.0); }

/* Start a page of W x H pixels (in the drawing process); the format comes
 * from the file name. crisp: no anti-aliasing of shapes in PNG (heatmaps,
 * whose cells lie on whole pixels: faster, and sharp cell edges; text stays
 * anti-aliased). On failure: false + error. */
bool cg_plot_begin(pl_out *o, const char *who, const char *path, int W, int H, int n_colors,
                   bool crisp)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    o->W = W;
    o->H = H;
    const char *format = cg_plot_format(path);
    if (!format) {
        cg_prefix_error("%s: ", who);
        return false;
    }
    const char *dev = format[0] == 'p' ? "pngcairo" : "svg";
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
    cg_plot_set_color(C_BG, WHITE);
    cg_plot_set_color(C_TEXT, TEXT);
    cg_plot_set_color(C_GRID, GRID);
    cg_plot_set_color(C_AXIS, AXIS);
    cg_plot_set_color(C_LEGEND_BG, WHITE);
    plinit();
    pladv(0);
    plcol0(C_TEXT);
    return true;
}

/* Write the bytes atomically: temporary file, fsync, rename. */
static bool write_atomic(const char *who, const char *path, const char *buf, size_t len)
{
    size_t lp = strlen(path);
    char *tmp = malloc(lp + 48);
    if (!tmp) {
        cg_set_error("%s: out of memory", who);
        return false;
    }
    /* "<path>.tmp.<pid>[.<n>]", a new file (threads drawing the same
     * picture do not share one, no link is followed): a writer killed
     * mid-write leaves one, removed by the next successful write
     * (cg_st_remove_stale_temps); the checkpoint's mode: 0666 less the
     * umask, or the old picture's */
    int fd = cg_st_create_temp(path, tmp, lp + 48);
    if (fd < 0) {
        cg_set_error("%s: cannot create a temporary file next to %s: %s", who, path,
                     strerror(errno));
        free(tmp);
        return false;
    }
    struct stat old;
    if (stat(path, &old) == 0 && S_ISREG(old.st_mode))
        (void)fchmod(fd, old.st_mode & 07777);
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
bool cg_plot_end(pl_out *o, const char *who)
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
    const double t0 = cg_now();
    size_t n = 0;
    char skip[512];
    bool in_time = true;
    for (;;) {
        double left = DRAW_SECONDS - (cg_now() - t0);
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
/* exit: the forked drawing child ends here, never the caller. */
static int child_plexit(PLCHAR_VECTOR msg)
{
    dprintf(STDERR_FILENO, "\x1e%s: PLplot: %s", g_child_who, msg ? msg : "");
    _exit(1);
}

const void *cg_plot_copy(plot_copies *k, const void *src, size_t bytes)
{
    if (!src || bytes == 0 || k->failed)
        return NULL;
    if (k->n == k->cap) {
        int cap = k->cap ? 2 * k->cap : 16;
        void **p = realloc(k->p, (size_t)cap * sizeof *p);
        if (!p) {
            k->failed = true;
            return NULL;
        }
        k->p = p;
        k->cap = cap;
    }
    void *d = malloc(bytes);
    if (!d) {
        k->failed = true;
        return NULL;
    }
    memcpy(d, src, bytes);
    k->p[k->n++] = d;
    return d;
}

const char *cg_plot_copy_str(plot_copies *k, const char *s)
{
    return s ? cg_plot_copy(k, s, strlen(s) + 1) : NULL;
}

const char *const *cg_plot_copy_strs(plot_copies *k, const char *const *s, int n)
{
    const char **d = s && n > 0 ? (const char **)cg_plot_copy(k, s, (size_t)n * sizeof *s) : NULL;
    for (int i = 0; d && i < n; i++)
        d[i] = cg_plot_copy_str(k, s[i]);
    return d;
}

void cg_plot_copies_free(plot_copies *k)
{
    for (int i = 0; i < k->n; i++)
        free(k->p[i]);
    free(k->p);
    *k = (plot_copies){0};
}

/* Run draw(arg) in a child process, which writes the picture `path` and
 * exits; the caller holds cg_plot_lock. The child's stdout goes to
 * /dev/null and its stderr (where GLib and fontconfig complain) into a
 * pipe, with the child's error message last, after a 0x1e byte. A child
 * that fails or dies leaves no file: its temporary file is removed. */
bool cg_plot_draw_apart(const char *who, const char *path, bool (*draw)(void *), void *arg)
{
    int p[2];
    if (pipe(p) != 0) {
        cg_set_error("%s: cannot draw %s: pipe: %s", who, path, strerror(errno));
        return false;
    }
    /* the caller's stdio buffers emptied first: a child that flushed its
     * copies (valgrind's exit runs glibc's freeres, which does) wrote them
     * a second time into the caller's files (a list of pictures came out
     * 1, 1 2, 1 2 3) */
    fflush(NULL);
    pid_t pid = cg_fork_without_buffers(); /* its parent's pages stay writable */
    if (pid == 0) {               /* the child: one thread, a copy of the caller's memory */
        signal(SIGINT, SIG_IGN);  /* Ctrl-C reaches the whole group: the caller */
        signal(SIGTERM, SIG_IGN); /* decides, and waits for the picture */
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, STDOUT_FILENO) < 0 || dup2(p[1], STDERR_FILENO) < 0)
            _exit(1); /* exit: the forked child, never the caller */
        close(p[0]);
        g_child_who = who;
        plsexit(child_plexit);
        bool ok = draw(arg);
        if (!ok)
            dprintf(STDERR_FILENO, "\x1e%s", cg_last_error());
        _exit(ok ? 0 : 1); /* exit: the forked child, never the caller */
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
void cg_plot_vp_px(const pl_out *o, double x0, double y0, double x1, double y1)
{
    plvpor(x0 / o->W, x1 / o->W, 1.0 - y1 / o->H, 1.0 - y0 / o->H);
}

/* Text at pixel position (x, y = vertical centre) of the page. */
void cg_plot_text_px(const pl_out *o, double x, double y, double just, double size_px,
                     const char *s)
{
    cg_plot_vp_px(o, 0, 0, o->W, o->H);
    plwind(0, o->W, o->H, 0);
    cg_plot_font_px(size_px);
    plptex(x, y, 1, 0, just, s);
}

/* Rough width of n characters of DejaVu Sans at size px (pango's metrics are
 * not available before drawing; this errs on the wide side). */
double cg_plot_text_w(int n, double px) { return n * 0.62 * px; }

/* ------------------------------------------------------------------ axes */

double cg_plot_nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double m = raw / mag;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 2.5 ? 2.5 : m <= 5 ? 5 : 10) * mag;
}

/* [lo, hi] widened to multiples of a 1-2-5 step giving about `target`
 * intervals; *step receives the step. */
void cg_plot_nice_range(double *lo, double *hi, int target, double *step)
{
    if (!(*hi > *lo)) {
        double d = *lo != 0 ? fabs(*lo) * 0.1 : 1;
        *lo -= d;
        *hi += d;
    }
    double s = cg_plot_nice_step((*hi - *lo) / target);
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

/* Tick labels of a linear axis, one style per axis (the step decides):
 * steps of a million and up in millions (10M, 2.5M), of a thousand and up
 * in thousands (12k, 2.5k), with as many decimals as the step needs; very
 * small steps and large values with a step below a million in %g form,
 * with the significant digits that tell v from its neighbours v +- step
 * (at least 3). data points to the step. */
void cg_plot_label_linear(PLINT axis, PLFLT v, char *s, PLINT len, PLPointer data)
{
    (void)axis;
    double step = *(const double *)data;
    if (fabs(v) < step * 1e-6)
        v = 0;
    if (step < 1e-3 || (fabs(v) >= 1e7 && step < 1e6)) {
        int digits = v != 0 ? (int)floor(log10(fabs(v))) - (int)floor(log10(step) + 1e-9) + 1 : 1;
        snprintf(s, (size_t)len, "%.*g", digits < 3 ? 3 : digits > 17 ? 17 : digits, v);
    } else if (step >= 1000 && v != 0) { /* 2.5k, 5k: no trailing zeros */
        double unit = step >= 1e6 ? 1e6 : 1e3;
        char num[64];
        int n = snprintf(num, sizeof num, "%.*f", decimals_for(step / unit), v / unit);
        while (strchr(num, '.') && (num[n - 1] == '0' || num[n - 1] == '.'))
            num[--n] = '\0';
        snprintf(s, (size_t)len, "%s%s", num, unit > 1e3 ? "M" : "k");
    } else {
        snprintf(s, (size_t)len, "%.*f", decimals_for(step), v);
    }
}
