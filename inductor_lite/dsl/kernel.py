"""``@dl.kernel``: a DSL kernel's source, specialisation and launch dispatch.

``kernel[grid](*args, num_warps=None, num_stages=1, maxnreg=None, **constexprs)`` binds the arguments, validates
them, resolves the grid and runs the kernel: in the interpreter for CPU tensors (or
any tensors when ``config.interpret`` is set), through
``inductor_lite.runtime.launcher.launch`` for CUDA tensors.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import linecache
import operator
import sys
import textwrap
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import torch

from ..config import config
from ..counters import counters
from . import interpreter, ir, language
from .frontend import build_function
from .nvptx import check_maxnreg
from .nvptx_pipeline import check_num_stages
from .verifier import verify

_TORCH_TO_DSL = {
    torch.float16: ir.float16,
    torch.bfloat16: ir.bfloat16,
    torch.float32: ir.float32,
    torch.float64: ir.float64,
    torch.bool: ir.int1,
    torch.int8: ir.int8,
    torch.int16: ir.int16,
    torch.int32: ir.int32,
    torch.int64: ir.int64,
    torch.uint8: ir.uint8,
}
_POINTER_TYPES = {t: ir.BlockType(ir.PointerType(d)) for t, d in _TORCH_TO_DSL.items()}
_I32 = ir.BlockType(ir.int32)
_I64 = ir.BlockType(ir.int64)
_F32 = ir.BlockType(ir.float32)

SHORT_NAMES = {
    ir.float16: "fp16", ir.bfloat16: "bf16", ir.float32: "fp32", ir.float64: "fp64", ir.int1: "i1",
    ir.int8: "i8", ir.int16: "i16", ir.int32: "i32", ir.int64: "i64", ir.uint8: "u8",
}
"""Triton-style type-string spelling of each dtype (``'*fp32'`` is a pointer to fp32)."""
_FROM_SHORT = {v: k for k, v in SHORT_NAMES.items()}
_CONSTEXPR_TYPES = (bool, int, float, str, type(None), ir.DType)
_PLAIN_CONSTEXPR_TYPES = frozenset({bool, int, float, str, type(None)})
_NUM_WARPS = (1, 2, 4, 8, 16, 32)
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# looked up in sys.modules per CUDA launch: importing it at module level would be circular,
# and a `from ... import` statement costs more than the rest of the dispatch
_LAUNCHER_MODULE = "inductor_lite.runtime.launcher"


def type_string(t: ir.BlockType) -> str:
    """``'*fp32'``, ``'i32'``...: the Triton-style spelling of a scalar argument type."""
    if isinstance(t.element, ir.PointerType):
        return "*" + SHORT_NAMES[t.element.element]
    return SHORT_NAMES[t.element]


def parse_type_string(s: str) -> ir.BlockType:
    """Inverse of `type_string`.

    Raises:
        ValueError: an unknown type string.
    """
    name = s[1:] if s.startswith("*") else s
    if name not in _FROM_SHORT:
        raise ValueError(f"unknown argument type {s!r}; expected one of "
                         f"{sorted('*' + n for n in _FROM_SHORT) + sorted(_FROM_SHORT)}")
    dtype = _FROM_SHORT[name]
    return ir.BlockType(ir.PointerType(dtype) if s.startswith("*") else dtype)


@dataclasses.dataclass(frozen=True)
class Specialization:
    """What a compiled binary depends on besides the source: the runtime arguments'
    types and flags (in order) and the constexpr values (in declaration order)."""

    args: tuple[ir.ArgSpec, ...]
    constexprs: tuple[tuple[str, object], ...]

    def __reduce__(self):
        return Specialization, (self.args, self.constexprs)  # leave the cached hash behind

    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.args, self.constexprs))
            object.__setattr__(self, "_hash", cached)
        return cached

    def key(self) -> str:
        """A string naming this specialisation, stable across processes, e.g.
        ``'in_ptr0:*fp32:16,xnumel:i32|XBLOCK=1024'`` (``:16`` divisible by 16,
        ``:1`` equal to 1). Constexpr values are written with ``repr`` so ``1``,
        ``1.0`` and ``True`` differ."""
        cached = self.__dict__.get("_key")
        if cached is None:
            parts = []
            for a in self.args:
                flags = (":16" if a.divisible_by_16 else "") + (":1" if a.equal_to_1 else "")
                parts.append(f"{a.name}:{type_string(a.type)}{flags}")
            consts = ",".join(f"{n}={v!r}" for n, v in self.constexprs)
            cached = f"{','.join(parts)}|{consts}"
            object.__setattr__(self, "_key", cached)
        return cached


def _last_line(code) -> Optional[int]:
    """The last source line ``code`` or a function nested in it spans (None before
    Python 3.11, whose code objects have no end lines)."""
    if not hasattr(code, "co_positions"):
        return None
    ends = [end for _, end, _, _ in code.co_positions() if end is not None]
    ends += [_last_line(c) or 0 for c in code.co_consts if inspect.iscode(c)]
    return max(ends, default=code.co_firstlineno)


def _is_constexpr_annotation(a: Any) -> bool:
    if isinstance(a, str):
        return a.rsplit(".", 1)[-1] == "constexpr"
    return a is language.constexpr or isinstance(a, language.constexpr)


class Kernel:
    """A ``@dl.kernel`` function.

    Attributes:
        fn: the Python function. name: its name. source: its dedented source text
        (decorators included; part of cache keys), read on first need, and parsed
        (``fn_def``) only to build IR, so a warm start parses only the kernels it
        compiles or interprets (counted as ``dsl_kernels_parsed``). arg_names: every parameter in
        order. constexpr_names: the parameters annotated ``dl.constexpr``.
        runtime_arg_names: the others, in order (what `Specialization.args` describe).
        filename / first_lineno: where the source lives (for error messages).
        ftz (read-only): libdevice calls only (exp2, rsqrt, erf, ...; not ``+ - * /``)
        may flush subnormal inputs and results to zero, as libdevice does under nvcc's
        ``-ftz=true`` and in Triton by default: ``exp2`` becomes one ``ex2.approx.ftz``
        instead of three instructions that keep subnormal results. Off by default (torch
        keeps subnormals). Part of the cache key; the interpreter ignores it.

    Raises (at decoration):
        TypeError: ``fn`` is not a function, or ``ftz`` is not a bool.
        ValueError: the source cannot be read (a kernel built with ``exec`` must put its
            text in ``linecache`` first), ``fn`` is a lambda, or the signature uses
            ``*args``/``**kwargs``. (Source that does not define ``fn``'s name is found
            on first need instead, as a ValueError.)
    """

    __dl_kernel__ = True

    def __init__(self, fn: Callable, ftz: bool = False):
        if not inspect.isfunction(fn):
            raise TypeError(f"@dl.kernel expects a function, got {fn!r}")
        if not isinstance(ftz, bool):
            raise TypeError(f"@dl.kernel(ftz=...) takes a bool, got {ftz!r}")
        self.fn = fn
        self._ftz = ftz
        self.name = fn.__name__
        if not self.name.isidentifier():  # a lambda: no ``def`` to compile
            raise ValueError(f"@dl.kernel {self.name}: its source does not define a function of that name")
        self.filename = fn.__code__.co_filename
        self.first_lineno = fn.__code__.co_firstlineno  # the first decorator's line
        # the file's lines, kept for the lazy parse; reading them is a dict lookup for a
        # generated module (its text is in linecache) and tells at once if the source is missing
        self._file_lines = linecache.getlines(self.filename, fn.__globals__)
        if not 0 < self.first_lineno <= len(self._file_lines):
            raise ValueError(
                f"@dl.kernel {self.name}: cannot read its source (no line {self.first_lineno} in "
                f"{self.filename}); a kernel made with exec() needs its text registered in linecache "
                "under its filename first"
            )

        signature = inspect.signature(fn)
        for p in signature.parameters.values():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise ValueError(f"@dl.kernel {self.name}: parameter {p} is not supported (no *args, **kwargs, /)")
        try:
            annotations = inspect.get_annotations(fn, eval_str=True)
        except Exception:
            annotations = inspect.get_annotations(fn)
        self.arg_names = list(signature.parameters)
        self.constexpr_names = [n for n in self.arg_names if _is_constexpr_annotation(annotations.get(n))]
        self.runtime_arg_names = [n for n in self.arg_names if n not in self.constexpr_names]
        self.defaults = {
            n: p.default for n, p in signature.parameters.items()
            if p.default is not p.empty and n in self.constexpr_names
        }
        self._constexpr_set = frozenset(self.constexpr_names)
        self._constexpr_order = tuple(self.constexpr_names)
        self._ir_cache: dict[str, ir.Function] = {}
        self._specs: dict[tuple, Specialization] = {}  # interned: each launch reuses one object

    @functools.cached_property
    def source(self) -> str:
        """The dedented source text (decorators included), read on first need: a graph
        loaded from the graph cache may never launch some of its kernels, and a launch
        whose binary is in the disk cache needs the text but not the parse. The block
        ends where the compiled code's last line does (then any deeper-indented or blank
        lines after it), which costs a few microseconds where ``inspect.getblock``'s
        tokenizer costs half a millisecond a kernel; Python 3.10, whose code objects
        lack end lines, tokenizes."""
        lines = self._file_lines[self.first_lineno - 1:]
        last = _last_line(self.fn.__code__)
        if last is None:
            return textwrap.dedent("".join(inspect.getblock(lines)))
        end = last - self.first_lineno + 1
        indent = len(lines[0]) - len(lines[0].lstrip())  # the first decorator's, the def's
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        return textwrap.dedent("".join(lines[:end]).rstrip() + "\n")

    @functools.cached_property
    def source_lines(self) -> list[str]:
        return self.source.splitlines()

    @functools.cached_property
    def fn_def(self) -> ast.FunctionDef:
        """The kernel's ``def`` node, parsed on first need (building IR, a cache key).

        Raises:
            ValueError: the source at the function's first line does not define a
                function of its name (e.g. a lambda).
        """
        counters["dsl_kernels_parsed"] += 1
        tree = ast.parse(self.source)
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == self.name]
        if not defs:
            raise ValueError(f"@dl.kernel {self.name}: its source does not define a function of that name")
        return defs[0]

    @functools.cached_property
    def _names_read(self) -> list[str]:
        """The global and closure names the kernel's code reads, from its code objects
        rather than its parse (so a disk-cache hit needs no parse). ``co_names`` also holds
        attribute names: one that matches a global only adds a line to the cache key."""
        names = set(self.fn.__code__.co_freevars)
        codes = [self.fn.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes.extend(c for c in code.co_consts if inspect.iscode(c))
        return sorted(names)

    def __repr__(self) -> str:
        return f"<dl.kernel {self.name}({', '.join(self.arg_names)})>"

    @property
    def ftz(self) -> bool:
        return self._ftz

    def key_source(self) -> str:
        """What of the kernel's text decides its binary, for cache keys: the source plus
        the current values of the plain constants (numbers, strings, tuples of them) it
        reads from its module or closure, which the frontend bakes into the code, and the
        source of the plain functions it reads (scan combine functions, compiled inline)."""
        closure = dict(zip(self.fn.__code__.co_freevars, self.fn.__closure__ or ()))
        constants = []
        for name in self._names_read:
            if name in closure:
                try:
                    value = closure[name].cell_contents
                except ValueError:  # an empty cell
                    continue
            elif name in self.fn.__globals__:
                value = self.fn.__globals__[name]
            else:
                continue
            if _is_plain_constant(value):
                constants.append(f"{name} = {value!r}")
            elif _is_helper_function(value):  # a scan's combine function is compiled inline
                constants.append(f"{name}: {_source_or_name(value)}")
        return self.source + "".join(f"\n# {c}" for c in constants)

    def __call__(self, *args, **kwargs):
        raise TypeError(f"kernel {self.name} is launched as {self.name}[grid](...), not called directly")

    def __getitem__(self, grid: Union[Sequence[int], Callable[[dict], Sequence[int]]]) -> Callable:
        """``kernel[grid]``: a launcher ``(*args, num_warps=None, num_stages=1, maxnreg=None, **constexprs)``; ``grid``
        is a tuple of 1-3 program counts or a callable ``meta -> tuple``."""
        return _Launcher(self, grid)

    # ------------------------------------------------------------------ launching

    def run(self, grid, args: Sequence[Any], constexprs: dict[str, Any], num_warps: Optional[int] = None,
            num_stages: int = 1, maxnreg: Optional[int] = None) -> None:
        """Validate, resolve the grid (``grid(meta)`` with ``meta = dict(constexprs,
        num_warps=..., num_stages=...)`` when callable) and run the kernel on the tensors'
        device. ``num_stages`` (Triton's name) pipelines the loads of ``for`` loops
        ``num_stages - 1`` iterations ahead on the GPU (`nvptx_pipeline`); ``maxnreg``
        (Triton's name; None: no cap) caps the registers a thread may use on the GPU, in
        [16, 255] (`nvptx`).
        Neither changes results.

        Raises:
            TypeError: wrong argument count, missing or unknown constexprs, an argument
                of an unsupported type or dtype, a malformed grid.
            ValueError: tensors on different devices or on an unsupported device, an int
                outside int64, a negative grid entry, a bad ``num_warps``, ``num_stages`` or
                ``maxnreg``.
            IndexError: (interpreter) an unmasked access outside a tensor's storage.
        """
        args = tuple(args)
        if len(args) != len(self.runtime_arg_names):
            raise TypeError(
                f"kernel {self.name} takes {len(self.runtime_arg_names)} runtime argument(s) "
                f"({', '.join(self.runtime_arg_names)}), got {len(args)}"
            )
        constexprs = self._complete_constexprs(constexprs)
        if num_warps is None:
            num_warps = config.num_warps
        if num_warps not in _NUM_WARPS or isinstance(num_warps, bool):
            raise ValueError(f"kernel {self.name}: num_warps must be one of {_NUM_WARPS}, got {num_warps!r}")
        check_num_stages(self.name, num_stages)
        check_maxnreg(self.name, maxnreg)
        device = self._device_of(args)
        grid = self._resolve_grid(grid, constexprs, num_warps, num_stages)
        if 0 in grid:
            return
        if config.interpret or device is None or device.type == "cpu":
            interpreter.run(self, grid, args, constexprs)
        elif device.type == "cuda":
            launcher = sys.modules.get(_LAUNCHER_MODULE) or importlib.import_module(_LAUNCHER_MODULE)
            launcher.launch(self, grid, args, constexprs, num_warps, num_stages, maxnreg)
        else:
            raise ValueError(f"kernel {self.name}: tensors on {device} are not supported (CPU or CUDA only)")

    def _device_of(self, args: tuple) -> Optional[torch.device]:
        device = None
        for name, a in zip(self.runtime_arg_names, args):
            if isinstance(a, torch.Tensor):
                if a.dtype not in _TORCH_TO_DSL:
                    raise self._bad_tensor_dtype(name, a)
                if device is None:
                    device = a.device
                elif a.device != device:
                    raise ValueError(
                        f"kernel {self.name}: argument {name} is on {a.device} but an earlier tensor "
                        f"argument is on {device}"
                    )
            elif not isinstance(a, (bool, int, float)):
                raise self._bad_arg_type(name, a)
        return device

    def _resolve_grid(self, grid, constexprs: dict, num_warps: int, num_stages: int) -> tuple[int, ...]:
        if callable(grid):
            grid = grid(dict(constexprs, num_warps=num_warps, num_stages=num_stages))
        if isinstance(grid, int):
            grid = (grid,)
        try:
            grid = tuple(map(operator.index, grid))
        except TypeError:
            raise TypeError(f"kernel {self.name}: the grid must be a tuple of 1 to 3 ints, got {grid!r}") from None
        if not 1 <= len(grid) <= 3 or min(grid) < 0:
            raise ValueError(f"kernel {self.name}: the grid must be 1 to 3 non-negative ints, got {grid}")
        return grid

    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Bind a launch's arguments: positional ones fill the runtime arguments in
        order; keywords name runtime arguments or constexprs. Returns the runtime
        arguments in order and the constexprs."""
        if len(args) > len(self.runtime_arg_names):
            raise TypeError(f"kernel {self.name} takes {len(self.runtime_arg_names)} runtime argument(s) "
                            f"({', '.join(self.runtime_arg_names)}), got {len(args)} positional; "
                            "pass constexprs by keyword")
        bound = dict(zip(self.runtime_arg_names, args))
        constexprs = {}
        for k, v in kwargs.items():
            if k in bound:
                raise TypeError(f"kernel {self.name}: got multiple values for argument {k}")
            if k in self._constexpr_set:
                constexprs[k] = v
            elif k in self.runtime_arg_names:
                bound[k] = v
            else:
                raise TypeError(f"kernel {self.name}: unknown argument {k}; its arguments are {self.arg_names}")
        missing = [n for n in self.runtime_arg_names if n not in bound]
        if missing:
            raise TypeError(f"kernel {self.name}: missing runtime argument(s) {missing}")
        return tuple(bound[n] for n in self.runtime_arg_names), constexprs

    def _complete_constexprs(self, constexprs: dict[str, Any]) -> dict[str, Any]:
        if tuple(constexprs) == self._constexpr_order and _PLAIN_CONSTEXPR_TYPES.issuperset(
            map(type, constexprs.values())
        ):
            return constexprs  # the common case: all given, in declaration order, of plain types
        unknown = [k for k in constexprs if k not in self._constexpr_set]
        if unknown:
            runtime = [k for k in unknown if k in self.runtime_arg_names]
            extra = f" ({runtime} are runtime arguments)" if runtime else ""
            raise TypeError(f"kernel {self.name}: unknown constexpr(s) {unknown}{extra}; "
                            f"its constexprs are {self.constexpr_names}")
        out = {}
        for n in self.constexpr_names:
            if n in constexprs:
                v = constexprs[n]
            elif n in self.defaults:
                v = self.defaults[n]
            else:
                missing = [m for m in self.constexpr_names if m not in constexprs and m not in self.defaults]
                raise TypeError(f"kernel {self.name}: missing constexpr(s) {missing}")
            if not isinstance(v, _CONSTEXPR_TYPES):
                raise TypeError(f"kernel {self.name}: constexpr {n} = {v!r} has unsupported type "
                                f"{type(v).__name__} (bool, int, float, str, None or a dl dtype)")
            out[n] = v
        return out

    # ------------------------------------------------------------------ specialisation

    def specialize(self, args: Sequence[Any], constexprs: dict[str, Any]) -> Specialization:
        """The `Specialization` of one launch.

        Tensors become pointers to their dtype (``divisible_by_16``: data_ptr 16-byte
        aligned); bool -> int32; int -> int32 if it fits, else int64
        (``divisible_by_16``: value % 16 == 0); float -> float32. Launches that
        specialise alike get the same (interned) object, whose hash and key are cached:
        the lookup key is a flat list of what decides the specialisation (per tensor its
        dtype and alignment, per int its int32 fit and divisibility, per bool or float
        its type) plus the constexprs' items and types (``1``, ``1.0`` and ``True``
        hash alike).

        Raises:
            TypeError: wrong argument count, an unsupported argument type or tensor
                dtype, missing/unknown constexprs.
            ValueError: an int outside int64.
        """
        if len(args) != len(self.runtime_arg_names):
            raise TypeError(f"kernel {self.name} takes {len(self.runtime_arg_names)} runtime argument(s), "
                            f"got {len(args)}")
        summary = [tuple(constexprs.items()), tuple(map(type, constexprs.values()))]
        for a in args:
            cls = type(a)
            if cls is int and _I64_MIN <= a <= _I64_MAX:
                summary.append(_I32_MIN <= a <= _I32_MAX)
                summary.append(a & 15 == 0)
            elif isinstance(a, torch.Tensor):
                summary.append(a.dtype)
                summary.append(a.data_ptr() & 15 == 0)
            elif cls is bool or cls is float:
                summary.append(cls)
            else:  # an int or float subclass, or an error: the full rules, uncached
                return self._specialize(args, constexprs)
        summary = tuple(summary)
        try:
            spec = self._specs.get(summary)
        except TypeError:  # an unhashable constexpr: let validation name it
            return self._specialize(args, constexprs)
        if spec is None:
            spec = self._specs[summary] = self._specialize(args, constexprs)
        return spec

    def _specialize(self, args: Sequence[Any], constexprs: dict[str, Any]) -> Specialization:
        specs = []
        for name, a in zip(self.runtime_arg_names, args):
            if isinstance(a, torch.Tensor):
                t = _POINTER_TYPES.get(a.dtype)
                if t is None:
                    raise self._bad_tensor_dtype(name, a)
                specs.append(ir.ArgSpec(name, t, a.data_ptr() % 16 == 0))
            elif isinstance(a, bool):
                specs.append(ir.ArgSpec(name, _I32))
            elif isinstance(a, int):
                if -(1 << 31) <= a < (1 << 31):
                    specs.append(ir.ArgSpec(name, _I32, a % 16 == 0))
                elif -(1 << 63) <= a < (1 << 63):
                    specs.append(ir.ArgSpec(name, _I64, a % 16 == 0))
                else:
                    raise ValueError(f"kernel {self.name}: argument {name} = {a} does not fit in int64")
            elif isinstance(a, float):
                specs.append(ir.ArgSpec(name, _F32))
            else:
                raise self._bad_arg_type(name, a)
        return Specialization(tuple(specs), tuple(self._complete_constexprs(constexprs).items()))

    def specialize_signature(self, signature: dict[str, str], constexprs: dict[str, Any],
                             divisible_by_16: Iterable[Union[str, int]] = ()) -> Specialization:
        """A `Specialization` from Triton-style type strings, for ahead-of-time builds:
        ``signature`` maps every runtime argument name to ``'*fp32'``, ``'i32'`` ...;
        ``divisible_by_16`` names (or indexes) the arguments to mark aligned.

        Raises:
            TypeError: arguments missing from or unknown to ``signature``; bad constexprs.
            ValueError: an unknown type string.
        """
        if set(signature) != set(self.runtime_arg_names):
            raise TypeError(
                f"kernel {self.name}: the signature must give exactly the runtime arguments "
                f"{self.runtime_arg_names}, got {list(signature)}"
            )
        aligned = {self.runtime_arg_names[d] if isinstance(d, int) else d for d in divisible_by_16}
        unknown = aligned - set(self.runtime_arg_names)
        if unknown:
            raise TypeError(f"kernel {self.name}: divisible_by_16 names unknown argument(s) {sorted(unknown)}")
        specs = tuple(
            ir.ArgSpec(n, parse_type_string(signature[n]), n in aligned) for n in self.runtime_arg_names
        )
        return Specialization(specs, tuple(self._complete_constexprs(constexprs).items()))

    def build_ir(self, spec: Specialization) -> ir.Function:
        """The block IR for ``spec`` (cached per specialisation key).

        Raises:
            CompilationError: the kernel does not compile.
            VerificationError: the frontend built IR that breaks the IR contract (a bug).
        """
        key = spec.key()
        fn = self._ir_cache.get(key)
        if fn is None:
            fn = build_function(self, spec)
            verify(fn)
            self._ir_cache[key] = fn
        return fn

    def _bad_tensor_dtype(self, name: str, a: torch.Tensor) -> TypeError:
        return TypeError(f"kernel {self.name}: argument {name} is a {a.dtype} tensor; supported dtypes: "
                         f"{', '.join(str(t) for t in _TORCH_TO_DSL)}")

    def _bad_arg_type(self, name: str, a: Any) -> TypeError:
        return TypeError(f"kernel {self.name}: argument {name} has unsupported type {type(a).__name__}; "
                         "expected a torch.Tensor, int, float or bool")


class _Launcher:
    """``kernel[grid]``: calling it binds the arguments and calls `Kernel.run`."""

    __slots__ = ("kernel", "grid")

    def __init__(self, kernel: Kernel, grid):
        self.kernel = kernel
        self.grid = grid

    def __call__(self, *args, num_warps: Optional[int] = None, num_stages: int = 1, maxnreg: Optional[int] = None,
                 **kwargs) -> None:
        k = self.kernel
        if len(args) == len(k.runtime_arg_names) and k._constexpr_set.issuperset(kwargs):
            return k.run(self.grid, args, kwargs, num_warps, num_stages, maxnreg)
        runtime, constexprs = k._bind(args, kwargs)
        return k.run(self.grid, runtime, constexprs, num_warps, num_stages, maxnreg)


def _is_plain_constant(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_is_plain_constant(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _is_helper_function(value: Any) -> bool:
    """A plain Python function (not a DSL builtin) a kernel may compile inline."""
    return inspect.isfunction(value) and not getattr(value, "__dl_builtin__", None)


def _source_or_name(fn: Callable) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return fn.__qualname__


def kernel(fn: Optional[Callable] = None, *, ftz: bool = False) -> Union[Kernel, Callable[[Callable], Kernel]]:
    """Decorator making ``fn`` a DSL kernel (see `Kernel`): ``@dl.kernel``, or
    ``@dl.kernel(ftz=True)`` for flush-to-zero libdevice math.

    Raises:
        TypeError: ``fn`` is not a function, or ``ftz`` is not a bool.
    """
    if fn is None:
        return lambda f: Kernel(f, ftz=ftz)
    return Kernel(fn, ftz=ftz)
