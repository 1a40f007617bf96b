/* Q8 quantization of a bf16 matrix (the C twin of kernels_ref.quantize_q8, bit for bit): per block of 32
 * columns of a row, the smallest power of two s >= max|w| / 127 is the scale when every w / s is an integer
 * (the block is then exact: zeros, small integers, a circuit's values); otherwise the scale is max|w| / 127
 * and q = round-half-even(w / scale). A block holding inf or NaN gets a NaN scale (the caller refuses it).
 * A model's matrices are quantized at load, in parallel over rows. */
#include <math.h>
#include <string.h>

#include "qgpu_core.h"

enum { BLOCK = 32 };

typedef struct {
    const uint16_t *w;
    size_t in;
    int8_t *q;
    float *scales;
} quant_args;

/* rint(v) (round half to even) for |v| < 2^22, without a libm call, so the block's loops vectorize: adding
 * 1.5 * 2^23 leaves no fraction bits, and the addition rounds half to even. -0 comes back as +0, which no
 * caller tells apart (it is compared with == and converted to an integer). */
static inline float round_even(float v) {
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

static void quantize_block(const uint16_t *w, int8_t *q, float *scale) {
    float v[BLOCK], amax = 0.0f;
    int finite = 1;
    for (int k = 0; k < BLOCK; k++) {
        v[k] = qgpu_bf16_value(w[k]);
        finite &= isfinite(v[k]) != 0;
        if (fabsf(v[k]) > amax) amax = fabsf(v[k]);
    }
    if (!finite) { /* no scale stands for inf or NaN: a NaN scale tells the caller, which refuses the matrix */
        memset(q, 0, BLOCK);
        *scale = NAN;
        return;
    }
    int e;
    float step = amax / 127.0f, mant = frexpf(step, &e);
    float pow2 = ldexpf(1.0f, mant == 0.5f ? e - 1 : e);
    int exact = 1; /* every v / pow2 is within 127 of 0 (pow2 >= amax / 127), so round_even applies */
    for (int k = 0; k < BLOCK; k++) {
        float g = v[k] / pow2;
        exact &= g == round_even(g);
    }
    float s = amax == 0.0f ? 0.0f : exact ? pow2 : step;
    float safe = s == 0.0f ? 1.0f : s;
    for (int k = 0; k < BLOCK; k++) {
        float r = round_even(v[k] / safe);  /* |v / safe| <= 127 (plus rounding) */
        q[k] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
    }
    *scale = s;
}

static void quantize_rows(void *ctx, size_t r0, size_t r1) {
    const quant_args *a = (const quant_args *)ctx;
    size_t blocks = a->in / BLOCK;
    for (size_t r = r0; r < r1; r++)
        for (size_t b = 0; b < blocks; b++)
            quantize_block(a->w + r * a->in + b * BLOCK, a->q + r * a->in + b * BLOCK, a->scales + r * blocks + b);
}

void qgpu_quantize_q8(const uint16_t *w, size_t out, size_t in, int8_t *q, float *scales) {
    quant_args a = {w, in, q, scales};
    qgpu_parallel_for(out, 16, out * in * 8, quantize_rows, &a);
}
