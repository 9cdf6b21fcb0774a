/* AMX's tile operations in software (see core/amx_tiles.h): this thread's
 * eight tiles of 16 rows of 64 bytes, and tdpbf16ps as Intel's pseudo-code
 * computes it, with AVX-512 (the emulation is offered on CPUs with
 * AVX512_BF16 only). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "core/amx_tiles.h"

enum { TILES = 8, ROWS = 16, ROW_BYTES = 64 };
/* MXCSR's denormals-are-zero and flush-to-zero bits: tdpbf16ps reads
 * subnormal inputs as zero and flushes subnormal results */
#define MXCSR_DAZ_FTZ 0x8040u

bool cg_amx_emulation;
static _Thread_local uint8_t tiles[TILES][ROWS][ROW_BYTES] __attribute__((aligned(64)));

void cg_amx_emu_zero(int t) { memset(tiles[t], 0, sizeof tiles[t]); }

void cg_amx_emu_loadd(int t, const void *p, size_t stride)
{
    for (int r = 0; r < ROWS; r++)
        memcpy(tiles[t][r], (const char *)p + (size_t)r * stride, ROW_BYTES);
}

void cg_amx_emu_stored(int t, void *p, size_t stride)
{
    for (int r = 0; r < ROWS; r++)
        memcpy((char *)p + (size_t)r * stride, tiles[t][r], ROW_BYTES);
}

/* c[m][n] += a[m][2q] b[q][n].lo + a[m][2q + 1] b[q][n].hi for q = 0 .. 15
 * in order: a's rows are 32 bf16 values (16 pairs), b's rows 16 pairs of
 * bf16, c's rows 16 floats. A bf16 value is its float's high half. a's
 * values are widened to floats first, so that each step is one
 * multiply-add with a broadcast operand, c's 16 rows in registers. */
__attribute__((target("avx512f"))) void cg_amx_emu_dpbf16ps(int c, int a, int b)
{
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | MXCSR_DAZ_FTZ);
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
    float lo_a[ROWS][ROWS], hi_a[ROWS][ROWS]; /* [m][q]: a[m][2q], a[m][2q + 1] */
    __m512 acc[ROWS];
    for (int m = 0; m < ROWS; m++) {
        const __m512i w = _mm512_load_si512(tiles[a][m]);
        _mm512_storeu_ps(lo_a[m], _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        _mm512_storeu_ps(hi_a[m], _mm512_castsi512_ps(_mm512_and_si512(w, hi)));
        acc[m] = _mm512_load_ps(tiles[c][m]);
    }
    for (int q = 0; q < ROWS; q++) {
        const __m512i w = _mm512_load_si512(tiles[b][q]);
        const __m512 lo_b = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        const __m512 hi_b = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
        for (int m = 0; m < ROWS; m++) {
            acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(lo_a[m][q]), lo_b, acc[m]);
            acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(hi_a[m][q]), hi_b, acc[m]);
        }
    }
    for (int m = 0; m < ROWS; m++)
        _mm512_store_ps(tiles[c][m], acc[m]);
    _mm_setcsr(csr);
}
