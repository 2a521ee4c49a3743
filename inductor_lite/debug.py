"""The ``INDUCTOR_LITE_DEBUG_DIR`` dump: one folder per compiled graph.

``<debug_dir>/graph_<n>_<fw|bw|inference>/`` holds ``fx_graph.txt`` (the aten graph),
``ir_pre_fusion.txt`` and ``ir_post_fusion.txt`` (loop-level IR before and after the
scheduler fused it), ``output_code.py`` (the wrapper module with its DSL kernels) and
``kernels/``, where the runtime writes each kernel's ``.ll`` and ``.ptx``.
"""

from __future__ import annotations

import os


def dump_graph(debug_dir: str, graph_id: int, kind: str, *, fx_graph: str, ir_pre_fusion: str,
               ir_post_fusion: str, output_code: str) -> str:
    """Write one graph's debug files; returns the ``kernels/`` folder path.

    Raises:
        OSError: the folder cannot be created or written.
    """
    folder = os.path.join(debug_dir, f"graph_{graph_id}_{kind}")
    kernels = os.path.join(folder, "kernels")
    os.makedirs(kernels, exist_ok=True)
    files = {
        "fx_graph.txt": fx_graph,
        "ir_pre_fusion.txt": ir_pre_fusion,
        "ir_post_fusion.txt": ir_post_fusion,
        "output_code.py": output_code,
    }
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    return kernels
