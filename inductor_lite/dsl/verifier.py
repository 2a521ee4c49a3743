"""Checks that an `ir.Function` obeys the IR contract (the op table and invariants in
`ir.py`'s docstring): SSA (every operand defined before use, in scope), operand
counts and types per opcode. `Kernel.build_ir` runs it on every function the
frontend builds; backends may run it on IR from elsewhere.
"""

from __future__ import annotations

from . import ir
from .ir import BlockType, PointerType

_HALF = (ir.float16, ir.bfloat16)
_FLOAT_ONLY_FNS = {"exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
                   "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "isnan", "isinf",
                   "pow", "atan2", "fmod", "fast_dividef", "acos", "asin", "atan", "sinh", "cosh", "asinh",
                   "acosh", "atanh", "erfc", "erfcx", "erfinv", "lgamma", "cyl_bessel_i0", "cyl_bessel_i1",
                   "j0", "j1", "y0", "y1", "normcdfinv",
                   "signbit", "hypot", "copysign", "nextafter"}
_TWO_OPERAND_FNS = {"pow", "atan2", "fmod", "fast_dividef", "hypot", "copysign", "nextafter"}
_INTEGER_ONLY_OPS = {"floordiv", "and", "or", "xor", "shl", "shr"}
_COMBINE_OPCODES = {"constant", "binary", "compare", "math", "select", "cast", "bitcast"}
"""What a scan's combine region may hold: scalar arithmetic only."""


class VerificationError(Exception):
    """The IR breaks the contract; the message names the op."""


def verify(fn: ir.Function) -> None:
    """Check ``fn``.

    Raises:
        VerificationError: the first violation found.
    """
    _Verifier(fn).run()


def _is_ptr(t: BlockType) -> bool:
    return isinstance(t.element, PointerType)


class _Verifier:
    def __init__(self, fn: ir.Function):
        self.fn = fn

    def run(self) -> None:
        if len(self.fn.args) != len(self.fn.arg_values):
            raise VerificationError(f"{self.fn.name}: {len(self.fn.args)} args but {len(self.fn.arg_values)} values")
        for spec, value in zip(self.fn.args, self.fn.arg_values):
            if spec.type != value.type or not spec.type.is_scalar:
                raise VerificationError(f"{self.fn.name}: argument {spec.name} has type {value.type!r}, "
                                        f"spec says {spec.type!r} (must be a scalar)")
        self.block(self.fn.body, set(self.fn.arg_values), in_loop=False)

    def fail(self, op: ir.Op, message: str) -> VerificationError:
        where = f" (from {op.loc})" if op.loc is not None else ""
        return VerificationError(f"{self.fn.name}: {op.opcode}: {message}{where}")

    def block(self, block: ir.Block, defined: set, in_loop: bool) -> None:
        defined = set(defined)
        for i, op in enumerate(block.ops):
            for v in op.operands:
                if v not in defined:
                    raise self.fail(op, f"operand {v!r} is not defined before use")
            if op.opcode == "yield" and (not in_loop or i != len(block.ops) - 1):
                raise self.fail(op, "yield must be the last op of a loop body")
            check = getattr(self, "op_" + op.opcode, None)
            if check is None:
                raise self.fail(op, "unknown opcode")
            check(op, *[v.type for v in op.operands])
            if op.opcode == "for":
                self.block(op.attrs["body"], defined | {op.attrs["iv"], *op.attrs["carried"]}, in_loop=True)
            elif op.opcode == "scan":
                self.combine_region(op)
            defined.update(op.results)
        if in_loop and (not block.ops or block.ops[-1].opcode != "yield"):
            raise VerificationError(f"{self.fn.name}: a loop body does not end with yield")

    def expect(self, op: ir.Op, cond: bool, message: str) -> None:
        if not cond:
            raise self.fail(op, message)

    def results(self, op: ir.Op, n: int) -> None:
        self.expect(op, len(op.results) == n, f"expected {n} result(s), got {len(op.results)}")

    def no_half(self, op: ir.Op, *types: BlockType) -> None:
        self.expect(op, all(t.element not in _HALF for t in types), "half-type operand (must be cast to fp32)")

    # ------------------------------------------------------------------ opcodes

    def op_constant(self, op):
        self.results(op, 1)
        t, v = op.result.type, op.attrs.get("value")
        self.expect(op, not _is_ptr(t), "pointer constant")
        if t.element == ir.int1:
            self.expect(op, isinstance(v, bool), f"int1 constant {v!r} is not a bool")
        elif t.element.is_integer:
            self.expect(op, isinstance(v, int) and not isinstance(v, bool), f"integer constant {v!r}")
        else:
            self.expect(op, isinstance(v, float), f"float constant {v!r} is not a float")

    def op_program_id(self, op):
        self.results(op, 1)
        self.expect(op, op.result.type == BlockType(ir.int32) and op.attrs.get("axis") in (0, 1, 2),
                    "must be an int32 scalar with axis 0, 1 or 2")

    op_num_programs = op_program_id

    def op_arange(self, op):
        self.results(op, 1)
        n = op.attrs["end"] - op.attrs["start"]
        self.expect(op, op.result.type == BlockType(ir.int32, (n,)) and n & (n - 1) == 0,
                    f"result {op.result.type!r} for range of {n}")

    def op_splat(self, op, x):
        self.results(op, 1)
        r = op.result.type
        self.expect(op, x.is_scalar and not r.is_scalar and r.element == x.element, f"{x!r} -> {r!r}")

    def op_broadcast(self, op, x):
        self.results(op, 1)
        r = op.result.type
        self.expect(op, r.element == x.element and len(r.shape) == len(x.shape)
                    and all(a in (1, b) for a, b in zip(x.shape, r.shape)), f"{x!r} -> {r!r}")

    def op_expand_dims(self, op, x):
        self.results(op, 1)
        a = op.attrs["axis"]
        want = x.with_shape(x.shape[:a] + (1,) + x.shape[a:])
        self.expect(op, 0 <= a <= len(x.shape) and op.result.type == want, f"{x!r} -> {op.result.type!r}")

    def op_reshape(self, op, x):
        self.results(op, 1)
        r = op.result.type
        self.expect(op, r.element == x.element and r.numel == x.numel, f"{x!r} -> {r!r}")

    def op_binary(self, op, a, b):
        self.results(op, 1)
        kind = op.attrs.get("op")
        self.expect(op, kind in ir.BINARY_OPS, f"unknown op {kind!r}")
        self.expect(op, a.shape == b.shape and op.result.type == a, f"types {a!r}, {b!r} -> {op.result.type!r}")
        if _is_ptr(a):
            self.expect(op, kind == "add" and b.element in (ir.int32, ir.int64), "pointer + int32/int64 only")
            return
        self.expect(op, a == b, f"operand types differ: {a!r}, {b!r}")
        self.no_half(op, a)
        if a.element == ir.int1:
            self.expect(op, kind in ("and", "or", "xor"), f"{kind} on int1")
        if kind in _INTEGER_ONLY_OPS:
            self.expect(op, a.element.is_integer, f"{kind} on {a!r}")

    def op_compare(self, op, a, b):
        self.results(op, 1)
        self.expect(op, op.attrs.get("pred") in ir.COMPARE_PREDS, f"unknown pred {op.attrs.get('pred')!r}")
        self.expect(op, a == b and not _is_ptr(a) and op.result.type == a.with_element(ir.int1),
                    f"types {a!r}, {b!r} -> {op.result.type!r}")
        self.no_half(op, a)

    def op_math(self, op, x, *rest):
        self.results(op, 1)
        fn = op.attrs.get("fn")
        self.expect(op, fn in ir.MATH_FNS, f"unknown fn {fn!r}")
        self.expect(op, len(rest) == (1 if fn in _TWO_OPERAND_FNS else 0), "wrong operand count")
        self.expect(op, all(y == x for y in rest) and not _is_ptr(x), "operand types differ")
        self.no_half(op, x)
        if fn in _FLOAT_ONLY_FNS:
            self.expect(op, x.element.is_floating, f"{fn} on {x!r}")
        if fn == "not":
            self.expect(op, x.element.is_integer, f"not on {x!r}")
        want = x.with_element(ir.int1) if fn in ("isnan", "isinf", "signbit") else x
        self.expect(op, op.result.type == want, f"result {op.result.type!r}, expected {want!r}")

    def op_select(self, op, c, a, b):
        self.results(op, 1)
        self.expect(op, c == a.with_element(ir.int1) and a == b and op.result.type == a,
                    f"types {c!r}, {a!r}, {b!r} -> {op.result.type!r}")

    def op_cast(self, op, x):
        self.results(op, 1)
        r = op.result.type
        self.expect(op, not _is_ptr(x) and not _is_ptr(r) and r.shape == x.shape and r.element != x.element,
                    f"{x!r} -> {r!r}")
        self.expect(op, r.element != ir.int1, "cast to int1 (use compare ne 0)")
        if x.element in _HALF or r.element in _HALF:
            self.expect(op, ir.float32 in (x.element, r.element), f"{x!r} -> {r!r} must go through fp32")

    def op_bitcast(self, op, x):
        self.results(op, 1)
        r = op.result.type
        self.expect(op, not _is_ptr(x) and not _is_ptr(r) and r.shape == x.shape
                    and r.element.bits == x.element.bits and ir.int1 not in (r.element, x.element),
                    f"{x!r} -> {r!r}")

    def op_load(self, op, ptr, *rest):
        self.results(op, 1)
        self.expect(op, _is_ptr(ptr) and len(rest) in (0, 2), "load(ptr) or load(ptr, mask, other)")
        policy = op.attrs.get("eviction_policy")
        self.expect(op, policy is None or policy in ir.EVICTION_POLICIES, f"eviction_policy {policy!r}")
        modifier = op.attrs.get("cache_modifier")
        self.expect(op, modifier is None or modifier in ir.CACHE_MODIFIERS, f"cache_modifier {modifier!r}")
        elem = ptr.element.element
        if rest:
            mask, other = rest
            self.expect(op, mask == ptr.with_element(ir.int1) and other == ptr.with_element(elem),
                        f"mask {mask!r} / other {other!r} for {ptr!r}")
        self.expect(op, op.result.type == ptr.with_element(elem), f"result {op.result.type!r} for {ptr!r}")

    def op_store(self, op, ptr, value, *rest):
        self.results(op, 0)
        self.expect(op, _is_ptr(ptr) and value == ptr.with_element(ptr.element.element),
                    f"value {value!r} for {ptr!r}")
        self.expect(op, len(rest) == 0 or rest[0] == ptr.with_element(ir.int1), "mask type")

    def op_atomic(self, op, ptr, value, *rest):
        self.results(op, 1)
        self.expect(op, op.attrs.get("op") in ir.ATOMIC_OPS and op.attrs.get("sem") in ir.ATOMIC_SEMS
                    and op.attrs.get("scope") in ir.ATOMIC_SCOPES, f"attrs {op.attrs!r}")
        self.expect(op, _is_ptr(ptr) and ptr.is_scalar and ptr.element.element in ir.ATOMIC_DTYPES
                    and value == ptr.with_element(ptr.element.element),
                    f"value {value!r} for {ptr!r}")
        self.expect(op, len(rest) == 0 or rest[0] == ptr.with_element(ir.int1), "mask type")
        self.expect(op, op.result.type == value, f"result {op.result.type!r}")

    def op_red(self, op, ptr, value, *rest):
        self.results(op, 0)
        self.expect(op, op.attrs.get("op") in ir.ATOMIC_OPS and op.attrs.get("sem") in ir.ATOMIC_SEMS
                    and op.attrs.get("scope") in ir.ATOMIC_SCOPES, f"attrs {op.attrs!r}")
        self.expect(op, _is_ptr(ptr) and not ptr.is_scalar and ptr.element.element in ir.ATOMIC_DTYPES
                    and value == ptr.with_element(ptr.element.element), f"value {value!r} for {ptr!r}")
        self.expect(op, len(rest) == 0 or rest[0] == ptr.with_element(ir.int1), "mask type")

    def op_assert(self, op, cond):
        self.results(op, 0)
        self.expect(op, cond.element == ir.int1 and isinstance(op.attrs.get("message"), str), f"operand {cond!r}")

    def op_cluster_gather(self, op, x):
        self.results(op, 1)
        size = op.attrs.get("size")
        self.expect(op, size in ir.CLUSTER_SIZES and size == self.fn.cluster_size, f"size {size!r}")
        self.expect(op, x.is_scalar and not _is_ptr(x), f"operand {x!r}")
        self.expect(op, op.result.type == ir.BlockType(x.element, (size,)), f"result {op.result.type!r}")

    def _reduced(self, op, x) -> tuple[int, ...]:
        a = op.attrs.get("axis")
        self.expect(op, isinstance(a, int) and 0 <= a < len(x.shape), f"axis {a!r} for {x!r}")
        self.expect(op, not _is_ptr(x), "reduce of pointers")
        self.no_half(op, x)
        return x.shape[:a] + x.shape[a + 1:]

    def op_reduce(self, op, x):
        self.results(op, 1)
        self.expect(op, op.attrs.get("combine") in ("sum", "prod", "max", "min"), "combine")
        self.expect(op, op.result.type == x.with_shape(self._reduced(op, x)), f"{x!r} -> {op.result.type!r}")
        self.expect(op, x.element != ir.int1, "reduce of int1")

    def op_argreduce(self, op, x):
        self.results(op, 1)
        self.expect(op, op.attrs.get("combine") in ("argmax", "argmin"), "combine")
        self.expect(op, op.result.type == BlockType(ir.int32, self._reduced(op, x)), f"{x!r} -> {op.result.type!r}")

    def op_for(self, op, lb, ub, step, *inits):
        iv, carried, body = op.attrs["iv"], op.attrs["carried"], op.attrs["body"]
        self.expect(op, lb == ub == step == iv.type and iv.type.element in (ir.int32, ir.int64)
                    and iv.type.is_scalar, f"bounds {lb!r}, {ub!r}, {step!r}, iv {iv.type!r}")
        types = list(inits)
        self.expect(op, [c.type for c in carried] == types and [r.type for r in op.results] == types,
                    "carried / result types differ from the inits")
        if body.ops and body.ops[-1].opcode == "yield":
            self.expect(op, [v.type for v in body.ops[-1].operands] == types, "yield types differ from the inits")

    def op_scan(self, op, *values):
        self.results(op, len(values))
        a = op.attrs.get("axis")
        self.expect(op, len(values) >= 1 and all(v.shape == values[0].shape for v in values)
                    and values[0].shape != (), f"operands {list(values)!r} must be blocks of one shape")
        self.expect(op, isinstance(a, int) and 0 <= a < len(values[0].shape), f"axis {a!r}")
        self.expect(op, isinstance(op.attrs.get("reverse"), bool), "reverse must be a bool")
        self.expect(op, not any(_is_ptr(v) for v in values), "scan of pointers")
        self.no_half(op, *values)
        self.expect(op, [r.type for r in op.results] == list(values), "result types differ from the operands")
        args = op.attrs.get("args", [])
        self.expect(op, [v.type for v in args] == [BlockType(v.element) for v in values] * 2,
                    "the combine region's arguments must be scalars of the operands' types, twice")

    def combine_region(self, op: ir.Op) -> None:
        """A scan's combine region: scalar straight-line code over its own arguments,
        ending with a yield of one value per operand, of the operands' types."""
        body = op.attrs["body"]
        defined = set(op.attrs["args"])
        for i, inner in enumerate(body.ops):
            if inner.opcode == "yield":
                self.expect(inner, i == len(body.ops) - 1, "yield must be the last op of a combine region")
                self.expect(inner, [v.type for v in inner.operands] == [BlockType(r.type.element) for r in op.results],
                            "the combine region must yield one scalar per operand, of its type")
            else:
                self.expect(inner, inner.opcode in _COMBINE_OPCODES, "not allowed in a combine region")
                self.expect(inner, all(r.type.is_scalar for r in inner.results), "block value in a combine region")
            for v in inner.operands:
                self.expect(inner, v in defined, f"operand {v!r} is not defined in the combine region")
            check = getattr(self, "op_" + inner.opcode)
            check(inner, *[v.type for v in inner.operands])
            defined.update(inner.results)
        self.expect(op, bool(body.ops) and body.ops[-1].opcode == "yield", "the combine region must end with yield")

    def op_yield(self, op, *values):
        self.results(op, 0)

    def op_welford_combine(self, op, *operands):
        self.results(op, 3)
        x = operands[0] if operands else None
        self.expect(op, x is not None and all(t == x for t in operands) and x.element in (ir.float32, ir.float64),
                    f"operands {list(operands)!r} must share one fp32 or fp64 type")
        if op.attrs.get("axis") is not None:
            self.expect(op, len(operands) == 3, f"3 operands (mean, m2, weight) along an axis, got {len(operands)}")
            want = x.with_shape(self._reduced(op, x))
        else:
            self.expect(op, len(operands) == 6, f"6 operands (two mean, m2, weight states), got {len(operands)}")
            want = x
        self.expect(op, all(r.type == want for r in op.results), f"results must be {want!r}")
