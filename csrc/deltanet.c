/* Gated DeltaNet pieces for one token or a run of t (reference §3.2 steps 2 and 7): the causal depthwise
 * conv update and the gated delta rule over all heads. Plain C; the inner loops run along contiguous dv / channel rows
 * with independent lanes, so compilers vectorize them without reordering any sum. The delta rule's per-head
 * code is compiled three times (plain, AVX2, AVX-512, chosen at run time like the dense products): wider
 * vectors over those independent lanes, the same IEEE operations (no contraction), so the same bits. */
#include <math.h>
#include <string.h>

#include "qgpu_core.h"

/* Qwen3.5's conv kernel (4 taps): the general loop's arithmetic per channel, written so the compiler can
 * vectorize across channels (no memmove call per channel, no aliasing). */
static void conv_update4(float *restrict state, size_t c, const float *restrict x, const float *restrict w,
                         float *restrict y) {
    for (size_t ch = 0; ch < c; ch++) {
        float *s = state + ch * 3;
        const float *wc = w + ch * 4;
        float s0 = s[0], s1 = s[1], s2 = s[2], xc = x[ch];
        float acc = wc[0] * s0;
        acc = acc + wc[1] * s1;
        acc = acc + wc[2] * s2;
        y[ch] = acc + wc[3] * xc;
        s[0] = s1;
        s[1] = s2;
        s[2] = xc;
    }
}

void qgpu_conv_update(float *state, size_t c, size_t k, const float *x, const float *w, float *y) {
    if (k == 4) {
        conv_update4(state, c, x, w, y);
        return;
    }
    for (size_t ch = 0; ch < c; ch++) {
        float *s = state + ch * (k - 1);
        const float *wc = w + ch * k;
        /* window = [s[0], ..., s[k-2], x[ch]], oldest first; taps summed in order */
        float acc = wc[0] * (k > 1 ? s[0] : x[ch]);
        for (size_t j = 1; j + 1 < k; j++) acc = acc + wc[j] * s[j];
        if (k > 1) acc = acc + wc[k - 1] * x[ch];
        y[ch] = acc;
        for (size_t j = 0; j + 2 < k; j++) s[j] = s[j + 1];
        if (k > 1) s[k - 2] = x[ch];
    }
}

/* T tokens in order through one state: the same per-token arithmetic as T qgpu_conv_update calls. */
void qgpu_conv_prefill(float *state, size_t c, size_t k, size_t t, const float *x, const float *w, float *y) {
    for (size_t i = 0; i < t; i++) qgpu_conv_update(state, c, k, x + i * c, w, y + i * c);
}

/* Inlined into each ISA build of delta_heads below, so each is compiled for that build's vectors. */
#define HEAD_CODE static inline __attribute__((always_inline))

/* One head, one token (decay, write, read), in the reference's order. */
HEAD_CODE void delta_head(float *S, size_t dk, size_t dv, const float *q, const float *k, const float *v,
                       float g, float beta, float *o) {
    float kv[QGPU_MAX_DV], delta[QGPU_MAX_DV];
    const float decay = qgpu_expf(g);
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

/* ---- one token with a sparse-key fast path (decode of circuit layers) ----
 *
 * Bit-identical to qgpu_deltanet_step when the head's state S is "clean": every value finite and none -0.
 * Why: with decay exactly 1 (qgpu_expf(g) == 1) the decay multiply is the identity on finite values. A sum
 * started at +0 never becomes -0, so adding a zero term (S[i, j] * (+-0), a finite value times a zero
 * key or query entry) leaves it unchanged: kv and o are the sums over the nonzero k[i] / q[i] alone, in
 * the same ascending order. A row whose k[i] is +-0 gets S[i, j] + (+-0) = S[i, j] unless S[i, j] is -0,
 * which a clean state excludes (delta must be finite, else k[i] * delta[j] is NaN: checked). So only the
 * rows of nonzero k change. Afterwards the touched rows are checked: a -0 makes the head unclean (the
 * next token takes the dense path); a non-finite value also makes this token's read dense, since
 * inf * 0 is NaN there. A head not known clean, or with decay != 1, or non-finite q/k/v/beta, runs the
 * dense delta_head; its state is scanned when a later token could take the sparse path and at the end, so
 * the flags returned always equal a scan of the final state. Prefill runs every token this way. */

/* On the bits, branch-free, so the scans vectorize: finite = exponent not all ones; -0 = 0x80000000. */
HEAD_CODE int is_clean(const float *p, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b = qgpu_float_bits(p[i]);
        bad |= ((b & 0x7F800000u) == 0x7F800000u) | (b == 0x80000000u);
    }
    return !bad;
}

HEAD_CODE int all_finite(const float *p, size_t n) {
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) bad |= (qgpu_float_bits(p[i]) & 0x7F800000u) == 0x7F800000u;
    return !bad;
}

HEAD_CODE int sparse_head(float *S, size_t dk, size_t dv, const float *q, const float *k, const float *v,
                       float g, float beta, float *o) {
    float kv[QGPU_MAX_DV], delta[QGPU_MAX_DV];
    if (qgpu_expf(g) != 1.0f || !isfinite(beta) || !all_finite(q, dk) || !all_finite(k, dk) || !all_finite(v, dv))
        return -1;
    memset(kv, 0, dv * sizeof *kv);
    for (size_t i = 0; i < dk; i++) {
        if (k[i] == 0.0f) continue;
        const float *row = S + i * dv;
        for (size_t j = 0; j < dv; j++) kv[j] += row[j] * k[i];
    }
    for (size_t j = 0; j < dv; j++) delta[j] = (v[j] - kv[j]) * beta;
    if (!all_finite(delta, dv)) return -1; /* nothing written yet: the dense path starts from the same S */
    int clean = 1;
    for (size_t i = 0; i < dk; i++) {
        if (k[i] == 0.0f) continue;
        float *row = S + i * dv;
        for (size_t j = 0; j < dv; j++) row[j] += k[i] * delta[j];
        clean &= is_clean(row, dv);
    }
    memset(o, 0, dv * sizeof *o);
    int finite = clean; /* unclean rows may hold inf: then read every row, as the dense path does */
    if (!finite) {
        finite = 1;
        for (size_t i = 0; i < dk; i++)
            if (k[i] != 0.0f) finite &= all_finite(S + i * dv, dv);
    }
    for (size_t i = 0; i < dk; i++) {
        if (finite && q[i] == 0.0f) continue;
        const float *row = S + i * dv;
        for (size_t j = 0; j < dv; j++) o[j] += row[j] * q[i];
    }
    return clean;
}

/* One head, one token: the sparse path where it is exact, else the dense one. *clean: 1 known clean, else
 * unknown (the state is scanned only when this token could take the sparse path); on return 1 or 0 when
 * known, -1 after a dense step (scan it to know). */
HEAD_CODE void head_step(float *S, size_t dk, size_t dv, const float *q, const float *k, const float *v, float g,
                      float beta, float *o, int32_t *clean) {
    if (*clean != 1 && qgpu_expf(g) == 1.0f) *clean = is_clean(S, dk * dv);
    int r = *clean == 1 ? sparse_head(S, dk, dv, q, k, v, g, beta, o) : -1;
    if (r < 0) delta_head(S, dk, dv, q, k, v, g, beta, o);
    *clean = r;
}

typedef struct {
    float *s;
    size_t h, dk, dv, t;
    const float *q, *k, *v, *g, *beta;
    float *o;
    int32_t *clean;
} delta_args;

/* Heads are independent, so a thread takes whole heads and runs all T tokens through each: one dispatch
 * per prefill, and a head's state stays in cache across its tokens. */
#define DELTA_HEADS(attr, name)                                                                          \
    attr static void name(const delta_args *a, size_t h0, size_t h1) {                                   \
        const size_t h = a->h, dk = a->dk, dv = a->dv;                                                   \
        for (size_t hh = h0; hh < h1; hh++) {                                                            \
            float *S = a->s + hh * dk * dv;                                                              \
            for (size_t i = 0; i < a->t; i++) {                                                          \
                size_t th = i * h + hh; /* token i, head hh */                                           \
                head_step(S, dk, dv, a->q + th * dk, a->k + th * dk, a->v + th * dv, a->g[th],           \
                          a->beta[th], a->o + th * dv, a->clean + hh);                                   \
            }                                                                                            \
            if (a->clean[hh] < 0) a->clean[hh] = is_clean(S, dk * dv);                                   \
        }                                                                                                \
    }

DELTA_HEADS(, delta_heads_plain)
#if QGPU_SIMD_BUILDS
DELTA_HEADS(__attribute__((target("avx2"))), delta_heads_avx2)
DELTA_HEADS(__attribute__((target("avx512f"))), delta_heads_avx512)
#endif

static void delta_heads(void *ctx, size_t h0, size_t h1) {
    QGPU_ISA_PICK(delta_heads)((const delta_args *)ctx, h0, h1);
}

void qgpu_deltanet_prefill(float *s, size_t h, size_t dk, size_t dv, size_t t, const float *q, const float *k,
                           const float *v, const float *g, const float *beta, float *o, int32_t *clean) {
    delta_args a = {s, h, dk, dv, t, q, k, v, g, beta, o, clean};
    qgpu_parallel_for(h, 1, t * h * dk * dv * 4, delta_heads, &a);
}

void qgpu_deltanet_step(float *s, size_t h, size_t dk, size_t dv, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, float *o) {
    for (size_t hh = 0; hh < h; hh++)
        delta_head(s + hh * dk * dv, dk, dv, q + hh * dk, k + hh * dk, v + hh * dv, g[hh], beta[hh], o + hh * dv);
}

/* One token. The sparse heads take about a microsecond, less than waking a helper costs, so only the heads
 * that will take the dense path (not known clean, or decay != 1: a trained layer's) count as work. */
void qgpu_deltanet_step_sparse(float *s, size_t h, size_t dk, size_t dv, const float *q, const float *k,
                               const float *v, const float *g, const float *beta, float *o, int32_t *clean) {
    delta_args a = {s, h, dk, dv, 1, q, k, v, g, beta, o, clean};
    size_t dense = 0;
    for (size_t hh = 0; hh < h; hh++) dense += clean[hh] != 1 || qgpu_expf(g[hh]) != 1.0f;
    qgpu_parallel_for(h, 1, dense * dk * dv * 4, delta_heads, &a);
}
