"""The ``ops`` vocabulary that ``inner_fn``s compute with, and the handler switch.

An ``inner_fn(index)`` computes one element by calling ``ops.<name>(...)``; what those
calls do depends on the handler installed with `set_ops_handler`: the scheduler's
handler records reads, the kernel codegen's handler emits DSL text, and a reference
evaluator can compute values. This is TorchInductor's ``V.ops`` pattern.

Values are whatever the handler returns; ``inner_fn``s never inspect them. Every
value has a torch dtype known to the handler; lowerings insert `to_dtype` so both
operands of a binary op already have the same dtype (the handlers never promote).

Vocabulary (all handlers implement these):

- ``load(name, index)``: element ``index`` (a sympy expression, in elements) of
  buffer ``name``.
- ``constant(value, dtype)``; ``index_expr(expr, dtype)``: a sympy expression over
  loop variables and size symbols, as a value.
- ``indirect_indexing(x, size, check=True, wrap_neg=True)``: the integer value ``x``
  (an index into a dimension of ``size`` read from a tensor: gather, embedding,
  advanced indexing) as a sympy symbol that ``load`` indices may use. With
  ``wrap_neg``, negative values count from the end (advanced indexing; gather and
  embedding do not wrap). With ``check``, a load through an index left outside
  ``[0, size)`` never touches memory: its lanes read 0. Lowerings pass
  ``check=False`` only for values they computed in range themselves.
- ``check_bounds(index)``: every bounds-checked ``indirect_indexing`` symbol in
  ``index`` must be inside its dimension: where one is not, the kernel stops with an
  error, as eager raises (for an index compared, not loaded through).
- ``to_dtype(x, dtype)`` (a kernel may keep an fp16/bf16 result in fp32 for the
  ops that read it within the kernel, as TorchInductor does); ``round_to_dtype(x,
  dtype)``: ``x`` rounded to ``dtype`` and back to its own dtype, always (a step that
  eager computes in a 16-bit type); ``where(cond, a, b)``;
  ``masked(mask, body, other)``: ``body()`` where ``mask`` holds (loads inside it
  are masked), ``other`` elsewhere.
- unary `UNARY_OPS` (``round`` is half-to-even, as torch.round; ``signbit`` gives
  bool), binary `BINARY_OPS`, comparisons `COMPARE_OPS` (result bool). The math
  ops (``acos`` ... ``i1``, ``hypot``, ``copysign``, ``nextafter``) take floats
  and are torch's functions of the same name (``i1``, ``ndtri`` and ``bessel_*``
  are in ``torch.special``);
  shifts take integers and give 0 (left) or the sign fill (right) for a shift
  count outside ``[0, bits)``, as torch.
  ``floordiv``/``remainder`` follow Python (floor) semantics, ``truncdiv``/``fmod``
  follow C (truncation) semantics, as in torch.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any, Callable, Iterator

import sympy

UNARY_OPS = (
    "neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt",
    "sigmoid", "tanh", "erf", "sin", "cos", "tan", "floor", "ceil", "trunc", "round",
    "isnan", "isinf", "logical_not", "bitwise_not",
    "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "erfcx", "erfinv", "ndtri",
    "lgamma", "i0", "i1", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "signbit",
)
BINARY_OPS = (
    "add", "sub", "mul", "truediv", "floordiv", "truncdiv", "remainder", "fmod",
    "maximum", "minimum", "pow", "atan2", "logical_and", "logical_or", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift",
    "hypot", "copysign", "nextafter",
)
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
SPECIAL_OPS = ("load", "constant", "index_expr", "indirect_indexing", "check_bounds", "to_dtype", "round_to_dtype",
               "where", "masked")
ALL_OPS = SPECIAL_OPS + UNARY_OPS + BINARY_OPS + COMPARE_OPS


class OpsHandler:
    """Base class of ops handlers: every name in `ALL_OPS` must be overridden.

    Subclasses that treat all ops alike may override `default` instead, which
    receives the op name and its arguments. `indirect_indexing` has a default: a
    fresh symbol, enough for handlers that only record accesses.
    """

    def default(self, name: str, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement ops.{name}")

    def indirect_indexing(self, x: Any, size: Any, check: bool = True, wrap_neg: bool = True) -> sympy.Symbol:
        return sympy.Symbol(f"indirect{next(_indirect_ids)}", integer=True)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in ALL_OPS:
            raise AttributeError(f"unknown ops.{name}; known ops: {', '.join(ALL_OPS)}")
        return lambda *args: self.default(name, *args)


_indirect_ids = itertools.count()
_state = threading.local()


def current_handler() -> OpsHandler:
    """The installed handler.

    Raises:
        RuntimeError: no handler is installed (an ``inner_fn`` was called outside
            `set_ops_handler`).
    """
    handler = getattr(_state, "handler", None)
    if handler is None:
        raise RuntimeError("ops.* called with no ops handler installed; wrap the call in set_ops_handler(...)")
    return handler


@contextlib.contextmanager
def set_ops_handler(handler: OpsHandler) -> Iterator[OpsHandler]:
    """Install ``handler`` for ``ops.*`` calls inside the ``with`` block (nestable)."""
    previous = getattr(_state, "handler", None)
    _state.handler = handler
    try:
        yield handler
    finally:
        _state.handler = previous


class _OpsProxy:
    """``ops.add(a, b)`` forwards to the current handler's ``add``."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in ALL_OPS:
            raise AttributeError(f"unknown ops.{name}; known ops: {', '.join(ALL_OPS)}")
        return getattr(current_handler(), name)


ops = _OpsProxy()
