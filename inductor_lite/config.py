"""Every knob of inductor_lite, each read from an ``INDUCTOR_LITE_*`` environment variable.

The table below is the single source of truth; `README.md` repeats it for users.
Values are read once at import; tests and ``torch.compile(options=...)`` change them
through `patch`, which restores the previous values on exit.

Every value is checked where it enters: `patch` and `check_option` raise at once; a bad
environment variable is only recorded at import (importing torch's backend registry
imports this package, so raising there would break programs that never use the
backend) and `Config.validate`, which the backend calls before compiling, raises it.
All these errors are `ConfigError`s naming the variable or option; the backend's
fallback to eager never swallows one.

==================  ===============================  =======================================
attribute           environment variable             meaning
==================  ===============================  =======================================
logs                INDUCTOR_LITE_LOGS               comma-separated artifacts to log:
                                                     output_code, fusion, schedule, cache,
                                                     ptx, fallbacks, autotune, cudagraphs,
                                                     passes, or all
debug_dir           INDUCTOR_LITE_DEBUG_DIR          dump each compiled graph's FX graph,
                                                     IR, DSL, LLVM IR and PTX under this path
cache_dir           INDUCTOR_LITE_CACHE_DIR          on-disk caches: kernel binaries,
                                                     autotuning decisions, compiled graphs
disable_cache       INDUCTOR_LITE_DISABLE_CACHE      1: never read or write the disk cache
interpret           INDUCTOR_LITE_INTERPRET          1: run every kernel in the interpreter,
                                                     CUDA tensors included
num_warps           INDUCTOR_LITE_NUM_WARPS          default warps per program (4); a power
                                                     of two from 1 to 32
xblock              INDUCTOR_LITE_XBLOCK             default block size of 1-D kernels
                                                     (1024); a power of two from 16 to 4096
fallback_on_error   INDUCTOR_LITE_FALLBACK_ON_ERROR  1 (default): a graph that fails to
                                                     compile runs eagerly, and the reason is
                                                     logged; 0: raise
autotune            INDUCTOR_LITE_AUTOTUNE           1 (default): time the candidate block
                                                     sizes of tunable kernels on first use
                                                     (CUDA only); 0: use the default config
compile_workers     INDUCTOR_LITE_COMPILE_WORKERS    processes that build kernel binaries in
                                                     parallel (default: the CPUs this
                                                     process may use, at most 16); 0 or 1:
                                                     build in this process
emulate_precision_  INDUCTOR_LITE_EMULATE_PRECISION_ 1: round every fp16/bf16 intermediate
casts               CASTS                            inside a kernel as eager does; 0
                                                     (default): keep it in fp32, rounding
                                                     only what is stored (as TorchInductor)
mix_order_          INDUCTOR_LITE_MIX_ORDER_         1 (default): a column sum over the rows
reduction           REDUCTION                        a row reduction reads (LayerNorm's
                                                     weight gradient) is computed in that
                                                     row kernel's pass; 0: a kernel of its own
layout_             INDUCTOR_LITE_LAYOUT_            1 (default): conv nets on CUDA run
optimization        OPTIMIZATION                     channels-last in inference where
                                                     Inductor's heuristic says it pays
                                                     (fx_passes.layout_optimization); 0: as
                                                     traced
reorder_for_peak_   INDUCTOR_LITE_REORDER_FOR_PEAK_  1 (default): run a graph's kernels in
memory              MEMORY                           another dependency order when that
                                                     lowers its estimated peak memory
                                                     (scheduler.memory_order); 0: graph order
==================  ===============================  =======================================
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Callable, Iterator, Mapping, Optional

LOG_ARTIFACTS = ("output_code", "fusion", "schedule", "cache", "ptx", "fallbacks", "autotune",
                 "cudagraphs", "passes")
"""The artifacts ``INDUCTOR_LITE_LOGS`` may name (besides ``all``); see `logs`."""

XBLOCK_RANGE = (16, 4096)
"""Powers of two allowed for ``xblock``; 4096 is Triton's largest X block too (``TRITON_MAX_BLOCK``)."""

NUM_WARPS_RANGE = (1, 32)
"""Powers of two allowed for ``num_warps``: 32 warps is CUDA's 1024 threads a block."""


class ConfigError(ValueError):
    """A knob has a bad value; the message names its environment variable or option."""


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "inductor_lite")


def _parse_bool(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected 0 or 1")


def _parse_int(raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError("expected an integer") from None


def _power_of_two_in(lo: int, hi: int) -> Callable[[int], Optional[str]]:
    def check(value: int) -> Optional[str]:
        if lo <= value <= hi and value & (value - 1) == 0:
            return None
        return f"must be a power of two between {lo} and {hi}"
    return check


def _non_negative(value: int) -> Optional[str]:
    return None if value >= 0 else "must be 0 or more"


def _default_compile_workers() -> int:
    """The CPUs this process may run on, at most 16 (TorchInductor's compile pool is
    sized from the same affinity count)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return min(16, cpus)


def _check_logs(value: str) -> Optional[str]:
    names = {n.strip() for n in value.split(",") if n.strip()}
    unknown = sorted(names - set(LOG_ARTIFACTS) - {"all"})
    if unknown:
        return f"unknown artifact(s) {unknown}; known: {', '.join(LOG_ARTIFACTS)}, all"
    return None


@dataclasses.dataclass(frozen=True)
class _Knob:
    env: str
    type: type
    parse: Callable[[str], Any]
    check: Callable[[Any], Optional[str]] = lambda value: None


_KNOBS = {
    "logs": _Knob("INDUCTOR_LITE_LOGS", str, str, _check_logs),
    "debug_dir": _Knob("INDUCTOR_LITE_DEBUG_DIR", str, str),
    "cache_dir": _Knob("INDUCTOR_LITE_CACHE_DIR", str, str),
    "disable_cache": _Knob("INDUCTOR_LITE_DISABLE_CACHE", bool, _parse_bool),
    "interpret": _Knob("INDUCTOR_LITE_INTERPRET", bool, _parse_bool),
    "num_warps": _Knob("INDUCTOR_LITE_NUM_WARPS", int, _parse_int, _power_of_two_in(*NUM_WARPS_RANGE)),
    "xblock": _Knob("INDUCTOR_LITE_XBLOCK", int, _parse_int, _power_of_two_in(*XBLOCK_RANGE)),
    "fallback_on_error": _Knob("INDUCTOR_LITE_FALLBACK_ON_ERROR", bool, _parse_bool),
    "autotune": _Knob("INDUCTOR_LITE_AUTOTUNE", bool, _parse_bool),
    "compile_workers": _Knob("INDUCTOR_LITE_COMPILE_WORKERS", int, _parse_int, _non_negative),
    "emulate_precision_casts": _Knob("INDUCTOR_LITE_EMULATE_PRECISION_CASTS", bool, _parse_bool),
    "mix_order_reduction": _Knob("INDUCTOR_LITE_MIX_ORDER_REDUCTION", bool, _parse_bool),
    "layout_optimization": _Knob("INDUCTOR_LITE_LAYOUT_OPTIMIZATION", bool, _parse_bool),
    "reorder_for_peak_memory": _Knob("INDUCTOR_LITE_REORDER_FOR_PEAK_MEMORY", bool, _parse_bool),
}
"""Each knob's variable, type, parser and range check; the keys are `Config`'s fields."""


def _problem(name: str, value: Any) -> Optional[str]:
    knob = _KNOBS[name]
    if not isinstance(value, knob.type) or (knob.type is int and isinstance(value, bool)):
        return f"must be a {knob.type.__name__}, got {type(value).__name__}"
    return knob.check(value)


def check_option(name: str, value: Any, source: str = "inductor_lite option") -> None:
    """Check ``value`` for knob ``name``, as given through ``options=`` or `Config.patch`.

    Raises:
        KeyError: an unknown knob (the message lists the known ones).
        ConfigError: a value of the wrong type or out of range, e.g.
            ``inductor_lite option xblock=3: must be a power of two between 16 and 4096``.
    """
    if name not in _KNOBS:
        raise KeyError(f"unknown inductor_lite option {name!r}; known: {sorted(_KNOBS)}")
    problem = _problem(name, value)
    if problem:
        raise ConfigError(f"{source} {name}={value!r}: {problem}")


@dataclasses.dataclass
class Config:
    """The knobs; see the module docstring for each one's environment variable.

    ``Config()`` holds the defaults; `from_env` reads the environment.
    """

    logs: str = ""
    debug_dir: str = ""
    cache_dir: str = dataclasses.field(default_factory=_default_cache_dir)
    disable_cache: bool = False
    interpret: bool = False
    num_warps: int = 4
    xblock: int = 1024
    fallback_on_error: bool = True
    autotune: bool = True
    compile_workers: int = dataclasses.field(default_factory=_default_compile_workers)
    emulate_precision_casts: bool = False
    mix_order_reduction: bool = True
    layout_optimization: bool = True
    reorder_for_peak_memory: bool = True

    def __post_init__(self):
        # variable=value: problem, per bad environment variable (not a knob: no dataclass field)
        self._env_errors: list[str] = []

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Config":
        """The knobs set by their ``INDUCTOR_LITE_*`` variables (unset or empty: default).

        Never raises: a variable that does not parse or is out of range keeps the
        default and is recorded for `validate` to raise.
        """
        config = cls()
        for name, knob in _KNOBS.items():
            raw = environ.get(knob.env, "")
            if raw == "":
                continue
            try:
                value = knob.parse(raw)
                problem = knob.check(value)
            except ValueError as e:
                problem = str(e)
            if problem:
                config._env_errors.append(f"{knob.env}={raw}: {problem}")
            else:
                setattr(config, name, value)
        return config

    def validate(self) -> None:
        """Check every knob: the environment variables read by `from_env`, and values
        assigned to attributes directly. The backend calls this before each compile.

        Raises:
            ConfigError: every problem found, each naming its variable, e.g.
                ``INDUCTOR_LITE_XBLOCK=3: must be a power of two between 16 and 4096``.
        """
        problems = list(self._env_errors)
        for name in _KNOBS:
            value = getattr(self, name)
            problem = _problem(name, value)
            if problem:
                problems.append(f"inductor_lite config {name}={value!r}: {problem}")
        if problems:
            raise ConfigError("; ".join(problems))

    @contextlib.contextmanager
    def patch(self, **changes: Any) -> Iterator[None]:
        """Temporarily set knobs by attribute name.

        Raises:
            KeyError: an unknown knob name.
            ConfigError: a bad value (see `check_option`).
        """
        for name, value in changes.items():
            check_option(name, value, source="inductor_lite config")
        saved = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield
        finally:
            for k, v in saved.items():
                setattr(self, k, v)

    def option_names(self) -> list[str]:
        return list(_KNOBS)


config = Config.from_env()
