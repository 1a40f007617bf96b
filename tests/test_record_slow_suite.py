"""tools/record_slow_suite.py: passed launches from pytest logs merge into the record, sorted and counted;
a failed launch stops it without writing."""
from __future__ import annotations

import importlib.util
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "record_slow_suite.py"
spec = importlib.util.spec_from_file_location("record_slow_suite", TOOL)
record_slow_suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(record_slow_suite)
T = record_slow_suite.TEST


def test_passed_launches_are_merged_and_failures_stop_it(tmp_path, monkeypatch):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# record\n\n## fp32: 1 launches\n\n- {T}[b-g1x1-b1x1-fp32]\n\n## bf16: 0 launches\n")
    log = tmp_path / "a.log"
    log.write_text(f"tests/x.py::{T}[a-g1x1-b1x1-fp32] PASSED [ 50%]\ntests/x.py::{T}[b-g1x1-b1x1-fp32] PASSED\n"
                   f"tests/x.py::{T}[a-g2x1-b32x1-bf16] PASSED [100%]\n")
    monkeypatch.setattr(record_slow_suite, "DOC", doc)
    assert record_slow_suite.record(record_slow_suite.results([log])[0], doc) == {"fp32": 2, "bf16": 1}
    assert doc.read_text() == (f"# record\n\n## fp32: 2 launches\n\n- {T}[a-g1x1-b1x1-fp32]\n- {T}[b-g1x1-b1x1-fp32]\n\n"
                               f"## bf16: 1 launches\n\n- {T}[a-g2x1-b32x1-bf16]\n")
    before = doc.read_text()
    log.write_text(f"tests/x.py::{T}[c-g1x1-b1x1-fp32] FAILED\n")
    assert record_slow_suite.main([str(log)]) == 1 and doc.read_text() == before
