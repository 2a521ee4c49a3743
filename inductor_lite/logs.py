"""Artifact logging in the style of ``TORCH_LOGS``.

``INDUCTOR_LITE_LOGS=output_code,fusion`` turns on the named artifacts; each logs
through the Python logger ``inductor_lite.<artifact>`` at INFO level to stderr.
Nothing is printed unless asked for.

Artifacts: ``output_code`` (wrapper + DSL kernels of each graph), ``fusion`` (fusion
decisions), ``schedule`` (the kernel order), ``cache`` (disk cache hits and misses),
``ptx`` (PTX of each compiled kernel), ``fallbacks`` (every aten fallback and every
graph that ran eagerly, with the reason), ``autotune`` (each candidate config's time
and the choice), ``cudagraphs`` (CUDA-graph recordings, and every graph or call that
runs with plain launches instead, with the reason), ``passes`` (each graph pass that
rewrote a graph, and how many patterns).

Logging never stops a compile: an exception from a logger (a user's filter or handler)
is warned about once and the compile goes on.
"""

from __future__ import annotations

import logging
import sys
import warnings

from .config import LOG_ARTIFACTS, check_option, config

ARTIFACTS = LOG_ARTIFACTS

_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("[inductor_lite.%(artifact)s] %(message)s"))
_warned_failure = False


def enabled_artifacts() -> set[str]:
    """The artifacts named in ``config.logs``.

    Raises:
        ConfigError: a name that is not one of `ARTIFACTS` or ``all``.
    """
    check_option("logs", config.logs, source="INDUCTOR_LITE_LOGS / inductor_lite config")
    names = {n.strip() for n in config.logs.split(",") if n.strip()}
    return set(ARTIFACTS) if "all" in names else names


def artifact_enabled(name: str) -> bool:
    return name in enabled_artifacts()


def log_artifact(name: str, text: str) -> None:
    """Log ``text`` under artifact ``name`` if that artifact is enabled.

    Raises:
        ValueError: ``name`` is not one of `ARTIFACTS` (a bug in the caller).
        ConfigError: ``config.logs`` names an unknown artifact.
    """
    global _warned_failure
    if name not in ARTIFACTS:
        raise ValueError(f"unknown log artifact {name!r}")
    if not artifact_enabled(name):
        return
    logger = logging.getLogger(f"inductor_lite.{name}")
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        logger.info(text, extra={"artifact": name})
    except Exception as e:
        if not _warned_failure:
            _warned_failure = True
            warnings.warn(f"inductor_lite: logging artifact {name!r} failed ({type(e).__name__}: {e}); "
                          "compiling goes on, further logging failures are not reported", RuntimeWarning)
