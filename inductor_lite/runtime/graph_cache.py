"""On-disk cache of compiled graphs: a warm start skips lowering, scheduling and codegen.

An entry holds what `backend` needs to rebuild a compiled aten graph without lowering
it: the wrapper module source (its DSL kernels included), the kernel names and the
aten ops it calls as externs (so counters read the same warm or cold). Tensor
constants are not stored: the graph module being compiled holds them, and their
values are part of the key. Kernel binaries live in the binary cache (`cache`), so a
warm start compiles no kernel either.

The key (`graph_key`, a sha256) covers everything the generated code depends on:

- the aten graph: every node's op, name, target and arguments, its ``meta['val']``
  (dtype, device, sizes, strides and storage offset, symbolic sizes as their sympy
  expressions) and inductor_lite's own ``meta`` flags (``inductor_lite_*``: a
  backward's donated inputs), which is all lowering reads from a node; the value of
  every tensor constant; nested graph modules alike;
- the input metadata, as the placeholders' ``meta['val']`` above;
- the config fields that can change the code (`KEY_CONFIG_FIELDS` excludes only the
  ones that cannot: logging, dump and cache locations, the fallback policy, the
  number of compile workers);
- whether ``torch.use_deterministic_algorithms`` is on (atomic scatters then stay
  extern calls, `fx_lowering.indexed_writes`);
- every toolchain version (`toolchain`): inductor_lite's version and a hash of its
  source files, torch, sympy, networkx, llvmlite and Python.

Guards: lowering does not ask the shape environment questions (it reasons with sympy,
size symbols being positive integers), so a compile adds no guard, and the code is
valid for every value of the symbols it was compiled for; the symbolic expressions in
the key are the only shape facts it relies on. As a safety net, a compile that did add
a guard (`shape_guard_count` grew while lowering) is not stored, since a loaded graph
would not add it and Dynamo would not guard on it after a warm start. Size hints only
steer the memory plan (which is valid for every size), so they are not in the key.

AOTAutograd's cache (`aot_cache`) sits in front of this one: on its hit neither
AOTAutograd nor this cache runs. This cache serves the graphs that one does not hold:
graphs AOTAutograd's cache bypasses (`aot_cache` lists them), runs with torch's cache
switches off, and aten graphs compiled before under another Dynamo graph (a recompile
whose new guard leaves the aten graph as it was).

File format (``<cache_dir>/graphs/<key>.ilgraph``)::

    MAGIC | JSON (format version, key, source, kernels, externs) | sha256 of all before

A file that fails any check (checksum, magic, JSON, format version, key, field types),
or whose source fails to load, is deleted, counted in ``graph_cache_corrupt`` and
treated as a miss, so the graph is compiled again and the entry rewritten. Writes go
to a temp file in the same directory, fsynced, then ``os.replace``d over the final
name, so a reader sees a whole entry or none; entries are content-addressed, so
concurrent writers of one key write equivalent entries and no lock is needed. A
directory that cannot be created, read or written turns the graph cache off with one
warning.

Counters: ``graph_cache_hits``, ``graph_cache_misses``, ``graph_cache_corrupt`` and
``graph_cache_bypasses`` (graphs whose key cannot be computed, see `UncacheableGraph`,
or whose lowering added a shape guard). Each event is logged under the ``cache``
artifact.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
from typing import Any, Callable, Optional, TypeVar

import sympy
import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..config import Config, config
from ..counters import counters
from ..logs import log_artifact
from .cache import DiskStore

FORMAT_VERSION = 1
MAGIC = b"inductor_lite-graph\x00"
_DIGEST_BYTES = hashlib.sha256().digest_size
T = TypeVar("T")

KEY_CONFIG_FIELDS = tuple(
    f.name for f in dataclasses.fields(Config)
    if f.name not in ("logs", "debug_dir", "cache_dir", "disable_cache", "fallback_on_error", "compile_workers")
)
"""Config fields in the key: every field except those that cannot change generated code
(a new knob is in the key unless it is added to this exclusion)."""


class UncacheableGraph(Exception):
    """The graph holds something without a stable description across processes (an
    object whose repr is its address, a locally defined function, ...)."""


@dataclasses.dataclass(frozen=True)
class CachedGraph:
    """A compiled graph as stored in the cache.

    Attributes:
        source: the wrapper module source (``WrapperCode.source``).
        kernels: the DSL kernel of each launch site, by name (a kernel that several
            fused groups run repeats).
        extern_ops: aten op name -> extern calls of it in the graph
            (``GraphLowering.extern_counts``).
    """

    source: str
    kernels: tuple[str, ...]
    extern_ops: dict[str, int]


@functools.cache
def toolchain() -> dict[str, str]:
    """Every version the generated code depends on, and a sha256 of inductor_lite's
    ``.py`` files (so a source edit invalidates every entry). Computed once per process."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, package).encode() + b"\x00")
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    versions = {"inductor_lite_source": digest.hexdigest(), "python": sys.version,
                "torch": f"{torch.__version__} {torch.version.git_version}"}
    for dist in ("inductor_lite", "sympy", "networkx", "llvmlite"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def shape_guard_count() -> int:
    """The number of guards in the shape environment of the graph being compiled (0
    without one)."""
    shape_env = getattr(torch._guards.detect_fake_mode(), "shape_env", None)
    return len(shape_env.guards) if shape_env is not None else 0


def graph_key(gm: torch.fx.GraphModule) -> str:
    """The cache key (64 hex digits) of compiling aten graph ``gm`` under the current
    `config` (see the module docstring for what it covers).

    Raises:
        UncacheableGraph: ``gm`` holds a value with no stable description.
    """
    parts = [FORMAT_VERSION, _describe_graph(gm), {name: getattr(config, name) for name in KEY_CONFIG_FIELDS},
             torch.are_deterministic_algorithms_enabled(), toolchain()]
    # default=repr: a knob of a type JSON lacks still keys (an unstable repr only misses)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode()).hexdigest()


def _describe_graph(gm: torch.fx.GraphModule) -> list:
    nodes = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            target: Any = [node.target, _describe_attr(_fetch_attr(gm, node.target))]
        elif node.op in ("call_function", "call_method", "call_module"):
            target = _describe_target(node.target) if node.op == "call_function" else str(node.target)
        else:
            target = str(node.target)
        flags = sorted(k for k, v in node.meta.items() if k.startswith("inductor_lite_") and v)
        nodes.append([node.op, node.name, target, _describe_arg(node.args), _describe_arg(node.kwargs),
                      _describe_value(node.meta.get("val")), flags])
    return nodes


def _fetch_attr(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _describe_attr(value: Any) -> Any:
    if isinstance(value, torch.fx.GraphModule):
        return ["graph", _describe_graph(value)]
    if isinstance(value, torch.Tensor):
        return _describe_constant(value)
    return ["attr", _describe_arg(value)]


def _describe_constant(value: torch.Tensor) -> list:
    """A real tensor by metadata and a sha256 of its bytes."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.is_meta or value.layout != torch.strided:
        raise UncacheableGraph(f"tensor constant of type {type(value).__name__} on {value.device}, "
                               f"layout {value.layout}: its value cannot be hashed")
    # the bytes of a fresh copy (a view's storage may hold more than the tensor), made
    # outside the fake mode the backend compiles under
    with unset_fake_temporarily():
        data = bytes(value.detach().cpu().clone().untyped_storage())
    return ["constant", _describe_value(value), hashlib.sha256(data).hexdigest()]


def _describe_target(target: Any) -> str:
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"op {target}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"hop {target.name()}"
    module, qualname = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    if module and qualname and "<" not in qualname:
        return f"fn {module}.{qualname}"
    raise UncacheableGraph(f"call target {target!r} has no stable name")


def _describe_value(value: Any) -> Any:
    """A node's ``meta['val']``: tensors by metadata, symbolic scalars by expression."""
    if isinstance(value, torch.Tensor):
        return ["tensor", str(value.dtype), str(value.device), str(value.layout),
                [_describe_value(s) for s in value.size()], [_describe_value(s) for s in value.stride()]
                if value.layout == torch.strided else None, _describe_value(value.storage_offset())
                if value.layout == torch.strided else None]
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ["sym", type(value).__name__, str(value.node.expr)]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_describe_value(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", sorted((str(k), _describe_value(v)) for k, v in value.items())]
    return _describe_arg(value)


def _describe_arg(arg: Any) -> Any:
    """A node argument: other nodes by name, every leaf by a process-independent text."""
    if isinstance(arg, torch.fx.Node):
        return ["node", arg.name]
    if arg is None or isinstance(arg, (bool, int, str)):
        return arg
    if isinstance(arg, float):
        return ["float", repr(arg)]  # repr round-trips; JSON has no nan/inf
    if isinstance(arg, (list, tuple)):
        return [type(arg).__name__, [_describe_arg(a) for a in arg]]
    if isinstance(arg, dict):
        return ["dict", sorted((str(k), _describe_arg(v)) for k, v in arg.items())]
    if isinstance(arg, slice):
        return ["slice", [_describe_arg(arg.start), _describe_arg(arg.stop), _describe_arg(arg.step)]]
    if isinstance(arg, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return [type(arg).__name__, str(arg)]
    if isinstance(arg, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _describe_value(arg)
    if isinstance(arg, torch.Tensor):
        return _describe_constant(arg)
    if isinstance(arg, sympy.Basic):
        return ["sympy", sympy.srepr(arg)]
    if isinstance(arg, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
        return ["target", _describe_target(arg)]
    raise UncacheableGraph(f"argument {arg!r} of type {type(arg).__name__} has no stable description")


class CorruptEntryError(Exception):
    """A graph cache file that is not a whole, self-consistent entry."""


def encode_entry(key: str, graph: CachedGraph) -> bytes:
    """The file contents of ``graph`` stored under ``key`` (see the module docstring)."""
    payload = json.dumps({"format": FORMAT_VERSION, "key": key, "source": graph.source,
                          "kernels": list(graph.kernels), "extern_ops": graph.extern_ops})
    body = MAGIC + payload.encode()
    return body + hashlib.sha256(body).digest()


def decode_entry(data: bytes, key: str) -> CachedGraph:
    """Parse and verify a file written by `encode_entry`.

    Raises:
        CorruptEntryError: wrong checksum, magic, JSON, format version, key or field types.
    """
    body, digest = data[:-_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if len(data) < len(MAGIC) + _DIGEST_BYTES or hashlib.sha256(body).digest() != digest:
        raise CorruptEntryError("checksum mismatch (truncated or modified)")
    if not body.startswith(MAGIC):
        raise CorruptEntryError("not an inductor_lite graph cache entry (bad magic)")
    try:
        entry = json.loads(body[len(MAGIC):])
        if entry["format"] != FORMAT_VERSION:
            raise CorruptEntryError(f"format version {entry['format']!r}, expected {FORMAT_VERSION}")
        if entry["key"] != key:
            raise CorruptEntryError(f"entry holds key {entry['key']!r}, not {key!r}")
        source, kernels, extern_ops = entry["source"], entry["kernels"], entry["extern_ops"]
        if not (isinstance(source, str) and isinstance(kernels, list) and all(isinstance(k, str) for k in kernels)
                and isinstance(extern_ops, dict)
                and all(isinstance(n, int) and not isinstance(n, bool) for n in extern_ops.values())):
            raise CorruptEntryError("fields of the wrong type")
    except (ValueError, KeyError, TypeError) as e:  # json and unicode errors are ValueErrors
        raise CorruptEntryError(f"unparsable entry: {e}") from e
    return CachedGraph(source, tuple(kernels), extern_ops)


class GraphCache(DiskStore):
    """Compiled graphs on disk, keyed by `graph_key`, in ``<directory>/graphs`` (a
    `cache.DiskStore` of ``<key>.ilgraph`` files).

    Args:
        directory: the cache directory (``config.cache_dir``).
    """

    suffix = ".ilgraph"
    what = "graph cache"
    consequence = "graphs will be lowered again in every process"

    def __init__(self, directory: str | os.PathLike):
        super().__init__(os.path.join(os.fspath(directory), "graphs"))

    def key(self, gm: torch.fx.GraphModule, name: str) -> Optional[str]:
        """``gm``'s key, or None when the cache is off or the graph has no key
        (counted in ``graph_cache_bypasses`` and logged). ``name`` names the graph in the log."""
        if not self.enabled:
            return None
        try:
            return graph_key(gm)
        except UncacheableGraph as e:
            self.bypass(name, str(e))
            return None

    def load(self, key: str, name: str, loader: Callable[[CachedGraph], T]) -> Optional[T]:
        """``loader(entry)`` for the entry under ``key`` (a hit), or None (a miss: absent,
        corrupt, or cache off). An entry that fails to decode, or that ``loader`` raises
        on, is corrupt: deleted, counted, logged. ``name`` names the graph in the log."""
        path = self.path(key)
        try:
            data = self._read(path)
        except FileNotFoundError:
            return self._miss(name, key)
        if data is None:
            return None
        try:
            loaded = loader(decode_entry(data, key))
        except Exception as e:
            counters["graph_cache_corrupt"] += 1
            log_artifact("cache", f"graph {name}: corrupt graph cache entry {path} ({type(e).__name__}: {e}); "
                         "deleting it")
            self._remove(path)
            return self._miss(name, key)
        counters["graph_cache_hits"] += 1
        log_artifact("cache", f"graph {name}: graph cache hit {key[:16]}")
        return loaded

    def bypass(self, name: str, reason: str) -> None:
        """Count (``graph_cache_bypasses``) and log a graph compiled without the cache."""
        counters["graph_cache_bypasses"] += 1
        log_artifact("cache", f"graph {name}: not cached: {reason}")

    def put(self, key: str, graph: CachedGraph) -> None:
        """Store ``graph`` under ``key`` atomically (no-op when the cache is off)."""
        self._write(key, encode_entry(key, graph))

    def _miss(self, name: str, key: str) -> None:
        counters["graph_cache_misses"] += 1
        log_artifact("cache", f"graph {name}: graph cache miss {key[:16]}")
        return None


def default_graph_cache() -> GraphCache:
    """The process-wide graph cache under ``config.cache_dir``."""
    return GraphCache.for_directory(config.cache_dir)
