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
  integers and bools exactly. A float leaf that misses eager's still passes when it is
  as close to eager's result in a wider dtype (bf16/fp16 inputs in fp32, fp32 in fp64)
  as eager's own is, twice over: both round, neither is the truth (TorchInductor's tests
  judge against an fp64 reference the same way);
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

_DEFAULT_TOL = {torch.float32: (1e-5, 1.3e-6), torch.bfloat16: (1e-5, 1.6e-2), torch.float16: (1e-5, 1e-3),
                torch.float64: (1e-7, 1e-7), torch.complex32: (1e-5, 1e-3), torch.complex64: (1e-5, 1.3e-6),
                torch.complex128: (1e-7, 1e-7)}
"""dtype -> (atol, rtol): ``torch.testing.assert_close``'s defaults."""

_REFERENCE_DTYPE = {torch.bfloat16: torch.float32, torch.float16: torch.float32, torch.float32: torch.float64}
"""A float dtype -> the wider dtype of the reference its results may be judged against."""


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
                values: bool = True, reference: Callable[[], Any] | None = None,
                undefined: frozenset[int] = frozenset()) -> None:
    """``got`` against eager's ``expected`` (any pytree of tensors and Python values).

    ``tol(dtype)`` gives (atol, rtol) for floating leaves of that dtype; integer and bool
    leaves must be equal. ``values=False`` compares tensors' dtype, shape, device and
    layout only; ``undefined`` does so for the leaves at those positions (outputs the op
    leaves uninitialised). ``reference()``, called once and only if a float leaf misses
    eager's, gives eager's result on inputs upcast to the wider dtype of
    `_REFERENCE_DTYPE` (same structure), or None: that leaf still passes when it is as
    close to the reference as eager's is, twice over, plus ``tol``: rounding
    intermediates as eager does is not required.

    Raises:
        AssertionError: naming the leaf and the difference.
    """
    got_leaves, got_spec = pytree.tree_flatten(got)
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    assert got_spec == exp_spec, f"{what}: output structure {got_spec} != eager {exp_spec}"
    ref_leaves = []

    def reference_leaf(i: int) -> Any:
        if not ref_leaves:
            leaves = pytree.tree_leaves(reference()) if reference is not None else []
            ref_leaves.extend(leaves if len(leaves) == len(exp_leaves) else [None] * len(exp_leaves))
        return ref_leaves[i]

    for i, (g, e) in enumerate(zip(got_leaves, exp_leaves)):
        where = f"{what} {i}" if len(exp_leaves) > 1 else what
        if not isinstance(e, torch.Tensor):
            atol, rtol = tol(torch.float64) if isinstance(e, float) else (0, 0)
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{where}: {m}")
            continue
        assert isinstance(g, torch.Tensor), f"{where}: {type(g).__name__} where eager gives a tensor"
        assert (g.dtype, g.shape, g.device, g.layout) == (e.dtype, e.shape, e.device, e.layout), \
            f"{where}: {g.dtype}{list(g.shape)} on {g.device}, eager {e.dtype}{list(e.shape)} on {e.device}"
        if not values or i in undefined:
            continue
        g, e = g.detach(), e.detach()
        exact = not (e.is_floating_point() or e.is_complex())
        atol, rtol = (0, 0) if exact else tol(e.dtype)
        try:
            torch.testing.assert_close(g, e, atol=atol, rtol=rtol, equal_nan=True, check_stride=False,
                                       msg=lambda m: f"{where}: {m}")
        except AssertionError as mismatch:
            if e.dtype not in _REFERENCE_DTYPE:
                raise
            r = reference_leaf(i)
            if not isinstance(r, torch.Tensor) or r.shape != e.shape or not r.is_floating_point():
                raise
            wide, r = r.dtype, r.detach().double()
            finite = torch.isfinite(e) & torch.isfinite(r)
            slack = 2 * float((e.double() - r)[finite].abs().max()) if finite.any() else 0.0
            torch.testing.assert_close(g.double(), r, atol=atol + slack, rtol=rtol, equal_nan=True,
                                       check_stride=False,
                                       msg=lambda m: f"{mismatch}\n\nand against eager in {wide}: {where}: {m}")


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


def _upcast(tree: Any, dtype: torch.dtype) -> Any:
    """``tree`` with float tensors and dtype arguments narrower than ``dtype`` widened to
    it (a dtype argument such as ``_softmax_backward_data``'s ``input_dtype`` must follow
    its tensors); widened tensors are new leaves that keep ``requires_grad``, one for each
    tensor however often it appears."""
    widened: dict[int, torch.Tensor] = {}

    def up(x):
        if isinstance(x, torch.dtype) and x.is_floating_point and x.itemsize < dtype.itemsize:
            return dtype
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype.itemsize < dtype.itemsize:
            if id(x) not in widened:
                widened[id(x)] = x.detach().to(dtype).requires_grad_(x.requires_grad)
            return widened[id(x)]
        return x

    return pytree.tree_map(up, tree)


def _reference(fn: Callable, sample, dtype: torch.dtype, grad_outputs: Any = None) -> Any:
    """Eager's outputs of ``fn`` on ``sample`` upcast to ``dtype`` or, given
    ``grad_outputs``, its gradients; None where eager cannot run the upcast sample (flash
    attention has fp16/bf16 kernels only)."""
    inputs, args, kwargs = _upcast((sample.input, sample.args, sample.kwargs), dtype)
    try:
        out = fn(inputs, *args, **kwargs)
        if grad_outputs is None:
            return out
        outs = _differentiable(sample.output_process_fn_grad(out))
        leaves = [t for t in pytree.tree_leaves((inputs, args, kwargs))
                  if isinstance(t, torch.Tensor) and t.requires_grad]
        if not outs or not leaves:
            return []
        grads = [g.to(o.dtype) for g, o in zip(grad_outputs, outs)]
        return torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    except RuntimeError:
        return None


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


def run_case(op, mode_name: str, device: str, compare: bool = True,
             undefined_outputs: frozenset[int] = frozenset()) -> Outcome:
    """Compile ``op`` on its inputs for mode ``mode_name`` and check it against eager.

    Args:
        op: an ``OpInfo`` of `OP_DB`. mode_name: a key of `MODES`. device: ``cpu`` or ``cuda``.
        compare: check values (``False`` for ops whose outputs are undefined, such as
            ``empty``: then only dtypes, shapes and devices are compared).
        undefined_outputs: positions among the flattened outputs whose values are
            undefined (compared as ``compare=False`` compares every output).

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

    def reference(i: int, grad_outputs: Any = None) -> Callable[[], Any] | None:
        # a third draw, made only when a comparison needs it: eager may have changed its inputs
        if not compare or mode.dtype not in _REFERENCE_DTYPE:
            return None
        return lambda: _reference(fn, _samples(op, mode, device, seed)[i], _REFERENCE_DTYPE[mode.dtype],
                                  grad_outputs)

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
            expected = fn(es.input, *es.args, **es.kwargs)
            got = compiled(cs.input, *cs.args, **cs.kwargs)
            assert_same(got, expected, tol, f"{what}: output", compare, reference(i), undefined_outputs)
            if mode.backward:
                torch.manual_seed(seed + i)
                grad_outputs = [torch.randn_like(t) for t in _differentiable(es.output_process_fn_grad(expected))]
                assert_same(_grads(cs, got, grad_outputs), _grads(es, expected, grad_outputs), tol,
                            f"{what}: gradient", reference=reference(i, grad_outputs))
    torch._dynamo.reset()
    outcome.kernels = inductor_lite.counters["kernels_generated"]
    outcome.externs = _externs()
    return outcome
