"""docs/cuda_reference.md, the supported CUDA subset, generated from the lowering's own tables (the PTX
handlers of Lowerer, the atomic, load, store, comparison and special-register tables, the prelude's
functions, the machine's limits), so it cannot drift: tests/test_cuda_reference.py fails when the file
differs from ``render()``, and when an opcode the lowering handles has no entry in ``HOW`` (or one it
does not handle has one).

    python -m qgpu_min.cuda.reference > docs/cuda_reference.md
"""
from __future__ import annotations

import re

from ..machine import isa
from .compiler import PRELUDE
from .lower_mem import ATOM_KIND, LOAD, STORE
from .lower_ops import CMP_OPS, CONST_SREGS, FLOAT_TYPES, NOPS, WIDE, Lowerer

# PTX opcode -> how it becomes machine code (the lowering's handler op_<opcode> does it)
HOW: dict[str, str] = {
    "abs": "`MAX(x, 0 - x)`",
    "activemask": "`VOTE.BALLOT` of 1: the lanes running this block",
    "add": "`ADD`; 64-bit as a pair of words with a carry",
    "and": "`AND`",
    "atom": "`ATOM.<op>` (table below), the old value to the destination; 64-bit as a read-modify-write of two "
            "words one lane at a time (no 64-bit inc/dec)",
    "bar": "`bar.sync 0` ends the block with `BAR`; `bar.warp.sync` (`__syncwarp`) is nothing (a warp's "
           "lanes run together); `bar.red.popc/and/or` (`__syncthreads_count/and/or`) as counters between two "
           "barriers",
    "barrier": "as `bar`",
    "bfe": "shifts and masks, position and length constants",
    "bfi": "shifts and masks, position and length constants",
    "bfind": "31 minus the leading-zero count (of x ^ sign for `.s32`)",
    "bra": "`JMP`, or `BR` on the predicate",
    "brev": "swaps of bits, bit pairs, nibbles, bytes and halves by shifts and masks",
    "brx": "a compare chain over the jump table (`brx.idx`)",
    "call": "the callee's body inlined (no recursion); printf, assert, malloc and free are refused",
    "clz": "the highest set bit smeared right, then a bit count",
    "cnot": "`SEQ x, 0`",
    "cvt": "integer width conversions: masks, sign extension by shifts; floating point is refused",
    "cvta": "nothing (one memory): a copy",
    "div": "a restoring loop of one step per quotient bit (docs/cuda.md, \"Division\"), or a multiply by a constant for a constant divisor",
    "exit": "`EXIT`",
    "ld": "`LD`/`LDH`/`LDHU`/`LDB`/`LDBU` (table below); `.param` reads become the bound immediates; vectors "
          "and 64-bit as several words",
    "ldu": "as `ld`",
    "mad": "as `mul`, then `ADD`",
    "max": "`MAX`/`MAXU`",
    "min": "`MIN`/`MINU`",
    "mov": "a copy; special registers through `S2R` (table below); `{lo, hi}` packs and unpacks",
    "mul": "`MUL`; `.hi` through `MULHU`, `.wide` as a word pair",
    "neg": "`SUB 0, x`",
    "not": "`XOR x, 0xFFFFFFFF` (predicates: `XOR x, 1`)",
    "or": "`OR`",
    "popc": "the SWAR bit count (shifts, masks, adds)",
    "prmt": "shifts and masks for a constant selector (`__byte_perm`)",
    "red": "`ATOM.<op>` with the old value dropped",
    "rem": "as `div`, keeping the remainder",
    "ret": "a jump to the end of the inlined call, or `EXIT` from the kernel",
    "sad": "`max(a, b) - min(a, b) + c` (`__sad`, `__usad`)",
    "selp": "`SEL`",
    "set": "a comparison (table below) to 0 or 0xFFFFFFFF",
    "setp": "a comparison (table below), combined with `and`/`or`/`xor` of another predicate",
    "shf": "funnel shift from `SHL`, `SHR` and `OR` (`__funnelshift_l/r`, wrap and clamp)",
    "shfl": "`SHFL.IDX/UP/DOWN/BFLY` within 4-lane warps (the `|p` predicate too)",
    "shl": "`SHL`; a constant shift of 32 or more gives 0",
    "shr": "`SHR`/`SRA`; shifts of 32 or more fill with zeros or the sign, as PTX clamps",
    "slct": "`SEL` on the sign of c",
    "st": "`ST`/`STH`/`STB` (table below); vectors and 64-bit as several words",
    "sub": "`SUB`; 64-bit with a borrow",
    "vote": "`VOTE.BALLOT/ANY/ALL`; `.uni` as all-or-none",
    "xor": "`XOR`",
}
for _op in NOPS:
    HOW.setdefault(_op, "nothing: the machine has one memory and no caches")


def handled_opcodes() -> set[str]:
    """Every PTX opcode the lowering accepts: its handlers and the instructions it drops."""
    return {name[3:] for name in dir(Lowerer) if name.startswith("op_")} | set(NOPS)


def prelude_functions() -> list[str]:
    """The device functions our prelude defines for clang (nvcc brings its own headers)."""
    text = PRELUDE.read_text()
    names = set(re.findall(r"QGPU_DEV\s+(?:[\w:<>]+\s+\*?\s*)+?(\w+)\s*\(", text))
    names |= set(re.findall(r"^QGPU_BAR_RED\((\w+)", text, re.M))
    if "#define __syncthreads()" in text:
        names.add("__syncthreads")
    return sorted(n for n in names if not n.startswith(("__qgpu", "get_")) and n != "NAME")


def _table(head: tuple[str, ...], rows: list[tuple]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out + [""]


def render() -> str:
    lines = [
        "# The qgpu CUDA reference",
        "",
        "What a kernel may use, generated from the lowering's own tables by `python -m qgpu_min.cuda.reference`",
        "(tests/test_cuda_reference.py fails when this file is out of date). The front end: docs/cuda.md; the",
        "machine: docs/machine.md; the sanitizer: docs/memcheck.md.",
        "",
        "## Limits of the machine (the reference interpreter)",
        "",
        *_table(("what", "limit"), [
            ("lanes per warp (`warpSize`)", isa.LANES),
            ("threads per CTA", isa.MAX_THREADS_PER_CTA),
            ("warps per CTA", isa.MAX_WARPS_PER_CTA),
            ("CTAs per launch", isa.MAX_CTAS),
            ("memory (all arrays, variables, shared and local memory)", f"{isa.MEM_WORDS} words "
                                                                      f"({isa.MEM_WORDS * 4} bytes)"),
            ("program blocks (ROM)", isa.ROM_BLOCKS),
            ("registers", f"{isa.N_REGS - 1} (r{isa.ZERO} reads zero)"),
            ("ALU slots per block", f"{isa.N_PRE} before the memory slot, {isa.N_POST} after"),
            ("warp steps before a launch stops (`--step-limit`)", f"{isa.DEFAULT_STEP_LIMIT:,}"),
        ]),
        "The GPU in the weights has its own, smaller limits: `qgpu-min circuit-report --gpu` and docs/gpu.md.",
        "Integers only: 8, 16, 32 and 64-bit, signed and unsigned. Floating-point types are refused: "
        + ", ".join(f"`.{t}`" for t in sorted(FLOAT_TYPES)) + ".",
        "",
        "## PTX instructions",
        "",
        "Every opcode the lowering accepts. '64-bit arithmetic': the instruction also takes `.b64`/`.s64`/`.u64`",
        "operands (as pairs of 32-bit words, qgpu_min/cuda/lower_wide.py); 64-bit loads, stores, moves and",
        "conversions always work. Anything else (an opcode not listed, a modifier a handler does not know) is",
        "an error naming the PTX and CUDA line.",
        "",
        *_table(("PTX", "64-bit arithmetic", "lowered as"), [
            (f"`{op}`", "yes" if WIDE.get(op) else "", HOW[op]) for op in sorted(handled_opcodes())]),
        "## Comparisons (`setp`, `set`)",
        "",
        *_table(("PTX", "machine op", "operands swapped", "unsigned"), [
            (f"`.{cmp}`", f"`{op}`", "yes" if swap else "", "yes" if unsigned else "")
            for cmp, (op, swap, unsigned) in sorted(CMP_OPS.items())]),
        "## Loads and stores",
        "",
        *_table(("width", "load", "store"), [
            (f"{w}-bit {k}", f"`{LOAD[(w, k)]}`", f"`{STORE[w]}`" if w in STORE else "")
            for (w, k) in sorted(LOAD)]),
        "64-bit values are two 32-bit words; `.v2`/`.v4` vectors are one access per element.",
        "",
        "## Atomics (`atom`, `red`; `atomicAdd` and friends)",
        "",
        *_table(("PTX", "machine op"), [(f"`.{k}`", f"`ATOM.{v}`") for k, v in sorted(ATOM_KIND.items())]),
        "Atomics act on 32-bit words in any memory (global or shared). Lanes of a warp apply theirs in lane",
        "order.",
        "",
        "## Shuffles and votes",
        "",
        *_table(("machine op", "CUDA"), [
            ("`SHFL.IDX`", "`__shfl_sync`"), ("`SHFL.UP`", "`__shfl_up_sync`"),
            ("`SHFL.DOWN`", "`__shfl_down_sync`"), ("`SHFL.BFLY`", "`__shfl_xor_sync`"),
            ("`VOTE.BALLOT`", "`__ballot_sync`, `__activemask`"), ("`VOTE.ANY`", "`__any_sync`"),
            ("`VOTE.ALL`", "`__all_sync`")]),
        f"A warp has {isa.LANES} lanes: a shuffle reaches lanes 0..{isa.LANES - 1} (the width defaults to "
        "`warpSize`), and a",
        "lane outside the segment reads its own value, as PTX says. The masks are accepted and not checked.",
        "",
        "## Special registers",
        "",
        *_table(("PTX", "value"), [(f"`%{s}`", "`S2R`") for s in isa.SPECIALS if s != "tid.lin"]
                + [(f"`{s}`", f"{v} (constant)") for s, v in sorted(CONST_SREGS.items())]),
        "## Device functions of the prelude (clang)",
        "",
        "With clang the prelude (qgpu_min/cuda/include/qgpu_prelude.h) defines these; with nvcc its own",
        "headers do, and the same PTX instructions above decide what runs.",
        "",
        ", ".join(f"`{n}`" for n in prelude_functions()),
        "",
        "Also `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (x, y; z is 0 or 1) and `warpSize` (= 4).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
