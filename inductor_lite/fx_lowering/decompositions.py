"""The decomposition table AOTAutograd applies before lowering.

Chosen from ``torch._decomp``: composite ops that decompose into pointwise ops and
reductions we lower and fuse: activations and their backwards, pointwise loss
backwards, addcmul & co., and (as TorchInductor does) softmax, log_softmax and
``_safe_softmax`` with their backwards, LayerNorm, RMSNorm, GroupNorm and BatchNorm
(training and inference) with their backwards, ``nll_loss`` forward and backward
(cross-entropy reaches the graph as log_softmax + nll_loss), ``logsumexp`` and vector
norms, and the pointwise losses (MSE, smooth L1, Huber, binary cross-entropy with and
without logits, soft margin: ``reduction`` none, mean or sum) and math composites
(``sinc``, ``logaddexp``, ``heaviside``, ``xlog1py``, ``log_ndtr``, ...)
as Inductor decomposes them. Their pieces (``amax``, ``sum``, ``var_mean``, ``exp``, ...) lower to
`Reduction` and `Pointwise` nodes that the scheduler fuses into one kernel per row
pattern. ``index_copy`` becomes ``index_put`` and ``index_fill`` a ``where``, as in
Inductor, so they are kernels of ours too. Matmuls, convolution, attention and embedding stay whole and become extern
calls. GELU, SiLU, sigmoid/tanh backward and dropout backward have direct lowerings,
so they are not decomposed. ``threshold_backward`` (ReLU's) has one too but is
decomposed, as Inductor does, into ``where(x <= threshold, 0, grad)``: the partitioner
can then save the one-byte mask ``x <= threshold`` rather than the activation itself
(T5's feed-forward layers saved a bfloat16 tensor per layer more than Inductor's).
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

DECOMPOSED_OPS = [
    aten._fused_rms_norm,
    aten._fused_rms_norm_backward,
    aten._log_softmax,
    aten._log_softmax_backward_data,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_functional,
    aten._native_batch_norm_legit_no_training,
    aten._safe_softmax,
    aten._softmax,
    aten._softmax_backward_data,
    aten.linalg_vector_norm,
    aten.logsumexp,
    aten.native_batch_norm,
    aten.native_batch_norm_backward,
    aten.native_group_norm,
    aten.native_group_norm_backward,
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.nll_loss_backward,
    aten.nll_loss_forward,
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
    aten.threshold_backward,
    aten.xlogy,
    # pointwise losses; l1_loss is CompositeImplicitAutograd and never reaches the table
    aten.binary_cross_entropy,
    aten.binary_cross_entropy_backward,
    aten.binary_cross_entropy_with_logits,
    aten.huber_loss,
    aten.log_sigmoid_forward,
    aten.mse_loss,
    aten.smooth_l1_loss,
    aten.soft_margin_loss,
    aten.soft_margin_loss_backward,
    # math composites of ops with lowerings
    aten.heaviside,
    aten.isneginf,
    aten.isposinf,
    aten.logaddexp,
    aten.logaddexp2,
    aten.mvlgamma,
    aten.rad2deg,
    aten.sinc,
    aten.special_entr,
    aten.special_log_ndtr,
    aten.special_xlog1py,
    # indexed writes of ops with lowerings (`indexed_writes`): index_put, a where
    aten.index_copy,
    aten.index_fill,
]


def decomposition_table() -> dict:
    """``{OpOverload: decomposition}`` for AOTAutograd's ``decompositions=``."""
    return get_decompositions(DECOMPOSED_OPS)
