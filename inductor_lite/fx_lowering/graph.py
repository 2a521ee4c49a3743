"""`GraphLowering`: an FX Interpreter that turns an aten graph into loop-level IR.

Running the graph with `GraphLowering.run` evaluates each node symbolically:

- placeholders become `InputBuffer`s (tensors) or sympy symbols (SymInts);
- nodes whose value is a symbolic scalar (``sym_size``, SymInt arithmetic) become
  their sympy expression from ``meta['val']``;
- aten ops with a lowering (`lowerings.LOWERINGS`) become lazy `Pointwise` nodes or
  views; every other op (and a lowering raising `NoLowering`) becomes an
  `ExternKernel` on realized inputs, counted per op; so does an op with a lowering
  when a tensor it reads or returns has a dtype the DSL lacks (complex, float8, ...);
- ``higher_order.with_effects`` (AOTAutograd's ordering token around side-effecting
  ops such as ``aten._linalg_check_errors``) becomes an extern call of the wrapped op;
- an op with a lowering whose output has no elements becomes an allocation only;
- a lazy value is realized into a `ComputedBuffer` when it is too large to inline
  (into each of several users, see `REALIZE_REUSED_OPS`), feeds an extern, or is a
  graph output. Realized layouts use
  the strides of the node's ``meta['val']`` when those are dense (so graph outputs
  match eager), contiguous strides otherwise.

Afterwards ``buffers`` lists every realized buffer in creation order and
``graph_outputs`` the returned values; that is all the scheduler reads.
"""

from __future__ import annotations

import collections
import itertools
import operator
from typing import Any, Optional, Sequence

import sympy
import torch
import torch.utils._pytree as pytree
from torch.utils._sympy.functions import Max as TorchMax

from ..codegen.kernel import DSL_DTYPES
from ..logs import log_artifact
from ..ir.indexing import Expr, as_expr, known_equal
from ..ir.nodes import (
    Buffer, ComputedBuffer, ExternKernel, GenericView, InputBuffer, IRNode, Layout, MultiOutput,
    Pointwise, ReinterpretView, StorageBox, StridedInfo, as_strided_view, underlying_buffer,
)
from . import reductions  # noqa: F401 - registers the reduction lowerings
from .extern_layouts import fixed_layout, may_alias_inputs
from .lowerings import LOWERINGS, LoweringContext, NoLowering, lazy_origins, op_short_name
from ..ir.ops import OpsHandler, set_ops_handler

MAX_INLINE_OPS = 96
"""A lazy Pointwise whose inlined body has more ops than this is realized (bounds code size)."""

REALIZE_REUSED_OPS = 30
REALIZE_REUSED_READS = 4
"""A lazy Pointwise with several users is inlined into each of them (recomputed) unless
its body has more than `REALIZE_REUSED_OPS` ops or reads more than
`REALIZE_REUSED_READS` distinct buffers: then it is realized once. Recomputing a cheap
producer costs less than a round trip through memory (LayerNorm's backward recomputes
the normalized input in its column-sum kernel instead of reading it back in fp32).
The thresholds are TorchInductor's (``config.realize_opcount_threshold`` and
``realize_reads_threshold``, applied in ``StorageBox.should_realize_on_reuse``)."""

REALIZE_ACCUMULATED_READS = 8
"""A lazy Pointwise that reads more distinct buffers than this is realized even with one
user, so that branches of small reads do not pile up in one consumer (TorchInductor's
``realize_acc_reads_threshold``)."""


class LoweringError(RuntimeError):
    """An FX node could not be lowered; the message names the node."""


SymbolSource = tuple[str, str, int]
"""How the wrapper computes a size symbol: (variable, 'size'|'stride'|'value'|'offset', dim)."""


class _OpCounter(OpsHandler):
    def __init__(self):
        self.count = 0
        self.reads: set[str] = set()

    def load(self, name, index):
        self.count += 1
        self.reads.add(name)

    def masked(self, mask, body, other):
        self.count += 1
        return body()

    def default(self, name, *args):
        self.count += 1


def count_ops(loops: Pointwise) -> tuple[int, int]:
    """``(ops, reads)``: the ``ops`` calls one element of ``loops`` makes and the distinct
    buffers it loads (inlined producers included)."""
    counter = _OpCounter()
    with set_ops_handler(counter):
        loops.inner_fn(loops.index_vars())
    return counter.count, len(counter.reads)


def _is_input_update(target, args) -> bool:
    """Whether a mutating op is AOTAutograd's update of a graph input, ``copy_(input,
    value)``, which an inference graph keeps (``keep_inference_input_mutations``) and
    `constructors` lowers in place; every other mutating op is an error in a
    functional graph."""
    return target is torch.ops.aten.copy_.default and isinstance(args[0], InputBuffer) and not args[0].is_constant


def _should_realize(box: StorageBox, users: int) -> bool:
    """Whether a lazy value with ``users`` FX users is realized rather than inlined into
    each (see `REALIZE_REUSED_OPS`)."""
    num_ops, num_reads = count_ops(box.data)
    if users > 1:
        return num_ops > REALIZE_REUSED_OPS or num_reads > REALIZE_REUSED_READS
    return num_ops > MAX_INLINE_OPS or num_reads > REALIZE_ACCUMULATED_READS


def is_dense(size: Sequence[Expr], stride: Sequence[Expr]) -> bool:
    """True when ``stride`` lays ``size`` out without gaps or overlap (some dim order):
    some order of the dims (size-1 dims aside) has strides 1, ``size[d0]``,
    ``size[d0] * size[d1]``, ... provably (`known_equal`), found dim by dim, trying each
    dim whose stride fits (symbolic sizes give no order to sort by: ``s // 4`` may be
    below ``s - 6`` or above).

    torch computes a symbolic stride from ``Max(1, size)`` (so that a dim of size 0
    keeps a positive stride); that reads as ``size`` here: where they differ the tensor
    has no elements, and any strides lay it out densely."""
    stride = [as_expr(s).replace(lambda e: isinstance(e, (sympy.Max, TorchMax)) and len(e.args) == 2 and 1 in e.args,
                                 lambda e: e.args[0] if e.args[1] == 1 else e.args[1])
              for s in stride]

    def chain(dims: frozenset, expected: Expr) -> bool:
        return not dims or any(known_equal(stride[d], expected) and chain(dims - {d}, expected * size[d])
                               for d in dims)

    return chain(frozenset(d for d, s in enumerate(size) if s != 1), sympy.Integer(1))


DONATED = "inductor_lite_donated"
"""``node.meta`` flag of a backward graph's placeholder whose storage the graph may
reuse once the input is dead (set by the backend, `backend._mark_donated_inputs`)."""


class GraphLowering(torch.fx.Interpreter):
    """Lowers one aten ``GraphModule`` (forward, backward or inference graph).

    Attributes (after `run`):
        buffers: realized buffers (ComputedBuffer, ExternKernel, MultiOutput) in order.
        graph_inputs: name -> InputBuffer for tensor placeholders and constants.
        placeholders: (name, value) per placeholder: an InputBuffer, a sympy
            expression (SymInt input) or a Python scalar.
        constants: name -> tensor for ``get_attr`` tensors.
        graph_outputs: the returned values (realized IR nodes, sympy expressions,
            Python scalars or None).
        symbol_sources: how each size symbol is computed at run time.
        extern_ops: the aten op name of each extern call, in order.
        donated_inputs: names of tensor placeholders marked `DONATED` (storage the
            wrapper may reuse after their last reader).
    """

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm, garbage_collect_values=False)
        self.buffers: list[Buffer] = []
        self.graph_inputs: dict[str, InputBuffer] = {}
        self.placeholders: list[tuple[str, Any]] = []
        self.constants: dict[str, torch.Tensor] = {}
        self.graph_outputs: list[Any] = []
        self.symbol_sources: dict[sympy.Symbol, SymbolSource] = {}
        self.extern_ops: list[str] = []
        self.donated_inputs: set[str] = set()
        self.current_node: Optional[torch.fx.Node] = None
        self._ids = itertools.count()

    # ------------------------------------------------------------------ driving

    def run(self) -> list[Any]:
        """Lower the whole graph; returns ``graph_outputs``.

        Raises:
            LoweringError: a node failed to lower (the message names it and the cause).
        """
        super().run(enable_io_processing=False)
        return self.graph_outputs

    def run_node(self, n: torch.fx.Node) -> Any:
        self.current_node = n
        try:
            return super().run_node(n)
        except LoweringError:
            raise
        except Exception as e:
            raise LoweringError(f"cannot lower node {n.format_node()}: {type(e).__name__}: {e}") from e

    def new_name(self) -> str:
        return f"buf{next(self._ids)}"

    def register_buffer(self, buffer: Buffer) -> Buffer:
        self.buffers.append(buffer)
        return buffer

    # ------------------------------------------------------------------ symbols

    def _add_symbol_sources(self, var: str, val: torch.Tensor) -> None:
        for kind, values in (("size", val.size()), ("stride", val.stride())):
            for d, v in enumerate(values):
                expr = as_expr(v)
                if isinstance(expr, sympy.Symbol) and expr not in self.symbol_sources:
                    self.symbol_sources[expr] = (var, kind, d)
        offset = as_expr(val.storage_offset())
        if isinstance(offset, sympy.Symbol) and offset not in self.symbol_sources:
            self.symbol_sources[offset] = (var, "offset", 0)

    def _known(self, expr: Expr) -> bool:
        return all(s in self.symbol_sources for s in expr.free_symbols)

    # ------------------------------------------------------------------ node kinds

    def placeholder(self, target, args, kwargs) -> Any:
        node = self.current_node
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            value: Any = InputBuffer(node.name, _layout_of(val), as_expr(val.storage_offset()))
            self.graph_inputs[node.name] = value
            self._add_symbol_sources(node.name, val)
            if node.meta.get(DONATED):
                self.donated_inputs.add(node.name)
        elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            value = sympy.sympify(val.node.expr)
            if isinstance(value, sympy.Symbol) and value not in self.symbol_sources:
                self.symbol_sources[value] = (node.name, "value", 0)
        elif val is None or isinstance(val, (bool, int, float)):
            value = val
        else:
            raise NotImplementedError(f"placeholder {node.name} of type {type(val).__name__}")
        self.placeholders.append((node.name, value))
        return value

    def get_attr(self, target, args, kwargs) -> Any:
        value = self.fetch_attr(target)
        if not isinstance(value, torch.Tensor):
            return value
        name = constant_name(target)
        self.constants[name] = value
        buffer = InputBuffer(name, _layout_of(value), value.storage_offset(), is_constant=True)
        self.graph_inputs[name] = buffer
        return buffer

    def call_method(self, target, args, kwargs) -> Any:
        raise NotImplementedError(f"call_method {target!r} in an aten graph")

    def call_module(self, target, args, kwargs) -> Any:
        raise NotImplementedError(f"call_module {target!r} in an aten graph")

    def call_function(self, target, args, kwargs) -> Any:
        node = self.current_node
        val = node.meta.get("val")
        if target is operator.getitem and isinstance(args[0], (list, tuple)):
            return self._after_lowering(node, args[0][args[1]])
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            expr = sympy.sympify(val.node.expr)
            if not self._known(expr):
                raise NotImplementedError(f"data-dependent scalar {expr} (e.g. .item())")
            return expr
        if isinstance(val, (bool, int, float)) and not isinstance(target, torch._ops.OpOverload):
            return val
        if target is torch.ops.higher_order.with_effects:
            return self._with_effects(*args, **kwargs)
        if not isinstance(target, torch._ops.OpOverload):
            raise NotImplementedError(f"call target {target!r} is not an aten op")
        if target._schema.is_mutable and not _is_input_update(target, args):
            raise NotImplementedError(f"mutating op {target} in a functional graph")
        if val is None and target._schema.returns:
            raise NotImplementedError(f"node {node.name} has no meta['val']")
        lowering = LOWERINGS.get(target)
        dtype = _dtype_without_kernels(args, kwargs, val)
        if lowering is not None and dtype is not None:
            if target._schema.is_mutable:
                raise NotImplementedError(f"an update of input {args[0].name} in {dtype}, which has no DSL type")
            out = self.make_extern(target, args, kwargs, reason=f"{dtype} has no DSL type")
        elif lowering is not None and isinstance(val, torch.Tensor) and as_expr(val.numel()) == 0:
            out = self._empty(val)
        elif lowering is not None:
            try:
                out = lowering(LoweringContext(node, self), *args, **kwargs)
            except NoLowering as reason:
                if target._schema.is_mutable:
                    raise NotImplementedError(f"{target}: {reason}") from None
                out = self.make_extern(target, args, kwargs, reason=str(reason))
        else:
            out = self.make_extern(target, args, kwargs)
        return self._after_lowering(node, out)

    def output(self, target, args, kwargs) -> Any:
        node = self.current_node
        values = args[0] if isinstance(args[0], (list, tuple)) else [args[0]]
        arg_nodes = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
        outputs = []
        for value, arg in zip(values, arg_nodes):
            val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
            outputs.append(self.realize_output(value, val) if isinstance(value, IRNode) else value)
        self.graph_outputs = outputs
        return outputs

    # ------------------------------------------------------------------ realization

    def _after_lowering(self, node: torch.fx.Node, out: Any) -> Any:
        if isinstance(out, StorageBox) and not out.is_realized():
            out.meta_val = node.meta.get("val")
            if _should_realize(out, len(node.users)):
                self.realize(out)
        elif isinstance(out, GenericView) and len(node.users) > 1:
            base = out.data
            while isinstance(base, GenericView):
                base = base.data
            if isinstance(base, StorageBox) and not base.is_realized() and _should_realize(base, len(node.users)):
                self.realize(base)
        return out

    @staticmethod
    def _layout_for(node: IRNode, hint: Optional[StridedInfo]) -> Layout:
        """``hint``'s strides when they fit ``node`` and are dense, else contiguous."""
        size, dtype, device = node.get_size(), node.get_dtype(), node.get_device()
        if hint is not None and len(hint.size) == len(size):
            if all(known_equal(a, b) for a, b in zip(hint.size, size)) and is_dense(hint.size, hint.stride):
                return Layout(device, dtype, size, list(hint.stride))
        return Layout.contiguous(device, dtype, size)

    def realize(self, box: StorageBox) -> Buffer:
        """Turn a lazy box into a `ComputedBuffer` (laid out as its node's ``meta['val']``)."""
        if box.is_realized():
            return box.data
        layout = self._layout_for(box, _hint(getattr(box, "meta_val", None)))
        buffer = ComputedBuffer(self.new_name(), layout, box.data)
        box.data = self.register_buffer(buffer)
        return buffer

    def _copy(self, node: IRNode, hint: Optional[StridedInfo]) -> ComputedBuffer:
        loops = Pointwise(
            ranges=list(node.get_size()), inner_fn=node.make_loader(), dtype=node.get_dtype(),
            device=node.get_device(), origins=lazy_origins(node),
        )
        return self.register_buffer(ComputedBuffer(self.new_name(), self._layout_for(node, hint), loops))

    def try_reinterpret(self, view: GenericView) -> Optional[ReinterpretView]:
        """``view`` as a strided view of realized memory, realizing its base if needed."""
        data = view.data
        if isinstance(data, GenericView):
            inner = self.try_reinterpret(data)
            if inner is None:
                return None
            view = GenericView(inner, view.size, view.reindex, view.view_info)
        elif isinstance(data, StorageBox) and not data.is_realized():
            self.realize(data)
        layout = as_strided_view(view)
        if layout is None:
            return None
        return ReinterpretView(underlying_buffer(view.data), layout)

    def realize_input(self, x: IRNode) -> IRNode:
        """``x`` in memory (a Buffer or ReinterpretView), for an extern call."""
        if isinstance(x, StorageBox):
            return self.realize(x)
        if isinstance(x, (Buffer, ReinterpretView)):
            return x
        if isinstance(x, GenericView):
            view = self.try_reinterpret(x)
            if view is not None:
                return view
            return self._copy(x, x.view_info[1] if x.view_info else None)
        raise TypeError(f"cannot realize {type(x).__name__}")

    def realize_output(self, x: IRNode, val: Any) -> IRNode:
        """``x`` in memory with the strides of ``val`` (the output's ``meta['val']``) where possible."""
        if isinstance(x, StorageBox):
            if not x.is_realized():
                x.meta_val = val
            return self.realize(x)
        if isinstance(x, GenericView):
            return self.try_reinterpret(x) or self._copy(x, _hint(val))
        return x

    # ------------------------------------------------------------------ externs

    def _empty(self, val: torch.Tensor) -> ExternKernel:
        """The output of a node that has no elements: only allocated (an ``empty_strided``
        call), so no later stage sees a kernel over zero elements. Not counted as a fallback."""
        layout = _layout_of(val)
        buffer = ExternKernel(
            self.new_name(), layout, torch.ops.aten.empty_strided.default, [layout.size, layout.stride],
            {"dtype": val.dtype, "device": val.device}, {self.current_node.name: "empty"},
        )
        buffer.fixed_layout = True
        buffer.may_alias_inputs = False
        return self.register_buffer(buffer)

    def make_extern(self, target, args, kwargs, reason: str = "no lowering") -> Any:
        """An `ExternKernel` calling ``target`` on realized inputs."""
        return self._extern(target, args, kwargs, reason, self.current_node.meta.get("val"))

    def _with_effects(self, token: IRNode, op: torch._ops.OpOverload, *args, **kwargs) -> tuple:
        """``higher_order.with_effects(token, op, *args)``: AOTAutograd threads a token
        through side-effecting ops (``aten._linalg_check_errors`` in ``linalg.inv``) to keep
        them in order. ``op`` becomes an extern call marked ``has_side_effects``, which the
        scheduler keeps in graph order and never drops, and the token passes through
        unchanged."""
        outputs = self.current_node.meta["val"][1:]
        val = outputs[0] if len(outputs) == 1 else list(outputs)
        result = self._extern(op, args, kwargs, "side effect (with_effects)", val, has_side_effects=True)
        return (token, result) if len(outputs) == 1 else (token, *result)

    def _extern(self, target, args, kwargs, reason: str, val: Any, has_side_effects: bool = False) -> Any:
        node = self.current_node
        args, kwargs = pytree.tree_map(
            lambda a: self.realize_input(a) if isinstance(a, IRNode) else a, (list(args), dict(kwargs))
        )
        origins = {node.name: op_short_name(target)}
        self.extern_ops.append(str(target))
        log_artifact("fallbacks", f"extern {target} for {node.name} ({reason})")
        aliases = may_alias_inputs(target, [n.meta.get("val") for n in node.all_input_nodes], val)
        if isinstance(val, torch.Tensor):
            buffer = ExternKernel(self.new_name(), _layout_of(val), target, args, kwargs, origins,
                                  val.storage_offset())
            buffer.fixed_layout = fixed_layout(target, args, None, buffer.layout)
            buffer.has_side_effects = has_side_effects
            buffer.may_alias_inputs = aliases
            self.register_buffer(buffer)
            self._add_symbol_sources(buffer.name, val)
            return buffer
        parent = self.register_buffer(ExternKernel(self.new_name(), None, target, args, kwargs, origins))
        parent.has_side_effects = has_side_effects
        parent.may_alias_inputs = aliases
        if val is None:
            return None
        if not isinstance(val, (list, tuple)):
            raise NotImplementedError(f"extern {target} returns {type(val).__name__}")
        outputs = []
        for i, v in enumerate(val):
            if v is None or isinstance(v, (bool, int, float)):
                outputs.append(v)  # a scalar output the fake run already knows (e.g. flash attention's max_q)
                continue
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                expr = sympy.sympify(v.node.expr)
                if not self._known(expr):
                    raise NotImplementedError(f"extern {target} output {i} is the data-dependent scalar {expr}")
                outputs.append(expr)
                continue
            if not isinstance(v, torch.Tensor):
                raise NotImplementedError(f"extern {target} output {i} is a {type(v).__name__}")
            out = MultiOutput(self.new_name(), _layout_of(v), parent, i, v.storage_offset())
            out.fixed_layout = fixed_layout(target, args, i, out.layout)
            self.register_buffer(out)
            self._add_symbol_sources(out.name, v)
            outputs.append(out)
        return outputs

    def extern_counts(self) -> collections.Counter:
        return collections.Counter(self.extern_ops)


def constant_name(target: str) -> str:
    """The wrapper's name for the tensor constant at ``get_attr`` target ``target``."""
    return "const_" + str(target).replace(".", "_")


def graph_constants(gm: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """``gm``'s tensor constants (its ``get_attr`` tensors) by wrapper name: what
    `GraphLowering.constants` holds after `GraphLowering.run`, without lowering."""
    constants = {}
    for node in gm.graph.find_nodes(op="get_attr"):
        value = gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if isinstance(value, torch.Tensor):
            constants[constant_name(node.target)] = value
    return constants


def _dtype_without_kernels(args, kwargs, val: Any) -> Optional[torch.dtype]:
    """The first dtype among a node's tensor inputs and outputs that generated kernels
    cannot compute (complex, float8, uint16..: not in `DSL_DTYPES`), or None."""
    dtypes = [a.get_dtype() for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, IRNode)]
    dtypes += [v.dtype for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
    return next((d for d in dtypes if d not in DSL_DTYPES), None)


def _hint(val: Any) -> Optional[StridedInfo]:
    return StridedInfo.of(val) if isinstance(val, torch.Tensor) else None


def _layout_of(val: torch.Tensor) -> Layout:
    return Layout(val.device, val.dtype, [as_expr(s) for s in val.size()], [as_expr(s) for s in val.stride()])
