"""PTX -> cubin.

Three assemblers, tried in this order: nvJitLink (``cuda.bindings.nvjitlink``, when
its shared library loads), the CUDA driver's JIT linker (``cuLinkCreate`` ...; needs a
current CUDA context, which the runtime sets up before calling), and the ``ptxas``
binary (found through ``cuda.pathfinder`` or ``PATH``). Every failure raises
`RuntimeError` carrying the assembler's log and the kernel name.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile


def _arch(cc: tuple[int, int]) -> str:
    major, minor = cc
    return f"sm_{major}{minor}"


def kernel_name(ptx: str) -> str:
    """The first ``.entry`` symbol of a PTX module, for error messages ("?" if none)."""
    m = re.search(r"\.entry\s+([A-Za-z_$][\w$]*)", ptx)
    return m.group(1) if m else "?"


@functools.lru_cache(maxsize=None)
def nvjitlink_version() -> tuple[int, int] | None:
    """nvJitLink's (major, minor), or None when the bindings or the library are missing."""
    try:
        from cuda.bindings import nvjitlink

        return tuple(nvjitlink.version())
    except Exception:  # ImportError, or pathfinder's "library not found" when it is called
        return None


@functools.lru_cache(maxsize=None)
def ptxas_path() -> str | None:
    """Path of a ``ptxas`` binary, or None."""
    try:
        import cuda.pathfinder as pathfinder

        path = pathfinder.find_nvidia_binary_utility("ptxas")
    except Exception:  # older pathfinder versions lack the function
        path = None
    return path or shutil.which("ptxas")


def can_assemble() -> bool:
    """Whether `check_ptx_assembles` can run here (nvJitLink or ptxas present)."""
    return nvjitlink_version() is not None or ptxas_path() is not None


def _nvjitlink_log(nvjitlink, handle, getter_size, getter) -> str:
    size = getter_size(handle)
    if not size:
        return ""
    buf = bytearray(size)
    getter(handle, buf)
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


def _nvjitlink_cubin(ptx: str, cc: tuple[int, int]) -> bytes:
    from cuda.bindings import nvjitlink

    name = kernel_name(ptx)
    handle = nvjitlink.create(2, [f"-arch={_arch(cc)}", "-O3"])
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), f"{name}.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            log = _nvjitlink_log(nvjitlink, handle, nvjitlink.get_error_log_size, nvjitlink.get_error_log)
            raise RuntimeError(f"nvJitLink failed to assemble kernel {name} for {_arch(cc)}: {e}\n{log}") from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)


def _driver_cubin(ptx: str, cc: tuple[int, int]) -> bytes:
    import ctypes

    from cuda.bindings import driver

    name = kernel_name(ptx)
    log_size = 1 << 16
    error_log = bytearray(log_size)
    opts = [driver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER, driver.CUjit_option.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES]
    vals = [error_log, log_size]

    def check(result, what):
        err = result[0] if isinstance(result, tuple) else result
        if err != driver.CUresult.CUDA_SUCCESS:
            log = bytes(error_log).rstrip(b"\0").decode(errors="replace")
            raise RuntimeError(f"CUDA driver {what} failed for kernel {name} ({err!r}):\n{log}")
        return result[1:] if isinstance(result, tuple) else ()

    (state,) = check(driver.cuLinkCreate(len(opts), opts, vals), "cuLinkCreate")
    try:
        data = ptx.encode() + b"\0"
        check(
            driver.cuLinkAddData(state, driver.CUjitInputType.CU_JIT_INPUT_PTX, data, len(data),
                                 f"{name}.ptx".encode(), 0, None, None),
            "cuLinkAddData",
        )
        cubin_ptr, size = check(driver.cuLinkComplete(state), "cuLinkComplete")
        # The image belongs to the link state: copy it out before cuLinkDestroy.
        return ctypes.string_at(int(cubin_ptr), int(size))
    finally:
        driver.cuLinkDestroy(state)


def _ptxas_cubin(ptx: str, cc: tuple[int, int]) -> bytes:
    exe = ptxas_path()
    name = kernel_name(ptx)
    with tempfile.TemporaryDirectory(prefix="inductor_lite_ptxas_") as tmp:
        src = os.path.join(tmp, f"{name}.ptx")
        out = os.path.join(tmp, f"{name}.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([exe, f"-arch={_arch(cc)}", "-O3", src, "-o", out], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"ptxas failed to assemble kernel {name} for {_arch(cc)}:\n{proc.stderr}{proc.stdout}")
        with open(out, "rb") as f:
            return f.read()


def _driver_has_context() -> bool:
    try:
        from cuda.bindings import driver

        err, ctx = driver.cuCtxGetCurrent()
        return err == driver.CUresult.CUDA_SUCCESS and int(ctx) != 0
    except Exception:  # no driver library or no cuda-python: the driver path is unavailable
        return False


def ptx_to_cubin(ptx: str, cc: tuple[int, int]) -> bytes:
    """Assemble ``ptx`` into a cubin for compute capability ``cc`` (e.g. ``(9, 0)``).

    Uses nvJitLink if its library loads, else the CUDA driver's linker if a context
    is current, else ``ptxas``.

    Raises:
        RuntimeError: the assembler rejected the PTX (the message has its log and the
            kernel name), or no assembler is available.
    """
    if nvjitlink_version() is not None:
        return _nvjitlink_cubin(ptx, cc)
    if _driver_has_context():
        return _driver_cubin(ptx, cc)
    if ptxas_path() is not None:
        return _ptxas_cubin(ptx, cc)
    raise RuntimeError(
        f"cannot assemble kernel {kernel_name(ptx)}: no nvJitLink library, no current CUDA context and no "
        "ptxas (install nvidia-nvjitlink or the CUDA toolkit)"
    )


def check_ptx_assembles(ptx: str, cc: tuple[int, int]) -> None:
    """Assemble ``ptx`` with nvJitLink or ptxas and discard the result (for CPU-only CI).

    Raises:
        RuntimeError: the PTX does not assemble (with the log), or neither tool exists.
    """
    if nvjitlink_version() is not None:
        _nvjitlink_cubin(ptx, cc)
    elif ptxas_path() is not None:
        _ptxas_cubin(ptx, cc)
    else:
        raise RuntimeError("cannot check PTX: neither nvJitLink nor ptxas is available")
