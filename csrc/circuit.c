/* The step engine of a circuit-only model (every layer a CSR DeltaNet + CSR MLP, model/step_engine.py): one
 * token through the whole stack, the final norm, the LM head's argmax, and a decode loop that feeds each
 * argmax back, all in C. It computes decode.c's values bit for bit (the
 * per-token path it replaces; tests/test_step_engine.py), doing only the work whose result is not known in
 * advance:
 *
 * - Sparse products run as SELL-8 (sell.c): rows in slices of 8, one lane per row, each lane summing its
 *   row's entries in their CSR order from +0, as sparse.c's rows_span does (mul, then add: -ffp-contract=off),
 *   so the same bits; 8 independent chains instead of one (the CSR loop waits on each add).
 * - Several tokens can go through a layer together (qgpu_circuit_layers_batch: the prompt's tokens on one
 *   state, or several sequences in lockstep): the products then read each weight once for all of them
 *   (qgpu_sell_batch), and everything else runs token by token in order, so each token keeps its bits.
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

static void round_at(float *x, const int32_t *idx, size_t n) {
    for (size_t i = 0; i < n; i++) x[idx[i]] = qgpu_bf16_round(x[idx[i]]);
}

/* ---- the MLP ---------------------------------------------------------------------------------------- */

/* Workspace: h_mid [d], u [d + 1] (u[d] = +0 for the padding), g, p, s, act [m], y [d], and the active
 * units' positions (int32 [m]). */
size_t qgpu_cmlp_ws(const qgpu_cmlp *L) { return 3 * L->d + 1 + 5 * L->m; }

typedef struct {
    float *h_mid, *u, *g, *p, *s, *act, *y;
    int32_t *idx;
} mlp_ws;

static mlp_ws mlp_parts(const qgpu_cmlp *L, float *ws) {
    mlp_ws w;
    w.h_mid = ws;
    w.u = w.h_mid + L->d;
    w.g = w.u + L->d + 1;
    w.p = w.g + L->m;
    w.s = w.p + L->m;
    w.act = w.s + L->m;
    w.y = w.act + L->m;
    w.idx = (int32_t *)(void *)(w.y + L->d);
    return w;
}

/* The MLP in three parts: the input norm (u), the gate and up products (g, p: one token's or a batch's), and
 * from them the down product and the residual. */
static void mlp_in(const qgpu_cmlp *L, const float *h, int add_zero, mlp_ws w) {
    size_t d = L->d;
    for (size_t i = 0; i < d; i++) w.h_mid[i] = add_zero ? h[i] + 0.0f : h[i];
    if (add_zero && L->bf16) qgpu_round_bf16(w.h_mid, d);
    qgpu_rmsnorm(w.h_mid, 1, d, L->w, L->eps, 1, w.u);
    if (L->bf16) qgpu_round_bf16(w.u, d);
    w.u[d] = 0.0f;
}

static void mlp_out(const qgpu_cmlp *L, mlp_ws w, float *h_out) {
    size_t d = L->d, m = L->m;
    int bf16 = L->bf16;
    if (m) {
        if (bf16) {
            qgpu_round_bf16(w.g, m);
            qgpu_round_bf16(w.p, m);
        }
        qgpu_silu(w.g, m, w.s);
        if (bf16)
            for (size_t j = 0; j < m; j++) w.act[j] = qgpu_bf16_round(qgpu_bf16_round(w.s[j]) * w.p[j]);
        else
            for (size_t j = 0; j < m; j++) w.act[j] = w.s[j] * w.p[j];
    }
    qgpu_csc_active(m, d, L->down_ptr, L->down_rows, L->down_vals, w.act, w.y, w.idx);
    if (bf16) {
        qgpu_round_bf16(w.y, d);
        for (size_t i = 0; i < d; i++) h_out[i] = qgpu_bf16_round(w.h_mid[i] + w.y[i]);
    } else {
        for (size_t i = 0; i < d; i++) h_out[i] = w.h_mid[i] + w.y[i];
    }
}

static void cmlp_step(const qgpu_cmlp *L, const float *h, int add_zero, float *ws, float *h_out) {
    mlp_ws w = mlp_parts(L, ws);
    mlp_in(L, h, add_zero, w);
    if (L->m) {
        qgpu_sell_matvec(&L->gate, w.u, w.g);
        qgpu_sell_matvec(&L->up, w.u, w.p);
    }
    mlp_out(L, w, h_out);
}

/* nb <= QGPU_BATCH tokens' MLPs (each its own h, add_zero, workspace and h_out); xt: the transposed inputs'
 * room, (d + 1) QGPU_BATCH floats. */
static void cmlp_batch(const qgpu_cmlp *L, size_t nb, const float *const *h, const int *add_zero, float *const *ws,
                       float *const *h_out, float *xt) {
    mlp_ws w[QGPU_BATCH];
    const float *u[QGPU_BATCH];
    float *g[QGPU_BATCH], *p[QGPU_BATCH];
    for (size_t b = 0; b < nb; b++) {
        w[b] = mlp_parts(L, ws[b]);
        if (b) { /* mlp_out runs token by token: the first token's scratch serves all (as gdn_share) */
            w[b].s = w[0].s;
            w[b].act = w[0].act;
            w[b].y = w[0].y;
            w[b].idx = w[0].idx;
        }
        mlp_in(L, h[b], add_zero[b], w[b]);
        u[b] = w[b].u;
        g[b] = w[b].g;
        p[b] = w[b].p;
    }
    if (L->m) {
        qgpu_transpose_batch(u, nb, L->u_cols, L->n_u_cols, L->d, xt);
        qgpu_sell_batch(&L->gate, xt, nb, g);
        qgpu_sell_batch(&L->up, xt, nb, p);
    }
    for (size_t b = 0; b < nb; b++) mlp_out(L, w[b], h_out[b]);
}

/* ---- the DeltaNet mixer ----------------------------------------------------------------------------- */

/* Workspace (floats): mixed [c + 1], conv [c], act [c], qn, kn [kd], qr, kr [nv dk], z [n], b, a, beta, g
 * [nv], o [n], tmp [n], silu_z [n], y [d], u [d + 1], then idle (int32 [nv]). The idle channels' entries of
 * mixed, conv, act, qn, kn, z and y are set once (qgpu_cgdn_ws_init) and never written again. */
typedef struct {
    float *mixed, *conv, *act, *qn, *kn, *qr, *kr, *z, *b, *a, *beta, *g, *o, *tmp, *silu_z, *y, *u;
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
    w.idle = (int32_t *)(void *)(w.u + L->d + 1);
    return w;
}

/* In a batch the token-by-token middle runs for one token after another, so every token but the first uses
 * the first one's scratch for it (and its idle constants, the same in every workspace of a layer): only the
 * parts a batched product writes or reads (u, mixed, z, b, a, tmp, y) are the token's own, which keeps the
 * batch's cache footprint near one token's. */
static void gdn_share(gdn_ws *w, const gdn_ws *first) {
    w->conv = first->conv;
    w->act = first->act;
    w->qn = first->qn;
    w->kn = first->kn;
    w->qr = first->qr;
    w->kr = first->kr;
    w->beta = first->beta;
    w->g = first->g;
    w->o = first->o;
    w->silu_z = first->silu_z;
    w->idle = first->idle;
}

size_t qgpu_cgdn_ws(const qgpu_cgdn *L) {
    size_t c = 2 * L->nk * L->dk + L->nv * L->dv, kd = L->nk * L->dk, n = L->nv * L->dv;
    return (c + 1) + 2 * c + 2 * kd + 2 * L->nv * L->dk + n + 4 * L->nv + 4 * n + 2 * (L->d + 1) + L->nv;
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
 * projection and conv state (the same kernels, on zeros). ws arrives zeroed (calloc'd: the pages no token
 * touches never become resident, which matters for the batched calls' several workspaces). Returns 0 when
 * out of memory. */
int qgpu_cgdn_ws_init(const qgpu_cgdn *L, float *ws) {
    size_t c = 2 * L->nk * L->dk + L->nv * L->dv, kd = L->nk * L->dk, k = L->k;
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

/* The mixer in three parts, as the MLP's: the input norm (u); from the four input products (mixed, z, b, a)
 * the conv, the gates, the delta rule on this token's state and the gated norm (tmp); from the output product
 * (y) the residual. */
static void gdn_in(const qgpu_cgdn *L, const float *h, gdn_ws w) {
    qgpu_rmsnorm(h, 1, L->d, L->in_norm, L->eps, 1, w.u);
    if (L->bf16) qgpu_round_bf16(w.u, L->d);
    w.u[L->d] = 0.0f;
}

static void gdn_mid(const qgpu_cgdn *L, float *conv_state, float *S, int32_t *clean, gdn_ws w) {
    size_t nk = L->nk, dk = L->dk, nv = L->nv, dv = L->dv;
    size_t kd = nk * dk;
    int bf16 = L->bf16;
    if (bf16) {
        /* z over each value head out_proj reads: its rows outside z_rows hold +0, which rounds to +0 */
        for (size_t i = 0; i < L->n_read; i++) qgpu_round_bf16(w.z + (size_t)L->read_heads[i] * dv, dv);
        qgpu_round_bf16(w.b, nv);
        qgpu_round_bf16(w.a, nv);
    }
    for (size_t r = 0; r < L->n_runs; r++) { /* the conv and SiLU kernels on each run of active channels */
        size_t c0 = (size_t)L->runs[2 * r], len = (size_t)L->runs[2 * r + 1] - c0;
        if (bf16) qgpu_round_bf16(w.mixed + c0, len); /* the runs are the active channels */
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
}

static void gdn_out(const qgpu_cgdn *L, const float *h, gdn_ws w, float *h_out) {
    if (L->bf16) {
        round_at(w.y, L->out_rows, L->n_out_rows);
        for (size_t i = 0; i < L->d; i++) h_out[i] = qgpu_bf16_round(h[i] + w.y[i]);
    } else {
        for (size_t i = 0; i < L->d; i++) h_out[i] = h[i] + w.y[i];
    }
}

static void cgdn_step(const qgpu_cgdn *L, const float *h, float *conv_state, float *S, int32_t *clean, float *ws,
                      float *h_out) {
    gdn_ws w = gdn_parts(L, ws);
    gdn_in(L, h, w);
    qgpu_sell_matvec(&L->qkv, w.u, w.mixed);
    qgpu_sell_matvec(&L->z, w.u, w.z);
    qgpu_sell_matvec(&L->b, w.u, w.b);
    qgpu_sell_matvec(&L->a, w.u, w.a);
    gdn_mid(L, conv_state, S, clean, w);
    qgpu_sell_matvec(&L->out, w.tmp, w.y);
    gdn_out(L, h, w, h_out);
}

/* nb <= QGPU_BATCH tokens' mixers: token b on the state (conv[b], S[b], clean[b]), in the order b = 0, 1, ...
 * (tokens of one sequence may share a state: each then sees the one before it); xt: (max(d, nv dv) + 1)
 * QGPU_BATCH floats. */
static void cgdn_batch(const qgpu_cgdn *L, size_t nb, const float *const *h, float *const *conv, float *const *S,
                       int32_t *const *clean, float *const *ws, float *const *h_out, float *xt) {
    gdn_ws w[QGPU_BATCH];
    const float *in[QGPU_BATCH];
    float *mixed[QGPU_BATCH], *z[QGPU_BATCH], *bb[QGPU_BATCH], *a[QGPU_BATCH], *y[QGPU_BATCH];
    for (size_t b = 0; b < nb; b++) {
        w[b] = gdn_parts(L, ws[b]);
        if (b) gdn_share(&w[b], &w[0]);
        gdn_in(L, h[b], w[b]);
        in[b] = w[b].u;
        mixed[b] = w[b].mixed;
        z[b] = w[b].z;
        bb[b] = w[b].b;
        a[b] = w[b].a;
        y[b] = w[b].y;
    }
    qgpu_transpose_batch(in, nb, L->u_cols, L->n_u_cols, L->d, xt);
    qgpu_sell_batch(&L->qkv, xt, nb, mixed);
    qgpu_sell_batch(&L->z, xt, nb, z);
    qgpu_sell_batch(&L->b, xt, nb, bb);
    qgpu_sell_batch(&L->a, xt, nb, a);
    for (size_t b = 0; b < nb; b++) {
        gdn_mid(L, conv[b], S[b], clean[b], w[b]);
        in[b] = w[b].tmp;
    }
    qgpu_transpose_batch(in, nb, L->t_cols, L->n_t_cols, L->nv * L->dv, xt);
    qgpu_sell_batch(&L->out, xt, nb, y);
    for (size_t b = 0; b < nb; b++) gdn_out(L, h[b], w[b], h_out[b]);
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

void qgpu_circuit_layers_batch(const qgpu_circuit *C, const qgpu_circuit_state *const *st, size_t nb,
                               float *const *h, float *const *const *ws, float *const *tmp, float *xt) {
    for (size_t i = 0; i < C->n; i++) {
        int skip[QGPU_BATCH];
        const float *rh[QGPU_BATCH], *mh[QGPU_BATCH];
        float *rconv[QGPU_BATCH], *rS[QGPU_BATCH], *rws[QGPU_BATCH], *rtmp[QGPU_BATCH], *mws[QGPU_BATCH];
        int32_t *rclean[QGPU_BATCH];
        size_t nr = 0;
        for (size_t b = 0; b < nb; b++) skip[b] = C->silent[i] && st[b]->zero[i]; /* all before any is cleared */
        for (size_t b = 0; b < nb; b++) {
            mh[b] = skip[b] ? h[b] : tmp[b];
            mws[b] = ws[b][2 * i + 1];
            if (skip[b]) continue;
            st[b]->zero[i] = 0;
            rh[nr] = h[b];
            rconv[nr] = st[b]->conv[i];
            rS[nr] = st[b]->S[i];
            rclean[nr] = st[b]->clean[i];
            rws[nr] = ws[b][2 * i];
            rtmp[nr] = tmp[b];
            nr++;
        }
        if (nr) cgdn_batch(C->gdn[i], nr, rh, rconv, rS, rclean, rws, rtmp, xt);
        cmlp_batch(C->mlp[i], nb, mh, skip, mws, h, xt);
    }
}

size_t qgpu_circuit_xt(const qgpu_circuit *C) {
    size_t n = C->d;
    for (size_t i = 0; i < C->n; i++)
        if (C->gdn[i]->nv * C->gdn[i]->dv > n) n = C->gdn[i]->nv * C->gdn[i]->dv;
    return (n + 1) * QGPU_BATCH;
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

size_t qgpu_head_bound_work(const qgpu_head_bound *B) { /* xu [U], M, err, gap [K], fv [K, 16] */
    return B->n_cols + (3 + BOUND_MAX_FIELDS) * B->n_kinds + 1;
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

void qgpu_circuit_prefill_batch(const qgpu_circuit *C, const qgpu_circuit_state *st, const int64_t *ids, size_t n,
                                float *const *const *ws, size_t lanes, float *scratch) {
    size_t d = C->d;
    float *h[QGPU_BATCH], *tmp[QGPU_BATCH];
    const qgpu_circuit_state *sts[QGPU_BATCH];
    if (lanes > QGPU_BATCH) lanes = QGPU_BATCH;
    float *x = scratch + 2 * lanes * d, *xt = x + d;
    for (size_t b = 0; b < lanes; b++) {
        h[b] = scratch + b * d;
        tmp[b] = scratch + (lanes + b) * d;
        sts[b] = st;
    }
    size_t last = 0;
    for (size_t i = 0; i < n; i += lanes) {
        size_t nb = n - i < lanes ? n - i : lanes;
        for (size_t b = 0; b < nb; b++) qgpu_circuit_embed(C, ids[i + b], h[b]);
        qgpu_circuit_layers_batch(C, sts, nb, h, ws, tmp, xt);
        last = nb - 1;
    }
    if (n) qgpu_circuit_final(C, h[last], x);
}

/* The argmax of set `set` after a step whose final hidden is x: the whole head's through the factor tables
 * (set 0 with a bound), else the set's rows; -1 for a non-finite x. */
static int64_t head_next(const qgpu_circuit *C, int32_t set, const float *x, double *bound_work, float *logits) {
    int proved;
    return C->bound && set == 0 ? qgpu_head_bound_argmax(C->bound, x, C->bf16, bound_work, logits, &proved)
                                : qgpu_head_argmax(&C->sets[set], x, C->bf16, logits);
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
        int64_t next = head_next(C, set, x, bound_work, logits);
        if (next < 0) return -(int64_t)n - 1;
        out[n++] = next;
        token = next;
    }
    return (int64_t)n;
}

size_t qgpu_circuit_decode_batch_scratch(const qgpu_circuit *C) {
    size_t n = 3 * QGPU_BATCH * C->d + qgpu_circuit_xt(C) + qgpu_circuit_logits(C);
    if (C->bound) n += 2 * qgpu_head_bound_work(C->bound) + 1; /* doubles, after an even count of floats */
    return n;
}

int64_t qgpu_circuit_decode_batch(const qgpu_circuit *C, const qgpu_circuit_state *const *st, size_t nb,
                                  const int64_t *token, float *const *const *ws, float *scratch, int64_t *const *out,
                                  const int64_t *max_tokens, int64_t *count) {
    size_t d = C->d;
    float *h[QGPU_BATCH], *tmp[QGPU_BATCH], *x[QGPU_BATCH];
    float *xt = scratch + 3 * QGPU_BATCH * d, *logits = xt + qgpu_circuit_xt(C);
    double *bound_work = C->bound ? (double *)(void *)(logits + qgpu_circuit_logits(C)) : NULL;
    int64_t tok[QGPU_BATCH];
    size_t lane[QGPU_BATCH], na = 0;
    if (nb > QGPU_BATCH) return -1;
    for (size_t b = 0; b < nb; b++) {
        h[b] = scratch + b * d;
        tmp[b] = scratch + (QGPU_BATCH + b) * d;
        x[b] = scratch + (2 * QGPU_BATCH + b) * d;
        count[b] = 0;
        tok[b] = token[b];
        lane[na++] = b;
    }
    int64_t steps = 0;
    while (na) {
        size_t k = 0; /* the sequences that go on: below their limit, after a token that is not a stop token */
        for (size_t i = 0; i < na; i++)
            if (count[lane[i]] < max_tokens[lane[i]] && C->next_set[tok[lane[i]]] >= 0) lane[k++] = lane[i];
        na = k;
        if (!na) break;
        const qgpu_circuit_state *s[QGPU_BATCH];
        float *hh[QGPU_BATCH], *tt[QGPU_BATCH];
        for (size_t i = 0; i < na; i++) {
            size_t b = lane[i];
            qgpu_circuit_embed(C, tok[b], h[b]);
            s[i] = st[b];
            hh[i] = h[b];
            tt[i] = tmp[b];
        }
        qgpu_circuit_layers_batch(C, s, na, hh, ws, tt, xt);
        steps++;
        k = 0;
        for (size_t i = 0; i < na; i++) {
            size_t b = lane[i];
            int32_t set = C->next_set[tok[b]];
            qgpu_circuit_final(C, h[b], x[b]);
            int64_t next = head_next(C, set, x[b], bound_work, logits);
            if (next < 0) { /* a non-finite hidden: this sequence stops here, its x kept for the caller */
                count[b] = -count[b] - 1;
                continue;
            }
            out[b][count[b]++] = next;
            tok[b] = next;
            lane[k++] = b;
        }
        na = k;
    }
    return steps;
}
