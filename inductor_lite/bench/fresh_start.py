"""A warm start in a fresh process: one model's first compiled call from filled disk caches.

`measure` runs this module in a child process after the cold compile has filled the
backend's disk caches (their directories reach the child through the environment), so
nothing the parent compiled or imported lazily is in memory: the time is what a user's
second run of a script pays, imports aside: both compilers' modules are imported
before the clock starts (``inductor_lite`` by this package, ``torch._inductor.compile_fx``
here), so both are timed from the same point. (AOTAutograd's cache, which both use,
imports most of TorchInductor to hash its config: imported by the clock's first
lookup, those seconds would count against whichever backend had not imported them.)

Usage (by `measure.fresh_process_first_call`, not by hand)::

    python -m inductor_lite.bench.fresh_start '{"model": ..., "backend": ..., "settings": {...},
        "result": path, "matmul_tf32": bool, "cudnn_tf32": bool}'

Writes ``{"first_call_s": seconds, "counters": {...}, "inductor_counters": {...}}`` as
JSON to ``result``: the wall time of the first iteration of the compiled module,
compilation included, then ``inductor_lite.counters`` and TorchInductor's counters
(``torch._dynamo.utils.counters["inductor"]``) afterwards: their cache hits and misses
show what was loaded.
The TF32 flags are set as the parent had them: they are part of inductor's cache keys.
"""

from __future__ import annotations

import importlib
import json
import sys

import torch

from ..counters import counters
from .measure import Settings, Workload, compile_and_run
from .models import MODELS


def main(argv: list[str] | None = None) -> None:
    """Run the request in ``argv[0]`` (JSON) and write the first call's seconds.

    Raises:
        KeyError: an unknown model; whatever the model or the backend raises.
    """
    request = json.loads((sys.argv[1:] if argv is None else argv)[0])
    backend = request["backend"]
    torch.backends.cuda.matmul.allow_tf32 = request["matmul_tf32"]
    torch.backends.cudnn.allow_tf32 = request["cudnn_tf32"]
    importlib.import_module("torch._inductor.compile_fx")  # imported before the clock, as inductor_lite is

    work = Workload(MODELS[request["model"]], Settings(**request["settings"]), references=False)
    seconds = compile_and_run(work, backend)[-1]
    with open(request["result"], "w") as f:
        json.dump({"first_call_s": seconds, "counters": dict(counters),
                   "inductor_counters": dict(torch._dynamo.utils.counters["inductor"])}, f)


if __name__ == "__main__":
    main()
