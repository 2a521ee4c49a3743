"""The runtime: CUDA driver layer, on-disk binary cache, kernel launcher.

``launch`` is what ``Kernel.run`` calls for CUDA tensors; ``precompile`` does all but
the launch, for callers that compile ahead of time.
"""

from .cache import BinaryCache, CompiledBinary, cache_key, default_cache
from .driver import CudaDriverError, compute_capability
from .launcher import LoadedKernel, ParamBuffer, clear_memory_cache, launch, precompile

__all__ = [
    "BinaryCache",
    "CompiledBinary",
    "CudaDriverError",
    "LoadedKernel",
    "ParamBuffer",
    "cache_key",
    "clear_memory_cache",
    "compute_capability",
    "default_cache",
    "launch",
    "precompile",
]
