"""Hand-written DSL kernels for memory-bound ops, tuned for bandwidth, with launchers.

Each op has a launcher taking torch tensors (CUDA, or CPU through the interpreter)
and returning a new tensor, as the matching torch function does:

==================  ===================================================  ====================
launcher            computes (fp32 accumulation for half inputs)         torch equivalent
==================  ===================================================  ====================
`add`               ``a + b``, any shape, flat 1-D kernel                 ``a + b``
`bias_gelu`         ``gelu(x + bias)``, erf form (via erfc), 2-D tiles     ``F.gelu(x + bias)``
`softmax`           softmax over the last dim                              ``torch.softmax(x, -1)``
`layer_norm`        LayerNorm over the last dim (Welford or two-pass)      ``F.layer_norm``
`rms_norm`          ``x * rsqrt(mean(x**2) + eps) * w``                     ``F.rms_norm``
`row_sum`           sum over the last dim                                  ``x.sum(-1)``
`row_argmax`        int64 argmax over the last dim (first index on ties)   ``x.argmax(-1)``
==================  ===================================================  ====================

The kernels follow Triton's style. Pointwise ops move 16-byte vectors, many per
thread. Row ops are *persistent reductions* while a row fits one block (``RBLOCK`` =
next power of two of the columns, up to `heuristics.PERSISTENT_MAX_RBLOCK`): the row is loaded
once into registers, reduced, and the result written, so each input byte is read
from HBM once (``REREAD`` variants load it again from L1/L2 after each reduction
rather than hold it in registers). Rows of up to 1024 columns can be packed several
to a program. Longer rows can use *looped* kernels that stream the row in ``RBLOCK``
chunks (reading it again, from L2 if it is still there, for the output pass).
Softmax and the norms also have *streamed* kernels for wide rows, persistent kernels
in the CUDA sense: a grid sized to the SMs strides over the rows, each program
loading its next row before reducing the current one (into registers, or with
``num_stages=2`` through shared memory, `inductor_lite.dsl.nvptx_pipeline`). When
every block is full (e.g. power-of-two widths) the launchers pass ``NO_MASK=True``
and the kernels are compiled without masks. Argmax is
a max reduction followed by a search for the first column holding the maximum,
cheaper per element than a (value, index) reduction: the persistent kernel searches
the maxima of 16-byte vectors, then one vector (`row_argmax_kernel`).

Launch configs are `heuristics.Config`s, the type generated kernels use, and their
candidates come from `inductor_lite.codegen.heuristics` too (its hand-written kernels'
section; a row launch's form is `heuristics.row_form`). A launcher given no ``config=``
takes the one `choose_config` picks: on CUDA the fastest of
`heuristics.flat_pointwise_candidates`, `heuristics.broadcast_tile_candidates` or
`heuristics.row_candidates`, timed by the runtime's autotuner on the first call for a
(shape, dtype) and remembered on disk; on CPU the default, the first of them.

Indices are int32: every tensor must have fewer than 2**31 elements.
"""

from __future__ import annotations

import functools
import hashlib
import math
from typing import Optional, Sequence

import torch

import inductor_lite.dsl as dl
from inductor_lite.codegen import heuristics
from inductor_lite.codegen.heuristics import Config
from inductor_lite.runtime.autotune import autotune
from inductor_lite.runtime.timing import l2_bytes, rotation_sets

EARLY_WEIGHTS_MAX = 16
"""Most row values a thread may hold for a norm to load its weights with the row
(`_norm_constexprs`)."""

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_INT32_LIMIT = 2**31
_SQRT1_2 = 0.7071067811865476
_LOG2E = 1.4426950408889634
# GELU(h) = h * Phi(h), Phi(h) = erfc(-h / sqrt(2)) / 2. erfc is Numerical Recipes' erfcc
# (Press et al., Numerical Recipes in C, 2nd ed., 1992, section 6.2): for z >= 0,
# t = 1 / (1 + z / 2), erfc(z) = t * exp(-z**2 + P(t)) with P of degree 9 below, fractional
# error under 1.2e-7. Scaled by log2(e) for exp2, with log2(1/2) = -1 folded into the
# constant, t * exp2(-z**2 log2(e) + P'(t)) is Phi(-|h|).
_ERFCC_P = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
            1.48851587, -0.82215223, 0.17087277)
_GELU_P = (_ERFCC_P[0] * _LOG2E - 1.0,) + tuple(c * _LOG2E for c in _ERFCC_P[1:])
# For 16-bit outputs, P of degree 5: our Chebyshev least-squares fit of
# log(erfc(z) / t) + z**2 over t in (0, 1] (20000 Chebyshev nodes), relative error
# under 6.4e-5 in Phi: a fortieth of a bf16 ulp, a seventh of an fp16 ulp.
_ERFCC_P5 = (-1.2655720990986856, 1.0046535588330057, 0.3165734411420612, 0.3472201726046236,
             -0.5907187613452302, 0.18782182290060911)
_GELU_P5 = (_ERFCC_P5[0] * _LOG2E - 1.0,) + tuple(c * _LOG2E for c in _ERFCC_P5[1:])


# ----------------------------------------------------------------------------- pointwise kernels
# NO_MASK (a constexpr) says every block is full: masks are left out, which saves the
# predicate work and registers (e.g. 25-45% of the instructions of layer_norm).


@dl.kernel
def add_kernel(a_ptr, b_ptr, out_ptr, n, XBLOCK: dl.constexpr, NO_MASK: dl.constexpr):
    """out[i] = a[i] + b[i], i < n (flat, fp32 arithmetic); grid (cdiv(n, XBLOCK),)."""
    offs = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    mask = None if NO_MASK else offs < n
    a = dl.load(a_ptr + offs, mask=mask).to(dl.float32)
    b = dl.load(b_ptr + offs, mask=mask).to(dl.float32)
    dl.store(out_ptr + offs, a + b, mask=mask)


@dl.kernel(ftz=True)
def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, rows, cols, row_blocks, col_blocks, YBLOCK: dl.constexpr,
                     XBLOCK: dl.constexpr, ROWS_FASTEST: dl.constexpr, NO_MASK: dl.constexpr,
                     HALF: dl.constexpr, STREAMED: dl.constexpr):
    """out = gelu(x + bias) (erf form), x and out (rows, cols), bias (cols,), in
    ``[YBLOCK, XBLOCK]`` tiles (``row_blocks = cdiv(rows, YBLOCK)``, ``col_blocks =
    cdiv(cols, XBLOCK)``). Grid (P,): one tile a program (P = row_blocks * col_blocks,
    the order set by ``ROWS_FASTEST``), or ``STREAMED`` (P a multiple of col_blocks, at
    most row_blocks * col_blocks): program p owns column block ``p % col_blocks`` and
    strides over the row blocks (a loop whose loads ``num_stages`` > 1 pipelines).

    Phi comes from erfc (see `_GELU_P`), not from ``1 + erf``: about 16 instructions an
    element for 16-bit outputs (ptxas, sm_90), where libdevice's erf alone takes about
    21 (it selects between two polynomials per element), and accurate to a few fp32 ulp
    where ``1 + erf`` cancels for h < 0. ``HALF`` (16-bit output): a degree-5
    polynomial, 4 fewer fmas (`_GELU_P5`). ``ftz`` is safe here: the reciprocal's
    argument is at least 1, and exp2 flushes only below 2**-126, where eager's
    ``1 + erf`` is already 0.
    """
    # 2-D tiles: the bias slice is loaded once per tile (once per program if streamed),
    # and no per-element `% cols`. A 1-D grid: any number of row blocks (a grid's y dim
    # stops at 65535).
    r = dl.arange(0, YBLOCK)[:, None]
    c = dl.arange(0, XBLOCK)[None, :]
    pid = dl.program_id(0)
    if STREAMED:
        cb, first, step = pid % col_blocks, pid // col_blocks, dl.num_programs(0) // col_blocks
        trips = dl.cdiv(row_blocks - first, step)
    else:
        fast_blocks = row_blocks if ROWS_FASTEST else col_blocks
        slow, fast = pid // fast_blocks, pid % fast_blocks
        first, cb = (fast, slow) if ROWS_FASTEST else (slow, fast)
        step = 0
    col = cb * XBLOCK + c
    cmask = None if NO_MASK else col < cols
    bias = dl.load(bias_ptr + col, mask=cmask).to(dl.float32)
    # One tile: straight-line code, which ran 0.2-0.8% faster in fp32 on an H200 than a
    # loop of one trip (the loads are scheduled with the rest of the program).
    for trip in (range(trips) if STREAMED else dl.static_range(1)):
        row = (first + trip * step) * YBLOCK + r
        mask = None if NO_MASK else (row < rows) & cmask
        h = dl.load(x_ptr + row * cols + col, mask=mask).to(dl.float32) + bias
        # t = 1 / (1 + |h| / (2 sqrt 2)): one MUFU.RCP, where an IEEE division is ~8 instructions.
        t = dl.fast_dividef(1.0, dl.abs(h) * (0.5 * _SQRT1_2) + 1.0)
        poly = _GELU_P5 if HALF else _GELU_P
        p = t * poly[len(poly) - 1] + poly[len(poly) - 2]
        for i in dl.static_range(len(poly) - 3, -1, -1):
            p = p * t + poly[i]
        tail = t * dl.exp2(h * h * (-0.5 * _LOG2E) + p)  # Phi(-|h|)
        dl.store(out_ptr + row * cols + col, h * dl.where(h < 0.0, tail, 1.0 - tail), mask=mask)


# ----------------------------------------------------------------------------- persistent row kernels
# XBLOCK rows per program, each whole in an RBLOCK-wide block (RBLOCK >= cols).
# NO_MASK: cols == RBLOCK and XBLOCK divides rows. REREAD: no row-sized value stays in
# registers across a reduction; each pass after the first loads the row again, from
# L1 or L2 (the first load asks to keep it: evict_last). Fewer registers a thread
# means more programs per SM on long rows. Otherwise the norms read the row through
# L2 only (cache_modifier ".cg") and ask L1 to keep the weights (evict_last), which
# every program reads again: on an H200 that took RMSNorm bf16 over 16384 columns
# from 85% to 87% of copy bandwidth and LayerNorm bf16 over 8192 from 83% to 86%.


@dl.kernel
def softmax_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr,
                   NO_MASK: dl.constexpr, REREAD: dl.constexpr):
    """out = softmax(x, -1), x and out (rows, cols); grid (cdiv(rows, XBLOCK),)."""
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    mask = None if NO_MASK else (row < rows) & (col < cols)
    pad = None if NO_MASK else float("-inf")
    offs = row * cols + col
    x = dl.load(x_ptr + offs, mask=mask, other=pad, eviction_policy="evict_last" if REREAD else "").to(dl.float32)
    top = dl.max(x, 1)[:, None]
    if REREAD:
        x = dl.load(x_ptr + offs, mask=mask, other=pad, eviction_policy="evict_first").to(dl.float32)
    # exp(t) as exp2(t * log2(e)), as Triton's tl.exp does: fewer instructions than
    # libdevice's expf; the rounded product adds about 6e-8 * |t| relative error, under
    # 1e-6 for every term above 1e-7 of the row's largest (t > -16).
    e = dl.exp2((x - top) * _LOG2E)
    # One reciprocal per row instead of a division per element.
    dl.store(out_ptr + offs, e * (1.0 / dl.sum(e, 1))[:, None], mask=mask)


# LayerNorm's statistics (WELFORD, a constexpr): one Welford reduction (a state per
# thread, exact, then Chan's combine across threads), or two reductions (the mean, then
# the squared deviations, which stay in registers for the output). Welford saves a
# cross-warp round and, with REREAD, a pass over the row, but goes over x again for
# the output. `layer_norm` takes it for 16-bit inputs and for 32-warp launches, where
# the cross-warp round costs most: on an H200 it raised bf16 rows of 8192 to 32768
# columns by 1 to 6 points of copy bandwidth, and fp32 rows of 32768 columns at 32
# warps by 4 to 7 (one row a program: 82% to 88%); at 16 warps fp32 gained nothing or
# lost (16384 columns streamed 2/SM: 94% against 90%). The Welford output is
# x * rstd - mean * rstd, one fma a value where (x - mean) * rstd takes two; the
# rounded mean * rstd adds at most half an ulp of |mean| * rstd, the size of the
# error the computed mean already carries. On an H200 the fma raised bf16 rows of
# 16384 and 32768 columns (streamed) by 1.3 and 2.3 points. Under a register cap
# (FMA_OUTPUT off) the output stays (x - mean) * rstd: at 96 registers ptxas spilled
# the fma form, and LayerNorm bf16 over 8192 columns fell from 92% to 76%.


@dl.kernel
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols, eps, XBLOCK: dl.constexpr,
                      RBLOCK: dl.constexpr, NO_MASK: dl.constexpr, REREAD: dl.constexpr, WELFORD: dl.constexpr,
                      EARLY_WEIGHTS: dl.constexpr, FMA_OUTPUT: dl.constexpr):
    """out = layer_norm(x) * w + b over the last dim, x and out (rows, cols), w and b
    (cols,); grid (cdiv(rows, XBLOCK),). FMA_OUTPUT (with WELFORD): the output as x *
    rstd - mean * rstd."""
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    cmask = None if NO_MASK else col < cols
    mask = None if NO_MASK else (row < rows) & cmask
    offs = row * cols + col
    if EARLY_WEIGHTS:
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last")
        b = dl.load(b_ptr + col, mask=cmask, eviction_policy="evict_last")
    x = dl.load(x_ptr + offs, mask=mask, cache_modifier="" if REREAD else ".cg",
                eviction_policy="evict_last" if REREAD else "").to(dl.float32)
    if WELFORD:
        mean, m2, _ = dl.welford(x, 0.0, 1.0 if NO_MASK else cmask, 1, keep_dims=True)
        if REREAD:
            x = dl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first").to(dl.float32)
        if not FMA_OUTPUT:
            # Here, before the weights are loaded: subtracting after them, ptxas
            # spilled 72 bytes at 96 registers (bf16, 8192 columns, 4 warps).
            d = x - mean
    else:
        mean = (dl.sum(x, 1) * (1.0 / cols))[:, None]
        if REREAD:
            x = dl.load(x_ptr + offs, mask=mask, eviction_policy="evict_last").to(dl.float32)
        d = x - mean
        if not NO_MASK:
            d = dl.where(cmask, d, 0.0)
        m2 = dl.sum(d * d, 1)[:, None]
        if REREAD:
            d = dl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first").to(dl.float32) - mean
    rstd = dl.rsqrt(m2 * (1.0 / cols) + eps)
    if not EARLY_WEIGHTS:
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last")
        b = dl.load(b_ptr + col, mask=cmask, eviction_policy="evict_last")
    normed = x * rstd - mean * rstd if WELFORD and FMA_OUTPUT else d * rstd
    dl.store(out_ptr + offs, normed * w.to(dl.float32) + b.to(dl.float32), mask=mask)


@dl.kernel
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, rows, cols, eps, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr,
                    NO_MASK: dl.constexpr, REREAD: dl.constexpr, EARLY_WEIGHTS: dl.constexpr):
    """out = x * rsqrt(mean(x**2, -1) + eps) * w, x and out (rows, cols), w (cols,);
    grid (cdiv(rows, XBLOCK),)."""
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    cmask = None if NO_MASK else col < cols
    mask = None if NO_MASK else (row < rows) & cmask
    offs = row * cols + col
    if EARLY_WEIGHTS:
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last")
    x = dl.load(x_ptr + offs, mask=mask, cache_modifier="" if REREAD else ".cg",
                eviction_policy="evict_last" if REREAD else "").to(dl.float32)
    rstd = dl.rsqrt(dl.sum(x * x, 1) * (1.0 / cols) + eps)[:, None]
    if REREAD:
        x = dl.load(x_ptr + offs, mask=mask, eviction_policy="evict_first").to(dl.float32)
    if not EARLY_WEIGHTS:
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last")
    dl.store(out_ptr + offs, x * rstd * w.to(dl.float32), mask=mask)


@dl.kernel
def row_sum_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr,
                   NO_MASK: dl.constexpr):
    """out[r] = sum(x[r, :]) in fp32, x (rows, cols), out (rows,); grid (cdiv(rows, XBLOCK),)."""
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    col = dl.arange(0, RBLOCK)[None, :]
    rmask = None if NO_MASK else row < rows
    # Read once: evict first. On an H200 that gave row_sum 0.3-0.6%; on the one load
    # of the other persistent kernels it cost them 3-4%.
    x = dl.load(x_ptr + row * cols + col, mask=None if NO_MASK else rmask & (col < cols),
                eviction_policy="evict_first").to(dl.float32)
    dl.store(out_ptr + row, dl.sum(x, 1)[:, None], mask=rmask)


@dl.kernel
def row_argmax_kernel(x_ptr, out_ptr, rows, cols, XBLOCK: dl.constexpr, RBLOCK: dl.constexpr, VEC: dl.constexpr,
                      NO_MASK: dl.constexpr):
    """out[r] = first argmax of x[r, :] (NaN is the maximum), x (rows, cols), out (rows,)
    int64; VEC: values in 16 bytes; grid (cdiv(rows, XBLOCK),).

    Each row is held as RBLOCK // VEC vectors of VEC columns, one 16-byte load each:
    the maximum of every vector (inside its thread), then of the row; the first vector
    whose maximum is the row's (or NaN); then, loading that one vector again (from
    L1), the first column in it holding the maximum. The search touches one value per
    vector instead of every value: on an H200, bf16 rows of 16384 and 32768 columns
    went from 80% and 76% of copy bandwidth to 82%, with 32 registers a thread where a
    search over every value took 58."""
    row = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)[:, None]
    vec = dl.arange(0, RBLOCK // VEC)
    lane = dl.arange(0, VEC)
    col = vec[:, None] * VEC + lane[None, :]
    rmask = None if NO_MASK else row < rows
    pad = None if NO_MASK else float("-inf")  # never beats a real column; padding comes last
    mask = None if NO_MASK else rmask[:, :, None] & (col < cols)[None, :, :]
    x = dl.load(x_ptr + (row * cols)[:, :, None] + col[None, :, :], mask=mask, other=pad).to(dl.float32)
    vec_max = dl.max(x, 2)
    top = dl.max(vec_max, 1)[:, None]
    first = dl.min(dl.where((vec_max == top) | (vec_max != vec_max), vec[None, :], RBLOCK // VEC), 1)[:, None]
    at = first * VEC + lane[None, :]
    v = dl.load(x_ptr + row * cols + at, mask=None if NO_MASK else rmask & (at < cols), other=pad).to(dl.float32)
    in_vec = dl.min(dl.where((v == top) | (v != v), lane[None, :], VEC), 1)[:, None]
    dl.store(out_ptr + row, first * VEC + in_vec, mask=rmask)


# ----------------------------------------------------------------------------- looped row kernels
# One row per program, streamed in RBLOCK-wide chunks; per-lane partials, reduced once.


@dl.kernel
def softmax_looped_kernel(x_ptr, out_ptr, cols, RBLOCK: dl.constexpr):
    """As `softmax_kernel`, one row per program; grid (rows,)."""
    base = dl.program_id(0) * cols
    # Online softmax (Milakov & Gimelshein, 2018): per-lane running max and sum of
    # exp(x - max), rescaled when the max grows.
    m = dl.full([RBLOCK], float("-inf"), dl.float32)
    s = dl.zeros([RBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        x = dl.load(x_ptr + base + col, mask=col < cols, other=float("-inf"),
                    eviction_policy="evict_last").to(dl.float32)
        m_new = dl.maximum(m, x)
        # A lane that has only seen padding keeps m_new == -inf; avoid -inf - -inf.
        safe = dl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * dl.exp2((m - safe) * _LOG2E) + dl.exp2((x - safe) * _LOG2E)
        m = m_new
    row_max = dl.max(m, 0)
    inv_sum = 1.0 / dl.sum(s * dl.exp2((m - row_max) * _LOG2E), 0)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        cmask = col < cols
        x = dl.load(x_ptr + base + col, mask=cmask, other=float("-inf"), eviction_policy="evict_first").to(dl.float32)
        dl.store(out_ptr + base + col, dl.exp2((x - row_max) * _LOG2E) * inv_sum, mask=cmask)


@dl.kernel
def layer_norm_looped_kernel(x_ptr, w_ptr, b_ptr, out_ptr, cols, eps, RBLOCK: dl.constexpr):
    """As `layer_norm_kernel`, one row per program; grid (rows,)."""
    base = dl.program_id(0) * cols
    inv_cols = 1.0 / cols
    # Exact two-pass statistics (the row is re-read from L2), then the output pass.
    acc = dl.zeros([RBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        acc += dl.load(x_ptr + base + col, mask=col < cols, eviction_policy="evict_last").to(dl.float32)
    mean = dl.sum(acc, 0) * inv_cols
    acc2 = dl.zeros([RBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        cmask = col < cols
        d = dl.where(cmask, dl.load(x_ptr + base + col, mask=cmask, eviction_policy="evict_last").to(dl.float32) - mean,
                     0.0)
        acc2 += d * d
    rstd = dl.rsqrt(dl.sum(acc2, 0) * inv_cols + eps)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        cmask = col < cols
        x = dl.load(x_ptr + base + col, mask=cmask, eviction_policy="evict_first").to(dl.float32)
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last").to(dl.float32)
        b = dl.load(b_ptr + col, mask=cmask, eviction_policy="evict_last").to(dl.float32)
        dl.store(out_ptr + base + col, (x - mean) * rstd * w + b, mask=cmask)


@dl.kernel
def rms_norm_looped_kernel(x_ptr, w_ptr, out_ptr, cols, eps, RBLOCK: dl.constexpr):
    """As `rms_norm_kernel`, one row per program; grid (rows,)."""
    base = dl.program_id(0) * cols
    acc = dl.zeros([RBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        x = dl.load(x_ptr + base + col, mask=col < cols, eviction_policy="evict_last").to(dl.float32)
        acc += x * x
    rstd = dl.rsqrt(dl.sum(acc, 0) * (1.0 / cols) + eps)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        cmask = col < cols
        x = dl.load(x_ptr + base + col, mask=cmask, eviction_policy="evict_first").to(dl.float32)
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last").to(dl.float32)
        dl.store(out_ptr + base + col, x * rstd * w, mask=cmask)


@dl.kernel
def row_sum_looped_kernel(x_ptr, out_ptr, cols, RBLOCK: dl.constexpr):
    """As `row_sum_kernel`, one row per program; grid (rows,)."""
    base = dl.program_id(0) * cols
    acc = dl.zeros([RBLOCK], dl.float32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        acc += dl.load(x_ptr + base + col, mask=col < cols, eviction_policy="evict_first").to(dl.float32)
    dl.store(out_ptr + dl.program_id(0), dl.sum(acc, 0))


@dl.kernel
def row_argmax_looped_kernel(x_ptr, out_ptr, cols, RBLOCK: dl.constexpr):
    """As `row_argmax_kernel`, one row per program; grid (rows,)."""
    base = dl.program_id(0) * cols
    best = dl.full([RBLOCK], float("-inf"), dl.float32)
    best_col = dl.zeros([RBLOCK], dl.int32)
    for start in range(0, cols, RBLOCK):
        col = start + dl.arange(0, RBLOCK)
        x = dl.load(x_ptr + base + col, mask=col < cols, other=float("-inf")).to(dl.float32)
        # Strictly greater keeps each lane's first maximum; NaN beats everything but NaN.
        better = (x > best) | (dl.isnan(x) & ~dl.isnan(best))
        best = dl.where(better, x, best)
        best_col = dl.where(better, col, best_col)
    # The first column among the lanes that hold the row's maximum (NaN included).
    top = dl.max(best, 0)
    is_top = (best == top) | (dl.isnan(best) & dl.isnan(top))
    dl.store(out_ptr + dl.program_id(0), dl.min(dl.where(is_top, best_col, cols), 0))


# ----------------------------------------------------------------------------- streamed row kernels
# As the persistent kernels with XBLOCK = 1, on a grid (P,) of P <= rows programs:
# program p takes rows p, p + P, ... and has its next row in flight while it reduces
# the current one, so the memory stays busy meanwhile (software pipelining of the row
# loop). PREFETCH: by hand, into registers, loading the next row before the current
# one's reductions; the last row's "next" load is clamped to the last row, a spare
# read instead of a mask. Otherwise the loop loads its own row, and the launch's
# num_stages >= 2 has the compiler stream it through shared memory.
# NO_MASK: cols == RBLOCK.


@dl.kernel
def softmax_streamed_kernel(x_ptr, out_ptr, rows, cols, RBLOCK: dl.constexpr, NO_MASK: dl.constexpr,
                            PREFETCH: dl.constexpr):
    """As `softmax_kernel`, programs striding over the rows; grid (P,), P <= rows."""
    pid, step = dl.program_id(0), dl.num_programs(0)
    col = dl.arange(0, RBLOCK)
    cmask = None if NO_MASK else col < cols
    pad = None if NO_MASK else float("-inf")
    if PREFETCH:
        x = dl.load(x_ptr + pid * cols + col, mask=cmask, other=pad)
    for row in range(pid, rows, step):
        if PREFETCH:
            x_next = dl.load(x_ptr + dl.minimum(row + step, rows - 1) * cols + col, mask=cmask, other=pad)
        else:
            x = dl.load(x_ptr + row * cols + col, mask=cmask, other=pad)
        xf = x.to(dl.float32)
        e = dl.exp2((xf - dl.max(xf, 0)) * _LOG2E)
        dl.store(out_ptr + row * cols + col, e * (1.0 / dl.sum(e, 0)), mask=cmask)
        if PREFETCH:
            x = x_next


@dl.kernel
def layer_norm_streamed_kernel(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols, eps, RBLOCK: dl.constexpr,
                               NO_MASK: dl.constexpr, WELFORD: dl.constexpr, FMA_OUTPUT: dl.constexpr,
                               PREFETCH: dl.constexpr):
    """As `layer_norm_kernel`, programs striding over the rows; grid (P,), P <= rows."""
    pid, step = dl.program_id(0), dl.num_programs(0)
    col = dl.arange(0, RBLOCK)
    cmask = None if NO_MASK else col < cols
    if PREFETCH:
        x = dl.load(x_ptr + pid * cols + col, mask=cmask, cache_modifier=".cg")
    for row in range(pid, rows, step):
        if PREFETCH:
            x_next = dl.load(x_ptr + dl.minimum(row + step, rows - 1) * cols + col, mask=cmask,
                             cache_modifier=".cg")
        else:
            x = dl.load(x_ptr + row * cols + col, mask=cmask)
        xf = x.to(dl.float32)
        if WELFORD:
            mean, m2, _ = dl.welford(xf, 0.0, 1.0 if NO_MASK else cmask, 0)
        else:
            d = xf - dl.sum(xf, 0) * (1.0 / cols)
            if not NO_MASK:
                d = dl.where(cmask, d, 0.0)
            m2 = dl.sum(d * d, 0)
        rstd = dl.rsqrt(m2 * (1.0 / cols) + eps)
        if not WELFORD:
            normed = d * rstd
        elif FMA_OUTPUT:
            normed = xf * rstd - mean * rstd
        else:
            normed = (xf - mean) * rstd
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last").to(dl.float32)
        b = dl.load(b_ptr + col, mask=cmask, eviction_policy="evict_last").to(dl.float32)
        dl.store(out_ptr + row * cols + col, normed * w + b, mask=cmask)
        if PREFETCH:
            x = x_next


@dl.kernel
def rms_norm_streamed_kernel(x_ptr, w_ptr, out_ptr, rows, cols, eps, RBLOCK: dl.constexpr, NO_MASK: dl.constexpr,
                             PREFETCH: dl.constexpr):
    """As `rms_norm_kernel`, programs striding over the rows; grid (P,), P <= rows."""
    pid, step = dl.program_id(0), dl.num_programs(0)
    col = dl.arange(0, RBLOCK)
    cmask = None if NO_MASK else col < cols
    if PREFETCH:
        x = dl.load(x_ptr + pid * cols + col, mask=cmask, cache_modifier=".cg")
    for row in range(pid, rows, step):
        if PREFETCH:
            x_next = dl.load(x_ptr + dl.minimum(row + step, rows - 1) * cols + col, mask=cmask,
                             cache_modifier=".cg")
        else:
            x = dl.load(x_ptr + row * cols + col, mask=cmask)
        xf = x.to(dl.float32)
        rstd = dl.rsqrt(dl.sum(xf * xf, 0) * (1.0 / cols) + eps)
        w = dl.load(w_ptr + col, mask=cmask, eviction_policy="evict_last").to(dl.float32)
        dl.store(out_ptr + row * cols + col, xf * rstd * w, mask=cmask)
        if PREFETCH:
            x = x_next


# ----------------------------------------------------------------------------- launchers


def _check_float(name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} has dtype {t.dtype}; supported: {', '.join(map(str, FLOAT_DTYPES))}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous (call .contiguous() first)")
    if t.numel() >= _INT32_LIMIT:
        raise ValueError(f"{name} has {t.numel()} elements; these kernels index with int32 (< 2**31)")


def _check_rows(x: torch.Tensor, reduction: bool = True) -> tuple[int, int]:
    _check_float("x", x)
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D (rows, cols), got shape {tuple(x.shape)}")
    rows, cols = x.shape
    if reduction and cols == 0:
        raise ValueError("x has 0 columns: the reduction is empty")
    return rows, cols


def _check_param(name: str, t: torch.Tensor, x: torch.Tensor) -> None:
    _check_float(name, t)
    if t.shape != (x.shape[-1],):
        raise ValueError(f"{name} must have shape ({x.shape[-1]},) to match x's last dim, got {tuple(t.shape)}")
    if t.device != x.device:
        raise ValueError(f"{name} is on {t.device} but x is on {x.device}")


def _check_out(out: torch.Tensor, shape: Sequence[int], dtype: torch.dtype, device: torch.device) -> None:
    if out.shape != tuple(shape) or out.dtype != dtype or out.device != device or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous {dtype} tensor of shape {tuple(shape)} on {device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")


def _output(out: Optional[torch.Tensor], shape: Sequence[int], dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    _check_out(out, shape, dtype, device)
    return out


def _flat_config(config: Config) -> Config:
    if config.kwargs.keys() != {"XBLOCK"}:
        raise ValueError(f"config {config}: a 1-D pointwise launch takes XBLOCK and nothing else")
    return config


@functools.lru_cache(maxsize=None)
def _tile_launch(config: Config) -> tuple[bool, int]:
    """``(ROWS_FASTEST, PROGRAMS_PER_SM)`` of a `heuristics.broadcast_tile` config,
    once per config (launches ask every time).

    Raises:
        ValueError: ``config`` is not a `heuristics.broadcast_tile` launch.
    """
    kwargs = config.kwargs
    rows_fastest, per_sm = kwargs.get("ROWS_FASTEST", False), kwargs.get("PROGRAMS_PER_SM", 0)
    if (not {"YBLOCK", "XBLOCK"} <= kwargs.keys() <= {"YBLOCK", "XBLOCK", "ROWS_FASTEST", "PROGRAMS_PER_SM"}
            or per_sm < 0 or (per_sm and rows_fastest) or (config.num_stages != 1 and not per_sm)):
        raise ValueError(f"config {config} is not a 2-D tile launch: it takes YBLOCK, XBLOCK and either "
                         "ROWS_FASTEST or PROGRAMS_PER_SM >= 0; only a streamed launch (PROGRAMS_PER_SM) has "
                         "num_stages > 1")
    return bool(rows_fastest), per_sm


@functools.lru_cache(maxsize=None)
def _row_launch(config: Config) -> tuple[str, dict]:
    """`heuristics.row_form` of ``config`` and its entries, once per config (launches
    ask every time).

    Raises:
        ValueError: what `heuristics.row_form` raises.
    """
    return heuristics.row_form(config), config.kwargs


def _row_config(config: Config, cols: int, streamed: bool = False, reread: bool = False) -> Config:
    form, kwargs = _row_launch(config)
    if form != "looped" and kwargs["RBLOCK"] < cols:
        raise ValueError(f"{form} config {config} cannot hold a row of {cols} columns")
    if form == "streamed" and not streamed:
        raise ValueError(f"config {config}: only softmax, layer_norm and rms_norm configs can stream")
    if kwargs.get("REREAD") and not reread:
        raise ValueError(f"config {config}: only softmax, layer_norm and rms_norm configs can re-read")
    return config


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 1 on CPU (the interpreter), so a
    streamed launch there still strides over the rows."""
    if device.type != "cuda":
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def _norm_constexprs(config: Config) -> dict:
    """REREAD and EARLY_WEIGHTS of a persistent norm launch (none for the other forms,
    whose kernels take neither). The weights are loaded
    with the row, not after its reductions, where a thread holds at most
    `EARLY_WEIGHTS_MAX` row values and the config is not ``reread`` (which is there to
    save registers): their latency then overlaps the row's instead of following the
    reductions. On an H200, RMSNorm fp32 over 2048 columns (8 warps) went from 98.4%
    to 99.5% of copy bandwidth, over 1024 (4 warps) from 99.0% to 99.5%."""
    form, kwargs = _row_launch(config)
    if form != "persistent":
        return {}
    reread = kwargs.get("REREAD", False)
    per_thread = kwargs["XBLOCK"] * kwargs["RBLOCK"] // (32 * config.num_warps)
    return {"REREAD": reread, "EARLY_WEIGHTS": not reread and per_thread <= EARLY_WEIGHTS_MAX}


def _launch_rows(persistent_kernel, looped_kernel, config: Config, rows: int, cols: int,
                 tensors: tuple, scalars: tuple = (), streamed_kernel=None,
                 persistent_constexprs: Optional[dict] = None, constexprs: Optional[dict] = None) -> None:
    """Launch a row op: ``tensors`` are the pointer arguments, ``scalars`` follow
    ``rows, cols`` (persistent, streamed) or ``cols`` (looped); the persistent and
    streamed kernels get ``constexprs``, the persistent kernel also
    ``persistent_constexprs``."""
    if rows == 0:
        return
    constexprs = constexprs or {}
    form, kwargs = _row_launch(config)
    rblock = kwargs["RBLOCK"]
    if form == "streamed":
        grid = (min(rows, kwargs["PROGRAMS_PER_SM"] * _sm_count(tensors[0].device)),)
        streamed_kernel[grid](*tensors, rows, cols, *scalars, RBLOCK=rblock, NO_MASK=cols == rblock,
                              PREFETCH=config.num_stages == 1, num_warps=config.num_warps,
                              num_stages=config.num_stages, maxnreg=config.maxnreg, **constexprs)
    elif form == "persistent":
        xblock = kwargs["XBLOCK"]
        no_mask = cols == rblock and rows % xblock == 0
        persistent_kernel[(dl.cdiv(rows, xblock),)](*tensors, rows, cols, *scalars, XBLOCK=xblock, RBLOCK=rblock,
                                                    NO_MASK=no_mask, num_warps=config.num_warps,
                                                    maxnreg=config.maxnreg, **constexprs,
                                                    **(persistent_constexprs or {}))
    else:
        looped_kernel[(rows,)](*tensors, cols, *scalars, RBLOCK=rblock, num_warps=config.num_warps,
                               maxnreg=config.maxnreg)


def add(a: torch.Tensor, b: torch.Tensor, out: Optional[torch.Tensor] = None,
        config: Optional[Config] = None) -> torch.Tensor:
    """``a + b`` for contiguous float tensors of one shape and dtype (fp32 arithmetic);
    ``config``: a 1-D launch (``XBLOCK``, `heuristics.flat_pointwise_candidates`).

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or mismatched inputs, a
            bad ``out``, or 2**31 elements or more.
    """
    _check_float("a", a)
    _check_float("b", b)
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"a and b must match in shape, dtype and device: {a.dtype} {tuple(a.shape)} on {a.device} "
                         f"vs {b.dtype} {tuple(b.shape)} on {b.device}")
    out = _output(out, a.shape, a.dtype, a.device)
    n = a.numel()
    config = _flat_config(config) if config else choose_config("add", a, b)
    if n:
        xblock = config.kwargs["XBLOCK"]
        add_kernel[(dl.cdiv(n, xblock),)](a, b, out, n, XBLOCK=xblock, NO_MASK=n % xblock == 0,
                                          num_warps=config.num_warps, num_stages=config.num_stages,
                                          maxnreg=config.maxnreg)
    return out


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, out: Optional[torch.Tensor] = None,
              config: Optional[Config] = None) -> torch.Tensor:
    """``F.gelu(x + bias)`` (the erf form, not the tanh one) for ``x`` of shape (rows,
    cols) and ``bias`` of shape (cols,); output in ``x``'s dtype. Computed through erfc
    (`bias_gelu_kernel`): relative error about 1e-6 for fp32 outputs (2e-5 below
    h = -6, where values flush to 0 under 2**-126), under 6.4e-5 before rounding for
    fp16/bf16 outputs.

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or mismatched inputs, a
            bad ``out``, or 2**31 elements or more.
    """
    rows, cols = _check_rows(x, reduction=False)
    _check_param("bias", bias, x)
    out = _output(out, x.shape, x.dtype, x.device)
    config = config or choose_config("bias_gelu", x, bias)
    rows_fastest, per_sm = _tile_launch(config)
    if rows and cols:
        yblock, xblock = config.kwargs["YBLOCK"], config.kwargs["XBLOCK"]
        row_blocks, col_blocks = dl.cdiv(rows, yblock), dl.cdiv(cols, xblock)
        no_mask = rows % yblock == 0 and cols % xblock == 0
        programs = row_blocks * col_blocks
        if per_sm:  # whole sets of column blocks, so each program keeps one
            programs = col_blocks * min(row_blocks, max(1, per_sm * _sm_count(x.device) // col_blocks))
        bias_gelu_kernel[(programs,)](x, bias, out, rows, cols, row_blocks, col_blocks, YBLOCK=yblock,
                                      XBLOCK=xblock, ROWS_FASTEST=rows_fastest, NO_MASK=no_mask,
                                      HALF=x.element_size() == 2, STREAMED=per_sm > 0, num_warps=config.num_warps,
                                      num_stages=config.num_stages, maxnreg=config.maxnreg)
    return out


def softmax(x: torch.Tensor, out: Optional[torch.Tensor] = None,
            config: Optional[Config] = None) -> torch.Tensor:
    """``torch.softmax(x, -1)`` for ``x`` of shape (rows, cols); output in ``x``'s dtype.

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or non-2-D ``x``, 0
            columns, a bad ``out`` or ``config``, or 2**31 elements or more.
    """
    rows, cols = _check_rows(x)
    out = _output(out, x.shape, x.dtype, x.device)
    config = _row_config(config, cols, streamed=True, reread=True) if config else choose_config("softmax", x)
    _launch_rows(softmax_kernel, softmax_looped_kernel, config, rows, cols, (x, out),
                 streamed_kernel=softmax_streamed_kernel,
                 persistent_constexprs={"REREAD": _row_launch(config)[1].get("REREAD", False)})
    return out


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
               out: Optional[torch.Tensor] = None, config: Optional[Config] = None) -> torch.Tensor:
    """``F.layer_norm(x, (cols,), weight, bias, eps)`` for ``x`` of shape (rows, cols);
    biased variance, as torch; output in ``x``'s dtype.

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or mismatched inputs, 0
            columns, a bad ``out`` or ``config``, or 2**31 elements or more.
    """
    rows, cols = _check_rows(x)
    _check_param("weight", weight, x)
    _check_param("bias", bias, x)
    out = _output(out, x.shape, x.dtype, x.device)
    config = _row_config(config, cols, streamed=True, reread=True) if config else choose_config("layer_norm", x, weight, bias, eps)
    _launch_rows(layer_norm_kernel, layer_norm_looped_kernel, config, rows, cols, (x, weight, bias, out),
                 (float(eps),), streamed_kernel=layer_norm_streamed_kernel,
                 persistent_constexprs=_norm_constexprs(config),
                 constexprs={"WELFORD": x.element_size() == 2 or config.num_warps >= 32,
                             "FMA_OUTPUT": config.maxnreg is None})
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
             out: Optional[torch.Tensor] = None, config: Optional[Config] = None) -> torch.Tensor:
    """``F.rms_norm(x, (cols,), weight, eps)``, i.e. ``x * rsqrt(mean(x**2, -1) + eps) *
    weight``, for ``x`` of shape (rows, cols); output in ``x``'s dtype.

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or mismatched inputs, 0
            columns, a bad ``out`` or ``config``, or 2**31 elements or more.
    """
    rows, cols = _check_rows(x)
    _check_param("weight", weight, x)
    out = _output(out, x.shape, x.dtype, x.device)
    config = _row_config(config, cols, streamed=True, reread=True) if config else choose_config("rms_norm", x, weight, eps)
    _launch_rows(rms_norm_kernel, rms_norm_looped_kernel, config, rows, cols, (x, weight, out), (float(eps),),
                 streamed_kernel=rms_norm_streamed_kernel, persistent_constexprs=_norm_constexprs(config))
    return out


def row_sum(x: torch.Tensor, out: Optional[torch.Tensor] = None,
            config: Optional[Config] = None) -> torch.Tensor:
    """``x.sum(-1)`` for ``x`` of shape (rows, cols): fp32 accumulation, output of shape
    (rows,) in ``x``'s dtype.

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or non-2-D ``x``, 0
            columns, a bad ``out`` or ``config``, or 2**31 elements or more.
    """
    rows, cols = _check_rows(x)
    out = _output(out, (rows,), x.dtype, x.device)
    config = _row_config(config, cols) if config else choose_config("row_sum", x)
    _launch_rows(row_sum_kernel, row_sum_looped_kernel, config, rows, cols, (x, out))
    return out


def row_argmax(x: torch.Tensor, out: Optional[torch.Tensor] = None,
               config: Optional[Config] = None) -> torch.Tensor:
    """``x.argmax(-1)`` for ``x`` of shape (rows, cols): int64 of shape (rows,), the
    first index on ties, NaN counted as the maximum (torch's rules).

    Raises:
        TypeError / ValueError: unsupported dtype, non-contiguous or non-2-D ``x``, 0
            columns, a bad ``out`` or ``config``, or 2**31 elements or more.
    """
    rows, cols = _check_rows(x)
    out = _output(out, (rows,), torch.int64, x.device)
    config = _row_config(config, cols) if config else choose_config("row_argmax", x)
    _launch_rows(row_argmax_kernel, row_argmax_looped_kernel, config, rows, cols, (x, out),
                 persistent_constexprs={"VEC": min(16 // x.element_size(), _row_launch(config)[1]["RBLOCK"])})
    return out


# ----------------------------------------------------------------------------- autotuning

STREAMED_OPS = ("softmax", "layer_norm", "rms_norm")
"""The row ops with a streamed kernel (`heuristics.streamed_row`)."""
REREAD_OPS = ("softmax", "layer_norm", "rms_norm")
"""The row ops whose persistent kernel can re-read the row (`heuristics.persistent_row`'s ``reread``)."""

LAUNCHERS = {"add": add, "bias_gelu": bias_gelu, "softmax": softmax, "layer_norm": layer_norm,
             "rms_norm": rms_norm, "row_sum": row_sum, "row_argmax": row_argmax}


def candidates(op: str, x: torch.Tensor) -> tuple:
    """The `heuristics.Config`s the autotuner times for launcher ``op`` on input ``x``,
    the default first (`heuristics.flat_pointwise_candidates`,
    `heuristics.broadcast_tile_candidates` or `heuristics.row_candidates`)."""
    return _candidates(op, tuple(x.shape), x.element_size())


@functools.lru_cache(maxsize=None)
def _candidates(op: str, shape: tuple[int, ...], element_size: int) -> tuple:
    # Cached: every launch without a config asks for them (choose_config).
    if op == "add":
        return tuple(heuristics.flat_pointwise_candidates(math.prod(shape), element_size))
    if op == "bias_gelu":
        return tuple(heuristics.broadcast_tile_candidates(shape[0], shape[1], element_size))
    return tuple(heuristics.row_candidates(shape[-1], element_size, streamed=op in STREAMED_OPS,
                                           reread=op in REREAD_OPS))


def choose_config(op: str, *inputs):
    """The config launcher ``LAUNCHERS[op]`` uses on ``inputs`` when given none: the
    fastest of `candidates`, timed the first time a (shape, dtype) is seen with this
    module's source (`inductor_lite.runtime.autotune`) on these inputs and copies of
    them, taken in turn so that timed calls read from HBM (`timing.rotation_sets`: up
    to 3 L2 sizes of copies, alive only while tuning); the default on CPU.

    Raises:
        KeyError: ``op`` is not in `LAUNCHERS`.
    """
    launcher = LAUNCHERS[op]
    x = inputs[0]
    state: dict = {}

    def run(config) -> None:
        if not state:  # the first call allocates the output and sizes the rotation
            out = launcher(*inputs, config=config)
            moved = out.nbytes + sum(t.nbytes for t in inputs if isinstance(t, torch.Tensor))
            state.update(out=out, sets=rotation_sets(inputs, moved, l2_bytes(x.device)), calls=0)
            return
        sets = state["sets"]
        launcher(*sets[state["calls"] % len(sets)], out=state["out"], config=config)
        state["calls"] += 1

    key = (tuple(x.shape), str(x.dtype), _source_hash())
    return autotune(op, key, candidates(op, x), run, x.device)


@functools.lru_cache(maxsize=None)
def _source_hash() -> str:
    """sha256 of this module: a tuning decision is stale once a kernel changes."""
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]
