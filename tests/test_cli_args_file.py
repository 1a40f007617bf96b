"""`qgpu-min run --args-file`: several launches of one kernel, one line of arguments each."""
import json
from pathlib import Path

from click.testing import CliRunner

from qgpu_min.cli import main

DOT = str(Path(__file__).resolve().parent.parent / "examples" / "dot.cu")


def _run(*args: str):
    return CliRunner().invoke(main, ["run", DOT, *args])


def test_each_line_is_a_launch_with_the_result_it_gets_alone(tmp_path):
    f = tmp_path / "args.txt"
    f.write_text("[1,2,3] [4,5,6] zeros(1) 3\n\n# a comment line\n[7, -8] [1, 1] zeros(1) 2   # trailing\n")
    r = _run("--args-file", str(f), "--backend", "interp", "--json")
    assert r.exit_code == 0, r.output
    launches = json.loads(r.stdout)["launches"]
    alone = json.loads(_run("--arg", "[7,-8]", "--arg", "[1,1]", "--arg", "zeros(1)", "--arg", "2", "--block", "3",
                            "--backend", "interp", "--json").stdout)
    assert [x["arrays"]["out"] for x in launches] == [[32], [-1]] and launches[1] == alone
    text = _run("--args-file", str(f), "--backend", "interp").stdout
    assert text.splitlines()[0] == "# launch 1" and "out = [-1]" in text


def test_bad_args_files_are_refused_naming_the_line(tmp_path):
    f = tmp_path / "args.txt"
    f.write_text("[1,2,3] [4,5,6] zeros(1) 3\n[1,2 [3] zeros(1) 1\n")
    r = _run("--args-file", str(f), "--backend", "interp")
    assert r.exit_code == 2 and "args.txt launch 2: --arg #1" in r.output and "is not an integer" in r.output
    (tmp_path / "empty.txt").write_text("# nothing\n\n")
    r = _run("--args-file", str(tmp_path / "empty.txt"), "--backend", "interp")
    assert r.exit_code == 2 and "no launch in it" in r.output
    r = _run("--args-file", str(f), "--arg", "3", "--backend", "interp")
    assert r.exit_code == 2 and "with --arg or with --args-file, not both" in r.output
    r = _run("--args-file", str(f), "--check")
    assert r.exit_code == 2 and "not with --args-file" in r.output


def test_args_file_on_the_gpu_in_the_weights_runs_the_batch_form(tmp_path):
    """On --backend circuit the lines run together on the step engine's threads, each as it runs alone."""
    f = tmp_path / "args.txt"
    f.write_text("[1,2,3] [4,5,6] zeros(1) 3\n[7, -8] [1, 1] zeros(1) 2\n")
    r = _run("--args-file", str(f), "--block", "4", "--json")
    assert r.exit_code == 0, r.output
    launches = json.loads(r.stdout)["launches"]
    assert [x["arrays"]["out"] for x in launches] == [[32], [-1]] and {x["backend"] for x in launches} == {"circuit"}
    alone = json.loads(_run("--arg", "[7,-8]", "--arg", "[1,1]", "--arg", "zeros(1)", "--arg", "2", "--block", "4",
                            "--json").stdout)
    assert launches[1]["tokens"] == alone["tokens"] and launches[1]["arrays"] == alone["arrays"]
