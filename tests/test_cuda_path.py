"""The optional CUDA path (--device cuda, qgpu_min/model/cuda.py): clear errors wherever it cannot run, the
build wherever nvcc exists, and on a machine with a GPU its products and a model's logits against the CPU's.
"""
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.model import cuda, kernels as K, load_model
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16, round_bf16
from qgpu_min.model.errors import CudaError, ModelInputError
from qgpu_min.model.synthetic import write_synthetic_checkpoint

from test_kernels_dense import _summation_bound

NVCC = cuda.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc here: the CUDA path is not built")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_synthetic_checkpoint(tmp_path_factory.mktemp("tiny"), seed=3)


@pytest.fixture(scope="module")
def gpus(tmp_path_factory) -> int:
    """GPUs the built library sees (the build lands in a temporary user cache); -1 if the runtime cannot tell."""
    if NVCC is None:
        pytest.skip("no nvcc here: the CUDA path is not built")
    cache = tmp_path_factory.mktemp("xdg")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        _, lib = cuda.library()
        return lib.qgpu_cuda_devices()


@pytest.fixture
def products(gpus) -> cuda.CudaProducts:
    if gpus <= 0:
        pytest.skip("no CUDA device here")
    return cuda.CudaProducts()


def test_device_names_are_checked(tiny):
    with pytest.raises(ModelInputError, match="device must be one of cpu, cuda, not 'tpu'"):
        load_model(tiny, device="tpu")


def test_quantizing_for_the_gpu_is_refused_before_loading(tiny):
    with pytest.raises(ModelInputError, match="runs on the CPU only"):
        load_model(tiny, quant="int8", device="cuda")


def test_without_nvcc_the_error_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda, "find_nvcc", lambda: None)
    with pytest.raises(CudaError, match="nvcc .* none was found"):
        cuda.build(cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())


def test_a_compile_error_is_reported_and_leaves_no_file(tmp_path, monkeypatch):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo fake 1.0; exit 0; }\necho 'boom: no such arch' >&2\n"
                    "exit 2\n")
    fake.chmod(0o755)
    out = tmp_path / "cache"
    with pytest.raises(CudaError, match="(?s)could not build the CUDA path.*exit 2.*boom: no such arch"):
        cuda.build(str(fake), cache_dir=out)
    assert not list(out.iterdir())


@needs_nvcc
def test_nvcc_builds_the_library_once(tmp_path):
    first = cuda.build(cache_dir=tmp_path)
    assert first.is_file() and first.stat().st_size > 0
    stamp = first.stat().st_mtime_ns
    assert cuda.build(cache_dir=tmp_path) == first and first.stat().st_mtime_ns == stamp  # cached
    from cffi import FFI
    ffi = FFI()
    ffi.cdef(cuda.CDEF)
    lib = ffi.dlopen(str(first))
    assert lib.qgpu_cuda_devices() >= -1  # it loads and answers, GPU or not


@pytest.mark.parametrize("extra, message", [
    (["--backend", "interp"], "--device apply to --backend circuit or model"),
    (["--backend", "circuit"], "--device applies to --backend model"),
    (["--backend", "model", "--model", ".", "--quant", "int8"], "--quant runs on the CPU only"),
])
def test_run_takes_a_device_only_for_the_merged_checkpoints_dense_layers(extra, message):
    from click.testing import CliRunner

    from qgpu_min.cli import main
    dot = Path(__file__).resolve().parent.parent / "examples" / "dot.cu"
    r = CliRunner().invoke(main, ["run", str(dot), "--arg", "[1]", "--arg", "[2]", "--arg", "zeros(1)",
                                  "--arg", "1", "--device", "cuda", *extra])
    assert r.exit_code == 2 and message in r.output


def test_the_launch_backend_checks_the_device_before_loading():
    from qgpu_min.gpu.backend import merged
    from qgpu_min.host.backend import LaunchError
    with pytest.raises(LaunchError, match="device 'tpu'"):
        merged(".", device="tpu")
    with pytest.raises(LaunchError, match="runs on the CPU only"):
        merged(".", quant="int8", device="cuda")


def test_without_a_gpu_asking_for_one_is_a_clear_error(gpus, tiny, monkeypatch, tmp_path):
    if gpus > 0:
        pytest.skip("a CUDA device is present")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(CudaError, match="--device cuda: no (usable )?CUDA device"):
        load_model(tiny, device="cuda")


# ---- with a GPU (the device machine): results against the CPU's ----------------------------------------------

@pytest.mark.parametrize("out, n_in, n", [(1, 1, 1), (33, 100, 5), (130, 513, 9), (64, 2048, 17), (300, 64, 1)])
def test_gpu_products_are_within_summation_error_and_rows_equal_matvec(products, out, n_in, n):
    rng = np.random.default_rng(out + n_in + n)
    w = f32_to_bf16(rng.standard_normal((out, n_in)).astype(np.float32))
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    y = products.matmul_bf16(w, x)
    assert y.shape == (n, out) and y.dtype == np.float32
    assert np.all(np.abs(y.astype(np.float64) - R.matmul_bf16(w, x)) <= _summation_bound(w, x))
    for t in range(n):
        assert np.array_equal(products.matvec_bf16(w, x[t]).view(np.uint32), y[t].view(np.uint32))
    xb = round_bf16(x)
    assert np.array_equal(products.matmul_bf16(w, xb, True, True), round_bf16(products.matmul_bf16(w, xb)))
    with pytest.raises(K.KernelInputError, match="not a bf16 value"):
        products.matmul_bf16(w, x + np.float32(2**-12), bf16_x=True)


def test_gpu_keeps_sparse_and_q8_weights_on_the_cpu(products):
    rng = np.random.default_rng(1)
    w = f32_to_bf16(rng.standard_normal((40, 64)).astype(np.float32))
    w[:, ::2] = 0
    sparse = R.maybe_sparse(w, max_density=1.0)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    assert np.array_equal(products.matmul_bf16(sparse, x), K.matmul_bf16(sparse, x))
    q8 = K.quantize_q8(w)
    assert np.array_equal(products.matmul_bf16(q8, x), K.matmul_bf16(q8, x))


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_gpu_model_logits_agree_with_the_cpu(products, tiny, mode):
    ids = [5, 17, 300, 42, 9, 100]
    cpu, gpu = load_model(tiny, mode), load_model(tiny, mode, device="cuda")
    a, b = cpu.prefill(cpu.new_state(), ids, all_logits=True), gpu.prefill(gpu.new_state(), ids, all_logits=True)
    scale = np.abs(a).max()
    assert np.abs(a - b).max() <= (1e-4 if mode == "fp32" else 2e-2) * scale
    np.testing.assert_array_equal(a.argmax(-1), b.argmax(-1))
