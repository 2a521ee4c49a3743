"""CUDA graphs for ``mode="reduce-overhead"`` (and ``"max-autotune"``): record a compiled
graph's launches once per input signature, then replay them with one ``cudaGraphLaunch``.

The semantics follow TorchInductor's cudagraph trees (``torch/_inductor/cudagraph_trees.py``,
``cudagraph_utils.py``), in a simpler form: one private memory pool per recording
instead of one tree sharing a pool.

Whether a graph may be captured at all is decided at compile time (`plan_cudagraphs`):
from the aten graph alone (`graph_skip_reason`: CPU tensors, several devices, an input
the graph writes to (a recording call runs the graph twice; AOTAutograd, as the backend
calls it, applies input mutations outside the graph, so this does not happen today),
ops that synchronize with the host or have data-dependent output shapes), kept in the
graph's `CUDAGraphPlan`, and from the process (`allocator_skip_reason`: a disabled
caching allocator), checked again when AOTAutograd's cache loads the graph. A graph
that is skipped runs with plain launches;
each skip is counted (``counters["cudagraph_skips"]``) and logged under the
``cudagraphs`` artifact with its reason, like capture errors and the recording limit
at run time.

At run time (`CUDAGraphRunner`), per call:

- **Static inputs.** Parameters and buffers (AOTAutograd's ``static_input_indices``)
  and, in a backward graph, every input that is not a tangent (saved activations and
  parameters: `static_input_indices`) are read where they lie; a recording is keyed
  by their addresses. Every other tensor input is copied into a buffer the recording
  owns. A static input seen at more than `MAX_ADDRESSES` addresses for one input
  signature is demoted to a copied one (the forward it comes from was not replayed,
  say), so changing addresses cost copies, not a recording per call.
- **Recording.** The first call for a signature copies the inputs in and runs the
  compiled graph once on those buffers, on a side stream: the warm-up builds and loads
  every kernel binary and autotunes every launch for exactly the arguments the capture
  sees (pointer alignment is part of a binary's specialisation), so nothing compiles,
  loads or times inside the capture. The same call is then captured with
  ``torch.cuda.graph`` into a pool of its own (two recordings sharing a pool could
  place one's outputs in the other's intermediates), with the cuBLAS workspaces cleared
  before and after so that the captured GEMMs' workspace lives in that pool too
  (`_clear_cublas_workspaces`), and replayed once for the call's results. A binary
  loaded during capture, or any capture error, turns the graph to plain launches for
  good (that call returns the warm-up's results).
- **Outputs.** A replay hands out new tensors over the recording's output memory
  (``detach()``: same storage, no autograd link), and keeps no reference to them. Before
  a recording replays, every output storage must be back to the reference count the
  recording itself holds: if the caller still holds a result (or a view of it, or
  autograd saved it for backward), the replay would overwrite it, so a second
  recording of the same signature is made (`MAX_INSTANCES`), and past that the call
  runs with plain launches (``counters["cudagraph_busy"]``). A loop ``out = f(x)``
  holds the previous ``out`` during the call, so it alternates between two recordings.
  Inductor instead overwrites such results and raises when they are read; keeping them
  valid costs the memory of a second recording. Outputs that alias an input are
  rebuilt on the caller's input, as plain launches return them.
- **New shapes.** Another input signature (sizes, strides, integer inputs: dynamic
  shapes) gets its own recording, up to `MAX_RECORDINGS` per graph; past that, new
  signatures run with plain launches.

Counters: ``cudagraph_recordings``, ``cudagraph_replays``, ``cudagraph_skips``,
``cudagraph_busy``.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Callable, Optional, Sequence

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ..config import config
from ..counters import counters
from ..logs import log_artifact

CUDAGRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})
"""``torch.compile`` modes that run compiled graphs under CUDA graphs, as in Inductor."""

MAX_RECORDINGS = 16
"""Recordings one compiled graph keeps (each holds a memory pool); later input
signatures run with plain launches."""
MAX_INSTANCES = 2
"""Recordings of one input signature and static addresses, for calls made while an
earlier replay's outputs are still held."""
MAX_ADDRESSES = 2
"""Distinct addresses a static input may have for one signature before it is copied in
instead (two: a forward alternating between two recordings feeds its backward two)."""

_HOST_SYNC_OPS = frozenset({"aten._local_scalar_dense", "aten._assert_scalar", "aten._assert_async",
                            "aten._fused_moving_avg_obs_fq_helper"})
"""Ops that read device values on the host (``.item()``, asserts) or that Inductor's
``FORBIDDEN_CUDAGRAPH_OPS`` lists for capture (by overload packet)."""
_INDEX_PUT_OPS = frozenset({"aten.index_put", "aten.index_put_", "aten._unsafe_index_put"})
"""With boolean indices these call ``nonzero``, which synchronizes."""

_storage_use_count = torch._C._storage_Use_Count  # what torch's StorageWeakRef.expired() reads


def uses_cudagraphs(mode: str) -> bool:
    """Whether ``mode`` (a `backend.MODES` entry) runs graphs under CUDA graphs."""
    return mode in CUDAGRAPH_MODES


def static_input_indices(gm: torch.fx.GraphModule, kind: str) -> tuple[int, ...]:
    """Indices of the inputs of ``gm`` that a recording reads in place (keyed by address).

    Args:
        gm: the aten graph. kind: ``fw``, ``bw`` or ``inference``.

    Returns:
        ``fw``/``inference``: the parameters and buffers, from AOTAutograd's
        ``fw_metadata.static_input_indices`` (the tracing context of the compile, as
        Inductor's ``get_static_input_idxs`` reads it; empty outside one). ``bw``: every
        tensor input not named ``tangents*`` (as Inductor's ``count_tangents``): saved
        activations sit at fixed addresses when the forward replays. Only tensor inputs.
    """
    placeholders = gm.graph.find_nodes(op="placeholder")
    if kind == "bw":
        indices = [i for i, node in enumerate(placeholders) if "tangents" not in node.name]
    else:
        context = torch._guards.TracingContext.try_get()
        metadata = getattr(context, "fw_metadata", None)
        indices = list(getattr(metadata, "static_input_indices", None) or ())
    return tuple(i for i in sorted(set(indices))
                 if i < len(placeholders) and isinstance(placeholders[i].meta.get("val"), torch.Tensor))


def mutated_input_indices(gm: torch.fx.GraphModule) -> list[int]:
    """Indices of the inputs that an op of ``gm`` writes, directly or through a view
    (an argument whose schema alias annotation is a write: ``add_``, ``copy_``, ``out=``)."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    index = {node: i for i, node in enumerate(placeholders)}
    mutated = set()
    for node in gm.graph.nodes:
        target = node.target
        if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
            continue
        for position, argument in enumerate(target._schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            base = _view_base(value)
            if base in index:
                mutated.add(index[base])
    return sorted(mutated)


def _view_base(value: Any) -> Any:
    """The node a chain of view ops starts from (``value`` itself when it is no view)."""
    while isinstance(value, torch.fx.Node) and value.op == "call_function" and value.args:
        target = value.target
        if not isinstance(target, torch._ops.OpOverload):
            break
        returns = target._schema.returns
        if not returns or returns[0].alias_info is None or returns[0].alias_info.is_write:
            break
        value = value.args[0]
    return value


def allocator_skip_reason() -> Optional[str]:
    """Why no graph can run under CUDA graphs in this process (the caching allocator is
    off: capture allocates from its pools), or None. A property of the process, not of
    a graph: checked whenever a graph is put under CUDA graphs, a cached one included."""
    if not _caching_allocator_enabled():
        return "the CUDA caching allocator is disabled (capture allocates from its pools)"
    return None


def graph_skip_reason(gm: torch.fx.GraphModule) -> Optional[str]:
    """Why the aten graph ``gm`` itself cannot run under CUDA graphs, or None when it can.

    Reads each node's ``meta["val"]`` (the fake values AOTAutograd records).

    Returns:
        A short reason: CPU tensors, tensors on several devices or on none, an input of
        another type than tensor or number, a write to an input, an op that syncs with
        the host or has data-dependent shapes, sparse tensors.
    """
    sparse = [node.name for node in gm.graph.nodes if any(v.is_sparse for v in _tensor_values(node.meta.get("val")))]
    if sparse:
        return f"a sparse tensor ({sparse[0]})"
    devices = _devices(gm)
    cpu = [name for device, name in devices.items() if device.type == "cpu"]
    if cpu:
        return f"CPU tensors ({cpu[0]})"
    if len(devices) != 1:
        return f"tensors on {len(devices)} devices ({', '.join(map(str, devices)) or 'none'})"
    (device,) = devices
    if device.type != "cuda":
        return f"tensors on {device}"
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("val")
        if not isinstance(value, (torch.Tensor, int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
            return f"input {node.name} is a {type(value).__name__}"
    written = mutated_input_indices(gm)
    if written:
        return f"the graph writes to input(s) {written}"
    for node in gm.graph.nodes:
        reason = _unsafe_op_reason(node)
        if reason:
            return reason
    return None


def _devices(gm: torch.fx.GraphModule) -> dict[torch.device, str]:
    """The devices of the graph's tensors (meta tensors aside), each with a node on it."""
    devices: dict[torch.device, str] = {}
    for node in gm.graph.nodes:
        for value in _tensor_values(node.meta.get("val")):
            if value.device.type != "meta":
                devices.setdefault(value.device, node.name)
    return devices


def _tensor_values(value: Any) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _caching_allocator_enabled() -> bool:
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        return False
    is_enabled = getattr(torch._C, "_cuda_cudaCachingAllocator_is_enabled", None)
    return is_enabled is None or not torch.cuda.is_available() or is_enabled()


def _unsafe_op_reason(node: torch.fx.Node) -> Optional[str]:
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return None
    packet = str(target.overloadpacket)
    tags = set(target.tags)
    unsafe_tag = getattr(torch.Tag, "cudagraph_unsafe", None)
    if packet in _HOST_SYNC_OPS or torch.Tag.data_dependent_output in tags:
        return f"{target} reads device values on the host ({node.name})"
    if unsafe_tag is not None and unsafe_tag in tags:
        return f"{target} is tagged cudagraph_unsafe ({node.name})"
    # The tag marks ops that *may* size their output from data: ``index.Tensor`` only does
    # with a boolean index (``nonzero``), so integer indices (a rotary table's lookup) pass.
    # The fake value alone does not tell: a size the shape environment has resolved, after
    # a ``torch._check``, no longer shows as unbacked.
    dynamic = torch.Tag.dynamic_output_shape in tags and (packet != "aten.index" or _has_boolean_index(node))
    if dynamic or free_unbacked_symbols(node.meta.get("val")):
        return f"{target} has a data-dependent output shape ({node.name})"
    if packet in _INDEX_PUT_OPS and _has_boolean_index(node):
        return f"{target} with boolean indices calls nonzero ({node.name})"
    return None


def _has_boolean_index(node: torch.fx.Node) -> bool:
    """Whether an ``index``/``index_put`` node has a boolean (or uint8) index, or an
    index whose dtype is unknown."""
    indices = node.args[1] if len(node.args) > 1 else node.kwargs.get("indices", ())
    for index in indices or ():
        if index is None:
            continue
        value = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor) or value.dtype in (torch.bool, torch.uint8):
            return True
    return False


def record_skip(name: str, reason: str) -> None:
    """Count and log that graph ``name`` runs with plain launches because of ``reason``."""
    counters["cudagraph_skips"] += 1
    log_artifact("cudagraphs", f"{name}: plain launches: {reason}")


@dataclasses.dataclass(frozen=True)
class CUDAGraphPlan:
    """How a compiled graph runs in a CUDA-graph mode, decided from its aten graph while
    AOTAutograd compiles it (`plan_cudagraphs`). Plain data, so that a graph loaded from
    AOTAutograd's cache (`aot_cache`) runs as it did when compiled.

    Attributes:
        skip: why the graph runs with plain launches (`graph_skip_reason`), or None.
        static_inputs: indices of the inputs read in place (`static_input_indices`).
        device: the CUDA device the graph runs on (``"cuda:0"``), or "" when skipped.
    """

    skip: Optional[str]
    static_inputs: tuple[int, ...] = ()
    device: str = ""


def plan_cudagraphs(gm: torch.fx.GraphModule, kind: str) -> CUDAGraphPlan:
    """The `CUDAGraphPlan` of aten graph ``gm`` of ``kind`` (``fw``, ``bw`` or
    ``inference``). Must be called while AOTAutograd compiles ``gm`` (see
    `static_input_indices`)."""
    reason = graph_skip_reason(gm)
    if reason is not None:
        return CUDAGraphPlan(reason)
    (device,) = _devices(gm)
    return CUDAGraphPlan(None, static_input_indices(gm, kind), str(device))


def apply_plan(plan: CUDAGraphPlan, compiled: Callable, name: str) -> Callable:
    """``compiled`` (the boxed callable of graph ``name``) under CUDA graphs as ``plan``
    says, or ``compiled`` itself when the plan or this process
    (`allocator_skip_reason`) skips them (counted and logged)."""
    reason = allocator_skip_reason() or plan.skip
    if reason is not None:
        record_skip(name, reason)
        return compiled
    return CUDAGraphRunner(compiled, plan.static_inputs, name, torch.device(plan.device))


@dataclasses.dataclass
class _Signature:
    """The recordings of one input signature (sizes, strides, integer inputs)."""

    static: tuple[int, ...]  # inputs read in place, by index
    addresses: dict[int, set[int]] = dataclasses.field(default_factory=dict)  # seen, per static input
    recordings: dict[tuple[int, ...], list["_Recording"]] = dataclasses.field(default_factory=dict)


class CUDAGraphRunner:
    """A compiled graph called through CUDA graphs (the module docstring gives the policy).

    Args:
        compiled: the boxed callable ``compiled(args)``; its first call for a signature
            is the warm-up, so it may compile, load and autotune.
        static_inputs: indices of the inputs read in place (`static_input_indices`).
        name: the graph's name, for logs.
        device: the CUDA device the graph runs on.

    Called with the boxed convention: ``runner(args)`` clears ``args``.
    """

    def __init__(self, compiled: Callable, static_inputs: Sequence[int], name: str, device: torch.device):
        self._boxed_call = True
        self.compiled = compiled
        self.static = tuple(static_inputs)
        self.name = name
        self.device = device
        self.signatures: dict[tuple, _Signature] = {}
        self.recordings = 0
        self.disabled = False  # a capture failed: plain launches for good
        self._limit_logged = False

    def __call__(self, args: list) -> Any:
        if self.disabled:
            return self.compiled(args)
        key = tuple((a.shape, a.stride()) if isinstance(a, torch.Tensor) else a for a in args)
        signature = self.signatures.get(key)
        if signature is not None:
            for recording in signature.recordings.get(tuple(args[i].data_ptr() for i in signature.static), ()):
                if not recording.busy():
                    counters["cudagraph_replays"] += 1
                    return recording.replay(args)
        return self._miss(args, key, signature)

    def _miss(self, args: list, key: tuple, signature: Optional[_Signature]) -> Any:
        if signature is None:
            signature = self.signatures[key] = _Signature(self.static)
        self._demote_moving_inputs(signature, args)
        addresses = tuple(args[i].data_ptr() for i in signature.static)
        instances = signature.recordings.setdefault(addresses, [])
        if len(instances) >= MAX_INSTANCES:
            counters["cudagraph_busy"] += 1
            log_artifact("cudagraphs", f"{self.name}: plain launches for one call: the outputs of its "
                                       f"{len(instances)} recordings for these inputs are still held")
            return self.compiled(args)
        if self.recordings >= MAX_RECORDINGS:
            if not self._limit_logged:
                self._limit_logged = True
                record_skip(self.name, f"{MAX_RECORDINGS} recordings made; new input signatures from now on")
            return self.compiled(args)
        return self._record(args, signature, instances)

    def _demote_moving_inputs(self, signature: _Signature, args: list) -> None:
        """Copy in, from now on, the static inputs that keep changing address."""
        moving = []
        for i in signature.static:
            seen = signature.addresses.setdefault(i, set())
            seen.add(args[i].data_ptr())
            if len(seen) > MAX_ADDRESSES:
                moving.append(i)
        if moving:
            self.recordings -= sum(len(r) for r in signature.recordings.values())
            signature.recordings.clear()
            signature.static = tuple(i for i in signature.static if i not in moving)
            log_artifact("cudagraphs", f"{self.name}: input(s) {moving} changed address more than "
                                       f"{MAX_ADDRESSES} times: copied in from now on")

    def _record(self, args: list, signature: _Signature, instances: list) -> Any:
        inputs = list(args)
        args.clear()
        if self._interprets():
            self.disabled = True
            record_skip(self.name, "kernels run in the DSL interpreter, which reads values on the host")
            return self.compiled(inputs)
        device = self.device
        static = set(signature.static)
        buffers = {i: _copy_in_buffer(a) for i, a in enumerate(inputs)
                   if isinstance(a, torch.Tensor) and i not in static}
        graph_inputs = [buffers.get(i, a) for i, a in enumerate(inputs)]
        caller_stream = torch.cuda.current_stream(device)
        stream = _side_stream(device)
        stream.wait_stream(caller_stream)
        with torch.cuda.stream(stream):
            warmup_outputs = self.compiled(list(graph_inputs))
        caller_stream.wait_stream(stream)
        try:
            graph = torch.cuda.CUDAGraph()
            _clear_cublas_workspaces()
            with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle(), stream=stream,
                                  capture_error_mode="thread_local"):
                loaded = _binaries_loaded()
                captured = self.compiled(list(graph_inputs))
                if _binaries_loaded() != loaded:
                    raise RuntimeError("a kernel binary was built or loaded during capture")
        except Exception as error:  # noqa: BLE001 - any capture failure means plain launches
            self.disabled = True
            record_skip(self.name, f"capture failed: {type(error).__name__}: {error}")
            _reset_generators_after_failed_capture(self.name, stream)
            return _OutputPlan(warmup_outputs, graph_inputs).outputs(inputs)
        finally:
            _clear_cublas_workspaces()
        recording = _Recording(graph, buffers, _OutputPlan(captured, graph_inputs))
        del warmup_outputs, captured, graph_inputs
        recording.plan.measure_baseline()
        instances.append(recording)
        self.recordings += 1
        counters["cudagraph_recordings"] += 1
        log_artifact("cudagraphs", f"{self.name}: recorded CUDA graph {self.recordings} (inputs "
                                   f"{[tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in inputs]}, "
                                   f"{len(buffers)} copied in, {len(signature.static)} read in place)")
        # This call's results come from a replay, not the warm-up, so that a backward
        # sees the same saved-activation addresses from the first call on.
        recording.graph.replay()
        return recording.plan.outputs(inputs)

    def _interprets(self) -> bool:
        """Whether the DSL interpreter runs the kernels (then they read values on the host)."""
        options = getattr(self.compiled, "runtime_options", {})
        return options.get("interpret", config.interpret)


class _Recording:
    """One captured graph with the input buffers it reads and its output plan."""

    def __init__(self, graph: torch.cuda.CUDAGraph, buffers: dict[int, torch.Tensor], plan: "_OutputPlan"):
        self.graph = graph
        self.copies = [(i, buffer, _expanded_dims(buffer)) for i, buffer in buffers.items()]
        self.plan = plan
        self.busy = plan.busy

    def replay(self, args: list) -> Any:
        for i, buffer, expanded in self.copies:
            _copy_into(buffer, args[i], expanded)
        inputs = list(args)
        args.clear()
        self.graph.replay()
        return self.plan.outputs(inputs)


class _OutputPlan:
    """How to hand out a graph's outputs each call, and whether the last ones are still held.

    Built from the outputs one run returned and the inputs that run read: an output
    sharing memory with input ``i`` is rebuilt on the caller's input ``i`` (the same
    object, or ``as_strided`` at the same place relative to it); a non-tensor is returned
    as is; any other tensor is memory of the run (the recording's pool), handed out as
    a new tensor over it (``detach()``: a tensor returned twice is handed out once,
    twice). Holds no reference to the inputs.
    """

    def __init__(self, outputs: Sequence[Any], inputs: Sequence[Any]):
        self.container = type(outputs) if isinstance(outputs, (list, tuple)) else None
        storages = {}
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.untyped_storage().nbytes():
                storages.setdefault(x.untyped_storage().data_ptr(), i)
        self.steps: list[tuple] = []
        positions: dict[int, int] = {}
        for position, out in enumerate(outputs if self.container else (outputs,)):
            if not isinstance(out, torch.Tensor):
                self.steps.append(("value", out))
                continue
            if id(out) in positions:  # one tensor returned twice stays one tensor
                self.steps.append(("repeat", positions[id(out)]))
                continue
            positions[id(out)] = position
            i = storages.get(out.untyped_storage().data_ptr()) if out.untyped_storage().nbytes() else None
            if i is None:
                self.steps.append(("owned", out))
            elif out is inputs[i]:
                self.steps.append(("input", i))
            else:  # a view of an input, perhaps of another dtype (x.view(torch.int32))
                offset = out.storage_offset() * out.element_size() - inputs[i].storage_offset() * inputs[i].element_size()
                self.steps.append(("view", (i, tuple(out.shape), out.stride(), offset, out.dtype)))
        # each storage once: outputs may be views of one buffer
        self._storages = list(dict.fromkeys(t.untyped_storage()._cdata for kind, t in self.steps if kind == "owned"))
        self._baseline: list[tuple[int, int]] = []

    def measure_baseline(self) -> None:
        """Record the reference counts of the output storages as this plan alone holds them."""
        self._baseline = [(c, _storage_use_count(c)) for c in self._storages]

    def busy(self) -> bool:
        """Whether an output of the last `outputs` call (or a view of one) is still referenced."""
        return any(_storage_use_count(c) > count for c, count in self._baseline)

    def outputs(self, inputs: Sequence[Any]) -> Any:
        """The outputs of a run on ``inputs`` (the caller's, in the order the graph takes them)."""
        result = []
        for kind, value in self.steps:
            if kind == "owned":
                result.append(value.detach())
            elif kind == "input":
                result.append(inputs[value])
            elif kind == "repeat":
                result.append(result[value])
            elif kind == "view":
                i, size, stride, offset, dtype = value
                base = inputs[i]
                start = base.storage_offset() * base.element_size() + offset  # bytes
                if dtype == base.dtype:
                    result.append(base.as_strided(size, stride, start // base.element_size()))
                else:
                    view = torch.empty((0,), dtype=dtype, device=base.device)
                    result.append(view.set_(base.untyped_storage(), start // view.element_size(), size, stride))
            else:
                result.append(value)
        return self.container(result) if self.container else result[0]


def _copy_in_buffer(x: torch.Tensor) -> torch.Tensor:
    """A tensor of ``x``'s sizes and strides in memory of its own, holding ``x``'s values."""
    buffer = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    _copy_into(buffer, x, _expanded_dims(buffer))
    return buffer


def _expanded_dims(x: torch.Tensor) -> tuple[int, ...]:
    """Dims of stride 0 and size > 1: every index reads one element, copied once."""
    return tuple(d for d in range(x.dim()) if x.stride(d) == 0 and x.shape[d] > 1)


def _copy_into(buffer: torch.Tensor, x: torch.Tensor, expanded: tuple[int, ...]) -> None:
    for d in expanded:
        buffer, x = buffer.narrow(d, 0, 1), x.narrow(d, 0, 1)
    buffer.copy_(x)


_side_streams: dict[torch.device, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream warm-ups and captures run on (one per device: lazily created cuBLAS
    workspaces and the like belong to the stream they were made on)."""
    stream = _side_streams.get(device)
    if stream is None:
        stream = _side_streams[device] = torch.cuda.Stream(device)
    return stream


def _clear_cublas_workspaces() -> None:
    """Drop the cuBLAS workspaces that torch keeps per (handle, stream).

    Called right before and after each capture. Before: the captured GEMMs then get a
    fresh workspace, allocated inside the recording's private pool, which keeps that
    memory for as long as the graph lives. Without it they would use the workspace the
    warm-up left on the side stream, ordinary allocator memory: anyone who clears the
    workspaces later (Inductor's cudagraph trees do, around each of their recordings)
    frees it under the graph, and a replay then writes into memory that another tensor
    owns, or that ``empty_cache`` unmapped ("unspecified launch failure"). After: plain
    GEMMs on that stream must not share the workspace a replay writes. Inductor does
    the same (``clear_cublas_manager`` in ``torch/_inductor/cudagraph_trees.py``).

    Costs and reach: each recording with a GEMM keeps a workspace of its own (cuBLAS's
    default is 32 MiB on Hopper) for as long as it lives. The clear drops the workspaces
    of every stream in the process (torch binds no per-stream clear in Python), so
    another library's CUDA graph that captured GEMMs without clearing first loses its
    workspace the same way, as it would to Inductor's.
    """
    torch._C._cuda_clearCublasWorkspaces()


def _reset_generators_after_failed_capture(name: str, stream: torch.cuda.Stream) -> None:
    """Take the CUDA random generators out of capture mode after a failed capture.

    A capture that fails never reaches the epilogue of ``CUDAGraph::capture_end``, so the
    generators it registered stay in capture mode and the next random op outside a
    capture raises "Offset increment outside graph capture encountered unexpectedly".
    An empty capture on the same stream runs the prologue and the epilogue again (for
    the default generator, the one a capture registers unless told otherwise). If
    that fails too, it is logged and the plain launches go on."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that the graph is empty
            with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=stream, capture_error_mode="thread_local"):
                pass
    except Exception as error:  # noqa: BLE001 - the fallback must not fail on this
        log_artifact("cudagraphs", f"{name}: resetting the CUDA generators after the failed capture failed too: "
                                   f"{type(error).__name__}: {error}")


def _binaries_loaded() -> int:
    return counters["kernels_compiled"] + counters["cache_hits"]
