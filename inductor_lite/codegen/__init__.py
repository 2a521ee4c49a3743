"""Scheduled graph -> Python source: `kernel` (one fused group -> one DSL kernel),
`wrapper` (the graph -> a module with ``call(args)``), `printer` (sympy -> source)."""
