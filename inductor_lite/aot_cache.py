"""Compiled graphs in torch's AOTAutograd cache: a warm start skips AOTAutograd too.

Our graph cache (`runtime.graph_cache`) skips lowering, scheduling and codegen, but
AOTAutograd still runs before it: tracing the joint forward-backward graph and
partitioning it take seconds for a BERT-sized training graph, most of a warm start.
TorchInductor skips them through AOTAutograd's own cache
(``torch._functorch._aot_autograd.autograd_cache``), looked up before tracing; on a
hit it rebuilds AOTAutograd's runtime wrappers (the ``autograd.Function`` of a
training graph, input mutations, aliased outputs) from stored metadata, and no graph
compiler runs. This module lets that cache store our compiled graphs too:

- each graph compiler is a ``SerializableAOTDispatchCompiler`` returning a
  `CachedOutputCode` (torch's ``OutputCode`` interface): what it stores is the wrapper
  module's source, the graph's tensor constants (a pickled ``GraphModule`` renames
  them) and the aten graph for the eager fallback of a first run that fails; on load,
  ``post_compile`` rebuilds the callable and replays the compile counters;
- the cache runs in *bundled* mode (``torch._functorch.config.bundled_autograd_cache``:
  the entry holds our output code itself; unbundled entries point into Inductor's
  FX-graph cache) with the backward compiled when the forward is
  (``force_non_lazy_backward_lowering``, so one entry holds both and the save happens
  inside our patch), both set only around our backend call (`caching`);
- AOTAutograd's key hashes the Dynamo graph, the inputs, grad and autocast state,
  functorch's and Inductor's configs and torch's sources, but nothing of the backend;
  ours goes in through ``torch.compiler.config.cache_key_tag`` (`key_tag`: the
  toolchain, with a hash of inductor_lite's sources, the config fields that change
  code, the mode, the options and the decomposition table).

A forward whose graph passes changed its outputs' strides (`fx_passes.pad_mm`) reports
them to AOTAutograd again when loaded (`backend.report_output_strides`), as Inductor's
loaded graphs do. Not cached (``BypassAOTAutogradCache`` when saving, counted by torch
under ``aot_autograd.autograd_cache_bypass``): a graph that fell back to eager, a graph
threading effect tokens (``with_effects``: loaded, AOTAutograd passes it none), a
graph whose compile guarded on a float argument's value (the key holds the float
symbolic and a hit restores no such guard: stock Inductor loads stale code there). In
CUDA-graph modes the entry keeps the graph's `CUDAGraphPlan` (decided when compiled:
plain launches and why, or the inputs read in place), and a load puts the graph under
a new `CUDAGraphRunner` as compiling did: recordings are per process.

Entries live under ``INDUCTOR_LITE_CACHE_DIR/aotautograd`` (AOTAutograd's directory
is redirected while our backend runs, `_entries_in`: a compile on another thread at
that moment would use it too), beside our graph cache and kernel binaries; torch's
switches apply as well (``TORCHINDUCTOR_FORCE_DISABLE_CACHES``, Inductor's
``fx_graph_cache``). ``INDUCTOR_LITE_DISABLE_CACHE=1`` turns this off with the rest.
The classes used are private torch APIs, the same in torch 2.11 and 2.13. A hit is
counted in ``aot_cache_hits`` (and by torch under ``aot_autograd``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pickle
from typing import Any, Callable, Iterator, Optional

import torch
from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache, BypassAOTAutogradCache
from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler
from torch._inductor.output_code import OutputCode
from torch.utils._sympy.symbol import SymT, symbol_is_type

from .codegen.wrapper import WrapperCode, load_module
from .config import config
from .counters import counters
from .fx_lowering.decompositions import decomposition_table
from .fx_lowering.graph import graph_constants
from .runtime import graph_cache
from .runtime.cudagraphs import CUDAGraphPlan, CUDAGraphRunner, apply_plan


@dataclasses.dataclass
class CachedOutputCode(OutputCode):
    """One compiled graph as AOTAutograd's cache stores it.

    Attributes:
        compiled: the callable (boxed convention) while in memory; None in an entry.
        source: the wrapper module source; None when the graph runs eagerly.
        name, mode, options: as `backend.CompiledGraph`'s.
        kernels, extern_ops: the generated kernels' names and the extern calls per op
            (the counters a load replays).
        bypass: why the graph must not be cached, or None.
        output_strides: the outputs' strides when graph passes changed them (reported
            to AOTAutograd again on a load, as when compiling), or None.
        cudagraph_plan: in a CUDA-graph mode, how the graph runs (`CUDAGraphPlan`,
            applied again on a load), else None.
        donated_args: a backward's arguments it may write over (`backend.CompiledGraph`'s).
        constants: the graph's tensor constants by wrapper name (set when saving).
        graph: the pickled aten graph, for the eager fallback (set when saving).
        gm: the aten graph while in memory.
    """

    compiled: Optional[Callable] = None
    source: Optional[str] = None
    name: str = ""
    mode: str = "default"
    options: dict = dataclasses.field(default_factory=dict)
    kernels: tuple = ()
    extern_ops: dict = dataclasses.field(default_factory=dict)
    bypass: Optional[str] = None
    output_strides: Optional[list] = None
    cudagraph_plan: Optional[CUDAGraphPlan] = None
    donated_args: tuple = ()
    constants: dict = dataclasses.field(default_factory=dict)
    graph: Optional[bytes] = None
    gm: Optional[torch.fx.GraphModule] = None

    def __post_init__(self) -> None:
        # an instance attribute: wrappers (torch._dynamo.disable) copy __dict__
        self._boxed_call = True

    def __call__(self, args: list) -> Any:
        return self.compiled(args)

    def prepare_for_serialization(self) -> None:
        """Keep only plain data (runs on the copy AOTAutograd pickles)."""
        if self.bypass is not None:
            raise BypassAOTAutogradCache(f"inductor_lite: {self.bypass}")
        self.constants = graph_constants(self.gm)
        self.graph = pickle.dumps(self.gm)
        self.gm = self.compiled = None

    def post_compile(self, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
        """After a load: rebuild the callable from the source, count what a compile counts."""
        if self.compiled is not None:
            return
        from .backend import CompiledGraph, count_kernels

        call, _ = load_module(WrapperCode(self.source, [], self.constants))
        graph = CompiledGraph(call, _PickledGraph(self.graph), self.source, self.name, self.mode,
                              self.options, self.kernels, self.extern_ops)
        graph.cudagraph_plan = self.cudagraph_plan
        graph.donated_args = self.donated_args
        self.compiled = graph
        if self.cudagraph_plan is not None:
            with config.patch(**self.options):  # options may turn on the cudagraphs log
                self.compiled = apply_plan(self.cudagraph_plan, graph, self.name)
        if self.output_strides is not None:
            from .backend import report_output_strides

            report_output_strides(self.output_strides)
        counters["graphs_compiled"] += 1
        counters["aot_cache_hits"] += 1
        count_kernels(self.kernels, self.extern_ops)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass  # no Triton kernels: binaries live in our own cache


class _PickledGraph:
    """A loaded entry's aten graph, run eagerly only if the first run of its generated
    code fails: unpickled on that first call (a ``GraphModule`` recompiles its Python
    code when unpickled, a good part of a warm start's own time were it done at load)."""

    def __init__(self, data: bytes):
        self.data = data
        self.forward: Optional[Callable] = None

    def __call__(self, *args: Any) -> Any:
        if self.forward is None:
            self.forward = pickle.loads(self.data).forward
        return self.forward(*args)


def serializable(compiler: Callable[..., CachedOutputCode]) -> SerializableAOTDispatchCompiler:
    """``compiler`` (``(gm, example_inputs) -> CachedOutputCode``) as AOTAutograd's
    cache needs a graph compiler to be."""
    return SerializableAOTDispatchCompiler(CachedOutputCode, compiler)


def key_tag(mode: str, options: dict) -> str:
    """What our generated code depends on beyond AOTAutograd's own key (call with the
    options applied to `config`)."""
    parts = [graph_cache.toolchain(), {name: getattr(config, name) for name in graph_cache.KEY_CONFIG_FIELDS}, mode, options,
             sorted(str(op) for op in decomposition_table())]
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()
    return f"inductor_lite-{digest}"


def enabled() -> bool:
    """Whether compiled graphs go through AOTAutograd's cache: not when
    ``config.disable_cache`` is set or torch's switches turn the cache off
    (``torch._functorch.config.enable_autograd_cache``,
    ``torch.compiler.config.force_disable_caches``). Only then are the compilers
    `serializable`: torch 2.11 saves a serializable compiler's graph in the unbundled
    form, which ours cannot take, whenever the bundled flag is off."""
    return (not config.disable_cache and torch._functorch.config.enable_autograd_cache
            and not torch.compiler.config.force_disable_caches)


@contextlib.contextmanager
def caching(mode: str, options: dict) -> Iterator[None]:
    """Turn on AOTAutograd's bundled cache for our graphs while the backend runs, when
    `enabled` (call with the options applied to `config`); a tag the user set
    (``TORCH_COMPILE_CACHE_KEY_TAG``) is kept in ours."""
    if not enabled():
        yield
        return
    user_tag = torch.compiler.config.cache_key_tag
    tag = key_tag(mode, options) + (f"|{user_tag}" if user_tag else "")
    with torch._functorch.config.patch(bundled_autograd_cache=True, force_non_lazy_backward_lowering=True), \
            torch.compiler.config.patch(cache_key_tag=tag), _entries_in(os.path.join(config.cache_dir, "aotautograd")):
        yield


@contextlib.contextmanager
def _entries_in(directory: str) -> Iterator[None]:
    """AOTAutograd's cache reads and writes entries under ``directory`` (its lookup and
    its save both happen inside our backend call)."""
    original = AOTAutogradCache.__dict__["_get_tmp_dir"]
    AOTAutogradCache._get_tmp_dir = classmethod(lambda cls: directory)
    try:
        yield
    finally:
        AOTAutogradCache._get_tmp_dir = original


def _guards_a_float() -> bool:
    """Whether the shape environment of the graph being compiled guards on the value
    of a float argument (AOTAutograd's ``tensorify_python_scalars`` specialises a
    float it cannot turn into a tensor with ``guard_scalar``)."""
    shape_env = getattr(torch._guards.detect_fake_mode(), "shape_env", None)
    if shape_env is None:
        return False
    return any(symbol_is_type(s, SymT.FLOAT) for guard in shape_env.guards for s in guard.expr.free_symbols)


def output_code(compiled: Callable, gm: torch.fx.GraphModule) -> CachedOutputCode:
    """A compiled graph as a `CachedOutputCode` (``compiled``: a `backend.CompiledGraph`,
    possibly under a `CUDAGraphRunner`, or another callable when the graph runs eagerly,
    which is never cached)."""
    graph = compiled.compiled if isinstance(compiled, CUDAGraphRunner) else compiled
    source = getattr(graph, "source", None)
    bypass = None if source is not None else "the graph runs eagerly"
    if _guards_a_float():
        # AOTAutograd's key holds the graph with its float arguments symbolic, and a hit
        # restores no guard on their values: code specialised to one value (a float
        # that could not become a tensor, as torch.full's fill value) would be loaded
        # for another
        bypass = "the compile guarded on a float argument's value"
    if any(node.target is torch.ops.higher_order.with_effects for node in gm.graph.nodes):
        # a loaded graph's runtime wrappers pass it no effect token (they expect Inductor's, which unlifts them)
        bypass = "the graph threads effect tokens (with_effects)"
    return CachedOutputCode(compiled=compiled, source=source, name=getattr(graph, "name", ""),
                            mode=getattr(graph, "mode", "default"), options=getattr(graph, "options", {}),
                            kernels=tuple(getattr(graph, "kernels", ())),
                            extern_ops=dict(getattr(graph, "extern_ops", {})),
                            bypass=bypass,
                            output_strides=getattr(graph, "output_strides", None),
                            cudagraph_plan=getattr(graph, "cudagraph_plan", None),
                            donated_args=tuple(getattr(graph, "donated_args", ())), gm=gm)

