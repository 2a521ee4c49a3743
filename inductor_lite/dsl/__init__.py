"""The block DSL: ``import inductor_lite.dsl as dl``.

Kernels are Python functions decorated with `kernel` and written against the
functions of `language` (re-exported here); see `kernel.Kernel` for launching and
`ir` for the IR they compile to.
"""

from .frontend import CompilationError
from .kernel import Kernel, Specialization, kernel
from .language import (
    abs, arange, argmax, argmin, associative_scan, atan2, atomic_add, bfloat16, broadcast_to, cast, cdiv, ceil,
    cluster_gather, constexpr, cos, cumprod, cumsum, device_assert, dtype,
    erf, exp, exp2, expand_dims, expm1, fast_dividef, float16, float32, float64, floor, fmod, full, int1, int8,
    int16, int32, int64, isinf, isnan, load, log, log1p, log2, max, maximum, min, minimum, num_programs, pow,
    prod, program_id, reshape, round, rsqrt, sigmoid, sin, sqrt, static_range, store, sum, tan, tanh,
    trunc, uint8, welford, welford_combine, where, zeros,
)

__all__ = [
    "CompilationError", "Kernel", "Specialization", "kernel",
    "abs", "arange", "argmax", "argmin", "associative_scan", "atan2", "atomic_add", "bfloat16", "broadcast_to",
    "cast", "cdiv", "ceil",
    "cluster_gather", "device_assert",
    "constexpr", "cos", "cumprod", "cumsum", "dtype", "erf", "exp", "exp2", "expand_dims", "expm1", "fast_dividef",
    "float16",
    "float32", "float64", "floor", "fmod", "full", "int1", "int8", "int16", "int32", "int64", "isinf", "isnan",
    "load", "log", "log1p", "log2", "max", "maximum", "min", "minimum", "num_programs", "pow", "prod",
    "program_id", "reshape", "round", "rsqrt", "sigmoid", "sin", "sqrt", "static_range", "store", "sum",
    "tan", "tanh", "trunc", "uint8", "welford", "welford_combine", "where", "zeros",
]

# libdevice math beyond the basics (Triton's ``tl.math``/libdevice names)
from .language import (  # noqa: E402
    acos, acosh, asin, asinh, atan, atanh, copysign, cosh, cyl_bessel_i0, cyl_bessel_i1, erfc, erfcx, erfinv,
    hypot, j0, j1, lgamma, nextafter, normcdfinv, signbit, sinh, y0, y1,
)

__all__ += [
    "acos", "acosh", "asin", "asinh", "atan", "atanh", "copysign", "cosh", "cyl_bessel_i0", "cyl_bessel_i1",
    "erfc", "erfcx", "erfinv", "hypot", "j0", "j1", "lgamma", "nextafter", "normcdfinv", "signbit", "sinh", "y0",
    "y1",
]
