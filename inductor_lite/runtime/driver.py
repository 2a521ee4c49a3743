"""A small checked layer over the CUDA driver API (``cuda.bindings.driver``, cuda-python 13).

Every cuda-python call returns a tuple whose first element is a ``CUresult``; `check`
turns a failure into `CudaDriverError` naming what was being done. Kernels run in the
context torch uses on the device (normally the device's primary context, which the
CUDA runtime under torch shares), never in a context of our own, and on torch's current
stream, so torch's stream semantics and CUDA-graph capture hold.

Contexts are current per host thread. A launch from a thread whose current context is
not the kernel's (another device's, or none yet) pushes the kernel's context for the
duration of the call and pops it again, leaving the thread as it found it.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import torch
from cuda.bindings import driver as cu

_SUCCESS = cu.CUresult.CUDA_SUCCESS
_DEFAULT_DYNAMIC_SHARED_LIMIT = 48 * 1024  # bytes a block may use without opting in (CUDA guide, "Shared Memory")
MAX_GRID = (2**31 - 1, 65535, 65535)  # CUDA programming guide, "Technical specifications", cc >= 3.0


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed.

    Attributes:
        result: the ``CUresult`` the call returned.
        what: what was being done (names the kernel where there is one).
    """

    def __init__(self, result: cu.CUresult, what: str):
        self.result = result
        self.what = what
        super().__init__(f"{what}: {_error_name(result)} ({_error_string(result)})")


def _error_name(result: cu.CUresult) -> str:
    err, name = cu.cuGetErrorName(result)
    return name.decode() if err == _SUCCESS and name else f"CUresult {int(result)}"


def _error_string(result: cu.CUresult) -> str:
    err, text = cu.cuGetErrorString(result)
    return text.decode() if err == _SUCCESS and text else "no description"


def check(result: tuple, what: str) -> Any:
    """Check the tuple a cuda-python call returned and unwrap its payload.

    Args:
        result: ``(CUresult, *values)`` as every ``cuda.bindings.driver`` call returns.
        what: what the call was doing, for the error message (name the kernel).

    Returns:
        None for a call without outputs, the value for one output, else the tuple of them.

    Raises:
        CudaDriverError: the ``CUresult`` is not ``CUDA_SUCCESS``.
    """
    if result[0] != _SUCCESS:
        raise CudaDriverError(result[0], what)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


@functools.cache
def _device(index: int) -> cu.CUdevice:
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"CUDA device index must be a non-negative int, got {index!r}")
    # torch initialises CUDA first, so its clear errors (no GPU, CUDA used before a fork) come first
    torch.cuda.init()
    check(cu.cuInit(0), "cuInit")
    count = check(cu.cuDeviceGetCount(), "counting CUDA devices")
    if index >= count:
        raise ValueError(f"CUDA device {index} does not exist ({count} visible)")
    return check(cu.cuDeviceGet(index), f"getting CUDA device {index}")


@functools.cache
def _context(index: int) -> tuple[cu.CUcontext, int]:
    """The context of device ``index`` as (handle, handle address): the thread's current
    context when it belongs to that device (torch's runtime uses it), else the device's
    primary context, retained for the life of the process."""
    device = _device(index)
    current = check(cu.cuCtxGetCurrent(), "querying the current CUDA context")
    if int(current) and int(check(cu.cuCtxGetDevice(), "querying the current context's device")) == int(device):
        return current, int(current)
    ctx = check(cu.cuDevicePrimaryCtxRetain(device), f"retaining the primary context of device {index}")
    return ctx, int(ctx)


def context(index: int) -> cu.CUcontext:
    """The context kernels on device ``index`` run in: the thread's current context when
    first asked, if it belongs to that device (torch's runtime uses it), else the
    device's primary context. Fixed for the life of the process.

    Raises:
        ValueError: no such device.
        CudaDriverError: a driver call failed.
    """
    return _context(index)[0]


@contextlib.contextmanager
def bound_context(index: int) -> Iterator[None]:
    """Make device ``index``'s context current on this thread inside the block.

    Raises:
        CudaDriverError: a driver call failed.
    """
    ctx, ctx_id = _context(index)
    if int(check(cu.cuCtxGetCurrent(), "querying the current CUDA context")) == ctx_id:
        yield
        return
    check(cu.cuCtxPushCurrent(ctx), f"making device {index}'s context current")
    try:
        yield
    finally:
        check(cu.cuCtxPopCurrent(), f"restoring the context after using device {index}")


def _device_attribute(index: int, attribute: cu.CUdevice_attribute) -> int:
    return check(cu.cuDeviceGetAttribute(attribute, _device(index)), f"reading {attribute.name} of device {index}")


@functools.cache
def compute_capability(index: int) -> tuple[int, int]:
    """(major, minor) compute capability of CUDA device ``index``, e.g. ``(9, 0)`` for H100.

    Raises:
        ValueError: no such device.
        CudaDriverError: a driver call failed.
    """
    attr = cu.CUdevice_attribute
    return (
        _device_attribute(index, attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
        _device_attribute(index, attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    )


def load_function(image: bytes, name: str, device: int, shared_bytes: int, threads: int) -> cu.CUfunction:
    """Load a cubin into device ``device``'s context and get kernel ``name`` ready to launch.

    Args:
        image: cubin bytes (a NUL-terminated PTX text also works: the driver JIT-compiles it).
        name: the kernel's entry-point symbol.
        device: CUDA device index.
        shared_bytes: dynamic shared memory each block needs, in bytes. Above 48 KiB the
            function's limit is raised (``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES``)
            up to the device's opt-in maximum.
        threads: threads per block the kernel will be launched with (32 * num_warps).

    The module is never unloaded: CUDA graphs that captured a launch keep using it.

    Raises:
        ValueError: the kernel needs more shared memory or threads than the device allows.
        CudaDriverError: a driver call failed (bad image, missing symbol, ...).
    """
    what = f"loading kernel {name!r} on device {device}"
    with bound_context(device):
        module = check(cu.cuModuleLoadData(image), what)
        function = check(cu.cuModuleGetFunction(module, name.encode()), what)
        fattr = cu.CUfunction_attribute
        max_threads = check(cu.cuFuncGetAttribute(fattr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, function), what)
        if threads > max_threads:
            raise ValueError(
                f"kernel {name!r}: launched with {threads} threads per block but its register use allows "
                f"at most {max_threads} on device {device}; use fewer warps"
            )
        static = check(cu.cuFuncGetAttribute(fattr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function), what)
        if static + shared_bytes > _DEFAULT_DYNAMIC_SHARED_LIMIT:
            optin_attribute = cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
            optin = _device_attribute(device, optin_attribute)
            if static + shared_bytes > optin:
                raise ValueError(
                    f"kernel {name!r} needs {static + shared_bytes} bytes of shared memory per block "
                    f"({static} static + {shared_bytes} dynamic); device {device} allows at most {optin}"
                )
            check(
                cu.cuFuncSetAttribute(function, fattr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes),
                f"raising the dynamic shared memory limit of kernel {name!r} to {shared_bytes} bytes",
            )
    return function


def _no_cuda_stream(index: int) -> int:
    raise RuntimeError("this torch build has no CUDA support, so it has no current CUDA stream")


# current_stream(index) -> int: handle of torch's current stream on device ``index`` (the
# capture stream inside ``torch.cuda.graph``). The raw getter is what TorchInductor's
# generated wrappers use: it builds no ``torch.cuda.Stream`` object per launch.
current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda_stream)


def kernel_launcher(
    function: cu.CUfunction, device: int, threads: int, shared_bytes: int, name: str
) -> Callable[[int, int, int, int], None]:
    """A function ``launch(grid_x, grid_y, grid_z, params_address)`` that runs ``function``
    with ``cuLaunchKernel`` on torch's current stream of ``device``, in its context.

    Everything fixed per kernel is bound here, once, so a launch costs one stream query,
    one ``cuCtxGetCurrent`` (the thread's current context may change between launches,
    e.g. through ``torch.cuda.set_device``) and the launch itself.

    Args:
        function: from `load_function` on the same device.
        device: CUDA device index.
        threads: threads per block (32 * num_warps).
        shared_bytes: dynamic shared memory per block, in bytes.
        name: the kernel's name, for errors.

    The returned function takes the grid as ints, already validated against `MAX_GRID`
    (the driver rejects others), and ``params_address``, the address of a ``void*[]``
    with one pointer per kernel parameter. It raises `CudaDriverError` when the launch
    fails.
    """
    ctx = context(device)
    get_current = cu.cuCtxGetCurrent
    launch_kernel = cu.cuLaunchKernel
    stream_of = current_stream

    def launch(grid_x: int, grid_y: int, grid_z: int, params_address: int) -> None:
        stream = stream_of(device)
        if get_current()[1] == ctx:
            result = launch_kernel(
                function, grid_x, grid_y, grid_z, threads, 1, 1, shared_bytes, stream, params_address, 0
            )
        else:
            with bound_context(device):
                result = launch_kernel(
                    function, grid_x, grid_y, grid_z, threads, 1, 1, shared_bytes, stream, params_address, 0
                )
        if result[0] != _SUCCESS:
            raise CudaDriverError(
                result[0],
                f"launching kernel {name!r} with grid {(grid_x, grid_y, grid_z)} and {threads} threads per block",
            )

    return launch
