"""Settings for the whole test run, made before any test module imports torch."""
import os

# torch's bf16 matrix products on a CPU with AMX or AVX512-BF16 (oneDNN's fastest paths) accumulate in another
# order than on one without, so transformers' own bf16 logits differ between such machines in the last bit.
# The bit-for-bit cross-check of our bf16 mode (tests/test_crosscheck_transformers.py) is against torch's
# AVX-512/AVX2 path; capping oneDNN there makes the reference the same on every machine.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")

import pytest


@pytest.fixture(scope="session")
def demo_built(tmp_path_factory):
    """The RAM/ALU demo circuit compiled in front of a synthetic base with Qwen3.5-2B shapes (two base layers,
    one of them full attention; 512 text tokens): built once for every test module that runs it."""
    from qgpu_min.circuit import demos
    from qgpu_min.model.synthetic import write_synthetic_checkpoint
    root = tmp_path_factory.mktemp("circuit_demo")
    base = write_synthetic_checkpoint(root / "base", "2b", layer_types=["linear_attention", "full_attention"],
                                      vocab_size=512)
    return base, demos.build_demo(base, root / "merged")
