/* Gated DeltaNet pieces for one token or a run of t (reference §3.2 steps 2 and 7): the causal depthwise
 * conv update and the gated delta rule over all heads. Plain C; the inner loops run along contiguous dv / channel rows
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

/* T tokens in order through one state: the same per-token arithmetic as T qgpu_conv_update calls. */
void qgpu_conv_prefill(float *state, size_t c, size_t k, size_t t, const float *x, const float *w, float *y) {
    for (size_t i = 0; i < t; i++) qgpu_conv_update(state, c, k, x + i * c, w, y + i * c);
}

typedef struct {
    float *s;
    size_t h, dk, dv, t;
    const float *q, *k, *v, *g, *beta;
    float *o;
} delta_args;

/* One head, one token (decay, write, read), in the reference's order. */
static void delta_head(float *S, size_t dk, size_t dv, const float *q, const float *k, const float *v,
                       float g, float beta, float *o) {
    float kv[QGPU_MAX_DV], delta[QGPU_MAX_DV];
    const float decay = expf(g);
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

/* Heads are independent, so a thread takes whole heads and runs all T tokens through each: one dispatch
 * per prefill, and a head's state stays in cache across its tokens. */
static void delta_heads(void *ctx, size_t h0, size_t h1) {
    const delta_args *a = (const delta_args *)ctx;
    const size_t h = a->h, dk = a->dk, dv = a->dv;
    for (size_t hh = h0; hh < h1; hh++)
        for (size_t i = 0; i < a->t; i++) {
            size_t th = i * h + hh; /* token i, head hh */
            delta_head(a->s + hh * dk * dv, dk, dv, a->q + th * dk, a->k + th * dk, a->v + th * dv, a->g[th],
                       a->beta[th], a->o + th * dv);
        }
}

void qgpu_deltanet_prefill(float *s, size_t h, size_t dk, size_t dv, size_t t, const float *q, const float *k,
                           const float *v, const float *g, const float *beta, float *o) {
    delta_args a = {s, h, dk, dv, t, q, k, v, g, beta, o};
    qgpu_parallel_for(h, 1, t * h * dk * dv * 4, delta_heads, &a);
}

void qgpu_deltanet_step(float *s, size_t h, size_t dk, size_t dv, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, float *o) {
    qgpu_deltanet_prefill(s, h, dk, dv, 1, q, k, v, g, beta, o);
}
