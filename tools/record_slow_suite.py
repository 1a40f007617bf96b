"""Add the launches that passed in pytest logs to docs/gpu_slow_suite.md (the record of the `-m slow` GPU suite).

    python tools/record_slow_suite.py LOG [LOG ...]

A log is the output of `pytest -v -m slow tests/test_gpu_suite.py ...`; every `PASSED` line of the
suite's test is added to the fp32 or bf16 list (kept sorted, no duplicates), and the two section counts
are updated. A `FAILED` line is reported and nothing is written: a failure must be looked at, not recorded.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "gpu_slow_suite.md"
TEST = "test_every_fitting_suite_launch_exact_on_the_gpu"
LINE = re.compile(rf"({TEST}\[[^\]]+-(fp32|bf16)\]) (PASSED|FAILED)")
SECTION = re.compile(r"^## (fp32|bf16): (\d+) launches$")


def results(logs: list[Path]) -> tuple[set[str], set[str]]:
    passed, failed = set(), set()
    for log in logs:
        for m in LINE.finditer(log.read_text(errors="replace")):
            (passed if m.group(3) == "PASSED" else failed).add(m.group(1))
    return passed, failed


def record(passed: set[str], doc: Path = DOC) -> dict[str, int]:
    """Merge `passed` into the doc's lists; returns the new count of each mode."""
    lines = doc.read_text().split("\n")
    heads = [i for i, line in enumerate(lines) if SECTION.match(line)]
    if len(heads) != 2:
        raise SystemExit(f"{doc}: expected an fp32 and a bf16 section")
    out, counts = lines[:heads[0]], {}
    for k, start in enumerate(heads):
        mode = SECTION.match(lines[start]).group(1)
        end = heads[k + 1] if k + 1 < len(heads) else len(lines)
        body = lines[start + 1:end]
        have = {line[2:] for line in body if line.startswith(f"- {TEST}[")}
        ids = sorted(have | {p for p in passed if p.endswith(f"-{mode}]")})
        counts[mode] = len(ids)
        out += [f"## {mode}: {len(ids)} launches", ""] + [f"- {i}" for i in ids] + [""]
    doc.write_text("\n".join(out).rstrip("\n") + "\n")
    return counts


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    passed, failed = results([Path(a) for a in argv])
    if failed:
        print("failed launches (nothing recorded):\n  " + "\n  ".join(sorted(failed)), file=sys.stderr)
        return 1
    counts = record(passed)
    print(f"{len(passed)} passed launches merged; the record now holds fp32 {counts['fp32']}, "
          f"bf16 {counts['bf16']} ({sum(counts.values())} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
