/* Weight x fp32-activation products: Y[n, out] = X[n, in] . W[out, in]^T, fp32 accumulation, for bf16
 * weights and for int8 weights with one fp32 scale per block of 32 columns (Q8, the optional quantized form of
 * a model's dense matrices, see the Q8 section below). matvec is the n = 1 case of the same code.
 *
 * Each (row, token) dot product is accumulated the same way whatever tile computes it: one vector
 * accumulator of L lanes (L = 8 generic and AVX2, 16 AVX-512), the row's chunks of C columns in order with
 * the tail zero-padded (C = L generic and AVX2; C = 2L AVX-512, each chunk's even columns then its odd
 * ones, see the AVX-512 section), then a fixed halving reduction of the lanes. So within one SIMD level,
 * matmul rows equal matvec results bit for bit, for any thread count. Across levels, only the summation
 * order differs.
 *
 * Blocking: threads take disjoint row ranges of W (every weight byte is read by one thread). Within a
 * range, a tile of 4 rows x T tokens (T = 4 AVX-512, 2 AVX2, 1 generic) reuses each loaded weight chunk
 * across its T tokens, and a block of tokens of X (~512 KiB) stays in cache while the rows stream past it.
 *
 * The amx level runs the AVX-512 code, except for products whose caller says X holds bf16 values
 * (qgpu_matmul_multi with QGPU_BF16_X, bf16 mode) or a prompt's tokens (QGPU_PROMPT): their bf16 matrices go
 * to AMX tiles (amx.c), X as its bf16 values or, fp32, as three bf16 parts.
 */
#include <math.h>
#include <string.h>

#include "qgpu_core.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define QGPU_X86 1
#include <immintrin.h>
#endif

enum { ISA_GENERIC = 0, ISA_AVX2 = 1, ISA_AVX512 = 2, ISA_AMX = 3 };
enum { X_BLOCK_FLOATS = 1 << 17 }; /* 512 KiB of activations per token block (L2: 2 MiB here) */
enum { EO_CHUNK = 32, EO_ALIGN = 64 }; /* the AVX-512 bf16 products' chunk: 16 even and 16 odd columns */

static size_t eo_width(size_t in) { return (in + EO_CHUNK - 1) / EO_CHUNK * EO_CHUNK; }

typedef struct {
    const uint16_t *w; /* bf16 bits, or NULL for a Q8 matrix */
    size_t out, in;
    const float *x;
    size_t n;
    float *y;
    const int8_t *q;      /* Q8: int8 weights [out, in] */
    const float *scales;  /* Q8: [out, in / 32] */
    const uint16_t *xp;   /* amx level: X packed by qgpu_amx_pack in xp_parts parts, else NULL */
    int xp_parts;
    const float *xd;      /* AVX-512 bf16 products: X with each chunk's even columns first (eo_pack) */
} prod_args;

/* Rows are read 4 at a time, and a row of 2048 bf16 is one 4 KiB page, where the hardware prefetchers
 * stop; so the tile that starts 2 tiles ahead is prefetched while this one is read, one cache line (32
 * weights) per row per 32 columns. Measured on the decode shapes (tools/bench_kernels.py): ~20% faster
 * from DRAM; 1 tile ahead gained less. Into L2 (prefetcht1, locality 2) rather than L1: the 2.8 GB of a
 * decode token's matvecs ~4% faster (median of 12 alternating pairs, 9 faster; `--only decode`), as L1's
 * few fill buffers no longer bound the misses in flight. Prefetches never fault, but stay inside the matrix. */
enum { PREFETCH_TILES_AHEAD = 2, LINE_WEIGHTS = 32 };

static inline __attribute__((always_inline)) void prefetch_ahead(const prod_args *a, size_t r, const int NR,
                                                                 size_t k) {
    size_t ahead = r + PREFETCH_TILES_AHEAD * (size_t)NR;
    if (k % LINE_WEIGHTS == 0 && ahead + (size_t)NR <= a->out)
        for (int i = 0; i < NR; i++) __builtin_prefetch(a->w + (ahead + i) * a->in + k, 0, 2);
}

static size_t token_block(size_t in, size_t tile_tokens) {
    size_t tb = X_BLOCK_FLOATS / (in ? in : 1);
    tb -= tb % tile_tokens;
    return tb < tile_tokens ? tile_tokens : tb;
}

/* The loop over a range of rows, the same for every product: blocks of tokens (whose activations stay in
 * cache while the rows stream past), groups of 4 rows, tiles of NT tokens, and the edges in 4 x 1 and 1 x 1
 * tiles. TILE(a, r, t, NR, NT, prefetch) is inlined with constant NR and NT, so its accumulators live in
 * registers; each tile computes whole dot products, so the tile shape never changes a result. */
#define DEFINE_ROWS(NAME, ATTR, TILE, NT)                                                                     \
    ATTR static void NAME(void *ctx, size_t r0, size_t r1) {                                                  \
        const prod_args *a = (const prod_args *)ctx;                                                          \
        size_t tb = token_block(a->in, NT);                                                                   \
        for (size_t t0 = 0; t0 < a->n; t0 += tb) {                                                            \
            size_t t1 = t0 + tb < a->n ? t0 + tb : a->n;                                                      \
            size_t r = r0;                                                                                    \
            for (; r + 4 <= r1; r += 4) {                                                                     \
                size_t t = t0;                                                                                \
                for (; t + NT <= t1; t += NT) TILE(a, r, t, 4, NT, t == t0);                                  \
                for (; t < t1; t++) TILE(a, r, t, 4, 1, t == t0);                                             \
            }                                                                                                 \
            for (; r < r1; r++)                                                                               \
                for (size_t t = t0; t < t1; t++) TILE(a, r, t, 1, 1, 0);                                      \
        }                                                                                                     \
    }

/* ---- generic: GNU C vector extensions (gcc, clang) of 16 bytes, lowered to whatever the target has
 * (SSE2, NEON, or scalar code). 8 lanes as two 4-lane halves, one for the even and one for the odd columns
 * of each chunk of 8: 16 bytes of bf16 read as four 32-bit words hold an even and an odd weight each, and
 * one shift or one mask turns each half into fp32 bits, with no unpacking. Tiles of 4 rows x 1 token. ---- */

typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define EVEN_WEIGHTS(u) ((u) & 0xFFFF0000u) /* the first of each pair is the word's high half */
#define ODD_WEIGHTS(u) ((u) << 16)
#else
#define EVEN_WEIGHTS(u) ((u) << 16)
#define ODD_WEIGHTS(u) ((u) & 0xFFFF0000u)
#endif

static inline v4f as_v4f(v4u u) {
    v4f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline __attribute__((always_inline)) void tile_generic(const prod_args *a, size_t r, size_t t,
                                                               const int NR, const int NT, const int pf) {
    (void)NT; /* one token per tile */
    const size_t in = a->in;
    const float *x = a->x + t * in;
    v4f even[4], odd[4]; /* accumulators of columns 8c + 0, 2, 4, 6 and 8c + 1, 3, 5, 7 */
    for (int i = 0; i < NR; i++) even[i] = odd[i] = (v4f){0};
    size_t k = 0;
    for (; k + 8 <= in; k += 8) {
        if (pf) prefetch_ahead(a, r, NR, k);
        const float *xk = x + k;
        v4f x_even = {xk[0], xk[2], xk[4], xk[6]}, x_odd = {xk[1], xk[3], xk[5], xk[7]};
        for (int i = 0; i < NR; i++) {
            v4u u;
            memcpy(&u, a->w + (r + i) * in + k, sizeof u);
            even[i] += as_v4f(EVEN_WEIGHTS(u)) * x_even;
            odd[i] += as_v4f(ODD_WEIGHTS(u)) * x_odd;
        }
    }
    if (k < in) { /* the tail chunk, zero-padded */
        uint16_t wbuf[8];
        float xk[8] = {0};
        memcpy(xk, x + k, (in - k) * sizeof *xk);
        v4f x_even = {xk[0], xk[2], xk[4], xk[6]}, x_odd = {xk[1], xk[3], xk[5], xk[7]};
        for (int i = 0; i < NR; i++) {
            v4u u;
            memset(wbuf, 0, sizeof wbuf);
            memcpy(wbuf, a->w + (r + i) * in + k, (in - k) * sizeof *wbuf);
            memcpy(&u, wbuf, sizeof u);
            even[i] += as_v4f(EVEN_WEIGHTS(u)) * x_even;
            odd[i] += as_v4f(ODD_WEIGHTS(u)) * x_odd;
        }
    }
    for (int i = 0; i < NR; i++) {
        float lanes[4];
        v4f sum = even[i] + odd[i]; /* a fixed halving tree; it pairs columns differently from the
                                     * AVX reductions, so levels differ only in summation order */
        memcpy(lanes, &sum, sizeof lanes);
        a->y[t * a->out + r + i] = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
    }
}

DEFINE_ROWS(rows_generic, , tile_generic, 1)

#ifdef QGPU_X86
/* ---- AVX2 + FMA: 8 lanes, tiles of 4 rows x 2 tokens (8 accumulators of 16 registers) ---- */

#define AVX2 __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

AVX2_INLINE __m256 load_w8(const uint16_t *p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

AVX2_INLINE __m256 load_w8_tail(const uint16_t *p, size_t count) {
    uint16_t buf[8] = {0};
    memcpy(buf, p, count * sizeof *p);
    return load_w8(buf);
}

AVX2_INLINE __m256 load_x8_tail(const float *p, size_t count) {
    float buf[8] = {0};
    memcpy(buf, p, count * sizeof *p);
    return _mm256_loadu_ps(buf);
}

AVX2_INLINE float reduce8(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
}

/* NR rows x NT tokens; NR, NT are constants at every call so the accumulators live in registers. */
AVX2_INLINE void tile_avx2(const prod_args *a, size_t r, size_t t, const int NR, const int NT, const int pf) {
    const size_t in = a->in;
    __m256 acc[4][2], wv[4];
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++) acc[i][j] = _mm256_setzero_ps();
    size_t k = 0;
    for (; k + 8 <= in; k += 8) {
        if (pf) prefetch_ahead(a, r, NR, k);
        for (int i = 0; i < NR; i++) wv[i] = load_w8(a->w + (r + i) * in + k);
        for (int j = 0; j < NT; j++) {
            __m256 xv = _mm256_loadu_ps(a->x + (t + j) * in + k);
            for (int i = 0; i < NR; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < in) {
        for (int i = 0; i < NR; i++) wv[i] = load_w8_tail(a->w + (r + i) * in + k, in - k);
        for (int j = 0; j < NT; j++) {
            __m256 xv = load_x8_tail(a->x + (t + j) * in + k, in - k);
            for (int i = 0; i < NR; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++) a->y[(t + j) * a->out + r + i] = reduce8(acc[i][j]);
}

DEFINE_ROWS(rows_avx2, AVX2, tile_avx2, 2)

/* ---- AVX-512F: 16 lanes, tiles of 4 rows x 4 tokens (16 accumulators of 32 registers) ----
 *
 * Chunks of 32 columns: one 64-byte load holds a row's 32 bf16 weights as 16 32-bit words, each an even
 * (low half) and an odd (high half) weight; one shift and one mask give the even and the odd weights as
 * fp32, against 2 widenings and 2 shifts per 32 weights when each lane takes consecutive columns. The
 * accumulator adds the chunk's even products, then its odd ones (acc = fma(w_odd, x_odd, fma(w_even,
 * x_even, acc))), so X is read with each chunk's 16 even columns first, then its 16 odd ones: eo_pack
 * writes it so once per call (padded with zeros to a multiple of 32 columns), starting on a cache line.
 * Measured against the consecutive-columns tile, alternating in one process: 64-token products at MLP
 * shapes 0.83-0.85x the time, decode matvecs 0.99x. */

#define AVX512 __attribute__((target("avx512f")))
#define AVX512_INLINE static inline __attribute__((always_inline, target("avx512f")))

AVX512_INLINE __mmask16 first_lanes(size_t count) { /* lanes 0 .. count - 1 of 16 (count <= 16) */
    return (__mmask16)((1u << count) - 1u);
}

/* 32 consecutive values (lo: the first 16, hi: the next 16) as their even and their odd elements. */
AVX512_INLINE void split_eo(__m512 lo, __m512 hi, __m512 *even, __m512 *odd) {
    const __m512i even_idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *even = _mm512_permutex2var_ps(lo, even_idx, hi);
    *odd = _mm512_permutex2var_ps(lo, _mm512_add_epi32(even_idx, _mm512_set1_epi32(1)), hi);
}

/* The 32 floats p[0 .. count) (zeros past count) as their even and their odd elements. */
AVX512_INLINE void load_eo32(const float *p, size_t count, __m512 *even, __m512 *odd) {
    __m512 lo = count >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(first_lanes(count), p);
    __m512 hi = count >= 32 ? _mm512_loadu_ps(p + 16)
                : count > 16 ? _mm512_maskz_loadu_ps(first_lanes(count - 16), p + 16) : _mm512_setzero_ps();
    split_eo(lo, hi, even, odd);
}

/* X [n, in] -> xd [n, eo_width(in)]: per chunk of 32 columns its 16 even then its 16 odd values. */
AVX512 static void eo_pack(const float *x, size_t n, size_t in, float *xd) {
    size_t wd = eo_width(in);
    for (size_t t = 0; t < n; t++)
        for (size_t k = 0; k < wd; k += EO_CHUNK) {
            __m512 even, odd;
            load_eo32(x + t * in + k, in - k < EO_CHUNK ? in - k : EO_CHUNK, &even, &odd);
            _mm512_storeu_ps(xd + t * wd + k, even);
            _mm512_storeu_ps(xd + t * wd + k + 16, odd);
        }
}

/* A row's 32 bf16 weights from p (count of them, zeros past count) as its even and its odd ones in fp32. */
AVX512_INLINE void load_w_eo32(const uint16_t *p, size_t count, __m512 *even, __m512 *odd) {
    __m512i u;
    if (count >= EO_CHUNK) {
        u = _mm512_loadu_si512((const void *)p);
    } else {
        uint16_t buf[EO_CHUNK] = {0};
        memcpy(buf, p, count * sizeof *p);
        u = _mm512_loadu_si512((const void *)buf);
    }
    *even = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)); /* little-endian: the even weight is the low half */
    *odd = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xFFFF0000u)));
}

AVX512_INLINE float reduce16(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s = _mm256_add_ps(lo, hi);
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
    return _mm_cvtss_f32(q);
}

/* One chunk of an NR x NT tile: count weights of each row from column k (32 but at the row's end) */
AVX512_INLINE void tile_avx512_chunk(const prod_args *a, size_t r, size_t t, const int NR, const int NT, size_t k,
                                     size_t count, __m512 acc[4][4]) {
    const size_t in = a->in, wd = eo_width(in);
    __m512 xe[4], xo[4];
    for (int j = 0; j < NT; j++) {
        xe[j] = _mm512_loadu_ps(a->xd + (t + j) * wd + k);
        xo[j] = _mm512_loadu_ps(a->xd + (t + j) * wd + k + 16);
    }
    for (int i = 0; i < NR; i++) {
        __m512 we, wo;
        load_w_eo32(a->w + (r + i) * in + k, count, &we, &wo);
        for (int j = 0; j < NT; j++) acc[i][j] = _mm512_fmadd_ps(wo, xo[j], _mm512_fmadd_ps(we, xe[j], acc[i][j]));
    }
}

AVX512_INLINE void tile_avx512(const prod_args *a, size_t r, size_t t, const int NR, const int NT,
                               const int pf) {
    const size_t in = a->in;
    __m512 acc[4][4];
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    size_t k = 0;
    for (; k + EO_CHUNK <= in; k += EO_CHUNK) {
        if (pf) prefetch_ahead(a, r, NR, k);
        tile_avx512_chunk(a, r, t, NR, NT, k, EO_CHUNK, acc);
    }
    if (k < in) tile_avx512_chunk(a, r, t, NR, NT, k, in - k, acc);
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++) a->y[(t + j) * a->out + r + i] = reduce16(acc[i][j]);
}

DEFINE_ROWS(rows_avx512, AVX512, tile_avx512, 4)
#endif /* QGPU_X86 */

/* ---- Q8: int8 weights, one fp32 scale per block of 32 columns (in a multiple of 32) ----
 *
 * Row r's dot product with x: for each block b, blk = sum over the block's columns of q * x (an L-lane
 * vector: the block's chunks of L columns, the first multiplied, the rest added in order), then
 * acc += blk * scale[r, b]; the lanes of acc are reduced as the bf16 products' are. The same at every tile
 * shape and thread count within one SIMD level. int8 -> fp32 is exact and each product q * x is one
 * rounding, so the result is within fp32 summation error of sum_b scale_b * sum_k q_k x_k. */
enum { Q8_BLOCK = 32, Q8_LINE = 64 /* int8 weights per cache line */ };

static inline __attribute__((always_inline)) void q8_prefetch_ahead(const prod_args *a, size_t r, const int NR,
                                                                    size_t k) {
    size_t ahead = r + PREFETCH_TILES_AHEAD * (size_t)NR;
    if (k % Q8_LINE == 0 && ahead + (size_t)NR <= a->out)
        for (int i = 0; i < NR; i++) __builtin_prefetch(a->q + (ahead + i) * a->in + k, 0, 3);
}

/* generic: 8 lanes as two 4-lane halves (columns 0-3 and 4-7 of each chunk of 8), 1 token per tile */
static inline __attribute__((always_inline)) void q8_tile_generic(const prod_args *a, size_t r, size_t t,
                                                                  const int NR, const int NT, const int pf) {
    (void)NT; /* one token per tile */
    const size_t in = a->in, blocks = in / Q8_BLOCK;
    const float *x = a->x + t * in;
    v4f lo[4], hi[4];
    for (int i = 0; i < NR; i++) lo[i] = hi[i] = (v4f){0};
    for (size_t b = 0; b < blocks; b++) {
        size_t k0 = b * Q8_BLOCK;
        if (pf) q8_prefetch_ahead(a, r, NR, k0);
        for (int i = 0; i < NR; i++) {
            const int8_t *q = a->q + (r + i) * in + k0;
            v4f blo = {0}, bhi = {0};
            for (int c = 0; c < Q8_BLOCK; c += 8) {
                const float *xc = x + k0 + c;
                v4f ql = {q[c], q[c + 1], q[c + 2], q[c + 3]}, qh = {q[c + 4], q[c + 5], q[c + 6], q[c + 7]};
                v4f xl = {xc[0], xc[1], xc[2], xc[3]}, xh = {xc[4], xc[5], xc[6], xc[7]};
                if (c == 0) {
                    blo = ql * xl;
                    bhi = qh * xh;
                } else {
                    blo += ql * xl;
                    bhi += qh * xh;
                }
            }
            float s = a->scales[(r + i) * blocks + b];
            v4f sv = {s, s, s, s};
            lo[i] += blo * sv;
            hi[i] += bhi * sv;
        }
    }
    for (int i = 0; i < NR; i++) {
        float lanes[4];
        v4f sum = lo[i] + hi[i];
        memcpy(lanes, &sum, sizeof lanes);
        a->y[t * a->out + r + i] = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
    }
}

DEFINE_ROWS(q8_rows_generic, , q8_tile_generic, 1)

#ifdef QGPU_X86
/* AVX2: 4 chunks of 8 per block; tiles of 4 rows x 1 token (acc + blk: 8 of the 16 registers) */
AVX2_INLINE __m256 load_q8x8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

AVX2_INLINE void q8_tile_avx2(const prod_args *a, size_t r, size_t t, const int NR, const int NT, const int pf) {
    (void)NT; /* one token per tile */
    const size_t in = a->in, blocks = in / Q8_BLOCK;
    const float *x = a->x + t * in;
    __m256 acc[4], blk[4];
    for (int i = 0; i < NR; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < blocks; b++) {
        size_t k0 = b * Q8_BLOCK;
        if (pf) q8_prefetch_ahead(a, r, NR, k0);
        for (int c = 0; c < Q8_BLOCK; c += 8) {
            __m256 xv = _mm256_loadu_ps(x + k0 + c);
            for (int i = 0; i < NR; i++) {
                __m256 wv = load_q8x8(a->q + (r + i) * in + k0 + c);
                blk[i] = c == 0 ? _mm256_mul_ps(wv, xv) : _mm256_fmadd_ps(wv, xv, blk[i]);
            }
        }
        for (int i = 0; i < NR; i++)
            acc[i] = _mm256_fmadd_ps(blk[i], _mm256_set1_ps(a->scales[(r + i) * blocks + b]), acc[i]);
    }
    for (int i = 0; i < NR; i++) a->y[t * a->out + r + i] = reduce8(acc[i]);
}

DEFINE_ROWS(q8_rows_avx2, AVX2, q8_tile_avx2, 1)

/* AVX-512: 2 chunks of 16 per block; tiles of 4 rows x 3 tokens (acc + blk: 24 of the 32 registers, with
 * the 4 widened weight chunks and a token's activations), so each widened chunk serves 3 tokens */
AVX512_INLINE __m512 load_q8x16(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

AVX512_INLINE void q8_tile_avx512(const prod_args *a, size_t r, size_t t, const int NR, const int NT,
                                  const int pf) {
    const size_t in = a->in, blocks = in / Q8_BLOCK;
    __m512 acc[4][3], blk[4][3];
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++) acc[i][j] = _mm512_setzero_ps();
    for (size_t b = 0; b < blocks; b++) {
        size_t k0 = b * Q8_BLOCK;
        if (pf) q8_prefetch_ahead(a, r, NR, k0);
        for (int c = 0; c < Q8_BLOCK; c += 16) {
            __m512 wv[4];
            for (int i = 0; i < NR; i++) wv[i] = load_q8x16(a->q + (r + i) * in + k0 + c);
            for (int j = 0; j < NT; j++) {
                __m512 xv = _mm512_loadu_ps(a->x + (t + j) * in + k0 + c);
                for (int i = 0; i < NR; i++)
                    blk[i][j] = c == 0 ? _mm512_mul_ps(wv[i], xv) : _mm512_fmadd_ps(wv[i], xv, blk[i][j]);
            }
        }
        for (int i = 0; i < NR; i++) {
            __m512 sv = _mm512_set1_ps(a->scales[(r + i) * blocks + b]);
            for (int j = 0; j < NT; j++) acc[i][j] = _mm512_fmadd_ps(blk[i][j], sv, acc[i][j]);
        }
    }
    for (int i = 0; i < NR; i++)
        for (int j = 0; j < NT; j++) a->y[(t + j) * a->out + r + i] = reduce16(acc[i][j]);
}

DEFINE_ROWS(q8_rows_avx512, AVX512, q8_tile_avx512, 3)
#endif /* QGPU_X86 */

/* ---- dispatch ---- */

static const qgpu_range_fn ROWS_BY_ISA[] = { /* fp32 activations; the amx level's are AVX-512's */
    rows_generic,
#ifdef QGPU_X86
    rows_avx2,
    rows_avx512,
    rows_avx512,
#endif
};

static const qgpu_range_fn Q8_ROWS_BY_ISA[] = {
    q8_rows_generic,
#ifdef QGPU_X86
    q8_rows_avx2,
    q8_rows_avx512,
    q8_rows_avx512,
#endif
};

static int isa_level = -1; /* -1: not chosen yet */

int qgpu_best_isa(void) {
#ifdef QGPU_X86
    __builtin_cpu_init();
    if (qgpu_amx_usable()) return ISA_AMX;
    if (__builtin_cpu_supports("avx512f")) return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return ISA_AVX2;
#endif
    return ISA_GENERIC;
}

int qgpu_set_isa(int level) {
    int best = qgpu_best_isa();
    isa_level = level < 0 ? 0 : (level > best ? best : level);
    return isa_level;
}

int qgpu_get_isa(void) {
    if (isa_level < 0) isa_level = qgpu_best_isa();
    return isa_level;
}

/* Several products sharing X in one parallel dispatch: the matrices' rows are laid end to end in one
 * virtual row range (each starting at a multiple of the 16-row grain, so chunks never split a tile across
 * matrices) and each chunk is cut at the matrix boundaries. Every row is computed by the same rows_* code
 * as a single product (bf16 or Q8, per matrix), so each result is bit-identical to its own product. */
enum { ROW_GRAIN = 16 };

typedef struct {
    prod_args parts[QGPU_MAX_MULTI];
    size_t start[QGPU_MAX_MULTI];
    qgpu_range_fn rows[QGPU_MAX_MULTI];
    size_t count;
    int round_y; /* QGPU_BF16_Y: each thread rounds the results it has just written */
} multi_args;

static void multi_rows(void *ctx, size_t v0, size_t v1) {
    const multi_args *m = (const multi_args *)ctx;
    for (size_t j = 0; j < m->count; j++) {
        size_t begin = v0 > m->start[j] ? v0 : m->start[j];
        size_t end = m->start[j] + m->parts[j].out;
        if (v1 < end) end = v1;
        if (begin >= end) continue;
        const prod_args *a = &m->parts[j];
        size_t r0 = begin - m->start[j], r1 = end - m->start[j];
        m->rows[j]((void *)a, r0, r1);
        if (m->round_y)
            for (size_t t = 0; t < a->n; t++)
                for (size_t r = r0; r < r1; r++) a->y[t * a->out + r] = qgpu_bf16_round(a->y[t * a->out + r]);
    }
}

/* bf16 matrices at the amx level with bf16 activations, or fp32 ones of a prompt (xp: X packed by
 * qgpu_amx_pack) */
static void amx_rows(void *ctx, size_t r0, size_t r1) {
    const prod_args *a = (const prod_args *)ctx;
    qgpu_amx_rows(a->w, a->out, a->in, a->xp, a->xp_parts, a->n, a->y, r0, r1);
}

/* How many bf16 parts of X the bf16 matrices multiply on AMX tiles at this level and flags: 1 for bf16 X,
 * 3 for fp32 X of a prompt (QGPU_PROMPT), else 0 (the AVX-512 tiles read X as eo_pack writes it, or an AVX2
 * or generic tile reads X itself). */
static int amx_parts(int level, int flags) {
    if (level != ISA_AMX) return 0;
    return (flags & QGPU_BF16_X) ? 1 : (flags & QGPU_PROMPT) ? 3 : 0;
}

static int eo_packed(int level, int flags) { return level >= ISA_AVX512 && !amx_parts(level, flags); }

static void run_multi(const qgpu_matrix *ws, size_t count, size_t in, const float *x, size_t n, float *y,
                      const uint16_t *xp, int xp_parts, const float *xd, int round_y) {
    multi_args m;
    size_t rows = 0, work_rows = 0;
    int level = qgpu_get_isa();
    m.count = count < QGPU_MAX_MULTI ? count : QGPU_MAX_MULTI;
    m.round_y = round_y;
    for (size_t j = 0; j < m.count; j++) {
        prod_args a = {ws[j].w, ws[j].out, in, x, n, y + n * work_rows, ws[j].q, ws[j].scales, xp, xp_parts, xd};
        m.parts[j] = a;
        m.rows[j] = !ws[j].w ? Q8_ROWS_BY_ISA[level] : xp ? amx_rows : ROWS_BY_ISA[level];
        m.start[j] = rows;
        rows += (ws[j].out + ROW_GRAIN - 1) / ROW_GRAIN * ROW_GRAIN;
        work_rows += ws[j].out;
    }
    qgpu_parallel_for(rows, ROW_GRAIN, work_rows * in * (n ? n : 1), multi_rows, &m);
}

/* uint16s for eo_pack's floats, with room to start them on a cache line (see qgpu_matmul_multi) */
static size_t eo_scratch(size_t n, size_t in) { return 2 * n * eo_width(in) + EO_ALIGN / sizeof(uint16_t); }

size_t qgpu_product_scratch(size_t n, size_t in, int flags) {
    int level = qgpu_get_isa(), parts = amx_parts(level, flags);
    if (parts) return parts * qgpu_amx_packed_size(n, in);
    return eo_packed(level, flags) ? eo_scratch(n, in) : 0;
}

size_t qgpu_product_scratch_max(size_t n, size_t in) {
    size_t amx = 3 * qgpu_amx_packed_size(n, in), eo = eo_scratch(n, in);
    return amx > eo ? amx : eo;
}

int qgpu_matmul_multi(const qgpu_matrix *ws, size_t count, size_t in, const float *x, size_t n, float *y,
                      int flags, uint16_t *scratch) {
    int level = qgpu_get_isa(), parts = amx_parts(level, flags);
    float *xd = NULL;
    if (parts) {
        if (!qgpu_amx_pack(x, n, in, parts, scratch)) return 0;
    } else if (flags & QGPU_BF16_X) {
        uint32_t low = 0;
        for (size_t i = 0; i < n * in; i++) {
            uint32_t u;
            memcpy(&u, x + i, sizeof u);
            low |= u & 0xFFFFu;
        }
        if (low) return 0; /* a value that is not a bf16 */
    }
#ifdef QGPU_X86
    if (eo_packed(level, flags)) {
        /* on a cache line: the tiles read X in 64-byte loads, ~15% slower when each one spans two lines */
        xd = (float *)(void *)((uintptr_t)(void *)(scratch + EO_ALIGN / sizeof(uint16_t) - 1) & ~(uintptr_t)(EO_ALIGN - 1));
        eo_pack(x, n, in, xd);
    }
#endif
    run_multi(ws, count, in, x, n, y, parts ? scratch : NULL, parts, xd, (flags & QGPU_BF16_Y) != 0);
    return 1;
}

/* ---- chunked products: the dense arithmetic without the all-zero chunks ----
 *
 * A row of W is stored as the chunks of `lanes` columns (the SIMD level's L: 16 AVX-512, 8 AVX2 and
 * generic) that hold a nonzero weight, with their starting columns; the dense code's accumulator sees
 * exactly these chunks, in the same order, and the same reduction. A skipped chunk would have added
 * w * x = +-0 to every lane (x finite: the caller checks), and a lane that starts at +0 is never -0, so
 * adding +-0 changes nothing: the result is the dense product's, bit for bit. The last chunk of a row
 * whose width is not a multiple of L is zero-padded in storage and its x tail read as zeros, as the dense
 * tail is. */
typedef struct {
    size_t out, in;
    const int64_t *ptr;
    const int32_t *cols;
    const uint16_t *w;
    const int8_t *w8; /* the same weights as small integers (exact in int8), or NULL: half the bytes to read */
    const float *x;
    float *y;
} chunk_args;

static void chunk_rows_generic(void *ctx, size_t r0, size_t r1) {
    const chunk_args *a = (const chunk_args *)ctx;
    for (size_t r = r0; r < r1; r++) {
        v4f even = {0}, odd = {0};
        for (int64_t c = a->ptr[r]; c < a->ptr[r + 1]; c++) {
            size_t k = (size_t)a->cols[c];
            float xk[8] = {0};
            memcpy(xk, a->x + k, (k + 8 <= a->in ? 8 : a->in - k) * sizeof *xk);
            v4f x_even = {xk[0], xk[2], xk[4], xk[6]}, x_odd = {xk[1], xk[3], xk[5], xk[7]};
            if (a->w8) {
                const int8_t *w8 = a->w8 + (size_t)c * 8;
                v4f w_even = {w8[0], w8[2], w8[4], w8[6]}, w_odd = {w8[1], w8[3], w8[5], w8[7]};
                even += w_even * x_even;
                odd += w_odd * x_odd;
                continue;
            }
            v4u u;
            memcpy(&u, a->w + (size_t)c * 8, sizeof u);
            even += as_v4f(EVEN_WEIGHTS(u)) * x_even;
            odd += as_v4f(ODD_WEIGHTS(u)) * x_odd;
        }
        float lanes[4];
        v4f sum = even + odd;
        memcpy(lanes, &sum, sizeof lanes);
        a->y[r] = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
    }
}

#ifdef QGPU_X86
AVX2 static void chunk_rows_avx2(void *ctx, size_t r0, size_t r1) {
    const chunk_args *a = (const chunk_args *)ctx;
    for (size_t r = r0; r < r1; r++) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t c = a->ptr[r]; c < a->ptr[r + 1]; c++) {
            size_t k = (size_t)a->cols[c];
            __m256 xv = k + 8 <= a->in ? _mm256_loadu_ps(a->x + k) : load_x8_tail(a->x + k, a->in - k);
            __m256 wv = a->w8 ? _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                    _mm_loadl_epi64((const __m128i *)(a->w8 + (size_t)c * 8))))
                              : load_w8(a->w + (size_t)c * 8);
            acc = _mm256_fmadd_ps(wv, xv, acc);
        }
        a->y[r] = reduce8(acc);
    }
}

/* The dense AVX-512 tile's arithmetic (chunks of 32 columns, even then odd, acc of 16 lanes); the x chunk is
 * split into its even and odd columns here, as eo_pack does for the dense product */
AVX512 static void chunk_rows_avx512(void *ctx, size_t r0, size_t r1) {
    const chunk_args *a = (const chunk_args *)ctx;
    for (size_t r = r0; r < r1; r++) {
        __m512 acc = _mm512_setzero_ps();
        for (int64_t c = a->ptr[r]; c < a->ptr[r + 1]; c++) {
            size_t k = (size_t)a->cols[c];
            __m512 xe, xo, we, wo;
            load_eo32(a->x + k, a->in - k < EO_CHUNK ? a->in - k : EO_CHUNK, &xe, &xo);
            if (a->w8) { /* int8 -> fp32 is exact: the same values as the bf16 weights' */
                const int8_t *w8 = a->w8 + (size_t)c * EO_CHUNK;
                __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w8)));
                __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w8 + 16))));
                split_eo(lo, hi, &we, &wo);
            } else {
                load_w_eo32(a->w + (size_t)c * EO_CHUNK, EO_CHUNK, &we, &wo); /* stored zero-padded */
            }
            acc = _mm512_fmadd_ps(wo, xo, _mm512_fmadd_ps(we, xe, acc));
        }
        a->y[r] = reduce16(acc);
    }
}
#endif

int qgpu_isa_chunk(int level) { return level >= ISA_AVX512 ? EO_CHUNK : 8; }

int qgpu_chunked_matvec_bf16(size_t out, size_t in, size_t width, const int64_t *ptr, const int32_t *cols,
                             const uint16_t *w, const int8_t *w8, const float *x, float *y) {
    int level = qgpu_get_isa();
    if (width != (size_t)qgpu_isa_chunk(level)) return 0;
    for (size_t i = 0; i < in; i++)
        if (!isfinite(x[i])) return 0; /* 0 * inf is NaN in the dense product: the caller runs that */
    qgpu_range_fn fn = chunk_rows_generic;
#ifdef QGPU_X86
    if (level == ISA_AVX2) fn = chunk_rows_avx2;
    if (level >= ISA_AVX512) fn = chunk_rows_avx512;
#endif
    chunk_args a = {out, in, ptr, cols, w, w8, x, y};
    qgpu_parallel_for(out, ROW_GRAIN, (size_t)ptr[out] * width + out, fn, &a);
    return 1;
}
