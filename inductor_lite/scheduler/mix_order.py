"""Mix-order reductions: which split column sums a row kernel computes in its pass.

A LayerNorm backward reduces the same rows two ways: along each row (the input
gradient's sums) and across the rows (the weight and bias gradients: column sums,
which the lowering splits into a few long pieces, `fx_lowering.reductions.split_factor`).
One kernel reading the rows once can do both (TorchInductor's ``MixOrderReduction``)
when each of its programs reduces a few rows and sums them for the columns: the column
sum's pieces must be those rows. `plan` finds the split sums that a row reduction over
the same rows reads the same way, and the scheduler splits them again into pieces of
`MIX_ORDER_ROWS` rows (`ir.nodes.resplit_reduction`); fusion then puts their column
form (`SchedulerNode.column`) into the row kernel (`fusion`). A column sum without
such a partner keeps the lowering's pieces: fewer partials to write and read back.
Every candidate shape (`is_candidate_shape`: 4096 rows and up) is one the lowering
splits, so only split sums are planned.
"""

from __future__ import annotations

from typing import Optional

import sympy

from ..config import config
from ..ir.indexing import product
from ..ir.nodes import Reduction
from .dependencies import FLAT, RFLAT, column_read_writes
from .tiling import stride_hint

MIX_ORDER_ROWS = 32
"""Rows a piece, and a program of the fused kernel: 1024 programs over 32768 rows. Each
piece writes 4 bytes a column for 32 rows read (1/32 of an fp32 input's bytes). On an
H200, LayerNorm backward over 8192x4096 and 32768x1024 ran 1-8% faster with 32 than
with 16, and 128 left too few programs over 8192 rows (see docs/performance.md)."""
MIX_ORDER_MIN_ELEMENTS = 5 * 2 ** 20
"""Candidates read at least this many elements: below it the rows stay in L2 between
two kernels, and one pass gains little (TorchInductor's threshold)."""
MIX_ORDER_MIN_ROWS = 4096
MIX_ORDER_MAX_COLS = 16384
"""Candidates have at least `MIX_ORDER_MIN_ROWS` rows, twice as many rows as columns,
and at most this many columns (a row the fused kernel keeps in registers);
TorchInductor's limits too."""


def is_candidate_shape(rows: int, cols: int) -> bool:
    """Whether a column sum of ``rows`` x ``cols`` is worth a mix-order kernel."""
    return rows * cols >= MIX_ORDER_MIN_ELEMENTS and rows >= max(MIX_ORDER_MIN_ROWS, 2 * cols) \
        and cols <= MIX_ORDER_MAX_COLS


def first_read_across_rows(read_writes, group: tuple, written: set[str]) -> Optional[str]:
    """The first buffer (not in ``written``) that a node with these `ReadWrites`,
    placed in a kernel of ``group`` (rows, row length), reads other than along a row
    (an ``rindex`` stride other than 0 or 1), or None: a mix-order kernel keeps whole
    rows in registers, so its loads must run along them."""
    placement = read_writes.placement(*group)
    for dep in read_writes.reads:
        if dep.name not in written and stride_hint(dep.kernel_index(placement, *group), RFLAT, (FLAT,)) not in (0, 1):
            return dep.name
    return None


def _depends_on(node, name: str, writers: dict) -> bool:
    """Whether ``node`` reads buffer ``name``, directly or through other nodes."""
    seen, stack = set(), [node]
    while stack:
        for read in stack.pop().read_names():
            if read == name:
                return True
            if read not in seen and read in writers:
                seen.add(read)
                stack.append(writers[read])
    return False


def plan(nodes: list) -> list[tuple]:
    """``(partial, final)`` scheduler nodes of each split sum to split into pieces of
    rows: a first stage whose `ir.nodes.SplitOrigin` sums ``rows x cols`` of a candidate
    shape (`is_candidate_shape`), whose only reader is its final stage, and one of
    whose reads a row reduction (a reduction node of group ``(rows, cols)``) makes at
    the same element, where both read every input along its rows and the row
    reduction does not depend on the final stage (one kernel could not compute both).
    Empty when ``config.mix_order_reduction`` is off."""
    if not config.mix_order_reduction:
        return []
    readers: dict[str, list] = {}
    for n in nodes:
        for name in n.read_names():
            readers.setdefault(name, []).append(n)
    writers = {n.name: n for n in nodes}
    out = []
    for partial in nodes:
        data = getattr(partial.node, "data", None)
        origin = data.split_origin if isinstance(data, Reduction) else None
        if origin is None or origin.mix_order or data.reduction_type != "sum":
            continue
        rows, cols = sympy.sympify(product(origin.reduction_ranges)), sympy.sympify(product(origin.ranges))
        users = readers.get(partial.name, [])
        if not (rows.is_number and cols.is_number and is_candidate_shape(int(rows), int(cols))) or len(users) != 1:
            continue
        final, group = users[0], (rows, cols)
        if not isinstance(final.node.data, Reduction) or final.node.data.reduction_ranges != [data.ranges[0]]:
            continue
        column = column_read_writes(partial.node)
        if first_read_across_rows(column, group, set()) is not None:
            continue
        placement = column.placement(*group)
        accesses = {(d.name, d.kernel_index(placement, *group)) for d in column.reads}
        partners = {id(n): n for d in column.reads for n in readers.get(d.name, [])
                    if n is not partial and getattr(n, "is_reduction", False) and n.group == group}
        for row in partners.values():
            row_placement = row.read_writes.placement(*group)
            if (any((d.name, d.kernel_index(row_placement, *group)) in accesses for d in row.read_writes.reads)
                    and first_read_across_rows(row.read_writes, group, set()) is None
                    and not _depends_on(row, final.name, writers)):
                out.append((partial, final))
                break
    return out
