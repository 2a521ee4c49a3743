"""What the generated wrapper modules call at run time, chosen for low per-call overhead.

A wrapper's ``call`` runs one line per allocation, view, extern call and kernel launch,
so each line's Python cost adds up (hundreds of lines per training step). The
allocation and view helpers are the C++ entry points TorchInductor's own wrappers use
(``torch._C._dynamo.guards``); they skip torch's Python argument parser and the
dispatcher: 0.35 us saved per view and 0.45 us per allocation, measured on CPU with
torch 2.13 (PyTorch's own comment there says ~2 us per allocation). Their Python
equivalents below stand in where a torch build lacks them.

``reinterpret_tensor(base, size, stride, offset)``
    A strided view (no copy) of ``base``'s memory; ``offset`` (elements) is relative to
    ``base``'s own storage offset. Sizes and strides are tuples of ints.
``empty_strided_cpu(size, stride, dtype)``
    An uninitialised CPU tensor; ``size`` and ``stride`` must be tuples of ints.
``empty_strided_cuda(size, stride, dtype)``
    The same on the *current* CUDA device (the wrapper sets it around ``call``).
``constant_on(tensor, device)``
    A graph constant's copy on ``device``, made once when the module loads.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

_guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)


def _reinterpret_tensor(base: torch.Tensor, size: tuple, stride: tuple, offset: int = 0) -> torch.Tensor:
    return base.as_strided(size, stride, base.storage_offset() + offset)


def _empty_strided_cpu(size: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="cpu")


def _empty_strided_cuda(size: tuple, stride: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="cuda")


reinterpret_tensor = getattr(_guards, "_reinterpret_tensor", _reinterpret_tensor)
empty_strided_cpu = getattr(_guards, "_empty_strided_cpu", _empty_strided_cpu)
empty_strided_cuda = getattr(_guards, "_empty_strided_cuda", _empty_strided_cuda)


def direct_op(op: Any) -> Callable:
    """The fastest callable equivalent to calling ``op``.

    For a plain ``torch._ops.OpOverload`` (``torch.ops.aten.mm.default``) that is its
    C++ entry point ``op._op``: ``OpOverload.__call__`` is only ``self._op(*args,
    **kwargs)`` (torch 2.11 and 2.13), so this skips one Python frame and the argument
    repacking per extern call. Subclasses (TorchBind ops, whose ``__call__`` does more)
    and other callables are returned unchanged.
    """
    if type(op) is torch._ops.OpOverload and callable(getattr(op, "_op", None)):
        return op._op
    return op


def constant_on(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A real copy of graph constant ``tensor`` on ``device`` (a 0-d CPU constant that a
    CUDA kernel reads). Modules load while the compiler's fake mode may be active, where
    ``tensor.to`` would make a fake tensor: the copy is made outside it."""
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        return tensor.to(device)


def ensure_strides(t: torch.Tensor, size: tuple, stride: tuple) -> torch.Tensor:
    """``t`` if its memory is laid out as ``size``/``stride`` say, else a copy laid out so.

    Extern ops' output layouts come from fake tensors; a real kernel may choose other
    strides, and generated kernels index with the assumed ones. The wrapper calls this
    only when ``t.stride() != stride or t.size() != size`` (an inline check, cheaper
    than a call). Strides of size-1 dimensions are ignored: they place no element
    differently, so ``t`` is returned as is (it keeps the strides the real op chose).

    Raises:
        RuntimeError: ``t`` has a different size (a compile-time assumption broke).
    """
    if tuple(t.size()) != tuple(size):
        raise RuntimeError(f"extern output has size {tuple(t.size())}, expected {tuple(size)}")
    if t.numel() <= 1 or all(n == 1 or a == b for n, a, b in zip(size, t.stride(), stride)):
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
