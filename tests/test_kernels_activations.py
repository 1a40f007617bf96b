"""The C core's activations (csrc/activations.c) against NumPy references that do not share their method.

The core's exp is its own polynomial in double precision; the reference is NumPy's float64 exp rounded once
to float32, i.e. the correctly rounded result (a different algorithm, libm's or NumPy's SIMD one, and
different arithmetic), so equality bit for bit says the core's exp is correctly rounded on these inputs.
SiLU, sigmoid, the DeltaNet gate and l2norm are then checked against their kernels_ref formulas."""
import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R

from ccore_fixtures import isa  # noqa: F401  (pytest fixture: each SIMD level the CPU has)

EDGES = np.array([0.0, -0.0, 1e-30, -1e-30, 1.0, -1.0, 20.0, 88.72283, 88.72284, 88.8, 89.0, 89.01, 1e10,
                  -87.3, -103.97, -103.98, -104.0, -104.01, -1e10, np.inf, -np.inf, np.nan, -np.nan,
                  np.float32(2 ** -149), 64.0, -64.0, 128.0, -128.0], np.float32)


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32)


def test_exp_is_correctly_rounded_on_random_and_edge_inputs(isa):
    rng = np.random.default_rng(0)
    x = np.concatenate([EDGES, rng.uniform(-110, 95, 400_000), rng.standard_normal(200_000) * 4,
                        rng.standard_normal(100_000) * 1e-6]).astype(np.float32)
    got, want = K.exp(x), R.exp(x)
    same = (_bits(got) == _bits(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])
    assert K.exp(np.float32([0.0]))[0] == 1.0 and K.exp(np.float32([-104.5]))[0] == 0.0


@pytest.mark.parametrize("fn", ["silu", "sigmoid"])
def test_silu_and_sigmoid_equal_their_formula_bit_for_bit(fn, isa):
    rng = np.random.default_rng(1)
    x = np.concatenate([EDGES, rng.standard_normal(50_000) * 30]).astype(np.float32).reshape(-1, 4)
    got = getattr(K, fn)(x)
    with np.errstate(all="ignore"):
        want = getattr(R, fn)(x)
    assert got.shape == x.shape
    same = (_bits(got) == _bits(want)) | (np.isnan(got) & np.isnan(want))
    assert same.all()
    if fn == "silu":  # zero blocks are copied: +0, -0 and a lone nonzero among them keep their bits
        z = np.zeros(1000, np.float32)
        z[200:300] = -0.0
        z[650] = -3.5
        assert np.array_equal(_bits(K.silu(z)), _bits(R.silu(z)))
    if fn == "silu":  # what the circuit relies on: silu(64 n) = 64 n, exactly -0 far below zero
        assert K.silu(np.float32([64, 128, -128, -90]))[:2].tolist() == [64, 128]
        assert all(np.signbit(v) and v == 0 for v in K.silu(np.float32([-128, -90])))


def test_deltanet_gate_matches_its_formula():
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((7, 5)) * 15).astype(np.float32)
    a[0, :3] = [25.0, 20.0, -np.inf]
    a_log, dt = rng.standard_normal(5).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    got, want = K.deltanet_gate(a, a_log, dt), R.deltanet_gate(a, a_log, dt)
    assert np.array_equal(_bits(got), _bits(want))
    with pytest.raises(K.KernelInputError, match="A_log"):
        K.deltanet_gate(a, a_log[:4], dt)


def test_l2norm_agrees_with_the_reference_to_an_ulp():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 3, 128)).astype(np.float32)
    for divisor in (1.0, float(np.float32(np.sqrt(128)))):
        got, want = K.l2norm(x, 1e-6, divisor), R.l2norm(x, 1e-6, divisor)
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
    one_hot = np.zeros((2, 128), np.float32)
    one_hot[:, 5] = [3.0, -0.5]
    assert np.array_equal(K.l2norm(one_hot), R.l2norm(one_hot))  # one term: no order to differ in


@pytest.mark.parametrize("fn", ["exp", "silu", "sigmoid"])
def test_bad_inputs_are_named_and_views_are_read_correctly(fn):
    with pytest.raises(K.KernelInputError, match=f"{fn}: x must be a float32 array"):
        getattr(K, fn)(np.zeros(4, np.float64))
    x = np.arange(-12, 12, dtype=np.float32).reshape(4, 6)[:, ::2]  # a strided view is copied, not misread
    with np.errstate(all="ignore"):
        assert np.array_equal(_bits(getattr(K, fn)(x)), _bits(getattr(R, fn)(np.ascontiguousarray(x))))
    with pytest.raises(K.KernelInputError, match="l2norm"):
        K.l2norm(np.zeros((2, 0), np.float32))


def test_round_bf16_in_c_equals_the_numpy_rounding_on_random_bit_patterns(isa):
    # every kind of float at every SIMD level: random patterns (NaN payloads, subnormals, infs included),
    # exact ties (low half 0x8000) and the values next to them, in lengths that leave vector tails
    from qgpu_min.model.bf16 import round_bf16
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2 ** 32, 300_000, dtype=np.uint64).astype(np.uint32)
    ties = (bits[:60_000] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    bits = np.concatenate([bits, ties, ties - np.uint32(1), ties + np.uint32(1), np.uint32([0x7F7FFFFF, 0xFF7FFFFF])])
    for n in (len(bits), 7, 33):
        x = bits[:n].view(np.float32)
        assert np.array_equal(_bits(K.round_bf16(x)), _bits(round_bf16(x)))


def test_round_bf16_in_c_equals_the_numpy_rounding_for_any_shape():
    from qgpu_min.model.bf16 import round_bf16
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 50, 7)) * 1e3).astype(np.float32)
    x.reshape(-1)[:7] = [np.nan, -np.nan, np.inf, -np.inf, 3.4028235e38, 1.00390625, -0.0]
    for a in (x, x[:, ::3], x[0, 0], np.float32(1.00390625)):
        got, want = K.round_bf16(a), round_bf16(a)
        assert np.shape(got) == np.shape(want) and np.array_equal(np.asarray(got).view(np.uint32),
                                                                   np.asarray(want).view(np.uint32))
    before = x.copy()
    assert K.round_bf16(x) is not x and np.array_equal(_bits(x), _bits(before))  # the input is left as it was
    with pytest.raises(K.KernelInputError, match="round_bf16"):
        K.round_bf16(np.zeros(3, np.float64))
