"""Launch DSL kernels on CUDA tensors: specialise, get a binary, load it once, launch.

Two entry points, one per kind of caller:

``launch(kernel, grid, args, constexprs, num_warps, num_stages, maxnreg)`` validates everything
(it is what ``Kernel.run`` calls for users): ``kernel.specialize``, one dict lookup keyed
by (kernel, spec, num_warps, device, num_stages, maxnreg), grid checks, packing the arguments into a parameter
buffer built once per loaded kernel (checking each tensor's device and each number's
range), and ``cuLaunchKernel`` on torch's current stream.

``bind_launcher(kernel, device, arg_kinds, num_warps, **constexprs)`` is for generated
wrappers, whose code already fixes the argument count and kinds, the constexprs, the
grid's shape, num_warps, num_stages and maxnreg, and every tensor's dtype and device. It returns a function
generated for that kernel (see `bind_launcher`) that per launch only reads the
pointers, computes the specialisation's per-launch facts (16-byte alignment of each
pointer, divisibility by 16 and int32 range of each int) as a tuple key, finds the
loaded kernel for that key and launches it. A new key goes through the full
validation and `precompile` once. Generated wrappers reach it through
`tuned_launcher`, which launches through it the first time it sees a key and then
launches the recorded `LoadedKernel.launch_entry` itself.

Everything else happens on the first launch of a specialisation (or ahead of time,
through `precompile`):

    disk cache hit  -> counters["cache_hits"] += 1; log the ``ptx`` artifact
    disk cache miss -> kernel.build_ir -> compile_ptx (which logs ``ptx``) -> ptx_to_cubin,
                       stored in the cache; counters["kernels_compiled"] += 1
    then: log the ``cache`` artifact, dump ``<name>.ll`` and ``<name>.ptx`` into
    ``kernel.debug_dir`` when set, load the module on the device.

The kernel object is duck-typed (``inductor_lite.dsl.kernel.Kernel``): ``name``,
``source``, ``specialize(args, constexprs)`` returning a hashable specialisation with
``args`` (one ``ir.ArgSpec`` per runtime argument) and ``key()`` (stable across
processes; it covers the constexprs), ``build_ir(spec)``, optional ``debug_dir``;
`bind_launcher` also uses ``run(grid, args, constexprs, num_warps, num_stages)`` when
``config.interpret`` is set.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import linecache
import operator
import struct
import threading
import weakref
from typing import Any, Callable, Mapping, Sequence

import torch

from . import compile_pool, driver
from .build import build_binary
from .cache import CompiledBinary, cache_key, default_cache
from ..config import config
from ..counters import counters
from ..debug import write_files
from ..dsl.compiler import toolchain_versions
from ..dsl.nvptx import check_maxnreg
from ..dsl.nvptx_pipeline import check_num_stages
from ..logs import log_artifact

# struct codes, each parameter in its own 8-byte slot ("=": standard sizes, no implicit padding)
_FORMATS = {"ptr": "Q", "i32": "i4x", "i64": "q", "f32": "f4x", "f64": "d"}
_SLOT_BYTES = 8
_INT_RANGES = {"i32": (-(1 << 31), (1 << 31) - 1), "i64": (-(1 << 63), (1 << 63) - 1)}
_FLOAT_TYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double}
MAX_NUM_WARPS = 32  # 1024 threads per block, the CUDA limit for every compute capability


class ParamBuffer:
    """The ``kernelParams`` array of one loaded kernel, built once and refilled per launch.

    The values live in one buffer, 8 bytes per parameter, written by one
    ``struct.pack_into`` call; a ``void*[]`` holds each slot's address, and `address` is
    what ``cuLaunchKernel`` takes. The driver copies the values at launch, so the buffer
    may be refilled as soon as the launch call returns.

    Args:
        param_types: one of ``ptr`` (a CUDA tensor's ``data_ptr()``), ``i32``, ``i64``,
            ``f32``, ``f64`` per runtime argument.
        name: the kernel's name, for errors.
        device: CUDA device index every tensor argument must live on.

    Attributes:
        pack: ``pack(*values)`` writes already-converted values (`values` returns them),
            unchecked except by ``struct``, which raises ``struct.error`` for an int out
            of its parameter's range or a value of the wrong kind and ``OverflowError``
            for a float too large for ``f32``.

    Raises:
        ValueError: an unknown param type.
    """

    def __init__(self, param_types: Sequence[str], name: str, device: int):
        unknown = [t for t in param_types if t not in _FORMATS]
        if unknown:
            raise ValueError(f"kernel {name!r}: unknown param types {unknown}; expected each of {list(_FORMATS)}")
        self.param_types = tuple(param_types)
        self.name = name
        self.device = device
        layout = struct.Struct("=" + "".join(_FORMATS[t] for t in self.param_types))
        n = len(self.param_types)
        self._slots = (ctypes.c_uint64 * max(1, n))()  # 8-byte aligned, like every parameter type
        base = ctypes.addressof(self._slots)
        self._pointers = (ctypes.c_void_p * max(1, n))(*(base + _SLOT_BYTES * i for i in range(n)))
        self.address = ctypes.addressof(self._pointers)
        self.pack = functools.partial(layout.pack_into, self._slots, 0)

    def values(self, args: Sequence[Any]) -> list:
        """Check the launch's arguments and convert them to what `pack` takes.

        Args:
            args: the runtime arguments in order: a CUDA tensor on ``device`` for each
                ``ptr``, an int for ``i32``/``i64`` (bools count), a float or int for
                ``f32``/``f64`` (rounded to the parameter's precision; beyond ``f32``'s
                range, to infinity).

        Returns:
            one int or float per parameter: data pointers for tensors.

        Raises:
            TypeError: wrong number of arguments, or an argument of the wrong kind.
            ValueError: a tensor on another device, or an int that overflows its type.
        """
        if len(args) != len(self.param_types):
            raise TypeError(f"kernel {self.name!r} takes {len(self.param_types)} runtime arguments, got {len(args)}")
        out = []
        for i, (kind, value) in enumerate(zip(self.param_types, args)):
            try:
                if kind == "ptr":
                    if value.get_device() != self.device:
                        raise ValueError(
                            f"kernel {self.name!r}: argument {i} is on {value.device}, "
                            f"but the kernel runs on cuda:{self.device}"
                        )
                    out.append(value.data_ptr())
                elif kind in _INT_RANGES:
                    low, high = _INT_RANGES[kind]
                    value = operator.index(value)
                    if not low <= value <= high:
                        raise ValueError(f"kernel {self.name!r}: argument {i} = {value} does not fit in {kind}")
                    out.append(value)
                else:
                    out.append(_FLOAT_TYPES[kind](value).value)
            except (TypeError, AttributeError):
                expected = {"ptr": "a CUDA tensor", "i32": "an int", "i64": "an int"}.get(kind, "a float")
                raise TypeError(
                    f"kernel {self.name!r}: argument {i} ({kind}) must be {expected}, got {type(value).__name__}"
                ) from None
        return out

    def fill(self, args: Sequence[Any]) -> None:
        """Check the launch's arguments and write them into the buffer (see `values`)."""
        self.pack(*self.values(args))


def normalize_grid(grid: Sequence[int], name: str) -> tuple[int, int, int]:
    """``grid`` padded to (x, y, z) with ones.

    Raises:
        TypeError: not a tuple/list of 1 to 3 ints.
        ValueError: x outside [0, 2**31 - 1] or y, z outside [0, 65535].
    """
    if not isinstance(grid, (tuple, list)) or not 1 <= len(grid) <= 3:
        raise _bad_grid(grid, name)
    x, y, z = (*grid, 1, 1)[:3]
    try:
        x, y, z = operator.index(x), operator.index(y), operator.index(z)
    except TypeError:
        raise _bad_grid(grid, name) from None
    max_x, max_y, max_z = driver.MAX_GRID
    if not (0 <= x <= max_x and 0 <= y <= max_y and 0 <= z <= max_z):
        for size, limit, axis in zip((x, y, z), driver.MAX_GRID, "xyz"):
            if not 0 <= size <= limit:
                raise ValueError(f"kernel {name!r}: grid {axis} = {size} is outside the CUDA limit [0, {limit}]")
    return x, y, z


def _bad_grid(grid: Any, name: str) -> TypeError:
    return TypeError(f"kernel {name!r}: grid must be a tuple of 1 to 3 ints, got {grid!r}")


class LoadedKernel:
    """A `CompiledBinary` loaded on one device, ready to launch.

    Args:
        binary: the compiled kernel.
        device: CUDA device index.

    Raises:
        ValueError: the kernel needs more shared memory or threads than the device has.
        CudaDriverError: the module failed to load.
    """

    def __init__(self, binary: CompiledBinary, device: int):
        self.binary = binary
        self.name = binary.name
        self.device = device
        self.threads = 32 * binary.num_warps
        self.cluster_size = binary.cluster_size
        self.function = driver.load_function(binary.cubin, binary.name, device, binary.shared_bytes, self.threads)
        self.context = driver.context(device)
        self.params = ParamBuffer(binary.param_types, binary.name, device)
        self._pack, self._address = self.params.pack, self.params.address
        self._run = driver.kernel_launcher(self.function, device, self.threads, binary.shared_bytes, binary.name)
        self._lock = threading.Lock()  # the shared ParamBuffer must not be refilled mid-launch by another thread

    def launch_entry(self, grid_x: int) -> tuple:
        """What a generated launch function needs to launch this kernel on ``grid_x``
        programs without calling into this object (`tuned_launcher`): ``(function, grid_x,
        threads, shared_bytes, params address, pack, lock, context, launch_in_context)``.
        Whoever launches with it holds ``lock`` while it packs and launches, launches
        with ``cuLaunchKernel`` when ``context`` is the thread's current one, and
        otherwise calls ``launch_in_context(grid_x, 1, 1, params address)``.

        Raises:
            ValueError: ``grid_x`` is not a multiple of the cluster size.
        """
        if grid_x % self.cluster_size:
            raise self._cluster_error((grid_x, 1, 1))
        return (self.function, grid_x, self.threads, self.binary.shared_bytes, self._address, self._pack, self._lock,
                self.context, self._run)

    def launch(self, grid: Sequence[int], args: Sequence[Any]) -> None:
        """Launch on torch's current stream of the device. An empty grid launches nothing.

        Args:
            grid: programs along (x[, y[, z]]).
            args: runtime arguments, as `ParamBuffer.values` takes them.

        Raises:
            TypeError, ValueError: bad grid or arguments (see `normalize_grid`, `ParamBuffer.values`),
                or a grid x that is not a multiple of the cluster size.
            CudaDriverError: the launch failed.
        """
        dims = normalize_grid(grid, self.name)
        if 0 in dims:
            return
        if dims[0] % self.cluster_size:
            raise self._cluster_error(dims)
        self._lock.acquire()  # not `with`: the context manager protocol costs more than the locking
        try:
            self.params.fill(args)
            self._run(*dims, self._address)
        finally:
            self._lock.release()

    def launch_packed(self, grid: tuple[int, int, int], values: Sequence[Any], args: Sequence[Any]) -> None:
        """`launch` without the checks a generated wrapper makes unneeded (the fast path of
        `bind_launcher`). An empty grid launches nothing.

        Args:
            grid: (x, y, z) program counts, non-negative ints; the driver rejects ones
                above `driver.MAX_GRID`.
            values: what `ParamBuffer.values` would return for ``args`` (tensors already
                turned into their data pointers, on this kernel's device).
            args: the launch's arguments, to name the problem when ``values`` do not
                pack (an int out of its parameter's range, a value of the wrong kind).

        Raises:
            TypeError, ValueError: a value that does not fit its parameter, or a grid x
                that is not a multiple of the cluster size.
            CudaDriverError: the launch failed (a grid over the limits included).
        """
        if 0 in grid:
            return
        if grid[0] % self.cluster_size:
            raise self._cluster_error(grid)
        self._lock.acquire()
        try:
            try:
                self._pack(*values)
            except (struct.error, OverflowError):  # name the problem, or round a float to inf
                self.params.fill(args)
            self._run(*grid, self._address)
        finally:
            self._lock.release()

    def _cluster_error(self, grid: Sequence[int]) -> ValueError:
        return ValueError(f"kernel {self.name!r}: grid x of {grid[0]} programs is not a multiple of its cluster "
                          f"size {self.cluster_size} (cluster_gather)")


_loaded: dict[tuple, LoadedKernel] = {}
# id(kernel) -> kernel: keeps every kernel in `_loaded` alive so its id is never reused.
# Kernels are keyed by identity because a Kernel need not be hashable.
_pinned: dict[int, Any] = {}


def launch(
    kernel: Any, grid: Sequence[int], args: Sequence[Any], constexprs: Mapping[str, Any], num_warps: int,
    num_stages: int = 1, maxnreg: int | None = None,
) -> None:
    """Run ``kernel`` on CUDA tensors, compiling and loading it on first use.

    Args:
        kernel: a DSL kernel (see the module docstring).
        grid: programs along (x[, y[, z]]): x <= 2**31 - 1, y and z <= 65535.
        args: runtime arguments in order: CUDA tensors (all on one device) and numbers.
        constexprs: compile-time constants by name.
        num_warps: warps per program (1 to 32).
        num_stages: software pipelining depth of loads in loops (1: none; see
            ``inductor_lite.dsl.nvptx_pipeline``).
        maxnreg: cap on registers per thread, in [16, 255] (None: none; see
            ``inductor_lite.dsl.nvptx``).

    Raises:
        ValueError, TypeError: bad grid, arguments, num_warps, num_stages or maxnreg; tensors
            not on CUDA.
        CudaDriverError: a driver call failed; the message names the kernel.
    """
    spec = kernel.specialize(args, constexprs)
    device = _device_of(args, kernel.name)
    loaded = _loaded.get((id(kernel), spec, num_warps, device, num_stages, maxnreg))
    if loaded is None:
        loaded = precompile(kernel, spec, num_warps, device, num_stages, maxnreg)
    loaded.launch(grid, args)


def precompile(kernel: Any, spec: Any, num_warps: int, device: int | str | torch.device,
               num_stages: int = 1, maxnreg: int | None = None) -> LoadedKernel:
    """Everything `launch` does before the launch: get the binary (disk cache or build),
    count, log, dump debug files, load it on ``device``. Idempotent.

    Args:
        kernel: a DSL kernel.
        spec: ``kernel.specialize(args, constexprs)``.
        num_warps: warps per program (1 to 32).
        device: CUDA device index, ``"cuda:N"`` or a ``torch.device``.
        num_stages: software pipelining depth of loads in loops (1: none).
        maxnreg: cap on registers per thread, in [16, 255] (None: none).

    Raises:
        ValueError: bad num_warps, num_stages, maxnreg or device.
        CudaDriverError: a driver call failed.
    """
    device = _device_index(device)
    key = (id(kernel), spec, num_warps, device, num_stages, maxnreg)
    loaded = _loaded.get(key)
    if loaded is not None:
        return loaded
    _check_num_warps(kernel.name, num_warps)
    check_num_stages(kernel.name, num_stages)
    check_maxnreg(kernel.name, maxnreg)
    binary = _get_binary(kernel, spec, num_warps, device, num_stages, maxnreg)
    if len(binary.param_types) != len(spec.args) or binary.num_warps != num_warps:
        raise RuntimeError(
            f"kernel {kernel.name!r}: compiled binary has {len(binary.param_types)} params and "
            f"{binary.num_warps} warps, expected {len(spec.args)} and {num_warps}"
        )
    _write_debug_files(getattr(kernel, "debug_dir", None), binary)
    loaded = LoadedKernel(binary, device)
    _pinned[id(kernel)] = kernel
    _loaded[key] = loaded
    return loaded


def clear_memory_cache() -> None:
    """Forget every loaded kernel so the next launch goes to the disk cache again (tests).
    Modules stay loaded in the driver: captured CUDA graphs may still use them."""
    _loaded.clear()
    _pinned.clear()
    compile_pool.forget_built()
    for holder in list(_memory_caches):
        holder.clear_memory_cache()


# every live launcher that keeps loaded kernels of its own (`_Binding`, the tuned launchers)
_memory_caches: weakref.WeakSet = weakref.WeakSet()


def register_memory_cache(holder: Any) -> None:
    """Have `clear_memory_cache` call ``holder.clear_memory_cache()`` too, while ``holder`` lives."""
    _memory_caches.add(holder)


ARG_KINDS = ("tensor", "int", "float")
_PARAM_KINDS = {"ptr": "tensor", "i32": "int", "i64": "int", "f32": "float", "f64": "float"}


def bind_launcher(
    kernel: Any, device: int | str | torch.device, arg_kinds: Sequence[str], num_warps: int, *,
    num_stages: int = 1, maxnreg: int | None = None, **constexprs: Any
) -> Callable[..., None]:
    """A launcher of ``kernel`` with fixed ``constexprs``, ``num_warps``, ``num_stages`` and ``maxnreg`` on
    ``device``, for generated wrappers: ``launch(grid, *args)``.

    It trusts what the wrapper's code fixes: ``grid`` is an (x, y, z) tuple of
    non-negative ints; ``args`` has one value per runtime argument, of the kind
    ``arg_kinds`` names at its position; tensors keep the dtype and device they had on
    the first launch. What varies between launches is checked on each one, since the
    binary assumes it: each pointer's 16-byte alignment, each int's divisibility by 16
    and whether it fits in int32. Those facts form a tuple key that picks the loaded
    kernel; a new key goes through ``kernel.specialize``, the device and kind checks, and
    `precompile` once. ``config.interpret`` sends launches to ``kernel.run``.

    The function is generated for the kinds; for ``("tensor", "tensor", "int")``::

        def launch(grid, a0, a1, a2):
            if config.interpret:
                return interpret(grid, (a0, a1, a2))
            p0 = a0.data_ptr()
            p1 = a1.data_ptr()
            key = (p0 & 15 == 0, p1 & 15 == 0, a2 & 15 == 0, -2147483648 <= a2 <= 2147483647)
            loaded = by_key.get(key)
            if loaded is None:
                loaded = load(key, (a0, a1, a2))
            loaded.launch_packed(grid, (p0, p1, a2), (a0, a1, a2))

    Args:
        kernel: a DSL kernel.
        device: CUDA device index, ``"cuda:N"`` or a ``torch.device``.
        arg_kinds: ``"tensor"``, ``"int"`` (bools count) or ``"float"`` per runtime argument.
        num_warps: warps per program (1 to 32).
        num_stages: pipelining depth of the kernel's loops (as `launch`).
        maxnreg: cap on registers per thread, in [16, 255] (None: none; as `launch`).
        constexprs: the kernel's constexprs by name.

    Raises:
        ValueError: an unknown kind, bad num_warps, num_stages, maxnreg or device. At a launch with a new key,
            what `launch` raises for bad arguments, and TypeError for an argument whose
            kind is not the bound one.
    """
    return _Binding(kernel, _device_index(device), tuple(arg_kinds), num_warps, num_stages, maxnreg,
                    constexprs).launch


_binding_ids = itertools.count()


class _Binding:
    """The state behind one `bind_launcher` function; see there."""

    def __init__(self, kernel: Any, device: int, arg_kinds: tuple[str, ...], num_warps: int, num_stages: int,
                 maxnreg: int | None, constexprs: dict):
        unknown = [k for k in arg_kinds if k not in ARG_KINDS]
        if unknown:
            raise ValueError(f"kernel {kernel.name!r}: unknown argument kinds {unknown}; expected each of {ARG_KINDS}")
        _check_num_warps(kernel.name, num_warps)
        check_num_stages(kernel.name, num_stages)
        check_maxnreg(kernel.name, maxnreg)
        self.kernel = kernel
        self.device = device
        self.arg_kinds = arg_kinds
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.maxnreg = maxnreg
        self.constexprs = constexprs
        self.by_key: dict[tuple, LoadedKernel] = {}
        self.launch, self._key = self._generate()
        self.launch.loaded_kernel = self.loaded_kernel
        register_memory_cache(self)

    def clear_memory_cache(self) -> None:
        self.by_key.clear()

    def loaded_kernel(self, args: Sequence[Any]) -> LoadedKernel:
        """The kernel this launcher launched for ``args`` (KeyError: it launched none for their key)."""
        return self.by_key[self._key(*args)]

    def _generate(self) -> tuple[Callable[..., None], Callable[..., tuple]]:
        """The launch function (see `bind_launcher`) and ``key(*args)``, its key of a launch."""
        args = [f"a{i}" for i in range(len(self.arg_kinds))]
        lines = [
            f"def launch({', '.join(['grid', *args])}):",
            "    if config.interpret:",
            f"        return interpret(grid, {_tuple_source(args)})",
        ]
        values, key = [], []
        for i, (a, kind) in enumerate(zip(args, self.arg_kinds)):
            if kind == "tensor":
                lines.append(f"    p{i} = {a}.data_ptr()")
                values.append(f"p{i}")
                key.append(f"p{i} & 15 == 0")
            else:
                values.append(a)
                if kind == "int":
                    key += [f"{a} & 15 == 0", f"-2147483648 <= {a} <= 2147483647"]
        lines += [
            f"    key = {_tuple_source(key)}",
            "    loaded = by_key.get(key)",
            "    if loaded is None:",
            f"        loaded = load(key, {_tuple_source(args)})",
            f"    loaded.launch_packed(grid, {_tuple_source(values)}, {_tuple_source(args)})",
        ]
        pointers = [line for line in lines if line.endswith(".data_ptr()")]
        lines += [f"def key({', '.join(args)}):", *pointers, f"    return {_tuple_source(key)}"]
        source = "\n".join(lines) + "\n"
        filename = f"<inductor_lite launcher {next(_binding_ids)} of {self.kernel.name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # readable tracebacks
        namespace = {"config": config, "interpret": self._interpret, "by_key": self.by_key, "load": self._load}
        exec(compile(source, filename, "exec"), namespace)
        return namespace["launch"], namespace["key"]

    def _load(self, key: tuple, args: tuple) -> LoadedKernel:
        """The loaded kernel for a new key, after checking ``args`` as `launch` would."""
        name = self.kernel.name
        spec = self.kernel.specialize(args, self.constexprs)
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.get_device() != self.device:
                raise ValueError(f"kernel {name!r}: argument {i} is on {a.device}, but the launcher is bound to "
                                 f"cuda:{self.device}")
        loaded = precompile(self.kernel, spec, self.num_warps, self.device, self.num_stages, self.maxnreg)
        for i, (kind, param) in enumerate(zip(self.arg_kinds, loaded.binary.param_types)):
            if _PARAM_KINDS[param] != kind:
                raise TypeError(
                    f"kernel {name!r}: argument {i} was bound as {kind!r} but {type(args[i]).__name__} "
                    f"makes it a {param} parameter"
                )
        self.by_key[key] = loaded
        return loaded

    def _interpret(self, grid: tuple, args: tuple) -> None:
        self.kernel.run(grid, args, self.constexprs, self.num_warps, self.num_stages, self.maxnreg)


def _tuple_source(items: Sequence[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def _device_of(args: Sequence[Any], name: str) -> int:
    for a in args:
        if isinstance(a, torch.Tensor):
            index = a.get_device()
            if index < 0:
                raise ValueError(f"kernel {name!r}: launch needs CUDA tensors, got one on {a.device}")
            return index
    return torch.cuda.current_device()


def _check_num_warps(name: str, num_warps: Any) -> None:
    if not isinstance(num_warps, int) or not 1 <= num_warps <= MAX_NUM_WARPS:
        raise ValueError(f"kernel {name!r}: num_warps must be an int in [1, {MAX_NUM_WARPS}], got {num_warps!r}")


def _device_index(device: int | str | torch.device) -> int:
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"kernels run on CUDA devices, got {device!r}")
    return torch.cuda.current_device() if d.index is None else d.index


def binary_key(kernel: Any, spec: Any, num_warps: int, cc: tuple[int, int], num_stages: int,
               maxnreg: int | None) -> str:
    """The disk-cache key of ``kernel``'s binary for one specialisation and launch
    config on a device of compute capability ``cc``."""
    return cache_key(kernel.key_source(), spec.key(), num_warps, cc, toolchain_versions(), kernel.ftz, num_stages,
                     maxnreg)


def _get_binary(kernel: Any, spec: Any, num_warps: int, device: int, num_stages: int,
                maxnreg: int | None) -> CompiledBinary:
    cc = driver.compute_capability(device)
    key = binary_key(kernel, spec, num_warps, cc, num_stages, maxnreg)
    cache = default_cache()
    prebuilt = compile_pool.take(key)
    if prebuilt is not None:  # built by a worker process: counted, logged and stored as if built here
        log_artifact("ptx", f"// kernel {prebuilt.name} (sm_{cc[0]}{cc[1]}, num_warps={num_warps}, "
                            f"num_stages={num_stages}, maxnreg={maxnreg}), built by a worker\n{prebuilt.ptx}")
        return _built(kernel, key, prebuilt, cache)
    binary = cache.get(key)
    if binary is not None:
        counters["cache_hits"] += 1
        log_artifact("cache", f"hit {kernel.name} {key} in {cache.directory}")
        # compile_ptx logs the PTX of what it builds; log a cached one here
        header = (f"// kernel {binary.name} (sm_{cc[0]}{cc[1]}, num_warps={num_warps}, num_stages={num_stages}, "
                  f"maxnreg={maxnreg}), from the cache")
        log_artifact("ptx", f"{header}\n{binary.ptx}")
        return binary
    with driver.bound_context(device):  # ptx_to_cubin may use the driver's linker
        binary = build_binary(kernel.build_ir(spec), cc, num_warps, num_stages, maxnreg)
    return _built(kernel, key, binary, cache)


def _built(kernel: Any, key: str, binary: CompiledBinary, cache) -> CompiledBinary:
    counters["kernels_compiled"] += 1
    cache.put(key, binary)
    stored = f"stored in {cache.directory}" if cache.enabled else "disk cache off"
    log_artifact("cache", f"miss {kernel.name} {key}: compiled, {stored}")
    return binary


def _write_debug_files(debug_dir: str | None, binary: CompiledBinary) -> None:
    if debug_dir:
        write_files(debug_dir, {binary.name + ".ll": binary.llvm_ir, binary.name + ".ptx": binary.ptx})
