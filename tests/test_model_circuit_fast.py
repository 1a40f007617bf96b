"""The decode fast paths on the GPU in the weights (the circuit-only model), against the plain forward pass:
the same logits and the same DeltaNet/conv states, bit for bit, in fp32 and bf16 mode, over a whole
launch (examples/dot.cu's prompt, then every generated token fed back)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from qgpu_min.model import kernels

pytestmark = pytest.mark.filterwarnings("ignore")
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gpu():
    from qgpu_min.gpu import backend
    return backend.compiled(backend.SPEC)


@pytest.fixture(scope="module")
def launch_ids(gpu):
    """(prompt ids, generated ids fed back) of the dot example, recorded from a circuit launch."""
    from qgpu_min.gpu.layout import GpuSpec
    from qgpu_min.gpu.program import block_format
    from qgpu_min.host.launch import compile_kernel, for_format, launch

    k = compile_kernel(ROOT / "examples" / "dot.cu")
    res = launch(for_format(k, block_format(GpuSpec())), [[1, 2, 3], [4, 5, 6], [0], 3], block=(3, 1),
                 backend="circuit")
    assert list(res.arrays["out"]) == [32]
    trace = res.extra["trace"]
    return trace["prompt_ids"], trace["generated_ids"][:-1]    # HALT is not fed back


def _run(model, prompt, fed):
    state = model.new_state()
    logits = [model.prefill(state, prompt)]
    logits += [model.decode(state, t) for t in fed]
    return np.stack(logits), state


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_fast_decode_equals_plain_forward_bit_for_bit(gpu, launch_ids, mode, monkeypatch):
    prompt, fed = launch_ids
    model = copy.copy(gpu.model(mode))  # its own attributes: the plain run below switches them off
    # the layers that hold no memory (no heads in the compiled plan) are the ones found silent from the weights
    memory_free = {i for i, layer in enumerate(gpu.layers) if layer.heads == 0}
    assert set(model.silent_mixers) == memory_free and len(memory_free) >= 20
    assert len(model._mlp_steps) == len(model._gdn_steps) == len(gpu.layers)
    assert model._decode_layers is not None    # a decode token: one C call for all layers
    fast, fast_state = _run(model, prompt, fed)
    assert model.chunked_head() is not None  # the tied LM head is multiplied chunk-sparse
    model._decode_layers = None                # the fused steps one layer at a time, from Python
    stepwise, stepwise_state = _run(model, prompt, fed)
    assert np.array_equal(_bits(fast), _bits(stepwise))
    for i in stepwise_state.recurrent:
        assert np.array_equal(_bits(fast_state.recurrent[i]), _bits(stepwise_state.recurrent[i]))
        assert np.array_equal(_bits(fast_state.clean[i]), _bits(stepwise_state.clean[i]))
    assert fast_state.zero == stepwise_state.zero
    model.silent_mixers = frozenset()
    model._head_chunks = {kernels.chunk_width(): None}  # the plain run: the dense LM head,
    model._mlp_steps = {}                              # the separate MLP calls over all 6144 units,
    model._gdn_steps = {}                              # the separate DeltaNet calls,
    monkeypatch.setattr(kernels, "deltanet_step_sparse",  # and the dense delta rule, in decode and prefill
                        lambda S, q, k, v, g, beta, clean: kernels.deltanet_step(S, q, k, v, g, beta))
    dense_step = kernels.deltanet_step
    monkeypatch.setattr(kernels, "deltanet_prefill", lambda S, q, k, v, g, beta, clean=None: np.stack(
        [dense_step(S, *t) for t in zip(q, k, v, g, beta)]))
    plain, plain_state = _run(model, prompt, fed)
    assert np.array_equal(_bits(fast), _bits(plain))
    for i in plain_state.recurrent:
        assert np.array_equal(_bits(fast_state.recurrent[i]), _bits(plain_state.recurrent[i]))
        assert np.array_equal(_bits(fast_state.conv[i]), _bits(plain_state.conv[i]))
    for i in gpu.model(mode).silent_mixers:  # the skipped layers' state really stays +0 in the plain run
        assert not _bits(plain_state.recurrent[i]).any() and not _bits(plain_state.conv[i]).any()
    # the memory layers' heads kept the clean flag through decode (the fast path was taken)
    assert all(fast_state.clean[i].all() for i in fast_state.clean)


def test_one_call_decode_follows_copied_and_replaced_state_arrays(gpu, launch_ids):
    """The C pointers a state caches (State.binding) are never stale: a deep copy decodes into its own arrays,
    and an array replaced in the state is the one written."""
    prompt, fed = launch_ids
    model = gpu.model("fp32")
    state = model.new_state()
    model.prefill(state, prompt)
    model.decode(state, fed[0])
    assert state.binding is not None
    twin = copy.deepcopy(state)
    assert twin.binding is None
    a, b = model.decode(twin, fed[1]), model.decode(state, fed[1])
    assert np.array_equal(_bits(a), _bits(b))
    for i in state.recurrent:
        assert np.array_equal(_bits(twin.recurrent[i]), _bits(state.recurrent[i]))
    model.decode(twin, fed[2])                         # the twin runs ahead: which layers does fed[2] write?
    changed = [i for i in state.recurrent if not np.array_equal(twin.recurrent[i], state.recurrent[i])]
    assert changed
    i = changed[0]
    old = state.recurrent[i]
    state.recurrent[i] = old.copy()                    # a new array for layer i
    snapshot = old.copy()
    model.decode(state, fed[2])
    assert np.array_equal(_bits(old), _bits(snapshot))  # the replaced array is left alone
    assert np.array_equal(_bits(twin.recurrent[i]), _bits(state.recurrent[i]))  # the new one is written


@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_a_token_subsets_sparse_head_rows_are_multiplied_chunked_with_the_same_bits(gpu, launch_ids, mode):
    """Logits over a subset of rows (a merged launch's GPU rows) come from the chunked form of those rows
    when they are mostly zero: the same bits as the dense rows' product and as the full head's columns."""
    prompt, fed = launch_ids
    model = copy.copy(gpu.model(mode))
    model._subset_cache = None
    state = model.new_state()
    model.prefill(state, prompt)
    subset = np.arange(0, len(gpu.tokens), 3)
    chunked = model.decode(copy.deepcopy(state), fed[0], token_subset=subset)
    assert model._subset_cache[2] is not None          # the chunked rows were used
    model._subset_cache = (*model._subset_cache[:2], None)    # now the dense rows
    dense = model.decode(copy.deepcopy(state), fed[0], token_subset=subset)
    full = model.decode(copy.deepcopy(state), fed[0])
    assert np.array_equal(_bits(chunked), _bits(dense)) and np.array_equal(_bits(chunked), _bits(full[subset]))
