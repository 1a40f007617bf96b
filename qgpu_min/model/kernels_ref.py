"""NumPy reference kernels: the readable statement of what each C kernel in `kernels.py` computes.

Same signatures as `qgpu_min.model.kernels`. Activations are float32, bf16 weights are raw uint16 bit
patterns (see `bf16.py`). The math follows `shared/reference/qwen35-2b.md` §3; every step is float32.
These functions trust their inputs; `kernels.py` validates at the boundary.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qgpu_min.errors import QgpuError
from qgpu_min.model.bf16 import bf16_to_f32, round_bf16

# Below this fraction of nonzero weights, `maybe_sparse` picks the CSR path (see docs/ccore.md for the
# measurement behind it: the sparse kernel reads 6 bytes per nonzero and gathers x, dense reads 2 per weight).
SPARSE_MAX_DENSITY = 0.05


class KernelInputError(QgpuError, ValueError):
    """A kernel argument has the wrong dtype, shape or layout; the message names the argument."""


# ---------------------------------------------------------------------------------------------------------
# bf16 weight x f32 activation products (fp32 accumulation). W is [out, in]; lin(x, W) = x @ W.T.


@dataclass(frozen=True)
class SparseBF16:
    """A mostly-zero bf16 matrix [out, in] in CSR form.

    Row r's nonzeros are values[indptr[r]:indptr[r+1]] (bf16 bits) at columns indices[same range], columns
    ascending. Zero weights (+0 and -0) are structural: they are dropped, so 0 * inf activations give 0.
    """

    shape: tuple[int, int]
    indptr: np.ndarray  # int64 [out + 1]
    indices: np.ndarray  # int32 [nnz]
    values: np.ndarray  # uint16 [nnz], bf16 bits

    def __post_init__(self) -> None:
        # Checked once here so the C kernels can trust every index they follow.
        out, cols = self.shape
        for name, arr, dtype in (("indptr", self.indptr, np.int64), ("indices", self.indices, np.int32),
                                 ("values", self.values, np.uint16)):
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 1 \
                    or not arr.flags.c_contiguous:
                raise KernelInputError(f"SparseBF16.{name} must be a contiguous 1-D {np.dtype(dtype)} array, "
                                       f"got {describe_arg(arr)}")
        if self.indptr.shape[0] != out + 1 or self.indptr[0] != 0 or self.indptr[-1] != self.values.shape[0] \
                or self.indices.shape[0] != self.values.shape[0] or np.any(np.diff(self.indptr) < 0):
            raise KernelInputError(f"SparseBF16: indptr (length {self.indptr.shape[0]}) does not describe "
                                   f"{out} rows over {self.values.shape[0]} values and "
                                   f"{self.indices.shape[0]} indices")
        if self.indices.shape[0] and (self.indices.min() < 0 or self.indices.max() >= cols):
            raise KernelInputError(f"SparseBF16: column indices must lie in [0, {cols})")

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def density(self) -> float:
        return self.nnz / max(1, self.shape[0] * self.shape[1])

    @classmethod
    def from_dense(cls, w_bits: np.ndarray) -> "SparseBF16":
        """Build from a dense uint16 [out, in] matrix of bf16 bits."""
        if not isinstance(w_bits, np.ndarray) or w_bits.dtype != np.uint16 or w_bits.ndim != 2:
            raise KernelInputError(
                f"SparseBF16.from_dense needs a 2-D uint16 array of bf16 bits, got "
                f"{describe_arg(w_bits)}")
        if w_bits.shape[1] >= 2**31:
            raise KernelInputError(f"SparseBF16: {w_bits.shape[1]} columns exceed the int32 column index")
        out = w_bits.shape[0]
        counts = np.zeros(out, dtype=np.int64)
        indices, values = [], []
        for r0 in range(0, out, _chunk_rows(w_bits)):  # row chunks: temporaries stay small
            block = w_bits[r0:r0 + _chunk_rows(w_bits)]
            rows, cols = np.nonzero(block & np.uint16(0x7FFF))  # +0 is 0x0000, -0 is 0x8000; row-major order
            counts[r0:r0 + block.shape[0]] = np.bincount(rows, minlength=block.shape[0])
            indices.append(cols.astype(np.int32))
            values.append(block[rows, cols])
        indptr = np.zeros(out + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        return cls(shape=(int(out), int(w_bits.shape[1])), indptr=indptr,
                   indices=np.concatenate(indices or [np.zeros(0, np.int32)]),
                   values=np.concatenate(values or [np.zeros(0, np.uint16)]))

    def to_dense(self) -> np.ndarray:
        """The dense uint16 [out, in] matrix (for tests and inspection)."""
        dense = np.zeros(self.shape, dtype=np.uint16)
        dense[self._row_of_each_value(), self.indices] = self.values
        return dense

    def _row_of_each_value(self) -> np.ndarray:
        return np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))


def describe_arg(a: object) -> str:
    """What a rejected argument was, for error messages: an array's dtype and shape, else its type."""
    if isinstance(a, np.ndarray):
        return f"dtype {a.dtype}, shape {a.shape}"
    if isinstance(a, np.generic):
        return f"a NumPy {type(a).__name__} scalar"
    return f"{type(a).__name__}"


def _chunk_rows(w_bits: np.ndarray) -> int:
    """Rows per chunk of about 4M weights, so a large mmap'd weight is never widened or copied whole."""
    return max(1, (1 << 22) // max(1, w_bits.shape[1]))


def count_nonzero_bf16(w_bits: np.ndarray) -> int:
    """Nonzero bf16 values in a uint16 matrix (-0 counts as zero)."""
    rows = _chunk_rows(w_bits)
    return sum(int(np.count_nonzero(w_bits[r:r + rows] & np.uint16(0x7FFF)))
               for r in range(0, w_bits.shape[0], rows))


def maybe_sparse(w_bits: np.ndarray, max_density: float = SPARSE_MAX_DENSITY) -> np.ndarray | SparseBF16:
    """The operand to hand to matvec_bf16/matmul_bf16: CSR when few weights are nonzero, else w_bits itself."""
    if not isinstance(w_bits, np.ndarray) or w_bits.dtype != np.uint16 or w_bits.ndim != 2:
        raise KernelInputError(f"maybe_sparse needs a 2-D uint16 array of bf16 bits, got {describe_arg(w_bits)}")
    if count_nonzero_bf16(w_bits) > max_density * w_bits.size:
        return w_bits
    return SparseBF16.from_dense(w_bits)


def small_integers(bits: np.ndarray) -> np.ndarray | None:
    """bf16 bits as int8 when every value is an integer in [-128, 127] and none is -0 (exactly the same
    numbers), else None."""
    if bits.size == 0 or np.any(bits == np.uint16(0x8000)):
        return None
    v = bf16_to_f32(bits)
    if not (np.all(np.isfinite(v)) and np.all(v == np.round(v)) and v.min() >= -128 and v.max() <= 127):
        return None
    return v.astype(np.int8)


@dataclass(frozen=True)
class ChunkedBF16:
    """A bf16 matrix [out, in] stored as the chunks of `width` consecutive columns (from column 0, in steps
    of width: the SIMD level's chunk, kernels.chunk_width) that hold a nonzero weight: row r's chunks are
    ptr[r] .. ptr[r+1], chunk c starts at column cols[c] and its weights are values[c * width : (c + 1) *
    width] (zero past the row's end). `dense` is
    the matrix itself (kept, not copied: the product falls back to it). For a mostly-zero matrix whose
    dense product must keep its exact bits (the tied LM head of a circuit model): the chunked product does
    the dense product's arithmetic without the chunks that add only zeros."""

    shape: tuple[int, int]
    width: int
    ptr: np.ndarray     # int64 [out + 1]
    cols: np.ndarray    # int32 [chunks]
    values: np.ndarray  # uint16 [chunks * width]
    dense: np.ndarray   # uint16 [out, in]
    # the same values as int8 when every one is an integer in [-128, 127] and none is -0 (a circuit's
    # embedding: 0, 1, 2, 9, 43), else None: the C product reads these, half the bytes, the same weights
    small: np.ndarray | None = None

    @property
    def chunks(self) -> int:
        return int(self.cols.shape[0])

    @classmethod
    def from_dense(cls, w_bits: np.ndarray, width: int) -> "ChunkedBF16":
        if not isinstance(w_bits, np.ndarray) or w_bits.dtype != np.uint16 or w_bits.ndim != 2 \
                or not w_bits.flags.c_contiguous:
            raise KernelInputError(f"ChunkedBF16.from_dense needs a contiguous 2-D uint16 array of bf16 bits, "
                                   f"got {describe_arg(w_bits)}")
        if width not in (8, 32):
            raise KernelInputError(f"ChunkedBF16: width must be 8 or 32 columns, not {width}")
        out, n_in = w_bits.shape
        n_chunks = -(-n_in // width)
        counts = np.zeros(out, np.int64)
        cols, values = [], []
        step = _chunk_rows(w_bits)
        for r0 in range(0, out, step):  # row blocks: temporaries stay small for a large mapped matrix
            block = w_bits[r0:r0 + step]
            padded = np.zeros((block.shape[0], n_chunks * width), np.uint16)
            padded[:, :n_in] = block
            padded = padded.reshape(block.shape[0], n_chunks, width)
            rows, chunk = np.nonzero((padded & np.uint16(0x7FFF)).any(axis=2))  # row-major: columns ascending
            counts[r0:r0 + block.shape[0]] = np.bincount(rows, minlength=block.shape[0])
            cols.append((chunk * width).astype(np.int32))
            values.append(padded[rows, chunk].reshape(-1))
        ptr = np.zeros(out + 1, np.int64)
        np.cumsum(counts, out=ptr[1:])
        values = np.concatenate(values or [np.zeros(0, np.uint16)])
        return cls((int(out), int(n_in)), width, ptr, np.concatenate(cols or [np.zeros(0, np.int32)]), values,
                   w_bits, small_integers(values))

    def arrays(self) -> dict[str, np.ndarray]:
        """The chunked form as plain arrays, the dense matrix left out (a cache stores them)."""
        out = {"shape": np.array(self.shape, np.int64), "width": np.array(self.width, np.int64), "ptr": self.ptr,
               "cols": self.cols, "values": self.values}
        return out if self.small is None else {**out, "small": self.small}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray], dense: np.ndarray) -> "ChunkedBF16":
        """The ChunkedBF16 of `dense` that arrays() wrote; raises KernelInputError where they cannot be its
        (shapes, a chunk outside the matrix; the values themselves are the writer's, checked by its digest)."""
        shape, width = tuple(int(x) for x in a["shape"]), int(a["width"])
        ptr, cols, values, small = a["ptr"], a["cols"], a["values"], a.get("small")
        n = int(ptr[-1]) if ptr.size else -1
        if shape != dense.shape or ptr.shape != (shape[0] + 1,) or cols.shape != (n,) or values.shape != (n * width,) \
                or (small is not None and small.shape != values.shape) or np.any(np.diff(ptr) < 0) \
                or (n and (cols.min() < 0 or cols.max() >= shape[1] or np.any(cols % width))):
            raise KernelInputError(f"the stored chunked form does not fit a {shape} matrix of {width}-column chunks")
        return cls(shape, width, ptr, cols, values, dense, small)

    def to_dense(self) -> np.ndarray:
        out, n_in = self.shape
        n_chunks = -(-n_in // self.width)
        full = np.zeros((out, n_chunks, self.width), np.uint16)
        rows = np.repeat(np.arange(out), np.diff(self.ptr))
        full[rows, self.cols // self.width] = self.values.reshape(-1, self.width)
        return np.ascontiguousarray(full.reshape(out, -1)[:, :n_in])


Q8_BLOCK = 32  # columns per scale of a Q8 matrix


@dataclass(frozen=True)
class QuantQ8:
    """A dense matrix [out, in] quantized to int8 with one float32 scale per block of Q8_BLOCK columns of a
    row, like llama.cpp's Q8_0: W[r, k] ~ q[r, k] * scales[r, k // Q8_BLOCK]. `in` is a multiple of Q8_BLOCK.
    Built by quantize_q8; half the bytes of bf16 (plus 1/8 for the scales) for a decode step to read."""

    q: np.ndarray       # int8 [out, in]
    scales: np.ndarray  # float32 [out, in // Q8_BLOCK]

    def __post_init__(self) -> None:
        q, s = self.q, self.scales
        for name, arr, dtype in (("q", q, np.int8), ("scales", s, np.float32)):
            if not isinstance(arr, np.ndarray) or arr.dtype != dtype or arr.ndim != 2 or not arr.flags.c_contiguous:
                raise KernelInputError(f"QuantQ8.{name} must be a contiguous 2-D {np.dtype(dtype)} array, "
                                       f"got {describe_arg(arr)}")
        if q.shape[1] % Q8_BLOCK or s.shape != (q.shape[0], q.shape[1] // Q8_BLOCK):
            raise KernelInputError(f"QuantQ8: q {q.shape} and scales {s.shape} do not describe blocks of "
                                   f"{Q8_BLOCK} columns")

    @property
    def shape(self) -> tuple[int, int]:
        return self.q.shape

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scales.nbytes

    def dequantize(self) -> np.ndarray:
        """The float32 matrix the quantized weights stand for."""
        out, n_in = self.shape
        return (self.q.reshape(out, -1, Q8_BLOCK) * self.scales[:, :, None]).reshape(out, n_in)


def quantize_q8(w_bits: np.ndarray) -> QuantQ8:
    """Q8 of a bf16 matrix [out, in] (in a multiple of Q8_BLOCK, every value finite), block by block: where a
    power-of-two scale makes every value of the block an integer in [-127, 127] it is used, and the block is
    exact (zeros, small integers, a circuit's values); otherwise scale = max|w| / 127 and q = round(w / scale)."""
    if not isinstance(w_bits, np.ndarray) or w_bits.dtype != np.uint16 or w_bits.ndim != 2:
        raise KernelInputError(f"quantize_q8 needs a 2-D uint16 array of bf16 bits, got {describe_arg(w_bits)}")
    out, n_in = w_bits.shape
    if n_in % Q8_BLOCK:
        raise KernelInputError(f"quantize_q8: {n_in} columns are not a multiple of the block of {Q8_BLOCK}")
    q = np.empty((out, n_in), np.int8)
    scales = np.empty((out, n_in // Q8_BLOCK), np.float32)
    rows = _chunk_rows(w_bits)
    for r0 in range(0, out, rows):  # row chunks: a large mapped matrix is never widened whole
        v = bf16_to_f32(w_bits[r0:r0 + rows]).reshape(-1, n_in // Q8_BLOCK, Q8_BLOCK)
        if not np.isfinite(v).all():
            raise KernelInputError(f"quantize_q8: row {r0 + int(np.flatnonzero(~np.isfinite(v).all(axis=(1, 2)))[0])} "
                                   f"holds a non-finite weight")
        amax = np.abs(v).max(axis=2)
        mant, exp2 = np.frexp(amax / np.float32(127))         # amax / 127 = mant * 2^exp2, mant in [0.5, 1)
        pow2 = np.ldexp(np.float32(1), exp2 - (mant == 0.5)).astype(np.float32)  # smallest 2^e >= amax / 127
        on_grid = v / pow2[..., None]
        exact = (on_grid == np.rint(on_grid)).all(axis=2)
        scale = np.where(exact, pow2, amax / np.float32(127)).astype(np.float32)
        scale[amax == 0] = 0
        safe = np.where(scale == 0, np.float32(1), scale)[..., None]
        q[r0:r0 + rows] = np.clip(np.rint(v / safe), -127, 127).astype(np.int8).reshape(-1, n_in)
        scales[r0:r0 + rows] = scale
    return QuantQ8(q, scales)


def matmul_q8(w: QuantQ8, x: np.ndarray) -> np.ndarray:
    """Y = X @ W.T for a Q8 matrix: sum over blocks of scale * (sum of q * x), in float64 (the C kernel's value
    up to fp32 summation error)."""
    out, n_in = w.shape
    blocks = x.astype(np.float64).reshape(x.shape[0], 1, -1, Q8_BLOCK) * w.q.reshape(1, out, -1, Q8_BLOCK)
    return (blocks.sum(axis=3) * w.scales[None].astype(np.float64)).sum(axis=2)


def chunked_matvec(w: ChunkedBF16, x: np.ndarray) -> np.ndarray:
    """matvec_bf16 of the matrix the chunks came from (the zero chunks add nothing): f32 [out]."""
    return matvec_bf16(w.to_dense(), x)


def matvec_bf16(w_bits: np.ndarray | SparseBF16 | QuantQ8, x: np.ndarray, bf16_x: bool = False,
                bf16_y: bool = False) -> np.ndarray:
    """y[o] = sum_i W[o, i] * x[i]: W bf16 [out, in] (dense bits or SparseBF16, or a QuantQ8), x f32 [in] ->
    f32 [out]. bf16 mode's flags: bf16_x, x holds bf16 values only (checked; the C core may then use AMX
    tiles, which change only the summation order); bf16_y, y rounded to bf16."""
    return matmul_bf16(w_bits, x[None], bf16_x, bf16_y)[0]


def matmul_bf16(w_bits: np.ndarray | SparseBF16 | QuantQ8, x: np.ndarray, bf16_x: bool = False,
                bf16_y: bool = False) -> np.ndarray:
    """Y = X @ W.T: W bf16 [out, in] (dense bits or SparseBF16, or a QuantQ8), X f32 [n, in] -> f32 [n, out].
    bf16_x, bf16_y as for matvec_bf16."""
    if bf16_x and (x.view(np.uint32) & np.uint32(0xFFFF)).any():
        raise KernelInputError("matmul_bf16: bf16_x=True, but x holds a value that is not a bf16")
    if isinstance(w_bits, QuantQ8):
        y = matmul_q8(w_bits, x)
    elif isinstance(w_bits, SparseBF16):
        y = sparse_matmul(w_bits, x)
    else:
        y = x @ bf16_to_f32(w_bits).T
    return round_bf16(np.asarray(y, np.float32)) if bf16_y else y


def matvec_bf16_multi(ws: list, x: np.ndarray, bf16_x: bool = False, bf16_y: bool = False) -> list[np.ndarray]:
    """Several products sharing one input x f32 [in]: [matvec_bf16(w, x, bf16_x, bf16_y) for w in ws]."""
    return [matvec_bf16(w, x, bf16_x, bf16_y) for w in ws]


def matmul_bf16_multi(ws: list, x: np.ndarray, bf16_x: bool = False, bf16_y: bool = False) -> list[np.ndarray]:
    """Several products sharing one input X f32 [n, in]: [matmul_bf16(w, x, bf16_x, bf16_y) for w in ws]."""
    return [matmul_bf16(w, x, bf16_x, bf16_y) for w in ws]


def sparse_matvec(w: SparseBF16, x: np.ndarray) -> np.ndarray:
    """matvec_bf16 over the nonzeros only: y[r] = sum over row r's entries of value * x[column]."""
    y = np.zeros(w.shape[0], dtype=np.float32)
    np.add.at(y, w._row_of_each_value(), bf16_to_f32(w.values) * x[w.indices])
    return y


def sparse_matmul(w: SparseBF16, x: np.ndarray) -> np.ndarray:
    """matmul_bf16 over the nonzeros only: Y[t, r] = sum over row r's entries of value * X[t, column]."""
    y = np.zeros((x.shape[0], w.shape[0]), dtype=np.float32)
    products = bf16_to_f32(w.values)[None, :] * x[:, w.indices]  # [n, nnz]
    np.add.at(y.T, w._row_of_each_value(), products.T)
    return y


# ---------------------------------------------------------------------------------------------------------
# Norms and elementwise functions (float32 math).


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float, plus_one: bool) -> np.ndarray:
    """x * rsqrt(mean(x^2) + eps) * (1 + w if plus_one else w), over the last axis.

    plus_one=True is Qwen3.5's zero-centred RMSNorm (layer norms, final norm, q/k norms): neutral weight 0.
    """
    variance = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    scale = (np.float32(1) + w) if plus_one else w
    return (x * (np.float32(1) / np.sqrt(variance + np.float32(eps)))) * scale


def exp(x: np.ndarray) -> np.ndarray:
    """exp in float32, correctly rounded (through float64): what the C core's own exp gives but in rare
    cases within ~1e-16 of a rounding boundary."""
    with np.errstate(over="ignore"):
        return np.exp(x.astype(np.float64)).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(x), float32: x / (1 + exp(-x))."""
    return x / (np.float32(1) + exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), float32."""
    return np.float32(1) / (np.float32(1) + exp(-x))


def deltanet_gate(a: np.ndarray, a_log: np.ndarray, dt_bias: np.ndarray) -> np.ndarray:
    """The DeltaNet decay g = -exp(A_log) * softplus(a + dt_bias), softplus x itself above 20 (torch)."""
    x = a + dt_bias
    with np.errstate(over="ignore"):
        softplus = np.where(x > 20, x, np.log1p(exp(np.minimum(x, 20)).astype(np.float64)).astype(np.float32))
    return (-exp(a_log) * softplus).astype(np.float32)


def gated_rmsnorm(x: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """DeltaNet output norm per head (last axis = head dim): rmsnorm(x) * w * silu(z), w plain (not 1+w)."""
    return rmsnorm(x, w, eps, plus_one=False) * silu(z)


def l2norm(x: np.ndarray, eps: float = 1e-6, divisor: float = 1.0) -> np.ndarray:
    """x * rsqrt(sum(x^2) + eps) over the last axis (HF's l2norm, eps added to the sum of squares), divided
    by divisor (the query's sqrt(dk))."""
    sum_sq = np.sum(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x * (np.float32(1) / np.sqrt(sum_sq + np.float32(eps)))) / np.float32(divisor)


# ---------------------------------------------------------------------------------------------------------
# Gated DeltaNet pieces (reference §3.2 steps 2 and 7): one token, and a run of T tokens (prefill).


def conv_update(conv_state: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Causal depthwise conv, one token; returns the pre-SiLU output f32 [C] and shifts conv_state in place.

    conv_state [C, K-1] holds the previous K-1 inputs, oldest first; w [C, K], tap K-1 meets the new x.
    """
    window = np.concatenate([conv_state, x[:, None]], axis=1)  # [C, K], oldest first
    out = w[:, 0] * window[:, 0]
    for j in range(1, w.shape[1]):  # taps summed in order, as the C kernel does
        out = out + w[:, j] * window[:, j]
    conv_state[:] = window[:, 1:]
    return out


def deltanet_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                  beta: np.ndarray) -> np.ndarray:
    """Gated delta rule for one token, all heads; updates S [H, dk, dv] in place, returns o f32 [H, dv].

    q, k [H, dk] are already l2-normalised (q also scaled by 1/sqrt(dk)); v [H, dv]; g [H] <= 0 is the
    log-decay; beta [H] in (0, 1) the write strength. Per head h, in this order (decay, write, read):
    """
    o = np.empty((S.shape[0], S.shape[2]), dtype=np.float32)
    for h in range(S.shape[0]):
        S[h] *= exp(g[h:h + 1])[0]                # decay:  S = S * exp(g)
        kv = S[h].T @ k[h]                        #         kv[v] = sum_i S[i, v] k[i]  (what S recalls for k)
        delta = (v[h] - kv) * beta[h]             # write:  delta = (v - kv) * beta
        S[h] += np.outer(k[h], delta)             #         S[i, v] += k[i] delta[v]
        o[h] = S[h].T @ q[h]                      # read:   o[v] = sum_i S[i, v] q[i]  (updated state)
    return o


def conv_prefill(conv_state: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """conv_update for each of T tokens in order: x f32 [T, C] -> pre-SiLU f32 [T, C]."""
    y = np.empty_like(x)
    for t in range(x.shape[0]):
        y[t] = conv_update(conv_state, x[t], w)
    return y


def deltanet_prefill(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                     beta: np.ndarray, clean: np.ndarray | None = None) -> np.ndarray:
    """deltanet_step for each of T tokens in order: q, k [T, H, dk]; v [T, H, dv]; g, beta [T, H]
    -> o f32 [T, H, dv]; clean (int32 [H]), when given, is set to state_clean of the final S."""
    o = np.empty(v.shape, dtype=np.float32)
    for t in range(q.shape[0]):
        o[t] = deltanet_step(S, q[t], k[t], v[t], g[t], beta[t])
    if clean is not None:
        clean[:] = state_clean(S)
    return o


def state_clean(S: np.ndarray) -> np.ndarray:
    """int32 [H]: 1 where head h's state S[h] is all finite with no -0 (what the sparse step's fast path
    needs to skip rows; see deltanet_step_sparse)."""
    neg_zero = (S == 0) & np.signbit(S)
    return (np.isfinite(S).all(axis=(1, 2)) & ~neg_zero.any(axis=(1, 2))).astype(np.int32)


def deltanet_step_sparse(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                         beta: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """deltanet_step, the same result; clean int32 [H] (in: head known clean, out: head clean now) is set
    to state_clean(S) of the updated state. The C kernel uses the flags to touch only the rows of nonzero
    keys and queries; its result must not depend on them, which is what this twin states."""
    o = deltanet_step(S, q, k, v, g, beta)
    clean[:] = state_clean(S)
    return o


# ---------------------------------------------------------------------------------------------------------
# A sparse MLP's decode step (circuit layers), fused: see kernels.SparseMlpStep.


@dataclass(frozen=True)
class SparseMlp:
    """A CSR MLP restricted to its active units: the intermediate units whose column of down_proj holds a
    nonzero (the others' activations are never read: CSR skips zero weights). gate/up are those units' rows
    [m, hidden], down has its columns renumbered to positions in `units` [hidden, m]; per row the same
    values in the same order, so every product keeps its bits."""

    units: np.ndarray  # int64 [m], ascending
    gate: SparseBF16
    up: SparseBF16
    down: SparseBF16

    @classmethod
    def from_weights(cls, gate: SparseBF16, up: SparseBF16, down: SparseBF16) -> "SparseMlp":
        units = np.unique(down.indices).astype(np.int64)
        position = np.full(down.shape[1], -1, np.int64)
        position[units] = np.arange(units.shape[0])
        down_c = SparseBF16((down.shape[0], int(units.shape[0])), down.indptr.copy(),
                            position[down.indices].astype(np.int32), down.values.copy())
        return cls(units, _csr_rows(gate, units), _csr_rows(up, units), down_c)


def _csr_rows(w: SparseBF16, rows: np.ndarray) -> SparseBF16:
    """The CSR matrix of w's rows `rows`, in that order (each row's entries as they were)."""
    counts = (w.indptr[rows + 1] - w.indptr[rows]).astype(np.int64)
    indptr = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    # entry j of the result is entry (j - indptr[row]) of its source row: one arange shifted per row
    take = np.arange(int(indptr[-1]), dtype=np.int64) + np.repeat(w.indptr[rows].astype(np.int64) - indptr[:-1],
                                                                   counts)
    return SparseBF16((int(rows.shape[0]), w.shape[1]), indptr, w.indices[take].copy(), w.values[take].copy())


def _rounder(bf16: bool):
    return round_bf16 if bf16 else (lambda x: x)


def mlp_in(h: np.ndarray, w: np.ndarray, eps: float, mlp: SparseMlp, add_zero: bool,
           bf16: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(h_mid, u, g, p) for one token h f32 [d]: h_mid = R(h + 0) when add_zero (a silent mixer's exact
    output added) else h; u = R(rmsnorm(h_mid, 1 + w)); g = R(gate u), p = R(up u) over the active units;
    R rounds to bf16 in bf16 mode."""
    r = _rounder(bf16)
    h_mid = r(h + np.float32(0)) if add_zero else h.copy()
    u = r(rmsnorm(h_mid, w, eps, plus_one=True))
    return h_mid, u, r(sparse_matvec(mlp.gate, u)), r(sparse_matvec(mlp.up, u))


def mlp_out(h_mid: np.ndarray, s: np.ndarray, p: np.ndarray, mlp: SparseMlp, bf16: bool) -> np.ndarray:
    """h_mid + down(act) for s = silu(g): act = R(R(s) * p) (bf16) or s * p; h_out = R(h_mid + R(down act))."""
    r = _rounder(bf16)
    act = r(r(s) * p)
    return r(h_mid + r(sparse_matvec(mlp.down, act)))


def gdn_in(h: np.ndarray, w: np.ndarray, eps: float, qkv: SparseBF16, z: SparseBF16, b: SparseBF16,
           a: SparseBF16, conv_state: np.ndarray, conv_w: np.ndarray, bf16: bool) -> tuple[np.ndarray, ...]:
    """A DeltaNet mixer's decode step up to the conv, one token h f32 [d]: u = R(rmsnorm(h, 1 + w)), then
    (mixed, z, b, a) = R(each projection of u), conv = R(conv_update(conv_state, mixed, conv_w)) (the state
    shifted in place). Returns (u, mixed, z, b, a, conv)."""
    r = _rounder(bf16)
    u = r(rmsnorm(h, w, eps, plus_one=True))
    mixed, zz, bb, aa = (r(sparse_matvec(m, u)) for m in (qkv, z, b, a))
    return u, mixed, zz, bb, aa, r(conv_update(conv_state, mixed, conv_w))


def gdn_out(o: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float, out: SparseBF16, h: np.ndarray,
            bf16: bool) -> np.ndarray:
    """The rest of the step from the delta rule's output o f32 [nv, dv] (z the same shape): the gated
    norm (bf16: R(R(w * R(rmsnorm(R(o), ones))) * silu(z))), y = R(out_proj of it), h_out = R(h + y)."""
    r = _rounder(bf16)
    o = r(o)
    if bf16:
        n = r(rmsnorm(o, np.ones(o.shape[-1], np.float32), eps, plus_one=False))
        n = r(r(w * n) * silu(z))
    else:
        n = gated_rmsnorm(o, z, w, eps)
    return r(h + r(sparse_matvec(out, n.reshape(-1))))
