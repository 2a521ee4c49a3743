"""Global loads and stores of block values.

Each thread moves its registers in groups: registers that are consecutive along the
layout's fastest dim and, by the axis analysis, consecutive and aligned in memory
under one mask value, go through one access of up to 16 bytes (``ld.global.v4.b32``
for fp32, eight fp16/bf16 as four 32-bit words, two fp64 as ``v2.b64``).

Unmasked accesses are plain LLVM vector loads/stores (the optimiser sees them),
except loads of elements narrower than 32 bits in groups: those are PTX words split
by shifts, because LLVM would otherwise narrow them to 16-bit loads, vectorize those
again, and unpack each bf16 with two instructions instead of one. Masked accesses
are predicated PTX, as Triton does: the ``other`` value is moved into the
destination registers first, then ``@p ld.global...`` overwrites them where the
mask holds. Stores from threads that only hold copies of elements (replicated
layouts) are masked off, so each element is written once. Loads with an eviction
policy or a cache operator are PTX too (``ld.global.L1::evict_first.L2::cache_hint`` with
a ``createpolicy`` operand on sm_80+, ``ld.global.cg``), predicated when masked. PTX
has no form with both an L1 eviction priority and a cache operator: with both, the
operator and the L2 policy apply.

A program's (scalar) atomic is one thread's PTX ``atom``, between two barriers: the
first orders every thread's earlier writes before a release, the second every
thread's later reads after an acquire; the old value reaches all threads through
shared memory (the pattern of CUTLASS's semaphore and of CUDA's threadFenceReduction
sample).

A ``cluster_gather`` (sm_90+) goes through distributed shared memory, pushed:
every program has a slot per program of the cluster for each ``cluster_gather`` op
(`nvptx._Lowering.gather_slots`); thread ``r`` of each program writes the value,
widened to a 32- or 64-bit word, into slot ``rank`` of program ``r``
(``mapa.shared::cluster`` maps the address, ``st.shared::cluster`` writes), after
waiting on a relaxed cluster arrive made at the kernel's entry (a program may write
a peer's shared memory only once the peer has started); one cluster barrier
(``barrier.cluster.arrive``, release, then ``wait``, acquire)
publishes the writes; every thread then reads the slots from its own shared memory.
All remote accesses come before the barrier, so none can reach a program after it
exits (the CUDA programming guide's rule for distributed shared memory); in a loop
a second cluster barrier keeps the next iteration's writes behind this one's reads.
Reading the peers' values remotely instead, with every warp loading from every
peer, ran LayerNorm 30-40% slower on an H200.
"""

from __future__ import annotations

from llvmlite import ir as llir

from . import ir
from .axis_info import vector_width
from .layout import Distribution, distribute
from .nvptx_layouts import element_bytes
from .nvptx_ops import I1, I8, I16, I32, LoweringError, mem_type

_CONSTRAINT = {8: "h", 16: "h", 32: "r", 64: "l"}
_ATOMIC_TYPE = {ir.int32: ("u32", "r"), ir.int64: ("u64", "l"), ir.float32: ("f32", "f"), ir.float64: ("f64", "d")}
"""PTX ``atom`` type suffix and inline-asm constraint of each atomic pointee."""


def _word_shape(bits: int, vec: int) -> tuple[int, int]:
    """(word bits, word count) that carry ``vec`` elements of ``bits`` bits."""
    total = bits * vec
    word = 64 if bits == 64 else min(32, total)
    return word, total // word


def contiguous_run(dist: Distribution) -> tuple[int, int]:
    """(dim, length) of the leading registers that are consecutive along one dim."""
    if not dist.reg_bases:
        return 0, 1
    first = dist.reg_bases[0]
    dim = next(d for d, c in enumerate(first) if c)
    n = 0
    for i, basis in enumerate(dist.reg_bases):
        expected = tuple((1 << i) if d == dim else 0 for d in range(dist.rank))
        if basis != expected:
            break
        n += 1
    return dim, 1 << n


def access_width(axis: dict, dist: Distribution, ptr: ir.Value, mask) -> int:
    """Elements of ``ptr``'s block one thread moves in one access (a power of two, at
    most 16 bytes): consecutive registers that the axis analysis (``axis``) proves
    contiguous and aligned in memory and, if ``mask`` is given, under one mask value."""
    dim, run = contiguous_run(dist)
    if run == 1:
        return 1
    elem = ptr.type.element.element
    mask_info = axis.get(mask.id) if mask is not None else None
    return min(run, vector_width(axis[ptr.id], element_bytes(elem), dim, mask_info))


def mask_operand(axis: dict, v):
    """A load's or store's mask, or None for an absent or provably all-true one."""
    if v is None:
        return None
    info = axis.get(v.id)
    return None if info is not None and info.constant == 1 else v


class MemoryCodegen:
    """Mixin of the NVPTX lowering: ``load``/``store`` ops."""

    # -- words <-> elements ------------------------------------------------------------
    def _to_int(self, x: llir.Value, bits: int) -> llir.Value:
        t = llir.IntType(bits)
        if x.type == t:
            return x
        if isinstance(x.type, llir.PointerType):
            return self.b.ptrtoint(x, t)
        return self.b.bitcast(x, t)

    def _from_int(self, x: llir.Value, t: llir.Type) -> llir.Value:
        if x.type == t:
            return x
        if isinstance(t, llir.PointerType):
            return self.b.inttoptr(x, t)
        return self.b.bitcast(x, t)

    def _pack(self, elems: list[llir.Value], bits: int) -> list[llir.Value]:
        word, n = _word_shape(bits, len(elems))
        ints = [self._to_int(e, bits) for e in elems]
        if word == bits:
            return ints
        vec = llir.Constant(llir.VectorType(llir.IntType(bits), len(ints)), None)
        for i, e in enumerate(ints):
            vec = self.b.insert_element(vec, e, llir.Constant(I32, i))
        if n == 1:
            return [self.b.bitcast(vec, llir.IntType(word))]
        words = self.b.bitcast(vec, llir.VectorType(llir.IntType(word), n))
        return [self.b.extract_element(words, llir.Constant(I32, i)) for i in range(n)]

    def _unpack(self, words: list[llir.Value], bits: int, vec: int, t: llir.Type) -> list[llir.Value]:
        word, _ = _word_shape(bits, vec)
        if word == bits:
            return [self._from_int(w, t) for w in words]
        # Shift and truncate rather than bitcast to a vector: LLVM then folds the
        # later widening (bf16 -> fp32 is a shift left by 16) into one and/shift.
        elem = llir.IntType(bits)
        out = []
        for w in words:
            for k in range(word // bits):
                part = w if k == 0 else self.b.lshr(w, llir.Constant(w.type, k * bits))
                out.append(self._from_int(self.b.trunc(part, elem), t))
        return out

    @staticmethod
    def _word_value(word: int, x: llir.Value, b: llir.IRBuilder) -> llir.Value:
        """Sub-16-bit words travel in 16-bit registers (PTX has no 8-bit registers)."""
        return b.zext(x, I16) if word == 8 else x

    # -- accesses ------------------------------------------------------------------------
    def _cache_hint(self, policy: str, modifier: str = "") -> tuple[str, str, str]:
        """(asm before the load, the load's qualifiers, its extra operand) for a cache
        operator (``modifier``) and an eviction policy: the L1 eviction priority (unless
        there is an operator) and, on sm_80+, an L2 access policy made by
        ``createpolicy`` (as Triton does)."""
        if not policy:
            return "", modifier, ""
        level = "evict_first" if policy == "evict_first" else "evict_last"
        l1 = modifier or f".L1::{level}"
        if self.cc < (8, 0):
            return "", l1, ""
        return (f"createpolicy.fractional.L2::{level}.b64 %l2_policy, 1.0;\n\t",
                f"{l1}.L2::cache_hint", ", %l2_policy")

    def _load_words(self, ptr, pred, others, word: int, n: int, policy: str = "",
                    modifier: str = "") -> list[llir.Value]:
        c = _CONSTRAINT[word]
        rt = I16 if word == 8 else llir.IntType(word)
        reg_bits = 16 if word == 8 else word
        outs = [f"${i}" for i in range(n)]
        dst = outs[0] if n == 1 else "{" + ", ".join(outs) + "}"
        vs = "" if n == 1 else f".v{n}"
        asm = ""
        args = [ptr] if pred is None else [ptr, pred]
        constraints = [f"={c}"] * n + ["l"] + ([] if pred is None else ["b"])
        if others is not None:
            for i, o in enumerate(others):
                asm += f"mov.b{reg_bits} ${i}, ${n + len(args)};\n\t"
                args.append(self._word_value(word, o, self.b))
                constraints.append(c)
        guard = "" if pred is None else f"@${n + 1} "
        setup, qualifiers, operand = self._cache_hint(policy, modifier)
        load = f"{guard}ld.global{qualifiers}{vs}.b{word} {dst}, [${n}]{operand};"
        asm += f"{{\n\t.reg .b64 %l2_policy;\n\t{setup}{load}\n\t}}" if setup else load
        ret = rt if n == 1 else llir.LiteralStructType([rt] * n)
        fty = llir.FunctionType(ret, [a.type for a in args])
        res = self.b.call(llir.InlineAsm(fty, asm, ",".join(constraints), side_effect=True), args)
        words = [res] if n == 1 else [self.b.extract_value(res, i) for i in range(n)]
        return [self.b.trunc(w, I8) for w in words] if word == 8 else words

    def _store_words(self, ptr, pred, words, word: int) -> None:
        n = len(words)
        c = _CONSTRAINT[word]
        srcs = [f"${i + 1}" for i in range(n)]
        src = srcs[0] if n == 1 else "{" + ", ".join(srcs) + "}"
        vs = "" if n == 1 else f".v{n}"
        asm = f"@${n + 1} st.global{vs}.b{word} [$0], {src};"
        args = [ptr] + [self._word_value(word, w, self.b) for w in words] + [pred]
        fty = llir.FunctionType(llir.VoidType(), [a.type for a in args])
        self.b.call(llir.InlineAsm(fty, asm, ",".join(["l"] + [c] * n + ["b"]), side_effect=True), args)

    def load_group(self, ptr, pred, others, elem: ir.ElementType, vec: int, name: str = "",
                   policy: str = "", modifier: str = "") -> list[llir.Value]:
        """Load ``vec`` consecutive elements at ``ptr`` (predicated by ``pred`` if given;
        ``policy``: an `ir.EVICTION_POLICIES` cache hint, or ""; ``modifier``: an
        `ir.CACHE_MODIFIERS` cache operator, or "")."""
        mt = mem_type(elem)
        bits = 8 * element_bytes(elem)
        word, n = _word_shape(bits, vec)
        if pred is None and word == bits and not policy and not modifier:
            t = mt if vec == 1 else llir.VectorType(mt, vec)
            v = self.b.load(ptr, typ=t, align=vec * element_bytes(elem), name=name)
            elems = [v] if vec == 1 else [self.b.extract_element(v, llir.Constant(I32, i)) for i in range(vec)]
        else:
            other_words = None
            if others is not None:
                other_words = self._pack([self.to_memory(o, elem) for o in others], bits)
            words = self._load_words(ptr, pred, other_words, word, n, policy, modifier)
            elems = self._unpack(words, bits, vec, mt)
        return [self.from_memory(e, elem) for e in elems]

    def store_group(self, ptr, pred, values, elem: ir.ElementType) -> None:
        """Store consecutive elements ``values`` at ``ptr`` (predicated by ``pred`` if given)."""
        mt = mem_type(elem)
        vec = len(values)
        bits = 8 * element_bytes(elem)
        mem = [self.to_memory(v, elem) for v in values]
        if pred is None:
            if vec == 1:
                self.b.store(mem[0], ptr, align=element_bytes(elem))
                return
            v = llir.Constant(llir.VectorType(mt, vec), None)
            for i, e in enumerate(mem):
                v = self.b.insert_element(v, e, llir.Constant(I32, i))
            self.b.store(v, ptr, align=vec * element_bytes(elem))
            return
        word, _ = _word_shape(bits, vec)
        self._store_words(ptr, pred, self._pack(mem, bits), word)

    def to_memory(self, x: llir.Value, elem: ir.ElementType) -> llir.Value:
        if x.type == I1:
            return self.b.zext(x, I8)
        return x

    def from_memory(self, x: llir.Value, elem: ir.ElementType) -> llir.Value:
        if isinstance(elem, ir.DType) and elem.kind == "bool":
            return self.b.icmp_unsigned("!=", x, llir.Constant(I8, 0))
        return x

    # -- ops ------------------------------------------------------------------------------
    def _mask_operand(self, v):
        return mask_operand(self.axis, v)

    def _access_width(self, dist: Distribution, ptr: ir.Value, mask) -> int:
        return access_width(self.axis, dist, ptr, mask)

    def lower_load(self, op: ir.Op, layout) -> list[llir.Value]:
        ptr = op.operands[0]
        mask = self._mask_operand(op.operands[1] if len(op.operands) > 1 else None)
        other = op.operands[2] if len(op.operands) > 2 and mask is not None else None
        elem = op.result.type.element
        name = op.result.name
        policy = op.attrs.get("eviction_policy", "")
        modifier = op.attrs.get("cache_modifier", "")
        if layout is None:
            p = self.scalar(ptr)
            pred = self.scalar(mask) if mask is not None else None
            o = [self.scalar(other)] if other is not None else None
            return self.load_group(p, pred, o, elem, 1, name, policy, modifier)
        dist = distribute(layout, op.result.type.shape)
        ptrs = self.regs(ptr, layout)
        preds = self.regs(mask, layout) if mask is not None else None
        others = self.regs(other, layout) if other is not None else None
        vec = self._access_width(dist, ptr, mask)
        out = []
        for g in range(0, dist.num_regs, vec):
            out += self.load_group(ptrs[g], preds[g] if preds else None,
                                   others[g:g + vec] if others else None, elem, vec, name, policy, modifier)
        return out

    def lower_atomic(self, op: ir.Op) -> llir.Value:
        """The old value of a program's scalar ``atomic`` (see the module docstring)."""
        ptr, value = op.operands[0], op.operands[1]
        mask = op.operands[2] if len(op.operands) > 2 else None
        elem = value.type.element
        suffix, c = _ATOMIC_TYPE[elem]
        t = mem_type(elem)
        atom = f"atom.{op.attrs['sem']}.{op.attrs['scope']}.global.{op.attrs['op']}.{suffix} $0, [$1], $2;"
        args = [self.scalar(ptr), self.scalar(value)]
        constraints = [f"={c}", "l", c]
        if mask is not None:  # masked off: no atomic, old value 0
            atom = f"mov.b{8 * element_bytes(elem)} $0, 0; @$3 {atom}"
            args.append(self.scalar(mask))
            constraints.append("b")
        self.reserve_shared(element_bytes(elem))
        slot = self.smem_at(0, llir.Constant(I32, 0), t)
        self.barrier()
        with self.b.if_then(self.b.icmp_unsigned("==", self.tid, llir.Constant(I32, 0))):
            asm = llir.InlineAsm(llir.FunctionType(t, [a.type for a in args]), atom, ",".join(constraints),
                                 side_effect=True)
            self.b.store(self.b.call(asm, args), slot, align=element_bytes(elem))
        self.barrier()
        self._shared_written = True
        return self.b.load(slot, typ=t, align=element_bytes(elem))

    def lower_red(self, op: ir.Op) -> None:
        """A block atomic: each register's PTX ``red`` (no old value), predicated by its
        mask and, in replicated layouts, by owning the element (each lane adds once)."""
        ptr, value = op.operands[0], op.operands[1]
        mask = self._mask_operand(op.operands[2] if len(op.operands) > 2 else None)
        elem = value.type.element
        suffix, c = _ATOMIC_TYPE[elem]
        sem = "release" if op.attrs["sem"] in ("release", "acq_rel") else "relaxed"
        red = f"red.{sem}.{op.attrs['scope']}.global.{op.attrs['op']}.{suffix} [$0], $1;"
        layout = self.plan.store_layout(op)
        dist = distribute(layout, ptr.type.shape)
        ptrs = self.regs(ptr, layout)
        values = self.regs(value, layout)
        preds = self.regs(mask, layout) if mask is not None else None
        primary = self.primary(dist)
        for g in range(dist.num_regs):
            pred = preds[g] if preds else None
            if primary is not None:
                pred = primary if pred is None else self.b.and_(pred, primary)
            args, constraints, asm = [ptrs[g], values[g]], ["l", c], red
            if pred is not None:
                args.append(pred)
                constraints.append("b")
                asm = "@$2 " + red
            fty = llir.FunctionType(llir.VoidType(), [a.type for a in args])
            self.b.call(llir.InlineAsm(fty, asm, ",".join(constraints + ["~{memory}"]), side_effect=True), args)

    def lower_assert(self, op: ir.Op) -> None:
        """``trap`` where a lane of the condition is false (the launch fails)."""
        cond = op.operands[0]
        if cond.type.is_scalar:
            regs = [self.scalar(cond)]
        else:
            regs = self.regs(cond, self.plan.placed(cond) or self.plan.default(len(cond.type.shape)))
        trap = self.declare("llvm.trap", llir.VoidType(), [])
        for reg in regs:
            with self.b.if_then(self.b.not_(reg), likely=False):
                self.b.call(trap, [])

    def lower_cluster_gather(self, op: ir.Op, dist: Distribution) -> list[llir.Value]:
        """The registers of a ``cluster_gather``'s ``[size]`` result in ``dist`` (see the
        module docstring)."""
        x = op.operands[0]
        size = op.attrs["size"]
        reg = self.scalar(x)
        bits = reg.type.width if isinstance(reg.type, llir.IntType) else element_bytes(x.type.element) * 8
        word = llir.IntType(64 if bits == 64 else 32)
        as_int = reg if isinstance(reg.type, llir.IntType) else self.b.bitcast(reg, llir.IntType(bits))
        value = as_int if bits == word.width else self.b.zext(as_int, word)
        slots = self.b.gep(self.shared_base(), [llir.Constant(I32, self.gather_slots[id(op)])], source_etype=I8)
        rank = self.call("llvm.nvvm.read.ptx.sreg.cluster.ctarank", I32, [], "cluster_rank")
        mine = self.b.ptrtoint(self.b.gep(slots, [rank], source_etype=word), llir.IntType(64))
        c = "l" if word.width == 64 else "r"
        push = llir.InlineAsm(
            llir.FunctionType(llir.VoidType(), [mine.type, I32, word]),
            "{ .reg .u64 %peer; mapa.shared::cluster.u64 %peer, $0, $1; "
            f"st.shared::cluster.b{word.width} [%peer], $2; }}",
            f"l,r,{c},~{{memory}}", side_effect=True)
        with self.b.if_then(self.b.icmp_unsigned("<", self.tid, llir.Constant(I32, size))):
            self.b.call(push, [mine, self.tid, value])  # thread r writes to program r
        self.cluster_barrier()
        base = self.thread_coord(dist, 0)
        out = []
        for off in dist.reg_offsets:
            at = self.b.add(base, llir.Constant(I32, off[0])) if off[0] else base
            got = self.b.load(self.b.gep(slots, [at], source_etype=word), typ=word, align=word.width // 8)
            got = got if bits == word.width else self.b.trunc(got, llir.IntType(bits))
            out.append(got if isinstance(reg.type, llir.IntType) else self.b.bitcast(got, reg.type))
        if self._loop_depth:  # the next iteration's writes must wait for these reads
            self.cluster_barrier()
        return out

    def cluster_barrier(self) -> None:
        """Every thread of every program of the cluster: ``barrier.cluster.arrive``
        (release semantics, the default) then ``barrier.cluster.wait`` (acquire)."""
        self.cluster_arrive()
        self.cluster_wait()

    # LLVM's intrinsics rather than inline asm: they are `convergent`, so no pass
    # duplicates them into divergent paths (`.aligned` needs every thread of a warp).
    def cluster_arrive(self, relaxed: bool = False) -> None:
        name = f"llvm.nvvm.barrier.cluster.arrive{'.relaxed' if relaxed else ''}.aligned"
        self.b.call(self.declare(name, llir.VoidType(), []), [])

    def cluster_wait(self) -> None:
        self.b.call(self.declare("llvm.nvvm.barrier.cluster.wait.aligned", llir.VoidType(), []), [])

    def lower_store(self, op: ir.Op) -> None:
        ptr, value = op.operands[0], op.operands[1]
        mask = self._mask_operand(op.operands[2] if len(op.operands) > 2 else None)
        elem = value.type.element
        if ptr.type.is_scalar:
            if not value.type.is_scalar:
                raise LoweringError("store of a block through a scalar pointer")
            # Every thread holds the scalar; thread 0 writes it.
            pred = self.b.icmp_unsigned("==", self.tid, llir.Constant(I32, 0))
            if mask is not None:
                pred = self.b.and_(pred, self.scalar(mask))
            self.store_group(self.scalar(ptr), pred, [self.scalar(value)], elem)
            return
        layout = self.plan.store_layout(op)
        dist = distribute(layout, ptr.type.shape)
        ptrs = self.regs(ptr, layout)
        values = self.regs(value, layout) if not value.type.is_scalar else [self.scalar(value)] * dist.num_regs
        preds = self.regs(mask, layout) if mask is not None else None
        primary = self.primary(dist)
        vec = self._access_width(dist, ptr, mask)
        for g in range(0, dist.num_regs, vec):
            pred = preds[g] if preds else None
            if primary is not None:
                pred = primary if pred is None else self.b.and_(pred, primary)
            self.store_group(ptrs[g], pred, values[g:g + vec], elem)

