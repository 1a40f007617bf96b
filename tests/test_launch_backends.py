"""launch()'s backend seam: the table of backends, what a backend is given, and that results come from it."""
import pytest

from qgpu_min.cuda.lower_ir import MemoryLayout
from qgpu_min.host import launch as launch_mod
from qgpu_min.host.backend import BackendRun
from qgpu_min.host.launch import CompiledKernel, LaunchError, ParamInfo, compile_kernel, launch
from qgpu_min.machine.interp import StepLimitError, run
from qgpu_min.machine.isa import MEM_WORDS, Program, Term
from test_machine_interp import I, blk, li, tid


def add_n_kernel() -> CompiledKernel:
    """`add(int *a, int n)`: a[tid] += n, written as a machine program (no CUDA compiler needed)."""
    p = Program([blk([li(1, 0), li(2, 0), tid(3), I("SHL", 3, 3, imm=2, bimm=True), I("ADD", 3, 3, 1)],
                     I("LD", 4, 3), [I("ADD", 4, 4, 2)], Term("JMP", taken=1)),
                 blk([], I("ST", ra=3, rb=4))],
                param_slots=[(0, 0, 0, 0), (0, 1, 1, 0)])      # pre[0] = a's address, pre[1] = n
    params = [ParamInfo("a", "ptr", True), ParamInfo("n", "scalar", True)]
    return CompiledKernel("add", params, p, MemoryLayout({}, {}), "hand-written", "")


GIVEN = {}


def fake_backend(program, memory, grid, block, step_limit, **options):
    """Does not execute anything: writes its own values into a's words, so the arrays can only come from it."""
    GIVEN.update(program=program, memory=list(memory), grid=grid, block=block, step_limit=step_limit,
                 options=options)
    out = list(memory)
    out[0:4] = [1000, 1001, 1002, (-5) & 0xFFFFFFFF]
    return BackendRun(out, 7, [(0, 0, 0)], {"prompt": 11, "generated": 22}, {"mode": options.get("mode")})


def test_interp_is_the_default_backend():
    r = launch(add_n_kernel(), [[1, 2, 3, -4], 10])
    assert r.backend == "interp" and r.arrays["a"].tolist() == [11, 12, 13, 6]
    assert r.steps == 2 and r.trace == [(0, 0, 0), (0, 0, 1)] and r.extra == {}
    assert r.tokens == {"prompt": 0, "generated": 0}


def test_arrays_come_from_the_memory_the_backend_returns(monkeypatch):
    monkeypatch.setitem(launch_mod.BACKENDS, "fake", f"{__name__}:fake_backend")
    GIVEN.clear()
    r = launch(add_n_kernel(), [[1, 2, 3, -4], 10], grid=2, block=(4, 1), backend="fake", step_limit=99,
               mode="bf16", check=True)
    assert r.arrays["a"].tolist() == [1000, 1001, 1002, -5]        # the interpreter would give [11, 12, 13, 6]
    assert (r.backend, r.steps, r.trace) == ("fake", 7, [(0, 0, 0)])
    assert r.tokens == {"prompt": 11, "generated": 22} and r.extra == {"mode": "bf16"}
    # what the backend was given: the memory image, the bound program, the shape, the options as passed
    assert len(GIVEN["memory"]) == MEM_WORDS and GIVEN["memory"][:4] == [1, 2, 3, 0xFFFFFFFC]
    assert [GIVEN["program"].blocks[0].pre[k].imm for k in (0, 1)] == [0, 10]
    assert (GIVEN["grid"], GIVEN["block"], GIVEN["step_limit"]) == ((2, 1), (4, 1), 99)
    assert GIVEN["options"] == {"mode": "bf16", "check": True}
    # the same image on the interpreter gives the real answer
    assert run(GIVEN["program"], GIVEN["memory"]).memory[:4] == [11, 12, 13, 6]


def test_unknown_backend_and_model_without_a_checkpoint():
    k = add_n_kernel()
    with pytest.raises(LaunchError, match=r"unknown backend 'gpu'; choose one of interp, circuit, model"):
        launch(k, [[1], 2], backend="gpu")
    real = compile_kernel("__global__ void one(int* a) { a[threadIdx.x] = 1; }")
    with pytest.raises(LaunchError, match=r"backend 'model' needs the merged checkpoint's folder"):
        launch(real, [[0]], backend="model")


def test_interp_rejects_options_meant_for_another_backend():
    with pytest.raises(LaunchError, match="backend 'interp' takes no options, got mode"):
        launch(add_n_kernel(), [[1], 2], mode="bf16")


def test_any_backend_step_limit_stop_is_explained(monkeypatch):
    def stops(program, memory, grid, block, step_limit, **options):
        raise StepLimitError(f"the launch did not halt within the step limit of {step_limit} block executions", 1)

    monkeypatch.setattr(launch_mod, "load_backend", lambda name: stops)
    with pytest.raises(StepLimitError, match=r"step limit of 5 block executions\. Likely causes: .*spin lock") as e:
        launch(add_n_kernel(), [[1], 2], step_limit=5)
    assert e.value.block == 1


def test_backend_returning_a_wrong_memory_size_is_an_error(monkeypatch):
    monkeypatch.setattr(launch_mod, "load_backend", lambda name: lambda *a, **o: BackendRun([0] * 10, 1))
    with pytest.raises(LaunchError, match=f"returned 10 memory words; the machine has {MEM_WORDS}"):
        launch(add_n_kernel(), [[1], 2])
