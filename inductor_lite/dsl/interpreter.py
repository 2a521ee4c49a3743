"""Reference interpreter of the block IR with torch ops: the DSL's reference semantics,
the CPU execution path, and a debugging aid (``INDUCTOR_LITE_INTERPRET=1`` runs CUDA
tensors through it too, on their device).

Programs are vectorised: each IR op is evaluated once for a chunk of P programs, a
value of block shape S being a tensor of shape [P, *S] (scalars [P]). Values that are
the same in every program (constants, arguments, aranges, and anything computed only
from them) keep a leading dimension of 1 and broadcast, so P only multiplies the
per-program work. P is chosen so P * numel(largest block) is about `CHUNK_ELEMENTS`.
A ``for`` loop runs with Python ``range`` and so needs bounds that are the same in
every program of a chunk; when a loop bound depends on ``program_id`` the whole
launch runs one program per chunk (one cluster, for a kernel with
``cluster_gather``: chunks hold whole clusters, so a gather is a reshape; such a
kernel's loop bounds must then be the same in every program of a cluster, which the
GPU does not require of loops without a gather).

Pointers are a tensor's whole storage as a flat 1-D view plus int64 element offsets
into it (the tensor's ``storage_offset`` is the base). Loads and stores are gathers
and scatters on that view; masked-off lanes are never touched. An unmasked access
outside the storage raises `IndexError` naming the kernel and the op's source line.

Integer semantics match the GPU: two's-complement wrapping, C-style (truncating)
``//`` and ``%``; division by zero gives an unspecified value instead of trapping.

Math functions are torch's, so kernels on CPU compute what eager computes on CPU, bit
for bit, even where that is not correctly rounded: on MKL builds torch's fp32 ``sqrt``
is MKL VML's ``vsSqrt`` in high-accuracy mode (ATen's ``vml.h``), within 1 ulp, while
PTX's ``sqrt.rn`` (and eager CUDA's ``sqrtf``) is IEEE.
"""

from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from . import ir

CHUNK_ELEMENTS = 1 << 22
"""Target size (elements) of the largest value of one chunk of programs."""

TORCH_DTYPES = {
    ir.float16: torch.float16,
    ir.bfloat16: torch.bfloat16,
    ir.float32: torch.float32,
    ir.float64: torch.float64,
    ir.int1: torch.bool,
    ir.int8: torch.int8,
    ir.int16: torch.int16,
    ir.int32: torch.int32,
    ir.int64: torch.int64,
    ir.uint8: torch.uint8,
}
_COMPARE = {"lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge, "eq": torch.eq, "ne": torch.ne}
_UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "exp2": torch.exp2, "expm1": torch.expm1,
    "log": torch.log, "log2": torch.log2, "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "trunc": torch.trunc,
    "isnan": torch.isnan, "isinf": torch.isinf,
    "acos": torch.acos, "asin": torch.asin, "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh,
    "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh, "erfc": torch.erfc,
    "erfcx": torch.special.erfcx, "erfinv": torch.erfinv, "normcdfinv": torch.special.ndtri,
    "lgamma": torch.lgamma, "cyl_bessel_i0": torch.i0,
    "cyl_bessel_i1": torch.special.i1, "j0": torch.special.bessel_j0, "j1": torch.special.bessel_j1,
    "y0": torch.special.bessel_y0, "y1": torch.special.bessel_y1, "signbit": torch.signbit,
}
def _float_fmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C ``fmod`` (exact, as libdevice's). torch's vectorized float32 CPU fmod is not: it
    gives NaN or wrong values once ``|a / b|`` is huge (``fmod(1e30, 1e-30)``). Evaluated
    in float64 instead, which holds every narrower float's quotient, the exact result
    rounds back unchanged."""
    if a.dtype == torch.float64:
        return torch.fmod(a, b)
    return torch.fmod(a.double(), b.double()).to(a.dtype)


_BINARY_MATH = {"pow": torch.pow, "atan2": torch.atan2, "fmod": _float_fmod, "fast_dividef": torch.div,
                "hypot": torch.hypot, "copysign": torch.copysign, "nextafter": torch.nextafter}
_SIMPLE_BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div,
    "and": torch.bitwise_and, "or": torch.bitwise_or, "xor": torch.bitwise_xor,
    "shl": torch.bitwise_left_shift, "shr": torch.bitwise_right_shift,
    "maximum": torch.maximum, "minimum": torch.minimum,
}


@functools.cache
def resolve_math_dispatch() -> None:
    """Call every float math function of the tables once, on one element, single-threaded.

    On MKL builds torch runs float32/float64 math (``erf``, ``log``, ``sqrt``, ...) through
    MKL VML, which picks each function's kernel on its first call. When that first call
    comes from several intra-op threads at once, one thread can run a low-accuracy kernel
    over its whole chunk (errors of ~1e-4 in ``erf``: pytorch/pytorch#188792, oneMKL
    2024.2). A kernel's first math op on a block of 2048+ elements is such a call, so the
    interpreter resolves the dispatch first, as the upstream fix does. Runs once a process,
    on real CPU tensors whatever default device or fake mode is active.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        for dtype in (torch.float32, torch.float64):
            one = torch.ones(1, dtype=dtype, device="cpu")
            for fn in _UNARY.values():
                fn(one)
            for fn in _BINARY_MATH.values():
                fn(one, one)


class _Ptr:
    """A pointer value: ``flat`` (the storage as 1-D) and absolute element ``offsets``
    ([L, *shape] int64); ``arg``/``base`` name the argument for error messages."""

    __slots__ = ("flat", "offsets", "arg", "base")

    def __init__(self, flat: torch.Tensor, offsets: torch.Tensor, arg: str, base: int):
        self.flat, self.offsets, self.arg, self.base = flat, offsets, arg, base

    def with_offsets(self, offsets: torch.Tensor) -> "_Ptr":
        return _Ptr(self.flat, offsets, self.arg, self.base)


@dataclass
class _Plan:
    """Per-function facts computed once: the values each block can free after each op,
    the largest block, and whether some loop bound differs between programs."""

    frees: dict[int, list[list[ir.Value]]]
    max_numel: int
    bounds_vary: bool


_plans: "weakref.WeakKeyDictionary[ir.Function, _Plan]" = weakref.WeakKeyDictionary()


def run(kernel, grid: Sequence[int], args: Sequence[Any], constexprs: dict[str, Any]) -> None:
    """Run ``kernel`` (a `kernel.Kernel`) over ``grid`` on ``args``' device.

    Raises:
        CompilationError: the kernel does not compile.
        IndexError: an unmasked load or store outside a tensor's storage.
        RuntimeError: a loop whose bounds differ between programs of one chunk, or a
            select between pointers into different tensors.
        ValueError: grid axis 0 is not a multiple of the kernel's cluster size.
    """
    spec = kernel.specialize(args, constexprs)
    fn = kernel.build_ir(spec)
    if grid and grid[0] % fn.cluster_size:
        raise ValueError(f"kernel {kernel.name}: grid axis 0 has {grid[0]} programs, not a multiple of its "
                         f"cluster size {fn.cluster_size} (cluster_gather)")
    with torch.no_grad():
        _Interpreter(kernel.name, fn, tuple(grid), args).run()


def _plan(fn: ir.Function) -> _Plan:
    plan = _plans.get(fn)
    if plan is None:
        frees: dict[int, list[list[ir.Value]]] = {}
        _plan_block(fn.body, [], frees)
        max_numel = max([r.type.numel for op in fn.walk() for r in op.results] + [1])
        plan = _plans[fn] = _Plan(frees, max_numel, _bounds_vary(fn))
    return plan


def _uses(op: ir.Op) -> list[ir.Value]:
    if op.opcode != "for":
        return op.operands
    return op.operands + [v for inner in _walk_block(op.attrs["body"]) for v in inner.operands]


def _walk_block(block: ir.Block):
    for op in block.ops:
        yield op
        if op.opcode == "for":
            yield from _walk_block(op.attrs["body"])


def _plan_block(block: ir.Block, entry: list[ir.Value], frees: dict) -> None:
    """For each op of ``block``, the values defined in the block (or on entry to it)
    whose last use it is; recurses into loop bodies."""
    last: dict[ir.Value, int] = {v: 0 for v in entry}
    for i, op in enumerate(block.ops):
        for v in _uses(op):
            if v in last:
                last[v] = i
        for r in op.results:
            last[r] = i
        if op.opcode == "for":
            _plan_block(op.attrs["body"], [op.attrs["iv"], *op.attrs["carried"]], frees)
        elif op.opcode == "scan":
            _plan_block(op.attrs["body"], list(op.attrs["args"]), frees)
    per_op: list[list[ir.Value]] = [[] for _ in block.ops]
    for v, i in last.items():
        if block.ops:
            per_op[i].append(v)
    frees[id(block)] = per_op


def _bounds_vary(fn: ir.Function) -> bool:
    """Whether some ``for`` bound may differ between programs (depends on program_id)."""
    varying: set[ir.Value] = set()

    def visit(block: ir.Block) -> bool:
        for op in block.ops:
            if op.opcode == "program_id":
                varying.add(op.result)
            elif op.opcode == "for":
                if any(v in varying for v in op.operands[:3]):
                    return True
                carried, body = op.attrs["carried"], op.attrs["body"]
                varying.update(c for c, init in zip(carried, op.operands[3:]) if init in varying)
                while True:
                    if visit(body):
                        return True
                    grown = {c for c, y in zip(carried, body.ops[-1].operands) if y in varying} - varying
                    if not grown:
                        break
                    varying.update(grown)
                varying.update(r for r, c in zip(op.results, carried) if c in varying)
            elif any(v in varying for v in op.operands):
                varying.update(op.results)
        return False

    return visit(fn.body)


def _int_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C division (truncating); b == 0 gives an unspecified value, INT_MIN / -1 wraps
    (torch would trap on both)."""
    if a.dtype == torch.bool or not a.dtype.is_signed:
        return torch.div(a, torch.where(b == 0, 1, b), rounding_mode="trunc")
    minus_one = b == -1
    q = torch.div(a, torch.where((b == 0) | minus_one, 1, b), rounding_mode="trunc")
    return torch.where(minus_one, torch.neg(a), q)


def _int_mod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C remainder (sign of the dividend); b == 0 gives an unspecified value."""
    if not a.dtype.is_signed:
        return torch.fmod(a, torch.where(b == 0, 1, b))
    minus_one = b == -1
    r = torch.fmod(a, torch.where((b == 0) | minus_one, 1, b))
    return torch.where(minus_one, torch.zeros_like(r), r)


def _welford_pair(mean_a, m2_a, w_a, mean_b, m2_b, w_b):
    """Chan et al.'s parallel merge of two Welford states (the formula in `ir.py`)."""
    delta = mean_b - mean_a
    w = w_a + w_b
    f = torch.where(w == 0, 0.0, w_b / w)
    return mean_a + delta * f, m2_a + m2_b + delta * delta * w_a * f, w


def _welford_reduce(mean, m2, w, dim: int):
    """Welford states reduced along ``dim`` by a pairwise tree (first half with second
    half), the shape of the GPU's butterfly; an odd length is padded with a weight-0
    state, which changes nothing."""
    states = torch.broadcast_tensors(mean, m2, w)
    while states[0].shape[dim] > 1:
        n = states[0].shape[dim]
        if n % 2:
            pad = list(states[0].shape)
            pad[dim] = 1
            states = [torch.cat([s, s.new_zeros(pad)], dim) for s in states]
            n += 1
        states = _welford_pair(*[s.narrow(dim, 0, n // 2) for s in states],
                               *[s.narrow(dim, n // 2, n // 2) for s in states])
    return [s.squeeze(dim) for s in states]


class _Interpreter:
    """Executes one launch of one `ir.Function`."""

    def __init__(self, name: str, fn: ir.Function, grid: tuple[int, ...], args: Sequence[Any]):
        self.name = name
        self.fn = fn
        self.grid = grid + (1,) * (3 - len(grid))
        self.device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        self.plan = _plan(fn)
        resolve_math_dispatch()
        self.env: dict[ir.Value, Any] = {}
        for spec, value, a in zip(fn.args, fn.arg_values, args):
            self.env[value] = self._bind_arg(spec, a)

    def _bind_arg(self, spec: ir.ArgSpec, a: Any) -> Any:
        if isinstance(a, torch.Tensor):
            numel = a.untyped_storage().nbytes() // a.element_size()
            flat = a.detach().as_strided((numel,), (1,), 0)
            base = a.storage_offset()
            return _Ptr(flat, torch.tensor([base], dtype=torch.int64, device=self.device), spec.name, base)
        return torch.tensor([a], dtype=TORCH_DTYPES[spec.type.element], device=self.device)

    def run(self) -> None:
        total = math.prod(self.grid)
        cluster = self.fn.cluster_size
        chunk = 1 if self.plan.bounds_vary else max(1, CHUNK_ELEMENTS // self.plan.max_numel)
        chunk = max(cluster, chunk // cluster * cluster)
        for start in range(0, total, chunk):
            self.linear = torch.arange(start, min(start + chunk, total), dtype=torch.int64, device=self.device)
            self.exec_block(self.fn.body)

    def exec_block(self, block: ir.Block) -> Optional[list[Any]]:
        """Run ``block``'s ops; returns the yielded values of a loop body."""
        env, frees, result = self.env, self.plan.frees[id(block)], None
        for op, dead in zip(block.ops, frees):
            if op.opcode == "yield":
                result = [env[v] for v in op.operands]
            else:
                _HANDLERS[op.opcode](self, op, *[env[v] for v in op.operands])
            for v in dead:
                env.pop(v, None)
        return result

    def _set(self, op: ir.Op, value: Any) -> None:
        self.env[op.result] = value

    def _error(self, op: ir.Op, exc: type, message: str) -> Exception:
        where = f" at {op.loc}" if op.loc is not None else ""
        return exc(f"kernel {self.name}: {message}{where}")

    # ------------------------------------------------------------------ creation

    def _op_constant(self, op):
        t = op.result.type
        self._set(op, torch.full((1,) + t.shape, op.attrs["value"], dtype=TORCH_DTYPES[t.element],
                                 device=self.device))

    def _op_program_id(self, op):
        axis, (g0, g1, _) = op.attrs["axis"], self.grid
        lin = self.linear
        pid = lin % g0 if axis == 0 else (lin // g0) % g1 if axis == 1 else lin // (g0 * g1)
        self._set(op, pid.to(torch.int32))

    def _op_cluster_gather(self, op, x):
        # A chunk holds whole clusters (`run`), of `size` consecutive programs along axis 0.
        size = op.attrs["size"]
        per_cluster = x.expand(len(self.linear)).reshape(-1, size)
        self._set(op, per_cluster.repeat_interleave(size, dim=0))

    def _op_num_programs(self, op):
        self._set(op, torch.tensor([self.grid[op.attrs["axis"]]], dtype=torch.int32, device=self.device))

    def _op_arange(self, op):
        start, end = op.attrs["start"], op.attrs["end"]
        self._set(op, torch.arange(start, end, dtype=torch.int32, device=self.device)[None])

    # ------------------------------------------------------------------ shapes

    def _shape_op(self, op, x, f) -> None:
        self._set(op, x.with_offsets(f(x.offsets)) if isinstance(x, _Ptr) else f(x))

    def _op_splat(self, op, x):
        shape = op.result.type.shape
        self._shape_op(op, x, lambda t: t.reshape((t.shape[0],) + (1,) * len(shape)).expand((t.shape[0],) + shape))

    def _op_broadcast(self, op, x):
        shape = op.result.type.shape
        self._shape_op(op, x, lambda t: t.expand((t.shape[0],) + shape))

    def _op_expand_dims(self, op, x):
        self._shape_op(op, x, lambda t: t.unsqueeze(op.attrs["axis"] + 1))

    def _op_reshape(self, op, x):
        shape = op.result.type.shape
        self._shape_op(op, x, lambda t: t.reshape((t.shape[0],) + shape))

    # ------------------------------------------------------------------ arithmetic

    def _op_binary(self, op, a, b):
        kind = op.attrs["op"]
        if isinstance(a, _Ptr):
            self._set(op, a.with_offsets(a.offsets + b))  # int64 + int32 stays int64
        elif kind == "floordiv":
            self._set(op, _int_div(a, b))
        elif kind == "mod":
            self._set(op, _float_fmod(a, b) if a.dtype.is_floating_point else _int_mod(a, b))
        else:
            self._set(op, _SIMPLE_BINARY[kind](a, b))

    def _op_compare(self, op, a, b):
        self._set(op, _COMPARE[op.attrs["pred"]](a, b))

    def _op_math(self, op, x, y=None):
        fn = op.attrs["fn"]
        if y is not None:
            self._set(op, _BINARY_MATH[fn](x, y))
        elif fn == "not":
            self._set(op, torch.logical_not(x) if x.dtype == torch.bool else torch.bitwise_not(x))
        else:
            self._set(op, _UNARY[fn](x))

    def _op_select(self, op, c, a, b):
        if isinstance(a, _Ptr):
            if a.flat.data_ptr() != b.flat.data_ptr() or a.flat.dtype != b.flat.dtype:
                raise self._error(op, RuntimeError,
                                  f"where() between pointers into different tensors ({a.arg}, {b.arg}) "
                                  "is not supported by the interpreter")
            self._set(op, a.with_offsets(torch.where(c, a.offsets, b.offsets)))
        else:
            self._set(op, torch.where(c, a, b))

    def _op_cast(self, op, x):
        to = op.result.type.element
        self._set(op, x != 0 if to == ir.int1 else x.to(TORCH_DTYPES[to]))

    def _op_bitcast(self, op, x):
        self._set(op, x.contiguous().view(TORCH_DTYPES[op.result.type.element]))

    # ------------------------------------------------------------------ memory

    def _addresses(self, op, ptr: _Ptr, offsets: torch.Tensor, mask: Optional[torch.Tensor], what: str):
        """Offsets that are safe to gather/scatter with (masked-off lanes clamped to 0)
        and the mask, or None when every lane is on.

        Raises:
            IndexError: an active lane outside the storage.
        """
        if mask is not None and bool(mask.all()):
            mask = None
        n = ptr.flat.numel()
        if n == 0:
            if mask is None or bool(mask.any()):
                raise self._error(op, IndexError, f"{what} through argument {ptr.arg}, which has no storage")
            return offsets, mask
        safe = offsets if mask is None else torch.where(mask, offsets, 0)
        lo, hi = torch.aminmax(safe)
        if lo < 0 or hi >= n:
            bad = safe[(safe < 0) | (safe >= n)][0]
            raise self._error(op, IndexError,
                              f"{what} out of bounds: element {int(bad) - ptr.base} of argument {ptr.arg}, whose "
                              f"storage holds elements {-ptr.base}..{n - ptr.base - 1} relative to its start")
        return safe, mask

    def _op_load(self, op, ptr, mask=None, other=None):
        offsets = ptr.offsets
        if mask is not None:
            offsets, mask, other = torch.broadcast_tensors(offsets, mask, other)
        offsets, mask = self._addresses(op, ptr, offsets, mask, "load")
        if mask is None:
            self._set(op, ptr.flat[offsets])
        elif ptr.flat.numel() == 0:
            self._set(op, other)
        else:
            self._set(op, torch.where(mask, ptr.flat[offsets], other))

    def _op_store(self, op, ptr, value, mask=None):
        tensors = [ptr.offsets, value] + ([mask] if mask is not None else [])
        offsets, value, *rest = torch.broadcast_tensors(*tensors)
        offsets, mask = self._addresses(op, ptr, offsets, rest[0] if rest else None, "store")
        if mask is not None:
            offsets, value = offsets[mask], value[mask]
        ptr.flat.index_put_((offsets.reshape(-1),), value.reshape(-1))

    def _op_atomic(self, op, ptr, value, mask=None):
        n = len(self.linear)
        offsets, value = ptr.offsets.expand(n), value.expand(n)
        offsets, mask = self._addresses(op, ptr, offsets, None if mask is None else mask.expand(n), "atomic")
        self._set(op, self._serialised_add(ptr, offsets, value, mask))

    def _op_red(self, op, ptr, value, mask=None):
        shape = (len(self.linear),) + ptr.offsets.shape[1:]
        offsets, value = ptr.offsets.expand(shape), value.expand(shape)
        offsets, mask = self._addresses(op, ptr, offsets, None if mask is None else mask.expand(shape), "atomic")
        if mask is not None:
            offsets, value = offsets[mask], value[mask]
        # no old values to give back, so one index_add_ (which adds every repeat) serves
        ptr.flat.index_add_(0, offsets.reshape(-1), value.reshape(-1))

    def _op_assert(self, op, cond):
        if not bool(cond.all()):
            message = op.attrs["message"] or "device_assert failed"
            raise self._error(op, AssertionError, message)

    def _serialised_add(self, ptr: _Ptr, offsets: torch.Tensor, value: torch.Tensor,
                        mask: Optional[torch.Tensor]) -> torch.Tensor:
        """Apply the adds of 1-D ``value`` at ``offsets`` where ``mask``, in program order:
        one valid serialisation of the launch. Returns the value each active element saw
        before its add (0 where masked off). Round k applies every address's k-th add, so
        the addresses within a round are distinct."""
        n = len(offsets)
        active = torch.arange(n, device=self.device) if mask is None else mask.nonzero().flatten()
        where, add = offsets[active], value[active]
        old = torch.zeros_like(value)
        if len(active):
            order = torch.sort(where, stable=True).indices
            ranked = where[order]
            position = torch.arange(len(ranked), device=self.device)
            starts = torch.ones_like(ranked, dtype=torch.bool)
            starts[1:] = ranked[1:] != ranked[:-1]
            rank = torch.empty_like(position)
            rank[order] = position - torch.cummax(torch.where(starts, position, 0), 0).values
            for k in range(int(rank.max()) + 1):
                turn = rank == k
                old[active[turn]] = ptr.flat[where[turn]]
                ptr.flat[where[turn]] += add[turn]
        return old

    # ------------------------------------------------------------------ reductions

    def _op_reduce(self, op, x):
        dim, kind = op.attrs["axis"] + 1, op.attrs["combine"]
        if kind == "sum":
            self._set(op, torch.sum(x, dim, dtype=x.dtype))
        elif kind == "prod":
            self._set(op, torch.prod(x, dim, dtype=x.dtype))
        elif kind == "max":
            self._set(op, torch.amax(x, dim))
        else:
            self._set(op, torch.amin(x, dim))

    def _op_argreduce(self, op, x):
        dim = op.attrs["axis"] + 1
        f = torch.argmax if op.attrs["combine"] == "argmax" else torch.argmin
        self._set(op, f(x, dim).to(torch.int32))

    def _op_welford_combine(self, op, *states):
        if op.attrs.get("axis") is None:
            results = _welford_pair(*states)
        else:
            results = _welford_reduce(*states, dim=op.attrs["axis"] + 1)
        for r, v in zip(op.results, results):
            self.env[r] = v

    def _op_scan(self, op, *xs):
        # Hillis and Steele's scan ("Data parallel algorithms", 1986): log2(n) steps,
        # step d combining each element with the one d before it, each step one run of
        # the combine region over whole blocks. `reverse` scans the flipped blocks.
        dim, n = op.attrs["axis"] + 1, op.operands[0].type.shape[op.attrs["axis"]]
        args, body = op.attrs["args"], op.attrs["body"]
        xs = [x.flip(dim) if op.attrs["reverse"] else x for x in torch.broadcast_tensors(*xs)]
        d = 1
        while d < n:
            self.env.update(zip(args, [x.narrow(dim, 0, n - d) for x in xs] + [x.narrow(dim, d, n - d) for x in xs]))
            combined = torch.broadcast_tensors(*self.exec_block(body), xs[0].narrow(dim, d, n - d))[:-1]
            xs = [torch.cat([x.narrow(dim, 0, d), c.to(x.dtype)], dim) for x, c in zip(xs, combined)]
            d *= 2
        for r, x in zip(op.results, xs):
            self.env[r] = x.flip(dim) if op.attrs["reverse"] else x

    # ------------------------------------------------------------------ loops

    def _uniform_int(self, op, t: torch.Tensor) -> int:
        if t.shape[0] != 1 and not bool((t == t[0]).all()):
            raise self._error(op, RuntimeError, "loop bounds differ between programs of one chunk")
        return int(t[0])

    def _op_for(self, op, lb, ub, step, *inits):
        lb, ub, step = (self._uniform_int(op, t) for t in (lb, ub, step))
        if step <= 0:
            raise self._error(op, RuntimeError, f"loop step must be positive, got {step}")
        body, iv, carried_values = op.attrs["body"], op.attrs["iv"], op.attrs["carried"]
        iv_dtype = TORCH_DTYPES[iv.type.element]
        carried = list(inits)
        for i in range(lb, ub, step):
            self.env[iv] = torch.tensor([i], dtype=iv_dtype, device=self.device)
            self.env.update(zip(carried_values, carried))
            carried = self.exec_block(body)
        for r, v in zip(op.results, carried):
            self.env[r] = v


_HANDLERS = {name[4:]: f for name, f in vars(_Interpreter).items() if name.startswith("_op_")}
