#!/usr/bin/env python3
"""Run llama.cpp's convert_hf_to_gguf.py on a synthetic checkpoint, for benchmarks (docs/fetch_and_bench.md).

    python tools/llama_cpp_convert.py LLAMA_CPP_DIR CHECKPOINT_DIR --outfile OUT.gguf --outtype bf16 --no-mtp

llama.cpp is a benchmark peer here, never a dependency. Its converter identifies a tokenizer by hashing how it
splits a test text and refuses one it does not know; our synthetic checkpoints' tokenizer is not one of
Qwen's, so this wrapper tells it the pre-tokenizer is Qwen2's (the one Qwen3.5 uses), without editing
llama.cpp's files. Every other argument goes to the converter unchanged.
"""
import runpy
import sys
from pathlib import Path


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    llama = Path(sys.argv[1]).resolve()
    script = llama / "convert_hf_to_gguf.py"
    if not script.is_file():
        sys.exit(f"{llama}: no convert_hf_to_gguf.py (give llama.cpp's source folder)")
    sys.path[:0] = [str(llama), str(llama / "gguf-py")]
    from conversion import base  # llama.cpp's own package, found through the path above

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    sys.argv = [str(script), *sys.argv[2:]]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
