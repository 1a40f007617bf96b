"""`qgpu-min run` through click's CliRunner: outputs, defaults and every kind of bad input."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from qgpu_min.cli import main

ROOT = Path(__file__).resolve().parent.parent
DOT = str(ROOT / "examples" / "dot.cu")
DOT_ARGS = ["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3"]


def qgpu(*argv: str):
    return CliRunner().invoke(main, list(argv))


def interp(*argv: str):
    """`qgpu-min run ... --backend interp`: the options and errors under test are the front end's, the same on
    every backend; the interpreter answers in milliseconds."""
    return qgpu(*argv, "--backend", "interp")


def write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def assert_error(result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    for f in fragments:
        assert f in result.stderr, (f, result.stderr)


@pytest.mark.parametrize("backend", [[], ["--backend", "interp"]])
def test_dot_example_prints_arrays(backend: list[str]) -> None:
    r = qgpu("run", DOT, *DOT_ARGS, *backend)
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["a = [1, 2, 3]", "b = [4, 5, 6]", "out = [32]"]


def test_dot_example_json() -> None:
    r = qgpu("run", DOT, *DOT_ARGS, "--json")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["arrays"] == {"a": [1, 2, 3], "b": [4, 5, 6], "out": [32]}
    assert obj["kernel"] == "dot"
    assert obj["grid"] == [1, 1]
    assert obj["block"] == [3, 1]  # default: one thread per element of the longest array
    assert obj["backend"] == "circuit" and obj["mode"] == "fp32"  # the default: the GPU in the weights
    assert set(obj["tokens"]) == {"prompt", "generated"} and 0 < obj["tokens"]["generated"] <= 47
    assert isinstance(obj["compiler"], str) and obj["compiler"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_dot_example_nvcc() -> None:
    r = interp("run", DOT, *DOT_ARGS, "--compiler", "nvcc", "--json", "--grid", "2", "--block", "1")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["arrays"]["out"] == [32] and obj["compiler"].startswith("nvcc")
    assert obj["grid"] == [2, 1] and obj["block"] == [1, 1]


def test_matmul_example_2d_block() -> None:
    r = interp("run", str(ROOT / "examples" / "matmul.cu"), "--arg", "[1,2,3,4,5,6]", "--arg", "[7,8,9,10,11,12]",
             "--arg", "zeros(4)", "--arg", "2", "--arg", "3", "--arg", "2", "--block", "2,2")
    assert r.exit_code == 0, r.output
    assert "C = [58, 64, 139, 154]" in r.stdout.splitlines()


def test_2d_grid_json() -> None:
    """index_2d writes x*100 + y - gridDim.x*blockDim.y at (x, y) of a w x h matrix."""
    r = interp("run", str(ROOT / "tests" / "kernels" / "index_2d.cu"), "--arg", "zeros(12)", "--arg", "4",
             "--arg", "3", "--grid", "2,2", "--block", "2,2", "--json")
    assert r.exit_code == 0, r.output
    obj = json.loads(r.stdout)
    assert obj["grid"] == [2, 2] and obj["block"] == [2, 2]
    assert obj["arrays"]["out"] == [x * 100 + y - 4 for y in range(3) for x in range(4)]


@pytest.mark.parametrize("example, args, line", [
    ("saxpy.cu", ["4", "3", "[1,2,3,4]", "[10,20,30,40]"], "y = [13, 26, 39, 52]"),
    ("reduce.cu", ["[3,1,4,1,5,9,2,6,5,3]", "zeros(1)", "10", "--block", "8", "--grid", "2"], "total = [39]"),
    ("histogram.cu", ["[1,5,2,7,1,1,3,6,0,4]", "zeros(4)", "10", "4"], "hist = [2, 4, 2, 2]"),
])
def test_other_examples(example: str, args: list[str], line: str) -> None:
    argv = []
    for a in args:
        argv += [a] if a.startswith("--") or argv[-1:] in (["--block"], ["--grid"]) else ["--arg", a]
    r = interp("run", str(ROOT / "examples" / example), *argv)
    assert r.exit_code == 0, r.output
    assert line in r.stdout.splitlines()


def test_signedness_and_negative_scalars(tmp_path: Path) -> None:
    src = write(tmp_path, "k.cu", """
        __global__ void k(const int* a, unsigned* u, int* s, int bias) {
            int i = threadIdx.x;
            u[i] = a[i] + bias;
            s[i] = a[i] + bias;
        }""")
    r = interp("run", src, "--arg", "[0, 0xFFFFFFFF]", "--arg", "zeros(2)", "--arg", "zeros(2)", "--arg", "-5")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["a = [0, -1]", "u = [4294967291, 4294967290]", "s = [-5, -6]"]


def test_kernel_choice(tmp_path: Path) -> None:
    ops = str(ROOT / "tests" / "kernels" / "vec_ops.cu")
    r = interp("run", ops, "--kernel", "vec_mul", "--arg", "[2,3]", "--arg", "[5,-7]", "--arg", "zeros(2)", "--arg", "2")
    assert r.exit_code == 0, r.output
    assert "c = [10, -21]" in r.stdout.splitlines()


def test_unknown_kernel() -> None:
    r = interp("run", str(ROOT / "tests" / "kernels" / "vec_ops.cu"), "--kernel", "nope", "--arg", "1")
    assert_error(r, 1, "error:", "nope")


def test_several_kernels_need_a_choice() -> None:
    r = interp("run", str(ROOT / "tests" / "kernels" / "vec_ops.cu"), "--arg", "1")
    assert_error(r, 1, "error:", "vec_mul")


def test_invalid_cuda_shows_compiler_message(tmp_path: Path) -> None:
    src = write(tmp_path, "bad.cu", "__global__ void k(int* a) { a[0] = undeclared_thing; }\n")
    r = interp("run", src, "--arg", "[1]")
    assert_error(r, 1, "error:", "undeclared_thing")


def test_float_kernel_is_unsupported(tmp_path: Path) -> None:
    src = write(tmp_path, "f.cu", "__global__ void k(float* a) { a[threadIdx.x] = a[threadIdx.x] * 1.5f; }\n")
    r = interp("run", src, "--arg", "[1]")
    assert_error(r, 1, "error:")


def test_step_limit(tmp_path: Path) -> None:
    src = write(tmp_path, "spin.cu", """
        __global__ void spin(volatile int* flag) { while (flag[0] == 0) { } }""")
    r = interp("run", src, "--arg", "[0]", "--step-limit", "50")
    assert_error(r, 1, "error:", "step limit")


def test_out_of_range_store(tmp_path: Path) -> None:
    src = write(tmp_path, "oob.cu", "__global__ void k(int* a, int i) { a[i] = 1; }\n")
    r = interp("run", src, "--arg", "[0]", "--arg", "100000")
    assert_error(r, 1, "error:", "lane")


@pytest.mark.parametrize("backend", [[], ["--backend", "interp"]])
def test_block_over_capacity(backend: list[str]) -> None:
    r = qgpu("run", DOT, *DOT_ARGS, "--block", "33", *backend)
    assert_error(r, 1, "error:", "33", "32")


@pytest.mark.parametrize("backend", [[], ["--backend", "interp"]])
def test_memory_over_capacity(backend: list[str]) -> None:
    r = qgpu("run", DOT, "--arg", "zeros(600)", "--arg", "zeros(600)", "--arg", "zeros(1)", "--arg", "3", *backend)
    assert_error(r, 1, "error:", "1024", "over by")


def test_backend_model_needs_a_built_checkpoint(tmp_path) -> None:
    r = qgpu("run", DOT, *DOT_ARGS, "--backend", "model")
    assert r.exit_code == 2 and "--backend model needs --model DIR" in r.output
    r = qgpu("run", DOT, *DOT_ARGS, "--model", str(tmp_path))
    assert r.exit_code == 2 and "--model DIR goes with --backend model" in r.output
    r = qgpu("run", DOT, *DOT_ARGS, "--backend", "model", "--model", str(tmp_path))
    assert_error(r, 1, "error:", "no qgpu_manifest.json", "not a checkpoint built by `qgpu-min build`")


def test_gpu_options_are_refused_on_the_interpreter() -> None:
    r = qgpu("run", DOT, *DOT_ARGS, "--check", "--backend", "interp")
    assert r.exit_code == 2 and "--check" in r.output


@pytest.mark.parametrize("argv, fragments", [
    (["--arg", "[1,2,3]", "--arg", "[4,5", "--arg", "zeros(1)", "--arg", "3"], ["--arg #2", "not an array literal"]),
    (["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "3.0"], ["--arg #4"]),
    (["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "4294967296"], ["32-bit range"]),
    (["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)"],
     ["dot(int* a, int* b, int* out, int n) takes 4 arguments", "got 3"]),
    (["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "1", "--arg", "3"], ["--arg #3 (out)", "is a pointer"]),
    (["--arg", "[1,2,3]", "--arg", "[4,5,6]", "--arg", "zeros(1)", "--arg", "[3]"], ["--arg #4 (n)", "is a scalar"]),
    (DOT_ARGS + ["--grid", "0"], ["--grid", "at least 1"]),
    (DOT_ARGS + ["--block", "2,x"], ["--block", "expected N or X,Y"]),
    (DOT_ARGS + ["--backend", "gpu"], ["--backend"]),
])
def test_malformed_arguments(argv: list[str], fragments: list[str]) -> None:
    r = qgpu("run", DOT, *argv)
    assert_error(r, 2, *fragments)


def test_missing_file() -> None:
    r = qgpu("run", "no/such/file.cu")
    assert_error(r, 2, "does not exist")


def test_template_kernel_is_named_with_its_arguments() -> None:
    templ = str(ROOT / "tests" / "user_kernels" / "templ.cu")
    result = interp("run", templ, "--kernel", "scale<-7>", "--arg", "[1,2]", "--arg", "2", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["kernel"] == "scale<-7>"
    assert out["arrays"]["a"] == [1 * -7 - 7, 2 * -7 - 7]


def test_first_use_compile_is_announced_on_stderr(monkeypatch) -> None:
    """A run whose GPU is not compiled yet says so on stderr (it takes seconds), and --json stdout stays one
    object. The compile itself is the cached one here: load_or_compile is wrapped to report as it would."""
    from qgpu_min.gpu import backend, cache

    compiled = backend.compiled()                     # the real GPU, compiled or loaded once

    def first_use(spec, progress=None):
        progress("compiling the GPU (first use) ...")
        return compiled
    monkeypatch.setattr(backend, "_COMPILED", {})
    monkeypatch.setattr(cache, "load_or_compile", first_use)
    r = qgpu("run", DOT, *DOT_ARGS, "--json")
    assert r.exit_code == 0, r.output
    assert "compiling the GPU (first use)" in r.stderr
    assert json.loads(r.stdout)["arrays"]["out"] == [32]
