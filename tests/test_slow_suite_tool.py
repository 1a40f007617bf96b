"""tools/slow_suite.py: the queue its workers share, the order, the code key, resume from the record, the
summary; and one whole run over a small stand-in test function (three launches, one skipped, one failing)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

TOOL = Path(__file__).resolve().parent.parent / "tools" / "slow_suite.py"
spec = importlib.util.spec_from_file_location("slow_suite", TOOL)
slow_suite = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slow_suite)


def test_workers_claim_each_launch_once_in_queue_order(tmp_path):
    q = tmp_path / "q"
    q.write_text(f"{0:>10}\na\nb\nc\n")
    assert [slow_suite._claim(q) for _ in range(5)] == ["a", "b", "c", None, None]


def test_a_closed_queue_hands_out_nothing_more(tmp_path):
    q = tmp_path / "q"
    q.write_text(f"{0:>10}\na\nb\nc\n")
    assert slow_suite._claim(q) == "a"
    slow_suite._close(q)
    assert slow_suite._claim(q) is None


def test_longest_first_by_record_then_by_tokens_then_by_size():
    ids = ["t[x-g1x1-b4x1-fp32]", "t[y-g2x1-b32x1-fp32]", "t[z-g1x1-b8x1-bf16]", "t[w-g1x1-b1x1-fp32]",
           "t[v-g1x1-b1x1-bf16]"]
    assert slow_suite.order(ids, {"t[w-g1x1-b1x1-fp32]": 30.0, "t[x-g1x1-b4x1-fp32]": 50.0},
                            {"v-g1x1-b1x1": 9000, "z-g1x1-b8x1": 10}) == [
        "t[x-g1x1-b4x1-fp32]", "t[w-g1x1-b1x1-fp32]", "t[v-g1x1-b1x1-bf16]", "t[z-g1x1-b8x1-bf16]",
        "t[y-g2x1-b32x1-fp32]"]


def test_code_key_follows_the_files_it_covers(tmp_path, monkeypatch):
    for part in slow_suite.KEYED:
        p = tmp_path / part
        if p.suffix:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("x")
        else:
            p.mkdir(parents=True, exist_ok=True)
            (p / "a.py").write_text("1")
    k = slow_suite.code_key(tmp_path)
    (tmp_path / "qgpu_min" / "__pycache__").mkdir()
    (tmp_path / "qgpu_min" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    (tmp_path / "docs.md").write_text("not covered")
    assert slow_suite.code_key(tmp_path) == k
    (tmp_path / "csrc" / "a.py").write_text("2")
    assert slow_suite.code_key(tmp_path) != k


STAND_IN = '''
import pytest

@pytest.mark.slow
@pytest.mark.parametrize("name", ["a-g1x1-b1x1-fp32", "b-g1x1-b2x1-fp32", "c-g1x1-b4x1-bf16"])
def test_launch(name):
    if name.startswith("b"):
        pytest.skip("does not fit")
    assert not (name.startswith("c") and FAIL), "wrong token"

FAIL = {fail}
'''


def test_a_whole_run_records_resumes_and_reports_a_failure(tmp_path):
    test_file = tmp_path / "test_standin.py"
    record, summary = tmp_path / "rec.jsonl", tmp_path / "summary.md"
    args = ["--workers", "2", "--record", str(record), "--summary", str(summary), "--test",
            f"{test_file}::test_launch"]
    test_file.write_text(STAND_IN.format(fail=True))
    assert slow_suite.main(args) == 1
    entries = slow_suite.read_record(record)
    assert sorted((e["id"].split("[")[1], e["outcome"]) for e in entries) == [
        ("a-g1x1-b1x1-fp32]", "passed"), ("b-g1x1-b2x1-fp32]", "skipped"), ("c-g1x1-b4x1-bf16]", "failed")]
    assert "wrong token" in summary.read_text() and "failed 1" in summary.read_text()
    # the code key is the same (the stand-in is not under the key): a rerun runs only the failed launch
    test_file.write_text(STAND_IN.format(fail=False))
    assert slow_suite.main(args) == 0
    again = slow_suite.read_record(record)[len(entries):]
    assert [(e["id"].split("[")[1], e["outcome"]) for e in again] == [("c-g1x1-b4x1-bf16]", "passed")]
    assert "passed 2 (fp32 1, bf16 1), skipped (do not fit) 1, failed 0" in summary.read_text()
    runs = slow_suite.read_record(slow_suite.runs_log(record))
    assert [r["launches"] for r in runs] == [3, 1] and all(r["end"] >= r["start"] for r in runs)
    assert "the record took 2 runs" in summary.read_text()
    # a record of another code key is set aside, and everything runs again
    record.write_text(json.dumps({"id": "x", "outcome": "passed", "key": "other", "seconds": 1}) + "\n")
    assert slow_suite.main(args) == 0
    assert len(slow_suite.read_record(record)) == 3 and record.with_suffix(".jsonl.old").exists()
    assert len(slow_suite.read_record(slow_suite.runs_log(record))) == 1     # the old key's runs set aside too
    assert "the record took" not in summary.read_text()
