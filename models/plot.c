/* PNG charts for the zoo: loss curves and attention heatmaps (see plot.h).
 *
 * A canvas is an RGB byte buffer; lines are anti-aliased by their distance to
 * each pixel centre; text uses the bitmap font below. libpng writes the file
 * to a temporary name that is renamed over the target at the end. */
#include "models/plot.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "nn/safetensors.h"

/* ------------------------------------------------------------------ font */

/* Glyphs are 5 pixels wide and 9 tall: rows 0-6 hold capitals and digits
 * (lower-case letters use rows 2-6), rows 7-8 descenders. A glyph is written
 * as its rows, '#' for ink; rows not given are empty. Each character takes a
 * 6 x 10 cell. */
enum { GLYPH_W = 5, GLYPH_H = 9, CELL_W = 6, CELL_H = 10 };

/* printable ASCII, 0x20 .. 0x7E */
static const char *const FONT_ASCII[95] = {
    /*   */ "",
    /* ! */ "..#.." "..#.." "..#.." "..#.." "..#.." "....." "..#..",
    /* " */ ".#.#." ".#.#." ".#.#.",
    /* # */ ".#.#." ".#.#." "#####" ".#.#." "#####" ".#.#." ".#.#.",
    /* $ */ "..#.." ".####" "#.#.." ".###." "..#.#" "####." "..#..",
    /* % */ "##..." "##..#" "...#." "..#.." ".#..." "#..##" "...##",
    /* & */ ".##.." "#..#." "#.#.." ".#..." "#.#.#" "#..#." ".##.#",
    /* ' */ "..#.." "..#.." "..#..",
    /* ( */ "...#." "..#.." ".#..." ".#..." ".#..." "..#.." "...#.",
    /* ) */ ".#..." "..#.." "...#." "...#." "...#." "..#.." ".#...",
    /* * */ "....." "..#.." "#.#.#" ".###." "#.#.#" "..#.." ".....",
    /* + */ "....." "..#.." "..#.." "#####" "..#.." "..#.." ".....",
    /* , */ "....." "....." "....." "....." "....." ".##.." "..#.." ".#...",
    /* - */ "....." "....." "....." ".###.",
    /* . */ "....." "....." "....." "....." "....." ".##.." ".##..",
    /* / */ "....#" "....#" "...#." "..#.." ".#..." "#...." "#....",
    /* 0 */ ".###." "#...#" "#..##" "#.#.#" "##..#" "#...#" ".###.",
    /* 1 */ "..#.." ".##.." "..#.." "..#.." "..#.." "..#.." ".###.",
    /* 2 */ ".###." "#...#" "....#" "...#." "..#.." ".#..." "#####",
    /* 3 */ "#####" "...#." "..#.." "...#." "....#" "#...#" ".###.",
    /* 4 */ "...#." "..##." ".#.#." "#..#." "#####" "...#." "...#.",
    /* 5 */ "#####" "#...." "####." "....#" "....#" "#...#" ".###.",
    /* 6 */ "..##." ".#..." "#...." "####." "#...#" "#...#" ".###.",
    /* 7 */ "#####" "....#" "...#." "..#.." ".#..." ".#..." ".#...",
    /* 8 */ ".###." "#...#" "#...#" ".###." "#...#" "#...#" ".###.",
    /* 9 */ ".###." "#...#" "#...#" ".####" "....#" "...#." ".##..",
    /* : */ "....." ".##.." ".##.." "....." ".##.." ".##..",
    /* ; */ "....." ".##.." ".##.." "....." ".##.." "..#.." ".#...",
    /* < */ "...#." "..#.." ".#..." "#...." ".#..." "..#.." "...#.",
    /* = */ "....." "....." "#####" "....." "#####",
    /* > */ ".#..." "..#.." "...#." "....#" "...#." "..#.." ".#...",
    /* ? */ ".###." "#...#" "....#" "...#." "..#.." "....." "..#..",
    /* @ */ ".###." "#...#" "#.###" "#.#.#" "#.###" "#...." ".####",
    /* A */ ".###." "#...#" "#...#" "#####" "#...#" "#...#" "#...#",
    /* B */ "####." "#...#" "#...#" "####." "#...#" "#...#" "####.",
    /* C */ ".###." "#...#" "#...." "#...." "#...." "#...#" ".###.",
    /* D */ "###.." "#..#." "#...#" "#...#" "#...#" "#..#." "###..",
    /* E */ "#####" "#...." "#...." "####." "#...." "#...." "#####",
    /* F */ "#####" "#...." "#...." "####." "#...." "#...." "#....",
    /* G */ ".###." "#...#" "#...." "#.###" "#...#" "#...#" ".####",
    /* H */ "#...#" "#...#" "#...#" "#####" "#...#" "#...#" "#...#",
    /* I */ ".###." "..#.." "..#.." "..#.." "..#.." "..#.." ".###.",
    /* J */ "..###" "...#." "...#." "...#." "...#." "#..#." ".##..",
    /* K */ "#...#" "#..#." "#.#.." "##..." "#.#.." "#..#." "#...#",
    /* L */ "#...." "#...." "#...." "#...." "#...." "#...." "#####",
    /* M */ "#...#" "##.##" "#.#.#" "#.#.#" "#...#" "#...#" "#...#",
    /* N */ "#...#" "#...#" "##..#" "#.#.#" "#..##" "#...#" "#...#",
    /* O */ ".###." "#...#" "#...#" "#...#" "#...#" "#...#" ".###.",
    /* P */ "####." "#...#" "#...#" "####." "#...." "#...." "#....",
    /* Q */ ".###." "#...#" "#...#" "#...#" "#.#.#" "#..#." ".##.#",
    /* R */ "####." "#...#" "#...#" "####." "#.#.." "#..#." "#...#",
    /* S */ ".####" "#...." "#...." ".###." "....#" "....#" "####.",
    /* T */ "#####" "..#.." "..#.." "..#.." "..#.." "..#.." "..#..",
    /* U */ "#...#" "#...#" "#...#" "#...#" "#...#" "#...#" ".###.",
    /* V */ "#...#" "#...#" "#...#" "#...#" "#...#" ".#.#." "..#..",
    /* W */ "#...#" "#...#" "#...#" "#.#.#" "#.#.#" "#.#.#" ".#.#.",
    /* X */ "#...#" "#...#" ".#.#." "..#.." ".#.#." "#...#" "#...#",
    /* Y */ "#...#" "#...#" ".#.#." "..#.." "..#.." "..#.." "..#..",
    /* Z */ "#####" "....#" "...#." "..#.." ".#..." "#...." "#####",
    /* [ */ ".###." ".#..." ".#..." ".#..." ".#..." ".#..." ".###.",
    /* \ */ "#...." "#...." ".#..." "..#.." "...#." "....#" "....#",
    /* ] */ ".###." "...#." "...#." "...#." "...#." "...#." ".###.",
    /* ^ */ "..#.." ".#.#." "#...#",
    /* _ */ "....." "....." "....." "....." "....." "....." "....." "#####",
    /* ` */ ".#..." "..#..",
    /* a */ "....." "....." ".###." "....#" ".####" "#...#" ".####",
    /* b */ "#...." "#...." "####." "#...#" "#...#" "#...#" "####.",
    /* c */ "....." "....." ".###." "#...." "#...." "#...#" ".###.",
    /* d */ "....#" "....#" ".####" "#...#" "#...#" "#...#" ".####",
    /* e */ "....." "....." ".###." "#...#" "#####" "#...." ".###.",
    /* f */ "..##." ".#..#" ".#..." "###.." ".#..." ".#..." ".#...",
    /* g */ "....." "....." ".####" "#...#" "#...#" "#...#" ".####" "....#" ".###.",
    /* h */ "#...." "#...." "#.##." "##..#" "#...#" "#...#" "#...#",
    /* i */ "..#.." "....." ".##.." "..#.." "..#.." "..#.." ".###.",
    /* j */ "...#." "....." "..##." "...#." "...#." "...#." "...#." "#..#." ".##..",
    /* k */ "#...." "#...." "#..#." "#.#.." "##..." "#.#.." "#..#.",
    /* l */ ".##.." "..#.." "..#.." "..#.." "..#.." "..#.." ".###.",
    /* m */ "....." "....." "##.#." "#.#.#" "#.#.#" "#.#.#" "#.#.#",
    /* n */ "....." "....." "#.##." "##..#" "#...#" "#...#" "#...#",
    /* o */ "....." "....." ".###." "#...#" "#...#" "#...#" ".###.",
    /* p */ "....." "....." "####." "#...#" "#...#" "#...#" "####." "#...." "#....",
    /* q */ "....." "....." ".####" "#...#" "#...#" "#...#" ".####" "....#" "....#",
    /* r */ "....." "....." "#.##." "##..#" "#...." "#...." "#....",
    /* s */ "....." "....." ".####" "#...." ".###." "....#" "####.",
    /* t */ ".#..." ".#..." "###.." ".#..." ".#..." ".#..#" "..##.",
    /* u */ "....." "....." "#...#" "#...#" "#...#" "#..##" ".##.#",
    /* v */ "....." "....." "#...#" "#...#" "#...#" ".#.#." "..#..",
    /* w */ "....." "....." "#...#" "#...#" "#.#.#" "#.#.#" ".#.#.",
    /* x */ "....." "....." "#...#" ".#.#." "..#.." ".#.#." "#...#",
    /* y */ "....." "....." "#...#" "#...#" "#...#" "#...#" ".####" "....#" ".###.",
    /* z */ "....." "....." "#####" "...#." "..#.." ".#..." "#####",
    /* { */ "...#." "..#.." "..#.." ".#..." "..#.." "..#.." "...#.",
    /* | */ "..#.." "..#.." "..#.." "..#.." "..#.." "..#.." "..#.." "..#..",
    /* } */ ".#..." "..#.." "..#.." "...#." "..#.." "..#.." ".#...",
    /* ~ */ "....." "....." ".#..." "#.#.#" "...#.",
};

typedef struct {
    uint32_t cp;
    const char *rows;
    int dy; /* -1: starts one row above the capitals (dots over Ä Ö Ü) */
} glyph_t;

/* Beyond ASCII: what the two corpora use, and symbols for invisible labels. */
static const glyph_t FONT_EXTRA[] = {
    {0x00E4, /* ä */ ".#.#." "....." ".###." "....#" ".####" "#...#" ".####", 0},
    {0x00F6, /* ö */ ".#.#." "....." ".###." "#...#" "#...#" "#...#" ".###.", 0},
    {0x00FC, /* ü */ ".#.#." "....." "#...#" "#...#" "#...#" "#..##" ".##.#", 0},
    {0x00C4, /* Ä */ ".#.#." ".###." "#...#" "#...#" "#####" "#...#" "#...#" "#...#", -1},
    {0x00D6, /* Ö */ ".#.#." ".###." "#...#" "#...#" "#...#" "#...#" "#...#" ".###.", -1},
    {0x00DC, /* Ü */ ".#.#." "#...#" "#...#" "#...#" "#...#" "#...#" "#...#" ".###.", -1},
    {0x00DF, /* ß */ ".##.." "#..#." "#..#." "#.#.." "#..#." "#...#" "#.##." "#....", 0},
    {0x00E9, /* é */ "...#." "..#.." ".###." "#...#" "#####" "#...." ".###.", 0},
    {0x00E8, /* è */ ".#..." "..#.." ".###." "#...#" "#####" "#...." ".###.", 0},
    {0x00EB, /* ë */ ".#.#." "....." ".###." "#...#" "#####" "#...." ".###.", 0},
    {0x00E0, /* à */ ".#..." "..#.." ".###." "....#" ".####" "#...#" ".####", 0},
    {0x00F4, /* ô */ "..#.." ".#.#." ".###." "#...#" "#...#" "#...#" ".###.", 0},
    {0x00B0, /* ° */ ".##.." "#..#." ".##..", 0},
    {0x00A3, /* £ */ "..##." ".#..#" ".#..." "###.." ".#..." ".#..." "#####", 0},
    {0x20AC, /* € */ "..###" ".#..." "####." ".#..." "####." ".#..." "..###", 0},
    {0x2018, /* ‘ */ "..#.." ".#..." ".##..", 0},
    {0x2019, /* ’ */ "..##." "...#." "..#..", 0},
    {0x201C, /* “ */ ".#..#" "#..#." "##.##", 0},
    {0x201D, /* ” */ "##.##" ".#..#" "#..#.", 0},
    {0x201E, /* „ */ "....." "....." "....." "....." "....." "##.##" ".#..#" "#..#.", 0},
    {0x2013, /* – */ "....." "....." "....." "####.", 0},
    {0x2014, /* — */ "....." "....." "....." "#####", 0},
    {0x2423, /* ␣ (shown for a space label) */ "....." "....." "....." "....." "....." "#...#" "#####", 0},
    {0x21B5, /* ↵ (shown for a newline label) */ "....." "....#" "....#" ".#..#" "#####" ".#...", 0},
    {0x2192, /* → (shown for a tab label) */ "....." "..#.." "...#." "#####" "...#." "..#..", 0},
};

/* for a character without a glyph */
static const char FONT_BOX[] = "#####" "#...#" "#...#" "#...#" "#...#" "#...#" "#####";

static const char *glyph_rows(uint32_t cp, int *dy)
{
    *dy = 0;
    if (cp >= 0x20 && cp < 0x7F)
        return FONT_ASCII[cp - 0x20];
    for (size_t i = 0; i < sizeof FONT_EXTRA / sizeof *FONT_EXTRA; i++) {
        if (FONT_EXTRA[i].cp == cp) {
            *dy = FONT_EXTRA[i].dy;
            return FONT_EXTRA[i].rows;
        }
    }
    return FONT_BOX;
}

/* Next code point of a UTF-8 string (an invalid byte stands for itself as
 * U+FFFD, drawn as a box); advances *s. */
static uint32_t utf8_next(const char **s)
{
    const unsigned char *p = (const unsigned char *)*s;
    uint32_t c = p[0];
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0) {
        *s += 1;
        return 0xFFFD;
    }
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            *s += i;
            return 0xFFFD;
        }
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    *s += len;
    return cp;
}

static int utf8_count(const char *s)
{
    int n = 0;
    while (*s) {
        utf8_next(&s);
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------ canvas */

typedef struct {
    int w, h;
    uint8_t *px;              /* RGB, row-major */
    int cx0, cy0, cx1, cy1;   /* clip rectangle, [cx0, cx1) x [cy0, cy1) */
} canvas_t;

enum { WHITE = 0xFFFFFF, BLACK = 0x000000, GREY_TEXT = 0x333333, GRID = 0xE4E4E4,
       AXIS = 0x444444, NAN_GREY = 0xC8C8C8 };

static bool canvas_init(canvas_t *c, int w, int h)
{
    /* a sanity bound: 100 megapixels */
    if (w <= 0 || h <= 0 || (double)w * h > 1e8) {
        cg_set_error("plot: image size %d x %d is out of range", w, h);
        return false;
    }
    c->w = w;
    c->h = h;
    c->px = malloc((size_t)w * (size_t)h * 3);
    if (!c->px) {
        cg_set_error("plot: out of memory for a %d x %d image", w, h);
        return false;
    }
    memset(c->px, 0xFF, (size_t)w * (size_t)h * 3);
    c->cx0 = c->cy0 = 0;
    c->cx1 = w;
    c->cy1 = h;
    return true;
}

static void clip_reset(canvas_t *c)
{
    c->cx0 = c->cy0 = 0;
    c->cx1 = c->w;
    c->cy1 = c->h;
}

/* Blend colour rgb over pixel (x, y) with opacity a in [0, 1]. */
static void blend(canvas_t *c, int x, int y, uint32_t rgb, float a)
{
    if (x < c->cx0 || y < c->cy0 || x >= c->cx1 || y >= c->cy1 || a <= 0)
        return;
    if (a > 1)
        a = 1;
    uint8_t *p = c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
    const int ch[3] = {(int)(rgb >> 16) & 0xFF, (int)(rgb >> 8) & 0xFF, (int)rgb & 0xFF};
    for (int k = 0; k < 3; k++)
        p[k] = (uint8_t)lrintf((float)p[k] + a * (float)(ch[k] - p[k]));
}

static void fill_rect(canvas_t *c, int x0, int y0, int x1, int y1, uint32_t rgb)
{
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            blend(c, x, y, rgb, 1.0f);
}

static void rect_outline(canvas_t *c, int x0, int y0, int x1, int y1, uint32_t rgb)
{
    fill_rect(c, x0, y0, x1, y0 + 1, rgb);
    fill_rect(c, x0, y1 - 1, x1, y1, rgb);
    fill_rect(c, x0, y0, x0 + 1, y1, rgb);
    fill_rect(c, x1 - 1, y0, x1, y1, rgb);
}

/* An anti-aliased line of the given width (pixels). Each pixel takes the
 * coverage implied by its centre's distance to the segment. */
static void draw_line(canvas_t *c, double x0, double y0, double x1, double y1, double width,
                      uint32_t rgb)
{
    double r = width / 2 + 1;
    int bx0 = (int)floor(fmin(x0, x1) - r), bx1 = (int)ceil(fmax(x0, x1) + r);
    int by0 = (int)floor(fmin(y0, y1) - r), by1 = (int)ceil(fmax(y0, y1) + r);
    if (bx0 < c->cx0) bx0 = c->cx0;
    if (by0 < c->cy0) by0 = c->cy0;
    if (bx1 > c->cx1) bx1 = c->cx1;
    if (by1 > c->cy1) by1 = c->cy1;
    double dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = by0; y < by1; y++) {
        for (int x = bx0; x < bx1; x++) {
            double px = x + 0.5 - x0, py = y + 0.5 - y0;
            double t = len2 > 0 ? (px * dx + py * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double ex = px - t * dx, ey = py - t * dy;
            double cov = width / 2 + 0.5 - sqrt(ex * ex + ey * ey);
            if (cov > 0)
                blend(c, x, y, rgb, (float)(cov > 1 ? 1 : cov));
        }
    }
}

/* Text. dir 0: left to right from top-left corner (x, y). dir 1: rotated a
 * quarter turn counter-clockwise, reading upward from bottom-left (x, y). */
static void draw_glyph(canvas_t *c, int x, int y, uint32_t cp, int scale, uint32_t rgb, int dir)
{
    int dy;
    const char *rows = glyph_rows(cp, &dy);
    int n = (int)strlen(rows);
    for (int i = 0; i < n && i < GLYPH_W * GLYPH_H; i++) {
        if (rows[i] != '#')
            continue;
        int gx = i % GLYPH_W, gy = i / GLYPH_W + dy;
        for (int sy = 0; sy < scale; sy++)
            for (int sx = 0; sx < scale; sx++) {
                if (dir == 0)
                    blend(c, x + gx * scale + sx, y + gy * scale + sy, rgb, 1.0f);
                else
                    blend(c, x + gy * scale + sy, y - 1 - gx * scale - sx, rgb, 1.0f);
            }
    }
}

static int text_width(const char *s, int scale) { return utf8_count(s) * CELL_W * scale; }

static void draw_text(canvas_t *c, int x, int y, const char *s, int scale, uint32_t rgb, int dir)
{
    while (*s) {
        uint32_t cp = utf8_next(&s);
        draw_glyph(c, x, y, cp, scale, rgb, dir);
        if (dir == 0)
            x += CELL_W * scale;
        else
            y -= CELL_W * scale;
    }
}

/* ------------------------------------------------------------------ PNG */

typedef struct {
    jmp_buf jmp;
    char msg[256];
} png_err_t;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_err_t *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jmp, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

/* Write the canvas to path via a temporary file and rename(). */
static bool write_png(const canvas_t *c, const char *path)
{
    size_t lp = strlen(path);
    char *tmp = malloc(lp + 32);
    if (!tmp) {
        cg_set_error("plot: out of memory");
        return false;
    }
    /* "<path>.tmp.<pid>": a writer killed mid-write leaves one, removed by
     * the next successful write (cg_st_remove_stale_temps) */
    snprintf(tmp, lp + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        cg_set_error("plot: cannot create a temporary file next to %s: %s", path, strerror(errno));
        free(tmp);
        return false;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        cg_set_error("plot: cannot open %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return false;
    }
    /* on the heap: libpng's error handler writes it before longjmp() */
    png_err_t *e = malloc(sizeof *e);
    if (!e) {
        fclose(f);
        unlink(tmp);
        free(tmp);
        cg_set_error("plot: out of memory");
        return false;
    }
    e->msg[0] = '\0';
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, e, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        unlink(tmp);
        free(tmp);
        free(e);
        cg_set_error("plot: out of memory in libpng");
        return false;
    }
    if (setjmp(e->jmp)) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        unlink(tmp);
        cg_set_error("plot: writing %s failed: %s", path, e->msg);
        free(tmp);
        free(e);
        return false;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)c->w, (png_uint_32)c->h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < c->h; y++)
        png_write_row(png, c->px + (size_t)y * (size_t)c->w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(e);
    errno = 0;
    bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved = errno;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        cg_set_error("plot: writing %s failed: %s", tmp, strerror(saved ? saved : errno));
        unlink(tmp);
        free(tmp);
        return false;
    }
    if (rename(tmp, path) != 0) {
        cg_set_error("plot: cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return false;
    }
    free(tmp);
    cg_st_remove_stale_temps(path);
    return true;
}

/* ------------------------------------------------------------------ axes */

typedef struct {
    double lo, hi;        /* axis range (data units; log10 units on a log axis) */
    bool log;
    int n;                /* labelled ticks */
    double ticks[64];     /* in data units */
    int nminor;           /* unlabelled grid lines (log axes) */
    double minor[256];
    double step;          /* linear tick step, for label precision */
} axis_t;

static double nice_step(double raw)
{
    double mag = pow(10, floor(log10(raw)));
    double m = raw / mag;
    return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * mag;
}

static void axis_linear(axis_t *a, double lo, double hi, int target)
{
    if (!(hi > lo)) {
        double pad = fabs(lo) > 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    double step = nice_step((hi - lo) / target);
    double l = floor(lo / step + 1e-9) * step, h = ceil(hi / step - 1e-9) * step;
    a->log = false;
    a->lo = l;
    a->hi = h;
    a->step = step;
    a->n = 0;
    a->nminor = 0;
    for (int i = 0; a->n < 64; i++) {
        double v = l + i * step;
        if (v > h + step * 1e-6)
            break;
        if (fabs(v) < step * 1e-9)
            v = 0;
        a->ticks[a->n++] = v;
    }
}

/* lo, hi > 0 */
static void axis_log(axis_t *a, double lo, double hi)
{
    static const double mant[3] = {1, 2, 5};
    if (!(hi > lo)) {
        lo /= 2;
        hi *= 2;
    }
    int elo = (int)floor(log10(lo)), ehi = (int)floor(log10(hi));
    /* bounds: the nearest 1, 2, 5 x 10^k outside the data */
    double blo = pow(10, elo), bhi = pow(10, ehi + 1);
    for (int k = 2; k >= 0; k--) {
        if (mant[k] * pow(10, elo) <= lo * (1 + 1e-9)) {
            blo = mant[k] * pow(10, elo);
            break;
        }
    }
    for (int k = 0; k < 3; k++) {
        if (mant[k] * pow(10, ehi) >= hi * (1 - 1e-9)) {
            bhi = mant[k] * pow(10, ehi);
            break;
        }
    }
    a->log = true;
    a->lo = log10(blo);
    a->hi = log10(bhi);
    a->n = 0;
    a->nminor = 0;
    a->step = 0;
    double decades = a->hi - a->lo;
    int every = decades > 8 ? (int)ceil(decades / 8) : 1;
    for (int e = elo; e <= ehi + 1; e++) {
        for (int k = 1; k <= 9; k++) {
            double v = k * pow(10, e);
            if (v < blo * (1 - 1e-9) || v > bhi * (1 + 1e-9))
                continue;
            bool labelled = decades <= 2.05 ? (k == 1 || k == 2 || k == 5) : (k == 1 && e % every == 0);
            if (labelled && a->n < 64)
                a->ticks[a->n++] = v;
            else if (a->nminor < 256 && decades <= 8)
                a->minor[a->nminor++] = v;
        }
    }
}

/* data value -> fraction of the axis */
static double axis_frac(const axis_t *a, double v)
{
    double t = a->log ? log10(v) : v;
    return (t - a->lo) / (a->hi - a->lo);
}

/* Decimal places that show v (or the step) exactly enough. */
static int decimals_for(double v)
{
    v = fabs(v);
    for (int d = 0; d < 8; d++) {
        double s = v * pow(10, d);
        if (fabs(s - nearbyint(s)) < 1e-6 * fmax(1, s))
            return d;
    }
    return 8;
}

static void format_tick(char *buf, size_t size, double v, double step)
{
    double a = fabs(v);
    const char *suffix = "";
    double div = 1;
    if (a >= 1e6) {
        suffix = "M";
        div = 1e6;
    } else if (a >= 1e4) {
        suffix = "k";
        div = 1e3;
    }
    if (a != 0 && a < 1e-4) {
        snprintf(buf, size, "%.0e", v);
        return;
    }
    int d = decimals_for((step > 0 ? step : v) / div);
    if (step > 0 && decimals_for(v / div) > d)
        d = decimals_for(v / div);
    snprintf(buf, size, "%.*f%s", d, v / div, suffix);
}

/* ------------------------------------------------------------------ palette */

static const uint32_t PALETTE[] = {0x1F5FBF, 0xE8601C, 0x2CA02C, 0xC62839, 0x8E63B5,
                                   0x8C564B, 0xD561B5, 0x7F7F7F, 0xA8A81E, 0x17A8BD};

/* Colour scale: piecewise-linear through hand-picked stops from dark
 * blue-violet through blue, teal and green to yellow (perceptually ordered,
 * readable in grey). */
uint32_t cg_plot_colormap(float t)
{
    static const float stops[][3] = {
        {68, 1, 84}, {71, 44, 122}, {59, 81, 139}, {44, 113, 142}, {33, 144, 141},
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

/* ------------------------------------------------------------------ line chart */

bool cg_plot_loss_curve(const char *path, const char *title, int n_series,
                        const cg_plot_series *series)
{
    cg_plot_opts o = {title, "step", "loss", CG_PLOT_Y_AUTO, 0, 0};
    return cg_plot_lines(path, &o, n_series, series);
}

static double series_x(const cg_plot_series *s, int i) { return s->x ? (double)s->x[i] : (double)i; }

bool cg_plot_lines(const char *path, const cg_plot_opts *opts, int n_series,
                   const cg_plot_series *series)
{
    cg_plot_opts o = {0};
    if (opts)
        o = *opts;
    if (!path || !*path) {
        cg_set_error("cg_plot_lines: path is NULL or empty");
        return false;
    }
    if (n_series < 0 || (n_series > 0 && !series)) {
        cg_set_error("cg_plot_lines: n_series = %d with series %s", n_series, series ? "given" : "NULL");
        return false;
    }
    for (int s = 0; s < n_series; s++) {
        if (series[s].n < 0 || (series[s].n > 0 && !series[s].y)) {
            cg_set_error("cg_plot_lines: series %d has n = %d and y %s", s, series[s].n,
                         series[s].y ? "given" : "NULL");
            return false;
        }
    }
    if (o.y_scale < CG_PLOT_Y_AUTO || o.y_scale > CG_PLOT_Y_LOG) {
        cg_set_error("cg_plot_lines: unknown y_scale %d", o.y_scale);
        return false;
    }
    int W = o.width > 0 ? o.width : 900, H = o.height > 0 ? o.height : 560;
    if (W < 200 || H < 150 || W > 10000 || H > 10000) {
        cg_set_error("cg_plot_lines: size %d x %d is outside 200x150 .. 10000x10000", W, H);
        return false;
    }

    /* data ranges over finite points */
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
    bool logy = o.y_scale == CG_PLOT_Y_LOG ||
                (o.y_scale == CG_PLOT_Y_AUTO && any && ymin > 0 && ymax / ymin >= 10);
    if (logy && !(yposmin < INFINITY)) {
        cg_set_error("cg_plot_lines: a log y axis needs a positive y value");
        return false;
    }
    axis_t ax, ay;
    axis_linear(&ax, xmin, xmax, 8);
    if (logy)
        axis_log(&ay, yposmin, ymax);
    else
        axis_linear(&ay, ymin, ymax, 6);

    /* layout */
    char buf[64];
    int ylab_w = 0;
    for (int i = 0; i < ay.n; i++) {
        format_tick(buf, sizeof buf, ay.ticks[i], ay.step);
        int w = text_width(buf, 1);
        ylab_w = w > ylab_w ? w : ylab_w;
    }
    int top = o.title && *o.title ? 16 + 2 * CELL_H + 8 : 20;
    int left = 12 + (o.ylabel && *o.ylabel ? CELL_H + 8 : 0) + ylab_w + 8;
    int bottom = 12 + CELL_H + 6 + (o.xlabel && *o.xlabel ? CELL_H + 8 : 0) + 4;
    int right = 24;
    int px0 = left, py0 = top, px1 = W - right, py1 = H - bottom;
    if (px1 - px0 < 50 || py1 - py0 < 50) {
        cg_set_error("cg_plot_lines: %d x %d is too small for the labels", W, H);
        return false;
    }
    canvas_t c;
    if (!canvas_init(&c, W, H))
        return false;
    /* the axis ranges map to the frame inset by PAD pixels, so that data on
     * a range's end stays visible inside the frame */
    enum { PAD = 6 };
    double pw = px1 - px0 - 1 - 2 * PAD, ph = py1 - py0 - 1 - 2 * PAD;
#define MAPX(v) (px0 + PAD + axis_frac(&ax, (v)) * pw)
#define MAPY(v) (py1 - 1 - PAD - axis_frac(&ay, (v)) * ph)

    if (o.title && *o.title) {
        int tw = text_width(o.title, 2);
        draw_text(&c, (W - tw) / 2 > 4 ? (W - tw) / 2 : 4, 14, o.title, 2, BLACK, 0);
    }
    /* grid */
    for (int i = 0; i < ay.nminor; i++) {
        int y = (int)lrint(MAPY(ay.minor[i]));
        fill_rect(&c, px0, y, px1, y + 1, 0xF0F0F0);
    }
    for (int i = 0; i < ax.n; i++) {
        int x = (int)lrint(MAPX(ax.ticks[i]));
        fill_rect(&c, x, py0, x + 1, py1, GRID);
        fill_rect(&c, x, py1, x + 1, py1 + 5, AXIS);
        format_tick(buf, sizeof buf, ax.ticks[i], ax.step);
        draw_text(&c, x - text_width(buf, 1) / 2 + 1, py1 + 8, buf, 1, GREY_TEXT, 0);
    }
    for (int i = 0; i < ay.n; i++) {
        int y = (int)lrint(MAPY(ay.ticks[i]));
        fill_rect(&c, px0, y, px1, y + 1, GRID);
        fill_rect(&c, px0 - 5, y, px0, y + 1, AXIS);
        format_tick(buf, sizeof buf, ay.ticks[i], ay.step);
        draw_text(&c, px0 - 8 - text_width(buf, 1), y - 3, buf, 1, GREY_TEXT, 0);
    }
    rect_outline(&c, px0, py0, px1, py1, AXIS);
    if (o.xlabel && *o.xlabel)
        draw_text(&c, px0 + (px1 - px0 - text_width(o.xlabel, 1)) / 2, py1 + 8 + CELL_H + 8, o.xlabel,
                  1, BLACK, 0);
    if (o.ylabel && *o.ylabel)
        draw_text(&c, 12, py0 + (py1 - py0 + text_width(o.ylabel, 1)) / 2, o.ylabel, 1, BLACK, 1);

    /* the lines, clipped to the plot area */
    c.cx0 = px0 + 1;
    c.cy0 = py0 + 1;
    c.cx1 = px1 - 1;
    c.cy1 = py1 - 1;
    int auto_color = 0;
    uint32_t *colors = malloc(sizeof *colors * (size_t)(n_series > 0 ? n_series : 1));
    if (!colors) {
        free(c.px);
        cg_set_error("cg_plot_lines: out of memory");
        return false;
    }
    for (int s = 0; s < n_series; s++) {
        const cg_plot_series *S = &series[s];
        uint32_t col = S->color ? (S->color & 0xFFFFFF)
                                : PALETTE[auto_color++ % (int)(sizeof PALETTE / sizeof *PALETTE)];
        colors[s] = col;
        double lw = S->width > 0 ? S->width : 1.8;
        bool have = false, drawn_seg = false;
        double lx = 0, ly = 0;
        int run = 0;
        for (int i = 0; i <= S->n; i++) {
            bool ok = false;
            double x = 0, y = 0;
            if (i < S->n) {
                x = series_x(S, i);
                y = S->y[i];
                ok = isfinite(x) && isfinite(y) && (!logy || y > 0);
            }
            if (ok) {
                double X = MAPX(x), Y = MAPY(y);
                if (have) {
                    draw_line(&c, lx, ly, X, Y, lw, col);
                    drawn_seg = true;
                }
                lx = X;
                ly = Y;
                have = true;
                run++;
            } else {
                if (have && run == 1 && !drawn_seg && !(S->marker > 0)) /* an isolated point: a dot */
                    draw_line(&c, lx, ly, lx, ly, lw + 2.2, col);
                have = false;
                drawn_seg = false;
                run = 0;
            }
        }
        for (int i = 0; S->marker > 0 && i < S->n; i++) {
            double x = series_x(S, i), y = S->y[i];
            if (isfinite(x) && isfinite(y) && (!logy || y > 0))
                draw_line(&c, MAPX(x), MAPY(y), MAPX(x), MAPY(y), S->marker, col);
        }
    }
    clip_reset(&c);

    /* legend: in the corner of the plot that covers the fewest data points */
    int nleg = 0, legw = 0;
    for (int s = 0; s < n_series; s++) {
        if (series[s].name && *series[s].name) {
            nleg++;
            int w = text_width(series[s].name, 1);
            legw = w > legw ? w : legw;
        }
    }
    if (nleg > 0) {
        int lh = CELL_H + 6, bw = 10 + 24 + 6 + legw + 10, bh = 8 + nleg * lh + 4;
        /* corners in order of preference: top right, bottom right, top left, bottom left */
        int best = 0;
        long best_hits = -1;
        for (int k = 0; k < 4; k++) {
            int x0 = k < 2 ? px1 - 10 - bw : px0 + 10, y0 = k % 2 == 0 ? py0 + 10 : py1 - 10 - bh;
            long hits = 0;
            for (int s = 0; s < n_series; s++) {
                for (int i = 0; i < series[s].n; i++) {
                    double x = series_x(&series[s], i), y = series[s].y[i];
                    if (!isfinite(x) || !isfinite(y) || (logy && y <= 0))
                        continue;
                    double X = MAPX(x), Y = MAPY(y);
                    hits += X >= x0 - 4 && X <= x0 + bw + 4 && Y >= y0 - 4 && Y <= y0 + bh + 4;
                }
            }
            if (best_hits < 0 || hits < best_hits) {
                best = k;
                best_hits = hits;
            }
            if (hits == 0)
                break;
        }
        int bx0 = best < 2 ? px1 - 10 - bw : px0 + 10, by0 = best % 2 == 0 ? py0 + 10 : py1 - 10 - bh;
        int bx1 = bx0 + bw;
        fill_rect(&c, bx0, by0, bx1, by0 + bh, WHITE);
        rect_outline(&c, bx0, by0, bx1, by0 + bh, 0xB0B0B0);
        int row = 0;
        for (int s = 0; s < n_series; s++) {
            if (!series[s].name || !*series[s].name)
                continue;
            int y = by0 + 8 + row * lh;
            draw_line(&c, bx0 + 10, y + 4.5, bx0 + 34, y + 4.5,
                      series[s].width > 0 ? series[s].width + 0.4 : 2.2, colors[s]);
            if (series[s].marker > 0)
                draw_line(&c, bx0 + 22, y + 4.5, bx0 + 22, y + 4.5, series[s].marker, colors[s]);
            draw_text(&c, bx0 + 40, y + 1, series[s].name, 1, GREY_TEXT, 0);
            row++;
        }
    }
#undef MAPX
#undef MAPY
    free(colors);
    bool ok = write_png(&c, path);
    free(c.px);
    return ok;
}

/* ------------------------------------------------------------------ heatmaps */

/* The label of entry i of a panel axis as UTF-8 (into buf); "" if none.
 * A lone space, newline or tab becomes a visible symbol. */
static const char *panel_label(const char *const *strs, const uint32_t *cps, int i, char *buf,
                               size_t size)
{
    uint32_t cp;
    if (strs) {
        const char *s = strs[i];
        if (!s)
            return "";
        const char *p = s;
        if (!*s || (cp = utf8_next(&p), *p))
            return s; /* empty or several characters: as given */
    } else if (cps) {
        cp = cps[i];
    } else {
        return "";
    }
    if (cp == ' ')
        cp = 0x2423;
    else if (cp == '\n')
        cp = 0x21B5;
    else if (cp == '\t')
        cp = 0x2192;
    /* encode */
    size_t n = 0;
    if (size < 5)
        return "";
    if (cp < 0x80) {
        buf[n++] = (char)cp;
    } else if (cp < 0x800) {
        buf[n++] = (char)(0xC0 | (cp >> 6));
        buf[n++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        buf[n++] = (char)(0xE0 | (cp >> 12));
        buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[n++] = (char)(0x80 | (cp & 0x3F));
    } else {
        buf[n++] = (char)(0xF0 | ((cp >> 18) & 0x07));
        buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[n++] = (char)(0x80 | (cp & 0x3F));
    }
    buf[n] = '\0';
    return buf;
}

static int max_label_chars(const char *const *strs, const uint32_t *cps, int n)
{
    int m = 0;
    char buf[8];
    for (int i = 0; i < n && (strs || cps); i++) {
        int k = utf8_count(panel_label(strs, cps, i, buf, sizeof buf));
        m = k > m ? k : m;
    }
    return m;
}

bool cg_plot_heatmaps(const char *path, const char *title, int grid_rows, int grid_cols,
                      const cg_heatmap_panel *panels, float vmin, float vmax)
{
    if (!path || !*path) {
        cg_set_error("cg_plot_heatmaps: path is NULL or empty");
        return false;
    }
    if (grid_rows <= 0 || grid_cols <= 0 || !panels || grid_rows > 64 || grid_cols > 64) {
        cg_set_error("cg_plot_heatmaps: need 1..64 x 1..64 panels (got %d x %d, panels %s)", grid_rows,
                     grid_cols, panels ? "given" : "NULL");
        return false;
    }
    int np = grid_rows * grid_cols;
    int maxdim = 1, max_rows = 0, max_cols = 0, rlab = 0, clab = 0, tlen = 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int p = 0; p < np; p++) {
        const cg_heatmap_panel *P = &panels[p];
        if (P->rows == 0 && P->cols == 0)
            continue;
        if (P->rows <= 0 || P->cols <= 0 || P->rows > 4096 || P->cols > 4096 || !P->values) {
            cg_set_error("cg_plot_heatmaps: panel %d is %d x %d with values %s (need 1..4096 each)", p,
                         P->rows, P->cols, P->values ? "given" : "NULL");
            return false;
        }
        maxdim = P->rows > maxdim ? P->rows : maxdim;
        maxdim = P->cols > maxdim ? P->cols : maxdim;
        max_rows = P->rows > max_rows ? P->rows : max_rows;
        max_cols = P->cols > max_cols ? P->cols : max_cols;
        int r = max_label_chars(P->row_labels, P->row_chars, P->rows);
        int cl = max_label_chars(P->col_labels, P->col_chars, P->cols);
        rlab = r > rlab ? r : rlab;
        clab = cl > clab ? cl : clab;
        if (P->title) {
            int t = utf8_count(P->title);
            tlen = t > tlen ? t : tlen;
        }
        for (long i = 0; i < (long)P->rows * P->cols; i++) {
            float v = P->values[i];
            if (isfinite(v)) {
                lo = fmin(lo, v);
                hi = fmax(hi, v);
            }
        }
    }
    if (max_rows == 0) {
        cg_set_error("cg_plot_heatmaps: every panel is empty");
        return false;
    }
    if (vmin < vmax) {
        lo = vmin;
        hi = vmax;
    } else if (!(lo <= hi)) {
        lo = 0;
        hi = 1;
    } else if (lo == hi) {
        hi = lo + 1;
    }

    /* one cell size for all panels; labels thinned out when cells are small */
    int cell = 360 / maxdim;
    cell = cell < 2 ? 2 : cell > 18 ? 18 : cell;
    if ((rlab > 0 || clab > 0) && cell < 8) {
        /* labels want 8-pixel rows: grow panels up to about 1000 pixels */
        int grown = 1000 / maxdim;
        cell = grown > 8 ? 8 : grown > cell ? grown : cell;
    }
    int step_r = (8 + cell - 1) / cell, step_c = (CELL_W + cell - 1) / cell;
    bool col_rotated = clab > 1;
    if (col_rotated)
        step_c = (8 + cell - 1) / cell;
    int rlab_w = rlab > 0 ? rlab * CELL_W + 4 : 0;
    int clab_h = clab == 0 ? 0 : col_rotated ? clab * CELL_W + 4 : CELL_H + 2;
    int title_h = tlen > 0 ? CELL_H + 4 : 0;
    int map_w = max_cols * cell, map_h = max_rows * cell;
    int slot_w = rlab_w + map_w, slot_h = title_h + map_h + clab_h;
    if (tlen * CELL_W > slot_w)
        slot_w = tlen * CELL_W;
    int gap = 18, margin = 16;
    int head_h = title && *title ? 2 * CELL_H + 16 : 0;
    int bar_w = 14, bar_lab = 7 * CELL_W;
    int grid_w = grid_cols * slot_w + (grid_cols - 1) * gap;
    int W = margin + grid_w + 24 + bar_w + 6 + bar_lab + margin;
    int H = margin + head_h + grid_rows * slot_h + (grid_rows - 1) * gap + margin;
    if (title && *title && text_width(title, 2) + 2 * margin > W)
        W = text_width(title, 2) + 2 * margin;
    if (H < 200)
        H = 200;
    canvas_t c;
    if (!canvas_init(&c, W, H))
        return false;
    if (title && *title)
        draw_text(&c, (W - text_width(title, 2)) / 2, margin, title, 2, BLACK, 0);

    char buf[8];
    for (int gr = 0; gr < grid_rows; gr++) {
        for (int gc = 0; gc < grid_cols; gc++) {
            const cg_heatmap_panel *P = &panels[gr * grid_cols + gc];
            if (P->rows == 0 && P->cols == 0)
                continue;
            int sx = margin + gc * (slot_w + gap), sy = margin + head_h + gr * (slot_h + gap);
            if (P->title)
                draw_text(&c, sx + rlab_w, sy, P->title, 1, BLACK, 0);
            int mx = sx + rlab_w, my = sy + title_h;
            for (int r = 0; r < P->rows; r++) {
                for (int k = 0; k < P->cols; k++) {
                    float v = P->values[(size_t)r * (size_t)P->cols + (size_t)k];
                    uint32_t col = isfinite(v) ? cg_plot_colormap((float)((v - lo) / (hi - lo)))
                                               : (uint32_t)NAN_GREY;
                    fill_rect(&c, mx + k * cell, my + r * cell, mx + (k + 1) * cell, my + (r + 1) * cell,
                              col);
                }
            }
            rect_outline(&c, mx - 1, my - 1, mx + P->cols * cell + 1, my + P->rows * cell + 1, 0x909090);
            /* row labels, right-aligned, centred on their cells */
            for (int r = 0; r < P->rows && rlab > 0; r += step_r) {
                const char *l = panel_label(P->row_labels, P->row_chars, r, buf, sizeof buf);
                int y = my + r * cell + cell / 2 - 4;
                draw_text(&c, mx - 3 - text_width(l, 1), y, l, 1, GREY_TEXT, 0);
            }
            /* column labels below */
            for (int k = 0; k < P->cols && clab > 0; k += step_c) {
                const char *l = panel_label(P->col_labels, P->col_chars, k, buf, sizeof buf);
                int ly = my + P->rows * cell + 3;
                if (col_rotated)
                    draw_text(&c, mx + k * cell + cell / 2 - 4, ly + text_width(l, 1), l, 1, GREY_TEXT, 1);
                else
                    draw_text(&c, mx + k * cell + (cell - GLYPH_W) / 2, ly, l, 1, GREY_TEXT, 0);
            }
        }
    }

    /* colour bar with five labelled values */
    int bx = margin + grid_w + 24, by0 = margin + head_h + title_h;
    int bh = grid_rows * slot_h + (grid_rows - 1) * gap - title_h - clab_h;
    if (bh > 300)
        bh = 300;
    if (bh < 60)
        bh = 60;
    for (int y = 0; y < bh; y++) {
        uint32_t col = cg_plot_colormap(1.0f - (float)y / (float)(bh - 1));
        fill_rect(&c, bx, by0 + y, bx + bar_w, by0 + y + 1, col);
    }
    rect_outline(&c, bx - 1, by0 - 1, bx + bar_w + 1, by0 + bh + 1, 0x909090);
    double step = (hi - lo) / 4;
    for (int i = 0; i <= 4; i++) {
        double v = lo + i * step;
        char lb[32];
        int d = step >= 10 ? 0 : step >= 1 ? 1 : step >= 0.1 ? 2 : 3;
        snprintf(lb, sizeof lb, "%.*f", d, v);
        int y = by0 + (int)lrint((1 - i / 4.0) * (bh - 1));
        fill_rect(&c, bx + bar_w, y, bx + bar_w + 3, y + 1, AXIS);
        draw_text(&c, bx + bar_w + 6, y - 3, lb, 1, GREY_TEXT, 0);
    }
    bool ok = write_png(&c, path);
    free(c.px);
    return ok;
}
