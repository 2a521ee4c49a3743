"""The torch.compile backend: ``torch.compile(model, backend="inductor_lite")``.

`inductor_lite_backend` hands the Dynamo graph to AOTAutograd (our decomposition table,
min-cut rematerialisation partitioner) and compiles each resulting aten graph
(forward, backward or inference) with `compile_graph`:

    aten graph -> graph passes (`fx_passes`) -> GraphLowering (IR) -> Scheduler (fusion)
    -> wrapper + DSL kernels
    -> exec'd module whose ``call(args)`` runs the graph.

A graph compiled before, in this process or another, is loaded instead: from
AOTAutograd's cache (`aot_cache`), which skips AOTAutograd too, or else from our graph
cache (`runtime.graph_cache`); both live under ``INDUCTOR_LITE_CACHE_DIR``. Either way
the wrapper source is exec'd without lowering, scheduling or codegen.

Compiled graphs use the boxed calling convention (a list of inputs the callee
clears). A graph that fails to compile - or whose first run fails - runs eagerly
instead when ``config.fallback_on_error`` is set (the default): the failure is
counted in ``graphs_fallback``, logged under the ``fallbacks`` artifact and warned
about once through the ``inductor_lite`` logger. A configuration error (`ConfigError`,
checked before each compile) always raises: falling back would hide it.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import logging
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.exc import RestartAnalysis
from torch._functorch.aot_autograd import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.multiprocessing.reductions import StorageWeakRef

from . import aot_cache
from .codegen.wrapper import WrapperCode, generate_wrapper, load_module
from .config import ConfigError, check_option, config
from .counters import counters
from .debug import dump_graph
from .fx_lowering.decompositions import decomposition_table
from .fx_lowering.graph import DONATED, GraphLowering, graph_constants
from .fx_passes import run_joint_passes, run_passes
from .fx_passes.common import GRAPH_KIND, USER_OUTPUTS, refresh_downstream, updated_placeholders
from .logs import log_artifact
from .runtime import compile_pool
from .runtime.cudagraphs import apply_plan, plan_cudagraphs, uses_cudagraphs
from .runtime.graph_cache import CachedGraph, default_graph_cache, shape_guard_count
from .scheduler.scheduler import Scheduler

log = logging.getLogger("inductor_lite")


def _keep_linalg_error_checks() -> None:
    """Keeps ``aten._linalg_check_errors`` out of dead-code elimination. torch 2.11 neither
    registers it as effectful nor keeps it otherwise, so AOTAutograd dropped the check
    that makes ``linalg.inv``, ``solve``, ``cholesky`` & co. raise on a singular input
    (pytorch/pytorch#182965; torch 2.13 wraps it in ``with_effects``). Kept, it stays a
    plain call and lowers to an extern."""
    torch.fx.node.has_side_effect(torch.ops.aten._linalg_check_errors.default)


_keep_linalg_error_checks()


MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""torch.compile modes accepted; the mode is recorded on each compiled graph.
``reduce-overhead`` and ``max-autotune`` run compiled graphs under CUDA graphs
(`runtime.cudagraphs`); otherwise the modes run the same pipeline."""

RUNTIME_OPTIONS = ("interpret", "disable_cache", "cache_dir", "logs", "fallback_on_error")
"""Config fields that matter when a compiled graph runs (kernels are built at first
launch), so options given for them are re-applied around a call whenever the config
differs from them."""

_graph_ids = itertools.count()
_warned = False


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warning("%s (further fallbacks are logged under INDUCTOR_LITE_LOGS=fallbacks)", message)


def _record_fallback(what: str, error: BaseException) -> None:
    counters["graphs_fallback"] += 1
    reason = f"{what} runs eagerly: {type(error).__name__}: {error}"
    log_artifact("fallbacks", reason)
    _warn_once(f"inductor_lite: {reason}")


def check_options(mode: Optional[str], options: Optional[dict]) -> tuple[str, dict[str, Any]]:
    """Validate ``torch.compile``'s ``mode`` and ``options``.

    Returns ``(mode, options)`` with ``mode`` defaulted to ``'default'``.

    Raises:
        ValueError: an unknown mode.
        KeyError: an option that is not a `config` field (the message lists them).
        TypeError: an option value of the wrong type.
        ConfigError: an option value out of range (e.g. ``xblock`` not a power of two).
    """
    mode = mode or "default"
    if mode not in MODES:
        raise ValueError(f"inductor_lite: unknown mode {mode!r}; known modes: {', '.join(MODES)}")
    options = dict(options or {})
    known = {f.name: f for f in dataclasses.fields(config)}
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise KeyError(f"inductor_lite: unknown option(s) {unknown}; known options: {sorted(known)}")
    for name, value in options.items():
        expected = type(getattr(config, name))
        if expected is int and isinstance(value, bool) or not isinstance(value, expected):
            raise TypeError(f"inductor_lite: option {name!r} must be a {expected.__name__}, "
                            f"got {type(value).__name__} {value!r}")
        check_option(name, value)
    return mode, options


class CompiledGraph:
    """A compiled aten graph, called with the boxed convention: ``compiled(args)``.

    Attributes:
        call: the generated ``call(args)``.
        source: the generated wrapper module source.
        kernels, extern_ops: its kernels' names and its extern calls per aten op.
        output_strides: its outputs' strides when graph passes changed them (reported
            to AOTAutograd, `report_output_strides`), else None.
        mode, options: how it was compiled; the `RUNTIME_OPTIONS` among ``options``
            are re-applied around a call when `config` differs from them.
        cudagraph_plan: in a CUDA-graph mode, how it runs (`runtime.cudagraphs`
            ``CUDAGraphPlan``), else None.
        donated_args: a backward's argument positions whose storage the code may write
            over (AOTAutograd's donated saved tensors, `_mark_donated_inputs`).
            When the autograd graph is retained (``backward(retain_graph=True)``) they
            are copied first, layout kept, so a later backward reads the saved values
            again.

    After the first call, a call adds one flag check to the generated ``call`` (and,
    when runtime options were given, a comparison of them with `config`).
    """

    def __init__(self, call: Callable, eager: Callable, source: str, name: str, mode: str, options: dict,
                 kernels: tuple = (), extern_ops: Optional[dict] = None):
        # an instance attribute: wrappers (torch._dynamo.disable) copy __dict__, not class attributes
        self._boxed_call = True
        self.call = call
        self.kernels = kernels
        self.extern_ops = extern_ops or {}
        self.output_strides: Optional[list] = None
        self.cudagraph_plan = None
        self.eager = eager
        self.source = source
        self.name = name
        self.mode = mode
        self.options = options
        self.runtime_options = {k: v for k, v in options.items() if k in RUNTIME_OPTIONS}
        self.donated_args: tuple[int, ...] = ()
        self._verified = False

    def __call__(self, args: list) -> Any:
        if self.donated_args and _keep_graph():
            for i in self.donated_args:
                args[i] = _copy_keeping_layout(args[i])
        # config.patch costs ~3 us; skip it when the config already holds the options
        if self.runtime_options and any(getattr(config, k) != v for k, v in self.runtime_options.items()):
            with config.patch(**self.runtime_options):
                return self._run(args)
        if self._verified:
            return self.call(args)
        return self._run(args)

    def _run(self, args: list) -> Any:
        if self._verified or not config.fallback_on_error:
            result = self.call(args)
            self._verified = True
            return result
        saved = list(args)
        try:
            result = self.call(args)
        except Exception as e:
            _record_fallback(f"graph {self.name} (its first run failed)", e)
            self.call = make_boxed_func(self.eager)
            self._verified = True
            return self.call(saved)
        self._verified = True
        return result


def compile_graph(gm: torch.fx.GraphModule, kind: str, mode: str = "default",
                  options: Optional[dict] = None) -> Callable:
    """Compile one aten graph (``kind``: ``fw``, ``bw`` or ``inference``) to a boxed callable.

    Raises:
        ConfigError: a bad knob (see `Config.validate`).
        Exception: whatever a stage raised, only when ``config.fallback_on_error`` is off.
    """
    options = options or {}
    graph_id = next(_graph_ids)
    name = f"graph_{graph_id}_{kind}"
    with config.patch(**options):
        config.validate()
        strides_before = _output_strides(gm)
        gm.meta[GRAPH_KIND] = kind
        try:
            run_passes(gm, name)
            compiled = _compile(gm, graph_id, kind, name, mode, options)
        except ConfigError:
            raise
        except Exception as e:
            if not config.fallback_on_error:
                raise
            _record_fallback(f"graph {name}", e)
            compiled = None
    strides_after = _output_strides(gm)
    restrided = strides_after != strides_before
    if restrided:
        report_output_strides(strides_after)
    if compiled is None:
        return make_boxed_func(gm.forward)
    compiled.output_strides = strides_after if restrided else None
    counters["graphs_compiled"] += 1
    if uses_cudagraphs(mode):
        compiled.cudagraph_plan = plan_cudagraphs(gm, kind)  # kept by AOTAutograd's cache (`aot_cache`)
        with config.patch(**options):  # options may turn on the cudagraphs log
            return apply_plan(compiled.cudagraph_plan, compiled, name)
    return compiled


def _output_strides(gm: torch.fx.GraphModule) -> list[Optional[tuple[int, ...]]]:
    """The strides of ``gm``'s outputs from their fake values: None where an output is
    not a tensor or has symbolic strides."""
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    out = []
    for value in pytree.tree_leaves(output.args[0]):
        meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        stride = meta.stride() if isinstance(meta, torch.Tensor) else None
        out.append(tuple(stride) if stride is not None and all(isinstance(s, int) for s in stride) else None)
    return out


def report_output_strides(strides: list[Optional[tuple[int, ...]]]) -> None:
    """Tell AOTAutograd the strides of a graph's outputs that the graph passes changed
    (`fx_passes.pad_mm` returns padded rows), as TorchInductor does
    (``TracingContext.output_strides``): AOTAutograd then compiles the backward graph
    for the saved tensors' real strides, and gives Dynamo the user outputs' real
    strides. Called only when a pass changed some output's strides."""
    context = torch._guards.TracingContext.try_get()
    if context is not None and context.output_strides is not None:
        context.output_strides[:] = strides


def _compile(gm: torch.fx.GraphModule, graph_id: int, kind: str, name: str, mode: str,
             options: dict) -> CompiledGraph:
    cache = default_graph_cache()
    # a debug dump wants every stage, so it lowers the graph even when an entry exists
    key = None if config.debug_dir else cache.key(gm, name)
    loaded = cache.load(key, name, functools.partial(_load_entry, gm=gm)) if key else None
    if loaded is not None:
        entry, call = loaded
        log_artifact("output_code", entry.source)
        if entry.extern_ops:  # lowering logs each extern with its reason; a loaded graph was not lowered
            log_artifact("fallbacks", f"graph {name} (from the graph cache): extern calls {entry.extern_ops}")
    else:
        guards = shape_guard_count()
        entry, call = _lower(gm, graph_id, kind, name)
        if key and shape_guard_count() != guards:
            cache.bypass(name, "lowering added a shape guard, which a loaded graph would not add")
        elif key:
            cache.put(key, entry)
    count_kernels(entry.kernels, entry.extern_ops)
    return CompiledGraph(call, gm.forward, entry.source, name, mode, options, entry.kernels, entry.extern_ops)


def count_kernels(kernels: tuple, extern_ops: dict) -> None:
    """Count a graph's generated kernels and its extern calls per aten op (compiled,
    loaded from our graph cache, or from AOTAutograd's)."""
    counters["kernels_generated"] += len(kernels)
    counters["kernels_defined"] += len(set(kernels))
    for op, n in extern_ops.items():
        counters["extern_calls"] += n
        counters[f"extern.{op}"] += n


def _load_entry(entry: CachedGraph, gm: torch.fx.GraphModule) -> tuple[CachedGraph, Callable]:
    """A graph cache entry of ``gm`` and its loaded ``call`` (``gm`` holds the constants)."""
    call, _ = load_module(WrapperCode(entry.source, [], graph_constants(gm)))
    return entry, call


def _lower(gm: torch.fx.GraphModule, graph_id: int, kind: str, name: str) -> tuple[CachedGraph, Callable]:
    """Lower, schedule and generate ``gm``; returns what the graph cache stores and ``call``."""
    graph = GraphLowering(gm)
    graph.run()
    scheduler = Scheduler(graph)
    code = generate_wrapper(graph, scheduler, name)
    kernel_dir = None
    if config.debug_dir:
        kernel_dir = dump_graph(
            config.debug_dir, graph_id, kind,
            fx_graph=gm.print_readable(print_output=False),
            ir_pre_fusion=scheduler.pre_fusion_text(),
            ir_post_fusion=scheduler.post_fusion_text(),
            memory_plan=code.memory_plan.describe(),
            output_code=code.source,
        )
    log_artifact("output_code", code.source)
    call, namespace = load_module(code, kernel_dir)
    if code.prebuild and not config.interpret:
        _prebuild(namespace, code.prebuild)
    return CachedGraph(code.source, tuple(code.kernel_calls), dict(graph.extern_counts())), call


def _prebuild(namespace: dict, plan: list) -> None:
    """Build the binaries of the graph's first call in parallel now (`compile_pool`).
    Only a speed-up: if planning fails, each launch builds what it needs, and reports
    any real error then."""
    try:
        compile_pool.prebuild_graph(namespace, plan)
    except Exception as error:  # noqa: BLE001 - see above
        log_artifact("cache", f"prebuilding binaries failed ({type(error).__name__}: {error}); "
                              "each kernel builds on its first launch")


def inductor_lite_backend(gm: torch.fx.GraphModule, example_inputs: list, mode: Optional[str] = None,
                          options: Optional[dict] = None, **kwargs: Any) -> Callable:
    """The ``torch.compile`` backend (registered as ``"inductor_lite"``).

    Args:
        gm: the Dynamo FX graph. example_inputs: its (fake) example inputs.
        mode: a torch.compile mode (see `MODES`).
        options: ``{config field: value}`` applied while compiling (and, for
            `RUNTIME_OPTIONS`, while running).

    Raises:
        ValueError, KeyError, TypeError: a bad mode, option name or value, or an
            unexpected keyword argument (TypeError).
        ConfigError: a bad knob, from the environment or ``options`` (see `Config.validate`).
    """
    if kwargs:
        raise TypeError(f"inductor_lite: unexpected backend argument(s) {sorted(kwargs)}; "
                        "expected mode= and options=")
    mode, options = check_options(mode, options)
    with config.patch(**options):
        config.validate()
        cached = aot_cache.enabled()
        compilers = {
            kind: functools.partial(_aot_compiler, kind=kind, mode=mode, options=options, cached=cached)
            for kind in ("fw", "bw", "inference")
        }
        if cached:
            compilers = {kind: aot_cache.serializable(compiler) for kind, compiler in compilers.items()}
        backend = aot_autograd(
            fw_compiler=compilers["fw"],
            bw_compiler=compilers["bw"],
            inference_compiler=compilers["inference"],
            decompositions=decomposition_table(),
            partition_fn=_partition,
            # the graph updates its mutated inputs itself, in place (a copy_ into the input,
            # the value computed in that kernel where it is safe), instead of AOTAutograd
            # copying after the call: inference graphs, and forward graphs for inputs that
            # need no gradient (a batch norm's running statistics); under CUDA graphs a
            # copied-in input would be updated in its static copy only, so there
            # AOTAutograd keeps doing it
            keep_inference_input_mutations=not uses_cudagraphs(mode),
        )
        try:
            with aot_cache.caching(mode, options):
                return backend(gm, example_inputs)
        except (RestartAnalysis, ConfigError):
            raise
        except Exception as e:
            if not config.fallback_on_error:
                raise
            _record_fallback("a Dynamo graph (AOTAutograd failed)", e)
            return gm.forward


def _partition(joint: torch.fx.GraphModule, joint_inputs: Any, **kwargs: Any):
    """AOTAutograd's min-cut rematerialisation partitioner (as TorchInductor uses), after
    the joint-graph passes (`fx_passes.run_joint_passes`), which change what it saves."""
    run_joint_passes(joint)
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def _aot_compiler(gm: torch.fx.GraphModule, example_inputs: list, *, kind: str, mode: str,
                  options: dict, cached: bool) -> Callable:
    """AOTAutograd's graph compiler of ``kind``; ``cached``: return what its cache
    stores (`aot_cache`)."""
    donated = _mark_donated_inputs(gm) if kind == "bw" and not uses_cudagraphs(mode) else ()
    if kind != "bw":
        _mark_user_outputs(gm)
    if kind == "fw":
        _save_old_values_of_updated_inputs(gm)
    _adopt_input_strides(gm, example_inputs)
    compiled = compile_graph(gm, kind, mode, options)
    if isinstance(compiled, CompiledGraph):
        compiled.donated_args = donated
    return aot_cache.output_code(compiled, gm) if cached else compiled


def _mark_user_outputs(gm: torch.fx.GraphModule) -> None:
    """Record which of a forward or inference graph's outputs the user sees
    (`fx_passes.common.USER_OUTPUTS`). AOTAutograd returns the new values of mutated
    inputs first, then the user's outputs and the bases of outputs that are views of
    one another, then (forward graphs) what the backward needs (``fw_metadata``'s
    counts; TorchInductor reads the same). With effect tokens among the outputs the
    positions AOTAutograd reads strides at disagree with one another (Inductor unlifts
    the tokens), so no output may change layout: None. Without metadata (a graph not
    from AOTAutograd) the key is left out: every output counts as seen."""
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    if meta is None:
        return
    if meta.tokens:
        gm.meta[USER_OUTPUTS] = None
        return
    start = meta.num_mutated_inp_runtime_indices
    gm.meta[USER_OUTPUTS] = range(start, start + meta.num_outputs + meta.num_intermediate_bases)


def _save_old_values_of_updated_inputs(gm: torch.fx.GraphModule) -> None:
    """Give the backward a copy of the old value of each input the forward updates in
    place and saves for it. AOTAutograd keeps the update of an input that needs no
    gradient (a buffer: ``buf.mul_(2)``) in the forward graph, and the partitioner may
    save the input itself to recompute from (``sin(buf + 1)``); saved as is, the
    backward would read the new value. The copy is taken before the update runs."""
    updated = updated_placeholders(gm.graph)
    output = gm.graph.output_node()
    values = list(output.args[0])
    user = gm.meta.get(USER_OUTPUTS)
    saved = [i for i, v in enumerate(values) if v in updated and (user is None or i not in user)]
    if not saved:
        return
    copies = {}
    last_placeholder = list(gm.graph.find_nodes(op="placeholder"))[-1]
    for i in saved:
        node = values[i]
        if node not in copies:
            with gm.graph.inserting_after(last_placeholder):
                copies[node] = gm.graph.call_function(torch.ops.aten.clone.default, (node,))
            copies[node].meta["val"] = node.meta["val"].clone()
        values[i] = copies[node]
    output.args = (tuple(values),) + tuple(output.args[1:])
    gm.recompile()


def _mark_donated_inputs(gm: torch.fx.GraphModule) -> tuple[int, ...]:
    """Flag the backward's inputs whose storage it may reuse (`fx_lowering.graph.DONATED`)
    and return their positions: the saved tensors AOTAutograd donates
    (``fw_metadata.bw_donated_idxs``: no forward input or output, user output or
    gradient aliases them, so nothing reads them after the backward; TorchInductor's
    ``DonatedBuffer``), except those sharing a storage with another input, which may
    still be read when one name dies. Under CUDA graphs the saved tensors live in the
    forward graph's static memory: none are flagged (the caller does not call this)."""
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    donated = getattr(meta, "bw_donated_idxs", None)
    if not donated or meta.tokens or meta.num_backward_tokens:
        return ()  # effect tokens shift the indices off the backward's placeholders (Inductor unlifts them)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    saved = len(placeholders) - len(meta.traced_tangents)  # saved values come first, then the gradients
    storages = collections.Counter(_storage(n.meta.get("val")) for n in placeholders)
    flagged = []
    for i in donated:
        if i < saved:  # a saved tensor, never a gradient the caller holds
            storage = _storage(placeholders[i].meta.get("val"))
            if storage is not None and storages[storage] == 1:
                placeholders[i].meta[DONATED] = True
                flagged.append(i)
    if _keep_graph is None:
        return ()  # torch keeps its own check
    # AOTAutograd refuses a retained graph (``backward(retain_graph=True)``) whose
    # compiled backward has donated buffers: its runtime check reads this list, and it
    # empties the list only when it compiles the backward lazily, on a first backward
    # that already retains the graph. Our AOTAutograd cache compiles the backward with
    # the forward (`aot_cache`), so the check moves into `CompiledGraph`, which copies
    # the donated arguments when the graph is retained. Emptied in place: the list is
    # shared by AOTAutograd's forward and inner metadata (a cache entry stores it empty).
    donated.clear()
    return tuple(flagged)


def _copy_keeping_layout(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its sizes, strides and storage offset: generated code reads
    an argument with the layout it was compiled for (a strided slice, an expanded or
    transposed view), so its storage is copied whole."""
    return t.new_empty(0).set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())


_keep_graph = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
"""Whether the running backward retains the autograd graph (``retain_graph=True``)."""


def _storage(value: Any) -> Optional[StorageWeakRef]:
    """The storage of a (fake) dense tensor, None for anything else."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    return StorageWeakRef(value.untyped_storage())


def _adopt_input_strides(gm: torch.fx.GraphModule, example_inputs: list) -> None:
    """Give ``gm``'s placeholders the strides of ``example_inputs`` where they differ:
    AOTAutograd restrides a backward graph's saved tensors to the strides the forward
    reported (`report_output_strides`) in the example inputs only, and the lowering
    reads the placeholders' fake values. Downstream fake values are recomputed."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, example in zip(placeholders, example_inputs):
        meta = node.meta.get("val")
        if (isinstance(meta, torch.Tensor) and isinstance(example, torch.Tensor)
                and all(isinstance(s, int) for s in (*meta.stride(), *example.stride()))
                and meta.stride() != example.stride()):
            node.meta["val"] = example
            refresh_downstream(gm, node)
