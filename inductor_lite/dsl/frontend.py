"""Frontend: a ``@dl.kernel`` function's Python AST -> typed block IR (`ir.Function`).

The kernel body is walked once per specialisation. Names hold either *runtime values*
(`semantic.Tensor`: kernel arguments and everything computed from them) or
*compile-time values* (constexprs, literals, dtypes, modules, functions). Operations
on compile-time values run in Python (Python semantics), so constexpr arithmetic,
``float("-inf")`` or ``math.log2(BLOCK)`` fold away; operations involving a runtime
value emit IR through `semantic`.

Control flow:

- ``if``/``a if c else b``/``assert`` need a compile-time condition and are resolved
  while compiling.
- ``for i in dl.static_range(...)`` is unrolled; ``i`` is a constexpr in the body.
- ``for i in (range(...) if FLAG else dl.static_range(...))``: a compile-time ``FLAG``
  picks the loop's kind, so one body serves a runtime loop and an unrolled one.
- ``for i in range(lb, ub, step)`` becomes an IR ``for`` op. Loop-carried variables are
  the names assigned in the body that were defined before the loop; names first
  assigned in the body are local to it. A carried variable must keep its type, except
  that a Python number (``acc = 0.0``) or a smaller block of the same element type
  takes the type the body gives it.

Anything else (``while``, ``break``, early ``return``, ``if`` on a runtime value,
calls to other kernels) raises `CompilationError`.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import operator
import textwrap
from typing import Any, Callable, Optional

from . import ir, language, semantic
from .ir import BlockType
from .semantic import SemanticError, Tensor


class CompilationError(Exception):
    """A kernel that cannot be compiled: the message names the kernel, the source line
    number (in its file) and shows the offending line.

    Attributes: ``kernel_name``, ``loc`` (`ir.SourceLoc` or None), ``reason``.
    """

    def __init__(self, kernel_name: str, loc: Optional[ir.SourceLoc], reason: str):
        self.kernel_name = kernel_name
        self.loc = loc
        self.reason = reason
        if loc is None:
            text = f"kernel {kernel_name}: {reason}"
        else:
            text = f"kernel {kernel_name}, line {loc.lineno} ({loc.filename}): {reason}\n    {loc.line.strip()}"
        super().__init__(text)


_BINOPS: dict[type, tuple[Optional[str], Callable]] = {
    ast.Add: ("add", operator.add),
    ast.Sub: ("sub", operator.sub),
    ast.Mult: ("mul", operator.mul),
    ast.Div: ("truediv", operator.truediv),
    ast.FloorDiv: ("floordiv", operator.floordiv),
    ast.Mod: ("mod", operator.mod),
    ast.BitAnd: ("and", operator.and_),
    ast.BitOr: ("or", operator.or_),
    ast.BitXor: ("xor", operator.xor),
    ast.LShift: ("shl", operator.lshift),
    ast.RShift: ("shr", operator.rshift),
    ast.Pow: (None, operator.pow),
    ast.MatMult: (None, operator.matmul),
}
_CMPOPS: dict[type, tuple[Optional[str], Callable]] = {
    ast.Lt: ("lt", operator.lt),
    ast.LtE: ("le", operator.le),
    ast.Gt: ("gt", operator.gt),
    ast.GtE: ("ge", operator.ge),
    ast.Eq: ("eq", operator.eq),
    ast.NotEq: ("ne", operator.ne),
    ast.Is: (None, operator.is_),
    ast.IsNot: (None, operator.is_not),
    ast.In: (None, lambda a, b: a in b),
    ast.NotIn: (None, lambda a, b: a not in b),
}
_MATH1 = ("exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "abs", "sin", "cos",
          "tan", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "isnan", "isinf",
          "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "erfcx", "erfinv",
          "normcdfinv", "lgamma", "cyl_bessel_i0", "cyl_bessel_i1", "j0", "j1", "y0", "y1", "signbit")
_MATH2 = ("pow", "atan2", "fmod", "fast_dividef", "hypot", "copysign", "nextafter")


def _cast_builtin(b, a):
    if a["bitcast"]:
        return semantic.bitcast(b, a["x"], a["dtype"])
    return semantic.cast(b, a["x"], a["dtype"])


def _static_range_misuse(b, a):
    raise SemanticError("dl.static_range can only be the iterator of a for loop")


_BUILTINS: dict[str, Callable] = {
    "program_id": lambda b, a: semantic.program_id(b, a["axis"]),
    "num_programs": lambda b, a: semantic.num_programs(b, a["axis"]),
    "arange": lambda b, a: semantic.arange(b, a["start"], a["end"]),
    "full": lambda b, a: semantic.full(b, a["shape"], a["value"], a["dtype"]),
    "zeros": lambda b, a: semantic.full(b, a["shape"], 0, a["dtype"]),
    "load": lambda b, a: semantic.load(b, a["pointer"], a["mask"], a["other"], a["cache_modifier"],
                                       a["eviction_policy"]),
    "store": lambda b, a: semantic.store(b, a["pointer"], a["value"], a["mask"]),
    "atomic_add": lambda b, a: semantic.atomic(b, "add", a["pointer"], a["value"], a["mask"], a["sem"], a["scope"]),
    "cluster_gather": lambda b, a: semantic.cluster_gather(b, a["value"], a["size"]),
    "device_assert": lambda b, a: semantic.device_assert(b, a["condition"], a["message"]),
    "where": lambda b, a: semantic.where(b, a["condition"], a["x"], a["y"]),
    "maximum": lambda b, a: semantic.binary(b, "maximum", a["x"], a["y"]),
    "minimum": lambda b, a: semantic.binary(b, "minimum", a["x"], a["y"]),
    "cast": _cast_builtin,
    "broadcast_to": lambda b, a: semantic.broadcast_to(
        b, semantic.to_tensor(b, a["x"]), semantic.check_shape(a["shape"])
    ),
    "reshape": lambda b, a: semantic.reshape(b, a["x"], a["shape"]),
    "expand_dims": lambda b, a: semantic.expand_dims(b, a["x"], a["axis"]),
    "cdiv": lambda b, a: semantic.cdiv(b, a["a"], a["b"]),
    "static_range": _static_range_misuse,
    "welford": lambda b, a: semantic.welford(b, a["mean"], a["m2"], a["weight"], a["axis"], a["keep_dims"]),
    "welford_combine": lambda b, a: semantic.welford_combine(
        b, a["mean_a"], a["m2_a"], a["weight_a"], a["mean_b"], a["m2_b"], a["weight_b"]
    ),
}
for _name in _MATH1:
    _BUILTINS[_name] = lambda b, a, _fn=_name: semantic.math1(b, _fn, a["x"])
for _name in _MATH2:
    _BUILTINS[_name] = lambda b, a, _fn=_name: semantic.math2(b, _fn, a["x"], a["y"])
for _name in ir.REDUCE_KINDS:
    _BUILTINS[_name] = lambda b, a, _fn=_name: semantic.reduce(b, _fn, a["x"], a["axis"], a["keep_dims"])
for _name in ("cumsum", "cumprod"):
    _BUILTINS[_name] = lambda b, a, _fn=_name: semantic.cumulative(b, _fn, a["x"], a["axis"], a["reverse"])

_SIGNATURES: dict[Callable, inspect.Signature] = {}


class _LocalFunction:
    """A ``def`` inside a kernel (a combine function for ``dl.associative_scan``): its
    AST and the compile-time names it can see (runtime values stay outside)."""

    def __init__(self, node: ast.FunctionDef, scope: dict[str, Any]):
        self.node = node
        self.scope = scope


@functools.lru_cache(maxsize=256)
def _function_source(fn: Callable) -> tuple[ast.FunctionDef, str, int, list[str]]:
    """A plain Python function's AST, file name, first line number and source lines."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise SemanticError(f"cannot read the source of {fn.__name__}() ({e})") from None
    defs = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == fn.__name__]
    if not defs:
        raise SemanticError(f"the source of {fn.__name__}() does not define a function of that name")
    return defs[0], fn.__code__.co_filename, fn.__code__.co_firstlineno, source.splitlines()


class _BoundTo:
    """``x.to`` as a value, so ``x.to(dl.float16)`` can be called."""

    def __init__(self, tensor: Tensor):
        self.tensor = tensor


def _assigned_names(stmts: list[ast.stmt]) -> dict[str, None]:
    """Names stored to anywhere in ``stmts`` (ordered by first appearance)."""
    names: dict[str, None] = {}
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.setdefault(node.id)
    return names


class _CodeGenerator:
    """Walks one kernel's AST for one specialisation, appending IR to ``self.b``."""

    def __init__(self, kernel, spec):
        self.kernel = kernel
        self.spec = spec
        self.b = semantic.Builder()
        self.scope: dict[str, Any] = {}
        self.loop_locals: set[str] = set()
        fn = kernel.fn
        self.globals = fn.__globals__
        self.closure = _closure_of(fn)
        # Where the code being compiled lives: the kernel, or a combine function.
        self.source = (kernel.filename, kernel.first_lineno, kernel.source_lines)

    # ------------------------------------------------------------------ driver

    def build(self) -> ir.Function:
        arg_values = []
        for arg in self.spec.args:
            value = ir.Value(arg.type, name=arg.name)
            arg_values.append(value)
            self.scope[arg.name] = Tensor(value)
        for name, value in self.spec.constexprs:
            self.scope[name] = value
        fdef = self.kernel.fn_def
        self.b.loc = self._loc(fdef)
        for arg in self.spec.args:
            if arg.equal_to_1:  # specialised on the value 1: fold it
                self.scope[arg.name] = semantic.constant(self.b, 1, arg.type)
        body = fdef.body
        if body and isinstance(body[-1], ast.Return):
            if body[-1].value is not None:
                raise self._error(body[-1], "a kernel cannot return a value")
            body = body[:-1]
        for stmt in body:
            self.visit(stmt)
        return ir.Function(self.kernel.name, list(self.spec.args), arg_values, self.b.block,
                           dict(self.spec.constexprs), ftz=self.kernel.ftz)

    def _loc(self, node: ast.AST) -> ir.SourceLoc:
        filename, first_lineno, lines = self.source
        lineno = getattr(node, "lineno", 1)
        line = lines[lineno - 1] if 0 < lineno <= len(lines) else ""
        return ir.SourceLoc(filename, first_lineno + lineno - 1, line)

    def _error(self, node: ast.AST, reason: str) -> CompilationError:
        return CompilationError(self.kernel.name, self._loc(node), reason)

    def visit(self, node: ast.AST) -> Any:
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            kind = "statement" if isinstance(node, ast.stmt) else "expression"
            raise self._error(node, f"unsupported {kind} `{type(node).__name__.lower()}` in a kernel")
        saved = self.b.loc
        if hasattr(node, "lineno"):
            self.b.loc = self._loc(node)
        try:
            return method(node)
        except CompilationError:
            raise
        except SemanticError as e:
            raise self._error(node, str(e)) from None
        except Exception as e:
            raise self._error(node, f"{type(e).__name__}: {e}") from e
        finally:
            self.b.loc = saved

    # ------------------------------------------------------------------ names

    def lookup(self, name: str, node: ast.AST) -> Any:
        for table in (self.scope, self.closure, self.globals):
            if name in table:
                return table[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        hint = " (it was first assigned inside a `for` body, which makes it local to the loop)" \
            if name in self.loop_locals else ""
        raise self._error(node, f"name '{name}' is not defined{hint}")

    def assign(self, target: ast.AST, value: Any) -> None:
        if isinstance(target, ast.Name):
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Tensor) or not isinstance(value, (tuple, list)):
                raise self._error(target, f"cannot unpack {value!r} into {len(target.elts)} names")
            if len(value) != len(target.elts):
                raise self._error(target, f"cannot unpack {len(value)} values into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v)
        else:
            raise self._error(target, f"can only assign to names, not to {type(target).__name__}")

    # ------------------------------------------------------------------ statements

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.visit(node.value)

    def visit_Pass(self, node: ast.Pass) -> None:
        pass

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.decorator_list:
            raise self._error(node, "a function defined in a kernel cannot have decorators")
        visible = {k: v for k, v in self.scope.items() if not isinstance(v, Tensor)}
        self.scope[node.name] = _LocalFunction(node, visible)

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.assign(node.target, self.visit(node.value))

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if not isinstance(node.target, ast.Name):
            raise self._error(node, "augmented assignment needs a plain name on the left")
        current = self.lookup(node.target.id, node)
        self.scope[node.target.id] = self._binop(node.op, current, self.visit(node.value))

    def visit_If(self, node: ast.If) -> None:
        cond = self.visit(node.test)
        if isinstance(cond, Tensor):
            raise self._error(
                node, "`if` on a runtime value is not supported; use dl.where, or a constexpr condition"
            )
        for stmt in node.body if cond else node.orelse:
            self.visit(stmt)

    def visit_Assert(self, node: ast.Assert) -> None:
        cond = self.visit(node.test)
        if isinstance(cond, Tensor):
            raise self._error(node, "`assert` needs a constexpr condition")
        if not cond:
            msg = self.visit(node.msg) if node.msg is not None else ""
            raise self._error(node, f"assertion failed{': ' + str(msg) if msg else ''}")

    def visit_Return(self, node: ast.Return) -> None:
        raise self._error(node, "`return` is only allowed (without a value) as the last statement")

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            raise self._error(node, "`for ... else` is not supported")
        it = node.iter
        if isinstance(it, ast.IfExp):
            choice = self.visit(it.test)
            if isinstance(choice, Tensor):
                raise self._error(node, "the condition that picks a loop's iterator must be a constexpr")
            it = it.body if choice else it.orelse
        func = self.visit(it.func) if isinstance(it, ast.Call) else None
        if func is not range and func is not language.static_range:
            raise self._error(node, "a for loop must iterate over range(...) or dl.static_range(...)")
        if it.keywords or any(isinstance(a, ast.Starred) for a in it.args):
            raise self._error(node, "range bounds must be positional arguments")
        if not 1 <= len(it.args) <= 3:
            raise self._error(node, f"range takes 1 to 3 arguments, got {len(it.args)}")
        if not isinstance(node.target, ast.Name):
            raise self._error(node, "the loop variable must be a single name")
        bounds = [self.visit(a) for a in it.args]
        if func is language.static_range:
            self._static_for(node, bounds)
        else:
            self._range_for(node, bounds)

    def _static_for(self, node: ast.For, bounds: list) -> None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in bounds):
            raise self._error(node, f"dl.static_range bounds must be constexpr ints, got {bounds!r}")
        for i in range(*bounds):
            self.scope[node.target.id] = i
            for stmt in node.body:
                self.visit(stmt)

    def _range_for(self, node: ast.For, bounds: list) -> None:
        if len(bounds) == 1:
            lb, ub, step = 0, bounds[0], 1
        elif len(bounds) == 2:
            lb, ub, step = bounds[0], bounds[1], 1
        else:
            lb, ub, step = bounds
        for v in (lb, ub, step):
            ok = (isinstance(v, int) and not isinstance(v, bool)) or (
                isinstance(v, Tensor) and v.shape == () and not v.is_pointer and v.element.is_integer
            )
            if not ok:
                raise self._error(node, f"range bounds must be integer scalars, got {v!r}")
        if isinstance(step, int) and step <= 0:
            raise self._error(node, f"range step must be positive, got {step}")
        wide = any(
            (isinstance(v, Tensor) and v.element == ir.int64) or (isinstance(v, int) and not semantic.fits(v, ir.int32))
            for v in (lb, ub, step)
        )
        iv_type = BlockType(ir.int64 if wide else ir.int32)
        lb, ub, step = (semantic.coerce(self.b, v, iv_type.element, ()) for v in (lb, ub, step))

        target = node.target.id
        assigned = _assigned_names(node.body)
        names = [n for n in assigned if n in self.scope and n != target]
        inits = [self.scope[n] for n in names]
        for n, v in zip(names, inits):
            if not (isinstance(v, Tensor) or semantic.is_number(v)):
                raise self._error(
                    node, f"'{n}' holds {v!r} before the loop; only numbers and block values can be "
                          "reassigned inside a `range` loop"
                )
        types = [v.type if isinstance(v, Tensor) else BlockType(semantic.default_dtype(v)) for v in inits]
        for _ in range(3):
            body, iv, carried, yields = self._trace_body(node, iv_type, names, types)
            new_types = [self._carried_type(node, n, v, t, y) for n, v, t, y in zip(names, inits, types, yields)]
            if new_types == types:
                break
            types = new_types
        else:
            raise self._error(node, f"the types of the loop-carried variables {names} do not settle")

        saved_block = self.b.block
        self.b.block = body
        try:
            self.b.emit("yield", [self._materialize(y, t) for y, t in zip(yields, types)], [])
        finally:
            self.b.block = saved_block
        init_values = [self._materialize(v, t) for v, t in zip(inits, types)]
        op = self.b.emit("for", [lb, ub, step, *init_values], types, body=body, iv=iv, carried=carried)
        for n, r in zip(names, op.results):
            self.scope[n] = Tensor(r)
        self.loop_locals.update(n for n in assigned if n not in self.scope)

    def _trace_body(self, node: ast.For, iv_type: BlockType, names: list[str], types: list[BlockType]):
        """Compile the loop body into a fresh block with carried values of ``types``."""
        saved_block, saved_scope = self.b.block, self.scope
        body = ir.Block()
        iv = ir.Value(iv_type)
        carried = [ir.Value(t) for t in types]
        self.b.block = body
        self.scope = dict(saved_scope)
        self.scope[node.target.id] = Tensor(iv)
        self.scope.update((n, Tensor(c)) for n, c in zip(names, carried))
        try:
            for stmt in node.body:
                self.visit(stmt)
            yields = [self.scope[n] for n in names]
        finally:
            self.b.block, self.scope = saved_block, saved_scope
        return body, iv, carried, yields

    def _carried_type(self, node: ast.For, name: str, init: Any, init_type: BlockType, y: Any) -> BlockType:
        """The type a carried variable settles at after one more body trace."""
        if semantic.is_number(y):
            if semantic.is_number(init):
                return BlockType(semantic.promote(init_type.element, semantic.default_dtype(y)))
            return init_type
        if not isinstance(y, Tensor):
            raise self._error(node, f"loop-carried variable '{name}' becomes {y!r} in the loop body")
        if y.type == init_type:
            return init_type
        if semantic.is_number(init) and not y.is_pointer:
            return y.type
        if y.element == init_type.element and semantic.broadcast_shapes(init_type.shape, y.shape) == y.shape:
            return y.type
        raise self._error(
            node, f"loop-carried variable '{name}' is {init_type!r} before the loop but {y.type!r} after "
                  "an iteration; give it its final type before the loop (e.g. dl.zeros(...) or .to(...))"
        )

    def _materialize(self, v: Any, t: BlockType) -> Tensor:
        if isinstance(v, Tensor):
            return v if v.type == t else semantic.broadcast_to(self.b, v, t.shape)
        return semantic.constant(self.b, v, t)

    # ------------------------------------------------------------------ expressions

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def visit_Tuple(self, node: ast.Tuple) -> tuple:
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node: ast.List) -> list:
        return [self.visit(e) for e in node.elts]

    def visit_Slice(self, node: ast.Slice) -> slice:
        parts = [None if p is None else self.visit(p) for p in (node.lower, node.upper, node.step)]
        return slice(*parts)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        obj = self.visit(node.value)
        if isinstance(obj, Tensor):
            if node.attr == "to":
                return _BoundTo(obj)
            if node.attr == "dtype":
                return obj.element
            if node.attr == "shape":
                return obj.shape
            raise self._error(node, f"block values have no attribute '{node.attr}' (only .to, .dtype, .shape)")
        return getattr(obj, node.attr)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        obj = self.visit(node.value)
        index = self.visit(node.slice)
        if isinstance(obj, Tensor):
            return semantic.subscript(self.b, obj, index if isinstance(index, tuple) else (index,))
        return obj[index]

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        return self._binop(node.op, self.visit(node.left), self.visit(node.right))

    def _binop(self, op: ast.operator, left: Any, right: Any) -> Any:
        name, pyop = _BINOPS[type(op)]
        if not isinstance(left, Tensor) and not isinstance(right, Tensor):
            return pyop(left, right)
        if name is None:
            hint = " (use dl.pow)" if isinstance(op, ast.Pow) else ""
            raise SemanticError(f"operator {type(op).__name__} is not supported on block values{hint}")
        return semantic.binary(self.b, name, left, right)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.visit(node.operand)
        if not isinstance(x, Tensor):
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
                    ast.Not: operator.not_}[type(node.op)](x)
        if isinstance(node.op, ast.USub):
            return semantic.neg(self.b, x)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, ast.Invert):
            return semantic.invert(self.b, x)
        return semantic.logical_not(self.b, x)

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        runtime: list[Tensor] = []
        result: Any = None
        for expr in node.values:
            v = self.visit(expr)
            if isinstance(v, Tensor):
                if v.shape != ():
                    word = "and" if is_and else "or"
                    raise SemanticError(f"`{word}` needs scalars; use {'&' if is_and else '|'} on blocks")
                runtime.append(semantic.cast(self.b, v, ir.int1))
                continue
            result = v
            if bool(v) != is_and:  # short-circuits: False for `and`, True for `or`
                return v
        if not runtime:
            return result
        acc = runtime[0]
        for v in runtime[1:]:
            acc = semantic.binary(self.b, "and" if is_and else "or", acc, v)
        return acc

    def visit_Compare(self, node: ast.Compare) -> Any:
        left = self.visit(node.left)
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.visit(right_node)
            pred, pyop = _CMPOPS[type(op)]
            if isinstance(left, Tensor) or isinstance(right, Tensor):
                if pred is None:
                    raise SemanticError(f"operator {type(op).__name__} is not supported on block values")
                value = semantic.compare(self.b, pred, left, right)
            else:
                value = pyop(left, right)
            if isinstance(result, Tensor) or isinstance(value, Tensor):
                result = value if result is True else semantic.binary(self.b, "and", result, value)
            elif not value:
                return value
            else:
                result = value
            left = right
        return result

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.visit(node.test)
        if isinstance(cond, Tensor):
            raise SemanticError("`a if c else b` needs a constexpr condition; use dl.where for runtime values")
        return self.visit(node.body if cond else node.orelse)

    def visit_Call(self, node: ast.Call) -> Any:
        func = self.visit(node.func)
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise SemanticError("*args / **kwargs are not supported in kernel calls")
        args = [self.visit(a) for a in node.args]
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords}
        if isinstance(func, _BoundTo):
            return self._call_builtin(language.cast, [func.tensor, *args], kwargs)
        if getattr(func, "__dl_builtin__", None) and getattr(language, func.__dl_builtin__, None) is func:
            return self._call_builtin(func, args, kwargs)
        if getattr(func, "__dl_kernel__", False):
            raise SemanticError(f"calling another kernel ({func.name}) from a kernel is not supported yet")
        if any(isinstance(v, Tensor) for v in (*args, *kwargs.values())):
            name = getattr(func, "__name__", repr(func))
            raise SemanticError(
                f"cannot call the Python function {name}() on block values; only dl.* functions "
                "run at kernel run time (e.g. dl.maximum instead of max)"
            )
        return func(*args, **kwargs)

    def _call_builtin(self, func: Callable, args: list, kwargs: dict) -> Any:
        name = func.__dl_builtin__
        sig = _SIGNATURES.get(func)
        if sig is None:
            sig = _SIGNATURES[func] = inspect.signature(func)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            raise SemanticError(f"dl.{name}(): {e}") from None
        bound.apply_defaults()
        if name == "associative_scan":
            return self._associative_scan(bound.arguments)
        return _BUILTINS[name](self.b, bound.arguments)

    # ------------------------------------------------------------------ scans

    def _associative_scan(self, a: dict) -> Any:
        values = a["values"]
        results = semantic.scan(self.b, values, a["axis"], a["reverse"], self._combine_region(a["combine_fn"]),
                                "dl.associative_scan")
        return tuple(results) if isinstance(values, (tuple, list)) else results[0]

    def _combine_region(self, fn: Any) -> Callable[[list[Tensor]], Any]:
        """A callback that compiles the combine function ``fn`` (a ``def`` in the kernel or
        a plain Python function) inline on the region's arguments and returns what its
        final ``return`` gives."""
        if isinstance(fn, _LocalFunction):
            fdef, scope, source = fn.node, fn.scope, self.source
            fn_globals, closure = self.globals, self.closure
        elif inspect.isfunction(fn) and not getattr(fn, "__dl_builtin__", None):
            fdef, filename, first_lineno, lines = _function_source(fn)
            scope, source = {}, (filename, first_lineno, lines)
            fn_globals, closure = fn.__globals__, _closure_of(fn)
        else:
            raise SemanticError(f"dl.associative_scan: combine_fn must be a Python function, got {fn!r}")
        params = fdef.args
        if params.vararg or params.kwarg or params.kwonlyargs or params.defaults or params.posonlyargs:
            raise SemanticError(f"combine_fn {fdef.name}() must take plain positional parameters only")
        names = [p.arg for p in params.args]
        body = list(fdef.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # docstring
        if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
            raise SemanticError(f"combine_fn {fdef.name}() must end with `return <combined values>`")

        def build(args: list[Tensor]) -> Any:
            if len(names) != len(args):
                raise SemanticError(f"combine_fn {fdef.name}() takes {len(names)} parameters; scanning "
                                    f"{len(args) // 2} block(s) passes {len(args)} (the state before, then after)")
            saved = (self.scope, self.globals, self.closure, self.source)
            self.scope = {**scope, **dict(zip(names, args))}
            self.globals, self.closure, self.source = fn_globals, closure, source
            try:
                for stmt in body[:-1]:
                    self.visit(stmt)
                return self.visit(body[-1].value)
            finally:
                self.scope, self.globals, self.closure, self.source = saved

        return build


def _closure_of(fn: Callable) -> dict[str, Any]:
    """The values of ``fn``'s closure cells that are set, by name."""
    return {name: cell.cell_contents for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ())
            if _cell_is_set(cell)}


def _cell_is_set(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def build_function(kernel, spec) -> ir.Function:
    """Compile ``kernel`` (a `kernel.Kernel`) for ``spec`` (a `kernel.Specialization`)
    into block IR.

    Raises:
        CompilationError: unsupported syntax, a type or shape error, or a name that is
            not defined; the message names the kernel and the source line.
    """
    return _CodeGenerator(kernel, spec).build()
