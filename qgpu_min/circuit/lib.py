"""The gate library: 32-bit words as dual-rail bits, and the ops built from threshold and AND units.

Two unit shapes carry everything (see ir.py for the integer ReLU semantics):
- AND of one-hot literals: relu(sum of n indicators - (n-1)) is 1 exactly when all n are active.
- step [S >= theta] over a small integer sum S = sum w*x: relu(S - theta + 1) - relu(S - theta).
Every sum stays within +-256 where its value matters, so bf16 holds it exactly (DESIGN 5.10).

Adders use 4-bit nibbles: layer A computes, per nibble, its sum bits for carry-in 0 and 1 and its
kill/propagate/generate class; layer B forms each nibble's carry-in as one threshold over the classes
below it (a carry-lookahead in one step, weights up to 2^7) and selects the sum bits. 2 MLP layers.
Compares, min/max and the fused ALU reuse that layer A; `gated` ANDs any unit with extra literals, which
is how the fused ALU selects its op inside the same layer B.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from .ir import CONST, Circuit, CircuitError, Group, Unit, Word, bit_not, const_bit, view, weights_by_element

Term = tuple[Group, int, int]
# A unit's output on a bit group: its value moves from element 0 (the default) to element 1, or back.
SET = ((1, 1), (0, -1))
UNSET = ((1, -1), (0, 1))


def step_gate(c: Circuit, name: str, size: int, default: int, terms: list[Term],
              steps: dict[int, list[tuple[int, int]]]) -> Group:
    """Output element e gets sum(sign * [S >= theta]) over steps[e]; the default element gets the rest."""
    coefs: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for e, lst in steps.items():
        for theta, sign in lst:
            coefs[theta - 1][e] += sign
            coefs[theta - 1][default] -= sign
            coefs[theta][e] -= sign
            coefs[theta][default] += sign
    units = [Unit(tuple(terms), th, tuple((e, v) for e, v in sorted(out.items()) if v))
             for th, out in sorted(coefs.items()) if any(out.values())]
    return c.gate(name, size, default, units)


def and_unit(lits: list[tuple[Group, int]], out: tuple[tuple[int, int], ...]) -> Unit:
    """A unit that is 1 exactly when every (group, element) literal is active."""
    return Unit(tuple((g, e, 1) for g, e in lits), len(lits) - 1, out)


def bit_from_ands(c: Circuit, name: str, minterms: list[list[tuple[Group, int]]]) -> Group:
    """A bit that is 1 when one of the (mutually exclusive) AND minterms holds."""
    return c.gate(name, 2, 0, [and_unit(m, SET) for m in minterms])


# Bitwise -----------------------------------------------------------------------------------------------

def _check_word(w: Word, what: str) -> None:
    if len(w) != 32 or any(b.size != 2 for b in w):
        raise CircuitError(f"{what}: expected a 32-bit word of bit groups")


def word_not(a: Word) -> Word:
    return [bit_not(b) for b in a]


def word_and(c: Circuit, a: Word, b: Word, name: str = "and") -> Word:
    return [bit_from_ands(c, f"{name}[{i}]", [[(x, 1), (y, 1)]]) for i, (x, y) in enumerate(zip(a, b))]


def word_or(c: Circuit, a: Word, b: Word, name: str = "or") -> Word:
    return [bit_not(bit_from_ands(c, f"{name}~[{i}]", [[(x, 0), (y, 0)]])) for i, (x, y) in enumerate(zip(a, b))]


def word_xor(c: Circuit, a: Word, b: Word, name: str = "xor") -> Word:
    return [bit_from_ands(c, f"{name}[{i}]", [[(x, 1), (y, 0)], [(x, 0), (y, 1)]])
            for i, (x, y) in enumerate(zip(a, b))]


def mux_word(c: Circuit, sel: Group, a: Word, b: Word, name: str = "mux") -> Word:
    """sel ? a : b, bitwise: one AND unit per input bit."""
    return [bit_from_ands(c, f"{name}[{i}]", [[(sel, 1), (x, 1)], [(sel, 0), (y, 1)]])
            for i, (x, y) in enumerate(zip(a, b))]


def mux_onehot(c: Circuit, sel: Group, options: list[Word], name: str = "sel") -> Word:
    """options[sel] for a one-hot selector of size len(options)."""
    if sel.size != len(options):
        raise CircuitError(f"{name}: selector of size {sel.size} for {len(options)} options")
    return [bit_from_ands(c, f"{name}[{i}]", [[(sel, k), (w[i], 1)] for k, w in enumerate(options)])
            for i in range(len(options[0]))]


# Adders ------------------------------------------------------------------------------------------------

def _nibble_sum_terms(a: Word, b: Word, k: int, upto: int) -> list[Term]:
    return [t for i in range(upto + 1) for t in ((a[4 * k + i], 1, 1 << i), (b[4 * k + i], 1, 1 << i))]


def _nibble_class(c: Circuit, a: Word, b: Word, k: int, name: str) -> Group:
    """0 kill (sum < 15), 1 propagate (sum == 15), 2 generate (sum >= 16)."""
    return step_gate(c, f"{name}.t{k}", 3, 0, _nibble_sum_terms(a, b, k, 3), {1: [(15, 1), (16, -1)], 2: [(16, 1)]})


def _carry_terms(classes: list[Group], k: int) -> list[Term]:
    """sum_{j<k} 2^j (2 gen_j + prop_j): >= 2^k - cin exactly when nibble k receives a carry."""
    return [t for j in range(k) for t in ((classes[j], 2, 1 << (j + 1)), (classes[j], 1, 1 << j))]


def _add_stage(c: Circuit, a: Word, b: Word, variants0: tuple[int, ...], name: str,
               sums: bool = True) -> tuple[list[Group], list[dict]]:
    """Layer A of an adder: nibble classes, and (if sums) each nibble's sum bits per carry-in variant."""
    classes = [_nibble_class(c, a, b, k, name) for k in range(8)]
    s: list[dict] = []
    for k in range(8 if sums else 0):
        s.append({var: [step_gate(c, f"{name}.s{var}[{4 * k + j}]", 2, 0, _nibble_sum_terms(a, b, k, j),
                                  {1: [((1 << j) - var, 1), ((2 << j) - var, -1), ((3 << j) - var, 1)]})
                        for j in range(4)]
                  for var in (variants0 if k == 0 else (0, 1))})
    return classes, s


def _add_bit_units(classes: list[Group], s: list[dict], i: int, cconst: int, cbit: Group | None) -> list[Unit]:
    """Layer B units of sum bit i: select the nibble's sum bit for its carry-in (a threshold over the
    classes of the nibbles below)."""
    k, j = divmod(i, 4)
    if k == 0:
        if cbit is None:
            return [and_unit([(s[0][cconst][j], 1)], SET)]
        return [and_unit([(cbit, 1), (s[0][1][j], 1)], SET),
                and_unit([(cbit, 0), (s[0][0][j], 1)], SET)]
    p = _carry_terms(classes, k) + ([(cbit, 1, 1)] if cbit is not None else [])
    big = (1 << k) + 1  # enough to silence a unit whose selected sum bit is 0
    units = []
    for sel_bit, sign, th in ((s[k][1][j], 1, (1 << k) - 1 + big - cconst), (s[k][0][j], -1, big - (1 << k) + cconst)):
        terms = tuple((g, e, sign * w) for g, e, w in p) + ((sel_bit, 1, big),)
        units += step_units(terms, th + 1)
    return units


def add(c: Circuit, a: Word, b: Word, cin: Group | int = 0, name: str = "add") -> Word:
    """a + b + cin mod 2^32 (cin: 0, 1 or a bit). 2 MLP layers."""
    _check_word(a, name)
    _check_word(b, name)
    cconst = cin if isinstance(cin, int) else 0
    cbit = cin if isinstance(cin, Group) else None
    classes, s = _add_stage(c, a, b, (0, 1) if cbit is not None else (cconst,), name)
    return [s[0][cconst][i] if i < 4 and cbit is None  # nibble 0 needs no carry: a rename
            else c.gate(f"{name}[{i}]", 2, 0, _add_bit_units(classes, s, i, cconst, cbit)) for i in range(32)]


def sub(c: Circuit, a: Word, b: Word, name: str = "sub") -> Word:
    return add(c, a, word_not(b), 1, name)


# Compares ----------------------------------------------------------------------------------------------

def _sub_classes(c: Circuit, a: Word, b: Word, name: str) -> list[Group]:
    _check_word(a, name)
    _check_word(b, name)
    nb = word_not(b)
    return [_nibble_class(c, a, nb, k, name) for k in range(8)]


def ult(c: Circuit, a: Word, b: Word, name: str = "ult") -> Group:
    """a < b unsigned: no carry out of a + ~b + 1. 2 MLP layers."""
    classes = _sub_classes(c, a, b, name)
    carry = step_gate(c, f"{name}.cout", 2, 0, _carry_terms(classes, 8), {1: [(256 - 1, 1)]})
    return bit_not(carry)


def eq(c: Circuit, a: Word, b: Word, name: str = "eq") -> Group:
    """a == b: every nibble of a + ~b propagates. 2 MLP layers."""
    classes = _sub_classes(c, a, b, name)
    return step_gate(c, f"{name}.all", 2, 0, [(t, 1, 1) for t in classes], {1: [(8, 1)]})


def _flip_sign(w: Word) -> Word:
    return w[:31] + [bit_not(w[31])]


def slt(c: Circuit, a: Word, b: Word, name: str = "slt") -> Group:
    return ult(c, _flip_sign(a), _flip_sign(b), name)


def ne(c: Circuit, a: Word, b: Word, name: str = "ne") -> Group:
    return bit_not(eq(c, a, b, name))


def ule(c: Circuit, a: Word, b: Word, name: str = "ule") -> Group:
    return bit_not(ult(c, b, a, name))


def sle(c: Circuit, a: Word, b: Word, name: str = "sle") -> Group:
    return bit_not(slt(c, b, a, name))


def minmax(c: Circuit, a: Word, b: Word, signed: bool, want_max: bool, name: str = "min") -> Word:
    """min/max: a threshold on the compare classes selects a's or b's bit directly (the fused ALU with
    one op). 2 MLP layers."""
    op = ("max" if want_max else "min") + ("" if signed else "u")
    return alu(c, view(CONST, (0,), "op"), a, b, (op,), name=name)


# Shifts ------------------------------------------------------------------------------------------------

def _big_amount(c: Circuit, amt: Word, name: str) -> Group:
    """The bit 'amt >= 32' (any of bits 5..31 set)."""
    return step_gate(c, f"{name}.big", 2, 0, [(amt[i], 1, 1) for i in range(5, 32)], {1: [(1, 1)]})


def _shift_source(kind: str, i: int, k: int) -> int | None:
    """Which input bit lands on bit i after shifting by k (None: the fill; 31 for sra's sign fill)."""
    src = i - k if kind == "shl" else i + k
    if 0 <= src < 32:
        return src
    return 31 if kind == "sra" else None


def _barrel_stage(word: Word, amt: Word, kind: str, i: int, lo: int, n: int,
                  step: int) -> list[list[tuple[Group, int]]]:
    """Minterms of bit i after shifting by step * (amount bits lo..lo+n-1)."""
    minterms = []
    for k in range(1 << n):
        src = _shift_source(kind, i, step * k)
        if src is not None:
            minterms.append([(amt[lo + j], (k >> j) & 1) for j in range(n)] + [(word[src], 1)])
    return minterms


def _shift_first(c: Circuit, a: Word, amt: Word, kind: str, name: str) -> Word:
    """Layer 1 of the barrel shifter: shift by amt mod 4 (<= 4 AND units per bit)."""
    return [bit_from_ands(c, f"{name}.s1[{i}]", _barrel_stage(a, amt, kind, i, 0, 2, 1)) for i in range(32)]


def _shift_second(y: Word, a31: Group, amt: Word, big: Group, kind: str, i: int) -> list[list[tuple[Group, int]]]:
    """Layer 2: shift y by 4 * (amt bits 2..4) unless amt >= 32 (then 0, or the sign for sra)."""
    minterms = [m + [(big, 0)] for m in _barrel_stage(y, amt, kind, i, 2, 3, 4)]
    if kind == "sra":
        minterms.append([(big, 1), (a31, 1)])
    return minterms


def onehot_of_bits(c: Circuit, bits: list[Group], size: int, name: str) -> Group:
    """The value of `bits` (LSB first) as a one-hot group of `size` elements (1 MLP layer, size-1 AND
    units). Values >= size leave the default element 0 active, so the gate is one-hot on every input."""
    units = [and_unit([(b, (k >> i) & 1) for i, b in enumerate(bits)], ((k, 1), (0, -1)))
             for k in range(1, min(size, 1 << len(bits)))]
    return c.gate(name, size, 0, units)


def _amount_onehot(c: Circuit, amt: Word, name: str) -> Group:
    """amt mod 32 as a one-hot group (1 MLP layer, 31 units, 32 dims)."""
    return onehot_of_bits(c, amt[:5], 32, f"{name}.amt")


def _onehot_shift_minterms(a: Word, oh: Group, big: Group, kind: str, i: int) -> list[list[tuple[Group, int]]]:
    """Bit i of a one-layer shift by a one-hot amount: one AND per amount (more units, fewer dims)."""
    minterms = []
    for k in range(32):
        src = _shift_source(kind, i, k)
        if src is not None:
            minterms.append([(oh, k), (a[src], 1), (big, 0)])
    if kind == "sra":
        minterms.append([(big, 1), (a[31], 1)])
    return minterms


def shift(c: Circuit, a: Word, amt: Word, kind: str, name: str | None = None) -> Word:
    """kind 'shl', 'shr' (logical) or 'sra'; amounts >= 32 give 0 (or the sign fill), as PTX clamps.
    A two-stage barrel shifter (by amt mod 4, then by 4 * (amt >> 2 & 7)): 2 MLP layers."""
    if kind not in ("shl", "shr", "sra"):
        raise CircuitError(f"shift kind {kind!r}: expected shl, shr or sra")
    name = name or kind
    _check_word(a, name)
    _check_word(amt, name)
    y = _shift_first(c, a, amt, kind, name)
    big = _big_amount(c, amt, name)
    return [bit_from_ands(c, f"{name}[{i}]", _shift_second(y, a[31], amt, big, kind, i)) for i in range(32)]


# Fused ALU ----------------------------------------------------------------------------------------------

ALU_OPS = ("add", "sub", "and", "or", "xor", "shl", "shr", "sra", "slt", "sltu", "eq", "min", "max", "minu",
           "maxu")
# Further ops `alu` accepts (not in the demo's 15): ne, sle/sleu (a <= b: the subtraction's carry terms
# stay <= 255), sel (c if a == 0 else b: needs the third operand).
ALU_EXTRA_OPS = ("ne", "sle", "sleu", "sel")


def _max_pre(u: Unit) -> int:
    """An upper bound of the unit's pre-activation over all one-hot inputs."""
    const, groups = weights_by_element(u)
    return const - u.theta + sum(max(max(ws.values()), 0) for _, ws in groups.values())


def gated(units: list[Unit], lits: list[tuple[Group, int]]) -> list[Unit]:
    """Each unit ANDed with extra one-hot literals: weight M on each, M per literal added to theta, with M
    a power of two above the unit's largest pre-activation, so any false literal silences the unit while
    the active range (and its bf16 exactness) stays as it was."""
    out = []
    for u in units:
        m = 1 << max(1, _max_pre(u)).bit_length()
        out.append(Unit(u.terms + tuple((g, e, m) for g, e in lits), u.theta + m * len(lits), u.out))
    return out


def step_units(terms: Sequence[Term], theta: int) -> list[Unit]:
    """Units of a bit that is [sum terms >= theta]."""
    return [Unit(tuple(terms), theta - 1, SET), Unit(tuple(terms), theta, UNSET)]


def alu(c: Circuit, op: Group, a: Word, b: Word, names: tuple[str, ...] = ALU_OPS,
        extras: tuple[Word, ...] = (), name: str = "alu", shifter: str = "onehot", third: Word | None = None,
        clamp_shifts: bool = True) -> Word:
    """op(a, b) for a one-hot op (elements: names in order, then one per extra word, which is passed
    through): every op and the selection in 2 MLP layers. Layer A is shared (adder stages for a + b and
    a + ~b + 1, whose classes also give the compares; shift amount); layer B ANDs each op's output units
    with its op literal (`gated`). Compares give 0/1 words; min/max select by a threshold on the classes.
    shifter "onehot" (one amount one-hot shared by the three shifts: fewer dims) or "barrel" (first
    barrel stage per shift in layer A: about 1200 fewer units, 160 more dims). third: the operand c of
    sel. clamp_shifts: amounts >= 32 give 0 / the sign fill (PTX) rather than shifting by amount mod 32."""
    if shifter not in ("onehot", "barrel"):
        raise CircuitError(f"{name}: shifter {shifter!r}: expected 'onehot' or 'barrel'")
    unknown = [n for n in names if n not in ALU_OPS + ALU_EXTRA_OPS]
    if unknown or op.size != len(names) + len(extras):
        raise CircuitError(f"{name}: unknown ops {unknown} or op group size {op.size} != "
                           f"{len(names)} ops + {len(extras)} extras")
    _check_word(a, name)
    _check_word(b, name)
    want = set(names)
    if "sel" in want:
        if third is None:
            raise CircuitError(f"{name}: sel needs the third operand")
        _check_word(third, name)
        nonzero = step_gate(c, f"{name}.nz", 2, 0, [(x, 1, 1) for x in a], {1: [(1, 1)]})
    nb = word_not(b)
    if want & {"add"}:
        add_cls, add_s = _add_stage(c, a, b, (0,), f"{name}.add")
    if want & {"sub", "slt", "sltu", "eq", "min", "max", "minu", "maxu", "ne", "sle", "sleu"}:
        sub_cls, sub_s = _add_stage(c, a, nb, (1,), f"{name}.sub", sums="sub" in want)
    if want & {"slt", "min", "max", "sle"}:  # signed: flip both sign bits, only the top nibble's class changes
        top = _nibble_class(c, _flip_sign(a), _flip_sign(nb), 7, f"{name}.signed")
        signed_cls = sub_cls[:7] + [top]
    shifts = [k for k in ("shl", "shr", "sra") if k in want]
    if shifts:
        # PTX clamps amounts >= 32; the machine ISA uses the amount mod 32 (a constant 'not big')
        big = _big_amount(c, b, f"{name}.sh") if clamp_shifts else const_bit(0)
        if shifter == "barrel":
            shifted = {k: _shift_first(c, a, b, k, f"{name}.{k}") for k in shifts}
        else:
            oh = _amount_onehot(c, b, f"{name}.sh")

    def lt_terms(cls: list[Group]) -> list[Term]:
        return _carry_terms(cls, 8)  # a < b  <=>  these terms (+ carry-in 1) stay below 256

    def bit_units(n: str, i: int) -> list[Unit]:
        if n == "add":
            return _add_bit_units(add_cls, add_s, i, 0, None)
        if n == "sub":
            return _add_bit_units(sub_cls, sub_s, i, 1, None)
        if n == "and":
            return [and_unit([(a[i], 1), (b[i], 1)], SET)]
        if n == "or":
            return [and_unit([(a[i], 1)], SET), and_unit([(a[i], 0), (b[i], 1)], SET)]
        if n == "xor":
            return [and_unit([(a[i], 1), (b[i], 0)], SET), and_unit([(a[i], 0), (b[i], 1)], SET)]
        if n in ("shl", "shr", "sra"):
            if shifter == "barrel":
                return [and_unit(m, SET) for m in _shift_second(shifted[n], a[31], b, big, n, i)]
            return [and_unit(m, SET) for m in _onehot_shift_minterms(a, oh, big, n, i)]
        if n in ("slt", "sltu"):
            terms = lt_terms(signed_cls if n == "slt" else sub_cls)
            return step_units([(g, e, -w) for g, e, w in terms], -254) if i == 0 else []
        if n == "eq":
            return step_units([(t, 1, 1) for t in sub_cls], 8) if i == 0 else []
        if n == "ne":
            return step_units([(t, 1, -1) for t in sub_cls], -7) if i == 0 else []
        if n in ("sle", "sleu"):  # a <= b: no carry out, or all nibbles propagate (terms exactly 255)
            terms = lt_terms(signed_cls if n == "sle" else sub_cls)
            return step_units([(g, e, -w) for g, e, w in terms], -255) if i == 0 else []
        if n == "sel":
            return [and_unit([(nonzero, 1), (b[i], 1)], SET), and_unit([(nonzero, 0), (third[i], 1)], SET)]
        # min/max: a < b selects a for min, b for max
        terms = lt_terms(signed_cls if n in ("min", "max") else sub_cls)
        lt_pick, ge_pick = (a[i], b[i]) if n in ("min", "minu") else (b[i], a[i])
        lt = gated(step_units([(g, e, -w) for g, e, w in terms], -254), [(lt_pick, 1)])
        ge = gated(step_units(terms, 255), [(ge_pick, 1)])
        return lt + ge

    out = []
    for i in range(32):
        units = []
        for k, n in enumerate(names):
            units += gated(bit_units(n, i), [(op, k)])
        for k, w in enumerate(extras):
            units.append(and_unit([(op, len(names) + k), (w[i], 1)], SET))
        out.append(c.gate(f"{name}[{i}]", 2, 0, units))
    return out


# Multiply ----------------------------------------------------------------------------------------------

def sum_columns(c: Circuit, cols: list[list[Group]], name: str = "csum") -> Word:
    """sum over k of 2^k * (number of 1 bits in cols[k]) mod 2^len(cols), as a word.

    Column compression: each column holding 3 or more bits is replaced by the binary digits of its count,
    bit j = sum_m (-1)^(m+1) [count >= m 2^j] (steps over a sum of <= 32 ones), in one MLP layer, until
    every column holds at most two bits; then one 2-layer add."""
    width = len(cols)
    for layer in range(16):
        if max(len(col) for col in cols) <= 2:
            break
        new: list[list[Group]] = [[] for _ in range(width)]
        for k, col in enumerate(cols):
            if len(col) <= 2:
                new[k] += col
                continue
            terms = [(b, 1, 1) for b in col]
            for j in range(len(col).bit_length()):
                if k + j < width:
                    steps = [(m << j, 1 if m % 2 else -1) for m in range(1, len(col) // (1 << j) + 1)]
                    new[k + j].append(step_gate(c, f"{name}.c{layer}[{k}].{j}", 2, 0, terms, {1: steps}))
        cols = new
    zero = const_bit(0)
    x = [col[0] if col else zero for col in cols]
    y = [col[1] if len(col) > 1 else zero for col in cols]
    return add(c, x, y, 0, name)


def mul_lo(c: Circuit, a: Word, b: Word, name: str = "mul") -> Word:
    """a * b mod 2^32: the 528 partial-product bits a_i AND b_j (i + j < 32) in one MLP layer, then
    column compression (3 layers) and one add (2 layers): 6 MLP layers."""
    _check_word(a, name)
    _check_word(b, name)
    cols: list[list[Group]] = [[] for _ in range(32)]
    for i in range(32):
        for j in range(32 - i):
            cols[i + j].append(bit_from_ands(c, f"{name}.pp[{i},{j}]", [[(a[i], 1), (b[j], 1)]]))
    return sum_columns(c, cols, name)
