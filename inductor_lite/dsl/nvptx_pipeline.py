"""Software pipelining of loads in ``for`` loops (``num_stages``) through ``cp.async``.

With ``num_stages = S >= 2`` (sm_80 and newer), a load in a loop body whose pointer
and mask are computed from the induction variable and from values defined before the
loop is issued S - 1 iterations ahead, as asynchronous copies from global into
shared memory (``cp.async``), into a ring of S - 1 buffers:

- before the loop, the copies of the first S - 1 iterations are issued, one commit
  group per iteration;
- each iteration waits until at most S - 2 groups are pending, so that its own
  copies have landed;
- where the load was, the values are read back from shared memory into registers;
- right after the loop's last pipelined read, the copies of iteration i + S - 1 are
  issued into the buffer just read, and committed.

So S = 2 needs one buffer: the next iteration's data is in flight, in shared memory,
from this iteration's read until the next one's. Refilling at the top of the body
instead would take one buffer more (for S = 2 twice the shared memory, e.g. 128 KiB
for a bf16 row of 32768, which leaves less of the SM to L1 and to other programs).

Loads of one address (the same pointer and mask computation) in one iteration, with no
store or atomic between them, share one buffer: the later ones issue no copies and
read the earlier one's slots again (the refill then waits for the last of them).

A thread's copies land in slots that only that thread reads back (the slots follow
the load's layout), and ``cp.async.wait_group`` makes a thread's own copies visible
to it, so no barrier is needed. A refill follows the thread's own reads of the slots
it overwrites in program order; its data arrives from global memory long after they
have completed. In flight, a load holds shared memory instead of
registers, which is what lets a program keep the next rows in flight while it
computes on this one. This is the effect of Triton's ``num_stages`` for loops (its
loop pipeliner, which also streams loads through ``cp.async`` into multi-buffered
shared memory); our form is simpler: it moves only loads that the addresses allow,
and leaves the rest of the loop as written.

Masked-off elements, and iterations past the loop's end, copy 0 bytes: ``cp.async``
with a source size of 0 reads no global memory and zero-fills its slot. The read
back selects ``other`` where the mask is false (skipped when ``other`` is +0).
Copies move 4, 8 or 16 bytes (``cp.async.ca``, or ``.cg`` that skips L1 for 16); a
load whose accesses are narrower, or whose address depends on loop-carried values or
on other loads, stays a plain load. Eviction policies are hints; pipelined loads
drop them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from llvmlite import ir as llir

from . import ir
from .layout import WARP_SIZE, Layout, distribute
from .nvptx_layouts import element_bytes
from .nvptx_memory import access_width, mask_operand
from .nvptx_ops import I8, I32, I64, mem_type

MAX_NUM_STAGES = 8
"""Deepest pipeline `check_num_stages` accepts (shared memory runs out long before)."""
COPY_BYTES = (4, 8, 16)
"""Sizes one ``cp.async`` moves (PTX ISA: ``cp-size``)."""

# Ops an address may be computed with: cheap, per-thread, no memory or shared state.
_ADDRESS_OPS = frozenset({"constant", "program_id", "num_programs", "arange", "splat", "broadcast",
                          "expand_dims", "binary", "compare", "select", "cast", "bitcast", "math"})


def check_num_stages(name: str, num_stages) -> None:
    """Raise ValueError unless ``num_stages`` is an int from 1 to `MAX_NUM_STAGES`
    (``name``: the kernel, for the message)."""
    if not isinstance(num_stages, int) or isinstance(num_stages, bool) or not 1 <= num_stages <= MAX_NUM_STAGES:
        raise ValueError(f"kernel {name!r}: num_stages must be an int in [1, {MAX_NUM_STAGES}], got {num_stages!r}")


@dataclass(frozen=True)
class PipelinedLoad:
    """One load streamed through shared memory.

    ``vec``: elements one copy moves (``copy_bytes`` bytes); ``offset``: byte offset of
    its stage-0 buffer in the pipeline region; ``stage_bytes``: bytes of one stage (a
    copy slot per thread per access group). ``issued`` False: a repeat of an earlier
    load of the loop, whose buffer it reads and whose copies it does not issue again.
    """

    op: ir.Op
    layout: Layout
    vec: int
    copy_bytes: int
    offset: int
    stage_bytes: int
    issued: bool = True


@dataclass(frozen=True)
class LoopPipeline:
    """The pipelined loads of one ``for`` op and the body ops their addresses need
    (in body order), which the lowering evaluates again for later iterations."""

    loads: tuple[PipelinedLoad, ...]
    address_ops: tuple[ir.Op, ...]


def plan_pipelines(fn: ir.Function, plan, axis: dict, num_stages: int, num_warps: int,
                   cc: tuple[int, int]) -> tuple[dict[int, LoopPipeline], int]:
    """Which loads of ``fn`` to pipeline: ``({id(for op): LoopPipeline}, region bytes)``.

    The region (all loops' ``num_stages - 1`` buffers, side by side) starts at byte 0 of
    the kernel's shared memory. Nothing is pipelined for ``num_stages < 2`` or before sm_80.
    """
    if num_stages < 2 or tuple(cc) < (8, 0):
        return {}, 0
    threads = WARP_SIZE * num_warps
    pipelines: dict[int, LoopPipeline] = {}
    offset = 0
    for op in fn.walk():
        if op.opcode != "for" or _has_atomic(op):
            continue
        loads, address_ops = [], set()
        buffers: dict[tuple, PipelinedLoad] = {}  # address key -> the load that issues its copies
        body = op.attrs["body"].ops
        producers = {r.id: o for o in body for r in o.results}
        memo: dict[int, tuple] = {}
        for load, needed in _candidates(op, axis):
            layout = plan.placed(load.result)
            if layout is None:
                continue
            dist = distribute(layout, load.result.type.shape)
            mask = mask_operand(axis, load.operands[1] if len(load.operands) > 1 else None)
            vec = access_width(axis, dist, load.operands[0], mask)
            copy_bytes = vec * element_bytes(load.result.type.element)
            if copy_bytes not in COPY_BYTES:
                continue
            key = (_address_key(load.operands[0], producers, memo), _address_key(mask, producers, memo),
                   layout, vec)
            first = buffers.get(key)
            if first is not None and not _writes_between(body, first.op, load):
                loads.append(dataclasses.replace(first, op=load, issued=False))
                continue
            stage_bytes = dist.num_regs // vec * threads * copy_bytes
            buffers[key] = PipelinedLoad(load, layout, vec, copy_bytes, offset, stage_bytes)
            loads.append(buffers[key])
            offset += (num_stages - 1) * stage_bytes
            address_ops |= needed
        if loads:
            ordered = tuple(o for o in op.attrs["body"].ops if id(o) in address_ops)
            pipelines[id(op)] = LoopPipeline(tuple(loads), ordered)
    return pipelines, offset


def _address_key(value, producers: dict[int, ir.Op], memo: dict[int, tuple]):
    """A key equal for two pointer (or mask) values of one loop body that the same
    computation produces: the computation's ops (pure, see `_ADDRESS_OPS`; ``producers``
    maps the ids of the body's values to their ops) spelled out down to values defined
    outside the body, which stand for themselves. ``memo`` holds the keys found so far
    (by value id): a value shared by several addresses is spelled out once."""
    if value is None:
        return None
    if value.id not in memo:
        producer = producers.get(value.id)
        if producer is None:
            memo[value.id] = ("value", value.id)
        else:
            attrs = tuple(sorted((k, repr(v)) for k, v in producer.attrs.items()))
            operands = tuple(_address_key(v, producers, memo) for v in producer.operands)
            memo[value.id] = (producer.opcode, attrs, repr(value.type), operands)
    return memo[value.id]


def _writes_between(body: list[ir.Op], first: ir.Op, later: ir.Op) -> bool:
    """Whether an op of ``body`` after ``first`` and before ``later`` (nested loops
    included) stores or is atomic, so ``later`` may read what ``first`` did not."""
    start, end = body.index(first), body.index(later)
    return any(o.opcode in ("store", "atomic", "red") for op in body[start + 1:end]
               for o in ([op] + (list(op.attrs["body"].walk()) if op.opcode == "for" else [])))


def _has_atomic(loop: ir.Op) -> bool:
    """Whether ``loop`` (nested loops included) holds an atomic (scalar or block), which orders the loads
    after it: issuing them iterations ahead would break that."""
    return any(o.opcode in ("atomic", "red") for o in loop.attrs["body"].walk())


def _candidates(loop: ir.Op, axis: dict):
    """(load op, ids of the body ops its pointer and mask need) for each top-level load
    of ``loop``'s body whose address follows from the induction variable alone."""
    iv = loop.attrs["iv"]
    body = loop.attrs["body"].ops
    # Values the body defines; anything else a load reaches was defined before the loop
    # (a nested loop's values reach the body only as that loop's results).
    producers = {r.id: o for o in body for r in o.results}
    carried = {c.id for c in loop.attrs["carried"]}
    for load in body:
        if load.opcode != "load" or load.result.type.is_scalar:
            continue
        needed: set[int] = set()
        uses_iv = False
        ok = True
        stack = [load.operands[0]]
        mask = mask_operand(axis, load.operands[1] if len(load.operands) > 1 else None)
        if mask is not None:
            stack.append(mask)
        seen: set[int] = set()
        while stack and ok:
            v = stack.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            if v.id == iv.id:
                uses_iv = True
            elif v.id in carried:
                ok = False
            elif v.id in producers:
                producer = producers[v.id]
                if producer.opcode not in _ADDRESS_OPS:
                    ok = False
                else:
                    needed.add(id(producer))
                    stack.extend(producer.operands)
        if ok and uses_iv:
            yield load, needed


class PipelineCodegen:
    """Mixin of the NVPTX lowering: ``cp.async`` prologue, per-iteration issue and wait,
    and the shared-memory read back of pipelined loads."""

    def _asm(self, text: str, constraints: str, args: list) -> None:
        fty = llir.FunctionType(llir.VoidType(), [a.type for a in args])
        self.b.call(llir.InlineAsm(fty, text, constraints, side_effect=True), args)

    def _commit(self) -> None:
        self._asm("cp.async.commit_group;", "~{memory}", [])

    def _wait(self, pending: int) -> None:
        self._asm(f"cp.async.wait_group {pending};", "~{memory}", [])

    def _slot(self, load: PipelinedLoad, stage: llir.Value) -> llir.Value:
        """Shared address of this thread's first copy slot of ``load`` in ``stage``."""
        key = ("slot", load.copy_bytes)
        if key not in self._thread_cache:
            self._thread_cache[key] = self.entry_b.mul(self.tid, llir.Constant(I32, load.copy_bytes))
        off = self.b.add(self.b.mul(stage, llir.Constant(I32, load.stage_bytes)),
                         llir.Constant(I32, load.offset))
        return self.b.gep(self.shared_base(), [self.b.add(off, self._thread_cache[key])], source_etype=I8)

    def _group_slot(self, base: llir.Value, load: PipelinedLoad, group: int) -> llir.Value:
        step = group * WARP_SIZE * self.num_warps * load.copy_bytes
        return self.b.gep(base, [llir.Constant(I32, step)], source_etype=I8) if step else base

    def pipeline_issue(self, pipe: LoopPipeline, iv: ir.Value, iv_value: llir.Value, valid: llir.Value,
                       stage: llir.Value, outer_scopes: int) -> None:
        """Issue the copies of the iteration whose induction variable is ``iv_value``
        (i1 ``valid``: it exists) into ``stage``'s buffers, and commit them as a group.

        The addresses are evaluated in a scope that sees only the ``outer_scopes``
        scopes from before the loop: the body's scope holds this iteration's values
        (values computed on first use, such as an offset or a mask, are cached there),
        which the later iteration's addresses must not reuse."""
        body_scopes = self.scopes
        self.scopes = body_scopes[:outer_scopes] + [{}]
        self.bind_scalar(iv, iv_value)
        for op in pipe.address_ops:
            self.lower_op(op)
        for load in pipe.loads:
            if not load.issued:
                continue
            op = load.op
            mask = mask_operand(self.axis, op.operands[1] if len(op.operands) > 1 else None)
            ptrs = self.regs(op.operands[0], load.layout)
            preds = self.regs(mask, load.layout) if mask is not None else None
            base = self._slot(load, stage)
            kind = "cg" if load.copy_bytes == 16 else "ca"
            size = llir.Constant(I32, load.copy_bytes)
            for group, reg in enumerate(range(0, len(ptrs), load.vec)):
                ok = valid if preds is None else self.b.and_(valid, preds[reg])
                self._asm(f"cp.async.{kind}.shared.global [$0], [$1], {load.copy_bytes}, $2;", "l,l,r",
                          [self._group_slot(base, load, group), ptrs[reg],
                           self.b.select(ok, size, llir.Constant(I32, 0))])
        self.scopes = body_scopes
        self._commit()

    def pipeline_read(self, op: ir.Op, layout: Layout) -> list[llir.Value]:
        """Registers of pipelined load ``op`` in the current iteration, from shared memory;
        after the loop's last pipelined read, the refill of the buffers."""
        load, stage, refill = self._pipelined[id(op)]
        if layout != load.layout:
            raise AssertionError(f"internal: pipelined {op.result!r} read in {layout!r}, planned {load.layout!r}")
        elem = op.result.type.element
        mt = mem_type(elem)
        bits = 8 * element_bytes(elem)
        word = min(32, load.copy_bytes * 8) if bits < 32 else bits
        words_per_copy = load.copy_bytes * 8 // word
        wt = llir.IntType(word) if bits < 32 else mt
        vt = wt if words_per_copy == 1 else llir.VectorType(wt, words_per_copy)
        base = self._slot(load, stage)
        regs = distribute(layout, op.result.type.shape).num_regs
        out: list[llir.Value] = []
        for group in range(regs // load.vec):
            v = self.b.load(self._group_slot(base, load, group), typ=vt, align=load.copy_bytes)
            words = [v] if words_per_copy == 1 else [self.b.extract_element(v, llir.Constant(I32, i))
                                                     for i in range(words_per_copy)]
            elems = self._unpack(words, bits, load.vec, mt) if bits < 32 else words
            out += [self.from_memory(e, elem) for e in elems]
        mask = mask_operand(self.axis, op.operands[1] if len(op.operands) > 1 else None)
        if mask is not None and not self._zero_filled(op.operands[2]):
            preds = self.regs(mask, layout)
            others = self.regs(op.operands[2], layout)
            out = [self.b.select(p, x, o) for p, x, o in zip(preds, out, others)]
        if refill is not None:
            refill()
        return out

    def _zero_filled(self, other: ir.Value) -> bool:
        """``other`` is the constant +0.0 (or 0), the bits a 0-byte copy leaves."""
        return self._is_constant(other, 0.0) and math.copysign(1.0, self.defs[other.id].attrs["value"]) > 0

    def lower_pipelined_for(self, op: ir.Op, pipe: LoopPipeline, lower_loop) -> None:
        """Lower ``for`` op ``op`` with its loads pipelined ``num_stages - 1`` iterations
        ahead through as many buffers.

        ``lower_loop(prologue, body_start, next_stage)`` is the plain loop lowering, with
        hooks: ``prologue(lb, ub, step)`` runs before the loop, ``body_start(iv, stage,
        ub, step)`` first in the body (``stage``: the i32 phi of the buffer this
        iteration reads), ``next_stage(stage)`` in the latch, returning the phi's next
        value.
        """
        ahead = self.num_stages - 1  # iterations in flight, and buffers
        iv = op.attrs["iv"]
        outer_scopes = len(self.scopes)  # the body's scope comes on top of these

        def wide(x: llir.Value) -> llir.Value:
            return x if x.type == I64 else self.b.sext(x, I64)

        def exists(iv_value, later: int, ub, step) -> tuple[llir.Value, llir.Value]:
            """The induction variable ``later`` iterations on, and whether that iteration
            runs. In 64 bits, so that looking past the end of an int32 range cannot wrap."""
            wide_value = self.b.add(wide(iv_value), self.b.mul(wide(step), llir.Constant(I64, later)))
            value = self.b.add(iv_value, self.b.mul(step, llir.Constant(step.type, later)))
            return value, self.b.icmp_signed("<", wide_value, wide(ub))

        def prologue(lb, ub, step):
            for k in range(ahead):
                value, valid = exists(lb, k, ub, step)
                self.pipeline_issue(pipe, iv, value, valid, llir.Constant(I32, k), outer_scopes)

        def body_start(iv_value, stage, ub, step):
            def refill():
                value, valid = exists(iv_value, ahead, ub, step)
                self.pipeline_issue(pipe, iv, value, valid, stage, outer_scopes)

            last = pipe.loads[-1].op
            for load in pipe.loads:
                self._pipelined[id(load.op)] = (load, stage, refill if load.op is last else None)
            self._wait(ahead - 1)

        def next_stage(stage):
            wrap = self.b.icmp_unsigned("==", stage, llir.Constant(I32, ahead - 1))
            return self.b.select(wrap, llir.Constant(I32, 0), self.b.add(stage, llir.Constant(I32, 1)))

        lower_loop(prologue, body_start, next_stage)
        for load in pipe.loads:
            del self._pipelined[id(load.op)]
        # Copies for iterations past the end are still landing (zero-fills).
        self._wait(0)
