/* The fused cells of the recurrent modules (nn/rnn.h): a GRU's and an
 * LSTM's elementwise step, each one pass over its rows forward and one
 * backward, the gates never stored (the backward recomputes them from the
 * pre-activations, the same bits: one exp and one tanh an element more
 * than keeping them, for none of the memory).
 *
 * The equations are torch.nn.GRU's and torch.nn.LSTM's (gate order r, z, n
 * and i, f, g, o), written as cgrad's ops compute them one by one (add,
 * sigmoid, tanh, mul: core/elementwise.c's f_sigmoid and ew_tanhf), so a
 * cell's output has the bits of the same cell made of ops.
 *
 * Rows are cut into chunks by cg_shares_run, each row computed from its
 * own elements only: the same bits for any team. An operand is read in
 * place when its last dim is contiguous (a row stride of its own: the
 * halves of an LSTM's [h | c] output, a step of a [T, B, 3H] product),
 * else copied. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/elementwise_impl.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/shares.h"
#include "core/tensor_impl.h"

/* An operand's rows: p + r ld, each of its width contiguous */
typedef struct {
    const float *p;
    int64_t ld;
} cell_rows;

typedef struct {
    cell_rows a, b, c, g; /* GRU: gi, gh, h; LSTM: gates, c (b unused) */
    float *out, *d0, *d1, *d2;
    int64_t H;
} cell_job;

/* t read in place (*hold NULL) or its contiguous copy (*hold) */
static bool rows_of(const cg_tensor *t, cell_rows *r, cg_tensor **hold)
{
    *hold = NULL;
    if (!cg_numel(t)) { /* no rows: nothing is read */
        r->p = NULL, r->ld = 0;
        return true;
    }
    if (t->strides[1] != 1 && t->shape[1] != 1) {
        if (!(*hold = cg_k_contiguous(t)))
            return false;
        t = *hold;
    }
    r->p = cg_data(t);
    r->ld = t->shape[0] == 1 ? 0 : t->strides[0];
    return r->p != NULL;
}

static int64_t cell_grain(int64_t w) { return cg_shares_rows(w); }
static int cell_team(int64_t rows, int64_t w) { return cg_shares_team(rows * w > 16384); }

/* --------------------------------------------------------------- GRU */
EW_CLONES static void gru_fwd_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const cell_job *j = ctx;
    const int64_t H = j->H;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict gi = j->a.p + r * j->a.ld, *restrict gh = j->b.p + r * j->b.ld;
        const float *restrict h = j->c.p + r * j->c.ld;
        float *restrict o = j->out + r * H;
        for (int64_t k = 0; k < H; k++) {
            const float rg = f_sigmoid(gi[k] + gh[k]), z = f_sigmoid(gi[H + k] + gh[H + k]);
            const float n = ew_tanhf(gi[2 * H + k] + rg * gh[2 * H + k]);
            o[k] = n + z * (h[k] - n);
        }
    }
}

/* One row of the GRU's backward, each gate's part its own pointer (the
 * loop vectorises). The sigmoid's derivative is s (1 - s), as cg_sigmoid's
 * backward takes it. */
static inline __attribute__((always_inline)) void gru_bwd_row(
    int64_t H, const float *restrict ir, const float *restrict iz, const float *restrict in,
    const float *restrict hr, const float *restrict hz, const float *restrict hn,
    const float *restrict h, const float *restrict g, float *restrict dir, float *restrict diz,
    float *restrict din, float *restrict dhr, float *restrict dhz, float *restrict dhn,
    float *restrict dh)
{
    for (int64_t k = 0; k < H; k++) {
        const float rg = f_sigmoid(ir[k] + hr[k]), z = f_sigmoid(iz[k] + hz[k]);
        const float n = ew_tanhf(in[k] + rg * hn[k]);
        const float dn = g[k] * (1.0f - z) * (1.0f - n * n);
        const float dr = dn * hn[k] * (rg * (1.0f - rg)), dz = g[k] * (h[k] - n) * (z * (1.0f - z));
        dir[k] = dr, dhr[k] = dr;
        diz[k] = dz, dhz[k] = dz;
        din[k] = dn, dhn[k] = dn * rg;
        dh[k] = g[k] * z;
    }
}

/* d0 = dgi, d1 = dgh [B, 3H], d2 = dh [B, H] */
EW_CLONES static void gru_bwd_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const cell_job *j = ctx;
    const int64_t H = j->H;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict gi = j->a.p + r * j->a.ld, *restrict gh = j->b.p + r * j->b.ld;
        const float *restrict h = j->c.p + r * j->c.ld, *restrict g = j->g.p + r * j->g.ld;
        float *restrict dgi = j->d0 + r * 3 * H, *restrict dgh = j->d1 + r * 3 * H;
        float *restrict dh = j->d2 + r * H;
        gru_bwd_row(H, gi, gi + H, gi + 2 * H, gh, gh + H, gh + 2 * H, h, g, dgi, dgi + H,
                    dgi + 2 * H, dgh, dgh + H, dgh + 2 * H, dh);
    }
}

/* A 2-d float32 tensor [rows, w] (w 0: any width, returned), else 0 + an
 * error naming the op, the argument and the shapes */
static int64_t cell_arg(const char *op, const char *what, const cg_tensor *t, int64_t rows,
                        int64_t w, const char *want)
{
    char s[96];
    if (!t)
        return cg_error_null_input(op), 0;
    if (t->dtype != CG_F32) {
        cg_set_error("%s: %s is %s, float32 only", op, what, cg_dtype_name(t->dtype));
        return 0;
    }
    if (t->ndim != 2 || (rows >= 0 && t->shape[0] != rows) || (w && t->shape[1] != w) ||
        t->shape[1] <= 0) {
        cg_set_error("%s: %s is %s, expected %s", op, what, cg_shape_str(t, s, sizeof s), want);
        return 0;
    }
    return t->shape[1];
}

/* gi, gh [B, 3H], h [B, H] (g [B, H] for the backward): H, or 0 + error */
static int64_t gru_args(const char *op, const cg_tensor *gi, const cg_tensor *gh,
                        const cg_tensor *h, const cg_tensor *g)
{
    const int64_t w = cell_arg(op, "gi", gi, -1, 0, "[batch, 3 hidden] (gates r, z, n)");
    if (!w)
        return 0;
    if (w % 3) {
        char s[96];
        cg_set_error("%s: gi is %s, whose last dim is not 3 hidden (gates r, z, n)", op,
                     cg_shape_str(gi, s, sizeof s));
        return 0;
    }
    const int64_t B = gi->shape[0], H = w / 3;
    char want[64];
    snprintf(want, sizeof want, "[%lld, %lld] as gi", (long long)B, (long long)w);
    if (!cell_arg(op, "gh", gh, B, w, want))
        return 0;
    snprintf(want, sizeof want, "[%lld, %lld] (gi's batch, hidden)", (long long)B, (long long)H);
    if (!cell_arg(op, "h", h, B, H, want) || (g && !cell_arg(op, "gradient", g, B, H, want)))
        return 0;
    return H;
}

cg_tensor *cg_k_gru_cell(const cg_tensor *gi, const cg_tensor *gh, const cg_tensor *h)
{
    const int64_t H = gru_args("gru_cell", gi, gh, h, NULL);
    if (!H)
        return NULL;
    cell_job j = {.H = H};
    cg_tensor *k[3] = {0};
    cg_tensor *out = rows_of(gi, &j.a, &k[0]) && rows_of(gh, &j.b, &k[1]) && rows_of(h, &j.c, &k[2])
                         ? cg_empty(CG_SHAPE(gi->shape[0], H))
                         : NULL;
    if (out) {
        j.out = cg_numel(out) ? cg_data(out) : NULL;
        const int64_t B = gi->shape[0];
        cg_shares_run(B, cell_grain(3 * H), cell_team(B, 3 * H), gru_fwd_rows, &j);
    }
    cg_release_all(3, k[0], k[1], k[2]);
    return out;
}

/* *d = t when d is not NULL, else t released */
static void hand(cg_tensor **d, cg_tensor *t)
{
    if (d)
        *d = t;
    else
        cg_release(t);
}

bool cg_k_gru_cell_backward(const cg_tensor *gi, const cg_tensor *gh, const cg_tensor *h,
                            const cg_tensor *g, cg_tensor **dgi, cg_tensor **dgh, cg_tensor **dh)
{
    cg_tensor **d[3] = {dgi, dgh, dh};
    for (int i = 0; i < 3; i++)
        if (d[i])
            *d[i] = NULL;
    if (!g)
        return cg_error_null_input("gru_cell backward"), false;
    const int64_t H = gru_args("gru_cell backward", gi, gh, h, g);
    if (!H)
        return false;
    const int64_t B = gi->shape[0];
    cell_job j = {.H = H};
    cg_tensor *k[4] = {0}, *o[3] = {0};
    bool ok = rows_of(gi, &j.a, &k[0]) && rows_of(gh, &j.b, &k[1]) && rows_of(h, &j.c, &k[2]) &&
              rows_of(g, &j.g, &k[3]) && (o[0] = cg_empty(CG_SHAPE(B, 3 * H))) &&
              (o[1] = cg_empty(CG_SHAPE(B, 3 * H))) && (o[2] = cg_empty(CG_SHAPE(B, H)));
    if (ok) {
        j.d0 = cg_data(o[0]), j.d1 = cg_data(o[1]), j.d2 = cg_data(o[2]);
        cg_shares_run(B, cell_grain(3 * H), cell_team(B, 3 * H), gru_bwd_rows, &j);
        for (int i = 0; i < 3; i++)
            hand(d[i], o[i]);
    } else {
        cg_release_all(3, o[0], o[1], o[2]);
    }
    cg_release_all(4, k[0], k[1], k[2], k[3]);
    return ok;
}

/* -------------------------------------------------------------- LSTM */
static inline __attribute__((always_inline)) void lstm_fwd_row(
    int64_t H, const float *restrict ai, const float *restrict af, const float *restrict ag,
    const float *restrict ao, const float *restrict c, float *restrict oh, float *restrict oc)
{
    for (int64_t k = 0; k < H; k++) {
        const float i = f_sigmoid(ai[k]), f = f_sigmoid(af[k]);
        const float gg = ew_tanhf(ag[k]), og = f_sigmoid(ao[k]);
        const float c1 = f * c[k] + i * gg;
        oh[k] = og * ew_tanhf(c1);
        oc[k] = c1;
    }
}

EW_CLONES static void lstm_fwd_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const cell_job *j = ctx;
    const int64_t H = j->H;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict a = j->a.p + r * j->a.ld, *restrict c = j->c.p + r * j->c.ld;
        lstm_fwd_row(H, a, a + H, a + 2 * H, a + 3 * H, c, j->out + r * 2 * H,
                     j->out + r * 2 * H + H);
    }
}

/* One row of the LSTM's backward (gh, gc: h''s and c''s gradients) */
static inline __attribute__((always_inline)) void lstm_bwd_row(
    int64_t H, const float *restrict ai, const float *restrict af, const float *restrict ag,
    const float *restrict ao, const float *restrict c, const float *restrict gh,
    const float *restrict gc, float *restrict di, float *restrict df, float *restrict dg,
    float *restrict dout, float *restrict dc)
{
    for (int64_t k = 0; k < H; k++) {
        const float i = f_sigmoid(ai[k]), f = f_sigmoid(af[k]);
        const float gg = ew_tanhf(ag[k]), og = f_sigmoid(ao[k]);
        const float tc = ew_tanhf(f * c[k] + i * gg);
        const float dct = gc[k] + gh[k] * og * (1.0f - tc * tc);
        di[k] = dct * gg * (i * (1.0f - i));
        df[k] = dct * c[k] * (f * (1.0f - f));
        dg[k] = dct * i * (1.0f - gg * gg);
        dout[k] = gh[k] * tc * (og * (1.0f - og));
        dc[k] = dct * f;
    }
}

/* d0 = dgates [B, 4H], d1 = dc [B, H]; g = [dh' | dc'] [B, 2H] */
EW_CLONES static void lstm_bwd_rows(int64_t r0, int64_t r1, int thread, const void *ctx)
{
    (void)thread;
    const cell_job *j = ctx;
    const int64_t H = j->H;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict a = j->a.p + r * j->a.ld, *restrict c = j->c.p + r * j->c.ld;
        const float *restrict g = j->g.p + r * j->g.ld;
        float *restrict da = j->d0 + r * 4 * H;
        lstm_bwd_row(H, a, a + H, a + 2 * H, a + 3 * H, c, g, g + H, da, da + H, da + 2 * H,
                     da + 3 * H, j->d1 + r * H);
    }
}

/* gates [B, 4H], c [B, H] (g [B, 2H] for the backward): H, or 0 + error */
static int64_t lstm_args(const char *op, const cg_tensor *gates, const cg_tensor *c,
                         const cg_tensor *g)
{
    const int64_t w = cell_arg(op, "gates", gates, -1, 0, "[batch, 4 hidden] (gates i, f, g, o)");
    if (!w)
        return 0;
    if (w % 4) {
        char s[96];
        cg_set_error("%s: gates is %s, whose last dim is not 4 hidden (gates i, f, g, o)", op,
                     cg_shape_str(gates, s, sizeof s));
        return 0;
    }
    const int64_t B = gates->shape[0], H = w / 4;
    char want[64];
    snprintf(want, sizeof want, "[%lld, %lld] (the gates' batch, hidden)", (long long)B,
             (long long)H);
    if (!cell_arg(op, "c", c, B, H, want))
        return 0;
    snprintf(want, sizeof want, "[%lld, %lld] (h' and c')", (long long)B, (long long)(2 * H));
    if (g && !cell_arg(op, "gradient", g, B, 2 * H, want))
        return 0;
    return H;
}

cg_tensor *cg_k_lstm_cell(const cg_tensor *gates, const cg_tensor *c)
{
    const int64_t H = lstm_args("lstm_cell", gates, c, NULL);
    if (!H)
        return NULL;
    cell_job j = {.H = H};
    cg_tensor *k[2] = {0};
    cg_tensor *out = rows_of(gates, &j.a, &k[0]) && rows_of(c, &j.c, &k[1])
                         ? cg_empty(CG_SHAPE(gates->shape[0], 2 * H))
                         : NULL;
    if (out) {
        j.out = cg_numel(out) ? cg_data(out) : NULL;
        const int64_t B = gates->shape[0];
        cg_shares_run(B, cell_grain(4 * H), cell_team(B, 4 * H), lstm_fwd_rows, &j);
    }
    cg_release_all(2, k[0], k[1]);
    return out;
}

bool cg_k_lstm_cell_backward(const cg_tensor *gates, const cg_tensor *c, const cg_tensor *g,
                             cg_tensor **dgates, cg_tensor **dc)
{
    if (dgates)
        *dgates = NULL;
    if (dc)
        *dc = NULL;
    if (!g)
        return cg_error_null_input("lstm_cell backward"), false;
    const int64_t H = lstm_args("lstm_cell backward", gates, c, g);
    if (!H)
        return false;
    const int64_t B = gates->shape[0];
    cell_job j = {.H = H};
    cg_tensor *k[3] = {0}, *o[2] = {0};
    bool ok = rows_of(gates, &j.a, &k[0]) && rows_of(c, &j.c, &k[1]) && rows_of(g, &j.g, &k[2]) &&
              (o[0] = cg_empty(CG_SHAPE(B, 4 * H))) && (o[1] = cg_empty(CG_SHAPE(B, H)));
    if (ok) {
        j.d0 = cg_data(o[0]), j.d1 = cg_data(o[1]);
        cg_shares_run(B, cell_grain(4 * H), cell_team(B, 4 * H), lstm_bwd_rows, &j);
        hand(dgates, o[0]);
        hand(dc, o[1]);
    } else {
        cg_release_all(2, o[0], o[1]);
    }
    cg_release_all(3, k[0], k[1], k[2]);
    return ok;
}
