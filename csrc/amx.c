/* bf16 weight x bf16 activation products on AMX-BF16 tiles (Intel Sapphire Rapids and later): what the dense
 * products (dense.c) run at the "amx" SIMD level when the caller says X holds bf16 values (bf16 mode).
 *
 * One TDPBF16PS multiplies a tile of 16 weight rows x 32 columns (A, read straight from W, row stride
 * in * 2 bytes) by 32 columns x 16 tokens of X (B, from a packed copy of X, see qgpu_amx_pack) into a
 * 16 x 16 fp32 tile C, which accumulates over the columns in order. Every C element is computed from its own
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

/* B tiles: for token tile tt and column step ks, 16 rows of 64 bytes, row p holding for each of the 16
 * tokens the pair of columns ks * 32 + 2p, + 2p + 1 (the pair layout TDPBF16PS reads), one 32-bit word per
 * pair. Tokens past n and columns past `in` are zeros. X holds bf16 values, so a value's bf16 bits are its
 * float's top half. */
int qgpu_amx_pack(const float *x, size_t n, size_t in, uint16_t *xp) {
    size_t steps = (in + AMX_K - 1) / AMX_K;
    uint32_t low = 0;
    memset(xp, 0, qgpu_amx_packed_size(n, in) * sizeof *xp);
    /* tile by tile, so each 1 KiB tile is written while it is in L1 */
    for (size_t t0 = 0; t0 < n; t0 += AMX_TOKENS)
        for (size_t ks = 0; ks < steps; ks++) {
            uint16_t *tile = xp + ((t0 / AMX_TOKENS) * steps + ks) * (AMX_TILE_BYTES / 2);
            size_t k0 = ks * AMX_K, cols = in - k0 < AMX_K ? in - k0 : AMX_K;
            for (size_t t = t0; t < n && t < t0 + AMX_TOKENS; t++) {
                const float *row = x + t * in + k0;
                for (size_t c = 0; c < cols; c += 2) {
                    uint32_t lo, hi = 0;
                    memcpy(&lo, row + c, sizeof lo);
                    if (c + 1 < cols) memcpy(&hi, row + c + 1, sizeof hi);
                    uint32_t pair = (lo >> 16) | (hi & 0xFFFF0000u); /* little-endian: the even column first */
                    low |= (lo | hi) & 0xFFFFu;
                    memcpy(tile + (c / 2 * AMX_TOKENS + (t - t0)) * 2, &pair, sizeof pair);
                }
            }
        }
    return low == 0;
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
    for (size_t ks = 0; ks < steps; ks++) {
        const uint16_t *b0 = a->xp + (tt * steps + ks) * (AMX_TILE_BYTES / 2);
        _tile_loadd(4, a_rows(a, r, ks * AMX_K, buf0, &stride0), stride0);
        _tile_loadd(6, b0, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (NT > 1) {
            _tile_loadd(7, b0 + steps * (AMX_TILE_BYTES / 2), 64);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (MR > 1) {
            _tile_loadd(5, a_rows(a, r + AMX_ROWS, ks * AMX_K, buf1, &stride1), stride1);
            _tile_dpbf16ps(2, 5, 6);
            if (NT > 1) _tile_dpbf16ps(3, 5, 7);
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
                                                                const uint16_t *xp, size_t n, float *y,
                                                                size_t r0, size_t r1) {
    amx_args a = {w, out, in, xp, n, y};
    size_t tiles = (n + AMX_TOKENS - 1) / AMX_TOKENS, steps = (in + AMX_K - 1) / AMX_K;
    size_t block = X_BLOCK_BYTES / (steps * AMX_TILE_BYTES);
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

void qgpu_amx_rows(const uint16_t *w, size_t out, size_t in, const uint16_t *xp, size_t n, float *y, size_t r0,
                   size_t r1) {
    (void)w, (void)out, (void)in, (void)xp, (void)n, (void)y, (void)r0, (void)r1; /* never called: not usable */
}
#endif
