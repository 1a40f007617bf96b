"""Run the kernel suite and the user-trial kernels on a real NVIDIA GPU and compare with the interpreter.

    python3 tools/real_gpu_check.py [--out report.md] [--json report.json] [--timeout 20] [--arch sm_90]
    python3 tools/real_gpu_check.py --dry-run      # everything but the GPU launches (no GPU or CuPy needed)

Every launch of tests/kernel_suite.py (every case at every shape) and of tests/test_user_kernels.py (every
UCase at every shape, with the same seeded arguments as the tests) is run twice:
  * on our reference interpreter (``qgpu_min.launch(..., backend="interp")``, PTX from nvcc, so no zig or
    clang is needed), and
  * on GPU 0 through CuPy, from a cubin that real nvcc compiles from the same .cu file (``-arch``; the real
    CUDA headers, warpSize 32).
Each pointer argument's final contents are then compared element by element: GPU against the interpreter
(bit patterns of the parameter's element size; slots handed out by atomics, the suite's ``Unordered`` and
the user trial's ``Perm``, are compared sorted), and the GPU against the case's NumPy expectation.

Not every launch can be compared with the interpreter (the category column of the output):
  compare     GPU == interpreter is the question (and GPU == NumPy).
  numpy-only  the tests mark the interpreter as failing this user case with nvcc (strict xfail: warp-synchronous
              code written for 32-lane warps, a spin lock inside one warp); the GPU is compared with NumPy.
  warp        the result depends on the warp width (shuffles, votes, warpSize, __syncwarp: detected in the
              PTX) and the NumPy expectation states the 4-lane answer: run on the GPU, output recorded, not
              compared. Kernels whose result does not depend on the width are listed in WARP_PORTABLE.
  skip        not launched on the GPU (it would spin forever with 32-lane warps; see SKIP_GPU).

GPU launches run in a child process, one at a time with a per-launch timeout; a timeout or a CUDA error
kills the child (a CUDA error can poison the context) and the next launch starts a fresh one. The module is
loaded afresh for every launch, so ``__device__`` globals start from their initial values as on the
interpreter.
"""
from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DYNAMIC_SHARED_BYTES = 4096    # the whole machine has 1024 words, so no kernel here uses more
# warp operations in PTX: shuffles, votes, __syncwarp, warpSize, lane ids, masks
WARP_OPS = re.compile(r"shfl\.sync|vote\.sync|bar\.warp\.sync|match\.\w+\.sync|redux\.sync|activemask|"
                      r"WARP_SZ|%laneid|%lanemask")


def whole_warps(block: tuple[int, int]) -> bool:
    """Blocks of whole 32-lane warps."""
    return block[0] * block[1] % 32 == 0


# kernels with warp operations whose result does not depend on the warp width (at the shapes the predicate accepts)
WARP_PORTABLE: dict[str, tuple[Callable[[tuple[int, int]], bool], str]] = {
    "scan_two_level": (lambda block: True, "block scan; blocks <= 32 threads are one 32-lane warp, and "
                       "__shfl_up_sync reads only lower lanes"),
    "shfl_width": (lambda block: True, "shuffles inside width-2 segments"),
    "sum_squares": (whole_warps, "total by atomics; needs whole 32-lane warps (xor partners must exist)"),
    "warp_sum32-warp_sum": (whole_warps, "total by atomics; needs whole 32-lane warps"),
    "cross_warp-warp_lock_sum": (whole_warps, "lane 0 of each warp adds warpSize elements: one warp per block"),
}
SKIP_GPU: dict[str, tuple[Callable[[tuple[int, int]], bool], str]] = {
    "cross_warp-warp_chain": (lambda block: not whole_warps(block),
                              "nw = blockDim.x / warpSize is 0 with 32-lane warps: warp 0 waits for turn == -1 forever"),
}


@dataclass
class Launch:
    """One launch: a case at one shape, its arguments, and what each side gave."""
    group: str                      # 'suite' | 'user'
    case: Any                       # kernel_suite.Case | test_user_kernels.UCase
    path: Path
    kernel_name: str | None
    grid: tuple[int, int]
    block: tuple[int, int]
    args: list
    step_limit: int | None = None
    category: str = "compare"
    reason: str = ""
    kernel: Any = None              # CompiledKernel (interpreter side, nvcc PTX)
    interp: list | None = None      # pointer arrays, in parameter order
    interp_error: str = ""
    interp_vs_numpy: str | None = None    # None: equal
    gpu: list | None = None
    gpu_error: str = ""
    gpu_vs_numpy: str | None = None
    gpu_vs_interp: str | None = None
    status: str = ""

    @property
    def shape(self) -> str:
        (gx, gy), (bx, by) = self.grid, self.block
        return f"g{gx}x{gy}-b{bx}x{by}"

    @property
    def name(self) -> str:
        return f"{self.group} {self.case.id} {self.shape}"


# ---- the launches ---------------------------------------------------------------------------------

def _test_modules():
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import kernel_suite
    import test_kernel_suite
    import test_user_kernels
    return kernel_suite, test_kernel_suite, test_user_kernels


def all_launches() -> list[Launch]:
    """Every suite case at every shape, then every user-trial case at every shape, with the tests' arguments."""
    ks, tks, tuk = _test_modules()
    out = []
    for case in ks.CASES:
        for s in case.shapes:
            args = case.make(np.random.default_rng(tks._seed(case, s)), s)
            out.append(Launch("suite", case, case.path, case.kernel, s.grid, s.block, args))
    for case in tuk.CASES:
        for s in case.shapes:
            out.append(Launch("user", case, tuk.DIR / case.file, case.kernel, tuple(s[0]), tuple(s[1]),
                              tuk._args(case, s), case.step_limit))
    return out


def _copy(args: list) -> list:
    return [a.copy() if isinstance(a, np.ndarray) else a for a in args]


def expected(launch: Launch) -> dict:
    """The case's NumPy expectation: {parameter index: final contents}."""
    if launch.group == "suite":
        from kernel_suite import Shape
        return launch.case.expect(_copy(launch.args), Shape(launch.grid, launch.block))
    return launch.case.expect(_copy(launch.args), launch.grid, launch.block)


def unordered_prefix(launch: Launch, exp: dict) -> dict[int, int]:
    """Parameter index -> how many leading elements may come in any order (atomic slot numbers)."""
    from kernel_suite import Unordered
    from test_user_kernels import Perm
    out = {}
    for i, want in exp.items():
        if isinstance(want, Unordered):
            out[i] = want.prefix
        elif isinstance(want, Perm):
            out[i] = len(launch.args[i])
    return out


def kernel_ptx(ptx: str, entry: str) -> str:
    """The PTX of the kernel ``entry`` and of the functions it calls (not the module's other kernels)."""
    chunks = re.split(r"(?m)^(?=(?:\.visible\s+|\.weak\s+|\.extern\s+)?\.(?:entry|func)\b)", ptx)
    names = [re.match(r"[^(]*?\.(?:entry|func)\s+(?:\([^)]*\)\s*)?([\w$]+)", c) for c in chunks]
    by_name = {m.group(1): c for m, c in zip(names, chunks) if m}
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        todo += re.findall(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([\w$]+)", by_name[name])
    return "".join(by_name[n] for n in seen)


def classify(launch: Launch) -> tuple[str, str]:
    """(category, reason): see the module docstring."""
    cid = launch.case.id
    if cid in SKIP_GPU and SKIP_GPU[cid][0](launch.block):
        return "skip", SKIP_GPU[cid][1]
    xfail = getattr(launch.case, "xfail", {}).get("nvcc")
    if xfail:
        return "numpy-only", "interpreter known to differ: " + xfail.split(";")[0].split(":")[0]
    text = kernel_ptx(launch.kernel.ptx, launch.kernel.entry) if launch.kernel is not None else ""
    if WARP_OPS.search(text):
        ok, why = WARP_PORTABLE.get(cid, (lambda block: False, ""))
        if ok(launch.block):
            return "compare", "warp operations, but width-independent: " + why
        ops = sorted(set(m.group(0) for m in WARP_OPS.finditer(text)))
        return "warp", "warp-width dependent (" + ", ".join(ops) + "): NumPy/interpreter assume 4-lane warps"
    return "compare", ""


# ---- arguments and comparison ---------------------------------------------------------------------

def kernel_param_sizes(kernel) -> list[int]:
    """Bytes of each kernel parameter as the PTX declares it (pointers 8 with nvcc; size_t 8; int 4)."""
    from qgpu_min.cuda.ptx import parse_ptx, select_kernel
    return [p.bytes for p in select_kernel(parse_ptx(kernel.ptx), kernel.entry or None).params]


def to_dtype(a: np.ndarray, signed: bool, nbytes: int) -> np.ndarray:
    """Integer values as a contiguous array of the element type: two's-complement bits kept, wrapped to size."""
    u = np.asarray(a).astype(np.uint64).astype(f"<u{nbytes}")      # int -> uint casts wrap (C semantics)
    return np.ascontiguousarray(u.view(f"<i{nbytes}") if signed else u)


def gpu_args(kernel, args: list) -> list:
    """The launch's arguments for CuPy: arrays of each pointer's element type, NumPy scalars of each
    parameter's PTX size (their bits: 0xFFFFFFFF and -1 are the same word)."""
    out = []
    for p, size, a in zip(kernel.params, kernel_param_sizes(kernel), args):
        if p.kind == "ptr":
            out.append(to_dtype(a, p.signed, p.elem_bytes))
        elif size in (1, 2, 4, 8):
            out.append(np.dtype(f"<u{size}").type(int(a) % (1 << 8 * size)))
        else:
            raise ValueError(f"parameter {p.name}: {size}-byte by-value parameter is not supported here")
    return out


def _bits(x, nbytes: int) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype == object:
        x = np.array([int(v) % (1 << 64) for v in x.ravel()], dtype=np.uint64)
    return x.ravel().astype(np.uint64) & np.uint64((1 << 8 * nbytes) - 1)


def first_diff(got: list, want: list, params: list, unordered: dict[int, int], ptr_index: list[int]) -> str | None:
    """None if every array's bits (of its element size) are equal, else the first difference. ``unordered``:
    parameter index -> leading elements compared sorted."""
    for k, (g, w) in enumerate(zip(got, want)):
        i = ptr_index[k]
        p = params[i]
        g, w = _bits(g, p.elem_bytes), _bits(w, p.elem_bytes)
        if len(g) != len(w):
            return f"{p.name}: length {len(g)} != {len(w)}"
        n = unordered.get(i, 0)
        if n:
            g, w = np.concatenate([np.sort(g[:n]), g[n:]]), np.concatenate([np.sort(w[:n]), w[n:]])
        bad = np.flatnonzero(g != w)
        if len(bad):
            j = int(bad[0])
            return (f"{p.name}[{j}]{' (sorted)' if j < n else ''}: {int(g[j]):#x} vs {int(w[j]):#x} "
                    f"({len(bad)} of {len(g)} differ)")
    return None


def numpy_check(launch: Launch, arrays: list, exp: dict) -> str | None:
    """None if the arrays are what the case's NumPy expectation says (as the tests compare), else why not."""
    if launch.group == "user":
        from test_user_kernels import _check
        try:
            _check(launch.case, launch.args, (launch.grid, launch.block), arrays)
        except AssertionError as e:
            return str(e)
        return None
    from kernel_suite import Unordered, words
    ptrs = [i for i, a in enumerate(launch.args) if isinstance(a, np.ndarray)]
    for k, i in enumerate(ptrs):
        got, want = words(arrays[k]), exp.get(i, launch.args[i])
        n = want.prefix if isinstance(want, Unordered) else 0
        want = words(want.values if isinstance(want, Unordered) else want)
        if n:
            got, want = np.concatenate([np.sort(got[:n]), got[n:]]), np.concatenate([np.sort(want[:n]), want[n:]])
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = np.flatnonzero(got != want) if got.shape == want.shape else [0]
            return f"param {i}[{int(bad[0])}]: {int(got[bad[0]]):#x} != {int(want[bad[0]]):#x} (NumPy)"
    return None


def from_gpu(arrays: list) -> list:
    """GPU output arrays as the interpreter returns them: int64 values (64-bit elements keep their dtype)."""
    return [a if a.dtype.itemsize == 8 else a.astype(np.int64) for a in arrays]


# ---- compiling and the interpreter side -----------------------------------------------------------

def nvcc_version() -> str:
    out = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release [\d.]+, V[\d.]+", out)
    return m.group(0) if m else out.strip().splitlines()[-1]


def compile_cubin(path: Path, outdir: Path, arch: str) -> Path:
    """Real nvcc, real CUDA headers: a cubin for ``arch``."""
    out = outdir / (path.stem + ".cubin")
    proc = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-O3", "-o", str(out), str(path)],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc -cubin failed for {path.name}:\n{proc.stderr}{proc.stdout}")
    return out


def compile_all(launches: list[Launch], outdir: Path, arch: str) -> dict:
    """Each .cu once to a cubin; each (file, kernel) once through our front end with nvcc. Returns
    {key: result or exception} for keys path and (path, kernel)."""
    from qgpu_min.host.launch import compile_kernel

    def work(key):
        try:
            if isinstance(key, Path):
                return compile_cubin(key, outdir, arch)
            return compile_kernel(key[0], kernel=key[1], compiler="nvcc")
        except Exception as e:          # noqa: BLE001 (recorded per launch)
            return e
    keys = list(dict.fromkeys([l.path for l in launches] + [(l.path, l.kernel_name) for l in launches]))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        return dict(zip(keys, pool.map(work, keys)))


def run_interp(launch: Launch) -> None:
    from qgpu_min.host.launch import launch as qlaunch
    try:
        r = qlaunch(launch.kernel, _copy(launch.args), grid=launch.grid, block=launch.block,
                    backend="interp", step_limit=launch.step_limit)
        launch.interp = list(r.arrays.values())
    except Exception as e:              # noqa: BLE001
        launch.interp_error = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


# ---- the GPU side (CuPy, in a child process) ------------------------------------------------------

def cupy_device() -> str:
    """GPU 0's name; also creates the CUDA context."""
    import cupy
    cupy.zeros(1, dtype=cupy.int32)
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def cupy_launch(job: dict) -> list[np.ndarray]:
    """Copy the arguments to the GPU, load the cubin as a new module (fresh __device__ globals: RawModule would
    reuse one module per path), launch the entry once, wait, and return the pointer arguments' arrays."""
    import cupy
    from cupy.cuda.function import Module
    args = tuple(cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in job["args"])
    module = Module()
    module.load(Path(job["cubin"]).read_bytes())
    fn = module.get_function(job["entry"])
    fn(job["grid"] + (1,), job["block"] + (1,), args, shared_mem=job["shared_mem"])
    cupy.cuda.runtime.deviceSynchronize()
    return [cupy.asnumpy(a) for a in args if isinstance(a, cupy.ndarray)]


def _worker(conn, launch_fn: Callable, device_fn: Callable) -> None:
    try:
        conn.send(("ready", device_fn()))
    except BaseException as e:          # noqa: BLE001
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    while (job := conn.recv()) is not None:
        try:
            conn.send(("ok", launch_fn(job)))
        except BaseException as e:      # noqa: BLE001
            conn.send(("error", f"{type(e).__name__}: {e}"))
            return                      # a CUDA error can leave the context unusable: start afresh


class GpuRunner:
    """Launches in a child process; a launch that does not answer within ``timeout`` s kills it."""

    def __init__(self, timeout: float, launch_fn: Callable = cupy_launch, device_fn: Callable = cupy_device,
                 start_timeout: float = 120):
        self.timeout, self.start_timeout = timeout, start_timeout
        self.launch_fn, self.device_fn = launch_fn, device_fn
        self.proc = self.conn = None
        self.device = ""
        self.broken = ""                # set when the child cannot even start: no more tries

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.launch_fn, self.device_fn), daemon=True)
        self.proc.start()
        child.close()
        kind, value = self._answer(self.start_timeout, "start")
        if kind != "ready":
            self.broken = f"the GPU worker did not start: {value}"
            raise RuntimeError(self.broken)
        self.device = value

    def _answer(self, timeout: float, what: str) -> tuple[str, Any]:
        try:
            if self.conn.poll(timeout):
                return self.conn.recv()
        except (EOFError, OSError):
            self.stop()
            return "error", f"the GPU worker died during {what}"
        self.stop()
        return "error", f"timeout: no answer within {timeout:g} s ({what}); worker killed"

    def run(self, job: dict) -> list[np.ndarray]:
        if self.broken:
            raise RuntimeError(self.broken)
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.conn.send(job)
        kind, value = self._answer(self.timeout, "launch")
        if kind != "ok":
            if self.proc is not None:
                self.proc.join(5)       # the worker leaves after an error
            raise RuntimeError(value)
        return value

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                try:
                    self.conn.send(None)
                except OSError:
                    pass
                self.proc.join(2)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(10)
        self.proc = None


def gpu_job(launch: Launch, cubin: Path) -> dict:
    k = launch.kernel
    return {"cubin": str(cubin), "entry": k.entry, "grid": launch.grid, "block": launch.block,
            "args": gpu_args(k, launch.args), "shared_mem": DYNAMIC_SHARED_BYTES if k.memory.dynamic_shared else 0}


# ---- the run --------------------------------------------------------------------------------------

DRY_VERBS = {"compare": "would compare", "warp": "would run, not compare", "numpy-only": "would compare with NumPy"}


def check_launch(launch: Launch, compiled: dict, gpu: GpuRunner | None) -> None:
    """Interpreter, then (unless dry run) the GPU, then the comparisons and the status line's verdict."""
    kernel, cubin = compiled[(launch.path, launch.kernel_name)], compiled[launch.path]
    if isinstance(kernel, Exception):
        launch.status = f"ERROR (our nvcc front end: {str(kernel).splitlines()[0][:160]})"
        return
    launch.kernel = kernel
    launch.category, launch.reason = classify(launch)
    exp = expected(launch)
    ptrs = [i for i, p in enumerate(kernel.params) if p.kind == "ptr"]
    run_interp(launch)
    if launch.interp is not None:
        launch.interp_vs_numpy = numpy_check(launch, launch.interp, exp)
    if isinstance(cubin, Exception):
        launch.status = f"ERROR (real nvcc: {str(cubin).splitlines()[0][:160]})"
        return
    if launch.category == "skip":
        launch.status = "SKIPPED (not launched on the GPU)"
        return
    try:
        job = gpu_job(launch, cubin)
    except Exception as e:              # noqa: BLE001
        launch.status = f"ERROR (arguments: {e})"
        return
    if gpu is None:                     # dry run: prove the comparison path with the interpreter's own output
        if launch.interp is None and launch.category == "compare":
            launch.status = f"ERROR (interpreter: {launch.interp_error})"
            return
        same = None
        if launch.interp is not None:
            fake = from_gpu([to_dtype(a, kernel.params[i].signed, kernel.params[i].elem_bytes)
                             for i, a in zip(ptrs, launch.interp)])
            same = first_diff(fake, launch.interp, kernel.params, unordered_prefix(launch, exp), ptrs)
        launch.status = f"DRY {DRY_VERBS[launch.category]}" + (f" -- SELF-CHECK FAILED: {same}" if same else "")
        return
    try:
        launch.gpu = from_gpu(gpu.run(job))
    except Exception as e:              # noqa: BLE001
        launch.gpu_error = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        launch.status = f"ERROR (GPU: {launch.gpu_error})"
        return
    launch.gpu_vs_numpy = numpy_check(launch, launch.gpu, exp)
    if launch.category == "warp":
        launch.status = "NOT COMPARED (warp width)"
    elif launch.category == "numpy-only":
        launch.status = "GPU == NumPy" if launch.gpu_vs_numpy is None else f"GPU != NumPy: {launch.gpu_vs_numpy}"
    elif launch.interp is None:
        launch.status = f"ERROR (interpreter: {launch.interp_error})"
    else:
        launch.gpu_vs_interp = first_diff(launch.gpu, launch.interp, kernel.params, unordered_prefix(launch, exp), ptrs)
        launch.status = "EXACT" if launch.gpu_vs_interp is None else f"MISMATCH {launch.gpu_vs_interp}"


def line(launch: Launch) -> str:
    extra = []
    if launch.reason:
        extra.append(launch.reason)
    if launch.interp_error and launch.category != "skip":
        extra.append(f"interpreter: {launch.interp_error}")
    elif launch.interp_vs_numpy and launch.category == "compare":
        extra.append(f"interpreter != NumPy: {launch.interp_vs_numpy}")
    if launch.gpu is not None and launch.category == "compare" and launch.gpu_vs_numpy:
        extra.append(f"GPU != NumPy: {launch.gpu_vs_numpy}")
    if launch.gpu is not None and launch.category == "warp":
        extra.append("GPU gave " + "; ".join(f"{p.name}={a.tolist()[:8]}" for p, a in
                                             zip([p for p in launch.kernel.params if p.kind == "ptr"], launch.gpu)))
    return f"{launch.name} [{launch.category}]: {launch.status}" + (f"  ({' | '.join(extra)})" if extra else "")


def summary(launches: list[Launch], device: str, dry: bool) -> list[str]:
    cmp = [l for l in launches if l.category == "compare" and l.kernel is not None]
    exact = sum(l.status == "EXACT" for l in cmp)
    nonly = [l for l in launches if l.category == "numpy-only"]
    count = lambda cat: sum(l.category == cat for l in launches)    # noqa: E731
    errors = sum(l.status.startswith("ERROR") for l in launches)
    out = [f"launches: {len(launches)} ({count('compare')} compare, {count('numpy-only')} numpy-only, "
           f"{count('warp')} warp-width dependent (not compared), {count('skip')} not launched); errors: {errors}"]
    if dry:
        dry_ok = sum(l.status in [f"DRY {v}" for v in DRY_VERBS.values()] for l in launches)
        to_run = sum(l.category != "skip" for l in launches)
        out.append(f"dry run (no GPU): {dry_ok}/{to_run} launches to run prepared (cubin compiled, arguments mapped, "
                   f"comparison self-check passed); interpreter == NumPy on "
                   f"{sum(l.interp is not None and l.interp_vs_numpy is None for l in launches)}")
    else:
        out.append(f"GPU == NumPy where compared with NumPy: "
                   f"{sum(l.gpu is not None and l.gpu_vs_numpy is None for l in cmp + nonly)}/{len(cmp) + len(nonly)}")
        out.append(f"real GPU ({device}): {exact}/{len(cmp)} launches equal to the interpreter")
    return out


def markdown(launches: list[Launch], summary_lines: list[str], meta: dict) -> str:
    md = ["# Real-GPU check: qgpu-min interpreter vs an NVIDIA GPU", ""]
    md += [f"- {k}: {v}" for k, v in meta.items()] + [""] + [f"**{s}**  " for s in summary_lines] + [""]
    warp = {}
    for l in launches:
        if l.category in ("warp", "skip", "numpy-only") or "width-independent" in l.reason:
            warp.setdefault((l.group, l.case.id, l.category, l.reason), []).append(l.shape)
    md += ["## Not compared with the interpreter, or compared under a condition", "",
           "| kernel | category | shapes | why |", "|---|---|---|---|"]
    md += [f"| {g} {cid} | {cat} | {', '.join(shapes)} | {why} |" for (g, cid, cat, why), shapes in warp.items()]
    bad = [l for l in launches if not (l.status in ["EXACT", "GPU == NumPy"] + [f"DRY {v}" for v in DRY_VERBS.values()]
                                       or l.status.startswith(("NOT COMPARED", "SKIPPED")))]
    md += ["", f"## Mismatches and errors ({len(bad)})", "", "```"] + [line(l) for l in bad] + ["```"]
    md += ["", "## Every launch", "", "```"] + [line(l) for l in launches] + ["```", ""]
    return "\n".join(md)


def as_json(launches: list[Launch], summary_lines: list[str], meta: dict) -> dict:
    rows = []
    for l in launches:
        rows.append({"group": l.group, "case": l.case.id, "shape": l.shape, "category": l.category,
                     "reason": l.reason, "status": l.status, "interp_error": l.interp_error,
                     "interp_vs_numpy": l.interp_vs_numpy, "gpu_error": l.gpu_error, "gpu_vs_numpy": l.gpu_vs_numpy,
                     "gpu_vs_interp": l.gpu_vs_interp,
                     "gpu": None if l.gpu is None else [np.asarray(a).tolist() for a in l.gpu]})
    return {"meta": meta, "summary": summary_lines, "launches": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="compile and run the interpreter side; no GPU launches")
    ap.add_argument("--out", type=Path, help="write a markdown report here")
    ap.add_argument("--json", type=Path, help="write a JSON report here")
    ap.add_argument("--arch", default="sm_90", help="nvcc -arch for the cubins (default sm_90: H100/H200)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per GPU launch (default 20)")
    ap.add_argument("--only", default="", help="run only cases whose id contains this text")
    opts = ap.parse_args(argv)
    if shutil.which("nvcc") is None and Path("/usr/local/cuda/bin/nvcc").exists():
        os.environ["PATH"] = "/usr/local/cuda/bin" + os.pathsep + os.environ.get("PATH", "")
    start = datetime.datetime.now()
    launches = [l for l in all_launches() if opts.only in l.case.id]
    gpu = None if opts.dry_run else GpuRunner(opts.timeout)
    with tempfile.TemporaryDirectory(prefix="real-gpu-check-") as tmp:
        compiled = compile_all(launches, Path(tmp), opts.arch)
        print(f"compiled {len(compiled)} items in {(datetime.datetime.now() - start).total_seconds():.1f} s", flush=True)
        try:
            for l in launches:
                check_launch(l, compiled, gpu)
                print(line(l), flush=True)
        finally:
            if gpu is not None:
                gpu.stop()
    device = "dry run, no GPU" if gpu is None else (gpu.device or gpu.broken or "unknown")
    lines = summary(launches, device, opts.dry_run)
    meta = {"GPU": device, "nvcc": nvcc_version(), "arch": opts.arch, "date": start.isoformat(timespec="seconds"),
            "seconds": round((datetime.datetime.now() - start).total_seconds(), 1),
            "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))}
    print("\n".join(lines))
    if opts.out:
        opts.out.write_text(markdown(launches, lines, meta))
    if opts.json:
        opts.json.write_text(json.dumps(as_json(launches, lines, meta), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
