"""Every op of torch's OpInfo database through ``backend="inductor_lite"``, against eager.

Modelled on torch's ``test/inductor/test_torchinductor_opinfo.py``. One test case per
(op, mode, device), with id ``<op>-<mode>-<device>`` (``-k`` selects shards, e.g.
``-k "-bf16-"`` or ``-k "softmax"``). Modes (`opinfo_harness.MODES`): ``f32``, ``bf16``
and ``i64`` sample inputs; ``reference`` (fp32 ``op.reference_inputs``: edge values,
empty and large tensors); ``backward`` (fp32 gradients); ``dynamic`` (one
``dynamic=True`` compile over several shapes, the ops of `opinfo_expected.DYNAMIC_OPS`).
Each case compiles with ``fallback_on_error`` off, so a lowering error fails it instead
of running eagerly, and poisons the generated code's allocations (`opinfo_harness`).

Expectations live in `opinfo_expected`: ops with random outputs are skipped by name,
outputs of uninitialised memory are compared by dtype and shape only, and `XFAIL` (every
device) and `XFAIL_ON` (one device) list every case known to fail, with its reason. They
are strict: a listed case that passes fails, so the tables stay current.

On CPU the generated kernels run in the DSL interpreter; the same cases marked ``gpu``
run on CUDA, where they are compiled PTX. The ~2,450 CPU cases take about 10 minutes on
a 2-core machine (``python -m pytest tests/test_opinfo.py``: 10 min 20 s wall, 9 min 12 s
of CPU, measured 2026-11-25 with torch 2.13); samples per op are capped (`Mode.samples`)
to keep them well inside CI's budget.

Coverage: which (op, mode) ran one of our generated kernels and which aten ops stayed
externs is printed by ``python -m tests.opinfo_report`` (``--help`` for modes, op
filters, parallel jobs and a JSON dump).
"""

from __future__ import annotations

import pytest
import torch

from tests import opinfo_expected as expected
from tests import opinfo_harness as harness

DEVICES = ("cpu", "cuda")


def cases(devices=DEVICES) -> list:
    """``pytest.param(op, mode name, device)`` for every case that applies, with its
    ``gpu``, ``skip`` or strict ``xfail`` marks."""
    params = []
    for device in devices:
        for mode_name, mode in harness.MODES.items():
            for op in harness.OP_DB:
                name = harness.full_name(op)
                if mode.dynamic and name not in expected.DYNAMIC_OPS:
                    continue
                if not harness.applies(op, mode_name, device):
                    continue
                marks = [pytest.mark.gpu] if device == "cuda" else []
                skip, xfail = expected.skip_reason(name, device), expected.xfail_reason(name, mode_name, device)
                if skip:
                    marks.append(pytest.mark.skip(reason=skip))
                elif xfail:
                    marks.append(pytest.mark.xfail(reason=xfail, strict=True))
                params.append(pytest.param(op, mode_name, device, marks=marks, id=f"{name}-{mode_name}-{device}"))
    return params


@pytest.mark.parametrize("op, mode_name, device", cases())
def test_opinfo(op, mode_name, device):
    name = harness.full_name(op)
    harness.run_case(op, mode_name, device, compare=name not in expected.UNDEFINED_VALUES,
                     undefined_outputs=expected.UNDEFINED_OUTPUTS.get(name, frozenset()))


def test_expectations_name_real_ops():
    """Every op named in the tables exists in ``op_db``, and every XFAIL mode in `MODES`:
    a renamed op must not turn an entry into dead text."""
    names = {harness.full_name(op) for op in harness.OP_DB}
    xfails = [expected.XFAIL, *expected.XFAIL_ON.values()]
    listed = set(expected.SKIP) | set(expected.UNDEFINED_VALUES) | set(expected.DYNAMIC_OPS)
    listed |= set(expected.UNDEFINED_OUTPUTS) | {name for table in expected.SKIP_ON.values() for name in table}
    listed |= {name for table in xfails for name, _ in table}
    assert not listed - names, f"not in op_db: {sorted(listed - names)}"
    assert set(expected.XFAIL_ON) | set(expected.SKIP_ON) <= set(DEVICES)
    assert {mode for table in xfails for _, mode in table} <= set(harness.MODES)
    reasons = [*expected.SKIP.values(), *(r for table in [*xfails, *expected.SKIP_ON.values()] for r in table.values())]
    assert all(reason.strip() for reason in reasons)


def _default_tol(dtype):
    return harness._DEFAULT_TOL[dtype]


def test_a_miss_of_eager_passes_only_when_as_close_to_the_wider_reference():
    """Eager rounds too: a leaf off eager's by more than the tolerance passes when it is
    as close to eager's fp64 result as eager's own is, twice over, and fails otherwise."""
    exact = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = torch.tensor([1.0, 2.0 + 4e-5, 3.0])
    ours = torch.tensor([1.0, 2.0 - 4e-5, 3.0])
    with pytest.raises(AssertionError, match="out"):
        harness.assert_same(ours, eager, _default_tol, "out")
    harness.assert_same(ours, eager, _default_tol, "out", reference=lambda: exact)
    with pytest.raises(AssertionError, match="against eager in torch.float64"):
        harness.assert_same(torch.tensor([1.0, 2.0, 3.0 + 2e-4]), eager, _default_tol, "out",
                            reference=lambda: exact)


def test_undefined_outputs_are_compared_by_metadata_only():
    values = torch.randn(3)
    harness.assert_same((values, torch.tensor(5)), (values, torch.tensor(7)), _default_tol, "out",
                        undefined=frozenset({1}))
    with pytest.raises(AssertionError, match="out 0"):
        harness.assert_same((values + 1, torch.tensor(5)), (values, torch.tensor(7)), _default_tol, "out",
                            undefined=frozenset({1}))
    with pytest.raises(AssertionError, match="out 1: torch.int32"):
        harness.assert_same((values, torch.tensor(5, dtype=torch.int32)), (values, torch.tensor(7)), _default_tol,
                            "out", undefined=frozenset({1}))


def test_the_reference_widens_dtype_arguments_with_their_tensors():
    # _softmax_backward_data(grad, output, dim, input_dtype): eager rejects fp32 tensors with input_dtype bf16
    x = torch.randn(4, dtype=torch.bfloat16, requires_grad=True)
    inputs, args, kwargs = harness._upcast((x, (x, 0, torch.bfloat16, torch.float64), {"n": 2}), torch.float32)
    assert inputs.dtype == torch.float32 and inputs.requires_grad and inputs.is_leaf
    assert args[0] is inputs and args[1:] == (0, torch.float32, torch.float64) and kwargs == {"n": 2}
    torch.testing.assert_close(inputs, x.detach().float(), atol=0, rtol=0)
