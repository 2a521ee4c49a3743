"""Every knob of inductor_lite, each read from an ``INDUCTOR_LITE_*`` environment variable.

The table below is the single source of truth; `README.md` repeats it for users.
Values are read once at import; tests and ``torch.compile(options=...)`` change them
through `patch`, which restores the previous values on exit.

==================  ===============================  =======================================
attribute           environment variable             meaning
==================  ===============================  =======================================
logs                INDUCTOR_LITE_LOGS               comma-separated artifacts to log:
                                                     output_code, fusion, schedule, cache,
                                                     ptx, fallbacks
debug_dir           INDUCTOR_LITE_DEBUG_DIR          dump each compiled graph's FX graph,
                                                     IR, DSL, LLVM IR and PTX under this path
cache_dir           INDUCTOR_LITE_CACHE_DIR          on-disk kernel binary cache
disable_cache       INDUCTOR_LITE_DISABLE_CACHE      1: never read or write the disk cache
interpret           INDUCTOR_LITE_INTERPRET          1: run every kernel in the interpreter,
                                                     CUDA tensors included
num_warps           INDUCTOR_LITE_NUM_WARPS          default warps per program (4)
xblock              INDUCTOR_LITE_XBLOCK             default block size of 1-D kernels (1024)
fallback_on_error   INDUCTOR_LITE_FALLBACK_ON_ERROR  1 (default): a graph that fails to
                                                     compile runs eagerly, and the reason is
                                                     logged; 0: raise
autotune            INDUCTOR_LITE_AUTOTUNE           1 (default): time the candidate block
                                                     sizes of tunable kernels on first use
                                                     (CUDA only); 0: use the default config
==================  ===============================  =======================================
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Iterator


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "inductor_lite")


def _env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={raw!r}: expected 0 or 1")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected an integer") from None


@dataclasses.dataclass
class Config:
    """The knobs; see the module docstring for each one's environment variable."""

    logs: str = dataclasses.field(default_factory=lambda: os.environ.get("INDUCTOR_LITE_LOGS", ""))
    debug_dir: str = dataclasses.field(default_factory=lambda: os.environ.get("INDUCTOR_LITE_DEBUG_DIR", ""))
    cache_dir: str = dataclasses.field(
        default_factory=lambda: os.environ.get("INDUCTOR_LITE_CACHE_DIR") or _default_cache_dir()
    )
    disable_cache: bool = dataclasses.field(default_factory=lambda: _env_bool("INDUCTOR_LITE_DISABLE_CACHE", False))
    interpret: bool = dataclasses.field(default_factory=lambda: _env_bool("INDUCTOR_LITE_INTERPRET", False))
    num_warps: int = dataclasses.field(default_factory=lambda: _env_int("INDUCTOR_LITE_NUM_WARPS", 4))
    xblock: int = dataclasses.field(default_factory=lambda: _env_int("INDUCTOR_LITE_XBLOCK", 1024))
    fallback_on_error: bool = dataclasses.field(
        default_factory=lambda: _env_bool("INDUCTOR_LITE_FALLBACK_ON_ERROR", True)
    )
    autotune: bool = dataclasses.field(default_factory=lambda: _env_bool("INDUCTOR_LITE_AUTOTUNE", True))

    @contextlib.contextmanager
    def patch(self, **changes: Any) -> Iterator[None]:
        """Temporarily set knobs by attribute name.

        Raises:
            KeyError: an unknown knob name.
        """
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise KeyError(f"unknown inductor_lite config option(s) {unknown}; known: {sorted(names)}")
        saved = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            setattr(self, k, v)
        try:
            yield
        finally:
            for k, v in saved.items():
                setattr(self, k, v)

    def option_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]


config = Config()
