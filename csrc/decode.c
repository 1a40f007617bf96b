/* One decode step of a layer in one C call for its mixer and one for its MLP, and a whole stack of CSR
 * layers in one call (qgpu_decode_layers): the calls the forward pass makes one by one for a token, in its
 * order, with the same kernels (activations.c's exp, SiLU, sigmoid and l2norm included, the dense products
 * through qgpu_matmul_multi), so the same bits as the unfused path. */
#include <math.h>
#include <string.h>

#include "qgpu_core.h"

/* Workspace of the dense products, in floats, after a step's own scratch (see qgpu_product_scratch_max). */
static size_t product_floats(size_t in) { return (qgpu_product_scratch_max(1, in) + 1) / 2; }

/* y = P_j x for count projections of one input x [in], their outputs one after another in y (outs[j]
 * values each): CSR products one by one, or the dense ones in one dispatch with bf16 mode's flags, as
 * Model._linears calls them. work: product_floats(in) floats. */
static void project(const qgpu_proj *const *ps, const size_t *outs, size_t count, size_t in, const float *x,
                    int bf16, float *y, float *work) {
    if (ps[0]->p) {
        for (size_t j = 0; j < count; y += outs[j], j++)
            qgpu_sparse_matmul(outs[j], in, ps[j]->p, ps[j]->i, ps[j]->v, x, 1, y);
        return;
    }
    qgpu_matrix ms[4];
    for (size_t j = 0; j < count; j++) {
        ms[j] = ps[j]->m;
        ms[j].out = outs[j];
    }
    qgpu_matmul_multi(ms, count, in, x, 1, y, bf16 ? QGPU_BF16_X | QGPU_BF16_Y : 0, (uint16_t *)(void *)work);
}

static void mlp_in(const qgpu_mlp_layer *L, const float *h, int add_zero, float *h_mid, float *u, float *gp,
                   float *work) {
    size_t d = L->d, m = L->m;
    for (size_t i = 0; i < d; i++) h_mid[i] = add_zero ? h[i] + 0.0f : h[i];
    if (add_zero && L->bf16) qgpu_round_bf16(h_mid, d);
    qgpu_rmsnorm(h_mid, 1, d, L->w, L->eps, 1, u);
    if (L->bf16) qgpu_round_bf16(u, d);
    if (!m) return;
    const qgpu_proj *ps[2] = {&L->gate, &L->up};
    size_t outs[2] = {m, m};
    project(ps, outs, 2, d, u, L->bf16, gp, work); /* gp: gate [m], then up [m] */
    if (L->bf16) qgpu_round_bf16(gp, 2 * m);
}

static void mlp_out(const qgpu_mlp_layer *L, const float *h_mid, const float *s, const float *p, float *act,
                    float *y, float *h_out, float *work) {
    size_t d = L->d, m = L->m;
    int bf16 = L->bf16;
    for (size_t i = 0; i < m; i++) act[i] = bf16 ? qgpu_bf16_round(qgpu_bf16_round(s[i]) * p[i]) : s[i] * p[i];
    if (m) {
        const qgpu_proj *ps[1] = {&L->down};
        project(ps, &d, 1, m, act, bf16, y, work);
    } else {
        memset(y, 0, d * sizeof *y); /* no active unit: every CSR row sums nothing, +0 */
    }
    if (bf16) qgpu_round_bf16(y, d);
    for (size_t i = 0; i < d; i++) h_out[i] = bf16 ? qgpu_bf16_round(h_mid[i] + y[i]) : h_mid[i] + y[i];
}

/* A DeltaNet mixer's decode step around the delta rule. First half: u = R(rmsnorm(h, 1 + w)); mixed = R(QKV u),
 * z = R(Z u), b = R(B u), a = R(A u) (written one after another from mixed); conv = R(conv_update(state,
 * mixed)) (the conv state shifted in place): the forward pass's calls in its order. */
static void gdn_in(const qgpu_gdn_layer *L, const float *h, float *conv_state, float *u, float *mixed, float *conv,
                   float *work) {
    size_t d = L->d, nh = L->nv, nz = L->nv * L->dv, c = 2 * L->nk * L->dk + nz;
    qgpu_rmsnorm(h, 1, d, L->in_norm, L->eps, 1, u);
    if (L->bf16) qgpu_round_bf16(u, d);
    const qgpu_proj *ps[4] = {&L->qkv, &L->z, &L->b, &L->a};
    size_t outs[4] = {c, nz, nh, nh};
    project(ps, outs, 4, d, u, L->bf16, mixed, work); /* mixed [c], then z [nz], b [nh], a [nh] */
    if (L->bf16) qgpu_round_bf16(mixed, c + nz + 2 * nh);
    qgpu_conv_update(conv_state, c, L->k, mixed, L->conv_w, conv);
    if (L->bf16) qgpu_round_bf16(conv, c);
}

/* Second half, from the delta rule's output o [nv, dv]: o = R(o); fp32: n = gated_rmsnorm(o, z, w); bf16:
 * n = R(R(w * R(rmsnorm(o, ones))) * silu_z) with silu_z = silu(z); y =
 * R(OUT n) ([d, nv * dv]); h_out = R(h + y). ones [dv] holds 1.0f, tmp [nv * dv] is scratch. */
static void gdn_out(const qgpu_gdn_layer *L, float *o, const float *z, const float *silu_z, const float *ones,
                    float *tmp, const float *h, float *y, float *h_out, float *work) {
    size_t nv = L->nv, dv = L->dv, d = L->d;
    int bf16 = L->bf16;
    const float *w = L->norm_w;
    size_t n = nv * dv;
    if (bf16) {
        qgpu_round_bf16(o, n);
        qgpu_rmsnorm(o, nv, dv, ones, L->eps, 0, tmp);
        for (size_t i = 0; i < n; i++)
            tmp[i] = qgpu_bf16_round(qgpu_bf16_round(w[i % dv] * qgpu_bf16_round(tmp[i])) * silu_z[i]);
    } else {
        qgpu_gated_rmsnorm(o, z, nv, dv, w, L->eps, tmp);
    }
    const qgpu_proj *ps[1] = {&L->out};
    project(ps, &d, 1, n, tmp, bf16, y, work);
    if (bf16) qgpu_round_bf16(y, d);
    for (size_t i = 0; i < d; i++) h_out[i] = bf16 ? qgpu_bf16_round(h[i] + y[i]) : h[i] + y[i];
}

/* The MLP of one token: mlp_in, s = silu(g), mlp_out. scratch holds qgpu_mlp_scratch(d, m) floats. */
size_t qgpu_mlp_scratch(size_t d, size_t m) {
    size_t in = d > m ? d : m;
    return 3 * d + 4 * m + product_floats(in);
}

void qgpu_mlp_step(const qgpu_mlp_layer *L, const float *h, int add_zero, float *scratch, float *h_out) {
    size_t d = L->d, m = L->m;
    float *h_mid = scratch, *u = h_mid + d, *y = u + d, *g = y + d, *p = g + m, *s = p + m, *act = s + m;
    float *work = act + m;
    mlp_in(L, h, add_zero, h_mid, u, g, work);
    qgpu_silu(g, m, s);
    mlp_out(L, h_mid, s, p, act, y, h_out, work);
}

/* A DeltaNet mixer for one token, h -> h_out = R(h + mixer): gdn_in; the delta rule (c = R(silu(conv)),
 * q, k, v its thirds, beta = R(sigmoid(b)), g = deltanet_gate(a), q = l2norm(q) / q_div, k = l2norm(k), each
 * key head repeated for nv / nk value heads, the sparse-key step on S [nv, dk, dv] with its clean flags);
 * gdn_out. scratch holds qgpu_gdn_scratch(...) floats. */
size_t qgpu_gdn_scratch(size_t d, size_t nk, size_t dk, size_t nv, size_t dv) {
    size_t kd = nk * dk, n = nv * dv, c = 2 * kd + n;
    return 2 * d + 3 * c + 4 * nv + 2 * kd + 2 * nv * dk + 4 * n + dv + product_floats(d > n ? d : n);
}

void qgpu_gdn_step(const qgpu_gdn_layer *L, const float *h, float *conv_state, float *S, int32_t *clean,
                   float *scratch, float *h_out) {
    size_t d = L->d, nk = L->nk, dk = L->dk, nv = L->nv, dv = L->dv;
    int bf16 = L->bf16;
    size_t kd = nk * dk, n = nv * dv, c = 2 * kd + n;
    float *u = scratch, *y = u + d, *mixed = y + d, *z = mixed + c, *b = z + n, *a = b + nv, *conv = a + nv;
    float *act = conv + c, *g = act + c, *beta = g + nv, *qn = beta + nv, *kn = qn + kd;
    float *qr = kn + kd, *kr = qr + nv * dk, *o = kr + nv * dk, *silu_z = o + n, *tmp = silu_z + n;
    float *ones = tmp + n, *work = ones + dv;
    for (size_t i = 0; i < dv; i++) ones[i] = 1.0f;
    gdn_in(L, h, conv_state, u, mixed, conv, work);
    qgpu_silu(conv, c, act);
    qgpu_sigmoid(b, nv, beta);
    if (bf16) {
        qgpu_round_bf16(act, c);
        qgpu_round_bf16(beta, nv);
    }
    qgpu_deltanet_gate(a, nv, L->a_log, L->dt_bias, nv, g);
    qgpu_l2norm(act, nk, dk, 1e-6f, L->q_div, qn);
    qgpu_l2norm(act + kd, nk, dk, 1e-6f, 1.0f, kn);
    for (size_t hh = 0; hh < nv; hh++) { /* value head hh reads key head hh / (nv / nk) */
        size_t src = hh / (nv / nk);
        memcpy(qr + hh * dk, qn + src * dk, dk * sizeof *qr);
        memcpy(kr + hh * dk, kn + src * dk, dk * sizeof *kr);
    }
    qgpu_deltanet_step_sparse(S, nv, dk, dv, qr, kr, act + 2 * kd, g, beta, o, clean);
    if (bf16) qgpu_silu(z, n, silu_z);
    gdn_out(L, o, z, silu_z, ones, tmp, h, y, h_out, work);
}

/* One token through n CSR DeltaNet layers, as the forward pass runs them one by one: a layer whose mixer is
 * silent (silent[i]: provably +0 out and a +0 state kept +0) and whose state is still all +0 (zero[i]) skips
 * the mixer and adds its exact +0 in the MLP; any other runs its mixer (zero[i] becomes 0), then its MLP. h
 * [d] in, the last layer's output out. scratch: 2 d + the largest qgpu_gdn_scratch / qgpu_mlp_scratch. */
void qgpu_decode_layers(size_t n, const qgpu_gdn_layer *const *gdn, const qgpu_mlp_layer *const *mlp,
                        const int32_t *silent, int32_t *zero, float *const *conv, float *const *S,
                        int32_t *const *clean, float *h, float *scratch) {
    for (size_t i = 0; i < n; i++) {
        size_t d = mlp[i]->d;
        float *mid = scratch, *out = mid + d, *work = out + d;
        int skip = silent[i] && zero[i];
        if (!skip) {
            zero[i] = 0;
            qgpu_gdn_step(gdn[i], h, conv[i], S[i], clean[i], work, mid);
        }
        qgpu_mlp_step(mlp[i], skip ? h : mid, skip, work, out);
        memcpy(h, out, d * sizeof *h);
    }
}
