"""The C core on aarch64, under emulation: cross-compile qgpu_min._core for arm64 Linux with zig's clang, and run
the C kernels' tests (tests/test_kernels_*.py, each kernel against its NumPy reference) with an arm64 CPython
under qemu-user. Run it before a change to csrc/ lands (docs/ccore.md, "aarch64").

    python3 tools/aarch64_check.py [--root DIR] [-k EXPR] [pytest args...]

What it needs, fetched once into --root (default ~/.cache/qgpu-min/aarch64; ~190 MB with the downloads):
- qemu-user (`apt-get install qemu-user`: the `qemu-aarch64` command);
- Debian 12's arm64 CPython 3.11 and the libraries it links, unpacked from their .deb files (`dpkg
  --add-architecture arm64 && apt-get update` once, then this tool runs `apt-get download` and `dpkg -x`:
  nothing is installed on the machine);
- arm64 wheels of numpy, cffi, pytest and hypothesis from PyPI (`pip download --platform ...`), unzipped;
- the ziglang wheel (the cross compiler, the same that compiles CUDA here).

The core is built from the same sources and flags as csrc/build_core.py (cffi emits the module's C text; zig
cc compiles it for aarch64-linux-gnu.2.36, Debian 12's glibc), into a copy of the package under --root, so
the checkout's own build is untouched. The kernels choose their SIMD paths at run time; on aarch64 the
generic C paths run (the NEON paths of issue #37 do not exist yet). Exit status: pytest's.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEBS = ["python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libpython3.11-dev", "libc6",
        "libexpat1", "zlib1g", "libffi8", "libssl3", "libbz2-1.0", "liblzma5", "libsqlite3-0", "libuuid1",
        "libncursesw6", "libtinfo6", "libreadline8", "libcrypt1", "libnsl2", "libtirpc3", "libgssapi-krb5-2",
        "libkrb5-3", "libk5crypto3", "libcom-err2", "libkrb5support0", "libkeyutils1", "libgcc-s1", "libstdc++6"]
WHEELS = ["numpy>=1.24", "cffi>=1.15", "pycparser", "pytest", "hypothesis"]
TARGET = "aarch64-linux-gnu.2.36"


def _run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def _unpacked(root: Path, name: str, ready: str, download: list[str], pattern: str, unpack) -> Path:
    """root/name: the files `download` fetches into root/<name>.files (run there), each file matching `pattern`
    unpacked by unpack(file, folder) into it; made once (`ready` exists inside it once it is whole)."""
    out = root / name
    if (out / ready).exists():
        return out
    files = root / f"{name}.files"
    files.mkdir(parents=True, exist_ok=True)
    _run(download, cwd=files)
    tmp = root / f"{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for f in sorted(files.glob(pattern)):
        unpack(f, tmp)
    tmp.rename(out)
    return out


def sysroot(root: Path) -> Path:
    """Debian's arm64 CPython and its libraries, unpacked (no package is installed)."""
    try:
        return _unpacked(root, "sysroot", "usr/bin/python3.11", ["apt-get", "download", *(f"{d}:arm64" for d in DEBS)],
                         "*.deb", lambda f, to: _run(["dpkg", "-x", str(f), str(to)]))
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"could not download Debian's arm64 packages ({e}); run `dpkg --add-architecture arm64 "
                         f"&& apt-get update` once first") from None


def site(root: Path) -> Path:
    """numpy, cffi, pytest and hypothesis for arm64 CPython 3.11, unzipped from PyPI's wheels."""
    download = [sys.executable, "-m", "pip", "download", "-q", "--dest", ".", "--only-binary=:all:",
                "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                "--platform", "manylinux2014_aarch64", "--platform", "manylinux_2_28_aarch64", *WHEELS]
    return _unpacked(root, "site", "numpy", download, "*.whl", lambda f, to: _run(
        [sys.executable, "-m", "zipfile", "-e", str(f), str(to)], stdout=subprocess.DEVNULL))


def build_core(root: Path, sys_root: Path) -> Path:
    """A copy of the package and the tests with qgpu_min._core built for aarch64; returns the copy's folder."""
    sys.path.insert(0, str(ROOT / "csrc"))
    import build_core  # noqa: E402  (csrc/build_core.py: the cffi builder, its sources and flags)
    tree = root / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(ROOT / "qgpu_min", tree / "qgpu_min", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    c_text = tree / "_core.c"
    build_core.ffibuilder.emit_c_code(str(c_text))
    _, _, _, kwargs = build_core.ffibuilder._assigned_source
    sources = [str(Path(s).resolve()) for s in kwargs["sources"]]      # relative to this process's folder
    include = sys_root / "usr/include/python3.11"
    arch_include = sys_root / "usr/include"          # pyconfig.h includes <aarch64-linux-gnu/python3.11/...>
    out = tree / "qgpu_min" / "_core.cpython-311-aarch64-linux-gnu.so"
    _run([sys.executable, "-m", "ziglang", "cc", "-target", TARGET, "-shared", "-fPIC",
          *kwargs["extra_compile_args"], f"-I{ROOT / 'csrc'}", f"-I{include}", f"-I{arch_include}",
          str(c_text), *sources, "-o", str(out), *kwargs["extra_link_args"], "-lm"])
    return tree


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path.home() / ".cache" / "qgpu-min" / "aarch64")
    ap.add_argument("pytest_args", nargs="*", help="passed to pytest (default: the C kernels' tests)")
    a = ap.parse_args(argv)
    if shutil.which("qemu-aarch64") is None:
        raise SystemExit("qemu-aarch64 is not installed: `apt-get install qemu-user`")
    a.root.mkdir(parents=True, exist_ok=True)
    sys_root, packages = sysroot(a.root), site(a.root)
    tree = build_core(a.root, sys_root)
    tests = a.pytest_args or sorted(str(p.relative_to(tree)) for p in (tree / "tests").glob("test_kernels_*.py"))
    env = dict(os.environ, PYTHONPATH=f"{tree}:{packages}", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONHOME", None)
    cmd = ["qemu-aarch64", "-L", str(sys_root), str(sys_root / "usr/bin/python3.11"), "-c",
           "import platform, sys, pytest; print('python', sys.version.split()[0], 'on', platform.machine()); "
           "sys.exit(pytest.main(sys.argv[1:]))", "-q", "-p", "no:cacheprovider", *tests]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=tree, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main())
