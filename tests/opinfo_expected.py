"""What `test_opinfo` expects of each OpInfo op: skipped, values undefined, or failing, and why.

- `SKIP`: ops not run at all (random outputs, CUDA-only ops), by name, with the reason;
  `SKIP_ON` the same for one device only.
- `UNDEFINED_VALUES`: ops whose outputs are uninitialised memory (``empty`` and kin):
  only dtypes, shapes, devices and layouts are compared. `UNDEFINED_OUTPUTS`: the same
  for some outputs of an op only (by position among its flattened outputs).
- `XFAIL`: ``(op name, mode) -> reason``: cases that crash or give a wrong result
  with ``fallback_on_error`` off, on every device; `XFAIL_ON`: on one device only.
  Strict: a listed case that passes fails the test, so the tables only list what still
  fails. An op we have no lowering for runs as an aten extern call and passes; it is
  not listed here. A reason says whether the wrong answer is ours.
- `DYNAMIC_OPS`: the ops the ``dynamic`` mode (``dynamic=True``) runs.

`skip_reason` and `xfail_reason` look a case up in both tables of their kind.
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

SKIP_ON: dict[str, dict[str, str]] = {
    "cuda": {
        "sparse.mm.reduce": "eager has no SparseCsrCUDA kernel for _sparse_mm_reduce_impl (CPU only)",
    },
}
"""Device -> op name -> why it is not run on that device."""

UNDEFINED_VALUES = frozenset({"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty",
                              "new_empty_strided"})
"""Ops whose outputs hold uninitialised memory: values are not compared."""

UNDEFINED_OUTPUTS: dict[str, frozenset[int]] = {
    "torch.ops.aten._efficient_attention_forward": frozenset({2, 3}),  # philox_seed, philox_offset
    "torch.ops.aten._flash_attention_forward": frozenset({2, 3}),  # rng_state, unused
}
"""Op name -> positions (among the flattened outputs) of outputs that hold uninitialised
memory, compared by dtype, shape, device and layout only. Without dropout (``dropout_p``
0, as in the OpInfo samples that run) the CUDA attention kernels return their dropout RNG
state tensors as allocated, unwritten."""

_MARGIN_LOSS_0D = ("a 0-d input with reduction='none' gives shape [1] where eager gives []: torch's own "
                   "decomposition of the op does (backend='aot_eager' too)")
XFAIL: dict[tuple[str, str], str] = {
    ("nn.functional.multi_margin_loss", "reference"): _MARGIN_LOSS_0D,
    ("nn.functional.multilabel_margin_loss", "reference"): _MARGIN_LOSS_0D,
}
"""``(op name with ``.variant``, mode) -> reason``, on every device; modes as in
`opinfo_harness.MODES`."""

XFAIL_ON: dict[str, dict[tuple[str, str], str]] = {
    "cuda": {
        ("_softmax_backward_data", "f32"): (
            "not ours: eager raises on OpInfo's second sample (an fp32 grad_output with an fp16 output "
            "and input_dtype fp16: 'expected scalar type Float but found Half'); CUDA only, where OpInfo "
            "adds the fp16 input_dtype samples"),
    },
}
"""Device -> ``(op name, mode) -> reason``: cases failing on that device only."""


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


def skip_reason(name: str, device: str) -> str | None:
    """Why op ``name`` is not run on ``device`` (``cpu`` or ``cuda``), or None if it runs."""
    return SKIP.get(name) or SKIP_ON.get(device, {}).get(name)


def xfail_reason(name: str, mode: str, device: str) -> str | None:
    """Why case (op ``name``, ``mode``, ``device``) is expected to fail, or None if it must pass."""
    return XFAIL.get((name, mode)) or XFAIL_ON.get(device, {}).get((name, mode))
