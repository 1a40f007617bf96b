"""Bad kernel arguments: a clear KernelInputError naming the argument, and nothing changed."""
import numpy as np
import pytest

from qgpu_min.errors import QgpuError
from qgpu_min.model import kernels as K

W = np.zeros((4, 6), np.uint16)
X = np.zeros(6, np.float32)


@pytest.mark.parametrize("call, message", [
    (lambda: K.matvec_bf16(W.astype(np.float32), X), "w_bits must be a 2-D uint16"),
    (lambda: K.matvec_bf16(W[None], X), "w_bits must be a 2-D uint16"),
    (lambda: K.matvec_bf16(np.zeros((4, 12), np.uint16)[:, ::2], X), "not C-contiguous"),
    (lambda: K.matvec_bf16(W, X.astype(np.float64)), "x must be a float32"),
    (lambda: K.matvec_bf16(W, np.zeros(5, np.float32)), r"x has shape \(5,\), expected \(6,\)"),
    (lambda: K.matmul_bf16(W, X), r"x has shape \(6,\), expected \(\*, 6\)"),
    (lambda: K.matvec_bf16([[1, 2]], X), "got list"),
    (lambda: K.deltanet_gate(np.float32(1), np.zeros(1, np.float32), np.zeros(1, np.float32)),
     "a must be a float32 array, got a NumPy float32 scalar"),
    (lambda: K.sparse_matvec(W, X), "must be a SparseBF16"),
    (lambda: K.rmsnorm(X, np.zeros(5, np.float32), 1e-6, True), r"w has shape \(5,\)"),
    (lambda: K.rmsnorm(np.zeros((2, 0), np.float32), np.zeros(0, np.float32), 1e-6, True), "d >= 1"),
    (lambda: K.gated_rmsnorm(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32),
                             np.zeros(3, np.float32), 1e-6), "z has shape"),
    (lambda: K.set_isa("sse9"), "unknown level"),
    (lambda: K.set_threads(0), "positive int"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(K.KernelInputError, match=message):
        call()


def test_error_class():
    assert issubclass(K.KernelInputError, QgpuError) and issubclass(K.KernelInputError, ValueError)


def _delta_args(h=2, dk=3, dv=4):
    f = np.float32
    return (np.zeros((h, dk), f), np.zeros((h, dk), f), np.ones((h, dv), f), np.zeros(h, f), np.ones(h, f))


def test_deltanet_bad_input_changes_nothing():
    S = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    before = S.copy()
    q, k, v, g, beta = _delta_args()
    with pytest.raises(K.KernelInputError, match=r"v has shape \(2, 5\)"):
        K.deltanet_step(S, q, k, np.ones((2, 5), np.float32), g, beta)
    with pytest.raises(K.KernelInputError, match="beta must be a float32"):
        K.deltanet_step(S, q, k, v, g, beta.astype(np.float64))
    assert np.array_equal(S, before)


def test_in_place_arrays_must_be_contiguous_and_writable():
    q, k, v, g, beta = _delta_args()
    S = np.zeros((2, 3, 8), np.float32)[:, :, ::2]
    with pytest.raises(K.KernelInputError, match="S is updated in place"):
        K.deltanet_step(S, q, k, v, g, beta)
    S = np.zeros((2, 3, 4), np.float32)
    S.flags.writeable = False
    with pytest.raises(K.KernelInputError, match="S is updated in place"):
        K.deltanet_step(S, q, k, v, g, beta)
    with pytest.raises(K.KernelInputError, match="S must be a float32 array"):
        K.deltanet_step(np.zeros((2, 3)), q, k, v, g, beta)


def test_conv_update_bad_input_changes_nothing():
    state = np.ones((3, 3), np.float32)
    with pytest.raises(K.KernelInputError, match=r"x has shape \(4,\)"):
        K.conv_update(state, np.zeros(4, np.float32), np.zeros((3, 4), np.float32))
    with pytest.raises(K.KernelInputError, match=r"conv_state has shape \(3, 3\), expected \(3, 2\)"):
        K.conv_update(state, np.zeros(3, np.float32), np.zeros((3, 3), np.float32))
    assert np.array_equal(state, np.ones((3, 3), np.float32))


def test_non_contiguous_activation_is_accepted():
    rng = np.random.default_rng(0)
    w = rng.integers(0, 2**16, size=(5, 6), dtype=np.uint16) & np.uint16(0x3FFF)  # finite values
    x2 = rng.standard_normal((6, 2)).astype(np.float32)
    assert np.array_equal(K.matvec_bf16(w, x2[:, 0]), K.matvec_bf16(w, np.ascontiguousarray(x2[:, 0])))
