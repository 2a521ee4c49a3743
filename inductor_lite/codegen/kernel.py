"""Kernel codegen: one fused `KernelGroup` -> the source of one DSL kernel.

The kernel is 1-D over the group's flat domain::

    @dl.kernel
    def poi_fused_add_gelu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: dl.constexpr):
        # FX nodes: add, gelu
        xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        x0 = xindex % 768
        tmp0 = dl.load(in_ptr0 + (xindex), mask=xmask)
        ...
        dl.store(out_ptr0 + (xindex), tmp7, mask=xmask)

Each node's ``inner_fn`` runs under `KernelCodegen`, an ``ops`` handler that emits
one ``tmpN = ...`` line per op (common subexpressions reuse their variable). Loads of
a buffer stored earlier in the same kernel reuse the stored value; buffers the
scheduler removed are never stored. Index expressions are simplified over
``xindex in [0, xnumel)`` and printed with ``//`` and ``%``; their
``FloorDiv``/``ModularIndexing`` parts of ``xindex`` get names (``x0``...). Index
math is int64 when any index or the domain may reach 2**31 (always for symbolic
sizes), int32 otherwise.

Values of fp16/bf16 are computed in fp32 (the lowering converts), so operands of one
op always have one dtype; Python number literals take their partner's dtype in the
DSL, and an op on literals alone materialises one with ``dl.full([], v, dtype)``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from typing import Any, Callable, Optional

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from ..config import config
from ..ir.indexing import Expr, abs_bound, flat_to_vars, simplify_index
from ..ir.nodes import Pointwise
from ..ir.ops import OpsHandler, set_ops_handler
from ..scheduler.dependencies import FLAT
from ..scheduler.fusion import KernelGroup
from .printer import kexpr

INT32_INDEX_LIMIT = 2 ** 31 - 2 ** 20
"""Index values up to this use int32 math; the margin covers a last block's lanes past xnumel."""

DSL_DTYPES = {
    torch.float16: "dl.float16", torch.bfloat16: "dl.bfloat16", torch.float32: "dl.float32",
    torch.float64: "dl.float64", torch.bool: "dl.int1", torch.int8: "dl.int8", torch.int16: "dl.int16",
    torch.int32: "dl.int32", torch.int64: "dl.int64", torch.uint8: "dl.uint8",
}


def dsl_dtype(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``'dl.float32'``.

    Raises:
        NotImplementedError: a dtype the DSL does not have (complex, float8...).
    """
    try:
        return DSL_DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"dtype {dtype} is not supported by the DSL") from None


def literal(value: Any, dtype: torch.dtype) -> str:
    """Python source of a constant of ``dtype`` (``float("inf")`` for infinities)."""
    if dtype == torch.bool:
        return repr(bool(value))
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    return str(int(value))


@dataclasses.dataclass(frozen=True)
class CSEVar:
    """A value in generated code: a variable name, or a literal (``is_literal``)."""

    text: str
    dtype: torch.dtype
    is_literal: bool = False
    value: Any = None

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass
class KernelSource:
    """A generated kernel and how the wrapper launches it.

    Attributes:
        name: kernel (Python function) name.
        source: the ``@dl.kernel`` function's text.
        call_args: runtime arguments in order: ``('buffer', name)`` for a tensor,
            ``('expr', sympy)`` for an integer the wrapper computes.
        numel: the flat domain size (sympy).
        xblock, num_warps: launch parameters.
    """

    name: str
    source: str
    call_args: list[tuple[str, Any]]
    numel: Expr
    xblock: int
    num_warps: int


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def choose_block(numel: Expr) -> tuple[int, int]:
    """(XBLOCK, num_warps): ``config.xblock`` shrunk to the next power of 2 >= numel for
    small static sizes; ``config.num_warps`` halved while a block has under 32 elements
    per warp (an idle warp is pure overhead)."""
    xblock = config.xblock
    if sympy.sympify(numel).is_number:
        xblock = min(xblock, _next_power_of_2(max(int(numel), 1)))
    num_warps = config.num_warps
    while num_warps > 1 and xblock < 32 * num_warps:
        num_warps //= 2
    return xblock, num_warps


def needs_int64(group: KernelGroup) -> bool:
    """Whether any index of the group (or its domain) may exceed int32."""
    limits = [group.numel]
    for node in group.nodes:
        rw = node.read_writes
        var_ranges = dict(zip(rw.writes[0].var_names, rw.writes[0].size))
        for expr in [d.index for d in rw.reads + rw.writes] + rw.index_exprs:
            bound = abs_bound(sympy.expand(expr), var_ranges)
            if bound is None:
                return True
            limits.append(bound)
    for limit in limits:
        limit = sympy.sympify(limit)
        if not limit.is_number or int(limit) > INT32_INDEX_LIMIT:
            return True
    return False


class KernelCodegen(OpsHandler):
    """Ops handler that writes the body of one kernel (see the module docstring)."""

    def __init__(self, numel: Expr, index_dtype: torch.dtype, buffer_dtypes: Callable[[str], torch.dtype]):
        self.numel = numel
        self.index_dtype = index_dtype
        self.buffer_dtypes = buffer_dtypes
        self.lines: list[str] = []
        self.index_lines: list[str] = []
        self.cse: dict[str, CSEVar] = {}
        self.index_names: dict[Expr, sympy.Symbol] = {}
        self.in_ptrs: dict[str, str] = {}
        self.out_ptrs: dict[str, str] = {}
        self.size_symbols: set[sympy.Symbol] = set()
        self.stored: dict[str, tuple[Expr, CSEVar]] = {}
        self.masks: list[str] = []
        self._tmp_ids = itertools.count()

    # ------------------------------------------------------------------ helpers

    def _emit(self, text: str, dtype: torch.dtype) -> CSEVar:
        var = self.cse.get(text)
        if var is None:
            var = CSEVar(f"tmp{next(self._tmp_ids)}", dtype)
            self.cse[text] = var
            self.lines.append(f"{var} = {text}")
        return var

    def _typed(self, x: CSEVar) -> CSEVar:
        """A literal materialised as a typed scalar (so an op on literals has a dtype)."""
        if not x.is_literal:
            return x
        return self._emit(f"dl.full([], {x.text}, {dsl_dtype(x.dtype)})", x.dtype)

    def _operands(self, *xs: CSEVar) -> list[CSEVar]:
        if all(x.is_literal for x in xs):
            return [self._typed(xs[0]), *xs[1:]]
        return list(xs)

    def _result_dtype(self, *xs: CSEVar) -> torch.dtype:
        for x in xs:
            if not x.is_literal:
                return x.dtype
        return xs[0].dtype

    def index_str(self, index: Expr) -> str:
        """DSL text of an index expression over ``xindex`` (simplified, parts named)."""
        expr = simplify_index(index, {FLAT: self.numel})
        parts = sorted((a for a in expr.atoms(FloorDiv, ModularIndexing) if a.has(FLAT)), key=sympy.default_sort_key)
        replacements = {a: self._index_name(a) for a in parts}
        expr = expr.xreplace(replacements)
        self.size_symbols |= {s for s in expr.free_symbols if s != FLAT and s not in self.index_names.values()}
        return kexpr(expr)

    def _index_name(self, atom: Expr) -> sympy.Symbol:
        name = self.index_names.get(atom)
        if name is None:
            name = sympy.Symbol(f"x{len(self.index_names)}", integer=True, nonnegative=True)
            self.index_names[atom] = name
            self.size_symbols |= {s for s in atom.free_symbols if s != FLAT}
            self.index_lines.append(f"{name} = {kexpr(atom)}")
        return name

    def _mask(self) -> str:
        return self.masks[-1] if self.masks else "xmask"

    # ------------------------------------------------------------------ memory

    def load(self, name: str, index: Expr) -> CSEVar:
        flat = simplify_index(index, {FLAT: self.numel})
        if name in self.stored:
            stored_index, value = self.stored[name]
            if stored_index != flat:
                raise AssertionError(f"fused kernel reads {name} at {flat} but computes it at {stored_index}")
            return value
        ptr = self.in_ptrs.setdefault(name, f"in_ptr{len(self.in_ptrs)}")
        text = f"dl.load({ptr} + ({self.index_str(index)}), mask={self._mask()})"
        return self._emit(text, self.buffer_dtypes(name))

    def store(self, name: str, index: Expr, value: CSEVar, keep: bool) -> None:
        """Record ``value`` as element ``index`` of ``name``; write it to memory if ``keep``."""
        flat = simplify_index(index, {FLAT: self.numel})
        self.stored[name] = (flat, value)
        if keep:
            ptr = self.out_ptrs.setdefault(name, f"out_ptr{len(self.out_ptrs)}")
            offset = self.index_str(index)
            if not flat.has(FLAT):
                # a store's pointer must be a block even when every lane writes one element
                offset = f"dl.full([XBLOCK], {offset}, {dsl_dtype(self.index_dtype)})"
            self.lines.append(f"dl.store({ptr} + ({offset}), {value}, mask=xmask)")

    # ------------------------------------------------------------------ values

    def constant(self, value: Any, dtype: torch.dtype) -> CSEVar:
        return CSEVar(literal(value, dtype), dtype, is_literal=True, value=value)

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> CSEVar:
        expr = sympy.sympify(expr)
        if expr.is_number:
            return self.constant(int(expr), dtype)
        text = f"({self.index_str(expr)})"
        if dtype == torch.int64 and self.index_dtype == torch.int32:
            # needs_int64 proved every index value fits int32: skip the widening
            return self._emit(text, torch.int32)
        return self._emit(f"{text}.to({dsl_dtype(dtype)})", dtype)

    def to_dtype(self, x: CSEVar, dtype: torch.dtype) -> CSEVar:
        if x.dtype == dtype:
            return x
        if x.is_literal:
            value = x.value
            if dtype == torch.bool:
                value = bool(value)
            elif not dtype.is_floating_point:
                value = int(value)
            return self._emit(f"dl.full([], {literal(value, dtype)}, {dsl_dtype(dtype)})", dtype)
        return self._emit(f"{x}.to({dsl_dtype(dtype)})", dtype)

    def where(self, cond: CSEVar, a: CSEVar, b: CSEVar) -> CSEVar:
        if cond.is_literal:
            return a if cond.value else b
        a, b = self._operands(a, b)
        return self._emit(f"dl.where({cond}, {a}, {b})", self._result_dtype(a, b))

    def masked(self, mask: CSEVar, body: Callable[[], CSEVar], other: Any) -> CSEVar:
        if mask.is_literal and mask.value:
            return body()
        combined = self._emit(f"{self._mask()} & {mask}", torch.bool)
        self.masks.append(str(combined))
        try:
            result = body()
        finally:
            self.masks.pop()
        return self.where(mask, result, self.constant(other, result.dtype))

    # ------------------------------------------------------------------ arithmetic

    def _binary(self, template: str, a: CSEVar, b: CSEVar, dtype: Optional[torch.dtype] = None) -> CSEVar:
        a, b = self._operands(a, b)
        return self._emit(template.format(a=a, b=b), dtype or self._result_dtype(a, b))

    def _unary(self, template: str, x: CSEVar, dtype: Optional[torch.dtype] = None) -> CSEVar:
        x = self._typed(x)
        return self._emit(template.format(x=x), dtype or x.dtype)

    def add(self, a, b):
        return self._binary("{a} + {b}", a, b)

    def sub(self, a, b):
        return self._binary("{a} - {b}", a, b)

    def mul(self, a, b):
        return self._binary("{a} * {b}", a, b)

    def truediv(self, a, b):
        return self._binary("{a} / {b}", a, b)

    def truncdiv(self, a, b):
        if self._result_dtype(a, b).is_floating_point:
            return self._binary("dl.trunc({a} / {b})", a, b)
        return self._binary("{a} // {b}", a, b)

    def fmod(self, a, b):
        if self._result_dtype(a, b).is_floating_point:
            return self._binary("dl.fmod({a}, {b})", a, b)
        return self._binary("{a} % {b}", a, b)

    def _needs_floor_fix(self, r: CSEVar, b: CSEVar) -> CSEVar:
        """True where a C remainder ``r`` of ``... / b`` differs in sign from ``b``."""
        zero = self.constant(0, r.dtype)
        if b.is_literal:
            return self.lt(r, zero) if b.value > 0 else self.gt(r, zero)
        nonzero = self.ne(r, self.constant(0, r.dtype))
        signs_differ = self.ne(self.lt(r, self.constant(0, r.dtype)), self.lt(b, self.constant(0, b.dtype)))
        return self.logical_and(nonzero, signs_differ)

    def floordiv(self, a, b):
        if self._result_dtype(a, b).is_floating_point:
            return self._binary("dl.floor({a} / {b})", a, b)
        q = self.truncdiv(a, b)
        fix = self._needs_floor_fix(self.fmod(a, b), b)
        return self.where(fix, self.sub(q, self.constant(1, q.dtype)), q)

    def remainder(self, a, b):
        r = self.fmod(a, b)
        return self.where(self._needs_floor_fix(r, b), self.add(r, b), r)

    def maximum(self, a, b):
        return self._binary("dl.maximum({a}, {b})", a, b)

    def minimum(self, a, b):
        return self._binary("dl.minimum({a}, {b})", a, b)

    def pow(self, a, b):
        return self._binary("dl.pow({a}, {b})", a, b)

    def atan2(self, a, b):
        return self._binary("dl.atan2({a}, {b})", a, b)

    def _logical(self, op: str, a, b):
        for x, y in ((a, b), (b, a)):
            if x.is_literal:
                if op == "&":
                    return y if x.value else self.constant(False, torch.bool)
                if op == "|":
                    return self.constant(True, torch.bool) if x.value else y
        return self._binary("{a} " + op + " {b}", a, b, torch.bool)

    def logical_and(self, a, b):
        return self._logical("&", a, b)

    def logical_or(self, a, b):
        return self._logical("|", a, b)

    def logical_xor(self, a, b):
        return self._binary("{a} ^ {b}", a, b, torch.bool)

    def bitwise_and(self, a, b):
        return self._binary("{a} & {b}", a, b)

    def bitwise_or(self, a, b):
        return self._binary("{a} | {b}", a, b)

    def bitwise_xor(self, a, b):
        return self._binary("{a} ^ {b}", a, b)

    def _compare(self, op: str, a, b):
        if a.is_literal and b.is_literal:
            return self.constant(_FOLD[op](a.value, b.value), torch.bool)
        return self._binary("{a} " + op + " {b}", a, b, torch.bool)

    def eq(self, a, b):
        return self._compare("==", a, b)

    def ne(self, a, b):
        return self._compare("!=", a, b)

    def lt(self, a, b):
        return self._compare("<", a, b)

    def le(self, a, b):
        return self._compare("<=", a, b)

    def gt(self, a, b):
        return self._compare(">", a, b)

    def ge(self, a, b):
        return self._compare(">=", a, b)

    def neg(self, x):
        return self._unary("-{x}", x)

    def logical_not(self, x):
        if x.is_literal:
            return self.constant(not x.value, torch.bool)
        return self._unary("~{x}", x, torch.bool)

    def bitwise_not(self, x):
        return self._unary("~{x}", x)

    def isnan(self, x):
        return self._unary("dl.isnan({x})", x, torch.bool)

    def isinf(self, x):
        return self._unary("dl.isinf({x})", x, torch.bool)

    def default(self, name: str, *args):
        if name in _MATH_FNS and len(args) == 1:
            return self._unary(f"dl.{name}({{x}})", args[0])
        return super().default(name, *args)


_FOLD = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_MATH_FNS = ("abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh",
             "erf", "sin", "cos", "tan", "floor", "ceil", "trunc", "round")


def kernel_name(group: KernelGroup, index: int) -> str:
    """``poi_fused_<sorted op names>_<index>`` (at most 6 names, as TorchInductor does)."""
    ops_used = sorted(set(group.origins().values()))
    return "_".join(["poi_fused", *ops_used[:6], str(index)])


def generate_kernel(group: KernelGroup, index: int, removed: set[str],
                    buffer_dtypes: Callable[[str], torch.dtype]) -> KernelSource:
    """Source of the kernel computing ``group``; ``removed`` buffers are not stored.

    Raises:
        NotImplementedError: a node that is not Pointwise, or a dtype the DSL lacks.
    """
    index_dtype = torch.int64 if needs_int64(group) else torch.int32
    cg = KernelCodegen(group.numel, index_dtype, buffer_dtypes)
    with set_ops_handler(cg):
        for node in group.nodes:
            buffer = node.node
            loops = buffer.data
            if not isinstance(loops, Pointwise):
                raise NotImplementedError(f"codegen of {type(loops).__name__} ({buffer.name})")
            loop_index = flat_to_vars(FLAT, loops.ranges)
            value = loops.inner_fn(loop_index)
            value = cg.to_dtype(value, buffer.layout.dtype)
            cg.store(buffer.name, buffer.store_index(loop_index), value, keep=buffer.name not in removed)

    name = kernel_name(group, index)
    symbols = sorted(cg.size_symbols, key=lambda s: s.name)
    params = [*cg.in_ptrs.values(), *cg.out_ptrs.values(), "xnumel", *(s.name for s in symbols)]
    pid = "dl.program_id(0).to(dl.int64)" if index_dtype == torch.int64 else "dl.program_id(0)"
    body = [
        f"# FX nodes: {', '.join(group.origins())}",
        f"xindex = {pid} * XBLOCK + dl.arange(0, XBLOCK)",
        "xmask = xindex < xnumel",
        *cg.index_lines,
        *cg.lines,
    ]
    source = "\n".join(
        ["@dl.kernel", f"def {name}({', '.join(params)}, XBLOCK: dl.constexpr):"] + [f"    {line}" for line in body]
    ) + "\n"
    call_args: list[tuple[str, Any]] = [("buffer", n) for n in cg.in_ptrs] + [("buffer", n) for n in cg.out_ptrs]
    call_args += [("expr", group.numel)] + [("expr", s) for s in symbols]
    xblock, num_warps = choose_block(group.numel)
    return KernelSource(name, source, call_args, group.numel, xblock, num_warps)
