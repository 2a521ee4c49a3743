"""``python -m inductor_lite.bench.kernels``: GB/s of hand-written and generated kernels.

Examples::

    python -m inductor_lite.bench.kernels                          # every kernel, fp32 + bf16, full sizes
    python -m inductor_lite.bench.kernels --kernels softmax,layer_norm --dtypes bf16 --sizes 8192x4096
    python -m inductor_lite.bench.kernels --sizes small --output small.json
    python -m inductor_lite.bench.kernels --device cpu --sizes tiny --no-inductor --repeat 2   # smoke test

For each (kernel, dtype, shape) it checks four contenders against an fp64 torch
reference: the hand-written DSL kernel (``ours``, `dsl_kernels`; only some rows have
one), torch eager, ``torch.compile(backend="inductor")`` and the same torch expression
through our compiler, ``torch.compile(backend="inductor_lite")`` (``generated``); both
compiles take ``dynamic=False``. It then times them and prints GB/s beside the
device's measured copy bandwidth, and the generated kernels' speed over the
hand-written ones and over inductor's. The method:

- GB/s = bytes that must move (each input read once, each output written once) /
  median time per call; GB = 1e9 bytes, MB = 1e6 bytes.
- Copy bandwidth: a 512 MiB device-to-device ``Tensor.copy_``, bytes read + written
  over its median time, measured once per run.
- CUDA timing (``--timing graphs``, the default): after warm-up, each contender's
  calls are captured into a CUDA graph of back-to-back calls, and the time per call
  is the median over replays of a replay's CUDA-event time over its calls, as in
  Triton's ``do_bench_cudagraph``; the contenders take turns, each replay after an
  untimed call of its own contender, so none starts from the L2 another left (the
  same for all four contenders; the copy bandwidth is timed with events, see
  `copy_bandwidth`).
  ``--timing events``: a CUDA event after every call, a ``torch.cuda._sleep`` holding
  the stream while the host queues a batch; each call then also pays for its event,
  about 2 us on an H200, which at 64 MB costs even ``copy_`` 7 points of copy
  bandwidth. Inputs are rotated among copies when one set is smaller than 3x the L2
  cache, so every call reads from HBM.
- Ours runs with the config the runtime's autotuner picks for the (shape, dtype) on its
  first call (`dsl_kernels.choose_config`), shown in the ``config`` column. The
  ``generated code`` column says what our compiler made of the expression: DSL
  kernels and aten extern calls (``inductor_lite.counters``), or ``eager fallback``
  where it ran the graph eagerly (``INDUCTOR_LITE_LOGS=fallbacks`` says why).
- Correctness, before timing: ours writes into an output poisoned with NaN (-1 for
  indices); a compiled function returns its own outputs, so those are compared as
  returned. Every result must match the fp64 reference within ``rtol`` (fp32 1e-5,
  fp16 1e-3, bf16 1e-2) plus ``rtol * rms(reference)``, argmax exactly; NaN never
  passes. A failure of ours marks the row FAIL, one of the generated kernels
  ``FAIL (generated)`` (``ERROR (generated)`` when the compile raises); either makes
  the exit status 1, and the failed contender is not timed. A mismatch of eager or
  inductor is only noted.
- Target (CUDA, inputs of 32 MB and up): where there is a hand-written kernel, ours
  >= 85% of copy bandwidth and faster than inductor, and generated >= 0.9x ours;
  elsewhere generated >= 0.97x inductor, and >= 85% of copy bandwidth where inductor
  reaches it. Rows that miss it say ``below target`` and the note says what missed.
  The summary gives the geomeans of generated/ours (rows with a hand-written kernel)
  and generated/inductor (every row).

On CPU the DSL kernels, hand-written or generated, run in the interpreter: the numbers
check that everything runs and say nothing about speed.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import functools
import json
import math
import platform
import sys
from typing import Any, Callable, Optional, Sequence

import torch
import torch.nn.functional as F

from ..counters import counters, reset as reset_counters
from ..runtime.timing import Timer, l2_bytes, rotation_sets
from . import dsl_kernels as K
from .report import geomean, output_format, require

COPY_BYTES = 512 * 2**20
TARGET_MIN_MB = 32.0
TARGET_COPY_FRACTION = 0.85
TARGET_GENERATED_OVER_OURS = 0.9
"""Generated kernels' speed over the hand-written one's, at least (rows that have one)."""
TARGET_GENERATED_OVER_INDUCTOR = 0.97
"""Generated kernels' speed over inductor's, at least (rows without a hand-written kernel)."""
TOLERANCE = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

SIZES = {
    "tiny": [(3, 37), (5, 300), (2, 1500)],
    "small": [(4096, 1024), (8192, 4096), (1024, 32768)],
    "full": [(4096, 1024), (32768, 1024), (16384, 2048), (8192, 4096), (4096, 8192), (2048, 16384),
             (1024, 32768)],
    "odd": [(32768, 768), (4096, 5120), (8192, 3000)],
}
"""Named shape lists (rows, cols). ``tiny`` is for the CPU interpreter; ``full`` is the
issue's set, rows x 1024 to 32768 columns, 16 MB to 128 MB inputs in fp32 (half that in
bf16); ``odd`` has widths that are not powers of two (the row kernels then compute on
padding up to the next power of two; 3000 is not a multiple of 16, so no 16-byte
vectors)."""

STATUS_OK = "ok"
STATUS_BELOW = "below target"
STATUS_FAIL = "FAIL"
STATUS_ERROR = "ERROR"
STATUS_FAIL_GENERATED = "FAIL (generated)"
STATUS_ERROR_GENERATED = "ERROR (generated)"
FAILED = (STATUS_FAIL, STATUS_ERROR, STATUS_FAIL_GENERATED, STATUS_ERROR_GENERATED)


# ----------------------------------------------------------------------------- the kernels


@dataclasses.dataclass(frozen=True)
class KernelBench:
    """One benchmarked op.

    ``make_inputs(rows, cols, dtype, device, generator)`` returns the input tensors;
    ``torch_fn(*inputs)`` is the torch version (eager, what inductor and inductor_lite
    compile and, on fp64 inputs, the reference), returning a tensor or a tuple of
    them; ``ours(*inputs, out=None, config=None)`` the hand-written DSL launcher (named
    ``name`` in `dsl_kernels.LAUNCHERS`, whose autotuner picks its config), or None
    where there is none. ``flat``: the op sees a flat tensor of ``rows * cols``
    elements. ``exact``: the output is integer and must match exactly. ``rtol_scale``
    widens `TOLERANCE` for ops whose result cancels (softmax backward subtracts
    ``out * sum(grad * out)`` from ``grad * out``: in fp32 eager misses 1e-5 there too).
    """

    name: str
    make_inputs: Callable[..., tuple]
    torch_fn: Callable[..., Any]
    ours: Optional[Callable[..., torch.Tensor]] = None
    flat: bool = False
    exact: bool = False
    rtol_scale: float = 1.0


def _randn(shape, dtype, device, gen, scale=1.0, offset=0.0) -> torch.Tensor:
    x = torch.randn(shape, device=device, generator=gen, dtype=torch.float32)
    return (x * scale + offset).to(dtype)


LAYER_NORM_EPS = 1e-5
RMS_NORM_EPS = 1e-6


def _nchw(rows: int, cols: int) -> tuple[int, int, int, int]:
    """An image batch shape (N, C, H, W) with N * C = rows and H * W = cols: N =
    gcd(rows, 64) images, H the largest divisor of cols up to its square root."""
    n = math.gcd(rows, 64)
    h = max(d for d in range(1, math.isqrt(cols) + 1) if cols % d == 0)
    return n, rows // n, h, cols // h


def _cross_entropy_inputs(r, c, dt, dev, g) -> tuple:
    """Logits (rows, cols) and one int64 class index a row."""
    return _randn((r, c), dt, dev, g, scale=2.0), torch.randint(0, c, (r,), device=dev, generator=g)


def _softmax_backward_inputs(r, c, dt, dev, g) -> tuple:
    """The output's gradient and the softmax output the forward saved."""
    return _randn((r, c), dt, dev, g), torch.softmax(_randn((r, c), dt, dev, g, scale=3.0), -1)


def _layer_norm_backward_inputs(r, c, dt, dev, g) -> tuple:
    """The output's gradient, the input, the mean and 1/std the forward saved (computed
    here once, by the device's own forward: fp32 for half inputs on CUDA), the weight."""
    x, w, b = _randn((r, c), dt, dev, g, scale=2.0, offset=0.5), _randn(c, dt, dev, g), _randn(c, dt, dev, g)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [c], w, b, LAYER_NORM_EPS)
    return _randn((r, c), dt, dev, g), x, mean, rstd, w


def _layer_norm_backward(grad, x, mean, rstd, w):
    # The bias is read for its shape and dtype only (grad_bias has them): the weight
    # stands in, so no input goes unread.
    return torch.ops.aten.native_layer_norm_backward(grad, x, [x.shape[-1]], mean, rstd, w, w, [True, True, True])


BENCHES = {
    b.name: b
    for b in [
        KernelBench(
            "add", lambda r, c, dt, dev, g: (_randn(r * c, dt, dev, g), _randn(r * c, dt, dev, g)),
            lambda a, b: a + b, K.add, flat=True,
        ),
        KernelBench(
            "transpose_add", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g),),
            lambda x: x.t().contiguous() + 1,
        ),
        KernelBench(
            "bias_gelu", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g), _randn(c, dt, dev, g)),
            lambda x, bias: F.gelu(x + bias), K.bias_gelu,
        ),
        KernelBench(
            "softmax", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, scale=3.0),),
            lambda x: torch.softmax(x, -1), K.softmax,
        ),
        KernelBench(
            "log_softmax", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, scale=3.0),),
            lambda x: torch.log_softmax(x, -1),
        ),
        KernelBench(
            "softmax_backward", _softmax_backward_inputs,
            lambda grad, out: torch.ops.aten._softmax_backward_data(grad, out, -1, grad.dtype), rtol_scale=10.0,
        ),
        KernelBench("cross_entropy", _cross_entropy_inputs, lambda x, target: F.cross_entropy(x, target)),
        KernelBench(
            "layer_norm",
            lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, scale=2.0, offset=0.5), _randn(c, dt, dev, g),
                                      _randn(c, dt, dev, g)),
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, LAYER_NORM_EPS),
            functools.partial(K.layer_norm, eps=LAYER_NORM_EPS),
        ),
        KernelBench(
            "add_layer_norm",
            lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, scale=2.0, offset=0.5), _randn((r, c), dt, dev, g),
                                      _randn(c, dt, dev, g), _randn(c, dt, dev, g)),
            lambda x, y, w, b: F.layer_norm(x + y, (x.shape[-1],), w, b, LAYER_NORM_EPS),
        ),
        KernelBench("layer_norm_backward", _layer_norm_backward_inputs, _layer_norm_backward),
        KernelBench(
            "rms_norm", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, offset=0.25), _randn(c, dt, dev, g)),
            lambda x, w: F.rms_norm(x, (x.shape[-1],), w, RMS_NORM_EPS),
            functools.partial(K.rms_norm, eps=RMS_NORM_EPS),
        ),
        KernelBench(
            "var_mean", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, scale=2.0, offset=0.5),),
            lambda x: torch.var_mean(x, -1),
        ),
        KernelBench(
            "row_sum", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, offset=0.1),),
            lambda x: x.sum(-1), K.row_sum,
        ),
        KernelBench(
            "col_sum", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g, offset=0.1),),
            lambda x: x.sum(0),
        ),
        KernelBench(
            "full_sum", lambda r, c, dt, dev, g: (_randn(r * c, dt, dev, g, offset=0.1),),
            lambda x: x.sum(), flat=True,
        ),
        KernelBench(
            "global_avg_pool", lambda r, c, dt, dev, g: (_randn(_nchw(r, c), dt, dev, g, offset=0.1),),
            lambda x: x.mean((2, 3)),
        ),
        KernelBench(
            "row_argmax", lambda r, c, dt, dev, g: (_randn((r, c), dt, dev, g),),
            lambda x: x.argmax(-1), K.row_argmax, exact=True,
        ),
    ]
}
"""Every benchmark, in report order (each op family together)."""


# ----------------------------------------------------------------------------- correctness


def compare(got: Any, ref: Any, dtype: torch.dtype, exact: bool, rtol_scale: float = 1.0) -> Optional[str]:
    """Check ``got`` against the fp64 (or integer) reference ``ref``, tensors or tuples
    of them (each output in turn).

    Floats pass where ``|got - ref| <= rtol * (|ref| + rms(ref))``, ``rtol`` =
    `TOLERANCE` of ``dtype`` (the inputs' dtype) times ``rtol_scale``; NaN never
    passes. ``exact``: equal.

    Returns:
        ``None`` when it matches, else a short description of the mismatch.
    """
    if isinstance(ref, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(ref):
            return f"{type(got).__name__} returned, expected {len(ref)} outputs"
        problems = (compare(g, r, dtype, exact, rtol_scale) for g, r in zip(got, ref))
        return next((f"output {i}: {p}" for i, p in enumerate(problems) if p), None)
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    if exact:
        bad = got.long() != ref.long()
    else:
        rtol = TOLERANCE[dtype] * rtol_scale
        g, r = got.double(), ref.double()
        rms = r.square().mean().sqrt()
        bad = ~((g - r).abs() <= rtol * (r.abs() + rms))
    n_bad = int(bad.sum())
    if not n_bad:
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    return f"{n_bad}/{bad.numel()} wrong, first at {first}: got {got[first].item():.6g}, want {ref[first].item():.6g}"


def _nbytes(value: Any) -> int:
    """Bytes of a tensor or of every tensor in a tuple."""
    return sum(t.nbytes for t in (value if isinstance(value, (tuple, list)) else (value,)))


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """``t``'s shape, dtype and device, filled with NaN (floats) or -1 (integers)."""
    return torch.full_like(t, float("nan") if t.is_floating_point() else -1)


# ----------------------------------------------------------------------------- timing


def copy_bandwidth(device: torch.device, timer: Timer) -> float:
    """GB/s of a device-to-device ``Tensor.copy_`` of `COPY_BYTES` (8 MiB on CPU):
    bytes read + written over the median time. Always timed with per-call events (at
    512 MiB the event costs nothing measurable): captured into a CUDA graph, the copy
    becomes a memcpy node that the copy engines run, 2.8 TB/s on an H200 where the
    SMs copy at 4.15."""
    if timer.graphs:
        timer = Timer(device, timer.warmup, timer.repeat)
    n = COPY_BYTES if device.type == "cuda" else 8 * 2**20
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    (seconds,) = timer.median_seconds([[lambda: dst.copy_(src)]])
    return 2 * n / seconds / 1e9


# ----------------------------------------------------------------------------- one row


@dataclasses.dataclass
class Row:
    """One (kernel, dtype, shape) result; times in microseconds, bandwidths in GB/s,
    ``mb`` the first input's size in MB, ``bytes`` what one call must move.
    ``pct_of_copy`` is ours, ``x_over_y`` how many times faster x ran than y (y's time
    over x's); ``generated`` is what ``torch.compile(backend="inductor_lite")`` runs."""

    kernel: str
    dtype: str
    shape: str
    mb: float
    bytes: int
    copy_gbs: float
    config: str = "-"
    ours_us: Optional[float] = None
    eager_us: Optional[float] = None
    inductor_us: Optional[float] = None
    generated_us: Optional[float] = None
    ours_gbs: Optional[float] = None
    eager_gbs: Optional[float] = None
    inductor_gbs: Optional[float] = None
    generated_gbs: Optional[float] = None
    pct_of_copy: Optional[float] = None
    generated_pct_of_copy: Optional[float] = None
    ours_over_inductor: Optional[float] = None
    generated_over_ours: Optional[float] = None
    generated_over_inductor: Optional[float] = None
    generated_code: str = ""
    status: str = STATUS_OK
    note: str = ""

    @property
    def targeted(self) -> bool:
        """Whether the target applies: inputs >= 32 MB, and ours or generated timed."""
        return self.mb >= TARGET_MIN_MB and (self.ours_us is not None or self.generated_us is not None)

    @property
    def failed(self) -> bool:
        return self.status in FAILED

    def fail(self, status: str) -> None:
        """Mark the row failed; the first failure (ours is checked first) names it."""
        if not self.failed:
            self.status = status


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one run measures: device, timer, whether to run inductor and the generated
    kernels (inductor_lite), seed."""

    device: torch.device
    timer: Timer
    inductor: bool = True
    generated: bool = True
    seed: int = 0


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text if len(text) <= 200 else text[:197] + "..."


def measure(bench: KernelBench, rows: int, cols: int, dtype: torch.dtype, copy_gbs: float,
            settings: Settings) -> Row:
    """Check and time one (kernel, dtype, shape) for ours, eager, inductor and generated.

    Errors never propagate: ours raising gives status ERROR, ours wrong FAIL, the
    generated kernels ERROR (generated) and FAIL (generated) (a failed contender is not
    timed); eager or inductor failing leaves their columns empty with a note; a
    contender that cannot be captured into a CUDA graph (``--timing graphs``) leaves
    the row untimed, status ERROR.
    """
    device = settings.device
    inputs = bench.make_inputs(rows, cols, dtype, device, torch.Generator(device).manual_seed(settings.seed))
    row = Row(bench.name, _dtype_name(dtype), f"{rows * cols}" if bench.flat else f"{rows}x{cols}",
              inputs[0].nbytes / 1e6, 0, copy_gbs)
    notes: list[str] = []
    contenders = check_contenders(bench, inputs, dtype, settings, row, notes)
    sets = rotation_sets(inputs, row.bytes, l2_bytes(device))
    try:
        times = settings.timer.median_seconds([[functools.partial(fn, *s) for s in sets]
                                               for fn in contenders.values()])
    except RuntimeError as error:  # a contender cannot be captured into a CUDA graph: the row is untimed
        row.fail(STATUS_ERROR)
        notes.append(f"timing ({', '.join(contenders)}): {_describe(error)}")
        times = []
    for name, seconds in zip(contenders, times):
        setattr(row, f"{name}_us", seconds * 1e6)
        setattr(row, f"{name}_gbs", row.bytes / seconds / 1e9)
    _derive_ratios(row)
    if device.type == "cuda" and row.targeted and not row.failed:
        misses = target_misses(row)
        if misses:
            row.status = STATUS_BELOW
            notes.append(f"below target: {', '.join(misses)}")
    row.note = "; ".join(notes)
    return row


def check_contenders(bench: KernelBench, inputs: tuple, dtype: torch.dtype, settings: Settings, row: Row,
                     notes: list[str]) -> dict[str, Callable]:
    """Check eager, ours (into a poisoned output), inductor and the generated kernels
    against the fp64 reference; set ``row.bytes``, ``row.config``,
    ``row.generated_code`` and ``row.status``, add problems to ``notes``.

    Returns:
        ``{contender: fn(*inputs)}`` to time: eager always, inductor when it compiled
        (a mismatch is only noted), ours and generated when they are right.
    """
    with torch.no_grad():
        ref = bench.torch_fn(*[t.double() if t.is_floating_point() else t for t in inputs])
        eager_out = bench.torch_fn(*inputs)
    row.bytes = _nbytes(inputs) + _nbytes(eager_out)
    problem = compare(eager_out, ref, dtype, bench.exact, bench.rtol_scale)
    if problem:
        notes.append(f"eager mismatch: {problem}")
    contenders = {"eager": bench.torch_fn}
    if bench.ours is not None:
        ours = _check_ours(bench, inputs, ref, eager_out, dtype, row, notes)
        if ours is not None:
            contenders["ours"] = ours
    torch._dynamo.reset()  # a fresh compile per shape: no recompile limit, no dynamic shapes
    if settings.inductor:
        try:
            contenders["inductor"], out = _compile(bench, "inductor", inputs)
            problem = compare(out, ref, dtype, bench.exact, bench.rtol_scale)
            if problem:
                notes.append(f"inductor mismatch: {problem}")
        except Exception as error:  # noqa: BLE001 - report inductor's failure, keep measuring the others
            notes.append(f"inductor: {_describe(error)}")
    if settings.generated:
        generated = _check_generated(bench, inputs, ref, dtype, row, notes)
        if generated is not None:
            contenders["generated"] = generated
    return contenders


def _check_ours(bench: KernelBench, inputs: tuple, ref: torch.Tensor, like: torch.Tensor, dtype: torch.dtype,
                row: Row, notes: list[str]) -> Optional[Callable]:
    """Ours with the autotuner's config (timing the candidates on these inputs on
    CUDA), checked in a poisoned copy of ``like`` (eager's output); None when choosing
    the config failed, or ours raised or was wrong."""
    try:
        config = K.choose_config(bench.name, *inputs)
        row.config = str(config)
        out = poisoned_like(like)
        bench.ours(*inputs, out=out, config=config)
    except Exception as error:  # noqa: BLE001 - one kernel's failure must not stop the run
        row.fail(STATUS_ERROR)
        notes.append(f"ours: {_describe(error)}")
        return None
    problem = compare(out, ref, dtype, bench.exact, bench.rtol_scale)
    if problem:
        row.fail(STATUS_FAIL)
        notes.append(f"ours mismatch: {problem}")
        return None
    return functools.partial(bench.ours, config=config)


def _check_generated(bench: KernelBench, inputs: tuple, ref: Any, dtype: torch.dtype, row: Row,
                     notes: list[str]) -> Optional[Callable]:
    """``torch.compile(backend="inductor_lite")`` of the torch expression, checked as it
    returns; None when it raised or was wrong."""
    reset_counters()  # what this compile makes, for the generated code column
    try:
        generated, out = _compile(bench, "inductor_lite", inputs)
    except Exception as error:  # noqa: BLE001 - one compile's failure must not stop the run
        row.fail(STATUS_ERROR_GENERATED)
        notes.append(f"generated: {_describe(error)}")
        return None
    row.generated_code = (f"kernels {counters['kernels_generated']}, extern {counters['extern_calls']}"
                          if not counters["graphs_fallback"] else "eager fallback")
    problem = compare(out, ref, dtype, bench.exact, bench.rtol_scale)
    if problem:
        row.fail(STATUS_FAIL_GENERATED)
        notes.append(f"generated mismatch: {problem}")
        return None
    return generated


def _compile(bench: KernelBench, backend: str, inputs: tuple) -> tuple[Callable, Any]:
    """``torch.compile`` of the torch expression for these shapes, and its first output."""
    compiled = torch.compile(bench.torch_fn, backend=backend, dynamic=False)
    return compiled, compiled(*inputs)


def _speedup(us: Optional[float], other_us: Optional[float]) -> Optional[float]:
    """How many times faster than ``other``; None unless both were timed."""
    return None if us is None or other_us is None else other_us / us


def _derive_ratios(row: Row) -> None:
    if row.ours_gbs is not None:
        row.pct_of_copy = 100 * row.ours_gbs / row.copy_gbs
    if row.generated_gbs is not None:
        row.generated_pct_of_copy = 100 * row.generated_gbs / row.copy_gbs
    row.ours_over_inductor = _speedup(row.ours_us, row.inductor_us)
    row.generated_over_ours = _speedup(row.generated_us, row.ours_us)
    row.generated_over_inductor = _speedup(row.generated_us, row.inductor_us)


def target_misses(row: Row) -> list[str]:
    """What a timed row misses of its target (see the module docstring); empty when it
    meets it. A ratio to a contender that was not run is not judged."""
    copy_pct = 100 * TARGET_COPY_FRACTION
    misses = []
    if row.ours_us is not None:
        if row.pct_of_copy < copy_pct:
            misses.append(f"ours {row.pct_of_copy:.1f}% of copy")
        if row.ours_over_inductor is not None and row.ours_over_inductor <= 1.0:
            misses.append(f"ours/inductor {row.ours_over_inductor:.2f}")
        if row.generated_over_ours is not None and row.generated_over_ours < TARGET_GENERATED_OVER_OURS:
            misses.append(f"generated/ours {row.generated_over_ours:.2f}")
    elif row.generated_us is not None:
        if row.generated_over_inductor is not None and row.generated_over_inductor < TARGET_GENERATED_OVER_INDUCTOR:
            misses.append(f"generated/inductor {row.generated_over_inductor:.2f}")
        inductor_reaches_copy = row.inductor_gbs is not None and 100 * row.inductor_gbs / row.copy_gbs >= copy_pct
        if inductor_reaches_copy and row.generated_pct_of_copy < copy_pct:
            misses.append(f"generated {row.generated_pct_of_copy:.1f}% of copy")
    return misses


def _dtype_name(dtype: torch.dtype) -> str:
    return next(name for name, d in DTYPES.items() if d == dtype)


# ----------------------------------------------------------------------------- report


def _fmt(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _console():
    console_mod = require("rich.console")
    console = console_mod.Console()
    # Without a terminal rich assumes 80 columns and would cut the table.
    return console if console.is_terminal else console_mod.Console(width=250)


_STATUS_STYLE = {STATUS_OK: "green", STATUS_BELOW: "yellow", STATUS_FAIL: "bold red", STATUS_ERROR: "bold red",
                 STATUS_FAIL_GENERATED: "bold red", STATUS_ERROR_GENERATED: "bold red"}


def print_table(rows: list[Row], copy_gbs: float, device_name: str, console=None) -> None:
    """The full results table (one line per kernel, dtype and shape)."""
    table_mod = require("rich.table")
    escape = require("rich.markup").escape
    console = console or _console()
    table = table_mod.Table(title=f"kernels on {device_name}: copy bandwidth {copy_gbs:.0f} GB/s")
    headers = ["kernel", "dtype", "shape", "MB", "ours GB/s", "% of copy", "eager GB/s", "inductor GB/s",
               "generated GB/s", "gen % of copy", "ours/inductor", "gen/ours", "gen/inductor", "status", "config",
               "generated code", "note"]
    for h in headers:
        left = h in ("kernel", "dtype", "shape", "status", "config", "generated code", "note")
        table.add_column(h, justify="left" if left else "right", overflow="fold")
    for r in rows:
        style = _STATUS_STYLE[r.status]
        cells = [r.kernel, r.dtype, r.shape, f"{r.mb:.1f}", _fmt(r.ours_gbs, ".0f"), _fmt(r.pct_of_copy, ".1f"),
                 _fmt(r.eager_gbs, ".0f"), _fmt(r.inductor_gbs, ".0f"), _fmt(r.generated_gbs, ".0f"),
                 _fmt(r.generated_pct_of_copy, ".1f"), _fmt(r.ours_over_inductor, ".2f"),
                 _fmt(r.generated_over_ours, ".2f"), _fmt(r.generated_over_inductor, ".2f"),
                 f"[{style}]{r.status}[/]", r.config, r.generated_code or "-", escape(r.note)]
        table.add_row(*cells)
    console.print(table)


def summarize(rows: list[Row], cuda: bool) -> list[dict[str, Any]]:
    """Per kernel and dtype: rows, failures, and over the targeted rows (>= 32 MB, CUDA
    only) how many met the target, the lowest % of copy (ours and generated) and the
    lowest ours/inductor, generated/ours and generated/inductor."""
    out = []
    for key in dict.fromkeys((r.kernel, r.dtype) for r in rows):
        group = [r for r in rows if (r.kernel, r.dtype) == key]
        targeted = [r for r in group if cuda and r.targeted and not r.failed]

        def lowest(field: str) -> Optional[float]:
            return min((getattr(r, field) for r in targeted if getattr(r, field) is not None), default=None)

        out.append({
            "kernel": key[0], "dtype": key[1], "rows": len(group), "failed": sum(r.failed for r in group),
            "targeted": len(targeted), "met": sum(r.status == STATUS_OK for r in targeted),
            "min_pct_of_copy": lowest("pct_of_copy"), "min_generated_pct_of_copy": lowest("generated_pct_of_copy"),
            "min_ours_over_inductor": lowest("ours_over_inductor"),
            "min_generated_over_ours": lowest("generated_over_ours"),
            "min_generated_over_inductor": lowest("generated_over_inductor"),
        })
    return out


def geomeans(rows: list[Row]) -> dict[str, Any]:
    """Geomean speed of the generated kernels over ours (rows with a hand-written
    kernel) and over inductor (every row), over the rows that timed both and did not
    fail, and how many rows entered each."""
    counted = [r for r in rows if not r.failed]
    over_ours = [r.generated_over_ours for r in counted if r.generated_over_ours is not None]
    over_inductor = [r.generated_over_inductor for r in counted if r.generated_over_inductor is not None]
    return {"generated_over_ours": geomean(over_ours), "rows_vs_ours": len(over_ours),
            "generated_over_inductor": geomean(over_inductor), "rows_vs_inductor": len(over_inductor)}


def print_summary(rows: list[Row], cuda: bool, console=None) -> None:
    """The compact summary (per kernel and dtype), the geomeans and a one-line verdict."""
    table_mod = require("rich.table")
    console = console or _console()
    summary = summarize(rows, cuda)
    table = table_mod.Table(title=f"summary (target on inputs >= {TARGET_MIN_MB:g} MB: ours "
                                  f">= {TARGET_COPY_FRACTION:.0%} of copy and faster than inductor, generated "
                                  f">= {TARGET_GENERATED_OVER_OURS:g}x ours; without ours, generated "
                                  f">= {TARGET_GENERATED_OVER_INDUCTOR:g}x inductor and "
                                  f">= {TARGET_COPY_FRACTION:.0%} of copy where inductor is)")
    for h in ("kernel", "dtype", "correct", "target met", "min % of copy", "min gen % of copy", "min ours/inductor",
              "min gen/ours", "min gen/inductor"):
        table.add_column(h, justify="left" if h in ("kernel", "dtype") else "right")
    for s in summary:
        correct = f"{s['rows'] - s['failed']}/{s['rows']}"
        table.add_row(s["kernel"], s["dtype"], correct if not s["failed"] else f"[bold red]{correct}[/]",
                      f"{s['met']}/{s['targeted']}" if cuda else "-", _fmt(s["min_pct_of_copy"], ".1f"),
                      _fmt(s["min_generated_pct_of_copy"], ".1f"), _fmt(s["min_ours_over_inductor"], ".2f"),
                      _fmt(s["min_generated_over_ours"], ".2f"), _fmt(s["min_generated_over_inductor"], ".2f"))
    console.print(table)
    g = geomeans(rows)
    console.print(f"geomean generated/ours {_fmt(g['generated_over_ours'], '.2f')} ({g['rows_vs_ours']} rows), "
                  f"generated/inductor {_fmt(g['generated_over_inductor'], '.2f')} ({g['rows_vs_inductor']} rows)")
    failed = sum(s["failed"] for s in summary)
    met, targeted = sum(s["met"] for s in summary), sum(s["targeted"] for s in summary)
    verdict = f"correctness failures: {failed}"
    verdict += f"; target met on {met}/{targeted} rows" if cuda else "; CPU run (interpreter): no timing claims"
    console.print(verdict)


def write_output(rows: list[Row], path: str, meta: dict[str, Any]) -> None:
    """CSV (one line per row, the fields of `Row`) or JSON (``{"meta", "rows",
    "summary", "geomeans"}``), by ``path``'s extension.

    Raises:
        ValueError: an extension other than .csv or .json.
    """
    fields = [f.name for f in dataclasses.fields(Row)]
    if output_format(path) == "csv":
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(fields)
            writer.writerows([_csv_cell(getattr(r, k)) for k in fields] for r in rows)
    else:
        payload = {"meta": meta, "rows": [dataclasses.asdict(r) for r in rows],
                   "summary": summarize(rows, meta["device"] == "cuda"), "geomeans": geomeans(rows)}
        with open(path, "w") as f:
            json.dump(payload, f, indent=2)
            f.write("\n")


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else value


# ----------------------------------------------------------------------------- CLI


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """A name from `SIZES` or comma-separated ``ROWSxCOLS`` shapes.

    Raises:
        ValueError: an unknown name or a malformed or non-positive shape.
    """
    if text in SIZES:
        return list(SIZES[text])
    shapes = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            rows, cols = (int(v) for v in part.lower().split("x"))
        except ValueError:
            raise ValueError(f"size {part!r}: expected {', '.join(SIZES)} or ROWSxCOLS (e.g. 4096x1024)") from None
        if rows < 1 or cols < 1:
            raise ValueError(f"size {part!r}: rows and columns must be positive")
        shapes.append((rows, cols))
    if not shapes:
        raise ValueError("no sizes given")
    return shapes


def _parse_list(text: str, known: Sequence[str], what: str) -> list[str]:
    items = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if items == ["all"]:
        return list(known)
    unknown = [i for i in items if i not in known]
    if unknown or not items:
        raise ValueError(f"unknown {what} {unknown or text!r}; choose from all, {', '.join(known)}")
    return items


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface (``--help`` lists every option)."""
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(
        prog="python -m inductor_lite.bench.kernels",
        description="GB/s of the hand-written DSL kernels and of the kernels our compiler generates "
                    "(torch.compile(backend='inductor_lite')) vs torch eager, torch.compile(backend='inductor') "
                    "and the device's copy bandwidth.",
    )
    parser.add_argument("--kernels", default="all", help=f"comma-separated: all, {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--dtypes", default="fp32,bf16", help=f"comma-separated: {', '.join(DTYPES)} "
                                                               "(default: fp32,bf16)")
    parser.add_argument("--sizes", default=None,
                        help=f"{', '.join(SIZES)}, or shapes such as 4096x1024,1024x32768 "
                             "(default: full on CUDA, tiny on CPU)")
    parser.add_argument("--repeat", type=int, default=100, help="timed calls per contender (default: 100)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls first (default: 10)")
    parser.add_argument("--timing", choices=("graphs", "events"), default="graphs",
                        help="CUDA timing: replays of a CUDA graph of back-to-back calls (default), or a CUDA "
                             "event after every call (each call also pays the event's cost)")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile(backend='inductor')")
    parser.add_argument("--no-generated", action="store_true",
                        help="skip torch.compile(backend='inductor_lite'), the generated kernels")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if cuda else "cpu",
                        help="default: cuda when available (cpu runs the DSL interpreter)")
    parser.add_argument("--output", help="also write the results to this .csv or .json file")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    """Run the benchmark; returns 1 when a DSL kernel, hand-written or generated, failed
    its correctness check, else 0."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        kernels = _parse_list(args.kernels, list(BENCHES), "kernel(s)")
        dtypes = [DTYPES[d] for d in _parse_list(args.dtypes, list(DTYPES), "dtype(s)")]
        sizes = parse_sizes(args.sizes or ("full" if args.device == "cuda" else "tiny"))
        if args.output:
            output_format(args.output)
        timer = Timer(torch.device(args.device), args.warmup, args.repeat, graphs=args.timing == "graphs")
        require("rich.table")
    except (ValueError, ImportError) as error:
        parser.error(str(error))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: CUDA is not available (use --device cpu)")
    device = torch.device(args.device)
    settings = Settings(device, timer, inductor=not args.no_inductor, generated=not args.no_generated,
                        seed=args.seed)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"

    copy_gbs = copy_bandwidth(device, timer)
    print(f"copy bandwidth: {copy_gbs:.0f} GB/s ({device_name})", file=sys.stderr)
    rows = run([BENCHES[k] for k in kernels], dtypes, sizes, copy_gbs, settings)
    print_table(rows, copy_gbs, device_name)
    if args.output:
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "argv": sys.argv[1:] if argv is None else list(argv), "device": device.type,
            "device_name": device_name, "copy_gbs": copy_gbs, "l2_bytes": l2_bytes(device),
            "repeat": args.repeat, "warmup": args.warmup, "timing": args.timing, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
        }
        write_output(rows, args.output, meta)
        print(f"results written to {args.output}")
    print_summary(rows, device.type == "cuda")
    return 1 if any(r.failed for r in rows) else 0


def run(benches: list[KernelBench], dtypes: list[torch.dtype], sizes: list[tuple[int, int]], copy_gbs: float,
        settings: Settings) -> list[Row]:
    """`measure` every benchmark, dtype and size (flat ops once per element count),
    with a progress line per row on stderr."""
    rows: list[Row] = []
    for bench in benches:
        seen = set()
        for dtype in dtypes:
            for r, c in sizes:
                key = (dtype, r * c) if bench.flat else (dtype, r, c)
                if key in seen:
                    continue
                seen.add(key)
                row = measure(bench, r, c, dtype, copy_gbs, settings)
                rows.append(row)
                print(f"{row.kernel:19s} {row.dtype:4s} {row.shape:>12s}: ours {_fmt(row.ours_gbs, '.0f')} GB/s "
                      f"({_fmt(row.pct_of_copy, '.1f')}% of copy), inductor {_fmt(row.inductor_gbs, '.0f')} GB/s, "
                      f"generated {_fmt(row.generated_gbs, '.0f')} GB/s [{row.status}]", file=sys.stderr)
    return rows


if __name__ == "__main__":
    sys.exit(main())
