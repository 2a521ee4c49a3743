"""Launch configs for generated kernels: one `Config` type, and the candidate lists
codegen attaches to each kernel (`pointwise`, `persistent_reduction`, `reduction`).

The first candidate of each list is the untuned default (used when
``INDUCTOR_LITE_AUTOTUNE=0``, on CPU, and as the autotuner's baseline); the runtime
times the others on a kernel's first CUDA call for a shape and keeps the fastest
(`inductor_lite.runtime.tuned_launcher`). As in TorchInductor's
``runtime/triton_heuristics.py``, the lists are short: every candidate costs a compile
and a timing on first use.

The numbers come from the hand-written kernels of `inductor_lite.bench.dsl_kernels`,
which reach 86-100% of copy bandwidth on H100 and H200 (see `docs/performance.md`):

- pointwise: 4 warps, each thread moving about 64 bytes per tensor (enough loads in
  flight to saturate HBM without a long tail of programs); 16 and 128 bytes as
  alternatives;
- persistent reductions (the row held in registers, ``RBLOCK`` the next power of two
  of the row): rows of up to 1024 packed about 4096 elements a program over 4 warps;
  longer rows one a program, 4 warps up to 2048, 8 at 4096, 16 beyond (8 to 64 fp32
  values a thread), half inputs twice the elements a thread;
- looped reductions: 4096-element chunks over 8 warps, one row a program;
- outer reductions (the reduced dimension is not the contiguous one; ``reduction
  axis 0``): tiles of 64 contiguous outputs by 8 to 64 reduced elements, 4 or 8 warps.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import sympy

PERSISTENT_MAX_RBLOCK = 32768
"""Rows up to this many elements (as a power of two) are reduced persistently, as the
hand-written kernels do: 32768 values over 32 warps are 32 registers a thread per
row-sized value."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration: block sizes (constexpr name -> value), ``num_warps``,
    ``num_stages`` (software pipelining depth of ``range`` loops) and ``maxnreg``
    (registers per thread cap, None: none). The type the wrapper's launchers and the
    autotuner share, as Triton's ``Config``.

    Raises:
        ValueError: a block size that is not a positive power of two, or ``num_warps``
            outside 1..32 or not a power of two.
    """

    blocks: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int = 1
    maxnreg: Optional[int] = None

    def __post_init__(self):
        for name, value in self.blocks:
            if value < 1 or value & (value - 1):
                raise ValueError(f"Config: {name}={value} must be a positive power of two")
        if not 1 <= self.num_warps <= 32 or self.num_warps & (self.num_warps - 1):
            raise ValueError(f"Config: num_warps={self.num_warps} must be a power of two from 1 to 32")

    @classmethod
    def of(cls, num_warps: int, num_stages: int = 1, maxnreg: Optional[int] = None, **blocks: int) -> "Config":
        return cls(tuple(blocks.items()), num_warps, num_stages, maxnreg)

    @property
    def kwargs(self) -> dict[str, int]:
        return dict(self.blocks)

    def __str__(self) -> str:
        blocks = " ".join(f"{k}={v}" for k, v in self.blocks)
        extra = (f" s{self.num_stages}" if self.num_stages > 1 else "") + (f" r{self.maxnreg}" if self.maxnreg else "")
        return f"{blocks} w{self.num_warps}{extra}"


def next_power_of_2(n: int) -> int:
    """Smallest power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


def _static(n) -> Optional[int]:
    n = sympy.sympify(n)
    return int(n) if n.is_number else None


def _unique(configs: list[Config]) -> list[Config]:
    return list(dict.fromkeys(configs))


def _warps_for(elements: int, per_thread: int, hi: int) -> int:
    """Warps giving each thread about ``per_thread`` of ``elements`` (a power of two, 1 to ``hi``)."""
    return max(1, min(hi, next_power_of_2(elements // (32 * per_thread))))


def pointwise(numel, element_size: int, xblock: int = 1024, num_warps: int = 4) -> list[Config]:
    """Candidates of a 1-D pointwise kernel over ``numel`` elements, the largest of
    ``element_size`` bytes. The default is ``xblock``/``num_warps`` (the
    ``INDUCTOR_LITE_XBLOCK``/``NUM_WARPS`` knobs), shrunk for small static sizes and
    with warps halved while a block has under 32 elements a warp."""
    n = _static(numel)
    cap = next_power_of_2(n) if n is not None else 1 << 30

    def make(block: int, warps: int) -> Config:
        block = max(1, min(block, cap))
        while warps > 1 and block < 32 * warps:
            warps //= 2
        return Config.of(warps, XBLOCK=block)

    default = make(xblock, num_warps)
    options = [make(bytes_per_thread * 32 * warps // element_size, warps)
               for warps, bytes_per_thread in ((4, 64), (4, 16), (4, 128), (8, 32))]
    return _unique([default] + options)


def pointwise_tiled(ynumel, xnumel, element_size: int) -> list[Config]:
    """Candidates of a 2-D tiled pointwise kernel over ``[ynumel, xnumel]``
    (`scheduler.tiling`), in ``[YBLOCK, XBLOCK]`` tiles.

    Square-ish tiles, so that both the accesses along ``xindex`` and those along
    ``yindex`` move whole 128-byte lines: the default is 64x64 over 4 warps (32
    elements, 128 bytes of fp32, a thread, as the 1-D default), alternatives 32x32 to
    128x64 over 4 or 8 warps. Each side is capped at its static size's next power of
    two; the tile goes through shared memory once (``YBLOCK * XBLOCK * 4`` bytes).
    """
    ycap, xcap = (next_power_of_2(n) if n is not None else 1 << 30 for n in (_static(ynumel), _static(xnumel)))

    def make(yblock: int, xblock: int, warps: int) -> Config:
        yblock, xblock = max(1, min(yblock, ycap)), max(1, min(xblock, xcap))
        while warps > 1 and yblock * xblock < 32 * warps * 4:
            warps //= 2
        return Config.of(warps, YBLOCK=yblock, XBLOCK=xblock)

    per_thread = max(1, 4 // element_size)  # half inputs: twice the elements for the same bytes
    default = make(64, 64, 4)
    options = [make(y, x, w) for y, x, w in ((32, 32, 4), (64, 32 * per_thread, 4), (128, 64, 8),
                                             (64, 128, 8), (32, 128, 4), (128, 32, 4))]
    return _unique([default] + options)


def persistent_reduction(numel, rnumel: int, element_size: int) -> list[Config]:
    """Candidates of a persistent reduction of rows of ``rnumel`` (static, at most
    `PERSISTENT_MAX_RBLOCK` rounded up) over ``numel`` rows, ``RBLOCK`` fixed to the
    next power of two of ``rnumel`` (see the module docstring)."""
    rblock = next_power_of_2(rnumel)
    n = _static(numel)
    rows_cap = next_power_of_2(n) if n is not None else 1 << 30
    half = element_size < 4

    def make(xblock: int, per_thread: int) -> Config:
        xblock = max(1, min(xblock, rows_cap))
        return Config.of(_warps_for(xblock * rblock, per_thread, hi=32 if rblock >= 16384 else 16),
                         XBLOCK=xblock, RBLOCK=rblock)

    if rblock <= 1024:
        default = Config.of(4, XBLOCK=max(1, min(4096 // rblock, rows_cap)), RBLOCK=rblock)
        options = [make(max(1, per_program // rblock), per_thread)
                   for per_program, per_thread in ((2048, 8), (8192, 16), (1024, 4), (4096, 8))]
    else:
        warps, xblock = (4 if rblock <= 2048 else 8 if rblock <= 4096 else 16), 1
        if half and rblock <= 8192:  # 16-bit rows: each thread still loads 64 bytes
            xblock, warps = (2, warps) if warps == 4 else (1, warps // 2)
        default = Config.of(warps, XBLOCK=min(xblock, rows_cap), RBLOCK=rblock)
        options = [make(1, pt) for pt in (8, 16, 32, 64)] + ([make(2, 32)] if rblock <= 4096 else [])
        if rblock >= 16384:
            options = [o for o in options if rblock // (32 * o.num_warps) <= 64]
    return _unique([default] + options)


def reduction(numel, rnumel, element_size: int, reduction_axis: int = 1) -> list[Config]:
    """Candidates of a looped reduction: ``reduction_axis == 1`` (rows contiguous): one
    row a program in chunks of ``RBLOCK``; ``reduction_axis == 0`` (outer reduction,
    the outputs contiguous): tiles of ``XBLOCK`` outputs by ``RBLOCK`` reduced elements."""
    r = _static(rnumel)
    r_cap = next_power_of_2(r) if r is not None else 1 << 30
    n = _static(numel)
    x_cap = next_power_of_2(n) if n is not None else 1 << 30

    def make(xblock: int, rblock: int, warps: int) -> Config:
        xblock, rblock = max(1, min(xblock, x_cap)), max(1, min(rblock, r_cap))
        while warps > 1 and xblock * rblock < 32 * warps:
            warps //= 2
        return Config.of(warps, XBLOCK=xblock, RBLOCK=rblock)

    if reduction_axis == 0:
        return _unique([make(64, 32, 8), make(64, 8, 4), make(32, 64, 8), make(128, 16, 8), make(64, 64, 8)])
    return _unique([make(1, 4096, 8), make(1, 2048, 8), make(1, 1024, 4), make(1, 4096, 16), make(2, 2048, 8)])
