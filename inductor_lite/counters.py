"""Process-wide counters that make coverage and caching measurable.

``counters`` is a `collections.Counter`; the keys every stage maintains:

- ``graphs_compiled``: FX graphs (forward, backward or inference) the backend lowered;
- ``graphs_fallback``: graphs that failed to lower and run eagerly instead;
- ``kernels_generated``: DSL kernel launch sites in compiled graphs (emitted by codegen,
  or loaded with a graph from the graph cache); ``kernels_defined``: the distinct
  kernels among them (a graph defines a kernel once, however many groups run it);
- ``kernels_compiled``: binaries built through LLVM (disk-cache misses);
- ``cache_hits``: binaries loaded from the on-disk cache;
- ``dsl_kernels_parsed``: DSL kernels whose source was parsed (`dsl.kernel`; on first need,
  so a warm start parses only the kernels it builds IR for);
- ``extern_calls``: aten fallback calls placed in compiled graphs;
- ``extern.<op>``: the same, per aten overload, e.g. ``extern.aten.mm.default``;
- ``graph_cache_hits``, ``graph_cache_misses``: compiled graphs loaded from the on-disk
  graph cache (`runtime.graph_cache`), or not found there and compiled;
- ``graph_cache_corrupt``: graph cache entries that failed their checks (deleted,
  counted as misses, rebuilt); ``graph_cache_bypasses``: graphs with no stable key, or
  whose lowering added a shape guard, compiled without the cache;
- ``autotune_runs``: tuning keys decided by timing (not from the disk cache).
- ``pass.<name>``: rewrites made by each graph pass (`fx_passes`), e.g.
  ``pass.fuse_attention``;
- ``cudagraph_recordings``, ``cudagraph_replays``: CUDA graphs captured, and calls
  answered by a replay (``mode="reduce-overhead"``, `runtime.cudagraphs`);
- ``cudagraph_skips``: graphs that run with plain launches instead, each with a logged
  reason (``cudagraphs`` artifact); ``cudagraph_busy``: single calls that did, because
  the outputs of every recording for their inputs were still held.
"""

from __future__ import annotations

import collections

counters: collections.Counter = collections.Counter()


def reset() -> None:
    """Zero every counter (tests and benchmarks call this between runs)."""
    counters.clear()
