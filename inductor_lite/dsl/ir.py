"""Typed block IR: what the DSL frontend produces and both backends consume.

A kernel is one `Function`: typed arguments and a `Block` of `Op`s in SSA form.
Every value is a *block tensor* (`BlockType`): an element type and a static shape;
shape ``()`` is a scalar that every thread of the program holds. The IR has no
layouts: which thread owns which element is decided by the NVPTX lowering, and the
interpreter ignores the question entirely.

The frontend makes every op explicit: operands of a binary op already have the
same shape (``broadcast``/``splat`` inserted) and the same element type (``cast``
inserted), following Triton's promotion rules. Backends never promote.

Opcodes (``Op.opcode``), their operands, attributes and result:

===============  ==========================  =============================  ==================
opcode           operands                    attrs                          result
===============  ==========================  =============================  ==================
constant         -                           value (python number)          scalar or splat
program_id       -                           axis (0, 1, 2)                 i32 scalar
num_programs     -                           axis                           i32 scalar
arange           -                           start, end (ints)              i32 [end-start]
splat            scalar                      -                              block of `shape`
broadcast        block                       -                              block, size-1 dims grown
expand_dims      block                       axis                           rank + 1
reshape          block                       -                              same numel
binary           a, b                        op (BINARY_OPS)                same type as a
compare          a, b                        pred (COMPARE_PREDS)           i1, same shape
math             x (, y)                     fn (MATH_FNS)                  same type as x
select           cond(i1), a, b              -                              type of a
cast             x                           -                              result type
bitcast          x                           -                              result type
load             ptr (, mask (, other))      [cache_modifier, eviction_policy] pointee type
store            ptr, value (, mask)         -                              none
atomic           ptr, value (, mask)         op, sem, scope (ATOMIC_*)      old value (scalar)
red              ptr, value (, mask)         op, sem, scope (ATOMIC_*)      none
assert           cond                        message                        none
cluster_gather   x (scalar)                  size (CLUSTER_SIZES)           [size] of x's type
reduce           x                           axis, combine (REDUCE_KINDS)   x's shape less axis
argreduce        x                           axis, combine ('argmax'|...)   i32 indices
welford_combine  mean_a, m2_a, w_a,          -                              3: mean, m2, w
                 mean_b, m2_b, w_b (6)
welford_combine  mean, m2, w (3)             axis                           3, shape less axis
scan             values... (n)               axis, reverse, body, args      n, shapes of values
for              lb, ub, step, inits...      body (Block), iv, carried      one per init
yield            values...                   -                              none
===============  ==========================  =============================  ==================

Semantics follow Triton (and so C) where Python and C differ: integer ``//`` and
``%`` truncate toward zero; float ``/`` is IEEE division; shifts are arithmetic for
signed types. ``maximum``/``minimum`` and the ``max``/``min`` reductions propagate
NaN as torch does. Half types (fp16, bf16) are stored as such but every arithmetic
op on them is computed in fp32: the frontend casts up before and down after.

Invariants the frontend guarantees (so backends need not handle the other cases):

- ``binary``, ``compare``, ``math``, ``reduce``, ``argreduce`` and ``welford_combine``
  never see fp16/bf16 operands; half types appear only in ``constant``, ``load``, ``store``, ``select``,
  ``cast``, ``bitcast`` and the shape ops (splat, broadcast, expand_dims, reshape).
- A ``cast`` with a half type on one side has fp32 on the other. Casts never target
  int1: the frontend emits ``compare ne 0`` instead. Float-to-int casts truncate toward
  zero; int widening sign-extends signed types and zero-extends uint8 and int1;
  float narrowing rounds to nearest even.
- Pointer arithmetic is ``binary add`` with a pointer block first and an int32 or int64
  block second (offset in elements); the result has the type of the pointer operand.
- ``binary`` ``floordiv`` only has integer operands; ``mod`` on floats is C ``fmod``
  (sign of the dividend, as Triton's ``%``); ``and or xor shl shr`` are integer-only;
  ``add sub mul`` etc. never see int1 (the frontend widens to int32 first), while
  ``and or xor`` and ``math not`` (bitwise complement) do.
- ``math``: ``isnan``/``isinf``/``signbit`` give int1; ``round`` rounds half to even (torch.round,
  libdevice ``rint``); ``pow``/``atan2``/``fmod``/``fast_dividef``/``hypot``/``copysign``/``nextafter``
  take two operands of one float type;
  ``neg`` and ``abs`` take floats or integers, ``not`` integers only (bitwise
  complement, logical not on int1), the others floats only.
- ``load`` with a mask always has ``other`` (already of the pointee type); all operands
  of ``load``/``store`` have the same shape, and ``store``'s value has the pointee type.
- ``atomic`` operands are scalars: a pointer to int32, int64, float32 or float64, a
  value of the pointee type and an optional int1 mask; the result (the old value, 0
  where masked off) has the pointee type.
- ``red`` is the block form of ``atomic``: pointer, value and mask blocks of one
  shape (the same pointee types); every active lane updates its address, lanes and
  programs sharing one all applying their update, in an unspecified order.
- ``assert``'s operand is an int1 block or scalar; the launch fails where a lane
  is false (the interpreter raises ``AssertionError``, the GPU traps).
- ``cluster_gather``'s operand is a non-pointer scalar; every ``cluster_gather`` of a
  function has the same ``size`` (`Function.cluster_size`), and its result is
  ``[size]`` of the operand's type.
- ``reduce`` returns its operand's element type (the frontend casts first: sums of
  small ints run in int32, sums of halves in fp32); ``argreduce`` returns int32 indices,
  ties go to the first index and NaN counts as both the maximum and the minimum
  (torch.argmax/argmin).
- ``welford_combine`` merges Welford states (mean, M2 = sum of squared deviations from
  the mean, weight = element count as a float). All operands have one float type,
  fp32 or fp64 (halves and integers are cast first), and one shape; so do the three
  results. With 6 operands and no ``axis`` it combines state a with state b
  elementwise; with 3 operands and ``axis`` it reduces the states along ``axis``.
  Both use the parallel update of Chan, Golub and LeVeque ("Updating Formulae and a
  Pairwise Algorithm for Computing Sample Variances", 1979; TorchInductor's
  ``welford_combine``): ``delta = mean_b - mean_a; w = w_a + w_b; f = w_b / w``, or 0
  where ``w == 0``; ``mean = mean_a + delta * f; m2 = m2_a + m2_b + delta * delta *
  w_a * f``. So a weight-0 state changes nothing (its mean and M2 must be finite, e.g.
  0) and two weight-0 states give no NaN. The order in which a reduction combines
  states is unspecified (backends may differ in the last bits).
- ``scan`` is an inclusive scan (Triton's ``tl.associative_scan``) of its ``n``
  operands (one shape, no pointers, no half types) along ``axis``: result ``k`` has
  operand ``k``'s type. ``attrs['body']`` is the combine region: a `Block` over the
  ``2n`` scalar values ``attrs['args']`` (the state of the lower indices, then of the
  higher ones, each of its operand's element type) that ends with a ``yield`` of the
  ``n`` combined values; it uses only its own values, and holds no memory, loop,
  reduction or scan ops. With ``reverse`` the scan runs from the last index down and
  the first half of ``args`` covers the higher indices. The combine must be
  associative; the order of combination is unspecified. `Block.walk` does not enter
  the region (its values are scalars that only the scan's lowering sees).
- ``for`` iterates ``iv = lb, lb + step, ...`` while ``iv < ub`` (``step > 0``); lb, ub,
  step and iv share one integer type (int32, or int64 if any bound is int64).
- ``Op.loc`` (a `SourceLoc`, may be None) names the kernel source line that made the op.

`verifier.verify` checks all of this; ``Kernel.build_ir`` runs it on every function.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Any, Optional, Union

BINARY_OPS = (
    "add", "sub", "mul", "truediv", "floordiv", "mod",
    "and", "or", "xor", "shl", "shr", "maximum", "minimum",
)
COMPARE_PREDS = ("lt", "le", "gt", "ge", "eq", "ne")
EVICTION_POLICIES = ("evict_first", "evict_last")
"""A load's cache hint (Triton's names): read-once data leaves the caches first, or
data read again stays longest. Hints change speed, never results."""
CACHE_MODIFIERS = (".ca", ".cg", ".cv")
"""A load's PTX cache operator (Triton's ``cache_modifier``): cache in L1 and L2
(``.ca``, the default), in L2 only (``.cg``: data read once, so it leaves L1 to data
read again, such as a norm's weight), or fetch again (``.cv``). Speed, never results."""
MATH_FNS = (
    "neg", "not", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt",
    "rsqrt", "sin", "cos", "tan", "tanh", "sigmoid", "erf", "floor", "ceil",
    "round", "trunc", "pow", "atan2", "fmod", "fast_dividef", "isnan", "isinf",
    "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erfc", "erfcx",
    "erfinv", "normcdfinv", "lgamma", "cyl_bessel_i0", "cyl_bessel_i1", "j0", "j1", "y0", "y1",
    "signbit", "hypot", "copysign", "nextafter",
)
REDUCE_KINDS = ("sum", "prod", "max", "min", "argmax", "argmin")
CLUSTER_SIZES = (2, 4, 8)
"""Programs per thread-block cluster a ``cluster_gather`` may name: powers of two up to
8, CUDA's portable cluster size limit."""
ATOMIC_OPS = ("add",)
ATOMIC_SEMS = ("relaxed", "acquire", "release", "acq_rel")
ATOMIC_SCOPES = ("cta", "gpu", "sys")
"""An ``atomic``'s read-modify-write, memory ordering and scope (PTX ``atom``'s
``.op``, ``.sem`` and ``.scope``)."""


@dataclass(frozen=True)
class DType:
    """A scalar element type.

    ``name`` is the DSL spelling (``float32``, ``bfloat16``, ``int64``, ``int1`` ...),
    ``bits`` the storage width, ``kind`` one of ``float``, ``int``, ``uint``, ``bool``.
    """

    name: str
    bits: int
    kind: str

    @property
    def is_floating(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint", "bool")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    def __repr__(self) -> str:
        return self.name


float16 = DType("float16", 16, "float")
bfloat16 = DType("bfloat16", 16, "float")
float32 = DType("float32", 32, "float")
float64 = DType("float64", 64, "float")
int1 = DType("int1", 1, "bool")
int8 = DType("int8", 8, "int")
int16 = DType("int16", 16, "int")
int32 = DType("int32", 32, "int")
int64 = DType("int64", 64, "int")
uint8 = DType("uint8", 8, "uint")
DTYPES = {d.name: d for d in (float16, bfloat16, float32, float64, int1, int8, int16, int32, int64, uint8)}

ATOMIC_DTYPES = (int32, int64, float32, float64)
"""Pointee types an ``atomic`` may update."""


@dataclass(frozen=True)
class PointerType:
    """A global-memory pointer to elements of ``element`` (address space 1)."""

    element: DType

    @property
    def name(self) -> str:
        return f"ptr<{self.element.name}>"

    def __repr__(self) -> str:
        return self.name


ElementType = Union[DType, PointerType]


@dataclass(frozen=True)
class BlockType:
    """Element type plus static shape; ``shape == ()`` is a scalar."""

    element: ElementType
    shape: tuple[int, ...] = ()

    @property
    def is_scalar(self) -> bool:
        return self.shape == ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def with_shape(self, shape: tuple[int, ...]) -> "BlockType":
        return BlockType(self.element, tuple(shape))

    def with_element(self, element: ElementType) -> "BlockType":
        return BlockType(element, self.shape)

    def __repr__(self) -> str:
        if self.is_scalar:
            return repr(self.element)
        return f"{self.element!r}[{', '.join(map(str, self.shape))}]"


_value_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """An SSA value. ``name`` is only for printing."""

    type: BlockType
    name: str = ""
    id: int = field(default_factory=lambda: next(_value_ids))

    def __repr__(self) -> str:
        return f"%{self.name or self.id}: {self.type!r}"


@dataclass(frozen=True)
class SourceLoc:
    """Where an op came from: file name, 1-based line number in that file, line text."""

    filename: str
    lineno: int
    line: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno}: {self.line.strip()}"


@dataclass(eq=False)
class Op:
    """One operation. ``results`` is empty for store/yield, one value for most ops,
    three for welford_combine and one per loop-carried value for ``for``.
    ``loc``: the source line that produced it, for error messages (may be None)."""

    opcode: str
    operands: list[Value]
    results: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: Optional[SourceLoc] = None

    @property
    def result(self) -> Value:
        assert len(self.results) == 1, f"{self.opcode} has {len(self.results)} results"
        return self.results[0]


@dataclass(eq=False)
class Block:
    """A straight-line list of ops; the body of a function or of a ``for`` loop."""

    ops: list[Op] = field(default_factory=list)

    def walk(self):
        """Yield every op, loop bodies included, in program order."""
        for op in self.ops:
            yield op
            if op.opcode == "for":
                yield from op.attrs["body"].walk()


@dataclass(frozen=True)
class ArgSpec:
    """How one kernel argument was specialised.

    ``divisible_by_16``: a pointer whose address is 16-byte aligned, or an integer
    divisible by 16. ``equal_to_1``: an integer argument that was 1 (folded to a
    constant). Both are part of the compile cache key.
    """

    name: str
    type: BlockType
    divisible_by_16: bool = False
    equal_to_1: bool = False


@dataclass(eq=False)
class Function:
    """A kernel: its name, its runtime arguments (constexprs are already folded in),
    the values standing for those arguments, and its body.

    ``for`` ops keep their body in ``attrs['body']`` (a `Block`), the induction
    variable in ``attrs['iv']`` and the values that carry state into the body in
    ``attrs['carried']`` (one per init, same types); the body ends with a ``yield``
    of the next carried values. ``ftz``: libdevice math may flush subnormal inputs and
    results to zero (the kernel's ``@dl.kernel(ftz=True)``).
    """

    name: str
    args: list[ArgSpec]
    arg_values: list[Value]
    body: Block
    constexprs: dict[str, Any] = field(default_factory=dict)
    ftz: bool = False

    def walk(self):
        """Yield every op, loop bodies included, in program order."""
        return self.body.walk()

    @functools.cached_property
    def cluster_size(self) -> int:
        """Programs per thread-block cluster: the ``size`` of its ``cluster_gather``
        ops, 1 (no clusters) without any (found once: a built function is not changed)."""
        return next((op.attrs["size"] for op in self.walk() if op.opcode == "cluster_gather"), 1)


def format_function(fn: Function) -> str:
    """Readable text of the IR, for debug dumps and error messages."""
    attrs = " ftz" if fn.ftz else ""
    lines = [f"func {fn.name}({', '.join(f'{a.name}: {a.type!r}' for a in fn.args)}){attrs} {{"]

    def name(v: Optional[Value]) -> str:
        return f"%{v.name or v.id}"

    def emit(block: Block, indent: str):
        for op in block.ops:
            res = ", ".join(name(r) for r in op.results)
            lhs = f"{res} = " if res else ""
            attrs = {k: v for k, v in op.attrs.items() if k not in ("body", "iv", "carried", "args")}
            attr_s = f" {attrs}" if attrs else ""
            types = ", ".join(repr(r.type) for r in op.results)
            lines.append(f"{indent}{lhs}{op.opcode}({', '.join(name(o) for o in op.operands)}){attr_s} : {types}")
            if op.opcode == "for":
                carried = ", ".join(name(c) for c in op.attrs["carried"])
                lines.append(f"{indent}  ^body({name(op.attrs['iv'])}; {carried}):")
                emit(op.attrs["body"], indent + "    ")
            elif op.opcode == "scan":
                lines.append(f"{indent}  ^combine({', '.join(name(a) for a in op.attrs['args'])}):")
                emit(op.attrs["body"], indent + "    ")

    emit(fn.body, "  ")
    lines.append("}")
    return "\n".join(lines)
