/* The fused attention's products on AMX tiles (see core/attention_amx.h).
 *
 * Layouts, for a head with dp = dh rounded up to 32 and K32 = x rounded up
 * to 32 (every buffer is zero-padded to them, so a tile never reads past
 * it and the padding it reads is zero):
 *   rows:   bf16 [rows][cols], a left operand as it is;
 *   pairs:  32-bit words [rows / 2][cols], rows 2r and 2r + 1's elements
 *           in word (r, c)'s low and high halves: a right operand whose k
 *           runs down the rows (v in P v, k in dS k, P and dS in the sums
 *           over queries);
 *   turned: a rows buffer read as words [rows][cols / 2] and transposed, so
 *           [cols / 2][rows]: a right operand whose k runs along the rows
 *           (k in q k^T, v in dO v^T), and (from pairs) the left operands
 *           dO^T and q^T of the sums over queries.
 * The sums over queries (dv = P^T dO, dk = dS^T q) are computed turned
 * over, dv^T = dO^T P, whose operands come from the pairs of P and dS
 * without transposing them (dO and q, the small ones, are transposed). */
#include <immintrin.h>
#include <string.h>

#include "core/amx_tiles.h"
#include "core/attention_amx.h"
#include "core/gemm.h"
#include "core/gemm_internal.h"
#include "core/parse.h"

#define AMX_TARGET CG_AMX_TARGET
#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

static inline int64_t up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

bool cg_attn_amx_on(int path)
{
    bool on = true;
    if (!cg_env_flag("CG_ATTN_AMX", &on))
        on = true; /* a malformed value was refused where the environment is checked */
    return on && path == CG_GEMM_BF16_AMX;
}

/* ------------------------------------------------------------ operands */

/* 16 elements from p as bf16 bits (floats rounded as the products round
 * them; bf16 read as they are), lanes outside m zero */
BF16_TARGET static inline __m256i bf16x16(const void *p, bool bf, __mmask16 m)
{
    if (bf)
        return _mm256_maskz_loadu_epi16(m, p);
    return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, p));
}
static inline __mmask16 lanes(int64_t n) { return n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }
static inline const void *at(const void *p, bool bf, int64_t i)
{
    return bf ? (const void *)((const uint16_t *)p + i) : (const void *)((const float *)p + i);
}

/* rows: dst[r][c] (ld ldd) = src row r's element c (rows rs apart) for
 * r < n, c < m; zero up to rows_to x cols_to (multiples of 16) */
BF16_TARGET static void to_rows(const void *src, bool bf, int64_t rs, int64_t n, int64_t m,
                                uint16_t *dst, int64_t ldd, int64_t rows_to, int64_t cols_to)
{
    for (int64_t r = 0; r < rows_to; r++)
        for (int64_t c = 0; c < cols_to; c += 16) {
            __m256i v = r < n && c < m ? bf16x16(at(src, bf, r * rs + c), bf, lanes(m - c))
                                       : _mm256_setzero_si256();
            _mm256_storeu_si256((__m256i *)(dst + r * ldd + c), v);
        }
}

/* pairs: dst[r][c] (ld ldd words) = rows 2r and 2r + 1 of src (rows rs
 * apart) at column c, for rows < n and c < m; zero up to rows_to / 2 x
 * cols_to (multiples of 32 and 16) */
BF16_TARGET static void to_pairs(const void *src, bool bf, int64_t rs, int64_t n, int64_t m,
                                 uint32_t *dst, int64_t ldd, int64_t rows_to, int64_t cols_to)
{
    for (int64_t r = 0; r < rows_to; r += 2)
        for (int64_t c = 0; c < cols_to; c += 16) {
            const __mmask16 k = c < m ? lanes(m - c) : 0;
            __m256i lo =
                r < n && k ? bf16x16(at(src, bf, r * rs + c), bf, k) : _mm256_setzero_si256();
            __m256i hi = r + 1 < n && k ? bf16x16(at(src, bf, (r + 1) * rs + c), bf, k)
                                        : _mm256_setzero_si256();
            __m512i w = _mm512_or_si512(_mm512_cvtepu16_epi32(lo),
                                        _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
            _mm512_storeu_si512(dst + r / 2 * ldd + c, w);
        }
}

/* turned: dst[c][r] = src[r][c] for 32-bit words, r < rows, c < cols
 * (multiples of 16), src rows lds words apart, dst rows ldd apart */
CG_AVX512 static void turn(const uint32_t *src, int64_t lds, int64_t rows, int64_t cols,
                           uint32_t *dst, int64_t ldd)
{
    for (int64_t r0 = 0; r0 < rows; r0 += 16)
        for (int64_t c0 = 0; c0 < cols; c0 += 16) {
            __m512 t[16];
            for (int i = 0; i < 16; i++)
                t[i] = _mm512_loadu_ps(src + (r0 + i) * lds + c0);
            cg_transpose16(t);
            for (int i = 0; i < 16; i++)
                _mm512_storeu_ps(dst + (c0 + i) * ldd + r0, t[i]);
        }
}

/* ------------------------------------------------------------ products */

/* c[b ldc + a] = t[a][b] for a < rn, b < cn: a 16 x 16 tile (rows of
 * 16 floats) turned over into C^T */
CG_AVX512 static void store_turned(const float *t, int64_t rn, int64_t cn, float *c, int64_t ldc)
{
    __m512 r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_load_ps(t + 16 * i);
    cg_transpose16(r);
    for (int64_t b = 0; b < cn; b++)
        _mm512_mask_storeu_ps(c + b * ldc, lanes(rn), r[b]);
}

/* C[m, n] = L[m, K] R[K, n]: L in rows (ld ldl elements; rows up to m
 * rounded to 16 and columns up to K rounded to 32 readable, those past K
 * zero), R in pairs (ld ldr words; columns up to n rounded to 16
 * readable). Row pairs of R past K are not read: the last chunk of 32 is
 * completed with zeros in a copy, as the GEMM completes its panels. C is
 * written at c (ld ldc floats) or, turned, C^T (c[j * ldc + i] = C[i, j]).
 * sub > 0: the sum of column block j (32 columns) starts at k = j rounded
 * down to sub (a multiple of 32), where the GEMM's sum over the rows of a
 * causal sub-block starts; the columns of a block whose sum starts at or
 * past K are zero. Tiles 0-3: C's 2 x 2 quarters of 16 x 16; 4-5: L's
 * rows; 6-7: R's pairs. emu: the tiles emulated (core/amx_tiles.h). */
AMX_TARGET static inline __attribute__((always_inline)) void tiles_mul_of(
    bool emu, int64_t m, int64_t n, int64_t K, const uint16_t *L, int64_t ldl, const uint32_t *R,
    int64_t ldr, float *c, int64_t ldc, bool turned, int64_t sub)
{
    cg_amx_thread_tiles(); /* (none to configure when emulated) */
    float t[16 * 16] __attribute__((aligned(64)));
    uint32_t tail[2][16 * 16] __attribute__((aligned(64)));
    const int64_t kfull = K / 32 * 32; /* chunks read in place */
    for (int64_t j = 0; j < n; j += 32) {
        const bool n2 = n - j > 16;
        const int64_t k0 = sub > 0 ? j / sub * sub : 0;
        if (K % 32) { /* the last chunk's pairs [kfull/2, K/2 rounded up), zeros after */
            memset(tail, 0, sizeof tail);
            for (int64_t p = kfull / 2; p < (K + 1) / 2; p++)
                for (int q = 0; q < (n2 ? 2 : 1); q++) {
                    uint32_t *d = tail[q] + (p - kfull / 2) * 16;
                    memcpy(d, R + p * ldr + j + 16 * q, 16 * sizeof(uint32_t));
                    if (K % 2 && p == K / 2) /* an odd K: the pair's second half is past it */
                        for (int e = 0; e < 16; e++)
                            d[e] &= 0xffffu;
                }
        }
        for (int64_t i = 0; i < m; i += 32) {
            const bool m2 = m - i > 16;
            CG_TILE_ZERO(emu, 0);
            CG_TILE_ZERO(emu, 1);
            CG_TILE_ZERO(emu, 2);
            CG_TILE_ZERO(emu, 3);
            for (int64_t kk = k0; kk < K; kk += 32) {
                const uint16_t *lp = L + i * ldl + kk;
                const uint32_t *rp = R + kk / 2 * ldr + j, *rq = rp + 16;
                size_t sr = (size_t)ldr * 4;
                if (kk >= kfull) {
                    rp = tail[0];
                    rq = tail[1];
                    sr = 64;
                }
                CG_TILE_LOADD(emu, 4, lp, ldl * 2);
                CG_TILE_LOADD(emu, 6, rp, sr);
                CG_TILE_DPBF16PS(emu, 0, 4, 6);
                if (n2) {
                    CG_TILE_LOADD(emu, 7, rq, sr);
                    CG_TILE_DPBF16PS(emu, 1, 4, 7);
                }
                if (m2) {
                    CG_TILE_LOADD(emu, 5, lp + 16 * ldl, ldl * 2);
                    CG_TILE_DPBF16PS(emu, 2, 5, 6);
                    if (n2)
                        CG_TILE_DPBF16PS(emu, 3, 5, 7);
                }
            }
            for (int qd = 0; qd < 4; qd++) {
                const int64_t r0 = i + (qd >> 1) * 16, c0 = j + (qd & 1) * 16;
                if (r0 >= m || c0 >= n)
                    continue;
                const int64_t rn = min64(16, m - r0), cn = min64(16, n - c0);
                float *cp = turned ? c + c0 * ldc + r0 : c + r0 * ldc + c0;
                if (!turned && rn == 16 && cn == 16) {
                    switch (qd) { /* the tile number must be a constant */
                    case 0: CG_TILE_STORED(emu, 0, cp, ldc * 4); break;
                    case 1: CG_TILE_STORED(emu, 1, cp, ldc * 4); break;
                    case 2: CG_TILE_STORED(emu, 2, cp, ldc * 4); break;
                    default: CG_TILE_STORED(emu, 3, cp, ldc * 4); break;
                    }
                    continue;
                }
                switch (qd) {
                case 0: CG_TILE_STORED(emu, 0, t, 64); break;
                case 1: CG_TILE_STORED(emu, 1, t, 64); break;
                case 2: CG_TILE_STORED(emu, 2, t, 64); break;
                default: CG_TILE_STORED(emu, 3, t, 64); break;
                }
                if (turned)
                    store_turned(t, rn, cn, cp, ldc);
                else
                    for (int64_t a = 0; a < rn; a++)
                        memcpy(cp + a * ldc, t + a * 16, (size_t)cn * sizeof(float));
            }
        }
    }
}

/* tiles_mul_of on the unit and emulated (core/amx_tiles.h), each compiled
 * on its own */
AMX_TARGET static void tiles_mul_unit(int64_t m, int64_t n, int64_t K, const uint16_t *L,
                                      int64_t ldl, const uint32_t *R, int64_t ldr, float *c,
                                      int64_t ldc, bool turned, int64_t sub)
{
    tiles_mul_of(false, m, n, K, L, ldl, R, ldr, c, ldc, turned, sub);
}
AMX_TARGET static void tiles_mul_emulated(int64_t m, int64_t n, int64_t K, const uint16_t *L,
                                          int64_t ldl, const uint32_t *R, int64_t ldr, float *c,
                                          int64_t ldc, bool turned, int64_t sub)
{
    tiles_mul_of(true, m, n, K, L, ldl, R, ldr, c, ldc, turned, sub);
}
static inline __attribute__((always_inline)) void tiles_mul(int64_t m, int64_t n, int64_t K,
                                                            const uint16_t *L, int64_t ldl,
                                                            const uint32_t *R, int64_t ldr,
                                                            float *c, int64_t ldc, bool turned,
                                                            int64_t sub)
{
    if (cg_amx_emulated())
        tiles_mul_emulated(m, n, K, L, ldl, R, ldr, c, ldc, turned, sub);
    else
        tiles_mul_unit(m, n, K, L, ldl, R, ldr, c, ldc, turned, sub);
}

/* ------------------------------------------------------------ forward */

/* Query rows go through the forward and the backward in strips of up to 32
 * (two row tiles), whose scores stay in cache for their row kernels. */
enum { STRIP = 32 };

/* The forward's scratch, after the head id: K^T (turned, [dp/2][tk]), v
 * (pairs, [tk/2][dp]), a strip's q (rows, [32][dp]), its scores (floats,
 * [32][tk]) and its weights (rows, [32][tk]); k as rows ([tk][dp]), from
 * which K^T is turned. */
typedef struct {
    uint32_t *kt, *vp;
    uint16_t *q;
    float *s;
    uint16_t *p, *kr;
} fwd_scratch;

static fwd_scratch fwd_parts(void *w, int64_t Tk, int64_t dh)
{
    const int64_t dp = up(dh, 32), tk = up(Tk, 32);
    fwd_scratch f;
    f.kt = (uint32_t *)((char *)w + 64);
    f.vp = f.kt + dp / 2 * tk;
    f.q = (uint16_t *)(f.vp + tk / 2 * dp);
    f.s = (float *)(f.q + STRIP * dp);
    f.p = (uint16_t *)(f.s + STRIP * tk);
    f.kr = f.p + STRIP * tk;
    return f;
}

size_t cg_attn_amx_fwd_bytes(int64_t Tk, int64_t dh)
{
    const int64_t dp = up(dh, 32), tk = up(Tk, 32);
    return (size_t)(64 + 4 * (dp / 2 * tk + tk / 2 * dp) + 2 * STRIP * dp + 4 * STRIP * tk +
                    2 * STRIP * tk + 2 * tk * dp);
}

void cg_attn_amx_fwd_head(void *w, int64_t id, const cg_attn_amx_head *h)
{
    if (id < 0 || *(int64_t *)w == id) {
        *(int64_t *)w = id;
        return;
    }
    const int64_t dp = up(h->dh, 32), tk = up(h->Tk, 32);
    fwd_scratch f = fwd_parts(w, h->Tk, h->dh);
    to_rows(h->k, h->kbf, h->kr, h->Tk, h->dh, f.kr, dp, tk, dp);
    turn((const uint32_t *)f.kr, dp / 2, tk, dp / 2, f.kt, tk);
    to_pairs(h->v, h->vbf, h->vr, h->Tk, h->dh, f.vp, dp, tk, dp);
    *(int64_t *)w = id;
}

void cg_attn_amx_fwd_rows(void *w, const cg_attn_amx_head *h, int64_t i0, int64_t i1, int64_t kn,
                          void (*row)(void *ctx, int64_t i, float *s, int64_t kn), void *ctx,
                          float *out, int64_t lo)
{
    const int64_t dp = up(h->dh, 32), tk = up(h->Tk, 32), k32 = up(kn, 32);
    fwd_scratch f = fwd_parts(w, h->Tk, h->dh);
    for (int64_t r0 = i0; r0 < i1; r0 += STRIP) {
        const int64_t rows = min64(STRIP, i1 - r0);
        to_rows(at(h->q, h->qbf, r0 * h->qr), h->qbf, h->qr, rows, h->dh, f.q, dp, up(rows, 16),
                dp);
        tiles_mul(rows, kn, h->dh, f.q, dp, f.kt, tk, f.s, tk, false, 0);
        for (int64_t i = 0; i < rows; i++)
            row(ctx, r0 + i, f.s + i * tk, kn);
        to_rows(f.s, false, tk, rows, kn, f.p, k32, up(rows, 16), k32);
        tiles_mul(rows, h->dh, kn, f.p, k32, f.vp, dp, out + (r0 - i0) * lo, lo, false, 0);
    }
}

/* ------------------------------------------------------------ backward */

/* The backward's scratch: q, k, v and dO as rows ([tq or tk][dp]); K^T
 * and V^T turned ([dp/2][tk]) and k in pairs ([tk/2][dp]); a strip's
 * scores and dP (floats, [32][tk] each) and dS (rows, [32][tk]); the
 * pairs of P and dS over all queries ([tq/2][tk] each); the pairs of dO
 * and q ([tq/2][dp]) and them turned ([dp][tq/2]). */
typedef struct {
    uint16_t *q, *k, *v, *g;
    uint32_t *kt, *vt, *kp;
    float *s, *d;
    uint16_t *ds;
    uint32_t *pp, *dsp, *gp, *qp, *gt, *qt;
} bwd_scratch;

static size_t bwd_parts(void *w, int64_t Tq, int64_t Tk, int64_t dh, bwd_scratch *b)
{
    const int64_t dp = up(dh, 32), tq = up(Tq, 32), tk = up(Tk, 32);
    char *p = w;
#define TAKE(field, n)                       \
    do {                                     \
        b->field = (void *)p;                \
        p += (size_t)(n) * sizeof *b->field; \
    } while (0)
    TAKE(q, tq * dp);
    TAKE(k, tk * dp);
    TAKE(v, tk * dp);
    TAKE(g, tq * dp);
    TAKE(kt, dp / 2 * tk);
    TAKE(vt, dp / 2 * tk);
    TAKE(kp, tk / 2 * dp);
    TAKE(s, STRIP * tk);
    TAKE(d, STRIP * tk);
    TAKE(ds, STRIP * tk);
    TAKE(pp, tq / 2 * tk);
    TAKE(dsp, tq / 2 * tk);
    TAKE(gp, tq / 2 * dp);
    TAKE(qp, tq / 2 * dp);
    TAKE(gt, dp * tq / 2);
    TAKE(qt, dp * tq / 2);
#undef TAKE
    return (size_t)(p - (char *)w);
}

size_t cg_attn_amx_bwd_bytes(int64_t Tq, int64_t Tk, int64_t dh)
{
    bwd_scratch b;
    return bwd_parts(NULL, Tq, Tk, dh, &b);
}

void cg_attn_amx_bwd_head(void *w, const cg_attn_amx_head *h, const float *g, int64_t gr,
                          int64_t qb, int64_t sub,
                          void (*rows)(void *ctx, int64_t i, float *s, float *d, int64_t kz),
                          void *ctx, float *dq, int64_t dqr, float *dk, int64_t dkr, float *dv,
                          int64_t dvr)
{
    const int64_t Tq = h->Tq, Tk = h->Tk, dh = h->dh;
    const int64_t dp = up(dh, 32), tq = up(Tq, 32), tk = up(Tk, 32);
    bwd_scratch b;
    bwd_parts(w, Tq, Tk, dh, &b);
    to_rows(h->q, h->qbf, h->qr, Tq, dh, b.q, dp, tq, dp);
    to_rows(h->k, h->kbf, h->kr, Tk, dh, b.k, dp, tk, dp);
    to_rows(h->v, h->vbf, h->vr, Tk, dh, b.v, dp, tk, dp);
    to_rows(g, false, gr, Tq, dh, b.g, dp, tq, dp);
    turn((const uint32_t *)b.k, dp / 2, tk, dp / 2, b.kt, tk);
    turn((const uint32_t *)b.v, dp / 2, tk, dp / 2, b.vt, tk);
    to_pairs(b.k, true, dp, Tk, dh, b.kp, dp, tk, dp);

    for (int64_t i0 = 0; i0 < Tq; i0 += qb) {
        const int64_t i1 = min64(i0 + qb, Tq);
        const int64_t ke1 = sub ? min64(i1, Tk) : Tk; /* keys the tile's rows see */
        const int64_t kz = sub ? min64(Tk, up(ke1, sub)) : Tk;
        for (int64_t r0 = i0; r0 < i1; r0 += STRIP) {
            const int64_t n = min64(STRIP, i1 - r0);
            /* S = q k^T and dP = dO v^T, then P and dS in place */
            tiles_mul(n, ke1, dh, b.q + r0 * dp, dp, b.kt, tk, b.s, tk, false, 0);
            tiles_mul(n, ke1, dh, b.g + r0 * dp, dp, b.vt, tk, b.d, tk, false, 0);
            for (int64_t i = 0; i < n; i++) {
                float *si = b.s + i * tk, *di = b.d + i * tk;
                rows(ctx, r0 + i, si, di, kz);
                memset(si + kz, 0, (size_t)(tk - kz) * sizeof(float));
                memset(di + kz, 0, (size_t)(tk - kz) * sizeof(float));
            }
            to_pairs(b.s, false, tk, n, tk, b.pp + r0 / 2 * tk, tk, up(n, 2), tk);
            to_pairs(b.d, false, tk, n, tk, b.dsp + r0 / 2 * tk, tk, up(n, 2), tk);
            if (dq) { /* dq = dS k over the keys the tile's rows see */
                const int64_t k32 = up(ke1, 32);
                to_rows(b.d, false, tk, n, ke1, b.ds, k32, up(n, 16), k32);
                tiles_mul(n, dh, ke1, b.ds, k32, b.kp, dp, dq + r0 * dqr, dqr, false, 0);
            }
        }
    }
    if (dv) { /* dv^T = dO^T P */
        to_pairs(b.g, true, dp, Tq, dh, b.gp, dp, tq, dp);
        turn(b.gp, dp, tq / 2, dp, b.gt, tq / 2);
        tiles_mul(dh, Tk, Tq, (const uint16_t *)b.gt, tq, b.pp, tk, dv, dvr, true, sub);
    }
    if (dk) { /* dk^T = q^T dS */
        to_pairs(b.q, true, dp, Tq, dh, b.qp, dp, tq, dp);
        turn(b.qp, dp, tq / 2, dp, b.qt, tq / 2);
        tiles_mul(dh, Tk, Tq, (const uint16_t *)b.qt, tq, b.dsp, tk, dk, dkr, true, sub);
    }
}
