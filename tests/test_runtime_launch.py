"""CPU tests of the launch paths' per-launch checks: specialisation by pointer alignment,
int divisibility and int width through ``kernel[grid]`` and through the launchers
generated wrappers bind (`tuned_launcher.bind_tuned_launcher`, one
`launcher.bind_launcher` per candidate config), against the fake CUDA driver of
test_runtime_cache and a fake compiler that records each specialisation it builds."""

import dataclasses
import inspect
import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import inductor_lite.dsl as dl
from inductor_lite.codegen import heuristics
from inductor_lite.codegen.wrapper import generate_wrapper, load_module
from inductor_lite.config import config
from inductor_lite.counters import counters
from inductor_lite.dsl.kernel import type_string
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.runtime import build, driver, launcher, tuned_launcher
from inductor_lite.scheduler.scheduler import Scheduler
from test_runtime_cache import TOOLCHAIN, fake_driver  # noqa: F401  (fake_driver is a fixture)

CUDA0 = torch.device("cuda", 0)
_PARAM_TYPES = {"i32": "i32", "i64": "i64", "fp32": "f32", "fp64": "f64"}


class CudaLike(torch.Tensor):
    """A CPU tensor that reports cuda:0: real dtype and data_ptr, so the launchers
    specialise on it as on a CUDA tensor, while the fake driver runs nothing."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def device(self):
        return CUDA0

    def get_device(self):
        return 0


def cuda_like(t):
    return torch.Tensor._make_subclass(CudaLike, t)


@dl.kernel
def axpy_kernel(x_ptr, out_ptr, n, alpha, XBLOCK: dl.constexpr):
    offs = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask, other=0.0) * alpha, mask=mask)


@pytest.fixture
def stub(fake_driver, monkeypatch):  # noqa: F811
    """The fake driver plus a fake compiler: records the ArgSpecs of every build."""
    built = []

    stages = []

    def compile_ptx(fn, *, cc, num_warps, num_stages=1, maxnreg=None):
        built.append(tuple(fn.args))
        stages.append(num_stages)
        param_types = tuple("ptr" if type_string(a.type)[0] == "*" else _PARAM_TYPES[type_string(a.type)]
                            for a in fn.args)
        return types.SimpleNamespace(name=fn.name, llvm_ir="", ptx=f"// {fn.name} {len(built)}", cc=cc,
                                     num_warps=num_warps, shared_bytes=0, param_types=param_types,
                                     cluster_size=fn.cluster_size)

    monkeypatch.setattr(build, "compile_ptx", compile_ptx)
    monkeypatch.setattr(build, "ptx_to_cubin", lambda ptx, cc: b"CUBIN:" + ptx.encode())
    monkeypatch.setattr(launcher, "toolchain_versions", lambda: dict(TOOLCHAIN))
    fake_driver.param_types = ("ptr", "ptr", "i32", "f32")
    return types.SimpleNamespace(driver=fake_driver, built=built, stages=stages)


def tensors():
    """A 16-byte-aligned input (torch's CPU allocator aligns to 64), a view 4 bytes off it, an output."""
    storage = torch.randn(64)
    assert storage.data_ptr() % 16 == 0
    return cuda_like(storage[:32]), cuda_like(storage[1:33]), cuda_like(torch.empty(32))


def by_getitem(x, out, n, alpha):
    axpy_kernel[(1,)](x, out, n, alpha, XBLOCK=32)


def by_bound_launcher():
    bound = launcher.bind_launcher(axpy_kernel, "cuda:0", ("tensor", "tensor", "int", "float"), 4, XBLOCK=32)
    return lambda x, out, n, alpha: bound((1, 1, 1), x, out, n, alpha)


@pytest.mark.parametrize("make_launch", [lambda: by_getitem, by_bound_launcher], ids=["getitem", "bound"])
def test_pointer_alignment_change_picks_another_specialisation(stub, make_launch):
    launch = make_launch()
    aligned, misaligned, out = tensors()
    launch(aligned, out, 32, 0.5)
    launch(misaligned, out, 32, 0.5)
    launch(aligned, out, 32, 2.0)
    assert [[a.divisible_by_16 for a in spec] for spec in stub.built] == [[True, True, True, False],
                                                                           [False, True, True, False]]
    first, second, third = stub.driver.launches
    assert second["function"] != first["function"] and third["function"] == first["function"]
    assert [launch["params"] for launch in stub.driver.launches] == [
        [aligned.data_ptr(), out.data_ptr(), 32, 0.5],
        [misaligned.data_ptr(), out.data_ptr(), 32, 0.5],
        [aligned.data_ptr(), out.data_ptr(), 32, 2.0],
    ]
    assert counters["kernels_compiled"] == 2


def test_bound_launcher_specialises_ints_by_divisibility_and_width(stub):
    launch = by_bound_launcher()
    x, _, out = tensors()
    for n in (32, 33, 2**31 + 16, 2**40 + 32, 48):  # the last two reuse the 3rd and 1st specialisations
        stub.driver.param_types = ("ptr", "ptr", "i64" if n >= 2**31 else "i32", "f32")
        launch(x, out, n, 1.0)
    assert [(spec[2].type.element, spec[2].divisible_by_16) for spec in stub.built] == [
        (dl.int32, True), (dl.int32, False), (dl.int64, True)
    ]
    assert [launch["params"][2] for launch in stub.driver.launches] == [32, 33, 2**31 + 16, 2**40 + 32, 48]


def test_bound_launcher_checks_what_its_key_cannot_see(stub):
    launch = by_bound_launcher()
    x, _, out = tensors()
    with pytest.raises(ValueError, match="does not fit in int64"):  # a new key: full validation
        launch(x, out, 2**64, 1.0)
    stub.driver.param_types = ("ptr", "ptr", "i64", "f32")
    launch(x, out, 2**32, 1.0)
    with pytest.raises(ValueError, match=r"'axpy_kernel': argument 2 = 18446744073709551616 does not fit in i64"):
        launch(x, out, 2**64, 1.0)  # the key of 2**32, but the value does not pack
    launch(x, out, 2**32, 1e300)  # beyond float32: rounded to inf, as ctypes would
    assert stub.driver.launches[-1]["params"][3] == float("inf")
    with pytest.raises(ValueError, match="argument 1 is on cpu, but the launcher is bound to cuda:0"):
        launch(x, torch.empty(32), 2**32 + 1, 1.0)  # a new key: the device is checked
    assert len(stub.driver.launches) == 2 and len(stub.built) == 1


def test_bound_launcher_rejects_a_wrongly_bound_kind_and_bad_setup(stub):
    x, _, out = tensors()
    bound = launcher.bind_launcher(axpy_kernel, 0, ("tensor", "tensor", "int", "float"), 4, XBLOCK=32)
    with pytest.raises(TypeError, match=r"argument 3 was bound as 'float' but int makes it a i32 parameter"):
        bound((1, 1, 1), x, out, 32, 3)
    with pytest.raises(ValueError, match="unknown argument kinds"):
        launcher.bind_launcher(axpy_kernel, 0, ("tensor", "pointer", "int", "float"), 4, XBLOCK=32)
    with pytest.raises(ValueError, match="num_warps"):
        launcher.bind_launcher(axpy_kernel, 0, ("tensor", "tensor", "int", "float"), 64, XBLOCK=32)
    assert stub.driver.launches == []


def test_num_stages_is_part_of_the_key_and_checked(stub):
    x, _, out = tensors()
    for stages in (1, 2, 2, 1):
        axpy_kernel[(1,)](x, out, 32, 1.0, XBLOCK=32, num_stages=stages)
    bound = launcher.bind_launcher(axpy_kernel, 0, ("tensor", "tensor", "int", "float"), 4, num_stages=3, XBLOCK=32)
    bound((1, 1, 1), x, out, 32, 1.0)
    assert stub.stages == [1, 2, 3] and len(stub.driver.launches) == 5
    for bad in (0, 9, 2.0, True):
        with pytest.raises(ValueError, match="num_stages must be an int in"):
            axpy_kernel[(1,)](x, out, 32, 1.0, XBLOCK=32, num_stages=bad)
    with pytest.raises(ValueError, match="num_stages"):
        launcher.bind_launcher(axpy_kernel, 0, ("tensor", "tensor", "int", "float"), 4, num_stages=0, XBLOCK=32)


def test_bound_launcher_empty_grid_memory_cache_and_interpreter(stub):
    launch = launcher.bind_launcher(axpy_kernel, 0, ("tensor", "tensor", "int", "float"), 4, XBLOCK=32)
    x, _, out = tensors()
    launch((0, 1, 1), x, out, 32, 1.0)
    assert stub.driver.launches == [] and counters["kernels_compiled"] == 1  # compiled, not launched
    launcher.clear_memory_cache()
    launch((2, 1, 1), x, out, 32, 1.0)
    assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 1
    assert stub.driver.launches[0]["grid"] == (2, 1, 1)

    cpu_x, cpu_out = torch.randn(40), torch.full((40,), float("nan"))
    with config.patch(interpret=True):
        launch((2, 1, 1), cpu_x, cpu_out, 40, -1.5)
    torch.testing.assert_close(cpu_out, cpu_x * -1.5)
    assert len(stub.driver.launches) == 1


def cuda_wrapper(fn, *shapes):
    """Wrapper code for ``fn`` on fake CUDA tensors (no GPU needed to generate it)."""
    with FakeTensorMode():
        inputs = [torch.empty(shape, device="cuda") for shape in shapes]
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=decomposition_table())(*inputs)
    graph = GraphLowering(gm)
    graph.run()
    return generate_wrapper(graph, Scheduler(graph), "test")


def test_cuda_wrapper_binds_one_tuned_launcher_per_kernel_at_load(stub, monkeypatch):
    code = cuda_wrapper(lambda x, y: (x * y).relu() + 1, (4, 300), (300,))
    (kernel,) = code.kernels
    assert f"{kernel.name}[" not in code.source
    assert f"launch_{kernel.name}(x_1, y_1, buf0, 1200)" in code.source  # the grid comes from the config
    tuned, bound, launches = [], [], []
    real_bind_tuned, real_bind = tuned_launcher.bind_tuned_launcher, launcher.bind_launcher

    def bind_tuned(*args, **kwargs):
        tuned.append(inspect.signature(real_bind_tuned).bind(*args, **kwargs).arguments)
        return real_bind_tuned(*args, **kwargs)

    def bind(*args, **kwargs):
        index = len(bound)
        bound.append(inspect.signature(real_bind).bind(*args, **kwargs).arguments)
        launch = real_bind(*args, **kwargs)

        def recorded(grid, *launch_args):
            launches.append((index, grid, launch_args))
            launch(grid, *launch_args)

        recorded.loaded_kernel = launch.loaded_kernel
        return recorded

    monkeypatch.setattr(tuned_launcher, "bind_tuned_launcher", bind_tuned)
    monkeypatch.setattr(tuned_launcher, "bind_launcher", bind)
    _, namespace = load_module(code)
    kinds = ("tensor", "tensor", "tensor", "int")
    (binding,) = tuned
    assert (binding["kernel"], binding["device"], binding["arg_kinds"]) == (namespace[kernel.name], CUDA0, kinds)
    assert list(binding["configs"]) == kernel.configs and tuple(binding["grid"]) == ((3, "XBLOCK"),)
    # a config's checked launcher is bound when it first launches, not at load
    assert not bound
    stub.driver.param_types = ("ptr", "ptr", "ptr", "i32")
    args = (cuda_like(torch.randn(1200)), cuda_like(torch.randn(300)), cuda_like(torch.empty(1200)), 1200)
    with config.patch(autotune=False):
        for _ in range(3):
            namespace[f"launch_{kernel.name}"](*args)
    grid_x = -(-int(kernel.numel) // kernel.config.kwargs["XBLOCK"])
    # the first launch goes through the default config's checked launcher, later ones through the recorded entry
    assert launches == [(0, (grid_x, 1, 1), args)]
    pointers = [a.data_ptr() for a in args[:3]]
    assert [(d["grid"], d["params"]) for d in stub.driver.launches] == [((grid_x, 1, 1), [*pointers, 1200])] * 3
    assert len({d["function"] for d in stub.driver.launches}) == 1 and len(stub.built) == 1
    (b,) = bound  # the default config's, bound once
    c = kernel.configs[0]
    assert b["kernel"] is namespace[kernel.name] and launcher._device_index(b["device"]) == 0
    assert tuple(b["arg_kinds"]) == kinds and b["num_warps"] == c.num_warps
    assert b.get("num_stages", 1) == c.num_stages and b.get("constexprs", {}) == c.kwargs
    assert len(tuned) == 1


def test_maxnreg_reaches_the_compile_through_bound_and_tuned_launchers(stub, monkeypatch):
    """maxnreg, like num_stages, is fixed when a launcher is bound and reaches the
    compiler: through `bind_launcher`, and for a generated kernel whose configs carry
    one (`heuristics.Config.maxnreg`), through `bind_tuned_launcher`."""
    caps = []
    compile_stub = build.compile_ptx
    monkeypatch.setattr(build, "compile_ptx",
                        lambda fn, **options: caps.append(options.get("maxnreg")) or compile_stub(fn, **options))
    x, _, out = tensors()
    kinds = ("tensor", "tensor", "int", "float")
    for maxnreg in (None, 64):
        launcher.bind_launcher(axpy_kernel, 0, kinds, 4, maxnreg=maxnreg, XBLOCK=32)((1, 1, 1), x, out, 32, 1.0)
    assert caps == [None, 64] and len(stub.driver.launches) == 2
    with pytest.raises(ValueError, match="maxnreg must be None or an int"):
        launcher.bind_launcher(axpy_kernel, 0, kinds, 4, maxnreg=8, XBLOCK=32)

    pointwise = heuristics.pointwise
    monkeypatch.setattr(heuristics, "pointwise",
                        lambda *args, **kwargs: [dataclasses.replace(c, maxnreg=40) for c in pointwise(*args, **kwargs)])
    code = cuda_wrapper(lambda a: a * 3.0, (32,))
    (kernel,) = code.kernels
    assert kernel.configs and all(c.maxnreg == 40 for c in kernel.configs)
    _, namespace = load_module(code)
    stub.driver.param_types = ("ptr", "ptr", "i32")
    with config.patch(autotune=False):
        namespace[f"launch_{kernel.name}"](x, out, 32)
    assert caps[2:] == [40] and len(stub.driver.launches) == 3


@dl.kernel
def scale_kernel(x_ptr, out_ptr, n, XBLOCK: dl.constexpr):
    offs = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)
    mask = offs < n
    dl.store(out_ptr + offs, dl.load(x_ptr + offs, mask=mask, other=0.0) * 2.0, mask=mask)


def tuned_scale():
    return tuned_launcher.bind_tuned_launcher(scale_kernel, 0, ("tensor", "tensor", "int"),
                                              [heuristics.Config.of(4, XBLOCK=32)], grid=((2, "XBLOCK"),))


def test_tuned_launcher_fast_path_keys_on_alignment_and_sizes(stub):
    """After a key's first (checked) launch, later launches with the key reuse its
    loaded kernel, grid and parameter buffer; a new alignment or size is a first launch again."""
    stub.driver.param_types = ("ptr", "ptr", "i32")
    launch = tuned_scale()
    aligned, misaligned, out = tensors()
    with config.patch(autotune=False):
        for x, n in ((aligned, 32), (aligned, 32), (misaligned, 32), (aligned, 100), (aligned, 32), (misaligned, 32)):
            launch(x, out, n)
    assert [(d["grid"][0], d["params"]) for d in stub.driver.launches] == [
        (1, [aligned.data_ptr(), out.data_ptr(), 32]), (1, [aligned.data_ptr(), out.data_ptr(), 32]),
        (1, [misaligned.data_ptr(), out.data_ptr(), 32]), (4, [aligned.data_ptr(), out.data_ptr(), 100]),
        (1, [aligned.data_ptr(), out.data_ptr(), 32]), (1, [misaligned.data_ptr(), out.data_ptr(), 32]),
    ]
    functions = [d["function"] for d in stub.driver.launches]
    assert functions[0] == functions[1] == functions[4] and functions[2] == functions[5] != functions[0]
    # 32 is divisible by 16, 100 is not: three specialisations, each built once
    assert [[a.divisible_by_16 for a in spec] for spec in stub.built] == [[True, True, True], [False, True, True],
                                                                           [True, True, False]]
    assert all(d["stream"] == 0x57 and d["block"] == (128, 1, 1) for d in stub.driver.launches)


def test_tuned_launcher_fast_path_context_errors_cache_and_interpreter(stub):
    stub.driver.param_types = ("ptr", "ptr", "i32")
    launch = tuned_scale()
    x, _, out = tensors()
    with config.patch(autotune=False):
        launch(x, out, 32)
        # another context current on this thread: the kernel's is pushed around the launch, then popped
        other = stub.driver.current = type(stub.driver.primary)(0xD0)
        launch(x, out, 32)
        assert stub.driver.launches[-1]["context"] == int(stub.driver.primary) and stub.driver.current == other
        stub.driver.current = stub.driver.primary
        stub.driver.launch_result = type(stub.driver).CUresult.CUDA_ERROR_LAUNCH_FAILED
        expected = r"launching kernel 'scale_kernel' with grid \(1, 1, 1\).*LAUNCH_FAILED"
        with pytest.raises(driver.CudaDriverError, match=expected):
            launch(x, out, 32)
        stub.driver.launch_result = type(stub.driver).CUresult.CUDA_SUCCESS
        launcher.clear_memory_cache()  # the recorded entry goes too: the next launch loads from the disk cache
        launch(x, out, 32)
        assert counters["kernels_compiled"] == 1 and counters["cache_hits"] == 1
        assert stub.driver.launches[-1]["function"] != stub.driver.launches[0]["function"]
        cpu_x, cpu_out = torch.randn(40), torch.full((40,), float("nan"))
        with config.patch(interpret=True):
            launch(cpu_x, cpu_out, 40)
        torch.testing.assert_close(cpu_out, cpu_x * 2)
    assert len(stub.driver.launches) == 4
    with pytest.raises(ValueError, match="unknown argument kinds"):
        tuned_launcher.bind_tuned_launcher(scale_kernel, 0, ("tensor", "tensor", "float"),
                                           [heuristics.Config.of(4, XBLOCK=32)], grid=((2, "XBLOCK"),))
    with pytest.raises(ValueError, match=r"mutated positions \[2\] must name tensor arguments"):
        tuned_launcher.bind_tuned_launcher(scale_kernel, 0, ("tensor", "tensor", "int"),
                                           [heuristics.Config.of(4, XBLOCK=32)], grid=((2, "XBLOCK"),), mutated=(2,))
