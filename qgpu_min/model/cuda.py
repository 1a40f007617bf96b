"""The optional CUDA path (`--device cuda`): the layers' dense bf16 products on an NVIDIA GPU.

Never a requirement: `library()` builds cuda_products.cu with nvcc (found on PATH, in $CUDA_HOME/bin or
/usr/local/cuda/bin) into <user cache>/cuda/qgpu_cuda-<key>.so on first use (the key hashes the source and
nvcc's version, so an edit or another toolkit rebuilds) and loads it with cffi. Without nvcc, or without a
GPU, asking for the device is an error that says which; nothing else in the package imports this module.

`CudaProducts` offers the dense products of `kernels` with the same signatures. A Model made with
device="cuda" calls them for its layers' projections: each dense weight is uploaded at its first product and
stays on the GPU; CSR weights (a circuit's layers, so those stay bit-identical), the recurrences, the norms
and the LM head run on the CPU as before. Results are fp32 sums in the GPU kernel's own order, so they agree
with the CPU's within fp32 summation error (tests/test_cuda_path.py, run where a GPU is present).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..files import user_cache_root
from . import kernels
from .errors import CudaError

SOURCE = Path(__file__).with_name("cuda_products.cu")
CDEF = """
const char *qgpu_cuda_error(void);
int qgpu_cuda_devices(void);
int qgpu_cuda_device_name(char *name, size_t size);
void *qgpu_cuda_upload(const void *host, size_t bytes);
int qgpu_cuda_free(void *dev);
int qgpu_cuda_matmul_bf16(const void *w, size_t out, size_t in, const float *x, size_t n, float *y);
"""


def find_nvcc() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME/bin (or $CUDA_PATH/bin), else /usr/local/cuda/bin; None if absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        candidate = Path(home) / "bin" / "nvcc" if home else None
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def build(nvcc: str | None = None, cache_dir: Path | None = None) -> Path:
    """The CUDA path's shared library, compiled now unless this source and nvcc built it before."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise CudaError("--device cuda builds its library with nvcc (the CUDA toolkit), and none was found on "
                        "PATH, in $CUDA_HOME/bin or in /usr/local/cuda/bin")
    try:
        version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise CudaError(f"cannot run {nvcc}: {e}") from None
    key = hashlib.sha256(SOURCE.read_bytes() + version.encode()).hexdigest()[:16]
    out = (cache_dir or user_cache_root() / "cuda") / f"qgpu_cuda-{key}.so"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    print(f"building the CUDA path with {nvcc} (once; cached in {out.parent}) ...", file=sys.stderr)
    proc = subprocess.run([nvcc, "-O3", "-shared", "-Xcompiler", "-fPIC", "-o", str(tmp), str(SOURCE)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise CudaError(f"nvcc could not build the CUDA path ({nvcc}, exit {proc.returncode}):\n"
                        f"{proc.stderr[-2000:]}")
    os.replace(tmp, out)  # another process building at once renames a whole file too
    return out


_loaded: tuple | None = None
_load_lock = threading.Lock()


def library() -> tuple:
    """(ffi, lib) of the built library, loaded once per process."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            from cffi import FFI
            ffi = FFI()
            ffi.cdef(CDEF)
            try:
                _loaded = (ffi, ffi.dlopen(str(build())))
            except OSError as e:
                raise CudaError(f"cannot load the CUDA path's library: {e}") from None
        return _loaded


class CudaProducts:
    """kernels.matvec_bf16, matmul_bf16 and their _multi forms, with dense bf16 weights on GPU 0."""

    def __init__(self) -> None:
        self.ffi, self.lib = library()
        count = self.lib.qgpu_cuda_devices()
        if count < 0:
            raise CudaError(f"--device cuda: no usable CUDA device ({self._error()})")
        if count == 0:
            raise CudaError("--device cuda: no CUDA device is visible to this process")
        name = self.ffi.new("char[256]")
        self.device_name = self.ffi.string(name).decode() if self.lib.qgpu_cuda_device_name(name, 256) == 0 else "?"
        # id(weight) -> (the weight, kept alive so its id is never reused, its device copy)
        self._on_device: dict[int, tuple[np.ndarray, object]] = {}
        self._lock = threading.Lock()

    def _error(self) -> str:
        return self.ffi.string(self.lib.qgpu_cuda_error()).decode(errors="replace")

    def _device_weight(self, w: np.ndarray) -> object:
        with self._lock:
            hit = self._on_device.get(id(w))
            if hit is not None and hit[0] is w:
                return hit[1]
            ptr = self.lib.qgpu_cuda_upload(self.ffi.from_buffer("uint16_t[]", w), w.nbytes)
            if ptr == self.ffi.NULL:
                raise CudaError(f"uploading a {w.shape[0]}x{w.shape[1]} weight to the GPU: {self._error()}")
            self._on_device[id(w)] = (w, ptr)
            return ptr

    def matmul_bf16(self, w_bits: kernels.Weight, x: np.ndarray, bf16_x: bool = False,
                    bf16_y: bool = False, prompt: bool = False) -> np.ndarray:
        """kernels.matmul_bf16 on the GPU for a dense bf16 weight (CSR and Q8 weights: the CPU's). The GPU
        computes a prompt's rows (prompt=True) as any other's."""
        if not isinstance(w_bits, np.ndarray):
            return kernels.matmul_bf16(w_bits, x, bf16_x, bf16_y, prompt)
        w = kernels.check_weight("matmul_bf16", w_bits)
        out, n_in = w.shape
        x = kernels.check_activation("matmul_bf16", "x", x, (None, n_in))
        if bf16_x:
            kernels.check_bf16_values("matmul_bf16", x)
        y = np.empty((x.shape[0], out), np.float32)
        if self.lib.qgpu_cuda_matmul_bf16(self._device_weight(w), out, n_in, self.ffi.from_buffer("float[]", x),
                                          x.shape[0], self.ffi.from_buffer("float[]", y)):
            raise CudaError(f"a {out}x{n_in} product on the GPU failed: {self._error()}")
        return kernels.round_bf16(y) if bf16_y else y

    def matvec_bf16(self, w_bits: kernels.Weight, x: np.ndarray, bf16_x: bool = False,
                    bf16_y: bool = False) -> np.ndarray:
        if not isinstance(w_bits, np.ndarray):
            return kernels.matvec_bf16(w_bits, x, bf16_x, bf16_y)
        w = kernels.check_weight("matvec_bf16", w_bits)
        x = kernels.check_activation("matvec_bf16", "x", x, (w.shape[1],))
        return self.matmul_bf16(w, x[None], bf16_x, bf16_y)[0]

    def matmul_bf16_multi(self, ws: Sequence[kernels.Weight], x: np.ndarray, bf16_x: bool = False,
                          bf16_y: bool = False, prompt: bool = False) -> list[np.ndarray]:
        return [self.matmul_bf16(w, x, bf16_x, bf16_y, prompt) for w in ws]

    def matvec_bf16_multi(self, ws: Sequence[kernels.Weight], x: np.ndarray, bf16_x: bool = False,
                          bf16_y: bool = False) -> list[np.ndarray]:
        return [self.matvec_bf16(w, x, bf16_x, bf16_y) for w in ws]

    def close(self) -> None:
        """Free the weights' device copies (a later product uploads them again)."""
        with self._lock:
            for _, ptr in self._on_device.values():
                self.lib.qgpu_cuda_free(ptr)
            self._on_device.clear()
