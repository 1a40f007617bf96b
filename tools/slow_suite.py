"""The slow GPU suite as one command: every suite kernel at every launch shape that fits, fp32 and bf16, each
under --check (tests/test_gpu_suite.py::test_every_fitting_suite_launch_exact_on_the_gpu), sharded over the
cores, with progress, a record, and resume.

    python3 tools/slow_suite.py [--workers N] [-k EXPR] [--fresh] [--stop-after MIN] [--record FILE] [--summary FILE]

Workers are pytest processes (QGPU_THREADS=1 each) that take launches one at a time from a shared queue,
longest first (by the record's last time for that launch, else by its threads x CTAs), so the long launches
(powmod at 32 threads) start at once and the short ones fill in around them. Each finished launch is
appended to the record (JSON lines: id, outcome, seconds, the code key) as it finishes; a rerun with the
same code key skips the launches already passed (or skipped: they do not fit), so a stopped run resumes where
it stopped (--stop-after MIN: no new launch is started after MIN minutes; those running finish). The key is
a hash of what decides the results: the package's sources and the C core, and the
suite's tests and kernels; any change there starts the record afresh (--fresh does so on purpose). At the
end the summary (counts, wall time, the slowest launches, any failure) is written to --summary
(docs/gpu_slow_suite.md). Each run also appends its start, end and workers to the runs log beside the record
(`<record>.runs.jsonl`, set aside with the record when the key changes), so the summary gives the wall time of
all the runs that made a resumed record, not only the last one's. Exits 1 if a launch failed.

As a pytest plugin (`-p slow_suite`, QGPU_SLOW_QUEUE set) the same file is a worker's loop.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/test_gpu_suite.py::test_every_fitting_suite_launch_exact_on_the_gpu"
RECORD = ROOT / "docs" / "records" / "gpu_slow_suite.jsonl"
SUMMARY = ROOT / "docs" / "gpu_slow_suite.md"
ESTIMATES = ROOT / "docs" / "records" / "gpu_slow_suite_tokens.json"   # --estimate writes it
KEYED = ("qgpu_min", "csrc", "tests/kernels", "tests/kernel_suite.py", "tests/test_gpu_suite.py",
         "tests/test_kernel_suite.py")


def code_key(root: Path = ROOT) -> str:
    """sha256 over the files that decide the suite's results (KEYED), path and bytes, in path order."""
    h = hashlib.sha256()
    files = []
    for part in KEYED:
        p = root / part
        files += sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        if f.suffix in (".so", ".o", ".pyc") or "__pycache__" in f.parts or f.name == "_core.c":
            continue
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def read_record(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:     # a line cut short by a killed run: the launch runs again
            continue
    return out


def _append(path: Path, entry: dict) -> None:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(entry) + "\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)


# ---- the worker (a pytest plugin) ----------------------------------------------------------------------

def _close(queue: Path) -> None:
    """No launch of the queue is handed out any more."""
    with open(queue, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        lines = f.read().splitlines()
        f.seek(0)
        f.write(f"{len(lines) - 1:>10}\n" + "\n".join(lines[1:]) + "\n")
        f.truncate()


def _claim(queue: Path) -> str | None:
    """The next launch id of the queue file (ids one a line after a counter line), or None when none is left."""
    with open(queue, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        lines = f.read().splitlines()
        nxt = int(lines[0])
        ids = lines[1:]
        if nxt >= len(ids):
            return None
        f.seek(0)
        f.write(f"{nxt + 1:>10}\n" + "\n".join(ids) + "\n")
        f.truncate()
        return ids[nxt]


def _estimate(items: list, path: Path) -> None:
    """Each launch's generated tokens, from the interpreter replay --check compares against (no model run):
    what the first run's order goes by."""
    from test_kernel_suite import _compiled, _seed       # the suite's own kernels and arguments (inside pytest)
    import numpy as np
    from qgpu_min.gpu.check import expected_tokens
    from qgpu_min.gpu.layout import GpuSpec
    from qgpu_min.gpu.program import block_format, GpuLaunchError
    from qgpu_min.host.launch import build_image, for_format
    from qgpu_min.machine.isa import CapacityError
    spec, out = GpuSpec(), {}
    for item in items:
        case, shape = item.callspec.params["case"], item.callspec.params["shape"]
        name = f"{case.id}-{shape}"
        if name in out:
            continue
        try:
            args = case.make(np.random.default_rng(_seed(case, shape)), shape)
            image = build_image(for_format(_compiled(case, "zig"), block_format(spec)), args, shape.block)
            out[name] = len(expected_tokens(image.program, image.memory, shape.block, spec, None, shape.grid))
        except (CapacityError, GpuLaunchError, Exception):    # refused or unsupported: runs first, costs nothing
            out[name] = 0
    path.write_text(json.dumps(out, indent=0, sort_keys=True) + "\n")


def pytest_runtestloop(session):
    if os.environ.get("QGPU_SLOW_ESTIMATE"):
        _estimate(session.items, Path(os.environ["QGPU_SLOW_ESTIMATE"]))
        return True
    queue = os.environ.get("QGPU_SLOW_QUEUE")
    if queue is None:
        return None
    items = {item.nodeid: item for item in session.items}
    record, key, worker = Path(os.environ["QGPU_SLOW_RECORD"]), os.environ["QGPU_SLOW_KEY"], os.environ["QGPU_SLOW_WORKER"]
    while (nodeid := _claim(Path(queue))) is not None:
        item = items.get(nodeid)
        if item is None:
            _append(record, {"id": nodeid, "outcome": "missing", "key": key, "worker": worker})
            continue
        item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
    return True


def pytest_runtest_logreport(report):
    if os.environ.get("QGPU_SLOW_QUEUE") is None:
        return
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        entry = {"id": report.nodeid, "outcome": report.outcome, "seconds": round(report.duration, 2),
                 "key": os.environ["QGPU_SLOW_KEY"], "worker": os.environ["QGPU_SLOW_WORKER"]}
        if report.outcome != "passed":
            entry["message"] = str(report.longrepr)[-2000:]
        _append(Path(os.environ["QGPU_SLOW_RECORD"]), entry)


# ---- the coordinator -----------------------------------------------------------------------------------

def collect(test: str, expr: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "slow", "-p", "no:cacheprovider", test]
    if expr:
        cmd += ["-k", expr]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if out.returncode not in (0, 5) or (not ids and out.returncode != 5):
        raise SystemExit(f"collecting the slow suite failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return ids


def _shape_size(nodeid: str) -> int:
    m = re.search(r"-g(\d+)x(\d+)-b(\d+)x(\d+)-", nodeid)
    return int(m[1]) * int(m[2]) * int(m[3]) * int(m[4]) if m else 0


def _launch_name(nodeid: str) -> str:
    """case-gGxH-bXxY of a node id (its mode dropped)."""
    return nodeid.split("[", 1)[1].rsplit("-", 1)[0]


def order(ids: list[str], seconds: dict[str, float], tokens: dict[str, int] | None = None) -> list[str]:
    """Longest first: a launch's last recorded time, else (all unknown ones after the known) its generated
    tokens (ESTIMATES), else its size."""
    tokens = tokens or {}
    return sorted(ids, key=lambda i: (i not in seconds, -seconds.get(i, 0.0), -tokens.get(_launch_name(i), 0),
                                      -_shape_size(i), i))


def _progress(done: list[dict], total: int, t0: float, est_left: float) -> str:
    counts = {o: sum(1 for d in done if d["outcome"] == o) for o in ("passed", "skipped", "failed")}
    mins = (time.time() - t0) / 60
    return (f"[{time.strftime('%H:%M:%S')}] {len(done)}/{total} done: {counts['passed']} passed, "
            f"{counts['skipped']} skipped, {counts['failed']} failed; {mins:.1f} min"
            + (f", ~{est_left / 60:.0f} min of work left" if est_left else ""))


def _first_error(message: str) -> str:
    """The first `E ` line of a pytest failure (its assertion or exception), else its last line."""
    errors = [line[1:].strip() for line in message.splitlines() if line.startswith("E ")]
    return (errors[0] if errors else (message.splitlines() or [""])[-1])[:300]


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--", *KEYED], cwd=ROOT, capture_output=True, text=True)
    return (out.stdout.strip() or "unknown") + (" with uncommitted changes" if dirty.stdout.strip() else "")


def runs_log(record: Path) -> Path:
    return record.with_suffix(".runs.jsonl")


def log_run(record: Path, key: str, start: float, end: float, workers: int, launches: int) -> list[dict]:
    """Append this run to the runs log; returns the log's runs of this key (this one included)."""
    with runs_log(record).open("a") as f:
        f.write(json.dumps({"key": key, "start": round(start, 1), "end": round(end, 1), "workers": workers,
                            "launches": launches}) + "\n")
    return [r for r in read_record(runs_log(record)) if r.get("key") == key]


def write_summary(path: Path, key: str, entries: list[dict], wall: float, workers: int, cmd: str,
                  total: int | None = None, commit: str = "", runs: list[dict] | None = None) -> None:
    by_outcome: dict[str, list[dict]] = {}
    for e in entries:
        by_outcome.setdefault(e["outcome"], []).append(e)
    modes = {m: sum(1 for e in by_outcome.get("passed", []) if e["id"].endswith(f"-{m}]")) for m in ("fp32", "bf16")}
    lines = ["# The `-m slow` GPU suite: the record", "",
             f"Written by `{cmd}` (tools/slow_suite.py) on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
             f"code key `{key}` (a hash of the package, the C core and the suite" + (f"; commit {commit}" if commit else "")
             + "; the full record, one line a launch, is docs/records/gpu_slow_suite.jsonl).", "",
             f"- launches: {len(entries)} recorded" + (f" of {total}" if total is not None else "")
             + f"; passed {len(by_outcome.get('passed', []))} (fp32 {modes['fp32']}, bf16 "
             f"{modes['bf16']}), skipped (do not fit) {len(by_outcome.get('skipped', []))}, failed "
             f"{len(by_outcome.get('failed', []))}",
             f"- this run's wall time: {wall / 60:.1f} min on {workers} workers; the launches' own times add up to "
             f"{sum(e.get('seconds', 0) for e in entries) / 60:.1f} min"]
    if runs and len(runs) > 1:
        first, last = min(r["start"] for r in runs), max(r["end"] for r in runs)
        lines.append(f"- the record took {len(runs)} runs: {sum(r['end'] - r['start'] for r in runs) / 60:.1f} min "
                     f"of wall time in all, from {time.strftime('%Y-%m-%d %H:%M', time.gmtime(first))} to "
                     f"{time.strftime('%H:%M UTC', time.gmtime(last))}")
    lines.append("")
    slow = sorted(entries, key=lambda e: -e.get("seconds", 0))[:10]
    lines += ["The slowest launches:", ""] + [f"- {e['id'].split('[')[1][:-1]}: {e.get('seconds', 0):.0f} s" for e in slow]
    fails = by_outcome.get("failed", []) + by_outcome.get("missing", [])
    if fails:
        lines += ["", "Failures:", ""] + [f"- {e['id']}: {_first_error(e.get('message', e['outcome']))}" for e in fails]
    path.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pytest workers (default: the cores)")
    ap.add_argument("-k", dest="expr", help="only launches matching this pytest -k expression")
    ap.add_argument("--fresh", action="store_true", help="forget the record's earlier results")
    ap.add_argument("--stop-after", type=float, metavar="MIN", help="start no launch after this many minutes")
    ap.add_argument("--estimate", action="store_true",
                    help=f"count each launch's generated tokens on the interpreter into {ESTIMATES.relative_to(ROOT)} "
                         "(the order of launches with no recorded time), then exit")
    ap.add_argument("--record", type=Path, default=RECORD)
    ap.add_argument("--summary", type=Path, default=SUMMARY)
    ap.add_argument("--test", default=TEST, help=argparse.SUPPRESS)    # another test function (the tool's tests)
    a = ap.parse_args(argv)
    if a.workers < 1:
        ap.error("--workers must be at least 1")
    if a.estimate:
        env = {**os.environ, "QGPU_SLOW_ESTIMATE": str(ESTIMATES),
               "PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "slow_suite", "-p",
                              "no:cacheprovider", a.test, "-k", "fp32" + (f" and ({a.expr})" if a.expr else "")],
                             cwd=ROOT, env=env, capture_output=True, text=True)
        if out.returncode != 0 or not ESTIMATES.exists():
            print(out.stdout[-3000:], out.stderr[-3000:])
            return 1
        est = json.loads(ESTIMATES.read_text())
        print(f"{len(est)} launches, {sum(est.values()):,} generated tokens a mode; written to {ESTIMATES}")
        return 0
    key, commit = code_key(), _commit()
    a.record.parent.mkdir(parents=True, exist_ok=True)
    earlier = read_record(a.record)
    if a.fresh or any(e.get("key") != key for e in earlier):
        if earlier:
            print(f"the record holds another code key or --fresh: starting afresh ({a.record})")
            a.record.rename(a.record.with_suffix(".jsonl.old"))
            if runs_log(a.record).exists():
                runs_log(a.record).rename(runs_log(a.record).with_suffix(".jsonl.old"))
        earlier = []
    seconds = {e["id"]: e["seconds"] for e in earlier if "seconds" in e}
    finished = {e["id"] for e in earlier if e["outcome"] in ("passed", "skipped")}
    ids = collect(a.test, a.expr)
    tokens = json.loads(ESTIMATES.read_text()) if ESTIMATES.exists() else {}
    todo = order([i for i in ids if i not in finished], seconds, tokens)
    print(f"slow suite: {len(ids)} launches, {len(ids) - len(todo)} already in the record (key {key}), "
          f"{len(todo)} to run on {a.workers} workers")
    t0 = time.time()
    if todo:
        queue = a.record.with_suffix(".queue")
        queue.write_text(f"{0:>10}\n" + "\n".join(todo) + "\n")
        env = {**os.environ, "QGPU_THREADS": "1", "QGPU_SLOW_QUEUE": str(queue), "QGPU_SLOW_RECORD": str(a.record),
               "QGPU_SLOW_KEY": key, "PYTHONPATH": os.pathsep.join([str(ROOT / "tools"), os.environ.get("PYTHONPATH", "")])}
        workers = [subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-m", "slow", "-p", "slow_suite", "-p",
                                     "no:cacheprovider", a.test] + (["-k", a.expr] if a.expr else []),
                                    cwd=ROOT, env={**env, "QGPU_SLOW_WORKER": str(w)}, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT)
                   for w in range(a.workers)]
        last = ""
        try:
            closed = False
            while any(p.poll() is None for p in workers):
                time.sleep(5)
                if a.stop_after is not None and not closed and time.time() - t0 > 60 * a.stop_after:
                    _close(queue)
                    closed = True
                    print(f"--stop-after {a.stop_after:g}: no new launches; waiting for the running ones", flush=True)
                now = [e for e in read_record(a.record) if e["id"] in set(todo)]
                left = sum(seconds.get(i, 0) for i in todo if i not in {e["id"] for e in now}) / a.workers
                line = _progress(now, len(todo), t0, left)
                if line != last:
                    print(line, flush=True)
                    last = line
        except KeyboardInterrupt:
            for p in workers:
                p.terminate()
            print("stopped; a rerun resumes from the record")
            return 130
        finally:
            queue.unlink(missing_ok=True)
    entries = {e["id"]: e for e in read_record(a.record) if e.get("key") == key}
    final = [entries[i] for i in ids if i in entries]
    runs = log_run(a.record, key, t0, time.time(), a.workers, len(todo))
    write_summary(a.summary, key, final, time.time() - t0, a.workers,
                  "python3 tools/slow_suite.py" + (f" -k '{a.expr}'" if a.expr else ""), len(ids), commit, runs)
    failed = [e for e in final if e["outcome"] not in ("passed", "skipped")]
    missing = [i for i in ids if i not in entries]
    print(f"done in {(time.time() - t0) / 60:.1f} min: {len(final)} of {len(ids)} recorded, {len(failed)} failed, "
          f"{len(missing)} not run; summary in {a.summary}")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
