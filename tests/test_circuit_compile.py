"""Compiled circuits run through the model runtime's forward pass: exactness (fp32 and bf16), static margins,
tensor format, silence on text, and the compiler's errors."""
import numpy as np
import pytest

from qgpu_min.circuit import lib
from qgpu_min.circuit.compile import (L_VALUE, NORM_W, BaseShape, check_exact_weights, emit, plan)
from qgpu_min.circuit.ir import Circuit, CircuitError, Unit
from qgpu_min.circuit.margin import static_check
from qgpu_min.circuit.merge import MATRIX_NAMES, layer_tensors
from qgpu_min.model.bf16 import f32_to_bf16
from qgpu_min.circuit.run import text_config
from qgpu_min.circuit.selftest import check_alu, check_library, check_memory, check_text_mute
from qgpu_min.circuit.tokens import find_text_gate
from qgpu_min.model import kernels, kernels_ref
from qgpu_min.model.weights import expected_tensors

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")


def _assert_all(results):
    bad = [f"{name}: {detail}" for name, ok, detail in results if not ok]
    assert not bad, "\n".join(bad)
    assert results


def test_library_exact_through_forward_pass():
    _assert_all(check_library(300, seed=3))


@pytest.mark.slow
def test_library_exact_through_forward_pass_many():
    _assert_all(check_library(4000, seed=4))


@pytest.mark.parametrize("shifter", ["onehot", "barrel"])
def test_fused_alu_exact_in_two_layers(shifter):
    results = check_alu(300, seed=7, shifter=shifter)
    _assert_all(results)
    assert "in 2 layers" in results[0][0]


@pytest.mark.slow
def test_fused_alu_exact_many():
    _assert_all(check_alu(4000, seed=8))


def test_memory_sequence_exact():
    _assert_all(check_memory(40, seed=5))


def test_text_tokens_leave_residual_and_state_untouched():
    _assert_all(check_text_mute(192, seed=6))


@pytest.mark.parametrize("k", [kernels, kernels_ref])
def test_memory_read_normalises_to_exactly_two(k):
    """The stored amplitude makes the head norm exact for rows at every initialisation scale."""
    q = np.float32(1 / np.sqrt(128))
    rng = np.random.default_rng(0)
    for j in range(4):
        o = np.zeros((1, 128), np.float32)
        ch = rng.choice(128, 32, replace=False)
        o[0, ch] = np.float32(np.float32(L_VALUE / 4 ** j) * q)
        n = k.rmsnorm(o, np.ones(128, np.float32), 1e-6, False)[0]
        assert np.all(n[ch] == 2.0)


@pytest.mark.parametrize("k", [kernels, kernels_ref])
def test_norm_gain_makes_features_exactly_one(k):
    x = np.zeros((1, 2048), np.float32)
    x[0, :2000] = 1
    x[0, 2000:2003] = 4  # ballast: sum of squares 2048
    u = k.rmsnorm(x, np.full(2048, NORM_W, np.float32), 1e-6, True)[0]
    assert np.all(u[:2000] == 1.0) and np.all(u[2000:2003] == 4.0)


def test_emitted_tensors_have_qwen_names_shapes_dtypes():
    c = Circuit("t")
    a, b = c.input_word("a"), c.input_word("b")
    for g in lib.add(c, a, b):
        c.output(g)
    p = plan(c)
    layers = emit(p)
    check_exact_weights(layers)
    cfg = text_config(p.shape, len(layers), 16)
    want = {n: e.shape for n, e in expected_tensors(cfg).items() if ".layers." in n}
    got = {}
    for i, lw in enumerate(layers):
        for name, (dtype, shape, data) in layer_tensors(lw, p.shape, f"model.language_model.layers.{i}.").items():
            whole = data if isinstance(data, np.ndarray) else np.concatenate(list(data()))
            assert whole.shape == tuple(shape)
            short = {f"model.language_model.layers.{i}.{v}": k for k, v in MATRIX_NAMES.items()}.get(name)
            if short in lw.mats:                                       # the dense bits are the sparse matrix
                rows, cols, vals = lw.mats[short].summed()
                assert np.count_nonzero(whole) == len(rows) and np.array_equal(
                    whole[rows, cols], f32_to_bf16(vals.astype(np.float32)))
            assert dtype == ("F32" if name.endswith(("A_log", "linear_attn.norm.weight")) else "BF16"), name
            got[name] = tuple(shape)
    assert got == want


def test_static_check_passes_library_and_flags_wide_sums():
    c = Circuit("t")
    a, b = c.input_word("a"), c.input_word("b")
    for g in lib.add(c, a, b) + [lib.ult(c, a, b)]:
        c.output(g)
    report = static_check(plan(c))
    assert report.ok and report.max_active <= 256 and report.worst_margin > 1e-4
    assert not static_check(plan(c), min_margin=1e-2).ok  # the carry threshold has a small margin
    c2 = Circuit("wide")
    xs = [c2.input(f"x{i}", 2) for i in range(3)]
    c2.output(lib.step_gate(c2, "s", 2, 0, [(x, 1, 200) for x in xs], {1: [(100, 1)]}))
    report = static_check(plan(c2))
    assert not report.ok and "not exact in bf16" in report.problems[0]


def test_budget_errors_name_the_limit():
    c = Circuit("t")
    a, b = c.input_word("a"), c.input_word("b")
    for g in lib.shift(c, a, b, "sra"):
        c.output(g)
    with pytest.raises(CircuitError, match="units; an MLP sublayer holds"):
        plan(c, BaseShape(intermediate=8))
    with pytest.raises(CircuitError, match="residual dims"):
        plan(c, BaseShape(hidden=100))


def test_gate_units_compile_to_exact_bf16_weights():
    c = Circuit("t")
    x = c.input("x", 2)
    c.output(c.gate("g", 2, 0, [Unit(((x, 1, 3),), 0, ((1, 1), (0, -1)))]))
    with pytest.raises(CircuitError, match="not exact in bf16"):
        layers = emit(plan(c))
        layers[0].mats["down"].add(0, 0, 1.0 / 3.0)
        check_exact_weights(layers)


def test_no_text_gate_when_text_surrounds_the_origin():
    rows = np.concatenate([np.eye(4), -np.eye(4)]).astype(np.float32)
    with pytest.raises(CircuitError, match="no text gate"):
        find_text_gate(rows, [0, 1, 2, 3], 4)
    gate = find_text_gate(rows[:4], [0, 1, 2, 3], 4)
    assert gate.tau > 0 and np.all(rows[:4] @ gate.lam <= -gate.tau + 1e-12)


def test_merge_rejects_mismatched_base_and_leaves_nothing(tmp_path):
    from qgpu_min.circuit.merge import write_merged
    from qgpu_min.model.synthetic import write_synthetic_checkpoint

    base = write_synthetic_checkpoint(tmp_path / "tiny", "tiny")
    c = Circuit("t")
    x = c.input("x", 2)
    c.output(lib.bit_from_ands(c, "y", [[(x, 1)]]))
    p = plan(c)
    with pytest.raises(CircuitError, match="hidden/intermediate"):
        write_merged(base, tmp_path / "out", emit(p), p.shape, np.zeros((1, p.shape.hidden), np.float32))
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.tmp").exists()


def test_read_groups_rejects_inexact_values():
    from qgpu_min.circuit.run import embedding_rows, read_groups

    c = Circuit("t")
    x = c.input("x", 2)
    c.output(x)
    p = plan(c)
    h = embedding_rows(p, {x: np.array([1, 1])})  # a valid circuit state: decodes exactly
    assert read_groups(p, h, [x])[:, 0].tolist() == [1, 1]
    h[1, p.dims[id(x)][1]] = 0.98
    with pytest.raises(CircuitError, match="not exact on case 1"):
        read_groups(p, h, [x])
