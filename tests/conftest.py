"""Shared test setup: `gpu`-marked tests are skipped on machines without CUDA, torch's
MKL math is resolved single-threaded first, and each test gets an empty cache
directory, so no test loads a graph or binary that another test compiled (a test that
patches a lowering must see it run)."""

import pytest
import torch

from inductor_lite.config import config as inductor_lite_config
from inductor_lite.dsl.interpreter import resolve_math_dispatch

# Eager references are computed with the same MKL math as the interpreter; resolve its
# dispatch before any test's first multi-threaded call (pytorch/pytorch#188792).
resolve_math_dispatch()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_cache_dir(tmp_path_factory):
    with inductor_lite_config.patch(cache_dir=str(tmp_path_factory.mktemp("inductor_lite_cache"))):
        yield
