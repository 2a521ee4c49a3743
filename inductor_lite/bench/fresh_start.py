"""A warm start in a fresh process: one model's first compiled call from filled disk caches.

`measure` runs this module in a child process after the cold compile has filled the
backend's disk caches (their directories reach the child through the environment), so
nothing the parent compiled or imported lazily is in memory: the time is what a user's
second run of a script pays. The backend's own modules are imported before the clock
starts (``inductor_lite`` by this package, ``torch._inductor.compile_fx`` here), so
both compilers are timed from the same point.

Usage (by `measure.fresh_process_first_call`, not by hand)::

    python -m inductor_lite.bench.fresh_start '{"model": ..., "backend": ..., "settings": {...}}'

Prints one JSON line ``{"first_call_s": seconds, "counters": {...}}``: the wall time
of the first iteration of the compiled module, compilation included, and
``inductor_lite.counters`` afterwards (its cache hits and misses show what was loaded).
"""

from __future__ import annotations

import json
import sys

from ..counters import counters
from .measure import Settings, Workload, compile_and_run
from .models import MODELS


def main(argv: list[str] | None = None) -> None:
    """Run the request in ``argv[0]`` (JSON) and print the first call's seconds.

    Raises:
        KeyError: an unknown model; whatever the model or the backend raises.
    """
    request = json.loads((sys.argv[1:] if argv is None else argv)[0])
    backend = request["backend"]
    if backend == "inductor":
        import torch._inductor.compile_fx  # noqa: F401 - imported before the clock, as inductor_lite is

    work = Workload(MODELS[request["model"]], Settings(**request["settings"]), references=False)
    seconds = compile_and_run(work, backend)[-1]
    print(json.dumps({"first_call_s": seconds, "counters": dict(counters)}))


if __name__ == "__main__":
    main()
