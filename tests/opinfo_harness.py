"""Runs one OpInfo case through ``torch.compile(backend="inductor_lite")`` and checks it against eager.

A case is (op, mode, device), the op one entry of torch's OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``) and the mode one of
`MODES`: which inputs (``op.sample_inputs`` or ``op.reference_inputs``), in which dtype,
whether gradients are compared, and whether shapes are symbolic. `run_case` raises on
any failure, compile errors included (it runs with ``fallback_on_error=False``), and
returns what ran: the number of generated kernels and the aten ops left as externs.

Checks, per sample input (the first `Mode.samples` of the op's, seeded from the case
name so a failure reproduces):

- values: every output leaf against eager on the same inputs, exact dtype and shape,
  NaN equal, floats within ``torch.testing.assert_close``'s default tolerances for the
  dtype or the op's own OpInfo ``toleranceOverride``/``precisionOverride`` when looser,
  integers and bools exactly;
- gradients (mode ``backward``): ``torch.autograd.grad`` of the outputs with the same
  random output gradients, compiled against eager, under the same rules;
- allocations of the generated code start as NaN (floats) or a sentinel (integers),
  so an element no kernel writes shows up as a mismatch.

Each sample is compiled afresh (``torch._dynamo.reset()``), except in mode ``dynamic``,
where one ``dynamic=True`` compile serves every sample.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types
import unittest
import zlib
from typing import Any, Callable, Iterator

import torch
import torch.utils._pytree as pytree

import inductor_lite
from inductor_lite.codegen import runtime_helpers
from inductor_lite.config import config


def _load_op_db() -> list:
    # torch's testing internals import `expecttest` (a torch test-suite dependency, not
    # ours) only to subclass its TestCase and read ACCEPT; unittest's TestCase stands in.
    if "expecttest" not in sys.modules:
        try:
            import expecttest  # noqa: F401
        except ImportError:
            stub = types.ModuleType("expecttest")
            stub.TestCase = unittest.TestCase
            stub.ACCEPT = False
            sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


OP_DB = _load_op_db()

from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Mode:
    """One way of running every op.

    Attributes:
        dtype: the sample inputs' dtype.
        reference: take ``op.reference_inputs`` (edge values, empty and large tensors)
            beyond the plain sample inputs, instead of ``op.sample_inputs``.
        backward: inputs require grad; gradients are compared too.
        dynamic: compile once with ``dynamic=True`` for all samples.
        samples: how many sample inputs of each op run (the first ones).
    """

    dtype: torch.dtype
    reference: bool = False
    backward: bool = False
    dynamic: bool = False
    samples: int = 2


MODES = {
    "f32": Mode(torch.float32),
    "bf16": Mode(torch.bfloat16),
    "i64": Mode(torch.int64),
    "backward": Mode(torch.float32, backward=True, samples=1),
    "reference": Mode(torch.float32, reference=True, samples=2),
    "dynamic": Mode(torch.float32, dynamic=True, samples=3),
}
"""Mode name -> `Mode`; names appear in test ids, the expected-failure table and the report."""


def full_name(op) -> str:
    """``op.name``, then ``.variant_test_name`` if any (``max.reduction_with_dim``)."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def applies(op, mode_name: str, device: str) -> bool:
    """Whether ``op`` has inputs for mode ``mode_name`` on ``device``."""
    mode = MODES[mode_name]
    if mode.dtype not in op.supported_dtypes(device):
        return False
    if mode.backward:
        return op.supports_autograd and mode.dtype in op.supported_backward_dtypes(device)
    if mode.reference:
        return op.reference_inputs_func is not None  # otherwise they are the sample inputs
    return True


@dataclasses.dataclass
class Outcome:
    """What a case ran: DSL kernels generated (all samples) and the aten ops called as externs."""

    kernels: int = 0
    externs: set = dataclasses.field(default_factory=set)


# ------------------------------------------------------------------------- inputs


def _seed(case: str) -> int:
    return zlib.crc32(case.encode())


def _samples(op, mode: Mode, device: str, seed: int) -> list:
    """The mode's first `Mode.samples` inputs of ``op``, drawn after seeding with ``seed``."""
    torch.manual_seed(seed)
    requires_grad = mode.backward
    if not mode.reference:
        it = op.sample_inputs(device, mode.dtype, requires_grad=requires_grad)
        return [s for _, s in zip(range(mode.samples), it)]
    # reference_inputs starts with the sample inputs; skip past them to the edge cases
    skip = sum(1 for _ in op.sample_inputs(device, mode.dtype, requires_grad=requires_grad))
    torch.manual_seed(seed)
    it = op.reference_inputs(device, mode.dtype, requires_grad=requires_grad)
    out = []
    for i, s in enumerate(it):
        if i >= skip:
            out.append(s)
        if len(out) == mode.samples:
            break
    return out


# ---------------------------------------------------------------------- tolerances

_LOW_PRECISION = (torch.bfloat16, torch.float16)

_DEFAULT_TOL = {torch.float32: (1e-5, 1.3e-6), torch.bfloat16: (1e-5, 1.6e-2), torch.float16: (1e-5, 1e-3),
                torch.float64: (1e-7, 1e-7)}
"""dtype -> (atol, rtol): ``torch.testing.assert_close``'s defaults."""


def tolerance(op, dtype: torch.dtype, device: str) -> tuple[float, float]:
    """(atol, rtol) for ``op``'s outputs of ``dtype``: the defaults, loosened to the largest
    override the op's OpInfo entry gives for that dtype on any of torch's own tests."""
    atol, rtol = _DEFAULT_TOL.get(dtype, (0.0, 0.0))
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, device):
            continue
        for deco in getattr(info, "decorators", [info]):
            if isinstance(deco, toleranceOverride) and dtype in deco.d:
                atol, rtol = max(atol, deco.d[dtype].atol), max(rtol, deco.d[dtype].rtol)
            elif isinstance(deco, precisionOverride) and dtype in deco.d:
                atol = max(atol, deco.d[dtype])
    return atol, rtol


# ---------------------------------------------------------------------- comparison


def assert_same(got: Any, expected: Any, tol: Callable[[torch.dtype], tuple[float, float]], what: str,
                values: bool = True, reference: Any = None) -> None:
    """``got`` against eager's ``expected`` (any pytree of tensors and Python values).

    ``tol(dtype)`` gives (atol, rtol) for floating leaves of that dtype; integer and bool
    leaves must be equal. ``values=False`` compares tensors' dtype, shape, device and
    layout only. ``reference``, eager's result with low-precision inputs upcast to fp32
    (same structure), admits a low-precision leaf that misses eager's but is as close
    to the fp32 result as eager's is, twice over, plus ``tol``: rounding intermediates
    as eager does is not required.

    Raises:
        AssertionError: naming the leaf and the difference.
    """
    got_leaves, got_spec = pytree.tree_flatten(got)
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    assert got_spec == exp_spec, f"{what}: output structure {got_spec} != eager {exp_spec}"
    ref_leaves = pytree.tree_leaves(reference) if reference is not None else []
    if len(ref_leaves) != len(exp_leaves):
        ref_leaves = [None] * len(exp_leaves)
    for i, (g, e, r) in enumerate(zip(got_leaves, exp_leaves, ref_leaves)):
        where = f"{what} {i}" if len(exp_leaves) > 1 else what
        if not isinstance(e, torch.Tensor):
            atol, rtol = tol(torch.float64) if isinstance(e, float) else (0, 0)
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{where}: {m}")
            continue
        assert isinstance(g, torch.Tensor), f"{where}: {type(g).__name__} where eager gives a tensor"
        assert (g.dtype, g.shape, g.device, g.layout) == (e.dtype, e.shape, e.device, e.layout), \
            f"{where}: {g.dtype}{list(g.shape)} on {g.device}, eager {e.dtype}{list(e.shape)} on {e.device}"
        if not values:
            continue
        g, e = g.detach(), e.detach()
        exact = not (e.is_floating_point() or e.is_complex())
        atol, rtol = (0, 0) if exact else tol(e.dtype)
        try:
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True, check_stride=False,
                                       msg=lambda m: f"{where}: {m}")
        except AssertionError as mismatch:
            if exact or e.dtype not in _LOW_PRECISION or not isinstance(r, torch.Tensor) or r.shape != e.shape:
                raise
            r = r.detach().float()
            finite = torch.isfinite(e) & torch.isfinite(r)
            slack = 2 * float((e.float() - r)[finite].abs().max()) if finite.any() else 0.0
            torch.testing.assert_close(g.float(), r, atol=atol + slack, rtol=rtol, equal_nan=True,
                                       check_stride=False,
                                       msg=lambda m: f"{mismatch}\n\nand against eager in fp32: {where}: {m}")


def _grad_inputs(sample) -> list:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def _differentiable(out) -> list:
    return [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]


def _grads(sample, out, grad_outputs):
    outs = _differentiable(sample.output_process_fn_grad(out))
    inputs = _grad_inputs(sample)
    if not outs or not inputs:
        return []
    return torch.autograd.grad(outs, inputs, grad_outputs, allow_unused=True)


def _fp32_reference(fn: Callable, sample) -> Any:
    """``fn`` on ``sample`` with its low-precision float tensors upcast to fp32."""
    def up(x):
        return x.detach().float() if isinstance(x, torch.Tensor) and x.dtype in _LOW_PRECISION else x

    args = pytree.tree_map(up, (sample.input, sample.args, sample.kwargs))
    return fn(args[0], *args[1], **args[2])


# -------------------------------------------------------------------------- running


@contextlib.contextmanager
def _poisoned_allocations() -> Iterator[None]:
    """Generated wrappers allocate through `runtime_helpers` (bound when a wrapper module
    loads); fill those allocations with NaN or a sentinel so unwritten elements show."""
    def poison(t):
        if t.dtype.is_floating_point or t.dtype.is_complex:
            return t.fill_(float("nan"))
        return t.fill_(True if t.dtype == torch.bool else -77)

    saved = {name: getattr(runtime_helpers, name) for name in ("empty_strided_cpu", "empty_strided_cuda")}
    for name, original in saved.items():
        setattr(runtime_helpers, name, lambda *a, _original=original, **k: poison(_original(*a, **k)))
    try:
        yield
    finally:
        for name, original in saved.items():
            setattr(runtime_helpers, name, original)


def _externs() -> set:
    return {k[len("extern."):] for k, v in inductor_lite.counters.items() if k.startswith("extern.") and v}


def run_case(op, mode_name: str, device: str, compare: bool = True) -> Outcome:
    """Compile ``op`` on its inputs for mode ``mode_name`` and check it against eager.

    Args:
        op: an ``OpInfo`` of `OP_DB`. mode_name: a key of `MODES`. device: ``cpu`` or ``cuda``.
        compare: check values (``False`` for ops whose outputs are undefined, such as
            ``empty``: then only dtypes, shapes and devices are compared).

    Returns:
        an `Outcome`: the kernels generated and the extern ops, summed over the samples.

    Raises:
        AssertionError: a value, dtype, shape or gradient differs from eager.
        Exception: whatever compiling or running raised (``fallback_on_error`` is off).
    """
    mode = MODES[mode_name]
    case = f"{full_name(op)}-{mode_name}-{device}"
    seed = _seed(case)

    def tol(dtype):
        return tolerance(op, dtype, device)

    # two identical draws: eager and compiled each get inputs of their own, with the
    # layouts (strides, views) the sample functions made
    eager_samples = _samples(op, mode, device, seed)
    compiled_samples = _samples(op, mode, device, seed)
    func = op.get_op()

    def fn(*args, **kwargs):
        return func(*args, **kwargs)

    outcome = Outcome()
    inductor_lite.reset_counters()
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="inductor_lite", dynamic=mode.dynamic)
    with config.patch(fallback_on_error=False), _poisoned_allocations():
        for i, (es, cs) in enumerate(zip(eager_samples, compiled_samples)):
            what = f"sample {i} ({cs.summary() if hasattr(cs, 'summary') else cs})"
            if not mode.dynamic:
                torch._dynamo.reset()
                compiled = torch.compile(fn, backend="inductor_lite")
            reference = _fp32_reference(fn, es) if mode.dtype in _LOW_PRECISION and compare else None
            expected = fn(es.input, *es.args, **es.kwargs)
            got = compiled(cs.input, *cs.args, **cs.kwargs)
            assert_same(got, expected, tol, f"{what}: output", compare, reference)
            if mode.backward:
                torch.manual_seed(seed + i)
                grad_outputs = [torch.randn_like(t) for t in _differentiable(es.output_process_fn_grad(expected))]
                assert_same(_grads(cs, got, grad_outputs), _grads(es, expected, grad_outputs), tol,
                            f"{what}: gradient")
    torch._dynamo.reset()
    outcome.kernels = inductor_lite.counters["kernels_generated"]
    outcome.externs = _externs()
    return outcome
