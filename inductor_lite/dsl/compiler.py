"""The NVPTX compiler driver: block IR -> LLVM IR -> optimised LLVM IR -> PTX.

``compile_ptx`` lowers an `ir.Function` (`nvptx.lower`), parses and verifies the
module with LLVM, links libdevice when the kernel calls it, runs the NVPTX target
machine's O3 pipeline (which includes NVVMReflect) and emits PTX. The PTX then goes
to `assembler.ptx_to_cubin`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Optional

import llvmlite
import llvmlite.binding as llvm

from . import ir
from .frontend import CompilationError
from .libdevice import libdevice_fingerprint, link_libdevice
from .nvptx import TRIPLE, LoweringError, lower

# LLVM intrinsics NVPTX has no lowering for: instruction selection aborts the whole
# process on them, so refuse to emit PTX from a module that still calls one.
_FORBIDDEN_INTRINSIC = re.compile(
    r"^llvm\.(exp|exp2|exp10|log|log2|log10|pow|powi|sin|cos|tan|asin|acos|atan|atan2|sinh|cosh|tanh|"
    r"sincos|frexp|ldexp|modf)\."
)

# PTX ISA per compute capability: the oldest ISA that covers the target and the
# instructions we use (max.NaN needs 7.0), all accepted by CUDA 13's ptxas and driver.
_PTX_VERSION = {(7, 5): 80, (8, 0): 80, (8, 6): 80, (8, 7): 80, (8, 9): 80, (9, 0): 80,
                (10, 0): 86, (10, 1): 86, (10, 3): 88, (12, 0): 87, (12, 1): 88}

_llvm_lock = threading.Lock()


class NVPTXCompilationError(CompilationError):
    """A kernel could not be compiled to PTX; the message names the kernel (and the
    source line of the op, when known). A `CompilationError`, as frontend errors are."""


@dataclass(frozen=True)
class CompiledPTX:
    """A kernel compiled to PTX, with what the launcher needs.

    ``name``: the entry symbol (``fn.name``); ``llvm_ir``: the optimised module text;
    ``ptx``: PTX assembly; ``cc``: (major, minor); ``num_warps``: warps per program
    (the launch uses ``32 * num_warps`` threads); ``shared_bytes``: shared memory the
    launch needs, all of it dynamic (the kernel declares no static shared memory, so
    pass exactly this as the launch's dynamic shared size; above 48 KB the function's
    ``MAX_DYNAMIC_SHARED_SIZE_BYTES`` attribute must be raised first);
    ``param_types``: per ``fn.args``, one of 'ptr', 'i32', 'i64', 'f32', 'f64' (pointers
    are 64-bit device addresses; bool/int8/int16/uint8 travel as i32, fp16/bf16 as f32);
    ``cluster_size``: programs per thread-block cluster (``fn.cluster_size``; 1: none).
    """

    name: str
    llvm_ir: str
    ptx: str
    cc: tuple[int, int]
    num_warps: int
    shared_bytes: int
    param_types: tuple[str, ...]
    cluster_size: int = 1


def _init_llvm() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def ptx_isa(cc: tuple[int, int]) -> int:
    """PTX ISA version (e.g. 80 for 8.0) used for compute capability ``cc``.

    Raises:
        ValueError: ``cc`` is older than sm_75 (CUDA 13's minimum).
    """
    cc = tuple(cc)
    if cc in _PTX_VERSION:
        return _PTX_VERSION[cc]
    if cc < (7, 5):
        raise ValueError(f"compute capability {cc[0]}.{cc[1]} is not supported (CUDA 13 needs sm_75+)")
    return max(v for k, v in _PTX_VERSION.items() if k <= cc)


@functools.lru_cache(maxsize=None)
def target_machine(cc: tuple[int, int]) -> llvm.TargetMachine:
    """The NVPTX target machine for ``cc`` (cached)."""
    _init_llvm()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=f"sm_{cc[0]}{cc[1]}", features=f"+ptx{ptx_isa(cc)}", opt=3)


def _optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


def _check_lowerable(module: llvm.ModuleRef, name: str) -> None:
    bad = sorted(f.name for f in module.functions if f.is_declaration and _FORBIDDEN_INTRINSIC.match(f.name))
    if bad:
        raise NVPTXCompilationError(name, None, f"LLVM IR calls {bad}, which NVPTX cannot lower")


def compile_ptx(fn: ir.Function, *, cc: tuple[int, int], num_warps: int, num_stages: int = 1,
                maxnreg: Optional[int] = None) -> CompiledPTX:
    """Compile ``fn`` to PTX for compute capability ``cc`` and ``num_warps`` warps;
    ``num_stages >= 2`` pipelines the loads of ``for`` loops ``num_stages - 1``
    iterations ahead through shared memory (`nvptx_pipeline`; sm_80+); ``maxnreg`` caps the registers per thread (PTX
    ``.maxnreg``, which ptxas meets by spilling if it must; `nvptx` rematerialises
    widened half loads under a cap).

    Raises:
        NVPTXCompilationError: the IR uses something the backend does not support, or
            LLVM rejects the generated module; the message names the kernel.
        FileNotFoundError: the kernel needs libdevice and it cannot be found.
    """
    cc = (int(cc[0]), int(cc[1]))
    try:
        tm = target_machine(cc)
        lowered = lower(fn, num_warps=num_warps, data_layout=str(tm.target_data), cc=cc, num_stages=num_stages,
                        maxnreg=maxnreg)
    except (LoweringError, ValueError) as e:
        raise NVPTXCompilationError(fn.name, getattr(e, "loc", None), str(e)) from e
    text = str(lowered.module)
    with _llvm_lock:
        try:
            module = llvm.parse_assembly(text)
            module.verify()
        except RuntimeError as e:
            raise NVPTXCompilationError(fn.name, None, f"LLVM rejected the generated IR: {e}\n{text}") from e
        try:
            link_libdevice(module, keep={fn.name})
        except ValueError as e:
            raise NVPTXCompilationError(fn.name, None, str(e)) from e
        _optimize(module, tm)
        _check_lowerable(module, fn.name)
        llvm_ir = str(module)
        ptx = tm.emit_assembly(module)
    return CompiledPTX(fn.name, llvm_ir, ptx, cc, num_warps, lowered.shared_bytes, lowered.param_types,
                       fn.cluster_size)


@functools.lru_cache(maxsize=None)
def _dsl_source_hash() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            h.update(name.encode())
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def _assembler_version() -> str:
    from . import assembler

    v = assembler.nvjitlink_version()
    if v is not None:
        return f"nvjitlink {v[0]}.{v[1]}"
    ptxas = assembler.ptxas_path()
    if ptxas:
        st = os.stat(os.path.realpath(ptxas))
        return f"ptxas {os.path.realpath(ptxas)}:{st.st_size}:{int(st.st_mtime)}"
    return "driver"


def toolchain_versions() -> dict[str, str]:
    """Everything besides the kernel itself that decides the compiled binary.

    Keys: ``llvmlite``, ``llvm``, ``libdevice`` (path:size:mtime, or "missing"),
    ``assembler`` (nvJitLink version, or the ptxas binary's path:size:mtime, or
    "driver"), ``dsl_source`` (sha256 of ``inductor_lite/dsl/*.py``).
    """
    try:
        libdevice = libdevice_fingerprint()
    except FileNotFoundError:
        libdevice = "missing"
    return {
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        "libdevice": libdevice,
        "assembler": _assembler_version(),
        "dsl_source": _dsl_source_hash(),
    }
