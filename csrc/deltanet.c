/* Gated DeltaNet pieces for one token (reference §3.2 steps 2 and 7): the causal depthwise conv update and
 * the gated delta rule over all heads. Plain C; the inner loops run along contiguous dv / channel rows
 * with independent lanes, so compilers vectorize them without reordering any sum. */
#include <math.h>
#include <string.h>

#include "qgpu_core.h"

void qgpu_conv_update(float *state, size_t c, size_t k, const float *x, const float *w, float *y) {
    for (size_t ch = 0; ch < c; ch++) {
        float *s = state + ch * (k - 1);
        const float *wc = w + ch * k;
        /* window = [s[0], ..., s[k-2], x[ch]], oldest first; taps summed in order */
        float acc = wc[0] * (k > 1 ? s[0] : x[ch]);
        for (size_t j = 1; j + 1 < k; j++) acc = acc + wc[j] * s[j];
        if (k > 1) acc = acc + wc[k - 1] * x[ch];
        y[ch] = acc;
        if (k > 1) {
            memmove(s, s + 1, (k - 2) * sizeof *s);
            s[k - 2] = x[ch];
        }
    }
}

typedef struct {
    float *s;
    size_t dk, dv;
    const float *q, *k, *v, *g, *beta;
    float *o;
} delta_args;

static void delta_heads(void *ctx, size_t h0, size_t h1) {
    const delta_args *a = (const delta_args *)ctx;
    const size_t dk = a->dk, dv = a->dv;
    float kv[QGPU_MAX_DV], delta[QGPU_MAX_DV];
    for (size_t h = h0; h < h1; h++) {
        float *S = a->s + h * dk * dv;
        const float *q = a->q + h * dk, *k = a->k + h * dk, *v = a->v + h * dv;
        float *o = a->o + h * dv;
        const float decay = expf(a->g[h]), beta = a->beta[h];
        /* decay, and what the decayed state recalls for k: kv[j] = sum_i S[i, j] k[i] */
        memset(kv, 0, dv * sizeof *kv);
        for (size_t i = 0; i < dk; i++) {
            float *row = S + i * dv;
            for (size_t j = 0; j < dv; j++) {
                row[j] *= decay;
                kv[j] += row[j] * k[i];
            }
        }
        /* write: S[i, j] += k[i] * delta[j], then read the updated state: o[j] = sum_i S[i, j] q[i] */
        for (size_t j = 0; j < dv; j++) delta[j] = (v[j] - kv[j]) * beta;
        memset(o, 0, dv * sizeof *o);
        for (size_t i = 0; i < dk; i++) {
            float *row = S + i * dv;
            for (size_t j = 0; j < dv; j++) {
                row[j] += k[i] * delta[j];
                o[j] += row[j] * q[i];
            }
        }
    }
}

void qgpu_deltanet_step(float *s, size_t h, size_t dk, size_t dv, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, float *o) {
    delta_args a = {s, dk, dv, q, k, v, g, beta, o};
    qgpu_parallel_for(h, 1, h * dk * dv * 4, delta_heads, &a);
}
