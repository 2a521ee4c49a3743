"""Loop-level IR: what the FX lowering produces and the scheduler consumes.

As in TorchInductor, a computed tensor is a `Pointwise` node: ``ranges`` (its size,
sympy expressions) and an ``inner_fn(index)`` that computes one element through the
``ops`` vocabulary (`inductor_lite.ir.ops`). Until something needs it in
memory a Pointwise stays *lazy* inside a `StorageBox`, and consumers inline its
``inner_fn`` into their own. `StorageBox.realize` turns it into a `ComputedBuffer`
with a `Layout`; consumers then ``ops.load`` from that buffer.

Views never copy: `ReinterpretView` is a new strided `Layout` over a realized buffer's
memory, `GenericView` is an index remapping (``reindex``) over any node.

A `Reduction` reduces ``inner_fn(index, rindex)`` over its ``reduction_ranges`` for
each point of its ``ranges``; it is always realized (a consumer loads its result).
A `Scan` is an inclusive scan (cumsum, cummax, ...) along one dimension, also always
realized.
Matmul, convolution, attention and every op without a lowering is an `ExternKernel`
(an aten call on realized buffers, outputs laid out as the op's fake-tensor result
says).

Index and size arithmetic is sympy throughout, so symbolic shapes work.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import sympy
import torch
import torch.utils._pytree as pytree

from .indexing import Expr, as_expr, contiguous_strides, flat_to_vars, index_var, product, storage_length
from .ops import OpsHandler, ops, set_ops_handler

InnerFn = Callable[[Sequence[Expr]], Any]


@dataclasses.dataclass
class Layout:
    """Where a tensor's elements live: element ``i`` is at ``offset + sum(i[d]*stride[d])``.

    Sizes, strides and the offset are sympy expressions in elements; the offset is
    relative to the data pointer of the buffer the layout belongs to.
    """

    device: torch.device
    dtype: torch.dtype
    size: list[Expr]
    stride: list[Expr]
    offset: Expr = sympy.Integer(0)

    def __post_init__(self):
        self.size = [as_expr(s) for s in self.size]
        self.stride = [as_expr(s) for s in self.stride]
        self.offset = as_expr(self.offset)
        if len(self.size) != len(self.stride):
            raise ValueError(f"layout has {len(self.size)} sizes but {len(self.stride)} strides")

    @classmethod
    def contiguous(cls, device: torch.device, dtype: torch.dtype, size: Sequence) -> "Layout":
        size = [as_expr(s) for s in size]
        return cls(device, dtype, size, contiguous_strides(size))

    def index(self, index: Sequence[Expr]) -> Expr:
        """The memory offset (in elements) of the element at ``index``."""
        if len(index) != len(self.size):
            raise ValueError(f"index of rank {len(index)} into a layout of rank {len(self.size)}")
        return self.offset + sympy.Add(*[i * s for i, s, n in zip(index, self.stride, self.size) if n != 1])

    def numel(self) -> Expr:
        return product(self.size)

    def storage_nbytes(self) -> Expr:
        """Bytes of storage the layout spans from its offset (TorchInductor's
        ``compute_required_storage_length`` times the element size)."""
        return sympy.expand(storage_length(self.size, self.stride) * self.dtype.itemsize)

    def __str__(self) -> str:
        dtype = str(self.dtype).replace("torch.", "")
        return f"{self.device.type}:{dtype}[size={list(self.size)}, stride={list(self.stride)}, offset={self.offset}]"


@dataclasses.dataclass(frozen=True)
class StridedInfo:
    """Size, stride and storage offset of an FX node's value (from ``meta['val']``)."""

    size: tuple
    stride: tuple
    storage_offset: Expr

    @classmethod
    def of(cls, val: torch.Tensor) -> "StridedInfo":
        return cls(
            tuple(as_expr(s) for s in val.size()),
            tuple(as_expr(s) for s in val.stride()),
            as_expr(val.storage_offset()),
        )

    def matches(self, layout: Layout) -> bool:
        return list(self.size) == list(layout.size) and list(self.stride) == list(layout.stride)


class IRNode:
    """A tensor-valued IR node: a size, a dtype, a device and a way to load elements.

    ``origins`` maps the FX node names this value was computed from to their op
    names, in graph order; codegen names kernels after them.
    """

    origins: dict[str, str]

    def get_size(self) -> list[Expr]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def get_device(self) -> torch.device:
        raise NotImplementedError

    def make_loader(self) -> InnerFn:
        """A function ``index -> value`` (through ``ops``) giving element ``index``."""
        raise NotImplementedError

    def get_numel(self) -> Expr:
        return product(self.get_size())


class LayoutNode(IRNode):
    """An IR node whose size, dtype and device are those of its ``layout``."""

    layout: Layout

    def get_size(self) -> list[Expr]:
        return self.layout.size

    def get_dtype(self) -> torch.dtype:
        return self.layout.dtype

    def get_device(self) -> torch.device:
        return self.layout.device


@dataclasses.dataclass
class Loops(IRNode):
    """Common base of `Pointwise` and `Reduction`: a loop nest over ``ranges``."""

    ranges: list[Expr]
    inner_fn: InnerFn
    dtype: torch.dtype
    device: torch.device
    origins: dict[str, str] = dataclasses.field(default_factory=dict)

    def get_size(self) -> list[Expr]:
        return self.ranges

    def get_dtype(self) -> torch.dtype:
        return self.dtype

    def get_device(self) -> torch.device:
        return self.device

    def make_loader(self) -> InnerFn:
        return self.inner_fn

    def index_vars(self, prefix: str = "i") -> list[sympy.Symbol]:
        return [index_var(f"{prefix}{d}") for d in range(len(self.ranges))]


@dataclasses.dataclass
class Pointwise(Loops):
    """One output element per point of ``ranges``: ``out[index] = inner_fn(index)``."""


REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "welford_reduce")
"""What a `Reduction` computes. ``argmax``/``argmin``: the first position (row-major over
``reduction_ranges``) of the maximum/minimum, NaN counting as the extreme (as torch).
``any``/``all`` reduce bool values. ``welford_reduce``: the mean, M2 (sum of squared
deviations from the mean) and count of the values (Welford 1962; Chan, Golub and
LeVeque 1979), one reduction with three outputs (`Reduction.output_index`)."""

WELFORD_OUTPUTS = ("mean", "m2", "weight")
_IDENTITIES = {"sum": 0, "prod": 1, "any": False, "all": True}


def reduction_identity(reduction_type: str, dtype: torch.dtype) -> Any:
    """The value that leaves a reduction unchanged, for masked-off lanes and padding
    (``max``/``argmax``: -inf or the integer type's minimum; ``min``/``argmin``: +inf or
    its maximum)."""
    if reduction_type in _IDENTITIES:
        return _IDENTITIES[reduction_type]
    if reduction_type in ("max", "argmax"):
        return float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min
    return float("inf") if dtype.is_floating_point else torch.iinfo(dtype).max


@dataclasses.dataclass(frozen=True)
class SplitOrigin:
    """The reduction a split reduction's first stage computes pieces of (`Reduction.split_origin`).

    ``inner_fn(index, rindex)`` gives the values of the unsplit reduction over its kept
    ``ranges`` and reduced ``reduction_ranges``; piece ``s`` (the partial's first
    dimension) reduces the flat reduced positions ``[s * chunk, (s + 1) * chunk)``, the
    positions past the end counting as ``identity``. ``mix_order``: the scheduler split
    it into pieces of rows for a kernel that also reduces along those rows
    (`resplit_reduction`; `scheduler.mix_order`).
    """

    inner_fn: Callable[[Sequence[Expr], Sequence[Expr]], Any]
    ranges: tuple[Expr, ...]
    reduction_ranges: tuple[Expr, ...]
    chunk: int
    identity: Any
    mix_order: bool = False

    @property
    def pieces(self) -> int:
        return -(-int(product(self.reduction_ranges)) // self.chunk)

    def partial_fn(self) -> Callable[[Sequence[Expr], Sequence[Expr]], Any]:
        """The first stage's ``inner_fn``: over ``[pieces] + ranges`` and ``[chunk]``."""
        rnumel, chunk, ranges = int(product(self.reduction_ranges)), self.chunk, list(self.reduction_ranges)
        exact = self.pieces * chunk == rnumel

        def partial_fn(index, rindex):
            flat = index[0] * chunk + rindex[0]
            inner = lambda: self.inner_fn(index[1:], flat_to_vars(flat, ranges))  # noqa: E731
            if exact:
                return inner()
            in_range = ops.lt(ops.index_expr(flat, torch.int64), ops.constant(rnumel, torch.int64))
            return ops.masked(in_range, inner, self.identity)

        return partial_fn


@dataclasses.dataclass
class Reduction(Loops):
    """``out[index] = reduce(inner_fn(index, rindex) for rindex in reduction_ranges)``.

    ``ranges`` are the kept (x) sizes, ``reduction_ranges`` the reduced (r) sizes;
    ``inner_fn`` returns values of ``src_dtype`` (the accumulation dtype: fp32 for
    fp16/bf16 inputs) and the result is stored as ``dtype`` (int64 for
    argmax/argmin). A ``welford_reduce`` is one reduction with three results: the
    lowering realizes one buffer per `WELFORD_OUTPUTS` entry, each a copy of the node
    differing only in ``output_index``; the scheduler always fuses them and codegen
    computes the reduction once for all three. ``split_origin``: on the first stage of
    a split reduction the scheduler may fuse with a row reduction, the reduction it is a
    piece of.
    """

    reduction_ranges: list[Expr] = dataclasses.field(default_factory=list)
    reduction_type: str = "sum"
    src_dtype: Optional[torch.dtype] = None
    output_index: int = 0
    split_origin: Optional[SplitOrigin] = None

    def __post_init__(self):
        if self.reduction_type not in REDUCTION_TYPES:
            raise ValueError(f"unknown reduction type {self.reduction_type!r}; known: {REDUCTION_TYPES}")
        if self.src_dtype is None:
            self.src_dtype = self.dtype

    def get_reduction_numel(self) -> Expr:
        return product(self.reduction_ranges)

    def reduction_vars(self, prefix: str = "r") -> list[sympy.Symbol]:
        return [index_var(f"{prefix}{d}") for d in range(len(self.reduction_ranges))]

    def value_key(self) -> tuple:
        """Identifies the reduced values: the outputs of one Welford share it."""
        return (id(self.inner_fn), self.reduction_type, self.src_dtype)


ScanCombine = Callable[[tuple, tuple], tuple]


@dataclasses.dataclass
class Scan(Loops):
    """An inclusive scan along one dimension (TorchInductor's ``ir.Scan``).

    The output has size ``get_size()``: ``ranges`` (the other, *x*, dims in order)
    with the scanned dim, of size ``scan_ranges[0]``, inserted at ``axis``.
    ``inner_fn(index, rindex)`` gives the tuple of scanned values at x position
    ``index`` and scan position ``rindex`` (one per ``dtypes`` entry, the dtypes the
    scan computes in: fp32 for fp16/bf16 inputs). ``combine_fn(a, b)`` combines the
    state ``a`` of the lower positions with the state ``b`` of the higher ones
    (tuples, through ``ops``); it must be associative. Output element ``[..., i,
    ...]`` is the combination of positions ``0 .. i``; this node's buffer holds result
    ``output_index``, stored as ``dtype``. A scan with several results (cummax's
    values and indices) is realized as one buffer per result, copies differing only
    in ``output_index``, which the scheduler fuses and codegen computes once.
    """

    scan_ranges: list[Expr] = dataclasses.field(default_factory=list)
    axis: int = 0
    combine_fn: Optional[ScanCombine] = None
    dtypes: tuple[torch.dtype, ...] = ()
    output_index: int = 0

    def __post_init__(self):
        if len(self.scan_ranges) != 1 or not 0 <= self.axis <= len(self.ranges):
            raise ValueError(f"a Scan runs along one dim inserted into ranges {self.ranges}, got "
                             f"scan_ranges {self.scan_ranges} at axis {self.axis}")
        if self.combine_fn is None or not self.dtypes:
            raise ValueError("a Scan needs a combine_fn and the dtypes it computes in")

    @property
    def reduction_ranges(self) -> list[Expr]:
        """``scan_ranges``: the r domain, as a `Reduction`'s (the scheduler's view)."""
        return self.scan_ranges

    def get_size(self) -> list[Expr]:
        return self.output_index_of(self.ranges, self.scan_ranges)

    def output_index_of(self, index: Sequence[Expr], rindex: Sequence[Expr]) -> list[Expr]:
        """The output position of x position ``index`` and scan position ``rindex``."""
        return list(index[:self.axis]) + list(rindex) + list(index[self.axis:])

    def get_reduction_numel(self) -> Expr:
        return product(self.scan_ranges)

    def reduction_vars(self, prefix: str = "r") -> list[sympy.Symbol]:
        return [index_var(f"{prefix}0")]

    def value_key(self) -> tuple:
        """Identifies the scan: the results of one scan share it."""
        return (id(self.inner_fn), id(self.combine_fn))


class Buffer(LayoutNode):
    """A tensor in memory, named ``name`` in the generated wrapper, laid out by ``layout``."""

    def __init__(self, name: str, layout: Optional[Layout], origins: Optional[dict[str, str]] = None):
        self.name = name
        self.layout = layout
        self.origins = dict(origins or {})

    def make_loader(self) -> InnerFn:
        name, layout = self.name, self.layout
        return lambda index: ops.load(name, layout.index(index))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name}, {self.layout})"


class InputBuffer(Buffer):
    """A graph input (placeholder) or, with ``is_constant``, a tensor attribute of the graph module.

    ``storage_offset`` is the input's offset into its storage per ``meta['val']``; the
    layout's own offset is 0 (relative to the tensor's data pointer).
    """

    def __init__(self, name: str, layout: Layout, storage_offset: Expr = sympy.Integer(0), is_constant: bool = False):
        super().__init__(name, layout)
        self.storage_offset = as_expr(storage_offset)
        self.is_constant = is_constant


class ComputedBuffer(Buffer):
    """A realized `Pointwise` or `Reduction`: its elements are computed by a generated kernel."""

    def __init__(self, name: str, layout: Layout, data: Loops):
        super().__init__(name, layout, data.origins)
        self.data = data

    def store_index(self, index: Sequence[Expr], rindex: Sequence[Expr] = ()) -> Expr:
        """The offset written for x position ``index`` (and, for a `Scan`, scan
        position ``rindex``)."""
        if isinstance(self.data, Scan):
            return self.layout.index(self.data.output_index_of(index, rindex))
        return self.layout.index(index)


def resplit_reduction(partial: "ComputedBuffer", final: "ComputedBuffer", chunk: int, mix_order: bool) -> None:
    """Rebuild a split reduction's two stages in place with pieces of ``chunk`` reduced
    positions: the first stage's ranges, ``inner_fn`` and layout, the second's reduced
    range. The second stage reads the first through its layout, whose strides do not
    depend on the number of pieces, so only the size changes (in place, as its loader
    holds the layout).

    Raises:
        ValueError: ``partial`` records no `SplitOrigin`, or ``final`` does not reduce
            over its pieces.
    """
    data = partial.data
    origin = data.split_origin if isinstance(data, Reduction) else None
    if origin is None or not (isinstance(final.data, Reduction) and len(final.data.reduction_ranges) == 1
                              and final.data.reduction_ranges[0] == data.ranges[0]):
        raise ValueError(f"{partial.name}, {final.name} are not the two stages of a split reduction")
    origin = dataclasses.replace(origin, chunk=chunk, mix_order=mix_order)
    pieces = sympy.Integer(origin.pieces)
    partial.data = dataclasses.replace(data, ranges=[pieces] + list(data.ranges[1:]), inner_fn=origin.partial_fn(),
                                       reduction_ranges=[sympy.Integer(chunk)], split_origin=origin)
    partial.layout.size = [pieces] + list(partial.layout.size[1:])
    final.data = dataclasses.replace(final.data, reduction_ranges=[pieces])


SCATTER_MODES = (None, "atomic_add")
"""How a `Scatter` writes: None stores (a repeated index keeps one of its values,
unspecified which, as eager); ``"atomic_add"`` adds atomically, so every value sent
to a repeated index counts (``index_put(accumulate=True)``, ``scatter_add``,
``index_add``)."""


@dataclasses.dataclass
class Scatter(Pointwise):
    """A write through computed indices, over the *source*'s index space ``ranges``:
    for each ``index``, ``inner_fn(index)`` goes to element ``output_indexer(index)``
    of the buffer it updates (see `ScatterBuffer`), by ``mode`` (`SCATTER_MODES`).

    ``output_indexer`` maps a source index to an index into the updated buffer (its
    rank); it may load index tensors and use ``ops.indirect_indexing``, so it runs
    under an ops handler, as ``inner_fn`` does. TorchInductor's ``ir.Scatter``.
    """

    output_indexer: Optional[Callable[[Sequence[Expr]], list[Expr]]] = None
    mode: Optional[str] = None

    def __post_init__(self):
        if self.mode not in SCATTER_MODES:
            raise ValueError(f"unknown scatter mode {self.mode!r}; known: {SCATTER_MODES}")
        if self.output_indexer is None:
            raise ValueError("a Scatter needs an output_indexer")


class ScatterBuffer(ComputedBuffer):
    """``target`` (a realized `ComputedBuffer` holding the initial values, e.g. a copy of
    ``self``) after the `Scatter` ``data`` wrote into it, in place. The target may be a
    graph input that the graph overwrites with the result and nothing else reads
    (``cache.index_copy_(...)`` scatters into the cache itself,
    `fx_lowering.indexed_writes`); the scheduler then orders it as a `MutationBuffer`.

    The scatter's kernel runs after the kernel writing ``target`` and alone (the
    scheduler never fuses it); readers of the result read this buffer's name, which the
    wrapper binds to ``target``'s memory, so they run after the scatter. ``target`` is
    read by nothing else.
    """

    def __init__(self, name: str, target: Union[ComputedBuffer, "InputBuffer"], data: Scatter):
        if not isinstance(target, (ComputedBuffer, InputBuffer)):
            raise TypeError(f"a scatter updates a ComputedBuffer or graph input, got {type(target).__name__}")
        super().__init__(name, target.layout, data)
        self.target = target

    def store_index(self, index: Sequence[Expr]) -> Expr:
        """The offset written for source element ``index`` (calls ``ops``: run it under
        a handler)."""
        return self.layout.index(self.data.output_indexer(index))


class MutationBuffer(ComputedBuffer):
    """``data``'s values stored into the memory of graph input ``target`` (an
    `InputBuffer`, same layout): an input the graph updates in place, AOTAutograd's
    ``copy_(input, new_value)`` kept in an inference graph
    (``keep_inference_input_mutations``), as TorchInductor does with it.

    It reads ``target`` only at the element it writes (`fx_lowering.constructors` sees
    to it). The scheduler runs it after every reader of the input's old value, in a
    kernel it may share only with pointwise nodes reading the input at those elements
    (`scheduler.fusion`), and keeps it though nothing reads it; the wrapper binds its
    name to the input, never allocates it and never hands its storage on.
    """

    def __init__(self, name: str, target: "InputBuffer", data: Loops):
        if not isinstance(target, InputBuffer) or target.is_constant:
            raise TypeError(f"a mutation writes a graph input, got {type(target).__name__} {target.name}")
        super().__init__(name, target.layout, data)
        self.target = target


def updated_input(buffer: Buffer) -> Optional["InputBuffer"]:
    """The graph input ``buffer``'s kernel writes into, or None: a `MutationBuffer`'s
    target, or the input at the end of a chain of `ScatterBuffer` targets (a scatter
    into a scatter into the input)."""
    if isinstance(buffer, MutationBuffer):
        return buffer.target
    while isinstance(buffer, ScatterBuffer):
        buffer = buffer.target
        if isinstance(buffer, InputBuffer):
            return buffer
    return None


class ExternKernel(Buffer):
    """A call of an aten op on realized inputs.

    ``args``/``kwargs`` are pytrees whose leaves are realized IR nodes (`Buffer` or
    `ReinterpretView`), sympy expressions (symbolic ints) or plain Python values.
    ``layout`` is the output's layout for a single-tensor result; for a tuple/list
    result it is None and each tensor element is a `MultiOutput`.
    ``storage_offset`` is the output's storage offset per ``meta['val']``.
    ``fixed_layout``: the real output is always laid out as ``layout`` says, so the
    wrapper checks no strides after the call (the lowering decides, see
    `fx_lowering.extern_layouts`). ``has_side_effects``: the op was called through
    ``with_effects``, so it keeps its place among ordered externs
    (`scheduler.memory_order`). ``may_alias_inputs``: a result may share storage with
    an input (a view, or an op that returns its input), so the wrapper never hands the
    storage of the extern's inputs on (the lowering decides,
    `fx_lowering.extern_layouts.may_alias_inputs`; True, the safe answer, until it does).
    """

    def __init__(self, name: str, layout: Optional[Layout], op: Any, args: Sequence, kwargs: dict,
                 origins: dict[str, str], storage_offset: Expr = sympy.Integer(0)):
        super().__init__(name, layout, origins)
        self.op = op
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.storage_offset = as_expr(storage_offset)
        self.fixed_layout = False
        self.has_side_effects = False
        self.may_alias_inputs = True

    @property
    def op_name(self) -> str:
        return str(self.op)

    def inputs(self) -> list[IRNode]:
        """The IR nodes among the arguments, in argument order."""
        leaves = pytree.tree_leaves((self.args, self.kwargs))
        return [x for x in leaves if isinstance(x, IRNode)]

    def __repr__(self) -> str:
        return f"ExternKernel({self.name} = {self.op_name}, {self.layout})"


class MultiOutput(Buffer):
    """Element ``index`` of a multi-output `ExternKernel`'s result (``fixed_layout`` as there)."""

    def __init__(self, name: str, layout: Layout, parent: ExternKernel, index: int,
                 storage_offset: Expr = sympy.Integer(0)):
        super().__init__(name, layout, parent.origins)
        self.parent = parent
        self.index = index
        self.storage_offset = as_expr(storage_offset)
        self.fixed_layout = False


class ReinterpretView(LayoutNode):
    """A strided view of a realized buffer's memory (no copy).

    ``layout.offset`` is relative to ``data``'s data pointer.
    """

    def __init__(self, data: Buffer, layout: Layout):
        if not isinstance(data, Buffer):
            raise TypeError(f"ReinterpretView needs a realized Buffer, got {type(data).__name__}")
        self.data = data
        self.layout = layout
        self.origins = data.origins

    def make_loader(self) -> InnerFn:
        name, layout = self.data.name, self.layout
        return lambda index: ops.load(name, layout.index(index))

    def __repr__(self) -> str:
        return f"ReinterpretView({self.data.name}, {self.layout})"


class GenericView(IRNode):
    """An index remapping of ``data``: ``self[index] == data[reindex(index)]``.

    ``view_info`` is ``(input, output)`` `StridedInfo` from the FX node's metadata; when
    ``data`` is realized with the input's strides, the view is also expressible as a
    `ReinterpretView` with the output's strides (see `as_strided_view`).
    """

    def __init__(self, data: IRNode, size: Sequence[Expr], reindex: Callable[[list[Expr]], list[Expr]],
                 view_info: Optional[tuple[StridedInfo, StridedInfo]] = None):
        self.data = data
        self.size = [as_expr(s) for s in size]
        self.reindex = reindex
        self.view_info = view_info
        self.origins = data.origins

    def get_size(self) -> list[Expr]:
        return self.size

    def get_dtype(self) -> torch.dtype:
        return self.data.get_dtype()

    def get_device(self) -> torch.device:
        return self.data.get_device()

    def make_loader(self) -> InnerFn:
        inner, reindex = self.data.make_loader(), self.reindex
        return lambda index: inner(reindex(list(index)))

    def __repr__(self) -> str:
        return f"GenericView(size={self.size}, data={self.data!r})"


class StorageBox(IRNode):
    """Holds a computed value that is either lazy (`Pointwise`) or realized (`Buffer`).

    Views and consumers refer to the box, so realizing it later (for a second user,
    an extern or a graph output) redirects all of them to the buffer.
    """

    def __init__(self, data: IRNode):
        self.data = data

    @property
    def origins(self) -> dict[str, str]:
        return self.data.origins

    def is_realized(self) -> bool:
        return isinstance(self.data, Buffer)

    def get_size(self) -> list[Expr]:
        return self.data.get_size()

    def get_dtype(self) -> torch.dtype:
        return self.data.get_dtype()

    def get_device(self) -> torch.device:
        return self.data.get_device()

    def make_loader(self) -> InnerFn:
        return self.data.make_loader()

    def __repr__(self) -> str:
        return f"StorageBox({self.data!r})"


def unwrap(node: IRNode) -> IRNode:
    """Strip `StorageBox` wrappers."""
    while isinstance(node, StorageBox):
        node = node.data
    return node


def realized_layout(node: IRNode) -> Optional[Layout]:
    """The layout of a realized node, or None when it is lazy or a generic view."""
    node = unwrap(node)
    if isinstance(node, (Buffer, ReinterpretView)):
        return node.layout
    return None


def underlying_buffer(node: IRNode) -> Buffer:
    """The buffer whose memory a realized node reads.

    Raises:
        TypeError: ``node`` is not realized.
    """
    node = unwrap(node)
    if isinstance(node, ReinterpretView):
        return node.data
    if isinstance(node, Buffer):
        return node
    raise TypeError(f"{type(node).__name__} is not realized")


def as_strided_view(view: GenericView) -> Optional[Layout]:
    """The strided layout equivalent to ``view`` over its realized data, or None.

    Possible when ``data`` is realized with exactly the strides the FX metadata gave
    the view's input: then the view's own metadata strides describe it.
    """
    if view.view_info is None:
        return None
    in_info, out_info = view.view_info
    layout = realized_layout(view.data)
    if layout is None or not in_info.matches(layout):
        return None
    offset = layout.offset + out_info.storage_offset - in_info.storage_offset
    return Layout(layout.device, layout.dtype, list(out_info.size), list(out_info.stride), offset)


class TextHandler(OpsHandler):
    """Ops handler that renders an ``inner_fn`` as readable text (IR dumps, tests)."""

    def __init__(self):
        self.lines: list[str] = []
        self._ids = itertools.count()

    def _emit(self, text: str) -> str:
        name = f"t{next(self._ids)}"
        self.lines.append(f"{name} = {text}")
        return name

    def masked(self, mask, body, other):
        inner = TextHandler()
        inner._ids = self._ids
        with set_ops_handler(inner):
            result = body()
        self.lines.extend(f"    {line}" for line in inner.lines)
        return self._emit(f"masked({mask}, {result}, {other!r})")

    def indirect_indexing(self, x, size, check=True, wrap_neg=True):
        text = f"indirect_indexing({x}, {size}, check={check}, wrap_neg={wrap_neg})"
        return sympy.Symbol(self._emit(text), integer=True)

    def default(self, name: str, *args):
        def fmt(a):
            if isinstance(a, torch.dtype):
                return str(a).replace("torch.", "")
            return str(a)

        return self._emit(f"{name}({', '.join(fmt(a) for a in args)})")


def format_inner_fn(loops: Loops) -> str:
    """The body of ``loops.inner_fn`` as text, one op per line, over index ``i0, i1, ...``
    (and reduction index ``r0, r1, ...``)."""
    handler = TextHandler()
    with set_ops_handler(handler):
        if isinstance(loops, Reduction):
            result = loops.inner_fn(loops.index_vars(), loops.reduction_vars())
            which = f"[{WELFORD_OUTPUTS[loops.output_index]}]" if loops.reduction_type == "welford_reduce" else ""
            result = f"{loops.reduction_type}{which}({result}) over {loops.reduction_ranges}"
        elif isinstance(loops, Scan):
            values = loops.inner_fn(loops.index_vars(), loops.reduction_vars())
            state = tuple(f"{side}{k}" for side in "ab" for k in range(len(values)))
            combined = loops.combine_fn(state[:len(values)], state[len(values):])
            result = (f"scan[{loops.output_index}]({', '.join(map(str, values))}) along dim {loops.axis} over "
                      f"{loops.scan_ranges}, combine(a, b) = {', '.join(map(str, combined))}")
        else:
            result = loops.inner_fn(loops.index_vars())
        if isinstance(loops, Scatter):
            result = f"{loops.mode or 'store'} at {loops.output_indexer(loops.index_vars())}: {result}"
    handler.lines.append(f"return {result}")
    return "\n".join(handler.lines)


def format_node(node: Buffer) -> str:
    """A multi-line description of a realized node for the ``ir_*.txt`` debug dumps."""
    head = f"{node.name}: {type(node).__name__} {node.layout if node.layout else '(multi-output)'}"
    if node.origins:
        head += f"\n  origins: {', '.join(node.origins)}"
    if isinstance(node, ScatterBuffer):
        head += f"\n  scatter into {node.target.name}"
    if isinstance(node, ComputedBuffer):
        body = format_inner_fn(node.data)
        return head + f"\n  ranges: {node.data.ranges}\n" + "\n".join("    " + line for line in body.splitlines())
    if isinstance(node, ExternKernel):
        return head + f"\n  {node.op_name}({', '.join(_fmt_arg(a) for a in node.args)}" + \
            "".join(f", {k}={_fmt_arg(v)}" for k, v in node.kwargs.items()) + ")"
    if isinstance(node, MultiOutput):
        return head + f"\n  {node.parent.name}[{node.index}]"
    return head


def _fmt_arg(arg: Any) -> str:
    if isinstance(arg, Buffer):
        return arg.name
    if isinstance(arg, ReinterpretView):
        return f"reinterpret({arg.data.name}, {arg.layout})"
    if isinstance(arg, (list, tuple)):
        return "[" + ", ".join(_fmt_arg(a) for a in arg) + "]"
    return repr(arg)


def iter_ir_leaves(tree: Any) -> Iterator[IRNode]:
    """The IR nodes among the leaves of a pytree."""
    for leaf in pytree.tree_leaves(tree):
        if isinstance(leaf, IRNode):
            yield leaf


def input_aliases(buffers, inputs: set[str]) -> set[str]:
    """``inputs`` (graph input names) and the names of extern results that may share
    their storage (`ir.nodes.ExternKernel.may_alias_inputs`: ``x.view(torch.int32)``),
    found transitively, with their `MultiOutput` elements."""
    names, grown = set(inputs), True
    while grown:
        grown = False
        for b in buffers:
            if b.name in names:
                continue
            if isinstance(b, MultiOutput):
                aliased = b.parent.name in names
            else:
                aliased = isinstance(b, ExternKernel) and b.may_alias_inputs \
                    and any(underlying_buffer(x).name in names for x in b.inputs())
            if aliased:
                names.add(b.name)
                grown = True
    return names
