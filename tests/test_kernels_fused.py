"""Fused entry points vs their one-at-a-time equivalents: several products sharing one input, and the
multi-token (prefill) conv and DeltaNet recurrences; plus the thread pool under threads and fork."""
import os
import signal
import threading
import time

import numpy as np
import pytest

from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R
from qgpu_min.model.bf16 import f32_to_bf16

from ccore_fixtures import isa, thread_count, threads  # noqa: F401  (pytest fixtures)


def _weights(rng, outs, n_in):
    return [f32_to_bf16(rng.standard_normal((o, n_in)).astype(np.float32)) for o in outs]


# Row counts off the 4-row tile and 16-row grain, tiny ones (in_proj_b/a), and more than QGPU_MAX_MULTI.
OUTS = [[37, 5, 64], [16, 1, 1, 300], [3], [2048, 16, 16], [7] * 19]


@pytest.mark.parametrize("outs", OUTS)
def test_multi_equals_separate_products_bit_for_bit(isa, threads, outs):
    rng = np.random.default_rng(len(outs) * 100 + outs[0])
    n_in = 517 if outs[0] != 2048 else 2048
    ws = _weights(rng, outs, n_in)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    ys = K.matmul_bf16_multi(ws, x)
    vs = K.matvec_bf16_multi(ws, x[1])
    assert len(ys) == len(vs) == len(ws)
    for w, y, v, ref in zip(ws, ys, vs, R.matmul_bf16_multi(ws, x)):
        assert y.shape == (3, w.shape[0]) and v.shape == (w.shape[0],) and y.dtype == v.dtype == np.float32
        assert np.array_equal(y, K.matmul_bf16(w, x)) and np.array_equal(v, K.matvec_bf16(w, x[1]))
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-3)


def test_multi_mixes_sparse_and_dense():
    rng = np.random.default_rng(1)
    dense, mostly_zero = _weights(rng, [40, 30], 100)
    mostly_zero[:, 3:] = 0
    sparse = K.SparseBF16.from_dense(mostly_zero)
    x = rng.standard_normal(100).astype(np.float32)
    a, b, c = K.matvec_bf16_multi([dense, sparse, dense], x)
    assert np.array_equal(a, K.matvec_bf16(dense, x)) and np.array_equal(c, a)
    assert np.array_equal(b, K.sparse_matvec(sparse, x))
    assert [y.shape for y in K.matmul_bf16_multi([sparse, dense], np.zeros((0, 100), np.float32))] == \
        [(0, 30), (0, 40)]


@pytest.mark.parametrize("call, message", [
    (lambda w: K.matvec_bf16_multi([], np.zeros(6, np.float32)), "non-empty list"),
    (lambda w: K.matvec_bf16_multi(w, np.zeros(6, np.float32)), "non-empty list"),
    (lambda w: K.matvec_bf16_multi([w, w.astype(np.float32)], np.zeros(6, np.float32)),
     r"ws\[1\] must be a 2-D uint16"),
    (lambda w: K.matvec_bf16_multi([w, np.zeros((4, 12), np.uint16)[:, ::2]], np.zeros(6, np.float32)),
     r"ws\[1\] \(4, 6\) is not C-contiguous"),
    (lambda w: K.matvec_bf16_multi([w, np.zeros((2, 5), np.uint16)], np.zeros(6, np.float32)),
     r"ws\[1\] has 5 input columns, ws\[0\] has 6"),
    (lambda w: K.matvec_bf16_multi([w], np.zeros(5, np.float32)), r"x has shape \(5,\), expected \(6,\)"),
    (lambda w: K.matmul_bf16_multi([w], np.zeros(6, np.float32)), r"x has shape \(6,\), expected \(\*, 6\)"),
])
def test_multi_bad_arguments_are_named(call, message):
    with pytest.raises(K.KernelInputError, match=message):
        call(np.zeros((4, 6), np.uint16))


def _delta_run(rng, t, h, dk, dv):
    q = R.l2norm(rng.standard_normal((t, h, dk)).astype(np.float32)) / np.float32(np.sqrt(dk))
    k = R.l2norm(rng.standard_normal((t, h, dk)).astype(np.float32))
    v = rng.standard_normal((t, h, dv)).astype(np.float32)
    g = (-3 * rng.random((t, h))).astype(np.float32)
    beta = rng.random((t, h)).astype(np.float32)
    return q, k, v, g, beta


@pytest.mark.parametrize("t, h, dk, dv", [(1, 1, 1, 1), (5, 3, 5, 7), (17, 16, 128, 128), (9, 2, 16, 33)])
def test_deltanet_prefill_equals_steps_bit_for_bit(threads, t, h, dk, dv):
    rng = np.random.default_rng(t * 1000 + h + dk + dv)
    S0 = rng.standard_normal((h, dk, dv)).astype(np.float32)
    args = _delta_run(rng, t, h, dk, dv)
    S, S_steps, S_ref = S0.copy(), S0.copy(), S0.copy()
    o = K.deltanet_prefill(S, *args)
    o_steps = np.stack([K.deltanet_step(S_steps, *(a[i] for a in args)) for i in range(t)])
    assert o.shape == (t, h, dv) and o.dtype == np.float32
    assert np.array_equal(o, o_steps) and np.array_equal(S, S_steps)
    o_ref = R.deltanet_prefill(S_ref, *args)
    np.testing.assert_allclose(o, o_ref, rtol=1e-5, atol=1e-5 * np.abs(o_ref).max())
    np.testing.assert_allclose(S, S_ref, rtol=1e-5, atol=1e-5 * np.abs(S_ref).max())


def test_deltanet_prefill_of_no_tokens_changes_nothing_and_bad_input_is_named():
    rng = np.random.default_rng(2)
    S = rng.standard_normal((2, 3, 4)).astype(np.float32)
    before = S.copy()
    q, k, v, g, beta = _delta_run(rng, 0, 2, 3, 4)
    assert K.deltanet_prefill(S, q, k, v, g, beta).shape == (0, 2, 4)
    q, k, v, g, beta = _delta_run(rng, 3, 2, 3, 4)
    with pytest.raises(K.KernelInputError, match=r"deltanet_prefill: beta has shape \(2, 2\), expected \(3, 2\)"):
        K.deltanet_prefill(S, q, k, v, g, beta[:2])
    with pytest.raises(K.KernelInputError, match=r"deltanet_prefill: q has shape \(2, 3\), expected \(\*, 2, 3\)"):
        K.deltanet_prefill(S, q[0], k, v, g, beta)
    assert np.array_equal(S, before)


@pytest.mark.parametrize("t, c, k", [(1, 7, 4), (13, 6144, 4), (6, 5, 1), (4, 9, 2), (2, 3, 6)])
def test_conv_prefill_equals_updates_and_reference_bit_for_bit(t, c, k):
    rng = np.random.default_rng(t + c + k)
    state = rng.standard_normal((c, k - 1)).astype(np.float32)
    w = rng.standard_normal((c, k)).astype(np.float32)
    x = rng.standard_normal((t, c)).astype(np.float32)
    s_steps, s_ref = state.copy(), state.copy()
    y = K.conv_prefill(state, x, w)
    assert y.shape == (t, c) and y.dtype == np.float32
    assert np.array_equal(y, np.stack([K.conv_update(s_steps, x[i], w) for i in range(t)]))
    assert np.array_equal(y, R.conv_prefill(s_ref, x, w))
    assert np.array_equal(state, s_steps) and np.array_equal(state, s_ref)


def test_conv_prefill_bad_input_changes_nothing():
    state = np.ones((3, 3), np.float32)
    with pytest.raises(K.KernelInputError, match=r"conv_prefill: x has shape \(2, 4\), expected \(\*, 3\)"):
        K.conv_prefill(state, np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32))
    assert np.array_equal(state, np.ones((3, 3), np.float32))


def test_pool_is_safe_from_several_python_threads():
    # cffi drops the GIL, so two Python threads can be inside the C core at once; results must not mix.
    rng = np.random.default_rng(4)
    ws = _weights(rng, [3000, 1000], 777)
    xs = rng.standard_normal((4, 777)).astype(np.float32)
    with thread_count(2):
        expected = [K.matvec_bf16(ws[i % 2], xs[i]) for i in range(4)]
        failures = []

        def hammer(i: int) -> None:
            for _ in range(30):
                if not np.array_equal(K.matvec_bf16(ws[i % 2], xs[i]), expected[i]):
                    failures.append(i)

        pool = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    assert not failures


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pool_works_in_a_forked_child():
    rng = np.random.default_rng(6)
    (w,) = _weights(rng, [4000], 600)
    x = rng.standard_normal(600).astype(np.float32)
    with thread_count(2):
        expected = K.matvec_bf16(w, x)  # the parent's pool is running now
        pid = os.fork()
        if pid == 0:  # child: only this thread exists; the core must start its own workers
            os._exit(0 if np.array_equal(K.matvec_bf16(w, x), expected) else 1)
        deadline = time.monotonic() + 60  # a child stuck on the parent's pool state must fail, not hang
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung in the C core")
        status = done[1]
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_pool_threads_persist_between_calls():
    rng = np.random.default_rng(8)
    (w,) = _weights(rng, [1000], 777)
    x = rng.standard_normal(777).astype(np.float32)
    with thread_count(5):
        expected = K.matvec_bf16(w, x)
        after_first = len(os.listdir("/proc/self/task"))
        for _ in range(10):
            assert np.array_equal(K.matvec_bf16(w, x), expected)
        after_more = len(os.listdir("/proc/self/task"))
    assert after_first >= 5 and after_more == after_first  # 4 workers stay parked; none started per call
