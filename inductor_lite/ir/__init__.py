"""The loop-level IR every stage shares: `nodes` (Pointwise, Reduction, buffers,
views, ExternKernel), the `ops` vocabulary inner functions compute with, and sympy
`indexing` (index variables, simplification, size arithmetic)."""
