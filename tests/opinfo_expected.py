"""What `test_opinfo` expects of each OpInfo op: skipped, values undefined, or failing, and why.

- `SKIP`: ops not run at all (random outputs, CUDA-only ops), by name, with the reason.
- `UNDEFINED_VALUES`: ops whose outputs are uninitialised memory (``empty`` and kin):
  only dtypes, shapes, devices and layouts are compared.
- `XFAIL`: ``(op name, mode) -> reason``: cases that crash or give a wrong result
  with ``fallback_on_error`` off, on every device. Strict: a listed case that passes fails
  the test, so the table only lists what still fails. An op we have no lowering for
  runs as an aten extern call and passes; it is not listed here.
- `DYNAMIC_OPS`: the ops the ``dynamic`` mode (``dynamic=True``) runs.
"""

from __future__ import annotations

RANDOM = "random output: a compiled program need not draw the same numbers as eager"
SKIP = {
    **{name: RANDOM for name in (
        "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
        "normal.in_place", "normal.number_mean", "rand_like", "randint", "randint_like", "randn", "randn_like",
        "uniform", "nn.functional.alpha_dropout", "nn.functional.dropout", "nn.functional.dropout2d",
        "nn.functional.dropout3d", "nn.functional.feature_alpha_dropout.with_train",
        "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "nn.functional.rrelu",
    )},
    **{name: "jiterator: compiles CUDA C++ at run time; eager raises without a GPU, and it is no aten op to lower"
       for name in ("jiterator_2inputs_2outputs", "jiterator_4inputs_with_extra_args", "jiterator_binary",
                    "jiterator_binary_return_by_ref", "jiterator_unary")},
}
"""Op name (with ``.variant``) -> why it is not run."""

UNDEFINED_VALUES = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                              "new_empty_strided"})
"""Ops whose outputs hold uninitialised memory: values are not compared."""

_MARGIN_LOSS_0D = ("a 0-d input with reduction='none' gives shape [1] where eager gives []: torch's own "
                   "decomposition of the op does (backend='aot_eager' too)")
_RESAMPLE = ("torch's decomposition of upsample_{mode}2d computes source coordinates and weights in another order "
             "than ATen's CPU kernel: on the 345x456 -> 270x270 reference input, 0.3% of outputs miss eager by "
             "up to 3e-4 (fp32 allows 1e-5 + 1.3e-6 relative); backend='aot_eager' misses by 6e-5 too")
XFAIL: dict[tuple[str, str], str] = {
    ("nn.functional.multi_margin_loss", "reference"): _MARGIN_LOSS_0D,
    ("nn.functional.multilabel_margin_loss", "reference"): _MARGIN_LOSS_0D,
    ("nn.functional.interpolate.bilinear", "reference"): _RESAMPLE.format(mode="bilinear"),
    ("nn.functional.interpolate.bicubic", "reference"): _RESAMPLE.format(mode="bicubic"),
    ("logcumsumexp", "backward"): (
        "ill-conditioned sample: the gradient is exp(a) - exp(b) of two nearly equal reverse logcumsumexps "
        "in fp32; ours and eager's (CPU eager accumulates in fp64) are each about 4e-3 from the fp64 "
        "gradient, and from each other by as much"),
}
"""``(op name with ``.variant``, mode) -> reason``; modes as in `opinfo_harness.MODES`."""

DYNAMIC_OPS = frozenset({
    # pointwise: unary, binary with broadcasting, integer division, casts, where
    "abs", "add", "atan2", "clamp", "div.floor_rounding", "exp", "float", "lerp", "logit", "masked_fill",
    "nn.functional.gelu", "nn.functional.hardswish", "pow", "remainder", "sigmoid", "sqrt", "where",
    # reductions and what decomposes into them
    "amax", "argmax", "logsumexp", "max.reduction_with_dim", "mean", "prod", "std_mean", "sum", "var",
    "linalg.vector_norm", "log_softmax", "softmax", "nn.functional.cross_entropy", "nn.functional.layer_norm",
    "nn.functional.group_norm", "nn.functional.rms_norm",
    # views, data movement, constructors
    "cat", "constant_pad_nd", "flip", "gather", "narrow_copy", "permute_copy", "repeat", "roll", "stack",
    "tril", "new_full", "zeros_like", "nn.functional.pad.reflect",
})
"""Ops the ``dynamic`` mode runs: one ``dynamic=True`` compile over several sample shapes."""
