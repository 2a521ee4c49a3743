"""Model benchmarks of torch.compile backends: ``python -m inductor_lite.bench``.

`models` holds the suite, `measure` measures one model on several backends (accuracy
against fp64, speedup, compile latency, peak memory, kernel counts), `report` writes the
table, CSV/JSON and the chart. Importing this package needs torch alone; the CLI also
needs the ``bench`` extra (rich, matplotlib).
"""

from .measure import Result, Settings, check_accuracy, measure_model
from .models import MODELS, BenchInputs, ModelSpec, resolve_models
from .report import geomean_speedups, write_results

__all__ = [
    "MODELS",
    "BenchInputs",
    "ModelSpec",
    "Result",
    "Settings",
    "check_accuracy",
    "geomean_speedups",
    "measure_model",
    "resolve_models",
    "write_results",
]
