"""Settings for the whole test run, made before any test module imports torch."""
import os

# torch's bf16 matrix products on a CPU with AMX or AVX512-BF16 (oneDNN's fastest paths) accumulate in another
# order than on one without, so transformers' own bf16 logits differ between such machines in the last bit.
# The bit-for-bit cross-check of our bf16 mode (tests/test_crosscheck_transformers.py) is against torch's
# AVX-512/AVX2 path; capping oneDNN there makes the reference the same on every machine.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
