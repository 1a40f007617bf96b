"""Ask Qwen questions whose answers need exact integer arithmetic, and score how many it answers with
numbers the GPU in its weights computed.

    python tools/eval_chat.py --model DIR [--only normal|advanced] [--precision fp32|bf16] [--json]

DIR is a checkpoint from `qgpu-min build` (the real Qwen3.5-2B with the GPU merged in). 24 normal-mode
questions (Qwen calls the calculator: dot products, sums, sorting, counting, matrix products, prefix
sums...) and 5 advanced-mode ones (Qwen writes the kernel). Each question has an answer computed here by
NumPy, independently of the GPU. A question counts when (1) a launch's result equals NumPy's answer and
(2) the final reply quotes it. Prints per question what Qwen called, what the GPU returned and the
verdict, then `normal N/24, advanced M/5`. It needs the real weights, which tests cannot download; with a
synthetic checkpoint it runs but Qwen's random text answers nothing.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


@dataclass(frozen=True)
class Question:
    mode: str
    text: str
    answer: object          # int or list of ints (or list of lists): NumPy's, computed below


def _l(a) -> list:
    return np.asarray(a).tolist()


A, B = [3, -1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]
M = [[1, 2, 3], [4, 5, 6]]
N = [[7, 8], [9, 10], [11, 12]]
DATA = [5, 3, 5, 1, 0, 3, 5, 2, 2, 5]

QUESTIONS = [
    Question("normal", f"What is the dot product of {A} and {B}?", int(np.dot(A, B))),
    Question("normal", "Compute the dot product of [12, -7, 33] and [4, 9, -2].", int(np.dot([12, -7, 33], [4, 9, -2]))),
    Question("normal", f"What is the sum of {DATA}?", int(np.sum(DATA))),
    Question("normal", "Add up 1234, 5678, 9012 and 3456.", 1234 + 5678 + 9012 + 3456),
    Question("normal", f"What is the largest number in {A}?", int(np.max(A))),
    Question("normal", f"What is the smallest number in {B}?", int(np.min(B))),
    Question("normal", f"Sort {A} in ascending order.", _l(np.sort(A))),
    Question("normal", "Sort these numbers: [42, 7, 19, 88, 3, 56].", _l(np.sort([42, 7, 19, 88, 3, 56]))),
    Question("normal", f"Give the prefix sums (cumulative sums) of {DATA}.", _l(np.cumsum(DATA))),
    Question("normal", "What is the running total of [10, 20, 30, 40, 50]?", _l(np.cumsum([10, 20, 30, 40, 50]))),
    Question("normal", f"Multiply the matrix {M} by the vector [1, 0, -1].", _l(np.array(M) @ [1, 0, -1])),
    Question("normal", f"Compute the matrix product of {M} and {N}.", _l(np.array(M) @ np.array(N))),
    Question("normal", f"How many times does each value 0..5 occur in {DATA}?", _l(np.bincount(DATA, minlength=6))),
    Question("normal", "What is 123456 * 789?", 123456 * 789),
    Question("normal", "What is 987654321 // 12345, using integer division?", 987654321 // 12345),
    Question("normal", "What is 987654321 mod 12345?", 987654321 % 12345),
    Question("normal", "What is the greatest common divisor of 462 and 1071?", math.gcd(462, 1071)),
    Question("normal", "How many 1 bits are in the binary form of 1000000?", bin(1000000).count("1")),
    Question("normal", f"Add the vectors {A} and {B} element by element.", _l(np.add(A, B))),
    Question("normal", f"Subtract {B} from {A} element-wise.", _l(np.subtract(A, B))),
    Question("normal", f"Multiply {A} and {B} element-wise.", _l(np.multiply(A, B))),
    Question("normal", "What is the sum of the squares of [3, 4, 12, 84]?", int(np.dot([3, 4, 12, 84], [3, 4, 12, 84]))),
    Question("normal", "A shop sold [14, 9, 23, 17] items at prices [5, 12, 3, 8]. What was the revenue?",
             int(np.dot([14, 9, 23, 17], [5, 12, 3, 8]))),
    Question("normal", "What is 2 to the power 20 minus 1, computed as (1024 * 1024) - 1?", 1024 * 1024 - 1),
    Question("advanced", "Write a CUDA kernel that reverses the array [1, 2, 3, 4, 5, 6, 7] and run it.",
             [7, 6, 5, 4, 3, 2, 1]),
    Question("advanced", "Write a CUDA kernel that squares every element of [3, -4, 5, 6] and run it.", [9, 16, 25, 36]),
    Question("advanced", "Write and run a CUDA kernel that counts how many of [4, 17, 9, 22, 31, 8] are greater than 10.", 3),
    Question("advanced", "Write and run a CUDA kernel computing the sum of [5, 10, 15, 20, 25, 30] with atomicAdd.", 105),
    Question("advanced", "Write and run a CUDA kernel that computes the prefix sums of [1, 2, 3, 4, 5, 6, 7, 8].",
             _l(np.cumsum([1, 2, 3, 4, 5, 6, 7, 8]))),
]


def _numbers(value) -> list[int]:
    return [int(x) for x in np.asarray(value).reshape(-1)]


def _gpu_values(answer) -> list:
    """Every value a launch of the question returned (the calculator's value, each run_cuda array)."""
    values = []
    for t in answer.tools:
        if not t.ok:
            continue
        values += list(t.value.values()) if isinstance(t.value, dict) else [t.value]
    return values


def _quotes(text: str, value) -> bool:
    """The reply states the value: every number of it, in order."""
    found = [int(x) for x in re.findall(r"-?\d+", text.replace(",", ", ").replace("_", ""))]
    want = _numbers(value)
    it = iter(found)
    return all(any(x == w for x in it) for w in want)


def grade(q: Question, answer) -> dict:
    want = _numbers(q.answer)
    computed = any(_numbers(v)[:len(want)] == want if len(want) > 1 else want[0] in _numbers(v)
                   for v in _gpu_values(answer))
    quoted = _quotes(answer.text, q.answer)
    return {"question": q.text, "mode": q.mode, "expected": q.answer, "gpu_computed": computed, "quoted": quoted,
            "ok": computed and quoted, "calls": [{"name": t.name, "arguments": t.arguments, "result": t.text}
                                                 for t in answer.tools], "answer": answer.text}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a checkpoint from `qgpu-min build`")
    ap.add_argument("--only", choices=("normal", "advanced"))
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--gpu", choices=("model", "circuit", "interp"), default="model",
                    help="where launches run (model: the checkpoint's own GPU)")
    ap.add_argument("--max-new-tokens", type=int, default=768)
    ap.add_argument("--json", action="store_true", help="print one JSON object with every question's record")
    args = ap.parse_args()

    from qgpu_min.chat.session import Conversation, RuntimeChatModel
    from qgpu_min.chat.template import template_text
    from qgpu_min.chat.tools import Gpu
    from qgpu_min.model.forward import load_model
    from qgpu_min.model.generate import Sampling

    model = RuntimeChatModel(load_model(args.model, args.precision), args.max_new_tokens, Sampling(greedy=True))
    gpu = Gpu(args.gpu, args.model if args.gpu == "model" else None, args.precision)
    records = []
    for q in QUESTIONS:
        if args.only and q.mode != args.only:
            continue
        conv = Conversation(model, q.mode, gpu, template=template_text(args.model))
        r = grade(q, conv.ask(q.text))
        records.append(r)
        if not args.json:
            verdict = "OK " if r["ok"] else ("GPU" if r["gpu_computed"] else "-- ")
            calls = "; ".join(f"{c['name']}({c['arguments'].get('expression', '...')}) -> {c['result'][:60]}"
                              for c in r["calls"]) or "no tool call"
            print(f"[{verdict}] {q.mode:8} {q.text[:70]}\n      called: {calls}\n      answer: {r['answer'][:120]!r}")
    score = {m: (sum(r["ok"] for r in records if r["mode"] == m), sum(r["mode"] == m for r in records))
             for m in ("normal", "advanced")}
    if args.json:
        print(json.dumps({"score": score, "questions": records}))
    else:
        print(", ".join(f"{m} {ok}/{n}" for m, (ok, n) in score.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
