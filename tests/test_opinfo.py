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
ops returning uninitialised memory are compared by dtype and shape only, and `XFAIL`
lists every case known to fail, with its reason. XFAIL is strict: a listed case that
passes fails, so the table stays current.

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
                if name in expected.SKIP:
                    marks.append(pytest.mark.skip(reason=expected.SKIP[name]))
                elif (name, mode_name) in expected.XFAIL:
                    marks.append(pytest.mark.xfail(reason=expected.XFAIL[name, mode_name], strict=True))
                params.append(pytest.param(op, mode_name, device, marks=marks, id=f"{name}-{mode_name}-{device}"))
    return params


@pytest.mark.parametrize("op, mode_name, device", cases())
def test_opinfo(op, mode_name, device):
    harness.run_case(op, mode_name, device, compare=harness.full_name(op) not in expected.UNDEFINED_VALUES)


def test_expectations_name_real_ops():
    """Every op named in the tables exists in ``op_db``, and every XFAIL mode in `MODES`:
    a renamed op must not turn an entry into dead text."""
    names = {harness.full_name(op) for op in harness.OP_DB}
    listed = set(expected.SKIP) | set(expected.UNDEFINED_VALUES) | set(expected.DYNAMIC_OPS)
    listed |= {name for name, _ in expected.XFAIL}
    assert not listed - names, f"not in op_db: {sorted(listed - names)}"
    assert {mode for _, mode in expected.XFAIL} <= set(harness.MODES)
    assert all(reason.strip() for reason in expected.XFAIL.values())
