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
from ..ir.nodes import Reduction
from .dependencies import column_read_writes

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


def _static(n) -> Optional[int]:
    n = sympy.sympify(n)
    return int(n) if n.is_number else None


def plan(nodes: list) -> list[tuple]:
    """``(partial, final)`` scheduler nodes of each split sum to split into row pieces:
    a first stage whose `ir.nodes.SplitOrigin` sums ``rows x cols`` of a candidate
    shape (`is_candidate_shape`), whose only reader is its final stage, and one of
    whose reads a reduction node of group ``(rows, cols)`` makes at the same element
    of the same row (a row reduction over the same rows). None when
    ``config.mix_order_reduction`` is off."""
    if not config.mix_order_reduction:
        return []
    readers: dict[str, list] = {}
    for n in nodes:
        for name in n.read_names():
            readers.setdefault(name, []).append(n)
    out = []
    for partial in nodes:
        data = getattr(partial.node, "data", None)
        origin = data.split_origin if isinstance(data, Reduction) else None
        if origin is None or origin.mix_order or data.reduction_type != "sum":
            continue
        rows, cols = _static(sympy.Mul(*origin.reduction_ranges)), _static(sympy.Mul(*origin.ranges))
        users = readers.get(partial.name, [])
        if rows is None or cols is None or not is_candidate_shape(rows, cols) or len(users) != 1:
            continue
        final = users[0]
        if not isinstance(final.node.data, Reduction) or final.node.data.reduction_ranges != [data.ranges[0]]:
            continue
        column = column_read_writes(partial.node)
        placement = column.placement(rows, cols)
        accesses = {(d.name, d.kernel_index(placement, rows, cols)) for d in column.reads}
        partners = {id(n): n for d in column.reads for n in readers.get(d.name, [])
                    if n is not partial and getattr(n, "is_reduction", False) and n.group == (rows, cols)}
        for row in partners.values():
            row_placement = row.read_writes.placement(rows, cols)
            if any((d.name, d.kernel_index(row_placement, rows, cols)) in accesses for d in row.read_writes.reads):
                out.append((partial, final))
                break
    return out
