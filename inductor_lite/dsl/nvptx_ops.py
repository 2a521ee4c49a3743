"""Scalar code generation for elementwise ops: one LLVM value in, one out.

Block values are lists of registers, so every elementwise op of the block IR maps
one of these functions over the registers. Semantics follow torch (and C where the
DSL says so): ordered float compares except ``ne``; ``maximum``/``minimum`` propagate
NaN; integer ``//``/``%`` truncate; float ``%`` is C ``fmod``; float->int casts
truncate toward zero; fp32->fp16/bf16 rounds to nearest even; bool casts compare with
zero; fp64->fp16/bf16 and int->fp16/bf16 go through fp32 as c10 does.

Float ``+``, ``-`` and ``*`` carry LLVM's ``contract`` flag, so ``a * b + c`` becomes
one ``fma.rn`` with a single rounding: what nvcc does by default (``--fmad=true``, so
eager's CUDA kernels do it too) and Triton does unless ``enable_fp_fusion=False``. It
halves the instructions of polynomial math (erf, GELU) and is never less accurate
than the two roundings it replaces, though results can differ from the interpreter's
in the last bit.

All transcendental math goes through libdevice (``__nv_*``): NVPTX cannot lower LLVM's
``llvm.exp``/``llvm.log``/... intrinsics and aborts the process on them. ``sqrt``
uses ``llvm.sqrt`` (lowered to IEEE ``sqrt.rn``; libdevice's version would follow
``__CUDA_PREC_SQRT``, which NVVMReflect resolves to the approximate one).

bfloat16 lives in registers as its ``i16`` bit pattern; fp16 as LLVM ``half``.
Arithmetic on either is done in fp32. fp32->bf16 is an LLVM ``fptrunc`` to ``bfloat``
(`BF16`), so LLVM picks the target's instructions: ``cvt.rn.bf16x2.f32`` /
``cvt.rn.bf16.f32`` on sm_80+ (a NaN becomes the canonical 0x7FFF; torch writes
0x7FC0, also a NaN), integer rounding on sm_75. bf16->fp32 is a shift left by 16;
a half of a loaded 32-bit word is widened from the word itself, one ``and`` (high
half) or ``shl`` (low half) a value (`ScalarCodegen.to_f32`).
"""

from __future__ import annotations

import struct
from typing import Optional

from llvmlite import ir as llir

from . import ir

I1, I8, I16, I32, I64 = (llir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = llir.HalfType(), llir.FloatType(), llir.DoubleType()
GLOBAL_PTR = llir.PointerType(addrspace=1)
# LLVM's fast-math flag that lets a multiply and the add it feeds become one fma.
FP_CONTRACT = ("contract",)


class _BFloatType(llir.Type):
    """LLVM's ``bfloat`` (llvmlite has no class for it). Registers hold bf16 as ``i16``;
    this type only appears around conversions, so LLVM sees them as float casts."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, _BFloatType)

    def __hash__(self) -> int:
        return hash(_BFloatType)


BF16 = _BFloatType()
SHARED_PTR = llir.PointerType(addrspace=3)


class LoweringError(ValueError):
    """The block IR asks for something this backend cannot generate.

    ``loc``: the `ir.SourceLoc` of the op being lowered, filled in by the lowering.
    """

    loc = None


def reg_type(t: ir.ElementType) -> llir.Type:
    """LLVM type of one element in registers."""
    if isinstance(t, ir.PointerType):
        return GLOBAL_PTR
    if t.is_floating:
        return {16: F16 if t.name == "float16" else I16, 32: F32, 64: F64}[t.bits]
    return llir.IntType(t.bits)


def mem_type(t: ir.ElementType) -> llir.Type:
    """LLVM type of one element in memory (bool is a byte, as in torch)."""
    if isinstance(t, ir.DType) and t.kind == "bool":
        return I8
    return reg_type(t)


def bf16_bits(value: float) -> int:
    """bfloat16 bit pattern of ``value``, rounded to nearest even (NaN -> 0x7FC0)."""
    if value != value:
        return 0x7FC0
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _equal_constant(v: llir.Value, value: int) -> bool:
    return isinstance(v, llir.Constant) and v.constant == value


def _half_bits(x: llir.Value) -> llir.Value:
    """The 16-bit integer a half value ``x`` was bitcast from, else ``x`` itself."""
    return x.operands[0] if isinstance(x, llir.CastInstr) and x.opname == "bitcast" else x


def _packed_half(x: llir.Value) -> Optional[tuple[llir.Value, bool]]:
    """(word, high) where the 16-bit value ``x`` (possibly bitcast) is ``trunc(word)``
    (low half) or ``trunc(word >> 16)`` (high half) of a 32-bit ``word``, as
    `MemoryCodegen` unpacks loads; else None."""
    bits = _half_bits(x)
    if not (isinstance(bits, llir.CastInstr) and bits.opname == "trunc" and bits.operands[0].type == I32):
        return None
    word = bits.operands[0]
    if isinstance(word, llir.Instruction) and word.opname == "lshr" and _equal_constant(word.operands[1], 16):
        return word.operands[0], True
    return word, False


def constant(t: ir.ElementType, value) -> llir.Constant:
    """An LLVM constant of element type ``t``."""
    if isinstance(t, ir.PointerType):
        if value not in (0, None):
            raise LoweringError(f"pointer constant {value!r}: only null pointers can be constants")
        return llir.Constant(GLOBAL_PTR, None)
    if t.kind == "bool":
        return llir.Constant(I1, int(bool(value)))
    if t.name == "bfloat16":
        return llir.Constant(I16, bf16_bits(float(value)))
    if t.is_floating:
        return llir.Constant(reg_type(t), float(value))
    v = int(value) & ((1 << t.bits) - 1)
    if t.is_signed and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return llir.Constant(reg_type(t), v)


class ScalarCodegen:
    """Emits scalar LLVM code through ``self.b`` (an `llvmlite.ir.IRBuilder`).

    Subclasses provide ``self.b``, ``self.module`` and ``self.ftz`` (the kernel flushes
    subnormals, `ir.Function.ftz`).
    """

    b: llir.IRBuilder
    module: llir.Module
    ftz: bool
    # Registers that `divide` tests and branches on together.
    DIVIDE_CHUNK = 8

    # -- declarations -------------------------------------------------------------
    def declare(self, name: str, ret: llir.Type, args: list[llir.Type]) -> llir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = llir.Function(self.module, llir.FunctionType(ret, args), name=name)
        return fn

    def call(self, name: str, ret: llir.Type, args: list[llir.Value], name_hint: str = "") -> llir.Value:
        return self.b.call(self.declare(name, ret, [a.type for a in args]), args, name=name_hint)

    def libdevice(self, base: str, x: list[llir.Value], t: llir.Type) -> llir.Value:
        """Call ``__nv_<base>f`` (fp32) or ``__nv_<base>`` (fp64)."""
        suffix = "f" if t == F32 else ""
        return self.call(f"__nv_{base}{suffix}", t, x)

    # -- half <-> fp32 -------------------------------------------------------------
    def to_f32(self, x: llir.Value, t: ir.DType) -> llir.Value:
        if t.name == "bfloat16":
            # The bf16 bits are the fp32 value's upper half. A half of a loaded word is
            # widened from the word (one and/shift): LLVM would otherwise turn the
            # unpacking of a vector load into 16-bit moves and widen each (two
            # instructions a value in SASS).
            packed = _packed_half(x)
            if packed is None:
                wide = self.b.shl(self.b.zext(x, I32), llir.Constant(I32, 16))
            else:
                word, high = packed
                wide = (self.b.and_(word, llir.Constant(I32, 0xFFFF0000)) if high
                        else self.b.shl(word, llir.Constant(I32, 16)))
            return self.b.bitcast(wide, F32)
        if t.name == "float16":
            return self.b.fpext(x, F32)
        return x

    def widen_at_use(self, x: llir.Value, t: ir.DType) -> llir.Value:
        """fp32 value of fp16/bf16 register ``x``, as `to_f32` computes it, but opaque to
        LLVM (inline PTX with side effects) so that one per use survives common
        subexpression elimination: a rematerialised widening (see
        `nvptx.plan_rematerialization`). Where ``x`` is a half of a loaded 32-bit word
        (``trunc(word)`` or ``trunc(word >> 16)``, as `MemoryCodegen` unpacks them), the
        widening reads the word, so only the packed words stay live.

        Raises:
            LoweringError: ``t`` is not fp16 or bf16.
        """
        if not self.is_half(t):
            raise LoweringError(f"widen_at_use widens fp16/bf16, not {t}")
        packed = _packed_half(x)
        if packed is None:
            bits = _half_bits(x)
            packed = self.b.zext(bits if bits.type == I16 else self.b.bitcast(bits, I16), I32), False
        word, high = packed
        if t.name == "bfloat16":  # the bf16 bits are the fp32 value's upper half
            asm = "and.b32 $0, $1, 0xffff0000;" if high else "shl.b32 $0, $1, 16;"
        else:
            asm = f"{{.reg .b16 lo, hi;\n\tmov.b32 {{lo, hi}}, $1;\n\tcvt.f32.f16 $0, {'hi' if high else 'lo'};}}"
        return self.b.call(llir.InlineAsm(llir.FunctionType(F32, [I32]), asm, "=f,r", side_effect=True), [word])

    def from_f32(self, x: llir.Value, t: ir.DType) -> llir.Value:
        if t.name == "bfloat16":
            # LLVM picks the instructions for the target: cvt.rn.bf16.f32 on sm_80+
            # (paired into cvt.rn.bf16x2.f32 where two are packed), integer rounding on
            # sm_75.
            return self.b.bitcast(self.b.fptrunc(x, BF16), I16)
        if t.name == "float16":
            return self.b.fptrunc(x, F16)
        return x

    @staticmethod
    def is_half(t) -> bool:
        return isinstance(t, ir.DType) and t.is_floating and t.bits == 16

    # -- elementwise ops -------------------------------------------------------------
    def binary(self, kind: str, a: llir.Value, c: llir.Value, t: ir.ElementType, name: str = "") -> llir.Value:
        """``a <kind> c`` for elements of type ``t`` (``kind`` from `ir.BINARY_OPS`)."""
        b = self.b
        if isinstance(t, ir.PointerType):
            raise LoweringError(f"binary {kind} on pointers must be lowered as pointer arithmetic")
        if self.is_half(t):
            r = self.binary(kind, self.to_f32(a, t), self.to_f32(c, t), ir.float32)
            return self.from_f32(r, t)
        if t.is_floating:
            if kind == "add":
                return b.fadd(a, c, name=name, flags=FP_CONTRACT)
            if kind == "sub":
                return b.fsub(a, c, name=name, flags=FP_CONTRACT)
            if kind == "mul":
                return b.fmul(a, c, name=name, flags=FP_CONTRACT)
            if kind == "truediv":
                return b.fdiv(a, c, name=name)
            if kind == "floordiv":
                return self.libdevice("floor", [b.fdiv(a, c)], a.type)
            if kind == "mod":
                return self.libdevice("fmod", [a, c], a.type)
            if kind in ("maximum", "minimum"):
                return self.call(f"llvm.{kind}.{'f32' if a.type == F32 else 'f64'}", a.type, [a, c], name)
            raise LoweringError(f"binary {kind} is not defined on {t}")
        signed = t.is_signed
        if kind == "add":
            return b.add(a, c, name=name)
        if kind == "sub":
            return b.sub(a, c, name=name)
        if kind == "mul":
            return b.mul(a, c, name=name)
        if kind == "floordiv":
            return (b.sdiv if signed else b.udiv)(a, c, name=name)
        if kind == "mod":
            return (b.srem if signed else b.urem)(a, c, name=name)
        if kind == "and":
            return b.and_(a, c, name=name)
        if kind == "or":
            return b.or_(a, c, name=name)
        if kind == "xor":
            return b.xor(a, c, name=name)
        if kind in ("shl", "shr"):
            return self._shift(kind, a, c, t, name)
        if kind in ("maximum", "minimum"):
            pred = (">" if kind == "maximum" else "<")
            cmp = b.icmp_signed(pred, a, c) if signed else b.icmp_unsigned(pred, a, c)
            return b.select(cmp, a, c, name=name)
        if kind == "truediv":
            raise LoweringError("truediv on integers: the frontend must cast to a float type first")
        raise LoweringError(f"unknown binary op {kind!r}")

    def _shift(self, kind, a, c, t, name):
        # LLVM shifts by >= the bit width are poison; torch gives 0 (or the sign fill).
        b = self.b
        width = llir.Constant(a.type, t.bits)
        too_far = b.icmp_unsigned(">=", c, width)
        if kind == "shl":
            return b.select(too_far, llir.Constant(a.type, 0), b.shl(a, c), name=name)
        if t.is_signed:
            clamped = b.select(too_far, llir.Constant(a.type, t.bits - 1), c)
            return b.ashr(a, clamped, name=name)
        return b.select(too_far, llir.Constant(a.type, 0), b.lshr(a, c), name=name)

    def divide(self, a: list[llir.Value], c: list[llir.Value], name: str = "") -> list[llir.Value]:
        """``a[i] / c[i]`` for fp32 registers, each an IEEE division (``div.rn.f32``)
        to the bit, signed zeros, infinities and NaNs included.

        Where registers share one divisor register, four or more each on average
        (softmax's ``e / sum``: a row's divisor broadcast over the row's elements), the
        division is done as
        Markstein's correction of a product by the divisor's reciprocal, the reciprocal
        taken once per divisor: four fp32 instructions an element against ``div.rn``'s
        reciprocal, five fmas and range check (sm_90 SASS). Per divisor ``d``:
        ``y = RN(1/d)``, ``y_hi = RD(1/d)`` and ``y_lo = RN((1 - d*y_hi) * y_hi) >= 0``
        (``y_hi + y_lo`` is ``1/d`` to about 2**-46); per element ``x``:

        - ``q0 = fma(x, y_hi, x * y_lo)``: within half an ulp plus about
          ``2**-45 * |x/d|`` of ``x/d``, so faithful (one of the two floats around it);
        - ``r = fma(q0, d, -x)``: exactly ``d*q0 - x`` (a faithful quotient's remainder
          is a float);
        - ``q = fma(-r, y, q0)``: ``RN(x/d)`` by Markstein's theorem (Muller et al.,
          *Handbook of Floating-Point Arithmetic*, 2nd ed., Theorem 4.10: ``q0``
          faithful and ``y`` within a relative 2**-24 of ``1/d``), with no underflow
          or overflow on the way.

        That holds, and zeros keep their sign (``y_lo >= 0`` and the negated remainder
        make ``x = -0`` give ``-0``), on the domain ``2**-20 <= d <= 2**20`` and
        ``x == 0`` or ``2**-80 <= |x| <= 2**100``: the quotient stays normal, and the
        remainder exact though it may be subnormal (as may ``x * y_lo``, whose error
        is then far below an ulp of the quotient), so subnormals must be kept. A
        thread whose registers or divisors leave the domain (a NaN, an infinity, a
        tiny ``x``, a negative divisor) branches to ``div.rn`` for all of them, one
        test and branch per `DIVIDE_CHUNK` registers. Kernels that flush
        subnormals (``ftz``) divide with ``fdiv`` everywhere, and so does a constant
        divisor (LLVM multiplies by an exact reciprocal of a power of two; the
        correction is measured only for divisors computed in the kernel).
        """
        b = self.b
        shared = {}
        for d in c:
            shared.setdefault(id(d), d)
        if (self.ftz or a[0].type != F32 or len(c) < 4 * len(shared)
                or any(isinstance(d, llir.Constant) for d in shared.values())):
            return [b.fdiv(x, d, name=name) for x, d in zip(a, c)]
        one = llir.Constant(F32, 1.0)
        recips, d_ok = {}, None
        for key, d in shared.items():
            y = b.fdiv(one, d)
            y_hi = self.call("llvm.nvvm.rcp.rm.f", F32, [d])
            e = self.call("llvm.fma.f32", F32, [b.fneg(d), y_hi, one])
            recips[key] = (y, y_hi, b.fmul(e, y_hi))
            # ordered compares: a NaN divisor fails; a negative one too (lo > 0)
            ok = b.and_(b.fcmp_ordered(">=", d, llir.Constant(F32, 2.0 ** -20)),
                        b.fcmp_ordered("<=", d, llir.Constant(F32, 2.0 ** 20)))
            d_ok = ok if d_ok is None else b.and_(d_ok, ok)
        out = []
        # A branch per chunk of registers: the dividends stay live for the exact path
        # beside the fast quotients only a chunk at a time (a row of 64 registers a
        # thread spilled when tested as one).
        for start in range(0, len(a), self.DIVIDE_CHUNK):
            out += self._divide_chunk(a[start:start + self.DIVIDE_CHUNK], c[start:start + self.DIVIDE_CHUNK],
                                      recips, d_ok, name)
        return out

    def _divide_chunk(self, a, c, recips, ok, name):
        """`divide`'s fast quotients of registers ``a`` by ``c``, or ``div.rn`` for all
        of them where one leaves the domain (or ``ok``, the divisors' test, fails)."""
        b = self.b

        def within(v, lo, hi):
            av = self.call("llvm.fabs.f32", F32, [v])
            return b.and_(b.fcmp_ordered(">=", av, llir.Constant(F32, lo)),
                          b.fcmp_ordered("<=", av, llir.Constant(F32, hi)))

        fast = []
        for x, d in zip(a, c):
            y, y_hi, y_lo = recips[id(d)]
            q0 = self.call("llvm.fma.f32", F32, [x, y_hi, b.fmul(x, y_lo)])
            r = self.call("llvm.fma.f32", F32, [q0, d, b.fneg(x)])
            fast.append(self.call("llvm.fma.f32", F32, [b.fneg(r), y, q0]))
            x_ok = b.or_(within(x, 2.0 ** -80, 2.0 ** 100), b.fcmp_ordered("==", x, llir.Constant(F32, 0.0)))
            ok = b.and_(ok, x_ok)
        fast_block = b.block
        slow_block = b.function.append_basic_block(f"{name or 'div'}.exact")
        done = b.function.append_basic_block(f"{name or 'div'}.done")
        b.cbranch(ok, done, slow_block)
        b.position_at_end(slow_block)
        slow = [b.fdiv(x, d) for x, d in zip(a, c)]
        b.branch(done)
        b.position_at_end(done)
        out = []
        for f, s in zip(fast, slow):
            phi = b.phi(F32, name=name)
            phi.add_incoming(f, fast_block)
            phi.add_incoming(s, slow_block)
            out.append(phi)
        return out

    def compare(self, pred: str, a: llir.Value, c: llir.Value, t: ir.ElementType, name: str = "") -> llir.Value:
        """``a <pred> c`` -> i1; float compares are ordered except ``ne``."""
        ops = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
        if pred not in ops:
            raise LoweringError(f"unknown compare predicate {pred!r}")
        if self.is_half(t):
            a, c, t = self.to_f32(a, t), self.to_f32(c, t), ir.float32
        if isinstance(t, ir.PointerType):
            return self.b.icmp_unsigned(ops[pred], self.b.ptrtoint(a, I64), self.b.ptrtoint(c, I64), name=name)
        if t.is_floating:
            if pred == "ne":
                return self.b.fcmp_unordered("!=", a, c, name=name)
            return self.b.fcmp_ordered(ops[pred], a, c, name=name)
        if t.is_signed:
            return self.b.icmp_signed(ops[pred], a, c, name=name)
        return self.b.icmp_unsigned(ops[pred], a, c, name=name)

    def math(self, fn: str, args: list[llir.Value], t: ir.DType, out: ir.DType, name: str = "") -> llir.Value:
        """Elementwise math function ``fn`` (from `ir.MATH_FNS`) on elements of type ``t``."""
        b = self.b
        if not isinstance(t, ir.DType):
            raise LoweringError(f"math {fn} on {t}")
        if self.is_half(t):
            wide = [self.to_f32(a, t) for a in args]
            r = self.math(fn, wide, ir.float32, ir.float32 if out == t else out, name)
            return self.from_f32(r, t) if out == t else r
        x = args[0]
        if fn == "neg":
            return b.fneg(x, name=name) if t.is_floating else b.neg(x, name=name)
        if fn == "not":
            if t.is_floating:
                raise LoweringError("bitwise not on a float type")
            return b.not_(x, name=name)
        if fn == "abs":
            if t.is_floating:
                return self.call(f"llvm.fabs.{'f32' if x.type == F32 else 'f64'}", x.type, [x], name)
            if not t.is_signed:
                return x
            return b.select(b.icmp_signed("<", x, llir.Constant(x.type, 0)), b.neg(x), x, name=name)
        if not t.is_floating:
            raise LoweringError(f"math {fn} needs a float operand, got {t} (the frontend casts first)")
        if fn == "isnan":
            return b.fcmp_unordered("uno", x, x, name=name)
        if fn == "signbit":  # the sign bit itself: true for -0.0 and negative NaNs too
            bits = b.bitcast(x, I64 if x.type == F64 else I32)
            return b.icmp_signed("<", bits, llir.Constant(bits.type, 0), name=name)
        if fn == "isinf":
            absx = self.call(f"llvm.fabs.{'f32' if x.type == F32 else 'f64'}", x.type, [x])
            return b.fcmp_ordered("==", absx, llir.Constant(x.type, float("inf")), name=name)
        if fn == "sqrt":
            return self.call(f"llvm.sqrt.{'f32' if x.type == F32 else 'f64'}", x.type, [x], name)
        if fn == "fast_dividef":  # libdevice has no fp64 version: fp64 divides exactly
            if x.type != F32:
                return b.fdiv(x, args[1], name=name)
            if self.ftz and isinstance(x, llir.Constant) and x.constant == 1.0:
                # A reciprocal: ptxas gives rcp.approx.ftz one MUFU.RCP, but div.approx.ftz
                # of 1 / y an extra FADD.FTZ after it.
                return self.call("llvm.nvvm.rcp.approx.ftz.f", F32, [args[1]], name)
            return self.call("__nv_fast_fdividef", F32, list(args), name)
        if fn == "sigmoid":
            one = llir.Constant(x.type, 1.0)
            e = self.libdevice("exp", [b.fneg(x)], x.type)
            return b.fdiv(one, b.fadd(one, e), name=name)
        names = {"exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log", "log2": "log2", "log1p": "log1p",
                 "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "tan": "tan", "tanh": "tanh", "erf": "erf",
                 "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc", "pow": "pow",
                 "atan2": "atan2", "fmod": "fmod", "acos": "acos", "asin": "asin", "atan": "atan", "sinh": "sinh",
                 "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "erfc": "erfc",
                 "erfcx": "erfcx", "erfinv": "erfinv", "normcdfinv": "normcdfinv", "lgamma": "lgamma",
                 "cyl_bessel_i0": "cyl_bessel_i0",
                 "cyl_bessel_i1": "cyl_bessel_i1", "j0": "j0", "j1": "j1", "y0": "y0", "y1": "y1",
                 "hypot": "hypot", "copysign": "copysign",
                 "nextafter": "nextafter"}
        if fn not in names:
            raise LoweringError(f"unknown math function {fn!r}")
        return self.libdevice(names[fn], list(args), x.type)

    def cast(self, x: llir.Value, src: ir.ElementType, dst: ir.ElementType, name: str = "") -> llir.Value:
        """Value conversion from ``src`` to ``dst`` with torch semantics."""
        b = self.b
        if src == dst:
            return x
        if isinstance(src, ir.PointerType) or isinstance(dst, ir.PointerType):
            if isinstance(src, ir.PointerType) and isinstance(dst, ir.PointerType):
                return x
            raise LoweringError(f"cast between {src} and {dst}")
        if dst.kind == "bool":
            if src.is_floating:
                return b.fcmp_unordered("!=", self.to_f32(x, src), llir.Constant(self.to_f32(x, src).type, 0.0),
                                        name=name)
            return b.icmp_unsigned("!=", x, llir.Constant(x.type, 0), name=name)
        if src.is_floating and dst.is_floating:
            x32 = self.to_f32(x, src)
            if dst.bits == 64:
                return b.fpext(x32, F64, name=name) if x32.type != F64 else x32
            if x32.type == F64:
                x32 = b.fptrunc(x32, F32)
            return self.from_f32(x32, dst)
        if src.is_floating:  # float -> int truncates toward zero; narrow ints wrap through i32
            xf = self.to_f32(x, src)
            wide = I64 if dst.bits == 64 else I32
            r = b.fptoui(xf, wide) if (dst.kind == "uint" and dst.bits >= 32) else b.fptosi(xf, wide)
            return b.trunc(r, reg_type(dst), name=name) if dst.bits < wide.width else r
        if dst.is_floating:
            signed = src.is_signed
            if dst.bits == 64:
                return (b.sitofp if signed else b.uitofp)(x, F64, name=name)
            f = (b.sitofp if signed else b.uitofp)(x, F32)
            return self.from_f32(f, dst)
        if src.bits < dst.bits:
            return (b.sext if src.is_signed else b.zext)(x, reg_type(dst), name=name)
        if src.bits > dst.bits:
            return b.trunc(x, reg_type(dst), name=name)
        return x

    def bitcast(self, x: llir.Value, src: ir.ElementType, dst: ir.ElementType, name: str = "") -> llir.Value:
        """Reinterpret the bits of ``x`` (same width) as ``dst``."""
        if src.bits != dst.bits:
            raise LoweringError(f"bitcast from {src} to {dst}: widths differ")
        t = reg_type(dst)
        return x if x.type == t else self.b.bitcast(x, t, name=name)
