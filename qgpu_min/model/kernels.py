"""The C core's kernels, with the same signatures as their NumPy references in `kernels_ref`.

Arguments are validated here, at the boundary, and each error names the function, the argument and what
was expected. Weights must already be C-contiguous uint16 bf16 bits: a weight is often a memory-mapped
checkpoint tensor, and copying it silently would cost its whole size in RAM, so a wrong one is an error.
Read-only activations that are float32 but not contiguous are copied (they are small); arrays updated in
place (conv_state, S) must be contiguous and writable.

Accuracy (tests/test_kernels_*.py): matvec/matmul differ from NumPy only by fp32 summation order,
|y - y_ref| <= in * 2^-23 * sum|w x|; sums of small integers times powers of two are exact in any order, so
they are equal bit for bit. conv_update and the sparse products are bit-identical to the references;
norms and the DeltaNet step agree to a few fp32 ulps.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from qgpu_min._core import ffi, lib
from qgpu_min.model.bf16 import round_bf16 as _round_bf16_numpy
from qgpu_min.model.kernels_ref import (  # noqa: F401  (re-exported: same API as kernels_ref)
    Q8_BLOCK, SPARSE_MAX_DENSITY, ChunkedBF16, KernelInputError, QuantQ8, SparseBF16, SparseMlp, count_nonzero_bf16,
    maybe_sparse)
from qgpu_min.model.kernels_ref import describe_arg

ISA_NAMES = ("generic", "avx2", "avx512", "amx")  # amx: AVX-512, and AMX-BF16 tiles for bf16_x products


def threads() -> int:
    """Threads the parallel kernels use (QGPU_THREADS, else the online CPUs, unless set_threads chose)."""
    return int(lib.qgpu_get_threads())


def set_threads(n: int | None) -> None:
    """Use n threads; None goes back to QGPU_THREADS / the CPU count."""
    if n is not None and (not isinstance(n, int) or n < 1):
        raise KernelInputError(f"set_threads: need a positive int or None, got {n!r}")
    lib.qgpu_set_threads(0 if n is None else n)


def isa() -> str:
    """The SIMD level the dense products use: 'generic', 'avx2', 'avx512' or 'amx'."""
    return ISA_NAMES[lib.qgpu_get_isa()]


def set_isa(name: str | None) -> str:
    """Ask for a SIMD level (None: the best this CPU has); returns the level in force, never above the CPU's."""
    if name is None:
        return ISA_NAMES[lib.qgpu_set_isa(lib.qgpu_best_isa())]
    if name not in ISA_NAMES:
        raise KernelInputError(f"set_isa: unknown level {name!r}; choose one of {', '.join(ISA_NAMES)}")
    return ISA_NAMES[lib.qgpu_set_isa(ISA_NAMES.index(name))]


# ---------------------------------------------------------------------------------------------------------
# Boundary checks.


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_shape(fn: str, name: str, a: np.ndarray, shape: tuple) -> None:
    if a.ndim != len(shape) or any(want is not None and got != want for got, want in zip(a.shape, shape)):
        raise KernelInputError(f"{fn}: {name} has shape {a.shape}, expected {_shape_text(shape)}")


def check_weight(fn: str, w: object, name: str = "w_bits") -> np.ndarray:
    if not isinstance(w, np.ndarray) or w.dtype != np.uint16 or w.ndim != 2:
        raise KernelInputError(f"{fn}: {name} must be a 2-D uint16 array of bf16 bits [out, in] "
                               f"(or a SparseBF16), got {describe_arg(w)}")
    if not w.flags.c_contiguous:
        raise KernelInputError(f"{fn}: {name} {w.shape} is not C-contiguous; weights are never copied "
                               f"implicitly, pass np.ascontiguousarray({name}) if a copy is really wanted")
    return w


def check_activation(fn: str, name: str, a: object, shape: tuple) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise KernelInputError(f"{fn}: {name} must be a float32 array, got {describe_arg(a)}")
    _check_shape(fn, name, a, shape)
    return np.ascontiguousarray(a)


def _in_out(fn: str, name: str, a: object, shape: tuple) -> np.ndarray:
    """An array the kernel updates in place: it must be float32, C-contiguous and writable as given."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise KernelInputError(f"{fn}: {name} must be a float32 array, got {describe_arg(a)}")
    _check_shape(fn, name, a, shape)
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise KernelInputError(f"{fn}: {name} is updated in place, so it must be C-contiguous and writable")
    return a


def _floats(a: np.ndarray) -> object:
    """A float* onto the array's own memory (no copy): the C core reads or writes it in place."""
    return ffi.from_buffer("float[]", a)


# ---------------------------------------------------------------------------------------------------------
# Products.


Weight = np.ndarray | SparseBF16 | QuantQ8  # what the products take: dense bf16 bits, CSR, or Q8


def matvec_bf16(w_bits: Weight, x: np.ndarray, bf16_x: bool = False, bf16_y: bool = False) -> np.ndarray:
    """y = W x: W bf16 [out, in] (dense uint16 bits or SparseBF16, or a QuantQ8), x f32 [in] -> f32 [out].
    bf16 mode's two flags: bf16_x, x holds bf16 values only (an error otherwise), which the amx level
    multiplies on AMX tiles (its own summation order; other levels and CSR weights compute as without it);
    bf16_y, y comes back rounded to bf16 (round_bf16's bits), as torch's bf16 linear returns it."""
    if isinstance(w_bits, SparseBF16):
        return _rounded(sparse_matvec(w_bits, x), bf16_y)
    w = w_bits if isinstance(w_bits, QuantQ8) else check_weight("matvec_bf16", w_bits)
    x = check_activation("matvec_bf16", "x", x, (w.shape[1],))
    return _multi("matvec_bf16", [w], x[None], bf16_x, bf16_y)[0][0]


def matmul_bf16(w_bits: Weight, x: np.ndarray, bf16_x: bool = False, bf16_y: bool = False,
                prompt: bool = False) -> np.ndarray:
    """Y = X W^T: W bf16 [out, in] (dense uint16 bits or SparseBF16, or a QuantQ8), X f32 [n, in] -> f32 [n, out].
    bf16_x, bf16_y as for matvec_bf16. prompt: X holds a prompt's tokens, whose rows need not equal
    matvec_bf16's: at the amx level fp32 X then runs on AMX tiles as three bf16 parts (x = hi + mid + lo), a
    token's row the same bits in any prompt product and within fp32 summation error of the others'."""
    if isinstance(w_bits, SparseBF16):
        return _rounded(sparse_matmul(w_bits, x), bf16_y)
    w = w_bits if isinstance(w_bits, QuantQ8) else check_weight("matmul_bf16", w_bits)
    x = check_activation("matmul_bf16", "x", x, (None, w.shape[1]))
    return _multi("matmul_bf16", [w], x, bf16_x, bf16_y, prompt)[0]


def matmul_bf16_multi(ws: Sequence[Weight], x: np.ndarray, bf16_x: bool = False,
                      bf16_y: bool = False, prompt: bool = False) -> list[np.ndarray]:
    """[matmul_bf16(w, x, bf16_x, bf16_y, prompt) for w in ws], bit for bit, with the dense weights in one
    parallel dispatch (fewer thread wake-ups when several projections read the same input): X f32 [n, in] ->
    [f32 [n, out_j]]."""
    n_in = _multi_width("matmul_bf16_multi", ws)
    x = check_activation("matmul_bf16_multi", "x", x, (None, n_in))
    return _multi("matmul_bf16_multi", ws, x, bf16_x, bf16_y, prompt)


def matvec_bf16_multi(ws: Sequence[Weight], x: np.ndarray, bf16_x: bool = False,
                      bf16_y: bool = False) -> list[np.ndarray]:
    """[matvec_bf16(w, x, bf16_x, bf16_y) for w in ws], bit for bit, with the dense weights in one parallel
    dispatch: x f32 [in] -> [f32 [out_j]]. For decode, e.g. in_proj_qkv/z/b/a, gate/up, or q/k/v on one
    input."""
    n_in = _multi_width("matvec_bf16_multi", ws)
    x = check_activation("matvec_bf16_multi", "x", x, (n_in,))
    return [y[0] for y in _multi("matvec_bf16_multi", ws, x[None], bf16_x, bf16_y)]


def _rounded(y: np.ndarray, bf16_y: bool) -> np.ndarray:
    if bf16_y:
        lib.qgpu_round_bf16(_floats(y), y.size)
    return y


def _multi_width(fn: str, ws: object) -> int:
    """The shared input width of ws, every weight checked before anything is computed."""
    if not isinstance(ws, (list, tuple)) or not ws:
        raise KernelInputError(f"{fn}: ws must be a non-empty list of weights, got {describe_arg(ws)}")
    n_in = ws[0].shape[1] if isinstance(ws[0], (np.ndarray, SparseBF16, QuantQ8)) and len(ws[0].shape) == 2 \
        else None
    for j, w in enumerate(ws):
        if not isinstance(w, (SparseBF16, QuantQ8)):
            check_weight(fn, w, f"ws[{j}]")
        if w.shape[1] != n_in:
            raise KernelInputError(f"{fn}: ws[{j}] has {w.shape[1]} input columns, ws[0] has {n_in}; "
                                   f"the weights must share one input width")
    return n_in


def _multi(fn: str, ws: Sequence[Weight], x: np.ndarray, bf16_x: bool, bf16_y: bool,
           prompt: bool = False) -> list[np.ndarray]:
    """The products of checked weights; the dense ones' (bf16 and Q8) results are views of one buffer, which
    the C call fills in groups of up to QGPU_MAX_MULTI matrices."""
    n, n_in = x.shape
    flags = (lib.QGPU_BF16_X if bf16_x else 0) | (lib.QGPU_BF16_Y if bf16_y else 0) | \
        (lib.QGPU_PROMPT if prompt else 0)
    scratch = _scratch(lib.qgpu_product_scratch(n, n_in, flags))
    dense = [w for w in ws if not isinstance(w, SparseBF16)]
    buf = np.empty(n * sum(w.shape[0] for w in dense), np.float32)
    ys, offset = [], 0
    for w in ws:
        if isinstance(w, SparseBF16):
            ys.append(_rounded(sparse_matmul(w, x), bf16_y))
        else:
            ys.append(buf[offset:offset + n * w.shape[0]].reshape(n, w.shape[0]))
            offset += n * w.shape[0]
    step, offset = lib.QGPU_MAX_MULTI, 0
    for g in range(0, len(dense) if n else 0, step):
        group = dense[g:g + step]
        matrices = ffi.new("qgpu_matrix[]", len(group))
        keep = []  # the buffers the C structs point into, alive until the call returns
        for m, w in zip(matrices, group):
            _set_matrix(m, w, keep)
        if not lib.qgpu_matmul_multi(matrices, len(group), n_in, _floats(x), n, _floats(buf[offset:]), flags,
                                     ffi.from_buffer("uint16_t[]", scratch)):
            check_bf16_values(fn, x)  # the C check of the first group failed: nothing computed yet
        offset += n * sum(w.shape[0] for w in group)
    return ys


def _set_matrix(m, w: np.ndarray | QuantQ8, keep: list) -> None:
    """Describe a checked dense weight to C (a qgpu_matrix): its bf16 bits, or its Q8 weights and scales; the
    buffers the pointers come from are appended to keep, which must live as long as the struct."""
    if isinstance(w, QuantQ8):
        bufs = (ffi.from_buffer("int8_t[]", w.q), ffi.from_buffer("float[]", w.scales))
        m.q, m.scales = bufs
    else:
        bufs = (ffi.from_buffer("uint16_t[]", w),)
        m.w = bufs[0]
    m.out = w.shape[0]
    keep.extend(bufs)


_per_thread = threading.local()


def _scratch(size: int) -> np.ndarray:
    """uint16 workspace of at least `size` for the C core, kept per thread and grown on demand: a fresh array
    of this size per product costs page faults comparable to packing it."""
    buf = getattr(_per_thread, "scratch", None)
    if buf is None or buf.size < size:
        buf = _per_thread.scratch = np.empty(max(size, 1), np.uint16)
    return buf


def check_bf16_values(fn: str, x: np.ndarray) -> None:
    """What bf16_x promises: every float of x a bf16 value (its low 16 bits zero); an error naming the first
    one that is not."""
    low = x.view(np.uint32) & np.uint32(0xFFFF)
    if not low.any():
        return
    where = tuple(int(i) for i in np.unravel_index(int(np.flatnonzero(low)[0]), x.shape))
    shown = where[1:] if fn.startswith("matvec") else where  # a matvec's x is the one row of X
    raise KernelInputError(f"{fn}: bf16_x=True, but x{list(shown)} = {float(x[where])!r} is not a bf16 value "
                           f"(round it with round_bf16 first, or leave bf16_x False)")


def quantize_q8(w_bits: np.ndarray) -> QuantQ8:
    """kernels_ref.quantize_q8 in C, bit for bit, in parallel over rows (a model's matrices at load)."""
    w = check_weight("quantize_q8", w_bits)
    out, n_in = w.shape
    if n_in % Q8_BLOCK:
        raise KernelInputError(f"quantize_q8: {n_in} columns are not a multiple of the block of {Q8_BLOCK}")
    q = np.empty((out, n_in), np.int8)
    scales = np.empty((out, n_in // Q8_BLOCK), np.float32)
    if q.size:
        lib.qgpu_quantize_q8(ffi.from_buffer("uint16_t[]", w), out, n_in, ffi.from_buffer("int8_t[]", q),
                             _floats(scales))
    bad = np.flatnonzero(~np.isfinite(scales).all(axis=1))
    if bad.size:
        raise KernelInputError(f"quantize_q8: row {int(bad[0])} holds a non-finite weight")
    return QuantQ8(q, scales)


def _sparse(fn: str, w: object) -> SparseBF16:
    if not isinstance(w, SparseBF16):
        raise KernelInputError(f"{fn}: w must be a SparseBF16, got {describe_arg(w)}")
    return w


def sparse_matmul(w: SparseBF16, x: np.ndarray) -> np.ndarray:
    """matmul_bf16 for a CSR weight: X f32 [n, in] -> f32 [n, out]."""
    w = _sparse("sparse_matmul", w)
    out, n_in = w.shape
    x = check_activation("sparse_matmul", "x", x, (None, n_in))
    y = np.empty((x.shape[0], out), dtype=np.float32)
    if x.shape[0] and out:
        lib.qgpu_sparse_matmul(out, n_in, ffi.from_buffer("int64_t[]", w.indptr),
                               ffi.from_buffer("int32_t[]", w.indices), ffi.from_buffer("uint16_t[]", w.values),
                               _floats(x), x.shape[0], _floats(y))
    return y


def sparse_matvec(w: SparseBF16, x: np.ndarray) -> np.ndarray:
    """matvec_bf16 for a CSR weight: x f32 [in] -> f32 [out]."""
    w = _sparse("sparse_matvec", w)
    x = check_activation("sparse_matvec", "x", x, (w.shape[1],))
    return sparse_matmul(w, x[None, :])[0]


# ---------------------------------------------------------------------------------------------------------
# Norms.


def _norm_rows(fn: str, x: object) -> np.ndarray:
    """x checked as float32 rows (..., d) with d >= 1: what every norm normalises."""
    if not isinstance(x, np.ndarray) or x.ndim < 1 or x.shape[-1] < 1:
        raise KernelInputError(f"{fn}: x must be a float32 array (..., d) with d >= 1, got {describe_arg(x)}")
    return check_activation(fn, "x", x, (None,) * (x.ndim - 1) + (x.shape[-1],))


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float, plus_one: bool) -> np.ndarray:
    """x * rsqrt(mean(x^2) + eps) * (1 + w if plus_one else w) over the last axis; x f32 (..., d), w f32 (d)."""
    x = _norm_rows("rmsnorm", x)
    d = x.shape[-1]
    w = check_activation("rmsnorm", "w", w, (d,))
    y = np.empty_like(x)
    lib.qgpu_rmsnorm(_floats(x), x.size // d, d, _floats(w), eps, bool(plus_one), _floats(y))
    return y


def gated_rmsnorm(x: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """rmsnorm(x) * w * silu(z) over the last axis (per head): x, z f32 (..., d), w f32 (d), plain w."""
    x = _norm_rows("gated_rmsnorm", x)
    d = x.shape[-1]
    z = check_activation("gated_rmsnorm", "z", z, x.shape)
    w = check_activation("gated_rmsnorm", "w", w, (d,))
    y = np.empty_like(x)
    lib.qgpu_gated_rmsnorm(_floats(x), _floats(z), x.size // d, d, _floats(w), eps, _floats(y))
    return y


# ---------------------------------------------------------------------------------------------------------
# Gated DeltaNet pieces: one token, or a run of T tokens (prefill) in one call.


def conv_update(conv_state: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Causal depthwise conv, one token: conv_state f32 [C, K-1] (shifted in place), x f32 [C], w f32 [C, K]
    -> pre-SiLU output f32 [C]."""
    state, w = _conv_args("conv_update", conv_state, w)
    c, k = w.shape
    x = check_activation("conv_update", "x", x, (c,))
    y = np.empty(c, dtype=np.float32)
    lib.qgpu_conv_update(_floats(state), c, k, _floats(x), _floats(w), _floats(y))
    return y


def deltanet_step(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                  beta: np.ndarray) -> np.ndarray:
    """Gated delta rule, one token, all heads: S f32 [H, dk, dv] updated in place; q, k f32 [H, dk];
    v f32 [H, dv]; g, beta f32 [H] -> o f32 [H, dv]. See kernels_ref.deltanet_step for the math."""
    S, q, k, v, g, beta = _delta_args("deltanet_step", S, q, k, v, g, beta, ())
    h, dv = S.shape[0], S.shape[2]
    o = np.empty((h, dv), dtype=np.float32)
    lib.qgpu_deltanet_step(_floats(S), h, S.shape[1], dv, *map(_floats, (q, k, v, g, beta, o)))
    return o


def _conv_args(fn: str, conv_state: object, w: object) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(w, np.ndarray) or w.ndim != 2 or w.shape[1] < 1:
        raise KernelInputError(f"{fn}: w must be a float32 array [C, K] with K >= 1, got {describe_arg(w)}")
    c, k = w.shape
    w = check_activation(fn, "w", w, (c, k))
    return _in_out(fn, "conv_state", conv_state, (c, k - 1)), w


def conv_prefill(conv_state: np.ndarray, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """conv_update over T tokens in order, in one call: x f32 [T, C] -> pre-SiLU f32 [T, C], bit-identical to
    T conv_update calls; conv_state f32 [C, K-1] ends shifted past all T inputs."""
    state, w = _conv_args("conv_prefill", conv_state, w)
    c, k = w.shape
    x = check_activation("conv_prefill", "x", x, (None, c))
    y = np.empty_like(x)
    if x.shape[0]:
        lib.qgpu_conv_prefill(_floats(state), c, k, x.shape[0], _floats(x), _floats(w), _floats(y))
    return y


def _delta_args(fn: str, S: object, q: object, k: object, v: object, g: object, beta: object,
                lead: tuple) -> tuple[np.ndarray, ...]:
    """Checked (S, q, k, v, g, beta); lead is () for one token, (T,) for a run (T from q)."""
    if not isinstance(S, np.ndarray) or S.ndim != 3:
        raise KernelInputError(f"{fn}: S must be a float32 array [H, dk, dv], got {describe_arg(S)}")
    h, dk, dv = S.shape
    if dv > lib.QGPU_MAX_DV:
        raise KernelInputError(f"{fn}: dv = {dv} exceeds the C kernel's limit {lib.QGPU_MAX_DV}")
    S = _in_out(fn, "S", S, (h, dk, dv))
    q = check_activation(fn, "q", q, lead + (h, dk))
    lead = q.shape[:len(lead)]
    return (S, q, check_activation(fn, "k", k, lead + (h, dk)), check_activation(fn, "v", v, lead + (h, dv)),
            check_activation(fn, "g", g, lead + (h,)), check_activation(fn, "beta", beta, lead + (h,)))


def _clean_flags(fn: str, clean: object, h: int) -> np.ndarray:
    if not isinstance(clean, np.ndarray) or clean.dtype != np.int32 or clean.shape != (h,) \
            or not clean.flags.c_contiguous or not clean.flags.writeable:
        raise KernelInputError(f"{fn}: clean must be a writable contiguous int32 array [{h}], "
                               f"got {describe_arg(clean)}")
    return clean


def deltanet_prefill(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                     beta: np.ndarray, clean: np.ndarray | None = None) -> np.ndarray:
    """deltanet_step over T tokens in order, in one call (threads take whole heads): q, k f32 [T, H, dk];
    v f32 [T, H, dv]; g, beta f32 [T, H] -> o f32 [T, H, dv], bit-identical to T deltanet_step calls; S f32
    [H, dk, dv] ends updated by all T tokens. Each token takes deltanet_step_sparse's paths; `clean` (int32
    [H], in/out, as there) carries their flags, none meaning nothing is known."""
    S, q, k, v, g, beta = _delta_args("deltanet_prefill", S, q, k, v, g, beta, (None,))
    (t, h, dk), dv = q.shape, S.shape[2]
    clean = np.zeros(h, np.int32) if clean is None else _clean_flags("deltanet_prefill", clean, h)
    o = np.empty((t, h, dv), dtype=np.float32)
    if t:
        lib.qgpu_deltanet_prefill(_floats(S), h, dk, dv, t, *map(_floats, (q, k, v, g, beta, o)),
                                  ffi.from_buffer("int32_t[]", clean))
    return o


def deltanet_step_sparse(S: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray,
                         beta: np.ndarray, clean: np.ndarray) -> np.ndarray:
    """deltanet_step, bit for bit, reading and writing only the state rows of the nonzero key (and query)
    entries in heads whose decay is exactly 1 and whose `clean` flag (int32 [H], in/out) says the state is
    finite with no -0; other heads take the dense step. On return `clean` is kernels_ref.state_clean(S).
    A flag of 1 on a head that is not clean gives wrong results: flags come from new states (all zeros)
    or from this function."""
    S, q, k, v, g, beta = _delta_args("deltanet_step_sparse", S, q, k, v, g, beta, ())
    h, dv = S.shape[0], S.shape[2]
    clean = _clean_flags("deltanet_step_sparse", clean, h)
    o = np.empty((h, dv), dtype=np.float32)
    lib.qgpu_deltanet_step_sparse(_floats(S), h, S.shape[1], dv, *map(_floats, (q, k, v, g, beta, o)),
                                  ffi.from_buffer("int32_t[]", clean))
    return o


def _elementwise(fn: str, c_fn, x: np.ndarray) -> np.ndarray:
    x = check_activation(fn, "x", x, (None,) * np.ndim(x))
    y = np.empty_like(x)
    c_fn(_floats(x), x.size, _floats(y))
    return y


def round_bf16(x: np.ndarray) -> np.ndarray:
    """bf16.round_bf16 (nearest, ties to even; NaNs kept quiet), bit for bit, in one C pass: float32 x,
    any shape -> a new array. The bf16 mode rounds every activation with it."""
    if type(x) is not np.ndarray or x.ndim == 0:
        return _round_bf16_numpy(x)
    if x.dtype != np.float32:
        raise KernelInputError(f"round_bf16: x must be a float32 array, got {describe_arg(x)}")
    y = np.array(x, dtype=np.float32, order="C", copy=True)
    lib.qgpu_round_bf16(_floats(y), y.size)
    return y


def exp(x: np.ndarray) -> np.ndarray:
    """exp of float32 x, any shape: the core's own (activations.c), the same bits on every platform."""
    return _elementwise("exp", lib.qgpu_exp, x)


def silu(x: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-x)) of float32 x, any shape, with the core's exp."""
    return _elementwise("silu", lib.qgpu_silu, x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) of float32 x, any shape, with the core's exp."""
    return _elementwise("sigmoid", lib.qgpu_sigmoid, x)


def l2norm(x: np.ndarray, eps: float = 1e-6, divisor: float = 1.0) -> np.ndarray:
    """(x * (1 / sqrt(sum(x^2) + eps))) / divisor over the last axis (HF's l2norm; the query's divisor is
    sqrt(dk)); the sum of squares in double."""
    x = _norm_rows("l2norm", x)
    y = np.empty_like(x)
    lib.qgpu_l2norm(_floats(x), x.size // x.shape[-1], x.shape[-1], float(eps), float(divisor), _floats(y))
    return y


def deltanet_gate(a: np.ndarray, a_log: np.ndarray, dt_bias: np.ndarray) -> np.ndarray:
    """The DeltaNet decay g = -exp(A_log) * softplus(a + dt_bias) for a f32 (..., H): softplus is x above
    20 (torch's threshold), else log1p(exp(x)) (log1p in double)."""
    a = check_activation("deltanet_gate", "a", a, (None,) * np.ndim(a))
    heads = a.shape[-1]
    a_log = check_activation("deltanet_gate", "A_log", a_log, (heads,))
    dt_bias = check_activation("deltanet_gate", "dt_bias", dt_bias, (heads,))
    g = np.empty_like(a)
    lib.qgpu_deltanet_gate(_floats(a), a.size, _floats(a_log), _floats(dt_bias), heads, _floats(g))
    return g


def chunk_width() -> int:
    """Columns per chunk of the dense products' accumulation at the current SIMD level: the
    ChunkedBF16.width that chunked_matvec runs with (32 AVX-512 and amx, 8 AVX2 and generic)."""
    return int(lib.qgpu_isa_chunk(lib.qgpu_get_isa()))


def chunked_matvec(w: ChunkedBF16, x: np.ndarray) -> np.ndarray:
    """matvec_bf16(w.dense, x), bit for bit, reading only the nonzero chunks: x f32 [in] -> f32 [out]. When
    w.width is not the current SIMD level's chunk, or x holds inf/NaN (0 * inf is NaN in the dense sum), the
    dense product itself runs."""
    if not isinstance(w, ChunkedBF16):
        raise KernelInputError(f"chunked_matvec: w must be a ChunkedBF16, got {describe_arg(w)}")
    out, n_in = w.shape
    x = check_activation("chunked_matvec", "x", x, (n_in,))
    y = np.empty(out, dtype=np.float32)
    small = ffi.NULL if w.small is None else ffi.from_buffer("int8_t[]", w.small)
    if not lib.qgpu_chunked_matvec_bf16(out, n_in, w.width, ffi.from_buffer("int64_t[]", w.ptr),
                                        ffi.from_buffer("int32_t[]", w.cols),
                                        ffi.from_buffer("uint16_t[]", w.values), small, _floats(x), _floats(y)):
        return matvec_bf16(w.dense, x)
    return y


def _vec(fn: str, name: str, a: object, n: int) -> np.ndarray:
    """The decode steps' cheap check of a buffer the forward pass made: float32, C-contiguous, n values
    (any shape). Anything else is an error, never a copy."""
    if type(a) is not np.ndarray or a.dtype != np.float32 or a.size != n or not a.flags.c_contiguous:
        raise KernelInputError(f"{fn}: {name} must be a C-contiguous float32 array of {n} values, "
                               f"got {describe_arg(a)}")
    return a


def _csr(w: SparseBF16) -> tuple:
    return (ffi.from_buffer("int64_t[]", w.indptr), ffi.from_buffer("int32_t[]", w.indices),
            ffi.from_buffer("uint16_t[]", w.values))


def _set_projection(proj, w: SparseBF16 | np.ndarray | QuantQ8, keep: list) -> None:
    """Describe one projection of a layer struct (a qgpu_proj) to C: w's CSR arrays, or its dense bf16 bits or
    Q8 arrays; the buffers the pointers come from are appended to keep, which must live as long as the
    struct."""
    if isinstance(w, SparseBF16):
        proj.p, proj.i, proj.v = bufs = _csr(w)
        proj.m.out = w.shape[0]
        keep.extend(bufs)
    else:
        _set_matrix(proj.m, w if isinstance(w, QuantQ8) else check_weight("step", w), keep)


def step_weights(ws: Sequence) -> str | None:
    """What the fused decode steps can take for these projections of one input: "csr" (all SparseBF16),
    "dense" (all dense bf16 bits or QuantQ8), else None (mixed kinds: the forward pass's own calls)."""
    if all(isinstance(w, SparseBF16) for w in ws):
        return "csr"
    if all(isinstance(w, (np.ndarray, QuantQ8)) for w in ws):
        return "dense"
    return None


class MlpStep:
    """One layer's MLP for one token (decode) in one C call (qgpu_mlp_step), bit-identical to the forward
    pass's separate calls (kernels_ref.mlp_in, silu, kernels_ref.mlp_out state the math): gate, up [m, d] and
    down [d, m] all dense (bf16 bits or QuantQ8, a model's own layer) or all CSR (see SparseMlpStep). The
    weights are described to C once (a qgpu_mlp_layer); a call checks its activation's shape and dtype only
    (the forward pass's own buffer)."""

    mlp: SparseMlp | None = None  # a CSR MLP's active units (SparseMlpStep)

    def __init__(self, gate: Weight, up: Weight, down: Weight, norm_w: np.ndarray, eps: float, bf16: bool) -> None:
        if step_weights([gate, up, down]) is None:
            raise KernelInputError("MlpStep: gate, up and down must be all CSR or all dense")
        self.d, self.m = down.shape[0], gate.shape[0]
        if gate.shape != (self.m, self.d) or up.shape != (self.m, self.d) or down.shape != (self.d, self.m):
            raise KernelInputError(f"MlpStep: gate {tuple(gate.shape)}, up {tuple(up.shape)} and down "
                                   f"{tuple(down.shape)} do not fit one MLP")
        self.norm_w = check_activation("MlpStep", "norm_w", norm_w, (self.d,))
        self.eps, self.bf16 = float(eps), int(bool(bf16))
        self.layer = ffi.new("qgpu_mlp_layer *")
        L, self._keep = self.layer, [_floats(self.norm_w)]
        L.d, L.m, L.w, L.eps, L.bf16 = self.d, self.m, self._keep[0], self.eps, self.bf16
        for proj, w in ((L.gate, gate), (L.up, up), (L.down, down)):
            _set_projection(proj, w, self._keep)
        self.scratch_size = int(lib.qgpu_mlp_scratch(self.d, self.m))
        self._scratch = np.empty(self.scratch_size + 1, np.float32)  # reused: calls hold the lock
        self._lock = threading.Lock()

    def __call__(self, h: np.ndarray, add_zero: bool) -> np.ndarray:
        """h_out = h_mid + MLP(h_mid) for h f32 [d], h_mid = R(h + 0) when add_zero (a silent mixer's exact
        +0 added) else h."""
        h = _vec("MlpStep", "h", h, self.d)
        h_out = np.empty(self.d, np.float32)
        with self._lock:
            lib.qgpu_mlp_step(self.layer, _floats(h), int(bool(add_zero)), _floats(self._scratch), _floats(h_out))
        return h_out


class SparseMlpStep(MlpStep):
    """A CSR MLP's step (circuit layers): only its active units (SparseMlp: the units down_proj reads)."""

    def __init__(self, mlp: SparseMlp, norm_w: np.ndarray, eps: float, bf16: bool) -> None:
        self.mlp = mlp
        super().__init__(mlp.gate, mlp.up, mlp.down, norm_w, eps, bf16)


class GdnStep:
    """One DeltaNet layer's mixer for one token (decode) in one C call: kernels_ref.gdn_in, the delta rule as
    Model._delta_rule runs it (the same kernels), kernels_ref.gdn_out, bit for bit with the forward pass's
    separate calls. in_proj_qkv/z/b/a are all CSR (a circuit layer) or all dense (bf16 bits or QuantQ8), as
    is out_proj. The weights are described to C once (a qgpu_gdn_layer); activations and states are checked
    for shape and dtype only."""

    def __init__(self, w: dict, eps: float, bf16: bool, key_heads: int, key_dim: int) -> None:
        if step_weights([w[n] for n in ("qkv", "z", "b", "a")]) is None or step_weights([w["out"]]) is None:
            raise KernelInputError("GdnStep: in_proj_qkv, z, b and a must be all CSR or all dense")  # one dispatch
        self.d = w["qkv"].shape[1]
        self.c, self.nv, self.dv = w["qkv"].shape[0], w["b"].shape[0], w["gdn_norm"].shape[0]
        self.nk, self.dk = key_heads, key_dim
        if self.nv % self.nk or self.c != 2 * self.nk * self.dk + self.nv * self.dv \
                or w["z"].shape[0] != self.nv * self.dv:
            raise KernelInputError(f"GdnStep: {self.nv} value heads of {self.dv} and {self.nk} key heads of "
                                   f"{self.dk} do not fit in_proj_qkv {w['qkv'].shape} and in_proj_z {w['z'].shape}")
        self.eps, self.bf16 = float(eps), int(bool(bf16))
        self.conv_w = check_activation("GdnStep", "conv", w["conv"], (self.c, None))
        self.k = self.conv_w.shape[1]
        vecs = {"in_norm": (self.d,), "norm_w": (self.dv,), "a_log": (self.nv,), "dt_bias": (self.nv,),
                "conv_w": (self.c, self.k)}
        sources = {"in_norm": w["in_norm"], "norm_w": w["gdn_norm"], "a_log": w["A_log"], "dt_bias": w["dt_bias"],
                   "conv_w": self.conv_w}
        self.layer = ffi.new("qgpu_gdn_layer *")
        L, self._keep = self.layer, []
        for name, shape in vecs.items():
            buf = _floats(check_activation("GdnStep", name, sources[name], shape))
            self._keep.append(buf)
            setattr(L, name, buf)
        L.d, L.nk, L.dk, L.nv, L.dv, L.k = self.d, self.nk, self.dk, self.nv, self.dv, self.k
        L.eps, L.bf16, L.q_div = self.eps, self.bf16, float(np.float32(np.sqrt(self.dk)))
        for proj, name in ((L.qkv, "qkv"), (L.z, "z"), (L.b, "b"), (L.a, "a"), (L.out, "out")):
            _set_projection(proj, w[name], self._keep)
        self.scratch_size = int(lib.qgpu_gdn_scratch(self.d, self.nk, self.dk, self.nv, self.dv))
        self._scratch = np.empty(self.scratch_size + 1, np.float32)
        self._lock = threading.Lock()  # the scratch buffer is reused, one call at a time

    def check_state(self, conv_state: np.ndarray, S: np.ndarray, clean: np.ndarray) -> None:
        """The layer's conv state [c, k-1], S [nv, dk, dv] and clean flags int32 [nv], updated in place:
        float32/int32, contiguous, writable, of the layer's sizes (KernelInputError otherwise)."""
        for name, a, n in (("conv_state", conv_state, self.c * (self.k - 1)), ("S", S, self.nv * self.dk * self.dv)):
            if not _vec("GdnStep", name, a, n).flags.writeable:
                raise KernelInputError(f"GdnStep: {name} is updated in place, so it must be writable")
        _clean_flags("GdnStep", clean, self.nv)

    def __call__(self, h: np.ndarray, conv_state: np.ndarray, S: np.ndarray, clean: np.ndarray) -> np.ndarray:
        """h_out = R(h + mixer(h)) for h f32 [d]; conv_state [c, k-1], S [nv, dk, dv] and clean int32 [nv]
        (deltanet_step_sparse's flags) are updated in place."""
        h = _vec("GdnStep", "h", h, self.d)
        self.check_state(conv_state, S, clean)
        h_out = np.empty(self.d, np.float32)
        with self._lock:
            lib.qgpu_gdn_step(self.layer, _floats(h), _floats(conv_state), _floats(S),
                              ffi.from_buffer("int32_t[]", clean), _floats(self._scratch), _floats(h_out))
        return h_out


class DecodeBinding:
    """C pointers to one state's per-layer arrays (conv states, S, clean flags), for DecodeLayers. It
    remembers the arrays it points into; a copy of it is None (a copied state's arrays are new ones)."""

    def __init__(self, arrays: tuple, conv, S, clean) -> None:
        self.arrays, self.conv, self.S, self.clean = arrays, conv, S, clean

    def __copy__(self) -> None:
        return None

    def __deepcopy__(self, memo) -> None:
        return None


class DecodeLayers:
    """A stack of CSR DeltaNet layers (one GdnStep and one SparseMlpStep each) for one token in one C call
    (qgpu_decode_layers): the same steps, in the same order, as calling them one by one, without the
    interpreter between layers. silent[i]: layer i's mixer is provably silent on a +0 state (Model's
    silent_mixers)."""

    def __init__(self, gdn: list, mlp: list, silent: list[bool]) -> None:
        if not (len(gdn) == len(mlp) == len(silent)) or not gdn:
            raise KernelInputError(f"DecodeLayers: {len(gdn)} mixers, {len(mlp)} MLPs, {len(silent)} flags")
        self.d = mlp[0].d
        if any(s.d != self.d for s in (*gdn, *mlp)):
            raise KernelInputError("DecodeLayers: the layers' hidden sizes differ")
        self.n, self._steps = len(gdn), (gdn, mlp)
        self._gdn = ffi.new("qgpu_gdn_layer *[]", [s.layer for s in gdn])
        self._mlp = ffi.new("qgpu_mlp_layer *[]", [s.layer for s in mlp])
        self._silent = np.asarray(silent, np.int32)
        self._silent_ptr = ffi.from_buffer("int32_t[]", self._silent)  # constant: taken once, not per token
        size = 2 * self.d + max(s.scratch_size for s in (*gdn, *mlp))
        self._scratch = np.empty(size + 1, np.float32)
        self._lock = threading.Lock()

    def bind(self, conv: list, S: list, clean: list) -> DecodeBinding:
        """Pointers to a state's arrays, each checked as GdnStep checks it."""
        for step, c, s, f in zip(self._steps[0], conv, S, clean):
            step.check_state(c, s, f)
        if not (len(conv) == len(S) == len(clean) == self.n):
            raise KernelInputError(f"DecodeLayers: {self.n} layers, states for {len(conv)}/{len(S)}/{len(clean)}")
        return DecodeBinding(tuple((*conv, *S, *clean)), ffi.new("float *[]", [_floats(a) for a in conv]),
                             ffi.new("float *[]", [_floats(a) for a in S]),
                             ffi.new("int32_t *[]", [ffi.from_buffer("int32_t[]", a) for a in clean]))

    def __call__(self, h: np.ndarray, binding: DecodeBinding, zero: np.ndarray) -> np.ndarray:
        """h f32 [d] through every layer: the output [d]. zero int32 [n] (1: that layer's state is still all
        +0) is updated in place, as the states are."""
        h = _vec("DecodeLayers", "h", h, self.d).copy()
        if not isinstance(zero, np.ndarray) or zero.dtype != np.int32 or zero.shape != (self.n,) \
                or not zero.flags.c_contiguous:
            raise KernelInputError(f"DecodeLayers: zero must be a contiguous int32 array [{self.n}], "
                                   f"got {describe_arg(zero)}")
        with self._lock:
            lib.qgpu_decode_layers(self.n, self._gdn, self._mlp, self._silent_ptr,
                                   ffi.from_buffer("int32_t[]", zero), binding.conv, binding.S, binding.clean,
                                   _floats(h), _floats(self._scratch))
        return h
