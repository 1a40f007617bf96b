/* RMSNorm (plain or zero-centred 1 + w) and the DeltaNet output's gated RMSNorm, over rows of d floats.
 * The sum of squares is accumulated in double, so it does not depend on summation order; the rest is fp32
 * in the reference's order: (x * inv_rms) * weight [* silu(z)]. */
#include <math.h>

#include "qgpu_core.h"

static float inv_rms(const float *x, size_t d, float eps) {
    double sum = 0.0;
    for (size_t i = 0; i < d; i++) sum += (double)x[i] * (double)x[i];
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
