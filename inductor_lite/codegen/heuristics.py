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
- looped reductions: 4096-element chunks over 8 warps, one row a program; rows of
  `WIDE_LOOPED_ROW` and more 8192-element chunks over 16 warps;
- outer reductions (the reduced dimension is not the contiguous one; ``reduction
  axis 0``): tiles of 64 contiguous outputs by 8 to 64 reduced elements, 4 or 8 warps,
  and narrow tiles of 8 or 16 outputs by 128 or 256 reduced elements;
- mix-order reductions: the persistent ones, with ``XBLOCK`` dividing the rows a
  program sums for its column partials.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import sympy

PERSISTENT_MAX_RBLOCK = 32768
"""Rows up to this many elements (as a power of two) are reduced persistently, as the
hand-written kernels do: 32768 values over 32 warps are 32 registers a thread per
row-sized value. A kernel that holds several row-sized values across a reduction
(softmax's backward: the gradient and the output) is persistent only while they add up
to at most this many elements a row; longer, it is looped (`codegen.kernel`)."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration: block sizes (constexpr name -> value), ``num_warps``,
    ``num_stages`` (software pipelining depth of ``range`` loops) and ``maxnreg``
    (registers per thread cap, None: none). The type the wrapper's launchers, the
    hand-written kernels' launchers and the autotuner share, as Triton's ``Config``.
    Entries whose names do not end in ``BLOCK`` are other ints or bools the launcher
    reads, e.g. which variant of a hand-written kernel runs (see `row_form`).

    Raises:
        ValueError: a block size (a name ending in ``BLOCK``) that is not a positive
            power of two, another entry that is not an int or bool, or ``num_warps``
            outside 1..32 or not a power of two.
    """

    blocks: tuple[tuple[str, int], ...]
    num_warps: int
    num_stages: int = 1
    maxnreg: Optional[int] = None

    def __post_init__(self):
        for name, value in self.blocks:
            if not isinstance(value, int):
                raise ValueError(f"Config: {name}={value!r} must be an int or bool")
            if name.endswith("BLOCK") and (value < 1 or value & (value - 1)):
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


def _row_tile_cols(cols: Optional[int]) -> int:
    """Columns of a row tile over rows of ``cols`` elements: the widest power of two
    from 1024 down to 64 (128 bytes of a 16-bit row) that leaves under 1/8 of a row's
    lanes idle in its last tile (768 columns: 256, not 1024 with a quarter idle), else
    the one of those leaving fewest idle; rows under 64 take their next power of two.
    Unknown: 1024."""
    if cols is None:
        return 1024
    if cols <= 64:
        return next_power_of_2(cols)
    widths = [w for w in (1024, 512, 256, 128, 64) if w <= next_power_of_2(cols)]

    def idle(width: int) -> float:
        return -cols % width / cols

    return next((w for w in widths if idle(w) < 1 / 8), min(widths, key=idle))


def pointwise_row_tiled(ynumel, xnumel, element_size: int) -> list[Config]:
    """Candidates of a tiled pointwise kernel over ``[ynumel rows, xnumel columns]``
    whose accesses all run along the rows (`scheduler.tiling`: a row's own values are
    loaded once a tile row), in ``[YBLOCK, XBLOCK]`` tiles of consecutive programs
    along a row, as the hand-written row-broadcast kernels' (`broadcast_tile`): the
    default 4 warps, each thread moving 64 bytes (as `flat_pointwise_default`), then 4
    or 8 warps moving 32 to 128 bytes and half-width tiles. ``XBLOCK`` is
    `_row_tile_cols`; ``YBLOCK`` is capped at the rows' next power of two."""
    cols, rows = _static(xnumel), _static(ynumel)
    rows_cap = next_power_of_2(rows) if rows is not None else 1 << 30
    xblock = _row_tile_cols(cols)

    def tile(bytes_per_thread: int, warps: int, width: int) -> Config:
        yblock = min(max(1, bytes_per_thread * 32 * warps // element_size // width), rows_cap)
        while warps > 1 and yblock * width < 32 * warps:
            warps //= 2
        return Config.of(warps, YBLOCK=yblock, XBLOCK=width)

    options = [tile(bytes_per_thread, warps, xblock) for warps, bytes_per_thread in ((4, 32), (4, 128), (8, 32),
                                                                                     (8, 64))]
    options += [tile(64, 4, max(16, xblock // 2))]  # more programs for few, short rows
    return _unique([tile(64, 4, xblock)] + options)


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
        if rblock >= 8192 and n is not None:
            options += _streamed_rows(rblock, element_size)
    return _unique([default] + options)


def mix_order_reduction(numel, rnumel: int, rows_per_program: int, element_size: int) -> list[Config]:
    """Candidates of a mix-order kernel (persistent rows of ``rnumel``, ``numel`` rows,
    ``rows_per_program`` rows a program): `persistent_reduction`'s one-pass configs with
    ``RSPLIT = rows_per_program`` and ``XBLOCK`` dividing it (a program's rows are one
    column partial's piece), ``XBLOCK`` halved (down to 1) while a column accumulator
    tile would take more than 16 registers a thread."""
    out = []
    for c in persistent_reduction(numel, rnumel, element_size):
        blocks = c.kwargs
        if "PROGRAMS_PER_SM" in blocks:
            continue
        xblock, rblock = blocks["XBLOCK"], blocks["RBLOCK"]
        while xblock > 1 and (rows_per_program % xblock or xblock * rblock > 16 * 32 * c.num_warps):
            xblock //= 2
        out.append(Config.of(c.num_warps, c.num_stages, c.maxnreg, XBLOCK=xblock, RBLOCK=rblock,
                             RSPLIT=rows_per_program))
    return _unique(out)


def _streamed_rows(rblock: int, element_size: int) -> list[Config]:
    """Streamed launches of a persistent reduction's grid-stride loop over rows of
    ``rblock``: 1 or 2 programs an SM of 8 to 32 warps (8 to 32 fp32 or 8 to 64 half
    values a thread), each loading its next row through shared memory while it reduces
    this one (``num_stages=2``), where that row fits `STAGED_SHARED_BYTES`. With one or
    two programs an SM, a program that loads its next row only after reducing this one
    leaves the memory idle meanwhile: the hand-written LayerNorm bf16 over 32768
    columns went from 75% to 85% of copy bandwidth on an H200 this way (see
    `row_candidates`)."""
    options = []
    for warps in (8, 16, 32):
        per_thread = rblock // (32 * warps)
        if 8 <= per_thread <= (64 if element_size < 4 else 32):
            options += [Config.of(warps, 2, XBLOCK=1, RBLOCK=rblock, PROGRAMS_PER_SM=k) for k in (1, 2)
                        if k * rblock * element_size <= STAGED_SHARED_BYTES]
    return options


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
        configs = [make(64, 32, 8), make(64, 8, 4), make(32, 64, 8), make(128, 16, 8), make(64, 64, 8)]
        # narrow tiles that cover a short reduction (a conv net's mean over H*W of a
        # channels-last activation) in one or two chunks: a few loads a thread in flight
        # at once, where a wide tile walks the rows in many dependent chunks; and with few
        # outputs they spread the rows over more SMs (a split reduction's final stage)
        configs += [make(16, 128, 4), make(8, 256, 4), make(16, 256, 8)]
        return _unique(configs)
    configs = [make(1, 4096, 8), make(1, 2048, 8), make(1, 1024, 4), make(1, 4096, 16), make(2, 2048, 8)]
    if r is not None and r >= WIDE_LOOPED_ROW:
        # wide chunks: fewer rows in flight, so a row that a later r loop reads again is
        # still in L2 then (the rows a persistent kernel could not hold in registers)
        configs = [make(1, 8192, 16), make(1, 16384, 32)] + configs
    return _unique(configs)


WIDE_LOOPED_ROW = 16384
"""Looped reductions of static rows at least this long also try 8192- and 16384-element
chunks over 16 and 32 warps, the first the default. With at most two such programs an
SM, the rows in flight fit L2, so a row read again in a later r loop comes from L2, not
DRAM (softmax's and LayerNorm's backward over rows of 32768: docs/performance.md,
fourteenth session)."""


# ----------------------------------------------------------------------------- hand-written kernels
# Launch configs of the hand-written kernels (`inductor_lite.bench.dsl_kernels`), with the
# measurements behind them. Their launchers pick a kernel variant and a grid from entries
# of the Config beside its block sizes: ``ROWS_FASTEST`` and ``PROGRAMS_PER_SM`` for 2-D
# tiles (`broadcast_tile`), ``REREAD``, ``LOOPED`` and ``PROGRAMS_PER_SM`` for row
# reductions (`row_form`).

STAGED_SHARED_BYTES = 160 * 1024
"""Most shared memory an SM's streamed row programs may buffer rows in
(``num_stages=2``). Deeper buffering did not pay: on an H200, LayerNorm bf16 over 32768
columns reached 86% of copy bandwidth with one 64 KiB buffer a program
(``num_stages=2``) and 81% with two (``num_stages=3``)."""


def broadcast_tile(yblock: int, xblock: int, num_warps: int, *, rows_fastest: bool = False,
                   programs_per_sm: int = 0, num_stages: int = 1) -> Config:
    """A 2-D pointwise launch over ``[YBLOCK rows, XBLOCK columns]`` tiles, one tile a
    program of a 1-D grid. ``rows_fastest``: consecutive programs take consecutive row
    blocks (else consecutive column blocks, which walks memory in order).
    ``programs_per_sm > 0``: a *streamed* launch, about that many programs an SM, each
    keeping one column block and striding over its row blocks, its tile loads pipelined
    ``num_stages`` deep.

    Raises:
        ValueError: a block size that is not a power of two, ``programs_per_sm < 0``,
            ``rows_fastest`` with a streamed launch (which has no such order), or
            ``num_stages != 1`` without one.
    """
    if programs_per_sm < 0 or (programs_per_sm and rows_fastest) or num_stages < 1 \
            or (num_stages > 1 and not programs_per_sm):
        raise ValueError(f"broadcast_tile({yblock}, {xblock}, {num_warps}, rows_fastest={rows_fastest}, "
                         f"programs_per_sm={programs_per_sm}, num_stages={num_stages}): programs_per_sm must be "
                         ">= 0, a streamed launch has no rows_fastest order, and only a streamed launch has "
                         "num_stages > 1")
    extra = {"ROWS_FASTEST": True} if rows_fastest else {"PROGRAMS_PER_SM": programs_per_sm} if programs_per_sm else {}
    return Config.of(num_warps, num_stages, YBLOCK=yblock, XBLOCK=xblock, **extra)


def persistent_row(xblock: int, rblock: int, num_warps: int, *, reread: bool = False,
                   maxnreg: Optional[int] = None) -> Config:
    """A persistent row-reduction launch: ``XBLOCK`` rows a program, each held whole in
    an ``RBLOCK``-wide block (``RBLOCK >= cols``). ``reread``: the row is loaded again
    after each reduction instead of held in registers. ``maxnreg``: the cap on
    registers a thread, under which the compiler widens 16-bit rows again at each use
    (`inductor_lite.dsl.nvptx`)."""
    return Config.of(num_warps, 1, maxnreg, XBLOCK=xblock, RBLOCK=rblock, **({"REREAD": True} if reread else {}))


def looped_row(rblock: int, num_warps: int) -> Config:
    """A looped row-reduction launch: one row a program (``XBLOCK=1``), streamed in
    ``RBLOCK``-wide chunks."""
    return Config.of(num_warps, XBLOCK=1, RBLOCK=rblock, LOOPED=True)


def streamed_row(rblock: int, num_warps: int, programs_per_sm: int, *, num_stages: int = 1,
                 maxnreg: Optional[int] = None) -> Config:
    """A streamed row-reduction launch (persistent in the CUDA sense): a grid of
    ``programs_per_sm`` programs an SM striding over the rows one at a time
    (``XBLOCK=1``), each row whole in an ``RBLOCK``-wide block, the next row loaded
    before the current one is reduced: into registers (``num_stages == 1``) or through
    shared memory, ``num_stages - 1`` rows ahead."""
    return Config.of(num_warps, num_stages, maxnreg, XBLOCK=1, RBLOCK=rblock, PROGRAMS_PER_SM=programs_per_sm)


def row_form(config: Config) -> str:
    """``"persistent"``, ``"looped"`` or ``"streamed"``: which row-reduction kernel a
    hand-written row launcher runs for ``config`` (`persistent_row`, `looped_row`,
    `streamed_row`).

    Raises:
        ValueError: ``config`` is none of the three, or has entries its form does not take.
    """
    kwargs = config.kwargs
    forms = {"persistent": {"XBLOCK", "RBLOCK"} | kwargs.keys() & {"REREAD"},
             "looped": {"XBLOCK", "RBLOCK", "LOOPED"}, "streamed": {"XBLOCK", "RBLOCK", "PROGRAMS_PER_SM"}}
    form = next((f for f, names in forms.items() if kwargs.keys() == names), None)
    if (form is None or (form != "persistent" and kwargs["XBLOCK"] != 1) or kwargs.get("LOOPED", True) is not True
            or kwargs.get("PROGRAMS_PER_SM", 1) < 1):
        raise ValueError(f"config {config} is not a row-reduction launch: a persistent one takes XBLOCK, RBLOCK "
                         "and optionally REREAD, a looped one XBLOCK=1, RBLOCK and LOOPED=True, a streamed one "
                         "XBLOCK=1, RBLOCK and PROGRAMS_PER_SM >= 1")
    if config.num_stages != 1 and form != "streamed":
        raise ValueError(f"config {config}: only streamed configs take num_stages > 1")
    return form


def flat_pointwise_default(numel: int, element_size: int) -> Config:
    """``XBLOCK`` and warps of a hand-written 1-D pointwise kernel over ``numel``
    elements of ``element_size`` bytes: each of 4 warps' threads moves 64 bytes a tensor
    (four 16-byte vectors), so enough loads are in flight to saturate HBM without a long
    tail of programs."""
    return Config.of(4, XBLOCK=min(64 * 32 * 4 // element_size, next_power_of_2(numel)))


def flat_pointwise_candidates(numel: int, element_size: int) -> list[Config]:
    """What the autotuner times for a hand-written 1-D pointwise kernel, the default
    (`flat_pointwise_default`) first: 4 warps moving 16 to 128 bytes a thread and
    tensor, 8 warps moving 32 or 64, and 4, 8 or 16 warps moving 8 (one 8-byte access a
    tensor). On an H100, adding 128 MB of fp32 and 64 MB of bf16 ran at 101.9% and 97.8%
    of copy bandwidth with 8 bytes a thread, against 99.9% and 96.4% with 32 (what
    Inductor picks, 8 bytes over 8 warps, reached 101.5% and 96.3%)."""
    cap = next_power_of_2(numel)
    options = [Config.of(warps, XBLOCK=min(bytes_per_thread * 32 * warps // element_size, cap))
               for warps, bytes_per_thread in ((4, 32), (4, 128), (8, 32), (8, 64), (4, 8), (8, 8), (16, 8), (4, 16))]
    return _unique([flat_pointwise_default(numel, element_size)] + options)


def broadcast_tile_default(rows: int, cols: int, element_size: int) -> Config:
    """Tile shape and warps of a hand-written row-broadcast pointwise kernel (an
    operand of shape ``(cols,)`` broadcast over ``[rows, cols]``, e.g. a bias): up to
    1024 columns a tile (16-byte vectors along a row) and enough rows that each thread
    moves 64 bytes, as in `flat_pointwise_default`; the broadcast slice is loaded once
    a tile instead of once an element."""
    xblock = min(next_power_of_2(cols), 1024)
    yblock = max(1, 64 * 32 * 4 // element_size // xblock)
    return broadcast_tile(min(yblock, next_power_of_2(rows)), xblock, 4)


def broadcast_tile_candidates(rows: int, cols: int, element_size: int) -> list[Config]:
    """What the autotuner times for a hand-written row-broadcast tile kernel (bias +
    GELU), the default (`broadcast_tile_default`) first: 4 or 8 warps, up to 1024
    columns, 32 to 128 bytes a thread, programs in either order; 16 warps at 16 bytes a
    thread, and 512-column tiles of 8 warps at 32 (on an H100 both reached 97.5-97.7% of
    copy bandwidth in fp32 where the best of the others reached 97.0%); for half inputs
    streamed launches of 2 to 8 programs an SM with 16 or 32 bytes a thread and 2 or 4
    stages, the five best of 64 such launches on an H200. (There, column blocks first
    was 3-7% faster in fp32, and rows first 8% faster in bf16, where GELU's arithmetic,
    not memory, is the limit; streamed and pipelined launches reached 86-87% of copy
    bandwidth in bf16, against 84-85% for the best tiles, and were 2-3% slower in
    fp32.)"""
    xblock = min(1024, next_power_of_2(cols))
    rows_cap = next_power_of_2(rows)

    def rows_for(bytes_per_thread: int, warps: int, tile_cols: int) -> int:
        return min(max(1, bytes_per_thread * 32 * warps // element_size // tile_cols), rows_cap)

    options = [broadcast_tile(rows_for(bytes_per_thread, warps, xblock), xblock, warps, rows_fastest=rows_fastest)
               for rows_fastest in (False, True) for warps in (4, 8) for bytes_per_thread in (32, 64, 128)]
    options += [broadcast_tile(rows_for(bytes_per_thread, warps, tile_cols), tile_cols, warps)
                for tile_cols, warps, bytes_per_thread in ((xblock, 16, 16), (min(xblock, 512), 8, 32))]
    if element_size < 4:  # streamed: the next tile's loads overlap GELU's arithmetic
        options += [broadcast_tile(rows_for(bytes_per_thread, warps, xblock), xblock, warps,
                                   programs_per_sm=per_sm, num_stages=stages)
                    for warps, bytes_per_thread, per_sm, stages in ((4, 16, 8, 2), (4, 16, 4, 4), (4, 32, 4, 2),
                                                                    (8, 16, 2, 4), (8, 16, 4, 2))]
    return _unique([broadcast_tile_default(rows, cols, element_size)] + options)


def row_default(cols: int, element_size: int) -> Config:
    """Launch of a hand-written row reduction over rows of ``cols`` elements of
    ``element_size`` bytes.

    Rows of up to 1024 columns: persistent, 4 warps, several rows a program with about
    4096 elements a program (one warp a row at 1024 columns, so the reductions stay in
    warp shuffles). Longer rows up to `PERSISTENT_MAX_RBLOCK`: persistent, one row a
    program, 4 warps up to 2048 columns, 8 at 4096, 16 beyond (8 to 64 fp32 values a
    thread; 16 warps keep the register budget at 128 a thread). Half inputs from 2048
    to 8192 columns get twice the elements a thread (two rows a program at 2048, else
    half the warps), so each thread still loads 64 bytes: on an H200 the bf16 rows at
    16 elements (32 bytes) a thread reached only 75-84% of copy bandwidth where fp32 at
    64 bytes reached 95%. Longer still: looped over 4096-column chunks with 8 warps.
    """
    rblock = next_power_of_2(cols)
    if rblock <= 1024:
        return persistent_row(max(1, 4096 // rblock), rblock, 4)
    if rblock <= PERSISTENT_MAX_RBLOCK:
        warps = 4 if rblock <= 2048 else 8 if rblock <= 4096 else 16
        if element_size < 4 and rblock <= 8192:
            if warps == 4:
                return persistent_row(2, rblock, 4)
            warps //= 2
        return persistent_row(1, rblock, warps)
    return looped_row(4096, 8)


def row_candidates(cols: int, element_size: int, streamed: bool = False, reread: bool = False) -> list[Config]:
    """What the autotuner times for a hand-written row reduction, the default
    (`row_default`) first.

    Persistent: 4 to 32 values a thread over 1024 to 8192 elements a program for rows
    of up to 1024 columns; 8 to 64 values a thread, one row a program (and two, up to
    4096 columns, or 8192 for half inputs) for longer rows. The values a thread trade
    registers (hence programs resident an SM, hence loads in flight) against the cost
    of the cross-warp reduction. Looped: 1024-column chunks with 4 warps and
    2048-column chunks with 8 from 2048 columns, 4096-column chunks with 8 or 16 warps
    from 8192. ``streamed`` (kernels with a streamed form), from 8192 columns: 1, 2 or
    4 programs an SM of 8 to 32 warps, 8 to 32 fp32 or 8 to 64 half values a thread,
    with the next row in registers; and 1 or 2 programs an SM with the next row in
    shared memory (``num_stages=2``) where their buffers take at most
    `STAGED_SHARED_BYTES`. There one or two programs fill an SM, and a program that
    loads its next row only after reducing this one leaves the memory idle meanwhile:
    on an H200 streaming raised LayerNorm over 16384 columns from 83% to 90% of copy
    bandwidth in fp32 and from 67% to 82% in bf16, and the shared-memory form
    LayerNorm bf16 over 32768 columns from 75% to 85% (a 64 KiB row in flight in
    registers spills). ``reread`` (kernels that reduce a row before using it again),
    from 4096 columns: one row a program re-read after each reduction, 4 to 16 warps,
    16 to 128 values a thread (on an H200: softmax bf16 over 16384 columns from 84% to
    86% of copy bandwidth, RMSNorm bf16 over 8192 from 88% to 90%). Half inputs of
    those kernels: each persistent one-row config of 32 or 64 values a thread and up to
    8 warps, again with ``maxnreg=96``, under which the compiler widens the row again
    at each use instead of keeping it in fp32 (on an H200, LayerNorm bf16 over 4096 and
    8192 columns at 4 warps reached 88% and 86% of copy bandwidth where the best
    uncapped configs reached 82% and 83%; over 32768 columns at 16 warps, the cap of 64
    that fits two programs an SM spilled and was slower).
    """
    rblock = next_power_of_2(cols)
    options = []
    half = element_size < 4
    if rblock <= 1024:
        for per_program in (1024, 2048, 4096, 8192):
            for per_thread in (4, 8, 16, 32):
                warps = per_program // per_thread // 32
                if 1 <= warps <= 16 and per_program >= rblock:
                    options.append(persistent_row(per_program // rblock, rblock, warps))
    elif rblock <= PERSISTENT_MAX_RBLOCK:
        shapes = [(1, 8), (1, 16), (1, 32), (1, 64), (2, 16), (2, 32)] + ([(2, 64)] if half else [])
        for xblock, per_thread in shapes:
            warps = xblock * rblock // per_thread // 32
            fits = xblock == 1 or rblock <= (8192 if half else 4096)
            if 1 <= warps <= 32 and fits:
                options.append(persistent_row(xblock, rblock, warps))
                if reread and half and xblock == 1 and per_thread in (32, 64) and warps <= 8:
                    options.append(persistent_row(xblock, rblock, warps, maxnreg=96))
    if rblock >= 2048:
        options += [looped_row(chunk, warps) for chunk, warps in ((1024, 4), (2048, 8)) if chunk < rblock]
    if rblock >= 8192:
        options += [looped_row(4096, 8), looped_row(4096, 16)]
    if reread and 4096 <= rblock <= PERSISTENT_MAX_RBLOCK:
        options += [persistent_row(1, rblock, warps, reread=True) for warps in (4, 8, 16)
                    if 16 <= rblock // (32 * warps) <= 128]
    if streamed and 8192 <= rblock <= PERSISTENT_MAX_RBLOCK:
        for warps in (8, 16, 32):
            per_thread = rblock // (32 * warps)
            if 8 <= per_thread <= (64 if half else 32):
                options += [streamed_row(rblock, warps, k) for k in (1, 2, 4)]
                options += [streamed_row(rblock, warps, k, num_stages=2) for k in (1, 2)
                            if k * rblock * element_size <= STAGED_SHARED_BYTES]
    return _unique([row_default(cols, element_size)] + options)
