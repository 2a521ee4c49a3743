"""Block IR -> LLVM IR (an ``llvmlite.ir`` module for the NVPTX backend).

One program is one CTA of ``32 * num_warps`` threads. Every block value is held,
in each thread, as a list of LLVM scalars (one per element the thread owns, in the
order of its layout's `Distribution`); scalars are single values every thread holds.
`nvptx_layouts` picks each value's layout, `nvptx_ops` emits the scalar code,
`nvptx_memory` the loads/stores, `nvptx_reduce` reductions and shared-memory
layout conversions, and `nvptx_pipeline` the ``cp.async`` pipelining of loads in
loops (``num_stages``), whose buffers take the start of shared memory.

With a register cap (``maxnreg``, Triton's launch option; PTX ``.maxnreg``), fp16/bf16
loads widened to fp32 and used more than once are *rematerialised*: widened again at
each use from the loaded words, instead of keeping the fp32 values live in between
(`plan_rematerialization`). A bf16 row of 64 values a thread then holds 32 registers
across its reductions, not 64, for one more instruction a value and use.

The kernel is ``define void @<fn.name>(...)`` marked as an entry through
``nvvm.annotations`` (``kernel``, ``maxntidx``); LLVM >= 20 upgrades these to the
``ptx_kernel`` calling convention and the ``nvvm.maxntid`` attribute (``maxnreg`` the
same way; ``cluster_dim_x/y/z``, for a kernel with ``cluster_gather``, to
``.explicitcluster .reqnctapercluster``). Thread-index
math that depends only on ``%tid.x`` is emitted once, in the entry block.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from llvmlite import ir as llir

from . import ir
from .axis_info import analyze
from .layout import WARP_SIZE, Distribution, Layout, SliceLayout, distribute, log2
from .nvptx_layouts import FREE, plan_layouts
from .nvptx_memory import MemoryCodegen
from .nvptx_ops import F32, F64, GLOBAL_PTR, I8, I32, I64, SHARED_PTR, LoweringError, ScalarCodegen, constant, reg_type
from .nvptx_pipeline import PipelineCodegen, plan_pipelines
from .nvptx_reduce import ReduceCodegen
from .nvptx_scan import ScanCodegen

TRIPLE = "nvptx64-nvidia-cuda"
MAX_ELEMENTS_PER_THREAD = 256
"""Most elements of one block value a thread may hold. LLVM's NVPTX code generation
time grows about quadratically with it (a masked fp32 copy: ~3 s at 256 per thread,
~10 s at 512, ~40 s at 1024 on one CPU core) and past ~128 the values no longer fit
the 255 registers a thread has, so bigger blocks spill everything: refuse them with
an error that says to use smaller blocks or more warps. Typical kernels hold 4 to 64."""

_PARAM_TYPES = {"int64": ("i64", I64), "float64": ("f64", F64), "float32": ("f32", F32)}


def param_kind(t: ir.BlockType) -> tuple[str, llir.Type]:
    """How a scalar argument of type ``t`` is passed: ('ptr'|'i32'|'i64'|'f32'|'f64', LLVM type).

    Pointers are 64-bit global addresses; integers narrower than 64 bits (bool too)
    travel as i32 and fp16/bf16 as f32, converted inside the kernel.
    """
    if not t.is_scalar:
        raise LoweringError(f"kernel arguments must be scalars or pointers, got {t}")
    e = t.element
    if isinstance(e, ir.PointerType):
        return "ptr", GLOBAL_PTR
    if e.name in _PARAM_TYPES:
        return _PARAM_TYPES[e.name]
    if e.is_floating:
        return "f32", F32
    return "i32", I32


@dataclass(frozen=True)
class LoweredKernel:
    """The result of `lower`: the LLVM module and launch facts.

    ``shared_bytes``: dynamic shared memory the launch must pass (the kernel declares
    no static shared memory); ``param_types``: one `param_kind` string per ``fn.args``.
    """

    module: llir.Module
    shared_bytes: int
    param_types: tuple[str, ...]


MIN_MAXNREG, MAX_MAXNREG = 16, 255
"""Range of ``maxnreg``: ptxas allocates registers per thread in [16, 255] (sm_50+)."""


def check_maxnreg(name: str, maxnreg) -> None:
    """Raise ValueError unless ``maxnreg`` is None or an int in [16, 255]."""
    if maxnreg is not None and (isinstance(maxnreg, bool) or not isinstance(maxnreg, int)
                                or not MIN_MAXNREG <= maxnreg <= MAX_MAXNREG):
        raise ValueError(f"kernel {name!r}: maxnreg must be None or an int in [{MIN_MAXNREG}, {MAX_MAXNREG}], "
                         f"got {maxnreg!r}")


def plan_rematerialization(fn: ir.Function, plan) -> frozenset[int]:
    """Ids of the values to widen again at each use rather than once: casts of a
    loaded fp16/bf16 block to fp32, placed in a layout (not `FREE`), with two or more
    using ops, all in the cast's own block (a use in a loop body would widen on every
    trip). Holding the loaded words instead of fp32 values halves the registers such a
    value takes between its uses, e.g. across a row's reductions; each further use
    costs one instruction a value (`ScalarCodegen.widen_at_use`)."""
    users: dict[int, list[int]] = {}  # value id -> id(block) of each op that uses it
    casts: list[tuple[ir.Op, int]] = []
    defs = {r.id: op for op in fn.walk() for r in op.results}

    def visit(block: ir.Block) -> None:
        for op in block.ops:
            for vid in {o.id for o in op.operands}:
                users.setdefault(vid, []).append(id(block))
            if op.opcode == "cast":
                casts.append((op, id(block)))
            if op.opcode == "for":
                visit(op.attrs["body"])

    visit(fn.body)
    remat = set()
    for op, block in casts:
        src, res = op.operands[0], op.result
        source = defs.get(src.id)
        where = users.get(res.id, [])
        if (source is not None and source.opcode == "load" and not res.type.is_scalar
                and src.type.element in (ir.float16, ir.bfloat16) and res.type.element == ir.float32
                and plan.home(res) != FREE and len(where) >= 2 and all(b == block for b in where)):
            remat.add(res.id)
    return frozenset(remat)


class _Lowering(ScalarCodegen, MemoryCodegen, ReduceCodegen, ScanCodegen, PipelineCodegen):
    def __init__(self, fn: ir.Function, num_warps: int, data_layout: str, cc: tuple[int, int], num_stages: int = 1,
                 maxnreg: Optional[int] = None):
        if num_warps < 1 or num_warps & (num_warps - 1) or num_warps > 32:
            raise LoweringError(f"num_warps={num_warps} must be a power of two between 1 and 32")
        check_maxnreg(fn.name, maxnreg)
        if fn.cluster_size > 1 and tuple(cc) < (9, 0):
            raise LoweringError(f"cluster_gather needs thread-block clusters: sm_90 or newer, not sm_{cc[0]}{cc[1]}")
        self.fn = fn
        self.num_warps = num_warps
        self.cc = tuple(cc)
        self.axis = analyze(fn)
        self.plan = plan_layouts(fn, num_warps, self.axis)
        self.num_stages = num_stages
        # The pipeline buffers take the start of shared memory; reduction and layout
        # conversion scratch comes after them.
        self.pipelines, self.scratch_offset = plan_pipelines(fn, self.plan, self.axis, num_stages, num_warps, cc)
        # Each cluster_gather has its own slots (8 bytes per program of the cluster) after
        # the pipeline buffers: peers write them while this program may still be using
        # the scratch.
        self._cluster_unstarted = fn.cluster_size > 1  # the entry's cluster arrive still to be waited on
        self.gather_slots: dict[int, int] = {}
        for op in fn.walk():
            if op.opcode == "cluster_gather":
                self.gather_slots[id(op)] = self.scratch_offset
                self.scratch_offset += 8 * op.attrs["size"]
        self._pipelined: dict = {}
        self.defs: dict[int, ir.Op] = {r.id: op for op in fn.walk() for r in op.results}
        self.maxnreg = maxnreg
        self.remat = plan_rematerialization(fn, self.plan) if maxnreg is not None else frozenset()
        self.module = llir.Module(name=fn.name)
        self.module.triple = TRIPLE
        self.module.data_layout = data_layout
        kinds = [param_kind(a.type) for a in fn.args]
        self.param_types = tuple(k for k, _ in kinds)
        self.kernel = llir.Function(self.module, llir.FunctionType(llir.VoidType(), [t for _, t in kinds]),
                                    name=fn.name)
        for arg, spec in zip(self.kernel.args, fn.args):
            arg.name = spec.name
        entry = self.kernel.append_basic_block("entry")
        body = self.kernel.append_basic_block("body")
        self.entry_b = llir.IRBuilder(entry)
        self.entry_b.position_before(self.entry_b.branch(body))
        self.b = llir.IRBuilder(body)
        self.scopes: list[dict] = [{}]
        self._thread_cache: dict = {}
        self._shared: Optional[llir.GlobalVariable] = None
        self.shared_bytes = self.scratch_offset
        self._shared_written = False  # by an earlier op, in program order
        self._loop_depth = 0
        self.ftz = fn.ftz
        self.tid = self._entry_call("llvm.nvvm.read.ptx.sreg.tid.x", "tid")
        self.lane = self.entry_b.and_(self.tid, llir.Constant(I32, WARP_SIZE - 1), name="lane")
        self.warp = self.entry_b.lshr(self.tid, llir.Constant(I32, 5), name="warp")

    # -- module plumbing --------------------------------------------------------------------
    def _entry_call(self, name: str, hint: str) -> llir.Value:
        return self.entry_b.call(self.declare(name, I32, []), [], name=hint)

    def finish(self) -> LoweredKernel:
        self.b.ret_void()
        i32 = llir.Constant(I32, 1)
        self.module.add_named_metadata("nvvm.annotations", [self.kernel, "kernel", i32])
        self.module.add_named_metadata(
            "nvvm.annotations", [self.kernel, "maxntidx", llir.Constant(I32, WARP_SIZE * self.num_warps)])
        if self.maxnreg is not None:
            self.module.add_named_metadata(
                "nvvm.annotations", [self.kernel, "maxnreg", llir.Constant(I32, self.maxnreg)])
        if self.fn.cluster_size > 1:  # PTX .reqnctapercluster: a plain launch runs clusters
            for dim, size in zip("xyz", (self.fn.cluster_size, 1, 1)):
                self.module.add_named_metadata(
                    "nvvm.annotations", [self.kernel, f"cluster_dim_{dim}", llir.Constant(I32, size)])
        # libdevice asks NVVMReflect "__CUDA_FTZ": 0 keeps subnormals, as torch does; 1
        # (`ir.Function.ftz`) takes its flush-to-zero paths, e.g. exp2 as one ex2.approx.ftz.
        self.module.add_named_metadata("llvm.module.flags", [llir.Constant(I32, 4), "nvvm-reflect-ftz",
                                                             llir.Constant(I32, int(self.ftz))])
        return LoweredKernel(self.module, self.shared_bytes, self.param_types)

    def shared_base(self) -> llir.GlobalVariable:
        if self._shared is None:
            # Dynamic shared memory (`extern __shared__`): the launch passes `shared_bytes`,
            # which also lifts the 48 KB cap on static shared memory.
            self._shared = llir.GlobalVariable(self.module, llir.ArrayType(I8, 0), "__shared", addrspace=3)
            self._shared.linkage = "external"
            self._shared.align = 16
            # llvmlite types globals with typed pointers; uses need the opaque `ptr addrspace(3)`.
            self._shared.type = SHARED_PTR
        return self._shared

    def reserve_shared(self, nbytes: int) -> None:
        self.shared_base()
        self.shared_bytes = max(self.shared_bytes, self.scratch_offset + (nbytes + 15) // 16 * 16)

    def barrier(self) -> None:
        self.b.call(self.declare("llvm.nvvm.barrier0", llir.VoidType(), []), [])

    def barrier_before_shared_write(self) -> None:
        """The barrier that keeps a write to shared memory from overtaking another
        thread's read of an earlier use of it. Left out for the kernel's first use
        outside any loop, when there is no earlier use (one barrier fewer in a
        single-reduction kernel)."""
        if self._shared_written or self._loop_depth:
            self.barrier()
        self._shared_written = True

    # -- per-thread coordinates (entry block, cached) -----------------------------------------
    def thread_coord(self, dist: Distribution, dim: int) -> llir.Value:
        """i32 runtime part of this thread's coordinate along ``dim`` in ``dist``."""
        key = ("coord", dist, dim)
        if key not in self._thread_cache:
            b = self.entry_b
            acc = None
            for source, shift, mask, scale in dist.thread_terms(dim):
                src = self.lane if source == "lane" else self.warp
                term = b.and_(b.lshr(src, llir.Constant(I32, shift)), llir.Constant(I32, mask))
                term = b.shl(term, llir.Constant(I32, log2(scale)))
                acc = term if acc is None else b.or_(acc, term)
            self._thread_cache[key] = acc if acc is not None else llir.Constant(I32, 0)
        return self._thread_cache[key]

    def flat_base(self, dist: Distribution) -> llir.Value:
        """i32 row-major flat index of this thread's runtime coordinates."""
        key = ("flat", dist)
        if key not in self._thread_cache:
            b = self.entry_b
            acc = llir.Constant(I32, 0)
            stride = 1
            for d in reversed(range(dist.rank)):
                c = self.thread_coord(dist, d)
                if not (isinstance(c, llir.Constant) and c.constant == 0):
                    acc = b.add(acc, b.mul(c, llir.Constant(I32, stride)))
                stride *= dist.shape[d]
            self._thread_cache[key] = acc
        return self._thread_cache[key]

    def thread_predicate(self, lane_mask: int, warp_mask: int) -> Optional[llir.Value]:
        """i1: ``lane & lane_mask == 0 and warp & warp_mask == 0`` (None if both masks are 0)."""
        key = ("pred", lane_mask, warp_mask)
        if key not in self._thread_cache:
            b = self.entry_b
            pred = None
            for src, mask in ((self.lane, lane_mask), (self.warp, warp_mask)):
                if mask:
                    p = b.icmp_unsigned("==", b.and_(src, llir.Constant(I32, mask)), llir.Constant(I32, 0))
                    pred = p if pred is None else b.and_(pred, p)
            self._thread_cache[key] = pred
        return self._thread_cache[key]

    def primary(self, dist: Distribution) -> Optional[llir.Value]:
        """i1 true in the one thread that owns each element (None: no copies exist)."""
        return self.thread_predicate(dist.replica_lane_mask, dist.replica_warp_mask)

    def compressed_warp_bits(self, bits: tuple[int, ...]) -> llir.Value:
        """The warp-id bits at positions ``bits``, packed into a small index."""
        key = ("warpbits", bits)
        if key not in self._thread_cache:
            b = self.entry_b
            acc = llir.Constant(I32, 0)
            for k, bit in enumerate(bits):
                one = b.and_(b.lshr(self.warp, llir.Constant(I32, bit)), llir.Constant(I32, 1))
                acc = b.or_(acc, b.shl(one, llir.Constant(I32, k)))
            self._thread_cache[key] = acc
        return self._thread_cache[key]

    # -- value environment ---------------------------------------------------------------
    def _lookup(self, key):
        for scope in reversed(self.scopes):
            if key in scope:
                return scope[key]
        return None

    def bind_scalar(self, v: ir.Value, x: llir.Value) -> None:
        self.scopes[-1][(v.id, None)] = x

    def bind_regs(self, v: ir.Value, dist: Distribution, regs: list[llir.Value]) -> None:
        if dist.num_regs > MAX_ELEMENTS_PER_THREAD:
            raise LoweringError(
                f"block {v.type!r} puts {dist.num_regs} elements in each of {WARP_SIZE * self.num_warps} threads "
                f"(at most {MAX_ELEMENTS_PER_THREAD}); use smaller blocks or more warps")
        if len(regs) != dist.num_regs:
            raise LoweringError(f"internal: {v!r} has {len(regs)} registers, layout wants {dist.num_regs}")
        self.scopes[-1][(v.id, dist)] = regs

    def bind_result(self, v: ir.Value, layout: Optional[Layout], regs: list[llir.Value]) -> None:
        if v.type.is_scalar:
            self.bind_scalar(v, regs[0])
        else:
            self.bind_regs(v, distribute(layout, v.type.shape), regs)

    def scalar(self, v: ir.Value) -> llir.Value:
        x = self._lookup((v.id, None))
        if x is None:
            raise LoweringError(f"internal: scalar {v!r} used before it is defined")
        return x

    def regs(self, v: ir.Value, layout: Layout) -> list[llir.Value]:
        """The registers of block ``v`` in ``layout`` (recomputed or converted on demand;
        a rematerialised value is widened anew on every call)."""
        if v.id in self.remat:
            cast = self.defs[v.id]
            source = cast.operands[0]
            return [self.widen_at_use(r, source.type.element) for r in self.regs(source, layout)]
        dist = distribute(layout, v.type.shape)
        found = self._lookup((v.id, dist))
        if found is not None:
            return found
        home = self.plan.home(v)
        if home == FREE:
            regs = self.emit(self.defs[v.id], layout)
        else:
            src = distribute(home, v.type.shape)
            have = self._lookup((v.id, src))
            if have is None:
                raise LoweringError(f"internal: {v!r} used before it is defined")
            regs = self.convert(have, src, dist)
        self.bind_regs(v, dist, regs)
        return regs

    def operand_regs(self, v: ir.Value, layout: Optional[Layout]) -> list[llir.Value]:
        """Registers of ``v`` in ``layout``, or ``[scalar]`` for a scalar."""
        return [self.scalar(v)] if v.type.is_scalar else self.regs(v, layout)

    # -- driver ---------------------------------------------------------------------------------
    def lower_args(self) -> None:
        for spec, value, arg in zip(self.fn.args, self.fn.arg_values, self.kernel.args):
            e = spec.type.element
            if spec.equal_to_1:
                x = constant(e, 1)
            elif isinstance(e, ir.PointerType) or arg.type == reg_type(e):
                x = arg
            elif e.is_floating:
                x = self.from_f32(arg, e)
            elif e.kind == "bool":
                x = self.b.icmp_unsigned("!=", arg, llir.Constant(I32, 0), name=spec.name)
            else:
                x = self.b.trunc(arg, reg_type(e), name=spec.name)
            self.bind_scalar(value, x)

    def lower_block(self, block: ir.Block) -> None:
        for op in block.ops:
            self.lower_op(op)

    def lower_op(self, op: ir.Op) -> None:
        try:
            if self._cluster_unstarted and (op.opcode == "cluster_gather" or op.opcode == "for" and any(
                    o.opcode == "cluster_gather" for o in op.attrs["body"].walk())):
                self.cluster_wait()
                self._cluster_unstarted = False
            self._lower_op(op)
        except LoweringError as e:
            if e.loc is None:
                e.loc = op.loc
            raise

    def _lower_op(self, op: ir.Op) -> None:
        code = op.opcode
        if code == "for":
            self.lower_for(op)
        elif code == "store":
            self.lower_store(op)
        elif code == "red":
            self.lower_red(op)
        elif code == "assert":
            self.lower_assert(op)
        elif code == "yield":
            raise LoweringError("yield outside a for loop body")
        elif code in ("reduce", "argreduce", "welford_combine"):
            self.lower_reduction(op)
        elif code == "scan":
            self.lower_scan(op)
        elif not op.results:
            raise LoweringError(f"unknown op {code!r} without results")
        else:
            res = op.result
            if res.type.is_scalar:
                self.bind_scalar(res, self.emit(op, None)[0])
            elif self.plan.home(res) != FREE and res.id not in self.remat:
                layout = self.plan.home(res)
                self.bind_regs(res, distribute(layout, res.type.shape), self.emit(op, layout))

    def emit(self, op: ir.Op, layout: Optional[Layout]) -> list[llir.Value]:
        """Registers of ``op``'s single result in ``layout`` (``[scalar]`` if None)."""
        handler = getattr(self, "emit_" + op.opcode, None)
        if handler is None:
            raise LoweringError(f"unknown opcode {op.opcode!r}")
        return handler(op, layout)

    def _count(self, op: ir.Op, layout) -> int:
        return 1 if layout is None else distribute(layout, op.result.type.shape).num_regs

    # -- ops --------------------------------------------------------------------------------------
    def emit_constant(self, op, layout):
        return [constant(op.result.type.element, op.attrs["value"])] * self._count(op, layout)

    def emit_program_id(self, op, layout):
        return [self._sreg("ctaid", op)]

    def emit_num_programs(self, op, layout):
        return [self._sreg("nctaid", op)]

    def _sreg(self, reg: str, op) -> llir.Value:
        axis = op.attrs["axis"]
        if axis not in (0, 1, 2):
            raise LoweringError(f"{op.opcode} axis must be 0, 1 or 2, got {axis}")
        return self.call(f"llvm.nvvm.read.ptx.sreg.{reg}.{'xyz'[axis]}", I32, [], op.result.name)

    def emit_arange(self, op, layout):
        dist = distribute(layout, op.result.type.shape)
        base = self.thread_coord(dist, 0)
        start = op.attrs["start"]
        out = []
        for off in dist.reg_offsets:
            c = start + off[0]
            out.append(self.b.add(base, llir.Constant(I32, c), name=op.result.name) if c else base)
        return out

    def emit_splat(self, op, layout):
        return [self.scalar(op.operands[0])] * self._count(op, layout)

    def emit_broadcast(self, op, layout):
        x = op.operands[0]
        if x.type.is_scalar:
            return self.emit_splat(op, layout)
        src = distribute(layout, x.type.shape)
        dst = distribute(layout, op.result.type.shape)
        grown = [d for d, (a, c) in enumerate(zip(x.type.shape, op.result.type.shape)) if a != c]
        if any(x.type.shape[d] != 1 for d in grown):
            raise LoweringError(f"broadcast from {x.type.shape} to {op.result.type.shape}: only size-1 dims grow")
        regs = self.regs(x, layout)

        def project(vec):
            return tuple(0 if d in grown else c for d, c in enumerate(vec))

        same_threads = (tuple(map(project, dst.lane_bases)) == src.lane_bases
                        and tuple(map(project, dst.warp_bases)) == src.warp_bases)
        if not same_threads:
            raise LoweringError(f"internal: broadcast in {layout!r} moves data between threads")
        return [regs[src.reg_of_offset[project(off)]] for off in dst.reg_offsets]

    def emit_expand_dims(self, op, layout):
        x = op.operands[0]
        axis = op.attrs["axis"]
        if x.type.is_scalar:
            return self.emit_splat(op, layout)
        src_layout = SliceLayout(layout, axis)
        src = distribute(src_layout, x.type.shape)
        dst = distribute(layout, op.result.type.shape)
        regs = self.regs(x, src_layout)
        return [regs[src.reg_of_offset[off[:axis] + off[axis + 1:]]] for off in dst.reg_offsets]

    def emit_reshape(self, op, layout):
        x = op.operands[0]
        if x.type.is_scalar:
            return self.emit_splat(op, layout)
        src_layout = self.plan.placed(x) or self.plan.default(len(x.type.shape))
        return self.convert(self.regs(x, src_layout), distribute(src_layout, x.type.shape),
                            distribute(layout, op.result.type.shape))

    def _operand_columns(self, op, layout) -> list[list[llir.Value]]:
        """Each operand's registers in ``layout``, a scalar's repeated to the others' count."""
        fetched = {}  # one fetch per distinct operand: ``x * x`` widens a rematerialised x once
        for o in op.operands:
            if o.id not in fetched:
                fetched[o.id] = self.operand_regs(o, layout)
        cols = [fetched[o.id] for o in op.operands]
        n = max(len(c) for c in cols)
        return [c * n if len(c) == 1 else c for c in cols]

    def _elementwise(self, op, layout, f):
        cols = self._operand_columns(op, layout)
        return [f(*regs) for regs in zip(*cols)]

    def emit_binary(self, op, layout):
        kind = op.attrs["op"]
        a, c = op.operands
        name = op.result.name
        if isinstance(a.type.element, ir.PointerType) or isinstance(c.type.element, ir.PointerType):
            return self._pointer_arith(op, layout)
        t = a.type.element
        if kind == "truediv" and t == ir.float32:  # block-level: registers may share a divisor
            return self.divide(*self._operand_columns(op, layout), name=name)
        return self._elementwise(op, layout, lambda x, y: self.binary(kind, x, y, t, name))

    def _pointer_arith(self, op, layout):
        kind = op.attrs["op"]
        a, c = op.operands
        if isinstance(c.type.element, ir.PointerType):
            if kind != "add" or isinstance(a.type.element, ir.PointerType):
                raise LoweringError(f"pointer arithmetic {kind} with operands {a.type} and {c.type}")
            a, c = c, a
        if kind not in ("add", "sub"):
            raise LoweringError(f"pointer arithmetic supports + and -, not {kind}")
        offset_t = c.type.element
        if not offset_t.is_integer:
            raise LoweringError(f"pointer offset must be an integer, got {offset_t}")
        elem = reg_type(a.type.element.element) if a.type.element.element.kind != "bool" else I8
        ptrs, offs = self.operand_regs(a, layout), self.operand_regs(c, layout)
        n = max(len(ptrs), len(offs))
        ptrs, offs = (ptrs * n if len(ptrs) == 1 else ptrs), (offs * n if len(offs) == 1 else offs)
        out = []
        for p, o in zip(ptrs, offs):
            # 64-bit address math so blocks beyond 2**31 elements work with int64 indices.
            if o.type.width < 64:
                o = (self.b.sext if offset_t.is_signed else self.b.zext)(o, I64)
            if kind == "sub":
                o = self.b.neg(o)
            out.append(self.b.gep(p, [o], source_etype=elem, name=op.result.name))
        return out

    def emit_compare(self, op, layout):
        t = op.operands[0].type.element
        pred = op.attrs["pred"]
        return self._elementwise(op, layout, lambda x, y: self.compare(pred, x, y, t, op.result.name))

    def emit_math(self, op, layout):
        t = op.operands[0].type.element
        out = op.result.type.element
        return self._elementwise(op, layout, lambda *xs: self.math(op.attrs["fn"], list(xs), t, out, op.result.name))

    def emit_select(self, op, layout):
        return self._elementwise(op, layout, lambda c, x, y: self.b.select(c, x, y, name=op.result.name))

    def emit_cast(self, op, layout):
        src, dst = op.operands[0].type.element, op.result.type.element
        return self._elementwise(op, layout, lambda x: self.cast(x, src, dst, op.result.name))

    def emit_bitcast(self, op, layout):
        src, dst = op.operands[0].type.element, op.result.type.element
        return self._elementwise(op, layout, lambda x: self.bitcast(x, src, dst, op.result.name))

    def emit_cluster_gather(self, op, layout):
        return self.lower_cluster_gather(op, distribute(layout, op.result.type.shape))

    def emit_atomic(self, op, layout):
        return [self.lower_atomic(op)]

    def emit_load(self, op, layout):
        if id(op) in self._pipelined:
            return self.pipeline_read(op, layout)
        return self.lower_load(op, layout)

    # -- loops ---------------------------------------------------------------------------------------
    def lower_for(self, op: ir.Op) -> None:
        pipe = self.pipelines.get(id(op))
        if pipe is None:
            self._lower_loop(op)
        else:
            self.lower_pipelined_for(op, pipe, lambda *hooks: self._lower_loop(op, *hooks))

    def _lower_loop(self, op: ir.Op, prologue=None, body_start=None, next_stage=None) -> None:
        """The loop as header (phis, exit test), body and latch. The optional hooks
        (`PipelineCodegen.lower_pipelined_for`) add an i32 stage counter phi."""
        b = self.b
        iv = op.attrs["iv"]
        iv_t = reg_type(iv.type.element)
        lb, ub, step = (self._as_int(self.scalar(o), iv_t) for o in op.operands[:3])
        if prologue is not None:
            prologue(lb, ub, step)
        inits = op.operands[3:]
        homes = [self.plan.placed(r) for r in op.results]
        init_regs = [self.operand_regs(i, h) for i, h in zip(inits, homes)]
        tag = iv.name or f"loop{iv.id}"
        header = self.kernel.append_basic_block(f"{tag}.header")
        body = self.kernel.append_basic_block(f"{tag}.body")
        exit_ = self.kernel.append_basic_block(f"{tag}.exit")
        pre = b.block
        b.branch(header)
        b.position_at_end(header)
        iv_phi = b.phi(iv_t, name=iv.name)
        iv_phi.add_incoming(lb, pre)
        if body_start is not None:
            stage = b.phi(I32, name=f"{tag}.stage")
            stage.add_incoming(llir.Constant(I32, 0), pre)
        phis = []
        for regs in init_regs:
            row = []
            for r in regs:
                phi = b.phi(r.type)
                phi.add_incoming(r, pre)
                row.append(phi)
            phis.append(row)
        # The frontend guarantees step > 0 (the IR's `for` runs while iv < ub).
        b.cbranch(b.icmp_signed("<", iv_phi, ub), body, exit_)
        b.position_at_end(body)
        self.scopes.append({})
        self._loop_depth += 1
        self.bind_scalar(iv, iv_phi)
        for c, h, row in zip(op.attrs["carried"], homes, phis):
            self.bind_result(c, h, row)
        if body_start is not None:
            body_start(iv_phi, stage, ub, step)
        ops = op.attrs["body"].ops
        if not ops or ops[-1].opcode != "yield":
            raise LoweringError("a for loop body must end with yield")
        self.lower_block(ir.Block(ops[:-1]))
        yielded = [self.operand_regs(y, h) for y, h in zip(ops[-1].operands, homes)]
        latch = b.block
        for row, regs in zip(phis, yielded):
            for phi, r in zip(row, regs):
                phi.add_incoming(r, latch)
        iv_phi.add_incoming(b.add(iv_phi, step), latch)
        if next_stage is not None:
            stage.add_incoming(next_stage(stage), latch)
        b.branch(header)
        self._loop_depth -= 1
        self.scopes.pop()
        b.position_at_end(exit_)
        for r, h, row in zip(op.results, homes, phis):
            self.bind_result(r, h, row)

    def _as_int(self, x: llir.Value, t: llir.IntType) -> llir.Value:
        if x.type == t:
            return x
        return self.b.sext(x, t) if x.type.width < t.width else self.b.trunc(x, t)


def lower(fn: ir.Function, *, num_warps: int, cc: tuple[int, int], data_layout: str = "",
          num_stages: int = 1, maxnreg: Optional[int] = None) -> LoweredKernel:
    """Lower ``fn`` to an ``llvmlite.ir`` module for ``num_warps`` warps per program on
    compute capability ``cc``; ``num_stages >= 2`` pipelines loop loads through shared
    memory (`nvptx_pipeline`); ``maxnreg`` caps the registers per thread (and turns on
    rematerialisation, see the module docstring).

    Raises:
        LoweringError: an op, type or shape this backend does not support (the message
            names it).
        ValueError: ``maxnreg`` outside [16, 255].
    """
    lowering = _Lowering(fn, num_warps, data_layout, cc, num_stages, maxnreg)
    lowering.lower_args()
    if fn.cluster_size > 1:
        lowering.cluster_arrive(relaxed=True)  # waited on before the first gather: every peer has started
    lowering.lower_block(fn.body)
    return lowering.finish()


__all__ = ["LoweredKernel", "LoweringError", "check_maxnreg", "lower", "param_kind", "plan_rematerialization",
           "TRIPLE"]
