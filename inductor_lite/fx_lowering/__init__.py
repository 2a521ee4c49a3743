"""aten FX graph -> loop-level IR: `ir` (the IR), `ops` (the inner_fn vocabulary),
`lowerings` (the op registry), `decompositions`, `graph` (the FX Interpreter)."""
