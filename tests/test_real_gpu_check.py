"""tools/real_gpu_check.py without a GPU: argument mapping, comparison, classification, the dry-run path, a
stand-in GPU (the interpreter fed the CuPy-side arguments) and the child-process runner's timeouts and errors."""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import real_gpu_check as rgc  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

# (case id, shape) -> launch, for a few cases that cover the mapping's corners
PICK = {("vec_add", "g2x1-b7x1"), ("bytes-brighten", "g2x1-b7x1"), ("bytes-narrow", "g1x1-b3x1"),
        ("compact", "g3x1-b8x1"), ("device_ticket", "g2x1-b7x1"), ("idioms-fma_sizet", "g3x1-b8x1"),
        ("atomic64", "g3x1-b8x1"), ("warp_scan", "g1x1-b32x1"), ("cross_warp-shared_flag", "g1x1-b8x1"),
        ("cross_warp-warp_chain", "g1x1-b12x1"), ("warp_sum32-warp_sum32", "g1x1-b32x1")}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    launches = [l for l in rgc.all_launches() if (l.case.id, l.shape) in PICK]
    assert len(launches) == len(PICK)
    compiled = rgc.compile_all(launches, tmp_path_factory.mktemp("cubins"), "sm_90")
    return {l.case.id: l for l in launches}, compiled


def test_gpu_args_types(prepared) -> None:
    by_id, compiled = prepared
    l = by_id["idioms-fma_sizet"]
    k = compiled[(l.path, l.kernel_name)]
    args = rgc.gpu_args(k, l.args)
    assert [a.dtype for a in args[:3]] == [np.int32] * 3 and type(args[3]) is np.uint64 and args[3] == l.args[3]
    l = by_id["bytes-brighten"]
    k = compiled[(l.path, l.kernel_name)]
    args = rgc.gpu_args(k, l.args)
    assert args[0].dtype == np.uint8 and type(args[3]) is np.uint32
    assert int(args[3]) == l.args[3] % 2**32        # a negative delta travels as its 32-bit word
    l = by_id["atomic64"]
    assert rgc.gpu_args(compiled[(l.path, l.kernel_name)], l.args)[1].dtype == np.uint64
    assert rgc.to_dtype(np.array([-1, 2**31, 255]), True, 4).tolist() == [-1, -2**31, 255]
    assert rgc.to_dtype(np.array([-1, 256]), False, 1).tolist() == [255, 0]


def test_first_diff() -> None:
    from qgpu_min.host.launch import ParamInfo
    params = [ParamInfo("a", "ptr", True, 4), ParamInfo("n", "scalar", True), ParamInfo("b", "ptr", False, 8)]
    a, b = np.array([1, -1, 3]), np.array([2**64 - 1], dtype=np.uint64)
    assert rgc.first_diff([a, b], [np.array([1, 2**32 - 1, 3]), np.array([-1])], params, {}, [0, 2]) is None
    msg = rgc.first_diff([a, b], [np.array([1, 5, 3]), np.array([-1])], params, {}, [0, 2])
    assert msg.startswith("a[1]: 0xffffffff vs 0x5 (1 of 3 differ)")
    assert rgc.first_diff([np.array([3, 1, 2, 9])], [np.array([1, 2, 3, 9])], params, {0: 3}, [0]) is None
    assert "a[3]" in rgc.first_diff([np.array([3, 1, 2, 8])], [np.array([1, 2, 3, 9])], params, {0: 3}, [0])


def test_kernel_ptx_and_classify(prepared) -> None:
    by_id, compiled = prepared
    for l in by_id.values():
        l.kernel = compiled[(l.path, l.kernel_name)]
    flag = by_id["cross_warp-shared_flag"]
    assert "WARP_SZ" in flag.kernel.ptx and "WARP_SZ" not in rgc.kernel_ptx(flag.kernel.ptx, flag.kernel.entry)
    assert rgc.classify(flag) == ("compare", "")
    assert rgc.classify(by_id["warp_scan"])[0] == "warp"
    assert rgc.classify(by_id["cross_warp-warp_chain"])[0] == "skip"
    assert rgc.classify(by_id["warp_sum32-warp_sum32"])[0] == "numpy-only"
    assert rgc.classify(by_id["vec_add"]) == ("compare", "")


class InterpAsGpu:
    """A stand-in GPU: the interpreter run on the arguments exactly as CuPy would get them, its arrays returned
    in the GPU's element types; ``poke`` changes one output word, as a wrong GPU would."""

    def __init__(self, launch, poke: bool = False):
        self.launch, self.poke = launch, poke

    def run(self, job: dict) -> list:
        from qgpu_min.host.launch import launch
        args = [a.astype(np.int64) if isinstance(a, np.ndarray) else int(a) for a in job["args"]]
        assert job["entry"] == self.launch.kernel.entry and Path(job["cubin"]).stat().st_size > 0
        r = launch(self.launch.kernel, args, grid=job["grid"], block=job["block"])
        out = [x.astype(a.dtype) for x, a in zip(r.arrays.values(), [a for a in job["args"] if isinstance(a, np.ndarray)])]
        if self.poke:
            out[-1][0] ^= 1
        return out


@pytest.mark.parametrize("case_id", ["vec_add", "bytes-brighten", "bytes-narrow", "compact", "device_ticket",
                                     "idioms-fma_sizet", "atomic64"])
def test_check_launch(prepared, case_id: str) -> None:
    by_id, compiled = prepared
    l = by_id[case_id]
    rgc.check_launch(l, compiled, None)
    assert l.status == "DRY would compare" and l.interp_vs_numpy is None, rgc.line(l)
    rgc.check_launch(l, compiled, InterpAsGpu(l))
    assert l.status == "EXACT" and l.gpu_vs_numpy is None, rgc.line(l)
    rgc.check_launch(l, compiled, InterpAsGpu(l, poke=True))
    assert l.status.startswith("MISMATCH") and l.gpu_vs_numpy, rgc.line(l)


def test_summary_and_reports(prepared) -> None:
    by_id, compiled = prepared
    launches = list(by_id.values())
    for l in launches:
        rgc.check_launch(l, compiled, None)
    assert by_id["warp_scan"].status == "DRY would run, not compare"
    assert by_id["cross_warp-warp_chain"].status.startswith("SKIPPED")
    lines = rgc.summary(launches, "dry", True)
    assert f"{len(launches) - 1}/{len(launches) - 1} launches to run prepared" in lines[1], lines
    md = rgc.markdown(launches, lines, {"GPU": "dry"})
    assert "| user cross_warp-warp_chain | skip |" in md
    assert rgc.as_json(launches, lines, {})["launches"][0]["status"]


# ---- the child-process runner, with stand-in launch functions ----------------------------------------

def fake_device() -> str:
    return "fake GPU"


def fake_launch(job: dict) -> list:
    if job.get("sleep"):
        time.sleep(job["sleep"])
    if job.get("fail"):
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS (fake)")
    return [a * 2 for a in job["args"] if isinstance(a, np.ndarray)]


def broken_device() -> str:
    raise ImportError("no cupy here")


def test_gpu_runner_timeout_error_restart() -> None:
    gpu = rgc.GpuRunner(timeout=3, launch_fn=fake_launch, device_fn=fake_device, start_timeout=60)
    try:
        out = gpu.run({"args": [np.array([1, 2], np.int32), np.uint32(3)]})
        assert gpu.device == "fake GPU" and out[0].tolist() == [2, 4]
        with pytest.raises(RuntimeError, match="ILLEGAL_ADDRESS"):
            gpu.run({"args": [], "fail": True})
        assert gpu.run({"args": [np.array([5])]})[0].tolist() == [10]      # a fresh worker
        t = time.monotonic()
        with pytest.raises(RuntimeError, match="timeout"):
            gpu.run({"args": [], "sleep": 30})
        assert time.monotonic() - t < 15
        assert gpu.run({"args": [np.array([7])]})[0].tolist() == [14]
    finally:
        gpu.stop()
    assert gpu.proc is None


def test_gpu_runner_cannot_start() -> None:
    gpu = rgc.GpuRunner(timeout=3, launch_fn=fake_launch, device_fn=broken_device, start_timeout=60)
    with pytest.raises(RuntimeError, match="did not start: ImportError: no cupy here"):
        gpu.run({"args": []})
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start"):
        gpu.run({"args": []})
    assert time.monotonic() - t < 1             # no second try
    gpu.stop()


def test_cupy_launch_with_stand_in_cupy(prepared, monkeypatch) -> None:
    """cupy_launch's calls (Module().load(bytes), get_function, fn(grid3, block3, args, shared_mem=), asarray,
    asnumpy, deviceSynchronize), checked against a stand-in `cupy` that runs the interpreter and accepts
    arguments as CuPy's Function does (tuples; device arrays or NumPy scalars, never Python ints)."""
    import types
    from qgpu_min.host.launch import launch
    by_id, compiled = prepared
    l = by_id["idioms-fma_sizet"]
    kernel = compiled[(l.path, l.kernel_name)]
    calls = []

    class DeviceArray:
        def __init__(self, a):
            self.a = a.copy()

    class Module:
        def load(self, data):
            assert isinstance(data, bytes) and data == Path(compiled[l.path]).read_bytes()

        def get_function(self, name):
            assert name == kernel.entry
            return self.launch

        def launch(self, grid, block, args, shared_mem=0):
            assert type(grid) is tuple and type(block) is tuple and type(args) is tuple and shared_mem == 0
            assert all(isinstance(a, (DeviceArray, np.generic)) for a in args)
            vals = [a.a.astype(np.int64) if isinstance(a, DeviceArray) else int(a) for a in args]
            r = launch(kernel, vals, grid=grid[:2], block=block[:2])
            for a, out in zip([a for a in args if isinstance(a, DeviceArray)], r.arrays.values()):
                a.a[...] = out.astype(a.a.dtype)
            calls.append((grid, block))

    cupy = types.ModuleType("cupy")
    cupy.ndarray, cupy.asarray, cupy.asnumpy = DeviceArray, DeviceArray, lambda d: d.a.copy()
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))
    function = types.ModuleType("cupy.cuda.function")
    function.Module = Module
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", types.ModuleType("cupy.cuda"))
    monkeypatch.setitem(sys.modules, "cupy.cuda.function", function)
    l.kernel = kernel
    out = rgc.cupy_launch(rgc.gpu_job(l, compiled[l.path]))
    assert calls == [((3, 1, 1), (8, 1, 1))]
    rgc.run_interp(l)
    assert rgc.first_diff(rgc.from_gpu(out), l.interp, kernel.params, {}, [0, 1, 2]) is None
    assert l.interp[2].tolist() != l.args[2].tolist()        # the kernel wrote c
