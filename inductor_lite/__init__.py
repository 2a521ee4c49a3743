"""inductor_lite: a torch.compile backend with its own fused-kernel DSL and LLVM NVPTX compiler.

``import inductor_lite`` registers the backend, then
``torch.compile(model, backend="inductor_lite")``. Exports `config` (every knob, each
with an ``INDUCTOR_LITE_*`` environment variable), `counters` (graphs compiled,
kernels generated, extern calls, ...) and `reset_counters`.
"""

from __future__ import annotations

from .backend import inductor_lite_backend
from .config import config
from .counters import counters
from .counters import reset as reset_counters

__all__ = ["config", "counters", "inductor_lite_backend", "reset_counters"]


def _register() -> None:
    """Register the backend name unless Dynamo has it or will load it from the entry point."""
    from torch._dynamo.backends import registry

    if "inductor_lite" in registry._COMPILER_FNS or registry._BACKENDS.get("inductor_lite") is not None:
        return
    registry.register_backend(compiler_fn=inductor_lite_backend, name="inductor_lite")


_register()
