"""aten FX graph -> loop-level IR: `lowerings` (the op registry and shared helpers),
one module of lowerings per op family (`pointwise`, `pointwise_math`, `constructors`,
`views`, `data_movement`, `indexing_ops`, `indexed_writes`, `reductions`, `scans`, `pooling`),
`decompositions`, `graph` (the FX Interpreter)."""

# Importing the families registers their lowerings in `lowerings.LOWERINGS`.
from . import (  # noqa: F401
    constructors, data_movement, indexed_writes, indexing_ops, pointwise, pointwise_math, pooling, reductions, scans,
    views,
)
