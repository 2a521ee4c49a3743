"""Shared test setup: `gpu`-marked tests are skipped on machines without CUDA, torch's
MKL math is resolved single-threaded first, and each test gets an empty cache
directory, so no test loads a graph or binary that another test compiled (a test that
patches a lowering must see it run). `kernel_launches` and `assemble_launches` let a
CPU test compile the kernels its run launched to PTX and assemble them."""

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


@pytest.fixture
def kernel_launches(monkeypatch):
    """The DSL kernel launches of the test, recorded as ``(kernel, args, constexprs,
    num_warps)`` as they run (in the interpreter on CPU)."""
    from inductor_lite.dsl.kernel import Kernel

    launches = []
    original = Kernel.run

    def record(self, grid, args, constexprs, num_warps=None, num_stages=1, maxnreg=None):
        launches.append((self, tuple(args), dict(constexprs), num_warps))
        return original(self, grid, args, constexprs, num_warps, num_stages, maxnreg)

    monkeypatch.setattr(Kernel, "run", record)
    return launches


def assemble_launches(launches, ccs=((8, 0), (9, 0))) -> None:
    """Compile each recorded launch's kernel (`kernel_launches`), specialised for its
    arguments, to PTX for each compute capability in ``ccs`` and assemble it (nvJitLink
    or ptxas; the caller skips when `assembler.can_assemble` is false).

    Raises:
        NVPTXCompilationError, or the assembler's error: a kernel that does not compile.
    """
    from inductor_lite.dsl import assembler, compiler

    for kernel, args, constexprs, num_warps in launches:
        ir_fn = kernel.build_ir(kernel.specialize(args, constexprs))
        for cc in ccs:
            assembler.check_ptx_assembles(compiler.compile_ptx(ir_fn, cc=cc, num_warps=num_warps or 4).ptx, cc)
