"""Kernel codegen: one fused `KernelGroup` -> the source of one DSL kernel.

A pointwise group ``(N, 1)`` becomes a 1-D kernel over ``xindex in [0, N)``::

    @dl.kernel
    def poi_fused_add_gelu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: dl.constexpr):
        # FX nodes: add, gelu
        xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
        xmask = xindex < xnumel
        x0 = xindex % 768
        tmp0 = dl.load(in_ptr0 + (xindex), mask=xmask)
        ...
        dl.store(out_ptr0 + (xindex), tmp7, mask=xmask)

A reduction group ``(N, R)`` becomes a 2-D kernel over ``[XBLOCK, RBLOCK]`` tiles of
rows ``xindex`` and reduced positions ``rindex`` (``reduction_axis`` 1: the tile's
second axis is ``rindex``; 0 for *outer* reductions, whose outputs, not rows, are
contiguous in memory, so that the tile's contiguous axis is the memory's):

- *persistent* (``per_`` prefix; ``R`` static, ``RBLOCK`` its next power of two up to
  `heuristics.PERSISTENT_MAX_RBLOCK`, counting each row-sized value it holds across a
  reduction): the row is loaded once and stays in registers; every reduction is one
  ``dl.sum``/``dl.max``/... along the r axis;
- *looped* (``red_`` prefix): ``for roffset in range(0, rnumel, RBLOCK)`` loops with
  ``[XBLOCK, RBLOCK]`` accumulators (Welford states for ``welford_reduce``), reduced
  along the r axis after the loop. A node that needs a reduction computed in the
  current loop starts a new loop; a row value computed in an earlier loop is
  recomputed from its inputs (as TorchInductor's looped reductions re-read the row).

A *mix-order* group (`scheduler.fusion`) is persistent, with column reductions too:
program ``pid`` loops over its ``RSPLIT`` rows (``Config`` entry; the grid is
``cdiv(xnumel, RSPLIT)`` programs), reducing each row as above and adding the row's
values into an ``[XBLOCK, RBLOCK]`` accumulator per column sum; after the loop it
reduces the accumulators across rows and stores its partial sums, row ``pid`` of the
partials buffer (`KernelCodegen.column_sum`).

A scan (`ir.nodes.Scan`) makes a group of ``(N, R)`` too, always persistent along the
tile's second axis: its values are scanned by one ``dl.associative_scan`` of
``[XBLOCK, RBLOCK]`` tiles, its combine function a ``def combineN`` at the top of the
kernel (the lowering keeps longer or dynamic scans as externs).

Nodes run in graph order; each node's ``inner_fn`` runs under `KernelCodegen`, an
``ops`` handler that emits one ``tmpN = ...`` line per op (common subexpressions reuse
their variable). Each node is placed in the kernel by its `Placement`: a reduction
reads at ``(xindex, rindex)``, a full-domain pointwise node (a prologue, or a consumer
of the reduced rows) at ``xindex * R + rindex``, an x-only node (an epilogue) at
``xindex``. Loads of a buffer computed earlier in the same kernel reuse the value;
buffers the scheduler removed are never stored. Loads and stores are masked by the
masks their index needs (``xmask``, ``rmask`` or both); a load through a loaded index
also by the masks of the axes that index varies along (each value's axes are tracked). Index expressions are
simplified over ``xindex in [0, xnumel)``, ``rindex in [0, rnumel)`` and printed with
``//`` and ``%``; their ``FloorDiv``/``ModularIndexing`` parts get names (``x0``...).
Index math is int64 when any index or the domain may reach 2**31 (always for symbolic
sizes), int32 otherwise.

A scatter (`ir.nodes.ScatterBuffer`) has a 1-D kernel of its own over its source's
elements: it loads its indices, stops the launch where one is out of range
(``dl.device_assert``) and stores its values through them, or adds them with a block
``dl.atomic_add`` where indices may repeat.

Values of fp16/bf16 are computed in fp32 (the lowering converts), so operands of one
op always have one dtype; Python number literals take their partner's dtype in the
DSL, and an op on literals alone materialises one with ``dl.full([], v, dtype)``. An
fp32 value rounded to fp16/bf16 (a node's result) and widened again in the same kernel
(its consumer's load) is used unrounded, as TorchInductor's generated code does: only
what is stored is rounded. That saves two conversions per fused op, which bound bf16
kernels heavy in math, and is slightly more accurate than eager's rounding after every
op; ``config.emulate_precision_casts`` rounds as eager does. Assignments nothing reads
(such roundings) are dropped from the source.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import operator
import re
from typing import Any, Callable, Optional, Sequence

import sympy
import torch
from torch.utils._sympy.functions import CeilToInt, FloorDiv, FloorToInt, ModularIndexing, RoundToInt, TruncToInt

from ..config import config
from ..ir.indexing import (
    Expr, abs_bound, is_power_of_2, known_leq, max_value, shape_env_values, simplify_index, storage_length,
    value_range,
)
from ..ir.nodes import Layout, Reduction, Scan, ScatterBuffer, reduction_identity
from ..ir.ops import OpsHandler, set_ops_handler
from ..scheduler.dependencies import FLAT, RFLAT
from ..scheduler.fusion import KernelGroup
from ..scheduler.tiling import YFLAT, Tiling, choose_tiling, memory_order_placements, stride_hint
from . import heuristics
from .heuristics import Config
from .printer import kexpr

PROGRAM = sympy.Symbol("pid", integer=True, nonnegative=True)
"""The program id in a mix-order kernel's index expressions (its column partials' row)."""

INT32_INDEX_LIMIT = 2 ** 31 - 2 ** 20
"""Index values up to this use int32 math; the margin covers a last block's lanes past xnumel."""

DSL_DTYPES = {
    torch.float16: "dl.float16", torch.bfloat16: "dl.bfloat16", torch.float32: "dl.float32",
    torch.float64: "dl.float64", torch.bool: "dl.int1", torch.int8: "dl.int8", torch.int16: "dl.int16",
    torch.int32: "dl.int32", torch.int64: "dl.int64", torch.uint8: "dl.uint8",
}


_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
"""A name in generated DSL text (values, index and mask variables are looked up by it)."""
_VALUE_NAME = re.compile(r"\b(?:tmp|acc)\d+\b")
"""The names `KernelCodegen` gives values: ``tmpN``, accumulators ``accN``."""
_DEFINITION = re.compile(r"\s*((?:tmp|acc)\d+(?:, (?:tmp|acc)\d+)*) = ")
"""A line assigning values: ``tmp3 = ...``, or a Welford's ``tmp4, tmp5, tmp6 = ...``."""

_FLOAT_TO_INT = (TruncToInt, FloorToInt, CeilToInt, RoundToInt)
"""torch's float-to-int size functions: printed by the wrapper, never in a kernel."""

_EVICT_LATER = "eviction_policy=EVICT_LATER"
"""Marks a load whose eviction hint waits for the whole kernel (`_resolve_eviction`)."""
_READ_AGAIN = 'eviction_policy="evict_last"'
_READ_ONCE = 'eviction_policy="evict_first"'
_LOAD_POINTER = re.compile(r"dl\.load\((in_ptr\d+)\b")

def dsl_dtype(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``'dl.float32'``.

    Raises:
        NotImplementedError: a dtype the DSL does not have (complex, float8...).
    """
    try:
        return DSL_DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"dtype {dtype} is not supported by the DSL") from None


def literal(value: Any, dtype: torch.dtype) -> str:
    """Python source of a constant of ``dtype`` (``float("inf")`` for infinities)."""
    if dtype == torch.bool:
        return repr(bool(value))
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    return str(int(value))


@dataclasses.dataclass(frozen=True)
class CSEVar:
    """A value in generated code: a variable name, or a literal (``is_literal``)."""

    text: str
    dtype: torch.dtype
    is_literal: bool = False
    value: Any = None

    def __str__(self) -> str:
        return self.text


@dataclasses.dataclass
class KernelSource:
    """A generated kernel and how the wrapper launches it.

    Attributes:
        name: kernel (Python function) name.
        source: the ``@dl.kernel`` function's text.
        call_args: runtime arguments in order: ``('buffer', name)`` for a tensor,
            ``('expr', sympy)`` for an integer the wrapper computes.
        numel, rnumel: the group.
        configs: launch candidates (block sizes are the kernel's constexprs), the
            untuned default first (`heuristics`); only that one for a kernel that adds
            atomically, which tuning (many runs on the real arguments) would corrupt.
        grid: ``(position in call_args, block name)`` per tiled axis: the kernel runs
            ``prod(cdiv(arg, block))`` programs (a 1-D grid).
        key: the source without the kernel's name and its FX-node comment, and the
            dtypes of its tensor arguments. Groups whose
            kernels have the same key run one kernel: the wrapper defines it once (as
            TorchInductor's wrapper maps kernel source to one name), so a model's
            repeated layers compile, tune and load each kernel once.
        passes: buffer name -> the passes over memory that load or store it: one (0)
            in a pointwise or persistent kernel; in a looped reduction each r loop,
            and the code between loops, is a pass of its own. A buffer loaded in one
            pass only is read once per element, so an output stored in that same pass
            may take its storage (`memory_planning.inplace_donors`).
    """

    name: str
    source: str
    call_args: list[tuple[str, Any]]
    numel: Expr
    rnumel: Expr
    configs: list[Config]
    grid: tuple[tuple[int, str], ...]
    key: str
    passes: dict[str, frozenset[int]]

    @property
    def config(self) -> Config:
        return self.configs[0]


def needs_int64(group: KernelGroup) -> bool:
    """Whether any index of the group (or its domain) may exceed int32. A loaded index
    counts with its dimension's size (the kernel masks or asserts any access through an
    index outside it; a lane whose garbage index wraps in int32 is masked off)."""
    limits = [group.numel * group.rnumel]
    for node in group.nodes:
        rw = node.read_writes
        var_ranges = {**rw.indirect_ranges, **dict(zip(rw.x_vars + rw.r_vars, rw.ranges + rw.reduction_ranges))}
        for expr in [d.index for d in rw.reads + rw.writes] + rw.index_exprs:
            bound = abs_bound(sympy.expand(expr), var_ranges)
            if bound is None:
                return True
            limits.append(bound)
    for limit in limits:
        limit = sympy.sympify(limit)
        if not limit.is_number or int(limit) > INT32_INDEX_LIMIT:
            return True
    return False


_DSL_REDUCE = {"sum": "dl.sum", "prod": "dl.prod", "max": "dl.max", "min": "dl.min"}


class _Scope:
    """Generated lines and the values valid in them (the kernel body, or one r loop)."""

    def __init__(self, loop: bool):
        self.loop = loop
        self.lines: list[str] = []
        self.cse: dict[str, CSEVar] = {}
        self.values: dict[str, CSEVar] = {}  # buffer name -> value computed in this scope
        self.pending: list[Callable[[], None]] = []  # looped: what to emit after the loop (finals, stores)


class KernelCodegen(OpsHandler):
    """Ops handler that writes the body of one kernel (see the module docstring).

    Args:
        numel, rnumel: the group. persistent: reduce in registers (``rnumel`` static).
        reduction_axis: the tile axis ``rindex`` runs along (1, or 0 for outer reductions).
        index_dtype: int32 or int64 index math.
        layouts: a buffer's `Layout` by name.
        tiling: a pointwise kernel's 2-D `Tiling`, or None.
    """

    def __init__(self, numel: Expr, rnumel: Expr, persistent: bool, reduction_axis: int, index_dtype: torch.dtype,
                 layouts: Callable[[str], Layout], tiling: Optional[Tiling] = None):
        self.numel, self.rnumel = numel, rnumel
        self.is_reduction = rnumel != 1
        self.persistent = persistent
        self.axis = reduction_axis
        self.index_dtype = index_dtype
        self.layouts = layouts
        self.tiling = tiling
        if tiling is not None:
            self.ranges = tiling.ranges()
        else:
            self.ranges = {FLAT: numel, RFLAT: rnumel} if self.is_reduction else {FLAT: numel}
        self.tile_symbols = frozenset(self.ranges)
        self.body = _Scope(loop=False)
        self.scopes = [self.body]
        self.index_lines: list[str] = []
        self.index_names: dict[Expr, sympy.Symbol] = {}
        self.local_index_symbols: set[sympy.Symbol] = set()
        self.indirect_masks: dict[sympy.Symbol, Optional[CSEVar]] = {}  # index symbol of a value -> bounds check
        self.in_ptrs: dict[str, str] = {}
        self.out_ptrs: dict[str, str] = {}
        self.size_symbols: set[sympy.Symbol] = set()
        self.opaque_sizes: dict[Expr, sympy.Symbol] = {}  # float-computed size -> its kernel argument
        self.masks: list[str] = []
        self.producers: dict[str, Callable[[], CSEVar]] = {}  # full-domain nodes: recompute in a later loop
        # Passes over memory: a looped reduction's r loops and the code between them are
        # numbered regions; buffer -> the regions that load or store it (`KernelSource.passes`)
        self.region = 0
        self.passes: dict[str, set[int]] = collections.defaultdict(set)
        self.has_rmask = self.is_reduction and not (persistent and is_power_of_2(rnumel))
        self._tmp_ids = itertools.count()
        self.helpers: list[str] = []  # functions defined at the top of the kernel (scan combines)
        self.unrounded: dict[str, CSEVar] = {}  # fp16/bf16 value -> the fp32 value it rounds
        self.widened_from: dict[str, torch.dtype] = {}  # fp32 value -> the fp16/bf16 dtype it is exact in
        self.reduction_results: set[str] = set()
        self.index_values: dict[str, Expr] = {}  # value name -> the index expression it holds
        # mix-order kernels: lines before and after a program's loop over its rows
        self.row_prologue: list[str] = []
        self.row_epilogue: list[str] = []
        # The tile symbols each named value varies along (its block's non-unit axes), as
        # TorchInductor's CSE variables track their mask_vars: a load through a loaded
        # index needs only the masks of that index's own axes.
        self.dims: dict[str, frozenset[sympy.Symbol]] = {
            kexpr(s): frozenset([s]) for s in self.tile_symbols}
        self.dims.update({name: frozenset([s]) for name, s in (("xmask", FLAT), ("rmask", RFLAT), ("ymask", YFLAT))
                          if s in self.tile_symbols})

    @property
    def scope(self) -> _Scope:
        return self.scopes[-1]

    # ------------------------------------------------------------------ helpers

    def _emit(self, text: str, dtype: torch.dtype) -> CSEVar:
        for scope in reversed(self.scopes):
            var = scope.cse.get(text)
            if var is not None:
                return var
        var = CSEVar(f"tmp{next(self._tmp_ids)}", dtype)
        dims = frozenset().union(*map(self._name_dims, _IDENTIFIER.findall(text)))
        # a value that does not vary along rindex (a channel's batch-norm scale, a row's
        # 1 / sum) is computed once before the r loop, not once an element in it
        scope = self.scopes[-2] if self.scope.loop and RFLAT not in dims else self.scope
        scope.cse[text] = var
        scope.lines.append(f"{var} = {text}")
        self.dims[var.text] = dims
        return var

    def _name_dims(self, name: str) -> frozenset[sympy.Symbol]:
        """The tile symbols a name in DSL text varies along: none for a size or a DSL
        function, all for a value this kernel assigned without recording them."""
        if name in self.dims:
            return self.dims[name]
        return self.tile_symbols if _VALUE_NAME.fullmatch(name) else frozenset()

    def _dims(self, x: CSEVar) -> frozenset[sympy.Symbol]:
        """The tile symbols ``x`` varies along (all of them for a value of unknown shape)."""
        return frozenset() if x.is_literal else self.dims.get(x.text, self.tile_symbols)

    def _typed(self, x: CSEVar) -> CSEVar:
        """A literal materialised as a typed scalar (so an op on literals has a dtype)."""
        if not x.is_literal:
            return x
        return self._emit(f"dl.full([], {x.text}, {dsl_dtype(x.dtype)})", x.dtype)

    def _operands(self, *xs: CSEVar) -> list[CSEVar]:
        if all(x.is_literal for x in xs):
            return [self._typed(xs[0]), *xs[1:]]
        return list(xs)

    def _result_dtype(self, *xs: CSEVar) -> torch.dtype:
        for x in xs:
            if not x.is_literal:
                return x.dtype
        return xs[0].dtype

    def simplify(self, index: Expr) -> Expr:
        """``index`` (over the flat `FLAT` and `RFLAT`) over the kernel's index symbols, simplified.

        A size computed through floats (``TruncToInt(1.7*ToFloat(s0))``, from
        ``interpolate(scale_factor=1.7)`` under dynamic shapes) becomes a size symbol of
        its own (``ks0``): the wrapper computes it in Python and passes it in, since
        kernels have no float-to-int conversions of sizes."""
        index = self.tiling.split(index) if self.tiling is not None else simplify_index(index, self.ranges)
        opaque = [a for a in index.atoms(*_FLOAT_TO_INT) if a.free_symbols]
        for atom in opaque:
            if atom not in self.opaque_sizes:
                self.opaque_sizes[atom] = sympy.Symbol(f"ks{len(self.opaque_sizes)}", integer=True, positive=True)
        return index.xreplace({a: self.opaque_sizes[a] for a in opaque}) if opaque else index

    def index_str(self, index: Expr) -> str:
        """DSL text of an index expression over the kernel's index symbols (simplified, parts named)."""
        expr = self.simplify(index)
        parts = sorted((a for a in expr.atoms(FloorDiv, ModularIndexing) if a.free_symbols & self.tile_symbols),
                       key=sympy.default_sort_key)
        expr = expr.xreplace({a: self._index_name(a) for a in parts})
        self.size_symbols |= {s for s in expr.free_symbols
                              if s not in self.tile_symbols and s not in self.index_names.values()
                              and s not in self.local_index_symbols}
        return kexpr(expr)

    def _index_name(self, atom: Expr) -> sympy.Symbol:
        self.size_symbols |= {s for s in atom.free_symbols if s not in self.tile_symbols}
        # A FloorDiv of a dividend that may be negative ((x0 - 1) // 4 at x0 = 0) may be
        # too: its symbol must not let sympy fold Min(1, that + 1) to 1.
        # (nonnegative=False would say negative: leave the sign unknown instead)
        sign = {"nonnegative": True} if isinstance(atom, ModularIndexing) or atom.args[0].is_nonnegative else {}
        if atom.has(RFLAT):  # changes with rindex: computed where it is used
            symbol = sympy.Symbol(str(self._emit(kexpr(atom), self.index_dtype)), integer=True, **sign)
            self.local_index_symbols.add(symbol)
            return symbol
        name = self.index_names.get(atom)
        if name is None:
            name = sympy.Symbol(f"x{len(self.index_names)}", integer=True, **sign)
            self.index_names[atom] = name
            self.dims[name.name] = frozenset(atom.free_symbols & self.tile_symbols)
            self.index_lines.append(f"{name} = {kexpr(atom)}")
        return name

    def _index_mask(self, index: Expr) -> Optional[str]:
        """The mask an access at ``index`` needs: by the index variables it uses."""
        symbols = self.simplify(index).free_symbols
        for symbol in symbols & self.indirect_masks.keys():  # a loaded index may be garbage where its load was masked
            symbols = symbols | self.dims.get(symbol.name, self.tile_symbols)
        uses_r = self.has_rmask and RFLAT in symbols
        if self.tiling is not None:
            if (FLAT in symbols) == (YFLAT in symbols):
                return self._emit("ymask & xmask", torch.bool).text
            return "xmask" if FLAT in symbols else "ymask"
        if not self.is_reduction:
            return "xmask"
        if uses_r and FLAT in symbols:
            return self._emit("xmask & rmask", torch.bool).text
        if uses_r:
            return "rmask"
        return "xmask"

    def _mask(self, index: Expr) -> Optional[str]:
        base = self._index_mask(index)
        for symbol in sorted(sympy.sympify(index).free_symbols & self.indirect_masks.keys(), key=str):
            if self.indirect_masks[symbol] is not None:
                base = self._emit(f"{base} & {self.indirect_masks[symbol]}", torch.bool).text
        if not self.masks:
            return base
        return self._emit(f"{base} & {self.masks[-1]}", torch.bool).text if base else self.masks[-1]

    # ------------------------------------------------------------------ memory

    def _visible(self, name: str) -> Optional[CSEVar]:
        for scope in reversed(self.scopes):
            if name in scope.values:
                return scope.values[name]
        return None

    def load(self, name: str, index: Expr) -> CSEVar:
        value = self._visible(name)
        if value is not None:
            return value
        if name in self.producers:  # computed in an earlier loop of this kernel: compute again here
            return self.producers[name]()
        ptr = self.in_ptrs.setdefault(name, f"in_ptr{len(self.in_ptrs)}")
        self.passes[name].add(self.region)
        dtype = self.layouts(name).dtype
        simplified = self.simplify(index)
        if not simplified.free_symbols & self.indirect_masks.keys() and self._in_bounds(name, simplified):
            # loaded whatever ops.masked's condition: a value it discards is never out of bounds
            if not simplified.free_symbols & self.tile_symbols:  # a scalar (a loss's grad_output)
                return self._emit(f"dl.load({ptr} + ({self.index_str(index)}))", dtype)
            if self.is_reduction and self.tiling is None and FLAT not in simplified.free_symbols:
                # the same values for every row (a LayerNorm weight): one [1, RBLOCK] block,
                # not a copy a row under the row mask
                mask = ", mask=rmask" if self.has_rmask else ""
            else:
                mask = f", mask={self._index_mask(index)}"
        else:
            mask = f", mask={self._mask(index)}"
        policy = self._eviction_policy(simplified)
        return self._emit(f"dl.load({ptr} + ({self.index_str(index)}){mask}{policy})", dtype)

    def _eviction_policy(self, index: Expr) -> str:
        """The cache hint of a load at ``index`` (simplified), after
        TorchInductor's rules: values other rows or programs read again (a broadcast:
        the index misses one of the kernel's axes, or tells fewer of its positions apart
        than it has, as a bias at ``xindex % 768`` does) stay in cache longest; a
        reduction's row loaded in several passes (a looped reduction) stays until its
        last pass, which `_resolve_eviction` decides once the kernel is written. Hints
        never change results."""
        symbols = index.free_symbols
        axes = symbols & self.tile_symbols
        for symbol in symbols & self.indirect_masks.keys():
            axes = axes | self.dims.get(symbol.name, self.tile_symbols)
        for symbol, n in self.ranges.items():
            if sympy.sympify(n) == 1:
                continue
            if symbol not in axes or known_leq(_positions_told_apart(index, symbol, n) + 1, n):
                return f", {_READ_AGAIN}"
        if self.is_reduction and RFLAT in axes:
            return f", {_EVICT_LATER}"
        return ""

    def _in_bounds(self, name: str, index: Expr) -> bool:
        """Whether ``index`` addresses an element of ``name`` at every position of the
        kernel's domain (each tile symbol below its numel), so that a load needs only the
        masks of the lanes past the domain's end."""
        layout = self.layouts(name)
        if layout.offset != 0 or not all(known_leq(1, size) for size in layout.size) or not all(
                known_leq(0, stride) for stride in layout.stride):
            return False
        top = max_value(index, self.ranges)
        return top is not None and known_leq(top + 1, storage_length(layout.size, layout.stride))

    def store(self, name: str, index: Expr, value: CSEVar, keep: bool, scope: Optional[_Scope] = None) -> None:
        """Record ``value`` as element ``index`` of ``name``; write it to memory if ``keep``."""
        scope = scope or self.scope
        scope.values[name] = value
        if not keep:
            return
        ptr = self.out_ptrs.setdefault(name, f"out_ptr{len(self.out_ptrs)}")
        self.passes[name].add(self.region)
        offset = self.index_str(index)
        symbols = self.simplify(index).free_symbols
        if self.tiling is not None and not {FLAT, YFLAT} <= symbols:
            # a pointer block covers the tile (size-1 dims can drop an index symbol)
            offset = f"dl.full([YBLOCK, XBLOCK], {offset}, {dsl_dtype(self.index_dtype)})" if not symbols & {
                FLAT, YFLAT} else f"dl.broadcast_to({offset}, [YBLOCK, XBLOCK])"
        elif FLAT not in symbols and RFLAT not in symbols:
            # a store's pointer must be a block even when every lane writes one element
            shape = "[XBLOCK, 1]" if self.is_reduction and self.axis == 1 else \
                "[1, XBLOCK]" if self.is_reduction else "[XBLOCK]"
            offset = f"dl.full({shape}, {offset}, {dsl_dtype(self.index_dtype)})"
        mask = self._index_mask(index)
        scope.lines.append(f"dl.store({ptr} + ({offset}), {value}, mask={mask})")

    def scatter(self, name: str, index: Expr, value: CSEVar, mode: Optional[str]) -> None:
        """Write ``value`` to element ``index`` of ``name``, an index computed from
        loaded values (`ir.nodes.Scatter`): a store, or with ``mode="atomic_add"`` a
        block ``dl.atomic_add`` (every repeated index adds). An index a bounds-checked
        ``indirect_indexing`` finds outside its dimension stops the launch
        (``dl.device_assert``, as eager raises) and is never written."""
        ptr = self.out_ptrs.setdefault(name, f"out_ptr{len(self.out_ptrs)}")
        offset = self.index_str(index)
        self.check_bounds(index)
        mask = self._mask(index)
        value = self._typed(value)
        if not self.simplify(index).free_symbols & self.tile_symbols:
            # every lane writes one element (scatter_add of a block into a single
            # output): a block of equal pointers, shaped like the value and the mask
            offset = f"{offset} + 0 * xindex"
        if mode == "atomic_add":
            self.scope.lines.append(f'dl.atomic_add({ptr} + ({offset}), {value}, mask={mask}, sem="relaxed")')
        else:
            self.scope.lines.append(f"dl.store({ptr} + ({offset}), {value}, mask={mask})")

    def check_bounds(self, index: Expr) -> None:
        """Stop the launch (``dl.device_assert``, as eager raises) in any lane where a
        bounds-checked `indirect_indexing` symbol of ``index`` is outside its dimension."""
        lanes = self._index_mask(index)
        if self.masks:  # only where ops.masked's condition holds: elsewhere nothing is accessed
            lanes = self._emit(f"{lanes} & {self.masks[-1]}", torch.bool).text
        for symbol in sorted(sympy.sympify(index).free_symbols & self.indirect_masks.keys(), key=str):
            in_bounds = self.indirect_masks[symbol]
            if in_bounds is not None:
                line = f'dl.device_assert({in_bounds} | ~{lanes}, "index out of bounds")'
                if line not in self.scope.lines:
                    self.scope.lines.append(line)

    # ------------------------------------------------------------------ loops

    def open_loop(self) -> None:
        self.region += 1
        scope = _Scope(loop=True)
        scope.lines += ["rindex = roffset + rbase", "rmask = rindex < rnumel"]
        self.scopes.append(scope)

    def close_loop(self) -> None:
        """End the current r loop: emit it, then finish its reductions after it."""
        loop = self.scopes.pop()
        self.region += 1
        self.scope.lines.append("for roffset in range(0, rnumel, RBLOCK):")
        self.scope.lines += [f"    {line}" for line in loop.lines]
        for finish in loop.pending:
            finish()

    def in_loop(self) -> bool:
        return self.scope.loop

    def row_values_across_reductions(self) -> int:
        """The most row-sized values (varying along ``rindex``) that a persistent
        kernel's body defines before one of its reductions and uses after it: the rows
        it holds in registers while it reduces (softmax's backward holds two, the
        gradient and the output; its forward one, the input and then its exponential)."""
        defined: dict[str, int] = {}
        last_use: dict[str, int] = {}
        points = []
        for i, line in enumerate(self.body.lines):
            target = _DEFINITION.match(line)
            names = target.group(1).split(", ") if target else []
            for name in _VALUE_NAME.findall(line[target.end():] if target else line):
                last_use[name] = i
            for name in names:
                defined.setdefault(name, i)
            if self.reduction_results.intersection(names):
                points.append(i)
        # masks are predicates, not rows of values
        dtypes = {var.text: var.dtype for var in self.body.cse.values()}
        rows = [name for name in defined if RFLAT in self.dims.get(name, ()) and dtypes.get(name) != torch.bool]
        return max((sum(defined[name] < p < last_use.get(name, -1) for name in rows) for p in points), default=0)

    # ------------------------------------------------------------------ reductions

    def _r_shape(self) -> str:
        return "[XBLOCK, RBLOCK]" if self.axis == 1 else "[RBLOCK, XBLOCK]"

    def _masked_value(self, value: CSEVar, identity: Any) -> CSEVar:
        """``value`` as a full tile, masked-off lanes holding ``identity``."""
        if self.has_rmask:
            return self.where(CSEVar("rmask", torch.bool), value, self.constant(identity, value.dtype))
        return self._emit(f"dl.broadcast_to({self._typed(value)}, {self._r_shape()})", value.dtype)

    def reduction(self, dtype: torch.dtype, reduction_type: str, value: CSEVar) -> tuple[CSEVar, ...]:
        """Emit the reduction of ``value`` over the r axis; returns its results (three for
        ``welford_reduce``), shaped to broadcast against the tile. In a looped kernel
        the results are defined after the current loop (`close_loop`)."""
        key = f"reduction {reduction_type} {value}"
        for scope in reversed(self.scopes):
            if key in scope.cse:
                return scope.cse[key].value
        results = (self._persistent_reduction if self.persistent else self._looped_reduction)(
            dtype, reduction_type, value)
        self.reduction_results.update(result.text for result in results)
        self.scope.cse[key] = CSEVar(key, dtype, value=results)
        for result in results:
            self.dims[result.text] = self._dims(value) - {RFLAT}
        return results

    def _persistent_reduction(self, dtype, reduction_type, value) -> tuple[CSEVar, ...]:
        axis = self.axis
        if reduction_type == "welford_reduce":
            # Masked-off lanes weigh nothing, but their value must be finite too: the merge
            # multiplies a difference by a weight ratio, and inf * 0 is NaN (a log or a
            # division of the 0 a masked load gives).
            weight = "rmask" if self.has_rmask else "1.0"
            full = self._masked_value(value, 0.0)
            names = [CSEVar(f"tmp{next(self._tmp_ids)}", dtype) for _ in range(3)]
            self.scope.lines.append(f"{', '.join(map(str, names))} = "
                                    f"dl.welford({full}, 0.0, {weight}, {axis}, keep_dims=True)")
            return tuple(names)
        masked = self._masked_value(value, reduction_identity(reduction_type, dtype))
        if reduction_type in ("argmax", "argmin"):
            # The extreme, then the first index holding it (or NaN, which wins): two plain
            # reductions, which the DSL compiler lowers to packed half max/min and a select
            # chain, where a (value, index) reduction combines pairs with tie-breaks.
            extreme = "dl.max" if reduction_type == "argmax" else "dl.min"
            top = self._emit(f"{extreme}({masked}, {axis}, keep_dims=True)", dtype)
            is_top = f"({masked} == {top})" + (f" | dl.isnan({masked})" if dtype.is_floating_point else "")
            return (self._emit(f"dl.min(dl.where({is_top}, rindex, RBLOCK), {axis}, keep_dims=True)",
                               torch.int32),)
        if reduction_type in ("any", "all"):
            fn = "dl.max" if reduction_type == "any" else "dl.min"
            as_int = self._emit(f"{masked}.to(dl.int32)", torch.int32)
            return (self._emit(f"{fn}({as_int}, {axis}, keep_dims=True) != 0", torch.bool),)
        result_dtype = dtype if reduction_type not in ("sum", "prod") or dtype.is_floating_point else torch.int64
        return (self._emit(f"{_DSL_REDUCE[reduction_type]}({masked}, {axis}, keep_dims=True)", result_dtype),)

    def _accumulator(self, init: str, dtype: torch.dtype) -> CSEVar:
        """A loop-carried ``[XBLOCK, RBLOCK]`` accumulator, initialised before the loop."""
        var = CSEVar(f"acc{next(self._tmp_ids)}", dtype)
        self.scopes[-2].lines.append(f"{var} = dl.full({self._r_shape()}, {init}, {dsl_dtype(dtype)})")
        return var

    def _looped_reduction(self, dtype, reduction_type, value) -> tuple[CSEVar, ...]:
        axis, loop, outer = self.axis, self.scope, self.scopes[-2]
        value = self._typed(value)
        results = tuple(CSEVar(f"tmp{next(self._tmp_ids)}", d) for d in _result_dtypes(reduction_type, dtype))
        if reduction_type == "welford_reduce":
            mean, m2, weight = (self._accumulator("0.0", dtype) for _ in range(3))
            loop.lines.append(f"{mean}, {m2}, {weight} = dl.welford_combine({mean}, {m2}, {weight}, "
                              f"dl.where(rmask, {value}, 0.0), 0.0, rmask)")  # finite, as above
            final = f"dl.welford({mean}, {m2}, {weight}, {axis}, keep_dims=True)"
            loop.pending.append(lambda: outer.lines.append(f"{', '.join(map(str, results))} = {final}"))
            return results
        identity = literal(reduction_identity(reduction_type, dtype), dtype)
        if reduction_type in ("argmax", "argmin"):
            best = self._accumulator(identity, dtype)
            best_index = self._accumulator("0", self.index_dtype)  # rindex: past 2**31 in a long row
            op = ">" if reduction_type == "argmax" else "<"
            better = f"({value} {op} {best})"
            if dtype.is_floating_point:  # NaN beats everything but NaN
                better += f" | (dl.isnan({value}) & ~dl.isnan({best}))"
            loop.lines += [f"{best}_better = rmask & ({better})",
                           f"{best} = dl.where({best}_better, {value}, {best})",
                           f"{best_index} = dl.where({best}_better, rindex, {best_index})"]
            extreme = "dl.max" if reduction_type == "argmax" else "dl.min"
            is_top = f"({best} == {best}_top)" + (f" | (dl.isnan({best}) & dl.isnan({best}_top))"
                                                  if dtype.is_floating_point else "")

            def finish():
                outer.lines += [f"{best}_top = {extreme}({best}, {axis}, keep_dims=True)",
                                f"{results[0]} = dl.min(dl.where({is_top}, {best_index}, rnumel), {axis}, "
                                f"keep_dims=True)"]

            loop.pending.append(finish)
            return results
        if reduction_type in ("any", "all"):
            acc = self._accumulator("1" if reduction_type == "all" else "0", torch.int32)
            combine = "dl.maximum" if reduction_type == "any" else "dl.minimum"
            loop.lines.append(f"{acc} = dl.where(rmask, {combine}({acc}, {value}.to(dl.int32)), {acc})")
            fn = "dl.max" if reduction_type == "any" else "dl.min"
            loop.pending.append(lambda: outer.lines.append(
                f"{results[0]} = {fn}({acc}, {axis}, keep_dims=True) != 0"))
            return results
        acc = self._accumulator(identity, results[0].dtype)
        step = {"sum": f"{acc} + {value}", "prod": f"{acc} * {value}",
                "max": f"dl.maximum({acc}, {value})", "min": f"dl.minimum({acc}, {value})"}[reduction_type]
        loop.lines.append(f"{acc} = dl.where(rmask, {step}, {acc})")
        loop.pending.append(lambda: outer.lines.append(
            f"{results[0]} = {_DSL_REDUCE[reduction_type]}({acc}, {axis}, keep_dims=True)"))
        return results

    def column_sum(self, name: str, index: Expr, value: CSEVar, dtype: torch.dtype) -> None:
        """Sum ``value`` over the rows of this program (a mix-order kernel's column
        reduction) and store the ``[1, RBLOCK]`` partial at ``index`` of ``name``, an
        index over `PROGRAM` and `RFLAT`: an accumulator tile before the loop over the
        program's rows, one add an iteration, one reduction across the tile's rows after."""
        value = self._typed(value)
        acc = CSEVar(f"acc{next(self._tmp_ids)}", value.dtype)
        self.row_prologue.append(f"{acc} = dl.full([XBLOCK, RBLOCK], 0, {dsl_dtype(value.dtype)})")
        self.scope.lines.append(f"{acc} = dl.where(xmask, {acc} + {value}, {acc})")
        total = f"tmp{next(self._tmp_ids)}"
        self.row_epilogue.append(f"{total} = dl.sum({acc}, 0, keep_dims=True)")
        if dtype != value.dtype:
            self.row_epilogue.append(f"{total} = {total}.to({dsl_dtype(dtype)})")
        ptr = self.out_ptrs.setdefault(name, f"out_ptr{len(self.out_ptrs)}")
        offset = self.simplify(index)
        self.size_symbols |= offset.free_symbols - self.tile_symbols - {PROGRAM}
        mask = ", mask=rmask" if self.has_rmask else ""
        self.row_epilogue.append(f"dl.store({ptr} + ({kexpr(offset)}), {total}{mask})")

    # ------------------------------------------------------------------ scans

    def scan(self, dtypes: Sequence[torch.dtype], combine_fn: Callable, values: Sequence[CSEVar]) -> tuple[CSEVar, ...]:
        """Emit an inclusive scan of ``values`` (cast to ``dtypes``) along the tile's r
        axis (`ir.nodes.Scan`): ``combine_fn`` becomes a function defined at the top of
        the kernel, the scan one ``dl.associative_scan`` of ``[XBLOCK, RBLOCK]`` tiles.
        Persistent kernels only: the whole row is in the tile. Lanes past ``rnumel`` come
        after every real position, so a forward scan needs no identity there."""
        tiles = [self._emit(f"dl.broadcast_to({self._typed(self.to_dtype(v, d))}, [XBLOCK, RBLOCK])", d)
                 for v, d in zip(values, dtypes)]
        key = f"scan {id(combine_fn)} {' '.join(map(str, tiles))}"
        for scope in reversed(self.scopes):
            if key in scope.cse:
                return scope.cse[key].value
        name = f"combine{sum(line.startswith('def ') for line in self.helpers)}"
        self.helpers += _combine_function(name, combine_fn, dtypes, self)
        results = tuple(CSEVar(f"tmp{next(self._tmp_ids)}", d) for d in dtypes)
        self.scope.lines.append(f"{''.join(f'{r}, ' for r in results)}= "
                                f"dl.associative_scan(({''.join(f'{t}, ' for t in tiles)}), 1, {name})")
        self.scope.cse[key] = CSEVar(key, dtypes[0], value=results)
        return results

    # ------------------------------------------------------------------ values

    def constant(self, value: Any, dtype: torch.dtype) -> CSEVar:
        return CSEVar(literal(value, dtype), dtype, is_literal=True, value=value)

    def index_expr(self, expr: Expr, dtype: torch.dtype) -> CSEVar:
        expr = sympy.sympify(expr)
        simplified = expr if expr.is_number else self.simplify(expr)  # the ranges may make it a number
        if simplified.is_number:
            return self.constant(int(simplified), dtype)
        printed = self.index_str(expr)
        if printed.lstrip("-").isdigit():  # naming its parts (`_index_name`) can fold it further
            return self.constant(int(printed), dtype)
        text = f"({printed})"
        if dtype == torch.int64 and self.index_dtype == torch.int32:
            # needs_int64 proved every index value fits int32: skip the widening
            var = self._emit(text, torch.int32)
        else:
            var = self._emit(f"{text}.to({dsl_dtype(dtype)})", dtype)
        self.index_values[var.text] = simplified
        return var

    def indirect_indexing(self, x: CSEVar, size: Expr, check: bool = True, wrap_neg: bool = True) -> sympy.Symbol:
        """``x`` as an int64 index symbol (``wrap_neg``: negative values count from the
        end); with ``check``, loads through it are masked to ``0 <= x < size`` so that
        none leaves the tensor."""
        x = self.to_dtype(self._typed(x), torch.int64)
        n = self.index_expr(size, torch.int64)
        if wrap_neg:
            x = self.where(self.lt(x, self.constant(0, torch.int64)), self.add(x, n), x)
        symbol = sympy.Symbol(x.text, integer=True, nonnegative=True)  # in range wherever a load uses it
        self.local_index_symbols.add(symbol)
        self.indirect_masks[symbol] = self.logical_and(
            self.ge(x, self.constant(0, torch.int64)), self.lt(x, n)) if check else None
        return symbol

    def to_dtype(self, x: CSEVar, dtype: torch.dtype) -> CSEVar:
        if x.dtype == dtype:
            return x
        if x.is_literal:
            value = x.value
            if dtype == torch.bool:
                value = bool(value)
            elif not dtype.is_floating_point:
                value = int(value)
            return self._emit(f"dl.full([], {literal(value, dtype)}, {dsl_dtype(dtype)})", dtype)
        if x.text in self.unrounded and self.unrounded[x.text].dtype == dtype:
            return self.unrounded[x.text]
        out = self._emit(f"{x}.to({dsl_dtype(dtype)})", dtype)
        if (dtype in (torch.float16, torch.bfloat16) and x.dtype == torch.float32
                and not config.emulate_precision_casts):
            self.unrounded[out.text] = x
        if dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16):
            self.widened_from[out.text] = x.dtype
        return out

    def round_to_dtype(self, x: CSEVar, dtype: torch.dtype) -> CSEVar:
        if x.is_literal or x.dtype == dtype:
            return self.to_dtype(self.to_dtype(x, dtype), x.dtype)
        if self.widened_from.get(x.text) == dtype:  # a value of ``dtype`` already
            return x
        return self._emit(f"{x}.to({dsl_dtype(dtype)}).to({dsl_dtype(x.dtype)})", x.dtype)

    def where(self, cond: CSEVar, a: CSEVar, b: CSEVar) -> CSEVar:
        if cond.is_literal:
            return a if cond.value else b
        a, b = self._operands(a, b)
        return self._emit(f"dl.where({cond}, {a}, {b})", self._result_dtype(a, b))

    def masked(self, mask: CSEVar, body: Callable[[], CSEVar], other: Any) -> CSEVar:
        if mask.is_literal and mask.value:
            return body()
        combined = self._emit(f"{self.masks[-1]} & {mask}", torch.bool) if self.masks else mask
        self.masks.append(str(combined))
        try:
            result = body()
        finally:
            self.masks.pop()
        return self.where(mask, result, self.constant(other, result.dtype))

    # ------------------------------------------------------------------ arithmetic

    def _binary(self, template: str, a: CSEVar, b: CSEVar, dtype: Optional[torch.dtype] = None) -> CSEVar:
        a, b = self._operands(a, b)
        return self._emit(template.format(a=a, b=b), dtype or self._result_dtype(a, b))

    def _unary(self, template: str, x: CSEVar, dtype: Optional[torch.dtype] = None) -> CSEVar:
        x = self._typed(x)
        return self._emit(template.format(x=x), dtype or x.dtype)

    def add(self, a, b):
        return self._binary("{a} + {b}", a, b)

    def sub(self, a, b):
        return self._binary("{a} - {b}", a, b)

    def mul(self, a, b):
        return self._binary("{a} * {b}", a, b)

    def truediv(self, a, b):
        # IEEE division in every kernel, as eager's tensor-by-tensor division: a quotient
        # that one kernel computes and another recomputes (a max's backward finds the
        # maximum by equality) must come out the same in both
        return self._binary("{a} / {b}", a, b)

    def truncdiv(self, a, b):
        if self._result_dtype(a, b).is_floating_point:
            return self._binary("dl.trunc({a} / {b})", a, b)
        return self._binary("{a} // {b}", a, b)

    def fmod(self, a, b):
        if self._result_dtype(a, b).is_floating_point:
            return self._binary("dl.fmod({a}, {b})", a, b)
        return self._binary("{a} % {b}", a, b)

    def _needs_floor_fix(self, r: CSEVar, b: CSEVar) -> CSEVar:
        """True where a C remainder ``r`` of ``... / b`` differs in sign from ``b``."""
        zero = self.constant(0, r.dtype)
        if b.is_literal:
            return self.lt(r, zero) if b.value > 0 else self.gt(r, zero)
        nonzero = self.ne(r, self.constant(0, r.dtype))
        signs_differ = self.ne(self.lt(r, self.constant(0, r.dtype)), self.lt(b, self.constant(0, b.dtype)))
        return self.logical_and(nonzero, signs_differ)

    def floordiv(self, a, b):
        if self._result_dtype(a, b).is_floating_point:
            return self._binary("dl.floor({a} / {b})", a, b)
        q = self.truncdiv(a, b)
        fix = self._needs_floor_fix(self.fmod(a, b), b)
        return self.where(fix, self.sub(q, self.constant(1, q.dtype)), q)

    def remainder(self, a, b):
        r = self.fmod(a, b)
        return self.where(self._needs_floor_fix(r, b), self.add(r, b), r)

    def maximum(self, a, b):
        return self._binary("dl.maximum({a}, {b})", a, b)

    def minimum(self, a, b):
        return self._binary("dl.minimum({a}, {b})", a, b)

    def pow(self, a, b):
        return self._binary("dl.pow({a}, {b})", a, b)

    def atan2(self, a, b):
        return self._binary("dl.atan2({a}, {b})", a, b)

    def hypot(self, a, b):
        return self._binary("dl.hypot({a}, {b})", a, b)

    def copysign(self, a, b):
        return self._binary("dl.copysign({a}, {b})", a, b)

    def nextafter(self, a, b):
        return self._binary("dl.nextafter({a}, {b})", a, b)

    def bitwise_left_shift(self, a, b):
        return self._binary("{a} << {b}", a, b)

    def bitwise_right_shift(self, a, b):
        return self._binary("{a} >> {b}", a, b)

    def _logical(self, op: str, a, b):
        for x, y in ((a, b), (b, a)):
            if x.is_literal:
                if op == "&":
                    return y if x.value else self.constant(False, torch.bool)
                if op == "|":
                    return self.constant(True, torch.bool) if x.value else y
        return self._binary("{a} " + op + " {b}", a, b, torch.bool)

    def logical_and(self, a, b):
        return self._logical("&", a, b)

    def logical_or(self, a, b):
        return self._logical("|", a, b)

    def logical_xor(self, a, b):
        return self._binary("{a} ^ {b}", a, b, torch.bool)

    def bitwise_and(self, a, b):
        return self._binary("{a} & {b}", a, b)

    def bitwise_or(self, a, b):
        return self._binary("{a} | {b}", a, b)

    def bitwise_xor(self, a, b):
        return self._binary("{a} ^ {b}", a, b)

    def _compare(self, op: str, a, b):
        if a.is_literal and b.is_literal:
            return self.constant(_FOLD[op](a.value, b.value), torch.bool)
        known = self._compare_over_ranges(op, a, b)
        if known is not None:
            return self.constant(known, torch.bool)
        return self._binary("{a} " + op + " {b}", a, b, torch.bool)

    def _compare_over_ranges(self, op: str, a: CSEVar, b: CSEVar) -> Optional[bool]:
        """The result of comparing an index value with an integer literal where the
        index's range over the kernel's domain decides it (a pooling window's bounds
        check ``x0 - 1 < 56`` for ``x0 < 56``), else None."""
        for x, y, flipped in ((a, b, False), (b, a, True)):
            expr = self.index_values.get(x.text)
            if expr is None or not y.is_literal or isinstance(y.value, bool) or not isinstance(y.value, int):
                continue
            span = value_range(expr, self.ranges)
            if span is None:
                return None
            fold = _FOLD[_FLIPPED[op] if flipped else op]
            lo, hi = (fold(v, y.value) for v in span)
            # every comparison with a constant is monotonic in x: the ends decide it
            # when they agree, except for == and != inside the range
            if lo == hi and (op not in ("==", "!=") or not span[0] < y.value < span[1]):
                return lo
            return None
        return None

    def eq(self, a, b):
        return self._compare("==", a, b)

    def ne(self, a, b):
        return self._compare("!=", a, b)

    def lt(self, a, b):
        return self._compare("<", a, b)

    def le(self, a, b):
        return self._compare("<=", a, b)

    def gt(self, a, b):
        return self._compare(">", a, b)

    def ge(self, a, b):
        return self._compare(">=", a, b)

    def neg(self, x):
        return self._unary("-{x}", x)

    def logical_not(self, x):
        if x.is_literal:
            return self.constant(not x.value, torch.bool)
        return self._unary("~{x}", x, torch.bool)

    def bitwise_not(self, x):
        return self._unary("~{x}", x)

    def isnan(self, x):
        return self._unary("dl.isnan({x})", x, torch.bool)

    def isinf(self, x):
        return self._unary("dl.isinf({x})", x, torch.bool)

    def signbit(self, x):
        return self._unary("dl.signbit({x})", x, torch.bool)

    def default(self, name: str, *args):
        if name in _MATH_FNS and len(args) == 1:
            return self._unary(f"dl.{_MATH_FNS[name]}({{x}})", args[0])
        return super().default(name, *args)


_FOLD = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
"""The comparison with its operands swapped: ``a < b`` is ``b > a``."""
# ops.<name> -> dl.<name>: the same name, but libdevice's for the Bessel functions
_MATH_FNS = {name: name for name in (
    "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "sin",
    "cos", "tan", "floor", "ceil", "trunc", "round", "acos", "asin", "atan", "sinh", "cosh", "asinh", "acosh",
    "atanh", "erfc", "erfcx", "erfinv", "lgamma",
)} | {"i0": "cyl_bessel_i0", "i1": "cyl_bessel_i1", "bessel_j0": "j0", "bessel_j1": "j1", "bessel_y0": "y0",
     "bessel_y1": "y1", "ndtri": "normcdfinv"}


def _combine_function(name: str, combine_fn: Callable, dtypes: Sequence[torch.dtype],
                      parent: KernelCodegen) -> list[str]:
    """Lines defining ``def name(a0, .., b0, ..)``: ``combine_fn`` (through ``ops``) on
    scalars of ``dtypes``, the lower positions' state ``a`` first."""
    body = KernelCodegen(parent.numel, parent.rnumel, parent.persistent, parent.axis, parent.index_dtype,
                         parent.layouts)
    body._tmp_ids = parent._tmp_ids  # one numbering per kernel, for readability
    a = tuple(CSEVar(f"a{k}", d) for k, d in enumerate(dtypes))
    b = tuple(CSEVar(f"b{k}", d) for k, d in enumerate(dtypes))
    with set_ops_handler(body):
        combined = [body._typed(body.to_dtype(c, d)) for c, d in zip(combine_fn(a, b), dtypes)]
    params = ", ".join(str(v) for v in a + b)
    return ([f"def {name}({params}):"] + [f"    {line}" for line in body.body.lines]
            + [f"    return {', '.join(map(str, combined))}"])


def _result_dtypes(reduction_type: str, dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    if reduction_type == "welford_reduce":
        return (dtype, dtype, dtype)
    if reduction_type in ("argmax", "argmin"):
        return (torch.int32,)
    if reduction_type in ("any", "all"):
        return (torch.bool,)
    return (dtype,)


def kernel_name(group: KernelGroup, index: int, persistent: bool) -> str:
    """``poi_``/``per_``/``red_`` + ``fused_<sorted op names>_<index>`` (at most 6
    names, as TorchInductor does): pointwise, persistent or looped reduction."""
    ops_used = sorted(set(group.origins().values()))
    prefix = "poi" if not group.is_reduction else "per" if persistent else "red"
    return "_".join([prefix, "fused", *ops_used[:6], str(index)])


def reduction_axis(group: KernelGroup) -> int:
    """0 when the group's largest read from memory runs along the outputs' contiguous
    dimension (an *outer* reduction: stride 1 along ``xindex``, a larger one along
    ``rindex``), else 1. Decided from the MemoryDep index expressions' stride hints,
    with size symbols at the shape environment's example values (a channels-last mean
    over ``H*W`` under dynamic shapes is outer too: its stride along ``xindex`` at the
    origin, ``1 % C``, is 1 for every ``C > 1``). A group with a scan: 1."""
    best, axis = None, 1
    if any(isinstance(n.node.data, Scan) for n in group.nodes):
        return 1  # the DSL scans along the tile's axis 1
    written = group.writes()
    hints = shape_env_values()
    for node in group.nodes:
        rw = node.read_writes
        placement = rw.placement(group.numel, group.rnumel)
        for dep in rw.reads:
            if dep.name in written:
                continue
            try:
                index = dep.kernel_index(placement, group.numel, group.rnumel).xreplace(hints)
            except ZeroDivisionError:  # a dim empty at the example sizes: no hint to read
                continue
            x_stride = stride_hint(index, FLAT, (RFLAT,))
            r_stride = stride_hint(index, RFLAT, (FLAT,))
            size = _static_size(sympy.sympify(dep.numel()).xreplace(hints))
            if best is None or size > best:
                best = size
                axis = 0 if x_stride == 1 and r_stride not in (None, 0, 1) else 1
    return axis


def _static_size(n: Expr) -> int:
    n = sympy.sympify(n)
    return int(n) if n.is_number else 1 << 40


def is_persistent(group: KernelGroup, axis: int) -> bool:
    """Whether the group's rows are reduced in registers (static ``rnumel`` of at most
    `heuristics.PERSISTENT_MAX_RBLOCK` after rounding, rows contiguous)."""
    r = sympy.sympify(group.rnumel)
    return (group.is_reduction and axis == 1 and r.is_number
            and heuristics.next_power_of_2(int(r)) <= heuristics.PERSISTENT_MAX_RBLOCK)


def _element_size(layouts: Callable[[str], Layout], names) -> int:
    sizes = [layouts(n).dtype.itemsize for n in names]
    return max(sizes) if sizes else 4


def generate_kernel(group: KernelGroup, index: int, removed: set[str],
                    layouts: Callable[[str], Layout]) -> KernelSource:
    """Source of the kernel computing ``group``; ``removed`` buffers are not stored.

    Raises:
        NotImplementedError: a dtype the DSL lacks.
    """
    index_dtype = torch.int64 if needs_int64(group) else torch.int32
    axis = reduction_axis(group) if group.is_reduction else 1
    persistent = is_persistent(group, axis)
    if group.rows_per_program is not None and not persistent:
        raise NotImplementedError(f"mix-order group {group.names}: its rows are not reduced in registers")
    in_memory_order = memory_order_placements(group, lambda name: name not in removed)
    # a scatter's stores follow its source's layout, not a tile's
    tiling = (None if group.has_scatter() or in_memory_order
              else choose_tiling(group, lambda name: layouts(name).dtype.itemsize))

    def write(persistent: bool) -> KernelCodegen:
        cg = KernelCodegen(group.numel, group.rnumel, persistent, axis, index_dtype, layouts, tiling)
        looped = group.is_reduction and not persistent
        pending_reductions: set[str] = set()  # reduction results of the open loop
        with set_ops_handler(cg):
            for node in group.nodes:
                placement = (in_memory_order[node.name] if in_memory_order
                             else node.read_writes.placement(group.numel, group.rnumel))
                if looped:
                    if placement.role == "x" or node.read_names() & pending_reductions:
                        if cg.in_loop():
                            cg.close_loop()
                            pending_reductions.clear()
                    if placement.role != "x" and not cg.in_loop():
                        cg.open_loop()
                _codegen_node(cg, node, placement, keep=node.name not in removed)
                if looped and placement.role == "reduction":
                    pending_reductions.add(node.name)
            if looped and cg.in_loop():
                cg.close_loop()
        return cg

    cg = write(persistent)
    if persistent and group.rows_per_program is None and (
            cg.row_values_across_reductions() * heuristics.next_power_of_2(int(group.rnumel))
            > heuristics.PERSISTENT_MAX_RBLOCK):
        persistent = False  # too many rows to hold in registers: stream them through L2
        cg = write(persistent)

    name = kernel_name(group, index, persistent)
    symbols = sorted(cg.size_symbols, key=lambda s: s.name)
    params = [*cg.in_ptrs.values(), *cg.out_ptrs.values()]
    call_args: list[tuple[str, Any]] = [("buffer", n) for n in cg.in_ptrs] + [("buffer", n) for n in cg.out_ptrs]
    grid = [(len(call_args), "XBLOCK")]
    params.append("xnumel")
    call_args.append(("expr", tiling.xnumel if tiling is not None else group.numel))
    if tiling is not None:
        grid.append((len(call_args), "YBLOCK"))
        params.append("ynumel")
        call_args.append(("expr", tiling.ynumel))
    if group.is_reduction:
        params.append("rnumel")
        call_args.append(("expr", group.rnumel))
    params += [s.name for s in symbols]
    values = {symbol: atom for atom, symbol in cg.opaque_sizes.items()}
    call_args += [("expr", values.get(s, s)) for s in symbols]
    pid = "dl.program_id(0).to(dl.int64)" if index_dtype == torch.int64 else "dl.program_id(0)"
    body = list(cg.helpers)
    element_size = _element_size(layouts, list(cg.in_ptrs) + list(cg.out_ptrs))
    if tiling is not None:
        # consecutive programs walk along x, then move down one row of tiles
        body += [f"pid = {pid}", "xblocks = (xnumel + XBLOCK - 1) // XBLOCK",
                 "xindex = (pid % xblocks) * XBLOCK + dl.arange(0, XBLOCK)[None, :]",
                 "yindex = (pid // xblocks) * YBLOCK + dl.arange(0, YBLOCK)[:, None]",
                 "xmask = xindex < xnumel", "ymask = yindex < ynumel"]
        constexprs = ["YBLOCK", "XBLOCK"]
        configs = (heuristics.pointwise_tiled if tiling.transposed else heuristics.pointwise_row_tiled)(
            tiling.ynumel, tiling.xnumel, element_size)
    elif not group.is_reduction:
        body += [f"xindex = {pid} * XBLOCK + dl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        constexprs = ["XBLOCK"]
        configs = heuristics.pointwise(group.numel, element_size, config.xblock, config.num_warps)
    elif persistent:
        body.append("rindex = dl.arange(0, RBLOCK)[None, :]")
        if cg.has_rmask:
            body.append("rmask = rindex < rnumel")
        row = ["xindex = xoffset + dl.arange(0, XBLOCK)[:, None]", "xmask = xindex < xnumel"]
        constexprs = ["XBLOCK", "RBLOCK"]
        if group.rows_per_program is not None:
            # mix-order: each program reduces its RSPLIT rows, then stores its column partials
            body += [f"pid = {pid}"] + cg.row_prologue
            body.append("for xoffset in range(pid * RSPLIT, pid * RSPLIT + RSPLIT, XBLOCK):")
            body += [f"    {line}" for line in row + cg.index_lines + cg.body.lines] + cg.row_epilogue
            constexprs.append("RSPLIT")
            grid[0] = (grid[0][0], "RSPLIT")
            configs = heuristics.mix_order_reduction(group.numel, int(group.rnumel), group.rows_per_program,
                                                     element_size)
        else:
            # rows in a grid-stride loop: one pass a program for a full grid, several for a
            # streamed launch (Config PROGRAMS_PER_SM), whose loads num_stages pipelines
            body.append(f"for xoffset in range({pid} * XBLOCK, xnumel, dl.num_programs(0) * XBLOCK):")
            body += [f"    {line}" for line in row + cg.index_lines + cg.body.lines]
            configs = heuristics.persistent_reduction(group.numel, int(group.rnumel), element_size)
    else:
        x_axis, r_axis = ("[:, None]", "[None, :]") if axis == 1 else ("[None, :]", "[:, None]")
        body += [f"xindex = {pid} * XBLOCK + dl.arange(0, XBLOCK){x_axis}", "xmask = xindex < xnumel",
                 f"rbase = dl.arange(0, RBLOCK){r_axis}"]
        constexprs = ["XBLOCK", "RBLOCK"]
        configs = heuristics.reduction(group.numel, group.rnumel, element_size, axis)
    if not persistent:
        body += cg.index_lines + cg.body.lines
    if any(isinstance(n.node, ScatterBuffer) and n.node.data.mode == "atomic_add" for n in group.nodes):
        configs = configs[:1]  # autotuning runs a kernel many times: each run would add again
    signature = ", ".join(params + [f"{c}: dl.constexpr" for c in constexprs])
    body = _static_sizes_inline(_resolve_eviction(_drop_unused_temporaries(body)), {
        "xnumel": tiling.xnumel if tiling is not None else group.numel,
        "ynumel": tiling.ynumel if tiling is not None else None, "rnumel": group.rnumel})
    definition = "\n".join(f"    {line}" for line in body)
    origins = f"    # FX nodes: {', '.join(group.origins())}"
    source = "\n".join(["@dl.kernel", f"def {name}({signature}):", origins, definition]) + "\n"
    # the source does not spell out its pointers' dtypes: part of the key, so that a shared
    # kernel's launcher (which assumes the dtypes of its first launch) and tuning stay right
    dtypes = ", ".join(str(layouts(n).dtype) for n in [*cg.in_ptrs, *cg.out_ptrs])
    return KernelSource(name, source, call_args, group.numel, group.rnumel, configs, tuple(grid),
                        key=f"[{dtypes}]({signature}):\n{definition}",
                        passes={name: frozenset(regions) for name, regions in cg.passes.items()})


def _positions_told_apart(index: Expr, symbol: sympy.Symbol, n: Expr) -> Expr:
    """An upper bound on how many of ``symbol``'s ``n`` positions ``index`` maps to
    different values: ``n`` where ``symbol`` appears bare or in an atom other than
    ``symbol // d`` or ``(symbol // d) % m``; else the product of those atoms' ranges
    (``xindex % 768``: 768)."""
    atoms = [a for a in index.atoms(FloorDiv, ModularIndexing) if symbol in a.free_symbols]
    if not atoms or symbol in index.xreplace({a: sympy.Integer(0) for a in atoms}).free_symbols:
        return n
    count = sympy.Integer(1)
    for atom in atoms:
        if atom.args[0] != symbol:
            return n
        count *= atom.args[2] if isinstance(atom, ModularIndexing) else CeilToInt(sympy.sympify(n) / atom.args[1])
    return count


def _resolve_eviction(lines: list[str]) -> list[str]:
    """``lines`` with each deferred eviction hint decided (`KernelCodegen._eviction_policy`):
    ``evict_last`` where a later line loads the same pointer again (at any index), ``evict_first`` on
    the last of several loads, none on a buffer's only load. Unlike TorchInductor, a row
    read once gets no hint: ``evict_first`` there made bf16 norms and softmax slower
    (docs/performance.md, sixth session)."""
    loads: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        for ptr in _LOAD_POINTER.findall(line):
            loads.setdefault(ptr, []).append(i)
    resolved = []
    for i, line in enumerate(lines):
        if _EVICT_LATER in line:
            (ptr,) = _LOAD_POINTER.findall(line)
            if loads[ptr][-1] > i:
                line = line.replace(_EVICT_LATER, _READ_AGAIN)
            elif len(loads[ptr]) > 1:
                line = line.replace(_EVICT_LATER, _READ_ONCE)
            else:
                line = line.replace(f", {_EVICT_LATER}", "")
        assert _EVICT_LATER not in line, line
        resolved.append(line)
    return resolved


_TEMPORARY = re.compile(r"\s*(tmp\d+) = ")


def _static_sizes_inline(lines: list[str], sizes: dict[str, Any]) -> list[str]:
    """``lines`` with each static size among ``sizes`` (``xnumel``...: name -> value)
    that is not a multiple of 16 written as its number. The argument stays (the
    launcher sizes the grid from it), but the compiler then knows the number's
    divisibility, which a runtime int gives it only when divisible by 16 (the launch
    specialises on that, so kernels of such sizes still share one source): masks along
    rows of 50264 elements (GPT-2's padded vocabulary) are then constant over 8 lanes,
    and 16-bit stores 16-byte vectors."""
    for name, size in sizes.items():
        if size is not None and sympy.sympify(size).is_Integer and int(size) % 16:
            pattern = re.compile(rf"\b{name}\b")
            lines = [pattern.sub(str(int(size)), line) for line in lines]
    return lines


def _drop_unused_temporaries(lines: list[str]) -> list[str]:
    """``lines`` without the ``tmpN = ...`` assignments nothing reads (the fp16/bf16
    roundings of values used unrounded, say), so the source shows what runs."""
    while True:
        used = [set(_VALUE_NAME.findall(line.split(" = ", 1)[1] if _TEMPORARY.match(line) else line)) for line in lines]
        read = set().union(*used) if used else set()
        kept = [line for line in lines if not ((m := _TEMPORARY.match(line)) and m.group(1) not in read)]
        if len(kept) == len(lines):
            return lines
        lines = kept


def _codegen_node(cg: KernelCodegen, node, placement, keep: bool) -> None:
    """Emit one node's computation and store at its placement in the kernel."""
    buffer = node.node
    loops = buffer.data
    exprs = dict(zip(placement.vars, placement.exprs))
    x_index = [exprs[v] for v in node.read_writes.x_vars]
    dtype = buffer.layout.dtype
    r_index = [exprs[v] for v in node.read_writes.r_vars]

    def compute() -> CSEVar:
        if isinstance(loops, Scan):
            results = cg.scan(loops.dtypes, loops.combine_fn, loops.inner_fn(x_index, r_index))
            return results[loops.output_index]
        if isinstance(loops, Reduction):
            value = loops.inner_fn(x_index, r_index)
            return cg.reduction(loops.src_dtype, loops.reduction_type, value)[loops.output_index]
        return loops.inner_fn(x_index)

    if isinstance(buffer, ScatterBuffer):
        value = cg.to_dtype(compute(), dtype)
        cg.scatter(buffer.name, buffer.store_index(x_index), value, loops.mode)
        return
    if placement.role == "column":  # a piece of loops.split_origin's sum, this program's rows
        # always stored (``keep``): its final stage is another kernel's group
        value = loops.split_origin.inner_fn(x_index, r_index)
        cg.column_sum(buffer.name, buffer.store_index([PROGRAM] + x_index), value, dtype)
        return
    store_index = buffer.store_index(x_index, r_index)
    if isinstance(loops, Reduction) and not cg.persistent:
        loop, outer = cg.scope, cg.scopes[-2]
        result = compute()  # defined once the loop closes: store it then
        loop.pending.append(lambda: cg.store(buffer.name, store_index, cg.to_dtype(result, dtype), keep, outer))
        return
    value = cg.to_dtype(compute(), dtype)
    if placement.role == "full" and cg.in_loop():
        cg.producers[buffer.name] = lambda: cg.to_dtype(compute(), dtype)
    cg.store(buffer.name, store_index, value, keep)
