/* The step engine of a circuit-only model (every layer a CSR DeltaNet + CSR MLP, model/step_engine.py): one
 * token through the whole stack, the final norm, the LM head's argmax, and a decode loop that feeds each
 * argmax back, all in C. It computes decode.c's values bit for bit (the
 * per-token path it replaces; tests/test_step_engine.py), doing only the work whose result is not known in
 * advance:
 *
 * - Sparse products run as SELL-8 (qgpu_sell): rows in slices of 8, one lane per row, each lane summing its
 *   row's entries in their CSR order from +0, as sparse.c's rows_span does (mul, then add: -ffp-contract=off),
 *   so the same bits; 8 independent chains instead of one (the CSR loop waits on each add). Padding entries
 *   are weight +0 at column `in`, where the input holds +0: +0 * +0 = +0, and an acc + +0 is acc (acc starts
 *   at +0 and a round-to-nearest sum is -0 only when both terms are).
 * - Only the mixer's active channels (a nonzero row of in_proj_qkv) are projected, convolved and passed
 *   through SiLU. Every other channel's projection is +0 on every token, so its conv state stays +0 (checked
 *   when a state is bound) and its conv output and activation are constants, computed once by the same
 *   kernels on zeros (qgpu_cgdn_ws_init) and kept in the workspace. The key/query l2 norms run per head
 *   that has an active channel; the gated norm only for the value heads out_proj reads.
 * - A value head whose query, key, b and a are +-0 on every token (no active channel, empty rows), whose
 *   constant decay is exactly 1 and beta finite, and that out_proj does not read, is skipped while its state
 *   is clean: deltanet.c's sparse path would write no row (its output is unread).
 * - The MLP's down product adds only the units whose activation is not +-0 (an acc + +-0 is acc), unit by
 *   unit in increasing order: for each output row that is its CSR row's order.
 * - The head multiplies the rows of a token set (qgpu_head_set) through the chunked product's own code, so
 *   each row's logit is its full-head bits, and takes the first maximum in id order (NumPy's). Over the whole
 *   vocabulary (a launch's set) the argmax comes from the head's factor tables where they prove it
 *   (qgpu_head_bound_argmax, model/head_bound.py): only the candidate's row is multiplied. */
#include <math.h>
#include <stdlib.h>
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

static void round_at(float *x, const int32_t *idx, size_t n) {
    for (size_t i = 0; i < n; i++) x[idx[i]] = qgpu_bf16_round(x[idx[i]]);
}

/* ---- the MLP ---------------------------------------------------------------------------------------- */

/* Workspace: h_mid [d], u [d + 1] (u[d] = +0 for the padding), g, p, s, act [m], y [d], and the active
 * units' positions (int32 [m]). */
size_t qgpu_cmlp_ws(const qgpu_cmlp *L) { return 3 * L->d + 1 + 5 * L->m; }

static void cmlp_step(const qgpu_cmlp *L, const float *h, int add_zero, float *ws, float *h_out) {
    size_t d = L->d, m = L->m;
    int bf16 = L->bf16;
    float *h_mid = ws, *u = h_mid + d, *g = u + d + 1, *p = g + m, *s = p + m, *act = s + m, *y = act + m;
    int32_t *idx = (int32_t *)(void *)(y + d);
    for (size_t i = 0; i < d; i++) h_mid[i] = add_zero ? h[i] + 0.0f : h[i];
    if (add_zero && bf16) qgpu_round_bf16(h_mid, d);
    qgpu_rmsnorm(h_mid, 1, d, L->w, L->eps, 1, u);
    if (bf16) qgpu_round_bf16(u, d);
    u[d] = 0.0f;
    if (m) {
        qgpu_sell_matvec(&L->gate, u, g);
        qgpu_sell_matvec(&L->up, u, p);
        if (bf16) {
            qgpu_round_bf16(g, m);
            qgpu_round_bf16(p, m);
        }
        qgpu_silu(g, m, s);
        for (size_t j = 0; j < m; j++) act[j] = bf16 ? qgpu_bf16_round(qgpu_bf16_round(s[j]) * p[j]) : s[j] * p[j];
    }
    qgpu_csc_active(m, d, L->down_ptr, L->down_rows, L->down_vals, act, y, idx);
    if (bf16) qgpu_round_bf16(y, d);
    for (size_t i = 0; i < d; i++) h_out[i] = bf16 ? qgpu_bf16_round(h_mid[i] + y[i]) : h_mid[i] + y[i];
}

/* ---- the DeltaNet mixer ----------------------------------------------------------------------------- */

/* Workspace (floats): mixed [c + 1], conv [c], act [c], qn, kn [kd], qr, kr [nv dk], z [n], b, a, beta, g
 * [nv], o [n], tmp [n], silu_z [n], y [d], u [d + 1], and the active channels' gathered values [2 c]. The
 * idle channels' entries of mixed, conv, act, qn, kn, z and y are set once (qgpu_cgdn_ws_init) and never
 * written again. */
typedef struct {
    float *mixed, *conv, *act, *qn, *kn, *qr, *kr, *z, *b, *a, *beta, *g, *o, *tmp, *silu_z, *y, *u, *ga, *gb;
    int32_t *idle; /* [nv]: 1 = the head's q, k and v are idle constants, q and k +-0, and out_proj never reads it */
} gdn_ws;

static gdn_ws gdn_parts(const qgpu_cgdn *L, float *ws) {
    size_t c = 2 * L->nk * L->dk + L->nv * L->dv, kd = L->nk * L->dk, n = L->nv * L->dv, nv = L->nv;
    gdn_ws w;
    w.mixed = ws;
    w.conv = w.mixed + c + 1;
    w.act = w.conv + c;
    w.qn = w.act + c;
    w.kn = w.qn + kd;
    w.qr = w.kn + kd;
    w.kr = w.qr + nv * L->dk;
    w.z = w.kr + nv * L->dk;
    w.b = w.z + n;
    w.a = w.b + nv;
    w.beta = w.a + nv;
    w.g = w.beta + nv;
    w.o = w.g + nv;
    w.tmp = w.o + n;
    w.silu_z = w.tmp + n;
    w.y = w.silu_z + n;
    w.u = w.y + L->d;
    w.ga = w.u + L->d + 1;
    w.gb = w.ga + c;
    w.idle = (int32_t *)(void *)(w.gb + c);
    return w;
}

size_t qgpu_cgdn_ws(const qgpu_cgdn *L) {
    size_t c = 2 * L->nk * L->dk + L->nv * L->dv, kd = L->nk * L->dk, n = L->nv * L->dv;
    return (c + 1) + 2 * c + 2 * kd + 2 * L->nv * L->dk + n + 4 * L->nv + 4 * n + 2 * (L->d + 1) + 2 * c + L->nv;
}

static int all_zero(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (qgpu_float_bits(x[i]) & 0x7FFFFFFFu) return 0;
    return 1;
}

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Whether a SELL matrix has a lane that writes output row `row`. */
static int sell_writes(const qgpu_sell *a, size_t row) {
    for (size_t i = 0; i < a->slices * QGPU_SELL_LANES; i++)
        if (a->dest[i] == (int32_t)row) return 1;
    return 0;
}

static int any_in(const int32_t *sorted, size_t n, size_t lo, size_t hi) {
    for (size_t i = 0; i < n; i++)
        if ((size_t)sorted[i] >= lo && (size_t)sorted[i] < hi) return 1;
    return 0;
}

/* The values every idle channel holds on every token: what gdn_in and the activations give for an all-+0
 * projection and conv state (the same kernels, on zeros). Returns 0 when out of memory. */
int qgpu_cgdn_ws_init(const qgpu_cgdn *L, float *ws) {
    size_t c = 2 * L->nk * L->dk + L->nv * L->dv, kd = L->nk * L->dk, k = L->k;
    memset(ws, 0, qgpu_cgdn_ws(L) * sizeof *ws);
    gdn_ws w = gdn_parts(L, ws);
    float *state = calloc(c * (k > 1 ? k - 1 : 1), sizeof *state);
    if (!state) return 0;
    qgpu_conv_update(state, c, k, w.mixed, L->conv_w, w.conv);
    free(state);
    if (L->bf16) qgpu_round_bf16(w.conv, c);
    qgpu_silu(w.conv, c, w.act);
    if (L->bf16) qgpu_round_bf16(w.act, c);
    qgpu_l2norm(w.act, L->nk, L->dk, 1e-6f, L->q_div, w.qn);
    qgpu_l2norm(w.act + kd, L->nk, L->dk, 1e-6f, 1.0f, w.kn);
    /* a head whose query and key are +-0 on every token and that nothing reads: on a clean state with decay
     * exactly 1 its step writes no row and its output is unread, so it is skipped (cgdn_step) */
    size_t dk = L->dk, dv = L->dv, nv = L->nv, rep = nv / L->nk;
    for (size_t hh = 0; hh < nv; hh++) {
        size_t src = hh / rep;
        w.idle[hh] = !any_in(L->active, L->n_active, src * dk, (src + 1) * dk)
                     && !any_in(L->active, L->n_active, kd + src * dk, kd + (src + 1) * dk)
                     && !any_in(L->active, L->n_active, 2 * kd + hh * dv, 2 * kd + (hh + 1) * dv)
                     && !any_in(L->read_heads, L->n_read, hh, hh + 1)
                     && all_zero(w.qn + src * dk, dk) && all_zero(w.kn + src * dk, dk)
                     && all_finite(w.act + 2 * kd + hh * dv, dv) && !sell_writes(&L->b, hh) && !sell_writes(&L->a, hh);
        if (!w.idle[hh]) continue;
        /* its b and a are +0 on every token: its beta and decay are constants, which must keep the step exact */
        float zero = 0.0f, beta, g;
        qgpu_sigmoid(&zero, 1, &beta);
        if (L->bf16) beta = qgpu_bf16_round(beta);
        qgpu_deltanet_gate(&zero, 1, L->a_log + hh, L->dt_bias + hh, 1, &g);
        w.idle[hh] = isfinite(beta) && qgpu_expf(g) == 1.0f;
    }
    return 1;
}

/* Whether a conv state [c, k-1] is +0 on every idle channel (what the constants above assume). */
int qgpu_cgdn_state_ok(const qgpu_cgdn *L, const float *conv_state) {
    size_t c = 2 * L->nk * L->dk + L->nv * L->dv, k1 = L->k - 1;
    size_t a = 0;
    for (size_t ch = 0; ch < c; ch++) {
        if (a < L->n_active && (size_t)L->active[a] == ch) {
            a++;
            continue;
        }
        for (size_t j = 0; j < k1; j++)
            if (qgpu_float_bits(conv_state[ch * k1 + j]) != 0) return 0;
    }
    return 1;
}

static void cgdn_step(const qgpu_cgdn *L, const float *h, float *conv_state, float *S, int32_t *clean, float *ws,
                      float *h_out) {
    size_t d = L->d, nk = L->nk, dk = L->dk, nv = L->nv, dv = L->dv;
    size_t kd = nk * dk, na = L->n_active;
    int bf16 = L->bf16;
    gdn_ws w = gdn_parts(L, ws);
    qgpu_rmsnorm(h, 1, d, L->in_norm, L->eps, 1, w.u);
    if (bf16) qgpu_round_bf16(w.u, d);
    w.u[d] = 0.0f;
    qgpu_sell_matvec(&L->qkv, w.u, w.mixed);
    qgpu_sell_matvec(&L->z, w.u, w.z);
    qgpu_sell_matvec(&L->b, w.u, w.b);
    qgpu_sell_matvec(&L->a, w.u, w.a);
    if (bf16) {
        round_at(w.mixed, L->active, na);
        round_at(w.z, L->z_rows, L->n_z_rows);
        qgpu_round_bf16(w.b, nv);
        qgpu_round_bf16(w.a, nv);
    }
    for (size_t r = 0; r < L->n_runs; r++) { /* the conv and SiLU kernels on each run of active channels */
        size_t c0 = (size_t)L->runs[2 * r], len = (size_t)L->runs[2 * r + 1] - c0;
        qgpu_conv_update(conv_state + c0 * (L->k - 1), len, L->k, w.mixed + c0, L->conv_w + c0 * L->k, w.conv + c0);
        if (bf16) qgpu_round_bf16(w.conv + c0, len);
        qgpu_silu(w.conv + c0, len, w.act + c0);
        if (bf16) qgpu_round_bf16(w.act + c0, len);
    }
    for (size_t hh = 0; hh < nv; hh++) { /* beta and the decay gate, elementwise, for the heads that step */
        if (w.idle[hh]) continue;
        qgpu_sigmoid(w.b + hh, 1, w.beta + hh);
        if (bf16) w.beta[hh] = qgpu_bf16_round(w.beta[hh]);
        qgpu_deltanet_gate(w.a + hh, 1, L->a_log + hh, L->dt_bias + hh, 1, w.g + hh);
    }
    for (size_t i = 0; i < L->n_qk_heads; i++) { /* heads 0..nk-1 are queries, nk..2nk-1 keys */
        size_t hh = (size_t)L->qk_heads[i];
        if (hh < nk)
            qgpu_l2norm(w.act + hh * dk, 1, dk, 1e-6f, L->q_div, w.qn + hh * dk);
        else
            qgpu_l2norm(w.act + kd + (hh - nk) * dk, 1, dk, 1e-6f, 1.0f, w.kn + (hh - nk) * dk);
    }
    const float *qr = w.qn, *kr = w.kn;
    if (nv != nk) {
        for (size_t hh = 0; hh < nv; hh++) { /* value head hh reads key head hh / (nv / nk) */
            size_t src = hh / (nv / nk);
            memcpy(w.qr + hh * dk, w.qn + src * dk, dk * sizeof *w.qr);
            memcpy(w.kr + hh * dk, w.kn + src * dk, dk * sizeof *w.kr);
        }
        qr = w.qr;
        kr = w.kr;
    }
    for (size_t hh = 0; hh < nv; hh++) { /* heads one by one: the same per-head steps as one call */
        if (w.idle[hh] && clean[hh] == 1) continue;
        if (w.idle[hh]) { /* not known clean: the step itself, with the constants it would compute */
            float zero = 0.0f;
            qgpu_sigmoid(&zero, 1, w.beta + hh);
            if (bf16) w.beta[hh] = qgpu_bf16_round(w.beta[hh]);
            qgpu_deltanet_gate(&zero, 1, L->a_log + hh, L->dt_bias + hh, 1, w.g + hh);
        }
        qgpu_deltanet_step_sparse(S + hh * dk * dv, 1, dk, dv, qr + hh * dk, kr + hh * dk, w.act + 2 * kd + hh * dv,
                                  w.g + hh, w.beta + hh, w.o + hh * dv, clean + hh);
    }
    for (size_t i = 0; i < L->n_read; i++) { /* gdn_out for the heads out_proj reads */
        size_t hh = (size_t)L->read_heads[i];
        float *o = w.o + hh * dv, *t = w.tmp + hh * dv, *z = w.z + hh * dv;
        if (bf16) {
            float *sz = w.silu_z + hh * dv;
            qgpu_silu(z, dv, sz);
            qgpu_round_bf16(o, dv);
            float ones[QGPU_MAX_DV];
            for (size_t j = 0; j < dv; j++) ones[j] = 1.0f;
            qgpu_rmsnorm(o, 1, dv, ones, L->eps, 0, t);
            for (size_t j = 0; j < dv; j++)
                t[j] = qgpu_bf16_round(qgpu_bf16_round(L->norm_w[j] * qgpu_bf16_round(t[j])) * sz[j]);
        } else {
            qgpu_gated_rmsnorm(o, z, 1, dv, L->norm_w, L->eps, t);
        }
    }
    qgpu_sell_matvec(&L->out, w.tmp, w.y);
    if (bf16) round_at(w.y, L->out_rows, L->n_out_rows);
    for (size_t i = 0; i < d; i++) h_out[i] = bf16 ? qgpu_bf16_round(h[i] + w.y[i]) : h[i] + w.y[i];
}

/* ---- a token through the stack, the head, the decode loop ------------------------------------------- */

void qgpu_circuit_layers(const qgpu_circuit *C, const qgpu_circuit_state *st, float *h, float *const *ws,
                         float *tmp) {
    for (size_t i = 0; i < C->n; i++) {
        int skip = C->silent[i] && st->zero[i];
        if (!skip) {
            st->zero[i] = 0;
            cgdn_step(C->gdn[i], h, st->conv[i], st->S[i], st->clean[i], ws[2 * i], tmp);
        }
        cmlp_step(C->mlp[i], skip ? h : tmp, skip, ws[2 * i + 1], h);
    }
}

/* The argmax of the set's logits for the final-normed hidden x: the first maximum (a NaN, if any, is the
 * maximum, as in NumPy). Returns the token id, or -1 when x holds a non-finite value (the chunked product
 * does not run; the caller takes the dense one). logits: the set's rows' values. */
int64_t qgpu_head_argmax(const qgpu_head_set *H, const float *x, int bf16, float *logits) {
    if (!qgpu_chunked_matvec_bf16(H->rows, H->n_in, H->width, H->ptr, H->cols, H->w, H->w8, x, logits)) return -1;
    if (bf16) qgpu_round_bf16(logits, H->rows);
    size_t best = 0;
    for (size_t r = 0; r < H->rows; r++) {
        if (isnan(logits[r])) {
            best = r;
            break;
        }
        if (logits[r] > logits[best]) best = r;
    }
    return H->ids[best];
}

/* ---- the bounded argmax (model/head_bound.py) ---- */

enum { BOUND_MAX_FIELDS = 16 };

/* The logit of row `row` of a set, its chunked bits (bf16: rounded). Returns 0 for a non-finite x. */
static int row_logit(const qgpu_head_set *H, size_t row, const float *x, int bf16, float *out) {
    if (!qgpu_chunked_matvec_bf16(1, H->n_in, H->width, H->ptr + row, H->cols, H->w, H->w8, x, out)) return 0;
    if (bf16) *out = qgpu_bf16_round(*out);
    return 1;
}

/* Below what every other token's logit bound must stay for `best` to be the unique maximum: best itself in
 * fp32; in bf16 one step of bf16 below it (a bound there cannot round up to a tie). NaN when unusable. */
static double bound_threshold(float best, int bf16) {
    if (!isfinite(best)) return NAN;
    if (!bf16) return (double)best;
    if (best == 0.0f) return NAN;
    return (double)best - ldexp(1.0, ilogb(best) - 6);
}

int64_t qgpu_head_bound_argmax(const qgpu_head_bound *B, const float *x, int bf16, double *work, float *logits,
                               int *proved) {
    size_t U = B->n_cols, K = B->n_kinds;
    double *xu = work, *M = xu + U, *err = M + K, *gap = err + K, *fv = gap + K;
    *proved = 0;
    for (size_t u = 0; u < U; u++) {
        xu[u] = (double)x[B->cols[u]];
        if (!isfinite(x[B->cols[u]])) return -1;
    }
    for (size_t k = 0; k < K; k++) {
        const double *bk = B->base + k * U, *ak = B->absmax + k * U;
        double base = 0.0, mag = 0.0;
        for (size_t u = 0; u < U; u++) {
            base += bk[u] * xu[u];
            mag += ak[u] * fabs(xu[u]);
        }
        M[k] = base;
        err[k] = B->rel[k] * mag;
        gap[k] = INFINITY;
        for (size_t f = 0; f < BOUND_MAX_FIELDS; f++) fv[k * BOUND_MAX_FIELDS + f] = 0.0;
    }
    for (size_t i = 0; i < B->n_factors; i++) {
        size_t n = (size_t)B->f_n[i], m = (size_t)B->f_m[i], k = (size_t)B->f_kind[i];
        const double *w = B->w + B->f_w[i];
        const int32_t *c = B->fcols + B->f_cols[i];
        double best = -INFINITY, second = -INFINITY;
        size_t arg = 0;
        for (size_t v = 0; v < n; v++) {
            double t = 0.0;
            for (size_t j = 0; j < m; j++) t += w[v * m + j] * xu[c[j]];
            if (t > best) {
                second = best;
                best = t;
                arg = v;
            } else if (t > second) {
                second = t;
            }
        }
        M[k] += best;
        if (n > 1 && best - second < gap[k]) gap[k] = best - second;
        int64_t val = B->vals[B->f_vals[i] + (int64_t)arg];
        fv[k * BOUND_MAX_FIELDS + (size_t)B->f_field[i]] += B->f_bit[i] < 0 ? (double)val : ldexp((double)val, B->f_bit[i]);
    }
    /* the candidate: the decomposed kind of the largest bound, each factor at its best */
    size_t kbest = K;
    for (size_t k = 0; k < K; k++)
        if (B->k_decomposed[k] && (kbest == K || M[k] > M[kbest])) kbest = k;
    int64_t cand = -1;
    float cand_logit = -INFINITY;
    if (kbest < K) {
        int64_t at = 0, stride = 1;
        const int64_t *radix = B->k_radix + B->k_radix_at[kbest];
        int inside = 1;
        for (int32_t f = 0; f < B->k_nfields[kbest]; f++) {
            int64_t v = (int64_t)fv[kbest * BOUND_MAX_FIELDS + (size_t)f + 1];
            inside &= v < radix[f]; /* bits at their best may spell a value past the field's domain */
            at += v * stride;
            stride *= radix[f];
        }
        cand = inside ? B->lookup[B->k_lookup[kbest] + at] : -1;
        if (cand >= 0 && !row_logit(&B->whole, (size_t)cand, x, bf16, &cand_logit)) return -1;
    }
    /* the kinds that do not decompose: every row exactly */
    float ex_best = -INFINITY;
    int64_t ex_id = -1;
    if (B->exact.rows) {
        if (!qgpu_chunked_matvec_bf16(B->exact.rows, B->exact.n_in, B->exact.width, B->exact.ptr, B->exact.cols,
                                      B->exact.w, B->exact.w8, x, logits))
            return -1;
        if (bf16) qgpu_round_bf16(logits, B->exact.rows);
        for (size_t r = 0; r < B->exact.rows; r++)
            if (logits[r] > ex_best || ex_id < 0) {
                ex_best = logits[r];
                ex_id = B->exact.ids[r];
            }
    }
    int ok = cand >= 0 && (ex_id < 0 || ex_best < cand_logit);
    double thr = ok ? bound_threshold(cand_logit, bf16) : NAN;
    if (ok && bf16 && ex_id >= 0 && !((double)ex_best < thr)) ok = 0;
    for (size_t k = 0; ok && k < K; k++) {
        if (!B->k_decomposed[k]) continue;
        double bound = (k == kbest ? M[k] - gap[k] : M[k]) + err[k];
        if (!(bound < thr)) ok = 0;
    }
    if (ok) {
        *proved = 1;
        return cand;
    }
    return qgpu_head_argmax(&B->whole, x, bf16, logits);
}

void qgpu_circuit_embed(const qgpu_circuit *C, int64_t token, float *h) {
    const uint16_t *row = C->embed + (size_t)token * C->d;
    for (size_t i = 0; i < C->d; i++) h[i] = qgpu_bf16_value(row[i]);
}

void qgpu_circuit_final(const qgpu_circuit *C, const float *h, float *x) {
    qgpu_rmsnorm(h, 1, C->d, C->final_norm, C->eps, 1, x);
    if (C->bf16) qgpu_round_bf16(x, C->d);
}

/* The tokens ids[0..n) through every layer; x = scratch + 2 d gets the last one's final-normed hidden.
 * scratch: 3 d floats. */
void qgpu_circuit_prefill(const qgpu_circuit *C, const qgpu_circuit_state *st, const int64_t *ids, size_t n,
                          float *const *ws, float *scratch) {
    float *h = scratch, *tmp = h + C->d, *x = tmp + C->d;
    for (size_t i = 0; i < n; i++) {
        qgpu_circuit_embed(C, ids[i], h);
        qgpu_circuit_layers(C, st, h, ws, tmp);
    }
    qgpu_circuit_final(C, h, x);
}

/* Floats of logits the decode loop needs (the largest set's rows, and the bounded argmax's whole head). */
size_t qgpu_circuit_logits(const qgpu_circuit *C) {
    size_t n = C->bound ? C->bound->whole.rows : 0;
    for (size_t i = 0; i < C->n_sets; i++)
        if (C->sets[i].rows > n) n = C->sets[i].rows;
    return n + (n & 1); /* even: the doubles after them stay aligned */
}

/* Feed `token` and then each argmax back, until a token whose successor set is -1 (a stop token: HALT, FAULT)
 * or max_tokens tokens: the set for the logits after token t is next_set[t]. Writes the generated ids to out
 * and returns how many. A step whose final hidden holds a non-finite value stops the loop before its head
 * (returns -(n + 1), n tokens generated before it; x, scratch + 2 d, is that step's head input). scratch:
 * 3 d + qgpu_circuit_logits floats, then (with a bound) the bounded argmax's doubles. */
int64_t qgpu_circuit_decode(const qgpu_circuit *C, const qgpu_circuit_state *st, int64_t token, float *const *ws,
                            float *scratch, int64_t *out, size_t max_tokens) {
    float *h = scratch, *tmp = h + C->d, *x = tmp + C->d, *logits = x + C->d;
    double *bound_work = C->bound ? (double *)(void *)(logits + qgpu_circuit_logits(C)) : NULL;
    size_t n = 0;
    while (n < max_tokens) {
        int32_t set = C->next_set[token];
        if (set < 0) break;
        qgpu_circuit_embed(C, token, h);
        qgpu_circuit_layers(C, st, h, ws, tmp);
        qgpu_circuit_final(C, h, x);
        int proved;
        int64_t next = C->bound && set == 0 ? qgpu_head_bound_argmax(C->bound, x, C->bf16, bound_work, logits, &proved)
                                            : qgpu_head_argmax(&C->sets[set], x, C->bf16, logits);
        if (next < 0) return -(int64_t)n - 1;
        out[n++] = next;
        token = next;
    }
    return (int64_t)n;
}
