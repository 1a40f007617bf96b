"""bfloat16 carried as raw uint16 bit patterns (NumPy has no bf16 dtype).

A bf16 value is the top 16 bits of the float32 with the same value, so widening is a 16-bit shift and
narrowing is a rounding of the low 16 bits (round to nearest, ties to even, as torch and hardware do).
"""
import numpy as np

from qgpu_min.errors import QgpuError


class BF16Error(QgpuError, TypeError):
    """An array handed to a bf16 conversion has the wrong dtype."""


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 values (exact; any shape)."""
    bits = np.asarray(bits)
    if bits.dtype != np.uint16:
        raise BF16Error(f"bf16_to_f32 needs uint16 bit patterns, got dtype {bits.dtype}")
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values -> uint16 bf16 bit patterns, rounding to nearest with ties to even.

    Finite values too large for bf16 round to +-inf, as IEEE rounding says. A NaN stays a NaN: its sign and
    top payload bits are kept and the quiet bit is set, so truncation can never turn it into an infinity.
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise BF16Error(f"f32_to_bf16 needs float32 values, got dtype {x.dtype} (convert explicitly first)")
    bits = x.view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit rounds to nearest and breaks ties towards an even result.
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    quiet_nan = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(np.isnan(x), quiet_nan, rounded).astype(np.uint16)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bf16 value, still as float32 (for the bf16-emulation mode).

    Same bits as bf16_to_f32(f32_to_bf16(x)), in fewer passes: the bf16 mode calls this hundreds of times
    per token.
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        raise BF16Error(f"round_bf16 needs float32 values, got dtype {x.dtype} (convert explicitly first)")
    bits = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
    out = bits + np.uint32(0x7FFF)
    out += (bits >> np.uint32(16)) & np.uint32(1)
    out &= np.uint32(0xFFFF0000)
    nan = np.isnan(bits.view(np.float32))
    if nan.any():
        out[nan] = (bits[nan] | np.uint32(0x00400000)) & np.uint32(0xFFFF0000)
    return out.view(np.float32).reshape(x.shape)
