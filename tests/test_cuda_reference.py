"""docs/cuda_reference.md is generated from the lowering's tables (qgpu_min/cuda/reference.py) and must
match them: regenerate with `python -m qgpu_min.cuda.reference > docs/cuda_reference.md`."""
from __future__ import annotations

from pathlib import Path

from qgpu_min.cuda.lower_mem import ATOM_KIND
from qgpu_min.cuda.reference import HOW, handled_opcodes, prelude_functions, render
from qgpu_min.machine.isa import ATOM_KINDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "cuda_reference.md"


def test_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render(), ("docs/cuda_reference.md is stale: run "
                                         "`python -m qgpu_min.cuda.reference > docs/cuda_reference.md`")


def test_every_handled_opcode_is_described_and_nothing_else() -> None:
    assert set(HOW) == handled_opcodes()


def test_tables_agree_with_the_machine() -> None:
    assert set(ATOM_KIND.values()) <= set(ATOM_KINDS)
    names = prelude_functions()
    for expected in ("atomicAdd", "__shfl_down_sync", "__syncthreads", "__syncthreads_count", "__popc"):
        assert expected in names
    text = render()
    assert "| `shfl` |" in text and "`ATOM.CAS`" in text and "1024 words" in text
