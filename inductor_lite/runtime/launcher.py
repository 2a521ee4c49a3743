"""Launch DSL kernels on CUDA tensors: specialise, get a binary, load it once, launch.

Per launch the work is: ``kernel.specialize``, one dict lookup keyed by (kernel, spec,
num_warps, device), grid checks, refilling a parameter buffer built once per loaded
kernel, and ``cuLaunchKernel`` on torch's current stream. Everything else happens on
the first launch of a specialisation (or ahead of time, through `precompile`):

    disk cache hit  -> counters["cache_hits"] += 1; log the ``ptx`` artifact
    disk cache miss -> kernel.build_ir -> compile_ptx (which logs ``ptx``) -> ptx_to_cubin,
                       stored in the cache; counters["kernels_compiled"] += 1
    then: log the ``cache`` artifact, dump ``<name>.ll`` and ``<name>.ptx`` into
    ``kernel.debug_dir`` when set, load the module on the device.

The kernel object is duck-typed (``inductor_lite.dsl.kernel.Kernel``): ``name``,
``source``, ``specialize(args, constexprs)`` returning a hashable specialisation with
``args`` (one ``ir.ArgSpec`` per runtime argument) and ``key()`` (stable across
processes; it covers the constexprs), ``build_ir(spec)``, optional ``debug_dir``.
"""

from __future__ import annotations

import ctypes
import operator
import os
import threading
from typing import Any, Mapping, Sequence

import torch

from . import driver
from .cache import CompiledBinary, cache_key, default_cache
from ..counters import counters
from ..dsl.assembler import ptx_to_cubin
from ..dsl.compiler import compile_ptx, toolchain_versions
from ..logs import log_artifact

_CTYPES = {
    "ptr": ctypes.c_void_p,
    "i32": ctypes.c_int32,
    "i64": ctypes.c_int64,
    "f32": ctypes.c_float,
    "f64": ctypes.c_double,
}
MAX_NUM_WARPS = 32  # 1024 threads per block, the CUDA limit for every compute capability


class ParamBuffer:
    """The ``kernelParams`` array of one loaded kernel, built once and refilled per launch.

    One ctypes scalar per parameter plus a ``void*[]`` of their addresses; `address` is
    what ``cuLaunchKernel`` takes. The driver copies the values at launch, so the buffer
    may be refilled as soon as the launch call returns.

    Args:
        param_types: one of ``ptr`` (a CUDA tensor's ``data_ptr()``), ``i32``, ``i64``,
            ``f32``, ``f64`` per runtime argument.
        name: the kernel's name, for errors.
        device: CUDA device index every tensor argument must live on.

    Raises:
        ValueError: an unknown param type.
    """

    def __init__(self, param_types: Sequence[str], name: str, device: int):
        unknown = [t for t in param_types if t not in _CTYPES]
        if unknown:
            raise ValueError(f"kernel {name!r}: unknown param types {unknown}; expected each of {list(_CTYPES)}")
        self.param_types = tuple(param_types)
        self.name = name
        self.device = device
        self.slots = [_CTYPES[t]() for t in self.param_types]
        self._pointers = (ctypes.c_void_p * max(1, len(self.slots)))(*(ctypes.addressof(s) for s in self.slots))
        self.address = ctypes.addressof(self._pointers)

    def fill(self, args: Sequence[Any]) -> None:
        """Write the launch's argument values into the buffer.

        Args:
            args: the runtime arguments in order: a CUDA tensor on ``device`` for each
                ``ptr``, an int for ``i32``/``i64`` (bools count), a float or int for
                ``f32``/``f64`` (rounded to the parameter's precision).

        Raises:
            TypeError: wrong number of arguments, or an argument of the wrong kind.
            ValueError: a tensor on another device, or an int that overflows its type.
        """
        if len(args) != len(self.slots):
            raise TypeError(f"kernel {self.name!r} takes {len(self.slots)} runtime arguments, got {len(args)}")
        for i, (kind, slot, value) in enumerate(zip(self.param_types, self.slots, args)):
            try:
                if kind == "ptr":
                    if value.get_device() != self.device:
                        raise ValueError(
                            f"kernel {self.name!r}: argument {i} is on {value.device}, "
                            f"but the kernel runs on cuda:{self.device}"
                        )
                    slot.value = value.data_ptr()
                else:
                    slot.value = value
                    if kind[0] == "i" and slot.value != value:  # ctypes wraps silently on overflow
                        raise ValueError(f"kernel {self.name!r}: argument {i} = {value} does not fit in {kind}")
            except (TypeError, AttributeError):
                expected = {"ptr": "a CUDA tensor", "i32": "an int", "i64": "an int"}.get(kind, "a float")
                raise TypeError(
                    f"kernel {self.name!r}: argument {i} ({kind}) must be {expected}, got {type(value).__name__}"
                ) from None


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
        self.function = driver.load_function(binary.cubin, binary.name, device, binary.shared_bytes, self.threads)
        self.params = ParamBuffer(binary.param_types, binary.name, device)
        self._lock = threading.Lock()  # the shared ParamBuffer must not be refilled mid-launch by another thread

    def launch(self, grid: Sequence[int], args: Sequence[Any]) -> None:
        """Launch on torch's current stream of the device. An empty grid launches nothing.

        Args:
            grid: programs along (x[, y[, z]]).
            args: runtime arguments, as `ParamBuffer.fill` takes them.

        Raises:
            TypeError, ValueError: bad grid or arguments (see `normalize_grid`, `ParamBuffer.fill`).
            CudaDriverError: the launch failed.
        """
        dims = normalize_grid(grid, self.name)
        if 0 in dims:
            return
        with self._lock:
            self.params.fill(args)
            driver.launch_kernel(
                self.function, self.device, dims, self.threads, self.binary.shared_bytes, self.params.address, self.name
            )


_loaded: dict[tuple, LoadedKernel] = {}
# id(kernel) -> kernel: keeps every kernel in `_loaded` alive so its id is never reused.
# Kernels are keyed by identity because a Kernel need not be hashable.
_pinned: dict[int, Any] = {}


def launch(
    kernel: Any, grid: Sequence[int], args: Sequence[Any], constexprs: Mapping[str, Any], num_warps: int
) -> None:
    """Run ``kernel`` on CUDA tensors, compiling and loading it on first use.

    Args:
        kernel: a DSL kernel (see the module docstring).
        grid: programs along (x[, y[, z]]): x <= 2**31 - 1, y and z <= 65535.
        args: runtime arguments in order: CUDA tensors (all on one device) and numbers.
        constexprs: compile-time constants by name.
        num_warps: warps per program (1 to 32).

    Raises:
        ValueError, TypeError: bad grid, arguments or num_warps; tensors not on CUDA.
        CudaDriverError: a driver call failed; the message names the kernel.
    """
    spec = kernel.specialize(args, constexprs)
    device = _device_of(args, kernel.name)
    loaded = _loaded.get((id(kernel), spec, num_warps, device))
    if loaded is None:
        loaded = precompile(kernel, spec, num_warps, device)
    loaded.launch(grid, args)


def precompile(kernel: Any, spec: Any, num_warps: int, device: int | str | torch.device) -> LoadedKernel:
    """Everything `launch` does before the launch: get the binary (disk cache or build),
    count, log, dump debug files, load it on ``device``. Idempotent.

    Args:
        kernel: a DSL kernel.
        spec: ``kernel.specialize(args, constexprs)``.
        num_warps: warps per program (1 to 32).
        device: CUDA device index, ``"cuda:N"`` or a ``torch.device``.

    Raises:
        ValueError: bad num_warps or device.
        CudaDriverError: a driver call failed.
    """
    device = _device_index(device)
    key = (id(kernel), spec, num_warps, device)
    loaded = _loaded.get(key)
    if loaded is not None:
        return loaded
    if not isinstance(num_warps, int) or not 1 <= num_warps <= MAX_NUM_WARPS:
        raise ValueError(f"kernel {kernel.name!r}: num_warps must be an int in [1, {MAX_NUM_WARPS}], got {num_warps!r}")
    binary = _get_binary(kernel, spec, num_warps, device)
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


def _device_of(args: Sequence[Any], name: str) -> int:
    for a in args:
        if isinstance(a, torch.Tensor):
            index = a.get_device()
            if index < 0:
                raise ValueError(f"kernel {name!r}: launch needs CUDA tensors, got one on {a.device}")
            return index
    return torch.cuda.current_device()


def _device_index(device: int | str | torch.device) -> int:
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"kernels run on CUDA devices, got {device!r}")
    return torch.cuda.current_device() if d.index is None else d.index


def _get_binary(kernel: Any, spec: Any, num_warps: int, device: int) -> CompiledBinary:
    cc = driver.compute_capability(device)
    key = cache_key(kernel.source, spec.key(), num_warps, cc, toolchain_versions())
    cache = default_cache()
    binary = cache.get(key)
    if binary is not None:
        counters["cache_hits"] += 1
        log_artifact("cache", f"hit {kernel.name} {key} in {cache.directory}")
        # compile_ptx logs the PTX of what it builds; log a cached one here
        header = f"// kernel {binary.name} (sm_{cc[0]}{cc[1]}, num_warps={num_warps}), from the cache"
        log_artifact("ptx", f"{header}\n{binary.ptx}")
        return binary
    with driver.bound_context(device):  # ptx_to_cubin may use the driver's linker
        binary = _compile(kernel, spec, num_warps, cc)
    counters["kernels_compiled"] += 1
    cache.put(key, binary)
    stored = f"stored in {cache.directory}" if cache.enabled else "disk cache off"
    log_artifact("cache", f"miss {kernel.name} {key}: compiled, {stored}")
    return binary


def _compile(kernel: Any, spec: Any, num_warps: int, cc: tuple[int, int]) -> CompiledBinary:
    compiled = compile_ptx(kernel.build_ir(spec), cc=cc, num_warps=num_warps)
    return CompiledBinary(
        name=compiled.name,
        cubin=ptx_to_cubin(compiled.ptx, cc),
        shared_bytes=compiled.shared_bytes,
        num_warps=compiled.num_warps,
        param_types=tuple(compiled.param_types),
        cc=tuple(compiled.cc),
        ptx=compiled.ptx,
        llvm_ir=compiled.llvm_ir,
    )


def _write_debug_files(debug_dir: str | None, binary: CompiledBinary) -> None:
    if not debug_dir:
        return
    os.makedirs(debug_dir, exist_ok=True)
    for suffix, text in ((".ll", binary.llvm_ir), (".ptx", binary.ptx)):
        with open(os.path.join(debug_dir, binary.name + suffix), "w") as f:
            f.write(text)
