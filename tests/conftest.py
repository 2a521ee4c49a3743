"""Shared test setup: `gpu`-marked tests are skipped on machines without CUDA, and each
test gets an empty cache directory, so no test loads a graph or binary that another
test compiled (a test that patches a lowering must see it run)."""

import pytest
import torch

from inductor_lite.config import config as inductor_lite_config


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
