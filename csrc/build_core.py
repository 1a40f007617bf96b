"""cffi builder for the C core: `qgpu_min._core` from the C99 sources in csrc/."""
import glob
import os

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))

ffibuilder = FFI()
with open(os.path.join(HERE, "qgpu_core.h")) as f:
    # The header's declarations between the CDEF markers are what Python sees.
    text = f.read()
    ffibuilder.cdef(text.split("/* CDEF BEGIN */")[1].split("/* CDEF END */")[0])

ffibuilder.set_source(
    "qgpu_min._core",
    '#include "qgpu_core.h"',
    sources=sorted(os.path.relpath(p) for p in glob.glob(os.path.join(HERE, "*.c"))),
    include_dirs=[os.path.relpath(HERE)],
    # -ffp-contract=off: the compiler never fuses a * b + c on its own, so the plain-C kernels round exactly
    # as their NumPy references do. GCC implies it with -std=c99, clang does not (it fuses wherever the target
    # has FMA, e.g. every aarch64 CPU). SIMD code is chosen at run time from per-function target attributes,
    # so no -march flag is needed and the build runs on any x86-64 or ARM. -fno-trapping-math: nothing here
    # reads floating-point exception flags, and it lets the compiler vectorize loops that select on a
    # comparison (activations.c's exp); it changes no value (unlike -ffast-math, which is never used).
    extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off", "-fno-trapping-math", "-pthread"],
    extra_link_args=["-pthread"],
    libraries=["m"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
