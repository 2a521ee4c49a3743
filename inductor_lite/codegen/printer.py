"""Printing sympy index/size expressions as Python (wrapper) or DSL (kernel) source.

``FloorDiv(a, b)`` prints as ``(a // b)``, ``ModularIndexing(a, b, c)`` as
``((a // b) % c)``: floor semantics in Python. The DSL divides as C does (truncating,
as Triton and PTX do), which agrees only on non-negative operands, so in kernels a
dividend that sympy cannot prove non-negative (``(-x0) // 2``: torch's ``FloorDiv``
takes multiples of the divisor out of ``(4 - x0) // 2`` by itself) gets the floor
forms ``((a % b) + b) % b`` and ``(a - that) // b`` (divisors are positive).
Integer powers become products (the DSL has no ``**`` on blocks); ``Min``/``Max``
print as ``min``/``max`` in Python and ``dl.minimum``/``dl.maximum`` in kernels.
"""

from __future__ import annotations

import sympy
from sympy.printing.precedence import PRECEDENCE
from sympy.printing.str import StrPrinter
from torch.utils._sympy.functions import FloorDiv


class PythonPrinter(StrPrinter):
    """sympy -> Python source for integer size expressions.

    Raises (from `doprint`):
        NotImplementedError: an expression kind with no integer meaning here
            (rationals, floats, unknown functions).
    """

    printmethod = "_inductor_lite_str"  # ignore torch's own _sympystr methods

    def _print_Integer(self, expr) -> str:
        return str(int(expr))

    def _print_Symbol(self, expr) -> str:
        return expr.name

    def _print_FloorDiv(self, expr) -> str:
        a, b = expr.args
        return f"({self._paren(a)} // {self._paren(b)})"

    _print_CleanDiv = _print_FloorDiv

    def _print_ModularIndexing(self, expr) -> str:
        x, div, mod = expr.args
        inner = self._paren(x) if div == 1 else f"({self._paren(x)} // {self._paren(div)})"
        return f"({inner} % {self._paren(mod)})"

    def _print_PythonMod(self, expr) -> str:
        a, b = expr.args
        return f"({self._paren(a)} % {self._paren(b)})"

    _print_Mod = _print_PythonMod

    def _print_Pow(self, expr, rational=False) -> str:
        base, exp = expr.args
        if exp.is_Integer and int(exp) > 0:
            return "(" + " * ".join([self._paren(base)] * int(exp)) + ")"
        raise NotImplementedError(f"cannot print {expr} as an integer expression")

    def _print_Mul(self, expr) -> str:
        if sympy.fraction(expr)[1] != 1:
            raise NotImplementedError(f"cannot print the fraction {expr} as an integer expression")
        return super()._print_Mul(expr)

    def _print_Rational(self, expr) -> str:
        raise NotImplementedError(f"cannot print the fraction {expr} as an integer expression")

    def _print_Float(self, expr) -> str:
        raise NotImplementedError(f"cannot print the float {expr} as an integer expression")

    def _print_Min(self, expr) -> str:
        return self._nary("min", expr.args)

    def _print_Max(self, expr) -> str:
        return self._nary("max", expr.args)

    def _print_Function(self, expr) -> str:
        raise NotImplementedError(f"cannot print {type(expr).__name__} ({expr}) in generated code")

    # Sizes computed through floats (``interpolate(scale_factor=1.7)`` under dynamic
    # shapes gives ``TruncToInt(1.7*ToFloat(s0))``): torch's float/int conversion
    # functions (``torch.utils._sympy.functions``), in the wrapper only, where Python
    # evaluates them with the same double-precision floats as the shape environment.

    def _print_TruncToInt(self, expr) -> str:
        return f"int({self._float(expr.args[0])})"

    def _print_FloorToInt(self, expr) -> str:
        return f"int({self._float(expr.args[0])} // 1)"

    def _print_CeilToInt(self, expr) -> str:
        return f"-int(-({self._float(expr.args[0])}) // 1)"

    def _print_RoundToInt(self, expr) -> str:
        return f"round({self._float(expr.args[0])})"

    def _float(self, expr) -> str:
        """``expr`` as a Python float expression (floats and true division allowed)."""
        return _FloatPrinter().doprint(expr)


    def _nary(self, fn: str, args) -> str:
        text = self._print(args[0])
        for a in args[1:]:
            text = f"{fn}({text}, {self._print(a)})"
        return text

    def _paren(self, expr) -> str:
        return self.parenthesize(expr, PRECEDENCE["Atom"] - 1)


class _FloatPrinter(StrPrinter):
    """A float-valued expression: the argument of a `PythonPrinter` float-to-int
    conversion, or a float argument of an extern call (`fexpr`)."""

    printmethod = "_inductor_lite_str"

    def _print_Symbol(self, expr) -> str:
        return expr.name

    def _print_Integer(self, expr) -> str:
        return str(int(expr))

    def _print_Float(self, expr) -> str:
        return repr(float(expr))

    def _print_Rational(self, expr) -> str:
        return f"({int(expr.p)} / {int(expr.q)})"

    def _print_ToFloat(self, expr) -> str:
        return f"float({self._print(expr.args[0])})"

    def _print_FloatTrueDiv(self, expr) -> str:
        a, b = expr.args
        return f"({self._print(a)} / {self._print(b)})"

    _print_IntTrueDiv = _print_FloatTrueDiv

    def _print_FloatPow(self, expr) -> str:
        a, b = expr.args
        return f"({self._print(a)} ** {self._print(b)})"

    def _print_OpaqueUnaryFn_sqrt(self, expr) -> str:
        return f"math.sqrt({self._print(expr.args[0])})"

    def _print_Function(self, expr) -> str:
        raise NotImplementedError(f"cannot print {type(expr).__name__} ({expr}) in generated code")


class KernelPrinter(PythonPrinter):
    """sympy -> DSL source: like Python, with ``dl.minimum``/``dl.maximum``, and floor
    division and modulo spelled out where a dividend may be negative."""

    def _print_FloorDiv(self, expr) -> str:
        a, b = expr.args
        if a.is_nonnegative:
            return super()._print_FloorDiv(expr)
        a, b = self._paren(a), self._paren(b)
        return f"(({a} - {self._floor_mod(a, b)}) // {b})"

    _print_CleanDiv = _print_FloorDiv

    def _print_ModularIndexing(self, expr) -> str:
        x, div, mod = expr.args
        if x.is_nonnegative:
            return super()._print_ModularIndexing(expr)
        inner = self._paren(x) if div == 1 else f"({self.doprint(FloorDiv(x, div))})"
        return self._floor_mod(inner, self._paren(mod))

    def _print_PythonMod(self, expr) -> str:
        a, b = expr.args
        if a.is_nonnegative:
            return super()._print_PythonMod(expr)
        return self._floor_mod(self._paren(a), self._paren(b))

    _print_Mod = _print_PythonMod

    @staticmethod
    def _floor_mod(a: str, b: str) -> str:
        return f"((({a} % {b}) + {b}) % {b})"

    def _print_Min(self, expr) -> str:
        return self._nary("dl.minimum", expr.args)

    def _print_Max(self, expr) -> str:
        return self._nary("dl.maximum", expr.args)


_python = PythonPrinter()
_kernel = KernelPrinter()


def pexpr(expr) -> str:
    """Python source of an integer sympy expression (or int)."""
    return _python.doprint(sympy.sympify(expr))


def fexpr(expr) -> str:
    """Python source of a float-valued sympy expression (``1.5*s0``: a float computed
    from sizes, passed to an extern call)."""
    return _FloatPrinter().doprint(sympy.sympify(expr))


def kexpr(expr) -> str:
    """DSL source of an integer sympy expression (or int)."""
    return _kernel.doprint(sympy.sympify(expr))

