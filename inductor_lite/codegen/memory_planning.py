"""Memory planning for the wrapper: freed buffers are reused, outputs written in place.

The wrapper (`wrapper.WrapperCodegen`) first describes the body of ``call`` as a list
of lines: strings of finished code (launches, extern calls, size symbols) and the
plain-data memory lines below, each tagged with its schedule step. `plan_memory`
rewrites the memory lines before any text is written, as TorchInductor's wrapper does
(``torch/_inductor/codegen/wrapper.py``: ``AllocateLine``, ``FreeIfNotReusedLine``,
``ReuseLine``, ``MemoryPlanningLine.plan``):

- A buffer the wrapper allocated dies after its last reader (`FreeIfNotReusedLine`):
  its storage goes into a pool keyed by device and dtype.
- A later `AllocateLine` takes a pooled storage instead of allocating when the sizes in
  bytes are provably equal (sympy, so ``s0`` never stands in for ``s1``), or, for static
  sizes, when the pooled storage is at most 5% larger (TorchInductor's bound for
  in-place reuse); graph outputs take exact sizes only, since they outlive ``call``.
  It becomes a `ReuseLine` (``buf5 = buf2; del buf2  # reuse``, through
  ``reinterpret_tensor`` when sizes or strides differ) and the donor's free writes
  nothing. The donor's storage stays alive from its free to the reuse, so a reuse is
  taken only if the live bytes over that gap plus the held storage stay within the
  peak of the plan before reuse (TorchInductor's ``should_reuse_buffer``).
- In place: an `AllocateLine` with an ``inplace_donor`` (chosen by `inplace_donors`:
  an input that dies at the kernel writing the output, spanning the same storage
  (device, dtype, bytes), each element read only where the output's same element is
  written; a planned buffer, a donated input
  or a new tensor an extern op returned, `returns_new_tensor`) becomes
  ``buf5 = buf2  # reuse buf2 in place``; the kernel gets both names, and the donor's
  free after the kernel becomes a plain ``del``.

Only buffers the wrapper allocates are planned: graph inputs and constants belong to
the caller, extern outputs are allocated by their aten op (`ExternAllocationLine` only
counts their bytes; a kernel may still write over one in place), graph outputs are
never freed, and a buffer an extern output may alias (``ExternKernel.may_alias_inputs``:
a view, or an op that returns its input) is freed with a plain `FreeLine`, since the
alias goes on using its storage.

`MemoryPlan.peak_bytes` is the most memory ``call`` holds at once in buffers it
allocates (kernel and extern outputs; graph inputs not counted), symbolic sizes at
their size hints.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Mapping, Optional, Sequence, Union

import sympy
import torch

from ..ir.indexing import Expr, known_equal, storage_length
from ..ir.nodes import Layout

REUSE_SLACK = 0.05
"""A static-size allocation may take a pooled storage up to this fraction larger than it
needs (TorchInductor's ``can_match_buffer_size``: 0.95 * donor <= output <= donor)."""


@dataclasses.dataclass(frozen=True)
class BufferSpec:
    """A planned buffer's name and layout; sizes and strides are sympy expressions in
    elements. A buffer is allocated as ``empty_strided(size, stride)`` (offset 0)."""

    name: str
    device: torch.device
    dtype: torch.dtype
    size: tuple[Expr, ...]
    stride: tuple[Expr, ...]

    @classmethod
    def of(cls, name: str, layout: Layout) -> "BufferSpec":
        return cls(name, layout.device, layout.dtype, tuple(layout.size), tuple(layout.stride))

    def nbytes(self) -> Expr:
        """Bytes of storage the layout spans (TorchInductor's ``compute_required_storage_length``
        times the element size)."""
        return sympy.expand(storage_length(self.size, self.stride) * self.dtype.itemsize)

    def same_storage(self, other: "BufferSpec") -> bool:
        """Same device, dtype and bytes of storage (the shapes may differ: a view)."""
        return self.device == other.device and self.dtype == other.dtype and known_equal(self.nbytes(), other.nbytes())


@dataclasses.dataclass
class AllocateLine:
    """Allocate ``buffer`` before the kernel of ``step`` writes it. ``inplace_donor``:
    an input of that kernel whose storage it may take instead (see `inplace_donors`)."""

    step: int
    buffer: BufferSpec
    is_output: bool = False
    inplace_donor: Optional[BufferSpec] = None


@dataclasses.dataclass
class FreeIfNotReusedLine:
    """``buffer`` is dead after ``step``: free it, unless a later allocation reuses it."""

    step: int
    buffer: BufferSpec
    is_reused: bool = False


@dataclasses.dataclass
class ReuseLine:
    """``new`` takes the storage of ``old``, which was freed after ``donor_step``; in
    place (``donor_step == step``) the kernel still reads ``old``, so the name stays
    until the `FreeLine` after the step."""

    step: int
    old: BufferSpec
    new: BufferSpec
    donor_step: int
    inplace: bool = False


@dataclasses.dataclass
class FreeLine:
    """Drop the name ``name`` after ``step`` (an input, an extern output, a buffer an
    extern output may alias, or an in-place donor); its storage is not planned."""

    step: int
    name: str


@dataclasses.dataclass
class ExternAllocationLine:
    """The extern call of ``step`` returns a new tensor ``buffer`` (allocated by the aten
    op, not planned; counted in the peak). Writes no code."""

    step: int
    buffer: BufferSpec


MemoryLine = Union[AllocateLine, FreeIfNotReusedLine, ReuseLine, FreeLine, ExternAllocationLine]
Line = Union[str, MemoryLine]


def static_size_hint(expr: Expr) -> int:
    """``expr`` as an int when it is a number, else 0 (an unknown size counts nothing)."""
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_number else 0


@dataclasses.dataclass
class MemoryPlan:
    """The planned lines of ``call`` and what they hold.

    Attributes:
        lines: code strings and memory lines, in order (`ReuseLine` where planning reused).
        num_steps: the schedule's length.
        peak_bytes: the most bytes live at once under this plan.
        unplanned_peak_bytes: the same, allocating every buffer fresh.
    """

    lines: list[Line]
    num_steps: int
    peak_bytes: int
    unplanned_peak_bytes: int

    def allocations(self) -> list[AllocateLine]:
        """The allocations left: buffers that get fresh storage."""
        return [line for line in self.lines if isinstance(line, AllocateLine)]

    def reuses(self) -> list[ReuseLine]:
        return [line for line in self.lines if isinstance(line, ReuseLine)]

    def describe(self) -> str:
        """One line per planned buffer and the peaks (the debug dump's ``memory_plan.txt``)."""
        out = []
        for line in self.lines:
            if isinstance(line, AllocateLine):
                out.append(f"step {line.step}: {line.buffer.name} allocated, {line.buffer.nbytes()} bytes")
            elif isinstance(line, ReuseLine):
                how = "in place over" if line.inplace else "reuses"
                since = "" if line.inplace else f" (dead after step {line.donor_step})"
                out.append(f"step {line.step}: {line.new.name} {how} {line.old.name}{since}, "
                           f"{line.old.nbytes()} bytes")
        reuses = self.reuses()
        inplace = sum(line.inplace for line in reuses)
        out.append(f"{len(self.allocations())} allocated, {len(reuses)} reused ({inplace} in place)")
        out.append(f"peak bytes held by call's own buffers (graph inputs excluded, symbolic sizes at their hints): "
                   f"{self.peak_bytes} planned, {self.unplanned_peak_bytes} without reuse")
        return "\n".join(out) + "\n"


def plan_memory(lines: Sequence[Line], num_steps: int,
                size_hint: Callable[[Expr], int] = static_size_hint) -> MemoryPlan:
    """Plan reuse over the wrapper's lines (see the module docstring).

    Args:
        lines: code strings and memory lines in program order; each planned buffer has
            one `AllocateLine` and at most one `FreeIfNotReusedLine`, after it.
        num_steps: the schedule's length (steps are ``0 .. num_steps - 1``; -1 is
            before the first).
        size_hint: an int for a size expression (symbols at example values).

    Returns:
        The plan; ``lines`` itself is not modified.
    """
    unplanned = list(lines)
    planned = _apply_inplace(unplanned)
    live = _live_bytes(planned, num_steps, size_hint)
    budget = max(live, default=0)
    end_step = {line.buffer.name if isinstance(line, FreeIfNotReusedLine) else line.name: line.step
                for line in planned if isinstance(line, (FreeIfNotReusedLine, FreeLine))}
    pools: dict[tuple, dict[Expr, list[FreeIfNotReusedLine]]] = collections.defaultdict(dict)
    for i, line in enumerate(planned):
        if isinstance(line, FreeIfNotReusedLine):
            buf = line.buffer
            pools[(buf.device, buf.dtype)].setdefault(buf.nbytes(), []).append(line)
        elif isinstance(line, AllocateLine):
            end = end_step.get(line.buffer.name, num_steps - 1)
            donor = _take_donor(line, pools[(line.buffer.device, line.buffer.dtype)], live, budget, end, size_hint)
            if donor is not None:
                donor.is_reused = True
                planned[i] = ReuseLine(line.step, donor.buffer, line.buffer, donor.step)
    return MemoryPlan(planned, num_steps, max(_live_bytes(planned, num_steps, size_hint), default=0),
                      max(_live_bytes(unplanned, num_steps, size_hint), default=0))


def _apply_inplace(lines: list[Line]) -> list[Line]:
    """In-place allocations become `ReuseLine`s and their donors' frees plain `FreeLine`s;
    other free lines are copied (planning marks them reused)."""
    out = list(lines)
    consumed = set()
    for i, line in enumerate(out):
        if isinstance(line, AllocateLine) and line.inplace_donor is not None:
            out[i] = ReuseLine(line.step, line.inplace_donor, line.buffer, line.step, inplace=True)
            consumed.add(line.inplace_donor.name)
        elif isinstance(line, FreeIfNotReusedLine):
            out[i] = FreeLine(line.step, line.buffer.name) if line.buffer.name in consumed else \
                dataclasses.replace(line)
    return out


def _fits(have: Expr, need: Expr, exact: bool) -> bool:
    if have == need or known_equal(have, need):
        return True
    if exact or not (have.is_number and need.is_number):
        return False
    return int(need) <= int(have) and int(have) - int(need) <= REUSE_SLACK * int(have)


def _take_donor(alloc: AllocateLine, pool: dict[Expr, list[FreeIfNotReusedLine]], live: list[int], budget: int,
                end: int, size_hint: Callable[[Expr], int]) -> Optional[FreeIfNotReusedLine]:
    """Pop and return a pooled free line whose storage ``alloc`` can take, or None;
    updates ``live`` for the storage held from the donor's free to ``end``."""
    need = alloc.buffer.nbytes()
    exact = pool.get(need, [])
    keys = [need] if exact else [k for k in pool if pool[k] and _fits(k, need, alloc.is_output)]
    for key in keys:
        candidates = pool[key]
        for j in range(len(candidates) - 1, -1, -1):  # the most recently freed first
            free = candidates[j]
            held, needed = size_hint(key), size_hint(need)
            extra = [(free.step + 1, alloc.step, held), (alloc.step, end + 1, held - needed)]
            if all(live[k] + add <= budget for lo, hi, add in extra for k in range(max(lo, 0), min(hi, len(live)))):
                for lo, hi, add in extra:
                    for k in range(max(lo, 0), min(hi, len(live))):
                        live[k] += add
                return candidates.pop(j)
    return None


def _live_bytes(lines: Sequence[Line], num_steps: int, size_hint: Callable[[Expr], int]) -> list[int]:
    """Bytes held at each step by the storages the lines allocate: a storage lives from
    the step allocating it through the step after which its last name is dropped. A
    donated input's storage counts from the step a buffer reuses it."""
    storage_of: dict[str, int] = {}
    names: list[int] = []  # per storage: how many names refer to it
    spans: list[list[int]] = []  # per storage: [first step, last step, bytes]

    def new_storage(name: str, step: int, buf: BufferSpec) -> None:
        storage_of[name] = len(spans)
        names.append(1)
        spans.append([max(step, 0), num_steps - 1, size_hint(buf.nbytes())])

    def drop(name: str, step: int) -> None:
        sid = storage_of.pop(name, None)
        if sid is not None:
            names[sid] -= 1
            if names[sid] == 0:
                spans[sid][1] = step

    for line in lines:
        if isinstance(line, (AllocateLine, ExternAllocationLine)):
            new_storage(line.buffer.name, line.step, line.buffer)
        elif isinstance(line, ReuseLine):
            sid = storage_of.get(line.old.name)
            if sid is None:  # a donated input's storage: counted from here
                new_storage(line.new.name, line.step, line.new)
            else:
                storage_of[line.new.name] = sid
                names[sid] += 1
            if not line.inplace:
                drop(line.old.name, line.step)
        elif isinstance(line, FreeIfNotReusedLine) and not line.is_reused:
            drop(line.buffer.name, line.step)
        elif isinstance(line, FreeLine):
            drop(line.name, line.step)
    delta = [0] * (num_steps + 1)
    for first, last, nbytes in spans:
        if first <= last:
            delta[first] += nbytes
            delta[last + 1] -= nbytes
    live, running = [], 0
    for step in range(num_steps):
        running += delta[step]
        live.append(running)
    return live


def inplace_donors(group, outputs: Sequence[BufferSpec], dying: Sequence[BufferSpec],
                   passes: Mapping[str, frozenset[int]]) -> dict[str, BufferSpec]:
    """For a kernel's outputs, inputs whose storage each may take: ``{output name: donor}``.

    An output ``O`` may be written over an input ``D`` (TorchInductor's in-place
    buffers, ``Scheduler.decide_inplace_update``) when:

    - ``D`` dies at this kernel and its storage is the wrapper's to reuse (``dying``:
      a buffer it allocated, a backward's donated input, or a new tensor an extern op
      returned);
    - both span the same storage (device, dtype, bytes; ``[1024, 32000]`` logits and
      their ``[2, 512, 32000]`` gradient alike; a padded GEMM's result, read through a
      slice, spans more than the kernel's output and is never taken);
    - the kernel reads ``D`` at one kernel index (a memory offset), the one it writes
      ``O`` at, so each element of ``D`` is read by the lane that overwrites it;
    - every node of the group reading ``D`` is ``O``'s node or one it depends on inside
      the kernel, so the store of each element comes after every read of it;
    - the kernel loads ``D`` and stores ``O`` in one and the same pass over memory
      (``passes``, `kernel.KernelSource.passes`): always so in a pointwise or
      persistent kernel; in a looped reduction, only if no other r loop reads ``D``
      (a later loop recomputes values from its inputs, an earlier one reduced them).
      A cross entropy's backward reduces in its first loop what it needs from the
      labels alone and reads the logits only in the loop that writes their gradient,
      so the gradient takes the logits' storage.

    The wrapper makes ``O`` a view of ``D`` from ``D``'s first element
    (``reinterpret_tensor`` counts offsets from the base tensor's own offset), so an
    extern output whose storage offset the wrapper does not know works as a donor too,
    reshaped or not (a linear layer's ``[B*T, 4C]`` GEMM output and the ``[B, T, 4C]``
    GELU over it).

    Args:
        group: the `scheduler.fusion.KernelGroup` of the kernel.
        outputs: the buffers it stores that the wrapper allocates.
        dying: the inputs it reads from memory whose storage the wrapper may hand on
            (see the first condition) and that nothing reads after it.
        passes: buffer name -> the kernel's passes over memory that load or store it.
    """
    if not dying or not outputs:
        return {}
    placements = group.placements(group.group)
    if placements is None:
        return {}
    nodes = {n.name: n for n in group.nodes}
    donors: dict[str, BufferSpec] = {}
    for out in outputs:
        write = group.kernel_write(out.name, group.group, placements)
        allowed = _ancestors_in_group(nodes, out.name) | {out.name}
        for donor in dying:
            if donor in donors.values() or not donor.same_storage(out):
                continue
            if len(passes.get(donor.name, frozenset()) | passes.get(out.name, frozenset())) != 1:
                continue
            readers = {name for name, n in nodes.items() if donor.name in n.read_names()}
            reads = group.kernel_reads(donor.name, group.group, placements)
            if readers <= allowed and len(reads) == 1 and known_equal(next(iter(reads)), write):
                donors[out.name] = donor
                break
    return donors


def _ancestors_in_group(nodes: dict, name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        for dep in nodes[todo.pop()].read_names() & nodes.keys():
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


_ALLOCATING_EXTERNS = frozenset({
    "aten::convolution", "aten::_convolution", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::_int_mm", "aten::_scaled_mm", "aten::_to_copy", "aten::clone", "aten::_cdist_forward",
})


def returns_new_tensor(op) -> bool:
    """Whether an extern op's result is always a tensor it allocated, so that a kernel may
    write over it once it is dead (`inplace_donors`).

    A schema without an alias annotation is not enough: ``aten.dequantize.self`` returns
    a float input itself, ``_c10d_functional.wait_tensor`` always returns its input. So
    this is a list of the ops whose outputs are worth taking (a convolution's or a
    GEMM's output read by its epilogue, a cast's), each checked to allocate its result.
    """
    schema = getattr(op, "_schema", None)
    return (schema is not None and schema.name in _ALLOCATING_EXTERNS
            and all(ret.alias_info is None for ret in schema.returns))  # not an out= overload
