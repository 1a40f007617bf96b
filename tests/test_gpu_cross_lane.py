"""Shuffles and votes on the GPU in the weights: the source-lane rule as circuit units, and launches under
--check (a vote's active lanes: those of the step before this lane, itself, and the candidates after it).

Oracle: machine.interp.shfl_source (the interpreter's rule) for the units, over every mode, lane and the
B / C bits that matter plus random words; for the launches the interpreter, token by token, register by
register (check=True), and its result (a shuffle of a lane that sits out reads that lane's register as it is:
machine-defined, so NumPy has no say)."""
from __future__ import annotations

import numpy as np
import pytest

from qgpu_min.circuit import lib
from qgpu_min.circuit.ir import Circuit
from qgpu_min.circuit.sim import group_value, simulate, word_inputs
from qgpu_min.gpu.core import _shuffle_units
from qgpu_min.gpu.layout import SHFL_MODES
from qgpu_min.host.launch import compile_kernel, launch
from qgpu_min.machine.interp import shfl_source
from qgpu_min.machine.isa import LANES

pytestmark = pytest.mark.filterwarnings("ignore")


def test_source_lane_units_follow_the_machine_rule() -> None:
    c = Circuit("shfl")
    on, mode, lane = c.input("on", 2), c.input("mode", len(SHFL_MODES)), c.input("lane", LANES)
    b, cw = c.input_word("b"), c.input_word("c")
    src = c.gate("src", LANES, 0, _shuffle_units(on, mode, lane, b, cw))
    c.output(src)
    rng = np.random.default_rng(7)
    n = 6000
    # B: small deltas and lanes, then any word; C: PTX's clamp | segment << 8 forms, then any word
    bv = np.where(rng.random(n) < 0.7, rng.integers(0, 40, n), rng.integers(0, 1 << 32, n, dtype=np.int64))
    cv = np.where(rng.random(n) < 0.7, rng.integers(0, 32, n) | rng.integers(0, 32, n) << 8,
                  rng.integers(0, 1 << 32, n, dtype=np.int64))
    m, l, o = rng.integers(0, len(SHFL_MODES), n), rng.integers(0, LANES, n), rng.integers(0, 2, n)
    values, _ = simulate(c, {on: o, mode: m, lane: l, **word_inputs(b, bv), **word_inputs(cw, cv)})
    got = group_value(values, src, n)
    want = [shfl_source(SHFL_MODES[m[i]], int(l[i]), int(bv[i]), int(cv[i])) if o[i] else 0 for i in range(n)]
    assert got.tolist() == want


SHUFFLES = """
__global__ void shuffles(const int* a, int* out, int w) {
    int t = threadIdx.x, v = a[t];
    v = __shfl_xor_sync(0xffffffff, v, 1) + v;            // the result replaces its own source
    int up = __shfl_up_sync(0xffffffff, v, 1, w);         // a segment of width w
    int idx = __shfl_sync(0xffffffff, a[t] * 3, (t + 2) & 3);
    int d = 0;
    if (t % 4 != 2) d = __shfl_down_sync(0xffffffff, a[t] - 1, 1);   // lane 2 sits out; lane 1 reads it
    out[t] = v * 1000 + up * 10 + (idx ^ d);
}
"""


@pytest.mark.parametrize("n, w, mode", [(8, 2, "fp32"), (6, 4, "bf16")])
def test_shuffles_exact_on_the_gpu(tmp_path, n: int, w: int, mode: str) -> None:
    src = tmp_path / "shuffles.cu"
    src.write_text(SHUFFLES)
    kernel = compile_kernel(src)
    a = np.random.default_rng(n).integers(-50, 50, n)
    want = launch(kernel, [a, np.zeros(n, np.int64), w], block=n, backend="interp").arrays["out"]
    got = launch(kernel, [a, np.zeros(n, np.int64), w], block=n, backend="circuit", mode=mode, check=True)
    assert list(got.arrays["out"]) == list(want)
    assert got.tokens["generated"] > 0


VOTES = """
__global__ void votes(const int* a, unsigned* out, int rounds) {
    int t = threadIdx.x, v = a[t];
    unsigned acc = 0;
    for (int k = 0; k < rounds; k++) {           // the same vote blocks, step after step
        if ((v + k) % 3 != 0) {                   // diverged: a partial, often non-contiguous active set
            acc = acc * 7 + __ballot_sync(__activemask(), v > k);
            acc += __activemask() << 8;
        } else {
            acc ^= __any_sync(__activemask(), v & 1) << 4;
        }
        acc += __all_sync(0xffffffff, v >= k) << 12;
        if (__any_sync(0xffffffff, v == k)) acc ^= 0x10000;      // a branch on a vote
    }
    out[t] = acc;
}
"""


@pytest.mark.parametrize("n, rounds, mode", [(7, 4, "fp32"), pytest.param(11, 3, "bf16", marks=pytest.mark.slow)])
def test_votes_exact_on_the_gpu(tmp_path, n: int, rounds: int, mode: str) -> None:
    src = tmp_path / "votes.cu"
    src.write_text(VOTES)
    kernel = compile_kernel(src)
    a = np.random.default_rng(n).integers(0, 6, n)
    want = launch(kernel, [a, np.zeros(n, np.int64), rounds], block=n, backend="interp").arrays["out"]
    got = launch(kernel, [a, np.zeros(n, np.int64), rounds], block=n, backend="circuit", mode=mode, check=True)
    assert list(got.arrays["out"]) == list(want)
    assert len(set(int(x) for x in want)) > 1      # the lanes' votes differ: the active sets matter
