"""The checked interpreter behind --memcheck, in the spirit of compute-sanitizer: the reference interpreter
(interp.py, the same semantics and scheduling) with a shadow of every memory byte.

The host says what each byte is (a Region: an argument array, a kernel variable, a thread's local
variable or spill slots, the extern __shared__ array; bytes in no region are redzones or unused), and the
checks are:
  memcheck   every load, store and atomic lies inside one region, and a thread's frame is its own;
  initcheck  a load or atomic of shared or local memory reads bytes this CTA (this thread) wrote;
  racecheck  shared memory: a load or store by one warp and a store by another with no barrier between
             them (atomics are exempt: they are the way to share without one; so is a store of the value
             the bytes already hold, as when several warps mark the same flag);
  synccheck  a warp reaches a barrier with all of its live lanes (a `__syncthreads()` in code some lanes
             of the warp skip is divergent).
A warp's barrier count orders its accesses against other warps': every barrier releases all live warps of
the CTA together, so two accesses are separated by a barrier exactly when their warps had passed
different numbers of barriers. The first failed check raises MemcheckError with the block it happened in.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from .interp import LOAD_SIZE, STORE_SIZE, RunResult, _machine, _Machine, _Warp
from .isa import LANES, MEM_WORDS, SPECIAL, Instr, MachineError, Program

# Region kinds; SHARED and LOCAL are initchecked (reset at every CTA), SHARED is racechecked
ARRAY, GLOBAL, SHARED, LOCAL, SPILL, INTERNAL = "array", "global", "shared", "local", "spill", "internal"


@dataclass(frozen=True)
class Region:
    kind: str                   # one of the kinds above
    name: str                   # as the user knows it: the parameter or variable name
    start: int                  # byte address
    size: int                   # bytes
    elem_bytes: int = 4
    thread: int | None = None   # LOCAL/SPILL: the thread (tid.lin) whose frame it is in

    @property
    def end(self) -> int:
        return self.start + self.size

    def width(self, access: int) -> int:
        """The element size to count in: the declared one, or the access's for a variable the compiler
        declared as bytes (clang writes `__shared__ int t[4]` as `.b8 t[16]`)."""
        return access if self.elem_bytes == 1 else self.elem_bytes

    def element(self, addr: int, access: int) -> str:
        """'name[i]' for a byte of this region ('byte k of ...' for a thread's local memory, which the
        compiler lays out as one byte array)."""
        if self.kind in (LOCAL, SPILL):
            return f"byte {addr - self.start} of {self.name}"
        return f"{self.name}[{(addr - self.start) // self.width(access)}]"

    def count(self, access: int) -> int:
        return self.size // self.width(access)


class MemcheckError(MachineError):
    """A check of --memcheck failed; ``block`` is the machine block of the access or barrier, ``line`` the
    PTX line of that instruction (0 if unknown)."""

    def __init__(self, message: str, block: int, line: int = 0) -> None:
        super().__init__(message)
        self.block, self.line = block, line


def describe(addr: int, access: int, regions: list[Region]) -> str:
    """Where a byte no region holds lies: past the end of the array or variable just below, or before the
    one above, whichever is nearer, counted in elements."""
    below = max((r for r in regions if r.end <= addr), key=lambda r: r.end, default=None)
    above = min((r for r in regions if r.start > addr), key=lambda r: r.start, default=None)
    named = (ARRAY, GLOBAL, SHARED)
    if below is not None and below.kind in named and (above is None or addr - below.end < above.start - addr):
        e = below.width(access)
        k = (addr - below.end) // e
        return f"{below.name}[{below.count(access) + k}], {k + 1} past the end of {below.name} " \
               f"({below.count(access)} elements)"
    if above is not None and above.kind in named:
        e = above.width(access)
        k = (above.start - addr + e - 1) // e
        return f"{above.name}[{-k}], {k} before the start of {above.name}"
    return "memory that no array or variable holds"


class _CheckedMachine(_Machine):
    def __init__(self, program: Program, memory: list[int], step_limit: int, trace: bool, regions: list[Region],
                 block_x: int):
        super().__init__(program, memory, step_limit, trace)
        self.regions, self.block_x = regions, block_x
        self.owner: list[int] = [-1] * (MEM_WORDS * 4)      # byte -> region index, -1: none
        for i, r in enumerate(regions):
            if r.start < 0 or r.end > MEM_WORDS * 4 or any(self.owner[b] >= 0 for b in range(r.start, r.end)):
                raise MachineError(f"memcheck: region {r.name} ({r.start:#x}+{r.size}) is outside memory or "
                                   f"overlaps another")
            self.owner[r.start: r.end] = [i] * r.size
        self.checked_cta = -1
        self.pc_of: dict[int, int] = {}      # warp index -> the block it is executing

    # ---- per-CTA shadow state ---------------------------------------------------------------
    def _new_cta(self) -> None:
        self.checked_cta = self.cta
        n = MEM_WORDS * 4
        self.written = [self.regions[o].kind not in (SHARED, LOCAL) if o >= 0 else True for o in self.owner]
        self.last_write: list[tuple[int, int, int] | None] = [None] * n    # (warp, barriers, thread) of a store
        self.readers: list[dict[int, tuple[int, int]] | None] = [None] * n  # warp -> (barriers, thread) of a load
        self.barriers: dict[int, int] = {}                                 # warp -> barriers passed

    def _step(self, w: _Warp) -> tuple[int, list[int], bool]:
        if self.cta != self.checked_cta:
            self._new_cta()
        live = [l for l in range(LANES) if not w.exited[l]]
        pc = min(w.pc[l] for l in live)
        self.pc_of[w.index] = pc
        if self.blocks[pc].term.kind == "BAR":
            behind = [l for l in live if w.pc[l] != pc]
            if behind:
                elsewhere = sorted({w.pc[l] for l in behind})
                raise MemcheckError(
                    f"synccheck: divergent barrier: {self._threads(w, [l for l in live if w.pc[l] == pc])} reach "
                    f"__syncthreads() (block B{pc}) while {self._threads(w, behind)} of the same warp are at "
                    f"block {', '.join(f'B{b}' for b in elsewhere)} and skip it", pc, self.blocks[pc].term_line)
        res = super()._step(w)
        if self.blocks[pc].term.kind == "BAR":
            self.barriers[w.index] = self.barriers.get(w.index, 0) + 1
        return res

    # ---- every access --------------------------------------------------------------------
    def _addr(self, w: _Warp, lane: int, ins: Instr, size: int) -> int:
        addr = super()._addr(w, lane, ins, size)
        kind = "load" if ins.op in LOAD_SIZE else "store" if ins.op in STORE_SIZE else "atomic"
        tid = w.special[lane][SPECIAL["tid.lin"]]
        span = self.owner[addr: addr + size]
        if -1 in span or len(set(span)) > 1:
            what = describe(addr + span.index(-1), size, self.regions) if -1 in span else "two variables at once"
            self._fail(f"memcheck: invalid {kind} of {size} bytes at address {addr:#x}: {what}", w, lane)
        r = self.regions[span[0]]
        if r.kind in (LOCAL, SPILL) and r.thread != tid:
            self._fail(f"memcheck: invalid {kind} of {size} bytes at address {addr:#x}: {r.element(addr, size)} of "
                       f"thread {self._thread_name(r.thread)}, not its own (a local array indexed past its end?)",
                       w, lane)
        if r.kind == INTERNAL:
            return addr
        if kind != "store" and not all(self.written[addr: addr + size]):
            self._fail(f"initcheck: {kind} of {r.element(addr, size)} ({size} bytes), which "
                       f"{'this CTA' if r.kind == SHARED else 'this thread'} has not written", w, lane)
        if kind != "load":
            self.written[addr: addr + size] = [True] * size
        same = kind == "store" and self._read(addr, size) == w.regs[lane][ins.rb] & ((1 << 8 * size) - 1)
        if r.kind == SHARED and kind != "atomic" and not same:     # a store that changes nothing cannot race
            self._race(kind, addr, size, r, w, lane, tid)
        return addr

    def _race(self, kind: str, addr: int, size: int, r: Region, w: _Warp, lane: int, tid: int) -> None:
        epoch = self.barriers.get(w.index, 0)
        for b in range(addr, addr + size):
            last = self.last_write[b]
            if last is not None and last[0] != w.index and last[1] == epoch:
                self._fail(f"racecheck: {kind} of {r.element(addr, size)} races with the store by thread "
                           f"{self._thread_name(last[2])} (warp {last[0]}): no __syncthreads() between them",
                           w, lane)
            if kind == "store":
                for other, (e, t) in (self.readers[b] or {}).items():
                    if other != w.index and e == epoch:
                        self._fail(f"racecheck: store to {r.element(addr, size)} races with the load by thread "
                                   f"{self._thread_name(t)} (warp {other}): no __syncthreads() between them",
                                   w, lane)
                self.last_write[b] = (w.index, epoch, tid)
                self.readers[b] = None
            else:
                if self.readers[b] is None:
                    self.readers[b] = {}
                self.readers[b][w.index] = (epoch, tid)

    # ---- messages ------------------------------------------------------------------------
    def _thread_name(self, tid: int) -> str:
        return f"({tid % self.block_x}, {tid // self.block_x})"

    def _threads(self, w: _Warp, lanes: list[int]) -> str:
        names = [self._thread_name(w.special[l][SPECIAL["tid.lin"]]) for l in lanes]
        return ("thread " if len(names) == 1 else "threads ") + ", ".join(names)

    def _fail(self, what: str, w: _Warp, lane: int) -> None:
        pc = self.pc_of[w.index]
        raise MemcheckError(f"{what}; by thread {self._thread_name(w.special[lane][SPECIAL['tid.lin']])} "
                            f"of CTA {self.cta_xy} (lane {lane} of warp {w.index}), block B{pc}", pc,
                            self.blocks[pc].mem_line)


def run(program: Program, memory: list[int], grid: tuple[int, int], block: tuple[int, int],
        regions: list[Region], step_limit: int | None = None) -> RunResult:
    """interp.run with every check of the module docstring; ``regions`` map the launch's memory."""
    m = _machine(program, memory, grid, block, step_limit, False,
                 lambda *machine: _CheckedMachine(*machine, regions, block[0]))
    deque(m.launch_steps(grid, block), maxlen=0)
    return RunResult(m.mem, m.steps)
