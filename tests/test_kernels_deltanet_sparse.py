"""deltanet_step_sparse (the decode fast path for one-hot keys/queries) against the dense C step and the
NumPy reference: same bits in S and o, and the clean flags equal a scan of the final state."""
import numpy as np
import pytest

from ccore_fixtures import isa, threads  # noqa: F401  (pytest fixtures: each SIMD level, 1 and 2 threads)
from qgpu_min.model import kernels as K
from qgpu_min.model import kernels_ref as R


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _case(rng, h=4, dk=16, dv=12, hot=1, decay_one=True, qhot=1):
    """A state of small integers times powers of two (like the circuit's), keys/queries with `hot` nonzero
    entries per head (some -0 entries among the zeros), decay exactly 1 in most heads."""
    S = (rng.integers(-3, 4, (h, dk, dv)) * 0.5).astype(np.float32)
    S[rng.random(S.shape) < 0.5] = 0.0
    k = np.zeros((h, dk), np.float32)
    q = np.zeros((h, dk), np.float32)
    k[rng.random(k.shape) < 0.2] = -0.0
    for hh in range(h):
        k[hh, rng.choice(dk, hot, replace=False)] = rng.choice([1.0, -1.0, 0.5], hot)
        q[hh, rng.choice(dk, qhot, replace=False)] = rng.choice([0.25, -0.125], qhot)
    v = (rng.integers(-4, 5, (h, dv)) * 0.25).astype(np.float32)
    g = np.zeros(h, np.float32) if decay_one else (-rng.random(h)).astype(np.float32)
    if decay_one:
        g[-1] = -0.3  # one head decays: it takes the dense path
    beta = rng.choice([0.5, 1.0, 0.75], h).astype(np.float32)
    return S, q, k, v, g, beta


def _check(S, q, k, v, g, beta, clean_in):
    dense_S, ref_S, fast_S = S.copy(), S.copy(), S.copy()
    o_dense = K.deltanet_step(dense_S, q, k, v, g, beta)
    clean = clean_in.copy()
    o_fast = K.deltanet_step_sparse(fast_S, q, k, v, g, beta, clean)
    ref_clean = clean_in.copy()
    o_ref = R.deltanet_step_sparse(ref_S, q, k, v, g, beta, ref_clean)
    assert np.array_equal(_bits(o_fast), _bits(o_dense)) and np.array_equal(_bits(fast_S), _bits(dense_S))
    assert np.array_equal(clean, R.state_clean(fast_S)) and np.array_equal(clean, ref_clean)
    # NumPy's sums go in another order: a few fp32 ulps of the terms' size, which a result near cancellation
    # (o ~ 1e-2 from terms ~ 1e2) can exceed relative to itself
    np.testing.assert_allclose(o_fast, o_ref, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(o_ref).max())))
    np.testing.assert_allclose(fast_S, ref_S, rtol=1e-5, atol=1e-6 * max(1.0, float(np.abs(ref_S).max())))
    return fast_S, clean


@pytest.mark.parametrize("hot,qhot", [(1, 1), (0, 1), (3, 2), (16, 16)])
def test_sparse_step_equals_dense_step_bit_for_bit(hot, qhot):
    rng = np.random.default_rng(hot * 10 + qhot)
    S, q, k, v, g, beta = _case(rng, hot=hot, qhot=qhot)
    clean = R.state_clean(S)
    assert clean.all()
    for _ in range(20):  # a run of tokens through one state, flags carried along
        S, clean = _check(S, q, k, v, g, beta, clean)
        S, q, k, v, g, beta = S, *_case(rng, hot=hot, qhot=qhot)[1:]


def test_unclean_states_take_the_dense_path():
    rng = np.random.default_rng(7)
    S, q, k, v, g, beta = _case(rng)
    S[0, 3, 2] = -0.0        # a -0 where an untouched row would turn it into +0
    S[1, 5, 1] = np.inf      # inf * 0 is NaN in the dense read
    S[2, 0, 0] = np.nan
    _check(S, q, k, v, g, beta, R.state_clean(S))
    _check(S, q, k, v, g, beta, np.zeros(4, np.int32))  # flags unknown: dense, then scanned


def test_non_finite_inputs_and_overflow_fall_back():
    rng = np.random.default_rng(8)
    S, q, k, v, g, beta = _case(rng)
    v[0, 0] = np.inf                      # delta inf: the zero-key rows become NaN in the dense step
    q[1, 0] = np.nan
    k[2, 1] = 3e38
    S[2, 1] = 3e38                        # the touched row overflows: unclean, read densely
    _check(S, q, k, v, g, beta, np.ones(4, np.int32))
    S, q, k, v, g, beta = _case(rng)
    k[0] = 0.0
    k[0, 2] = 1.0
    S[0, 2] = 0.0
    v[0] = -0.0                           # delta -0: +0 + -0 stays +0 (a clean state never gains a -0)
    beta[0] = 1.0
    S2, clean = _check(S, q, k, v, g, beta, np.ones(4, np.int32))
    assert clean[0] == 1 and not np.signbit(S2[0, 2]).any()


def test_sparse_step_argument_checks():
    S, q, k, v, g, beta = _case(np.random.default_rng(1))
    with pytest.raises(K.KernelInputError, match="clean"):
        K.deltanet_step_sparse(S, q, k, v, g, beta, np.ones(4, np.int64))
    with pytest.raises(K.KernelInputError, match="clean"):
        K.deltanet_step_sparse(S, q, k, v, g, beta, np.ones(3, np.int32))


@pytest.mark.parametrize("known_clean", [False, True])
def test_prefill_takes_the_sparse_path_with_the_same_bits_and_flags(known_clean):
    # circuit-like tokens (one-hot keys, decay 1 but in one head) through one prefill call must equal the
    # dense steps token by token; the flags come back as a scan of the final state
    rng = np.random.default_rng(21 + known_clean)
    S0 = _case(rng)[0]
    toks = [_case(rng)[1:] for _ in range(9)]
    q, k, v, g, beta = (np.stack([t[j] for t in toks]) for j in range(5))
    v[4, 1, 3] = -0.0  # a -0 written into a row makes that head unclean for a while
    S, S_dense = S0.copy(), S0.copy()
    clean = R.state_clean(S0) if known_clean else np.zeros(4, np.int32)
    o = K.deltanet_prefill(S, q, k, v, g, beta, clean)
    o_dense = np.stack([K.deltanet_step(S_dense, *(a[i] for a in (q, k, v, g, beta))) for i in range(9)])
    assert np.array_equal(_bits(o), _bits(o_dense)) and np.array_equal(_bits(S), _bits(S_dense))
    assert np.array_equal(clean, R.state_clean(S))
    with pytest.raises(K.KernelInputError, match="clean must be"):
        K.deltanet_prefill(S, q, k, v, g, beta, np.zeros(3, np.int32))


def test_every_simd_level_and_thread_count_gives_the_generic_bits(isa, threads):
    """A trained layer's step (dense keys, decay < 1: every head dense, split over the threads) and a
    circuit's (one-hot keys, decay 1: sparse heads), as step and as prefill, against the generic build."""
    rng = np.random.default_rng(5)
    h, dk, dv, t = 16, 128, 128, 3
    S0 = (rng.standard_normal((h, dk, dv)) * 0.1).astype(np.float32)
    q, k = rng.standard_normal((2, t, h, dk)).astype(np.float32)
    v = rng.standard_normal((t, h, dv)).astype(np.float32)
    g, beta = (-rng.random((t, h))).astype(np.float32), rng.random((t, h)).astype(np.float32)
    sparse = _case(rng, h=h, dk=dk, dv=dv, hot=2, qhot=2)

    def run():
        S, clean = S0.copy(), np.zeros(h, np.int32)
        out = [K.deltanet_step_sparse(S, q[0], k[0], v[0], g[0], beta[0], clean), S.copy(), clean.copy()]
        out += [K.deltanet_prefill(S, q[1:], k[1:], v[1:], g[1:], beta[1:], clean), S, clean]
        S2, clean2 = sparse[0].copy(), R.state_clean(sparse[0])
        out += [K.deltanet_step_sparse(S2, *sparse[1:], clean2), S2, clean2]
        return out

    got = run()
    K.set_isa("generic")
    want = run()
    assert all(np.array_equal(_bits(a), _bits(b)) for a, b in zip(got, want))
    assert got[5].tolist() == R.state_clean(got[4]).tolist()


@pytest.mark.parametrize("dk, dv", [(128, 128), (16, 75), (5, 33), (3, 1)])
def test_prefill_of_dense_heads_equals_the_steps(isa, threads, dk, dv):
    """A trained layer's prompt (decay < 1 at every token) through one prefill call against the same tokens
    one step at a time, bit for bit: outputs, state, clean flags. Head 1 has decay exactly 1 at one token
    (where a clean head could take the sparse path); head 2's values hold an inf at one token (NaNs must
    spread as in the steps)."""
    rng = np.random.default_rng(dk * 1000 + dv)
    h, t = 3, 7
    S0 = (rng.standard_normal((h, dk, dv)) * 0.5).astype(np.float32)
    q, k = rng.standard_normal((2, t, h, dk)).astype(np.float32)
    v = rng.standard_normal((t, h, dv)).astype(np.float32)
    g, beta = (-rng.random((t, h)) - 0.01).astype(np.float32), rng.random((t, h)).astype(np.float32)
    g[3, 1] = 0.0
    v[5, 2, dv // 2] = np.inf
    S, S_steps = S0.copy(), S0.copy()
    clean, clean_steps = np.zeros(h, np.int32), np.zeros(h, np.int32)
    with np.errstate(invalid="ignore", over="ignore"):
        o = K.deltanet_prefill(S, q, k, v, g, beta, clean)
        o_steps = np.stack([K.deltanet_step_sparse(S_steps, q[i], k[i], v[i], g[i], beta[i], clean_steps)
                            for i in range(t)])
    assert np.array_equal(_bits(o), _bits(o_steps)) and np.array_equal(_bits(S), _bits(S_steps))
    assert clean.tolist() == R.state_clean(S).tolist()
    assert np.isnan(o[6, 2]).any() and not np.isnan(o[:, :2]).any()
