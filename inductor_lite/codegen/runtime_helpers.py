"""Small functions the generated wrapper modules call at run time."""

from __future__ import annotations

from typing import Sequence

import torch


def reinterpret_tensor(base: torch.Tensor, size: Sequence[int], stride: Sequence[int], offset: int) -> torch.Tensor:
    """A strided view of ``base``'s memory; ``offset`` (elements) is relative to ``base``'s data pointer."""
    return base.as_strided(size, stride, base.storage_offset() + offset)


def ensure_strides(t: torch.Tensor, size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """``t`` if it has ``size`` and ``stride`` (what compile time assumed), else a copy laid out so.

    Extern ops' output layouts come from fake tensors; a real kernel may choose other
    strides, and generated kernels index with the assumed ones.

    Raises:
        RuntimeError: ``t`` has a different size (a compile-time assumption broke).
    """
    if tuple(t.size()) != tuple(size):
        raise RuntimeError(f"extern output has size {tuple(t.size())}, expected {tuple(size)}")
    if tuple(t.stride()) == tuple(stride) or t.numel() <= 1:
        return t
    out = torch.empty_strided(size, stride, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out
