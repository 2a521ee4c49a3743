"""A corpus of hand-written DSL kernels with torch references, shared by the
interpreter tests, the NVPTX compiler tests (every case must compile and assemble)
and the GPU tests (every case must match on the device).

``cases(device)`` returns fresh `Case`s: random inputs (never all zeros), outputs
poisoned with values that differ from the expected result everywhere (so an unwritten
element always fails), the expected outputs computed with torch, and the launch
(kernel, grid, constexprs, num_warps). ``check(case)`` launches and compares with
tolerances by dtype; NaN only passes where the reference has NaN.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F

import inductor_lite.dsl as dl

# ----------------------------------------------------------------------------- kernels



@dl.kernel
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, XBLOCK: dl.constexpr):
    """out = x * alpha + y: the runtime tests' kernel (a float scalar argument)."""
    offs = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, other=0.0)
    y = dl.load(y_ptr + offs, mask=mask, other=0.0)
    dl.store(out_ptr + offs, x * alpha + y, mask=mask)


@dl.kernel
def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    a = dl.load(a_ptr + offs, mask=mask)
    b = dl.load(b_ptr + offs, mask=mask)
    dl.store(out_ptr + offs, a + b, mask=mask)


@dl.kernel
def copy_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask), mask=mask)


@dl.kernel
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, C, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, other=0.0)
    b = dl.load(bias_ptr + offs % C, mask=mask, other=0.0)
    h = x + b
    y = 0.5 * h * (1.0 + dl.erf(h * 0.7071067811865476))
    dl.store(out_ptr + offs, y, mask=mask)


@dl.kernel
def clamp_kernel(x_ptr, out_ptr, n, lo, hi, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask)
    dl.store(out_ptr + offs, dl.where(x < lo, lo, dl.minimum(x, hi)), mask=mask)


@dl.kernel
def masked_fill_kernel(x_ptr, m_ptr, out_ptr, n, value, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask)
    m = dl.load(m_ptr + offs, mask=mask)
    dl.store(out_ptr + offs, dl.where(m, value, x), mask=mask)


@dl.kernel
def cast_kernel(x_ptr, out_ptr, n, DTYPE: dl.constexpr, BITCAST: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask)
    dl.store(out_ptr + offs, x.to(DTYPE, bitcast=BITCAST), mask=mask)


@dl.kernel
def int_ops_kernel(a_ptr, b_ptr, div_ptr, mod_ptr, mul_ptr, shift_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    a = dl.load(a_ptr + offs, mask=mask)
    b = dl.load(b_ptr + offs, mask=mask, other=1)
    dl.store(div_ptr + offs, a // b, mask=mask)
    dl.store(mod_ptr + offs, a % b, mask=mask)
    dl.store(mul_ptr + offs, a * b, mask=mask)
    dl.store(shift_ptr + offs, (a >> 3) ^ (b << 2), mask=mask)


@dl.kernel
def math_kernel(x_ptr, y_ptr, out_ptr, n, FN: dl.constexpr, BINARY: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask, other=1.0)
    if BINARY:
        r = getattr(dl, FN)(x, dl.load(y_ptr + offs, mask=mask, other=1.0))
    else:
        r = getattr(dl, FN)(x)
    dl.store(out_ptr + offs, r, mask=mask)


@dl.kernel(ftz=True)
def reciprocal_ftz_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.fast_dividef(1.0, dl.load(x_ptr + offs, mask=mask, other=1.0)), mask=mask)


@dl.kernel
def maximum_kernel(a_ptr, b_ptr, max_ptr, min_ptr, n, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    a = dl.load(a_ptr + offs, mask=mask)
    b = dl.load(b_ptr + offs, mask=mask)
    dl.store(max_ptr + offs, dl.maximum(a, b), mask=mask)
    dl.store(min_ptr + offs, dl.minimum(a, b), mask=mask)


@dl.kernel
def softmax_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    mask = (row < rows) & (col < cols)
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=float("-inf")).to(dl.float32)
    m = dl.max(x, 1)[:, None]
    e = dl.where(mask, dl.exp(x - m), 0.0)
    s = dl.sum(e, 1)[:, None]
    dl.store(out_ptr + row * cols + col, e / s, mask=mask)


@dl.kernel
def layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols, eps,
                     XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    cmask = col < cols
    mask = (row < rows) & cmask
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(dl.float32)
    mean = dl.sum(x, 1)[:, None] / cols
    d = dl.where(mask, x - mean, 0.0)
    var = dl.sum(d * d, 1)[:, None] / cols
    rstd = dl.rsqrt(var + eps)
    w = dl.load(w_ptr + col, mask=cmask, other=0.0)
    b = dl.load(b_ptr + col, mask=cmask, other=0.0)
    dl.store(out_ptr + row * cols + col, d * rstd * w + b, mask=mask)


@dl.kernel
def layernorm_welford_kernel(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, rows, cols, eps,
                             XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # Persistent: each row whole in one block, statistics in one Welford pass.
    row1 = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    row = row1[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    cmask = col < cols
    mask = (row < rows) & cmask
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(dl.float32)
    mean, m2, weight = dl.welford(x, 0.0, mask, 1)
    rstd = dl.rsqrt(m2 / weight + eps)
    w = dl.load(w_ptr + col, mask=cmask, other=0.0)
    b = dl.load(b_ptr + col, mask=cmask, other=0.0)
    dl.store(out_ptr + row * cols + col, (x - mean[:, None]) * rstd[:, None] * w + b, mask=mask)
    dl.store(mean_ptr + row1, mean, mask=row1 < rows)
    dl.store(rstd_ptr + row1, rstd, mask=row1 < rows)


@dl.kernel
def layernorm_welford_looped_kernel(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols, eps,
                                    XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # Looped: per-lane running states over RBLOCK-wide chunks, reduced after the loop;
    # a second pass normalises.
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    rmask = row < rows
    mean = dl.zeros([XBLOCK, RBLOCK], dl.float32)
    m2 = dl.zeros([XBLOCK, RBLOCK], dl.float32)
    weight = dl.zeros([XBLOCK, RBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)[None, :]
        mask = rmask & (col < cols)
        x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
        mean, m2, weight = dl.welford_combine(mean, m2, weight, x, 0.0, mask)
    mean, m2, weight = dl.welford(mean, m2, weight, 1, keep_dims=True)
    rstd = dl.rsqrt(m2 / weight + eps)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)[None, :]
        cmask = col < cols
        mask = rmask & cmask
        x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
        w = dl.load(w_ptr + col, mask=cmask, other=0.0)
        b = dl.load(b_ptr + col, mask=cmask, other=0.0)
        dl.store(out_ptr + row * cols + col, (x - mean) * rstd * w + b, mask=mask)


@dl.kernel
def row_var_kernel(x_ptr, mean_ptr, var_ptr, rows, cols, CORRECTION: dl.constexpr,
                   XBLOCK: dl.constexpr, RBLOCK: dl.constexpr, WEIGHT_ONE: dl.constexpr = False):
    # Mean and variance along rows (torch.var_mean with ``correction``), in the input's
    # compute type (fp64 stays fp64). WEIGHT_ONE (full rows, cols == RBLOCK): every value
    # weighs the constant 1, not its mask (the compiler's equal-weight combine).
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    rmask = row < rows
    mask = rmask & (col < cols)
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
    mean, m2, n = dl.welford(x, 0.0, 1.0 if WEIGHT_ONE else mask, 1, keep_dims=True)
    dl.store(mean_ptr + row, mean, mask=rmask)
    dl.store(var_ptr + row, m2 / (n - CORRECTION), mask=rmask)


@dl.kernel
def welford_states_kernel(mean_ptr, m2_ptr, w_ptr, mean_out, m2_out, w_out, n, K: dl.constexpr,
                          AXIS: dl.constexpr, BLOCK: dl.constexpr):
    # Merges the K Welford states of each of n rows (stored [n, K]): with AXIS through
    # the reduction, else (K == 2) through the elementwise combine.
    row = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = row < n
    if AXIS:
        offs = row[:, None] * K + dl.arange(0, K)[None, :]
        m = mask[:, None]
        mean, m2, w = dl.welford(dl.load(mean_ptr + offs, mask=m), dl.load(m2_ptr + offs, mask=m),
                                 dl.load(w_ptr + offs, mask=m), 1)
    else:
        a, b = row * 2, row * 2 + 1
        mean, m2, w = dl.welford_combine(
            dl.load(mean_ptr + a, mask=mask), dl.load(m2_ptr + a, mask=mask), dl.load(w_ptr + a, mask=mask),
            dl.load(mean_ptr + b, mask=mask), dl.load(m2_ptr + b, mask=mask), dl.load(w_ptr + b, mask=mask))
    dl.store(mean_out + row, mean, mask=mask)
    dl.store(m2_out + row, m2, mask=mask)
    dl.store(w_out + row, w, mask=mask)


@dl.kernel
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, rows, cols, eps, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    cmask = col < cols
    mask = (row < rows) & cmask
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0).to(dl.float32)
    ms = dl.sum(x * x, 1)[:, None] / cols
    w = dl.load(w_ptr + col, mask=cmask, other=0.0)
    dl.store(out_ptr + row * cols + col, x * dl.rsqrt(ms + eps) * w, mask=mask)


@dl.kernel
def row_sum_looped_kernel(in_ptr0, out_ptr0, xnumel, rnumel, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    acc = dl.zeros([XBLOCK, RBLOCK], dl.float32)
    for roffset in range(0, rnumel, RBLOCK):
        rindex = roffset + dl.arange(0, RBLOCK)[None, :]
        rmask = rindex < rnumel
        acc = acc + dl.load(in_ptr0 + xindex * rnumel + rindex, mask=xmask & rmask, other=0.0)
    dl.store(out_ptr0 + xindex, dl.sum(acc, 1)[:, None], mask=xmask)


@dl.kernel
def row_sum_persistent_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    rmask = row < rows
    x = dl.load(x_ptr + row * cols + col, mask=rmask & (col < cols))
    dl.store(out_ptr + row, dl.sum(x, 1)[:, None], mask=rmask)


@dl.kernel
def row_sum_pointer_loop_kernel(x_ptr, out_ptr, cols, RBLOCK: dl.constexpr):
    row = dl.program_id(0)
    p = x_ptr + row * cols + dl.arange(0, RBLOCK)
    acc = 0.0
    for start in range(0, cols, RBLOCK):
        mask = start + dl.arange(0, RBLOCK) < cols
        acc += dl.sum(dl.load(p, mask=mask, other=0.0), 0)
        p += RBLOCK
    dl.store(out_ptr + row, acc)


@dl.kernel
def row_arg_kernel(x_ptr, out_ptr, rows, cols, FILL: dl.constexpr, ARGMAX: dl.constexpr,
                   XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    rmask = row < rows
    x = dl.load(x_ptr + row * cols + col, mask=rmask & (col < cols), other=FILL)
    idx = dl.argmax(x, 1) if ARGMAX else dl.argmin(x, 1)
    dl.store(out_ptr + row, idx[:, None], mask=rmask)


@dl.kernel
def first_above_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    """out[r] = the first column where x[r, :] > 1.5, else RBLOCK (the compiler's
    first-index reduction)."""
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    mask = (row < rows) & (col < cols)
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
    dl.store(out_ptr + row, dl.min(dl.where(mask & (x > 1.5), col, RBLOCK), 1)[:, None], mask=row < rows)


@dl.kernel
def row_max_kernel(x_ptr, max_ptr, min_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    rmask = row < rows
    mask = rmask & (col < cols)
    x = dl.load(x_ptr + row * cols + col, mask=mask, other=0.0)
    dl.store(max_ptr + row, dl.max(dl.where(mask, x, float("-inf")), 1)[:, None], mask=rmask)
    dl.store(min_ptr + row, dl.min(dl.where(mask, x, float("inf")), 1)[:, None], mask=rmask)


@dl.kernel
def transpose_kernel(x_ptr, out_ptr, M, N, BM: dl.constexpr, BN: dl.constexpr):
    rm = dl.program_id(0) * BM + dl.arange(0, BM)[:, None]
    rn = dl.program_id(1) * BN + dl.arange(0, BN)[None, :]
    mask = (rm < M) & (rn < N)
    x = dl.load(x_ptr + rm * N + rn, mask=mask)
    dl.store(out_ptr + rn * M + rm, x, mask=mask)


@dl.kernel
def scalar_logic_kernel(x_ptr, out_ptr, scale):
    pid = dl.program_id(0)
    x = dl.load(x_ptr + pid)
    keep = x > 0.0 and not dl.abs(x) > 1.0
    dl.store(out_ptr + pid, dl.where(keep or x < -2.0, x * scale, -x))


@dl.kernel
def poly_kernel(x_ptr, out_ptr, n, DEGREE: dl.constexpr, BLOCK: dl.constexpr):
    offs = dl.program_id(0) * BLOCK + dl.arange(0, BLOCK)
    mask = offs < n
    x = dl.load(x_ptr + offs, mask=mask)
    acc = dl.full([BLOCK], 1.0, dl.float32)
    for i in dl.static_range(DEGREE):
        acc = acc * x + (i + 1)
    dl.store(out_ptr + offs, acc, mask=mask)


@dl.kernel
def grid_stride_kernel(x_ptr, out_ptr, n, BLOCK: dl.constexpr):
    for start in range(dl.program_id(0) * BLOCK, n, dl.num_programs(0) * BLOCK):
        offs = start + dl.arange(0, BLOCK)
        mask = offs < n
        dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@dl.kernel
def softmax_row_loop_kernel(x_ptr, out_ptr, rows, cols, RBLOCK: dl.constexpr):
    # Programs stride over rows: a loop whose loads num_stages > 1 streams ahead.
    col = dl.arange(0, RBLOCK)
    cmask = col < cols
    for row in range(dl.program_id(0), rows, dl.num_programs(0)):
        x = dl.load(x_ptr + row * cols + col, mask=cmask, other=float("-inf")).to(dl.float32)
        e = dl.exp(x - dl.max(x, 0))
        dl.store(out_ptr + row * cols + col, (e / dl.sum(e, 0)).to(out_ptr.dtype.element), mask=cmask)


@dl.kernel
def chunk_max_loop_kernel(x_ptr, out_ptr, n, RBLOCK: dl.constexpr):
    # A mask that moves with the loop and a nonzero `other`: pipelined, the next chunk's
    # copies must use the next chunk's offsets, not this one's.
    col = dl.arange(0, RBLOCK)
    acc = dl.full([RBLOCK], float("-inf"), dl.float32)
    for start in range(0, n, RBLOCK):
        c = start + col
        acc = dl.maximum(acc, dl.load(x_ptr + c, mask=c < n, other=float("-inf")))
    dl.store(out_ptr, dl.max(acc, 0))


@dl.kernel
def layernorm_row_loop_kernel(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols, eps, RBLOCK: dl.constexpr):
    # Programs stride over rows; the row is loaded twice, before and after its
    # reductions (pipelined, the second load reads the first one's buffer again).
    col = dl.arange(0, RBLOCK)
    cmask = col < cols
    for row in range(dl.program_id(0), rows, dl.num_programs(0)):
        x = dl.load(x_ptr + row * cols + col, mask=cmask, other=0.0).to(dl.float32)
        mean = dl.sum(x, 0) / cols
        d = dl.where(cmask, x - mean, 0.0)
        rstd = dl.rsqrt(dl.sum(d * d, 0) / cols + eps)
        y = (dl.load(x_ptr + row * cols + col, mask=cmask, other=0.0).to(dl.float32) - mean) * rstd
        w = dl.load(w_ptr + col, mask=cmask).to(dl.float32)
        b = dl.load(b_ptr + col, mask=cmask).to(dl.float32)
        dl.store(out_ptr + row * cols + col, (y * w + b).to(out_ptr.dtype.element), mask=cmask)


@dl.kernel
def split_row_sum_kernel(x_ptr, part_ptr, count_ptr, out_ptr, cols, CHUNKS: dl.constexpr,
                         CHUNKS_BLOCK: dl.constexpr, RBLOCK: dl.constexpr):
    # CHUNKS programs a row; the last to count itself in count[row] adds the partial sums.
    pid = dl.program_id(0)
    row = pid // CHUNKS
    col = (pid % CHUNKS) * RBLOCK + dl.arange(0, RBLOCK)
    dl.store(part_ptr + pid, dl.sum(dl.load(x_ptr + row * cols + col, mask=col < cols, other=0.0), 0))
    last = dl.atomic_add(count_ptr + row, 1) == CHUNKS - 1
    chunk = dl.arange(0, CHUNKS_BLOCK)
    parts = dl.load(part_ptr + row * CHUNKS + chunk, mask=last & (chunk < CHUNKS), other=0.0)
    dl.store(out_ptr + row, dl.sum(parts, 0), mask=last)
    dl.store(count_ptr + row, 0, mask=last)


# ----------------------------------------------------------------------------- cases


@dataclasses.dataclass
class Case:
    """One launch with its expected result.

    ``expected`` maps an index into ``args`` (an output tensor) to the tensor it must
    hold after the launch; ``launch()`` runs ``kernel[grid](*args, num_warps=...,
    num_stages=..., **constexprs)``.
    """

    name: str
    kernel: dl.Kernel
    args: tuple
    constexprs: dict[str, Any]
    grid: Union[tuple, Callable[[dict], tuple]]
    expected: dict[int, torch.Tensor]
    num_warps: Optional[int] = None
    exact: bool = False  # floats must match exactly too (max, min: the result is an input)
    num_stages: int = 1

    def launch(self) -> None:
        self.kernel[self.grid](*self.args, num_warps=self.num_warps, num_stages=self.num_stages, **self.constexprs)


TOLERANCES = {
    torch.float16: (2e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-10),
}
"""(rtol, atol) per floating dtype; integer and bool outputs must match exactly."""


def poison_like(expected: torch.Tensor) -> torch.Tensor:
    """A tensor that differs from ``expected`` in every element."""
    if expected.dtype == torch.bool:
        return ~expected
    if expected.dtype.is_floating_point:
        return torch.where(torch.isnan(expected), 1234.5, float("nan")).to(expected.dtype)
    return expected ^ 1


def check(case: Case) -> None:
    """Launch ``case`` and compare every output with its reference.

    Raises:
        AssertionError: a mismatch (torch.testing's message names the elements).
    """
    case.launch()
    for index, want in case.expected.items():
        got = case.args[index]
        rtol, atol = (0, 0) if case.exact else TOLERANCES.get(want.dtype, (0, 0))
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m, i=index: f"{case.name}: output argument {i}: {m}")


class _Builder:
    """Makes inputs on one device from one seeded generator and collects cases."""

    def __init__(self, device: str, seed: int):
        self.device = device
        self.gen = torch.Generator().manual_seed(seed)
        self.cases: list[Case] = []

    def randn(self, *shape, dtype=torch.float32, scale=1.0, offset=0.0) -> torch.Tensor:
        x = torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale + offset
        return x.to(dtype).to(self.device)

    def randint(self, lo, hi, *shape, dtype=torch.int32) -> torch.Tensor:
        x = torch.randint(lo, hi, shape, generator=self.gen, dtype=torch.int64)
        return x.to(dtype).to(self.device)

    def add(self, name, kernel, args, constexprs, grid, expected: dict[int, torch.Tensor], num_warps=None,
            exact=False):
        args = list(args)
        for index, want in expected.items():
            args[index] = poison_like(want)
        self.cases.append(Case(name, kernel, tuple(args), constexprs, grid, expected, num_warps, exact))


def _grid1(n: int, block: int) -> tuple[int]:
    return (dl.cdiv(n, block),)


def _elementwise_cases(c: _Builder) -> None:
    for dtype, n in [(torch.float32, 1000), (torch.float16, 17), (torch.bfloat16, 1), (torch.float64, 300)]:
        a, b = c.randn(n, dtype=dtype), c.randn(n, dtype=dtype)
        want = (a.float() + b.float()).to(dtype) if dtype.itemsize == 2 else a + b
        c.add(f"add_{dtype}_{n}", add_kernel, (a, b, None, n), {"BLOCK": 256}, _grid1(n, 256), {2: want})
    for dtype, lo, hi in [(torch.int32, -2**31, 2**31), (torch.int64, -2**62, 2**62), (torch.int8, -128, 128),
                          (torch.uint8, 0, 256), (torch.bool, 0, 2)]:
        n = 333
        a, b = c.randint(lo, hi, n, dtype=dtype), c.randint(lo, hi, n, dtype=dtype)
        c.add(f"add_{dtype}", add_kernel, (a, b, None, n), {"BLOCK": 128}, _grid1(n, 128), {2: a + b})
    for dtype in (torch.bool, torch.uint8, torch.bfloat16):
        x = c.randint(0, 2, 65, dtype=dtype)
        c.add(f"copy_{dtype}", copy_kernel, (x, None, 65), {"BLOCK": 32}, _grid1(65, 32), {1: x.clone()})
    n = 777
    a, b = c.randn(n), c.randn(n)
    c.add("add_callable_grid", add_kernel, (a, b, None, n), {"BLOCK": 64},
          lambda meta, n=n: (dl.cdiv(n, meta["BLOCK"]),), {2: a + b}, num_warps=2)

    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        n, C = 3 * 96 + 5, 96
        x, bias = c.randn(n, dtype=dtype), c.randn(C, dtype=dtype)
        want = F.gelu(x.float() + bias.float().repeat(4)[:n]).to(dtype)
        c.add(f"bias_gelu_{dtype}", bias_gelu_kernel, (x, bias, None, n, C), {"BLOCK": 128}, _grid1(n, 128),
              {2: want})

    for dtype in (torch.float32, torch.float16):
        n = 500
        x = c.randn(n, dtype=dtype, scale=2.0)
        x[::37] = float("nan")
        want = torch.clamp(x.float(), -0.5, 1.25).to(dtype)
        c.add(f"clamp_{dtype}", clamp_kernel, (x, None, n, -0.5, 1.25), {"BLOCK": 128}, _grid1(n, 128), {1: want})
    x = c.randint(-100, 100, 500)
    c.add("clamp_int32", clamp_kernel, (x, None, 500, -7, 9), {"BLOCK": 128}, _grid1(500, 128),
          {1: torch.clamp(x, -7, 9)})

    n = 300
    x, m = c.randn(n, dtype=torch.float16), c.randint(0, 2, n, dtype=torch.bool)
    c.add("masked_fill_fp16", masked_fill_kernel, (x, m, None, n, -3.5), {"BLOCK": 64}, _grid1(n, 64),
          {2: x.masked_fill(m, -3.5)})


def _cast_cases(c: _Builder) -> None:
    n = 257
    floats = c.randn(n, scale=50.0)
    floats[::50] = 0.0
    pairs = [
        (floats, torch.float16), (floats, torch.bfloat16), (floats, torch.int32), (floats, torch.bool),
        (floats, torch.float64), (c.randint(-2**31, 2**31, n), torch.float32),
        (c.randn(n, dtype=torch.float16), torch.bfloat16), (c.randn(n, dtype=torch.bfloat16), torch.float16),
        (c.randint(-2**40, 2**40, n, dtype=torch.int64), torch.int8),
        (c.randint(-128, 128, n, dtype=torch.int8), torch.int64),
        (c.randint(0, 256, n, dtype=torch.uint8), torch.int32),
        (c.randint(0, 256, n, dtype=torch.uint8), torch.float32),
        (c.randint(0, 2, n, dtype=torch.bool), torch.float32),
        (c.randint(-3, 3, n, dtype=torch.int32), torch.bool),
    ]
    for x, to in pairs:
        c.add(f"cast_{x.dtype}_to_{to}", cast_kernel, (x, None, n),
              {"DTYPE": _DL[to], "BITCAST": False, "BLOCK": 64}, _grid1(n, 64), {1: x.to(to)})
    for x, to in [(floats, torch.int32), (c.randn(n, dtype=torch.float16), torch.int16)]:
        c.add(f"bitcast_{x.dtype}_to_{to}", cast_kernel, (x, None, n),
              {"DTYPE": _DL[to], "BITCAST": True, "BLOCK": 64}, _grid1(n, 64), {1: x.view(to)})


_DL = {
    torch.float16: dl.float16, torch.bfloat16: dl.bfloat16, torch.float32: dl.float32, torch.float64: dl.float64,
    torch.bool: dl.int1, torch.int8: dl.int8, torch.int16: dl.int16, torch.int32: dl.int32, torch.int64: dl.int64,
    torch.uint8: dl.uint8,
}


def _int_cases(c: _Builder) -> None:
    for dtype, lo, hi in [(torch.int32, -2**31, 2**31), (torch.int64, -2**62, 2**62), (torch.int32, -50, 50)]:
        n = 300
        a = c.randint(lo, hi, n, dtype=dtype)
        b = c.randint(-20, 20, n, dtype=dtype)
        b[b == 0] = 7
        b[:3] = torch.tensor([-1, 1, -7], dtype=dtype)
        expected = {
            2: torch.div(a, b, rounding_mode="trunc"),
            3: torch.fmod(a, b),
            4: a * b,
            5: (a >> 3) ^ (b << 2),
        }
        c.add(f"int_ops_{dtype}_{hi}", int_ops_kernel, (a, b, None, None, None, None, n), {"BLOCK": 128},
              _grid1(n, 128), expected)


def _math_cases(c: _Builder) -> None:
    n = 200
    anywhere = c.randn(n)
    positive = c.randn(n).abs() + 0.1
    unit = torch.rand(n, generator=c.gen).to(c.device) * 1.8 - 0.9
    unary = {
        "exp": anywhere, "exp2": anywhere, "expm1": anywhere * 0.1, "log": positive, "log2": positive,
        "log1p": positive, "sqrt": positive, "rsqrt": positive, "abs": anywhere, "sin": anywhere,
        "cos": anywhere, "tan": unit, "tanh": anywhere, "sigmoid": anywhere * 4, "erf": anywhere,
        "floor": anywhere * 3, "ceil": anywhere * 3, "trunc": anywhere * 3,
        "round": torch.cat([torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5], device=c.device), anywhere[5:] * 3]),
    }
    for fn, x in unary.items():
        want = getattr(torch, fn)(x)
        c.add(f"math_{fn}", math_kernel, (x, x, None, n), {"FN": fn, "BINARY": False, "BLOCK": 64},
              _grid1(n, 64), {2: want})
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0], device=c.device).repeat(n // 4)
    for fn in ("isnan", "isinf"):
        c.add(f"math_{fn}", math_kernel, (special, special, None, n), {"FN": fn, "BINARY": False, "BLOCK": 64},
              _grid1(n, 64), {2: getattr(torch, fn)(special)})
    y = c.randn(n)
    for fn, x in {"pow": positive, "atan2": anywhere, "fmod": anywhere * 5}.items():
        c.add(f"math_{fn}", math_kernel, (x, y, None, n), {"FN": fn, "BINARY": True, "BLOCK": 64},
              _grid1(n, 64), {2: getattr(torch, fn)(x, y)})
    # Approximate in fp32 (within 2 ulp), exact in fp64; 1 / y in an ftz kernel is a reciprocal.
    for dtype in (torch.float32, torch.float64):
        x, y = c.randn(n, dtype=dtype), c.randn(n, dtype=dtype) + 3.0
        c.add(f"math_fast_dividef_{dtype}", math_kernel, (x, y, None, n),
              {"FN": "fast_dividef", "BINARY": True, "BLOCK": 64}, _grid1(n, 64), {2: x / y})
    c.add("reciprocal_ftz", reciprocal_ftz_kernel, (y, None, n), {"BLOCK": 64}, _grid1(n, 64), {1: 1.0 / y})
    x16 = c.randn(n, dtype=torch.float16)
    c.add("math_exp_fp16", math_kernel, (x16, x16, None, n), {"FN": "exp", "BINARY": False, "BLOCK": 64},
          _grid1(n, 64), {2: torch.exp(x16.float()).half()})

    a, b = c.randn(n), c.randn(n)
    a[::7], b[::5] = float("nan"), float("nan")
    c.add("maximum_nan", maximum_kernel, (a, b, None, None, n), {"BLOCK": 64}, _grid1(n, 64),
          {2: torch.maximum(a, b), 3: torch.minimum(a, b)})


def _row_cases(c: _Builder) -> None:
    for dtype, rows, cols in [(torch.float32, 37, 100), (torch.float16, 5, 17), (torch.bfloat16, 1, 1)]:
        x = c.randn(rows, cols, dtype=dtype, scale=3.0)
        grid = _grid1(rows, 4)
        c.add(f"softmax_{dtype}_{rows}x{cols}", softmax_kernel, (x, None, rows, cols),
              {"XBLOCK": 4, "RBLOCK": 128}, grid, {1: torch.softmax(x.float(), -1).to(dtype)})
        w, b = c.randn(cols, dtype=dtype), c.randn(cols, dtype=dtype)
        want = F.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).to(dtype)
        c.add(f"layernorm_{dtype}_{rows}x{cols}", layernorm_kernel, (x, w, b, None, rows, cols, 1e-5),
              {"XBLOCK": 4, "RBLOCK": 128}, grid, {3: want})
        xf = x.float()
        want = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(dtype)
        c.add(f"rmsnorm_{dtype}_{rows}x{cols}", rmsnorm_kernel, (x, w, None, rows, cols, 1e-6),
              {"XBLOCK": 2, "RBLOCK": 128}, _grid1(rows, 2), {2: want})

    _welford_cases(c)

    x = c.randn(37, 300)
    c.add("row_sum_looped", row_sum_looped_kernel, (x, None, 37, 300), {"XBLOCK": 8, "RBLOCK": 64},
          lambda meta: (dl.cdiv(37, meta["XBLOCK"]),), {1: x.sum(1)})
    c.add("row_sum_pointer_loop", row_sum_pointer_loop_kernel, (x, None, 300), {"RBLOCK": 32}, (37,),
          {1: x.sum(1)})
    for dtype, lo, hi in [(torch.float32, 0, 0), (torch.int32, -2**31, 2**31), (torch.int8, -128, 128),
                          (torch.float16, 0, 0)]:
        x = c.randn(9, 50, dtype=dtype) if dtype.is_floating_point else c.randint(lo, hi, 9, 50, dtype=dtype)
        out_dtype = torch.float32 if dtype.is_floating_point else torch.int32
        want = x.sum(1, dtype=out_dtype)
        c.add(f"row_sum_persistent_{dtype}", row_sum_persistent_kernel, (x, None, 9, 50),
              {"XBLOCK": 4, "RBLOCK": 64}, _grid1(9, 4), {1: want.to(out_dtype)})

    ties = c.randint(0, 4, 13, 70).float()
    ties[3, 10] = ties[3, 40] = float("nan")
    ties[5] = 2.0
    ints = c.randint(-3, 3, 13, 70)
    for name, x, fill in [("float", ties, float("-inf")), ("int32", ints, -2**31)]:
        c.add(f"row_argmax_{name}", row_arg_kernel, (x, None, 13, 70),
              {"FILL": fill, "ARGMAX": True, "XBLOCK": 2, "RBLOCK": 128}, _grid1(13, 2),
              {1: x.argmax(1).to(torch.int32)})
    fill_max = {"float": float("inf"), "int32": 2**31 - 1}
    for name, x in [("float", ties), ("int32", ints)]:
        c.add(f"row_argmin_{name}", row_arg_kernel, (x, None, 13, 70),
              {"FILL": fill_max[name], "ARGMAX": False, "XBLOCK": 2, "RBLOCK": 128}, _grid1(13, 2),
              {1: x.argmin(1).to(torch.int32)})

    x = c.randn(13, 70)
    x[3] = 0.0  # no column above 1.5
    above = torch.where(x > 1.5, torch.arange(70, device=x.device), 128).amin(1).to(torch.int32)
    for warps in (1, 4):  # 8 or 2 values a thread
        c.add(f"first_above_w{warps}", first_above_kernel, (x, None, 13, 70), {"XBLOCK": 2, "RBLOCK": 128},
              _grid1(13, 2), {1: above}, num_warps=warps)

    # Max/min are exact (the result is one of the inputs); half types pack pairs on
    # sm_80+. Zeros of both signs compare equal (torch's sign for them depends on order).
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = c.randn(6, 100).to(dtype)
        x[1, 7] = x[4, 0] = x[4, 99] = float("nan")
        x[2, :] = -0.0
        x[2, 5] = 0.0
        x[3, 10], x[3, 11] = float("inf"), float("-inf")
        x[5, :] = float("-inf")
        suffix = "" if dtype == torch.float32 else f"_{dtype}"
        c.add(f"row_max_nan{suffix}", row_max_kernel, (x, None, None, 6, 100), {"XBLOCK": 2, "RBLOCK": 128},
              _grid1(6, 2), {1: x.amax(1), 2: x.amin(1)}, num_warps=1, exact=True)  # 4 values a row a thread


def _welford_state_data(c: _Builder, n: int, k: int, max_len: int = 9):
    """Welford states of ``n * k`` random groups of 0 to ``max_len`` values (float32,
    [n, k]; empty groups are (0, 0, 0), and all groups of row 0 are empty) and the
    states of each row's union ([n], computed in float64)."""
    x = c.randn(n, k, max_len, dtype=torch.float64, scale=2.0, offset=1.0)
    counts = c.randint(0, max_len + 1, n, k, dtype=torch.int64)
    counts[0] = 0
    counts[1:, 0] = torch.where(torch.arange(n - 1, device=c.device) % 3 == 0, 0, counts[1:, 0])

    def states(values, valid, dims):
        w = valid.sum(dims).double()
        mean = torch.where(w > 0, (values * valid).sum(dims) / w.clamp(min=1), 0.0)
        dev = (values - mean.reshape(mean.shape + (1,) * len(dims))) * valid
        return mean, (dev * dev).sum(dims), w

    valid = torch.arange(max_len, device=c.device) < counts[..., None]
    groups = [t.float() for t in states(x, valid, (2,))]
    union = [t.float() for t in states(x, valid, (1, 2))]
    return groups, union


def _welford_cases(c: _Builder) -> None:
    for k, axis in [(2, False), (2, True), (16, True)]:
        n = 50
        (mean, m2, w), want = _welford_state_data(c, n, k)
        c.add(f"welford_states_k{k}_{'axis' if axis else 'combine'}", welford_states_kernel,
              (mean, m2, w, None, None, None, n), {"K": k, "AXIS": axis, "BLOCK": 32}, _grid1(n, 32),
              {3: want[0], 4: want[1], 5: want[2]})
    for dtype, rows, cols in [(torch.float32, 37, 100), (torch.bfloat16, 5, 17), (torch.float32, 3, 1)]:
        x = c.randn(rows, cols, dtype=dtype, scale=3.0, offset=1.0)
        w, b = c.randn(cols, dtype=dtype), c.randn(cols, dtype=dtype)
        xf = x.float()
        want = F.layer_norm(xf, (cols,), w.float(), b.float(), 1e-5).to(dtype)
        var, mean = torch.var_mean(xf, 1, correction=0)
        c.add(f"layernorm_welford_{dtype}_{rows}x{cols}", layernorm_welford_kernel,
              (x, w, b, None, None, None, rows, cols, 1e-5), {"XBLOCK": 4, "RBLOCK": 128}, _grid1(rows, 4),
              {3: want, 4: mean, 5: torch.rsqrt(var + 1e-5)})
    for dtype, rows, cols, rblock in [(torch.float32, 19, 300, 64), (torch.bfloat16, 6, 1000, 256),
                                      (torch.float32, 2, 7, 16)]:
        x = c.randn(rows, cols, dtype=dtype, scale=2.0, offset=-1.0)
        w, b = c.randn(cols, dtype=dtype), c.randn(cols, dtype=dtype)
        want = F.layer_norm(x.float(), (cols,), w.float(), b.float(), 1e-5).to(dtype)
        c.add(f"layernorm_welford_looped_{dtype}_{rows}x{cols}", layernorm_welford_looped_kernel,
              (x, w, b, None, rows, cols, 1e-5), {"XBLOCK": 2, "RBLOCK": rblock}, _grid1(rows, 2), {3: want})
    for dtype, rows, cols, correction, xblock, rblock, warps in [
        (torch.float32, 33, 70, 1, 4, 128, None), (torch.bfloat16, 9, 50, 0, 2, 64, None),
        (torch.float64, 5, 200, 1, 2, 256, None), (torch.float32, 3, 2000, 1, 1, 2048, 8),
    ]:
        x = c.randn(rows, cols, dtype=dtype, scale=3.0, offset=1.0)
        stat = torch.float64 if dtype == torch.float64 else torch.float32
        var, mean = torch.var_mean(x.to(stat), 1, correction=correction)
        c.add(f"row_var_{dtype}_{rows}x{cols}", row_var_kernel, (x, mean, var, rows, cols),
              {"CORRECTION": correction, "XBLOCK": xblock, "RBLOCK": rblock}, _grid1(rows, xblock),
              {1: mean, 2: var}, num_warps=warps)
    for dtype, rows, cols, xblock, warps in [(torch.float32, 5, 2048, 1, 8), (torch.bfloat16, 6, 256, 2, None),
                                             (torch.float64, 3, 512, 1, 4)]:
        x = c.randn(rows, cols, dtype=dtype, scale=3.0, offset=5.0)
        stat = torch.float64 if dtype == torch.float64 else torch.float32
        var, mean = torch.var_mean(x.to(stat), 1, correction=0)
        c.add(f"row_var_weight_one_{dtype}_{rows}x{cols}", row_var_kernel, (x, mean, var, rows, cols),
              {"CORRECTION": 0, "XBLOCK": xblock, "RBLOCK": cols, "WEIGHT_ONE": True}, _grid1(rows, xblock),
              {1: mean, 2: var}, num_warps=warps)


def _misc_cases(c: _Builder) -> None:
    x = c.randn(45, 70)
    c.add("transpose_2d_grid", transpose_kernel, (x, None, 45, 70), {"BM": 16, "BN": 32},
          (dl.cdiv(45, 16), dl.cdiv(70, 32)), {1: x.t().contiguous()})
    x = c.randn(64, scale=2.0)
    keep = (x > 0) & ~(x.abs() > 1)
    want = torch.where(keep | (x < -2), x * 1.5, -x)
    c.add("scalar_logic", scalar_logic_kernel, (x, None, 1.5), {}, (64,), {1: want})
    x = c.randn(100)
    want = torch.ones_like(x)
    for i in range(4):
        want = want * x + (i + 1)
    c.add("static_range_poly", poly_kernel, (x, None, 100), {"DEGREE": 4, "BLOCK": 32}, _grid1(100, 32),
          {1: want})
    x = c.randn(1000)
    c.add("grid_stride_loop", grid_stride_kernel, (x, None, 1000), {"BLOCK": 64}, (3,), {1: x * 2})
    # Accesses of 2, 4 and 8 bytes a thread (int8 over 1 and 2 warps, fp64); n divisible
    # by 16 keeps the masks constant over the wider ones.
    for dtype, n, block, warps in [(torch.int8, 1001, 64, 1), (torch.int8, 1008, 256, 2),
                                   (torch.float64, 1008, 128, 4)]:
        x = c.randint(-60, 60, n, dtype=dtype) if dtype == torch.int8 else c.randn(n, dtype=dtype)
        c.add(f"grid_stride_loop_{dtype}_{block}", grid_stride_kernel, (x, None, n), {"BLOCK": block}, (3,),
              {1: x * 2}, num_warps=warps)
    # More programs than rows (some run no iteration), rows not a multiple of programs.
    for dtype, rows, cols, rblock, programs in [(torch.float32, 37, 100, 128, 5), (torch.bfloat16, 9, 1008, 1024, 4),
                                                (torch.float16, 2, 17, 32, 4)]:
        x = c.randn(rows, cols, dtype=dtype, scale=3.0)
        want = torch.softmax(x.double(), -1).to(dtype)
        c.add(f"softmax_row_loop_{dtype}_{rows}x{cols}", softmax_row_loop_kernel, (x, None, rows, cols),
              {"RBLOCK": rblock}, (programs,), {1: want})
    for n, rblock in [(1000, 128), (4000, 512)]:
        x = c.randn(n)
        x[n - 10] = 100.0  # the maximum sits in the last chunk
        c.add(f"chunk_max_loop_{n}", chunk_max_loop_kernel, (x, None, n),
              {"RBLOCK": rblock}, (1,), {1: x.max().reshape(1)}, exact=True)
    for dtype, rows, cols, rblock, programs in [(torch.float32, 11, 304, 512, 4), (torch.bfloat16, 6, 1000, 1024, 4)]:
        x = c.randn(rows, cols, dtype=dtype, scale=2.0)
        w, b = c.randn(cols, dtype=dtype), c.randn(cols, dtype=dtype)
        want = F.layer_norm(x.double(), (cols,), w.double(), b.double(), 1e-5).to(dtype)
        c.add(f"layernorm_row_loop_{dtype}_{rows}x{cols}", layernorm_row_loop_kernel,
              (x, w, b, None, rows, cols, 1e-5), {"RBLOCK": rblock}, (programs,), {3: want})
    # Rows split over programs that elect a last one with an atomic counter; the counts
    # start at 0 and the kernel leaves them at 0.
    for dtype, rows, cols, chunks, rblock in [(torch.float32, 13, 1000, 4, 256), (torch.float64, 3, 70, 3, 32)]:
        x = c.randn(rows, cols, dtype=dtype)
        part = torch.empty(rows * chunks, dtype=dtype, device=c.device)
        count = torch.zeros(rows, dtype=torch.int32, device=c.device)
        c.add(f"split_row_sum_{dtype}_{rows}x{cols}", split_row_sum_kernel, (x, part, count, None, cols),
              {"CHUNKS": chunks, "CHUNKS_BLOCK": 1 << (chunks - 1).bit_length(), "RBLOCK": rblock},
              (rows * chunks,), {3: x.double().sum(-1).to(dtype)})
    x = c.randn(1)
    c.add("add_size1_big_block", add_kernel, (x, x, None, 1), {"BLOCK": 1024}, (1,), {2: x + x})


def cases(device: str = "cpu", seed: int = 0) -> list[Case]:
    """Every corpus case with fresh inputs on ``device``."""
    c = _Builder(device, seed)
    for make in (_elementwise_cases, _cast_cases, _int_cases, _math_cases, _row_cases, _misc_cases):
        make(c)
    return c.cases


KERNELS = [v for v in list(globals().values()) if isinstance(v, dl.Kernel)]
"""Every corpus kernel (for compile-only checks)."""
