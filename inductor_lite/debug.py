"""The ``INDUCTOR_LITE_DEBUG_DIR`` dump: one folder per compiled graph.

``<debug_dir>/graph_<n>_<fw|bw|inference>/`` holds ``fx_graph.txt`` (the aten graph),
``ir_pre_fusion.txt`` and ``ir_post_fusion.txt`` (loop-level IR before and after the
scheduler fused it), ``memory_plan.txt`` (the wrapper's buffer reuse plan, see
`codegen.memory_planning`), ``output_code.py`` (the wrapper module with its DSL kernels) and
``kernels/``, where the runtime writes each kernel's ``.ll`` and ``.ptx``.

The dump is a debugging aid: a folder that cannot be written (``INDUCTOR_LITE_DEBUG_DIR``
naming a regular file, a full disk) is warned about once and compiling goes on.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

_warned = False


def write_files(folder: str, files: dict[str, str]) -> bool:
    """Write ``{file name: text}`` under ``folder`` (created if missing).

    Returns False, after a `RuntimeWarning` (the first time only), when the folder or a
    file cannot be written; never raises `OSError`.
    """
    global _warned
    try:
        os.makedirs(folder, exist_ok=True)
        for name, text in files.items():
            with open(os.path.join(folder, name), "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")
    except OSError as e:
        if not _warned:
            _warned = True
            warnings.warn(f"inductor_lite: cannot write the debug dump (INDUCTOR_LITE_DEBUG_DIR) under {folder!r}: "
                          f"{e}; compiling goes on without it, further dump failures are not reported",
                          RuntimeWarning)
        return False
    return True


def dump_graph(debug_dir: str, graph_id: int, kind: str, *, fx_graph: str, ir_pre_fusion: str,
               ir_post_fusion: str, memory_plan: str, output_code: str) -> Optional[str]:
    """Write one graph's debug files; returns the ``kernels/`` folder path, or None
    when they cannot be written (see `write_files`)."""
    folder = os.path.join(debug_dir, f"graph_{graph_id}_{kind}")
    kernels = os.path.join(folder, "kernels")
    files = {
        "fx_graph.txt": fx_graph,
        "ir_pre_fusion.txt": ir_pre_fusion,
        "ir_post_fusion.txt": ir_post_fusion,
        "memory_plan.txt": memory_plan,
        "output_code.py": output_code,
    }
    if not (write_files(kernels, {}) and write_files(folder, files)):
        return None
    return kernels
