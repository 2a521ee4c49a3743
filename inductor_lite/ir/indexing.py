"""Sympy index arithmetic shared by lowering, scheduling and codegen.

Index expressions are integer sympy expressions over loop variables (symbols made by
`index_var`, always non-negative) and size symbols (from torch's ShapeEnv, always
positive). Integer division and modulo are torch's `FloorDiv` and
`ModularIndexing(x, d, m) == (x // d) % m`, the same functions TorchInductor uses, so
sizes coming from torch's symbolic shapes mix with ours.

`simplify_index` canonicalises an expression given the ranges of its loop variables.
The scheduler compares canonical forms to decide whether two nodes touch the same
element, so two equal expressions must simplify to the same form in the common cases
(row-major flatten / unflatten of contiguous dimensions). The rewrite rules follow
TorchInductor's `SizeVarAllocator.simplify_with_ranges` and `join_dimensions`.
"""

from __future__ import annotations

import functools
from typing import Callable, Mapping, Optional, Sequence

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

Expr = sympy.Expr


def index_var(name: str) -> sympy.Symbol:
    """A loop variable: an integer symbol known to be >= 0."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def as_expr(value) -> Expr:
    """Turn an int, a sympy expression or a torch SymInt into a sympy expression.

    Raises:
        TypeError: any other type (e.g. a float or a tensor).
    """
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, bool):
        raise TypeError(f"expected an integer size, got bool {value!r}")
    if isinstance(value, int):
        return sympy.Integer(value)
    node = getattr(value, "node", None)
    if node is not None and hasattr(node, "expr"):
        return sympy.sympify(node.expr)
    raise TypeError(f"expected an integer size (int, SymInt or sympy.Expr), got {type(value).__name__}")


def product(values: Sequence) -> Expr:
    result: Expr = sympy.Integer(1)
    for v in values:
        result = result * as_expr(v)
    return result


def contiguous_strides(size: Sequence[Expr]) -> list[Expr]:
    """Row-major strides of ``size``: the last dimension has stride 1."""
    strides: list[Expr] = []
    running: Expr = sympy.Integer(1)
    for s in reversed(size):
        strides.append(running)
        running = running * s
    return list(reversed(strides))


def is_power_of_2(n: Expr) -> bool:
    """Whether ``n`` is a number that is a positive power of two (a symbol is not)."""
    n = sympy.sympify(n)
    return n.is_number and int(n) > 0 and int(n) & (int(n) - 1) == 0


def storage_length(size: Sequence[Expr], stride: Sequence[Expr]) -> Expr:
    """Elements a strided layout spans from its first element to its last, inclusive
    (TorchInductor's ``compute_required_storage_length``); 0 without elements."""
    if any(sympy.sympify(s) == 0 for s in size):
        return sympy.Integer(0)
    return sympy.expand(1 + sum((s - 1) * st for s, st in zip(size, stride)))


def shape_env_values() -> dict:
    """Size symbol -> its example value in the shape environment being compiled for
    (empty outside a compile)."""
    shape_env = getattr(torch._guards.detect_fake_mode(), "shape_env", None)
    # torch 2.13 renamed ShapeEnv.var_to_val (2.11) to backed_var_to_val
    return dict(getattr(shape_env, "backed_var_to_val" if hasattr(shape_env, "backed_var_to_val") else "var_to_val",
                        {}))


def shape_env_size_hint() -> Callable[[Expr], int]:
    """An int for a size expression, for memory estimates: size symbols at the example
    values of the shape environment being compiled for (0 for a size with no known
    value, or outside a compile)."""
    values = shape_env_values()

    def hint(expr: Expr) -> int:
        expr = sympy.sympify(expr).xreplace(values)
        return int(expr) if expr.is_number else 0

    return hint


def known_leq(a: Expr, b: Expr) -> bool:
    """True when ``a <= b`` is provable (size symbols are positive integers)."""
    diff = sympy.expand(as_expr(b) - as_expr(a))
    if diff.is_number:
        return bool(diff >= 0)
    return bool(diff.is_nonnegative)


def known_equal(a, b) -> bool:
    """True when ``a == b`` is provable symbolically."""
    return sympy.expand(as_expr(a) - as_expr(b)) == 0


def flat_to_vars(flat: sympy.Symbol, ranges: Sequence[Expr]) -> list[Expr]:
    """Express each row-major loop variable over ``ranges`` in terms of the flat index.

    ``ranges=[A, B, C]`` gives ``[flat // (B*C), (flat // C) % B, flat % C]``.
    When a range is 0 there is no element to address, so every variable is 0 (dividing
    by the zero strides would raise).
    """
    if any(as_expr(size) == 0 for size in ranges):
        return [sympy.Integer(0)] * len(ranges)
    out: list[Expr] = []
    strides = contiguous_strides(ranges)
    for i, (size, stride) in enumerate(zip(ranges, strides)):
        if size == 1:
            out.append(sympy.Integer(0))
        elif i == 0:
            out.append(flat if stride == 1 else FloorDiv(flat, stride))
        else:
            out.append(ModularIndexing(flat, stride, size))
    return out


def vars_to_flat(index: Sequence[Expr], ranges: Sequence[Expr]) -> Expr:
    """The row-major flat position of ``index`` within ``ranges``."""
    return sympy.Add(*[i * s for i, s in zip(index, contiguous_strides(ranges))])


def max_value(expr: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Optional[Expr]:
    """The largest value of ``expr`` over ``var -> [0, range)``, when provably reached by
    a sum/product of non-negative parts; None otherwise (e.g. a negative term).

    Size symbols (positive) count as their own maximum, so the result may be symbolic.
    """
    if expr.is_number:
        return expr if expr >= 0 else None
    if isinstance(expr, sympy.Symbol):
        if expr in var_ranges:
            return var_ranges[expr] - 1
        return expr if expr.is_nonnegative else None
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [max_value(a, var_ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        return sympy.Add(*parts) if isinstance(expr, sympy.Add) else sympy.Mul(*parts)
    if isinstance(expr, FloorDiv):
        top = max_value(expr.args[0], var_ranges)
        return None if top is None or not known_leq(1, expr.args[1]) else FloorDiv(top, expr.args[1])
    if isinstance(expr, ModularIndexing):
        mod = expr.args[2]
        return mod - 1 if known_leq(1, mod) and max_value(expr.args[0], var_ranges) is not None else None
    return None


def abs_bound(expr: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Optional[Expr]:
    """An upper bound of ``|e|`` for ``expr`` and every subexpression ``e`` of it, or None.

    Used to decide whether index arithmetic fits int32 (masked-off lanes may compute
    negative offsets, so the magnitude matters, not just the maximum).
    """
    if expr.is_number:
        return abs(expr)
    if isinstance(expr, sympy.Symbol):
        if expr in var_ranges:
            return var_ranges[expr] - 1
        return expr if expr.is_nonnegative else None
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [abs_bound(a, var_ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        return sympy.Add(*parts) if isinstance(expr, sympy.Add) else sympy.Mul(*parts)
    if isinstance(expr, FloorDiv):
        return abs_bound(expr.args[0], var_ranges) if known_leq(1, expr.args[1]) else None
    if isinstance(expr, ModularIndexing):
        base = abs_bound(expr.args[0], var_ranges)
        return expr.args[2] if base is not None and known_leq(1, expr.args[2]) else None
    if isinstance(expr, (sympy.Min, sympy.Max)):  # at most the largest of its arguments' bounds
        parts = [abs_bound(a, var_ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        return max(parts) if all(p.is_number for p in parts) else sympy.Add(*parts)
    return None


def value_range(expr: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Optional[tuple[int, int]]:
    """``(lowest, highest)`` integer values of ``expr`` over ``var -> [0, range)``, for
    an expression of numbers, loop variables of static range, sums, products by
    numbers, FloorDiv and ModularIndexing by positive numbers, Min and Max; None
    otherwise (a size symbol, a product of variables)."""
    if expr.is_Integer:
        return int(expr), int(expr)
    if isinstance(expr, sympy.Symbol):
        top = var_ranges.get(expr)
        return (0, int(top) - 1) if top is not None and as_expr(top).is_Integer and top >= 1 else None
    if isinstance(expr, sympy.Add):
        parts = [value_range(a, var_ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if isinstance(expr, sympy.Mul):
        coefficient, rest = expr.as_coeff_Mul()
        inner = value_range(rest, var_ranges) if coefficient.is_Integer and rest != expr else None
        if inner is None:
            return None
        ends = (int(coefficient) * inner[0], int(coefficient) * inner[1])
        return min(ends), max(ends)
    if isinstance(expr, (FloorDiv, ModularIndexing)) and all(a.is_Integer and a >= 1 for a in expr.args[1:]):
        base = value_range(expr.args[0], var_ranges)
        if base is None:
            return None
        div = int(expr.args[1])
        if isinstance(expr, FloorDiv):
            return base[0] // div, base[1] // div
        mod = int(expr.args[2])
        low, high = base[0] // div, base[1] // div
        if high - low < mod and low % mod <= high % mod:  # the quotients do not wrap around
            return low % mod, high % mod
        return 0, mod - 1
    if isinstance(expr, (sympy.Min, sympy.Max)):
        parts = [value_range(a, var_ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        pick = min if isinstance(expr, sympy.Min) else max
        return pick(p[0] for p in parts), pick(p[1] for p in parts)
    return None


def _simplify_min_max(expr: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Expr:
    """``expr`` with each ``Min``/``Max`` whose result one argument always gives,
    over the ranges, replaced by that argument: a pooling window's end
    ``Min(o + 2, 57)`` is ``o + 2`` for ``o < 56``, so the window size is a number."""
    def choose(e):
        dropped = set()
        for a in e.args:
            for b in e.args:
                if b == a or b in dropped:
                    continue
                span = value_range(sympy.expand(a - b), var_ranges)
                # Min: b <= a everywhere makes a redundant (Max: b >= a)
                if span is not None and (span[0] >= 0 if isinstance(e, sympy.Min) else span[1] <= 0):
                    dropped.add(a)
                    break
        return e.func(*[a for a in e.args if a not in dropped]) if dropped else e

    if not expr.has(sympy.Min, sympy.Max):
        return expr
    return expr.replace(lambda e: isinstance(e, (sympy.Min, sympy.Max)), choose)


def upper_bound(expr: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Optional[Expr]:
    """A proven exclusive upper bound of a non-negative ``expr`` (see `max_value`), or None."""
    top = max_value(sympy.expand(as_expr(expr)), var_ranges)
    return None if top is None else top + 1


def _divides(term: Expr, divisor: Expr) -> bool:
    quotient = sympy.cancel(term / divisor)
    return sympy.fraction(quotient)[1] == 1 and quotient.is_integer is not False


def _scaled_core(term: Expr) -> Optional[tuple[Expr, Expr]]:
    """Split ``term`` into (scale, core) when it is scale * FloorDiv/ModularIndexing(...)."""
    cores = [f for f in sympy.Mul.make_args(term) if isinstance(f, (FloorDiv, ModularIndexing))]
    if len(cores) != 1:
        return None
    return sympy.cancel(term / cores[0]), cores[0]


def _join_once(expr: Expr) -> Optional[Expr]:
    terms = sympy.Add.make_args(expr)
    split = [(t, _scaled_core(t)) for t in terms]
    for t1, s1 in split:
        if s1 is None or not isinstance(s1[1], ModularIndexing):
            continue
        scale, (base, div, mod) = s1[0], s1[1].args
        for t2, s2 in split:
            if s2 is None or t2 is t1 or not known_equal(s2[0], scale * mod):
                continue
            core = s2[1]
            if isinstance(core, ModularIndexing) and core.args[0] == base and known_equal(core.args[1], div * mod):
                return expr - t1 - t2 + scale * ModularIndexing(base, div, mod * core.args[2])
            if isinstance(core, FloorDiv) and core.args[0] == base and known_equal(core.args[1], div * mod):
                return expr - t1 - t2 + scale * FloorDiv(base, div)
    return None


def join_dimensions(expr: Expr) -> Expr:
    """Merge split row-major dimensions back together.

    ``ModularIndexing(x, 1, 32) + 32*ModularIndexing(x, 32, 4)`` becomes
    ``ModularIndexing(x, 1, 128)``; ``ModularIndexing(x, 1, 32) + 32*FloorDiv(x, 32)``
    becomes ``x``. (Rules from TorchInductor's ``join_dimensions``.)
    """
    while isinstance(expr, sympy.Add) and expr.has(ModularIndexing):
        joined = _join_once(expr)
        if joined is None:
            break
        expr = sympy.expand(joined)
    return expr


def _drop_small_part(base: Expr, div: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Optional[tuple[Expr, Expr]]:
    """``(b, div / k)`` when ``base`` is ``a + k*b`` with ``k`` (a number or a size
    expression) dividing ``div`` and ``0 <= a < k``, so that ``base // div`` is
    ``b // (div / k)`` (the digits below ``k`` cannot carry into the quotient); else
    None. A tile of a 2-D kernel whose x side is ``k`` long addresses
    ``xindex + k*yindex``: its divisions by multiples of ``k`` become divisions of
    ``yindex`` alone, once a tile row, and the access's contiguity along ``yindex``
    shows."""
    terms = sympy.Add.make_args(base)
    # each term's factor free of loop variables: 9 in 9*y, s0 in s0*y (a size symbol)
    coefficients = {t.as_independent(*var_ranges, as_Add=False)[0] for t in terms}
    candidates = [c for c in coefficients if c != 1 and (c.is_positive or (c.is_Integer and c > 1))]
    for k in sorted(candidates, key=lambda c: (not c.is_number, -c if c.is_number else 0, sympy.default_sort_key(c))):
        if not _divides(div, k):
            continue
        small_terms = [t for t in terms if not _divides(t, k)]
        if not small_terms or any(t.as_coeff_Mul()[0] < 0 for t in small_terms):
            continue  # a needs a proof of 0 <= a: terms of positive coefficients (bounded below)
        small = sympy.Add(*small_terms)
        bound = upper_bound(small, var_ranges)
        if bound is not None and known_leq(bound, k):
            big = sympy.Add(*[sympy.cancel(t / k) for t in terms if _divides(t, k)])
            return big, sympy.cancel(div / k)
    return None


def _simplify_divmod(expr: Expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Expr:
    def visit_floordiv(base, div):
        base = _simplify_divmod(sympy.expand(base), var_ranges)
        kept, pulled = [], []
        for term in sympy.Add.make_args(base):
            (pulled if _divides(term, div) else kept).append(term)
        rest = sympy.Add(*kept)
        out = sympy.Add(*[sympy.cancel(t / div) for t in pulled])
        bound = upper_bound(rest, var_ranges)
        if rest == 0 or (bound is not None and known_leq(bound, div)):
            return out
        dropped = _drop_small_part(rest, div, var_ranges)
        if dropped is not None:
            return out + visit_floordiv(*dropped)
        return out + FloorDiv(rest, div)

    def visit_modindex(base, div, mod):
        base = _simplify_divmod(sympy.expand(base), var_ranges)
        kept = [t for t in sympy.Add.make_args(base) if not _divides(t, div * mod)]
        rest = sympy.Add(*kept)
        if rest == 0 or mod == 1:
            return sympy.Integer(0)
        bound = upper_bound(rest, var_ranges)
        if bound is not None and known_leq(bound, div * mod):
            return visit_floordiv(rest, div)
        dropped = _drop_small_part(rest, div, var_ranges)
        if dropped is not None:
            return visit_modindex(dropped[0], dropped[1], mod)
        return ModularIndexing(rest, div, mod)

    if not expr.has(FloorDiv, ModularIndexing):
        return expr
    return expr.replace(
        lambda e: isinstance(e, (FloorDiv, ModularIndexing)),
        lambda e: visit_floordiv(*e.args) if isinstance(e, FloorDiv) else visit_modindex(*e.args),
    )


@functools.lru_cache(maxsize=4096)
def _simplify_cached(expr: Expr, ranges_key: tuple) -> Expr:
    var_ranges = dict(ranges_key)
    expr = sympy.expand(_simplify_min_max(expr, var_ranges))
    for _ in range(4):
        new = join_dimensions(sympy.expand(_simplify_divmod(expr, var_ranges)))
        if new == expr:
            break
        expr = new
    return expr


def simplify_index(expr, var_ranges: Mapping[sympy.Symbol, Expr]) -> Expr:
    """Canonical form of an index expression given ``var -> range`` (var in [0, range)).

    Pulls multiples of the divisor out of FloorDiv/ModularIndexing, drops divisions
    that the ranges make trivial, and joins split dimensions.
    """
    expr = as_expr(expr)
    key = tuple(sorted(((k, as_expr(v)) for k, v in var_ranges.items()), key=lambda kv: kv[0].name))
    return _simplify_cached(expr, key)
