"""Axis analysis: contiguity, divisibility and constancy of integer and pointer values.

Per value and per dim (after Triton's ``AxisInfo``):

- ``contiguity[d]``: along ``d`` the value is made of runs of this many consecutive
  integers (``v, v+1, ...``), each run starting at a block index that is a multiple of
  the run length;
- ``divisibility[d]``: the largest power of two dividing the first element of every
  such run (for pointers: of its byte address);
- ``constancy[d]``: along ``d`` the value is made of runs of this many equal elements,
  aligned the same way. Divisibility then holds for every element of the run.

Scalars are analysed as rank-1 values of one element. The facts come from
`ArgSpec.divisible_by_16` / ``equal_to_1``, constants, ``arange`` and the arithmetic
rules below; they decide how many elements one load/store instruction can move
(`vector_width`) and so whether accesses are 16 bytes wide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from . import ir

MAX_DIVISIBILITY = 1 << 30


def pow2_divisor(n: int) -> int:
    """Largest power of two dividing ``n`` (capped at `MAX_DIVISIBILITY`; 0 gives the cap)."""
    n = abs(int(n))
    if n == 0:
        return MAX_DIVISIBILITY
    return min(n & -n, MAX_DIVISIBILITY)


def _gcd(*xs: int) -> int:
    g = 0
    for x in xs:
        g = math.gcd(g, x)
    return g


@dataclass(frozen=True)
class AxisInfo:
    """Facts about one value; tuples have one entry per dim (one for a scalar).

    ``constant``: the value itself when every element is the same known Python number.
    """

    contiguity: tuple[int, ...]
    divisibility: tuple[int, ...]
    constancy: tuple[int, ...]
    constant: Optional[object] = None

    @property
    def rank(self) -> int:
        return len(self.contiguity)

    def run_divisibility(self, dim: int, run: int) -> int:
        """Divisibility of run starts when runs along ``dim`` are cut to length ``run``."""
        if run >= self.contiguity[dim]:
            return self.divisibility[dim]
        return _gcd(self.divisibility[dim], pow2_divisor(run))


def _shape(v: ir.Value) -> tuple[int, ...]:
    return v.type.shape or (1,)


def unknown(shape: tuple[int, ...]) -> AxisInfo:
    r = len(shape) or 1
    return AxisInfo((1,) * r, (1,) * r, (1,) * r)


def _constant_info(value, shape: tuple[int, ...]) -> AxisInfo:
    shape = shape or (1,)
    r = len(shape)
    is_int = isinstance(value, (int, bool))
    div = pow2_divisor(int(value)) if is_int else 1
    return AxisInfo((1,) * r, (div,) * r, tuple(shape), value if is_int else None)


def vector_width(ptr: AxisInfo, elem_bytes: int, dim: int, mask: AxisInfo | None = None) -> int:
    """Elements one access may move along ``dim``: at most 16 bytes, within a run of
    contiguous addresses, aligned to its own size, and (when masked) under one mask value.
    """
    width = max(1, 16 // elem_bytes)
    width = min(width, ptr.contiguity[dim])
    align = ptr.divisibility[dim] // elem_bytes if ptr.divisibility[dim] >= elem_bytes else 1
    width = min(width, max(1, align))
    if mask is not None:
        width = min(width, mask.constancy[dim])
    return 1 << (max(1, width).bit_length() - 1)


class _Analysis:
    def __init__(self, fn: ir.Function):
        self.info: dict[int, AxisInfo] = {}
        for spec, value in zip(fn.args, fn.arg_values):
            if spec.equal_to_1:
                self.info[value.id] = _constant_info(1, ())
            elif spec.divisible_by_16:
                self.info[value.id] = AxisInfo((1,), (16,), (1,))
            else:
                self.info[value.id] = unknown(())
        self.block(fn.body)

    def get(self, v: ir.Value) -> AxisInfo:
        return self.info.get(v.id) or unknown(v.type.shape)

    def block(self, block: ir.Block) -> None:
        for op in block.ops:
            handler = getattr(self, "op_" + op.opcode, None)
            if op.opcode == "for":
                self.op_for(op)
                continue
            infos = handler(op) if handler else None
            if infos is None:
                infos = [unknown(r.type.shape) for r in op.results]
            elif isinstance(infos, AxisInfo):
                infos = [infos]
            for r, i in zip(op.results, infos):
                self.info[r.id] = i

    def op_constant(self, op):
        return _constant_info(op.attrs["value"], op.result.type.shape)

    def op_arange(self, op):
        start, end = op.attrs["start"], op.attrs["end"]
        return AxisInfo((end - start,), (pow2_divisor(start),), (1,))

    def op_splat(self, op):
        x = self.get(op.operands[0])
        shape = op.result.type.shape
        return AxisInfo((1,) * len(shape), (x.divisibility[0],) * len(shape), tuple(shape), x.constant)

    def op_broadcast(self, op):
        x = self.get(op.operands[0])
        src, dst = op.operands[0].type.shape, op.result.type.shape
        contig, div, const = list(x.contiguity), list(x.divisibility), list(x.constancy)
        for d, (a, b) in enumerate(zip(src, dst)):
            if a != b:
                contig[d], const[d] = 1, b
        return AxisInfo(tuple(contig), tuple(div), tuple(const), x.constant)

    def op_expand_dims(self, op):
        x = self.get(op.operands[0])
        axis = op.attrs["axis"]
        if op.operands[0].type.is_scalar:
            return AxisInfo((1,), x.divisibility, (1,), x.constant)
        # Along a new unit dim every element is its own run, so only a dim where every
        # element already is one (contiguity 1) gives a divisibility for all of them.
        new_div = max([x.divisibility[d] for d in range(x.rank) if x.contiguity[d] == 1], default=1)
        ins = lambda t, v: t[:axis] + (v,) + t[axis:]  # noqa: E731
        return AxisInfo(ins(x.contiguity, 1), ins(x.divisibility, new_div), ins(x.constancy, 1), x.constant)

    def op_binary(self, op):
        a, b = (self.get(v) for v in op.operands)
        kind = op.attrs["op"]
        shape = _shape(op.result)
        elem = op.result.type.element
        scale = elem.element.itemsize if isinstance(elem, ir.PointerType) else 1
        ptr_rhs = isinstance(op.operands[1].type.element, ir.PointerType)
        if ptr_rhs:  # int + ptr: treat as ptr + int
            a, b = b, a
        const = tuple(_gcd(x, y) for x, y in zip(a.constancy, b.constancy))
        constant = _fold(kind, a.constant, b.constant) if scale == 1 else None
        r = len(shape)
        if kind in ("add", "sub"):
            if kind == "add":
                contig = tuple(max(_gcd(a.contiguity[d], b.constancy[d]), _gcd(a.constancy[d], b.contiguity[d]))
                               for d in range(r))
            else:
                contig = tuple(_gcd(a.contiguity[d], b.constancy[d]) for d in range(r))
            div = tuple(_gcd(a.run_divisibility(d, contig[d]), min(MAX_DIVISIBILITY, b.run_divisibility(d, contig[d]) * scale))
                        for d in range(r))
            return AxisInfo(contig, div, const, constant)
        if kind == "mul":
            contig = tuple(a.contiguity[d] if b.constant == 1 else b.contiguity[d] if a.constant == 1 else 1
                           for d in range(r))
            div = tuple(min(MAX_DIVISIBILITY, a.run_divisibility(d, contig[d]) * b.run_divisibility(d, contig[d]))
                        for d in range(r))
            return AxisInfo(contig, div, const, constant)
        if kind in ("floordiv", "mod") and isinstance(b.constant, int) and b.constant > 0 and elem.is_integer:
            c = b.constant
            cdiv = pow2_divisor(c)
            if kind == "floordiv":
                if c == 1:
                    return a
                const = tuple(max(const[d], _gcd(a.contiguity[d], cdiv, a.divisibility[d])) for d in range(r))
                div = tuple(a.divisibility[d] // c if a.contiguity[d] == 1 and a.divisibility[d] % c == 0 else 1
                            for d in range(r))
                return AxisInfo((1,) * r, div, const, constant)
            contig = tuple(_gcd(a.contiguity[d], cdiv, a.divisibility[d]) for d in range(r))
            div = tuple(_gcd(a.run_divisibility(d, contig[d]), cdiv) for d in range(r))
            return AxisInfo(contig, div, const, constant)
        if kind == "shl" and isinstance(b.constant, int) and 0 <= b.constant < 31:
            div = tuple(min(MAX_DIVISIBILITY, a.run_divisibility(d, 1) << b.constant) for d in range(r))
            return AxisInfo((1,) * r, div, const, constant)
        return AxisInfo((1,) * r, (1,) * r, const, constant)

    def op_compare(self, op):
        a, b = (self.get(v) for v in op.operands)
        pred = op.attrs["pred"]
        r = a.rank
        const = [_gcd(x, y) for x, y in zip(a.constancy, b.constancy)]
        # `x < n` / `x >= n` with x contiguous and n constant on aligned runs is uniform
        # over runs no longer than what divides both (same for `n > x`, `n <= x`).
        if pred in ("lt", "ge"):
            run, bound = a, b
        elif pred in ("gt", "le"):
            run, bound = b, a
        else:
            run = None
        if run is not None:
            for d in range(r):
                if run.contiguity[d] > 1:
                    const[d] = max(const[d], _gcd(run.contiguity[d], run.divisibility[d],
                                                  bound.constancy[d], bound.divisibility[d]))
        return AxisInfo((1,) * r, (1,) * r, tuple(const))

    def op_select(self, op):
        c, a, b = (self.get(v) for v in op.operands)
        r = a.rank
        contig = tuple(_gcd(a.contiguity[d], b.contiguity[d], c.constancy[d]) for d in range(r))
        div = tuple(_gcd(a.run_divisibility(d, contig[d]), b.run_divisibility(d, contig[d])) for d in range(r))
        const = tuple(_gcd(c.constancy[d], a.constancy[d], b.constancy[d]) for d in range(r))
        return AxisInfo(contig, div, const)

    def op_cast(self, op):
        x = self.get(op.operands[0])
        src, dst = op.operands[0].type.element, op.result.type.element
        # Widening keeps every value (and so every fact) when it cannot wrap.
        if src.kind == dst.kind == "int" and dst.bits >= src.bits or src.kind == "uint" and dst.bits > src.bits:
            return x
        return AxisInfo((1,) * x.rank, (1,) * x.rank, x.constancy)

    def op_math(self, op):
        x = self.get(op.operands[0])
        const = x.constancy
        for v in op.operands[1:]:
            const = tuple(_gcd(p, q) for p, q in zip(const, self.get(v).constancy))
        return AxisInfo((1,) * x.rank, (1,) * x.rank, const)

    def op_bitcast(self, op):
        x = self.get(op.operands[0])
        return AxisInfo((1,) * x.rank, (1,) * x.rank, x.constancy)

    def op_for(self, op):
        lb, _, step = (self.get(v) for v in op.operands[:3])
        self.info[op.attrs["iv"].id] = AxisInfo((1,), (_gcd(lb.divisibility[0], step.divisibility[0]),), (1,))
        for c in op.attrs["carried"]:
            self.info[c.id] = unknown(c.type.shape)
        self.block(op.attrs["body"])
        for r in op.results:
            self.info[r.id] = unknown(r.type.shape)


def _fold(kind: str, a, b):
    if not (isinstance(a, int) and isinstance(b, int)):
        return None
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    return None


def analyze(fn: ir.Function) -> dict[int, AxisInfo]:
    """`AxisInfo` of every value of ``fn`` (loop bodies included), keyed by ``Value.id``."""
    return _Analysis(fn).info
