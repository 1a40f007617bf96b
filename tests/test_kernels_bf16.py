"""bf16 conversions: exact widening, round-to-nearest-even narrowing, specials."""
import numpy as np
import pytest

from qgpu_min.errors import QgpuError
from qgpu_min.model.bf16 import BF16Error, bf16_to_f32, f32_to_bf16, round_bf16


def _nearest_even_bf16(x: np.ndarray) -> np.ndarray:
    """Independent rounding for finite x: pick the nearer of the two bf16 neighbours in float64."""
    bits = x.view(np.uint32)
    lo = (bits >> 16).astype(np.uint32)  # truncation toward zero in magnitude
    hi = lo + 1
    lo_val = (lo << 16).view(np.float32).astype(np.float64)
    hi_val = (hi << 16).view(np.float32).astype(np.float64)
    # Past the largest bf16, IEEE rounding compares with 2^128, the next value the format would have.
    hi_val = np.where(np.isinf(hi_val), np.sign(hi_val) * 2.0**128, hi_val)
    d_lo = np.abs(x.astype(np.float64) - lo_val)
    d_hi = np.abs(hi_val - x.astype(np.float64))
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (lo % 2 == 1))
    return np.where(pick_hi, hi, lo).astype(np.uint16)


def test_widening_is_exact_for_every_pattern():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f = bf16_to_f32(bits)
    assert f.dtype == np.float32
    assert np.array_equal(f.view(np.uint32), bits.astype(np.uint32) << 16)


def test_round_trip_keeps_every_non_nan_pattern():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    f = bf16_to_f32(bits)
    keep = ~np.isnan(f)
    assert np.array_equal(f32_to_bf16(f)[keep], bits[keep])


def test_random_values_round_to_nearest_even():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = x[np.isfinite(x)]
    assert np.array_equal(f32_to_bf16(x), _nearest_even_bf16(x))


@pytest.mark.parametrize("value, expected", [
    (1.0 + 2**-8, 0x3F80),        # exact tie between 0x3F80 and 0x3F81: to even, down
    (1.0 + 3 * 2**-8, 0x3F82),    # exact tie between 0x3F81 and 0x3F82: to even, up
    (1.0 + 2**-8 + 2**-20, 0x3F81),  # just above the tie: up
    (-(1.0 + 2**-8), 0xBF80),
    (3.0e38, 0x7F62),              # 0x7F61B1E6 rounds up
    (3.4e38, 0x7F80),              # above the largest bf16 by more than half an ulp: +inf
    (np.inf, 0x7F80), (-np.inf, 0xFF80), (0.0, 0x0000), (-0.0, 0x8000),
    (1e-40, 0x0001),               # subnormal: 1e-40 = 0x000116C2 rounds down
])
def test_specific_roundings(value, expected):
    assert int(f32_to_bf16(np.array([value], dtype=np.float32))[0]) == expected


def test_nan_stays_nan_with_its_sign():
    nan_bits = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF], dtype=np.uint32)
    out = f32_to_bf16(nan_bits.view(np.float32))
    assert np.isnan(bf16_to_f32(out)).all()
    assert list(out >> 15) == [0, 1, 0, 0]


def test_round_bf16_rounds_and_keeps_shape():
    x = np.array([[1.0 + 2**-8, 1.0 + 3 * 2**-8], [2.5, -7.0]], dtype=np.float32)
    y = round_bf16(x)
    assert y.dtype == np.float32 and y.shape == (2, 2)
    assert y.tolist() == [[1.0, 1.0 + 2**-6], [2.5, -7.0]]


def test_wrong_dtypes_are_errors():
    with pytest.raises(BF16Error, match="uint16"):
        bf16_to_f32(np.zeros(3, dtype=np.int16))
    with pytest.raises(BF16Error, match="float32"):
        f32_to_bf16(np.zeros(3, dtype=np.float64))
    assert issubclass(BF16Error, QgpuError)


def test_round_bf16_equals_the_conversion_round_trip_on_every_kind_of_bit_pattern():
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    # zeros, infinities, NaNs (quiet, signalling, negative), the largest finite values, exact ties
    bits[:12] = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFFFFFFF,
                 0x7F7FFFFF, 0x7F800001, 0x00008000, 0x00018000, 0x3F808000, 0x7FBFFFFF]
    x = bits.view(np.float32).reshape(400, 500)[:, ::2]  # strided, 2-D
    expected = bf16_to_f32(f32_to_bf16(np.ascontiguousarray(x)))
    got = round_bf16(x)
    assert got.shape == x.shape
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert round_bf16(np.float32(1.00390625)).shape == ()
