/* RMSNorm (plain or zero-centred 1 + w) and the DeltaNet output's gated RMSNorm, over rows of d floats.
 * The sum of squares is accumulated in double (each square is exact there), so its order barely matters;
 * it is a fixed one on every platform: eight running sums over i mod 8 (independent chains, which the
 * compiler vectorizes, instead of one chain waiting on each add), the tail in sum 0, then a fixed tree.
 * The rest is fp32 in the reference's order: (x * inv_rms) * weight [* silu(z)]. */
#include <math.h>

#include "qgpu_core.h"

static float inv_rms(const float *x, size_t d, float eps) {
    double acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= d; i += 8)
        for (size_t j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < d; i++) acc[0] += (double)x[i] * (double)x[i];
    double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    float variance = (float)(sum / (double)d);
    return 1.0f / sqrtf(variance + eps);
}

void qgpu_rmsnorm(const float *x, size_t rows, size_t d, const float *w, float eps, int plus_one, float *y) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        float *yr = y + r * d;
        float inv = inv_rms(xr, d, eps);
        if (plus_one)
            for (size_t i = 0; i < d; i++) yr[i] = (xr[i] * inv) * (1.0f + w[i]);
        else
            for (size_t i = 0; i < d; i++) yr[i] = (xr[i] * inv) * w[i];
    }
}

void qgpu_gated_rmsnorm(const float *x, const float *z, size_t rows, size_t d, const float *w, float eps,
                        float *y) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *zr = z + r * d;
        float *yr = y + r * d;
        float inv = inv_rms(xr, d, eps);
        qgpu_silu(zr, d, yr); /* the vectorized loop, then the product in the reference's order */
        for (size_t i = 0; i < d; i++) yr[i] = ((xr[i] * inv) * w[i]) * yr[i];
    }
}
