"""One kernel binary from block IR: our NVPTX lowering, then the PTX assembler.

Pure (no cache, counter, log or CUDA context) and free of torch, so that compile
workers (`compile_pool`) import only the DSL compiler, not torch: a worker's start then
costs a fraction of a second.
"""

from __future__ import annotations

from typing import Any

from ..dsl.assembler import ptx_to_cubin
from ..dsl.compiler import compile_ptx
from .cache import CompiledBinary


def build_binary(fn: Any, cc: tuple[int, int], num_warps: int, num_stages: int = 1,
                 maxnreg: int | None = None) -> CompiledBinary:
    """The binary of block-IR function ``fn`` (``Kernel.build_ir``) for compute
    capability ``cc``: `compile_ptx` then `ptx_to_cubin`.

    Raises:
        NVPTXCompilationError: what `compile_ptx` raises.
        RuntimeError: the PTX does not assemble, or no assembler is available.
    """
    compiled = compile_ptx(fn, cc=cc, num_warps=num_warps, num_stages=num_stages, maxnreg=maxnreg)
    return CompiledBinary(
        name=compiled.name,
        cubin=ptx_to_cubin(compiled.ptx, cc),
        shared_bytes=compiled.shared_bytes,
        num_warps=compiled.num_warps,
        param_types=tuple(compiled.param_types),
        cc=tuple(compiled.cc),
        ptx=compiled.ptx,
        llvm_ir=compiled.llvm_ir,
        cluster_size=compiled.cluster_size,
    )
