"""What the lowering knows of an extern call's outputs: which have a layout fixed at
compile time (`fixed_layout`), and which may share storage with an input
(`may_alias_inputs`).

An extern call's output layout comes from the FX node's ``meta["val"]`` (a fake tensor
made by the op's meta function). Generated kernels and views index that output with
those strides, so the wrapper compares the real output's strides with them after the
call and copies on a mismatch (`runtime_helpers.ensure_strides`). The comparison costs
host time on every call; this module decides, once at lowering, where it can never fail.

The rule: an output's layout is *fixed* when every implementation of the op (CPU, CUDA,
and each backend library it may pick) allocates that output afresh with strides that
depend on its sizes alone, and the meta function does the same. Then the fake tensor's
strides are the real ones whatever the inputs' strides. That holds for

- the matmul family (``mm addmm bmm baddbmm mv addmv dot vdot _int_mm
  _addmm_activation``): a row-major result (structured kernels allocate it from the
  sizes); the fake layout is required to be row-major too, as a sanity check;
- ``empty_strided``: its arguments are the layout;
- the memory-efficient attention forward (CUDA): the output, allocated ``(B, M, H, K)``
  and transposed to ``(B, H, M, K)``, and the log-sum-exp; the flash attention forwards'
  log-sum-exp. (Their philox seeds and offsets and flash attention's debug mask keep
  the check: the meta functions' sizes for those have changed between torch versions.)
- ``convolution`` when its input and weight both suggest the contiguous memory format
  (`torch._prims_common.suggest_memory_format`, on the layouts the wrapper passes) and the
  fake result is contiguous: cuDNN, MIOpen, oneDNN and the native kernels choose
  channels-last output only when an input suggests it.

Everything else keeps the check. In particular an output whose strides follow an input's
(``empty_like`` semantics: ``cumsum``, random ops, the flash attention output) or that is a
view of an input: a backend may lay out such an input differently from the fake one (a
channels-last choice, a size-1 dimension), and its output follows. Convolution with a
channels-last input keeps it too: whether the output follows depends on the backend
picked at run time (``torch.backends.cudnn.enabled``).

An output that may share an input's storage keeps that storage alive: the wrapper
never hands the storage of such an extern's inputs on. The schema's alias annotations are not
enough to know it. ``aten.dequantize.self`` returns a float input itself and
``_c10d_functional.wait_tensor`` returns its input, neither annotated; the first is
caught by its fake run, which returns the input too (the graph passes keep such a
value's storage current: `fx_passes.common.refresh_downstream`), the second by a list.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import sympy
import torch
from torch._prims_common import suggest_memory_format

from ..fx_passes.common import storages
from ..ir.nodes import Layout

aten = torch.ops.aten

_ROW_MAJOR_OPS = frozenset({
    aten.mm.default, aten.addmm.default, aten.bmm.default, aten.baddbmm.default, aten.mv.default,
    aten.addmv.default, aten.dot.default, aten.vdot.default, aten._int_mm.default, aten._addmm_activation.default,
})

# op -> indices of the outputs allocated from sizes alone (None: its only output)
_FRESH_OUTPUTS: dict[Any, frozenset[Optional[int]]] = {
    aten.empty_strided.default: frozenset({None}),
    aten._scaled_dot_product_efficient_attention.default: frozenset({0, 1}),
    aten._scaled_dot_product_flash_attention.default: frozenset({1}),
    aten._scaled_dot_product_flash_attention_for_cpu.default: frozenset({1}),
}


def fixed_layout(op: Any, args: Sequence[Any], output_index: Optional[int], layout: Layout) -> bool:
    """Whether the real output of extern ``op`` is always laid out as ``layout`` says.

    Args:
        op: the extern's aten op (an ``OpOverload``).
        args: the call's positional arguments, tensors as realized IR nodes (anything
            with a ``layout``).
        output_index: None for an op returning one tensor, else the output's position
            in the op's result.
        layout: the output's layout, from the node's ``meta["val"]``.

    Returns:
        True where the wrapper needs no runtime stride check (see the module docstring
        for the rule); False, the safe answer, for every op the rule does not cover.
    """
    if op in _ROW_MAJOR_OPS:
        return output_index is None and _is_row_major(layout.size, layout.stride)
    if op in _FRESH_OUTPUTS:
        return output_index in _FRESH_OUTPUTS[op]
    if op is aten.convolution.default:
        return (output_index is None and _is_row_major(layout.size, layout.stride)
                and all(_suggests_contiguous(a) for a in args[:2]))
    return False


_RETURNS_AN_INPUT = frozenset({"_c10d_functional::wait_tensor", "c10d_functional::wait_tensor"})
"""Schema names of ops whose real result is an input although neither the schema nor the
fake run says so (by name: the legacy namespace is registered only when
``torch.distributed`` is imported)."""


def may_alias_inputs(op: Any, input_vals: Any, output_vals: Any) -> bool:
    """Whether an output of extern ``op`` may share storage with one of its inputs.

    Args:
        op: the extern's op (an ``OpOverload``; anything without a schema is assumed to alias).
        input_vals: the ``meta["val"]`` of the call's FX input nodes, a pytree of fake
            tensors and anything else (ignored).
        output_vals: the node's own ``meta["val"]``, likewise.

    Returns:
        True when the schema marks a result with an alias set (a view op), when the op
        is known to return an input (`_RETURNS_AN_INPUT`), or when a fake output shares
        a fake input's storage (the op's fake run returned an input, as
        ``aten.dequantize.self`` does for a float tensor).
    """
    schema = getattr(op, "_schema", None)
    if schema is None or schema.name in _RETURNS_AN_INPUT or any(r.alias_info is not None for r in schema.returns):
        return True
    return not storages(input_vals).isdisjoint(storages(output_vals))


def _is_row_major(size: Sequence[sympy.Expr], stride: Sequence[sympy.Expr]) -> bool:
    """Dense row-major strides; a size-1 dimension's stride places no element, so any goes."""
    expected = sympy.Integer(1)
    for n, s in reversed(list(zip(size, stride))):
        if n != 1 and sympy.simplify(s - expected) != 0:
            return False
        expected = expected * n
    return True


def _suggests_contiguous(node: Any) -> bool:
    """Whether ``node``'s layout (static sizes and strides only) suggests the contiguous format."""
    layout = getattr(node, "layout", None)
    if layout is None or not all(sympy.sympify(e).is_Integer for e in (*layout.size, *layout.stride)):
        return False
    meta = torch.empty_strided([int(n) for n in layout.size], [int(s) for s in layout.stride], device="meta")
    return suggest_memory_format(meta) == torch.contiguous_format
