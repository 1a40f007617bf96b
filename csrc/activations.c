/* The elementwise activations (exp, SiLU, sigmoid, the DeltaNet decay gate) and the l2 norm, as the C core defines them: one exp
 * for every path of the forward pass (prefill, decode, the fused decode steps), so that no two paths can
 * differ in an ulp because one used NumPy's exp and another libm's. qgpu_expf is the library's own, plain
 * C99 in double precision (range reduction by ln 2, a degree-13 Taylor polynomial, an exact power of two),
 * so it gives the same bits on every platform and compiler, and is the correctly rounded exp except in
 * the rare case the exact value lies within ~1e-16 (relative) of a rounding boundary. */
#include <math.h>
#include <string.h>

#include "qgpu_core.h"

static inline float bits_float(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Branch-free, with the special cases chosen on the float's bits (integer selects: compilers if-convert
 * them where they would keep a float comparison's branch), so that loops over it vectorize. */
static inline float exp_core(float x) {
    const uint32_t b89 = 0x42B20000u, bm104 = 0xC2D00000u, binf = 0x7F800000u; /* 89.0f, -104.0f, inf */
    const double log2e = 1.4426950408889634, round_magic = 6755399441055744.0; /* 1.5 * 2^52 */
    const double ln2_hi = 0.693147180559890330187, ln2_lo = 5.4979230187083711552e-14; /* hi: 41 bits */
    uint32_t bx = qgpu_float_bits(x);
    uint32_t big = (int32_t)bx > (int32_t)b89;                /* x > 89 (or a NaN): exp(89) > FLT_MAX */
    uint32_t small = bx > bm104;                              /* x < -104 (or a NaN): below 2^-150 */
    uint32_t nan = (bx & 0x7FFFFFFFu) > binf;
    double xd = (double)bits_float(big ? b89 : (small ? bm104 : bx));
    double t = xd * log2e + round_magic;   /* k = nearest integer to x / ln 2 in t's low bits */
    double kd = t - round_magic;
    double r = (xd - kd * ln2_hi) - kd * ln2_lo;  /* |r| <= ln2 / 2 (kd * ln2_hi is exact) */
    double p = 1.0 / 6227020800.0;                 /* Taylor to r^13 / 13! */
    p = p * r + 1.0 / 479001600;
    p = p * r + 1.0 / 39916800;
    p = p * r + 1.0 / 3628800;
    p = p * r + 1.0 / 362880;
    p = p * r + 1.0 / 40320;
    p = p * r + 1.0 / 5040;
    p = p * r + 1.0 / 720;
    p = p * r + 1.0 / 120;
    p = p * r + 1.0 / 24;
    p = p * r + 1.0 / 6;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    uint64_t tb, mb;
    double magic = round_magic, scale;
    memcpy(&tb, &t, sizeof tb);
    memcpy(&mb, &magic, sizeof mb);
    uint64_t bits = (tb - mb + 1023u) << 52;       /* 2^k, a normal double for |k| <= 151 */
    memcpy(&scale, &bits, sizeof scale);
    uint32_t by = qgpu_float_bits((float)(p * scale));
    by = big ? binf : by;
    by = small ? 0u : by;
    return bits_float(nan ? (bx | 0x00400000u) : by);  /* a NaN comes back quiet, as from arithmetic */
}

float qgpu_expf(float x) { return exp_core(x); }

/* The loops come in three builds, chosen at run time like the dense products: plain (SSE2 on x86-64), AVX2
 * and AVX-512; the arithmetic is the same IEEE operations (no contraction), so the same bits. */
#define ELEMENTWISE_LOOP(attr, fname, expr)                                           \
    attr static void fname(const float *x, size_t n, float *y) {                      \
        for (size_t i = 0; i < n; i++) { float v = x[i]; y[i] = (expr); }              \
    }

/* The public functions split n over the core's threads (each value's bits do not depend on the split);
 * cost: about how many multiply-adds one value takes, so short vectors (decode) stay on one thread. */
typedef struct {
    const float *x;
    float *y;
} elementwise_job;
enum { ELEMENTWISE_GRAIN = 1024 };

#if QGPU_SIMD_BUILDS
#define ELEMENTWISE_BUILDS(name, expr)                                                \
    ELEMENTWISE_LOOP(, name##_plain, expr)                                            \
    ELEMENTWISE_LOOP(__attribute__((target("avx2"))), name##_avx2, expr)              \
    ELEMENTWISE_LOOP(__attribute__((target("avx512f"))), name##_avx512, expr)
#else
#define ELEMENTWISE_BUILDS(name, expr) ELEMENTWISE_LOOP(, name##_plain, expr)
#endif
#define ELEMENTWISE_SERIAL(name, expr)                                                \
    ELEMENTWISE_BUILDS(name, expr)                                                    \
    static void name##_serial(const float *x, size_t n, float *y) { QGPU_ISA_PICK(name)(x, n, y); }

#define PARALLEL_ELEMENTWISE(name, serial, cost)                                      \
    static void name##_range(void *ctx, size_t begin, size_t end) {                   \
        const elementwise_job *j = (const elementwise_job *)ctx;                      \
        serial(j->x + begin, end - begin, j->y + begin);                              \
    }                                                                                 \
    void qgpu_##name(const float *x, size_t n, float *y) {                            \
        elementwise_job j = {x, y};                                                   \
        qgpu_parallel_for(n, ELEMENTWISE_GRAIN, n * (cost), name##_range, &j);        \
    }

#define ELEMENTWISE(name, expr, cost) \
    ELEMENTWISE_SERIAL(name, expr)    \
    PARALLEL_ELEMENTWISE(name, name##_serial, cost)

ELEMENTWISE(exp, exp_core(v), 16)
ELEMENTWISE_SERIAL(silu_formula, v / (1.0f + exp_core(-v)))
ELEMENTWISE(sigmoid, 1.0f / (1.0f + exp_core(-v)), 16)
ELEMENTWISE(round_bf16_to, qgpu_bf16_round(v), 2)

void qgpu_round_bf16(float *x, size_t n) { qgpu_round_bf16_to(x, n, x); }

/* SiLU's value is known without the exp on most of a circuit layer's activations, the same bits as the
 * formula v / (1 + exp(-v)): v >= 17 gives v (exp(-17) < 2^-24, so 1 + exp(-v) rounds to 1; +inf too),
 * -inf < v <= -89 gives -0 (exp(89) overflows to inf, and a finite v / inf is -0), and +-0 gives itself
 * (+-0 / 2). The other values are gathered and take the vectorized loop; tests/test_kernels_silu.py
 * compares every float of the boundary ranges and random ones with qgpu_silu_formula. */
enum { SILU_BLOCK = 256 };

/* The known values of x[0..len) written to y; the others' positions to at, their values to in; returns how
 * many (plain C: one branch-free step per value). */
static size_t silu_known(const float *x, size_t len, float *y, float *in, uint32_t *at) {
    const uint32_t ninf = 0xFF800000u;
    size_t k = 0;
    for (size_t j = 0; j < len; j++) {
        float v = x[j];
        uint32_t b = qgpu_float_bits(v);
        uint32_t big = v >= 17.0f, neg = v <= -89.0f && b != ninf, zero = !(b & 0x7FFFFFFFu);
        y[j] = neg ? -0.0f : v;
        in[k] = v;
        at[k] = (uint32_t)j;
        k += !(big | neg | zero);
    }
    return k;
}

#if QGPU_SIMD_BUILDS
#include <immintrin.h>
/* The same, 8 values a compare: the known lanes stored at once, the others gathered one by one. */
__attribute__((target("avx2"))) static size_t silu_known_avx2(const float *x, size_t len, float *y, float *in,
                                                                uint32_t *at) {
    const __m256 c17 = _mm256_set1_ps(17.0f), cm89 = _mm256_set1_ps(-89.0f), ninf = _mm256_set1_ps(-INFINITY);
    const __m256 mzero = _mm256_set1_ps(-0.0f);
    const __m256i abs = _mm256_set1_epi32(0x7FFFFFFF);
    size_t k = 0, j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        __m256 neg = _mm256_and_ps(_mm256_cmp_ps(v, cm89, _CMP_LE_OQ), _mm256_cmp_ps(v, ninf, _CMP_NEQ_OQ));
        __m256 zero = _mm256_castsi256_ps(
            _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), abs), _mm256_setzero_si256()));
        __m256 known = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(v, c17, _CMP_GE_OQ), neg), zero);
        _mm256_storeu_ps(y + j, _mm256_blendv_ps(v, mzero, neg));
        unsigned mid = ~(unsigned)_mm256_movemask_ps(known) & 0xFFu;
        while (mid) {
            unsigned r = (unsigned)__builtin_ctz(mid);
            in[k] = x[j + r];
            at[k++] = (uint32_t)(j + r);
            mid &= mid - 1;
        }
    }
    size_t rest = silu_known(x + j, len - j, y + j, in + k, at + k);
    for (size_t i = 0; i < rest; i++) at[k + i] += (uint32_t)j;
    return k + rest;
}
#endif

static void silu_blocks(const float *x, size_t n, float *y) {
    float in[SILU_BLOCK], out[SILU_BLOCK];
    uint32_t at[SILU_BLOCK];
#if QGPU_SIMD_BUILDS
    size_t (*known)(const float *, size_t, float *, float *, uint32_t *) =
        qgpu_get_isa() >= 1 ? silu_known_avx2 : silu_known;
#else
    size_t (*known)(const float *, size_t, float *, float *, uint32_t *) = silu_known;
#endif
    for (size_t i = 0; i < n; i += SILU_BLOCK) {
        size_t len = n - i < SILU_BLOCK ? n - i : SILU_BLOCK;
        size_t k = known(x + i, len, y + i, in, at);
        if (!k) continue;
        silu_formula_serial(in, k, out);
        for (size_t j = 0; j < k; j++) y[i + at[j]] = out[j];
    }
}

/* The formula on every value (the reference of qgpu_silu, for tests). */
void qgpu_silu_formula(const float *x, size_t n, float *y) { silu_formula_serial(x, n, y); }

PARALLEL_ELEMENTWISE(silu, silu_blocks, 16) /* ranges start at multiples of 1024: the same blocks */

/* The DeltaNet decay gate: g = -exp(A_log) * softplus(a + dt_bias), softplus x itself above 20 (torch). */
void qgpu_deltanet_gate(const float *a, size_t n, const float *a_log, const float *dt_bias, size_t heads,
                        float *g) {
    for (size_t i = 0; i < n; i++) {
        float x = a[i] + dt_bias[i % heads];
        float softplus = x > 20.0f ? x : (float)log1p((double)exp_core(x));
        g[i] = -exp_core(a_log[i % heads]) * softplus;
    }
}

/* y = (x * (1 / sqrt(sum(x^2) + eps))) / divisor per row of d (HF's l2norm; the divisor is the query's
 * sqrt(dk), 1 for keys: x / 1 is x). The sum of squares is accumulated in double, as in the RMSNorm. */
void qgpu_l2norm(const float *x, size_t rows, size_t d, float eps, float divisor, float *y) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        double sum = 0.0;
        for (size_t i = 0; i < d; i++) sum += (double)xr[i] * (double)xr[i];
        float inv = 1.0f / sqrtf((float)sum + eps);
        for (size_t i = 0; i < d; i++) y[r * d + i] = (xr[i] * inv) / divisor;
    }
}
