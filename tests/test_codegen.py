"""Codegen: the DSL kernel text, the wrapper module, and running both in the DSL interpreter."""

import inspect

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._sympy.functions import FloorDiv, Max, Min, ModularIndexing

from inductor_lite.codegen.kernel import choose_block, literal
from inductor_lite.codegen.printer import kexpr, pexpr
from inductor_lite.codegen.wrapper import generate_wrapper, load_module
from inductor_lite.config import config
from inductor_lite.fx_lowering.decompositions import decomposition_table
from inductor_lite.fx_lowering.graph import GraphLowering
from inductor_lite.scheduler.scheduler import Scheduler


def build(fn, *inputs, mode="fake"):
    gm = make_fx(fn, tracing_mode=mode, decomposition_table=decomposition_table())(*inputs)
    graph = GraphLowering(gm)
    graph.run()
    sched = Scheduler(graph)
    return generate_wrapper(graph, sched, "test")


@pytest.fixture
def poison_empty(monkeypatch):
    """Allocations made by generated code start as NaN / a sentinel, so unwritten elements show."""
    original = torch.empty_strided

    def poisoned(*args, **kwargs):
        t = original(*args, **kwargs)
        return t.fill_(float("nan") if t.dtype.is_floating_point else (True if t.dtype == torch.bool else -77))

    monkeypatch.setattr(torch, "empty_strided", poisoned)


def run(code, *inputs):
    call, namespace = load_module(code)
    return call(list(inputs)), namespace


def test_kernel_text_follows_the_1d_template():
    code = build(lambda x, y: F.gelu(x + y), torch.randn(4, 8), torch.randn(8))
    (kernel,) = code.kernels
    assert kernel.name == "poi_fused_add_gelu_0"
    lines = kernel.source.splitlines()
    assert lines[0] == "@dl.kernel"
    assert lines[1] == "def poi_fused_add_gelu_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK: dl.constexpr):"
    assert lines[2] == "    # FX nodes: add, gelu"
    assert lines[3] == "    xindex = dl.program_id(0) * XBLOCK + dl.arange(0, XBLOCK)"
    assert lines[4] == "    xmask = xindex < xnumel"
    assert "    x0 = (xindex % 8)" in lines
    assert "    tmp0 = dl.load(in_ptr0 + (xindex), mask=xmask)" in lines
    assert "    tmp1 = dl.load(in_ptr1 + (x0), mask=xmask)" in lines
    assert lines[-1].startswith("    dl.store(out_ptr0 + (xindex), tmp")
    assert "dl.erf(" in kernel.source
    assert (kernel.xblock, kernel.num_warps) == (32, 1)


def test_int64_indexing_for_huge_or_symbolic_sizes():
    with torch._subclasses.FakeTensorMode():
        big = torch.empty(2 ** 31 + 8, dtype=torch.float16)
        code = build(lambda x: x * 2, big)
    assert "dl.program_id(0).to(dl.int64)" in code.kernels[0].source
    code = build(lambda x: x + torch.arange(0, 10 ** 12, 10 ** 11), torch.randn(10))
    assert "dl.program_id(0).to(dl.int64)" in code.kernels[0].source  # index values, not just offsets
    code = build(lambda x: x * 2, torch.randn(5, 3), mode="symbolic")
    (kernel,) = code.kernels
    assert "dl.program_id(0).to(dl.int64)" in kernel.source
    assert kernel.source.splitlines()[1].endswith("(in_ptr0, out_ptr0, xnumel, XBLOCK: dl.constexpr):")


def test_symbolic_sizes_become_kernel_arguments():
    code = build(lambda x, y: x + y[:, :1], torch.randn(5, 3), torch.randn(5, 4), mode="symbolic")
    (kernel,) = code.kernels
    params = kernel.source.splitlines()[1]
    assert params.startswith(f"def {kernel.name}(in_ptr0, in_ptr1, out_ptr0, xnumel, s")
    assert [kind for kind, _ in kernel.call_args][-2:] == ["expr", "expr"]


def test_block_size_choice():
    with config.patch(xblock=1024, num_warps=4):
        assert choose_block(100) == (128, 4)
        assert choose_block(5) == (8, 1)
        assert choose_block(10 ** 6) == (1024, 4)
        assert choose_block(sympy.Symbol("s0", positive=True, integer=True)) == (1024, 4)


def test_literals_and_printers():
    assert literal(float("inf"), torch.float32) == 'float("inf")'
    assert literal(float("-inf"), torch.float16) == 'float("-inf")'
    assert literal(float("nan"), torch.float32) == 'float("nan")'
    assert literal(3, torch.float32) == "3.0" and literal(2.9, torch.int64) == "2"
    assert literal(1, torch.bool) == "True"
    x = sympy.Symbol("xindex", integer=True, nonnegative=True)
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert pexpr(FloorDiv(x, 4)) == "(xindex // 4)"
    assert pexpr(ModularIndexing(x, 4, s)) == "((xindex // 4) % s0)"
    assert pexpr(s ** 2) == "(s0 * s0)"
    assert pexpr(Max(s, 3)) == "max(3, s0)" and kexpr(Min(s, 3)) == "dl.minimum(3, s0)"
    with pytest.raises(NotImplementedError):
        pexpr(x / 2)


def test_wrapper_module_runs_and_frees(poison_empty):
    fn = lambda x, w: (torch.relu((x * 2) @ w) + 1).sum(0) * (x.exp()[0, :3])  # noqa: E731
    x, w = torch.randn(4, 5), torch.randn(5, 3)
    code = build(fn, x, w)
    src = code.source
    assert "def call(args):" in src and "args.clear()" in src
    assert "aten.mm.default(" in src and "del " in src
    (out,), namespace = run(code, x.clone(), w.clone())
    torch.testing.assert_close(out, fn(x, w))
    kernel = namespace[code.kernels[0].name]
    assert "def " + code.kernels[0].name in inspect.getsource(kernel.fn)


def test_intermediates_are_neither_allocated_nor_stored(poison_empty):
    fn = lambda x: (lambda a: (a + 1, a * 2))(x.exp() * 3)  # noqa: E731
    x = torch.randn(4, 6)
    code = build(fn, x)
    assert code.source.count("empty_strided(") == 2  # the two outputs only
    (kernel,) = code.kernels
    assert kernel.source.count("dl.store(") == 2
    outs, _ = run(code, x)
    for got, expected in zip(outs, fn(x)):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_masked_loads_cat_and_pad(dtype, poison_empty):
    fn = lambda x, y: (torch.cat([x.exp(), y, x], dim=1), F.pad(x, (1, 2, 0, 1), value=-1.5))  # noqa: E731
    x, y = torch.randn(3, 4).to(dtype), torch.randn(3, 2).to(dtype)
    code = build(fn, x, y)
    assert any("mask=tmp" in k.source for k in code.kernels)
    assert not any("dl.int64" in k.source for k in code.kernels)  # small static sizes: int32 index math
    outs, _ = run(code, x, y)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for got, expected in zip(outs, fn(x, y)):
        torch.testing.assert_close(got, expected, rtol=tol, atol=tol)


def test_integer_floor_semantics(poison_empty):
    fn = lambda a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc"), a.fmod(b))  # noqa: E731
    a = torch.randint(-50, 50, (64,))
    b = torch.randint(1, 9, (64,)) * (torch.randint(0, 2, (64,)) * 2 - 1)
    code = build(fn, a, b)
    outs, _ = run(code, a, b)
    for got, expected in zip(outs, fn(a, b)):
        assert torch.equal(got, expected)


def test_zero_dim_output_store_is_a_block(poison_empty):
    fn = lambda x: x.sum() * 2 + 1  # noqa: E731
    x = torch.randn(7)
    code = build(fn, x)
    assert "dl.full([XBLOCK], 0, dl.int32)" in code.kernels[0].source
    (out,), _ = run(code, x)
    torch.testing.assert_close(out, fn(x))


def test_kernels_get_debug_dir(tmp_path):
    code = build(lambda x: x + 1, torch.randn(3))
    _, namespace = load_module(code, str(tmp_path))
    assert namespace[code.kernels[0].name].debug_dir == str(tmp_path)


def test_views_into_externs_are_reinterpret_tensor_calls():
    code = build(lambda x, w: x.t() @ w, torch.randn(5, 4), torch.randn(5, 3))
    assert "reinterpret_tensor(x_1, (4, 5), (1, 4), 0)" in code.source
    assert not code.kernels


PTX_CASES = {
    "fused_chain_fp16": (lambda x, y: F.gelu(x * y) + x, [torch.randn(8, 16).half(), torch.randn(16).half()]),
    "masked_cat_pad": (lambda x, y: (torch.cat([x, y.exp()], 1), F.pad(x, (1, 1), value=-2.0)),
                       [torch.randn(4, 3), torch.randn(4, 5)]),
    "int_floor_div_bool": (lambda a, b: (a // b, a % b, (a > b) | (b == 0)), [torch.randint(-9, 9, (40,)),
                                                                           torch.randint(1, 5, (40,))]),
    "zero_dim_store": (lambda x: x.sum() + 1, [torch.randn(5)]),
}


@pytest.mark.parametrize("name", sorted(PTX_CASES))
def test_generated_kernels_compile_to_ptx(name, monkeypatch):
    """Every kernel codegen emits goes through the NVPTX compiler and assembles for sm_80 and sm_90."""
    from inductor_lite.dsl import assembler, compiler
    from inductor_lite.dsl.kernel import Kernel

    if not assembler.can_assemble():
        pytest.skip("neither nvJitLink nor ptxas is available")
    launches = []
    original = Kernel.run

    def record(self, grid, args, constexprs, num_warps=None):
        launches.append((self, tuple(args), dict(constexprs), num_warps))
        return original(self, grid, args, constexprs, num_warps)

    monkeypatch.setattr(Kernel, "run", record)
    fn, inputs = PTX_CASES[name]
    symbolic = name == "fused_chain_fp16"
    code = build(fn, *inputs, mode="symbolic" if symbolic else "fake")
    run(code, *inputs)
    assert len(launches) == len(code.kernels) >= 1
    for kernel, args, constexprs, num_warps in launches:
        ir_fn = kernel.build_ir(kernel.specialize(args, constexprs))
        for cc in ((8, 0), (9, 0)):
            compiled = compiler.compile_ptx(ir_fn, cc=cc, num_warps=num_warps)
            assembler.check_ptx_assembles(compiled.ptx, cc)
