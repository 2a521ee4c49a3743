"""Artifact logging in the style of ``TORCH_LOGS``.

``INDUCTOR_LITE_LOGS=output_code,fusion`` turns on the named artifacts; each logs
through the Python logger ``inductor_lite.<artifact>`` at INFO level to stderr.
Nothing is printed unless asked for.

Artifacts: ``output_code`` (wrapper + DSL kernels of each graph), ``fusion`` (fusion
decisions), ``schedule`` (the kernel order), ``cache`` (disk cache hits and misses),
``ptx`` (PTX of each compiled kernel), ``fallbacks`` (every aten fallback and every
graph that ran eagerly, with the reason), ``autotune`` (each candidate config's time
and the choice).
"""

from __future__ import annotations

import logging
import sys

from .config import config

ARTIFACTS = ("output_code", "fusion", "schedule", "cache", "ptx", "fallbacks", "autotune")

_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("[inductor_lite.%(artifact)s] %(message)s"))


def enabled_artifacts() -> set[str]:
    """The artifacts named in ``config.logs``.

    Raises:
        ValueError: a name that is not one of `ARTIFACTS`.
    """
    names = {n.strip() for n in config.logs.split(",") if n.strip()}
    unknown = names - set(ARTIFACTS) - {"all"}
    if unknown:
        raise ValueError(f"INDUCTOR_LITE_LOGS names unknown artifact(s) {sorted(unknown)}; known: {ARTIFACTS}")
    return set(ARTIFACTS) if "all" in names else names


def artifact_enabled(name: str) -> bool:
    return name in enabled_artifacts()


def log_artifact(name: str, text: str) -> None:
    """Log ``text`` under artifact ``name`` if that artifact is enabled."""
    if name not in ARTIFACTS:
        raise ValueError(f"unknown log artifact {name!r}")
    if not artifact_enabled(name):
        return
    logger = logging.getLogger(f"inductor_lite.{name}")
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    logger.info(text, extra={"artifact": name})
