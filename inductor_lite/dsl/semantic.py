"""Typed construction of block-IR ops: promotion, broadcasting, casts and each
builtin's type rules (the role of Triton's ``triton/language/semantic.py``).

The frontend calls these functions with `Tensor`s (typed IR values that exist at run
time) and Python numbers (literals and constexprs). Python numbers are *weak*: next to
a typed operand they take its type (see `_literal_dtype`); alone they materialise as
int1 (bool), int32 (int; int64 when it does not fit) or float32 (float). Every
function appends ops through a `Builder` and returns a `Tensor`. Type errors raise
`SemanticError`; the frontend adds the kernel name and source line.

Promotion (Triton's rules, except that half types always compute in fp32):
float beats int; fp64 > fp32 > fp16/bf16, and fp16 with bf16 gives fp32; between
integers the wider wins, and an unsigned type wins over a signed one of no greater
width; int1 yields to any other type. Arithmetic never runs on int1 (widened to
int32), integer ``/`` runs in fp32, and any arithmetic on fp16/bf16 runs in fp32.
The invariants this gives the backends are listed in `ir.py`'s docstring.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence


from . import ir
from .ir import BlockType, DType, float32, float64, int1, int32, int64

MAX_NUMEL = 1 << 20
"""Largest block (elements), as Triton's TRITON_MAX_TENSOR_NUMEL."""

_INT_RANGE = {
    ir.int1: (0, 1),
    ir.int8: (-(1 << 7), (1 << 7) - 1),
    ir.int16: (-(1 << 15), (1 << 15) - 1),
    ir.int32: (-(1 << 31), (1 << 31) - 1),
    ir.int64: (-(1 << 63), (1 << 63) - 1),
    ir.uint8: (0, 255),
}
_SYMBOLS = {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
    "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>",
    "maximum": "maximum", "minimum": "minimum",
}
_ARITH = {"add", "sub", "mul", "truediv", "floordiv", "mod", "maximum", "minimum"}
_INTEGER_ONLY = {"and", "or", "xor", "shl", "shr", "floordiv"}
_FLOAT_FNS = {"exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sin", "cos",
              "tan", "tanh", "sigmoid", "erf", "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh",
              "atanh", "erfc", "erfcx", "erfinv", "normcdfinv", "lgamma", "cyl_bessel_i0", "cyl_bessel_i1",
              "j0", "j1", "y0", "y1"}
_ROUNDING_FNS = {"floor", "ceil", "round", "trunc"}


class SemanticError(Exception):
    """A DSL type or shape error (the frontend re-raises it as a CompilationError)."""


class Tensor:
    """A typed IR value while compiling: what a kernel variable holds at run time."""

    __slots__ = ("value",)

    def __init__(self, value: ir.Value):
        self.value = value

    @property
    def type(self) -> BlockType:
        return self.value.type

    @property
    def element(self):
        return self.value.type.element

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.type.shape

    @property
    def is_pointer(self) -> bool:
        return isinstance(self.value.type.element, ir.PointerType)

    def __repr__(self) -> str:
        return f"Tensor({self.type!r})"

    def __bool__(self):
        raise SemanticError(
            "the truth value of a runtime value is unknown at compile time; use dl.where, "
            "or make the condition a constexpr"
        )


class Builder:
    """Appends ops to ``block``; every op is stamped with ``loc`` (the current line)."""

    def __init__(self):
        self.block = ir.Block()
        self.loc: Optional[ir.SourceLoc] = None
        self.cluster_size: Optional[int] = None  # of the first cluster_gather

    def emit(self, opcode: str, operands: Sequence[Tensor], result_types: Sequence[BlockType],
             **attrs) -> ir.Op:
        op = ir.Op(opcode, [t.value for t in operands], [ir.Value(t) for t in result_types], attrs, self.loc)
        self.block.ops.append(op)
        return op

    def emit1(self, opcode: str, operands: Sequence[Tensor], result_type: BlockType, **attrs) -> Tensor:
        return Tensor(self.emit(opcode, operands, [result_type], **attrs).result)


def is_number(x: Any) -> bool:
    return isinstance(x, (bool, int, float))


def _describe(x: Any) -> str:
    if isinstance(x, Tensor):
        return repr(x.type)
    return f"{type(x).__name__} {x!r}"


def _check_operand(x: Any, what: str) -> None:
    if not (isinstance(x, Tensor) or is_number(x)):
        raise SemanticError(f"{what}: expected a block value or a number, got {_describe(x)}")


def _is_half(d) -> bool:
    return d in (ir.float16, ir.bfloat16)


def fits(value: int, dtype: DType) -> bool:
    """Whether the Python int ``value`` is representable in the integer ``dtype``."""
    lo, hi = _INT_RANGE[dtype]
    return lo <= value <= hi


def default_dtype(value: Any) -> DType:
    """The type a lone Python number materialises as (bool->int1, int->int32/int64,
    float->float32)."""
    if isinstance(value, bool):
        return int1
    if isinstance(value, int):
        if fits(value, int32):
            return int32
        if fits(value, int64):
            return int64
        raise SemanticError(f"integer literal {value} does not fit in int64")
    if isinstance(value, float):
        return float32
    raise SemanticError(f"expected a number, got {_describe(value)}")


def _convert_literal(value: Any, dtype: DType):
    """``value`` as the Python number a ``constant`` op of ``dtype`` holds: floats are
    rounded to ``dtype`` as a cast rounds (nearest even; out of range gives +-inf, as
    torch turns ``x * 1e39`` into ``x * inf`` for float32 ``x``)."""
    if dtype.is_floating:
        if dtype == float64:
            return float(value)
        import torch  # here: compile workers import this module without torch

        return torch.tensor(float(value), dtype=torch.float64).to(getattr(torch, dtype.name)).item()
    if dtype == int1:
        return bool(value)
    if isinstance(value, float):
        if not value.is_integer():
            raise SemanticError(f"cannot represent {value!r} in {dtype}")
        value = int(value)
    value = int(value)
    if not fits(value, dtype):
        raise SemanticError(f"{value} is out of range for {dtype}")
    return value


def constant(b: Builder, value: Any, type: BlockType) -> Tensor:
    """A ``constant`` op of ``type`` (a scalar, or a splat when ``type`` has a shape)."""
    return b.emit1("constant", [], type, value=_convert_literal(value, type.element))


def to_tensor(b: Builder, x: Any) -> Tensor:
    """``x`` if it is a Tensor; a Python number as a scalar constant of its default type."""
    if isinstance(x, Tensor):
        return x
    return constant(b, x, BlockType(default_dtype(x)))


def _shape_of(x: Any) -> tuple[int, ...]:
    return x.shape if isinstance(x, Tensor) else ()


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def check_shape(shape: Any) -> tuple[int, ...]:
    """Validate a block shape: a sequence of power-of-2 ints, numel <= MAX_NUMEL."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in shape
    ):
        raise SemanticError(f"a block shape must be a tuple of constexpr ints, got {shape!r}")
    shape = tuple(shape)
    for s in shape:
        if not _is_pow2(s):
            raise SemanticError(f"block dimensions must be powers of 2, got shape {list(shape)}")
    numel = 1
    for s in shape:
        numel *= s
    if numel > MAX_NUMEL:
        raise SemanticError(f"block of shape {list(shape)} has {numel} elements; the limit is {MAX_NUMEL}")
    return shape


# ----------------------------------------------------------------------------- shapes


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Numpy broadcasting of block shapes (aligned on the right, size 1 stretches)."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise SemanticError(f"cannot broadcast shapes {', '.join(str(list(s)) for s in shapes)}")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def broadcast_to(b: Builder, x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``x`` broadcast to ``shape``: splat a scalar, prepend size-1 dims with
    ``expand_dims``, then ``broadcast`` the size-1 dims."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if x.shape == ():
        return b.emit1("splat", [x], x.type.with_shape(shape))
    if len(x.shape) > len(shape) or broadcast_shapes(x.shape, shape) != shape:
        raise SemanticError(f"cannot broadcast a block of shape {list(x.shape)} to {list(shape)}")
    while len(x.shape) < len(shape):
        x = b.emit1("expand_dims", [x], x.type.with_shape((1,) + x.shape), axis=0)
    if x.shape != shape:
        x = b.emit1("broadcast", [x], x.type.with_shape(shape))
    return x


def _normalize_axis(axis: Any, rank: int, what: str) -> int:
    if axis is None:
        raise SemanticError(f"{what}: axis is required")
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise SemanticError(f"{what}: axis must be a constexpr int, got {_describe(axis)}")
    if not -rank <= axis < rank:
        raise SemanticError(f"{what}: axis {axis} is out of range for a block of rank {rank}")
    return axis % rank


def expand_dims(b: Builder, x: Any, axis: Any) -> Tensor:
    """Insert size-1 dims at ``axis`` (int or sequence of ints, positions in the result)."""
    x = to_tensor(b, x)
    axes = list(axis) if isinstance(axis, (tuple, list)) else [axis]
    new_rank = len(x.shape) + len(axes)
    axes = sorted(_normalize_axis(a, new_rank, "expand_dims") for a in axes)
    if len(set(axes)) != len(axes):
        raise SemanticError(f"expand_dims: repeated axis in {axis!r}")
    for a in axes:
        shape = x.shape[:a] + (1,) + x.shape[a:]
        x = b.emit1("expand_dims", [x], x.type.with_shape(shape), axis=a)
    return x


def reshape(b: Builder, x: Any, shape: Any) -> Tensor:
    """Same elements in row-major order under a new shape of equal numel."""
    x = to_tensor(b, x)
    shape = check_shape(shape)
    if x.shape == shape:
        return x
    if x.type.numel != BlockType(x.element, shape).numel:
        raise SemanticError(f"reshape: cannot reshape a block of shape {list(x.shape)} to {list(shape)}")
    if x.shape == ():
        return b.emit1("splat", [x], x.type.with_shape(shape))
    return b.emit1("reshape", [x], x.type.with_shape(shape))


def subscript(b: Builder, x: Tensor, index: tuple) -> Tensor:
    """``x[:, None]``-style indexing: ``:`` keeps a dim, ``None`` inserts a size-1 dim."""
    kept = [i for i in index if i is not None]
    for i in kept:
        if not (isinstance(i, slice) and i == slice(None)):
            raise SemanticError(
                f"block indexing supports only ':' and None (e.g. x[:, None]), got {i!r}"
            )
    if len(kept) > len(x.shape):
        raise SemanticError(f"too many indices for a block of rank {len(x.shape)}")
    index = tuple(index) + (slice(None),) * (len(x.shape) - len(kept))
    axes = [pos for pos, i in enumerate(index) if i is None]
    return expand_dims(b, x, axes) if axes else x


# ----------------------------------------------------------------------------- types


def promote(a: DType, b: DType) -> DType:
    """The common type of two typed operands (see the module docstring)."""
    if a.is_floating or b.is_floating:
        if float64 in (a, b):
            return float64
        if float32 in (a, b):
            return float32
        if a.is_floating and b.is_floating:
            return a if a == b else float32
        return a if a.is_floating else b
    if a == int1:
        return b
    if b == int1:
        return a
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    unsigned, signed = (a, b) if a.kind == "uint" else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def _literal_dtype(value: Any, other: DType) -> DType:
    """The type a weak Python number takes next to an operand of type ``other``:
    ``other`` when it can hold the value, else the promotion of ``other`` with the
    number's default type (float32 for a float next to an integer)."""
    if isinstance(value, float):
        return other if other.is_floating else float32
    if other.is_floating or isinstance(value, bool):
        return other
    if other != int1 and fits(value, other):
        return other
    return promote(other, default_dtype(value))


def _common_dtype(x: Any, y: Any) -> DType:
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        return promote(x.element, y.element)
    if isinstance(x, Tensor):
        return _literal_dtype(y, x.element)
    if isinstance(y, Tensor):
        return _literal_dtype(x, y.element)
    return promote(default_dtype(x), default_dtype(y))


def coerce(b: Builder, x: Any, dtype: DType, shape: tuple[int, ...]) -> Tensor:
    """``x`` (a Tensor or a Python number) as a Tensor of element ``dtype`` and ``shape``."""
    if isinstance(x, Tensor):
        return broadcast_to(b, cast(b, x, dtype), shape)
    return constant(b, x, BlockType(dtype, shape))


def _no_pointer(x: Any, what: str) -> None:
    if isinstance(x, Tensor) and x.is_pointer:
        raise SemanticError(f"{what} is not defined on pointers ({x.type!r})")


def cast(b: Builder, x: Any, dtype: Any) -> Tensor:
    """Value conversion to ``dtype``; to int1 means ``x != 0``. Casts between a half
    type and anything but fp32 go through fp32 (torch converts the same way)."""
    if not isinstance(dtype, DType):
        raise SemanticError(f"cast: expected a dtype such as dl.float32, got {_describe(dtype)}")
    x = to_tensor(b, x)
    _no_pointer(x, "cast")
    src = x.element
    if src == dtype:
        return x
    if dtype == int1:
        if _is_half(src):
            x = cast(b, x, float32)
        zero = constant(b, 0, x.type)
        return b.emit1("compare", [x, zero], x.type.with_element(int1), pred="ne")
    if (_is_half(src) or _is_half(dtype)) and float32 not in (src, dtype):
        x = cast(b, x, float32)
    return b.emit1("cast", [x], x.type.with_element(dtype))


def bitcast(b: Builder, x: Any, dtype: Any) -> Tensor:
    """Reinterpret the bits of ``x`` as ``dtype`` (same bit width, not int1)."""
    if not isinstance(dtype, DType):
        raise SemanticError(f"bitcast: expected a dtype such as dl.int32, got {_describe(dtype)}")
    x = to_tensor(b, x)
    _no_pointer(x, "bitcast")
    if x.element == dtype:
        return x
    if int1 in (x.element, dtype) or x.element.bits != dtype.bits:
        raise SemanticError(f"bitcast needs types of one bit width (not int1): {x.element} -> {dtype}")
    return b.emit1("bitcast", [x], x.type.with_element(dtype))


# ----------------------------------------------------------------------------- arithmetic


def binary(b: Builder, op: str, x: Any, y: Any) -> Tensor:
    """``x <op> y`` for ``op`` in `ir.BINARY_OPS` with promotion and broadcasting."""
    sym = _SYMBOLS[op]
    _check_operand(x, f"left operand of {sym}")
    _check_operand(y, f"right operand of {sym}")
    if any(isinstance(v, Tensor) and v.is_pointer for v in (x, y)):
        return _pointer_arith(b, op, x, y)
    dtype = _common_dtype(x, y)
    if op in _INTEGER_ONLY and dtype.is_floating:
        hint = "; use dl.floor(a / b)" if op == "floordiv" else ""
        raise SemanticError(f"operator {sym} needs integer operands, got {_describe(x)} and {_describe(y)}{hint}")
    if dtype == int1 and op not in ("and", "or", "xor"):
        dtype = int32
    if op == "truediv" and dtype.is_integer:
        dtype = float32
    if _is_half(dtype):
        dtype = float32
    shape = broadcast_shapes(_shape_of(x), _shape_of(y))
    xv, yv = coerce(b, x, dtype, shape), coerce(b, y, dtype, shape)
    return b.emit1("binary", [xv, yv], BlockType(dtype, shape), op=op)


def _pointer_arith(b: Builder, op: str, x: Any, y: Any) -> Tensor:
    if op == "add" and isinstance(y, Tensor) and y.is_pointer and not (isinstance(x, Tensor) and x.is_pointer):
        x, y = y, x
    if op not in ("add", "sub") or not (isinstance(x, Tensor) and x.is_pointer) or (
        isinstance(y, Tensor) and y.is_pointer
    ):
        raise SemanticError(
            f"unsupported pointer arithmetic {_describe(x)} {_SYMBOLS[op]} {_describe(y)}: "
            "only pointer + integer and pointer - integer are allowed"
        )
    if isinstance(y, float) or (isinstance(y, Tensor) and y.element.is_floating):
        raise SemanticError(f"pointer offsets must be integers, got {_describe(y)}")
    shape = broadcast_shapes(x.shape, _shape_of(y))
    if is_number(y):
        y = -y if op == "sub" else y
        offset = constant(b, y, BlockType(promote(int32, default_dtype(y)), shape))
    else:
        offset = y if y.element in (int32, int64) else cast(b, y, int32)
        if op == "sub":
            offset = b.emit1("math", [offset], offset.type, fn="neg")
        offset = broadcast_to(b, offset, shape)
    return b.emit1("binary", [broadcast_to(b, x, shape), offset], x.type.with_shape(shape), op="add")


def compare(b: Builder, pred: str, x: Any, y: Any) -> Tensor:
    """``x <pred> y`` (pred in `ir.COMPARE_PREDS`) after promotion; gives int1."""
    _check_operand(x, "comparison")
    _check_operand(y, "comparison")
    _no_pointer(x, "comparison")
    _no_pointer(y, "comparison")
    dtype = _common_dtype(x, y)
    if _is_half(dtype):
        dtype = float32
    shape = broadcast_shapes(_shape_of(x), _shape_of(y))
    xv, yv = coerce(b, x, dtype, shape), coerce(b, y, dtype, shape)
    return b.emit1("compare", [xv, yv], BlockType(int1, shape), pred=pred)


def neg(b: Builder, x: Any) -> Tensor:
    """``-x`` (int1 is widened to int32, halves computed in fp32)."""
    x = to_tensor(b, x)
    _no_pointer(x, "unary -")
    if x.element == int1 or _is_half(x.element):
        x = cast(b, x, int32 if x.element == int1 else float32)
    return b.emit1("math", [x], x.type, fn="neg")


def invert(b: Builder, x: Any) -> Tensor:
    """``~x``: bitwise complement of an integer (logical not of int1)."""
    x = to_tensor(b, x)
    _no_pointer(x, "operator ~")
    if x.element.is_floating:
        raise SemanticError(f"operator ~ needs an integer operand, got {x.type!r}")
    return b.emit1("math", [x], x.type, fn="not")


def logical_not(b: Builder, x: Any) -> Tensor:
    """``not x`` as int1 (``x == 0``)."""
    x = to_tensor(b, x)
    if x.element == int1:
        return b.emit1("math", [x], x.type, fn="not")
    return compare(b, "eq", x, 0)


def where(b: Builder, condition: Any, x: Any, y: Any) -> Tensor:
    """``x`` where ``condition`` (cast to int1) else ``y``; no compute, so half types stay."""
    _check_operand(condition, "where: condition")
    _check_operand(x, "where: x")
    _check_operand(y, "where: y")
    condition = to_tensor(b, condition)
    _no_pointer(condition, "where's condition")
    if condition.element != int1:
        condition = cast(b, condition, int1)
    pointers = [v for v in (x, y) if isinstance(v, Tensor) and v.is_pointer]
    if pointers:
        if len(pointers) != 2 or x.element != y.element:
            raise SemanticError(f"where: cannot select between {_describe(x)} and {_describe(y)}")
        shape = broadcast_shapes(condition.shape, x.shape, y.shape)
        operands = [broadcast_to(b, v, shape) for v in (condition, x, y)]
        return b.emit1("select", operands, x.type.with_shape(shape))
    dtype = _common_dtype(x, y)
    shape = broadcast_shapes(condition.shape, _shape_of(x), _shape_of(y))
    operands = [broadcast_to(b, condition, shape), coerce(b, x, dtype, shape), coerce(b, y, dtype, shape)]
    return b.emit1("select", operands, BlockType(dtype, shape))


def math1(b: Builder, fn: str, x: Any) -> Tensor:
    """One-operand math function ``fn`` (see `ir.MATH_FNS`): integers go to float32
    for the transcendental functions, halves to fp32, rounding is the identity on
    integers, isnan/isinf/signbit give int1 (signbit of an integer is ``x < 0``)."""
    _check_operand(x, f"dl.{fn}")
    x = to_tensor(b, x)
    _no_pointer(x, f"dl.{fn}")
    d = x.element
    if fn == "signbit" and d.is_integer and d.is_signed:
        return compare(b, "lt", x, 0)
    if fn in ("isnan", "isinf", "signbit"):
        if d.is_integer:
            return constant(b, False, x.type.with_element(int1))
        x = cast(b, x, float32) if _is_half(d) else x
        return b.emit1("math", [x], x.type.with_element(int1), fn=fn)
    if d.is_integer and (fn in _ROUNDING_FNS or (fn == "abs" and not d.is_signed)):
        return x
    if _is_half(d) or (d.is_integer and fn in _FLOAT_FNS):
        x = cast(b, x, float32)
    return b.emit1("math", [x], x.type, fn=fn)


def math2(b: Builder, fn: str, x: Any, y: Any) -> Tensor:
    """Two-operand math function (pow, atan2, fmod, fast_dividef, hypot, copysign, nextafter),
    computed in a float type."""
    _check_operand(x, f"dl.{fn}")
    _check_operand(y, f"dl.{fn}")
    _no_pointer(x, f"dl.{fn}")
    _no_pointer(y, f"dl.{fn}")
    dtype = _common_dtype(x, y)
    if dtype.is_integer or _is_half(dtype):
        dtype = float32
    shape = broadcast_shapes(_shape_of(x), _shape_of(y))
    xv, yv = coerce(b, x, dtype, shape), coerce(b, y, dtype, shape)
    return b.emit1("math", [xv, yv], BlockType(dtype, shape), fn=fn)


def cdiv(b: Builder, x: Any, y: Any) -> Any:
    """``(x + y - 1) // y``; Python ints fold to an int."""
    if is_number(x) and is_number(y):
        if not all(isinstance(v, int) for v in (x, y)):
            raise SemanticError(f"cdiv needs integers, got {_describe(x)} and {_describe(y)}")
        return -(-x // y)
    return binary(b, "floordiv", binary(b, "sub", binary(b, "add", x, y), 1), y)


# ----------------------------------------------------------------------------- creation


def program_id(b: Builder, axis: Any) -> Tensor:
    """This program's index along grid ``axis`` (int32 scalar)."""
    return b.emit1("program_id", [], BlockType(int32), axis=_grid_axis(axis, "program_id"))


def num_programs(b: Builder, axis: Any) -> Tensor:
    """The grid size along ``axis`` (int32 scalar)."""
    return b.emit1("num_programs", [], BlockType(int32), axis=_grid_axis(axis, "num_programs"))


def _grid_axis(axis: Any, what: str) -> int:
    if axis not in (0, 1, 2) or isinstance(axis, (bool, float)) or not isinstance(axis, int):
        raise SemanticError(f"{what}: axis must be the constexpr 0, 1 or 2, got {_describe(axis)}")
    return axis


def arange(b: Builder, start: Any, end: Any) -> Tensor:
    """int32 block [start, end); constexpr bounds, ``end - start`` a power of 2."""
    for v in (start, end):
        if not isinstance(v, int) or isinstance(v, bool):
            raise SemanticError(f"arange bounds must be constexpr ints, got {_describe(v)}")
    if not (fits(start, int32) and fits(end, int32)) or end <= start:
        raise SemanticError(f"arange({start}, {end}): need start < end within int32")
    n = end - start
    if not _is_pow2(n):
        raise SemanticError(f"arange({start}, {end}): the length {n} must be a power of 2")
    check_shape((n,))
    return b.emit1("arange", [], BlockType(int32, (n,)), start=start, end=end)


def full(b: Builder, shape: Any, value: Any, dtype: Any) -> Tensor:
    """Block of ``shape`` filled with ``value`` (a number or a scalar) as ``dtype``."""
    shape = check_shape(shape)
    if not isinstance(dtype, DType):
        raise SemanticError(f"full: dtype must be a DSL dtype such as dl.float32, got {_describe(dtype)}")
    _check_operand(value, "full: value")
    if is_number(value):
        return constant(b, value, BlockType(dtype, shape))
    if value.shape != ():
        raise SemanticError(f"full: value must be a scalar, got a block {value.type!r}")
    return broadcast_to(b, cast(b, value, dtype), shape)


# ----------------------------------------------------------------------------- memory


def _pointer_operand(ptr: Any, what: str) -> Tensor:
    if not (isinstance(ptr, Tensor) and ptr.is_pointer):
        raise SemanticError(f"{what}: expected a pointer (a tensor argument plus offsets), got {_describe(ptr)}")
    return ptr


def _mask_operand(b: Builder, mask: Any, what: str) -> Optional[Tensor]:
    if mask is None:
        return None
    if isinstance(mask, bool):
        mask = to_tensor(b, mask)
    if not isinstance(mask, Tensor) or mask.element != int1:
        raise SemanticError(f"{what}: mask must be an int1 block (a comparison), got {_describe(mask)}")
    return mask


def load(b: Builder, ptr: Any, mask: Any = None, other: Any = None, cache_modifier: str = "",
         eviction_policy: str = "") -> Tensor:
    """Gather through ``ptr``; with a mask, masked-off lanes give ``other`` (default 0)
    cast to the pointee type. ``ptr``, ``mask`` and ``other`` broadcast together.
    ``cache_modifier``: ``""`` or one of `ir.CACHE_MODIFIERS`; ``eviction_policy``:
    ``""`` or one of `ir.EVICTION_POLICIES`."""
    if eviction_policy != "" and eviction_policy not in ir.EVICTION_POLICIES:
        raise SemanticError(f"load: eviction_policy must be '', {' or '.join(map(repr, ir.EVICTION_POLICIES))}; "
                            f"got {eviction_policy!r}")
    if cache_modifier != "" and cache_modifier not in ir.CACHE_MODIFIERS:
        raise SemanticError(f"load: cache_modifier must be '', {', '.join(map(repr, ir.CACHE_MODIFIERS))}; "
                            f"got {cache_modifier!r}")
    ptr = _pointer_operand(ptr, "load")
    mask = _mask_operand(b, mask, "load")
    if other is not None:
        if mask is None:
            raise SemanticError("load: `other` needs a `mask`")
        _check_operand(other, "load: other")
        _no_pointer(other, "load's `other`")
    elem = ptr.element.element
    shape = broadcast_shapes(ptr.shape, *[v.shape for v in (mask, other) if isinstance(v, Tensor)])
    operands = [broadcast_to(b, ptr, shape)]
    if mask is not None:
        operands.append(broadcast_to(b, mask, shape))
        operands.append(coerce(b, 0 if other is None else other, elem, shape))
    attrs = {k: v for k, v in (("cache_modifier", cache_modifier), ("eviction_policy", eviction_policy)) if v}
    return b.emit1("load", operands, BlockType(elem, shape), **attrs)


def store(b: Builder, ptr: Any, value: Any, mask: Any = None) -> None:
    """Scatter ``value`` cast to the pointee type through ``ptr`` where ``mask``;
    ``value`` and ``mask`` broadcast to the pointer block's shape (a pointer never
    grows: several lanes storing to one address would race)."""
    ptr = _pointer_operand(ptr, "store")
    mask = _mask_operand(b, mask, "store")
    _check_operand(value, "store: value")
    _no_pointer(value, "store's value")
    shape = ptr.shape
    others = [_shape_of(value)] + ([mask.shape] if mask is not None else [])
    if broadcast_shapes(shape, *others) != shape or any(len(s) > len(shape) for s in others):
        raise SemanticError(f"store: value {_describe(value)} and mask must broadcast to the pointer "
                            f"block's shape {list(shape)}")
    operands = [ptr, coerce(b, value, ptr.element.element, shape)]
    if mask is not None:
        operands.append(broadcast_to(b, mask, shape))
    b.emit("store", operands, [])


def atomic(b: Builder, op: str, ptr: Any, value: Any, mask: Any = None, sem: str = "acq_rel",
           scope: str = "gpu") -> Optional[Tensor]:
    """An atomic read-modify-write ``op`` (one of `ir.ATOMIC_OPS`) of ``value`` (cast
    to the pointee type) at ``ptr`` where ``mask``. Through a scalar pointer: one
    ``atomic`` op, returning the old value. Through a pointer block: one ``red`` op
    (every active lane updates its address, repeated addresses included), returning
    None; ``value`` and ``mask`` broadcast to the pointer block's shape."""
    what = f"atomic_{op}"
    if sem not in ir.ATOMIC_SEMS:
        raise SemanticError(f"{what}: sem must be one of {', '.join(map(repr, ir.ATOMIC_SEMS))}; got {sem!r}")
    if scope not in ir.ATOMIC_SCOPES:
        raise SemanticError(f"{what}: scope must be one of {', '.join(map(repr, ir.ATOMIC_SCOPES))}; got {scope!r}")
    ptr = _pointer_operand(ptr, what)
    mask = _mask_operand(b, mask, what)
    _check_operand(value, f"{what}: value")
    _no_pointer(value, f"{what}'s value")
    elem = ptr.element.element
    if elem not in ir.ATOMIC_DTYPES:
        allowed = ", ".join(t.name for t in ir.ATOMIC_DTYPES)
        raise SemanticError(f"{what}: the pointee must be {allowed}; got {elem.name}")
    if ptr.shape != ():
        shape = ptr.shape
        others = [_shape_of(value)] + ([mask.shape] if mask is not None else [])
        if broadcast_shapes(shape, *others) != shape or any(len(s) > len(shape) for s in others):
            raise SemanticError(f"{what}: value {_describe(value)} and mask must broadcast to the pointer "
                                f"block's shape {list(shape)}")
        operands = [ptr, coerce(b, value, elem, shape)] + ([broadcast_to(b, mask, shape)] if mask is not None else [])
        b.emit("red", operands, [], op=op, sem=sem, scope=scope)
        return None
    if any(isinstance(v, Tensor) and v.shape != () for v in (value, mask)):
        raise SemanticError(f"{what}: through a scalar pointer, value and mask must be scalars")
    operands = [ptr, coerce(b, value, elem, ())] + ([mask] if mask is not None else [])
    return b.emit1("atomic", operands, BlockType(elem, ()), op=op, sem=sem, scope=scope)


def device_assert(b: Builder, condition: Any, message: Any) -> None:
    """Stop the launch with an error where any lane of ``condition`` (int1) is false
    (`language.device_assert`)."""
    if not isinstance(message, str):
        raise SemanticError(f"device_assert: message must be a constant string, got {_describe(message)}")
    cond = _mask_operand(b, condition, "device_assert")
    if cond is None:
        raise SemanticError("device_assert: condition must be an int1 block or scalar (a comparison)")
    b.emit("assert", [cond], [], message=message)


def cluster_gather(b: Builder, value: Any, size: Any) -> Tensor:
    """Every cluster program's scalar ``value``, a ``[size]`` block (`language.cluster_gather`)."""
    if isinstance(size, bool) or not isinstance(size, int) or size not in ir.CLUSTER_SIZES:
        raise SemanticError(f"cluster_gather: size must be a constexpr int in {ir.CLUSTER_SIZES}; "
                            f"got {_describe(size)}")
    if b.cluster_size is not None and size != b.cluster_size:
        raise SemanticError(f"cluster_gather: size {size} differs from the kernel's earlier cluster size "
                            f"{b.cluster_size}; a kernel runs in clusters of one size")
    _check_operand(value, "cluster_gather: value")
    _no_pointer(value, "cluster_gather's value")
    value = to_tensor(b, value)
    if value.shape != ():
        raise SemanticError(f"cluster_gather: value must be a scalar (reduce the block first); got {value.type!r}")
    b.cluster_size = size
    return b.emit1("cluster_gather", [value], BlockType(value.element, (size,)), size=size)


# ----------------------------------------------------------------------------- reductions


def reduce(b: Builder, kind: str, x: Any, axis: Any, keep_dims: bool = False) -> Tensor:
    """Reduce ``x`` along ``axis`` with ``kind`` in `ir.REDUCE_KINDS` (result types in
    `language.sum` and friends)."""
    if not isinstance(x, Tensor) or x.shape == ():
        raise SemanticError(f"dl.{kind} needs a block, got {_describe(x)}")
    _no_pointer(x, f"dl.{kind}")
    axis = _normalize_axis(axis, len(x.shape), f"dl.{kind}")
    d = x.element
    if kind in ("sum", "prod"):
        if d.is_floating:
            acc = float64 if d == float64 else float32
        else:
            acc = int64 if d == int64 else int32
    else:
        acc = int32 if d == int1 else float32 if _is_half(d) else d
    x = cast(b, x, acc)
    shape = x.shape[:axis] + x.shape[axis + 1:]
    if kind in ("argmax", "argmin"):
        result = b.emit1("argreduce", [x], BlockType(int32, shape), axis=axis, combine=kind)
    else:
        result = b.emit1("reduce", [x], BlockType(acc, shape), axis=axis, combine=kind)
    return expand_dims(b, result, axis) if keep_dims else result


def _welford_states(b: Builder, what: str, values: Sequence[Any]) -> list[Tensor]:
    """The operands of a Welford op broadcast together and cast to fp64 (if any is
    fp64) or fp32."""
    for v in values:
        _check_operand(v, what)
        _no_pointer(v, what)
    dtype = float64 if any(isinstance(v, Tensor) and v.element == float64 for v in values) else float32
    shape = broadcast_shapes(*[_shape_of(v) for v in values])
    return [coerce(b, v, dtype, shape) for v in values]


def welford_combine(b: Builder, mean_a: Any, m2_a: Any, weight_a: Any, mean_b: Any, m2_b: Any,
                    weight_b: Any) -> tuple[Tensor, Tensor, Tensor]:
    """Elementwise merge of Welford states a and b (see `language.welford_combine`)."""
    states = _welford_states(b, "dl.welford_combine", [mean_a, m2_a, weight_a, mean_b, m2_b, weight_b])
    t = states[0].type
    return tuple(Tensor(r) for r in b.emit("welford_combine", states, [t] * 3).results)


def welford(b: Builder, mean: Any, m2: Any, weight: Any, axis: Any,
            keep_dims: bool = False) -> tuple[Tensor, Tensor, Tensor]:
    """Reduce Welford states along ``axis`` (see `language.welford`)."""
    states = _welford_states(b, "dl.welford", [mean, m2, weight])
    t = states[0].type
    if t.is_scalar:
        raise SemanticError("dl.welford needs a block, got only scalars")
    axis = _normalize_axis(axis, len(t.shape), "dl.welford")
    out = t.with_shape(t.shape[:axis] + t.shape[axis + 1:])
    results = [Tensor(r) for r in b.emit("welford_combine", states, [out] * 3, axis=axis).results]
    return tuple(expand_dims(b, r, axis) if keep_dims else r for r in results)


# ----------------------------------------------------------------------------- scans


def scan(b: Builder, values: Any, axis: Any, reverse: Any, combine: Callable[[list[Tensor]], Any],
         what: str) -> list[Tensor]:
    """Inclusive scan of ``values`` (a block or a sequence of blocks) along ``axis``
    (`language.associative_scan`): one ``scan`` op.

    ``combine`` builds the combine region: it is called once, while ``b`` appends to
    the region's block, with the ``2n`` scalar region arguments (the lower indices'
    state, then the higher ones'), and returns the combined state: one value or a
    sequence of ``n`` (Tensors or numbers, cast to each value's type). Half-type
    values are scanned in fp32. Returns one Tensor per value.
    """
    values = list(values) if isinstance(values, (tuple, list)) else [values]
    if not values:
        raise SemanticError(f"{what} needs at least one block to scan")
    for v in values:
        if not isinstance(v, Tensor) or v.shape == ():
            raise SemanticError(f"{what} needs blocks, got {_describe(v)}")
        _no_pointer(v, what)
    if not isinstance(reverse, bool):
        raise SemanticError(f"{what}: reverse must be a constexpr bool, got {_describe(reverse)}")
    shape = broadcast_shapes(*[v.shape for v in values])
    axis = _normalize_axis(axis, len(shape), what)
    values = [broadcast_to(b, cast(b, v, float32) if _is_half(v.element) else v, shape) for v in values]
    args = [ir.Value(BlockType(v.element)) for v in values * 2]
    body, saved = ir.Block(), b.block
    b.block = body
    try:
        out = combine([Tensor(a) for a in args])
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        if len(out) != len(values):
            raise SemanticError(f"{what}: the combine function returns {len(out)} value(s) for "
                                f"{len(values)} scanned block(s)")
        yields = []
        for o, v in zip(out, values):
            _check_operand(o, f"{what}: the combine function's result")
            if isinstance(o, Tensor) and o.shape != ():
                raise SemanticError(f"{what}: the combine function must return scalars, got {_describe(o)}")
            yields.append(coerce(b, o, v.element, ()))
        b.emit("yield", yields, [])
    finally:
        b.block = saved
    op = b.emit("scan", values, [v.type for v in values], axis=axis, reverse=reverse, body=body, args=args)
    return [Tensor(r) for r in op.results]


def cumulative(b: Builder, kind: str, x: Any, axis: Any, reverse: Any) -> Tensor:
    """``dl.cumsum``/``dl.cumprod`` (``kind``): a scan of ``add``/``mul`` in the result
    type of the matching reduction (`reduce`)."""
    what = f"dl.{kind}"
    if not isinstance(x, Tensor) or x.shape == ():
        raise SemanticError(f"{what} needs a block, got {_describe(x)}")
    _no_pointer(x, what)
    d = x.element
    if d.is_floating:
        acc = float64 if d == float64 else float32
    else:
        acc = int64 if d == int64 else int32
    op = "add" if kind == "cumsum" else "mul"
    return scan(b, cast(b, x, acc), axis, reverse, lambda args: binary(b, op, args[0], args[1]), what)[0]
