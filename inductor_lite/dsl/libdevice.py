"""Find NVIDIA's libdevice bitcode and link it into kernel modules.

libdevice (``libdevice.10.bc``, shipped with the CUDA toolkit and with the
``nvidia-nvvm`` wheel) implements the CUDA math library (``__nv_expf``,
``__nv_tanhf`` ...) as LLVM bitcode. Kernels call those functions; the compiler
links in each one it calls (cut out of libdevice once per process), marks everything
but the kernel ``internal`` and lets the optimiser inline it. NVVMReflect (part of the NVPTX O3 pipeline)
resolves libdevice's ``__nvvm_reflect("__CUDA_FTZ")`` queries from the module
flag ``nvvm-reflect-ftz``.
"""

from __future__ import annotations

import functools
import os
import shutil

import llvmlite.binding as llvm

LIBDEVICE_NAME = "libdevice.10.bc"
_INSTALL_HINT = (
    "install the CUDA toolkit (its nvvm/libdevice directory), or `pip install nvidia-nvvm`, "
    "or set CUDA_HOME to a CUDA toolkit"
)


def _candidate_from_root(root: str) -> str:
    return os.path.join(root, "nvvm", "libdevice", LIBDEVICE_NAME)


def _from_env() -> str | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            path = _candidate_from_root(root)
            if os.path.isfile(path):
                return path
    return None


def _from_pathfinder() -> str | None:
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:
        return None
    finder = getattr(pathfinder, "find_bitcode_lib", None)
    if finder is None:
        return None
    try:
        path = finder("device")
    except Exception:  # pathfinder raises its own not-found types; any failure means "not here"
        return None
    return path if path and os.path.isfile(path) else None


def _ptxas_path() -> str | None:
    try:
        import cuda.pathfinder as pathfinder

        path = pathfinder.find_nvidia_binary_utility("ptxas")
    except Exception:  # older pathfinder versions lack the function or raise when absent
        path = None
    return path or shutil.which("ptxas")


def _from_ptxas() -> str | None:
    ptxas = _ptxas_path()
    if not ptxas:
        return None
    # PATH may hold a wrapper script; the toolkit layout is next to the real binary.
    for candidate in (ptxas, os.path.realpath(ptxas)):
        path = _candidate_from_root(os.path.dirname(os.path.dirname(candidate)))
        if os.path.isfile(path):
            return path
    return None


def find_libdevice() -> str:
    """Absolute path of ``libdevice.10.bc``.

    Search order: ``$CUDA_HOME`` / ``$CUDA_PATH``; ``cuda.pathfinder.find_bitcode_lib
    ('device')`` (which also knows the ``nvidia-nvvm`` wheel); the toolkit holding the
    ``ptxas`` that ``cuda.pathfinder`` or ``PATH`` finds (``<bin>/../nvvm/libdevice``);
    ``/usr/local/cuda/nvvm/libdevice``.

    Raises:
        FileNotFoundError: none of those places has it; the message says what to install.
    """
    for finder in (_from_env, _from_pathfinder, _from_ptxas):
        path = finder()
        if path:
            return os.path.abspath(path)
    fallback = _candidate_from_root("/usr/local/cuda")
    if os.path.isfile(fallback):
        return fallback
    raise FileNotFoundError(f"cannot find {LIBDEVICE_NAME} (CUDA's math library bitcode): {_INSTALL_HINT}")


@functools.lru_cache(maxsize=None)
def _bitcode(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _global_dce(module: llvm.ModuleRef) -> None:
    llvm.initialize_all_targets()
    tm = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
    pm = llvm.create_new_module_pass_manager()
    pm.add_global_dead_code_eliminate_pass()
    pm.run(module, pb)


@functools.lru_cache(maxsize=None)
def _function_bitcode(path: str, name: str) -> bytes:
    """Bitcode of libdevice cut down to ``name`` and what it uses (cached per process).

    Linking a few small modules instead of all 350 functions keeps a compile fast.
    """
    lib = llvm.parse_bitcode(_bitcode(path))
    if lib.get_function(name).is_declaration:
        raise ValueError(f"libdevice has no function {name}")
    for fn in lib.functions:
        if not fn.is_declaration and fn.name != name:
            fn.linkage = llvm.Linkage.internal
    _global_dce(lib)
    return lib.as_bitcode()


def link_libdevice(module: llvm.ModuleRef, keep: set[str]) -> None:
    """Link the libdevice functions ``module`` declares, then internalise every defined
    function not in ``keep``.

    The functions in ``keep`` (the kernel entries) stay external; everything else
    becomes ``internal`` so the optimiser inlines and then deletes it.

    Raises:
        FileNotFoundError: libdevice cannot be found (see `find_libdevice`).
        ValueError: the module calls an ``__nv_`` function libdevice does not have.
    """
    path = find_libdevice()
    wanted = [f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_")]
    for name in wanted:
        part = llvm.parse_bitcode(_function_bitcode(path, name))
        part.triple = module.triple
        part.data_layout = module.data_layout
        module.link_in(part)
    for fn in module.functions:
        if not fn.is_declaration and fn.name not in keep:
            fn.linkage = llvm.Linkage.internal


def libdevice_fingerprint() -> str:
    """``path:size:mtime`` of the libdevice in use, for compile-cache keys."""
    path = find_libdevice()
    st = os.stat(path)
    return f"{path}:{st.st_size}:{int(st.st_mtime)}"
