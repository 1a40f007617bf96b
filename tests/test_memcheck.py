"""--memcheck (qgpu_min/machine/memcheck.py, host/memcheck.py): each kind of error found in a kernel that
really has that bug, named with the CUDA source line, the array and element, and the thread; and no error
on any suite or user-trial kernel (their results still exact under the checked interpreter)."""
from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from compilers import skip_if_missing
from kernel_suite import CASES
from qgpu_min.cli import main
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine.interp import MemoryFault
from qgpu_min.machine.memcheck import MemcheckError
import test_user_kernels as U
from test_kernel_suite import run_case

VADD = """__global__ void vadd(const int *a, const int *b, int *c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}
"""

# name: (source, args, grid, block, the error, the source line it names)
BUGS = {
    "read past the end": (VADD, [[1, 2, 3], [1, 1], [0, 0, 0], 3], 1, 3,
                          r"memcheck: invalid load of 4 bytes at address 0x[0-9a-f]+: b\[2\], 1 past the end of b "
                          r"\(2 elements\); by thread \(2, 0\) of CTA \(0, 0\)", 4),
    "write past the end": ("""__global__ void fill(int *c, int n) {
    int i = threadIdx.x;
    if (i <= n)
        c[i] = i;
}
""", [[0, 0, 0], 3], 1, 4, r"memcheck: invalid store of 4 bytes .*: c\[3\], 1 past the end of c \(3 elements\); by "
                          r"thread \(3, 0\)", 4),
    "read before the start": ("""__global__ void prev(const int *a, int *c, int n) {
    int i = threadIdx.x;
    if (i < n)
        c[i] = a[i - 1];
}
""", [[1, 2, 3], [0, 0, 0], 3], 1, 3, r"memcheck: invalid load .*: a\[-1\], 1 before the start of a; by thread "
                                      r"\(0, 0\)", 4),
    "shared array overrun": ("""__global__ void tile(const int *in, int *out) {
    __shared__ int t[4];
    t[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = t[3 - threadIdx.x % 4];
}
""", [[1, 2, 3, 4, 5], [0] * 5], 1, 5, r"memcheck: invalid store .*: tile::t\[4\], 1 past the end of tile::t "
                                       r"\(4 elements\); by thread \(4, 0\) of CTA \(0, 0\) \(lane 0 of warp 1\)", 3),
    "local array read by another thread": ("""__global__ void peek(const int *idx, int *out) {
    int loc[8];
    for (int k = 0; k < 8; ++k)
        loc[k] = k + threadIdx.x;
    out[threadIdx.x] = loc[idx[threadIdx.x]];
}
""", [[0, 8], [0, 0]], 1, 2, r"memcheck: invalid load .*: byte 0 of the local memory of thread \(0, 0\), not its "
                             r"own .*; by thread \(1, 0\)", 5),
    "unwritten shared memory": ("""__global__ void partial(int *out) {
    __shared__ int s[8];
    if (threadIdx.x < 4)
        s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}
""", [[0] * 8], 1, 8, r"initcheck: load of partial::s\[4\] \(4 bytes\), which this CTA has not written; by thread "
                      r"\(4, 0\)", 6),
    "shared memory another CTA wrote": ("""__global__ void first_only(int *out) {
    __shared__ int s[4];
    if (blockIdx.x == 0)
        s[threadIdx.x] = 1;
    __syncthreads();
    out[blockIdx.x * 4 + threadIdx.x] = s[threadIdx.x];
}
""", [[0] * 8], 2, 4, r"initcheck: load of first_only::s\[0\] \(4 bytes\), which this CTA has not written; by "
                      r"thread \(0, 0\) of CTA \(1, 0\)", 6),
    "unwritten local memory": ("""__global__ void pick(const int *idx, int *out, int n) {
    int loc[8];
    for (int k = 0; k < n; ++k)
        loc[k] = k * k;
    out[threadIdx.x] = loc[idx[threadIdx.x] & 7];
}
""", [[1, 5], [0, 0], 4], 1, 2, r"initcheck: load of byte 20 of the local memory \(4 bytes\), which this thread "
                                r"has not written; by thread \(1, 0\)", 5),
    "read after another warp's write": ("""__global__ void shift(const int *in, int *out) {
    __shared__ int s[8];
    int t = threadIdx.x;
    s[t] = in[t];
    if (t >= 4)
        out[t] = s[t - 4];
}
""", [list(range(1, 9)), [0] * 8], 1, 8, r"racecheck: load of shift::s\[0\] races with the store by thread "
                                         r"\(0, 0\) \(warp 0\): no __syncthreads\(\) between them; by thread \(4, 0\)",
                                         6),
    "write after another warp's read": ("""__global__ void rot(int *io) {
    __shared__ int s[8];
    int t = threadIdx.x;
    s[t] = io[t];
    __syncthreads();
    int v = s[(t + 4) % 8];
    s[t] = v * 2;
    io[t] = v;
}
""", [list(range(1, 9))], 1, 8, r"racecheck: (store to rot::s\[\d\] races with the load|load of rot::s\[\d\] races "
                                r"with the store) by thread \(\d, 0\) \(warp \d\)", None),
    "divergent barrier": ("""__global__ void halfbar(int *out) {
    if (threadIdx.x < 2)
        __syncthreads();
    out[threadIdx.x] = 1;
}
""", [[0] * 4], 1, 4, r"synccheck: divergent barrier: threads \(0, 0\), \(1, 0\) reach __syncthreads\(\) \(block B\d+\) "
                      r"while threads \(2, 0\), \(3, 0\) of the same warp are at block B\d+ and skip it", 3),
}


@pytest.mark.parametrize("compiler", ["zig", "nvcc"])
@pytest.mark.parametrize("bug", list(BUGS))
def test_each_bug_is_found_at_its_source_line(bug: str, compiler: str) -> None:
    skip_if_missing(compiler)
    source, args, grid, block, error, line = BUGS[bug]
    k = compile_kernel(source, compiler=compiler)
    try:                                    # without --memcheck: a wrong answer, or at most a memory fault
        launch(k, [list(a) if isinstance(a, list) else a for a in args], grid=grid, block=block)
    except MemoryFault as e:
        assert "memory access out of range" in str(e) and "(source kernel.cu:" in str(e)
    with pytest.raises(MemcheckError, match=error) as info:
        launch(k, [list(a) if isinstance(a, list) else a for a in args], grid=grid, block=block, memcheck=True)
    message = str(info.value)
    if line is not None:    # the racing access is either of the two lines, by the warps' order
        code = source.splitlines()[line - 1].strip()
        assert f"(source kernel.cu:{line}: `{code}`)" in message, message
    assert re.search(r"PTX line \d+: `(ld|st|bar)\.", message), message      # the PTX line of the access itself


def test_a_barrier_between_the_warps_is_no_race() -> None:
    k = compile_kernel(BUGS["read after another warp's write"][0].replace("s[t] = in[t];",
                                                                         "s[t] = in[t]; __syncthreads();"))
    r = launch(k, [list(range(1, 9)), [0] * 8], block=8, memcheck=True)
    assert r.arrays["out"].tolist() == [0, 0, 0, 0, 1, 2, 3, 4]


def test_a_store_that_changes_nothing_does_not_race() -> None:
    """Several warps marking the same flag (a sieve's `composite[m] = 1`) is benign."""
    k = compile_kernel("""__global__ void mark(int *out) {
    __shared__ int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    flag = 1;
    __syncthreads();
    out[threadIdx.x] = flag;
}""")
    assert launch(k, [[0] * 8], block=8, memcheck=True).arrays["out"].tolist() == [1] * 8


def test_cli_names_the_issue_case(tmp_path) -> None:
    """The case of issue #10: silent without --memcheck, an error naming b's element and the line with it,
    on the interpreter and before a launch on the GPU in the weights."""
    src = tmp_path / "vadd.cu"
    src.write_text(VADD)
    argv = ["run", str(src), "--arg", "[1,2,3]", "--arg", "[1,1]", "--arg", "zeros(3)", "--arg", "3"]
    res = CliRunner().invoke(main, [*argv, "--backend", "interp"])
    assert res.exit_code == 0 and "c = [2, 3, 3]" in res.output
    for backend in ("interp", "circuit"):
        res = CliRunner().invoke(main, [*argv, "--backend", backend, "--memcheck"])
        assert res.exit_code == 1, res.output
        assert "error: memcheck: invalid load of 4 bytes" in res.output
        assert "b[2], 1 past the end of b (2 elements)" in res.output
        assert "(source vadd.cu:4: `c[i] = a[i] + b[i];`)" in res.output


def test_clean_launch_gives_the_plain_results() -> None:
    k = compile_kernel(VADD)
    rng = np.random.default_rng(3)
    a, b = rng.integers(-99, 99, 7), rng.integers(-99, 99, 7)
    plain = launch(k, [a, b, np.zeros(7, np.int64), 7])
    checked = launch(k, [a, b, np.zeros(7, np.int64), 7], memcheck=True)
    assert checked.arrays["c"].tolist() == plain.arrays["c"].tolist() == (a + b).tolist()
    assert checked.arrays["c"].dtype == plain.arrays["c"].dtype


def test_redzones_that_do_not_fit_say_so() -> None:
    k = compile_kernel(VADD)
    n = 1000 // 3
    launch(k, [[0] * n, [0] * n, [0] * n, n], block=1)
    with pytest.raises(Exception, match="with --memcheck's 32-byte redzones around every array; run without"):
        launch(k, [[0] * n, [0] * n, [0] * n, n], block=1, memcheck=True)


# ---- no false errors ---------------------------------------------------------------------------------
# Default: every case at its first shape from zig clang's PTX; -m slow: every shape, both compilers.
SUITE = [pytest.param(c, "zig", c.shapes[0], id=f"{c.id}-zig") for c in CASES]
SUITE_SLOW = [pytest.param(c, comp, s, id=f"{c.id}-{comp}-{s}", marks=pytest.mark.slow)
              for c in CASES for comp in ("zig", "nvcc") for s in c.shapes if (comp, s) != ("zig", c.shapes[0])]


@pytest.mark.parametrize("case,compiler,shape", SUITE + SUITE_SLOW)
def test_suite_kernel_is_clean_and_exact_under_memcheck(case, compiler, shape) -> None:
    run_case(case, compiler, shape, memcheck=True)


# The user trial's kernels (tests/test_user_kernels.py) that run exactly. One waits on a volatile shared
# flag another warp sets, with no barrier or atomic: a data race by CUDA's memory model, and racecheck says so.
RACY_BY_DESIGN = {"cross_warp-shared_flag": r"racecheck: store to shared_flag::flag\[0\] races with the load by "
                                            r"thread \(0, 0\) \(warp 0\)"}
USER = [pytest.param(c, comp, id=f"{c.id}-{comp}", marks=[] if comp == "zig" else [pytest.mark.slow])
        for c in U.CASES for comp in U.COMPILERS if not c.xfail.get(comp)]


@pytest.mark.parametrize("case,compiler", USER)
def test_user_trial_kernel_is_clean_and_exact_under_memcheck(case, compiler) -> None:
    skip_if_missing(compiler)
    shape = case.shapes[0]
    args = U._args(case, shape)
    k = U._compiled(case.file, case.kernel, compiler)
    given = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    if case.id in RACY_BY_DESIGN:
        with pytest.raises(MemcheckError, match=RACY_BY_DESIGN[case.id]):
            launch(k, given, grid=shape[0], block=shape[1], step_limit=case.step_limit, memcheck=True)
        return
    r = launch(k, given, grid=shape[0], block=shape[1], step_limit=case.step_limit, memcheck=True)
    U._check(case, args, shape, list(r.arrays.values()))
