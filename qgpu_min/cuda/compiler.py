"""CUDA -> PTX: find a compiler, run it device-only, hand back the PTX text.

Discovery order (`find_compiler`): an explicit setting (the `preferred` argument, else the environment
variable QGPU_CUDA_COMPILER), then `clang++` / `clang` on PATH, then the `ziglang` wheel
(`python -m ziglang clang`), then `nvcc`. A setting may be a name ('clang', 'zig', 'nvcc') or the
path of an executable; its kind is read from its `--version` output.

clang compiles with our own prelude (`include/qgpu_prelude.h`) and header stubs instead of a CUDA
SDK, for `--target=i686-linux-gnu`, which makes 32-bit PTX (`.address_size 32`). nvcc uses its own
headers and makes 64-bit PTX. Compiler diagnostics reach the user unchanged in CudaCompileError.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from qgpu_min.errors import QgpuError

from . import ptx_cache

INCLUDE_DIR = Path(__file__).resolve().parent / "include"
PRELUDE = INCLUDE_DIR / "qgpu_prelude.h"
TEXT_SOURCE_NAME = "kernel.cu"      # the file name CUDA source text is compiled under (errors name it)
ENV_VAR = "QGPU_CUDA_COMPILER"
GPU_ARCH = "sm_75"
TIMEOUT_S = 300

HOW_TO_GET_ONE = (
    "Install one of: the ziglang wheel (`pip install 'qgpu-min[cuda]'` or `pip install ziglang`, which bundles "
    "clang), clang (`apt-get install clang`), or NVIDIA's nvcc; or point QGPU_CUDA_COMPILER at one. Saved "
    "programs (.qgpu) and PTX need none."
)


class CudaCompileError(QgpuError):
    """The compiler rejected the source; `diagnostics` holds its output unchanged."""

    def __init__(self, message: str, diagnostics: str = ""):
        super().__init__(message)
        self.diagnostics = diagnostics


class CompilerNotFoundError(QgpuError):
    """No CUDA compiler was found (or the one asked for does not exist); says how to get one."""


@dataclass(frozen=True)
class Compiler:
    kind: str  # 'clang' or 'nvcc'
    argv: tuple[str, ...]  # the command that runs it, e.g. ('clang++',) or (python, '-m', 'ziglang', 'clang')
    version: str  # what ran, e.g. 'clang 14.0.6', 'zig clang 22.1.8', 'nvcc 13.0'


@dataclass(frozen=True)
class PtxResult:
    text: str
    compiler: str  # Compiler.version of the compiler that ran, or 'ptx input'
    address_size: int  # 32 or 64
    diagnostics: str = ""  # warnings the compiler printed on success


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=None)
def _probe(argv: tuple[str, ...], label_prefix: str = "") -> Compiler | None:
    """Run `argv --version`; a Compiler if it is a clang or an nvcc, else None."""
    try:
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout + out.stderr
    m = re.search(r"clang version (\d+(?:\.\d+)*)", text)
    if m:
        return Compiler("clang", argv, f"{label_prefix}clang {m.group(1)}")
    m = re.search(r"Cuda compilation tools, release (\d+\.\d+)", text)
    if m:
        return Compiler("nvcc", argv, f"nvcc {m.group(1)}")
    return None


def _zig_argv() -> tuple[str, ...] | None:
    if importlib.util.find_spec("ziglang") is None:
        return None
    return (sys.executable, "-m", "ziglang", "clang")


def _candidates() -> list[tuple[tuple[str, ...], str]]:
    """The automatic discovery order, as (argv, label prefix)."""
    found = []
    for name in ("clang++", "clang"):
        path = shutil.which(name)
        if path:
            found.append(((path,), ""))
    zig = _zig_argv()
    if zig:
        found.append((zig, "zig "))
    nvcc = shutil.which("nvcc")
    if nvcc:
        found.append(((nvcc,), ""))
    return found


def _is_zig(setting: str) -> bool:
    return setting in ("zig", "ziglang")


def _setting_argv(setting: str) -> tuple[str, ...] | None:
    """The command a compiler setting names ('zig', a name on PATH, a path), or None where it is not found."""
    if _is_zig(setting):
        return _zig_argv()
    path = shutil.which(setting)
    return (path,) if path else None


def _explicit(setting: str) -> Compiler:
    argv = _setting_argv(setting)
    if argv is None:
        where = "the ziglang wheel is not installed" if _is_zig(setting) else "it is not found"
        raise CompilerNotFoundError(f"compiler {setting!r} was asked for, but {where}. {HOW_TO_GET_ONE}")
    compiler = _probe(argv, "zig " if _is_zig(setting) else "")
    if compiler is None:
        raise CompilerNotFoundError(f"{setting!r} does not report itself as clang or nvcc (`--version`). "
                                    f"{HOW_TO_GET_ONE}")
    return compiler


def find_compiler(preferred: str | None = None) -> Compiler:
    """The compiler to use: `preferred`, else $QGPU_CUDA_COMPILER, else the first one found."""
    setting = preferred or os.environ.get(ENV_VAR) or None
    if setting:
        return _explicit(setting)
    for argv, prefix in _candidates():
        compiler = _probe(argv, prefix)
        if compiler is not None:
            return compiler
    raise CompilerNotFoundError(f"no CUDA compiler found (looked for clang++, clang, the ziglang wheel and "
                                f"nvcc). {HOW_TO_GET_ONE}")


# ---------------------------------------------------------------------------------------------
# Invocation
# ---------------------------------------------------------------------------------------------


def clang_flags(cuda_path: Path) -> list[str]:
    """Device-only, 32-bit PTX for sm_75 with our prelude and no CUDA SDK (see docs/cuda.md)."""
    return [
        "-x", "cuda", "--cuda-device-only", f"--cuda-gpu-arch={GPU_ARCH}",
        "-nocudainc", "-nocudalib", f"--cuda-path={cuda_path}",
        # our include dir stands in for the system headers, which do not exist for i686
        "-nostdlibinc", "-nostdinc++", "-include", str(PRELUDE), f"-I{INCLUDE_DIR}",
        # shfl.sync needs PTX 6.3; without a CUDA SDK clang would not enable it
        "-Xclang", "-target-feature", "-Xclang", "+ptx63",
        "--target=i686-linux-gnu", "-O2", "-S",
        # `.loc` line tables, so errors can name the CUDA source line (no effect on the code)
        "-gline-tables-only",
        # switch statements as compare chains, not brx.idx jump tables
        "-fno-jump-tables",
    ]


def nvcc_flags() -> list[str]:
    return ["--ptx", f"-arch={GPU_ARCH}", "-O2", "-lineinfo", "-x", "cu"]


def _command(compiler: Compiler, src: str, out: str, workdir: Path) -> list[str]:
    if compiler.kind == "clang":
        empty = workdir / "no-cuda"
        empty.mkdir(exist_ok=True)
        return [*compiler.argv, *clang_flags(empty), "-o", out, src]
    return [*compiler.argv, *nvcc_flags(), "-o", out, src]


def _run(compiler: Compiler, src: str, workdir: Path, cwd: Path | None) -> PtxResult:
    out = workdir / "out.ptx"
    cmd = _command(compiler, src, str(out), workdir)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise CudaCompileError(f"{compiler.version} did not finish within {TIMEOUT_S} s") from e
    diagnostics = proc.stderr + proc.stdout
    if proc.returncode != 0 or not out.exists():
        raise CudaCompileError(f"{compiler.version} could not compile {src}:\n{diagnostics}", diagnostics)
    text = out.read_text()
    return PtxResult(text, compiler.version, ptx_address_size(text), diagnostics)


def ptx_address_size(text: str) -> int:
    """The `.address_size` of PTX text (PTX's default, 64, when the directive is absent)."""
    m = re.search(r"^\s*\.address_size\s+(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else 64


def _looks_like_ptx(text: str) -> bool:
    return re.search(r"^\s*\.version\s+\d", text, re.MULTILINE) is not None and "__global__" not in text


def _as_path(source: str | Path) -> Path | None:
    """`source` as a file path, or None when it is source text."""
    if isinstance(source, Path):
        return source
    if "\n" in source or "{" in source or len(source) > 4096:
        return None
    if source.endswith((".cu", ".ptx", ".cuh", ".cpp", ".cc")) or os.path.exists(source):
        return Path(source)
    return None


def compile_to_ptx(source: str | Path, compiler: str | Compiler | None = None) -> PtxResult:
    """Compile a .cu file (path) or CUDA source text to PTX; a .ptx file or PTX text is returned as is."""
    path = _as_path(source)
    if path is not None and not path.is_file():
        raise CudaCompileError(f"no such file: {path}")
    if path is not None and path.suffix == ".ptx":
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, ValueError) as e:      # PTX is ASCII; anything else is not a PTX file
            raise CudaCompileError(f"{path}: cannot be read as PTX text ({e})") from None
        return PtxResult(text, "ptx input", ptx_address_size(text))
    if path is None and _looks_like_ptx(str(source)):
        return PtxResult(str(source), "ptx input", ptx_address_size(str(source)))
    kept = _cache_key(source, path, compiler)
    if kept is not None and (hit := ptx_cache.load(kept)) is not None:
        return PtxResult(**hit)
    chosen = compiler if isinstance(compiler, Compiler) else find_compiler(compiler)
    with tempfile.TemporaryDirectory(prefix="qgpu-cuda-") as tmp:
        workdir = Path(tmp)
        if path is not None:
            result = _run(chosen, str(path), workdir, cwd=None)
        else:
            # source text: compile it as kernel.cu from inside the temp dir, so diagnostics say kernel.cu
            (workdir / TEXT_SOURCE_NAME).write_text(str(source))
            result = _run(chosen, TEXT_SOURCE_NAME, workdir, cwd=workdir)
    if kept is not None:
        ptx_cache.store(kept, {"text": result.text, "compiler": result.compiler,
                               "address_size": result.address_size, "diagnostics": result.diagnostics})
    return result


def _cache_key(source: str | Path, path: Path | None, compiler: str | Compiler | None) -> str | None:
    """The PTX cache's key for this compile (ptx_cache.py), or None when it is not to be cached."""
    if not ptx_cache.enabled():
        return None
    if isinstance(compiler, Compiler):
        argvs = [compiler.argv]
    elif setting := (compiler or os.environ.get(ENV_VAR) or None):
        argvs = [argv] if (argv := _setting_argv(setting)) else []
    else:
        argvs = [argv for argv, _ in _candidates()]
    who = ptx_cache.fingerprint(argvs)
    if who is None:
        return None
    try:
        text = path.read_text(encoding="utf-8") if path is not None else str(source)
    except (OSError, ValueError):
        return None
    flags = clang_flags(Path("<no-cuda>")) + ["|"] + nvcc_flags()
    return ptx_cache.key(text, str(path) if path is not None else TEXT_SOURCE_NAME, flags, who, INCLUDE_DIR)
