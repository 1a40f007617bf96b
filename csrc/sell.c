/* The step engine's sparse products (circuit.c): SELL-8 matrices times one input (qgpu_sell_matvec) or times
 * up to QGPU_BATCH inputs at once (qgpu_sell_batch), and the MLP's down product over its active units
 * (qgpu_csc_active). Every output row is its lane's sum in the row's CSR order from +0, mul then add
 * (-ffp-contract=off, and no FMA in the SIMD code), so each input's outputs are the same bits whichever
 * kernel ran. Padding entries are weight +0 at column `in`, where every input holds +0: +0 * +0 = +0, and an
 * acc + +0 is acc (acc starts at +0 and a round-to-nearest sum is -0 only when both terms are). */
#include <string.h>

#include "qgpu_core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SELL_BUILDS 1
#else
#define SELL_BUILDS 0
#endif

#define SELL_BODY static inline __attribute__((always_inline))

SELL_BODY void sell_product(const qgpu_sell *a, const float *x, float *y) {
    for (size_t s = 0; s < a->slices; s++) {
        float acc[QGPU_SELL_LANES];
        for (int r = 0; r < QGPU_SELL_LANES; r++) acc[r] = 0.0f;
        const uint16_t *c = a->cols + (size_t)a->start[s] * QGPU_SELL_LANES;
        const uint16_t *v = a->vals + (size_t)a->start[s] * QGPU_SELL_LANES;
        for (int32_t k = a->start[s]; k < a->start[s + 1]; k++, c += QGPU_SELL_LANES, v += QGPU_SELL_LANES)
            for (int r = 0; r < QGPU_SELL_LANES; r++) acc[r] = acc[r] + qgpu_bf16_value(v[r]) * x[c[r]];
        const int32_t *dest = a->dest + s * QGPU_SELL_LANES;
        if (a->contig[s])
            for (int r = 0; r < QGPU_SELL_LANES; r++) y[dest[0] + r] = acc[r];
        else
            for (int r = 0; r < QGPU_SELL_LANES; r++)
                if (dest[r] >= 0) y[dest[r]] = acc[r];
    }
}

static void sell_plain(const qgpu_sell *a, const float *x, float *y) { sell_product(a, x, y); }
#if SELL_BUILDS
#include <immintrin.h>
/* The same sums, one vector lane per row: gather, multiply, add (no FMA: the plain code's two roundings). */
__attribute__((target("avx2"))) static void sell_avx2(const qgpu_sell *a, const float *x, float *y) {
    for (size_t s = 0; s < a->slices; s++) {
        __m256 acc = _mm256_setzero_ps();
        const uint16_t *c = a->cols + (size_t)a->start[s] * QGPU_SELL_LANES;
        const uint16_t *v = a->vals + (size_t)a->start[s] * QGPU_SELL_LANES;
        for (int32_t k = a->start[s]; k < a->start[s + 1]; k++, c += QGPU_SELL_LANES, v += QGPU_SELL_LANES) {
            __m256i idx = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)c));
            __m256 xv = _mm256_i32gather_ps(x, idx, 4);
            __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)v)), 16));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(wv, xv));
        }
        const int32_t *dest = a->dest + s * QGPU_SELL_LANES;
        if (a->contig[s]) { /* eight consecutive rows: one store */
            _mm256_storeu_ps(y + dest[0], acc);
            continue;
        }
        float out[QGPU_SELL_LANES];
        _mm256_storeu_ps(out, acc);
        for (int r = 0; r < QGPU_SELL_LANES; r++)
            if (dest[r] >= 0) y[dest[r]] = out[r];
    }
}
#endif

void qgpu_sell_matvec(const qgpu_sell *a, const float *x, float *y) {
#if SELL_BUILDS
    if (qgpu_get_isa() >= 1) { /* AVX2, and the AVX-512 levels (which have it) */
        sell_avx2(a, x, y);
        return;
    }
#endif
    sell_plain(a, x, y);
}

/* ---- several inputs at once -------------------------------------------------------------------------- */

/* A slice's sums, acc[lane][input], to their output rows (dest[lane] >= 0) of each of the nb inputs. */
SELL_BODY void batch_store(const int32_t *dest, float acc[QGPU_SELL_LANES][QGPU_BATCH], size_t nb, float *const *y) {
    for (int r = 0; r < QGPU_SELL_LANES; r++)
        if (dest[r] >= 0)
            for (size_t b = 0; b < nb; b++) y[b][dest[r]] = acc[r][b];
}

/* The batched form: the inputs transposed, xt[col * QGPU_BATCH + b] = input b's column col, so one step of a
 * slice is, per lane r, a contiguous load of its column's QGPU_BATCH values and a multiply by the lane's
 * weight (no gather); each (row, input) pair is its own sum in the same order as qgpu_sell_matvec's. */
SELL_BODY void sell_batch_product(const qgpu_sell *a, const float *xt, size_t nb, float *const *y) {
    for (size_t s = 0; s < a->slices; s++) {
        float acc[QGPU_SELL_LANES][QGPU_BATCH];
        for (int r = 0; r < QGPU_SELL_LANES; r++)
            for (int b = 0; b < QGPU_BATCH; b++) acc[r][b] = 0.0f;
        const uint16_t *c = a->cols + (size_t)a->start[s] * QGPU_SELL_LANES;
        const uint16_t *v = a->vals + (size_t)a->start[s] * QGPU_SELL_LANES;
        for (int32_t k = a->start[s]; k < a->start[s + 1]; k++, c += QGPU_SELL_LANES, v += QGPU_SELL_LANES)
            for (int r = 0; r < QGPU_SELL_LANES; r++) {
                float w = qgpu_bf16_value(v[r]);
                const float *x = xt + (size_t)c[r] * QGPU_BATCH;
                for (int b = 0; b < QGPU_BATCH; b++) acc[r][b] = acc[r][b] + w * x[b];
            }
        batch_store(a->dest + s * QGPU_SELL_LANES, acc, nb, y);
    }
}

static void sell_batch_plain(const qgpu_sell *a, const float *xt, size_t nb, float *const *y) {
    sell_batch_product(a, xt, nb, y);
}
#if SELL_BUILDS
/* One ymm of QGPU_BATCH (8) inputs per lane: the lane's weight broadcast from the step's 8 weights. */
__attribute__((target("avx2"))) static void sell_batch_avx2(const qgpu_sell *a, const float *xt, size_t nb,
                                                            float *const *y) {
    for (size_t s = 0; s < a->slices; s++) {
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0, acc4 = acc0, acc5 = acc0,
               acc6 = acc0, acc7 = acc0;
        const uint16_t *c = a->cols + (size_t)a->start[s] * QGPU_SELL_LANES;
        const uint16_t *v = a->vals + (size_t)a->start[s] * QGPU_SELL_LANES;
        for (int32_t k = a->start[s]; k < a->start[s + 1]; k++, c += QGPU_SELL_LANES, v += QGPU_SELL_LANES) {
            __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)v)), 16));
#define SELL_LANE(r, acc)                                                                                       \
    acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_permutevar8x32_ps(wv, _mm256_set1_epi32(r)),                 \
                                           _mm256_loadu_ps(xt + (size_t)c[r] * QGPU_BATCH)))
            SELL_LANE(0, acc0);
            SELL_LANE(1, acc1);
            SELL_LANE(2, acc2);
            SELL_LANE(3, acc3);
            SELL_LANE(4, acc4);
            SELL_LANE(5, acc5);
            SELL_LANE(6, acc6);
            SELL_LANE(7, acc7);
#undef SELL_LANE
        }
        float out[QGPU_SELL_LANES][QGPU_BATCH];
        _mm256_storeu_ps(out[0], acc0);
        _mm256_storeu_ps(out[1], acc1);
        _mm256_storeu_ps(out[2], acc2);
        _mm256_storeu_ps(out[3], acc3);
        _mm256_storeu_ps(out[4], acc4);
        _mm256_storeu_ps(out[5], acc5);
        _mm256_storeu_ps(out[6], acc6);
        _mm256_storeu_ps(out[7], acc7);
        batch_store(a->dest + s * QGPU_SELL_LANES, out, nb, y);
    }
}
#endif

void qgpu_sell_batch(const qgpu_sell *a, const float *xt, size_t nb, float *const *y) {
#if SELL_BUILDS
    if (qgpu_get_isa() >= 1) {
        sell_batch_avx2(a, xt, nb, y);
        return;
    }
#endif
    sell_batch_plain(a, xt, nb, y);
}

void qgpu_transpose_batch(const float *const *x, size_t nb, const int32_t *cols, size_t n_cols, size_t pad,
                          float *xt) {
    for (size_t i = 0; i < n_cols; i++) {
        size_t c = (size_t)cols[i];
        for (size_t b = 0; b < QGPU_BATCH; b++) xt[c * QGPU_BATCH + b] = b < nb ? x[b][c] : 0.0f;
    }
    for (size_t b = 0; b < QGPU_BATCH; b++) xt[pad * QGPU_BATCH + b] = 0.0f;
}

/* y [d] += the columns j = idx[0..n) (increasing) of a CSC matrix, times act[j] (y holds +0 where no such
 * column has an entry, as an empty CSR row sums to). */
static void csc_columns(const int32_t *idx, size_t n, const int64_t *ptr, const int32_t *rows, const float *vals,
                        const float *act, float *y) {
    for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)idx[i];
        float a = act[j];
        for (int64_t e = ptr[j]; e < ptr[j + 1]; e++) y[rows[e]] = y[rows[e]] + vals[e] * a;
    }
}

/* The positions of act's values that are not +-0, increasing, into idx; returns how many. */
static size_t nonzero_at(const float *act, size_t m, int32_t *idx) {
    size_t n = 0;
    for (size_t j = 0; j < m; j++) {
        idx[n] = (int32_t)j;
        n += (qgpu_float_bits(act[j]) & 0x7FFFFFFFu) != 0;
    }
    return n;
}

void qgpu_csc_active(size_t m, size_t d, const int64_t *ptr, const int32_t *rows, const float *vals,
                     const float *act, float *y, int32_t *idx) {
    memset(y, 0, d * sizeof *y);
    csc_columns(idx, nonzero_at(act, m, idx), ptr, rows, vals, act, y);
}

