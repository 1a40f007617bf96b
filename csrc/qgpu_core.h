/* The C core of qgpu-min: bf16- and int8-weight x fp32-activation products, the Gated DeltaNet step, the causal
 * conv update and the norms. Every kernel has a NumPy twin in qgpu_min/model/kernels_ref.py; the Python
 * wrappers in qgpu_min/model/kernels.py validate shapes, dtypes and layout before calling in here, so the
 * C side trusts its arguments. Matrices are row-major and contiguous; bf16 values are uint16 bit patterns.
 */
#ifndef QGPU_CORE_H
#define QGPU_CORE_H
#include <stdint.h>
#include <stddef.h>

/* CDEF BEGIN */
enum { QGPU_MAX_DV = 4096, QGPU_MAX_MULTI = 16 };

/* Threads used by the parallel kernels: QGPU_THREADS from the environment, else the online CPUs (read at
 * first use). qgpu_set_threads(n) overrides it (n <= 0 goes back to that default). */
int qgpu_get_threads(void);
void qgpu_set_threads(int n);

/* SIMD level of the dense products: 0 generic C, 1 AVX2+FMA, 2 AVX-512, 3 amx (AVX-512, and AMX-BF16 tiles
 * for the products of bf16 activations, QGPU_BF16_X below). The best the CPU supports is chosen at first
 * use; qgpu_set_isa asks for a level and returns the one in force (never above the CPU's). */
int qgpu_get_isa(void);
int qgpu_set_isa(int level);
int qgpu_best_isa(void);

/* The Q8 form of a bf16 matrix w [out, in] (in a multiple of 32), as kernels_ref.quantize_q8 makes it;
 * a block holding a non-finite weight gets a NaN scale. */
void qgpu_quantize_q8(const uint16_t *w, size_t out, size_t in, int8_t *q, float *scales);
/* One operand of qgpu_matmul_multi: bf16 bits w [out, in], or (w NULL) a Q8 matrix: int8 weights q [out, in]
 * with one fp32 scale per block of 32 columns, scales [out, in / 32] (`in` a multiple of 32; W[r, k] =
 * q[r, k] * scales[r, k / 32]). */
typedef struct {
    const uint16_t *w;
    const int8_t *q;
    const float *scales;
    size_t out;
} qgpu_matrix;
/* The dense products: Y_j[n, ws[j].out] = X[n, in] . W_j^T for j < count <= QGPU_MAX_MULTI, fp32
 * accumulation, in one parallel dispatch; the Y_j lie one after another in y, each bit-identical to its own
 * one-matrix call, and a token's row the same bits for any n (matvec is n = 1). Flags, for bf16 mode:
 * QGPU_BF16_X, X holds bf16 values only (returns 0, computing nothing, when one is not); at the amx level
 * the bf16 matrices then run on AMX tiles (amx.c; Q8 matrices as without the flag), other levels compute as
 * without it. QGPU_BF16_Y: the results are rounded to bf16 (bf16.round_bf16) by the threads that wrote them.
 * QGPU_PROMPT: X holds the tokens of one prompt, whose rows need not equal a matvec's: at the amx level, fp32
 * X (no QGPU_BF16_X) is then split into three bf16 parts (x = hi + mid + lo exactly) multiplied on AMX tiles;
 * a token's row is then the same bits in any QGPU_PROMPT call (n = 1 included), within fp32 summation error
 * of the others'. Other levels compute as without it.
 * scratch: qgpu_product_scratch(n, in, flags) uint16s of workspace (X repacked for the SIMD level's tiles;
 * NULL when that is 0). Returns 1 when computed. */
enum { QGPU_BF16_X = 1, QGPU_BF16_Y = 2, QGPU_PROMPT = 4 };
size_t qgpu_product_scratch(size_t n, size_t in, int flags);
/* The most qgpu_product_scratch asks for at any SIMD level and flags (for workspace sized once). */
size_t qgpu_product_scratch_max(size_t n, size_t in);
int qgpu_matmul_multi(const qgpu_matrix *ws, size_t count, size_t in, const float *x, size_t n, float *y,
                      int flags, uint16_t *scratch);

/* out [rows, cols] (zeros) gets the bf16 bits of a CSR matrix whose f32 values are bf16 values. */
void qgpu_csr_bf16_bits(size_t rows, size_t cols, const int64_t *indptr, const int32_t *indices, const float *values,
                        uint16_t *out);
/* Y[n, out] = X[n, in] . W^T for a CSR bf16 matrix W [out, in]: row r has values[indptr[r] ..
 * indptr[r+1]) at columns indices[same]. matvec is n = 1. */
void qgpu_sparse_matmul(size_t out, size_t in, const int64_t *indptr, const int32_t *indices,
                        const uint16_t *values, const float *x, size_t n, float *y);

/* rows x d: y = x * rsqrt(mean(x^2) + eps) * (plus_one ? 1 + w : w) */
void qgpu_rmsnorm(const float *x, size_t rows, size_t d, const float *w, float eps, int plus_one, float *y);
/* rows x d: y = rmsnorm(x) * w * silu(z)  (plain w) */
void qgpu_gated_rmsnorm(const float *x, const float *z, size_t rows, size_t d, const float *w, float eps,
                        float *y);

/* Causal depthwise conv, one token: state [c, k-1] (shifted in place), x [c], w [c, k] -> y [c] pre-SiLU */
void qgpu_conv_update(float *state, size_t c, size_t k, const float *x, const float *w, float *y);

/* Gated delta rule, one token, h heads (dv <= QGPU_MAX_DV): S [h, dk, dv] updated in place; q, k [h, dk]; v [h, dv];
 * g, beta [h] -> o [h, dv]. Per head: S *= exp(g); kv = S^T k; S += k (x) (v - kv) beta; o = S^T q. */
void qgpu_deltanet_step(float *s, size_t h, size_t dk, size_t dv, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, float *o);

/* Prefill: t tokens in order, bit-identical to t single-token calls. conv: x, y [t, c]. deltanet: q, k
 * [t, h, dk]; v [t, h, dv]; g, beta [t, h] -> o [t, h, dv], each token through deltanet_step_sparse's
 * paths, with its clean flags [h] (in: 1 = known clean; out: a scan of the final state). */
void qgpu_conv_prefill(float *state, size_t c, size_t k, size_t t, const float *x, const float *w, float *y);
void qgpu_deltanet_prefill(float *s, size_t h, size_t dk, size_t dv, size_t t, const float *q, const float *k,
                           const float *v, const float *g, const float *beta, float *o, int32_t *clean);
/* deltanet_step for one token, bit for bit, touching only the state rows of nonzero keys (and reading
 * only the rows of nonzero queries) in heads whose decay exp(g) is exactly 1 and whose state is clean:
 * clean [h] in/out, 1 = that head's S is known finite with no -0 (else it is scanned when it matters).
 * Other heads run the dense step. On return clean[h] says whether S[h] is clean now (a scan's answer). */
void qgpu_deltanet_step_sparse(float *s, size_t h, size_t dk, size_t dv, const float *q, const float *k,
                               const float *v, const float *g, const float *beta, float *o, int32_t *clean);
/* Columns per chunk of the dense products' accumulation at a SIMD level (32 AVX-512 and amx: 16 even then
 * 16 odd columns into 16 lanes; 8 otherwise, one per lane). */
int qgpu_isa_chunk(int level);
/* y = W x for W stored as its nonzero chunks of `width` columns: row r's chunks are ptr[r] .. ptr[r+1],
 * chunk c starts at column cols[c], its weights w[c * width ..] in column order (zero-padded past `in`).
 * Bit-identical to qgpu_matmul_multi of the dense W (n = 1, no flags) at the current SIMD level. w8, when not
 * NULL, holds the same weights as int8 (every weight an integer in [-128, 127], none -0) and is read instead:
 * the same values, half the bytes. Returns 0 without computing when `width` is not that level's chunk
 * (qgpu_isa_chunk) or x holds a non-finite value (the dense product is then the one to run), else 1. */
int qgpu_chunked_matvec_bf16(size_t out, size_t in, size_t width, const int64_t *ptr, const int32_t *cols,
                             const uint16_t *w, const int8_t *w8, const float *x, float *y);
/* In place: x = round_bf16(x), as bf16.round_bf16 does (qgpu_bf16_round below, vectorized). */
void qgpu_round_bf16(float *x, size_t n);
/* Elementwise, n floats (activations.c): the core's own exp (the same bits on every platform), SiLU x / (1 +
 * exp(-x)), sigmoid 1 / (1 + exp(-x)). */
void qgpu_exp(const float *x, size_t n, float *y);
void qgpu_silu(const float *x, size_t n, float *y);
/* qgpu_silu's reference: the formula on every value, where qgpu_silu skips the exp for values whose SiLU is
 * known (the same bits). */
void qgpu_silu_formula(const float *x, size_t n, float *y);
void qgpu_sigmoid(const float *x, size_t n, float *y);
/* rows x d: y = (x * (1 / sqrt(sum(x^2) + eps))) / divisor */
void qgpu_l2norm(const float *x, size_t rows, size_t d, float eps, float divisor, float *y);
/* The DeltaNet decay gate for n values of a (head i % heads): g = -exp(A_log) * softplus(a + dt_bias) */
void qgpu_deltanet_gate(const float *a, size_t n, const float *a_log, const float *dt_bias, size_t heads,
                        float *g);
/* One token through a layer in one C call (decode.c): the MLP, h -> h_out (h_mid = R(h + 0) when add_zero: a
 * silent mixer's exact output), and the DeltaNet mixer, h -> h_out, its conv state, S and clean flags
 * updated. R = round_bf16 in bf16 mode. A layer's weights and sizes are described once (the structs);
 * scratch: qgpu_mlp_scratch / qgpu_gdn_scratch floats. A projection is CSR (a circuit layer's: p, i, v) or,
 * with p NULL, the dense matrix m (bf16 or Q8, a model's own layer), multiplied by qgpu_matmul_multi with
 * bf16 mode's flags, as the forward pass multiplies it; the projections of one input are all of one kind. */
typedef struct {
    const int64_t *p; const int32_t *i; const uint16_t *v;   /* CSR [out, in], or p NULL */
    qgpu_matrix m;                                          /* dense, when p is NULL */
} qgpu_proj;
typedef struct {
    size_t d, m;           /* hidden size, units (a CSR MLP's active units, else the intermediate size) */
    const float *w;        /* post-attention norm weight [d] (1 + w) */
    float eps;
    int bf16;
    qgpu_proj gate, up;    /* [m, d] */
    qgpu_proj down;        /* [d, m] */
} qgpu_mlp_layer;
typedef struct {
    size_t d, nk, dk, nv, dv, k;   /* hidden, key heads and dim, value heads and dim, conv taps */
    const float *in_norm;          /* [d] (1 + w) */
    float eps;
    int bf16;
    qgpu_proj qkv, z, b, a;        /* in_proj_qkv [2 nk dk + nv dv, d], in_proj_z [nv dv, d], in_proj_b/a [nv, d] */
    const float *conv_w;           /* [2 nk dk + nv dv, k] */
    const float *a_log, *dt_bias;  /* [nv] */
    float q_div;                   /* sqrt(dk) as float */
    const float *norm_w;           /* gated norm [dv] */
    qgpu_proj out;                 /* out_proj [d, nv dv] */
} qgpu_gdn_layer;
size_t qgpu_mlp_scratch(size_t d, size_t m);
size_t qgpu_gdn_scratch(size_t d, size_t nk, size_t dk, size_t nv, size_t dv);
void qgpu_mlp_step(const qgpu_mlp_layer *layer, const float *h, int add_zero, float *scratch, float *h_out);
void qgpu_gdn_step(const qgpu_gdn_layer *layer, const float *h, float *conv_state, float *S, int32_t *clean,
                   float *scratch, float *h_out);
/* n CSR DeltaNet layers for one token, h [d] in place (decode.c). */
void qgpu_decode_layers(size_t n, const qgpu_gdn_layer *const *gdn, const qgpu_mlp_layer *const *mlp,
                        const int32_t *silent, int32_t *zero, float *const *conv, float *const *S,
                        int32_t *const *clean, float *h, float *scratch);
/* The step engine of a circuit-only model (circuit.c; model/step_engine.py): a whole stack of CSR DeltaNet
 * layers, the final norm and the LM head over the rows a protocol allows, bit for bit what the per-token
 * path (qgpu_decode_layers, the head's chunked product) computes, doing only the work whose result is not
 * known in advance. A sparse matrix in slices of QGPU_SELL_LANES rows (SELL): slice s's entries are steps
 * start[s] .. start[s+1], each step one entry per lane (cols, vals: [LANES * steps], 16-bit columns and
 * bf16 weights), padding at column `in` with weight +0; lane r of slice s is output row dest[LANES s + r]
 * (-1: none); contig[s] = 1 when those rows are dest[LANES s] + 0, 1, ... (stored at once). y[dest] = the
 * lane's sum in step order from +0; rows of y no lane names are left as they are. */
enum { QGPU_SELL_LANES = 8, QGPU_BATCH = 8 };
typedef struct {
    size_t slices;
    const int32_t *start;
    const uint16_t *cols;   /* columns < 65536 */
    const uint16_t *vals;   /* bf16 bits */
    const int32_t *dest;
    const uint8_t *contig;
} qgpu_sell;
void qgpu_sell_matvec(const qgpu_sell *a, const float *x, float *y);
/* The same product for nb <= QGPU_BATCH inputs at once (sell.c): xt [(in + 1) * QGPU_BATCH] holds them
 * transposed (qgpu_transpose_batch: xt[c * QGPU_BATCH + b] = x[b][c] for the columns c the matrix reads,
 * +0 for b >= nb and in the padding row `pad`; the other rows are not read); y[b][dest] gets what
 * qgpu_sell_matvec gives input b, bit for bit. */
void qgpu_sell_batch(const qgpu_sell *a, const float *xt, size_t nb, float *const *y);
void qgpu_transpose_batch(const float *const *x, size_t nb, const int32_t *cols, size_t n_cols, size_t pad,
                          float *xt);
/* y [d] = sum over the columns j of a CSC matrix [d, m] (ptr [m + 1], rows, vals) with act[j] not +-0, in
 * increasing j, from +0 (an empty row's CSR sum); idx: int32 [m] of workspace. */
void qgpu_csc_active(size_t m, size_t d, const int64_t *ptr, const int32_t *rows, const float *vals,
                     const float *act, float *y, int32_t *idx);
/* A CSR MLP (its active units, SparseMlp): gate, up [m, d] as SELL (x = u [d + 1], u[d] = +0), down [d, m]
 * by column. */
typedef struct {
    size_t d, m;
    const float *w;
    float eps;
    int bf16;
    qgpu_sell gate, up;
    const int64_t *down_ptr;
    const int32_t *down_rows;
    const float *down_vals;
    size_t n_u_cols;
    const int32_t *u_cols;  /* the columns of u that gate or up reads, ascending */
} qgpu_cmlp;
/* A CSR DeltaNet mixer: qkv over its active channels (the nonzero rows, ascending; SELL dest = channel;
 * runs: the runs of consecutive active channels as [start, end) pairs, where the conv and SiLU run), z
 * over z_rows (the nonzero rows of the value heads out_proj reads), b and a [nv], out over out_rows (its
 * nonzero rows); qk_heads: the query heads (0 .. nk-1) and key heads (nk + i) with an active channel;
 * read_heads: the value heads whose out_proj columns hold a nonzero. */
typedef struct {
    size_t d, nk, dk, nv, dv, k;
    const float *in_norm;
    float eps;
    int bf16;
    qgpu_sell qkv, z, b, a, out;
    size_t n_active, n_runs, n_qk_heads, n_read, n_out_rows;
    const int32_t *active, *runs, *qk_heads, *read_heads, *out_rows;
    const float *conv_w, *a_log, *dt_bias;
    float q_div;
    const float *norm_w;
    size_t n_u_cols, n_t_cols;
    const int32_t *u_cols, *t_cols;  /* the columns of u that qkv, z, b or a reads; of the gated norm's out */
} qgpu_cgdn;
/* Workspace floats of a layer's MLP / mixer; a mixer's workspace holds its idle channels' constants, set by
 * qgpu_cgdn_ws_init on zeroed memory (0: out of memory); qgpu_cgdn_state_ok: a conv state is +0 on every
 * idle channel. */
size_t qgpu_cmlp_ws(const qgpu_cmlp *layer);
size_t qgpu_cgdn_ws(const qgpu_cgdn *layer);
int qgpu_cgdn_ws_init(const qgpu_cgdn *layer, float *ws);
int qgpu_cgdn_state_ok(const qgpu_cgdn *layer, const float *conv_state);
/* The LM head's rows for one set of tokens, as ChunkedBF16 (qgpu_chunked_matvec_bf16's arguments), and their
 * token ids, ascending. */
typedef struct {
    size_t rows, n_in, width;
    const int64_t *ptr;
    const int32_t *cols;
    const uint16_t *w;
    const int8_t *w8;
    const int64_t *ids;
} qgpu_head_set;
/* The head's tables for an exact argmax without every logit (model/head_bound.py states the method): U used
 * columns, K kinds, F factors. A factor of kind f_kind[i] takes f_n[i] values (vals from f_vals[i]) and owns
 * f_m[i] columns (positions into cols, from f_cols[i]) with weights w from f_w[i] ([f_n, f_m], row-major);
 * its value is field f_field[i]'s whole value (f_bit -1) or that bit of it. A decomposed kind's token id is
 * lookup[k_lookup[k] + sum field value * stride] (strides: the fields' domains k_radix from k_radix_at[k],
 * k_nfields[k] of them), -1 for none; a kind with k_decomposed 0 is in the `exact` set. whole: every row. */
typedef struct {
    size_t n_cols, n_kinds, n_factors;
    const int32_t *cols;
    const double *base, *absmax, *rel;    /* [K, U], [K, U], [K] */
    const int32_t *f_kind, *f_field, *f_bit, *f_n, *f_m;
    const int64_t *f_vals, *f_cols, *f_w;
    const int64_t *vals;
    const int32_t *fcols;
    const double *w;
    const int32_t *k_decomposed, *k_nfields;
    const int64_t *k_radix_at, *k_radix, *k_lookup;
    const int64_t *lookup;
    qgpu_head_set whole, exact;
} qgpu_head_bound;
/* The first maximum of the whole head's logits for x (each logit its chunked bits; bf16: rounded), from the
 * tables where they prove it, else from every row. work: qgpu_head_bound_work doubles; logits: V floats. Returns
 * the token id, or -1 when x holds a non-finite value (the dense product is the caller's). *proved: 1 when
 * the tables decided. */
size_t qgpu_head_bound_work(const qgpu_head_bound *b);
int64_t qgpu_head_bound_argmax(const qgpu_head_bound *b, const float *x, int bf16, double *work, float *logits,
                               int *proved);
typedef struct {
    size_t n, d;
    const qgpu_cgdn *const *gdn;
    const qgpu_cmlp *const *mlp;
    const int32_t *silent;
    const uint16_t *embed;      /* [V, d] bf16 bits */
    const float *final_norm;
    float eps;
    int bf16;
    size_t n_sets;
    const qgpu_head_set *sets;
    const int32_t *next_set;    /* [V]: the set of the logits after each token, -1 after a stop token */
    const qgpu_head_bound *bound;   /* when not NULL, set 0 is the whole head and its argmax comes from here */
} qgpu_circuit;
/* One state's arrays: zero [n] (1 = layer still all +0; updated), conv [n][c, k-1], S, clean [n][nv]. */
typedef struct {
    int32_t *zero;
    float *const *conv;
    float *const *S;
    int32_t *const *clean;
} qgpu_circuit_state;
/* h [d] through every layer in place (ws[2 i], ws[2 i + 1]: layer i's mixer and MLP workspaces; tmp [d]). */
void qgpu_circuit_layers(const qgpu_circuit *c, const qgpu_circuit_state *st, float *h, float *const *ws,
                         float *tmp);
void qgpu_circuit_embed(const qgpu_circuit *c, int64_t token, float *h);
void qgpu_circuit_final(const qgpu_circuit *c, const float *h, float *x);
int64_t qgpu_head_argmax(const qgpu_head_set *set, const float *x, int bf16, float *logits);
void qgpu_circuit_prefill(const qgpu_circuit *c, const qgpu_circuit_state *st, const int64_t *ids, size_t n,
                          float *const *ws, float *scratch);
size_t qgpu_circuit_logits(const qgpu_circuit *c);
/* qgpu_circuit_decode for nb <= QGPU_BATCH sequences in lockstep, each on its own state st[b] from token[b]:
 * every step takes the sequences still going through the layers together (qgpu_circuit_layers_batch), so
 * sequence b's ids out[b] and count[b] are what qgpu_circuit_decode would write and return for it alone
 * (max_tokens[b] its limit; a non-finite hidden: count[b] = -(n + 1), that step's x at scratch + (2 QGPU_BATCH
 * + b) d). ws[0 .. nb): workspaces; scratch: qgpu_circuit_decode_batch_scratch floats. Returns the steps
 * taken (-1: nb too large). */
size_t qgpu_circuit_decode_batch_scratch(const qgpu_circuit *c);
int64_t qgpu_circuit_decode_batch(const qgpu_circuit *c, const qgpu_circuit_state *const *st, size_t nb,
                                  const int64_t *token, float *const *const *ws, float *scratch, int64_t *const *out,
                                  const int64_t *max_tokens, int64_t *count);
/* nb <= QGPU_BATCH tokens through every layer at once, each its own hidden h[b] (in place) on its own state
 * st[b]; tokens of one sequence may share a state (they run in the order b = 0, 1, ...). ws[b]: token b's
 * per-layer workspaces (as qgpu_circuit_layers'), tmp[b] [d]; xt: qgpu_circuit_xt floats. Each token's
 * values are qgpu_circuit_layers' bits. */
void qgpu_circuit_layers_batch(const qgpu_circuit *c, const qgpu_circuit_state *const *st, size_t nb,
                               float *const *h, float *const *const *ws, float *const *tmp, float *xt);
size_t qgpu_circuit_xt(const qgpu_circuit *c);
/* qgpu_circuit_prefill with `lanes` (<= QGPU_BATCH) tokens a batch, ws[0 .. lanes) workspaces; x = scratch +
 * 2 lanes d gets the last token's final-normed hidden. scratch: (2 lanes + 1) d + qgpu_circuit_xt floats. */
void qgpu_circuit_prefill_batch(const qgpu_circuit *c, const qgpu_circuit_state *st, const int64_t *ids, size_t n,
                                float *const *const *ws, size_t lanes, float *scratch);
int64_t qgpu_circuit_decode(const qgpu_circuit *c, const qgpu_circuit_state *st, int64_t token, float *const *ws,
                            float *scratch, int64_t *out, size_t max_tokens);
/* A memory's rows [n_rows] from a DeltaNet state S [heads, dk, dv] (readout.c): out [n_rows, n_fields] the
 * field values; returns -1, or the first row that is not an exact code (or holds a NaN). */
int64_t qgpu_read_rows(const float *S, size_t dk, size_t dv, const int64_t *heads, const int64_t *at, size_t n_rows,
                       size_t n_groups, const int64_t *g_fields, const int64_t *g_sources, const int64_t *g_size,
                       const int64_t *idx, const int64_t *chans, size_t n_fields, double tol, int64_t *out);
/* CDEF END */

/* bf16.round_bf16 for one value: round to nearest, ties to even; a NaN keeps its sign and top payload bits
 * with the quiet bit set. Branch-free (an integer select on the bits), so loops over it vectorize; the C
 * core's one definition (qgpu_round_bf16 and the fused steps' expressions use it). */
#include <string.h>
static inline float qgpu_bf16_round(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
    b = (nan ? (b | 0x00400000u) : (b + 0x7FFFu + ((b >> 16) & 1u))) & 0xFFFF0000u;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* A float's bit pattern (for branch-free tests and selects on it, which vectorize). */
static inline uint32_t qgpu_float_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

/* Loops built three times (plain, AVX2, AVX-512 target attributes: the same IEEE operations, no contraction,
 * so the same bits) where QGPU_SIMD_BUILDS; QGPU_ISA_PICK(name) is name##_plain/_avx2/_avx512 for the SIMD
 * level in force (qgpu_get_isa). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QGPU_SIMD_BUILDS 1
#define QGPU_ISA_PICK(name) \
    (qgpu_get_isa() >= 2 ? name##_avx512 : qgpu_get_isa() == 1 ? name##_avx2 : name##_plain)
#else
#define QGPU_SIMD_BUILDS 0
#define QGPU_ISA_PICK(name) name##_plain
#endif

/* The float a bf16 bit pattern stands for (exact: the bits are the float's top half). */
static inline float qgpu_bf16_value(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The core's exp of one value (activations.c), for the other C sources. */
float qgpu_expf(float x);

/* Internal: run fn(ctx, begin, end) over contiguous ranges covering [0, n), on up to qgpu_get_threads()
 * threads; ranges start at multiples of grain; one thread when `work` (about one multiply-add per unit)
 * is too small to pay for another. */
typedef void (*qgpu_range_fn)(void *ctx, size_t begin, size_t end);
void qgpu_parallel_for(size_t n, size_t grain, size_t work, qgpu_range_fn fn, void *ctx);

/* Internal (amx.c): whether AMX-BF16 can run here (asks Linux for the tiles once); X [n, in] packed into
 * parts * qgpu_amx_packed_size(n, in) uint16s of tiles (parts 1: X's bf16 values, returns 0 if a value is not
 * a bf16; parts 3: fp32 X as hi, mid and lo bf16 parts); rows [r0, r1) of Y = X W^T from the packed X. */
int qgpu_amx_usable(void);
size_t qgpu_amx_packed_size(size_t n, size_t in);
int qgpu_amx_pack(const float *x, size_t n, size_t in, int parts, uint16_t *xp);
void qgpu_amx_rows(const uint16_t *w, size_t out, size_t in, const uint16_t *xp, int parts, size_t n, float *y,
                   size_t r0, size_t r1);

#endif
