"""`qgpu-min selftest` and `qgpu-min circuit-report`."""
import re

from click.testing import CliRunner

from qgpu_min.cli import main


def test_circuit_report_lists_every_op():
    res = CliRunner().invoke(main, ["circuit-report", "--no-mul"])
    assert res.exit_code == 0, res.output
    for op in ("add", "sub", "eq/ne", "lt/le", "shl", "sra", "min/max", "memory read+write"):
        assert op in res.output
    assert re.search(r"^add\s+2\s+\d+", res.output, re.M)  # two MLP layers
    assert "demo circuit" in res.output


def test_circuit_report_lanes():
    res = CliRunner().invoke(main, ["circuit-report", "--no-mul", "--lanes"])
    assert res.exit_code == 0, res.output
    assert re.search(r"^4 lanes x 1 dependent op\(s\) \(no shifts\)\s+2\s", res.output, re.M)


def test_selftest_quick_passes():
    res = CliRunner().invoke(main, ["selftest", "--quick"])
    last = res.output.strip().splitlines()[-1]
    m = re.fullmatch(r"(\d+) passed, (\d+) failed", last)
    assert m and int(m.group(1)) >= 25 and m.group(2) == "0", res.output
    assert res.exit_code == 0
