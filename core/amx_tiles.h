/* Internal to core/: AMX's tile operations as the bf16 kernels use them
 * (core/gemm_bf16.c's kernel_amx, core/attention_amx.c's tiles_mul), on
 * the unit or emulated.
 *
 * The emulation (CG_AMX_EMULATE=1, core/amx_emulate.c) runs AMX's whole
 * path (its panels, packing, write-out, thread splits and attention's
 * tiles) on a CPU with AVX512_BF16 and no AMX, so that the tests check it
 * on every such machine, as the emulated vdpbf16ps checks the native
 * kernel's path on CPUs without AVX512_BF16. Its tiles are this thread's
 * eight arrays of 16 rows of 64 bytes (the configuration amx_configure
 * loads, the only one the kernels use). tdpbf16ps is Intel's pseudo-code:
 * for each row of the result, each k-pair in order, the pair's even
 * product and then its odd one, each added with one fp32 rounding (a fused
 * multiply-add), subnormal inputs read as zero and subnormal sums flushed
 * to zero. The unit rounds its sums otherwise (core/gemm_bf16.c), so the
 * bits are the emulation's own: the tests hold both to the same bounds.
 *
 * A kernel is written once as an always_inline body taking `emu` and
 * compiled twice, with emu false (the tile instructions) and true (the
 * emulation's calls), both under AMX_TARGET so that either compiler
 * accepts the instructions; no compiler emits AMX instructions of its own,
 * so the emulated copy runs on any CPU with AVX512_BF16. t, a, b and c
 * are tile numbers (constants: the instructions encode them). */
#ifndef CG_AMX_TILES_H
#define CG_AMX_TILES_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>

#define CG_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))

/* Whether AMX's tile operations are emulated in this process: set from
 * CG_AMX_EMULATE before the first product (core/gemm.c), read by every
 * AMX kernel call */
extern bool cg_amx_emulation;
static inline bool cg_amx_emulated(void) { return cg_amx_emulation; }

/* This thread's emulated tiles: tile t = 0, tile t = 16 rows of the
 * stride-apart 64 bytes at p, the 16 rows of tile t to p, c += a b. */
void cg_amx_emu_zero(int t);
void cg_amx_emu_loadd(int t, const void *p, size_t stride);
void cg_amx_emu_stored(int t, void *p, size_t stride);
void cg_amx_emu_dpbf16ps(int c, int a, int b);

/* the unit's instruction, or the emulation's call where emu */
#define CG_TILE_OP(emu, unit, emulated) \
    do {                                \
        if (emu)                        \
            emulated;                   \
        else                            \
            unit;                       \
    } while (0)
#define CG_TILE_ZERO(emu, t) CG_TILE_OP(emu, _tile_zero(t), cg_amx_emu_zero(t))
#define CG_TILE_LOADD(emu, t, p, stride) \
    CG_TILE_OP(emu, _tile_loadd(t, p, stride), cg_amx_emu_loadd(t, p, stride))
#define CG_TILE_STORED(emu, t, p, stride) \
    CG_TILE_OP(emu, _tile_stored(t, p, stride), cg_amx_emu_stored(t, p, stride))
#define CG_TILE_DPBF16PS(emu, c, a, b) \
    CG_TILE_OP(emu, _tile_dpbf16ps(c, a, b), cg_amx_emu_dpbf16ps(c, a, b))

#endif
