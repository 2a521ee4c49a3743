"""What DSL kernels call: ``import inductor_lite.dsl as dl`` then ``dl.load(...)``.

Every function here except `cdiv` is a stub: the frontend (`frontend.py`) recognises
it by identity inside a ``@dl.kernel`` function and emits block IR through
`semantic.py`; called from ordinary Python it raises `RuntimeError`. The signatures
below are the ones kernels bind against (the frontend binds calls with
`inspect.signature` of these stubs, so argument errors read like Python's).

Semantics (promotion, NaN handling, integer division, half types) are documented in
`ir.py` and in the project brief; in short they follow Triton, with half types always
computed in fp32.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

from . import ir

float16 = ir.float16
bfloat16 = ir.bfloat16
float32 = ir.float32
float64 = ir.float64
int1 = ir.int1
int8 = ir.int8
int16 = ir.int16
int32 = ir.int32
int64 = ir.int64
uint8 = ir.uint8
dtype = ir.DType


class constexpr:
    """Annotation marking a kernel parameter as a compile-time constant.

    ``def k(x_ptr, n, BLOCK: dl.constexpr)``: ``BLOCK`` is passed by keyword at launch,
    folded into the IR and part of the specialisation (cache) key. Values must be
    bool, int, float, str, None or a DSL dtype.
    """


def _builtin(fn: Callable) -> Callable:
    """Mark ``fn`` as a DSL builtin; the frontend dispatches on ``__dl_builtin__``."""
    fn.__dl_builtin__ = fn.__name__
    return fn


def _outside(name: str) -> RuntimeError:
    return RuntimeError(f"dl.{name} can only be called inside a @dl.kernel function")


@_builtin
def program_id(axis: int) -> Any:
    """Index of this program along grid axis 0, 1 or 2 (int32 scalar)."""
    raise _outside("program_id")


@_builtin
def num_programs(axis: int) -> Any:
    """Number of programs along grid axis 0, 1 or 2 (int32 scalar)."""
    raise _outside("num_programs")


@_builtin
def arange(start: int, end: int) -> Any:
    """int32 block ``[start, start + 1, ..., end - 1]``; constexpr bounds, ``end - start``
    a power of 2."""
    raise _outside("arange")


@_builtin
def full(shape: Sequence[int], value: Any, dtype: ir.DType) -> Any:
    """Block of ``shape`` (power-of-2 dims) filled with ``value`` cast to ``dtype``."""
    raise _outside("full")


@_builtin
def zeros(shape: Sequence[int], dtype: ir.DType) -> Any:
    """``full(shape, 0, dtype)``."""
    raise _outside("zeros")


@_builtin
def load(pointer: Any, mask: Any = None, other: Any = None, cache_modifier: str = "",
         eviction_policy: str = "") -> Any:
    """Gather from global memory. ``pointer``, ``mask`` (int1) and ``other`` broadcast
    together; masked-off lanes are not read and give ``other`` (0 if omitted).
    ``cache_modifier`` (a constant string): ``""``, ``".ca"`` (cache in L1 and L2),
    ``".cg"`` (L2 only: data read once, which then leaves L1 to data read again, such
    as a norm's weight) or ``".cv"`` (fetch again), PTX's cache operators.
    ``eviction_policy`` (a constant string): ``""``, ``"evict_first"`` (data read once:
    it leaves L1 and L2 first) or ``"evict_last"`` (data read again, such as a norm's
    weight: it stays longest). Both as in Triton; neither changes results."""
    raise _outside("load")


@_builtin
def store(pointer: Any, value: Any, mask: Any = None) -> Any:
    """Scatter ``value`` (cast to the pointee type, round-to-nearest-even) to global
    memory; ``value`` and ``mask`` broadcast to the pointer block's shape; masked-off
    lanes are not written."""
    raise _outside("store")


@_builtin
def atomic_add(pointer: Any, value: Any, mask: Any = None, sem: str = "acq_rel", scope: str = "gpu") -> Any:
    """Atomically add ``value`` to the scalar at ``pointer`` and return the value it
    held before (0 where ``mask`` is false: nothing is added); the pointee is int32,
    int64, float32 or float64.

    Through a scalar pointer this is one atomic per program. Through a pointer block,
    every lane where ``mask`` holds adds its element of ``value`` (``value`` and
    ``mask`` broadcast to the pointer's shape) and nothing is returned (None): lanes
    and programs that share an address all add, in an unspecified order (float sums
    may differ in the last bits between runs), as Triton's ``tl.atomic_add`` with an
    unused result (PTX ``red``; there ``"acquire"`` acts as ``"relaxed"`` and
    ``"acq_rel"`` as ``"release"``, since no value is read). ``sem`` (``"relaxed"``, ``"acquire"``, ``"release"`` or
    ``"acq_rel"``) and ``scope`` (``"cta"``, ``"gpu"`` or ``"sys"``) are PTX's memory
    ordering, as in Triton; with ``"release"``/``"acq_rel"`` the program's earlier
    writes, by any of its threads, are visible to a program that acquires the new
    value, and with ``"acquire"``/``"acq_rel"`` what it loads afterwards sees what such
    programs wrote before. That is enough for a counter that elects the last program
    of a group to combine the group's partial results."""
    raise _outside("atomic_add")


@_builtin
def device_assert(condition: Any, message: str = "") -> Any:
    """Stop the launch with an error where any lane of ``condition`` (int1, a block or
    a scalar) is false, as CUDA's ``assert`` (and Triton's ``tl.device_assert``): on
    the GPU the kernel traps, which leaves the CUDA context unusable (the next
    synchronising call raises, as after eager torch's device-side asserts); in the
    interpreter it raises ``AssertionError`` naming the kernel and ``message`` (a
    constant string)."""
    raise _outside("device_assert")


@_builtin
def cluster_gather(value: Any, size: int) -> Any:
    """The scalar ``value`` of every program of this program's *cluster*, as a
    ``[size]`` block in rank order.

    A kernel that calls it runs its programs in thread-block clusters of ``size``
    programs (CUDA's ``__cluster_dims__(size, 1, 1)``, sm_90 and newer): programs
    ``k * size`` to ``k * size + size - 1`` along grid axis 0 run at the same time, and
    element ``r`` of the result is ``value`` of the one whose ``program_id(0) % size
    == r``, read from its shared memory. ``size`` is a constexpr power of two from 2
    to 8 (the portable cluster sizes), the same for every call in a kernel (else a
    CompilationError); the launch grid's axis 0 must be a multiple of it (else the
    launch raises ValueError), and compiling for a GPU older than sm_90 raises
    NVPTXCompilationError. In the interpreter, loops whose bounds differ between
    the programs of one cluster raise RuntimeError. Every program of a cluster must
    make the same calls in the same order: each is a barrier across the cluster.
    Reduce the result with ordinary block ops, e.g. ``dl.sum(dl.cluster_gather(s,
    4), 0)``, to split one row's reduction over a cluster of programs."""
    raise _outside("cluster_gather")


@_builtin
def where(condition: Any, x: Any, y: Any) -> Any:
    """Elementwise ``x if condition else y``; all three broadcast together."""
    raise _outside("where")


@_builtin
def maximum(x: Any, y: Any) -> Any:
    """Elementwise maximum; NaN propagates (torch.maximum)."""
    raise _outside("maximum")


@_builtin
def minimum(x: Any, y: Any) -> Any:
    """Elementwise minimum; NaN propagates (torch.minimum)."""
    raise _outside("minimum")


def _math_stub(name: str, doc: str) -> Callable:
    def stub(x: Any) -> Any:
        raise _outside(name)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = doc
    return _builtin(stub)


def _math2_stub(name: str, doc: str) -> Callable:
    def stub(x: Any, y: Any) -> Any:
        raise _outside(name)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = doc
    return _builtin(stub)


exp = _math_stub("exp", "e**x (integers are computed as float32).")
exp2 = _math_stub("exp2", "2**x.")
expm1 = _math_stub("expm1", "e**x - 1, accurate near 0.")
log = _math_stub("log", "Natural logarithm.")
log2 = _math_stub("log2", "Base-2 logarithm.")
log1p = _math_stub("log1p", "log(1 + x), accurate near 0.")
sqrt = _math_stub("sqrt", "Square root.")
rsqrt = _math_stub("rsqrt", "1 / sqrt(x).")
abs = _math_stub("abs", "Absolute value (integers stay integers).")
sin = _math_stub("sin", "Sine (radians).")
cos = _math_stub("cos", "Cosine (radians).")
tan = _math_stub("tan", "Tangent (radians).")
tanh = _math_stub("tanh", "Hyperbolic tangent.")
sigmoid = _math_stub("sigmoid", "1 / (1 + exp(-x)).")
erf = _math_stub("erf", "Gauss error function.")
floor = _math_stub("floor", "Round toward -inf (identity on integers).")
ceil = _math_stub("ceil", "Round toward +inf (identity on integers).")
round = _math_stub("round", "Round half to even, as torch.round (identity on integers).")
trunc = _math_stub("trunc", "Round toward zero (identity on integers).")
isnan = _math_stub("isnan", "int1: x is NaN (always false for integers).")
isinf = _math_stub("isinf", "int1: x is +-inf (always false for integers).")
pow = _math2_stub("pow", "x**y in floating point (integers are computed as float32).")
atan2 = _math2_stub("atan2", "Four-quadrant arctangent of x / y (C atan2(x, y), torch.atan2), radians.")
fmod = _math2_stub("fmod", "C fmod: remainder with the sign of x.")
fast_dividef = _math2_stub(
    "fast_dividef",
    "x / y, approximate (CUDA's ``__fdividef``, Triton's ``tl.math.fast_dividef``): in fp32 on the GPU\n"
    "    one reciprocal and one multiply (``div.approx.f32``), within 2 ulp for 2**-126 <= |y| < 2**126\n"
    "    (outside it the result may be 0 or lose accuracy); exact division in fp64 and in the interpreter.",
)
acos = _math_stub("acos", "Arc cosine, radians in [0, pi]; NaN outside [-1, 1].")
asin = _math_stub("asin", "Arc sine, radians in [-pi/2, pi/2]; NaN outside [-1, 1].")
atan = _math_stub("atan", "Arc tangent, radians in [-pi/2, pi/2].")
sinh = _math_stub("sinh", "Hyperbolic sine.")
cosh = _math_stub("cosh", "Hyperbolic cosine.")
asinh = _math_stub("asinh", "Inverse hyperbolic sine.")
acosh = _math_stub("acosh", "Inverse hyperbolic cosine; NaN below 1.")
atanh = _math_stub("atanh", "Inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1].")
erfc = _math_stub("erfc", "1 - erf(x), accurate where erf(x) is near 1.")
erfcx = _math_stub("erfcx", "Scaled complementary error function exp(x**2) * erfc(x).")
erfinv = _math_stub("erfinv", "Inverse error function; +-inf at +-1, NaN outside [-1, 1].")
normcdfinv = _math_stub("normcdfinv", "Inverse of the standard normal CDF (torch.special.ndtri); -inf at 0, "
                                       "+inf at 1, NaN outside [0, 1].")
lgamma = _math_stub("lgamma", "log(|gamma(x)|); +inf at the poles 0, -1, -2, ...")
cyl_bessel_i0 = _math_stub("cyl_bessel_i0", "Modified Bessel function of the first kind, order 0 (torch.i0).")
cyl_bessel_i1 = _math_stub("cyl_bessel_i1", "Modified Bessel function of the first kind, order 1 "
                                            "(torch.special.i1).")
j0 = _math_stub("j0", "Bessel function of the first kind, order 0 (torch.special.bessel_j0).")
j1 = _math_stub("j1", "Bessel function of the first kind, order 1 (torch.special.bessel_j1).")
y0 = _math_stub("y0", "Bessel function of the second kind, order 0 (torch.special.bessel_y0); -inf at 0, "
                      "NaN below.")
y1 = _math_stub("y1", "Bessel function of the second kind, order 1 (torch.special.bessel_y1); -inf at 0, "
                      "NaN below.")
signbit = _math_stub("signbit", "int1: the sign bit of x is set (true for -0.0 and negative NaNs; "
                                "x < 0 for integers).")
hypot = _math2_stub("hypot", "sqrt(x**2 + y**2) without overflow or underflow in between.")
copysign = _math2_stub("copysign", "|x| with the sign bit of y.")
nextafter = _math2_stub("nextafter", "The next representable value after x toward y, in x's float type "
                                     "(the operands' common float type; halves are computed in fp32).")


@_builtin
def cast(x: Any, dtype: ir.DType, bitcast: bool = False) -> Any:
    """Convert to ``dtype`` (float->int truncates, to int1 means ``!= 0``); with
    ``bitcast=True`` reinterpret the bits (same width required). Same as ``x.to(...)``."""
    raise _outside("cast")


@_builtin
def broadcast_to(x: Any, shape: Sequence[int]) -> Any:
    """Broadcast ``x`` to ``shape`` with numpy rules."""
    raise _outside("broadcast_to")


@_builtin
def reshape(x: Any, shape: Sequence[int]) -> Any:
    """Same elements in row-major order, new shape (same numel)."""
    raise _outside("reshape")


@_builtin
def expand_dims(x: Any, axis: Any) -> Any:
    """Insert a size-1 dimension at ``axis`` (an int or a sequence of ints)."""
    raise _outside("expand_dims")


def _reduce_stub(name: str, doc: str) -> Callable:
    def stub(x: Any, axis: int, keep_dims: bool = False) -> Any:
        raise _outside(name)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = doc
    return _builtin(stub)


sum = _reduce_stub("sum", "Sum along ``axis``: int8/16/32, uint8, int1 -> int32; int64 -> int64; "
                          "fp16/bf16/fp32 -> fp32; fp64 -> fp64.")
prod = _reduce_stub("prod", "Product along ``axis`` (result types as `sum`).")
max = _reduce_stub("max", "Maximum along ``axis``; NaN propagates (torch.amax).")
min = _reduce_stub("min", "Minimum along ``axis``; NaN propagates (torch.amin).")
argmax = _reduce_stub("argmax", "int32 index of the maximum along ``axis``; ties -> first index, "
                                "NaN counts as the maximum (torch.argmax).")
argmin = _reduce_stub("argmin", "int32 index of the minimum along ``axis``; ties -> first index, "
                                "NaN counts as the minimum (torch.argmin).")


@_builtin
def welford(mean: Any, m2: Any, weight: Any, axis: int, keep_dims: bool = False) -> Any:
    """Reduce Welford states along ``axis``: returns ``(mean, m2, weight)`` of the
    combined population, each with ``axis`` removed (kept as size 1 with
    ``keep_dims``).

    A state is the mean of some elements, ``m2`` their sum of squared deviations from
    that mean, and ``weight`` their count (a float). The three operands broadcast
    together (numbers included) and are computed in fp64 if any is fp64, else fp32.
    For raw values ``x`` under a mask: ``dl.welford(x, 0.0, mask, 1)``; then the
    variance is ``m2 / weight`` (biased) or ``m2 / (weight - 1)`` (unbiased).
    Weight-0 states (mean and m2 finite, e.g. 0) contribute nothing and give no NaN.
    Parallel update of Chan, Golub and LeVeque (1979), as TorchInductor's
    ``welford_combine``; the exact formula is in `ir.py`.
    """
    raise _outside("welford")


@_builtin
def welford_combine(mean_a: Any, m2_a: Any, weight_a: Any, mean_b: Any, m2_b: Any, weight_b: Any) -> Any:
    """Combine two Welford states elementwise: returns ``(mean, m2, weight)`` of the
    union of the two populations (see `welford`; operands broadcast together).

    Used by looped reductions to keep a running state per lane::

        mean, m2, weight = dl.welford_combine(mean, m2, weight, x, 0.0, mask)
    """
    raise _outside("welford_combine")


@_builtin
def associative_scan(values: Any, axis: int, combine_fn: Callable, reverse: bool = False) -> Any:
    """Inclusive scan of ``values`` along ``axis`` with ``combine_fn`` (Triton's
    ``tl.associative_scan``).

    ``values`` is a block or a tuple of blocks (broadcast together; no pointers);
    ``combine_fn(a0, ..., b0, ...)`` takes the state of the elements before (``a``,
    one scalar per value) and after (``b``) and returns the combined state (one value,
    or a tuple with one entry per value). It is an ordinary Python function, defined
    at module level or inside the kernel, written in the DSL (``dl.where``,
    arithmetic, ...); only its parameters and constants may appear in it. It must be
    associative; it need not be commutative: ``a`` always covers lower indices (higher
    ones with ``reverse=True``). Element ``i`` of result ``k`` is the combination of
    elements ``0 .. i`` (``i .. n-1`` with ``reverse``). Half-type values are scanned
    in fp32 and give fp32 results; other types keep theirs, and each result has the
    type of its value. Returns a block (a single value) or a tuple of blocks.
    The order in which elements are combined is unspecified (backends may differ in
    the last bits of a float sum).

    Raises (as CompilationError): an axis out of range, a pointer value, a
    ``combine_fn`` that is not a Python function, takes the wrong number of
    arguments, returns the wrong number of values, or reads a runtime value from
    outside.
    """
    raise _outside("associative_scan")


def _scan_stub(name: str, doc: str) -> Callable:
    def stub(x: Any, axis: int, reverse: bool = False) -> Any:
        raise _outside(name)

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = doc
    return _builtin(stub)


cumsum = _scan_stub("cumsum", "Inclusive prefix sum along ``axis`` (suffix sum with ``reverse``); result types "
                              "as `sum`: int8/16/32, uint8, int1 -> int32; int64 -> int64; fp16/bf16/fp32 -> fp32; "
                              "fp64 -> fp64.")
cumprod = _scan_stub("cumprod", "Inclusive prefix product along ``axis`` (result types as `cumsum`).")


@_builtin
def cdiv(a: Any, b: Any) -> Any:
    """Ceiling division ``(a + b - 1) // b`` for non-negative ``a`` and positive ``b``.

    Works in ordinary Python on ints (e.g. in grid lambdas) and inside kernels on
    scalars or blocks.

    Raises:
        TypeError: outside a kernel, an argument that is not an int.
        ZeroDivisionError: ``b == 0``.
    """
    a, b = operator.index(a), operator.index(b)
    return -(-a // b)


@_builtin
def static_range(start: int, stop: int = None, step: int = 1) -> Any:
    """``for i in dl.static_range(n)``: a loop unrolled at compile time; the bounds are
    constexprs and ``i`` is a constexpr inside the body."""
    raise _outside("static_range")
