/* bf16 weight x bf16 activation products on AMX-BF16 tiles (Intel Sapphire Rapids and later): what the dense
 * products (dense.c) run at the "amx" SIMD level when the caller says X holds bf16 values (bf16 mode).
 *
 * One TDPBF16PS multiplies a tile of 16 weight rows x 32 columns (A, read straight from W, row stride
 * in * 2 bytes) by 32 columns x 16 tokens of X (B, from a packed copy of X, see qgpu_amx_pack) into a
 * 16 x 16 fp32 tile C, which accumulates over the columns in order. fp32 X (a prompt's products in fp32
 * mode, QGPU_PROMPT) is packed as three bf16 parts, x = hi + mid + lo exactly (each the top 8 significant
 * bits of what the ones before leave; a bf16 product of them is exact in fp32), and each A tile is
 * multiplied by the hi, mid and lo B tiles of its columns in that order. Every C element is computed from its own
 * weight row and token alone, by the same sequence of instructions whatever tile or block holds it, so a
 * token's result is the same bits in a matvec, a matmul of any size, or on any thread count. The order and
 * rounding inside one instruction are the hardware's (not specified: each product is exact and denormals are
 * flushed, but the 32 products' sum matches no simple IEEE order, see docs/ccore.md), so the
 * results are within fp32 summation error of the exact product, like every other SIMD level's.
 *
 * Linux lends the tile registers only after a per-process request (arch_prctl ARCH_REQ_XCOMP_PERM);
 * qgpu_amx_usable makes it once and says whether AMX can be used. Elsewhere this file compiles to stubs. */
#define _DEFAULT_SOURCE /* syscall() under -std=c99 */
#include <string.h>

#include "qgpu_core.h"

enum { AMX_ROWS = 16, AMX_TOKENS = 16, AMX_K = 32, AMX_TILE_BYTES = 1024 };

size_t qgpu_amx_packed_size(size_t n, size_t in) {
    size_t tiles = (n + AMX_TOKENS - 1) / AMX_TOKENS, steps = (in + AMX_K - 1) / AMX_K;
    return tiles * steps * (AMX_TILE_BYTES / 2);
}

#if (defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || \
    (defined(__x86_64__) && defined(__clang__) && __clang_major__ >= 12)
#define QGPU_AMX 1
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(QGPU_AMX) && defined(SYS_arch_prctl)
enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };

int qgpu_amx_usable(void) {
    static int usable = -1;
    if (usable < 0) {
        __builtin_cpu_init();
        usable = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("amx-tile") &&
                 __builtin_cpu_supports("amx-bf16") &&
                 syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return usable;
}

/* B tiles: for token tile tt and column step ks, 16 rows of 64 bytes, row p holding for each of the 16
 * tokens the pair of columns ks * 32 + 2p, + 2p + 1 (the pair layout TDPBF16PS reads), one 32-bit word per
 * pair. Tokens past n and columns past `in` are zeros. With parts = 1 X holds bf16 values (checked: returns 0
 * when one is not); with 3 the tiles of X's hi, mid and lo parts follow one another, x = hi + mid + lo: each
 * part the top 8 significant bits of what the parts before leave (x - hi and x - hi - mid are exact in fp32,
 * and at most 8 significant bits remain for lo; exact for |x| above ~2^-100, below which lo is a denormal,
 * which AMX reads as zero). A non-finite x is its own hi (a NaN stays a NaN), with zero mid and lo. Each part
 * is a bf16 value, so the conversion below (round to nearest) is exact. Built for AMX CPUs, which all have
 * AVX512-BF16. */
__attribute__((target("avx512f,avx512bf16"))) int qgpu_amx_pack(const float *x, size_t n, size_t in, int parts,
                                                                 uint16_t *xp) {
    size_t steps = (in + AMX_K - 1) / AMX_K, size = qgpu_amx_packed_size(n, in);
    const __m512i top_mask = _mm512_set1_epi32((int)0xFFFF0000u), exp_mask = _mm512_set1_epi32(0x7F800000);
    const __m512i pair_rows = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
                                                224, 240); /* word p of a token goes to tile row p */
    __m512i low = _mm512_setzero_si512();
    memset(xp, 0, parts * size * sizeof *xp);
    for (size_t t = 0; t < n; t++)
        for (size_t ks = 0; ks < steps; ks++) {
            size_t k0 = ks * AMX_K, cols = in - k0 < AMX_K ? in - k0 : AMX_K;
            __mmask16 m_lo = (__mmask16)(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u);
            __mmask16 m_hi = (__mmask16)(cols >= 32 ? 0xFFFFu : cols > 16 ? (1u << (cols - 16)) - 1u : 0u);
            __m512 v[2] = {_mm512_maskz_loadu_ps(m_lo, x + t * in + k0), _mm512_maskz_loadu_ps(m_hi, x + t * in + k0 + 16)};
            uint32_t *tile = (uint32_t *)(void *)(xp + ((t / AMX_TOKENS) * steps + ks) * (AMX_TILE_BYTES / 2)) +
                             t % AMX_TOKENS;
            for (int part = 0; part < parts; part++) {
                __m512 value[2];
                for (int h = 0; h < 2; h++) {
                    __m512i u = _mm512_castps_si512(v[h]);
                    if (parts == 1) {
                        low = _mm512_or_si512(low, _mm512_andnot_si512(top_mask, u));
                        value[h] = v[h];
                        continue;
                    }
                    __mmask16 finite = _mm512_cmpneq_epi32_mask(_mm512_and_si512(u, exp_mask), exp_mask);
                    __m512 top = _mm512_castsi512_ps(_mm512_and_si512(u, top_mask));
                    value[h] = part == 2 ? v[h] : part == 1 ? top : _mm512_mask_mov_ps(v[h], finite, top);
                    if (part < 2) v[h] = _mm512_maskz_sub_ps(finite, v[h], top); /* what is left, exact */
                }
                __m512i words = (__m512i)_mm512_cvtne2ps_pbh(value[1], value[0]); /* word p: columns 2p, 2p + 1 */
                _mm512_i32scatter_epi32(tile + part * (size / 2), pair_rows, words, 4);
            }
        }
    return parts != 1 || _mm512_test_epi32_mask(low, low) == 0;
}

#define AMX_FN static inline __attribute__((always_inline, target("amx-tile,amx-bf16")))

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* Tiles 0-3: C (2 row blocks x 2 token tiles), 4-5: A, 6-7: B; all 16 rows of 64 bytes. */
__attribute__((target("amx-tile"))) static void amx_configure(void) {
    amx_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) {
        c.colsb[i] = 64;
        c.rows[i] = AMX_ROWS;
    }
    _tile_loadconfig(&c);
}

typedef struct {
    const uint16_t *w;
    size_t out, in;
    const uint16_t *xp;
    int parts;
    size_t n;
    float *y;
} amx_args;

/* Where A's 16 rows x 32 columns at (r, k) are read from: W itself, or (last rows, last columns) a
 * zero-padded copy in buf, so no tile reads past the matrix. */
static const uint16_t *a_rows(const amx_args *a, size_t r, size_t k, uint16_t *buf, size_t *stride) {
    if (r + AMX_ROWS <= a->out && k + AMX_K <= a->in) {
        *stride = a->in * sizeof(uint16_t);
        return a->w + r * a->in + k;
    }
    size_t rows = a->out - r < AMX_ROWS ? a->out - r : AMX_ROWS, cols = a->in - k < AMX_K ? a->in - k : AMX_K;
    memset(buf, 0, AMX_TILE_BYTES);
    for (size_t i = 0; i < rows; i++) memcpy(buf + i * AMX_K, a->w + (r + i) * a->in + k, cols * sizeof *buf);
    *stride = AMX_K * sizeof(uint16_t);
    return buf;
}

/* C tile -> y[token, row] for the rows and tokens that exist */
static void store_c(const amx_args *a, const float *c, size_t r, size_t t) {
    size_t rows = a->out - r < AMX_ROWS ? a->out - r : AMX_ROWS, toks = a->n - t < AMX_TOKENS ? a->n - t : AMX_TOKENS;
    for (size_t j = 0; j < toks; j++)
        for (size_t i = 0; i < rows; i++) a->y[(t + j) * a->out + r + i] = c[i * AMX_TOKENS + j];
}

/* MR (1 or 2) row blocks from r x NT (1 or 2) token tiles from tile tt, over every column. Tile numbers
 * are immediates, hence the constant conditions. */
AMX_FN void amx_block(const amx_args *a, size_t r, size_t tt, const int MR, const int NT) {
    size_t steps = (a->in + AMX_K - 1) / AMX_K, stride0, stride1;
    uint16_t buf0[AMX_TILE_BYTES / 2], buf1[AMX_TILE_BYTES / 2];
    float c[AMX_ROWS * AMX_TOKENS];
    _tile_zero(0);
    if (NT > 1) _tile_zero(1);
    if (MR > 1) _tile_zero(2);
    if (MR > 1 && NT > 1) _tile_zero(3);
    size_t part_size = qgpu_amx_packed_size(a->n, a->in);
    for (size_t ks = 0; ks < steps; ks++) {
        _tile_loadd(4, a_rows(a, r, ks * AMX_K, buf0, &stride0), stride0);
        if (MR > 1) _tile_loadd(5, a_rows(a, r + AMX_ROWS, ks * AMX_K, buf1, &stride1), stride1);
        for (int part = 0; part < a->parts; part++) {
            const uint16_t *b0 = a->xp + part * part_size + (tt * steps + ks) * (AMX_TILE_BYTES / 2);
            _tile_loadd(6, b0, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (NT > 1) {
                _tile_loadd(7, b0 + steps * (AMX_TILE_BYTES / 2), 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (MR > 1) {
                _tile_dpbf16ps(2, 5, 6);
                if (NT > 1) _tile_dpbf16ps(3, 5, 7);
            }
        }
    }
    size_t t = tt * AMX_TOKENS;
    _tile_stored(0, c, 64);
    store_c(a, c, r, t);
    if (NT > 1) {
        _tile_stored(1, c, 64);
        store_c(a, c, r, t + AMX_TOKENS);
    }
    if (MR > 1) {
        _tile_stored(2, c, 64);
        store_c(a, c, r + AMX_ROWS, t);
    }
    if (MR > 1 && NT > 1) {
        _tile_stored(3, c, 64);
        store_c(a, c, r + AMX_ROWS, t + AMX_TOKENS);
    }
}

enum { X_BLOCK_BYTES = 1 << 19 }; /* packed activations kept in cache while the rows stream past */

/* Rows [r0, r1): blocks of tokens, pairs of 16-row blocks, pairs of token tiles. */
__attribute__((target("amx-tile,amx-bf16"))) void qgpu_amx_rows(const uint16_t *w, size_t out, size_t in,
                                                                const uint16_t *xp, int parts, size_t n,
                                                                float *y, size_t r0, size_t r1) {
    amx_args a = {w, out, in, xp, parts, n, y};
    size_t tiles = (n + AMX_TOKENS - 1) / AMX_TOKENS, steps = (in + AMX_K - 1) / AMX_K;
    size_t block = X_BLOCK_BYTES / (steps * AMX_TILE_BYTES * (size_t)parts);
    block = block < 2 ? 2 : block - block % 2;
    amx_configure();
    for (size_t t0 = 0; t0 < tiles; t0 += block) {
        size_t t1 = t0 + block < tiles ? t0 + block : tiles, r = r0;
        for (; r + 2 * AMX_ROWS <= r1; r += 2 * AMX_ROWS) {
            size_t tt = t0;
            for (; tt + 2 <= t1; tt += 2) amx_block(&a, r, tt, 2, 2);
            if (tt < t1) amx_block(&a, r, tt, 2, 1);
        }
        for (; r < r1; r += AMX_ROWS) {
            size_t tt = t0;
            for (; tt + 2 <= t1; tt += 2) amx_block(&a, r, tt, 1, 2);
            if (tt < t1) amx_block(&a, r, tt, 1, 1);
        }
    }
    _tile_release();
}
#else
int qgpu_amx_usable(void) { return 0; }

int qgpu_amx_pack(const float *x, size_t n, size_t in, int parts, uint16_t *xp) {
    (void)x, (void)n, (void)in, (void)parts, (void)xp; /* never called: not usable */
    return 0;
}

void qgpu_amx_rows(const uint16_t *w, size_t out, size_t in, const uint16_t *xp, int parts, size_t n, float *y,
                   size_t r0, size_t r1) {
    (void)w, (void)out, (void)in, (void)xp, (void)parts, (void)n, (void)y, (void)r0, (void)r1; /* never called */
}
#endif
