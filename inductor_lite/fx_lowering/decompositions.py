"""The decomposition table AOTAutograd applies before lowering.

Chosen from ``torch._decomp``: composite ops that decompose into pointwise ops we
lower and fuse (activations and their backwards, pointwise loss backwards, addcmul &
co.). Ops whose aten implementation beats a decomposition into pieces stay whole and
become extern calls: layer_norm, softmax and their backwards, matmuls, convolution,
attention, embedding, reductions. GELU, SiLU, sigmoid/tanh backward, threshold
backward and dropout backward have direct lowerings, so they are not decomposed.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

DECOMPOSED_OPS = [
    aten.addcdiv,
    aten.addcmul,
    aten.celu,
    aten.deg2rad,
    aten.elu,
    aten.elu_backward,
    aten.frac,
    aten.glu,
    aten.glu_backward,
    aten.hardshrink,
    aten.hardsigmoid,
    aten.hardsigmoid_backward,
    aten.hardswish,
    aten.hardswish_backward,
    aten.hardtanh,
    aten.hardtanh_backward,
    aten.huber_loss_backward,
    aten.leaky_relu,
    aten.leaky_relu_backward,
    aten.lerp,
    aten.log_sigmoid_backward,
    aten.logit,
    aten.logit_backward,
    aten.mish,
    aten.mish_backward,
    aten.mse_loss_backward,
    aten.nan_to_num,
    aten.selu,
    aten.smooth_l1_loss_backward,
    aten.softplus,
    aten.softplus_backward,
    aten.softshrink,
    aten.xlogy,
]


def decomposition_table() -> dict:
    """``{OpOverload: decomposition}`` for AOTAutograd's ``decompositions=``."""
    return get_decompositions(DECOMPOSED_OPS)
